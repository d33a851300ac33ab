//! Attached processes, as the postmaster keeps track of them: the
//! registration socket `DIR/.s.WALSHM.worker`, the worker proc slots, and
//! each attached process's liveness channel. The wire format and the
//! client side are in `shmem::register`; the supervision of the workers
//! the postmaster starts itself is in `supervised`.
//!
//! Protocol on the server side:
//! 1. Accept (non-blocking), check the peer's uid (SO_PEERCRED) against our
//!    effective uid; another user gets `Refused` and the connection closes.
//!    A supervised worker's channel is one end of a socketpair made before
//!    its fork, added here directly ([`Registry::add_supervised`]).
//! 2. Read the 16-byte hello (it may arrive in pieces; a channel that sends
//!    nothing for `HELLO_TIMEOUT` is dropped). A Worker gets a free slot
//!    only while the server runs normally (else `StartingUp` or
//!    `ShuttingDown`), or `Full`; an Observer gets the segment whenever one
//!    exists. The answer carries the memfd (SCM_RIGHTS).
//! 3. Keep the channel and poll it: Detach -> free the slot, ack, close;
//!    EOF, an error or garbage from a Worker without a Detach -> [`Event::Lost`]:
//!    the supervisor treats it as the crash of a shared-memory process.
//!    An Observer's channel closing means nothing.
//! 4. When a generation is abandoned (crash restart, shutdown) the
//!    supervisor sets the segment's `ended` flag and calls
//!    [`Registry::close_all`]: every channel closes and every slot is free
//!    for the next generation.
//!
//! Invariants: which worker slots are in use is known only here, in the
//! postmaster's own memory (never a lock in shared memory); a slot is in use
//! exactly while its channel is open in state Attached; the postmaster
//! never blocks on a channel (all non-blocking, replies are small enough to
//! fit a fresh socket buffer); a PID sent in a hello is only ever printed.

use crate::log;
use shmem::register::{self, Kind, Reply, Request, Status, REQUEST_LEN};
use shmem::Shmem;
use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long an accepted connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Who is at the other end of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A process that connected to the socket (its stated pid, unchecked).
    External { pid: i32 },
    /// Supervised worker number `id` (`--worker`).
    Supervised(usize),
}

/// Something the supervisor must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A worker got a slot.
    Attached { origin: Origin, procno: u32 },
    /// A registration ended with a Detach (slot freed, ack sent).
    Detached { origin: Origin },
    /// A worker's channel ended without a Detach: a crash.
    Lost { origin: Origin, why: String },
}

/// What the registry needs to know about the server, now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    StartingUp,
    ShuttingDown,
}

enum State {
    AwaitHello { deadline: Instant },
    Attached { kind: Kind, slot: Option<u32> },
}

struct Channel {
    stream: UnixStream,
    origin: Origin,
    state: State,
    buf: [u8; REQUEST_LEN],
    got: usize,
}

/// What one read from a channel gave.
enum Input {
    Nothing,
    Request(Request, i32),
    Closed(String),
    Garbage(String),
}

pub(crate) struct Registry {
    listener: Option<UnixListener>,
    path: PathBuf,
    euid: u32,
    /// Worker slot `i` in use (index into the segment's worker slots).
    slots: Vec<bool>,
    channels: Vec<Channel>,
}

impl Registry {
    /// Creates the registration socket (a stale one is replaced: we own the
    /// pid file). A path too long for a socket name leaves external attach
    /// unavailable (a warning), not the server.
    pub fn open(datadir: &Path, max_workers: u32) -> Registry {
        let path = register::socket_path(datadir);
        let listener = match bind_socket(&path) {
            Ok(l) => Some(l),
            Err(e) => {
                log(
                    "WARNING",
                    &format!("{e}; external processes cannot attach (supervised workers can)"),
                );
                None
            }
        };
        Registry {
            listener,
            path,
            // SAFETY: geteuid has no preconditions.
            euid: unsafe { libc::geteuid() },
            slots: vec![false; max_workers as usize],
            channels: Vec::new(),
        }
    }

