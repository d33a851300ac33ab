//! Point-in-time recovery, as PostgreSQL 15 does it: a primary archiving
//! with `archive_command` acknowledges commits (`emit-tx --ack`) while
//! `pg_create_restore_point` marks the middle; copies of its data
//! directory made before it ran (its pg_wal emptied, as `pg_basebackup
//! -X none` leaves it) are restored from the archive with
//! `recovery.signal`, `restore_command` and one recovery target:
//!
//! - `recovery_target_name`: every commit before the restore point is in
//!   the restored WAL, none after it; the new timeline's history file
//!   names the restore point's end as its switch point; `pg_waldump`
//!   shows the RESTORE_POINT record;
//! - `recovery_target_lsn`, `_xid`, `_time`, each with
//!   `recovery_target_inclusive` on and off: the restored WAL keeps
//!   exactly the commits before the stop PostgreSQL's rules give (worked
//!   out here from the archive's records), the switch point is the end of
//!   the last record kept;
//! - `recovery_target_action`: `pause` (the default; walshm has no hot
//!   standby) and `shutdown` leave the server stopped (exit 0) with
//!   `recovery.signal` and the control file as they were, and a later
//!   start with `promote` ends recovery on timeline 2;
//! - bad settings (two targets, an unreadable time), a target never
//!   reached and one before the backup's checkpoint: FATAL, exit 1,
//!   nothing promoted; a restore point name too long is refused;
//! - `pg_archivecleanup` (PostgreSQL 15's) removes the archive's segments
//!   before a later `pg_basebackup`, and that backup still restores from
//!   the cleaned archive to a restore point after it.
//!
//! Judged from files, exit codes, `ack` lines and dumps, never from log
//! wording. PostgreSQL's tools are skipped loudly when missing, unless
//! WALSHM_REQUIRE_PG=1.

use crate::common::wire::{cstr, data_rows, error_code, exchange, handshake, msg, socket_path};
use crate::common::wire::{pg_clients, start_on_free_port};
use crate::common::*;
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use walformat::{format_lsn, parse_lsn, DecodedRecord, Geometry, WalReader};

const SEG: u64 = 1 << 20;

/// A restored copy archives nothing (its timeline 2 would go into the
/// archive the next restores read) and keeps all its WAL (to be read).
const RESTORED: [&str; 4] = [
    "--set",
    "archive_mode=off",
    "--set",
    "wal_keep_size=1000000",
];

fn geo() -> Geometry {
    Geometry::new(SEG).unwrap()
}

/// One statement over the Unix socket: its rows, or its SQLSTATE.
fn query(socket: &Path, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let mut s = handshake(socket)?;
    let msgs = exchange(&mut s, &msg(b'Q', &cstr(sql)));
    match error_code(&msgs) {
        Some(code) => Err(code),
        None => Ok(data_rows(&msgs)),
    }
}

