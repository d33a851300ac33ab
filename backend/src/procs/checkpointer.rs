//! The checkpointer process: online checkpoints on a timer, after enough
//! WAL, or on request; the shutdown checkpoint; removal and recycling of
//! WAL segments no longer needed (PostgreSQL's checkpointer.c +
//! CreateCheckPoint, without data pages to write).
//!
//! A checkpoint, and the crash invariant each step keeps:
//! 1. redo := the current insert position (a record start). Every record
//!    inserted from here on is at or after redo;
//! 2. read nextXid *after* redo: any XID assigned later has its records at
//!    or after redo, so recovery, which scans from redo, sees it;
//! 3. insert the checkpoint record (online, or shutdown: then no backend
//!    runs and redo is the record's own position) and flush it;
//! 4. write the control file (atomically: temp file, fsync, rename) naming
//!    the checkpoint and redo. A crash before this leaves the previous
//!    checkpoint in force, whose WAL is all still there;
//! 5. only then remove or recycle segments wholly before redo (minus what
//!    `wal_keep_size` asks to keep).
//!
//! A failed control-file write is a PANIC, like a failed WAL flush.
//!
//! Kinds ([`CheckpointKind`]): online (backends insert meanwhile), shutdown
//! (the last record of a clean stop) and end-of-recovery (PostgreSQL's
//! CHECKPOINT_END_OF_RECOVERY: the startup process, alone after a crash
//! recovery, writes it before any other process starts). The last two
//! write a CHECKPOINT_SHUTDOWN record with redo at the record itself:
//! nothing inserts while they run, and no transaction begun before such a
//! record can still be open after it (a WAL reader may forget every
//! transaction it saw begin but not end). End-of-recovery leaves the
//! control file "in production", so that a crash after it is again a
//! crash recovery, from this checkpoint on.

use crate::context::ProcContext;
use crate::control::{unix_now, ControlFile, DbState};
use crate::process::{log, shutdown_requested};
use crate::walfile::{self, Op};
use crate::xlog::Xlog;
use shmem::lwlock::LWLockMode;
use shmem::segment::{AuxProc, NamedLock};
use shmem::sync::Ordering;
use shmem::waitevent;
use shmem::Shmem;
use std::path::Path;
use std::time::{Duration, Instant};
use walformat::{format_lsn, CheckPoint, Geometry, Lsn};

/// How often the checkpointer looks at the WAL volume.
const POLL: Duration = Duration::from_millis(200);

/// What a checkpoint is for (see the module header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointKind {
    Online,
    Shutdown,
    EndOfRecovery,
}

impl CheckpointKind {
    /// Whether its record is a CHECKPOINT_SHUTDOWN (nothing inserts meanwhile).
    fn is_shutdown_record(self) -> bool {
        self != CheckpointKind::Online
    }

    /// The state the control file is left in.
    fn db_state(self) -> DbState {
        match self {
            CheckpointKind::Shutdown => DbState::ShutDown,
            CheckpointKind::Online | CheckpointKind::EndOfRecovery => DbState::InProduction,
        }
    }

    /// How the completion log line names it.
    fn label(self) -> &'static str {
        match self {
            CheckpointKind::Online => "",
            CheckpointKind::Shutdown => " (shutdown)",
            CheckpointKind::EndOfRecovery => " (end-of-recovery)",
        }
    }
}

/// The checkpointer's state; borrows the process's context.
pub struct Checkpointer<'a> {
    ctx: &'a ProcContext<'a>,
    shm: &'a Shmem,
    xlog: Xlog<'a>,
    geo: Geometry,
}

impl<'a> Checkpointer<'a> {
    pub fn new(ctx: &'a ProcContext<'a>) -> Self {
        let xlog = Xlog::new(ctx);
        let geo = xlog.geometry();
        Checkpointer {
            ctx,
            shm: ctx.shm,
            xlog,
            geo,
        }
    }

