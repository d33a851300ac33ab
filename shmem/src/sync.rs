//! The one facade through which every shared-memory algorithm reaches its
//! atomics, so that the same code runs under loom in model tests.
//!
//! Invariant: no module of this crate names `std::sync::atomic` or
//! `std::hint::spin_loop` directly; they import from here. Under `--cfg loom`
//! the types are loom's; futex waits become `loom::sync::Notify` waits (see
//! `sema`), and spin loops yield, which loom understands as "let someone
//! else run".

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering,
};

#[cfg(not(loom))]
pub use std::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering,
};

/// One step of a busy-wait loop: `pause` on hardware, a yield under loom.
#[inline]
pub fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Gives this CPU away (`sched_yield`): for a waiter whose partner may be
/// descheduled on an oversubscribed machine. A yield under loom.
#[inline]
pub fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    // SAFETY: sched_yield has no preconditions.
    #[cfg(not(loom))]
    unsafe {
        libc::sched_yield()
    };
}
