//! Seeing inside a running server: `postmaster status` (exit codes as
//! pg_ctl's, processes with their wait events, from its `--json` output),
//! a backend blocked on an LWLock held by this test showing that lock, and
//! the pg_stat_wal counters of a window matching the WAL that window wrote
//! (walshm's own reader, and pg_waldump when installed).
//!
//! Every server runs in its own process group, killed if a test fails;
//! every wait is bounded.

use crate::common::wire::*;
use crate::common::*;
use serde_json::Value;
use shmem::lwlock::LWLockMode;
use shmem::segment::NamedLock;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `postmaster status -D DIR --json`: (exit code, parsed output).
fn status(dir: &Path) -> (Option<i32>, Value) {
    let o = run_cmd(
        Command::new(postmaster_bin())
            .args(["status", "--json", "-D"])
            .arg(dir),
        Duration::from_secs(10),
    );
    let v = serde_json::from_str(o.stdout.trim()).unwrap_or(Value::Null);
    (o.code(), v)
}

/// "Type:Name" of a process row, None when it is not waiting.
fn wait_of(p: &Value) -> Option<String> {
    Some(format!(
        "{}:{}",
        p["wait_event_type"].as_str()?,
        p["wait_event"].as_str()?
    ))
}

fn rows_of<'a>(v: &'a Value, backend_type: &str) -> Vec<&'a Value> {
    v["processes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|p| p["backend_type"] == backend_type)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn status_shows_the_workers_and_their_waits_and_pg_ctl_exit_codes() {
    let tmp = TempDir::new("observe-status");
    let d = init(&tmp.join("d"), &[]);
    assert_eq!(status(&d.path).0, Some(3), "not running yet");
    let s = Server::start_ready(
        &d.path,
        tmp.path(),
        &["--workers", "4", "--workload", "emit-tx:100"],
    );
    // The waits of synchronous commits: WAL write/sync and WALWriteLock.
    let flush_waits = ["IO:WALSync", "IO:WALWrite", "LWLock:WALWrite"];
    let mut seen = BTreeSet::new();
    let mut last = Value::Null;
    let found = wait_until(Duration::from_secs(15), || {
        let (code, v) = status(&d.path);
        assert_eq!(code, Some(0), "running: {v}");
        assert_eq!(v["running"], true);
        assert_eq!(v["pid"].as_i64(), Some(s.pid as i64));
        let workers = rows_of(&v, "walshm worker");
        seen.extend(workers.iter().filter_map(|p| wait_of(p)));
        let ok = workers.len() == 4
            && workers.iter().all(|p| p["state"] == "active")
            && rows_of(&v, "walwriter").len() == 1
            && rows_of(&v, "checkpointer").len() == 1
            && rows_of(&v, "startup").is_empty()
            && flush_waits.iter().any(|w| seen.contains(*w));
        last = v;
        ok
    });
    assert!(found, "waits seen {seen:?}; last status {last}");
    let known = [
        "IO:WALSync",
        "IO:WALWrite",
        "IO:WALInitWrite",
        "IO:WALInitSync",
        "LWLock:WALWrite",
        "LWLock:WALInsert",
        "LWLock:WALBufMapping",
        "LWLock:XidGen",
        "LWLock:ProcArray",
        "IPC:ProcArrayGroupUpdate",
        "Timeout:SpinDelay",
    ];
    assert!(
        seen.iter().all(|w| known.contains(&w.as_str())),
        "a worker showed an unexpected wait: {seen:?}"
    );
    let lsn = |k: &str| walformat::parse_lsn(last[k].as_str().unwrap()).unwrap();
    assert!(lsn("flush_lsn") <= lsn("write_lsn") && lsn("write_lsn") <= lsn("insert_lsn"));
    assert!(lsn("flush_lsn") > d.first_lsn, "{last}");
    s.stop_ok();
    let (code, v) = status(&d.path);
    assert_eq!((code, &v["running"]), (Some(3), &Value::Bool(false)));
    assert_eq!(status(&tmp.join("no-such-dir")).0, Some(4));
}

