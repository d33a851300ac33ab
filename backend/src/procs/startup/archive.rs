//! Archive recovery's beginning and end (see `restore.rs` and the module
//! header of `startup`): the restore_command fetches before reading WAL,
//! the recovery target of the settings, the stop at a target with
//! `shutdown`/`pause`, and the end on a new timeline with its history file
//! and end-of-recovery checkpoint.
//!
//! Invariants: nothing is written before the end of recovery is decided; a
//! shutdown request during fetches exits `EXIT_SHUTDOWN` with
//! `recovery.signal` and the control file untouched.

use super::{fatal, install_end_of_wal, RecoveryResult, EXIT_SHUTDOWN, EXIT_TARGET_SHUTDOWN};
use crate::control::ControlFile;
use crate::process::log;
use crate::recovery_target::RecoveryTarget;
use crate::restore;
use shmem::sync::Ordering;
use shmem::variants::RecoveryTargetAction;
use shmem::Shmem;
use std::path::Path;
use walformat::{format_lsn, Geometry, Lsn};

/// Archive recovery (see `restore.rs`), before reading WAL: with
/// `restore_command`, fetch the segments (the archive first) from the redo point
/// on.
pub(super) fn begin_archive_recovery(
    shm: &Shmem,
    datadir: &Path,
    control: &ControlFile,
) -> Result<(), i32> {
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
pub(super) fn recovery_target(shm: &Shmem) -> Result<Option<RecoveryTarget>, i32> {
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
pub(super) fn shutdown_at_target(action: RecoveryTargetAction, end_of_wal: Lsn) -> i32 {
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
pub(super) fn fetch_failed(e: restore::FetchError) -> i32 {
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
pub(super) fn finish_archive_recovery(
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
