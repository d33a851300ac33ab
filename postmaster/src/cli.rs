//! Command-line parsing for `postmaster`, declared with clap's derive: each
//! subcommand's options are a struct (`InitOptions`, `StartOptions`, ...)
//! whose fields carry their flags, value parsers and help, so `--help`, the
//! errors and the shell completions (`postmaster completions SHELL`) come
//! from one declaration.
//!
//! Two command lines share the top level: the subcommands, and PostgreSQL's
//! `postgres` command line as `pg_ctl` runs it (`-D DIR -c NAME=VALUE -p
//! PORT ...`, no subcommand), which is a `start` whose SIGTERM is a smart
//! shutdown. Invariants: the two never mix (an option before a subcommand
//! is an error); the postgres options that assign settings keep their
//! command-line order, so a later one overrides an earlier one as in
//! PostgreSQL; there `-h` is the listen address, so `--help` asks for help
//! and only a bare `postmaster` or a leading `-h` prints it too. A bad
//! argument is clap's one-line error and exit status 2. The settings part
//! of `--help`, `postmaster settings` and its Markdown form
//! (docs/settings.md, checked by a test below) are generated from
//! `shmem::settings`.

use crate::status::StatusOptions;
use crate::supervised::WorkerSpec;
use backend::workload::{Workload, WORKLOAD_HELP};
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use shmem::settings::{Context, Kind, Setting, Settings, SETTINGS};
use std::path::PathBuf;

/// `postmaster init`.
#[derive(Args)]
pub struct InitOptions {
    /// The data directory to create (it must not exist or be empty)
    #[arg(short = 'D', visible_alias = "pgdata", value_name = "DIR")]
    pub datadir: PathBuf,
    /// WAL segment size in MB: a power of two from 1 to 1024
    #[arg(long = "wal-segment-size", value_name = "MB", default_value = "16",
          value_parser = segment_size, allow_hyphen_values = true)]
    pub seg_size: u64,
    /// A setting written to DIR/walshm.conf (repeatable; the list below)
    #[arg(long = "set", short = 'c', value_name = "NAME=VALUE")]
    pub sets: Vec<String>,
    /// The TCP password: the first line of FILE (mode 0600), else the
    /// WALSHM_PASSWORD environment variable; walshm.conf keeps only its
    /// SCRAM-SHA-256 verifier
    #[arg(long, value_name = "FILE")]
    pub pwfile: Option<PathBuf>,
    /// The replication role's password, as --pwfile (else
    /// WALSHM_REPLICATION_PASSWORD): the only password replication
    /// connections over TCP accept
    #[arg(long, value_name = "FILE")]
    pub replication_pwfile: Option<PathBuf>,
    /// Restore: take the WAL of SRC (pg_receivewal's output, .partial
    /// included, or an archive_command archive), validated first; the first
    /// start recovers it to its end (fetching more with restore_command, if
    /// set) and continues on a new timeline
    #[arg(long, value_name = "SRC")]
    pub from_wal: Option<PathBuf>,
}

/// `postmaster start`, or PostgreSQL's `postgres` command line.
#[derive(Args, Default)]
pub struct StartOptions {
    /// The data directory, made by `postmaster init` (mode 0700)
    #[arg(short = 'D', visible_alias = "pgdata", value_name = "DIR")]
    pub datadir: PathBuf,
    /// A setting for this run, over DIR/walshm.conf's (repeatable; the list
    /// below)
    #[arg(long = "set", short = 'c', value_name = "NAME=VALUE")]
    pub sets: Vec<String>,
    /// Fork N backends running --workload (0..=4096)
    #[arg(long, value_name = "N", default_value = "0", value_parser = workers,
          allow_hyphen_values = true)]
    pub workers: u32,
    #[arg(long, value_name = "KIND", value_parser = Workload::parse, help = workload_help())]
    pub workload: Option<Workload>,
    /// With emit-tx:SIZE or emit-tx+txid:SIZE: once each commit is flushed,
    /// the backend prints `ack LSN` (the commit record's start) on stdout
    #[arg(long)]
    pub ack: bool,
    /// Start even if WAL is damaged before its end (valid WAL follows the
    /// first unreadable record): the WAL after the damage is moved to
    /// DIR/pg_wal_discarded/LSN-TIME/ (never deleted) and the server starts
    /// at the damage. Without it such a start exits 3 and changes nothing;
    /// `postmaster waldump` shows where and why the WAL ends
    #[arg(long)]
    pub discard_damaged_wal: bool,
    /// The TCP password for this run, as init's --pwfile (else
    /// WALSHM_PASSWORD); overrides walshm.conf's verifier
    #[arg(long, value_name = "FILE")]
    pub pwfile: Option<PathBuf>,
    /// The replication role's password for this run (else
    /// WALSHM_REPLICATION_PASSWORD)
    #[arg(long, value_name = "FILE")]
    pub replication_pwfile: Option<PathBuf>,
    /// Run COMMAND (looked up in PATH, no shell) as a supervised worker that
    /// attaches to shared memory (repeatable; also `worker = '...'` lines in
    /// walshm.conf, which start first). Exit 0 after detaching: done; exit 1
    /// after detaching: restarted after worker_restart_delay; any other end:
    /// crash restart of the server, then the workers start again
    #[arg(long = "worker", value_name = "'NAME=COMMAND [ARGS]'", value_parser = WorkerSpec::parse)]
    pub worker_commands: Vec<WorkerSpec>,
    /// Started with PostgreSQL's `postgres` command line (as `pg_ctl`
    /// runs it): SIGTERM is a smart shutdown, as PostgreSQL's; with
    /// `postmaster start` SIGTERM stays a fast one.
    #[arg(skip)]
    pub postgres_cli: bool,
}

