//! WAL archiving: the archiver process with
//! `archive_mode = on` and `archive_command`.
//!
//! - a failing archive_command keeps every completed segment in pg_wal
//!   (each has its `archive_status/NAME.ready`) and is retried; once it
//!   succeeds the segments are archived in order, byte-identical, marked
//!   `.done`, and removed by a later checkpoint (their `.done` with them);
//! - after a crash restart nothing is archived twice except the one file
//!   whose command may have run when the crash hit (PostgreSQL retries that
//!   one too).
//!
//! Everything is judged from files (the archive, the command's call log,
//! pg_wal, archive_status), never from log wording.

use crate::common::*;
use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

/// The archive command's script: logs each call (`%f`) to CALLS, fails
/// while GATE exists, else copies `%p` into ARCH (through a temporary name,
/// as a careful archive_command does), after sleeping SLEEP seconds.
fn write_script(tmp: &TempDir, sleep: &str) -> String {
    let script = tmp.join("archive.sh");
    let (calls, gate, arch) = (tmp.join("calls"), tmp.join("gate"), tmp.join("arch"));
    fs::create_dir_all(&arch).unwrap();
    let text = format!(
        "#!/bin/sh\necho \"$2\" >> '{}'\nsleep {sleep}\n[ -e '{}' ] && exit 1\ncp \"$1\" '{}/'\"$2\".tmp && mv '{}/'\"$2\".tmp '{}/'\"$2\"\n",
        calls.display(),
        gate.display(),
        arch.display(),
        arch.display(),
        arch.display()
    );
    fs::write(&script, text).unwrap();
    format!("archive_command=sh {} %p %f", script.display())
}

