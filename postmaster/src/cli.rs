//! Command-line parsing for `postmaster` (hand-written: five subcommands
//! and a handful of flags do not need a parser crate, and the errors say
//! exactly what is wrong).
//!
//! Each subcommand has a table of its flags ([`Flag`]: spellings and what
//! the flag does to that subcommand's options) and a small function that
//! runs the table over the arguments, then checks what the flags imply
//! together. A flag not in the subcommand's table is an error naming it.
//! The settings part of `--help`, `postmaster settings` and its Markdown
//! form (docs/settings.md, checked by a test below) are generated from
//! `shmem::settings`.

use crate::supervised::WorkerSpec;
use backend::workload::{Workload, WORKLOAD_HELP};
use shmem::settings::{Context, Kind, Setting, Settings, SETTINGS};
use std::path::PathBuf;

pub struct InitOptions {
    pub datadir: PathBuf,
    pub seg_size: u64,
    pub sets: Vec<String>,
    /// File holding the TCP password (its verifier goes to walshm.conf).
    pub pwfile: Option<PathBuf>,
    /// File holding the replication role's password (the same).
    pub replication_pwfile: Option<PathBuf>,
    /// `--from-wal SRC`: restore from received or archived WAL.
    pub from_wal: Option<PathBuf>,
}

#[derive(Default)]
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
    /// File holding the replication role's password (the same).
    pub replication_pwfile: Option<PathBuf>,
    /// `--worker NAME=COMMAND [ARGS]`, in order (walshm.conf's `worker`
    /// lines come first, added at start).
    pub worker_commands: Vec<WorkerSpec>,
    /// Started with PostgreSQL's `postgres` command line (as `pg_ctl`
    /// runs it): SIGTERM is a smart shutdown, as PostgreSQL's; with
    /// `postmaster start` SIGTERM stays a fast one.
    pub postgres_cli: bool,
}

pub struct WaldumpOptions {
    pub datadir: PathBuf,
    pub start: Option<u64>,
    pub stats: bool,
    pub quiet: bool,
}

/// `postmaster settings [--markdown]`: the settings table, as text or as
/// docs/settings.md.
pub struct SettingsOptions {
    pub markdown: bool,
}

pub enum Command {
    Help(String),
    /// `-V` / `--version`.
    Version,
    Settings(SettingsOptions),
    Init(InitOptions),
    Start(StartOptions),
    Waldump(WaldumpOptions),
    Status(crate::status::StatusOptions),
}

pub fn help_text() -> String {
    let mut s = String::from(
        "postmaster: the walshm server (a multi-process WAL runtime, PostgreSQL 15 WAL format)

Usage:
  postmaster init -D DIR [--wal-segment-size MB] [--pwfile FILE] [--set NAME=VALUE ...]
                   [--replication-pwfile FILE] [--from-wal SRC]
      Create a data directory (mode 0700, files 0600): configuration file,
      control file, first WAL segment with a shutdown checkpoint. DIR must
      not exist or be empty. --pwfile FILE (mode 0600, first line) or the
      WALSHM_PASSWORD environment variable: the TCP password, stored in
      walshm.conf only as a SCRAM-SHA-256 verifier. --replication-pwfile
      FILE or WALSHM_REPLICATION_PASSWORD: the same for the replication
      role, the only password replication connections over TCP accept.
      --from-wal SRC    restore: take the WAL of SRC (pg_receivewal's output,
                        .partial included, or an archive_command archive),
                        validated first; the first start recovers it to its
                        end (fetching more with restore_command, if set) and
                        continues on a new timeline
  postmaster start -D DIR [--pwfile FILE] [--replication-pwfile FILE] [--set NAME=VALUE ...]
                    [--workers N --workload KIND] [--discard-damaged-wal]
                    [--worker 'NAME=COMMAND [ARGS]' ...]
      Run the server in the foreground. SIGTERM/SIGINT: fast shutdown (backends
      stopped, WAL flushed, exit 0). SIGQUIT: immediate shutdown. SIGHUP:
      reload the configuration file (settings that may change while running). DIR must
      have mode 0700. --pwfile / WALSHM_PASSWORD, --replication-pwfile /
      WALSHM_REPLICATION_PASSWORD: as for init, for this run.
      Exit status 3: refused to start because WAL is damaged before its end
      (valid WAL follows the first unreadable record); nothing was changed.
      --discard-damaged-wal  accept losing the WAL after the damage: it is
                        moved to DIR/pg_wal_discarded/LSN-TIME/ (never deleted)
                        and the server starts at the damage
      --worker 'NAME=COMMAND [ARGS]'  run COMMAND (looked up in PATH, no shell)
                        as a supervised worker that attaches to shared memory
                        (repeatable; also `worker = '...'` lines in walshm.conf):
                        exit 0 after detaching: done; exit 1 after detaching:
                        restarted after worker_restart_delay; any other end:
                        crash restart of the server, then workers start again
      --workers N       fork N backends running --workload (0..=4096)
      --workload KIND   ",
    );
    s.push_str(WORKLOAD_HELP);
    s.push_str(
        "
  postmaster waldump -D DIR [--start LSN] [--stats] [--quiet]
      Print the WAL records of DIR with the project's own reader, and where
      and why WAL ends. --stats: totals per record kind.
  postmaster status -D DIR [--json]
      Is a server running on DIR (exit 0; 3 if not, 4 if DIR is no data
      directory), its PID, uptime, WAL insert/write/flush positions, and one
      line per process with its type, wait event and state. Reads shared
      memory without taking any lock. --json: one JSON object.
  postmaster -D DIR [-c NAME=VALUE ...] [--NAME=VALUE ...] [-p PORT] [-k DIR] [-h ADDR] [-N N] [-F]
      PostgreSQL's postgres command line, as pg_ctl runs it
      (pg_ctl -D DIR -p path/to/postmaster start -w): runs the server as
      start does, but SIGTERM is a smart shutdown (new connections refused,
      running sessions finish, then as fast); SIGINT fast; SIGQUIT
      immediate; SIGHUP reloads the configuration file.
  postmaster -V | --version
      Print the version line, as postgres -V does.
  postmaster settings [--markdown]
      Print every setting with its values and help (the list below);
      --markdown: as a Markdown page with defaults, which is docs/settings.md.

Settings (--set NAME=VALUE, or NAME = VALUE lines in DIR/walshm.conf):
",
    );
    s.push_str(&settings_text());
    s
}

