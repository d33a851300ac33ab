//! Attaching to a running server: the registration handshake over the
//! postmaster's Unix socket `DIR/.s.WALSHM.worker`, both sides.
//!
//! Why a socket: the segment has no name (`segment`: a memfd), so the only
//! way into it is to be handed its descriptor. The postmaster accepts on
//! the socket (mode 0600, in the 0700 data directory), checks the peer's
//! uid with SO_PEERCRED (it must equal the server's effective uid), reads a
//! hello, and answers with a status and, on success, the segment's
//! descriptor (SCM_RIGHTS, in the same message), a proc slot and the
//! generation. The client checks the server's uid the same way before it
//! believes the answer.
//!
//! The connection then stays open as the worker's liveness channel: the
//! postmaster never trusts a PID (reuse, namespaces). A worker leaves with
//! a Detach request, which the postmaster acknowledges after freeing the
//! slot; a channel that closes without one is the crash of a process that
//! used shared memory, and the postmaster restarts everything. A
//! supervised worker (`postmaster start --worker`) does the same hello over
//! a socketpair it inherits (`WALSHM_WORKER_FD`) instead of connecting.
//!
//! Kinds: `Worker` gets a proc slot (counted against
//! `max_worker_processes`; a full server answers `Full`) and only while the
//! server runs normally; `Observer` (samplers, status tools) gets the
//! descriptor without a slot, whenever a segment exists, is not counted and
//! may come and go as it likes.
//!
//! Wire format: fixed-size little-endian messages, no framing beyond that.
//!
//! ```text
//! request (client -> server), 16 bytes:
//!   { magic u32 "WSHR" | version u16 | request u16 | pid i32 | reserved u32 }
//!   request: 1 = hello Worker, 2 = hello Observer, 3 = Detach
//! reply (server -> client), 24 bytes, the memfd attached to an Ok reply:
//!   { magic u32 "WSHR" | version u16 | status u16 | procno u32 | limit u32 | generation u64 }
//!   status: 0 Ok, 1 Full, 2 StartingUp, 3 ShuttingDown, 4 Refused, 5 Detached
//!   procno: u32::MAX when none; limit: max_worker_processes
//! ```
//!
//! The `pid` of a request is informational (log lines); nothing trusts it.
//!
//! Invariants: no call here panics on anything read from a socket; every
//! client wait is bounded (`REPLY_TIMEOUT`); a received descriptor is
//! close-on-exec (MSG_CMSG_CLOEXEC) and owned (closed on every error path).

use crate::segment::{Shmem, ShmemError};
use std::fmt;
use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The registration socket's file name in the data directory.
pub const SOCKET_NAME: &str = ".s.WALSHM.worker";
/// Environment of a supervised worker: its end of the channel,
pub const ENV_WORKER_FD: &str = "WALSHM_WORKER_FD";
/// the server's data directory (absolute),
pub const ENV_DATA_DIR: &str = "WALSHM_DATA_DIR";
/// and the NAME of its `--worker NAME=COMMAND`.
pub const ENV_WORKER_NAME: &str = "WALSHM_WORKER_NAME";

pub const MAGIC: u32 = u32::from_le_bytes(*b"WSHR");
pub const VERSION: u16 = 1;
pub const REQUEST_LEN: usize = 16;
pub const REPLY_LEN: usize = 24;
/// How long a client waits for the postmaster's answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// "No proc slot" on the wire.
const NO_PROCNO: u32 = u32::MAX;

/// What a process registers as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Gets a proc slot; its channel is its liveness.
    Worker,
    /// Read-only use (samplers, status): no slot, not counted.
    Observer,
}

/// A client's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Hello(Kind),
    Detach,
}

crate::code_enum! {
    /// The server's answer.
    pub enum Status: u16 {
        Ok = 0,
        Full = 1,
        StartingUp = 2,
        ShuttingDown = 3,
        Refused = 4,
        Detached = 5,
        /// Too many registrations in progress, or observers attached; `limit`
        /// is the cap that was hit.
        Busy = 6,
    }
}

