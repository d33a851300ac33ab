//! PostgreSQL 15's unmodified `pg_basebackup` against walshm (BASE_BACKUP,
//! `replication::walsender::basebackup`): a plain `-X stream` copy taken
//! while backends commit and acknowledge, which `pg_verifybackup` accepts
//! and which starts (recovering from its `backup_label`) holding every
//! commit acknowledged from the backup's start segment to its end
//! position; and a tar `-X fetch` copy with the WAL inside the archive.
//! Skipped loudly without PostgreSQL 15's binaries (unless
//! WALSHM_REQUIRE_PG=1).

use crate::common::wire::{pg_client, pg_clients, start_on_free_port};
use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SEG: u64 = 1 << 20;
/// How long one pg_basebackup may take before the test gives up.
const BACKUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `program args` in its own process group with a time limit (the
/// group is killed when it is exceeded); returns (success, stdout, stderr).
fn run_bounded(program: &Path, args: &[&str]) -> (bool, String, String) {
    use std::os::unix::process::CommandExt;
    let dir = tempdir_for_output();
    let out_path = dir.join("out");
    let err_path = dir.join("err");
    let mut child = Command::new(program)
        .args(args)
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > BACKUP_TIMEOUT {
            // SAFETY: kill(2) on the child's own process group.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    match status {
        Some(s) => (s.success(), out, err),
        None => panic!(
            "{} {args:?} did not finish in {BACKUP_TIMEOUT:?}\n{err}",
            program.display()
        ),
    }
}

fn tempdir_for_output() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "walshm-bb-out-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    let d = std::path::PathBuf::from(d.to_string_lossy().replace(
        |c: char| !c.is_ascii_alphanumeric() && c != '/' && c != '-',
        "_",
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// pg_basebackup's arguments: from the server at `host`:`port` into
/// `dir`, then `opts`.
fn backup_args<'a>(host: &'a str, port: &'a str, dir: &'a str, opts: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["-h", host, "-p", port, "-D", dir];
    args.extend_from_slice(opts);
    args
}

/// The LSN after `prefix` in pg_basebackup's verbose output.
fn lsn_after(stderr: &str, prefix: &str) -> u64 {
    let s = stderr
        .split(prefix)
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {prefix:?} in\n{stderr}"));
    walformat::parse_lsn(s).unwrap()
}

