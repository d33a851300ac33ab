//! A hostile client against a real `postmaster start`: each input that
//! once broke a backend or the whole server, as a regression test.
//!
//! 1. expressions nested 30,000 parentheses or 300,000 unary minus signs
//!    deep get ERROR 54001 and the same session then answers `SELECT 1`;
//!    another session connected meanwhile is unaffected and the postmaster
//!    did not crash-restart (same children, no startup process); a
//!    40,000-column target list gets 54011;
//! 2. with `session_memory_limit=8MB`, a value, a result row, a bound
//!    parameter or a query whose tokens would take more than the limit
//!    gets ERROR 53200 and the session goes on;
//! 3. four 50 MB `repeat()` results in one Query message stream to the
//!    client: the backend's peak RSS stays far below their sum, and its
//!    anonymous memory shrinks back after the query;
//! 4. a client that sends a big query and never reads its socket does not
//!    hold up a fast shutdown: SIGTERM ends the postmaster with exit 0
//!    within a few seconds, the control file says "shut down" and the last
//!    WAL record is the shutdown checkpoint.
//!
//! Checks use SQLSTATEs, PIDs, /proc, the control file and `postmaster
//! waldump`, never log wording. Every wait is bounded; the server's process
//! group is SIGKILLed if a test fails.

use crate::common::wire::*;
use crate::common::*;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

const IO_TIMEOUT: Duration = Duration::from_secs(15);

/// An initialized data directory and a running server on a free port.
type Pg = PortServer;

// ---------------------------------------------------------------------------
// A raw protocol client

fn query(sql: &str) -> Vec<u8> {
    msg(b'Q', &cstr(sql))
}

/// What one Query produced, up to ReadyForQuery.
#[derive(Debug, Default)]
struct Reply {
    /// SQLSTATEs of the ErrorResponses.
    errors: Vec<String>,
    /// Each DataRow: its columns' lengths (-1 NULL) and the first column's
    /// first bytes.
    rows: Vec<(Vec<i32>, Vec<u8>)>,
    /// Column count of each RowDescription.
    descriptions: Vec<i16>,
}

struct Client {
    s: UnixStream,
    pid: i32,
}

impl Client {
    fn connect(pg: &Pg) -> Client {
        let mut s = UnixStream::connect(pg.socket()).expect("connect");
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut body = (3i32 << 16).to_be_bytes().to_vec();
        for p in ["user", "x", "database", "x", ""] {
            body.extend(cstr(p));
        }
        let mut packet = i32::try_from(body.len() + 4)
            .unwrap()
            .to_be_bytes()
            .to_vec();
        packet.extend(body);
        s.write_all(&packet).unwrap();
        let mut c = Client { s, pid: 0 };
        loop {
            let (tag, len) = c.header().expect("closed during start-up");
            let body = c.body(len);
            match tag {
                b'K' => c.pid = i32::from_be_bytes(body[..4].try_into().unwrap()),
                b'Z' => break,
                b'E' => panic!("start-up refused: {:?}", fields(&body)),
                _ => {}
            }
        }
        assert!(c.pid > 0, "no BackendKeyData");
        c
    }

    fn header(&mut self) -> Option<(u8, usize)> {
        let mut h = [0u8; 5];
        self.s.read_exact(&mut h).ok()?;
        let len = i32::from_be_bytes([h[1], h[2], h[3], h[4]]);
        assert!(len >= 4, "message {:?} with length {len}", h[0] as char);
        Some((h[0], usize::try_from(len).unwrap() - 4))
    }

    fn body(&mut self, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.s.read_exact(&mut b).expect("truncated message");
        b
    }

    /// A DataRow read without holding it: column lengths and the first
    /// 16 bytes of the first column.
    fn data_row(&mut self, len: usize) -> (Vec<i32>, Vec<u8>) {
        let head = self.body(2);
        let n = i16::from_be_bytes([head[0], head[1]]);
        let mut left = len - 2;
        let mut lens = Vec::new();
        let mut sample = Vec::new();
        let mut chunk = vec![0u8; 1 << 16];
        for i in 0..n {
            let l = i32::from_be_bytes(self.body(4).try_into().unwrap());
            left -= 4;
            lens.push(l);
            let mut payload = usize::try_from(l.max(0)).unwrap();
            left -= payload;
            while payload > 0 {
                let k = payload.min(chunk.len());
                self.s.read_exact(&mut chunk[..k]).expect("truncated row");
                if i == 0 && sample.len() < 16 {
                    sample.extend_from_slice(&chunk[..k.min(16 - sample.len())]);
                }
                payload -= k;
            }
        }
        assert_eq!(left, 0, "DataRow length does not match its columns");
        (lens, sample)
    }

