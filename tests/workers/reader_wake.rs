//! Library readers on shared memory against a real server: a reader in
//! the flushed mode never returns a record before it is durable and is
//! woken by the flush (not by a timer); a reader in the inserted mode gets
//! records before they are durable and reports `ServerRestarted` once the
//! postmaster is killed.
//!
//! The writer is another process, `walshm-child writer` (`flush`: each
//! message flushed after 100 ms; `insert`: never flushed), in its own
//! process group, killed with it if a check fails. The server runs with
//! `wal_writer_delay = 10s`, so that nothing is flushed unless the writer
//! asks.

use crate::common::*;
use shmem::clock::monotonic_ns;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use walshm::{RecordKind, Worker};

const ROUNDS: usize = 20;

/// The writer child, killed (its whole process group) when dropped.
struct Writer(Child);

impl Writer {
    fn spawn(mode: &str, dir: &Path, out: &Path) -> Writer {
        let child = Command::new(child_bin())
            .args(["writer", mode, &ROUNDS.to_string()])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(out).unwrap())
            .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
            .process_group(0)
            .spawn()
            .expect("spawn the writer");
        Writer(child)
    }

    /// Waits (bounded) for a clean exit.
    fn wait_ok(&mut self) {
        let mut status = None;
        wait_until(TIMEOUT, || {
            status = self.0.try_wait().unwrap();
            status.is_some()
        });
        assert!(status.is_some_and(|s| s.success()), "writer: {status:?}");
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // SAFETY: kill has no memory effects; the group is the one the
        // writer leads (process_group(0)); an error (already gone) is fine.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// `(I, T)` of the writer's lines that start with `word`.
fn times(out: &Path, word: &str) -> Vec<(usize, u64)> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == word).then_some(())?;
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// Delivery latencies (µs) from the writer's times, sorted.
fn latencies_us(delivered: &[(usize, u64)], sent: &[(usize, u64)]) -> Vec<u64> {
    let mut l: Vec<u64> = delivered
        .iter()
        .map(|&(i, t)| {
            let s = sent.iter().find(|s| s.0 == i).expect("writer time").1;
            t.saturating_sub(s) / 1000
        })
        .collect();
    l.sort_unstable();
    l
}

/// Reads `ROUNDS` "wake" messages; `check(end, flush)` at each delivery.
fn tail(
    r: &mut walshm::Reader<'_>,
    w: &Worker,
    mut check: impl FnMut(u64, u64),
) -> Vec<(usize, u64)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while got.len() < ROUNDS && Instant::now() < deadline {
        let Some(rec) = r.next_wait(Duration::from_secs(2)).unwrap() else {
            continue;
        };
        let t = monotonic_ns();
        let flushed = w.flush_lsn();
        if rec.kind
            != (RecordKind::Message {
                transactional: false,
            })
            || rec.prefix != "wake"
        {
            continue;
        }
        check(rec.end, flushed);
        let i = std::str::from_utf8(&rec.payload[1..])
            .unwrap()
            .parse()
            .unwrap();
        got.push((i, t));
    }
    assert_eq!(got.len(), ROUNDS, "messages delivered");
    got
}

#[test]
fn a_flushed_reader_never_returns_unflushed_wal_and_is_woken_by_the_flush() {
    let tmp = TempDir::new("rw-flush");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let s = Server::start(&d.path, tmp.path(), &["--set", "wal_writer_delay=10s"]);
    let w = attach_when_ready(&d.path);
    let mut r = w.reader(w.insert_lsn()).unwrap();
    let out = tmp.join("writer.out");
    let mut writer = Writer::spawn("flush", &d.path, &out);
    let got = tail(&mut r, &w, |end, flushed| {
        assert!(
            end <= flushed,
            "record ending at {end:X} delivered, flushed {flushed:X}"
        );
    });
    writer.wait_ok();
    let lat = latencies_us(&got, &times(&out, "flushed"));
    println!("flush-to-delivery latencies (us): {lat:?}");
    // Woken by the flush: a reader that waited for its guard timeout
    // (100 ms) would show it in the median.
    assert!(lat[ROUNDS / 2] < 20_000, "median {} us", lat[ROUNDS / 2]);
    drop(r);
    w.detach().unwrap();
    s.stop_ok();
}

#[test]
fn an_inserted_reader_reads_before_the_flush_and_reports_the_crash() {
    let tmp = TempDir::new("rw-insert");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let mut s = Server::start(&d.path, tmp.path(), &["--set", "wal_writer_delay=10s"]);
    let w = attach_when_ready(&d.path);
    let mut r = w.reader_inserted(w.insert_lsn()).unwrap();
    let out = tmp.join("writer.out");
    let writer = Writer::spawn("insert", &d.path, &out);
    let mut before_durable = 0;
    let got = tail(&mut r, &w, |end, flushed| {
        if end > flushed {
            before_durable += 1;
        }
    });
    assert!(
        before_durable >= ROUNDS / 2,
        "{before_durable} of {ROUNDS} before the flush"
    );
    wait_until(TIMEOUT, || times(&out, "emitted").len() == ROUNDS);
    let lat = latencies_us(&got, &times(&out, "emitted"));
    println!("insert-to-delivery latencies (us): {lat:?}");
    assert!(lat[ROUNDS / 2] < 20_000, "median {} us", lat[ROUNDS / 2]);

    // kill -9 of the postmaster: what was read may be gone; the reader
    // says so, well before its own timeout.
    s.signal(libc::SIGKILL);
    assert!(
        wait_until(TIMEOUT, || s.try_wait().is_some()),
        "postmaster survived"
    );
    drop(writer);
    assert_restart_reported_soon(|| r.next_wait(Duration::from_secs(20)).map(|x| x.is_some()));
    drop(r);
    let _ = w.detach();
}
