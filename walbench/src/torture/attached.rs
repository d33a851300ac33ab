//! `walbench torture --kill-attached`: kill -9 only what attaches to the
//! server's shared memory from outside its own process tree — supervised
//! library workers (`--worker-cmd`, as many as `--library-workers`) and
//! connection backends (`--clients` sessions that walbench drives over
//! the protocol) — and check that a death is not the server's crash
//! (`backend::abandoned`).
//!
//! Each cycle waits a random (seeded) 50-400 ms, SIGKILLs one victim drawn
//! from the live ones, then waits for the server's verdict in its log:
//! "cleaned up without a restart", or a crash restart ("terminating any
//! other active server processes", then ready again; the line before
//! names what the victim died holding). Clients reconnect when their
//! session is cut; supervised workers are started again by the postmaster.
//!
//! At the end the server is stopped and its WAL checked:
//! - every `ack LSN` of the workers is a COMMIT record (`history::check`,
//!   which also wants a clean end of WAL, no double commit, and
//!   pg_waldump, if installed, reading to the same end);
//! - every message of a client transaction whose COMMIT returned is
//!   delivered by a committed-only reader (`backend::reorder` over the
//!   whole WAL): acknowledged commits of sessions;
//! - no transaction the cleaner aborted ("aborted its transaction N") has
//!   a message delivered or a COMMIT record;
//! - the share of kills that restarted the server, and why each did.

use super::server::{Server, StartSpec, START_TIMEOUT};
use super::{history, Options, Rng};
use crate::tail::wire::Conn;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The server's verdict lines.
const CLEANED: &str = "cleaned up without a restart";
const RESTARTED: &str = "terminating any other active server processes";
/// How long a kill may take to get its verdict.
const VERDICT_TIMEOUT: Duration = Duration::from_secs(30);

/// What the client sessions acknowledged: the LSNs of the messages of
/// transactions whose COMMIT returned.
#[derive(Default)]
struct ClientAcks {
    messages: Vec<u64>,
    commits: u64,
    sessions: u64,
}

/// The run's counts, for the report.
#[derive(Default)]
struct Tally {
    kills: u64,
    workers_killed: u64,
    backends_killed: u64,
    cleaned: u64,
    restarts: Vec<String>,
    worker_acks: Vec<u64>,
}

pub fn run(o: &Options, spec: StartSpec) -> Result<(), String> {
    let port = crate::tail::servers::port();
    let mut spec = spec;
    spec.args = vec![
        "--set".into(),
        "fsync=on".into(),
        "--set".into(),
        format!("port={port}"),
        "--set".into(),
        "checkpoint_timeout=5".into(),
        // Killed workers come back soon, so that they are victims again.
        "--set".into(),
        "worker_restart_delay=100ms".into(),
    ];
    for s in &o.sets {
        spec.args.extend(["--set".into(), s.clone()]);
    }
    let cmd = o
        .worker_cmd
        .as_deref()
        .ok_or("--kill-attached needs --worker-cmd (a library worker that prints ack lines)")?;
    for i in 0..o.library_workers {
        spec.args
            .extend(["--worker".into(), format!("torture{i}={cmd}")]);
    }
    let worker_comm = super::worker::comm_of(cmd).ok_or("--worker-cmd needs a program")?;
    let mut server = Server::start(&spec, &[])?;
    server.wait_ready(1, START_TIMEOUT)?;
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(ClientAcks::default()));
    let clients: Vec<_> = (0..o.clients)
        .map(|i| {
            let (dir, stop, acks) = (spec.datadir.clone(), stop.clone(), acks.clone());
            std::thread::spawn(move || client(&dir, port, i, &stop, &acks))
        })
        .collect();
    let mut rng = Rng::new(o.seed);
    let mut tally = Tally::default();
    let t0 = Instant::now();
    let result = kill_loop(o, &mut server, &worker_comm, &mut rng, &mut tally, t0);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.join();
    }
    tally
        .worker_acks
        .extend(server.take_acks().into_iter().map(|(l, _)| l));
    server.stop(START_TIMEOUT)?;
    result?;
    let log = std::fs::read_to_string(&spec.log).unwrap_or_default();
    let acks = std::mem::take(&mut *acks.lock().unwrap_or_else(|p| p.into_inner()));
    check_and_report(o, &spec.datadir, &tally, &acks, &log, t0.elapsed())
}

