//! A process that dies is not the server's crash: a library worker or a
//! connection backend killed with SIGKILL is cleaned up after (its open
//! transaction aborted with an ABORT record, its XID cleared, its slot
//! freed; a WAL insertion it left half done filled with a filler record)
//! while everyone else goes on; one killed holding an LWLock makes the
//! server crash-restart. One log line says which case applied
//! (`backend::abandoned`).
//!
//! Exact points of death come from the test build's stop points
//! (`WALSHM_TEST_STOP`, `backend::stoppoint`): the child stops itself
//! there and the test kills it.
//!
//! The victim is `walshm-child victim MODE DIR`: a worker that attaches
//! to the server in DIR, opens a transaction, writes one transactional
//! message and waits to be killed.

use crate::common::wire::{cstr, data_rows, exchange, handshake_retrying, msg, socket_path};
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use walshm::{Error, RecordKind, Worker};

/// Starts the victim; `stop`: the stop point it stops itself at.
fn spawn_victim(tmp: &TempDir, mode: &str, dir: &Path, stop: Option<&str>) -> (Child, PathBuf) {
    let out = tmp.join(&format!("victim-{mode}.out"));
    let mut cmd = Command::new(child_bin());
    cmd.args(["victim", mode])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap());
    if let Some(point) = stop {
        cmd.env("WALSHM_TEST_STOP", point);
    }
    (cmd.spawn().expect("spawn the victim"), out)
}

/// Whether process `pid` is stopped (state T in /proc/PID/stat).
fn stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('T')))
        .unwrap_or(false)
}

/// A transaction of the bystander, committed durably: it must go through
/// (no ServerRestarted, no hang) while the victim is dead or cleaned up.
fn bystander_commits(w: &mut Worker, n: u32) {
    for i in 0..n {
        w.begin().expect("bystander begin");
        w.emit_tx("bystander", format!("m{i}").as_bytes())
            .expect("bystander emit_tx");
        w.commit().expect("bystander commit");
    }
}

