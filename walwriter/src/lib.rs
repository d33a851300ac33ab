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
//! On SIGTERM (sent by the postmaster after every backend has exited) it
//! writes and flushes everything inserted and exits 0: fast shutdown leaves
//! every inserted record on disk.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use backend::context::ProcContext;
use backend::process::shutdown_requested;
use backend::xlog::Xlog;
use shmem::segment::AuxProc;
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
        xlog.background_flush();
        if preinit {
            xlog.preinit_buffers();
        }
        xlog.preallocate_next_segment();
        if shutdown_requested() {
            break;
        }
        waitevent::during(waitevent::WALWRITER_MAIN, || latch.wait(delay));
    }
    xlog.flush_all();
    0
}
