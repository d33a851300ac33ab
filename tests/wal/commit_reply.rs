//! `commit_reply = flusher` (walshm's own): the walwriter sends durable
//! commits' replies after the fdatasync that covers them
//! (backend/src/reply.rs). Through real servers and raw protocol clients:
//!
//! - crash safety and durability: clients commit durable transactional
//!   messages and record each commit whose reply (DataRow, then
//!   ReadyForQuery) arrived; kill -9 of the walwriter, or of a backend,
//!   is a crash restart, and afterwards every acknowledged message is in
//!   the WAL (walshm's reader and pg_waldump) inside a transaction whose
//!   COMMIT record is there;
//! - no reordering: a client pipelining durable commits and plain SELECTs
//!   gets every reply in order; pgbench `\startpipeline` runs clean;
//! - no hang: a client that stops reading while its replies pile up gets
//!   every one once it reads again;
//! - sockets: connections end at once (EOF) although the walwriter holds a
//!   duplicate, clients that vanish before their reply do not hurt the
//!   walwriter, and its open files stay bounded over hundreds of
//!   connections;
//! - the setting is refused when misspelt.

use crate::common::wire::*;
use crate::common::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FLUSHER: &[&str] = &["commit_reply=flusher", "fsync=on"];

/// A server with `commit_reply = flusher` (given in `sets`) on a free port.
type Reply = PortServer;

fn query(sql: &str) -> Vec<u8> {
    msg(b'Q', &cstr(sql))
}

fn durable_emit(tag: &str) -> String {
    format!("SELECT pg_logical_emit_message(true, 'k', '{tag}')")
}

/// The one value of the one DataRow of a reply, or panics with the reply.
fn single_value(reply: &[(u8, Vec<u8>)]) -> String {
    let rows = data_rows(reply);
    assert_eq!(rows.len(), 1, "one row expected: {reply:?}");
    rows[0][0].clone().expect("a value")
}

/// A session inside a transaction that holds an XID: deferral needs
/// another process in a transaction (a lone committer flushes itself).
fn hold_a_transaction(path: &Path) -> UnixStream {
    let mut s = handshake(path).expect("handshake");
    exchange(&mut s, &query("BEGIN"));
    single_value(&exchange(&mut s, &query("SELECT txid_current()")));
    s
}

/// A `FLUSHER` server named after `tag` that defers replies (another
/// session holds a transaction: it is returned so that it stays open),
/// and a session on it.
fn deferring_session(tag: &str) -> (Reply, UnixStream, UnixStream) {
    let r = Reply::start(tag, FLUSHER);
    let other = hold_a_transaction(&r.socket());
    let s = handshake(&r.socket()).expect("handshake");
    (r, other, s)
}

/// Reads messages until `n` ReadyForQuery have arrived; None on EOF/error.
fn read_replies(s: &mut UnixStream, n: usize) -> Option<Vec<(u8, Vec<u8>)>> {
    let mut v = Vec::new();
    let mut ready = 0;
    while ready < n {
        let m = read_msg(s)?;
        ready += (m.0 == b'Z') as usize;
        v.push(m);
    }
    Some(v)
}

