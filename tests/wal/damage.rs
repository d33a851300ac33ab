//! WAL damaged before its end is never taken for a torn tail: after a kill -9
//! of the whole server during an acknowledged `emit-tx` run, one kind of damage
//! is applied to a copy of the data directory at a random position before the
//! end of valid WAL, and the next start EITHER refuses (exit status 3, pg_wal
//! and the control file byte for byte unchanged) OR starts with every
//! acknowledged commit still a COMMIT record in the WAL. A started server with
//! fewer acknowledged commits fails.
//!
//! Also: `--discard-damaged-wal` moves the WAL after the damage aside and
//! starts; a torn tail (damage only after the last acknowledged commit)
//! still recovers by itself, and the bytes after the end are zero on disk.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use walformat::{format_lsn, Geometry};

/// The postmaster's exit status for "WAL damaged before its end".
const EXIT_WAL_DAMAGED: i32 = 3;
const BLCKSZ: u64 = 8192;

/// The WAL of a crashed acknowledged run.
struct Crashed {
    _tmp: TempDir,
    d: DataDir,
    acks: Vec<u64>,
    /// End of valid WAL (where reading stops).
    end: u64,
    /// Number of the last segment holding valid WAL.
    last_seg: u64,
}

/// `emit-tx:100 --ack` on 4 backends with 1 MB segments until segment
/// `segs` exists, then kill -9 of the whole group.
fn crashed_run(tag: &str, segs: u64) -> Crashed {
    crashed_run_past(tag, segs, BLCKSZ)
}

/// [`crashed_run`] until acknowledged commits pass `past` bytes into
/// segment `segs`, and the valid WAL ends at least `past` bytes into its
/// last segment: a kill that lands just after WAL crossed into the next
/// segment (a slow machine) leaves too little there, and the run is made
/// again (at most three times).
fn crashed_run_past(tag: &str, segs: u64, past: u64) -> Crashed {
    for _ in 0..2 {
        let c = crashed_run_once(tag, segs, past);
        if c.end - (c.last_seg << 20) >= past {
            return c;
        }
        eprintln!("{tag}: WAL ended too early in its last segment; once more");
    }
    crashed_run_once(tag, segs, past)
}

fn crashed_run_once(tag: &str, segs: u64, past: u64) -> Crashed {
    let tmp = TempDir::new(tag);
    let (d, s) = start_workload(
        &tmp,
        "data",
        4,
        "emit-tx:100",
        &[
            "--ack",
            "--set",
            "fsync=off",
            "--set",
            "wal_writer_delay=10ms",
        ],
    );
    let geo = Geometry::new(d.seg_size).unwrap();
    let target = geo.seg_start(segs) + past;
    // Until acknowledged commits reach segment `segs`.
    let reached = wait_until(TIMEOUT, || {
        parse_acks(&s.stdout()).iter().any(|a| *a > target)
    });
    assert!(reached, "WAL did not reach segment {segs}\n{}", s.stderr());
    let o = kill_group(s);
    let acks = parse_acks(&o.stdout);
    let (recs, _why) = scan_records(&d);
    let end = recs.last().unwrap().next;
    let wal = tx_wal_check_tail_ok(&d);
    assert_eq!(check_acks(&acks, &wal), acks.len());
    eprintln!(
        "{tag}: {} acks, {} records, end of valid WAL {}",
        acks.len(),
        recs.len(),
        format_lsn(end)
    );
    Crashed {
        last_seg: geo.seg_no(end - 1),
        _tmp: tmp,
        d,
        acks,
        end,
    }
}

/// COMMIT records of the WAL as walformat's reader sees it (no clean end
/// needed: a crashed directory ends in a torn tail).
fn tx_wal_check_tail_ok(d: &DataDir) -> TxWal {
    let (recs, _) = scan_records(d);
    TxWal {
        commits: recs
            .iter()
            .filter(|r| r.is_commit)
            .map(|r| (r.lsn, r.xid))
            .collect(),
        records: recs.len(),
        last_lsn: recs.last().map(|r| r.lsn).unwrap_or(0),
        ..TxWal::default()
    }
}

