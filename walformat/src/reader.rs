//! Reading WAL from a `pg_wal` directory with `xlogreader.c`'s validation.
//!
//! Every file access of the readers (this one and the look-ahead) goes
//! through a [`WalFiles`]: the file system itself by default
//! ([`StdWalFiles`]), or a caller's own I/O seam (the runtime passes one
//! with fail points), so that no read of WAL bypasses it.

use crate::consts::{
    SIZE_OF_XLOG_LONG_PHD, SIZE_OF_XLOG_RECORD, XLOG_BLCKSZ, XLP_FIRST_IS_CONTRECORD,
};
use crate::decode::{decode_complete, lsn_text, parse_record_header, DecodedRecord};
use crate::geometry::{maxalign, Geometry, Lsn};
use crate::page::{get_u32, PageHeader};
use crate::pagecheck::{PageCheck, PageUse};
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The file operations the WAL readers use: open a segment file, read it,
/// list the directory. Implementations decide nothing about WAL: they
/// perform the operation (or fail it, as a fail point does).
pub trait WalFiles: Sync {
    /// Opens the file at `path` for reading (`NotFound` when absent).
    fn open(&self, path: &Path) -> io::Result<File>;
    /// Appends the rest of `file` to `into`; returns the bytes read.
    fn read_to_end(&self, file: &mut File, into: &mut Vec<u8>) -> io::Result<usize>;
    /// Fills `buf` from `offset` of `file` (a short file is an error).
    fn read_exact_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// The names of the entries of directory `dir`.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>>;
}

/// [`WalFiles`] straight on the file system.
pub struct StdWalFiles;

impl WalFiles for StdWalFiles {
    fn open(&self, path: &Path) -> io::Result<File> {
        File::open(path)
    }

    fn read_to_end(&self, file: &mut File, into: &mut Vec<u8>) -> io::Result<usize> {
        file.read_to_end(into)
    }

    fn read_exact_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(file, buf, offset)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }
}

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

/// Whether `lsn` is the first byte of a page.
fn is_page_boundary(lsn: Lsn) -> bool {
    lsn & (BLCKSZ - 1) == 0
}

/// Which long-header field disagrees with what the reader expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongHeaderMismatch {
    /// `xlp_sysid` differs from the expected system identifier.
    SystemId {
        /// Value in the page.
        found: u64,
        /// Value expected.
        expected: u64,
    },
    /// `xlp_seg_size` differs from the geometry.
    SegSize {
        /// Value in the page.
        found: u32,
        /// Value expected.
        expected: u64,
    },
    /// `xlp_xlog_blcksz` is not `XLOG_BLCKSZ`.
    BlckSz {
        /// Value in the page.
        found: u32,
    },
}

impl fmt::Display for LongHeaderMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LongHeaderMismatch::SystemId { found, expected } => write!(
                f,
                "WAL file is from a different database system: system identifier is {found}, expected {expected}"
            ),
            LongHeaderMismatch::SegSize { found, expected } => {
                write!(f, "incorrect XLP_SEG_SIZE {found}, expected {expected}")
            }
            LongHeaderMismatch::BlckSz { found } => {
                write!(f, "incorrect XLOG_BLCKSZ {found}, expected {XLOG_BLCKSZ}")
            }
        }
    }
}

