//! Polling for the next client message before sleeping.
//!
//! A backend that blocks in `recv` lets its CPU go idle; on a virtual
//! machine the client's next message then pays the wake-up of an idle
//! CPU (tens of microseconds) on top of the socket hop. With one client
//! that wake-up is most of a round trip. `PollingStream` first tries
//! non-blocking reads for up to `client_poll` microseconds, and only then
//! blocks.
//!
//! Polling is adaptive: it only goes on while it pays. A poll pays when
//! it found the next message within `POLL_PAYS_WITHIN` (30 us: a client
//! that answers at once, such as pgbench); a longer spin
//! costs more CPU than the sleep it avoided, and on a machine whose CPUs
//! are busy it also takes the CPU the client needs to send that message.
//! Every poll that did not pay doubles the number of reads that then
//! block at once (1, 2, 4, ... up to `MAX_SKIPPED_READS`), and one poll
//! that paid resets it: a client that answers slower than a sleep costs
//! one probe per `MAX_SKIPPED_READS` reads, a pipelining or very fast one
//! keeps being polled. A message already there when the read starts
//! says nothing about spinning (it is there whenever the backend was
//! preempted after its reply, which happens by scheduling accident) and
//! leaves the backoff as it is; counting it as a poll that paid reset the
//! backoff every few reads and cost a full spin each time. Measured (2 cores shared, pgbench SELECT 1, one
//! client): polling 100 us on every read cost 15-20 us of server CPU per
//! transaction against 7.5-9.5 blocking, at 0.6-0.7x the tps.
//!
//! Invariants: polling never delays a message (a non-blocking read that
//! finds data returns it at once); it only runs while connection
//! backends hold at most half the CPUs (`sessions * 2 <= cpus`), so a
//! polling backend never takes a CPU another session or its client
//! needs; the blocking read after the poll is the caller's ordinary read,
//! with its timeout and signal behaviour unchanged. A read publishes the
//! `Client:ClientRead` wait event for its whole duration (poll and block),
//! a write `Client:ClientWrite`. Writes pass straight through, so SO_SNDTIMEO's EAGAIN and a signal's EINTR reach the
//! protocol's send loop, which then checks for a fast shutdown.

use shmem::waitevent;
use shmem::Shmem;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// A poll that found data within this long paid for itself. A sleep in
/// `recv` costs 7.5-9.5 us of server CPU per round trip (~3 us of it the
/// query's own work), but its wake-up costs the client tens of
/// microseconds of latency on a VM. pgbench at one client answers in
/// 7-15 us: with 5 us here no poll ever paid and one client ran at 0.35-0.5x
/// the tps of polling; with 30 us it ran at 1.9-3.0x the 5 us tps at equal
/// or lower server CPU/tx (2 cores, quiet machine, emit16 and SELECT 1,
/// prepared and simple).
const POLL_PAYS_WITHIN: Duration = Duration::from_micros(30);

/// Most reads that block without polling after polls that did not pay.
const MAX_SKIPPED_READS: u32 = 1024;

/// When to poll again: the reads left to block at once, and how many the
/// next poll that does not pay makes block (doubling up to the cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backoff {
    skip: u32,
    next_skip: u32,
}

impl Backoff {
    const fn new() -> Self {
        Backoff {
            skip: 0,
            next_skip: 1,
        }
    }

    /// Whether this read polls (false: it counts down a skipped read).
    fn poll_this_read(&mut self) -> bool {
        if self.skip == 0 {
            return true;
        }
        self.skip -= 1;
        false
    }

    /// Records a poll's outcome: one that paid resets the backoff.
    fn record(&mut self, paid: bool) {
        if paid {
            *self = Backoff::new();
        } else {
            self.skip = self.next_skip;
            self.next_skip = (self.next_skip * 2).min(MAX_SKIPPED_READS);
        }
    }
}

/// What one poll found.
enum Polled {
    /// Data (or an error) at the first try, before any spinning.
    AtOnce(io::Result<usize>),
    /// Data (or an error) after spinning, and whether that paid.
    Spun(io::Result<usize>, bool),
    /// Nothing within the budget.
    Nothing,
}

