//! Producer-to-consumer latency of library readers on a running server.
//!
//! ```text
//! tail_latency -D DIR [--mode flushed|inserted|both] [--rates 1000,10000]
//!              [--size BYTES] [--seconds S] [--producers N] [--json FILE]
//! ```
//!
//! For each mode and rate: forks `--producers` processes (before this one
//! attaches: no thread, no inherited handle), each attaching on its own
//! and sending its share of the rate on an open-loop schedule (message k
//! is due at `start + k / rate`; a late producer catches up, it never
//! waits for the consumer). Flushed mode: each message is a transaction
//! (BEGIN, one transactional message, a durable COMMIT) read back through
//! `Reader::committed`; inserted mode: a non-transactional message (not
//! flushed) read back by a `Worker::reader_inserted` reader. This process
//! is the consumer: it notes CLOCK_MONOTONIC when each message is
//! delivered. Two latencies per message:
//!
//! - `latency_us`: from its intended send time (no coordinated omission:
//!   a producer that falls behind shows in it);
//! - `after_return_us`: from the producer's COMMIT (flushed) or emit
//!   (inserted) returning, to the delivery (negative: delivered before
//!   the producer saw its call return; counted as 0).
//!
//! Output: one line per run, and with `--json` walbench's tail document:
//! `{"runs":[{"path","rate","size","delivered","lost","latency_us":{"p50",
//! "p90","p99","p999","max"},"after_return_us":{...},"max_rate"}]}`, where
//! `path` is `library` or `library-inserted` and `max_rate` the rate the
//! run delivered (messages over the time from the first intended send to
//! the last delivery): the shape of the design's `walbench tail`, whose
//! library paths this measures. (walbench cannot link this crate: the
//! worker package builds a cdylib, whose unhashed `libwalshm.rlib` two
//! feature sets of one `cargo test --workspace` overwrite; so the
//! measurement lives here.)
//!
//! Defaults: `--mode both`, `--rates 1000,10000`, `--size 64`,
//! `--seconds 5`, 4 producers in flushed mode (so that group commit can
//! reach the rate with fsync on), 1 in inserted mode.

use serde::Serialize;
use shmem::clock::monotonic_ns as now_ns;
use std::path::{Path, PathBuf};
use std::time::Duration;
use walshm::{Lsn, Worker};

fn main() {
    if let Err(e) = run(<Args as clap::Parser>::parse()) {
        eprintln!("tail_latency: {e}");
        std::process::exit(1);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Flushed,
    Inserted,
}

/// `--mode`: which read paths to measure.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Modes {
    /// Transactions read back through `Reader::committed`
    Flushed,
    /// Non-transactional messages read back by an inserted-mode reader
    Inserted,
    /// Flushed, then inserted
    Both,
}

/// Producer-to-consumer latency of library readers on a running server.
#[derive(clap::Parser)]
#[command(name = "tail_latency")]
struct Args {
    /// The data directory of the server to attach to
    #[arg(short = 'D', long = "data-dir", value_name = "DIR")]
    dir: PathBuf,
    #[arg(long, value_enum, default_value = "both")]
    mode: Modes,
    /// Comma-separated rates, messages/s
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1000,10000",
          action = clap::ArgAction::Set)]
    rates: Vec<u64>,
    /// Message bytes (at least the 20-byte header)
    #[arg(long, value_name = "BYTES", default_value = "64",
          value_parser = |v: &str| v.parse::<usize>().map(|n| n.max(HEADER)))]
    size: usize,
    /// Seconds per run
    #[arg(long, value_name = "S", default_value = "5")]
    seconds: f64,
    /// Producer processes [default: 4 flushed, 1 inserted]
    #[arg(long, value_name = "N")]
    producers: Option<usize>,
    /// Write walbench's tail document
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Serialize, Default)]
struct Percentiles {
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
}

#[derive(Serialize)]
struct RunResult {
    path: &'static str,
    rate: u64,
    size: usize,
    producers: usize,
    delivered: u64,
    lost: u64,
    latency_us: Percentiles,
    after_return_us: Percentiles,
    max_rate: f64,
}

