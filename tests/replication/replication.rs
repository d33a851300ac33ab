//! Streaming replication to PostgreSQL 15's unmodified `pg_receivewal`:
//! the walsender, replication slots, synchronous replication, and
//! PostgreSQL's errors for bad replication input.
//!
//! Every test needs /usr/lib/postgresql/15/bin/pg_receivewal (and some
//! pg_waldump); without them it is skipped loudly, unless
//! WALSHM_REQUIRE_PG=1. pg_receivewal runs in its own process group, which
//! is SIGKILLed when the test ends (also when it fails). pg_receivewal
//! waits 5 s before it reconnects after losing its connection, which
//! bounds how many kills one test can afford.
//!
//! Checks read bytes and records, never log wording: received segments are
//! compared byte for byte with the server's, acknowledged commits are
//! looked up in the received WAL with walformat's reader, errors are
//! matched by SQLSTATE.

use crate::common::receiver::{pg_receivewal, Receiver};
use crate::common::wire::{
    cstr, data_rows, error_code, exchange, fields, first_error, handshake, msg, raw_connect,
    read_msg, read_to_close, silent_for, socket_path, start_on_free_port, startup_packet,
    PSQL_TERSE,
};
use crate::common::*;
use std::fs;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SEG: u64 = 1 << 20;
/// For tests that kill processes but never lose power: fsync only slows
/// them down on a shared disk (a CHECKPOINT of several fsyncs then takes
/// seconds).
const UNSYNCED: [&str; 2] = ["--set", "fsync=off"];

/// A fresh data directory with 1 MB WAL segments, started on a free port
/// with `sets`; None (loud skip) without pg_receivewal.
fn start_1mb_segments(name: &str, sets: &[&str]) -> Option<(TempDir, DataDir, Server, u16)> {
    pg_receivewal()?;
    let t = TempDir::new(name);
    let d = init(&t.join("data"), &["--wal-segment-size", "1"]);
    let (srv, port) = start_on_free_port(&d, t.path(), sets, &[], &[]);
    Some((t, d, srv, port))
}

/// The receiver every test here runs: verbose, a status report every
/// second, then `extra`.
fn receiver(bin: &Path, d: &DataDir, port: u16, out: &Path, extra: &[&str]) -> Receiver {
    let mut args = vec!["-v", "-s", "1"];
    args.extend_from_slice(extra);
    Receiver::start(bin, d, port, out, &args)
}

/// Segment numbers of the complete files in `out`, and the partial one.
fn received(out: &Path) -> (Vec<u64>, Option<u64>) {
    let geo = walformat::Geometry::new(SEG).unwrap();
    let mut complete = Vec::new();
    let mut partial = None;
    for e in fs::read_dir(out).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(base) = name.strip_suffix(".partial") {
            partial = geo.parse_file_name(base).map(|(_, n)| n);
        } else if let Some((_, n)) = geo.parse_file_name(&name) {
            complete.push(n);
        }
    }
    complete.sort_unstable();
    (complete, partial)
}

/// How far the received WAL reaches: the end of the last complete
/// segment, or into the partial one up to its last non-zero byte
/// (pg_receivewal pads a partial segment with zeros).
fn received_upto(out: &Path) -> u64 {
    let (complete, partial) = received(out);
    let full = complete.last().map_or(0, |n| (n + 1) * SEG);
    let Some(p) = partial else { return full };
    let bytes = fs::read(out.join(format!("{}.partial", seg_name(p)))).unwrap_or_default();
    let used = bytes
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i as u64 + 1);
    full.max(p * SEG + used)
}

/// Waits until the received WAL reaches at least 16 kB past `from`.
fn progressed(out: &Path, from: u64) -> bool {
    wait_until(Duration::from_secs(12), || {
        received_upto(out) >= from + 16384
    })
}

fn seg_name(n: u64) -> String {
    walformat::Geometry::new(SEG).unwrap().file_name(1, n)
}

/// Every complete received segment equals the server's byte for byte, the
/// complete ones follow each other without a gap and the partial one
/// follows them; the partial one equals the server's up to `end` (its
/// end of WAL) when `end` lies in it. Returns the number of complete ones.
fn assert_matches_server(out: &Path, d: &DataDir, end: u64) -> usize {
    let (complete, partial) = received(out);
    assert!(!complete.is_empty(), "no complete segment received");
    for w in complete.windows(2) {
        assert_eq!(w[1], w[0] + 1, "gap in the received segments: {complete:?}");
    }
    if let Some(p) = partial {
        assert_eq!(
            p,
            complete.last().unwrap() + 1,
            "partial segment does not follow"
        );
    }
    for &n in &complete {
        let name = seg_name(n);
        let got = fs::read(out.join(&name)).unwrap();
        let want = fs::read(d.path.join("pg_wal").join(&name))
            .unwrap_or_else(|e| panic!("server segment {name}: {e}"));
        assert!(
            got == want,
            "received segment {name} differs from the server's"
        );
    }
    if let Some(p) = partial.filter(|&p| end / SEG == p) {
        let name = seg_name(p);
        let got = fs::read(out.join(format!("{name}.partial"))).unwrap();
        let want = fs::read(d.path.join("pg_wal").join(&name)).unwrap();
        let upto = (end % SEG) as usize;
        assert!(
            got[..upto] == want[..upto],
            "partial segment {name} differs from the server's below the end of WAL"
        );
    }
    complete.len()
}

/// Waits until the receiver holds WAL up to `end` (in a complete segment,
/// or in the partial one's bytes, compared with the server's).
fn wait_received_upto(out: &Path, d: &DataDir, end: u64, timeout: Duration) -> bool {
    wait_until(timeout, || {
        let (complete, partial) = received(out);
        let seg = end / SEG;
        if complete.contains(&seg) || (end.is_multiple_of(SEG) && complete.contains(&(seg - 1))) {
            return true;
        }
        if partial != Some(seg) {
            return false;
        }
        let name = seg_name(seg);
        let (Ok(got), Ok(want)) = (
            fs::read(out.join(format!("{name}.partial"))),
            fs::read(d.path.join("pg_wal").join(&name)),
        ) else {
            return false;
        };
        let upto = (end % SEG) as usize;
        got.len() >= upto && got[..upto] == want[..upto]
    })
}

/// The received WAL as a pg_wal directory (partial segment under its full
/// name) in `scratch`.
fn as_pg_wal(out: &Path, scratch: &Path) -> PathBuf {
    let dir = scratch.join("pg_wal");
    fs::create_dir_all(&dir).unwrap();
    for e in fs::read_dir(out).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let base = name.strip_suffix(".partial").unwrap_or(&name);
        if base.len() == 24 {
            fs::copy(e.path(), dir.join(base)).unwrap();
        }
    }
    dir
}

/// A server on a fixed port (to restart it where pg_receivewal looks).
fn start_on(d: &DataDir, logdir: &Path, port: u16, args: &[&str]) -> Server {
    let p = format!("port={port}");
    let mut all = vec!["--set", p.as_str()];
    all.extend_from_slice(args);
    let mut s = start_with_env(&d.path, logdir, &all, &[]);
    s.wait_ready(TIMEOUT);
    let sock = socket_path(&d.path, port);
    assert!(wait_until(TIMEOUT, || sock.exists()), "no socket");
    s
}

/// Waits until a walsender other than `not` streams (pg_stat_replication
/// state `streaming`): pg_receivewal has reconnected. After a kill, WAL
/// still queued in the socket (up to the walsender's 4 MB send buffer)
/// keeps arriving for a while, so progress alone does not show that
/// streaming resumed; a server stopped before the receiver reconnects
/// (it waits 5 s) would never hand it the end of WAL.
fn wait_streaming_again(d: &DataDir, port: u16, not: i32) -> bool {
    wait_until(TIMEOUT, || {
        let Ok(mut s) = handshake(&socket_path(&d.path, port)) else {
            return false;
        };
        let rows = query(
            &mut s,
            "SELECT pid FROM pg_stat_replication WHERE state = 'streaming'",
        );
        data_rows(&rows).iter().any(|r| {
            r[0].as_deref()
                .and_then(|p| p.parse::<i32>().ok())
                .is_some_and(|p| p != not)
        })
    })
}

// ---- a raw replication connection ----

