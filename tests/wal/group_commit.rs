//! Durable commits through each `group_commit` variant:
//! `leader` (PostgreSQL's XLogFlush), `flusher` (the walwriter flushes and
//! wakes exactly the covered waiters) and `hybrid` (a committer flushes
//! itself when WALWriteLock is free, otherwise hands over to the
//! walwriter). For each variant:
//! - kill -9 of a backend, then of the walwriter (while backends wait for
//!   it), under an acknowledged `emit-tx` load with fsync on: the runtime
//!   restarts by itself and every acknowledged commit is a COMMIT record in
//!   the recovered WAL;
//! - kill -9 of the postmaster, then a new start: the same;
//! - 16 concurrent committers share fdatasyncs (commits per fdatasync > 2,
//!   from the summary's JSON line), and a fast shutdown exits 0;
//! - `walbench torture --set group_commit=...` passes a short run;
//! - the default (`hybrid`) fills fdatasyncs: more than 4 commits per
//!   fdatasync among 16 concurrent committers;
//! - with `commit_delay` set (a leader sleeps before its fdatasync), kill
//!   -9 of a backend and of the walwriter still loses no acknowledged
//!   commit;
//! - bad values of `group_commit`, `commit_delay` and `commit_siblings`
//!   are refused with an error naming the setting, and no server starts.
//!
//! Every test here runs with `wal_sync_method = fdatasync` (the default);
//! tests/wal/sync_method.rs covers the other methods. Verdicts come from exit codes, the ack lines, the WAL and JSON, never
//! from log wording.

use crate::common::*;
use std::time::Duration;

/// The variants under test (the first is PostgreSQL's algorithm).
const VARIANTS: [&str; 3] = ["leader", "flusher", "hybrid"];

fn variant_set(variant: &str) -> String {
    format!("group_commit={variant}")
}

/// An acknowledged emit-tx run of `workers` backends with fsync on.
fn ack_args<'a>(workers: &'a str, set: &'a str) -> Vec<&'a str> {
    ack_args_with(workers, &[set])
}

/// `ack_args` with several `--set` assignments (checkpoints every second).
fn ack_args_with<'a>(workers: &'a str, sets: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["checkpoint_timeout=1"];
    all.extend_from_slice(sets);
    durable_ack_args(workers, &all)
}

/// The PID of one child named `comm`.
fn child_named(s: &Server, backends: usize, comm: &str) -> i32 {
    let kids = s.wait_children(backends);
    kids.iter()
        .find(|(_, c)| c == comm)
        .map(|(p, _)| *p)
        .unwrap_or_else(|| panic!("no {comm} among {kids:?}"))
}

/// kill -9 of a backend, then of the walwriter, during an acknowledged
/// run; every ack is on disk afterwards.
fn kill_children_keeps_acks(variant: &str) {
    kill_children_keeps_acks_with(variant, &[])
}

/// `kill_children_keeps_acks` with more settings (`extra`).
fn kill_children_keeps_acks_with(variant: &str, extra: &[&str]) {
    let tmp = TempDir::new(&format!("gc-kill-{variant}"));
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let set = variant_set(variant);
    let mut sets = vec![set.as_str()];
    sets.extend_from_slice(extra);
    let mut s = Server::start_ready(&d.path, tmp.path(), &ack_args_with("8", &sets));
    for (round, victim) in ["backend", "walwriter"].iter().enumerate() {
        std::thread::sleep(Duration::from_millis(500));
        let pid = child_named(&s, 8, victim);
        kill(pid, libc::SIGKILL);
        s.wait_ready_n(round + 2, TIMEOUT);
    }
    s.wait_children(8);
    std::thread::sleep(Duration::from_millis(400));
    let o = s.stop_ok();
    assert_eq!(parse_summary(&o.stdout).crash_restarts, 2, "{}", o.stdout);
    let wal = tx_wal_check(&d);
    let acks = parse_acks(&o.stdout);
    let checked = check_acks(&acks, &wal);
    assert!(checked > 0, "no acks");
    eprintln!(
        "{variant}: {checked} acked commits checked after killing a backend and the walwriter ({} on disk)",
        wal.commits.len()
    );
}

/// kill -9 of the postmaster (its children follow), then a new start.
fn kill_postmaster_keeps_acks(variant: &str) {
    let tmp = TempDir::new(&format!("gc-killpm-{variant}"));
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let set = variant_set(variant);
    let s = Server::start_ready(&d.path, tmp.path(), &ack_args("16", &set));
    let kids = s.wait_children(16);
    std::thread::sleep(Duration::from_millis(800));
    let o1 = s.kill9_with_children(&kids);
    let acks1 = parse_acks(&o1.stdout);
    assert!(!acks1.is_empty(), "no acks before the kill");
    let (checked, _) = recover_and_check_acks(&d, tmp.path(), &ack_args("4", &set), &acks1);
    eprintln!(
        "{variant}: kill -9 postmaster: {} acks before, {checked} checked",
        acks1.len()
    );
}

