//! A session's turn at inserting (`insert_concurrency_per_cpu`, walshm's
//! own): the process side of `shmem::admission`.
//!
//! [`Turn::before_insert`] runs before every insertion through the API
//! (`api::Session`): with `insert_concurrency_per_cpu = 0` it is one branch; with a
//! limit, a holder pays a Relaxed load per call and a clock read every
//! `CHECK_EVERY` calls, and passes its token once its turn is over and
//! somebody waits. A process without a token sleeps on its semaphore
//! (wait event `InsertAdmission`) until a holder hands one over, or, as
//! the queue's head, until it may revoke a token whose holder overran.
//!
//! Invariants:
//! - a token is held only between calls of the API, never across a wait
//!   the session itself makes for something slow: [`Turn::pause`] passes
//!   it before a durable commit's flush and an explicit flush (else the
//!   commits of a group flush would wait for each other's tokens), and
//!   the session's end passes it;
//! - what is limited is the number of processes that insert without
//!   sleeping: after such a wait a process inserts for one turn without a
//!   token (`exempt_until`), so transactions that commit durably more
//!   often than once a turn never queue;
//! - a wait for a token ends when the process is asked to shut down or
//!   its server generation ended: then it inserts without a token (the
//!   generation's shared state, this queue included, is not touched once
//!   it ended: a process that died may hold its spinlock).

use crate::context::ProcContext;
use crate::process::shutdown_requested;
use shmem::admission::{Admission, AdmissionWaiter, Entry};
use shmem::clock::monotonic_ns;
use shmem::proc::Proc;
use shmem::waitevent;
use std::time::Duration;

/// Calls between two looks at the clock by a holder (a clock read costs
/// about as much as an emit:16 record's insertion).
const CHECK_EVERY: u32 = 16;

/// Bounds of a queued process's sleep before it looks again: the queue's
/// head naps until a turn could be revoked, at least `MIN_NAP`; the others
/// only wait for a hand-off (`LONG_NAP` bounds a lost post, and the time
/// a new head takes to notice that it may revoke).
const MIN_NAP: Duration = Duration::from_millis(1);
const LONG_NAP: Duration = Duration::from_millis(100);

pub struct Turn<'a> {
    ctx: &'a ProcContext<'a>,
    adm: &'a Admission,
    waiters: &'a [AdmissionWaiter],
    n_tokens: usize,
    turn_ns: u64,
    /// The token we believe we hold.
    held: Option<usize>,
    /// After a slow wait of our own (`pause`), we insert without a token
    /// until then (monotonic ns; 0: not exempt).
    exempt_until: u64,
    calls: u32,
}

