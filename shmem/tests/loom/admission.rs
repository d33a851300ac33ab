//! Loom model of the admission queue's hand-off
//! (`insert_concurrency_per_cpu`, `shmem::admission`): three processes, one
//! token. Each enters; a queued one sleeps on its semaphore until a holder
//! passes the token to it (no revocation here: the turn never ends).
//! Loom explores every interleaving and checks:
//! - nobody sleeps forever (loom reports a deadlock otherwise): a pass
//!   that grants the token always posts the process it granted it to,
//!   and a waiter that looks after the grant finds it;
//! - at most one process holds the token at a time;
//! - the queue ends empty and the token free.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom admission::`.
#![cfg(loom)]

use crate::spawn_on;
use loom::sync::Arc;
use shmem::admission::{Admission, AdmissionWaiter, Entry};
use shmem::proc::Proc;
use shmem::sync::{AtomicU32, Ordering};

const TURN: u64 = u64::MAX / 4;

struct World {
    adm: Admission,
    waiters: Vec<AdmissionWaiter>,
    procs: Vec<Proc>,
    holders: AtomicU32,
}

fn process(w: &World, me: u32) {
    let mut e = w.adm.enter(&w.waiters, me, 1, TURN, 0);
    while e == Entry::Queued {
        w.procs[me as usize].sem.wait();
        e = w.adm.look(&w.waiters, me, 1, TURN, 0);
    }
    let Entry::Holds(k) = e else { unreachable!() };
    assert_eq!(w.holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
    w.holders.fetch_sub(1, Ordering::SeqCst);
    if let Some(next) = w.adm.pass(&w.waiters, k, me, TURN, 0) {
        w.procs[next as usize].sem.post();
    }
}

#[test]
fn every_queued_process_gets_the_token_in_turn() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.max_branches = 100_000;
    b.check(|| {
        let w = Arc::new(World {
            adm: Admission::new(),
            waiters: (0..3).map(|_| AdmissionWaiter::new()).collect(),
            procs: (0..3).map(Proc::new).collect(),
            holders: AtomicU32::new(0),
        });
        let others: Vec<_> = (1..3)
            .map(|me| spawn_on(&w, move |w| process(w, me)))
            .collect();
        process(&w, 0);
        for t in others {
            t.join().unwrap();
        }
        assert!(!w.adm.anyone_queued());
        assert_eq!(w.adm.enter(&w.waiters, 0, 1, TURN, 0), Entry::Holds(0));
    });
}