/// A client stream whose reads poll briefly before they block.
pub struct PollingStream<'a, S> {
    inner: S,
    shm: &'a Shmem,
    budget: Duration,
    cpus: u32,
    backoff: Backoff,
}

impl<'a, S: Read + AsRawFd> PollingStream<'a, S> {
    pub fn new(inner: S, shm: &'a Shmem) -> Self {
        let cpus = cpus_allowed();
        PollingStream {
            inner,
            shm,
            budget: Duration::from_micros(shm.settings().client_poll_us as u64),
            cpus,
            backoff: Backoff::new(),
        }
    }

    /// Whether polling would leave a CPU for every session and its client.
    fn cpus_to_spare(&self) -> bool {
        self.shm.sessions().saturating_mul(2) <= self.cpus
    }

    /// Polls (when it may and recent polls paid), then blocks (see the
    /// module header).
    fn read_polling_first(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let may_poll = !self.budget.is_zero() && !buf.is_empty() && self.cpus_to_spare();
        if may_poll && self.backoff.poll_this_read() {
            match self.poll_read(buf) {
                Polled::AtOnce(r) => return r,
                Polled::Spun(r, paid) => {
                    self.backoff.record(paid);
                    return r;
                }
                Polled::Nothing => self.backoff.record(false),
            }
        }
        self.inner.read(buf)
    }

    /// One non-blocking read: None when nothing is there yet.
    fn try_recv(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        match shmem::sys::sock::recv(self.inner.as_raw_fd(), buf, true) {
            Ok(n) => Some(Ok(n)),
            Err(e) => (e.kind() != io::ErrorKind::WouldBlock).then_some(Err(e)),
        }
    }

    /// Non-blocking reads until data, an error, or the budget is spent.
    /// Data already there is returned without a clock read.
    fn poll_read(&mut self, buf: &mut [u8]) -> Polled {
        if let Some(r) = self.try_recv(buf) {
            return Polled::AtOnce(r);
        }
        let start = Instant::now();
        loop {
            std::hint::spin_loop();
            if let Some(r) = self.try_recv(buf) {
                return Polled::Spun(r, start.elapsed() <= POLL_PAYS_WITHIN);
            }
            if start.elapsed() >= self.budget {
                return Polled::Nothing;
            }
        }
    }
}

/// CPUs this process may run on (its affinity mask): one system call,
/// where `std::thread::available_parallelism` also opens and reads three
/// cgroup files, on every connection. 1 if the mask cannot be read.
pub(crate) fn cpus_allowed() -> u32 {
    shmem::sys::cpus_allowed()
}

impl<S: Read + AsRawFd> Read for PollingStream<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let prev = waitevent::report(waitevent::CLIENT_READ);
        let r = self.read_polling_first(buf);
        waitevent::restore(prev);
        r
    }
}

impl<S: Write> Write for PollingStream<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        waitevent::during(waitevent::CLIENT_WRITE, || self.inner.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        waitevent::during(waitevent::CLIENT_WRITE, || self.inner.flush())
    }
}

