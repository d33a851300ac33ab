//! LWLocks: PostgreSQL's lightweight reader/writer locks, across processes.
//!
//! A lock is one atomic state word plus a wait list of proc numbers. The
//! state word packs (truth table below) the holders and three flags:
//!
//! | bits      | name                | meaning                                    |
//! |-----------|---------------------|--------------------------------------------|
//! | 0..=23    | shared count        | number of shared holders                   |
//! | 24        | LW_VAL_EXCLUSIVE    | held exclusively (then shared count is 0)  |
//! | 28        | LW_FLAG_LOCKED      | the wait list is locked (a tiny spinlock)  |
//! | 29        | LW_FLAG_RELEASE_OK  | a releaser may wake waiters                |
//! | 30        | LW_FLAG_HAS_WAITERS | the wait list may be non-empty             |
//!
//! Acquisition protocol (the race a naive lock has is "I saw it busy, queued
//! myself, and meanwhile the holder released without seeing me"):
//! 1. try to take the lock with a compare-exchange on the state word;
//! 2. if busy, queue self on the wait list (under LW_FLAG_LOCKED) and set
//!    HAS_WAITERS (a read-modify-write on the same word);
//! 3. try once more: a release that happened before step 2 is now visible;
//!    if the lock was got, dequeue self again;
//! 4. otherwise sleep on the proc's semaphore until a releaser marks us
//!    NOT_WAITING; set RELEASE_OK again and go to 1.
//!
//! A release that sees HAS_WAITERS|RELEASE_OK and leaves the lock free walks
//! the list: it takes every WAIT_UNTIL_FREE waiter, and either the first
//! exclusive waiter or all shared waiters up to the next exclusive one, moves
//! them to a private list, clears RELEASE_OK (so that until one of them runs
//! nobody wakes more), drops the wait-list lock, then marks each NOT_WAITING
//! and posts its semaphore. Wake-ups that arrive while a proc is not in the
//! matching wait are absorbed and re-posted (see `sema`).
//!
//! Two wait-queue variants (seed 002):
//! - `Modern`: a waker sets the waiter's state to PENDING_WAKEUP while it
//!   holds the wait-list lock, so a proc that must dequeue itself (step 3)
//!   knows in O(1) whether it is still on the list.
//! - `Legacy` (PostgreSQL <= 15): the state is a boolean; the proc scans the
//!   whole list to find itself. With long queues this costs O(n) under the
//!   wait-list lock per dequeue, which is what collapses at thousands of
//!   clients.
//!
//! Variable waits (WAL insertion locks): an exclusive holder publishes a
//! 64-bit progress value (`insertingAt`); `wait_for_var` waits until the lock
//! is free or the value differs from what the caller saw; `update_var`
//! publishes and wakes WAIT_UNTIL_FREE waiters without releasing;
//! `release_clear_var` resets the value and releases. Two variants (seed 000):
//! `Atomic` (the value is a 64-bit atomic read and swapped without the
//! wait-list lock) and `WaitListLock` (read and written only under the
//! wait-list lock, as before PostgreSQL 16).
//!
//! Every operation is counted in the caller's proc slot (`crit`) from
//! before its first access to the lock to after its last, and a hold until
//! its release: a process that dies inside one is known to leave the lock
//! or its wait list half changed (a crash restart), one that dies outside
//! every one left no lock behind.
//!
//! Invariants: the wait list's head/tail and every queued proc's links are
//! touched only with LW_FLAG_LOCKED held; a proc is on at most one wait list;
//! a proc never sleeps holding the wait-list lock; a holder of LW_FLAG_LOCKED
//! never takes another lock.
//!
//! Ended generations (library processes only). A process forked by the
//! postmaster dies with its generation, so its waits end with it. A library
//! process (`ProcContext::without_io`) outlives it: at a crash restart it
//! may be asleep on a lock whose holder was killed, and nobody would ever
//! release it. Its `LockEnv` therefore carries the segment header's `ended`
//! flag ([`LockEnv::set_generation_flag`]; `None` for forked processes,
//! whose behaviour is unchanged). Protocol:
//! 1. the postmaster (`abandon_generation`) stores `ended` (Release, in
//!    `Shmem::mark_ended`), then posts every proc's semaphore (atomic adds
//!    and futex wakes only: it never takes a lock in shared memory);
//! 2. a sleeper re-checks the flag after every wake-up (Acquire load; the
//!    semaphore's Release post / Acquire consume orders it after the mark),
//!    so the post of step 1 cannot be missed: a sleeper that went to sleep
//!    before the mark is woken by the post, one that sleeps after it
//!    consumes the post at once;
//! 3. a waiter that sees the flag stops waiting: the lock counts as got (a
//!    "phantom" hold, recorded so that its release leaves the state word
//!    alone), a variable wait counts as `Free`, a wait-list lock spin gives
//!    up, and the LockEnv remembers that a wait was cut short
//!    ([`LockEnv::take_cut_short`]) so the library call returns
//!    `ServerRestarted`;
//! 4. once a process has seen the flag it never queues itself again (the
//!    check comes before `queue_self` touches anything): it may still be
//!    linked on the list it abandoned, so re-linking its proc elsewhere
//!    could corrupt a list that others still walk.
//!
//! Invariant that makes step 3 sound: in an ended generation mutual
//! exclusion protects nothing that reaches disk. Library processes never
//! write WAL files (the walwriter flushes for them, and the old
//! generation's walwriter is dead), the postmaster never reads the old
//! segment again, and every later call of the library fails before it
//! touches the segment. The check costs nothing on the uncontended path:
//! it sits in the sleep and spin-delay paths only.