/// `postmaster status --json`: (processes_cleaned, crash_restarts).
fn deaths(dir: &Path) -> (u64, u64) {
    let o = postmaster(&["status", "-D", dir.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(o.stdout.trim())
        .unwrap_or_else(|e| panic!("status JSON: {e}\n{}", o.describe()));
    (
        v["processes_cleaned"].as_u64().expect("processes_cleaned"),
        v["crash_restarts"].as_u64().expect("crash_restarts"),
    )
}

/// One record: (lsn, xid, kind, prefix, payload length).
type Rec = (u64, u32, RecordKind, String, usize);

/// Every record.
fn records(dir: &Path) -> Vec<Rec> {
    let mut r = walshm::Reader::open(dir, 0).expect("open reader");
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().expect("read WAL") {
        out.push((
            rec.lsn,
            rec.xid,
            rec.kind,
            rec.prefix.to_string(),
            rec.payload.len(),
        ));
    }
    out
}

/// The victim's transaction ended with an ABORT record and no COMMIT;
/// returns its XID.
fn assert_aborted(recs: &[Rec], xid: u32) {
    assert!(
        recs.iter().any(|r| r.1 == xid && r.2 == RecordKind::Abort),
        "no ABORT record for the victim's transaction {xid}"
    );
    assert!(
        !recs.iter().any(|r| r.1 == xid && r.2 == RecordKind::Commit),
        "the victim's transaction {xid} committed"
    );
}

/// pg_waldump reads the WAL to its normal end (through any filler).
fn assert_pg_waldump_reads_to_the_end(d: &DataDir) -> Option<Vec<String>> {
    pg_waldump(d, d.first_lsn, None)
}

/// A committed-only reader from the start never sees the victim's
/// messages, but sees the bystander's.
fn assert_committed_reader_skips_the_victim(w: &Worker) {
    let mut c = w.reader(0).expect("reader").committed();
    let mut bystander = 0;
    while let Some(m) = c.next_message().expect("read") {
        assert_ne!(
            m.prefix, "victim",
            "a message of an aborted transaction was delivered"
        );
        assert_ne!(m.prefix, walformat::FILLER_PREFIX, "a filler was delivered");
        bystander += usize::from(m.prefix == "bystander");
    }
    assert!(
        bystander > 0,
        "the bystander's committed messages were not delivered"
    );
}

/// A server with a bystander worker that has committed a few
/// transactions.
struct Scene {
    tmp: TempDir,
    d: DataDir,
    s: Server,
    bystander: Worker,
}

impl Scene {
    fn new(tag: &str) -> Scene {
        let tmp = TempDir::new(tag);
        let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
        let s = Server::start_ready(&d.path, tmp.path(), &[]);
        let mut bystander = attach_when_ready(&d.path);
        bystander_commits(&mut bystander, 3);
        Scene {
            tmp,
            d,
            s,
            bystander,
        }
    }

    /// Runs a victim in `mode` until it is ready (or stopped at stop
    /// point `stop`), then kills it with SIGKILL; returns its pid.
    fn kill_victim(&self, mode: &str, stop: Option<&str>) -> i32 {
        let (mut victim, out) = spawn_victim(&self.tmp, mode, &self.d.path, stop);
        let pid = victim.id() as i32;
        let at_its_point = wait_until(TIMEOUT, || match stop {
            Some(_) => stopped(pid),
            None => std::fs::read_to_string(&out).is_ok_and(|o| o.contains("ready")),
        });
        assert!(at_its_point, "the victim did not reach {stop:?}");
        kill(pid, libc::SIGKILL);
        let _ = victim.wait();
        pid
    }

    /// The server's clean-up line (waited for).
    fn cleaned_line(&mut self) -> String {
        self.s.wait_log("cleaned up without a restart", 1, TIMEOUT);
        let log = self.s.stderr();
        assert!(
            !log.contains("terminating any other active server processes"),
            "{log}"
        );
        let line = log
            .lines()
            .find(|l| l.contains("cleaned up without a restart"))
            .unwrap()
            .to_string();
        eprintln!("{line}");
        line
    }

    /// Stops the server after the bystander detached; every record (the
    /// directory lives as long as the `TempDir` returned).
    fn finish(self) -> (TempDir, DataDir, Vec<Rec>) {
        self.bystander.detach().unwrap();
        self.s.stop_ok();
        let recs = records(&self.d.path);
        (self.tmp, self.d, recs)
    }
}

#[test]
fn a_worker_killed_idle_in_a_transaction_is_cleaned_up_and_nobody_else_notices() {
    let mut sc = Scene::new("death-idle");
    let pid = sc.kill_victim("idle-tx", None);
    let line = sc.cleaned_line();
    assert!(
        line.contains(&format!("worker (PID {pid})")) && line.contains("aborted its transaction"),
        "{line}"
    );
    // Nobody else noticed: the bystander's calls just work.
    bystander_commits(&mut sc.bystander, 20);
    assert!(!sc.bystander.server_restarted());
    assert_eq!(deaths(&sc.d.path), (1, 0));
    // Its slot is free: every worker slot can be attached again.
    let all: Vec<Worker> = (0..7).map(|_| attach_when_ready(&sc.d.path)).collect();
    drop(all);
    assert_committed_reader_skips_the_victim(&sc.bystander);
    let (_tmp, d, recs) = sc.finish();
    let xid = recs
        .iter()
        .find(|r| r.3 == "victim")
        .map(|r| r.1)
        .expect("the victim's message");
    assert_aborted(&recs, xid);
    assert_pg_waldump_reads_to_the_end(&d);
}

#[test]
fn a_worker_killed_in_the_middle_of_a_copy_leaves_a_filler_and_the_flush_goes_on() {
    let mut sc = Scene::new("death-copy");
    sc.kill_victim("mid-copy", Some("insert_copy"));
    let line = sc.cleaned_line();
    assert!(
        line.contains("filled its unfinished record at")
            && line.contains("aborted its transaction"),
        "{line}"
    );
    // The insertion lock is free and the flush goes past the filler:
    // durable commits return.
    bystander_commits(&mut sc.bystander, 20);
    assert_eq!(deaths(&sc.d.path), (1, 0));
    assert_committed_reader_skips_the_victim(&sc.bystander);
    let (_tmp, d, recs) = sc.finish();
    assert!(
        !recs.iter().any(|r| r.3 == "victim"),
        "the cut-off message is gone"
    );
    let filler = recs
        .iter()
        .position(|r| r.2 == RecordKind::Other && r.4 > 19_000)
        .expect("a filler of the message's size");
    // The ABORT for the victim's XID follows the filler.
    let abort = recs[filler..]
        .iter()
        .find(|r| r.2 == RecordKind::Abort)
        .expect("an ABORT after the filler");
    assert_aborted(&recs, abort.1);
    if let Some(lines) = assert_pg_waldump_reads_to_the_end(&d) {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("LogicalMessage") && l.contains(walformat::FILLER_PREFIX)),
            "pg_waldump shows the filler message"
        );
    }
}

