//! The postmaster's side of a standby (PostgreSQL's PM_HOT_STANDBY and
//! its promotion in postmaster.c, reduced):
//!
//! - The startup process of a data directory with `standby.signal` sets
//!   the shared `recovery` flag and sends SIGUSR1 once pg_wal is validated
//!   (`backend::standby`). On that signal, in Startup, the postmaster
//!   enters Standby: it forks the walreceiver, admits sessions (read-only:
//!   the sessions check the flag themselves), and writes `ready` into
//!   `postmaster.pid`, as PostgreSQL does when hot standby opens.
//! - Promotion: `pg_ctl promote` and `pg_promote()` create `DIR/promote`
//!   and send SIGUSR1. In Standby the postmaster removes the file, sends
//!   SIGTERM to the walreceiver and, once it has exited (so nothing writes
//!   pg_wal any more), SIGUSR2 to the startup process, which ends recovery
//!   on a new timeline and exits 0: the usual path to Run follows (the
//!   walwriter, checkpointer and workload backends are forked then).
//! - A walreceiver that exits 0 while the standby runs is forked again; an
//!   abnormal exit is a crash like any server process's.
//! - A fast shutdown in Standby sends SIGTERM to every child; the startup
//!   process then exits `EXIT_SHUTDOWN` and the postmaster finishes as
//!   after an interrupted archive recovery.
//!
//! The postmaster reads only the flag (an atomic load), never a lock.

use super::{Postmaster, State, SHUTDOWN_KILL_AFTER};
use crate::children::{ChildExit, Kind, ServerChild};
use crate::datadir::PmStatus;
use crate::log;
use shmem::sys::Signal;
use std::time::Instant;

/// Where a promotion is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Promotion {
    None,
    /// SIGTERM sent to the walreceiver; waiting for it to exit.
    StoppingWalreceiver,
    /// SIGUSR2 sent to the startup process.
    Told,
}

const WALRECEIVER: Kind = Kind::Server(ServerChild::Walreceiver);

/// At start: a `DIR/promote` left from an earlier run is not a request to
/// this one (PostgreSQL's RemovePromoteSignalFiles).
pub(super) fn remove_stale_promote_file(datadir: &std::path::Path) {
    let file = datadir.join(backend::standby::PROMOTE_FILE);
    match std::fs::remove_file(&file) {
        Ok(()) => log(
            "LOG",
            &format!("removed \"{}\" left from an earlier run", file.display()),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log(
            "LOG",
            &format!("could not remove \"{}\": {e}", file.display()),
        ),
    }
}

impl Postmaster {
    /// Once per loop: `sigusr1` is whether SIGUSR1 arrived since the last
    /// call.
    pub(super) fn standby_step(&mut self, sigusr1: bool) {
        let entering = sigusr1
            && self.state == State::Startup
            && !self.shutting_down
            && self.startup_is_standby();
        if entering {
            self.enter_standby();
        }
        if self.state != State::Standby {
            self.promotion = Promotion::None;
            return;
        }
        if (sigusr1 || entering) && self.promotion == Promotion::None && !self.shutting_down {
            self.begin_promotion_if_asked();
        }
        if self.promotion == Promotion::StoppingWalreceiver && self.count(WALRECEIVER) == 0 {
            self.tell_startup_to_promote();
        }
    }

    /// The walreceiver is gone: the startup process may end recovery.
    fn tell_startup_to_promote(&mut self) {
        self.signal_kind(|k| k == Kind::Server(ServerChild::Startup), Signal::SIGUSR2);
        self.promotion = Promotion::Told;
    }

    /// The startup process said it is a standby (the shared flag).
    fn startup_is_standby(&self) -> bool {
        self.shm
            .as_ref()
            .is_some_and(|shm| shm.repl().walrcv.in_recovery())
    }

    fn enter_standby(&mut self) {
        self.state = State::Standby;
        self.fork_server_child(ServerChild::Walreceiver);
        log(
            "LOG",
            "database system is ready to accept read-only connections",
        );
        self.set_status(PmStatus::Ready);
    }

    /// `DIR/promote` present: stop the walreceiver first (see the module
    /// header).
    fn begin_promotion_if_asked(&mut self) {
        let file = self.datadir.join(backend::standby::PROMOTE_FILE);
        if !file.exists() {
            return;
        }
        if let Err(e) = std::fs::remove_file(&file) {
            log(
                "LOG",
                &format!("could not remove \"{}\": {e}", file.display()),
            );
        }
        log("LOG", "received promote request");
        self.signal_kind(|k| k == WALRECEIVER, Signal::SIGTERM);
        self.promotion = Promotion::StoppingWalreceiver;
    }

    /// The walreceiver ended (outside a crash wait).
    pub(super) fn walreceiver_exited(&mut self, pid: i32, exit: &ChildExit) {
        if !exit.is_clean_or_fatal() {
            self.handle_crash(WALRECEIVER, pid, &exit.why);
            return;
        }
        if self.shutting_down {
            return; // we asked it to stop
        }
        match self.promotion {
            // At once, not at the loop's next wake-up.
            Promotion::StoppingWalreceiver => self.tell_startup_to_promote(),
            Promotion::Told => {}
            Promotion::None => {
                log("LOG", &format!("walreceiver (PID {pid}) {}", exit.why));
                if exit.is_clean() && self.state == State::Standby {
                    self.fork_server_child(ServerChild::Walreceiver);
                }
            }
        }
    }

    /// A fast shutdown while a standby: every child gets SIGTERM.
    pub(super) fn stop_standby(&mut self) {
        self.signal_all(Signal::SIGTERM);
        self.crash_deadline = Some(Instant::now() + SHUTDOWN_KILL_AFTER);
    }
}
