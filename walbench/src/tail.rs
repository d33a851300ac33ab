//! `walbench tail`: producer-to-consumer latency of the library's WAL
//! readers on a real server, per read path and rate.
//!
//! ```text
//! walbench tail [--rates LIST] [--size B] [--seconds S] [--json FILE]
//!               [--paths library,library-inserted] [--producers N]
//!               [-D DIR] [--set NAME=VALUE ...]
//! ```
//!
//! It starts a postmaster on a fresh data directory (or `-D DIR`), then for
//! each path and rate forks producer processes (before it attaches itself:
//! no thread, no inherited handle), each attaching on its own and sending
//! its share of the rate on an open-loop schedule: message k is due at
//! `start + k / rate`; a late producer catches up, it never waits for the
//! consumer. `library`: each message is a transaction (BEGIN, one
//! transactional message, a durable COMMIT) read back through
//! `Reader::committed` (flushed mode, 4 producers by default so that
//! group commit can reach the rate); `library-inserted`: a
//! non-transactional message (not flushed) read back by a
//! `Worker::reader_inserted` reader (1 producer). walbench itself is the
//! consumer and notes CLOCK_MONOTONIC at each delivery. Two latencies:
//!
//! - `latency_us`: from the message's intended send time (no coordinated
//!   omission: a producer that falls behind, e.g. waiting for fdatasync,
//!   shows in it);
//! - `after_return_us`: from the producer's COMMIT (or emit) returning to
//!   the delivery, 0 when delivered before the producer saw its call return.
//!
//! JSON (`--json`): `{"runs":[{"path","rate","size","producers",
//! "delivered","lost","latency_us":{"p50","p90","p99","p999","max"},
//! "after_return_us":{...},"max_rate"}]}`; `max_rate` is the rate the run
//! delivered (messages over the time from the first intended send to the
//! last delivery). The other paths of the design (`recvlogical-walshm`,
//! `recvlogical-pg15`) are not measured here yet.

use crate::cli::{self, Opt};
use crate::point::{self, ServerGuard, TempDir};
use crate::postmaster_path;
use serde::Serialize;
use shmem::walsnd::monotonic_ns as now_ns;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use walshm::{Lsn, Worker};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Flushed,
    Inserted,
}

impl Mode {
    fn path(self) -> &'static str {
        match self {
            Mode::Flushed => "library",
            Mode::Inserted => "library-inserted",
        }
    }
}

pub struct Options {
    modes: Vec<Mode>,
    rates: Vec<u64>,
    size: usize,
    seconds: f64,
    producers: Option<usize>,
    json: Option<PathBuf>,
    datadir: Option<PathBuf>,
    sets: Vec<String>,
}

#[derive(Clone, Copy)]
enum Key {
    Rates,
    Size,
    Seconds,
    Json,
    Paths,
    Producers,
    DataDir,
    Set,
}

fn options() -> Vec<Opt<Key>> {
    vec![
        Opt::new(
            Key::Rates,
            "--rates LIST",
            "comma-separated messages/s (default 1000,10000)",
        ),
        Opt::new(
            Key::Size,
            "--size B",
            "message payload bytes (default 64, at least 20)",
        ),
        Opt::new(Key::Seconds, "--seconds S", "seconds per run (default 5)"),
        Opt::new(Key::Json, "--json FILE", "write the runs as JSON to FILE"),
        Opt::new(
            Key::Paths,
            "--paths LIST",
            "read paths: library, library-inserted (default both)",
        ),
        Opt::new(
            Key::Producers,
            "--producers N",
            "producer processes (default 4 for library, 1 for library-inserted)",
        ),
        Opt::new(
            Key::DataDir,
            "-D DIR",
            "data directory (default: a fresh temporary one)",
        ),
        Opt::new(Key::Set, "--set NAME=VALUE", cli::SET_HELP)
            .alias("-c")
            .many(),
    ]
}

pub fn help() -> String {
    cli::help(
        "walbench tail: producer-to-consumer latency of the library's WAL readers",
        &[],
        "walbench tail",
        &options(),
        "",
    )
}

fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut o = Options {
        modes: vec![Mode::Flushed, Mode::Inserted],
        rates: vec![1000, 10_000],
        size: 64,
        seconds: 5.0,
        producers: None,
        json: None,
        datadir: None,
        sets: Vec::new(),
    };
    let spec = options();
    let applied = cli::parse_with(&spec, 0, args, |k, v| {
        match k {
            Key::Rates => o.rates = cli::list(v, "rate")?,
            Key::Size => {
                o.size = v
                    .parse()
                    .map_err(|_| format!("--size: \"{v}\" is not a byte count"))?
            }
            Key::Seconds => o.seconds = cli::seconds(v)?,
            Key::Json => o.json = Some(PathBuf::from(v)),
            Key::Paths => {
                o.modes = cli::names(v)
                    .map(|p| match p.as_str() {
                        "library" => Ok(Mode::Flushed),
                        "library-inserted" => Ok(Mode::Inserted),
                        _ => Err(format!("--paths: unknown path \"{p}\"")),
                    })
                    .collect::<Result<_, _>>()?
            }
            Key::Producers => {
                o.producers = Some(
                    v.parse()
                        .ok()
                        .filter(|&n: &usize| (1..=64).contains(&n))
                        .ok_or_else(|| format!("--producers: \"{v}\" is not 1..64"))?,
                )
            }
            Key::DataDir => o.datadir = Some(PathBuf::from(v)),
            Key::Set => o.sets.push(v.to_string()),
        }
        Ok(())
    })?;
    if applied.is_none() {
        return Ok(None);
    }
    if o.rates.contains(&0) {
        return Err("--rates: a rate must be above 0".into());
    }
    o.size = o.size.max(HEADER);
    cli::check_sets(&o.sets)?;
    Ok(Some(o))
}

pub const MODE: cli::Mode<Options> = cli::Mode::new("walbench tail --help", parse, help, run_mode);

#[derive(Serialize, Default)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

#[derive(Serialize)]
pub struct RunResult {
    pub path: &'static str,
    pub rate: u64,
    pub size: usize,
    pub producers: usize,
    pub delivered: u64,
    pub lost: u64,
    pub latency_us: Percentiles,
    pub after_return_us: Percentiles,
    pub max_rate: f64,
}

#[derive(Serialize)]
struct Doc<'a> {
    runs: &'a [RunResult],
}

/// Message header: producer, sequence number, intended send time.
const HEADER: usize = 4 + 8 + 8;

