//! Command-line parsing for `postmaster` (hand-written: three subcommands
//! and a handful of flags do not need a parser crate, and the errors say
//! exactly what is wrong).

use backend::workload::{Workload, WORKLOAD_HELP};
use shmem::settings::SETTINGS_HELP;
use std::path::PathBuf;

pub struct InitOptions {
    pub datadir: PathBuf,
    pub seg_size: u64,
    pub sets: Vec<String>,
    /// File holding the TCP password (its verifier goes to walshm.conf).
    pub pwfile: Option<PathBuf>,
}

pub struct StartOptions {
    pub datadir: PathBuf,
    pub sets: Vec<String>,
    pub workers: u32,
    pub workload: Option<Workload>,
    pub ack: bool,
    /// `--discard-damaged-wal`: start even if WAL is damaged before its end.
    pub discard_damaged_wal: bool,
    /// File holding the TCP password (overrides walshm.conf's verifier).
    pub pwfile: Option<PathBuf>,
}

pub struct WaldumpOptions {
    pub datadir: PathBuf,
    pub start: Option<u64>,
    pub stats: bool,
    pub quiet: bool,
}

pub enum Command {
    Help(String),
    Init(InitOptions),
    Start(StartOptions),
    Waldump(WaldumpOptions),
}

pub fn help_text() -> String {
    let mut s = String::from(
        "postmaster: the walshm server (a multi-process WAL runtime, PostgreSQL 15 WAL format)

Usage:
  postmaster init -D DIR [--wal-segment-size MB] [--pwfile FILE] [--set NAME=VALUE ...]
      Create a data directory (mode 0700, files 0600): configuration file,
      control file, first WAL segment with a shutdown checkpoint. DIR must
      not exist or be empty. --pwfile FILE (mode 0600, first line) or the
      WALSHM_PASSWORD environment variable: the TCP password, stored in
      walshm.conf only as a SCRAM-SHA-256 verifier.
  postmaster start -D DIR [--pwfile FILE] [--set NAME=VALUE ...] [--workers N --workload KIND]
                    [--discard-damaged-wal]
      Run the server in the foreground. SIGTERM/SIGINT: fast shutdown (backends
      stopped, WAL flushed, exit 0). SIGQUIT: immediate shutdown. DIR must
      have mode 0700. --pwfile / WALSHM_PASSWORD: as for init, for this run.
      Exit status 3: refused to start because WAL is damaged before its end
      (valid WAL follows the first unreadable record); nothing was changed.
      --discard-damaged-wal  accept losing the WAL after the damage: it is
                        moved to DIR/pg_wal_discarded/LSN-TIME/ (never deleted)
                        and the server starts at the damage
      --workers N       fork N backends running --workload (0..=4096)
      --workload KIND   ",
    );
    s.push_str(WORKLOAD_HELP);
    s.push_str(
        "
  postmaster waldump -D DIR [--start LSN] [--stats] [--quiet]
      Print the WAL records of DIR with the project's own reader, and where
      and why WAL ends. --stats: totals per record kind.

Settings (--set NAME=VALUE, or NAME = VALUE lines in DIR/walshm.conf):
",
    );
    for (name, values, what) in SETTINGS_HELP {
        s.push_str(&format!("  {name:<20} {values:<45} {what}\n"));
    }
    s
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(|s| s.as_str())
        .ok_or_else(|| format!("option {flag} needs a value"))
}

pub fn parse(args: &[String]) -> Result<Command, String> {
    let Some(sub) = args.first() else {
        return Ok(Command::Help(help_text()));
    };
    if sub == "--help" || sub == "-h" || sub == "help" {
        return Ok(Command::Help(help_text()));
    }
    let rest = &args[1..];
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(Command::Help(help_text()));
    }
    let mut datadir = None;
    let mut sets = Vec::new();
    let mut seg_mb: Option<u64> = None;
    let mut workers = 0u32;
    let mut workload = None;
    let mut ack = false;
    let mut discard_damaged_wal = false;
    let mut start = None;
    let mut stats = false;
    let mut quiet = false;
    let mut pwfile = None;
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].as_str();
        match (sub.as_str(), a) {
            (_, "-D") | (_, "--pgdata") => datadir = Some(PathBuf::from(value(rest, &mut i, a)?)),
            ("init" | "start", "--set" | "-c") => sets.push(value(rest, &mut i, a)?.to_string()),
            ("init" | "start", "--pwfile") => pwfile = Some(PathBuf::from(value(rest, &mut i, a)?)),
            ("init", "--wal-segment-size") => {
                let v = value(rest, &mut i, a)?;
                seg_mb = Some(v.parse().map_err(|_| {
                    format!(
                        "invalid --wal-segment-size \"{v}\" (MB, a power of two from 1 to 1024)"
                    )
                })?);
            }
            ("start", "--workers") => {
                let v = value(rest, &mut i, a)?;
                workers = v
                    .parse()
                    .ok()
                    .filter(|n| *n <= 4096)
                    .ok_or_else(|| format!("invalid --workers \"{v}\" (0..=4096)"))?;
            }
            ("start", "--workload") => workload = Some(Workload::parse(value(rest, &mut i, a)?)?),
            ("start", "--ack") => ack = true,
            ("start", "--discard-damaged-wal") => discard_damaged_wal = true,
            ("waldump", "--start") => {
                let v = value(rest, &mut i, a)?;
                start = Some(
                    walformat::parse_lsn(v)
                        .map_err(|_| format!("invalid LSN \"{v}\" (expected X/XXXXXXXX)"))?,
                );
            }
            ("waldump", "--stats") => stats = true,
            ("waldump", "--quiet") => quiet = true,
            _ => return Err(format!("unknown option \"{a}\" for \"{sub}\"")),
        }
        i += 1;
    }
    let need_dir = || {
        datadir
            .clone()
            .ok_or_else(|| format!("\"{sub}\" needs -D DIR (the data directory)"))
    };
    match sub.as_str() {
        "init" => {
            let seg_size = match seg_mb {
                None => walformat::DEFAULT_SEG_SIZE,
                Some(mb) => {
                    let bytes = mb.saturating_mul(1 << 20);
                    walformat::Geometry::new(bytes)
                        .map_err(|_| format!("invalid --wal-segment-size {mb} (MB, a power of two from 1 to 1024)"))?
                        .seg_size
                }
            };
            Ok(Command::Init(InitOptions {
                datadir: need_dir()?,
                seg_size,
                sets,
                pwfile,
            }))
        }
        "start" => {
            if workers > 0 && workload.is_none() {
                return Err(format!(
                    "--workers needs --workload (one of: {WORKLOAD_HELP})"
                ));
            }
            if workload.is_some() && workers == 0 {
                return Err("--workload needs --workers N (N >= 1)".into());
            }
            if ack && !workload.is_some_and(|w| w.waits_for_commit()) {
                return Err(
                    "--ack needs a workload that waits for its commit to be flushed (emit-tx:SIZE or emit-tx+txid:SIZE)"
                        .into(),
                );
            }
            Ok(Command::Start(StartOptions {
                datadir: need_dir()?,
                sets,
                workers,
                workload,
                ack,
                discard_damaged_wal,
                pwfile,
            }))
        }
        "waldump" => Ok(Command::Waldump(WaldumpOptions {
            datadir: need_dir()?,
            start,
            stats,
            quiet,
        })),
        other => Err(format!(
            "unknown command \"{other}\" (expected init, start or waldump)"
        )),
    }
}
