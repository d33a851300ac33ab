//! walbench: drives real postmasters and reports throughput per variant,
//! workload and client count.
//!
//! For each point (variant x client count) it initializes a fresh data
//! directory (or reuses `-D DIR`), starts `postmaster start --workers N
//! --workload KIND` with the variant's settings, waits until it is ready,
//! attaches the shared memory segment read-only in spirit (it only loads
//! counters) and samples the backends' transaction, record and byte counters
//! at the start and end of a measured window, then stops the server with a
//! fast shutdown and checks it exited cleanly. Throughput is the counter
//! delta over the window, so start-up and shutdown never count.
//!
//! Variants are compared as ratios to `modern` measured in the same run, one
//! client count at a time, because the machines this runs on are small and
//! noisy.
//!
//! `walbench reproduce NAME` (module `reproduce`) reruns one seed's table
//! with its own grid, old and new algorithm side by side, and writes JSON,
//! CSV and an SVG chart. The plain mode's JSON keys are a contract.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod chart;
pub mod experiments;
pub mod machine;
pub mod point;
pub mod procstat;
pub mod reproduce;

use backend::workload::{Workload, WORKLOAD_HELP};
use point::PointSpec;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Named variants: the settings that differ from the modern defaults.
pub const VARIANTS: &[(&str, &[&str], &str)] = &[
    ("modern", &[], "every modern algorithm (the defaults)"),
    (
        "insertingat-waitlist",
        &["inserting_at=waitlist"],
        "seed 000: insertingAt under the wait-list lock",
    ),
    (
        "packed-locks",
        &["insert_lock_layout=packed"],
        "seed 001: insertion locks packed, sharing cache lines",
    ),
    (
        "legacy-queue",
        &["lwlock_queue=legacy"],
        "seed 002: waiters scan the wait list to dequeue",
    ),
    (
        "single-insert-lock",
        &["wal_insertion=single"],
        "seed 003: one lock for reservation and copy",
    ),
    (
        "no-preinit",
        &["wal_preinit=off"],
        "seed 003: walwriter does not pre-initialize pages",
    ),
    (
        "exclusive-clear",
        &["xid_clear=exclusive"],
        "seed 004: each backend clears its XID under ProcArrayLock",
    ),
    (
        "atomic-reserve",
        &["wal_reservation=atomic"],
        "beyond the seeds: lock-free reservation",
    ),
];

pub struct Options {
    pub workloads: Vec<String>,
    pub clients: Vec<u32>,
    pub seconds: f64,
    pub variants: Vec<String>,
    pub sets: Vec<String>,
    pub datadir: Option<PathBuf>,
    pub json: Option<PathBuf>,
    pub chart: Option<PathBuf>,
}

/// One measured point.
#[derive(Clone, Debug)]
pub struct Run {
    pub variant: String,
    pub workload: String,
    pub clients: u32,
    pub seconds: f64,
    pub transactions: u64,
    pub records: u64,
    pub bytes: u64,
    pub wal_syncs: u64,
    pub tps: f64,
}

fn help() -> String {
    let mut s = String::from(
        "walbench: measure walshm's WAL throughput per variant, workload and client count

Usage: walbench reproduce NAME [...]   (see walbench reproduce --help)
       walbench [--workload KIND ...] [--clients LIST] [--seconds S] [--variant NAME ...]
                [--set NAME=VALUE ...] [-D DIR] [--json FILE] [--chart FILE.svg|FILE.png]

  --workload KIND   repeatable or comma-separated; ",
    );
    s.push_str(WORKLOAD_HELP);
    s.push_str(
        " (default emit:100)
  --clients LIST    comma-separated backend counts (default 1,2,4,16)
  --seconds S       measured seconds per point (default 2)
  --variant NAME    repeatable or comma-separated, or 'all' (default modern,single-insert-lock)
  --set NAME=VALUE  a setting for every run (see postmaster --help), e.g. fsync=off
  -D DIR            use this data directory (initialized if empty) instead of a
                    fresh temporary one per point
  --json FILE       also write {\"runs\":[{variant,workload,clients,seconds,transactions,tps},...]}
  --chart FILE      also draw TPS against clients (.svg, or .png rendered), a panel per workload, a line per variant

Variants:
",
    );
    for (name, _, what) in VARIANTS {
        let _ = writeln!(s, "  {name:<22} {what}");
    }
    s
}

/// The value after option `flag` at `args[*i]`; advances `*i` past it.
pub(crate) fn option_value(args: &[String], i: &mut usize, flag: &str) -> Result<String, String> {
    *i += 1;
    args.get(*i)
        .cloned()
        .ok_or_else(|| format!("option {flag} needs a value"))
}

/// A `--seconds` value: 0 < S <= 3600.
pub(crate) fn parse_seconds(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && *s <= 3600.0)
        .ok_or_else(|| format!("invalid --seconds \"{v}\" (0 < S <= 3600)"))
}

fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut o = Options {
        workloads: vec![],
        clients: vec![1, 2, 4, 16],
        seconds: 2.0,
        variants: vec![],
        sets: vec![],
        datadir: None,
        json: None,
        chart: None,
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let mut val = || option_value(args, &mut i, a);
        match a {
            "-h" | "--help" => return Ok(None),
            "--workload" => o.workloads.extend(val()?.split(',').map(str::to_string)),
            "--clients" => {
                let v = val()?;
                o.clients = v
                    .split(',')
                    .map(|c| {
                        c.trim()
                            .parse::<u32>()
                            .ok()
                            .filter(|n| (1..=4096).contains(n))
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        format!("invalid --clients \"{v}\" (comma-separated counts, 1..=4096)")
                    })?;
            }
            "--seconds" => o.seconds = parse_seconds(&val()?)?,
            "--variant" => o.variants.extend(val()?.split(',').map(str::to_string)),
            "--set" | "-c" => o.sets.push(val()?),
            "-D" => o.datadir = Some(PathBuf::from(val()?)),
            "--json" => o.json = Some(PathBuf::from(val()?)),
            "--chart" => {
                let p = PathBuf::from(val()?);
                chart::check_path(&p)?;
                o.chart = Some(p);
            }
            _ => return Err(format!("unknown option \"{a}\"")),
        }
        i += 1;
    }
    if o.workloads.is_empty() {
        o.workloads.push("emit:100".into());
    }
    for w in &o.workloads {
        Workload::parse(w)?;
    }
    if o.variants.is_empty() {
        o.variants = vec!["modern".into(), "single-insert-lock".into()];
    }
    if o.variants.iter().any(|v| v == "all") {
        o.variants = VARIANTS.iter().map(|(n, _, _)| n.to_string()).collect();
    }
    for v in &o.variants {
        if !VARIANTS.iter().any(|(n, _, _)| n == v) {
            let names: Vec<_> = VARIANTS.iter().map(|(n, _, _)| *n).collect();
            return Err(format!(
                "unknown variant \"{v}\" (valid: {}, all)",
                names.join(", ")
            ));
        }
    }
    // Validate --set now rather than in the first postmaster.
    let mut s = shmem::Settings::default();
    for a in &o.sets {
        s.set_assignment(a).map_err(|e| e.to_string())?;
    }
    Ok(Some(o))
}

fn usage_error(e: &str, help_cmd: &str) -> i32 {
    eprintln!("walbench: error: {e}");
    eprintln!("Try \"{help_cmd}\" for more information.");
    2
}

fn main_reproduce(args: &[String]) -> i32 {
    let opts = match reproduce::parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", reproduce::help());
            return 0;
        }
        Err(e) => return usage_error(&e, "walbench reproduce --help"),
    };
    match reproduce::run(&opts) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("\nwalbench: error: {e}");
            1
        }
    }
}

pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    main_with(&args)
}

/// `main` with explicit arguments (without the program name): 0 ok, 1 a
/// failed run, 2 a usage error.
pub fn main_with(args: &[String]) -> i32 {
    if args.first().map(String::as_str) == Some("reproduce") {
        return main_reproduce(&args[1..]);
    }
    let opts = match parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", help());
            return 0;
        }
        Err(e) => return usage_error(&e, "walbench --help"),
    };
    match run_all(&opts) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("walbench: error: {e}");
            1
        }
    }
}