/// Why WAL ends or what is corrupt. `lsn` is the record (or page) concerned;
/// `file`/`offset` name the segment file and the byte offset in it.
#[derive(Debug)]
pub enum WalError {
    /// `xlp_magic` is not [`XLOG_PAGE_MAGIC`].
    BadMagic {
        /// Page address.
        lsn: Lsn,
        /// Segment file name.
        file: String,
        /// Offset of the page in the file.
        offset: u64,
        /// Magic found.
        magic: u16,
    },
    /// `xlp_info` has unknown bits, or a segment start lacks `XLP_LONG_HEADER`.
    BadPageInfo {
        /// Page address.
        lsn: Lsn,
        /// Segment file name.
        file: String,
        /// Offset of the page in the file.
        offset: u64,
        /// `xlp_info` found.
        info: u16,
    },
    /// `xlp_pageaddr` is not the page's own address.
    BadPageAddr {
        /// Page address expected.
        lsn: Lsn,
        /// Segment file name.
        file: String,
        /// Offset of the page in the file.
        offset: u64,
        /// `xlp_pageaddr` found.
        found: Lsn,
    },
    /// A long header's system id, segment size or block size is wrong.
    BadLongHeader {
        /// Page address.
        lsn: Lsn,
        /// Segment file name.
        file: String,
        /// What is wrong.
        mismatch: LongHeaderMismatch,
    },
    /// `xlp_tli` goes backwards or exceeds the timeline being read.
    BadTimeline {
        /// Page address.
        lsn: Lsn,
        /// Segment file name.
        file: String,
        /// `xlp_tli` found.
        tli: u32,
        /// Latest timeline seen before (or the timeline read, if exceeded).
        previous: u32,
    },
    /// A record was expected at a page start, but the page says it begins
    /// with the continuation of an earlier record.
    UnexpectedContinuation {
        /// Position where a record was expected.
        lsn: Lsn,
        /// Segment file name.
        file: String,
        /// Offset of the page in the file.
        offset: u64,
    },
    /// `xl_crc` does not match the record contents.
    BadCrc {
        /// Record start.
        lsn: Lsn,
        /// CRC stored in the record.
        stored: u32,
        /// CRC computed.
        computed: u32,
    },
    /// `xl_prev` is not the previous record's LSN.
    BadPrev {
        /// Record start.
        lsn: Lsn,
        /// Expected previous LSN.
        expected: Lsn,
        /// `xl_prev` found.
        found: Lsn,
    },
    /// `xl_tot_len` is below the header size or above [`crate::MAX_RECORD_LEN`].
    BadLength {
        /// Record start.
        lsn: Lsn,
        /// `xl_tot_len` found.
        len: u32,
    },
    /// `xl_rmid` is not a valid resource manager id.
    BadRmgr {
        /// Record start.
        lsn: Lsn,
        /// `xl_rmid` found.
        rmid: u8,
    },
    /// The block headers after the record header are inconsistent.
    BadRecordBody {
        /// Record start.
        lsn: Lsn,
        /// What is wrong.
        reason: &'static str,
    },
    /// A record continues onto a page that does not carry its continuation
    /// (zeroed page, no `XLP_FIRST_IS_CONTRECORD`, or wrong `xlp_rem_len`).
    MissingContinuation {
        /// Record start.
        lsn: Lsn,
        /// Address of the page that should continue it.
        page: Lsn,
        /// Segment file name.
        file: String,
        /// Offset of the page in the file.
        offset: u64,
        /// Bytes of the record still to come.
        expected_rem_len: u32,
        /// `xlp_info` found.
        found_info: u16,
        /// `xlp_rem_len` found.
        found_rem_len: u32,
    },
    /// A record continues into a segment file that does not exist.
    MissingSegment {
        /// Record start (or the reader's start position).
        lsn: Lsn,
        /// Path of the missing file.
        path: PathBuf,
    },
    /// A segment file does not have the geometry's size.
    WrongSegmentSize {
        /// Position being read.
        lsn: Lsn,
        /// Path of the file.
        path: PathBuf,
        /// Expected size.
        expected: u64,
        /// Actual size.
        found: u64,
    },
    /// Reading a segment file failed.
    Io {
        /// Position being read.
        lsn: Lsn,
        /// Path of the file.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// In-memory decoding: fewer bytes than the record needs.
    Truncated {
        /// Record start.
        lsn: Lsn,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        got: u64,
    },
}

impl WalError {
    /// The LSN the error refers to.
    pub fn lsn(&self) -> Lsn {
        match self {
            WalError::BadMagic { lsn, .. }
            | WalError::BadPageInfo { lsn, .. }
            | WalError::BadPageAddr { lsn, .. }
            | WalError::BadLongHeader { lsn, .. }
            | WalError::BadTimeline { lsn, .. }
            | WalError::UnexpectedContinuation { lsn, .. }
            | WalError::BadCrc { lsn, .. }
            | WalError::BadPrev { lsn, .. }
            | WalError::BadLength { lsn, .. }
            | WalError::BadRmgr { lsn, .. }
            | WalError::BadRecordBody { lsn, .. }
            | WalError::MissingContinuation { lsn, .. }
            | WalError::MissingSegment { lsn, .. }
            | WalError::WrongSegmentSize { lsn, .. }
            | WalError::Io { lsn, .. }
            | WalError::Truncated { lsn, .. } => *lsn,
        }
    }
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::BadMagic { .. }
            | WalError::BadPageInfo { .. }
            | WalError::BadPageAddr { .. }
            | WalError::BadLongHeader { .. }
            | WalError::BadTimeline { .. }
            | WalError::UnexpectedContinuation { .. }
            | WalError::MissingContinuation { .. } => self.fmt_page_error(f),
            WalError::BadCrc { .. }
            | WalError::BadPrev { .. }
            | WalError::BadLength { .. }
            | WalError::BadRmgr { .. }
            | WalError::BadRecordBody { .. }
            | WalError::Truncated { .. } => self.fmt_record_error(f),
            WalError::MissingSegment { .. }
            | WalError::WrongSegmentSize { .. }
            | WalError::Io { .. } => self.fmt_file_error(f),
        }
    }
}

