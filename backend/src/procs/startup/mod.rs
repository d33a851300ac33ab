//! The startup process: finds the end of valid WAL and prepares shared
//! memory so that insertion continues exactly there (StartupXLOG, reduced to
//! what a log without data pages needs: there is nothing to redo, only to
//! validate and to find the end).
//!
//! Steps:
//! 1. read the control file; read the checkpoint record it names;
//! 2. read forward record by record, validating page headers, lengths,
//!    `xl_prev` and CRC, until a clean end or the first invalid record: X;
//! 3. look ahead past X ([`walformat::look_ahead`]) and judge what follows
//!    ([`walformat::Verdict`]): nothing valid is the end of WAL; valid WAL
//!    only inside the unsynced window (the rest of X's segment, see
//!    "Power-loss tails" below) is a possible power-loss tail: recovery ends
//!    at X as for a torn tail, with a WARNING naming X, the first valid
//!    record after it and the window; valid WAL beyond the window (or a
//!    misplaced page) means X is damage, not a torn tail. Then refuse to
//!    start (exit [`EXIT_WAL_DAMAGED`]) without writing a byte anywhere
//!    (pg_wal and the control file stay as they were), unless the operator
//!    passed `--discard-damaged-wal`: then the WAL after X is moved aside
//!    into `pg_wal_discarded/` (never deleted) and startup goes on;
//! 4. cut the WAL at X on disk: zero every non-zero byte from X to the end
//!    of X's segment file and fdatasync it (fsync = on), so neither a torn
//!    tail, nor a power-loss tail, nor a discarded stretch can be read as
//!    WAL again; after a crash, also fdatasync X's segment (if the cut did
//!    not) and the one before it when X is at a segment start (see below);
//! 5. set the insert position after the last valid record, load the partial
//!    last page into its WAL buffer with everything after the end zeroed,
//!    and set the write/flush results to the end.
//!
//! With `DIR/recovery.signal` (a directory restored by `init --from-wal`)
//! this is archive recovery (`crate::restore`): `restore_command` first
//! fetches the segments (the archive before pg_wal, as PostgreSQL), WAL
//! is read along the timeline's history, and after step 4 recovery ends on a new timeline (history
//! file, the switch segment's prefix copied, an end-of-recovery
//! checkpoint); step 5 then continues after that checkpoint. A delivered
//! file that is not what was asked for (another segment, system or
//! timeline; an invalid history file) or a new timeline ID that would
//! leave the valid range is FATAL (exit `EXIT_FATAL`, before anything of a
//! new timeline is written). A fast shutdown (the postmaster's SIGTERM,
//! [`crate::process::shutdown_requested`]) stops the fetches between two
//! commands: the process logs it and exits [`EXIT_SHUTDOWN`] with
//! `recovery.signal` and the control file untouched, so the next start
//! resumes archive recovery; the postmaster then ends its shutdown. Crash
//! recovery has no such loop and runs to its end.
//!
//! Point-in-time recovery. In archive recovery with a recovery target
//! (`crate::recovery_target`: `recovery_target_lsn`, `_time`, `_xid`,
//! `_name`), step 2 also asks the target about each record and stops at
//! it: the end of WAL is then the end of the last record kept. Steps 3
//! and 4 are skipped (what follows is valid WAL of the old timeline, not a
//! tail; it stays, in the `.partial` switch segment and the later
//! segments). `recovery_target_action = promote` ends recovery there on a
//! new timeline as above (the history line names the target); `shutdown`
//! and `pause` (walshm has no hot standby: PostgreSQL's `pause` with
//! hot_standby = off) write nothing and exit [`EXIT_TARGET_SHUTDOWN`],
//! which the postmaster takes for a clean shutdown, `recovery.signal`
//! kept. A target never reached, or one before the checkpoint recovery
//! starts from, is FATAL with nothing written.
//!
//! With `DIR/standby.signal` (a standby) the process does not end after
//! step 4: `crate::standby` follows the walreceiver's WAL until a
//! promotion, then recovery ends as archive recovery does, on a new
//! timeline.
//!
//! Base backups. A copy made by BASE_BACKUP (`pg_basebackup`) holds a
//! `backup_label` naming the checkpoint the backup started from; its
//! control file, copied last, may name a later one. Before step 1 the
//! startup process makes the control file name the label's checkpoint and
//! redo point, "in crash recovery", writes it, and renames the label to
//! `backup_label.old` (PostgreSQL's order: once the control file names the
//! label's checkpoint the label is not needed, and a crash after the
//! rename restarts from the same checkpoint). Recovery is then crash
//! recovery from there, with its end-of-recovery checkpoint.
//!
//! Only the tail of WAL may be unreadable after a crash: WAL reaches disk
//! in LSN order, so a stop followed by valid WAL (a flipped byte, a zeroed
//! range, a missing, truncated, swapped or foreign segment before the end)
//! means that taking X as the end would overwrite acknowledged commits.
//!
//! Power-loss tails. A power loss may drop or tear unsynced writes in any
//! order, so a torn page at X can be followed by a later unsynced page that
//! survived; nothing in it was acknowledged. The writer (`crate::xlog`)
//! fdatasyncs each segment before it writes a byte of the next, so all
//! written but unsynced WAL lies in one segment, and so does X and any
//! such page after it: the window is the rest of X's segment
//! (`walformat::unsynced_window_end`; not `wal_buffers`, which a backend
//! writing only to free a buffer can outrun by up to a segment without a
//! sync). Cost: media damage inside the last segment of WAL is taken for a
//! torn tail, and what follows it in that segment (acknowledged commits
//! included) is zeroed, which is what PostgreSQL does for all damage;
//! damage in an earlier segment is still refused. With `fsync = off`
//! nothing is promised: a power loss can then also leave WAL beyond the
//! window, which is refused like damage.
//!
//! Keeping that bound across crash restarts: a `kill -9` between the write
//! of a segment's last page and its fdatasync leaves that segment unsynced
//! in the page cache, where recovery reads it whole; if WAL ends exactly at
//! its end (a switch record, an exact fit), X is the next segment's start
//! and the next run would write that segment while the previous one is
//! still unsynced. So after a crash, with fsync = on, startup fdatasyncs
//! the segment holding the byte before X and X's own segment (PostgreSQL
//! fsyncs all of pg_wal after a crash, `SyncDataDirectory`); every earlier
//! segment was synced by the crashed run's writer. This also makes the
//! flush result step 5 sets (X) true: it is on disk.
//!
//! 6. after a crash (not after a clean shutdown, nor in archive recovery,
//!    which ends with its own end-of-recovery checkpoint), write an
//!    end-of-recovery checkpoint as PostgreSQL does (CreateCheckPoint with
//!    CHECKPOINT_END_OF_RECOVERY): a CHECKPOINT_SHUTDOWN record at the end
//!    of WAL, flushed, named by the control file as checkpoint and redo.
//!    No transaction the crash cut off can be open after it, and the next
//!    recovery starts there.
//!
//! Invariant on exit 0: `curr_byte_pos` is the end of valid WAL,
//! (after a crash: the end of the end-of-recovery checkpoint record),
//! `prev_byte_pos` the start of the last valid record, the buffers hold
//! the page the next record goes to, and no byte after the end in its
//! segment file is non-zero.

