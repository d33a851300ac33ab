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
//! Ended generations (see `lwlock`'s module header): a library process
//! outlives its server generation, and a spinlock whose holder was killed
//! stays locked forever. A panic there would abort the user's program
//! (`panic = abort`), so such a process watches the segment header's
//! `ended` flag: an LWLock wait-list spin gets it from the `LockEnv`
//! ([`SpinDelay::ending_with`]), a [`SpinLock`] from this thread's
//! installed flag ([`install_generation_flag`], done by the library's
//! process context). With a flag, each delay first checks it (Acquire,
//! pairs with the Release store in `Shmem::mark_ended`): once it is set
//! the wait stops — the lock counts as taken, its unlock frees whatever
//! the dead holder left — and [`take_cut_short`] reports it, so the call
//! fails with `ServerRestarted`. Sound because in an ended generation
//! mutual exclusion protects nothing that reaches disk (library processes
//! write no WAL files; nobody reads the old segment's data again). With a
//! flag there is no stuck-spinlock panic either: the waiter keeps backing
//! off until the flag comes (a killed holder always ends the generation).
//! Processes forked by the postmaster install no flag: their behaviour,
//! panic included, is unchanged, and the check is on the delay path only.
//!
//! A process that installed its proc slot's `crit::CritSlot`
//! (`crit::install`) counts each spinlock it holds there, from before the
//! taking swap to after the releasing store, so that its death while
//! holding one is known to be a crash.
//!
//! Invariants: the holder never blocks, sleeps, or takes another spinlock
//! while holding one; the unlock is a Release store that pairs with the
//! Acquire swap of the next locker.

use crate::sync::{spin_hint, AtomicU32, Ordering};
use std::cell::Cell;

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
        // Counted as held from before the swap (`crit`: a death at any
        // point until `unlock` counted it off shows as inside).
        crate::crit::with_mine(|c| c.enter(crate::crit::SPIN));
        // Acquire pairs with the Release store in `unlock`.
        if self.word.swap(LOCKED, Ordering::Acquire) == UNLOCKED {
            return 0;
        }
        self.lock_slow()
    }

    #[cold]
    fn lock_slow(&self) -> u32 {
        let mut backoff = SpinDelay::new(self as *const _ as usize).ending_with_installed();
        loop {
            // Test before test-and-set: read until it looks free.
            while self.word.load(Ordering::Relaxed) != UNLOCKED {
                if !backoff.spin_once("spinlock") {
                    // The generation ended: count the lock as taken (see
                    // the module header).
                    CUT_SHORT.with(|c| c.set(true));
                    return backoff.delays;
                }
            }
            // Acquire pairs with the Release store in `unlock`.
            if self.word.swap(LOCKED, Ordering::Acquire) == UNLOCKED {
                return backoff.delays;
            }
        }
    }

    /// [`SpinLock::lock`] counted in `crit` given here, not found through
    /// this thread's installed slot (the WAL reservation's hot path: one
    /// thread-local lookup fewer).
    #[inline]
    pub fn lock_in(&self, crit: &crate::crit::CritSlot) -> u32 {
        crit.enter(crate::crit::SPIN);
        // Acquire pairs with the Release store in `unlock`.
        if self.word.swap(LOCKED, Ordering::Acquire) == UNLOCKED {
            return 0;
        }
        self.lock_slow()
    }

    /// [`SpinLock::unlock`] for a lock taken with [`SpinLock::lock_in`].
    #[inline]
    pub fn unlock_in(&self, crit: &crate::crit::CritSlot) {
        // Release pairs with the Acquire swap in `lock`/`try_lock`.
        self.word.store(UNLOCKED, Ordering::Release);
        crit.exit(crate::crit::SPIN);
    }

    /// One attempt; true when the lock was taken.
    #[inline]
    pub fn try_lock(&self) -> bool {
        crate::crit::with_mine(|c| c.enter(crate::crit::SPIN));
        let got = self.word.load(Ordering::Relaxed) == UNLOCKED
            && self.word.swap(LOCKED, Ordering::Acquire) == UNLOCKED;
        if !got {
            crate::crit::with_mine(|c| c.exit(crate::crit::SPIN));
        }
        got
    }

    #[inline]
    pub fn unlock(&self) {
        // Release pairs with the Acquire swap in `lock`/`try_lock`: whatever
        // the holder wrote is visible to the next holder.
        self.word.store(UNLOCKED, Ordering::Release);
        crate::crit::with_mine(|c| c.exit(crate::crit::SPIN));
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

thread_local! {
    /// The `ended` flag of the generation this thread's library context
    /// mapped (null: none installed, a forked process).
    static ENDED: Cell<*const AtomicU32> = const { Cell::new(std::ptr::null()) };
    /// A spinlock wait of this thread stopped because the generation ended.
    static CUT_SHORT: Cell<bool> = const { Cell::new(false) };
}

/// While alive, spinlock waits of this thread stop when `ended` is set.
pub type InstalledFlag<'a> = crate::waitevent::Installed<'a, AtomicU32>;

/// Makes this thread's spinlock waits watch `ended` (the segment header's
/// flag) until the guard drops: for library processes only.
pub fn install_generation_flag(ended: &AtomicU32) -> InstalledFlag<'_> {
    crate::waitevent::Installed::in_key(&ENDED, ended)
}