/// One line per setting: name, valid values, help (the end of `--help`).
pub fn settings_text() -> String {
    let mut s = String::new();
    for row in SETTINGS {
        let (name, valid) = (row.name, row.valid());
        s.push_str(&format!("  {name:<23} {valid:<45} {}\n", row.what()));
    }
    s
}

/// The command that writes docs/settings.md (named in the page itself and
/// in the test's failure message).
pub const SETTINGS_MARKDOWN_COMMAND: &str =
    "cargo run -q --bin postmaster -- settings --markdown > docs/settings.md";

/// docs/settings.md: every setting with its values, default, when it can
/// change and its help, in declaration order.
pub fn settings_markdown() -> String {
    let defaults = Settings::default();
    let mut s = format!(
        "# Settings

<!-- Generated from shmem/src/settings.rs; do not edit by hand. -->
This page is generated from the settings table in `shmem/src/settings.rs`.
Regenerate it after changing a setting, from the repository's root:

```sh
{SETTINGS_MARKDOWN_COMMAND}
```

`cargo test -p postmaster` fails while this page differs from what that
command prints.

Give a setting as `--set NAME=VALUE` to `postmaster init` or `postmaster
start`, or as a `NAME = VALUE` line in `DIR/walshm.conf`. A number with a
unit takes a suffix (kB, MB, GB; us, ms, s, min, h); a bare number is in
the unit the values column names first. `SHOW NAME` answers every setting
but `password`; `SET` is refused (55P02) for every setting that only
changes at start. A reload (SIGHUP, `pg_ctl reload`) reads `walshm.conf`
again; a setting that changes only at start keeps its value until a
restart. What each algorithm switch does, and where it comes
from, is in [variants.md](variants.md).

| setting | values | default | changes | what it does |
| --- | --- | --- | --- | --- |
"
    );
    for row in SETTINGS {
        s.push_str(&format!(
            "| `{}` | {} | `{}` | {} | {} |\n",
            row.name,
            markdown_values(row),
            markdown_default(row, &defaults),
            match row.context {
                Context::Postmaster => "at start",
                Context::Session =>
                    "at start; at a reload (SIGHUP) for new sessions; SET in a session",
            },
            markdown_cell(&markdown_what(row)),
        ));
    }
    s
}

/// The values column: each name of an enum or boolean as code, the rest
/// (units, ranges, text rules) as `--help` says it.
fn markdown_values(row: &Setting) -> String {
    let names = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match row.kind {
        Kind::Bool => names(&["on", "off"]),
        Kind::Enum(list) => names(list),
        _ => markdown_cell(&row.valid()),
    }
}

