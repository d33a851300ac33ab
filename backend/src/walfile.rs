//! The I/O seam: every WAL and control-file operation of the runtime goes
//! through this module, so that fail points can be injected in one place:
//! writes, syncs, creation, reads (recovery's, the look-ahead's through
//! [`SEAM`], a [`walformat::WalFiles`]), directory listings, removals and
//! renames. Nothing in `backend/` touches a WAL or control file otherwise.
//!
//! Segments: a new segment is made as PostgreSQL's XLogFileInit does:
//! written in full with zeros to a temporary file, synced, then linked into
//! place under its final name; if another process linked it first, we use
//! theirs. So a segment under its final name always has its full size. The
//! zeros are written a WAL page at a time (see [`ZERO_CHUNK`]). With
//! `fsync = off` durability is not promised anyway, and the file is only
//! extended to its size (sparse, as PostgreSQL's `wal_init_zero = off`),
//! which halves the write volume when measuring the insert path alone.
//! Old segments are recycled by renaming them to future names.
//!
//! Modes: every file made here is created 0600 (temporary files with
//! O_EXCL after removing a stale one, so a file planted under the
//! temporary name is never written through), and a recycled segment is
//! set back to 0600 whatever mode it had, as PostgreSQL's data files.
//!
//! Fail points (compiled in only with the `failpoints` feature, which the
//! test build enables): the environment variable `WALSHM_FAILPOINTS` holds
//! `NAME=ACTION[:after=N][:once=PATH]` entries separated by `;`. NAME is one
//! of `wal_write`, `wal_fsync`, `wal_create`, `wal_read` (opening a segment
//! to read it, and each read), `wal_dir` (listing `pg_wal`, creating the
//! discard directory), `wal_remove` (removing, renaming, recycling or
//! copying aside a segment), `dir_fsync`, `control_write`, `control_fsync`,
//! `control_read`, `archive_status`; ACTION one of `eio`, `enospc`, `short` (half the bytes
//! written, then ENOSPC, as a full disk does; for an operation that writes
//! nothing, the error alone). `after=N`: fire from the (N+1)-th call of
//! this process on (a forked child inherits its parent's count);
//! `once=PATH`: fire at most once across all processes (the first to create
//! PATH fires).
//!
//! Power-loss journal: with `WALSHM_POWERLOSS_JOURNAL` set, every write,
//! fdatasync, segment link, rename and directory fsync here is also
//! recorded by [`crate::powerloss`] (one call per operation, each a single
//! predictable branch when the journal is off), for `walbench torture
//! --power-loss`.
//!
//! Test-only breakage (with `failpoints`): `WALSHM_TEST_BREAK` holds
//! comma-separated names of deliberate bugs, see [`test_break`], so the
//! torture checker can be shown to catch them.
//!
//! Sync method (`wal_sync_method`, PostgreSQL's names and meaning on
//! Linux): with `fdatasync` (default) and `fsync`, a WAL write
//! reaches the page cache and [`sync_wal`] makes it durable later (at a
//! flush, and at once for a segment written to its end). With
//! `open_datasync` / `open_sync`, [`open_or_create_segment`] opens the
//! segment with O_DSYNC / O_SYNC ([`sync_open_flag`], PostgreSQL's
//! get_sync_bit), so each [`write_at`] returns only once its bytes are
//! durable, and no sync call is ever made on that descriptor
//! ([`write_is_durable`], PostgreSQL's issue_xlog_fsync quick exit), also
//! not at a segment switch. Invariants, for every method: with
//! `fsync = off` no sync flag and no sync call; a new segment's zero fill
//! is synced (`sync_all`) before it is linked into place, whatever the
//! method (the temporary file is never opened with a sync flag: its 2,048
//! page writes would each wait for the disk); every open, write and sync
//! goes through the fail points below, so with `open_*` the `wal_write`
//! point (the write that is also the sync) is where a failed sync shows;
//! in the power-loss journal a write through a descriptor carrying
//! O_DSYNC (O_SYNC includes it) is a WRITE followed by a SYNC of exactly
//! those bytes ([`crate::powerloss::after_write`]). PostgreSQL also adds
//! O_DIRECT to the open_* flags when no WAL is read back (wal_level
//! minimal, no senders); walshm's walsenders, archiver and readers read
//! the WAL through the page cache, so it never does.
//!
//!
//! Callers' policy: a failed WAL write or fdatasync is a PANIC (the process
//! aborts, the postmaster restarts everything, recovery runs): after a failed
//! fdatasync the kernel may have dropped the dirty pages, so retrying could
//! acknowledge WAL that is not on disk. With `open_*` a failed write is
//! that failed sync, and a PANIC the same way.

