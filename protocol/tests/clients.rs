//! End-to-end tests: an in-process server (Unix socket `.s.PGSQL.<port>` in a
//! temp dir, and TCP on 127.0.0.1 for SCRAM) runs `startup` + `serve` with a
//! FakeSession per connection, and the real PostgreSQL 15 clients (psql,
//! pgbench) talk to it. A raw-protocol client covers what those clients do
//! not send (binary parameters, termination).
//!
//! Invariants checked: outputs and SQLSTATEs as PostgreSQL would give them,
//! no failed pgbench transactions, and the Session transaction contract
//! (begin/commit/rollback strictly paired) on every connection.
//! Without psql/pgbench the client tests print "SKIPPED" unless
//! WALSHM_REQUIRE_PG=1, which makes them fail instead.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::{serve, startup, ServerParams, Session, SqlError, Startup, Termination, Transport};

/// State shared by all connections of one test server.
#[derive(Default)]
struct Shared {
    next_lsn: AtomicU64,
    next_xid: AtomicU64,
    calls: Mutex<Vec<String>>,
    violations: Mutex<Vec<String>>,
    shutdown: AtomicBool,
}

/// Records calls, hands out increasing LSNs and xids, and checks that
/// begin/commit/rollback are strictly paired.
struct FakeSession {
    shared: Arc<Shared>,
    in_txn: bool,
    xid: Option<u64>,
    sync_commit: bool,
}

impl FakeSession {
    fn new(shared: Arc<Shared>) -> Self {
        FakeSession {
            shared,
            in_txn: false,
            xid: None,
            sync_commit: true,
        }
    }

    fn record(&self, call: String) {
        self.shared.calls.lock().unwrap().push(call);
    }

    /// Notes a broken pairing rule, reported by `assert_contract_kept`.
    fn violation(&self, what: String) {
        self.shared.violations.lock().unwrap().push(what);
    }

    fn require_txn(&self, what: &str) {
        if !self.in_txn {
            self.violation(format!("{what} outside a transaction"));
        }
    }

    fn advance(&self, by: u64) -> u64 {
        0x1_0000_0000 + self.shared.next_lsn.fetch_add(by, Ordering::SeqCst) + by
    }
}

impl Session for FakeSession {
    fn emit_message(
        &mut self,
        transactional: bool,
        prefix: &str,
        payload: &[u8],
        _flush: bool,
    ) -> Result<u64, SqlError> {
        self.require_txn("emit_message");
        self.record(format!(
            "emit({transactional},{prefix},{})",
            String::from_utf8_lossy(payload)
        ));
        Ok(self.advance(64 + payload.len() as u64))
    }
    fn txid_current(&mut self) -> Result<u64, SqlError> {
        self.require_txn("txid_current");
        let xid = *self
            .xid
            .get_or_insert_with(|| 1000 + self.shared.next_xid.fetch_add(1, Ordering::SeqCst));
        Ok(xid)
    }
    fn current_wal_lsn(&mut self) -> u64 {
        self.advance(0)
    }
    fn current_wal_insert_lsn(&mut self) -> u64 {
        self.advance(0)
    }
    fn current_wal_flush_lsn(&mut self) -> u64 {
        self.advance(0)
    }
    fn switch_wal(&mut self) -> Result<u64, SqlError> {
        self.record("switch_wal".into());
        Ok(self.advance(24))
    }
    fn checkpoint(&mut self) -> Result<(), SqlError> {
        self.record("checkpoint".into());
        Ok(())
    }
    fn begin(&mut self) -> Result<(), SqlError> {
        if self.in_txn {
            self.violation("begin inside a transaction".into());
        }
        self.in_txn = true;
        self.record("begin".into());
        Ok(())
    }
    fn commit(&mut self) -> Result<(), SqlError> {
        self.require_txn("commit");
        self.in_txn = false;
        self.xid = None;
        self.record(format!("commit(sync={})", self.sync_commit));
        Ok(())
    }
    fn rollback(&mut self) -> Result<(), SqlError> {
        self.require_txn("rollback");
        self.in_txn = false;
        self.xid = None;
        self.record("rollback".into());
        Ok(())
    }
    fn set_synchronous_commit(&mut self, on: bool) {
        self.sync_commit = on;
    }
    fn synchronous_commit(&self) -> bool {
        self.sync_commit
    }
    fn termination(&self) -> Option<Termination> {
        self.shared
            .shutdown
            .load(Ordering::SeqCst)
            .then_some(Termination::FastShutdown)
    }
    fn memory_limit(&self) -> usize {
        64 << 20
    }
}

