//! Example consumer: tails a walshm server's WAL and prints the committed
//! transactional messages, one line each:
//!
//! ```text
//! msg LSN XID COMMIT_LSN PREFIX PAYLOAD
//! ```
//!
//! (LSNs in `%X/%08X` form; the payload lossily as UTF-8.)
//!
//! `consumer -D DIR [--from LSN] [--count N] [--idle-exit SECONDS] [--prefix P]`
//!
//! It attaches to the server (so it sees only flushed WAL and learns of a
//! restart), reads from `--from` (default: the oldest segment) and exits 0
//! after `--count` messages, or after `--idle-exit` seconds without one.
//! `--prefix`: only messages with that prefix.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use walshm::{Lsn, Worker};

/// Prints the committed transactional messages of a running server.
#[derive(clap::Parser)]
#[command(name = "consumer")]
struct Args {
    /// The data directory of the server to attach to
    #[arg(short = 'D', long = "data-dir", value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Read from this LSN [default: the oldest segment]
    #[arg(long, value_name = "LSN", value_parser = |v: &str| walshm::parse_lsn(v).map_err(|e| e.to_string()))]
    from: Option<Lsn>,
    /// Exit 0 after N messages
    #[arg(long, value_name = "N", default_value_t = u64::MAX, hide_default_value = true)]
    count: u64,
    /// Exit 0 after SECONDS without a message
    #[arg(long = "idle-exit", value_name = "SECONDS", default_value = "3600")]
    idle: f64,
    /// Only messages with this prefix
    #[arg(long, value_name = "P")]
    prefix: Option<String>,
}

fn main() {
    let a = <Args as clap::Parser>::parse();
    if let Err(e) = run(a) {
        eprintln!("consumer: {e}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> Result<(), String> {
    let Args {
        dir,
        from,
        count,
        idle,
        prefix,
    } = a;
    let (from, idle) = (from.unwrap_or(0), Duration::from_secs_f64(idle));
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
