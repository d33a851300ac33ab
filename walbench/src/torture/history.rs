//! The history checker: what the server acknowledged against what the WAL
//! holds, read with walshm's own reader (walformat) and, when installed,
//! PostgreSQL's pg_waldump.
//!
//! Checks, on a stopped server:
//! 1. every acknowledged LSN is the start of a COMMIT record (an ack names
//!    the commit record's start; a missing one is *lost*), except acks in
//!    segments checkpoints removed (counted apart as unverifiable);
//! 2. no XID has two COMMIT records (each acknowledged XID committed exactly
//!    once; the XID is in the commit record, not in the ack line);
//! 3. the WAL ends cleanly (the reader's `Ok(None)`), and nothing valid
//!    follows its end (walformat's look-ahead finds no page of this system
//!    with a valid record after it);
//! 4. pg_waldump decodes as many records from the same start and stops at
//!    the same end (or at the next page when the end is a page boundary).
//!
//! A partial check ([`acks_present`]) reads only from the segment of the
//! oldest ack given: it runs right after a power loss, before recovery
//! writes anything, so an ack whose commit record did not survive is seen
//! lost even if new WAL later lands at the same LSN.

use backend::control::ControlFile;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use walformat::{format_lsn, Lsn, WalReader, WalSystem};

/// Where PostgreSQL 15 installs pg_waldump (`PG_WALDUMP` overrides).
const PG_WALDUMP: &str = "/usr/lib/postgresql/15/bin/pg_waldump";

/// What reading the WAL found.
#[derive(Debug, Default)]
pub struct WalScan {
    pub start: Lsn,
    pub records: u64,
    /// COMMIT record start -> XID.
    pub commits: HashMap<Lsn, u32>,
    /// XIDs with two COMMIT records: (xid, first, second).
    pub double_commits: Vec<(u32, Lsn, Lsn)>,
    /// What a committed-only reader from `start` delivers
    /// (`backend::reorder`): the transactional messages' LSNs and their
    /// transactions' XIDs.
    pub delivered: HashSet<Lsn>,
    pub delivered_xids: HashSet<u32>,
    /// XIDs with an ABORT record.
    pub aborted: HashSet<u32>,
    /// Start of every transactional message.
    pub tx_messages: std::collections::BTreeSet<Lsn>,
    /// End of valid WAL.
    pub end: Lsn,
    /// Why reading stopped, if not at a clean end.
    pub end_error: Option<String>,
}

/// The verdict of one check.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Acks checked.
    pub checked: u64,
    /// Acks in WAL segments that checkpoints removed (below the oldest
    /// segment left): not checkable at the end (a data directory walbench
    /// creates keeps all WAL; power-loss mode checked them on disk at each
    /// power loss).
    pub unverifiable: Vec<Lsn>,
    /// Acknowledged LSNs that are not a COMMIT record.
    pub lost: Vec<Lsn>,
    pub violations: Vec<String>,
    pub records: u64,
    /// `Some(true)`: pg_waldump agreed; `None`: not installed.
    pub pg_waldump: Option<bool>,
}

/// The data directory's WAL facts from its control file.
struct Facts {
    pg_wal: PathBuf,
    sys: WalSystem,
}

fn facts(datadir: &Path) -> Result<Facts, String> {
    let c = ControlFile::read(datadir).map_err(|e| format!("control file: {e}"))?;
    Ok(Facts {
        pg_wal: datadir.join("pg_wal"),
        sys: c.wal_system().map_err(|e| e.to_string())?,
    })
}

/// The start of the oldest segment of the timeline read in `pg_wal`.
fn oldest_segment_start(f: &Facts) -> Result<Lsn, String> {
    let names = std::fs::read_dir(&f.pg_wal)
        .map_err(|e| format!("could not list \"{}\": {e}", f.pg_wal.display()))?;
    names
        .flatten()
        .filter_map(|e| f.sys.geo.parse_file_name(e.file_name().to_str()?))
        .filter(|&(t, _)| t == f.sys.tli)
        .map(|(_, n)| n)
        .min()
        .map(|n| f.sys.geo.seg_start(n))
        .ok_or_else(|| format!("no WAL segment in \"{}\"", f.pg_wal.display()))
}

