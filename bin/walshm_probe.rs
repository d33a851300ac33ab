//! `walshm-probe`: a minimal process that attaches to a running server
//! through `shmem::register`, for checking a server's registration by hand
//! and for the tests of worker attach (tests/workers_supervised.rs). It
//! does nothing in shared memory but write its PID into its proc slot —
//! except with the test-only `--hold-insert-locks` (tests/dead_generation.rs),
//! which takes every WAL insertion lock exclusively and holds them.
//!
//! ```text
//! walshm-probe attach -D DIR [--observer] [--cycles N] [OPTIONS]
//! walshm-probe supervised [OPTIONS]      (run by postmaster start --worker)
//! OPTIONS: --hold-ms MS       stay attached MS milliseconds (default 0)
//!          --until-stdin-eof  stay attached until stdin closes
//!          --until-ended      stay attached until the generation ends, then
//!                             print "ended generation=G" (and no detach)
//!          --reattach         after --until-ended: attach again once
//!          --no-detach        exit without detaching
//!          --exit CODE        exit code after detaching (default 0)
//!          --status-file F    append each attach line to F as well
//!          --hold-insert-locks  (test only) take every WAL insertion lock
//!                             exclusively, print "holding insert_locks=N",
//!                             then hold as asked
//! ```
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

#[derive(Default)]
struct Options {
    supervised: bool,
    datadir: Option<PathBuf>,
    observer: bool,
    cycles: u32,
    hold: Duration,
    until_stdin_eof: bool,
    until_ended: bool,
    reattach: bool,
    no_detach: bool,
    exit: i32,
    status_file: Option<PathBuf>,
    hold_insert_locks: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("attach") => {}
        Some("supervised") => o.supervised = true,
        other => return Err(format!("expected attach or supervised, got {other:?}")),
    }
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        let number = |v: String| v.parse::<u64>().map_err(|_| format!("bad number {v:?}"));
        match a.as_str() {
            "-D" => o.datadir = Some(PathBuf::from(value()?)),
            "--observer" => o.observer = true,
            "--cycles" => o.cycles = number(value()?)? as u32,
            "--hold-ms" => o.hold = Duration::from_millis(number(value()?)?),
            "--until-stdin-eof" => o.until_stdin_eof = true,
            "--until-ended" => o.until_ended = true,
            "--reattach" => o.reattach = true,
            "--no-detach" => o.no_detach = true,
            "--exit" => o.exit = number(value()?)? as i32,
            "--status-file" => o.status_file = Some(PathBuf::from(value()?)),
            "--hold-insert-locks" => o.hold_insert_locks = true,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if !o.supervised && o.datadir.is_none() {
        return Err("attach needs -D DIR".into());
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
    let until = Instant::now() + o.hold;
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("walshm-probe: {e}");
            std::process::exit(5);
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
