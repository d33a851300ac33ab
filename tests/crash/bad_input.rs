//! Bad input to `postmaster`: every error case exits non-zero with a clear
//! message on stderr and no panic or backtrace, and touches nothing (no data
//! directory made, no pid file or shared memory segment left). `--help`
//! exits 0 and names every command.

use crate::common::*;
use std::fs;

/// Runs `postmaster ARGS`, asserts a clean failure whose stderr contains
/// every string of `needles`; returns the output.
fn fails(args: &[&str], needles: &[&str]) -> Out {
    let o = postmaster(args);
    assert!(
        !o.status.success(),
        "postmaster {args:?} succeeded\n{}",
        o.describe()
    );
    assert_no_panic(&format!("postmaster {args:?}"), &o);
    assert!(
        o.stderr.contains("error"),
        "postmaster {args:?}: no error message\n{}",
        o.describe()
    );
    for n in needles {
        assert!(
            o.stderr.contains(n),
            "postmaster {args:?}: stderr lacks {n:?}\n{}",
            o.describe()
        );
    }
    o
}

/// An initialized data directory in a new temporary directory named
/// after `tag`.
fn fresh_data(tag: &str) -> (TempDir, DataDir) {
    let tmp = TempDir::new(tag);
    let d = init(&tmp.join("data"), &[]);
    (tmp, d)
}

/// A start that failed left neither a pid file nor a shared segment.
fn assert_nothing_left(d: &DataDir) {
    assert!(
        !d.path.join("postmaster.pid").exists(),
        "pid file left behind"
    );
    assert!(segments_for(&d.path).is_empty(), "segment left behind");
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn help_exits_0_and_names_every_command() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["help"],
        &[],
        &["start", "--help"],
    ] {
        let o = postmaster(args);
        assert!(o.status.success(), "postmaster {args:?}\n{}", o.describe());
        assert_no_panic("help", &o);
        for word in ["init", "start", "waldump", "--workload", "wal_insert_locks"] {
            assert!(o.stdout.contains(word), "help lacks {word:?}\n{}", o.stdout);
        }
    }
}

#[test]
fn init_refuses_non_empty_dir() {
    let tmp = TempDir::new("bad-init");
    let dir = tmp.join("data");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("precious"), "keep me").unwrap();
    fails(&["init", "-D", s(&dir)], &["not empty"]);
    let names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, vec!["precious"], "init touched a non-empty dir");
    assert_eq!(fs::read_to_string(dir.join("precious")).unwrap(), "keep me");

    // A regular file in the way.
    let file = tmp.join("file");
    fs::write(&file, "x").unwrap();
    fails(&["init", "-D", s(&file)], &["not a directory"]);
}

#[test]
fn init_refuses_an_existing_data_dir() {
    let tmp = TempDir::new("bad-reinit");
    let d = init(&tmp.join("data"), &[]);
    fails(&["init", "-D", s(&d.path)], &["not empty"]);
}

#[test]
fn init_bad_segment_size() {
    let tmp = TempDir::new("bad-seg");
    for v in ["3", "2048", "0", "abc", "-1", "1.5"] {
        let dir = tmp.join(&format!("d{v}"));
        fails(
            &["init", "-D", s(&dir), "--wal-segment-size", v],
            &["--wal-segment-size", "power of two"],
        );
        assert!(
            !dir.exists(),
            "init created {} despite the error",
            dir.display()
        );
    }
    fails(
        &["init", "-D", s(&tmp.join("x")), "--wal-segment-size"],
        &["a value is required"],
    );
}

#[test]
fn init_bad_setting() {
    let tmp = TempDir::new("bad-initset");
    let dir = tmp.join("data");
    fails(
        &["init", "-D", s(&dir), "--set", "no_such_thing=1"],
        &["no_such_thing", "fsync"],
    );
    fails(
        &["init", "-D", s(&dir), "--set", "fsync=maybe"],
        &["fsync", "on|off"],
    );
    fails(&["init", "-D", s(&dir), "--set", "fsync"], &["NAME=VALUE"]);
    assert!(
        !dir.exists(),
        "init created the directory despite the error"
    );
}

#[test]
fn missing_data_dir_option() {
    fails(&["init"], &["-D"]);
    fails(&["start"], &["-D"]);
    fails(&["waldump"], &["-D"]);
}

#[test]
fn start_on_a_dir_that_is_not_a_data_dir() {
    let tmp = TempDir::new("bad-start");
    let empty = tmp.join("empty");
    fs::create_dir(&empty).unwrap();
    fails(
        &["start", "-D", s(&empty)],
        &["not a walshm data directory", "init"],
    );
    assert!(!empty.join("postmaster.pid").exists());
    assert!(segments_for(&empty).is_empty());
    fails(
        &["start", "-D", s(&tmp.join("nonexistent"))],
        &["does not exist"],
    );
    assert!(!tmp.join("nonexistent").exists());
    fails(
        &["waldump", "-D", s(&empty)],
        &["not a walshm data directory"],
    );
}

