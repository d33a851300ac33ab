//! Running one of scripts/*.sh from a test: in its own process group,
//! under a deadline (SIGTERM, whose trap stops the script's servers, then
//! SIGKILL to the group), its work directory under the test's TempDir
//! (TMPDIR), so that the test can check nothing of the run is left behind.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Runs `bash scripts/NAME ARGS` with `env`, output appended to `log`
/// (None: discarded); panics if it outlives `deadline`.
pub fn run_script(
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
    tmp: &Path,
    log: Option<&Path>,
    deadline: Duration,
) -> ExitStatus {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name);
    let out = |p: Option<&Path>| match p {
        Some(p) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .expect("open the script's log"),
        ),
        None => Stdio::null(),
    };
    let mut child = Command::new("bash")
        .arg(script)
        .args(args)
        .env("WALSHM_BIN", super::postmaster_bin())
        .env("TMPDIR", tmp)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out(log))
        .stderr(out(log))
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("run scripts/{name}: {e}"));
    let pgid = child.id() as i32;
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait for the script") {
            return st;
        }
        if start.elapsed() > deadline {
            signal_quietly(-pgid, libc::SIGTERM);
            super::wait_until(Duration::from_secs(15), || {
                child.try_wait().ok().flatten().is_some()
            });
            signal_quietly(-pgid, libc::SIGKILL);
            let _ = child.wait();
            panic!("scripts/{name} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends `sig` to `pid` (a group when negative), ignoring one that is gone.
pub fn signal_quietly(pid: i32, sig: i32) {
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(pid, sig) };
}

/// Pids of live processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}
