//! Waking library readers of the WAL without timers (`backend::walread`,
//! the worker library's `Reader`): one futex word per read mode, in
//! `XLogCtl::readers`.
//!
//! - [`ReaderWakes::flushed`]: bumped by whoever advanced `flush_result`
//!   (after releasing WALWriteLock, beside `walsnd::wake_walsenders`).
//! - [`ReaderWakes::inserted`]: bumped by an inserter after it released its
//!   WAL insertion lock, for readers that take records as soon as every
//!   insertion below them finished (the opt-in "inserted" mode).
//!
//! Protocol (Dekker, as `walsnd::wake_walsenders`), for a reader:
//!
//! 1. [`WakeWord::prepare`]: count itself in `waiters` (SeqCst), a SeqCst
//!    fence, then read `seq`;
//! 2. look again for a record (the flush position, or the insertion locks);
//! 3. if there is none, [`WakeWord::sleep`] while `seq` still holds the
//!    value read in 1 (a futex wait with a deadline, a guard only);
//! 4. [`WakeWord::finish`]: leave `waiters`.
//!
//! and for a waker, after publishing its progress: a store-load barrier,
//! then load `waiters`; only when it is nonzero bump `seq` (SeqCst) and
//! wake every sleeper. Either the reader's look in 2 sees the progress or
//! the waker sees the reader counted (neither load can be ordered before
//! the other side's store: both sides have a full barrier between store
//! and load), and a bump that lands between 1 and 3 makes the futex wait
//! return at once. A bump read in 1 was made after the progress it
//! announces (SeqCst increment, read by a SeqCst load: the progress
//! happens before the look in 2). So no wake-up is lost, and a waker pays
//! one fence and one load when nobody waits.
//!
//! The two wakers' barriers differ:
//! - the flusher ([`WakeWord::wake`]) issues a SeqCst fence after its
//!   Release `fetch_max` of `flush_result`;
//! - the inserter ([`WakeWord::wake_after_release`]) has just released its
//!   insertion lock with a SeqCst `fetch_sub` of the lock's state word
//!   (`LWLock::release`): an SeqCst RMW followed by a SeqCst load of
//!   `waiters` orders the same way (C++20 [atomics.order]: the reader's
//!   fence precedes its loads of the lock states), and on x86 both are the
//!   same instructions as the Release RMW and a plain load: the insert path
//!   pays one load of a line nobody writes while no reader waits.
//!
//! Each word sits alone on its cache line: `inserted.waiters` is read by
//! every insertion, and `flushed.waiters` changes at every reader's sleep.
//!
//! Crash: a sleeper of a generation that ended is woken by nobody; its
//! deadline (the caller's guard) brings it back to check the generation.

use crate::sync::{fence, AtomicU32, Ordering};

/// One futex word with its waiter count (see the module header).
#[repr(C, align(128))]
#[derive(Default)]
pub struct WakeWord {
    /// Bumped by each wake that found a waiter: the futex word.
    pub seq: AtomicU32,
    /// Readers between `prepare` and `finish`.
    pub waiters: AtomicU32,
}

/// The readers' wake words, one per read mode.
#[repr(C)]
#[derive(Default)]
pub struct ReaderWakes {
    /// Woken when `flush_result` advances.
    pub flushed: WakeWord,
    /// Woken when an insertion finishes (only while somebody waits).
    pub inserted: WakeWord,
}

impl WakeWord {
    /// Step 1: counts the caller as a waiter; returns the `seq` to sleep
    /// on. The caller looks for progress again, then sleeps or not, and
    /// calls [`WakeWord::finish`] either way.
    pub fn prepare(&self) -> u32 {
        // SeqCst, then the fence: pairs with the fence in `wake` (and the
        // SeqCst lock release before `wake_after_release`): the look for
        // progress that follows cannot pass this store.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // SeqCst: pairs with the SeqCst increment in `wake_slow`, made
        // after the progress it announces.
        self.seq.load(Ordering::SeqCst)
    }

    /// Step 4: no longer a waiter. Relaxed: a waker that still sees the
    /// count only wakes in vain.
    pub fn finish(&self) {
        self.waiters.fetch_sub(1, Ordering::Relaxed);
    }

    /// A flusher, after its `flush_result` store: wakes the waiters. One
    /// fence and one load when none waits.
    #[inline]
    pub fn wake(&self) {
        // Pairs with the fence in `prepare`.
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.wake_slow();
        }
    }

    /// An inserter, right after the SeqCst release of its insertion lock
    /// (which stands in for the fence, see the module header): wakes the
    /// waiters. One load when none waits.
    #[inline]
    pub fn wake_after_release(&self) {
        // SeqCst: after the SeqCst fetch_sub in `LWLock::release`; pairs
        // with the fence in `prepare`.
        if self.waiters.load(Ordering::SeqCst) != 0 {
            self.wake_slow();
        }
    }

    #[cold]
    fn wake_slow(&self) {
        // SeqCst: pairs with the SeqCst load in `prepare`.
        self.seq.fetch_add(1, Ordering::SeqCst);
        #[cfg(not(loom))]
        crate::futex::wake(&self.seq, i32::MAX, crate::futex::ANY);
    }

    /// Step 3: sleeps while `seq` holds `seen`, until `deadline_ns`
    /// (CLOCK_MONOTONIC, `clock::monotonic_ns`).
    #[cfg(not(loom))]
    pub fn sleep(&self, seen: u32, deadline_ns: u64) -> crate::futex::Wait {
        crate::futex::wait(&self.seq, seen, Some(deadline_ns), crate::futex::ANY)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::monotonic_ns;

    #[test]
    fn a_wake_without_waiters_changes_nothing_and_a_prepared_sleep_sees_a_wake() {
        let w = WakeWord::default();
        w.wake();
        w.wake_after_release();
        assert_eq!(w.seq.load(Ordering::Relaxed), 0, "nobody waits: no bump");
        let seen = w.prepare();
        w.wake();
        // The bump landed after `prepare`: the sleep returns at once.
        let t = monotonic_ns();
        assert_eq!(w.sleep(seen, t + 5_000_000_000), crate::futex::Wait::Woken);
        assert!(monotonic_ns() - t < 1_000_000_000);
        w.finish();
        assert_eq!(w.waiters.load(Ordering::Relaxed), 0);
        let seen = w.prepare();
        let t = monotonic_ns();
        assert_eq!(w.sleep(seen, t + 20_000_000), crate::futex::Wait::TimedOut);
        w.finish();
    }
}
