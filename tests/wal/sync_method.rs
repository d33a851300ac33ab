//! `wal_sync_method`: PostgreSQL's four Linux methods keep the
//! crash invariants, and the `open_*` ones really are the O_DSYNC path.
//! - for each method, kill -9 of the whole process group under an
//!   acknowledged `emit-tx:100` load with fsync on, then a new start:
//!   every ack is a COMMIT record of the recovered WAL, which walshm's
//!   reader and PostgreSQL's pg_waldump read to the same clean end
//!   (pg_waldump skipped loudly if missing, unless WALSHM_REQUIRE_PG=1);
//! - a short `walbench torture --power-loss` with `open_datasync` loses no
//!   ack (its journal must record each O_DSYNC write as synced bytes, and
//!   only those: without the ranged SYNC every commit looks unsynced and
//!   the simulated power loss takes acknowledged commits away);
//! - a bad value (`fsync_writethrough`, which Linux lacks, and a typo) is
//!   refused at start with an error naming the setting, and no server
//!   starts; every valid name is accepted;
//! - with `open_datasync` pg_stat_wal's `wal_sync` and the summary's
//!   `wal_fdatasyncs` stay 0 while `wal_write` and the commits go up;
//!   with `fdatasync` they do not (so the check tells the paths apart);
//! - with `open_datasync` a failed write (fail point `wal_write`) is a
//!   PANIC and a crash restart that loses no ack, and the `wal_fsync` point
//!   never fires (it does with `fdatasync`).
//!
//!
//! Verdicts come from exit codes, ack lines, the WAL, pg_stat_wal rows and
//! the JSON summary and report, never from log wording.

use crate::common::wire::{data_rows, exchange, handshake, msg, socket_path, start_on_free_port};
use crate::common::*;
use std::time::Duration;

/// PostgreSQL 15's `wal_sync_method` values on Linux.
const METHODS: [&str; 4] = ["fdatasync", "fsync", "open_datasync", "open_sync"];

/// An acknowledged emit-tx run of `workers` backends, fsync on, `method`.
fn ack_args<'a>(workers: &'a str, method_set: &'a str) -> Vec<&'a str> {
    durable_ack_args(workers, &[method_set])
}

/// kill -9 of the whole group during an acknowledged run with `method`,
/// then a short second run (recovery): no ack lost, pg_waldump agrees.
fn kill_group_keeps_acks(method: &str) {
    kill_group_keeps_acks_with(method, &[]);
}

/// `kill_group_keeps_acks` with the extra settings `extra` (both runs).
fn kill_group_keeps_acks_with(method: &str, extra: &[&str]) {
    let tmp = TempDir::new(&format!("sm-kill-{method}"));
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let set = format!("wal_sync_method={method}");
    let sets: Vec<&str> = [&[set.as_str()][..], extra].concat();
    let s = Server::start_ready(&d.path, tmp.path(), &durable_ack_args("8", &sets));
    s.wait_children(8);
    std::thread::sleep(Duration::from_millis(800));
    let o1 = kill_group(s);
    let acks1 = parse_acks(&o1.stdout);
    assert!(
        !acks1.is_empty(),
        "{method} {extra:?}: no acks before the kill"
    );
    let (checked, pg) =
        recover_and_check_acks(&d, tmp.path(), &durable_ack_args("4", &sets), &acks1);
    eprintln!(
        "{method} {extra:?}: kill -9 of the group: {} acks before, {checked} checked, pg_waldump {}",
        acks1.len(),
        if pg { "agreed" } else { "skipped" }
    );
}

#[test]
fn fdatasync_kill9_group_nothing_acked_lost() {
    kill_group_keeps_acks("fdatasync");
}

#[test]
fn fsync_kill9_group_nothing_acked_lost() {
    kill_group_keeps_acks("fsync");
}

#[test]
fn open_datasync_kill9_group_nothing_acked_lost() {
    kill_group_keeps_acks("open_datasync");
}

#[test]
fn open_sync_kill9_group_nothing_acked_lost() {
    kill_group_keeps_acks("open_sync");
}

#[test]
fn open_datasync_survives_power_loss() {
    power_loss_keeps_acks("sm-power", "16", &["wal_sync_method=open_datasync"]);
}

