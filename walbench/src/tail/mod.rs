//! `walbench tail`: how fast a committed message reaches a reader, per
//! read path, at fixed producer rates, and the most a path delivers.
//!
//! Paths: `library` and `library-inserted` (the worker library's readers,
//! flushed and inserted modes: module `library`), `recvlogical-walshm`
//! (PostgreSQL 15's pg_recvlogical with test_decoding against walshm) and
//! `recvlogical-pg15` (the same against PostgreSQL 15, when its programs
//! are installed).
//!
//! Method, the same for every path: producers commit one transactional
//! message at a time (`pg_logical_emit_message(true, ...)` in autocommit,
//! or a library transaction) on a schedule: message i of a producer is
//! due at start + i / rate; its content carries its sequence number and
//! that due time (CLOCK_MONOTONIC, one clock for every process of the
//! machine). The reader's side takes the time a message arrives and
//! records arrival - due: a stalled producer or server shows as latency
//! (no coordinated omission), not as a gap. After the window the reader
//! gets up to 5 s to drain; what was acknowledged and never arrived is
//! `lost`. `max_rate`: the read path's own speed: producers without a
//! schedule write a backlog for the same window while no reader streams,
//! then the reader starts; messages per second from its start to the last
//! arrival.
//!
//! Both servers run with the same `--set` settings (default
//! `fsync=off`: the read side is measured, not the disk; give
//! `--set fsync=on` to include durable commits).
//!
//! JSON (`--json FILE`): `{"machine": ..., "runs": [{"path", "rate",
//! "size", "delivered", "lost", "latency_us": {"p50", "p90", "p99",
//! "p999", "max"}, "max_rate", "after_return_us"}, ...]}`;
//! `after_return_us` (library paths; null for the others): from the
//! producer's call returning to the delivery, the reader's own share.

pub mod library;
pub mod recvlogical;
pub mod servers;
pub mod wire;

use crate::cli;
use std::path::PathBuf;
use std::time::Duration;

/// Every path, in the order they run.
pub const PATHS: [&str; 4] = [
    "library",
    "library-inserted",
    "recvlogical-walshm",
    "recvlogical-pg15",
];

/// `walbench tail`'s options.
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// Comma-separated producer rates, messages/s
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1000,10000",
          value_parser = rate, action = clap::ArgAction::Set)]
    pub rates: Vec<u64>,
    /// Message bytes
    #[arg(long, value_name = "B", default_value = "64", value_parser = size)]
    pub size: usize,
    /// Measured seconds per run
    #[arg(long, value_name = "S", default_value = "3", value_parser = cli::seconds)]
    pub seconds: f64,
    /// Write the runs as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw p99 latency against rate per path (.svg or .png; whiskers: p50
    /// to p99.9)
    #[arg(long, value_name = "FILE", value_parser = cli::chart)]
    pub chart: Option<PathBuf>,
    /// Read paths (recvlogical-pg15 runs only when PostgreSQL 15 is
    /// installed)
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_values_t = PATHS.map(String::from),
          value_parser = PATHS, action = clap::ArgAction::Set)]
    pub paths: Vec<String>,
    /// A setting for both servers (repeatable)
    #[arg(
        long = "set",
        short = 'c',
        value_name = "NAME=VALUE",
        default_value = "fsync=off"
    )]
    pub sets: Vec<String>,
}

/// The smallest message: "seq due_ns " and padding.
const MIN_SIZE: usize = 40;

/// A `--rates` item: 1..=1000000 messages/s.
fn rate(v: &str) -> Result<u64, String> {
    cli::item::<u64>(v)
        .ok()
        .filter(|r| (1..=1_000_000).contains(r))
        .ok_or_else(|| "each rate 1..=1000000".to_string())
}

/// A `--size`: MIN_SIZE..=1 MiB.
fn size(v: &str) -> Result<usize, String> {
    v.parse()
        .ok()
        .filter(|s| (MIN_SIZE..=1 << 20).contains(s))
        .ok_or_else(|| format!("{MIN_SIZE}..=1048576"))
}

