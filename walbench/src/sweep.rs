//! The plain mode, `walbench [--workload KIND ...] [--variant NAME ...]`:
//! one measured point per workload, client count and variant (in that
//! nesting), a table with each point's ratio to `modern` at the same
//! workload and client count, and optionally JSON and a chart.
//!
//! Invariants: the JSON keys (`runs`, and per run `variant`, `workload`,
//! `clients`, `seconds`, `transactions`, `tps`, ...) are a contract; a
//! discarded warm-up point runs before the first measured one, because the
//! first server of a run is measurably slower (cold page cache, CPU
//! frequency) and would bias whichever variant runs first.

use crate::cli;
use crate::point::{self, PointSpec};
use crate::report::{self, Column, Files, Value};
use crate::variants::{self, Variant, VARIANTS};
use crate::{chart, machine, postmaster_path};
use backend::workload::{Workload, WORKLOAD_HELP};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The plain mode's options (the top level of walbench's command line).
#[derive(clap::Args)]
pub struct Options {
    #[arg(long = "workload", value_name = "KIND", value_delimiter = ',',
          default_value = "emit:100", value_parser = workload, help = workload_help())]
    pub workloads: Vec<String>,
    /// Comma-separated backend counts
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1,2,4,16",
          value_parser = cli::client_count, action = clap::ArgAction::Set)]
    pub clients: Vec<u32>,
    /// Measured seconds per point
    #[arg(long, value_name = "S", default_value = "2", value_parser = cli::seconds)]
    pub seconds: f64,
    #[arg(long = "variant", value_name = "NAME", value_delimiter = ',',
          value_parser = variant_name, help = variant_help())]
    pub variants: Vec<String>,
    #[arg(long = "set", short = 'c', value_name = "NAME=VALUE", value_parser = cli::setting,
          help = cli::SET_HELP)]
    pub sets: Vec<String>,
    /// Use this data directory (initialized if empty) instead of a fresh
    /// temporary one per point
    #[arg(short = 'D', value_name = "DIR")]
    pub datadir: Option<PathBuf>,
    /// Also write {"runs":[{variant,workload,clients,seconds,transactions,tps},...]}
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also draw TPS against clients (.svg, or .png rendered), a panel per
    /// workload, a line per variant
    #[arg(long, value_name = "FILE", value_parser = cli::chart)]
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
    /// Wait events and mechanism counters of the window.
    pub observed: crate::observe::Observed,
}

fn workload_help() -> String {
    format!("Workloads to run (repeatable or comma-separated): {WORKLOAD_HELP}")
}

/// A `--workload` item.
fn workload(v: &str) -> Result<String, String> {
    Workload::parse(v.trim()).map(|_| v.trim().to_string())
}

/// A `--variant` item: a name from the table, or `all`.
fn variant_name(v: &str) -> Result<String, String> {
    let v = v.trim();
    match v == "all" || variants::find(VARIANTS, v).is_some() {
        true => Ok(v.to_string()),
        false => Err(format!(
            "unknown variant (valid: {}, all)",
            variants::names(VARIANTS)
        )),
    }
}

/// The list `--help` ends with: every variant and what it changes.
pub fn variants_help() -> String {
    let mut variants = String::from("Variants:\n");
    for v in VARIANTS {
        let _ = writeln!(variants, "  {:<22} {}", v.name, v.what);
    }
    variants
}

/// The variants compared when `--variant` is not given.
const DEFAULT_VARIANTS: [&str; 2] = ["modern", "single-insert-lock"];

fn variant_help() -> String {
    format!(
        "Variants to compare (repeatable or comma-separated; the list below), or 'all' \
         [default: {}]",
        DEFAULT_VARIANTS.join(",")
    )
}

/// The variants named on the command line (`all`: every one; none: the
/// default ones).
fn pick_variants(names: &[String]) -> Vec<&'static Variant> {
    if names.iter().any(|n| n == "all") {
        return VARIANTS.iter().collect();
    }
    if names.is_empty() {
        return pick_variants(&DEFAULT_VARIANTS.map(String::from));
    }
    names
        .iter()
        .filter_map(|n| variants::find(VARIANTS, n))
        .collect()
}

