//! What a hostile local user or network client must not be able to do.
//!
//! 1. Cancel requests: `pid 0, key 0` (matching a free proc slot) over TCP
//!    and the Unix socket, a worker's PID with key 0, a session's PID with
//!    a wrong key: nothing is signalled (the postmaster keeps running, an
//!    idle session's next statement is not cancelled); the right key does
//!    cancel (the observation works).
//! 3. Start-up deadline and admission: a client dripping one byte every
//!    150 ms is cut off after `authentication_timeout`; unauthenticated
//!    clients cannot make a normal login fail; 300 silent connections keep
//!    the postmaster's children under the caps and are all gone after the
//!    deadline.
//! 7. File modes under umask 022: every file 0600, every directory 0700,
//!    after init, a workload with segment recycling, kill -9 and restart;
//!    a data directory of mode 0755 is refused.
//! 8. Passwords: never on a command line or in the environment of the
//!    server's processes, stored only as a SCRAM verifier; a plain
//!    `--set password=` is refused; SCRAM over TCP works from the verifier.
//! 9. Descriptors: a connection backend holds 0, 1, 2 and its own socket
//!    only, even when accepted in one batch with others.
//! 10. Registrations: under a descriptor limit of 64, 100 observers and 60
//!     workers are answered at once (attached or "busy", never left
//!     waiting), logins keep working, and a postmaster out of descriptors
//!     pauses its accepts instead of spinning, then serves again when some
//!     are free.

use crate::common::wire::{
    cstr, error_code, msg, read_until_ready, socket_path, start_on_free_port, PSQL_TERSE,
};
use crate::common::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const CANCEL_CODE: i32 = (1234 << 16) | 5678;

// ---------------------------------------------------------------------------
// A server with a port, and a raw protocol client

struct Srv {
    srv: Option<Server>,
    d: DataDir,
    port: u16,
    tmp: TempDir,
}

impl Srv {
    /// init + start with a port, TCP on localhost and `args`; waits until
    /// ready and the socket exists.
    fn start(tag: &str, args: &[&str], env: &[(&str, &str)]) -> Srv {
        let tmp = TempDir::new(tag);
        let d = init(&tmp.join("data"), &[]);
        Srv::start_on(tmp, d, args, env)
    }

    fn start_on(tmp: TempDir, d: DataDir, args: &[&str], env: &[(&str, &str)]) -> Srv {
        let (srv, port) =
            start_on_free_port(&d, tmp.path(), &["listen_addresses=localhost"], args, env);
        Srv {
            srv: Some(srv),
            d,
            port,
            tmp,
        }
    }

    fn srv(&mut self) -> &mut Server {
        self.srv.as_mut().unwrap()
    }

    fn pid(&self) -> i32 {
        self.srv.as_ref().unwrap().pid
    }

    fn socket(&self) -> PathBuf {
        socket_path(&self.d.path, self.port)
    }

    fn unix(&self) -> UnixStream {
        let s = UnixStream::connect(self.socket()).expect("connect Unix socket");
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        s
    }

    fn tcp(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect TCP");
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        s
    }

    /// The postmaster is still running (not exited, not shutting down).
    fn assert_running(&mut self, what: &str) {
        let st = self.srv().try_wait();
        assert!(
            st.is_none(),
            "{what}: postmaster exited ({st:?})\n{}",
            self.srv().stderr()
        );
    }

    /// Children other than walwriter and checkpointer.
    fn extra_children(&self) -> usize {
        children_of(self.pid())
            .iter()
            .filter(|(_, c)| c != "walwriter" && c != "checkpointer")
            .count()
    }

    fn stop(mut self) {
        self.srv.take().unwrap().stop_ok();
    }
}

