//! Inserting a record (PostgreSQL's XLogInsertRecord and
//! CopyXLogRecordToWAL). The modern path, `wal_insertion = parallel`:
//!
//! 1. the caller builds the record in local memory (`walformat::RecordBuf`,
//!    CRC of the data already computed); a logical message
//!    (`insert_message`) is instead given by its parts and assembled in
//!    step 4 straight into the buffer page, its CRC computed from the
//!    parts, never by loading back the bytes just stored (those loads would
//!    wait for the stores' cache misses on buffer lines another core wrote
//!    last), unless it continues onto another page (then it is built in
//!    local memory there and copied as below);
//! 2. take one WAL insertion lock (`insert_locks`);
//! 3. reserve `[start, end)` in usable-byte space: under the
//!    insert-position spinlock (`wal_reservation = spinlock`) or by one
//!    fetch-add (`atomic`); `xl_prev` is the start of the previous
//!    reservation; finish the CRC. The three byte positions become LSNs
//!    through `last_page` (a `walformat::PageMap` of the page converted
//!    last: no division while they stay on it);
//! 4. copy into WAL buffer pages (`get_buffer`, see `buffers`). A record
//!    continuing on a new page marks that page's header
//!    XLP_FIRST_IS_CONTRECORD with `xlp_rem_len`; the MAXALIGN padding
//!    after it is zeroed here (buffer pages are not always zeroed);
//! 5. release the insertion lock, clearing `insertingAt`.
//!
//! Steps 2-5 are recorded in our proc slot (`shmem::crit`): the lock
//! held, then the reservation (stored before the insert-position
//! spinlock, or the lock-free hand-off, is counted off), so that a helper
//! can fill the range of a process that died during step 4
//! (`crate::abandoned`).
//!
//! With `wal_insertion = single` every backend uses insertion lock 0, so the
//! reservation and the copy are serialized (PostgreSQL before 9.4).
//!
//! Lock-free reservation (`wal_reservation = atomic`): `CurrBytePos` is
//! advanced with one fetch-add, and `xl_prev` is handed over from the
//! predecessor through `shmem::prevlink` (its header states the bound the
//! table is sized from: we reserve inside an insertion lock).
//!
//! Invariants and races: the reservation is made while holding an
//! insertion lock, so whoever sees the reserved position (Acquire in
//! `reserved_bytepos`) also sees that lock taken and waits for the copy
//! (`wait_insertions_to_finish`). The bytes of `[start, end)` are ours
//! alone, and their buffer pages cannot be recycled before our insertion
//! lock is released (a writer waits for it). A WAL switch reserves the rest
//! of its segment and fills it with zero pages, or reserves nothing when
//! the insert position is already at a segment start.
//!
//! This is the hot path: no indirection, the protocol (`insert_placed`)
//! and the LSN conversion are `#[inline]`.

use super::{Inserted, Xlog, BLCKSZ};
use shmem::prevlink;
use shmem::stats::bump;
use shmem::sync::Ordering;
use shmem::variants::Reservation;
use shmem::walpage::WalPage;
use walformat::{Lsn, RecordBuf, XLOG_BLCKSZ};

/// Zeroes the MAXALIGN padding after a record that ends at `end`: the
/// buffer page is not zeroed when initialized (`Xlog::init_page`). `page`
/// is the buffer page holding `end` (if `end` is not a page boundary), and
/// the bytes up to `maxalign(end)` are the caller's to write (they end at
/// or before the page's end, which is MAXALIGNed).
#[inline]
fn zero_padding(page: WalPage, end: Lsn) {
    let pad = (walformat::maxalign(end) - end) as usize;
    if pad > 0 {
        page.fill((end % BLCKSZ) as usize, pad, 0);
    }
}

