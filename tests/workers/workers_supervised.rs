//! Worker attach, postmaster side: the unnamed segment, the
//! registration socket `DIR/.s.WALSHM.worker`, worker slots, liveness by
//! channel, and supervised workers (`postmaster start --worker`).
//!
//! The worker is `walshm-probe` (bin/walshm_probe.rs): it registers through
//! `shmem::register`, writes one structured line per attach (`attached
//! generation=G procno=P pid=PID t_ms=T`) to a status file, holds, detaches
//! and exits as its arguments say. The tests read those lines, the
//! postmaster's JSON summary and /proc, never the wording of a log line.
//! Every wait is bounded; every probe is killed and reaped by its guard and
//! every server's process group by `Server`'s drop.

use crate::common::*;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn probe_bin() -> &'static str {
    env!("CARGO_BIN_EXE_walshm-probe")
}

/// One `attached ...` line of a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Attach {
    generation: u64,
    procno: Option<u32>,
    pid: i32,
    t_ms: u64,
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The attach lines in a status file (none if it does not exist yet).
fn attaches(status: &Path) -> Vec<Attach> {
    complete_lines(&fs::read_to_string(status).unwrap_or_default())
        .lines()
        .filter(|l| l.starts_with("attached "))
        .map(|l| Attach {
            generation: field(l, "generation").unwrap().parse().unwrap(),
            procno: field(l, "procno").unwrap().parse().ok(),
            pid: field(l, "pid").unwrap().parse().unwrap(),
            t_ms: field(l, "t_ms").unwrap().parse().unwrap(),
        })
        .collect()
}

/// Waits until `status` holds at least `n` attach lines; returns them.
fn wait_attaches(s: &Server, status: &Path, n: usize, timeout: Duration) -> Vec<Attach> {
    let mut got = Vec::new();
    let ok = wait_until(timeout, || {
        got = attaches(status);
        got.len() >= n
    });
    assert!(
        ok,
        "expected {n} attach line(s) in {status:?}, got {got:?}\n--- stderr ---\n{}",
        s.stderr()
    );
    got
}

/// An external probe, killed and reaped however the test ends.
struct Probe {
    child: Option<Child>,
    status: PathBuf,
}

