//! `walbench reproduce NAME`: runs one seed's experiment on this machine and
//! prints it the way the seed printed it (one row per variant and client
//! count, one column per size, a new / old ratio row), with medians of
//! `--repeat` runs and their min–max, latency percentiles, the CPU and
//! memory of the server's processes, and the machine facts on top; writes
//! JSON, CSV and an SVG chart on request.
//!
//! Invariants: repeats are interleaved (every variant of a point runs once
//! before any runs twice) so drift hits all variants alike; each summary's
//! numbers are those of its median run (the lower median for an even
//! `--repeat`), so that transactions, records and seconds stay consistent;
//! where the seed's transaction is many records, transactions are derived as
//! records / records-per-transaction and marked so.
//!
//! This module reads the command line and runs the grid; `output` renders
//! the tables, JSON, CSV and chart (through `crate::report`).

mod output;

use crate::cli;
use crate::experiments::{self, Experiment, FSYNC_OFF};
use crate::machine::Machine;
use crate::point::{self, Measured, PointSpec};
use crate::report::{self, Files};
use crate::variants::{self, Variant};
use backend::workload::MAX_PAYLOAD;
pub use output::{csv, details, json, panels, table, CSV_HEADER};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `walbench reproduce`'s options: what the command line gives, and what
/// `check` resolves from it for the experiment (`#[arg(skip)]` fields).
#[derive(clap::Args)]
pub struct Options {
    /// The experiment to rerun (the list below)
    #[arg(value_name = "NAME", value_parser = experiment)]
    pub experiment: &'static Experiment,
    /// Client counts [default: the seed's grid, capped at 128 per core, at
    /// least 256; 'seed' runs the seed's full grid]
    #[arg(long = "clients", value_name = "LIST")]
    clients_given: Option<String>,
    #[arg(skip)]
    pub clients: Vec<u32>,
    #[arg(skip)]
    pub clients_capped: bool,
    /// Record payload sizes in bytes [default: the seed's]
    #[arg(long = "sizes", value_name = "LIST", value_delimiter = ',', value_parser = size,
          action = clap::ArgAction::Set)]
    sizes_given: Option<Vec<usize>>,
    #[arg(skip)]
    pub sizes: Vec<usize>,
    /// Measured seconds per point
    #[arg(long, value_name = "S", default_value = "2", value_parser = cli::seconds)]
    pub seconds: f64,
    /// Runs per point; the table shows the median and min-max (1..=100)
    #[arg(long, value_name = "N", default_value = "3",
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Run only these variants of the experiment (comma-separated)
    #[arg(long = "variant", value_name = "LIST", value_delimiter = ',',
          action = clap::ArgAction::Set)]
    variants_given: Option<Vec<String>>,
    #[arg(skip)]
    pub variants: Vec<&'static Variant>,
    #[arg(long = "set", short = 'c', value_name = "NAME=VALUE", value_parser = cli::setting,
          help = cli::SET_HELP)]
    pub sets: Vec<String>,
    /// Write {"reproduce","repeat","machine","runs":[{variant,workload,clients,
    /// seconds,transactions,tps,tps_min,tps_max,latency_us_p50,latency_us_p99,...}]}
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one line per variant, size and client count
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw TPS against clients (log axis), one line per variant, one panel
    /// per size: .svg, or .png (the same chart rendered, with the system's
    /// fonts)
    #[arg(long, value_name = "FILE", value_parser = cli::chart)]
    pub chart: Option<PathBuf>,
    /// Where the temporary data directories go [default: /dev/shm for
    /// fsync=off experiments when present, else the system temp dir]
    #[arg(long, value_name = "DIR")]
    pub tmpdir: Option<PathBuf>,
    /// Keep every point's data directory under DIR, with wal_keep_size=100GB
    /// so its WAL can be checked with postmaster waldump
    #[arg(long, value_name = "DIR")]
    pub keep_data: Option<PathBuf>,
}

/// The setting that keeps every point's WAL for `--keep-data`.
const KEEP_ALL_WAL: &str = "wal_keep_size=100GB";

