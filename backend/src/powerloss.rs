//! The power-loss journal: what a power loss could still take away.
//!
//! A `kill -9` leaves the page cache alone, so WAL that was written but
//! never fdatasynced survives it; a power loss does not. To simulate one,
//! the I/O seam ([`crate::walfile`]) appends to a journal, per process and
//! with `O_APPEND`, every operation whose effect is not yet durable:
//!
//! * `WRITE path offset len` with the BEFORE-image of the bytes it
//!   overwrites (appended before the write, so no write happens without its
//!   record; a record of a write that never happened undoes to what is
//!   there anyway);
//! * `SYNC path` after an fdatasync returned (every earlier write of that
//!   file, by any process, is then durable: the page cache is shared);
//! * `SYNC path offset len` with [`SYNC_RANGE`] after a write through a
//!   descriptor opened with O_DSYNC (or O_SYNC, which includes it:
//!   `wal_sync_method = open_datasync | open_sync`) returned: the kernel
//!   synced that byte range before the write returned, so every earlier
//!   write of those bytes is durable, and nothing is said of the rest of
//!   the file. The flag is read from the descriptor itself (`F_GETFL`), so
//!   the record follows what the kernel was asked, not what a setting
//!   says;
//! * `CREATE path` after a new directory entry appeared (a segment linked
//!   into place), `RENAME from to` after a rename (with the before-image of
//!   the file it replaced, if any), `DIRSYNC dir` after a directory fsync
//!   returned (every earlier entry change in `dir` is then durable).
//!
//! The order of the records errs only towards durability: a write recorded
//! before it is issued and a sync recorded after it returns can make a write
//! look synced that was not (the checker then misses a chance to find a
//! bug), never the reverse (which would report a loss that cannot happen).
//! Entry changes are recorded after they succeed; a directory fsync by
//! another process between the change and its record would make the change
//! look unsynced although it was not: the window is a few instructions and
//! the change's own process fsyncs the directory right after.
//! Removals are not recorded (the runtime removes only segments wholly
//! before the redo point), nor are writes to temporary files that are
//! synced before they are linked into place.
//!
//! Switching it on: the environment variable `WALSHM_POWERLOSS_JOURNAL`
//! (a file path), read once per process on its first I/O. Unset, the cost is
//! one load and one predictable branch per I/O syscall ([`active`]), so the
//! product build carries the journal and `walbench torture --power-loss`
//! runs on `cargo build --release` binaries.
//!
//! Record format (little-endian), one `write` per record:
//!
//! ```text
//! { magic u32 = "WPLJ" | kind u16 | path_len u16 | pid u32 | crc u32 |
//!   offset u64 | len u64 | data_len u32 | flags u32 }   (40 bytes)
//! { path bytes (RENAME: from, NUL, to) | data bytes (before-image) }
//! ```
//!
//! `crc` is CRC-32C of the header (with `crc` zero) and the payload: a
//! record cut short by a SIGKILL in the middle of its append is skipped, and
//! reading resumes at the next magic. `flags` bit 0 on RENAME: the target
//! existed and `data` holds its old contents; bit 1 on WRITE: the
//! before-image could not be read (the write cannot be undone); bit 2 on
//! SYNC: only `offset..offset+len` was synced (an O_DSYNC write).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// The environment variable naming the journal file.
pub const ENV: &str = "WALSHM_POWERLOSS_JOURNAL";
/// First four bytes of every record.
pub const MAGIC: u32 = u32::from_le_bytes(*b"WPLJ");
/// Size of the fixed record header.
pub const HEADER: usize = 40;
/// `flags` bit of a RENAME record whose target existed before.
pub const REPLACED: u32 = 1;
/// `flags` bit of a WRITE record whose before-image could not be read: the
/// write cannot be undone (the rewriter keeps it).
pub const NO_IMAGE: u32 = 2;
/// `flags` bit of a SYNC record that covers only its `offset..offset+len`
/// (a write through an O_DSYNC descriptor), not the whole file.
pub const SYNC_RANGE: u32 = 4;

