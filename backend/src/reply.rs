//! Commit replies sent by the flusher (`commit_reply = flusher`, walshm's
//! own: PostgreSQL's backends always reply themselves).
//!
//! With `commit_reply = backend` a durable commit sleeps twice per
//! transaction: in `recv` for the client's next query, and in the commit
//! wait until the flush covers its commit record. With `flusher` the
//! committing backend does not wait: it inserts its commit record, leaves
//! its XID in the ProcArray, and at the end of the request hands its whole
//! pending reply (up to and including ReadyForQuery) to the walwriter
//! through its proc slot's [`ReplySlot`], then goes back to reading its
//! socket. The walwriter, after each flush round, takes every handed-off
//! reply the flush covers, clears their XIDs under one ProcArrayLock
//! acquisition, and sends each on a duplicate of that client's socket.
//!
//! Invariants, and why they hold:
//! - Durability: the walwriter claims a reply only when its flush result
//!   covers the commit record's end (`ReplySlot::claim`), so no client sees
//!   COMMIT before it is on disk. Commits that wait for synchronous
//!   standbys are never deferred (today's path).
//! - Visibility order (PostgreSQL's: a transaction leaves the ProcArray
//!   only once durable, and before it is acknowledged): the XID stays set
//!   until the walwriter clears it after the flush and before the send
//!   (`Flusher::send_covered`); a XID clear of another proc under
//!   ProcArrayLock exclusive is what the group clear already does.
//! - No reordering: [`ReplyStream`] settles (waits for) a handed-off reply
//!   before it returns any bytes it read and before it writes anything,
//!   and `Xact::begin` finishes a commit that was never handed off; so the
//!   backend never processes its next message, nor starts a transaction,
//!   before its previous reply went out.
//! - Never a hang: a reply is handed off only while the socket's unsent
//!   queue (TIOCOUTQ) leaves room; the walwriter sends with
//!   MSG_DONTWAIT|MSG_NOSIGNAL, and on a short send returns the rest
//!   (RETURNED) and signals the backend (SIGUSR2, no SA_RESTART) out of
//!   `recv`, which then sends the rest itself; SO_RCVTIMEO (200 ms) bounds
//!   a lost signal. The signal goes through a pidfd opened while the slot
//!   is still SENDING, when the owner cannot have exited (it settles
//!   before it ends its connection): once RETURNED, the owner may finish,
//!   exit and have its pid reused before the signal, which then fails
//!   instead of reaching whichever process took the pid. A send error
//!   (EPIPE, ECONNRESET) ends the reply as sent: the backend sees the end
//!   of its connection by itself.
//! - Sockets: the walwriter takes a duplicate with pidfd_getfd(2) the first
//!   time it sends for a connection (`ReplySlot::conn`), and closes it once
//!   the slot's `conn` changes (the connection ended: the backend shut the
//!   socket down first, so the client sees EOF at once even while the
//!   walwriter's copy is still open). At most one duplicate per backend
//!   slot. If the duplicate cannot be had, the reply is RETURNED unsent.
//! - Crash: a reply is not sent before its commit is durable, so kill -9
//!   of anybody loses only replies never sent, i.e. commits never
//!   acknowledged; the crash restart is today's.
//! - A lone committer (no other process in a transaction) is not deferred:
//!   it flushes itself as with `backend` (at 1 client the wake-up of the
//!   walwriter cost 0.55-0.69x tps).
//!
//! Measured (scripts/pg-vs-walshm.sh, WALSHM_SETS / BASELINE_SETS, one
//! binary, pgbench -M prepared durable autocommit, 2 s points, 2 cores,
//! shared and noisy; two same-run pairs, one per order; flusher / backend
//! tps, backend / flusher server CPU per tx): 1 client 0.88 / 0.89 and
//! 0.99 / 0.97; 4 clients 1.15 / 1.12 and 1.16 / 1.10; 16 clients 1.33 /
//! 1.16 and 1.17 / 1.16 (context switches per tx 2.13 vs 2.72, 2.02 vs
//! 2.66); 64 clients 1.14 / 1.09 and 0.89 / 0.98 (commits per fdatasync
//! 43 vs 22, 59 vs 21; context switches 1.98 vs 2.58, 2.14 vs 2.63); 256
//! clients 0.66 / 0.67 and 0.59 / 0.61 (context switches 3.8-4.0 vs 2.7).
//! The multi script: 0.71-1.17x tps, no clear winner. So `backend` stays
//! the default: `flusher` wins at 4-16 clients and fills fdatasyncs at 64,
//! but loses at 256, where a perf profile shows the backends sleeping in
//! futex waits (14 % of all samples; recv only 6 %), i.e. in lock or
//! settle waits rather than in recv: one process clearing and sending for
//! up to 256 commits per round serializes what 256 backends did in
//! parallel, and ProcArrayLock held for the batch clear makes snapshot
//! takers wait (not confirmed: the callers of those futex waits were not
//! resolved). Without the yield in `wait_out_a_send` a backend whose next
//! query arrived while the walwriter was still in `finish` slept on its
//! semaphore once more (context switches per tx 2.45 vs 2.67 only).
//!
//! The 256-client loss, followed up: the walwriter's own schedstat
//! (/proc/PID/schedstat, a ~3 s window of pgbench autocommit at 256
//! clients) showed 559 ms run and 1654 ms runqueue wait, 845 / 3090 ms in
//! another run: it is runnable three quarters of the time but waits for a
//! CPU among the woken backends and pgbench, while every reply of the
//! round waits on it (at 16 clients 1025-1478 ms run, 658-881 ms wait; at
//! 4 clients 119-203 ms wait). A bound on unfinished deferred replies
//! (beyond 64, commit as with `backend`) was tried and dropped: 0.82-0.91x
//! tps against the unbounded form at 256 (two pairs).