mod var;

use crate::crit::{CritSlot, LWLOCK};
use crate::proc::{Proc, INVALID_PROCNO, LW_WS_NOT_WAITING, LW_WS_PENDING_WAKEUP, LW_WS_WAITING};
use crate::spin::SpinDelay;
use crate::stats::{bump, MechanismCounters, TrancheCounters};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::variants::{VarAccess, WaitQueue};
use crate::waitevent::{self, WaitEvent};
use std::cell::{Cell, RefCell};

pub const LW_SHARED_MASK: u32 = (1 << 24) - 1;
pub const LW_VAL_SHARED: u32 = 1;
pub const LW_VAL_EXCLUSIVE: u32 = 1 << 24;
pub const LW_LOCK_MASK: u32 = LW_VAL_EXCLUSIVE | LW_SHARED_MASK;
pub const LW_FLAG_LOCKED: u32 = 1 << 28;
pub const LW_FLAG_RELEASE_OK: u32 = 1 << 29;
pub const LW_FLAG_HAS_WAITERS: u32 = 1 << 30;

const _: () =
    assert!(LW_LOCK_MASK & (LW_FLAG_LOCKED | LW_FLAG_RELEASE_OK | LW_FLAG_HAS_WAITERS) == 0);
const _: () = assert!(
    LW_FLAG_LOCKED & LW_FLAG_RELEASE_OK == 0 && LW_FLAG_RELEASE_OK & LW_FLAG_HAS_WAITERS == 0
);

/// How a lock is wanted.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LWLockMode {
    Exclusive = 0,
    Shared = 1,
    /// Not a holder: wait until the lock is free (or a variable changes).
    WaitUntilFree = 2,
}

impl LWLockMode {
    fn from_u32(v: u32) -> LWLockMode {
        match v {
            0 => LWLockMode::Exclusive,
            1 => LWLockMode::Shared,
            _ => LWLockMode::WaitUntilFree,
        }
    }
}

/// Decoded view of a state word.
#[derive(Clone, Copy)]
struct State(u32);

impl State {
    fn is_exclusive(self) -> bool {
        self.0 & LW_VAL_EXCLUSIVE != 0
    }
    fn is_free(self) -> bool {
        self.0 & LW_LOCK_MASK == 0
    }
    fn is_list_locked(self) -> bool {
        self.0 & LW_FLAG_LOCKED != 0
    }
    fn wants_wakeup(self) -> bool {
        self.0 & (LW_FLAG_HAS_WAITERS | LW_FLAG_RELEASE_OK)
            == (LW_FLAG_HAS_WAITERS | LW_FLAG_RELEASE_OK)
    }
}

