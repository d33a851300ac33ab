//! `postmaster start`: shared memory, children, supervision, crash restart.
//!
//! State machine (PostgreSQL's postmaster.c PMState, reduced):
//!
//! ```text
//!   Startup --startup exits 0--> Run --SIGTERM--> StopBackends --all gone-->
//!       StopCheckpointer (shutdown checkpoint) --gone--> StopWalwriter --gone--> exit 0
//!      |                          |
//!      +-- any child crashes -----+--> CrashWait --all children gone--> (new segment, generation+1) Startup
//! ```
//!
//! Rules: signal handlers only set flags and write a byte to a self-pipe;
//! the main loop polls the pipe and acts. Everything a child needs (the
//! segment, its settings) exists before `fork`. A child that exits with a
//! signal or an unexpected status is a crash: every other child gets SIGQUIT
//! (SIGKILL after `CRASH_KILL_AFTER`), shared memory is removed and created
//! anew with the next generation number, and the startup process runs
//! before backends start again. The postmaster itself never takes a lock in
//! shared memory; it only reads counters.
//!
//! Admission of clients (what a hostile client can make the postmaster do):
//! - a connection child has `authentication_timeout` for its whole start-up
//!   and authentication exchange, then exits with EXIT_FATAL (not a crash);
//!   rejecter children run under the same deadline;
//! - authenticated sessions (connection children holding a backend proc
//!   slot: `Shmem::sessions`, an atomic read) count against
//!   `max_connections`; the others are counted apart and capped at
//!   [`unauthenticated_cap`], so clients that never authenticate cannot make
//!   a normal login fail with 53300;
//! - a refusal forks a rejecter only while fewer than [`MAX_REJECTERS`]
//!   live; beyond that the postmaster writes the pre-encoded FATAL itself
//!   (one non-blocking send) and closes the socket: refusals cost no
//!   unbounded forks;
//! - right after `fork` every child closes the descriptors it does not own
//!   (listening sockets, self-pipe, the other clients of the same accept
//!   batch), keeping only 0, 1, 2 and its own client socket.

use crate::cli::StartOptions;
use crate::datadir::{self, PidFile};
use backend::control::ControlFile;
use backend::process::{become_child, EXIT_FATAL, EXIT_QUIT};
use backend::workload::Workload;
use shmem::segment::{segment_name_for, unlink_segment, AuxProc};
use shmem::sync::Ordering;
use shmem::{Settings, Shmem};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32};
use std::time::{Duration, Instant};

const CRASH_KILL_AFTER: Duration = Duration::from_secs(5);
const SHUTDOWN_KILL_AFTER: Duration = Duration::from_secs(60);
/// Failed startup attempts after a crash before giving up.
const MAX_STARTUP_FAILURES: u32 = 3;
/// Live rejecter children at most; beyond, the postmaster refuses itself.
const MAX_REJECTERS: usize = 8;

/// Connection children that have not authenticated yet, at most.
fn unauthenticated_cap(max_connections: u32) -> usize {
    2 * max_connections as usize + 16
}

/// A report line on stdout (errors ignored, as for `log`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

static GOT_SIGTERM: AtomicBool = AtomicBool::new(false);
static GOT_SIGQUIT: AtomicBool = AtomicBool::new(false);
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    match sig {
        libc::SIGTERM | libc::SIGINT => GOT_SIGTERM.store(true, Ordering::Relaxed),
        libc::SIGQUIT => GOT_SIGQUIT.store(true, Ordering::Relaxed),
        _ => {}
    }
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = 1u8;
        // SAFETY: write(2) is async-signal-safe; `b` lives for the call.
        unsafe { libc::write(fd, &b as *const u8 as *const libc::c_void, 1) };
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Startup,
    Walwriter,
    Checkpointer,
    /// Worker backend number `i` (also its proc number).
    Backend(u32),
    /// A client connection's backend.
    Connection,
    /// A short-lived child that sends a client a FATAL error and exits.
    Rejecter,
}

