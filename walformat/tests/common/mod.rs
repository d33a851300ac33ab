//! Shared helpers for the walformat integration tests (tests/format/).

use std::path::{Path, PathBuf};
use std::process::Command;
use walformat::{CheckPoint, Lsn};

/// A uniquely named directory under the system temp dir, removed on drop.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("walformat-{tag}-"))
            .tempdir()
            .expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// The checkpoint fields of a cluster fresh from PostgreSQL 15's initdb:
/// timeline 1, full-page writes, the multixact and XID horizons initdb
/// leaves, no commit timestamps. A test sets redo, next_xid, next_oid,
/// time and oldest_active_xid.
pub fn initdb_checkpoint() -> CheckPoint {
    CheckPoint {
        tli: 1,
        prev_tli: 1,
        full_page_writes: true,
        next_multi: 1,
        next_multi_offset: 0,
        oldest_xid: 716,
        oldest_xid_db: 1,
        oldest_multi: 1,
        oldest_multi_db: 1,
        oldest_commit_ts_xid: 0,
        newest_commit_ts_xid: 0,
        ..CheckPoint::default()
    }
}

/// One line of `pg_waldump` output, split into its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpLine {
    pub rmgr: String,
    pub rec_len: u32,
    pub tot_len: u32,
    pub xid: u32,
    pub lsn: Lsn,
    pub prev: Lsn,
    pub desc: String,
}

/// Parses `rmgr: X len (rec/tot): R/ T, tx: N, lsn: A/B, prev C/D, desc: ...`.
pub fn parse_dump_line(line: &str) -> Option<DumpLine> {
    let rest = line.strip_prefix("rmgr: ")?;
    let (rmgr, rest) = rest.split_once(" len (rec/tot):")?;
    let (lens, rest) = rest.split_once(", tx:")?;
    let (rec, tot) = lens.split_once('/')?;
    let (xid, rest) = rest.split_once(", lsn: ")?;
    let (lsn, rest) = rest.split_once(", prev ")?;
    let (prev, desc) = rest.split_once(", desc: ")?;
    Some(DumpLine {
        rmgr: rmgr.trim().to_string(),
        rec_len: rec.trim().parse().ok()?,
        tot_len: tot.trim().parse().ok()?,
        xid: xid.trim().parse().ok()?,
        lsn: walformat::parse_lsn(lsn.trim()).ok()?,
        prev: walformat::parse_lsn(prev.trim()).ok()?,
        desc: desc.to_string(),
    })
}

/// Where PostgreSQL 15's pg_waldump is (env `PG_WALDUMP` overrides).
pub fn pg_waldump_path() -> Option<PathBuf> {
    let candidate = std::env::var_os("PG_WALDUMP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin/pg_waldump"));
    candidate.is_file().then_some(candidate)
}

/// Returns pg_waldump's path, or `None` after printing a loud SKIPPED
/// message. Panics instead when `WALSHM_REQUIRE_PG=1`.
pub fn pg_waldump_or_skip(test: &str) -> Option<PathBuf> {
    if let Some(path) = pg_waldump_path() {
        return Some(path);
    }
    let required = std::env::var("WALSHM_REQUIRE_PG").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{test}: pg_waldump not found and WALSHM_REQUIRE_PG=1"
    );
    eprintln!("\n*************************************************************");
    eprintln!("SKIPPED: pg_waldump not found ({test}); install postgresql-15");
    eprintln!("*************************************************************\n");
    None
}

/// Output of one pg_waldump run.
pub struct DumpRun {
    pub lines: Vec<DumpLine>,
    pub stdout: String,
    pub stderr: String,
    pub success: bool,
}

/// Runs `pg_waldump -p dir -s start` with `TZ=UTC`.
pub fn run_pg_waldump(bin: &Path, dir: &Path, start: Lsn) -> DumpRun {
    let out = Command::new(bin)
        .arg("-p")
        .arg(dir)
        .arg("-s")
        .arg(walformat::format_lsn(start))
        .env("TZ", "UTC")
        .output()
        .expect("run pg_waldump");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines = stdout.lines().filter_map(parse_dump_line).collect();
    DumpRun {
        lines,
        stdout,
        stderr,
        success: out.status.success(),
    }
}

/// The message pg_waldump prints at the normal end of WAL at `end`.
pub fn normal_end_message(end: Lsn) -> String {
    // Error messages use "%X/%X" (no zero padding).
    format!(
        "invalid record length at {:X}/{:X}: wanted 24, got 0",
        end >> 32,
        end & 0xFFFF_FFFF
    )
}