/// An LWLock in shared memory.
#[repr(C)]
pub struct LWLock {
    state: AtomicU32,
    /// Wait list head and tail (proc numbers), under LW_FLAG_LOCKED.
    head: AtomicU32,
    tail: AtomicU32,
    /// Tranche id (diagnostics).
    tranche: AtomicU32,
}

impl Default for LWLock {
    fn default() -> Self {
        Self::new(0)
    }
}

/// What `wait_for_var` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarWait {
    /// The lock is free: the holder finished.
    Free,
    /// The holder is still at work; the variable now holds this value.
    Changed(u64),
}

/// The per-process context LWLock calls need: the proc table, which proc we
/// are, the variants in force, and the locks we hold (for `release_all`).
pub struct LockEnv<'a> {
    pub procs: &'a [Proc],
    pub me: u32,
    pub queue: WaitQueue,
    pub var_access: VarAccess,
    /// `procs[me].crit`, looked up once: every LWLock call counts itself
    /// there, so the insert path would otherwise index the proc table
    /// (with its bounds check) at each one.
    crit: &'a CritSlot,
    held: RefCell<Vec<Held>>,
    /// Where this process counts its lock work (`stats`), if anywhere.
    counters: Option<&'a MechanismCounters>,
    /// The segment header's `ended` flag, for a process that outlives its
    /// generation (see "Ended generations" in the module header).
    ended: Option<&'a AtomicU32>,
    /// A wait was cut short because the generation ended.
    cut_short: Cell<bool>,
}

/// One entry of the locks a process holds.
#[derive(Clone, Copy)]
struct Held {
    addr: usize,
    mode: LWLockMode,
    /// Not really held: the wait for it ended with the generation (its
    /// release must not touch the state word).
    phantom: bool,
}

/// How a sleep on the proc semaphore ended.
enum Woken {
    /// A waker marked us NOT_WAITING; `n` unrelated posts were absorbed.
    ByWaker(u32),
    /// The generation ended (we may still be on the wait list).
    Ended(u32),
}

impl<'a> LockEnv<'a> {
    pub fn new(procs: &'a [Proc], me: u32, queue: WaitQueue, var_access: VarAccess) -> Self {
        LockEnv {
            procs,
            me,
            queue,
            var_access,
            crit: &procs[me as usize].crit,
            held: RefCell::new(Vec::with_capacity(16)),
            counters: None,
            ended: None,
            cut_short: Cell::new(false),
        }
    }

    /// Makes every wait of this context end when `ended` (the segment
    /// header's flag) becomes nonzero: for a library process only (see
    /// "Ended generations" in the module header).
    pub fn set_generation_flag(&mut self, ended: &'a AtomicU32) {
        self.ended = Some(ended);
    }

