//! Shared harness for the integration tests: temporary directories, a
//! `postmaster start` child that is always cleaned up (its whole process
//! group is SIGKILLed on drop), `/proc` and `/dev/shm` inspection, and WAL
//! verification with the project's own reader, `postmaster waldump` and
//! PostgreSQL 15's `pg_waldump`.
#![allow(dead_code)]

pub mod receiver;
pub mod wire;

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A small deterministic pseudo-random sequence (xorshift), seeded by its
/// field: the tests that pick cases from a seed replay them exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(hi > lo, "empty range {lo}..{hi}");
        lo + self.next() % (hi - lo)
    }
}

/// Default timeout for every wait in the tests.
pub const TIMEOUT: Duration = Duration::from_secs(30);
pub const READY: &str = "database system is ready to accept connections";

pub fn postmaster_bin() -> &'static str {
    env!("CARGO_BIN_EXE_postmaster")
}

// ---------------------------------------------------------------------------
// Temporary directories

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique directory under the system temp dir, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "walshm-it-{tag}-{}-{n}-{nanos:08x}",
            std::process::id()
        ));
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A test that panicked while a server ran has SIGKILLed it (Server's
        // drop runs first): remove the segments of data dirs in here.
        if let Ok(rd) = fs::read_dir(&self.path) {
            for e in rd.flatten() {
                if e.path().join("global").is_dir() {
                    let _ = fs::remove_file(Path::new("/dev/shm").join(segment_name(&e.path())));
                }
            }
        }
        let _ = fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------
// Running commands with a timeout

/// Output of a finished command.
#[derive(Debug)]
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn describe(&self) -> String {
        format!(
            "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Kills `pid` with SIGKILL unless cancelled before `timeout`.
struct Watchdog {
    tx: Option<std::sync::mpsc::Sender<()>>,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Watchdog {
    fn new(pid: i32, timeout: Duration) -> Watchdog {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = fired.clone();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(timeout) {
                f.store(true, Ordering::SeqCst);
                // SAFETY: kill has no memory effects.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        Watchdog {
            tx: Some(tx),
            fired,
        }
    }
    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(());
        }
    }
}

/// Runs `cmd` to completion (stdout/stderr captured), killing it after
/// `timeout` and panicking then.
pub fn run_cmd(cmd: &mut Command, timeout: Duration) -> Out {
    let desc = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not run {desc}: {e}"));
    let dog = Watchdog::new(child.id() as i32, timeout);
    let mut err_pipe = child.stderr.take().unwrap();
    let err_thread = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let mut out = Vec::new();
    let _ = child.stdout.take().unwrap().read_to_end(&mut out);
    let status = child.wait().expect("wait");
    let err = err_thread.join().unwrap();
    let o = Out {
        status,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    };
    if dog.fired() {
        panic!("{desc} did not finish within {timeout:?}\n{}", o.describe());
    }
    o
}

/// `postmaster ARGS...` with the default timeout.
pub fn postmaster(args: &[&str]) -> Out {
    run_cmd(Command::new(postmaster_bin()).args(args), TIMEOUT)
}

/// Panics if the text looks like a Rust panic.
pub fn assert_no_panic(what: &str, o: &Out) {
    for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(
            !o.stderr.contains(bad) && !o.stdout.contains(bad),
            "{what}: output contains {bad:?}\n{}",
            o.describe()
        );
    }
    assert!(
        o.status.signal().is_none(),
        "{what}: killed by a signal\n{}",
        o.describe()
    );
}

// ---------------------------------------------------------------------------
// Data directories

/// A data directory made by `postmaster init`.
#[derive(Clone, Debug)]
pub struct DataDir {
    pub path: PathBuf,
    pub seg_size: u64,
    /// LSN of init's shutdown checkpoint (first record).
    pub first_lsn: u64,
}

/// `postmaster init -D DIR ARGS...`; panics on failure.
pub fn init(dir: &Path, args: &[&str]) -> DataDir {
    let d = dir.to_str().unwrap();
    let mut all = vec!["init", "-D", d];
    all.extend_from_slice(args);
    let o = postmaster(&all);
    assert!(o.status.success(), "init failed\n{}", o.describe());
    // "... WAL segment size 1 MB, first checkpoint at 0/00100028)"
    let mb: u64 = o
        .stdout
        .split("WAL segment size ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no segment size in init output\n{}", o.describe()));
    let first = o
        .stdout
        .split("first checkpoint at ")
        .nth(1)
        .map(|s| s.trim_end_matches(|c: char| c == ')' || c.is_whitespace()))
        .and_then(|s| s.split(')').next())
        .map(|s| walformat::parse_lsn(s).expect("checkpoint LSN"))
        .unwrap_or_else(|| panic!("no checkpoint LSN in init output\n{}", o.describe()));
    let seg_size = mb << 20;
    assert_eq!(
        first,
        seg_size + 0x28,
        "init's checkpoint is not at the start of segment 1 (after the long page header)"
    );
    DataDir {
        path: dir.to_path_buf(),
        seg_size,
        first_lsn: first,
    }
}

/// `init` with `wal_keep_size` so large that checkpoints never remove or
/// recycle a segment: every record ever written stays readable, so the
/// tests can count them.
pub fn init_keep(dir: &Path, args: &[&str]) -> DataDir {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--set", "wal_keep_size=1000000"]);
    init(dir, &all)
}

/// `--workers N --workload W --set fsync=off`: a run whose WAL need not
/// survive a power loss, only a crash of the processes.
pub fn unsynced_args<'a>(workers: &'a str, workload: &'a str) -> Vec<&'a str> {
    vec![
        "--workers",
        workers,
        "--workload",
        workload,
        "--set",
        "fsync=off",
    ]
}

