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

use crate::experiments::{self, Experiment};
use crate::machine::Machine;
use crate::point::{self, Measured, PointSpec};
use crate::{chart, json_str};
use crate::{option_value, parse_seconds};
use backend::workload::MAX_PAYLOAD;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub struct Options {
    pub experiment: &'static Experiment,
    pub clients: Vec<u32>,
    pub clients_capped: bool,
    pub sizes: Vec<usize>,
    pub seconds: f64,
    pub repeat: u32,
    pub variants: Vec<usize>,
    pub sets: Vec<String>,
    pub json: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    pub chart: Option<PathBuf>,
    pub tmpdir: Option<PathBuf>,
    pub keep_data: Option<PathBuf>,
}

pub fn help() -> String {
    let mut s = String::from(
        "walbench reproduce: rerun a seed's benchmark table on this machine

Usage: walbench reproduce NAME [--clients LIST|seed] [--sizes LIST] [--seconds S]
                [--repeat N] [--variant NAME,...] [--set NAME=VALUE ...]
                [--json FILE] [--csv FILE] [--chart FILE.svg|FILE.png]
                [--tmpdir DIR] [--keep-data DIR]

  --clients LIST   client counts (default: the seed's grid, capped at 128 per core,
                   at least 256; 'seed' runs the seed's full grid)
  --sizes LIST     record payload sizes in bytes (default: the seed's)
  --seconds S      measured seconds per point (default 2)
  --repeat N       runs per point; the table shows the median and min-max (default 3)
  --variant LIST   run only these variants of the experiment
  --set NAME=VALUE extra setting for every run (see postmaster --help)
  --json FILE      {\"reproduce\",\"repeat\",\"machine\",\"runs\":[{variant,workload,clients,
                   seconds,transactions,tps,tps_min,tps_max,latency_us_p50,latency_us_p99,...}]}
  --csv FILE       one line per variant, size and client count
  --chart FILE     TPS against clients (log axis), one line per variant, one panel
                   per size: .svg, or .png (the same chart rendered, with the system's fonts)
  --tmpdir DIR     where the temporary data directories go (default /dev/shm for
                   fsync=off experiments when present, else the system temp dir)
  --keep-data DIR  keep every point's data directory under DIR, with
                   wal_keep_size=100GB so its WAL can be checked with
                   postmaster waldump

Experiments:
",
    );
    for e in experiments::EXPERIMENTS {
        let _ = writeln!(s, "  {:<20} {} ({})", e.name, e.title, e.seed);
        for v in e.variants {
            let _ = writeln!(s, "  {:<22} {:<20} {}", "", v.name, v.what);
        }
    }
    s
}

fn parse_list<T: std::str::FromStr>(v: &str, what: &str) -> Result<Vec<T>, String> {
    v.split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|_| format!("invalid {what} \"{x}\" in \"{v}\""))
        })
        .collect()
}

fn parse_clients(v: &str) -> Result<Vec<u32>, String> {
    let c: Vec<u32> = parse_list(v, "client count")?;
    if let Some(bad) = c.iter().find(|n| !(1..=4096).contains(*n)) {
        return Err(format!(
            "invalid client count {bad} in --clients \"{v}\" (each must be 1..=4096)"
        ));
    }
    Ok(c)
}

fn parse_sizes(e: &Experiment, v: &str) -> Result<Vec<usize>, String> {
    if e.default_sizes().is_empty() {
        return Err(format!(
            "experiment {} runs txid, which has no record size: drop --sizes",
            e.name
        ));
    }
    let s: Vec<usize> = parse_list(v, "size")?;
    if let Some(bad) = s.iter().find(|n| **n > MAX_PAYLOAD) {
        return Err(format!(
            "size {bad} is over the maximum record length: a message payload may be at most \
             {MAX_PAYLOAD} bytes here (PostgreSQL's XLogRecordMaxSize is {} bytes)",
            walformat::MAX_RECORD_LEN
        ));
    }
    Ok(s)
}