/// Handshake, retrying through a crash restart (refusals, resets).
fn connect_retrying(path: &Path, within: Duration) -> UnixStream {
    let deadline = Instant::now() + within;
    loop {
        if path.exists() {
            if let Ok(Ok(s)) = std::panic::catch_unwind(|| handshake(path)) {
                return s;
            }
        }
        assert!(
            Instant::now() < deadline,
            "server not back within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `clients` threads commit durable messages until the server goes away
/// or `stop` is set; returns the message LSNs whose replies arrived.
fn committing_clients(
    path: &Path,
    clients: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<u64>>> {
    (0..clients)
        .map(|c| {
            let path = path.to_path_buf();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let Ok(mut s) = handshake(&path) else {
                    return acked;
                };
                for i in 0.. {
                    if stop.load(Ordering::Relaxed)
                        || s.write_all(&query(&durable_emit(&format!("c{c}-{i}"))))
                            .is_err()
                    {
                        break;
                    }
                    let Some(reply) = read_replies(&mut s, 1) else {
                        break;
                    };
                    let rows = data_rows(&reply);
                    let Some(Some(lsn)) = rows.first().and_then(|r| r.first()) else {
                        break; // an error: the server is going down
                    };
                    acked.push(walformat::parse_lsn(lsn).expect("an LSN"));
                }
                acked
            })
        })
        .collect()
}

/// Every acknowledged message is a transactional message of the WAL whose
/// transaction has a COMMIT record. Returns how many were checked.
fn check_acked_messages(d: &DataDir, acked: &[u64]) -> usize {
    let wal = tx_wal_check(d);
    // pg_logical_emit_message returns the end of its record: the message
    // is the last one that starts before it.
    let xid_of: BTreeMap<u64, u32> = wal.tx_messages.iter().copied().collect();
    let commit_of: BTreeMap<u32, u64> = wal.commits.iter().map(|&(l, x)| (x, l)).collect();
    for lsn in acked {
        let xid = xid_of
            .range(..*lsn)
            .next_back()
            .map(|(_, x)| x)
            .unwrap_or_else(|| {
                panic!(
                    "acknowledged message at {} is not in the WAL",
                    walformat::format_lsn(*lsn)
                )
            });
        // Its COMMIT record starts at or after the message's end.
        assert!(
            commit_of.get(xid).is_some_and(|c| c >= lsn),
            "acknowledged message ending at {} (xid {xid}) has no COMMIT record after it",
            walformat::format_lsn(*lsn)
        );
    }
    acked.len()
}

/// Clients commit, `victim` (a child's comm) is killed -9 while replies
/// are deferred, the server restarts by itself, and nothing acknowledged
/// is lost.
fn crash_keeps_acknowledged_commits(tag: &str, victim: &str) {
    let mut r = Reply::start(tag, FLUSHER);
    let stop = Arc::new(AtomicBool::new(false));
    let clients = committing_clients(&r.socket(), 6, &stop);
    std::thread::sleep(Duration::from_millis(800));
    let pid = r.child(victim);
    kill(pid, libc::SIGKILL);
    // A walwriter's death is a crash restart, which ends every session; a
    // connection backend's is cleaned up after (unless it died inside a
    // shared critical section, or with its reply handed to the
    // walwriter), and the other sessions go on until told to stop.
    let verdict = |l: &str| {
        l.contains("cleaned up without a restart")
            || l.contains("terminating any other active server processes")
    };
    assert!(
        wait_until(Duration::from_secs(20), || verdict(&r.srv().stderr())),
        "no verdict on the death of the {victim}"
    );
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let mut acked: Vec<u64> = Vec::new();
    let watchdog = Instant::now();
    for c in clients {
        acked.extend(c.join().expect("client thread"));
    }
    assert!(watchdog.elapsed() < Duration::from_secs(15), "clients hung");
    assert!(
        acked.len() > 50,
        "too few commits before the kill: {}",
        acked.len()
    );
    // Back by itself: a new connection commits durably again.
    let mut s = connect_retrying(&r.socket(), Duration::from_secs(20));
    let reply = exchange(&mut s, &query(&durable_emit("after")));
    acked.push(walformat::parse_lsn(&single_value(&reply)).expect("an LSN"));
    drop(s);
    r.stop();
    let checked = check_acked_messages(&r.d, &acked);
    eprintln!("{tag}: {checked} acknowledged commits checked after kill -9 of the {victim}");
}

#[test]
fn kill9_of_the_walwriter_loses_no_acknowledged_commit() {
    crash_keeps_acknowledged_commits("reply-kill-ww", "walwriter");
}

#[test]
fn kill9_of_a_backend_loses_no_acknowledged_commit() {
    crash_keeps_acknowledged_commits("reply-kill-be", "backend");
}

#[test]
fn pipelined_commits_and_selects_are_answered_in_order() {
    let (mut r, _other, mut s) = deferring_session("reply-pipe");
    let rounds = 150;
    // Each durable commit is written alone, so that its reply is handed
    // off; the next query follows 0-300 us later, while the walwriter
    // still holds that reply (an fdatasync takes longer).
    let mut sent = 0;
    let writer = {
        let mut w = s.try_clone().expect("clone");
        std::thread::spawn(move || {
            for i in 0..rounds {
                w.write_all(&query(&durable_emit(&format!("p{i}"))))
                    .expect("write");
                std::thread::sleep(Duration::from_micros(100 * (i % 4) as u64));
                let mut next = query(&format!("SELECT {i}"));
                if i % 3 == 0 {
                    next.extend(query("BEGIN; SELECT 1; COMMIT"));
                }
                w.write_all(&next).expect("write");
            }
        })
    };
    let mut last_lsn = 0;
    for i in 0..rounds {
        let emit = read_replies(&mut s, 1).expect("emit reply");
        let lsn = walformat::parse_lsn(&single_value(&emit)).expect("an LSN");
        assert!(lsn > last_lsn, "round {i}: LSN {lsn:X} after {last_lsn:X}");
        last_lsn = lsn;
        let select = read_replies(&mut s, 1).expect("select reply");
        assert_eq!(
            single_value(&select),
            i.to_string(),
            "round {i}: replies out of order"
        );
        if i % 3 == 0 {
            let block = read_replies(&mut s, 1).expect("block reply");
            assert_eq!(data_rows(&block), vec![vec![Some("1".to_string())]]);
        }
        sent += 1;
    }
    writer.join().expect("writer");
    assert_eq!(sent, rounds);
    drop(s);
    r.stop();
}

#[test]
fn the_next_query_waits_for_the_flushers_reply() {
    let (mut r, _other, mut s) = deferring_session("reply-stop");
    let ww = r.child("walwriter");
    for i in 0..4 {
        // With the flusher stopped, the commit's reply stays handed off
        // (nobody else flushes it), and the SELECT behind it must not be
        // answered first.
        kill(ww, libc::SIGSTOP);
        s.write_all(&query(&durable_emit(&format!("s{i}"))))
            .unwrap();
        std::thread::sleep(Duration::from_millis(30));
        s.write_all(&query(&format!("SELECT {i}"))).unwrap();
        assert!(
            silent_for(&mut s, Duration::from_millis(200)),
            "round {i}: a reply while the walwriter is stopped"
        );
        kill(ww, libc::SIGCONT);
        let emit = read_replies(&mut s, 1).expect("emit reply");
        walformat::parse_lsn(&single_value(&emit)).expect("the commit's reply first");
        let select = read_replies(&mut s, 1).expect("select reply");
        assert_eq!(single_value(&select), i.to_string());
    }
    drop(s);
    r.stop();
}

#[test]
fn pgbench_pipelines_run_clean() {
    let Some(pgbench) = pg_client("pgbench") else {
        return;
    };
    let mut r = Reply::start("reply-pgbench", FLUSHER);
    let script = r.tmp.join("pipe.sql");
    std::fs::write(
        &script,
        "\\set n random(1, 1000000)\n\\startpipeline\n\
         SELECT pg_logical_emit_message(true, 'k', :n::text);\n\
         SELECT :n;\n\
         SELECT pg_logical_emit_message(true, 'k', :n::text);\n\
         \\endpipeline\n",
    )
    .unwrap();
    let port = r.port.to_string();
    let host = r.d.path.to_str().unwrap().to_string();
    let o = run_cmd(
        std::process::Command::new(pgbench)
            .args([
                "-n", "-M", "extended", "-c", "4", "-T", "2", "-h", &host, "-p", &port,
            ])
            .args(["-U", "x", "-f", script.to_str().unwrap(), "x"]),
        Duration::from_secs(30),
    );
    assert_eq!(o.code(), Some(0), "pgbench: {}", o.describe());
    r.stop();
}

#[test]
fn a_client_that_stops_reading_gets_every_reply_later() {
    let (mut r, _other, mut s) = deferring_session("reply-full");
    // Big replies fill the socket buffers while durable commits queue
    // behind them; nothing is read until everything was sent.
    let n = 60;
    let writer = {
        let mut w = s.try_clone().expect("clone");
        std::thread::spawn(move || {
            for i in 0..n {
                let mut q = query("SELECT repeat('x', 200000)");
                q.extend(query(&durable_emit(&format!("f{i}"))));
                w.write_all(&q).expect("write");
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let replies = read_replies(&mut s, 2 * n).expect("every reply");
    writer.join().expect("writer");
    let rows = data_rows(&replies);
    assert_eq!(rows.len(), 2 * n);
    for (i, pair) in rows.chunks(2).enumerate() {
        assert_eq!(pair[0][0].as_deref().map(str::len), Some(200000), "row {i}");
        assert!(walformat::parse_lsn(pair[1][0].as_deref().unwrap()).is_ok());
    }
    assert!(started.elapsed() < Duration::from_secs(15));
    drop(s);
    r.stop();
}

/// The sockets `pid` holds open (its WAL segment files, which come and go
/// with its writes, are not counted).
fn open_sockets(pid: i32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

#[test]
fn connections_end_at_once_and_the_walwriter_keeps_no_sockets() {
    // The walwriter wakes only when a reply is handed off: a client that
    // saw EOF only once the walwriter closed its copy would wait for it.
    let sets = [FLUSHER, &["wal_writer_delay=10000"]].concat();
    let mut r = Reply::start("reply-fds", &sets);
    let _other = hold_a_transaction(&r.socket());
    let ww = r.child("walwriter");
    let before = open_sockets(ww);
    let worst_eof = Arc::new(Mutex::new(Duration::ZERO));
    for i in 0..300 {
        let mut s = handshake_retrying(&r.socket());
        let reply = exchange(&mut s, &query(&durable_emit(&format!("r{i}"))));
        single_value(&reply);
        if i % 3 == 0 {
            // Gone before its reply: the walwriter's send meets a closed peer.
            s.write_all(&query(&durable_emit("gone"))).unwrap();
            drop(s);
            continue;
        }
        s.write_all(&msg(b'X', &[])).unwrap();
        let t = Instant::now();
        let rest = read_to_close(&mut s);
        assert!(rest.is_empty(), "messages after Terminate: {rest:?}");
        let mut w = worst_eof.lock().unwrap();
        *w = (*w).max(t.elapsed());
    }
    let worst = *worst_eof.lock().unwrap();
    assert!(worst < Duration::from_secs(1), "EOF took {worst:?}");
    // The walwriter closes the duplicates of ended connections at its next
    // round (each probe's commit makes one).
    let bounded = wait_until(Duration::from_secs(5), || {
        let mut s = handshake_retrying(&r.socket());
        single_value(&exchange(&mut s, &query(&durable_emit("probe"))));
        drop(s);
        std::thread::sleep(Duration::from_millis(20));
        open_sockets(ww) <= before + 1
    });
    assert!(
        bounded,
        "walwriter sockets: {} before, {} after",
        before,
        open_sockets(ww)
    );
    assert_eq!(r.child("walwriter"), ww, "the walwriter was restarted");
    r.stop();
}

#[test]
fn a_misspelt_commit_reply_is_refused() {
    let tmp = TempDir::new("reply-bad");
    let d = init(&tmp.join("data"), &[]);
    assert_start_refused(&d, "commit_reply", "walwriter");
}