fn repl_connect(path: &Path, app: &str) -> Result<UnixStream, String> {
    let mut s = raw_connect(path);
    s.write_all(&startup_packet(&[
        ("user", "x"),
        ("database", "replication"),
        ("replication", "true"),
        ("application_name", app),
    ]))
    .map_err(|e| format!("write: {e}"))?;
    loop {
        match read_msg(&mut s) {
            None => return Err("closed during start-up".into()),
            Some((b'E', b)) => return Err(fields(&b).get(&b'C').cloned().unwrap_or_default()),
            Some((b'Z', _)) => return Ok(s),
            Some(_) => {}
        }
    }
}

/// Sends one simple query; every message up to ReadyForQuery.
fn query(s: &mut UnixStream, q: &str) -> Vec<(u8, Vec<u8>)> {
    exchange(s, &msg(b'Q', &cstr(q)))
}

fn one_value(msgs: &[(u8, Vec<u8>)], col: usize) -> Option<String> {
    assert_eq!(error_code(msgs), None, "unexpected error: {msgs:?}");
    data_rows(msgs).first().and_then(|r| r[col].clone())
}

fn sql(d: &DataDir, port: u16, q: &str) -> Vec<(u8, Vec<u8>)> {
    let mut s = handshake(&socket_path(&d.path, port)).expect("SQL connection");
    query(&mut s, q)
}

fn slot_restart_lsn(d: &DataDir, port: u16, name: &str) -> Option<u64> {
    let mut s = repl_connect(&socket_path(&d.path, port), "t").expect("replication connection");
    let rows = query(&mut s, &format!("READ_REPLICATION_SLOT {name}"));
    one_value(&rows, 1).map(|v| walformat::parse_lsn(&v).unwrap())
}

fn flush_lsn(d: &DataDir, port: u16) -> u64 {
    let mut s = repl_connect(&socket_path(&d.path, port), "t").expect("replication connection");
    let rows = query(&mut s, "IDENTIFY_SYSTEM");
    walformat::parse_lsn(&one_value(&rows, 2).unwrap()).unwrap()
}

/// Writes about `segments` segments of WAL, each ended by a switch.
fn write_segments(d: &DataDir, port: u16, segments: usize) {
    for _ in 0..segments {
        let r = sql(
            d,
            port,
            "SELECT pg_logical_emit_message(false, 'x', repeat('x', 100000)); SELECT pg_switch_wal()",
        );
        assert_eq!(error_code(&r), None, "{r:?}");
    }
}

fn checkpoint(d: &DataDir, port: u16) {
    assert_eq!(error_code(&sql(d, port, "CHECKPOINT")), None);
}

fn server_has_segment(d: &DataDir, seg: u64) -> bool {
    d.path.join("pg_wal").join(seg_name(seg)).exists()
}

// ---- tests ----

/// Streams under an emit-tx load; after a clean stop (the walsender sends
/// everything flushed, the shutdown checkpoint included, before it ends
/// the stream) every received byte equals the server's and pg_waldump
/// reads the received directory to the server's end of WAL.
#[test]
fn streams_under_load_and_matches_the_server_after_a_clean_stop() {
    let Some(bin) = pg_receivewal() else { return };
    let Some(waldump) = pg_waldump_path() else {
        return;
    };
    let t = TempDir::new("rep-stream");
    let d = init_keep(&t.join("data"), &["--wal-segment-size", "1"]);
    let args = ["--workers", "2", "--workload", "emit-tx:100"];
    let (srv, port) = start_on_free_port(&d, t.path(), &[], &args, &[]);
    let out = t.join("recv");
    let mut rx = receiver(&bin, &d, port, &out, &[]);
    assert!(
        wait_until(Duration::from_secs(15), || received(&out).0.len() >= 3),
        "pg_receivewal did not complete 3 segments"
    );
    assert!(srv.child_pid("walsender").is_some(), "no walsender child");
    srv.stop_ok();
    let end = own_waldump(&d.path).end_lsn;
    assert!(
        wait_received_upto(&out, &d, end, Duration::from_secs(10)),
        "the receiver did not get the WAL up to the end of the server's WAL ({})",
        walformat::format_lsn(end)
    );
    rx.kill();
    assert_matches_server(&out, &d, end);
    let (complete, _) = received(&out);
    let dir = as_pg_wal(&out, &t.join("scratch"));
    let o = run_cmd(
        Command::new(waldump)
            .arg("-p")
            .arg(&dir)
            .arg("-s")
            .arg(walformat::format_lsn(complete[0] * SEG))
            .arg("-q"),
        Duration::from_secs(60),
    );
    match pg_normal_end(&o) {
        Ok(e) => assert_eq!(
            e.end_lsn,
            end,
            "pg_waldump ended elsewhere\n{}",
            o.describe()
        ),
        Err(e) => assert!(e.starts_with("PAGE-BOUNDARY"), "{e}\n{}", o.describe()),
    }
}

/// kill -9 of the walsender, twice: the server restarts, pg_receivewal
/// reconnects and resumes from its partial segment: no gap, no diverging
/// byte.
#[test]
fn kill_9_of_the_walsender_resumes_without_gap() {
    let Some(bin) = pg_receivewal() else { return };
    let t = TempDir::new("rep-kill-ws");
    let d = init_keep(&t.join("data"), &["--wal-segment-size", "1"]);
    // 2 kB per commit: the run crosses a 1 MB segment even when loaded.
    let args = ["--workers", "1", "--workload", "emit-tx:2048"];
    let (mut srv, port) = start_on_free_port(&d, t.path(), &[], &args, &[]);
    let out = t.join("recv");
    let _rx = receiver(&bin, &d, port, &out, &[]);
    for round in 0..2 {
        let have = received_upto(&out);
        assert!(
            progressed(&out, have),
            "round {round}: no streaming progress"
        );
        let ws = srv
            .child_pid("walsender")
            .expect("a walsender while streaming");
        kill(ws, libc::SIGKILL);
        srv.wait_ready_n(round + 2, TIMEOUT);
        assert!(
            wait_streaming_again(&d, port, ws),
            "round {round}: pg_receivewal did not stream again after the kill"
        );
    }
    let have = received_upto(&out);
    assert!(
        progressed(&out, have),
        "streaming did not resume after the last kill"
    );
    assert!(
        wait_until(Duration::from_secs(20), || received_upto(&out) > SEG),
        "the received WAL never crossed the first segment"
    );
    srv.stop_ok();
    let end = own_waldump(&d.path).end_lsn;
    assert!(
        wait_received_upto(&out, &d, end, Duration::from_secs(12)),
        "received up to {:X}, server's end {end:X}; pg_receivewal's log:\n{}",
        received_upto(&out),
        fs::read_to_string(out.with_extension("log")).unwrap_or_default()
    );
    assert_matches_server(&out, &d, end);
}

/// kill -9 of the postmaster (whole server) and, twice, of pg_receivewal:
/// after each, streaming resumes where the receiver's files end.
#[test]
fn kill_9_of_the_postmaster_and_of_pg_receivewal_resume_without_gap() {
    let Some(bin) = pg_receivewal() else { return };
    let t = TempDir::new("rep-kill-pm");
    let d = init_keep(&t.join("data"), &["--wal-segment-size", "1"]);
    let port = crate::common::wire::free_port();
    // 2 kB per commit: even on a loaded machine the run crosses a 1 MB
    // segment, so a complete received segment is compared below.
    let args = ["--workers", "1", "--workload", "emit-tx:2048"];
    let mut srv = start_on(&d, t.path(), port, &args);
    let out = t.join("recv");
    let mut rx = receiver(&bin, &d, port, &out, &[]);
    assert!(progressed(&out, 0), "no streaming");
    let rx_log = || fs::read_to_string(out.with_extension("log")).unwrap_or_default();
    for _ in 0..2 {
        rx.kill();
        let have = received_upto(&out);
        rx = receiver(&bin, &d, port, &out, &[]);
        assert!(
            progressed(&out, have),
            "no progress after restarting pg_receivewal (from {have:X} to {:X}); its log:\n{}",
            received_upto(&out),
            rx_log()
        );
    }
    kill_group(srv);
    let have = received_upto(&out);
    srv = start_on(&d, t.path(), port, &args);
    assert!(
        wait_streaming_again(&d, port, 0),
        "pg_receivewal did not stream again after the server's restart; its log:\n{}",
        rx_log()
    );
    assert!(
        progressed(&out, have),
        "no progress after the server's restart"
    );
    assert!(
        wait_until(Duration::from_secs(20), || received_upto(&out) > SEG),
        "the received WAL never crossed the first segment"
    );
    srv.stop_ok();
    let end = own_waldump(&d.path).end_lsn;
    assert!(wait_received_upto(&out, &d, end, Duration::from_secs(12)));
    rx.kill();
    assert_matches_server(&out, &d, end);
}

