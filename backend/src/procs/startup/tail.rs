//! Steps 4 and 5 of the module header of `startup`: what recovery writes
//! at the end of WAL. The cut (every non-zero byte from the end to the end
//! of its segment zeroed and synced), the fdatasync of the end's segments
//! after a crash, moving damaged WAL aside on the operator's request, and
//! shared memory set so insertion continues at the end.
//!
//! Invariants: nothing here deletes WAL (discarded segments are moved or
//! copied into `pg_wal_discarded/`); a file that is absent, or of the
//! wrong size, is left alone; every write goes through `crate::walfile`.

use super::{RecoveryResult, BLCKSZ, DISCARDED_DIR};
use crate::control::unix_now;
use crate::walfile::{self, Op};
use shmem::sync::Ordering;
use shmem::Shmem;
use std::path::{Path, PathBuf};
use walformat::{Geometry, Lsn, XLOG_BLCKSZ};

/// After a crash: fdatasyncs the segment holding the byte before `end` and
/// `end`'s own segment (unless `end_synced`: the cut synced it), so that
/// the flush result this run starts with is durable and the writer's
/// invariant (every segment below the one being written is synced) holds
/// (see the module header). Absent files are left alone.
pub(super) fn sync_end_segments(
    pg_wal: &Path,
    geo: &Geometry,
    tli: u32,
    end: Lsn,
    end_synced: bool,
) -> Result<(), String> {
    let (before, at) = (geo.seg_no(end.saturating_sub(1)), geo.seg_no(end));
    let mut segs = Vec::with_capacity(2);
    if before != at {
        segs.push(before);
    }
    if !end_synced {
        segs.push(at);
    }
    for segno in segs {
        let path = pg_wal.join(geo.file_name(tli, segno));
        match walfile::open_read(Op::WalRead, &path) {
            Ok(f) => walfile::sync_data(Op::WalFsync, &f)
                .map_err(|e| format!("could not fdatasync \"{}\": {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("could not open \"{}\": {e}", path.display())),
        }
    }
    Ok(())
}

/// Moves the WAL after `end` aside into
/// `DIR/pg_wal_discarded/<LSN as 16 hex digits>-<unix time>/`: the segment
/// holding `end` is copied whole (it stays, to be cut at `end`), every later
/// segment file of timeline `tli` is moved. Returns the directory.
pub fn discard_wal_after(
    datadir: &Path,
    geo: &Geometry,
    tli: u32,
    end: Lsn,
    fsync: bool,
) -> Result<PathBuf, String> {
    let pg_wal = datadir.join("pg_wal");
    let parent = datadir.join(DISCARDED_DIR);
    let target = parent.join(format!("{end:016X}-{}", unix_now()));
    let err = |what: &str, p: &Path, e: std::io::Error| {
        format!("could not {what} \"{}\": {e}", p.display())
    };
    walfile::create_dir_all(Op::WalDir, &target)
        .map_err(|e| err("create directory", &target, e))?;
    let end_seg = geo.seg_no(end);
    let mut later = Vec::new();
    let names =
        walfile::list_dir(Op::WalDir, &pg_wal).map_err(|e| err("read directory", &pg_wal, e))?;
    for name in names {
        let name = name.to_string_lossy().into_owned();
        match geo.parse_file_name(&name) {
            Some((t, segno)) if t == tli && segno > end_seg => later.push(name),
            _ => {}
        }
    }
    later.sort();
    let held = pg_wal.join(geo.file_name(tli, end_seg));
    if held.exists() {
        let copy = target.join(geo.file_name(tli, end_seg));
        walfile::copy_file(Op::WalRemove, &held, &copy).map_err(|e| err("copy", &held, e))?;
        if fsync {
            walfile::open_read(Op::WalRead, &copy)
                .and_then(|f| walfile::sync_data(Op::WalFsync, &f))
                .map_err(|e| err("fsync", &copy, e))?;
        }
    }
    for name in &later {
        let from = pg_wal.join(name);
        walfile::rename(Op::WalRemove, &from, &target.join(name))
            .map_err(|e| err("move", &from, e))?;
    }
    if fsync {
        for dir in [&target, &parent, &pg_wal, &datadir.to_path_buf()] {
            walfile::sync_dir(dir).map_err(|e| err("fsync directory", dir, e))?;
        }
    }
    Ok(target)
}