/// The single LSN a statement returns.
fn query_lsn(socket: &Path, sql: &str) -> u64 {
    let rows = query(socket, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    parse_lsn(rows[0][0].as_deref().unwrap()).unwrap()
}

/// A primary's history: its archive, a copy made before it ran, its acks
/// and the records it archived.
struct History {
    tmp: TempDir,
    arch: PathBuf,
    base: PathBuf,
    acks: Vec<u64>,
    records: Vec<DecodedRecord>,
}

/// `cp -a from to`.
fn copy_dir(from: &Path, to: &Path) {
    let o = run_cmd(
        Command::new("cp").arg("-a").arg(from).arg(to),
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "cp -a\n{}", o.describe());
}

/// A temporary directory with `arch/` and the data directory `p/` (1 MB
/// segments) archiving into it (copy, then rename: never a half file).
fn archiving_primary(tag: &str) -> (TempDir, PathBuf, DataDir) {
    let tmp = TempDir::new(tag);
    let arch = tmp.join("arch");
    fs::create_dir_all(&arch).unwrap();
    let command = format!(
        "archive_command=cp %p {a}/%f.tmp && mv {a}/%f.tmp {a}/%f",
        a = arch.display()
    );
    let sets = ["--set", "archive_mode=on", "--set", &command];
    let mut args = vec!["--wal-segment-size", "1"];
    args.extend(sets);
    let p = init(&tmp.join("p"), &args);
    (tmp, arch, p)
}

/// Waits until `arch` holds every segment from the first up to the one
/// before `lsn` (a pg_switch_wal's end): the archiver need not archive
/// them in order.
fn wait_archived_before(arch: &Path, lsn: u64, srv: &Server) {
    for seg in 1..=geo().seg_no(lsn - 1) {
        let f = arch.join(geo().file_name(1, seg));
        assert!(
            wait_until(TIMEOUT, || f.is_file()),
            "{} not archived\n{}",
            f.display(),
            srv.stderr()
        );
    }
}

/// Waits until the server acknowledged `n` commits.
fn wait_acks(srv: &Server, n: usize) {
    assert!(
        wait_until(TIMEOUT, || parse_acks(&srv.stdout()).len() >= n),
        "fewer than {n} commits acknowledged\n{}",
        srv.stderr()
    );
}

/// Every record of timeline 1 in `arch` from segment 1 on.
fn archived_records(arch: &Path) -> Vec<DecodedRecord> {
    let mut reader = WalReader::open(arch, geo(), 1, None, SEG + 0x28).unwrap();
    let mut records = Vec::new();
    while let Ok(Some(r)) = reader.next_record() {
        records.push(r);
    }
    records
}

/// The primary (see the module header): 2 backends acknowledge commits;
/// after 300 the restore point `middle` is created, after 300 more the
/// segment is switched and archived, and the primary stops.
fn primary(tag: &str) -> History {
    let (tmp, arch, p) = archiving_primary(tag);
    let base = tmp.join("base");
    copy_dir(&p.path, &base);
    for seg in fs::read_dir(base.join("pg_wal")).unwrap().flatten() {
        if seg.file_type().unwrap().is_file() {
            fs::remove_file(seg.path()).unwrap();
        }
    }
    let args = ["--workers", "2", "--workload", "emit-tx:256", "--ack"];
    let (srv, port) = start_on_free_port(&p, tmp.path(), &[], &args, &[]);
    let socket = socket_path(&p.path, port);
    wait_acks(&srv, 300);
    let rp_end = query_lsn(&socket, "SELECT pg_create_restore_point('middle')");
    wait_acks(&srv, parse_acks(&srv.stdout()).len() + 300);
    let switched = query_lsn(&socket, "SELECT pg_switch_wal()");
    wait_archived_before(&arch, switched, &srv);
    let acks = parse_acks(&srv.stop_ok().stdout);
    let records = archived_records(&arch);
    let rp = records
        .iter()
        .find(|r| r.as_restore_point().is_some_and(|(_, n)| n == b"middle"))
        .expect("no RESTORE_POINT record in the archive");
    assert_eq!(rp.next, rp_end, "pg_create_restore_point's LSN");
    assert!(
        acks.iter().any(|&a| a < rp.lsn) && acks.iter().any(|&a| a > rp.lsn),
        "no commits on both sides of the restore point"
    );
    History {
        tmp,
        arch,
        base,
        acks,
        records,
    }
}

impl History {
    /// A copy of the base with `recovery.signal`, named `name`.
    fn copy(&self, name: &str) -> PathBuf {
        let dir = self.tmp.join(name);
        copy_dir(&self.base, &dir);
        fs::write(dir.join("recovery.signal"), b"").unwrap();
        dir
    }

    /// `postmaster start` of `dir` restoring from the archive (not
    /// archiving itself), with `sets` added.
    fn start(&self, dir: &Path, sets: &[&str]) -> Server {
        let restore = format!("restore_command=cp {}/%f %p", self.arch.display());
        let mut args = vec!["--set", &restore];
        args.extend(RESTORED);
        for s in sets {
            args.extend(["--set", s]);
        }
        Server::start(dir, self.tmp.path(), &args)
    }

    /// Restores a copy named `name` to the target of `sets` with
    /// `recovery_target_action = promote`, stops it; returns the copy.
    fn promoted(&self, name: &str, sets: &[&str]) -> PathBuf {
        let dir = self.copy(name);
        let mut all = sets.to_vec();
        all.push("recovery_target_action=promote");
        let mut s = self.start(&dir, &all);
        s.wait_ready(TIMEOUT);
        s.stop_ok();
        assert_cleaned_up(&dir);
        dir
    }

    /// The record at `lsn` in the archive, and its index.
    fn record_at(&self, lsn: u64) -> (usize, &DecodedRecord) {
        let i = self.records.iter().position(|r| r.lsn == lsn).unwrap();
        (i, &self.records[i])
    }

    /// An acknowledged commit a third of the way through the archived
    /// acks (the workload goes on after the switch until the server
    /// stops: those acks are in a segment never archived).
    fn some_ack(&self) -> u64 {
        let archived: std::collections::HashSet<u64> = self.records.iter().map(|r| r.lsn).collect();
        let mut acks: Vec<u64> = self
            .acks
            .iter()
            .copied()
            .filter(|a| archived.contains(a))
            .collect();
        acks.sort_unstable();
        acks[acks.len() / 3]
    }

    /// Checks restored copy `dir` against a stop at record `i` of the
    /// archive, kept or not: timeline 2 branched at the end of the last
    /// record kept, every ack before it in the copy's WAL, none after.
    fn check_stop(&self, what: &str, dir: &Path, i: usize, kept: bool) {
        let last_kept = if kept { i } else { i - 1 };
        let switch = self.records[last_kept].next;
        let (parent, at, reason) = history_line(dir);
        assert_eq!((parent, at), (1, switch), "{what}: switch point ({reason})");
        let commits = commits_in(dir, SEG + 0x28);
        let stop = self.records[i].lsn;
        for &a in &self.acks {
            let should = a < stop || (kept && a == stop);
            assert_eq!(
                commits.contains(&a),
                should,
                "{what}: commit {} (stop at {}, kept {kept}) {}",
                format_lsn(a),
                format_lsn(stop),
                if should { "missing" } else { "replayed" }
            );
        }
    }
}

/// `xact_time` of a COMMIT or ABORT record.
fn xact_time(r: &DecodedRecord) -> Option<i64> {
    r.commit_time().or_else(|| r.abort_time())
}

#[test]
fn restores_stop_at_each_kind_of_target_by_postgresql_rules() {
    let h = primary("pitr");
    // The restore point: everything up to it kept, nothing after.
    let rp = h
        .records
        .iter()
        .position(|r| r.as_restore_point().is_some())
        .unwrap();
    let dir = h.promoted("name", &["recovery_target_name=middle"]);
    h.check_stop("recovery_target_name", &dir, rp, true);
    assert_eq!(control_timeline(&dir), 2);
    assert_eq!(history_line(&dir).2, "at restore point \"middle\"");
    if let Some(pg) = pg_waldump_path() {
        let o = run_cmd(
            Command::new(pg)
                .args(["--timeline", "2", "-p"])
                .arg(dir.join("pg_wal"))
                .args(["-s", &format_lsn(h.records[rp].lsn)]),
            Duration::from_secs(60),
        );
        pg_normal_end(&o).unwrap_or_else(|e| panic!("pg_waldump: {e}\n{}", o.describe()));
        let lines = record_lines(&o.stdout);
        assert!(
            lines[0].contains("desc: RESTORE_POINT middle")
                && lines[1].contains("CHECKPOINT_SHUTDOWN")
                && lines[1].contains("tli 2; prev tli 1"),
            "{}",
            o.stdout
        );
    }

    // LSN, XID and time of one acknowledged commit, inclusive or not.
    let (i, a) = h.record_at(h.some_ack());
    let time = xact_time(a).unwrap();
    let time_text = walformat::format_pg_timestamp(time).replace(" UTC", "+00");
    for inclusive in ["on", "off"] {
        let incl = format!("recovery_target_inclusive={inclusive}");
        let on = inclusive == "on";
        let lsn = format!("recovery_target_lsn={}", format_lsn(a.lsn));
        let dir = h.promoted(&format!("lsn-{inclusive}"), &[&lsn, &incl]);
        h.check_stop(&lsn, &dir, i, on);
        let xid = format!("recovery_target_xid={}", a.xid);
        let dir = h.promoted(&format!("xid-{inclusive}"), &[&xid, &incl]);
        h.check_stop(&xid, &dir, i, on);
        // Time: before the first COMMIT or ABORT later than the target
        // (inclusive) or not earlier (exclusive); commit times need not
        // follow LSN order across backends.
        let stop = h
            .records
            .iter()
            .position(|r| xact_time(r).is_some_and(|t| if on { t > time } else { t >= time }))
            .unwrap();
        let set = format!("recovery_target_time={time_text}");
        let dir = h.promoted(&format!("time-{inclusive}"), &[&set, &incl]);
        h.check_stop(&set, &dir, stop, false);
    }
}

#[test]
fn shutdown_and_pause_stop_the_server_and_a_later_promote_branches_there() {
    let h = primary("pitr-action");
    let dir = h.copy("copy");
    let control = fs::read(dir.join("global/pg_control")).unwrap();
    for action in [None, Some("recovery_target_action=shutdown")] {
        let mut sets = vec!["recovery_target_name=middle"];
        sets.extend(action);
        let o = h.start(&dir, &sets).wait_exit(TIMEOUT);
        assert_no_panic("shutdown at the target", &o);
        assert_eq!(o.code(), Some(0), "{action:?}\n{}", o.describe());
        assert!(dir.join("recovery.signal").exists(), "{action:?}");
        assert!(!dir.join("pg_wal/00000002.history").exists(), "{action:?}");
        assert_eq!(fs::read(dir.join("global/pg_control")).unwrap(), control);
        assert_cleaned_up(&dir);
    }
    let mut s = h.start(
        &dir,
        &[
            "recovery_target_name=middle",
            "recovery_target_action=promote",
        ],
    );
    s.wait_ready(TIMEOUT);
    s.stop_ok();
    let rp = h
        .records
        .iter()
        .position(|r| r.as_restore_point().is_some())
        .unwrap();
    h.check_stop("promote after shutdown", &dir, rp, true);
    assert!(!dir.join("recovery.signal").exists());
    assert_eq!(control_timeline(&dir), 2);
}

#[test]
fn bad_targets_and_unreached_ones_are_fatal_and_promote_nothing() {
    let tmp = TempDir::new("pitr-bad");
    let d = init(&tmp.join("d"), &["--wal-segment-size", "1"]);
    let dir = d.path.to_str().unwrap();
    for (sets, says) in [
        (
            vec!["recovery_target_name=a", "recovery_target_xid=7"],
            "multiple recovery targets specified",
        ),
        (
            vec!["recovery_target_time=next tuesday"],
            "recovery_target_time",
        ),
        (vec!["recovery_target_lsn=12"], "recovery_target_lsn"),
        (
            vec!["recovery_target_action=wait"],
            "recovery_target_action",
        ),
    ] {
        let mut args = vec!["start", "-D", dir];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let o = postmaster(&args);
        assert_no_panic("bad recovery target", &o);
        assert_eq!(o.code(), Some(1), "{sets:?}\n{}", o.describe());
        assert!(o.stderr.contains(says), "{sets:?}\n{}", o.stderr);
        assert!(live_postmaster(&d.path).is_none());
    }
    // postgresql.auto.conf is read too (after walshm.conf, before --set).
    let auto = d.path.join("postgresql.auto.conf");
    fs::write(&auto, "recovery_target_name = 'from-auto-conf'\n").unwrap();
    let o = postmaster(&["start", "-D", dir, "--set", "recovery_target_xid=7"]);
    assert_eq!(o.code(), Some(1), "{}", o.describe());
    assert!(
        o.stderr.contains("multiple recovery targets"),
        "{}",
        o.stderr
    );
    fs::remove_file(&auto).unwrap();
    // In archive recovery (local WAL only): a target never reached, and
    // one before the checkpoint recovery starts from.
    fs::write(d.path.join("recovery.signal"), b"").unwrap();
    let control = fs::read(d.path.join("global/pg_control")).unwrap();
    for (set, says) in [
        (
            "recovery_target_name=nowhere",
            "before configured recovery target was reached",
        ),
        // Stops before init's checkpoint, the first record.
        (
            "recovery_target_lsn=0/1",
            "before consistent recovery point",
        ),
    ] {
        let args = [
            "--set",
            set,
            "--set",
            "recovery_target_inclusive=off",
            "--set",
            "recovery_target_action=promote",
        ];
        let o = Server::start(&d.path, tmp.path(), &args).wait_exit(TIMEOUT);
        assert_no_panic(set, &o);
        assert_eq!(o.code(), Some(1), "{set}\n{}", o.describe());
        assert!(o.stderr.contains(says), "{set}\n{}", o.stderr);
        assert!(d.path.join("recovery.signal").exists());
        assert!(!d.path.join("pg_wal/00000002.history").exists());
        assert_eq!(fs::read(d.path.join("global/pg_control")).unwrap(), control);
        assert_cleaned_up(&d.path);
    }
    // A restore point name must fit PostgreSQL's 63 bytes.
    fs::remove_file(d.path.join("recovery.signal")).unwrap();
    let (srv, port) = start_on_free_port(&d, tmp.path(), &[], &[], &[]);
    let socket = socket_path(&d.path, port);
    let long = format!("SELECT pg_create_restore_point('{}')", "n".repeat(64));
    assert_eq!(query(&socket, &long), Err("22023".to_string()));
    let fits = format!("SELECT pg_create_restore_point('{}')", "n".repeat(63));
    query_lsn(&socket, &fits);
    srv.stop_ok();
}

#[test]
fn pg_archivecleanup_keeps_what_a_later_base_backup_restores_from() {
    let Some([cleanup, basebackup]) = pg_clients(["pg_archivecleanup", "pg_basebackup"]) else {
        return;
    };
    let (tmp, arch, p) = archiving_primary("pitr-cleanup");
    let args = ["--workers", "2", "--workload", "emit-tx:2048", "--ack"];
    let (srv, port) = start_on_free_port(&p, tmp.path(), &[], &args, &[]);
    let socket = socket_path(&p.path, port);
    // Several segments before the backup.
    assert!(
        wait_until(TIMEOUT, || arch.join(geo().file_name(1, 4)).is_file()),
        "segments not archived\n{}",
        srv.stderr()
    );
    let copy = tmp.join("copy");
    let o = run_cmd(
        Command::new(&basebackup)
            .args(["-h", p.path.to_str().unwrap(), "-p", &port.to_string()])
            .arg("-D")
            .arg(&copy)
            .args(["-X", "none", "--checkpoint=fast", "-v"])
            .env("PGCONNECT_TIMEOUT", "10"),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "pg_basebackup\n{}", o.describe());
    let label = fs::read_to_string(copy.join("backup_label")).unwrap();
    let start = label
        .split("START WAL LOCATION: ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .map(|s| parse_lsn(s).unwrap())
        .unwrap_or_else(|| panic!("no start point in backup_label\n{label}"));
    wait_acks(&srv, parse_acks(&srv.stdout()).len() + 200);
    let rp_end = query_lsn(&socket, "SELECT pg_create_restore_point('after-backup')");
    wait_acks(&srv, parse_acks(&srv.stdout()).len() + 200);
    let switched = query_lsn(&socket, "SELECT pg_switch_wal()");
    wait_archived_before(&arch, switched, &srv);
    let acks = parse_acks(&srv.stop_ok().stdout);

    // PostgreSQL's pg_archivecleanup ARCHIVE OLDESTKEPTWALFILE.
    let oldest = geo().seg_no(start);
    let o = run_cmd(
        Command::new(&cleanup)
            .arg(&arch)
            .arg(geo().file_name(1, oldest)),
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "pg_archivecleanup\n{}", o.describe());
    let left: Vec<u64> = fs::read_dir(&arch)
        .unwrap()
        .flatten()
        .filter_map(|e| geo().parse_file_name(&e.file_name().to_string_lossy()))
        .map(|(_, n)| n)
        .collect();
    assert!(oldest > 1 && left.iter().all(|&n| n >= oldest), "{left:?}");
    assert!(left.contains(&oldest), "the oldest kept segment went too");

    // The backup restores from what is left, to the restore point.
    fs::write(copy.join("recovery.signal"), b"").unwrap();
    let restore = format!("restore_command=cp {}/%f %p", arch.display());
    let mut args = vec![
        "--set",
        &restore,
        "--set",
        "recovery_target_name=after-backup",
        "--set",
        "recovery_target_action=promote",
    ];
    args.extend(RESTORED);
    let s = Server::start_ready(&copy, tmp.path(), &args);
    s.stop_ok();
    assert_eq!(history_line(&copy).1, rp_end);
    let o = own_waldump_raw(&copy, start);
    assert!(o.status.success(), "waldump\n{}", o.describe());
    let commits: HashSet<u64> = record_lines(&o.stdout)
        .iter()
        .filter_map(|l| parse_dump_line(l))
        .filter(|r| r.kind == "COMMIT")
        .map(|r| r.lsn)
        .collect();
    let expected: Vec<&u64> = acks.iter().filter(|&&a| a >= start && a < rp_end).collect();
    assert!(
        !expected.is_empty(),
        "no commit between the backup and the restore point"
    );
    for a in expected {
        assert!(commits.contains(a), "commit {} missing", format_lsn(*a));
    }
    assert!(
        acks.iter()
            .filter(|&&a| a > rp_end)
            .all(|a| !commits.contains(a)),
        "a commit after the restore point was replayed"
    );
}