/// synchronous_standby_names = 'pg_receivewal' and `pg_receivewal
/// --synchronous`: no commit is acknowledged before the receiver connects,
/// and after kill -9 of the primary every acknowledged commit is in the
/// receiver's directory. The default, `sync_rep_one_sleep = on`: a
/// committer only requests its local flush and sleeps once, for the
/// standby's report.
#[test]
fn synchronous_commits_acknowledged_are_in_the_receiver_after_kill_9() {
    acknowledged_commits_survive_kill_9("rep-sync", &["sync_rep_one_sleep=on"]);
}

/// One sleep with `group_commit = flusher`: the committer never flushes,
/// it only sets the walwriter's latch before it sleeps in the queue.
#[test]
fn synchronous_commits_flushed_by_the_walwriter_survive_kill_9() {
    acknowledged_commits_survive_kill_9(
        "rep-sync-ww",
        &["sync_rep_one_sleep=on", "group_commit=flusher"],
    );
}

/// The same with PostgreSQL's order (`sync_rep_one_sleep = off`): the
/// local flush, then the wait for the standby.
#[test]
fn synchronous_commits_flushed_then_replicated_survive_kill_9() {
    acknowledged_commits_survive_kill_9("rep-sync-2", &["sync_rep_one_sleep=off"]);
}

fn acknowledged_commits_survive_kill_9(name: &str, variant: &[&str]) {
    let Some(bin) = pg_receivewal() else { return };
    let t = TempDir::new(name);
    let d = init(&t.join("data"), &["--wal-segment-size", "1"]);
    let sets: Vec<&str> = ["synchronous_standby_names=pg_receivewal"]
        .iter()
        .chain(variant)
        .copied()
        .collect();
    let args = ["--workers", "2", "--workload", "emit-tx:64", "--ack"];
    let (srv, port) = start_on_free_port(&d, t.path(), &sets, &args, &[]);
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        parse_acks(&srv.stdout()).is_empty(),
        "commits were acknowledged with no synchronous standby connected"
    );
    let out = t.join("recv");
    let mut rx = receiver(&bin, &d, port, &out, &["--synchronous"]);
    assert!(
        wait_until(Duration::from_secs(15), || parse_acks(&srv.stdout()).len()
            >= 300),
        "fewer than 300 commits acknowledged with the receiver connected"
    );
    let stat = sql(&d, port, "SELECT * FROM pg_stat_replication");
    let rows = data_rows(&stat);
    assert_eq!(rows.len(), 1, "{stat:?}");
    // application_name, state, sync_priority, sync_state
    let row = &rows[0];
    assert_eq!(
        (
            row[3].as_deref(),
            row[9].as_deref(),
            row[17].as_deref(),
            row[18].as_deref()
        ),
        (
            Some("pg_receivewal"),
            Some("streaming"),
            Some("1"),
            Some("sync")
        )
    );
    let o = kill_group(srv);
    rx.kill();
    let acks = parse_acks(&o.stdout);
    let dir = as_pg_wal(&out, &t.join("scratch"));
    let first = *acks.iter().min().unwrap();
    let commits = reader_commits(&dir, SEG, first);
    assert_acks_in(&acks, &commits, "the receiver's WAL");
}

/// A SQL session that knows its BackendKeyData (pid, secret key).
fn keyed_session(path: &Path) -> (UnixStream, i32, i32) {
    let mut s = raw_connect(path);
    s.write_all(&startup_packet(&[("user", "x"), ("database", "x")]))
        .unwrap();
    let mut key = (0, 0);
    loop {
        match read_msg(&mut s).expect("start-up") {
            (b'K', b) => {
                key = (
                    i32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                    i32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                )
            }
            (b'Z', _) => return (s, key.0, key.1),
            (b'E', b) => panic!("refused: {:?}", fields(&b)),
            _ => {}
        }
    }
}

/// Sends a CancelRequest for backend `pid` with `key`.
fn cancel(path: &Path, pid: i32, key: i32) {
    let mut c = raw_connect(path);
    let mut p = 16i32.to_be_bytes().to_vec();
    p.extend_from_slice(&((1234 << 16) | 5678i32).to_be_bytes());
    p.extend_from_slice(&pid.to_be_bytes());
    p.extend_from_slice(&key.to_be_bytes());
    c.write_all(&p).unwrap();
}

/// With no synchronous standby connected a commit waits; a cancel ends
/// the wait (the commit is durable locally and returns, as PostgreSQL
/// says), and a fast shutdown is not held up by a waiting commit, which
/// is then not acknowledged to its client.
#[test]
fn a_synchronous_commit_wait_yields_to_cancel_and_to_fast_shutdown() {
    let sets = ["synchronous_standby_names=nobody", "fsync=off"];
    let Some((_t, d, srv, port)) = start_1mb_segments("rep-cancel", &sets) else {
        return;
    };
    let sock = socket_path(&d.path, port);
    let emit = msg(
        b'Q',
        &cstr("SELECT pg_logical_emit_message(true, 'p', 'x')"),
    );
    let (mut s1, pid, key) = keyed_session(&sock);
    s1.write_all(&emit).unwrap();
    assert!(
        silent_for(&mut s1, Duration::from_millis(1000)),
        "the commit did not wait"
    );
    cancel(&sock, pid, key);
    let mut reply = Vec::new();
    while reply.last().map(|m: &(u8, Vec<u8>)| m.0) != Some(b'Z') {
        reply.push(read_msg(&mut s1).expect("reply after the cancel"));
    }
    assert_eq!(error_code(&reply), None, "{reply:?}");
    assert!(
        reply.iter().any(|m| m.0 == b'C'),
        "the commit did not complete: {reply:?}"
    );
    let (mut s2, _, _) = keyed_session(&sock);
    s2.write_all(&emit).unwrap();
    assert!(
        silent_for(&mut s2, Duration::from_millis(500)),
        "the commit did not wait"
    );
    srv.stop_ok();
    let rest = read_to_close(&mut s2);
    assert!(
        !rest.iter().any(|m| m.0 == b'C' || m.0 == b'D'),
        "a commit whose wait the shutdown ended was acknowledged: {rest:?}"
    );
}

/// With a synchronous standby named but none connected, a session at
/// `synchronous_commit = local` or `off` commits without waiting (in both
/// forms of the commit wait), while one at `remote_write` waits.
#[test]
fn local_and_off_commits_do_not_wait_for_a_missing_standby() {
    for variant in ["sync_rep_one_sleep=on", "sync_rep_one_sleep=off"] {
        let sets = ["synchronous_standby_names=nobody", "fsync=off", variant];
        let Some((_t, d, srv, port)) = start_1mb_segments("rep-local", &sets) else {
            return;
        };
        let sock = socket_path(&d.path, port);
        let (mut s, _, _) = keyed_session(&sock);
        let emit = msg(
            b'Q',
            &cstr("SELECT pg_logical_emit_message(true, 'p', 'x')"),
        );
        for level in ["local", "off"] {
            let set = msg(b'Q', &cstr(&format!("SET synchronous_commit = {level}")));
            assert_eq!(error_code(&exchange(&mut s, &set)), None);
            let started = Instant::now();
            // exchange panics if no ReadyForQuery comes within the socket's
            // read timeout (a commit that waited for the standby).
            let reply = exchange(&mut s, &emit);
            assert_eq!(error_code(&reply), None, "{variant}, {level}: {reply:?}");
            assert!(
                reply.iter().any(|m| m.0 == b'C'),
                "{variant}, {level}: the commit did not complete: {reply:?}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{variant}, {level}: the commit took {:?}",
                started.elapsed()
            );
        }
        let set = msg(b'Q', &cstr("SET synchronous_commit = remote_write"));
        assert_eq!(error_code(&exchange(&mut s, &set)), None);
        s.write_all(&emit).unwrap();
        assert!(
            silent_for(&mut s, Duration::from_millis(500)),
            "{variant}: a remote_write commit did not wait"
        );
        srv.stop_ok();
    }
}

