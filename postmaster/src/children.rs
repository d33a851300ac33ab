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
//! - Supervised workers (`--worker NAME=COMMAND`): a user's program,
//!   forked and exec'd by [`spawn_worker`]; it registers over the
//!   socketpair end it inherits (`shmem::register`), so it has no fixed
//!   slot and no body here.
//!
//! [`Kind`] joins them for supervision (exit handling and signalling).
//!
//! Fork rules ([`fork_process`]): every signal is blocked across `fork`
//! until the child has installed its own handlers (`become_child` unblocks
//! them), so a SIGTERM in between is not swallowed by the postmaster's
//! handler running in the child; the child closes every inherited
//! descriptor but 0, 1, 2 and its own client socket; it leaves with `_exit`
//! so the parent's destructors (segment, sockets) never run in it.
//!
//! Exec rules ([`spawn_worker`], as Rust std's `process_unix.rs`): the
//! program is looked up in PATH and argv/envp are built before the fork;
//! the child keeps only 0, 1, 2, its channel (CLOEXEC cleared on it alone)
//! and a CLOEXEC error pipe, arms PR_SET_PDEATHSIG, resets the signal
//! dispositions and mask the postmaster changed, and execs. If exec fails
//! it writes errno to the pipe and `_exit`s 127; the parent reads the pipe
//! (EOF: the exec happened), so a command that cannot run is known at once
//! and is not mistaken for a crash.

use backend::process::{become_child, EXIT_FATAL, EXIT_QUIT};
use backend::workload::Workload;
use shmem::register::{ENV_DATA_DIR, ENV_WORKER_FD, ENV_WORKER_NAME};
use shmem::segment::AuxProc;
use shmem::sync::Ordering;
use shmem::sys::{self, signals};
use shmem::Shmem;
use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use sys::fd::PollFlags;

/// A server process with a proc slot fixed before the fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerChild {
    Startup,
    Walwriter,
    Checkpointer,
    /// `archive_mode = on`: runs archive_command (no proc slot).
    Archiver,
    /// Cleans up after dead attached processes and sessions
    /// (`backend::abandoned`), the ones in `ServerChildArgs::cleanups`.
    Cleaner,
    /// A standby's: streams WAL from the primary (no proc slot).
    Walreceiver,
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
    /// Supervised worker number `i` (`--worker`, in order).
    Supervised(usize),
}

impl ServerChild {
    /// The name the child gives itself (Linux `comm`).
    fn comm(self) -> &'static str {
        match self {
            ServerChild::Startup => "startup",
            ServerChild::Walwriter => "walwriter",
            ServerChild::Checkpointer => "checkpointer",
            ServerChild::Archiver => "archiver",
            ServerChild::Cleaner => "cleaner",
            ServerChild::Walreceiver => "walreceiver",
            ServerChild::Backend(_) => "backend",
        }
    }

    fn procno(self, shm: &Shmem) -> Option<u32> {
        match self {
            ServerChild::Startup => Some(shm.aux_procno(AuxProc::Startup)),
            ServerChild::Walwriter => Some(shm.aux_procno(AuxProc::Walwriter)),
            ServerChild::Checkpointer => Some(shm.aux_procno(AuxProc::Checkpointer)),
            ServerChild::Cleaner => Some(shm.aux_procno(AuxProc::Cleaner)),
            ServerChild::Archiver | ServerChild::Walreceiver => None,
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
            Kind::Server(ServerChild::Cleaner) => "cleaner".into(),
            Kind::Server(ServerChild::Walreceiver) => "walreceiver".into(),
            Kind::Server(ServerChild::Backend(i)) => format!("backend {i}"),
            Kind::Client(ClientChild::Connection) => "connection backend".into(),
            Kind::Client(ClientChild::Rejecter) => "connection rejecter".into(),
            Kind::Supervised(i) => format!("supervised worker {i}"),
        }
    }

    /// A backend of either family or a supervised worker (stopped first at
    /// a fast shutdown).
    pub fn is_backend(self) -> bool {
        matches!(
            self,
            Kind::Server(ServerChild::Backend(_))
                | Kind::Client(ClientChild::Connection)
                | Kind::Supervised(_)
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
    /// The cleaner's work: the dead processes to clean up after.
    pub cleanups: Vec<backend::abandoned::Job>,
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
        ServerChild::Cleaner => backend::abandoned::run(shm, datadir, &args.cleanups),
        ServerChild::Walreceiver => replication::walreceiver::run(shm, datadir),
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
    let saved = signals::block_all();
    // SAFETY: the postmaster is single-threaded, so the child gets a
    // consistent copy of its memory; the child only runs `body` and
    // leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // The postmaster's handlers (signal-hook's) must not run here.
        signals::reset_inherited();
        backend::process::close_inherited_fds(own_fd);
        // _exit: the parent's destructors (which would unmap or unlink
        // shared state and remove the listening sockets) never run here.
        sys::exit_now(body());
    }
    signals::restore(&saved);
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(pid)
}

/// What a supervised worker's exec needs, built before the fork.
pub(crate) struct ExecPlan {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    /// The child's end of its channel (the same number in the child).
    channel_fd: RawFd,
}