use crate::control::{unix_now, ControlFile, DbState};
use crate::process::log;
use crate::recovery_target::{Reached, RecoveryTarget};
use crate::restore;
use crate::walfile::{self, Op};
use shmem::sync::Ordering;
use shmem::variants::RecoveryTargetAction;
use shmem::Shmem;
use std::fmt;
use std::path::{Path, PathBuf};
use walformat::{
    format_lsn, Geometry, Lookahead, Lsn, ValidWalAfter, Verdict, WalError, WalReader, XLOG_BLCKSZ,
};

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

/// Exit status of a startup process (and of the postmaster) that refused to
/// start because WAL is damaged before its end.
pub const EXIT_WAL_DAMAGED: i32 = 3;

/// Exit status of a startup process that stopped archive recovery at a
/// shutdown request (the postmaster's "quit on request").
pub const EXIT_SHUTDOWN: i32 = crate::process::EXIT_QUIT;

/// Exit status of a startup process that stopped archive recovery at its
/// recovery target with `recovery_target_action` `shutdown` (or `pause`):
/// the postmaster shuts down cleanly (PostgreSQL's startup exits 3 there;
/// 3 is walshm's [`EXIT_WAL_DAMAGED`]).
pub const EXIT_TARGET_SHUTDOWN: i32 = 4;

/// Where discarded WAL goes, under the data directory.
pub const DISCARDED_DIR: &str = "pg_wal_discarded";

/// What the operator allowed for this startup.
#[derive(Clone, Copy, Debug, Default)]
pub struct StartupOptions {
    /// `--discard-damaged-wal`: accept losing the WAL after damage.
    pub discard_damaged_wal: bool,
}

/// Why reading WAL stopped.
#[derive(Debug)]
pub enum StopReason {
    /// Zero length, zeroed page or absent next segment.
    CleanEnd,
    /// The first invalid record (or page, or segment), as the reader says.
    Invalid(WalError),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::CleanEnd => f.write_str("clean end of WAL"),
            StopReason::Invalid(e) => write!(f, "invalid record: {e}"),
        }
    }
}

