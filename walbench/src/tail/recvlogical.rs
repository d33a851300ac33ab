//! The pg_recvlogical paths of `walbench tail`: PostgreSQL 15's
//! unmodified pg_recvlogical with test_decoding (`include-xids=0`,
//! `skip-empty-xacts=1`: one line per message) reads a fresh slot on the
//! server, its standard output piped to a thread of walbench that takes
//! each line's arrival time; producers are SQL connections
//! (`pg_logical_emit_message(true, 'tail', CONTENT)` in autocommit), the
//! same for walshm and PostgreSQL 15.

use super::servers::{work_dir, Server, PG_BINDIR};
use super::wire::Conn;
use super::{content, now_ns, parse_content, producers_for, Options, Window, DRAIN};
use crate::command::output_checked;
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the reading thread saw.
#[derive(Default)]
struct Seen {
    seqs: HashSet<u64>,
    latencies_ns: Vec<u64>,
    last_arrival_ns: u64,
}

/// A pg_recvlogical reading slot `slot`, killed on drop.
struct Reader {
    child: Child,
    seen: Arc<Mutex<Seen>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn recvlogical(server: &Server) -> Command {
    let mut c = Command::new(Path::new(PG_BINDIR).join("pg_recvlogical"));
    c.arg("-h").arg(&server.socket_dir).args([
        "-p",
        &server.port.to_string(),
        "-U",
        &server.user,
        "-d",
        "postgres",
    ]);
    c
}

fn create_slot(server: &Server, slot: &str) -> Result<(), String> {
    output_checked(
        recvlogical(server).args(["-S", slot, "--create-slot", "-P", "test_decoding"]),
        "pg_recvlogical",
        "pg_recvlogical --create-slot",
    )
    .map(drop)
}

impl Reader {
    /// pg_recvlogical streaming from existing slot `slot`.
    fn start(server: &Server, slot: &str) -> Result<Reader, String> {
        let mut cmd = recvlogical(server);
        super::servers::die_with_walbench(&mut cmd, shmem::sys::Signal::SIGKILL);
        let mut child = cmd
            .args(["-S", slot, "--start", "--no-loop", "-f", "-"])
            .args(["-o", "include-xids=0", "-o", "skip-empty-xacts=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("pg_recvlogical --start: {e}"))?;
        let stdout = child.stdout.take().ok_or("no pipe from pg_recvlogical")?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = Arc::clone(&seen);
        let thread = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let arrival = now_ns();
                let Some((seq, due)) = line.split("content:").nth(1).and_then(parse_content) else {
                    continue;
                };
                let mut s = shared.lock().expect("reader state");
                if s.seqs.insert(seq) {
                    s.latencies_ns.push(arrival.saturating_sub(due));
                    s.last_arrival_ns = arrival;
                }
            }
        });
        Ok(Reader {
            child,
            seen,
            thread: Some(thread),
        })
    }

    fn delivered(&self) -> u64 {
        self.seen.lock().expect("reader state").seqs.len() as u64
    }