/// Why a supervised worker did not start.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The command cannot be executed (not found, not executable, ...).
    Exec(std::io::Error),
    /// fork or pipe failed (the system is short of something).
    Fork(std::io::Error),
}

impl ExecPlan {
    /// Resolves `argv[0]` in PATH and builds the environment: ours plus
    /// the worker's three variables.
    pub fn new(
        argv: &[String],
        channel_fd: RawFd,
        datadir: &Path,
        name: &str,
    ) -> Result<ExecPlan, SpawnError> {
        let invalid = |what: &str| {
            SpawnError::Exec(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{what} contains a NUL byte"),
            ))
        };
        let first = argv.first().ok_or_else(|| invalid("an empty command"))?;
        let program = find_program(first).map_err(SpawnError::Exec)?;
        let program = CString::new(program.into_os_string().into_vec())
            .map_err(|_| invalid("the program path"))?;
        let argv = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()).map_err(|_| invalid("an argument")))
            .collect::<Result<Vec<_>, _>>()?;
        let ours = [ENV_WORKER_FD, ENV_DATA_DIR, ENV_WORKER_NAME];
        let mut envp = Vec::new();
        for (k, v) in std::env::vars_os() {
            if ours.iter().any(|o| k == *o) {
                continue;
            }
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            envp.push(CString::new(kv).map_err(|_| invalid("the environment"))?);
        }
        let mut dir = format!("{ENV_DATA_DIR}=").into_bytes();
        dir.extend(datadir.as_os_str().as_bytes());
        envp.push(CString::new(dir).map_err(|_| invalid("the data directory"))?);
        envp.push(
            CString::new(format!("{ENV_WORKER_FD}={channel_fd}")).map_err(|_| invalid("fd"))?,
        );
        envp.push(
            CString::new(format!("{ENV_WORKER_NAME}={name}"))
                .map_err(|_| invalid("the worker name"))?,
        );
        Ok(ExecPlan {
            program,
            argv,
            envp,
            channel_fd,
        })
    }
}

/// `cmd` itself when it names a path, else the first PATH entry holding a
/// file of that name.
fn find_program(cmd: &str) -> std::io::Result<PathBuf> {
    if cmd.contains('/') {
        return Ok(PathBuf::from(cmd));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("\"{cmd}\" not found in PATH"),
            )
        })
}

/// Forks and execs a supervised worker; returns its pid once the exec has
/// happened, or why it did not.
pub(crate) fn spawn_worker(plan: &ExecPlan, postmaster_pid: i32) -> Result<i32, SpawnError> {
    let mut argv: Vec<*const libc::c_char> = plan.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = plan.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let (err_rd, err_wr) = sys::fd::pipe(false).map_err(SpawnError::Fork)?;
    let saved = signals::block_all();
    // SAFETY: the postmaster is single-threaded; the child only makes
    // async-signal-safe calls on memory prepared before the fork, then
    // execs or _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: see `exec_child`'s contract: called once, in the child.
        unsafe { exec_child(plan, &argv, &envp, err_wr.as_raw_fd(), postmaster_pid) };
    }
    let fork_err = std::io::Error::last_os_error();
    signals::restore(&saved);
    // Our copy of the write end (the child has its own).
    drop(err_wr);
    if pid < 0 {
        return Err(SpawnError::Fork(fork_err));
    }
    match read_exec_errno(err_rd.as_raw_fd()) {
        None => Ok(pid),
        Some(errno) => {
            // Reaping our own child, which _exits right away.
            sys::wait_child(pid);
            Err(SpawnError::Exec(std::io::Error::from_raw_os_error(errno)))
        }
    }
}

/// The child side of `spawn_worker`: never returns.
///
/// # Safety
/// Only in the child right after `fork`, with `argv`/`envp` NULL-terminated
/// arrays of pointers into `plan`.
unsafe fn exec_child(
    plan: &ExecPlan,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    err_wr: RawFd,
    postmaster_pid: i32,
) -> ! {
    sys::fd::close_fds_except(&[plan.channel_fd, err_wr]);
    let _ = sys::fd::set_cloexec(plan.channel_fd, false);
    sys::die_with_parent(postmaster_pid, EXIT_QUIT);
    signals::reset_inherited();
    signals::unblock_all();
    // SAFETY: execve is async-signal-safe; `argv` and `envp` are
    // NULL-terminated arrays of pointers into `plan`, built before the
    // fork (nix's execve would allocate them here, after the fork).
    unsafe { libc::execve(plan.program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let _ = sys::fd::write(err_wr, &errno.to_le_bytes());
    sys::exit_now(127)
}

/// The errno a failed exec wrote to the pipe; None once the pipe closed
/// empty (the exec succeeded: CLOEXEC closed it). Waits at most 10 s (a
/// child stuck before exec is then taken as started; it is supervised).
fn read_exec_errno(fd: RawFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while got < buf.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // A timeout ends the wait; a signal (EINTR) goes on to the read.
        if matches!(sys::fd::poll_one(fd, PollFlags::POLLIN, left), Ok(r) if r.is_empty()) {
            return None;
        }
        let n = sys::fd::read(fd, &mut buf[got..]);
        match n {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(i32::from_le_bytes(buf))
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

    /// The exit code, or None if a signal ended it.
    pub fn code(&self) -> Option<i32> {
        self.code
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
