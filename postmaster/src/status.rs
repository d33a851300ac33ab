//! `postmaster status -D DIR` (PostgreSQL's `pg_ctl status`): is a server
//! running on DIR, since when, where its WAL stands, and what each of its
//! processes is doing.
//!
//! Exit status as pg_ctl's: 0 running, 3 not running, 4 no usable data
//! directory. "Running" means `DIR/postmaster.pid` names a live process
//! called `postmaster`; then the shared memory segment is attached through
//! [`observe`] (the one place that knows how an observer finds it) and read
//! with plain atomic loads only: no lock is taken, so a wedged or crashed
//! server cannot make this command hang. Output is text for people, or one
//! JSON object on one line (`--json`) for programs: `{"running":false}`;
//! `{"running":true,"pid":N,"processes":null}` while the segment cannot be
//! read (the server starts or restarts); else `StatusJson` with the WAL
//! positions, `throttle`, `processes_cleaned` and `crash_restarts` (dead
//! processes cleaned up after without a restart, and restarts, since the
//! postmaster started), one entry per replication slot (physical,
//! logical, the worker library's), `standby` (null, or a standby's
//! received and replayed positions and its walreceiver) and one entry per
//! process.

use crate::datadir::PID_FILE;
use serde::Serialize;
use shmem::register::{self, Kind};
use shmem::stats::{self, ProcActivity};
use shmem::sync::Ordering;
use shmem::Shmem;
use std::fmt::Write as _;
use std::path::Path;

/// pg_ctl's exit statuses.
pub const EXIT_RUNNING: i32 = 0;
pub const EXIT_NOT_RUNNING: i32 = 3;
pub const EXIT_NO_DATADIR: i32 = 4;

#[derive(clap::Args)]
pub struct StatusOptions {
    /// The data directory to look at
    #[arg(short = 'D', visible_alias = "pgdata", value_name = "DIR")]
    pub datadir: std::path::PathBuf,
    /// Print one JSON object on one line (for programs)
    #[arg(long)]
    pub json: bool,
}

/// What `postmaster.pid` says (its first and third lines).
struct PidFileInfo {
    pid: i32,
    start_unix_s: u64,
}

fn read_pid_file(dir: &Path) -> Option<PidFileInfo> {
    let text = std::fs::read_to_string(dir.join(PID_FILE)).ok()?;
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse().ok()?;
    let _dir = lines.next();
    let start_unix_s = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    Some(PidFileInfo { pid, start_unix_s })
}

/// Is `pid` alive and a postmaster?
fn is_live_postmaster(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postmaster")
}

/// Attaches the shared memory of the server running on `datadir` for
/// reading: the observer registration (`shmem::register`, no proc slot;
/// an observer may leave at any time, so the channel is not kept). The one
/// function to change when the way an observer finds the segment changes.
pub fn observe(datadir: &Path) -> Result<Shmem, String> {
    register::connect(datadir, Kind::Observer)
        .map(|r| r.shm)
        .map_err(|e| e.to_string())
}

/// Where the server's WAL stands: (insert, write, flush) LSNs.
fn wal_positions(shm: &Shmem) -> (u64, u64, u64) {
    let x = shm.xlog();
    let insert = match walformat::Geometry::new(x.facts.seg_size) {
        Ok(geo) => backend::xlog::next_record_start(shm, &geo),
        Err(_) => 0,
    };
    (
        insert,
        x.write.write_result.load(Ordering::Relaxed),
        x.write.flush_result.load(Ordering::Relaxed),
    )
}

/// `max_replication_lag`'s state: the published throttle point (null
/// when off or no receiver counts), the backends waiting now, the waits
/// so far and their total time.
#[derive(Serialize)]
struct Throttle {
    allowed_upto: Option<String>,
    waiting: u32,
    waits: u64,
    wait_us: u64,
}

fn throttle(shm: &Shmem) -> Throttle {
    let t = &shm.repl().throttle;
    let point = t.allowed_upto.load(Ordering::Relaxed);
    Throttle {
        allowed_upto: (point != 0).then(|| walformat::format_lsn(point)),
        waiting: t.waiters.load(Ordering::Relaxed),
        waits: t.waits.load(Ordering::Relaxed),
        wait_us: t.wait_us.load(Ordering::Relaxed),
    }
}

