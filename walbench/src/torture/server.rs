//! One `postmaster start` under torture: spawned in its own process group
//! with stdout and stderr piped to two reader threads.
//!
//! - The stdout thread collects every `ack LSN` line with the time it was
//!   read (one `write` per line in the backends, so lines are whole) and
//!   notes EOF: the pipe's write end is held by the postmaster and every
//!   child it forked, so EOF means all of them are gone and every ack they
//!   printed has been read.
//! - The stderr thread copies the server log to `torture-server.log` and
//!   timestamps each "ready to accept connections" line: the postmaster logs
//!   it once the startup process has exited 0 and backends start again,
//!   which is the end of a recovery as the report measures it.
//!
//! Dropping a `Server` SIGKILLs its group and reaps the postmaster, so no
//! process outlives walbench on an error path.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The log line that ends a (re)start.
const READY: &str = "ready to accept connections";
/// Longest wait for a start or a crash restart.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// What the reader threads saw.
#[derive(Default)]
struct Seen {
    acks: Vec<(u64, Instant)>,
    ready: Vec<Instant>,
    stdout_closed: bool,
}

/// How to start the server.
#[derive(Clone, Debug)]
pub struct StartSpec {
    pub postmaster: PathBuf,
    pub datadir: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub log: PathBuf,
}

pub struct Server {
    child: Option<Child>,
    pub pid: i32,
    /// Where its log is copied (`StartSpec::log`).
    pub log: PathBuf,
    /// The postmaster's exit: `Some(code)` once reaped (`None` inside: a
    /// signal).
    pub exited: Option<Option<i32>>,
    seen: Arc<Mutex<Seen>>,
    /// Acks already handed out by [`Server::take_acks`].
    taken: usize,
}

impl Server {
    /// `postmaster start -D DIR ARGS EXTRA`.
    pub fn start(spec: &StartSpec, extra: &[&str]) -> Result<Server, String> {
        let mut cmd = Command::new(&spec.postmaster);
        cmd.args(["start", "-D"])
            .arg(&spec.datadir)
            .args(&spec.args)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", spec.postmaster.display()))?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|e| format!("could not open \"{}\": {e}", spec.log.display()))?;
        let s = Arc::clone(&seen);
        std::thread::spawn(move || read_stdout(out, &s));
        let s = Arc::clone(&seen);
        std::thread::spawn(move || read_stderr(err, log, &s));
        Ok(Server {
            pid: child.id() as i32,
            log: spec.log.clone(),
            exited: None,
            child: Some(child),
            seen,
            taken: 0,
        })
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of "ready" lines so far.
    pub fn ready_count(&self) -> usize {
        self.seen().ready.len()
    }

    /// Acks read so far.
    pub fn ack_count(&self) -> usize {
        self.seen().acks.len()
    }

    /// Acks not yet taken, with the time each was read.
    pub fn take_acks(&mut self) -> Vec<(u64, Instant)> {
        let v: Vec<_> = self.seen().acks[self.taken..].to_vec();
        self.taken += v.len();
        v
    }

    /// Has the postmaster exited? Its exit code (None: killed by a signal).
    pub fn try_exit(&mut self) -> Option<Option<i32>> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(st)) => {
                self.child = None;
                self.exited = Some(st.code());
                Some(st.code())
            }
            _ => None,
        }
    }

    /// Waits for ready line number `n` (1-based): its time, or why not.
    pub fn wait_ready(&mut self, n: usize, timeout: Duration) -> Result<Instant, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = self.seen().ready.get(n - 1) {
                return Ok(*t);
            }
            if let Some(code) = self.try_exit() {
                return Err(match code {
                    Some(c) => format!("postmaster exited with status {c} instead of starting"),
                    None => "postmaster was killed before it was ready".to_string(),
                });
            }
            if Instant::now() > deadline {
                return Err(format!("postmaster not ready within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits until the postmaster and every process holding its stdout are
    /// gone; the postmaster's exit code (None: a signal).
    pub fn wait_gone(&mut self, timeout: Duration) -> Result<Option<i32>, String> {
        let deadline = Instant::now() + timeout;
        let mut code = None;
        loop {
            if let Some(c) = self.try_exit() {
                code = c;
            }
            if self.child.is_none() && self.seen().stdout_closed {
                return Ok(code);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "server processes still running {timeout:?} after the postmaster was told to go"
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Fast shutdown (SIGTERM) and wait; the exit code.
    pub fn stop(&mut self, timeout: Duration) -> Result<Option<i32>, String> {
        shmem::sys::kill(self.pid, shmem::sys::Signal::SIGTERM);
        self.wait_gone(timeout)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            super::victims::sigkill(-self.pid);
            let _ = c.wait();
        }
    }
}

fn read_stdout(out: std::process::ChildStdout, seen: &Mutex<Seen>) {
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        if let Some(lsn) = line.strip_prefix("ack ") {
            if let Ok(lsn) = walformat::parse_lsn(lsn.trim()) {
                let now = Instant::now();
                seen.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .acks
                    .push((lsn, now));
            }
        }
    }
    seen.lock().unwrap_or_else(|p| p.into_inner()).stdout_closed = true;
}

fn read_stderr(err: std::process::ChildStderr, mut log: std::fs::File, seen: &Mutex<Seen>) {
    for line in BufReader::new(err).lines() {
        let Ok(line) = line else { break };
        if line.contains(READY) {
            let now = Instant::now();
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .ready
                .push(now);
        }
        let _ = writeln!(log, "{line}");
    }
}
