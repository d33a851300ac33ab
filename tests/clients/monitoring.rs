//! The monitoring queries a DBA pastes, run with real psql (`-X -A -t`)
//! against a running server under a workload, with the rows expected:
//! pg_stat_activity grouped by wait event, the other processes, pg_stat_wal,
//! pg_size_pretty of the WAL position, pg_settings filtered and ordered,
//! SHOW ALL, and an unknown relation (42P01 with PostgreSQL's position,
//! checked on the wire).
//!
//! Every check reads structured output (rows, exit codes, SQLSTATEs and
//! ErrorResponse fields), never the wording of a log line. Tests skip
//! loudly without psql unless WALSHM_REQUIRE_PG=1. Each server is stopped
//! by `stop_ok` (or killed with its process group by Server's Drop on a
//! failed assertion), so no process or shared memory is left behind.

use crate::common::wire::*;
use crate::common::*;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A server with two emit:16 workers on a free port.
fn start_under_load(tag: &str) -> (TempDir, DataDir, Server, u16) {
    let tmp = TempDir::new(tag);
    let d = init(&tmp.join("data"), &[]);
    let args = unsynced_args("2", "emit:16");
    let (srv, port) = start_on_free_port(&d, tmp.path(), &[], &args, &[]);
    (tmp, d, srv, port)
}

/// `psql -X -A -t -v ON_ERROR_STOP=1 -c SQL` over the Unix socket.
fn psql(psql: &Path, d: &DataDir, port: u16, sql: &str) -> Out {
    psql_with_options(psql, d, port, None, sql)
}

/// [`psql`] with PGOPTIONS set to `options` (unset if None).
fn psql_with_options(psql: &Path, d: &DataDir, port: u16, options: Option<&str>, sql: &str) -> Out {
    let mut c = Command::new(psql);
    for v in ["PGPASSWORD", "PGSERVICE", "PGOPTIONS", "PGHOSTADDR"] {
        c.env_remove(v);
    }
    if let Some(o) = options {
        c.env("PGOPTIONS", o);
    }
    c.env("PGHOST", &d.path)
        .env("PGPORT", port.to_string())
        .env("PGUSER", "x")
        .env("PGDATABASE", "x")
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PSQLRC", "/dev/null")
        .args(PSQL_TERSE)
        .args(["-q", "-v", "ON_ERROR_STOP=1", "-c", sql]);
    run_cmd(&mut c, Duration::from_secs(20))
}