    fn read_reply(&mut self) -> Reply {
        let mut r = Reply::default();
        loop {
            let (tag, len) = self.header().expect("closed before ReadyForQuery");
            match tag {
                b'D' => {
                    let row = self.data_row(len);
                    r.rows.push(row);
                }
                b'T' => {
                    let b = self.body(len);
                    r.descriptions.push(i16::from_be_bytes([b[0], b[1]]));
                }
                b'E' => {
                    let b = self.body(len);
                    r.errors.push(fields(&b).remove(&b'C').unwrap_or_default());
                }
                b'Z' => {
                    self.body(len);
                    return r;
                }
                _ => {
                    self.body(len);
                }
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write to server");
    }

    fn run(&mut self, sql: &str) -> Reply {
        self.send(&query(sql));
        self.read_reply()
    }

    /// Asserts `SELECT 1` answers one row "1" without error.
    fn assert_usable(&mut self, what: &str) {
        let r = self.run("SELECT 1");
        assert!(r.errors.is_empty(), "{what}: SELECT 1 failed: {r:?}");
        assert_eq!(r.rows.len(), 1, "{what}: {r:?}");
        assert_eq!(r.rows[0].1, b"1", "{what}");
    }
}

// ---------------------------------------------------------------------------
// /proc

/// A `kB` field of /proc/PID/status, in bytes.
fn status_bytes(pid: i32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        * 1024
}

const MIB: u64 = 1 << 20;

fn sorted_children(srv: &Server) -> Vec<(i32, String)> {
    let mut v = srv.children();
    v.sort();
    v
}

// ===========================================================================

#[test]
fn deep_expressions_get_54001_and_nobody_else_notices() {
    let mut pg = Pg::start("hostile-deep", &[]);
    let mut a = Client::connect(&pg);
    let mut b = Client::connect(&pg);
    let before = sorted_children(pg.srv());
    assert_eq!(before.iter().filter(|(_, c)| c == "backend").count(), 2);

    let parens = format!("SELECT {}1{}", "(".repeat(30_000), ")".repeat(30_000));
    let minus = format!("SELECT {}1", "- ".repeat(300_000));
    let casts = format!("SELECT txid_current(){}", "::text".repeat(300_000));
    for (what, sql) in [("parens", &parens), ("minus", &minus), ("casts", &casts)] {
        let r = a.run(sql);
        assert_eq!(r.errors, ["54001"], "{what}: {r:?}");
        a.assert_usable(what);
    }
    let columns = format!("SELECT {}", vec!["1"; 40_000].join(","));
    let r = a.run(&columns);
    assert_eq!(r.errors, ["54011"], "40,000 columns: {r:?}");
    assert!(r.descriptions.is_empty(), "no RowDescription was sent");
    let r = a.run(&format!("SELECT {}", vec!["1"; 1664].join(",")));
    assert!(r.errors.is_empty(), "1664 columns: {r:?}");
    assert_eq!(r.descriptions, [1664]);
    assert_eq!(r.rows[0].0.len(), 1664);
    a.assert_usable("after the target lists");

    b.assert_usable("the other session");
    let after = sorted_children(pg.srv());
    assert_eq!(before, after, "children changed: a crash restart happened");
    assert!(!after.iter().any(|(_, c)| c == "startup"));
    assert_eq!(
        after
            .iter()
            .filter(|(p, _)| *p == a.pid || *p == b.pid)
            .count(),
        2,
        "both backends are the ones that started"
    );
    drop((a, b));
    let o = pg.stop();
    assert_no_panic("deep", &o);
}

#[test]
fn values_rows_and_parameters_above_the_memory_limit_get_53200() {
    let mut pg = Pg::start("hostile-mem", &["session_memory_limit=8MB"]);
    let mut c = Client::connect(&pg);
    let r = c.run("SELECT repeat('x', 9000000)");
    assert_eq!(r.errors, ["53200"], "a value above the limit: {r:?}");
    c.assert_usable("after the value");
    let r = c.run("SELECT repeat('x', 5000000), repeat('y', 5000000)");
    assert_eq!(r.errors, ["53200"], "a row above the limit: {r:?}");
    c.assert_usable("after the row");
    // A Query message larger than the limit is read and thrown away.
    let r = c.run(&format!("SELECT '{}'", "q".repeat(9_000_000)));
    assert_eq!(
        r.errors,
        ["53200"],
        "a query message above the limit: {r:?}"
    );
    c.assert_usable("after the long message");
    // 2 MB of query text whose tokens would take ~100 MB.
    let r = c.run(&format!("SELECT {}1", "1,".repeat(1_000_000)));
    assert_eq!(
        r.errors,
        ["53200"],
        "a query that lexes beyond the limit: {r:?}"
    );
    c.assert_usable("after the long query");
    let r = c.run("SELECT repeat('ab', 3000000)");
    assert!(r.errors.is_empty(), "6 MB fits in 8 MB: {r:?}");
    assert_eq!(r.rows[0].0, [6_000_000]);
    assert_eq!(&r.rows[0].1[..4], b"abab");

    // A Bind message carrying a 9 MB parameter: refused, skipped to Sync.
    c.send(&extended_query(
        "SELECT $1::text",
        &[&"p".repeat(9_000_000)],
    ));
    let r = c.read_reply();
    assert_eq!(r.errors, ["53200"], "a parameter above the limit: {r:?}");
    assert!(r.rows.is_empty());
    c.assert_usable("after the parameter");
    drop(c);
    pg.stop();
}

#[test]
fn large_replies_stream_and_memory_is_given_back() {
    let mut pg = Pg::start("hostile-stream", &[]);
    let mut c = Client::connect(&pg);
    c.assert_usable("at start");
    let anon_before = status_bytes(c.pid, "RssAnon");
    let n: u64 = 50_000_000;
    let one = format!("SELECT repeat('x', {n});");
    let r = c.run(&one.repeat(4));
    assert!(r.errors.is_empty(), "{r:?}");
    assert_eq!(r.rows.len(), 4);
    for (lens, sample) in &r.rows {
        assert_eq!(lens, &[i32::try_from(n).unwrap()]);
        assert_eq!(sample, &[b'x'; 16]);
    }
    let peak = status_bytes(c.pid, "VmHWM");
    c.assert_usable("after the large replies"); // the backend is done with them
    let anon_after = status_bytes(c.pid, "RssAnon");
    eprintln!(
        "backend: VmHWM {} MiB for 4 x {} MB; RssAnon {} KiB before, {} KiB after",
        peak / MIB,
        n / 1_000_000,
        anon_before / 1024,
        anon_after / 1024
    );
    assert!(
        peak < 150 * MIB,
        "the backend peaked at {} MiB for 4 x 50 MB: replies are not streamed",
        peak / MIB
    );
    assert!(
        anon_after < anon_before + 16 * MIB,
        "the backend keeps {} MiB after the query (had {} MiB)",
        anon_after / MIB,
        anon_before / MIB
    );
    drop(c);
    pg.stop();
}

/// A transaction with an XID, a reply far larger than the socket buffers,
/// then statements that must never run once that reply cannot be written.
const ABANDONED: &str = "BEGIN; SELECT txid_current(); SELECT repeat('x', 50000000); \
     SELECT pg_logical_emit_message(true, 'hostile', 'after'); COMMIT";

#[test]
fn fast_shutdown_does_not_wait_for_a_client_that_does_not_read() {
    let mut pg = Pg::start("hostile-noread", &[]);
    let mut stuck = Client::connect(&pg);
    let mut other = Client::connect(&pg);
    other.assert_usable("the other session");
    // The same statements from a client that vanishes at once: the write
    // fails (EPIPE) and nothing after it may run either.
    let mut vanishing = Client::connect(&pg);
    vanishing.send(&query(ABANDONED));
    let gone = vanishing.pid;
    drop(vanishing);
    assert!(
        wait_until(Duration::from_secs(10), || !alive(gone)),
        "the vanished client's backend did not exit"
    );
    // This one stays connected and never reads.
    stuck.send(&query(ABANDONED));
    let blocked = wait_until(Duration::from_secs(10), || {
        proc_stat(stuck.pid).is_some_and(|(_, state, _)| state == 'S')
            && status_bytes(stuck.pid, "VmHWM") > 40 * MIB
    });
    assert!(blocked, "the backend never blocked writing its reply");
    std::thread::sleep(Duration::from_millis(300));

    let datadir = pg.d.path.clone();
    let start = Instant::now();
    pg.stop(); // SIGTERM; exit 0 without a panic
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "fast shutdown took {took:?} with a client that does not read"
    );
    let records = assert_clean_shutdown(&datadir);
    let count = |desc: &str| {
        records
            .iter()
            .filter(|l| l.starts_with("rmgr: Transaction") && l.contains(desc))
            .count()
    };
    assert_eq!(
        count("desc: COMMIT"),
        0,
        "the abandoned transaction committed"
    );
    assert_eq!(
        count("desc: ABORT"),
        2,
        "both were rolled back: {records:#?}"
    );
    assert!(
        !records.iter().any(|l| l.contains("rmgr: LogicalMessage")),
        "a statement after the abandoned write ran"
    );
    drop((stuck, other));
}

/// The control file says "shut down" and the last WAL record is a shutdown
/// checkpoint; returns the WAL's record lines.
fn assert_clean_shutdown(datadir: &Path) -> Vec<String> {
    let control = backend::control::ControlFile::read(datadir).expect("control file");
    assert_eq!(
        control.state,
        backend::control::DbState::ShutDown,
        "the next start would run crash recovery"
    );
    let o = run_cmd(
        std::process::Command::new(postmaster_bin())
            .args(["waldump", "-D"])
            .arg(datadir),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "waldump\n{}", o.describe());
    let records = record_lines(&o.stdout);
    let last = records.last().expect("no WAL record at all");
    assert!(
        last.contains("CHECKPOINT_SHUTDOWN"),
        "last record is not a shutdown checkpoint: {last}"
    );
    let at = walformat::parse_lsn(
        last.split("lsn: ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .expect("lsn field"),
    )
    .expect("lsn");
    assert_eq!(at, control.checkpoint, "the control file points at it");
    records
}
