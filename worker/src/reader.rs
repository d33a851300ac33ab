//! Reading the WAL back: decoded records (LSN, XID, kind, prefix, payload)
//! from an LSN on, and a tail mode that waits for more. Records are read
//! with `backend::walread::WalRead`: pages still in the server's WAL
//! buffers are copied from shared memory, older ones read from the segment
//! files one page at a time (no second decoder here, no whole-segment
//! reads).
//!
//! Bounds. A reader made by [`crate::Worker::reader`] returns only records
//! that end at or below the server's flush position (a record that is
//! written but not yet durable is held back: a crash could still take it
//! away). One made by [`crate::Worker::reader_inserted`] returns records
//! as soon as every insertion below their end finished, before they are
//! durable: a crash may take them back, so once the server generation
//! ends the reader reports [`Error::ServerRestarted`] (as the flushed one
//! does). A reader opened on a data directory alone ([`Reader::open`])
//! returns the valid WAL the files hold.
//!
//! Waiting. A server-bound reader sleeps on the futex word of its mode
//! (`shmem::readwake`): the flusher (or, in the inserted mode, an inserter
//! releasing its insertion lock) bumps it after the position advanced, so
//! a record is delivered as soon as it is there, without a timer. The
//! sleep's deadline is a guard only: after `GUARD_SLEEP` without a wake
//! the reader checks whether the server is gone (a killed postmaster wakes
//! nobody). A reader of files alone has nobody to wake it and polls (from
//! `TAIL_NAP_FIRST` doubling to `TAIL_NAP_MAX`).
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
use backend::reorder::{Change, Reorder};
use backend::walread::{self, WalRead};
use shmem::clock::monotonic_ns;
use shmem::Shmem;
use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};
use walformat::{
    DecodedRecord, Geometry, Lsn, RM_XACT_ID, XLOG_XACT_ABORT, XLOG_XACT_COMMIT, XLOG_XACT_OPMASK,
};

/// Longest futex sleep of a server-bound reader before it checks whether
/// the server is still there (a guard: wake-ups come from the flusher or
/// the inserters).
const GUARD_SLEEP: Duration = Duration::from_millis(100);

/// First and longest sleep of a files-only reader's tail wait.
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

/// How far a server-bound reader may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Up to the flush position: only durable records.
    Flushed,
    /// Up to where every insertion finished: records before they are
    /// durable (a crash may take them back).
    Inserted,
}

/// How far a reader may read.
enum Bound<'w> {
    /// The valid WAL in the files.
    Files,
    /// A position of an attached server generation.
    Server {
        shm: &'w Shmem,
        watch: &'w dyn ServerWatch,
        mode: ReadMode,
    },
}