/// Four power-loss cycles of the torture command with `sets`: it must
/// journal writes, acknowledge commits and lose none of them.
fn power_loss_keeps_acks(dir: &str, seed: &str, sets: &[&str]) {
    let tmp = TempDir::new(dir);
    let mut args = vec!["--power-loss", "--cycles", "4", "--seed", seed];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (o, r, _) = torture(&tmp, &args, &[]);
    assert_eq!(o.code(), Some(0), "{}\n{r}", o.describe());
    assert_eq!(r["mode"], "power-loss", "{r}");
    assert_eq!(r["cycles"], 4, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert!(r["acknowledged"].as_u64().unwrap_or(0) > 0, "{r}");
    assert!(
        r["power_loss"]["journal_records"].as_u64().unwrap_or(0) > 0,
        "the seam journaled nothing: {r}"
    );
}

#[test]
fn bad_wal_sync_method_is_refused() {
    let tmp = TempDir::new("sm-bad");
    let d = init(&tmp.join("data"), &[]);
    for bad in ["fsync_writethrough", "odsync", ""] {
        assert_start_refused(&d, "wal_sync_method", bad);
    }
    // The error lists the valid values, as PostgreSQL's does; each is
    // accepted and shows as itself.
    let mut s = shmem::settings::Settings::default();
    assert_eq!(s.show("wal_sync_method").as_deref(), Some("fdatasync"));
    let e = s
        .set("wal_sync_method", "fsync_writethrough")
        .unwrap_err()
        .to_string();
    for m in METHODS {
        assert!(e.contains(m), "{m} missing from the valid values: {e}");
        s.set("wal_sync_method", m).unwrap();
        assert_eq!(s.show("wal_sync_method").as_deref(), Some(m));
    }
}

/// pg_stat_wal's (wal_write, wal_sync) after 100 autocommit
/// transactional messages over the protocol with `method`.
fn write_and_sync_counts(method: &str) -> (u64, u64) {
    let tmp = TempDir::new(&format!("sm-count-{method}"));
    let d = init(&tmp.join("data"), &[]);
    let set = format!("wal_sync_method={method}");
    let (srv, port) = start_on_free_port(&d, tmp.path(), &["fsync=on", &set], &[], &[]);
    let mut c = handshake(&socket_path(&d.path, port)).expect("connect");
    let q = |c: &mut _, sql: &str| {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        let m = exchange(c, &msg(b'Q', &body));
        assert!(m.iter().all(|(t, _)| *t != b'E'), "{sql}: error {m:?}");
        data_rows(&m)
    };
    let before = q(&mut c, "SELECT wal_write, wal_sync FROM pg_stat_wal");
    for i in 0..100 {
        q(
            &mut c,
            &format!("SELECT pg_logical_emit_message(true, 'k', '{i}')"),
        );
    }
    let after = q(&mut c, "SELECT wal_write, wal_sync FROM pg_stat_wal");
    drop(c);
    srv.stop_ok();
    let n = |rows: &Vec<Vec<Option<String>>>, i: usize| -> u64 {
        rows[0][i].as_deref().unwrap().parse().unwrap()
    };
    (n(&after, 0) - n(&before, 0), n(&after, 1) - n(&before, 1))
}

/// The summary's (synchronous commits, wal_fdatasyncs) of a short
/// acknowledged workload run with `method`.
fn workload_syncs(method: &str) -> (u64, u64) {
    let tmp = TempDir::new(&format!("sm-sum-{method}"));
    let d = init(&tmp.join("data"), &[]);
    let set = format!("wal_sync_method={method}");
    let o = run_for(
        &d.path,
        tmp.path(),
        &ack_args("2", &set),
        Duration::from_millis(400),
    );
    let tx = parse_tx_line(&o.stdout);
    (tx.sync_commits, tx.fdatasyncs)
}

#[test]
fn open_datasync_writes_without_syncing() {
    let (writes, syncs) = write_and_sync_counts("open_datasync");
    assert!(
        writes >= 100,
        "open_datasync: {writes} WAL writes for 100 commits"
    );
    assert_eq!(syncs, 0, "open_datasync issued {syncs} syncs");
    let (commits, fdatasyncs) = workload_syncs("open_datasync");
    assert!(commits > 0, "no synchronous commits");
    assert_eq!(fdatasyncs, 0, "open_datasync: {fdatasyncs} WAL syncs");
    // The same checks see the syncs of a method that makes them.
    let (writes, syncs) = write_and_sync_counts("fdatasync");
    assert!(
        writes >= 100 && syncs >= 100,
        "fdatasync: {writes} writes, {syncs} syncs"
    );
    let (commits, fdatasyncs) = workload_syncs("fdatasync");
    assert!(
        commits > 0 && fdatasyncs > 0,
        "fdatasync: {commits} commits, {fdatasyncs} syncs"
    );
}

/// A short acknowledged run with `method` and `WALSHM_FAILPOINTS=spec`
/// (ONCE replaced by a marker path, created by the process the point
/// fires in): whether it fired, the crash restarts the summary counts, and
/// the acks checked against the recovered WAL.
fn failpoint_run(method: &str, spec: &str) -> (bool, u64, usize) {
    let tmp = TempDir::new(&format!("sm-fp-{method}"));
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let marker = tmp.join("fired-once");
    let spec = spec.replace("ONCE", marker.to_str().unwrap());
    let set = format!("wal_sync_method={method}");
    let env = [("WALSHM_FAILPOINTS", spec.as_str())];
    let mut s = start_with_env(&d.path, tmp.path(), &ack_args("8", &set), &env);
    s.wait_ready(TIMEOUT);
    let fired = wait_until(Duration::from_millis(1500), || marker.exists());
    if fired {
        // The PANIC, the crash restart and recovery, then load again.
        std::thread::sleep(Duration::from_millis(300));
        s.wait_children(8);
    }
    std::thread::sleep(Duration::from_millis(300));
    let o = s.stop_ok();
    let wal = tx_wal_check(&d);
    let checked = check_acks(&parse_acks(&o.stdout), &wal);
    (fired, parse_summary(&o.stdout).crash_restarts, checked)
}

/// With open_datasync the write is the sync: a failed one is a PANIC
/// (crash restart, nothing acked lost), and the `wal_fsync` point never
/// fires because no sync call is made; with fdatasync it does.
#[test]
fn open_datasync_failed_write_panics_and_never_syncs() {
    let (fired, restarts, checked) =
        failpoint_run("open_datasync", "wal_write=eio:after=30:once=ONCE");
    assert!(fired, "the wal_write fail point did not fire");
    assert_eq!(restarts, 1, "a failed O_DSYNC write is not a crash restart");
    assert!(checked > 0, "no acks");
    let (fired, restarts, checked) = failpoint_run("open_datasync", "wal_fsync=eio:once=ONCE");
    assert!(!fired, "open_datasync made a sync call");
    assert_eq!(restarts, 0);
    assert!(checked > 0, "no acks");
    let (fired, restarts, _) = failpoint_run("fdatasync", "wal_fsync=eio:after=30:once=ONCE");
    assert!(
        fired && restarts == 1,
        "fdatasync: fired {fired}, {restarts} restarts"
    );
}

/// O_DIRECT as the kernel reports it in /proc/PID/fdinfo (octal `flags:`).
const O_DIRECT_BIT: u32 = libc::O_DIRECT as u32;

/// The open flags of every descriptor of `pid` on a WAL segment of `pg_wal`.
fn wal_descriptor_flags(pid: i32, pg_wal: &std::path::Path) -> Vec<u32> {
    let mut flags = Vec::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return flags;
    };
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let is_segment =
            target.parent() == Some(pg_wal) && target.file_name().is_some_and(|n| n.len() == 24);
        if !is_segment {
            continue;
        }
        let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
        let Ok(text) = std::fs::read_to_string(info) else {
            continue;
        };
        let octal = text.lines().find_map(|l| l.strip_prefix("flags:"));
        if let Some(f) = octal.and_then(|o| u32::from_str_radix(o.trim(), 8).ok()) {
            flags.push(f);
        }
    }
    flags
}

