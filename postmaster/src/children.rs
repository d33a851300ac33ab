//! The children the postmaster forks: what kinds there are, how one is
//! forked, and the body of each server process.
//!
//! Two families, forked by two paths so that each body only ever sees the
//! kinds it handles:
//! - [`ServerChild`]: the processes whose proc slot is fixed before the
//!   fork (the auxiliary processes' slots, and slot `i` reserved for
//!   workload backend `i`); their body is [`run_server_child`].
//! - [`ClientChild`]: one per accepted client, which takes a proc slot from
//!   the shared pool itself once authenticated (or never, for a rejecter);
//!   their body is `admission::run_client_child`.
//!
//! [`Kind`] joins the two for supervision (exit handling and signalling).
//!
//! Fork rules ([`fork_process`]): every signal is blocked across `fork`
//! until the child has installed its own handlers (`become_child` unblocks
//! them), so a SIGTERM in between is not swallowed by the postmaster's
//! handler running in the child; the child closes every inherited
//! descriptor but 0, 1, 2 and its own client socket; it leaves with `_exit`
//! so the parent's destructors (segment, sockets) never run in it.

use backend::process::{become_child, EXIT_FATAL, EXIT_QUIT};
use backend::workload::Workload;
use shmem::segment::AuxProc;
use shmem::sync::Ordering;
use shmem::Shmem;
use std::path::Path;

/// A server process with a proc slot fixed before the fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerChild {
    Startup,
    Walwriter,
    Checkpointer,
    /// `archive_mode = on`: runs archive_command (no proc slot).
    Archiver,
    /// Workload backend number `i` (also its proc number).
    Backend(u32),
}

/// A child forked for one accepted client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientChild {
    /// A client connection's backend.
    Connection,
    /// A short-lived child that sends a client a FATAL error and exits.
    Rejecter,
}

/// Any child, as the supervisor tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Server(ServerChild),
    Client(ClientChild),
}

impl ServerChild {
    /// The name the child gives itself (Linux `comm`).
    fn comm(self) -> &'static str {
        match self {
            ServerChild::Startup => "startup",
            ServerChild::Walwriter => "walwriter",
            ServerChild::Checkpointer => "checkpointer",
            ServerChild::Archiver => "archiver",
            ServerChild::Backend(_) => "backend",
        }
    }

    fn procno(self, shm: &Shmem) -> Option<u32> {
        match self {
            ServerChild::Startup => Some(shm.aux_procno(AuxProc::Startup)),
            ServerChild::Walwriter => Some(shm.aux_procno(AuxProc::Walwriter)),
            ServerChild::Checkpointer => Some(shm.aux_procno(AuxProc::Checkpointer)),
            ServerChild::Archiver => None,
            ServerChild::Backend(i) => Some(i),
        }
    }

    /// Lives as long as the server and touches every WAL buffer page, so
    /// it faults them all in at once.
    fn prefaults_wal_buffers(self) -> bool {
        matches!(self, ServerChild::Walwriter | ServerChild::Backend(_))
    }
}

impl Kind {
    /// The child as log lines name it.
    pub fn describe(self) -> String {
        match self {
            Kind::Server(ServerChild::Startup) => "startup process".into(),
            Kind::Server(ServerChild::Walwriter) => "walwriter".into(),
            Kind::Server(ServerChild::Checkpointer) => "checkpointer".into(),
            Kind::Server(ServerChild::Archiver) => "archiver".into(),
            Kind::Server(ServerChild::Backend(i)) => format!("backend {i}"),
            Kind::Client(ClientChild::Connection) => "connection backend".into(),
            Kind::Client(ClientChild::Rejecter) => "connection rejecter".into(),
        }
    }

    /// A backend of either family (stopped first at a fast shutdown).
    pub fn is_backend(self) -> bool {
        matches!(
            self,
            Kind::Server(ServerChild::Backend(_)) | Kind::Client(ClientChild::Connection)
        )
    }
}