/// One replication slot, read with plain loads (a slot changing under
/// the read shows a mix of two states, never blocks anything).
#[derive(Serialize)]
struct SlotJson {
    name: String,
    slot_type: &'static str,
    plugin: Option<String>,
    active_pid: Option<i32>,
    restart_lsn: Option<String>,
    confirmed_flush_lsn: Option<String>,
    lost: bool,
}

fn slots(shm: &Shmem) -> Vec<SlotJson> {
    let n = shm.settings().max_replication_slots as usize;
    let lsn = |v: u64| (v != 0).then(|| walformat::format_lsn(v));
    shm.repl()
        .slots
        .iter()
        .take(n)
        .filter(|s| s.in_use.load(Ordering::Relaxed) != 0)
        .map(|s| {
            let logical = s.logical.load(Ordering::Relaxed) != 0;
            let pid = s.active_pid.load(Ordering::Relaxed);
            SlotJson {
                name: s.name.load(),
                slot_type: if logical { "logical" } else { "physical" },
                plugin: logical.then(|| s.plugin.load()),
                active_pid: (pid != 0).then_some(pid),
                restart_lsn: lsn(s.restart_lsn.load(Ordering::Relaxed)),
                confirmed_flush_lsn: lsn(s.confirmed_flush.load(Ordering::Relaxed))
                    .filter(|_| logical),
                lost: s.lost.load(Ordering::Relaxed) != 0,
            }
        })
        .collect()
}

/// A standby's positions and walreceiver (`shmem::walrcv`).
#[derive(Serialize)]
struct StandbyJson {
    receive_lsn: String,
    replay_lsn: String,
    walreceiver_pid: Option<i32>,
    walreceiver_status: &'static str,
}

fn standby(shm: &Shmem) -> Option<StandbyJson> {
    let w = &shm.repl().walrcv;
    if !w.in_recovery() {
        return None;
    }
    let pid = w.pid.load(Ordering::Relaxed);
    Some(StandbyJson {
        receive_lsn: walformat::format_lsn(w.flushed_upto.load(Ordering::Relaxed)),
        replay_lsn: walformat::format_lsn(w.replayed_upto.load(Ordering::Relaxed)),
        walreceiver_pid: (pid > 0).then_some(pid),
        walreceiver_status: shmem::walrcv::rcv_state::name(w.state.load(Ordering::Relaxed)),
    })
}

/// The server's state as read from the segment.
struct Running {
    pid: i32,
    uptime_s: u64,
    wal: (u64, u64, u64),
    /// Flow control's counters (`max_replication_lag`).
    throttle: Throttle,
    slots: Vec<SlotJson>,
    standby: Option<StandbyJson>,
    procs: Vec<ProcActivity>,
    deaths: Deaths,
}

/// Processes that died since the postmaster started: cleaned up after
/// without a restart, and crash restarts (`backend::abandoned`).
#[derive(Serialize, Clone, Copy)]
struct Deaths {
    processes_cleaned: u64,
    crash_restarts: u64,
}

fn deaths(shm: &Shmem) -> Deaths {
    let h = shm.header();
    Deaths {
        processes_cleaned: h.processes_cleaned.load(Ordering::Relaxed),
        crash_restarts: h.crash_restarts.load(Ordering::Relaxed),
    }
}

/// `--json` of a running server (module header), in key order; without
/// `wal` (the segment could not be read) `processes` is null.
#[derive(Serialize)]
struct StatusJson<'a> {
    running: bool,
    pid: i32,
    #[serde(flatten)]
    wal: Option<WalJson<'a>>,
    processes: Option<Vec<ProcessJson<'a>>>,
}

#[derive(Serialize)]
struct WalJson<'a> {
    uptime_s: u64,
    insert_lsn: String,
    write_lsn: String,
    flush_lsn: String,
    throttle: &'a Throttle,
    #[serde(flatten)]
    deaths: Deaths,
    slots: &'a [SlotJson],
    standby: &'a Option<StandbyJson>,
}

/// One process of `--json`.
#[derive(Serialize)]
struct ProcessJson<'a> {
    pid: i32,
    procno: u32,
    backend_type: &'a str,
    wait_event_type: Option<&'a str>,
    wait_event: Option<&'a str>,
    state: Option<&'a str>,
}

