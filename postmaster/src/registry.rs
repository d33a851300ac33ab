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
//! 2. Read the 16-byte hello (it may arrive in pieces; a connection that
//!    sends nothing for `HELLO_TIMEOUT` is dropped; a supervised worker
//!    may take its time, it is our child and supervised as such). An
//!    external Worker gets a free slot only while the server runs normally
//!    (else `StartingUp` or `ShuttingDown`), or `Full`; an Observer gets
//!    the segment whenever one exists. The answer carries the memfd
//!    (SCM_RIGHTS).
//!
//! Slots: supervised worker `i` always gets worker slot `i` (reserved for
//! it, as PostgreSQL's background workers have theirs), also during a
//! shutdown (it is told to stop and will detach), so that external
//! workers can never crowd a supervised worker out into a crash-restart
//! loop; external workers share the slots after those.
//! 3. Keep the channel and poll it: Detach -> free the slot, ack, close;
//!    EOF, an error or garbage from a Worker without a Detach -> [`Event::Lost`]
//!    carrying its slot, which stays in use until the supervisor has had
//!    the dead process cleaned up after (`backend::abandoned`) or
//!    restarted the server, and for an external process whether it is
//!    known to have ended (its start time, read at its hello, no longer
//!    matches its pid: a process that closed its channel but still runs
//!    may still use its slot).
//!    An Observer's channel closing means nothing.
//! 4. When a generation is abandoned (crash restart, shutdown) the
//!    supervisor sets the segment's `ended` flag and calls
//!    [`Registry::close_all`]: every channel closes and every slot is free
//!    for the next generation.
//!
//! Bounds: external connections still waiting for their hello are capped,
//! and so are attached observers (workers are capped by their slots), at
//! [`MAX_PENDING`] and [`MAX_OBSERVERS`] or a quarter each of the
//! descriptors the process limit leaves after [`FD_RESERVE`], whichever is
//! lower; all external channels together (workers too) never take more
//! than what the limit leaves after the reserve. The limit is read at each
//! accept, so one lowered at run time counts. A connection over a cap is
//! answered `Busy` and closed, with one log line per
//! `listen::REPEAT_LOG_INTERVAL`; client logins keep the reserve. A failed
//! accept pauses the socket (`listen::AcceptPause`), never spins.
//!
//! A detach must come from the process that said hello on the channel (the
//! pid each request carries): a forked child shares its parent's channel,
//! and its detach would otherwise free the parent's slot. Such a detach is
//! answered `Refused` and logged; the registration stays.
//!
//! Invariants: which worker slots are in use is known only here, in the
//! postmaster's own memory (never a lock in shared memory); a slot is in use
//! exactly while its channel is open in state Attached; the postmaster
//! never blocks on a channel (all non-blocking, replies are small enough to
//! fit a fresh socket buffer); a PID (the peer's at connect time) is only
//! ever printed.

use crate::log;
use shmem::register::{self, Kind, Reply, Request, Status, REQUEST_LEN};
use shmem::Shmem;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a lost external worker may take to be seen ended (its
/// channel closes during its exit, a moment before it is a zombie).
const LOST_EXIT_WAIT: Duration = Duration::from_millis(500);
/// How long an accepted connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// Most external connections waiting for their hello at once.
pub(crate) const MAX_PENDING: usize = 64;
/// Most observers attached at once.
pub(crate) const MAX_OBSERVERS: usize = 64;
/// Descriptors kept for everything else the postmaster opens (client
/// logins, its files, pipes, worker channels).
const FD_RESERVE: u64 = 32;

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
    /// A worker's channel ended without a Detach. `slot`: the worker
    /// slot it held, kept in use until [`Registry::free_worker_slot`]
    /// (the supervisor cleans up after the process, or restarts the
    /// server); `pid`: the process; `dead`: for an external process,
    /// whether it is known to have ended (its pidfd), None for a
    /// supervised one (the supervisor reaps it).
    Lost {
        origin: Origin,
        why: String,
        slot: Option<u32>,
        pid: i32,
        dead: Option<bool>,
    },
}

