//! Restore on another machine: `init --from-wal` and
//! `restore_command`, then a new timeline.
//!
//! - a primary archiving with `archive_command` runs `emit-tx --ack` and is
//!   killed -9; its archive plus the unfinished segments copied as
//!   pg_receivewal leaves them (the last one `.partial`) make NEW, which
//!   starts, holds every acknowledged commit, writes a PostgreSQL-format
//!   history file with the switch point, puts new commits in timeline-2
//!   segment files, and pg_waldump (`--timeline 2`) reads the new timeline;
//!   a second copy made from only the first segments fetches the rest with
//!   `restore_command` and holds every commit too;
//! - bad input: an empty directory, a gap in the segment sequence, another
//!   system's segment (to `init`, and delivered by `restore_command` to the
//!   startup process): refused with an exit code, nothing half-created;
//! - a `restore_command` that ignores `%f` (the same segment every time):
//!   the first file asked for (segment 1: the archive comes before pg_wal,
//!   as in PostgreSQL) has another segment's page address, and the server
//!   stops with exit 1 at once, pg_wal's own copy kept, nothing promoted;
//! - a fast shutdown (SIGTERM or SIGINT to the postmaster) while
//!   `restore_command` fetches a long archive slowly: the postmaster exits
//!   0 within seconds, archive recovery unfinished and resumable;
//! - invalid history files (timeline ID out of range, parents not
//!   increasing) in a source: `init` refuses, naming the file; a stray
//!   `FFFFFFFF.history` in pg_wal, or a newest timeline with no ID after
//!   it: the server refuses to start, never picking timeline 0;
//! - a FIFO named like a segment or history file in a source: `init`
//!   refuses at once, naming it (each case bounded by a timeout that
//!   kills a hung `init`).
//!
//! Judged from files, exit codes, `ack` lines and dumps, never from log
//! wording.

use crate::common::*;
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use walformat::{format_lsn, parse_lsn, Geometry};

const SEG: u64 = 1 << 20;

fn geo() -> Geometry {
    Geometry::new(SEG).unwrap()
}

fn init_from(new: &Path, src: &Path, extra: &[&str]) -> Out {
    init_from_within(new, src, extra, TIMEOUT)
}

/// Copies `src` into `dir` under `name` (made if needed).
fn copy_as(src: &Path, dir: &Path, name: &str) {
    fs::create_dir_all(dir).unwrap();
    fs::copy(src, dir.join(name)).unwrap();
}

/// Segment numbers of timeline `tli` files in `dir` (plain names only).
fn segnos(dir: &Path, tli: u32) -> Vec<u64> {
    let mut v: Vec<u64> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| geo().parse_file_name(&e.file_name().to_string_lossy()))
        .filter(|&(t, _)| t == tli)
        .map(|(_, n)| n)
        .collect();
    v.sort_unstable();
    v
}

/// The primary: archives to `arch`, runs acknowledged commits until it has
/// archived 4 segments, is killed -9. Then the segments after the archived
/// ones that hold acknowledged commits are copied to `arch` as
/// pg_receivewal leaves them (the last as `.partial`). Returns the acks.
fn primary_then_kill(tmp: &TempDir, arch: &Path) -> Vec<u64> {
    fs::create_dir_all(arch).unwrap();
    let cmd = format!(
        "archive_command=cp %p {a}/%f.tmp && mv {a}/%f.tmp {a}/%f",
        a = arch.display()
    );
    let p = init(
        &tmp.join("p"),
        &[
            "--wal-segment-size",
            "1",
            "--set",
            "archive_mode=on",
            "--set",
            &cmd,
        ],
    );
    let args = ["--workers", "2", "--workload", "emit-tx:4096", "--ack"];
    let s = Server::start_ready(&p.path, tmp.path(), &args);
    assert!(
        wait_until(Duration::from_secs(20), || segnos(arch, 1).len() >= 4),
        "the primary did not archive 4 segments\n{}",
        s.stderr()
    );
    let out = kill_group(s);
    let acks = parse_acks(&out.stdout);
    assert!(!acks.is_empty(), "no acks");
    let last_ack_seg = geo().seg_no(*acks.iter().max().unwrap());
    let archived_upto = *segnos(arch, 1).last().unwrap();
    for n in archived_upto + 1..=last_ack_seg {
        let name = geo().file_name(1, n);
        let suffix = if n == last_ack_seg { ".partial" } else { "" };
        copy_as(
            &p.path.join("pg_wal").join(&name),
            arch,
            &format!("{name}{suffix}"),
        );
    }
    acks
}

