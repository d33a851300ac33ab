//! The worker library against real servers: a user's process
//! attaches, writes messages and transactions through shared memory (the
//! walwriter flushes for it), reads the WAL back, and survives the
//! server's crash restarts; the C ABI is driven by C programs built here
//! with the system compiler against `libwalshm.so`.
//!
//! Child processes: the C programs, and `walshm-child producer` (the
//! library's example producer, tests/child/walshm_child.rs) as a Rust
//! worker, so that a worker can be killed with SIGKILL.

use crate::common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use walshm::{Error, Record, RecordKind, Worker};

/// An external Rust worker process (stdout to `out`).
fn spawn_external(args: &str, out: &Path) -> Child {
    Command::new(child_bin())
        .arg("producer")
        .args(args.split_whitespace())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
        .spawn()
        .expect("spawn external worker")
}

/// The `ack LSN` lines of a text.
fn acks(text: &str) -> Vec<u64> {
    parse_acks(text)
}

fn read_acks(path: &Path) -> Vec<u64> {
    acks(&std::fs::read_to_string(path).unwrap_or_default())
}

/// Every record of the WAL files, owned.
fn all_records(dir: &Path) -> Vec<(u64, u32, RecordKind, String, Vec<u8>)> {
    let mut r = walshm::Reader::open(dir, 0).expect("open reader");
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().expect("read WAL") {
        out.push(owned(&rec));
    }
    out
}

/// Asserts that every acknowledged LSN is a COMMIT record in the WAL.
fn assert_acks_committed(dir: &Path, acked: &[u64]) {
    let commits: BTreeSet<u64> = all_records(dir)
        .into_iter()
        .filter(|r| r.2 == RecordKind::Commit)
        .map(|r| r.0)
        .collect();
    let lost: Vec<String> = acked
        .iter()
        .filter(|a| !commits.contains(a))
        .map(|a| walformat::format_lsn(*a))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged commits are not COMMIT records in the WAL, first: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
}

/// Builds a C program against libwalshm.so and the header.
fn build_c(tmp: &TempDir, src: &str, name: &str) -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        deps.join("libwalshm.so").is_file(),
        "libwalshm.so not built next to the test binary in {}",
        deps.display()
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tmp.join(name);
    let o = run_cmd(
        Command::new("cc")
            .arg("-Wall")
            .arg("-Werror")
            .arg("-I")
            .arg(root.join("worker/include"))
            .arg(root.join(src))
            .arg("-L")
            .arg(&deps)
            .arg("-lwalshm")
            .arg(format!("-Wl,-rpath,{}", deps.display()))
            // DT_RPATH, which wins over LD_LIBRARY_PATH: cargo puts
            // target/debug first there, where an older libwalshm.so from
            // a `cargo build` may lie.
            .arg("-Wl,--disable-new-dtags")
            .arg("-o")
            .arg(&out),
        TIMEOUT,
    );
    assert!(o.status.success(), "cc {src} failed\n{}", o.describe());
    out
}