/// The plain mode.
pub fn run_mode(o: &Options) -> Result<(), String> {
    run_all(o).map(drop)
}

/// One point to measure.
struct Point<'a> {
    workload: &'a str,
    clients: u32,
    variant: &'static Variant,
}

/// Every point, workloads outermost, variants innermost.
fn points(o: &Options) -> Vec<Point<'_>> {
    let (mut v, variants) = (vec![], pick_variants(&o.variants));
    for w in &o.workloads {
        for &clients in &o.clients {
            for &variant in &variants {
                v.push(Point {
                    workload: w,
                    clients,
                    variant,
                });
            }
        }
    }
    v
}

fn settings_line(o: &Options) -> String {
    format!(
        "walbench: {} core(s); {} s per point; settings: {}",
        machine::cores(),
        o.seconds,
        if o.sets.is_empty() {
            "defaults".to_string()
        } else {
            o.sets.join(" ")
        }
    )
}

/// Runs every point; prints progress and the final table.
pub fn run_all(o: &Options) -> Result<Vec<Run>, String> {
    let postmaster = postmaster_path()?;
    println!("{}", settings_line(o));
    let points = points(o);
    let first = points.first().ok_or("no point to measure")?;
    run_point(&postmaster, o, first, o.seconds.min(1.0))?;
    let started = Instant::now();
    let mut runs = Vec::new();
    for (k, p) in points.iter().enumerate() {
        let r = run_point(&postmaster, o, p, o.seconds)?;
        eprintln!(
            "[{}/{}, {:.0} s] {} {} clients {}: {:.0} tps, {:.1} MB/s",
            k + 1,
            points.len(),
            started.elapsed().as_secs_f64(),
            p.variant.name,
            p.workload,
            p.clients,
            r.tps,
            r.bytes as f64 / r.seconds / 1e6
        );
        runs.push(r);
    }
    let files = Files {
        json: o.json.clone(),
        csv: None,
        chart: o.chart.clone(),
    };
    report::publish(&Sweep(&runs), &files)?;
    Ok(runs)
}

fn run_point(postmaster: &Path, o: &Options, p: &Point, seconds: f64) -> Result<Run, String> {
    let spec = PointSpec {
        workload: p.workload.to_string(),
        clients: p.clients,
        seconds,
        sets: o
            .sets
            .iter()
            .cloned()
            .chain(variants::assignments(p.variant.knobs))
            .collect(),
        datadir: o.datadir.clone(),
        temp_base: std::env::temp_dir(),
        keep_at: None,
        worker_cmd: None,
    };
    let m = point::measure(postmaster, &spec).map_err(|e| {
        format!(
            "{} {} clients {}: {e}",
            p.variant.name, p.workload, p.clients
        )
    })?;
    Ok(Run {
        variant: p.variant.name.to_string(),
        workload: p.workload.to_string(),
        clients: p.clients,
        seconds: m.seconds,
        transactions: m.transactions,
        records: m.records,
        bytes: m.bytes,
        wal_syncs: m.wal_syncs,
        tps: m.transactions as f64 / m.seconds,
        observed: m.observed,
    })
}

/// The plain mode's report.
struct Sweep<'a>(&'a [Run]);

impl report::Report for Sweep<'_> {
    fn text(&self) -> String {
        table(self.0)
    }

    fn json(&self) -> String {
        json(self.0)
    }

    fn csv(&self) -> String {
        String::new()
    }

    fn svg(&self) -> String {
        let title = format!("{} core(s)", machine::cores());
        chart::svg("walbench", &title, &panels(self.0))
    }
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

const COLUMNS: [Column; 8] = [
    Column::left("workload", 12),
    Column::right("clients", 7),
    Column::left("variant", 22).gap(2),
    Column::right("tps", 12),
    Column::right("MB/s", 10),
    Column::right("vs modern", 10),
    Column::right("syncs/tx", 12),
    Column::left("top waits", 36).gap(2),
];

