//! One measured point: a fresh postmaster with given settings, workload and
//! client count, sampled through shared memory over a timed window.
//!
//! Invariants: every number returned comes from the runtime's own counters
//! (per-proc transaction/record/byte counters, the WAL write counters, the
//! per-proc latency histograms) read as deltas over the window, so start-up
//! and shutdown never count (the window opens once every client has
//! finished a transaction); the window is also sampled for the backends'
//! wait events and the mechanism counters' delta (`observe`);
//! `records_at_exit` is read after the server has
//! exited, from our still-mapped segment, so it equals what the backends
//! wrote to WAL in the whole run. The server runs in its own process group
//! and is killed if the point fails half-way.

use crate::observe::{self, Observed};
use crate::procstat::{self, TreeSample};
use shmem::histogram::{quantile, BUCKETS};
use shmem::register::{self, Kind};
use shmem::stats;
use shmem::sync::Ordering;
use shmem::Shmem;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to run for one point.
#[derive(Clone, Debug)]
pub struct PointSpec {
    pub workload: String,
    pub clients: u32,
    pub seconds: f64,
    /// `--set` assignments, in order (later wins).
    pub sets: Vec<String>,
    /// Reuse this data directory (initialized if empty).
    pub datadir: Option<PathBuf>,
    /// Where fresh temporary data directories go.
    pub temp_base: PathBuf,
    /// Keep the data directory at this path (must not exist yet).
    pub keep_at: Option<PathBuf>,
    /// Instead of the built-in workload, run `clients` supervised workers
    /// with this command (`postmaster start --worker`), given `--size SIZE`
    /// and, for `emit-tx:SIZE`, `--tx`; their worker slots are sampled.
    pub worker_cmd: Option<String>,
}

/// The counters of one point.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub seconds: f64,
    pub transactions: u64,
    pub records: u64,
    pub bytes: u64,
    pub wal_syncs: u64,
    pub wal_writes: u64,
    pub preinit_pages: u64,
    pub backend_init_pages: u64,
    pub buffer_full_waits: u64,
    /// Records the backends inserted over the whole run (read after exit).
    pub records_at_exit: u64,
    pub latency_ns_p50: Option<u64>,
    pub latency_ns_p99: Option<u64>,
    /// CPU time of the server's processes over the window / window length.
    pub cpu_cores: f64,
    /// Resident memory of the server's processes at the end of the window.
    pub mem_bytes: u64,
    /// Wait events sampled and mechanism counters over the window.
    pub observed: Observed,
}

/// A throwaway directory under `base`, removed on drop.
pub fn temp_dir_in(base: &Path) -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix("walbench.")
        .tempdir_in(base)
        .map_err(|e| {
            format!(
                "could not create a temporary directory in \"{}\": {e}",
                base.display()
            )
        })
}

/// Kills the server's process group if a point fails half-way.
struct ServerGuard(Option<Child>);

impl Drop for ServerGuard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            // The group is the server's.
            shmem::sys::kill(-(c.id() as i32), shmem::sys::Signal::SIGKILL);
            let _ = c.wait();
        }
    }
}

#[derive(Default, Clone)]
struct Sample {
    transactions: u64,
    records: u64,
    bytes: u64,
    syncs: u64,
    writes: u64,
    preinit: u64,
    backend_init: u64,
    full_waits: u64,
    hist: Vec<u64>,
}

/// The proc slots a point samples: the first `clients` backends, or the
/// first `clients` worker slots when the point runs worker commands.
fn sampled_procnos(shm: &Shmem, p: &PointSpec) -> Vec<u32> {
    match p.worker_cmd {
        None => (0..p.clients).collect(),
        Some(_) => (0..p.clients.min(shm.max_workers()))
            .map(|i| shm.worker_procno(i))
            .collect(),
    }
}

/// `postmaster start` arguments running the point's load: the built-in
/// workload, or `clients` supervised workers (see `PointSpec::worker_cmd`).
fn load_args(p: &PointSpec) -> Result<Vec<String>, String> {
    let Some(cmd) = &p.worker_cmd else {
        return Ok(vec![
            "--workers".into(),
            p.clients.to_string(),
            "--workload".into(),
            p.workload.clone(),
        ]);
    };
    let (tx, size) = match p.workload.split_once(':') {
        Some(("emit", size)) => ("", size),
        Some(("emit-tx", size)) => (" --tx", size),
        _ => {
            return Err(format!(
                "a worker command runs emit:SIZE or emit-tx:SIZE, not {}",
                p.workload
            ))
        }
    };
    let mut args = vec![
        "--set".into(),
        format!("max_worker_processes={}", p.clients),
    ];
    for i in 0..p.clients {
        args.push("--worker".into());
        args.push(format!("w{i}={cmd} --size {size}{tx}"));
    }
    Ok(args)
}