/// What the registry needs to know about the server, now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    StartingUp,
    ShuttingDown,
}

enum State {
    /// No hello yet; external connections must send it by `deadline`.
    AwaitHello { deadline: Option<Instant> },
    Attached {
        kind: Kind,
        slot: Option<u32>,
        /// The pid the hello carried: only it may detach.
        pid: i32,
    },
}

struct Channel {
    stream: UnixStream,
    origin: Origin,
    state: State,
    buf: [u8; REQUEST_LEN],
    got: usize,
    /// An attached external worker's process (the start time of its peer
    /// pid, `sys::live_process_identity`): whether it ended when its
    /// channel is lost. Not a pidfd: a descriptor per worker would halve
    /// how many the descriptor limit admits.
    identity: Option<u64>,
}

/// What one read from a channel gave.
enum Input {
    Nothing,
    /// A request and the pid it carries.
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
    /// Slots `0..reserved` belong to the supervised workers.
    reserved: usize,
    channels: Vec<Channel>,
    accept_pause: crate::listen::AcceptPause,
    cap_said: crate::listen::RateLimitedLog,
}

impl Registry {
    /// Creates the registration socket (a stale one is replaced: we own the
    /// pid file). A path too long for a socket name leaves external attach
    /// unavailable (a warning), not the server.
    /// `reserved`: the number of supervised workers (each has its slot).
    pub fn open(datadir: &Path, max_workers: u32, reserved: usize) -> Registry {
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
            euid: shmem::sys::euid(),
            slots: vec![false; max_workers as usize],
            reserved,
            channels: Vec::new(),
            accept_pause: Default::default(),
            cap_said: Default::default(),
        }
    }

    /// Descriptors the main loop polls for input.
    pub fn fds(&self) -> Vec<RawFd> {
        let paused = self.accept_pause.resume_at().is_some();
        let listener = self.listener.iter().filter(|_| !paused);
        let mut v: Vec<RawFd> = listener.map(|l| l.as_raw_fd()).collect();
        v.extend(self.channels.iter().map(|c| c.stream.as_raw_fd()));
        v
    }

    /// The earliest hello deadline or end of an accept pause (the main
    /// loop's poll timeout).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.channels
            .iter()
            .filter_map(|c| match c.state {
                State::AwaitHello { deadline } => deadline,
                State::Attached { .. } => None,
            })
            .chain(self.accept_pause.resume_at())
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
        let new = self
            .accept_pause
            .accept_waiting("the registration socket", || l.accept());
        for (stream, _) in new {
            self.take_connection(stream);
        }
    }

    /// A new external connection: admitted, or refused (another user, or
    /// the pending cap reached).
    fn take_connection(&mut self, stream: UnixStream) {
        let pid = match self.admit(&stream) {
            Ok(pid) => pid,
            Err(why) => return log("LOG", &why),
        };
        let caps = caps();
        let external = self.channels.iter().filter(|c| c.is_external()).count();
        if external >= caps.total {
            self.send_busy(&stream, caps.total);
            self.log_cap("registration channels for the descriptor limit", caps.total);
            return;
        }
        if self.pending() >= caps.pending {
            self.send_busy(&stream, caps.pending);
            self.log_cap("registrations waiting for their hello", caps.pending);
            return;
        }
        self.channels
            .push(Channel::new(stream, Origin::External { pid }));
    }

    /// External connections that have not said hello yet.
    fn pending(&self) -> usize {
        let waiting = |c: &&Channel| matches!(c.state, State::AwaitHello { .. });
        let external = |c: &&Channel| c.is_external();
        self.channels
            .iter()
            .filter(waiting)
            .filter(external)
            .count()
    }

    /// Attached observers.
    fn observers(&self) -> usize {
        let observer = |c: &&Channel| {
            matches!(
                c.state,
                State::Attached {
                    kind: Kind::Observer,
                    ..
                }
            )
        };
        self.channels.iter().filter(observer).count()
    }

    /// Answers `Busy` (the connection is then dropped by the caller).
    fn send_busy(&self, stream: &UnixStream, cap: usize) {
        let reply = Reply {
            limit: cap as u32,
            ..self.reply(Status::Busy, None, 0)
        };
        let _ = register::send_reply(stream, &reply, None);
    }

    /// Logs that `what` reached `cap` (rate-limited).
    fn log_cap(&mut self, what: &str, cap: usize) {
        self.cap_said.log("LOG", || {
            format!("too many {what} (limit {cap}); refusing new registrations until some end")
        });
    }

    /// The peer check of a new connection; a refused peer is told so.
    /// Returns the peer's pid.
    fn admit(&self, stream: &UnixStream) -> Result<i32, String> {
        let (uid, pid) =
            register::peer_credentials(stream).map_err(|e| format!("registration: {e}"))?;
        if uid != self.euid {
            let _ = register::send_reply(stream, &self.reply(Status::Refused, None, 0), None);
            return Err(format!(
                "refused a registration from uid {uid} (PID {pid}): only uid {} may attach",
                self.euid
            ));
        }
        stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(pid)
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
            State::AwaitHello {
                deadline: Some(deadline),
            } if now > deadline => {
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
            (Some(_), Input::Request(Request::Detach, pid)) => self.detach(i, pid),
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
            Origin::Supervised(_) => {
                lost_before_attaching(c.origin, format!("registration channel: {why}"))
            }
        }
    }

    /// An attached worker's channel ended without a Detach: its slot is
    /// taken out of the channel (so dropping the channel keeps it in use)
    /// and handed to the supervisor with the event; an external process
    /// is given up to `LOST_EXIT_WAIT` to be seen ended.
    fn attached_channel_ended(&mut self, i: usize, kind: Kind, why: String) -> Step {
        let c = &mut self.channels[i];
        let origin = c.origin;
        if kind == Kind::Observer {
            return Step::Drop(None);
        }
        let (slot, stated_pid) = match &mut c.state {
            State::Attached { slot, pid, .. } => (slot.take(), *pid),
            State::AwaitHello { .. } => (None, 0),
        };
        let (pid, dead) = match origin {
            Origin::External { pid } => (pid, Some(ended(pid, c.identity))),
            Origin::Supervised(_) => (stated_pid, None),
        };
        Step::Drop(Some(Event::Lost {
            origin,
            why,
            slot,
            pid,
            dead,
        }))
    }

    /// A worker slot kept by a lost registration is free again (its
    /// process was cleaned up after).
    pub fn free_worker_slot(&mut self, slot: u32) {
        if let Some(u) = self.slots.get_mut(slot as usize) {
            *u = false;
        }
    }

    /// Whether worker slot `slot` is in use (attached, or kept for a
    /// clean-up).
    pub fn slot_in_use(&self, slot: u32) -> bool {
        self.slots.get(slot as usize).copied().unwrap_or(false)
    }

    fn hello(&mut self, i: usize, kind: Kind, pid: i32, shm: Option<&Shmem>, phase: Phase) -> Step {
        let Some(shm) = shm else {
            // Between generations (crash wait) or after the last one.
            let status = match phase {
                Phase::ShuttingDown => Status::ShuttingDown,
                Phase::Running | Phase::StartingUp => Status::StartingUp,
            };
            return self.refuse(i, status, 0);
        };
        let generation = shm.header().generation;
        let status_now = match phase {
            Phase::Running => None,
            Phase::StartingUp => Some(Status::StartingUp),
            Phase::ShuttingDown => Some(Status::ShuttingDown),
        };
        let slot = match (kind, self.channels[i].origin) {
            (Kind::Observer, Origin::External { .. }) => {
                let cap = caps().observers;
                if self.observers() >= cap {
                    self.send_busy(&self.channels[i].stream, cap);
                    self.log_cap("observers attached", cap);
                    return Step::Drop(None);
                }
                None
            }
            (Kind::Observer, Origin::Supervised(_)) => None,
            (Kind::Worker, Origin::Supervised(id)) => match self.slots.get(id) {
                Some(false) => Some(id as u32),
                _ => return self.refuse(i, Status::Full, generation),
            },
            (Kind::Worker, Origin::External { .. }) => {
                if let Some(s) = status_now {
                    return self.refuse(i, s, generation);
                }
                let free = self.slots.iter().skip(self.reserved).position(|u| !*u);
                match free {
                    Some(s) => Some((self.reserved + s) as u32),
                    None => return self.refuse(i, Status::Full, generation),
                }
            }
        };
        let procno = slot.map(|s| shm.worker_procno(s));
        if let Some(p) = procno {
            shm.reset_worker_slot(p);
        }
        let Some(fd) = shm.fd() else {
            return self.refuse(i, Status::StartingUp, generation);
        };
        let reply = self.reply(Status::Ok, procno, generation);
        let c = &mut self.channels[i];
        if let Err(e) = register::send_reply(&c.stream, &reply, Some(fd)) {
            log("LOG", &format!("could not answer a registration: {e}"));
            return self.await_hello_failed(i, "went away before its answer");
        }
        c.state = State::Attached { kind, slot, pid };
        if let (Kind::Worker, Origin::External { pid: peer }) = (kind, c.origin) {
            // Tells, if its channel is lost, whether the process ended.
            c.identity = shmem::sys::live_process_identity(peer);
        }
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
            Origin::Supervised(_) => lost_before_attaching(
                c.origin,
                format!("its registration was refused ({status:?})"),
            ),
        }
    }

    /// Detach: the slot is free again, the ack sent, the channel done. A
    /// detach from another pid than the hello's (a forked child on its
    /// parent's channel) is refused and changes nothing.
    fn detach(&mut self, i: usize, pid: i32) -> Step {
        if let State::Attached { pid: owner, .. } = self.channels[i].state {
            if pid != owner {
                return self.foreign_detach(i, pid, owner);
            }
        }
        let freed = std::mem::replace(
            &mut self.channels[i].state,
            State::Attached {
                kind: Kind::Observer,
                slot: None,
                pid,
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

    fn foreign_detach(&self, i: usize, pid: i32, owner: i32) -> Step {
        let c = &self.channels[i];
        let _ = register::send_reply(&c.stream, &self.reply(Status::Refused, None, 0), None);
        log(
            "LOG",
            &format!("refused a detach from PID {pid} on the registration of PID {owner} (a forked child?); the registration stays"),
        );
        Step::Keep(None)
    }

    fn free_slot_of(&mut self, c: &Channel) {
        if let State::Attached { slot: Some(s), .. } = c.state {
            self.slots[s as usize] = false;
        }
    }
}

/// Whether the external process `pid`, which was `identity` when it
/// attached, has ended, giving it up to `LOST_EXIT_WAIT` (its channel
/// closes during its exit, a moment before it is a zombie).
fn ended(pid: i32, identity: Option<u64>) -> bool {
    let Some(was) = identity else {
        return false;
    };
    let deadline = Instant::now() + LOST_EXIT_WAIT;
    loop {
        if shmem::sys::live_process_identity(pid) != Some(was) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What to do with a channel after servicing it.
enum Step {
    Keep(Option<Event>),
    Drop(Option<Event>),
}

/// A supervised worker's channel dropped before it attached: the worker is
/// lost, with no slot to hand over and no PID it stated.
fn lost_before_attaching(origin: Origin, why: String) -> Step {
    Step::Drop(Some(Event::Lost {
        origin,
        why,
        slot: None,
        pid: 0,
        dead: None,
    }))
}

impl Channel {
    fn is_external(&self) -> bool {
        matches!(self.origin, Origin::External { .. })
    }

    fn new(stream: UnixStream, origin: Origin) -> Channel {
        let deadline = match origin {
            Origin::External { .. } => Some(Instant::now() + HELLO_TIMEOUT),
            Origin::Supervised(_) => None,
        };
        Channel {
            stream,
            origin,
            state: State::AwaitHello { deadline },
            buf: [0; REQUEST_LEN],
            got: 0,
            identity: None,
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

/// The caps of the module header, for the descriptor limit now.
struct Caps {
    pending: usize,
    observers: usize,
    /// All external channels.
    total: usize,
}

fn caps() -> Caps {
    let nofile = shmem::sys::nofile_limit().unwrap_or(1024);
    let left = nofile.saturating_sub(FD_RESERVE).max(1);
    let quarter = (left / 4).max(1) as usize;
    Caps {
        pending: quarter.min(MAX_PENDING),
        observers: quarter.min(MAX_OBSERVERS),
        total: usize::try_from(left).unwrap_or(usize::MAX),
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

#[cfg(test)]
mod tests {
    use super::*;
    use shmem::register::RegisterError;
    use shmem::Settings;

    /// A registry on a fresh segment in a temporary directory.
    struct Fixture {
        dir: PathBuf,
        shm: Shmem,
        reg: Registry,
    }

    impl Fixture {
        fn new(tag: &str, max_workers: u32, reserved: usize) -> Fixture {
            let dir =
                std::env::temp_dir().join(format!("walshm-registry-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let settings = Settings {
                max_worker_processes: max_workers,
                ..Settings::default()
            };
            let shm = Shmem::create(&settings, 1, 4).unwrap();
            let reg = Registry::open(&dir, max_workers, reserved);
            Fixture { dir, shm, reg }
        }

        /// Runs `client` in a thread while servicing the registry in
        /// `phase`; returns what the client got and the events.
        fn exchange<T: Send + 'static>(
            &mut self,
            phase: Phase,
            client: impl FnOnce(PathBuf) -> T + Send + 'static,
        ) -> (T, Vec<Event>) {
            let dir = self.dir.clone();
            let t = std::thread::spawn(move || client(dir));
            let mut events = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !t.is_finished() && Instant::now() < deadline {
                events.extend(self.reg.service(Some(&self.shm), phase));
                std::thread::sleep(Duration::from_millis(1));
            }
            let got = t.join().unwrap();
            events.extend(self.reg.service(Some(&self.shm), phase));
            (got, events)
        }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn a_detach_from_another_pid_is_refused_and_the_slot_stays() {
        use std::io::Write;
        let mut f = Fixture::new("foreign", 2, 0);
        let (got, events) = f.exchange(Phase::Running, |d| {
            let r = register::connect(&d, Kind::Worker).map_err(|e| e.to_string())?;
            let me = std::process::id() as i32;
            (&r.channel)
                .write_all(&Request::Detach.encode(me + 1))
                .map_err(|e| e.to_string())?;
            let (foreign, _) = register::recv_reply(&r.channel).map_err(|e| e.to_string())?;
            r.detach().map_err(|e| e.to_string())?;
            Ok::<_, String>(foreign.status)
        });
        assert_eq!(got, Ok(Status::Refused));
        let detached = events
            .iter()
            .filter(|e| matches!(e, Event::Detached { .. }))
            .count();
        assert_eq!(detached, 1, "only the owner's detach counts: {events:?}");
        assert!(f.reg.slots.iter().all(|u| !*u), "the slot is free after it");
    }

    #[test]
    fn workers_get_slots_only_while_running_observers_always() {
        let mut f = Fixture::new("phases", 2, 0);
        for (phase, want) in [
            (Phase::StartingUp, "StartingUp"),
            (Phase::ShuttingDown, "ShuttingDown"),
        ] {
            let (got, events) = f.exchange(phase, |d| {
                register::connect(&d, Kind::Worker)
                    .err()
                    .map(|e| format!("{e:?}"))
            });
            assert!(got.unwrap_or_default().starts_with(want), "{phase:?}");
            assert!(events.is_empty(), "{events:?}");
        }
        let (got, _) = f.exchange(Phase::StartingUp, |d| {
            let r = register::connect(&d, Kind::Observer).map_err(|e| e.to_string())?;
            Ok::<_, String>((r.procno, r.generation))
        });
        assert_eq!(got, Ok((None, 4)));
        // Attach, then detach: one Attached, one Detached, slot free again.
        let (got, events) = f.exchange(Phase::Running, |d| {
            let r = register::connect(&d, Kind::Worker).map_err(|e| e.to_string())?;
            let procno = r.procno;
            r.detach().map_err(|e| e.to_string())?;
            Ok::<_, String>(procno)
        });
        let first = f.shm.worker_procno(0);
        assert_eq!(got, Ok(Some(first)));
        let origin = Origin::External {
            pid: std::process::id() as i32,
        };
        assert_eq!(
            events,
            vec![
                Event::Attached {
                    origin,
                    procno: first
                },
                Event::Detached { origin }
            ]
        );
        assert!(f.reg.slots.iter().all(|u| !*u), "slot freed");
    }

    #[test]
    fn a_worker_channel_closed_without_detach_is_lost_and_full_is_refused() {
        let mut f = Fixture::new("lost", 1, 0);
        let (held, _) = f.exchange(Phase::Running, |d| register::connect(&d, Kind::Worker));
        let held = held.unwrap();
        let (full, events) = f.exchange(Phase::Running, |d| register::connect(&d, Kind::Worker));
        assert!(
            matches!(full, Err(RegisterError::Full { limit: 1 })),
            "{full:?}"
        );
        assert!(events.is_empty());
        drop(held);
        let (_, events) = f.exchange(Phase::Running, |_| ());
        assert!(
            matches!(
                events.as_slice(),
                [Event::Lost {
                    origin: Origin::External { .. },
                    slot: Some(0),
                    dead: Some(false),
                    ..
                }]
            ),
            "the slot goes with the event; this process is alive: {events:?}"
        );
        assert!(f.reg.slot_in_use(0), "kept until cleaned up after");
        f.reg.free_worker_slot(0);
        assert!(f.reg.slots.iter().all(|u| !*u), "slot freed");
        // close_all frees slots and closes channels (the client sees EOF).
        let (held, _) = f.exchange(Phase::Running, |d| register::connect(&d, Kind::Worker));
        let held = held.unwrap();
        f.reg.close_all();
        let mut b = [0u8; 1];
        assert_eq!((&held.channel).read(&mut b).unwrap(), 0, "channel closed");
        assert!(f.reg.slots.iter().all(|u| !*u));
    }

    #[test]
    fn reserved_slots_are_kept_for_supervised_workers() {
        let mut f = Fixture::new("reserved", 2, 1);
        let (a, _) = f.exchange(Phase::Running, |d| register::connect(&d, Kind::Worker));
        let a = a.unwrap();
        assert_eq!(a.procno, Some(f.shm.worker_procno(1)));
        let (b, _) = f.exchange(Phase::Running, |d| register::connect(&d, Kind::Worker));
        assert!(matches!(b, Err(RegisterError::Full { .. })), "{b:?}");
        // The supervised worker's own slot, even while shutting down.
        let (ours, theirs) = UnixStream::pair().unwrap();
        f.reg.add_supervised(ours, 0).unwrap();
        let fd = std::os::fd::IntoRawFd::into_raw_fd(theirs);
        let (got, events) = f.exchange(Phase::ShuttingDown, move |_| {
            register::from_inherited_fd(fd, Kind::Worker).map(|r| r.procno)
        });
        assert_eq!(got.unwrap(), Some(f.shm.worker_procno(0)));
        assert!(
            matches!(
                events.as_slice(),
                [
                    Event::Attached {
                        origin: Origin::Supervised(0),
                        ..
                    },
                    ..
                ]
            ),
            "{events:?}"
        );
        drop(a);
    }
}
