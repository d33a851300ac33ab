//! Loom models of the LWLock algorithm (`shmem::lwlock`), run over the very
//! same `#[repr(C)]` types the shared segment holds (`LWLock`, `Proc`,
//! `LockEnv`): under `--cfg loom` the `sync` facade hands them loom's atomics
//! and the futex semaphore degrades to a yield loop, so loom explores every
//! interleaving (and every weak-memory outcome it models) of the acquisition,
//! queueing, dequeueing and wake-up protocol.
//!
//! Why: the protocol's hard races (a release that does not see a waiter
//! queueing, a waiter that must dequeue itself while a waker already took it
//! off the list, a variable update racing a waiter's re-check) only show up
//! in rare interleavings that a stress test may never hit.
//!
//! Models, each for both wait queues (`Modern`, `Legacy`):
//! - `exclusive_*`: two exclusive lockers; a loom `UnsafeCell` counter proves
//!   mutual exclusion (loom reports any unsynchronized access) and the final
//!   count;
//! - `mixed_*`: three threads mixing shared and exclusive (preemption-bounded
//!   so it finishes quickly);
//! - `acquire_or_wait_*`: `acquire_or_wait` against an exclusive holder: it
//!   either gets the lock or returns only once the holder's work is visible;
//! - `var_wait_*`: one holder publishes a variable twice then clears it and
//!   releases; a waiter loops on `wait_for_var` until `Free`, checking that
//!   it terminates and never sees a published value go backwards — for both
//!   `VarAccess::Atomic` and `VarAccess::WaitListLock`.
//!
//! After every execution the lock must be free with only RELEASE_OK set, and
//! every proc must be NOT_WAITING with no unconsumed semaphore post.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom lwlock::`.
#![cfg(loom)]

use crate::spawn_on;
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use shmem::lwlock::{LWLock, LWLockMode, LockEnv, VarWait, LW_FLAG_RELEASE_OK};
use shmem::proc::{Proc, LW_WS_NOT_WAITING};
use shmem::sync::Ordering;
use shmem::variants::{VarAccess, WaitQueue};

/// Everything the threads of one model share.
struct Shared {
    lock: LWLock,
    procs: Vec<Proc>,
    /// Plain data protected by `lock`; loom checks every access.
    counter: UnsafeCell<u64>,
    /// The `insertingAt`-like variable of the var-wait model.
    var: AtomicU64,
}

// SAFETY: `counter` is only accessed through loom's checked `with`/`with_mut`
// while `lock` is held in a compatible mode (or after every thread has been
// joined); loom itself reports any access that is not ordered by the lock.
// Every other field is made of loom atomics.
unsafe impl Sync for Shared {}
// SAFETY: as above; nothing in `Shared` is tied to a thread.
unsafe impl Send for Shared {}

impl Shared {
    fn new(nprocs: u32) -> Arc<Shared> {
        Arc::new(Shared {
            lock: LWLock::new(0),
            procs: (0..nprocs).map(Proc::new).collect(),
            counter: UnsafeCell::new(0),
            var: AtomicU64::new(0),
        })
    }

    fn env(&self, me: u32, queue: WaitQueue, var_access: VarAccess) -> LockEnv<'_> {
        LockEnv::new(&self.procs, me, queue, var_access)
    }

    /// Exclusive critical section: bump the counter.
    fn bump(&self) {
        // SAFETY: called with `lock` held exclusively; loom verifies that no
        // other access to the cell is concurrent with this one.
        self.counter.with_mut(|p| unsafe { *p += 1 });
    }

    /// Shared (or post-wait) read of the counter.
    fn read(&self) -> u64 {
        // SAFETY: called with `lock` held in shared mode or after the last
        // writer's work was ordered before us; loom verifies it.
        self.counter.with(|p| unsafe { *p })
    }

    /// Did any thread sleep on its semaphore in this execution?
    fn slept(&self) -> bool {
        self.procs
            .iter()
            .any(|p| p.counters.lock_sleeps.load(Ordering::Relaxed) > 0)
    }

    /// The end of a model's execution: the counter reads `count`, the
    /// state is quiescent; returns whether a thread slept.
    fn finished(&self, count: u64) -> bool {
        assert_eq!(self.read(), count);
        self.check_quiescent();
        self.slept()
    }

    /// The state every execution must end in.
    fn check_quiescent(&self) {
        assert_eq!(
            self.lock.state_bits(),
            LW_FLAG_RELEASE_OK,
            "lock must end free, without waiters, with RELEASE_OK"
        );
        self.check_procs_idle();
    }

    /// Every proc is NOT_WAITING with no unconsumed semaphore post.
    fn check_procs_idle(&self) {
        for p in &self.procs {
            assert_eq!(p.lw_waiting.load(Ordering::Relaxed), LW_WS_NOT_WAITING);
            assert_eq!(
                p.sem.count(),
                0,
                "proc {} has an unconsumed post",
                p.procno()
            );
        }
    }
}

