//! Unit tests of LWLocks in one process: release_all and Drop free every
//! held lock, an ended generation wakes a sleeper with a phantom hold,
//! shared holders exclude writers, and the mechanism counters.

use super::*;

fn env(procs: &[Proc]) -> LockEnv<'_> {
    LockEnv::new(procs, 0, WaitQueue::Modern, VarAccess::Atomic)
}

#[test]
fn release_all_and_drop_free_every_held_lock() {
    let procs: Vec<Proc> = (0..2).map(Proc::new).collect();
    let (a, b) = (LWLock::new(1), LWLock::new(2));
    let e = env(&procs);
    assert!(a.acquire(&e, LWLockMode::Exclusive));
    assert!(b.acquire(&e, LWLockMode::Shared));
    assert!(e.holds(&a) && e.holds(&b) && e.held_count() == 2);
    assert!(!a.conditional_acquire(&env(&procs), LWLockMode::Shared));
    e.release_all();
    assert!(a.is_free() && b.is_free() && e.held_count() == 0);
    {
        let e2 = env(&procs);
        assert!(a.acquire(&e2, LWLockMode::Exclusive));
    }
    assert!(a.is_free(), "dropping the context released the lock");
}

#[test]
fn an_ended_generation_wakes_a_sleeper_and_its_hold_is_a_phantom() {
    let procs: Vec<Proc> = (0..2).map(Proc::new).collect();
    let l = LWLock::new(1);
    let v = AtomicU64::new(0);
    let ended = AtomicU32::new(0);
    let holder = env(&procs);
    assert!(l.acquire(&holder, LWLockMode::Exclusive));
    let held_bits = l.state_bits() & LW_LOCK_MASK;
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut e = LockEnv::new(&procs, 1, WaitQueue::Modern, VarAccess::Atomic);
            e.set_generation_flag(&ended);
            // Sleeps: the holder never releases.
            assert!(!l.acquire(&e, LWLockMode::Exclusive));
            assert!(e.take_cut_short() && e.holds(&l));
            l.release(&e);
            // Once ended: no queueing, no wait.
            assert_eq!(l.wait_for_var(&e, &v, 0), VarWait::Free);
            assert!(!l.acquire(&e, LWLockMode::Shared));
            assert!(e.take_cut_short());
        });
        // Let the waiter queue and sleep, then do what the postmaster
        // does: mark ended (Release), then post every proc.
        while procs[1].lw_waiting.load(Ordering::Relaxed) != LW_WS_WAITING {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        ended.store(1, Ordering::Release);
        for p in &procs {
            p.sem.post();
        }
        waiter.join().unwrap();
    });
    // The phantom releases left the holder's state alone.
    assert_eq!(l.state_bits() & LW_LOCK_MASK, held_bits);
    assert!(holder.holds(&l));
}

#[test]
fn shared_holders_coexist_and_exclude_writers() {
    let procs: Vec<Proc> = (0..3).map(Proc::new).collect();
    let l = LWLock::new(1);
    let e0 = LockEnv::new(&procs, 0, WaitQueue::Legacy, VarAccess::WaitListLock);
    let e1 = LockEnv::new(&procs, 1, WaitQueue::Legacy, VarAccess::WaitListLock);
    assert!(l.conditional_acquire(&e0, LWLockMode::Shared));
    assert!(l.conditional_acquire(&e1, LWLockMode::Shared));
    assert!(!l.conditional_acquire(&e1, LWLockMode::Exclusive));
    l.release(&e0);
    l.release(&e1);
    assert!(l.conditional_acquire(&e0, LWLockMode::Exclusive));
    let v = AtomicU64::new(0);
    l.update_var(&e0, &v, 42);
    assert_eq!(l.wait_for_var(&e1, &v, 0), VarWait::Changed(42));
    l.release_clear_var(&e0, &v, 0);
    assert_eq!(l.wait_for_var(&e1, &v, 42), VarWait::Free);
}

#[test]
fn counters_show_the_wait_list_lock_and_the_dequeue_scan() {
    let procs: Vec<Proc> = (0..4).map(Proc::new).collect();
    let c = MechanismCounters::new();
    let l = LWLock::new(crate::segment::TRANCHE_WAL_INSERT);
    let v = AtomicU64::new(0);
    for access in [VarAccess::Atomic, VarAccess::WaitListLock] {
        let e = LockEnv::new(&procs, 0, WaitQueue::Modern, access).with_counters(&c);
        assert!(l.acquire(&e, LWLockMode::Exclusive));
        l.update_var(&e, &v, 1);
        l.release_clear_var(&e, &v, 0);
    }
    let t = c.tranche(crate::segment::TRANCHE_WAL_INSERT);
    assert_eq!(t.acquisitions.load(Ordering::Relaxed), 2);
    // update_var takes the wait-list lock in both variants; the
    // locked variant also takes it to clear the variable.
    assert_eq!(t.waitlist_lock_acquisitions.load(Ordering::Relaxed), 3);

    for (queue, scanned) in [(WaitQueue::Modern, 0), (WaitQueue::Legacy, 4)] {
        let c = MechanismCounters::new();
        let l = LWLock::new(1);
        let envs: Vec<LockEnv> = (0..4)
            .map(|i| LockEnv::new(&procs, i, queue, VarAccess::Atomic).with_counters(&c))
            .collect();
        for e in &envs {
            assert!(l.queue_self(e, LWLockMode::Exclusive));
        }
        assert_eq!(l.dequeue_self(&envs[3]), 0);
        assert_eq!(c.flat.waitlist_dequeues.load(Ordering::Relaxed), 1);
        assert_eq!(
            c.flat.waitlist_entries_scanned.load(Ordering::Relaxed),
            scanned,
            "{queue:?}"
        );
        for e in &envs[..3] {
            l.dequeue_self(e);
        }
    }
}