/// The default as SHOW prints it; an empty text as `''`.
fn markdown_default(row: &Setting, defaults: &Settings) -> String {
    match row.display(defaults) {
        shown if shown.is_empty() => "''".into(),
        shown => shown,
    }
}

/// The help, its seed, and whether the value is kept secret.
fn markdown_what(row: &Setting) -> String {
    let mut s = row.help.to_string();
    if let Some(seed) = row.seed {
        s.push_str(&format!(" (seed {seed})"));
    }
    if row.secret {
        s.push_str("; never shown by SHOW nor echoed in an error");
    }
    s
}

/// Text made safe for a table cell: `|` would end the cell, `<` open an
/// HTML tag, `*` start emphasis.
fn markdown_cell(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '|' | '<' | '>' | '*' | '\\') {
            s.push('\\');
        }
        s.push(c);
    }
    s
}

/// What a flag does to the options of type `T` being built.
enum Action<T> {
    /// A switch.
    Switch(fn(&mut Parsing<T>)),
    /// A flag followed by a value taken as it is.
    Text(fn(&mut Parsing<T>, &str)),
    /// A flag followed by a value that may be refused.
    Value(fn(&mut Parsing<T>, &str) -> Result<(), String>),
}

/// One flag of a subcommand.
struct Flag<T> {
    names: &'static [&'static str],
    action: Action<T>,
}

/// Options being built, and the data directory if one was given.
struct Parsing<T> {
    datadir: Option<PathBuf>,
    opts: T,
}

const fn flag<T>(names: &'static [&'static str], action: Action<T>) -> Flag<T> {
    Flag { names, action }
}

fn datadir<T>(p: &mut Parsing<T>, v: &str) {
    p.datadir = Some(PathBuf::from(v));
}

const DATADIR: &[&str] = &["-D", "--pgdata"];
const SET: &[&str] = &["--set", "-c"];
const PWFILE: &[&str] = &["--pwfile"];
const REPLICATION_PWFILE: &[&str] = &["--replication-pwfile"];

/// Options of the subcommands that take settings and password files.
trait Configured {
    fn sets(&mut self) -> &mut Vec<String>;
    fn pwfile(&mut self) -> &mut Option<PathBuf>;
    fn replication_pwfile(&mut self) -> &mut Option<PathBuf>;
}

macro_rules! configured {
    ($($t:ty),*) => {$(
        impl Configured for $t {
            fn sets(&mut self) -> &mut Vec<String> {
                &mut self.sets
            }
            fn pwfile(&mut self) -> &mut Option<PathBuf> {
                &mut self.pwfile
            }
            fn replication_pwfile(&mut self) -> &mut Option<PathBuf> {
                &mut self.replication_pwfile
            }
        }
    )*};
}

configured!(InitOptions, StartOptions);

fn add_set<T: Configured>(p: &mut Parsing<T>, v: &str) {
    p.opts.sets().push(v.into());
}

fn pwfile<T: Configured>(p: &mut Parsing<T>, v: &str) {
    *p.opts.pwfile() = Some(v.into());
}

fn replication_pwfile<T: Configured>(p: &mut Parsing<T>, v: &str) {
    *p.opts.replication_pwfile() = Some(v.into());
}

const INIT_FLAGS: &[Flag<InitOptions>] = &[
    flag(DATADIR, Action::Text(datadir)),
    flag(SET, Action::Text(add_set)),
    flag(PWFILE, Action::Text(pwfile)),
    flag(REPLICATION_PWFILE, Action::Text(replication_pwfile)),
    flag(
        &["--wal-segment-size"],
        Action::Value(|p, v| segment_size(v).map(|n| p.opts.seg_size = n)),
    ),
    flag(
        &["--from-wal"],
        Action::Text(|p, v| p.opts.from_wal = Some(v.into())),
    ),
];

const START_FLAGS: &[Flag<StartOptions>] = &[
    flag(DATADIR, Action::Text(datadir)),
    flag(SET, Action::Text(add_set)),
    flag(PWFILE, Action::Text(pwfile)),
    flag(REPLICATION_PWFILE, Action::Text(replication_pwfile)),
    flag(
        &["--workers"],
        Action::Value(|p, v| workers(v).map(|n| p.opts.workers = n)),
    ),
    flag(
        &["--workload"],
        Action::Value(|p, v| Workload::parse(v).map(|w| p.opts.workload = Some(w))),
    ),
    flag(&["--ack"], Action::Switch(|p| p.opts.ack = true)),
    flag(
        &["--discard-damaged-wal"],
        Action::Switch(|p| p.opts.discard_damaged_wal = true),
    ),
    flag(
        &["--worker"],
        Action::Value(|p, v| WorkerSpec::parse(v).map(|w| p.opts.worker_commands.push(w))),
    ),
];

