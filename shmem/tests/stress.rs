//! Multi-process stress of the LWLock implementation in a real shared
//! segment: many forked processes (64 and 256, on however few cores) hammer
//! one lock, so that the wait-queue, wake-up and semaphore paths run with
//! real preemption, real futexes and long queues — what loom cannot model.
//!
//! Checks, for both wait queues (`Modern`, `Legacy`):
//! - `lock_*`: children mix shared holds (which verify that the protected
//!   counter and its mirror agree) and exclusive holds (which bump both
//!   non-atomically, plus a few `acquire_or_wait`); afterwards the counter
//!   equals the number of exclusive holds the children counted, no shared
//!   holder saw a torn pair, and the lock is free with no waiter, no proc
//!   left waiting and no unconsumed semaphore post;
//! - `var_wait_*` (also for both `VarAccess` variants): "inserters" hold WAL
//!   insertion locks and advance `inserting_at` with `update_var` before
//!   `release_clear_var`; "flushers" loop on `wait_for_var` until `Free`.
//!   Flushers must terminate, never see a published value go backwards or
//!   ahead of what the holder recorded, and the recorded positions prove the
//!   inserters' mutual exclusion.
//!
//! Safety net: a hang is a failure (children are polled with a deadline and
//! SIGKILLed), a child never returns into the test harness (it `_exit`s,
//! also on panic), and a guard kills leftover children on every path,
//! failure included (the segment is unnamed and goes with them).
#![cfg(not(loom))]

#[path = "common/anon_map.rs"]
mod anon_map;
#[path = "common/counters.rs"]
mod counters;
use counters::counter_sum;
/// `test_cases!`, the root integration tests' table of cases.
#[path = "../../tests/common/cases.rs"]
mod cases;
use anon_map::AnonMap;

use shmem::lwlock::{LWLockMode, LockEnv, VarWait, LW_FLAG_LOCKED, LW_FLAG_RELEASE_OK};
use shmem::proc::{ProcCounters, LW_WS_NOT_WAITING};
use shmem::sync::{AtomicU32, Ordering};
use shmem::variants::{VarAccess, WaitQueue};
use shmem::{NamedLock, Settings, Shmem};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Proc slots in every test segment (children use slots 0..n).
const MAX_BACKENDS: u32 = 300;
/// A test whose children have not all exited by then has hung.
const DEADLINE: Duration = Duration::from_secs(90);

/// The tests fork hundreds of processes each: run them one at a time so that
/// each gets the machine and its timings mean something.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills and reaps every child still registered, whatever way the test
/// ends (the segment is unnamed: it goes with the last mapping).
struct Guard {
    children: Vec<libc::pid_t>,
}

impl Guard {
    fn new() -> Guard {
        Guard {
            children: Vec::new(),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for &pid in &self.children {
            // SAFETY: `pid` is a child we forked and have not reaped yet, so
            // the pid cannot have been recycled for another process.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for &pid in &self.children {
            let mut status = 0;
            // SAFETY: reaping our own child; `status` is a valid out-pointer.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        self.children.clear();
    }
}

/// A zeroed page shared with the children (the start flag).
struct SharedPage {
    map: AnonMap,
}

impl SharedPage {
    fn new() -> SharedPage {
        SharedPage {
            map: AnonMap::new(4096),
        }
    }

    fn go(&self) -> &AtomicU32 {
        // SAFETY: the page is mapped for the life of `self`, page-aligned,
        // zero-filled (a valid AtomicU32 0) and only accessed atomically.
        unsafe { &*(self.map.ptr() as *const AtomicU32) }
    }
}

fn create_segment(queue: WaitQueue, var_access: VarAccess) -> (Guard, Shmem) {
    let guard = Guard::new();
    let settings = Settings {
        lwlock_queue: queue,
        inserting_at: var_access,
        wal_buffers: 4,
        wal_insert_locks: 4,
        ..Settings::default()
    };
    let shmem = Shmem::create(&settings, MAX_BACKENDS, 1).expect("create segment");
    (guard, shmem)
}

/// Forks `n` children; child `i` waits for the start flag, runs `body(i,
/// env)` with proc slot `i` and `_exit`s: 0 when it returned true, 1 when
/// false, 2 when it panicked. The env is built before the fork, so the child
/// allocates nothing to get going.
fn fork_children(
    guard: &mut Guard,
    shmem: &Shmem,
    start: &SharedPage,
    n: usize,
    body: impl Fn(usize, &LockEnv) -> bool,
) {
    for i in 0..n {
        let env = shmem.lock_env(i as u32);
        // SAFETY: fork has no memory-safety preconditions; the child only
        // touches the inherited shared mappings and its own copies, then
        // leaves through _exit without running the harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let r = catch_unwind(AssertUnwindSafe(|| {
                while start.go().load(Ordering::Acquire) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                body(i, &env)
            }));
            let code = match r {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(payload) => {
                    // The harness captured the panic message into this
                    // process's copy of its buffer: say it on fd 2 instead.
                    let msg = payload
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| payload.downcast_ref::<&str>().copied())
                        .unwrap_or("(non-string panic)");
                    let line = format!("child {i}: panicked: {msg}\n");
                    // SAFETY: writing an owned, live buffer to stderr.
                    unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
                    2
                }
            };
            // SAFETY: _exit ends the child at once, without unwinding into
            // (or running atexit handlers of) the parent's test harness.
            unsafe { libc::_exit(code) };
        }
        guard.children.push(pid);
    }
}

