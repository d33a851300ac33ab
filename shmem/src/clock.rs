//! The one clock every process of the server shares: CLOCK_MONOTONIC in
//! nanoseconds. Deadlines and timestamps that one process stores in shared
//! memory and another compares (`ReplCtl::flushed_at_ns`, admission turns,
//! futex deadlines, readers' wake times) all come from here, so they are
//! comparable across processes; CLOCK_MONOTONIC never goes back and does
//! not jump with the wall clock. Served by the vDSO: no system call.

use nix::time::{clock_gettime, ClockId};

/// CLOCK_MONOTONIC now, in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC always exists on Linux; the call cannot fail with a
    // valid clock id, so an error reads as 0 (never seen).
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}