/// Why recovery could not find a starting point in WAL.
#[derive(Debug)]
pub enum ScanError {
    /// The control file's segment size is not a valid geometry.
    BadGeometry(walformat::FormatError),
    /// The timeline's history file cannot be read or parsed.
    History(String),
    /// The checkpoint record's segment cannot be opened.
    CheckpointUnreadable { checkpoint: Lsn, error: WalError },
    /// A valid record is at the checkpoint's position, but not a checkpoint.
    NotTheCheckpoint {
        checkpoint: Lsn,
        found: Lsn,
        what: String,
    },
    /// WAL ends before the checkpoint record.
    NoCheckpoint { checkpoint: Lsn },
    /// The checkpoint record is invalid.
    InvalidCheckpoint { checkpoint: Lsn, error: WalError },
    /// The redo point's segment cannot be opened.
    RedoUnreadable { redo: Lsn, error: WalError },
    /// Reading from the redo point stopped before the checkpoint record.
    DamagedBeforeCheckpoint {
        redo: Lsn,
        checkpoint: Lsn,
        stop: StopReason,
    },
    /// The recovery target was reached before the checkpoint record.
    TargetBeforeCheckpoint { checkpoint: Lsn, record: Lsn },
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanError::BadGeometry(e) => write!(f, "{e}"),
            ScanError::History(e) => write!(f, "{e}"),
            ScanError::CheckpointUnreadable { checkpoint, error } => write!(
                f,
                "could not locate a valid checkpoint record at {}: {error}",
                format_lsn(*checkpoint)
            ),
            ScanError::NotTheCheckpoint {
                checkpoint,
                found,
                what,
            } => write!(
                f,
                "record at {} is not the checkpoint the control file names ({what}; checkpoint at {})",
                format_lsn(*found),
                format_lsn(*checkpoint)
            ),
            ScanError::NoCheckpoint { checkpoint } => {
                write!(f, "no checkpoint record at {}", format_lsn(*checkpoint))
            }
            ScanError::InvalidCheckpoint { checkpoint, error } => write!(
                f,
                "invalid checkpoint record at {}: {error}",
                format_lsn(*checkpoint)
            ),
            ScanError::RedoUnreadable { redo, error } => write!(
                f,
                "could not read WAL at redo point {}: {error}",
                format_lsn(*redo)
            ),
            ScanError::DamagedBeforeCheckpoint {
                redo,
                checkpoint,
                stop,
            } => {
                let why = match stop {
                    StopReason::CleanEnd => "it ends early".to_string(),
                    StopReason::Invalid(e) => e.to_string(),
                };
                write!(
                    f,
                    "WAL between redo point {} and checkpoint {} is damaged: {why}",
                    format_lsn(*redo),
                    format_lsn(*checkpoint)
                )
            }
            ScanError::TargetBeforeCheckpoint { checkpoint, record } => write!(
                f,
                "requested recovery stop point is before consistent recovery point: the target is reached at {}, before the checkpoint at {} that recovery starts from",
                format_lsn(*record),
                format_lsn(*checkpoint)
            ),
        }
    }
}

impl std::error::Error for ScanError {}

/// What recovery found.
#[derive(Debug)]
pub struct RecoveryResult {
    /// Start of the last valid record.
    pub last_record: Lsn,
    /// Where the next record goes.
    pub end_of_wal: Lsn,
    pub records: u64,
    /// Highest XID seen in a record, 0 if none.
    pub max_xid: u32,
    /// Why reading stopped.
    pub stop_reason: StopReason,
    /// Where reading stopped for the recovery target, if it did.
    pub reached: Option<Reached>,
}

impl RecoveryResult {
    /// Takes `r` as the last valid record.
    fn keep(&mut self, r: &walformat::DecodedRecord) {
        self.last_record = r.lsn;
        self.end_of_wal = r.next;
        self.records += 1;
        if r.xid != 0 && (self.max_xid == 0 || crate::procarray::xid_precedes(self.max_xid, r.xid))
        {
            self.max_xid = r.xid;
        }
    }
}

