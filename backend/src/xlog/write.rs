//! Writing WAL out (PostgreSQL's XLogWrite), WALWriteLock held.
//!
//! `xlog_write` writes pages from the write result up to the request,
//! contiguous runs of at most `MAX_WRITE_PAGES` in one `pwrite` (a run never
//! wraps the buffer ring nor crosses a segment), a completed segment
//! synced at once (`segment`), the last one when a flush is requested or
//! pending (`req_flush`: a write-only caller then syncs too, so flushers
//! are served even when write-only callers keep winning the lock). A
//! partial last page goes out as a copy with zeros after its finished
//! WAL, so the files hold what a zeroed buffer would give.
//!
//! Invariant: only WAL that every insertion has finished copying is
//! written: callers first compute `wait_insertions_to_finish(upto)` and
//! pass no further. After each run the writer publishes the new write
//! result as WALWriteLock's variable (`publish_written`), so a backend that
//! only needs one old buffer page written (`write_upto`) waits for that run
//! with `wait_for_var`, not for the whole write: inserting continues while a
//! large write is still going on (PostgreSQL publishes only at the end).
//! `flush_result` is advanced only after the sync (or, with an `open_*`
//! sync method or `fsync = off`, the write) returned.

use super::{Xlog, BLCKSZ};
use shmem::lwlock::LWLockMode;
use shmem::segment::NamedLock;
use shmem::stats::bump;
use shmem::sync::{AtomicU64, Ordering};
use walformat::{Lsn, XLOG_BLCKSZ};

/// Most pages one `pwrite` hands the kernel before the writer publishes its
/// progress (512 KiB: long enough that the syscall costs nothing next to the
/// copy, short enough that a backend waiting for one page is not held up by
/// a multi-megabyte write).
const MAX_WRITE_PAGES: usize = 64;

/// A run of contiguous buffer pages written with one `pwrite`: (first
/// buffer index, LSN of its first page, pages).
type Run = (usize, Lsn, usize);

/// One WAL page aligned for O_DIRECT writes.
#[repr(C, align(4096))]
pub(super) struct AlignedPage([u8; XLOG_BLCKSZ]);

impl Default for AlignedPage {
    fn default() -> Self {
        AlignedPage([0; XLOG_BLCKSZ])
    }
}