impl Kind {
    fn describe(self) -> String {
        match self {
            Kind::Startup => "startup process".into(),
            Kind::Walwriter => "walwriter".into(),
            Kind::Checkpointer => "checkpointer".into(),
            Kind::Backend(i) => format!("backend {i}"),
            Kind::Connection => "connection backend".into(),
            Kind::Rejecter => "connection rejecter".into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Startup,
    Run,
    StopBackends,
    StopCheckpointer,
    StopWalwriter,
    CrashWait,
}

struct Child {
    pid: i32,
    kind: Kind,
}

/// Counters of one worker, summed over generations.
#[derive(Clone, Copy, Default)]
struct WorkerTotals {
    records: u64,
    bytes: u64,
    transactions: u64,
    lock_acquires: u64,
    snapshot_violations: u64,
    sync_commits: u64,
}

struct Postmaster {
    datadir: PathBuf,
    settings: Settings,
    control: ControlFile,
    workers: u32,
    workload: Option<Workload>,
    ack: bool,
    /// Passed to the first startup process only (an operator's decision
    /// about the damage found then, not about a later crash's).
    discard_damaged_wal: bool,
    segment: String,
    shm: Option<Shmem>,
    generation: u64,
    children: Vec<Child>,
    state: State,
    shutting_down: bool,
    crash_deadline: Option<Instant>,
    startup_failures: u32,
    crashes: u32,
    totals: Vec<WorkerTotals>,
    lwlock_mismatch: Option<String>,
    wal_syncs: u64,
    exit_code_override: Option<i32>,
    listeners: Option<crate::listen::Listeners>,
    wake_rd: i32,
    started: Instant,
    run_started: Option<Instant>,
}

/// A log line on stderr. Output errors (a closed pipe) are ignored: the
/// postmaster must keep supervising whatever happens to its terminal.
fn log(level: &str, msg: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "postmaster[{}] {level}:  {msg}",
        std::process::id()
    );
}

/// Runs the server until shutdown; returns the exit code.
pub fn start(opts: StartOptions) -> Result<i32, String> {
    let datadir = datadir::check_datadir(&opts.datadir)?;
    let mut settings = datadir::load_settings(&datadir, &opts.sets)?;
    // Before any fork: the environment variable is gone by then.
    if let Some(v) = crate::password::verifier_from_inputs(opts.pwfile.as_deref())? {
        settings.set("password", &v).map_err(|e| e.to_string())?;
    }
    if opts.ack && !settings.synchronous_commit {
        return Err("--ack promises that each acknowledged commit is durable; it needs synchronous_commit = on".into());
    }
    let control = ControlFile::read(&datadir).map_err(|e| e.to_string())?;
    let segment = segment_name_for(&datadir);
    let (_pidfile, _stale) = PidFile::create(&datadir, &segment)?;
    // We own the directory now: any segment under its name is stale.
    if unlink_segment(&segment).map_err(|e| e.to_string())? {
        log(
            "LOG",
            &format!("removed stale shared memory segment \"{segment}\""),
        );
    }
    let wake_rd = install_signal_handlers()?;
    let mut pm = Postmaster {
        datadir,
        settings,
        control,
        workers: opts.workers,
        workload: opts.workload,
        ack: opts.ack,
        discard_damaged_wal: opts.discard_damaged_wal,
        segment,
        shm: None,
        generation: 0,
        children: Vec::new(),
        state: State::Startup,
        shutting_down: false,
        crash_deadline: None,
        startup_failures: 0,
        crashes: 0,
        totals: vec![WorkerTotals::default(); opts.workers as usize],
        lwlock_mismatch: None,
        wal_syncs: 0,
        exit_code_override: None,
        listeners: None,
        wake_rd,
        started: Instant::now(),
        run_started: None,
    };
    let code = pm.run();
    pm.release_segment(false);
    Ok(code)
}

fn install_signal_handlers() -> Result<i32, String> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 returns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(format!(
            "could not create self-pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    WAKE_FD.store(fds[1], Ordering::Relaxed);
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGQUIT, libc::SIGCHLD] {
        backend::process::set_handler(sig, on_signal as *const () as libc::sighandler_t);
    }
    backend::process::set_handler(libc::SIGPIPE, libc::SIG_IGN);
    Ok(fds[0])
}

impl Postmaster {
    fn run(&mut self) -> i32 {
        log(
            "LOG",
            &format!(
                "starting walshm: data directory \"{}\", {} worker(s){}",
                self.datadir.display(),
                self.workers,
                self.workload
                    .map(|w| format!(" running {w}"))
                    .unwrap_or_default()
            ),
        );
        if let Err(e) = self.create_segment() {
            log("FATAL", &e);
            return 1;
        }
        match crate::listen::Listeners::open(&self.datadir, &self.settings) {
            Ok(l) => {
                log(
                    "LOG",
                    &format!(
                        "listening on Unix socket \"{}\"{}",
                        l.unix_path.display(),
                        if l.tcp.is_some() {
                            format!(" and on 127.0.0.1 port {}", self.settings.port)
                        } else {
                            String::new()
                        }
                    ),
                );
                self.listeners = Some(l);
            }
            // Without an explicit socket setting, a data directory whose
            // path is too long for a socket name must still run workloads.
            Err(e)
                if self.settings.unix_socket_directories.as_str().is_empty()
                    && self.settings.listen_addresses.as_str().is_empty() =>
            {
                log(
                    "WARNING",
                    &format!("{e}; clients cannot connect (set unix_socket_directories)"),
                );
            }
            Err(e) => {
                log("FATAL", &e);
                return 1;
            }
        }
        self.fork_child(Kind::Startup);
        loop {
            self.wait_for_event(Duration::from_millis(500));
            self.accept_connections();
            if GOT_SIGQUIT.swap(false, Ordering::Relaxed) {
                log("LOG", "received immediate shutdown request");
                self.shutting_down = true;
                self.signal_all(libc::SIGQUIT);
                self.enter_crash_wait();
            }
            if GOT_SIGTERM.swap(false, Ordering::Relaxed) && !self.shutting_down {
                log("LOG", "received fast shutdown request");
                self.begin_fast_shutdown();
            }
            self.reap_children();
            if let Some(code) = self.advance_state() {
                return code;
            }
        }
    }