const WALDUMP_FLAGS: &[Flag<WaldumpOptions>] = &[
    flag(DATADIR, Action::Text(datadir)),
    flag(
        &["--start"],
        Action::Value(|p, v| lsn(v).map(|l| p.opts.start = Some(l))),
    ),
    flag(&["--stats"], Action::Switch(|p| p.opts.stats = true)),
    flag(&["--quiet"], Action::Switch(|p| p.opts.quiet = true)),
];

const STATUS_FLAGS: &[Flag<crate::status::StatusOptions>] = &[
    flag(DATADIR, Action::Text(datadir)),
    flag(&["--json"], Action::Switch(|p| p.opts.json = true)),
];

const SETTINGS_FLAGS: &[Flag<SettingsOptions>] = &[flag(
    &["--markdown"],
    Action::Switch(|p| p.opts.markdown = true),
)];

fn parse_settings(args: &[String]) -> Result<SettingsOptions, String> {
    let blank = SettingsOptions { markdown: false };
    let (_, opts) = scan_flags("settings", args, SETTINGS_FLAGS, blank)?;
    Ok(opts)
}

fn parse_status(args: &[String]) -> Result<crate::status::StatusOptions, String> {
    let blank = crate::status::StatusOptions {
        datadir: PathBuf::new(),
        json: false,
    };
    let (datadir, opts) = run_flags("status", args, STATUS_FLAGS, blank)?;
    Ok(crate::status::StatusOptions { datadir, ..opts })
}

fn segment_size(v: &str) -> Result<u64, String> {
    let invalid =
        || format!("invalid --wal-segment-size \"{v}\" (MB, a power of two from 1 to 1024)");
    let mb: u64 = v.parse().map_err(|_| invalid())?;
    walformat::Geometry::new(mb.saturating_mul(1 << 20))
        .map(|g| g.seg_size)
        .map_err(|_| invalid())
}

fn workers(v: &str) -> Result<u32, String> {
    v.parse()
        .ok()
        .filter(|n| *n <= 4096)
        .ok_or_else(|| format!("invalid --workers \"{v}\" (0..=4096)"))
}

fn lsn(v: &str) -> Result<u64, String> {
    walformat::parse_lsn(v).map_err(|_| format!("invalid LSN \"{v}\" (expected X/XXXXXXXX)"))
}

fn value<'a>(args: &mut impl Iterator<Item = &'a String>, flag: &str) -> Result<&'a str, String> {
    args.next()
        .map(String::as_str)
        .ok_or_else(|| format!("option {flag} needs a value"))
}

/// Runs `flags` over `args`, starting from `opts`; returns the options and
/// the data directory (required by every subcommand that has a -D flag).
fn run_flags<T>(
    sub: &str,
    args: &[String],
    flags: &[Flag<T>],
    opts: T,
) -> Result<(PathBuf, T), String> {
    let (datadir, opts) = scan_flags(sub, args, flags, opts)?;
    let datadir = datadir.ok_or_else(|| format!("\"{sub}\" needs -D DIR (the data directory)"))?;
    Ok((datadir, opts))
}

/// Runs `flags` over `args`, starting from `opts`; returns the data
/// directory if one was given, and the options.
fn scan_flags<T>(
    sub: &str,
    args: &[String],
    flags: &[Flag<T>],
    opts: T,
) -> Result<(Option<PathBuf>, T), String> {
    let mut p = Parsing {
        datadir: None,
        opts,
    };
    let mut args = args.iter();
    while let Some(a) = args.next() {
        let a = a.as_str();
        let flag = flags
            .iter()
            .find(|f| f.names.contains(&a))
            .ok_or_else(|| format!("unknown option \"{a}\" for \"{sub}\""))?;
        match flag.action {
            Action::Switch(apply) => apply(&mut p),
            Action::Text(apply) => apply(&mut p, value(&mut args, a)?),
            Action::Value(apply) => apply(&mut p, value(&mut args, a)?)?,
        }
    }
    Ok((p.datadir, p.opts))
}