impl WalError {
    /// An error in a page header or in how a record crosses pages.
    fn fmt_page_error(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::BadMagic { lsn, file, offset, magic } => write!(
                f,
                "invalid magic number {magic:04X} in WAL segment {file}, offset {offset} (page {})",
                lsn_text(*lsn)
            ),
            WalError::BadPageInfo { lsn, file, offset, info } => write!(
                f,
                "invalid info bits {info:04X} in WAL segment {file}, offset {offset} (page {})",
                lsn_text(*lsn)
            ),
            WalError::BadPageAddr { lsn, file, offset, found } => write!(
                f,
                "unexpected pageaddr {} in WAL segment {file}, offset {offset} (expected {})",
                lsn_text(*found),
                lsn_text(*lsn)
            ),
            WalError::BadLongHeader { lsn, file, mismatch } => write!(
                f,
                "bad long page header in WAL segment {file} (page {}): {mismatch}",
                lsn_text(*lsn)
            ),
            WalError::BadTimeline { lsn, file, tli, previous } => write!(
                f,
                "out-of-sequence timeline ID {tli} (after {previous}) in WAL segment {file}, page {}",
                lsn_text(*lsn)
            ),
            WalError::UnexpectedContinuation { lsn, file, offset } => write!(
                f,
                "record expected at {} but page at offset {offset} of WAL segment {file} starts with a continuation record",
                lsn_text(*lsn)
            ),
            WalError::MissingContinuation {
                lsn,
                page,
                file,
                offset,
                expected_rem_len,
                found_info,
                found_rem_len,
            } => write!(
                f,
                "record at {} is not continued on page {} (WAL segment {file}, offset {offset}): \
                 expected XLP_FIRST_IS_CONTRECORD with xlp_rem_len {expected_rem_len}, \
                 found xlp_info {found_info:04X} and xlp_rem_len {found_rem_len}",
                lsn_text(*lsn),
                lsn_text(*page)
            ),
            _ => unreachable!("not a page error: {self:?}"),
        }
    }

    /// An error in a record's header, body or checksum.
    fn fmt_record_error(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::BadCrc { lsn, stored, computed } => write!(
                f,
                "incorrect resource manager data checksum in record at {}: stored {stored:08X}, computed {computed:08X}",
                lsn_text(*lsn)
            ),
            WalError::BadPrev { lsn, expected, found } => write!(
                f,
                "record with incorrect prev-link {} at {} (expected {})",
                lsn_text(*found),
                lsn_text(*lsn),
                lsn_text(*expected)
            ),
            WalError::BadLength { lsn, len } => write!(
                f,
                "invalid record length at {}: wanted at least {SIZE_OF_XLOG_RECORD} and at most {}, got {len}",
                lsn_text(*lsn),
                crate::MAX_RECORD_LEN
            ),
            WalError::BadRmgr { lsn, rmid } => write!(
                f,
                "invalid resource manager ID {rmid} at {}",
                lsn_text(*lsn)
            ),
            WalError::BadRecordBody { lsn, reason } => {
                write!(f, "malformed record at {}: {reason}", lsn_text(*lsn))
            }
            WalError::Truncated { lsn, needed, got } => write!(
                f,
                "record at {} needs {needed} bytes, only {got} available",
                lsn_text(*lsn)
            ),
            _ => unreachable!("not a record error: {self:?}"),
        }
    }

    /// A segment file that is absent, of the wrong size or unreadable.
    fn fmt_file_error(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::MissingSegment { lsn, path } => write!(
                f,
                "WAL segment {} needed for {} does not exist",
                path.display(),
                lsn_text(*lsn)
            ),
            WalError::WrongSegmentSize {
                lsn,
                path,
                expected,
                found,
            } => write!(
                f,
                "WAL segment {} (needed for {}) has {found} bytes, expected {expected}",
                path.display(),
                lsn_text(*lsn)
            ),
            WalError::Io { lsn, path, error } => write!(
                f,
                "could not read WAL segment {} (needed for {}): {error}",
                path.display(),
                lsn_text(*lsn)
            ),
            _ => unreachable!("not a file error: {self:?}"),
        }
    }
}

