//! PostgreSQL 15's unmodified `pg_receivewal` as a test's receiver: run in
//! its own process group (so kill -9 reaches all of it), its output
//! appended to `OUT.log`, SIGKILLed and reaped on drop, also when a test
//! fails.

use super::{kill, DataDir};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// pg_receivewal, or None (a loud skip unless WALSHM_REQUIRE_PG=1).
pub fn pg_receivewal() -> Option<PathBuf> {
    super::wire::pg_client("pg_receivewal")
}

/// A running pg_receivewal.
pub struct Receiver {
    child: Option<Child>,
}

impl Receiver {
    /// `pg_receivewal -h DATADIR -p PORT -w -D OUT EXTRA...`, after removing
    /// a `.partial` file a killed predecessor left half padded (see
    /// [`remove_half_padded_partial`]).
    pub fn start(bin: &Path, d: &DataDir, port: u16, out: &Path, extra: &[&str]) -> Receiver {
        fs::create_dir_all(out).unwrap();
        remove_half_padded_partial(out, d.seg_size);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out.with_extension("log"))
            .unwrap();
        let child = Command::new(bin)
            .arg("-h")
            .arg(&d.path)
            .args(["-p", &port.to_string(), "-w", "-D"])
            .arg(out)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("spawn pg_receivewal");
        Receiver { child: Some(child) }
    }

    /// Sends `sig` to its whole process group.
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            kill(-(c.id() as i32), sig);
        }
    }

    /// SIGKILL of its whole group, and wait.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(-(c.id() as i32), libc::SIGKILL);
            let _ = c.wait();
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.kill();
    }
}

/// pg_receivewal makes a new `.partial` file by writing zeros up to the
/// segment size before any WAL; killed while doing so, it leaves a file of
/// neither 0 nor the segment's size, which PostgreSQL 15's pg_receivewal
/// then refuses to open again ("should be 0 or N bytes"). Such a file holds
/// only zeros: remove it, as an operator would, before restarting.
pub fn remove_half_padded_partial(out: &Path, seg_size: u64) {
    for e in fs::read_dir(out).into_iter().flatten().flatten() {
        let is_partial = e.file_name().to_string_lossy().ends_with(".partial");
        let len = e.metadata().map(|m| m.len()).unwrap_or(0);
        if is_partial && len != 0 && len != seg_size {
            let _ = fs::remove_file(e.path());
        }
    }
}
