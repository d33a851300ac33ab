//! The system-call layer: every process, signal, descriptor and socket
//! call the crates make goes through this module and its children, on
//! nix's safe wrappers where nix has one. The rest of the code never
//! spells a `libc::` call.
//!
//! - this module: processes (exists, identity, signal, exit, parent death,
//!   name, priority, resource limits, the user).
//! - [`signals`]: dispositions, masks, flag handlers without SA_RESTART,
//!   exit-on-signal handlers (see there why not signal-hook for those).
//! - [`fd`]: descriptors (close all but some, pipes, poll, read, write,
//!   flags, pidfds).
//! - [`sock`]: socket options and peers, send and recv flags.
//!
//! The futex has its own module (`futex`), the shared mapping its own
//! (`segment`). What stays `unsafe` here is inherent: `_exit`, installing
//! a handler, the syscalls nix does not wrap (close_range, pidfd_*,
//! TIOCOUTQ), and viewing a raw descriptor number as a `BorrowedFd`
//! for the length of one call (the caller holds it open; a stale number
//! only makes the call fail with EBADF).
//!
//! Invariant: everything here that a signal handler or a child between
//! fork and exec calls ([`exit_now`], [`signals::set_default`],
//! [`signals::unblock_all`], [`fd::close_fds_except`], [`fd::write`],
//! [`die_with_parent`]) is async-signal-safe and allocates nothing.

pub mod fd;
pub mod signals;
pub mod sock;

pub use nix::sys::signal::Signal;
pub use nix::unistd::SysconfVar;

use nix::unistd::Pid;
use std::io;

/// Whether process `pid` exists (signal 0: EPERM means it exists but is
/// another user's; only ESRCH means it is gone). A zombie exists.
pub fn process_exists(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // Signal 0 sends nothing; it only checks that the process exists.
    !matches!(
        nix::sys::signal::kill(Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Sends `sig` to process `pid` (a negative pid: to the process group
/// -pid); false if it could not be sent (gone, or not ours).
pub fn kill(pid: i32, sig: impl Into<Option<Signal>>) -> bool {
    nix::sys::signal::kill(Pid::from_raw(pid), sig).is_ok()
}

/// Sends `sig` to this process's parent (a server child's postmaster).
pub fn signal_parent(sig: Signal) -> io::Result<()> {
    nix::sys::signal::kill(nix::unistd::getppid(), sig).map_err(io::Error::from)
}

/// Sends `sig` to this process.
pub fn raise(sig: Signal) {
    let _ = nix::sys::signal::raise(sig);
}

/// Makes a panic anywhere in this process, and in the children it forks
/// later, end the process with SIGABRT right after the panic message,
/// before anything unwinds: PostgreSQL's PANIC, never a half-run
/// destructor in a critical section. Release builds are `panic = "abort"`
/// already; the dev profile unwinds (so that its binaries and the tests
/// share one build of every crate), and this hook, installed first thing
/// in each binary's `main`, gives its binaries the same behaviour.
pub fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}

/// Ends this process at once with `code`: no destructors, no atexit
/// handlers, no stdio flush (what a forked child and a signal handler
/// must do; async-signal-safe).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and is async-signal-safe.
    unsafe { libc::_exit(code) }
}

/// A forked child's first step: SIGKILL when the parent dies
/// (PR_SET_PDEATHSIG), then, since the parent may have died before that,
/// exits with `code` unless its parent is still `parent`.
/// Async-signal-safe.
pub fn die_with_parent(parent: i32, code: i32) {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if nix::unistd::getppid().as_raw() != parent {
        exit_now(code);
    }
}

/// PR_SET_PDEATHSIG with `sig`: this process gets `sig` when its parent
/// dies.
pub fn set_parent_death_signal(sig: Signal) -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(sig).map_err(io::Error::from)
}

/// Sets the Linux `comm` name (what `ps -o comm` and /proc/PID/comm
/// show), cut to 15 bytes.
pub fn set_comm(name: &str) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    let end = buf.iter().position(|&b| b == 0).unwrap_or(15);
    if let Ok(c) = std::ffi::CStr::from_bytes_with_nul(&buf[..=end]) {
        let _ = nix::sys::prctl::set_name(c);
    }
}

/// Arms SIGALRM in `seconds` (0: cancels a pending one).
pub fn alarm(seconds: u32) {
    if seconds == 0 {
        nix::unistd::alarm::cancel();
    } else {
        nix::unistd::alarm::set(seconds);
    }
}