    fn create_segment(&mut self) -> Result<(), String> {
        self.generation += 1;
        // Workers have fixed slots; client connections share the rest.
        let max_backends = self.settings.max_connections + self.workers;
        let shm = Shmem::create(&self.segment, &self.settings, max_backends, self.generation)
            .map_err(|e| e.to_string())?;
        // SAFETY: the segment was just created and no other process is
        // attached yet.
        unsafe {
            shm.set_wal_facts(shmem::xlogctl::WalFacts {
                system_identifier: self.control.system_identifier,
                seg_size: self.control.seg_size,
                timeline: self.control.timeline,
                n_buffers: shm.layout().n_buffers,
            })
        };
        shm.reserve_fixed_procs(self.workers);
        self.shm = Some(shm);
        Ok(())
    }

    /// Adds this generation's counters to the totals, then removes the
    /// segment. `clean`: the generation ended in a fast shutdown (not a
    /// crash), so the lwlock workload's invariant must hold exactly.
    fn release_segment(&mut self, clean: bool) {
        if let Some(shm) = self.shm.take() {
            for (i, t) in self.totals.iter_mut().enumerate() {
                let c = &shm.procs()[i].counters;
                t.records += c.records.load(Ordering::Relaxed);
                t.bytes += c.bytes.load(Ordering::Relaxed);
                t.transactions += c.transactions.load(Ordering::Relaxed);
                t.lock_acquires += c.lock_acquires.load(Ordering::Relaxed);
                t.snapshot_violations += c.snapshot_violations.load(Ordering::Relaxed);
                t.sync_commits += c.sync_commits.load(Ordering::Relaxed);
            }
            self.wal_syncs += shm.xlog().write.syncs.load(Ordering::Relaxed);
            if self.workload == Some(Workload::Lwlock) {
                if clean {
                    self.check_lwlock_area(&shm);
                } else {
                    // Torn reads would still prove a broken lock; the
                    // counts cannot be compared after a SIGKILL.
                    let torn = shm.lock_test_area().torn_reads.load(Ordering::Relaxed);
                    say!(
                        "lwlock crash generation {}: torn reads {torn}; count check skipped (a killed holder may have updated the data without counting it)",
                        self.generation
                    );
                    if torn > 0 {
                        self.lwlock_mismatch = Some(format!(
                            "{torn} torn reads in generation {}",
                            self.generation
                        ));
                    }
                }
            }
            drop(shm);
            if let Err(e) = unlink_segment(&self.segment) {
                log("WARNING", &e.to_string());
            }
        }
    }

