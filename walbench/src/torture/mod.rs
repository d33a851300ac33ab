//! `walbench torture`: crash/restart testing a user runs on their own disk.
//!
//! The driver starts a postmaster with an acknowledged workload (`emit-tx`
//! with `--ack`, txid beside it by default), reads its ack lines as they
//! come (`server`), and loops: waits a random (seeded) 200–1000 ms, then
//!
//! * kill mode: SIGKILLs one victim drawn from the `victims` table (a
//!   backend, the walwriter, the checkpointer, the startup process of a
//!   crash restart it provokes, or the postmaster, which it then starts
//!   again) and waits for the server to be ready again;
//! * power-loss mode: SIGKILLs the whole process group, rewrites the files
//!   from the I/O seam's journal as a power loss could leave them
//!   (`powerloss`), checks at once that every ack so far is still a COMMIT
//!   record on "disk" (before recovery could write new WAL over the same
//!   LSNs), and starts the server again.
//!
//! At the end (and with `--check-every-cycle` after every cycle) it stops
//! the server and checks the whole history (`history`). Recovery time is
//! measured from the kill (child victims) or from the new start (postmaster
//! and power loss: walbench's own wait and rewrite are not the server's)
//! to the "ready to accept connections" line, which the postmaster logs
//! once the startup process has exited 0.
//!
//! Invariants: every choice comes from `--seed` (a run replays its victims
//! and rewrites, not its timing); no server process survives walbench
//! (`server::Server` kills its group on drop); a failed run keeps the data
//! directory with `torture-history.txt` and `torture-server.log`.

pub mod attached;
pub mod history;
pub mod powerloss;
pub mod report;
pub mod server;
pub mod victims;
pub mod worker;

use crate::cli;
use crate::variants::Variant;
use report::{Event, Summary};
use server::{Server, StartSpec, START_TIMEOUT};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use victims::{How, VICTIMS};

/// The postmaster's exit status when recovery refuses damaged WAL.
const EXIT_WAL_DAMAGED: i32 = backend::startup::EXIT_WAL_DAMAGED;

/// A small seeded generator (splitmix64): runs replay from their seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// `walbench torture`'s options.
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// Data directory (created with init if empty or missing)
    #[arg(short = 'D', value_name = "DIR")]
    pub datadir: PathBuf,
    /// Kills (or power losses) to run [default: 20; with --kill-attached 200]
    #[arg(long, value_name = "N", value_parser = positive, conflicts_with = "minutes")]
    pub cycles: Option<u64>,
    /// Run for M minutes instead of a number of cycles
    #[arg(long, value_name = "M", value_parser = minutes)]
    pub minutes: Option<f64>,
    /// Simulate power losses: kill everything, then drop, keep or tear
    /// (512-byte sectors) every write not yet fdatasynced and undo directory
    /// changes not yet fsynced
    #[arg(long)]
    pub power_loss: bool,
    /// Write the report as JSON (mode, cycles, acknowledged, lost, ...)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Workload backends (1..=1024)
    #[arg(long, value_name = "N", default_value = "4", value_parser = count::<1024>)]
    pub workers: u32,
    /// emit-tx:SIZE or emit-tx+txid:SIZE (a workload whose commits are
    /// acknowledged)
    #[arg(long, value_name = "KIND", default_value = "emit-tx+txid:100", value_parser = acknowledged)]
    pub workload: String,
    /// Seed of every random choice [default: from the clock]
    #[arg(long, value_name = "S", default_value_t = clock_seed(), hide_default_value = true)]
    pub seed: u64,
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = cli::setting, help = cli::SET_HELP)]
    pub sets: Vec<String>,
    /// Run with one of walbench's variants (its settings come before --set's)
    #[arg(long = "variant", value_name = "NAME", value_parser = variant, help = variant_help())]
    pub variants: Vec<&'static Variant>,
    /// Stop the server and check the history after every cycle
    #[arg(long)]
    pub check_every_cycle: bool,
    /// Keep the data directory even when the run passes
    #[arg(long)]
    pub keep: bool,
    /// Also run CMD as a supervised worker that commits through the worker
    /// library and prints `ack LSN` lines (e.g. the example producer with
    /// --tx --ack); a victim too: "worker"
    #[arg(long, value_name = "CMD", value_parser = worker_cmd)]
    pub worker_cmd: Option<String>,
    /// Kill only attached processes: --library-workers supervised copies of
    /// --worker-cmd and --clients connection backends (sessions walbench
    /// runs), 50-400 ms apart (default 200 kills); each must be cleaned up
    /// after without a restart unless it died inside a shared critical
    /// section
    #[arg(long, requires = "worker_cmd", conflicts_with = "power_loss")]
    pub kill_attached: bool,
    /// With --kill-attached: supervised library workers (1..=64)
    #[arg(long, value_name = "N", default_value = "2", value_parser = count::<64>)]
    pub library_workers: u32,
    /// With --kill-attached: client sessions over the protocol (1..=64)
    #[arg(long, value_name = "N", default_value = "2", value_parser = count::<64>)]
    pub clients: u32,
}

