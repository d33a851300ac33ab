//! Loom models of the flush hand-off (issue 16, `shmem::proc::FlushWaiters`)
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
//! - a waiter that was woken sees a flush result covering its LSN.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom_flushwaiters`.
#![cfg(loom)]

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
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let w = world(2);
        let hs: Vec<_> = [(0usize, 10u64), (1, 20)]
            .into_iter()
            .map(|(p, lsn)| {
                let w = w.clone();
                loom::thread::spawn(move || wait_for(&w, p, lsn))
            })
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
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let w = world(1);
        let waiter = {
            let w = w.clone();
            loom::thread::spawn(move || wait_for(&w, 0, 20))
        };
        // The older flusher may take the waiter's bit, find it not covered
        // and put it back after the newer one's pass.
        let older = {
            let w = w.clone();
            loom::thread::spawn(move || flush_and_notify(&w, 10))
        };
        flush_and_notify(&w, 20);
        older.join().unwrap();
        waiter.join().unwrap();
        check_posts(&w);
    });
}
