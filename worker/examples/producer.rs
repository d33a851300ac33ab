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

struct Args {
    dir: Option<PathBuf>,
    size: usize,
    count: Option<u64>,
    seconds: Option<f64>,
    tx: bool,
    ack: bool,
    abort_every: Option<u64>,
    prefix: String,
    reattach: bool,
    summary: bool,
}

fn parse_args(args: Vec<String>) -> Result<Args, String> {
    let mut a = Args {
        dir: None,
        size: 16,
        count: None,
        seconds: None,
        tx: false,
        ack: false,
        abort_every: None,
        prefix: "producer".into(),
        reattach: false,
        summary: false,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-D" | "--data-dir" => a.dir = Some(PathBuf::from(value(&arg)?)),
            "--size" => a.size = value(&arg)?.parse().map_err(|e| format!("--size: {e}"))?,
            "--count" => a.count = Some(value(&arg)?.parse().map_err(|e| format!("--count: {e}"))?),
            "--seconds" => {
                a.seconds = Some(
                    value(&arg)?
                        .parse()
                        .map_err(|e| format!("--seconds: {e}"))?,
                )
            }
            "--abort-every" => {
                let k: u64 = value(&arg)?
                    .parse()
                    .map_err(|e| format!("--abort-every: {e}"))?;
                a.abort_every = Some(k.max(1));
            }
            "--prefix" => a.prefix = value(&arg)?,
            "--tx" => a.tx = true,
            "--ack" => a.ack = true,
            "--reattach" => a.reattach = true,
            "--summary" => a.summary = true,
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(a)
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
        let abort = a.abort_every.is_some_and(|k| (seq + 1).is_multiple_of(k));
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
    let a = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("producer: {e}");
            return 2;
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
