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
//! Flush on behalf (issue 12): library workers never write WAL files
//! (`IoMode::ViaWalwriter`); a worker that needs a flush, or a buffer page
//! written out, stores the LSN in its proc slot's `flush_wanted`, sets our
//! latch and sleeps on its semaphore. After each round the notifier swaps
//! every `flush_wanted` the flush result now covers back to 0 and posts
//! that proc's semaphore: one wake-up per waiter, and one fdatasync serves
//! every commit below it (group commit). The swap makes the post happen at
//! most once per request even if the waiter re-publishes after a timeout.
//! Waiters use bounded waits, so a missed wake-up costs latency, not
//! progress.
//!
//! On SIGTERM (sent by the postmaster after every backend has exited) it
//! writes and flushes everything inserted and exits 0: fast shutdown leaves
//! every inserted record on disk.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use backend::context::ProcContext;
use backend::process::shutdown_requested;
use backend::xlog::Xlog;
use shmem::segment::AuxProc;
use shmem::sync::{fence, Ordering};
use shmem::waitevent;
use shmem::Shmem;
use std::path::Path;
use std::time::Duration;

/// Runs the walwriter until SIGTERM; returns the exit code.
pub fn run(shm: &Shmem, datadir: &Path) -> i32 {
    let ctx = ProcContext::aux(shm, AuxProc::Walwriter, datadir);
    let mut xlog = Xlog::new(&ctx);
    let delay = Duration::from_millis(ctx.settings.wal_writer_delay_ms as u64);
    let preinit = ctx.settings.wal_preinit;
    let latch = &shm.xlog().walwriter_latch;
    while !shutdown_requested() {
        latch.reset();
        let wrote = xlog.background_flush();
        let waiting = notify_flush_waiters(shm, xlog.flush_lsn()).waiting;
        if preinit {
            xlog.preinit_buffers();
        }
        xlog.preallocate_next_segment();
        if shutdown_requested() {
            break;
        }
        if wrote && waiting > 0 {
            // Somebody still waits for WAL that was not finished yet, and we
            // are making progress: go round again at once.
            continue;
        }
        waitevent::during(waitevent::WALWRITER_MAIN, || latch.wait(delay));
    }
    xlog.flush_all();
    notify_flush_waiters(shm, xlog.flush_lsn());
    0
}

/// What one notifier pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Notified {
    /// Procs posted.
    pub woken: usize,
    /// Procs still waiting for WAL past the flush result.
    pub waiting: usize,
}

/// Wakes every proc whose `flush_wanted` is at or below `flushed`.
pub fn notify_flush_waiters(shm: &Shmem, flushed: u64) -> Notified {
    // SeqCst: pairs with the SeqCst store of `flush_wanted` and the fence
    // in the waiter (`Xlog::wait_for_walwriter`): either we see its request
    // here, or it sees our flush result when it re-checks.
    fence(Ordering::SeqCst);
    let mut n = Notified::default();
    for p in shm.procs() {
        let wanted = p.flush_wanted.load(Ordering::Relaxed);
        if wanted == 0 {
            continue;
        }
        if wanted > flushed {
            n.waiting += 1;
            continue;
        }
        // Relaxed: the post's Release orders our flush result before the
        // waiter's wake-up (pairs with the Acquire consume in
        // `Semaphore::wait_inner`).
        if p.flush_wanted
            .compare_exchange(wanted, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            p.sem.post();
            n.woken += 1;
        }
    }
    n
}
