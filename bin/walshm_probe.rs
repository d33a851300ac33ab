//! `walshm-probe`: a minimal process that attaches to a running server
//! through `shmem::register`, for checking a server's registration by hand
//! and for the tests of worker attach (tests/workers/workers_supervised.rs). It
//! does nothing in shared memory but write its PID into its proc slot —
//! except with the test-only `--hold-insert-locks` (tests/workers/dead_generation.rs),
//! which takes every WAL insertion lock exclusively and holds them.
//!
//! `walshm-probe attach -D DIR [OPTIONS]` or `walshm-probe supervised
//! [OPTIONS]` (run by postmaster start --worker); `--help` lists the
//! options: how long to stay attached (`--hold-ms`, `--until-stdin-eof`,
//! `--until-ended`), whether to detach and the exit code, `--cycles N`.
//!
//! Output (stdout, one line each, for programs): `attached generation=G
//! procno=P|none pid=PID t_ms=UNIX_MS`, `cycles=N`, `ended generation=G`, or
//! `error=KIND` (KIND: no_server, full, starting_up, shutting_down,
//! refused, other) with the message on stderr. Exit status: 0 or --exit,
//! 2 no server, 3 full, 4 starting up or shutting down, 5 any other error.
//! SIGTERM ends a hold (then detach and exit as asked).

use shmem::register::{self, Kind, RegisterError, Registration};
use shmem::sync::Ordering;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

static GOT_SIGTERM: AtomicBool = AtomicBool::new(false);

/// Stays attached as the options say, then detaches (or not) and exits.
#[derive(clap::Args)]
struct Options {
    #[arg(skip)]
    supervised: bool,
    /// The data directory of the server to attach to (attach)
    #[arg(short = 'D', value_name = "DIR")]
    datadir: Option<PathBuf>,
    /// Attach as an observer (no proc slot)
    #[arg(long)]
    observer: bool,
    /// Attach and detach N times, then print `cycles=N`
    #[arg(long, value_name = "N", default_value = "0")]
    cycles: u32,
    /// Stay attached MS milliseconds
    #[arg(long, value_name = "MS", default_value = "0")]
    hold_ms: u64,
    /// Stay attached until stdin closes
    #[arg(long)]
    until_stdin_eof: bool,
    /// Stay attached until the generation ends, then print `ended
    /// generation=G` (and no detach)
    #[arg(long)]
    until_ended: bool,
    /// After --until-ended: attach again once
    #[arg(long)]
    reattach: bool,
    /// Exit without detaching
    #[arg(long)]
    no_detach: bool,
    /// Exit code after detaching
    #[arg(long, value_name = "CODE", default_value = "0",
          value_parser = clap::value_parser!(i32).range(0..=255))]
    exit: i32,
    /// Append each attach line to F as well
    #[arg(long, value_name = "F")]
    status_file: Option<PathBuf>,
    /// (Test only) take every WAL insertion lock exclusively, print
    /// `holding insert_locks=N`, then hold as asked
    #[arg(long)]
    hold_insert_locks: bool,
}

#[derive(clap::Parser)]
#[command(
    name = "walshm-probe",
    about = "Attach to a running walshm server through its registration socket",
    after_help = "Exit status: 0 or --exit, 2 no server, 3 full, 4 starting up or shutting \
                  down, 5 any other error (a bad argument too)."
)]
enum Cli {
    /// Attach to the server on -D DIR
    Attach(Options),
    /// Attach to the server that started this process (postmaster start
    /// --worker)
    Supervised(Options),
}

/// The options, or clap's error (help included) for a bad command line.
fn parse() -> Result<Options, clap::Error> {
    let o = match <Cli as clap::Parser>::try_parse()? {
        Cli::Attach(o) => o,
        Cli::Supervised(o) => Options {
            supervised: true,
            ..o
        },
    };
    if !o.supervised && o.datadir.is_none() {
        let mut cmd = <Cli as clap::CommandFactory>::command();
        return Err(cmd.error(
            clap::error::ErrorKind::MissingRequiredArgument,
            "attach needs -D DIR",
        ));
    }
    Ok(o)
}

fn error_kind(e: &RegisterError) -> (&'static str, i32) {
    match e {
        RegisterError::NoServer { .. } => ("no_server", 2),
        RegisterError::Full { .. } => ("full", 3),
        RegisterError::StartingUp => ("starting_up", 4),
        RegisterError::ShuttingDown => ("shutting_down", 4),
        RegisterError::Refused => ("refused", 5),
        _ => ("other", 5),
    }
}

