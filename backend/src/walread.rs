//! Reading WAL records incrementally, page by page: from the shared WAL
//! buffers while they still hold a page, from the segment files (`pread`
//! of one page) once they do not. Nonblocking: [`WalRead::next_record`]
//! returns the next complete record that ends at or below the caller's
//! bound, or `None` when there is none yet; the caller decides what the
//! bound is (the flush position, [`flushed_upto`], or the position below
//! which every insertion finished, [`inserted_upto`]) and how to wait
//! (`shmem::readwake`). Used by the worker library's `Reader`; meant for
//! the logical-decoding walsender too.
//!
//! Algorithm, for each record:
//!
//! 1. resolve the reader's position to a record start: at a page boundary
//!    skip the page header (and, for the very first record of a read begun
//!    at a page boundary, the tail of a record begun earlier, as
//!    `XLogFindNextRecord`); every page read gets its header validated by
//!    walformat's [`PageCheck`];
//! 2. read `xl_tot_len` (always on the record's first page: records start
//!    8-aligned), compute where the record ends (byte positions skip page
//!    headers, `Geometry`), and stop with `None` if that is past the bound;
//! 3. gather the record's bytes across pages (and segments), each
//!    continuation page checked for `XLP_FIRST_IS_CONTRECORD` and the
//!    right `xlp_rem_len`; decode with walformat's
//!    [`decode_record_bytes`] (length, rmgr, CRC-32C, block headers) and
//!    check `xl_prev` against the previous record.
//!
//! Getting a page (step 1 and 3). Buffer `i` can only hold the page whose
//! end LSN is `xlblocks[i]`, `i = (page / BLCKSZ) % n_buffers`. The copy is
//! a seqlock read: load `xlblocks[i]` (Acquire, pairs with the Release
//! store in `Xlog::init_page`), copy the bytes below the bound, an Acquire
//! fence, load `xlblocks[i]` again; `init_page` stores 0 there and issues
//! a Release fence before it touches the page, so a copy that saw any
//! byte of a recycled page sees the second load differ, and the page is
//! read from its segment file instead. A page is only recycled once its
//! WAL is written, so the file then holds it. One page is cached, with
//! how far its bytes are valid (the bound when it was copied): a later
//! call with a higher bound copies it again.
//!
//! Invariants:
//! - only bytes below the caller's bound are used: they are final (every
//!   insertion below the bound finished; for the flush position, also on
//!   disk). The bound is taken before the copy with Acquire (or an Acquire
//!   fence after the insertion-lock scan), so the inserters' bytes below it
//!   are visible;
//! - a file page is read from a segment the checkpointer has not removed:
//!   `ReplCtl::removed_below_seg` (published before removal, SeqCst) is
//!   checked before opening and after each `pread`, as the walsender does;
//!   a removed segment is [`ReadError::Removed`], never recycled bytes;
//! - without shared memory (`shm = None`: a data directory alone) the
//!   files are read as `walformat::WalReader` reads them: a zeroed page or
//!   a zero length at a record start, or an absent segment, is the end of
//!   WAL (`None`, and the cached page is dropped so the next call reads the
//!   file again); anything invalid is an error.

use crate::walfile::{self, Op};
use shmem::sync::{fence, Ordering};
use shmem::Shmem;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use walformat::{
    decode_record_bytes, format_lsn, maxalign, DecodedRecord, Geometry, Lsn, PageCheck, PageUse,
    WalError, SIZE_OF_XLOG_LONG_PHD, SIZE_OF_XLOG_RECORD, XLOG_BLCKSZ, XLP_FIRST_IS_CONTRECORD,
};

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