    /// The flag given to `set_generation_flag`, if any.
    pub fn generation_flag(&self) -> Option<&'a AtomicU32> {
        self.ended
    }

    /// Whether the generation ended (always false without a flag). Only
    /// called on the sleep, spin-delay and queueing paths.
    #[inline]
    fn generation_ended(&self) -> bool {
        // Acquire pairs with the Release store in `Shmem::mark_ended`.
        self.ended.is_some_and(|f| f.load(Ordering::Acquire) != 0)
    }

    /// For waits outside this module (the group XID clear): true when the
    /// generation ended, and the wait is then recorded as cut short.
    pub fn generation_ended_wait_over(&self) -> bool {
        let ended = self.generation_ended();
        if ended {
            self.cut_short();
        }
        ended
    }

    /// Records that a wait was cut short by the end of the generation.
    #[cold]
    fn cut_short(&self) {
        self.cut_short.set(true);
    }

    /// Whether a wait was cut short by the end of the generation since the
    /// last call (a spinlock wait of this thread included, see
    /// `spin::take_cut_short`): the caller's operation did not really
    /// happen and must fail.
    pub fn take_cut_short(&self) -> bool {
        self.cut_short.replace(false) | crate::spin::take_cut_short()
    }

    /// Counts this context's lock work in `counters` (the owner's own).
    pub fn with_counters(mut self, counters: &'a MechanismCounters) -> Self {
        self.counters = Some(counters);
        self
    }

    /// The counters of `lock`'s tranche, if counting.
    #[inline]
    fn tranche_counters(&self, lock: &LWLock) -> Option<&TrancheCounters> {
        let c = self.counters?;
        Some(c.tranche(lock.tranche.load(Ordering::Relaxed)))
    }

    /// Bumps one counter of `lock`'s tranche.
    #[inline]
    fn count(&self, lock: &LWLock, which: impl FnOnce(&TrancheCounters) -> &AtomicU64, n: u64) {
        if let Some(t) = self.tranche_counters(lock) {
            bump(which(t), n);
        }
    }

    /// Bumps one of this process's flat counters.
    #[inline]
    fn count_flat(&self, which: impl FnOnce(&crate::stats::FlatCounters) -> &AtomicU64, n: u64) {
        if let Some(c) = self.counters {
            bump(which(&c.flat), n);
        }
    }

    fn my_proc(&self) -> &Proc {
        &self.procs[self.me as usize]
    }

    /// Our critical-section record (`crit`): every LWLock operation is
    /// counted there from its first shared access to its last, a hold
    /// until its release.
    #[inline]
    pub fn crit(&self) -> &CritSlot {
        self.crit
    }

    /// Takes over `lock`, held in `mode` by a process that died (its
    /// release is then ours): only for finishing a dead process's WAL
    /// insertion (`crit`), whose lock no one else may touch meanwhile.
    pub fn adopt(&self, lock: &LWLock, mode: LWLockMode) {
        self.crit().enter(LWLOCK);
        self.remember(lock, mode);
    }

    fn proc(&self, n: u32) -> &Proc {
        &self.procs[n as usize]
    }

    fn remember(&self, lock: &LWLock, mode: LWLockMode) {
        self.count(lock, |t| &t.acquisitions, 1);
        self.held.borrow_mut().push(Held {
            addr: lock as *const LWLock as usize,
            mode,
            phantom: false,
        });
    }

    /// Records a hold whose wait the end of the generation cut short.
    #[cold]
    fn remember_phantom(&self, lock: &LWLock, mode: LWLockMode) {
        self.cut_short();
        self.held.borrow_mut().push(Held {
            addr: lock as *const LWLock as usize,
            mode,
            phantom: true,
        });
    }

    fn forget(&self, lock: &LWLock) -> Held {
        let mut held = self.held.borrow_mut();
        let addr = lock as *const LWLock as usize;
        // Locks are usually released in reverse order: search from the end.
        let pos = held
            .iter()
            .rposition(|h| h.addr == addr)
            .unwrap_or_else(|| {
                panic!(
                    "lock is not held (tranche {})",
                    lock.tranche.load(Ordering::Relaxed)
                )
            });
        held.remove(pos)
    }

    /// Number of locks this process holds.
    pub fn held_count(&self) -> usize {
        self.held.borrow().len()
    }

    /// Is `lock` held by this process?
    pub fn holds(&self, lock: &LWLock) -> bool {
        let addr = lock as *const LWLock as usize;
        self.held.borrow().iter().any(|h| h.addr == addr)
    }

    /// Releases every lock this process holds (error and exit paths).
    pub fn release_all(&self) {
        loop {
            let last = self.held.borrow().last().copied();
            let Some(Held { addr, .. }) = last else {
                break;
            };
            // SAFETY: `addr` was recorded from a `&LWLock` in shared memory
            // that stays mapped for the life of this process (the segment is
            // never unmapped while a child runs).
            let lock = unsafe { &*(addr as *const LWLock) };
            lock.release(self);
        }
    }

    /// Waits on our semaphore until a waker marks us NOT_WAITING, or the
    /// generation ends (a context with a generation flag); counts the
    /// unrelated posts absorbed (to re-post later). Publishes the wait as
    /// `LWLock:<tranche of lock>` for its duration.
    fn sleep_until_woken(&self, lock: &LWLock) -> Woken {
        let me = self.my_proc();
        let mut extra = 0;
        crate::proc::ProcCounters::bump(&me.counters.lock_sleeps, 1);
        self.count(lock, |t| &t.sleeps, 1);
        let tranche = lock.tranche.load(Ordering::Relaxed);
        let prev = waitevent::swap_on(&me.wait_event_info, WaitEvent::lwlock(tranche));
        let woken = loop {
            me.sem.wait();
            // Acquire pairs with the Release store of NOT_WAITING in
            // `wake_list`: the waker's changes to our links are visible.
            if me.lw_waiting.load(Ordering::Acquire) == LW_WS_NOT_WAITING {
                break Woken::ByWaker(extra);
            }
            // After every wake-up: the postmaster posts every proc after
            // marking the generation ended (step 2 of "Ended generations";
            // the Acquire in `generation_ended` pairs with `mark_ended`,
            // and the post we consumed was made after it). This post is
            // the postmaster's (or an unrelated one): not counted.
            if self.generation_ended() {
                break Woken::Ended(extra);
            }
            extra += 1;
        };
        waitevent::swap_on(&me.wait_event_info, prev);
        woken
    }

    fn repost(&self, extra: u32) {
        for _ in 0..extra {
            self.my_proc().sem.post();
        }
    }
}

