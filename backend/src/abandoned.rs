//! A process that dies is not the server's crash: finishing what a dead
//! library worker or connection backend left, so that the others go on
//! (walshm's own; PostgreSQL restarts the whole server after any backend's
//! abnormal death, because it cannot tell what shared state it left).
//!
//! walshm can tell: every process publishes in its proc slot what it holds
//! (`shmem::crit`). The postmaster, which never takes a lock, reads the
//! dead process's slot ([`assess`]) and decides:
//!
//! | the dead process was                                           | what follows |
//! | --- | --- |
//! | inside a spinlock, an LWLock operation or hold, the group XID clear, a lock-free reservation's hand-off or a WAL switch | crash restart |
//! | holding a commit reply handed to the walwriter (`commit_reply = flusher`) | crash restart |
//! | holding a WAL insertion lock after advertising progress in its copy (`insertingAt`; part of its record may be written out) | crash restart |
//! | holding a WAL insertion lock, before or during its copy | the range it reserved is filled with a record of exactly its size, the lock released |
//! | holding WALWriteLock, writing or syncing WAL files | the lock is released; the next writer writes and syncs again from the shared write and flush results, which only grow once a write or sync is done |
//! | in a transaction whose COMMIT record went in | its XID is cleared (it committed) |
//! | in a transaction without its COMMIT record (none yet, or cut off as above) | an ABORT record is written for it, its XID cleared |
//! | outside all of this | the rest of the clean-up only |
//!
//! The clean-up ([`clean_up`]) runs in the cleaner process (its own
//! auxiliary proc slot, forked by the postmaster, one dead process after
//! another), in this order: the insertion, the transaction, then what the
//! process's own exit would have done — leave the ProcArray, pass on its
//! admission tokens and leave that queue, leave the synchronous
//! replication queue, release its replication slots, drop its row from
//! pg_stat_activity — and a connection backend's proc slot goes back to
//! the free list (a worker slot is the postmaster's, freed once the
//! cleaner exited 0). A cleaner that fails or dies is a crash restart.
//!
//! Why the table is sound:
//! - every section is entered before its first shared write and left
//!   after its last (`shmem::crit`), so a process outside all of them
//!   changed nothing half-way, and no other process waits on it except
//!   through what the clean-up releases (the insertion lock, the queues);
//! - a dead insertion-lock holder that advertised no progress has no byte
//!   of its range written out: every writer waits for its `insertingAt`
//!   (`xlog::wait_insertions_to_finish`), so the filler's bytes are the
//!   only ones that ever reach disk there, and its `xl_prev` is the one
//!   the reservation recorded, so the chain of records stays whole;
//! - the dead process's slot is neither reused nor freed until the
//!   clean-up is over: the postmaster keeps a worker slot, and a
//!   connection backend's slot is off the free list, until then;
//! - the transaction's phase (`crit::XACT_*`) is set before its end
//!   record is inserted and marked inserted at the insertion lock's
//!   release, so "did the COMMIT go in" has one answer.

use crate::context::ProcContext;
use crate::procarray::ProcArray;
use crate::xlog::Xlog;
use shmem::crit::{Held, XACT_ABORT_INSERTED, XACT_COMMIT_INSERTED, XACT_NONE};
use shmem::lwlock::LW_VAL_EXCLUSIVE;
use shmem::proc::{REPLY_DONE, REPLY_PENDING, REPLY_PREPARED, REPLY_RETURNED, REPLY_SENDING};
use shmem::sync::Ordering;
use shmem::Shmem;
use walformat::RecordBuf;

/// What a dead process left that a helper may finish ([`assess`]'s
/// answer when no crash restart is needed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leftovers {
    pub procno: u32,
    pub held: Held,
    /// The XID it had (0: none).
    pub xid: u32,
    /// Its commit was left PREPARED in its reply slot: committed.
    pub reply_prepared: bool,
}