use shmem::variants::WalSyncMethod;
use shmem::waitevent::{self, WaitEvent};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Zeros go to a new segment one WAL page per write. Linux (6.16 and later,
/// ext4 among others) gives page-cache folios the size of the write that
/// created them; with 1 MiB writes every later 8 KiB WAL write and its
/// writeback walk the buffer heads of a 1 MiB folio, which cost 10-15 us of
/// CPU per write-and-fdatasync here. Page-sized folios keep a commit's write
/// as cheap as the page it touches, for 2,048 writes per 16 MiB segment
/// made off the commit path.
const ZERO_CHUNK: usize = walformat::XLOG_BLCKSZ;

/// The named I/O operations a fail point can target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    WalWrite,
    WalFsync,
    WalCreate,
    WalRead,
    WalDir,
    WalRemove,
    DirFsync,
    ControlWrite,
    ControlFsync,
    ControlRead,
    /// Creating, renaming or removing an archive status file.
    ArchiveStatus,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::WalWrite => "wal_write",
            Op::WalFsync => "wal_fsync",
            Op::WalCreate => "wal_create",
            Op::WalRead => "wal_read",
            Op::WalDir => "wal_dir",
            Op::WalRemove => "wal_remove",
            Op::DirFsync => "dir_fsync",
            Op::ControlWrite => "control_write",
            Op::ControlFsync => "control_fsync",
            Op::ControlRead => "control_read",
            Op::ArchiveStatus => "archive_status",
        }
    }
}

#[cfg(feature = "failpoints")]
mod fail {
    use super::Op;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Action {
        Eio,
        Enospc,
        Short,
    }

    struct Point {
        name: String,
        action: Action,
        after: u64,
        once: Option<String>,
        calls: AtomicU64,
    }

    fn points() -> &'static Vec<Point> {
        static POINTS: OnceLock<Vec<Point>> = OnceLock::new();
        POINTS.get_or_init(|| {
            let spec = std::env::var("WALSHM_FAILPOINTS").unwrap_or_default();
            spec.split(';')
                .filter(|s| !s.trim().is_empty())
                .filter_map(parse)
                .collect()
        })
    }

    fn parse(entry: &str) -> Option<Point> {
        let (name, rest) = entry.trim().split_once('=')?;
        let mut parts = rest.split(':');
        let action = match parts.next()? {
            "eio" => Action::Eio,
            "enospc" => Action::Enospc,
            "short" => Action::Short,
            _ => return None,
        };
        let mut p = Point {
            name: name.to_string(),
            action,
            after: 0,
            once: None,
            calls: AtomicU64::new(0),
        };
        for opt in parts {
            match opt.split_once('=') {
                Some(("after", n)) => p.after = n.parse().ok()?,
                Some(("once", path)) => p.once = Some(path.to_string()),
                _ => return None,
            }
        }
        Some(p)
    }

    /// The action to inject for this call of `op`, if any.
    pub fn check(op: Op) -> Option<Action> {
        let p = points().iter().find(|p| p.name == op.name())?;
        let n = p.calls.fetch_add(1, Ordering::Relaxed);
        if n < p.after {
            return None;
        }
        if let Some(path) = &p.once {
            // Only the process that creates the marker fires.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .ok()?;
        }
        eprintln!("FAILPOINT {} fired: {:?}", op.name(), p.action);
        Some(p.action)
    }
}

