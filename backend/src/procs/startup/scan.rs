//! Steps 2 and 3 of the module header of `startup`: reading WAL from the
//! control file's checkpoint (its redo point) to the first record that
//! does not read, or to the recovery target, and looking past that stop
//! for valid WAL; plus the reports of what was found there.
//!
//! Invariants: `scan_wal` writes nothing; its result's `end_of_wal` is the
//! end of the last record kept, which is never before the checkpoint
//! record (reading that stops earlier is a `ScanError`); `max_xid` is the
//! highest XID of the records kept.

use super::DISCARDED_DIR;
use crate::control::ControlFile;
use crate::recovery_target::{Reached, RecoveryTarget};
use crate::walfile;
use std::fmt;
use std::path::Path;
use walformat::{format_lsn, Geometry, Lookahead, Lsn, ValidWalAfter, WalError, WalReader};

/// Why reading WAL stopped.
#[derive(Debug)]
pub enum StopReason {
    /// Zero length, zeroed page or absent next segment.
    CleanEnd,
    /// The first invalid record (or page, or segment), as the reader says.
    Invalid(WalError),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::CleanEnd => f.write_str("clean end of WAL"),
            StopReason::Invalid(e) => write!(f, "invalid record: {e}"),
        }
    }
}

/// Why recovery could not find a starting point in WAL.
#[derive(Debug)]
pub enum ScanError {
    /// The control file's segment size is not a valid geometry.
    BadGeometry(walformat::FormatError),
    /// The timeline's history file cannot be read or parsed.
    History(String),
    /// The checkpoint record's segment cannot be opened.
    CheckpointUnreadable { checkpoint: Lsn, error: WalError },
    /// A valid record is at the checkpoint's position, but not a checkpoint.
    NotTheCheckpoint {
        checkpoint: Lsn,
        found: Lsn,
        what: String,
    },
    /// WAL ends before the checkpoint record.
    NoCheckpoint { checkpoint: Lsn },
    /// The checkpoint record is invalid.
    InvalidCheckpoint { checkpoint: Lsn, error: WalError },
    /// The redo point's segment cannot be opened.
    RedoUnreadable { redo: Lsn, error: WalError },
    /// Reading from the redo point stopped before the checkpoint record.
    DamagedBeforeCheckpoint {
        redo: Lsn,
        checkpoint: Lsn,
        stop: StopReason,
    },
    /// The recovery target was reached before the checkpoint record.
    TargetBeforeCheckpoint { checkpoint: Lsn, record: Lsn },
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanError::BadGeometry(e) => write!(f, "{e}"),
            ScanError::History(e) => write!(f, "{e}"),
            ScanError::CheckpointUnreadable { checkpoint, error } => write!(
                f,
                "could not locate a valid checkpoint record at {}: {error}",
                format_lsn(*checkpoint)
            ),
            ScanError::NotTheCheckpoint {
                checkpoint,
                found,
                what,
            } => write!(
                f,
                "record at {} is not the checkpoint the control file names ({what}; checkpoint at {})",
                format_lsn(*found),
                format_lsn(*checkpoint)
            ),
            ScanError::NoCheckpoint { checkpoint } => {
                write!(f, "no checkpoint record at {}", format_lsn(*checkpoint))
            }
            ScanError::InvalidCheckpoint { checkpoint, error } => write!(
                f,
                "invalid checkpoint record at {}: {error}",
                format_lsn(*checkpoint)
            ),
            ScanError::RedoUnreadable { redo, error } => write!(
                f,
                "could not read WAL at redo point {}: {error}",
                format_lsn(*redo)
            ),
            ScanError::DamagedBeforeCheckpoint {
                redo,
                checkpoint,
                stop,
            } => {
                let why = match stop {
                    StopReason::CleanEnd => "it ends early".to_string(),
                    StopReason::Invalid(e) => e.to_string(),
                };
                write!(
                    f,
                    "WAL between redo point {} and checkpoint {} is damaged: {why}",
                    format_lsn(*redo),
                    format_lsn(*checkpoint)
                )
            }
            ScanError::TargetBeforeCheckpoint { checkpoint, record } => write!(
                f,
                "requested recovery stop point is before consistent recovery point: the target is reached at {}, before the checkpoint at {} that recovery starts from",
                format_lsn(*record),
                format_lsn(*checkpoint)
            ),
        }
    }
}

