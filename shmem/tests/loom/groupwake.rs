//! Loom model of the sync-rep group wake (`sync_rep_wake = group`,
//! `shmem::walsnd::GroupWake`) over the same `#[repr(C)]` structs the
//! runtime uses (`GroupWake`, `SyncRepWaiter`). Waiters loop as
//! `backend::syncrep::wait_for` does: read `seq`, check RELEASED, sleep on
//! `seq` with their LSN's bit; a releaser stores RELEASED (under a lock, as
//! under `ReplCtl::lock`) and then wakes the OR of the released waiters'
//! bits with one `wake`. Loom's futex stand-in ignores the timeout, so a
//! lost wake-up shows as a deadlock. Checked in every interleaving:
//! - every released waiter returns (no lost wake-up), including one whose
//!   bit shares nothing with another pass's bits;
//! - a waiter returns only after it saw RELEASED, and a waiter that was
//!   not released is never returned by a pass that woke other bits.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom groupwake::`.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use shmem::sync::Ordering;
use shmem::walsnd::{wait_state, GroupWake, SyncRepWaiter};
use std::time::Duration;

struct World {
    wake: GroupWake,
    waiters: [SyncRepWaiter; 2],
    /// Stands for ReplCtl::lock around the RELEASED stores.
    lock: Mutex<()>,
}

fn world(lsns: [u64; 2]) -> Arc<World> {
    let w = World {
        wake: GroupWake::default(),
        waiters: Default::default(),
        lock: Mutex::new(()),
    };
    for (s, lsn) in w.waiters.iter().zip(lsns) {
        s.lsn.store(lsn, Ordering::Relaxed);
        s.state.store(wait_state::WAITING, Ordering::Relaxed);
    }
    Arc::new(w)
}

/// `wait_for`'s loop: returns once RELEASED was seen.
fn wait(w: &World, i: usize) {
    let me = &w.waiters[i];
    let bit = GroupWake::bit_of(me.lsn.load(Ordering::Relaxed));
    loop {
        let seen = w.wake.seen();
        if me.state.load(Ordering::Acquire) == wait_state::RELEASED {
            me.state.store(wait_state::NOT_WAITING, Ordering::Relaxed);
            return;
        }
        w.wake.sleep(seen, bit, Duration::from_millis(100));
    }
}

/// One release pass of the waiters `which`.
fn release(w: &World, which: &[usize]) {
    let mut bits = 0;
    {
        let _g = w.lock.lock().unwrap();
        for &i in which {
            let s = &w.waiters[i];
            bits |= GroupWake::bit_of(s.lsn.load(Ordering::Relaxed));
            s.state.store(wait_state::RELEASED, Ordering::Release);
        }
    }
    w.wake.wake(bits);
}

/// Two waiters in different buckets, released by two passes that each
/// wake only the bit of the one they release.
#[test]
fn two_passes_wake_their_own_buckets_without_loss() {
    let lsn_a = 100;
    let lsn_b = 100 + (1 << GroupWake::BUCKET_SHIFT);
    assert_ne!(GroupWake::bit_of(lsn_a), GroupWake::bit_of(lsn_b));
    loom::model(move || {
        let w = world([lsn_a, lsn_b]);
        let waiters: Vec<_> = (0..2)
            .map(|i| {
                let w = w.clone();
                loom::thread::spawn(move || wait(&w, i))
            })
            .collect();
        release(&w, &[0]);
        release(&w, &[1]);
        for t in waiters {
            t.join().unwrap();
        }
        for s in &w.waiters {
            assert_eq!(s.state.load(Ordering::Relaxed), wait_state::NOT_WAITING);
        }
        assert_eq!(w.wake.seq.load(Ordering::Relaxed), 2);
    });
}

/// One pass releases both waiters of one bucket with one wake, from
/// another thread than the waiters' (a walsender).
#[test]
fn one_pass_wakes_a_whole_bucket() {
    loom::model(|| {
        let w = world([100, 200]);
        let releaser = {
            let w = w.clone();
            loom::thread::spawn(move || release(&w, &[0, 1]))
        };
        let other = {
            let w = w.clone();
            loom::thread::spawn(move || wait(&w, 1))
        };
        wait(&w, 0);
        other.join().unwrap();
        releaser.join().unwrap();
        assert_eq!(w.wake.seq.load(Ordering::Relaxed), 1);
    });
}

/// A pass that wakes another bucket does not end a waiter it did not
/// release: the waiter is still waiting after it, until its own pass.
#[test]
fn a_wake_of_another_bucket_does_not_release() {
    let lsn_b = 100 + (1 << GroupWake::BUCKET_SHIFT);
    loom::model(move || {
        let w = world([100, lsn_b]);
        let t = {
            let w = w.clone();
            loom::thread::spawn(move || wait(&w, 1))
        };
        release(&w, &[0]);
        assert_eq!(
            w.waiters[1].state.load(Ordering::Relaxed),
            wait_state::WAITING
        );
        release(&w, &[1]);
        t.join().unwrap();
    });
}
