//! Child-process plumbing shared by every process the postmaster forks.
//!
//! Right after `fork` a child: names itself (Linux `comm`), asks the kernel
//! to kill it when the postmaster dies (`PR_SET_PDEATHSIG`, then re-checks
//! the parent in case it died before the call), resets every signal
//! disposition it inherited, and installs its own handlers. Handlers only
//! store to atomic flags (async-signal-safe); SIGQUIT exits at once with
//! status 2, as PostgreSQL's `quickdie` does: the postmaster sends it when
//! another process crashed and shared memory may be corrupt.
//!
//! A connection's child also closes, right after `fork`, every descriptor
//! it inherited but does not own (PostgreSQL's ClosePostmasterPorts): the
//! listening sockets, the postmaster's self-pipe and the sockets of other
//! clients accepted in the same batch, so that no sibling's connection can
//! outlive its own backend. Until it has authenticated it runs under an
//! `alarm(authentication_timeout)` whose handler `_exit`s with EXIT_FATAL
//! (PostgreSQL's StartupPacketTimeoutHandler), which the postmaster counts
//! as an ordinary FATAL exit, not a crash.
//!
//! Exit statuses the postmaster understands: 0 = clean exit, 1 = an error
//! the process reported (FATAL), 2 = quit on request; anything else or a
//! signal = crash.

use shmem::sys::{self, signals, Signal};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGTERM: finish the current unit of work and exit cleanly.
pub static SHUTDOWN_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Exit status of a process that quit because the postmaster said so.
pub const EXIT_QUIT: i32 = 2;
/// Exit status of a process that reported a fatal error.
pub const EXIT_FATAL: i32 = 1;

/// Set by SIGINT in a connection backend: cancel the running statement.
pub static CANCEL_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Registers a connection backend's client socket and the bytes SIGQUIT
/// sends it (prepared before any signal).
pub fn set_quit_message(fd: i32, msg: Vec<u8>) {
    signals::set_exit_message(fd, msg);
}

/// Makes SIGINT request a cancel (connection backends).
pub fn enable_cancel_signal() {
    signals::set_flag(Signal::SIGINT, &CANCEL_REQUESTED);
}

/// Ends this process with EXIT_FATAL unless [`disarm_startup_timeout`] is
/// called within `seconds` (the whole start-up and authentication
/// exchange, however slowly the client sends it). Nothing in shared
/// memory is held before authentication ends (the alarm is disarmed
/// first), so the handler may `_exit`.
pub fn arm_startup_timeout(seconds: u32) {
    signals::exit_on(Signal::SIGALRM, EXIT_FATAL, false);
    sys::alarm(seconds.max(1));
}

/// Cancels the start-up deadline (before the proc slot is allocated).
pub fn disarm_startup_timeout() {
    sys::alarm(0);
    signals::ignore(Signal::SIGALRM);
}

/// Closes every descriptor but 0, 1, 2 and `keep` (a child's own client
/// socket). The shared memory mapping needs no descriptor (the segment's
/// fd is closed right after mmap) and the pid and lock files are not held
/// open.
pub fn close_inherited_fds(keep: Option<i32>) {
    sys::fd::close_fds_except(&[keep.unwrap_or(-1), -1]);
}

/// Everything a freshly forked child does before its own work (the fork
/// itself already reset the inherited handlers, `signals::reset_inherited`).
pub fn become_child(name: &str, postmaster_pid: i32) {
    sys::set_comm(name);
    // The postmaster may have died before PDEATHSIG was armed.
    sys::die_with_parent(postmaster_pid, EXIT_QUIT);
    signals::set_default(&[
        Signal::SIGINT,
        Signal::SIGCHLD,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGHUP,
        Signal::SIGPIPE,
    ]);
    signals::ignore(Signal::SIGPIPE);
    signals::ignore(Signal::SIGINT);
    signals::set_flag(Signal::SIGTERM, &SHUTDOWN_REQUESTED);
    // As PostgreSQL's quickdie: tell the client (if any), exit at once.
    signals::exit_on(Signal::SIGQUIT, EXIT_QUIT, true);
    signals::unblock_all();
    // A panic in a child is PostgreSQL's PANIC: log it in one line, then
    // abort (the postmaster sees a crash and restarts everything).
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info
            .location()
            .map(|l| format!(" (at {}:{})", l.file(), l.line()))
            .unwrap_or_default();
        log("PANIC", &format!("{msg}{at}"));
        // Before anything unwinds, in every build profile (see
        // `shmem::sys::abort_on_panic`).
        std::process::abort();
    }));
}

pub fn shutdown_requested() -> bool {
    SHUTDOWN_REQUESTED.load(Ordering::Relaxed)
}

/// Writes a whole buffer to a file descriptor with one `write` when
/// possible (the `ack` lines must not interleave).
pub fn write_all_fd(fd: i32, bytes: &[u8]) -> std::io::Result<()> {
    sys::fd::write_all(fd, bytes)
}

/// A log line on stderr, prefixed like PostgreSQL's: `name[pid] LEVEL: msg`.
pub fn log(level: &str, msg: &str) {
    let line = format!(
        "{}[{}] {level}:  {msg}\n",
        current_comm(),
        std::process::id()
    );
    let _ = write_all_fd(2, line.as_bytes());
}

fn current_comm() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "walshm".into())
}
