//! Proc slots (PostgreSQL's PGPROC): one per process that may take LWLocks.
//!
//! Processes refer to each other by proc number (the index of the slot),
//! never by address. A slot holds the process's semaphore, its LWLock wait
//! state and wait-list links, its transaction state, and counters the
//! benchmark reads. Each slot is padded to 128 bytes so that one process's
//! counter updates never invalidate another's line.
//!
//! Invariants:
//! - `lw_next`/`lw_prev` are read and written only by whoever holds the
//!   wait-list lock of the LWLock the proc is queued on, or by the waker that
//!   moved it to its private wake-up list (until it stores NOT_WAITING).
//! - `lw_waiting` goes NOT_WAITING -> WAITING (the proc itself, under the
//!   wait-list lock) -> PENDING_WAKEUP (a waker, under the wait-list lock; the
//!   modern queue only) -> NOT_WAITING (the waker, Release, after the links
//!   are reset, then posts the semaphore), or WAITING -> NOT_WAITING (the proc
//!   itself when it dequeues itself).
//! - Counters are written only by the owning process (plain load+store of an
//!   atomic, no read-modify-write) and read by anybody.

use crate::sema::Semaphore;
use crate::sync::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// "No proc": end of a list, empty list head.
pub const INVALID_PROCNO: u32 = u32::MAX;

/// `lw_waiting` values.
pub const LW_WS_NOT_WAITING: u32 = 0;
pub const LW_WS_WAITING: u32 = 1;
pub const LW_WS_PENDING_WAKEUP: u32 = 2;

/// Per-process counters, written by the owner only.
#[repr(C)]
#[derive(Default)]
pub struct ProcCounters {
    /// Transactions (workload loop iterations) completed.
    pub transactions: AtomicU64,
    /// LWLock acquisitions (the `lwlock` workload).
    pub lock_acquires: AtomicU64,
    /// Times this proc slept on its semaphore for an LWLock.
    pub lock_sleeps: AtomicU64,
    /// fdatasync calls this process made on WAL.
    pub wal_syncs: AtomicU64,
    /// Commits this process waited for to be flushed.
    pub sync_commits: AtomicU64,
    /// Snapshots that showed one of our own committed XIDs as running
    /// (must stay 0).
    pub snapshot_violations: AtomicU64,
}

impl ProcCounters {
    /// Adds `n` to a counter owned by this process (no atomic RMW needed:
    /// only the owner writes).
    #[inline]
    pub fn bump(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub fn reset(&self) {
        for c in [
            &self.transactions,
            &self.lock_acquires,
            &self.lock_sleeps,
            &self.wal_syncs,
            &self.sync_commits,
            &self.snapshot_violations,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// One proc slot.
#[repr(C, align(128))]
pub struct Proc {
    /// PID of the process using the slot, 0 when free.
    pub pid: AtomicI32,
    /// The slot's own number (constant after initialization).
    pub procno: AtomicU32,
    /// Wakes this process out of LWLock and group-clear waits.
    pub sem: Semaphore,
    /// LW_WS_* state of an LWLock wait.
    pub lw_waiting: AtomicU32,
    /// The mode (LWLockMode as u32) this proc waits for.
    pub lw_wait_mode: AtomicU32,
    /// Wait-list links (proc numbers).
    pub lw_next: AtomicU32,
    pub lw_prev: AtomicU32,
    /// Free-list link while the slot is unused.
    pub free_next: AtomicU32,
    /// Top-level transaction id (32-bit), 0 when none.
    pub xid: AtomicU32,
    /// Group XID clear: is this proc on the group list / waiting for a leader.
    pub group_clear_member: AtomicU32,
    /// Group XID clear: next proc on the group list.
    pub group_clear_next: AtomicU32,
    /// Group XID clear: the XID the leader must clear for us.
    pub group_clear_xid: AtomicU32,
    /// Secret key a CancelRequest for this backend must present.
    pub cancel_key: AtomicU32,
    /// What this process waits on (`waitevent` encoding, 0 = nothing);
    /// written by the owner only, around its waits.
    pub wait_event_info: AtomicU32,
    pub counters: ProcCounters,
    /// Flush on behalf (issue 12): the LSN a no-I/O process (a library
    /// worker) waits to see flushed, 0 when it waits for nothing. Set by the
    /// proc itself; the walwriter swaps it to 0 and posts `sem` once the
    /// flush result covers it (see walwriter's notifier).
    pub flush_wanted: AtomicU64,
}

impl Proc {
    pub fn new(procno: u32) -> Self {
        Proc {
            pid: AtomicI32::new(0),
            procno: AtomicU32::new(procno),
            sem: Semaphore::new(),
            lw_waiting: AtomicU32::new(LW_WS_NOT_WAITING),
            lw_wait_mode: AtomicU32::new(0),
            lw_next: AtomicU32::new(INVALID_PROCNO),
            lw_prev: AtomicU32::new(INVALID_PROCNO),
            free_next: AtomicU32::new(INVALID_PROCNO),
            xid: AtomicU32::new(0),
            group_clear_member: AtomicU32::new(0),
            group_clear_next: AtomicU32::new(INVALID_PROCNO),
            group_clear_xid: AtomicU32::new(0),
            cancel_key: AtomicU32::new(0),
            wait_event_info: AtomicU32::new(0),
            counters: ProcCounters::default(),
            flush_wanted: AtomicU64::new(0),
        }
    }

    pub fn procno(&self) -> u32 {
        self.procno.load(Ordering::Relaxed)
    }
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Proc>() == 128);
