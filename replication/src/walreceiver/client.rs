//! The client side of PostgreSQL's protocol that a walreceiver needs
//! (libpqwalreceiver's part of libpq): connect over a Unix socket or TCP,
//! the startup packet of a physical replication connection, trust,
//! cleartext-password or SCRAM-SHA-256 authentication (walshm's TCP
//! listener asks for SCRAM; `protocol::ClientExchange` computes it),
//! simple queries returning text rows
//! (IDENTIFY_SYSTEM, TIMELINE_HISTORY), and the CopyBoth stream of
//! START_REPLICATION.
//!
//! Written by hand rather than taken from a crate: the project's crates
//! (DEPENDENCIES.md) hold no PostgreSQL client, the async ones
//! (tokio-postgres) would pull a runtime into a single-threaded process
//! that must wake every 100 ms to check for a shutdown, and what is
//! needed is five message types.
//!
//! Reading never blocks longer than [`READ_TIMEOUT`]: [`Conn::fill`] makes
//! one read and returns on the timeout, so the caller checks its shutdown
//! flag between reads; whole messages are cut from the buffer by
//! [`Conn::next_message`], which never returns half of one.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The longest one read waits.
pub const READ_TIMEOUT: Duration = Duration::from_millis(100);
/// The longest one write waits (a primary that stopped reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// Protocol version 3.0.
const PROTOCOL_3: i32 = 196_608;
/// A message larger than this is refused (WAL data comes in pieces of at
/// most 128 kB from walshm and PostgreSQL).
const MAX_MESSAGE: usize = 64 << 20;

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn raw_fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }

    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Unix(s) => s,
            Stream::Tcp(s) => s,
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// What START_REPLICATION began.
pub enum Started {
    Streaming,
    /// The timeline asked for ended at the start position: (next
    /// timeline, where it began).
    TimelineEnd(u32, u64),
}

/// One backend message: its type byte and body.
pub struct Message {
    pub tag: u8,
    pub body: Vec<u8>,
}

/// A connection to the primary.
pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
}

/// Where and as whom to connect.
pub struct Target<'a> {
    /// A directory (Unix socket `DIR/.s.PGSQL.PORT`) or a host name.
    pub host: &'a str,
    pub port: u16,
    pub user: &'a str,
    pub password: Option<&'a str>,
    pub application_name: &'a str,
}

impl Conn {
    /// Connects and authenticates a physical replication connection;
    /// `interrupted` (checked between reads) gives up.
    pub fn connect(t: &Target, interrupted: &dyn Fn() -> bool) -> Result<Conn, String> {
        let stream = if t.host.starts_with('/') {
            let path = format!("{}/.s.PGSQL.{}", t.host, t.port);
            let s = UnixStream::connect(&path)
                .map_err(|e| format!("connection to server on socket \"{path}\" failed: {e}"))?;
            set_timeouts(
                s.set_read_timeout(Some(READ_TIMEOUT)),
                s.set_write_timeout(Some(WRITE_TIMEOUT)),
            )?;
            Stream::Unix(s)
        } else {
            let s = connect_tcp(t.host, t.port)?;
            set_timeouts(
                s.set_read_timeout(Some(READ_TIMEOUT)),
                s.set_write_timeout(Some(WRITE_TIMEOUT)),
            )?;
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        };
        let mut conn = Conn {
            stream,
            buf: Vec::new(),
        };
        conn.send(&startup_packet(t.user, t.application_name))?;
        conn.authenticate(t.password, interrupted)?;
        Ok(conn)
    }

    fn raw_fd(&self) -> RawFd {
        self.stream.raw_fd()
    }