/// Reads the checkpoint record the control file names, then WAL from its
/// redo point to the end, or to `target` (see the module header).
pub fn scan_wal(
    datadir: &Path,
    control: &ControlFile,
    target: Option<&RecoveryTarget>,
) -> Result<RecoveryResult, ScanError> {
    let geo = Geometry::new(control.seg_size).map_err(ScanError::BadGeometry)?;
    let pg_wal = datadir.join("pg_wal");
    let checkpoint = control.checkpoint;
    // Along the timeline's history: a restored directory's redo point may
    // lie in a parent timeline's segment.
    let history = crate::timeline::Timeline::read(&pg_wal, control.timeline)
        .map(|t| t.reader_history())
        .map_err(|e| ScanError::History(e.to_string()))?;
    let open = |at: Lsn| {
        WalReader::open_across(
            &walfile::SEAM,
            &pg_wal,
            geo,
            history.clone(),
            Some(control.system_identifier),
            at,
        )
    };
    let unreadable = |error| ScanError::CheckpointUnreadable { checkpoint, error };
    let mut reader = open(checkpoint).map_err(unreadable)?;
    match reader.next_record() {
        Ok(Some(r)) if r.lsn == checkpoint && r.as_checkpoint().is_some() => {}
        Ok(Some(r)) => {
            return Err(ScanError::NotTheCheckpoint {
                checkpoint,
                found: r.lsn,
                what: format!("{} {}", r.rmgr_name(), r.describe()),
            })
        }
        Ok(None) => return Err(ScanError::NoCheckpoint { checkpoint }),
        Err(error) => return Err(ScanError::InvalidCheckpoint { checkpoint, error }),
    }
    reader = if control.redo != checkpoint {
        open(control.redo).map_err(|error| ScanError::RedoUnreadable {
            redo: control.redo,
            error,
        })?
    } else {
        open(checkpoint).map_err(unreadable)?
    };
    let mut result = RecoveryResult {
        last_record: checkpoint,
        end_of_wal: checkpoint,
        records: 0,
        max_xid: 0,
        stop_reason: StopReason::CleanEnd,
        reached: None,
    };
    let mut saw_checkpoint = false;
    while result.reached.is_none() {
        match reader.next_record() {
            Ok(Some(r)) => {
                result.reached = target.and_then(|t| t.stops_before(&r));
                if result.reached.is_none() {
                    saw_checkpoint |= r.lsn == checkpoint;
                    result.keep(&r);
                    result.reached = target.and_then(|t| t.stops_after(&r));
                }
            }
            Ok(None) => break,
            Err(e) => {
                result.stop_reason = StopReason::Invalid(e);
                break;
            }
        }
    }
    if let (Some(reached), false) = (&result.reached, saw_checkpoint) {
        return Err(ScanError::TargetBeforeCheckpoint {
            checkpoint,
            record: reached.record,
        });
    }
    if !saw_checkpoint {
        return Err(ScanError::DamagedBeforeCheckpoint {
            redo: control.redo,
            checkpoint,
            stop: result.stop_reason,
        });
    }
    Ok(result)
}

/// Looks for valid WAL after where reading stopped (see the module header).
pub fn look_ahead(
    datadir: &Path,
    control: &ControlFile,
    r: &RecoveryResult,
) -> Result<Lookahead, WalError> {
    let geo = Geometry::new(control.seg_size).expect("validated by scan_wal");
    walformat::look_ahead_from(
        &walfile::SEAM,
        &datadir.join("pg_wal"),
        geo,
        control.timeline,
        control.system_identifier,
        r.end_of_wal,
    )
}

/// Where WAL position `lsn` is on disk: segment file name and offset.
fn file_and_offset(geo: &Geometry, tli: u32, lsn: Lsn) -> (String, u64) {
    (geo.file_name(tli, geo.seg_no(lsn)), geo.seg_offset(lsn))
}

/// The FATAL report of a refusal: where reading stopped and why, what valid
/// WAL follows, and what the operator can do.
fn damaged_wal_message(
    datadir: &Path,
    geo: &Geometry,
    tli: u32,
    r: &RecoveryResult,
    found: &ValidWalAfter,
) -> String {
    let (file, offset) = file_and_offset(geo, tli, r.end_of_wal);
    format!(
        "WAL is damaged before its end: reading stopped at {} (WAL segment {file}, offset {offset}): {}; \
         but valid WAL of this system follows: {} record(s), {} of them COMMIT, from {} (WAL segment {}, offset {}) up to {}. \
         Starting would overwrite it, so the server does not start and has changed nothing. \
         HINT: restore the damaged or missing segment from a copy (a backup, pg_receivewal's output) and start again; \
         or accept losing the WAL after {} with \"postmaster start -D {} --discard-damaged-wal\", which moves it to {}/{DISCARDED_DIR}/ (never deleted)",
        format_lsn(r.end_of_wal),
        r.stop_reason,
        found.records,
        found.commits,
        format_lsn(found.first_record),
        found.first_file,
        found.first_offset,
        format_lsn(found.last_end),
        format_lsn(r.end_of_wal),
        datadir.display(),
        datadir.display()
    )
}