/// Why a read failed.
#[derive(Debug)]
pub enum ReadError {
    /// The WAL is invalid, or a segment file could not be read.
    Wal(WalError),
    /// The checkpointer removed (or is removing) the segment holding `lsn`.
    Removed {
        /// The position being read.
        lsn: Lsn,
        /// The segment file's name.
        segment: String,
    },
    /// The control file could not be read (no shared memory given).
    Control(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Wal(e) => e.fmt(f),
            ReadError::Removed { lsn, segment } => write!(
                f,
                "requested WAL segment {segment} has already been removed (needed for {})",
                format_lsn(*lsn)
            ),
            ReadError::Control(e) => write!(f, "could not read the control file: {e}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<WalError> for ReadError {
    fn from(e: WalError) -> ReadError {
        ReadError::Wal(e)
    }
}

/// The flush position of `shm`: WAL below it is durable. Acquire pairs
/// with the Release `fetch_max` of `flush_result` in `Xlog::xlog_write`.
pub fn flushed_upto(shm: &Shmem) -> Lsn {
    let w = &shm.repl().walrcv;
    if w.in_recovery() {
        // A standby: what its startup process validated (the walreceiver
        // wrote and fdatasynced it before) is the WAL readers may read.
        return w.replayed_upto.load(Ordering::Acquire);
    }
    shm.xlog().write.flush_result.load(Ordering::Acquire)
}

/// How long [`inserted_upto`] watches an insertion lock whose holder has
/// not advertised a position (it copies one record: a microsecond or two)
/// before it settles for the write position.
pub const COPY_SPIN: Duration = Duration::from_micros(20);

/// A position below which every insertion into `shm`'s WAL buffers has
/// finished (PostgreSQL's WaitXLogInsertionsToFinish, without sleeping):
/// the reserved position, lowered to the advertised `insertingAt` of each
/// insertion lock held. A lock held with no position advertised is an
/// insertion whose start is unknown: it is watched for at most
/// [`COPY_SPIN`] until it is seen free or advertising (a later holder
/// seen free-then-held reserved after our look at the reserved position,
/// so it does not matter); if it stays so, only the write position is
/// sure. Never below `known` (what the caller saw before: finished
/// insertions stay finished).
pub fn inserted_upto(shm: &Shmem, geo: &Geometry, known: Lsn) -> Lsn {
    let x = shm.xlog();
    // Whoever sees a reservation sees the insertion lock its reserver took
    // before it (the same reasoning as `wait_insertions_to_finish`).
    let reserved = crate::xlog::reserved_end(shm, geo);
    let mut finished = reserved;
    for i in 0..shm.n_insert_locks() {
        let l = shm.insert_lock(i);
        let mut spin_until = None;
        loop {
            if l.lock.is_free() {
                break;
            }
            // Acquire pairs with the Release store of `update_var` /
            // `release_clear_var`.
            let at = l.inserting_at.load(Ordering::Acquire);
            if at != 0 {
                finished = finished.min(at);
                break;
            }
            let now = Instant::now();
            if *spin_until.get_or_insert(now + COPY_SPIN) <= now {
                // Acquire pairs with the Release fetch_max in
                // `advance_results`: WAL below it was finished and written.
                finished = finished.min(x.write.write_result.load(Ordering::Acquire));
                break;
            }
            std::hint::spin_loop();
        }
    }
    // Pairs with the Release (SeqCst) fetch_sub of the lock releases seen
    // free above: the released insertions' bytes are visible.
    fence(Ordering::Acquire);
    finished.max(known)
}

/// Where the page being read came from (tests and counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageSources {
    /// Pages copied from the shared WAL buffers.
    pub buffers: u64,
    /// Pages read from segment files.
    pub files: u64,
    /// Buffer copies found recycled by the second `xlblocks` load.
    pub recycled: u64,
}

/// An incremental WAL reader (see the module header).
pub struct WalRead<'a> {
    shm: Option<&'a Shmem>,
    pg_wal: PathBuf,
    geo: Geometry,
    tli: u32,
    check: PageCheck,
    /// Where the next record starts (`EndRecPtr` form: may be a page
    /// boundary).
    next: Lsn,
    /// Start of the last record returned (the next one's `xl_prev`).
    prev: Option<Lsn>,
    /// No record returned yet (a start at a page boundary may skip a
    /// continuation).
    first: bool,
    /// The cached page: its start, and below which LSN its bytes are valid.
    page: Box<[u8]>,
    page_at: Option<Lsn>,
    page_valid: Lsn,
    /// The open segment file and its name.
    file: Option<(u64, File)>,
    /// Name of the segment of the last page got (for messages).
    seg_name: (u64, String),
    /// The record being gathered.
    rec: Vec<u8>,
    sources: PageSources,
}

