//! An external worker waiting on a lock of a generation that ended
//! (`shmem::lwlock`, "Ended generations"): process A (`walshm-probe
//! --hold-insert-locks`) holds every WAL insertion lock, process B
//! (`walshm-child blocked-emitter`, a `walshm::Worker`) blocks in `emit`
//! waiting for one; A is killed with SIGKILL, the postmaster crash-restarts, and B's
//! `emit` must return `ServerRestarted` within seconds (before the fix it
//! slept forever), after which B attaches to the new generation and works.
//!
//! B reports through its stdout and exit code: `attached`, then
//! `emit=server_restarted ms=T` (T: how long the call took), then
//! `reattached lsn=L` after a flushed emit in the new generation; exit 0,
//! or 3 (the blocked emit succeeded), 4 (another error), 5 (re-attach
//! failed).

use crate::common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    let mut b = Guard(
        Command::new(child_bin())
            .arg("blocked-emitter")
            .arg(&d.path)
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