/// The WARNING of a power-loss tail: where reading stopped, the first valid
/// record after it, and the window it lies in.
fn power_loss_tail_message(
    geo: &Geometry,
    tli: u32,
    r: &RecoveryResult,
    ahead: &Lookahead,
    found: &ValidWalAfter,
) -> String {
    let (file, offset) = file_and_offset(geo, tli, r.end_of_wal);
    format!(
        "WAL ends at {} (WAL segment {file}, offset {offset}): {}; valid WAL follows only inside the unsynced window {}..{} (the rest of that segment): \
         {} record(s), {} of them COMMIT, the first at {} (WAL segment {}, offset {}), up to {}. \
         Taken for a power-loss tail (written, never fdatasynced, so never acknowledged): recovery ends at {} and the tail is zeroed. \
         Media damage inside the last segment of WAL looks the same",
        format_lsn(r.end_of_wal),
        r.stop_reason,
        format_lsn(r.end_of_wal),
        format_lsn(ahead.window_end),
        found.records,
        found.commits,
        format_lsn(found.first_record),
        found.first_file,
        found.first_offset,
        format_lsn(found.last_end),
        format_lsn(r.end_of_wal),
    )
}

/// After a crash: fdatasyncs the segment holding the byte before `end` and
/// `end`'s own segment (unless `end_synced`: the cut synced it), so that
/// the flush result this run starts with is durable and the writer's
/// invariant (every segment below the one being written is synced) holds
/// (see the module header). Absent files are left alone.
fn sync_end_segments(
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

/// The startup process body. Returns the process exit code: 0, or
/// [`EXIT_WAL_DAMAGED`] (refused: WAL damaged before its end, nothing
/// changed), or [`EXIT_SHUTDOWN`] (archive recovery stopped at a shutdown
/// request), or `EXIT_FATAL`.
pub fn run(shm: &Shmem, datadir: &Path, opts: StartupOptions) -> i32 {
    let procno = shm.aux_procno(shmem::segment::AuxProc::Startup);
    let _stats = shmem::stats::enter_proc(shm, procno, shmem::stats::BackendType::Startup);
    match recover(shm, datadir, opts) {
        Ok(()) => 0,
        Err(code) => code,
    }
}

/// Logs a FATAL `msg`; the error value of [`recover`].
fn fatal(msg: &str) -> i32 {
    log("FATAL", msg);
    crate::process::EXIT_FATAL
}

/// Steps 1-5 of the module header; `Err` holds the exit code (the reason
/// is logged already).
fn recover(shm: &Shmem, datadir: &Path, opts: StartupOptions) -> Result<(), i32> {
    let mut control = ControlFile::read(datadir).map_err(|e| fatal(&e.to_string()))?;
    let fsync = shm.settings().fsync;
    if let Some(l) = read_backup_label(datadir).map_err(|e| fatal(&e))? {
        control = adopt_backup_label(datadir, control, &l, fsync)?;
    }
    // A standby ends its recovery as archive recovery does (crate::standby).
    let standby = crate::standby::requested(datadir);
    let archive_recovery = restore::requested(datadir) || standby;
    let mut target = None;
    if archive_recovery && !standby {
        target = recovery_target(shm)?;
        begin_archive_recovery(shm, datadir, &control)?;
    }
    let crashed = control.state != DbState::ShutDown && !archive_recovery;
    if crashed {
        log(
            "LOG",
            &format!(
                "database system was interrupted while {}; last known up at {} (unix time); automatic recovery in progress",
                control.state.name(),
                control.time
            ),
        );
    }
    log(
        "LOG",
        &format!("redo starts at {}", format_lsn(control.redo)),
    );
    let started = std::time::Instant::now();
    let r = scan_wal(datadir, &control, target.as_ref()).map_err(|e| fatal(&e.to_string()))?;
    let geo = Geometry::new(control.seg_size).expect("validated by scan_wal");
    if let (Some(t), Some(reached)) = (&target, &r.reached) {
        // See "Point-in-time recovery" in the module header: the WAL
        // after the target is neither looked at nor cut.
        log("LOG", &reached.message);
        if t.action != RecoveryTargetAction::Promote {
            return Err(shutdown_at_target(t.action, r.end_of_wal));
        }
        crate::procarray::restore_next_xid(shm, control.next_xid, r.max_xid);
        return finish_archive_recovery(shm, datadir, &control, &geo, r, started);
    }
    let tli = control.timeline;
    // Nothing is written before this decision: a refusal leaves pg_wal and
    // the control file byte for byte as they were.
    let ahead_started = std::time::Instant::now();
    let ahead = look_ahead(datadir, &control, &r).map_err(|e| {
        fatal(&format!(
            "could not look for valid WAL after {}: {e}",
            format_lsn(r.end_of_wal)
        ))
    })?;
    let ahead_elapsed = ahead_started.elapsed();
    let verdict = ahead.verdict();
    if let (Verdict::PowerLossTail, Some(found)) = (verdict, &ahead.found) {
        log(
            "WARNING",
            &power_loss_tail_message(&geo, tli, &r, &ahead, found),
        );
    }
    if let (Verdict::Damaged, Some(found)) = (verdict, &ahead.found) {
        if !opts.discard_damaged_wal {
            log("FATAL", &damaged_wal_message(datadir, &geo, tli, &r, found));
            return Err(EXIT_WAL_DAMAGED);
        }
        let dir =
            discard_wal_after(datadir, &geo, tli, r.end_of_wal, fsync).map_err(|e| fatal(&e))?;
        log(
            "WARNING",
            &format!(
                "--discard-damaged-wal: discarded WAL from {} to {} ({} valid record(s), {} COMMIT record(s) found in it; reading had stopped: {}); moved to \"{}\"",
                format_lsn(r.end_of_wal),
                format_lsn(found.last_end),
                found.records,
                found.commits,
                r.stop_reason,
                dir.display()
            ),
        );
    }
    if target.is_some() {
        return Err(fatal(&format!(
            "recovery ended before configured recovery target was reached (end of WAL at {}: {}); \"{}\" stays, nothing was written",
            format_lsn(r.end_of_wal),
            r.stop_reason,
            restore::RECOVERY_SIGNAL
        )));
    }
    if crashed {
        let mut c = control;
        c.state = DbState::InCrashRecovery;
        c.write(datadir, fsync).map_err(|e| fatal(&e.to_string()))?;
    }
    let zeroed = cut_wal_at(&datadir.join("pg_wal"), &geo, tli, r.end_of_wal, fsync)
        .map_err(|e| fatal(&e))?;
    if crashed && fsync {
        sync_end_segments(&datadir.join("pg_wal"), &geo, tli, r.end_of_wal, zeroed > 0)
            .map_err(|e| fatal(&e))?;
    }
    log(
        "LOG",
        &format!(
            "look-ahead after {}: {} page header(s) in {} file(s) examined in {:.3} s, {}; {zeroed} byte(s) after it zeroed on disk",
            format_lsn(r.end_of_wal),
            ahead.pages,
            ahead.files,
            ahead_elapsed.as_secs_f64(),
            match verdict {
                Verdict::EndOfWal => "no valid WAL follows",
                Verdict::PowerLossTail => "valid WAL only inside the unsynced window (taken for a power-loss tail)",
                Verdict::Damaged => "valid WAL discarded",
            },
        ),
    );
    crate::procarray::restore_next_xid(shm, control.next_xid, r.max_xid);
    if standby {
        // The timeline may have moved on with the primary's.
        let (r, control) = crate::standby::follow(shm, datadir, &control, &geo, r)?;
        finish_archive_recovery(shm, datadir, &control, &geo, r, started)?;
        crate::standby::promoted(shm, datadir);
        return Ok(());
    }
    if archive_recovery {
        return finish_archive_recovery(shm, datadir, &control, &geo, r, started);
    }
    install_end_of_wal(shm, datadir, &geo, tli, &r).map_err(|e| fatal(&e))?;
    log(
        "LOG",
        &format!(
            "redo done at {}: {} records in {:.3} s; end of WAL at {} ({})",
            format_lsn(r.last_record),
            r.records,
            started.elapsed().as_secs_f64(),
            format_lsn(r.end_of_wal),
            r.stop_reason,
        ),
    );
    if crashed {
        end_of_recovery_checkpoint(shm, datadir);
        return Ok(());
    }
    shm.xlog()
        .checkpointer
        .last_redo
        // Relaxed: published to later processes by fork (see install_end_of_wal).
        .store(control.redo, Ordering::Relaxed);
    let mut c = control;
    c.state = DbState::InProduction;
    c.time = unix_now();
    c.write(datadir, fsync).map_err(|e| fatal(&e.to_string()))
}

/// The file a base backup leaves in the copy (see
/// `replication::walsender::basebackup`).
pub const BACKUP_LABEL: &str = "backup_label";

/// What recovery takes from a `backup_label`.
#[derive(Debug, PartialEq, Eq)]
pub struct BackupLabel {
    pub redo: Lsn,
    pub checkpoint: Lsn,
    pub timeline: u32,
}

/// Parses `DIR/backup_label` (PostgreSQL 15's read_backup_label: START WAL
/// LOCATION, CHECKPOINT LOCATION, START TIMELINE); None without one.
pub fn read_backup_label(datadir: &Path) -> Result<Option<BackupLabel>, String> {
    let path = datadir.join(BACKUP_LABEL);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("could not read file \"{}\": {e}", path.display())),
    };
    parse_backup_label(&text)
        .map(Some)
        .ok_or_else(|| format!("invalid data in file \"{}\"", path.display()))
}