#[test]
fn a_worker_killed_holding_an_lwlock_makes_the_server_restart() {
    let mut sc = Scene::new("death-lwlock");
    let pid = sc.kill_victim("xid-lock", Some("xid_assign"));
    sc.s.wait_log("terminating any other active server processes", 1, TIMEOUT);
    let log = sc.s.stderr();
    let why = log
        .lines()
        .find(|l| l.contains("it died holding"))
        .unwrap_or("");
    eprintln!("{why}");
    assert!(
        why.contains(&format!("worker (PID {pid})")) && why.contains("it died holding an LWLock"),
        "{log}"
    );
    assert!(!log.contains("cleaned up without a restart"), "{log}");
    assert!(wait_until(TIMEOUT, || {
        sc.bystander.emit("bystander", b"x") == Err(Error::ServerRestarted)
    }));
    sc.s.wait_ready_n(2, TIMEOUT);
    assert_eq!(deaths(&sc.d.path), (0, 1));
    sc.finish();
}

/// One statement on a raw protocol connection; its rows.
fn sql(c: &mut std::os::unix::net::UnixStream, q: &str) -> Vec<Vec<Option<String>>> {
    let msgs = exchange(c, &msg(b'Q', &cstr(q)));
    assert!(!msgs.iter().any(|(t, _)| *t == b'E'), "{q}: {msgs:?}");
    data_rows(&msgs)
}

#[test]
fn a_connection_backend_killed_in_a_transaction_is_cleaned_up_and_other_sessions_go_on() {
    let tmp = TempDir::new("death-conn");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let (mut s, port) = wire::start_on_free_port(&d, tmp.path(), &[], &[], &[]);
    let sock = socket_path(&d.path, port);
    let mut victim = handshake_retrying(&sock);
    let mut other = handshake_retrying(&sock);
    let pid: i32 = sql(&mut victim, "SELECT pg_backend_pid()")[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    sql(&mut victim, "BEGIN");
    let xid: u32 = sql(&mut victim, "SELECT txid_current()")[0][0]
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    sql(
        &mut victim,
        "SELECT pg_logical_emit_message(true, 'victim', 'uncommitted')",
    );
    kill(pid, libc::SIGKILL);
    s.wait_log("cleaned up without a restart", 1, TIMEOUT);
    let line = s
        .stderr()
        .lines()
        .find(|l| l.contains("cleaned up without a restart"))
        .unwrap()
        .to_string();
    eprintln!("{line}");
    assert!(
        line.contains(&format!("connection backend (PID {pid})"))
            && line.contains(&format!("aborted its transaction {xid}")),
        "{line}"
    );
    // The other session goes on.
    for i in 0..10 {
        sql(&mut other, "BEGIN");
        sql(
            &mut other,
            &format!("SELECT pg_logical_emit_message(true, 'bystander', 'm{i}')"),
        );
        sql(&mut other, "COMMIT");
    }
    // Its row is gone from pg_stat_activity.
    let rows = sql(
        &mut other,
        &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"),
    );
    assert_eq!(rows[0][0].as_deref(), Some("0"), "{rows:?}");
    assert_eq!(deaths(&d.path), (1, 0));
    drop(other);
    s.stop_ok();
    assert_aborted(&records(&d.path), xid);
}
