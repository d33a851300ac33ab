//! Per-process semaphores and latches, process-shared.
//!
//! `Semaphore` is PostgreSQL's PGSemaphore: a counting semaphore owned by one
//! proc slot; only its owner waits on it, anybody may post. It is a futex on a
//! 32-bit word in the shared segment, used *without* FUTEX_PRIVATE_FLAG so the
//! kernel keys it by physical page and wakes across processes.
//!
//! Word layout (truth table):
//!
//! | bits          | meaning                                           |
//! |---------------|---------------------------------------------------|
//! | 0..=30 COUNT  | posts not yet consumed                            |
//! | 31 SLEEPER    | the owner is (about to be) asleep in futex_wait   |
//!
//! `post` adds one and only makes the wake syscall when SLEEPER was set, so
//! a post to a proc that is not asleep costs one atomic add. `wait` consumes
//! one post, or sets SLEEPER and sleeps on the exact word value it saw: if a
//! post lands in between, the word differs and futex_wait returns at once
//! (no lost wake-up).
//!
//! Callers (LWLocks) rely on PGSemaphore semantics: a wake-up may be
//! unrelated to what the waiter waits for (e.g. a post meant for a previous
//! wait). The waiter loops until its own condition holds, counts the extra
//! wake-ups it absorbed, and re-posts them afterwards, so no post is lost.
//!
//! Choice: futex rather than `sem_init(pshared=1)`: the same speed in a
//! ping-pong between two processes (measured, see the sema_pingpong example),
//! no libc state inside the segment whose layout we cannot check, a timed wait
//! for free, and the same word works as a latch.
//!
//! `Latch` is a one-bit flag with the same futex scheme: `set` by anybody,
//! `wait` (with timeout) and `reset` by the owner (the walwriter).

use crate::sync::{AtomicU32, Ordering};
use std::time::Duration;

const COUNT_MASK: u32 = 0x7FFF_FFFF;
const SLEEPER: u32 = 0x8000_0000;

/// The 32-bit futex word. Under loom it also carries a `Notify` on which an
/// untimed wait really blocks (a yield loop makes loom explore every spin of
/// the sleeper, which does not finish for three threads); in real builds it
/// is exactly one `AtomicU32`, so the shared layout does not change.
#[repr(C)]
struct FutexWord {
    word: AtomicU32,
    #[cfg(loom)]
    notify: loom::sync::Notify,
}

impl FutexWord {
    fn new(v: u32) -> Self {
        FutexWord {
            word: AtomicU32::new(v),
            #[cfg(loom)]
            notify: loom::sync::Notify::new(),
        }
    }
}

impl std::ops::Deref for FutexWord {
    type Target = AtomicU32;
    fn deref(&self) -> &AtomicU32 {
        &self.word
    }
}

/// A counting semaphore owned by one proc slot.
#[repr(C)]
pub struct Semaphore {
    word: FutexWord,
}

impl Default for Semaphore {
    fn default() -> Self {
        Self::new()
    }
}

impl Semaphore {
    pub fn new() -> Self {
        Semaphore {
            word: FutexWord::new(0),
        }
    }

    /// Resets the count (only while nobody can use it: at slot (re)use).
    pub fn reset(&self) {
        self.word.store(0, Ordering::Relaxed);
    }

    /// Consumes one post, sleeping until there is one.
    pub fn wait(&self) {
        let _ = self.wait_inner(None);
    }

    /// Consumes one post; false if `timeout` passed first.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.wait_inner(Some(timeout))
    }

    fn wait_inner(&self, timeout: Option<Duration>) -> bool {
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            if cur & COUNT_MASK > 0 {
                // Acquire pairs with the Release fetch_add in `post`: what the
                // poster wrote before posting is visible after we consume it.
                match self.word.compare_exchange_weak(
                    cur,
                    (cur - 1) & !SLEEPER,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return true,
                    Err(v) => {
                        cur = v;
                        continue;
                    }
                }
            }
            if cur & SLEEPER == 0 {
                match self.word.compare_exchange_weak(
                    cur,
                    cur | SLEEPER,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => cur |= SLEEPER,
                    Err(v) => {
                        cur = v;
                        continue;
                    }
                }
            }
            let woke = futex_wait(&self.word, cur, timeout);
            cur = self.word.load(Ordering::Relaxed);
            if !woke && cur & COUNT_MASK == 0 {
                return false;
            }
        }
    }

    /// Adds one post and wakes the owner if it sleeps.
    pub fn post(&self) {
        // Release pairs with the Acquire compare_exchange in `wait_inner`.
        let old = self.word.fetch_add(1, Ordering::Release);
        debug_assert!(old & COUNT_MASK < COUNT_MASK, "semaphore count overflow");
        if old & SLEEPER != 0 {
            futex_wake(&self.word, 1);
        }
    }

    /// Posts not yet consumed (diagnostics and tests).
    pub fn count(&self) -> u32 {
        self.word.load(Ordering::Relaxed) & COUNT_MASK
    }
}