/// What a server child needs from the postmaster beyond the segment.
pub(crate) struct ServerChildArgs<'a> {
    pub datadir: &'a Path,
    pub workload: Option<Workload>,
    pub ack: bool,
    pub startup: backend::startup::StartupOptions,
    pub postmaster_pid: i32,
}

/// The body of a forked server child; returns its exit code.
pub(crate) fn run_server_child(shm: &Shmem, child: ServerChild, args: ServerChildArgs) -> i32 {
    become_child(child.comm(), args.postmaster_pid);
    let procno = child.procno(shm);
    if let Some(p) = procno {
        shm.procs()[p as usize]
            .pid
            .store(std::process::id() as i32, Ordering::Relaxed);
    }
    if child.prefaults_wal_buffers() {
        shm.prefault_wal_buffers();
    }
    let datadir = args.datadir;
    match child {
        ServerChild::Startup => backend::startup::run(shm, datadir, args.startup),
        ServerChild::Walwriter => walwriter::run(shm, datadir),
        ServerChild::Checkpointer => backend::checkpointer::run(shm, datadir),
        ServerChild::Archiver => backend::archiver::run(shm, datadir),
        ServerChild::Backend(i) => match args.workload {
            Some(w) => backend::workload::run(shm, i, datadir, w, args.ack),
            None => EXIT_QUIT,
        },
    }
}

/// Forks a child that keeps no inherited descriptor but 0, 1, 2 and
/// `own_fd`, runs `body` and exits with its code; returns the child's pid
/// in the parent.
pub(crate) fn fork_process(
    own_fd: Option<i32>,
    body: impl FnOnce() -> i32,
) -> std::io::Result<i32> {
    let saved = block_all_signals();
    // SAFETY: the postmaster is single-threaded, so the child gets a
    // consistent copy of its memory; the child only runs `body` and
    // leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        backend::process::close_inherited_fds(own_fd);
        let code = body();
        // SAFETY: leaving the child without running the parent's
        // destructors (which would unmap or unlink shared state and
        // remove the listening sockets).
        unsafe { libc::_exit(code) };
    }
    restore_signal_mask(&saved);
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(pid)
}

/// Blocks every signal; returns the previous mask.
fn block_all_signals() -> libc::sigset_t {
    // SAFETY: zeroed sigsets are filled by sigfillset / sigprocmask before
    // use; both pointers are valid.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old);
        old
    }
}

fn restore_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: `mask` is a valid sigset obtained from sigprocmask.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// How a child ended, from its `waitpid` status.
pub(crate) struct ChildExit {
    /// The exit code, or None if a signal ended it.
    code: Option<i32>,
    /// "exited with exit code N" or "was terminated by signal N: Name".
    pub why: String,
}

impl ChildExit {
    pub fn from_wait_status(status: i32) -> ChildExit {
        if libc::WIFEXITED(status) {
            let code = libc::WEXITSTATUS(status);
            ChildExit {
                code: Some(code),
                why: format!("exited with exit code {code}"),
            }
        } else {
            let sig = libc::WTERMSIG(status);
            ChildExit {
                code: None,
                why: format!("was terminated by signal {sig}: {}", signal_name(sig)),
            }
        }
    }

    /// Exit code 0.
    pub fn is_clean(&self) -> bool {
        self.code == Some(0)
    }

    /// Exited with exactly `code`.
    pub fn exited_with(&self, code: i32) -> bool {
        self.code == Some(code)
    }

    /// Exit 0 or a backend's FATAL exit: the session or worker ended
    /// without leaving shared memory in doubt.
    pub fn is_clean_or_fatal(&self) -> bool {
        self.is_clean() || self.exited_with(EXIT_FATAL)
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "Killed",
        libc::SIGSEGV => "Segmentation fault",
        libc::SIGABRT => "Aborted",
        libc::SIGTERM => "Terminated",
        libc::SIGQUIT => "Quit",
        libc::SIGBUS => "Bus error",
        libc::SIGINT => "Interrupt",
        _ => "signal",
    }
}
