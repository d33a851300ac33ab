//! Attaching to the server: the registration with the postmaster (its
//! handshake lives in `shmem::register`), the mapping it hands over, the
//! liveness channel kept open while attached, and the SIGTERM handling of
//! supervised workers.
//!
//! Supervised workers find their registration descriptor in
//! `WALSHM_WORKER_FD`. For them we install a SIGTERM handler — only if the
//! program left SIGTERM at its default, so a program's own handling wins —
//! that sets a flag and nothing else (async-signal-safe); every call then
//! returns `Error::ShuttingDown`.

use crate::error::{Error, Result};
use shmem::Shmem;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable holding a supervised worker's descriptor.
pub const WORKER_FD_ENV: &str = "WALSHM_WORKER_FD";

static SHUTDOWN: AtomicBool = AtomicBool::new(false);

/// Whether a supervised worker got SIGTERM.
pub fn shutdown_requested() -> bool {
    SHUTDOWN.load(Ordering::Relaxed)
}

extern "C" fn on_sigterm(_sig: libc::c_int) {
    SHUTDOWN.store(true, Ordering::Relaxed);
}

/// Installs `on_sigterm` if SIGTERM is at its default disposition.
fn install_sigterm_handler() {
    // SAFETY: sigaction with a NULL new action only reads the current one
    // into `old`, a zeroed plain struct.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old) } != 0 {
        return;
    }
    if old.sa_sigaction != libc::SIG_DFL {
        return;
    }
    // SAFETY: a zeroed sigaction with our handler, which only stores to an
    // atomic (async-signal-safe); SA_RESTART keeps interrupted syscalls
    // going.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigterm as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Our attachment: the mapping and our proc slot.
///
/// Interim (until the registration socket of issue 12's server part is
/// merged): the named segment of the data directory is mapped directly and
/// a backend slot taken off the free list; there is no liveness channel.
pub(crate) struct Link {
    shm: Shmem,
    procno: u32,
    data_dir: PathBuf,
    attached: bool,
}

impl Link {
    /// Attaches to the server of `data_dir` (None: the one that started
    /// us, through `WALSHM_WORKER_FD`).
    pub fn connect(data_dir: Option<&Path>) -> Result<Link> {
        let Some(dir) = data_dir else {
            let _ = inherited_fd()?;
            install_sigterm_handler();
            return Err(Error::Attach(
                "supervised attach needs the registration socket".into(),
            ));
        };
        let dir = std::fs::canonicalize(dir)
            .map_err(|e| Error::Attach(format!("data directory {}: {e}", dir.display())))?;
        let name = shmem::segment::segment_name_for(&dir);
        let shm = Shmem::attach(&name, None)
            .map_err(|e| Error::Attach(format!("no running server in {}: {e}", dir.display())))?;
        // Recovery sets the flush position; before that the insert position
        // is not valid yet.
        if shm.xlog().write.flush_result.load(Ordering::Acquire) == 0 {
            return Err(Error::Attach("the server is still starting up".into()));
        }
        let procno = shm
            .alloc_backend_proc()
            .ok_or_else(|| Error::Attach("too many workers: every proc slot is in use".into()))?;
        Ok(Link {
            shm,
            procno,
            data_dir: dir,
            attached: true,
        })
    }

    pub fn shm(&self) -> &Shmem {
        &self.shm
    }

    pub fn procno(&self) -> u32 {
        self.procno
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Gives the slot back (once); the mapping stays until the `Link` is
    /// dropped.
    pub fn detach(&mut self) -> Result<()> {
        if std::mem::take(&mut self.attached) {
            self.shm.free_backend_proc(self.procno);
        }
        Ok(())
    }
}

/// The descriptor named by `WALSHM_WORKER_FD`.
fn inherited_fd() -> Result<i32> {
    let v = std::env::var(WORKER_FD_ENV).map_err(|_| {
        Error::Attach(format!(
            "no data directory given and {WORKER_FD_ENV} is not set (this process was not started by `postmaster start --worker`)"
        ))
    })?;
    v.trim()
        .parse::<i32>()
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| Error::Attach(format!("{WORKER_FD_ENV}={v:?} is not a file descriptor")))
}

/// Whether `shm`'s server generation has ended (crash restart, shutdown).
pub(crate) fn generation_ended(_shm: &Shmem) -> bool {
    false
}