fn run_mode(o: &Options) -> Result<(), String> {
    let postmaster = postmaster_path()?;
    let tmp;
    let dir = match &o.datadir {
        Some(d) => d.clone(),
        None => {
            tmp = TempDir::new_in(&std::env::temp_dir())?;
            tmp.0.join("data")
        }
    };
    point::init_datadir(&postmaster, &dir)?;
    let log_path = dir.with_file_name(format!("walbench-tail-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("could not create \"{}\": {e}", log_path.display()))?;
    let mut cmd = Command::new(&postmaster);
    cmd.args(["start", "-D"]).arg(&dir);
    for s in &o.sets {
        cmd.args(["--set", s]);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd
        .spawn()
        .map_err(|e| format!("could not start postmaster: {e}"))?;
    let mut guard = ServerGuard(Some(child));
    point::wait_ready(&log_path, Duration::from_secs(60))?;
    println!(
        "{:<17} {:>8} {:>5} {:>4} {:>8} {:>6} | {:>7} {:>7} {:>7} {:>7} {:>8} | {:>7} {:>7} {:>8} | {:>9}",
        "path", "rate", "size", "prod", "deliver", "lost", "p50", "p90", "p99", "p999", "max",
        "ret p50", "ret p99", "ret max", "delivered"
    );
    let mut runs = Vec::new();
    let mut failure = None;
    'all: for &mode in &o.modes {
        for &rate in &o.rates {
            match run_one(o, &dir, mode, rate) {
                Ok(r) => {
                    println!(
                        "{:<17} {:>8} {:>5} {:>4} {:>8} {:>6} | {:>7} {:>7} {:>7} {:>7} {:>8} | {:>7} {:>7} {:>8} | {:>7.0}/s",
                        r.path, r.rate, r.size, r.producers, r.delivered, r.lost,
                        r.latency_us.p50, r.latency_us.p90, r.latency_us.p99,
                        r.latency_us.p999, r.latency_us.max, r.after_return_us.p50,
                        r.after_return_us.p99, r.after_return_us.max, r.max_rate
                    );
                    runs.push(r);
                }
                Err(e) => {
                    failure = Some(e);
                    break 'all;
                }
            }
        }
    }
    let mut child = guard.0.take().expect("server running");
    // SAFETY: kill has no memory effects; SIGINT: a fast shutdown.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = child.wait();
    let _ = std::fs::remove_file(&log_path);
    if let Some(e) = failure {
        return Err(e);
    }
    if let Some(path) = &o.json {
        let doc = serde_json::to_string_pretty(&Doc { runs: &runs }).map_err(|e| e.to_string())?;
        std::fs::write(path, doc + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn run_one(args: &Options, dir: &Path, mode: Mode, rate: u64) -> Result<RunResult, String> {
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
            let code = match produce(dir, args.size, mode, p as u32, per_rate, count, start, &tmp) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("tail_latency producer {p}: {e}");
                    1
                }
            };
            // SAFETY: ends the child without the parent's exit work.
            unsafe { libc::_exit(code) };
        }
        pids.push(pid);
    }
    let consumed = consume(dir, args.seconds, mode, producers, count, start);
    let mut failed = false;
    for pid in pids {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
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
        path: mode.path(),
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
#[allow(clippy::too_many_arguments)]
fn produce(
    dir: &Path,
    size: usize,
    mode: Mode,
    p: u32,
    per_rate: f64,
    count: u64,
    start: u64,
    tmp: &Path,
) -> Result<(), String> {
    let mut w = Worker::attach(Some(dir)).map_err(|e| e.to_string())?;
    let mut payload = vec![b'x'; size];
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
    dir: &Path,
    seconds: f64,
    mode: Mode,
    producers: usize,
    count: u64,
    start: u64,
) -> Result<Vec<(u32, u64, u64, u64)>, String> {
    let w = Worker::attach(Some(dir)).map_err(|e| e.to_string())?;
    let from: Lsn = w.insert_lsn();
    let expected = count as usize * producers;
    let deadline = start + ((seconds + 10.0) * 1e9) as u64;
    let mut got = Vec::with_capacity(expected);
    let header = |payload: &[u8]| {
        let p = u32::from_le_bytes(payload[..4].try_into().unwrap());
        let k = u64::from_le_bytes(payload[4..12].try_into().unwrap());
        let due = u64::from_le_bytes(payload[12..20].try_into().unwrap());
        (p, k, due)
    };
    match mode {
        Mode::Flushed => {
            let mut m = w.reader(from).map_err(|e| e.to_string())?.committed();
            while got.len() < expected && now_ns() < deadline {
                let Some(msg) = m
                    .next_wait(Duration::from_millis(200))
                    .map_err(|e| e.to_string())?
                else {
                    continue;
                };
                let at = now_ns();
                if msg.prefix == "tail" && msg.payload.len() >= HEADER {
                    let (p, k, due) = header(&msg.payload);
                    got.push((p, k, due, at));
                }
            }
        }
        Mode::Inserted => {
            let mut r = w.reader_inserted(from).map_err(|e| e.to_string())?;
            while got.len() < expected && now_ns() < deadline {
                let Some(rec) = r
                    .next_wait(Duration::from_millis(200))
                    .map_err(|e| e.to_string())?
                else {
                    continue;
                };
                let at = now_ns();
                if rec.prefix == "tail" && rec.payload.len() >= HEADER {
                    let (p, k, due) = header(rec.payload);
                    got.push((p, k, due, at));
                }
            }
        }
    }
    w.detach().map_err(|e| e.to_string())?;
    Ok(got)
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
