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

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};

/// Set by SIGTERM: finish the current unit of work and exit cleanly.
pub static SHUTDOWN_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Exit status of a process that quit because the postmaster said so.
pub const EXIT_QUIT: i32 = 2;
/// Exit status of a process that reported a fatal error.
pub const EXIT_FATAL: i32 = 1;

extern "C" fn on_sigterm(_: libc::c_int) {
    SHUTDOWN_REQUESTED.store(true, Ordering::Relaxed);
}

/// Set by SIGINT in a connection backend: cancel the running statement.
pub static CANCEL_REQUESTED: AtomicBool = AtomicBool::new(false);

/// A connection backend's client socket and the bytes to send it if the
/// postmaster orders an immediate quit (prepared before any signal).
static CLIENT_FD: AtomicI32 = AtomicI32::new(-1);
static QUIT_MSG: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static QUIT_MSG_LEN: AtomicUsize = AtomicUsize::new(0);

/// Registers the client socket and the message SIGQUIT sends it.
pub fn set_quit_message(fd: i32, msg: Vec<u8>) {
    let msg: &'static mut [u8] = Box::leak(msg.into_boxed_slice());
    // Relaxed: both are published by the Release store of CLIENT_FD below,
    // which the handler loads first.
    QUIT_MSG_LEN.store(msg.len(), Ordering::Relaxed);
    QUIT_MSG.store(msg.as_mut_ptr(), Ordering::Relaxed);
    // Release pairs with the Acquire load of CLIENT_FD in `on_sigquit`.
    CLIENT_FD.store(fd, Ordering::Release);
}

extern "C" fn on_sigint(_: libc::c_int) {
    CANCEL_REQUESTED.store(true, Ordering::Relaxed);
}

/// Makes SIGINT request a cancel (connection backends).
pub fn enable_cancel_signal() {
    set_handler(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
}

extern "C" fn on_sigquit(_: libc::c_int) {
    // Acquire pairs with the Release store in `set_quit_message`; the loads
    // after it are ordered by it, so they are Relaxed.
    let fd = CLIENT_FD.load(Ordering::Acquire);
    let msg = QUIT_MSG.load(Ordering::Relaxed);
    if fd >= 0 && !msg.is_null() {
        // SAFETY: write(2) is async-signal-safe; `msg` points to a leaked
        // buffer of QUIT_MSG_LEN bytes that is never freed.
        unsafe {
            libc::write(
                fd,
                msg as *const libc::c_void,
                QUIT_MSG_LEN.load(Ordering::Relaxed),
            )
        };
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(EXIT_QUIT) };
}

extern "C" fn on_startup_timeout(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe; nothing in shared memory is held
    // before authentication ends (the alarm is disarmed first).
    unsafe { libc::_exit(EXIT_FATAL) };
}

/// Ends this process with EXIT_FATAL unless [`disarm_startup_timeout`] is
/// called within `seconds` (the whole start-up and authentication
/// exchange, however slowly the client sends it).
pub fn arm_startup_timeout(seconds: u32) {
    set_handler(
        libc::SIGALRM,
        on_startup_timeout as *const () as libc::sighandler_t,
    );
    // SAFETY: alarm has no memory effects.
    unsafe { libc::alarm(seconds.max(1)) };
}

/// Cancels the start-up deadline (before the proc slot is allocated).
pub fn disarm_startup_timeout() {
    // SAFETY: alarm has no memory effects.
    unsafe { libc::alarm(0) };
    set_handler(libc::SIGALRM, libc::SIG_IGN);
}

/// Closes every descriptor but 0, 1, 2 and `keep` (a child's own client
/// socket). The shared memory mapping needs no descriptor (the segment's
/// fd is closed right after mmap) and the pid and lock files are not held
/// open.
pub fn close_inherited_fds(keep: Option<i32>) {
    close_fds_except(&[keep.unwrap_or(-1), -1]);
}

/// Closes every descriptor above 2 but those in `keep` (negative entries
/// are ignored): close_range(2) over the gaps, or, where the kernel lacks
/// it, a plain close of every number below the descriptor limit. The one
/// way a child of the postmaster sheds what it inherited, also between
/// fork and exec: it allocates nothing.
pub fn close_fds_except(keep: &[i32; 2]) {
    let mut keep = keep.map(|fd| fd.max(2) as u32);
    keep.sort_unstable();
    let mut first = 3u32;
    let mut ok = true;
    for k in keep.into_iter().chain([u32::MAX]) {
        if k > first {
            let last = if k == u32::MAX { u32::MAX } else { k - 1 };
            // SAFETY: close_range only closes descriptors of this process;
            // none of them is used by anything we keep.
            ok &= unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) } == 0;
        }
        first = first.max(k.saturating_add(1));
    }
    if !ok {
        close_each_fd_except(&keep);
    }
}

/// The fallback of [`close_fds_except`]: every number from 3 up to the
/// descriptor limit (at most 65,536), but `keep`.
fn close_each_fd_except(keep: &[u32; 2]) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes `lim`.
    let limit = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } {
        0 => lim.rlim_cur.min(65_536) as u32,
        _ => 1024,
    };
    for fd in 3..limit {
        if !keep.contains(&fd) {
            // SAFETY: closing descriptors of our own; failures are harmless.
            unsafe { libc::close(fd as i32) };
        }
    }
}

/// Installs `handler` for `sig` (no SA_RESTART: interrupted waits return).
pub fn set_handler(sig: libc::c_int, handler: libc::sighandler_t) {
    // SAFETY: a zeroed sigaction is a valid value; we fill the handler and
    // an empty mask before passing it to the kernel.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Everything a freshly forked child does before its own work.
pub fn become_child(name: &str, postmaster_pid: i32) {
    set_comm(name);
    // SAFETY: prctl with PR_SET_PDEATHSIG and a signal number has no memory
    // effects.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != postmaster_pid {
        // The postmaster died before PDEATHSIG was armed.
        // SAFETY: _exit has no preconditions.
        unsafe { libc::_exit(EXIT_QUIT) };
    }
    for sig in [
        libc::SIGINT,
        libc::SIGCHLD,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGHUP,
        libc::SIGPIPE,
    ] {
        set_handler(sig, libc::SIG_DFL);
    }
    set_handler(libc::SIGPIPE, libc::SIG_IGN);
    set_handler(libc::SIGINT, libc::SIG_IGN);
    set_handler(libc::SIGTERM, on_sigterm as *const () as libc::sighandler_t);
    set_handler(libc::SIGQUIT, on_sigquit as *const () as libc::sighandler_t);
    unblock_all_signals();
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
    }));
}

fn unblock_all_signals() {
    // SAFETY: a zeroed sigset is filled by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Sets the Linux `comm` name (what `ps -o comm` and /proc/PID/comm show).
pub fn set_comm(name: &str) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: `buf` is a NUL-terminated buffer of 16 bytes, as PR_SET_NAME
    // requires.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr() as libc::c_ulong) };
}

pub fn shutdown_requested() -> bool {
    SHUTDOWN_REQUESTED.load(Ordering::Relaxed)
}

/// Writes a whole buffer to a file descriptor with one `write` when
/// possible (the `ack` lines must not interleave).
pub fn write_all_fd(fd: libc::c_int, bytes: &[u8]) -> std::io::Result<()> {
    shmem::sys::write_all_with(bytes, |rest| {
        // SAFETY: the pointer and length describe a live slice.
        unsafe { libc::write(fd, rest.as_ptr() as *const libc::c_void, rest.len()) }
    })
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
