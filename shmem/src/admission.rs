//! Admission to the insertion API (`insert_concurrency_per_cpu`, walshm's
//! own): at most N processes at a time take turns inserting; the others
//! wait in FIFO order, asleep, instead of queueing on the WAL insertion
//! locks.
//!
//! Why: with many more inserting processes than CPUs (emit:1024 at 256
//! clients on 2 cores) the insertion locks' waiters sleep and are woken
//! one by one, and a holder the kernel preempts stalls its lock's
//! queue. Throughput fell to 0.4-0.5x of its peak. A process that holds a
//! token keeps it for a turn (`insert_concurrency_turn`, several
//! milliseconds, i.e. thousands of records), so the hand-off (one
//! semaphore post) is paid once per turn, not once per record. This is
//! InnoDB's `innodb_thread_concurrency` with time-sliced tickets.
//!
//! Admission is a scheduling hint, never a condition of correctness: no
//! WAL or lock invariant depends on how many processes hold tokens. Two
//! processes may briefly both act as a token's holder (after a
//! revocation); that costs contention, not safety.
//!
//! State (shared, all-zero is the initial state):
//! - `tokens[k].owner`: proc number + 1 of the holder, 0 = free. Written
//!   under `lock`; the holder reads it without the lock at each call to
//!   learn whether it still holds the token (Relaxed: a stale read only
//!   delays by one call the holder's noticing a revocation).
//! - `tokens[k].turn_end`: CLOCK_MONOTONIC ns when the holder's turn ends;
//!   written by whoever sets the owner (under `lock`) and by the holder
//!   when it renews an uncontested turn.
//! - the queue: proc numbers linked through `AdmissionWaiter::next`, from
//!   `head` to `tail`, changed only under `lock`; `queued` counts them
//!   (read without the lock as a hint by holders deciding whether to
//!   pass).
//! - `AdmissionWaiter::granted`: token index + 1 handed to a queued proc
//!   (Release store under `lock`, pairs with the waiter's Acquire load).
//!
//! Liveness: a holder passes its token at the end of its turn when
//! somebody waits, before any long wait of its own (a durable commit's
//! flush, an explicit flush) and when its session ends. A holder that
//! stops calling without passing (it died, or blocks in its own code)
//! loses its token: the queue's head, whose semaphore wait is bounded,
//! revokes a token whose turn ended more than one turn ago. So a token is
//! never lost for longer than about two turns.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
use crate::spin::SpinLock as QueueLock;

/// Under loom the queue's spinlock is modelled as a mutex (a spinning
/// lock exhausts loom's branch budget); what the model checks is the
/// queue and the hand-off under it.
#[cfg(loom)]
struct QueueLock(loom::sync::Mutex<()>);

#[cfg(loom)]
impl QueueLock {
    fn new() -> Self {
        QueueLock(loom::sync::Mutex::new(()))
    }

    fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        let _held = self.0.lock().unwrap();
        f()
    }
}

/// Most tokens there may be (`insert_concurrency_per_cpu` times the CPUs,
/// capped here).
#[cfg(not(loom))]
pub const MAX_TOKENS: usize = 1024;
/// Under loom every atomic is modelled: keep the table small.
#[cfg(loom)]
pub const MAX_TOKENS: usize = 2;

const NONE: u32 = 0;

/// One token, on its own line (its holder renews `turn_end`).
#[repr(C, align(128))]
pub struct Token {
    owner: AtomicU32,
    turn_end: AtomicU64,
}

/// The tokens and the queue of processes waiting for one.
#[repr(C, align(128))]
pub struct Admission {
    lock: QueueLock,
    queued: AtomicU32,
    head: AtomicU32,
    tail: AtomicU32,
    tokens: [Token; MAX_TOKENS],
}

/// A process's place in the queue (indexed by proc number).
#[repr(C)]
pub struct AdmissionWaiter {
    next: AtomicU32,
    granted: AtomicU32,
}

/// What `enter` or a look at the queue found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Token `k` is ours.
    Holds(usize),
    /// We are queued: wait on the semaphore, then `look`.
    Queued,
}

impl Admission {
    /// An empty table (the segment's zero-filled region is the same state;
    /// this is for tests and models).
    pub fn new() -> Admission {
        Admission {
            lock: QueueLock::new(),
            queued: AtomicU32::new(0),
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
            tokens: std::array::from_fn(|_| Token {
                owner: AtomicU32::new(0),
                turn_end: AtomicU64::new(0),
            }),
        }
    }
}