/// Records a backend may insert between our reads of its counters and
/// still count as read at one moment.
const COUNTS_SKEW_RECORDS: u64 = 64;

/// Proc `i`'s (transactions, WAL records, WAL bytes), read close enough
/// together to belong to one moment: a sampler preempted between the loads
/// (milliseconds on a loaded machine, i.e. thousands of records) would
/// pair a transaction count with a later record count, so the reads are
/// retried while more than `COUNTS_SKEW_RECORDS` records went in between
/// (at most a few times: the last try stands).
fn consistent_counts(shm: &Shmem, i: u32) -> (u64, u64, u64) {
    let p = &shm.procs()[i as usize];
    let wal = &shm.proc_stats(i).counters.flat;
    let read = || {
        let before = wal.wal_records.load(Ordering::Relaxed);
        let transactions = p.counters.transactions.load(Ordering::Relaxed);
        let records = wal.wal_records.load(Ordering::Relaxed);
        let bytes = wal.wal_bytes.load(Ordering::Relaxed);
        (records - before, (transactions, records, bytes))
    };
    let mut counts = read();
    for _ in 0..8 {
        if counts.0 <= COUNTS_SKEW_RECORDS {
            break;
        }
        counts = read();
    }
    counts.1
}

/// Waits (at most `limit`) until every client has finished a transaction.
/// "Ready" is logged once the backends are forked, not once they run: each
/// still maps its WAL buffers in (`prefault_wal_buffers`: 4096 pages of
/// 4 KiB with 16 MB of buffers, about 2 us each by that function's own
/// figure), so with hundreds of clients on 2 cores that start-up could run
/// into the window and count against the oversubscribed points only. A
/// client that has not started by then is left to the window (never an
/// error: a point with a stuck client measures what it measures).
fn wait_all_clients_started(shm: &Shmem, procnos: &[u32], limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut pending: Vec<u32> = procnos.to_vec();
    loop {
        pending.retain(|&i| consistent_counts(shm, i).0 == 0);
        if pending.is_empty() || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sample(shm: &Shmem, procnos: &[u32]) -> Sample {
    let mut s = Sample {
        hist: vec![0; BUCKETS],
        ..Sample::default()
    };
    for &i in procnos {
        let (transactions, records, bytes) = consistent_counts(shm, i);
        s.transactions += transactions;
        s.records += records;
        s.bytes += bytes;
        for (acc, v) in s.hist.iter_mut().zip(shm.latency_histogram(i).snapshot()) {
            *acc += v;
        }
    }
    let x = shm.xlog();
    s.syncs = x.write.syncs.load(Ordering::Relaxed);
    s.writes = x.write.writes.load(Ordering::Relaxed);
    s.preinit = x.bufmap.preinit_pages.load(Ordering::Relaxed);
    s.backend_init = x.bufmap.backend_init_pages.load(Ordering::Relaxed);
    s.full_waits = x.bufmap.buffer_full_waits.load(Ordering::Relaxed);
    s
}

/// Starts the server for point `p` on `dir`, in a process group of its own,
/// its log in `log_path`.
fn start_server(
    postmaster: &Path,
    p: &PointSpec,
    dir: &Path,
    log_path: &Path,
) -> Result<std::process::Child, String> {
    let log = std::fs::File::create(log_path)
        .map_err(|e| format!("could not create \"{}\": {e}", log_path.display()))?;
    let mut cmd = Command::new(postmaster);
    cmd.args(["start", "-D"]).arg(dir);
    for s in &p.sets {
        cmd.args(["--set", s]);
    }
    cmd.args(load_args(p)?)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn()
        .map_err(|e| format!("could not start postmaster: {e}"))
}

/// Runs one point end to end.
pub fn measure(postmaster: &Path, p: &PointSpec) -> Result<Measured, String> {
    let tmp;
    let dir = match (&p.keep_at, &p.datadir) {
        (Some(k), _) => {
            std::fs::create_dir_all(k.parent().unwrap_or(Path::new(".")))
                .map_err(|e| format!("could not create \"{}\": {e}", k.display()))?;
            k.clone()
        }
        (None, Some(d)) => d.clone(),
        (None, None) => {
            tmp = temp_dir_in(&p.temp_base)?;
            tmp.path().join("data")
        }
    };
    crate::command::init_if_needed(postmaster, &dir, &[])?;
    let log_path = dir.with_file_name(format!(
        "walbench-{}-{}.log",
        std::process::id(),
        dir.file_name().and_then(|s| s.to_str()).unwrap_or("data")
    ));
    let child = start_server(postmaster, p, &dir, &log_path)?;
    let pgid = child.id() as i32;
    let mut guard = ServerGuard(Some(child));
    let server_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let fail = |e: String| format!("{e}\n{}", server_log());

    // Start-up of thousands of backends takes a while on a small machine.
    let ready_timeout = Duration::from_secs(60 + u64::from(p.clients) / 20);
    wait_ready(&log_path, ready_timeout).map_err(fail)?;
    // An observer: the segment's descriptor without a proc slot.
    let reg = register::connect(&dir, Kind::Observer).map_err(|e| fail(e.to_string()))?;
    let shm = &reg.shm;
    let procnos = sampled_procnos(shm, p);
    let start_limit = Duration::from_secs(5) + Duration::from_millis(20) * p.clients;
    wait_all_clients_started(shm, &procnos, start_limit);
    std::thread::sleep(Duration::from_secs_f64((p.seconds / 4.0).min(0.5)));
    let c0 = procstat::sample_group(pgid);
    let t0 = Instant::now();
    let s0 = sample(shm, &procnos);
    let m0 = stats::mechanism_totals(shm);
    let waits = observe::sample_window(shm, p.seconds);
    let m1 = stats::mechanism_totals(shm);
    let s1 = sample(shm, &procnos);
    let dt = t0.elapsed().as_secs_f64();
    let c1 = procstat::sample_group(pgid);

    let child = guard.0.take().expect("server running");
    shmem::sys::kill(pgid, shmem::sys::Signal::SIGTERM);
    let mut child = child;
    let status = child.wait().map_err(|e| e.to_string())?;
    // The segment has no name and stays mapped here after the server is
    // gone: the final counters are the whole run's.
    let records_at_exit = sample(shm, &procnos).records;
    drop(reg);
    let log_text = server_log();
    let _ = std::fs::remove_file(&log_path);
    if !status.success() {
        return Err(format!(
            "postmaster ({} with {} clients) exited with {status}\n{log_text}",
            p.workload, p.clients
        ));
    }
    let mut m = combine(&s0, &s1, dt, &c0, &c1, records_at_exit);
    m.observed = Observed::new(&waits, &m0, &m1);
    Ok(m)
}

fn combine(
    s0: &Sample,
    s1: &Sample,
    dt: f64,
    c0: &TreeSample,
    c1: &TreeSample,
    records_at_exit: u64,
) -> Measured {
    let hist: Vec<u64> = s1
        .hist
        .iter()
        .zip(&s0.hist)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    Measured {
        seconds: dt,
        transactions: s1.transactions - s0.transactions,
        records: s1.records - s0.records,
        bytes: s1.bytes - s0.bytes,
        wal_syncs: s1.syncs - s0.syncs,
        wal_writes: s1.writes - s0.writes,
        preinit_pages: s1.preinit - s0.preinit,
        backend_init_pages: s1.backend_init - s0.backend_init,
        buffer_full_waits: s1.full_waits - s0.full_waits,
        records_at_exit,
        latency_ns_p50: quantile(&hist, 0.5),
        latency_ns_p99: quantile(&hist, 0.99),
        cpu_cores: procstat::cpu_cores_between(c0, c1, dt),
        mem_bytes: c1.mem_bytes(),
        observed: Observed::default(),
    }
}

fn wait_ready(log: &Path, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("ready to accept connections") {
            return Ok(());
        }
        if text.contains("FATAL") {
            return Err("postmaster failed to start".into());
        }
        if Instant::now() > deadline {
            return Err("postmaster did not become ready in time".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
