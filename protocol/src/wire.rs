//! Byte-level I/O on the client stream: buffered reading of framed messages
//! (with polling of interrupts while blocked) and exact reads for start-up.
//!
//! Invariants: a read that fails with `Interrupted`, `WouldBlock` or
//! `TimedOut` is retried after asking the caller's poll function whether to
//! stop, so a signal (EINTR, installed without SA_RESTART) or a socket read
//! timeout lets the connection notice shutdown and cancel requests. A length
//! field is validated before any allocation, and buffers grow only as bytes
//! actually arrive, so a client cannot make the server allocate memory it
//! has not sent; a message longer than the session's memory limit is read
//! and thrown away in buffer-sized pieces (`Incoming::TooLarge`).
//!
//! Writes (`send_polling`) are bounded in time the same way: a write that
//! fails with `Interrupted`, `WouldBlock` or `TimedOut` (a signal, or
//! SO_SNDTIMEO on a socket whose client stopped reading) asks the poll
//! function whether to give up, so a fast shutdown never waits for a
//! client to read.

use std::io::{self, Read, Write};

/// Largest frontend message accepted (PostgreSQL's limit is 1 GB - 1).
pub const MAX_MESSAGE_LEN: usize = (1 << 30) - 1;

const INITIAL_BUFFER: usize = 8192;

/// What the next read from the client produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    Message {
        tag: u8,
        body: Vec<u8>,
    },
    /// The client closed the connection (possibly in the middle of a message).
    Eof,
    /// The poll function asked to stop waiting.
    Stopped,
    /// A message header with an impossible length.
    BadLength(i64),
    /// A message longer than the caller's limit; its body was read and discarded.
    TooLarge {
        tag: u8,
        len: usize,
    },
}

enum Fill {
    Ready,
    Eof,
    Stopped,
}

/// A socket read or write that was interrupted by a signal or ran into its
/// timeout (or a non-blocking socket that had nothing): try again. The
/// crates on the system-call layer ask `shmem::sys::sock::cut_short`, the
/// same test; this crate stays free of it.
fn is_retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Reads typed messages (`tag`, `int32 length`, body) from a stream, with read-ahead.
pub struct MessageReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for MessageReader {
    fn default() -> Self {
        Self::new()
    }
}

impl MessageReader {
    pub fn new() -> Self {
        MessageReader {
            buf: vec![0; INITIAL_BUFFER],
            start: 0,
            end: 0,
        }
    }

    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// True when bytes of a next message are already buffered (the client pipelines).
    pub fn has_buffered_input(&self) -> bool {
        self.buffered() > 0
    }

    /// Makes room so that `n` bytes fit from `start`, growing at most to `n`.
    fn make_room(&mut self, n: usize) {
        if self.start > 0 && self.buf.len() - self.start < n {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let grown = (self.buf.len() * 2).min(n.max(INITIAL_BUFFER));
            self.buf.resize(grown.max(self.buf.len() + 1), 0);
        }
    }

    /// One read into the free end of the buffer: None when bytes arrived
    /// (or the read should be retried), else why filling ends.
    fn read_more<S: Read>(
        &mut self,
        stream: &mut S,
        poll: &mut dyn FnMut() -> bool,
    ) -> io::Result<Option<Fill>> {
        match stream.read(&mut self.buf[self.end..]) {
            Ok(0) => Ok(Some(Fill::Eof)),
            Ok(k) => {
                self.end += k;
                Ok(None)
            }
            Err(e) if is_retryable(&e) => Ok(poll().then_some(Fill::Stopped)),
            Err(e) => Err(e),
        }
    }

    fn ensure<S: Read>(
        &mut self,
        stream: &mut S,
        n: usize,
        poll: &mut dyn FnMut() -> bool,
    ) -> io::Result<Fill> {
        while self.buffered() < n {
            self.make_room(n);
            if let Some(end) = self.read_more(stream, poll)? {
                return Ok(end);
            }
        }
        Ok(Fill::Ready)
    }