use crate::context::ProcContext;
use crate::procarray::ProcArray;
use shmem::proc::{Proc, ReplySlot, Settled, REPLY_MAX, REPLY_PREPARED};
use shmem::sync::Ordering;
use shmem::variants::CommitReply;
use shmem::Shmem;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// First sleep of a backend waiting for the walwriter to send its reply;
/// doubled up to `SETTLE_WAIT_MAX`. Only a bound: the walwriter posts.
const SETTLE_WAIT_FIRST: Duration = Duration::from_millis(5);
const SETTLE_WAIT_MAX: Duration = Duration::from_millis(100);

/// How often a backend yields while the walwriter is in the middle of
/// sending its reply, before it sleeps (`wait_out_a_send`).
const SENDING_YIELDS: u32 = 20;

/// Whether this connection backend defers its durable commits' replies.
pub fn enabled(ctx: &ProcContext) -> bool {
    ctx.settings.commit_reply == CommitReply::Flusher
        && matches!(ctx.io, crate::context::IoMode::Direct)
}

/// Connection start: publishes the socket `fd` for the walwriter and arms
/// the signal that interrupts our `recv` when a reply is returned.
pub fn register_connection(me: &Proc, fd: RawFd) {
    let r = &me.reply;
    r.state.store(shmem::proc::REPLY_EMPTY, Ordering::Relaxed);
    r.fd.store(fd, Ordering::Relaxed);
    let seq = r.conn_seq.load(Ordering::Relaxed).wrapping_add(1).max(1);
    r.conn_seq.store(seq, Ordering::Relaxed);
    // Release: pairs with the walwriter's Acquire load of `conn` (it then
    // sees `fd` and our pid).
    r.conn.store(seq, Ordering::Release);
    // The signal only interrupts `recv` (no SA_RESTART).
    shmem::sys::signals::interrupt_only(shmem::sys::Signal::SIGUSR2);
}

/// Connection end: shuts the socket down (the client sees EOF although the
/// walwriter may hold a duplicate) and tells the walwriter to close its
/// copy. The reply must have been settled.
pub fn end_connection(me: &Proc, fd: RawFd) {
    shmem::sys::sock::shutdown(fd);
    me.reply.conn.store(0, Ordering::Release);
    me.reply.fd.store(-1, Ordering::Relaxed);
}

