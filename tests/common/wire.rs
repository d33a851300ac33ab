//! A raw PostgreSQL wire-protocol client for the integration tests (start-up
//! packets, messages, reading replies and ErrorResponse fields), the path
//! of PostgreSQL 15's client programs (skipped loudly when absent unless
//! WALSHM_REQUIRE_PG=1), a free TCP port, and a server on it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const PG_BINDIR: &str = "/usr/lib/postgresql/15/bin";

/// psql's options for a scripted run: no psqlrc (-X), unaligned (-A),
/// rows only (-t), errors with their SQLSTATE (VERBOSITY=verbose).
pub const PSQL_TERSE: [&str; 5] = ["-X", "-A", "-t", "-v", "VERBOSITY=verbose"];

/// Path of a PostgreSQL 15 client program, or None after a loud skip
/// notice (panics instead with WALSHM_REQUIRE_PG=1).
pub fn pg_client(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("PG_BINDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(PG_BINDIR));
    pg_program(dir.join(name), name, "psql/pgbench", "PG_BINDIR")
}

/// Whether all of PostgreSQL 15's programs `names` are there (after a
/// loud skip notice for the first one missing when not).
pub fn have_pg_clients(names: &[&str]) -> bool {
    names.iter().all(|n| pg_client(n).is_some())
}

/// The paths of PostgreSQL 15's programs `names`, if all are there (after
/// a loud skip notice for the first one missing when not).
pub fn pg_clients<const N: usize>(names: [&str; N]) -> Option<[PathBuf; N]> {
    let found: Vec<PathBuf> = names.iter().map(|n| pg_client(n)).collect::<Option<_>>()?;
    found.try_into().ok()
}

/// `p`, the path of PostgreSQL's program `name`, if it is there; else None
/// after a loud notice that tests needing `what` are skipped and that the
/// variable `setting` names another path (panics instead with
/// WALSHM_REQUIRE_PG=1).
pub fn pg_program(p: PathBuf, name: &str, what: &str, setting: &str) -> Option<PathBuf> {
    if p.is_file() {
        return Some(p);
    }
    if std::env::var("WALSHM_REQUIRE_PG").as_deref() == Ok("1") {
        panic!(
            "{name} not found at {} and WALSHM_REQUIRE_PG=1",
            p.display()
        );
    }
    eprintln!(
        "\n********************************************************\n\
         SKIPPED: {what} not found ({}); set {setting}\n\
         ********************************************************\n",
        p.display()
    );
    None
}

/// A free TCP port (also names the Unix socket).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

pub const RAW_TIMEOUT: Duration = Duration::from_secs(10);

pub fn raw_connect(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
    s.set_read_timeout(Some(RAW_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(RAW_TIMEOUT)).unwrap();
    s
}

pub fn startup_packet(params: &[(&str, &str)]) -> Vec<u8> {
    startup_packet_version(3 << 16, params)
}

pub fn startup_packet_version(version: i32, params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = version.to_be_bytes().to_vec();
    for (k, v) in params {
        body.extend(cstr(k));
        body.extend(cstr(v));
    }
    body.push(0);
    let mut p = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    p.extend(body);
    p
}

pub fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

pub fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// One backend message; None at EOF (or a reset/timeout: the caller
/// distinguishes with `closed`).
pub fn read_msg<S: Read + ?Sized>(s: &mut S) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).ok()?;
    let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    assert!(
        (4..=1 << 24).contains(&len),
        "backend sent message {:?} with length {len}",
        head[0] as char
    );
    let mut body = vec![0u8; len as usize - 4];
    s.read_exact(&mut body).ok()?;
    Some((head[0], body))
}

/// Fields of an ErrorResponse/NoticeResponse body.
pub fn fields(body: &[u8]) -> HashMap<u8, String> {
    let mut m = HashMap::new();
    let mut i = 0;
    while i < body.len() && body[i] != 0 {
        let t = body[i];
        let end = body[i + 1..]
            .iter()
            .position(|&b| b == 0)
            .map(|p| i + 1 + p)
            .unwrap_or(body.len());
        m.insert(t, String::from_utf8_lossy(&body[i + 1..end]).into_owned());
        i = end + 1;
    }
    m
}