/// The rows psql printed (one per line, columns split at `|`).
fn rows(o: &Out) -> Vec<Vec<String>> {
    assert!(o.status.success(), "psql failed\n{}", o.describe());
    o.stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

#[test]
fn monitoring_queries_answer_under_load() {
    let Some(bin) = pg_client("psql") else { return };
    let (_tmp, d, srv, port) = start_under_load("monitoring");
    let q = |sql: &str| rows(&psql(&bin, &d, port, sql));
    // A previous psql's backend may still be leaving: retry until `ok`.
    let q_until = |sql: &str, ok: &dyn Fn(&Vec<Vec<String>>) -> bool| {
        let mut last = Vec::new();
        let done = wait_until(Duration::from_secs(10), || {
            last = q(sql);
            ok(&last)
        });
        assert!(done, "{sql}: {last:?}");
        last
    };

    // Every process, grouped by wait event: 2 workers, walwriter,
    // checkpointer and this backend; counts in descending order.
    let total = |r: &Vec<Vec<String>>| r.iter().map(|r| r[2].parse::<u64>().unwrap()).sum::<u64>();
    let by_event = q_until(
        "SELECT wait_event_type, wait_event, count(*) FROM pg_stat_activity GROUP BY 1, 2 ORDER BY 3 DESC",
        &|r| total(r) == 5,
    );
    let counts: Vec<u64> = by_event.iter().map(|r| r[2].parse().unwrap()).collect();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]), "{by_event:?}");

    // The other processes: the server's children, none of them this backend.
    let mine = q("SELECT pg_backend_pid()")[0][0].clone();
    let others = q_until(
        "SELECT pid, backend_type, state, query FROM pg_stat_activity WHERE pid <> pg_backend_pid() ORDER BY backend_type, pid",
        &|r| r.len() == 4,
    );
    let types: Vec<&str> = others.iter().map(|r| r[1].as_str()).collect();
    assert_eq!(
        types,
        [
            "checkpointer",
            "walshm worker",
            "walshm worker",
            "walwriter"
        ]
    );
    let children: Vec<String> = srv.children().iter().map(|(p, _)| p.to_string()).collect();
    for r in &others {
        assert_ne!(r[0], mine);
        assert!(
            children.contains(&r[0]),
            "{} is not a child: {children:?}",
            r[0]
        );
    }
    assert!(others
        .iter()
        .filter(|r| r[1] == "walshm worker")
        .all(|r| r[2] == "active"));
    // This backend itself, seen from inside: active, running this very query.
    let me =
        q("SELECT state, backend_type, query FROM pg_stat_activity WHERE pid = pg_backend_pid()");
    assert_eq!(
        me,
        vec![vec![
            "active".to_string(),
            "client backend".to_string(),
            "SELECT state, backend_type, query FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                .to_string()
        ]]
    );

    // pg_stat_wal: the workload's records, counted since the server started.
    let wal = q("SELECT * FROM pg_stat_wal");
    assert_eq!(wal.len(), 1);
    assert_eq!(wal[0].len(), 9, "{wal:?}");
    assert!(wal[0][0].parse::<u64>().unwrap() > 0, "wal_records {wal:?}");
    assert!(wal[0][2].parse::<u64>().unwrap() > 0, "wal_bytes {wal:?}");
    assert!(wal[0][8].ends_with("+00"), "stats_reset {wal:?}");
    q("SELECT pg_stat_reset_shared('wal')");
    let after = q("SELECT wal_records, stats_reset FROM pg_stat_wal");
    assert!(
        after[0][1] > wal[0][8],
        "stats_reset moves forward: {after:?} {wal:?}"
    );

    // pg_size_pretty of the WAL position, and its exact rounding.
    let size = q("SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'))");
    let (n, unit) = size[0][0].split_once(' ').unwrap();
    assert!(
        n.parse::<u64>().unwrap() > 0 && ["bytes", "kB", "MB", "GB"].contains(&unit),
        "{size:?}"
    );
    assert_eq!(
        q("SELECT pg_size_pretty(pg_wal_lsn_diff('0/A00000', '0/0')), '0/2000000'::pg_lsn - '0/1000000', pg_walfile_name('0/16B6C50')"),
        vec![vec!["10 MB".to_string(), "16777216".to_string(), "000000010000000000000001".to_string()]]
    );

    // pg_settings filtered with LIKE and ordered by name.
    let wal_settings =
        q("SELECT name, setting FROM pg_settings WHERE name LIKE 'wal%' ORDER BY name");
    let names: Vec<&str> = wal_settings.iter().map(|r| r[0].as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    for want in [
        ["wal_buffers", "2048"],
        ["wal_insert_locks", "8"],
        ["wal_insertion", "parallel"],
        ["wal_level", "logical"],
        ["wal_writer_delay", "200"],
    ] {
        assert!(
            wal_settings.iter().any(|r| r == &want),
            "{want:?} in {wal_settings:?}"
        );
    }
    assert!(names.iter().all(|n| n.starts_with("wal")));

    // SHOW ALL: name, setting, description, sorted; the password never shown.
    let all = q("SHOW ALL");
    assert!(all.iter().all(|r| r.len() == 3));
    assert!(
        all.iter().any(|r| r[0] == "fsync" && r[1] == "off"),
        "{all:?}"
    );
    assert!(all
        .iter()
        .any(|r| r[0] == "wal_writer_delay" && r[1] == "200ms"));
    assert!(all.iter().all(|r| r[0] != "password"));
    let lower: Vec<String> = all.iter().map(|r| r[0].to_lowercase()).collect();
    let mut sorted = lower.clone();
    sorted.sort();
    assert_eq!(lower, sorted);

    // now() is the transaction's start: the same twice in one transaction.
    let two = q("BEGIN; SELECT now() = now(); SELECT now()::text; SELECT now()::text; COMMIT");
    assert_eq!(two[0], ["t"]);
    assert_eq!(two[1], two[2]);
    srv.stop_ok();
}