/// `init_keep` of `tmp/dir` with 1 MB segments, then `postmaster start
/// --workers N --workload W EXTRA...` (logs under `tmp`), waited until
/// ready: the setup of the runs that fill several segments.
pub fn start_workload(
    tmp: &TempDir,
    dir: &str,
    workers: u32,
    workload: &str,
    extra: &[&str],
) -> (DataDir, Server) {
    let d = init_keep(&tmp.join(dir), &["--wal-segment-size", "1"]);
    let n = workers.to_string();
    let mut args = vec!["--workers", n.as_str(), "--workload", workload];
    args.extend_from_slice(extra);
    let mut s = Server::start(&d.path, tmp.path(), &args);
    s.wait_ready(TIMEOUT);
    (d, s)
}

/// Name the /dev/shm file of a data directory had while the segment was
/// named (FNV-1a of the canonical path, `walshm.<16 hex>`). The segment is
/// now an unnamed memfd: tests check that no such file appears.
pub fn segment_name(datadir: &Path) -> String {
    let canon = datadir
        .canonicalize()
        .unwrap_or_else(|_| datadir.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canon.as_os_str().as_encoded_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("walshm.{h:016x}")
}

/// Every walshm segment in /dev/shm (of any test or user).
pub fn all_segments() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("walshm."))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The segments in /dev/shm that belong to `datadir` (must be none).
pub fn segments_for(datadir: &Path) -> Vec<String> {
    let mine = segment_name(datadir);
    all_segments().into_iter().filter(|n| *n == mine).collect()
}

/// The distinct walshm memfd segments process `pid` maps (from
/// /proc/PID/maps: "/memfd:walshm (deleted)", by inode), and whether it
/// maps anything under /dev/shm.
pub fn mapped_segments(pid: i32) -> (usize, bool) {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut inodes: Vec<&str> = maps
        .lines()
        .filter(|l| l.contains("/memfd:walshm"))
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    inodes.sort_unstable();
    inodes.dedup();
    (inodes.len(), maps.contains("/dev/shm/"))
}

// ---------------------------------------------------------------------------
// /proc

/// Parses /proc/PID/stat: (comm, state, ppid).
pub fn proc_stat(pid: i32) -> Option<(String, char, i32)> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let mut rest = s[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((comm, state, ppid))
}

/// Is `pid` alive (exists and is not a zombie)?
pub fn alive(pid: i32) -> bool {
    matches!(proc_stat(pid), Some((_, st, _)) if st != 'Z' && st != 'X')
}

