//! The archiver process (PostgreSQL's pgarch.c): hands every file marked
//! `archive_status/NAME.ready` to `archive_command`, in order, and marks it
//! `.done` once the command exited 0. Started by the postmaster when
//! `archive_mode = on`; it touches no lock and no shared WAL state, only
//! the status files and its settings.
//!
//! Loop: every `POLL` (a short timer instead of PostgreSQL's latch: a
//! directory listing five times a second costs nothing), take the ready
//! files (history files first, then segments by name), and for each one:
//! run `/bin/sh -c` with `%p` = `pg_wal/NAME` (relative to the data
//! directory, which is the command's working directory) and `%f` = NAME;
//! exit 0 -> rename `.ready` to `.done` (directory fsynced) and go on.
//!
//! Failures are logged with the exit status or the signal, never a crash,
//! and the same file is retried (never a later one first: archives stay in
//! WAL order) after a growing back-off: 0.25 s, doubling up to 4 s
//! (PostgreSQL tries three times one second apart, then waits 60 s; a
//! shorter cycle recovers sooner when the archive comes back, at the cost
//! of running a failing command more often). A command killed by a signal
//! is treated the same way (PostgreSQL's archiver exits FATAL instead and
//! is restarted, which amounts to a retry).
//!
//! Shutdown: the postmaster sends SIGTERM only after the checkpointer
//! wrote the shutdown checkpoint (as PostgreSQL signals its archiver after
//! the checkpointer), so the segments completed by it are ready by then:
//! one last pass archives them, without retrying a failure, and the
//! process exits 0. Crash: SIGQUIT ends it at once; a file whose command
//! succeeded but which is not marked `.done` yet is archived again after
//! the restart (see `archive.rs`).

use crate::archive::{self, Outcome};
use crate::process::{log, shutdown_requested};
use shmem::Shmem;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the archiver looks for ready files.
const POLL: Duration = Duration::from_millis(200);
/// First wait after a failed command; doubles up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(4);
/// Granularity of the sleeps, so SIGTERM is noticed quickly.
const SLICE: Duration = Duration::from_millis(50);

/// The archiver process body; returns its exit code (0).
pub fn run(shm: &Shmem, datadir: &Path) -> i32 {
    let s = shm.settings();
    let command = s.archive_command.as_str().to_string();
    let fsync = s.fsync;
    let pg_wal = datadir.join("pg_wal");
    if command.trim().is_empty() {
        log(
            "WARNING",
            "archive_mode is on but archive_command is empty: WAL segments are kept until it is set",
        );
    }
    let mut backoff = FIRST_BACKOFF;
    loop {
        let last_pass = shutdown_requested();
        let failed = !command.trim().is_empty()
            && !archive_ready_files(&command, datadir, &pg_wal, fsync, last_pass);
        archive::remove_orphan_done(&pg_wal);
        if last_pass {
            return 0;
        }
        if failed {
            sleep_unless_shutdown(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        } else {
            backoff = FIRST_BACKOFF;
            sleep_unless_shutdown(POLL);
        }
    }
}

/// Archives the ready files in order; false at the first failure (the
/// rest wait for it). At the last pass (shutdown) too, a failure stops.
fn archive_ready_files(
    command: &str,
    datadir: &Path,
    pg_wal: &Path,
    fsync: bool,
    last_pass: bool,
) -> bool {
    for name in archive::ready_files(pg_wal) {
        if shutdown_requested() && !last_pass {
            // Leave the loop to do the last pass from the top.
            return true;
        }
        if !pg_wal.join(&name).exists() {
            log(
                "WARNING",
                &format!("removing archive status file of \"{name}\": the file is not in pg_wal"),
            );
            archive::forget(pg_wal, &name);
            continue;
        }
        if !archive_one(command, datadir, pg_wal, &name, fsync) {
            return false;
        }
    }
    true
}

/// Runs the command for one file; marks it done on success.
fn archive_one(command: &str, datadir: &Path, pg_wal: &Path, name: &str, fsync: bool) -> bool {
    let path = format!("pg_wal/{name}");
    let cmd = archive::expand_command(command, &path, name);
    let started = Instant::now();
    match archive::run_shell(&cmd, datadir) {
        Outcome::Success => match archive::mark_done(pg_wal, name, fsync) {
            Ok(()) => {
                log(
                    "DEBUG",
                    &format!(
                        "archived write-ahead log file \"{name}\" in {:.3} s",
                        started.elapsed().as_secs_f64()
                    ),
                );
                true
            }
            Err(e) => {
                log(
                    "WARNING",
                    &format!("could not mark \"{name}\" archived (it will be archived again): {e}"),
                );
                false
            }
        },
        outcome => {
            log(
                "LOG",
                &format!(
                    "archive command {} while archiving \"{name}\"; the failed archive command was: {cmd}",
                    outcome.describe()
                ),
            );
            false
        }
    }
}

/// Sleeps `d`, waking early for a shutdown request.
fn sleep_unless_shutdown(d: Duration) {
    let until = Instant::now() + d;
    while !shutdown_requested() {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep(SLICE.min(until - now));
    }
}