/// Latency percentiles, microseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    /// From arrival - due times in nanoseconds.
    pub fn of(mut ns: Vec<u64>) -> Latency {
        if ns.is_empty() {
            return Latency::default();
        }
        ns.sort_unstable();
        let at = |q: f64| {
            let i = ((ns.len() as f64 * q).ceil() as usize).clamp(1, ns.len()) - 1;
            ns[i] as f64 / 1000.0
        };
        Latency {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: ns[ns.len() - 1] as f64 / 1000.0,
        }
    }
}

/// One run: a path at a rate.
#[derive(Clone, Debug)]
pub struct Run {
    pub path: String,
    pub rate: u64,
    pub size: usize,
    pub delivered: u64,
    pub lost: u64,
    pub latency: Latency,
    /// Library paths: from the producer's COMMIT (or emit) returning to
    /// the delivery (the reader's own share of the latency).
    pub after_return: Option<Latency>,
    pub max_rate: f64,
}

/// What a paced or unpaced window measured.
#[derive(Clone, Debug, Default)]
pub struct Window {
    /// Messages acknowledged to the producers.
    pub acked: u64,
    /// Distinct acknowledged messages the reader got.
    pub delivered: u64,
    /// arrival - due of each delivered message, ns.
    pub latencies_ns: Vec<u64>,
    /// Seconds from the first due time to the last arrival.
    pub elapsed: f64,
}

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every process).
pub fn now_ns() -> u64 {
    shmem::clock::monotonic_ns()
}

/// A message's content: "SEQ DUE_NS " padded with 'x' to `size` bytes.
pub fn content(seq: u64, due_ns: u64, size: usize) -> String {
    let mut s = format!("{seq} {due_ns} ");
    while s.len() < size {
        s.push('x');
    }
    s
}