/// Live children of `pid`: (pid, comm), sorted by pid.
pub fn children_of(pid: i32) -> Vec<(i32, String)> {
    let mut v = Vec::new();
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Some((comm, st, ppid)) = proc_stat(p) {
                if ppid == pid && st != 'Z' && st != 'X' {
                    v.push((p, comm));
                }
            }
        }
    }
    v.sort();
    v
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn kill(pid: i32, sig: i32) {
    // SAFETY: kill has no memory effects.
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

// ---------------------------------------------------------------------------
// The server

/// A running `postmaster start`, in its own process group.
pub struct Server {
    child: Option<Child>,
    pub pid: i32,
    pub datadir: PathBuf,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
}

static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Server {
    /// `postmaster start -D DATADIR ARGS...`, logs in files under `logdir`.
    pub fn start(datadir: &Path, logdir: &Path, args: &[&str]) -> Server {
        start_with_env(datadir, logdir, args, &[])
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn stdout(&self) -> String {
        fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    /// Has the postmaster exited? (reaps it then)
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits until stderr contains `needle` at least `n` times.
    pub fn wait_log(&mut self, needle: &str, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let err = self.stderr();
            if err.matches(needle).count() >= n {
                return;
            }
            if let Some(st) = self.try_wait() {
                panic!(
                    "postmaster exited ({st:?}) before logging {needle:?} {n} time(s)\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "postmaster did not log {needle:?} {n} time(s) within {timeout:?}\n--- stderr ---\n{err}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the first ready line.
    pub fn wait_ready(&mut self, timeout: Duration) {
        self.wait_ready_n(1, timeout)
    }

    /// Waits for the `n`-th ready line (n = 2 after one crash restart).
    pub fn wait_ready_n(&mut self, n: usize, timeout: Duration) {
        self.wait_log(READY, n, timeout)
    }

    /// Live children of the postmaster: (pid, comm).
    pub fn children(&self) -> Vec<(i32, String)> {
        children_of(self.pid)
    }

    /// Waits until the postmaster has `backends` backends, one walwriter
    /// and one checkpointer; returns its children.
    pub fn wait_children(&self, backends: usize) -> Vec<(i32, String)> {
        let count =
            |kids: &[(i32, String)], comm: &str| kids.iter().filter(|(_, c)| c == comm).count();
        let mut last = Vec::new();
        let ok = wait_until(TIMEOUT, || {
            last = self.children();
            count(&last, "backend") == backends
                && count(&last, "walwriter") == 1
                && count(&last, "checkpointer") == 1
        });
        assert!(
            ok,
            "expected {backends} backends, a walwriter and a checkpointer; children are {last:?}\n{}",
            self.stderr()
        );
        last
    }

    /// Sends `sig` to the postmaster only.
    pub fn signal(&self, sig: i32) {
        kill(self.pid, sig)
    }

    /// kill -9 of the postmaster: waits for it to exit and for every one
    /// of `kids` (from `wait_children`) to follow it, then returns its
    /// output.
    pub fn kill9_with_children(self, kids: &[(i32, String)]) -> Out {
        self.signal(libc::SIGKILL);
        let o = self.wait_exit(TIMEOUT);
        assert!(
            wait_until(TIMEOUT, || kids.iter().all(|(p, _)| !alive(*p))),
            "children survived the postmaster"
        );
        o
    }

    /// Waits for the postmaster to exit (after a signal sent elsewhere).
    pub fn wait_exit(mut self, timeout: Duration) -> Out {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(st) = self.try_wait() {
                break st;
            }
            if Instant::now() > deadline {
                panic!(
                    "postmaster did not exit within {timeout:?}\n--- stderr ---\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.child = None;
        Out {
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }

    /// Fast shutdown: SIGTERM, wait for exit.
    pub fn stop(self) -> Out {
        self.stop_timeout(TIMEOUT)
    }

    pub fn stop_timeout(self, timeout: Duration) -> Out {
        self.signal(libc::SIGTERM);
        self.wait_exit(timeout)
    }

    /// Stops and asserts a clean exit 0; returns the output.
    pub fn stop_ok(self) -> Out {
        let o = self.stop();
        assert!(
            o.status.success(),
            "postmaster did not exit 0 after SIGTERM\n{}",
            o.describe()
        );
        assert_no_panic("postmaster start", &o);
        o
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if c.try_wait().ok().flatten().is_none() {
                // SAFETY: kill has no memory effects; -pid is the process
                // group we created with process_group(0).
                unsafe { libc::kill(-self.pid, libc::SIGKILL) };
                let _ = c.wait();
            } else {
                // Postmaster gone: make sure no child of its group survives.
                // SAFETY: as above.
                unsafe { libc::kill(-self.pid, libc::SIGKILL) };
            }
        }
    }
}

/// Starts, waits for ready, sleeps `run`, stops; asserts exit 0.
pub fn run_for(datadir: &Path, logdir: &Path, args: &[&str], run: Duration) -> Out {
    let mut s = Server::start(datadir, logdir, args);
    s.wait_ready(TIMEOUT);
    std::thread::sleep(run);
    s.stop_ok()
}

// ---------------------------------------------------------------------------
// Summary

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub records: u64,
    pub bytes: u64,
    pub transactions: u64,
}

/// The summary `postmaster start --workload` prints at shutdown, read from
/// its JSON line (`{"walshm_summary":1,...}`), never from the English lines.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub total: Counts,
    pub backends: Vec<Counts>,
    pub crash_restarts: u64,
    /// The exact lwlock checks (cleanly ended generations): true for OK.
    pub lwlock_checks: Vec<bool>,
    /// The same checks in full.
    pub lwlock_details: Vec<LwlockCheck>,
    /// (generation, torn reads) of each lwlock generation that crashed.
    pub lwlock_crashed: Vec<(u64, u64)>,
    pub tx: TxLine,
}

/// One exact lwlock check: protected counter, exclusive acquisitions and
/// torn reads of a generation that ended in a fast shutdown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LwlockCheck {
    pub generation: u64,
    pub counter: u64,
    pub exclusive: u64,
    pub torn: u64,
    pub ok: bool,
}

/// The key that marks the summary's JSON line.
const SUMMARY_KEY: &str = "{\"walshm_summary\":";

fn u64_at(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("summary: {key:?} is not a count in {v}"))
}

fn counts_of(v: &serde_json::Value) -> Counts {
    Counts {
        records: u64_at(v, "records"),
        bytes: u64_at(v, "bytes"),
        transactions: u64_at(v, "transactions"),
    }
}

/// The summary's JSON object, or None if stdout holds no summary line.
pub fn summary_json(stdout: &str) -> Option<serde_json::Value> {
    let line = stdout.lines().find(|l| l.starts_with(SUMMARY_KEY))?;
    let v: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("summary line is not JSON ({e}): {line}"));
    assert_eq!(v["walshm_summary"], 1, "summary format version");
    Some(v)
}

fn lwlock_of(v: &serde_json::Value) -> (Vec<LwlockCheck>, Vec<(u64, u64)>) {
    let list = |key: &str| v[key].as_array().cloned().unwrap_or_default();
    let checks = list("checks")
        .iter()
        .map(|c| LwlockCheck {
            generation: u64_at(c, "generation"),
            counter: u64_at(c, "protected_counter"),
            exclusive: u64_at(c, "exclusive_acquisitions"),
            torn: u64_at(c, "torn_reads"),
            ok: c["ok"].as_bool().expect("lwlock check ok"),
        })
        .collect();
    let crashed = list("crashed_generations")
        .iter()
        .map(|c| (u64_at(c, "generation"), u64_at(c, "torn_reads")))
        .collect();
    (checks, crashed)
}

/// Parses the summary `postmaster start` prints on stdout at shutdown.
pub fn parse_summary(stdout: &str) -> Summary {
    let v = summary_json(stdout).unwrap_or_else(|| panic!("no summary line in stdout:\n{stdout}"));
    let backends: Vec<Counts> = v["per_backend"]
        .as_array()
        .expect("per_backend")
        .iter()
        .map(counts_of)
        .collect();
    assert_eq!(backends.len() as u64, u64_at(&v, "backends"));
    let (lwlock_details, lwlock_crashed) = lwlock_of(&v["lwlock"]);
    let sum = Summary {
        total: counts_of(&v["total"]),
        crash_restarts: u64_at(&v, "crash_restarts"),
        lwlock_checks: lwlock_details.iter().map(|c| c.ok).collect(),
        lwlock_details,
        lwlock_crashed,
        tx: TxLine {
            sync_commits: u64_at(&v, "synchronous_commits"),
            fdatasyncs: u64_at(&v, "wal_fdatasyncs"),
            per_fdatasync: v["commits_per_fdatasync"].as_f64(),
            snapshot_violations: u64_at(&v, "snapshot_violations"),
        },
        backends,
    };
    let add = sum.backends.iter().fold(Counts::default(), |a, c| Counts {
        records: a.records + c.records,
        bytes: a.bytes + c.bytes,
        transactions: a.transactions + c.transactions,
    });
    assert_eq!(add, sum.total, "backend counts do not add up to the total");
    sum
}

// ---------------------------------------------------------------------------
// pg_waldump

/// Path of PostgreSQL 15's pg_waldump, or None after printing a loud skip
/// notice (panics instead when WALSHM_REQUIRE_PG=1).
pub fn pg_waldump_path() -> Option<PathBuf> {
    let p = std::env::var_os("PG_WALDUMP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin/pg_waldump"));
    if p.is_file() {
        return Some(p);
    }
    if std::env::var("WALSHM_REQUIRE_PG").as_deref() == Ok("1") {
        panic!(
            "pg_waldump not found at {} and WALSHM_REQUIRE_PG=1",
            p.display()
        );
    }
    eprintln!(
        "\n********************************************************\n\
         SKIPPED: pg_waldump not found ({}); set PG_WALDUMP\n\
         ********************************************************\n",
        p.display()
    );
    None
}

/// How pg_waldump stopped.
#[derive(Debug)]
pub struct PgEnd {
    /// The LSN pg_waldump names as end of WAL.
    pub end_lsn: u64,
}

/// Checks that pg_waldump ended at the normal end of WAL; returns where.
/// Exactly "invalid record length at X: wanted 24, got 0" is a normal end.
/// If the end lies on a page boundary the next page is simply not written
/// yet, so "invalid magic number 0000" there is a normal end too.
pub fn pg_normal_end(o: &Out) -> Result<PgEnd, String> {
    if o.code() != Some(1) {
        return Err(format!("pg_waldump exit status {:?}", o.status));
    }
    let lines: Vec<&str> = o.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() != 1 {
        return Err(format!("pg_waldump stderr is not one line: {:?}", o.stderr));
    }
    let l = lines[0];
    if let Some(rest) = l
        .split_once(": invalid record length at ")
        .map(|(_, r)| r)
        .filter(|_| l.starts_with("pg_waldump: error: error in WAL record at "))
    {
        if let Some(lsn) = rest.strip_suffix(": wanted 24, got 0") {
            return walformat::parse_lsn(lsn)
                .map(|end_lsn| PgEnd { end_lsn })
                .map_err(|_| format!("bad LSN in {l:?}"));
        }
    }
    if l.contains("invalid magic number 0000") {
        // "...: invalid magic number 0000 in log segment S, offset O"
        return Err(format!("PAGE-BOUNDARY:{l}"));
    }
    Err(format!("unexpected pg_waldump error: {l:?}"))
}

/// pg_waldump totals (--stats).
#[derive(Debug)]
pub struct PgStats {
    pub logical_messages: u64,
    pub total_records: u64,
    pub total_bytes: u64,
    pub end: Option<PgEnd>,
    pub raw: Out,
}

/// `pg_waldump -p DIR/pg_wal -s START --stats`; None if pg_waldump is not
/// installed. Panics unless it read to a normal end of WAL (`end_lsn` is
/// walshm's end of WAL; used for the page-boundary case).
pub fn pg_waldump_stats(d: &DataDir, end_lsn: u64) -> Option<PgStats> {
    let pg = pg_waldump_path()?;
    let o = run_cmd(
        Command::new(pg)
            .arg("-p")
            .arg(d.path.join("pg_wal"))
            .arg("-s")
            .arg(walformat::format_lsn(d.first_lsn))
            .arg("--stats"),
        Duration::from_secs(120),
    );
    let end = match pg_normal_end(&o) {
        Ok(e) => Some(e),
        Err(e) if e.starts_with("PAGE-BOUNDARY:") && end_lsn.is_multiple_of(8192) => None,
        Err(e) => panic!(
            "pg_waldump did not read to a normal end: {e}\n{}",
            o.describe()
        ),
    };
    let field = |name: &str, idx: usize| -> u64 {
        o.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(idx))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} line in pg_waldump --stats\n{}", o.describe()))
    };
    let logical = field("LogicalMessage", 1);
    let total = field("Total", 1);
    let bytes = field("Total", 2);
    Some(PgStats {
        logical_messages: logical,
        total_records: total,
        total_bytes: bytes,
        end,
        raw: o,
    })
}

