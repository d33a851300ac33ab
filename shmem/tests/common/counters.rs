//! Totals of the per-process counters (`ProcCounters`) over a range of
//! procs, for the multi-process stress test and the examples. Read after
//! the children were reaped: each counter has one writer, its owner, and
//! `waitpid` orders the owner's last store before these loads.

use shmem::proc::{Proc, ProcCounters};
use shmem::sync::{AtomicU64, Ordering};

/// The sum of one counter (`which` picks it) over `procs`.
pub fn counter_sum(procs: &[Proc], which: fn(&ProcCounters) -> &AtomicU64) -> u64 {
    procs
        .iter()
        .map(|p| which(&p.counters).load(Ordering::Relaxed))
        .sum()
}