/// (seq, due_ns) of a content.
pub fn parse_content(text: &str) -> Option<(u64, u64)> {
    let mut it = text.split(' ');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// How long the reader may drain after the window.
pub const DRAIN: Duration = Duration::from_secs(5);

/// Producers for `rate` messages/s: one per 2,500/s, at most 16.
pub fn producers_for(rate: u64) -> u64 {
    rate.div_ceil(2500).clamp(1, 16)
}

pub fn run_mode(o: &Options) -> Result<(), String> {
    let runs = run(o)?;
    println!();
    print!("{}", table(&runs));
    if let Some(path) = &o.json {
        crate::report::write_file(path, json(&runs).as_bytes())?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &o.chart {
        crate::chart::write(path, &chart(&runs))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// p99 latency against the rate, one line per path (whiskers p50 to
/// p99.9), as an SVG.
pub fn chart(runs: &[Run]) -> String {
    let mut series: Vec<crate::chart::Series> = Vec::new();
    for r in runs {
        let point = crate::chart::Point {
            x: r.rate as f64,
            y: r.latency.p99,
            lo: r.latency.p50,
            hi: r.latency.p999,
        };
        match series.iter_mut().find(|s| s.name == r.path) {
            Some(s) => s.points.push(point),
            None => series.push(crate::chart::Series {
                name: r.path.clone(),
                points: vec![point],
            }),
        }
    }
    let size = runs.first().map_or(0, |r| r.size);
    crate::chart::svg(
        "walbench tail: producer-to-reader latency",
        &format!(
            "{size}-byte messages; x: messages/s (log), y: p99 latency in us from the due time"
        ),
        &[crate::chart::Panel {
            title: "p99 latency (whiskers: p50 to p99.9)".into(),
            y_label: "us".into(),
            series,
        }],
    )
}

/// Runs every path at every rate.
pub fn run(o: &Options) -> Result<Vec<Run>, String> {
    let mut runs = Vec::new();
    for path in &o.paths {
        if path.starts_with("library") {
            runs.extend(library::runs(o, path == "library-inserted")?);
            continue;
        }
        let measured = match path.as_str() {
            "recvlogical-walshm" => recvlogical::measure(o, false)?,
            "recvlogical-pg15" => recvlogical::measure(o, true)?,
            _ => unreachable!("paths are checked when parsed"),
        };
        let Some((windows, max_rate)) = measured else {
            eprintln!("walbench tail: {path} skipped (PostgreSQL 15 is not installed)");
            continue;
        };
        for (rate, w) in o.rates.iter().zip(windows) {
            runs.push(Run {
                path: path.clone(),
                rate: *rate,
                size: o.size,
                delivered: w.delivered,
                lost: w.acked.saturating_sub(w.delivered),
                latency: Latency::of(w.latencies_ns),
                after_return: None,
                max_rate,
            });
        }
    }
    Ok(runs)
}

/// The runs as a table.
pub fn table(runs: &[Run]) -> String {
    let mut s = format!(
        "{:<20} {:>8} {:>6} {:>10} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>11}\n",
        "path",
        "rate",
        "size",
        "delivered",
        "lost",
        "p50_us",
        "p90_us",
        "p99_us",
        "p999_us",
        "max_us",
        "max_rate",
        "ret_p99_us"
    );
    for r in runs {
        s.push_str(&format!(
            "{:<20} {:>8} {:>6} {:>10} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.0} {:>11}\n",
            r.path,
            r.rate,
            r.size,
            r.delivered,
            r.lost,
            r.latency.p50,
            r.latency.p90,
            r.latency.p99,
            r.latency.p999,
            r.latency.max,
            r.max_rate,
            r.after_return
                .as_ref()
                .map_or("-".to_string(), |l| format!("{:.1}", l.p99))
        ));
    }
    s
}

/// The runs as the JSON document the module header describes.
pub fn json(runs: &[Run]) -> String {
    let runs: Vec<serde_json::Value> = runs
        .iter()
        .map(|r| {
            serde_json::json!({
                "path": r.path,
                "rate": r.rate,
                "size": r.size,
                "delivered": r.delivered,
                "lost": r.lost,
                "latency_us": {
                    "p50": r.latency.p50,
                    "p90": r.latency.p90,
                    "p99": r.latency.p99,
                    "p999": r.latency.p999,
                    "max": r.latency.max,
                },
                "max_rate": r.max_rate,
                "after_return_us": r.after_return.as_ref().map(|l| serde_json::json!({
                    "p50": l.p50, "p90": l.p90, "p99": l.p99, "p999": l.p999, "max": l.max,
                })),
            })
        })
        .collect();
    let doc = serde_json::json!({
        "machine": crate::machine::Machine::probe(&std::env::temp_dir()).describe(),
        "runs": runs,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_upper_rank() {
        let l = Latency::of((1..=1000).map(|i| i * 1000).collect());
        assert_eq!(l.p50, 500.0);
        assert_eq!(l.p99, 990.0);
        assert_eq!(l.p999, 999.0);
        assert_eq!(l.max, 1000.0);
        assert_eq!(Latency::of(vec![]), Latency::default());
    }

    #[test]
    fn contents_round_trip_at_their_size() {
        let c = content(42, 123_456_789, 64);
        assert_eq!(c.len(), 64);
        assert_eq!(parse_content(&c), Some((42, 123_456_789)));
        assert_eq!(parse_content("x"), None);
    }

    #[test]
    fn options_are_checked() {
        use crate::cli::{parse_mode, Mode};
        let parse = |s: &str| {
            let args: Vec<String> = s.split_whitespace().map(str::to_string).collect();
            let pick = |m| match m {
                Mode::Tail(o) => Some(o),
                _ => None,
            };
            parse_mode("tail", &args, pick).map(Option::unwrap)
        };
        let o = parse("--rates 10,20 --paths recvlogical-walshm").unwrap();
        assert_eq!(o.rates, vec![10, 20]);
        assert_eq!(o.paths, vec!["recvlogical-walshm".to_string()]);
        assert_eq!(o.sets, vec!["fsync=off".to_string()]);
        assert_eq!(parse("").unwrap().paths.len(), PATHS.len());
        assert_eq!(
            parse("--set fsync=on").unwrap().sets,
            vec!["fsync=on".to_string()]
        );
        assert!(parse("--rates 0").is_err());
        assert!(parse("--size 10").is_err());
        assert!(parse("--paths nope").is_err());
    }
}