/// `pg_waldump -p DIR/pg_wal -s START [-n N]` record lines (lines starting
/// with "rmgr: "); None if pg_waldump is not installed. Panics unless it
/// stopped after N records or at a normal end of WAL.
pub fn pg_waldump(d: &DataDir, start: u64, limit: Option<u64>) -> Option<Vec<String>> {
    let pg = pg_waldump_path()?;
    let mut cmd = Command::new(pg);
    cmd.arg("-p")
        .arg(d.path.join("pg_wal"))
        .arg("-s")
        .arg(walformat::format_lsn(start));
    if let Some(n) = limit {
        cmd.arg("-n").arg(n.to_string());
    }
    let o = run_cmd(&mut cmd, Duration::from_secs(120));
    let lines: Vec<String> = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("rmgr: "))
        .map(String::from)
        .collect();
    let reached_limit = limit.is_some_and(|n| lines.len() as u64 == n);
    if !(reached_limit && o.status.success()) {
        if let Err(e) = pg_normal_end(&o) {
            if !e.starts_with("PAGE-BOUNDARY:") {
                panic!(
                    "pg_waldump -s {} failed: {e}\n--- stderr ---\n{}",
                    walformat::format_lsn(start),
                    o.stderr
                );
            }
        }
    }
    Some(lines)
}

// ---------------------------------------------------------------------------
// walshm's own waldump

/// The end line of `postmaster waldump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnEnd {
    pub end_lsn: u64,
    pub reason: String,
    pub records: u64,
    pub bytes: u64,
}

/// `postmaster waldump -D DIR --quiet`, parsed; panics on failure.
pub fn own_waldump(datadir: &Path) -> OwnEnd {
    let o = run_cmd(
        Command::new(postmaster_bin())
            .args(["waldump", "--quiet", "-D"])
            .arg(datadir),
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "postmaster waldump\n{}", o.describe());
    parse_own_end(&o.stdout).unwrap_or_else(|| panic!("no end line\n{}", o.describe()))
}

/// "end of WAL at X: REASON; N records, B bytes from Y"
pub fn parse_own_end(stdout: &str) -> Option<OwnEnd> {
    let line = stdout.lines().find(|l| l.starts_with("end of WAL at "))?;
    let rest = line.strip_prefix("end of WAL at ")?;
    let (lsn, rest) = rest.split_once(": ")?;
    let (reason, rest) = rest.rsplit_once("; ")?;
    let w: Vec<&str> = rest.split_whitespace().collect();
    Some(OwnEnd {
        end_lsn: walformat::parse_lsn(lsn).ok()?,
        reason: reason.to_string(),
        records: w.first()?.parse().ok()?,
        bytes: w.get(2)?.trim_end_matches(',').parse().ok()?,
    })
}