/// The client stream of a connection backend with `commit_reply =
/// flusher`: hands a committed request's reply to the walwriter, and
/// settles it before reading on or writing anything else.
pub struct ReplyStream<'a, S> {
    inner: S,
    shm: &'a Shmem,
    me: &'a Proc,
    fd: RawFd,
    /// Half of SO_SNDBUF: a reply is deferred only below this much unsent.
    room: usize,
    scratch: Vec<u8>,
}

impl<'a, S: Read + Write + AsRawFd> ReplyStream<'a, S> {
    pub fn new(inner: S, shm: &'a Shmem, me: &'a Proc) -> Self {
        let fd = inner.as_raw_fd();
        ReplyStream {
            room: send_buffer_size(fd) / 2,
            inner,
            shm,
            me,
            fd,
            scratch: Vec::new(),
        }
    }

    /// Waits until a handed-off reply is out (sending what the walwriter
    /// returned), so that nothing is reordered after it.
    pub fn settle(&mut self) -> io::Result<()> {
        let mut nap = SETTLE_WAIT_FIRST;
        self.wait_out_a_send();
        loop {
            match self.me.reply.settle_step() {
                Settled::Nothing | Settled::Done => return Ok(()),
                Settled::Returned(sent) => return self.send_returned(sent),
                Settled::Busy => {
                    // Ends with the walwriter's send; if the walwriter
                    // dies, the crash restart ends this process.
                    if !self.me.sem.wait_timeout(nap) {
                        // Maybe the walwriter missed its latch: set it again.
                        self.shm.xlog().walwriter_latch.set();
                        nap = (nap * 2).min(SETTLE_WAIT_MAX);
                    }
                }
            }
        }
    }

    /// The walwriter is sending our reply (SENDING): its send() has woken
    /// the client, whose next query may be what woke us. The send ends in
    /// microseconds, so yield a few times rather than sleep on the
    /// semaphore (a sleep and a post per transaction).
    fn wait_out_a_send(&self) {
        for _ in 0..SENDING_YIELDS {
            if self.me.reply.state() != shmem::proc::REPLY_SENDING {
                return;
            }
            shmem::sync::yield_now();
        }
    }

    /// Sends the part of the reply the walwriter could not.
    fn send_returned(&mut self, sent: usize) -> io::Result<()> {
        let mut rest = std::mem::take(&mut self.scratch);
        self.me.reply.copy_bytes(sent, &mut rest);
        let result = self.inner.write_all(&rest);
        self.scratch = rest;
        result
    }

    /// Hands `buf` to the walwriter if our commit awaits its flush and the
    /// reply can go out without blocking; true if it did.
    fn try_hand_off(&mut self, buf: &[u8]) -> bool {
        let r: &ReplySlot = &self.me.reply;
        if r.state() != REPLY_PREPARED {
            return false;
        }
        if buf.len() > REPLY_MAX || !ends_with_ready_for_query(buf) || !self.socket_has_room() {
            // Not deferrable: let the walwriter flush and clear the XID,
            // wait for it, then send ourselves.
            r.hand_off(&[]);
            self.shm.xlog().walwriter_latch.set();
            return false;
        }
        r.hand_off(buf);
        self.shm.xlog().walwriter_latch.set();
        true
    }

    /// Unsent bytes in the socket leave room for a reply (TIOCOUTQ).
    fn socket_has_room(&self) -> bool {
        shmem::sys::sock::unsent_bytes(self.fd).is_some_and(|queued| queued < self.room)
    }
}

/// The last message is ReadyForQuery ('Z', length 5, status byte).
fn ends_with_ready_for_query(buf: &[u8]) -> bool {
    buf.len() >= 6
        && buf[buf.len() - 6] == b'Z'
        && buf[buf.len() - 5..buf.len() - 1] == [0, 0, 0, 5]
}

fn send_buffer_size(fd: RawFd) -> usize {
    shmem::sys::sock::send_buffer_size(fd)
}