impl std::error::Error for WalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WalError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// One segment file held in memory.
struct Segment {
    segno: u64,
    name: String,
    data: Vec<u8>,
}

/// Reads WAL from a pg_wal directory (segment files named by
/// [`Geometry::file_name`]).
pub struct WalReader {
    files: &'static dyn WalFiles,
    dir: PathBuf,
    geo: Geometry,
    tli: u32,
    /// Page-header validation (system identifier, latest page timeline).
    check: PageCheck,
    segment: Option<Segment>,
    /// Where the next record starts (`EndRecPtr` form: may be a page boundary).
    next: Lsn,
    expected_prev: Option<Lsn>,
    end_of_valid: Lsn,
    /// True until the first record is returned: a start at a page boundary
    /// then skips a leading continuation record like `XLogFindNextRecord`.
    first: bool,
    /// Reused buffer for assembling records.
    buf: Vec<u8>,
    /// Accept a segment file shorter than the segment size as if it were
    /// zero-padded (the look-ahead examines truncated segments).
    pad_short: bool,
    /// Timeline history, oldest first: (timeline, LSN where it begins),
    /// the last entry `tli`. A segment is read from the file of the newest
    /// timeline that began before the segment's end.
    history: Vec<(u32, Lsn)>,
}

impl WalReader {
    /// Opens `pg_wal_dir` for reading records of timeline `tli` from `start`.
    /// `sysid = None` takes the system identifier from the first long header.
    /// `start` is a record start, or a page/segment boundary (then the first
    /// record beginning on or after it is read). Fails with
    /// [`WalError::MissingSegment`] if the start segment does not exist.
    pub fn open(
        pg_wal_dir: &Path,
        geo: Geometry,
        tli: u32,
        sysid: Option<u64>,
        start: Lsn,
    ) -> Result<WalReader, WalError> {
        Self::open_with(&StdWalFiles, pg_wal_dir, geo, tli, sysid, start, false)
    }

    /// [`WalReader::open`] reading every file through `files`.
    pub fn open_from(
        files: &'static dyn WalFiles,
        pg_wal_dir: &Path,
        geo: Geometry,
        tli: u32,
        sysid: Option<u64>,
        start: Lsn,
    ) -> Result<WalReader, WalError> {
        Self::open_with(files, pg_wal_dir, geo, tli, sysid, start, false)
    }