/// Reads until EOF; every message read. Panics if the server neither
/// answers nor closes within RAW_TIMEOUT.
pub fn read_to_close(s: &mut UnixStream) -> Vec<(u8, Vec<u8>)> {
    let mut v = Vec::new();
    let start = Instant::now();
    loop {
        let mut head = [0u8; 5];
        match s.read(&mut head[..1]) {
            Ok(0) => return v,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return v,
            Err(e) => panic!(
                "server neither answered nor closed within {:?} ({e}); got {v:?}",
                start.elapsed()
            ),
        }
        if s.read_exact(&mut head[1..]).is_err() {
            return v;
        }
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        assert!((4..=1 << 24).contains(&len), "bad length {len} from server");
        let mut body = vec![0u8; len as usize - 4];
        if s.read_exact(&mut body).is_err() {
            return v;
        }
        v.push((head[0], body));
    }
}

/// The fields of the first ErrorResponse in `msgs`.
pub fn first_error(msgs: &[(u8, Vec<u8>)]) -> Option<HashMap<u8, String>> {
    msgs.iter()
        .find(|(t, _)| *t == b'E')
        .map(|(_, b)| fields(b))
}

/// The SQLSTATE of the first ErrorResponse in `msgs`.
pub fn error_code(msgs: &[(u8, Vec<u8>)]) -> Option<String> {
    first_error(msgs).and_then(|f| f.get(&b'C').cloned())
}

/// StartupMessage (user=x) and read until ReadyForQuery. Err(SQLSTATE or
/// description) if refused.
pub fn handshake(path: &Path) -> Result<UnixStream, String> {
    let mut s = raw_connect(path);
    s.write_all(&startup_packet(&[("user", "x"), ("database", "x")]))
        .map_err(|e| format!("write: {e}"))?;
    loop {
        match read_msg(&mut s) {
            None => return Err("closed during start-up".into()),
            Some((b'E', b)) => return Err(fields(&b).get(&b'C').cloned().unwrap_or_default()),
            Some((b'Z', b)) => {
                assert_eq!(b, b"I", "ReadyForQuery status after start-up");
                return Ok(s);
            }
            Some((b'R', b)) => assert_eq!(
                b,
                0i32.to_be_bytes(),
                "only AuthenticationOk on a Unix socket"
            ),
            Some((b'S' | b'K', _)) => {}
            Some((t, _)) => panic!("unexpected message {:?} during start-up", t as char),
        }
    }
}

/// Handshake, retrying while the server refuses with 53300 because
/// connections of earlier cycles are still exiting.
pub fn handshake_retrying(path: &Path) -> UnixStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match handshake(path) {
            Ok(s) => return s,
            Err(e) if e == "53300" && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("handshake refused: {e}"),
        }
    }
}

/// Sends messages and reads until ReadyForQuery.
pub fn exchange(s: &mut UnixStream, out: &[u8]) -> Vec<(u8, Vec<u8>)> {
    s.write_all(out).expect("write");
    read_until_ready(s)
}

/// Messages up to and including ReadyForQuery; panics if the stream ends
/// first.
pub fn read_until_ready<S: Read + ?Sized>(s: &mut S) -> Vec<(u8, Vec<u8>)> {
    let mut v = Vec::new();
    loop {
        let m = read_msg(s).unwrap_or_else(|| panic!("closed before ReadyForQuery; got {v:?}"));
        let done = m.0 == b'Z';
        v.push(m);
        if done {
            return v;
        }
    }
}

/// The text values of the DataRows in `msgs`.
pub fn data_rows(msgs: &[(u8, Vec<u8>)]) -> Vec<Vec<Option<String>>> {
    msgs.iter()
        .filter(|(t, _)| *t == b'D')
        .map(|(_, b)| {
            let n = i16::from_be_bytes([b[0], b[1]]) as usize;
            let mut i = 2;
            let mut row = Vec::new();
            for _ in 0..n {
                let len = i32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
                i += 4;
                if len < 0 {
                    row.push(None);
                } else {
                    row.push(Some(
                        String::from_utf8_lossy(&b[i..i + len as usize]).into_owned(),
                    ));
                    i += len as usize;
                }
            }
            row
        })
        .collect()
}

/// Parse (unnamed, untyped) + Bind (text params) + Execute + Sync.
pub fn extended_query(sql: &str, params: &[&str]) -> Vec<u8> {
    let mut out = parse_bind(sql, params);
    let mut e = cstr("");
    e.extend(0i32.to_be_bytes());
    out.extend(msg(b'E', &e));
    out.extend(msg(b'S', &[]));
    out
}