/// A slot keeps WAL while it lags and releases it once its receiver
/// reported the flush; it survives a crash restart; dropping it releases
/// what it held.
#[test]
fn slots_keep_wal_until_consumed_survive_a_crash_and_release_on_drop() {
    let Some(bin) = pg_receivewal() else { return };
    let t = TempDir::new("rep-slot");
    let d = init(&t.join("data"), &["--wal-segment-size", "1"]);
    let port = crate::common::wire::free_port();
    let srv = start_on(&d, t.path(), port, &UNSYNCED);
    let mut s = repl_connect(&socket_path(&d.path, port), "t").unwrap();
    let created = query(
        &mut s,
        "CREATE_REPLICATION_SLOT \"s1\" PHYSICAL (RESERVE_WAL)",
    );
    let l0 = walformat::parse_lsn(&one_value(&created, 1).unwrap()).unwrap();
    assert!(l0 > 0, "no WAL reserved");
    write_segments(&d, port, 4);
    checkpoint(&d, port);
    assert!(
        server_has_segment(&d, l0 / SEG),
        "a lagging slot's WAL was removed"
    );

    let out = t.join("recv");
    let mut rx = receiver(&bin, &d, port, &out, &["--slot", "s1"]);
    let flushed = flush_lsn(&d, port);
    assert!(
        wait_until(Duration::from_secs(15), || slot_restart_lsn(&d, port, "s1")
            .is_some_and(|l| l / SEG >= flushed / SEG)),
        "the slot did not advance with the receiver's flush reports"
    );
    rx.kill();
    checkpoint(&d, port);
    assert!(!server_has_segment(&d, l0 / SEG), "consumed WAL was kept");
    let saved = slot_restart_lsn(&d, port, "s1").unwrap();

    kill_group(srv);
    let srv = start_on(&d, t.path(), port, &UNSYNCED);
    assert_eq!(
        slot_restart_lsn(&d, port, "s1"),
        Some(saved),
        "the slot did not survive the crash with its position"
    );
    write_segments(&d, port, 3);
    checkpoint(&d, port);
    assert!(
        server_has_segment(&d, saved / SEG),
        "a lagging slot's WAL was removed"
    );
    let mut s = repl_connect(&socket_path(&d.path, port), "t").unwrap();
    assert_eq!(error_code(&query(&mut s, "DROP_REPLICATION_SLOT s1")), None);
    checkpoint(&d, port);
    assert!(
        !server_has_segment(&d, saved / SEG),
        "a dropped slot still holds WAL"
    );
    assert!(!d.path.join("pg_replslot/s1").exists());
    // The SQL functions and the view.
    let made = sql(
        &d,
        port,
        "SELECT pg_create_physical_replication_slot('s2', true)",
    );
    assert!(one_value(&made, 0).unwrap().starts_with("(s2,"), "{made:?}");
    let again = sql(&d, port, "SELECT pg_create_physical_replication_slot('s2')");
    assert_eq!(error_code(&again).as_deref(), Some("42710"));
    let view = data_rows(&sql(&d, port, "SELECT * FROM pg_replication_slots"));
    assert_eq!(view.len(), 1);
    // slot_name, slot_type, active, wal_status
    assert_eq!(
        (
            view[0][0].as_deref(),
            view[0][2].as_deref(),
            view[0][6].as_deref(),
            view[0][12].as_deref()
        ),
        (Some("s2"), Some("physical"), Some("f"), Some("reserved"))
    );
    assert!(d.path.join("pg_replslot/s2/state").exists());
    let dropped = sql(&d, port, "SELECT pg_drop_replication_slot('s2')");
    assert_eq!(error_code(&dropped), None);
    assert!(data_rows(&sql(&d, port, "SELECT * FROM pg_replication_slots")).is_empty());
    srv.stop_ok();
}

/// max_slot_wal_keep_size bounds what a lagging slot holds: beyond it the
/// checkpointer removes the WAL anyway and the slot shows wal_status
/// 'lost'; streaming from it then gets 58P01.
#[test]
fn max_slot_wal_keep_size_invalidates_a_slot_that_lags_too_far() {
    let sets = ["max_slot_wal_keep_size=2MB", "fsync=off"];
    let Some((_t, d, srv, port)) = start_1mb_segments("rep-lost", &sets) else {
        return;
    };
    let made = sql(
        &d,
        port,
        "SELECT pg_create_physical_replication_slot('lag', true)",
    );
    assert_eq!(error_code(&made), None, "{made:?}");
    let l0 = slot_restart_lsn(&d, port, "lag").unwrap();
    write_segments(&d, port, 2);
    checkpoint(&d, port);
    let status =
        |d: &DataDir| data_rows(&sql(d, port, "SELECT * FROM pg_replication_slots"))[0][12].clone();
    assert_eq!(status(&d).as_deref(), Some("reserved"));
    assert!(
        server_has_segment(&d, l0 / SEG),
        "WAL within the limit was removed"
    );
    write_segments(&d, port, 5);
    checkpoint(&d, port);
    assert_eq!(status(&d).as_deref(), Some("lost"));
    assert!(
        !server_has_segment(&d, l0 / SEG),
        "a lost slot still holds WAL"
    );
    let mut s = repl_connect(&socket_path(&d.path, port), "t").unwrap();
    let start = format!(
        "START_REPLICATION SLOT lag {}",
        walformat::format_lsn(l0 - l0 % SEG)
    );
    assert_eq!(error_code(&query(&mut s, &start)).as_deref(), Some("58P01"));
    srv.stop_ok();
}

/// Bad replication input gets PostgreSQL's SQLSTATEs and the server keeps
/// running (no crash restart): unknown command, start ahead of the flush
/// position, before the oldest segment, wrong timeline, bad slot names,
/// too many walsenders, a malformed status update mid-stream.
#[test]
fn bad_replication_input_gets_postgresql_errors() {
    let sets = ["max_wal_senders=1", "fsync=off"];
    let Some((_t, d, mut srv, port)) = start_1mb_segments("rep-bad", &sets) else {
        return;
    };
    let sock = socket_path(&d.path, port);
    let walwriter = srv.child_pid("walwriter").expect("walwriter");
    let mut s = repl_connect(&sock, "t").unwrap();
    let code = |s: &mut UnixStream, q: &str| error_code(&query(s, q));
    assert_eq!(code(&mut s, "SELECT 1").as_deref(), Some("42601"));
    assert_eq!(code(&mut s, "START_REPLICATION").as_deref(), Some("42601"));
    let flush =
        walformat::parse_lsn(&one_value(&query(&mut s, "IDENTIFY_SYSTEM"), 2).unwrap()).unwrap();
    let ahead = format!(
        "START_REPLICATION {}",
        walformat::format_lsn(flush + 16 * SEG)
    );
    assert_eq!(code(&mut s, &ahead).as_deref(), Some("XX000"));
    assert_eq!(
        code(&mut s, "START_REPLICATION 0/10").as_deref(),
        Some("58P01")
    );
    let seg_start = flush - flush % SEG;
    let wrong_tli = format!(
        "START_REPLICATION {} TIMELINE 7",
        walformat::format_lsn(seg_start)
    );
    assert_eq!(code(&mut s, &wrong_tli).as_deref(), Some("XX000"));
    assert_eq!(
        code(&mut s, "CREATE_REPLICATION_SLOT \"Bad\" PHYSICAL").as_deref(),
        Some("42602")
    );
    assert_eq!(
        code(&mut s, "DROP_REPLICATION_SLOT nosuch").as_deref(),
        Some("42704")
    );
    assert_eq!(
        data_rows(&query(&mut s, "READ_REPLICATION_SLOT nosuch")),
        vec![vec![None, None, None]]
    );
    // A walsender beyond max_wal_senders: FATAL 53300 instead of the
    // greeting, as PostgreSQL answers.
    assert_eq!(
        repl_connect(&sock, "second").err().as_deref(),
        Some("53300"),
        "a walsender beyond max_wal_senders"
    );
    // Streaming, then a status update of 10 bytes instead of 34.
    let start = format!(
        "START_REPLICATION {} TIMELINE 1",
        walformat::format_lsn(seg_start)
    );
    s.write_all(&msg(b'Q', &cstr(&start))).unwrap();
    let (tag, _) = read_msg(&mut s).expect("CopyBothResponse");
    assert_eq!(tag, b'W');
    let (tag, body) = read_msg(&mut s).expect("XLogData");
    assert_eq!((tag, body[0]), (b'd', b'w'));
    s.write_all(&msg(b'd', b"r123456789")).unwrap();
    let rest = read_to_close(&mut s);
    assert_eq!(error_code(&rest).as_deref(), Some("08P01"), "{rest:?}");
    // The server is still the same one, and serves replication again.
    let mut again = Err(String::new());
    let deadline = Instant::now() + Duration::from_secs(10);
    while again.is_err() && Instant::now() < deadline {
        again = repl_connect(&sock, "t");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut s = again.expect("replication after the bad status update");
    assert!(one_value(&query(&mut s, "IDENTIFY_SYSTEM"), 0).is_some());
    assert!(srv.try_wait().is_none());
    assert_eq!(
        srv.child_pid("walwriter"),
        Some(walwriter),
        "the server went through a crash restart"
    );
    srv.stop_ok();
}

// ---- lag columns, usename, synchronous_commit levels ----

/// The type OIDs of a reply's RowDescription, by column name.
fn column_types(msgs: &[(u8, Vec<u8>)]) -> Vec<(String, u32)> {
    let Some((_, b)) = msgs.iter().find(|m| m.0 == b'T') else {
        return Vec::new();
    };
    let n = u16::from_be_bytes([b[0], b[1]]) as usize;
    let mut at = 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let end = at + b[at..].iter().position(|&c| c == 0).unwrap();
        let name = String::from_utf8_lossy(&b[at..end]).into_owned();
        let oid_at = end + 1 + 4 + 2;
        let oid = u32::from_be_bytes(b[oid_at..oid_at + 4].try_into().unwrap());
        out.push((name, oid));
        at = oid_at + 4 + 2 + 4 + 2;
    }
    out
}