/// Names of `dir`'s entries ending in `suffix`, suffix removed, sorted.
fn names_with(dir: &Path, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.strip_suffix(suffix).map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn ready(d: &Path) -> Vec<String> {
    names_with(&d.join("pg_wal/archive_status"), ".ready")
}

fn archived(tmp: &TempDir) -> Vec<String> {
    let mut v = names_with(&tmp.join("arch"), "");
    v.retain(|n| !n.ends_with(".tmp"));
    v
}

/// Calls of the archive command per file name.
fn calls(tmp: &TempDir) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for l in fs::read_to_string(tmp.join("calls"))
        .unwrap_or_default()
        .lines()
    {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

/// A new temporary directory named after `tag` with the archive script
/// (sleeping `sleep` seconds a call) and a data directory archiving
/// through it (1 MB segments, a checkpoint every second).
fn init_archiving(tag: &str, sleep: &str) -> (TempDir, DataDir) {
    let tmp = TempDir::new(tag);
    let command = write_script(&tmp, sleep);
    let d = init(
        &tmp.join("d"),
        &[
            "--wal-segment-size",
            "1",
            "--set",
            "archive_mode=on",
            "--set",
            &command,
            "--set",
            "checkpoint_timeout=1s",
            "--set",
            "max_wal_size=2MB",
        ],
    );
    (tmp, d)
}

/// A few MB of WAL per second: durable commits of 4 kB messages.
const WORKLOAD: &[&str] = &["--workers", "2", "--workload", "emit-tx:4096"];

#[test]
fn failing_archive_command_keeps_segments_and_retries_until_archived() {
    let (tmp, d) = init_archiving("archive-fail", "0");
    fs::write(tmp.join("gate"), b"").unwrap();
    let s = Server::start_ready(&d.path, tmp.path(), WORKLOAD);
    assert!(
        wait_until(TIMEOUT, || s
            .children()
            .iter()
            .any(|(_, c)| c == "archiver")),
        "no archiver child: {:?}",
        s.children()
    );
    // While the command fails: segments pile up, each kept and ready.
    assert!(
        wait_until(Duration::from_secs(20), || ready(&d.path).len() >= 4),
        "fewer than 4 ready segments: {:?}\n{}",
        ready(&d.path),
        s.stderr()
    );
    let first = "000000010000000000000001".to_string();
    assert!(
        wait_until(Duration::from_secs(10), || calls(&tmp)
            .get(&first)
            .is_some_and(|&n| n >= 3)),
        "the failing command was not retried: {:?}",
        calls(&tmp)
    );
    assert!(archived(&tmp).is_empty(), "archived while failing");
    let pending = ready(&d.path);
    assert_eq!(pending[0], first, "the first segment must wait first");
    let mut images = HashMap::new();
    for name in &pending {
        let p = d.path.join("pg_wal").join(name);
        images.insert(
            name.clone(),
            fs::read(&p)
                .unwrap_or_else(|e| panic!("{name} is ready but was removed from pg_wal: {e}")),
        );
    }
    // Only the first segment was tried: order is kept while failing.
    assert_eq!(
        calls(&tmp).len(),
        1,
        "a later segment was tried first: {:?}",
        calls(&tmp)
    );

    fs::remove_file(tmp.join("gate")).unwrap();
    let all_gone = || {
        pending.iter().all(|n| {
            !d.path.join("pg_wal").join(n).exists()
                && !d
                    .path
                    .join(format!("pg_wal/archive_status/{n}.done"))
                    .exists()
        })
    };
    assert!(
        wait_until(Duration::from_secs(20), || {
            let a = archived(&tmp);
            pending.iter().all(|n| a.contains(n)) && all_gone()
        }),
        "not archived and removed: archived {:?}, pending {pending:?}, ready now {:?}\n{}",
        archived(&tmp),
        ready(&d.path),
        s.stderr()
    );
    for (name, image) in &images {
        let copy = fs::read(tmp.join("arch").join(name)).unwrap();
        assert!(copy == *image, "archived {name} differs from the segment");
    }
    let o = s.stop_ok();
    // Fast shutdown: what was ready is archived before the archiver exits.
    assert!(
        ready(&d.path).is_empty(),
        "left unarchived at shutdown: {:?}",
        ready(&d.path)
    );
    // Archived in WAL order, each once after the gate opened.
    let c = calls(&tmp);
    for n in archived(&tmp) {
        assert!(c.contains_key(&n), "{n} archived without a call");
        if n != first {
            assert_eq!(c[&n], 1, "{n} archived more than once\n{}", o.stderr);
        }
    }
    assert_cleaned_up(&d.path);
}

#[test]
fn crash_restart_archives_again_at_most_the_file_in_flight() {
    // A slow command widens the window in which the crash hits it.
    let (tmp, d) = init_archiving("archive-crash", "0.3");
    // Less WAL than WORKLOAD: at 0.3 s a segment the archiver falls behind
    // a 4 kB workload by dozens of segments a second on tmpfs, and a fast
    // shutdown archives the whole backlog before it exits.
    let workload = &["--workers", "2", "--workload", "emit-tx:256"];
    let mut s = Server::start_ready(&d.path, tmp.path(), workload);
    assert!(
        wait_until(Duration::from_secs(20), || archived(&tmp).len() >= 3),
        "nothing archived: {:?}\n{}",
        calls(&tmp),
        s.stderr()
    );
    let backend = s.child_pid("backend").expect("a backend");
    kill(backend, libc::SIGKILL);
    s.wait_ready_n(2, TIMEOUT);
    let before = archived(&tmp).len();
    assert!(
        wait_until(Duration::from_secs(20), || archived(&tmp).len()
            >= before + 2),
        "archiving did not resume after the crash restart\n{}",
        s.stderr()
    );
    stop_after_draining(s, &d.path, Duration::from_millis(400));
    assert!(
        ready(&d.path).is_empty(),
        "left unarchived at shutdown: {:?}",
        ready(&d.path)
    );
    let c = calls(&tmp);
    let twice: Vec<_> = c.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        c.values().all(|&n| n <= 2) && twice.len() <= 1,
        "archived more than once beyond the one in flight at the crash: {twice:?}"
    );
    // Everything ever handed over is in the archive, once each.
    for n in c.keys() {
        assert!(
            tmp.join("arch").join(n).is_file(),
            "{n} called but not archived"
        );
    }
    assert_cleaned_up(&d.path);
}

/// Fast shutdown: SIGTERM, then wait while the archiver works off the
/// backlog (`per_file` each) before the postmaster exits; exit 0.
fn stop_after_draining(s: Server, d: &Path, per_file: Duration) {
    let backlog = ready(d).len() as u32;
    let o = s.stop_timeout(TIMEOUT + per_file * backlog);
    assert!(
        o.status.success(),
        "postmaster did not exit 0 after SIGTERM ({backlog} files ready)\n{}",
        o.describe()
    );
    assert_no_panic("postmaster start", &o);
}

#[test]
fn fast_shutdown_archives_what_is_ready_then_exits() {
    let (tmp, d) = init_archiving("archive-shutdown", "0");
    fs::write(tmp.join("gate"), b"").unwrap();
    let s = Server::start_ready(&d.path, tmp.path(), WORKLOAD);
    // Five failures: the archiver now waits seconds before its next try.
    let first = "000000010000000000000001".to_string();
    assert!(
        wait_until(Duration::from_secs(20), || calls(&tmp)
            .get(&first)
            .is_some_and(|&n| n >= 5)
            && ready(&d.path).len() >= 2),
        "no backlog: {:?} {:?}\n{}",
        calls(&tmp),
        ready(&d.path),
        s.stderr()
    );
    fs::remove_file(tmp.join("gate")).unwrap();
    s.stop_ok();
    assert!(
        ready(&d.path).is_empty(),
        "left unarchived at shutdown: {:?}",
        ready(&d.path)
    );
    assert!(archived(&tmp).contains(&first));
    assert_cleaned_up(&d.path);
}

/// A `.ready` file whose name is not a WAL file name never reaches the
/// shell: a name like `x;touch PWNED;#` would otherwise run its command.
#[test]
fn only_wal_file_names_reach_archive_command() {
    let (tmp, d) = init_archiving("archive-names", "0");
    let evil = "x;touch PWNED;#";
    let status = d.path.join("pg_wal/archive_status");
    fs::create_dir_all(&status).unwrap();
    fs::write(d.path.join("pg_wal").join(evil), b"").unwrap();
    fs::write(status.join(format!("{evil}.ready")), b"").unwrap();
    let s = Server::start_ready(&d.path, tmp.path(), WORKLOAD);
    let first = "000000010000000000000001".to_string();
    assert!(
        wait_until(Duration::from_secs(20), || archived(&tmp).contains(&first)),
        "nothing archived: {:?}\n{}",
        calls(&tmp),
        s.stderr()
    );
    // The archiver takes the ready files in name order: the bad name comes
    // after every segment of the pass that archived the first one.
    std::thread::sleep(Duration::from_millis(1500));
    s.stop_ok();
    assert!(
        !d.path.join("PWNED").exists() && !tmp.path().join("PWNED").exists(),
        "the file name reached the shell"
    );
    assert!(
        !calls(&tmp).keys().any(|k| k.contains("touch")),
        "archive_command ran for the bad name: {:?}",
        calls(&tmp)
    );
}