fn startup_packet(user: &str) -> Vec<u8> {
    let mut body = (3i32 << 16).to_be_bytes().to_vec();
    for s in ["user", user, "database", user] {
        body.extend(s.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut p = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    p.extend(body);
    p
}

fn cancel_packet(pid: i32, key: i32) -> Vec<u8> {
    let mut p = 16i32.to_be_bytes().to_vec();
    p.extend(CANCEL_CODE.to_be_bytes());
    p.extend(pid.to_be_bytes());
    p.extend(key.to_be_bytes());
    p
}

fn query(sql: &str) -> Vec<u8> {
    msg(b'Q', &cstr(sql))
}

/// A logged-in session over the Unix socket: (stream, backend pid, key).
fn login(s: &Srv) -> (UnixStream, i32, i32) {
    let mut c = s.unix();
    c.write_all(&startup_packet("x")).unwrap();
    let msgs = read_until_ready(&mut c);
    let (_, k) = msgs
        .iter()
        .find(|(t, _)| *t == b'K')
        .unwrap_or_else(|| panic!("no BackendKeyData: {msgs:?}"));
    let pid = i32::from_be_bytes(k[..4].try_into().unwrap());
    let key = i32::from_be_bytes(k[4..8].try_into().unwrap());
    (c, pid, key)
}

/// Sends a cancel request and waits for the server to close the socket.
fn send_cancel<S: Read + Write>(mut c: S, pid: i32, key: i32) {
    c.write_all(&cancel_packet(pid, key)).unwrap();
    let mut b = [0u8; 16];
    assert!(
        matches!(c.read(&mut b), Ok(0) | Err(_)),
        "a cancel request was answered"
    );
}

/// Runs `SELECT 1` on an open session; its SQLSTATE if it failed.
fn select_one(c: &mut UnixStream) -> Option<String> {
    c.write_all(&query("SELECT 1")).unwrap();
    error_code(&read_until_ready(c))
}

/// Sends a long multi-statement query on `sess` (about half a second of
/// work; a cancel is checked before each statement), runs `during` once
/// the backend has had time to read the whole message (a cancel that
/// arrives while a message is being read is ignored as "idle"), and
/// returns the query's SQLSTATE (57014 if a SIGINT reached the backend)
/// and how long it ran.
fn long_query(sess: &mut UnixStream, during: impl FnOnce()) -> (Option<String>, Duration) {
    let t0 = Instant::now();
    sess.write_all(&query(&"SELECT 1;".repeat(400_000)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    during();
    let rest = read_until_ready(&mut std::io::BufReader::new(&*sess));
    (error_code(&rest), t0.elapsed())
}

// ---------------------------------------------------------------------------
// 1. Cancel requests

#[test]
fn forged_cancel_requests_signal_nobody() {
    let mut s = Srv::start(
        "hard-cancel",
        &["--workers", "1", "--workload", "emit:16"],
        &[],
    );
    let worker = s
        .srv()
        .wait_children(1)
        .iter()
        .find(|(_, c)| c == "backend")
        .map(|(p, _)| *p)
        .expect("worker backend");
    let (mut sess, sess_pid, sess_key) = login(&s);

    // pid 0 / key 0 matched a free proc slot: kill(0, SIGINT) stopped the
    // whole process group. Sent while the session runs a long query, so
    // that a SIGINT reaching it would cancel the query.
    let (state, took) = long_query(&mut sess, || {
        send_cancel(s.tcp(), 0, 0);
        send_cancel(s.unix(), 0, 0);
        send_cancel(s.tcp(), -1, 0);
        // A worker's pid with key 0 (workers carry no cancel key).
        send_cancel(s.unix(), worker, 0);
        // The session's pid with key 0 and with a wrong key.
        send_cancel(s.tcp(), sess_pid, 0);
        send_cancel(s.unix(), sess_pid, sess_key.wrapping_add(1));
    });
    eprintln!("long query with forged cancels: {took:?}");
    assert_eq!(state, None, "a forged cancel request cancelled the query");
    s.assert_running("after forged cancel requests");
    assert!(alive(worker), "worker backend died");
    assert_eq!(select_one(&mut sess), None);

    // The right key cancels the query: the check above can fail.
    let (state, took) = long_query(&mut sess, || send_cancel(s.unix(), sess_pid, sess_key));
    eprintln!("long query with the right cancel: {took:?}");
    assert_eq!(state.as_deref(), Some("57014"));
    assert_eq!(select_one(&mut sess), None, "session unusable after cancel");
    s.assert_running("at the end");
    drop(sess);
    s.stop();
}

// ---------------------------------------------------------------------------
// 3. Start-up deadline and admission

/// A TCP client that announces a 9000-byte start-up packet and sends one
/// byte every 150 ms; returns how long the server let it go on.
fn drip_until_closed(s: &Srv, limit: Duration) -> Duration {
    let mut c = s.tcp();
    c.set_read_timeout(Some(Duration::from_millis(150)))
        .unwrap();
    let t0 = Instant::now();
    c.write_all(&9000i32.to_be_bytes()).unwrap();
    while t0.elapsed() < limit {
        if c.write_all(b"a").is_err() {
            break;
        }
        let mut b = [0u8; 64];
        match c.read(&mut b) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    t0.elapsed()
}

#[test]
fn slow_start_up_is_cut_off_at_authentication_timeout() {
    let s = Srv::start("hard-drip", &["--set", "authentication_timeout=2"], &[]);
    let took = drip_until_closed(&s, Duration::from_secs(10));
    eprintln!("dripping client disconnected after {took:?}");
    assert!(
        took >= Duration::from_millis(1500) && took <= Duration::from_millis(3500),
        "a dripping client was disconnected after {took:?} (authentication_timeout=2s)"
    );
    assert!(
        wait_until(Duration::from_secs(3), || s.extra_children() == 0),
        "the dripping client's child is still there"
    );
    // An exit at the deadline is not a crash: the server did not restart.
    let mut s = s;
    s.assert_running("after the deadline");
    let (mut c, _, _) = login(&s);
    assert_eq!(select_one(&mut c), None);
    drop(c);
    let o = s.srv.take().unwrap().stop_ok();
    assert_eq!(
        o.stderr.matches(READY).count(),
        1,
        "crash restart\n{}",
        o.stderr
    );
}

#[test]
fn unauthenticated_clients_do_not_use_up_max_connections() {
    let s = Srv::start("hard-unauth", &["--set", "max_connections=5"], &[]);
    // 10 clients that never finish start-up: silent ones and half-sent
    // start-up packets, over both transports.
    let mut idle_unix = Vec::new();
    let mut idle_tcp = Vec::new();
    for i in 0..5 {
        let mut u = s.unix();
        let mut t = s.tcp();
        if i % 2 == 0 {
            u.write_all(&startup_packet("x")[..6]).unwrap();
            t.write_all(&startup_packet("x")[..6]).unwrap();
        }
        idle_unix.push(u);
        idle_tcp.push(t);
    }
    assert!(
        wait_until(TIMEOUT, || s.extra_children() >= 10),
        "the postmaster did not fork for 10 clients"
    );
    // A normal login still succeeds (was: FATAL 53300).
    for _ in 0..3 {
        let (mut c, _, _) = login(&s);
        assert_eq!(select_one(&mut c), None);
    }
    drop((idle_unix, idle_tcp));
    s.stop();
}

#[test]
fn a_connection_flood_costs_bounded_children_and_ends_at_the_deadline() {
    // With max_connections=5: at most 2*5+16 unauthenticated connection
    // children and 8 rejecters; walwriter and checkpointer come on top.
    const MAX_CHILDREN: usize = 2 * 5 + 16 + 8;
    let s = Srv::start(
        "hard-flood",
        &[
            "--set",
            "max_connections=5",
            "--set",
            "authentication_timeout=2",
        ],
        &[],
    );
    let mut most = 0;
    let mut conns = Vec::new();
    for i in 0..300 {
        conns.push(s.unix());
        if i % 10 == 0 {
            most = most.max(s.extra_children());
        }
    }
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1000) {
        most = most.max(s.extra_children());
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("300 silent clients: at most {most} children besides walwriter and checkpointer");
    assert!(
        most <= MAX_CHILDREN,
        "{most} connection children for 300 silent clients (cap {MAX_CHILDREN})"
    );
    assert!(most >= 10, "only {most} children: the flood never arrived");
    // Every connection is closed by the server: by the deadline, or at once
    // when refused.
    for (i, c) in conns.iter_mut().enumerate() {
        let mut b = [0u8; 512];
        loop {
            match c.read(&mut b) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("connection {i} still open after {:?}: {e}", t0.elapsed()),
            }
        }
    }
    assert!(
        wait_until(Duration::from_secs(5), || s.extra_children() == 0),
        "children left after the deadline: {:?}",
        children_of(s.pid())
    );
    // And a normal login works again.
    let (mut c, _, _) = login(&s);
    assert_eq!(select_one(&mut c), None);
    drop(c);
    s.stop();
}

// ---------------------------------------------------------------------------
// 7. File modes

/// Every path under `dir` whose mode is not 0700 (directories) or 0600.
fn loose_modes(dir: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mode = std::fs::symlink_metadata(&d).unwrap().permissions().mode() & 0o7777;
        if mode != 0o700 {
            bad.push(format!("{} {mode:04o}", d.display()));
        }
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
                continue;
            }
            let mode = m.permissions().mode() & 0o7777;
            let want = 0o600;
            if mode != want && !(m.file_type().is_socket() && mode & 0o077 == 0) {
                bad.push(format!("{} {mode:04o}", e.path().display()));
            }
        }
    }
    bad
}

#[test]
fn files_are_private_whatever_the_umask() {
    // SAFETY: umask has no memory effects; children inherit the value.
    unsafe { libc::umask(0o022) };
    let tmp = TempDir::new("hard-modes");
    let d = init(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let bad = loose_modes(&d.path);
    assert!(bad.is_empty(), "after init: {bad:?}");
    // A segment of loose mode that the first checkpoint recycles or
    // removes (walfile's unit test checks that recycling sets 0600).
    let first = d.path.join("pg_wal/000000010000000000000001");
    std::fs::set_permissions(&first, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args = [
        "--set",
        "checkpoint_timeout=1",
        "--set",
        "max_wal_size=4",
        "--workers",
        "2",
        "--workload",
        "emit:2000",
    ];
    let srv = Server::start_ready(&d.path, tmp.path(), &args);
    std::thread::sleep(Duration::from_millis(3000));
    let during = loose_modes(&d.path);
    kill_group(srv);
    let srv = Server::start_ready(&d.path, tmp.path(), &args);
    std::thread::sleep(Duration::from_millis(1500));
    let o = srv.stop_ok();
    let after = loose_modes(&d.path);
    assert!(during.is_empty(), "while running: {during:?}");
    assert!(after.is_empty(), "after kill -9 and restart: {after:?}");
    drop(o);
    // A data directory that others can enter is refused.
    std::fs::set_permissions(&d.path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = run_cmd(
        Command::new(postmaster_bin())
            .args(["start", "-D"])
            .arg(&d.path),
        TIMEOUT,
    );
    assert_ne!(o.code(), Some(0), "started on a 0755 data directory");
    assert!(o.stderr.contains("chmod 0700"), "{}", o.describe());
    assert!(!d.path.join("postmaster.pid").exists());
}

// ---------------------------------------------------------------------------
// 8. Passwords

fn write_private(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Does /proc/PID/cmdline or /proc/PID/environ of `pid` hold `secret`?
fn proc_leaks(pid: i32, secret: &str) -> Vec<String> {
    ["cmdline", "environ"]
        .iter()
        .filter(|f| {
            std::fs::read(format!("/proc/{pid}/{f}"))
                .map(|b| b.windows(secret.len()).any(|w| w == secret.as_bytes()))
                .unwrap_or(false)
        })
        .map(|f| format!("/proc/{pid}/{f}"))
        .collect()
}

fn server_leaks(s: &Srv, secret: &str) -> Vec<String> {
    let mut pids = vec![s.pid()];
    pids.extend(children_of(s.pid()).iter().map(|(p, _)| *p));
    pids.iter().flat_map(|p| proc_leaks(*p, secret)).collect()
}

/// `psql -h 127.0.0.1 -c 'SELECT 42'` with PGPASSWORD; its output.
fn psql_tcp(s: &Srv, password: &str) -> Out {
    let mut c = Command::new(PSQL);
    c.env_remove("PGSERVICE")
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", s.port.to_string())
        .env("PGUSER", "x")
        .env("PGDATABASE", "x")
        .env("PGPASSWORD", password)
        .env("PGSSLMODE", "disable")
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PSQLRC", "/dev/null")
        .args(PSQL_TERSE)
        .args(["-c", "SELECT 42"]);
    run_cmd(&mut c, Duration::from_secs(20))
}

fn check_tcp_login(s: &Srv, right: &str, wrong: &str) {
    if !Path::new(PSQL).is_file() {
        eprintln!("SKIPPED: TCP SCRAM login check: {PSQL} not found");
        return;
    }
    let o = psql_tcp(s, right);
    assert_eq!(o.stdout, "42\n", "right password\n{}", o.describe());
    let o = psql_tcp(s, wrong);
    assert_eq!(
        o.code(),
        Some(2),
        "wrong password accepted\n{}",
        o.describe()
    );
}

#[test]
fn passwords_stay_off_command_lines_and_out_of_files() {
    let tmp = TempDir::new("hard-pw");
    let secret = format!("Pw-{}-zq8", std::process::id());
    let pwfile = tmp.join("pwfile");
    let dir = tmp.join("data");
    let dirs = dir.to_str().unwrap();

    // A password file others can read is refused; so is a plain password.
    write_private(&pwfile, &format!("{secret}\n"), 0o644);
    let o = postmaster(&["init", "-D", dirs, "--pwfile", pwfile.to_str().unwrap()]);
    assert_ne!(o.code(), Some(0), "init took a 0644 password file");
    let plain = format!("password={secret}");
    let o = postmaster(&["init", "-D", dirs, "--set", &plain]);
    assert_ne!(o.code(), Some(0), "init took a plain --set password");
    assert!(!o.stderr.contains(&secret), "the error echoes the password");

    write_private(&pwfile, &format!("{secret}\n"), 0o600);
    let d = init(&dir, &["--pwfile", pwfile.to_str().unwrap()]);
    let conf = std::fs::read_to_string(d.path.join("walshm.conf")).unwrap();
    assert!(!conf.contains(&secret), "walshm.conf holds the password");
    assert!(
        conf.lines()
            .any(|l| l.starts_with("password = 'SCRAM-SHA-256$4096:")),
        "no verifier in walshm.conf:\n{conf}"
    );
    let o = postmaster(&["start", "-D", dirs, "--set", &plain]);
    assert_ne!(o.code(), Some(0), "start took a plain --set password");

    // The verifier from walshm.conf authenticates.
    let s = Srv::start_on(tmp, d, &[], &[]);
    let (c, _, _) = login(&s);
    assert_eq!(server_leaks(&s, &secret), Vec::<String>::new());
    check_tcp_login(&s, &secret, "not-the-password");
    drop(c);
    let Srv { srv, d, tmp, .. } = s;
    srv.unwrap().stop_ok();

    // WALSHM_PASSWORD: used for this run, and wiped from the environment
    // of the postmaster and of every child.
    let other = format!("Env-{}-kx3", std::process::id());
    let s = Srv::start_on(tmp, d, &[], &[("WALSHM_PASSWORD", &other)]);
    let (c, _, _) = login(&s);
    assert!(children_of(s.pid()).len() >= 3, "no connection child");
    assert_eq!(server_leaks(&s, &other), Vec::<String>::new());
    check_tcp_login(&s, &other, &secret);
    drop(c);
    s.stop();
}

// ---------------------------------------------------------------------------
// 9. Descriptors

/// /proc/PID/fd: descriptor -> link target.
fn fds_of(pid: i32) -> HashMap<i32, String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            Some((fd, target.display().to_string()))
        })
        .collect()
}

#[test]
fn children_keep_only_their_own_descriptors() {
    let s = Srv::start("hard-fds", &[], &[]);
    // Connected all before any start-up packet: accepted in one batch.
    let mut conns: Vec<UnixStream> = (0..6).map(|_| s.unix()).collect();
    let mut pids = Vec::new();
    for c in &mut conns {
        c.write_all(&startup_packet("x")).unwrap();
    }
    for c in &mut conns {
        let msgs = read_until_ready(c);
        let k = &msgs.iter().find(|(t, _)| *t == b'K').unwrap().1;
        pids.push(i32::from_be_bytes(k[..4].try_into().unwrap()));
    }
    for pid in pids {
        let fds = fds_of(pid);
        let extra: Vec<_> = fds.iter().filter(|(fd, _)| **fd > 2).collect();
        assert_eq!(extra.len(), 1, "backend {pid} holds {fds:?}");
        assert!(extra[0].1.starts_with("socket:"), "backend {pid}: {fds:?}");
        assert!(
            !fds.values().any(|t| t.starts_with("pipe:")),
            "backend {pid} holds a pipe: {fds:?}"
        );
    }
    // The auxiliary processes hold no socket and no pipe either.
    for (pid, comm) in children_of(s.pid()) {
        if comm != "walwriter" && comm != "checkpointer" {
            continue;
        }
        let fds = fds_of(pid);
        assert!(
            !fds.values()
                .any(|t| t.starts_with("socket:") || t.starts_with("pipe:")),
            "{comm} {pid} holds {fds:?}"
        );
    }
    drop(conns);
    s.stop();
}

// ---------------------------------------------------------------------------
// 10. Registrations under a descriptor limit

/// (soft, hard) RLIMIT_NOFILE of `pid`, after setting it to `new` if given.
fn nofile(pid: i32, new: Option<(u64, u64)>) -> (u64, u64) {
    let set = new.map(|(soft, hard)| libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    });
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let set_ptr = set.as_ref().map_or(std::ptr::null(), |r| r as *const _);
    // SAFETY: prlimit reads `set_ptr` (NULL or a valid rlimit) and writes
    // `old`, a valid rlimit.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, set_ptr, &mut old) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    (old.rlim_cur, old.rlim_max)
}

/// User plus system CPU time of `pid`, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// CPU ticks `pid` used over `d`.
fn cpu_over(pid: i32, d: Duration) -> u64 {
    let t0 = cpu_ticks(pid);
    std::thread::sleep(d);
    cpu_ticks(pid) - t0
}

/// The lowest descriptor number `pid` does not use.
fn lowest_free_fd(pid: i32) -> u64 {
    let used: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|n| !used.contains(n)).unwrap()
}

