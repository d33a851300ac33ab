//! Running PostgreSQL 15's `pg_waldump` and walshm's `postmaster waldump`,
//! and parsing what they print.

use super::run::Watchdog;
use super::wire::pg_program;
use super::{postmaster_bin, run_cmd, DataDir, Out};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Path of PostgreSQL 15's pg_waldump, or None after printing a loud skip
/// notice (panics instead when WALSHM_REQUIRE_PG=1).
pub fn pg_waldump_path() -> Option<PathBuf> {
    let p = std::env::var_os("PG_WALDUMP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin/pg_waldump"));
    pg_program(p, "pg_waldump", "pg_waldump", "PG_WALDUMP")
}

/// How long one run of either dump may take.
const DUMP_TIMEOUT: Duration = Duration::from_secs(120);

/// `pg_waldump -p DIR/pg_wal -s START`; None if pg_waldump is not
/// installed.
fn pg_waldump_from(d: &DataDir, start: u64) -> Option<Command> {
    let mut cmd = Command::new(pg_waldump_path()?);
    cmd.arg("-p")
        .arg(d.path.join("pg_wal"))
        .arg("-s")
        .arg(walformat::format_lsn(start));
    Some(cmd)
}

/// `postmaster waldump -D DIR --start START`.
fn own_waldump_from(datadir: &Path, start: u64) -> Command {
    let mut cmd = Command::new(postmaster_bin());
    cmd.args(["waldump", "-D"])
        .arg(datadir)
        .arg("--start")
        .arg(walformat::format_lsn(start));
    cmd
}

/// How pg_waldump stopped.
#[derive(Debug)]
pub struct PgEnd {
    /// The LSN pg_waldump names as end of WAL.
    pub end_lsn: u64,
}

/// Checks that pg_waldump ended at the normal end of WAL; returns where.
/// Exactly "invalid record length at X: wanted 24, got 0" is a normal end.
/// If the end lies on a page boundary the next page is simply not written
/// yet, so "invalid magic number 0000" there is a normal end too.
pub fn pg_normal_end(o: &Out) -> Result<PgEnd, String> {
    if o.code() != Some(1) {
        return Err(format!("pg_waldump exit status {:?}", o.status));
    }
    let lines: Vec<&str> = o.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() != 1 {
        return Err(format!("pg_waldump stderr is not one line: {:?}", o.stderr));
    }
    let l = lines[0];
    if let Some(rest) = l
        .split_once(": invalid record length at ")
        .map(|(_, r)| r)
        .filter(|_| l.starts_with("pg_waldump: error: error in WAL record at "))
    {
        if let Some(lsn) = rest.strip_suffix(": wanted 24, got 0") {
            return walformat::parse_lsn(lsn)
                .map(|end_lsn| PgEnd { end_lsn })
                .map_err(|_| format!("bad LSN in {l:?}"));
        }
    }
    if l.contains("invalid magic number 0000") {
        // "...: invalid magic number 0000 in log segment S, offset O"
        return Err(format!("PAGE-BOUNDARY:{l}"));
    }
    Err(format!("unexpected pg_waldump error: {l:?}"))
}

/// pg_waldump totals (--stats).
#[derive(Debug)]
pub struct PgStats {
    pub logical_messages: u64,
    pub total_records: u64,
    pub total_bytes: u64,
    pub end: Option<PgEnd>,
}

/// `pg_waldump -p DIR/pg_wal -s START --stats`; None if pg_waldump is not
/// installed. Panics unless it read to a normal end of WAL (`end_lsn` is
/// walshm's end of WAL; used for the page-boundary case).
pub fn pg_waldump_stats(d: &DataDir, end_lsn: u64) -> Option<PgStats> {
    let mut cmd = pg_waldump_from(d, d.first_lsn)?;
    let o = run_cmd(cmd.arg("--stats"), DUMP_TIMEOUT);
    let end = match pg_normal_end(&o) {
        Ok(e) => Some(e),
        Err(e) if e.starts_with("PAGE-BOUNDARY:") && end_lsn.is_multiple_of(8192) => None,
        Err(e) => panic!(
            "pg_waldump did not read to a normal end: {e}\n{}",
            o.describe()
        ),
    };
    let field = |name: &str, idx: usize| -> u64 {
        o.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(idx))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} line in pg_waldump --stats\n{}", o.describe()))
    };
    let logical = field("LogicalMessage", 1);
    let total = field("Total", 1);
    let bytes = field("Total", 2);
    Some(PgStats {
        logical_messages: logical,
        total_records: total,
        total_bytes: bytes,
        end,
    })
}

/// `pg_waldump -p DIR/pg_wal -s START [-n N]` record lines (lines starting
/// with "rmgr: "); None if pg_waldump is not installed. Panics unless it
/// stopped after N records or at a normal end of WAL.
pub fn pg_waldump(d: &DataDir, start: u64, limit: Option<u64>) -> Option<Vec<String>> {
    let mut cmd = pg_waldump_from(d, start)?;
    if let Some(n) = limit {
        cmd.arg("-n").arg(n.to_string());
    }
    let o = run_cmd(&mut cmd, DUMP_TIMEOUT);
    let lines: Vec<String> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("rmgr: "))
        .map(String::from)
        .collect();
    let reached_limit = limit.is_some_and(|n| lines.len() as u64 == n);
    if !(reached_limit && o.status.success()) {
        if let Err(e) = pg_normal_end(&o) {
            if !e.starts_with("PAGE-BOUNDARY:") {
                panic!(
                    "pg_waldump -s {} failed: {e}\n--- stderr ---\n{}",
                    walformat::format_lsn(start),
                    o.stderr
                );
            }
        }
    }
    Some(lines)
}

