//! File descriptors: closing what a child inherited, pipes, poll, plain
//! read and write on a descriptor number, descriptor flags, and pidfds
//! (a process's descriptor: signals that cannot reach a reused pid, and
//! copies of its descriptors).
//!
//! Descriptor numbers (`RawFd`) are what the callers hold (shared memory
//! stores them, children keep them across `fork`); each call views one as
//! a `BorrowedFd` only for its own length ([`borrow`]).

use super::Signal;
pub use nix::poll::PollFlags;
use nix::poll::{PollFd, PollTimeout};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Views `fd` as borrowed for one call.
fn borrow<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: the callers pass descriptors they hold open for the call;
    // a number that is not open only makes the call fail with EBADF (the
    // BorrowedFd is dropped when the call returns).
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Closes every descriptor above 2 but those in `keep` (negative entries
/// are ignored): close_range(2) over the gaps, or, where the kernel lacks
/// it, a plain close of every number below the descriptor limit (at most
/// 65,536). The one way a child of the postmaster sheds what it
/// inherited, also between fork and exec: it allocates nothing.
pub fn close_fds_except(keep: &[i32; 2]) {
    let mut keep = keep.map(|fd| fd.max(2) as u32);
    keep.sort_unstable();
    let mut first = 3u32;
    let mut ok = true;
    for k in keep.into_iter().chain([u32::MAX]) {
        if k > first {
            let last = if k == u32::MAX { u32::MAX } else { k - 1 };
            // SAFETY: close_range only closes descriptors of this process
            // (nix has no wrapper); none of them is used by anything the
            // caller keeps.
            ok &= unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) } == 0;
        }
        first = first.max(k.saturating_add(1));
    }
    if !ok {
        let limit = super::nofile_limit().map_or(1024, |n| n.min(65_536) as u32);
        for fd in (3..limit).filter(|fd| !keep.contains(fd)) {
            let _ = nix::unistd::close(fd as RawFd);
        }
    }
}

/// A close-on-exec pipe (read end, write end), non-blocking if asked.
pub fn pipe(nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut flags = nix::fcntl::OFlag::O_CLOEXEC;
    if nonblocking {
        flags |= nix::fcntl::OFlag::O_NONBLOCK;
    }
    nix::unistd::pipe2(flags).map_err(io::Error::from)
}

/// Sets or clears close-on-exec on `fd`. Async-signal-safe.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, FdFlag};
    let flags = if on {
        FdFlag::FD_CLOEXEC
    } else {
        FdFlag::empty()
    };
    nix::fcntl::fcntl(borrow(fd), FcntlArg::F_SETFD(flags))
        .map(drop)
        .map_err(io::Error::from)
}

/// Whether the open file behind `fd` has O_DSYNC set (F_GETFL).
pub fn is_dsync(fd: &impl std::os::fd::AsFd) -> io::Result<bool> {
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).map_err(io::Error::from)?;
    Ok(flags & libc::O_DSYNC != 0)
}

/// read(2) into `buf`: the byte count (0 at EOF). Async-signal-safe.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    nix::unistd::read(borrow(fd), buf).map_err(io::Error::from)
}

/// One write(2) of `bytes`: the byte count. Async-signal-safe.
pub fn write(fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
    nix::unistd::write(borrow(fd), bytes).map_err(io::Error::from)
}

/// Writes all of `bytes` to `fd`, with one `write` when possible (log
/// lines must not interleave), retrying after EINTR and short writes.
pub fn write_all(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    super::write_all_with(bytes, |rest| write(fd, rest))
}

/// Whether `fd` is an open socket.
pub fn is_socket(fd: RawFd) -> bool {
    use nix::sys::stat::SFlag;
    fd >= 0
        && nix::sys::stat::fstat(borrow(fd)).is_ok_and(|st| {
            SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFSOCK
        })
}

/// Reads `fd` (non-blocking) until it is empty: a self-pipe's wake-ups.
pub fn drain(fd: RawFd) {
    let mut buf = [0u8; 64];
    while matches!(read(fd, &mut buf), Ok(n) if n > 0) {}
}

fn poll_timeout(timeout: Duration) -> PollTimeout {
    PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX)
}