/// The ratio of `r` to `modern` at the same workload and client count.
fn vs_modern(runs: &[Run], r: &Run) -> String {
    runs.iter()
        .find(|b| b.variant == "modern" && b.workload == r.workload && b.clients == r.clients)
        .map_or("-".to_string(), |b| {
            format!("{:.2}", r.tps / b.tps.max(1e-9))
        })
}

/// The results as a table: one row per workload, client count and variant,
/// with the ratio to `modern` at the same point when it was measured.
pub fn table(runs: &[Run]) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let syncs = if r.transactions > 0 {
                format!("{:.4}", r.wal_syncs as f64 / r.transactions as f64)
            } else {
                "-".into()
            };
            vec![
                r.workload.clone(),
                r.clients.to_string(),
                r.variant.clone(),
                format!("{:.0}", r.tps),
                format!("{:.1}", r.bytes as f64 / r.seconds / 1e6),
                vs_modern(runs, r),
                syncs,
                r.observed.top_waits(2),
            ]
        })
        .collect();
    format!("\n{}", report::fixed_table(&COLUMNS, &rows))
}

fn run_record(r: &Run) -> Value {
    let mut fields = vec![
        ("variant", Value::str(&r.variant)),
        ("workload", Value::str(&r.workload)),
        ("clients", Value::Int(r.clients.into())),
        ("seconds", Value::Fixed(r.seconds, 3)),
        ("transactions", Value::Int(r.transactions)),
        ("tps", Value::Fixed(r.tps, 1)),
        ("records", Value::Int(r.records)),
        ("bytes", Value::Int(r.bytes)),
        ("wal_syncs", Value::Int(r.wal_syncs)),
        ("cores", Value::Int(machine::cores() as u64)),
    ];
    fields.extend(r.observed.fields(r.transactions));
    Value::Obj(fields)
}

/// `{"runs":[{"variant","workload","clients","seconds","transactions","tps",...,
/// "wait_events":{..},"per_tx":{..}}]}`
pub fn json(runs: &[Run]) -> String {
    report::json_document(vec![(
        "runs",
        Value::List(runs.iter().map(run_record).collect()),
    )])
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cli::parse_plain as parse;

    #[test]
    fn parses_and_rejects() {
        let o = parse("--workload emit:16,emit:100 --clients 1,4 --seconds 0.5 --variant all")
            .unwrap()
            .unwrap();
        assert_eq!(o.workloads.len(), 2);
        assert_eq!(o.clients, vec![1, 4]);
        assert_eq!(pick_variants(&o.variants).len(), VARIANTS.len());
        let o = parse("--clients 1,4 --clients 2").unwrap().unwrap();
        assert_eq!(
            (o.clients, o.workloads),
            (vec![2], vec!["emit:100".to_string()])
        );
        assert_eq!(pick_variants(&o.variants).len(), 2);
        assert!(parse("--clients 0").is_err());
        assert!(parse("--variant nope").is_err());
        assert!(parse("--workload emit:x").is_err());
        assert!(parse("--set bogus=1").is_err());
        assert!(parse("--help").unwrap().is_none());
        assert!(variants_help().contains("modern"));
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
            observed: Default::default(),
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
        assert!(parse("--chart x.png").is_ok());
        assert!(parse("--chart x.gif").is_err());
        assert!(parse("--chart x.svg").unwrap().unwrap().chart.is_some());
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
            observed: Default::default(),
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
            "\"wait_events\":{",
            "\"per_tx\":{",
            "\"lwlock_sleeps\"",
            "\"procarray_lock_acquisitions\"",
            "\"waitlist_lock_acquisitions\"",
            "\"waitlist_entries_scanned\"",
            "\"fdatasyncs\"",
        ] {
            assert!(j.contains(k), "{k} missing in {j}");
        }
        assert!(table(&[]).contains("workload"));
    }
}