/// Copies the regular files of directory `from` into `to`, recursively;
/// directories get mode 0700 (the server refuses a looser data directory).
fn copy_dir(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        let t = e.file_type().unwrap();
        if t.is_dir() {
            copy_dir(&e.path(), &target);
        } else if t.is_file() {
            std::fs::copy(e.path(), &target).unwrap();
        } // sockets of the killed server: not data
    }
}

/// Every file of `dir` (not recursive) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn seg_file(d: &Path, segno: u64) -> PathBuf {
    let geo = Geometry::new(1 << 20).unwrap();
    d.join("pg_wal").join(geo.file_name(1, segno))
}

/// Overwrites bytes at WAL position `lsn` of data directory `d`.
fn write_at_lsn(d: &Path, lsn: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(seg_file(d, lsn >> 20))
        .unwrap();
    f.write_all_at(bytes, lsn & ((1 << 20) - 1)).unwrap();
}

/// The end of the end-of-recovery checkpoint that startup writes at
/// `end`, the end of the WAL a crash recovery found (a CHECKPOINT_SHUTDOWN
/// record starting exactly there, or after the page header when `end` is a
/// page boundary: CI once cut at 0/00430000): the zeroed tail starts after
/// it.
fn after_end_of_recovery_checkpoint(d: &Path, end: u64) -> u64 {
    let geo = Geometry::new(1 << 20).unwrap();
    let mut reader = walformat::WalReader::open(&d.join("pg_wal"), geo, 1, None, end)
        .unwrap_or_else(|e| panic!("open WAL at {}: {e}", format_lsn(end)));
    let r = reader
        .next_record()
        .unwrap_or_else(|e| panic!("record at {}: {e}", format_lsn(end)))
        .expect("a record at the end of the recovered WAL");
    assert_eq!(
        r.lsn,
        record_start(end),
        "the end-of-recovery checkpoint is at the cut ({})",
        format_lsn(end)
    );
    assert!(
        r.as_checkpoint().is_some_and(|(_, shutdown)| shutdown),
        "the record at the cut is a CHECKPOINT_SHUTDOWN"
    );
    r.end
}

/// Where a record that follows WAL ending at `end` starts: `end` itself,
/// or after the page header when `end` is a page boundary.
fn record_start(end: u64) -> u64 {
    let geo = Geometry::new(1 << 20).unwrap();
    geo.bytepos_to_recptr(geo.recptr_to_bytepos(end))
}

/// The bytes from `from` to the end of its 1 MB segment.
fn rest_of_segment(d: &Path, from: u64) -> Vec<u8> {
    read_at_lsn(d, from, ((1 << 20) - (from & ((1 << 20) - 1))) as usize)
}

fn read_at_lsn(d: &Path, lsn: u64, n: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(seg_file(d, lsn >> 20)).unwrap();
    let mut b = vec![0u8; n];
    f.read_exact_at(&mut b, lsn & ((1 << 20) - 1)).unwrap();
    b
}

/// One kind of damage.
#[derive(Clone, Copy, Debug)]
enum Damage {
    BitFlip,
    ZeroedRange,
    TruncatedSegment,
    RemovedSegment,
    SwappedSegments,
    ForeignSegment,
    Garbage,
}

const KINDS: [Damage; 7] = [
    Damage::BitFlip,
    Damage::ZeroedRange,
    Damage::TruncatedSegment,
    Damage::RemovedSegment,
    Damage::SwappedSegments,
    Damage::ForeignSegment,
    Damage::Garbage,
];

