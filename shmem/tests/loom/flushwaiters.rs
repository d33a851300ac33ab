//! Loom models of the flush hand-off (`shmem::proc::FlushWaiters`)
//! over the same `Proc` slots the runtime uses. A waiter publishes the LSN
//! it needs, re-checks the flush result after a SeqCst fence and sleeps on
//! its semaphore; a notifier advances the flush result and calls `notify`.
//! Loom explores every interleaving and checks:
//! - nobody sleeps forever (loom reports a deadlock otherwise): no lost
//!   wake-up between a waiter's publish and a notifier's pass, including
//!   two notifiers at once (a `hybrid` leader beside the walwriter), one of
//!   which puts back a bit the other needed;
//! - each request is posted at most once (a semaphore count left over is
//!   0 or 1, never 2);
//! - a waiter that was woken sees a flush result covering its LSN;
//! - `group_commit = hybrid`: committers that lead when the write lock is
//!   free and otherwise publish and sleep, every lock release notifying
//!   and handing the next flush to the oldest uncovered waiter, all finish
//!   (no committer sleeps forever when the leader's flush did not cover
//!   it), each covered by a flush, and every baton a hand-off recorded is
//!   cleared by its holder.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom flushwaiters::`.
#![cfg(loom)]

use crate::{model, spawn_on};
use loom::sync::Arc;
use shmem::proc::{FlushWaiters, Proc};
use shmem::sync::{fence, AtomicU64, Ordering};

struct World {
    procs: Vec<Proc>,
    waiters: FlushWaiters,
    /// The flush result (`flush_result`).
    flushed: AtomicU64,
}

fn world(n: u32) -> Arc<World> {
    Arc::new(World {
        procs: (0..n).map(Proc::new).collect(),
        waiters: FlushWaiters::new(),
        flushed: AtomicU64::new(0),
    })
}

/// A backend waiting for `lsn` (as `Xlog::wait_for_walwriter`, untimed).
fn wait_for(w: &World, procno: usize, lsn: u64) {
    let me = &w.procs[procno];
    w.waiters.publish(me, lsn);
    loop {
        // SeqCst: as the waiter's fence in `wait_for_walwriter`.
        fence(Ordering::SeqCst);
        if w.flushed.load(Ordering::Acquire) >= lsn {
            break;
        }
        me.sem.wait();
    }
    me.flush_wanted.store(0, Ordering::Relaxed);
}

/// A flusher that made WAL durable up to `to`, then notifies.
fn flush_and_notify(w: &World, to: u64) {
    // Release: as the fetch_max of `flush_result` in `xlog_write`.
    w.flushed.fetch_max(to, Ordering::Release);
    w.waiters
        .notify(&w.procs, || w.flushed.load(Ordering::Acquire));
}

fn check_posts(w: &World) {
    for p in &w.procs {
        assert!(p.sem.count() <= 1, "a request was posted twice");
    }
}

#[test]
fn two_waiters_one_notifier() {
    model(3, || {
        let w = world(2);
        let hs: Vec<_> = [(0usize, 10u64), (1, 20)]
            .into_iter()
            .map(|(p, lsn)| spawn_on(&w, move |w| wait_for(w, p, lsn)))
            .collect();
        flush_and_notify(&w, 10);
        flush_and_notify(&w, 20);
        for h in hs {
            h.join().unwrap();
        }
        check_posts(&w);
    });
}

#[test]
fn one_waiter_two_concurrent_notifiers() {
    model(3, || {
        let w = world(1);
        let waiter = spawn_on(&w, |w| wait_for(w, 0, 20));
        // The older flusher may take the waiter's bit, find it not covered
        // and put it back after the newer one's pass.
        let older = spawn_on(&w, |w| flush_and_notify(w, 10));
        flush_and_notify(&w, 20);
        older.join().unwrap();
        waiter.join().unwrap();
        check_posts(&w);
    });
}

/// The hybrid world: `World` plus WALWriteLock (a try-lock is all a
/// hybrid committer uses) and what each committer's insertion finished.
struct Hybrid {
    w: Arc<World>,
    write_lock: loom::sync::atomic::AtomicBool,
}

impl Hybrid {
    /// `Xlog::lead_if_free`: if the lock is free, flush up to our own LSN
    /// (as if later insertions were not finished), release, notify and
    /// hand off (`release_wal_write_lock`). True if `lsn` is flushed.
    fn lead_if_free(&self, procno: usize, lsn: u64) -> bool {
        let w = &self.w;
        if self
            .write_lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return w.flushed.load(Ordering::Acquire) >= lsn;
        }
        w.waiters.withdraw(&w.procs[procno]);
        let _ = w.waiters.take_baton(procno as u32);
        w.flushed.fetch_max(lsn, Ordering::Release);
        self.write_lock.store(false, Ordering::Release);
        self.notify();
        true
    }

    /// The notifier pass of a release, handing the next flush to the
    /// oldest uncovered waiter.
    fn notify(&self) {
        let w = &self.w;
        let procs = &w.procs;
        w.waiters.notify_with(
            procs,
            procs.len() as u32,
            || w.flushed.load(Ordering::Acquire),
            |n| {
                if let Some(next) = n.oldest {
                    w.waiters.hand_off(procs, next);
                }
            },
        );
    }

    /// `Xlog::flush_as_hybrid`, untimed.
    fn commit(&self, procno: usize, lsn: u64) {
        let w = &self.w;
        let me = &w.procs[procno];
        loop {
            if self.lead_if_free(procno, lsn) {
                return;
            }
            w.waiters.publish(me, lsn);
            // SeqCst: as the waiter's fence in `flush_as_hybrid`.
            fence(Ordering::SeqCst);
            if w.flushed.load(Ordering::Acquire) >= lsn || self.lead_if_free(procno, lsn) {
                w.waiters.withdraw(me);
                return;
            }
            me.sem.wait();
            let _ = w.waiters.take_baton(procno as u32);
            w.waiters.withdraw(me);
            if w.flushed.load(Ordering::Acquire) >= lsn {
                return;
            }
        }
    }
}

fn hybrid(n: u32) -> Arc<Hybrid> {
    Arc::new(Hybrid {
        w: world(n),
        write_lock: loom::sync::atomic::AtomicBool::new(false),
    })
}

#[test]
fn hybrid_committers_hand_the_flush_on() {
    model(2, || {
        let h = hybrid(2);
        let other = spawn_on(&h, |h| h.commit(1, 20));
        h.commit(0, 10);
        other.join().unwrap();
        assert!(h.w.flushed.load(Ordering::Acquire) >= 20);
        // Every baton handed out was cleared by its holder.
        assert!(!h.w.waiters.take_baton(0) && !h.w.waiters.take_baton(1));
    });
}