impl<'a> WalRead<'a> {
    /// A reader of `datadir`'s WAL from `from` (a record start, or a page
    /// or segment boundary: then the first record that begins on or after
    /// it). With `shm`, pages still in its WAL buffers are copied from
    /// there and the WAL's geometry, timeline and system identifier are
    /// the server's; without, they come from the control file.
    pub fn new(shm: Option<&'a Shmem>, datadir: &Path, from: Lsn) -> Result<Self, ReadError> {
        let (geo, tli, sysid) = match shm {
            Some(shm) => {
                let f = &shm.xlog().facts;
                let geo =
                    Geometry::new(f.seg_size).map_err(|e| ReadError::Control(e.to_string()))?;
                (geo, f.timeline(), f.system_identifier)
            }
            None => {
                let c = crate::control::ControlFile::read(datadir)
                    .map_err(|e| ReadError::Control(e.to_string()))?;
                let geo =
                    Geometry::new(c.seg_size).map_err(|e| ReadError::Control(e.to_string()))?;
                (geo, c.timeline, c.system_identifier)
            }
        };
        Ok(WalRead::with_geometry(
            shm,
            &datadir.join("pg_wal"),
            geo,
            tli,
            sysid,
            from,
        ))
    }

    /// [`WalRead::new`] with the directory of the segment files and the
    /// WAL's facts given.
    pub fn with_geometry(
        shm: Option<&'a Shmem>,
        pg_wal: &Path,
        geo: Geometry,
        tli: u32,
        sysid: u64,
        from: Lsn,
    ) -> Self {
        WalRead {
            shm,
            pg_wal: pg_wal.to_path_buf(),
            geo,
            tli,
            check: PageCheck::new(geo, tli, Some(sysid)),
            next: from,
            prev: None,
            first: true,
            page: vec![0u8; XLOG_BLCKSZ].into_boxed_slice(),
            page_at: None,
            page_valid: 0,
            file: None,
            seg_name: (u64::MAX, String::new()),
            rec: Vec::new(),
            sources: PageSources::default(),
        }
    }

    /// Where the next record starts (resume a later reader from here).
    pub fn position(&self) -> Lsn {
        self.next
    }

    /// The WAL's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Where the pages read so far came from.
    pub fn sources(&self) -> PageSources {
        self.sources
    }

    /// The next complete record that ends at or below `upto`; `Ok(None)`
    /// when there is none yet (or, without shared memory, at the end of
    /// the valid WAL in the files).
    pub fn next_record(&mut self, upto: Lsn) -> Result<Option<DecodedRecord>, ReadError> {
        let r = self.read_record(upto);
        if self.shm.is_none() && !matches!(r, Ok(Some(_))) {
            // The files may still grow: read them again next time.
            self.page_at = None;
        }
        r
    }

    fn read_record(&mut self, upto: Lsn) -> Result<Option<DecodedRecord>, ReadError> {
        let Some(start) = self.record_start(upto)? else {
            return Ok(None);
        };
        // Step 2: the length, on the page `record_start` left cached.
        let off = (start % BLCKSZ) as usize;
        let tot_len = u32::from_le_bytes(self.page[off..off + 4].try_into().expect("4 bytes"));
        if tot_len == 0 && self.shm.is_none() {
            return Ok(None);
        }
        if !(SIZE_OF_XLOG_RECORD..=walformat::MAX_RECORD_LEN).contains(&(tot_len as usize)) {
            return Err(WalError::BadLength {
                lsn: start,
                len: tot_len,
            }
            .into());
        }
        let end = self
            .geo
            .bytepos_to_end_recptr(self.geo.recptr_to_bytepos(start) + u64::from(tot_len));
        if end > upto {
            return Ok(None);
        }
        // Step 3: gather, decode, check the chain.
        if !self.gather(start, tot_len, upto)? {
            return Ok(None);
        }
        let mut rec = decode_record_bytes(start, &self.rec)?;
        if let Some(expected) = self.prev {
            if rec.prev != expected {
                return Err(WalError::BadPrev {
                    lsn: start,
                    expected,
                    found: rec.prev,
                }
                .into());
            }
        }
        rec.end = end;
        rec.next = maxalign(end);
        let is_switch = rec.rmid == walformat::RM_XLOG_ID
            && rec.info & walformat::XLR_RMGR_INFO_MASK == walformat::XLOG_SWITCH;
        if is_switch && self.geo.seg_offset(rec.next) != 0 {
            rec.next = self.geo.seg_start(self.geo.seg_no(rec.next) + 1);
        }
        self.next = rec.next;
        self.prev = Some(start);
        self.first = false;
        Ok(Some(rec))
    }