/// The list `--help` ends with: each experiment, its seed and variants.
pub fn experiments_help() -> String {
    let mut list = String::from("Experiments:\n");
    for e in experiments::EXPERIMENTS {
        let _ = writeln!(list, "  {:<20} {} ({})", e.name, e.title, e.seed);
        for v in e.variants {
            let _ = writeln!(list, "  {:<22} {:<20} {}", "", v.name, v.what);
        }
    }
    list
}

/// A `--sizes` item: at most a message's largest payload.
fn size(v: &str) -> Result<usize, String> {
    let s: usize = cli::item(v)?;
    if s > MAX_PAYLOAD {
        return Err(format!(
            "over the maximum record length: a message payload may be at most \
             {MAX_PAYLOAD} bytes here (PostgreSQL's XLogRecordMaxSize is {} bytes)",
            walformat::MAX_RECORD_LEN
        ));
    }
    Ok(s)
}

/// The experiment named on the command line.
fn experiment(name: &str) -> Result<&'static Experiment, String> {
    experiments::find(name)
        .ok_or_else(|| format!("unknown experiment (valid: {})", experiments::names()))
}

/// Resolves client counts, sizes and variants for the experiment.
pub fn check(mut o: Options) -> Result<Options, String> {
    let e = o.experiment;
    o.clients = match o.clients_given.as_deref() {
        None => {
            let d = e.default_clients(crate::machine::cores());
            o.clients_capped = d.len() < e.grid.len();
            d
        }
        Some("seed") => e.grid.to_vec(),
        Some(v) => v
            .split(',')
            .map(cli::client_count)
            .collect::<Result<_, _>>()?,
    };
    o.sizes = match o.sizes_given.take() {
        None => e.default_sizes(),
        Some(_) if e.default_sizes().is_empty() => {
            return Err(format!(
                "experiment {} runs txid, which has no record size: drop --sizes",
                e.name
            ))
        }
        Some(s) => s,
    };
    o.variants = match &o.variants_given {
        None => e.variants.iter().collect(),
        Some(names) => names
            .iter()
            .map(|n| experiment_variant(e, n.trim()))
            .collect::<Result<_, _>>()?,
    };
    Ok(o)
}

fn experiment_variant(e: &'static Experiment, name: &str) -> Result<&'static Variant, String> {
    e.variant(name).ok_or_else(|| {
        format!(
            "unknown variant \"{name}\" for {} (valid: {})",
            e.name,
            variants::names(e.variants)
        )
    })
}

/// Parses `reproduce` arguments (after the word `reproduce`) and resolves
/// them for the experiment; Ok(None) is a request for help.
pub fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let pick = |m| match m {
        cli::Mode::Reproduce(o) => Some(o),
        _ => None,
    };
    cli::parse_mode("reproduce", args, pick)?
        .map(check)
        .transpose()
}

/// `walbench reproduce`.
pub fn run_mode(o: &Options) -> Result<(), String> {
    run(o).map(drop)
}

/// One point of the grid with its runs.
#[derive(Clone, Debug)]
pub struct Summary {
    pub variant: String,
    pub workload: String,
    pub size: Option<usize>,
    pub clients: u32,
    pub per_tx: u64,
    pub derived: bool,
    pub runs: Vec<Measured>,
}

impl Summary {
    /// Transactions of a run (derived from records where the seed's
    /// transaction is many records).
    pub fn transactions_of(&self, m: &Measured) -> u64 {
        if self.derived {
            m.records / self.per_tx
        } else {
            m.transactions
        }
    }

    pub fn tps_of(&self, m: &Measured) -> f64 {
        let tx = if self.derived {
            m.records as f64 / self.per_tx as f64
        } else {
            m.transactions as f64
        };
        tx / m.seconds.max(1e-9)
    }

    fn sorted_tps(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.runs.iter().map(|m| self.tps_of(m)).collect();
        v.sort_by(f64::total_cmp);
        v
    }

