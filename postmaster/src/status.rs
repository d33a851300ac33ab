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
//! JSON object (`--json`) for programs.

use crate::datadir::PID_FILE;
use crate::report::json_string;
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

pub struct StatusOptions {
    pub datadir: std::path::PathBuf,
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
        Ok(geo) => geo.bytepos_to_recptr(x.insert.curr_byte_pos.load(Ordering::Relaxed)),
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
fn throttle_json(shm: &Shmem) -> String {
    let t = &shm.repl().throttle;
    let point = t.allowed_upto.load(Ordering::Relaxed);
    format!(
        "{{\"allowed_upto\":{},\"waiting\":{},\"waits\":{},\"wait_us\":{}}}",
        if point == 0 {
            "null".into()
        } else {
            json_string(&walformat::format_lsn(point))
        },
        t.waiters.load(Ordering::Relaxed),
        t.waits.load(Ordering::Relaxed),
        t.wait_us.load(Ordering::Relaxed)
    )
}

/// The server's state as read from the segment.
struct Running {
    pid: i32,
    uptime_s: u64,
    wal: (u64, u64, u64),
    /// Flow control's counters (`max_replication_lag`), as a JSON object.
    throttle: String,
    procs: Vec<ProcActivity>,
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

fn opt_json(s: Option<&str>) -> String {
    s.map_or("null".into(), json_string)
}

fn json(r: &Running) -> String {
    let lsn = |l| json_string(&walformat::format_lsn(l));
    let procs: Vec<String> = r
        .procs
        .iter()
        .map(|p| {
            format!(
                "{{\"pid\":{},\"procno\":{},\"backend_type\":{},\"wait_event_type\":{},\"wait_event\":{},\"state\":{}}}",
                p.pid,
                p.procno,
                json_string(p.backend_type_name),
                opt_json(p.wait_event_type),
                opt_json(p.wait_event),
                opt_json(p.state)
            )
        })
        .collect();
    format!(
        "{{\"running\":true,\"pid\":{},\"uptime_s\":{},\"insert_lsn\":{},\"write_lsn\":{},\"flush_lsn\":{},\"throttle\":{},\"processes\":[{}]}}\n",
        r.pid,
        r.uptime_s,
        lsn(r.wal.0),
        lsn(r.wal.1),
        lsn(r.wal.2),
        r.throttle,
        procs.join(",")
    )
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
            println!("{{\"running\":false}}");
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
                println!(
                    "{{\"running\":true,\"pid\":{},\"processes\":null}}",
                    info.pid
                );
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
        throttle: throttle_json(&shm),
        procs: stats::activity(&shm),
    };
    print!("{}", if opts.json { json(&r) } else { text(&r) });
    EXIT_RUNNING
}
