//! Reading the WAL back: decoded records (LSN, XID, kind, prefix, payload)
//! from an LSN up to the end of flushed WAL, and a tail mode that waits for
//! more. The segment files are only ever opened read-only, through
//! walformat's reader and decoder (no second decoder here).
//!
//! Bounds. A reader made by [`crate::Worker::reader`] returns only records
//! that end at or below the server's flush position (a record that is
//! written but not yet durable is held back: a crash could still take it
//! away). A reader opened on a data directory alone ([`Reader::open`])
//! returns the valid WAL the files hold.
//!
//! Segment caching. walformat's reader loads a whole segment file at once,
//! so data written after that load is not seen: at a clean end of WAL (or
//! an invalid page beyond the flush position), the reader reopens at the
//! next record start, once, with `xl_prev` still checked across the reopen.
//!
//! Errors while reading just past the flush position are not errors: the
//! pages there may still be zeroed or recycled in the file. A record may
//! straddle the flush position, so an error counts as "not yet" while the
//! flush position is less than [`STRADDLE_WINDOW`] past where it occurred
//! (a record is at most `MAX_PAYLOAD` plus headers long).
//!
//! [`Committed`] turns the record stream into what a consumer wants: the
//! transactional messages of committed transactions only, buffered per XID
//! until the COMMIT (delivered) or ABORT (dropped), in commit order, each
//! transaction's messages in LSN order. A CHECKPOINT_SHUTDOWN record drops
//! every transaction still buffered: it is written only when no
//! transaction can be open (a clean shutdown, or the end-of-recovery
//! checkpoint with which startup ends a crash recovery), so a transaction
//! that a crash cut off before its COMMIT or ABORT never commits and its
//! messages are not kept forever.

use crate::error::{Error, Result};
use backend::context::ServerWatch;
use backend::control::ControlFile;
use shmem::Shmem;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use walformat::{
    DecodedRecord, Geometry, Lsn, WalError, WalReader, RM_XACT_ID, XLOG_XACT_ABORT,
    XLOG_XACT_COMMIT, XLOG_XACT_OPMASK,
};

/// How far past a read error the flush position must be before the error
/// is reported rather than taken for WAL not yet flushed.
pub const STRADDLE_WINDOW: u64 = crate::MAX_PAYLOAD as u64 + (1 << 20);

/// First and longest sleep of a tail wait.
const TAIL_NAP_FIRST: Duration = Duration::from_micros(100);
const TAIL_NAP_MAX: Duration = Duration::from_millis(10);

/// What kind of record a [`Record`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A logical message (`pg_logical_emit_message`).
    Message { transactional: bool },
    /// Transaction COMMIT.
    Commit,
    /// Transaction ABORT.
    Abort,
    /// Anything else (checkpoint, switch, ...).
    Other,
}

/// One decoded record, borrowed from the reader until its next call.
#[derive(Clone, Copy, Debug)]
pub struct Record<'r> {
    /// Start of the record.
    pub lsn: Lsn,
    /// Where the next record starts.
    pub end: Lsn,
    /// `xl_xid` (0 for non-transactional records).
    pub xid: u32,
    pub kind: RecordKind,
    /// A message's prefix ("" for other kinds).
    pub prefix: &'r str,
    /// A message's payload (the main data for other kinds).
    pub payload: &'r [u8],
}

/// How far a reader may read.
enum Bound<'w> {
    /// The valid WAL in the files.
    Files,
    /// The flush position of an attached server generation.
    Flushed {
        shm: &'w Shmem,
        watch: &'w dyn ServerWatch,
    },
}

/// A WAL reader (see the module header).
pub struct Reader<'w> {
    pg_wal: PathBuf,
    geo: Geometry,
    tli: u32,
    sysid: u64,
    bound: Bound<'w>,
    inner: Option<WalReader>,
    /// Where the next record starts.
    next: Lsn,
    /// The last record returned (the next one's expected `xl_prev`).
    prev: Option<Lsn>,
    current: Option<DecodedRecord>,
}

impl Reader<'static> {
    /// Reads `data_dir`'s WAL from `from` (a record start, or a page or
    /// segment boundary; 0: the oldest segment present), up to the end of
    /// the valid WAL in the files. Needs no running server.
    pub fn open(data_dir: &Path, from: Lsn) -> Result<Reader<'static>> {
        Reader::with_bound(data_dir, from, Bound::Files)
    }
}

