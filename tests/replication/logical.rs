//! Logical decoding with unmodified clients.
//!
//! - scripts/logical-vs-pg.sh against PostgreSQL 15 in the same run:
//!   pg_recvlogical with test_decoding (two option sets) and psycopg2's
//!   LogicalReplicationConnection with pgoutput print the same lines on
//!   both servers (XIDs and times normalized).
//! - A slot survives kill -9 of the whole server: pg_recvlogical, which
//!   reconnects on its own, gets every acknowledged commit (at least
//!   once), in commit order, and nothing that was rolled back; so does
//!   psycopg2 with pgoutput (scripts/pgoutput-consume.py), started again.
//! - The SQL interface: peek does not move the slot, get does,
//!   upto_nchanges stops at a transaction's end, advance skips, the slot
//!   holds its WAL against checkpoints until it is dropped, and a slot
//!   beyond max_slot_wal_keep_size is invalidated and refuses to decode
//!   with PostgreSQL's error.
//!
//! Bounded: servers and pg_recvlogical run in process groups killed on
//! drop; every wait has a deadline. Without PostgreSQL 15's programs (or
//! psycopg2, for its part) the tests skip loudly unless WALSHM_REQUIRE_PG=1.

use crate::common::wire::{
    data_rows, exchange, handshake_retrying, have_pg_clients, msg, pg_client, PortServer,
};
use crate::common::*;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Python with psycopg2 (WALSHM_PYTHON, else python3).
fn python() -> String {
    std::env::var("WALSHM_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn clients_print_what_postgresql_15_prints() {
    if !have_pg_clients(&["initdb", "postgres", "pg_isready", "psql", "pg_recvlogical"]) {
        return;
    }
    let tmp = TempDir::new("logical-vs-pg");
    let out = tmp.join("out");
    let log = tmp.join("script.log");
    let st = crate::common::script::run_script(
        "logical-vs-pg.sh",
        &["--out", out.to_str().unwrap()],
        &[("PYTHON", &python())],
        tmp.path(),
        Some(&log),
        Duration::from_secs(120),
    );
    let printed = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(st.success(), "logical-vs-pg.sh failed:\n{printed}");
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    let default = read("default.walshm.txt");
    assert!(default.contains("content:committed one"), "{default}");
    assert!(default.contains("BEGIN XID\n"), "{default}");
    assert!(!default.contains("aborted"), "{default}");
    assert_eq!(default, read("default.pg.txt"));
    assert_eq!(read("options.walshm.txt"), read("options.pg.txt"));
    if printed.contains("SKIP pgoutput") {
        eprintln!("pgoutput part skipped: {printed}");
    } else {
        let pgoutput = read("pgoutput.walshm.txt");
        assert!(pgoutput.contains("MESSAGE t other two b"), "{pgoutput}");
        assert_eq!(pgoutput, read("pgoutput.pg.txt"));
    }
    let left = crate::common::script::processes_mentioning(&tmp.path().to_string_lossy());
    for &pid in &left {
        crate::common::script::signal_quietly(pid, libc::SIGKILL);
    }
    assert!(
        left.is_empty(),
        "processes of the script outlived it: {left:?}"
    );
}

/// pg_recvlogical in its own process group, killed on drop.
/// pg_recvlogical streaming slot `slot` into `out` (its log beside it).
fn recvlogical(bin: &Path, socket_dir: &Path, port: u16, slot: &str, out: &Path) -> GroupChild {
    let log = std::fs::File::create(out.with_extension("log")).unwrap();
    GroupChild::spawn(
        Command::new(bin)
            .arg("-h")
            .arg(socket_dir)
            .args(["-p", &port.to_string(), "-d", "postgres", "-S", slot])
            .args(["--start", "-s", "1", "-F", "0", "-f"])
            .arg(out)
            .stderr(log),
        "pg_recvlogical",
    )
}

fn query(s: &mut std::os::unix::net::UnixStream, sql: &str) -> Vec<(u8, Vec<u8>)> {
    exchange(s, &msg(b'Q', &crate::common::wire::cstr(sql)))
}

fn ok(msgs: &[(u8, Vec<u8>)]) -> bool {
    !msgs.iter().any(|(t, _)| *t == b'E')
}

/// Committed messages c<i> and rolled-back ones a<i>, from `from` to `to`;
/// the committed ones acknowledged are added to `acked`.
fn produce(socket: &Path, from: usize, to: usize, acked: &mut Vec<String>) {
    let mut s = handshake_retrying(socket);
    for i in from..to {
        let c = format!("c{i}");
        if ok(&query(
            &mut s,
            &format!("SELECT pg_logical_emit_message(true, 'k', '{c}')"),
        )) {
            acked.push(c);
        }
        if i % 4 == 0 {
            let r = query(
                &mut s,
                &format!("BEGIN; SELECT pg_logical_emit_message(true, 'k', 'a{i}'); ROLLBACK"),
            );
            assert!(ok(&r), "rollback transaction failed: {r:?}");
        }
    }
}

/// Waits up to a minute for `read` (the contents a consumer wrote) to
/// hold every message of `acked`, then asserts that it does (`missing`
/// names the failure) and that no rolled-back message (content `a...`)
/// came; returns what it read.
fn wait_delivered(acked: &[String], read: impl Fn() -> Vec<String>, missing: &str) -> Vec<String> {
    let arrived = wait_until(Duration::from_secs(60), || {
        let got: HashSet<String> = read().into_iter().collect();
        acked.iter().all(|c| got.contains(c))
    });
    let got = read();
    assert!(
        arrived,
        "{missing}: {:?}",
        acked
            .iter()
            .filter(|c| !got.contains(c))
            .take(10)
            .collect::<Vec<_>>()
    );
    assert!(
        got.iter().all(|c| !c.starts_with('a')),
        "a rolled-back message was delivered"
    );
    got
}

fn contents(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split("content:").nth(1).map(str::to_string))
        .collect()
}

