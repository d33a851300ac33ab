//! PostgreSQL 15's unmodified `pg_ctl` and `pg_controldata` against
//! walshm: `pg_ctl -p postmaster start -w`, `status`, `reload`, `restart`,
//! `stop -m smart|fast|immediate`; `pg_controldata`'s fields against what
//! the server says (`pg_control_checkpoint()`, `pg_control_system()`,
//! `postmaster status --json`); a data directory whose control file is in
//! walshm's previous format starts and is converted.
//!
//! The tools are skipped loudly when missing (a failure with
//! WALSHM_REQUIRE_PG=1). `pg_ctl` refuses to run as root: as root, every
//! command of a test runs as the `postgres` user (`setpriv`), which owns
//! the data directory. Every server is killed with its process group if a
//! test fails (`Cluster`'s drop), and every command has a timeout.

use crate::common::wire::{self, pg_client};
use crate::common::*;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tools of PostgreSQL 15 these tests need, or None (skipped loudly).
struct Tools {
    pg_ctl: PathBuf,
    pg_controldata: PathBuf,
    psql: PathBuf,
    /// The server's user (`postgres` when running as root).
    user: ServerUser,
}

fn tools() -> Option<Tools> {
    let pg_ctl = pg_client("pg_ctl")?;
    let pg_controldata = pg_client("pg_controldata")?;
    let psql = pg_client("psql")?;
    Some(Tools {
        pg_ctl,
        pg_controldata,
        psql,
        user: ServerUser::find("pg_ctl")?,
    })
}

impl Tools {
    /// `program ARGS...` as the server's user.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        self.user.command(program, args)
    }

    fn run(&self, program: &Path, args: &[&str]) -> Out {
        self.user.run(program, args)
    }

    /// Lets the server's user own `dir` (as root).
    fn give(&self, dir: &Path) {
        self.user.give(dir)
    }
}

/// A data directory run by pg_ctl; its server (found by the pid file) is
/// killed with its process group on drop if still running.
struct Cluster<'t> {
    tools: &'t Tools,
    dir: PathBuf,
    log: PathBuf,
    port: u16,
}