    /// Creates a checkpoint of `kind`; returns the checkpoint record's LSN.
    pub fn checkpoint(&mut self, kind: CheckpointKind) -> Lsn {
        let started = Instant::now();
        self.shm
            .xlog()
            .checkpointer
            .started
            // Relaxed: a count that publishes nothing; request_checkpoint
            // only compares it with `done` (one atomic's own order suffices).
            .fetch_add(1, Ordering::Relaxed);
        let redo = self.xlog.insert_rec_ptr();
        // Relaxed: next_full_xid changes only under XidGenLock (never by a
        // Release store), so an Acquire here would pair with nothing; the
        // read comes after redo because insert_rec_ptr's load is Acquire.
        let next_xid = self.shm.xid_state().next_full_xid.load(Ordering::Relaxed);
        let facts = &self.shm.xlog().facts;
        let cp = checkpoint_contents(redo, facts.timeline(), next_xid);
        let mut rec = walformat::checkpoint_record(&cp, kind.is_shutdown_record());
        let at = self.xlog.insert(&mut rec);
        self.xlog.flush(at.end);
        // At shutdown or the end of recovery nothing else inserts, so the
        // record sits at redo.
        let redo = if kind.is_shutdown_record() {
            at.start
        } else {
            redo
        };
        self.update_control_file(at.start, redo, next_xid, kind.db_state());
        let ck = &self.shm.xlog().checkpointer;
        // Relaxed: a threshold only; its readers (our own loop in `run`,
        // xlog's checkpoint trigger) use the value, nothing published with it.
        ck.last_redo.store(redo, Ordering::Relaxed);
        let (removed, recycled) = self.remove_old_segments(redo);
        log(
            "LOG",
            &format!(
                "checkpoint complete{}: lsn {}, redo {}; {removed} segment(s) removed, {recycled} recycled; {:.3} s",
                kind.label(),
                format_lsn(at.start),
                format_lsn(redo),
                started.elapsed().as_secs_f64()
            ),
        );
        // Release pairs with the Acquire load of `done` in
        // request_checkpoint: the checkpoint is complete for the requester.
        ck.done.fetch_add(1, Ordering::Release);
        at.start
    }

    fn update_control_file(&mut self, checkpoint: Lsn, redo: Lsn, next_xid: u64, state: DbState) {
        let lock = self.shm.named_lock(NamedLock::ControlFile);
        lock.acquire(&self.ctx.env, LWLockMode::Exclusive);
        let mut c = match ControlFile::read(&self.ctx.datadir) {
            Ok(c) => c,
            Err(e) => panic!("could not read control file: {e}"),
        };
        c.state = state;
        c.checkpoint = checkpoint;
        c.redo = redo;
        c.next_xid = next_xid;
        c.time = unix_now();
        if let Err(e) = c.write(&self.ctx.datadir, self.ctx.settings.fsync) {
            panic!("could not write control file: {e}");
        }
        lock.release(&self.ctx.env);
    }

    /// Removes or recycles segments wholly before `redo`, keeping
    /// `wal_keep_size` MB before it. Returns (removed, recycled).
    fn remove_old_segments(&self, redo: Lsn) -> (u64, u64) {
        let s = &self.ctx.settings;
        let keep_segs = (s.wal_keep_size_mb as u64 * (1 << 20)).div_ceil(self.geo.seg_size);
        let redo_seg = self.geo.seg_no(redo);
        let cutoff = redo_seg.saturating_sub(keep_segs);
        let cutoff = crate::slots::removal_cutoff(
            self.shm,
            &self.ctx.datadir,
            &self.geo,
            redo,
            cutoff,
            s.fsync,
        );
        let tli = self.shm.xlog().facts.timeline();
        let pg_wal = self.ctx.pg_wal();
        let Ok(names) = walfile::list_dir(Op::WalDir, &pg_wal) else {
            return (0, 0);
        };
        let mut segs: Vec<u64> = names
            .iter()
            .filter_map(|name| self.geo.parse_file_name(&name.to_string_lossy()))
            .filter(|&(t, _)| t == tli)
            .map(|(_, n)| n)
            .collect();
        segs.sort_unstable();
        let insert_seg = self.geo.seg_no(self.xlog.insert_lsn());
        let mut future = segs.iter().filter(|&&n| n > insert_seg).count() as u64;
        let mut last = segs.last().copied().unwrap_or(insert_seg).max(insert_seg);
        // Recycle into as many future segments as the WAL written until the
        // next checkpoint fills (half of max_wal_size, at most 64 segments;
        // PostgreSQL's XLOGfileslop): those segments then exist when the
        // writer reaches them, so writing them allocates no file pages (on
        // tmpfs: no page allocation and zeroing in the writer, no freeing
        // here). Keeping only a quarter of max_wal_size left half of them to
        // be created anew.
        let keep_future = crate::xlog::checkpoint_wal_trigger(s) / self.geo.seg_size + 1;
        let keep_future = keep_future.clamp(1, 64);
        let cutoff =
            crate::archive::keep_unarchived(s.archive_mode, &pg_wal, &self.geo, tli, &segs, cutoff);
        let (mut removed, mut recycled) = (0, 0);
        for n in segs.into_iter().filter(|&n| n < cutoff) {
            let old = pg_wal.join(self.geo.file_name(tli, n));
            if future < keep_future {
                let new = pg_wal.join(self.geo.file_name(tli, last + 1));
                if walfile::recycle_segment(&old, &new, s.fsync).unwrap_or(false) {
                    last += 1;
                    future += 1;
                    recycled += 1;
                    continue;
                }
            }
            if walfile::remove_file(Op::WalRemove, &old).is_ok() {
                removed += 1;
            }
        }
        removed += crate::timeline::remove_older_timelines(
            &pg_wal,
            &self.geo,
            tli,
            cutoff,
            s.archive_mode,
        );
        (removed, recycled)
    }
}

