//! The WAL insertion locks: which one a backend takes, what it does when
//! that one is busy, and waiting for the insertions they guard.
//!
//! Locks in use (`wal_insert_lock_spread`): with `all` a backend rotates
//! over every lock as PostgreSQL does; with `adaptive` (default), as `all`
//! while the walwriter keeps up and over one lock fewer than CPUs (at
//! least one) while it falls behind (`pace`: judged by the walwriter, read
//! by `locks_to_use` on every acquisition from its own cache line). A
//! backend starts at its proc number's lock and, whenever it had to sleep
//! for one, prefers the next one next time, which spreads backends over
//! the locks. The locks out of use stay free, so
//! `wait_insertions_to_finish`, which still looks at every lock, is
//! unaffected.
//!
//! A busy insertion lock (`wal_insert_lock_wait`): `queue` sleeps on it as
//! PostgreSQL does; `adaptive` (the default) queues until this backend's
//! recent acquisitions waited often (one in 200, `ContentionScore`), then,
//! until they stop, first takes any other free lock in use
//! (`take_a_free_insert_lock`, one load per busy lock), and when every one
//! is busy gives the CPU away (`sched_yield`) and re-scans, up to
//! `INSERT_LOCK_YIELDS` times, before sleeping. Any lock works for any
//! insertion: `wait_insertions_to_finish` looks at all of them.
//!
//! Why `queue` loses under oversubscription: a holder preempted with many
//! locks in use leaves the other lock queues running, so the run queue
//! stays long and the holder stays off the CPU while its `insertingAt` pins
//! the write position: the buffers fill and everyone waits for a page.
//! With one lock every other backend sleeps on it and the holder runs again
//! at once. `adaptive` scans only while waits are frequent, so a lightly
//! loaded server keeps `queue`'s code path.
//!
//! A held insertion lock is recorded in our proc slot (`shmem::crit`)
//! apart from other LWLocks: it is the one lock a helper may finish for a
//! process that died holding it (`crate::abandoned`).
//!
//! Waiting for insertions (`wait_insertions_to_finish`, PostgreSQL's
//! WaitXLogInsertionsToFinish): the minimum `insertingAt` over busy
//! insertion locks, sleeping on those still below the target. Race: an
//! inserter that needs an old buffer page written advertises its progress
//! first (`get_buffer`), so the writer waiting here does not wait for an
//! inserter that waits for the writer. The walwriter never sleeps on an
//! insertion that advertised its progress (`finished_insertions_nowait`),
//! because such an inserter may be one of its no-I/O waiters: waiting for
//! it would be a deadlock.

use super::Xlog;
use shmem::lwlock::{LWLockMode, VarWait};
use shmem::stats::bump;
use shmem::variants::{InsertLockWait, Insertion};
use walformat::Lsn;

/// `wal_insert_lock_wait = adaptive`, once engaged: how many times a backend
/// that found every insertion lock busy yields the CPU and scans again
/// before it sleeps.
const INSERT_LOCK_YIELDS: u32 = 8;

/// `wal_insert_lock_wait = adaptive`: one backend's recent waits for an
/// insertion lock. Each acquisition decays the score by
/// 1/2^`CONTENTION_DECAY_SHIFT` (a window of about 2048 acquisitions, a
/// few ms: waits come in bursts when a holder is preempted, and a shorter
/// window engaged on those bursts alone) and adds
/// `CONTENTION_EVENT` if it waited (slept, or needed a yield), so the
/// score settles at (waits per acquisition) x 2^23; scanning engages at
/// `CONTENTION_ENGAGE`, a wait in 1 of 200 acquisitions (one wait alone,
/// worth 2^12, never engages it). With `queue`, waits run from about one
/// in thousands of acquisitions on a lightly loaded server to one in 50
/// when it is oversubscribed.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ContentionScore(u32);

const CONTENTION_DECAY_SHIFT: u32 = 11;
const CONTENTION_EVENT: u32 = 1 << 12;
const CONTENTION_ENGAGE: u32 = (CONTENTION_EVENT << CONTENTION_DECAY_SHIFT) / 200;
const _: () = assert!(CONTENTION_EVENT < CONTENTION_ENGAGE);

