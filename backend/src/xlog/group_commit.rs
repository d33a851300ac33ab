//! Flushing (`flush`, PostgreSQL's XLogFlush) and who flushes for a commit
//! (`group_commit`): the one place the variant is chosen.
//!
//! `leader` (PostgreSQL's): return at once if the flush result already
//! covers the LSN (group flush); otherwise record the request in
//! `req_flush`, wait for insertions, then `acquire_or_wait(WALWriteLock)`:
//! whoever gets it writes and syncs as far as insertions allow, and
//! everybody who waited re-checks whether that covered them.
//!
//! `flusher` hands every flush to the walwriter through the no-I/O
//! machinery (`via_walwriter`: publish the LSN, one sleep, one post from
//! the notifier).
//!
//! `hybrid` (the default, `flush_as_hybrid`) leads when WALWriteLock is
//! free, and otherwise publishes its LSN in the waiter bitmap and sleeps
//! once. Every release of WALWriteLock then runs the notifier
//! (`notify_flush_waiters`): it ends the covered requests, hands the next
//! flush to the waiting backend with the oldest request (one post: it wakes
//! and leads), then posts the covered ones. So a committer sleeps once and
//! is woken once, one extra wake-up per fdatasync carries the leadership
//! on, and neither the walwriter nor a herd of lock waiters
//! (`acquire_or_wait` wakes them all, the uncovered ones sleep again) is in
//! the path: less server CPU and fewer context switches per commit than
//! `leader` under load, a tie at a few clients. Tried and dropped: a leader
//! flushing more rounds for new waiters before releasing, handing off to
//! the newest waiter instead of the oldest, a short first wait timeout
//! (waiters timed out during a slow round and slept again).
//!
//! Only backends use `flusher` or `hybrid` (`group_commit_for`): the
//! walwriter, the startup process and the checkpointer flush themselves,
//! and a proc beyond the waiter bitmap's capacity cannot be notified.
//!
//! `commit_delay` / `commit_siblings` (`delay_before_flush`, PostgreSQL's
//! rule): a leader sleeps before its fdatasync when enough others are in a
//! transaction, in both `leader` and `hybrid`.
//!
//! The baton (`FlushWaiters`) records whom a hand-off posted, until that
//! backend wakes: if it dies first, the cleaner (`finish_abandoned_flush`)
//! runs the notifier pass its flush would have ended with, so that the
//! other waiters are not left to their timeouts.
//!
//! Races: a waiter publishes its request, then (SeqCst fence) looks at the
//! flush result and the lock; a releaser releases, then (SeqCst fence in
//! the notifier) reads the waiter bits: either the releaser sees the
//! waiter, or the waiter sees the lock free or the flush done, so no
//! wake-up is lost (the loom model `loom_flushwaiters` checks it). A
//! hand-off that fails takes its baton back. Timeouts are only a guard
//! against a stopped walwriter or holder.

use super::via_walwriter::WalwriterWait;
use super::Xlog;
use crate::context::ProcContext;
use crate::process::log;
use shmem::lwlock::LWLockMode;
use shmem::segment::NamedLock;
use shmem::stats::bump;
use shmem::sync::{fence, Ordering};
use shmem::variants::GroupCommit;
use walformat::Lsn;

/// What `lead_if_free` did: led a flush (WALWriteLock taken, WAL
/// flushed past the record), or found the lock busy with the record
/// already flushed by somebody else, or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lead {
    Led,
    Covered,
    Pending,
}

impl Lead {
    /// The record is flushed.
    fn done(self) -> bool {
        self != Lead::Pending
    }
}