/// A reply, as decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: Status,
    pub procno: Option<u32>,
    /// The server's max_worker_processes.
    pub limit: u32,
    pub generation: u64,
}

impl Request {
    fn wire_code(self) -> u16 {
        match self {
            Request::Hello(Kind::Worker) => 1,
            Request::Hello(Kind::Observer) => 2,
            Request::Detach => 3,
        }
    }

    /// The 16 bytes of this request from process `pid`.
    pub fn encode(self, pid: i32) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&self.wire_code().to_le_bytes());
        b[8..12].copy_from_slice(&pid.to_le_bytes());
        b
    }

    /// Decodes a request; returns it and the sender's stated pid.
    pub fn decode(b: &[u8; REQUEST_LEN]) -> Result<(Request, i32), String> {
        let (magic, version) = magic_and_version(b);
        check_magic_and_version(magic, version)?;
        let req = match u16::from_le_bytes([b[6], b[7]]) {
            1 => Request::Hello(Kind::Worker),
            2 => Request::Hello(Kind::Observer),
            3 => Request::Detach,
            other => return Err(format!("unknown request {other}")),
        };
        Ok((req, i32::from_le_bytes([b[8], b[9], b[10], b[11]])))
    }
}

impl Reply {
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut b = [0u8; REPLY_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(self.status as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.procno.unwrap_or(NO_PROCNO).to_le_bytes());
        b[12..16].copy_from_slice(&self.limit.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; REPLY_LEN]) -> Result<Reply, String> {
        let (magic, version) = magic_and_version(b);
        check_magic_and_version(magic, version)?;
        let raw_status = u16::from_le_bytes([b[6], b[7]]);
        let status =
            Status::from_code(raw_status).ok_or_else(|| format!("unknown status {raw_status}"))?;
        let procno = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let mut generation = [0u8; 8];
        generation.copy_from_slice(&b[16..24]);
        Ok(Reply {
            status,
            procno: (procno != NO_PROCNO).then_some(procno),
            limit: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
            generation: u64::from_le_bytes(generation),
        })
    }
}

fn magic_and_version(b: &[u8]) -> (u32, u16) {
    (
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        u16::from_le_bytes([b[4], b[5]]),
    )
}

fn check_magic_and_version(magic: u32, version: u16) -> Result<(), String> {
    if magic != MAGIC {
        return Err(format!("bad magic {magic:#010x}"));
    }
    if version != VERSION {
        return Err(format!(
            "protocol version {version} (this program speaks {VERSION})"
        ));
    }
    Ok(())
}

/// Why a registration failed. `Display` is one clear line.
#[derive(Debug)]
pub enum RegisterError {
    /// No server runs in the directory (no socket, or nobody accepts).
    NoServer {
        socket: PathBuf,
        reason: String,
    },
    /// Every worker slot is in use.
    Full {
        limit: u32,
    },
    /// The postmaster's cap on registrations in progress or on observers
    /// is reached (a flood of connections, or a low descriptor limit).
    Busy {
        limit: u32,
    },
    StartingUp,
    ShuttingDown,
    /// The server refused this peer (another user).
    Refused,
    /// The other side is not a walshm server of this version, or broke the
    /// protocol.
    BadReply(String),
    /// The descriptor received does not hold a usable segment.
    Segment(ShmemError),
    /// The generation this registration belongs to has ended (a crash
    /// restart or a shutdown); register again.
    Ended {
        generation: u64,
    },
    Io(String),
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::NoServer { socket, reason } => write!(
                f,
                "no walshm server is running there (registration socket \"{}\": {reason})",
                socket.display()
            ),
            RegisterError::Full { limit } => write!(
                f,
                "the server is full: all {limit} worker slots are in use (max_worker_processes)"
            ),
            RegisterError::Busy { limit } => write!(
                f,
                "the server has too many registrations in progress or observers attached (limit {limit}); try again"
            ),
            RegisterError::StartingUp => {
                write!(f, "the server is starting up or recovering; try again")
            }
            RegisterError::ShuttingDown => write!(f, "the server is shutting down"),
            RegisterError::Refused => write!(
                f,
                "the server refused the registration (only its own user may attach)"
            ),
            RegisterError::BadReply(why) => {
                write!(f, "bad answer from the registration socket: {why}")
            }
            RegisterError::Segment(e) => write!(f, "{e}"),
            RegisterError::Ended { generation } => write!(
                f,
                "the server restarted or shut down (generation {generation} ended); attach again"
            ),
            RegisterError::Io(why) => write!(f, "registration failed: {why}"),
        }
    }
}