/// Reads dead proc `procno`'s slot (no lock: its owner is gone) and says
/// whether a helper can finish what it left (Ok), or why only a crash
/// restart is safe (Err, for the log line: "it died ...").
pub fn assess(shm: &Shmem, procno: u32) -> Result<Leftovers, String> {
    let p = shm
        .procs()
        .get(procno as usize)
        .ok_or_else(|| format!("proc {procno} does not exist"))?;
    let held = p.crit.held();
    if !held.recoverable() {
        let queued = p.lw_waiting.load(Ordering::Relaxed) != shmem::proc::LW_WS_NOT_WAITING;
        return Err(format!(
            "it died holding {}{}",
            held.describe_sections(),
            if queued {
                ", asleep in an LWLock's wait queue"
            } else {
                ""
            }
        ));
    }
    let reply = p.reply.state();
    if reply == REPLY_PENDING || reply == REPLY_SENDING {
        return Err("it died with a commit reply handed to the walwriter".into());
    }
    if let Some(i) = held.insert_lock {
        check_insert_lock(shm, i, held.range.is_some())?;
    }
    Ok(Leftovers {
        procno,
        held,
        xid: p.xid.load(Ordering::Relaxed),
        reply_prepared: reply == REPLY_PREPARED,
    })
}

/// The insertion lock a dead process held: really held exclusively, and
/// with a reservation, not advertised (see the module header).
fn check_insert_lock(shm: &Shmem, i: usize, reserved: bool) -> Result<(), String> {
    if i >= shm.n_insert_locks() {
        return Err(format!(
            "its slot names WAL insertion lock {i}, which does not exist"
        ));
    }
    let l = shm.insert_lock(i);
    if l.lock.state_bits() & LW_VAL_EXCLUSIVE == 0 {
        return Err(format!(
            "its slot names WAL insertion lock {i}, which is not held"
        ));
    }
    if reserved && l.inserting_at.load(Ordering::Relaxed) != 0 {
        return Err(format!(
            "it died copying a record under WAL insertion lock {i} after advertising its progress (part of the record may be written out)"
        ));
    }
    Ok(())
}

/// Finishes what dead proc `lo.procno` (process `pid`) left, as `ctx`'s
/// process (the cleaner); returns what was done, for the log line.
pub fn clean_up(ctx: &ProcContext, lo: &Leftovers, pid: i32) -> Vec<String> {
    let mut done = Vec::new();
    let mut xlog = Xlog::new(ctx);
    let procarray = ProcArray::new(ctx);
    if let Some(i) = lo.held.insert_lock {
        finish_insertion(&mut xlog, i, lo.held.range, &mut done);
    }
    let baton = xlog.finish_abandoned_flush(lo.procno, lo.held.wal_write_lock);
    if lo.held.wal_write_lock {
        done.push("released WALWriteLock (the next writer redoes its write or flush)".into());
    } else if baton {
        done.push("passed on its group commit baton".into());
    }
    end_transaction(&mut xlog, &procarray, lo, &mut done);
    procarray.leave_of(lo.procno);
    leave_queues(ctx, lo.procno, pid, &mut done);
    reset_slot(ctx.shm, lo.procno);
    if lo.procno < ctx.shm.layout().max_backends {
        ctx.shm.free_backend_proc(lo.procno);
    }
    if done.is_empty() {
        done.push("it held nothing".into());
    }
    done
}

/// The insertion lock: its reservation filled, the lock released.
fn finish_insertion(
    xlog: &mut Xlog,
    lock: usize,
    range: Option<(u64, u64, u64)>,
    done: &mut Vec<String>,
) {
    match xlog.finish_abandoned_insertion(lock, range) {
        Some(at) => {
            done.push(format!(
                "filled its unfinished record at {} ({} bytes) and released WAL insertion lock {lock}",
                walformat::format_lsn(at.start),
                at.end - at.start
            ));
        }
        None => {
            done.push(format!(
                "released WAL insertion lock {lock} (nothing reserved yet)"
            ));
        }
    }
}

