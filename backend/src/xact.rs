//! Transactions: XID, records, commit record, durable commit, XID clear
//! (PostgreSQL's xact.c RecordTransactionCommit, reduced).
//!
//! Commit order, and the crash invariant each step keeps:
//! 1. insert the commit record (it carries the XID in `xl_xid`);
//! 2. synchronous commit of a transaction that wrote WAL before its commit
//!    record: flush WAL up to the end of the commit record (group flush: one
//!    fdatasync covers every commit below the flushed position), then wait
//!    for the synchronous standbys (`syncrep`; with `sync_rep_one_sleep`
//!    the flush is only requested and the one sleep is the standby wait,
//!    whose report implies the local flush). Only after this may the
//!    commit be acknowledged: it is on disk. A transaction that
//!    wrote nothing before its commit record (`txid_current()`), or any
//!    commit with `synchronous_commit = off`, does not wait: it advances
//!    the asynchronous-commit LSN and the walwriter flushes it within
//!    `wal_writer_delay`;
//! 3. clear the XID from the ProcArray (group or exclusive clear);
//! 4. then, and only then, the caller may report the commit (`ack`).
//!
//! A process that dies anywhere in this order leaves its proc slot's
//! transaction phase (`shmem::crit`) saying whether the COMMIT or ABORT
//! record went in, so a helper ends the transaction as it would have
//! (`crate::abandoned`): before the record, it is aborted; after, it
//! committed and only its XID is cleared.
//!
//! Deferred commit replies (`commit_reply = flusher`, walshm's own; see
//! `crate::reply`): a connection backend's durable commit that waits for
//! no standby stops after step 1: it records the commit in its proc's
//! reply slot (PREPARED) and returns; steps 2-3 are then the walwriter's
//! (flush, XID clear under ProcArrayLock, then the reply), or ours if the
//! reply is never handed off: `begin` of the next transaction and
//! `shutdown` finish a PREPARED commit themselves (`finish_prepared`).

use crate::context::ProcContext;
use crate::procarray::{ProcArray, Snapshot};
use crate::syncrep;
use crate::xlog::{Inserted, Xlog};
use shmem::crit::{XACT_ABORTING, XACT_COMMITTING, XACT_NONE};
use shmem::proc::{Proc, ProcCounters};
use walformat::{Lsn, RecordBuf};

/// One backend's transaction machinery.
/// Borrows the process's context, as its `Xlog` and `ProcArray` do.
pub struct Xact<'a> {
    pub xlog: Xlog<'a>,
    pub procarray: ProcArray<'a>,
    me: &'a Proc,
    synchronous: bool,
    /// `sync_rep_one_sleep`: see `make_durable`.
    one_sleep: bool,
    snapshot: Snapshot,
    /// The last XID we committed, checked against the next snapshot.
    last_committed: u32,
    xid: u32,
    full_xid: u64,
    wrote_wal: bool,
    commit_buf: RecordBuf,
    /// `commit_reply = flusher` on a connection: durable commits may be
    /// left PREPARED for the walwriter (see the module header).
    defer_replies: bool,
}