/// `pg_waldump -p DIR/pg_wal -s START` in full, not judged; None if
/// pg_waldump is not installed.
pub fn pg_waldump_raw(d: &DataDir, start: u64) -> Option<Out> {
    Some(run_cmd(&mut pg_waldump_from(d, start)?, DUMP_TIMEOUT))
}

/// The end line of `postmaster waldump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnEnd {
    pub end_lsn: u64,
    pub reason: String,
    pub records: u64,
    pub bytes: u64,
}

/// `postmaster waldump -D DIR --quiet`, parsed; panics on failure.
pub fn own_waldump(datadir: &Path) -> OwnEnd {
    let o = run_cmd(
        Command::new(postmaster_bin())
            .args(["waldump", "--quiet", "-D"])
            .arg(datadir),
        DUMP_TIMEOUT,
    );
    assert!(o.status.success(), "postmaster waldump\n{}", o.describe());
    parse_own_end(&o.stdout).unwrap_or_else(|| panic!("no end line\n{}", o.describe()))
}

/// "end of WAL at X: REASON; N records, B bytes from Y"
pub fn parse_own_end(stdout: &str) -> Option<OwnEnd> {
    let line = stdout.lines().find(|l| l.starts_with("end of WAL at "))?;
    let rest = line.strip_prefix("end of WAL at ")?;
    let (lsn, rest) = rest.split_once(": ")?;
    let (reason, rest) = rest.rsplit_once("; ")?;
    let w: Vec<&str> = rest.split_whitespace().collect();
    Some(OwnEnd {
        end_lsn: walformat::parse_lsn(lsn).ok()?,
        reason: reason.to_string(),
        records: w.first()?.parse().ok()?,
        bytes: w.get(2)?.trim_end_matches(',').parse().ok()?,
    })
}

/// The first `n` record lines of `postmaster waldump -D DIR --start LSN`
/// (the process is killed once they are read).
pub fn own_waldump_lines(datadir: &Path, start: u64, n: usize) -> Vec<String> {
    let mut child = own_waldump_from(datadir, start)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn waldump");
    let dog = Watchdog::new(child.id() as i32, DUMP_TIMEOUT);
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut buf = String::new();
    while lines.len() < n {
        buf.clear();
        if r.read_line(&mut buf).unwrap_or(0) == 0 {
            break;
        }
        let l = buf.trim_end_matches('\n');
        if l.starts_with("rmgr: ") {
            lines.push(l.to_string());
        }
    }
    // SAFETY: kill has no memory effects; the child is not reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    drop(r);
    let _ = child.wait();
    assert!(!dog.fired(), "postmaster waldump --start timed out");
    lines
}

/// `postmaster waldump -D DIR --start START` in full, not judged.
pub fn own_waldump_raw(datadir: &Path, start: u64) -> Out {
    run_cmd(&mut own_waldump_from(datadir, start), DUMP_TIMEOUT)
}

/// One record line of pg_waldump or `postmaster waldump`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpRec {
    pub rmgr: String,
    pub xid: u32,
    pub lsn: u64,
    /// First word of the description: COMMIT, MESSAGE, CHECKPOINT_ONLINE...
    pub kind: String,
    /// A transactional logical message.
    pub transactional: bool,
}

/// Parses "rmgr: R len (rec/tot): a/ b, tx: X, lsn: L, prev P, desc: D".
pub fn parse_dump_line(l: &str) -> Option<DumpRec> {
    let rest = l.strip_prefix("rmgr: ")?;
    let rmgr = rest.split_whitespace().next()?.to_string();
    let tx = rest.split_once("tx:")?.1.trim_start();
    let xid = tx.split(',').next()?.trim().parse().ok()?;
    let lsn = rest.split_once(", lsn: ")?.1.split(',').next()?;
    let desc = rest.split_once("desc: ")?.1;
    Some(DumpRec {
        rmgr,
        xid,
        lsn: walformat::parse_lsn(lsn.trim()).ok()?,
        kind: desc.split_whitespace().next().unwrap_or("").to_string(),
        transactional: desc.starts_with("MESSAGE transactional"),
    })
}

/// Record lines ("rmgr: ...") of a dump's stdout.
pub fn record_lines(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("rmgr: "))
        .map(String::from)
        .collect()
}

/// COMMIT LSNs of `postmaster waldump -D DIR` from `start` (along the
/// control file's timeline history), which must read to a clean end.
pub fn commits_in(dir: &Path, start: u64) -> std::collections::HashSet<u64> {
    let o = own_waldump_raw(dir, start);
    assert!(o.status.success(), "waldump\n{}", o.describe());
    let end = parse_own_end(&o.stdout).expect("end line");
    assert_eq!(end.reason, "clean end of WAL", "{end:?}");
    record_lines(&o.stdout)
        .iter()
        .filter_map(|l| parse_dump_line(l))
        .filter(|r| r.rmgr == "Transaction" && r.kind == "COMMIT")
        .map(|r| r.lsn)
        .collect()
}
