//! Attaching to the server: the registration with the postmaster (its
//! handshake lives in `shmem::register`), the mapping it hands over, the
//! liveness channel kept open while attached, and the SIGTERM handling of
//! supervised workers.
//!
//! A link belongs to the process that attached (its owner). A `fork`ed
//! child inherits a copy of the mapping and of the channel, but the proc
//! slot, the open transaction and the registration are the parent's:
//! - every call that acts on them checks [`Link::owned_here`] first: a
//!   fork handler (`pthread_atfork`, installed at the first attach) bumps
//!   this process's fork epoch in each child, so the check is one relaxed
//!   load of a process-local counter (a child that forks through the raw
//!   `clone` system call skips the handler; detach also compares the pid);
//! - in a child, detach and drop release only what is local: the channel's
//!   copy is closed (so that the postmaster still sees the owner's death
//!   as its channel closing) and the mapping is left to the child's exit
//!   (thread-local pointers into it may remain); nothing reaches the
//!   postmaster or shared memory;
//! - a library process never marks a live server generation ended: when
//!   its channel hangs up it only stops using the server itself (a
//!   process-local flag). The shared `ended` flag is the postmaster's;
//!   the one exception is a postmaster that no longer exists (killed by
//!   SIGKILL, so it could not mark it): then the first library process
//!   that notices marks it on its behalf, so that others spinning on a
//!   lock a killed server process held stop.
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

/// Which process owns a link: the one that attached it.
#[derive(Clone, Copy, Debug)]
struct Owner {
    pid: u32,
    epoch: u64,
}

impl Owner {
    fn current() -> Owner {
        Owner {
            pid: std::process::id(),
            epoch: shmem::sys::fork_generation(),
        }
    }
}

/// Whether a supervised worker got SIGTERM.
pub fn shutdown_requested() -> bool {
    SHUTDOWN.load(Ordering::Relaxed)
}

/// Installs a flag handler (signal-hook's: SA_RESTART keeps the host
/// program's interrupted calls going) if SIGTERM is at its default
/// disposition: a program that handles SIGTERM itself keeps its handler.
fn install_sigterm_handler() {
    if shmem::sys::signals::is_default(shmem::sys::Signal::SIGTERM) {
        let _ = signal_hook::flag::register(signal_hook::consts::SIGTERM, &SHUTDOWN);
    }
}

/// Our registration: the mapping, our proc slot, the liveness channel.
pub(crate) struct Link {
    registration: Registration,
    procno: u32,
    data_dir: PathBuf,
    owner: Owner,
    /// Our channel hung up: this process stops using the server (see the
    /// module header; never shared).
    gone: AtomicBool,
}

impl Link {
    /// Registers with the server of `data_dir` (None: the one that started
    /// us, through `WALSHM_WORKER_FD`).
    pub fn connect(data_dir: Option<&Path>) -> Result<Link> {
        shmem::sys::count_forks();
        let owner = Owner::current();
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
            owner,
            gone: AtomicBool::new(false),
        })
    }

    /// Whether this process attached the link (not a forked child of the
    /// one that did): a relaxed load of the process's fork epoch.
    #[inline]
    pub fn owned_here(&self) -> bool {
        shmem::sys::fork_generation() == self.owner.epoch
    }

    /// `owned_here`, and the pid too (for rare calls: detach; a child
    /// made by the raw `clone` system call skips the fork handler).
    pub fn owned_here_strictly(&self) -> bool {
        self.owned_here() && std::process::id() == self.owner.pid
    }

    /// Ok in the process that attached the link, else [`Link::not_owner`].
    #[inline]
    pub fn check_owner(&self) -> Result<()> {
        if self.owned_here() {
            Ok(())
        } else {
            Err(self.not_owner())
        }
    }

    /// The error for a call from a process that does not own the link.
    pub fn not_owner(&self) -> Error {
        Error::ForkedChild {
            owner: self.owner.pid,
        }
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

    /// Tells the postmaster we detach cleanly and unmaps the segment (the
    /// owner only: a forked child calls [`Link::release_local`]).
    pub fn detach(self) -> Result<()> {
        self.registration
            .detach()
            .map_err(|e| Error::Attach(format!("detach: {e}")))
    }

    /// What a forked child may release: its copy of the channel. The
    /// mapping is leaked (the child's exit unmaps it): thread-local
    /// pointers installed by the parent's attach may still point into it.
    pub fn release_local(self) {
        let Registration { shm, channel, .. } = self.registration;
        drop(channel);
        std::mem::forget(shm);
    }

    /// Whether this process gave the server up (its channel hung up).
    fn given_up(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
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
        self.registration.shm.has_ended() || self.given_up()
    }

    /// The postmaster closed our channel (it does at a crash restart and a
    /// shutdown, and after a detach over it), or died without marking the
    /// segment (SIGKILL): either way nobody will ever flush for us again.
    /// From then on every call of this process fails at once; the shared
    /// flag is marked only for a postmaster that no longer exists (module
    /// header).
    fn server_gone(&self) -> bool {
        if self.generation_ended() {
            return true;
        }
        if !channel_hung_up(&self.registration.channel) {
            return false;
        }
        self.gone.store(true, Ordering::Relaxed);
        let shm = &self.registration.shm;
        if !process_alive(shm.header().creator_pid) {
            shm.mark_ended();
        }
        true
    }
}

/// Whether process `pid` exists and is not a zombie (a postmaster killed
/// but not yet reaped by its parent is dead for us).
fn process_alive(pid: i32) -> bool {
    shmem::sys::process_exists(pid) && shmem::sys::live_process_identity(pid).is_some()
}

/// Whether the peer of `channel` has closed it.
fn channel_hung_up(channel: &std::os::unix::net::UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    shmem::sys::fd::peer_hung_up(channel.as_raw_fd())
}