fn parse_backup_label(text: &str) -> Option<BackupLabel> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let lsn = |s: &str| walformat::parse_lsn(s.split_whitespace().next()?).ok();
    let redo = lsn(field("START WAL LOCATION:")?)?;
    let checkpoint = lsn(field("CHECKPOINT LOCATION:")?)?;
    let timeline = match field("START TIMELINE:") {
        Some(t) => t.parse().ok()?,
        None => 0,
    };
    Some(BackupLabel {
        redo,
        checkpoint,
        timeline,
    })
}

/// A base backup's copy (see "Base backups" in the module header): the
/// control file is made to name the label's checkpoint and redo point,
/// in crash recovery, and written; only then is the label renamed to
/// `backup_label.old` (as PostgreSQL does). A crash before the rename
/// repeats this; one after it finds the control file naming the label's
/// checkpoint, so the label is never needed again, and the end-of-recovery
/// checkpoint cannot remove WAL that a later start would read from it.
fn adopt_backup_label(
    datadir: &Path,
    mut control: ControlFile,
    l: &BackupLabel,
    fsync: bool,
) -> Result<ControlFile, i32> {
    log(
        "LOG",
        &format!(
            "starting backup recovery with redo LSN {}, checkpoint LSN {}, on timeline ID {} (\"{BACKUP_LABEL}\")",
            format_lsn(l.redo),
            format_lsn(l.checkpoint),
            l.timeline
        ),
    );
    if l.timeline != 0 && l.timeline != control.timeline {
        return Err(fatal(&format!(
            "\"{BACKUP_LABEL}\" names timeline {} but the control file timeline {}",
            l.timeline, control.timeline
        )));
    }
    control.checkpoint = l.checkpoint;
    control.redo = l.redo;
    control.state = DbState::InCrashRecovery;
    control
        .write(datadir, fsync)
        .map_err(|e| fatal(&e.to_string()))?;
    let old = datadir.join(format!("{BACKUP_LABEL}.old"));
    std::fs::rename(datadir.join(BACKUP_LABEL), &old).map_err(|e| {
        fatal(&format!(
            "could not rename \"{BACKUP_LABEL}\" to \"{}\": {e}",
            old.display()
        ))
    })?;
    if fsync {
        std::fs::File::open(datadir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fatal(&format!("could not fsync the data directory: {e}")))?;
    }
    Ok(control)
}