/// Exit path: a process context going away releases whatever it still
/// holds, so an error that unwinds past a critical section (or a forgotten
/// release) cannot leave a lock held by a process that no longer uses it.
impl Drop for LockEnv<'_> {
    fn drop(&mut self) {
        if self.held_count() > 0 {
            self.release_all();
        }
    }
}

impl LWLock {
    pub fn new(tranche: u32) -> Self {
        LWLock {
            state: AtomicU32::new(LW_FLAG_RELEASE_OK),
            head: AtomicU32::new(INVALID_PROCNO),
            tail: AtomicU32::new(INVALID_PROCNO),
            tranche: AtomicU32::new(tranche),
        }
    }

    /// Raw state word (diagnostics and tests).
    pub fn state_bits(&self) -> u32 {
        self.state.load(Ordering::Relaxed)
    }

    pub fn is_free(&self) -> bool {
        State(self.state.load(Ordering::Relaxed)).is_free()
    }

    /// Takes the lock, sleeping if needed. Returns true if it was got
    /// without sleeping.
    pub fn acquire(&self, env: &LockEnv, mode: LWLockMode) -> bool {
        debug_assert!(mode != LWLockMode::WaitUntilFree);
        env.crit().enter(LWLOCK);
        let mut result = true;
        let mut extra = 0;
        let mut phantom = false;
        loop {
            if !self.attempt_lock(mode) {
                break;
            }
            if !self.queue_self(env, mode) {
                // The generation ended: stop before waiting.
                phantom = true;
                break;
            }
            if !self.attempt_lock(mode) {
                extra += self.dequeue_self(env);
                break;
            }
            if !result {
                // Woken before, and the lock was busy again (a futile wake-up).
                env.count_flat(|c| &c.lwlock_futile_wakeups, 1);
            }
            match env.sleep_until_woken(self) {
                Woken::ByWaker(n) => extra += n,
                Woken::Ended(n) => {
                    extra += n;
                    phantom = true;
                    break;
                }
            }
            self.state.fetch_or(LW_FLAG_RELEASE_OK, Ordering::Relaxed);
            result = false;
        }
        if phantom {
            env.remember_phantom(self, mode);
            result = false;
        } else {
            env.remember(self, mode);
        }
        env.repost(extra);
        result
    }

    /// Takes the lock only if that needs no waiting.
    pub fn conditional_acquire(&self, env: &LockEnv, mode: LWLockMode) -> bool {
        env.crit().enter(LWLOCK);
        if self.attempt_lock(mode) {
            env.crit().exit(LWLOCK);
            return false;
        }
        env.remember(self, mode);
        true
    }

    /// Takes the lock if free; otherwise waits until it is free and returns
    /// false *without* taking it (WALWriteLock in XLogFlush: whoever held it
    /// probably did our work).
    pub fn acquire_or_wait(&self, env: &LockEnv, mode: LWLockMode) -> bool {
        env.crit().enter(LWLOCK);
        let mut extra = 0;
        let mut must_wait = self.attempt_lock(mode);
        if must_wait {
            if !self.queue_self(env, LWLockMode::WaitUntilFree) {
                // The generation ended: "waited, not taken".
                env.cut_short();
                env.crit().exit(LWLOCK);
                return false;
            }
            must_wait = self.attempt_lock(mode);
            if must_wait {
                match env.sleep_until_woken(self) {
                    Woken::ByWaker(n) => extra += n,
                    Woken::Ended(n) => {
                        extra += n;
                        env.cut_short();
                    }
                }
            } else {
                extra += self.dequeue_self(env);
            }
        }
        env.repost(extra);
        if must_wait {
            env.crit().exit(LWLOCK);
            false
        } else {
            env.remember(self, mode);
            true
        }
    }

