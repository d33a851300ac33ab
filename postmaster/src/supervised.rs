//! Supervised workers: `postmaster start --worker 'NAME=COMMAND [ARGS]'`
//! (repeatable, and `worker = '...'` lines in walshm.conf). What each one
//! is, and the rules that decide what happens when it ends (PostgreSQL's
//! background-worker rules, bgworker.c):
//!
//! | how it ended                        | what follows                                  |
//! | ----------------------------------- | --------------------------------------------- |
//! | exit 0 after detaching              | done: not started again                       |
//! | exit 1 after detaching              | started again after `worker_restart_delay`    |
//! | anything else (a signal, no detach, | the crash of a shared-memory process: crash   |
//! | another code, a lost channel)       | restart of everything, then workers start     |
//! | its command could not be executed   | reported, retried after 1 s, doubling to 60 s |
//!
//! A worker that is done stays done after a crash restart (as an
//! unregistered background worker). During a fast shutdown nothing is
//! started again; a worker that ends without detaching then makes the
//! shutdown a crash-style stop (no shutdown checkpoint; the next start
//! recovers).
//!
//! Commands are split on whitespace with simple quoting: '...' keeps its
//! text as is, "..." and a bare backslash escape the next character. The
//! program is looked up in PATH and exec'd directly (no shell), so its
//! `comm` is its own name (`children::spawn_worker`).
//!
//! Starting one ([`Supervised::launch`]): a socketpair whose other end
//! the child inherits as its channel, then `children::spawn_worker`.
//!
//! Invariants: a worker has at most one process at a time (`pid`); the
//! restart time is always in the future when set; the back-off of a
//! command that cannot be executed never goes below 1 s nor above 60 s.

