//! How the postmaster takes a child's end: reaping (`waitpid` through
//! `shmem::sys`), then by kind — the startup process (on to Run, a new
//! timeline, or a failed start), a supervised worker (its restart rules),
//! a session (clean, FATAL, or a crash), a server process (any exit
//! outside a shutdown is a crash) — and the crash itself: every other
//! child gets SIGQUIT, the generation is abandoned, and the loop waits in
//! CrashWait for them all before a new segment (see the parent module's
//! state machine). Also the cleaner's queue of dead attached processes
//! and sessions (`backend::abandoned`).

use super::{Child, Postmaster, State, CRASH_KILL_AFTER, MAX_STARTUP_FAILURES};
use crate::children::{ChildExit, ClientChild, Kind, ServerChild};
use crate::log;
use crate::supervised;
use backend::abandoned::Job;
use backend::control::ControlFile;
use shmem::sync::Ordering;
use shmem::sys::Signal;
use std::time::{Duration, Instant};

impl Postmaster {
    pub(super) fn enter_crash_wait(&mut self) {
        // The registry frees every worker slot with the generation.
        self.cleanup_queue.clear();
        self.cleaning.clear();
        self.abandon_generation();
        self.state = State::CrashWait;
        self.crash_deadline = Some(Instant::now() + CRASH_KILL_AFTER);
    }

    pub(super) fn reap_children(&mut self) {
        while let Some((pid, status)) = shmem::sys::reap_any() {
            let Some(pos) = self.children.iter().position(|c| c.pid == pid) else {
                continue;
            };
            let child = self.children.remove(pos);
            self.child_exited(child, ChildExit::from_wait_status(status));
        }
    }

    pub(super) fn child_exited(&mut self, child: Child, exit: ChildExit) {
        if self.state == State::CrashWait {
            if let Kind::Supervised(id) = child.kind {
                self.supervised[id].stopped_with_everyone();
            }
            return; // expected: we told everybody to quit
        }
        match child.kind {
            Kind::Supervised(id) => self.supervised_exited(id, child.pid, &exit),
            Kind::Server(ServerChild::Startup) => self.startup_exited(child.pid, &exit),
            Kind::Server(ServerChild::Walreceiver) => self.walreceiver_exited(child.pid, &exit),
            Kind::Server(ServerChild::Walwriter)
                if exit.is_clean() && self.state == State::StopWalwriter => {}
            Kind::Server(ServerChild::Checkpointer)
                if exit.is_clean() && self.state == State::StopCheckpointer => {}
            Kind::Server(ServerChild::Archiver) if exit.is_clean_or_fatal() => {
                // As PostgreSQL's: an archiver that exits is started again.
                if self.state == State::Run {
                    self.fork_server_child(ServerChild::Archiver);
                }
            }
            Kind::Client(ClientChild::Rejecter) => {}
            Kind::Client(ClientChild::Connection) => self.session_ended(child.pid, &exit),
            Kind::Server(ServerChild::Cleaner) if exit.is_clean() => self.cleaner_done(),
            Kind::Server(ServerChild::Backend(_)) if exit.is_clean_or_fatal() => {
                if !exit.is_clean() {
                    log(
                        "LOG",
                        &format!("{} (PID {}) {}", child.kind.describe(), child.pid, exit.why),
                    );
                }
            }
            kind => self.handle_crash(kind, child.pid, &exit.why),
        }
    }

    /// Startup done: run; stopped at our shutdown request: finish the
    /// shutdown; damaged WAL: stop for good; any other failure: retry
    /// after a crash restart, up to MAX_STARTUP_FAILURES (the very first
    /// startup is not retried).
    pub(super) fn startup_exited(&mut self, pid: i32, exit: &ChildExit) {
        if self.shutting_down && exit.exited_with(backend::startup::EXIT_SHUTDOWN) {
            log("LOG", "startup process stopped at the shutdown request");
            self.state = State::StopWalwriter;
            return;
        }
        if exit.exited_with(backend::startup::EXIT_TARGET_SHUTDOWN) {
            log("LOG", "shutdown at recovery target");
            self.shutting_down = true;
            self.state = State::StopWalwriter;
            return;
        }
        if exit.is_clean() {
            self.startup_failures = 0;
            self.discard_damaged_wal = false;
            self.adopt_new_timeline();
            self.enter_run();
            return;
        }
        if exit.exited_with(backend::startup::EXIT_WAL_DAMAGED) {
            log(
                "FATAL",
                "WAL is damaged before its end (see the message above); not starting",
            );
            self.give_up(backend::startup::EXIT_WAL_DAMAGED);
            return;
        }
        self.startup_failures += 1;
        log("LOG", &format!("startup process (PID {pid}) {}", exit.why));
        if self.crashes == 0 || self.startup_failures >= MAX_STARTUP_FAILURES {
            let times = match self.startup_failures {
                1 => String::new(),
                n => format!(" {n} times"),
            };
            log(
                "FATAL",
                &format!("startup process failed{times}; giving up (see the messages above)"),
            );
            self.give_up(1);
        } else {
            self.enter_crash_wait();
        }
    }