impl<'t> Cluster<'t> {
    fn init(tools: &'t Tools, tmp: &TempDir, init_args: &[&str]) -> Cluster<'t> {
        tools.give(tmp.path());
        let dir = tmp.join("data");
        let mut args = vec!["init", "-D", dir.to_str().unwrap()];
        args.extend_from_slice(init_args);
        let o = tools.run(Path::new(postmaster_bin()), &args);
        assert!(o.status.success(), "init: {}", o.describe());
        assert_eq!(
            std::fs::read_to_string(dir.join("PG_VERSION")).unwrap(),
            "15\n"
        );
        Cluster {
            tools,
            log: tmp.join("server.log"),
            dir,
            port: wire::free_port(),
        }
    }

    fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// `pg_ctl -D DIR -l LOG ARGS...`: with `-l`, a server that pg_ctl
    /// starts (start, restart) writes to the log, never to pg_ctl's
    /// output pipes (which it would keep open).
    fn pg_ctl(&self, args: &[&str]) -> Out {
        let mut all = vec!["-D", self.dir(), "-l", self.log.to_str().unwrap()];
        all.extend_from_slice(args);
        self.tools.run(&self.tools.pg_ctl, &all)
    }

    /// `pg_ctl start -w` with the postgres command line's options; the
    /// time it took.
    fn start(&self) -> Duration {
        let opts = format!("-p {} -c wal_writer_delay=10ms", self.port);
        let t = Instant::now();
        let o = self.pg_ctl(&[
            "-p",
            postmaster_bin(),
            "-o",
            &opts,
            "-t",
            "30",
            "start",
            "-w",
        ]);
        let took = t.elapsed();
        assert!(o.status.success(), "{}\n{}", o.describe(), self.log_text());
        assert!(o.stdout.contains("server started"), "{}", o.describe());
        took
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The pid file's lines.
    fn pid_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("postmaster.pid"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn pid(&self) -> i32 {
        live_postmaster(&self.dir).unwrap_or_else(|| panic!("no server\n{}", self.log_text()))
    }

    /// `psql -At -c SQL` on the Unix socket.
    fn psql(&self, sql: &str) -> Out {
        let port = self.port.to_string();
        self.tools.run(
            &self.tools.psql,
            &["-X", "-At", "-h", self.dir(), "-p", &port, "-c", sql],
        )
    }

    fn sql(&self, sql: &str) -> String {
        let o = self.psql(sql);
        assert!(o.status.success(), "{sql}: {}", o.describe());
        o.stdout.trim().to_string()
    }

    /// `pg_controldata DIR` as name -> value.
    fn controldata(&self) -> HashMap<String, String> {
        let o = self
            .tools
            .run(&self.tools.pg_controldata, &["-D", self.dir()]);
        assert!(o.status.success(), "pg_controldata: {}", o.describe());
        o.stdout
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    }

    /// Waits (bounded) until no server runs on the directory.
    fn wait_stopped(&self) {
        assert!(
            wait_until(TIMEOUT, || live_postmaster(&self.dir).is_none()
                && !self.dir.join("postmaster.pid").exists()),
            "server did not stop\n{}",
            self.log_text()
        );
    }
}

impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        if let Some(pid) = live_postmaster(&self.dir) {
            // pg_ctl started it in a session of its own: its group.
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            wait_until(TIMEOUT, || !alive(pid));
        }
    }
}

#[test]
fn pg_ctl_starts_reports_reloads_and_stops_smart() {
    let Some(tools) = tools() else { return };
    let tmp = TempDir::new("pgctl");
    let c = Cluster::init(&tools, &tmp, &[]);
    let took = c.start();
    eprintln!("pg_ctl start -w: ready after {:.3} s", took.as_secs_f64());

    // postmaster.pid in PostgreSQL's layout.
    let pid = c.pid();
    let lines = c.pid_lines();
    assert!(lines.len() >= 8, "{lines:?}");
    assert_eq!(lines[0], pid.to_string());
    assert_eq!(Path::new(&lines[1]), c.dir.canonicalize().unwrap());
    assert_eq!(lines[3], c.port.to_string());
    assert_eq!(lines[7], "ready   ");
    let opts = std::fs::read_to_string(c.dir.join("postmaster.opts")).unwrap();
    assert!(opts.contains("\"-p\""), "{opts}");

    let o = c.pg_ctl(&["status"]);
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    assert!(
        o.stdout
            .contains(&format!("server is running (PID: {pid})")),
        "{}",
        o.describe()
    );
    let o = tools.run(Path::new(postmaster_bin()), &["status", "-D", c.dir()]);
    assert_eq!(o.code(), Some(0), "postmaster status: {}", o.describe());

    // reload: a setting whose context allows it takes the file's new value.
    assert_eq!(c.sql("SHOW synchronous_commit"), "on");
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(c.dir.join("walshm.conf"))
        .unwrap();
    writeln!(conf, "synchronous_commit = off\nwal_buffers = 64").unwrap();
    drop(conf);
    let o = c.pg_ctl(&["reload"]);
    assert!(o.status.success(), "{}", o.describe());
    assert!(
        wait_until(TIMEOUT, || c.sql("SHOW synchronous_commit") == "off"),
        "reload did not change synchronous_commit\n{}",
        c.log_text()
    );
    assert_eq!(
        c.sql("SHOW wal_buffers"),
        "2048",
        "changed without a restart"
    );
    let log = c.log_text();
    assert!(
        log.contains("parameter \"wal_buffers\" cannot be changed without restarting the server"),
        "{log}"
    );

    // stop -m smart: a session keeps the server up; new ones are refused.
    let port = c.port.to_string();
    let mut session = tools
        .command(&tools.psql, &["-X", "-At", "-h", c.dir(), "-p", &port])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = session.stdin.take().unwrap();
    writeln!(stdin, "SELECT 1;").unwrap();
    assert!(
        wait_until(TIMEOUT, || {
            c.sql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
                .parse::<u32>()
                .is_ok_and(|n| n >= 2)
        }),
        "the session did not connect"
    );
    let o = c.pg_ctl(&["stop", "-m", "smart", "-W"]);
    assert!(o.status.success(), "{}", o.describe());
    assert!(
        wait_until(TIMEOUT, || c.pid_lines().get(7).map(String::as_str)
            == Some("stopping")),
        "status line: {:?}",
        c.pid_lines()
    );
    let o = c.psql("SELECT 1");
    assert!(
        o.stderr.contains("the database system is shutting down"),
        "{}",
        o.describe()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(pid), "smart shutdown did not wait for the session");
    drop(stdin);
    let _ = session.wait();
    c.wait_stopped();
    assert!(c.log_text().contains("received smart shutdown request"));
    let o = c.pg_ctl(&["status"]);
    assert_eq!(o.code(), Some(3), "{}", o.describe());
    assert_eq!(c.controldata()["Database cluster state"], "shut down");
}

#[test]
fn pg_ctl_restarts_and_stops_fast_and_immediate() {
    let Some(tools) = tools() else { return };
    let tmp = TempDir::new("pgctl-modes");
    let c = Cluster::init(&tools, &tmp, &[]);
    c.start();
    let first = c.pid();
    c.sql("SELECT pg_logical_emit_message(true, 'pg_tools', 'restart')");

    let o = c.pg_ctl(&["restart", "-m", "fast", "-w", "-t", "30"]);
    assert!(o.status.success(), "{}\n{}", o.describe(), c.log_text());
    let second = c.pid();
    assert_ne!(first, second, "restart kept the old postmaster");
    assert_eq!(c.pid_lines()[7], "ready   ");
    // The restarted server runs with the first one's options.
    assert_eq!(c.sql("SHOW port"), c.port.to_string());

    let o = c.pg_ctl(&["stop", "-m", "fast"]);
    assert!(o.status.success(), "{}", o.describe());
    c.wait_stopped();
    let cd = c.controldata();
    assert_eq!(cd["Database cluster state"], "shut down");
    assert_eq!(
        cd["Latest checkpoint location"], cd["Latest checkpoint's REDO location"],
        "a shutdown checkpoint is its own redo point"
    );

    c.start();
    let o = c.pg_ctl(&["stop", "-m", "immediate"]);
    assert!(o.status.success(), "{}", o.describe());
    c.wait_stopped();
    assert_eq!(c.controldata()["Database cluster state"], "in production");
    // The next start recovers.
    c.start();
    assert!(c.log_text().contains("automatic recovery in progress"));
    assert_eq!(c.sql("SELECT 1"), "1");
    let o = c.pg_ctl(&["stop"]);
    assert!(o.status.success(), "{}", o.describe());
    c.wait_stopped();
    assert_eq!(c.controldata()["Database cluster state"], "shut down");
}

/// "0/1000028" (pg_controldata) and "0/01000028" (walshm) as numbers.
fn lsn(s: &str) -> u64 {
    walformat::parse_lsn(s).unwrap_or_else(|_| panic!("not an LSN: {s:?}"))
}

#[test]
fn pg_controldata_reads_what_walshm_knows() {
    let Some(tools) = tools() else { return };
    let tmp = TempDir::new("pgcontrol");
    let c = Cluster::init(&tools, &tmp, &["--wal-segment-size", "32"]);
    c.start();
    c.sql("SELECT txid_current()");
    c.sql("CHECKPOINT");
    let row = c.sql(
        "SELECT checkpoint_lsn, redo_lsn, redo_wal_file, timeline_id, next_xid, next_oid \
         FROM pg_control_checkpoint()",
    );
    let f: Vec<&str> = row.split('|').collect();
    let system = c.sql(
        "SELECT pg_control_version, catalog_version_no, system_identifier FROM pg_control_system()",
    );
    let s: Vec<&str> = system.split('|').collect();
    let cd = c.controldata();
    assert_eq!(cd["Database cluster state"], "in production");
    assert_eq!(lsn(&cd["Latest checkpoint location"]), lsn(f[0]));
    assert_eq!(lsn(&cd["Latest checkpoint's REDO location"]), lsn(f[1]));
    assert_eq!(cd["Latest checkpoint's REDO WAL file"], f[2]);
    assert_eq!(cd["Latest checkpoint's TimeLineID"], f[3]);
    assert_eq!(cd["Latest checkpoint's NextXID"], f[4]);
    assert_eq!(cd["Latest checkpoint's NextOID"], f[5]);
    assert_eq!(cd["pg_control version number"], s[0]);
    assert_eq!(cd["Catalog version number"], s[1]);
    assert_eq!(cd["Database system identifier"], s[2]);
    assert_eq!(cd["Bytes per WAL segment"], (32u64 << 20).to_string());
    assert_eq!(cd["WAL block size"], "8192");
    // The XID counter moved past the one handed out.
    let next: u64 = f[4].split(':').nth(1).unwrap().parse().unwrap();
    assert!(next > 3, "next XID {next}");
    // The checkpoint is no later than what the server has flushed.
    let o = tools.run(
        Path::new(postmaster_bin()),
        &["status", "-D", c.dir(), "--json"],
    );
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    let st: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let flush = lsn(st["flush_lsn"].as_str().unwrap());
    assert!(lsn(f[0]) < flush, "checkpoint {} flush {flush:X}", f[0]);

    let o = c.pg_ctl(&["stop", "-m", "fast"]);
    assert!(o.status.success(), "{}", o.describe());
    c.wait_stopped();
    // After the shutdown checkpoint: walshm's own reader finds it where
    // pg_controldata says.
    let cd = c.controldata();
    assert_eq!(cd["Database cluster state"], "shut down");
    let control = backend::control::ControlFile::read(&c.dir).unwrap();
    assert_eq!(lsn(&cd["Latest checkpoint location"]), control.checkpoint);
    assert_eq!(
        cd["Database system identifier"],
        control.system_identifier.to_string()
    );
}

/// walshm's previous control file format, as the previous version wrote it.
fn legacy_control(c: &backend::control::ControlFile) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    let mut o = 0;
    let mut put = |bytes: &[u8]| {
        b[o..o + bytes.len()].copy_from_slice(bytes);
        o += bytes.len();
    };
    put(b"WALSHMCF");
    put(&1u32.to_le_bytes());
    put(&1u32.to_le_bytes()); // shut down
    put(&c.system_identifier.to_le_bytes());
    put(&c.seg_size.to_le_bytes());
    put(&c.timeline.to_le_bytes());
    put(&0u32.to_le_bytes());
    put(&c.checkpoint.to_le_bytes());
    put(&c.redo.to_le_bytes());
    put(&c.next_xid.to_le_bytes());
    put(&c.time.to_le_bytes());
    let crc = crc32c(&b[..72]);
    b[72..76].copy_from_slice(&crc.to_le_bytes());
    b
}

