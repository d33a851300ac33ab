//! An external worker waiting on a lock of a generation that ended
//! (`shmem::lwlock`, "Ended generations"): process A (`walshm-probe
//! --hold-insert-locks`) holds every WAL insertion lock, process B (this
//! binary in child mode, a `walshm::Worker`) blocks in `emit` waiting for
//! one; A is killed with SIGKILL, the postmaster crash-restarts, and B's
//! `emit` must return `ServerRestarted` within seconds (before the fix it
//! slept forever), after which B attaches to the new generation and works.
//!
//! B reports through its stdout and exit code: `attached`, then
//! `emit=server_restarted ms=T` (T: how long the call took), then
//! `reattached lsn=L` after a flushed emit in the new generation; exit 0,
//! or 3 (the blocked emit succeeded), 4 (another error), 5 (re-attach
//! failed).

mod common;

use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use walshm::{Error, Worker};

const CHILD_ENV: &str = "WALSHM_DEADGEN_CHILD";

/// Child mode (process B): run only when `CHILD_ENV` names a data
/// directory; in a normal test run it does nothing.
#[test]
fn child_blocked_emitter() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    std::process::exit(blocked_emitter(Path::new(&dir)));
}

fn blocked_emitter(dir: &Path) -> i32 {
    let Some(mut w) = attach_retrying(dir) else {
        return 5;
    };
    println!("attached procno={}", w.procno());
    let t = Instant::now();
    let r = w.emit("deadgen", b"blocked");
    let ms = t.elapsed().as_millis();
    match r {
        Err(Error::ServerRestarted) => println!("emit=server_restarted ms={ms}"),
        Ok(lsn) => {
            println!("emit=ok lsn={lsn} ms={ms}");
            return 3;
        }
        Err(e) => {
            println!("emit=error {e}");
            return 4;
        }
    }
    // Every later call says so too, and detaching touches nothing.
    if w.begin() != Err(Error::ServerRestarted) || w.detach().is_err() {
        return 4;
    }
    let Some(mut again) = attach_retrying(dir) else {
        return 5;
    };
    let r = again
        .emit("deadgen", b"after")
        .and_then(|lsn| again.flush(again.insert_lsn()).map(|_| lsn));
    match r {
        Ok(lsn) => println!("reattached lsn={lsn}"),
        Err(e) => {
            println!("reattached error {e}");
            return 4;
        }
    }
    if again.detach().is_err() {
        return 4;
    }
    0
}

/// Attaches, retrying while the server (re)starts.
fn attach_retrying(dir: &Path) -> Option<Worker> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match Worker::attach(Some(dir)) {
            Ok(w) => return Some(w),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                println!("attach error {e}");
                return None;
            }
        }
    }
}

/// A child process, killed and reaped however the test ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn a_waiter_on_a_killed_workers_lock_gets_server_restarted_and_reattaches() {
    let tmp = TempDir::new("deadgen");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let s = Server::start(&d.path, tmp.path(), &["--set", "fsync=off"]);
    // A: holds every WAL insertion lock of generation 1.
    let a_out = tmp.join("a.out");
    let deadline = Instant::now() + TIMEOUT;
    let mut a = loop {
        let mut a = Guard(
            Command::new(env!("CARGO_BIN_EXE_walshm-probe"))
                .args(["attach", "-D", d.path.to_str().unwrap()])
                .args(["--hold-insert-locks", "--hold-ms", "60000"])
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&a_out).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn walshm-probe"),
        );
        let holding = wait_until(Duration::from_secs(5), || {
            read(&a_out).contains("holding insert_locks=")
                || a.0.try_wait().ok().flatten().is_some()
        }) && read(&a_out).contains("holding insert_locks=");
        if holding {
            break a;
        }
        // The server was not ready yet: try again.
        drop(a);
        assert!(Instant::now() < deadline, "A never took the locks");
        std::thread::sleep(Duration::from_millis(100));
    };
    // B: blocks in emit on an insertion lock.
    let b_out = tmp.join("b.out");
    let exe = std::env::current_exe().unwrap();
    let mut b = Guard(
        Command::new(exe)
            .args([
                "child_blocked_emitter",
                "--exact",
                "--nocapture",
                "--quiet",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &d.path)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&b_out).unwrap())
            .stderr(std::fs::File::create(tmp.join("b.err")).unwrap())
            .spawn()
            .expect("spawn B"),
    );
    assert!(
        wait_until(TIMEOUT, || read(&b_out).contains("attached")),
        "B did not attach: {}",
        read(&b_out)
    );
    // B's emit really waits for A (it has not returned after a while).
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !read(&b_out).contains("emit="),
        "B's emit did not wait for A's lock: {}",
        read(&b_out)
    );
    assert!(b.0.try_wait().unwrap().is_none(), "B exited early");

    // Kill A: a crash of an external worker, so a crash restart.
    let killed = Instant::now();
    kill(a.0.id() as i32, libc::SIGKILL);
    let _ = a.0.wait();
    let returned = wait_until(Duration::from_secs(10), || read(&b_out).contains("emit="));
    assert!(
        returned,
        "B's emit still blocked {:?} after A was killed: {}\n--- server stderr ---\n{}",
        killed.elapsed(),
        read(&b_out),
        s.stderr()
    );
    let text = read(&b_out);
    assert!(
        text.contains("emit=server_restarted"),
        "B's blocked emit: {text}"
    );
    // B re-attaches to the new generation and writes there.
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = b.0.try_wait().unwrap();
        status.is_some()
    });
    let text = read(&b_out);
    assert_eq!(
        status.and_then(|st| st.code()),
        Some(0),
        "B's exit\n{text}\n--- B stderr ---\n{}",
        read(&tmp.join("b.err"))
    );
    let lsn: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("reattached lsn="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no reattached line: {text}"));
    s.stop_ok();
    // The new generation's message is in the WAL.
    let mut r = walshm::Reader::open(&d.path, 0).expect("open reader");
    let mut found = false;
    while let Some(rec) = r.next_record().expect("read WAL") {
        found |= rec.lsn == lsn && rec.prefix == "deadgen" && rec.payload == b"after";
    }
    assert!(
        found,
        "the message written after re-attaching is in the WAL"
    );
}