shmem::code_enum! {
    /// What a record says happened.
    pub enum Kind: u16 {
        Write = 1,
        Sync = 2,
        Create = 3,
        Rename = 4,
        DirSync = 5,
    }
}

/// One decoded journal record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub pid: u32,
    /// The file (WRITE, SYNC, CREATE), the directory (DIRSYNC), or the
    /// rename's source.
    pub path: PathBuf,
    /// The rename's target.
    pub to: Option<PathBuf>,
    pub offset: u64,
    /// Bytes written (WRITE).
    pub len: u64,
    pub flags: u32,
    /// The before-image (WRITE: what `offset..offset+data.len()` held;
    /// RENAME with [`REPLACED`]: the replaced file).
    pub data: Vec<u8>,
}

impl Record {
    /// The record as appended to the journal.
    pub fn encode(&self) -> Vec<u8> {
        use std::os::unix::ffi::OsStrExt;
        let mut path = self.path.as_os_str().as_bytes().to_vec();
        if let Some(to) = &self.to {
            path.push(0);
            path.extend_from_slice(to.as_os_str().as_bytes());
        }
        let path_len = path.len().min(u16::MAX as usize);
        let mut b = Vec::with_capacity(HEADER + path_len + self.data.len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&(self.kind as u16).to_le_bytes());
        b.extend_from_slice(&(path_len as u16).to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.offset.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&(self.data.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&path[..path_len]);
        b.extend_from_slice(&self.data);
        let crc = crc32c::crc32c(&b);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes the record at the start of `b`: the record and its length,
    /// or `None` if no valid record starts there.
    pub fn decode(b: &[u8]) -> Option<(Record, usize)> {
        use std::os::unix::ffi::OsStrExt;
        if b.len() < HEADER || u32_at(b, 0) != MAGIC {
            return None;
        }
        let kind = Kind::from_code(u16::from_le_bytes([b[4], b[5]]))?;
        let path_len = u16::from_le_bytes([b[6], b[7]]) as usize;
        let data_len = u32_at(b, 32) as usize;
        let total = HEADER + path_len + data_len;
        if b.len() < total {
            return None;
        }
        let mut check = b[..total].to_vec();
        check[12..16].fill(0);
        if crc32c::crc32c(&check) != u32_at(b, 12) {
            return None;
        }
        let path = &b[HEADER..HEADER + path_len];
        let (from, to) = match (kind, path.iter().position(|&c| c == 0)) {
            (Kind::Rename, Some(i)) => (&path[..i], Some(&path[i + 1..])),
            _ => (path, None),
        };
        let os = |p: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(p));
        let rec = Record {
            kind,
            pid: u32_at(b, 8),
            path: os(from),
            to: to.map(os),
            offset: u64_at(b, 16),
            len: u64_at(b, 24),
            flags: u32_at(b, 36),
            data: b[HEADER + path_len..total].to_vec(),
        };
        Some((rec, total))
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Every valid record of a journal's bytes, in order, and how many bytes
/// were skipped (records cut short, resynchronized at the next magic).
pub fn decode_all(b: &[u8]) -> (Vec<Record>, usize) {
    let magic = MAGIC.to_le_bytes();
    let (mut out, mut skipped, mut at) = (Vec::new(), 0, 0);
    while at < b.len() {
        if let Some((rec, n)) = Record::decode(&b[at..]) {
            out.push(rec);
            at += n;
            continue;
        }
        let next = b[at + 1..]
            .windows(4)
            .position(|w| w == magic)
            .map_or(b.len(), |i| at + 1 + i);
        skipped += next - at;
        at = next;
    }
    (out, skipped)
}

/// [`STATE`]: not yet known (the environment not read yet).
const UNKNOWN: u8 = 0;
/// [`STATE`]: no journal in this process.
const OFF: u8 = 1;
/// [`STATE`]: journaling.
const ON: u8 = 2;

/// Whether this process journals, cached beside the `OnceLock` so that the
/// check of a process without a journal is one load and one branch.
/// Relaxed: it is only a hint; a reader that sees UNKNOWN or ON goes
/// through the `OnceLock`, whose own Acquire publishes the `File`.
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The journal of this process, if the environment asked for one.
fn journal() -> Option<&'static File> {
    static JOURNAL: OnceLock<Option<File>> = OnceLock::new();
    let j = JOURNAL.get_or_init(open_from_env).as_ref();
    STATE.store(if j.is_some() { ON } else { OFF }, Ordering::Relaxed);
    j
}

fn open_from_env() -> Option<File> {
    let path = std::env::var_os(ENV)?;
    match std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(f) => Some(f),
        Err(e) => {
            crate::process::log(
                "WARNING",
                &format!(
                    "could not open power-loss journal \"{}\": {e}",
                    Path::new(&path).display()
                ),
            );
            None
        }
    }
}

/// Is the journal on? One load and one predictable branch: the only cost
/// of the journal when it is off.
#[inline(always)]
pub fn active() -> bool {
    STATE.load(Ordering::Relaxed) != OFF && journal().is_some()
}

#[cold]
fn append(rec: Record) {
    let Some(j) = journal() else { return };
    // One write per record: O_APPEND keeps records of concurrent
    // processes whole; a failure only weakens the simulation.
    let _ = (&*j).write_all(&rec.encode());
}

fn record(kind: Kind, path: PathBuf) -> Record {
    Record {
        kind,
        pid: std::process::id(),
        path,
        to: None,
        offset: 0,
        len: 0,
        flags: 0,
        data: Vec::new(),
    }
}

/// The path `file` is open under (absolute), if the kernel says.
fn path_of(file: &File) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

/// `path` with its directory made absolute and canonical (the file itself
/// may not exist any more).
fn absolute(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    match path.file_name() {
        Some(name) => dir.join(name),
        None => dir,
    }
}

/// Before writing `len` bytes at `offset` of `file`: records the write with
/// the bytes it overwrites.
#[inline(always)]
pub fn before_write(file: &File, offset: u64, len: usize) {
    if active() {
        record_write(file, offset, len);
    }
}

#[cold]
fn record_write(file: &File, offset: u64, len: usize) {
    let Some(path) = path_of(file) else { return };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let have = size.saturating_sub(offset).min(len as u64) as usize;
    let mut before = vec![0u8; have];
    // WAL segments are open write-only: read through a descriptor of our own.
    let read = file
        .read_exact_at(&mut before, offset)
        .or_else(|_| File::open(&path)?.read_exact_at(&mut before, offset));
    let flags = if read.is_ok() {
        0
    } else {
        before.clear();
        NO_IMAGE
    };
    append(Record {
        offset,
        len: len as u64,
        flags,
        data: before,
        ..record(Kind::Write, path)
    });
}

/// After `len` bytes at `offset` were written to `file`: if `file` was
/// opened with O_DSYNC (O_SYNC includes the bit), the write was also a
/// sync of those bytes, recorded as a ranged SYNC.
#[inline(always)]
pub fn after_write(file: &File, offset: u64, len: usize) {
    if active() {
        record_sync_write(file, offset, len);
    }
}

#[cold]
fn record_sync_write(file: &File, offset: u64, len: usize) {
    if !shmem::sys::fd::is_dsync(file).unwrap_or(false) {
        return;
    }
    if let Some(path) = path_of(file) {
        append(Record {
            offset,
            len: len as u64,
            flags: SYNC_RANGE,
            ..record(Kind::Sync, path)
        });
    }
}

/// Is write `w` (a WRITE record) made durable by sync `s` (a SYNC record
/// of the same file)? A whole-file sync covers every earlier write; a
/// ranged one ([`SYNC_RANGE`]) the writes that lie inside its range.
pub fn sync_covers(s: &Record, w: &Record) -> bool {
    s.flags & SYNC_RANGE == 0 || (w.offset >= s.offset && w.offset + w.len <= s.offset + s.len)
}

/// After an fdatasync of `file` returned.
#[inline(always)]
pub fn after_sync(file: &File) {
    if active() {
        record_sync(file);
    }
}

#[cold]
fn record_sync(file: &File) {
    if let Some(path) = path_of(file) {
        append(record(Kind::Sync, path));
    }
}

/// After directory entry `path` was created.
#[inline(always)]
pub fn after_create(path: &Path) {
    if active() {
        append(record(Kind::Create, absolute(path)));
    }
}

/// After an fsync of directory `dir` returned.
#[inline(always)]
pub fn after_dir_sync(dir: &Path) {
    if active() {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        append(record(Kind::DirSync, dir));
    }
}

/// Renames `from` to `to` with `rename`, recording the rename (and the
/// contents of the file it replaces) when the journal is on.
#[inline(always)]
pub fn rename_with(
    from: &Path,
    to: &Path,
    rename: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    if !active() {
        return rename();
    }
    let replaced = std::fs::read(to).ok();
    let (from_abs, to_abs) = (absolute(from), absolute(to));
    rename()?;
    append(Record {
        to: Some(to_abs),
        flags: if replaced.is_some() { REPLACED } else { 0 },
        data: replaced.unwrap_or_default(),
        ..record(Kind::Rename, from_abs)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record {
                offset: 8192,
                len: 3,
                data: vec![1, 2, 3],
                ..record(Kind::Write, "/d/pg_wal/000000010000000000000001".into())
            },
            record(Kind::Sync, "/d/pg_wal/000000010000000000000001".into()),
            Record {
                to: Some("/d/global/pg_control".into()),
                flags: REPLACED,
                data: vec![9; 10],
                ..record(Kind::Rename, "/d/global/pg_control.tmp".into())
            },
            record(Kind::DirSync, "/d/global".into()),
        ]
    }

    #[test]
    fn a_ranged_sync_covers_only_the_writes_inside_it() {
        let w = |offset, len| Record {
            offset,
            len,
            ..record(Kind::Write, "/d/seg".into())
        };
        let ranged = Record {
            offset: 8192,
            len: 8192,
            flags: SYNC_RANGE,
            ..record(Kind::Sync, "/d/seg".into())
        };
        assert!(sync_covers(&ranged, &w(8192, 8192)));
        assert!(sync_covers(&ranged, &w(9000, 100)));
        assert!(!sync_covers(&ranged, &w(0, 8192)));
        assert!(!sync_covers(&ranged, &w(8000, 400)));
        assert!(sync_covers(
            &record(Kind::Sync, "/d/seg".into()),
            &w(0, 8192)
        ));
    }

    #[test]
    fn records_round_trip() {
        let recs = sample();
        let bytes: Vec<u8> = recs.iter().flat_map(Record::encode).collect();
        let (back, skipped) = decode_all(&bytes);
        assert_eq!(skipped, 0);
        assert_eq!(back, recs);
    }

    #[test]
    fn a_record_cut_short_is_skipped_and_reading_resumes() {
        let recs = sample();
        let mut bytes = recs[0].encode();
        let cut = recs[1].encode();
        bytes.extend_from_slice(&cut[..cut.len() - 5]);
        bytes.extend_from_slice(&recs[2].encode());
        let mut flipped = recs[3].encode();
        flipped[HEADER] ^= 1;
        bytes.extend_from_slice(&flipped);
        let (back, skipped) = decode_all(&bytes);
        assert_eq!(back, vec![recs[0].clone(), recs[2].clone()]);
        assert_eq!(skipped, cut.len() - 5 + flipped.len());
    }
}
