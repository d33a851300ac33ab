//! Polling for the next client message before sleeping.
//!
//! A backend that blocks in `recv` lets its CPU go idle; on a virtual
//! machine the client's next message then pays the wake-up of an idle
//! CPU (tens of microseconds) on top of the socket hop. With one client
//! that wake-up is most of a round trip. `PollingStream` first tries
//! non-blocking reads for up to `client_poll` microseconds, and only then
//! blocks.
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

/// A client stream whose reads poll briefly before they block.
pub struct PollingStream<'a, S> {
    inner: S,
    shm: &'a Shmem,
    budget: Duration,
    cpus: u32,
}

impl<'a, S: Read + AsRawFd> PollingStream<'a, S> {
    pub fn new(inner: S, shm: &'a Shmem) -> Self {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        PollingStream {
            inner,
            shm,
            budget: Duration::from_micros(shm.settings().client_poll_us as u64),
            cpus,
        }
    }

    /// Whether polling would leave a CPU for every session and its client.
    fn cpus_to_spare(&self) -> bool {
        self.shm.sessions().saturating_mul(2) <= self.cpus
    }

    /// Polls, then blocks (see the module header).
    fn read_polling_first(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.budget.is_zero() && !buf.is_empty() && self.cpus_to_spare() {
            if let Some(r) = self.poll_read(buf) {
                return r;
            }
        }
        self.inner.read(buf)
    }

    /// Non-blocking reads until data, an error, or the budget is spent
    /// (`None`).
    fn poll_read(&mut self, buf: &mut [u8]) -> Option<io::Result<usize>> {
        let fd = self.inner.as_raw_fd();
        let start = Instant::now();
        loop {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
            let n = unsafe {
                libc::recv(
                    fd,
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n >= 0 {
                return Some(Ok(n as usize));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Some(Err(e));
            }
            if start.elapsed() >= self.budget {
                return None;
            }
            std::hint::spin_loop();
        }
    }
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

    #[test]
    fn reads_what_arrives_during_the_poll_then_eof() {
        let seg = segment("poll-data", 10_000);
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut s = PollingStream::new(a, &seg.0);
        s.cpus = 2;
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            b.write_all(b"hello").unwrap();
            b
        });
        let mut buf = [0u8; 16];
        assert_eq!(s.read(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        drop(writer.join().unwrap());
        assert_eq!(s.read(&mut buf).unwrap(), 0, "EOF once the peer closed");
    }

    #[test]
    fn polls_only_while_sessions_leave_cpus_to_spare() {
        let seg = segment("poll-cpus", 100);
        let (a, _b) = UnixStream::pair().unwrap();
        let mut s = PollingStream::new(a, &seg.0);
        s.cpus = 2;
        assert!(s.cpus_to_spare(), "no session yet");
        let first = seg.0.alloc_backend_proc().unwrap();
        assert!(s.cpus_to_spare(), "one session on two CPUs");
        let second = seg.0.alloc_backend_proc().unwrap();
        assert!(!s.cpus_to_spare(), "two sessions on two CPUs");
        seg.0.free_backend_proc(second);
        seg.0.free_backend_proc(first);
    }

    #[test]
    fn an_exhausted_poll_falls_back_to_the_blocking_read() {
        let seg = segment("poll-block", 50);
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut s = PollingStream::new(a, &seg.0);
        s.cpus = 2;
        let mut buf = [0u8; 4];
        assert!(s.poll_read(&mut buf).is_none(), "nothing to read yet");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b.write_all(b"late").unwrap();
            b
        });
        let t = Instant::now();
        assert_eq!(s.read(&mut buf).unwrap(), 4);
        assert!(
            t.elapsed() >= Duration::from_millis(10),
            "read returned early"
        );
        drop(writer.join().unwrap());
    }
}