    /// Sends raw bytes (one or more whole messages).
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .io()
            .write_all(bytes)
            .map_err(|e| format!("could not send data to the primary: {e}"))
    }

    /// Reads once (waiting at most [`READ_TIMEOUT`], or until a signal:
    /// `crate::wakeup`); false when nothing came.
    pub fn fill(&mut self) -> Result<bool, String> {
        if !crate::wakeup::wait_readable(self.raw_fd(), READ_TIMEOUT) {
            return Ok(false);
        }
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.io().read(&mut chunk) {
            Ok(0) => Err("the primary closed the connection".into()),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e) if shmem::sys::sock::cut_short(&e) => Ok(false),
            Err(e) => Err(format!("could not receive data from the primary: {e}")),
        }
    }

    /// The next whole message in the buffer, if one is there.
    pub fn next_message(&mut self) -> Result<Option<Message>, String> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let len = i32::from_be_bytes(self.buf[1..5].try_into().expect("4 bytes"));
        if len < 4 || len as usize > MAX_MESSAGE {
            return Err(format!("invalid message length {len} from the primary"));
        }
        let total = 1 + len as usize;
        if self.buf.len() < total {
            return Ok(None);
        }
        let tag = self.buf[0];
        let body = self.buf[5..total].to_vec();
        self.buf.drain(..total);
        Ok(Some(Message { tag, body }))
    }

    /// Waits for the next message, calling `interrupted` between reads
    /// (true: give up).
    pub fn wait_message(&mut self, interrupted: &dyn Fn() -> bool) -> Result<Message, String> {
        loop {
            if let Some(m) = self.next_message()? {
                return Ok(m);
            }
            if interrupted() {
                return Err("interrupted by a shutdown request".into());
            }
            self.fill()?;
        }
    }

    /// Answers the primary's authentication requests until it is ready.
    fn authenticate(
        &mut self,
        password: Option<&str>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<(), String> {
        let mut scram: Option<protocol::ClientExchange> = None;
        loop {
            let m = self.wait_message(interrupted)?;
            match (m.tag, be_i32(&m.body, 0)) {
                (b'R', Some(0)) => {}
                (b'R', Some(3)) => {
                    let mut body = Vec::new();
                    put_cstr(&mut body, need_password(password)?);
                    self.send(&message(b'p', &body))?;
                }
                (b'R', Some(10)) => {
                    let offered = String::from_utf8_lossy(&m.body[4..]).into_owned();
                    if !offered.split('\0').any(|mech| mech == "SCRAM-SHA-256") {
                        return Err(format!(
                            "the primary offers no SASL mechanism walshm's walreceiver knows ({offered:?})"
                        ));
                    }
                    let ex = protocol::ClientExchange::new(need_password(password)?)
                        .map_err(|e| format!("no random bytes for SCRAM: {e}"))?;
                    self.send(&sasl_initial_response(&ex.client_first()))?;
                    scram = Some(ex);
                }
                (b'R', Some(11)) => {
                    let ex = scram.as_mut().ok_or("unexpected SASL continuation")?;
                    let fin = ex
                        .client_final(&m.body[4..])
                        .map_err(|e| format!("SCRAM exchange with the primary failed: {e:?}"))?;
                    self.send(&message(b'p', fin.as_bytes()))?;
                }
                (b'R', Some(12)) => {
                    let ex = scram.as_ref().ok_or("unexpected SASL outcome")?;
                    ex.verify_server_final(&m.body[4..]).map_err(|_| {
                        "the primary's SCRAM signature is wrong (it does not know this password)"
                            .to_string()
                    })?;
                }
                (b'R', code) => {
                    return Err(format!(
                        "authentication method {code:?} requested by the primary is not supported by walshm's walreceiver (trust, password and SCRAM-SHA-256 are)"
                    ))
                }
                (b'E', _) => return Err(error_text(&m.body)),
                (b'Z', _) => return Ok(()),
                _ => {}
            }
        }
    }

    /// Runs a simple query; its text rows (NULL as None).
    pub fn query(
        &mut self,
        sql: &str,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<Option<String>>>, String> {
        self.send(&query_message(sql))?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let m = self.wait_message(interrupted)?;
            match m.tag {
                b'D' => rows.push(data_row(&m.body)?),
                b'E' => error = Some(error_text(&m.body)),
                b'Z' => break,
                _ => {}
            }
        }
        match error {
            Some(e) => Err(format!("{sql}: {e}")),
            None => Ok(rows),
        }
    }

    /// Sends START_REPLICATION: streaming begins (CopyBothResponse), or,
    /// for a start exactly at the end of an old timeline, the server names
    /// the next timeline and where it began at once.
    pub fn start_replication(
        &mut self,
        command: &str,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Started, String> {
        self.send(&query_message(command))?;
        let mut next = None;
        loop {
            let m = self.wait_message(interrupted)?;
            match m.tag {
                b'W' => return Ok(Started::Streaming),
                b'D' => next = Some(timeline_row(&data_row(&m.body)?)?),
                b'E' => return Err(format!("{command}: {}", error_text(&m.body))),
                b'Z' => {
                    let (tli, at) = next.ok_or("START_REPLICATION ended without streaming")?;
                    return Ok(Started::TimelineEnd(tli, at));
                }
                _ => {}
            }
        }
    }

    /// After the server's CopyDone (the end of an old timeline): answers
    /// with ours and reads the next timeline and where it began, up to
    /// ReadyForQuery.
    pub fn end_copy(&mut self, interrupted: &dyn Fn() -> bool) -> Result<(u32, u64), String> {
        self.send(&message(b'c', &[]))?;
        let mut next = None;
        loop {
            let m = self.wait_message(interrupted)?;
            match m.tag {
                b'D' => next = Some(timeline_row(&data_row(&m.body)?)?),
                b'E' => return Err(error_text(&m.body)),
                b'Z' => return next.ok_or_else(|| "the primary named no next timeline".into()),
                _ => {}
            }
        }
    }

    /// Says goodbye (Terminate); errors do not matter any more.
    pub fn terminate(mut self) {
        let _ = self.send(&message(b'X', &[]));
    }
}

fn connect_tcp(host: &str, port: u16) -> Result<TcpStream, String> {
    use std::net::ToSocketAddrs;
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("could not translate host name \"{host}\" to address: {e}"))?;
    let mut last = format!("no address for \"{host}\"");
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) => {
                last = format!("connection to server at \"{host}\" ({a}), port {port} failed: {e}")
            }
        }
    }
    Err(last)
}