impl<'w> Reader<'w> {
    /// A reader bounded by `shm`'s flush position.
    pub(crate) fn flushed(
        data_dir: &Path,
        from: Lsn,
        shm: &'w Shmem,
        watch: &'w dyn ServerWatch,
    ) -> Result<Reader<'w>> {
        Reader::with_bound(data_dir, from, Bound::Flushed { shm, watch })
    }

    fn with_bound(data_dir: &Path, from: Lsn, bound: Bound<'w>) -> Result<Reader<'w>> {
        let control = ControlFile::read(data_dir).map_err(|e| Error::Read(e.to_string()))?;
        let geo = Geometry::new(control.seg_size).map_err(|e| Error::Read(e.to_string()))?;
        let pg_wal = data_dir.join("pg_wal");
        let next = if from == 0 {
            oldest_segment_start(&pg_wal, &geo, control.timeline)?
        } else {
            from
        };
        Ok(Reader {
            pg_wal,
            geo,
            tli: control.timeline,
            sysid: control.system_identifier,
            bound,
            inner: None,
            next,
            prev: None,
            current: None,
        })
    }

    /// Where the next record starts (resume a later reader from here).
    pub fn position(&self) -> Lsn {
        self.next
    }

    /// The next record up to the bound; None when there is none yet.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>> {
        Ok(if self.advance()? { self.view() } else { None })
    }

    /// The next record, waiting up to `timeout` for one (tail mode).
    pub fn next_wait(&mut self, timeout: Duration) -> Result<Option<Record<'_>>> {
        Ok(if self.advance_wait(timeout)? {
            self.view()
        } else {
            None
        })
    }

    /// Consumer helper: committed transactional messages only.
    pub fn committed(self) -> Committed<'w> {
        Committed {
            reader: self,
            pending: HashMap::new(),
            ready: VecDeque::new(),
        }
    }

    fn advance_wait(&mut self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut nap = TAIL_NAP_FIRST;
        loop {
            if self.advance()? {
                return Ok(true);
            }
            if let Bound::Flushed { watch, .. } = self.bound {
                if watch.server_gone() {
                    return Err(Error::ServerRestarted);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(TAIL_NAP_MAX);
        }
    }

    fn view(&self) -> Option<Record<'_>> {
        self.current.as_ref().map(record_view)
    }

    /// Whether the current record is a CHECKPOINT_SHUTDOWN.
    fn at_shutdown_checkpoint(&self) -> bool {
        let checkpoint = self.current.as_ref().and_then(|r| r.as_checkpoint());
        matches!(checkpoint, Some((_, true)))
    }

    /// The bound now: None for `Files`; the flush position otherwise, or
    /// ServerRestarted once that generation ended.
    fn bound_lsn(&self) -> Result<Option<Lsn>> {
        match self.bound {
            Bound::Files => Ok(None),
            Bound::Flushed { shm, watch } => {
                if watch.generation_ended() {
                    return Err(Error::ServerRestarted);
                }
                // Acquire pairs with the Release fetch_max of the flush
                // result in `Xlog::xlog_write`: the files hold what it says.
                let flushed = shm
                    .xlog()
                    .write
                    .flush_result
                    .load(shmem::sync::Ordering::Acquire);
                Ok(Some(flushed))
            }
        }
    }

    /// Reads the next record into `current`; false at the bound.
    fn advance(&mut self) -> Result<bool> {
        let bound = self.bound_lsn()?;
        if bound.is_some_and(|b| self.next >= b) {
            return Ok(false);
        }
        loop {
            let fresh = self.inner.is_none();
            if fresh && !self.open_inner(bound)? {
                return Ok(false);
            }
            let inner = self.inner.as_mut().expect("opened above");
            match inner.next_record() {
                Ok(Some(rec)) => {
                    if bound.is_some_and(|b| rec.end > b) {
                        // Not durable yet: read it again later.
                        self.inner = None;
                        return Ok(false);
                    }
                    self.next = rec.next;
                    self.prev = Some(rec.lsn);
                    self.current = Some(rec);
                    return Ok(true);
                }
                Ok(None) => {}
                Err(e) if is_not_yet_flushed(&e, self.next, bound) => {}
                Err(e) => {
                    self.inner = None;
                    return Err(Error::Read(e.to_string()));
                }
            }
            // End of what the loaded segment showed: look at the file again,
            // once.
            self.inner = None;
            if fresh {
                return Ok(false);
            }
        }
    }

    /// Opens walformat's reader at `next`; false if its segment does not
    /// exist yet.
    fn open_inner(&mut self, bound: Option<Lsn>) -> Result<bool> {
        match WalReader::open(
            &self.pg_wal,
            self.geo,
            self.tli,
            Some(self.sysid),
            self.next,
        ) {
            Ok(mut r) => {
                if let Some(prev) = self.prev {
                    r.set_expected_prev(prev);
                }
                self.inner = Some(r);
                Ok(true)
            }
            Err(WalError::MissingSegment { .. })
                if bound.is_none_or(|b| self.geo.seg_no(b) <= self.geo.seg_no(self.next)) =>
            {
                Ok(false)
            }
            Err(e) => Err(Error::Read(e.to_string())),
        }
    }
}