impl Probe {
    /// `walshm-probe attach -D DIR ARGS --status-file STATUS`, stdin piped
    /// (closing it ends an `--until-stdin-eof` hold).
    fn spawn(datadir: &Path, status: PathBuf, args: &[&str]) -> Probe {
        let child = Command::new(probe_bin())
            .arg("attach")
            .arg("-D")
            .arg(datadir)
            .args(args)
            .arg("--status-file")
            .arg(&status)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn walshm-probe");
        Probe {
            child: Some(child),
            status,
        }
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Closes its stdin (ends the hold) and waits for its exit code.
    fn finish(mut self, timeout: Duration) -> Option<i32> {
        let mut child = self.child.take().unwrap();
        drop(child.stdin.take());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("walshm-probe did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A probe run to its end (no hold): its output.
fn probe(datadir: &Path, args: &[&str]) -> Out {
    let mut cmd = Command::new(probe_bin());
    cmd.arg("attach").arg("-D").arg(datadir).args(args);
    run_cmd(&mut cmd, TIMEOUT)
}

/// The `--worker` value running walshm-probe supervised with `args`.
fn worker_arg(name: &str, status: &Path, args: &str) -> String {
    format!(
        "{name}={} supervised --status-file {} {args}",
        probe_bin(),
        status.display()
    )
}

/// A server with one workload backend (so that the JSON summary is
/// printed and there is a backend whose PID can be watched), fsync off.
fn start(tmp: &TempDir, extra: &[&str]) -> (DataDir, Server) {
    let d = init_keep(&tmp.join("data"), &[]);
    let mut args = unsynced_args("1", "emit:16");
    args.extend_from_slice(extra);
    let s = Server::start_ready(&d.path, tmp.path(), &args);
    s.wait_children(1);
    (d, s)
}

/// `start` with one supervised worker `name`, walshm-probe run with
/// `args`; returns its status file (`NAME.status`) too.
fn start_one_worker(tmp: &TempDir, name: &str, args: &str) -> (DataDir, Server, PathBuf) {
    let status = tmp.join(&format!("{name}.status"));
    let w = worker_arg(name, &status, args);
    let (d, s) = start(tmp, &["--worker", &w]);
    (d, s, status)
}

/// The summary's entry for supervised worker `name`.
fn supervised_entry(stdout: &str, name: &str) -> serde_json::Value {
    let v = summary_json(stdout).expect("summary line");
    v["supervised_workers"]
        .as_array()
        .expect("supervised_workers")
        .iter()
        .find(|w| w["name"] == name)
        .unwrap_or_else(|| panic!("no worker {name} in {v}"))
        .clone()
}

fn count(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a count in {v}"))
}

/// The server's own children, by comm: backend, walwriter, checkpointer.
fn server_children(s: &Server) -> Vec<(i32, String)> {
    s.children()
        .into_iter()
        .filter(|(_, c)| matches!(c.as_str(), "backend" | "walwriter" | "checkpointer"))
        .collect()
}

#[test]
fn the_segment_has_no_name_while_running_nor_after_kill9_of_the_postmaster() {
    let tmp = TempDir::new("w-noname");
    let (d, s) = start(&tmp, &[]);
    let kids = s.wait_children(1);
    assert!(segments_for(&d.path).is_empty(), "a named segment exists");
    assert_eq!(mapped_segments(s.pid), (1, false), "postmaster's mappings");
    for (pid, comm) in &kids {
        assert_eq!(mapped_segments(*pid), (1, false), "{comm} {pid}'s mappings");
    }
    // An observer attaches through the socket and maps the same segment.
    let o = probe(&d.path, &["--observer"]);
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    assert!(
        o.stdout.contains("attached generation=1 procno=none"),
        "{}",
        o.stdout
    );
    s.signal(libc::SIGKILL);
    let o = s.wait_exit(TIMEOUT);
    assert_eq!(o.status.signal(), Some(libc::SIGKILL));
    assert!(
        wait_until(Duration::from_secs(5), || kids
            .iter()
            .all(|(p, _)| !alive(*p))),
        "children survived the postmaster"
    );
    assert!(
        segments_for(&d.path).is_empty(),
        "a named segment after SIGKILL"
    );
    // The next start replaces the stale socket and pid file.
    let s = Server::start_ready(&d.path, tmp.path(), &unsynced_args("1", "emit:16"));
    let o = probe(&d.path, &["--observer"]);
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    s.stop_ok();
    assert_cleaned_up(&d.path);
}

#[test]
fn a_full_server_refuses_and_a_thousand_attach_detach_cycles_leak_no_slot() {
    let tmp = TempDir::new("w-full");
    let (d, s) = start(&tmp, &["--set", "max_worker_processes=2"]);
    let holders: Vec<Probe> = (0..2)
        .map(|i| Probe::spawn(&d.path, tmp.join(&format!("h{i}")), &["--until-stdin-eof"]))
        .collect();
    let mut procnos: Vec<Option<u32>> = holders
        .iter()
        .map(|h| wait_attaches(&s, &h.status, 1, TIMEOUT)[0].procno)
        .collect();
    procnos.sort();
    procnos.dedup();
    assert_eq!(procnos.len(), 2, "two distinct slots: {procnos:?}");
    let third = probe(&d.path, &[]);
    assert_eq!(third.code(), Some(3), "{}", third.describe());
    assert_eq!(third.stdout.trim(), "error=full");
    assert_no_panic("third attach", &third);
    // Observers take no slot; this one stays until the generation ends.
    let watcher = Probe::spawn(&d.path, tmp.join("w"), &["--observer", "--until-ended"]);
    wait_attaches(&s, &watcher.status, 1, TIMEOUT);
    for h in holders {
        assert_eq!(h.finish(TIMEOUT), Some(0), "holder detached and exited 0");
    }
    let started = Instant::now();
    let cycles = probe(&d.path, &["--cycles", "1000"]);
    assert_eq!(cycles.code(), Some(0), "{}", cycles.describe());
    assert_eq!(cycles.stdout.trim(), "cycles=1000");
    eprintln!(
        "1000 attach/detach cycles: {:?} (2 cores, shared)",
        started.elapsed()
    );
    // Both slots are free again.
    let again: Vec<Probe> = (0..2)
        .map(|i| Probe::spawn(&d.path, tmp.join(&format!("a{i}")), &["--until-stdin-eof"]))
        .collect();
    for p in &again {
        wait_attaches(&s, &p.status, 1, TIMEOUT);
    }
    for p in again {
        assert_eq!(p.finish(TIMEOUT), Some(0));
    }
    let o = s.stop_ok();
    assert_eq!(parse_summary(&o.stdout).crash_restarts, 0, "{}", o.stderr);
    assert_cleaned_up(&d.path);
    // The shutdown ended the observer's generation.
    let status = watcher.status.clone();
    assert_eq!(watcher.finish(TIMEOUT), Some(0));
    let text = fs::read_to_string(status).unwrap();
    assert!(text.lines().any(|l| l == "ended generation=1"), "{text}");
}

#[test]
fn supervised_workers_keep_their_slots_when_external_ones_fill_the_server() {
    let tmp = TempDir::new("w-reserved");
    let status = tmp.join("r.status");
    let w = worker_arg("r", &status, "--hold-ms 100 --exit 1");
    let (d, s) = start(
        &tmp,
        &[
            "--set",
            "max_worker_processes=2",
            "--set",
            "worker_restart_delay=300ms",
            "--worker",
            &w,
        ],
    );
    let holder = Probe::spawn(&d.path, tmp.join("h"), &["--until-stdin-eof"]);
    let held = wait_attaches(&s, &holder.status, 1, TIMEOUT)[0].procno;
    let refused = probe(&d.path, &[]);
    assert_eq!(
        refused.stdout.trim(),
        "error=full",
        "{}",
        refused.describe()
    );
    // Meanwhile the supervised worker keeps attaching to its own slot.
    let before = attaches(&status).len();
    let runs = wait_attaches(&s, &status, before + 2, TIMEOUT);
    assert!(
        runs.iter().all(|r| r.generation == 1 && r.procno != held),
        "{runs:?}"
    );
    assert_eq!(holder.finish(TIMEOUT), Some(0));
    let o = s.stop_ok();
    assert_eq!(parse_summary(&o.stdout).crash_restarts, 0, "{}", o.stderr);
    assert_cleaned_up(&d.path);
    // More supervised workers than slots: refused before starting.
    let w2 = worker_arg("r2", &status, "");
    let mut args = unsynced_args("1", "emit:16");
    args.extend([
        "--set",
        "max_worker_processes=1",
        "--worker",
        &w,
        "--worker",
        &w2,
    ]);
    let mut cmd = Command::new(postmaster_bin());
    cmd.arg("start").arg("-D").arg(&d.path).args(&args);
    let o = run_cmd(&mut cmd, TIMEOUT);
    assert_eq!(o.code(), Some(1), "{}", o.describe());
    assert!(o.stderr.contains("max_worker_processes"), "{}", o.stderr);
    assert_no_panic("too many workers", &o);
    assert_cleaned_up(&d.path);
}

#[test]
fn attaching_where_no_server_runs_is_a_clear_error() {
    let tmp = TempDir::new("w-noserver");
    let d = init_keep(&tmp.join("data"), &[]);
    let o = probe(&d.path, &[]);
    assert_eq!(o.code(), Some(2), "{}", o.describe());
    assert_eq!(o.stdout.trim(), "error=no_server");
    assert!(o.stderr.contains(".s.WALSHM.worker"), "{}", o.stderr);
    assert_no_panic("attach without a server", &o);
    // A socket file nobody listens on (a dead server's): the same.
    drop(std::os::unix::net::UnixListener::bind(d.path.join(".s.WALSHM.worker")).unwrap());
    let o = probe(&d.path, &["--observer"]);
    assert_eq!(o.code(), Some(2), "{}", o.describe());
    assert_no_panic("attach to a stale socket", &o);
}

#[test]
fn exit_1_after_detaching_restarts_only_that_worker_and_exit_0_is_done() {
    let tmp = TempDir::new("w-exit");
    let (ra, rb) = (tmp.join("a.status"), tmp.join("b.status"));
    let a = worker_arg("again", &ra, "--hold-ms 200 --exit 1");
    let b = worker_arg("once", &rb, "--hold-ms 200 --exit 0");
    // One from the command line, one from walshm.conf.
    let d = init_keep(&tmp.join("data"), &[]);
    let conf = d.path.join("walshm.conf");
    let text = fs::read_to_string(&conf).unwrap();
    fs::write(
        &conf,
        format!("{text}worker = '{b}'   # a supervised worker\n"),
    )
    .unwrap();
    let mut args = unsynced_args("1", "emit:16");
    args.extend(["--set", "worker_restart_delay=1s", "--worker", &a]);
    let s = Server::start_ready(&d.path, tmp.path(), &args);
    s.wait_children(1);
    let before = server_children(&s);
    assert_eq!(before.len(), 3, "{before:?}");
    let runs = wait_attaches(&s, &ra, 3, Duration::from_secs(15));
    for pair in runs.windows(2) {
        let gap = pair[1].t_ms - pair[0].t_ms;
        assert!(
            gap >= 1_150,
            "restarted {gap} ms after the previous start (hold 200 ms + delay 1 s): {runs:?}"
        );
        assert_ne!(pair[0].pid, pair[1].pid, "a new process each time");
        assert_eq!(pair[1].generation, 1, "no crash restart");
    }
    assert_eq!(
        attaches(&rb).len(),
        1,
        "the worker that exited 0 was started again"
    );
    assert_eq!(
        server_children(&s),
        before,
        "other children kept their PIDs"
    );
    let o = s.stop_ok();
    let sum = parse_summary(&o.stdout);
    assert_eq!(sum.crash_restarts, 0, "{}", o.stderr);
    let again = supervised_entry(&o.stdout, "again");
    assert!(count(&again, "restarts") >= 2, "{again}");
    assert_eq!(again["done"], false);
    let once = supervised_entry(&o.stdout, "once");
    assert_eq!(
        (count(&once, "starts"), once["done"].clone()),
        (1, true.into())
    );
    assert_cleaned_up(&d.path);
}

#[test]
fn exit_2_after_detaching_restarts_only_that_worker() {
    let tmp = TempDir::new("w-exit2");
    let status = tmp.join("e.status");
    let w = worker_arg("two", &status, "--hold-ms 300 --exit 2");
    // No workload: the summary is printed for the supervised worker alone.
    let d = init_keep(&tmp.join("data"), &[]);
    let s = Server::start_ready(&d.path, tmp.path(), &["--set", "fsync=off", "--worker", &w]);
    let runs = wait_attaches(&s, &status, 2, TIMEOUT);
    assert_eq!(
        (runs[0].generation, runs[1].generation),
        (1, 1),
        "started again in the same generation: {runs:?}"
    );
    let o = s.stop_ok();
    let sum = parse_summary(&o.stdout);
    assert_eq!(sum.crash_restarts, 0, "{}", o.stderr);
    assert!(sum.backends.is_empty());
    assert!(count(&supervised_entry(&o.stdout, "two"), "starts") >= 2);
    assert_cleaned_up(&d.path);
}

#[test]
fn kill9_of_a_supervised_worker_is_cleaned_up_after_and_it_runs_again() {
    let tmp = TempDir::new("w-kill");
    let (d, s, status) = start_one_worker(&tmp, "k", "--hold-ms 60000");
    let first = wait_attaches(&s, &status, 1, TIMEOUT)[0].clone();
    assert_eq!(first.generation, 1);
    let (comm, _, ppid) = proc_stat(first.pid).expect("worker process");
    assert_eq!(
        (comm.as_str(), ppid),
        ("walshm-probe", s.pid),
        "comm and parent"
    );
    assert_eq!(
        mapped_segments(first.pid).0,
        1,
        "the worker maps the segment"
    );
    // It inherited nothing but stdin/stdout/stderr and its channel.
    let fds: Vec<String> = fs::read_dir(format!("/proc/{}/fd", first.pid))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
                .unwrap()
                > 2
        })
        .map(|e| fs::read_link(e.path()).unwrap().display().to_string())
        .collect();
    assert!(
        fds.len() == 1 && fds[0].starts_with("socket:"),
        "descriptors above 2: {fds:?}"
    );
    let backends_before = server_children(&s);
    kill(first.pid, libc::SIGKILL);
    // It held nothing but its slot: cleaned up after, no restart.
    let runs = wait_attaches(&s, &status, 2, TIMEOUT);
    assert_eq!(
        (runs[1].generation, runs[1].procno),
        (1, first.procno),
        "attached to the same generation and slot: {runs:?}"
    );
    assert_ne!(runs[1].pid, first.pid);
    let after = server_children(&s);
    assert!(
        backends_before
            .iter()
            .filter(|k| k.0 != first.pid)
            .all(|k| after.contains(k)),
        "no server process was restarted: {backends_before:?} -> {after:?}"
    );
    // Fast shutdown: the worker gets SIGTERM, detaches, exits 0.
    let o = s.stop_ok();
    assert!(
        o.stderr.contains("cleaned up without a restart"),
        "{}",
        o.stderr
    );
    assert_eq!(parse_summary(&o.stdout).crash_restarts, 0, "{}", o.stderr);
    assert_eq!(count(&supervised_entry(&o.stdout, "k"), "starts"), 2);
    assert_cleaned_up(&d.path);
}

#[test]
fn a_command_that_cannot_run_is_retried_with_back_off_and_the_server_keeps_running() {
    let tmp = TempDir::new("w-missing");
    let not_exec = tmp.join("not-executable");
    fs::write(&not_exec, "#!/bin/sh\nexit 0\n").unwrap();
    let missing = "gone=/nonexistent/walshm-no-such-program --flag".to_string();
    let noexec = format!("noexec={}", not_exec.display());
    let (d, mut s) = start(&tmp, &["--worker", &missing, "--worker", &noexec]);
    let kids = server_children(&s);
    // Attempts at about 0, 1 and 3 s; the next would be at 7 s.
    std::thread::sleep(Duration::from_millis(4_500));
    assert!(s.try_wait().is_none(), "the server died\n{}", s.stderr());
    assert_eq!(server_children(&s), kids, "nothing was restarted");
    let o = s.stop_ok();
    assert_eq!(parse_summary(&o.stdout).crash_restarts, 0, "{}", o.stderr);
    for name in ["gone", "noexec"] {
        let w = supervised_entry(&o.stdout, name);
        let attempts = count(&w, "exec_failures");
        assert!(
            (2..=4).contains(&attempts),
            "{name}: {attempts} attempts in 4.5 s (1 s back-off doubling)\n{}",
            o.stderr
        );
        assert_eq!(count(&w, "starts"), 0, "{w}");
    }
    assert_cleaned_up(&d.path);
}

#[test]
fn kill9_of_an_external_worker_frees_its_slot_and_the_others_stay_attached() {
    let tmp = TempDir::new("w-external");
    let (d, mut s) = start(&tmp, &[]);
    let a = Probe::spawn(&d.path, tmp.join("a"), &["--until-stdin-eof"]);
    let b = Probe::spawn(&d.path, tmp.join("b"), &["--until-stdin-eof"]);
    assert_eq!(wait_attaches(&s, &a.status, 1, TIMEOUT)[0].generation, 1);
    let attached_b = wait_attaches(&s, &b.status, 1, TIMEOUT)[0].clone();
    assert_eq!(attached_b.pid, b.pid());
    kill(b.pid(), libc::SIGKILL);
    s.wait_log("cleaned up without a restart", 1, TIMEOUT);
    // Its slot is free again, in the same generation.
    let c = Probe::spawn(&d.path, tmp.join("c"), &["--until-stdin-eof"]);
    let attached_c = wait_attaches(&s, &c.status, 1, TIMEOUT)[0].clone();
    assert_eq!(
        (attached_c.generation, attached_c.procno),
        (1, attached_b.procno)
    );
    // A never saw its generation end: it detaches normally.
    let a_status = a.status.clone();
    assert_eq!(a.finish(TIMEOUT), Some(0));
    assert_eq!(c.finish(TIMEOUT), Some(0));
    let a_text = fs::read_to_string(&a_status).unwrap();
    assert!(!a_text.contains("ended generation"), "{a_text}");
    let o = s.stop_ok();
    assert_eq!(parse_summary(&o.stdout).crash_restarts, 0, "{}", o.stderr);
    assert_cleaned_up(&d.path);
}

#[test]
fn a_worker_that_exits_without_detaching_during_shutdown_is_cleaned_up_after() {
    let tmp = TempDir::new("w-shutdown");
    // On SIGTERM it exits 0 without detaching.
    let (d, s, status) = start_one_worker(&tmp, "nodetach", "--hold-ms 60000 --no-detach");
    wait_attaches(&s, &status, 1, TIMEOUT);
    let o = s.stop_timeout(Duration::from_secs(20));
    assert_no_panic("shutdown", &o);
    assert!(
        o.stderr.contains("cleaned up without a restart"),
        "{}",
        o.stderr
    );
    assert_eq!(parse_summary(&o.stdout).crash_restarts, 0, "{}", o.stderr);
    assert!(o.status.success(), "a clean shutdown\n{}", o.stderr);
    assert_cleaned_up(&d.path);
    // The next start recovers and runs.
    let s = Server::start_ready(&d.path, tmp.path(), &unsynced_args("1", "emit:16"));
    s.stop_ok();
}

#[test]
fn bad_worker_specs_are_refused_before_anything_starts() {
    let tmp = TempDir::new("w-badspec");
    let d = init_keep(&tmp.join("data"), &[]);
    let dir = d.path.to_str().unwrap();
    for bad in [
        "noequals",
        "=prog",
        "w=",
        "bad name=prog",
        "w='unterminated",
    ] {
        let o = postmaster(&["start", "-D", dir, "--worker", bad]);
        assert_eq!(o.code(), Some(2), "--worker {bad:?}\n{}", o.describe());
        assert_no_panic("bad --worker", &o);
    }
    let conf = d.path.join("walshm.conf");
    let text = fs::read_to_string(&conf).unwrap();
    assert!(
        text.contains("#worker = "),
        "init documents the worker line"
    );
    fs::write(&conf, format!("{text}worker = 'x'\n")).unwrap();
    let o = postmaster(&["start", "-D", dir]);
    assert_eq!(o.code(), Some(1), "{}", o.describe());
    assert!(
        o.stderr.contains("walshm.conf:"),
        "names the file and line: {}",
        o.stderr
    );
    assert_no_panic("bad worker line", &o);
    assert_cleaned_up(&d.path);
}