/// A message with its type byte and length.
pub fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(tag);
    put_length_prefixed(&mut out, body);
    out
}

/// Appends the length word (which counts itself) and `body`: a message
/// after its type byte, or the whole startup packet (which has none).
fn put_length_prefixed(out: &mut Vec<u8>, body: &[u8]) {
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(body);
}

/// Appends `s` as the protocol's String: its bytes, then a NUL.
fn put_cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

fn set_timeouts(read: io::Result<()>, write: io::Result<()>) -> Result<(), String> {
    read.and(write)
        .map_err(|e| format!("could not set socket timeouts: {e}"))
}

fn need_password(password: Option<&str>) -> Result<&str, String> {
    password.ok_or_else(|| {
        "the primary asks for a password and primary_conninfo gives none (password, passfile or ~/.pgpass)".into()
    })
}

/// SASLInitialResponse: the mechanism, then the client-first message.
fn sasl_initial_response(client_first: &str) -> Vec<u8> {
    let mut body = b"SCRAM-SHA-256\0".to_vec();
    body.extend_from_slice(&(client_first.len() as i32).to_be_bytes());
    body.extend_from_slice(client_first.as_bytes());
    message(b'p', &body)
}

fn query_message(sql: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(sql.len() + 1);
    put_cstr(&mut body, sql);
    message(b'Q', &body)
}

fn startup_packet(user: &str, application_name: &str) -> Vec<u8> {
    let mut body = PROTOCOL_3.to_be_bytes().to_vec();
    for (k, v) in [
        ("user", user),
        ("replication", "true"),
        ("application_name", application_name),
    ] {
        put_cstr(&mut body, k);
        put_cstr(&mut body, v);
    }
    body.push(0); // the end of the parameters
    let mut out = Vec::with_capacity(4 + body.len());
    put_length_prefixed(&mut out, &body);
    out
}

pub fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

pub fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The columns of a DataRow, as text.
fn data_row(body: &[u8]) -> Result<Vec<Option<String>>, String> {
    let bad = || "invalid DataRow from the primary".to_string();
    let n = u16::from_be_bytes(body.get(0..2).ok_or_else(bad)?.try_into().expect("2 bytes"));
    let mut at = 2;
    let mut cols = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let len = be_i32(body, at).ok_or_else(bad)?;
        at += 4;
        if len < 0 {
            cols.push(None);
            continue;
        }
        let v = body.get(at..at + len as usize).ok_or_else(bad)?;
        cols.push(Some(String::from_utf8_lossy(v).into_owned()));
        at += len as usize;
    }
    Ok(cols)
}

/// The (next timeline, its start) row that ends an old timeline's stream.
fn timeline_row(row: &[Option<String>]) -> Result<(u32, u64), String> {
    let bad = || format!("invalid end-of-timeline row from the primary: {row:?}");
    let tli = row.first().cloned().flatten().and_then(|t| t.parse().ok());
    let at = row
        .get(1)
        .cloned()
        .flatten()
        .and_then(|l| walformat::parse_lsn(&l).ok());
    tli.zip(at).ok_or_else(bad)
}

/// "SEVERITY: message" of an ErrorResponse.
pub fn error_text(body: &[u8]) -> String {
    let mut severity = "ERROR".to_string();
    let mut msg = String::new();
    for field in body.split(|&b| b == 0) {
        let Some((&kind, text)) = field.split_first() else {
            continue;
        };
        let text = String::from_utf8_lossy(text).into_owned();
        match kind {
            b'S' => severity = text,
            b'M' => msg = text,
            _ => {}
        }
    }
    format!("{severity}:  {msg}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_cut_whole() {
        let (a, _b) = UnixStream::pair().unwrap();
        let mut c = Conn {
            stream: Stream::Unix(a),
            buf: Vec::new(),
        };
        let mut row = 2u16.to_be_bytes().to_vec();
        row.extend_from_slice(&2i32.to_be_bytes());
        row.extend_from_slice(b"42");
        row.extend_from_slice(&(-1i32).to_be_bytes());
        let m = message(b'D', &row);
        c.buf.extend_from_slice(&m[..4]);
        assert!(c.next_message().unwrap().is_none());
        c.buf.extend_from_slice(&m[4..]);
        let got = c.next_message().unwrap().unwrap();
        assert_eq!(got.tag, b'D');
        assert_eq!(data_row(&got.body).unwrap(), vec![Some("42".into()), None]);
        assert!(c.buf.is_empty());
        c.buf.extend_from_slice(&[b'E', 0, 0, 0, 1]);
        assert!(c.next_message().is_err());
    }

    #[test]
    fn error_responses_read_as_libpq_prints_them() {
        let body = b"SERROR\0C58P01\0Mrequested WAL segment has already been removed\0\0";
        assert_eq!(
            error_text(body),
            "ERROR:  requested WAL segment has already been removed"
        );
    }
}