    /// Consumes `n` buffered bytes, returning those from `skip` on.
    fn take(&mut self, n: usize, skip: usize) -> Vec<u8> {
        let v = self.buf[self.start + skip..self.start + n].to_vec();
        self.consume(n);
        v
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > 1 << 20 {
                self.buf = vec![0; INITIAL_BUFFER];
            }
        }
    }

    /// Reads and throws away `n` bytes without growing the buffer.
    fn discard<S: Read>(
        &mut self,
        stream: &mut S,
        mut n: usize,
        poll: &mut dyn FnMut() -> bool,
    ) -> io::Result<Fill> {
        loop {
            let k = self.buffered().min(n);
            self.consume(k);
            n -= k;
            if n == 0 {
                return Ok(Fill::Ready);
            }
            if let Some(end) = self.read_more(stream, poll)? {
                return Ok(end);
            }
        }
    }

    /// Reads one complete message. `poll` is called whenever a read was
    /// interrupted or timed out; returning true abandons the read.
    #[cfg(test)]
    pub fn read_message<S: Read>(
        &mut self,
        stream: &mut S,
        poll: &mut dyn FnMut() -> bool,
    ) -> io::Result<Incoming> {
        self.read_message_within(stream, poll, MAX_MESSAGE_LEN)
    }

    /// Reads one complete message, discarding (`TooLarge`) one whose length
    /// field exceeds `limit` instead of buffering it. `poll` is called
    /// whenever a read was interrupted or timed out; returning true
    /// abandons the read.
    pub fn read_message_within<S: Read>(
        &mut self,
        stream: &mut S,
        poll: &mut dyn FnMut() -> bool,
        limit: usize,
    ) -> io::Result<Incoming> {
        match self.ensure(stream, 5, poll)? {
            Fill::Ready => {}
            Fill::Eof => return Ok(Incoming::Eof),
            Fill::Stopped => return Ok(Incoming::Stopped),
        }
        let h = &self.buf[self.start..self.start + 5];
        let tag = h[0];
        let len = i32::from_be_bytes([h[1], h[2], h[3], h[4]]);
        if len < 4 || len as usize > MAX_MESSAGE_LEN {
            return Ok(Incoming::BadLength(len as i64));
        }
        // 4 <= len <= MAX_MESSAGE_LEN: fits in usize.
        let len = len as usize;
        let total = 1 + len;
        if len > limit {
            return Ok(match self.discard(stream, total, poll)? {
                Fill::Ready => Incoming::TooLarge { tag, len },
                Fill::Eof => Incoming::Eof,
                Fill::Stopped => Incoming::Stopped,
            });
        }
        match self.ensure(stream, total, poll)? {
            Fill::Ready => {}
            Fill::Eof => return Ok(Incoming::Eof),
            Fill::Stopped => return Ok(Incoming::Stopped),
        }
        Ok(Incoming::Message {
            tag,
            body: self.take(total, 5),
        })
    }
}

/// Fills `buf` exactly, retrying only on EINTR. EOF is `UnexpectedEof`; a
/// read timeout is returned as the error it is (the caller's start-up
/// deadline).
pub fn read_exact_retrying<S: Read>(stream: &mut S, buf: &mut [u8]) -> io::Result<()> {
    stream.read_exact(buf)
}

/// Writes all of `bytes` and flushes.
pub fn send<S: Write>(stream: &mut S, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes)?;
    stream.flush()
}

/// The error `send_polling` returns when its poll function gave up.
pub fn abandoned() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "client is not reading; write abandoned",
    )
}

/// True for the error of a write given up by `send_polling`'s poll.
pub fn is_abandoned(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::TimedOut && e.to_string().contains("write abandoned")
}

