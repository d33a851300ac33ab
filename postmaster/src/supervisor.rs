//! `postmaster start`: shared memory, children, supervision, crash restart.
//!
//! State machine (PostgreSQL's postmaster.c PMState, reduced):
//!
//! ```text
//!   Startup --startup exits 0--> Run --SIGTERM--> StopBackends --all gone-->
//!       StopCheckpointer (shutdown checkpoint) --gone--> StopWalsenders (send all flushed WAL)
//!       --gone--> StopWalwriter (and archiver) --gone--> exit 0
//!      |                          |
//!      +-- any child crashes -----+--> CrashWait --all children gone--> (new segment, generation+1) Startup
//!
//!   Startup --SIGUSR1 from a startup process in standby mode--> Standby (walreceiver, read-only sessions)
//!       --promote (DIR/promote + SIGUSR1): walreceiver stopped, then SIGUSR2 to startup--> startup exits 0 --> Run
//! ```
//!
//! The standby's part (`standby` below this module): PostgreSQL's
//! PM_HOT_STANDBY and its promotion, kept apart from the rest of the
//! supervision.
//!
//! SIGTERM in Startup is passed on to the startup process: crash recovery
//! runs to its end (then straight to StopWalwriter), archive recovery
//! stops between two `restore_command` fetches and exits
//! `EXIT_SHUTDOWN`, which ends the shutdown the same way. A startup that
//! exits `EXIT_TARGET_SHUTDOWN` (its recovery target reached, with
//! `recovery_target_action = shutdown`) is a shutdown too, exit 0.
//!
//! Signals, as PostgreSQL's postmaster takes them: SIGINT fast shutdown,
//! SIGQUIT immediate (every child SIGQUIT, no shutdown checkpoint),
//! SIGHUP reload (the configuration file is read again and the settings
//! that may change while running take their new values for sessions that
//! start afterwards; the others are reported as needing a restart),
//! SIGUSR1 (a startup process entered standby mode, or `DIR/promote`
//! asks for a promotion: `standby`), and
//! SIGTERM smart when started with PostgreSQL's command line (no new
//! connections, running sessions finish, then a fast shutdown), fast
//! with `postmaster start` (what its users and tests expect). The pid
//! file's status line says `starting`, `ready   ` or `stopping`.
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
//! Attached workers: processes that register over `DIR/.s.WALSHM.worker`
//! (`registry`) hold a worker proc slot while their channel is open; a
//! channel lost without a Detach is a crash like a backend's. Supervised
//! workers (`--worker`) are children exec'd with a channel of their own and
//! restarted by the rules in `supervised`. When a generation is abandoned
//! (crash restart, shutdown) its segment's `ended` flag is set and every
//! channel closed ([`Postmaster::abandon_generation`]), so an external
//! process learns it must attach again and cannot reach the next one.
//!
//! This module runs the loop and the state machine; its children take
//! the rest of the supervision: how a child's end is handled, crashes
//! included (`exits`), the registry's events and the supervised workers'
//! starts (`workers`), the standby (`standby`). Elsewhere: the kinds of
//! children, the fork and the server processes' bodies (`children`);
//! whether a client gets a backend (`admission`); registrations and worker slots (`registry`); the
//! supervised workers' rules (`supervised`); the workload summary and its
//! checks (`report`, which reads each generation's counters before its
//! segment goes).

use crate::admission::{self, Phase, Verdict};
use crate::children::{self, ClientChild, Kind, ServerChild};
use crate::cli::StartOptions;
use crate::datadir::{self, PidFile};
use crate::log;
use crate::registry::Registry;
use crate::report::{Report, RunFacts};
use crate::supervised::{Supervised, WorkerSpec};
use backend::abandoned::Job;
use backend::control::ControlFile;
use backend::workload::Workload;
use shmem::sync::Ordering;
use shmem::sys::Signal;
use shmem::{Settings, Shmem};
use std::os::fd::IntoRawFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

mod exits;
mod standby;
mod workers;