/// Registers `n` processes of `kind` from this process; returns those that
/// attached and how many were told the server is busy or full. Any other
/// answer (a timeout: the postmaster never accepted) fails the test.
fn register_many(
    dir: &Path,
    kind: shmem::register::Kind,
    n: usize,
) -> (Vec<shmem::register::Registration>, usize) {
    use shmem::register::{connect, RegisterError};
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..n {
        let t = Instant::now();
        match connect(dir, kind) {
            Ok(r) => held.push(r),
            Err(RegisterError::Busy { .. } | RegisterError::Full { .. }) => refused += 1,
            Err(e) => panic!("registration {i} ({kind:?}) after {:?}: {e}", t.elapsed()),
        }
    }
    (held, refused)
}

#[test]
fn registrations_are_bounded_and_a_descriptor_shortage_does_not_spin() {
    use shmem::register::Kind;
    let mut s = Srv::start("reg-bound", &["--set", "max_worker_processes=100"], &[]);
    let pid = s.pid();
    let (_, hard) = nofile(pid, None);
    nofile(pid, Some((64, hard)));
    let (observers, busy) = register_many(&s.d.path, Kind::Observer, 100);
    assert!(busy > 0, "100 observers under a limit of 64 descriptors");
    let (workers, full) = register_many(&s.d.path, Kind::Worker, 60);
    assert!(full > 0, "60 workers under a limit of 64 descriptors");
    let (mut c, _, _) = login(&s);
    assert_eq!(
        select_one(&mut c),
        None,
        "SELECT 1 while registrations are held"
    );
    drop(c);
    let held = observers.len() + workers.len();
    for w in workers {
        w.detach().expect("worker detach");
    }
    drop(observers);
    s.assert_running(&format!(
        "after {held} registrations and {} refusals",
        busy + full
    ));

    // Out of descriptors: one queued registration and one queued login.
    let free = lowest_free_fd(pid);
    nofile(pid, Some((free, hard)));
    let reg = UnixStream::connect(shmem::register::socket_path(&s.d.path)).unwrap();
    let client = UnixStream::connect(s.socket()).unwrap();
    let ticks = cpu_over(pid, Duration::from_secs(1));
    nofile(pid, Some((1024, hard)));
    assert!(
        ticks < 30,
        "the postmaster spun: {ticks} ticks in 1 s with accepts failing"
    );
    drop((reg, client));
    let (mut c, _, _) = login(&s);
    assert_eq!(
        select_one(&mut c),
        None,
        "SELECT 1 once descriptors are free"
    );
    drop(c);
    let (after, _) = register_many(&s.d.path, Kind::Observer, 1);
    assert_eq!(
        after.len(),
        1,
        "an observer attaches once descriptors are free"
    );
    drop(after);
    s.assert_running("at the end");
    s.stop();
}
