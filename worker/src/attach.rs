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
use backend::context::ServerWatch;
use shmem::register::{self, Kind, Registration};
use shmem::Shmem;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

const WORKER_FD_ENV: &str = register::ENV_WORKER_FD;

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

/// Our registration: the mapping, our proc slot, the liveness channel.
pub(crate) struct Link {
    registration: Registration,
    procno: u32,
    data_dir: PathBuf,
}

impl Link {
    /// Registers with the server of `data_dir` (None: the one that started
    /// us, through `WALSHM_WORKER_FD`).
    pub fn connect(data_dir: Option<&Path>) -> Result<Link> {
        let registration = match data_dir {
            Some(dir) => register::connect(dir, Kind::Worker),
            None => {
                let fd = inherited_fd()?;
                install_sigterm_handler();
                register::from_inherited_fd(fd, Kind::Worker)
            }
        }
        .map_err(|e| Error::Attach(e.to_string()))?;
        let procno = registration
            .procno
            .ok_or_else(|| Error::Attach("the server assigned no proc slot".into()))?;
        let data_dir = registration_data_dir(&registration, data_dir)?;
        Ok(Link {
            registration,
            procno,
            data_dir,
        })
    }

    pub fn shm(&self) -> &Shmem {
        &self.registration.shm
    }

    pub fn procno(&self) -> u32 {
        self.procno
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Tells the postmaster we detach cleanly and unmaps the segment.
    pub fn detach(self) -> Result<()> {
        self.registration
            .detach()
            .map_err(|e| Error::Attach(format!("detach: {e}")))
    }
}

/// The data directory: the one given, or the one the postmaster put in
/// our environment (the reader needs it to find pg_wal).
fn registration_data_dir(r: &Registration, given: Option<&Path>) -> Result<PathBuf> {
    if let Some(d) = given {
        return Ok(d.to_path_buf());
    }
    if r.data_dir.as_os_str().is_empty() {
        return Err(Error::Attach(format!(
            "{} is not set: the data directory is unknown",
            register::ENV_DATA_DIR
        )));
    }
    Ok(r.data_dir.clone())
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

impl ServerWatch for Link {
    fn generation_ended(&self) -> bool {
        self.registration.shm.has_ended()
    }

    /// The postmaster closed our channel (it does at a crash restart and a
    /// shutdown), or died without marking the segment (SIGKILL): either
    /// way nobody will ever flush for us again. Marks the generation ended
    /// so that every later call fails at once.
    fn server_gone(&self) -> bool {
        if self.generation_ended() {
            return true;
        }
        if !channel_hung_up(&self.registration.channel) {
            return false;
        }
        self.registration.shm.mark_ended();
        true
    }
}

/// Whether the peer of `channel` has closed it.
fn channel_hung_up(channel: &std::os::unix::net::UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: channel.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for an open descriptor we own; a zero
    // timeout never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}