/// Starts `new` with acknowledged commits of its own until it has made
/// some (with `crash`: then kills its backend, and commits again after the
/// crash restart, still on the new timeline), stops it; returns its acks.
fn run_restored(tmp: &TempDir, new: &Path, crash: bool, until: impl Fn() -> bool) -> Vec<u64> {
    let args = ["--workers", "1", "--workload", "emit-tx:2048", "--ack"];
    let mut s = Server::start_ready(new, tmp.path(), &args);
    let commits_beyond =
        |s: &Server, n: usize| wait_until(TIMEOUT, || parse_acks(&s.stdout()).len() >= n);
    assert!(
        commits_beyond(&s, 50),
        "the restored server commits nothing\n{}",
        s.stderr()
    );
    if crash {
        let backend = s.child_pid("backend").expect("backend");
        kill(backend, libc::SIGKILL);
        s.wait_ready_n(2, TIMEOUT);
        let before = parse_acks(&s.stdout()).len();
        assert!(
            commits_beyond(&s, before + 50),
            "no commits after the crash restart\n{}",
            s.stderr()
        );
    }
    assert!(
        wait_until(TIMEOUT, &until),
        "the restored server did not get far enough\n{}",
        s.stderr()
    );
    parse_acks(&s.stop_ok().stdout)
}