/// The `{"walshm_producer":1,...}` lines (`producer --summary`, printed
/// after a clean detach) in a text: (records, commits) each.
fn producer_summaries(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter(|l| l.starts_with("{\"walshm_producer\":1"))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("producer summary JSON");
            (
                v["records"].as_u64().unwrap(),
                v["commits"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The postmaster summary on supervised worker `name`: ((starts, done),
/// crash restarts of the run).
fn supervised_facts(o: &Out, name: &str) -> ((u64, bool), u64) {
    let v = summary_json(&o.stdout).unwrap_or_else(|| panic!("no summary\n{}", o.describe()));
    let w = v["supervised_workers"]
        .as_array()
        .and_then(|a| a.iter().find(|w| w["name"] == name))
        .unwrap_or_else(|| panic!("no supervised worker {name} in the summary\n{}", o.stdout))
        .clone();
    (
        (
            w["starts"].as_u64().expect("starts"),
            w["done"].as_bool().expect("done"),
        ),
        v["crash_restarts"].as_u64().expect("crash_restarts"),
    )
}

/// Waits until `cond`, failing with `what` after `timeout`.
fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(wait_until(timeout, cond), "timed out waiting for {what}");
}

/// Kills and reaps a child if still running.
fn kill_child(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// A server on a fresh data directory (1 MB segments, nothing recycled).
fn server(tmp: &TempDir, extra: &[&str]) -> (DataDir, Server) {
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let s = Server::start(&d.path, tmp.path(), extra);
    (d, s)
}

fn owned(rec: &Record<'_>) -> (u64, u32, RecordKind, String, Vec<u8>) {
    (
        rec.lsn,
        rec.xid,
        rec.kind,
        rec.prefix.to_string(),
        rec.payload.to_vec(),
    )
}

/// The WAL files this process has open (must stay empty: a worker never
/// writes WAL itself).
fn open_wal_files(dir: &Path) -> Vec<PathBuf> {
    let pg_wal = dir.join("pg_wal").canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(&pg_wal))
        .collect()
}

#[test]
fn rust_worker_writes_commits_aborts_and_reads_back() {
    let tmp = TempDir::new("wk-basic");
    // Few WAL buffers: the worker must often wait for the walwriter to
    // write a buffer page out before it can reuse it.
    let (d, s) = server(&tmp, &["--set", "wal_buffers=8", "--set", "fsync=off"]);
    let mut w = attach_when_ready(&d.path);
    let lsn1 = w.emit("rustw", b"hello").unwrap();
    w.begin().unwrap();
    let m1 = w.emit_tx("rustw", b"kept").unwrap();
    let c1 = w.commit().unwrap();
    assert!(w.flush_lsn() > c1, "a synchronous commit returns flushed");
    w.begin().unwrap();
    let m2 = w.emit_tx("rustw", b"dropped").unwrap();
    w.abort().unwrap();
    // 200 pages' worth of messages through 8 buffers.
    let big = vec![b'z'; 8000];
    for _ in 0..200 {
        w.emit("rustw-big", &big).unwrap();
    }
    let end = w.insert_lsn();
    w.flush(end).unwrap();
    assert!(w.flush_lsn() >= end);
    assert!(
        open_wal_files(&d.path).is_empty(),
        "the worker opened WAL files: {:?}",
        open_wal_files(&d.path)
    );
    // Errors, not panics.
    assert_eq!(w.commit(), Err(Error::NoTransaction));
    assert_eq!(w.emit_tx("p", b""), Err(Error::NoTransaction));
    w.begin().unwrap();
    assert_eq!(w.begin(), Err(Error::TransactionOpen));
    let huge = vec![0u8; walshm::MAX_PAYLOAD + 1];
    assert_eq!(
        w.emit_tx("p", &huge),
        Err(Error::PayloadTooLarge(walshm::MAX_PAYLOAD + 1))
    );
    assert_eq!(w.emit("a\0b", b""), Err(Error::BadPrefix));
    w.abort().unwrap();

    // The bounded reader sees what was flushed, with kinds and XIDs.
    let mut seen = Vec::new();
    {
        let mut r = w.reader(0).unwrap();
        while let Some(rec) = r.next_record().unwrap() {
            seen.push(owned(&rec));
        }
    }
    let find = |lsn: u64| seen.iter().find(|r| r.0 == lsn).cloned();
    let e = find(lsn1).expect("emit record read back");
    assert_eq!(
        (e.1, e.2, e.3.as_str(), &e.4[..]),
        (
            0,
            RecordKind::Message {
                transactional: false
            },
            "rustw",
            &b"hello"[..]
        )
    );
    let t = find(m1).expect("transactional message read back");
    assert_eq!(
        t.2,
        RecordKind::Message {
            transactional: true
        }
    );
    assert_ne!(t.1, 0, "transactional message carries its XID");
    let c = find(c1).expect("commit record read back");
    assert_eq!((c.1, c.2), (t.1, RecordKind::Commit));
    let a = find(m2).expect("aborted message read back");
    assert!(
        seen.iter().any(|r| r.2 == RecordKind::Abort && r.1 == a.1),
        "ABORT record for XID {}",
        a.1
    );
    assert_eq!(seen.iter().filter(|r| r.3 == "rustw-big").count(), 200);
    // Detaching inside a transaction aborts it.
    w.begin().unwrap();
    let open = w.emit_tx("rustw", b"open at detach").unwrap();
    w.detach().unwrap();
    s.stop_ok();
    let after = all_records(&d.path);
    let xid = after.iter().find(|r| r.0 == open).expect("open message").1;
    assert!(
        after.iter().any(|r| r.2 == RecordKind::Abort && r.1 == xid),
        "detach wrote an ABORT for XID {xid}"
    );

    // pg_waldump decodes the prefixes and the abort.
    if let Some(lines) = pg_waldump(&d, d.first_lsn, None) {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("prefix \"rustw\"; payload (5 bytes): 68 65 6C 6C 6F")),
            "{lines:#?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("rmgr: Transaction") && l.contains("ABORT")),
            "{lines:#?}"
        );
    }
}

#[test]
fn attach_without_a_server_is_a_clear_error() {
    let tmp = TempDir::new("wk-noserver");
    let d = init(&tmp.join("data"), &[]);
    match Worker::attach(Some(&d.path)) {
        Err(Error::Attach(m)) => assert!(!m.is_empty()),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("attached with no server running"),
    }
    match Worker::attach(Some(&tmp.join("missing"))) {
        Err(Error::Attach(_)) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("attached to a missing directory"),
    }
}

#[test]
fn supervised_c_and_rust_workers_write_what_pg_waldump_decodes() {
    let tmp = TempDir::new("wk-supervised");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let producer_c = build_c(&tmp, "worker/examples/c/producer.c", "producer_c");
    let c_worker = format!(
        "cw={} - 100 --tx --ack --prefix cworker",
        producer_c.display()
    );
    let r_worker = format!("rw={} producer", child_bin().display());
    let s = start_with_env(
        &d.path,
        tmp.path(),
        &[
            "--set",
            "fsync=off",
            "--worker",
            &c_worker,
            "--worker",
            &r_worker,
        ],
        &[(
            "WALSHM_TEST_ARGS_rw",
            "--tx --ack --count 100 --prefix rworker --summary",
        )],
    );
    wait_for("200 acks from the two workers", TIMEOUT, || {
        acks(&s.stdout()).len() >= 200
    });
    // Both exit 0 after detaching: done, not started again.
    wait_for("the workers to exit", TIMEOUT, || {
        !s.children()
            .iter()
            .any(|(_, c)| c == "producer_c" || c == CHILD_COMM)
    });
    let acked = acks(&s.stdout());
    assert_eq!(
        acked.len(),
        200,
        "each worker acknowledges its 100 commits once"
    );
    let o = s.stop_ok();
    // The Rust worker detached cleanly once (its summary line).
    assert_eq!(producer_summaries(&o.stdout), vec![(100, 100)]);
    for name in ["cw", "rw"] {
        // Exit 0 after detaching: done after one start, no crash.
        assert_eq!(supervised_facts(&o, name), ((1, true), 0), "worker {name}");
    }
    assert_acks_committed(&d.path, &acked);
    let recs = all_records(&d.path);
    for prefix in ["cworker", "rworker"] {
        let n = recs
            .iter()
            .filter(|r| {
                r.3 == prefix
                    && r.2
                        == RecordKind::Message {
                            transactional: true,
                        }
            })
            .count();
        assert_eq!(n, 100, "transactional messages with prefix {prefix}");
    }
    if let Some(lines) = pg_waldump(&d, d.first_lsn, None) {
        for prefix in ["cworker", "rworker"] {
            let n = lines
                .iter()
                .filter(|l| {
                    l.starts_with("rmgr: LogicalMessage")
                        && l.contains(&format!("prefix \"{prefix}\""))
                })
                .count();
            assert_eq!(n, 100, "pg_waldump lines with prefix {prefix}");
        }
    }
}

/// The supervised worker process (`walshm-child`).
fn rust_worker_pid(s: &Server) -> Option<i32> {
    s.children()
        .into_iter()
        .find(|(_, c)| c == CHILD_COMM)
        .map(|(p, _)| p)
}

/// What the server made of a worker's death, from its log: cleaned up
/// after (the rule when it died outside every shared critical section,
/// `backend::abandoned`) or a crash restart (it died inside one: a loop
/// of durable commits spends a little of its time there). Exactly one of
/// the two lines is there.
fn cleaned_up(log: &str) -> bool {
    let cleaned = log.contains("cleaned up without a restart");
    let restarted = log.contains("terminating any other active server processes");
    assert!(cleaned != restarted, "one of clean-up or restart: {log}");
    if restarted {
        assert!(
            log.contains("it died holding"),
            "the restart says why: {log}"
        );
    }
    cleaned
}

#[test]
fn kill9_of_a_supervised_worker_restarts_it_and_loses_no_ack() {
    let tmp = TempDir::new("wk-kill-supervised");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let r_worker = format!("rw={} producer", child_bin().display());
    // fsync = on: an ack promises the commit is on disk.
    let s = start_with_env(
        &d.path,
        tmp.path(),
        &["--worker", &r_worker],
        &[(
            "WALSHM_TEST_ARGS_rw",
            "--tx --ack --prefix killed --summary",
        )],
    );
    wait_for("50 acks", TIMEOUT, || acks(&s.stdout()).len() >= 50);
    let victim = rust_worker_pid(&s).expect("the worker runs");
    kill(victim, libc::SIGKILL);
    let before = acks(&s.stdout()).len();
    // Cleaned up after (or a crash restart), then the worker is started
    // again and acks more.
    wait_for("the worker to run again", TIMEOUT, || {
        rust_worker_pid(&s).is_some_and(|p| p != victim)
    });
    wait_for("acks after the restart", TIMEOUT, || {
        acks(&s.stdout()).len() >= before + 20
    });
    let acked = acks(&s.stdout());
    let o = s.stop_ok();
    assert_acks_committed(&d.path, &acked);
    // The killed worker printed no summary; the restarted one got SIGTERM
    // at the shutdown, detached and printed its summary.
    let sums = producer_summaries(&o.stdout);
    assert_eq!(sums.len(), 1, "one clean detach: {sums:?}");
    assert!(sums[0].1 >= 20, "the restarted worker committed: {sums:?}");
    let restarts = u64::from(!cleaned_up(&o.stderr));
    assert_eq!(
        supervised_facts(&o, "rw"),
        ((2, true), restarts),
        "started twice; a crash restart only if the log says so"
    );
}

#[test]
fn an_external_worker_killed_loses_no_ack_and_the_others_go_on() {
    let tmp = TempDir::new("wk-kill-external");
    let (d, mut s) = server(&tmp, &[]);
    let mut bystander = attach_when_ready(&d.path);
    bystander.emit("bystander", b"before").unwrap();
    let out = tmp.join("external.out");
    let mut child = spawn_external(
        &format!("-D {} --tx --ack --prefix ext", d.path.display()),
        &out,
    );
    wait_for("50 acks", TIMEOUT, || read_acks(&out).len() >= 50);
    kill_child(&mut child);
    wait_for("the server to act on the death", TIMEOUT, || {
        let log = s.stderr();
        log.contains("cleaned up without a restart")
            || log.contains("terminating any other active server processes")
    });
    if cleaned_up(&s.stderr()) {
        // Nobody else noticed.
        let lsn = bystander.emit("bystander", b"after").unwrap();
        bystander.flush(lsn).unwrap();
        assert!(!bystander.server_restarted());
        bystander.detach().unwrap();
    } else {
        // The bystander's next call says the server restarted.
        wait_for("the bystander to see the restart", TIMEOUT, || {
            bystander.emit("bystander", b"x") == Err(Error::ServerRestarted)
        });
        assert_eq!(bystander.begin(), Err(Error::ServerRestarted));
        bystander.detach().unwrap();
        s.wait_ready_n(2, TIMEOUT);
    }
    let mut again = attach_when_ready(&d.path);
    let lsn = again.emit("bystander", b"again").unwrap();
    again.flush(again.insert_lsn()).unwrap();
    again.detach().unwrap();
    let acked = read_acks(&out);
    s.stop_ok();
    assert_acks_committed(&d.path, &acked);
    assert!(all_records(&d.path)
        .iter()
        .any(|r| r.0 == lsn && r.4 == b"again"));
}

#[test]
fn consumer_sees_exactly_the_committed_messages_in_order() {
    let tmp = TempDir::new("wk-consumer");
    let (d, s) = server(&tmp, &["--set", "fsync=off"]);
    let consumer = attach_when_ready(&d.path);
    let start = consumer.insert_lsn();
    let mut messages = consumer.reader(0).unwrap().committed();
    let outs: Vec<PathBuf> = (0..2).map(|i| tmp.join(&format!("p{i}.out"))).collect();
    let mut producers: Vec<Child> = outs
        .iter()
        .map(|o| {
            spawn_external(
                &format!(
                    "-D {} --tx --ack --abort-every 3 --count 300 --prefix cons",
                    d.path.display()
                ),
                o,
            )
        })
        .collect();
    // Tail while they write.
    let mut got = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while got.len() < 400 && Instant::now() < deadline {
        if let Some(m) = messages.next_wait(Duration::from_millis(200)).unwrap() {
            if m.lsn >= start {
                got.push(m);
            }
        }
    }
    for p in &mut producers {
        let st = p.wait().unwrap();
        assert!(st.success(), "producer failed: {st:?}");
    }
    // Nothing more arrives: the aborted ones never do.
    while let Some(m) = messages.next_wait(Duration::from_millis(300)).unwrap() {
        got.push(m);
    }
    drop(messages);
    consumer.detach().unwrap();
    s.stop_ok();
    let acked: BTreeSet<u64> = outs.iter().flat_map(|o| read_acks(o)).collect();
    assert_eq!(acked.len(), 400, "2 producers x 200 commits acknowledged");
    let commits: Vec<u64> = got.iter().map(|m| m.commit_lsn).collect();
    assert_eq!(
        commits.iter().copied().collect::<BTreeSet<_>>(),
        acked,
        "one message per committed transaction, none else"
    );
    assert_eq!(got.len(), 400, "no duplicates");
    assert!(
        commits.windows(2).all(|w| w[0] < w[1]),
        "delivered in commit (LSN) order"
    );
    assert!(got
        .iter()
        .all(|m| m.lsn < m.commit_lsn && m.prefix == "cons"));
    assert!(
        got.iter()
            .all(|m| !String::from_utf8_lossy(&m.payload).contains("abort")),
        "an aborted message was delivered"
    );
}

#[test]
fn c_abi_bad_input_gives_errors_not_crashes() {
    let tmp = TempDir::new("wk-c-bad");
    let (_, s) = run_c_checks(&tmp, "bad_input");
    s.stop_ok();
}

/// The C ABI's slots: create, read committed messages, confirm, resume,
/// drop (worker/tests/c/slot.c).
#[test]
fn c_abi_slots_resume_where_confirmed() {
    let tmp = TempDir::new("wk-c-slot");
    let (_, s) = run_c_checks(&tmp, "slot");
    s.stop_ok();
}

/// Builds `worker/tests/c/NAME.c`, starts a server and runs the program
/// against it; it must print "ALL OK" and exit 0.
fn run_c_checks(tmp: &TempDir, name: &str) -> (DataDir, Server) {
    let prog = build_c(tmp, &format!("worker/tests/c/{name}.c"), name);
    let (d, s) = server(tmp, &["--set", "fsync=off"]);
    attach_when_ready(&d.path).detach().unwrap();
    let o = run_cmd(Command::new(&prog).arg(&d.path), TIMEOUT);
    assert!(
        o.status.success() && o.stdout.contains("ALL OK"),
        "C program {name}\n{}",
        o.describe()
    );
    (d, s)
}

/// A process that forks after attaching: neither a C child that detaches
/// nor a Rust child that drops its copy may end the parent's attachment,
/// and the server keeps admitting new workers; a C reader left open across
/// its worker's detach is refused after another attach.
#[test]
fn a_forked_child_cannot_end_its_parents_attachment() {
    let tmp = TempDir::new("wk-fork");
    let (d, s) = run_c_checks(&tmp, "fork_child");
    Worker::attach(Some(&d.path))
        .expect("a new process attaches at once after the C child's detach")
        .detach()
        .unwrap();
    let o = run_cmd(
        Command::new(child_bin()).arg("fork-check").arg(&d.path),
        TIMEOUT,
    );
    assert!(
        o.status.success(),
        "walshm-child fork-check\n{}",
        o.describe()
    );
    Worker::attach(Some(&d.path))
        .expect("a new process attaches at once after the Rust child's drop")
        .detach()
        .unwrap();
    let st = run_cmd(
        Command::new(env!("CARGO_BIN_EXE_postmaster"))
            .args(["status", "-D"])
            .arg(&d.path),
        TIMEOUT,
    );
    assert!(st.status.success(), "postmaster status\n{}", st.describe());
    s.stop_ok();
}

/// Prefixes have a limit of their own, said as such (not as a payload's).
#[test]
fn a_prefix_over_the_limit_is_refused_by_its_own_name() {
    let tmp = TempDir::new("wk-prefix");
    let (d, s) = server(&tmp, &["--set", "fsync=off"]);
    let mut w = attach_when_ready(&d.path);
    let at_limit = "p".repeat(walshm::MAX_PREFIX);
    w.emit(&at_limit, b"x").expect("a prefix at the limit");
    let over = "p".repeat(walshm::MAX_PREFIX + 1);
    let e = w.emit(&over, b"x").unwrap_err();
    assert_eq!(e, Error::PrefixTooLong(walshm::MAX_PREFIX + 1));
    assert!(e.to_string().contains("prefix of 65537 bytes"), "{e}");
    w.begin().unwrap();
    assert_eq!(w.emit_tx(&over, b"x").unwrap_err(), e);
    w.abort().unwrap();
    w.detach().unwrap();
    s.stop_ok();
}

#[test]
fn attach_detach_1000_times_leaks_no_slot_and_a_full_server_refuses() {
    let tmp = TempDir::new("wk-slots");
    let (d, s) = server(
        &tmp,
        &["--set", "fsync=off", "--set", "max_worker_processes=2"],
    );
    attach_when_ready(&d.path).detach().unwrap();
    for i in 0..1000 {
        let w = Worker::attach(Some(&d.path)).unwrap_or_else(|e| panic!("attach {i}: {e}"));
        w.detach().unwrap_or_else(|e| panic!("detach {i}: {e}"));
    }
    let a = Worker::attach(Some(&d.path)).unwrap();
    let b = Worker::attach(Some(&d.path)).unwrap();
    match Worker::attach(Some(&d.path)) {
        Err(Error::Attach(m)) => assert!(!m.is_empty()),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("a third worker attached with max_worker_processes=2"),
    }
    a.detach().unwrap();
    let c = Worker::attach(Some(&d.path)).expect("a freed slot is reused");
    drop(c); // dropping detaches too
    b.detach().unwrap();
    Worker::attach(Some(&d.path)).unwrap().detach().unwrap();
    s.stop_ok();
}

#[test]
fn a_killed_postmaster_gives_errors_not_hangs() {
    let tmp = TempDir::new("wk-pm-killed");
    let (d, mut s) = server(&tmp, &["--set", "fsync=off"]);
    let r = attach_when_ready(&d.path);
    let out = tmp.join("orphan.out");
    let mut child = spawn_external(
        &format!("-D {} --tx --ack --prefix orphan", d.path.display()),
        &out,
    );
    wait_for("acks", TIMEOUT, || read_acks(&out).len() >= 10);
    // SIGKILL: the postmaster cannot mark the segment ended; its children
    // die with it, so nobody will flush for anyone any more.
    s.signal(libc::SIGKILL);
    wait_for("the postmaster to die", TIMEOUT, || s.try_wait().is_some());
    // The producer's next commit fails (server restarted): it exits 1.
    let mut status = None;
    wait_until(Duration::from_secs(10), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    kill_child(&mut child);
    let status = status.expect("the orphaned producer hangs instead of failing");
    assert_eq!(status.code(), Some(1), "orphaned producer's exit");
    // A tail reader bounded by the dead server's flush position says so
    // too (well before its own timeout).
    assert_restart_reported_soon(|| {
        let mut tail = r.reader(r.flush_lsn()).unwrap();
        tail.next_wait(Duration::from_secs(10)).map(|x| x.is_some())
    });
    r.detach().unwrap();
}