/// Injected error for `op`, if a fail point says so. `short`: the caller
/// should write only half before failing.
#[cfg(feature = "failpoints")]
fn injected(op: Op) -> Option<(std::io::Error, bool)> {
    use fail::Action;
    fail::check(op).map(|a| match a {
        Action::Eio => (std::io::Error::from_raw_os_error(libc::EIO), false),
        Action::Enospc => (std::io::Error::from_raw_os_error(libc::ENOSPC), false),
        Action::Short => (std::io::Error::from_raw_os_error(libc::ENOSPC), true),
    })
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
fn injected(_op: Op) -> Option<(std::io::Error, bool)> {
    None
}

/// `Err` if a fail point says `op` fails now (for operations that write
/// nothing, so `short` is the error alone).
fn fail(op: Op) -> std::io::Result<()> {
    match injected(op) {
        Some((err, _)) => Err(err),
        None => Ok(()),
    }
}

/// Opens `path` for reading.
pub fn open_read(op: Op, path: &Path) -> std::io::Result<File> {
    fail(op)?;
    File::open(path)
}

/// Opens `path` for reading and writing (recovery cutting a torn tail).
pub fn open_read_write(op: Op, path: &Path) -> std::io::Result<File> {
    fail(op)?;
    OpenOptions::new().read(true).write(true).open(path)
}

/// The wait event published while `op`'s system call runs (PostgreSQL's
/// IO:* names), none for the operations PostgreSQL does not report.
fn io_wait_event(op: Op) -> WaitEvent {
    match op {
        Op::WalWrite => waitevent::WAL_WRITE,
        Op::WalFsync => waitevent::WAL_SYNC,
        Op::WalRead => waitevent::WAL_READ,
        Op::ControlWrite => waitevent::CONTROL_FILE_WRITE_UPDATE,
        Op::ControlFsync => waitevent::CONTROL_FILE_SYNC_UPDATE,
        _ => WaitEvent::NONE,
    }
}

/// Runs the system call `f` of `op` with its wait event published.
fn io<R>(op: Op, f: impl FnOnce() -> R) -> R {
    match io_wait_event(op) {
        WaitEvent::NONE => f(),
        ev => waitevent::during(ev, f),
    }
}

/// Fills `buf` from `offset` (a short file is an error).
pub fn read_at(op: Op, file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    fail(op)?;
    io(op, || file.read_exact_at(buf, offset))
}

/// The length of an open file (fstat).
pub fn file_len(op: Op, file: &File) -> std::io::Result<u64> {
    fail(op)?;
    file.metadata().map(|m| m.len())
}

/// The whole file at `path` (the control file).
pub fn read_file(op: Op, path: &Path) -> std::io::Result<Vec<u8>> {
    fail(op)?;
    std::fs::read(path)
}

/// The length of `path` if it is a regular file (or a symbolic link to
/// one), without opening it (a FIFO would block its reader); otherwise an
/// InvalidInput error saying what it is ("not a regular file but a
/// FIFO"), or the stat error (NotFound included).
pub fn regular_file_len(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::FileTypeExt;
    let m = std::fs::metadata(path)?;
    if m.is_file() {
        return Ok(m.len());
    }
    let t = m.file_type();
    let kind = [
        (t.is_fifo(), " but a FIFO"),
        (t.is_dir(), " but a directory"),
        (t.is_socket(), " but a socket"),
        (t.is_char_device() || t.is_block_device(), " but a device"),
    ]
    .into_iter()
    .find_map(|(is, kind)| is.then_some(kind))
    .unwrap_or_default();
    let why = format!("not a regular file{kind}");
    Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why))
}

/// The names of the entries of directory `dir`.
pub fn list_dir(op: Op, dir: &Path) -> std::io::Result<Vec<OsString>> {
    fail(op)?;
    std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect()
}