/// `postmaster waldump`.
#[derive(Args)]
pub struct WaldumpOptions {
    /// The data directory whose WAL to print
    #[arg(short = 'D', visible_alias = "pgdata", value_name = "DIR")]
    pub datadir: PathBuf,
    /// Start at this LSN (X/XXXXXXXX) instead of the first record
    #[arg(long, value_name = "LSN", value_parser = lsn)]
    pub start: Option<u64>,
    /// Also print the totals per record kind
    #[arg(long)]
    pub stats: bool,
    /// Print no record, only the totals and where and why WAL ends
    #[arg(long)]
    pub quiet: bool,
}

/// `postmaster settings [--markdown]`: the settings table, as text or as
/// docs/settings.md.
#[derive(Args)]
pub struct SettingsOptions {
    /// Print it as a Markdown page with each setting's default and when it
    /// may change: docs/settings.md
    #[arg(long)]
    pub markdown: bool,
}

/// What the command line asks for.
#[derive(Subcommand)]
pub enum Command {
    /// Create a data directory (mode 0700, files 0600): configuration
    /// file, control file, first WAL segment with a shutdown checkpoint
    #[command(after_help = settings_help())]
    Init(InitOptions),
    /// Run the server in the foreground. SIGTERM/SIGINT: fast shutdown
    /// (backends stopped, WAL flushed, exit 0); SIGQUIT: immediate
    /// shutdown; SIGHUP: reload the configuration file
    #[command(after_help = settings_help(), allow_negative_numbers = true)]
    Start(StartOptions),
    /// Print the WAL records of a data directory with the project's own
    /// reader, and where and why WAL ends
    Waldump(WaldumpOptions),
    /// Is a server running on a data directory: its PID, uptime, WAL
    /// positions and one line per process (exit 0; 3 if not running, 4 if
    /// DIR is no data directory)
    Status(StatusOptions),
    /// Print every setting with its values and help
    Settings(SettingsOptions),
    /// Print a completion script for SHELL (e.g. `postmaster completions
    /// bash > /etc/bash_completion.d/postmaster`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// `-V` / `--version`.
    #[command(skip)]
    Version,
}

/// The whole command line.
#[derive(Parser)]
#[command(
    name = "postmaster",
    about = "The walshm server: a multi-process WAL runtime writing PostgreSQL 15's WAL format",
    long_about = "The walshm server: a multi-process WAL runtime writing PostgreSQL 15's WAL \
                  format.\n\nWithout a subcommand it takes PostgreSQL's `postgres` command line, \
                  as pg_ctl runs it (pg_ctl -D DIR -p path/to/postmaster start -w): it runs the \
                  server as start does, but SIGTERM is a smart shutdown (new connections \
                  refused, running sessions finish, then as fast); SIGINT fast; SIGQUIT \
                  immediate; SIGHUP reloads the configuration file. --NAME=VALUE sets NAME \
                  (dashes standing for underscores) as -c does.",
    after_help = top_help(),
    disable_help_flag = true,
    disable_version_flag = true,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// PostgreSQL's command line: the data directory
    #[arg(short = 'D', value_name = "DIR", env = "PGDATA")]
    datadir: Option<PathBuf>,
    /// Print the version line, as `postgres -V` does
    #[arg(short = 'V', long)]
    version: bool,
}