use crate::children::{spawn_worker, ChildExit, ExecPlan, SpawnError};
use crate::report::SupervisedFacts;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One `--worker NAME=COMMAND [ARGS]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSpec {
    pub name: String,
    /// The program (looked up in PATH) and its arguments.
    pub argv: Vec<String>,
}

impl WorkerSpec {
    /// Parses `NAME=COMMAND [ARGS]`.
    pub fn parse(text: &str) -> Result<WorkerSpec, String> {
        let bad =
            |why: &str| format!("invalid worker \"{text}\": {why} (expected NAME=COMMAND [ARGS])");
        let (name, command) = text.split_once('=').ok_or_else(|| bad("no '='"))?;
        let name = name.trim();
        if name.is_empty() || name.len() > 63 {
            return Err(bad("NAME must have 1 to 63 characters"));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(bad("NAME may hold letters, digits, '_', '-' and '.' only"));
        }
        let argv = split_words(command).map_err(|e| bad(&e))?;
        if argv.is_empty() {
            return Err(bad("no COMMAND"));
        }
        Ok(WorkerSpec {
            name: name.to_string(),
            argv,
        })
    }

    /// The command as given (for log lines).
    pub fn command_line(&self) -> String {
        self.argv.join(" ")
    }
}

/// Splits a command line into words: whitespace separates, '...' is
/// literal, "..." allows \" and \\, a bare backslash escapes one character.
pub fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated '".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("unterminated \"".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated \"".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next().ok_or("a backslash at the end")?);
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// What the supervisor must do after a worker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Exit 0 after detaching.
    Done,
    /// Exit 1 after detaching: start again at this time.
    RestartAt(Instant),
    /// Anything else (the reason, for the log): started again after the
    /// delay, once the cleaner has cleaned up after it (or the server
    /// restarted, if what it held needed that; `backend::abandoned`).
    Died(String),
}

/// One supervised worker and its history.
pub(crate) struct Supervised {
    pub spec: WorkerSpec,
    /// Its running process.
    pub pid: Option<i32>,
    /// Its current process holds a proc slot / has detached.
    pub attached: bool,
    pub detached: bool,
    /// Exited 0 after detaching: never started again.
    pub done: bool,
    /// When to start it next (None: as soon as the server runs).
    pub next_start: Option<Instant>,
    backoff: Duration,
    /// Processes started (exec succeeded).
    pub starts: u32,
    /// Attempts whose exec failed.
    pub exec_failures: u32,
    /// Restarts after an exit 1 or a death.
    pub restarts: u32,
    /// How its last process died (for the clean-up's log line).
    pub last_exit: Option<String>,
}

impl Supervised {
    pub fn new(spec: WorkerSpec) -> Supervised {
        Supervised {
            spec,
            pid: None,
            attached: false,
            detached: false,
            done: false,
            next_start: None,
            backoff: FIRST_BACKOFF,
            starts: 0,
            exec_failures: 0,
            restarts: 0,
            last_exit: None,
        }
    }

    /// Should it be started now (the server running normally)?
    pub fn is_due(&self, now: Instant) -> bool {
        !self.done && self.pid.is_none() && self.next_start.is_none_or(|t| t <= now)
    }

    pub fn started(&mut self, pid: i32) {
        self.pid = Some(pid);
        self.attached = false;
        self.detached = false;
        self.next_start = None;
        self.starts += 1;
    }

    /// Its exec failed: retry after the back-off (returned), which then
    /// doubles up to MAX_BACKOFF.
    pub fn exec_failed(&mut self, now: Instant) -> Duration {
        let wait = self.backoff;
        self.exec_failures += 1;
        self.next_start = Some(now + wait);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        wait
    }

    /// It attached: its command works, so the back-off starts over.
    pub fn attached_now(&mut self) {
        self.attached = true;
        self.backoff = FIRST_BACKOFF;
    }

    /// Its process is gone (reaped); what follows, by the rules above.
    pub fn exited(&mut self, exit: &ChildExit, delay: Duration, now: Instant) -> Verdict {
        let detached = self.detached;
        self.pid = None;
        self.attached = false;
        self.detached = false;
        match (detached, exit.code()) {
            (true, Some(0)) => {
                self.done = true;
                Verdict::Done
            }
            (true, Some(1)) => {
                self.restarts += 1;
                let at = now + delay;
                self.next_start = Some(at);
                Verdict::RestartAt(at)
            }
            (detached, _) => {
                let why = match detached {
                    true => format!("{} after detaching", exit.why),
                    false => format!("{} without detaching", exit.why),
                };
                self.last_exit = Some(why.clone());
                self.restarts += 1;
                self.next_start = Some(now + delay);
                Verdict::Died(why)
            }
        }
    }

    /// Its process was stopped with everyone else (crash restart): start
    /// it again with the next generation, unless it is done.
    pub fn stopped_with_everyone(&mut self) {
        self.pid = None;
        self.attached = false;
        self.detached = false;
    }

    /// Starts its process: a socketpair (our end is returned with the pid;
    /// the other is the child's `WALSHM_WORKER_FD`), then fork and exec.
    /// A failure is logged with its reason and the retry scheduled.
    pub fn launch(&mut self, datadir: &Path) -> Option<(i32, UnixStream)> {
        let (ours, theirs) = match UnixStream::pair() {
            Ok(p) => p,
            Err(e) => {
                self.start_failed(&format!("could not create its channel: {e}"));
                return None;
            }
        };
        let plan = ExecPlan::new(
            &self.spec.argv,
            theirs.as_raw_fd(),
            datadir,
            &self.spec.name,
        );
        let spawned = plan.and_then(|p| spawn_worker(&p, std::process::id() as i32));
        drop(theirs);
        match spawned {
            Ok(pid) => {
                self.started(pid);
                Some((pid, ours))
            }
            Err(SpawnError::Exec(e)) => {
                let cmd = self.spec.command_line();
                self.start_failed(&format!("could not execute command \"{cmd}\": {e}"));
                None
            }
            Err(SpawnError::Fork(e)) => {
                self.start_failed(&format!("could not fork: {e}"));
                None
            }
        }
    }

    fn start_failed(&mut self, why: &str) {
        let wait = self.exec_failed(Instant::now());
        crate::log(
            "LOG",
            &format!(
                "{}: {why}; trying again in {} s",
                self.describe(),
                wait.as_secs()
            ),
        );
    }

    /// What the summary reports about it.
    pub fn facts(&self) -> SupervisedFacts {
        SupervisedFacts {
            name: self.spec.name.clone(),
            starts: self.starts,
            exec_failures: self.exec_failures,
            restarts: self.restarts,
            done: self.done,
        }
    }

    /// "worker NAME" as log lines name it.
    pub fn describe(&self) -> String {
        format!("worker \"{}\"", self.spec.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(status: i32) -> ChildExit {
        ChildExit::from_wait_status(status)
    }

    #[test]
    fn specs_and_quoting() {
        let s = WorkerSpec::parse("ingest=my-prog --x 'a b' \"c \\\"d\\\"\" e\\ f").unwrap();
        assert_eq!(s.name, "ingest");
        assert_eq!(s.argv, ["my-prog", "--x", "a b", "c \"d\"", "e f"]);
        assert_eq!(WorkerSpec::parse("w=  prog  ").unwrap().argv, ["prog"]);
        for bad in [
            "noequals",
            "=prog",
            "w=",
            "w=   ",
            "bad name=prog",
            "w='open",
        ] {
            let e = WorkerSpec::parse(bad).unwrap_err();
            assert!(e.contains("invalid worker"), "{bad}: {e}");
        }
        assert_eq!(split_words("''").unwrap(), [""]);
    }

    #[test]
    fn exit_rules() {
        let now = Instant::now();
        let delay = Duration::from_secs(5);
        let mut w = Supervised::new(WorkerSpec::parse("w=prog").unwrap());
        assert!(w.is_due(now));
        w.started(10);
        assert!(!w.is_due(now));
        w.detached = true;
        // exit 1 after detaching (status word: code << 8)
        assert_eq!(
            w.exited(&exit(1 << 8), delay, now),
            Verdict::RestartAt(now + delay)
        );
        assert!(!w.is_due(now) && w.is_due(now + delay));
        // Any other end (exit 1 without detaching, SIGKILL, exit 2 after
        // detaching): died, started again after the delay (its slot is
        // the clean-up's business, not this rule's).
        for (status, detached) in [(1 << 8, false), (9, false), (2 << 8, true)] {
            w.started(11);
            w.detached = detached;
            assert!(matches!(
                w.exited(&exit(status), delay, now),
                Verdict::Died(_)
            ));
            assert!(!w.is_due(now) && w.is_due(now + delay));
            assert!(w.last_exit.is_some());
        }
        w.started(14);
        w.detached = true;
        assert_eq!(w.exited(&exit(0), delay, now), Verdict::Done);
        assert!(!w.is_due(now + delay * 100), "done is done");
        assert_eq!((w.starts, w.restarts), (5, 4));
    }

    #[test]
    fn exec_failures_back_off_from_one_second_to_a_minute() {
        let now = Instant::now();
        let mut w = Supervised::new(WorkerSpec::parse("w=prog").unwrap());
        let waits: Vec<u64> = (0..9).map(|_| w.exec_failed(now).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        w.attached_now();
        assert_eq!(w.exec_failed(now), FIRST_BACKOFF);
        assert_eq!(w.exec_failures, 10);
    }
}