impl Xlog<'_> {
    /// Inserts a record; returns where it landed. A WAL switch at a segment
    /// start inserts nothing and returns `start == end ==` that position.
    pub fn insert(&mut self, rec: &mut RecordBuf) -> Inserted {
        let is_switch = rec.is_switch();
        self.insert_placed(rec.total_len(), is_switch, |xlog, start, end, prev| {
            rec.finish(prev);
            xlog.copy_record(rec.bytes(), start, end, is_switch);
        })
    }

    /// Inserts a logical message assembled straight into the WAL buffer
    /// page it is reserved in (no local record and copy), or,
    /// when it continues onto another page, built in `spill` and copied as
    /// `insert` does. The WAL is the same bytes either way.
    pub fn insert_message(
        &mut self,
        msg: &walformat::LogicalMessage,
        spill: &mut RecordBuf,
    ) -> Inserted {
        let len = msg.total_len();
        self.insert_placed(len, false, |xlog, start, end, prev| {
            let off = (start % BLCKSZ) as usize;
            if off + len as usize > XLOG_BLCKSZ {
                msg.build_into(spill);
                spill.finish(prev);
                xlog.copy_record(spill.bytes(), start, end, false);
                return;
            }
            let page = xlog.get_buffer(start);
            // `page` is the buffer page holding `start`, and the record's
            // `len` bytes from there lie in this page and in our
            // reservation: no other process writes them, and the page
            // cannot be recycled before our insertion lock is released.
            msg.write_into(page.bytes_mut(off, len as usize), prev);
            // The padding lies in our reservation too.
            zero_padding(page, start + len as u64);
        })
    }

    /// The insert protocol around placing one record of `len` bytes: flow
    /// control, insertion lock, reservation, then `place(self, start, end,
    /// xl_prev)` writes the record's bytes at `[start, end)`, then release
    /// and the counters.
    #[inline]
    fn insert_placed(
        &mut self,
        len: u32,
        is_switch: bool,
        place: impl FnOnce(&mut Self, Lsn, Lsn, Lsn),
    ) -> Inserted {
        // Flow control (`max_replication_lag`): before any lock is taken.
        crate::throttle::before_insert(self.ctx, len as u64, || self.insert_lsn());
        if is_switch {
            // A switch's range runs to the segment's end: never filled
            // for a dead process (`crit`).
            self.ctx.me.crit.enter(shmem::crit::IN_WAL_SWITCH);
        }
        let lock = self.acquire_insert_lock();
        let placed = if is_switch {
            self.reserve_switch()
        } else {
            Some(self.reserve(len as u64))
        };
        let Some((start_pos, end_pos, prev_pos)) = placed else {
            self.release_insert_lock(lock);
            self.ctx.me.crit.exit(shmem::crit::IN_WAL_SWITCH);
            let at = self.insert_lsn();
            return Inserted { start: at, end: at };
        };
        let start = self.bytepos_to_lsn(start_pos, false);
        let end = self.bytepos_to_lsn(end_pos, true);
        let prev = self.bytepos_to_lsn(prev_pos, false);
        place(self, start, end, prev);
        self.release_insert_lock(lock);
        if is_switch {
            self.ctx.me.crit.exit(shmem::crit::IN_WAL_SWITCH);
        }

        // One count per record serves pg_stat_wal, the postmaster's summary
        // and walbench (`shmem::stats`: written by us only, never reset).
        bump(&self.stats.wal_records, 1);
        bump(&self.stats.wal_bytes, len as u64);
        if start / BLCKSZ != end / BLCKSZ {
            self.note_page_completed(end);
        }
        Inserted { start, end }
    }

    /// Finishes the insertion of a process that died holding WAL
    /// insertion lock `lock` (`crate::abandoned`): takes the lock over,
    /// fills the range it had reserved, if any (usable-byte positions
    /// `(start, end, prev)`), with a filler record of exactly its size
    /// (`walformat::filler_record_into`: valid, chained through `xl_prev`,
    /// CRC'd), and releases the lock to its waiters, so that flushing
    /// goes on past it. Returns where the filler went.
    ///
    /// Sound only as `abandoned::assess` checks: the dead holder had not
    /// advertised any progress (`insertingAt` 0), so no byte of its range
    /// can have been written out, and nobody else touches the lock or the
    /// range meanwhile.
    pub fn finish_abandoned_insertion(
        &mut self,
        lock: usize,
        range: Option<(u64, u64, u64)>,
    ) -> Option<Inserted> {
        let l = self.shm.insert_lock(lock);
        self.ctx
            .env
            .adopt(&l.lock, shmem::lwlock::LWLockMode::Exclusive);
        self.ctx.me.crit.hold_insert_lock(lock);
        self.holding = Some(lock);
        let filled = range.map(|(start_pos, end_pos, prev_pos)| {
            let start = self.bytepos_to_lsn(start_pos, false);
            let end = self.bytepos_to_lsn(end_pos, true);
            let prev = self.bytepos_to_lsn(prev_pos, false);
            let mut rec = RecordBuf::default();
            walformat::filler_record_into(&mut rec, (end_pos - start_pos) as usize);
            rec.finish(prev);
            self.copy_record(rec.bytes(), start, end, false);
            Inserted { start, end }
        });
        self.release_insert_lock(lock);
        filled
    }

    /// `bytepos_to_recptr(pos)` (with `end`, `bytepos_to_end_recptr`),
    /// through [`Xlog::last_page`]; off it, the map moves to `pos`'s page
    /// (one dividing conversion) and converts there.
    #[inline]
    fn bytepos_to_lsn(&mut self, pos: u64, end: bool) -> Lsn {
        if let Some(lsn) = self.last_page.lsn(pos, end) {
            return lsn;
        }
        self.last_page = self.geo.page_map(pos);
        self.last_page
            .lsn(pos, end)
            .expect("a page map covers the position it was made for")
    }

    /// Reserves `size` bytes (MAXALIGNed here); returns (start, end, prev)
    /// in usable-byte space. Inlined into the insertion: once per record,
    /// between two atomics whose latency it should not add a call to.
    #[inline]
    fn reserve(&self, size: u64) -> (u64, u64, u64) {
        let size = walformat::maxalign(size);
        let ins = &self.shm.xlog().insert;
        match self.reservation {
            Reservation::Spinlock => {
                let crit = &self.ctx.me.crit;
                ins.lock.lock_in(crit);
                let start = ins.curr_byte_pos.load(Ordering::Relaxed);
                let prev = ins.prev_byte_pos.load(Ordering::Relaxed);
                // Release pairs with the Acquire load in `reserved_bytepos`
                // (the insert spinlock's release does not: readers of the
                // insert position do not take it).
                ins.curr_byte_pos.store(start + size, Ordering::Release);
                ins.prev_byte_pos.store(start, Ordering::Relaxed);
                // Known before the spinlock is counted off (`crit`).
                crit.set_range(start, start + size, prev);
                ins.lock.unlock_in(crit);
                (start, start + size, prev)
            }
            Reservation::Atomic => {
                // AcqRel: the fetch-add orders reservations; the hand-off of
                // xl_prev goes through the prev-link table.
                let crit = &self.ctx.me.crit;
                crit.enter(shmem::crit::IN_RESERVATION);
                let start = ins.curr_byte_pos.fetch_add(size, Ordering::AcqRel);
                let end = start + size;
                let prev = prevlink::hand_off(self.shm.prev_links(), start, end);
                crit.set_range(start, end, prev);
                crit.exit(shmem::crit::IN_RESERVATION);
                (start, end, prev)
            }
        }
    }

    /// Reserves a WAL switch record and the rest of its segment; None when
    /// the insert position is already at a segment start.
    fn reserve_switch(&self) -> Option<(u64, u64, u64)> {
        let size = walformat::maxalign(walformat::SIZE_OF_XLOG_RECORD as u64);
        let ins = &self.shm.xlog().insert;
        let geo = self.geo;
        let switch_end = |start: u64| -> Option<u64> {
            if geo.seg_offset(geo.bytepos_to_end_recptr(start)) == 0 {
                return None;
            }
            let end_ptr = geo.bytepos_to_end_recptr(start + size);
            let left = geo.seg_size - geo.seg_offset(end_ptr);
            let end_ptr = if left != geo.seg_size {
                end_ptr + left
            } else {
                end_ptr
            };
            Some(geo.recptr_to_bytepos(end_ptr))
        };
        match self.reservation {
            Reservation::Spinlock => {
                ins.lock.lock();
                let start = ins.curr_byte_pos.load(Ordering::Relaxed);
                let prev = ins.prev_byte_pos.load(Ordering::Relaxed);
                let r = switch_end(start).map(|end| {
                    // Release: as in `reserve`.
                    ins.curr_byte_pos.store(end, Ordering::Release);
                    ins.prev_byte_pos.store(start, Ordering::Relaxed);
                    (start, end, prev)
                });
                ins.lock.unlock();
                r
            }
            Reservation::Atomic => {
                let mut start = ins.curr_byte_pos.load(Ordering::Relaxed);
                loop {
                    let end = switch_end(start)?;
                    // AcqRel: as the fetch-add in `reserve` (its Release half
                    // pairs with the Acquire load in `reserved_bytepos`).
                    match ins.curr_byte_pos.compare_exchange_weak(
                        start,
                        end,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            let prev = prevlink::hand_off(self.shm.prev_links(), start, end);
                            return Some((start, end, prev));
                        }
                        Err(v) => start = v,
                    }
                }
            }
        }
    }

    /// Copies a reserved record into the WAL buffers (CopyXLogRecordToWAL).
    fn copy_record(&mut self, bytes: &[u8], start: Lsn, end: Lsn, is_switch: bool) {
        let mut ptr = start;
        let mut rest = bytes;
        let mut page = self.get_buffer(ptr);
        loop {
            let off = (ptr % BLCKSZ) as usize;
            let n = rest.len().min(XLOG_BLCKSZ - off);
            // `page` is the buffer page holding `ptr`, which lies in our
            // reservation: no other process writes these bytes, and the
            // page cannot be recycled before our insertion lock is released.
            page.write(off, &rest[..n]);
            rest = &rest[n..];
            ptr += n as u64;
            if rest.is_empty() {
                break;
            }
            crate::stoppoint::reached("insert_copy");
            // Continue on the next page: mark it as a continuation.
            page = self.get_buffer(ptr);
            // The first bytes of this page (its header) belong to the
            // record that continues onto it — ours.
            let hdr = walformat::write_page_header(
                page.bytes_mut(0, XLOG_BLCKSZ),
                &self.geo,
                ptr,
                self.tli,
                self.sysid,
                rest.len() as u32,
            );
            ptr += hdr as u64;
        }
        // `page` holds `ptr` (unless `ptr` is its end, when there is no
        // padding), and the padding lies in our reservation.
        zero_padding(page, ptr);
        if is_switch {
            self.fill_switch_pages(walformat::maxalign(ptr), end);
        }
    }

    /// After a switch record: zero the rest of its page, and make every
    /// remaining page of the segment exist in the buffers (so it can be
    /// written), all zeros, header included, as PostgreSQL leaves them.
    fn fill_switch_pages(&mut self, from: Lsn, end: Lsn) {
        let tail = (from % BLCKSZ) as usize;
        if tail != 0 {
            let page = self.get_buffer(from);
            // The rest of the page from `from` is inside our reservation
            // (it runs to the end of the segment).
            page.fill(tail, XLOG_BLCKSZ - tail, 0);
        }
        let mut ptr = from.div_ceil(BLCKSZ) * BLCKSZ;
        while ptr < end {
            let page = self.get_buffer(ptr);
            // The whole page is inside our reservation.
            page.fill(0, XLOG_BLCKSZ, 0);
            ptr += BLCKSZ;
        }
    }

    /// After a record crossed into a new page: ask for that WAL to be
    /// written, and wake the walwriter when a quarter of the buffers is
    /// waiting to be written.
    fn note_page_completed(&self, end: Lsn) {
        let w = &self.shm.xlog().write;
        let complete = end - end % BLCKSZ;
        w.req_write.fetch_max(complete, Ordering::Relaxed);
        let written = w.write_result.load(Ordering::Relaxed);
        if complete.saturating_sub(written) >= self.n_buffers * BLCKSZ / 4 {
            self.shm.xlog().walwriter_latch.set();
        }
    }
}