/// What `--help` says after the options: how a cycle goes, what is
/// checked, the exit status.
pub fn after_help() -> String {
    let victims: Vec<&str> = VICTIMS.iter().map(|v| v.name).collect();
    format!(
        "Each cycle waits 200-1000 ms (seeded), then kills one of: {} (kill mode), or\n\
         SIGKILLs the whole server and rewrites its files as a power loss could leave them\n\
         (--power-loss; the I/O seam journals unsynced writes through\n\
         WALSHM_POWERLOSS_JOURNAL, which walbench sets). At the end (and with\n\
         --check-every-cycle after each cycle) the server is stopped and the history checked:\n\
         every acknowledged LSN is a COMMIT record, no XID commits twice, the WAL ends\n\
         cleanly with nothing valid after it, and pg_waldump (if installed) agrees.\n\
         Progress on stderr, the report on stdout. Exit 0 only if nothing was lost and no\n\
         check failed; otherwise 1, keeping DIR with torture-history.txt (acks, victims,\n\
         times) and torture-server.log. A directory walbench created is removed after a\n\
         passing run unless --keep.",
        victims.join(", ")
    )
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// A positive integer.
fn positive(v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| "a positive integer".to_string())
}

/// A count 1..=MAX.
fn count<const MAX: u32>(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX).contains(n))
        .ok_or_else(|| format!("1..={MAX}"))
}

/// `--minutes`: 0 < M <= 100000.
fn minutes(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|m| *m > 0.0 && *m <= 100_000.0)
        .ok_or_else(|| "0 < M <= 100000".to_string())
}

/// `--workload`: one whose commits are acknowledged.
fn acknowledged(v: &str) -> Result<String, String> {
    if !backend::workload::Workload::parse(v)?.waits_for_commit() {
        return Err("it acknowledges nothing (use emit-tx:SIZE or emit-tx+txid:SIZE)".into());
    }
    Ok(v.to_string())
}

fn variant_help() -> String {
    format!(
        "Run one of walbench's variants: {}",
        crate::variants::names(crate::VARIANTS)
    )
}

fn variant(v: &str) -> Result<&'static Variant, String> {
    crate::variants::find(crate::VARIANTS, v).ok_or_else(|| {
        format!(
            "unknown variant (valid: {})",
            crate::variants::names(crate::VARIANTS)
        )
    })
}

fn worker_cmd(v: &str) -> Result<String, String> {
    worker::comm_of(v).ok_or("--worker-cmd needs a program")?;
    Ok(v.to_string())
}