/// A latch: a flag one process sleeps on and others set.
#[repr(C)]
pub struct Latch {
    word: FutexWord,
}

const LATCH_SET: u32 = 1;

impl Default for Latch {
    fn default() -> Self {
        Self::new()
    }
}

impl Latch {
    pub fn new() -> Self {
        Latch {
            word: FutexWord::new(0),
        }
    }

    /// Sets the latch and wakes the sleeper. Cheap when already set.
    pub fn set(&self) {
        if self.word.load(Ordering::Relaxed) & LATCH_SET != 0 {
            return;
        }
        // Release pairs with the Acquire swap in `reset`.
        let old = self.word.swap(LATCH_SET, Ordering::Release);
        if old & SLEEPER != 0 {
            futex_wake(&self.word, i32::MAX);
        }
    }

    /// Clears the latch; returns whether it was set.
    pub fn reset(&self) -> bool {
        // Acquire pairs with the Release swap in `set`.
        self.word.swap(0, Ordering::Acquire) & LATCH_SET != 0
    }

    /// Sleeps until the latch is set or `timeout` passes; does not reset it.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut cur = self.word.load(Ordering::Relaxed);
        if cur & LATCH_SET != 0 {
            return true;
        }
        if cur & SLEEPER == 0 {
            match self.word.compare_exchange(
                cur,
                cur | SLEEPER,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => cur |= SLEEPER,
                Err(v) => return v & LATCH_SET != 0,
            }
        }
        futex_wait(&self.word, cur, Some(timeout));
        self.word.load(Ordering::Acquire) & LATCH_SET != 0
    }
}

/// Sleeps while `*word == expected`; false on timeout.
#[cfg(not(loom))]
fn futex_wait(word: &FutexWord, expected: u32, timeout: Option<Duration>) -> bool {
    let deadline = timeout.map(|d| crate::clock::monotonic_ns() + d.as_nanos() as u64);
    crate::futex::wait(word, expected, deadline, crate::futex::ANY) != crate::futex::Wait::TimedOut
}

#[cfg(not(loom))]
fn futex_wake(word: &FutexWord, n: i32) {
    crate::futex::wake(word, n, crate::futex::ANY);
}

/// Under loom: an untimed wait blocks on the word's `Notify` (the waker's
/// `notify` leaves a permit if it comes first, so no wake-up is lost); a
/// timed wait yields once and then reports a timeout.
#[cfg(loom)]
fn futex_wait(word: &FutexWord, expected: u32, timeout: Option<Duration>) -> bool {
    if word.load(Ordering::Relaxed) != expected {
        return true;
    }
    match timeout {
        None => {
            word.notify.wait();
            true
        }
        Some(_) => {
            loom::thread::yield_now();
            false
        }
    }
}

#[cfg(loom)]
fn futex_wake(word: &FutexWord, _n: i32) {
    word.notify.notify();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn post_then_wait_does_not_block() {
        let s = Semaphore::new();
        s.post();
        s.post();
        assert_eq!(s.count(), 2);
        s.wait();
        s.wait();
        assert_eq!(s.count(), 0);
        assert!(!s.wait_timeout(Duration::from_millis(10)));
    }

    #[test]
    fn wait_is_woken_by_post_from_other_thread() {
        let s = Arc::new(Semaphore::new());
        let s2 = s.clone();
        let h = std::thread::spawn(move || {
            for _ in 0..10_000 {
                s2.wait();
            }
        });
        for _ in 0..10_000 {
            s.post();
        }
        h.join().unwrap();
        assert_eq!(s.count(), 0);
    }

    #[test]
    fn latch_set_wakes_waiter() {
        let l = Arc::new(Latch::new());
        assert!(!l.wait(Duration::from_millis(5)));
        let l2 = l.clone();
        let h = std::thread::spawn(move || l2.wait(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        l.set();
        assert!(h.join().unwrap());
        assert!(l.reset());
        assert!(!l.reset());
    }
}