#[test]
fn restored_copy_holds_every_ack_and_continues_on_a_new_timeline() {
    let tmp = TempDir::new("restore");
    let arch = tmp.join("arch");
    let acks = primary_then_kill(&tmp, &arch);
    let first_lsn = SEG + 0x28;

    // NEW from the whole archive (with pg_receivewal's .partial).
    let new = tmp.join("new");
    let o = init_from(&new, &arch, &["--set", "wal_keep_size=1000000"]);
    assert!(o.status.success(), "init --from-wal\n{}", o.describe());
    assert!(new.join("recovery.signal").exists());
    let new_acks = run_restored(&tmp, &new, true, || true);
    assert!(
        !new.join("recovery.signal").exists(),
        "archive recovery did not end"
    );

    let (parent, switch, _) = history_line(&new);
    assert_eq!(parent, 1);
    assert_eq!(
        control_timeline(&new),
        2,
        "the control file names the new timeline"
    );
    let max_ack = *acks.iter().max().unwrap();
    assert!(
        switch > max_ack,
        "switch point {} before ack {}",
        format_lsn(switch),
        format_lsn(max_ack)
    );
    assert!(
        new_acks.iter().all(|&a| a > switch),
        "a new commit before the switch point"
    );
    let tl2 = segnos(&new.join("pg_wal"), 2);
    for a in &new_acks {
        assert!(
            tl2.contains(&geo().seg_no(*a)),
            "commit {} not in a timeline-2 segment",
            format_lsn(*a)
        );
    }
    // The old timeline's switch segment is set aside as .partial.
    let switch_name = geo().file_name(1, geo().seg_no(switch));
    assert!(new
        .join("pg_wal")
        .join(format!("{switch_name}.partial"))
        .exists());
    assert!(!new.join("pg_wal").join(&switch_name).exists());

    let commits = commits_in(&new, first_lsn);
    for a in acks.iter().chain(&new_acks) {
        assert!(
            commits.contains(a),
            "acknowledged commit {} missing from NEW",
            format_lsn(*a)
        );
    }
    // pg_waldump follows the new timeline from its switch point.
    if let Some(pg) = pg_waldump_path() {
        let o = run_cmd(
            Command::new(pg)
                .args(["--timeline", "2", "-p"])
                .arg(new.join("pg_wal"))
                .args(["-s", &format_lsn(switch)]),
            Duration::from_secs(60),
        );
        pg_normal_end(&o)
            .unwrap_or_else(|e| panic!("pg_waldump --timeline 2: {e}\n{}", o.describe()));
        let lines = record_lines(&o.stdout);
        assert!(
            lines[0].contains("CHECKPOINT_SHUTDOWN") && lines[0].contains("tli 2; prev tli 1"),
            "no end-of-recovery checkpoint at the switch point: {}",
            lines[0]
        );
        let theirs: HashSet<u64> = lines
            .iter()
            .filter_map(|l| parse_dump_line(l))
            .filter(|r| r.kind == "COMMIT")
            .map(|r| r.lsn)
            .collect();
        assert!(
            new_acks.iter().all(|a| theirs.contains(a)),
            "pg_waldump misses new commits"
        );
    }

    // A second copy from the first two segments only: restore_command
    // fetches the rest (the .partial too is in the archive under its
    // own name, as pg_receivewal leaves it: fetch it by its plain name).
    let part = tmp.join("part");
    for n in 1..=2 {
        let name = geo().file_name(1, n);
        copy_as(&arch.join(&name), &part, &name);
    }
    let fetch = format!(
        "restore_command=cp {a}/%f %p 2>/dev/null || cp {a}/%f.partial %p",
        a = arch.display()
    );
    let new2 = tmp.join("new2");
    let arch2 = tmp.join("arch2");
    fs::create_dir_all(&arch2).unwrap();
    let archive2 = format!("archive_command=cp %p {}/%f", arch2.display());
    let o = init_from(
        &new2,
        &part,
        &[
            "--set",
            &fetch,
            "--set",
            "wal_keep_size=1000000",
            "--set",
            "archive_mode=on",
            "--set",
            &archive2,
        ],
    );
    assert!(
        o.status.success(),
        "init --from-wal (2 segments)\n{}",
        o.describe()
    );
    // Until it archived a complete segment of the new timeline.
    run_restored(&tmp, &new2, false, || !segnos(&arch2, 2).is_empty());
    assert_eq!(
        history_line(&new2).1,
        switch,
        "the two copies end recovery at different points"
    );
    let commits2 = commits_in(&new2, first_lsn);
    for a in &acks {
        assert!(
            commits2.contains(a),
            "commit {} missing from the restore_command copy",
            format_lsn(*a)
        );
    }
    // The new primary archives the new history and the old timeline's
    // partial switch segment, as PostgreSQL does.
    let name = |f: &str| arch2.join(f);
    assert!(
        wait_until(Duration::from_secs(5), || name("00000002.history")
            .is_file()),
        "history file not archived"
    );
    assert_eq!(
        fs::read(name("00000002.history")).unwrap(),
        fs::read(new2.join("pg_wal/00000002.history")).unwrap()
    );
    assert!(
        name(&format!("{switch_name}.partial")).is_file(),
        "partial segment not archived"
    );
    // A restore of the restore: from the second archive alone (timeline 2's
    // segments and history, timeline 1's .partial), on to timeline 3, whose
    // history names both switch points.
    let new3 = tmp.join("new3");
    let o = init_from(&new3, &arch2, &["--set", "wal_keep_size=1000000"]);
    assert!(
        o.status.success(),
        "init --from-wal of timeline 2\n{}",
        o.describe()
    );
    run_restored(&tmp, &new3, false, || true);
    let text =
        fs::read_to_string(new3.join("pg_wal/00000003.history")).expect("no 00000003.history");
    let lines: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(lines.len(), 2, "{text:?}");
    assert_eq!(
        (lines[0][0], parse_lsn(lines[0][1]).unwrap()),
        ("1", switch),
        "{text:?}"
    );
    assert_eq!(lines[1][0], "2", "{text:?}");
    assert!(parse_lsn(lines[1][1]).unwrap() > switch, "{text:?}");
    assert_eq!(control_timeline(&new3), 3);
    for d in [&new, &new2, &new3] {
        assert_cleaned_up(d);
    }
}

