//! A `postmaster start` child in its own process group, whose whole group
//! is SIGKILLed on drop; starting, stopping and killing it, and the checks
//! of a data directory a server has left.

use super::{
    alive, assert_no_panic, children_of, init_keep, kill, postmaster, postmaster_bin, segments_for,
    wait_until, DataDir, Out, TempDir, TIMEOUT,
};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const READY: &str = "database system is ready to accept connections";

/// A running `postmaster start`, in its own process group.
pub struct Server {
    child: Option<Child>,
    pub pid: i32,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
}

static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Server {
    /// `postmaster start -D DATADIR ARGS...`, logs in files under `logdir`.
    pub fn start(datadir: &Path, logdir: &Path, args: &[&str]) -> Server {
        start_with_env(datadir, logdir, args, &[])
    }

    /// `start`, then waits (up to TIMEOUT) until the server is ready.
    pub fn start_ready(datadir: &Path, logdir: &Path, args: &[&str]) -> Server {
        let mut s = Server::start(datadir, logdir, args);
        s.wait_ready(TIMEOUT);
        s
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

    /// The pid of a live child named `comm`, if there is one.
    pub fn child_pid(&self, comm: &str) -> Option<i32> {
        self.children()
            .into_iter()
            .find(|(_, c)| c == comm)
            .map(|(p, _)| p)
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

/// Starts, waits for ready, sleeps `run`, stops; asserts exit 0.
pub fn run_for(datadir: &Path, logdir: &Path, args: &[&str], run: Duration) -> Out {
    let s = Server::start_ready(datadir, logdir, args);
    std::thread::sleep(run);
    s.stop_ok()
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
    let s = Server::start_ready(&d.path, tmp.path(), &args);
    (d, s)
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