    /// The `lwlock` workload's invariant, per generation.
    fn check_lwlock_area(&mut self, shm: &Shmem) {
        let area = shm.lock_test_area();
        let counter = area.counter_value();
        let torn = area.torn_reads.load(Ordering::Relaxed);
        let exclusive: u64 = (0..self.workers as usize)
            .map(|i| {
                shm.procs()[i]
                    .counters
                    .lock_acquires
                    .load(Ordering::Relaxed)
            })
            .sum();
        let line = format!(
            "lwlock check (generation {}): protected counter {counter}, exclusive acquisitions {exclusive}, torn reads {torn}",
            self.generation
        );
        if counter == exclusive && torn == 0 {
            say!("{line}: OK");
        } else {
            say!("{line}: MISMATCH");
            self.lwlock_mismatch = Some(line);
        }
    }

    fn wait_for_event(&self, timeout: Duration) {
        let mut fds = vec![self.wake_rd];
        if let Some(l) = &self.listeners {
            fds.extend(l.fds());
        }
        let mut pfds: Vec<libc::pollfd> = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `pfds` is a valid array of pollfd of the given length.
        unsafe {
            libc::poll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                timeout.as_millis() as libc::c_int,
            )
        };
        let mut buf = [0u8; 64];
        // SAFETY: reading into a local buffer from our non-blocking pipe.
        while unsafe {
            libc::read(
                self.wake_rd,
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        } > 0
        {}
    }

