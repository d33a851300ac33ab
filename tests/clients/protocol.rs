//! The PostgreSQL wire-protocol front end of a real `postmaster start`,
//! driven by PostgreSQL 15's own clients (psql, pgbench) and by a raw
//! protocol client written here:
//!
//! 1. every supported statement through `psql -c` (LSN format, increasing
//!    txids, flush LSN after a synchronous commit, pg_switch_wal on a
//!    segment boundary, SQLSTATEs 42883 / 42601 / 0A000, session usable
//!    after errors, `$n` parameters through the extended protocol);
//! 2. transaction blocks through `psql -f`, checked in the WAL with
//!    pg_waldump (committed messages share their COMMIT's xid, rolled back
//!    and failed blocks end with ABORT, 25P02 in a failed block);
//! 3. pgbench (simple and prepared, 1..64 clients): no failed transactions
//!    and the WAL holds exactly the messages / commits pgbench counted;
//! 4. robustness: malformed and truncated startup packets and messages,
//!    oversized lengths, vanishing clients, 1,000 connect/disconnect
//!    cycles; afterwards the postmaster is up, children are back to the
//!    baseline, no proc slot leaked, postmaster RSS did not grow;
//! 5. security: the Unix socket and its lock file are 0600, another uid is
//!    refused by the file mode and (socket opened by hand) by the server's
//!    SO_PEERCRED check with FATAL 28000;
//! 6. max_connections: the session beyond it gets FATAL 53300;
//! 7. crash restart: an open psql session gets PostgreSQL's crash message
//!    when the walwriter is SIGKILLed; a new connection works after recovery;
//! 8. TCP + SCRAM-SHA-256: the right password works, a wrong one gets 28P01.
//!
//! Every test bounds its waits, leaves no process, socket or /dev/shm
//! segment (the server's whole process group is SIGKILLed if a test fails).
//! Without psql/pgbench the client tests print "SKIPPED: psql/pgbench not
//! found" unless WALSHM_REQUIRE_PG=1, which makes them fail instead.

use crate::common::wire::*;
use crate::common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Clients

// ---------------------------------------------------------------------------
// A server with a port

struct Pg {
    srv: Option<Server>,
    d: DataDir,
    port: u16,
    tmp: TempDir,
}

impl Pg {
    /// PostgreSQL 15's client program `client`, and a server as `start`
    /// makes it; None (the test skipped) without the client.
    fn with_client(client: &str, tag: &str, sets: &[&str]) -> Option<(PathBuf, Pg)> {
        let path = pg_client(client)?;
        Some((path, Pg::start(tag, sets)))
    }

    /// init (with wal_keep_size so every record stays readable) + start
    /// with `--set port=...` and `sets`; waits until ready.
    fn start(tag: &str, sets: &[&str]) -> Pg {
        let tmp = TempDir::new(tag);
        let d = init_keep(&tmp.join("data"), &[]);
        let (srv, port) = start_on_free_port(&d, tmp.path(), sets, &[], &[]);
        Pg {
            srv: Some(srv),
            d,
            port,
            tmp,
        }
    }

    fn srv(&self) -> &Server {
        self.srv.as_ref().unwrap()
    }

    fn srv_mut(&mut self) -> &mut Server {
        self.srv.as_mut().unwrap()
    }

    fn socket(&self) -> PathBuf {
        socket_path(&self.d.path, self.port)
    }

    fn lock_file(&self) -> PathBuf {
        self.d.path.join(format!(".s.PGSQL.{}.lock", self.port))
    }

    /// A libpq client command with host/port/user/db set (Unix socket).
    fn client(&self, prog: &Path) -> Command {
        let mut c = Command::new(prog);
        for v in [
            "PGPASSWORD",
            "PGSERVICE",
            "PGSSLMODE",
            "PGOPTIONS",
            "PGHOSTADDR",
        ] {
            c.env_remove(v);
        }
        c.env("PGHOST", &self.d.path)
            .env("PGPORT", self.port.to_string())
            .env("PGUSER", "x")
            .env("PGDATABASE", "x")
            .env("PGCONNECT_TIMEOUT", "10")
            .env("PSQLRC", "/dev/null");
        c
    }

    /// `psql -X -q -A -t -v VERBOSITY=verbose ARGS...`
    fn psql(&self, psql: &Path, args: &[&str]) -> Out {
        let mut c = self.client(psql);
        c.args(PSQL_TERSE).arg("-q").args(args);
        run_cmd(&mut c, Duration::from_secs(30))
    }

    /// Fast shutdown, exit 0, nothing left behind.
    fn stop(&mut self) -> Out {
        let o = self.srv.take().unwrap().stop_ok();
        assert_cleaned_up(&self.d.path);
        assert!(!self.socket().exists(), "socket left after shutdown");
        assert!(
            !self.lock_file().exists(),
            "socket lock file left after shutdown"
        );
        o
    }
}

/// psql's single output value (or panics).
fn one_line(o: &Out, what: &str) -> String {
    assert!(o.status.success(), "{what}\n{}", o.describe());
    let lines: Vec<&str> = o.stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one line\n{}",
        o.describe()
    );
    lines[0].to_string()
}