const CRASH_KILL_AFTER: Duration = Duration::from_secs(5);
const SHUTDOWN_KILL_AFTER: Duration = Duration::from_secs(60);
/// Failed startup attempts after a crash before giving up.
const MAX_STARTUP_FAILURES: u32 = 3;

/// A fast shutdown was asked for (SIGINT; SIGTERM under `postmaster start`).
static GOT_SIGTERM: AtomicBool = AtomicBool::new(false);
/// A smart shutdown was asked for (SIGTERM under the postgres command line).
static GOT_SMART: AtomicBool = AtomicBool::new(false);
static GOT_SIGQUIT: AtomicBool = AtomicBool::new(false);
static GOT_SIGHUP: AtomicBool = AtomicBool::new(false);
/// SIGUSR1: the startup process entered standby mode, or a promotion was
/// asked for (`pg_ctl promote`, `pg_promote()`); see `standby`.
static GOT_SIGUSR1: AtomicBool = AtomicBool::new(false);
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Startup,
    /// A standby: the startup process follows the walreceiver's WAL,
    /// sessions are read-only (see `standby`).
    Standby,
    Run,
    StopBackends,
    StopCheckpointer,
    /// Walsenders (connection children registered in shared memory's
    /// walsender array) stream the shutdown checkpoint, then end.
    StopWalsenders,
    StopWalwriter,
    CrashWait,
}

struct Child {
    pid: i32,
    kind: Kind,
}

struct Postmaster {
    datadir: PathBuf,
    /// The settings in force; a reload changes only the rows whose
    /// context allows it (`Settings::reload_from`).
    settings: Settings,
    /// The command line's settings (they override the file at a reload
    /// as at start).
    sets: Vec<String>,
    pidfile: Option<PidFile>,
    /// A smart shutdown waits for the client sessions to end.
    smart_shutdown: bool,
    control: ControlFile,
    workers: u32,
    workload: Option<Workload>,
    ack: bool,
    /// Passed to the first startup process only (an operator's decision
    /// about the damage found then, not about a later crash's).
    discard_damaged_wal: bool,
    shm: Option<Shmem>,
    registry: Option<Registry>,
    supervised: Vec<Supervised>,
    generation: u64,
    children: Vec<Child>,
    state: State,
    shutting_down: bool,
    crash_deadline: Option<Instant>,
    startup_failures: u32,
    crashes: u32,
    /// Dead processes waiting for the cleaner, with the worker slot each
    /// keeps until then (`backend::abandoned`).
    cleanup_queue: Vec<(Job, Option<u32>)>,
    /// Those the running cleaner works on.
    cleaning: Vec<(Job, Option<u32>)>,
    /// Processes cleaned up after without a restart, since start.
    cleaned: u64,
    report: Report,
    exit_code_override: Option<i32>,
    listeners: Option<crate::listen::Listeners>,
    wake_rd: i32,
    started: Instant,
    run_started: Option<Instant>,
    /// Where a promotion is (see `standby`).
    promotion: standby::Promotion,
}