/// The system identifier in a data directory's control file.
fn sysid(dir: &Path) -> u64 {
    backend::control::ControlFile::read(dir)
        .unwrap()
        .system_identifier
}

fn assert_refused(what: &str, o: &Out, new: &Path, existed: bool) {
    assert_no_panic(what, o);
    assert_eq!(o.code(), Some(1), "{what}: not refused\n{}", o.describe());
    if existed {
        assert_eq!(
            fs::read_dir(new).unwrap().count(),
            0,
            "{what}: left files in NEW"
        );
    } else {
        assert!(!new.exists(), "{what}: NEW was created");
    }
}

#[test]
fn bad_wal_sources_are_refused_and_create_nothing() {
    let tmp = TempDir::new("restore-bad");
    let a = init(&tmp.join("a"), &["--wal-segment-size", "1"]);
    let b = init(&tmp.join("b"), &["--wal-segment-size", "1"]);
    let seg1 = |d: &DataDir| d.path.join("pg_wal").join(geo().file_name(1, 1));

    let empty = tmp.join("empty");
    fs::create_dir_all(&empty).unwrap();
    let o = init_from(&tmp.join("n1"), &empty, &[]);
    assert_refused("empty source", &o, &tmp.join("n1"), false);
    // An existing empty NEW stays empty.
    fs::create_dir_all(tmp.join("n1e")).unwrap();
    let o = init_from(&tmp.join("n1e"), &empty, &[]);
    assert_refused("empty source, existing NEW", &o, &tmp.join("n1e"), true);

    // A gap: segments 1 and 3.
    let gap = tmp.join("gap");
    copy_as(&seg1(&a), &gap, &geo().file_name(1, 1));
    copy_as(&seg1(&a), &gap, &geo().file_name(1, 3));
    let o = init_from(&tmp.join("n2"), &gap, &[]);
    assert_refused("gap", &o, &tmp.join("n2"), false);
    assert!(
        o.stderr.contains(&geo().file_name(1, 2)),
        "the missing segment is not named\n{}",
        o.stderr
    );

    // Another system's segment after this system's.
    let mixed = tmp.join("mixed");
    copy_as(&seg1(&a), &mixed, &geo().file_name(1, 1));
    copy_as(&seg1(&b), &mixed, &geo().file_name(1, 2));
    let o = init_from(&tmp.join("n3"), &mixed, &[]);
    assert_refused("another system's segment", &o, &tmp.join("n3"), false);
    for id in [sysid(&a.path), sysid(&b.path)] {
        assert!(
            o.stderr.contains(&id.to_string()),
            "system identifier {id} not named\n{}",
            o.stderr
        );
    }

    // restore_command delivering another system's segment: the startup
    // process refuses it, and nothing of a new timeline is written.
    let only_a = tmp.join("only-a");
    copy_as(&seg1(&a), &only_a, &geo().file_name(1, 1));
    let other = tmp.join("other");
    copy_as(&seg1(&b), &other, &geo().file_name(1, 2));
    let fetch = format!("restore_command=cp {}/%f %p", other.display());
    let n4 = tmp.join("n4");
    let o = init_from(&n4, &only_a, &["--set", &fetch]);
    assert!(
        o.status.success(),
        "init --from-wal of a fresh system\n{}",
        o.describe()
    );
    let control_before = fs::read(n4.join("global/pg_control")).unwrap();
    let s = Server::start(&n4, tmp.path(), &[]);
    let o = s.wait_exit(TIMEOUT);
    assert_no_panic("start with a foreign restored segment", &o);
    o.assert_failed_with(
        "started with another system's segment",
        &sysid(&b.path).to_string(),
    );
    assert!(
        !n4.join("pg_wal/00000002.history").exists(),
        "a new timeline was begun"
    );
    assert!(
        !n4.join("pg_wal").join(geo().file_name(1, 2)).exists(),
        "the foreign segment was kept"
    );
    assert_eq!(
        fs::read(n4.join("global/pg_control")).unwrap(),
        control_before
    );
    assert!(n4.join("recovery.signal").exists());
    assert_cleaned_up(&n4);
}

