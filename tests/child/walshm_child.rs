//! `walshm-child`: the library-worker processes the integration tests run
//! beside a server (test only). A test needs a worker in a process of its
//! own when it kills it, stops it at a stop point, runs it as another user
//! or has the postmaster supervise it. An example of the root package
//! (Cargo.toml says why), which `cargo test` builds with the tests; they
//! find it in target/PROFILE/examples/ (`common::child_bin`).
//!
//! ```text
//! walshm-child producer [ARGS...]     worker/examples/producer.rs with ARGS;
//!                                     without ARGS, those in
//!                                     WALSHM_TEST_ARGS_<NAME> when run as
//!                                     supervised worker NAME
//!                                     (WALSHM_WORKER_NAME)
//! walshm-child fork-check DIR         attach, commit, fork: the child's commit
//!                                     is refused and its drop leaves the
//!                                     parent's attachment working
//! walshm-child blocked-emitter DIR    emit while another process holds every
//!                                     insertion lock, then re-attach
//! walshm-child victim MODE DIR        open a transaction, say "ready", wait to
//!                                     be killed
//! walshm-child writer MODE ROUNDS DIR messages for a reader to wake on
//! walshm-child standby-worker DIR [LSN]  commit one message, or read from LSN
//! ```
//!
//! Each mode reports on stdout, in lines the test parses, and through its
//! exit code (0 when every check held); a bad command line exits 2.

/// The worker library's example producer; its own `main` is not used.
#[allow(dead_code)]
#[path = "../../worker/examples/producer.rs"]
mod producer;

use shmem::clock::monotonic_ns;
use std::path::Path;
use std::time::{Duration, Instant};
use walshm::{Error, Worker};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let code = match words.as_slice() {
        ["producer", rest @ ..] => match producer_args(rest) {
            Some(a) => producer::run_with(a),
            None => usage("producer: no arguments and no WALSHM_TEST_ARGS_<worker name>"),
        },
        ["fork-check", dir] => fork_then_drop_in_child(Path::new(dir)),
        ["blocked-emitter", dir] => blocked_emitter(Path::new(dir)),
        ["victim", mode, dir] => victim(mode, Path::new(dir)),
        ["writer", mode, rounds, dir] => match rounds.parse() {
            Ok(n) => writer(mode, n, Path::new(dir)),
            Err(_) => usage("writer: ROUNDS is not a number"),
        },
        ["standby-worker", dir] => standby_worker(Path::new(dir), None),
        ["standby-worker", dir, lsn] => standby_worker(Path::new(dir), Some(lsn)),
        _ => usage(&format!("unknown command line {args:?}")),
    };
    std::process::exit(code);
}

fn usage(what: &str) -> i32 {
    eprintln!("walshm-child: {what} (see tests/child/walshm_child.rs)");
    2
}

/// The producer's arguments: those given, or, for a supervised worker
/// (whose environment the postmaster passes on with `WALSHM_WORKER_NAME`),
/// those in `WALSHM_TEST_ARGS_<worker name>`.
fn producer_args(given: &[&str]) -> Option<Vec<String>> {
    if !given.is_empty() {
        return Some(given.iter().map(|s| s.to_string()).collect());
    }
    let name = std::env::var("WALSHM_WORKER_NAME").ok()?;
    let args = std::env::var(format!("WALSHM_TEST_ARGS_{name}")).ok()?;
    Some(args.split_whitespace().map(String::from).collect())
}

