//! Having the walwriter write or flush for us, and the walwriter's own
//! flush.
//!
//! No-I/O mode (`IoMode::ViaWalwriter`, library workers): this process
//! never writes or syncs a WAL file. `flush` and a buffer page whose old
//! content is unwritten publish the wanted LSN in our proc slot's
//! `flush_wanted`, set the walwriter's latch and sleep on our semaphore in
//! bounded waits (`wait_for_walwriter`); the walwriter writes, flushes and
//! posts every waiter it covered. `group_commit = flusher` backends wait
//! the same way for their flushes. If the server generation ends during a
//! wait, the handle is marked `stale` (an insertion then finishes into a
//! scratch page, see `buffers`): its caller must report the operation as
//! failed.
//!
//! Races: publishing pairs with the SeqCst fence in the notifier (between
//! its flush-result update and its look at the waiters): either it sees
//! our request, or we see its flush after our own fence. A timed-out wait
//! publishes again and sets the latch again, in case the walwriter missed
//! us; a post that arrives after the wait ended is absorbed by the next
//! semaphore wait. The walwriter itself (`background_flush`) never sleeps
//! on an advertised insertion (`finished_insertions_nowait`), since that
//! inserter may be one of its waiters.

use super::Xlog;
use shmem::lwlock::LWLockMode;
use shmem::segment::NamedLock;
use shmem::sync::{fence, Ordering};
use walformat::Lsn;

/// What a no-I/O process waits for the walwriter to do.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum WalwriterWait {
    /// The write result reaches the LSN (a buffer page to recycle).
    Written,
    /// The flush result reaches the LSN.
    Flushed,
}

/// First and longest bounded sleep of a no-I/O wait: each timeout re-checks
/// the positions and the generation, and sets the walwriter latch again.
const WALWRITER_WAIT_FIRST: std::time::Duration = std::time::Duration::from_micros(500);
const WALWRITER_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(20);

/// First bounded sleep of a backend waiting for the walwriter's flush
/// (`group_commit = flusher | hybrid`): long enough that a loaded
/// fdatasync does not time it out (the notifier misses no waiter, see
/// `shmem::proc::FlushWaiters`; the timeout only guards against a
/// walwriter that stopped, which is a crash restart anyway).
const FLUSHER_WAIT_FIRST: std::time::Duration = std::time::Duration::from_millis(5);

impl Xlog<'_> {
    /// No-I/O mode: asks the walwriter to write (`Written`) or flush
    /// (`Flushed`) up to `lsn` and waits for it; false if the server
    /// generation ended first (the handle is then stale).
    pub(super) fn wait_for_walwriter(&mut self, lsn: Lsn, what: WalwriterWait) -> bool {
        let done = |x: &Self| match what {
            WalwriterWait::Written => x.write_lsn() >= lsn,
            WalwriterWait::Flushed => x.flush_lsn() >= lsn,
        };
        let latch = &self.shm.xlog().walwriter_latch;
        let waiters = &self.shm.xlog().flush_waiters;
        // Publishing pairs with the SeqCst fence in the notifier (between
        // its flush-result update and its look at the waiters): either it
        // sees our request, or we see its flush below (our fence).
        waiters.publish(self.me, lsn);
        latch.set();
        let mut nap = if self.no_io {
            WALWRITER_WAIT_FIRST
        } else {
            FLUSHER_WAIT_FIRST
        };
        let ok = loop {
            fence(Ordering::SeqCst);
            if done(self) {
                break true;
            }
            if self.ctx.generation_ended() {
                self.stale = true;
                break false;
            }
            if !self.me.sem.wait_timeout(nap) {
                if self.ctx.server_gone() {
                    self.stale = true;
                    break false;
                }
                // Timed out: maybe the walwriter missed us; ask again.
                waiters.publish(self.me, lsn);
                latch.set();
                nap = (nap * 2).min(WALWRITER_WAIT_MAX);
            }
        };
        // A post may still come for this wait; the LWLock waits absorb and
        // re-post unrelated wake-ups (PGSemaphore semantics).
        self.me.flush_wanted.store(0, Ordering::Relaxed);
        ok
    }

    /// Walwriter: write and flush everything inserted so far. Returns true
    /// if it wrote anything.
    pub fn background_flush(&mut self) -> bool {
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        loop {
            let reserved = self.insert_lsn();
            if reserved <= self.flush_lsn() {
                return false;
            }
            let finished = self.finished_insertions_nowait();
            if finished <= self.flush_lsn() {
                return false;
            }
            // If somebody (a hybrid leader) holds WALWriteLock, wait until
            // it is free and look again: what we computed is stale by then,
            // and the insertions finished during its fdatasync are what
            // our flush should carry.
            if !ww.acquire_or_wait(&self.ctx.env, LWLockMode::Exclusive) {
                continue;
            }
            self.ctx.me.crit.hold_wal_write_lock();
            let wrote = finished > self.flush_lsn();
            if wrote {
                self.xlog_write(finished, true);
            }
            self.release_wal_write_lock();
            return wrote;
        }
    }
}
