//! Shared WAL state: insert position, insertion locks, write/flush results,
//! buffer page map. Plain `#[repr(C)]` data; the algorithms live in
//! `backend::xlog` and `walwriter`.
//!
//! Lock inventory (who protects what; take them in this order):
//! - WAL insertion lock `i` (LWLock, tranche WALInsert): held while copying a
//!   record into WAL buffers; its `inserting_at` advertises how far the
//!   holder has progressed (0 = holds the lock, position not yet known).
//!   Held across the reservation too in the `single` insertion variant
//!   (then only lock 0 is used).
//! - `insert.lock` (spinlock): `curr_byte_pos`, `prev_byte_pos`. Never held
//!   across anything but the two loads and stores.
//! - WALBufMapping (named LWLock): advancing `initialized_up_to` and
//!   re-initializing buffer pages (`xlblocks`).
//! - WALWrite (named LWLock): `write` and `fdatasync` of WAL files and the
//!   advance of `write_result`/`flush_result`. Call
//!   `WaitXLogInsertionsToFinish` *before* taking it.
//! - the prev-link table (`wal_reservation = atomic` only, its own region):
//!   no lock; its slots are claimed by CAS and filled by the reserver that
//!   holds an insertion lock (see `prevlink` for the protocol and bound).
//! - `req_write`, `req_flush` and the write/flush results are atomics
//!   (advanced with fetch_max), readable without any lock. The write result
//!   also advances mid-write, one run at a time, as WALWrite's variable.
//!
//! - `readers` (no lock): the WAL readers' wake words, Dekker-paired with
//!   the flush and insertion-lock release (see `readwake`).
//!
//! - `wal_stats.lock` (spinlock): the `pg_stat_wal` reset baseline and
//!   `stats_reset_us` (the counters themselves are per process, in
//!   `stats`). Never held across anything but those loads and stores.
//!
//! Invariants: `flush_result <= write_result <= ` every finished insertion;
//! a buffer page `i` holds the WAL page ending at `xlblocks[i]` and is never
//! re-initialized for a later page before `write_result >= xlblocks[i]`.

use crate::lwlock::LWLock;
use crate::sema::Latch;
use crate::spin::SpinLock;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// One WAL insertion lock with its progress variable (packed form, 32 B).
#[repr(C)]
pub struct WalInsertLock {
    pub lock: LWLock,
    /// How far the holder has inserted (an LSN), 0 when not known.
    pub inserting_at: AtomicU64,
    /// Last "important" record this lock inserted (diagnostics).
    pub last_important_at: AtomicU64,
}

/// An insertion lock alone on its 128-byte line (seed 001).
#[repr(C, align(128))]
pub struct PaddedWalInsertLock {
    pub l: WalInsertLock,
}

/// Insert position, alone on its cache line with its spinlock.
#[repr(C, align(128))]
pub struct InsertPosition {
    pub lock: SpinLock,
    /// Next free position in usable-byte space.
    pub curr_byte_pos: AtomicU64,
    /// Start of the last reserved record, usable-byte space.
    pub prev_byte_pos: AtomicU64,
}

/// Results of XLogWrite, on their own line.
#[repr(C, align(128))]
pub struct WriteState {
    /// WAL written (handed to the kernel) up to here.
    pub write_result: AtomicU64,
    /// WAL durably flushed up to here.
    pub flush_result: AtomicU64,
    /// Highest completed page somebody asked to have written.
    pub req_write: AtomicU64,
    /// Highest LSN a waiting flusher asked to have made durable: whoever
    /// writes past it next also syncs, so the flusher need not win
    /// WALWriteLock against backends that only write.
    pub req_flush: AtomicU64,
    /// fdatasync calls and pages written (benchmarks).
    pub syncs: AtomicU64,
    pub writes: AtomicU64,
}

/// Buffer mapping state.
#[repr(C, align(128))]
pub struct BufMapState {
    /// Every page below this LSN has been initialized in the buffers.
    pub initialized_up_to: AtomicU64,
    /// Pages initialized by the walwriter / by backends (benchmarks).
    pub preinit_pages: AtomicU64,
    pub backend_init_pages: AtomicU64,
    /// Times a backend waited for a dirty page to be written.
    pub buffer_full_waits: AtomicU64,
}

/// Whether the walwriter keeps up with the inserters
/// (`wal_insert_lock_spread = adaptive`). Its own cache line: backends read
/// it on every insertion-lock acquisition, the walwriter writes it only
/// when it changes.
#[repr(C, align(128))]
pub struct WriterPace {
    /// 1 while backends initialize most buffer pages themselves (the
    /// walwriter falls behind): backends then spread over one insertion
    /// lock fewer than CPUs. 0 (the all-zero start): every lock in use.
    pub behind: AtomicU32,
}

/// Facts about the WAL, set at creation. Only the timeline changes
/// afterwards: a standby's promotion moves it to the new timeline (see
/// [`WalFacts::set_timeline`]).
#[repr(C)]
pub struct WalFacts {
    pub system_identifier: u64,
    pub seg_size: u64,
    pub timeline: AtomicU32,
    pub n_buffers: u32,
}

impl WalFacts {
    /// The timeline new WAL is written on. Acquire pairs with the Release
    /// store in [`WalFacts::set_timeline`].
    pub fn timeline(&self) -> u32 {
        self.timeline.load(Ordering::Acquire)
    }

    /// A promotion's new timeline, stored by the startup process before
    /// it ends recovery (`walrcv::WalRcvShared::recovery`, whose Release
    /// store follows this one), and by the postmaster after a startup
    /// that ended archive recovery (no WAL writer forked yet).
    pub fn set_timeline(&self, tli: u32) {
        // Release: pairs with the Acquire load in `timeline`.
        self.timeline.store(tli, Ordering::Release);
    }
}

/// Checkpoint requests and results.
#[repr(C, align(128))]
pub struct CheckpointerShared {
    pub latch: Latch,
    /// Checkpoints requested (a backend's CHECKPOINT bumps it and waits
    /// until `done` reaches the value it saw).
    pub requested: AtomicU64,
    /// Checkpoints begun and completed (one checkpointer: begun - done is 0
    /// or 1).
    pub started: AtomicU64,
    pub done: AtomicU64,
    /// Redo point of the last checkpoint (an LSN).
    pub last_redo: AtomicU64,
}

/// `pg_stat_wal`'s reset point: the per-process WAL counters' sums at the
/// last `pg_stat_reset_shared('wal')` (see `stats::wal_stats`).
#[repr(C, align(128))]
pub struct WalStatsShared {
    pub lock: SpinLock,
    /// wal_records, wal_fpi, wal_bytes, wal_buffers_full, wal_write,
    /// wal_sync, wal_write_time, wal_sync_time (stats::WalStats order).
    pub baseline: [AtomicU64; 8],
    /// Unix microseconds of the last reset; set by the first process that
    /// enters a slot of a new segment.
    pub stats_reset_us: AtomicU64,
}

/// The shared WAL control block.
#[repr(C)]
pub struct XLogCtl {
    pub insert: InsertPosition,
    pub write: WriteState,
    pub bufmap: BufMapState,
    pub writer_pace: WriterPace,
    pub facts: WalFacts,
    /// The walwriter's latch.
    pub walwriter_latch: Latch,
    pub checkpointer: CheckpointerShared,
    pub wal_stats: WalStatsShared,
    /// Procs waiting for the walwriter's flush (all-zero: none).
    pub flush_waiters: crate::proc::FlushWaiters,
    /// The futex words library WAL readers sleep on (`readwake`).
    pub readers: crate::readwake::ReaderWakes,
}
