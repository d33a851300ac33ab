//! Whether the walwriter keeps up with the inserters
//! (`wal_insert_lock_spread = adaptive`): the walwriter judges it
//! ([`PaceWatch`]), backends read the judgement (`Xlog::writer_behind`).
//!
//! Why leave a CPU to the walwriter: it writes what the inserters copy,
//! about as much work per byte (the kernel's copy into the page cache).
//! With inserters copying on every CPU it runs only when they are
//! preempted, falls behind, and the inserters meet buffer pages still
//! holding unwritten WAL: they write them themselves under WALWriteLock and
//! initialize most pages. One inserter lock fewer than CPUs pipelines copy
//! and write instead. With small records, where the walwriter has little to
//! write and sleeps often, parallel copies pay, hence a judgement rather
//! than a fixed spread: `behind` selects one lock fewer than CPUs
//! (`insert_locks`), and
//! while it is set `init_page` skips zeroing pages (`buffers`).
//! Tried and dropped: the inserter that finds a full buffer sleeps while
//! the walwriter writes it (as library workers do): the walwriter then
//! does all the writing while still competing for a CPU.
//!
//! The flag is a hint (Relaxed): any insertion lock is correct for any
//! insertion, and a page is correct zeroed or not.

use super::Xlog;
use shmem::sync::Ordering;
use shmem::Shmem;

/// The walwriter's judgement of whether it keeps up with the inserters
/// (`wal_insert_lock_spread = adaptive`), made every
/// `PACE_WINDOW` from two measures of that window: the share of buffer
/// pages backends initialized themselves, and the walwriter's duty cycle
/// (the part of the time it was not asleep on its latch). When backends
/// initialized most pages and the walwriter hardly slept, inserters on
/// every CPU are starving the process that writes what they copy:
/// `WriterPace::behind` is set, and backends leave a CPU to the walwriter
/// by spreading over one lock fewer than CPUs
/// (`insert_locks::insert_locks_leaving_a_cpu`).
/// It is cleared when the walwriter has time to spare (duty below
/// `PACE_BUSY`): the page share cannot judge that, since with the spare
/// CPU the walwriter pre-initializes nearly every page. With every lock in
/// use, large records drive the page share past a half and the duty past
/// 80 %; small records leave the walwriter asleep a good part of the time.
#[derive(Debug)]
pub struct PaceWatch {
    /// When the window began, and the page counters (backends, walwriter)
    /// then.
    since: std::time::Instant,
    pages: (u64, u64),
    /// Time the walwriter slept on its latch in this window.
    slept: std::time::Duration,
}

/// How long one judgement's window lasts.
const PACE_WINDOW: std::time::Duration = std::time::Duration::from_millis(50);
/// Backends' share of page initializations (percent) that sets `behind`.
const PACE_FALL_BEHIND: u64 = 50;
/// The walwriter's duty cycle (percent) at or above which it counts as
/// busy: needed to set `behind`, and `behind` is cleared below it.
const PACE_BUSY: u64 = 60;
/// Fewest pages in a window for the page share to count: the walwriter
/// pre-initializes in sweeps of up to every buffer at once.
const PACE_MIN_BUFFERS: u64 = 2;

/// One window's measures.
#[derive(Clone, Copy, Debug)]
struct PaceWindow {
    by_backends: u64,
    by_walwriter: u64,
    /// Percent of the window the walwriter was awake.
    duty: u64,
    /// `PACE_MIN_BUFFERS` times `wal_buffers`, in pages.
    min_pages: u64,
}

/// Whether the walwriter counts as behind after window `w`.
fn writer_behind(was_behind: bool, w: PaceWindow) -> bool {
    let busy = w.duty >= PACE_BUSY;
    if was_behind {
        return busy;
    }
    let pages = w.by_backends + w.by_walwriter;
    busy && pages >= w.min_pages && w.by_backends * 100 >= PACE_FALL_BEHIND * pages
}

impl PaceWatch {
    pub fn new(shm: &Shmem) -> PaceWatch {
        Self::window_from(std::time::Instant::now(), Self::page_counters(shm))
    }

    /// A window beginning at `since` with the page counters `pages`.
    fn window_from(since: std::time::Instant, pages: (u64, u64)) -> PaceWatch {
        PaceWatch {
            since,
            pages,
            slept: std::time::Duration::ZERO,
        }
    }

    /// The walwriter slept `d` on its latch.
    pub fn note_sleep(&mut self, d: std::time::Duration) {
        self.slept += d;
    }

    /// Pages initialized so far by backends and by the walwriter.
    fn page_counters(shm: &Shmem) -> (u64, u64) {
        let bufmap = &shm.xlog().bufmap;
        // Relaxed: statistics counters; a judgement off by a few pages
        // only moves the window's edge.
        (
            bufmap.backend_init_pages.load(Ordering::Relaxed),
            bufmap.preinit_pages.load(Ordering::Relaxed),
        )
    }

    /// One walwriter round: judge the window once it is over, and publish
    /// the judgement.
    pub fn observe(&mut self, shm: &Shmem) {
        let at = std::time::Instant::now();
        let elapsed = at - self.since;
        if elapsed < PACE_WINDOW {
            return;
        }
        let now = Self::page_counters(shm);
        let asleep = (self.slept.as_micros() * 100 / elapsed.as_micros().max(1)) as u64;
        let w = PaceWindow {
            by_backends: now.0.wrapping_sub(self.pages.0),
            by_walwriter: now.1.wrapping_sub(self.pages.1),
            duty: 100u64.saturating_sub(asleep),
            min_pages: PACE_MIN_BUFFERS * shm.layout().n_buffers as u64,
        };
        *self = Self::window_from(at, now);
        let pace = &shm.xlog().writer_pace.behind;
        // Relaxed: a hint (see `Xlog::locks_to_use`).
        let was = pace.load(Ordering::Relaxed) != 0;
        let is = writer_behind(was, w);
        if is != was {
            pace.store(is as u32, Ordering::Relaxed);
        }
    }
}

impl Xlog<'_> {
    /// Whether the walwriter's `PaceWatch` says it falls behind (never
    /// unless `wal_insert_lock_spread = adaptive`).
    pub(super) fn writer_behind(&self) -> bool {
        // Relaxed: a hint; any insertion lock is correct for any insertion,
        // and a page is correct zeroed or not (`init_page`).
        self.shm.xlog().writer_pace.behind.load(Ordering::Relaxed) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walwriter_is_behind_while_backends_initialize_most_pages_and_it_hardly_sleeps() {
        let w = |by_backends, by_walwriter, duty| PaceWindow {
            by_backends,
            by_walwriter,
            duty,
            min_pages: 4096,
        };
        // 1 kB records, all locks: backends 78 % of the pages, duty 85 %.
        assert!(writer_behind(false, w(8000, 2200, 85)));
        // ... but a walwriter with time to spare is not behind.
        assert!(!writer_behind(false, w(8000, 2200, 40)));
        // 16 B records at 256 clients: share 39 %, duty 78 %.
        assert!(!writer_behind(false, w(400, 620, 78)));
        // Too few pages to judge the share.
        assert!(!writer_behind(false, w(3000, 0, 90)));
        // Behind: stays so while busy, whatever the share (the spare CPU
        // lets the walwriter pre-initialize nearly every page).
        assert!(writer_behind(true, w(0, 9000, 82)));
        assert!(!writer_behind(true, w(0, 9000, 30)));
    }
}
