//! walbench's one command-line path: every mode declares its options once
//! (flag, value name, help) in a table of `Opt`, and this module parses the
//! arguments against it, renders the mode's `--help` from it, checks the
//! values the modes share (client counts, seconds, settings, chart paths)
//! with the same error messages, and turns the outcome into the exit code.
//!
//! Invariants: `-h` / `--help` anywhere asks for help; an option taking a
//! value always consumes the next argument; every usage error exits 2 with
//! the mode's help command named, a failed run exits 1, success 0.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::str::FromStr;

/// One option of a mode: its key (the mode's own enum), its flags (the
/// first shown in `--help`, the others accepted silently), the name of its
/// value (empty for a switch) and its help text (lines after the first are
/// indented under it).
pub struct Opt<K> {
    pub key: K,
    pub flags: Vec<&'static str>,
    pub value: &'static str,
    pub many: bool,
    pub help: String,
}

impl<K> Opt<K> {
    /// `usage` is the flag and its value name as `--help` shows them:
    /// `"--clients LIST"`, `"-D DIR"`.
    pub fn new(key: K, usage: &'static str, help: impl Into<String>) -> Opt<K> {
        let (flag, value) = usage.split_once(' ').unwrap_or((usage, ""));
        Opt {
            key,
            flags: vec![flag],
            value,
            many: false,
            help: help.into(),
        }
    }

    /// Another spelling of the flag, not shown in `--help`.
    pub fn alias(mut self, flag: &'static str) -> Opt<K> {
        self.flags.push(flag);
        self
    }

    /// The option may be given more than once (shown as `...`).
    pub fn many(mut self) -> Opt<K> {
        self.many = true;
        self
    }

    fn usage(&self) -> String {
        if self.value.is_empty() {
            self.flags[0].to_string()
        } else {
            format!("{} {}", self.flags[0], self.value)
        }
    }
}

/// The arguments of one command line, in order, with their option keys.
pub struct Parsed<K> {
    pub options: Vec<(K, String)>,
    pub positional: Vec<String>,
}

/// Parses `args` against `spec` and hands each option to `apply` in
/// order; returns the positional arguments, or `None` for help.
pub fn parse_with<K: Copy>(
    spec: &[Opt<K>],
    positional: usize,
    args: &[String],
    mut apply: impl FnMut(K, &str) -> Result<(), String>,
) -> Result<Option<Vec<String>>, String> {
    let Some(parsed) = parse(spec, positional, args)? else {
        return Ok(None);
    };
    for (key, v) in &parsed.options {
        apply(*key, v)?;
    }
    Ok(Some(parsed.positional))
}

/// Parses `args` against `spec`, allowing up to `positional` arguments
/// that are not options. `Ok(None)` is a request for help.
pub fn parse<K: Copy>(
    spec: &[Opt<K>],
    positional: usize,
    args: &[String],
) -> Result<Option<Parsed<K>>, String> {
    let mut out = Parsed {
        options: vec![],
        positional: vec![],
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "-h" || a == "--help" {
            return Ok(None);
        }
        if let Some(o) = spec.iter().find(|o| o.flags.contains(&a.as_str())) {
            let value = if o.value.is_empty() {
                String::new()
            } else {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("option {a} needs a value"))?
            };
            out.options.push((o.key, value));
        } else if a.starts_with('-') {
            return Err(format!("unknown option \"{a}\""));
        } else if out.positional.len() < positional {
            out.positional.push(a.clone());
        } else {
            return Err(format!("unexpected argument \"{a}\""));
        }
    }
    Ok(Some(out))
}

/// The width the synopsis wraps at.
const WRAP: usize = 92;

/// A mode's `--help`: `about`, the usage lines (`others`, then `command`
/// with every option, wrapped), one line per option with its help in a
/// column, then a blank line and `trailer`.
pub fn help<K>(
    about: &str,
    others: &[&str],
    command: &str,
    spec: &[Opt<K>],
    trailer: &str,
) -> String {
    const LEAD: &str = "Usage: ";
    let mut s = format!("{about}\n\n");
    let mine = synopsis(command, spec, WRAP - LEAD.len());
    for (i, line) in others.iter().copied().chain(mine.lines()).enumerate() {
        let lead = if i == 0 { LEAD } else { "" };
        let _ = writeln!(s, "{lead:<w$}{line}", w = LEAD.len());
    }
    s.push('\n');
    let column = spec.iter().map(|o| o.usage().len()).max().unwrap_or(0) + 4;
    for o in spec {
        let mut lines = o.help.lines();
        let first = lines.next().unwrap_or("");
        let _ = writeln!(s, "{:<column$}{first}", format!("  {}", o.usage()));
        for l in lines {
            let _ = writeln!(s, "{:column$}{l}", "");
        }
    }
    let _ = write!(s, "\n{trailer}");
    s
}

/// `command [OPTION ...] ...` wrapped at `width`, continuation lines
/// indented past the program's name.
fn synopsis<K>(command: &str, spec: &[Opt<K>], width: usize) -> String {
    let indent = command.split(' ').next().unwrap_or("").len();
    let mut out = String::new();
    let mut line = command.to_string();
    let mut items = 0;
    for o in spec {
        let item = format!("[{}{}]", o.usage(), if o.many { " ..." } else { "" });
        if items > 0 && line.len() + 1 + item.len() > width {
            let _ = writeln!(out, "{line}");
            line = " ".repeat(indent);
            items = 0;
        }
        items += 1;
        line.push(' ');
        line.push_str(&item);
    }
    out.push_str(&line);
    out
}

