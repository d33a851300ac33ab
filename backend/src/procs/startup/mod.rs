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

mod archive;
mod backup_label;
mod scan;
mod tail;

use crate::control::{unix_now, ControlFile, DbState};
use crate::process::log;
use crate::restore;
use archive::{
    begin_archive_recovery, finish_archive_recovery, recovery_target, shutdown_at_target,
};
use backup_label::adopt_backup_label;
pub use backup_label::{read_backup_label, BackupLabel, BACKUP_LABEL};
use scan::{damaged_wal_message, power_loss_tail_message};
pub use scan::{look_ahead, scan_wal, RecoveryResult, ScanError, StopReason};
use shmem::sync::Ordering;
use shmem::variants::RecoveryTargetAction;
use shmem::Shmem;
use std::path::Path;
use std::time::{Duration, Instant};
use tail::sync_end_segments;
pub use tail::{cut_wal_at, discard_wal_after, install_end_of_wal};
use walformat::{format_lsn, Geometry, Lookahead, Verdict, XLOG_BLCKSZ};

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
    let (ahead, ahead_elapsed) = judge_stop(datadir, &control, &geo, &r, opts, fsync)?;
    if target.is_some() {
        return Err(fatal(&format!(
            "recovery ended before configured recovery target was reached (end of WAL at {}: {}); \"{}\" stays, nothing was written",
            format_lsn(r.end_of_wal),
            r.stop_reason,
            restore::RECOVERY_SIGNAL
        )));
    }
    let zeroed = cut_tail(datadir, &control, &geo, &r, crashed, fsync)?;
    log_look_ahead(&r, &ahead, ahead_elapsed, zeroed);
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
    finish_recovery(shm, datadir, control, &geo, &r, crashed, started)
}

/// Step 3: looks past where reading stopped and judges what follows (see
/// the module header). A power-loss tail is logged (WARNING); damage is
/// refused ([`EXIT_WAL_DAMAGED`], nothing written) unless the operator
/// allowed discarding it, then the WAL after the stop is moved aside.
/// Returns the look-ahead and how long it took.
fn judge_stop(
    datadir: &Path,
    control: &ControlFile,
    geo: &Geometry,
    r: &RecoveryResult,
    opts: StartupOptions,
    fsync: bool,
) -> Result<(Lookahead, Duration), i32> {
    let tli = control.timeline;
    // Nothing is written before this decision: a refusal leaves pg_wal and
    // the control file byte for byte as they were.
    let ahead_started = std::time::Instant::now();
    let ahead = look_ahead(datadir, control, r).map_err(|e| {
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
            &power_loss_tail_message(geo, tli, r, &ahead, found),
        );
    }
    if let (Verdict::Damaged, Some(found)) = (verdict, &ahead.found) {
        if !opts.discard_damaged_wal {
            log("FATAL", &damaged_wal_message(datadir, geo, tli, r, found));
            return Err(EXIT_WAL_DAMAGED);
        }
        let dir =
            discard_wal_after(datadir, geo, tli, r.end_of_wal, fsync).map_err(|e| fatal(&e))?;
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
    Ok((ahead, ahead_elapsed))
}

/// Step 4: cuts WAL at its end on disk (after a crash the control file
/// says "in crash recovery" first, and the end's segments are synced).
/// Returns the bytes zeroed.
fn cut_tail(
    datadir: &Path,
    control: &ControlFile,
    geo: &Geometry,
    r: &RecoveryResult,
    crashed: bool,
    fsync: bool,
) -> Result<u64, i32> {
    let tli = control.timeline;
    if crashed {
        let mut c = *control;
        c.state = DbState::InCrashRecovery;
        c.write(datadir, fsync).map_err(|e| fatal(&e.to_string()))?;
    }
    let zeroed = cut_wal_at(&datadir.join("pg_wal"), geo, tli, r.end_of_wal, fsync)
        .map_err(|e| fatal(&e))?;
    if crashed && fsync {
        sync_end_segments(&datadir.join("pg_wal"), geo, tli, r.end_of_wal, zeroed > 0)
            .map_err(|e| fatal(&e))?;
    }
    Ok(zeroed)
}

/// The LOG line of what the look-ahead after the end of WAL examined and
/// decided, and what the cut zeroed.
fn log_look_ahead(r: &RecoveryResult, ahead: &Lookahead, elapsed: Duration, zeroed: u64) {
    let verdict = ahead.verdict();
    log(
        "LOG",
        &format!(
            "look-ahead after {}: {} page header(s) in {} file(s) examined in {:.3} s, {}; {zeroed} byte(s) after it zeroed on disk",
            format_lsn(r.end_of_wal),
            ahead.pages,
            ahead.files,
            elapsed.as_secs_f64(),
            match verdict {
                Verdict::EndOfWal => "no valid WAL follows",
                Verdict::PowerLossTail => "valid WAL only inside the unsynced window (taken for a power-loss tail)",
                Verdict::Damaged => "valid WAL discarded",
            },
        ),
    );
}

/// Step 5 (and 6) of crash recovery or of a clean start: shared memory
/// set to continue at the end of WAL, then either the end-of-recovery
/// checkpoint (after a crash) or the control file "in production".
fn finish_recovery(
    shm: &Shmem,
    datadir: &Path,
    control: ControlFile,
    geo: &Geometry,
    r: &RecoveryResult,
    crashed: bool,
    started: Instant,
) -> Result<(), i32> {
    let fsync = shm.settings().fsync;
    install_end_of_wal(shm, datadir, geo, control.timeline, r).map_err(|e| fatal(&e))?;
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