fn text(r: &Running) -> String {
    let lsn = walformat::format_lsn;
    let mut out = format!(
        "postmaster: server is running (PID: {})\nuptime: {} s\nWAL: insert {}  write {}  flush {}\n",
        r.pid,
        r.uptime_s,
        lsn(r.wal.0),
        lsn(r.wal.1),
        lsn(r.wal.2)
    );
    let _ = writeln!(
        out,
        "dead processes cleaned up: {}  crash restarts: {}",
        r.deaths.processes_cleaned, r.deaths.crash_restarts
    );
    if let Some(s) = &r.standby {
        let _ = writeln!(
            out,
            "standby: received and flushed {}  replayed {}  walreceiver {} ({})",
            s.receive_lsn,
            s.replay_lsn,
            s.walreceiver_pid
                .map_or_else(|| "-".to_string(), |p| p.to_string()),
            s.walreceiver_status
        );
    }
    for s in &r.slots {
        let _ = writeln!(
            out,
            "slot {} ({}{}): restart {}{}{}{}",
            s.name,
            s.slot_type,
            s.plugin
                .as_deref()
                .map(|p| format!(", {p}"))
                .unwrap_or_default(),
            s.restart_lsn.as_deref().unwrap_or("-"),
            s.confirmed_flush_lsn
                .as_deref()
                .map(|c| format!("  confirmed {c}"))
                .unwrap_or_default(),
            s.active_pid
                .map(|p| format!("  active {p}"))
                .unwrap_or_default(),
            if s.lost { "  lost" } else { "" }
        );
    }
    let _ = writeln!(
        out,
        "{:>8}  {:<16} {:<30} state",
        "pid", "type", "wait event"
    );
    for p in &r.procs {
        let wait = match (p.wait_event_type, p.wait_event) {
            (Some(t), Some(e)) => format!("{t}:{e}"),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:>8}  {:<16} {:<30} {}",
            p.pid,
            p.backend_type_name,
            wait,
            p.state.unwrap_or("-")
        );
    }
    out
}

fn json(r: &Running) -> String {
    let lsn = walformat::format_lsn;
    let status = StatusJson {
        running: true,
        pid: r.pid,
        wal: Some(WalJson {
            uptime_s: r.uptime_s,
            insert_lsn: lsn(r.wal.0),
            write_lsn: lsn(r.wal.1),
            flush_lsn: lsn(r.wal.2),
            throttle: &r.throttle,
            deaths: r.deaths,
            slots: &r.slots,
            standby: &r.standby,
        }),
        processes: Some(
            r.procs
                .iter()
                .map(|p| ProcessJson {
                    pid: p.pid,
                    procno: p.procno,
                    backend_type: p.backend_type_name,
                    wait_event_type: p.wait_event_type,
                    wait_event: p.wait_event,
                    state: p.state,
                })
                .collect(),
        ),
    };
    json_line(&status)
}

/// `v` as one line of JSON.
fn json_line(v: &impl Serialize) -> String {
    let mut line = serde_json::to_string(v).expect("the status serializes");
    line.push('\n');
    line
}

/// Runs the command; returns the exit status (see the module header).
pub fn run(opts: &StatusOptions) -> i32 {
    let dir = &opts.datadir;
    if !dir.join("global").join("pg_control").exists() {
        eprintln!(
            "postmaster: error: directory \"{}\" is not a database cluster directory",
            dir.display()
        );
        return EXIT_NO_DATADIR;
    }
    let not_running = || {
        if opts.json {
            print!("{}", json_line(&serde_json::json!({ "running": false })));
        } else {
            println!("postmaster: no server running");
        }
        EXIT_NOT_RUNNING
    };
    let Some(info) = read_pid_file(dir).filter(|i| is_live_postmaster(i.pid)) else {
        return not_running();
    };
    let shm = match observe(dir) {
        Ok(s) => s,
        Err(e) => {
            // While it starts or restarts after a crash the segment may be
            // missing: the server runs, its shared state is not there yet.
            if opts.json {
                let status = StatusJson {
                    running: true,
                    pid: info.pid,
                    wal: None,
                    processes: None,
                };
                print!("{}", json_line(&status));
            } else {
                println!("postmaster: server is running (PID: {})", info.pid);
            }
            eprintln!("postmaster: warning: its shared memory cannot be read: {e}");
            return EXIT_RUNNING;
        }
    };
    let now = stats::now_us() / 1_000_000;
    let r = Running {
        pid: info.pid,
        uptime_s: now.saturating_sub(info.start_unix_s),
        wal: wal_positions(&shm),
        throttle: throttle(&shm),
        slots: slots(&shm),
        standby: standby(&shm),
        procs: stats::activity(&shm),
        deaths: deaths(&shm),
    };
    print!("{}", if opts.json { json(&r) } else { text(&r) });
    EXIT_RUNNING
}