/// The settings of a run (the variants', then --set's), which must keep
/// fsync on.
pub fn check(mut o: Options) -> Result<Options, String> {
    let knobs = o.variants.iter().flat_map(|v| v.knobs);
    let mut sets: Vec<String> = knobs.map(|k| k.assignment()).collect();
    sets.append(&mut o.sets);
    o.sets = sets;
    let mut s = shmem::Settings::default();
    s.set_assignment("fsync=on").map_err(|e| e.to_string())?;
    for a in &o.sets {
        s.set_assignment(a).map_err(|e| e.to_string())?;
    }
    if !s.fsync {
        return Err("torture needs fsync=on: without it nothing is promised to survive".into());
    }
    Ok(o)
}

/// Files kept beside the WAL for a bug report.
const HISTORY_FILE: &str = "torture-history.txt";
const LOG_FILE: &str = "torture-server.log";
const JOURNAL_FILE: &str = "torture-powerloss.journal";

/// Pause before each kill, ms.
const PAUSE_MS: (u64, u64) = (200, 1000);
/// How long a kill-mode cycle watches for the startup process it provoked.
const STARTUP_WATCH: Duration = Duration::from_secs(5);

/// A torture run in progress.
struct Run<'a> {
    o: &'a Options,
    spec: StartSpec,
    journal: Option<PathBuf>,
    rng: Rng,
    t0: Instant,
    /// (LSN, seconds since start, cycle) of every ack read.
    acks: Vec<(u64, f64, u64)>,
    /// Acks before this index were checked right after a power loss...
    checked_upto: usize,
    /// ...except these, in segments checkpoints had removed.
    not_on_disk: HashSet<u64>,
    sum: Summary,
    cycle: u64,
}