/// Runs the server until shutdown; returns the exit code.
pub fn start(opts: StartOptions) -> Result<i32, String> {
    let datadir = datadir::check_datadir(&opts.datadir)?;
    let (mut settings, conf_workers) = datadir::load_config(&datadir, &opts.sets)?;
    // Before any fork: the environment variable is gone by then.
    use crate::password::{verifier_from_inputs, LOGIN, REPLICATION};
    for (secret, file) in [
        (&LOGIN, &opts.pwfile),
        (&REPLICATION, &opts.replication_pwfile),
    ] {
        if let Some(v) = verifier_from_inputs(secret, file.as_deref())? {
            settings
                .set(secret.setting, &v)
                .map_err(|e| e.to_string())?;
        }
    }
    if opts.ack && !settings.synchronous_commit.flushes_locally() {
        return Err("--ack promises that each acknowledged commit is durable; it needs synchronous_commit = local, remote_write, on or remote_apply (not off)".into());
    }
    let workers = supervised_workers(conf_workers, &opts, &settings)?;
    let control = ControlFile::read(&datadir).map_err(|e| e.to_string())?;
    // The segment is unnamed (a memfd): nothing of a dead postmaster's is
    // left to clean up but its pid file and sockets.
    let facts = datadir::PidFacts {
        port: settings.port,
        socket_dir: match settings.unix_socket_directories.as_str() {
            "" => datadir.display().to_string(),
            d => d.to_string(),
        },
        listen_addr: settings.listen_addresses.as_str().to_string(),
    };
    let (pidfile, _stale) = PidFile::create(&datadir, &facts)?;
    datadir::bring_up_to_date(&datadir)?;
    standby::remove_stale_promote_file(&datadir);
    let args: Vec<String> = std::env::args().skip(1).collect();
    datadir::write_opts_file(&datadir, &args)?;
    let wake_rd = install_signal_handlers(opts.postgres_cli)?;
    let mut pm = Postmaster::new(opts, datadir, settings, control, wake_rd);
    pm.pidfile = Some(pidfile);
    pm.supervised = workers.into_iter().map(Supervised::new).collect();
    let code = pm.run();
    pm.release_segment(false);
    Ok(code)
}

/// The supervised workers: walshm.conf's `worker` lines, then --worker;
/// each needs a worker slot of its own.
fn supervised_workers(
    conf: Vec<WorkerSpec>,
    opts: &StartOptions,
    settings: &Settings,
) -> Result<Vec<WorkerSpec>, String> {
    let workers: Vec<WorkerSpec> = conf
        .into_iter()
        .chain(opts.worker_commands.iter().cloned())
        .collect();
    let max = settings.max_worker_processes as usize;
    if workers.len() > max {
        return Err(format!(
            "{n} supervised worker(s) (--worker, worker lines in walshm.conf) need max_worker_processes >= {n} (it is {max})",
            n = workers.len()
        ));
    }
    Ok(workers)
}

