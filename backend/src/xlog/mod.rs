//! WAL insertion, buffer management, write and flush (PostgreSQL's xlog.c).
//!
//! [`Xlog`] is one process's handle on the shared WAL (`Shmem::xlog`). Its
//! methods are spread over this module's files by job; each file opens with
//! the part of the algorithm it holds:
//!
//! | file | job |
//! | --- | --- |
//! | `insert` | the insert protocol: reserve `[start, end)`, copy the record into the buffer pages |
//! | `insert_locks` | which WAL insertion lock a backend takes (`wal_insertion`, `wal_insert_lock_spread`, `wal_insert_lock_wait`), `insertingAt`, waiting for insertions to finish |
//! | `pace` | the walwriter's judgement of whether it keeps up with the inserters ([`PaceWatch`]) |
//! | `buffers` | WAL buffer pages: the page holding an LSN, (re)initializing pages |
//! | `write` | writing finished WAL out (XLogWrite), publishing the write and flush results |
//! | `segment` | segment files: open, create ahead, sync; the archiver and checkpoint triggers of a completed segment |
//! | `group_commit` | `flush`, and who flushes for a commit (`group_commit`: the one place it is chosen) |
//! | `via_walwriter` | waiting for the walwriter's write or flush (no-I/O mode, `group_commit = flusher`); the walwriter's own flush |
//!
//! Positions. WAL is reserved in usable-byte space (`CurrBytePos`: byte
//! positions that skip page headers) and converted to LSNs through
//! `walformat::Geometry`. Each position below only grows, and they stay in
//! this order: `flush_result <= write_result <= ` (the position below which
//! every insertion has finished) `<=` the reserved position.
//!
//! Locks and shared state: what each protects and when it may be held.
//!
//! - The insert-position spinlock (`insert.lock`, `wal_reservation =
//!   spinlock`): `curr_byte_pos` and `prev_byte_pos`. Held for one
//!   reservation only, always inside an insertion lock; nothing is taken
//!   under it. With `wal_reservation = atomic` it is not used (`insert`).
//! - The WAL insertion locks (`Shmem::insert_lock`, variable
//!   `inserting_at`): held from before the reservation until the record is
//!   copied, so an insertion's bytes are finished once its lock is free or
//!   its advertised `inserting_at` has passed them. A holder may then take
//!   WALBufMappingLock, WALWriteLock or wait for the walwriter (a buffer
//!   page still holding unwritten WAL), but only after advertising in
//!   `inserting_at` that it writes nothing below its new page: whoever
//!   waits for insertions to finish then does not wait for it.
//! - WALBufMappingLock: `bufmap.initialized_up_to` and the
//!   re-initialization of a buffer page. Released before older WAL is
//!   written out to free a page: never held while waiting for WALWriteLock
//!   or the walwriter.
//! - WALWriteLock (variable: `write.write_result`): one writer at a time;
//!   the writes and syncs of segment files and the advance of
//!   `write_result` and `flush_result`. Compute how far insertions have
//!   finished (`wait_insertions_to_finish`) before taking it; under it only
//!   `commit_delay` waits for insertions again, which the advertising rule
//!   above makes safe. Every release goes through `release_wal_write_lock`
//!   (it wakes the walsenders and runs the hybrid notifier).
//! - `xlblocks[i]` (no lock): the end LSN of the page buffer `i` holds, 0
//!   while it is re-initialized; Release in `init_page`, Acquire in
//!   `get_buffer` and `buffer_to_write`.
//! - `flush_waiters` (`shmem::proc::FlushWaiters`, lock-free): which procs
//!   wait for which flush, and the hand-off baton; a waiter's publish and a
//!   notifier's look pair through SeqCst fences (`group_commit`).
//! - `writer_pace.behind` (Relaxed): a hint; either value is correct.
//!
//! Crash invariants: WAL reaches a file only after every insertion below the
//! written position finished; `flush_result` never passes what was
//! fdatasynced (or written with an `open_*` sync method, or, with
//! `fsync = off`, written); a failed fdatasync (with `open_*`, write) is a
//! PANIC (the page cache may have dropped the data: retrying could
//! acknowledge WAL that is not on disk).