impl<'a> Xact<'a> {
    /// Joins the ProcArray.
    pub fn new(ctx: &'a ProcContext<'a>) -> Xact<'a> {
        let procarray = ProcArray::new(ctx);
        procarray.join();
        Xact {
            xlog: Xlog::new(ctx),
            procarray,
            me: ctx.me,
            synchronous: ctx.settings.synchronous_commit.flushes_locally(),
            one_sleep: ctx.settings.sync_rep_one_sleep,
            snapshot: Snapshot::default(),
            last_committed: 0,
            xid: 0,
            full_xid: 0,
            wrote_wal: false,
            commit_buf: RecordBuf::default(),
            defer_replies: false,
        }
    }

    /// Starts a transaction: takes its snapshot, and checks that our
    /// previous commit is not shown as running.
    pub fn begin(&mut self) {
        self.finish_prepared();
        self.procarray.snapshot(&mut self.snapshot);
        if self.last_committed != 0 && self.snapshot.running.contains(&self.last_committed) {
            ProcCounters::bump(&self.me.counters.snapshot_violations, 1);
        }
        self.wrote_wal = false;
    }

    /// Our XID, assigning one on first use (GetCurrentTransactionId).
    pub fn xid(&mut self) -> u32 {
        if self.xid == 0 {
            self.full_xid = self.procarray.assign_xid();
            self.xid = self.full_xid as u32;
        }
        self.xid
    }

    /// Our XID in its 64-bit form (txid_current), assigning one if needed.
    pub fn full_xid(&mut self) -> u64 {
        self.xid();
        self.full_xid
    }

    /// Lets durable commits leave their flush and XID clear to the
    /// walwriter, which sends their replies (`crate::reply`).
    pub fn defer_replies(&mut self, on: bool) {
        self.defer_replies = on;
    }

    /// A commit left PREPARED but never handed off is finished here: made
    /// durable, then its XID cleared (steps 2-3).
    pub fn finish_prepared(&mut self) {
        let r = &self.me.reply;
        if r.state() != shmem::proc::REPLY_PREPARED {
            return;
        }
        let end = r.lsn.load(shmem::sync::Ordering::Relaxed);
        let xid = r.xid.load(shmem::sync::Ordering::Relaxed);
        self.make_durable(end);
        self.procarray.end_transaction(xid);
        r.unprepare();
    }

    pub fn set_synchronous(&mut self, on: bool) {
        self.synchronous = on;
    }

    pub fn synchronous(&self) -> bool {
        self.synchronous
    }

    /// Aborts: an ABORT record if an XID was assigned (never flushed: an
    /// abort needs no durability), then the XID is cleared.
    pub fn abort(&mut self) -> Option<Inserted> {
        let (xid, at) = self.insert_end_record(walformat::abort_record_into, XACT_ABORTING)?;
        self.procarray.end_transaction(xid);
        self.me.crit.set_phase(XACT_NONE);
        self.xid = 0;
        Some(at)
    }

    /// Inserts a record of this transaction.
    pub fn insert(&mut self, rec: &mut RecordBuf) -> Inserted {
        self.wrote_wal = true;
        self.xlog.insert(rec)
    }

    /// [`Xact::insert`] for a logical message (`Xlog::insert_message`).
    pub fn insert_message(
        &mut self,
        msg: &walformat::LogicalMessage,
        spill: &mut RecordBuf,
    ) -> Inserted {
        self.wrote_wal = true;
        self.xlog.insert_message(msg, spill)
    }

    /// Whether `commit` will wait for a flush (or for standbys): a
    /// synchronous commit of a transaction that wrote WAL.
    pub fn commit_waits(&self) -> bool {
        self.xid != 0 && self.synchronous && self.wrote_wal
    }

    /// Commits; returns the commit record's position (None if the
    /// transaction had no XID and so wrote no commit record). When this
    /// returns with a synchronous commit, the commit is durable.
    pub fn commit(&mut self) -> Option<Inserted> {
        let (xid, at) = self.insert_end_record(walformat::commit_record_into, XACT_COMMITTING)?;
        let durable = self.commit_waits();
        if durable && self.may_defer() {
            // Steps 2-3 are the walwriter's, or `finish_prepared`'s.
            self.me.reply.prepare(at.end, xid);
            ProcCounters::bump(&self.me.counters.sync_commits, 1);
        } else {
            if durable {
                self.make_durable(at.end);
                ProcCounters::bump(&self.me.counters.sync_commits, 1);
            }
            // Otherwise the walwriter flushes it within wal_writer_delay.
            self.procarray.end_transaction(xid);
        }
        // A deferred commit's XID is still set: its reply slot (PREPARED
        // or handed off) tells a helper it committed.
        self.me.crit.set_phase(XACT_NONE);
        self.last_committed = xid;
        self.xid = 0;
        ProcCounters::bump(&self.me.counters.transactions, 1);
        Some(at)
    }

    /// Inserts the transaction's end record (COMMIT or ABORT, built by
    /// `build` at the current time) after announcing `phase` (see
    /// `shmem::crit`); returns the XID and where the record went, or None
    /// if no XID was assigned (no record then).
    #[inline]
    fn insert_end_record(
        &mut self,
        build: fn(&mut RecordBuf, u32, i64),
        phase: u32,
    ) -> Option<(u32, Inserted)> {
        if self.xid == 0 {
            return None;
        }
        let xid = self.xid;
        build(&mut self.commit_buf, xid, walformat::pg_now_us());
        self.me.crit.set_phase(phase);
        Some((xid, self.xlog.insert(&mut self.commit_buf)))
    }

    /// Whether this durable commit may leave its flush to the walwriter:
    /// deferral is on, no synchronous standby must confirm it, and another
    /// process is in a transaction (a hint, read without ProcArrayLock): a
    /// lone committer flushes itself, since waking the walwriter for it
    /// costs more than its own commit wait (same-run A/B at 1 client:
    /// 0.55x tps deferred).
    fn may_defer(&self) -> bool {
        let ctx = self.xlog.context();
        self.defer_replies
            && crate::procarray::others_in_transaction(ctx.shm, ctx.procno, 1)
            && !syncrep::waits_for_standbys(ctx)
    }

    /// Step 2 of the commit order: the commit record, ending at `end`, is
    /// flushed locally and, as `synchronous_commit` asks, reported by the
    /// synchronous standbys. With `sync_rep_one_sleep` a commit that waits
    /// for standbys requests its flush and sleeps only in the sync-rep
    /// queue (see `syncrep`): the standbys' report implies the local
    /// flush, which is checked afterwards all the same (and made, if a
    /// cancel ended the wait first).
    fn make_durable(&mut self, end: Lsn) {
        let ctx = self.xlog.context();
        if self.one_sleep && syncrep::waits_for_standbys(ctx) && self.xlog.request_flush(end) {
            syncrep::wait_for(ctx, end);
            if self.xlog.flush_lsn() < end {
                self.xlog.flush(end);
            }
            return;
        }
        self.xlog.flush(end);
        syncrep::wait_for(ctx, end);
    }

    /// Leaves the ProcArray (backend exit).
    pub fn shutdown(&mut self) {
        self.finish_prepared();
        self.procarray.leave();
    }
}