/// An interval as PostgreSQL prints it (`HH:MM:SS[.ffffff]`, no days
/// here), in microseconds.
fn interval_us(text: &str) -> Option<i64> {
    let mut parts = text.split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some((h * 3600 + m * 60) * 1_000_000 + (s * 1e6).round() as i64)
}

/// Once pg_receivewal reported, pg_stat_replication shows its role
/// (usename, usesysid as pg_stat_activity does) and write_lag /
/// flush_lag as intervals (type OID 1186) between 0 and the test's
/// length; replay_lag stays NULL, because pg_receivewal reports no apply
/// position. PostgreSQL 15 shows NULL too: its walsender reads the apply
/// lag at InvalidXLogRecPtr, which reaches no sample (LagTrackerRead gives
/// -1), and never clears it (applyPtr never equals sentPtr), so the
/// column keeps its initial -1 (checked against PostgreSQL 15; walshm
/// matches).
#[test]
fn lag_columns_and_usename_once_the_receiver_reported() {
    let Some((t, d, srv, port)) = start_1mb_segments("rep-lag", &["fsync=off"]) else {
        return;
    };
    let bin = pg_receivewal().unwrap();
    let started = Instant::now();
    let _rx = receiver(
        &bin,
        &d,
        port,
        &t.join("recv"),
        &["-U", "lagrole", "--synchronous"],
    );
    let q = "SELECT usename, usesysid, write_lag, flush_lag, replay_lag, application_name FROM pg_stat_replication";
    let mut last = Vec::new();
    let reported = wait_until(Duration::from_secs(15), || {
        let r = sql(
            &d,
            port,
            "SELECT pg_logical_emit_message(true, 'lag', repeat('x', 2000))",
        );
        assert_eq!(error_code(&r), None, "{r:?}");
        last = sql(&d, port, q);
        data_rows(&last)
            .first()
            .is_some_and(|row| row[2].is_some() && row[3].is_some())
    });
    assert!(reported, "no lag measured: {last:?}");
    let row = data_rows(&last)[0].clone();
    assert_eq!(row[0].as_deref(), Some("lagrole"), "usename");
    assert_eq!(row[1].as_deref(), Some("10"), "usesysid");
    assert_eq!(row[5].as_deref(), Some("pg_receivewal"));
    let bound = started.elapsed().as_micros() as i64;
    for (col, v) in [("write_lag", &row[2]), ("flush_lag", &row[3])] {
        let us = interval_us(v.as_deref().unwrap());
        assert!(
            us.is_some_and(|us| (0..=bound).contains(&us)),
            "{col} = {v:?} is not an interval within the test's {bound} us"
        );
    }
    assert_eq!(row[4], None, "replay_lag without an apply position");
    let types = column_types(&last);
    for col in ["write_lag", "flush_lag", "replay_lag"] {
        assert!(
            types.contains(&(col.to_string(), 1186)),
            "{col} is not typed interval: {types:?}"
        );
    }
    srv.stop_ok();
}

/// Sends a transactional emit (a commit that waits as synchronous_commit
/// says) on a new session; Some(session) while it is still waiting after
/// `wait`, None once it returned without error.
fn commit_waits(d: &DataDir, port: u16, set: Option<&str>, wait: Duration) -> Option<UnixStream> {
    let sock = socket_path(&d.path, port);
    let (mut s, pid, key) = keyed_session(&sock);
    if let Some(level) = set {
        let r = query(&mut s, &format!("SET synchronous_commit = {level}"));
        assert_eq!(error_code(&r), None, "{r:?}");
    }
    let emit = msg(
        b'Q',
        &cstr("SELECT pg_logical_emit_message(true, 'sc', 'x')"),
    );
    s.write_all(&emit).unwrap();
    if silent_for(&mut s, wait) {
        cancel(&sock, pid, key);
        return Some(s);
    }
    let mut reply = Vec::new();
    while reply.last().map(|m: &(u8, Vec<u8>)| m.0) != Some(b'Z') {
        reply.push(read_msg(&mut s).expect("commit reply"));
    }
    assert_eq!(error_code(&reply), None, "{reply:?}");
    None
}

fn show_sync(d: &DataDir, port: u16) -> Option<String> {
    one_value(&sql(d, port, "SHOW synchronous_commit"), 0)
}

/// synchronous_commit as a server-wide setting takes PostgreSQL's values:
/// remote_write returns once the receiver reported, and waits once it is
/// gone; local (server-wide or SET) never waits for the receiver, on
/// does; remote_apply waits even with pg_receivewal connected (it
/// reports no apply position: PostgreSQL's behaviour); a bad value is
/// refused with the valid values listed.
#[test]
fn synchronous_commit_levels_server_wide() {
    let sets = [
        "synchronous_commit=remote_write",
        "synchronous_standby_names=pg_receivewal",
        "fsync=off",
    ];
    let Some((t, d, srv, port)) = start_1mb_segments("rep-levels", &sets) else {
        return;
    };
    let bin = pg_receivewal().unwrap();
    assert_eq!(show_sync(&d, port).as_deref(), Some("remote_write"));
    let mut rx = receiver(&bin, &d, port, &t.join("recv"), &["--synchronous"]);
    // Once the receiver streams, a remote_write commit returns.
    assert!(
        wait_until(Duration::from_secs(15), || commit_waits(
            &d,
            port,
            None,
            Duration::from_millis(2000)
        )
        .is_none()),
        "a remote_write commit never returned with the receiver streaming"
    );
    assert!(
        commit_waits(&d, port, Some("remote_apply"), Duration::from_millis(1000)).is_some(),
        "remote_apply was released by a receiver that reports no apply position"
    );
    rx.kill();
    assert!(
        commit_waits(&d, port, None, Duration::from_millis(1000)).is_some(),
        "a remote_write commit returned with no receiver"
    );
    assert!(
        commit_waits(&d, port, Some("local"), Duration::from_millis(3000)).is_none(),
        "SET synchronous_commit = local waited for the receiver"
    );
    srv.stop_ok();

    let local = [
        "--set",
        "synchronous_commit=local",
        "--set",
        "synchronous_standby_names=pg_receivewal",
    ];
    let srv = start_on(&d, t.path(), port, &local);
    assert_eq!(show_sync(&d, port).as_deref(), Some("local"));
    assert!(
        commit_waits(&d, port, None, Duration::from_millis(3000)).is_none(),
        "a server-wide local commit waited for the receiver"
    );
    assert!(
        commit_waits(&d, port, Some("on"), Duration::from_millis(1000)).is_some(),
        "SET synchronous_commit = on did not wait for the absent receiver"
    );
    srv.stop_ok();

    for (value, shown) in [("yes", "on"), ("0", "off")] {
        let set = format!("synchronous_commit={value}");
        let srv = start_on(&d, t.path(), port, &["--set", &set]);
        assert_eq!(show_sync(&d, port).as_deref(), Some(shown), "{value}");
        srv.stop_ok();
    }
    let o = postmaster(&[
        "start",
        "-D",
        d.path.to_str().unwrap(),
        "--set",
        "synchronous_commit=remote",
    ]);
    assert!(
        !o.status.success(),
        "a bad value was accepted: {}",
        o.describe()
    );
    assert_no_panic("start with a bad synchronous_commit", &o);
    for v in ["local", "remote_write", "remote_apply", "on", "off"] {
        assert!(
            o.stderr.contains(v),
            "the error does not list {v}: {}",
            o.describe()
        );
    }
}