impl std::error::Error for ScanError {}

/// What recovery found.
#[derive(Debug)]
pub struct RecoveryResult {
    /// Start of the last valid record.
    pub last_record: Lsn,
    /// Where the next record goes.
    pub end_of_wal: Lsn,
    pub records: u64,
    /// Highest XID seen in a record, 0 if none.
    pub max_xid: u32,
    /// Why reading stopped.
    pub stop_reason: StopReason,
    /// Where reading stopped for the recovery target, if it did.
    pub reached: Option<Reached>,
}

impl RecoveryResult {
    /// Takes `r` as the last valid record.
    fn keep(&mut self, r: &walformat::DecodedRecord) {
        self.last_record = r.lsn;
        self.end_of_wal = r.next;
        self.records += 1;
        if r.xid != 0 && (self.max_xid == 0 || crate::procarray::xid_precedes(self.max_xid, r.xid))
        {
            self.max_xid = r.xid;
        }
    }
}

/// Reads the checkpoint record the control file names, then WAL from its
/// redo point to the end, or to `target` (see the module header).
pub fn scan_wal(
    datadir: &Path,
    control: &ControlFile,
    target: Option<&RecoveryTarget>,
) -> Result<RecoveryResult, ScanError> {
    let geo = Geometry::new(control.seg_size).map_err(ScanError::BadGeometry)?;
    let pg_wal = datadir.join("pg_wal");
    let checkpoint = control.checkpoint;
    // Along the timeline's history: a restored directory's redo point may
    // lie in a parent timeline's segment.
    let history = crate::timeline::Timeline::read(&pg_wal, control.timeline)
        .map(|t| t.reader_history())
        .map_err(|e| ScanError::History(e.to_string()))?;
    let open = |at: Lsn| {
        WalReader::open_across(
            &walfile::SEAM,
            &pg_wal,
            geo,
            history.clone(),
            Some(control.system_identifier),
            at,
        )
    };
    let unreadable = |error| ScanError::CheckpointUnreadable { checkpoint, error };
    let mut reader = open(checkpoint).map_err(unreadable)?;
    match reader.next_record() {
        Ok(Some(r)) if r.lsn == checkpoint && r.as_checkpoint().is_some() => {}
        Ok(Some(r)) => {
            return Err(ScanError::NotTheCheckpoint {
                checkpoint,
                found: r.lsn,
                what: format!("{} {}", r.rmgr_name(), r.describe()),
            })
        }
        Ok(None) => return Err(ScanError::NoCheckpoint { checkpoint }),
        Err(error) => return Err(ScanError::InvalidCheckpoint { checkpoint, error }),
    }
    reader = if control.redo != checkpoint {
        open(control.redo).map_err(|error| ScanError::RedoUnreadable {
            redo: control.redo,
            error,
        })?
    } else {
        open(checkpoint).map_err(unreadable)?
    };
    let (result, saw_checkpoint) = read_to_end(&mut reader, checkpoint, target);
    if let (Some(reached), false) = (&result.reached, saw_checkpoint) {
        return Err(ScanError::TargetBeforeCheckpoint {
            checkpoint,
            record: reached.record,
        });
    }
    if !saw_checkpoint {
        return Err(ScanError::DamagedBeforeCheckpoint {
            redo: control.redo,
            checkpoint,
            stop: result.stop_reason,
        });
    }
    Ok(result)
}