/// A walbench mode: how it reads its command line and what it runs.
pub struct Mode<O> {
    /// The command that shows this mode's help, named in usage errors.
    pub help_command: &'static str,
    /// Printed before a failed run's error (to end a progress line).
    pub error_lead: &'static str,
    /// The options, or `None` for a request for help.
    pub parse: fn(&[String]) -> Result<Option<O>, String>,
    pub help: fn() -> String,
    pub run: fn(&O) -> Result<(), String>,
}

impl<O> Mode<O> {
    pub const fn new(
        help_command: &'static str,
        parse: fn(&[String]) -> Result<Option<O>, String>,
        help: fn() -> String,
        run: fn(&O) -> Result<(), String>,
    ) -> Mode<O> {
        Mode {
            help_command,
            error_lead: "",
            parse,
            help,
            run,
        }
    }

    /// Ends an open progress line before a failed run's error.
    pub const fn after_progress(self) -> Mode<O> {
        Mode {
            error_lead: "\n",
            ..self
        }
    }

    /// Parses and runs: 0 ok, 1 a failed run, 2 a usage error.
    pub fn main(&self, args: &[String]) -> i32 {
        let options = match (self.parse)(args) {
            Ok(Some(o)) => o,
            Ok(None) => {
                print!("{}", (self.help)());
                return 0;
            }
            Err(e) => {
                eprintln!("walbench: error: {e}");
                eprintln!("Try \"{}\" for more information.", self.help_command);
                return 2;
            }
        };
        match (self.run)(&options) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{}walbench: error: {e}", self.error_lead);
                1
            }
        }
    }
}

/// A comma-separated list of `what`.
pub fn list<T: FromStr>(v: &str, what: &str) -> Result<Vec<T>, String> {
    v.split(',')
        .map(|x| {
            x.trim()
                .parse::<T>()
                .map_err(|_| format!("invalid {what} \"{x}\" in \"{v}\""))
        })
        .collect()
}

/// A comma-separated list of names (repeatable options extend it).
pub fn names(v: &str) -> impl Iterator<Item = String> + '_ {
    v.split(',').map(|n| n.trim().to_string())
}

/// A `--clients` list: each count 1..=4096.
pub fn clients(v: &str) -> Result<Vec<u32>, String> {
    let c: Vec<u32> = list(v, "client count")?;
    if let Some(bad) = c.iter().find(|n| !(1..=4096).contains(*n)) {
        return Err(format!(
            "invalid client count {bad} in --clients \"{v}\" (each must be 1..=4096)"
        ));
    }
    Ok(c)
}

/// A `--seconds` value: 0 < S <= 3600.
pub fn seconds(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0 && *s <= 3600.0)
        .ok_or_else(|| format!("invalid --seconds \"{v}\" (0 < S <= 3600)"))
}

/// A `--chart` path: `.svg` or `.png`.
pub fn chart(v: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(v);
    crate::chart::check_path(&p)?;
    Ok(p)
}

/// Checks `--set` assignments now rather than in the first postmaster.
pub fn check_sets(sets: &[String]) -> Result<(), String> {
    let mut s = shmem::Settings::default();
    for a in sets {
        s.set_assignment(a).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The help of the options every measuring mode has.
pub const SECONDS_HELP: &str = "measured seconds per point (default 2)";
pub const SET_HELP: &str = "a setting for every run (see postmaster --help), e.g. fsync=off";

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum K {
        A,
        B,
    }

    fn spec() -> Vec<Opt<K>> {
        vec![
            Opt::new(K::A, "--alpha N", "the alpha\nsecond line").many(),
            Opt::new(K::B, "--beta", "a switch").alias("-b"),
        ]
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn parses_options_aliases_and_positionals() {
        let p = parse(&spec(), 1, &args("x --alpha 1 -b --alpha 2"))
            .unwrap()
            .unwrap();
        assert_eq!(
            p.options,
            vec![
                (K::A, "1".into()),
                (K::B, String::new()),
                (K::A, "2".into())
            ]
        );
        assert_eq!(p.positional, vec!["x".to_string()]);
        assert!(parse(&spec(), 0, &args("--beta -h")).unwrap().is_none());
        let err = |a: &str| parse(&spec(), 0, &args(a)).err().unwrap();
        assert_eq!(err("--alpha"), "option --alpha needs a value");
        assert_eq!(err("--gamma"), "unknown option \"--gamma\"");
        assert_eq!(err("x"), "unexpected argument \"x\"");
    }

    #[test]
    fn help_lists_every_option_once() {
        let h = help("about", &["other"], "cmd", &spec(), "trailer\n");
        assert!(
            h.starts_with("about\n\nUsage: other\n       cmd [--alpha N ...] [--beta]\n\n"),
            "{h}"
        );
        assert!(
            h.contains("\n  --alpha N  the alpha\n             second line\n"),
            "{h}"
        );
        assert!(h.contains("\n  --beta     a switch\n"), "{h}");
        assert!(!h.contains("-b "));
        assert!(h.ends_with("second line\n  --beta     a switch\n\ntrailer\n"));
    }

    #[test]
    fn shared_values_are_checked() {
        assert_eq!(clients("1, 4").unwrap(), vec![1, 4]);
        assert!(clients("0").unwrap_err().contains("1..=4096"));
        assert!(clients("1,x").unwrap_err().contains("invalid client count"));
        assert_eq!(seconds("0.5").unwrap(), 0.5);
        assert!(seconds("0").is_err() && seconds("3601").is_err());
        assert!(chart("a.png").is_ok() && chart("a.gif").is_err());
        assert!(check_sets(&["fsync=off".into()]).is_ok());
        assert!(check_sets(&["bogus=1".into()]).is_err());
        assert_eq!(names("a, b").collect::<Vec<_>>(), vec!["a", "b"]);
    }
}