/// signal-hook's flags and self-pipe: each signal sets its flag, then
/// writes a byte to the pipe (actions run in the order registered); the
/// main loop polls the read end, which is returned. SIGTERM means a smart
/// shutdown under the postgres command line (`smart`), a fast one
/// otherwise. Children reset these handlers right after `fork`
/// (`children::fork_process`).
fn install_signal_handlers(smart: bool) -> Result<i32, String> {
    use signal_hook::consts::*;
    let err = |e: std::io::Error| format!("could not create self-pipe: {e}");
    let (rd, wr) = shmem::sys::fd::pipe(true).map_err(err)?;
    let sigterm_flag = if smart { &GOT_SMART } else { &GOT_SIGTERM };
    let flags: [(i32, Option<&'static AtomicBool>); 6] = [
        (SIGTERM, Some(sigterm_flag)),
        (SIGINT, Some(&GOT_SIGTERM)),
        (SIGQUIT, Some(&GOT_SIGQUIT)),
        (SIGHUP, Some(&GOT_SIGHUP)),
        (SIGCHLD, None),
        (SIGUSR1, Some(&GOT_SIGUSR1)),
    ];
    for (sig, flag) in flags {
        if let Some(flag) = flag {
            signal_hook::flag::register(sig, flag).map_err(err)?;
        }
        signal_hook::low_level::pipe::register(sig, wr.try_clone().map_err(err)?).map_err(err)?;
    }
    shmem::sys::signals::ignore(Signal::SIGPIPE);
    Ok(rd.into_raw_fd())
}

impl Postmaster {
    fn new(
        opts: StartOptions,
        datadir: PathBuf,
        settings: Settings,
        control: ControlFile,
        wake_rd: i32,
    ) -> Postmaster {
        Postmaster {
            datadir,
            settings,
            sets: opts.sets,
            pidfile: None,
            smart_shutdown: false,
            control,
            workers: opts.workers,
            workload: opts.workload,
            ack: opts.ack,
            discard_damaged_wal: opts.discard_damaged_wal,
            shm: None,
            registry: None,
            supervised: Vec::new(),
            generation: 0,
            children: Vec::new(),
            state: State::Startup,
            shutting_down: false,
            crash_deadline: None,
            startup_failures: 0,
            crashes: 0,
            cleanup_queue: Vec::new(),
            cleaning: Vec::new(),
            cleaned: 0,
            report: Report::new(opts.workload, opts.workers),
            exit_code_override: None,
            listeners: None,
            wake_rd,
            started: Instant::now(),
            run_started: None,
            promotion: standby::Promotion::None,
        }
    }

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
        if let Err(e) = self.create_segment().and_then(|()| self.open_listeners()) {
            log("FATAL", &e);
            return 1;
        }
        self.registry = Some(Registry::open(
            &self.datadir,
            self.settings.max_worker_processes,
            self.supervised.len(),
        ));
        self.fork_server_child(ServerChild::Startup);
        loop {
            self.wait_for_event(self.poll_timeout());
            self.accept_connections();
            self.service_registry();
            self.handle_shutdown_signals();
            self.standby_step(GOT_SIGUSR1.swap(false, Ordering::Relaxed));
            self.reload_if_asked();
            self.reap_children();
            self.smart_shutdown_step();
            self.start_due_workers();
            if let Some(code) = self.advance_state() {
                return code;
            }
        }
    }

    /// Until the next thing the loop must do on its own: a worker start
    /// (only while running: otherwise a start that is due would spin the
    /// loop), a registration's hello deadline, the end of a paused accept,
    /// or the usual half second.
    fn poll_timeout(&self) -> Duration {
        let now = Instant::now();
        let running = self.state == State::Run && !self.shutting_down;
        let starts = self
            .supervised
            .iter()
            .filter(|_| running)
            .filter_map(|w| w.next_start);
        let hellos = self.registry.as_ref().and_then(Registry::next_deadline);
        let accepts = self
            .listeners
            .as_ref()
            .and_then(crate::listen::Listeners::resume_at);
        starts
            .chain(hellos)
            .chain(accepts)
            .map(|t| t.saturating_duration_since(now))
            .fold(Duration::from_millis(500), Duration::min)
    }

    /// Opens the client sockets. Without an explicit socket setting, a data
    /// directory whose path is too long for a socket name still runs
    /// workloads (with a warning).
    fn open_listeners(&mut self) -> Result<(), String> {
        match crate::listen::Listeners::open(&self.datadir, &self.settings) {
            Ok(l) => {
                let tcp = match l.tcp {
                    Some(_) => format!(" and on 127.0.0.1 port {}", self.settings.port),
                    None => String::new(),
                };
                log(
                    "LOG",
                    &format!(
                        "listening on Unix socket \"{}\"{tcp}",
                        l.unix_path.display()
                    ),
                );
                self.listeners = Some(l);
                Ok(())
            }
            Err(e)
                if self.settings.unix_socket_directories.as_str().is_empty()
                    && self.settings.listen_addresses.as_str().is_empty() =>
            {
                log(
                    "WARNING",
                    &format!("{e}; clients cannot connect (set unix_socket_directories)"),
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// SIGQUIT: immediate shutdown (as after a crash, without restart);
    /// SIGINT (and SIGTERM under `postmaster start`): fast shutdown;
    /// SIGTERM under the postgres command line: smart shutdown.
    fn handle_shutdown_signals(&mut self) {
        if GOT_SIGQUIT.swap(false, Ordering::Relaxed) {
            log("LOG", "received immediate shutdown request");
            self.set_status(datadir::PmStatus::Stopping);
            self.shutting_down = true;
            self.signal_all(Signal::SIGQUIT);
            self.enter_crash_wait();
        }
        if GOT_SIGTERM.swap(false, Ordering::Relaxed) && !self.shutting_down {
            log("LOG", "received fast shutdown request");
            self.set_status(datadir::PmStatus::Stopping);
            self.begin_fast_shutdown();
        }
        if GOT_SMART.swap(false, Ordering::Relaxed) && !self.shutting_down && !self.smart_shutdown {
            log("LOG", "received smart shutdown request");
            self.set_status(datadir::PmStatus::Stopping);
            if self.state == State::Run {
                // New clients are refused (Phase::ShuttingDown); the
                // sessions running finish first (smart_shutdown_step).
                self.smart_shutdown = true;
            } else {
                // Starting up or recovering from a crash: no session to
                // wait for.
                self.begin_fast_shutdown();
            }
        }
    }

    /// A smart shutdown becomes a fast one once no client session is left
    /// (walsenders are not sessions: they stream until the end, as in a
    /// fast shutdown).
    fn smart_shutdown_step(&mut self) {
        if !self.smart_shutdown || self.shutting_down {
            return;
        }
        if self.state != State::Run {
            // A crash meanwhile: what is left to wait for is gone.
            self.begin_fast_shutdown();
            return;
        }
        let walsenders = self.walsender_pids();
        let sessions = self.children.iter().any(|c| {
            c.kind == Kind::Client(ClientChild::Connection) && !walsenders.contains(&c.pid)
        });
        if !sessions {
            log("LOG", "no client session left; shutting down");
            self.begin_fast_shutdown();
        }
    }

    /// SIGHUP: reads the configuration file again as `start` read it
    /// (defaults, walshm.conf, then the command line's settings) and takes
    /// the new values of the rows whose context allows a change; a row
    /// that needs a restart keeps its value and is named in the log. A
    /// file with an error changes nothing. Sessions forked afterwards run
    /// with the new values (`Shmem::adopt_reloaded_settings`).
    fn reload_if_asked(&mut self) {
        if !GOT_SIGHUP.swap(false, Ordering::Relaxed) {
            return;
        }
        log("LOG", "received SIGHUP, reloading configuration files");
        let mut new = match datadir::load_settings(&self.datadir, &self.sets) {
            Ok(new) => new,
            Err(e) => {
                log(
                    "LOG",
                    &format!("{e}; configuration file contains errors; no changes were applied"),
                );
                return;
            }
        };
        // The verifiers may have come from --pwfile or the environment at
        // start, not from the file; they never change at a reload.
        for row in shmem::settings::SETTINGS.iter().filter(|r| r.secret) {
            row.copy(&self.settings, &mut new);
        }
        let outcome = self.settings.reload_from(&new);
        for name in outcome.needs_restart {
            log(
                "LOG",
                &format!("parameter \"{name}\" cannot be changed without restarting the server"),
            );
        }
        for (name, value) in outcome.changed {
            log(
                "LOG",
                &format!("parameter \"{name}\" changed to \"{value}\""),
            );
        }
    }

    fn set_status(&self, status: datadir::PmStatus) {
        if let Some(p) = &self.pidfile {
            p.set_status(status);
        }
    }

    fn create_segment(&mut self) -> Result<(), String> {
        self.generation += 1;
        // Workers have fixed slots; client connections share the rest.
        let max_backends = self.settings.max_connections + self.workers;
        let shm = Shmem::create(&self.settings, max_backends, self.generation)
            .map_err(|e| e.to_string())?;
        // SAFETY: the segment was just created and no other process is
        // attached yet.
        unsafe {
            shm.set_wal_facts(shmem::xlogctl::WalFacts {
                system_identifier: self.control.system_identifier,
                seg_size: self.control.seg_size,
                timeline: shmem::sync::AtomicU32::new(self.control.timeline),
                n_buffers: shm.layout().n_buffers,
            })
        };
        shm.reserve_fixed_procs(self.workers);
        let h = shm.header();
        h.processes_cleaned.store(self.cleaned, Ordering::Relaxed);
        h.crash_restarts
            .store(self.crashes as u64, Ordering::Relaxed);
        if let Some(r) = &mut self.registry {
            r.reset_slots(shm.max_workers());
        }
        self.shm = Some(shm);
        Ok(())
    }

    /// The current generation is over (crash restart or shutdown): its
    /// header says so (a plain atomic store; external processes check it),
    /// every proc's semaphore is posted so that an external worker asleep
    /// on a lock of the old segment wakes and sees it, and every
    /// registration channel closes, freeing every worker slot. Idempotent
    /// (a second round of posts is absorbed like any unrelated wake-up).
    fn abandon_generation(&mut self) {
        if let Some(shm) = &self.shm {
            shm.mark_ended();
            // After the mark (its Release store, then each post's Release
            // add, pair with the Acquire consume of the semaphore and the
            // Acquire flag check in `shmem::lwlock`'s sleep and
            // `shmem::groupclear`'s wait): a waiter woken by one of these
            // posts sees the flag. Atomic adds and futex wakes only: the
            // postmaster takes no lock in shared memory.
            for p in shm.procs() {
                p.sem.post();
            }
        }
        if let Some(r) = &mut self.registry {
            r.close_all();
        }
    }

    /// Hands this generation's counters to the report, then lets the
    /// segment go (unmapped and its descriptor closed: the kernel frees it
    /// once no process maps it). `clean`: the generation ended in a fast
    /// shutdown (not a crash).
    fn release_segment(&mut self, clean: bool) {
        self.abandon_generation();
        if let Some(shm) = self.shm.take() {
            self.report.collect_generation(&shm, self.generation, clean);
        }
    }

    fn wait_for_event(&self, timeout: Duration) {
        let mut fds = vec![self.wake_rd];
        if let Some(l) = &self.listeners {
            fds.extend(l.fds());
        }
        if let Some(r) = &self.registry {
            fds.extend(r.fds());
        }
        shmem::sys::fd::poll_readable(&fds, timeout);
        shmem::sys::fd::drain(self.wake_rd);
    }

    /// Forks a child of `kind` that runs `body` (see `children` for the
    /// fork rules); the parent records the child. The child keeps no
    /// inherited descriptor but 0, 1, 2 and `own_fd` (its client socket).
    fn spawn(
        &mut self,
        kind: Kind,
        own_fd: Option<i32>,
        body: impl FnOnce(&Self, &Shmem, i32) -> i32,
    ) {
        let Some(shm) = self.shm.as_ref() else { return };
        let postmaster_pid = std::process::id() as i32;
        match children::fork_process(own_fd, || body(self, shm, postmaster_pid)) {
            Ok(pid) => self.children.push(Child { pid, kind }),
            Err(e) => log("LOG", &format!("could not fork {}: {e}", kind.describe())),
        }
    }

    fn fork_server_child(&mut self, child: ServerChild) {
        self.spawn(Kind::Server(child), None, |pm, shm, postmaster_pid| {
            let args = children::ServerChildArgs {
                datadir: &pm.datadir,
                workload: pm.workload,
                ack: pm.ack,
                startup: backend::startup::StartupOptions {
                    discard_damaged_wal: pm.discard_damaged_wal,
                },
                postmaster_pid,
                cleanups: pm.cleaning.iter().map(|(job, _)| job.clone()).collect(),
            };
            children::run_server_child(shm, child, args)
        });
    }

    /// Forks a child for an accepted client: a connection backend, or (with
    /// `refusal`) a rejecter that sends that FATAL message.
    fn fork_client_child(&mut self, conn: crate::listen::Accepted, refusal: Option<&'static str>) {
        let kind = match refusal {
            Some(_) => ClientChild::Rejecter,
            None => ClientChild::Connection,
        };
        let own_fd = Some(conn.raw_fd());
        self.spawn(Kind::Client(kind), own_fd, |pm, shm, pm_pid| {
            admission::run_client_child(shm, &pm.datadir, &pm.settings, conn, refusal, pm_pid)
        });
    }

    /// Accepts waiting clients: a backend each while running, otherwise a
    /// refusal that tells the client why it cannot connect now.
    fn accept_connections(&mut self) {
        let Some(l) = &mut self.listeners else { return };
        for conn in l.accept_all() {
            match admission::judge(&self.load()) {
                Verdict::Admit => self.fork_client_child(conn, None),
                Verdict::RefuseByChild(why) => self.fork_client_child(conn, Some(why)),
                Verdict::RefuseHere(why) => admission::refuse_here(conn, why),
            }
        }
    }

    /// What admission needs to know, now.
    fn load(&self) -> admission::Load {
        let phase = match self.state {
            _ if self.shutting_down || self.smart_shutdown => Phase::ShuttingDown,
            State::Run | State::Standby => Phase::Running,
            State::Startup => Phase::StartingUp,
            _ => Phase::Recovering,
        };
        admission::Load {
            phase,
            connections: self.count(Kind::Client(ClientChild::Connection)),
            sessions: self.shm.as_ref().map_or(0, |shm| shm.sessions() as usize),
            rejecters: self.count(Kind::Client(ClientChild::Rejecter)),
            max_connections: self.settings.max_connections,
        }
    }

    fn count(&self, kind: Kind) -> usize {
        self.children.iter().filter(|c| c.kind == kind).count()
    }

    fn signal_all(&self, sig: Signal) {
        self.signal_kind(|_| true, sig);
    }

    fn signal_kind(&self, pred: impl Fn(Kind) -> bool, sig: Signal) {
        for c in self.children.iter().filter(|c| pred(c.kind)) {
            shmem::sys::kill(c.pid, sig);
        }
    }

    fn begin_fast_shutdown(&mut self) {
        self.shutting_down = true;
        match self.state {
            State::Startup => {
                // Crash recovery runs to its end; archive recovery stops
                // between two restore_command fetches (exit EXIT_SHUTDOWN).
                // advance_state moves on from either.
                self.signal_kind(|k| k == Kind::Server(ServerChild::Startup), Signal::SIGTERM);
            }
            State::Standby => self.stop_standby(),
            State::Run => {
                let walsenders = self.walsender_pids();
                for c in &self.children {
                    if c.kind.is_backend() && !walsenders.contains(&c.pid) {
                        shmem::sys::kill(c.pid, Signal::SIGTERM);
                    }
                }
                self.state = State::StopBackends;
                self.crash_deadline = Some(Instant::now() + SHUTDOWN_KILL_AFTER);
            }
            _ => {}
        }
    }

    /// Pids of the connection children that became walsenders (read from
    /// their entries in shared memory: plain atomics, no lock).
    fn walsender_pids(&self) -> Vec<i32> {
        let Some(shm) = &self.shm else {
            return Vec::new();
        };
        shm.repl()
            .senders
            .iter()
            .map(|s| s.pid.load(Ordering::Relaxed))
            .filter(|&pid| pid > 0)
            .collect()
    }

    fn enter_run(&mut self) {
        if self.shutting_down {
            // Shutdown was requested during startup: nothing to stop.
            self.state = State::StopWalwriter;
            return;
        }
        self.fork_server_child(ServerChild::Walwriter);
        self.fork_server_child(ServerChild::Checkpointer);
        if self.settings.archive_mode {
            self.fork_server_child(ServerChild::Archiver);
        }
        for i in 0..self.workers {
            self.fork_server_child(ServerChild::Backend(i));
        }
        self.state = State::Run;
        self.run_started.get_or_insert_with(Instant::now);
        log("LOG", "database system is ready to accept connections");
        self.set_status(datadir::PmStatus::Ready);
        self.start_due_workers();
    }

    /// Moves the state machine on; Some(code) when the postmaster is done.
    fn advance_state(&mut self) -> Option<i32> {
        let overdue = self.crash_deadline.is_some_and(|d| Instant::now() > d);
        match self.state {
            State::StopBackends => {
                let walsenders = self.walsender_pids();
                let waiting_for = |c: &Child| {
                    matches!(
                        c.kind,
                        Kind::Client(_)
                            | Kind::Server(ServerChild::Backend(_))
                            | Kind::Supervised(_)
                    ) && !walsenders.contains(&c.pid)
                };
                let checkpointer = |c: &Child| c.kind == Kind::Server(ServerChild::Checkpointer);
                let next = (checkpointer, State::StopCheckpointer);
                self.stop_step(waiting_for, next, overdue, "backends");
                None
            }
            State::StopCheckpointer => {
                let checkpointer = |c: &Child| c.kind == Kind::Server(ServerChild::Checkpointer);
                let walsenders = |c: &Child| matches!(c.kind, Kind::Client(_));
                let next = (walsenders, State::StopWalsenders);
                self.stop_step(checkpointer, next, overdue, "checkpointer");
                if self.state == State::StopWalsenders {
                    // After the shutdown checkpoint, as PostgreSQL's archiver.
                    self.signal_kind(
                        |k| k == Kind::Server(ServerChild::Archiver),
                        Signal::SIGTERM,
                    );
                }
                None
            }
            State::StopWalsenders => {
                let walsenders = |c: &Child| matches!(c.kind, Kind::Client(_));
                let walwriter = |c: &Child| c.kind == Kind::Server(ServerChild::Walwriter);
                let next = (walwriter, State::StopWalwriter);
                self.stop_step(walsenders, next, overdue, "walsenders");
                None
            }
            State::StopWalwriter if self.children.is_empty() => Some(self.finish()),
            State::CrashWait => self.crash_wait_step(overdue),
            State::StopWalwriter | State::Startup | State::Standby | State::Run => None,
        }
    }

    /// One step of the fast shutdown: once no child matches `waiting_for`
    /// (`what`), SIGTERM the next server child and enter the next state; if
    /// that takes too long, SIGKILL everything.
    fn stop_step(
        &mut self,
        waiting_for: impl Fn(&Child) -> bool,
        (next_children, next_state): (impl Fn(&Child) -> bool, State),
        overdue: bool,
        what: &str,
    ) {
        if !self.children.iter().any(waiting_for) {
            if next_state == State::StopCheckpointer {
                // Backends and supervised workers are gone: external
                // workers are told and cut off before the last checkpoint.
                self.abandon_generation();
            }
            for c in self.children.iter().filter(|c| next_children(c)) {
                shmem::sys::kill(c.pid, Signal::SIGTERM);
            }
            self.state = next_state;
        } else if overdue {
            log(
                "LOG",
                &format!("{what} did not stop in time; sending SIGKILL"),
            );
            self.signal_all(Signal::SIGKILL);
        }
    }

    /// CrashWait: once every child is gone, stop (if shutting down) or
    /// start the next generation with a fresh segment.
    fn crash_wait_step(&mut self, overdue: bool) -> Option<i32> {
        if !self.children.is_empty() {
            if overdue {
                self.signal_all(Signal::SIGKILL);
            }
            return None;
        }
        if self.shutting_down {
            return Some(self.finish());
        }
        log("LOG", "all server processes terminated; reinitializing");
        self.set_status(datadir::PmStatus::Starting);
        self.release_segment(false);
        if let Err(e) = self.create_segment() {
            log("FATAL", &e);
            return Some(1);
        }
        self.crash_deadline = None;
        self.state = State::Startup;
        self.fork_server_child(ServerChild::Startup);
        None
    }

    /// Releases the last segment, prints the report; returns the exit code.
    fn finish(&mut self) -> i32 {
        let clean = self.state == State::StopWalwriter;
        self.release_segment(clean);
        let workers = self.supervised.iter().map(Supervised::facts).collect();
        self.report.set_supervised(workers);
        let run = RunFacts {
            elapsed_s: self
                .run_started
                .unwrap_or(self.started)
                .elapsed()
                .as_secs_f64(),
            crash_restarts: self.crashes,
        };
        if let Some(code) = self.report.print_summary(run) {
            self.exit_code_override.get_or_insert(code);
        }
        log("LOG", "database system is shut down");
        self.exit_code_override
            .unwrap_or_else(|| self.report.lwlock_exit_code())
    }
}