/// Parses `reproduce` arguments (after the word `reproduce`); Ok(None) is
/// a request for help.
pub fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut name = None;
    let mut clients = None;
    let mut sizes = None;
    let mut variants = None;
    let mut o = Options {
        experiment: &experiments::EXPERIMENTS[0],
        clients: vec![],
        clients_capped: false,
        sizes: vec![],
        seconds: 2.0,
        repeat: 3,
        variants: vec![],
        sets: vec![],
        json: None,
        csv: None,
        chart: None,
        tmpdir: None,
        keep_data: None,
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let mut val = || option_value(args, &mut i, a);
        match a {
            "-h" | "--help" => return Ok(None),
            "--clients" => clients = Some(val()?),
            "--sizes" => sizes = Some(val()?),
            "--seconds" => o.seconds = parse_seconds(&val()?)?,
            "--repeat" => {
                let v = val()?;
                o.repeat = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| format!("invalid --repeat \"{v}\" (1..=100)"))?;
            }
            "--variant" => variants = Some(val()?),
            "--set" | "-c" => o.sets.push(val()?),
            "--json" => o.json = Some(PathBuf::from(val()?)),
            "--csv" => o.csv = Some(PathBuf::from(val()?)),
            "--chart" => o.chart = Some(PathBuf::from(val()?)),
            "--tmpdir" => o.tmpdir = Some(PathBuf::from(val()?)),
            "--keep-data" => o.keep_data = Some(PathBuf::from(val()?)),
            _ if a.starts_with('-') => return Err(format!("unknown option \"{a}\"")),
            _ if name.is_none() => name = Some(a.to_string()),
            _ => return Err(format!("unexpected argument \"{a}\"")),
        }
        i += 1;
    }
    let name = name.ok_or_else(|| {
        format!(
            "reproduce needs an experiment name (one of: {})",
            experiments::names()
        )
    })?;
    let e = experiments::find(&name).ok_or_else(|| {
        format!(
            "unknown experiment \"{name}\" (valid: {})",
            experiments::names()
        )
    })?;
    o.experiment = e;
    o.clients = match clients.as_deref() {
        None => {
            let d = e.default_clients(crate::machine::cores());
            o.clients_capped = d.len() < e.grid.len();
            d
        }
        Some("seed") => e.grid.to_vec(),
        Some(v) => parse_clients(v)?,
    };
    o.sizes = match sizes {
        None => e.default_sizes(),
        Some(v) => parse_sizes(e, &v)?,
    };
    o.variants = match variants {
        None => (0..e.variants.len()).collect(),
        Some(v) => v
            .split(',')
            .map(|n| {
                e.variants
                    .iter()
                    .position(|x| x.name == n.trim())
                    .ok_or_else(|| {
                        let names: Vec<_> = e.variants.iter().map(|x| x.name).collect();
                        format!(
                            "unknown variant \"{n}\" for {} (valid: {})",
                            e.name,
                            names.join(", ")
                        )
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    let mut s = shmem::Settings::default();
    for a in &o.sets {
        s.set_assignment(a).map_err(|e| e.to_string())?;
    }
    if let Some(c) = &o.chart {
        chart::check_path(c)?;
    }
    Ok(Some(o))
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

/// The data directories' parent: --tmpdir, else /dev/shm for RAM-disk
/// experiments when it is a writable directory, else the temp dir.
fn temp_base(o: &Options) -> PathBuf {
    if let Some(t) = &o.tmpdir {
        return t.clone();
    }
    let shm = Path::new("/dev/shm");
    if o.experiment.ram_disk && shm.is_dir() {
        if let Ok(t) = point::TempDir::new_in(shm) {
            drop(t);
            return shm.to_path_buf();
        }
    }
    std::env::temp_dir()
}

fn sets_for(o: &Options, v: usize) -> Vec<String> {
    let e = o.experiment;
    let mut s: Vec<String> = e.base_sets.iter().map(|x| x.to_string()).collect();
    s.extend(e.variants[v].sets.iter().map(|x| x.to_string()));
    if o.keep_data.is_some() {
        s.push("wal_keep_size=100GB".into());
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
    if let Some(k) = &o.keep_data {
        if std::fs::read_dir(k).is_ok_and(|mut d| d.next().is_some()) {
            return Err(format!(
                "--keep-data {}: the directory must be empty or absent",
                k.display()
            ));
        }
    }
    let e = o.experiment;
    let base = temp_base(o);
    let machine = Machine::probe(o.keep_data.as_deref().unwrap_or(&base));
    let sizes = sizes_or_none(o);
    let total = sizes.len() * o.clients.len() * o.variants.len() * o.repeat as usize;
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
    let mut summaries: Vec<Summary> = Vec::new();
    for &size in &sizes {
        for &c in &o.clients {
            for &v in &o.variants {
                summaries.push(Summary {
                    variant: e.variants[v].name.to_string(),
                    workload: e.workload(size),
                    size,
                    clients: c,
                    per_tx: size.map_or(1, |s| e.per_tx(s)),
                    derived: e.derived(),
                    runs: vec![],
                });
            }
        }
    }
    let spec =
        |size: Option<usize>, c: u32, v: usize, keep: Option<PathBuf>, secs: f64| PointSpec {
            workload: e.workload(size),
            clients: c,
            seconds: secs,
            sets: sets_for(o, v),
            datadir: None,
            temp_base: base.clone(),
            keep_at: keep,
        };
    // A discarded warm-up point: the first server of a run is slower.
    point::measure(
        &postmaster,
        &spec(
            sizes[0],
            o.clients[0],
            o.variants[0],
            None,
            o.seconds.min(0.5),
        ),
    )?;
    let progress = Progress {
        started: Instant::now(),
        total,
        // SAFETY: isatty has no memory effects.
        tty: unsafe { libc::isatty(2) } == 1,
        name: e.name,
        per_point_guess: o.seconds + 0.8,
    };
    let mut k = 0;
    for rep in 0..o.repeat {
        let mut idx = 0;
        for &size in &sizes {
            for &c in &o.clients {
                for &v in &o.variants {
                    k += 1;
                    let label = format!(
                        "{} {} {c} clients, run {}/{}",
                        e.variants[v].name,
                        e.workload(size),
                        rep + 1,
                        o.repeat
                    );
                    progress.show(k, &label);
                    let keep = o.keep_data.as_ref().map(|d| {
                        d.join(format!(
                            "{}-{}-c{c}-r{}",
                            e.variants[v].name,
                            size.map_or("txid".to_string(), |s| s.to_string()),
                            rep + 1
                        ))
                    });
                    let m = point::measure(&postmaster, &spec(size, c, v, keep, o.seconds))
                        .map_err(|err| format!("{label}: {err}"))?;
                    summaries[idx].runs.push(m);
                    idx += 1;
                }
            }
        }
    }
    progress.done();
    print!("{}", table(o, &summaries));
    print!("{}", details(&summaries));
    write_outputs(o, &machine, &summaries)?;
    Ok(summaries)
}

fn write_outputs(o: &Options, machine: &Machine, s: &[Summary]) -> Result<(), String> {
    let write = |p: &Path, text: &str| crate::write_file(p, text.as_bytes());
    if let Some(p) = &o.json {
        write(p, &json(o, machine, s))?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &o.csv {
        write(p, &csv(o, s))?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &o.chart {
        let svg = chart::svg(&chart_title(o), &machine.describe(), &panels(o, s));
        chart::write(p, &svg)?;
        println!("wrote {}", p.display());
    }
    Ok(())
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
    let all: Vec<String> = e
        .base_sets
        .iter()
        .map(|x| x.to_string())
        .chain(o.sets.iter().cloned())
        .collect();
    if all.is_empty() {
        s.push_str("defaults (fsync=on)");
    } else {
        s.push_str(&all.join(" "));
    }
    if e.base_sets.contains(&"fsync=off") {
        s.push_str(" (as the seeds' RAM-disk runs)");
    }
    s
}

fn chart_title(o: &Options) -> String {
    let e = o.experiment;
    format!("walbench reproduce {} ({}): {}", e.name, e.seed, e.title)
}

fn size_label(size: Option<usize>) -> String {
    size.map_or("txid".to_string(), |s| s.to_string())
}

fn new_old(o: &Options) -> Option<(&'static str, &'static str)> {
    let e = o.experiment;
    (o.variants.contains(&0) && o.variants.contains(&1))
        .then(|| (e.variants[0].name, e.variants[1].name))
}

fn find<'a>(s: &'a [Summary], v: &str, size: Option<usize>, c: u32) -> Option<&'a Summary> {
    s.iter()
        .find(|x| x.variant == v && x.size == size && x.clients == c)
}

fn cell(x: &Summary, repeat: u32) -> String {
    if repeat > 1 {
        format!("{:.0} [{:.0}-{:.0}]", x.tps(), x.tps_min(), x.tps_max())
    } else {
        format!("{:.0}", x.tps())
    }
}

/// The seed-style table: rows variant_N_clients, columns sizes, ratio rows.
pub fn table(o: &Options, s: &[Summary]) -> String {
    let sizes = sizes_or_none(o);
    let e = o.experiment;
    let head = if o.sizes.is_empty() {
        "workload".to_string()
    } else {
        "message_size_b".to_string()
    };
    let what = if e.derived() {
        "transactions/s (derived: records / records per transaction)"
    } else {
        "transactions/s"
    };
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    rows.push((head, sizes.iter().map(|z| size_label(*z)).collect()));
    for &c in &o.clients {
        for &v in &o.variants {
            let name = e.variants[v].name;
            let cells = sizes
                .iter()
                .map(|&z| find(s, name, z, c).map_or("-".into(), |x| cell(x, o.repeat)))
                .collect();
            rows.push((format!("{name}_{c}_clients"), cells));
        }
        if let Some((new, old)) = new_old(o) {
            let cells = sizes
                .iter()
                .map(|&z| match (find(s, new, z, c), find(s, old, z, c)) {
                    (Some(a), Some(b)) => format!("{:.2}", a.tps() / b.tps().max(1e-9)),
                    _ => "-".into(),
                })
                .collect();
            rows.push((format!("ratio_{c}_clients ({new}/{old})"), cells));
        }
    }
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let mut widths = vec![0; sizes.len()];
    for (_, cells) in &rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = format!("\n{what}\n");
    for (i, (name, cells)) in rows.iter().enumerate() {
        let _ = write!(out, " {name:<w0$} ");
        for (c, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "| {c:>w$} ");
        }
        out.push('\n');
        if i == 0 {
            let _ = write!(out, "-{}-", "-".repeat(w0));
            for w in &widths {
                let _ = write!(out, "+-{}-", "-".repeat(*w));
            }
            out.push('\n');
        }
    }
    out
}

fn us(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("{:.1}", n as f64 / 1000.0))
}

/// Per-point details: records/s, bytes/s, latency, CPU and memory.
pub fn details(s: &[Summary]) -> String {
    let mut out = format!(
        "\n{:<20} {:>11} {:>7} {:>12} {:>12} {:>12} {:>11} {:>9} {:>9} {:>6} {:>8}\n",
        "variant",
        "workload",
        "clients",
        "tps",
        "records/s",
        "MB/s",
        "p50 us",
        "p99 us",
        "rec/tx",
        "cpu",
        "mem MB"
    );
    for x in s {
        let m = x.median();
        let _ = writeln!(
            out,
            "{:<20} {:>11} {:>7} {:>12.0} {:>12.0} {:>12.1} {:>11} {:>9} {:>9} {:>6.2} {:>8.0}",
            x.variant,
            x.workload,
            x.clients,
            x.tps(),
            m.records as f64 / m.seconds,
            m.bytes as f64 / m.seconds / 1e6,
            us(m.latency_ns_p50),
            us(m.latency_ns_p99),
            x.per_tx,
            m.cpu_cores,
            m.mem_bytes as f64 / 1e6
        );
    }
    out.push_str(
        "latency: one workload iteration (one record for emit, one transaction for txid), \
         sampled 1 in 8; cpu: cores busy in the server's processes\n",
    );
    out
}

fn opt_num(v: Option<u64>) -> String {
    v.map_or("null".into(), |n| format!("{:.3}", n as f64 / 1000.0))
}

fn run_json(x: &Summary) -> String {
    let m = x.median();
    let tps_runs: Vec<String> = x
        .runs
        .iter()
        .map(|r| format!("{:.1}", x.tps_of(r)))
        .collect();
    format!(
        "{{\"variant\":{},\"workload\":{},\"size\":{},\"clients\":{},\"seconds\":{:.3},\
         \"transactions\":{},\"tps\":{:.1},\"tps_min\":{:.1},\"tps_max\":{:.1},\"tps_runs\":[{}],\
         \"latency_us_p50\":{},\"latency_us_p99\":{},\"records\":{},\"bytes\":{},\
         \"records_per_s\":{:.1},\"bytes_per_s\":{:.1},\"records_per_transaction\":{},\
         \"transactions_derived\":{},\"wal_syncs\":{},\"wal_writes\":{},\"preinit_pages\":{},\
         \"backend_init_pages\":{},\"buffer_full_waits\":{},\"records_at_exit\":{},\
         \"cpu_cores\":{:.3},\"mem_mb\":{:.1},\"repeat\":{},\"cores\":{}}}",
        json_str(&x.variant),
        json_str(&x.workload),
        x.size.map_or("null".into(), |s| s.to_string()),
        x.clients,
        m.seconds,
        x.transactions_of(m),
        x.tps(),
        x.tps_min(),
        x.tps_max(),
        tps_runs.join(","),
        opt_num(m.latency_ns_p50),
        opt_num(m.latency_ns_p99),
        m.records,
        m.bytes,
        m.records as f64 / m.seconds,
        m.bytes as f64 / m.seconds,
        x.per_tx,
        x.derived,
        m.wal_syncs,
        m.wal_writes,
        m.preinit_pages,
        m.backend_init_pages,
        m.buffer_full_waits,
        m.records_at_exit,
        m.cpu_cores,
        m.mem_bytes as f64 / 1e6,
        x.runs.len(),
        crate::machine::cores()
    )
}

/// The JSON document: the plain mode's `runs` schema, extended.
pub fn json(o: &Options, machine: &Machine, s: &[Summary]) -> String {
    let e = o.experiment;
    let mut out = String::new();
    let sets: Vec<String> = e
        .base_sets
        .iter()
        .map(|x| json_str(x))
        .chain(o.sets.iter().map(|x| json_str(x)))
        .collect();
    let _ = write!(
        out,
        "{{\"reproduce\":{},\"seed\":{},\"title\":{},\"repeat\":{},\"seconds_per_point\":{},\
         \"settings\":[{}],\"note\":{},\"machine\":{{\"cpu_model\":{},\"cores\":{},\
         \"mem_total_mb\":{},\"kernel\":{},\"data_dir\":{},\"data_fs\":{}}},\"runs\":[",
        json_str(e.name),
        json_str(e.seed),
        json_str(e.title),
        o.repeat,
        o.seconds,
        sets.join(","),
        json_str(e.note),
        json_str(&machine.cpu_model),
        machine.cores,
        machine.mem_total_mb,
        json_str(&machine.kernel),
        json_str(&machine.data_dir),
        json_str(&machine.data_fs)
    );
    for (i, x) in s.iter().enumerate() {
        out.push_str(if i > 0 { ",\n  " } else { "\n  " });
        out.push_str(&run_json(x));
    }
    out.push_str("\n],\"ratios\":[");
    let mut first = true;
    if let Some((new, old)) = new_old(o) {
        for z in sizes_or_none(o) {
            for &c in &o.clients {
                if let (Some(a), Some(b)) = (find(s, new, z, c), find(s, old, z, c)) {
                    out.push_str(if first { "\n  " } else { ",\n  " });
                    first = false;
                    let _ = write!(
                        out,
                        "{{\"size\":{},\"clients\":{c},\"new\":{},\"old\":{},\"ratio\":{:.4}}}",
                        z.map_or("null".into(), |v| v.to_string()),
                        json_str(new),
                        json_str(old),
                        a.tps() / b.tps().max(1e-9)
                    );
                }
            }
        }
    }
    out.push_str("\n]}\n");
    out
}

pub const CSV_HEADER: &str = "experiment,variant,workload,size,clients,repeat,seconds,transactions,tps,tps_min,tps_max,records,records_per_s,bytes_per_s,records_per_transaction,transactions_derived,latency_us_p50,latency_us_p99,cpu_cores,mem_mb,wal_syncs";

pub fn csv(o: &Options, s: &[Summary]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    let blank = |v: Option<u64>| v.map_or(String::new(), |n| format!("{:.3}", n as f64 / 1000.0));
    for x in s {
        let m = x.median();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{:.3},{},{:.1},{:.1},{:.1},{},{:.1},{:.1},{},{},{},{},{:.3},{:.1},{}",
            o.experiment.name,
            x.variant,
            x.workload,
            x.size.map_or(String::new(), |v| v.to_string()),
            x.clients,
            x.runs.len(),
            m.seconds,
            x.transactions_of(m),
            x.tps(),
            x.tps_min(),
            x.tps_max(),
            m.records,
            m.records as f64 / m.seconds,
            m.bytes as f64 / m.seconds,
            x.per_tx,
            x.derived,
            blank(m.latency_ns_p50),
            blank(m.latency_ns_p99),
            m.cpu_cores,
            m.mem_bytes as f64 / 1e6,
            m.wal_syncs
        );
    }
    out
}

/// Chart panels: one per size, one series per variant.
pub fn panels(o: &Options, s: &[Summary]) -> Vec<chart::Panel> {
    let e = o.experiment;
    sizes_or_none(o)
        .into_iter()
        .map(|z| chart::Panel {
            title: match z {
                Some(b) => format!("{b}-byte records"),
                None => "txid".to_string(),
            },
            y_label: if e.derived() {
                "transactions/s (derived)".into()
            } else {
                "transactions/s".into()
            },
            series: o
                .variants
                .iter()
                .map(|&v| chart::Series {
                    name: e.variants[v].name.to_string(),
                    points: o
                        .clients
                        .iter()
                        .filter_map(|&c| find(s, e.variants[v].name, z, c))
                        .map(|x| chart::Point {
                            x: x.clients as f64,
                            y: x.tps(),
                            lo: x.tps_min(),
                            hi: x.tps_max(),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn err(s: &str) -> String {
        match parse(&args(s)) {
            Err(e) => e,
            Ok(_) => panic!("{s} parsed"),
        }
    }

    #[test]
    fn parses_and_rejects() {
        let o = parse(&args(
            "insert-locks --sizes 20 --clients 1,2 --seconds 0.2 --repeat 1",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(o.sizes, vec![20]);
        assert_eq!(o.clients, vec![1, 2]);
        assert_eq!(o.variants.len(), 4);
        let o = parse(&args("lwlock-queue --clients seed"))
            .unwrap()
            .unwrap();
        assert_eq!(o.clients.last(), Some(&4096));
        assert!(err("nope").contains("unknown experiment \"nope\""));
        assert!(err("").contains("needs an experiment name"));
        assert!(err("lwlock-queue --clients 0").contains("1..=4096"));
        assert!(err("lwlock-queue --clients 1,x").contains("invalid client count"));
        assert!(err("atomic-insertingat --sizes 99999999999").contains("maximum record length"));
        assert!(err("lwlock-queue --sizes 16").contains("no record size"));
        assert!(err("group-xid-clear --variant bogus").contains("unknown variant"));
        assert!(err("group-xid-clear --chart x.jpg").contains(".svg"));
        assert!(err("group-xid-clear --repeat 0").contains("--repeat"));
        assert!(err("group-xid-clear --set nope=1").contains("nope"));
        assert!(parse(&args("group-xid-clear --help")).unwrap().is_none());
        assert!(help().contains("lockfree-reserve"));
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
        let o = parse(&args(
            "atomic-insertingat --sizes 16 --clients 4 --repeat 3",
        ))
        .unwrap()
        .unwrap();
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
            "\"latency_us_p50\":1.500",
            "\"latency_us_p99\":null",
            "\"ratio\":2.0000",
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