#[test]
fn start_unknown_setting_and_bad_values() {
    let (_tmp, d) = fresh_data("bad-set");
    let dir = s(&d.path);
    let o = fails(
        &["start", "-D", dir, "--set", "bogus_setting=1"],
        &["bogus_setting"],
    );
    for name in [
        "wal_buffers",
        "wal_insert_locks",
        "inserting_at",
        "insert_lock_layout",
        "lwlock_queue",
        "wal_insertion",
        "wal_preinit",
        "wal_reservation",
    ] {
        assert!(
            o.stderr.contains(name),
            "valid names lack {name}\n{}",
            o.stderr
        );
    }
    let cases: &[(&str, &[&str])] = &[
        ("fsync=maybe", &["on|off"]),
        ("wal_insert_locks=0", &["1..=128"]),
        ("wal_insert_locks=129", &["1..=128"]),
        ("wal_insert_locks=many", &["1..=128"]),
        ("wal_buffers=3", &["wal_buffers"]),
        ("wal_buffers=12parsecs", &["wal_buffers"]),
        ("wal_writer_delay=0", &["wal_writer_delay"]),
        ("inserting_at=sometimes", &["atomic|waitlist"]),
        ("insert_lock_layout=loose", &["padded|packed"]),
        ("lwlock_queue=fifo", &["modern|legacy"]),
        ("wal_insertion=double", &["parallel|single"]),
        ("wal_preinit=perhaps", &["on|off"]),
        ("wal_reservation=optimistic", &["spinlock|atomic"]),
    ];
    for (set, needles) in cases {
        let name = set.split('=').next().unwrap();
        let mut n = needles.to_vec();
        n.push(name);
        fails(
            &[
                "start",
                "-D",
                dir,
                "--set",
                set,
                "--workers",
                "1",
                "--workload",
                "emit:0",
            ],
            &n,
        );
    }
    assert_nothing_left(&d);
}

#[test]
fn start_bad_setting_in_config_file() {
    let tmp = TempDir::new("bad-conf");
    let d = init(&tmp.join("data"), &[]);
    let conf = d.path.join("walshm.conf");
    let mut text = fs::read_to_string(&conf).unwrap();
    text.push_str("wal_insert_locks = 500\n");
    fs::write(&conf, text).unwrap();
    fails(
        &["start", "-D", s(&d.path)],
        &["walshm.conf", "wal_insert_locks", "1..=128"],
    );
    assert_nothing_left(&d);
}

#[test]
fn start_bad_workers_and_workloads() {
    let (_tmp, d) = fresh_data("bad-work");
    let dir = s(&d.path);
    fails(&["start", "-D", dir, "--workers", "4"], &["--workload"]);
    fails(
        &["start", "-D", dir, "--workload", "emit:10"],
        &["--workers"],
    );
    fails(
        &[
            "start",
            "-D",
            dir,
            "--workers",
            "0",
            "--workload",
            "emit:10",
        ],
        &["--workers"],
    );
    for w in ["-1", "4097", "lots", ""] {
        fails(
            &["start", "-D", dir, "--workers", w, "--workload", "emit:10"],
            &["--workers"],
        );
    }
    fails(&["start", "-D", dir, "--workers"], &["a value is required"]);
    for wl in [
        "nosuch",
        "emit",
        "emit:",
        "emit:abc",
        "emit:-5",
        "emit:1.5",
        "emit:99999999999999999999",
        "emit:67108865",
        "lwlock:3",
    ] {
        fails(
            &["start", "-D", dir, "--workers", "1", "--workload", wl],
            &["invalid workload", "emit:SIZE", "lwlock"],
        );
    }
    assert_nothing_left(&d);
}

#[test]
fn unknown_options_and_commands() {
    let (tmp, d) = fresh_data("bad-opt");
    let dir = s(&d.path);
    fails(
        &["start", "-D", dir, "--bogus"],
        &["unexpected argument", "--bogus"],
    );
    fails(
        &["init", "-D", s(&tmp.join("n")), "--workers", "3"],
        &["unexpected argument"],
    );
    fails(
        &["waldump", "-D", dir, "--set", "fsync=on"],
        &["unexpected argument"],
    );
    fails(&["start", "-D", dir, "--stats"], &["unexpected argument"]);
    fails(
        &["frobnicate", "-D", dir],
        &["unrecognized subcommand", "frobnicate"],
    );
    fails(&["start", "-D", dir, "extra"], &["extra"]);
}

#[test]
fn waldump_bad_start() {
    let (_tmp, d) = fresh_data("bad-dump");
    let dir = s(&d.path);
    for lsn in ["bogus", "0/", "/10", "0/XYZ", "1/2/3"] {
        fails(
            &["waldump", "-D", dir, "--start", lsn],
            &["invalid LSN", "X/XXXXXXXX"],
        );
    }
    fails(&["waldump", "-D", dir, "--start"], &["a value is required"]);
    // A well-formed LSN in a segment that does not exist.
    let o = fails(&["waldump", "-D", dir, "--start", "5/00000000"], &[]);
    assert!(!o.stderr.trim().is_empty());
}

#[test]
fn waldump_of_fresh_dir_reads_the_checkpoint() {
    let tmp = TempDir::new("dump-fresh");
    let d = init(&tmp.join("data"), &[]);
    let o = postmaster(&["waldump", "-D", s(&d.path), "--stats"]);
    assert!(o.status.success(), "{}", o.describe());
    assert!(o.stdout.contains("CHECKPOINT_SHUTDOWN"), "{}", o.stdout);
    let end = parse_own_end(&o.stdout).expect("end line");
    assert_eq!(end.reason, "clean end of WAL");
    assert_eq!(end.records, 1);
    assert_eq!(walformat::format_lsn(end.end_lsn), "0/010000A0");
}

/// Reading `postmaster waldump`'s output only partly (as `| head` does)
/// must not make it panic.
#[test]
fn waldump_into_a_closed_pipe_does_not_panic() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};
    let tmp = TempDir::new("dump-pipe");
    let d = init(&tmp.join("data"), &["--wal-segment-size", "1"]);
    run_for(
        &d.path,
        tmp.path(),
        &unsynced_args("2", "emit:100"),
        std::time::Duration::from_millis(200),
    );
    let mut child = Command::new(postmaster_bin())
        .args(["waldump", "-D", s(&d.path)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    drop(out); // like `head -1`
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    let o = Out {
        status,
        stdout: first,
        stderr: err,
    };
    assert_no_panic("waldump | head -1", &o);
}
