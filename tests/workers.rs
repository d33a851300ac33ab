//! The worker library (issue 12) against real servers: a user's process
//! attaches, writes messages and transactions through shared memory (the
//! walwriter flushes for it), reads the WAL back, and survives the
//! server's crash restarts; the C ABI is driven by C programs built here
//! with the system compiler against `libwalshm.so`.
//!
//! Child processes: the C programs, and this test binary itself re-run in
//! "child mode" (`WALSHM_TEST_CHILD`, see `child_main`) as a Rust worker,
//! so that a worker can be killed with SIGKILL.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use walshm::{Error, Record, RecordKind, Worker};

/// Attaches to the server in `dir`, retrying until it is up.
fn attach_when_ready(dir: &Path) -> Worker {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match Worker::attach(Some(dir)) {
            Ok(w) => return w,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("could not attach to {}: {e}", dir.display()),
        }
    }
}

/// A server on a fresh data directory (1 MB segments, nothing recycled).
fn server(tmp: &TempDir, extra: &[&str]) -> (DataDir, Server) {
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let s = Server::start(&d.path, tmp.path(), extra);
    (d, s)
}

fn owned(rec: &Record<'_>) -> (u64, u32, RecordKind, String, Vec<u8>) {
    (
        rec.lsn,
        rec.xid,
        rec.kind,
        rec.prefix.to_string(),
        rec.payload.to_vec(),
    )
}

/// The WAL files this process has open (must stay empty: a worker never
/// writes WAL itself).
fn open_wal_files(dir: &Path) -> Vec<PathBuf> {
    let pg_wal = dir.join("pg_wal").canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(&pg_wal))
        .collect()
}

#[test]
fn rust_worker_writes_commits_aborts_and_reads_back() {
    let tmp = TempDir::new("wk-basic");
    // Few WAL buffers: the worker must often wait for the walwriter to
    // write a buffer page out before it can reuse it.
    let (d, s) = server(&tmp, &["--set", "wal_buffers=8", "--set", "fsync=off"]);
    let mut w = attach_when_ready(&d.path);
    let lsn1 = w.emit("rustw", b"hello").unwrap();
    w.begin().unwrap();
    let m1 = w.emit_tx("rustw", b"kept").unwrap();
    let c1 = w.commit().unwrap();
    assert!(w.flush_lsn() > c1, "a synchronous commit returns flushed");
    w.begin().unwrap();
    let m2 = w.emit_tx("rustw", b"dropped").unwrap();
    w.abort().unwrap();
    // 200 pages' worth of messages through 8 buffers.
    let big = vec![b'z'; 8000];
    for _ in 0..200 {
        w.emit("rustw-big", &big).unwrap();
    }
    let end = w.insert_lsn();
    w.flush(end).unwrap();
    assert!(w.flush_lsn() >= end);
    assert!(
        open_wal_files(&d.path).is_empty(),
        "the worker opened WAL files: {:?}",
        open_wal_files(&d.path)
    );
    // Errors, not panics.
    assert_eq!(w.commit(), Err(Error::NoTransaction));
    assert_eq!(w.emit_tx("p", b""), Err(Error::NoTransaction));
    w.begin().unwrap();
    assert_eq!(w.begin(), Err(Error::TransactionOpen));
    let huge = vec![0u8; walshm::MAX_PAYLOAD + 1];
    assert_eq!(
        w.emit_tx("p", &huge),
        Err(Error::PayloadTooLarge(walshm::MAX_PAYLOAD + 1))
    );
    assert_eq!(w.emit("a\0b", b""), Err(Error::BadPrefix));
    w.abort().unwrap();

    // The bounded reader sees what was flushed, with kinds and XIDs.
    let mut seen = Vec::new();
    {
        let mut r = w.reader(0).unwrap();
        while let Some(rec) = r.next_record().unwrap() {
            seen.push(owned(&rec));
        }
    }
    let find = |lsn: u64| seen.iter().find(|r| r.0 == lsn).cloned();
    let e = find(lsn1).expect("emit record read back");
    assert_eq!(
        (e.1, e.2, e.3.as_str(), &e.4[..]),
        (
            0,
            RecordKind::Message {
                transactional: false
            },
            "rustw",
            &b"hello"[..]
        )
    );
    let t = find(m1).expect("transactional message read back");
    assert_eq!(
        t.2,
        RecordKind::Message {
            transactional: true
        }
    );
    assert_ne!(t.1, 0, "transactional message carries its XID");
    let c = find(c1).expect("commit record read back");
    assert_eq!((c.1, c.2), (t.1, RecordKind::Commit));
    let a = find(m2).expect("aborted message read back");
    assert!(
        seen.iter().any(|r| r.2 == RecordKind::Abort && r.1 == a.1),
        "ABORT record for XID {}",
        a.1
    );
    assert_eq!(seen.iter().filter(|r| r.3 == "rustw-big").count(), 200);
    w.detach().unwrap();
    s.stop_ok();

    // pg_waldump decodes the prefixes and the abort.
    if let Some(pg) = pg_waldump_path() {
        let o = run_cmd(
            Command::new(pg)
                .arg("-p")
                .arg(d.path.join("pg_wal"))
                .arg("-s")
                .arg(walformat::format_lsn(d.first_lsn)),
            TIMEOUT,
        );
        assert!(
            o.stdout
                .contains("prefix \"rustw\"; payload (5 bytes): 68 65 6C 6C 6F"),
            "{}",
            o.describe()
        );
        assert!(
            o.stdout.contains("Transaction") && o.stdout.contains("ABORT"),
            "{}",
            o.describe()
        );
        pg_normal_end(&o).unwrap_or_else(|e| panic!("{e}\n{}", o.describe()));
    }
}

#[test]
fn attach_without_a_server_is_a_clear_error() {
    let tmp = TempDir::new("wk-noserver");
    let d = init(&tmp.join("data"), &[]);
    match Worker::attach(Some(&d.path)) {
        Err(Error::Attach(m)) => assert!(!m.is_empty()),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("attached with no server running"),
    }
    match Worker::attach(Some(&tmp.join("missing"))) {
        Err(Error::Attach(_)) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("attached to a missing directory"),
    }
}