    /// Step 1: the LSN of the next record's first byte, its page cached
    /// and validated; None when it lies at or past `upto` (or the files
    /// end there).
    fn record_start(&mut self, upto: Lsn) -> Result<Option<Lsn>, ReadError> {
        let mut pos = self.next;
        loop {
            let page = pos - pos % BLCKSZ;
            let data_start = page + self.geo.page_header_size_at(page) as u64;
            if pos.max(data_start) >= upto || !self.load_page(page, upto, pos)? {
                return Ok(None);
            }
            self.note_segment(page);
            let hdr_bytes = &self.page[..SIZE_OF_XLOG_LONG_PHD];
            let name = &self.seg_name.1;
            let Some(hdr) = self
                .check
                .check(page, hdr_bytes, PageUse::RecordStart, name)?
            else {
                return Ok(None);
            };
            let at_page_start = pos == page || pos == data_start;
            if !at_page_start || hdr.info & XLP_FIRST_IS_CONTRECORD == 0 {
                return Ok(Some(pos.max(data_start)));
            }
            if !(self.first && pos == page) {
                return Err(WalError::UnexpectedContinuation {
                    lsn: pos,
                    file: self.seg_name.1.clone(),
                    offset: self.geo.seg_offset(page),
                }
                .into());
            }
            // XLogFindNextRecord: skip the tail of a record begun earlier.
            let skip = maxalign(u64::from(hdr.rem_len));
            pos = if skip < page + BLCKSZ - data_start {
                data_start + skip
            } else {
                page + BLCKSZ
            };
            self.next = pos;
        }
    }

    /// Step 3: gathers the `tot_len` bytes of the record at `start` into
    /// `self.rec`. False if a file ends before (no shared memory only).
    fn gather(&mut self, start: Lsn, tot_len: u32, upto: Lsn) -> Result<bool, ReadError> {
        self.rec.clear();
        let mut pos = start;
        let mut left = tot_len as usize;
        loop {
            let page = pos - pos % BLCKSZ;
            if !self.load_page(page, upto, start)? {
                return Ok(false);
            }
            let off = (pos - page) as usize;
            let chunk = left.min(XLOG_BLCKSZ - off);
            self.rec.extend_from_slice(&self.page[off..off + chunk]);
            left -= chunk;
            if left == 0 {
                return Ok(true);
            }
            let next_page = page + BLCKSZ;
            if !self.load_page(next_page, upto, start)? {
                return Err(WalError::MissingSegment {
                    lsn: start,
                    path: self.segment_path(self.geo.seg_no(next_page)),
                }
                .into());
            }
            self.note_segment(next_page);
            let usage = PageUse::Continuation {
                lsn: start,
                rem_len: left as u32,
            };
            let hdr_bytes = &self.page[..SIZE_OF_XLOG_LONG_PHD];
            self.check
                .check(next_page, hdr_bytes, usage, &self.seg_name.1)?;
            pos = next_page + self.geo.page_header_size_at(next_page) as u64;
        }
    }

    /// Makes the page at `page` the cached one, valid up to `upto` (or its
    /// end). False only without shared memory, when its segment file does
    /// not exist. `lsn`: the position read, for messages.
    fn load_page(&mut self, page: Lsn, upto: Lsn, lsn: Lsn) -> Result<bool, ReadError> {
        let want = (page + BLCKSZ).min(upto);
        if self.page_at == Some(page) && self.page_valid >= want {
            return Ok(true);
        }
        self.page_at = None;
        if let Some(shm) = self.shm {
            if self.copy_from_buffers(shm, page, want) {
                self.sources.buffers += 1;
                self.page_at = Some(page);
                self.page_valid = want;
                return Ok(true);
            }
        }
        if !self.read_from_file(page, lsn)? {
            return Ok(false);
        }
        self.sources.files += 1;
        self.page_at = Some(page);
        self.page_valid = want;
        Ok(true)
    }

