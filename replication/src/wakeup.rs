//! Waking a process that waits on its socket (the walsender for new WAL,
//! the walreceiver for a new replay position): the waker sends SIGURG,
//! whose default action is to ignore it, so a signal to a pid that has
//! just exited (or been reused) is harmless. The waiting process keeps
//! SIGURG blocked ([`block_sigurg`]) except inside `ppoll`
//! ([`wait_readable`]), which unblocks it atomically: a wake-up sent while
//! the process is busy stays pending and ends the next wait at once, so
//! none is lost between a re-check and the sleep.

use backend::process::set_handler;
use std::os::fd::RawFd;
use std::time::Duration;

extern "C" fn on_sigurg(_: libc::c_int) {}

/// Installs a handler (its delivery interrupts `ppoll`) and blocks SIGURG.
pub(crate) fn block_sigurg() {
    set_handler(libc::SIGURG, on_sigurg as *const () as libc::sighandler_t);
    // SAFETY: a zeroed sigset is filled by sigemptyset/sigaddset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGURG);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// The signal mask `ppoll` runs with: the current one without SIGURG.
fn mask_without_sigurg() -> libc::sigset_t {
    // SAFETY: sigprocmask fills `cur`; sigdelset edits a valid set.
    unsafe {
        let mut cur: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur);
        libc::sigdelset(&mut cur, libc::SIGURG);
        cur
    }
}

/// Waits until `fd` is readable, a signal (SIGURG, SIGTERM) arrives, or
/// `timeout` passes; true if `fd` is readable.
pub(crate) fn wait_readable(fd: RawFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    let mask = mask_without_sigurg();
    // SAFETY: one valid pollfd, a valid timespec and sigset.
    let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, &mask) };
    n > 0
}