/// Creates directory `dir` and its missing parents.
pub fn create_dir_all(op: Op, dir: &Path) -> std::io::Result<()> {
    fail(op)?;
    std::fs::create_dir_all(dir)
}

/// Removes file `path`.
pub fn remove_file(op: Op, path: &Path) -> std::io::Result<()> {
    fail(op)?;
    std::fs::remove_file(path)
}

/// Removes the empty directory `dir`.
pub fn remove_dir(op: Op, dir: &Path) -> std::io::Result<()> {
    fail(op)?;
    std::fs::remove_dir(dir)
}

/// Renames `from` to `to` (replacing `to`).
pub fn rename(op: Op, from: &Path, to: &Path) -> std::io::Result<()> {
    fail(op)?;
    crate::powerloss::rename_with(from, to, || std::fs::rename(from, to))
}

/// Copies file `from` to `to` (its permissions with it).
pub fn copy_file(op: Op, from: &Path, to: &Path) -> std::io::Result<()> {
    fail(op)?;
    std::fs::copy(from, to).map(|_| ())
}

/// Creates the empty file `path` (mode 0600; an existing one is kept) and,
/// with `fsync`, fsyncs it and its directory (archive status files).
pub fn create_marker_file(path: &Path, fsync: bool) -> std::io::Result<()> {
    fail(Op::ArchiveStatus)?;
    create_empty(OpenOptions::new().create(true).truncate(false), path, fsync)
}

/// Creates the empty file `path`, failing with AlreadyExists if it exists
/// (one creator wins); with `fsync`, fsyncs it and its directory.
pub fn create_new_file(op: Op, path: &Path, fsync: bool) -> std::io::Result<()> {
    fail(op)?;
    create_empty(OpenOptions::new().create_new(true), path, fsync)
}

/// Opens `path` for writing as `how` says, mode 0600 if it creates it,
/// and with `fsync` fsyncs the file and its directory.
fn create_empty(how: &mut OpenOptions, path: &Path, fsync: bool) -> std::io::Result<()> {
    let f = how.write(true).mode(0o600).open(path)?;
    if fsync {
        f.sync_all()?;
        sync_dir(path.parent().expect("file has a directory"))?;
    }
    Ok(())
}

/// The WAL readers' file access (recovery's reader and look-ahead) through
/// this seam: every open, read and listing is a `wal_read` / `wal_dir`
/// fail point.
pub struct SeamWalFiles;

/// The one [`SeamWalFiles`], to hand to `walformat`'s readers.
pub static SEAM: SeamWalFiles = SeamWalFiles;

impl walformat::WalFiles for SeamWalFiles {
    fn open(&self, path: &Path) -> std::io::Result<File> {
        open_read(Op::WalRead, path)
    }

    fn read_to_end(&self, file: &mut File, into: &mut Vec<u8>) -> std::io::Result<usize> {
        fail(Op::WalRead)?;
        file.read_to_end(into)
    }

    fn read_exact_at(&self, file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        read_at(Op::WalRead, file, buf, offset)
    }

    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<OsString>> {
        list_dir(Op::WalDir, dir)
    }
}

/// Writes all of `bytes` at `offset` (a short write is an error).
pub fn write_at(op: Op, file: &File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    if let Some((err, short)) = injected(op) {
        if short {
            let _ = file.write_all_at(&bytes[..bytes.len() / 2], offset);
        }
        return Err(err);
    }
    crate::powerloss::before_write(file, offset, bytes.len());
    io(op, || file.write_all_at(bytes, offset))?;
    crate::powerloss::after_write(file, offset, bytes.len());
    Ok(())
}

/// fdatasync.
pub fn sync_data(op: Op, file: &File) -> std::io::Result<()> {
    sync_with(op, file, File::sync_data)
}