/// A read error close enough to the flush position that the WAL there may
/// simply not be written yet (see the module header).
fn is_not_yet_flushed(e: &WalError, next: Lsn, bound: Option<Lsn>) -> bool {
    match bound {
        None => false,
        Some(b) => b < e.lsn().max(next).saturating_add(STRADDLE_WINDOW),
    }
}

fn record_view(rec: &DecodedRecord) -> Record<'_> {
    let (kind, prefix, payload) = match rec.as_logical_message() {
        Some((transactional, prefix, payload)) => {
            (RecordKind::Message { transactional }, prefix, payload)
        }
        None => (xact_kind(rec), "", &rec.main_data[..]),
    };
    Record {
        lsn: rec.lsn,
        end: rec.next,
        xid: rec.xid,
        kind,
        prefix,
        payload,
    }
}

fn xact_kind(rec: &DecodedRecord) -> RecordKind {
    if rec.rmid != RM_XACT_ID {
        return RecordKind::Other;
    }
    match rec.info & XLOG_XACT_OPMASK {
        XLOG_XACT_COMMIT => RecordKind::Commit,
        XLOG_XACT_ABORT => RecordKind::Abort,
        _ => RecordKind::Other,
    }
}

/// Start of the oldest segment file of timeline `tli` in `pg_wal`.
fn oldest_segment_start(pg_wal: &Path, geo: &Geometry, tli: u32) -> Result<Lsn> {
    let entries = std::fs::read_dir(pg_wal)
        .map_err(|e| Error::Read(format!("could not list {}: {e}", pg_wal.display())))?;
    let oldest = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| geo.parse_file_name(e.file_name().to_str()?))
        .filter(|&(t, _)| t == tli)
        .map(|(_, segno)| segno)
        .min()
        .ok_or_else(|| Error::Read(format!("no WAL segment in {}", pg_wal.display())))?;
    Ok(geo.seg_start(oldest))
}

/// One committed transactional message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub lsn: Lsn,
    pub xid: u32,
    /// Start of the transaction's COMMIT record.
    pub commit_lsn: Lsn,
    pub prefix: String,
    pub payload: Vec<u8>,
}

/// The committed transactional messages of a reader (see the module
/// header). Transactions cut short by a crash (no COMMIT, no ABORT) are
/// never delivered; they stay buffered until the next CHECKPOINT_SHUTDOWN.
pub struct Committed<'w> {
    reader: Reader<'w>,
    /// Messages of transactions still open, by XID (emptied at each
    /// CHECKPOINT_SHUTDOWN).
    pending: HashMap<u32, Vec<Message>>,
    ready: VecDeque<Message>,
}

impl<'w> Committed<'w> {
    /// The next committed message up to the reader's bound.
    pub fn next_message(&mut self) -> Result<Option<Message>> {
        self.next_wait(Duration::ZERO)
    }

    /// The next committed message, waiting up to `timeout` for one.
    pub fn next_wait(&mut self, timeout: Duration) -> Result<Option<Message>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.ready.pop_front() {
                return Ok(Some(m));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if !self.reader.advance_wait(left)? {
                return Ok(None);
            }
            if self.reader.at_shutdown_checkpoint() {
                self.pending.clear();
                continue;
            }
            let rec = self.reader.view().expect("advance filled it");
            match rec.kind {
                RecordKind::Message {
                    transactional: true,
                } => {
                    let m = Message {
                        lsn: rec.lsn,
                        xid: rec.xid,
                        commit_lsn: 0,
                        prefix: rec.prefix.to_owned(),
                        payload: rec.payload.to_vec(),
                    };
                    self.pending.entry(rec.xid).or_default().push(m);
                }
                RecordKind::Commit => {
                    let commit_lsn = rec.lsn;
                    for mut m in self.pending.remove(&rec.xid).unwrap_or_default() {
                        m.commit_lsn = commit_lsn;
                        self.ready.push_back(m);
                    }
                }
                RecordKind::Abort => {
                    self.pending.remove(&rec.xid);
                }
                _ => {}
            }
        }
    }

    /// Where the underlying reader stands.
    pub fn position(&self) -> Lsn {
        self.reader.position()
    }

    /// How many transactions have buffered messages but no COMMIT or
    /// ABORT (yet) up to the reader's position.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}