impl<'a> Turn<'a> {
    pub fn new(ctx: &'a ProcContext<'a>) -> Turn<'a> {
        Turn {
            ctx,
            adm: ctx.shm.admission(),
            waiters: ctx.shm.admission_waiters(),
            n_tokens: tokens(ctx.settings.insert_concurrency_per_cpu),
            turn_ns: ctx.settings.insert_concurrency_turn_us as u64 * 1_000,
            held: None,
            exempt_until: 0,
            calls: 0,
        }
    }

    /// Before an insertion: makes sure we hold a token (see the header).
    #[inline]
    pub fn before_insert(&mut self) {
        if self.n_tokens == 0 {
            return;
        }
        match self.held {
            Some(k) if self.adm.holds(k, self.ctx.procno) => {
                self.calls = self.calls.wrapping_add(1);
                if self.calls.is_multiple_of(CHECK_EVERY) {
                    self.check_turn(k);
                }
            }
            _ if self.exempt_until != 0 => {
                self.calls = self.calls.wrapping_add(1);
                if self.calls.is_multiple_of(CHECK_EVERY) {
                    self.check_exemption();
                }
            }
            _ => self.wait_for_token(),
        }
    }

    /// Passes our token on before a slow wait of the session's own (or at
    /// its end). A process that sleeps in such waits does not crowd the
    /// CPUs: for a turn after each it inserts without a token (else each
    /// commit would cost a second sleep, in the queue: emit-tx:64 at 256
    /// clients ran at 0.52x); one that inserts longer than that without
    /// such a wait asks for a token.
    pub fn pause(&mut self) {
        if self.n_tokens == 0 {
            return;
        }
        let now = monotonic_ns();
        if let Some(k) = self.held.take() {
            self.pass(k, now);
        }
        self.exempt_until = now + self.turn_ns;
        self.calls = 0;
    }

    #[cold]
    fn check_exemption(&mut self) {
        if monotonic_ns() >= self.exempt_until {
            self.exempt_until = 0;
            self.wait_for_token();
        }
    }

    #[cold]
    fn check_turn(&mut self, k: usize) {
        let now = monotonic_ns();
        if now < self.adm.turn_end(k) {
            return;
        }
        if self.adm.anyone_queued() {
            self.held = None;
            self.pass(k, now);
            self.wait_for_token();
        } else {
            self.adm.renew(k, now + self.turn_ns);
        }
    }

    fn pass(&self, k: usize, now: u64) {
        let me = self.ctx.procno;
        if let Some(next) = self.adm.pass(self.waiters, k, me, self.turn_ns, now) {
            self.proc(next).sem.post();
        }
    }

    fn proc(&self, procno: u32) -> &Proc {
        &self.ctx.shm.procs()[procno as usize]
    }

    #[cold]
    fn wait_for_token(&mut self) {
        self.held = None;
        self.exempt_until = 0;
        if self.must_not_wait() {
            return;
        }
        let me = self.ctx.procno;
        let (n, turn) = (self.n_tokens, self.turn_ns);
        let mut entry = self.adm.enter(self.waiters, me, n, turn, monotonic_ns());
        if entry == Entry::Queued {
            let prev = waitevent::report(waitevent::INSERT_ADMISSION);
            while entry == Entry::Queued {
                if self.must_not_wait() {
                    self.give_up_waiting();
                    break;
                }
                self.ctx.me.sem.wait_timeout(self.nap());
                entry = self.adm.look(self.waiters, me, n, turn, monotonic_ns());
            }
            waitevent::restore(prev);
        }
        if let Entry::Holds(k) = entry {
            self.held = Some(k);
            self.calls = 0;
        }
    }

    /// The queue's head: until the earliest turn could be revoked (a
    /// holder's pass posts us before that), at least `MIN_NAP`, at most two
    /// turns. Any other waiter: `LONG_NAP`.
    fn nap(&self) -> Duration {
        if !self.adm.is_head(self.ctx.procno) {
            return LONG_NAP;
        }
        let revocable = self.adm.earliest_turn_end(self.n_tokens) + self.turn_ns;
        let ns = revocable
            .saturating_sub(monotonic_ns())
            .clamp(MIN_NAP.as_nanos() as u64, 2 * self.turn_ns);
        Duration::from_nanos(ns)
    }

    fn must_not_wait(&self) -> bool {
        shutdown_requested() || self.ctx.generation_ended()
    }

    /// Leaves the queue (passing on a token granted meanwhile).
    fn give_up_waiting(&self) {
        if self.ctx.generation_ended() {
            return;
        }
        let me = self.ctx.procno;
        if let Some(k) = self.adm.cancel(self.waiters, me) {
            self.pass(k, monotonic_ns());
        }
    }
}

/// A dead process's tokens and queue place (`crate::abandoned`): passed
/// on and left by `ctx`'s process on its behalf; returns how many tokens
/// it held.
pub fn release_all_of(ctx: &ProcContext, procno: u32) -> u32 {
    let turn_ns = ctx.settings.insert_concurrency_turn_us as u64 * 1_000;
    let (had, posts) = ctx.shm.admission().release_all_of(
        ctx.shm.admission_waiters(),
        procno,
        turn_ns,
        monotonic_ns(),
    );
    for next in posts {
        ctx.shm.procs()[next as usize].sem.post();
    }
    had
}

/// How many tokens there are: `per_cpu` times the CPUs this process may
/// run on. Each process counts for itself (forked ones inherit the
/// postmaster's mask); a worker pinned to fewer CPUs sees fewer tokens,
/// which only makes it queue sooner.
fn tokens(per_cpu: u32) -> usize {
    let cpus = crate::client_poll::cpus_allowed() as usize;
    (per_cpu as usize * cpus).min(shmem::admission::MAX_TOKENS)
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.ctx.generation_ended() {
            self.pause();
        }
    }
}