    /// Forks a child of `kind` that runs `body` and exits with its code;
    /// the parent records the child. The child keeps no inherited
    /// descriptor but 0, 1, 2 and `own_fd` (its client socket).
    fn spawn(
        &mut self,
        kind: Kind,
        own_fd: Option<i32>,
        body: impl FnOnce(&Self, &Shmem, i32) -> i32,
    ) {
        let Some(shm) = self.shm.as_ref() else { return };
        let postmaster_pid = std::process::id() as i32;
        // Signals stay blocked across fork until the child has installed its
        // own handlers (become_child unblocks them): a SIGTERM arriving in
        // between would otherwise run the postmaster's handler in the child
        // and be lost.
        let saved = block_all_signals();
        // SAFETY: the postmaster is single-threaded, so the child gets a
        // consistent copy of its memory; the child only runs `body` and
        // leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid != 0 {
            restore_signal_mask(&saved);
        }
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            log("LOG", &format!("could not fork {}: {e}", kind.describe()));
            return;
        }
        if pid == 0 {
            backend::process::close_inherited_fds(own_fd);
            let code = body(self, shm, postmaster_pid);
            // SAFETY: leaving the child without running the parent's
            // destructors (which would unmap or unlink shared state and
            // remove the listening sockets).
            unsafe { libc::_exit(code) };
        }
        self.children.push(Child { pid, kind });
    }

    fn fork_child(&mut self, kind: Kind) {
        self.spawn(kind, None, |pm, shm, pm_pid| {
            let startup = backend::startup::StartupOptions {
                discard_damaged_wal: pm.discard_damaged_wal,
            };
            run_child(shm, &pm.datadir, kind, pm.workload, pm.ack, startup, pm_pid)
        });
    }

    /// Accepts waiting clients: a backend each while running, otherwise a
    /// refusal that tells the client why it cannot connect now.
    fn accept_connections(&mut self) {
        let Some(l) = &self.listeners else { return };
        let accepted = l.accept_all();
        for conn in accepted {
            match self.admission() {
                None => self.fork_connection(conn, None),
                Some(refusal) => self.refuse(conn, refusal),
            }
        }
    }

    /// None: fork a backend for the next client; Some(why) otherwise.
    fn admission(&self) -> Option<&'static str> {
        const TOO_MANY: &str = "sorry, too many clients already";
        match self.state {
            _ if self.shutting_down => Some("the database system is shutting down"),
            State::Run => {
                let children = self.count(Kind::Connection);
                let authenticated = self
                    .shm
                    .as_ref()
                    .map_or(0, |shm| shm.sessions() as usize)
                    .min(children);
                let unauthenticated = children - authenticated;
                let full = authenticated >= self.settings.max_connections as usize
                    || unauthenticated >= unauthenticated_cap(self.settings.max_connections);
                full.then_some(TOO_MANY)
            }
            State::Startup => Some("the database system is starting up"),
            _ => Some("the database system is in recovery mode"),
        }
    }

    fn count(&self, kind: Kind) -> usize {
        self.children.iter().filter(|c| c.kind == kind).count()
    }

    /// Refuses a client: by a rejecter child (which reads the start-up
    /// packet first, as PostgreSQL's does) while few live, else here.
    fn refuse(&mut self, conn: crate::listen::Accepted, why: &'static str) {
        if self.count(Kind::Rejecter) < MAX_REJECTERS {
            self.fork_connection(conn, Some(why));
        } else {
            let bytes = protocol::error_response_bytes(&refusal_error(why));
            // SAFETY: a best-effort non-blocking send of a live buffer on
            // the accepted socket, which is closed right after (dropped).
            unsafe {
                libc::send(
                    conn.raw_fd(),
                    bytes.as_ptr() as *const libc::c_void,
                    bytes.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
        }
    }

    /// Forks a child for an accepted client: a connection backend, or (with
    /// `refuse`) a rejecter that sends that FATAL message.
    fn fork_connection(&mut self, conn: crate::listen::Accepted, refuse: Option<&str>) {
        use crate::listen::Accepted;
        use backend::session::{run_connection, Peer};
        let kind = if refuse.is_some() {
            Kind::Rejecter
        } else {
            Kind::Connection
        };
        let own_fd = Some(conn.raw_fd());
        self.spawn(kind, own_fd, |pm, shm, pm_pid| {
            become_child("backend", pm_pid);
            backend::process::arm_startup_timeout(pm.settings.authentication_timeout_s);
            let password =
                Some(pm.settings.password.as_str().to_string()).filter(|p| !p.is_empty());
            match (conn, refuse) {
                (Accepted::Unix(mut s), Some(msg)) => reject(&mut s, msg),
                (Accepted::Tcp(mut s), Some(msg)) => reject(&mut s, msg),
                (Accepted::Unix(s), None) => {
                    run_connection(shm, &pm.datadir, s, Peer::Unix, password)
                }
                (Accepted::Tcp(s), None) => {
                    run_connection(shm, &pm.datadir, s, Peer::Tcp, password)
                }
            }
        });
    }

    fn signal_all(&self, sig: libc::c_int) {
        for c in &self.children {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(c.pid, sig) };
        }
    }

    fn signal_kind(&self, pred: impl Fn(Kind) -> bool, sig: libc::c_int) {
        for c in self.children.iter().filter(|c| pred(c.kind)) {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(c.pid, sig) };
        }
    }

    fn has_children(&self, pred: impl Fn(Kind) -> bool) -> bool {
        self.children.iter().any(|c| pred(c.kind))
    }

    fn begin_fast_shutdown(&mut self) {
        self.shutting_down = true;
        match self.state {
            State::Startup => {
                // Let startup finish; advance_state moves on from there.
            }
            State::Run => {
                self.signal_kind(
                    |k| matches!(k, Kind::Backend(_) | Kind::Connection),
                    libc::SIGTERM,
                );
                self.state = State::StopBackends;
                self.crash_deadline = Some(Instant::now() + SHUTDOWN_KILL_AFTER);
            }
            _ => {}
        }
    }

    fn enter_crash_wait(&mut self) {
        self.state = State::CrashWait;
        self.crash_deadline = Some(Instant::now() + CRASH_KILL_AFTER);
    }

    fn reap_children(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: `status` is a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            let Some(pos) = self.children.iter().position(|c| c.pid == pid) else {
                continue;
            };
            let child = self.children.remove(pos);
            self.child_exited(child, status);
        }
    }

    fn child_exited(&mut self, child: Child, status: i32) {
        let exited = libc::WIFEXITED(status);
        let code = if exited {
            libc::WEXITSTATUS(status)
        } else {
            -1
        };
        let why = if exited {
            format!("exited with exit code {code}")
        } else {
            let sig = libc::WTERMSIG(status);
            format!("was terminated by signal {sig}: {}", signal_name(sig))
        };
        if self.state == State::CrashWait {
            return; // expected: we told everybody to quit
        }
        let clean = exited && code == 0;
        match child.kind {
            Kind::Startup if clean => {
                self.startup_failures = 0;
                self.discard_damaged_wal = false;
                self.enter_run();
            }
            Kind::Startup if exited && code == backend::startup::EXIT_WAL_DAMAGED => {
                log(
                    "FATAL",
                    "WAL is damaged before its end (see the message above); not starting",
                );
                self.shutting_down = true;
                self.exit_code_override = Some(backend::startup::EXIT_WAL_DAMAGED);
                self.enter_crash_wait();
            }
            Kind::Startup => {
                self.startup_failures += 1;
                log("LOG", &format!("startup process (PID {}) {why}", child.pid));
                if self.crashes == 0 || self.startup_failures >= MAX_STARTUP_FAILURES {
                    log(
                        "FATAL",
                        &format!(
                            "startup process failed{}; giving up (see the messages above)",
                            if self.startup_failures > 1 {
                                format!(" {} times", self.startup_failures)
                            } else {
                                String::new()
                            }
                        ),
                    );
                    self.shutting_down = true;
                    self.exit_code_override = Some(1);
                }
                self.enter_crash_wait();
            }
            Kind::Walwriter if clean && self.state == State::StopWalwriter => {}
            Kind::Checkpointer if clean && self.state == State::StopCheckpointer => {}
            Kind::Rejecter => {}
            Kind::Connection if clean || (exited && code == EXIT_FATAL) => {}
            Kind::Backend(_) if clean || (exited && code == EXIT_FATAL) => {
                if !clean {
                    log(
                        "LOG",
                        &format!("{} (PID {}) {why}", child.kind.describe(), child.pid),
                    );
                }
            }
            kind => self.handle_crash(kind, child.pid, &why),
        }
    }

    fn handle_crash(&mut self, kind: Kind, pid: i32, why: &str) {
        self.crashes += 1;
        log("LOG", &format!("{} (PID {pid}) {why}", kind.describe()));
        log("LOG", "terminating any other active server processes");
        self.signal_all(libc::SIGQUIT);
        self.enter_crash_wait();
    }

    fn enter_run(&mut self) {
        if self.shutting_down {
            // Shutdown was requested during startup: nothing to stop.
            self.state = State::StopWalwriter;
            return;
        }
        self.fork_child(Kind::Walwriter);
        self.fork_child(Kind::Checkpointer);
        for i in 0..self.workers {
            self.fork_child(Kind::Backend(i));
        }
        self.state = State::Run;
        self.run_started.get_or_insert_with(Instant::now);
        log("LOG", "database system is ready to accept connections");
    }

    /// Moves the state machine on; Some(code) when the postmaster is done.
    fn advance_state(&mut self) -> Option<i32> {
        let overdue = self.crash_deadline.is_some_and(|d| Instant::now() > d);
        match self.state {
            State::StopBackends => {
                if !self.has_children(|k| {
                    matches!(k, Kind::Backend(_) | Kind::Connection | Kind::Rejecter)
                }) {
                    self.signal_kind(|k| k == Kind::Checkpointer, libc::SIGTERM);
                    self.state = State::StopCheckpointer;
                } else if overdue {
                    log("LOG", "backends did not stop in time; sending SIGKILL");
                    self.signal_all(libc::SIGKILL);
                }
                None
            }
            State::StopCheckpointer => {
                if !self.has_children(|k| k == Kind::Checkpointer) {
                    self.signal_kind(|k| k == Kind::Walwriter, libc::SIGTERM);
                    self.state = State::StopWalwriter;
                } else if overdue {
                    log("LOG", "checkpointer did not stop in time; sending SIGKILL");
                    self.signal_all(libc::SIGKILL);
                }
                None
            }
            State::StopWalwriter => {
                if self.children.is_empty() {
                    return Some(self.finish());
                }
                None
            }
            State::CrashWait => {
                if !self.children.is_empty() {
                    if overdue {
                        self.signal_all(libc::SIGKILL);
                    }
                    return None;
                }
                if self.shutting_down {
                    return Some(self.finish());
                }
                log("LOG", "all server processes terminated; reinitializing");
                self.release_segment(false);
                if let Err(e) = self.create_segment() {
                    log("FATAL", &e);
                    return Some(1);
                }
                self.crash_deadline = None;
                self.state = State::Startup;
                self.fork_child(Kind::Startup);
                None
            }
            State::Startup | State::Run => None,
        }
    }

    /// Final report; returns the exit code.
    fn finish(&mut self) -> i32 {
        let clean = self.state == State::StopWalwriter;
        self.release_segment(clean);
        let elapsed = self
            .run_started
            .unwrap_or(self.started)
            .elapsed()
            .as_secs_f64();
        if let Some(w) = self.workload {
            say!(
                "walshm summary: workload {w}, {} backend(s), {elapsed:.2} s, {} crash restart(s)",
                self.workers,
                self.crashes
            );
            let mut sum = WorkerTotals::default();
            for (i, t) in self.totals.iter().enumerate() {
                say!(
                    "backend {i}: records {} bytes {} transactions {}",
                    t.records,
                    t.bytes,
                    t.transactions
                );
                sum.records += t.records;
                sum.bytes += t.bytes;
                sum.transactions += t.transactions;
                sum.snapshot_violations += t.snapshot_violations;
                sum.sync_commits += t.sync_commits;
            }
            say!(
                "total: records {} bytes {} transactions {}",
                sum.records,
                sum.bytes,
                sum.transactions
            );
            if w.is_transactional() {
                let per_sync = if self.wal_syncs > 0 {
                    format!("{:.1}", sum.sync_commits as f64 / self.wal_syncs as f64)
                } else {
                    "-".into()
                };
                say!(
                    "transactions: synchronous commits {}, WAL fdatasyncs {}, commits per fdatasync {per_sync}, snapshot violations {}",
                    sum.sync_commits, self.wal_syncs, sum.snapshot_violations
                );
                if sum.snapshot_violations > 0 {
                    self.exit_code_override.get_or_insert(1);
                    log(
                        "FATAL",
                        "a snapshot showed an already committed XID as running",
                    );
                }
            }
        }
        log("LOG", "database system is shut down");
        if let Some(code) = self.exit_code_override {
            return code;
        }
        if let Some(m) = &self.lwlock_mismatch {
            log("FATAL", &format!("LWLock mutual exclusion violated: {m}"));
            return 1;
        }
        0
    }
}

