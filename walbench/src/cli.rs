//! walbench's command line, declared with clap's derive: the plain mode's
//! options at the top level (`walbench [OPTIONS]`), every other mode a
//! subcommand whose options struct lives with the mode. This module holds
//! the value parsers the modes share (lists, client counts, seconds, chart
//! paths, settings) and turns a mode's outcome into the exit status.
//!
//! Invariants: a bad argument is clap's one-line error and exit status 2,
//! and so is what a mode finds wrong with its options as a whole before it
//! runs (its `check`); a failed run exits 1 with `walbench: error: ...`
//! (after a newline that ends an open progress line), success 0. `--help`
//! is generated from the declarations and the tables of variants,
//! experiments and victims; `walbench completions SHELL` prints a shell's
//! completion script.

use crate::{reproduce, sweep, tail, torture, workercmp};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The whole command line.
#[derive(Parser)]
#[command(
    name = "walbench",
    about = "Measure walshm's WAL throughput per variant, workload and client count",
    after_help = sweep::variants_help(),
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    plain: sweep::Options,
}

#[derive(Subcommand)]
pub(crate) enum Mode {
    /// Rerun a seed's benchmark table on this machine
    #[command(after_help = reproduce::experiments_help())]
    Reproduce(reproduce::Options),
    /// Records/s and durable commits/s of a worker program against the
    /// built-in emit and emit-tx workloads
    WorkerVsBuiltin(workercmp::Options),
    /// Kill -9 any server process, or simulate power losses, in a loop, and
    /// check that no acknowledged commit is lost
    #[command(after_help = torture::after_help())]
    Torture(torture::Options),
    /// Latency from a message's due time to its delivery, per read path and
    /// producer rate, and the most each path delivers
    #[command(
        after_help = "Latency counts from each message's due time (no coordinated omission)."
    )]
    Tail(tail::Options),
    /// Print a completion script for SHELL (e.g. `walbench completions bash
    /// > /etc/bash_completion.d/walbench`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `walbench ARGS` (without the program name): 0 ok, 1 a failed run, 2 a
/// usage error.
pub fn main_with(args: &[String]) -> i32 {
    let name = std::iter::once("walbench".to_string());
    let cli = match Cli::try_parse_from(name.chain(args.iter().cloned())) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    match cli.mode {
        None => finish("", cli.plain, Ok, sweep::run_mode, ""),
        Some(Mode::Reproduce(a)) => {
            finish("reproduce", a, reproduce::check, reproduce::run_mode, "\n")
        }
        Some(Mode::WorkerVsBuiltin(o)) => {
            finish("worker-vs-builtin", o, Ok, workercmp::run_mode, "")
        }
        Some(Mode::Torture(o)) => finish("torture", o, torture::check, torture::run, "\n"),
        Some(Mode::Tail(o)) => finish("tail", o, Ok, tail::run_mode, "\n"),
        Some(Mode::Completions { shell }) => {
            let out = &mut std::io::stdout();
            clap_complete::generate(shell, &mut Cli::command(), "walbench", out);
            0
        }
    }
}

/// Checks the parsed options `a` of `mode` as a whole (`check`: a usage
/// error, exit 2), then runs (`run`: exit 1 on failure, its error after
/// `lead`).
fn finish<A, O>(
    mode: &str,
    a: A,
    check: fn(A) -> Result<O, String>,
    run: fn(&O) -> Result<(), String>,
    lead: &str,
) -> i32 {
    let o = match check(a) {
        Ok(o) => o,
        Err(e) => {
            let _ = usage_error(mode, e).print();
            return 2;
        }
    };
    match run(&o) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{lead}walbench: error: {e}");
            1
        }
    }
}

/// A usage error found after parsing, in clap's format with `mode`'s usage
/// line (the top level's for "").
fn usage_error(mode: &str, msg: String) -> clap::Error {
    let mut top = Cli::command();
    top.build();
    let mut cmd = top.find_subcommand(mode).cloned().unwrap_or(top);
    cmd.error(ErrorKind::ValueValidation, msg)
}

/// Parses `walbench ARGS` (without the program name) as the binary does
/// but reports as a library: `Ok(None)` is a request for help, `Err` the
/// usage error's text.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Cli>, String> {
    match Cli::try_parse_from(std::iter::once("walbench".to_string()).chain(args)) {
        Ok(cli) => Ok(Some(cli)),
        Err(e) if e.kind() == ErrorKind::DisplayHelp => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Parses `walbench MODE ARGS` and hands the mode's options to `pick`
/// (None: not that mode); `Ok(None)` is a request for help.
pub(crate) fn parse_mode<T>(
    mode: &str,
    args: &[String],
    pick: fn(Mode) -> Option<T>,
) -> Result<Option<T>, String> {
    let Some(cli) = parse(std::iter::once(mode.to_string()).chain(args.iter().cloned()))? else {
        return Ok(None);
    };
    cli.mode
        .and_then(pick)
        .map(Some)
        .ok_or_else(|| format!("not {mode}"))
}

/// The plain mode's options from `walbench ARGS` (a unit test's).
#[cfg(test)]
pub fn parse_plain(args: &str) -> Result<Option<sweep::Options>, String> {
    parse(args.split_whitespace().map(str::to_string)).map(|c| c.map(|c| c.plain))
}

/// One item of a comma-separated list of `T`.
pub fn item<T: FromStr>(v: &str) -> Result<T, String> {
    v.trim()
        .parse::<T>()
        .map_err(|_| format!("invalid item \"{v}\""))
}

/// A client count: 1..=4096.
pub fn client_count(v: &str) -> Result<u32, String> {
    v.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=4096).contains(n))
        .ok_or_else(|| format!("invalid client count \"{v}\" (each must be 1..=4096)"))
}

/// A `--seconds` value: 0 < S <= 3600.
pub fn seconds(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && *s <= 3600.0)
        .ok_or_else(|| "0 < S <= 3600".to_string())
}

/// A `--chart` path: `.svg`, or `.png` (the SVG rendered).
pub fn chart(v: &str) -> Result<PathBuf, String> {
    match Path::new(v).extension().and_then(|e| e.to_str()) {
        Some("svg" | "png") => Ok(PathBuf::from(v)),
        _ => Err("the chart file must end in .svg or .png".into()),
    }
}

/// A `--set` assignment, checked now rather than in the first postmaster.
pub fn setting(v: &str) -> Result<String, String> {
    shmem::Settings::default()
        .set_assignment(v)
        .map_err(|e| e.to_string())?;
    Ok(v.to_string())
}

/// The help of the options every measuring mode has.
pub const SET_HELP: &str =
    "A setting for every run (see postmaster --help; repeatable), e.g. fsync=off";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn shared_values_are_checked() {
        assert_eq!(client_count(" 4").unwrap(), 4);
        assert!(client_count("0").unwrap_err().contains("1..=4096"));
        assert!(client_count("x")
            .unwrap_err()
            .contains("invalid client count"));
        assert_eq!(seconds("0.5").unwrap(), 0.5);
        assert!(seconds("0").is_err() && seconds("3601").is_err());
        assert!(chart("a.png").is_ok() && chart("a.svg").is_ok());
        assert!(chart("a.gif").unwrap_err().contains(".svg or .png"));
        assert!(setting("fsync=off").is_ok());
        assert!(setting("bogus=1").is_err());
        assert_eq!(item::<u64>(" 7"), Ok(7));
    }
}