/// Reads records from `reader` until WAL ends, a record does not read, or
/// `target` stops it, keeping each record read before the stop. Returns
/// the result and whether the checkpoint record was among those kept.
fn read_to_end(
    reader: &mut WalReader,
    checkpoint: Lsn,
    target: Option<&RecoveryTarget>,
) -> (RecoveryResult, bool) {
    let mut result = RecoveryResult {
        last_record: checkpoint,
        end_of_wal: checkpoint,
        records: 0,
        max_xid: 0,
        stop_reason: StopReason::CleanEnd,
        reached: None,
    };
    let mut saw_checkpoint = false;
    while result.reached.is_none() {
        match reader.next_record() {
            Ok(Some(r)) => {
                result.reached = target.and_then(|t| t.stops_before(&r));
                if result.reached.is_none() {
                    saw_checkpoint |= r.lsn == checkpoint;
                    result.keep(&r);
                    result.reached = target.and_then(|t| t.stops_after(&r));
                }
            }
            Ok(None) => break,
            Err(e) => {
                result.stop_reason = StopReason::Invalid(e);
                break;
            }
        }
    }
    (result, saw_checkpoint)
}

/// Looks for valid WAL after where reading stopped (see the module header).
pub fn look_ahead(
    datadir: &Path,
    control: &ControlFile,
    r: &RecoveryResult,
) -> Result<Lookahead, WalError> {
    let sys = control.wal_system().expect("validated by scan_wal");
    walformat::look_ahead_from(&walfile::SEAM, &datadir.join("pg_wal"), sys, r.end_of_wal)
}

/// Where WAL position `lsn` is on disk: segment file name and offset.
pub(super) fn file_and_offset(geo: &Geometry, tli: u32, lsn: Lsn) -> (String, u64) {
    (geo.file_name(tli, geo.seg_no(lsn)), geo.seg_offset(lsn))
}

/// The FATAL report of a refusal: where reading stopped and why, what valid
/// WAL follows, and what the operator can do.
pub(super) fn damaged_wal_message(
    datadir: &Path,
    geo: &Geometry,
    tli: u32,
    r: &RecoveryResult,
    found: &ValidWalAfter,
) -> String {
    let (file, offset) = file_and_offset(geo, tli, r.end_of_wal);
    format!(
        "WAL is damaged before its end: reading stopped at {} (WAL segment {file}, offset {offset}): {}; \
         but valid WAL of this system follows: {}. \
         Starting would overwrite it, so the server does not start and has changed nothing. \
         HINT: restore the damaged or missing segment from a copy (a backup, pg_receivewal's output) and start again; \
         or accept losing the WAL after {} with \"postmaster start -D {} --discard-damaged-wal\", which moves it to {}/{DISCARDED_DIR}/ (never deleted)",
        format_lsn(r.end_of_wal),
        r.stop_reason,
        valid_wal_text(found, "from", ""),
        format_lsn(r.end_of_wal),
        datadir.display(),
        datadir.display()
    )
}

/// The WARNING of a power-loss tail: where reading stopped, the first valid
/// record after it, and the window it lies in.
pub(super) fn power_loss_tail_message(
    geo: &Geometry,
    tli: u32,
    r: &RecoveryResult,
    ahead: &Lookahead,
    found: &ValidWalAfter,
) -> String {
    let (file, offset) = file_and_offset(geo, tli, r.end_of_wal);
    format!(
        "WAL ends at {} (WAL segment {file}, offset {offset}): {}; valid WAL follows only inside the unsynced window {}..{} (the rest of that segment): \
         {}. \
         Taken for a power-loss tail (written, never fdatasynced, so never acknowledged): recovery ends at {} and the tail is zeroed. \
         Media damage inside the last segment of WAL looks the same",
        format_lsn(r.end_of_wal),
        r.stop_reason,
        format_lsn(r.end_of_wal),
        format_lsn(ahead.window_end),
        valid_wal_text(found, "the first at", ","),
        format_lsn(r.end_of_wal),
    )
}

/// The valid WAL a look-ahead found, as both reports above word it:
/// `N record(s), M of them COMMIT, <first> LSN (WAL segment F, offset
/// O)<then> up to END`.
fn valid_wal_text(found: &ValidWalAfter, first: &str, then: &str) -> String {
    format!(
        "{} record(s), {} of them COMMIT, {first} {} (WAL segment {}, offset {}){then} up to {}",
        found.records,
        found.commits,
        format_lsn(found.first_record),
        found.first_file,
        found.first_offset,
        format_lsn(found.last_end),
    )
}
