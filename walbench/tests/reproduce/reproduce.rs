//! End-to-end tests of `walbench reproduce`: every experiment on a tiny grid
//! (one size, two client counts, a fraction of a second) against real
//! postmasters, checking the JSON, CSV and SVG it writes, and one point's
//! record count against the WAL on disk; plus the usage errors.
//!
//! The postmaster binary is looked up in target/<profile>/ (the root package
//! builds it for `cargo test --workspace`); without it the end-to-end tests
//! print a loud SKIPPED message and pass.

use serde_json::Value as J;
use std::path::{Path, PathBuf};
use std::process::Command;
use walbench::reproduce;

fn postmaster() -> Option<PathBuf> {
    match walbench::postmaster_path() {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("\n*** SKIPPED: {e}; build it with `cargo build --bins` ***\n");
            None
        }
    }
}

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("walbench-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Typed fields of walbench's JSON records; a missing or mistyped field
/// fails the test, naming it.
trait Fields {
    fn num(&self, k: &str) -> f64;
    fn str(&self, k: &str) -> &str;
}

impl Fields for J {
    fn num(&self, k: &str) -> f64 {
        self[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} is not a number: {}", self[k]))
    }
    fn str(&self, k: &str) -> &str {
        self[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k} is not a string: {}", self[k]))
    }
}

fn parse_json(text: &str) -> J {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("invalid JSON ({e}): {text}"))
}

/// The `runs` array of a document.
fn runs(j: &J) -> &[J] {
    j["runs"].as_array().expect("runs")
}

/// Runs one experiment on a tiny grid and validates its three files;
/// returns the parsed JSON.
fn tiny(name: &str, size: Option<&str>, extra: &str, dir: &Path) -> J {
    let (json, csv, svg) = (dir.join("r.json"), dir.join("r.csv"), dir.join("r.svg"));
    let mut a = format!(
        "{name} --clients 1,2 --seconds 0.15 --repeat 1 --json {} --csv {} --chart {} {extra}",
        json.display(),
        csv.display(),
        svg.display()
    );
    if let Some(s) = size {
        a.push_str(&format!(" --sizes {s}"));
    }
    let o = reproduce::parse(&args(&a)).unwrap().unwrap();
    let nvariants = o.variants.len();
    reproduce::run(&o).unwrap_or_else(|e| panic!("{name}: {e}"));

    let j = parse_json(&std::fs::read_to_string(&json).unwrap());
    assert_eq!(j.str("reproduce"), name);
    assert_eq!(j.num("repeat"), 1.0);
    assert!(j["machine"].num("cores") >= 1.0);
    assert_eq!(runs(&j).len(), 2 * nvariants, "{name}");
    for r in runs(&j) {
        for k in [
            "clients",
            "seconds",
            "transactions",
            "tps",
            "tps_min",
            "tps_max",
            "records",
            "bytes",
        ] {
            assert!(r.num(k) >= 0.0, "{name} {k}");
        }
        for k in ["variant", "workload"] {
            assert!(!r.str(k).is_empty());
        }
        assert!(r.get("latency_us_p50").is_some() && r.get("latency_us_p99").is_some());
        assert!(r.num("tps") > 0.0, "{name}: no throughput in {r}");
        assert!(r.num("tps_min") <= r.num("tps") && r.num("tps") <= r.num("tps_max"));
        // The rate is the counters' delta over the window.
        let per_tx = r.num("records_per_transaction");
        let tx = if r["transactions_derived"] == true {
            (r.num("records") / per_tx).floor()
        } else {
            r.num("transactions")
        };
        assert_eq!(r.num("transactions"), tx, "{name}");
        let tps = r.num("records") / per_tx / r.num("seconds");
        if r.str("workload").starts_with("emit") {
            // emit-batch counts whole batches: those straddling the window's
            // edges (one per client at each end) make the record-derived
            // rate differ by up to 2 x clients batches.
            let edge = if per_tx > 1.0 {
                2.0 * r.num("clients") / r.num("seconds")
            } else {
                0.0
            };
            assert!(
                (tps - r.num("tps")).abs() <= tps * 0.01 + 1.0 + edge,
                "{name}: {tps} vs {r}"
            );
            assert!(r.num("records_at_exit") >= r.num("records"));
        }
    }

    let c = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = c.lines().collect();
    assert_eq!(lines[0], reproduce::CSV_HEADER);
    assert_eq!(lines.len(), 1 + 2 * nvariants);
    let cols = lines[0].split(',').count();
    for l in &lines[1..] {
        assert_eq!(l.split(',').count(), cols, "{l}");
        assert!(l.starts_with(&format!("{name},")));
    }

    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg"), "{name}");
    assert!(s.trim_end().ends_with("</svg>"));
    assert_eq!(
        s.matches("<polyline").count(),
        2 * nvariants,
        "{name}: one line per variant in the throughput and the mechanism panel"
    );
    assert!(!s.contains("NaN"));
    j
}