    /// Waits until `n` distinct messages arrived or `limit` passed.
    fn wait_for(&self, n: u64, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.delivered() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn finish(mut self) -> Seen {
        self.stop();
        std::mem::take(&mut *self.seen.lock().expect("reader state"))
    }

    fn stop(&mut self) {
        // The group is pg_recvlogical's.
        shmem::sys::kill(-(self.child.id() as i32), shmem::sys::Signal::SIGKILL);
        let _ = self.child.wait();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Producers: `n` connections; with `period_ns`, message k (over all
/// producers) is due at `t0 + k * period_ns`, else each sends as fast as
/// it can. Returns the acknowledged count.
fn produce(
    server: &Server,
    n: u64,
    period_ns: Option<u64>,
    t0: u64,
    end: u64,
    size: usize,
) -> Result<u64, String> {
    let acked = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(None::<String>));
    let mut threads = Vec::new();
    for p in 0..n {
        let mut conn = Conn::connect(&server.socket_dir, server.port, &server.user, "postgres")?;
        let acked = Arc::clone(&acked);
        let errors = Arc::clone(&errors);
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            loop {
                let seq = i * n + p;
                let due = match period_ns {
                    Some(period) => t0 + seq * period,
                    None => now_ns(),
                };
                if due >= end {
                    break;
                }
                loop {
                    let left = due.saturating_sub(now_ns());
                    if left == 0 {
                        break;
                    }
                    if left > 200_000 {
                        std::thread::sleep(Duration::from_nanos(left - 100_000));
                    } else {
                        std::hint::spin_loop();
                    }
                }
                let sql = format!(
                    "SELECT pg_logical_emit_message(true, 'tail', '{}')",
                    content(seq, due, size)
                );
                match conn.query(&sql) {
                    Ok(()) => {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        errors.lock().expect("errors").get_or_insert(e);
                        break;
                    }
                }
                i += 1;
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    if let Some(e) = errors.lock().expect("errors").take() {
        return Err(format!("producer: {e}"));
    }
    Ok(acked.load(Ordering::Relaxed))
}

/// One window at `rate` on a fresh slot, the reader streaming throughout.
fn window(server: &Server, slot: &str, rate: u64, o: &Options) -> Result<Window, String> {
    create_slot(server, slot)?;
    let reader = Reader::start(server, slot)?;
    // Warm-up: one message the reader must see before the window starts.
    let mut conn = Conn::connect(&server.socket_dir, server.port, &server.user, "postgres")?;
    conn.query(&format!(
        "SELECT pg_logical_emit_message(false, 'tail', '{}')",
        content(WARM_UP, now_ns(), o.size)
    ))?;
    reader.wait_for(1, Duration::from_secs(30));
    if reader.delivered() == 0 {
        return Err(format!(
            "pg_recvlogical on slot {slot} received nothing within 30 s"
        ));
    }
    let t0 = now_ns() + 20_000_000;
    let end = t0 + (o.seconds * 1e9) as u64;
    let acked = produce(
        server,
        producers_for(rate),
        Some(1_000_000_000 / rate),
        t0,
        end,
        o.size,
    )?;
    reader.wait_for(acked + 1, DRAIN);
    let seen = reader.finish();
    let _ = conn.query(&format!("SELECT pg_drop_replication_slot('{slot}')"));
    Ok(window_of(seen, acked, t0))
}

/// The messages of the window (the warm-up one left out).
fn window_of(mut seen: Seen, acked: u64, t0: u64) -> Window {
    let warm_up = seen.seqs.remove(&WARM_UP);
    if warm_up && !seen.latencies_ns.is_empty() {
        seen.latencies_ns.remove(0);
    }
    Window {
        acked,
        delivered: seen.seqs.len() as u64,
        latencies_ns: seen.latencies_ns,
        elapsed: seen.last_arrival_ns.saturating_sub(t0) as f64 / 1e9,
    }
}

/// The warm-up message's sequence number.
const WARM_UP: u64 = u64::MAX;

/// The most the path delivers: a backlog of messages written while no
/// reader streams (unpaced producers for the window), then read in one
/// go; messages per second from the reader's start to the last arrival.
fn backlog_rate(server: &Server, slot: &str, o: &Options) -> Result<f64, String> {
    create_slot(server, slot)?;
    let t0 = now_ns();
    let end = t0 + (o.seconds * 1e9) as u64;
    let acked = produce(server, 4, None, t0, end, o.size)?;
    let started = now_ns();
    let reader = Reader::start(server, slot)?;
    reader.wait_for(acked, DRAIN + Duration::from_secs_f64(o.seconds * 10.0));
    let seen = reader.finish();
    let mut conn = Conn::connect(&server.socket_dir, server.port, &server.user, "postgres")?;
    let _ = conn.query(&format!("SELECT pg_drop_replication_slot('{slot}')"));
    let w = window_of(seen, acked, started);
    if w.delivered < acked {
        return Err(format!(
            "the backlog read delivered {} of {acked} messages",
            w.delivered
        ));
    }
    Ok(if w.elapsed > 0.0 {
        w.delivered as f64 / w.elapsed
    } else {
        0.0
    })
}

/// Every rate's window and the unpaced rate; None when PostgreSQL 15 is
/// wanted and not installed.
pub fn measure(o: &Options, pg15: bool) -> Result<Option<(Vec<Window>, f64)>, String> {
    if !Path::new(PG_BINDIR).join("pg_recvlogical").exists() {
        return Ok(None);
    }
    let work = work_dir(if pg15 { "pg15" } else { "walshm" })?;
    let server = if pg15 {
        match Server::postgres(&work, &o.sets)? {
            Some(s) => s,
            None => return Ok(None),
        }
    } else {
        Server::walshm(&crate::postmaster_path()?, &work, &o.sets)?
    };
    let label = if pg15 {
        "recvlogical-pg15"
    } else {
        "recvlogical-walshm"
    };
    let mut windows = Vec::new();
    for (i, rate) in o.rates.iter().enumerate() {
        eprint!("\r{label}: {rate} messages/s ...          ");
        windows.push(window(&server, &format!("tail_{i}"), *rate, o)?);
    }
    eprint!("\r{label}: backlog read ...               ");
    let max_rate = backlog_rate(&server, "tail_max", o)?;
    eprintln!("\r{label}: done                          ");
    drop(server);
    let _ = std::fs::remove_dir_all(&work);
    Ok(Some((windows, max_rate)))
}