    /// After a startup that ended archive recovery on a new timeline (the
    /// control file says so), the WAL facts of this and later generations
    /// name it, before any process that writes WAL is forked.
    pub(super) fn adopt_new_timeline(&mut self) {
        let Ok(c) = ControlFile::read(&self.datadir) else {
            return;
        };
        if c.timeline == self.control.timeline {
            return;
        }
        self.control = c;
        if let Some(shm) = self.shm.as_ref() {
            // An atomic store: a standby's sessions may be reading it (the
            // promoting startup process stored the same value already).
            shm.xlog().facts.set_timeline(c.timeline);
        }
    }

    /// Stops every child and exits with `code` once they are gone.
    pub(super) fn give_up(&mut self, code: i32) {
        self.shutting_down = true;
        self.exit_code_override = Some(code);
        self.enter_crash_wait();
    }

    pub(super) fn handle_crash(&mut self, kind: Kind, pid: i32, why: &str) {
        let who = match kind {
            Kind::Supervised(id) => self.supervised[id].describe(),
            other => other.describe(),
        };
        self.crash(&format!("{who} (PID {pid}) {why}"));
    }

    /// A process that used shared memory ended abnormally (`what`): stop
    /// everybody, then start a new generation (or, during a shutdown, stop
    /// without a shutdown checkpoint).
    pub(super) fn crash(&mut self, what: &str) {
        self.crashes += 1;
        log("LOG", what);
        if self.shutting_down {
            log(
                "LOG",
                "the shutdown is not clean: no shutdown checkpoint is written; the next start runs crash recovery",
            );
        }
        log("LOG", "terminating any other active server processes");
        self.signal_all(Signal::SIGQUIT);
        self.enter_crash_wait();
    }

    /// A supervised worker's process ended (outside a crash wait).
    pub(super) fn supervised_exited(&mut self, id: usize, pid: i32, exit: &ChildExit) {
        let delay = Duration::from_millis(self.settings.worker_restart_delay_ms as u64);
        let w = &mut self.supervised[id];
        let why = match w.exited(exit, delay, Instant::now()) {
            supervised::Verdict::Done => {
                let done = format!("{} (PID {pid}) detached and exited 0: done", w.describe());
                log("LOG", &done);
                return;
            }
            // A restart is not logged while the server shuts down.
            _ if self.shutting_down => return,
            supervised::Verdict::RestartAt(_) => "detached and exited 1".to_string(),
            supervised::Verdict::Died(why) => why,
        };
        log(
            "LOG",
            &format!(
                "{} (PID {pid}) {why}: restarting it in {:.1} s",
                w.describe(),
                delay.as_secs_f64()
            ),
        );
    }

    /// A connection backend ended. One that died without freeing its proc
    /// slot is cleaned up after, unless what it held needs a crash restart
    /// (`backend::abandoned`); a walsender, or one that died before it had
    /// a proc slot (where what it held is not recorded), is a crash.
    pub(super) fn session_ended(&mut self, pid: i32, exit: &ChildExit) {
        let kind = Kind::Client(ClientChild::Connection);
        let Some(shm) = self.shm.as_ref() else { return };
        let max_backends = shm.layout().max_backends as usize;
        let slot = shm.procs()[..max_backends]
            .iter()
            .position(|p| p.pid.load(Ordering::Relaxed) == pid);
        match slot {
            _ if !exit.is_clean_or_fatal() && self.walsender_pids().contains(&pid) => {
                self.crash(&format!("walsender (PID {pid}) {}", exit.why));
            }
            Some(procno) => self.dead_process(
                Job {
                    procno: procno as u32,
                    pid,
                    who: kind.describe(),
                    why: exit.why.clone(),
                },
                None,
            ),
            None if exit.is_clean_or_fatal() => {}
            None => self.crash(&format!(
                "{} (PID {pid}) {} before it had a proc slot (what it held in shared memory then is not recorded)",
                kind.describe(),
                exit.why
            )),
        }
    }

    /// Proc `job.procno`'s process died: the cleaner finishes what it
    /// left, or, if its slot says it died inside shared state that only a
    /// restart makes whole, the server restarts.
    pub(super) fn dead_process(&mut self, job: Job, worker_slot: Option<u32>) {
        let Some(shm) = self.shm.as_ref() else { return };
        match backend::abandoned::assess(shm, job.procno) {
            Ok(_) => {
                self.cleanup_queue.push((job, worker_slot));
                self.start_cleaner();
            }
            Err(why) => self.crash(&format!("{} (PID {}) {}: {why}", job.who, job.pid, job.why)),
        }
    }

    /// Forks the cleaner for everything queued, unless one runs.
    pub(super) fn start_cleaner(&mut self) {
        if !self.cleaning.is_empty()
            || self.cleanup_queue.is_empty()
            || self.state == State::CrashWait
        {
            return;
        }
        self.cleaning = std::mem::take(&mut self.cleanup_queue);
        self.fork_server_child(ServerChild::Cleaner);
    }

    /// The cleaner exited 0: the slots it cleaned are free (a worker
    /// slot here, a backend slot it freed itself); the next batch starts.
    pub(super) fn cleaner_done(&mut self) {
        for (_, slot) in std::mem::take(&mut self.cleaning) {
            if let (Some(s), Some(r)) = (slot, self.registry.as_mut()) {
                r.free_worker_slot(s);
            }
            self.cleaned += 1;
        }
        if let Some(shm) = &self.shm {
            shm.header()
                .processes_cleaned
                .store(self.cleaned, Ordering::Relaxed);
        }
        self.start_cleaner();
    }
}