// ---- the replication surface against hostile or unusual input ----

/// The ErrorResponse fields of the first error in `msgs`.
fn error_fields(msgs: &[(u8, Vec<u8>)]) -> std::collections::HashMap<u8, String> {
    first_error(msgs).unwrap_or_default()
}

/// (SQLSTATE, message) of the first error in `msgs`.
fn error_of(msgs: &[(u8, Vec<u8>)]) -> (String, String) {
    let f = error_fields(msgs);
    (
        f.get(&b'C').cloned().unwrap_or_default(),
        f.get(&b'M').cloned().unwrap_or_default(),
    )
}

/// The pid of the walsender whose application_name is `app`.
fn walsender_pid(d: &DataDir, port: u16, app: &str) -> i32 {
    let rows = data_rows(&sql(
        d,
        port,
        "SELECT pid, application_name FROM pg_stat_replication",
    ));
    rows.iter()
        .find(|r| r[1].as_deref() == Some(app))
        .and_then(|r| r[0].as_deref()?.parse().ok())
        .unwrap_or_else(|| panic!("no walsender for {app}: {rows:?}"))
}

/// `psql -X -A -t -v VERBOSITY=verbose -c CMD` on connection string
/// `conninfo` (errors then carry their SQLSTATE), with `env`.
fn psql_cmd(psql: &Path, conninfo: &str, cmd: &str, env: &[(&str, &str)]) -> Out {
    let mut c = Command::new(psql);
    c.args(PSQL_TERSE)
        .args(["-c", cmd, conninfo])
        .env("PGSSLMODE", "disable")
        .env("PGCONNECT_TIMEOUT", "10");
    for (k, v) in env {
        c.env(k, v);
    }
    run_cmd(&mut c, Duration::from_secs(20))
}

/// A server named after `name` (`start_1mb_segments`, fsync off), psql,
/// and the connection string of a `replication=database` session on the
/// server's socket (`extra` appended); None (the test skipped) without
/// the clients.
fn psql_replication(
    name: &str,
    extra: &str,
) -> Option<(TempDir, DataDir, Server, u16, PathBuf, String)> {
    let (t, d, srv, port) = start_1mb_segments(name, &["fsync=off"])?;
    let psql = crate::common::wire::pg_client("psql")?;
    let conninfo = format!(
        "host={} port={port} user=x dbname=x replication=database{extra}",
        d.path.display()
    );
    Some((t, d, srv, port, psql, conninfo))
}

/// Each of `cmds`, run by `psql_cmd`, fails with `error` on stderr.
fn assert_psql_refuses(psql: &Path, conninfo: &str, cmds: &[&str], error: &str) {
    for cmd in cmds {
        let o = psql_cmd(psql, conninfo, cmd, &[]);
        assert!(
            !o.status.success() && o.stderr.contains(error),
            "{cmd}\n{}",
            o.describe()
        );
    }
}

/// TIMELINE_HISTORY sends a history file far larger than any real one
/// without holding it in memory: the walsender's peak resident set grows
/// by less than half the file, the content arrives byte for byte, typed
/// bytea as PostgreSQL labels it.
#[test]
fn timeline_history_streams_a_large_file_in_bounded_memory() {
    let Some((_t, d, srv, port)) = start_1mb_segments("rep-hist", &["fsync=off"]) else {
        return;
    };
    let line = "1\t0/1000000\tpadding to make a hostile history file large\n";
    let content = line.repeat((12 << 20) / line.len());
    fs::write(d.path.join("pg_wal/00000005.history"), &content).unwrap();
    let mut s = repl_connect(&socket_path(&d.path, port), "hist").unwrap();
    assert!(one_value(&query(&mut s, "IDENTIFY_SYSTEM"), 0).is_some());
    let pid = walsender_pid(&d, port, "hist");
    let before = status_kb(pid, "VmHWM");
    let reply = query(&mut s, "TIMELINE_HISTORY 5");
    let after = status_kb(pid, "VmHWM");
    assert_eq!(error_code(&reply), None, "{:?}", error_of(&reply));
    let grew = after.saturating_sub(before);
    let half = content.len() as u64 / 2048;
    assert!(
        grew < half,
        "the walsender's peak memory grew by {grew} kB for a {} kB file",
        content.len() / 1024
    );
    let row = &data_rows(&reply)[0];
    assert_eq!(row[0].as_deref(), Some("00000005.history"));
    assert!(
        row[1].as_deref() == Some(content.as_str()),
        "content differs"
    );
    assert!(column_types(&reply).contains(&("content".to_string(), 17)));
    srv.stop_ok();
}

/// A timeline of 0 is "invalid timeline 0" (42601), as PostgreSQL's
/// replication grammar says, for TIMELINE_HISTORY and START_REPLICATION;
/// the connection stays usable (psql over a replication=database
/// connection).
#[test]
fn timeline_zero_is_an_invalid_timeline() {
    let Some((_t, d, srv, port, psql, conninfo)) =
        psql_replication("rep-tli0", " application_name=t")
    else {
        return;
    };
    let cmds = [
        "TIMELINE_HISTORY 0",
        "START_REPLICATION 0/1000000 TIMELINE 0",
    ];
    assert_psql_refuses(&psql, &conninfo, &cmds, "ERROR:  42601: invalid timeline 0");
    let mut s = repl_connect(&socket_path(&d.path, port), "t").unwrap();
    let r = query(&mut s, "TIMELINE_HISTORY 0");
    assert_eq!(error_of(&r), ("42601".into(), "invalid timeline 0".into()));
    assert!(one_value(&query(&mut s, "IDENTIFY_SYSTEM"), 0).is_some());
    srv.stop_ok();
}

/// RESERVE_WAL given twice, in either syntax, is "conflicting or
/// redundant options" (42601) and creates no slot.
#[test]
fn a_slot_option_given_twice_is_refused() {
    let Some((_t, _, srv, _, psql, conninfo)) = psql_replication("rep-twice", "") else {
        return;
    };
    let cmds = [
        "CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL, RESERVE_WAL)",
        "CREATE_REPLICATION_SLOT s PHYSICAL RESERVE_WAL RESERVE_WAL",
    ];
    let error = "ERROR:  42601: conflicting or redundant options";
    assert_psql_refuses(&psql, &conninfo, &cmds, error);
    let o = psql_cmd(&psql, &conninfo, "READ_REPLICATION_SLOT s", &[]);
    assert_eq!(o.stdout, "||\n", "a slot was created\n{}", o.describe());
    let o = psql_cmd(
        &psql,
        &conninfo,
        "CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL)",
        &[],
    );
    assert!(o.status.success(), "{}", o.describe());
    srv.stop_ok();
}

/// A standby status update ('r') with the given positions and send time.
fn status_update(write: u64, flush: u64, apply: u64, send_time: i64) -> Vec<u8> {
    let mut b = vec![b'r'];
    for v in [write, flush, apply] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(&send_time.to_be_bytes());
    b.push(0);
    msg(b'd', &b)
}