impl<S: Read + Write + AsRawFd> Read for ReplyStream<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let result = self.inner.read(buf);
        match &result {
            Err(e) if shmem::sys::sock::cut_short(e) => {
                // Woken out of recv (SIGUSR2 or the timeout): a returned
                // reply is sent now; a pending one is left to the walwriter.
                if matches!(self.me.reply.state(), shmem::proc::REPLY_RETURNED) {
                    self.settle()?;
                }
            }
            _ => self.settle()?,
        }
        result
    }
}

impl<S: Read + Write + AsRawFd> Write for ReplyStream<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.settle()?;
        if self.try_hand_off(buf) {
            return Ok(buf.len());
        }
        self.settle()?;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.settle()?;
        self.inner.flush()
    }
}

impl<S: AsRawFd> AsRawFd for ReplyStream<'_, S> {
    fn as_raw_fd(&self) -> i32 {
        self.fd
    }
}

/// The walwriter's side: duplicates of client sockets, and the sends.
pub struct Flusher<'a> {
    procs: &'a [Proc],
    procarray: ProcArray<'a>,
    /// Per backend slot: (its `conn`, our duplicate of its socket).
    fds: Vec<Option<(u32, OwnedFd)>>,
    claimed: Vec<(u32, u32)>,
    bytes: Vec<u8>,
}

impl<'a> Flusher<'a> {
    /// The walwriter's flusher when `commit_reply = flusher` (with
    /// `backend` no reply is ever handed off: no slot is scanned).
    pub fn if_enabled(ctx: &'a ProcContext<'a>) -> Option<Self> {
        (ctx.settings.commit_reply == CommitReply::Flusher).then(|| Flusher::new(ctx))
    }

    fn new(ctx: &'a ProcContext<'a>) -> Self {
        let n = ctx.shm.layout().max_backends as usize;
        Flusher {
            procs: &ctx.shm.procs()[..n],
            procarray: ProcArray::new(ctx),
            fds: (0..n).map(|_| None).collect(),
            claimed: Vec::new(),
            bytes: Vec::with_capacity(REPLY_MAX),
        }
    }

    /// After a flush round: sends every handed-off reply `flushed` covers
    /// (their XIDs cleared first, under one ProcArrayLock acquisition),
    /// closes duplicates of ended connections, and returns how many
    /// handed-off replies still wait for a flush.
    pub fn send_covered(&mut self, flushed: u64) -> usize {
        self.claimed.clear();
        let mut waiting = 0;
        for (i, p) in self.procs.iter().enumerate() {
            if let Some(xid) = p.reply.claim(flushed) {
                self.claimed.push((i as u32, xid));
            } else if p.reply.pending_lsn().is_some() {
                waiting += 1;
            }
        }
        self.close_ended_connections();
        if self.claimed.is_empty() {
            return waiting;
        }
        self.procarray.end_transactions_of(&self.claimed);
        for k in 0..self.claimed.len() {
            let procno = self.claimed[k].0 as usize;
            self.send_one(procno);
        }
        waiting
    }

    /// Sends proc `procno`'s claimed reply and finishes it.
    fn send_one(&mut self, procno: usize) {
        let p = &self.procs[procno];
        p.reply.copy_bytes(0, &mut self.bytes);
        let sent = if self.bytes.is_empty() {
            0
        } else {
            match self.socket_of(procno) {
                Some(fd) => send_nonblocking(fd, &self.bytes),
                None => 0,
            }
        };
        // A short send: pin the owner before `finish` lets it settle, end
        // its connection and exit (its pid may then be reused).
        let owner = (sent < self.bytes.len())
            .then(|| shmem::sys::fd::pidfd_open(p.pid.load(Ordering::Relaxed)));
        if p.reply.finish(sent) {
            p.sem.post();
        }
        if let Some(Some(owner)) = owner {
            signal_returned(&owner);
        }
    }

    /// Our duplicate of proc `procno`'s client socket, taken on first use.
    fn socket_of(&mut self, procno: usize) -> Option<RawFd> {
        let r = &self.procs[procno].reply;
        let conn = r.conn.load(Ordering::Acquire);
        if conn == 0 {
            return None;
        }
        if let Some((c, fd)) = &self.fds[procno] {
            if *c == conn {
                return Some(fd.as_raw_fd());
            }
        }
        self.fds[procno] = None;
        let pid = self.procs[procno].pid.load(Ordering::Relaxed);
        let fd = duplicate_socket(pid, r.fd.load(Ordering::Relaxed))?;
        let raw = fd.as_raw_fd();
        self.fds[procno] = Some((conn, fd));
        Some(raw)
    }