/// Reads every record from `start` to the end of valid WAL; with
/// `committed_view` also what a committed-only reader delivers
/// (`delivered`, `delivered_xids`: `--kill-attached`'s check only).
fn scan(f: &Facts, start: Lsn, committed_view: bool) -> Result<WalScan, String> {
    let mut s = WalScan {
        start,
        end: start,
        ..WalScan::default()
    };
    let mut reader =
        match WalReader::open(&f.pg_wal, f.sys.geo, f.sys.tli, Some(f.sys.sysid), start) {
            Ok(r) => r,
            // The segment is gone (an undone creation): WAL ends before it.
            Err(e @ walformat::WalError::MissingSegment { .. }) => {
                s.end_error = Some(e.to_string());
                return Ok(s);
            }
            Err(e) => return Err(format!("could not open WAL at {}: {e}", format_lsn(start))),
        };
    let mut first_commit: HashMap<u32, Lsn> = HashMap::new();
    let mut reorder = backend::reorder::Reorder::new(start, start);
    loop {
        match reader.next_record() {
            Ok(Some(r)) => {
                s.records += 1;
                if committed_view {
                    if let Some(backend::reorder::Change::Transaction(t)) = reorder.add(&r) {
                        s.delivered_xids.insert(t.xid);
                        s.delivered.extend(t.messages.iter().map(|m| m.lsn));
                    }
                }
                if r.is_abort() {
                    s.aborted.insert(r.xid);
                }
                if matches!(r.as_logical_message(), Some((true, _, _))) {
                    s.tx_messages.insert(r.lsn);
                }
                if r.is_commit() {
                    s.commits.insert(r.lsn, r.xid);
                    if let Some(first) = first_commit.insert(r.xid, r.lsn) {
                        s.double_commits.push((r.xid, first, r.lsn));
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                s.end_error = Some(e.to_string());
                break;
            }
        }
    }
    s.end = reader.end_of_valid();
    Ok(s)
}

/// The acks among `acks` that are not a COMMIT record in `s`.
fn missing(acks: &[Lsn], s: &WalScan) -> Vec<Lsn> {
    acks.iter()
        .filter(|a| !s.commits.contains_key(a))
        .copied()
        .collect()
}

/// Partial check right after a power loss (the WAL as the disk holds it,
/// before recovery): the acks not found as COMMIT records, and those in
/// segments checkpoints removed (not checkable).
pub fn acks_present(datadir: &Path, acks: &[Lsn]) -> Result<(Vec<Lsn>, Vec<Lsn>), String> {
    let f = facts(datadir)?;
    let oldest_kept = oldest_segment_start(&f)?;
    let (kept, removed): (Vec<Lsn>, Vec<Lsn>) = acks.iter().partition(|a| **a >= oldest_kept);
    let Some(&oldest) = kept.iter().min() else {
        return Ok((vec![], removed));
    };
    let start = f.sys.geo.seg_start(f.sys.geo.seg_no(oldest));
    Ok((missing(&kept, &scan(&f, start, false)?), removed))
}

/// Every record of a stopped server's WAL, from its oldest segment.
pub fn scan_all(datadir: &Path) -> Result<WalScan, String> {
    let f = facts(datadir)?;
    scan(&f, oldest_segment_start(&f)?, true)
}

/// The full check of a stopped server's WAL against every ack of the run.
pub fn check(datadir: &Path, acks: &[Lsn]) -> Result<Verdict, String> {
    let f = facts(datadir)?;
    let s = scan(&f, oldest_segment_start(&f)?, false)?;
    // Acks in segments checkpoints removed cannot be checked any more.
    let (kept, removed): (Vec<Lsn>, Vec<Lsn>) = acks.iter().partition(|a| **a >= s.start);
    let mut v = Verdict {
        checked: kept.len() as u64,
        unverifiable: removed,
        lost: missing(&kept, &s),
        records: s.records,
        ..Verdict::default()
    };
    let distinct: HashSet<&Lsn> = acks.iter().collect();
    if distinct.len() != acks.len() {
        v.violations.push(format!(
            "{} LSNs acknowledged more than once",
            acks.len() - distinct.len()
        ));
    }
    for (xid, a, b) in &s.double_commits {
        v.violations.push(format!(
            "xid {xid} committed twice: at {} and at {}",
            format_lsn(*a),
            format_lsn(*b)
        ));
    }
    if let Some(e) = &s.end_error {
        v.violations.push(format!(
            "WAL of a cleanly stopped server does not end cleanly at {}: {e}",
            format_lsn(s.end)
        ));
    }
    if let Some(after) = valid_wal_after(&f, s.end)? {
        v.violations.push(after);
    }
    match pg_waldump_agrees(&f, &s) {
        None => {}
        Some(Ok(())) => v.pg_waldump = Some(true),
        Some(Err(e)) => {
            v.pg_waldump = Some(false);
            v.violations.push(e);
        }
    }
    Ok(v)
}

/// A violation if valid WAL of this system follows `end`.
fn valid_wal_after(f: &Facts, end: Lsn) -> Result<Option<String>, String> {
    let la = walformat::look_ahead(&f.pg_wal, f.sys, end)
        .map_err(|e| format!("look-ahead after {}: {e}", format_lsn(end)))?;
    Ok(la.found.map(|w| {
        format!(
            "valid WAL after the end of WAL {}: {} records ({} COMMITs) from {} in {} up to {}",
            format_lsn(end),
            w.records,
            w.commits,
            format_lsn(w.first_record),
            w.first_file,
            format_lsn(w.last_end)
        )
    }))
}

/// pg_waldump's path, if installed.
fn pg_waldump_path() -> Option<PathBuf> {
    let p = std::env::var_os("PG_WALDUMP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(PG_WALDUMP));
    p.is_file().then_some(p)
}

/// Is pg_waldump installed (for the report)?
pub fn pg_waldump_installed() -> bool {
    pg_waldump_path().is_some()
}

/// `None` if pg_waldump is not installed; otherwise whether it read as
/// many records as walshm's reader and stopped at the same end.
fn pg_waldump_agrees(f: &Facts, s: &WalScan) -> Option<Result<(), String>> {
    let pg = pg_waldump_path()?;
    Some(run_pg_waldump(&pg, f, s.start).and_then(|(records, end)| {
        if records != s.records {
            return Err(format!(
                "pg_waldump read {records} records, walshm's reader {}",
                s.records
            ));
        }
        match end {
            PgEnd::At(e) if e == s.end => Ok(()),
            PgEnd::PageBoundary if s.end.is_multiple_of(walformat::XLOG_BLCKSZ as u64) => Ok(()),
            other => Err(format!(
                "pg_waldump ended at {other:?}, walshm's reader at {}",
                format_lsn(s.end)
            )),
        }
    }))
}

/// Where pg_waldump stopped.
#[derive(Debug, PartialEq, Eq)]
enum PgEnd {
    /// "invalid record length at X: wanted 24, got 0": the normal end.
    At(Lsn),
    /// "invalid magic number 0000": the next page is not written.
    PageBoundary,
    Other(String),
}

/// Runs pg_waldump from `start`: the records it printed and its end.
fn run_pg_waldump(pg: &Path, f: &Facts, start: Lsn) -> Result<(u64, PgEnd), String> {
    let mut child = Command::new(pg)
        .arg("-p")
        .arg(&f.pg_wal)
        .arg("-s")
        .arg(format_lsn(start))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run {}: {e}", pg.display()))?;
    let out = child.stdout.take().expect("piped stdout");
    let records = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.starts_with("rmgr: "))
        .count() as u64;
    let o = child
        .wait_with_output()
        .map_err(|e| format!("pg_waldump: {e}"))?;
    Ok((records, parse_pg_end(&String::from_utf8_lossy(&o.stderr))))
}

fn parse_pg_end(stderr: &str) -> PgEnd {
    let line = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if let Some(lsn) = line
        .split_once(": invalid record length at ")
        .and_then(|(_, r)| r.strip_suffix(": wanted 24, got 0"))
        .and_then(|l| walformat::parse_lsn(l).ok())
    {
        return PgEnd::At(lsn);
    }
    if line.contains("invalid magic number 0000") {
        return PgEnd::PageBoundary;
    }
    PgEnd::Other(line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_waldump_ends_are_recognized() {
        assert_eq!(
            parse_pg_end("pg_waldump: error: error in WAL record at 0/1A2B3C8: invalid record length at 0/1A2B3F0: wanted 24, got 0\n"),
            PgEnd::At(0x1A2B3F0)
        );
        assert_eq!(
            parse_pg_end("pg_waldump: error: error in WAL record at 0/2000: invalid magic number 0000 in log segment 000000010000000000000001, offset 8192"),
            PgEnd::PageBoundary
        );
        assert!(matches!(
            parse_pg_end("pg_waldump: error: bad"),
            PgEnd::Other(_)
        ));
    }

    #[test]
    fn missing_acks_are_those_without_a_commit() {
        let mut s = WalScan::default();
        s.commits.insert(0x100, 7);
        s.commits.insert(0x200, 8);
        assert_eq!(missing(&[0x100, 0x180, 0x200], &s), vec![0x180]);
    }
}