/// The open transaction: committed (its XID cleared), or aborted with an
/// ABORT record first (also when its end record was just replaced by a
/// filler: its phase then still says COMMITTING or ABORTING).
fn end_transaction(xlog: &mut Xlog, procarray: &ProcArray, lo: &Leftovers, done: &mut Vec<String>) {
    let p = &xlog.context().shm.procs()[lo.procno as usize];
    if lo.xid == 0 {
        return;
    }
    let phase = lo.held.xact_phase;
    // An end record that was cut off never reached COMMIT/ABORT_INSERTED
    // (that step is taken when its insertion lock is given back).
    let committed = lo.reply_prepared || phase == XACT_COMMIT_INSERTED;
    if committed {
        done.push(format!(
            "cleared the XID of its committed transaction {}",
            lo.xid
        ));
    } else if phase == XACT_ABORT_INSERTED {
        done.push(format!(
            "cleared the XID of its aborted transaction {}",
            lo.xid
        ));
    } else {
        let mut rec = RecordBuf::default();
        walformat::abort_record_into(&mut rec, lo.xid, walformat::pg_now_us());
        let at = xlog.insert(&mut rec);
        done.push(format!(
            "aborted its transaction {} (ABORT at {})",
            lo.xid,
            walformat::format_lsn(at.start)
        ));
    }
    procarray.end_transactions_of(&[(lo.procno, lo.xid)]);
    p.crit.set_phase(XACT_NONE);
}

/// What the process's own exit would have left: its admission tokens and
/// queue place, the synchronous replication queue, its replication slots.
fn leave_queues(ctx: &ProcContext, procno: u32, pid: i32, done: &mut Vec<String>) {
    let tokens = crate::admission::release_all_of(ctx, procno);
    if tokens > 0 {
        done.push(format!("passed on {tokens} admission token(s)"));
    }
    if crate::syncrep::leave_queue(ctx.shm, procno) {
        done.push("took it out of the synchronous replication queue".into());
    }
    let slots = crate::slots::release_all_of(ctx.shm, pid);
    if !slots.is_empty() {
        done.push(format!("released replication slot(s) {}", slots.join(", ")));
    }
}

/// The slot shows nobody and holds nothing (its counters stay: reports
/// sum them).
fn reset_slot(shm: &Shmem, procno: u32) {
    shmem::stats::leave_on_behalf(shm, procno);
    let p = &shm.procs()[procno as usize];
    p.flush_wanted.store(0, Ordering::Relaxed);
    p.cancel_key.store(0, Ordering::Relaxed);
    let reply = p.reply.state();
    if reply == REPLY_PREPARED || reply == REPLY_DONE || reply == REPLY_RETURNED {
        p.reply.unprepare();
    }
    p.crit.reset();
}

/// One dead process for the cleaner: its proc slot, pid, and how the
/// postmaster describes it and its death (for the one log line).
#[derive(Clone, Debug)]
pub struct Job {
    pub procno: u32,
    pub pid: i32,
    pub who: String,
    pub why: String,
}

/// The cleaner process's body: cleans up after each dead process in
/// `jobs`, one log line each. Exits 0, or 1 if a slot turned out to need
/// a crash restart after all (the postmaster then makes one).
pub fn run(shm: &Shmem, datadir: &std::path::Path, jobs: &[Job]) -> i32 {
    let ctx = ProcContext::aux(shm, shmem::segment::AuxProc::Cleaner, datadir);
    for job in jobs {
        let lo = match assess(shm, job.procno) {
            Ok(lo) => lo,
            Err(why) => {
                crate::process::log(
                    "LOG",
                    &format!("{} (PID {}) {}: {why}", job.who, job.pid, job.why),
                );
                return 1;
            }
        };
        let done = clean_up(&ctx, &lo, job.pid);
        crate::process::log(
            "LOG",
            &format!(
                "{} (PID {}) {}; cleaned up without a restart: {}",
                job.who,
                job.pid,
                job.why,
                done.join("; ")
            ),
        );
    }
    0
}