impl std::error::Error for RegisterError {}

/// An attached process's hold on the server. Leave with [`detach`]:
/// dropping it closes the channel, which for a Worker the postmaster takes
/// as the crash of a shared-memory process (a crash restart).
///
/// [`detach`]: Registration::detach
pub struct Registration {
    /// The segment, mapped in this process.
    pub shm: Shmem,
    /// The proc slot (Worker only).
    pub procno: Option<u32>,
    pub generation: u64,
    /// The server's data directory (empty if unknown: a supervised worker
    /// without WALSHM_DATA_DIR).
    pub data_dir: PathBuf,
    /// The liveness channel: keep it open while attached.
    pub channel: UnixStream,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("procno", &self.procno)
            .field("generation", &self.generation)
            .field("data_dir", &self.data_dir)
            .field("ended", &self.shm.has_ended())
            .finish()
    }
}

/// Path of the registration socket of `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_NAME)
}

/// Registers with the server running in `data_dir`.
pub fn connect(data_dir: &Path, kind: Kind) -> Result<Registration, RegisterError> {
    let socket = socket_path(data_dir);
    let channel = UnixStream::connect(&socket).map_err(|e| RegisterError::NoServer {
        socket: socket.clone(),
        reason: match e.raw_os_error() {
            Some(libc::ENOENT) => "no such file".into(),
            Some(libc::ECONNREFUSED) => "connection refused".into(),
            _ => e.to_string(),
        },
    })?;
    hello(channel, kind, data_dir.to_path_buf())
}

/// Registers over an inherited, already connected channel (a supervised
/// worker: `WALSHM_WORKER_FD`). Takes ownership of `fd`: it is closed when
/// the registration ends or fails. The data directory comes from
/// `WALSHM_DATA_DIR`.
pub fn from_inherited_fd(fd: RawFd, kind: Kind) -> Result<Registration, RegisterError> {
    if !is_socket(fd) {
        return Err(RegisterError::Io(format!(
            "descriptor {fd} ({ENV_WORKER_FD}) is not an open socket"
        )));
    }
    // SAFETY: `fd` is an open socket (checked above) that the caller hands
    // over to us; nothing else closes it.
    let channel = unsafe { UnixStream::from_raw_fd(fd) };
    let data_dir = std::env::var_os(ENV_DATA_DIR)
        .map(PathBuf::from)
        .unwrap_or_default();
    hello(channel, kind, data_dir)
}

/// `from_inherited_fd` with the descriptor named by `WALSHM_WORKER_FD`.
pub fn from_environment(kind: Kind) -> Result<Registration, RegisterError> {
    let v = std::env::var(ENV_WORKER_FD).map_err(|_| {
        RegisterError::Io(format!(
            "{ENV_WORKER_FD} is not set (this process was not started by postmaster start --worker)"
        ))
    })?;
    let fd: RawFd = v
        .trim()
        .parse()
        .map_err(|_| RegisterError::Io(format!("{ENV_WORKER_FD}={v:?} is not a descriptor")))?;
    from_inherited_fd(fd, kind)
}

fn is_socket(fd: RawFd) -> bool {
    crate::sys::fd::is_socket(fd)
}