    /// Releases a lock taken in `mode`.
    pub fn release(&self, env: &LockEnv) {
        let held = env.forget(self);
        if held.phantom {
            // Never really held (the generation ended): the state word
            // belongs to whoever held it then.
            env.crit().exit(LWLOCK);
            return;
        }
        let val = match held.mode {
            LWLockMode::Exclusive => LW_VAL_EXCLUSIVE,
            _ => LW_VAL_SHARED,
        };
        // Release pairs with the Acquire compare-exchange in `attempt_lock`
        // of the next holder. Being an RMW on the state word, it also orders
        // against a waiter's HAS_WAITERS fetch_or: either we see the flag or
        // the waiter's re-check sees the lock free. SeqCst rather than
        // Release (the same locked instruction on x86): a WAL insertion
        // lock's release is also the store side of the inserted-mode
        // readers' Dekker pairing (`readwake`, `wake_after_release`).
        let old = self.state.fetch_sub(val, Ordering::SeqCst);
        let new = State(old - val);
        if new.wants_wakeup() && new.is_free() {
            self.wakeup(env);
        }
        env.crit().exit(LWLOCK);
    }

    /// One attempt to take the lock; true when the caller must wait.
    #[inline]
    fn attempt_lock(&self, mode: LWLockMode) -> bool {
        let mut old = self.state.load(Ordering::Relaxed);
        loop {
            let s = State(old);
            let (free, add) = match mode {
                LWLockMode::Exclusive => (s.is_free(), LW_VAL_EXCLUSIVE),
                _ => (!s.is_exclusive(), LW_VAL_SHARED),
            };
            if !free {
                return true;
            }
            // Acquire pairs with the Release fetch_sub in `release`.
            match self.state.compare_exchange_weak(
                old,
                old + add,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return false,
                Err(v) => old = v,
            }
        }
    }

    /// Takes the wait-list lock; false (not taken) only in a context with
    /// a generation flag, when the generation ended while we spun (its
    /// holder may have been killed). The caller then touches no list.
    #[must_use]
    fn wait_list_lock(&self, env: &LockEnv) -> bool {
        env.count(self, |t| &t.waitlist_lock_acquisitions, 1);
        loop {
            // Acquire pairs with the Release in `wait_list_unlock` (and the
            // Release compare-exchange in `wakeup` that also clears the bit).
            let old = self.state.fetch_or(LW_FLAG_LOCKED, Ordering::Acquire);
            if !State(old).is_list_locked() {
                return true;
            }
            let mut delay = SpinDelay::new(self as *const _ as usize).ending_with(env.ended);
            while State(self.state.load(Ordering::Relaxed)).is_list_locked() {
                if !delay.spin_once("LWLock wait-list lock") {
                    env.cut_short();
                    return false;
                }
            }
            env.count(self, |t| &t.waitlist_spin_delays, delay.delays() as u64);
        }
    }

    fn wait_list_unlock(&self) {
        // Release pairs with the Acquire fetch_or in `wait_list_lock`.
        let old = self.state.fetch_and(!LW_FLAG_LOCKED, Ordering::Release);
        debug_assert!(State(old).is_list_locked());
    }

    // --- wait list (caller holds the wait-list lock) -------------------

