//! Example consumer: tails a walshm server's WAL and prints the committed
//! transactional messages, one line each:
//!
//! ```text
//! msg LSN XID COMMIT_LSN PREFIX PAYLOAD
//! ```
//!
//! (LSNs in `%X/%08X` form; the payload lossily as UTF-8.)
//!
//! ```text
//! consumer -D DIR [--from LSN] [--count N] [--idle-exit SECONDS] [--prefix P]
//! ```
//!
//! It attaches to the server (so it sees only flushed WAL and learns of a
//! restart), reads from `--from` (default: the oldest segment) and exits 0
//! after `--count` messages, or after `--idle-exit` seconds without one.
//! `--prefix`: only messages with that prefix.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use walshm::{Lsn, Worker};

fn main() {
    if let Err(e) = run() {
        eprintln!("consumer: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut dir = None;
    let mut from: Lsn = 0;
    let mut count = u64::MAX;
    let mut idle = Duration::from_secs(3600);
    let mut prefix = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "-D" | "--data-dir" => dir = Some(PathBuf::from(value()?)),
            "--from" => from = walshm::parse_lsn(&value()?).map_err(|e| e.to_string())?,
            "--count" => count = value()?.parse().map_err(|e| format!("--count: {e}"))?,
            "--idle-exit" => {
                let s: f64 = value()?.parse().map_err(|e| format!("--idle-exit: {e}"))?;
                idle = Duration::from_secs_f64(s);
            }
            "--prefix" => prefix = Some(value()?),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    let w = Worker::attach(dir.as_deref()).map_err(|e| e.to_string())?;
    let mut messages = w.reader(from).map_err(|e| e.to_string())?.committed();
    let mut out = std::io::stdout().lock();
    let mut seen = 0;
    let mut last = Instant::now();
    while seen < count && last.elapsed() < idle {
        let Some(m) = messages
            .next_wait(Duration::from_millis(100))
            .map_err(|e| e.to_string())?
        else {
            continue;
        };
        last = Instant::now();
        if prefix.as_deref().is_some_and(|p| p != m.prefix) {
            continue;
        }
        seen += 1;
        writeln!(
            out,
            "msg {} {} {} {} {}",
            walshm::format_lsn(m.lsn),
            m.xid,
            walshm::format_lsn(m.commit_lsn),
            m.prefix,
            String::from_utf8_lossy(&m.payload)
        )
        .and_then(|_| out.flush())
        .map_err(|e| e.to_string())?;
    }
    drop(messages);
    w.detach().map_err(|e| e.to_string())
}