    /// Descriptors the main loop polls for input.
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v: Vec<RawFd> = self.listener.iter().map(|l| l.as_raw_fd()).collect();
        v.extend(self.channels.iter().map(|c| c.stream.as_raw_fd()));
        v
    }

    /// The earliest hello deadline (the main loop's poll timeout).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.channels
            .iter()
            .filter_map(|c| match c.state {
                State::AwaitHello { deadline } => Some(deadline),
                State::Attached { .. } => None,
            })
            .min()
    }

    /// Takes the postmaster's end of a supervised worker's socketpair.
    pub fn add_supervised(&mut self, stream: UnixStream, id: usize) -> Result<(), String> {
        stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        self.channels
            .push(Channel::new(stream, Origin::Supervised(id)));
        Ok(())
    }

    /// Accepts new connections, reads every channel, answers what can be
    /// answered; returns what the supervisor must act on.
    pub fn service(&mut self, shm: Option<&Shmem>, phase: Phase) -> Vec<Event> {
        self.accept_new();
        let mut events = Vec::new();
        let now = Instant::now();
        let mut i = 0;
        while i < self.channels.len() {
            match self.service_channel(i, shm, phase, now) {
                Step::Keep(ev) => {
                    events.extend(ev);
                    i += 1;
                }
                Step::Drop(ev) => {
                    events.extend(ev);
                    let c = self.channels.swap_remove(i);
                    self.free_slot_of(&c);
                }
            }
        }
        events
    }

    /// Closes every channel and frees every slot: the generation they
    /// belonged to is over (the caller has set its `ended` flag).
    pub fn close_all(&mut self) {
        self.channels.clear();
        self.slots.iter_mut().for_each(|u| *u = false);
    }

    /// Resizes the slot table for a new segment (a restart keeps the
    /// setting, so this only guards against a mismatch).
    pub fn reset_slots(&mut self, max_workers: u32) {
        self.slots = vec![false; max_workers as usize];
    }

    fn accept_new(&mut self) {
        let Some(l) = &self.listener else { return };
        while let Ok((stream, _)) = l.accept() {
            match self.admit(&stream) {
                Ok(()) => self
                    .channels
                    .push(Channel::new(stream, Origin::External { pid: 0 })),
                Err(why) => log("LOG", &why),
            }
        }
    }

    /// The peer check of a new connection; a refused peer is told so.
    fn admit(&self, stream: &UnixStream) -> Result<(), String> {
        let (uid, pid) =
            register::peer_credentials(stream).map_err(|e| format!("registration: {e}"))?;
        if uid != self.euid {
            let _ = register::send_reply(stream, &self.reply(Status::Refused, None, 0), None);
            return Err(format!(
                "refused a registration from uid {uid} (PID {pid}): only uid {} may attach",
                self.euid
            ));
        }
        stream.set_nonblocking(true).map_err(|e| e.to_string())
    }

    fn reply(&self, status: Status, procno: Option<u32>, generation: u64) -> Reply {
        Reply {
            status,
            procno,
            limit: self.slots.len() as u32,
            generation,
        }
    }

    fn service_channel(
        &mut self,
        i: usize,
        shm: Option<&Shmem>,
        phase: Phase,
        now: Instant,
    ) -> Step {
        let input = self.channels[i].read_request();
        let attached = match self.channels[i].state {
            State::AwaitHello { deadline } if now > deadline => {
                if let Input::Nothing = input {
                    return self.await_hello_failed(i, "sent no hello in time");
                }
                None
            }
            State::AwaitHello { .. } => None,
            State::Attached { kind, .. } => Some(kind),
        };
        match (attached, input) {
            (_, Input::Nothing) => Step::Keep(None),
            (None, Input::Request(Request::Hello(kind), pid)) => {
                self.hello(i, kind, pid, shm, phase)
            }
            (None, Input::Request(Request::Detach, _)) => {
                self.await_hello_failed(i, "sent a detach before a hello")
            }
            (None, Input::Closed(why) | Input::Garbage(why)) => self.await_hello_failed(i, &why),
            (Some(_), Input::Request(Request::Detach, _)) => self.detach(i),
            (Some(kind), Input::Request(Request::Hello(_), _)) => {
                self.attached_channel_ended(i, kind, "sent a second hello".into())
            }
            (Some(kind), Input::Closed(why) | Input::Garbage(why)) => {
                self.attached_channel_ended(i, kind, why)
            }
        }
    }

    /// A channel that never registered goes away. A supervised worker's
    /// channel is its only one, so that is a lost worker (it had no slot,
    /// but it was told to attach and did not).
    fn await_hello_failed(&self, i: usize, why: &str) -> Step {
        let c = &self.channels[i];
        match c.origin {
            Origin::External { .. } => {
                log("LOG", &format!("registration connection dropped: {why}"));
                Step::Drop(None)
            }
            Origin::Supervised(_) => Step::Drop(Some(Event::Lost {
                origin: c.origin,
                why: format!("registration channel: {why}"),
            })),
        }
    }

    fn attached_channel_ended(&self, i: usize, kind: Kind, why: String) -> Step {
        let origin = self.channels[i].origin;
        match kind {
            Kind::Observer => Step::Drop(None),
            Kind::Worker => Step::Drop(Some(Event::Lost { origin, why })),
        }
    }

    fn hello(&mut self, i: usize, kind: Kind, pid: i32, shm: Option<&Shmem>, phase: Phase) -> Step {
        if let Origin::External { pid: p } = &mut self.channels[i].origin {
            *p = pid;
        }
        let Some(shm) = shm else {
            return self.refuse(i, Status::StartingUp, 0);
        };
        let generation = shm.header().generation;
        let status_now = match phase {
            Phase::Running => None,
            Phase::StartingUp => Some(Status::StartingUp),
            Phase::ShuttingDown => Some(Status::ShuttingDown),
        };
        let slot = match kind {
            Kind::Observer => None,
            Kind::Worker => {
                if let Some(s) = status_now {
                    return self.refuse(i, s, generation);
                }
                match self.slots.iter().position(|u| !*u) {
                    Some(s) => Some(s as u32),
                    None => return self.refuse(i, Status::Full, generation),
                }
            }
        };
        let procno = slot.map(|s| shm.worker_procno(s));
        if let Some(p) = procno {
            shm.reset_worker_slot(p);
        }
        let Some(raw) = shm.raw_fd() else {
            return self.refuse(i, Status::StartingUp, generation);
        };
        // SAFETY: the creator's descriptor stays open while `shm` lives,
        // which outlasts this call.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        let reply = self.reply(Status::Ok, procno, generation);
        let c = &mut self.channels[i];
        if let Err(e) = register::send_reply(&c.stream, &reply, Some(fd)) {
            log("LOG", &format!("could not answer a registration: {e}"));
            return self.await_hello_failed(i, "went away before its answer");
        }
        c.state = State::Attached { kind, slot };
        let origin = c.origin;
        if let Some(s) = slot {
            self.slots[s as usize] = true;
        }
        Step::Keep(procno.map(|procno| Event::Attached { origin, procno }))
    }

    /// Answers a hello with a refusal and drops the channel; a supervised
    /// worker refused has failed to attach.
    fn refuse(&self, i: usize, status: Status, generation: u64) -> Step {
        let c = &self.channels[i];
        let _ = register::send_reply(&c.stream, &self.reply(status, None, generation), None);
        match c.origin {
            Origin::External { .. } => Step::Drop(None),
            Origin::Supervised(_) => Step::Drop(Some(Event::Lost {
                origin: c.origin,
                why: format!("its registration was refused ({status:?})"),
            })),
        }
    }

    /// Detach: the slot is free again, the ack sent, the channel done.
    fn detach(&mut self, i: usize) -> Step {
        let freed = std::mem::replace(
            &mut self.channels[i].state,
            State::Attached {
                kind: Kind::Observer,
                slot: None,
            },
        );
        if let State::Attached { slot: Some(s), .. } = freed {
            self.slots[s as usize] = false;
        }
        let ack = self.reply(Status::Detached, None, 0);
        let c = &self.channels[i];
        let _ = register::send_reply(&c.stream, &ack, None);
        Step::Drop(Some(Event::Detached { origin: c.origin }))
    }

    fn free_slot_of(&mut self, c: &Channel) {
        if let State::Attached { slot: Some(s), .. } = c.state {
            self.slots[s as usize] = false;
        }
    }
}