    /// Copies the bytes of `page` below `want` from the WAL buffer that
    /// should hold it (the seqlock read of the module header); false if it
    /// does not hold it, before or after the copy.
    fn copy_from_buffers(&mut self, shm: &Shmem, page: Lsn, want: Lsn) -> bool {
        let xlblocks = shm.xlblocks();
        let idx = ((page / BLCKSZ) % xlblocks.len() as u64) as usize;
        let expected_end = page + BLCKSZ;
        // Acquire pairs with the Release store in `Xlog::init_page`: the
        // page header (and, below the caller's bound, the records) are
        // visible.
        if xlblocks[idx].load(Ordering::Acquire) != expected_end {
            return false;
        }
        let len = (want - page) as usize;
        // The bytes below `want` are final (every insertion below the
        // caller's bound finished); if the buffer is recycled during the
        // copy, the bytes copied are garbage and the check below discards
        // them.
        shm.copy_wal_page(idx, &mut self.page[..len]);
        #[cfg(test)]
        tests::after_copy_hook(shm, idx);
        // Pairs with the Release fence after the invalidating store in
        // `Xlog::init_page`: a copy that saw a byte of the recycled page
        // sees `xlblocks[idx]` changed.
        fence(Ordering::Acquire);
        if xlblocks[idx].load(Ordering::Relaxed) != expected_end {
            self.sources.recycled += 1;
            return false;
        }
        true
    }

    /// Reads `page` from its segment file with one `pread`. False if the
    /// file does not exist (no shared memory); with shared memory that, or
    /// a removal seen after the read, is [`ReadError::Removed`].
    fn read_from_file(&mut self, page: Lsn, lsn: Lsn) -> Result<bool, ReadError> {
        let segno = self.geo.seg_no(page);
        if self.removed(segno) {
            return Err(self.removed_error(segno, lsn));
        }
        if !matches!(&self.file, Some((n, _)) if *n == segno) {
            self.file = None;
            let path = self.segment_path(segno);
            match walfile::open_read(Op::WalRead, &path) {
                Ok(f) => self.file = Some((segno, f)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if self.shm.is_some() {
                        return Err(self.removed_error(segno, lsn));
                    }
                    return Ok(false);
                }
                Err(error) => return Err(WalError::Io { lsn, path, error }.into()),
            }
        }
        let (_, f) = self.file.as_ref().expect("opened above");
        let offset = self.geo.seg_offset(page);
        if let Err(error) = walfile::read_at(Op::WalRead, f, &mut self.page, offset) {
            let path = self.segment_path(segno);
            self.file = None;
            return Err(WalError::Io { lsn, path, error }.into());
        }
        if self.removed(segno) {
            return Err(self.removed_error(segno, lsn));
        }
        Ok(true)
    }

    fn removed(&self, segno: u64) -> bool {
        // SeqCst: pairs with the checkpointer's store in
        // `slots::removal_cutoff`, made before it removes anything.
        self.shm
            .is_some_and(|s| s.repl().removed_below_seg.load(Ordering::SeqCst) > segno)
    }

    fn removed_error(&mut self, segno: u64, lsn: Lsn) -> ReadError {
        self.file = None;
        ReadError::Removed {
            lsn,
            segment: self.geo.file_name(self.tli, segno),
        }
    }

    fn segment_path(&self, segno: u64) -> PathBuf {
        self.pg_wal.join(self.geo.file_name(self.tli, segno))
    }