/// Whether a spinlock wait of this thread was cut short by the end of the
/// generation since the last call.
pub fn take_cut_short() -> bool {
    CUT_SHORT.with(|c| c.replace(false))
}

/// Where a `SpinDelay` finds the generation flag.
#[derive(Clone, Copy)]
enum Watch<'a> {
    /// No flag: stuck detection panics (forked processes).
    None,
    /// The flag of a `LockEnv`.
    Flag(&'a AtomicU32),
    /// This thread's installed flag, if any (looked up at each delay).
    Installed,
}

/// The back-off schedule shared by spinlocks and the LWLock wait-list lock.
pub struct SpinDelay<'a> {
    spins: u32,
    delays: u32,
    cur_delay_us: u64,
    rng: u64,
    watch: Watch<'a>,
}

impl<'a> SpinDelay<'a> {
    pub fn new(seed: usize) -> Self {
        SpinDelay {
            spins: 0,
            delays: 0,
            cur_delay_us: 0,
            rng: (seed as u64)
                ^ (std::process::id() as u64).rotate_left(32)
                ^ 0x9E37_79B9_7F4A_7C15,
            watch: Watch::None,
        }
    }

    /// Stops the wait when `ended` (if given) becomes nonzero.
    pub fn ending_with(mut self, ended: Option<&'a AtomicU32>) -> Self {
        if let Some(f) = ended {
            self.watch = Watch::Flag(f);
        }
        self
    }

    /// Stops the wait when this thread's installed flag becomes nonzero.
    fn ending_with_installed(mut self) -> Self {
        self.watch = Watch::Installed;
        self
    }

    /// Some(ended?) when a flag is watched; None when there is none.
    fn generation_ended(&self) -> Option<bool> {
        // Acquire pairs with the Release store in `Shmem::mark_ended`.
        match self.watch {
            Watch::None => None,
            Watch::Flag(f) => Some(f.load(Ordering::Acquire) != 0),
            Watch::Installed => ENDED.with(|c| {
                let p = c.get();
                // SAFETY: installed by an `InstalledFlag` guard that
                // borrows the flag and clears the pointer when it drops,
                // so the flag is alive while the pointer is set.
                (!p.is_null()).then(|| unsafe { &*p }.load(Ordering::Acquire) != 0)
            }),
        }
    }

    /// Delays (sleeps) taken so far.
    pub fn delays(&self) -> u32 {
        self.delays
    }

    /// Called once per failed look at the lock word; sleeps when spinning
    /// has gone on long enough, panics when the lock looks stuck (without
    /// a generation flag). False: stop waiting, the generation ended.
    #[inline]
    #[must_use]
    pub fn spin_once(&mut self, what: &str) -> bool {
        spin_hint();
        self.spins += 1;
        if self.spins >= SPINS_PER_DELAY {
            self.spins = 0;
            return self.delay(what);
        }
        true
    }

    #[cold]
    fn delay(&mut self, what: &str) -> bool {
        let watched = self.generation_ended();
        if watched == Some(true) {
            return false;
        }
        self.delays += 1;
        if self.delays > MAX_DELAYS && watched.is_none() {
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
        true
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
            let _ = d.spin_once("test");
        }
    }

    #[test]
    fn a_watched_wait_neither_panics_nor_outlives_its_generation() {
        let ended = AtomicU32::new(0);
        let mut d = SpinDelay::new(1).ending_with(Some(&ended));
        d.delays = MAX_DELAYS + 5;
        d.cur_delay_us = 1;
        // Past MAX_DELAYS: no panic with a flag, the wait goes on.
        for _ in 0..SPINS_PER_DELAY {
            assert!(d.spin_once("test"));
        }
        ended.store(1, Ordering::Release);
        assert!((0..SPINS_PER_DELAY).any(|_| !d.spin_once("test")));

        // A spinlock whose holder is gone, in a thread with the flag.
        let s = SpinLock::new();
        assert_eq!(s.lock(), 0);
        let guard = install_generation_flag(&ended);
        assert!(!take_cut_short());
        s.lock();
        assert!(take_cut_short(), "the wait was cut short");
        s.unlock();
        drop(guard);
        assert!(!take_cut_short());
    }
}
