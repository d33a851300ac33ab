//! The futex, in one place: every sleep and wake on a 32-bit word of the
//! shared segment goes through [`wait`] and [`wake`] (the semaphores of
//! `sema`, the sequence words of `walsnd`).
//!
//! Both use the bitset forms (FUTEX_WAIT_BITSET / FUTEX_WAKE_BITSET):
//! with [`ANY`] they are plain FUTEX_WAIT / FUTEX_WAKE, and the wait's
//! timeout is an absolute CLOCK_MONOTONIC deadline, so a wait restarted
//! after a signal keeps its deadline. Never FUTEX_PRIVATE_FLAG: the
//! waiters and wakers are different processes mapping the same page, and
//! a private futex is keyed on the address space, not on the page.
//!
//! Why by hand: a futex is one system call with no safe wrapper in the
//! crates this project uses (nix has none; rustix's would add a crate for
//! two calls). Not compiled under loom, where `sema` models the word with
//! loom's own primitives.

use crate::sync::AtomicU32;

/// The bitset that matches every waiter (FUTEX_BITSET_MATCH_ANY).
pub const ANY: u32 = libc::FUTEX_BITSET_MATCH_ANY as u32;

/// How a [`wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Woken, or the word no longer held the expected value.
    Woken,
    /// The deadline passed.
    TimedOut,
    /// A signal handler ran.
    Interrupted,
}

/// Sleeps while `*word == expected`, until a [`wake`] whose bits meet
/// `bits`, or until `deadline_ns` (CLOCK_MONOTONIC,
/// [`crate::clock::monotonic_ns`]; None:
/// no deadline).
pub fn wait(word: &AtomicU32, expected: u32, deadline_ns: Option<u64>, bits: u32) -> Wait {
    let ts = deadline_ns.map(|d| libc::timespec {
        tv_sec: (d / 1_000_000_000) as libc::time_t,
        tv_nsec: (d % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid, aligned 32-bit word for the duration of
    // the call (a reference); the wait is keyed on the shared page (no
    // FUTEX_PRIVATE_FLAG, see the module header); `ts_ptr` is null or
    // points to a timespec on this stack frame; the second address is
    // unused (null).
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word as *const AtomicU32,
            libc::FUTEX_WAIT_BITSET,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            bits,
        )
    };
    if r == 0 {
        return Wait::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ETIMEDOUT) => Wait::TimedOut,
        Some(libc::EINTR) => Wait::Interrupted,
        _ => Wait::Woken,
    }
}

/// Wakes up to `n` sleepers on `word` whose bits meet `bits`.
pub fn wake(word: &AtomicU32, n: i32, bits: u32) {
    // SAFETY: FUTEX_WAKE_BITSET only reads the address to find sleepers;
    // the word is valid and aligned (a reference); the timeout and second
    // address arguments are unused (null).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word as *const AtomicU32,
            libc::FUTEX_WAKE_BITSET,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            bits,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::monotonic_ns;
    use std::time::Duration;

    #[test]
    fn a_wait_times_out_returns_at_once_on_a_changed_word_and_is_woken() {
        let w = AtomicU32::new(7);
        let t = monotonic_ns();
        assert_eq!(wait(&w, 7, Some(t + 20_000_000), ANY), Wait::TimedOut);
        assert!(monotonic_ns() - t >= 20_000_000);
        assert_eq!(wait(&w, 8, None, ANY), Wait::Woken);
        let w = std::sync::Arc::new(AtomicU32::new(0));
        let w2 = w.clone();
        let sleeper = std::thread::spawn(move || wait(&w2, 0, None, 0b10));
        std::thread::sleep(Duration::from_millis(50));
        wake(&w, i32::MAX, 0b01);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!sleeper.is_finished(), "woken by a wake of other bits");
        wake(&w, i32::MAX, 0b10);
        assert_eq!(sleeper.join().unwrap(), Wait::Woken);
    }
}
