//! Acknowledged commits: the `ack X/Y` lines of a run must each name a
//! COMMIT record of the WAL, also after a kill -9 and recovery, and of the
//! WAL a copy (a base backup, a receiver, a promoted standby) holds.

use super::{run_for, tx_wal_check, DataDir, TxWal};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// The newline-ended lines of a file another process is still appending
/// to (a line's last bytes may not be visible yet).
pub fn complete_lines(text: &str) -> &str {
    match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    }
}

/// The LSNs of the `ack X/Y` lines of a run's stdout. Only lines ended by
/// a newline count: a live stdout file read while a backend's one-line
/// `write` straddles a page boundary shows the line's first page before the
/// rest (the CI flake of stop 20: `bad ack line ""`), and a line cut short
/// by kill -9 was never an acknowledgement.
pub fn parse_acks(stdout: &str) -> Vec<u64> {
    complete_lines(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("ack "))
        .map(|s| walformat::parse_lsn(s.trim()).unwrap_or_else(|_| panic!("bad ack line {s:?}")))
        .collect()
}

/// Every ack names a COMMIT record; no LSN is acked twice. Returns the
/// number of acks checked.
pub fn check_acks(acks: &[u64], wal: &TxWal) -> usize {
    let commits = wal.commit_lsns();
    let mut seen = std::collections::HashSet::new();
    for a in acks {
        assert!(
            seen.insert(*a),
            "LSN {} acknowledged twice",
            walformat::format_lsn(*a)
        );
        assert!(
            commits.contains(a),
            "acknowledged commit at {} is not a COMMIT record in the WAL ({} acks, {} commits on disk)",
            walformat::format_lsn(*a),
            acks.len(),
            commits.len()
        );
    }
    acks.len()
}

/// Arguments of an acknowledged, durable run: `workers` backends of
/// `emit-tx:100 --ack` with fsync on, then `--set` for each of `sets`.
pub fn durable_ack_args<'a>(workers: &'a str, sets: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--workers",
        workers,
        "--workload",
        "emit-tx:100",
        "--ack",
        "--set",
        "fsync=on",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    args
}

/// After a kill -9 whose run printed `acks_before`: a short second run
/// with `args` (recovery, then 300 ms of load), then every ack of both runs
/// must be a COMMIT record of the WAL, which `tx_wal_check` reads with
/// walshm's reader and pg_waldump. Returns the acks checked and whether
/// pg_waldump took part.
pub fn recover_and_check_acks(
    d: &DataDir,
    logdir: &Path,
    args: &[&str],
    acks_before: &[u64],
) -> (usize, bool) {
    let o = run_for(&d.path, logdir, args, Duration::from_millis(300));
    let wal = tx_wal_check(d);
    let mut all = acks_before.to_vec();
    all.extend(parse_acks(&o.stdout));
    (check_acks(&all, &wal), wal.pg_checked)
}

/// The LSNs of the COMMIT records walformat's reader finds in the
/// timeline-1 segments (of `seg_size` bytes) in `dir`, from `from` to the
/// first record it cannot read.
pub fn reader_commits(dir: &Path, seg_size: u64, from: u64) -> HashSet<u64> {
    let geo = walformat::Geometry::new(seg_size).unwrap();
    let mut reader = walformat::WalReader::open(dir, geo, 1, None, from).unwrap();
    let mut commits = HashSet::new();
    while let Ok(Some(r)) = reader.next_record() {
        if r.is_commit() {
            commits.insert(r.lsn);
        }
    }
    commits
}

/// Every ack of `acks` is one of `commits`, the COMMIT records of `whose`
/// WAL ("the copy", "the receiver's WAL").
pub fn assert_acks_in(acks: &[u64], commits: &HashSet<u64>, whose: &str) {
    let missing: Vec<_> = acks.iter().filter(|a| !commits.contains(a)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged commits are not in {whose} (first {})",
        missing.len(),
        acks.len(),
        walformat::format_lsn(*missing[0])
    );
}