#[test]
fn unknown_relation_is_42p01_at_its_position() {
    let Some(bin) = pg_client("psql") else { return };
    let (_tmp, d, srv, port) = start_under_load("monitoring-42p01");
    let o = psql(&bin, &d, port, "SELECT * FROM nosuch");
    assert_eq!(o.code(), Some(1), "{}", o.describe());
    assert!(o.stderr.contains("42P01"), "{}", o.describe());
    // On the wire: SQLSTATE and position (1-based characters) as PostgreSQL 15's.
    let mut s = handshake(&socket_path(&d.path, port)).unwrap();
    for (sql, code, position) in [
        ("SELECT * FROM nosuch", "42P01", "15"),
        ("SELECT 'é', nosuch FROM pg_stat_wal", "42703", "13"),
        ("SELECT 1 2", "42601", "10"),
        ("SELECT (", "42601", "9"),
    ] {
        let msgs = exchange(&mut s, &msg(b'Q', &cstr(sql)));
        let f = first_error(&msgs).expect("an error");
        assert_eq!(f.get(&b'C').map(String::as_str), Some(code), "{sql}");
        assert_eq!(f.get(&b'P').map(String::as_str), Some(position), "{sql}");
    }
    // The session is still usable.
    wait_for_processes(&mut s, 5);
    drop(s);
    srv.stop_ok();
}

#[test]
fn synchronous_commit_from_pgoptions_and_in_pg_settings() {
    let Some(bin) = pg_client("psql") else { return };
    let tmp = TempDir::new("monitoring-sync-commit");
    let d = init(&tmp.join("data"), &[]);
    let (srv, port) = start_on_free_port(&d, tmp.path(), &[], &[], &[]);
    let with = |options: &str, sql: &str| psql_with_options(&bin, &d, port, Some(options), sql);

    // PGOPTIONS carries the full level; it is the session's default, so
    // RESET returns to it, and pg_settings shows it as the session's value.
    let o = with(
        "-c synchronous_commit=remote_write",
        "SHOW synchronous_commit; SET synchronous_commit = local; RESET synchronous_commit; \
         SHOW synchronous_commit; SELECT setting FROM pg_settings WHERE name = 'synchronous_commit'",
    );
    assert_eq!(
        rows(&o),
        [["remote_write"], ["remote_write"], ["remote_write"]]
    );
    assert_eq!(
        rows(&with(
            "-c synchronous_commit=LOCAL",
            "SHOW synchronous_commit"
        )),
        [["local"]]
    );
    assert_eq!(
        rows(&with(
            "-c synchronous_commit=false",
            "SHOW synchronous_commit"
        )),
        [["off"]]
    );

    // A bad value: psql cannot connect (exit 2); on the wire a FATAL 22023,
    // as SET's ERROR 22023 for the same value.
    let bad = with("-c synchronous_commit=sometimes", "SELECT 1");
    assert_eq!(bad.code(), Some(2), "{}", bad.describe());
    let mut s = raw_connect(&socket_path(&d.path, port));
    let options = ("options", "-c synchronous_commit=sometimes");
    s.write_all(&startup_packet(&[("user", "x"), options]))
        .unwrap();
    let msgs = read_to_close(&mut s);
    let f = first_error(&msgs).expect("an ErrorResponse");
    assert_eq!(f.get(&b'V').map(String::as_str), Some("FATAL"), "{f:?}");
    assert_eq!(f.get(&b'C').map(String::as_str), Some("22023"), "{f:?}");
    let set = psql(&bin, &d, port, "SET synchronous_commit = sometimes");
    assert_eq!(set.code(), Some(1), "{}", set.describe());
    assert!(set.stderr.contains("22023"), "{}", set.describe());

    // pg_settings: an enum with PostgreSQL 15's values.
    let row = rows(&psql(
        &bin,
        &d,
        port,
        "SELECT vartype, enumvals, setting FROM pg_settings WHERE name = 'synchronous_commit'",
    ));
    assert_eq!(
        row,
        [["enum", "{local,remote_write,remote_apply,on,off}", "on"]]
    );
    srv.stop_ok();
}

