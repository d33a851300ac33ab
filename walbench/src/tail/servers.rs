//! The servers the tail benchmark reads from: a walshm server on a fresh
//! data directory, and PostgreSQL 15 (`wal_level = logical`) when its
//! programs are installed (as root it runs as the `postgres` user, as
//! PostgreSQL requires). Both listen on a Unix socket only, in a
//! directory of their own, and are stopped (and their directories
//! removed) on drop, or get SIGINT (fast shutdown) from the kernel when
//! walbench dies first.

use crate::command::output_checked;
use shmem::sys::Signal;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// PostgreSQL 15's programs.
pub const PG_BINDIR: &str = "/usr/lib/postgresql/15/bin";

/// A running server.
pub struct Server {
    pub socket_dir: PathBuf,
    pub port: u16,
    pub user: String,
    child: Option<Child>,
    /// PostgreSQL's postmaster pid (its launcher may be runuser).
    pid: i32,
    dir: PathBuf,
}

/// Makes `cmd`'s process get `sig` when walbench dies (killed, Ctrl-C,
/// `timeout`): a server never outlives the benchmark that started it.
pub fn die_with_walbench(cmd: &mut Command, sig: Signal) {
    // SAFETY: the closure only makes prctl (async-signal-safe, allocates
    // nothing) in the child between fork and exec.
    unsafe { cmd.pre_exec(move || shmem::sys::set_parent_death_signal(sig)) };
}

/// A TCP port free on 127.0.0.1 now (the servers walbench starts listen
/// on their Unix socket named after it).
pub(crate) fn port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").port()
}

fn is_root() -> bool {
    shmem::sys::uid() == 0
}

fn wait_socket(dir: &Path, port: u16, child: &mut Child, log: &Path) -> Result<(), String> {
    let socket = dir.join(format!(".s.PGSQL.{port}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if socket.exists()
            && crate::tail::wire::Conn::connect(dir, port, &current_user(), "postgres").is_ok()
        {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("server exited ({st}) before it was ready:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("server not ready within 60 s".into())
}

/// The user the benchmark connects as.
pub fn current_user() -> String {
    if is_root() {
        "postgres".into()
    } else {
        std::env::var("USER").unwrap_or_else(|_| "postgres".into())
    }
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    output_checked(cmd, what, &format!("{what} failed")).map(drop)
}

impl Server {
    /// walshm: `postmaster init` and `start` with `sets`.
    pub fn walshm(postmaster: &Path, work: &Path, sets: &[String]) -> Result<Server, String> {
        let dir = work.join("walshm");
        run(
            Command::new(postmaster).arg("init").arg("-D").arg(&dir),
            "postmaster init",
        )?;
        let port = port();
        let log = work.join("walshm.log");
        let mut cmd = Command::new(postmaster);
        cmd.arg("start").arg("-D").arg(&dir);
        cmd.args(["--set", &format!("port={port}")]);
        for s in sets {
            cmd.args(["--set", s]);
        }
        launch(
            &mut cmd,
            dir.clone(),
            port,
            &log,
            &dir.join("postmaster.pid"),
        )
    }

    /// PostgreSQL 15, if its programs are installed (None otherwise).
    pub fn postgres(work: &Path, sets: &[String]) -> Result<Option<Server>, String> {
        let bin = Path::new(PG_BINDIR);
        if !bin.join("postgres").exists() || !bin.join("initdb").exists() {
            return Ok(None);
        }
        let dir = work.join("pg");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let as_pg = |prog: &str| {
            let mut c = if is_root() {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(bin.join(prog));
                c
            } else {
                Command::new(bin.join(prog))
            };
            c.stdin(Stdio::null());
            c
        };
        if is_root() {
            run(
                Command::new("chown").arg("-R").arg("postgres").arg(work),
                "chown",
            )?;
        }
        run(
            as_pg("initdb").arg("-D").arg(dir.join("data")).args([
                "-U",
                &current_user(),
                "--auth-local=trust",
                "--auth-host=reject",
                "--no-sync",
            ]),
            "initdb",
        )?;
        let port = port();
        let log = work.join("pg.log");
        let mut cmd = as_pg("postgres");
        cmd.arg("-D").arg(dir.join("data"));
        let mut all = vec![
            format!("port={port}"),
            "listen_addresses=".to_string(),
            format!("unix_socket_directories={}", dir.display()),
            "wal_level=logical".to_string(),
            "max_replication_slots=8".to_string(),
            "autovacuum=off".to_string(),
        ];
        all.extend(sets.iter().cloned());
        for s in &all {
            cmd.args(["-c", s]);
        }
        let pid_file = dir.join("data/postmaster.pid");
        launch(&mut cmd, dir, port, &log, &pid_file).map(Some)
    }
}

/// Starts a server's `cmd` (its own process group, SIGINT when walbench
/// dies, stderr to `log`), waits until it accepts connections on
/// `dir/.s.PGSQL.PORT`; its postmaster's pid from `pid_file` (the child
/// may be a launcher such as runuser).
fn launch(
    cmd: &mut Command,
    dir: PathBuf,
    port: u16,
    log: &Path,
    pid_file: &Path,
) -> Result<Server, String> {
    die_with_walbench(cmd, Signal::SIGINT);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).map_err(|e| e.to_string())?)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{}: {e}", cmd.get_program().to_string_lossy()))?;
    wait_socket(&dir, port, &mut child, log)?;
    let pid = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|t| t.lines().next()?.trim().parse().ok())
        .unwrap_or(child.id() as i32);
    Ok(Server {
        socket_dir: dir.clone(),
        port,
        user: current_user(),
        child: Some(child),
        pid,
        dir,
    })
}

/// A fresh work directory under TMPDIR for one path's servers.
pub fn work_dir(tag: &str) -> Result<PathBuf, String> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "walbench-tail-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGINT is a fast shutdown for both servers.
        shmem::sys::kill(self.pid, Signal::SIGINT);
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            // The group of a server that did not stop.
            shmem::sys::kill(-(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