/// Sets the file mode creation mask; returns the previous one.
pub fn umask(mask: u32) -> u32 {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask as _)).bits() as u32
}

/// This process's effective user id.
pub fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// This process's real user id.
pub fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// This process's process group.
pub fn process_group() -> i32 {
    nix::unistd::getpgrp().as_raw()
}

/// The login name of this process's effective user, if the user database
/// knows it.
pub fn user_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// The soft limit on open descriptors (RLIMIT_NOFILE); None if unknown.
pub fn nofile_limit() -> Option<u64> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
}

/// How many CPUs this thread may run on (at least 1).
pub fn cpus_allowed() -> u32 {
    let Ok(set) = nix::sched::sched_getaffinity(Pid::from_raw(0)) else {
        return 1;
    };
    let n = (0..nix::sched::CpuSet::count())
        .filter(|&i| set.is_set(i).unwrap_or(false))
        .count();
    (n as u32).max(1)
}

/// `sysconf(name)`, or `default` if the system does not know it.
pub fn sysconf_or(name: SysconfVar, default: i64) -> i64 {
    match nix::unistd::sysconf(name) {
        Ok(Some(n)) if n > 0 => n,
        _ => default,
    }
}

/// The file system type (statfs `f_type`, a magic number) of the file
/// system holding `path`.
pub fn fs_magic(path: &std::path::Path) -> Option<u64> {
    nix::sys::statfs::statfs(path)
        .ok()
        .map(|st| st.filesystem_type().0 as u64)
}

static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The fork handler: runs in the child right after `fork` (only an atomic
/// add: async-signal-safe, as a child handler of a multi-threaded parent
/// must be).
extern "C" fn on_fork_child() {
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How many `fork`s separate this process from the first one that called
/// [`count_forks`] (a relaxed load).
#[inline]
pub fn fork_generation() -> u64 {
    FORKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Starts counting `fork`s ([`fork_generation`]): a pthread_atfork child
/// handler, installed once per process (children inherit it).
pub fn count_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a child handler that only does an atomic add;
        // no prepare or parent handler (nix has no wrapper). This code is
        // never unloaded while the handler may run (the worker library
        // stays loaded while attached).
        unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
    });
}

/// How a waited-for child ended: its pid and raw wait status.
pub fn reap_any() -> Option<(i32, i32)> {
    reap(-1, true)
}

/// Waits for child `pid` (blocking); its raw wait status.
pub fn wait_child(pid: i32) -> Option<i32> {
    reap(pid, false).map(|(_, st)| st)
}

/// waitpid(2) keeping the raw status (the callers decode it with the
/// W* macros, as the exit reports print it). None: no child ended (with
/// `nohang`) or none is left.
fn reap(pid: i32, nohang: bool) -> Option<(i32, i32)> {
    let mut status = 0;
    let flags = if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: `status` is a valid out-pointer for the call (nix's
        // waitpid decodes the status, and the exit reports need it raw).
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r > 0 {
            return Some((r, status));
        }
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return None;
    }
}

/// Which process `pid` is, while it runs: its start time (clock ticks
/// since boot, `/proc/PID/stat` field 22), so that a later look can tell
/// it from another process that got the same pid. None once it is gone
/// or a zombie (dead, not yet reaped).
pub fn live_process_identity(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name's closing parenthesis: state
    // first, start time the 20th.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Writes all of `bytes` through `call` (one `write(2)`-like call given
/// the rest of the buffer, returning the byte count), retrying after
/// EINTR and short writes.
pub fn write_all_with(
    bytes: &[u8],
    mut call: impl FnMut(&[u8]) -> io::Result<usize>,
) -> io::Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        match call(&bytes[off..]) {
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_exists_and_pid_0_never_does() {
        assert!(process_exists(std::process::id() as i32));
        assert!(!process_exists(0));
        assert!(!process_exists(-1));
    }

    #[test]
    fn short_writes_and_eintr_are_retried() {
        let mut got = Vec::new();
        let mut calls = 0;
        let r = write_all_with(b"abcdef", |rest| {
            calls += 1;
            if calls == 2 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            got.push(rest[0]);
            Ok(1)
        });
        assert!(r.is_ok());
        assert_eq!((calls, got), (7, b"abcdef".to_vec()));
    }
}