/// The first `n` record lines of `postmaster waldump -D DIR --start LSN`
/// (the process is killed once they are read).
pub fn own_waldump_lines(datadir: &Path, start: u64, n: usize) -> Vec<String> {
    let mut child = Command::new(postmaster_bin())
        .args(["waldump", "-D"])
        .arg(datadir)
        .arg("--start")
        .arg(walformat::format_lsn(start))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn waldump");
    let dog = Watchdog::new(child.id() as i32, Duration::from_secs(120));
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut buf = String::new();
    while lines.len() < n {
        buf.clear();
        if r.read_line(&mut buf).unwrap_or(0) == 0 {
            break;
        }
        let l = buf.trim_end_matches('\n');
        if l.starts_with("rmgr: ") {
            lines.push(l.to_string());
        }
    }
    // SAFETY: kill has no memory effects; the child is not reaped yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    drop(r);
    let _ = child.wait();
    assert!(!dog.fired(), "postmaster waldump --start timed out");
    lines
}

// ---------------------------------------------------------------------------
// Whole-WAL verification

/// What the WAL of a data directory holds.
#[derive(Debug)]
pub struct WalFacts {
    pub records: u64,
    pub logical_messages: u64,
    pub bytes: u64,
    pub end_lsn: u64,
    pub lsns: Vec<u64>,
    /// For each record of `lsns`: is it a logical message?
    pub is_message: Vec<bool>,
    /// Whether pg_waldump took part.
    pub pg_checked: bool,
}

pub fn payload_of(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Every byte of the WAL files in `gaps` (record padding, the rest of a
/// segment after a switch record, the rest of the last page after the end
/// of WAL) is zero, as PostgreSQL leaves it: the WAL buffers are not zeroed
/// when initialized, so whatever an inserter or a partial-page write does
/// not overwrite would show stale WAL here.
fn assert_gaps_are_zero(d: &DataDir, geo: &walformat::Geometry, gaps: &[(u64, u64)]) {
    let mut segment: Option<(u64, Vec<u8>)> = None;
    for &(from, to) in gaps {
        for lsn in from..to {
            let segno = geo.seg_no(lsn);
            if segment.as_ref().map(|s| s.0) != Some(segno) {
                let path = d.path.join("pg_wal").join(geo.file_name(1, segno));
                let Ok(bytes) = std::fs::read(&path) else {
                    return; // the end of WAL's page was never written
                };
                segment = Some((segno, bytes));
            }
            let bytes = &segment.as_ref().unwrap().1;
            let b = bytes[geo.seg_offset(lsn) as usize];
            assert_eq!(
                b,
                0,
                "non-zero byte {b:#04x} at {} in the gap {}..{} (padding, switch fill or the end of WAL's page)",
                walformat::format_lsn(lsn),
                walformat::format_lsn(from),
                walformat::format_lsn(to)
            );
        }
    }
}

/// Reads all WAL of `d` with walformat's reader (checking every logical
/// message's prefix and payload: SIZE bytes of a..z for a size in `sizes`),
/// then with `postmaster waldump` and pg_waldump, and compares record by
/// record in windows at the start, middle and end. Asserts that the number
/// of logical messages is `expected_messages` when that is given.
pub fn verify_wal(d: &DataDir, expected_messages: Option<u64>, sizes: &[usize]) -> WalFacts {
    let geo = walformat::Geometry::new(d.seg_size).unwrap();
    let mut reader = walformat::WalReader::open(&d.path.join("pg_wal"), geo, 1, None, d.first_lsn)
        .unwrap_or_else(|e| panic!("open WAL: {e}"));
    let max = sizes.iter().copied().max().unwrap_or(0);
    let pattern = payload_of(max);
    let mut lsns = Vec::new();
    let mut is_message = Vec::new();
    let mut logical = 0u64;
    let mut bytes = 0u64;
    let mut prev_lsn = 0u64;
    let mut gaps = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(r)) => {
                assert_eq!(r.prev, prev_lsn, "xl_prev chain broken at {}", r.lsn);
                if r.next > r.end {
                    gaps.push((r.end, r.next));
                }
                prev_lsn = r.lsn;
                lsns.push(r.lsn);
                is_message.push(r.rmgr_name() == "LogicalMessage");
                bytes += r.tot_len as u64;
                if r.rmgr_name() == "LogicalMessage" {
                    let (tx, prefix, payload) = r
                        .as_logical_message()
                        .unwrap_or_else(|| panic!("malformed message at {}", r.lsn));
                    assert!(!tx, "transactional message at {}", r.lsn);
                    assert_eq!(prefix, "walshm", "prefix at {}", r.lsn);
                    assert!(
                        sizes.contains(&payload.len()),
                        "payload of {} bytes at {} (expected one of {sizes:?})",
                        payload.len(),
                        walformat::format_lsn(r.lsn)
                    );
                    assert!(
                        payload == &pattern[..payload.len()],
                        "payload bytes differ at {}",
                        walformat::format_lsn(r.lsn)
                    );
                    logical += 1;
                }
            }
            Ok(None) => break,
            Err(e) => panic!("walformat reader: invalid record: {e}"),
        }
    }
    let end_lsn = reader.end_of_valid();
    let records = lsns.len() as u64;
    if !end_lsn.is_multiple_of(walformat::XLOG_BLCKSZ as u64) {
        gaps.push((
            end_lsn,
            end_lsn.next_multiple_of(walformat::XLOG_BLCKSZ as u64),
        ));
    }
    assert_gaps_are_zero(d, &geo, &gaps);

    let own = own_waldump(&d.path);
    assert_eq!(
        own.reason, "clean end of WAL",
        "postmaster waldump: {own:?}"
    );
    assert_eq!(own.records, records, "postmaster waldump record count");
    assert_eq!(own.bytes, bytes, "postmaster waldump byte count");
    assert_eq!(own.end_lsn, end_lsn, "postmaster waldump end of WAL");

    if let Some(expected) = expected_messages {
        assert_eq!(
            logical, expected,
            "logical messages on disk != records the backends inserted (summary)"
        );
    }

    let mut pg_checked = false;
    if let Some(st) = pg_waldump_stats(d, end_lsn) {
        pg_checked = true;
        if let Some(e) = &st.end {
            assert_eq!(
                walformat::format_lsn(e.end_lsn),
                walformat::format_lsn(end_lsn),
                "pg_waldump's end of WAL differs from walshm's"
            );
        }
        assert_eq!(
            st.logical_messages, logical,
            "pg_waldump LogicalMessage count"
        );
        assert_eq!(st.total_records, records, "pg_waldump total records");
        assert_eq!(st.total_bytes, bytes, "pg_waldump total bytes");

        // Record-by-record windows: about 4 MB of WAL each, so that a window
        // crosses pages and (with 1 MB segments) segment boundaries.
        let per = (4u64 << 20) / (max as u64 + 80);
        let n = per.clamp(50, 20_000) as usize;
        let mut starts = vec![0usize];
        if lsns.len() > 2 * n {
            starts.push(lsns.len() / 2);
        }
        if lsns.len() > n {
            starts.push(lsns.len() - n);
        }
        for i in starts {
            let start = lsns[i];
            let want = n.min(lsns.len() - i);
            let pg = pg_waldump(d, start, Some(want as u64)).unwrap();
            let mine = own_waldump_lines(&d.path, start, want);
            assert_eq!(
                pg.len(),
                want,
                "pg_waldump window at {}",
                walformat::format_lsn(start)
            );
            assert_eq!(
                mine.len(),
                want,
                "own waldump window at {}",
                walformat::format_lsn(start)
            );
            for (k, (a, b)) in pg.iter().zip(&mine).enumerate() {
                if a != b {
                    panic!(
                        "record {} of window at {}: pg_waldump and postmaster waldump differ\npg:   {}\nmine: {}",
                        k,
                        walformat::format_lsn(start),
                        &a[..a.len().min(300)],
                        &b[..b.len().min(300)]
                    );
                }
            }
        }
    }
    WalFacts {
        records,
        logical_messages: logical,
        bytes,
        end_lsn,
        lsns,
        is_message,
        pg_checked,
    }
}

