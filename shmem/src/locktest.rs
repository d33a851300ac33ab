//! The `lwlock` workload's oracle: plain data that only the Test LWLock
//! keeps consistent (a test-only region of the segment, see `layout`).
//!
//! Exclusive holders bump `counter` and `mirror` non-atomically; shared
//! holders check they agree and count `torn_reads` if not. At a clean
//! shutdown the postmaster compares `counter` with the exclusive
//! acquisitions the backends counted. Invariant: outside an exclusive
//! critical section `counter == mirror`, and `torn_reads` stays 0 — any
//! other value proves the LWLock let a reader or a second writer in.

use crate::sync::{AtomicU64, Ordering};
use std::cell::UnsafeCell;

/// Data protected by the `Test` LWLock, deliberately plain (non-atomic):
/// mutual exclusion is what keeps it consistent.
#[repr(C, align(128))]
pub struct LockTestArea {
    /// Incremented by exclusive holders.
    pub counter: UnsafeCell<u64>,
    /// Always equal to `counter` outside a critical section.
    pub mirror: UnsafeCell<u64>,
    /// Shared holders that saw counter != mirror (must stay 0).
    pub torn_reads: AtomicU64,
}

/// The lwlock workload's critical sections (plain data under the Test lock).
impl LockTestArea {
    /// Exclusive holder: bump both words non-atomically.
    ///
    /// # Safety
    /// The caller holds the Test LWLock exclusively.
    pub unsafe fn bump_exclusive(&self) {
        // SAFETY: exclusive lock held: nobody else reads or writes these.
        unsafe {
            let c = std::ptr::read_volatile(self.counter.get());
            std::ptr::write_volatile(self.counter.get(), c + 1);
            let m = std::ptr::read_volatile(self.mirror.get());
            std::ptr::write_volatile(self.mirror.get(), m + 1);
        }
    }

    /// Shared holder: check both words agree.
    ///
    /// # Safety
    /// The caller holds the Test LWLock in shared mode (no writer runs).
    pub unsafe fn check_shared(&self) -> bool {
        // SAFETY: shared lock held: no exclusive holder writes now.
        let (c, m) = unsafe {
            (
                std::ptr::read_volatile(self.counter.get()),
                std::ptr::read_volatile(self.mirror.get()),
            )
        };
        if c != m {
            self.torn_reads.fetch_add(1, Ordering::Relaxed);
        }
        c == m
    }

    /// Reads the counter (postmaster, after every backend exited).
    pub fn counter_value(&self) -> u64 {
        // SAFETY: a racy read of a u64 is only used for the final report,
        // taken when no process holds the lock.
        unsafe { std::ptr::read_volatile(self.counter.get()) }
    }
}
