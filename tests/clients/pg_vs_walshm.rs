//! scripts/pg-vs-walshm.sh end to end: one short run against a
//! temporary PostgreSQL 15 cluster and the walshm binary under test, with
//! comma-separated lists (`--modes simple,extended`), checked through its
//! CSV only (never its English text): the original keys in their original
//! order, the keys appended after them, one row per server and
//! point, figures that are numbers where they must be, and a `limit` word
//! that follows from the two CPU shares by the rule the script documents.
//!
//! Bounded: the script runs in its own process group under a deadline; on
//! expiry it gets SIGTERM (its trap stops the servers, which run in
//! sessions of their own) and then the group SIGKILL. The script's work
//! directory is made under this test's TempDir (TMPDIR), so the test can
//! check that no process of the run is left behind. Without PostgreSQL 15's
//! programs it skips loudly, unless WALSHM_REQUIRE_PG=1.

use crate::common::wire::have_pg_clients;
use crate::common::*;

use crate::common::script::{processes_mentioning, signal_quietly};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// The script's original CSV keys, which stay first and in this order.
const OLD_KEYS: &[&str] = &[
    "durability",
    "script",
    "mode",
    "clients",
    "server",
    "binary",
    "seconds",
    "tps",
    "transactions",
    "server_cpu_us_per_tx",
    "pgbench_cpu_us_per_tx",
    "ctx_switches_per_tx",
    "fdatasyncs_per_tx",
    "cpu_method",
    "cs_method",
];
/// The keys appended after the original ones, in order.
const NEW_KEYS: &[&str] = &[
    "pgbench_polls_per_tx",
    "server_cpu_share",
    "pgbench_cpu_share",
    "limit",
    "server_session",
    "machine_busy_share",
];

const SCRIPT_DEADLINE: Duration = Duration::from_secs(90);

/// Runs the script with `args` (bounded: see crate::common::script).
fn run_script(tmp: &Path, args: &[&str]) -> ExitStatus {
    crate::common::script::run_script("pg-vs-walshm.sh", args, &[], tmp, None, SCRIPT_DEADLINE)
}

fn number(row: &HashMap<&str, &str>, key: &str) -> f64 {
    row[key]
        .parse::<f64>()
        .unwrap_or_else(|_| panic!("{key} is not a number in {row:?}"))
}

/// A share (0..1 of the machine) or "-"; None for "-".
fn share(row: &HashMap<&str, &str>, key: &str) -> Option<f64> {
    if row[key] == "-" {
        return None;
    }
    let s = number(row, key);
    assert!(
        (0.0..=1.5).contains(&s),
        "{key} = {s} out of range in {row:?}"
    );
    Some(s)
}

/// The script's documented rule: client, server, others or wait from the
/// shares (`busy`: the whole machine's busy share, if known).
fn expected_limit(srv: f64, pgb: f64, threads: f64, cpus: f64, busy: Option<f64>) -> &'static str {
    if pgb * cpus >= 0.9 * threads || (srv + pgb >= 0.9 && pgb >= srv) {
        "client"
    } else if srv + pgb >= 0.9 {
        "server"
    } else if busy.is_some_and(|b| b >= 0.9) {
        "others"
    } else {
        "wait"
    }
}

fn check_row(row: &HashMap<&str, &str>, cpus: f64) {
    assert_eq!(row["durability"], "off", "{row:?}");
    assert_eq!(row["script"], "select1", "{row:?}");
    assert!(number(row, "tps") > 0.0, "no throughput: {row:?}");
    assert!(number(row, "transactions") > 0.0, "{row:?}");
    assert!(number(row, "pgbench_cpu_us_per_tx") > 0.0, "{row:?}");
    assert_eq!(row["server_session"], "own", "{row:?}");
    let polls = row["pgbench_polls_per_tx"];
    if polls != "-" {
        // pgbench waits for each reply of a one-client run at least
        // sometimes; a run at zero polls means nothing was counted.
        let p = number(row, "pgbench_polls_per_tx");
        assert!(p > 0.0 && p < 10.0, "pgbench polls/tx {p} in {row:?}");
    }
    let clients = number(row, "clients");
    let threads = clients.min(cpus);
    let busy = share(row, "machine_busy_share");
    match (
        share(row, "server_cpu_share"),
        share(row, "pgbench_cpu_share"),
    ) {
        (Some(s), Some(p)) => {
            assert!(s > 0.0 && p > 0.0, "a CPU share of 0 in {row:?}");
            assert_eq!(
                row["limit"],
                expected_limit(s, p, threads, cpus, busy),
                "limit does not follow from the shares in {row:?}"
            );
        }
        _ => assert_eq!(row["limit"], "-", "{row:?}"),
    }
}