/// `init --from-wal` with its own timeout (a hung `init` is killed and the
/// test fails).
fn init_from_within(new: &Path, src: &Path, extra: &[&str], timeout: Duration) -> Out {
    let mut args = vec![
        "init".to_string(),
        "-D".into(),
        new.display().to_string(),
        "--from-wal".into(),
        src.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    run_cmd(Command::new(postmaster_bin()).args(&args), timeout)
}

/// A segment file for `segno` made of `seg1`'s long page header (this
/// system's identifier, timeline 1) with the page address of `segno`, and
/// zeros after it (sparse): a segment with no records, which passes every
/// check of its first page.
fn fake_segment(seg1: &Path, segno: u64, to: &Path) {
    use std::io::Write;
    let mut head = fs::read(seg1).unwrap()[..walformat::SIZE_OF_XLOG_LONG_PHD].to_vec();
    head[8..16].copy_from_slice(&geo().seg_start(segno).to_le_bytes());
    let mut f = fs::File::create(to).unwrap();
    f.write_all(&head).unwrap();
    f.set_len(SEG).unwrap();
}

/// A fresh system `a` and a source holding its segment 1; returns
/// (segment 1 of `a`, the source).
fn fresh_source(tmp: &TempDir, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let a = init(
        &tmp.join(&format!("{name}-a")),
        &["--wal-segment-size", "1"],
    );
    let seg1 = a.path.join("pg_wal").join(geo().file_name(1, 1));
    let src = tmp.join(&format!("{name}-src"));
    copy_as(&seg1, &src, &geo().file_name(1, 1));
    (seg1, src)
}

/// An empty archive directory `arch` in `tmp`.
fn new_archive(tmp: &TempDir) -> PathBuf {
    let arch = tmp.join("arch");
    fs::create_dir_all(&arch).unwrap();
    arch
}

/// Archive recovery did not finish: `recovery.signal` stays, the control
/// file is as `init` left it, no history file of a new timeline exists;
/// and the stopped server cleaned up after itself.
fn assert_not_promoted(what: &str, new: &Path, control_before: &[u8]) {
    assert!(
        new.join("recovery.signal").exists(),
        "{what}: recovery.signal removed"
    );
    assert_eq!(
        fs::read(new.join("global/pg_control")).unwrap(),
        control_before,
        "{what}: the control file changed"
    );
    for tli in [0u32, 2] {
        let h = new.join(format!("pg_wal/{tli:08X}.history"));
        assert!(!h.exists(), "{what}: {} written", h.display());
    }
    assert_cleaned_up(new);
}

#[test]
fn restore_command_delivering_another_segment_stops_recovery() {
    let tmp = TempDir::new("restore-pageaddr");
    let (seg1, src) = fresh_source(&tmp, "p");
    let arch = new_archive(&tmp);
    let seg2 = arch.join(geo().file_name(1, 2));
    fake_segment(&seg1, 2, &seg2);
    // Ignores %f: segment 2 whatever is asked. The sleep bounds what a
    // server that does not check can fetch before the test gives up.
    let cmd = format!("sleep 0.05; cp {} %p", seg2.display());
    let new = tmp.join("new");
    let o = init_from(&new, &src, &["--set", &format!("restore_command={cmd}")]);
    assert!(o.status.success(), "init --from-wal\n{}", o.describe());
    let control_before = fs::read(new.join("global/pg_control")).unwrap();
    let s = Server::start(&new, tmp.path(), &[]);
    let o = s.wait_exit(Duration::from_secs(15));
    assert_no_panic("start with a restore_command ignoring %f", &o);
    assert_eq!(o.code(), Some(1), "not refused\n{}", o.describe());
    let first = geo().file_name(1, 1);
    assert!(
        o.stderr.contains(&format!("\"{first}\"")) && o.stderr.contains("sleep 0.05; cp "),
        "the requested file and the command are not named\n{}",
        o.stderr
    );
    let pg_wal = new.join("pg_wal");
    assert_eq!(
        segnos(&pg_wal, 1),
        vec![1],
        "only the right segment is kept"
    );
    assert_eq!(
        fs::read(pg_wal.join(&first)).unwrap(),
        fs::read(&seg1).unwrap(),
        "pg_wal's own segment 1 was replaced"
    );
    assert!(!pg_wal.join("RECOVERYXLOG").exists());
    assert_not_promoted("wrong segment", &new, &control_before);
}

#[test]
fn fast_shutdown_stops_restore_command_between_fetches() {
    let tmp = TempDir::new("restore-sigterm");
    let (seg1, src) = fresh_source(&tmp, "t");
    let arch = new_archive(&tmp);
    const LAST: u64 = 21;
    for n in 2..=LAST {
        fake_segment(&seg1, n, &arch.join(geo().file_name(1, n)));
    }
    // 0.5 s a segment: 10 s for the whole archive.
    let cmd = format!("restore_command=sleep 0.5; cp {}/%f %p", arch.display());
    for (i, sig) in [libc::SIGTERM, libc::SIGINT].into_iter().enumerate() {
        let new = tmp.join(&format!("new{i}"));
        let o = init_from(&new, &src, &["--set", &cmd]);
        assert!(o.status.success(), "init --from-wal\n{}", o.describe());
        let control_before = fs::read(new.join("global/pg_control")).unwrap();
        let s = Server::start(&new, tmp.path(), &[]);
        let second = new.join("pg_wal").join(geo().file_name(1, 2));
        assert!(
            wait_until(TIMEOUT, || second.exists()),
            "nothing restored\n{}",
            s.stderr()
        );
        stops_promptly(s, sig);
        let fetched = segnos(&new.join("pg_wal"), 1);
        assert!(
            fetched.len() < (LAST as usize) - 2,
            "signal {sig}: fetching went on: {fetched:?}"
        );
        assert_not_promoted("fast shutdown", &new, &control_before);
    }
}

/// Sends `sig` (a fast shutdown) and asserts the postmaster exits 0 within
/// 4 s, without a panic.
fn stops_promptly(s: Server, sig: i32) {
    s.signal(sig);
    let asked = Instant::now();
    let o = s.wait_exit(TIMEOUT);
    let took = asked.elapsed();
    assert_no_panic("fast shutdown during archive recovery", &o);
    assert!(
        took < Duration::from_secs(4),
        "signal {sig}: the postmaster took {took:?} to stop\n{}",
        o.describe()
    );
    assert_eq!(o.code(), Some(0), "signal {sig}\n{}", o.describe());
}

/// A `restore_command` that hangs does not hold up a fast shutdown: the
/// startup process stops it (SIGTERM to its process group) and exits.
#[test]
fn fast_shutdown_stops_a_hanging_restore_command() {
    let tmp = TempDir::new("restore-hang");
    let (seg1, src) = fresh_source(&tmp, "g");
    let arch = tmp.join("arch");
    // The archive is asked first for segment 1 (before pg_wal's copy).
    copy_as(&seg1, &arch, &geo().file_name(1, 1));
    fake_segment(&seg1, 2, &arch.join(geo().file_name(1, 2)));
    let cmd = format!("restore_command=cp {}/%f %p; sleep 60", arch.display());
    let new = tmp.join("new");
    let o = init_from(&new, &src, &["--set", &cmd]);
    assert!(o.status.success(), "init --from-wal\n{}", o.describe());
    let control_before = fs::read(new.join("global/pg_control")).unwrap();
    let s = Server::start(&new, tmp.path(), &[]);
    let target = new.join("pg_wal/RECOVERYXLOG");
    assert!(
        wait_until(TIMEOUT, || target.exists()),
        "the command did not start\n{}",
        s.stderr()
    );
    stops_promptly(s, libc::SIGTERM);
    assert!(!target.exists(), "the half-fetched file stays behind");
    assert_not_promoted("fast shutdown", &new, &control_before);
}

#[test]
fn invalid_history_files_are_refused() {
    let tmp = TempDir::new("restore-history");
    let (_, src) = fresh_source(&tmp, "h");
    let bad = [
        ("FFFFFFFF.history", "1\t0/2000000\tstray\n"),
        ("00000000.history", ""),
        ("00000003.history", "2\t0/2000000\tx\n1\t0/3000000\ty\n"),
        ("00000004.history", "1\t0/3000000\tx\n2\t0/2000000\ty\n"),
    ];
    for (i, (name, text)) in bad.iter().enumerate() {
        let dir = tmp.join(&format!("bad{i}"));
        copy_as(
            &src.join(geo().file_name(1, 1)),
            &dir,
            &geo().file_name(1, 1),
        );
        fs::write(dir.join(name), text).unwrap();
        let new = tmp.join(&format!("n{i}"));
        let o = init_from(&new, &dir, &[]);
        assert_refused(name, &o, &new, false);
        assert!(o.stderr.contains(name), "{name} not named\n{}", o.stderr);
    }
    // In pg_wal (put there after init): the server refuses to start and
    // picks no timeline; likewise when the newest timeline is the highest
    // valid ID (a valid history file, so init accepts it).
    let cases = [
        ("FFFFFFFF.history", "1\t0/2000000\tstray\n", false),
        ("FFFFFFFE.history", "1\t0/2000000\tlast\n", true),
    ];
    for (i, (name, text, in_source)) in cases.into_iter().enumerate() {
        let dir = tmp.join(&format!("good{i}"));
        copy_as(
            &src.join(geo().file_name(1, 1)),
            &dir,
            &geo().file_name(1, 1),
        );
        let new = tmp.join(&format!("s{i}"));
        if in_source {
            fs::write(dir.join(name), text).unwrap();
        }
        let o = init_from(&new, &dir, &[]);
        assert!(o.status.success(), "init --from-wal\n{}", o.describe());
        fs::write(new.join("pg_wal").join(name), text).unwrap();
        let control_before = fs::read(new.join("global/pg_control")).unwrap();
        let o = Server::start(&new, tmp.path(), &[]).wait_exit(TIMEOUT);
        assert_no_panic(name, &o);
        assert_eq!(o.code(), Some(1), "{name}: started\n{}", o.describe());
        assert!(o.stderr.contains(name), "{name} not named\n{}", o.stderr);
        assert_eq!(control_timeline(&new), 1);
        if in_source {
            assert!(!new.join("pg_wal/FFFFFFFF.history").exists());
        }
        assert_not_promoted(name, &new, &control_before);
    }
}

#[test]
fn fifo_in_a_wal_source_is_refused_without_opening_it() {
    let tmp = TempDir::new("restore-fifo");
    let (seg1, _) = fresh_source(&tmp, "f");
    let mkfifo = |p: &Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that lives for the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    };
    let seg = |n| geo().file_name(1, n);
    // (case, a real segment 1 first?, the FIFO's name)
    let cases = [
        ("the only segment", false, seg(1)),
        ("a segment after a real one", true, seg(2)),
        ("a .partial segment", true, format!("{}.partial", seg(2))),
        ("a history file", true, "00000002.history".to_string()),
    ];
    for (i, (what, real_first, fifo)) in cases.iter().enumerate() {
        let dir = tmp.join(&format!("src{i}"));
        fs::create_dir_all(&dir).unwrap();
        if *real_first {
            copy_as(&seg1, &dir, &seg(1));
        }
        mkfifo(&dir.join(fifo));
        let new = tmp.join(&format!("n{i}"));
        let o = init_from_within(&new, &dir, &[], Duration::from_secs(10));
        assert_refused(what, &o, &new, false);
        assert!(
            o.stderr.contains(&format!("{fifo}\"")),
            "{what}: {fifo} not named\n{}",
            o.stderr
        );
    }
}