    /// [`WalReader::open_from`]; `pad_short`: read a short segment file as
    /// if it were zero-padded to the segment size (for the look-ahead only:
    /// normal reading refuses such a segment whole).
    pub(crate) fn open_with(
        files: &'static dyn WalFiles,
        pg_wal_dir: &Path,
        geo: Geometry,
        tli: u32,
        sysid: Option<u64>,
        start: Lsn,
        pad_short: bool,
    ) -> Result<WalReader, WalError> {
        let history = vec![(tli, 0)];
        Self::open_history(files, pg_wal_dir, geo, history, sysid, start, pad_short)
    }

    /// [`WalReader::open_from`] reading across timeline switches: `history`
    /// lists (timeline, LSN where it begins), oldest first, ending with the
    /// reader's own timeline (what a timeline history file gives).
    /// Segments before a switch are read from the older timeline's files,
    /// the switch segment from the newer one's (which holds the older
    /// one's prefix), as PostgreSQL's reader does.
    pub fn open_across(
        files: &'static dyn WalFiles,
        pg_wal_dir: &Path,
        geo: Geometry,
        history: Vec<(u32, Lsn)>,
        sysid: Option<u64>,
        start: Lsn,
    ) -> Result<WalReader, WalError> {
        Self::open_history(files, pg_wal_dir, geo, history, sysid, start, false)
    }

    fn open_history(
        files: &'static dyn WalFiles,
        pg_wal_dir: &Path,
        geo: Geometry,
        history: Vec<(u32, Lsn)>,
        sysid: Option<u64>,
        start: Lsn,
        pad_short: bool,
    ) -> Result<WalReader, WalError> {
        let mut reader = WalReader {
            files,
            dir: pg_wal_dir.to_path_buf(),
            geo,
            tli: history.last().map_or(1, |&(t, _)| t),
            check: PageCheck::new(geo, history.last().map_or(1, |&(t, _)| t), sysid),
            segment: None,
            next: start,
            expected_prev: None,
            end_of_valid: start,
            first: true,
            buf: Vec::new(),
            pad_short,
            history,
        };
        reader.load_start_segment()?;
        Ok(reader)
    }

    /// Loads the segment of the start position; a missing one is an error.
    fn load_start_segment(&mut self) -> Result<(), WalError> {
        let segno = self.geo.seg_no(self.next);
        if !self.load_segment(segno, self.next)? {
            return Err(WalError::MissingSegment {
                lsn: self.next,
                path: self.segment_path(segno),
            });
        }
        Ok(())
    }

    /// Starts reading afresh at `start` (a record start or page boundary, as
    /// for [`WalReader::open`]), with no expected `xl_prev` and no timeline
    /// history, keeping the loaded segment if `start` is in it.
    pub(crate) fn restart_at(&mut self, start: Lsn) {
        self.next = start;
        self.expected_prev = None;
        self.end_of_valid = start;
        self.check.reset_timeline();
        self.first = true;
    }

    /// The timeline whose file holds segment `segno`.
    fn segment_tli(&self, segno: u64) -> u32 {
        let seg_end = self.geo.seg_start(segno).saturating_add(self.geo.seg_size);
        self.history
            .iter()
            .rev()
            .find(|&&(_, begin)| begin < seg_end)
            .map_or(self.tli, |&(t, _)| t)
    }

    /// Requires the next record's `xl_prev` to be `prev`.
    pub fn set_expected_prev(&mut self, prev: Lsn) {
        self.expected_prev = Some(prev);
    }

    /// Where the last valid record ended, MAXALIGNed (PostgreSQL's
    /// `EndRecPtr`, the next insert position; for SWITCH the next segment
    /// start). Equals the start position until a record has been read.
    pub fn end_of_valid(&self) -> Lsn {
        self.end_of_valid
    }

    /// System identifier in use (given, or learned from a long header).
    pub fn sysid(&self) -> Option<u64> {
        self.check.sysid()
    }