/// Applies `kind` to data directory `dir` at a random position after the
/// checkpoint record and before the last segment holding valid WAL: damage
/// inside the last segment is inside the unsynced window (the rest of the
/// segment where reading stops, `walformat::unsynced_window_end`) and is
/// taken for a power-loss tail, so to keep its meaning the matrix damages
/// only earlier segments, where valid WAL beyond the window follows (no
/// small `wal_buffers` needed: the window does not depend on it).
/// Segment-level damage hits segments 2..last-1 (segment 1 holds the
/// checkpoint recovery starts from). Returns a description.
fn apply(kind: Damage, dir: &Path, w: &Crashed, foreign: &Path, rng: &mut Rng) -> String {
    let lo = w.d.first_lsn + 256;
    let hi = (w.end - w.end % BLCKSZ - 2 * BLCKSZ).min(w.last_seg << 20);
    let seg = |rng: &mut Rng, top: u64| rng.range(2, top);
    match kind {
        Damage::BitFlip => {
            let at = rng.range(lo, hi);
            let bit = 1u8 << rng.range(0, 8);
            let b = read_at_lsn(dir, at, 1)[0];
            write_at_lsn(dir, at, &[b ^ bit]);
            format!("bit {bit:#04x} flipped at {}", format_lsn(at))
        }
        Damage::ZeroedRange => {
            let at = rng.range(lo, hi);
            let seg_end = (at | ((1 << 20) - 1)) + 1;
            let len = rng.range(1, 20_000).min(seg_end - at);
            write_at_lsn(dir, at, &vec![0u8; len as usize]);
            format!("{len} bytes zeroed at {}", format_lsn(at))
        }
        Damage::Garbage => {
            let at = rng.range(lo, hi);
            let seg_end = (at | ((1 << 20) - 1)) + 1;
            let len = rng.range(16, 4096).min(seg_end - at);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            write_at_lsn(dir, at, &bytes);
            format!("{len} garbage bytes at {}", format_lsn(at))
        }
        Damage::TruncatedSegment => {
            let k = seg(rng, w.last_seg);
            let len = rng.range(0, 1 << 20);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(seg_file(dir, k))
                .unwrap();
            f.set_len(len).unwrap();
            format!("segment {k} truncated to {len} bytes")
        }
        Damage::RemovedSegment => {
            let k = seg(rng, w.last_seg);
            std::fs::remove_file(seg_file(dir, k)).unwrap();
            format!("segment {k} removed")
        }
        Damage::SwappedSegments => {
            let k = seg(rng, w.last_seg);
            let (a, b) = (seg_file(dir, k), seg_file(dir, k + 1));
            let tmp = dir.join("swap.tmp");
            std::fs::rename(&a, &tmp).unwrap();
            std::fs::rename(&b, &a).unwrap();
            std::fs::rename(&tmp, &b).unwrap();
            format!("segments {k} and {} swapped", k + 1)
        }
        Damage::ForeignSegment => {
            let k = seg(rng, w.last_seg.min(4));
            std::fs::copy(seg_file(foreign, k), seg_file(dir, k)).unwrap();
            format!("segment {k} replaced by another system's segment {k}")
        }
    }
}

/// A second system (its own system identifier) that wrote segments 1..=5.
fn foreign_system(tmp: &TempDir) -> DataDir {
    let (d, s) = start_workload(tmp, "foreign", 2, "emit-tx:100", &["--set", "fsync=off"]);
    let six = seg_file(&d.path, 6);
    assert!(
        wait_until(TIMEOUT, || six.exists()),
        "foreign WAL too short"
    );
    std::thread::sleep(Duration::from_millis(100));
    kill_group(s);
    d
}

/// How a start on damaged WAL ended.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Outcome {
    Refused,
    StartedIntact,
}