fn parse_init(args: &[String]) -> Result<InitOptions, String> {
    let blank = InitOptions {
        datadir: PathBuf::new(),
        seg_size: walformat::DEFAULT_SEG_SIZE,
        sets: Vec::new(),
        pwfile: None,
        replication_pwfile: None,
        from_wal: None,
    };
    let (datadir, opts) = run_flags("init", args, INIT_FLAGS, blank)?;
    Ok(InitOptions { datadir, ..opts })
}

fn parse_start(args: &[String]) -> Result<StartOptions, String> {
    let (datadir, opts) = run_flags("start", args, START_FLAGS, StartOptions::default())?;
    check_workers(&opts)?;
    Ok(StartOptions { datadir, ..opts })
}

/// --workers, --workload and --ack only make sense together.
fn check_workers(o: &StartOptions) -> Result<(), String> {
    if o.workers > 0 && o.workload.is_none() {
        return Err(format!(
            "--workers needs --workload (one of: {WORKLOAD_HELP})"
        ));
    }
    if o.workload.is_some() && o.workers == 0 {
        return Err("--workload needs --workers N (N >= 1)".into());
    }
    if o.ack && !o.workload.is_some_and(|w| w.waits_for_commit()) {
        return Err(
            "--ack needs a workload that waits for its commit to be flushed (emit-tx:SIZE or emit-tx+txid:SIZE)"
                .into(),
        );
    }
    Ok(())
}

fn parse_waldump(args: &[String]) -> Result<WaldumpOptions, String> {
    let blank = WaldumpOptions {
        datadir: PathBuf::new(),
        start: None,
        stats: false,
        quiet: false,
    };
    let (datadir, opts) = run_flags("waldump", args, WALDUMP_FLAGS, blank)?;
    Ok(WaldumpOptions { datadir, ..opts })
}

fn is_help(arg: &str) -> bool {
    matches!(arg, "--help" | "-h")
}

