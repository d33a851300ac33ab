//! Loom model of the group XID clear protocol (shmem::groupclear), over the
//! same `Proc`/`LWLock` types the runtime uses. Checks, over every
//! interleaving loom explores: each backend's XID is cleared by the time
//! `group_clear` returns to it; every clear runs under the lock (a plain
//! counter protected by it ends exact); exactly one clear per backend; and
//! nobody waits forever (loom reports a deadlock otherwise).
#![cfg(loom)]

use crate::{model, spawn_on};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use shmem::groupclear::{group_clear, GroupRole};
use shmem::lwlock::{LWLock, LWLockMode, LockEnv};
use shmem::proc::{Proc, INVALID_PROCNO};
use shmem::sync::{AtomicU32, Ordering};
use shmem::variants::{VarAccess, WaitQueue};

struct World {
    procs: Vec<Proc>,
    lock: LWLock,
    head: AtomicU32,
    /// Clears done, protected by `lock`.
    cleared: UnsafeCell<u32>,
}

// SAFETY: `cleared` is only accessed with `lock` held exclusively (or after
// every thread joined); everything else is atomics.
unsafe impl Sync for World {}
// SAFETY: as above.
unsafe impl Send for World {}

fn world(n: u32) -> Arc<World> {
    let procs = (0..n).map(Proc::new).collect();
    Arc::new(World {
        procs,
        lock: LWLock::new(1),
        head: AtomicU32::new(INVALID_PROCNO),
        cleared: UnsafeCell::new(0),
    })
}

/// One backend ending its transaction; `try_lock_first` models the real
/// caller's conditional acquisition before falling back to the group.
fn end_transaction(w: &World, me: u32, try_lock_first: bool) -> Option<GroupRole> {
    let env = LockEnv::new(&w.procs, me, WaitQueue::Modern, VarAccess::Atomic);
    let xid = 100 + me;
    w.procs[me as usize].xid.store(xid, Ordering::Relaxed);
    let clear = |p: &Proc, x: u32| {
        assert_eq!(
            p.xid.load(Ordering::Relaxed),
            x,
            "leader clears the advertised XID"
        );
        p.xid.store(0, Ordering::Relaxed);
        w.cleared.with_mut(|c| {
            // SAFETY: the callback runs with `lock` held exclusively.
            unsafe { *c += 1 }
        });
    };
    let role = if try_lock_first && w.lock.conditional_acquire(&env, LWLockMode::Exclusive) {
        clear(&w.procs[me as usize], xid);
        w.lock.release(&env);
        None
    } else {
        Some(group_clear(&env, &w.lock, &w.head, xid, clear))
    };
    assert_eq!(
        w.procs[me as usize].xid.load(Ordering::Acquire),
        0,
        "XID cleared on return"
    );
    assert_eq!(env.held_count(), 0);
    role
}

fn run(n: u32, try_lock_first: bool) {
    model(2, move || {
        let w = world(n);
        let handles: Vec<_> = (1..n)
            .map(|i| spawn_on(&w, move |w| end_transaction(w, i, try_lock_first)))
            .collect();
        let mut leaders = 0;
        let mut roles = vec![end_transaction(&w, 0, try_lock_first)];
        roles.extend(handles.into_iter().map(|h| h.join().unwrap()));
        for r in roles.iter().flatten() {
            if let GroupRole::Leader(k) = r {
                leaders += 1;
                assert!(*k >= 1);
            }
        }
        // SAFETY: every thread has joined.
        let cleared = w.cleared.with(|c| unsafe { *c });
        assert_eq!(cleared, n, "every XID cleared exactly once");
        assert_eq!(w.head.load(Ordering::Relaxed), INVALID_PROCNO);
        if !try_lock_first {
            assert!(leaders >= 1);
        }
        for p in &w.procs {
            assert_eq!(p.group_clear_member.load(Ordering::Relaxed), 0);
            assert_eq!(p.sem.count(), 0, "no wake-up left unconsumed");
        }
    });
}

#[test]
fn two_backends_group_clear() {
    run(2, false);
}

#[test]
fn three_backends_group_clear() {
    run(3, false);
}

#[test]
fn two_backends_conditional_then_group() {
    run(2, true);
}
