//! `walbench tail` end to end, short: the library reader's path and
//! pg_recvlogical's against walshm at one low rate, half a second each:
//! every message delivered, none lost, latencies and rates that are
//! numbers, the JSON's keys as the design fixes them, one chart line per
//! path. (The figures themselves are for `walbench tail` run by hand:
//! docs/benchmarks.md.) Without pg_recvlogical it skips loudly unless
//! WALSHM_REQUIRE_PG=1.

use crate::common::wire::pg_client;
use crate::common::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn tail_delivers_everything_and_reports_the_designs_json() {
    if pg_client("pg_recvlogical").is_none() {
        return;
    }
    let tmp = TempDir::new("tail");
    // The library path runs the worker crate's tail_latency example, which
    // `cargo test --workspace` builds next to walbench; a narrower
    // `cargo test --test tail` does not.
    let walbench = std::path::Path::new(env!("CARGO_BIN_EXE_walbench"));
    let example = walbench.with_file_name("examples").join("tail_latency");
    let paths = if example.is_file() {
        "library,recvlogical-walshm"
    } else {
        eprintln!(
            "NOTE: {} not built: the library path is left out",
            example.display()
        );
        "recvlogical-walshm"
    };
    let json = tmp.join("tail.json");
    let chart = tmp.join("tail.svg");
    let o = run_cmd(
        Command::new(env!("CARGO_BIN_EXE_walbench"))
            .args(["tail", "--paths", paths, "--rates", "200"])
            .args(["--seconds", "0.5", "--size", "48", "--json"])
            .arg(&json)
            .arg("--chart")
            .arg(&chart)
            .env("TMPDIR", tmp.path()),
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "{}", o.describe());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON");
    let runs = v["runs"].as_array().expect("runs");
    let want = paths;
    let paths: Vec<&str> = runs.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths.join(","), want, "{v}");
    for r in runs {
        assert_eq!(r["rate"], 200, "{r}");
        assert_eq!(r["size"], 48, "{r}");
        assert_eq!(r["lost"], 0, "{r}");
        let delivered = r["delivered"].as_u64().unwrap();
        assert!((90..=110).contains(&delivered), "{r}");
        let l = &r["latency_us"];
        for k in ["p50", "p90", "p99", "p999", "max"] {
            assert!(l[k].as_f64().is_some_and(|x| x >= 0.0), "{k} in {r}");
        }
        assert!(l["p50"].as_f64() <= l["max"].as_f64(), "{r}");
        assert!(r["max_rate"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    }
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert_eq!(
        svg.matches("<polyline").count(),
        runs.len(),
        "one line per path"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("walbench-tail-")
        })
        .collect();
    assert!(left.is_empty(), "work directories left behind");
}