#[test]
fn csv_keeps_its_keys_and_says_where_the_client_is_the_limit() {
    if !have_pg_clients(&["initdb", "postgres", "pgbench", "pg_isready", "psql"]) {
        return;
    }
    let tmp = TempDir::new("pgvs");
    let csv = tmp.join("out.csv");
    let st = run_script(
        tmp.path(),
        &[
            "--seconds",
            "1",
            "--clients",
            "1",
            "--scripts",
            "select1",
            "--modes",
            "simple,extended",
            "--durability",
            "off",
            "--csv",
            csv.to_str().unwrap(),
        ],
    );
    let left = processes_mentioning(&tmp.path().to_string_lossy());
    for &pid in &left {
        signal_quietly(pid, libc::SIGKILL);
    }
    assert!(
        left.is_empty(),
        "processes of the run left behind: {left:?}"
    );
    let text = std::fs::read_to_string(&csv).unwrap_or_default();
    assert_eq!(st.code(), Some(0), "script failed; CSV:\n{text}");

    let mut lines = text.lines();
    let keys: Vec<&str> = lines.next().expect("CSV header").split(',').collect();
    let want: Vec<&str> = OLD_KEYS.iter().chain(NEW_KEYS).copied().collect();
    assert_eq!(keys, want, "CSV keys changed");
    let rows: Vec<HashMap<&str, &str>> = lines
        .map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            assert_eq!(v.len(), keys.len(), "row {l:?}");
            keys.iter().copied().zip(v).collect()
        })
        .collect();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut seen: Vec<(String, String)> = Vec::new();
    for r in &rows {
        check_row(r, cpus);
        seen.push((r["mode"].to_string(), r["server"].to_string()));
    }
    seen.sort();
    let want_seen: Vec<(String, String)> = [
        ("extended", "PG"),
        ("extended", "walshm"),
        ("simple", "PG"),
        ("simple", "walshm"),
    ]
    .iter()
    .map(|(m, s)| (m.to_string(), s.to_string()))
    .collect();
    assert_eq!(seen, want_seen, "one row per mode and server");
}

#[test]
fn unknown_server_session_is_refused() {
    let tmp = TempDir::new("pgvs-arg");
    let st = run_script(tmp.path(), &["--server-session", "sideways"]);
    assert_eq!(st.code(), Some(2));
}

/// The script's `client_limit` function itself (taken out of the script
/// and run by bash) on shares at and around its thresholds, on 2 CPUs.
#[test]
fn limit_word_follows_the_documented_rule() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-vs-walshm.sh");
    // (server share, pgbench share, pgbench threads, machine busy share)
    let cases: &[(&str, &str, &str, &str)] = &[
        ("0.50", "0.45", "2", "1.0"),  // full, server larger
        ("0.45", "0.50", "2", "1.0"),  // full, pgbench larger
        ("0.45", "0.45", "2", "0.95"), // full, equal: pgbench
        ("0.40", "0.40", "2", "0.85"), // not full
        ("0.40", "0.40", "2", "-"),    // not full, machine unknown
        ("0.40", "0.40", "2", "0.97"), // others fill the machine
        ("0.10", "0.46", "1", "0.6"),  // pgbench's one thread 92% busy
        ("0.10", "0.44", "1", "0.6"),  // 88% busy: not yet
        ("-", "0.40", "2", "1.0"),     // unknown share
    ];
    for &(srv, pgb, threads, busy) in cases {
        let o = run_cmd(
            Command::new("bash").arg("-c").arg(format!(
                "source <(sed -n '/^client_limit()/,/^}}/p' '{}'); NPROC=2; client_limit {srv} {pgb} {threads} {busy}",
                script.display()
            )),
            Duration::from_secs(10),
        );
        let want = match srv {
            "-" => "-",
            _ => expected_limit(
                srv.parse().unwrap(),
                pgb.parse().unwrap(),
                threads.parse().unwrap(),
                2.0,
                busy.parse().ok(),
            ),
        };
        assert_eq!(
            o.stdout.trim(),
            want,
            "client_limit {srv} {pgb} {threads}: {}",
            o.describe()
        );
    }
    // The table above covers every word.
    for w in ["client", "server", "others", "wait", "-"] {
        assert!(
            cases.iter().any(|&(s, p, j, b)| {
                s == "-" && w == "-"
                    || s != "-"
                        && expected_limit(
                            s.parse().unwrap(),
                            p.parse().unwrap(),
                            j.parse().unwrap(),
                            2.0,
                            b.parse().ok(),
                        ) == w
            }),
            "no case gives {w}"
        );
    }
}