/// Prints a line on stdout (and the status file) in one write.
fn say(o: &Options, line: &str) {
    let text = format!("{line}\n");
    let _ = std::io::stdout().write_all(text.as_bytes());
    let _ = std::io::stdout().flush();
    if let Some(f) = &o.status_file {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(f);
        if let Ok(mut file) = file {
            let _ = file.write_all(text.as_bytes());
        }
    }
}

fn register(o: &Options) -> Result<Registration, RegisterError> {
    let kind = if o.observer {
        Kind::Observer
    } else {
        Kind::Worker
    };
    match (&o.datadir, o.supervised) {
        (_, true) => register::from_environment(kind),
        (Some(d), false) => register::connect(d, kind),
        (None, false) => Err(RegisterError::Io("no data directory".into())),
    }
}

fn attach(o: &Options) -> Result<Registration, RegisterError> {
    let reg = register(o)?;
    if let Some(p) = reg.procno {
        reg.shm.procs()[p as usize]
            .pid
            .store(std::process::id() as i32, Ordering::Relaxed);
    }
    let procno = reg.procno.map_or("none".into(), |p| p.to_string());
    let t_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    say(
        o,
        &format!(
            "attached generation={} procno={procno} pid={} t_ms={t_ms}",
            reg.generation,
            std::process::id()
        ),
    );
    Ok(reg)
}

/// Is stdin closed (EOF or error) now?
fn stdin_closed() -> bool {
    if shmem::sys::fd::poll_readable(&[0], Duration::ZERO) == 0 {
        return false;
    }
    let mut b = [0u8; 64];
    // Stdin is readable (poll said so).
    !matches!(shmem::sys::fd::read(0, &mut b), Ok(n) if n > 0)
}

/// Waits as the options say; true if the generation ended meanwhile.
fn hold(o: &Options, reg: &Registration) -> bool {
    let until = Instant::now() + Duration::from_millis(o.hold_ms);
    loop {
        if o.until_ended && reg.has_ended() {
            return true;
        }
        let waiting =
            o.until_ended || (o.until_stdin_eof && !stdin_closed()) || Instant::now() < until;
        if !waiting || GOT_SIGTERM.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cycles(o: &Options) -> Result<(), RegisterError> {
    for _ in 0..o.cycles {
        let reg = register(o)?;
        reg.detach()?;
    }
    say(o, &format!("cycles={}", o.cycles));
    Ok(())
}

fn run(o: &Options) -> Result<i32, RegisterError> {
    if o.cycles > 0 {
        cycles(o)?;
        return Ok(0);
    }
    let reg = attach(o)?;
    // Test only: a lock holder that the test kills (nothing releases the
    // locks but the end of this scope or the process).
    let env = match (o.hold_insert_locks, reg.procno) {
        (true, Some(p)) => Some(reg.shm.lock_env(p)),
        _ => None,
    };
    if let Some(env) = &env {
        let n = reg.shm.n_insert_locks();
        for i in 0..n {
            reg.shm
                .insert_lock(i)
                .lock
                .acquire(env, shmem::lwlock::LWLockMode::Exclusive);
        }
        say(o, &format!("holding insert_locks={n}"));
    }
    let ended = hold(o, &reg);
    if ended {
        // Nothing of an ended generation is touched any more.
        std::mem::forget(env);
    } else {
        drop(env);
    }
    if ended {
        say(o, &format!("ended generation={}", reg.generation));
        drop(reg);
        if o.reattach {
            let again = attach_retrying(o)?;
            again.detach()?;
        }
        return Ok(o.exit);
    }
    if o.no_detach {
        return Ok(o.exit);
    }
    reg.detach()?;
    Ok(o.exit)
}

/// Attaches, retrying for a while while the server starts up again.
fn attach_retrying(o: &Options) -> Result<Registration, RegisterError> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match attach(o) {
            Err(RegisterError::StartingUp | RegisterError::NoServer { .. })
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

fn main() {
    shmem::sys::abort_on_panic();
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 5 } else { 0 });
        }
    };
    // signal-hook's flag (SA_RESTART, as signal(3) installs).
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGTERM, &GOT_SIGTERM) {
        eprintln!("walshm-probe: {e}");
        std::process::exit(5);
    }
    let code = match run(&o) {
        Ok(code) => code,
        Err(e) => {
            let (kind, code) = error_kind(&e);
            say(&o, &format!("error={kind}"));
            eprintln!("walshm-probe: {e}");
            code
        }
    };
    std::process::exit(code);
}