    fn list_is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) == INVALID_PROCNO
    }

    fn list_push_tail(&self, env: &LockEnv, n: u32) {
        let p = env.proc(n);
        let tail = self.tail.load(Ordering::Relaxed);
        p.lw_prev.store(tail, Ordering::Relaxed);
        p.lw_next.store(INVALID_PROCNO, Ordering::Relaxed);
        if tail == INVALID_PROCNO {
            self.head.store(n, Ordering::Relaxed);
        } else {
            env.proc(tail).lw_next.store(n, Ordering::Relaxed);
        }
        self.tail.store(n, Ordering::Relaxed);
    }

    fn list_push_head(&self, env: &LockEnv, n: u32) {
        let p = env.proc(n);
        let head = self.head.load(Ordering::Relaxed);
        p.lw_next.store(head, Ordering::Relaxed);
        p.lw_prev.store(INVALID_PROCNO, Ordering::Relaxed);
        if head == INVALID_PROCNO {
            self.tail.store(n, Ordering::Relaxed);
        } else {
            env.proc(head).lw_prev.store(n, Ordering::Relaxed);
        }
        self.head.store(n, Ordering::Relaxed);
    }

    fn list_delete(&self, env: &LockEnv, n: u32) {
        let p = env.proc(n);
        let next = p.lw_next.load(Ordering::Relaxed);
        let prev = p.lw_prev.load(Ordering::Relaxed);
        if prev == INVALID_PROCNO {
            self.head.store(next, Ordering::Relaxed);
        } else {
            env.proc(prev).lw_next.store(next, Ordering::Relaxed);
        }
        if next == INVALID_PROCNO {
            self.tail.store(prev, Ordering::Relaxed);
        } else {
            env.proc(next).lw_prev.store(prev, Ordering::Relaxed);
        }
        p.lw_next.store(INVALID_PROCNO, Ordering::Relaxed);
        p.lw_prev.store(INVALID_PROCNO, Ordering::Relaxed);
    }

    /// Legacy dequeue: walk the list from the head looking for `n`
    /// (counting the entries walked: seed 002's cost).
    fn list_scan_and_delete(&self, env: &LockEnv, n: u32) -> bool {
        let mut cur = self.head.load(Ordering::Relaxed);
        let mut scanned = 0;
        let mut found = false;
        while cur != INVALID_PROCNO {
            scanned += 1;
            if cur == n {
                self.list_delete(env, n);
                found = true;
                break;
            }
            cur = env.proc(cur).lw_next.load(Ordering::Relaxed);
        }
        env.count_flat(|f| &f.waitlist_entries_scanned, scanned);
        found
    }

    // --- queueing -------------------------------------------------------

    /// Queues us on the wait list; false (not queued) when the generation
    /// ended (step 4 of "Ended generations": checked first, since a proc
    /// that abandoned a wait may still be linked on another list).
    #[must_use]
    fn queue_self(&self, env: &LockEnv, mode: LWLockMode) -> bool {
        if env.generation_ended() {
            return false;
        }
        let me = env.my_proc();
        if me.lw_waiting.load(Ordering::Relaxed) != LW_WS_NOT_WAITING {
            panic!("queueing for lock while waiting on another one");
        }
        if !self.wait_list_lock(env) {
            return false;
        }
        self.state.fetch_or(LW_FLAG_HAS_WAITERS, Ordering::Relaxed);
        me.lw_waiting.store(LW_WS_WAITING, Ordering::Relaxed);
        me.lw_wait_mode.store(mode as u32, Ordering::Relaxed);
        // WAIT_UNTIL_FREE waiters go first: they never take the lock, so
        // waking them early does not starve anybody.
        if mode == LWLockMode::WaitUntilFree {
            self.list_push_head(env, env.me);
        } else {
            self.list_push_tail(env, env.me);
        }
        self.wait_list_unlock();
        true
    }

    /// Removes ourselves from the wait list after getting the lock on the
    /// re-check. If a waker already took us off, absorbs its wake-up.
    /// Returns the number of posts to re-post.
    fn dequeue_self(&self, env: &LockEnv) -> u32 {
        let me = env.my_proc();
        if !self.wait_list_lock(env) {
            // The generation ended: we hold the lock (the re-check got
            // it) and stay linked where we are (step 4).
            return 0;
        }
        env.count_flat(|f| &f.waitlist_dequeues, 1);
        let on_list = match env.queue {
            WaitQueue::Modern => {
                let waiting = me.lw_waiting.load(Ordering::Relaxed) == LW_WS_WAITING;
                if waiting {
                    self.list_delete(env, env.me);
                }
                waiting
            }
            WaitQueue::Legacy => self.list_scan_and_delete(env, env.me),
        };
        if self.list_is_empty() && self.state.load(Ordering::Relaxed) & LW_FLAG_HAS_WAITERS != 0 {
            self.state
                .fetch_and(!LW_FLAG_HAS_WAITERS, Ordering::Relaxed);
        }
        self.wait_list_unlock();

        if on_list {
            me.lw_waiting.store(LW_WS_NOT_WAITING, Ordering::Relaxed);
            return 0;
        }
        // Somebody is about to wake us (or did). Absorb that wake-up so it
        // does not confuse a later wait, and let later releasers wake others:
        // the waker cleared RELEASE_OK expecting us to run.
        match env.sleep_until_woken(self) {
            Woken::ByWaker(extra) => {
                self.state.fetch_or(LW_FLAG_RELEASE_OK, Ordering::Relaxed);
                extra
            }
            // We hold the lock; the waker that was coming is dead.
            Woken::Ended(extra) => extra,
        }
    }

    /// Moves a waiter from the wait list to the caller's private wake-up
    /// list (head/tail in `wake`). Caller holds the wait-list lock.
    fn move_to_wakeup(&self, env: &LockEnv, n: u32, wake: &mut (u32, u32)) {
        self.list_delete(env, n);
        let p = env.proc(n);
        if env.queue == WaitQueue::Modern {
            p.lw_waiting.store(LW_WS_PENDING_WAKEUP, Ordering::Relaxed);
        }
        if wake.1 == INVALID_PROCNO {
            wake.0 = n;
        } else {
            env.proc(wake.1).lw_next.store(n, Ordering::Relaxed);
        }
        wake.1 = n;
    }

    /// Marks each proc on a private wake-up list NOT_WAITING and posts it.
    fn wake_list(env: &LockEnv, head: u32) {
        let mut cur = head;
        while cur != INVALID_PROCNO {
            let p = env.proc(cur);
            // Read the link before the proc may run and reuse it.
            let next = p.lw_next.load(Ordering::Relaxed);
            p.lw_next.store(INVALID_PROCNO, Ordering::Relaxed);
            p.lw_prev.store(INVALID_PROCNO, Ordering::Relaxed);
            // Release pairs with the Acquire load in `sleep_until_woken`.
            p.lw_waiting.store(LW_WS_NOT_WAITING, Ordering::Release);
            p.sem.post();
            cur = next;
        }
    }

    /// Wakes the waiters a release makes runnable (see the module header).
    fn wakeup(&self, env: &LockEnv) {
        let mut wake = (INVALID_PROCNO, INVALID_PROCNO);
        let mut new_release_ok = true;
        let mut woke_holder = false;

        if !self.wait_list_lock(env) {
            // The generation ended: its waiters are woken by the
            // postmaster's posts and see that.
            return;
        }
        let mut cur = self.head.load(Ordering::Relaxed);
        while cur != INVALID_PROCNO {
            let p = env.proc(cur);
            let next = p.lw_next.load(Ordering::Relaxed);
            let mode = LWLockMode::from_u32(p.lw_wait_mode.load(Ordering::Relaxed));
            if woke_holder && mode == LWLockMode::Exclusive {
                cur = next;
                continue;
            }
            self.move_to_wakeup(env, cur, &mut wake);
            if mode != LWLockMode::WaitUntilFree {
                // Until the woken holder runs, do not wake more.
                new_release_ok = false;
                woke_holder = true;
            }
            if mode == LWLockMode::Exclusive {
                break;
            }
            cur = next;
        }
        if wake.1 != INVALID_PROCNO {
            env.proc(wake.1)
                .lw_next
                .store(INVALID_PROCNO, Ordering::Relaxed);
        }

        // Update flags and drop the wait-list lock in one step.
        let empty = self.list_is_empty();
        let mut old = self.state.load(Ordering::Relaxed);
        loop {
            let mut desired = old & !LW_FLAG_LOCKED;
            if new_release_ok {
                desired |= LW_FLAG_RELEASE_OK;
            } else {
                desired &= !LW_FLAG_RELEASE_OK;
            }
            if empty {
                desired &= !LW_FLAG_HAS_WAITERS;
            }
            // Release pairs with the Acquire fetch_or in `wait_list_lock`.
            match self.state.compare_exchange_weak(
                old,
                desired,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(v) => old = v,
            }
        }
        Self::wake_list(env, wake.0);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
