//! Spinlock: test-and-test-and-set with `pause`, randomized exponential
//! back-off and a "stuck spinlock" panic (PostgreSQL's `s_lock.c`).
//!
//! A spinlock protects a few instructions (the WAL insert position, the proc
//! free list). The fast path is one swap. When the lock is busy we spin on a
//! plain load (so the cache line stays shared until the holder releases),
//! executing `pause` between reads; after `SPINS_PER_DELAY` reads we sleep for
//! a randomized, exponentially growing delay (1 ms .. 1 s), because on a
//! machine with fewer cores than processes the holder may be descheduled and
//! spinning would only steal its CPU. After `MAX_DELAYS` sleeps (minutes of
//! waiting) the lock is declared stuck: the process panics, which the
//! postmaster treats as a crash and answers with a restart.
//!
//! Each delay is published as the `Timeout:SpinDelay` wait event and
//! counted in the process's `spin_delays` (both only on this cold path).
//!
//! Invariants: the holder never blocks, sleeps, or takes another spinlock
//! while holding one; the unlock is a Release store that pairs with the
//! Acquire swap of the next locker.

use crate::sync::{spin_hint, AtomicU32, Ordering};

const SPINS_PER_DELAY: u32 = 100;
const MIN_DELAY_US: u64 = 1_000;
const MAX_DELAY_US: u64 = 1_000_000;
const MAX_DELAYS: u32 = 1_000;

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;

/// A spinlock word in shared memory.
#[repr(C)]
pub struct SpinLock {
    word: AtomicU32,
}

impl Default for SpinLock {
    fn default() -> Self {
        Self::new()
    }
}

impl SpinLock {
    pub fn new() -> Self {
        SpinLock {
            word: AtomicU32::new(UNLOCKED),
        }
    }

    /// Takes the lock; returns the number of delays (sleeps) it needed.
    #[inline]
    pub fn lock(&self) -> u32 {
        // Acquire pairs with the Release store in `unlock`.
        if self.word.swap(LOCKED, Ordering::Acquire) == UNLOCKED {
            return 0;
        }
        self.lock_slow()
    }

    #[cold]
    fn lock_slow(&self) -> u32 {
        let mut backoff = SpinDelay::new(self as *const _ as usize);
        loop {
            // Test before test-and-set: read until it looks free.
            while self.word.load(Ordering::Relaxed) != UNLOCKED {
                backoff.spin_once("spinlock");
            }
            // Acquire pairs with the Release store in `unlock`.
            if self.word.swap(LOCKED, Ordering::Acquire) == UNLOCKED {
                return backoff.delays;
            }
        }
    }

    /// One attempt; true when the lock was taken.
    #[inline]
    pub fn try_lock(&self) -> bool {
        self.word.load(Ordering::Relaxed) == UNLOCKED
            && self.word.swap(LOCKED, Ordering::Acquire) == UNLOCKED
    }

    #[inline]
    pub fn unlock(&self) {
        // Release pairs with the Acquire swap in `lock`/`try_lock`: whatever
        // the holder wrote is visible to the next holder.
        self.word.store(UNLOCKED, Ordering::Release);
    }

    /// Runs `f` with the lock held.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        self.lock();
        let r = f();
        self.unlock();
        r
    }
}

/// The back-off schedule shared by spinlocks and the LWLock wait-list lock.
pub struct SpinDelay {
    spins: u32,
    delays: u32,
    cur_delay_us: u64,
    rng: u64,
}

impl SpinDelay {
    pub fn new(seed: usize) -> Self {
        SpinDelay {
            spins: 0,
            delays: 0,
            cur_delay_us: 0,
            rng: (seed as u64)
                ^ (std::process::id() as u64).rotate_left(32)
                ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// Delays (sleeps) taken so far.
    pub fn delays(&self) -> u32 {
        self.delays
    }

    /// Called once per failed look at the lock word; sleeps when spinning
    /// has gone on long enough, panics when the lock looks stuck.
    #[inline]
    pub fn spin_once(&mut self, what: &str) {
        spin_hint();
        self.spins += 1;
        if self.spins >= SPINS_PER_DELAY {
            self.spins = 0;
            self.delay(what);
        }
    }

    #[cold]
    fn delay(&mut self, what: &str) {
        self.delays += 1;
        if self.delays > MAX_DELAYS {
            panic!("stuck {what} detected (waited {} delays)", self.delays - 1);
        }
        if self.cur_delay_us == 0 {
            self.cur_delay_us = MIN_DELAY_US;
        }
        crate::stats::with_mine(|c| crate::stats::bump(&c.flat.spin_delays, 1));
        let prev = crate::waitevent::report(crate::waitevent::SPIN_DELAY);
        sleep_us(self.cur_delay_us);
        crate::waitevent::restore(prev);
        // Grow by a random fraction between 1x and 2x, wrap to the minimum
        // after the maximum (as s_lock.c does).
        let frac = self.next_random() % 1000;
        self.cur_delay_us += self.cur_delay_us * frac / 1000 + 1;
        if self.cur_delay_us > MAX_DELAY_US {
            self.cur_delay_us = MIN_DELAY_US;
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: cheap, good enough for jitter.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(not(loom))]
fn sleep_us(us: u64) {
    std::thread::sleep(std::time::Duration::from_micros(us));
}

#[cfg(loom)]
fn sleep_us(_us: u64) {
    loom::thread::yield_now();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lock_unlock_try() {
        let s = SpinLock::new();
        assert_eq!(s.lock(), 0);
        assert!(!s.try_lock());
        s.unlock();
        assert!(s.try_lock());
        s.unlock();
        assert_eq!(s.with(|| 7), 7);
    }

    #[test]
    fn threads_keep_mutual_exclusion() {
        use std::sync::Arc;
        struct Shared {
            lock: SpinLock,
            counter: std::cell::UnsafeCell<u64>,
        }
        // SAFETY: `counter` is only touched with `lock` held.
        unsafe impl Sync for Shared {}
        let s = Arc::new(Shared {
            lock: SpinLock::new(),
            counter: std::cell::UnsafeCell::new(0),
        });
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..50_000 {
                        s.lock.with(|| {
                            // SAFETY: the spinlock is held, so no other
                            // thread reads or writes the counter now.
                            unsafe { *s.counter.get() += 1 }
                        });
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // SAFETY: every thread has been joined.
        assert_eq!(unsafe { *s.counter.get() }, 200_000);
    }

    #[test]
    #[should_panic(expected = "stuck test")]
    fn stuck_detection_panics() {
        let mut d = SpinDelay::new(1);
        // Make delays instant by starting above the max so it wraps to 1 ms,
        // then drive past MAX_DELAYS quickly with a tiny count.
        d.delays = MAX_DELAYS;
        d.cur_delay_us = 1;
        for _ in 0..SPINS_PER_DELAY {
            d.spin_once("test");
        }
    }
}