/// Blocks every signal; returns the previous mask.
fn block_all_signals() -> libc::sigset_t {
    // SAFETY: zeroed sigsets are filled by sigfillset / sigprocmask before
    // use; both pointers are valid.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old);
        old
    }
}

fn restore_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: `mask` is a valid sigset obtained from sigprocmask.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// The body of a forked child; returns its exit code.
fn run_child(
    shm: &Shmem,
    datadir: &Path,
    kind: Kind,
    workload: Option<Workload>,
    ack: bool,
    startup: backend::startup::StartupOptions,
    postmaster_pid: i32,
) -> i32 {
    let name = match kind {
        Kind::Startup => "startup",
        Kind::Walwriter => "walwriter",
        Kind::Checkpointer => "checkpointer",
        Kind::Backend(_) | Kind::Connection | Kind::Rejecter => "backend",
    };
    become_child(name, postmaster_pid);
    let procno = match kind {
        Kind::Startup => shm.aux_procno(AuxProc::Startup),
        Kind::Walwriter => shm.aux_procno(AuxProc::Walwriter),
        Kind::Checkpointer => shm.aux_procno(AuxProc::Checkpointer),
        Kind::Backend(i) => i,
        Kind::Connection | Kind::Rejecter => unreachable!("forked by fork_connection"),
    };
    shm.procs()[procno as usize]
        .pid
        .store(std::process::id() as i32, Ordering::Relaxed);
    if matches!(kind, Kind::Walwriter | Kind::Backend(_)) {
        // Lives as long as the server and touches every buffer page.
        shm.prefault_wal_buffers();
    }
    match kind {
        Kind::Startup => backend::startup::run(shm, datadir, startup),
        Kind::Walwriter => walwriter::run(shm, datadir),
        Kind::Checkpointer => backend::checkpointer::run(shm, datadir),
        Kind::Connection | Kind::Rejecter => unreachable!("forked by fork_connection"),
        Kind::Backend(_) => match workload {
            Some(w) => backend::workload::run(shm, procno, datadir, w, ack),
            None => EXIT_QUIT,
        },
    }
}

/// The FATAL error of a refusal: 53300 at the connection limits, 57P03
/// while the server cannot accept connections.
fn refusal_error(msg: &str) -> protocol::SqlError {
    let code = if msg.starts_with("sorry") {
        protocol::sqlstate::TOO_MANY_CONNECTIONS
    } else {
        protocol::sqlstate::CANNOT_CONNECT_NOW
    };
    protocol::SqlError::fatal(code, msg.to_string())
}

/// Sends a client a FATAL 57P03 (or 53300) after reading its start-up
/// packet; returns the exit code.
fn reject<S: std::io::Read + std::io::Write>(s: &mut S, msg: &str) -> i32 {
    let _ = protocol::reject_with(s, &refusal_error(msg));
    0
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "Killed",
        libc::SIGSEGV => "Segmentation fault",
        libc::SIGABRT => "Aborted",
        libc::SIGTERM => "Terminated",
        libc::SIGQUIT => "Quit",
        libc::SIGBUS => "Bus error",
        libc::SIGINT => "Interrupt",
        _ => "signal",
    }
}