    /// Next valid record; `Ok(None)` at a clean end of WAL (zero length,
    /// zeroed next page, or absent next segment); `Err` at the first invalid
    /// record, saying why.
    pub fn next_record(&mut self) -> Result<Option<DecodedRecord>, WalError> {
        let Some(lsn) = self.find_record_start()? else {
            return Ok(None);
        };
        if self.read_u32_at(lsn) == 0 {
            return Ok(None);
        }
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.read_record(lsn, &mut buf);
        self.buf = buf;
        let record = result?;
        self.next = record.next;
        self.end_of_valid = record.next;
        self.expected_prev = Some(record.lsn);
        self.first = false;
        Ok(Some(record))
    }

    /// Resolves `self.next` to the LSN of the next record's first byte,
    /// validating the page it is on. `None` at a clean end of WAL.
    fn find_record_start(&mut self) -> Result<Option<Lsn>, WalError> {
        let mut pos = self.next;
        loop {
            let page = pos - pos % BLCKSZ;
            let Some(hdr) = self.page(page, PageUse::RecordStart, pos)? else {
                return Ok(None);
            };
            let hdr_size = self.geo.page_header_size_at(page) as u64;
            let data_start = page + hdr_size;
            let at_page_start = pos == page || pos == data_start;
            let continued = hdr.info & XLP_FIRST_IS_CONTRECORD != 0;
            if !at_page_start || !continued {
                return Ok(Some(pos.max(data_start)));
            }
            if !(self.first && pos == page) {
                return Err(WalError::UnexpectedContinuation {
                    lsn: pos,
                    file: self.segment_name(),
                    offset: self.geo.seg_offset(page),
                });
            }
            // XLogFindNextRecord: skip the tail of a record begun earlier.
            let skip = maxalign(u64::from(hdr.rem_len));
            pos = if skip < BLCKSZ - hdr_size {
                data_start + skip
            } else {
                page + BLCKSZ
            };
        }
    }

    /// Reads, validates and decodes the record starting at `lsn`.
    fn read_record(&mut self, lsn: Lsn, buf: &mut Vec<u8>) -> Result<DecodedRecord, WalError> {
        buf.clear();
        // xl_tot_len is always on the record's first page (8-aligned start);
        // check it before following the header onto a continuation page.
        let tot_len = self.read_u32_at(lsn);
        if !(SIZE_OF_XLOG_RECORD..=crate::MAX_RECORD_LEN).contains(&(tot_len as usize)) {
            return Err(WalError::BadLength { lsn, len: tot_len });
        }
        let pos = self.gather(lsn, lsn, SIZE_OF_XLOG_RECORD, tot_len, buf)?;
        let hdr = parse_record_header(lsn, buf)?;
        if let Some(expected) = self.expected_prev {
            if hdr.prev != expected {
                return Err(WalError::BadPrev {
                    lsn,
                    expected,
                    found: hdr.prev,
                });
            }
        }
        let rest = hdr.tot_len as usize - SIZE_OF_XLOG_RECORD;
        let end = self.gather(lsn, pos, rest, hdr.tot_len, buf)?;
        let mut next = maxalign(end);
        let record_is_switch = hdr.rmid == crate::RM_XLOG_ID
            && hdr.info & crate::XLR_RMGR_INFO_MASK == crate::XLOG_SWITCH;
        if record_is_switch {
            next = self.round_up_to_segment(next);
        }
        decode_complete(lsn, end, next, &hdr, buf)
    }

    fn round_up_to_segment(&self, lsn: Lsn) -> Lsn {
        match self.geo.seg_offset(lsn) {
            0 => lsn,
            off => lsn + (self.geo.seg_size - off),
        }
    }