/// Asserts the data directory has no pid file, no registration socket
/// and no named segment.
pub fn assert_cleaned_up(datadir: &Path) {
    assert!(
        !datadir.join("postmaster.pid").exists(),
        "postmaster.pid still exists after shutdown"
    );
    assert!(
        !datadir.join(".s.WALSHM.worker").exists(),
        "the registration socket still exists after shutdown"
    );
    let segs = segments_for(datadir);
    assert!(segs.is_empty(), "segment left in /dev/shm: {segs:?}");
}

/// One "redo done at A: N records in T s; end of WAL at Y (REASON)" line of
/// the startup process.
#[derive(Debug, Clone)]
pub struct RedoDone {
    pub last_record: u64,
    pub records: u64,
    pub end_of_wal: u64,
    pub reason: String,
}

impl DataDir {
    /// Where the first record inserted at `end` (an end of WAL as recovery
    /// reports it) starts: past the page header when `end` is a page boundary.
    pub fn first_record_at(&self, end: u64) -> u64 {
        let geo = walformat::Geometry::new(self.seg_size).unwrap();
        geo.bytepos_to_recptr(geo.recptr_to_bytepos(end))
    }
}

/// Every startup "redo done" line in a server's stderr, in order.
pub fn redo_lines(stderr: &str) -> Vec<RedoDone> {
    let mut v = Vec::new();
    for line in stderr.lines() {
        let Some((_, rest)) = line.split_once("redo done at ") else {
            continue;
        };
        let parse = || -> Option<RedoDone> {
            let (a, rest) = rest.split_once(": ")?;
            let n = rest.split_whitespace().next()?.parse().ok()?;
            let (_, rest) = rest.split_once("end of WAL at ")?;
            let (y, reason) = rest.split_once(' ')?;
            Some(RedoDone {
                last_record: walformat::parse_lsn(a).ok()?,
                records: n,
                end_of_wal: walformat::parse_lsn(y).ok()?,
                reason: reason
                    .trim()
                    .trim_start_matches('(')
                    .trim_end_matches(')')
                    .to_string(),
            })
        };
        v.push(parse().unwrap_or_else(|| panic!("cannot parse {line:?}")));
    }
    v
}

// ---------------------------------------------------------------------------
// Transactions, acknowledgements and damaged WAL (tests/transactions.rs and
// tests/crash.rs)

/// One record line of pg_waldump or `postmaster waldump`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpRec {
    pub rmgr: String,
    pub xid: u32,
    pub lsn: u64,
    /// First word of the description: COMMIT, MESSAGE, CHECKPOINT_ONLINE...
    pub kind: String,
    /// A transactional logical message.
    pub transactional: bool,
}

/// Parses "rmgr: R len (rec/tot): a/ b, tx: X, lsn: L, prev P, desc: D".
pub fn parse_dump_line(l: &str) -> Option<DumpRec> {
    let rest = l.strip_prefix("rmgr: ")?;
    let rmgr = rest.split_whitespace().next()?.to_string();
    let tx = rest.split_once("tx:")?.1.trim_start();
    let xid = tx.split(',').next()?.trim().parse().ok()?;
    let lsn = rest.split_once(", lsn: ")?.1.split(',').next()?;
    let desc = rest.split_once("desc: ")?.1;
    Some(DumpRec {
        rmgr,
        xid,
        lsn: walformat::parse_lsn(lsn.trim()).ok()?,
        kind: desc.split_whitespace().next().unwrap_or("").to_string(),
        transactional: desc.starts_with("MESSAGE transactional"),
    })
}

/// Record lines ("rmgr: ...") of a dump's stdout.
pub fn record_lines(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("rmgr: "))
        .map(String::from)
        .collect()
}