/// The hello exchange on a connected channel.
fn hello(
    channel: UnixStream,
    kind: Kind,
    data_dir: PathBuf,
) -> Result<Registration, RegisterError> {
    let io = |e: std::io::Error| RegisterError::Io(e.to_string());
    channel.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(io)?;
    channel.set_write_timeout(Some(REPLY_TIMEOUT)).map_err(io)?;
    check_server_uid(&channel)?;
    // A postmaster over one of its caps answers `Busy` at once and closes
    // without reading: then the hello fails (EPIPE) but the answer waits.
    let sent = send_request(&channel, Request::Hello(kind));
    let (reply, fd) = match recv_reply(&channel) {
        Ok(got) => got,
        Err(e) => return Err(sent.err().map_or(e, io)),
    };
    match reply.status {
        Status::Ok => {}
        Status::Full => return Err(RegisterError::Full { limit: reply.limit }),
        Status::Busy => return Err(RegisterError::Busy { limit: reply.limit }),
        Status::StartingUp => return Err(RegisterError::StartingUp),
        Status::ShuttingDown => return Err(RegisterError::ShuttingDown),
        Status::Refused => return Err(RegisterError::Refused),
        Status::Detached => return Err(RegisterError::BadReply("detach ack to a hello".into())),
    }
    let fd = fd.ok_or_else(|| RegisterError::BadReply("no segment descriptor".into()))?;
    if kind == Kind::Worker && reply.procno.is_none() {
        return Err(RegisterError::BadReply("no proc slot for a worker".into()));
    }
    let shm = Shmem::from_fd(fd, Some(reply.generation)).map_err(RegisterError::Segment)?;
    if let Some(p) = reply.procno {
        if p >= shm.layout().max_procs {
            return Err(RegisterError::BadReply(format!(
                "proc slot {p} out of range"
            )));
        }
    }
    // Liveness is the channel; no timeout on later waits for the server.
    channel.set_read_timeout(None).map_err(io)?;
    Ok(Registration {
        shm,
        procno: reply.procno,
        generation: reply.generation,
        data_dir,
        channel,
    })
}

/// Sends `req` with our pid. MSG_NOSIGNAL: a channel the postmaster
/// closed gives EPIPE, never a SIGPIPE that would kill a C program that
/// left the signal at its default.
fn send_request(channel: &UnixStream, req: Request) -> std::io::Result<()> {
    let bytes = req.encode(std::process::id() as i32);
    crate::sys::sock::send_all(channel.as_raw_fd(), &bytes)
}

/// Refuses a socket whose server runs as another user.
fn check_server_uid(channel: &UnixStream) -> Result<(), RegisterError> {
    let (uid, _) = peer_credentials(channel).map_err(|e| RegisterError::Io(e.to_string()))?;
    let me = crate::sys::euid();
    if uid != me {
        return Err(RegisterError::BadReply(format!(
            "the socket's server runs as uid {uid}, not as this user ({me})"
        )));
    }
    Ok(())
}

impl Registration {
    /// Leaves the server: sends Detach and waits (bounded) for the
    /// postmaster's acknowledgement, after which the slot is free. When
    /// the generation has already ended, the postmaster holds nothing for
    /// this registration any more and detaching succeeds at once.
    pub fn detach(self) -> Result<(), RegisterError> {
        // The postmaster sets `ended` before it closes the channels of an
        // abandoned generation, so a channel that fails after `ended` is
        // set was closed by it, not lost.
        if self.shm.has_ended() {
            return Ok(());
        }
        let io = |e: std::io::Error| RegisterError::Io(e.to_string());
        self.channel
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .map_err(io)?;
        let sent = send_request(&self.channel, Request::Detach);
        let answer = sent.map_err(io).and_then(|()| recv_reply(&self.channel));
        match answer {
            Ok((r, _)) if r.status == Status::Detached => Ok(()),
            Ok((r, _)) => Err(RegisterError::BadReply(format!(
                "answer {:?} to a detach",
                r.status
            ))),
            Err(_) if self.shm.has_ended() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Has the server abandoned this registration's generation?
    pub fn has_ended(&self) -> bool {
        self.shm.has_ended()
    }
}

/// The server's uid and pid (SO_PEERCRED) of a connected Unix socket.
pub fn peer_credentials(s: &UnixStream) -> std::io::Result<(u32, i32)> {
    crate::sys::sock::peer_credentials(s)
}

/// Sends `reply`, with `fd` attached (SCM_RIGHTS) when given, in one
/// message (the server side).
pub fn send_reply(
    s: &UnixStream,
    reply: &Reply,
    fd: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let bytes = reply.encode();
    let n = crate::sys::sock::send_with_fd(s.as_raw_fd(), &bytes, fd)?;
    if n as usize != bytes.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("short send of a reply ({n} of {} bytes)", bytes.len()),
        ));
    }
    Ok(())
}