/// The cycles: wait, kill one victim, wait for the verdict.
fn kill_loop(
    o: &Options,
    server: &mut Server,
    worker_comm: &str,
    rng: &mut Rng,
    tally: &mut Tally,
    t0: Instant,
) -> Result<(), String> {
    let cycles = o.cycles.unwrap_or(200);
    while more(o, tally.kills, cycles, t0) {
        std::thread::sleep(Duration::from_millis(50 + rng.below(350)));
        tally
            .worker_acks
            .extend(server.take_acks().into_iter().map(|(l, _)| l));
        // A kind first (library worker or connection backend, evenly),
        // then one of its live processes; the other kind if none lives.
        let backends = super::victims::children_named(server.pid, "backend");
        let workers = super::victims::children_named(server.pid, worker_comm);
        let want_worker = rng.below(2) == 0;
        let (pool, is_worker) = match (want_worker, workers.is_empty(), backends.is_empty()) {
            (_, true, true) => continue,
            (true, false, _) | (false, false, true) => (workers, true),
            _ => (backends, false),
        };
        let pid = pool[rng.below(pool.len() as u64) as usize];
        let restarts_before = restarts_so_far(server);
        if !super::victims::sigkill(pid) {
            continue;
        }
        tally.kills += 1;
        *if is_worker {
            &mut tally.workers_killed
        } else {
            &mut tally.backends_killed
        } += 1;
        verdict(server, pid, restarts_before, tally)?;
        eprint!(
            "\rkills {}  cleaned up {}  restarts {}  worker acks {}   ",
            tally.kills,
            tally.cleaned,
            tally.restarts.len(),
            tally.worker_acks.len()
        );
    }
    eprintln!();
    Ok(())
}

fn more(o: &Options, kills: u64, cycles: u64, t0: Instant) -> bool {
    match o.minutes {
        Some(m) => t0.elapsed().as_secs_f64() < m * 60.0,
        None => kills < cycles,
    }
}

fn count(log: &str, needle: &str) -> usize {
    log.matches(needle).count()
}

/// The server's verdict on the death of one process, read from its log.
pub(super) enum Verdict {
    /// The cleaner's line names it.
    Cleaned,
    /// A crash restart began after the kill; the last line naming the
    /// process says why.
    Restarted(String),
}

/// Server `s`'s verdict on the death of `pid` so far, if any:
/// `restarts_before` is the number of crash restarts its log showed
/// before the kill.
pub(super) fn verdict_so_far(s: &Server, pid: i32, restarts_before: usize) -> Option<Verdict> {
    let log = std::fs::read_to_string(&s.log).unwrap_or_default();
    let named = format!("(PID {pid})");
    if count(&log, RESTARTED) > restarts_before {
        let why = log.lines().rev().find(|l| l.contains(&named));
        return Some(Verdict::Restarted(
            why.unwrap_or("(no line names it)").to_string(),
        ));
    }
    log.lines()
        .any(|l| l.contains(CLEANED) && l.contains(&named))
        .then_some(Verdict::Cleaned)
}

/// Crash restarts the log of `s` shows so far.
pub(super) fn restarts_so_far(s: &Server) -> usize {
    count(
        &std::fs::read_to_string(&s.log).unwrap_or_default(),
        RESTARTED,
    )
}