/// Writes all of `bytes` and flushes. Each time a write is interrupted or
/// times out (SO_SNDTIMEO) without progress, `poll` is asked whether to
/// stop; if it says so the write is abandoned with [`abandoned`].
pub fn send_polling<S: Write>(
    stream: &mut S,
    mut bytes: &[u8],
    poll: &mut dyn FnMut() -> bool,
) -> io::Result<()> {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if is_retryable(&e) => {
                if poll() {
                    return Err(abandoned());
                }
            }
            Err(e) => return Err(e),
        }
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that returns its data in fixed-size chunks, with an
    /// `Interrupted` error before each chunk.
    struct Choppy {
        data: Vec<u8>,
        pos: usize,
        chunk: usize,
        interrupt_next: bool,
    }

    impl Choppy {
        /// `messages` back to back, `chunk` bytes a read; `interrupt_first`:
        /// the first read is interrupted too (else only the ones after it).
        fn new(messages: &[Vec<u8>], chunk: usize, interrupt_first: bool) -> Choppy {
            Choppy {
                data: messages.concat(),
                pos: 0,
                chunk,
                interrupt_next: interrupt_first,
            }
        }
    }

    impl Read for Choppy {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.interrupt_next {
                self.interrupt_next = false;
                return Err(io::Error::new(io::ErrorKind::Interrupted, "eintr"));
            }
            self.interrupt_next = true;
            let n = buf.len().min(self.chunk).min(self.data.len() - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    fn framed(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&i32::try_from(body.len() + 4).unwrap().to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn reassembles_messages_across_chunks_and_interrupts() {
        let big = vec![7u8; 100_000];
        let messages = [
            framed(b'Q', b"SELECT 1\0"),
            framed(b'd', &big),
            framed(b'S', b""),
        ];
        let mut s = Choppy::new(&messages, 3, true);
        let mut r = MessageReader::new();
        let mut polls = 0;
        let mut poll = || {
            polls += 1;
            false
        };
        assert_eq!(
            r.read_message(&mut s, &mut poll).unwrap(),
            Incoming::Message {
                tag: b'Q',
                body: b"SELECT 1\0".to_vec()
            }
        );
        assert_eq!(
            r.read_message(&mut s, &mut poll).unwrap(),
            Incoming::Message {
                tag: b'd',
                body: big
            }
        );
        assert_eq!(
            r.read_message(&mut s, &mut poll).unwrap(),
            Incoming::Message {
                tag: b'S',
                body: vec![]
            }
        );
        assert_eq!(r.read_message(&mut s, &mut poll).unwrap(), Incoming::Eof);
        assert!(polls > 10);
    }

    #[test]
    fn poll_can_stop_a_blocked_read() {
        let mut s = Choppy::new(&[], 1, true);
        let mut r = MessageReader::new();
        assert_eq!(
            r.read_message(&mut s, &mut || true).unwrap(),
            Incoming::Stopped
        );
    }

    #[test]
    fn rejects_bad_lengths_without_allocating() {
        let mut r = MessageReader::new();
        let mut s: &[u8] = b"Q\x7f\xff\xff\xff";
        assert!(matches!(
            r.read_message(&mut s, &mut || false).unwrap(),
            Incoming::BadLength(_)
        ));
        let mut r = MessageReader::new();
        let mut s: &[u8] = b"Q\0\0\0\x02";
        assert_eq!(
            r.read_message(&mut s, &mut || false).unwrap(),
            Incoming::BadLength(2)
        );
    }

    #[test]
    fn a_message_above_the_limit_is_discarded_and_the_next_one_read() {
        let messages = [framed(b'Q', &vec![b'x'; 100_000]), framed(b'S', b"")];
        let mut s = Choppy::new(&messages, 5000, false);
        let mut r = MessageReader::new();
        assert_eq!(
            r.read_message_within(&mut s, &mut || false, 50_000)
                .unwrap(),
            Incoming::TooLarge {
                tag: b'Q',
                len: 100_004
            }
        );
        assert!(r.buf.len() <= INITIAL_BUFFER, "the buffer did not grow");
        assert_eq!(
            r.read_message_within(&mut s, &mut || false, 50_000)
                .unwrap(),
            Incoming::Message {
                tag: b'S',
                body: vec![]
            }
        );
    }

    /// A writer that takes at most `chunk` bytes per call and stalls
    /// (WouldBlock, as SO_SNDTIMEO does) once after each write.
    struct Stalling {
        written: Vec<u8>,
        chunk: usize,
        stalls: usize,
    }

    impl Write for Stalling {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.stalls > 0 {
                self.stalls -= 1;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.chunk);
            self.written.extend_from_slice(&buf[..n]);
            self.stalls = 1;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn send_polling_retries_stalls_and_gives_up_when_told() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = Stalling {
            written: Vec::new(),
            chunk: 999,
            stalls: 0,
        };
        let mut polls = 0;
        send_polling(&mut w, &data, &mut || {
            polls += 1;
            false
        })
        .unwrap();
        assert_eq!(w.written, data);
        assert!(polls >= 10, "every stall was polled");
        let mut w = Stalling {
            written: Vec::new(),
            chunk: 999,
            stalls: 0,
        };
        let e = send_polling(&mut w, &data, &mut || true).unwrap_err();
        assert!(is_abandoned(&e), "{e}");
        assert_eq!(w.written.len(), 999, "gave up at the first stall");
    }

    #[test]
    fn truncated_message_is_eof() {
        let mut r = MessageReader::new();
        let mut s: &[u8] = b"Q\0\0\0\x10abc";
        assert_eq!(
            r.read_message(&mut s, &mut || false).unwrap(),
            Incoming::Eof
        );
    }
}