/// What to do with a channel after servicing it.
enum Step {
    Keep(Option<Event>),
    Drop(Option<Event>),
}

impl Channel {
    fn new(stream: UnixStream, origin: Origin) -> Channel {
        Channel {
            stream,
            origin,
            state: State::AwaitHello {
                deadline: Instant::now() + HELLO_TIMEOUT,
            },
            buf: [0; REQUEST_LEN],
            got: 0,
        }
    }

    /// Reads what is there without blocking; a whole request once its 16
    /// bytes are in.
    fn read_request(&mut self) -> Input {
        loop {
            match (&self.stream).read(&mut self.buf[self.got..]) {
                Ok(0) => return Input::Closed("closed its channel".into()),
                Ok(n) => {
                    self.got += n;
                    if self.got < REQUEST_LEN {
                        continue;
                    }
                    self.got = 0;
                    return match Request::decode(&self.buf) {
                        Ok((r, pid)) => Input::Request(r, pid),
                        Err(e) => Input::Garbage(format!("sent an invalid message: {e}")),
                    };
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Input::Nothing,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Input::Closed(format!("channel error: {e}")),
            }
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if self.listener.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds the registration socket, mode 0600, non-blocking.
fn bind_socket(path: &Path) -> Result<UnixListener, String> {
    if path.exists() {
        std::fs::remove_file(path)
            .map_err(|e| format!("could not remove stale socket \"{}\": {e}", path.display()))?;
    }
    let l = UnixListener::bind(path)
        .map_err(|e| format!("could not create socket \"{}\": {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("could not set permissions of \"{}\": {e}", path.display()))?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(l)
}

impl Origin {
    /// The origin as log lines name it.
    pub fn describe(self, supervised_name: impl Fn(usize) -> String) -> String {
        match self {
            Origin::External { pid } if pid > 0 => format!("external worker (PID {pid})"),
            Origin::External { .. } => "external worker".into(),
            Origin::Supervised(id) => supervised_name(id),
        }
    }
}