/// Parses an LSN as PostgreSQL prints it (`%X/%X`: upper-case hex, no
/// zero padding); panics on anything else.
fn lsn(s: &str) -> u64 {
    let v = walformat::parse_lsn(s).unwrap_or_else(|_| panic!("not an LSN: {s:?}"));
    assert_eq!(
        s,
        format!("{:X}/{:X}", v >> 32, v & 0xffff_ffff),
        "LSN not in PostgreSQL's %X/%X format"
    );
    v
}

/// A psql process reading commands from a pipe we hold: stdout lines and
/// stderr text arrive through reader threads. Killed on drop.
struct PsqlSession {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl PsqlSession {
    fn spawn(pg: &Pg, psql: &Path) -> PsqlSession {
        let mut c = pg.client(psql);
        c.args(PSQL_TERSE)
            .arg("-q")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn psql");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let e2 = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                e2.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        PsqlSession {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            stderr,
        }
    }

    /// Sends one command line (ignores a broken pipe: psql may be gone).
    fn send(&mut self, line: &str) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = s.write_all(format!("{line}\n").as_bytes());
            let _ = s.flush();
        }
    }

    /// Next stdout line within `t`.
    fn line(&self, t: Duration) -> Option<String> {
        self.lines.recv_timeout(t).ok()
    }

    /// Runs a query whose answer is one line; panics without it.
    fn query(&mut self, sql: &str) -> String {
        self.send(sql);
        self.line(Duration::from_secs(20)).unwrap_or_else(|| {
            panic!(
                "psql session: no answer to {sql:?}; stderr: {}",
                self.stderr()
            )
        })
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until psql exits; its exit code.
    fn wait_exit(&mut self, t: Duration) -> Option<i32> {
        let deadline = Instant::now() + t;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes stdin (psql then terminates the session) and waits.
    fn finish(mut self) {
        self.stdin.take();
        assert!(
            self.wait_exit(Duration::from_secs(20)).is_some(),
            "psql did not exit after EOF on stdin"
        );
    }
}

impl Drop for PsqlSession {
    fn drop(&mut self) {
        self.stdin.take();
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// A raw protocol client

// ---------------------------------------------------------------------------
// WAL inspection

/// pg_waldump record lines of the whole WAL (after the server stopped).
fn wal_lines(pg: &Pg) -> Option<Vec<String>> {
    pg_waldump(&pg.d, pg.d.first_lsn, None)
}

fn field_after<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(key)
        .nth(1)
        .unwrap_or_else(|| panic!("no {key:?} in {line:?}"))
        .trim_start()
        .split(|c: char| c == ',' || c.is_whitespace())
        .next()
        .unwrap()
}

fn rec_xid(line: &str) -> u64 {
    field_after(line, "tx:").parse().unwrap()
}

fn rec_lsn(line: &str) -> u64 {
    walformat::parse_lsn(field_after(line, "lsn:")).expect("pg_waldump LSN")
}

fn is_commit(line: &str) -> bool {
    line.starts_with("rmgr: Transaction") && line.contains("desc: COMMIT")
}

fn is_abort(line: &str) -> bool {
    line.starts_with("rmgr: Transaction") && line.contains("desc: ABORT")
}

// ---------------------------------------------------------------------------
// /proc

fn child_names(pg: &Pg) -> Vec<String> {
    let mut v: Vec<String> = pg.srv().children().into_iter().map(|(_, c)| c).collect();
    v.sort();
    v
}

const BASELINE: [&str; 2] = ["checkpointer", "walwriter"];

fn wait_baseline(pg: &Pg, what: &str) {
    let ok = wait_until(Duration::from_secs(20), || child_names(pg) == BASELINE);
    assert!(
        ok,
        "{what}: children did not return to the baseline {BASELINE:?}: {:?}",
        pg.srv().children()
    );
}

// ===========================================================================
// 1. Every statement through psql -c

#[test]
fn psql_statements_and_errors() {
    let Some((psql, mut pg)) = Pg::with_client("psql", "proto-stmt", &[]) else {
        return;
    };

    // pg_logical_emit_message: text and bytea payloads, LSN format.
    let l1 = lsn(&one_line(
        &pg.psql(
            &psql,
            &["-c", "SELECT pg_logical_emit_message(false, 'p', 'hello')"],
        ),
        "emit text",
    ));
    assert!(
        l1 > pg.d.first_lsn,
        "emit LSN {l1:X} not after init's checkpoint"
    );
    let l2 = lsn(&one_line(
        &pg.psql(
            &psql,
            &[
                "-c",
                "SELECT pg_logical_emit_message(false, 'p', '\\x0102ff'::bytea)",
            ],
        ),
        "emit bytea",
    ));
    assert!(l2 > l1, "LSNs not increasing: {l1:X} then {l2:X}");

    // txid_current increases from session to session.
    let t1: u64 = one_line(&pg.psql(&psql, &["-c", "SELECT txid_current()"]), "txid")
        .parse()
        .unwrap();
    let t2: u64 = one_line(&pg.psql(&psql, &["-c", "SELECT txid_current()"]), "txid")
        .parse()
        .unwrap();
    assert!(t2 > t1 && t1 >= 3, "txids {t1} then {t2}");

    // Synchronous commit: flush LSN covers the committed message.
    let o = pg.psql(
        &psql,
        &[
            "-c",
            "SHOW synchronous_commit",
            "-c",
            "BEGIN",
            "-c",
            "SELECT pg_logical_emit_message(true, 'p', repeat('ab', 100))",
            "-c",
            "COMMIT",
            "-c",
            "SELECT pg_current_wal_flush_lsn()",
            "-c",
            "SELECT pg_current_wal_lsn()",
            "-c",
            "SELECT pg_current_wal_insert_lsn()",
        ],
    );
    assert!(o.status.success(), "sync commit\n{}", o.describe());
    let v: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(v.len(), 5, "{}", o.describe());
    assert_eq!(v[0], "on", "default synchronous_commit");
    let (emitted, flush, write, insert) = (lsn(v[1]), lsn(v[2]), lsn(v[3]), lsn(v[4]));
    assert!(
        flush >= emitted,
        "flush {flush:X} < committed message end {emitted:X}"
    );
    assert!(write >= flush, "write {write:X} < flush {flush:X}");
    assert!(insert >= write, "insert {insert:X} < write {write:X}");

    // SET / SHOW synchronous_commit, repeat().
    let o = pg.psql(
        &psql,
        &[
            "-c",
            "SET synchronous_commit = off",
            "-c",
            "SHOW synchronous_commit",
            "-c",
            "SELECT repeat('xy', 3)",
        ],
    );
    assert_eq!(o.stdout, "off\nxyxyxy\n", "{}", o.describe());

    // SHOW of the server's own settings (port given with --set, the rest
    // defaults); SET of one fixed at start-up is 55P02; the password is
    // never shown (42704, as an unknown name).
    let port = pg.port.to_string();
    let o = pg.psql(
        &psql,
        &[
            "-c",
            "SHOW port",
            "-c",
            "SHOW wal_writer_delay",
            "-c",
            "SET wal_buffers = 16",
            "-c",
            "SHOW wal_buffers",
            "-c",
            "SHOW password",
        ],
    );
    assert_eq!(
        o.stdout,
        format!("{port}\n200ms\n2048\n"),
        "{}",
        o.describe()
    );
    for code in ["ERROR:  55P02:", "ERROR:  42704:"] {
        assert!(o.stderr.contains(code), "no {code}\n{}", o.describe());
    }

    // pg_switch_wal returns a segment boundary; CHECKPOINT works.
    let sw = lsn(&one_line(
        &pg.psql(&psql, &["-c", "SELECT pg_switch_wal()"]),
        "switch",
    ));
    assert_eq!(
        sw % pg.d.seg_size,
        0,
        "pg_switch_wal returned {sw:X}, not a segment boundary"
    );
    let after = lsn(&one_line(
        &pg.psql(&psql, &["-c", "SELECT pg_current_wal_insert_lsn()"]),
        "insert lsn",
    ));
    assert!(
        after >= sw,
        "insert LSN {after:X} before the switch's end {sw:X}"
    );
    let o = pg.psql(&psql, &["-c", "CHECKPOINT"]);
    assert!(
        o.status.success() && o.stdout.is_empty(),
        "CHECKPOINT\n{}",
        o.describe()
    );

    // Errors with SQLSTATEs; the session stays usable after each.
    let o = pg.psql(
        &psql,
        &[
            "-c",
            "SELECT foo()",
            "-c",
            "SELECT 1",
            "-c",
            "this is not sql",
            "-c",
            "SELECT 2",
            "-c",
            "CREATE TABLE t()",
            "-c",
            "SELECT 3",
        ],
    );
    for code in ["ERROR:  42883:", "ERROR:  42601:", "ERROR:  0A000:"] {
        assert!(o.stderr.contains(code), "no {code}\n{}", o.describe());
    }
    assert_eq!(
        o.stdout,
        "1\n2\n3\n",
        "session unusable after errors\n{}",
        o.describe()
    );

    // $n parameters through the extended protocol (psql 15 has no \bind).
    let mut s = handshake(&pg.socket()).expect("handshake");
    let r = exchange(
        &mut s,
        &extended_query(
            "SELECT pg_logical_emit_message($1, $2, $3)",
            &["false", "p", "with params"],
        ),
    );
    let rows = data_rows(&r);
    assert_eq!(rows.len(), 1, "{r:?}");
    let l3 = lsn(rows[0][0].as_deref().unwrap());
    assert!(l3 > sw, "emit after switch at {l3:X}");
    let r = exchange(
        &mut s,
        &extended_query("SELECT repeat($1, $2)", &["ab", "3"]),
    );
    assert_eq!(
        data_rows(&r),
        vec![vec![Some("ababab".to_string())]],
        "{r:?}"
    );
    s.write_all(&msg(b'X', &[])).unwrap();
    assert!(read_to_close(&mut s).is_empty());

    pg.stop();
}

// ===========================================================================
// 2. Transaction blocks through psql -f, checked with pg_waldump

#[test]
fn psql_transaction_blocks_in_wal() {
    let Some((psql, mut pg)) = Pg::with_client("psql", "proto-xact", &[]) else {
        return;
    };
    let script = pg.tmp.join("blocks.sql");
    std::fs::write(
        &script,
        "BEGIN;\n\
         SELECT pg_logical_emit_message(true, 'committed', 'c1');\n\
         SELECT pg_logical_emit_message(true, 'committed', 'c2');\n\
         SELECT pg_logical_emit_message(true, 'committed', 'c3');\n\
         COMMIT;\n\
         BEGIN;\n\
         SELECT pg_logical_emit_message(true, 'rolledback', 'r1');\n\
         SELECT pg_logical_emit_message(true, 'rolledback', 'r2');\n\
         ROLLBACK;\n\
         BEGIN;\n\
         SELECT pg_logical_emit_message(true, 'failed', 'f1');\n\
         SELECT foo();\n\
         SELECT pg_logical_emit_message(true, 'failed', 'f2');\n\
         ROLLBACK;\n\
         SELECT 'still usable';\n",
    )
    .unwrap();
    let o = pg.psql(&psql, &["-f", script.to_str().unwrap()]);
    assert!(o.stderr.contains("ERROR:  42883:"), "{}", o.describe());
    assert!(
        o.stderr.contains("ERROR:  25P02:"),
        "no 25P02 in the failed block\n{}",
        o.describe()
    );
    let out: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(out.len(), 7, "6 LSNs and the last SELECT\n{}", o.describe());
    assert_eq!(out[6], "still usable");
    pg.stop();

    let Some(lines) = wal_lines(&pg) else { return };
    let with_prefix = |p: &str| -> Vec<&String> {
        lines
            .iter()
            .filter(|l| {
                l.starts_with("rmgr: LogicalMessage") && l.contains(&format!("prefix \"{p}\""))
            })
            .collect()
    };
    let check_block = |prefix: &str, n: usize, end_is_commit: bool| {
        let msgs = with_prefix(prefix);
        assert_eq!(
            msgs.len(),
            n,
            "{prefix}: messages in WAL\n{}",
            lines.join("\n")
        );
        let xid = rec_xid(msgs[0]);
        assert_ne!(xid, 0, "{prefix}: transactional message without xid");
        for m in &msgs {
            assert_eq!(
                rec_xid(m),
                xid,
                "{prefix}: messages of one block have different xids"
            );
            assert!(m.contains("desc: MESSAGE transactional"), "{m}");
        }
        let ends: Vec<&String> = lines
            .iter()
            .filter(|l| (is_commit(l) || is_abort(l)) && rec_xid(l) == xid)
            .collect();
        assert_eq!(
            ends.len(),
            1,
            "{prefix}: end records of xid {xid}: {ends:?}"
        );
        assert_eq!(
            is_commit(ends[0]),
            end_is_commit,
            "{prefix}: wrong end record {}",
            ends[0]
        );
        let last_msg = msgs.iter().map(|m| rec_lsn(m)).max().unwrap();
        assert!(
            rec_lsn(ends[0]) > last_msg,
            "{prefix}: end record before the messages"
        );
        xid
    };
    let c = check_block("committed", 3, true);
    let r = check_block("rolledback", 2, false);
    let f = check_block("failed", 1, false);
    assert!(c < r && r < f, "xids not increasing: {c} {r} {f}");
}

// ===========================================================================
// 3. pgbench: no failures, WAL holds exactly what pgbench counted

fn pgbench_processed(o: &Out) -> u64 {
    assert!(o.status.success(), "pgbench failed\n{}", o.describe());
    assert!(
        o.stdout.contains("number of failed transactions: 0 "),
        "pgbench reports failed transactions\n{}",
        o.describe()
    );
    o.stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no processed count\n{}", o.describe()))
}

#[test]
fn pgbench_counts_match_wal() {
    let sets = ["max_connections=80", "fsync=off", "synchronous_commit=off"];
    let Some((pgbench, mut pg)) = Pg::with_client("pgbench", "proto-bench", &sets) else {
        return;
    };
    let script = |name: &str, sql: &str| -> String {
        let p = pg.tmp.join(name);
        std::fs::write(&p, format!("{sql}\n")).unwrap();
        p.to_str().unwrap().to_string()
    };
    // (script, is emit, mode, clients): each size, mode and client count once.
    let runs = [
        (
            "emit16.sql",
            "SELECT pg_logical_emit_message(false, 'test', repeat('x', 16));",
            true,
            "simple",
            1,
        ),
        (
            "emit64.sql",
            "SELECT pg_logical_emit_message(false, 'test', repeat('x', 64));",
            true,
            "prepared",
            4,
        ),
        (
            "emit256.sql",
            "SELECT pg_logical_emit_message(false, 'test', repeat('x', 256));",
            true,
            "simple",
            16,
        ),
        (
            "emit1024.sql",
            "SELECT pg_logical_emit_message(false, 'test', repeat('x', 1024));",
            true,
            "prepared",
            64,
        ),
        ("txid.sql", "SELECT txid_current();", false, "simple", 16),
        ("txid.sql", "SELECT txid_current();", false, "prepared", 4),
    ];
    let (mut messages, mut commits) = (0u64, 0u64);
    for (name, sql, emit, mode, clients) in runs {
        let f = script(name, sql);
        let c = clients.to_string();
        let j = clients.min(2).to_string();
        let mut cmd = pg.client(&pgbench);
        cmd.args(["-n", "-f", &f, "-M", mode, "-c", &c, "-j", &j, "-T", "2"]);
        let o = run_cmd(&mut cmd, Duration::from_secs(60));
        let n = pgbench_processed(&o);
        assert!(
            n > 0,
            "{name} {mode} -c {clients}: nothing processed\n{}",
            o.describe()
        );
        eprintln!("pgbench {name} -M {mode} -c {clients}: {n} transactions");
        if emit {
            messages += n;
        } else {
            commits += n;
        }
    }
    pg.stop();
    let Some(lines) = wal_lines(&pg) else { return };
    let in_wal = lines
        .iter()
        .filter(|l| l.contains("prefix \"test\""))
        .count() as u64;
    let commits_in_wal = lines.iter().filter(|l| is_commit(l)).count() as u64;
    assert_eq!(
        in_wal, messages,
        "LogicalMessage records vs pgbench's processed count"
    );
    assert_eq!(
        commits_in_wal, commits,
        "COMMIT records vs pgbench's txid_current count"
    );
}

// ===========================================================================
// 4. Robustness: malformed input, vanishing clients, 1,000 cycles

/// Connects, sends `bytes`, optionally half-closes, reads until the server
/// closes; returns what it sent.
fn poke(path: &Path, bytes: &[u8], half_close: bool) -> Vec<(u8, Vec<u8>)> {
    let mut s = raw_connect(path);
    let _ = s.write_all(bytes);
    if half_close {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    read_to_close(&mut s)
}

/// Like `poke` after a successful handshake.
fn poke_after_startup(path: &Path, bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut s = handshake_retrying(path);
    let _ = s.write_all(bytes);
    read_to_close(&mut s)
}

fn assert_fatal(what: &str, msgs: &[(u8, Vec<u8>)], code: &str) {
    let f = first_error(msgs).unwrap_or_else(|| panic!("{what}: no ErrorResponse, got {msgs:?}"));
    assert_eq!(
        f.get(&b'S').map(String::as_str),
        Some("FATAL"),
        "{what}: {f:?}"
    );
    assert_eq!(
        f.get(&b'C').map(String::as_str),
        Some(code),
        "{what}: {f:?}"
    );
}

#[test]
fn robustness_malformed_input_and_cycles() {
    let mut pg = Pg::start("proto-robust", &["max_connections=5"]);
    let sock = pg.socket();
    let pm = pg.srv().pid;
    wait_baseline(&pg, "at start");

    // --- malformed start-up packets: closed without a word, or FATAL.
    assert!(
        poke(&sock, &4i32.to_be_bytes(), false).is_empty(),
        "length 4"
    );
    assert!(
        poke(&sock, &(-1i32).to_be_bytes(), false).is_empty(),
        "length -1"
    );
    assert!(
        poke(&sock, &0x7fff_ffffi32.to_be_bytes(), false).is_empty(),
        "length 0x7fffffff"
    );
    assert!(
        poke(&sock, &10_001i32.to_be_bytes(), false).is_empty(),
        "length 10001"
    );
    // Truncated: announces 100 bytes, sends 20, then half-closes.
    let mut t = 100i32.to_be_bytes().to_vec();
    t.extend((3i32 << 16).to_be_bytes());
    t.extend(b"user\0xxxxxxxxxx");
    assert!(poke(&sock, &t, true).is_empty(), "truncated start-up");
    // Vanishes mid-packet (no half-close: the socket is just dropped).
    {
        let mut s = raw_connect(&sock);
        s.write_all(&t).unwrap();
    }
    assert_fatal(
        "protocol 2.0",
        &poke(
            &sock,
            &startup_packet_version(2 << 16, &[("user", "x")]),
            false,
        ),
        "0A000",
    );
    let mut noterm = startup_packet(&[("user", "x")]);
    noterm.pop();
    let l = (noterm.len() as i32).to_be_bytes();
    noterm[..4].copy_from_slice(&l);
    assert_fatal("no terminator", &poke(&sock, &noterm, false), "08P01");
    // SSL and GSS requests are refused with 'N', then start-up proceeds.
    let mut ssl = vec![0, 0, 0, 8];
    ssl.extend(((1234 << 16) | 5679i32).to_be_bytes());
    let mut gss = vec![0, 0, 0, 8];
    gss.extend(((1234 << 16) | 5680i32).to_be_bytes());
    let mut all = ssl.clone();
    all.extend(&gss);
    all.extend(startup_packet(&[("user", "x")]));
    all.extend(msg(b'X', &[]));
    let mut s = raw_connect(&sock);
    s.write_all(&all).unwrap();
    let mut nn = [0u8; 2];
    s.read_exact(&mut nn).unwrap();
    assert_eq!(&nn, b"NN", "SSL and GSS requests not refused with 'N'");
    let r = read_to_close(&mut s);
    assert!(
        r.iter().any(|(t, _)| *t == b'Z'),
        "no ReadyForQuery after SSL/GSS refusals: {r:?}"
    );
    // Cancel requests with wrong keys, also aimed at the auxiliary processes
    // (whose cancel key slot is 0): nothing happens.
    for (pid, _) in pg.srv().children() {
        let mut c = vec![0, 0, 0, 16];
        c.extend(((1234 << 16) | 5678i32).to_be_bytes());
        c.extend(pid.to_be_bytes());
        c.extend(0i32.to_be_bytes());
        assert!(poke(&sock, &c, false).is_empty(), "cancel request answered");
    }

    // --- malformed messages after start-up: FATAL 08P01 and closed.
    let mut huge = vec![b'Q'];
    huge.extend(0x7fff_ffffi32.to_be_bytes());
    assert_fatal(
        "Q length 0x7fffffff",
        &poke_after_startup(&sock, &huge),
        "08P01",
    );
    let mut small = vec![b'Q'];
    small.extend(3i32.to_be_bytes());
    assert_fatal("Q length 3", &poke_after_startup(&sock, &small), "08P01");
    assert_fatal(
        "unknown tag",
        &poke_after_startup(&sock, &msg(b'y', &[])),
        "08P01",
    );
    assert_fatal(
        "Q without NUL",
        &poke_after_startup(&sock, &msg(b'Q', b"SELECT 1")),
        "08P01",
    );
    let mut bind = cstr("");
    bind.extend(cstr(""));
    bind.extend(32767i16.to_be_bytes());
    assert_fatal(
        "Bind with 32767 formats and no data",
        &poke_after_startup(&sock, &msg(b'B', &bind)),
        "08P01",
    );
    let mut parse = cstr("");
    parse.extend(cstr("SELECT $1"));
    parse.extend((-1i16).to_be_bytes());
    let r = poke_after_startup(&sock, &msg(b'P', &parse));
    assert!(
        error_code(&r).is_some(),
        "Parse with -1 parameter types: {r:?}"
    );
    // Vanishes mid-message after start-up.
    {
        let mut s = handshake_retrying(&sock);
        let mut q = vec![b'Q'];
        q.extend(1000i32.to_be_bytes());
        q.extend(b"SELECT pg_");
        s.write_all(&q).unwrap();
    }
    // Vanishes inside an open transaction block.
    {
        let mut s = handshake_retrying(&sock);
        let r = exchange(
            &mut s,
            &msg(
                b'Q',
                &cstr("BEGIN; SELECT pg_logical_emit_message(true, 'p', 'x')"),
            ),
        );
        assert_eq!(r.last().unwrap().1, b"T", "status in a block: {r:?}");
    }
    // Pseudo-random garbage, with and without a valid start-up first.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..100 {
        let n = (rnd() % 64) as usize + 1;
        let junk: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
        if i % 2 == 0 {
            let _ = poke(&sock, &junk, true);
        } else {
            // Half-closed: a partial message would otherwise keep the
            // server waiting for the rest, as it should.
            let mut s = handshake_retrying(&sock);
            let _ = s.write_all(&junk);
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = read_to_close(&mut s);
        }
    }
    assert!(alive(pm), "postmaster died from malformed input");
    wait_baseline(&pg, "after malformed input");

    // --- 1,000 connect/disconnect cycles; RSS measured after a warm-up.
    let cycle = |i: usize| {
        match i % 10 {
            // A full handshake by hand, then Terminate.
            0 => {
                let mut s = handshake_retrying(&sock);
                s.write_all(&msg(b'X', &[])).unwrap();
                assert!(read_to_close(&mut s).is_empty());
            }
            // A start-up packet, then gone.
            1..=5 => {
                let mut s = raw_connect(&sock);
                let _ = s.write_all(&startup_packet(&[("user", "x")]));
            }
            // Connect and close at once.
            _ => drop(raw_connect(&sock)),
        }
    };
    for i in 0..50 {
        cycle(i);
    }
    wait_baseline(&pg, "after warm-up");
    let rss_before = vm_rss_kb(pm);
    let t0 = Instant::now();
    for i in 0..1000 {
        cycle(i);
    }
    eprintln!("1,000 cycles in {:?}", t0.elapsed());
    assert!(alive(pm), "postmaster died during the cycles");
    wait_baseline(&pg, "after 1,000 cycles");
    let rss_after = vm_rss_kb(pm);
    eprintln!("postmaster VmRSS {rss_before} kB -> {rss_after} kB");
    assert!(
        rss_after <= rss_before + 2048,
        "postmaster RSS grew from {rss_before} kB to {rss_after} kB over 1,000 connections"
    );

    // --- no proc slot leaked: max_connections sessions at once still work,
    // one more is refused with 53300.
    let psql = pg_client("psql");
    let mut held = Vec::new();
    let mut sessions = Vec::new();
    for i in 0..5 {
        match &psql {
            Some(p) => {
                let mut s = PsqlSession::spawn(&pg, p);
                assert_eq!(s.query("SELECT repeat('s', 1);"), "s", "psql session {i}");
                sessions.push(s);
            }
            None => held.push(handshake(&sock).unwrap_or_else(|e| panic!("session {i}: {e}"))),
        }
    }
    match handshake(&sock) {
        Err(code) => assert_eq!(code, "53300", "sixth session"),
        Ok(_) => panic!("a sixth session connected with max_connections=5"),
    }
    for s in sessions {
        s.finish();
    }
    drop(held);
    if let Some(p) = &psql {
        let o = pg.psql(p, &["-c", "SELECT repeat('ok', 1)"]);
        assert_eq!(o.stdout, "ok\n", "{}", o.describe());
    }
    wait_baseline(&pg, "at the end");
    let o = pg.stop();
    assert!(!o.stderr.contains("panicked"), "{}", o.describe());
}

// ===========================================================================
// 5. Security: modes, other uids

/// When WALSHM_PROTO_PEER_SOCKET is set (by `security_other_uid_refused`,
/// which runs this test binary as another uid), sends a start-up packet on
/// that socket and prints the answer's SQLSTATE. Otherwise does nothing.
#[test]
fn helper_startup_as_other_uid() {
    let Some(path) = std::env::var_os("WALSHM_PROTO_PEER_SOCKET") else {
        return;
    };
    let r = match UnixStream::connect(&path) {
        Ok(mut s) => {
            s.set_read_timeout(Some(RAW_TIMEOUT)).unwrap();
            let _ = s.write_all(&startup_packet(&[("user", "x")]));
            let msgs = read_to_close(&mut s);
            match error_code(&msgs) {
                Some(c) => format!("SQLSTATE={c}"),
                None => format!("NO-ERROR {msgs:?}"),
            }
        }
        Err(e) => format!("CONNECT-ERROR {e}"),
    };
    println!("PEER-RESULT {r}");
}

/// Opens the data and socket directories to everybody (mode 0755), so that
/// only the socket's own mode stands in the way of another uid.
fn open_dirs_to_all(pg: &Pg) {
    for dir in [pg.d.path.as_path(), pg.tmp.path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// `psql -c "SELECT 1"` on the server's socket as uid nobody (through
/// `runuser`); asserts it did not connect and returns its output.
fn psql_as_nobody(runuser: &Path, psql: &Path, pg: &Pg) -> Out {
    let mut c = Command::new(runuser);
    c.args(["-u", "nobody", "--"]).arg(psql).args([
        "-X",
        "-h",
        pg.d.path.to_str().unwrap(),
        "-p",
        &pg.port.to_string(),
        "-U",
        "x",
        "-d",
        "x",
        "-c",
        "SELECT 1",
    ]);
    let o = run_cmd(&mut c, Duration::from_secs(20));
    assert!(
        !o.status.success(),
        "uid nobody connected\n{}",
        o.describe()
    );
    o
}

#[test]
fn security_socket_modes_and_other_uid_refused() {
    let mut pg = Pg::start("proto-sec", &[]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&pg.socket()), 0o600, "socket mode");
    assert_eq!(mode(&pg.lock_file()), 0o600, "socket lock file mode");
    let lock_pid: i32 = std::fs::read_to_string(pg.lock_file())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(lock_pid, pg.srv().pid, "lock file names the postmaster");

    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let runuser = Path::new("/usr/sbin/runuser");
    if !root || !runuser.exists() {
        eprintln!("SKIPPED (other-uid part): needs root and runuser");
        pg.stop();
        return;
    }
    let psql = pg_client("psql");
    if let Some(p) = &psql {
        // The file mode alone stops uid nobody (the socket dir is opened up
        // so that only the socket's own mode is in the way).
        open_dirs_to_all(&pg);
        let o = psql_as_nobody(runuser, p, &pg);
        assert!(o.stderr.contains("Permission denied"), "{}", o.describe());
    }
    // With the socket opened to everybody by hand, the server's own
    // SO_PEERCRED check refuses uid nobody with FATAL 28000.
    open_dirs_to_all(&pg);
    std::fs::set_permissions(pg.socket(), std::fs::Permissions::from_mode(0o777)).unwrap();
    if let Some(p) = &psql {
        let o = psql_as_nobody(runuser, p, &pg);
        assert!(
            o.stderr
                .contains("FATAL:  Peer authentication failed for user \"x\""),
            "{}",
            o.describe()
        );
    }
    // The SQLSTATE, with this test binary as a raw client running as nobody
    // (libpq does not show SQLSTATEs of connection failures). The helper's
    // test name is its path inside the test binary (without the crate).
    let exe = std::env::current_exe().unwrap();
    let helper = concat!(module_path!(), "::helper_startup_as_other_uid");
    let helper = helper.split_once("::").map_or(helper, |(_, path)| path);
    let o = run_cmd(
        Command::new(&exe)
            .args(["--exact", helper, "--nocapture", "--test-threads=1"])
            .env("WALSHM_PROTO_PEER_SOCKET", pg.socket())
            .uid(65534)
            .gid(65534),
        Duration::from_secs(30),
    );
    if o.stdout.contains("PEER-RESULT") || o.stderr.contains("PEER-RESULT") {
        let all = format!("{}{}", o.stdout, o.stderr);
        assert!(
            all.contains("PEER-RESULT SQLSTATE=28000"),
            "{}",
            o.describe()
        );
    } else {
        eprintln!(
            "NOTE: could not run the test binary as uid 65534 (SQLSTATE not checked)\n{}",
            o.describe()
        );
    }
    // Our own uid still gets in.
    let mut s = handshake(&pg.socket()).expect("own uid refused");
    s.write_all(&msg(b'X', &[])).unwrap();
    pg.stop();
}

// ===========================================================================
// 6. max_connections

#[test]
fn max_connections_refuses_with_53300() {
    let Some((psql, mut pg)) = Pg::with_client("psql", "proto-maxconn", &["max_connections=2"])
    else {
        return;
    };
    let mut a = PsqlSession::spawn(&pg, &psql);
    let mut b = PsqlSession::spawn(&pg, &psql);
    assert_eq!(a.query("SELECT 1;"), "1");
    assert_eq!(b.query("SELECT 2;"), "2");
    let o = pg.psql(&psql, &["-c", "SELECT 3"]);
    o.assert_failed_with(
        "third session connected",
        "FATAL:  sorry, too many clients already",
    );
    match handshake(&pg.socket()) {
        Err(code) => assert_eq!(code, "53300"),
        Ok(_) => panic!("third raw session connected"),
    }
    // The two sessions are unaffected; after one leaves, a new one gets in.
    assert_eq!(a.query("SELECT 4;"), "4");
    b.finish();
    let ok = wait_until(Duration::from_secs(10), || {
        pg.psql(&psql, &["-c", "SELECT 5"]).stdout == "5\n"
    });
    assert!(ok, "no session after one left");
    a.finish();
    pg.stop();
}

// ===========================================================================
// 7. Crash restart with an open session

#[test]
fn crash_of_walwriter_tells_open_session() {
    let Some((psql, mut pg)) = Pg::with_client("psql", "proto-crash", &[]) else {
        return;
    };
    wait_baseline(&pg, "at start");
    let mut sess = PsqlSession::spawn(&pg, &psql);
    assert_eq!(sess.query("SELECT repeat('a', 2);"), "aa");
    let ww = pg.srv().child_pid("walwriter").expect("no walwriter child");
    kill(ww, libc::SIGKILL);
    pg.srv_mut().wait_ready_n(2, TIMEOUT);
    // The backend wrote the crash notice before exiting; psql shows it when
    // it next talks to the server, and finds the connection gone.
    sess.send("SELECT 1;");
    // psql writes the notice and then, on EOF, the lost connection: wait
    // for both, not for a read between its two writes (the outcome is
    // asserted below, on what psql wrote by then).
    wait_until(Duration::from_secs(20), || {
        let err = sess.stderr();
        err.contains("terminating connection because of crash of another server process")
            && (err.contains("server closed the connection unexpectedly")
                || err.contains("connection to server was lost"))
    });
    assert!(
        sess.stderr()
            .contains("terminating connection because of crash of another server process"),
        "no crash message in psql's stderr: {:?}",
        sess.stderr()
    );
    let err = sess.stderr();
    assert!(err.contains("57P02"), "crash notice without 57P02: {err}");
    assert!(
        err.contains("server closed the connection unexpectedly")
            || err.contains("connection to server was lost"),
        "{err}"
    );
    drop(sess);
    let o = pg.psql(
        &psql,
        &["-c", "SELECT pg_logical_emit_message(false, 'p', 'after')"],
    );
    lsn(&one_line(&o, "after recovery"));
    wait_baseline(&pg, "after recovery");
    pg.stop();
}

// ===========================================================================
// 8. TCP with SCRAM-SHA-256

/// A raw SCRAM exchange with a made-up proof: the server's answer.
fn scram_wrong_proof(port: u16) -> Vec<(u8, Vec<u8>)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("tcp connect");
    s.set_read_timeout(Some(RAW_TIMEOUT)).unwrap();
    s.write_all(&startup_packet(&[("user", "x")])).unwrap();
    let (t, b) = read_msg(&mut s).expect("authentication request");
    assert_eq!(t, b'R');
    assert_eq!(&b[..4], &10i32.to_be_bytes(), "AuthenticationSASL");
    assert!(String::from_utf8_lossy(&b).contains("SCRAM-SHA-256"));
    let client_first = "n,,n=,r=rOprNGfwEbeRWgbNEkqO";
    let mut body = cstr("SCRAM-SHA-256");
    body.extend((client_first.len() as i32).to_be_bytes());
    body.extend(client_first.as_bytes());
    s.write_all(&msg(b'p', &body)).unwrap();
    let (t, b) = read_msg(&mut s).expect("SASLContinue");
    assert_eq!(t, b'R');
    assert_eq!(&b[..4], &11i32.to_be_bytes(), "AuthenticationSASLContinue");
    let server_first = String::from_utf8_lossy(&b[4..]).into_owned();
    let nonce = server_first
        .split(',')
        .find_map(|p| p.strip_prefix("r="))
        .expect("server nonce");
    let final_msg = format!("c=biws,r={nonce},p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    s.write_all(&msg(b'p', final_msg.as_bytes())).unwrap();
    let mut v = Vec::new();
    while let Some(m) = read_msg(&mut s) {
        v.push(m);
    }
    v
}

const SECRET_VERIFIER: &str = "password=SCRAM-SHA-256$4096:d2Fsc2htLXRlc3Qtc2FsdA==$6i+jqJCVNcG0X2vrTwAJCaBhNuZvhMWipJRPbkzTLQ0=:6GhRivf92wiqnvsbSW6LOpCtGH8n2l0A4kQRLqtI4no=";

#[test]
fn tcp_scram_password() {
    // The stored verifier of "secret" (a verifier is accepted by --set; a
    // plain password is not).
    let sets = ["listen_addresses=127.0.0.1", SECRET_VERIFIER];
    let Some((psql, mut pg)) = Pg::with_client("psql", "proto-tcp", &sets) else {
        return;
    };
    let tcp = |pw: &str| {
        let mut c = pg.client(&psql);
        c.env("PGHOST", "127.0.0.1")
            .env("PGPASSWORD", pw)
            .env("PGSSLMODE", "disable")
            .args(["-X", "-A", "-t", "-c", "SELECT 42"]);
        run_cmd(&mut c, Duration::from_secs(20))
    };
    let o = tcp("secret");
    assert_eq!(o.stdout, "42\n", "right password\n{}", o.describe());
    let o = tcp("wrong");
    o.assert_failed_with(
        "wrong password accepted",
        "FATAL:  password authentication failed for user \"x\"",
    );
    let r = scram_wrong_proof(pg.port);
    let f = first_error(&r).expect("no ErrorResponse");
    assert_eq!(f.get(&b'C').map(String::as_str), Some("28P01"), "{f:?}");
    assert_eq!(f.get(&b'S').map(String::as_str), Some("FATAL"), "{f:?}");
    // The Unix socket is still trusted for our own uid.
    let o = pg.psql(&psql, &["-c", "SELECT 1"]);
    assert_eq!(o.stdout, "1\n", "{}", o.describe());
    pg.stop();
}