/// Step 6 after a crash: the end-of-recovery checkpoint (see the module
/// header), written through the ordinary insertion path by this process,
/// the only one running: a CHECKPOINT_SHUTDOWN record at the end of WAL,
/// flushed, then the control file naming it (state "in production"), then
/// segments before it removed or recycled as the checkpointer does. The
/// control file says "in crash recovery" until it names the new
/// checkpoint, so a crash anywhere before that repeats this recovery.
fn end_of_recovery_checkpoint(shm: &Shmem, datadir: &Path) {
    let ctx = crate::context::ProcContext::aux(shm, shmem::segment::AuxProc::Startup, datadir);
    let mut checkpointer = crate::checkpointer::Checkpointer::new(&ctx);
    checkpointer.checkpoint(crate::checkpointer::CheckpointKind::EndOfRecovery);
}

/// Archive recovery (see `restore.rs`), before reading WAL: with
/// `restore_command`, fetch the segments (the archive first) from the redo point
/// on.
fn begin_archive_recovery(shm: &Shmem, datadir: &Path, control: &ControlFile) -> Result<(), i32> {
    log(
        "LOG",
        &format!(
            "starting archive recovery (\"{}\" present) on timeline {}",
            restore::RECOVERY_SIGNAL,
            control.timeline
        ),
    );
    let command = shm.settings().restore_command.as_str().to_string();
    if command.trim().is_empty() {
        return Ok(());
    }
    let geo = Geometry::new(control.seg_size).map_err(|e| fatal(&e.to_string()))?;
    let from = geo.seg_no(control.redo);
    let history = crate::timeline::Timeline::read(&datadir.join("pg_wal"), control.timeline)
        .map_err(|e| fatal(&e.to_string()))?;
    let stop = crate::process::shutdown_requested;
    let n = restore::fetch_segments(&command, datadir, control, &history, from, &stop)
        .map_err(fetch_failed)?;
    log(
        "LOG",
        &format!("restore_command delivered {n} WAL segment(s)"),
    );
    Ok(())
}