impl Default for Admission {
    fn default() -> Self {
        Self::new()
    }
}

impl AdmissionWaiter {
    pub fn new() -> AdmissionWaiter {
        AdmissionWaiter {
            next: AtomicU32::new(0),
            granted: AtomicU32::new(0),
        }
    }
}

impl Default for AdmissionWaiter {
    fn default() -> Self {
        Self::new()
    }
}

fn tag(procno: u32) -> u32 {
    procno + 1
}

impl Admission {
    /// Takes a free token if nobody queues, else joins the queue's tail.
    pub fn enter(
        &self,
        waiters: &[AdmissionWaiter],
        procno: u32,
        n_tokens: usize,
        turn_ns: u64,
        now: u64,
    ) -> Entry {
        self.lock.with(|| {
            if self.queued.load(Ordering::Relaxed) == 0 {
                if let Some(k) = self.free_token(n_tokens) {
                    self.give(k, procno, now + turn_ns);
                    return Entry::Holds(k);
                }
            }
            self.push(waiters, procno);
            Entry::Queued
        })
    }

    /// A queued process, after its semaphore wait: its granted token, or a
    /// token revoked from a holder that overran its turn by `turn_ns`
    /// (only the queue's head revokes, so the order stays FIFO), or still
    /// queued.
    pub fn look(
        &self,
        waiters: &[AdmissionWaiter],
        procno: u32,
        n_tokens: usize,
        turn_ns: u64,
        now: u64,
    ) -> Entry {
        if let Some(k) = granted(waiters, procno) {
            return Entry::Holds(k);
        }
        if !self.is_head(procno) {
            // Not the head: only a hand-off can give us a token.
            return Entry::Queued;
        }
        self.lock.with(|| {
            if let Some(k) = granted(waiters, procno) {
                return Entry::Holds(k);
            }
            if self.head.load(Ordering::Relaxed) != tag(procno) {
                return Entry::Queued;
            }
            let k = self.free_token(n_tokens).or_else(|| {
                (0..n_tokens)
                    .find(|&k| self.tokens[k].turn_end.load(Ordering::Relaxed) + turn_ns <= now)
            });
            match k {
                Some(k) => {
                    self.pop(waiters);
                    self.give(k, procno, now + turn_ns);
                    Entry::Holds(k)
                }
                None => Entry::Queued,
            }
        })
    }

    /// Whether `procno` heads the queue (a hint without the lock).
    pub fn is_head(&self, procno: u32) -> bool {
        self.head.load(Ordering::Relaxed) == tag(procno)
    }