/// CRC-32C (Castagnoli), bitwise: the test's own, independent of the
/// code under test.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_data_directory_of_the_previous_format_starts_and_is_converted() {
    let tmp = TempDir::new("legacy-control");
    let d = init(&tmp.join("data"), &[]);
    let control = backend::control::ControlFile::read(&d.path).unwrap();
    let path = backend::control::path(&d.path);
    std::fs::write(&path, legacy_control(&control)).unwrap();
    std::fs::remove_file(d.path.join("PG_VERSION")).unwrap();
    assert_eq!(
        backend::control::ControlFile::read(&d.path).unwrap(),
        control,
        "the previous format is not read"
    );
    let s = Server::start_ready(&d.path, tmp.path(), &[]);
    assert!(
        s.stderr().contains("control file converted"),
        "{}",
        s.stderr()
    );
    let o = s.stop_ok();
    assert_no_panic("legacy start", &o);
    assert_cleaned_up(&d.path);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 8192, "not converted");
    assert_eq!(&bytes[8..12], &1300u32.to_le_bytes());
    assert_eq!(
        std::fs::read_to_string(d.path.join("PG_VERSION")).unwrap(),
        "15\n"
    );
    let now = backend::control::ControlFile::read(&d.path).unwrap();
    assert_eq!(now.system_identifier, control.system_identifier);
    assert!(
        now.checkpoint > control.checkpoint,
        "no shutdown checkpoint"
    );
    if let Some(pg_controldata) = pg_client("pg_controldata") {
        let o = run_cmd(
            Command::new(pg_controldata).args(["-D", d.path.to_str().unwrap()]),
            TIMEOUT,
        );
        assert!(o.status.success(), "{}", o.describe());
        assert!(
            o.stdout
                .contains("Database cluster state:               shut down"),
            "{}",
            o.describe()
        );
    }
}

#[test]
fn the_postgres_command_line_is_checked() {
    let o = postmaster(&["-V"]);
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    assert!(
        o.stdout.starts_with("postgres (PostgreSQL) 15"),
        "{}",
        o.describe()
    );
    let tmp = TempDir::new("pgcli");
    let dir = tmp.join("nothing");
    for (arg, says) in [
        ("-Q", "unexpected argument '-Q'"),
        ("-p", "a value is required for '-p <PORT>'"),
    ] {
        let o = postmaster(&["-D", dir.to_str().unwrap(), arg]);
        assert_eq!(o.code(), Some(2), "{}", o.describe());
        assert!(o.stderr.contains(says), "{}", o.describe());
    }
    let o = postmaster(&["-D", dir.to_str().unwrap(), "-c", "no_such=1"]);
    assert_ne!(o.code(), Some(0), "{}", o.describe());
    assert_no_panic("postgres command line", &o);
    assert!(!dir.exists());
}
