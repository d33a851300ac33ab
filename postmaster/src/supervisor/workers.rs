//! The postmaster's side of attached and supervised workers: servicing
//! the registration socket and the worker channels (`registry`), a lost
//! channel (a crash unless the worker detached or the generation ended),
//! and starting supervised workers when their restart rules say so
//! (`supervised`).

use super::{Child, Postmaster, State};
use crate::children::Kind;
use crate::log;
use crate::registry::{self, Event, Origin};
use backend::abandoned::Job;
use std::time::{Duration, Instant};

impl Postmaster {
    /// Accepts registrations and reads every worker channel; acts on what
    /// happened (attach, detach, a lost channel: a crash).
    pub(super) fn service_registry(&mut self) {
        let phase = match self.state {
            _ if self.shutting_down => registry::Phase::ShuttingDown,
            // A standby's workers attach read-only (the worker library
            // refuses their writes).
            State::Run | State::Standby => registry::Phase::Running,
            _ => registry::Phase::StartingUp,
        };
        // An abandoned generation (crash wait, end of a shutdown) is
        // handed to nobody.
        let shm = self.shm.as_ref().filter(|shm| !shm.has_ended());
        let Some(r) = &mut self.registry else { return };
        let events = r.service(shm, phase);
        for ev in events {
            self.registry_event(ev);
        }
    }

    pub(super) fn registry_event(&mut self, ev: Event) {
        match ev {
            Event::Attached {
                origin: Origin::Supervised(id),
                ..
            } => self.supervised[id].attached_now(),
            Event::Detached {
                origin: Origin::Supervised(id),
            } => self.supervised[id].detached = true,
            Event::Attached { .. } | Event::Detached { .. } => {}
            Event::Lost { .. } if self.state == State::CrashWait => {}
            Event::Lost {
                origin: Origin::Supervised(id),
                ..
            } if self.reap_first(id) => {}
            Event::Lost {
                origin,
                why,
                slot: Some(slot),
                pid,
                dead,
            } => self.worker_lost(origin, why, slot, pid, dead),
            Event::Lost { origin, why, .. } => {
                let who = origin.describe(|id| {
                    let w = &self.supervised[id];
                    match w.pid {
                        Some(pid) => format!("{} (PID {pid})", w.describe()),
                        None => w.describe(),
                    }
                });
                self.crash(&format!(
                    "{who} lost its registration without detaching ({why})"
                ));
            }
        }
    }

    /// An attached worker's registration ended without a detach: once its
    /// process is known to have ended, it is cleaned up after like a
    /// session (`dead_process`); one still running (it closed its channel
    /// but may still use its slot) is a crash restart.
    pub(super) fn worker_lost(
        &mut self,
        origin: Origin,
        why: String,
        slot: u32,
        pid: i32,
        dead: Option<bool>,
    ) {
        let (who, ended, why) = match origin {
            Origin::Supervised(id) => {
                let w = &mut self.supervised[id];
                let exit = w.last_exit.take();
                let why = exit.unwrap_or_else(|| format!("lost its registration ({why})"));
                (w.describe(), w.pid.is_none(), why)
            }
            Origin::External { .. } => (
                "worker".to_string(),
                dead == Some(true),
                format!("lost its registration without detaching ({why}) and exited"),
            ),
        };
        if !ended {
            self.crash(&format!(
                "{who} (PID {pid}) lost its registration without detaching ({why}) but is still running"
            ));
            return;
        }
        let Some(shm) = self.shm.as_ref() else { return };
        let procno = shm.worker_procno(slot);
        self.dead_process(
            Job {
                procno,
                pid,
                who,
                why,
            },
            Some(slot),
        );
    }

    /// A supervised worker's channel usually closes because the worker is
    /// exiting: its exit status names the crash better than the closed
    /// channel, so reap for a moment (bounded: the crash handling waits
    /// anyway); true if that started a crash wait.
    pub(super) fn reap_first(&mut self, id: usize) -> bool {
        let deadline = Instant::now() + Duration::from_millis(200);
        loop {
            self.reap_children();
            if self.state == State::CrashWait || self.supervised[id].pid.is_none() {
                return self.state == State::CrashWait;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts every supervised worker whose time has come, while the
    /// server runs normally.
    pub(super) fn start_due_workers(&mut self) {
        if self.state != State::Run || self.shutting_down {
            return;
        }
        let now = Instant::now();
        for id in 0..self.supervised.len() {
            // Its reserved slot may still wait for the cleaner.
            let slot_busy = self
                .registry
                .as_ref()
                .is_some_and(|r| r.slot_in_use(id as u32));
            if self.supervised[id].is_due(now) && !slot_busy {
                self.start_worker(id);
            }
        }
    }

    /// Forks and execs supervised worker `id`; its channel joins the
    /// registry.
    pub(super) fn start_worker(&mut self, id: usize) {
        let Some((pid, channel)) = self.supervised[id].launch(&self.datadir) else {
            return;
        };
        self.children.push(Child {
            pid,
            kind: Kind::Supervised(id),
        });
        if let Some(r) = &mut self.registry {
            if let Err(e) = r.add_supervised(channel, id) {
                log("LOG", &format!("worker channel: {e}"));
            }
        }
    }
}