/// Runs every point; prints progress and the final table.
pub fn run_all(o: &Options) -> Result<Vec<Run>, String> {
    let postmaster = postmaster_path()?;
    println!(
        "walbench: {} core(s); {} s per point; settings: {}",
        cores(),
        o.seconds,
        if o.sets.is_empty() {
            "defaults".to_string()
        } else {
            o.sets.join(" ")
        }
    );
    let total = o.workloads.len() * o.clients.len() * o.variants.len();
    // A discarded warm-up point: the first server of a run is measurably
    // slower (cold page cache, CPU frequency), which would bias whichever
    // variant runs first.
    let warm = Options {
        seconds: o.seconds.min(1.0),
        workloads: vec![],
        clients: vec![],
        variants: vec![],
        sets: o.sets.clone(),
        datadir: o.datadir.clone(),
        json: None,
        chart: None,
    };
    run_point(
        &postmaster,
        &warm,
        &o.workloads[0],
        o.clients[0],
        &o.variants[0],
    )?;
    let started = Instant::now();
    let mut runs = Vec::new();
    let mut k = 0;
    for w in &o.workloads {
        for &c in &o.clients {
            for v in &o.variants {
                k += 1;
                let r = run_point(&postmaster, o, w, c, v)?;
                eprintln!(
                    "[{k}/{total}, {:.0} s] {v} {w} clients {c}: {:.0} tps, {:.1} MB/s",
                    started.elapsed().as_secs_f64(),
                    r.tps,
                    r.bytes as f64 / r.seconds / 1e6
                );
                runs.push(r);
            }
        }
    }
    print!("{}", table(&runs));
    if let Some(p) = &o.json {
        write_file(p, json(&runs).as_bytes())?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &o.chart {
        let svg = chart::svg("walbench", &format!("{} core(s)", cores()), &panels(&runs));
        chart::write(p, &svg)?;
        println!("wrote {}", p.display());
    }
    Ok(runs)
}

/// TPS against clients: one panel per workload, one line per variant.
fn panels(runs: &[Run]) -> Vec<chart::Panel> {
    let mut workloads: Vec<&str> = runs.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    workloads
        .into_iter()
        .map(|w| {
            let mut variants: Vec<&str> = Vec::new();
            for r in runs.iter().filter(|r| r.workload == w) {
                if !variants.contains(&r.variant.as_str()) {
                    variants.push(&r.variant);
                }
            }
            chart::Panel {
                title: w.to_string(),
                y_label: "transactions/s".into(),
                series: variants
                    .into_iter()
                    .map(|v| chart::Series {
                        name: v.to_string(),
                        points: runs
                            .iter()
                            .filter(|r| r.workload == w && r.variant == v)
                            .map(|r| chart::Point {
                                x: r.clients as f64,
                                y: r.tps,
                                lo: r.tps,
                                hi: r.tps,
                            })
                            .collect(),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// Writes an output file (JSON, CSV, chart), naming it in the error.
pub(crate) fn write_file(p: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(p, bytes).map_err(|e| format!("could not write \"{}\": {e}", p.display()))
}

fn cores() -> usize {
    machine::cores()
}

/// The `postmaster` binary next to this executable (or, for a test
/// executable in `target/<profile>/deps`, in `target/<profile>`).
pub fn postmaster_path() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let p = me.with_file_name("postmaster");
    if p.exists() {
        return Ok(p);
    }
    let dir = me.parent();
    if let Some(up) = dir
        .filter(|d| d.file_name().is_some_and(|n| n == "deps"))
        .and_then(Path::parent)
        .map(|d| d.join("postmaster"))
        .filter(|q| q.exists())
    {
        return Ok(up);
    }
    Err(format!(
        "postmaster binary not found next to walbench ({})",
        p.display()
    ))
}

fn run_point(
    postmaster: &Path,
    o: &Options,
    workload: &str,
    clients: u32,
    variant: &str,
) -> Result<Run, String> {
    let (_, variant_sets, _) = VARIANTS
        .iter()
        .find(|(n, _, _)| *n == variant)
        .ok_or_else(|| format!("unknown variant \"{variant}\""))?;
    let spec = PointSpec {
        workload: workload.to_string(),
        clients,
        seconds: o.seconds,
        sets: o
            .sets
            .iter()
            .cloned()
            .chain(variant_sets.iter().map(|s| s.to_string()))
            .collect(),
        datadir: o.datadir.clone(),
        temp_base: std::env::temp_dir(),
        keep_at: None,
    };
    let m = point::measure(postmaster, &spec)
        .map_err(|e| format!("{variant} {workload} clients {clients}: {e}"))?;
    Ok(Run {
        variant: variant.to_string(),
        workload: workload.to_string(),
        clients,
        seconds: m.seconds,
        transactions: m.transactions,
        records: m.records,
        bytes: m.bytes,
        wal_syncs: m.wal_syncs,
        tps: m.transactions as f64 / m.seconds,
    })
}

/// The results as a table: one row per workload, client count and variant,
/// with the ratio to `modern` at the same point when it was measured.
pub fn table(runs: &[Run]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{:<12} {:>7}  {:<22} {:>12} {:>10} {:>10} {:>12}",
        "workload", "clients", "variant", "tps", "MB/s", "vs modern", "syncs/tx"
    );
    for r in runs {
        let base = runs
            .iter()
            .find(|b| b.variant == "modern" && b.workload == r.workload && b.clients == r.clients);
        let ratio = base.map_or("-".to_string(), |b| {
            format!("{:.2}", r.tps / b.tps.max(1e-9))
        });
        let syncs = if r.transactions > 0 {
            format!("{:.4}", r.wal_syncs as f64 / r.transactions as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            s,
            "{:<12} {:>7}  {:<22} {:>12.0} {:>10.1} {:>10} {:>12}",
            r.workload,
            r.clients,
            r.variant,
            r.tps,
            r.bytes as f64 / r.seconds / 1e6,
            ratio,
            syncs
        );
    }
    s
}

pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `{"runs":[{"variant","workload","clients","seconds","transactions","tps",...}]}`
pub fn json(runs: &[Run]) -> String {
    let mut s = String::from("{\"runs\":[");
    for (i, r) in runs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            "\n  {{\"variant\":{},\"workload\":{},\"clients\":{},\"seconds\":{:.3},\"transactions\":{},\"tps\":{:.1},\"records\":{},\"bytes\":{},\"wal_syncs\":{},\"cores\":{}}}",
            json_str(&r.variant),
            json_str(&r.workload),
            r.clients,
            r.seconds,
            r.transactions,
            r.tps,
            r.records,
            r.bytes,
            r.wal_syncs,
            cores()
        );
    }
    s.push_str("\n]}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn parses_and_rejects() {
        let o = parse(&args(
            "--workload emit:16,emit:100 --clients 1,4 --seconds 0.5 --variant all",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(o.workloads.len(), 2);
        assert_eq!(o.clients, vec![1, 4]);
        assert_eq!(o.variants.len(), VARIANTS.len());
        assert!(parse(&args("--clients 0")).is_err());
        assert!(parse(&args("--variant nope")).is_err());
        assert!(parse(&args("--workload emit:x")).is_err());
        assert!(parse(&args("--set bogus=1")).is_err());
        assert!(parse(&args("--help")).unwrap().is_none());
    }

    #[test]
    fn chart_has_a_panel_per_workload_and_a_line_per_variant() {
        let run = |variant: &str, workload: &str, clients| Run {
            variant: variant.into(),
            workload: workload.into(),
            clients,
            seconds: 1.0,
            transactions: 10,
            records: 10,
            bytes: 100,
            wal_syncs: 0,
            tps: 10.0 * clients as f64,
        };
        let runs = [
            run("modern", "emit:16", 1),
            run("legacy-queue", "emit:16", 1),
            run("modern", "emit:16", 2),
            run("modern", "txid", 1),
        ];
        let p = panels(&runs);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].series.len(), 2);
        assert_eq!(p[0].series[0].points.len(), 2);
        assert_eq!(p[1].title, "txid");
        assert!(parse(&args("--chart x.png")).is_ok());
        assert!(parse(&args("--chart x.gif")).is_err());
        assert!(parse(&args("--chart x.svg"))
            .unwrap()
            .unwrap()
            .chart
            .is_some());
    }

    #[test]
    fn json_has_the_contract_keys() {
        let r = Run {
            variant: "modern".into(),
            workload: "emit:16".into(),
            clients: 2,
            seconds: 1.0,
            transactions: 10,
            records: 10,
            bytes: 560,
            wal_syncs: 0,
            tps: 10.0,
        };
        let j = json(&[r]);
        for k in [
            "\"runs\"",
            "\"variant\"",
            "\"workload\"",
            "\"clients\"",
            "\"seconds\"",
            "\"transactions\"",
            "\"tps\"",
        ] {
            assert!(j.contains(k), "{k} missing in {j}");
        }
        assert!(table(&[]).contains("workload"));
    }
}