/// `pg_waldump -p DIR/pg_wal -s START` in full, not judged; None if
/// pg_waldump is not installed.
pub fn pg_waldump_raw(d: &DataDir, start: u64) -> Option<Out> {
    let pg = pg_waldump_path()?;
    Some(run_cmd(
        Command::new(pg)
            .arg("-p")
            .arg(d.path.join("pg_wal"))
            .arg("-s")
            .arg(walformat::format_lsn(start)),
        Duration::from_secs(120),
    ))
}

/// `postmaster waldump -D DIR --start START` in full, not judged.
pub fn own_waldump_raw(datadir: &Path, start: u64) -> Out {
    run_cmd(
        Command::new(postmaster_bin())
            .args(["waldump", "-D"])
            .arg(datadir)
            .arg("--start")
            .arg(walformat::format_lsn(start)),
        Duration::from_secs(120),
    )
}

/// What the WAL of a transactional run holds.
#[derive(Debug, Default)]
pub struct TxWal {
    /// (LSN, xid) of every COMMIT record, in WAL order.
    pub commits: Vec<(u64, u32)>,
    /// (LSN, xid) of every transactional logical message.
    pub tx_messages: Vec<(u64, u32)>,
    pub records: usize,
    /// LSN of the last record.
    pub last_lsn: u64,
    /// Whether pg_waldump took part.
    pub pg_checked: bool,
}

impl TxWal {
    pub fn commit_lsns(&self) -> std::collections::HashSet<u64> {
        self.commits.iter().map(|c| c.0).collect()
    }
}

/// Reads all WAL of `d` from its first record with `postmaster waldump`
/// and pg_waldump: both must read to a clean end and print identical
/// record lines. Panics if an XID has two COMMIT records.
pub fn tx_wal_check(d: &DataDir) -> TxWal {
    let own = own_waldump_raw(&d.path, d.first_lsn);
    assert!(
        own.status.success(),
        "postmaster waldump\n{}",
        own.describe()
    );
    let end = parse_own_end(&own.stdout)
        .unwrap_or_else(|| panic!("no end line in postmaster waldump output\n{}", own.stderr));
    assert_eq!(
        end.reason, "clean end of WAL",
        "postmaster waldump: {end:?}"
    );
    let mine = record_lines(&own.stdout);
    assert_eq!(end.records as usize, mine.len(), "own waldump record count");
    let mut pg_checked = false;
    if let Some(pg) = pg_waldump_raw(d, d.first_lsn) {
        pg_checked = true;
        match pg_normal_end(&pg) {
            Ok(e) => assert_eq!(
                walformat::format_lsn(e.end_lsn),
                walformat::format_lsn(end.end_lsn),
                "pg_waldump's end of WAL differs from walshm's"
            ),
            Err(e) if e.starts_with("PAGE-BOUNDARY:") && end.end_lsn.is_multiple_of(8192) => {}
            Err(e) => panic!("pg_waldump did not read to a normal end: {e}"),
        }
        let theirs = record_lines(&pg.stdout);
        assert_eq!(
            theirs.len(),
            mine.len(),
            "pg_waldump and postmaster waldump decode different numbers of records"
        );
        for (a, b) in theirs.iter().zip(&mine) {
            assert_eq!(a, b, "pg_waldump and postmaster waldump differ");
        }
    }
    let mut w = TxWal {
        pg_checked,
        records: mine.len(),
        ..TxWal::default()
    };
    let mut seen = std::collections::HashMap::new();
    for l in &mine {
        let r = parse_dump_line(l).unwrap_or_else(|| panic!("cannot parse dump line {l:?}"));
        w.last_lsn = r.lsn;
        if r.rmgr == "Transaction" && r.kind == "COMMIT" {
            assert_ne!(r.xid, 0, "COMMIT without xid: {l}");
            if let Some(first) = seen.insert(r.xid, r.lsn) {
                panic!(
                    "xid {} committed twice: at {} and at {}",
                    r.xid,
                    walformat::format_lsn(first),
                    walformat::format_lsn(r.lsn)
                );
            }
            w.commits.push((r.lsn, r.xid));
        } else if r.rmgr == "LogicalMessage" && r.transactional {
            w.tx_messages.push((r.lsn, r.xid));
        }
    }
    w
}

/// The newline-ended lines of a file another process is still appending
/// to (a line's last bytes may not be visible yet).
pub fn complete_lines(text: &str) -> &str {
    match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    }
}

/// The LSNs of the `ack X/Y` lines of a run's stdout. Only lines ended by
/// a newline count: a live stdout file read while a backend's one-line
/// `write` straddles a page boundary shows the line's first page before the
/// rest (the CI flake of stop 20: `bad ack line ""`), and a line cut short
/// by kill -9 was never an acknowledgement.
pub fn parse_acks(stdout: &str) -> Vec<u64> {
    complete_lines(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("ack "))
        .map(|s| walformat::parse_lsn(s.trim()).unwrap_or_else(|_| panic!("bad ack line {s:?}")))
        .collect()
}

/// Every ack names a COMMIT record; no LSN is acked twice. Returns the
/// number of acks checked.
pub fn check_acks(acks: &[u64], wal: &TxWal) -> usize {
    let commits = wal.commit_lsns();
    let mut seen = std::collections::HashSet::new();
    for a in acks {
        assert!(
            seen.insert(*a),
            "LSN {} acknowledged twice",
            walformat::format_lsn(*a)
        );
        assert!(
            commits.contains(a),
            "acknowledged commit at {} is not a COMMIT record in the WAL ({} acks, {} commits on disk)",
            walformat::format_lsn(*a),
            acks.len(),
            commits.len()
        );
    }
    acks.len()
}

/// Arguments of an acknowledged, durable run: `workers` backends of
/// `emit-tx:100 --ack` with fsync on, then `--set` for each of `sets`.
pub fn durable_ack_args<'a>(workers: &'a str, sets: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--workers",
        workers,
        "--workload",
        "emit-tx:100",
        "--ack",
        "--set",
        "fsync=on",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    args
}