/// Receives one reply and the descriptor attached to it, if any.
pub fn recv_reply(s: &UnixStream) -> Result<(Reply, Option<OwnedFd>), RegisterError> {
    let mut bytes = [0u8; REPLY_LEN];
    let (n, fd) = recv_with_fd(s, &mut bytes).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            RegisterError::Io(format!(
                "the server did not answer within {} s",
                REPLY_TIMEOUT.as_secs()
            ))
        }
        _ => RegisterError::Io(e.to_string()),
    })?;
    if n == 0 {
        return Err(RegisterError::BadReply(
            "the server closed the connection without answering".into(),
        ));
    }
    if n < REPLY_LEN {
        let mut rest = s;
        rest.read_exact(&mut bytes[n..])
            .map_err(|e| RegisterError::BadReply(format!("short reply: {e}")))?;
    }
    let reply = Reply::decode(&bytes).map_err(RegisterError::BadReply)?;
    Ok((reply, fd))
}

/// One recvmsg into `buf`, collecting a passed descriptor (close-on-exec).
fn recv_with_fd(s: &UnixStream, buf: &mut [u8]) -> std::io::Result<(usize, Option<OwnedFd>)> {
    crate::sys::sock::recv_with_fd(s.as_raw_fd(), buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use std::os::fd::AsFd;

    #[test]
    fn messages_round_trip_and_bad_ones_are_refused() {
        for req in [
            Request::Hello(Kind::Worker),
            Request::Hello(Kind::Observer),
            Request::Detach,
        ] {
            assert_eq!(Request::decode(&req.encode(42)).unwrap(), (req, 42));
        }
        let r = Reply {
            status: Status::Full,
            procno: None,
            limit: 2,
            generation: 9,
        };
        assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        let ok = Reply {
            status: Status::Ok,
            procno: Some(7),
            ..r
        };
        assert_eq!(Reply::decode(&ok.encode()).unwrap(), ok);
        let mut bad = Request::Detach.encode(1);
        bad[0] ^= 1;
        assert!(Request::decode(&bad).unwrap_err().contains("bad magic"));
        let mut v2 = Request::Detach.encode(1);
        v2[4] = 2;
        assert!(Request::decode(&v2).unwrap_err().contains("version 2"));
        let mut unknown = ok.encode();
        unknown[6] = 77;
        assert!(Reply::decode(&unknown)
            .unwrap_err()
            .contains("unknown status 77"));
    }

    #[test]
    fn a_passed_descriptor_maps_the_same_segment() {
        let shm = Shmem::create(&Settings::default(), 2, 5).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        // SAFETY: the creator's descriptor lives as long as `shm`.
        let fd = unsafe { BorrowedFd::borrow_raw(shm.raw_fd().unwrap()) };
        let reply = Reply {
            status: Status::Ok,
            procno: Some(shm.worker_procno(0)),
            limit: shm.max_workers(),
            generation: 5,
        };
        send_reply(&a, &reply, Some(fd.as_fd())).unwrap();
        let (got, fd) = recv_reply(&b).unwrap();
        assert_eq!(got, reply);
        let other = Shmem::from_fd(fd.expect("descriptor passed"), Some(5)).unwrap();
        assert!(!other.has_ended());
        shm.mark_ended();
        assert!(
            other.has_ended(),
            "the flag is seen through the other mapping"
        );
        assert_eq!(other.layout(), shm.layout());
    }

    #[test]
    fn no_server_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("walshm-reg-none-{}", std::process::id()));
        let e = connect(&dir, Kind::Worker).expect_err("no server");
        assert!(matches!(e, RegisterError::NoServer { .. }), "{e:?}");
        assert!(e.to_string().contains(SOCKET_NAME), "{e}");
    }
}