    /// Closes every duplicate whose connection ended.
    fn close_ended_connections(&mut self) {
        for (procno, slot) in self.fds.iter_mut().enumerate() {
            if let Some((c, _)) = slot {
                if self.procs[procno].reply.conn.load(Ordering::Acquire) != *c {
                    *slot = None;
                }
            }
        }
    }
}

/// send(2) without blocking and without SIGPIPE: bytes sent; an error
/// (the client is gone, or the buffer is full) sends what it sent so far,
/// and a gone client counts as all sent (nobody is left to read the rest).
fn send_nonblocking(fd: RawFd, bytes: &[u8]) -> usize {
    let mut off = 0;
    while off < bytes.len() {
        let e = match shmem::sys::sock::send(fd, &bytes[off..], true) {
            Ok(n) if n > 0 => {
                off += n;
                continue;
            }
            Ok(_) => io::Error::from(io::ErrorKind::WriteZero),
            Err(e) => e,
        };
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return off,
            _ => return bytes.len(),
        }
    }
    off
}

/// Interrupts the owner's `recv` (SIGUSR2, see `register_connection`): its
/// reply was returned. Through a pidfd taken while the owner still waited
/// for us, so an owner that exited meanwhile gets nothing (ESRCH) and no
/// process that reused its pid is signalled. True if the signal went.
fn signal_returned(owner: &OwnedFd) -> bool {
    shmem::sys::fd::pidfd_send_signal(owner, shmem::sys::Signal::SIGUSR2)
}

/// A duplicate of file descriptor `fd` of process `pid` (pidfd_open +
/// pidfd_getfd; the duplicate is close-on-exec).
fn duplicate_socket(pid: i32, fd: RawFd) -> Option<OwnedFd> {
    if fd < 0 {
        return None;
    }
    shmem::sys::fd::pidfd_getfd(&shmem::sys::fd::pidfd_open(pid)?, fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognizes_a_reply_ending_in_ready_for_query() {
        let mut reply = b"C\0\0\0\x0bCOMMIT\0".to_vec();
        assert!(!ends_with_ready_for_query(&reply));
        reply.extend_from_slice(b"Z\0\0\0\x05I");
        assert!(ends_with_ready_for_query(&reply));
        assert!(!ends_with_ready_for_query(b"Z\0\0\0\x05"));
    }

    #[test]
    fn a_nonblocking_send_to_a_closed_peer_counts_as_sent() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(b);
        assert_eq!(send_nonblocking(a.as_raw_fd(), b"hello"), 5);
    }

    #[test]
    fn a_nonblocking_send_to_a_full_socket_returns_short() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let big = vec![7u8; 8 << 20];
        let sent = send_nonblocking(a.as_raw_fd(), &big);
        assert!(sent > 0 && sent < big.len(), "sent {sent}");
    }

    #[test]
    fn a_returned_reply_signal_never_reaches_a_process_that_exited() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let owner = shmem::sys::fd::pidfd_open(child.id() as i32).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        // The pid may be reused from here on; the pidfd still names the
        // exited child, so nothing is signalled.
        assert!(!signal_returned(&owner));
        let mut live = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let live_owner = shmem::sys::fd::pidfd_open(live.id() as i32).unwrap();
        assert!(signal_returned(&live_owner), "a live owner is signalled");
        // SIGUSR2's default action ends `sleep`: the signal arrived.
        let status = live.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGUSR2));
    }

    #[test]
    fn duplicates_a_socket_of_our_own_process() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let dup = duplicate_socket(std::process::id() as i32, a.as_raw_fd()).unwrap();
        assert_eq!(send_nonblocking(dup.as_raw_fd(), b"x"), 1);
        let mut got = [0u8; 1];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"x");
    }
}