/// Runs `body(shared, me)` on one loom thread per proc `0..n` and joins
/// them all (a panic in any thread fails the execution).
fn run_threads(s: &Arc<Shared>, n: u32, body: impl Fn(&Shared, u32) + Copy + Send + 'static) {
    let handles: Vec<_> = (0..n).map(|me| spawn_on(s, move |s| body(s, me))).collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// One `#[test]` per wait queue for a model that takes the queue.
macro_rules! per_queue {
    ($model:ident: $modern:ident, $legacy:ident) => {
        #[test]
        fn $modern() {
            $model(WaitQueue::Modern);
        }

        #[test]
        fn $legacy() {
            $model(WaitQueue::Legacy);
        }
    };
}

/// Runs `f` under loom with at most `preemptions` preemptions per execution
/// (unless LOOM_MAX_PREEMPTIONS says otherwise), reports how many executions
/// were explored, and checks that in some of them a thread really slept on
/// its semaphore (`f` returns whether one did): a model that never reaches
/// the wait path would prove little.
fn check(name: &str, preemptions: usize, f: impl Fn() -> bool + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(preemptions);
    }
    let bound = b.preemption_bound;
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let slept = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r, sl) = (runs.clone(), slept.clone());
    let t0 = std::time::Instant::now();
    b.check(move || {
        r.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if f() {
            sl.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
    let slept = slept.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{name}: {runs} executions ({slept} with a semaphore sleep), preemption bound {bound:?}, {:.1?}",
        t0.elapsed()
    );
    assert!(slept > 0, "{name}: no execution reached the sleep path");
}

// --- (a) two exclusive lockers -------------------------------------------

fn exclusive_model(queue: WaitQueue) {
    check(&format!("exclusive/{}", queue.name()), 5, move || {
        let s = Shared::new(2);
        run_threads(&s, 2, move |s, me| {
            let env = s.env(me, queue, VarAccess::Atomic);
            s.lock.acquire(&env, LWLockMode::Exclusive);
            s.bump();
            s.lock.release(&env);
            assert_eq!(env.held_count(), 0);
        });
        s.finished(2)
    });
}

per_queue!(exclusive_model: exclusive_modern, exclusive_legacy);

// --- (b) three threads, shared and exclusive ------------------------------

fn mixed_model(queue: WaitQueue) {
    check(&format!("mixed/{}", queue.name()), 2, move || {
        let s = Shared::new(3);
        let modes = [
            LWLockMode::Exclusive,
            LWLockMode::Shared,
            LWLockMode::Exclusive,
        ];
        run_threads(&s, 3, move |s, me| {
            let mode = modes[me as usize];
            let env = s.env(me, queue, VarAccess::Atomic);
            s.lock.acquire(&env, mode);
            match mode {
                LWLockMode::Exclusive => s.bump(),
                _ => {
                    let seen = s.read();
                    assert!(seen <= 2, "shared holder saw {seen}");
                }
            }
            s.lock.release(&env);
        });
        s.finished(2)
    });
}

per_queue!(mixed_model: mixed_modern, mixed_legacy);

// --- (c) acquire_or_wait ----------------------------------------------------

fn acquire_or_wait_model(queue: WaitQueue) {
    check(&format!("acquire_or_wait/{}", queue.name()), 5, move || {
        let s = Shared::new(2);
        let holder = spawn_on(&s, move |s| {
            let env = s.env(0, queue, VarAccess::Atomic);
            s.lock.acquire(&env, LWLockMode::Exclusive);
            s.bump();
            s.lock.release(&env);
        });
        let env = s.env(1, queue, VarAccess::Atomic);
        let got = s.lock.acquire_or_wait(&env, LWLockMode::Exclusive);
        if got {
            assert!(env.holds(&s.lock));
            s.bump();
            s.lock.release(&env);
        } else {
            // It waited for the holder to release: the holder's work must be
            // visible (loom flags the read if it is not ordered after it).
            assert!(!env.holds(&s.lock));
            assert_eq!(
                s.read(),
                1,
                "acquire_or_wait returned before the holder finished"
            );
        }
        holder.join().unwrap();
        s.finished(1 + got as u64)
    });
}

per_queue!(acquire_or_wait_model: acquire_or_wait_modern, acquire_or_wait_legacy);

// --- (d) variable waits -----------------------------------------------------

/// Value the holder stores when it releases (InvalidXLogRecPtr).
const CLEARED: u64 = 0;
/// Values the holder publishes, in order.
const PUBLISHED: [u64; 2] = [10, 20];

fn var_wait_model(queue: WaitQueue, var_access: VarAccess) {
    let name = format!("var_wait/{}/{}", queue.name(), var_access.name());
    check(&name, 2, move || {
        let s = Shared::new(2);
        // The holder takes the lock before the waiter exists, so the waiter
        // can only see `Free` once the holder has released.
        let env0 = s.env(0, queue, var_access);
        s.lock.acquire(&env0, LWLockMode::Exclusive);

        let waiter = spawn_on(&s, move |s| {
            let env = s.env(1, queue, var_access);
            let mut oldval = CLEARED;
            let mut highest = CLEARED;
            let mut seen_cleared = false;
            // Bounded: each call returns a value different from the last
            // one, and only 2 published values plus CLEARED exist, so
            // more than 4 calls means the wait does not terminate.
            for _ in 0..4 {
                match s.lock.wait_for_var(&env, &s.var, oldval) {
                    VarWait::Free => {
                        assert_eq!(env.held_count(), 0);
                        return;
                    }
                    VarWait::Changed(v) => {
                        assert_ne!(v, oldval, "Changed must report a different value");
                        if v == CLEARED {
                            // The holder is releasing (PostgreSQL's
                            // WaitXLogInsertionsToFinish sees this too);
                            // nothing is published after the clear.
                            seen_cleared = true;
                        } else {
                            assert!(PUBLISHED.contains(&v), "unexpected value {v}");
                            assert!(!seen_cleared, "value {v} seen after the clear");
                            assert!(v > highest, "value went backwards: {highest} then {v}");
                            highest = v;
                        }
                        oldval = v;
                    }
                }
            }
            panic!("wait_for_var did not reach Free");
        });

        for v in PUBLISHED {
            s.lock.update_var(&env0, &s.var, v);
        }
        s.lock.release_clear_var(&env0, &s.var, CLEARED);
        waiter.join().unwrap();
        assert_eq!(s.var.load(Ordering::Relaxed), CLEARED);
        // update_var moves waiters off the list without clearing
        // HAS_WAITERS (as PostgreSQL does), so only the lock bits and the
        // procs' states are checked here.
        assert!(s.lock.is_free());
        s.check_procs_idle();
        s.slept()
    });
}

crate::test_cases! { var_wait_model:
    var_wait_modern_atomic => (WaitQueue::Modern, VarAccess::Atomic),
    var_wait_legacy_atomic => (WaitQueue::Legacy, VarAccess::Atomic),
    var_wait_modern_waitlistlock => (WaitQueue::Modern, VarAccess::WaitListLock),
    var_wait_legacy_waitlistlock => (WaitQueue::Legacy, VarAccess::WaitListLock),
}

// --- the models can fail ----------------------------------------------------

/// Sanity check of the harness: two threads that bump the counter under a
/// *shared* hold must be caught by loom's access tracking, so a broken lock
/// would not pass the models above.
#[test]
#[should_panic]
fn broken_exclusion_is_detected() {
    check("broken", 2, || {
        let s = Shared::new(2);
        run_threads(&s, 2, |s, me| {
            let env = s.env(me, WaitQueue::Modern, VarAccess::Atomic);
            s.lock.acquire(&env, LWLockMode::Shared);
            s.bump();
            s.lock.release(&env);
        });
        true
    });
}