/// A raw replication connection named `app`, streaming from the start
/// of the segment that holds the flush position (CopyBothResponse read).
fn streaming(d: &DataDir, port: u16, app: &str) -> UnixStream {
    let mut s = repl_connect(&socket_path(&d.path, port), app).unwrap();
    let flush =
        walformat::parse_lsn(&one_value(&query(&mut s, "IDENTIFY_SYSTEM"), 2).unwrap()).unwrap();
    let start = format!(
        "START_REPLICATION {} TIMELINE 1",
        walformat::format_lsn(flush - flush % SEG)
    );
    s.write_all(&msg(b'Q', &cstr(&start))).unwrap();
    let (tag, _) = read_msg(&mut s).expect("CopyBothResponse");
    assert_eq!(tag, b'W');
    s
}

/// This walsender's pg_stat_replication `column` (by name), as text.
fn stat_of(d: &DataDir, port: u16, app: &str, column: &str) -> Option<String> {
    let q = format!("SELECT {column}, application_name FROM pg_stat_replication");
    let rows = data_rows(&sql(d, port, &q));
    rows.into_iter()
        .find(|r| r[1].as_deref() == Some(app))
        .and_then(|r| r[0].clone())
}

/// pg_stat_replication.reply_time is NULL before the standby's first
/// reply, its clock once it replied, and NULL again (never a wrapped or
/// out-of-range date) when the standby's clock is garbage.
#[test]
fn reply_time_is_null_until_a_reply_and_never_out_of_range() {
    let Some((_t, d, srv, port)) = start_1mb_segments("rep-rtime", &["fsync=off"]) else {
        return;
    };
    let mut s = streaming(&d, port, "rt");
    assert_eq!(
        stat_of(&d, port, "rt", "reply_time"),
        None,
        "before a reply"
    );
    for garbage in [i64::MIN, i64::MAX, -(1i64 << 62)] {
        let now = walformat::pg_now_us();
        s.write_all(&status_update(0, 0, 0, now)).unwrap();
        let mut shown = None;
        assert!(
            wait_until(Duration::from_secs(5), || {
                shown = stat_of(&d, port, "rt", "reply_time");
                shown.is_some()
            }),
            "no reply_time after a reply"
        );
        let year = walformat::format_unix_secs(now / 1_000_000 + walformat::PG_EPOCH_UNIX_SECS);
        assert_eq!(
            shown.as_deref().map(|v| &v[..4]),
            Some(&year[..4]),
            "{shown:?}"
        );
        s.write_all(&status_update(0, 0, 0, garbage)).unwrap();
        assert!(
            wait_until(Duration::from_secs(5), || {
                shown = stat_of(&d, port, "rt", "reply_time");
                shown.is_none()
            }),
            "a standby's time {garbage} shows as {shown:?}"
        );
    }
    srv.stop_ok();
}

/// A standby that reports having written, flushed and applied far more
/// than it was sent is believed only up to what was sent: the positions
/// shown never pass sent_lsn and a commit after the report still waits
/// for the standby; an honest report then releases it.
#[test]
fn standby_reports_beyond_what_was_sent_release_nothing() {
    let sets = ["synchronous_standby_names=liar", "fsync=off"];
    let Some((_t, d, srv, port)) = start_1mb_segments("rep-liar", &sets) else {
        return;
    };
    let mut s = streaming(&d, port, "liar");
    let far = 0xFFFF_FFFF_0000_0000u64;
    s.write_all(&status_update(far, far, far, walformat::pg_now_us()))
        .unwrap();
    let lsn = |c: &str| stat_of(&d, port, "liar", c).map(|v| walformat::parse_lsn(&v).unwrap());
    assert!(
        wait_until(Duration::from_secs(5), || lsn("flush_lsn").is_some()),
        "the report was not shown"
    );
    let sent = lsn("sent_lsn").expect("sent_lsn");
    for c in ["write_lsn", "flush_lsn", "replay_lsn"] {
        let v = lsn(c).unwrap();
        assert!(v <= sent, "{c} {v:X} is past sent_lsn {sent:X}");
    }
    let sock = socket_path(&d.path, port);
    let (mut c, _, _) = keyed_session(&sock);
    let emit = msg(
        b'Q',
        &cstr("SELECT pg_logical_emit_message(true, 'g', 'x')"),
    );
    c.write_all(&emit).unwrap();
    assert!(
        silent_for(&mut c, Duration::from_millis(1000)),
        "a commit was released by a report of WAL never sent"
    );
    // An honest report of what was sent by now releases it.
    let released = wait_until(Duration::from_secs(10), || {
        let sent = lsn("sent_lsn").unwrap_or(0);
        s.write_all(&status_update(sent, sent, 0, walformat::pg_now_us()))
            .unwrap();
        !silent_for(&mut c, Duration::from_millis(100))
    });
    assert!(released, "an honest report did not release the commit");
    let mut reply = Vec::new();
    while reply.last().map(|m: &(u8, Vec<u8>)| m.0) != Some(b'Z') {
        reply.push(read_msg(&mut c).expect("commit reply"));
    }
    assert_eq!(error_code(&reply), None, "{reply:?}");
    srv.stop_ok();
}

/// Replication needs the replication role: with only the login password
/// set, a replication connection over TCP (pg_receivewal) is refused with
/// PostgreSQL's FATAL and a TCP session may not create a slot (42501);
/// with a replication password set, replication over TCP logs in with it
/// and only with it. (The Unix socket admits only the server's own OS
/// user, the superuser: every other test here replicates through it.)
#[test]
fn replication_over_tcp_needs_the_replication_password() {
    let Some(bin) = pg_receivewal() else { return };
    let Some(psql) = crate::common::wire::pg_client("psql") else {
        return;
    };
    let t = TempDir::new("rep-role");
    let d = init(&t.join("data"), &["--wal-segment-size", "1"]);
    let sets = ["listen_addresses=127.0.0.1", "fsync=off"];
    let login = [("WALSHM_PASSWORD", "login-pw")];
    let (srv, port) = start_on_free_port(&d, t.path(), &sets, &[], &login);
    let p = port.to_string();
    fs::create_dir_all(t.join("recv")).unwrap();
    let o = run_cmd(
        Command::new(&bin)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &p,
                "-U",
                "anyone",
                "-w",
                "-n",
                "-D",
            ])
            .arg(t.join("recv"))
            .env("PGPASSWORD", "login-pw")
            .env("PGSSLMODE", "disable"),
        Duration::from_secs(10),
    );
    assert!(
        !o.status.success()
            && o.stderr
                .contains("FATAL:  must be superuser or replication role to start walsender"),
        "{}",
        o.describe()
    );
    let tcp = |user: &str, repl: bool| {
        let r = if repl { " replication=true" } else { "" };
        format!("host=127.0.0.1 port={port} user={user} dbname=x{r}")
    };
    let o = psql_cmd(
        &psql,
        &tcp("anyone", false),
        "SELECT pg_create_physical_replication_slot('s', true)",
        &[("PGPASSWORD", "login-pw")],
    );
    assert!(
        o.stderr.contains(
            "ERROR:  42501: must be superuser or replication role to use replication slots"
        ),
        "{}",
        o.describe()
    );
    srv.stop_ok();

    let both = [
        ("WALSHM_PASSWORD", "login-pw"),
        ("WALSHM_REPLICATION_PASSWORD", "repl-pw"),
    ];
    let (srv, port2) = start_on_free_port(&d, t.path(), &sets, &[], &both);
    let tcp = |repl: bool| {
        let r = if repl { " replication=true" } else { "" };
        format!("host=127.0.0.1 port={port2} user=standby dbname=x{r}")
    };
    let o = psql_cmd(
        &psql,
        &tcp(true),
        "IDENTIFY_SYSTEM",
        &[("PGPASSWORD", "repl-pw")],
    );
    assert!(o.status.success(), "{}", o.describe());
    for (repl, pw) in [(true, "login-pw"), (false, "repl-pw")] {
        let o = psql_cmd(&psql, &tcp(repl), "SELECT 1", &[("PGPASSWORD", pw)]);
        assert!(
            o.stderr
                .contains("password authentication failed for user \"standby\""),
            "replication={repl} with {pw}\n{}",
            o.describe()
        );
    }
    let o = psql_cmd(
        &psql,
        &tcp(false),
        "SELECT 1",
        &[("PGPASSWORD", "login-pw")],
    );
    assert_eq!(o.stdout, "1\n", "{}", o.describe());
    srv.stop_ok();
}