    /// The median run (lower median for an even count).
    pub fn median(&self) -> &Measured {
        let mut idx: Vec<usize> = (0..self.runs.len()).collect();
        idx.sort_by(|&a, &b| {
            self.tps_of(&self.runs[a])
                .total_cmp(&self.tps_of(&self.runs[b]))
        });
        &self.runs[idx[(idx.len() - 1) / 2]]
    }

    pub fn tps(&self) -> f64 {
        self.tps_of(self.median())
    }

    pub fn tps_min(&self) -> f64 {
        self.sorted_tps().first().copied().unwrap_or(0.0)
    }

    pub fn tps_max(&self) -> f64 {
        self.sorted_tps().last().copied().unwrap_or(0.0)
    }
}

impl Summary {
    /// A point of the grid before its first run.
    fn empty(e: &Experiment, variant: &Variant, size: Option<usize>, clients: u32) -> Summary {
        Summary {
            variant: variant.name.to_string(),
            workload: e.workload(size),
            size,
            clients,
            per_tx: size.map_or(1, |s| e.per_tx(s)),
            derived: e.derived(),
            runs: vec![],
        }
    }
}

/// The data directories' parent: --tmpdir, else /dev/shm for RAM-disk
/// experiments when it is a writable directory, else the temp dir.
fn temp_base(o: &Options) -> PathBuf {
    if let Some(t) = &o.tmpdir {
        return t.clone();
    }
    let shm = Path::new("/dev/shm");
    if o.experiment.ram_disk && shm.is_dir() {
        if let Ok(t) = point::temp_dir_in(shm) {
            drop(t);
            return shm.to_path_buf();
        }
    }
    std::env::temp_dir()
}

/// The `--set` assignments of a point of `variant`: the experiment's,
/// the variant's, then the command line's (later wins).
fn sets_for(o: &Options, variant: &Variant) -> Vec<String> {
    let mut s = o.experiment.base_assignments();
    s.extend(variants::assignments(variant.knobs));
    if o.keep_data.is_some() {
        s.push(KEEP_ALL_WAL.into());
    }
    s.extend(o.sets.iter().cloned());
    s
}

fn sizes_or_none(o: &Options) -> Vec<Option<usize>> {
    if o.sizes.is_empty() {
        vec![None]
    } else {
        o.sizes.iter().map(|s| Some(*s)).collect()
    }
}

/// Progress on one line of stderr (rewritten in place on a terminal).
struct Progress {
    started: Instant,
    total: usize,
    tty: bool,
    name: &'static str,
    per_point_guess: f64,
}

impl Progress {
    fn new(o: &Options, total: usize) -> Progress {
        Progress {
            started: Instant::now(),
            total,
            tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            name: o.experiment.name,
            per_point_guess: o.seconds + 0.8,
        }
    }

