//! The walwriter process (PostgreSQL's walwriter.c + XLogBackgroundFlush).
//!
//! Each round: write and flush every WAL byte whose insertion has finished
//! (so that asynchronous work reaches disk within `wal_writer_delay`), then
//! — with `wal_preinit = on` — initialize WAL buffer pages ahead of the
//! insert position, as far as buffers already written out allow, so that
//! backends rarely have to zero and format a page themselves (seed 003).
//! It also creates the next WAL segment file ahead of need. Then sleep on
//! the latch: backends set it when a quarter of the buffers
//! awaits writing, and a commit that does not wait for its flush sets it too.
//!
//! Flush on behalf: library workers never write WAL files
//! (`IoMode::ViaWalwriter`); a worker that needs a flush, or a buffer page
//! written out, stores the LSN in its proc slot's `flush_wanted`, sets our
//! latch and sleeps on its semaphore. After each round the notifier swaps
//! every `flush_wanted` the flush result now covers back to 0 and posts
//! that proc's semaphore: one wake-up per waiter, and one fdatasync serves
//! every commit below it (group commit). The swap makes the post happen at
//! most once per request even if the waiter re-publishes after a timeout.
//! Waiters use bounded waits, so a missed wake-up costs latency, not
//! progress. The notifier reads only the waiter bitmap's words
//! (`shmem::proc::FlushWaiters`), not every proc slot.
//!
//! Dedicated flusher (`group_commit = flusher`): backends hand
//! their commit flush over the same way. While anybody waits and a round
//! wrote something, the next round starts at once: the requests that
//! arrived during one fdatasync fill the next (MySQL 8's log
//! writer/flusher and notifier, in one process here). With `hybrid` the
//! backends pass the flush among themselves (see backend/src/xlog/group_commit.rs): only
//! waiting no-I/O processes keep us going round at once.
//!
//! Commit replies (`commit_reply = flusher`): after each round
//! the walwriter also sends the replies backends handed over for commits
//! the flush now covers, clearing their XIDs first (`backend::reply`);
//! handed-off replies still waiting count as waiters, so the next round
//! starts at once.
//!
//! Insertion-lock pace (`wal_insert_lock_spread = adaptive`):
//! after each round, `PaceWatch` judges from the page counters and the
//! time we slept on the latch whether we fall behind the inserters, and if
//! so has them leave us a CPU (see backend/src/xlog/pace.rs).
//!
//! On SIGTERM (sent by the postmaster after every backend has exited) it
//! writes and flushes everything inserted and exits 0: fast shutdown leaves
//! every inserted record on disk.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use backend::context::ProcContext;
use backend::process::shutdown_requested;
use backend::xlog::{PaceWatch, Xlog};
use shmem::segment::AuxProc;
use shmem::variants::InsertLockSpread;
use shmem::waitevent;
use shmem::Shmem;
use std::path::Path;
use std::time::{Duration, Instant};

/// Runs the walwriter until SIGTERM; returns the exit code.
pub fn run(shm: &Shmem, datadir: &Path) -> i32 {
    let ctx = ProcContext::aux(shm, AuxProc::Walwriter, datadir);
    let mut xlog = Xlog::new(&ctx);
    let delay = Duration::from_millis(ctx.settings.wal_writer_delay_ms as u64);
    let preinit = ctx.settings.wal_preinit;
    let latch = &shm.xlog().walwriter_latch;
    let mut replies = backend::reply::Flusher::if_enabled(&ctx);
    // Without pre-initialization backends initialize every page: no pace
    // to judge.
    let adaptive_spread = ctx.settings.wal_insert_lock_spread == InsertLockSpread::Adaptive;
    let mut pace = (preinit && adaptive_spread).then(|| PaceWatch::new(shm));
    while !shutdown_requested() {
        latch.reset();
        let wrote = xlog.background_flush();
        let waiting = xlog.waiting_for_walwriter(xlog.notify_flush_waiters())
            + replies
                .as_mut()
                .map_or(0, |r| r.send_covered(xlog.flush_lsn()));
        if preinit {
            xlog.preinit_buffers();
        }
        if let Some(p) = pace.as_mut() {
            p.observe(shm);
        }
        xlog.preallocate_next_segment();
        if shutdown_requested() {
            break;
        }
        if wrote && waiting > 0 {
            // Somebody still waits for WAL that was not finished yet, and we
            // are making progress: go round again at once. The requests
            // that arrived during our fdatasync are what fills the next.
            continue;
        }
        // Waiters whose WAL lies behind an unfinished insertion: that
        // inserter sets our latch when it commits, but one that does not
        // (a non-transactional message) would leave them to their
        // timeouts, so look again soon.
        let nap = if waiting > 0 {
            delay.min(UNFINISHED_INSERTION_NAP)
        } else {
            delay
        };
        let asleep_at = pace.is_some().then(Instant::now);
        waitevent::during(waitevent::WALWRITER_MAIN, || latch.wait(nap));
        if let (Some(p), Some(t)) = (pace.as_mut(), asleep_at) {
            p.note_sleep(t.elapsed());
        }
    }
    xlog.flush_all();
    xlog.notify_flush_waiters();
    if let Some(r) = replies.as_mut() {
        r.send_covered(xlog.flush_lsn());
    }
    0
}

/// How soon the walwriter looks again while flush waiters wait for WAL
/// behind an insertion still in progress.
const UNFINISHED_INSERTION_NAP: Duration = Duration::from_micros(200);
