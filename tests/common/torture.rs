//! `walbench torture` runs, bounded by a timeout, with a guard that kills
//! the server walbench left behind when a test fails half-way.

use super::{live_postmaster, run_cmd, Out, TempDir};
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Every `walbench torture` run of a test is bounded by this (the watchdog
/// kills walbench, the guard its server).
pub const TORTURE_TIMEOUT: Duration = Duration::from_secs(100);

/// Kills a server walbench left behind (it runs in a process group of its
/// own) if the test fails half-way.
struct TortureServerGuard(PathBuf);

impl Drop for TortureServerGuard {
    fn drop(&mut self) {
        if let Some(pid) = live_postmaster(&self.0) {
            // SAFETY: kill has no memory effects; the group is the server's.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

/// Runs `walbench torture -D TMP/data --json TMP/report.json ARGS` with
/// `env`; its output, the JSON report and the data directory.
pub fn torture(
    tmp: &TempDir,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Out, serde_json::Value, PathBuf) {
    let data = tmp.join("data");
    let json = tmp.join("report.json");
    let _guard = TortureServerGuard(data.clone());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_walbench"));
    cmd.arg("torture")
        .arg("-D")
        .arg(&data)
        .arg("--json")
        .arg(&json)
        .args(args)
        .env_remove("WALSHM_TEST_BREAK");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = run_cmd(&mut cmd, TORTURE_TIMEOUT);
    let text = fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no JSON report ({e})\n{}", o.describe()));
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON report: {e}\n{text}"));
    (o, v, data)
}