    fn show(&self, k: usize, what: &str) {
        let el = self.started.elapsed().as_secs_f64();
        let per = if k > 1 {
            el / (k - 1) as f64
        } else {
            self.per_point_guess
        };
        let left = per * (self.total + 1 - k) as f64;
        let line = format!(
            "[{}] point {k}/{} ({what}), elapsed {}, ~{} left",
            self.name,
            self.total,
            fmt_dur(el),
            fmt_dur(left)
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    fn done(&self) {
        if self.tty {
            eprintln!(
                "\r\x1b[2K[{}] {} points in {}",
                self.name,
                self.total,
                fmt_dur(self.started.elapsed().as_secs_f64())
            );
        }
    }
}

pub fn fmt_dur(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Runs the whole grid; prints the tables and writes the requested files.
pub fn run(o: &Options) -> Result<Vec<Summary>, String> {
    let postmaster = crate::postmaster_path()?;
    check_keep_data(o)?;
    let base = temp_base(o);
    let machine = Machine::probe(o.keep_data.as_deref().unwrap_or(&base));
    print_header(o, &machine);
    let mut summaries = grid(o);
    let bench = Bench {
        o,
        postmaster,
        base,
    };
    bench.warm_up(summaries.first().ok_or("no point to measure")?)?;
    bench.measure_repeats(&mut summaries)?;
    let files = Files {
        json: o.json.clone(),
        csv: o.csv.clone(),
        chart: o.chart.clone(),
    };
    report::publish(&output::Reproduced::new(o, &machine, &summaries), &files)?;
    Ok(summaries)
}

fn check_keep_data(o: &Options) -> Result<(), String> {
    match &o.keep_data {
        Some(k) if std::fs::read_dir(k).is_ok_and(|mut d| d.next().is_some()) => Err(format!(
            "--keep-data {}: the directory must be empty or absent",
            k.display()
        )),
        _ => Ok(()),
    }
}

fn print_header(o: &Options, machine: &Machine) {
    let e = o.experiment;
    println!(
        "== walbench reproduce {} ({}): {} ==",
        e.name, e.seed, e.title
    );
    println!("{}", machine.describe());
    println!("{}", settings_line(o));
    if o.clients_capped {
        println!(
            "clients capped at {} for {} core(s); the seed's grid is {} (--clients seed)",
            experiments::client_cap(machine.cores),
            machine.cores,
            join(e.grid)
        );
    }
    println!("{}", e.note);
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn settings_line(o: &Options) -> String {
    let e = o.experiment;
    let mut s = format!(
        "{} s per point, median of {} run(s) [min-max]; settings: ",
        o.seconds, o.repeat
    );
    let mut all = e.base_assignments();
    all.extend(o.sets.iter().cloned());
    if all.is_empty() {
        s.push_str("defaults (fsync=on)");
    } else {
        s.push_str(&all.join(" "));
    }
    if e.base.contains(&FSYNC_OFF) {
        s.push_str(" (as the seeds' RAM-disk runs)");
    }
    s
}

/// Every point of the grid, sizes outermost, variants innermost, each
/// without runs yet.
fn grid(o: &Options) -> Vec<Summary> {
    let mut v = vec![];
    for size in sizes_or_none(o) {
        for &c in &o.clients {
            for variant in &o.variants {
                v.push(Summary::empty(o.experiment, variant, size, c));
            }
        }
    }
    v
}

fn size_label(size: Option<usize>) -> String {
    size.map_or("txid".to_string(), |s| s.to_string())
}

/// What every point of a run shares.
struct Bench<'a> {
    o: &'a Options,
    postmaster: PathBuf,
    /// Where the temporary data directories go.
    base: PathBuf,
}

impl Bench<'_> {
    fn spec(
        &self,
        s: &Summary,
        seconds: f64,
        keep_at: Option<PathBuf>,
    ) -> Result<PointSpec, String> {
        let variant = experiment_variant(self.o.experiment, &s.variant)?;
        Ok(PointSpec {
            workload: s.workload.clone(),
            clients: s.clients,
            seconds,
            sets: sets_for(self.o, variant),
            datadir: None,
            temp_base: self.base.clone(),
            keep_at,
            worker_cmd: None,
        })
    }

    /// A discarded point: the first server of a run is slower.
    fn warm_up(&self, first: &Summary) -> Result<(), String> {
        let spec = self.spec(first, self.o.seconds.min(0.5), None)?;
        point::measure(&self.postmaster, &spec).map(drop)
    }

    /// Runs every point `--repeat` times, interleaved: each repetition
    /// goes once through the whole grid.
    fn measure_repeats(&self, summaries: &mut [Summary]) -> Result<(), String> {
        let o = self.o;
        let progress = Progress::new(o, summaries.len() * o.repeat as usize);
        let mut k = 0;
        for rep in 1..=o.repeat {
            for s in summaries.iter_mut() {
                k += 1;
                let label = format!(
                    "{} {} {} clients, run {rep}/{}",
                    s.variant, s.workload, s.clients, o.repeat
                );
                progress.show(k, &label);
                let m = self
                    .measure_once(s, rep)
                    .map_err(|e| format!("{label}: {e}"))?;
                s.runs.push(m);
            }
        }
        progress.done();
        Ok(())
    }

    fn measure_once(&self, s: &Summary, rep: u32) -> Result<Measured, String> {
        let keep = self.o.keep_data.as_ref().map(|d| {
            d.join(format!(
                "{}-{}-c{}-r{rep}",
                s.variant,
                size_label(s.size),
                s.clients
            ))
        });
        point::measure(&self.postmaster, &self.spec(s, self.o.seconds, keep)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn parse(s: &str) -> Result<Options, String> {
        let args: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        super::parse(&args).map(Option::unwrap)
    }

    fn err(s: &str) -> String {
        match parse(s) {
            Err(e) => e,
            Ok(_) => panic!("{s} parsed"),
        }
    }

    #[test]
    fn parses_and_rejects() {
        let o = parse("insert-locks --sizes 20 --clients 1,2 --seconds 0.2 --repeat 1").unwrap();
        assert_eq!(o.sizes, vec![20]);
        assert_eq!(o.clients, vec![1, 2]);
        assert_eq!(o.variants.len(), 4);
        let o = parse("insert-locks --sizes 20 --sizes 30,40").unwrap();
        assert_eq!(o.sizes, vec![30, 40]);
        let o = parse("lwlock-queue --clients seed").unwrap();
        assert_eq!(o.clients.last(), Some(&4096));
        assert!(err("nope").contains("unknown experiment"));
        assert!(err("").contains("<NAME>"));
        assert!(err("lwlock-queue --clients 0").contains("1..=4096"));
        assert!(err("lwlock-queue --clients 1,x").contains("invalid client count"));
        assert!(err("atomic-insertingat --sizes 99999999999").contains("maximum record length"));
        assert!(err("lwlock-queue --sizes 16").contains("no record size"));
        assert!(err("group-xid-clear --variant bogus").contains("unknown variant"));
        assert!(err("group-xid-clear --chart x.jpg").contains(".svg"));
        assert!(err("group-xid-clear --repeat 0").contains("--repeat"));
        assert!(err("group-xid-clear --set nope=1").contains("nope"));
        assert!(super::parse(&["--help".into()]).unwrap().is_none());
        assert!(experiments_help().contains("lockfree-reserve"));
    }

    fn measured(tps: u64) -> Measured {
        Measured {
            seconds: 1.0,
            transactions: tps,
            records: tps * 10,
            bytes: tps * 100,
            latency_ns_p50: Some(1500),
            ..Measured::default()
        }
    }

    #[test]
    fn medians_tables_and_files() {
        let o = parse("atomic-insertingat --sizes 16 --clients 4 --repeat 3").unwrap();
        let mk = |v: &str, t: [u64; 3]| Summary {
            variant: v.into(),
            workload: "emit:16".into(),
            size: Some(16),
            clients: 4,
            per_tx: 1,
            derived: false,
            runs: t.iter().map(|&x| measured(x)).collect(),
        };
        let s = vec![
            mk("atomic", [300, 100, 200]),
            mk("waitlist", [100, 50, 150]),
        ];
        assert_eq!(s[0].tps(), 200.0);
        assert_eq!((s[0].tps_min(), s[0].tps_max()), (100.0, 300.0));
        let t = table(&o, &s);
        assert!(t.contains("atomic_4_clients"), "{t}");
        assert!(t.contains("200 [100-300]"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.contains("ratio_4_clients (atomic/waitlist)")
                    && l.trim_end().ends_with("2.00")),
            "{t}"
        );
        let m = Machine::probe(Path::new("/"));
        let j = json(&o, &m, &s);
        for k in [
            "\"reproduce\":\"atomic-insertingat\"",
            "\"repeat\":3",
            "\"tps_min\":100.0",
            "\"latency_us_p50\":1.5",
            "\"latency_us_p99\":null",
            "\"ratio\":2.0",
        ] {
            assert!(j.contains(k), "{k} missing in {j}");
        }
        let c = csv(&o, &s);
        assert_eq!(c.lines().count(), 3);
        assert!(c.starts_with(CSV_HEADER));
        let derived = Summary {
            per_tx: 5,
            derived: true,
            ..mk("atomic", [1, 2, 3])
        };
        assert_eq!(derived.transactions_of(&measured(10)), 20);
        assert!(details(&s).contains("waitlist"));
        assert_eq!(fmt_dur(125.0), "2m05s");
    }
}
