//! Waking a process that waits on its socket (the walsender for new WAL,
//! the walreceiver for a new replay position): the waker sends SIGURG,
//! whose default action is to ignore it, so a signal to a pid that has
//! just exited (or been reused) is harmless. The waiting process keeps
//! SIGURG blocked ([`block_sigurg`]) except inside `ppoll`
//! ([`wait_readable`]), which unblocks it atomically: a wake-up sent while
//! the process is busy stays pending and ends the next wait at once, so
//! none is lost between a re-check and the sleep.

use shmem::sys::{fd, signals, Signal};
use std::os::fd::RawFd;
use std::time::Duration;

/// Installs a handler (its delivery interrupts `ppoll`) and blocks SIGURG.
pub(crate) fn block_sigurg() {
    signals::interrupt_only(Signal::SIGURG);
    signals::block(Signal::SIGURG);
}

/// Waits until `fd` is readable, a signal (SIGURG, SIGTERM) arrives, or
/// `timeout` passes; true if `fd` is readable.
pub(crate) fn wait_readable(fd: RawFd, timeout: Duration) -> bool {
    fd::ppoll_readable(fd, timeout, Signal::SIGURG)
}