/// The options of PostgreSQL's command line that assign a setting: flag,
/// the setting (or [`ASSIGNMENT`]: the value is NAME=VALUE), value name.
const POSTGRES_OPTIONS: &[(char, &str, &str)] = &[
    ('c', ASSIGNMENT, "NAME=VALUE"),
    ('p', "port", "PORT"),
    ('k', "unix_socket_directories", "DIR"),
    ('h', "listen_addresses", "ADDR"),
    ('N', "max_connections", "N"),
];

/// `-c NAME=VALUE`.
const ASSIGNMENT: &str = "assignment";

/// `-F`: fsync off, as PostgreSQL's.
const FSYNC_OFF: &str = "F";

fn workload_help() -> String {
    format!("The load each --workers backend runs: {WORKLOAD_HELP} (SIZE in bytes)")
}

/// The list of settings after a subcommand's options.
fn settings_help() -> String {
    format!(
        "Settings (--set NAME=VALUE, or NAME = VALUE lines in DIR/walshm.conf):\n{}",
        settings_text()
    )
}

/// What follows the top level's options: the workloads and the settings.
fn top_help() -> String {
    format!(
        "Workloads (start --workers N --workload KIND): {WORKLOAD_HELP}\n\n{}",
        settings_help()
    )
}

/// The command-line definition (for parsing, `--help` and completions):
/// the derived one, with PostgreSQL's setting options and a help flag at
/// each level (the top level's `-h` being PostgreSQL's).
pub fn command() -> clap::Command {
    let help = Arg::new("help")
        .long("help")
        .action(ArgAction::Help)
        .help("Print help");
    let postgres = POSTGRES_OPTIONS.iter().map(|&(short, id, value)| {
        let help = match id {
            ASSIGNMENT => "A setting (also --NAME=VALUE)".to_string(),
            setting => format!("Sets {setting}"),
        };
        Arg::new(id)
            .short(short)
            .value_name(value)
            .help(help)
            .action(ArgAction::Append)
    });
    Cli::command()
        .args(postgres)
        .arg(
            Arg::new(FSYNC_OFF)
                .short('F')
                .action(ArgAction::SetTrue)
                .help("Sets fsync=off"),
        )
        .arg(help.clone())
        .mut_subcommands(|s| s.arg(help.clone().short('h')))
}

/// The settings PostgreSQL's command line assigns, in command-line order.
fn postgres_sets(m: &ArgMatches) -> Vec<String> {
    let mut sets: Vec<(usize, String)> = Vec::new();
    for &(_, id, _) in POSTGRES_OPTIONS {
        if let (Some(at), Some(values)) = (m.indices_of(id), m.get_many::<String>(id)) {
            let assign = |v: &String| match id {
                ASSIGNMENT => v.clone(),
                name => format!("{name}={v}"),
            };
            sets.extend(at.zip(values.map(assign)));
        }
    }
    if m.get_flag(FSYNC_OFF) {
        sets.extend(
            m.indices_of(FSYNC_OFF)
                .into_iter()
                .flatten()
                .map(|i| (i, "fsync=off".into())),
        );
    }
    sets.sort_by_key(|(at, _)| *at);
    sets.into_iter().map(|(_, s)| s).collect()
}

/// PostgreSQL's `--NAME=VALUE` as `-c NAME=VALUE` (its dashes standing for
/// underscores).
fn postgres_assignments(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        match a.strip_prefix("--").and_then(|s| s.split_once('=')) {
            Some((name, v)) => out.extend(["-c".into(), format!("{}={v}", name.replace('-', "_"))]),
            None => out.push(a.clone()),
        }
    }
    out
}

/// The error a check after parsing found, in clap's format with the usage
/// line of subcommand `sub` (the top level's for "").
fn usage_error(sub: &str, kind: ErrorKind, msg: impl std::fmt::Display) -> clap::Error {
    let mut top = command();
    top.build();
    let mut cmd = top.find_subcommand(sub).cloned().unwrap_or(top);
    cmd.error(kind, msg)
}

/// Parses the arguments (without the program's name). `Err` is clap's:
/// help and the version go to stdout with exit status 0, errors to stderr
/// with 2 (`clap::Error::print`, `exit_code`).
pub fn parse(args: &[String]) -> Result<Command, clap::Error> {
    let args = match args.first().map(String::as_str) {
        None | Some("-h") => vec!["--help".to_string()],
        Some(first) if first.starts_with('-') => postgres_assignments(args),
        Some(_) => args.to_vec(),
    };
    let m =
        command().try_get_matches_from(std::iter::once("postmaster".to_string()).chain(args))?;
    let cli = Cli::from_arg_matches(&m)?;
    match cli.command {
        _ if cli.version => Ok(Command::Version),
        Some(Command::Start(o)) => check_workers(&o).map(|()| Command::Start(o)),
        Some(c) => Ok(c),
        None => {
            let datadir = cli.datadir.ok_or_else(|| {
                usage_error(
                    "",
                    ErrorKind::MissingRequiredArgument,
                    "the postgres command line needs -D DIR or PGDATA (the data directory)",
                )
            })?;
            Ok(Command::Start(StartOptions {
                datadir,
                sets: postgres_sets(&m),
                postgres_cli: true,
                ..StartOptions::default()
            }))
        }
    }
}

