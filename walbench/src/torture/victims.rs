//! Who a kill-mode cycle may kill, as data: one row per victim kind.
//!
//! A row names the victim (as the report counts it) and how it is found:
//! a child of the postmaster by its `comm`, the startup process during the
//! recovery window (a backend is killed first to start a crash restart,
//! then the startup process as soon as it shows up), or the postmaster
//! itself. The supervised library worker (`--worker-cmd`, see
//! `worker.rs`) is the row "worker", found by its program's comm; without
//! that option, drawing it kills a backend instead.
//!
//! Children are read from `/proc` (the parent pid in `/proc/PID/stat`);
//! a child that is gone by the time it is signalled is not an error (the
//! cycle picks again).

use std::time::{Duration, Instant};

/// How a victim is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// A live child of the postmaster with this `comm`.
    Child(&'static str),
    /// The startup process of a crash restart this cycle provokes.
    DuringRecovery,
    /// The postmaster (then its children go and it is started again).
    Postmaster,
    /// The supervised library worker (`--worker-cmd`), by its comm.
    LibraryWorker,
}

/// One kind of victim.
#[derive(Clone, Copy, Debug)]
pub struct Victim {
    pub name: &'static str,
    pub how: How,
}

/// The kill mode's victims, drawn uniformly per cycle.
pub const VICTIMS: &[Victim] = &[
    Victim {
        name: "backend",
        how: How::Child("backend"),
    },
    Victim {
        name: "walwriter",
        how: How::Child("walwriter"),
    },
    Victim {
        name: "checkpointer",
        how: How::Child("checkpointer"),
    },
    Victim {
        name: "startup",
        how: How::DuringRecovery,
    },
    Victim {
        name: "postmaster",
        how: How::Postmaster,
    },
    Victim {
        name: "worker",
        how: How::LibraryWorker,
    },
];

/// `(comm, state, ppid)` of `pid` from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(String, char, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (open, close) = (s.find('(')?, s.rfind(')')?);
    let mut rest = s[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((s[open + 1..close].to_string(), state, ppid))
}

/// Live children of `parent` whose comm is `comm`, by pid. Reads the
/// kernel's child lists of `parent`'s threads (a few small files) where
/// they exist, which is fast enough to catch a short-lived startup
/// process; else scans /proc.
pub fn children_named(parent: i32, comm: &str) -> Vec<i32> {
    let mut v: Vec<i32> = candidates(parent)
        .into_iter()
        .filter(|&p| matches!(stat(p), Some((c, st, pp)) if pp == parent && c == comm && st != 'Z'))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Pids that may be children of `parent`.
fn candidates(parent: i32) -> Vec<i32> {
    let pids = |dir: &str| -> Vec<i32> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let tasks = pids(&format!("/proc/{parent}/task"));
    let listed: Option<Vec<i32>> = tasks
        .iter()
        .map(|t| std::fs::read_to_string(format!("/proc/{parent}/task/{t}/children")).ok())
        .collect::<Option<Vec<String>>>()
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.iter()
                .flat_map(|s| s.split_whitespace())
                .filter_map(|p| p.parse().ok())
                .collect()
        });
    listed.unwrap_or_else(|| pids("/proc"))
}

/// Polls for a child of `parent` named `comm` for up to `timeout`.
pub fn wait_child(parent: i32, comm: &str, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(&p) = children_named(parent, comm).first() {
            return Some(p);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// SIGKILL `pid` (negative: a process group); false if it was gone.
pub fn sigkill(pid: i32) -> bool {
    shmem::sys::kill(pid, shmem::sys::Signal::SIGKILL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_victim_kind_is_listed_once() {
        let mut names: Vec<&str> = VICTIMS.iter().map(|v| v.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VICTIMS.len());
        assert!(VICTIMS.iter().any(|v| v.how == How::Postmaster));
        assert!(VICTIMS.iter().any(|v| v.how == How::DuringRecovery));
    }

    #[test]
    fn finds_own_children_by_comm() {
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let found = wait_child(me, "sleep", Duration::from_secs(5));
        assert_eq!(found, Some(c.id() as i32));
        assert!(sigkill(c.id() as i32));
        c.wait().unwrap();
        assert!(children_named(me, "sleep").is_empty());
    }
}