/// Waits for the server's answer to the death of `pid`: a clean-up line
/// naming it, or a crash restart (then ready again). A connection backend
/// killed after its session ended (the client was reconnecting) leaves
/// nothing to clean: no line comes, and that is fine after a moment.
fn verdict(
    server: &mut Server,
    pid: i32,
    restarts_before: usize,
    tally: &mut Tally,
) -> Result<(), String> {
    let deadline = Instant::now() + VERDICT_TIMEOUT;
    loop {
        match verdict_so_far(server, pid, restarts_before) {
            Some(Verdict::Restarted(why)) => {
                tally.restarts.push(why);
                let ready = server.ready_count() + 1;
                server.wait_ready(ready, START_TIMEOUT)?;
                return Ok(());
            }
            Some(Verdict::Cleaned) => {
                tally.cleaned += 1;
                return Ok(());
            }
            None => {}
        }
        if Instant::now() > deadline {
            // Killed between sessions or before it had a slot and held
            // nothing: nothing to say.
            if !shmem::sys::process_exists(pid) {
                return Ok(());
            }
            return Err(format!(
                "no verdict on the death of PID {pid} within {VERDICT_TIMEOUT:?}"
            ));
        }
        if let Some(code) = server.try_exit() {
            return Err(format!(
                "the postmaster exited ({code:?}) after PID {pid} was killed"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One client session after another: transactions of one message each,
/// the message's LSN recorded once COMMIT returned.
fn client(dir: &Path, port: u16, id: u32, stop: &AtomicBool, acks: &Mutex<ClientAcks>) {
    let user = std::env::var("USER").unwrap_or_else(|_| "postgres".into());
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = Conn::connect(dir, port, &user, "postgres") else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        acks.lock().unwrap_or_else(|p| p.into_inner()).sessions += 1;
        while !stop.load(Ordering::Relaxed) {
            seq += 1;
            let Ok(lsn) = one_transaction(&mut c, id, seq) else {
                break;
            };
            let mut a = acks.lock().unwrap_or_else(|p| p.into_inner());
            a.messages.push(lsn);
            a.commits += 1;
        }
    }
}

fn one_transaction(c: &mut Conn, id: u32, seq: u64) -> Result<u64, String> {
    c.query("BEGIN")?;
    let lsn = c.query_one(&format!(
        "SELECT pg_logical_emit_message(true, 'torture-client', '{id}:{seq}')"
    ))?;
    c.query("COMMIT")?;
    walformat::parse_lsn(&lsn).map_err(|e| e.to_string())
}

/// What the final checks found, and the restarts' summary.
struct Summary {
    /// Acknowledged commits (workers' and clients') not in the WAL.
    lost: usize,
    /// The transactions the cleaner says it aborted.
    cleaner_aborted: HashSet<u32>,
    violations: Vec<String>,
    /// Whether pg_waldump read the WAL to its end (None: not installed).
    pg_waldump: Option<bool>,
    /// Crash restarts by reason.
    reasons: BTreeMap<String, u64>,
    /// Crash restarts per kill.
    share: f64,
}

/// The final checks and the report (stdout, and `--json`).
fn check_and_report(
    o: &Options,
    datadir: &Path,
    tally: &Tally,
    acks: &ClientAcks,
    log: &str,
    took: Duration,
) -> Result<(), String> {
    let s = final_checks(datadir, tally, acks, log)?;
    print_summary(tally, acks, &s, took);
    if let Some(path) = &o.json {
        let json = summary_json(o.seed, tally, acks, &s, took);
        crate::report::write_file(path, format!("{json}\n").as_bytes())?;
    }
    if s.lost > 0 || !s.violations.is_empty() {
        return Err(format!(
            "{} acknowledged commits lost, {} violations; data directory kept",
            s.lost,
            s.violations.len()
        ));
    }
    Ok(())
}

/// The checks over the WAL: every acknowledged commit (worker LSNs, the
/// clients' emitted messages) delivered, and every transaction the
/// cleaner aborted neither delivered nor without its ABORT record.
fn final_checks(
    datadir: &Path,
    tally: &Tally,
    acks: &ClientAcks,
    log: &str,
) -> Result<Summary, String> {
    let verdict = history::check(datadir, &tally.worker_acks)?;
    let scan = history::scan_all(datadir)?;
    let mut violations = verdict.violations.clone();
    // pg_logical_emit_message returns the end of its record: the message
    // is the last one that starts before it.
    let client_lost: Vec<u64> = acks
        .messages
        .iter()
        .filter(|end| {
            let start = scan.tx_messages.range(..**end).next_back();
            !start.is_some_and(|s| scan.delivered.contains(s))
        })
        .copied()
        .collect();
    let cleaner_aborted = aborted_by_cleaner(log);
    for xid in &cleaner_aborted {
        if scan.delivered_xids.contains(xid) {
            violations.push(format!(
                "transaction {xid}, aborted by the cleaner, was delivered as committed"
            ));
        }
        if !scan.aborted.contains(xid) {
            violations.push(format!("transaction {xid}: no ABORT record"));
        }
    }
    let lost = verdict.lost.len() + client_lost.len();
    Ok(Summary {
        lost,
        cleaner_aborted,
        violations,
        pg_waldump: verdict.pg_waldump,
        reasons: restart_reasons(&tally.restarts),
        share: tally.restarts.len() as f64 / tally.kills.max(1) as f64,
    })
}

/// The report on stdout.
fn print_summary(tally: &Tally, acks: &ClientAcks, s: &Summary, took: Duration) {
    println!(
        "walbench torture --kill-attached: {} kills ({} library workers, {} connection backends) in {:.0} s",
        tally.kills,
        tally.workers_killed,
        tally.backends_killed,
        took.as_secs_f64()
    );
    println!(
        "  cleaned up without a restart: {}   crash restarts: {} ({:.1}% of kills)",
        tally.cleaned,
        tally.restarts.len(),
        s.share * 100.0
    );
    for (why, n) in &s.reasons {
        println!("    restart x{n}: {why}");
    }
    println!(
        "  acknowledged: {} worker commits, {} client commits ({} sessions); lost: {}",
        tally.worker_acks.len(),
        acks.commits,
        acks.sessions,
        s.lost
    );
    println!(
        "  transactions aborted by the cleaner: {} (none delivered, each with its ABORT record: {})",
        s.cleaner_aborted.len(),
        s.violations.is_empty()
    );
    println!(
        "  pg_waldump: {}",
        match s.pg_waldump {
            Some(true) => "read the WAL to its end",
            Some(false) => "DISAGREES",
            None => "not installed",
        }
    );
    for v in &s.violations {
        println!("  VIOLATION: {v}");
    }
}

/// The report as `--json` writes it.
fn summary_json(
    seed: u64,
    tally: &Tally,
    acks: &ClientAcks,
    s: &Summary,
    took: Duration,
) -> serde_json::Value {
    serde_json::json!({
        "mode": "kill-attached",
        "cycles": tally.kills,
        "kills": {"library_workers": tally.workers_killed, "connection_backends": tally.backends_killed},
        "cleaned_up": tally.cleaned,
        "crash_restarts": tally.restarts.len(),
        "restart_share": s.share,
        "restart_reasons": s.reasons,
        "acknowledged": tally.worker_acks.len() as u64 + acks.commits,
        "lost": s.lost,
        "aborted_by_cleaner": s.cleaner_aborted.len(),
        "pg_waldump": s.pg_waldump,
        "violations": s.violations,
        "seconds": took.as_secs_f64(),
        "seed": seed,
    })
}

/// The XIDs in the cleaner's "aborted its transaction N" lines.
fn aborted_by_cleaner(log: &str) -> HashSet<u32> {
    log.lines()
        .filter(|l| l.contains(CLEANED))
        .filter_map(|l| {
            let rest = l.split("aborted its transaction ").nth(1)?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Each restart's reason (the part after "it died"), counted.
fn restart_reasons(lines: &[String]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in lines {
        let why = l
            .split_once(": it died ")
            .map(|(_, w)| format!("it died {w}"))
            .unwrap_or_else(|| l.clone());
        *m.entry(why).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaner_lines_name_the_aborted_transactions_and_restarts_their_reasons() {
        let log = "cleaner[1] LOG:  worker (PID 5) was terminated by signal 9: Killed; cleaned up without a restart: aborted its transaction 812 (ABORT at 0/10); passed on 1 admission token(s)\n\
                   cleaner[2] LOG:  connection backend (PID 6) x; cleaned up without a restart: cleared the XID of its committed transaction 9\n";
        assert_eq!(aborted_by_cleaner(log), HashSet::from([812]));
        let r = restart_reasons(&[
            "postmaster[1] LOG:  worker (PID 7) lost ...: it died holding a spinlock".into(),
            "postmaster[1] LOG:  worker (PID 8) lost ...: it died holding a spinlock".into(),
        ]);
        assert_eq!(r.get("it died holding a spinlock"), Some(&2));
    }
}