#[test]
fn atomic_insertingat_and_its_wal() {
    let Some(pm) = postmaster() else { return };
    let d = Scratch::new("000");
    let keep = d.0.join("data");
    let j = tiny(
        "atomic-insertingat",
        Some("16"),
        &format!("--keep-data {}", keep.display()),
        &d.0,
    );
    // One point: what the runtime counted equals the logical messages in
    // the WAL on disk (kept by wal_keep_size=100GB).
    let r = runs(&j)
        .iter()
        .find(|r| r.str("variant") == "atomic" && r.num("clients") == 1.0)
        .unwrap();
    let dir = keep.join("atomic-16-c1-r1");
    let out = Command::new(&pm)
        .args(["waldump", "-D"])
        .arg(&dir)
        .args(["--quiet", "--stats"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("clean end of WAL") || text.contains("end of WAL"),
        "{text}"
    );
    let in_wal: f64 = text
        .lines()
        .find(|l| l.starts_with("LogicalMessage"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no LogicalMessage line in\n{text}"));
    assert_eq!(in_wal, r.num("records_at_exit"), "{text}");
    assert!(in_wal >= r.num("records") && r.num("records") > 0.0);
}

#[test]
fn insert_locks_tiny() {
    let Some(j) = tiny_batches("001", "insert-locks", "8000", 13.0) else {
        return;
    };
    // Whole batches of 13 records are counted by the runtime itself.
    assert!(runs(&j).iter().all(|r| r["transactions_derived"] == false));
    // Batches straddling the window's edges: at most one per client each.
    for r in runs(&j) {
        let slack = 2.0 * 13.0 * r.num("clients");
        assert!(
            (r.num("records") - 13.0 * r.num("transactions")).abs() <= slack,
            "records {} vs 13 x transactions {}",
            r.num("records"),
            r.num("transactions")
        );
    }
}

/// `tiny` in a scratch directory of its own; None when there is no
/// postmaster to run.
fn tiny_scratch(tag: &str, name: &str, size: Option<&str>) -> Option<J> {
    postmaster()?;
    let d = Scratch::new(tag);
    Some(tiny(name, size, "", &d.0))
}

/// `tiny_scratch` of a seed whose transactions are batches: every run
/// reports `per_transaction` records a transaction.
fn tiny_batches(tag: &str, name: &str, size: &str, per_transaction: f64) -> Option<J> {
    let j = tiny_scratch(tag, name, Some(size))?;
    assert!(runs(&j)
        .iter()
        .all(|r| r.num("records_per_transaction") == per_transaction));
    Some(j)
}

#[test]
fn lwlock_queue_tiny() {
    tiny_scratch("002", "lwlock-queue", None);
}

#[test]
fn parallel_insert_tiny() {
    tiny_batches("003", "parallel-insert", "16", 10000.0);
}

#[test]
fn group_xid_clear_tiny() {
    tiny_scratch("004", "group-xid-clear", None);
}

#[test]
fn lockfree_reserve_tiny() {
    tiny_scratch("lf", "lockfree-reserve", Some("16"));
}

#[test]
fn bad_arguments_are_usage_errors() {
    for a in [
        "reproduce nope",
        "reproduce",
        "reproduce lwlock-queue --clients 0",
        "reproduce atomic-insertingat --sizes 99999999999",
        "reproduce atomic-insertingat --sizes 67108865",
        "reproduce lwlock-queue --chart out.jpg",
        "reproduce lwlock-queue --bogus",
        "--clients 0",
        "--workload emit:99999999999",
    ] {
        assert_eq!(walbench::main_with(&args(a)), 2, "{a}");
    }
    let e = reproduce::parse(&args("atomic-insertingat --sizes 67108865"))
        .err()
        .unwrap();
    assert!(e.contains("maximum record length"), "{e}");
    let e = reproduce::parse(&args("nope")).err().unwrap();
    assert!(
        e.contains("unknown experiment") && e.contains("atomic-insertingat"),
        "{e}"
    );
}