/// Starts `postmaster start ARGS` on `dir`; returns the server once it is
/// ready, or its output if it exited first.
fn start_or_exit(dir: &Path, logdir: &Path, args: &[&str]) -> Result<Server, Out> {
    let mut s = Server::start(dir, logdir, args);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if s.stderr().contains(READY) {
            return Ok(s);
        }
        if s.try_wait().is_some() {
            return Err(s.wait_exit(TIMEOUT));
        }
        assert!(
            Instant::now() < deadline,
            "neither ready nor exited\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The check of one damaged copy: refused with nothing changed, or
/// started with every acknowledged commit intact.
fn check_case(what: &str, dir: &Path, logdir: &Path, w: &Crashed) -> Outcome {
    let wal_before = snapshot(&dir.join("pg_wal"));
    let control_before = snapshot(&dir.join("global"));
    match start_or_exit(dir, logdir, &["--workers", "0"]) {
        Err(o) => {
            assert_eq!(
                o.code(),
                Some(EXIT_WAL_DAMAGED),
                "{what}: the server neither started nor refused with exit status 3\n{}",
                o.describe()
            );
            assert_no_panic(what, &o);
            let wal_after = snapshot(&dir.join("pg_wal"));
            assert_eq!(
                wal_before.keys().collect::<Vec<_>>(),
                wal_after.keys().collect::<Vec<_>>(),
                "{what}: files in pg_wal changed"
            );
            for (name, bytes) in &wal_before {
                assert!(
                    wal_after[name] == *bytes,
                    "{what}: pg_wal/{name} changed by a refused start"
                );
            }
            assert!(
                snapshot(&dir.join("global")) == control_before,
                "{what}: the control file changed by a refused start"
            );
            Outcome::Refused
        }
        Ok(s) => {
            std::thread::sleep(Duration::from_millis(200));
            s.stop_ok();
            let d = DataDir {
                path: dir.to_path_buf(),
                ..w.d.clone()
            };
            let wal = tx_wal_check(&d);
            check_acks(&w.acks, &wal);
            Outcome::StartedIntact
        }
    }
}

#[test]
fn damage_before_the_end_never_loses_acknowledged_commits() {
    let started = Instant::now();
    let w = crashed_run("matrix", 5);
    let tmp = TempDir::new("matrix-cases");
    let foreign = foreign_system(&tmp);
    assert_ne!(system_id(&foreign.path), system_id(&w.d.path));
    let seed = 0x9e37_79b9_7f4a_7c15 ^ w.end;
    eprintln!("damage matrix seed {seed:#x}");
    let mut rng = Rng(seed);
    let mut outcomes = Vec::new();
    for round in 0..6 {
        for kind in KINDS {
            let dir = tmp.join(&format!("case-{round}-{kind:?}"));
            copy_dir(&w.d.path, &dir);
            let what = apply(kind, &dir, &w, &foreign.path, &mut rng);
            let outcome = check_case(&what, &dir, tmp.path(), &w);
            eprintln!("damage case: {what}: {outcome:?}");
            outcomes.push(outcome);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let refused = outcomes.iter().filter(|o| **o == Outcome::Refused).count();
    eprintln!(
        "damage matrix: {} cases, {refused} refused, {} started with all {} acks intact, {:.1} s",
        outcomes.len(),
        outcomes.len() - refused,
        w.acks.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Segment numbers in `dir/pg_wal`.
fn segments(dir: &Path) -> Vec<u64> {
    let geo = Geometry::new(1 << 20).unwrap();
    let mut v: Vec<u64> = std::fs::read_dir(dir.join("pg_wal"))
        .unwrap()
        .flatten()
        .filter_map(|e| geo.parse_file_name(&e.file_name().to_string_lossy()))
        .map(|(_, s)| s)
        .collect();
    v.sort_unstable();
    v
}

fn system_id(dir: &Path) -> u64 {
    let b = read_at_lsn(dir, 1 << 20, 40);
    u64::from_le_bytes(b[24..32].try_into().unwrap())
}

#[test]
fn discard_flag_moves_damaged_wal_aside_and_starts() {
    let w = crashed_run("discard", 4);
    let dir = &w.d.path;
    let tmp = TempDir::new("discard-logs");
    // A zeroed page in segment 2: records after it in segments 2..last.
    let page = (2 << 20) + 5 * BLCKSZ;
    write_at_lsn(dir, page, &[0u8; BLCKSZ as usize]);
    let (recs, _) = scan_records(&w.d);
    let stop = recs.last().unwrap().next;
    let lost: Vec<u64> = w.acks.iter().copied().filter(|a| *a >= stop).collect();
    assert!(
        !lost.is_empty(),
        "the damage must hide acknowledged commits"
    );
    let segs_before = segments(dir);
    let wal_before = snapshot(&dir.join("pg_wal"));
    // Without the flag: refused.
    let o = start_or_exit(dir, tmp.path(), &["--workers", "0"])
        .err()
        .expect("refused");
    assert_eq!(o.code(), Some(EXIT_WAL_DAMAGED), "{}", o.describe());
    // With it: started; the WAL after the damage is in pg_wal_discarded.
    let s = start_or_exit(
        dir,
        tmp.path(),
        &["--workers", "0", "--discard-damaged-wal"],
    )
    .unwrap_or_else(|o| panic!("did not start with the flag\n{}", o.describe()));
    let parent = dir.join("pg_wal_discarded");
    let subdirs: Vec<PathBuf> = std::fs::read_dir(&parent)
        .expect("pg_wal_discarded exists")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(subdirs.len(), 1, "{subdirs:?}");
    let moved = snapshot(&subdirs[0]);
    let stop_seg = stop >> 20;
    let geo = Geometry::new(1 << 20).unwrap();
    for segno in segs_before.iter().filter(|s| **s >= stop_seg) {
        let name = geo.file_name(1, *segno);
        assert!(
            moved.get(&name) == wal_before.get(&name),
            "segment {segno} not moved unchanged into {}",
            subdirs[0].display()
        );
    }
    // pg_wal holds no valid WAL after the damage any more, and the segment
    // holding it is cut there (zero after it).
    let sys = walformat::WalSystem {
        geo,
        tli: 1,
        sysid: system_id(dir),
    };
    let la = walformat::look_ahead(&dir.join("pg_wal"), sys, stop).unwrap();
    assert_eq!(la.found, None, "valid WAL left after the damage: {la:?}");
    let tail = rest_of_segment(dir, after_end_of_recovery_checkpoint(dir, stop));
    assert!(
        tail.iter().all(|b| *b == 0),
        "bytes after the cut are not zero"
    );
    s.stop_ok();
    // A clean restart needs no flag, and commits go on.
    let s = Server::start_ready(
        dir,
        tmp.path(),
        &["--workers", "2", "--workload", "emit-tx:100", "--ack"],
    );
    std::thread::sleep(Duration::from_millis(400));
    let o = s.stop_ok();
    let new_acks = parse_acks(&o.stdout);
    assert!(!new_acks.is_empty(), "no new commits acknowledged");
    let wal = tx_wal_check(&w.d);
    let kept: Vec<u64> = w.acks.iter().copied().filter(|a| *a < stop).collect();
    check_acks(&kept, &wal);
    check_acks(&new_acks, &wal);
    eprintln!(
        "discard: stopped at {}, {} acks discarded, {} kept, {} new",
        format_lsn(stop),
        lost.len(),
        kept.len(),
        new_acks.len()
    );
}

#[test]
fn torn_tail_recovers_by_itself_and_is_zeroed_on_disk() {
    let w = crashed_run("torn", 2);
    let dir = &w.d.path;
    let tmp = TempDir::new("torn-logs");
    let last_ack = *w.acks.iter().max().unwrap();
    let (recs, _) = scan_records(&w.d);
    // Cut the last record after the last acknowledged commit in half, if
    // there is one, and write garbage over the unwritten rest of its page.
    let mut end = w.end;
    if let Some(r) = recs
        .iter()
        .rev()
        .find(|r| r.lsn > last_ack && r.next == w.end)
    {
        let half = r.lsn + (r.end - r.lsn) / 2;
        write_at_lsn(dir, half, &vec![0u8; (r.end - half) as usize]);
        end = r.lsn;
        eprintln!(
            "torn tail: last record at {} cut in half",
            format_lsn(r.lsn)
        );
    }
    let page_end = (w.end | (BLCKSZ - 1)) + 1;
    let mut rng = Rng(end | 1);
    let garbage: Vec<u8> = (w.end..page_end)
        .map(|_| rng.next_u64() as u8 | 1)
        .collect();
    write_at_lsn(dir, w.end, &garbage);
    let s = start_or_exit(dir, tmp.path(), &["--workers", "0"])
        .unwrap_or_else(|o| panic!("torn tail refused\n{}", o.describe()));
    let tail = rest_of_segment(dir, after_end_of_recovery_checkpoint(dir, end));
    assert!(
        tail.iter().all(|b| *b == 0),
        "bytes after the end of WAL not zeroed on disk"
    );
    s.stop_ok();
    // Recovery ended exactly at the cut: the first record written after
    // it (the end-of-recovery checkpoint) starts where the cut record started.
    let (after, _) = scan_records(&w.d);
    let next = after.iter().find(|r| r.lsn >= end).map(|r| r.lsn);
    assert_eq!(
        next.map(format_lsn),
        Some(format_lsn(record_start(end))),
        "new WAL does not continue at the cut"
    );
    let wal = tx_wal_check(&w.d);
    assert_eq!(check_acks(&w.acks, &wal), w.acks.len());
}

/// The zeroing of the torn tail goes through the I/O seam: a failing WAL
/// write there stops the startup (no server runs on a tail it could not
/// cut), and the next start without the fail point cuts it.
#[test]
fn torn_tail_zeroing_goes_through_the_fail_points() {
    let w = crashed_run("torn-fail", 2);
    let dir = &w.d.path;
    let tmp = TempDir::new("torn-fail-logs");
    let page_end = (w.end | (BLCKSZ - 1)) + 1;
    write_at_lsn(dir, w.end, &vec![0xA5u8; (page_end - w.end) as usize]);
    start_fails_at(dir, tmp.path(), "wal_write=eio");
    assert_ne!(
        read_at_lsn(dir, w.end, 1)[0],
        0,
        "garbage zeroed despite EIO"
    );
    let s = start_or_exit(dir, tmp.path(), &["--workers", "0"])
        .unwrap_or_else(|o| panic!("torn tail refused\n{}", o.describe()));
    let after = after_end_of_recovery_checkpoint(dir, w.end);
    let rest = read_at_lsn(dir, after, page_end.saturating_sub(after) as usize);
    assert!(rest.iter().all(|b| *b == 0), "garbage not zeroed");
    s.stop_ok();
    let wal = tx_wal_check(&w.d);
    assert_eq!(check_acks(&w.acks, &wal), w.acks.len());
}

/// Starts `dir` (no backends) with fail point `spec`: the postmaster
/// must give up, exit 1 and never be ready. Its output.
fn start_fails_at(dir: &Path, logdir: &Path, spec: &str) -> Out {
    let mut s = start_with_env(
        dir,
        logdir,
        &["--workers", "0"],
        &[("WALSHM_FAILPOINTS", spec)],
    );
    assert!(
        wait_until(TIMEOUT, || s.try_wait().is_some()),
        "{spec}: server did not give up"
    );
    let o = s.wait_exit(TIMEOUT);
    assert_eq!(o.code(), Some(1), "{spec}\n{}", o.describe());
    assert!(!o.stderr.contains(READY), "{spec}\n{}", o.stderr);
    o
}

/// Starts `dir` with fail point `spec`: the startup fails cleanly (the
/// postmaster exits 1, never ready, after the fail point fired) and
/// changes no byte of `pg_wal` or `global/`; then a start without it is
/// normal.
fn startup_fails_cleanly_at(tag: &str, spec: &str) {
    let tmp = TempDir::new(tag);
    let d = init(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let before = (
        snapshot(&d.path.join("pg_wal")),
        snapshot(&d.path.join("global")),
    );
    let o = start_fails_at(&d.path, tmp.path(), spec);
    let name = spec.split('=').next().unwrap();
    assert!(
        o.stderr.contains(&format!("FAILPOINT {name} fired")),
        "{spec}: the read did not go through the fail point\n{}",
        o.stderr
    );
    let after = (
        snapshot(&d.path.join("pg_wal")),
        snapshot(&d.path.join("global")),
    );
    assert!(before == after, "{spec}: the failed startup changed files");
    let s = start_or_exit(&d.path, tmp.path(), &["--workers", "0"])
        .unwrap_or_else(|o| panic!("{spec}: no start without the fail point\n{}", o.describe()));
    s.stop_ok();
}

/// Recovery's WAL reads (the checkpoint record, through walformat's reader
/// given the seam's `WalFiles`) go through the I/O seam.
#[test]
fn recovery_wal_read_goes_through_the_fail_points() {
    startup_fails_cleanly_at("wal-read-fail", "wal_read=eio");
}

/// The control-file read goes through the I/O seam (`after=1`: the
/// postmaster's own read at start passes, the startup process's fails).
#[test]
fn control_file_read_goes_through_the_fail_points() {
    startup_fails_cleanly_at("control-read-fail", "control_read=eio:after=1");
}

/// The unsynced window: damage followed by valid WAL only inside the rest of
/// its segment is taken for a power-loss tail (started, recovery ends where
/// reading stopped, a WARNING names it); damage followed by valid WAL in a
/// later segment is refused (exit 3), even when the valid WAL starts right at
/// the window's end.
#[test]
fn valid_wal_inside_the_window_is_a_tail_beyond_it_is_refused() {
    let w = crashed_run_past("window", 3, 256 << 10);
    let tmp = TempDir::new("window-cases");
    let seg_start = w.last_seg << 20;
    let end_page = w.end - w.end % BLCKSZ;
    // Inside: a zeroed page in the last segment, valid pages after it.
    let page = seg_start + ((end_page - seg_start) / BLCKSZ / 2).max(2) * BLCKSZ;
    assert!(page + 2 * BLCKSZ <= end_page, "no room in the last segment");
    let inside = tmp.join("inside");
    copy_dir(&w.d.path, &inside);
    write_at_lsn(&inside, page, &[0u8; BLCKSZ as usize]);
    let d = DataDir {
        path: inside.clone(),
        ..w.d.clone()
    };
    let (recs, _) = scan_records(&d);
    let stop = recs.last().unwrap().next;
    assert!(
        stop <= page && stop >= seg_start,
        "stop {}",
        format_lsn(stop)
    );
    let s = start_or_exit(&inside, tmp.path(), &["--workers", "0"])
        .unwrap_or_else(|o| panic!("power-loss tail refused\n{}", o.describe()));
    let log = s.stderr();
    assert!(
        log.contains("WARNING")
            && log.contains(&format!("WAL ends at {}", format_lsn(stop)))
            && log.contains("power-loss tail"),
        "no WARNING naming the stop\n{log}"
    );
    let tail = rest_of_segment(&inside, after_end_of_recovery_checkpoint(&inside, stop));
    assert!(tail.iter().all(|b| *b == 0), "tail not zeroed on disk");
    s.stop_ok();
    let (after, _) = scan_records(&d);
    let next = after.iter().find(|r| r.lsn >= stop).map(|r| r.lsn);
    assert_eq!(
        next.map(format_lsn),
        Some(format_lsn(record_start(stop))),
        "recovery did not end at the stop"
    );
    let kept: Vec<u64> = w.acks.iter().copied().filter(|a| *a < stop).collect();
    check_acks(&kept, &tx_wal_check(&d));

    // Beyond: the segment before the last zeroed from a page on to its
    // end, so the only valid WAL after the stop starts in the last
    // segment, at the window's end.
    let beyond = tmp.join("beyond");
    copy_dir(&w.d.path, &beyond);
    let from = seg_start - 4 * BLCKSZ;
    write_at_lsn(&beyond, from, &vec![0u8; (seg_start - from) as usize]);
    let what = format!(
        "segment {} zeroed from {}",
        w.last_seg - 1,
        format_lsn(from)
    );
    assert_eq!(
        check_case(&what, &beyond, tmp.path(), &w),
        Outcome::Refused,
        "{what}"
    );
}