/// The version line, in the form `postgres -V` prints (`pg_ctl` and
/// other tools read the major version from it).
pub fn version_text() -> String {
    format!(
        "postgres (PostgreSQL) 15 (walshm {})\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// One option of PostgreSQL's `postgres` command line that walshm takes:
/// a flag followed by a value, and the setting it assigns (None: -D).
const POSTGRES_OPTIONS: &[(&str, Option<&str>)] = &[
    ("-D", None),
    ("-p", Some("port")),
    ("-k", Some("unix_socket_directories")),
    ("-h", Some("listen_addresses")),
    ("-N", Some("max_connections")),
];

/// PostgreSQL's `postgres` command line, as `pg_ctl start` runs it (with
/// `pg_ctl -o "..."` options appended): `-D DIR`, `-c NAME=VALUE`,
/// `--NAME=VALUE`, `-p PORT`, `-k DIR`, `-h ADDR`, `-N N`, `-F` (fsync
/// off); the data directory may also come from `PGDATA`. Anything else
/// is an error naming it.
fn parse_postgres(args: &[String]) -> Result<StartOptions, String> {
    let mut datadir = None;
    let mut sets = Vec::new();
    let mut args = args.iter();
    while let Some(a) = args.next() {
        let a = a.as_str();
        if let Some((_, setting)) = POSTGRES_OPTIONS.iter().find(|(f, _)| *f == a) {
            let v = value(&mut args, a)?;
            match setting {
                None => datadir = Some(PathBuf::from(v)),
                Some(name) => sets.push(format!("{name}={v}")),
            }
        } else if a == "-c" {
            sets.push(value(&mut args, a)?.to_string());
        } else if a == "-F" {
            sets.push("fsync=off".into());
        } else if let Some(assignment) = a.strip_prefix("--").filter(|s| s.contains('=')) {
            // --NAME=VALUE, PostgreSQL's dashes standing for underscores.
            let (name, v) = assignment.split_once('=').unwrap_or((assignment, ""));
            sets.push(format!("{}={v}", name.replace('-', "_")));
        } else if let Some(assignment) = a.strip_prefix("-c").filter(|s| s.contains('=')) {
            sets.push(assignment.to_string());
        } else {
            return Err(format!(
                "unknown option \"{a}\" (the postgres command line takes -D DIR, -c NAME=VALUE, --NAME=VALUE, -p PORT, -k DIR, -h ADDR, -N N, -F)"
            ));
        }
    }
    let datadir = datadir
        .or_else(|| std::env::var_os("PGDATA").map(PathBuf::from))
        .ok_or("the postgres command line needs -D DIR or PGDATA (the data directory)")?;
    Ok(StartOptions {
        datadir,
        sets,
        postgres_cli: true,
        ..StartOptions::default()
    })
}

pub fn parse(args: &[String]) -> Result<Command, String> {
    let Some((sub, rest)) = args.split_first() else {
        return Ok(Command::Help(help_text()));
    };
    if is_help(sub) || sub == "help" {
        return Ok(Command::Help(help_text()));
    }
    if matches!(sub.as_str(), "-V" | "--version") {
        return Ok(Command::Version);
    }
    if sub.starts_with('-') {
        // PostgreSQL's command line, where -h is the listen address.
        if args.iter().any(|a| a == "--help") {
            return Ok(Command::Help(help_text()));
        }
        return parse_postgres(args).map(Command::Start);
    }
    if rest.iter().any(|a| is_help(a)) {
        return Ok(Command::Help(help_text()));
    }
    match sub.as_str() {
        "init" => parse_init(rest).map(Command::Init),
        "start" => parse_start(rest).map(Command::Start),
        "waldump" => parse_waldump(rest).map(Command::Waldump),
        "status" => parse_status(rest).map(Command::Status),
        "settings" => parse_settings(rest).map(Command::Settings),
        other => Err(format!(
            "unknown command \"{other}\" (expected init, start, waldump, status or settings)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn postgres_command_line_becomes_a_start() {
        let a = args(&[
            "-D",
            "/d",
            "-p",
            "5499",
            "-h",
            "localhost",
            "-c",
            "fsync=off",
            "--wal-buffers=64",
            "-k",
            "/s",
            "-N",
            "7",
            "-F",
        ]);
        let Ok(Command::Start(o)) = parse(&a) else {
            panic!("not parsed as a start");
        };
        assert!(o.postgres_cli);
        assert_eq!(o.datadir, PathBuf::from("/d"));
        assert_eq!(
            o.sets,
            [
                "port=5499",
                "listen_addresses=localhost",
                "fsync=off",
                "wal_buffers=64",
                "unix_socket_directories=/s",
                "max_connections=7",
                "fsync=off"
            ]
        );
        let Ok(Command::Start(o)) = parse(&args(&["start", "-D", "/d"])) else {
            panic!("start not parsed");
        };
        assert!(!o.postgres_cli);
        assert!(matches!(parse(&args(&["-V"])), Ok(Command::Version)));
        assert!(matches!(
            parse(&args(&["-D", "/d", "--help"])),
            Ok(Command::Help(_))
        ));
        let Err(e) = parse(&args(&["-D", "/d", "-B", "128MB"])) else {
            panic!("-B accepted");
        };
        assert!(e.contains("unknown option \"-B\""), "{e}");
        let Err(e) = parse(&args(&["-D"])) else {
            panic!("-D without a value accepted");
        };
        assert!(e.contains("-D needs a value"), "{e}");
    }

    #[test]
    fn settings_takes_markdown_and_nothing_else() {
        let Ok(Command::Settings(o)) = parse(&args(&["settings"])) else {
            panic!("settings not parsed");
        };
        assert!(!o.markdown);
        let Ok(Command::Settings(o)) = parse(&args(&["settings", "--markdown"])) else {
            panic!("settings --markdown not parsed");
        };
        assert!(o.markdown);
        let Err(e) = parse(&args(&["settings", "-D", "/tmp/x"])) else {
            panic!("settings took -D");
        };
        assert!(e.contains("unknown option \"-D\" for \"settings\""), "{e}");
    }

    #[test]
    fn markdown_has_one_row_per_setting_and_escapes_cells() {
        let md = settings_markdown();
        for row in SETTINGS {
            let start = format!("| `{}` |", row.name);
            let line = md.lines().find(|l| l.starts_with(&start));
            let line = line.unwrap_or_else(|| panic!("no row for {}", row.name));
            // Six unescaped bars: the cells' edges, nothing inside a cell.
            let bars = line
                .match_indices('|')
                .filter(|(i, _)| !line[..*i].ends_with('\\'));
            assert_eq!(bars.count(), 6, "{line}");
        }
        assert!(md.contains(SETTINGS_MARKDOWN_COMMAND));
    }

    /// docs/settings.md is what `postmaster settings --markdown` prints.
    #[test]
    fn docs_settings_md_is_up_to_date() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/settings.md");
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == settings_markdown(),
            "docs/settings.md differs from the settings table in shmem/src/settings.rs; \
             regenerate it from the repository's root with:\n    {SETTINGS_MARKDOWN_COMMAND}"
        );
    }
}