/// Waits until pg_stat_activity shows `n` processes (the workers and the
/// walwriter enter their slots shortly after the server is ready).
fn wait_for_processes(s: &mut std::os::unix::net::UnixStream, n: usize) {
    let sql = format!("SELECT count(*) = {n} FROM pg_stat_activity");
    let done = wait_until(Duration::from_secs(10), || {
        data_rows(&exchange(s, &msg(b'Q', &cstr(&sql)))) == vec![vec![Some("t".to_string())]]
    });
    assert!(done, "pg_stat_activity never showed {n} processes");
}

/// Execute with a row limit: `n` rows, then PortalSuspended.
fn execute(max_rows: i32) -> Vec<u8> {
    let mut e = cstr("");
    e.extend(max_rows.to_be_bytes());
    msg(b'E', &e)
}

#[test]
fn extended_protocol_streams_rows_with_postgres_types() {
    let Some(_) = pg_client("psql") else { return };
    let (_tmp, d, srv, port) = start_under_load("monitoring-extended");
    let mut s = handshake(&socket_path(&d.path, port)).unwrap();
    wait_for_processes(&mut s, 5);
    // RowDescription of pg_stat_wal: int8, numeric, float8, timestamptz OIDs.
    let mut describe = cstr("");
    describe.extend(cstr("SELECT * FROM pg_stat_wal"));
    describe.extend(0i16.to_be_bytes());
    let mut out = msg(b'P', &describe);
    let mut what = vec![b'S'];
    what.extend(cstr(""));
    out.extend(msg(b'D', &what));
    out.extend(msg(b'S', &[]));
    let msgs = exchange(&mut s, &out);
    let (_, desc) = msgs
        .iter()
        .find(|(t, _)| *t == b'T')
        .expect("RowDescription");
    let n = i16::from_be_bytes([desc[0], desc[1]]) as usize;
    let mut oids = Vec::new();
    let mut at = 2;
    for _ in 0..n {
        at += desc[at..].iter().position(|&b| b == 0).unwrap() + 1;
        oids.push(u32::from_be_bytes(
            desc[at + 6..at + 10].try_into().unwrap(),
        ));
        at += 18;
    }
    assert_eq!(oids, [20, 20, 1700, 20, 20, 20, 701, 701, 1184]);
    // A portal of 5 rows fetched 2 at a time, with a parameter.
    let rows_of = |msgs: &[(u8, Vec<u8>)]| msgs.iter().filter(|(t, _)| *t == b'D').count();
    let mut out = parse_bind(
        "SELECT pid, backend_type FROM pg_stat_activity WHERE pid > $1 ORDER BY pid",
        &["0"],
    );
    out.extend(execute(2));
    out.extend(execute(2));
    out.extend(execute(2));
    out.extend(msg(b'S', &[]));
    let msgs = exchange(&mut s, &out);
    let tags: Vec<u8> = msgs
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| b"DsCE".contains(t))
        .collect();
    assert_eq!(tags, b"DDsDDsDC", "{msgs:?}");
    assert_eq!(rows_of(&msgs), 5);
    let complete = msgs.iter().find(|(t, _)| *t == b'C').unwrap();
    assert_eq!(complete.1, b"SELECT 1\0");
    drop(s);
    srv.stop_ok();
}