use crate::context::ProcContext;
use group_commit::group_commit_for;
use insert_locks::{insert_locks_leaving_a_cpu, ContentionScore};
use shmem::stats::FlatCounters;
use shmem::sync::Ordering;
use shmem::variants::{GroupCommit, InsertLockSpread, InsertLockWait, Insertion, Reservation};
use shmem::{Proc, Shmem};
use std::fs::File;
use std::path::PathBuf;
use walformat::{Geometry, Lsn, PageMap, XLOG_BLCKSZ};
use write::AlignedPage;

mod buffers;
mod group_commit;
mod insert;
mod insert_locks;
mod pace;
mod segment;
mod via_walwriter;
mod write;

pub use pace::PaceWatch;
pub use segment::checkpoint_wal_trigger;

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

/// Where a record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// LSN of the record's first byte.
    pub start: Lsn,
    /// LSN just past the record (what a flush must cover).
    pub end: Lsn,
}

/// One process's handle on the shared WAL; borrows the process's context.
pub struct Xlog<'a> {
    ctx: &'a ProcContext<'a>,
    /// `ctx.shm` and `ctx.me`, copied for the insert path.
    shm: &'a Shmem,
    me: &'a Proc,
    /// Our mechanism and pg_stat_wal counters (`shmem::stats`).
    stats: &'a FlatCounters,
    /// track_wal_io_timing: time writes and syncs.
    io_timing: bool,
    geo: Geometry,
    /// The page of our last converted byte position (start, end
    /// and `xl_prev` of a record are nearly always on it, and converting
    /// there needs no division).
    last_page: PageMap,
    tli: u32,
    sysid: u64,
    n_buffers: u64,
    /// The insertion lock we try first (below `locks_in_use`).
    lock_to_try: usize,
    /// How many insertion locks we spread over (see `insert_locks`).
    locks_in_use: usize,
    /// `wal_insert_lock_spread = adaptive`: how many while the walwriter
    /// is behind (`WriterPace::behind`).
    locks_when_writer_behind: Option<usize>,
    /// The insertion lock we hold, if any.
    holding: Option<usize>,
    /// What we do when our insertion lock is busy (`wal_insert_lock_wait`).
    lock_wait: InsertLockWait,
    /// `adaptive`: our recent waits for an insertion lock.
    contention: ContentionScore,
    fsync: bool,
    insertion: Insertion,
    reservation: Reservation,
    pg_wal: PathBuf,
    /// The segment file this process last wrote: (segment number, file).
    open_seg: Option<(u64, File)>,
    /// No-I/O mode (see `via_walwriter`).
    no_io: bool,
    /// No-I/O mode: the generation ended during a wait, so an insertion or
    /// flush since the last `take_stale` did not really happen.
    stale: bool,
    /// No-I/O mode: where an insertion finishes once the generation ended.
    scratch: Vec<u8>,
    /// `write_run_upto`: the copy of a partial last page, zeros after its
    /// finished WAL (aligned for O_DIRECT).
    zero_tail_page: Option<Box<AlignedPage>>,
    /// `xlog_write` advanced the flush position: wake the walsenders once
    /// WALWriteLock is released (`release_wal_write_lock`).
    walsenders_to_wake: bool,
    /// Who flushes for our commits (`group_commit`; always `Leader` for
    /// processes other than backends, see `group_commit_for`).
    group_commit: GroupCommit,
}

/// End of reserved WAL (an LSN), for callers without an [`Xlog`] handle
/// (readers, slots): whoever sees a reservation also sees the insertion
/// lock its reserver took and the XID it published before it.
pub fn reserved_end(shm: &Shmem, geo: &Geometry) -> Lsn {
    geo.bytepos_to_end_recptr(reserved_bytepos(shm))
}