impl Drop for FakeSession {
    fn drop(&mut self) {
        if self.in_txn {
            self.violation("connection ended inside a transaction".into());
        }
    }
}

fn handle<S: Read + Write>(
    mut stream: S,
    transport: Transport,
    password: Option<String>,
    shared: Arc<Shared>,
) {
    let params = ServerParams::new(4242, 777, password);
    if let Ok(Startup::Ready(info)) = startup(&mut stream, &transport, &params) {
        let mut session = FakeSession::new(shared);
        if let Some(on) = info.synchronous_commit {
            session.set_synchronous_commit(on);
        }
        let _ = serve(&mut stream, &mut session);
    }
}

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

struct UnixServer {
    dir: PathBuf,
    port: u16,
    shared: Arc<Shared>,
}

impl UnixServer {
    fn start() -> UnixServer {
        let port =
            20000 + (std::process::id() % 20000) as u16 + NEXT_PORT.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("walshm-proto-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let uid = std::fs::metadata(&dir).unwrap().uid();
        let listener = UnixListener::bind(dir.join(format!(".s.PGSQL.{port}"))).unwrap();
        let shared = Arc::new(Shared::default());
        let accept_shared = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = accept_shared.clone();
                let transport = Transport::Unix {
                    peer_uid: Some(uid),
                    server_uid: uid,
                };
                std::thread::spawn(move || handle(stream, transport, None, shared));
            }
        });
        UnixServer { dir, port, shared }
    }

    fn calls(&self) -> Vec<String> {
        self.shared.calls.lock().unwrap().clone()
    }

    fn assert_contract_kept(&self) {
        // Connections end asynchronously after the client exits.
        std::thread::sleep(Duration::from_millis(100));
        let v = self.shared.violations.lock().unwrap();
        assert!(v.is_empty(), "transaction contract violated: {v:?}");
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pg_bin(name: &str) -> Option<PathBuf> {
    let p = Path::new("/usr/lib/postgresql/15/bin").join(name);
    if p.exists() {
        return Some(p);
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// The client binaries, or None after announcing the skip (panics if WALSHM_REQUIRE_PG=1).
fn clients() -> Option<(PathBuf, PathBuf)> {
    match (pg_bin("psql"), pg_bin("pgbench")) {
        (Some(psql), Some(pgbench)) => Some((psql, pgbench)),
        _ if std::env::var("WALSHM_REQUIRE_PG").as_deref() == Ok("1") => {
            panic!("psql/pgbench not found and WALSHM_REQUIRE_PG=1")
        }
        _ => {
            eprintln!("\n*** SKIPPED: psql/pgbench not found ***\n");
            None
        }
    }
}

/// psql and a server (`UnixServer::start`); None (the test skipped)
/// without PostgreSQL's clients.
fn psql_and_server() -> Option<(PathBuf, UnixServer)> {
    let (psql, _) = clients()?;
    Some((psql, UnixServer::start()))
}

fn client_command(bin: &Path, host: &str, port: u16) -> Command {
    let mut c = Command::new(bin);
    c.args([
        "-h",
        host,
        "-p",
        &port.to_string(),
        "-U",
        "tester",
        "-d",
        "walshm",
    ])
    .env("PGCONNECT_TIMEOUT", "10")
    .env("PGPASSFILE", "/nonexistent")
    .env_remove("PGPASSWORD")
    .env_remove("PGOPTIONS")
    .env_remove("PGSERVICE");
    c
}

fn psql(server: &UnixServer, psql: &Path, args: &[&str]) -> Output {
    let mut c = client_command(psql, server.dir.to_str().unwrap(), server.port);
    c.args(["-X", "-A", "-t"]).args(args);
    c.output().unwrap()
}

/// psql running each of `commands` (`-c`); it must succeed. Its stdout.
fn psql_commands(server: &UnixServer, psql_bin: &Path, commands: &[&str]) -> String {
    let args: Vec<&str> = commands.iter().flat_map(|c| ["-c", c]).collect();
    let o = psql(server, psql_bin, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn is_lsn(s: &str) -> bool {
    let Some((hi, lo)) = s.split_once('/') else {
        return false;
    };
    [hi, lo].iter().all(|p| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
    })
}

#[test]
fn psql_runs_the_walshm_functions() {
    let Some((psql_bin, server)) = psql_and_server() else {
        return;
    };
    let sql = "SELECT pg_logical_emit_message(false,'p','hello')";
    let out = psql_commands(&server, &psql_bin, &[sql]);
    assert!(is_lsn(out.trim()), "not an LSN: {out:?}");
    assert!(
        server.calls().contains(&"emit(false,p,hello)".to_string()),
        "{:?}",
        server.calls()
    );

    let out = psql_commands(
        &server,
        &psql_bin,
        &[
            "select txid_current();",
            "SELECT pg_current_wal_lsn()",
            "SELECT pg_current_wal_insert_lsn() /* c */",
            "SELECT pg_current_wal_flush_lsn();;",
            "SELECT pg_switch_wal()",
            "CHECKPOINT",
            "SELECT pg_logical_emit_message(true, 'big', repeat('ab', 3))",
            "SELECT pg_logical_emit_message(false, 'b', '\\x4142'::bytea)",
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 8, "{out}");
    assert!(lines[0].parse::<u64>().is_ok(), "{out}");
    assert!(lines[1..5].iter().all(|l| is_lsn(l)), "{out}");
    assert_eq!(lines[5], "CHECKPOINT");
    assert!(is_lsn(lines[6]) && is_lsn(lines[7]), "{out}");
    let calls = server.calls();
    for expected in [
        "switch_wal",
        "checkpoint",
        "emit(true,big,ababab)",
        "emit(false,b,AB)",
    ] {
        assert!(
            calls.contains(&expected.to_string()),
            "{expected} missing in {calls:?}"
        );
    }

    let out = psql_commands(
        &server,
        &psql_bin,
        &[
            "SHOW synchronous_commit",
            "SET synchronous_commit TO off",
            "SHOW synchronous_commit",
            "set application_name = 'x'",
            "SELECT 1, version()",
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..4], &["on", "SET", "off", "SET"], "{out}");
    assert!(lines[4].starts_with("1|PostgreSQL 15"), "{out}");
    server.assert_contract_kept();
}

#[test]
fn psql_reports_errors_with_sqlstates_and_stays_usable() {
    let Some((psql_bin, server)) = psql_and_server() else {
        return;
    };
    for (sql, expected) in [
        (
            "SELECT foo()",
            "ERROR:  42883: function foo() does not exist",
        ),
        (
            "CREATE TABLE t (a int)",
            "ERROR:  0A000: CREATE TABLE is not supported by walshm",
        ),
        (
            "SELEC 1",
            "ERROR:  42601: syntax error at or near \"SELEC\"",
        ),
        (
            "SELECT repeat('x', 'y')",
            "ERROR:  22P02: invalid input syntax for type integer: \"y\"",
        ),
        (
            "SHOW nonsense",
            "ERROR:  42704: unrecognized configuration parameter \"nonsense\"",
        ),
        (
            "SET synchronous_commit = maybe",
            "ERROR:  22023: invalid value for parameter \"synchronous_commit\"",
        ),
    ] {
        let o = psql(
            &server,
            &psql_bin,
            &["-v", "VERBOSITY=verbose", "-c", sql, "-c", "SELECT 42"],
        );
        assert!(stderr(&o).contains(expected), "{sql}: {}", stderr(&o));
        assert_eq!(
            stdout(&o).trim(),
            "42",
            "{sql}: session not usable after the error"
        );
    }
    server.assert_contract_kept();
}

#[test]
fn psql_transaction_blocks_from_a_file() {
    let Some((psql_bin, server)) = psql_and_server() else {
        return;
    };
    let script = server.dir.join("tx.sql");
    std::fs::write(
        &script,
        "BEGIN;\n\
         SELECT pg_logical_emit_message(true, 'tx', 'a');\n\
         SELECT txid_current() = txid_current();\n\
         COMMIT;\n\
         START TRANSACTION ISOLATION LEVEL READ COMMITTED;\n\
         SELECT pg_logical_emit_message(true, 'tx', 'doomed');\n\
         SELECT foo();\n\
         SELECT 1;\n\
         ROLLBACK;\n\
         SELECT 'after';\n\
         BEGIN; SELECT 'multi'; COMMIT;\n",
    )
    .unwrap();
    let o = psql(
        &server,
        &psql_bin,
        &["-v", "VERBOSITY=verbose", "-f", script.to_str().unwrap()],
    );
    let (out, err) = (stdout(&o), stderr(&o));
    // `txid_current() = txid_current()`: one XID per transaction.
    assert!(out.lines().any(|l| l.trim() == "t"), "{out}");
    assert!(
        err.contains("42883: function foo() does not exist"),
        "{err}"
    );
    assert!(
        err.contains("25P02: current transaction is aborted, commands ignored until end of transaction block"),
        "{err}"
    );
    assert!(out.contains("after") && out.contains("multi"), "{out}");
    let calls = server.calls();
    let first_emit = calls
        .iter()
        .position(|c| c == "emit(true,tx,a)")
        .expect("first emit");
    assert_eq!(calls[first_emit - 1], "begin", "{calls:?}");
    let doomed = calls
        .iter()
        .position(|c| c == "emit(true,tx,doomed)")
        .expect("second emit");
    assert_eq!(calls[doomed - 1], "begin", "{calls:?}");
    assert_eq!(
        calls[doomed + 1],
        "rollback",
        "the failed block is rolled back at the error: {calls:?}"
    );
    server.assert_contract_kept();
}

fn run_pgbench(pgbench: &Path, server: &UnixServer, mode: &str) -> String {
    let emit = server.dir.join("emit.sql");
    let txid = server.dir.join("txid.sql");
    std::fs::write(
        &emit,
        "SELECT pg_logical_emit_message(false, 'test', repeat('x', 100));\n",
    )
    .unwrap();
    std::fs::write(&txid, "SELECT txid_current();\n").unwrap();
    let mut c = client_command(pgbench, server.dir.to_str().unwrap(), server.port);
    c.args(["-n", "-T", "2", "-c", "4", "-j", "2", "-M", mode])
        .args(["-f", emit.to_str().unwrap(), "-f", txid.to_str().unwrap()]);
    let o = c.output().unwrap();
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        o.status.success(),
        "pgbench -M {mode} failed:\n{out}\n{err}"
    );
    assert!(
        out.contains("number of failed transactions: 0"),
        "pgbench -M {mode}:\n{out}\n{err}"
    );
    let processed = out
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|n| n.split('/').next()?.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(
        processed > 100,
        "pgbench -M {mode} processed {processed}:\n{out}"
    );
    let tps = out
        .lines()
        .find(|l| l.starts_with("tps ="))
        .unwrap_or("no tps line")
        .to_string();
    eprintln!("pgbench -M {mode}: {tps}");
    tps
}

#[test]
fn pgbench_simple_extended_prepared() {
    let Some((_, pgbench)) = clients() else {
        return;
    };
    let server = UnixServer::start();
    for mode in ["simple", "extended", "prepared"] {
        run_pgbench(&pgbench, &server, mode);
    }
    let calls = server.calls();
    assert!(
        calls.iter().any(|c| c.starts_with("emit(false,test,xxxx")),
        "no emit call recorded"
    );
    server.assert_contract_kept();
}

struct TcpServer {
    port: u16,
}

impl TcpServer {
    fn start(password: &str) -> TcpServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let password = protocol::verifier_for_password(password).unwrap();
        let shared = Arc::new(Shared::default());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (shared, password) = (shared.clone(), password.clone());
                std::thread::spawn(move || handle(stream, Transport::Tcp, Some(password), shared));
            }
        });
        TcpServer { port }
    }
}

