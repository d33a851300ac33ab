//! Sockets: options, the peer, and send/recv with per-call flags (no
//! SIGPIPE, no blocking) on a descriptor number. The streams themselves
//! are std's (`TcpStream`, `UnixStream`); these are the calls std lacks.

use nix::sys::socket::{
    self, sockopt, ControlMessage, ControlMessageOwned, MsgFlags, SockaddrLike, SockaddrStorage,
};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn borrow<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: as `fd::borrow`: the caller holds `fd` open for the call; a
    // number that is not open only makes the call fail with EBADF.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// The user id of a Unix-socket peer (SO_PEERCRED).
pub fn peer_uid(fd: RawFd) -> Option<u32> {
    socket::getsockopt(&borrow(fd), sockopt::PeerCredentials)
        .ok()
        .map(|c| c.uid())
}

/// The IP address of a TCP peer (None for a Unix socket or on error).
pub fn peer_ip(fd: RawFd) -> Option<std::net::IpAddr> {
    let addr: SockaddrStorage = socket::getpeername(fd).ok()?;
    match addr.family()? {
        socket::AddressFamily::Inet => Some(addr.as_sockaddr_in()?.ip().into()),
        socket::AddressFamily::Inet6 => Some(addr.as_sockaddr_in6()?.ip().into()),
        _ => None,
    }
}

/// Whether a socket read's or write's error only says that it was cut
/// short: a signal interrupted it, its timeout ([`set_timeout`]) expired,
/// or a non-blocking socket could not move a byte. The connection itself
/// is fine: the caller checks its flags and tries again.
pub fn cut_short(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Which timeout [`set_timeout`] sets.
#[derive(Clone, Copy, Debug)]
pub enum Timeout {
    /// SO_RCVTIMEO.
    Receive,
    /// SO_SNDTIMEO.
    Send,
}

/// Sets SO_RCVTIMEO or SO_SNDTIMEO on `fd` (a zero duration: none);
/// failures are ignored (a descriptor that is not a socket).
pub fn set_timeout(fd: RawFd, which: Timeout, after: Duration) {
    let tv = nix::sys::time::TimeVal::new(after.as_secs() as _, after.subsec_micros() as _);
    let fd = borrow(fd);
    let _ = match which {
        Timeout::Receive => socket::setsockopt(&fd, sockopt::ReceiveTimeout, &tv),
        Timeout::Send => socket::setsockopt(&fd, sockopt::SendTimeout, &tv),
    };
}

/// The socket's send buffer size (SO_SNDBUF; 0 if unknown).
pub fn send_buffer_size(fd: RawFd) -> usize {
    socket::getsockopt(&borrow(fd), sockopt::SndBuf).unwrap_or(0)
}

/// Asks for a send buffer of `size` bytes (SO_SNDBUF); a refusal only
/// leaves the default.
pub fn set_send_buffer_size(fd: RawFd, size: usize) {
    let _ = socket::setsockopt(&borrow(fd), sockopt::SndBuf, &size);
}

/// Bytes sent on `fd` that the peer has not yet acknowledged (TIOCOUTQ);
/// None if the kernel cannot say.
pub fn unsent_bytes(fd: RawFd) -> Option<usize> {
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int through the pointer,
    // which points to `queued` (nix has no wrapper for this request).
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued) };
    (rc == 0).then_some(queued.max(0) as usize)
}

/// shutdown(2) both ways: the peer sees EOF even while another process
/// holds a duplicate of the socket.
pub fn shutdown(fd: RawFd) {
    let _ = socket::shutdown(fd, socket::Shutdown::Both);
}

/// One send(2) without SIGPIPE (a gone peer is EPIPE), and without
/// blocking if `nonblocking`.
pub fn send(fd: RawFd, bytes: &[u8], nonblocking: bool) -> io::Result<usize> {
    let mut flags = MsgFlags::MSG_NOSIGNAL;
    if nonblocking {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    socket::send(fd, bytes, flags).map_err(io::Error::from)
}

/// Sends all of `bytes` (send(2) without SIGPIPE, blocking), retrying
/// after EINTR and short sends.
pub fn send_all(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    super::write_all_with(bytes, |rest| send(fd, rest, false))
}

/// The peer's uid and pid (SO_PEERCRED) of a connected Unix socket.
pub fn peer_credentials(s: &impl AsFd) -> io::Result<(u32, i32)> {
    let c = socket::getsockopt(s, sockopt::PeerCredentials)?;
    Ok((c.uid(), c.pid()))
}

/// Sends `bytes` in one message (sendmsg(2), no SIGPIPE), with `fd`
/// attached (SCM_RIGHTS) when given: the byte count.
pub fn send_with_fd(s: RawFd, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<usize> {
    let raw = fd.map(|fd| [fd.as_raw_fd()]);
    let cmsgs: Vec<ControlMessage> = raw
        .iter()
        .map(|r| ControlMessage::ScmRights(&r[..]))
        .collect();
    let iov = [std::io::IoSlice::new(bytes)];
    Ok(socket::sendmsg::<()>(
        s,
        &iov,
        &cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?)
}

/// One recvmsg(2) into `buf`, collecting a passed descriptor
/// (close-on-exec); any further descriptor is closed. Retries after
/// EINTR.
pub fn recv_with_fd(s: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut cbuf = nix::cmsg_space!(RawFd);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = loop {
        match socket::recvmsg::<()>(s, &mut iov, Some(&mut cbuf), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r?,
        }
    };
    let mut fd = None;
    for c in msg.cmsgs().into_iter().flatten() {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for raw in fds {
                // SAFETY: an SCM_RIGHTS message's descriptors are new ones
                // the kernel just installed in this process; nobody else
                // owns them.
                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                // Keep the first; any extra is closed here.
                if fd.is_none() {
                    fd = Some(owned);
                }
            }
        }
    }
    Ok((msg.bytes, fd))
}

/// One recv(2), without blocking if `nonblocking`: the byte count (0 at
/// EOF).
pub fn recv(fd: RawFd, buf: &mut [u8], nonblocking: bool) -> io::Result<usize> {
    let flags = if nonblocking {
        MsgFlags::MSG_DONTWAIT
    } else {
        MsgFlags::empty()
    };
    socket::recv(fd, buf, flags).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_socket_pair_knows_its_peer_and_carries_bytes() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(peer_uid(a.as_raw_fd()), Some(super::super::euid()));
        assert_eq!(peer_ip(a.as_raw_fd()), None);
        assert_eq!(send(a.as_raw_fd(), b"hi", true).unwrap(), 2);
        let mut buf = [0u8; 4];
        assert_eq!(recv(b.as_raw_fd(), &mut buf, true).unwrap(), 2);
        assert!(recv(b.as_raw_fd(), &mut buf, true).is_err());
        assert!(send_buffer_size(a.as_raw_fd()) > 0);
        shutdown(a.as_raw_fd());
        assert_eq!(recv(b.as_raw_fd(), &mut buf, false).unwrap(), 0);
    }
}