/// Makes the WAL written into `file` durable as `method` says: fdatasync
/// or fsync. Nothing to do for the `open_*` methods (their writes were
/// durable when they returned); callers skip the call for them
/// ([`write_is_durable`]), as PostgreSQL's issue_xlog_fsync does.
pub fn sync_wal(op: Op, file: &File, method: WalSyncMethod) -> std::io::Result<()> {
    match method {
        WalSyncMethod::Fsync => sync_with(op, file, File::sync_all),
        WalSyncMethod::Fdatasync => sync_data(op, file),
        WalSyncMethod::OpenSync | WalSyncMethod::OpenDatasync => Ok(()),
    }
}

/// The name of the system call `method` makes WAL durable with (errors).
pub fn sync_call_name(method: WalSyncMethod) -> &'static str {
    match method {
        WalSyncMethod::Fsync => "fsync",
        WalSyncMethod::Fdatasync => "fdatasync",
        WalSyncMethod::OpenSync => "write (O_SYNC)",
        WalSyncMethod::OpenDatasync => "write (O_DSYNC)",
    }
}

/// Runs the sync `f` of `file` behind `op`'s fail point, then journals it.
fn sync_with(
    op: Op,
    file: &File,
    f: impl FnOnce(&File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    if let Some((err, _)) = injected(op) {
        return Err(err);
    }
    io(op, || f(file))?;
    crate::powerloss::after_sync(file);
    Ok(())
}

/// The open(2) flag that makes each write durable under `method`
/// (PostgreSQL's get_sync_bit, without O_DIRECT: see the module header);
/// none with `fsync = off` or a method that syncs after writing.
pub fn sync_open_flag(method: WalSyncMethod, fsync: bool) -> libc::c_int {
    match method {
        _ if !fsync => 0,
        WalSyncMethod::OpenSync => libc::O_SYNC,
        WalSyncMethod::OpenDatasync => libc::O_DSYNC,
        WalSyncMethod::Fsync | WalSyncMethod::Fdatasync => 0,
    }
}

/// Is WAL durable as soon as its write returns (an `open_*` method with
/// `fsync = on`)? Then no sync call is made, nor counted.
pub fn write_is_durable(method: WalSyncMethod, fsync: bool) -> bool {
    sync_open_flag(method, fsync) != 0
}

/// Opens segment `path` for writing, creating it zero-filled if absent,
/// with `flags` ([`sync_open_flag`]) on the descriptor.
///
/// An existing file of the wrong size (truncated, or damaged) is never
/// written into: every reader refuses such a segment whole, so WAL written
/// there — acknowledged commits included — would be lost. It is renamed
/// aside (`NAME.broken`, kept for inspection) and a fresh segment created.
///
/// `first_page` is written at offset 0 of a new segment: its long page
/// header (XLogWrite rewrites the page when WAL reaches it). A segment file
/// without a valid header would make readers that take the segment size
/// from the first file they find (pg_waldump) give up.
pub fn open_or_create_segment(
    path: &Path,
    seg_size: u64,
    fsync: bool,
    flags: libc::c_int,
    first_page: &[u8],
) -> std::io::Result<File> {
    let open = || {
        OpenOptions::new()
            .write(true)
            .custom_flags(flags)
            .open(path)
    };
    match open() {
        Ok(f) if f.metadata()?.len() == seg_size => return Ok(f),
        Ok(f) => {
            let len = f.metadata()?.len();
            drop(f);
            let aside = path.with_extension("broken");
            rename(Op::WalRemove, path, &aside)?;
            crate::process::log(
                "WARNING",
                &format!(
                    "WAL segment \"{}\" has {len} bytes, expected {seg_size}: moved to \"{}\" and recreated",
                    path.display(),
                    aside.display()
                ),
            );
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    create_segment(path, seg_size, fsync, first_page)?;
    open()
}

/// Creates a zero-filled segment at `path`, beginning with `first_page`,
/// unless it already exists.
pub fn create_segment(
    path: &Path,
    seg_size: u64,
    fsync: bool,
    first_page: &[u8],
) -> std::io::Result<()> {
    if let Some((err, _)) = injected(Op::WalCreate) {
        return Err(err);
    }
    let dir = path.parent().expect("segment path has a directory");
    let tmp = dir.join(format!("xlogtemp.{}", std::process::id()));
    {
        let mut f = create_private_new(&tmp)?;
        if fsync {
            let zeros = vec![0u8; ZERO_CHUNK];
            let mut left = seg_size as usize;
            waitevent::during(waitevent::WAL_INIT_WRITE, || {
                while left > 0 {
                    let n = left.min(ZERO_CHUNK);
                    f.write_all(&zeros[..n])?;
                    left -= n;
                }
                f.write_all_at(first_page, 0)
            })?;
            waitevent::during(waitevent::WAL_INIT_SYNC, || f.sync_all())?;
        } else {
            f.set_len(seg_size)?;
            f.write_all_at(first_page, 0)?;
        }
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            crate::powerloss::after_create(path);
            if fsync && !test_break(Break::SkipDirFsync) {
                sync_dir(dir)?;
            }
            Ok(())
        }
        // Another process created it meanwhile: theirs is complete too.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes a whole small file crash-safely: temporary file, fsync, rename
/// over `path`, directory fsync (the control file). With `fsync = false`
/// (the `fsync = off` setting, which promises nothing across an OS crash)
/// the rename still makes the replacement atomic for process crashes, and
/// both fsyncs are skipped, as PostgreSQL's pg_fsync does.
pub fn write_file_atomically(path: &Path, bytes: &[u8], fsync: bool) -> std::io::Result<()> {
    let dir = path.parent().expect("file has a directory");
    let tmp = path.with_extension("tmp");
    let mut f = create_private_new(&tmp)?;
    if let Some((err, short)) = injected(Op::ControlWrite) {
        if short {
            let _ = f.write_all(&bytes[..bytes.len() / 2]);
        }
        return Err(err);
    }
    write_page_by_page(&mut f, bytes)?;
    if !fsync {
        drop(f);
        return crate::powerloss::rename_with(&tmp, path, || std::fs::rename(&tmp, path));
    }
    fail(Op::ControlFsync)?;
    f.sync_all()?;
    drop(f);
    crate::powerloss::rename_with(&tmp, path, || std::fs::rename(&tmp, path))?;
    sync_dir(dir)
}

/// Writes `bytes` at the file's position in [`ZERO_CHUNK`] pieces, so a
/// segment image (restore's first segment) gets page-sized page-cache
/// folios, as [`create_segment`] gives its zeros.
fn write_page_by_page(f: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    bytes
        .chunks(ZERO_CHUNK)
        .try_for_each(|page| f.write_all(page))
}

/// Creates `path` afresh with mode 0600 (O_EXCL), removing a leftover of
/// a crashed process first.
fn create_private_new(path: &Path) -> std::io::Result<File> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// fsyncs a directory (after creating or renaming entries in it).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fail(Op::DirFsync)?;
    File::open(dir)?.sync_all()?;
    crate::powerloss::after_dir_sync(dir);
    Ok(())
}

/// Recycles segment `old` as `new` (a future segment name); false if
/// `new` exists already. Never replaces an existing file: link, then
/// unlink, so a segment another process created (and may be writing WAL
/// into) under that name cannot be swapped for a stale one. The new name
/// is made durable at once with `fsync` (directory fsync, as PostgreSQL's
/// durable_rename does): WAL written into the segment under its new name
/// would otherwise vanish with the rename at a power loss, and with it the
/// checkpoint record recovery starts from (found by `walbench torture
/// --power-loss` with `wal_keep_size = 0`).
pub fn recycle_segment(old: &Path, new: &Path, fsync: bool) -> std::io::Result<bool> {
    fail(Op::WalRemove)?;
    let linked = crate::powerloss::rename_with(old, new, || {
        std::fs::hard_link(old, new)?;
        std::fs::remove_file(old)
    });
    match linked {
        Ok(()) => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(new, std::fs::Permissions::from_mode(0o600))?;
            if fsync {
                sync_dir(new.parent().unwrap_or(Path::new(".")))?;
            }
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// A deliberate bug for the torture checker to catch (test builds only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    /// `ack-before-fsync`: emit-tx prints its ack without waiting for the
    /// commit's flush (the walwriter flushes it later).
    AckBeforeFsync,
    /// `skip-dir-fsync`: a new segment is linked into `pg_wal` without the
    /// directory fsync.
    SkipDirFsync,
}

impl Break {
    pub fn name(self) -> &'static str {
        match self {
            Break::AckBeforeFsync => "ack-before-fsync",
            Break::SkipDirFsync => "skip-dir-fsync",
        }
    }
}

/// Is deliberate bug `b` switched on (`WALSHM_TEST_BREAK=NAME[,NAME]`)?
/// Always false without the `failpoints` feature.
#[cfg(feature = "failpoints")]
pub fn test_break(b: Break) -> bool {
    static BREAKS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BREAKS
        .get_or_init(|| std::env::var("WALSHM_TEST_BREAK").unwrap_or_default())
        .split(',')
        .any(|n| n.trim() == b.name())
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn test_break(_b: Break) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    /// PostgreSQL's get_sync_bit and issue_xlog_fsync quick exit: a flag
    /// only for open_* with fsync on, and a segment opened with it carries
    /// O_DSYNC (what the power-loss journal reads back with F_GETFL).
    #[test]
    fn open_methods_open_segments_with_a_sync_flag() {
        for (m, flag) in [
            (WalSyncMethod::Fdatasync, 0),
            (WalSyncMethod::Fsync, 0),
            (WalSyncMethod::OpenDatasync, libc::O_DSYNC),
            (WalSyncMethod::OpenSync, libc::O_SYNC),
        ] {
            assert_eq!(sync_open_flag(m, true), flag, "{m:?}");
            assert_eq!(write_is_durable(m, true), flag != 0, "{m:?}");
            assert_eq!(sync_open_flag(m, false), 0, "{m:?} with fsync = off");
            assert!(!write_is_durable(m, false), "{m:?} with fsync = off");
        }
        let dir = std::env::temp_dir().join(format!("walshm-syncflag-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let seg = dir.join("000000010000000000000001");
        for (flag, dsync) in [(0, false), (libc::O_DSYNC, true), (libc::O_SYNC, true)] {
            let f = open_or_create_segment(&seg, 1 << 16, true, flag, &[1; 8]).unwrap();
            let got = shmem::sys::fd::is_dsync(&f).unwrap();
            assert_eq!(got, dsync, "flag {flag:#x}");
            write_at(Op::WalWrite, &f, &[2; 512], 8192).unwrap();
            sync_wal(Op::WalFsync, &f, WalSyncMethod::Fsync).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_made_here_are_private() {
        let dir = std::env::temp_dir().join(format!("walshm-walfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = dir.join("000000010000000000000001");
        std::fs::write(&old, b"x").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        let new = dir.join("000000010000000000000005");
        assert!(recycle_segment(&old, &new, true).unwrap());
        assert_eq!(mode(&new), 0o600, "a recycled segment keeps a loose mode");
        // A leftover temporary file of a loose mode is replaced, not reused.
        let tmp = dir.join("pg_control.tmp");
        std::fs::write(&tmp, b"old").unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o666)).unwrap();
        let control = dir.join("pg_control");
        write_file_atomically(&control, b"data", false).unwrap();
        assert_eq!(mode(&control), 0o600);
        let seg = dir.join("000000010000000000000009");
        std::fs::write(dir.join(format!("xlogtemp.{}", std::process::id())), b"").unwrap();
        create_segment(&seg, 1 << 16, false, &[1; 8]).unwrap();
        assert_eq!(mode(&seg), 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