#[test]
fn a_backend_blocked_on_a_held_lwlock_shows_that_lock() {
    let tmp = TempDir::new("observe-lwlock");
    let (d, s) = start_workload(&tmp, "d", 3, "lwlock", &[]);
    // A registered worker: a proc slot of its own to queue on the lock.
    let reg = shmem::register::connect(&d.path, shmem::register::Kind::Worker)
        .expect("register as a worker");
    let (shm, me) = (&reg.shm, reg.procno.expect("a worker's proc slot"));
    let env = shm.lock_env(me);
    let lock = shm.named_lock(NamedLock::Test);
    lock.acquire(&env, LWLockMode::Exclusive);
    let mut last = Value::Null;
    let all_blocked = wait_until(Duration::from_secs(10), || {
        let (_, v) = status(&d.path);
        let workers = rows_of(&v, "walshm worker");
        let ok = workers.len() == 3
            && workers
                .iter()
                .all(|p| wait_of(p).as_deref() == Some("LWLock:Test"));
        last = v;
        ok
    });
    lock.release(&env);
    drop(env);
    reg.detach().expect("detach");
    assert!(
        all_blocked,
        "workers not all waiting on the held lock: {last}"
    );
    // Released: they run again (not all of them stay on the lock).
    let moving = wait_until(Duration::from_secs(10), || {
        let (_, v) = status(&d.path);
        rows_of(&v, "walshm worker")
            .iter()
            .any(|p| wait_of(p).as_deref() != Some("LWLock:Test"))
    });
    assert!(moving, "workers still blocked after the release");
    let out = s.stop_ok();
    let lw = parse_summary(&out.stdout);
    assert!(lw.total.transactions > 0, "{}", out.describe());
    assert!(lw.lwlock_checks.iter().all(|ok| *ok), "{}", out.describe());
}

/// `SELECT f` on `sock`: the first column of the first row.
fn select_one(sock: &mut std::os::unix::net::UnixStream, sql: &str) -> String {
    let msgs = exchange(sock, &msg(b'Q', &cstr(sql)));
    assert_eq!(error_code(&msgs), None, "{sql}");
    data_rows(&msgs)[0][0].clone().expect("a value")
}

/// (LSN, total length) of each record line of `postmaster waldump`.
fn lsn_and_len(line: &str) -> (u64, u64) {
    let tot = line
        .split("len (rec/tot):")
        .nth(1)
        .and_then(|r| r.split('/').nth(1))
        .and_then(|r| r.split(',').next())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no length in {line:?}"));
    let lsn = line
        .split("lsn: ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .map(|l| walformat::parse_lsn(l.trim()).unwrap())
        .unwrap_or_else(|| panic!("no lsn in {line:?}"));
    (lsn, tot)
}

#[test]
fn pg_stat_wal_counts_what_the_window_wrote() {
    let tmp = TempDir::new("observe-walstats");
    let d = init(&tmp.join("d"), &[]);
    let (srv, port) = start_on_free_port(&d, tmp.path(), &["track_wal_io_timing=on"], &[], &[]);
    let mut sock = handshake_retrying(&socket_path(&d.path, port));
    let shm = postmaster::status::observe(&d.path).expect("observe the segment");
    shmem::stats::reset_wal_stats(&shm);
    let w0 = shmem::stats::wal_stats(&shm);
    assert_eq!((w0.wal_records, w0.wal_bytes), (0, 0), "reset: {w0:?}");
    assert!(w0.stats_reset_us > 0);
    let start =
        walformat::parse_lsn(&select_one(&mut sock, "SELECT pg_current_wal_insert_lsn()")).unwrap();
    const N: usize = 40;
    for i in 0..N {
        let payload = "x".repeat(10 + i * 7);
        select_one(
            &mut sock,
            &format!("SELECT pg_logical_emit_message(true, 'observe', '{payload}')"),
        );
    }
    let end =
        walformat::parse_lsn(&select_one(&mut sock, "SELECT pg_current_wal_insert_lsn()")).unwrap();
    let w = shmem::stats::wal_stats(&shm);
    assert!(
        w.wal_records >= 2 * N as u64,
        "a message and a commit each: {w:?}"
    );
    assert!(
        w.wal_write > 0 && w.wal_sync > 0,
        "commits were flushed: {w:?}"
    );
    assert!(
        w.wal_sync_time_us > 0,
        "track_wal_io_timing=on times syncs: {w:?}"
    );
    assert_eq!(w.wal_fpi, 0);

    // The same window read back from disk (every commit was flushed).
    let lines = own_waldump_lines(&d.path, start, w.wal_records as usize + 1);
    let window: Vec<(u64, u64)> = lines
        .iter()
        .map(|l| lsn_and_len(l))
        .filter(|(lsn, _)| *lsn < end)
        .collect();
    assert_eq!(window.first().map(|r| r.0), Some(start), "{lines:?}");
    assert_eq!(
        window.len() as u64,
        w.wal_records,
        "records in [start, end)"
    );
    let bytes: u64 = window.iter().map(|r| r.1).sum();
    assert_eq!(bytes, w.wal_bytes, "record bytes in [start, end)");
    if let Some(pg) = pg_waldump(&d, start, Some(w.wal_records)) {
        let pg_bytes: u64 = pg.iter().map(|l| lsn_and_len(l).1).sum();
        assert_eq!((pg.len() as u64, pg_bytes), (w.wal_records, w.wal_bytes));
    }
    shmem::stats::reset_wal_stats(&shm);
    assert_eq!(shmem::stats::wal_stats(&shm).wal_records, 0);
    drop(sock);
    drop(shm);
    srv.stop_ok();
}