/// A server started with its Unix socket in `sockdir` on `port`.
fn start_in(d: &DataDir, logdir: &Path, sockdir: &Path, port: u16) -> Server {
    let p = format!("port={port}");
    let dir = format!("unix_socket_directories={}", sockdir.display());
    let mut s = start_with_env(
        &d.path,
        logdir,
        &["--set", &p, "--set", &dir, "--set", "fsync=off"],
        &[],
    );
    s.wait_ready(TIMEOUT);
    let sock = sockdir.join(format!(".s.PGSQL.{port}"));
    assert!(wait_until(TIMEOUT, || sock.exists()), "no socket");
    s
}

fn sql_at(sock: &Path, q: &str) -> Vec<(u8, Vec<u8>)> {
    let mut s = handshake(sock).expect("SQL connection");
    let r = query(&mut s, q);
    assert_eq!(error_code(&r), None, "{q}: {:?}", error_of(&r));
    r
}

fn flush_at(sock: &Path) -> u64 {
    let r = sql_at(sock, "SELECT pg_current_wal_flush_lsn()");
    walformat::parse_lsn(&one_value(&r, 0).unwrap()).unwrap()
}

/// Does `out` hold timeline `tli`'s segment for `upto` (complete or
/// `.partial`) equal to `server`'s own file below `upto`?
fn received_on(out: &Path, server: &Path, tli: u32, upto: u64) -> bool {
    let geo = walformat::Geometry::new(SEG).unwrap();
    let name = geo.file_name(tli, geo.seg_no(upto));
    let got = fs::read(out.join(&name)).or_else(|_| fs::read(out.join(format!("{name}.partial"))));
    let (Ok(got), Ok(want)) = (got, fs::read(server.join("pg_wal").join(&name))) else {
        return false;
    };
    let n = (upto % SEG) as usize;
    got.len() >= n && want.len() >= n && got[..n] == want[..n]
}

/// pg_receivewal follows a timeline switch as with PostgreSQL: it
/// received timeline 1 from a primary, a copy restored from its files
/// (`init --from-wal`) continues on timeline 2; restarted against the
/// copy, pg_receivewal asks for timeline 1 from its partial segment, gets
/// it up to the switch point, the end of the timeline (CopyDone, then the
/// next timeline and where it began), fetches 00000002.history and
/// streams timeline 2. The copy also answers START_REPLICATION on
/// timeline 1 as PostgreSQL: at the switch point, the next timeline at
/// once (no COPY); past it, or on a timeline not in its history, XX000.
#[test]
fn pg_receivewal_follows_a_timeline_switch() {
    let Some(bin) = pg_receivewal() else { return };
    let t = TempDir::new("rep-tli");
    let sockdir = t.join("sock");
    fs::create_dir_all(&sockdir).unwrap();
    let port = crate::common::wire::free_port();
    let sock = sockdir.join(format!(".s.PGSQL.{port}"));
    let p = init(&t.join("p"), &["--wal-segment-size", "1"]);
    let srv = start_in(&p, t.path(), &sockdir, port);
    sql_at(
        &sock,
        "SELECT pg_logical_emit_message(false, 'x', repeat('x', 300000))",
    );
    let out = t.join("recv");
    let host = sockdir.to_str().unwrap();
    let mut rx = receiver(&bin, &p, port, &out, &["-h", host]);
    let flush = flush_at(&sock);
    assert!(
        wait_received_upto(&out, &p, flush, Duration::from_secs(15)),
        "pg_receivewal did not stream timeline 1"
    );
    srv.stop_ok();
    let end = own_waldump(&p.path).end_lsn;
    assert!(
        wait_received_upto(&out, &p, end, Duration::from_secs(15)),
        "timeline 1 was not received to its end"
    );
    rx.kill();

    let new = t.join("new");
    let o = postmaster(&[
        "init",
        "-D",
        new.to_str().unwrap(),
        "--from-wal",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "init --from-wal\n{}", o.describe());
    let nd = DataDir {
        path: new.clone(),
        seg_size: SEG,
        first_lsn: p.first_lsn,
    };
    let srv = start_in(&nd, t.path(), &sockdir, port);
    sql_at(
        &sock,
        "SELECT pg_logical_emit_message(true, 'y', repeat('y', 5000))",
    );
    let history = fs::read(new.join("pg_wal/00000002.history")).expect("no timeline 2");
    let switch = walformat::parse_lsn(
        std::str::from_utf8(&history)
            .unwrap()
            .split('\t')
            .nth(1)
            .unwrap(),
    )
    .unwrap();
    let flush = flush_at(&sock);
    let _rx = receiver(&bin, &p, port, &out, &["-h", host]);
    let followed = wait_until(Duration::from_secs(15), || {
        fs::read(out.join("00000002.history")).is_ok_and(|h| h == history)
            && received_on(&out, &new, 2, flush)
    });
    assert!(
        followed,
        "pg_receivewal did not follow timeline 2; its log:\n{}",
        fs::read_to_string(out.with_extension("log")).unwrap_or_default()
    );
    // Timeline 1's last segment, as received, equals the server's switch
    // segment (timeline 2's file, which holds timeline 1's WAL before the
    // switch point) up to the switch point.
    let geo = walformat::Geometry::new(SEG).unwrap();
    let seg = geo.seg_no(switch);
    let tl1 = geo.file_name(1, seg);
    let got = fs::read(out.join(&tl1))
        .or_else(|_| fs::read(out.join(format!("{tl1}.partial"))))
        .expect("timeline 1's last segment");
    let want = fs::read(new.join("pg_wal").join(geo.file_name(2, seg))).unwrap();
    let n = (switch % SEG) as usize;
    assert!(
        got[..n] == want[..n],
        "timeline 1's last segment differs from the server's below the switch point"
    );
    ancestor_timeline_answers(&sock, switch);
    srv.stop_ok();
}

/// An LSN as the walsender writes it (`%X/%X`, as PostgreSQL).
fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn as u32)
}

/// START_REPLICATION on timeline 1 of a server on timeline 2 that
/// branched at `switch`.
fn ancestor_timeline_answers(sock: &Path, switch: u64) {
    let mut s = repl_connect(sock, "anc").unwrap();
    let at = |lsn: u64, tli: u32| format!("START_REPLICATION {} TIMELINE {tli}", lsn_text(lsn));
    let r = query(&mut s, &at(switch, 1));
    assert!(
        !r.iter().any(|m| m.0 == b'W'),
        "COPY with nothing to stream: {r:?}"
    );
    let next = vec![Some("2".to_string()), Some(lsn_text(switch))];
    assert_eq!(data_rows(&r), vec![next.clone()]);
    let r = query(&mut s, &at(switch + 0x100, 1));
    let f = error_fields(&r);
    assert_eq!(
        (f.get(&b'C').map(String::as_str), f.get(&b'M').cloned()),
        (
            Some("XX000"),
            Some(format!(
                "requested starting point {} on timeline 1 is not in this server's history",
                lsn_text(switch + 0x100)
            ))
        )
    );
    let r = query(&mut s, &at(switch - switch % SEG, 3));
    assert_eq!(
        error_of(&r),
        (
            "XX000".into(),
            "requested timeline 3 is not in this server's history".into()
        )
    );
    // Timeline 1 from its last segment: the WAL up to the switch point,
    // our CopyDone, then after the client's the next timeline.
    let from = switch - switch % SEG;
    s.write_all(&msg(b'Q', &cstr(&at(from, 1)))).unwrap();
    assert_eq!(read_msg(&mut s).expect("CopyBothResponse").0, b'W');
    let mut upto = from;
    loop {
        let (tag, body) = read_msg(&mut s).expect("stream");
        match (tag, body.first()) {
            (b'd', Some(b'w')) => {
                let start = u64::from_be_bytes(body[1..9].try_into().unwrap());
                assert_eq!(start, upto, "a gap in the stream");
                upto += (body.len() - 25) as u64;
            }
            (b'd', Some(b'k')) => {}
            (b'c', _) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(upto, switch, "timeline 1 did not end at its switch point");
    let r = exchange(&mut s, &msg(b'c', &[]));
    assert_eq!(data_rows(&r), vec![next]);
    let tags: Vec<&[u8]> = r.iter().filter(|m| m.0 == b'C').map(|m| &m.1[..]).collect();
    assert_eq!(
        tags,
        [&b"START_STREAMING\0"[..], b"START_REPLICATION\0"],
        "{r:?}"
    );
}