/// Parse (unnamed, untyped) + Bind (unnamed portal, text params, text
/// results).
pub fn parse_bind(sql: &str, params: &[&str]) -> Vec<u8> {
    let mut p = cstr("");
    p.extend(cstr(sql));
    p.extend(0i16.to_be_bytes());
    let mut out = msg(b'P', &p);
    let mut b = cstr("");
    b.extend(cstr(""));
    b.extend(0i16.to_be_bytes()); // all params text
    b.extend((params.len() as i16).to_be_bytes());
    for v in params {
        b.extend((v.len() as i32).to_be_bytes());
        b.extend(v.as_bytes());
    }
    b.extend(0i16.to_be_bytes()); // results text
    out.extend(msg(b'B', &b));
    out
}

/// The Unix socket of a server on `port` in data directory `datadir`.
pub fn socket_path(datadir: &Path, port: u16) -> PathBuf {
    datadir.join(format!(".s.PGSQL.{port}"))
}

/// `postmaster start -D d` on a free port with `--set S` for each of
/// `sets`, then `args`, in environment `env`; waits until the server is
/// ready and its Unix socket exists. Returns the server and its port.
pub fn start_on_free_port(
    d: &super::DataDir,
    logdir: &Path,
    sets: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> (super::Server, u16) {
    let port = free_port();
    let port_set = format!("port={port}");
    let mut all = vec!["--set", port_set.as_str()];
    for s in sets {
        all.extend(["--set", s]);
    }
    all.extend_from_slice(args);
    let mut srv = super::start_with_env(&d.path, logdir, &all, env);
    srv.wait_ready(super::TIMEOUT);
    let socket = socket_path(&d.path, port);
    assert!(
        super::wait_until(super::TIMEOUT, || socket.exists()),
        "socket {} not created",
        socket.display()
    );
    (srv, port)
}

/// An initialized data directory in a temporary directory, and a server
/// on a free port (`start_on_free_port`); the server is killed with its
/// process group when dropped unless `stop` ended it first.
pub struct PortServer {
    pub srv: Option<super::Server>,
    pub d: super::DataDir,
    pub port: u16,
    pub tmp: super::TempDir,
}

impl PortServer {
    /// `init` a data directory under a new temporary directory named after
    /// `tag`, then start it with `--set S` for each of `sets`.
    pub fn start(tag: &str, sets: &[&str]) -> PortServer {
        let tmp = super::TempDir::new(tag);
        let d = super::init(&tmp.join("data"), &[]);
        let (srv, port) = start_on_free_port(&d, tmp.path(), sets, &[], &[]);
        PortServer {
            srv: Some(srv),
            d,
            port,
            tmp,
        }
    }

    pub fn socket(&self) -> PathBuf {
        socket_path(&self.d.path, self.port)
    }

    pub fn srv(&self) -> &super::Server {
        self.srv.as_ref().expect("server running")
    }

    /// The pid of the server's child process named `comm`.
    pub fn child(&self, comm: &str) -> i32 {
        self.srv()
            .child_pid(comm)
            .unwrap_or_else(|| panic!("no {comm} child"))
    }

    /// Fast shutdown: the server must exit 0 without a panic (`stop_ok`).
    pub fn stop(&mut self) -> super::Out {
        self.srv.take().expect("server running").stop_ok()
    }

    /// kill -9 of the server and of its children.
    pub fn kill9(&mut self) {
        let kids = self.srv().children();
        self.srv.take().unwrap().kill9_with_children(&kids);
    }

    /// Starts the server again on its port (after `stop` or `kill9`) and
    /// waits until it is ready.
    pub fn restart(&mut self) {
        let port = format!("port={}", self.port);
        let mut srv = super::start_with_env(&self.d.path, self.tmp.path(), &["--set", &port], &[]);
        srv.wait_ready(super::TIMEOUT);
        self.srv = Some(srv);
    }
}

/// True if nothing arrives on `s` within `d`.
pub fn silent_for(s: &mut UnixStream, d: Duration) -> bool {
    use std::os::fd::AsRawFd;
    std::thread::sleep(d);
    let mut b = [0u8; 1];
    // SAFETY: a one-byte peek into a live buffer of our own socket.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            b.as_mut_ptr() as *mut libc::c_void,
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock
}
