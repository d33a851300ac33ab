//! Example worker: writes logical messages into a running walshm server.
//!
//! ```text
//! producer [-D DIR] [--size N] [--count N] [--seconds S] [--tx] [--ack]
//!          [--abort-every K] [--prefix P] [--reattach] [--summary]
//! ```
//!
//! Without `-D` it attaches to the server that started it (`postmaster
//! start --worker 'NAME=producer ...'`). `--tx`: one transaction per
//! message (begin, transactional message, commit; durable with
//! synchronous_commit = on); `--ack`: after each commit print `ack LSN`
//! (start of the COMMIT record) in one write; `--abort-every K`: every K-th
//! transaction is aborted instead (its message carries "abort"). Payloads
//! are `seq=N` padded with `x` to `--size` bytes. `--reattach`: after a
//! server restart, attach again and go on. `--summary`: at the end print
//! one JSON line `{"walshm_producer":1,...}` (records, commits, seconds).
//! SIGTERM from the server: detach and exit 0.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use walshm::{Error, Worker};

/// Writes logical messages into a running walshm server.
#[derive(clap::Parser)]
#[command(name = "producer")]
struct Args {
    /// The data directory of the server to attach to [default: the server
    /// that started this process]
    #[arg(short = 'D', long = "data-dir", value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Payload bytes (`seq=N` padded with `x`)
    #[arg(long, value_name = "N", default_value = "16")]
    size: usize,
    /// Stop after N messages
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Stop after S seconds
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// One transaction per message (begin, transactional message, commit)
    #[arg(long)]
    tx: bool,
    /// After each commit print `ack LSN` (the COMMIT record's start)
    #[arg(long)]
    ack: bool,
    /// Abort every K-th transaction instead (its message carries "abort")
    #[arg(long, value_name = "K")]
    abort_every: Option<u64>,
    /// The messages' prefix
    #[arg(long, value_name = "P", default_value = "producer")]
    prefix: String,
    /// After a server restart, attach again and go on
    #[arg(long)]
    reattach: bool,
    /// At the end print one JSON line {"walshm_producer":1,...}
    #[arg(long)]
    summary: bool,
}

/// `seq=N` padded with `x` to `size` bytes (longer if N needs it).
fn payload(buf: &mut Vec<u8>, seq: u64, size: usize, tag: &str) {
    buf.clear();
    let _ = write!(buf, "seq={seq}{tag}");
    if buf.len() < size {
        buf.resize(size, b'x');
    }
}

#[derive(Default)]
struct Totals {
    records: u64,
    commits: u64,
    aborts: u64,
}

/// The `--summary` line, in key order (readers find it by its first key).
#[derive(serde::Serialize)]
struct SummaryLine {
    walshm_producer: u32,
    records: u64,
    commits: u64,
    aborts: u64,
    /// Whole milliseconds.
    seconds: f64,
}

/// Writes until done; Ok(true) when finished, Ok(false) after a server
/// restart (re-attach wanted), Err on anything else.
fn produce(w: &mut Worker, a: &Args, t: &mut Totals, started: Instant) -> Result<bool, Error> {
    let mut buf = Vec::with_capacity(a.size + 32);
    let mut line = String::with_capacity(32);
    let mut stdout = std::io::stdout().lock();
    let deadline = a.seconds.map(|s| started + Duration::from_secs_f64(s));
    // Without --tx or --abort-every the payload does not change: build it
    // once, keeping the hot loop free of formatting.
    payload(&mut buf, 0, a.size, "");
    loop {
        let seq = t.records;
        if a.count.is_some_and(|c| seq >= c) {
            return Ok(true);
        }
        if seq.is_multiple_of(1024) && deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(true);
        }
        if !a.tx {
            w.emit(&a.prefix, &buf)?;
            t.records += 1;
            continue;
        }
        let abort = a
            .abort_every
            .is_some_and(|k| (seq + 1).is_multiple_of(k.max(1)));
        payload(&mut buf, seq, a.size, if abort { " abort" } else { "" });
        w.begin()?;
        w.emit_tx(&a.prefix, &buf)?;
        t.records += 1;
        if abort {
            w.abort()?;
            t.aborts += 1;
            continue;
        }
        let lsn = w.commit()?;
        t.commits += 1;
        if a.ack {
            line.clear();
            line.push_str("ack ");
            line.push_str(&walshm::format_lsn(lsn));
            line.push('\n');
            // One write per line (stdout is shared with the server).
            if stdout
                .write_all(line.as_bytes())
                .and_then(|_| stdout.flush())
                .is_err()
            {
                return Ok(true);
            }
        }
    }
}

fn run(a: &Args) -> Result<Totals, Error> {
    let started = Instant::now();
    let mut t = Totals::default();
    loop {
        let mut w = Worker::attach(a.dir.as_deref())?;
        match produce(&mut w, a, &mut t, started) {
            Ok(_) => {
                w.detach()?;
                return Ok(t);
            }
            Err(Error::ShuttingDown) => {
                w.detach()?;
                return Ok(t);
            }
            Err(Error::ServerRestarted) if a.reattach => {
                let _ = w.detach();
                eprintln!("producer: server restarted, attaching again");
                reattach_pause(a)?;
            }
            Err(e) => {
                let _ = w.detach();
                return Err(e);
            }
        }
    }
}

/// Waits a little before attaching again (the server is recovering).
fn reattach_pause(a: &Args) -> Result<(), Error> {
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(50));
        match Worker::attach(a.dir.as_deref()) {
            Ok(w) => {
                w.detach()?;
                return Ok(());
            }
            Err(Error::Attach(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Error::Attach(
        "the server did not come back within 10 s".into(),
    ))
}

fn main() {
    std::process::exit(run_with(std::env::args().skip(1).collect()));
}

/// The whole program on `args`; returns the exit code.
pub fn run_with(args: Vec<String>) -> i32 {
    let words = std::iter::once("producer".to_string()).chain(args);
    let a = match <Args as clap::Parser>::try_parse_from(words) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let started = Instant::now();
    match run(&a) {
        Ok(t) => {
            if a.summary {
                let line = SummaryLine {
                    walshm_producer: 1,
                    records: t.records,
                    commits: t.commits,
                    aborts: t.aborts,
                    seconds: started.elapsed().as_millis() as f64 / 1000.0,
                };
                println!("{}", serde_json::to_string(&line).expect("serializes"));
            }
            0
        }
        Err(e) => {
            eprintln!("producer: {e}");
            1
        }
    }
}