    /// When the earliest turn ends: a queued process need not look before.
    pub fn earliest_turn_end(&self, n_tokens: usize) -> u64 {
        (0..n_tokens)
            .map(|k| self.tokens[k].turn_end.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// Whether proc `procno` still holds token `k` (a hint, see the header).
    #[inline]
    pub fn holds(&self, k: usize, procno: u32) -> bool {
        self.tokens[k].owner.load(Ordering::Relaxed) == tag(procno)
    }

    /// Somebody waits for a token (a hint).
    #[inline]
    pub fn anyone_queued(&self) -> bool {
        self.queued.load(Ordering::Relaxed) != 0
    }

    /// When token `k`'s turn ends.
    #[inline]
    pub fn turn_end(&self, k: usize) -> u64 {
        self.tokens[k].turn_end.load(Ordering::Relaxed)
    }

    /// The holder lengthens its uncontested turn.
    pub fn renew(&self, k: usize, until: u64) {
        self.tokens[k].turn_end.store(until, Ordering::Relaxed);
    }

    /// The holder `procno` gives token `k` up: to the queue's head (whose
    /// proc number is returned, for the caller to post its semaphore), or
    /// back to the free tokens. Nothing if it is no longer ours.
    pub fn pass(
        &self,
        waiters: &[AdmissionWaiter],
        k: usize,
        procno: u32,
        turn_ns: u64,
        now: u64,
    ) -> Option<u32> {
        self.lock.with(|| {
            if self.tokens[k].owner.load(Ordering::Relaxed) != tag(procno) {
                return None;
            }
            match self.pop(waiters) {
                Some(next) => {
                    self.give(k, next, now + turn_ns);
                    // Release: pairs with the waiter's Acquire in `granted`.
                    waiters[next as usize]
                        .granted
                        .store(k as u32 + 1, Ordering::Release);
                    Some(next)
                }
                None => {
                    self.tokens[k].owner.store(NONE, Ordering::Relaxed);
                    None
                }
            }
        })
    }

    /// A queued process gives up waiting (its session ends): it leaves the
    /// queue, or, if a token was granted meanwhile, returns it as `Some(k)`
    /// for the caller to pass on.
    pub fn cancel(&self, waiters: &[AdmissionWaiter], procno: u32) -> Option<usize> {
        self.lock.with(|| {
            if let Some(k) = granted(waiters, procno) {
                return Some(k);
            }
            self.unlink(waiters, procno);
            None
        })
    }

    /// What a dead process leaves here (its clean-up,
    /// `backend::abandoned`): proc `procno` leaves the queue, and every
    /// token it held or was granted is passed on. Returns how many tokens
    /// it had and the procs that got one (the caller posts them).
    pub fn release_all_of(
        &self,
        waiters: &[AdmissionWaiter],
        procno: u32,
        turn_ns: u64,
        now: u64,
    ) -> (u32, Vec<u32>) {
        // A token granted meanwhile is owned by `procno` already: the
        // loop below passes it.
        let _ = self.cancel(waiters, procno);
        waiters[procno as usize]
            .granted
            .store(NONE, Ordering::Relaxed);
        let mut had = 0;
        let mut posts = Vec::new();
        for k in 0..MAX_TOKENS {
            if self.holds(k, procno) {
                had += 1;
                posts.extend(self.pass(waiters, k, procno, turn_ns, now));
            }
        }
        (had, posts)
    }

    fn free_token(&self, n_tokens: usize) -> Option<usize> {
        (0..n_tokens).find(|&k| self.tokens[k].owner.load(Ordering::Relaxed) == NONE)
    }

    fn give(&self, k: usize, procno: u32, turn_end: u64) {
        self.tokens[k].turn_end.store(turn_end, Ordering::Relaxed);
        self.tokens[k].owner.store(tag(procno), Ordering::Relaxed);
    }

    fn push(&self, waiters: &[AdmissionWaiter], procno: u32) {
        let me = &waiters[procno as usize];
        me.next.store(NONE, Ordering::Relaxed);
        me.granted.store(NONE, Ordering::Relaxed);
        match self.tail.load(Ordering::Relaxed) {
            NONE => self.head.store(tag(procno), Ordering::Relaxed),
            t => waiters[(t - 1) as usize]
                .next
                .store(tag(procno), Ordering::Relaxed),
        }
        self.tail.store(tag(procno), Ordering::Relaxed);
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    fn pop(&self, waiters: &[AdmissionWaiter]) -> Option<u32> {
        let h = self.head.load(Ordering::Relaxed);
        if h == NONE {
            return None;
        }
        let procno = h - 1;
        self.unlink(waiters, procno);
        Some(procno)
    }

    /// Removes `procno` from the queue if it is there (a walk: only the
    /// head's removal is common, and it is the first step).
    fn unlink(&self, waiters: &[AdmissionWaiter], procno: u32) {
        let mut prev = NONE;
        let mut cur = self.head.load(Ordering::Relaxed);
        while cur != NONE && cur != tag(procno) {
            prev = cur;
            cur = waiters[(cur - 1) as usize].next.load(Ordering::Relaxed);
        }
        if cur == NONE {
            return;
        }
        let next = waiters[procno as usize].next.load(Ordering::Relaxed);
        match prev {
            NONE => self.head.store(next, Ordering::Relaxed),
            p => waiters[(p - 1) as usize]
                .next
                .store(next, Ordering::Relaxed),
        }
        if self.tail.load(Ordering::Relaxed) == tag(procno) {
            self.tail.store(prev, Ordering::Relaxed);
        }
        waiters[procno as usize].next.store(NONE, Ordering::Relaxed);
        self.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

fn granted(waiters: &[AdmissionWaiter], procno: u32) -> Option<usize> {
    // Acquire: pairs with the Release store in `pass`.
    match waiters[procno as usize].granted.load(Ordering::Acquire) {
        NONE => None,
        k => Some((k - 1) as usize),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn zeroed<T>() -> Box<T> {
        // SAFETY: both types are atomics only, for which all-zero is valid
        // (and is their initial state, as in the zero-filled segment).
        unsafe { Box::new(std::mem::zeroed()) }
    }

    fn waiters(n: usize) -> Vec<AdmissionWaiter> {
        (0..n).map(|_| AdmissionWaiter::new()).collect()
    }

    const TURN: u64 = 1_000;

    /// One token, held by proc 0 since time 0, and proc 1 queued for it.
    fn held_by_0_with_1_queued() -> (Box<Admission>, Vec<AdmissionWaiter>) {
        let a: Box<Admission> = zeroed();
        let w = waiters(4);
        assert_eq!(a.enter(&w, 0, 1, TURN, 0), Entry::Holds(0));
        assert_eq!(a.enter(&w, 1, 1, TURN, 0), Entry::Queued);
        (a, w)
    }

    #[test]
    fn tokens_go_first_come_and_pass_in_fifo_order() {
        let a: Box<Admission> = zeroed();
        let w = waiters(8);
        assert_eq!(a.enter(&w, 0, 2, TURN, 0), Entry::Holds(0));
        assert_eq!(a.enter(&w, 1, 2, TURN, 0), Entry::Holds(1));
        assert_eq!(a.enter(&w, 2, 2, TURN, 0), Entry::Queued);
        assert_eq!(a.enter(&w, 3, 2, TURN, 0), Entry::Queued);
        assert!(a.anyone_queued());
        // 3 is not the head: it may not revoke, whatever the clock says.
        assert_eq!(a.look(&w, 3, 2, TURN, 10 * TURN), Entry::Queued);
        assert_eq!(a.pass(&w, 1, 1, TURN, 5), Some(2));
        assert_eq!(a.look(&w, 2, 2, TURN, 5), Entry::Holds(1));
        assert!(a.holds(1, 2) && !a.holds(1, 1));
        // A pass by a process that lost the token does nothing.
        assert_eq!(a.pass(&w, 1, 1, TURN, 5), None);
        assert_eq!(a.pass(&w, 0, 0, TURN, 6), Some(3));
        assert_eq!(a.look(&w, 3, 2, TURN, 6), Entry::Holds(0));
        assert!(!a.anyone_queued());
        assert_eq!(a.pass(&w, 0, 3, TURN, 7), None);
        assert_eq!(a.enter(&w, 4, 2, TURN, 7), Entry::Holds(0));
    }

    #[test]
    fn a_newcomer_queues_behind_waiters_even_if_a_token_is_free() {
        let (a, w) = held_by_0_with_1_queued();
        assert_eq!(a.pass(&w, 0, 0, TURN, 1), Some(1));
        // 1 was granted but has not looked yet; 0 comes back: behind nobody
        // (the queue is empty), but no token is free.
        assert_eq!(a.enter(&w, 0, 1, TURN, 1), Entry::Queued);
        assert_eq!(a.look(&w, 1, 1, TURN, 1), Entry::Holds(0));
    }

    #[test]
    fn the_head_revokes_a_token_whose_holder_overran_by_a_turn() {
        let (a, w) = held_by_0_with_1_queued();
        assert_eq!(a.earliest_turn_end(1), TURN);
        assert_eq!(a.look(&w, 1, 1, TURN, 2 * TURN - 1), Entry::Queued);
        assert_eq!(a.look(&w, 1, 1, TURN, 2 * TURN), Entry::Holds(0));
        assert!(!a.holds(0, 0), "the overrunning holder sees it lost it");
        assert!(!a.anyone_queued());
    }

    #[test]
    fn a_cancelled_waiter_leaves_the_middle_of_the_queue() {
        let (a, w) = held_by_0_with_1_queued();
        for p in 2..4 {
            assert_eq!(a.enter(&w, p, 1, TURN, 0), Entry::Queued);
        }
        assert_eq!(a.cancel(&w, 2), None);
        assert_eq!(a.cancel(&w, 3), None);
        assert_eq!(a.pass(&w, 0, 0, TURN, 1), Some(1));
        assert_eq!(a.cancel(&w, 1), Some(0), "granted before it cancelled");
        assert!(!a.anyone_queued());
        assert_eq!(a.pass(&w, 0, 1, TURN, 2), None);
        assert_eq!(a.enter(&w, 2, 1, TURN, 2), Entry::Holds(0));
    }
}
