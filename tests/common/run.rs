//! Running commands with a timeout (a watchdog SIGKILLs them), the
//! postmaster and `walshm-child` binaries, signals, and polling for a
//! condition.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Default timeout for every wait in the tests.
pub const TIMEOUT: Duration = Duration::from_secs(30);

pub fn postmaster_bin() -> &'static str {
    env!("CARGO_BIN_EXE_postmaster")
}

/// `walshm-child` (tests/child/walshm_child.rs): the library-worker
/// processes the tests start, killed, stopped or supervised. An example of
/// the root package, which `cargo test` builds with the tests (but `cargo
/// test --test GROUP` alone does not: then run `cargo test --no-run` once).
pub fn child_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/PROFILE/deps/GROUP-HASH -> target/PROFILE/examples/walshm-child
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in target/PROFILE/deps")
        .join("examples/walshm-child");
    assert!(
        bin.is_file(),
        "{} is missing: `cargo test` builds it, `cargo test --test GROUP` does not",
        bin.display()
    );
    bin
}

/// The process name (/proc comm) of a `walshm-child`.
pub const CHILD_COMM: &str = "walshm-child";

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

    /// Asserts that the command failed (else panics with `what`) and that
    /// its stderr mentions `needle`.
    #[track_caller]
    pub fn assert_failed_with(&self, what: &str, needle: &str) {
        assert!(!self.status.success(), "{what}\n{}", self.describe());
        assert!(
            self.stderr.contains(needle),
            "stderr does not mention {needle:?}\n{}",
            self.describe()
        );
    }
}

/// Kills `pid` with SIGKILL unless cancelled before `timeout`.
pub(super) struct Watchdog {
    tx: Option<std::sync::mpsc::Sender<()>>,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Watchdog {
    pub(super) fn new(pid: i32, timeout: Duration) -> Watchdog {
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
    pub(super) fn fired(&self) -> bool {
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

/// A command run in its own process group (stdin and stdout to
/// /dev/null), the whole group SIGKILLed and reaped on drop, also when a
/// test fails.
pub struct GroupChild(pub std::process::Child);

impl GroupChild {
    pub fn spawn(cmd: &mut Command, what: &str) -> GroupChild {
        use std::os::unix::process::CommandExt;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        GroupChild(child)
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        kill(-(self.0.id() as i32), libc::SIGKILL);
        let _ = self.0.wait();
    }
}