/// 16 committers for a second: commits share fdatasyncs, more than `min`
/// per fdatasync.
fn sixteen_committers_share_fdatasyncs(variant: &str) {
    committers_per_fdatasync(Some(variant), Duration::from_secs(1), 2.0);
}

/// 16 committers for `run` with `variant` (None: the default): more than
/// `min` commits per fdatasync.
fn committers_per_fdatasync(variant: Option<&str>, run: Duration, min: f64) {
    let variant_name = variant.unwrap_or("default");
    let tmp = TempDir::new(&format!("gc-share-{variant_name}"));
    let d = init(&tmp.join("data"), &[]);
    let set = variant.map(variant_set);
    let mut args = vec![
        "--workers",
        "16",
        "--workload",
        "emit-tx:64",
        "--set",
        "fsync=on",
    ];
    if let Some(set) = &set {
        args.extend(["--set", set.as_str()]);
    }
    let variant = variant_name;
    let o = run_for(&d.path, tmp.path(), &args, run);
    let tx = parse_summary(&o.stdout).tx;
    assert!(tx.sync_commits > 100, "too few commits: {tx:?}");
    assert!(tx.fdatasyncs > 0, "no fdatasync with fsync=on: {tx:?}");
    let per = tx.sync_commits as f64 / tx.fdatasyncs as f64;
    eprintln!(
        "{variant}: {} commits, {} fdatasyncs: {per:.1} per fdatasync",
        tx.sync_commits, tx.fdatasyncs
    );
    assert!(
        per > min,
        "{variant}: {per:.2} commits per fdatasync (want > {min}): {tx:?}"
    );
}

crate::test_cases! { kill_children_keeps_acks:
    leader_kill9_children_nothing_acked_lost => (VARIANTS[0]),
    flusher_kill9_children_nothing_acked_lost => (VARIANTS[1]),
    hybrid_kill9_children_nothing_acked_lost => (VARIANTS[2]),
}

crate::test_cases! { kill_postmaster_keeps_acks:
    leader_kill9_postmaster_nothing_acked_lost => (VARIANTS[0]),
    flusher_kill9_postmaster_nothing_acked_lost => (VARIANTS[1]),
    hybrid_kill9_postmaster_nothing_acked_lost => (VARIANTS[2]),
}

#[test]
fn every_variant_shares_fdatasyncs_among_16_committers() {
    for v in VARIANTS {
        sixteen_committers_share_fdatasyncs(v);
    }
}

/// The default (`hybrid`): 16 committers fill each fdatasync with more
/// than 4 commits (about 7 through pgbench at 16 clients on 2 loaded
/// cores; backends without a client round trip commit faster).
#[test]
fn default_fills_fdatasyncs_among_16_committers() {
    committers_per_fdatasync(None, Duration::from_secs(2), 4.0);
}

/// commit_delay: the leader sleeps before its fdatasync while the others
/// queue; kill -9 of a backend and of the walwriter still loses no ack.
#[test]
fn commit_delay_kill9_children_nothing_acked_lost() {
    for v in ["hybrid", "leader"] {
        kill_children_keeps_acks_with(v, &["commit_delay=500", "commit_siblings=1"]);
    }
}

#[test]
fn bad_group_commit_settings_are_refused() {
    let tmp = TempDir::new("gc-bad");
    let d = init(&tmp.join("data"), &[]);
    for (name, bad) in [
        ("group_commit", "convoy"),
        ("commit_delay", "-1"),
        ("commit_delay", "100001"),
        ("commit_delay", "soon"),
        ("commit_siblings", "1001"),
        ("commit_siblings", "many"),
    ] {
        assert_start_refused(&d, name, bad);
    }
    // The limits themselves are accepted (PostgreSQL's ranges).
    let mut s = shmem::settings::Settings::default();
    for ok in [
        "commit_delay=0",
        "commit_delay=100000",
        "commit_siblings=0",
        "commit_siblings=1000",
    ] {
        assert!(s.set_assignment(ok).is_ok(), "{ok} refused");
    }
}

/// `walbench torture` with the new variants: a short kill-mode run passes.
#[test]
fn walbench_torture_accepts_group_commit() {
    for v in ["flusher", "leader"] {
        let tmp = TempDir::new(&format!("gc-torture-{v}"));
        let set = variant_set(v);
        let (o, r, _) = torture(&tmp, &["--cycles", "3", "--seed", "16", "--set", &set], &[]);
        assert_eq!(o.code(), Some(0), "{v}: {}", o.describe());
        assert_eq!(r["lost"], 0, "{v}: {r}");
        assert_eq!(r["cycles"], 3, "{v}: {r}");
        assert!(r["acknowledged"].as_u64().unwrap_or(0) > 0, "{v}: {r}");
    }
}