/// Waits until one of `fds` is readable (or hung up), a signal arrives or
/// `timeout` passes; the number of ready descriptors (0 also after a
/// signal).
pub fn poll_readable(fds: &[RawFd], timeout: Duration) -> usize {
    let mut pfds: Vec<PollFd> = fds
        .iter()
        .map(|&fd| PollFd::new(borrow(fd), PollFlags::POLLIN))
        .collect();
    nix::poll::poll(&mut pfds, poll_timeout(timeout)).map_or(0, |n| n.max(0) as usize)
}

/// Polls one descriptor for `events`: the events that happened (empty
/// after a timeout); an error such as EINTR (a signal) is returned.
pub fn poll_one(fd: RawFd, events: PollFlags, timeout: Duration) -> io::Result<PollFlags> {
    let mut pfd = [PollFd::new(borrow(fd), events)];
    match nix::poll::poll(&mut pfd, poll_timeout(timeout)) {
        Ok(n) if n > 0 => Ok(pfd[0].revents().unwrap_or(PollFlags::empty())),
        Ok(_) => Ok(PollFlags::empty()),
        Err(e) => Err(e.into()),
    }
}

/// Whether the peer of socket `fd` hung up or it failed (POLLHUP,
/// POLLRDHUP, POLLERR), without waiting.
pub fn peer_hung_up(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout never blocks. (nix's
    // PollFlags has no POLLRDHUP.)
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}

/// Waits until `fd` is readable, a signal arrives or `timeout` passes,
/// with `sig` unblocked for the wait only (ppoll's atomic mask swap: a
/// `sig` sent while the caller was busy stays pending and ends this wait
/// at once). True if `fd` is readable.
pub fn ppoll_readable(fd: RawFd, timeout: Duration, sig: Signal) -> bool {
    let mut pfd = [PollFd::new(borrow(fd), PollFlags::POLLIN)];
    let ts = nix::sys::time::TimeSpec::from_duration(timeout);
    let mask = super::signals::mask_without(sig);
    matches!(nix::poll::ppoll(&mut pfd, Some(ts), Some(mask)), Ok(n) if n > 0)
}

/// Creates a FIFO at `path` (mode 0600).
pub fn make_fifo(path: &std::path::Path) -> io::Result<()> {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(io::Error::from)
}

fn owned(raw: libc::c_long) -> Option<OwnedFd> {
    // SAFETY: `raw` is a new descriptor a pidfd call just returned, which
    // nobody else owns.
    (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
}

/// A pidfd for process `pid`: it names that process even after the pid
/// is reused (signals to it fail once it exited).
pub fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    if pid <= 0 {
        return None;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1
    // (nix has no wrapper).
    owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })
}

/// A close-on-exec duplicate of descriptor `fd` of the process `pidfd`
/// names (pidfd_getfd).
pub fn pidfd_getfd(pidfd: &OwnedFd, fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: pidfd_getfd takes a pidfd, a target fd number and flags and
    // returns a new fd or -1 (nix has no wrapper).
    owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })
}

/// Sends `sig` to the process `pidfd` names; false if it exited (ESRCH)
/// or the signal could not go.
pub fn pidfd_send_signal(pidfd: &OwnedFd, sig: Signal) -> bool {
    // SAFETY: pidfd_send_signal takes a pidfd, a signal number, a null
    // siginfo (as kill(2) would fill it) and flags; it touches no memory
    // (nix has no wrapper).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_carries_bytes_and_drains() {
        let (rd, wr) = pipe(true).unwrap();
        write_all(wr.as_raw_fd(), b"abc").unwrap();
        assert_eq!(poll_readable(&[rd.as_raw_fd()], Duration::ZERO), 1);
        drain(rd.as_raw_fd());
        assert_eq!(poll_readable(&[rd.as_raw_fd()], Duration::ZERO), 0);
        drop(wr);
        assert!(poll_one(rd.as_raw_fd(), PollFlags::POLLIN, Duration::ZERO)
            .unwrap()
            .contains(PollFlags::POLLHUP));
    }

    #[test]
    fn a_pidfd_of_ourselves_copies_our_descriptor() {
        let (rd, _wr) = pipe(false).unwrap();
        let me = pidfd_open(std::process::id() as i32).unwrap();
        let copy = pidfd_getfd(&me, rd.as_raw_fd()).unwrap();
        assert_ne!(copy.as_raw_fd(), rd.as_raw_fd());
    }
}