#[test]
fn pg_basebackup_copies_verify_and_start_with_every_acknowledged_commit() {
    let Some([basebackup, verify]) = pg_clients(["pg_basebackup", "pg_verifybackup"]) else {
        return;
    };
    let t = TempDir::new("basebackup");
    let d = init(&t.join("data"), &["--wal-segment-size", "1"]);
    let args = ["--workers", "2", "--workload", "emit-tx:64", "--ack"];
    let (srv, port) = start_on_free_port(&d, t.path(), &[], &args, &[]);
    assert!(
        wait_until(Duration::from_secs(15), || parse_acks(&srv.stdout()).len()
            >= 200),
        "fewer than 200 commits acknowledged"
    );
    let host = d.path.to_str().unwrap().to_string();
    let port_s = port.to_string();
    let copy = t.join("copy");
    let copy_s = copy.to_str().unwrap().to_string();
    let stream = [
        "-X",
        "stream",
        "-F",
        "plain",
        "--checkpoint=fast",
        "-P",
        "-v",
    ];
    let (ok, _, err) = run_bounded(&basebackup, &backup_args(&host, &port_s, &copy_s, &stream));
    let acks = parse_acks(&srv.stdout());
    if !ok {
        let o = kill_group(srv);
        panic!(
            "pg_basebackup -X stream failed\n{err}\nserver:\n{}",
            o.stderr
        );
    }
    let start = lsn_after(&err, "write-ahead log start point: ");
    let end = lsn_after(&err, "write-ahead log end point: ");
    assert!(start < end, "start {start:X} end {end:X}\n{err}");
    assert!(
        !err.contains("error"),
        "pg_basebackup reported an error\n{err}"
    );
    assert!(copy.join("backup_label").is_file() && copy.join("backup_manifest").is_file());
    assert!(!copy.join("postmaster.pid").exists());

    // A tar copy with the WAL fetched into the archive.
    let tar = t.join("tar");
    let tar_s = tar.to_str().unwrap().to_string();
    let fetch = ["-X", "fetch", "-F", "tar", "--checkpoint=fast"];
    let (ok, _, terr) = run_bounded(&basebackup, &backup_args(&host, &port_s, &tar_s, &fetch));
    // Option errors as PostgreSQL's, and the session goes on.
    if let Some(psql) = pg_client("psql") {
        let conninfo = format!("host={host} port={port} replication=true");
        let (_, out, perr) = run_bounded(
            &psql,
            &[
                "-X",
                &conninfo,
                "-c",
                "BASE_BACKUP (BOGUS)",
                "-c",
                "BASE_BACKUP (WAL, WAL)",
                "-c",
                "IDENTIFY_SYSTEM",
            ],
        );
        assert!(
            perr.contains("unrecognized base backup option: \"bogus\"")
                && perr.contains("duplicate option \"wal\"")
                && out.contains("systemid"),
            "{out}\n{perr}"
        );
    }
    let o = kill_group(srv);
    assert!(
        ok,
        "pg_basebackup -F tar -X fetch failed\n{terr}\nserver:\n{}",
        o.stderr
    );
    let listing = Command::new("tar")
        .arg("-tf")
        .arg(tar.join("base.tar"))
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout).to_string();
    for member in ["backup_label", "global/pg_control", "pg_wal/"] {
        assert!(
            listing.lines().any(|l| l == member),
            "{member} not in base.tar:\n{listing}"
        );
    }
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("pg_wal/0000000100000000")),
        "no WAL segment in base.tar:\n{listing}"
    );
    assert!(tar.join("backup_manifest").is_file());
    // Extracted beside its manifest, the tar copy verifies too (its WAL
    // fetched into the archive read by pg_waldump).
    let tarx = t.join("tarx");
    std::fs::create_dir_all(&tarx).unwrap();
    std::fs::set_permissions(&tarx, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let x = Command::new("tar")
        .arg("-xf")
        .arg(tar.join("base.tar"))
        .arg("-C")
        .arg(&tarx)
        .output()
        .unwrap();
    assert!(
        x.status.success(),
        "tar -x: {}",
        String::from_utf8_lossy(&x.stderr)
    );
    std::fs::copy(tar.join("backup_manifest"), tarx.join("backup_manifest")).unwrap();
    let (ok, out, verr) = run_bounded(&verify, &[tarx.to_str().unwrap()]);
    assert!(ok, "pg_verifybackup of the tar copy failed\n{out}\n{verr}");

    // pg_verifybackup: the manifest's files, and the WAL with pg_waldump.
    let (ok, out, verr) = run_bounded(&verify, &[&copy_s]);
    assert!(ok, "pg_verifybackup failed\n{out}\n{verr}");
    assert!(out.contains("backup successfully verified"), "{out}");

    // The copy starts from its backup label, on another port.
    let copy_dir = DataDir {
        path: copy.clone(),
        seg_size: SEG,
        first_lsn: start,
    };
    let logdir = t.join("copylog");
    std::fs::create_dir_all(&logdir).unwrap();
    let (copy_srv, _) = start_on_free_port(&copy_dir, &logdir, &[], &[], &[]);
    let out = copy_srv.stop_ok();
    assert!(
        out.stderr.contains("starting backup recovery"),
        "the copy did not recover from its backup label\n{}",
        out.stderr
    );
    assert!(copy.join("backup_label.old").is_file() && !copy.join("backup_label").exists());

    // Every commit acknowledged from the start segment to the end position
    // is in the copy's WAL.
    let from = start - start % SEG;
    let covered: Vec<u64> = acks
        .iter()
        .copied()
        .filter(|&a| a >= from && a < end)
        .collect();
    assert!(
        !covered.is_empty(),
        "no acknowledged commit inside the backup's WAL range"
    );
    let first = *covered.iter().min().unwrap();
    let commits = reader_commits(&copy.join("pg_wal"), SEG, first);
    assert_acks_in(&covered, &commits, "the copy");
    eprintln!(
        "pg_basebackup: {} acknowledged commits in [{}, {}) found in the started copy",
        covered.len(),
        walformat::format_lsn(from),
        walformat::format_lsn(end)
    );
}