impl Xlog<'_> {
    /// Writes (not syncs) WAL up to at least `upto` (a page end), or waits
    /// for whoever is writing to get past it.
    pub(super) fn write_upto(&mut self, upto: Lsn) {
        let finished = self.wait_insertions_to_finish(upto);
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        let written = &self.shm.xlog().write.write_result;
        loop {
            let seen = self.write_lsn();
            if seen >= upto {
                return;
            }
            if ww.conditional_acquire(&self.ctx.env, LWLockMode::Exclusive) {
                self.ctx.me.crit.hold_wal_write_lock();
                if self.write_lsn() < upto {
                    self.xlog_write(finished, false);
                }
                self.release_wal_write_lock();
                return;
            }
            // Somebody is writing: sleep until it publishes a run or is done.
            ww.wait_for_var(&self.ctx.env, written, seen);
        }
    }

    /// Writes WAL from the write result up to `rqst` (and syncs if
    /// `flush`). Caller holds WALWriteLock and has waited for insertions
    /// below `rqst` (XLogWrite).
    pub(super) fn xlog_write(&mut self, rqst: Lsn, flush: bool) {
        let mut written = self.write_lsn();
        let mut run: Option<Run> = None;
        while written < rqst {
            let page_start = written - written % BLCKSZ;
            let page_end = page_start + BLCKSZ;
            let idx = self.buffer_to_write(page_start, rqst);
            run = Some(self.extend_run(run, idx, page_start));
            written = page_end.min(rqst);
            let seg_done = written == page_end && self.geo.seg_offset(page_end) == 0;
            if seg_done {
                self.complete_segment(run.take(), page_start);
            }
        }
        if let Some((first, lsn, n)) = run {
            self.write_run_upto(first, lsn, n, written);
        }
        self.advance_results(written, flush);
    }

    /// The buffer holding the page at `page_start`, which `xlog_write`
    /// (asked to write up to `rqst`) is about to write out; a buffer that
    /// does not hold it is a bug, since nothing past the finished
    /// insertions is ever requested.
    fn buffer_to_write(&self, page_start: Lsn, rqst: Lsn) -> usize {
        let page_end = page_start + BLCKSZ;
        let idx = ((page_start / BLCKSZ) % self.n_buffers) as usize;
        // Acquire pairs with the Release store in `init_page` (and in
        // startup's install_end_of_wal): the page header is visible
        // before we write the page out.
        let holds = self.shm.xlblocks()[idx].load(Ordering::Acquire);
        if holds != page_end {
            panic!(
                "xlog write request {} is past the WAL in buffers (buffer {idx} holds page ending at {})",
                walformat::format_lsn(rqst),
                walformat::format_lsn(holds)
            );
        }
        idx
    }

    /// Adds the page at `page_start` (in buffer `idx`) to `run` when it
    /// continues it (the next buffer, the same segment, fewer than
    /// `MAX_WRITE_PAGES`); otherwise writes `run` out, publishes that
    /// progress, and starts a new run with the page.
    fn extend_run(&mut self, run: Option<Run>, idx: usize, page_start: Lsn) -> Run {
        match run {
            Some((first, lsn, n))
                if first + n == idx
                    && n < MAX_WRITE_PAGES
                    && self.geo.seg_no(lsn) == self.geo.seg_no(page_start) =>
            {
                (first, lsn, n + 1)
            }
            Some((first, lsn, n)) => {
                self.write_run(first, lsn, n);
                self.publish_written(lsn + n as u64 * BLCKSZ);
                (idx, page_start, 1)
            }
            None => (idx, page_start, 1),
        }
    }

    /// The page at `page_start` was the last of its segment: write out
    /// `run` (which ends with it), sync the segment, and tell the archiver
    /// and the checkpointer (`segment`).
    fn complete_segment(&mut self, run: Option<Run>, page_start: Lsn) {
        let page_end = page_start + BLCKSZ;
        if let Some((first, lsn, n)) = run {
            self.write_run(first, lsn, n);
            self.publish_written(page_end);
        }
        // A completed segment is synced at once (PostgreSQL does
        // the same), so a later flush only needs the last one.
        self.sync_segment(self.geo.seg_no(page_start));
        self.notify_archiver(self.geo.seg_no(page_start));
        self.maybe_request_checkpoint(page_end);
    }

    /// After `xlog_write`'s runs: publishes the write result `written`;
    /// if `flush`, or a flusher waits (`req_flush`), syncs the last segment
    /// and publishes the flush result, marking the walsenders to be woken.
    fn advance_results(&mut self, written: Lsn, flush: bool) {
        let w = &self.shm.xlog().write;
        // Release pairs with the Acquire load in `write_lsn`.
        w.write_result.fetch_max(written, Ordering::Release);
        // A flusher waiting for WAL we just wrote: sync for it as well.
        let flush = flush || w.req_flush.load(Ordering::Relaxed) > self.flush_lsn();
        if flush && written > self.flush_lsn() {
            if self.geo.seg_offset(written) != 0 {
                self.sync_segment(self.geo.seg_no(written));
            }
            // Release pairs with the Acquire load in `flush_lsn`.
            w.flush_result.fetch_max(written, Ordering::Release);
            // Relaxed: a time stamp for the walsenders' round timings only.
            self.shm
                .repl()
                .flushed_at_ns
                .store(shmem::clock::monotonic_ns(), Ordering::Relaxed);
            self.walsenders_to_wake = true;
        }
    }

    /// Mid-write: everything below `end` (a page end) is handed to the
    /// kernel. Published as WALWriteLock's variable, which wakes the
    /// backends sleeping in `write_upto` for a page below it. The caller
    /// holds WALWriteLock, so the write result only grows.
    fn publish_written(&self, end: Lsn) {
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        ww.update_var(&self.ctx.env, &self.shm.xlog().write.write_result, end);
    }

    /// Writes `n` buffer pages starting at buffer `first` (WAL at `lsn`),
    /// of which WAL below `valid_end` is finished: a last page holding
    /// unfinished or never-written bytes (the buffer is not zeroed, see
    /// `init_page`) goes out as a copy with zeros from `valid_end` on.
    fn write_run_upto(&mut self, first: usize, lsn: Lsn, n: usize, valid_end: Lsn) {
        let last_start = lsn + (n as u64 - 1) * BLCKSZ;
        if valid_end >= last_start + BLCKSZ {
            return self.write_run(first, lsn, n);
        }
        if n > 1 {
            self.write_run(first, lsn, n - 1);
        }
        let idx = (first + n - 1) % self.n_buffers as usize;
        let valid = (valid_end - last_start) as usize;
        let mut copy = self.zero_tail_page.take().unwrap_or_default();
        // Buffer `idx` holds the page at `last_start`; its bytes below
        // `valid_end` are finished insertions (our caller waited).
        let src = self.shm.wal_bytes(idx, valid);
        copy.0[..valid].copy_from_slice(src);
        copy.0[valid..].fill(0);
        self.write_bytes(&copy.0, last_start, 1);
        self.zero_tail_page = Some(copy);
    }

    /// Writes `n` buffer pages starting at buffer `first` (WAL at `lsn`)
    /// with one pwrite.
    fn write_run(&mut self, first: usize, lsn: Lsn, n: usize) {
        // Every insertion into the pages has finished (our caller waited).
        let bytes = self.shm.wal_bytes(first, n * XLOG_BLCKSZ);
        self.write_bytes(bytes, lsn, n);
    }

    /// Writes `bytes`, `n` whole WAL pages, at `lsn` with one pwrite.
    fn write_bytes(&mut self, bytes: &[u8], lsn: Lsn, n: usize) {
        let segno = self.geo.seg_no(lsn);
        let offset = self.geo.seg_offset(lsn);
        let timer = self.io_timer();
        let file = self.segment_file(segno);
        if let Err(e) = crate::walfile::write_at(crate::walfile::Op::WalWrite, file, bytes, offset)
        {
            panic!(
                "could not write to WAL segment {} at offset {offset}, length {}: {e}",
                self.geo.file_name(self.tli, segno),
                bytes.len()
            );
        }
        self.shm
            .xlog()
            .write
            .writes
            .fetch_add(n as u64, Ordering::Relaxed);
        bump(&self.stats.wal_write, 1);
        Self::add_elapsed(timer, &self.stats.wal_write_time_us);
    }

    /// A clock for pg_stat_wal's I/O times (None: track_wal_io_timing off).
    pub(super) fn io_timer(&self) -> Option<std::time::Instant> {
        self.io_timing.then(std::time::Instant::now)
    }

    pub(super) fn add_elapsed(timer: Option<std::time::Instant>, into: &AtomicU64) {
        if let Some(t) = timer {
            bump(into, t.elapsed().as_micros() as u64);
        }
    }
}