/// The server's command line in the kill and power-loss modes: the
/// workload with acks, a checkpoint every second, fsync on, then the
/// user's settings and worker command.
fn server_args(o: &Options) -> Vec<String> {
    let mut args: Vec<String> = [
        "--workers",
        &o.workers.to_string(),
        "--workload",
        &o.workload,
        "--ack",
        "--set",
        "checkpoint_timeout=1",
        "--set",
        "fsync=on",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for s in &o.sets {
        args.extend(["--set".to_string(), s.clone()]);
    }
    if let Some(cmd) = &o.worker_cmd {
        args.extend(["--worker".to_string(), worker::worker_arg(cmd)]);
    }
    args
}

pub fn run(o: &Options) -> Result<(), String> {
    let postmaster = crate::postmaster_path()?;
    let created =
        !o.datadir.exists() || std::fs::read_dir(&o.datadir).is_ok_and(|mut d| d.next().is_none());
    std::fs::create_dir_all(&o.datadir)
        .map_err(|e| format!("could not create \"{}\": {e}", o.datadir.display()))?;
    crate::command::init_if_needed(
        &postmaster,
        &o.datadir,
        &["--wal-segment-size", "1", "--set", "wal_keep_size=1000000"],
    )?;
    let datadir = o.datadir.canonicalize().map_err(|e| e.to_string())?;
    let journal = o.power_loss.then(|| datadir.join(JOURNAL_FILE));
    let args = server_args(o);
    let env = journal
        .iter()
        .map(|j| (backend::powerloss::ENV.to_string(), j.display().to_string()))
        .collect();
    if o.kill_attached {
        let spec = StartSpec {
            postmaster,
            datadir: datadir.clone(),
            args: vec![],
            env,
            log: datadir.join(LOG_FILE),
        };
        attached::run(o, spec)?;
        if created && !o.keep {
            let _ = std::fs::remove_dir_all(&datadir);
        }
        return Ok(());
    }
    let mut r = Run {
        o,
        spec: StartSpec {
            postmaster,
            datadir: datadir.clone(),
            args,
            env,
            log: datadir.join(LOG_FILE),
        },
        journal,
        rng: Rng::new(o.seed),
        t0: Instant::now(),
        acks: vec![],
        checked_upto: 0,
        not_on_disk: HashSet::new(),
        sum: Summary {
            power_loss: o.power_loss,
            seed: o.seed,
            workload: o.workload.clone(),
            settings: o.sets.clone(),
            ..Summary::default()
        },
        cycle: 0,
    };
    r.torture();
    r.report(&datadir)?;
    if created && !o.keep {
        let _ = std::fs::remove_dir_all(&datadir);
    }
    Ok(())
}

impl Run<'_> {
    /// The summary after the last cycle: printed, written as JSON when
    /// asked, the evidence kept beside the WAL; an error if any
    /// acknowledged commit was lost or a rule was broken.
    fn report(&mut self, datadir: &Path) -> Result<(), String> {
        self.sum.cycles = self.cycle;
        self.sum.seconds = self.t0.elapsed().as_secs_f64();
        self.sum.acknowledged = (self.acks.len() as u64).saturating_sub(self.sum.unverifiable);
        self.sum.pg_waldump_installed = history::pg_waldump_installed();
        eprintln!();
        let evidence = report::history(&self.sum.events, &self.acks);
        let _ = std::fs::write(datadir.join(HISTORY_FILE), evidence);
        print!("{}", self.sum.text());
        if let Some(j) = &self.o.json {
            crate::report::write_file(j, self.sum.json().as_bytes())?;
        }
        if !self.sum.passed() {
            return Err(format!(
                "{} acknowledged commits lost, {} violations; evidence kept in \"{}\" ({HISTORY_FILE}, {LOG_FILE})",
                self.sum.lost.len(),
                self.sum.violations.len(),
                datadir.display()
            ));
        }
        Ok(())
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn more_cycles(&self) -> bool {
        match (self.o.cycles, self.o.minutes) {
            (_, Some(m)) => self.t0.elapsed().as_secs_f64() < m * 60.0,
            (Some(n), None) => self.cycle < n,
            (None, None) => self.cycle < 20,
        }
    }

    fn violation(&mut self, v: String) {
        self.sum.violations.push(v);
    }

    /// Starts the server and waits until it is ready.
    fn start(&mut self) -> Result<(Server, Instant), String> {
        self.start_with(&[]).map_err(|(e, _)| e)
    }

    /// [`Run::start`] with extra arguments; on failure also the
    /// postmaster's exit code.
    fn start_with(&mut self, extra: &[&str]) -> Result<(Server, Instant), (String, Option<i32>)> {
        let started = Instant::now();
        let mut s = Server::start(&self.spec, extra).map_err(|e| (e, None))?;
        match s.wait_ready(1, START_TIMEOUT) {
            Ok(_) => Ok((s, started)),
            Err(e) => Err((e, s.exited.flatten())),
        }
    }

    /// The start after a power loss. The startup process refuses to start
    /// (exit 3) only when valid WAL follows the first unreadable record
    /// beyond the unsynced window (the rest of that record's segment, see
    /// `walformat::lookahead`); a power loss cannot leave such WAL, since
    /// the writer syncs each segment before it writes the next. So a
    /// refusal is a violation (counted in `refused_starts` as well); the
    /// documented remedy, `--discard-damaged-wal`, is then applied so the
    /// run goes on (the acks were checked before it: nothing acknowledged
    /// may lie in the discarded range).
    fn start_after_power_loss(&mut self) -> Result<(Server, Instant, bool), String> {
        match self.start_with(&[]) {
            Ok((s, t)) => Ok((s, t, false)),
            Err((_, Some(EXIT_WAL_DAMAGED))) => {
                self.sum.refused_starts += 1;
                self.violation(format!(
                    "cycle {}: start refused after a power loss (exit {EXIT_WAL_DAMAGED}: valid WAL beyond the unsynced window after the first unreadable record)",
                    self.cycle
                ));
                let (s, t) = self
                    .start_with(&["--discard-damaged-wal"])
                    .map_err(|(e, _)| format!("start with --discard-damaged-wal: {e}"))?;
                Ok((s, t, true))
            }
            Err((e, _)) => Err(e),
        }
    }

    /// The whole run: cycles, then the final check.
    fn torture(&mut self) {
        let mut server = match self.start() {
            Ok((s, _)) => s,
            Err(e) => return self.violation(format!("first start: {e}")),
        };
        while self.more_cycles() {
            self.cycle += 1;
            let pause = PAUSE_MS.0 + self.rng.below(PAUSE_MS.1 - PAUSE_MS.0);
            std::thread::sleep(Duration::from_millis(pause));
            let next = if self.o.power_loss {
                self.power_loss(server)
            } else {
                self.kill_one(server)
            };
            server = match next {
                Ok(s) => s,
                Err(e) => return self.violation(format!("cycle {}: {e}", self.cycle)),
            };
            self.progress();
            if self.o.check_every_cycle && self.more_cycles() {
                if !self.stop_and_check(server) {
                    return;
                }
                server = match self.start() {
                    Ok((s, _)) => s,
                    Err(e) => return self.violation(format!("restart after a check: {e}")),
                };
            }
        }
        self.stop_and_check(server);
    }

    /// The live progress line.
    fn progress(&self) {
        let of = self.o.cycles.map_or("?".to_string(), |n| n.to_string());
        let last = self.sum.events.last();
        let rec = last
            .and_then(|e| e.recovery_ms)
            .map_or("-".to_string(), |r| format!("{r:.0} ms"));
        eprint!(
            "\rtorture: cycle {}/{of}  victim {:<12}  acks {}  last recovery {rec}  lost {}   ",
            self.cycle,
            last.map_or("-", |e| e.victim),
            self.acks.len(),
            self.sum.lost.len()
        );
    }

    /// Moves the acks the server printed so far into the history.
    fn collect(&mut self, s: &mut Server) {
        for (lsn, at) in s.take_acks() {
            let secs = at.duration_since(self.t0).as_secs_f64();
            self.acks.push((lsn, secs, self.cycle));
        }
    }

    fn event(&mut self, victim: &'static str, pid: i32, recovery: Option<Duration>, note: &str) {
        let at = self.now();
        self.sum.events.push(Event {
            cycle: self.cycle,
            victim,
            pid,
            at,
            recovery_ms: recovery.map(|d| d.as_secs_f64() * 1000.0),
            note: note.to_string(),
        });
    }

    /// One kill-mode cycle.
    fn kill_one(&mut self, mut s: Server) -> Result<Server, String> {
        let v = VICTIMS[self.rng.below(VICTIMS.len() as u64) as usize];
        match v.how {
            How::Child(comm) => self.kill_child(&mut s, v.name, comm).map(|()| s),
            How::LibraryWorker => match self.o.worker_cmd.as_deref().and_then(worker::comm_of) {
                Some(comm) => self.kill_child(&mut s, v.name, &comm),
                None => self.kill_child(&mut s, "backend", "backend"),
            }
            .map(|()| s),
            How::DuringRecovery => self.kill_startup(&mut s).map(|()| s),
            How::Postmaster => self.kill_postmaster(s),
        }
    }

    /// SIGKILLs a child named `comm` (a backend if there is none) and waits
    /// for the crash restart.
    fn kill_child(&mut self, s: &mut Server, name: &'static str, comm: &str) -> Result<(), String> {
        let ready = s.ready_count();
        let (name, pids) = match victims::children_named(s.pid, comm) {
            p if !p.is_empty() => (name, p),
            _ => ("backend", victims::children_named(s.pid, "backend")),
        };
        let Some(&pid) = pids.get(self.rng.below(pids.len() as u64) as usize) else {
            return Err(format!("no {comm} or backend process to kill"));
        };
        let restarts_before = attached::restarts_so_far(s);
        let killed = Instant::now();
        victims::sigkill(pid);
        if name == "worker" && cleaned_up_after(s, pid, restarts_before) {
            // A library worker's death is cleaned up after without a
            // restart unless it held shared state (`backend::abandoned`).
            self.collect(s);
            self.event(name, pid, None, "cleaned up without a restart");
            return Ok(());
        }
        let back = s.wait_ready(ready + 1, START_TIMEOUT);
        self.collect(s);
        let back = back.map_err(|e| format!("after kill -9 of {name} {pid}: {e}"))?;
        self.event(name, pid, Some(back - killed), "");
        Ok(())
    }

    /// Provokes a crash restart (kill -9 of a backend) and SIGKILLs its
    /// startup process as soon as it shows up.
    fn kill_startup(&mut self, s: &mut Server) -> Result<(), String> {
        let ready = s.ready_count();
        let backends = victims::children_named(s.pid, "backend");
        let Some(&trigger) = backends.get(self.rng.below(backends.len() as u64) as usize) else {
            return Err("no backend to provoke a crash restart with".into());
        };
        victims::sigkill(trigger);
        let deadline = Instant::now() + STARTUP_WATCH;
        let mut startup = None;
        while Instant::now() < deadline && s.ready_count() == ready {
            if let Some(&p) = victims::children_named(s.pid, "startup").first() {
                startup = Some((p, Instant::now()));
                victims::sigkill(p);
                break;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        let back = s.wait_ready(ready + 1, START_TIMEOUT);
        self.collect(s);
        let back = back.map_err(|e| format!("after kill -9 during recovery: {e}"))?;
        match startup {
            Some((pid, killed)) => self.event(
                "startup",
                pid,
                Some(back - killed),
                &format!("after backend {trigger}"),
            ),
            None => self.event("backend", trigger, None, "startup process not seen in time"),
        }
        Ok(())
    }

    /// SIGKILLs the postmaster, waits for its children to go, checks the
    /// acks so far against the WAL and starts it again.
    fn kill_postmaster(&mut self, mut s: Server) -> Result<Server, String> {
        let pid = s.pid;
        victims::sigkill(pid);
        s.wait_gone(START_TIMEOUT)
            .map_err(|e| format!("after kill -9 of the postmaster: {e}"))?;
        self.collect(&mut s);
        drop(s);
        self.check_acks_on_disk()?;
        let (s, started) = self.start()?;
        self.event("postmaster", pid, Some(started.elapsed()), "");
        Ok(s)
    }

    /// One simulated power loss.
    fn power_loss(&mut self, mut s: Server) -> Result<Server, String> {
        let pid = s.pid;
        victims::sigkill(-pid);
        s.wait_gone(START_TIMEOUT)
            .map_err(|e| format!("after SIGKILL of the server's process group: {e}"))?;
        self.collect(&mut s);
        drop(s);
        let journal = self.journal.clone().expect("power-loss mode has a journal");
        let o = powerloss::simulate(&journal, &mut self.rng)?;
        for f in &o.synced_without_entry {
            if !self.sum.rewrites.synced_without_entry.contains(f) {
                self.violation(format!(
                    "\"{}\" was fdatasynced before its directory entry was durable (no directory fsync after its creation or rename)",
                    f.display()
                ));
            }
        }
        self.sum.rewrites.add(&o);
        self.check_acks_on_disk()?;
        let (s, started, refused) = self.start_after_power_loss()?;
        let note = format!(
            "writes kept {} dropped {} torn {}, creations undone {}, renames undone {}{}",
            o.writes_kept,
            o.writes_dropped,
            o.writes_torn,
            o.creates_undone,
            o.renames_undone,
            if refused {
                "; start refused (WAL damaged before its end), restarted with --discard-damaged-wal"
            } else {
                ""
            }
        );
        self.event("power-loss", pid, Some(started.elapsed()), &note);
        Ok(s)
    }

    /// With the server down: every ack since the last such check must be a
    /// COMMIT record in the WAL as it is now, before recovery runs.
    fn check_acks_on_disk(&mut self) -> Result<(), String> {
        let new: Vec<u64> = self.acks[self.checked_upto..].iter().map(|a| a.0).collect();
        let (lost, removed) = history::acks_present(&self.spec.datadir, &new)?;
        self.checked_upto = self.acks.len();
        self.not_on_disk.extend(removed);
        for l in lost {
            if !self.sum.lost.contains(&l) {
                self.sum.lost.push(l);
            }
        }
        Ok(())
    }

    /// Fast shutdown and the full history check; false if the run cannot
    /// go on.
    fn stop_and_check(&mut self, mut s: Server) -> bool {
        let stopped = s.stop(START_TIMEOUT);
        self.collect(&mut s);
        drop(s);
        match stopped {
            Ok(Some(0)) => {}
            Ok(code) => {
                self.violation(format!("fast shutdown ended with status {code:?}, not 0"));
                return false;
            }
            Err(e) => {
                self.violation(format!("fast shutdown: {e}"));
                return false;
            }
        }
        let all: Vec<u64> = self.acks.iter().map(|a| a.0).collect();
        match history::check(&self.spec.datadir, &all) {
            Ok(v) => {
                for l in v.lost {
                    if !self.sum.lost.contains(&l) {
                        self.sum.lost.push(l);
                    }
                }
                self.sum.violations.extend(v.violations);
                self.sum.records_checked = v.records;
                // Acks checked on disk after a power loss were checked.
                let on_disk: HashSet<u64> = self.acks[..self.checked_upto]
                    .iter()
                    .map(|a| a.0)
                    .filter(|a| !self.not_on_disk.contains(a))
                    .collect();
                let never = |a: &&u64| !on_disk.contains(*a);
                self.sum.unverifiable = v.unverifiable.iter().filter(never).count() as u64;
                self.sum.pg_waldump = v.pg_waldump;
                true
            }
            Err(e) => {
                self.violation(format!("history check: {e}"));
                false
            }
        }
    }
}

/// Where walbench looks for the data directory's evidence files (tests).
pub fn evidence_files(datadir: &Path) -> [PathBuf; 2] {
    [datadir.join(HISTORY_FILE), datadir.join(LOG_FILE)]
}

/// Waits for the server's verdict on the death of library worker `pid`
/// (`attached::verdict_so_far`): true once the cleaner's line names it,
/// false once a crash restart began (a new "ready" line follows) or after
/// `START_TIMEOUT`.
fn cleaned_up_after(s: &Server, pid: i32, restarts_before: usize) -> bool {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        match attached::verdict_so_far(s, pid, restarts_before) {
            Some(attached::Verdict::Cleaned) => return true,
            Some(attached::Verdict::Restarted(_)) => return false,
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse_mode, Mode};

    fn parse(s: &str) -> Result<Options, String> {
        let args: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        let pick = |m| match m {
            Mode::Torture(o) => Some(o),
            _ => None,
        };
        check(parse_mode("torture", &args, pick)?.expect("not a help request"))
    }

    #[test]
    fn variants_settings_come_first_and_fsync_stays_on() {
        let v = &crate::VARIANTS[1];
        let o = parse(&format!(
            "-D d --variant {} --set wal_insert_locks=2",
            v.name
        ))
        .unwrap();
        let mut want: Vec<String> = v.knobs.iter().map(|k| k.assignment()).collect();
        want.push("wal_insert_locks=2".into());
        assert_eq!(o.sets, want);
        assert!(parse("-D d --set fsync=off")
            .unwrap_err()
            .contains("fsync=on"));
        for bad in [
            "--cycles 3",
            "-D d --cycles 3 --minutes 1",
            "-D d --kill-attached",
            "-D d --workload emit:100",
            "-D d --workers 0",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