    /// Makes `seg_name` the name of the segment file holding `page` (for
    /// the page checks' messages).
    fn note_segment(&mut self, page: Lsn) {
        let segno = self.geo.seg_no(page);
        if self.seg_name.0 != segno {
            self.seg_name = (segno, self.geo.file_name(self.tli, segno));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmem::settings::Settings;
    use std::cell::RefCell;
    use walformat::{logical_message, SegmentWriter};

    type Hook = Box<dyn FnMut(&Shmem, usize)>;

    thread_local! {
        /// Runs between a buffer copy and its re-check (tests only).
        static AFTER_COPY: RefCell<Option<Hook>> = RefCell::new(None);
    }

    pub(super) fn after_copy_hook(shm: &Shmem, idx: usize) {
        AFTER_COPY.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f(shm, idx)
            }
        });
    }

    const SYSID: u64 = 4242;

    /// WAL of 1 MiB segments from segment 1 on: small records, records of
    /// several pages and one that crosses into segment 2, written to
    /// files, with the last `n_buffers` pages also in the WAL buffers of a
    /// segment made for the test (as a server leaves them).
    struct Wal {
        dir: PathBuf,
        geo: Geometry,
        start: Lsn,
        end: Lsn,
        /// (LSN, payload length) of every record.
        records: Vec<(Lsn, usize)>,
        shm: Shmem,
    }

    impl Drop for Wal {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn wal(tag: &str, n_buffers: u32) -> Wal {
        let geo = Geometry::new(1 << 20).unwrap();
        let dir = std::env::temp_dir().join(format!("walread-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let start = geo.seg_start(1);
        let mut w = SegmentWriter::new(geo, 1, SYSID, start, 0);
        let mut records = Vec::new();
        let mut k = 0usize;
        while w.insert_pos() < geo.seg_start(2) + 200_000 {
            // Mostly small, every 7th spans pages (up to ~5 of them).
            let len = if k % 7 == 3 {
                9_000 + 7_919 * (k % 5)
            } else {
                10 + k % 300
            };
            let payload = vec![(k % 251) as u8; len];
            let lsn = w.append(&mut logical_message(0, false, "t", &payload));
            records.push((lsn, len));
            k += 1;
        }
        w.write_to_dir(&dir).unwrap();
        let settings = Settings {
            wal_buffers: n_buffers,
            ..Settings::default()
        };
        let shm = Shmem::create(&settings, 3, 1).unwrap();
        let end = w.end_pos();
        let n = shm.xlblocks().len() as u64;
        let last_page = end - end % BLCKSZ;
        let first_page = last_page.saturating_sub((n - 1) * BLCKSZ).max(start);
        let mut page = first_page;
        while page <= last_page {
            let seg = w.segment(geo.seg_no(page)).unwrap();
            let off = geo.seg_offset(page) as usize;
            let idx = ((page / BLCKSZ) % n) as usize;
            // The test owns the segment.
            shm.wal_page_mut(idx).write(0, &seg[off..off + XLOG_BLCKSZ]);
            shm.xlblocks()[idx].store(page + BLCKSZ, Ordering::Release);
            page += BLCKSZ;
        }
        Wal {
            dir,
            geo,
            start,
            end,
            records,
            shm,
        }
    }

    impl Wal {
        fn reader(&self, shm: bool, from: Lsn) -> WalRead<'_> {
            let shm = shm.then_some(&self.shm);
            WalRead::with_geometry(shm, &self.dir, self.geo, 1, SYSID, from)
        }
    }

    /// Every record up to `upto` (until None).
    fn read_all(r: &mut WalRead<'_>, upto: Lsn) -> Vec<DecodedRecord> {
        std::iter::from_fn(|| r.next_record(upto).unwrap()).collect()
    }

    fn lsns(recs: &[DecodedRecord]) -> Vec<Lsn> {
        recs.iter().map(|r| r.lsn).collect()
    }

    #[test]
    fn files_and_buffers_give_the_same_records_across_pages_and_segments() {
        let w = wal("same", 64);
        let from_files = read_all(&mut w.reader(false, w.start), u64::MAX);
        let want: Vec<Lsn> = w.records.iter().map(|r| r.0).collect();
        assert_eq!(lsns(&from_files), want);
        for (rec, (_, len)) in from_files.iter().zip(&w.records) {
            let (_, _, payload) = rec.as_logical_message().unwrap();
            assert_eq!(payload.len(), *len);
        }
        assert!(from_files
            .iter()
            .any(|r| w.geo.seg_no(r.lsn) != w.geo.seg_no(r.end)));
        let mut r = w.reader(true, w.start);
        let from_both = read_all(&mut r, w.end);
        assert_eq!(from_both, from_files);
        let s = r.sources();
        assert!(s.buffers >= 60 && s.files > 80, "{s:?}");
        assert_eq!(r.position(), from_files.last().unwrap().next);

        // The buffered pages really are read from the buffers: zero them
        // in the file and read again.
        let last_seg = w.geo.seg_no(w.end);
        let path = w.dir.join(w.geo.file_name(1, last_seg));
        let mut data = std::fs::read(&path).unwrap();
        // The last 20 pages (of the 64 buffered) zeroed in the file.
        let end_page = (w.geo.seg_offset(w.end) / BLCKSZ + 1) * BLCKSZ;
        data[(end_page - 20 * BLCKSZ) as usize..end_page as usize].fill(0);
        std::fs::write(&path, &data).unwrap();
        let mut files_only = w.reader(false, w.start);
        let n = std::iter::from_fn(|| files_only.next_record(u64::MAX).ok().flatten()).count();
        assert!(n < from_files.len(), "the file lost its end");
        assert_eq!(read_all(&mut w.reader(true, w.start), w.end), from_files);
    }

    #[test]
    fn a_buffer_recycled_during_the_copy_is_detected_and_the_file_read() {
        let w = wal("recycled", 64);
        let expected = read_all(&mut w.reader(false, w.start), u64::MAX);
        let mut hits = 0;
        AFTER_COPY.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |shm: &Shmem, idx: usize| {
                hits += 1;
                if hits % 3 == 0 {
                    // As `init_page` does for a later page: invalidate,
                    // then scribble over the page.
                    let x = &shm.xlblocks()[idx];
                    let old = x.load(Ordering::Relaxed);
                    x.store(0, Ordering::Relaxed);
                    shm.wal_page_mut(idx).fill(0, XLOG_BLCKSZ, 0xEE);
                    x.store(old + 64 * BLCKSZ, Ordering::Release);
                }
            }));
        });
        let mut r = w.reader(true, w.start);
        let got = read_all(&mut r, w.end);
        AFTER_COPY.with(|h| *h.borrow_mut() = None);
        assert_eq!(got, expected);
        assert!(r.sources().recycled >= 10, "{:?}", r.sources());
    }

    #[test]
    fn a_record_is_returned_only_once_it_ends_below_the_bound() {
        let w = wal("bound", 64);
        let all = read_all(&mut w.reader(false, w.start), u64::MAX);
        // A record of several pages near the end, in the buffers.
        let big = all
            .iter()
            .rev()
            .find(|r| r.end - r.lsn > 2 * BLCKSZ)
            .unwrap()
            .clone();
        let mut r = w.reader(true, big.lsn);
        for upto in [big.lsn, big.lsn + 8, big.lsn + BLCKSZ, big.end - 1] {
            assert!(r.next_record(upto).unwrap().is_none(), "{upto:X}");
            assert_eq!(r.position(), big.lsn);
        }
        assert_eq!(r.next_record(big.end).unwrap().unwrap(), big);
        assert_eq!(r.position(), big.next);
        // From a page boundary inside it: the continuation is skipped.
        let inside = big.lsn - big.lsn % BLCKSZ + BLCKSZ;
        let mut r = w.reader(true, inside);
        let next = r.next_record(w.end).unwrap().unwrap();
        assert_eq!(next.lsn, big.next);
        // A broken chain is an error: start at a record, then skip one.
        let mut r = w.reader(true, all[all.len() - 3].lsn);
        r.next_record(w.end).unwrap().unwrap();
        r.next = all[all.len() - 1].lsn;
        assert!(matches!(
            r.next_record(w.end),
            Err(ReadError::Wal(WalError::BadPrev { .. }))
        ));
    }

    #[test]
    fn a_removed_segment_is_reported_as_removed() {
        let w = wal("removed", 16);
        let mut r = w.reader(true, w.start);
        assert!(r.next_record(w.end).unwrap().is_some());
        w.shm.repl().removed_below_seg.store(2, Ordering::SeqCst);
        let err = loop {
            match r.next_record(w.end) {
                Ok(Some(_)) => {}
                Ok(None) => panic!("read past a removed segment"),
                Err(e) => break e,
            }
        };
        assert!(matches!(err, ReadError::Removed { .. }), "{err}");
        assert!(
            err.to_string().contains("has already been removed"),
            "{err}"
        );
    }
}
