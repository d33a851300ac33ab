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

use crate::cli::{self, Opt};
use crate::point::{self, PointSpec};
use crate::report::{self, Column, Files, Value};
use crate::variants::{self, Variant, VARIANTS};
use crate::{chart, machine, postmaster_path};
use backend::workload::{Workload, WORKLOAD_HELP};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub struct Options {
    pub workloads: Vec<String>,
    pub clients: Vec<u32>,
    pub seconds: f64,
    pub variants: Vec<&'static Variant>,
    pub sets: Vec<String>,
    pub datadir: Option<PathBuf>,
    /// `--json`, `--chart` (no CSV here).
    pub files: Files,
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

#[derive(Clone, Copy)]
enum Key {
    Workload,
    Clients,
    Seconds,
    Variant,
    Set,
    DataDir,
    Json,
    Chart,
}

fn options() -> Vec<Opt<Key>> {
    vec![
        Opt::new(
            Key::Workload,
            "--workload KIND",
            format!("repeatable or comma-separated; {WORKLOAD_HELP} (default emit:100)"),
        )
        .many(),
        Opt::new(
            Key::Clients,
            "--clients LIST",
            "comma-separated backend counts (default 1,2,4,16)",
        ),
        Opt::new(Key::Seconds, "--seconds S", cli::SECONDS_HELP),
        Opt::new(
            Key::Variant,
            "--variant NAME",
            "repeatable or comma-separated, or 'all' (default modern,single-insert-lock)",
        )
        .many(),
        Opt::new(Key::Set, "--set NAME=VALUE", cli::SET_HELP)
            .alias("-c")
            .many(),
        Opt::new(
            Key::DataDir,
            "-D DIR",
            "use this data directory (initialized if empty) instead of a\n\
             fresh temporary one per point",
        ),
        Opt::new(
            Key::Json,
            "--json FILE",
            "also write {\"runs\":[{variant,workload,clients,seconds,transactions,tps},...]}",
        ),
        Opt::new(
            Key::Chart,
            "--chart FILE",
            "also draw TPS against clients (.svg, or .png rendered), a panel per workload, \
             a line per variant",
        ),
    ]
}

pub fn help() -> String {
    let mut variants = String::from("Variants:\n");
    for v in VARIANTS {
        let _ = writeln!(variants, "  {:<22} {}", v.name, v.what);
    }
    cli::help(
        "walbench: measure walshm's WAL throughput per variant, workload and client count",
        &[
            "walbench reproduce NAME [...]   (see walbench reproduce --help)",
            "walbench torture -D DIR [...]   (see walbench torture --help)",
        ],
        "walbench",
        &options(),
        &variants,
    )
}

impl Options {
    fn apply(&mut self, key: Key, v: &str, variant_names: &mut Vec<String>) -> Result<(), String> {
        match key {
            Key::Workload => self.workloads.extend(cli::names(v)),
            Key::Clients => self.clients = cli::clients(v)?,
            Key::Seconds => self.seconds = cli::seconds(v)?,
            Key::Variant => variant_names.extend(cli::names(v)),
            Key::Set => self.sets.push(v.to_string()),
            Key::DataDir => self.datadir = Some(PathBuf::from(v)),
            Key::Json => self.files.json = Some(PathBuf::from(v)),
            Key::Chart => self.files.chart = Some(cli::chart(v)?),
        }
        Ok(())
    }
}

/// The variants named on the command line (`all`: every one).
fn pick_variants(names: &[String]) -> Result<Vec<&'static Variant>, String> {
    if names.is_empty() {
        return pick_variants(&["modern".into(), "single-insert-lock".into()]);
    }
    if names.iter().any(|n| n == "all") {
        return Ok(VARIANTS.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            variants::find(VARIANTS, n).ok_or_else(|| {
                format!(
                    "unknown variant \"{n}\" (valid: {}, all)",
                    variants::names(VARIANTS)
                )
            })
        })
        .collect()
}

pub fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut o = Options {
        workloads: vec![],
        clients: vec![1, 2, 4, 16],
        seconds: 2.0,
        variants: vec![],
        sets: vec![],
        datadir: None,
        files: Files::default(),
    };
    let mut variant_names = vec![];
    let given = cli::parse_with(&options(), 0, args, |key, v| {
        o.apply(key, v, &mut variant_names)
    })?;
    if given.is_none() {
        return Ok(None);
    }
    if o.workloads.is_empty() {
        o.workloads.push("emit:100".into());
    }
    for w in &o.workloads {
        Workload::parse(w)?;
    }
    o.variants = pick_variants(&variant_names)?;
    cli::check_sets(&o.sets)?;
    Ok(Some(o))
}

/// The plain mode.
pub const MODE: cli::Mode<Options> =
    cli::Mode::new("walbench --help", parse, help, |o| run_all(o).map(drop));

/// One point to measure.
struct Point<'a> {
    workload: &'a str,
    clients: u32,
    variant: &'static Variant,
}

/// Every point, workloads outermost, variants innermost.
fn points(o: &Options) -> Vec<Point<'_>> {
    let mut v = vec![];
    for w in &o.workloads {
        for &clients in &o.clients {
            for &variant in &o.variants {
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
    report::publish(&Sweep(&runs), &o.files)?;
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
        assert!(parse(&args("--chart x.png")).is_ok());
        assert!(parse(&args("--chart x.gif")).is_err());
        assert!(parse(&args("--chart x.svg"))
            .unwrap()
            .unwrap()
            .files
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
