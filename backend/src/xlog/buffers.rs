//! WAL buffer pages (PostgreSQL's GetXLogBuffer and AdvanceXLInsertBuffer).
//!
//! Buffer `i` holds the page whose end LSN is `xlblocks[i]`; the page of
//! LSN `p` can only live in buffer `(p / BLCKSZ) % n_buffers`. Pages are
//! initialized in LSN order up to `bufmap.initialized_up_to`, under
//! WALBufMappingLock, by inserters that need them or ahead of need by the
//! walwriter (`preinit_buffers`, which never writes anything).
//!
//! `get_buffer` finds the page for an LSN; if the buffer does not hold it
//! yet, the inserter first advertises its progress in `insertingAt` (so
//! that whoever must write older pages out does not wait for it — it may
//! be the one waiting for them), then initializes it (`advance_buffers`),
//! writing older WAL out if the buffer still holds an unwritten page
//! (without holding WALBufMappingLock; in no-I/O mode the walwriter writes
//! it, `via_walwriter`).
//!
//! Races: `init_page` invalidates `xlblocks[i]` before touching the page
//! (then a Release fence, for `walread`'s copies of pages)
//! and publishes the new end with Release once the header is written, so a
//! reader that still expects the old page never takes the half-initialized
//! one for it, and a reader that sees the new end sees the header. A page
//! is only recycled once its old WAL is written (`write_lsn() >= old end`),
//! and that WAL was only written once every insertion into it finished.
//! In no-I/O mode, if the server generation ends during the wait, the
//! insertion finishes into a process-local scratch page (nothing of the
//! dead generation is touched any more) and the handle becomes stale.
//!
//! The counters of pages initialized by backends and by the walwriter feed
//! `PaceWatch` (`pace`).

use super::via_walwriter::WalwriterWait;
use super::{Xlog, BLCKSZ};
use shmem::lwlock::LWLockMode;
use shmem::segment::NamedLock;
use shmem::stats::bump;
use shmem::sync::Ordering;
use shmem::walpage::WalPage;
use walformat::{Lsn, XLOG_BLCKSZ};