impl ContentionScore {
    /// One acquisition: decay, then count it if it waited.
    fn note(&mut self, waited: bool) {
        let decay = (self.0 >> CONTENTION_DECAY_SHIFT).max(1);
        self.0 = self.0.saturating_sub(decay);
        if waited {
            self.0 = self.0.saturating_add(CONTENTION_EVENT);
        }
    }

    /// Whether waits were frequent enough to scan and yield first.
    fn engaged(self) -> bool {
        self.0 >= CONTENTION_ENGAGE
    }
}

/// How many of `n_locks` insertion locks backends spread over while the
/// walwriter is behind (`wal_insert_lock_spread = adaptive`): one fewer
/// than `cpus`, the CPUs this process may run on, but at least one.
pub(super) fn insert_locks_leaving_a_cpu(n_locks: usize, cpus: usize) -> usize {
    n_locks.min(cpus.saturating_sub(1)).max(1)
}

impl Xlog<'_> {
    /// How many insertion locks we spread over now: fewer while the
    /// walwriter is behind (`wal_insert_lock_spread = adaptive`).
    fn locks_to_use(&self) -> usize {
        match self.locks_when_writer_behind {
            Some(n) if self.writer_behind() => n,
            _ => self.locks_in_use,
        }
    }

    pub(super) fn acquire_insert_lock(&mut self) -> usize {
        let in_use = self.locks_to_use();
        let i = match self.insertion {
            Insertion::Single => 0,
            // `lock_to_try` is below `locks_in_use`; only while the walwriter
            // is behind can it be at or above `in_use` (no division then
            // on the common path).
            Insertion::Parallel if self.lock_to_try < in_use => self.lock_to_try,
            Insertion::Parallel => self.lock_to_try % in_use,
        };
        if self.insertion == Insertion::Parallel && self.scans_first() {
            if let Some((j, yielded)) = self.take_a_free_insert_lock(i, in_use) {
                self.note_contention(yielded);
                self.lock_to_try = j;
                self.holding = Some(j);
                self.ctx.me.crit.hold_insert_lock(j);
                return j;
            }
        }
        let l = self.shm.insert_lock(i);
        let at_once = l.lock.acquire(&self.ctx.env, LWLockMode::Exclusive);
        if !at_once && self.insertion == Insertion::Parallel {
            // We had to wait: try another lock next time, which spreads
            // backends over the locks.
            self.lock_to_try = (i + 1) % in_use;
        }
        self.note_contention(!at_once);
        self.holding = Some(i);
        self.ctx.me.crit.hold_insert_lock(i);
        i
    }

    /// Whether a busy insertion lock sends us scanning the others first.
    fn scans_first(&self) -> bool {
        match self.lock_wait {
            InsertLockWait::Queue => false,
            InsertLockWait::Adaptive => self.contention.engaged(),
        }
    }

    /// `adaptive`: one acquisition's share of the contention score.
    fn note_contention(&mut self, waited: bool) {
        if self.lock_wait == InsertLockWait::Adaptive {
            self.contention.note(waited);
        }
    }

    /// `wal_insert_lock_wait = adaptive`, once engaged: takes the first
    /// free insertion lock of the `in_use`, starting at `first`, without
    /// waiting; when every one is busy gives the CPU away and scans again,
    /// up to `INSERT_LOCK_YIELDS` times. Returns the lock and whether we
    /// yielded; None when every one stayed busy.
    fn take_a_free_insert_lock(&self, first: usize, in_use: usize) -> Option<(usize, bool)> {
        bump(&self.stats.insert_lock_scans, 1);
        for round in 0..=INSERT_LOCK_YIELDS {
            if round > 0 {
                bump(&self.stats.insert_lock_yields, 1);
                shmem::sync::yield_now();
            }
            for k in 0..in_use {
                let j = (first + k) % in_use;
                let l = self.shm.insert_lock(j);
                if l.lock
                    .conditional_acquire(&self.ctx.env, LWLockMode::Exclusive)
                {
                    return Some((j, round > 0));
                }
            }
        }
        None
    }

    /// Releases insertion lock `i`, then wakes the inserted-mode WAL
    /// readers if any waits (one load otherwise; `shmem::readwake`).
    pub(super) fn release_insert_lock(&mut self, i: usize) {
        let l = self.shm.insert_lock(i);
        self.ctx.me.crit.give_back_insert_lock();
        l.lock.release_clear_var(&self.ctx.env, &l.inserting_at, 0);
        self.holding = None;
        self.shm.xlog().readers.inserted.wake_after_release();
    }

    /// Advertises that we will not write below `at` any more.
    pub(super) fn update_inserting_at(&self, at: Lsn) {
        if let Some(i) = self.holding {
            let l = self.shm.insert_lock(i);
            l.lock.update_var(&self.ctx.env, &l.inserting_at, at);
        }
    }

    /// Waits until every insertion below `upto` has finished copying;
    /// returns the position below which all insertions are finished
    /// (WaitXLogInsertionsToFinish).
    pub fn wait_insertions_to_finish(&self, upto: Lsn) -> Lsn {
        let reserved = self.insert_lsn();
        let upto = upto.min(reserved);
        let mut finished = reserved;
        for i in 0..self.shm.n_insert_locks() {
            let l = self.shm.insert_lock(i);
            let mut at = 0;
            loop {
                match l.lock.wait_for_var(&self.ctx.env, &l.inserting_at, at) {
                    VarWait::Free => {
                        at = 0;
                        break;
                    }
                    VarWait::Changed(v) => {
                        at = v;
                        if v >= upto {
                            break;
                        }
                    }
                }
            }
            if at != 0 && at < finished {
                finished = at;
            }
        }
        finished
    }

    /// Walwriter: the position below which every insertion has finished,
    /// sleeping only on insertion locks whose holder has not advertised a
    /// position yet (a short copy). An inserter that advertised one may be
    /// waiting for the walwriter itself (no-I/O mode), so its advertised
    /// position is taken as it is.
    pub fn finished_insertions_nowait(&self) -> Lsn {
        let mut finished = self.insert_lsn();
        for i in 0..self.shm.n_insert_locks() {
            let l = self.shm.insert_lock(i);
            if let VarWait::Changed(at) = l.lock.wait_for_var(&self.ctx.env, &l.inserting_at, 0) {
                finished = finished.min(at);
            }
        }
        finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `n` acquisitions, one in `every` of them waited; returns how
    /// many of the last `n / 2` saw the score engaged.
    fn engaged_share(every: u32, n: u32, score: &mut ContentionScore) -> f64 {
        let mut engaged = 0;
        for k in 0..n {
            score.note(k % every == every - 1);
            if k >= n / 2 && score.engaged() {
                engaged += 1;
            }
        }
        f64::from(engaged) / f64::from(n / 2)
    }

    #[test]
    fn adaptive_insert_lock_wait_engages_only_when_waits_are_frequent() {
        let mut s = ContentionScore::default();
        assert!(!s.engaged(), "a new backend queues");
        // Uncontended (1-16 clients): never engages.
        assert_eq!(engaged_share(5000, 20_000, &mut s), 0.0);
        assert_eq!(engaged_share(400, 20_000, &mut s), 0.0);
        // Oversubscribed (64-256 clients on 2 cores): engaged all along.
        assert_eq!(engaged_share(50, 20_000, &mut s), 1.0);
        assert!(engaged_share(100, 20_000, &mut s) > 0.9);
        // Calm again: disengages within a few windows.
        assert_eq!(engaged_share(u32::MAX, 20_000, &mut s), 0.0);
    }

    #[test]
    fn a_walwriter_behind_keeps_a_cpu_but_backends_keep_one_lock() {
        // (locks, CPUs, locks in use while the walwriter is behind)
        let rows = [(8, 2, 1), (8, 1, 1), (8, 4, 3), (8, 64, 8), (128, 64, 63)];
        for (n_locks, cpus, want) in rows {
            let got = insert_locks_leaving_a_cpu(n_locks, cpus);
            assert_eq!(got, want, "{n_locks} locks, {cpus} CPUs");
        }
    }
}