/// Attach, commit, fork; the child's commit must fail with `ForkedChild`
/// and dropping its copy of the `Worker` must leave the parent's
/// attachment working. Exit 0 when every check held (the parent prints
/// what failed).
fn fork_then_drop_in_child(dir: &Path) -> i32 {
    let commit = |w: &mut Worker, what: &str| {
        w.begin()?;
        w.emit_tx("fork", what.as_bytes())?;
        w.commit()
    };
    let mut w = Worker::attach(Some(dir)).expect("attach");
    commit(&mut w, "before fork").expect("commit before fork");
    // SAFETY: this process has one thread; the child only calls the
    // library, then `_exit`s (no destructor of the parent's state runs).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let refused = matches!(
            commit(&mut w, "in the child"),
            Err(Error::ForkedChild { .. })
        );
        drop(w);
        // SAFETY: ends the child without running the parent's atexit work.
        unsafe { libc::_exit(if refused { 0 } else { 3 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        println!("FAIL the child's commit was not refused ({status:#x})");
        return 1;
    }
    match commit(&mut w, "after the child dropped its copy") {
        Ok(_) => {}
        Err(e) => {
            println!("FAIL parent commit after the child's drop: {e}");
            return 1;
        }
    }
    match w.detach() {
        Ok(()) => 0,
        Err(e) => {
            println!("FAIL parent detach: {e}");
            1
        }
    }
}

/// Process B of tests/workers/dead_generation.rs: blocks in `emit` on an
/// insertion lock that a killed process held. Prints `attached`, then
/// `emit=server_restarted ms=T` (T: how long the call took), then
/// `reattached lsn=L` after a flushed emit in the new generation; exit 0,
/// or 3 (the blocked emit succeeded), 4 (another error), 5 (re-attach
/// failed).
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

/// The victim of tests/crash/process_death.rs: attach, begin, one
/// transactional message (where a stop point of `WALSHM_TEST_STOP` may
/// stop it; `mid-copy`: large enough to span pages), then say "ready" and
/// wait to be killed.
fn victim(mode: &str, dir: &Path) -> i32 {
    let mut w = Worker::attach(Some(dir)).expect("attach");
    let size = match mode {
        "mid-copy" => 20_000,
        _ => 32,
    };
    w.begin().expect("begin");
    w.emit_tx("victim", &vec![b'v'; size]).expect("emit_tx");
    println!("ready");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The writer of tests/workers/reader_wake.rs: `flush` emits a message,
/// waits, flushes it, and prints `flushed I T` (CLOCK_MONOTONIC ns after
/// the flush returned); `insert` emits a message every 30 ms and prints
/// `emitted I T` (after the emit returned), then waits to be killed (at
/// most a minute).
fn writer(mode: &str, rounds: usize, dir: &Path) -> i32 {
    let mut w = Worker::attach(Some(dir)).expect("attach");
    for i in 0..rounds {
        w.emit("wake", format!("m{i}").as_bytes()).unwrap();
        if mode == "flush" {
            let end = w.insert_lsn();
            std::thread::sleep(Duration::from_millis(100));
            w.flush(end).unwrap();
            println!("flushed {i} {}", monotonic_ns());
        } else {
            println!("emitted {i} {}", monotonic_ns());
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    if mode == "insert" {
        std::thread::sleep(Duration::from_secs(60));
    }
    w.detach().unwrap();
    0
}

/// The worker of tests/replication/standby.rs, run as the server's user:
/// with `read_from`, read up to 100 records from that LSN on and print
/// `read N`; else commit one transactional message and print `committed
/// LSN`. Exit 0, or print the error and exit 1.
fn standby_worker(dir: &Path, read_from: Option<&str>) -> i32 {
    let result = (|| -> Result<String, Error> {
        let mut w = Worker::attach(Some(dir))?;
        let done = match read_from {
            Some(from) => {
                let mut r = w.reader(walformat::parse_lsn(from).expect("LSN"))?;
                let mut n = 0;
                while n < 100 && r.next_wait(Duration::from_millis(500))?.is_some() {
                    n += 1;
                }
                format!("read {n}")
            }
            None => {
                w.begin()?;
                w.emit_tx("standby-test", b"written by a worker")?;
                format!("committed {}", walformat::format_lsn(w.commit()?))
            }
        };
        w.detach()?;
        Ok(done)
    })();
    match result {
        Ok(done) => {
            println!("{done}");
            0
        }
        Err(e) => {
            println!("worker error: {e}");
            1
        }
    }
}