#[test]
fn a_slot_resumes_after_kill_9_with_every_acknowledged_commit() {
    let Some(recv) = pg_client("pg_recvlogical") else {
        return;
    };
    let mut ps = PortServer::start("logical-crash", &[]);
    let created = run_cmd(
        Command::new(&recv)
            .arg("-h")
            .arg(&ps.d.path)
            .args(["-p", &ps.port.to_string(), "-d", "postgres", "-S", "crash"])
            .args(["--create-slot", "-P", "test_decoding"]),
        TIMEOUT,
    );
    assert!(created.status.success(), "{}", created.describe());
    let out: PathBuf = ps.tmp.join("recv.txt");
    let _rx = recvlogical(&recv, &ps.d.path, ps.port, "crash", &out);
    let mut acked = Vec::new();
    produce(&ps.socket(), 0, 200, &mut acked);
    ps.kill9();
    ps.restart();
    assert!(wait_until(TIMEOUT, || ps.socket().exists()));
    produce(&ps.socket(), 200, 300, &mut acked);
    let got = wait_delivered(&acked, || contents(&out), "missing after restart");
    let mut firsts = Vec::new();
    for c in &got {
        if !firsts.contains(c) {
            firsts.push(c.clone());
        }
    }
    let numbers: Vec<usize> = firsts.iter().map(|c| c[1..].parse().unwrap()).collect();
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "not in commit order: {numbers:?}"
    );
    assert_eq!(firsts.len(), acked.len());
    ps.stop();
}

fn one_value(s: &mut std::os::unix::net::UnixStream, sql: &str) -> Option<String> {
    let r = query(s, sql);
    assert!(ok(&r), "{sql}: {r:?}");
    data_rows(&r)[0][0].clone()
}

fn error_code(s: &mut std::os::unix::net::UnixStream, sql: &str) -> String {
    crate::common::wire::error_code(&query(s, sql)).unwrap_or_else(|| panic!("{sql} did not fail"))
}