/// After a kill -9 whose run printed `acks_before`: a short second run
/// with `args` (recovery, then 300 ms of load), then every ack of both runs
/// must be a COMMIT record of the WAL, which `tx_wal_check` reads with
/// walshm's reader and pg_waldump. Returns the acks checked and whether
/// pg_waldump took part.
pub fn recover_and_check_acks(
    d: &DataDir,
    logdir: &Path,
    args: &[&str],
    acks_before: &[u64],
) -> (usize, bool) {
    let o = run_for(&d.path, logdir, args, Duration::from_millis(300));
    let wal = tx_wal_check(d);
    let mut all = acks_before.to_vec();
    all.extend(parse_acks(&o.stdout));
    (check_acks(&all, &wal), wal.pg_checked)
}

/// The live process `DIR/postmaster.pid` names, if any.
pub fn live_postmaster(datadir: &Path) -> Option<i32> {
    fs::read_to_string(datadir.join("postmaster.pid"))
        .ok()
        .and_then(|s| s.lines().next()?.trim().parse::<i32>().ok())
        .filter(|p| *p > 0 && alive(*p))
}

/// `postmaster start -D d --set NAME=VALUE` must fail with an error that
/// names the setting, and no server may be running afterwards.
pub fn assert_start_refused(d: &DataDir, name: &str, value: &str) {
    let set = format!("{name}={value}");
    let dir = d.path.to_str().expect("UTF-8 data directory");
    let o = postmaster(&["start", "-D", dir, "--set", &set]);
    assert_ne!(o.code(), Some(0), "{set}: {}", o.describe());
    assert!(
        o.stderr.contains(name),
        "{set}: the error does not name the setting: {}",
        o.describe()
    );
    assert!(
        live_postmaster(&d.path).is_none(),
        "{set}: a server started"
    );
}

/// Every `walbench torture` run of a test is bounded by this (the watchdog
/// kills walbench, the guard its server).
pub const TORTURE_TIMEOUT: Duration = Duration::from_secs(100);

/// Kills a server walbench left behind (it runs in a process group of its
/// own) if the test fails half-way.
struct TortureServerGuard(PathBuf);

impl Drop for TortureServerGuard {
    fn drop(&mut self) {
        if let Some(pid) = live_postmaster(&self.0) {
            // SAFETY: kill has no memory effects; the group is the server's.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

/// Runs `walbench torture -D TMP/data --json TMP/report.json ARGS` with
/// `env`; its output, the JSON report and the data directory.
pub fn torture(
    tmp: &TempDir,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Out, serde_json::Value, PathBuf) {
    let data = tmp.join("data");
    let json = tmp.join("report.json");
    let _guard = TortureServerGuard(data.clone());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_walbench"));
    cmd.arg("torture")
        .arg("-D")
        .arg(&data)
        .arg("--json")
        .arg(&json)
        .args(args)
        .env_remove("WALSHM_TEST_BREAK");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = run_cmd(&mut cmd, TORTURE_TIMEOUT);
    let text = fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no JSON report ({e})\n{}", o.describe()));
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON report: {e}\n{text}"));
    (o, v, data)
}

/// The summary's transaction counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct TxLine {
    pub sync_commits: u64,
    pub fdatasyncs: u64,
    /// None when there was no fdatasync.
    pub per_fdatasync: Option<f64>,
    pub snapshot_violations: u64,
}

pub fn parse_tx_line(stdout: &str) -> TxLine {
    parse_summary(stdout).tx
}

/// `postmaster start -D DATADIR ARGS...` with extra environment variables
/// (fail points), logs in files under `logdir`; `Server::start` passes none.
pub fn start_with_env(
    datadir: &Path,
    logdir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
    let stdout_path = logdir.join(format!("start-{n}.out"));
    let stderr_path = logdir.join(format!("start-{n}.err"));
    let out = fs::File::create(&stdout_path).unwrap();
    let err = fs::File::create(&stderr_path).unwrap();
    let mut cmd = Command::new(postmaster_bin());
    cmd.arg("start").arg("-D").arg(datadir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .expect("spawn postmaster start");
    Server {
        pid: child.id() as i32,
        child: Some(child),
        datadir: datadir.to_path_buf(),
        stdout_path,
        stderr_path,
    }
}

/// SIGKILLs the server's whole process group (no shutdown flush, no
/// shutdown checkpoint) and waits for the postmaster and its children.
pub fn kill_group(s: Server) -> Out {
    let kids = s.children();
    kill(-s.pid, libc::SIGKILL);
    let o = s.wait_exit(TIMEOUT);
    assert!(
        wait_until(TIMEOUT, || kids.iter().all(|(p, _)| !alive(*p))),
        "children survived SIGKILL of the process group"
    );
    o
}

/// A record as walformat's reader sees it.
#[derive(Debug, Clone, Copy)]
pub struct RecInfo {
    pub lsn: u64,
    /// End of the record's bytes.
    pub end: u64,
    /// Where the next record starts.
    pub next: u64,
    pub tot_len: u32,
    pub xid: u32,
    pub is_commit: bool,
    /// Commit timestamp (µs since 2000-01-01) of a COMMIT record.
    pub commit_time: Option<i64>,
}

/// Reads WAL of `d` from its first record with walformat's reader: every
/// valid record, and the error that ended reading (None: clean end).
pub fn scan_records(d: &DataDir) -> (Vec<RecInfo>, Option<String>) {
    let geo = walformat::Geometry::new(d.seg_size).unwrap();
    let mut reader = walformat::WalReader::open(&d.path.join("pg_wal"), geo, 1, None, d.first_lsn)
        .unwrap_or_else(|e| panic!("open WAL: {e}"));
    let mut v = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(r)) => v.push(RecInfo {
                lsn: r.lsn,
                end: r.end,
                next: r.next,
                tot_len: r.tot_len,
                xid: r.xid,
                is_commit: r.is_commit(),
                commit_time: r.commit_time(),
            }),
            Ok(None) => return (v, None),
            Err(e) => return (v, Some(e.to_string())),
        }
    }
}

/// Sum of the sizes of the files in `dir` (not recursive).
pub fn dir_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