impl Xlog<'_> {
    /// Buffer page address for `ptr`, initializing the page first if the
    /// buffer does not hold it yet (GetXLogBuffer).
    pub(super) fn get_buffer(&mut self, ptr: Lsn) -> WalPage {
        let page_start = ptr - ptr % BLCKSZ;
        let expected_end = page_start + BLCKSZ;
        let idx = ((ptr / BLCKSZ) % self.n_buffers) as usize;
        let xlblocks = self.shm.xlblocks();
        // Acquire pairs with the Release store in `init_page`: the page's
        // initialization is visible before we write into it.
        if xlblocks[idx].load(Ordering::Acquire) != expected_end {
            // We will not write below this page any more: say so before we
            // possibly wait for older WAL to be written.
            let hdr = self.geo.page_header_size_at(page_start) as u64;
            let advertised = if ptr % BLCKSZ == hdr { page_start } else { ptr };
            self.update_inserting_at(advertised);
            self.advance_buffers(ptr, false);
            // Acquire: same partner as above.
            let got = xlblocks[idx].load(Ordering::Acquire);
            if got != expected_end && self.no_io && self.ctx.generation_ended() {
                return self.scratch_page();
            }
            if got != expected_end {
                panic!(
                    "could not find WAL buffer for {}: buffer {idx} holds page ending at {}",
                    walformat::format_lsn(ptr),
                    walformat::format_lsn(got)
                );
            }
        }
        self.shm.wal_page_mut(idx)
    }

    /// No-I/O mode, generation ended: the rest of the insertion goes to a
    /// local page, and the handle is stale (see `via_walwriter`).
    #[cold]
    fn scratch_page(&mut self) -> WalPage {
        self.stale = true;
        self.scratch.resize(XLOG_BLCKSZ, 0);
        WalPage::local(&mut self.scratch[..])
    }

    /// Initializes buffer pages up to the one holding `upto`
    /// (AdvanceXLInsertBuffer). `opportunistic`: initialize as many pages
    /// as possible without writing anything (walwriter pre-init).
    /// Returns the number of pages initialized.
    pub fn advance_buffers(&mut self, upto: Lsn, opportunistic: bool) -> u64 {
        let map = self.shm.named_lock(NamedLock::WalBufMapping);
        let bufmap = &self.shm.xlog().bufmap;
        let xlblocks = self.shm.xlblocks();
        let mut pages = 0;
        if !map.acquire(&self.ctx.env, LWLockMode::Exclusive) && !opportunistic {
            bump(&self.stats.insert_bufmapping_waits, 1);
        }
        loop {
            let next = bufmap.initialized_up_to.load(Ordering::Relaxed);
            if !opportunistic && upto < next {
                break;
            }
            let idx = ((next / BLCKSZ) % self.n_buffers) as usize;
            let old_end = xlblocks[idx].load(Ordering::Relaxed);
            if self.write_lsn() < old_end {
                if opportunistic {
                    break;
                }
                // The buffer still holds WAL that is not written: write it
                // out (or have the walwriter write it), without holding the
                // mapping lock.
                map.release(&self.ctx.env);
                if !self.wait_old_page_written(old_end) {
                    return pages;
                }
                map.acquire(&self.ctx.env, LWLockMode::Exclusive);
                continue;
            }
            self.init_page(idx, next);
            bufmap
                .initialized_up_to
                .store(next + BLCKSZ, Ordering::Relaxed);
            pages += 1;
        }
        map.release(&self.ctx.env);
        self.count_initialized(pages, opportunistic);
        pages
    }

    /// A buffer page to recycle still holds WAL below `old_end` that is not
    /// written (WALBufMappingLock not held): write it out, or in no-I/O
    /// mode have the walwriter write it. False if the server generation
    /// ended during that wait (the handle is then stale).
    fn wait_old_page_written(&mut self, old_end: Lsn) -> bool {
        let bufmap = &self.shm.xlog().bufmap;
        bufmap.buffer_full_waits.fetch_add(1, Ordering::Relaxed);
        bump(&self.stats.insert_buffer_waits, 1);
        bump(&self.stats.wal_buffers_full, 1);
        if !self.no_io {
            self.write_upto(old_end);
            return true;
        }
        self.wait_for_walwriter(old_end, WalwriterWait::Written)
    }

    /// Counts `pages` initialized by the walwriter (`opportunistic`) or by
    /// a backend, for `PaceWatch` and pg_stat_wal.
    fn count_initialized(&self, pages: u64, opportunistic: bool) {
        let bufmap = &self.shm.xlog().bufmap;
        let counter = if opportunistic {
            &bufmap.preinit_pages
        } else {
            &bufmap.backend_init_pages
        };
        counter.fetch_add(pages, Ordering::Relaxed);
        let mine = if opportunistic {
            &self.stats.pages_init_walwriter
        } else {
            &self.stats.pages_init_backend
        };
        bump(mine, pages);
    }

    /// Writes the header of the page at `page_start` into buffer `idx`,
    /// and zeroes the rest unless the walwriter is behind (`PaceWatch`).
    /// Zeroing is not needed for the files: every byte below the finished
    /// insert position is written by an inserter (records, their MAXALIGN
    /// padding, continuation headers, switch fill), and a write of a
    /// partial page sends zeros for the rest (`write_run_upto`), so the
    /// files hold what a zeroed buffer would give (tests/common's
    /// `assert_gaps_are_zero`). Skipping it saves the walwriter a pass over
    /// every page when its kernel copy bounds the insert rate; while it has
    /// time to spare the zeroing brings the page's lines into the cache
    /// ahead of the inserter (docs/benchmarks.md, the runs of
    /// `wal_insert_lock_spread = adaptive`).
    fn init_page(&self, idx: usize, page_start: Lsn) {
        let xlblocks = self.shm.xlblocks();
        // Invalidate first: a reader that still expects the old page must
        // not take the half-initialized one for it. The Release fence
        // orders the invalidation before the page writes below: a WAL
        // reader copying the page (`walread`, a seqlock reader) that sees
        // any of them sees `xlblocks[idx]` changed after its Acquire fence.
        xlblocks[idx].store(0, Ordering::Relaxed);
        shmem::sync::fence(Ordering::Release);
        // We hold WALBufMappingLock and the old page is written, so nobody
        // writes this buffer.
        let page = self.shm.wal_page_mut(idx).bytes_mut(0, XLOG_BLCKSZ);
        if !self.writer_behind() {
            page.fill(0);
        }
        walformat::write_page_header(page, &self.geo, page_start, self.tli, self.sysid, 0);
        // Release pairs with the Acquire load in `get_buffer` (and in
        // `buffer_to_write`).
        xlblocks[idx].store(page_start + BLCKSZ, Ordering::Release);
    }

    /// Walwriter: initialize buffer pages ahead of the insert position.
    pub fn preinit_buffers(&mut self) -> u64 {
        self.advance_buffers(0, true)
    }
}