/// Prints the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) {
    clap_complete::generate(shell, &mut command(), "postmaster", &mut std::io::stdout());
}

/// `--wal-segment-size`: MB, a power of two from 1 to 1024; bytes.
fn segment_size(v: &str) -> Result<u64, String> {
    let invalid = || "MB, a power of two from 1 to 1024".to_string();
    let mb: u64 = v.parse().map_err(|_| invalid())?;
    walformat::Geometry::new(mb.saturating_mul(1 << 20))
        .map(|g| g.seg_size)
        .map_err(|_| invalid())
}

fn workers(v: &str) -> Result<u32, String> {
    v.parse()
        .ok()
        .filter(|n| *n <= 4096)
        .ok_or_else(|| "0..=4096".to_string())
}

fn lsn(v: &str) -> Result<u64, String> {
    walformat::parse_lsn(v).map_err(|_| "invalid LSN (expected X/XXXXXXXX)".to_string())
}

/// --workers, --workload and --ack only make sense together.
fn check_workers(o: &StartOptions) -> Result<(), clap::Error> {
    let missing = |msg: String| {
        Err(usage_error(
            "start",
            ErrorKind::MissingRequiredArgument,
            msg,
        ))
    };
    if o.workers > 0 && o.workload.is_none() {
        return missing(format!(
            "--workers needs --workload (one of: {WORKLOAD_HELP})"
        ));
    }
    if o.workload.is_some() && o.workers == 0 {
        return missing("--workload needs --workers N (N >= 1)".into());
    }
    if o.ack && !o.workload.is_some_and(|w| w.waits_for_commit()) {
        return missing(
            "--ack needs a workload that waits for its commit to be flushed (emit-tx:SIZE or emit-tx+txid:SIZE)"
                .into(),
        );
    }
    Ok(())
}

/// The version line, in the form `postgres -V` prints (`pg_ctl` and
/// other tools read the major version from it).
pub fn version_text() -> String {
    format!(
        "postgres (PostgreSQL) 15 (walshm {})\n",
        env!("CARGO_PKG_VERSION")
    )
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
        let kind = |a: &[&str]| parse(&args(a)).err().map(|e| e.kind());
        assert_eq!(kind(&["-D", "/d", "--help"]), Some(ErrorKind::DisplayHelp));
        assert_eq!(kind(&["-h"]), Some(ErrorKind::DisplayHelp));
        assert_eq!(kind(&[]), Some(ErrorKind::DisplayHelp));
        let err = |a: &[&str]| parse(&args(a)).err().unwrap().to_string();
        assert!(err(&["-D", "/d", "-B", "128MB"]).contains("'-B'"));
        assert!(err(&["-D"]).contains("a value is required for '-D <DIR>'"));
        assert!(err(&["-D", "/d", "init", "-D", "/e"]).contains("cannot be used with"));
    }

    #[test]
    fn subcommands_parse_with_their_defaults_and_reject_the_rest() {
        command().debug_assert();
        let Ok(Command::Init(o)) = parse(&args(&["init", "-D", "/d"])) else {
            panic!("init not parsed");
        };
        assert_eq!(o.seg_size, walformat::DEFAULT_SEG_SIZE);
        let Ok(Command::Settings(o)) = parse(&args(&["settings"])) else {
            panic!("settings not parsed");
        };
        assert!(!o.markdown);
        let Ok(Command::Settings(o)) = parse(&args(&["settings", "--markdown"])) else {
            panic!("settings --markdown not parsed");
        };
        assert!(o.markdown);
        let err = |a: &[&str]| parse(&args(a)).err().unwrap().to_string();
        assert!(err(&["settings", "-D", "/tmp/x"]).contains("unexpected argument '-D'"));
        assert!(
            err(&["start", "-D", "/d", "--workers", "2"]).contains("--workers needs --workload")
        );
        assert!(err(&["start", "-D", "/d", "--workers", "-1"]).contains("0..=4096"));
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
