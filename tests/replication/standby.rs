//! A standby and its promotion, with PostgreSQL 15's unmodified tools:
//! `pg_basebackup -R -X stream` copies a walshm primary that commits
//! synchronously (`synchronous_standby_names` names the standby), the copy
//! started as a standby follows it (walreceiver, read-only sessions,
//! `pg_stat_replication`, `pg_stat_wal_receiver`), the primary's whole
//! process group is killed with SIGKILL, `pg_ctl promote` makes the
//! standby a primary on timeline 2 holding every acknowledged commit, a
//! client and a library worker write to it, and the old primary started
//! as a standby of the new one never writes: it follows timeline 2, or
//! refuses to when its WAL went past the switch point. A second test: a
//! standby stopped and started again resumes (restartpoints remove old
//! segments), streams from a physical slot (`primary_slot_name`), and
//! `pg_promote()` promotes it; a second standby then follows it onto
//! timeline 2 and is promoted onto timeline 3. A third: a failed
//! fdatasync in the walreceiver (the `wal_fsync` fail point) is a PANIC
//! the standby recovers from by itself, losing no acknowledged commit.
//!
//! Skipped loudly without PostgreSQL 15's tools (a failure with
//! WALSHM_REQUIRE_PG=1). `pg_ctl` refuses to run as root, and a standby
//! connects over the primary's Unix socket, which admits only the
//! server's own user: as root, every process of these tests runs as the
//! `postgres` user (`setpriv`). Servers run in process groups of their
//! own, killed on drop; every command has a time limit.

use crate::common::wire::{free_port, pg_client};
use crate::common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SEG: u64 = 1 << 20;

/// The tools these tests need, and the server's user.
struct Pg {
    basebackup: PathBuf,
    pg_ctl: PathBuf,
    psql: PathBuf,
    user: ServerUser,
}

fn pg() -> Option<Pg> {
    Some(Pg {
        basebackup: pg_client("pg_basebackup")?,
        pg_ctl: pg_client("pg_ctl")?,
        psql: pg_client("psql")?,
        user: ServerUser::find("the standby tests")?,
    })
}

impl Pg {
    /// `program ARGS...` as the server's user.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = self.user.command(program, args);
        c.env("PGCONNECT_TIMEOUT", "10");
        c
    }

    fn run(&self, program: &Path, args: &[&str]) -> Out {
        run_cmd(&mut self.command(program, args), TIMEOUT)
    }

    fn give(&self, dir: &Path) {
        self.user.give(dir)
    }

    /// One SQL statement through psql (unaligned, tuples only).
    fn sql(&self, dir: &Path, port: u16, sql: &str) -> Out {
        let port = port.to_string();
        let args = [
            "-X",
            "-At",
            "-h",
            dir.to_str().unwrap(),
            "-p",
            &port,
            "-c",
            sql,
        ];
        self.run(&self.psql, &args)
    }

    /// The value `sql` returns, panicking with psql's words if it fails.
    fn value(&self, dir: &Path, port: u16, sql: &str) -> String {
        let o = self.sql(dir, port, sql);
        assert!(o.status.success(), "{sql}: {}", o.describe());
        o.stdout.trim().to_string()
    }

    fn pg_ctl(&self, dir: &Path, args: &[&str]) -> Out {
        let log = dir.with_extension("log");
        let mut all = vec!["-D", dir.to_str().unwrap(), "-l", log.to_str().unwrap()];
        all.extend_from_slice(args);
        self.run(&self.pg_ctl, &all)
    }
}

/// A server of these tests: `postmaster start` (in its own process group,
/// stdout and stderr to files) or one `pg_ctl` started (found by its pid
/// file; pg_ctl makes it a session leader). Its process group is killed
/// with SIGKILL on drop.
struct Srv {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    stdout: PathBuf,
    stderr: PathBuf,
    /// Not killed yet.
    live: bool,
}