#[test]
fn scram_over_tcp() {
    let Some((psql_bin, _)) = clients() else {
        return;
    };
    let server = TcpServer::start("s3cret pass");
    let run = |password: &str| {
        let mut c = client_command(&psql_bin, "127.0.0.1", server.port);
        c.env("PGPASSWORD", password)
            .env("PGSSLMODE", "prefer")
            .args(["-X", "-A", "-t", "-c", "SELECT txid_current()"]);
        c.output().unwrap()
    };
    let ok = run("s3cret pass");
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(stdout(&ok).trim().parse::<u64>().is_ok(), "{}", stdout(&ok));
    let bad = run("wrong");
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("password authentication failed for user \"tester\""),
        "{}",
        stderr(&bad)
    );
    let mut c = client_command(&psql_bin, "127.0.0.1", server.port);
    let none = c.args(["-X", "-w", "-c", "SELECT 1"]).output().unwrap();
    assert!(!none.status.success(), "connected without a password");
}

// ---- raw protocol client: what psql and pgbench never send ----

struct Raw {
    s: UnixStream,
}

impl Raw {
    fn connect(server: &UnixServer) -> Raw {
        let s = UnixStream::connect(server.dir.join(format!(".s.PGSQL.{}", server.port))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut raw = Raw { s };
        let mut body = (3i32 << 16).to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0raw\0\0");
        let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        packet.extend(body);
        raw.s.write_all(&packet).unwrap();
        raw.until_ready();
        raw
    }

    fn send(&mut self, tag: u8, body: &[u8]) {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        self.s.write_all(&m).unwrap();
    }

    /// Next message, or None at EOF.
    fn recv(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut h = [0u8; 5];
        self.s.read_exact(&mut h).ok()?;
        let len = i32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize - 4;
        let mut body = vec![0; len];
        self.s.read_exact(&mut body).ok()?;
        Some((h[0], body))
    }

    /// Messages up to and including ReadyForQuery (or EOF).
    /// Execute (the unnamed portal, all rows) and Sync; the replies up to
    /// ReadyForQuery.
    fn execute_and_sync(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut execute = cstr("");
        execute.extend(0i32.to_be_bytes());
        self.send(b'E', &execute);
        self.send(b'S', &[]);
        self.until_ready()
    }

    fn until_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(m) = self.recv() {
            let done = m.0 == b'Z';
            v.push(m);
            if done {
                break;
            }
        }
        v
    }
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

#[test]
fn extended_protocol_with_binary_parameters_and_results() {
    let server = UnixServer::start();
    let mut raw = Raw::connect(&server);
    // Parse with declared types (bool, text, bytea), Bind binary params, binary result.
    let mut parse = cstr("s1");
    parse.extend(cstr("SELECT pg_logical_emit_message($1, $2, $3)"));
    parse.extend(3i16.to_be_bytes());
    for oid in [16i32, 25, 17] {
        parse.extend(oid.to_be_bytes());
    }
    raw.send(b'P', &parse);
    let mut bind = cstr("");
    bind.extend(cstr("s1"));
    bind.extend(1i16.to_be_bytes());
    bind.extend(1i16.to_be_bytes()); // all binary
    bind.extend(3i16.to_be_bytes());
    for p in [&[1u8][..], b"pre", b"\x00\x01"] {
        bind.extend((p.len() as i32).to_be_bytes());
        bind.extend_from_slice(p);
    }
    bind.extend(1i16.to_be_bytes());
    bind.extend(1i16.to_be_bytes()); // binary result
    raw.send(b'B', &bind);
    let mut describe = vec![b'P'];
    describe.extend(cstr(""));
    raw.send(b'D', &describe);
    let msgs = raw.execute_and_sync();
    let tags: Vec<u8> = msgs.iter().map(|m| m.0).collect();
    assert_eq!(tags, b"12TDCZ", "{msgs:?}");
    let row_desc = &msgs[2].1;
    assert!(
        row_desc.windows(4).any(|w| w == 3220i32.to_be_bytes()),
        "pg_lsn OID missing"
    );
    let data = &msgs[3].1;
    assert_eq!(
        &data[..6],
        &[0, 1, 0, 0, 0, 8],
        "one 8-byte binary pg_lsn column"
    );
    assert_eq!(msgs[5].1, b"I");
    assert!(
        server
            .calls()
            .contains(&"emit(true,pre,\u{0}\u{1})".to_string()),
        "{:?}",
        server.calls()
    );

    // Errors skip to Sync; a bad Bind does not kill the connection.
    let mut bad_bind = cstr("");
    bad_bind.extend(cstr("nosuch"));
    bad_bind.extend([0, 0, 0, 0, 0, 0]);
    raw.send(b'B', &bad_bind);
    let msgs = raw.execute_and_sync();
    let tags: Vec<u8> = msgs.iter().map(|m| m.0).collect();
    assert_eq!(tags, b"EZ", "{msgs:?}");
    assert!(String::from_utf8_lossy(&msgs[0].1).contains("C26000\0"));

    // Fast shutdown between statements: FATAL 57P01 then EOF.
    server.shared.shutdown.store(true, Ordering::SeqCst);
    raw.send(b'Q', &cstr("SELECT 1"));
    let msgs = raw.until_ready();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let text = String::from_utf8_lossy(&msgs[0].1);
    assert!(
        msgs[0].0 == b'E' && text.contains("C57P01\0") && text.contains("administrator command"),
        "{text}"
    );
    server.assert_contract_kept();
}

#[test]
fn malformed_message_is_a_protocol_violation() {
    let server = UnixServer::start();
    let mut raw = Raw::connect(&server);
    raw.send(b'B', b"\0"); // truncated Bind
    let msgs = raw.until_ready();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(String::from_utf8_lossy(&msgs[0].1).contains("C08P01\0"));
    assert!(raw.recv().is_none(), "connection should be closed");

    let mut raw = Raw::connect(&server);
    raw.send(
        b'Q',
        &cstr("BEGIN; SELECT pg_logical_emit_message(true, 'a', 'b')"),
    );
    let msgs = raw.until_ready();
    assert_eq!(msgs.last().unwrap().1, b"T");
    raw.send(b'?', b""); // unknown message type inside a block
    let msgs = raw.until_ready();
    assert!(String::from_utf8_lossy(&msgs[0].1).contains("C08P01\0"));
    server.assert_contract_kept();
}

/// The SQLSTATE of an ErrorResponse body, if it is one.
fn sqlstate_of(m: &(u8, Vec<u8>)) -> Option<String> {
    if m.0 != b'E' {
        return None;
    }
    let text = String::from_utf8_lossy(&m.1);
    let code = text.split('\0').find_map(|f| f.strip_prefix('C'))?;
    Some(code.to_string())
}

/// A Query message's reply as (tag, SQLSTATE or DataRow text).
fn query_reply(raw: &mut Raw, sql: &str) -> Vec<(u8, String)> {
    raw.send(b'Q', &cstr(sql));
    let msgs = raw.until_ready();
    msgs.iter()
        .map(|m| match (m.0, sqlstate_of(m)) {
            (_, Some(code)) => (m.0, code),
            (b'E', None) => (m.0, "no SQLSTATE".into()),
            (tag, None) => (tag, String::from_utf8_lossy(&m.1).into_owned()),
        })
        .collect()
}

/// An unnamed Parse (with declared type OIDs), Bind of text parameters,
/// Execute and Sync; the reply as in `query_reply`.
fn extended_reply(
    raw: &mut Raw,
    sql: &str,
    declared: &[i32],
    params: &[&str],
) -> Vec<(u8, String)> {
    let mut parse = cstr("");
    parse.extend(cstr(sql));
    parse.extend((declared.len() as i16).to_be_bytes());
    for oid in declared {
        parse.extend(oid.to_be_bytes());
    }
    raw.send(b'P', &parse);
    let mut bind = cstr("");
    bind.extend(cstr(""));
    bind.extend(0i16.to_be_bytes());
    bind.extend((params.len() as i16).to_be_bytes());
    for p in params {
        bind.extend((p.len() as i32).to_be_bytes());
        bind.extend_from_slice(p.as_bytes());
    }
    bind.extend(0i16.to_be_bytes());
    raw.send(b'B', &bind);
    let msgs = raw.execute_and_sync();
    msgs.iter()
        .map(|m| match sqlstate_of(m) {
            Some(code) => (m.0, code),
            None => (m.0, String::from_utf8_lossy(&m.1).into_owned()),
        })
        .collect()
}

/// The session's cache of analyzed texts (plancache.rs) must not change a
/// reply: every text is sent several times and must answer the same each
/// time, errors with the same SQLSTATE at the same point of the message;
/// what a statement reads when it runs (a setting, the block state) is
/// read again on every run.
#[test]
fn repeated_texts_answer_as_the_first_time() {
    let server = UnixServer::start();
    let mut raw = Raw::connect(&server);
    let cases: &[(&str, &[&str])] = &[
        ("SELECT 1 AS a, 'x' AS b", &[]),
        ("SELEC 1", &["42601"]),
        ("SELECT nosuch(1)", &["42883"]),
        ("SELECT 1; SELECT nosuch(1); SELECT 2", &["42883"]),
        ("SELECT 1/0", &["22012"]),
        ("SELECT 1; SELECT 1/0; SELECT 2", &["22012"]),
        ("", &[]),
    ];
    for (sql, codes) in cases {
        let first = query_reply(&mut raw, sql);
        let got: Vec<&str> = first
            .iter()
            .filter(|m| m.0 == b'E')
            .map(|m| m.1.as_str())
            .collect();
        assert_eq!(got, *codes, "{sql}: {first:?}");
        for _ in 0..3 {
            assert_eq!(query_reply(&mut raw, sql), first, "{sql} repeated");
        }
    }
    // SHOW is analyzed once and run each time: it sees a SET in between.
    let show = "SHOW synchronous_commit";
    let shown = |r: &[(u8, String)]| r.iter().find(|m| m.0 == b'D').map(|m| m.1.clone());
    let on = shown(&query_reply(&mut raw, show)).unwrap();
    assert!(on.ends_with("on"), "{on:?}");
    query_reply(&mut raw, "SET synchronous_commit = off");
    let off = shown(&query_reply(&mut raw, show)).unwrap();
    assert!(off.ends_with("off"), "{off:?}");
    // In a failed block a cached text is refused (25P02) until ROLLBACK.
    query_reply(&mut raw, "BEGIN");
    let failed = query_reply(&mut raw, "SELECT nosuch(1)");
    assert_eq!(failed.last().unwrap().1, "E", "{failed:?}");
    let refused = query_reply(&mut raw, "SELECT 1 AS a, 'x' AS b");
    assert_eq!(refused[0], (b'E', "25P02".to_string()), "{refused:?}");
    let select = "SELECT $1::int + 1";
    let parse_refused = extended_reply(&mut raw, select, &[], &["41"]);
    assert_eq!(parse_refused[0], (b'E', "25P02".to_string()));
    query_reply(&mut raw, "ROLLBACK");
    // Parse: the same text with other declared types is analyzed anew.
    let first = extended_reply(&mut raw, select, &[], &["41"]);
    assert_eq!(first.iter().map(|m| m.0).collect::<Vec<_>>(), b"12DCZ");
    for _ in 0..2 {
        assert_eq!(extended_reply(&mut raw, select, &[], &["41"]), first);
    }
    let as_text = extended_reply(&mut raw, "SELECT $1", &[25], &["41"]);
    let as_int = extended_reply(&mut raw, "SELECT $1", &[23], &["x"]);
    assert_eq!(as_text[2].0, b'D', "{as_text:?}");
    assert_eq!(as_int[1], (b'E', "22P02".to_string()), "{as_int:?}");
    assert_eq!(
        extended_reply(&mut raw, "SELECT $1", &[25], &["41"]),
        as_text
    );
    let inferred = extended_reply(&mut raw, "SELECT $1", &[], &["41"]);
    assert_eq!(
        extended_reply(&mut raw, "SELECT $1", &[], &["41"]),
        inferred
    );
    server.assert_contract_kept();
}