/// The recovery target of the settings (PostgreSQL reads them only in
/// archive recovery); an unreadable one is FATAL.
fn recovery_target(shm: &Shmem) -> Result<Option<RecoveryTarget>, i32> {
    let target = RecoveryTarget::from_settings(shm.settings()).map_err(|e| fatal(&e))?;
    if let Some(t) = &target {
        log(
            "LOG",
            &format!(
                "starting point-in-time recovery to {} (recovery_target_inclusive {}, recovery_target_action {})",
                t.target,
                t.inclusive,
                t.action.name()
            ),
        );
    }
    Ok(target)
}

/// Archive recovery reached its target with `recovery_target_action`
/// `shutdown` or `pause`: nothing is written; the exit code is
/// [`EXIT_TARGET_SHUTDOWN`].
fn shutdown_at_target(action: RecoveryTargetAction, end_of_wal: Lsn) -> i32 {
    let why = match action {
        RecoveryTargetAction::Pause => " (\"pause\": walshm has no hot standby, so it shuts down, as PostgreSQL does with hot_standby = off)",
        _ => "",
    };
    log(
        "LOG",
        &format!(
            "shutdown at recovery target: recovery_target_action = {}{why}; end of WAL would be {}; nothing was written and \"{}\" stays: start again with recovery_target_action = promote to end recovery there",
            action.name(),
            format_lsn(end_of_wal),
            restore::RECOVERY_SIGNAL
        ),
    );
    EXIT_TARGET_SHUTDOWN
}

/// The exit code for a fetch that did not reach the end of the archive:
/// FATAL, or [`EXIT_SHUTDOWN`] at a shutdown request (logged).
fn fetch_failed(e: restore::FetchError) -> i32 {
    match e {
        restore::FetchError::Failed(msg) => fatal(&msg),
        restore::FetchError::ShutdownRequested => {
            log(
                "LOG",
                &format!(
                    "archive recovery stopped at the shutdown request; the restored files stay in pg_wal and \"{}\" stays, so the next start resumes it",
                    restore::RECOVERY_SIGNAL
                ),
            );
            EXIT_SHUTDOWN
        }
    }
}

/// Archive recovery, after WAL was validated to its end: a new timeline
/// with its history file and end-of-recovery checkpoint (see `restore.rs`),
/// then shared memory set up to continue after that checkpoint.
fn finish_archive_recovery(
    shm: &Shmem,
    datadir: &Path,
    control: &ControlFile,
    geo: &Geometry,
    r: RecoveryResult,
    started: std::time::Instant,
) -> Result<(), i32> {
    let s = shm.settings();
    let command = s.restore_command.as_str().to_string();
    let newest = if command.trim().is_empty() {
        crate::timeline::newest_timeline(&datadir.join("pg_wal"), control.timeline)
            .map_err(|e| fatal(&e.to_string()))?
    } else {
        let stop = crate::process::shutdown_requested;
        restore::fetch_newer_histories(&command, datadir, control.timeline, &stop)
            .map_err(fetch_failed)?
    };
    // Relaxed: set by restore_next_xid in this process just before.
    let next_xid = shm.xid_state().next_full_xid.load(Ordering::Relaxed);
    let at = restore::EndOfWal {
        last_record: r.last_record,
        end: r.end_of_wal,
        next_xid,
    };
    log(
        "LOG",
        &format!(
            "redo done at {}: {} records in {:.3} s; end of restored WAL at {} ({})",
            format_lsn(r.last_record),
            r.records,
            started.elapsed().as_secs_f64(),
            format_lsn(r.end_of_wal),
            r.stop_reason,
        ),
    );
    let reason = r
        .reached
        .as_ref()
        .map_or(restore::END_OF_RECOVERY_REASON, |t| t.reason.as_str());
    let p = restore::end_recovery(datadir, control, geo, at, newest, reason, s)
        .map_err(|e| fatal(&e))?;
    let after = RecoveryResult {
        last_record: p.checkpoint,
        end_of_wal: p.end,
        ..r
    };
    install_end_of_wal(shm, datadir, geo, p.tli, &after).map_err(|e| fatal(&e))?;
    shm.xlog()
        .checkpointer
        .last_redo
        // Relaxed: published to later processes by fork (see install_end_of_wal).
        .store(p.checkpoint, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_labels_as_postgresql_15_writes_them() {
        let text = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000060\nBACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIME: 2026-01-01 00:00:00 UTC\nLABEL: x\nSTART TIMELINE: 1\n";
        assert_eq!(
            parse_backup_label(text),
            Some(BackupLabel {
                redo: 0x2000028,
                checkpoint: 0x2000060,
                timeline: 1
            })
        );
        assert_eq!(parse_backup_label("LABEL: x\n"), None);
    }
}