/// The CheckPoint record's contents walshm writes: the redo point, timeline
/// and next XID that matter to recovery, and PostgreSQL's initial values for
/// the fields that only matter to a database with tables.
pub fn checkpoint_contents(redo: Lsn, tli: u32, next_xid: u64) -> CheckPoint {
    CheckPoint {
        redo,
        tli,
        prev_tli: tli,
        full_page_writes: true,
        next_xid,
        next_oid: 10000,
        next_multi: 1,
        next_multi_offset: 0,
        oldest_xid: crate::procarray::FIRST_NORMAL_XID,
        oldest_xid_db: 1,
        oldest_multi: 1,
        oldest_multi_db: 1,
        time: unix_now(),
        oldest_commit_ts_xid: 0,
        newest_commit_ts_xid: 0,
        oldest_active_xid: 0,
    }
}

/// The checkpointer process body: runs until SIGTERM, then writes the
/// shutdown checkpoint and exits 0.
pub fn run(shm: &Shmem, datadir: &Path) -> i32 {
    let ctx = ProcContext::aux(shm, AuxProc::Checkpointer, datadir);
    let mut c = Checkpointer::new(&ctx);
    let s = ctx.settings;
    let timeout = Duration::from_secs(s.checkpoint_timeout_s as u64);
    let wal_trigger = crate::xlog::checkpoint_wal_trigger(&s);
    let ck = &shm.xlog().checkpointer;
    let mut last = Instant::now();
    // Requests already served (a checkpoint begun after a request serves it).
    // Both loads of `requested` are Acquire, pairing with the Release
    // fetch-add in request_checkpoint: the requester's WAL is visible to the
    // redo read of the checkpoint that serves it.
    let mut served = ck.requested.load(Ordering::Acquire);
    while !shutdown_requested() {
        ck.latch.reset();
        let pending = ck.requested.load(Ordering::Acquire);
        let requested = pending > served;
        // Relaxed: see the store in `checkpoint` (this process wrote it).
        let last_redo = ck.last_redo.load(Ordering::Relaxed);
        let wal_due = c.xlog.insert_lsn().saturating_sub(last_redo) >= wal_trigger;
        if requested || wal_due || last.elapsed() >= timeout {
            served = pending;
            c.checkpoint(CheckpointKind::Online);
            last = Instant::now();
            continue;
        }
        waitevent::during(waitevent::CHECKPOINTER_MAIN, || ck.latch.wait(POLL));
    }
    c.checkpoint(CheckpointKind::Shutdown);
    0
}

/// A backend's CHECKPOINT: request one and wait until a checkpoint that
/// began after the request has completed (one already running when we ask
/// may have missed our WAL).
pub fn request_checkpoint(shm: &Shmem) {
    let ck = &shm.xlog().checkpointer;
    // Relaxed: see the fetch-add of `started` in `checkpoint`.
    let begun = ck.started.load(Ordering::Relaxed);
    // Release pairs with the Acquire loads of `requested` in `run`.
    ck.requested.fetch_add(1, Ordering::Release);
    ck.latch.set();
    let prev = waitevent::report(waitevent::CHECKPOINT_DONE);
    // Acquire pairs with the Release fetch-add of `done` in `checkpoint`.
    while ck.done.load(Ordering::Acquire) < begun + 1 {
        if shutdown_requested() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    waitevent::restore(prev);
}