impl Srv {
    fn start(pg: &Pg, dir: &Path, port: u16, args: &[&str]) -> Srv {
        Srv::start_with_env(pg, dir, port, args, &[])
    }

    /// [`Srv::start`] with `env` added to the server's environment.
    fn start_with_env(pg: &Pg, dir: &Path, port: u16, args: &[&str], env: &[(&str, &str)]) -> Srv {
        let stdout = dir.with_extension("out");
        let stderr = dir.with_extension("err");
        let port_set = format!("port={port}");
        let mut all = vec!["start", "-D", dir.to_str().unwrap(), "--set", &port_set];
        all.extend_from_slice(args);
        let child = pg
            .command(Path::new(postmaster_bin()), &all)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .process_group(0)
            .spawn()
            .expect("start postmaster");
        let s = Srv {
            dir: dir.to_path_buf(),
            port,
            child: Some(child),
            stdout,
            stderr,
            live: true,
        };
        s.wait_log("ready to accept", Duration::from_secs(30));
        s
    }

    /// A server `pg_ctl start -w` started with `-p port` and `extra`.
    fn pg_ctl_start(pg: &Pg, dir: &Path, port: u16, extra: &str) -> Srv {
        let opts = format!("-p {port} {extra}");
        let o = pg.pg_ctl(
            dir,
            &[
                "-p",
                postmaster_bin(),
                "-o",
                &opts,
                "-w",
                "-t",
                "30",
                "start",
            ],
        );
        let s = Srv {
            dir: dir.to_path_buf(),
            port,
            child: None,
            stdout: dir.with_extension("log"),
            stderr: dir.with_extension("log"),
            live: true,
        };
        assert!(
            o.status.success(),
            "pg_ctl start: {}\n{}",
            o.describe(),
            s.log()
        );
        s
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    fn wait_log(&self, needle: &str, timeout: Duration) {
        assert!(
            wait_until(timeout, || self.log().contains(needle)),
            "no {needle:?} in the log within {timeout:?}\n{}",
            self.log()
        );
    }

    /// The process group: the postmaster's pid (a group leader either way).
    fn pgid(&self) -> Option<i32> {
        match &self.child {
            Some(c) => Some(c.id() as i32),
            None => live_postmaster(&self.dir),
        }
    }

    /// SIGKILL to the whole process group, then reaped; once only (a
    /// later server in the same directory is another's).
    fn kill9(&mut self) {
        if std::mem::take(&mut self.live) {
            if let Some(g) = self.pgid() {
                // SAFETY: kill has no memory effects; the group may be gone.
                unsafe { libc::kill(-g, libc::SIGKILL) };
            }
        }
        if let Some(c) = self.child.as_mut() {
            let _ = c.wait();
        }
        self.child = None;
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Runs `walshm-child standby-worker` against `dir` as the server's user
/// (a library worker that commits one message, printing `committed LSN`);
/// `read_from`: read up to 100 records from there instead (`read N`).
fn worker(pg: &Pg, dir: &Path, read_from: Option<u64>) -> Out {
    let dir = dir.to_str().expect("UTF-8 data directory");
    let lsn = read_from.map(walformat::format_lsn);
    let mut args = vec!["standby-worker", dir];
    args.extend(lsn.as_deref());
    pg.run(&child_bin(), &args)
}

/// `pg_basebackup -R -X stream` of `pri` into `dir` (as the server's user).
fn base_backup(pg: &Pg, pri: &Srv, dir: &Path) {
    let port = pri.port.to_string();
    let args = [
        "-h",
        pri.dir.to_str().unwrap(),
        "-p",
        &port,
        "-D",
        dir.to_str().unwrap(),
        "-R",
        "-X",
        "stream",
        "--checkpoint=fast",
    ];
    let o = pg.run(&pg.basebackup, &args);
    assert!(
        o.status.success(),
        "pg_basebackup: {}\n{}",
        o.describe(),
        pri.log()
    );
    assert!(dir.join("standby.signal").is_file());
    let auto = std::fs::read_to_string(dir.join("postgresql.auto.conf")).unwrap();
    assert!(auto.contains("primary_conninfo"), "{auto}");
}

/// The segment files in `dir/pg_wal`, sorted.
fn wal_segments(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("pg_wal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.len() == 24 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    names.sort();
    names
}

/// `postmaster init -D dir` with 1 MB segments, as the server's user.
fn init_dir(pg: &Pg, dir: &Path) {
    let o = pg.run(
        Path::new(postmaster_bin()),
        &[
            "init",
            "-D",
            dir.to_str().unwrap(),
            "--wal-segment-size",
            "1",
        ],
    );
    assert!(o.status.success(), "init: {}", o.describe());
}

/// The COMMIT records of timeline 1 in `pg_wal`, the switch segment's
/// `.partial` file read as a segment (copied into `scratch`).
fn timeline1_commits(pg_wal: &Path, scratch: &Path, from: u64) -> std::collections::HashSet<u64> {
    std::fs::create_dir_all(scratch).unwrap();
    for e in std::fs::read_dir(pg_wal).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let seg = name.trim_end_matches(".partial");
        if seg.len() == 24 && seg.starts_with("00000001") {
            std::fs::copy(pg_wal.join(&name), scratch.join(seg)).unwrap();
        }
    }
    reader_commits(scratch, SEG, from)
}

/// In a new temporary directory named after `tag` (given to the server
/// user): a primary in `pri` whose commits wait for `standby1` (two
/// backends of acknowledged `emit-tx`), and its base backup in `sby`.
/// Returns the directory, the two data directories and the running
/// primary.
fn sync_primary_and_copy(pg: &Pg, tag: &str) -> (TempDir, PathBuf, PathBuf, Srv) {
    let t = TempDir::new(tag);
    pg.give(t.path());
    let (pri_dir, sby_dir) = (t.join("pri"), t.join("sby"));
    init_dir(pg, &pri_dir);
    let sync = "synchronous_standby_names=standby1";
    let workload = ["--workers", "2", "--workload", "emit-tx:64", "--ack"];
    let mut args = vec!["--set", sync];
    args.extend_from_slice(&workload);
    let pri = Srv::start(pg, &pri_dir, free_port(), &args);
    base_backup(pg, &pri, &sby_dir);
    (t, pri_dir, sby_dir, pri)
}

/// The failover of the module header.
#[test]
fn a_promoted_standby_keeps_every_acknowledged_commit() {
    let Some(pg) = pg() else { return };
    let (t, pri_dir, sby_dir, mut pri) = sync_primary_and_copy(&pg, "standby");
    let sby = Srv::pg_ctl_start(&pg, &sby_dir, free_port(), "-c cluster_name=standby1");

    // Following: synchronous commits are acknowledged through the standby.
    assert!(
        wait_until(Duration::from_secs(30), || parse_acks(&pri.stdout()).len()
            >= 300),
        "fewer than 300 commits acknowledged with the standby connected\n{}\n{}",
        pri.log(),
        sby.log()
    );
    let rep = pg.value(
        &pri.dir,
        pri.port,
        "SELECT application_name, state, sync_state FROM pg_stat_replication",
    );
    assert_eq!(rep, "standby1|streaming|sync");
    let (d, p) = (&sby.dir, sby.port);
    assert_eq!(pg.value(d, p, "SELECT pg_is_in_recovery()"), "t");
    let rcv = pg.value(
        d,
        p,
        "SELECT status, receive_start_tli, sender_port, pg_last_wal_receive_lsn() IS NOT NULL, pg_last_wal_replay_lsn() IS NOT NULL FROM pg_stat_wal_receiver",
    );
    assert_eq!(rcv, format!("streaming|1|{}|t|t", pri.port));
    let refused = pg.sql(d, p, "SELECT pg_logical_emit_message(true, 'x', 'y')");
    assert!(
        !refused.status.success()
            && refused
                .stderr
                .contains("cannot execute pg_logical_emit_message() in a read-only transaction"),
        "{}",
        refused.describe()
    );
    // remote_apply: the commit returns once the standby replayed it, and
    // at once (the apply position is reported when replayed, not on a
    // timer).
    let apply_started = Instant::now();
    let mut c = pg.command(
        &pg.psql,
        &["-X", "-At", "-h", pri.dir.to_str().unwrap(), "-p", &pri.port.to_string(), "-c",
          "SELECT pg_logical_emit_message(true, 'apply', 'x') FROM pg_stat_replication WHERE application_name = 'standby1'"],
    );
    c.env("PGOPTIONS", "-c synchronous_commit=remote_apply");
    let o = run_cmd(&mut c, TIMEOUT);
    assert!(o.status.success(), "{}", o.describe());
    let applied = o.stdout.trim().to_string();
    assert!(
        apply_started.elapsed() < Duration::from_secs(5),
        "a remote_apply commit took {:?}",
        apply_started.elapsed()
    );
    let replayed = pg.value(
        d,
        p,
        &format!("SELECT pg_last_wal_replay_lsn() >= '{applied}'"),
    );
    assert_eq!(
        replayed, "t",
        "remote_apply returned before the standby replayed {applied}"
    );

    // A library worker attached to the standby reads, and may not write.
    let first_ack = *parse_acks(&pri.stdout()).first().expect("acks");
    let read = worker(&pg, d, Some(first_ack));
    let n: usize = read
        .stdout
        .lines()
        .find_map(|l| l.split("read ").nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("worker reader on the standby: {}", read.describe()));
    assert!(n >= 100, "the worker read only {n} records");
    let write = worker(&pg, d, None);
    assert!(
        !write.status.success() && write.stdout.contains("attached to a standby"),
        "a worker wrote on a standby: {}",
        write.describe()
    );

    // The primary dies with its whole process group; the standby is promoted.
    pri.kill9();
    let acks = parse_acks(&pri.stdout());
    let promote_started = Instant::now();
    let o = pg.pg_ctl(d, &["promote"]);
    let pg_ctl_done = promote_started.elapsed();
    assert!(
        o.status.success() && o.stdout.contains("server promoted"),
        "{}\n{}",
        o.describe(),
        sby.log()
    );
    let writable = wait_until(Duration::from_secs(30), || {
        pg.sql(
            d,
            p,
            "SELECT pg_logical_emit_message(true, 'after', 'promotion')",
        )
        .status
        .success()
    });
    let first_write = promote_started.elapsed();
    assert!(
        writable,
        "no write accepted after the promotion\n{}",
        sby.log()
    );
    println!(
        "standby promotion (2-core VM figure in docs/operations.md): pg_ctl promote returned after {} ms, first write accepted {} ms after it was run",
        pg_ctl_done.as_millis(),
        first_write.as_millis()
    );
    assert_eq!(pg.value(d, p, "SELECT pg_is_in_recovery()"), "f");
    assert!(
        pg.value(d, p, "SELECT pg_walfile_name(pg_current_wal_lsn())")
            .starts_with("00000002"),
        "not on timeline 2"
    );
    assert!(sby_dir.join("pg_wal/00000002.history").is_file());
    assert!(!sby_dir.join("standby.signal").exists());
    let worker = worker(&pg, d, None);
    assert!(
        worker.status.success() && worker.stdout.contains("committed "),
        "a worker could not write after the promotion: {}",
        worker.describe()
    );

    // The old primary, started as a standby of the new one, never writes
    // history of its own: if its WAL goes past the switch point (WAL the
    // standby had not received when it was killed) it refuses to follow,
    // else it follows onto timeline 2; read-only either way.
    std::fs::write(pri_dir.join("standby.signal"), b"").unwrap();
    pg.give(&pri_dir);
    let conninfo = format!(
        "primary_conninfo=host={} port={}",
        sby.dir.display(),
        sby.port
    );
    let mut old = Srv::start(&pg, &pri_dir, free_port(), &["--set", &conninfo]);
    let (diverged, follows) = ("history has diverged", "following it onto timeline 2");
    let decided = wait_until(Duration::from_secs(20), || {
        let log = old.log();
        log.contains(diverged) || log.contains(follows)
    });
    let log = old.log();
    assert!(
        decided,
        "the old primary neither refused nor followed\n{log}"
    );
    if log.contains(diverged) {
        assert!(!log.contains("on timeline 2"), "{log}");
        println!("the old primary's WAL went past the switch point: it refuses to follow");
    } else {
        let lsn = pg.value(
            d,
            p,
            "SELECT pg_logical_emit_message(true, 'seen', 'by the old primary')",
        );
        let replayed = wait_until(Duration::from_secs(20), || {
            pg.value(
                &old.dir,
                old.port,
                &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'"),
            ) == "t"
        });
        assert!(replayed, "the old primary did not follow\n{}", old.log());
        println!(
            "the old primary's WAL ended at or before the switch point: it follows timeline 2"
        );
    }
    assert_eq!(
        pg.value(&old.dir, old.port, "SELECT pg_is_in_recovery()"),
        "t"
    );
    let refused = pg.sql(&old.dir, old.port, "SELECT txid_current()");
    assert!(!refused.status.success(), "{}", refused.describe());
    old.kill9();

    // Every acknowledged commit is in the promoted server's WAL (timeline
    // 1 up to the switch point).
    let o = pg.pg_ctl(d, &["stop", "-m", "fast"]);
    assert!(o.status.success(), "{}", o.describe());
    assert_acks_kept(&acks, &sby_dir, &t.join("scratch"));
    drop(sby);
}

/// Every acknowledged commit of `acks` is in the timeline-1 WAL of the
/// (stopped, promoted) standby in `dir`.
fn assert_acks_kept(acks: &[u64], dir: &Path, scratch: &Path) {
    let first = *acks.iter().min().expect("acks");
    let commits = timeline1_commits(&dir.join("pg_wal"), scratch, first);
    assert_acks_in(acks, &commits, "the promoted standby's WAL");
}

/// A failed fdatasync in the walreceiver (the I/O seam's `wal_fsync` fail
/// point, once) is a PANIC: the standby restarts by itself, resumes
/// streaming, the synchronous primary goes on acknowledging, and after a
/// promotion every acknowledged commit is there.
#[test]
fn a_standby_survives_a_failed_fdatasync_of_its_walreceiver() {
    let Some(pg) = pg() else { return };
    let (t, _, sby_dir, mut pri) = sync_primary_and_copy(&pg, "standby-eio");
    let fired = t.join("fired");
    let spec = format!("wal_fsync=eio:after=20:once={}", fired.display());
    let env = [("WALSHM_FAILPOINTS", spec.as_str())];
    let sby_args = [
        "--set",
        "cluster_name=standby1",
        "--set",
        "wal_retrieve_retry_interval=100ms",
    ];
    let sby = Srv::start_with_env(&pg, &sby_dir, free_port(), &sby_args, &env);
    sby.wait_log(
        "all server processes terminated; reinitializing",
        Duration::from_secs(30),
    );
    let log = sby.log();
    let panic = log.lines().find(|l| l.contains("PANIC")).unwrap_or("");
    assert!(
        fired.exists() && panic.starts_with("walreceiver") && panic.contains("could not fdatasync"),
        "{log}"
    );
    let before = parse_acks(&pri.stdout()).len();
    assert!(
        wait_until(Duration::from_secs(30), || parse_acks(&pri.stdout()).len()
            >= before + 200),
        "no commits acknowledged after the standby's restart\n{}",
        sby.log()
    );
    pri.kill9();
    let acks = parse_acks(&pri.stdout());
    assert_eq!(
        pg.value(&sby.dir, sby.port, "SELECT pg_promote()"),
        "t",
        "{}",
        sby.log()
    );
    let mut sby = sby;
    kill(sby.child.as_ref().unwrap().id() as i32, libc::SIGINT);
    let stopped = wait_until(Duration::from_secs(20), || {
        sby.child.as_mut().unwrap().try_wait().unwrap().is_some()
    });
    assert!(stopped, "{}", sby.log());
    assert_acks_kept(&acks, &sby_dir, &t.join("scratch"));
}

/// A standby stopped and started again resumes; it streams from a
/// physical slot; `pg_promote()` promotes it; a second standby follows it
/// onto the new timeline and is promoted in turn.
#[test]
fn a_standby_resumes_after_a_restart_and_pg_promote_promotes_it() {
    let Some(pg) = pg() else { return };
    let t = TempDir::new("standby-slot");
    pg.give(t.path());
    let (pri_dir, sby_dir, b_dir) = (t.join("pri"), t.join("sby"), t.join("b"));
    init_dir(&pg, &pri_dir);
    let mut pri = Srv::start(&pg, &pri_dir, free_port(), &[]);
    let (pd, pp) = (&pri.dir.clone(), pri.port);
    pg.value(
        pd,
        pp,
        "SELECT pg_create_physical_replication_slot('standby_slot', true)",
    );
    base_backup(&pg, &pri, &sby_dir);
    let first_segment = wal_segments(&sby_dir)[0].clone();
    // A second standby, which follows the first one after its promotion.
    base_backup(&pg, &pri, &b_dir);
    let mut b = Srv::start(&pg, &b_dir, free_port(), &[]);
    let sby_port = free_port();
    // archive_mode = on: segments received whole are marked archived;
    // restartpoints keep two segments before their redo point.
    let slot = [
        "--set",
        "primary_slot_name=standby_slot",
        "--set",
        "wal_keep_size=2MB",
        "--set",
        "archive_mode=on",
        "--set",
        "archive_command=true",
    ];
    let emit = "SELECT pg_logical_emit_message(true, 'p', repeat('x', 3000))";
    for round in 0..2 {
        let sby = Srv::start(&pg, &sby_dir, sby_port, &slot);
        for i in 0..50 {
            pg.value(pd, pp, emit);
            if i % 10 == 9 {
                pg.value(pd, pp, "SELECT pg_switch_wal()");
            }
        }
        pg.value(pd, pp, "CHECKPOINT");
        let redo = pg.value(pd, pp, "SELECT redo_lsn FROM pg_control_checkpoint()");
        let want = pg.value(pd, pp, "SELECT pg_current_wal_flush_lsn()");
        let replayed = wait_until(Duration::from_secs(20), || {
            pg.value(
                &sby.dir,
                sby.port,
                &format!("SELECT pg_last_wal_replay_lsn() >= '{want}'"),
            ) == "t"
        });
        assert!(
            replayed,
            "round {round}: the standby did not replay up to {want}\n{}",
            sby.log()
        );
        // A restartpoint at the replayed checkpoint: the control file names
        // it, and the segments before its redo point are gone.
        let restartpoint = pg.value(
            &sby.dir,
            sby.port,
            &format!("SELECT redo_lsn >= '{redo}' FROM pg_control_checkpoint()"),
        );
        assert_eq!(
            restartpoint, "t",
            "round {round}: no restartpoint at {redo}"
        );
        let segments = wal_segments(&sby_dir);
        assert!(
            !segments.contains(&first_segment),
            "round {round}: {first_segment} kept after the restartpoint: {segments:?}"
        );
        // archive_mode = on: every segment received whole is marked done.
        let done: Vec<String> = std::fs::read_dir(sby_dir.join("pg_wal/archive_status"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let full = &segments[..segments.len() - 1];
        assert!(
            !full.is_empty() && full.iter().all(|s| done.contains(&format!("{s}.done"))),
            "round {round}: segments {segments:?}, archive status {done:?}"
        );
        let active = pg.value(pd, pp, "SELECT active, restart_lsn IS NOT NULL FROM pg_replication_slots WHERE slot_name = 'standby_slot'");
        assert_eq!(active, "t|t", "round {round}");
        let slot_seen = pg.value(
            &sby.dir,
            sby.port,
            "SELECT slot_name FROM pg_stat_wal_receiver",
        );
        assert_eq!(slot_seen, "standby_slot");
        if round == 0 {
            // A fast shutdown: "shut down in recovery", standby.signal kept.
            let mut sby = sby;
            kill(sby.child.as_ref().unwrap().id() as i32, libc::SIGINT);
            let exited = wait_until(Duration::from_secs(20), || {
                sby.child.as_mut().unwrap().try_wait().unwrap().is_some()
            });
            assert!(exited, "the standby did not stop\n{}", sby.log());
            assert!(sby_dir.join("standby.signal").is_file());
            continue;
        }
        // Both standbys have all the primary wrote; it dies.
        let b_replayed = wait_until(Duration::from_secs(20), || {
            pg.value(
                &b.dir,
                b.port,
                &format!("SELECT pg_last_wal_replay_lsn() >= '{want}'"),
            ) == "t"
        });
        assert!(
            b_replayed,
            "the second standby did not replay up to {want}\n{}",
            b.log()
        );
        pri.kill9();
        assert_eq!(
            pg.value(&sby.dir, sby.port, "SELECT pg_promote()"),
            "t",
            "{}",
            sby.log()
        );
        assert_eq!(
            pg.value(&sby.dir, sby.port, "SELECT pg_is_in_recovery()"),
            "f"
        );
        let lsn = pg.value(
            &sby.dir,
            sby.port,
            "SELECT pg_logical_emit_message(true, 'after', 'promote')",
        );
        assert!(lsn.contains('/'), "{lsn}");
        let again = pg.sql(&sby.dir, sby.port, "SELECT pg_promote()");
        assert!(
            again.stderr.contains("recovery is not in progress"),
            "{}",
            again.describe()
        );
        // The second standby, pointed at the promoted one, follows it onto
        // timeline 2, and is promoted in turn onto timeline 3.
        b.kill9();
        let conninfo = format!(
            "primary_conninfo=host={} port={}",
            sby.dir.display(),
            sby.port
        );
        b = Srv::start(&pg, &b_dir, b.port, &["--set", &conninfo]);
        let on_tl2 = pg.value(
            &sby.dir,
            sby.port,
            "SELECT pg_logical_emit_message(true, 'tl', '2')",
        );
        let followed = wait_until(Duration::from_secs(20), || {
            let o = pg.sql(
                &b.dir,
                b.port,
                &format!("SELECT pg_last_wal_replay_lsn() >= '{on_tl2}'"),
            );
            assert!(o.status.success(), "{}\n{}", o.describe(), b.log());
            o.stdout.trim() == "t"
        });
        assert!(
            followed,
            "the second standby did not follow onto timeline 2\n{}",
            b.log()
        );
        assert_eq!(
            pg.value(
                &b.dir,
                b.port,
                "SELECT received_tli FROM pg_stat_wal_receiver"
            ),
            "2"
        );
        assert_eq!(
            pg.value(&b.dir, b.port, "SELECT pg_promote()"),
            "t",
            "{}",
            b.log()
        );
        let name = pg.value(
            &b.dir,
            b.port,
            "SELECT pg_walfile_name(pg_current_wal_lsn())",
        );
        assert!(name.starts_with("00000003"), "{name}");
        assert!(b_dir.join("pg_wal/00000003.history").is_file());
    }
}