    /// Appends `n` record bytes starting at `pos` to `out`, crossing page
    /// (and segment) boundaries; returns the position after the last byte.
    /// `tot_len` is the record's total length, for checking `xlp_rem_len`.
    fn gather(
        &mut self,
        lsn: Lsn,
        mut pos: Lsn,
        n: usize,
        tot_len: u32,
        out: &mut Vec<u8>,
    ) -> Result<Lsn, WalError> {
        let mut left = n;
        while left > 0 {
            if is_page_boundary(pos) {
                let rem_len = tot_len.saturating_sub(out.len() as u32);
                let usage = PageUse::Continuation { lsn, rem_len };
                self.page(pos, usage, lsn)?;
                pos += self.geo.page_header_size_at(pos) as u64;
            }
            let page_end = pos - pos % BLCKSZ + BLCKSZ;
            let chunk = left.min((page_end - pos) as usize);
            let off = self.geo.seg_offset(pos) as usize;
            let data = self.loaded_data();
            out.extend_from_slice(&data[off..off + chunk]);
            pos += chunk as u64;
            left -= chunk;
        }
        Ok(pos)
    }

    /// Reads a little-endian u32 at `lsn` in the loaded segment (a record's
    /// `xl_tot_len`, always inside one page because records are 8-aligned).
    fn read_u32_at(&self, lsn: Lsn) -> u32 {
        get_u32(self.loaded_data(), self.geo.seg_offset(lsn) as usize)
    }

    fn loaded_data(&self) -> &[u8] {
        match &self.segment {
            Some(seg) => &seg.data,
            None => &[],
        }
    }

    fn segment_name(&self) -> String {
        match &self.segment {
            Some(seg) => seg.name.clone(),
            None => String::new(),
        }
    }

    fn segment_path(&self, segno: u64) -> PathBuf {
        self.dir
            .join(self.geo.file_name(self.segment_tli(segno), segno))
    }

    /// Makes segment `segno` the loaded one. `Ok(false)` if the file is absent.
    fn load_segment(&mut self, segno: u64, lsn: Lsn) -> Result<bool, WalError> {
        if self.segment.as_ref().is_some_and(|s| s.segno == segno) {
            return Ok(true);
        }
        let path = self.segment_path(segno);
        let io_err = |error| WalError::Io {
            lsn,
            path: path.clone(),
            error,
        };
        let mut file = match self.files.open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err(e)),
        };
        let len = file.metadata().map_err(io_err)?.len();
        if len != self.geo.seg_size && !(self.pad_short && len < self.geo.seg_size) {
            return Err(WalError::WrongSegmentSize {
                lsn,
                path,
                expected: self.geo.seg_size,
                found: len,
            });
        }
        let mut data = self.segment.take().map(|s| s.data).unwrap_or_default();
        data.clear();
        data.reserve(len as usize);
        self.files
            .read_to_end(&mut file, &mut data)
            .map_err(io_err)?;
        if self.pad_short && data.len() as u64 == len {
            data.resize(self.geo.seg_size as usize, 0);
        }
        if data.len() as u64 != self.geo.seg_size {
            return Err(WalError::WrongSegmentSize {
                lsn,
                path,
                expected: self.geo.seg_size,
                found: data.len() as u64,
            });
        }
        self.segment = Some(Segment {
            segno,
            name: self.geo.file_name(self.segment_tli(segno), segno),
            data,
        });
        Ok(true)
    }

    /// Loads and validates the header of the page at `page` (a page
    /// boundary). `Ok(None)` only for [`PageUse::RecordStart`] when the
    /// segment is absent or the header is all zero (clean end of WAL).
    fn page(
        &mut self,
        page: Lsn,
        usage: PageUse,
        lsn: Lsn,
    ) -> Result<Option<PageHeader>, WalError> {
        let segno = self.geo.seg_no(page);
        if !self.load_segment(segno, lsn)? {
            return match usage {
                PageUse::RecordStart => Ok(None),
                PageUse::Continuation { lsn, .. } => Err(WalError::MissingSegment {
                    lsn,
                    path: self.segment_path(segno),
                }),
            };
        }
        let offset = self.geo.seg_offset(page) as usize;
        let (data, name) = match &self.segment {
            Some(seg) => (&seg.data[..], &seg.name[..]),
            None => (&[][..], ""),
        };
        let hdr_bytes = &data[offset..][..SIZE_OF_XLOG_LONG_PHD];
        self.check.check(page, hdr_bytes, usage, name)
    }
}