#[test]
fn sql_functions_decode_hold_wal_and_invalidate() {
    let mut ps = PortServer::start("logical-sql", &["max_slot_wal_keep_size=64MB"]);
    let mut s = handshake_retrying(&ps.socket());
    one_value(
        &mut s,
        "SELECT lsn FROM pg_create_logical_replication_slot('q', 'test_decoding')",
    );
    assert_eq!(
        error_code(
            &mut s,
            "SELECT pg_create_logical_replication_slot('q', 'test_decoding')"
        ),
        "42710"
    );
    assert_eq!(
        error_code(
            &mut s,
            "SELECT pg_create_logical_replication_slot('w', 'wal2json')"
        ),
        "58P01"
    );
    for i in 0..3 {
        query(
            &mut s,
            &format!("SELECT pg_logical_emit_message(true, 'p', 'm{i}')"),
        );
    }
    let rows = |s: &mut std::os::unix::net::UnixStream, sql: &str| -> Vec<String> {
        let r = query(s, sql);
        assert!(ok(&r), "{sql}: {r:?}");
        data_rows(&r)
            .into_iter()
            .map(|r| r[2].clone().unwrap())
            .collect()
    };
    let peek = "SELECT * FROM pg_logical_slot_peek_changes('q', NULL, NULL, 'include-xids', '0')";
    let all = rows(&mut s, peek);
    assert_eq!(all.len(), 9, "{all:?}");
    assert_eq!(all[0], "BEGIN");
    assert_eq!(rows(&mut s, peek), all, "peek moved the slot");
    let first = rows(
        &mut s,
        "SELECT * FROM pg_logical_slot_get_changes('q', NULL, 2, 'include-xids', '0')",
    );
    assert_eq!(
        first,
        all[..3],
        "upto_nchanges stops at the transaction's end"
    );
    assert_eq!(rows(&mut s, peek), all[3..], "get moved the slot");
    query(
        &mut s,
        "SELECT pg_logical_emit_message(true, 'p', 'skipped')",
    );
    one_value(
        &mut s,
        "SELECT end_lsn FROM pg_replication_slot_advance('q', pg_current_wal_lsn())",
    );
    assert!(rows(&mut s, peek).is_empty(), "advance did not skip");
    // The slot holds its WAL: its restart segment stays through checkpoints.
    let restart = one_value(
        &mut s,
        "SELECT pg_walfile_name(restart_lsn) FROM pg_replication_slots WHERE slot_name = 'q'",
    )
    .unwrap();
    for _ in 0..3 {
        query(
            &mut s,
            "SELECT pg_logical_emit_message(false, 'p', repeat('x', 1000))",
        );
        query(&mut s, "SELECT pg_switch_wal()");
        query(&mut s, "CHECKPOINT");
    }
    assert!(
        ps.d.path.join("pg_wal").join(&restart).exists(),
        "{restart} removed"
    );
    let status = |s: &mut std::os::unix::net::UnixStream| {
        one_value(
            s,
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'q'",
        )
    };
    assert_eq!(status(&mut s).as_deref(), Some("reserved"));
    // Beyond max_slot_wal_keep_size (64 MB: 4 segments of 16 MB) it is lost.
    for _ in 0..6 {
        query(&mut s, "SELECT pg_switch_wal()");
        query(&mut s, "SELECT pg_logical_emit_message(false, 'p', 'x')");
    }
    query(&mut s, "CHECKPOINT");
    assert_eq!(status(&mut s).as_deref(), Some("lost"));
    assert_eq!(
        error_code(
            &mut s,
            "SELECT * FROM pg_logical_slot_get_changes('q', NULL, NULL)"
        ),
        "55000"
    );
    query(&mut s, "SELECT pg_drop_replication_slot('q')");
    assert_eq!(
        error_code(
            &mut s,
            "SELECT * FROM pg_logical_slot_get_changes('q', NULL, NULL)"
        ),
        "42704"
    );
    drop(s);
    ps.stop();
}

/// The Python with psycopg2, or None after a loud skip (a failure with
/// WALSHM_REQUIRE_PG=1).
fn python_with_psycopg2() -> Option<String> {
    let py = python();
    let ok = Command::new(&py)
        .args(["-c", "import psycopg2"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    if std::env::var("WALSHM_REQUIRE_PG").as_deref() == Ok("1") {
        panic!("{py} cannot import psycopg2 and WALSHM_REQUIRE_PG=1");
    }
    eprintln!("\n********\nSKIPPED: {py} cannot import psycopg2 (set WALSHM_PYTHON)\n********\n");
    None
}

/// scripts/pgoutput-consume.py on slot `slot` of publication `pub`.
fn py_consumer(py: &str, ps: &PortServer, slot: &str, out: &Path) -> GroupChild {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pgoutput-consume.py");
    let dsn = format!(
        "host={} port={} dbname=postgres",
        ps.d.path.display(),
        ps.port
    );
    GroupChild::spawn(
        Command::new(py)
            .arg(script)
            .args([&dsn, slot, "pub"])
            .arg(out)
            .stderr(Stdio::null()),
        "pgoutput-consume.py",
    )
}

#[test]
fn psycopg2_with_pgoutput_resumes_after_kill_9() {
    let Some(py) = python_with_psycopg2() else {
        return;
    };
    let mut ps = PortServer::start("logical-py-crash", &[]);
    let mut s = handshake_retrying(&ps.socket());
    assert!(ok(&query(&mut s, "CREATE PUBLICATION pub FOR ALL TABLES")));
    one_value(
        &mut s,
        "SELECT lsn FROM pg_create_logical_replication_slot('py', 'pgoutput')",
    );
    drop(s);
    let out = ps.tmp.join("py.txt");
    let consumer = py_consumer(&py, &ps, "py", &out);
    let mut acked = Vec::new();
    produce(&ps.socket(), 0, 150, &mut acked);
    ps.kill9();
    drop(consumer);
    ps.restart();
    assert!(wait_until(TIMEOUT, || ps.socket().exists()));
    let _consumer = py_consumer(&py, &ps, "py", &out);
    produce(&ps.socket(), 150, 250, &mut acked);
    let read = || -> Vec<String> {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    wait_delivered(&acked, read, "missing");
    ps.stop();
}
