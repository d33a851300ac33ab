//! Durable consumer positions from the worker library: a slot created
//! with `Worker::slot_create` shows in `pg_replication_slots` beside the
//! logical slots; its reader delivers only what committed after the
//! slot's confirmed position, resumes after a clean restart and after
//! kill -9 of the whole server from what was confirmed (at least once,
//! nothing lost, nothing rolled back), is exclusive to one process
//! (55006), and the slot holds its WAL against checkpoints until dropped.
//!
//! Checks read structured data (messages, SQLSTATEs in the error text,
//! rows over the wire), never a log line. Servers are stopped by
//! `stop_ok`, or killed with their process group on a failed assertion.

use crate::common::wire::{data_rows, exchange, handshake_retrying, msg, PortServer};
use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};
use walshm::Worker;

fn attach_when_ready(dir: &Path) -> Worker {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match Worker::attach(Some(dir)) {
            Ok(w) => return w,
            Err(e) if Instant::now() >= deadline => panic!("could not attach: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn commit(w: &mut Worker, text: &str) {
    w.begin().unwrap();
    w.emit_tx("s", text.as_bytes()).unwrap();
    w.commit().unwrap();
}

fn rollback(w: &mut Worker, text: &str) {
    w.begin().unwrap();
    w.emit_tx("s", text.as_bytes()).unwrap();
    w.abort().unwrap();
}

/// Reads the slot until `n` messages arrived (or 10 s passed); confirms
/// each one read when `confirm`.
fn read(w: &Worker, slot: &str, n: usize, confirm: bool) -> Vec<String> {
    read_until(w, slot, |got| got.len() >= n, confirm)
}

/// Reads the slot until `done` says so (or 10 s passed).
fn read_until(
    w: &Worker,
    slot: &str,
    done: impl Fn(&[String]) -> bool,
    confirm: bool,
) -> Vec<String> {
    let mut r = w.reader_slot(slot).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(&got) && Instant::now() < deadline {
        if let Some(m) = r.next_wait(Duration::from_millis(100)).unwrap() {
            got.push(String::from_utf8(m.payload).unwrap());
            if confirm {
                r.confirm(m.commit_end).unwrap();
            }
        }
    }
    got
}

fn query_rows(ps: &PortServer, sql: &str) -> Vec<Vec<Option<String>>> {
    let mut s = handshake_retrying(&ps.socket());
    data_rows(&exchange(
        &mut s,
        &msg(b'Q', &crate::common::wire::cstr(sql)),
    ))
}

#[test]
fn a_library_slot_resumes_where_its_consumer_confirmed() {
    let mut ps = PortServer::start("reader-slot", &[]);
    let mut w = attach_when_ready(&ps.d.path);
    commit(&mut w, "before the slot");
    w.slot_create("lib").unwrap();
    let dup = w.slot_create("lib").unwrap_err().to_string();
    assert!(dup.contains("42710"), "{dup}");
    commit(&mut w, "one");
    rollback(&mut w, "rolled back");
    commit(&mut w, "two");
    assert_eq!(read(&w, "lib", 2, false), ["one", "two"], "unconfirmed");
    // Nothing confirmed: the next reader gets both again; then confirm.
    assert_eq!(read(&w, "lib", 2, true), ["one", "two"]);
    commit(&mut w, "three");
    assert_eq!(read(&w, "lib", 1, true), ["three"]);
    // One process at a time: a session trying to decode it gets 55006.
    let held = w.reader_slot("lib").unwrap();
    let mut s = handshake_retrying(&ps.socket());
    let busy = exchange(
        &mut s,
        &msg(
            b'Q',
            &crate::common::wire::cstr(
                "SELECT * FROM pg_logical_slot_peek_changes('lib', NULL, NULL)",
            ),
        ),
    );
    assert_eq!(
        crate::common::wire::error_code(&busy).as_deref(),
        Some("55006")
    );
    drop(s);
    drop(held);
    let rows = query_rows(
        &ps,
        "SELECT plugin, slot_type FROM pg_replication_slots WHERE slot_name = 'lib'",
    );
    assert_eq!(rows, [[Some("walshm".into()), Some("logical".into())]]);
    let status = postmaster(&["status", "-D", ps.d.path.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(status.stdout.trim()).expect("status JSON");
    let slot = &v["slots"][0];
    assert_eq!(
        (slot["name"].as_str(), slot["plugin"].as_str()),
        (Some("lib"), Some("walshm")),
        "{v}"
    );
    assert!(slot["confirmed_flush_lsn"].is_string(), "{v}");
    // A clean restart keeps the confirmed position.
    commit(&mut w, "four");
    w.detach().unwrap();
    ps.stop();
    ps.restart();
    let mut w = attach_when_ready(&ps.d.path);
    assert_eq!(read(&w, "lib", 1, true), ["four"]);
    // kill -9 of the whole server: nothing is lost; what was confirmed
    // since the last checkpoint may come again (at least once).
    commit(&mut w, "five");
    w.detach().unwrap();
    ps.kill9();
    ps.restart();
    let mut w = attach_when_ready(&ps.d.path);
    let after = read_until(
        &w,
        "lib",
        |got| got.last().is_some_and(|m| m == "five"),
        true,
    );
    assert_eq!(after.last().map(String::as_str), Some("five"), "{after:?}");
    assert!(!after
        .iter()
        .any(|m| m == "rolled back" || m == "before the slot"));
    // The slot holds its WAL: its restart segment survives checkpoints.
    let restart = query_rows(
        &ps,
        "SELECT pg_walfile_name(restart_lsn) FROM pg_replication_slots WHERE slot_name = 'lib'",
    )[0][0]
        .clone()
        .unwrap();
    let mut s = handshake_retrying(&ps.socket());
    for _ in 0..3 {
        commit(&mut w, "filler");
        for sql in ["SELECT pg_switch_wal()", "CHECKPOINT"] {
            exchange(&mut s, &msg(b'Q', &crate::common::wire::cstr(sql)));
        }
    }
    assert!(
        ps.d.path.join("pg_wal").join(&restart).exists(),
        "{restart} removed"
    );
    w.slot_drop("lib").unwrap();
    let gone = w.reader_slot("lib").err().expect("dropped").to_string();
    assert!(gone.contains("42704"), "{gone}");
    w.detach().unwrap();
    drop(s);
    ps.stop();
}
