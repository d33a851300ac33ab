//! WAL segment files: creation and opening. Every WAL file operation of the
//! runtime goes through this module (the I/O seam).
//!
//! A new segment is made as PostgreSQL's XLogFileInit does: written in full
//! with zeros to a temporary file, synced, then linked into place under its
//! final name; if another process linked it first, we use theirs. So a
//! segment under its final name always has its full size. With `fsync = off`
//! durability is not promised anyway, and the file is only extended to its
//! size (sparse, as PostgreSQL's `wal_init_zero = off`), which halves the
//! write volume when measuring the insert path alone.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

const ZERO_CHUNK: usize = 1 << 20;

/// Opens segment `path` for writing, creating it zero-filled if absent.
pub fn open_or_create_segment(path: &Path, seg_size: u64, fsync: bool) -> std::io::Result<File> {
    match OpenOptions::new().write(true).open(path) {
        Ok(f) => return Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    create_segment(path, seg_size, fsync)?;
    OpenOptions::new().write(true).open(path)
}

/// Creates a zero-filled segment at `path` unless it already exists.
pub fn create_segment(path: &Path, seg_size: u64, fsync: bool) -> std::io::Result<()> {
    let dir = path.parent().expect("segment path has a directory");
    let tmp = dir.join(format!("xlogtemp.{}", std::process::id()));
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        if fsync {
            let zeros = vec![0u8; ZERO_CHUNK];
            let mut left = seg_size as usize;
            while left > 0 {
                let n = left.min(ZERO_CHUNK);
                f.write_all(&zeros[..n])?;
                left -= n;
            }
            f.sync_all()?;
        } else {
            f.set_len(seg_size)?;
        }
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            if fsync {
                sync_dir(dir)?;
            }
            Ok(())
        }
        // Another process created it meanwhile: theirs is complete too.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// fsyncs a directory (after creating or renaming entries in it).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}