impl<S: AsRawFd> AsRawFd for PollingStream<'_, S> {
    fn as_raw_fd(&self) -> i32 {
        self.inner.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmem::settings::Settings;
    use std::os::unix::net::UnixStream;

    struct Segment(Shmem);

    fn segment(_tag: &str, poll_us: u32) -> Segment {
        let settings = Settings {
            client_poll_us: poll_us,
            ..Settings::default()
        };
        Segment(Shmem::create(&settings, 4, 1).unwrap())
    }

    /// A polling stream over one end of a socket pair, as on two CPUs, and
    /// the peer's end.
    fn stream(seg: &Segment) -> (PollingStream<'_, UnixStream>, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        let mut s = PollingStream::new(a, &seg.0);
        s.cpus = 2;
        (s, b)
    }

    /// The peer writes `bytes` after `ms` milliseconds, from a thread that
    /// hands the peer's end back.
    fn write_later(
        mut b: UnixStream,
        ms: u64,
        bytes: &'static [u8],
    ) -> std::thread::JoinHandle<UnixStream> {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            b.write_all(bytes).unwrap();
            b
        })
    }

    #[test]
    fn reads_what_arrives_during_the_poll_then_eof() {
        let seg = segment("poll-data", 10_000);
        let (mut s, b) = stream(&seg);
        let writer = write_later(b, 2, b"hello");
        let mut buf = [0u8; 16];
        assert_eq!(s.read(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        drop(writer.join().unwrap());
        assert_eq!(s.read(&mut buf).unwrap(), 0, "EOF once the peer closed");
    }

    #[test]
    fn counts_the_cpus_this_process_may_use() {
        let std_count = std::thread::available_parallelism().unwrap().get() as u32;
        assert!(
            cpus_allowed() >= std_count,
            "affinity is at least the quota-capped count"
        );
        assert!(cpus_allowed() >= 1);
    }

    #[test]
    fn polls_only_while_sessions_leave_cpus_to_spare() {
        let seg = segment("poll-cpus", 100);
        let (s, _b) = stream(&seg);
        assert!(s.cpus_to_spare(), "no session yet");
        let first = seg.0.alloc_backend_proc(1).unwrap();
        assert!(s.cpus_to_spare(), "one session on two CPUs");
        let second = seg.0.alloc_backend_proc(2).unwrap();
        assert!(!s.cpus_to_spare(), "two sessions on two CPUs");
        seg.0.free_backend_proc(second);
        seg.0.free_backend_proc(first);
    }

    #[test]
    fn an_exhausted_poll_falls_back_to_the_blocking_read() {
        let seg = segment("poll-block", 50);
        let (mut s, b) = stream(&seg);
        let mut buf = [0u8; 4];
        assert!(
            matches!(s.poll_read(&mut buf), Polled::Nothing),
            "nothing to read yet"
        );
        let writer = write_later(b, 20, b"late");
        let t = Instant::now();
        assert_eq!(s.read(&mut buf).unwrap(), 4);
        assert!(
            t.elapsed() >= Duration::from_millis(10),
            "read returned early"
        );
        drop(writer.join().unwrap());
    }

    #[test]
    fn polls_that_do_not_pay_double_the_blocking_reads_up_to_the_cap() {
        let mut b = Backoff::new();
        assert!(b.poll_this_read(), "a fresh backend polls");
        let mut skipped = Vec::new();
        for _ in 0..12 {
            b.record(false);
            let mut n = 0;
            while !b.poll_this_read() {
                n += 1;
            }
            skipped.push(n);
        }
        assert_eq!(skipped[..4], [1, 2, 4, 8]);
        assert_eq!(*skipped.last().unwrap(), MAX_SKIPPED_READS);
        b.record(true);
        assert!(b.poll_this_read(), "a poll that paid resets the backoff");
        b.record(false);
        assert!(!b.poll_this_read(), "and the doubling starts over at one");
        assert!(b.poll_this_read());
    }

    #[test]
    fn a_slow_client_stops_the_polling_and_data_already_there_does_not_restart_it() {
        let seg = segment("poll-adapt", 200);
        let (mut s, b) = stream(&seg);
        let writer = write_later(b, 5, b"late");
        let mut buf = [0u8; 4];
        assert_eq!(s.read(&mut buf).unwrap(), 4);
        assert_eq!(s.backoff.skip, 1, "the poll ran out: the next read blocks");
        let mut b = writer.join().unwrap();
        b.write_all(b"now!").unwrap();
        assert_eq!(s.read(&mut buf).unwrap(), 4, "a skipped read blocks");
        b.write_all(b"more").unwrap();
        assert_eq!(s.read(&mut buf).unwrap(), 4);
        assert_eq!(
            s.backoff,
            Backoff {
                skip: 0,
                next_skip: 2
            },
            "data there at once neither pays nor fails: the backoff stays"
        );
    }
}