/// Where the next record will start (a record-start LSN, after any page
/// header), for callers without an [`Xlog`] handle; see [`reserved_end`].
pub fn next_record_start(shm: &Shmem, geo: &Geometry) -> Lsn {
    geo.bytepos_to_recptr(reserved_bytepos(shm))
}

/// Reads the current insert position (end of reserved WAL) in usable bytes.
fn reserved_bytepos(shm: &Shmem) -> u64 {
    // Acquire pairs with the Release store of a spinlock reservation
    // (`reserve`, `reserve_switch`) and the AcqRel fetch-add / CAS of an
    // atomic one: whoever sees a reservation also sees the insertion lock
    // its reserver took before it, which `wait_insertions_to_finish` relies
    // on. A slightly stale value only makes callers wait or write less.
    shm.xlog().insert.curr_byte_pos.load(Ordering::Acquire)
}

impl<'a> Xlog<'a> {
    pub fn new(ctx: &'a ProcContext<'a>) -> Xlog<'a> {
        let shm = ctx.shm;
        let s = &ctx.settings;
        let facts = &shm.xlog().facts;
        let geo = Geometry::new(facts.seg_size).expect("segment size validated at start-up");
        let cpus = crate::client_poll::cpus_allowed() as usize;
        let n_locks = shm.n_insert_locks();
        let locks_in_use = n_locks.max(1);
        let locks_when_writer_behind = (s.wal_insert_lock_spread == InsertLockSpread::Adaptive)
            .then(|| insert_locks_leaving_a_cpu(n_locks, cpus));
        Xlog {
            ctx,
            shm,
            me: ctx.me,
            stats: &shm.proc_stats(ctx.procno).counters.flat,
            io_timing: s.track_wal_io_timing,
            geo,
            last_page: PageMap::default(),
            tli: facts.timeline(),
            sysid: facts.system_identifier,
            n_buffers: shm.layout().n_buffers as u64,
            lock_to_try: ctx.procno as usize % locks_in_use,
            locks_in_use,
            locks_when_writer_behind,
            holding: None,
            lock_wait: s.wal_insert_lock_wait,
            contention: ContentionScore::default(),
            fsync: s.fsync,
            insertion: s.wal_insertion,
            reservation: s.wal_reservation,
            pg_wal: ctx.pg_wal(),
            open_seg: None,
            no_io: matches!(ctx.io, crate::context::IoMode::ViaWalwriter(_)),
            stale: false,
            scratch: Vec::new(),
            zero_tail_page: None,
            walsenders_to_wake: false,
            group_commit: group_commit_for(ctx),
        }
    }

    /// No-I/O mode: whether an operation since the last call did not
    /// complete because the server generation ended; clears the mark.
    pub fn take_stale(&mut self) -> bool {
        std::mem::take(&mut self.stale)
    }

    /// The process context this handle borrows.
    pub fn context(&self) -> &'a ProcContext<'a> {
        self.ctx
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// End of reserved WAL (an LSN).
    pub fn insert_lsn(&self) -> Lsn {
        reserved_end(self.shm, &self.geo)
    }

    /// Where the next record will start (a record-start LSN, after any
    /// page header).
    pub fn insert_rec_ptr(&self) -> Lsn {
        next_record_start(self.shm, &self.geo)
    }

    pub fn write_lsn(&self) -> Lsn {
        // Acquire pairs with the Release fetch_max in `advance_results` (and the
        // variable update in `publish_written`): the writer's reads of the
        // buffer pages below happen before a caller reuses them.
        self.shm.xlog().write.write_result.load(Ordering::Acquire)
    }

    pub fn flush_lsn(&self) -> Lsn {
        // Acquire pairs with the Release fetch_max of `flush_result` in
        // `advance_results`.
        self.shm.xlog().write.flush_result.load(Ordering::Acquire)
    }
}