/// Cuts WAL at `end` on disk: zeroes every non-zero byte from `end` to the
/// end of its segment file, through the I/O seam, and fdatasyncs the file
/// if anything was written (and fsync is on). Returns the bytes zeroed. An
/// absent file, or one of the wrong size (the walwriter sets it aside), is
/// left alone.
pub fn cut_wal_at(
    pg_wal: &Path,
    geo: &Geometry,
    tli: u32,
    end: Lsn,
    fsync: bool,
) -> Result<u64, String> {
    use crate::walfile::{read_at, sync_data, write_at};
    let path = pg_wal.join(geo.file_name(tli, geo.seg_no(end)));
    let err =
        |what: &str, e: std::io::Error| format!("could not {what} \"{}\": {e}", path.display());
    let file = match walfile::open_read_write(Op::WalRead, &path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(err("open", e)),
    };
    if file.metadata().map_err(|e| err("stat", e))?.len() != geo.seg_size {
        return Ok(0);
    }
    const CHUNK: u64 = 64 * 1024;
    let zeros = vec![0u8; CHUNK as usize];
    let mut buf = vec![0u8; CHUNK as usize];
    let mut at = geo.seg_offset(end);
    let mut zeroed = 0;
    while at < geo.seg_size {
        let n = (geo.seg_size - at).min(CHUNK - at % CHUNK) as usize;
        read_at(Op::WalRead, &file, &mut buf[..n], at).map_err(|e| err("read", e))?;
        if let (Some(first), Some(last)) = (
            buf[..n].iter().position(|&b| b != 0),
            buf[..n].iter().rposition(|&b| b != 0),
        ) {
            write_at(
                Op::WalWrite,
                &file,
                &zeros[..last + 1 - first],
                at + first as u64,
            )
            .map_err(|e| err("write zeros to", e))?;
            zeroed += (last + 1 - first) as u64;
        }
        at += n as u64;
    }
    if zeroed > 0 && fsync {
        sync_data(Op::WalFsync, &file).map_err(|e| err("fdatasync", e))?;
    }
    Ok(zeroed)
}

/// Sets shared memory up so insertion continues at the end of valid WAL.
pub fn install_end_of_wal(
    shm: &Shmem,
    datadir: &Path,
    geo: &Geometry,
    tli: u32,
    r: &RecoveryResult,
) -> Result<(), String> {
    let x = shm.xlog();
    let end = r.end_of_wal;
    let end_pos = geo.recptr_to_bytepos(end);
    let prev_pos = geo.recptr_to_bytepos(r.last_record);
    // Orderings: this process runs alone, and the postmaster forks the
    // processes that read what we set here only after reaping us (waitpid
    // and fork order every store before them), so every store below is
    // Relaxed except these two: curr_byte_pos keeps the Release of
    // `xlog::reserve` (partner: the Acquire load in xlog's reserved_bytepos);
    // prev_byte_pos's Release pairs with nothing (it is read under the
    // insert spinlock) and is harmless.
    x.insert.curr_byte_pos.store(end_pos, Ordering::Release);
    x.insert.prev_byte_pos.store(prev_pos, Ordering::Release);
    shmem::prevlink::seed(shm.prev_links(), prev_pos, end_pos);

    let page_start = end - end % BLCKSZ;
    if !end.is_multiple_of(BLCKSZ) {
        // Load the partial last page; zero what follows the end of WAL.
        let n_buffers = shm.layout().n_buffers as u64;
        let idx = ((page_start / BLCKSZ) % n_buffers) as usize;
        let segno = geo.seg_no(page_start);
        let path = datadir.join("pg_wal").join(geo.file_name(tli, segno));
        let file = walfile::open_read(Op::WalRead, &path)
            .map_err(|e| format!("could not open {}: {e}", path.display()))?;
        // SAFETY: the startup process is the only process attached to the
        // segment now; buffer `idx` is 8 KiB inside the mapping.
        let page = unsafe { std::slice::from_raw_parts_mut(shm.wal_page(idx), XLOG_BLCKSZ) };
        walfile::read_at(Op::WalRead, &file, page, geo.seg_offset(page_start)).map_err(|e| {
            format!(
                "could not read {} at {}: {e}",
                path.display(),
                geo.seg_offset(page_start)
            )
        })?;
        page[(end % BLCKSZ) as usize..].fill(0);
        shm.xlblocks()[idx].store(page_start + BLCKSZ, Ordering::Relaxed);
        x.bufmap
            .initialized_up_to
            .store(page_start + BLCKSZ, Ordering::Relaxed);
    } else {
        x.bufmap.initialized_up_to.store(end, Ordering::Relaxed);
    }
    x.write.write_result.store(end, Ordering::Relaxed);
    x.write.flush_result.store(end, Ordering::Relaxed);
    x.write.req_write.store(end, Ordering::Relaxed);
    x.write.req_flush.store(end, Ordering::Relaxed);
    Ok(())
}