/// The flags of the server's WAL segment descriptors during an acknowledged
/// durable run with `sets`: at least one descriptor, from every child.
fn server_wal_flags(tag: &str, sets: &[&str]) -> Vec<u32> {
    let tmp = TempDir::new(tag);
    let d = init(&tmp.join("data"), &[]);
    let s = Server::start_ready(&d.path, tmp.path(), &durable_ack_args("2", sets));
    let pg_wal = d.path.join("pg_wal");
    let mut flags = Vec::new();
    let found = wait_until(TIMEOUT, || {
        flags = s
            .children()
            .iter()
            .flat_map(|(pid, _)| wal_descriptor_flags(*pid, &pg_wal))
            .collect();
        !flags.is_empty()
    });
    let o = s.stop_ok();
    assert!(found, "{tag}: no WAL segment descriptor seen\n{}", o.stderr);
    flags
}

/// The WAL descriptors carry O_DSYNC exactly with `open_datasync`, and
/// never O_DIRECT (walsenders, the archiver and readers read WAL back
/// through the page cache).
#[test]
fn wal_descriptors_carry_the_sync_methods_flags() {
    let dsync_bit = libc::O_DSYNC as u32;
    let dsync = server_wal_flags("sm-flags-dsync", &["wal_sync_method=open_datasync"]);
    assert!(
        dsync
            .iter()
            .all(|f| f & dsync_bit != 0 && f & O_DIRECT_BIT == 0),
        "open_datasync: {dsync:?}"
    );
    let plain = server_wal_flags("sm-flags-fdatasync", &[]);
    assert!(
        plain.iter().all(|f| f & (dsync_bit | O_DIRECT_BIT) == 0),
        "fdatasync: {plain:?}"
    );
}
