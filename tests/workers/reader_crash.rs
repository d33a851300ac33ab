//! A consumer of committed messages (`walshm::Committed`) across a crash
//! restart: a transaction the crash cut off before its COMMIT stays
//! pending only until the end-of-recovery checkpoint (a CHECKPOINT_SHUTDOWN
//! record) that startup writes after a crash recovery, and committed
//! messages on both sides of the crash are delivered.
//!
//! Checks read structured data (LSNs, record kinds, counts, the control
//! file), never a log line. The server is stopped by `stop_ok`, or killed
//! with its process group by Server's Drop on a failed assertion.

use crate::common::*;
use backend::control::{ControlFile, DbState};
use std::path::Path;
use std::time::{Duration, Instant};
use walshm::{Reader, RecordKind, Worker};

/// Attaches to the server in `dir`, retrying until it is up.
fn attach_when_ready(dir: &Path) -> Worker {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match Worker::attach(Some(dir)) {
            Ok(w) => return w,
            Err(e) if Instant::now() >= deadline => {
                panic!("could not attach to {}: {e}", dir.display())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The walwriter's PID, if it runs.
fn walwriter_pid(s: &Server) -> Option<i32> {
    s.children()
        .into_iter()
        .find(|(_, c)| c == "walwriter")
        .map(|(p, _)| p)
}

/// One committed transaction with one message; returns its COMMIT's LSN.
fn commit_one(w: &mut Worker, payload: &[u8]) -> u64 {
    w.begin().unwrap();
    w.emit_tx("kept", payload).unwrap();
    w.commit().unwrap()
}

/// The LSN of every CHECKPOINT record in `dir`'s WAL.
fn checkpoints(dir: &Path) -> Vec<u64> {
    let mut r = Reader::open(dir, 0).unwrap();
    let mut v = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        // A CHECKPOINT record's main data is a CheckPoint (88 bytes).
        if rec.kind == RecordKind::Other && rec.payload.len() == 88 {
            v.push(rec.lsn);
        }
    }
    v
}

#[test]
fn a_crash_cut_transaction_is_dropped_at_the_end_of_recovery_checkpoint() {
    let tmp = TempDir::new("reader-crash");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let s = Server::start(&d.path, tmp.path(), &[]);
    let mut w = attach_when_ready(&d.path);
    let before = commit_one(&mut w, b"before");
    // A transaction cut off by the crash: its message is flushed, its
    // COMMIT never written.
    w.begin().unwrap();
    let cut = w.emit_tx("cut", b"never committed").unwrap();
    w.flush(w.insert_lsn()).unwrap();

    // The consumer reads the files up to their end: one committed message,
    // one transaction pending.
    let mut messages = Reader::open(&d.path, 0).unwrap().committed();
    let m = messages
        .next_message()
        .unwrap()
        .expect("the committed message");
    assert_eq!((m.commit_lsn, &m.payload[..]), (before, &b"before"[..]));
    assert_eq!(messages.next_message().unwrap(), None);
    assert!(messages.position() > cut, "the reader read the cut message");
    assert_eq!(messages.pending(), 1, "the open transaction is buffered");
    let checkpoints_before = checkpoints(&d.path).len();

    // kill -9 of the walwriter: a crash restart.
    let victim = walwriter_pid(&s).expect("a walwriter");
    kill(victim, libc::SIGKILL);
    assert!(
        wait_until(TIMEOUT, || walwriter_pid(&s).is_some_and(|p| p != victim)),
        "the server did not restart"
    );
    let _ = w.detach();
    let mut w = attach_when_ready(&d.path);
    // Startup ended the crash recovery with a checkpoint the control file
    // names, redo at the record itself, the server in production.
    let control = ControlFile::read(&d.path).unwrap();
    assert_eq!(control.state, DbState::InProduction);
    assert_eq!(control.redo, control.checkpoint);
    assert!(control.checkpoint > cut, "{control:?}");
    let after = commit_one(&mut w, b"after");
    w.detach().unwrap();

    // The same consumer goes on reading across the crash: past the
    // end-of-recovery checkpoint nothing is pending, and the message
    // committed after the restart is delivered.
    let m = messages
        .next_wait(TIMEOUT)
        .unwrap()
        .expect("the message committed after the restart");
    assert_eq!((m.commit_lsn, &m.payload[..]), (after, &b"after"[..]));
    assert_eq!(messages.pending(), 0, "the cut transaction was dropped");
    assert_eq!(
        messages.next_wait(Duration::from_millis(200)).unwrap(),
        None
    );
    drop(messages);

    // One checkpoint record more: the end-of-recovery one, between the cut
    // message and the commit after the restart.
    let all = checkpoints(&d.path);
    assert_eq!(all.len(), checkpoints_before + 1, "{all:x?}");
    assert_eq!(*all.last().unwrap(), control.checkpoint);
    assert!(control.checkpoint < after);
    s.stop_ok();
}