/// A WAL reader (see the module header).
pub struct Reader<'w> {
    wal: WalRead<'w>,
    bound: Bound<'w>,
    /// Inserted mode: the highest finished-insertion position seen.
    inserted: Lsn,
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
    /// A reader bounded by `shm`'s flush position (or, `Inserted`, by its
    /// finished insertions).
    pub(crate) fn attached(
        data_dir: &Path,
        from: Lsn,
        shm: &'w Shmem,
        watch: &'w dyn ServerWatch,
        mode: ReadMode,
    ) -> Result<Reader<'w>> {
        Reader::with_bound(data_dir, from, Bound::Server { shm, watch, mode })
    }

    fn with_bound(data_dir: &Path, from: Lsn, bound: Bound<'w>) -> Result<Reader<'w>> {
        let shm = match bound {
            Bound::Files => None,
            Bound::Server { shm, .. } => Some(shm),
        };
        let from = if from == 0 {
            let control = ControlFile::read(data_dir).map_err(|e| Error::Read(e.to_string()))?;
            let geo = Geometry::new(control.seg_size).map_err(|e| Error::Read(e.to_string()))?;
            oldest_segment_start(&data_dir.join("pg_wal"), &geo, control.timeline)?
        } else {
            from
        };
        let wal = WalRead::new(shm, data_dir, from).map_err(|e| Error::Read(e.to_string()))?;
        Ok(Reader {
            wal,
            bound,
            inserted: 0,
            current: None,
        })
    }

    /// Where the next record starts (resume a later reader from here).
    pub fn position(&self) -> Lsn {
        self.wal.position()
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
        Committed::new(self, 0)
    }

    fn advance_wait(&mut self, timeout: Duration) -> Result<bool> {
        let deadline = monotonic_ns().saturating_add(timeout.as_nanos() as u64);
        let Bound::Server { shm, watch, mode } = self.bound else {
            return self.advance_polling(deadline);
        };
        let word = match mode {
            ReadMode::Flushed => &shm.xlog().readers.flushed,
            ReadMode::Inserted => &shm.xlog().readers.inserted,
        };
        loop {
            if self.advance()? {
                return Ok(true);
            }
            // Announce the sleep, then look again (`shmem::readwake`).
            let seen = word.prepare();
            let found = self.advance();
            let now = monotonic_ns();
            if !matches!(found, Ok(false)) || now >= deadline {
                word.finish();
                return found;
            }
            let wake_by = deadline.min(now + GUARD_SLEEP.as_nanos() as u64);
            let slept = word.sleep(seen, wake_by);
            word.finish();
            if slept == shmem::futex::Wait::TimedOut && watch.server_gone() {
                return Err(Error::ServerRestarted);
            }
        }
    }

    /// A files-only reader's tail wait: nobody wakes it, so it naps.
    fn advance_polling(&mut self, deadline: u64) -> Result<bool> {
        let mut nap = TAIL_NAP_FIRST;
        loop {
            if self.advance()? {
                return Ok(true);
            }
            let now = monotonic_ns();
            if now >= deadline {
                return Ok(false);
            }
            std::thread::sleep(nap.min(Duration::from_nanos(deadline - now)));
            nap = (nap * 2).min(TAIL_NAP_MAX);
        }
    }

    fn view(&self) -> Option<Record<'_>> {
        self.current.as_ref().map(record_view)
    }

    /// The bound now: everything for `Files`; the flush position or the
    /// finished insertions otherwise, or ServerRestarted once that
    /// generation ended.
    fn bound_lsn(&mut self) -> Result<Lsn> {
        match self.bound {
            Bound::Files => Ok(Lsn::MAX),
            Bound::Server { shm, watch, mode } => {
                if watch.generation_ended() {
                    return Err(Error::ServerRestarted);
                }
                Ok(match mode {
                    ReadMode::Flushed => walread::flushed_upto(shm),
                    ReadMode::Inserted => {
                        let geo = self.wal.geometry();
                        self.inserted = walread::inserted_upto(shm, &geo, self.inserted);
                        self.inserted
                    }
                })
            }
        }
    }

    /// Reads the next record into `current`; false at the bound.
    fn advance(&mut self) -> Result<bool> {
        let upto = self.bound_lsn()?;
        match self.wal.next_record(upto) {
            Ok(Some(rec)) => {
                self.current = Some(rec);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(Error::Read(e.to_string())),
        }
    }
}

fn record_view(rec: &DecodedRecord) -> Record<'_> {
    let (kind, prefix, payload) = match rec.as_logical_message() {
        // The filler over a dead process's unfinished record is nobody's
        // message.
        Some((transactional, prefix, _)) if backend::reorder::is_filler(transactional, prefix) => {
            (RecordKind::Other, "", &rec.main_data[..])
        }
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
    /// Where the COMMIT record ends: what a slot's consumer confirms
    /// ([`crate::SlotReader::confirm`]) once it has the transaction.
    pub commit_end: Lsn,
    pub prefix: String,
    pub payload: Vec<u8>,
}

/// The committed transactional messages of a reader (see the module
/// header), through the reorder buffer logical decoding uses too
/// (`backend::reorder`). Transactions cut short by a crash (no COMMIT, no
/// ABORT) are never delivered; they stay buffered until the next
/// CHECKPOINT_SHUTDOWN.
pub struct Committed<'w> {
    reader: Reader<'w>,
    reorder: Reorder,
    ready: VecDeque<Message>,
}

impl<'w> Committed<'w> {
    /// Delivers transactions whose COMMIT starts at or after `start`.
    pub(crate) fn new(reader: Reader<'w>, start: Lsn) -> Committed<'w> {
        let from = reader.position();
        Committed {
            reader,
            reorder: Reorder::new(start, from),
            ready: VecDeque::new(),
        }
    }

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
            let rec = self.reader.current.as_ref().expect("advance filled it");
            if let Some(Change::Transaction(t)) = self.reorder.add(rec) {
                self.ready.extend(t.messages.into_iter().map(|m| Message {
                    lsn: m.lsn,
                    xid: t.xid,
                    commit_lsn: t.commit_lsn,
                    commit_end: t.end_lsn,
                    prefix: m.prefix,
                    payload: m.content,
                }));
            }
        }
    }

    /// Where the underlying reader stands.
    pub fn position(&self) -> Lsn {
        self.reader.position()
    }

    /// The oldest WAL needed to deliver what was not delivered yet.
    pub fn restart_point(&self) -> Lsn {
        self.reorder.restart_point()
    }

    /// The restart point to keep once `confirmed` is confirmed.
    pub(crate) fn restart_for(&mut self, confirmed: Lsn) -> Option<Lsn> {
        self.reorder.restart_for(confirmed)
    }

    /// How many transactions have buffered messages but no COMMIT or
    /// ABORT (yet) up to the reader's position.
    pub fn pending(&self) -> usize {
        self.reorder.pending()
    }
}