/// First and longest bounded sleep of a `hybrid` committer. Every release
/// of WALWriteLock posts or hands off to each waiter (the loom model
/// `loom_flushwaiters` checks that none is missed), so a timeout is only a
/// guard; on an oversubscribed machine a flush round can take longer than
/// 5 ms of wall time (the leader waits for a CPU), and a shorter timeout
/// made waiters wake, find the lock held and sleep again.
const HYBRID_WAIT_FIRST: std::time::Duration = std::time::Duration::from_millis(100);
const HYBRID_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// The `group_commit` variant this process uses. Only backends hand their
/// flush to the walwriter: the walwriter itself, the startup process (no
/// walwriter runs yet), the checkpointer (its shutdown checkpoint is
/// written after the walwriter exited) always flush themselves; and a
/// proc beyond the waiter bitmap's capacity cannot be notified.
pub(super) fn group_commit_for(ctx: &ProcContext) -> GroupCommit {
    let is_backend = ctx.procno < ctx.shm.layout().max_backends;
    let fits = (ctx.procno as usize) < shmem::proc::FLUSH_WAITER_CAPACITY;
    if is_backend && fits {
        ctx.settings.group_commit
    } else {
        GroupCommit::Leader
    }
}

impl Xlog<'_> {
    /// Makes WAL up to `record` durable (XLogFlush). Returns at once when
    /// somebody already flushed past it.
    pub fn flush(&mut self, record: Lsn) {
        bump(&self.stats.flush_requests, 1);
        if record <= self.flush_lsn() {
            return;
        }
        if self.no_io {
            self.wait_for_walwriter(record, WalwriterWait::Flushed);
            return;
        }
        match self.group_commit {
            GroupCommit::Leader => self.flush_as_leader(record),
            GroupCommit::Flusher => self.flush_via_walwriter(record),
            GroupCommit::Hybrid => self.flush_as_hybrid(record),
        }
    }

    /// `group_commit = flusher`: the walwriter flushes for us. A direct
    /// backend's wait ends only with the flush: if the walwriter dies, the
    /// postmaster's crash restart ends this process.
    fn flush_via_walwriter(&mut self, record: Lsn) {
        self.wait_for_walwriter(record, WalwriterWait::Flushed);
    }

    /// `group_commit = hybrid`: lead when WALWriteLock is free; otherwise
    /// publish our LSN and sleep once, until whoever releases WALWriteLock
    /// either covers us (one post from its notifier) or hands the next
    /// flush to us (one post, then we lead). The walwriter is not needed:
    /// every release of WALWriteLock notifies (`release_wal_write_lock`).
    fn flush_as_hybrid(&mut self, record: Lsn) {
        let mut nap = HYBRID_WAIT_FIRST;
        loop {
            if self.lead_if_free(record).done() {
                return;
            }
            let waiters = &self.shm.xlog().flush_waiters;
            waiters.publish(self.me, record);
            // SeqCst: pairs with the fence in `release_wal_write_lock`
            // (after its release, before it reads the waiter bits): either
            // that releaser sees our bit, or we see the lock free below (or
            // its flush).
            fence(Ordering::SeqCst);
            if record <= self.flush_lsn() || self.lead_if_free(record).done() {
                self.withdraw_flush_request();
                return;
            }
            let posted = self.me.sem.wait_timeout(nap);
            // A hand-off's post: the next flush is ours, or we are covered.
            waiters.take_baton(self.ctx.procno);
            if record <= self.flush_lsn() {
                self.withdraw_flush_request();
                return;
            }
            if !posted {
                // Timed out (a long fdatasync): look again, a bit later
                // next time.
                nap = (nap * 2).min(HYBRID_WAIT_MAX);
            }
            // Posted but not covered: the flush was handed to us.
            self.withdraw_flush_request();
        }
    }

    /// Ends our published flush request (if a notifier ended it first, its
    /// post may still come: semaphore waits absorb a stray post), and
    /// drops a baton handed to us meanwhile.
    fn withdraw_flush_request(&self) {
        self.shm.xlog().flush_waiters.withdraw(self.me);
    }

    /// If nobody holds WALWriteLock: take it and flush for everybody up to
    /// what insertions finished (after `commit_delay`, see
    /// `delay_before_flush`). Says whether we led, or else whether
    /// `record` is flushed all the same.
    fn lead_if_free(&mut self, record: Lsn) -> Lead {
        let finished = self.wait_insertions_to_finish(record);
        let waiters = &self.shm.xlog().flush_waiters;
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        if !ww.conditional_acquire(&self.ctx.env, LWLockMode::Exclusive) {
            return if record <= self.flush_lsn() {
                Lead::Covered
            } else {
                Lead::Pending
            };
        }
        self.ctx.me.crit.hold_wal_write_lock();
        // We lead: a request we published must not make us post ourselves;
        // a baton handed to us is ours to drop (our release notifies).
        self.withdraw_flush_request();
        let _ = waiters.take_baton(self.ctx.procno);
        if record > self.flush_lsn() {
            let finished = self.delay_before_flush(finished);
            self.xlog_write(finished, true);
        }
        self.release_wal_write_lock();
        Lead::Led
    }

    /// commit_delay / commit_siblings (PostgreSQL's, in XLogFlush): a
    /// leader holding WALWriteLock sleeps `commit_delay` us before its
    /// fdatasync when at least `commit_siblings` other processes are in a
    /// transaction, so that their commits join it; then it flushes as far
    /// as insertions have finished meanwhile. `finished` is what
    /// insertions had finished before; waiting for insertions here never
    /// waits for one that needs WALWriteLock (an inserter advertises its
    /// position before it waits for a buffer page). Returns how far to
    /// flush.
    fn delay_before_flush(&self, finished: Lsn) -> Lsn {
        let s = &self.ctx.settings;
        if s.commit_delay_us == 0
            || !self.fsync
            || !crate::procarray::others_in_transaction(
                self.shm,
                self.ctx.procno,
                s.commit_siblings,
            )
        {
            return finished;
        }
        std::thread::sleep(std::time::Duration::from_micros(s.commit_delay_us as u64));
        self.wait_insertions_to_finish(finished).max(finished)
    }

    /// Posts every proc waiting for a flush the flush result now covers;
    /// the walwriter calls it after each round, and with `group_commit =
    /// hybrid` every release of WALWriteLock (`release_wal_write_lock`).
    ///
    /// Hybrid hand-off: before those posts (each may preempt us), the
    /// waiting backend with the oldest request is posted to lead the next
    /// flush, so that the requests that arrived during our fdatasync fill
    /// the next one without waking the walwriter or every waiter. Our
    /// notifier's SeqCst fence follows the release of WALWriteLock: it
    /// pairs with the fence a waiter makes between publishing and trying
    /// the lock (`flush_as_hybrid`), so a waiter that found the lock held
    /// is seen by this notifier, or by a concurrent one that took its bit
    /// (which hands off too).
    pub fn notify_flush_waiters(&self) -> shmem::proc::Notified {
        let waiters = &self.shm.xlog().flush_waiters;
        let procs = self.shm.procs();
        let leaders_below = self.shm.layout().max_backends;
        let hand_off = self.ctx.settings.group_commit == GroupCommit::Hybrid;
        waiters.notify_with(
            procs,
            leaders_below,
            || self.flush_lsn(),
            |n| {
                if let (true, Some(next)) = (hand_off, n.oldest) {
                    waiters.hand_off(procs, next);
                }
            },
        )
    }

    /// Of the waiters a notifier pass left waiting, those only the
    /// walwriter serves: every one with `flusher`; with `hybrid`, the no-I/O
    /// processes (library workers), since a waiting backend is woken by
    /// the next release of WALWriteLock.
    pub fn waiting_for_walwriter(&self, n: shmem::proc::Notified) -> usize {
        match self.ctx.settings.group_commit {
            GroupCommit::Hybrid => n.waiting - n.leaders_waiting,
            _ => n.waiting,
        }
    }

    /// `group_commit = leader` (PostgreSQL's XLogFlush): wait for
    /// insertions, then whoever gets WALWriteLock flushes for everybody.
    fn flush_as_leader(&mut self, record: Lsn) {
        let w = &self.shm.xlog().write;
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        w.req_flush.fetch_max(record, Ordering::Relaxed);
        loop {
            let target = record.max(w.req_write.load(Ordering::Relaxed));
            let finished = self.wait_insertions_to_finish(target);
            if !ww.acquire_or_wait(&self.ctx.env, LWLockMode::Exclusive) {
                // Somebody held WALWriteLock and probably flushed for us.
                if record <= self.flush_lsn() {
                    return;
                }
                continue;
            }
            self.ctx.me.crit.hold_wal_write_lock();
            if record > self.flush_lsn() {
                let finished = self.delay_before_flush(finished);
                self.xlog_write(finished, true);
            }
            self.release_wal_write_lock();
            return;
        }
    }

    /// Releases WALWriteLock, then wakes the walsenders and the library
    /// WAL readers (`shmem::readwake`) if our `xlog_write` advanced the
    /// flush position: outside the lock, and each wake-up's fence follows
    /// the flush_result store either way, so none is lost. Every release
    /// of WALWriteLock goes through here.
    pub(super) fn release_wal_write_lock(&mut self) {
        self.ctx.me.crit.give_back_wal_write_lock();
        self.shm
            .named_lock(NamedLock::WalWrite)
            .release(&self.ctx.env);
        if std::mem::take(&mut self.walsenders_to_wake) {
            shmem::walsnd::wake_walsenders(self.shm.repl());
            self.shm.xlog().readers.flushed.wake();
        }
        if self.ctx.settings.group_commit == GroupCommit::Hybrid {
            self.notify_flush_waiters();
        }
    }

    /// Finishes the flush duties of a process that died holding
    /// WALWriteLock or the hand-off baton (`crate::abandoned`): takes the
    /// lock over and releases it (waking what its release would have
    /// woken; the next writer redoes any write or sync it left half done,
    /// from the shared results, which only grow once one is done), and
    /// clears its baton with a notifier pass, as the flush it was handed
    /// would have ended with.
    pub fn finish_abandoned_flush(&mut self, dead: u32, holds_lock: bool) -> bool {
        let baton = self.shm.xlog().flush_waiters.take_baton(dead);
        if holds_lock {
            let ww = self.shm.named_lock(NamedLock::WalWrite);
            self.ctx.env.adopt(ww, LWLockMode::Exclusive);
            self.ctx.me.crit.hold_wal_write_lock();
            self.walsenders_to_wake = true;
            self.release_wal_write_lock();
        } else if baton && self.ctx.settings.group_commit == GroupCommit::Hybrid {
            self.notify_flush_waiters();
        }
        baton
    }

    /// Writes and flushes everything inserted (shutdown).
    pub fn flush_all(&mut self) {
        let at = self.insert_lsn();
        self.flush(at);
        log(
            "DEBUG",
            &format!(
                "flushed WAL up to {}",
                walformat::format_lsn(self.flush_lsn())
            ),
        );
    }

    /// For `sync_rep_one_sleep` (one sleep per synchronous commit): makes sure
    /// a flush covering `record` is done or will be, without waiting for
    /// one somebody else is doing. If WALWriteLock is free we flush as a
    /// leader (`lead_if_free`, whose release wakes the walsenders); if it is
    /// held, the holder's flush may stop below `record`, so the
    /// walwriter's latch is set: its next round starts after this call,
    /// when every insertion below `record` has finished (we waited for
    /// them), so it flushes past `record`. With `group_commit = flusher`
    /// the walwriter is always the one asked. False in no-I/O mode (the
    /// caller then flushes with `flush`).
    pub fn request_flush(&mut self, record: Lsn) -> bool {
        if record <= self.flush_lsn() {
            return true;
        }
        if self.no_io {
            return false;
        }
        let flushed = self.group_commit != GroupCommit::Flusher && self.lead_if_free(record).done();
        if !flushed {
            self.shm.xlog().walwriter_latch.set();
        }
        true
    }
}