#[derive(Serialize)]
struct Doc {
    runs: Vec<RunResult>,
}

/// Message header: producer, sequence number, intended send time.
const HEADER: usize = 4 + 8 + 8;

fn run(args: Args) -> Result<(), String> {
    let modes = match args.mode {
        Modes::Flushed => &[Mode::Flushed][..],
        Modes::Inserted => &[Mode::Inserted],
        Modes::Both => &[Mode::Flushed, Mode::Inserted],
    };
    let mut runs = Vec::new();
    for &mode in modes {
        for &rate in &args.rates {
            let r = run_one(&args, mode, rate)?;
            println!(
                "{:<17} rate {:>7}/s size {:>5} producers {} delivered {:>7} lost {:>5} \
                 latency_us p50 {:>6} p90 {:>6} p99 {:>6} p999 {:>6} max {:>7} | \
                 after return p50 {:>6} p99 {:>6} max {:>7} | delivered {:.0}/s",
                r.path,
                r.rate,
                r.size,
                r.producers,
                r.delivered,
                r.lost,
                r.latency_us.p50,
                r.latency_us.p90,
                r.latency_us.p99,
                r.latency_us.p999,
                r.latency_us.max,
                r.after_return_us.p50,
                r.after_return_us.p99,
                r.after_return_us.max,
                r.max_rate
            );
            runs.push(r);
        }
    }
    if let Some(path) = &args.json {
        let doc = serde_json::to_string_pretty(&Doc { runs }).map_err(|e| e.to_string())?;
        std::fs::write(path, doc + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn run_one(args: &Args, mode: Mode, rate: u64) -> Result<RunResult, String> {
    let producers = args
        .producers
        .unwrap_or(if mode == Mode::Flushed { 4 } else { 1 })
        .max(1);
    let per_rate = (rate as f64 / producers as f64).max(1.0);
    let count = (per_rate * args.seconds).round() as u64;
    let start = now_ns() + 1_500_000_000;
    let tmp = std::env::temp_dir().join(format!("tail_latency-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let mut pids = Vec::new();
    for p in 0..producers {
        // SAFETY: this process has a single thread and nothing attached
        // yet; the child attaches on its own and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err("fork failed".into());
        }
        if pid == 0 {
            let code = match produce(args, mode, p as u32, per_rate, count, start, &tmp) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("tail_latency producer {p}: {e}");
                    1
                }
            };
            // Ends the child without the parent's exit work.
            shmem::sys::exit_now(code);
        }
        pids.push(pid);
    }
    let consumed = consume(args, mode, producers, count, start);
    let mut failed = false;
    for pid in pids {
        let status = shmem::sys::wait_child(pid).unwrap_or(-1);
        failed |= !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0;
    }
    let delivered = consumed?;
    if failed {
        return Err("a producer failed".into());
    }
    let mut from_intended = Vec::with_capacity(delivered.len());
    let mut after_return = Vec::with_capacity(delivered.len());
    let mut last = start;
    for p in 0..producers {
        let returned = read_times(&tmp.join(format!("p{p}")));
        for &(dp, k, intended, at) in delivered.iter().filter(|d| d.0 == p as u32) {
            let _ = dp;
            from_intended.push(at.saturating_sub(intended) / 1000);
            if let Some(r) = returned.get(k as usize) {
                after_return.push(at.saturating_sub(*r) / 1000);
            }
            last = last.max(at);
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let n = delivered.len() as u64;
    Ok(RunResult {
        path: match mode {
            Mode::Flushed => "library",
            Mode::Inserted => "library-inserted",
        },
        rate,
        size: args.size,
        producers,
        delivered: n,
        lost: (count * producers as u64).saturating_sub(n),
        latency_us: percentiles(from_intended),
        after_return_us: percentiles(after_return),
        max_rate: n as f64 / ((last - start) as f64 / 1e9).max(1e-9),
    })
}

/// A producer process: attach, send `count` messages at `per_rate`/s from
/// `start`, write when each call returned to `tmp/pP`.
fn produce(
    args: &Args,
    mode: Mode,
    p: u32,
    per_rate: f64,
    count: u64,
    start: u64,
    tmp: &Path,
) -> Result<(), String> {
    let mut w = Worker::attach(Some(&args.dir)).map_err(|e| e.to_string())?;
    let mut payload = vec![b'x'; args.size];
    let mut returned = Vec::with_capacity(count as usize);
    let interval = 1e9 / per_rate;
    for k in 0..count {
        let due = start + (k as f64 * interval) as u64;
        let now = now_ns();
        if due > now {
            std::thread::sleep(Duration::from_nanos(due - now));
        }
        payload[..4].copy_from_slice(&p.to_le_bytes());
        payload[4..12].copy_from_slice(&k.to_le_bytes());
        payload[12..20].copy_from_slice(&due.to_le_bytes());
        let r = match mode {
            Mode::Flushed => w
                .begin()
                .and_then(|()| w.emit_tx("tail", &payload))
                .and_then(|_| w.commit()),
            Mode::Inserted => w.emit("tail", &payload),
        };
        r.map_err(|e| e.to_string())?;
        returned.push(now_ns());
    }
    let bytes: Vec<u8> = returned.iter().flat_map(|t| t.to_le_bytes()).collect();
    std::fs::write(tmp.join(format!("p{p}")), bytes).map_err(|e| e.to_string())?;
    w.detach().map_err(|e| e.to_string())
}

fn read_times(path: &Path) -> Vec<u64> {
    std::fs::read(path)
        .unwrap_or_default()
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The consumer: (producer, k, intended, delivered at) of each message.
fn consume(
    args: &Args,
    mode: Mode,
    producers: usize,
    count: u64,
    start: u64,
) -> Result<Vec<(u32, u64, u64, u64)>, String> {
    let w = Worker::attach(Some(&args.dir)).map_err(|e| e.to_string())?;
    let from: Lsn = w.insert_lsn();
    let expected = count as usize * producers;
    let deadline = start + ((args.seconds + 10.0) * 1e9) as u64;
    let mut got = Vec::with_capacity(expected);
    let wait = Duration::from_millis(200);
    match mode {
        Mode::Flushed => {
            let mut m = w.reader(from).map_err(|e| e.to_string())?.committed();
            while got.len() < expected && now_ns() < deadline {
                if let Some(msg) = m.next_wait(wait).map_err(|e| e.to_string())? {
                    keep_delivered(&mut got, &msg.prefix, &msg.payload);
                }
            }
        }
        Mode::Inserted => {
            let mut r = w.reader_inserted(from).map_err(|e| e.to_string())?;
            while got.len() < expected && now_ns() < deadline {
                if let Some(rec) = r.next_wait(wait).map_err(|e| e.to_string())? {
                    keep_delivered(&mut got, rec.prefix, rec.payload);
                }
            }
        }
    }
    w.detach().map_err(|e| e.to_string())?;
    Ok(got)
}

/// A message just delivered: if it is one of ours (prefix `tail`, a whole
/// header), (producer, k, intended, now) goes into `got`.
fn keep_delivered(got: &mut Vec<(u32, u64, u64, u64)>, prefix: &str, payload: &[u8]) {
    let at = now_ns();
    if prefix == "tail" && payload.len() >= HEADER {
        let p = u32::from_le_bytes(payload[..4].try_into().unwrap());
        let k = u64::from_le_bytes(payload[4..12].try_into().unwrap());
        let due = u64::from_le_bytes(payload[12..20].try_into().unwrap());
        got.push((p, k, due, at));
    }
}

fn percentiles(mut v: Vec<u64>) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_unstable();
    let at = |q: f64| v[((q * v.len() as f64) as usize).min(v.len() - 1)];
    Percentiles {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        p999: at(0.999),
        max: *v.last().unwrap(),
    }
}