/// Waits for every registered child; panics (and so kills the rest through
/// the guard) when the deadline passes. Returns the exit statuses.
fn wait_children(guard: &mut Guard, deadline: Duration) -> Vec<(libc::pid_t, libc::c_int)> {
    let end = Instant::now() + deadline;
    let mut done = Vec::new();
    while !guard.children.is_empty() {
        let mut i = 0;
        while i < guard.children.len() {
            let pid = guard.children[i];
            let mut status = 0;
            // SAFETY: polling our own child; `status` is a valid out-pointer.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                done.push((pid, status));
                guard.children.swap_remove(i);
            } else {
                assert_eq!(r, 0, "waitpid({pid}): {}", std::io::Error::last_os_error());
                i += 1;
            }
        }
        if guard.children.is_empty() {
            break;
        }
        assert!(
            Instant::now() < end,
            "timeout: {} of the children still running after {deadline:?} (hang?)",
            guard.children.len()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    done
}

fn assert_all_exited_zero(statuses: &[(libc::pid_t, libc::c_int)]) {
    let bad: Vec<String> = statuses
        .iter()
        .filter(|(_, st)| !(libc::WIFEXITED(*st) && libc::WEXITSTATUS(*st) == 0))
        .map(|(pid, st)| {
            if libc::WIFEXITED(*st) {
                format!("{pid}: exit {}", libc::WEXITSTATUS(*st))
            } else if libc::WIFSIGNALED(*st) {
                format!("{pid}: signal {}", libc::WTERMSIG(*st))
            } else {
                format!("{pid}: status {st:#x}")
            }
        })
        .collect();
    assert!(bad.is_empty(), "children failed: {bad:?}");
}

/// No proc among the first `n` is left waiting or with a post to consume.
fn assert_procs_quiet(shmem: &Shmem, n: usize) {
    for p in &shmem.procs()[..n] {
        assert_eq!(
            p.lw_waiting.load(Ordering::Relaxed),
            LW_WS_NOT_WAITING,
            "proc {} still waiting",
            p.procno()
        );
        assert_eq!(
            p.sem.count(),
            0,
            "proc {} has an unconsumed post",
            p.procno()
        );
    }
}

/// xorshift64*: a per-child deterministic stream.
struct Rng(u64);

impl Rng {
    fn new(i: usize) -> Rng {
        Rng((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) % n
    }
}

// --- one contended lock ----------------------------------------------------

/// Percent of iterations that take the lock exclusively (`acquire`), and
/// that use `acquire_or_wait` (exclusive if got); the rest are shared.
const EXCLUSIVE_PCT: u64 = 20;
const OR_WAIT_PCT: u64 = 5;

fn lock_stress(queue: WaitQueue, children: usize, iters: u64) {
    let _serial = serial();
    let t0 = Instant::now();
    let (mut guard, shmem) = create_segment(queue, VarAccess::Atomic);
    let start = SharedPage::new();
    fork_children(&mut guard, &shmem, &start, children, |i, env| {
        let lock = shmem.named_lock(NamedLock::Test);
        let area = shmem.lock_test_area();
        let me = &shmem.procs()[i];
        let mut rng = Rng::new(i);
        let mut ok = true;
        for _ in 0..iters {
            let r = rng.below(100);
            let exclusive = if r < OR_WAIT_PCT {
                lock.acquire_or_wait(env, LWLockMode::Exclusive)
            } else if r < OR_WAIT_PCT + EXCLUSIVE_PCT {
                lock.acquire(env, LWLockMode::Exclusive);
                true
            } else {
                lock.acquire(env, LWLockMode::Shared);
                // SAFETY: we hold the Test lock in shared mode.
                ok &= unsafe { area.check_shared() };
                lock.release(env);
                false
            };
            if exclusive {
                // SAFETY: we hold the Test lock exclusively.
                unsafe { area.bump_exclusive() };
                lock.release(env);
                ProcCounters::bump(&me.counters.lock_acquires, 1);
            }
        }
        ok && env.held_count() == 0
    });
    let forked = t0.elapsed();
    start.go().store(1, Ordering::Release);
    let statuses = wait_children(&mut guard, DEADLINE);
    assert_eq!(statuses.len(), children);
    assert_all_exited_zero(&statuses);

    let procs = &shmem.procs()[..children];
    let exclusive = counter_sum(procs, |c| &c.lock_acquires);
    let sleeps = counter_sum(procs, |c| &c.lock_sleeps);
    let area = shmem.lock_test_area();
    let lock = shmem.named_lock(NamedLock::Test);
    eprintln!(
        "lock_stress {} x{children}: {} ops, {exclusive} exclusive, {sleeps} sleeps, forked in {forked:.2?}, total {:.2?}",
        queue.name(),
        children as u64 * iters,
        t0.elapsed()
    );
    assert_eq!(
        area.counter_value(),
        exclusive,
        "lost or extra exclusive updates"
    );
    // SAFETY: every child has exited; nobody writes the mirror any more.
    let mirror = unsafe { std::ptr::read_volatile(area.mirror.get()) };
    assert_eq!(mirror, exclusive);
    assert_eq!(
        area.torn_reads.load(Ordering::Relaxed),
        0,
        "a shared holder saw a torn pair"
    );
    assert!(exclusive > 0 && exclusive < children as u64 * iters);
    assert!(
        sleeps > 0,
        "no process ever slept: the wait path was not exercised"
    );
    assert_eq!(
        lock.state_bits(),
        LW_FLAG_RELEASE_OK,
        "lock must end free, without waiters, with RELEASE_OK (state {:#x})",
        lock.state_bits()
    );
    assert_procs_quiet(&shmem, children);
}

crate::test_cases! { lock_stress:
    lock_modern_64 => (WaitQueue::Modern, 64, 600_000),
    lock_legacy_64 => (WaitQueue::Legacy, 64, 600_000),
    lock_modern_256 => (WaitQueue::Modern, 256, 150_000),
    lock_legacy_256 => (WaitQueue::Legacy, 256, 150_000),
}

// --- variable waits on WAL insertion locks --------------------------------

/// Values an inserter publishes per holding (positions base+1..=base+STEPS).
const STEPS: u64 = 3;

/// How hard one `var_wait_stress` run pushes: processes of each kind, holdings
/// per inserter and `wait_for_var` rounds per flusher.
#[derive(Clone, Copy)]
struct VarWaitLoad {
    inserters: usize,
    flushers: usize,
    iters: u64,
    rounds: u64,
}

/// 64 processes.
const LOAD_64: VarWaitLoad = VarWaitLoad {
    inserters: 48,
    flushers: 16,
    iters: 3_000,
    rounds: 1_000,
};

/// 256 processes, fewer iterations each.
const LOAD_256: VarWaitLoad = VarWaitLoad {
    inserters: 192,
    flushers: 64,
    iters: 1_000,
    rounds: 300,
};

fn var_wait_stress(queue: WaitQueue, var_access: VarAccess, load: VarWaitLoad) {
    let VarWaitLoad {
        inserters,
        flushers,
        iters,
        rounds,
    } = load;
    let _serial = serial();
    let t0 = Instant::now();
    let (mut guard, shmem) = create_segment(queue, var_access);
    let nlocks = shmem.n_insert_locks();
    let start = SharedPage::new();
    fork_children(
        &mut guard,
        &shmem,
        &start,
        inserters + flushers,
        |i, env| {
            let me = &shmem.procs()[i];
            if i < inserters {
                // Inserter: hold lock j, advance its position STEPS times (the
                // recorded position first, then the advertised one), clear.
                for k in 0..iters {
                    let il = shmem.insert_lock((i + k as usize) % nlocks);
                    il.lock.acquire(env, LWLockMode::Exclusive);
                    if il.inserting_at.load(Ordering::Relaxed) != 0 {
                        return false; // the previous holder did not clear it
                    }
                    let base = il.last_important_at.load(Ordering::Relaxed);
                    for s in 1..=STEPS {
                        il.last_important_at.store(base + s, Ordering::Relaxed);
                        il.lock.update_var(env, &il.inserting_at, base + s);
                        if s == 1 {
                            // Let flushers queue behind us now and then.
                            std::thread::yield_now();
                        }
                    }
                    il.lock.release_clear_var(env, &il.inserting_at, 0);
                    ProcCounters::bump(&me.counters.lock_acquires, 1);
                }
            } else {
                // Flusher: wait for every insertion lock until it is free.
                let mut highest = vec![0u64; nlocks];
                for _ in 0..rounds {
                    for (j, high) in highest.iter_mut().enumerate() {
                        let il = shmem.insert_lock(j);
                        let mut oldval = 0;
                        loop {
                            match il.lock.wait_for_var(env, &il.inserting_at, oldval) {
                                VarWait::Free => break,
                                VarWait::Changed(v) => {
                                    assert_ne!(v, oldval, "Changed must report a new value");
                                    if v != 0 {
                                        assert!(
                                            v >= *high,
                                            "lock {j}: value went backwards: {high} then {v}"
                                        );
                                        let recorded = il.last_important_at.load(Ordering::Relaxed);
                                        assert!(v <= recorded, "lock {j}: saw {v} before the holder recorded it ({recorded})");
                                        *high = v;
                                    }
                                    // A flusher counts its Changed results here.
                                    ProcCounters::bump(&me.counters.lock_acquires, 1);
                                    oldval = v;
                                }
                            }
                        }
                        ProcCounters::bump(&me.counters.transactions, 1);
                    }
                }
            }
            env.held_count() == 0
        },
    );
    start.go().store(1, Ordering::Release);
    let statuses = wait_children(&mut guard, DEADLINE);
    assert_eq!(statuses.len(), inserters + flushers);
    assert_all_exited_zero(&statuses);

    let procs = shmem.procs();
    let holds = counter_sum(&procs[..inserters], |c| &c.lock_acquires);
    let changed = counter_sum(&procs[inserters..inserters + flushers], |c| {
        &c.lock_acquires
    });
    let frees = counter_sum(&procs[inserters..inserters + flushers], |c| &c.transactions);
    let sleeps = counter_sum(&procs[..inserters + flushers], |c| &c.lock_sleeps);
    eprintln!(
        "var_wait {}/{} {inserters}+{flushers}: {holds} holds, {changed} Changed, {frees} Free, {sleeps} sleeps, {:.2?}",
        queue.name(),
        var_access.name(),
        t0.elapsed()
    );
    assert_eq!(holds, inserters as u64 * iters);
    assert_eq!(frees, flushers as u64 * rounds * nlocks as u64);
    let mut positions = 0;
    for j in 0..nlocks {
        let il = shmem.insert_lock(j);
        assert!(il.lock.is_free(), "insert lock {j} still held");
        let state = il.lock.state_bits();
        assert_eq!(
            state & LW_FLAG_LOCKED,
            0,
            "insert lock {j}: wait list left locked"
        );
        assert_eq!(
            il.inserting_at.load(Ordering::Relaxed),
            0,
            "insert lock {j} not cleared"
        );
        positions += il.last_important_at.load(Ordering::Relaxed);
    }
    // Each holding advanced its lock's position by exactly STEPS: a lost
    // update would mean two inserters held a lock at once.
    assert_eq!(
        positions,
        holds * STEPS,
        "inserters' positions disagree with their holds"
    );
    assert!(
        sleeps > 0,
        "no process ever slept: the wait path was not exercised"
    );
    assert_procs_quiet(&shmem, inserters + flushers);
}

crate::test_cases! { var_wait_stress:
    var_wait_modern_atomic => (WaitQueue::Modern, VarAccess::Atomic, LOAD_64),
    var_wait_modern_waitlistlock => (WaitQueue::Modern, VarAccess::WaitListLock, LOAD_64),
    var_wait_legacy_atomic => (WaitQueue::Legacy, VarAccess::Atomic, LOAD_64),
    var_wait_legacy_waitlistlock => (WaitQueue::Legacy, VarAccess::WaitListLock, LOAD_64),
    var_wait_modern_atomic_256 => (WaitQueue::Modern, VarAccess::Atomic, LOAD_256),
    var_wait_legacy_waitlistlock_256 => (WaitQueue::Legacy, VarAccess::WaitListLock, LOAD_256),
}
