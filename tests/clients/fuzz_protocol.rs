//! Protocol fuzzing of a real `postmaster start`, bounded to a few seconds:
//! random and mutated start-up packets over the Unix socket and TCP, and
//! random and mutated message sequences after a successful start-up (simple
//! and extended protocol, SQL built from a token soup, deep nesting, wide
//! target lists, huge lengths, cancel requests with guessed keys).
//!
//! What must hold, whatever arrives:
//! - the postmaster never exits and never crash-restarts (the walwriter and
//!   the checkpointer keep their PIDs: a crash restart replaces both);
//! - memory stays bounded (every child's and the postmaster's RSS, sampled
//!   all along, stays below a bound far under what the inputs could make
//!   an unbounded server allocate);
//! - afterwards a normal session answers, and SIGTERM is a clean exit 0.
//!
//! The generator is a seeded xorshift: the seed is printed, and
//! `WALSHM_FUZZ_SEED` / `WALSHM_FUZZ_SECONDS` replay or lengthen a run.

use crate::common::wire::*;
use crate::common::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Child RSS bound: the session_memory_limit below (16 MB) plus code and
/// shared memory touched; an unbounded reply to the inputs here is >100 MB.
const CHILD_RSS_LIMIT_KB: u64 = 96 * 1024;
/// Postmaster RSS may grow by at most this much over the run.
const POSTMASTER_GROWTH_LIMIT_KB: u64 = 8 * 1024;
const CLIENT_THREADS: u64 = 4;

/// xorshift64*: small, seedable, good enough to pick cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Flips, overwrites, truncates or extends `v` a few times.
fn mutate(rng: &mut Rng, mut v: Vec<u8>) -> Vec<u8> {
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len() as u64) as usize;
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len() as u64) as usize;
                v[i] = *rng.pick(&[0x00, 0xff, 0x7f, 0x80, b'(', b'\'']);
            }
            2 if !v.is_empty() => {
                let keep = rng.below(v.len() as u64) as usize;
                v.truncate(keep);
            }
            3 => {
                let extra = rng.below(32) as usize;
                v.extend(rng.bytes(extra));
            }
            _ if v.len() >= 4 => {
                // A length field replaced by an extreme value.
                let i = rng.below(v.len() as u64 - 3) as usize;
                let len: i32 = *rng.pick(&[0, 3, 4, 5, -1, i32::MAX, i32::MIN, 1 << 30, 10_000]);
                v[i..i + 4].copy_from_slice(&len.to_be_bytes());
            }
            _ => {}
        }
    }
    v
}

/// A first packet: start-up, SSL/GSS requests, cancels, or junk.
fn first_packet(rng: &mut Rng) -> Vec<u8> {
    let params: &[(&str, &str)] = &[("user", "fuzz"), ("database", "fuzz")];
    match rng.below(8) {
        0 => {
            let n = rng.below(64) as usize;
            rng.bytes(n)
        }
        1 => startup_packet_version(rng.next() as i32, params),
        2 => startup_packet_version(*rng.pick(&[80877103, 80877104, 1234 << 16]), &[]),
        3 => cancel_request(rng),
        4 => {
            let opt = rng.bytes(8);
            let opt = String::from_utf8_lossy(&opt).replace('\0', "");
            startup_packet(&[
                ("user", "fuzz"),
                ("options", &opt),
                ("synchronous_commit", "x"),
            ])
        }
        _ => mutate(rng, startup_packet(params)),
    }
}

/// CancelRequest with guessed (often zero) process ID and key.
fn cancel_request(rng: &mut Rng) -> Vec<u8> {
    let (any_pid, any_key) = (rng.next() as i32, rng.next() as i32);
    let pid: i32 = *rng.pick(&[0, -1, 1, i32::MAX, any_pid]);
    let key: i32 = *rng.pick(&[0, -1, any_key]);
    let mut p = 16i32.to_be_bytes().to_vec();
    p.extend(80877102i32.to_be_bytes());
    p.extend(pid.to_be_bytes());
    p.extend(key.to_be_bytes());
    p
}

const TOKENS: &[&str] = &[
    "SELECT",
    "1",
    "-",
    "+",
    "*",
    "/",
    "(",
    ")",
    ",",
    "'x'",
    "$1",
    "$0",
    "$99999",
    "::",
    "text",
    "int8",
    "bytea",
    "NULL",
    "TRUE",
    "repeat('y', 100000)",
    "pg_logical_emit_message",
    "(false, 'p', 'q')",
    "txid_current()",
    "pg_current_wal_lsn()",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    ";",
    "SHOW",
    "SET",
    "synchronous_commit",
    "=",
    "off",
    "CHECKPOINT",
    "AS",
    "x",
    "'",
    "\"",
    "--",
    "/*",
    "E'\\x",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "||",
    "IN",
    "WHERE",
    "FROM",
    "*",
    "\0",
];

/// SQL from the token soup, or one of the known-expensive shapes.
fn sql(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => format!("SELECT {}1{}", "(".repeat(20_000), ")".repeat(20_000)),
        1 => format!("SELECT {}1", "-".repeat(100_000)),
        2 => format!("SELECT {}", vec!["1"; 3000].join(",")),
        3 => format!(
            "SELECT repeat('x', {})",
            rng.pick(&[1 << 20, 40 << 20, -1, 0])
        ),
        _ => {
            let n = 1 + rng.below(24);
            (0..n)
                .map(|_| *rng.pick(TOKENS))
                .collect::<Vec<_>>()
                .join(" ")
        }
    }
}

/// Statement and portal names: unnamed, named, never created.
const NAMES: [&str; 3] = ["", "s1", "nope"];

/// One frontend message, valid in shape or mutated.
fn message(rng: &mut Rng) -> Vec<u8> {
    let text = sql(rng);
    let m = match rng.below(12) {
        0..=3 => msg(b'Q', &cstr(&text)),
        4 => {
            let name = NAMES[rng.below(2) as usize];
            let mut b = cstr(name);
            b.extend(cstr(&text));
            let n = *rng.pick(&[0i16, 1, 2, -1, i16::MAX]);
            b.extend(n.to_be_bytes());
            for _ in 0..n.clamp(0, 3) {
                b.extend((rng.next() as u32).to_be_bytes());
            }
            msg(b'P', &b)
        }
        5 => {
            let mut b = cstr("");
            let name = NAMES[rng.below(2) as usize];
            b.extend(cstr(name));
            let n = rng.below(24) as usize;
            b.extend(rng.bytes(n));
            msg(b'B', &b)
        }
        6 => {
            let mut b = vec![*rng.pick(b"SPx")];
            let name = NAMES[rng.below(3) as usize];
            b.extend(cstr(name));
            msg(*rng.pick(b"DC"), &b)
        }
        7 => {
            let mut b = cstr("");
            b.extend((*rng.pick(&[0i32, 1, -1, i32::MAX])).to_be_bytes());
            msg(b'E', &b)
        }
        8 => msg(*rng.pick(b"SHXdcfp"), &[]),
        9 => {
            let n = rng.below(40) as usize;
            msg(rng.next() as u8, &rng.bytes(n))
        }
        _ => extended_query(&text, &["1", "x"]),
    };
    if rng.chance(25) {
        mutate(rng, m)
    } else {
        m
    }
}

/// Either transport, boxed as one stream type.
enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn open(unix: &Path, port: u16, tcp: bool) -> Option<Conn> {
        let c = if tcp {
            Conn::Tcp(TcpStream::connect(("127.0.0.1", port)).ok()?)
        } else {
            Conn::Unix(UnixStream::connect(unix).ok()?)
        };
        let t = Some(Duration::from_millis(300));
        match &c {
            Conn::Unix(s) => {
                s.set_read_timeout(t).ok()?;
                s.set_write_timeout(t).ok()?;
            }
            Conn::Tcp(s) => {
                s.set_read_timeout(t).ok()?;
                s.set_write_timeout(t).ok()?;
            }
        }
        Some(c)
    }

    fn stream(&mut self) -> &mut dyn ReadWrite {
        match self {
            Conn::Unix(s) => s,
            Conn::Tcp(s) => s,
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Reads whatever the server sends for a short while (it may wait for more
/// input, answer, or close).
fn drain(s: &mut dyn ReadWrite, budget: Duration) {
    let deadline = Instant::now() + budget;
    let mut buf = [0u8; 64 * 1024];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Runs one fuzz case; returns the number of inputs (packets + messages).
fn one_case(rng: &mut Rng, unix: &Path, port: u16) -> u64 {
    let tcp = rng.chance(30);
    let Some(mut c) = Conn::open(unix, port, tcp) else {
        return 0;
    };
    let s = c.stream();
    if tcp || rng.chance(35) {
        let _ = s.write_all(&first_packet(rng));
        drain(s, Duration::from_millis(20));
        return 1;
    }
    // A real start-up first, then messages.
    if s.write_all(&startup_packet(&[("user", "fuzz")])).is_err() {
        return 0;
    }
    if !read_until_ready(s) {
        return 1;
    }
    let n = 1 + rng.below(6);
    for _ in 0..n {
        if s.write_all(&message(rng)).is_err() {
            break;
        }
    }
    drain(
        s,
        Duration::from_millis(if rng.chance(10) { 300 } else { 30 }),
    );
    1 + n
}

/// Reads start-up replies until ReadyForQuery; false if refused or closed.
fn read_until_ready(s: &mut dyn ReadWrite) -> bool {
    while let Some((tag, _)) = read_msg(s) {
        match tag {
            b'Z' => return true,
            b'E' => return false,
            _ => {}
        }
    }
    false
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pid_of(children: &[(i32, String)], comm: &str) -> i32 {
    children
        .iter()
        .find(|(_, c)| c == comm)
        .map(|(p, _)| *p)
        .unwrap_or_else(|| panic!("no {comm} among {children:?}"))
}

/// Samples RSS of the postmaster's children until stopped; returns the
/// largest child RSS seen (kB) and which process it was.
fn watch_memory(pm: i32, stop: Arc<AtomicBool>, worst: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        for (pid, _) in children_of(pm) {
            if let Some(kb) = try_status_kb(pid, "VmRSS") {
                worst.fetch_max(kb, Ordering::Relaxed);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn fuzz_startup_and_messages_over_both_sockets() {
    let tmp = TempDir::new("fuzz");
    let d = init(&tmp.join("data"), &[]);
    let port = free_port();
    let sets = [
        format!("port={port}"),
        "listen_addresses=localhost".into(),
        "max_connections=20".into(),
        "session_memory_limit=16MB".into(),
        "fsync=off".into(),
    ];
    let mut args = Vec::new();
    for s in &sets {
        args.extend(["--set", s.as_str()]);
    }
    let mut srv = Server::start_ready(&d.path, tmp.path(), &args);
    let unix: PathBuf = d.path.join(format!(".s.PGSQL.{port}"));
    let before = srv.wait_children(0);
    let (walwriter, checkpointer) = (
        pid_of(&before, "walwriter"),
        pid_of(&before, "checkpointer"),
    );
    let pm_rss_before = vm_rss_kb(srv.pid);

    let seed = env_u64("WALSHM_FUZZ_SEED", {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        t.map(|d| d.as_nanos() as u64).unwrap_or(1) | 1
    });
    let seconds = env_u64("WALSHM_FUZZ_SECONDS", 12);
    eprintln!("fuzz: seed {seed} (WALSHM_FUZZ_SEED={seed} replays), {seconds} s");

    let stop = Arc::new(AtomicBool::new(false));
    let worst_child = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, worst) = (stop.clone(), worst_child.clone());
        let pm = srv.pid;
        std::thread::spawn(move || watch_memory(pm, stop, worst))
    };
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let clients: Vec<_> = (0..CLIENT_THREADS)
        .map(|t| {
            let unix = unix.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let (mut inputs, mut cases) = (0u64, 0u64);
                while Instant::now() < deadline {
                    inputs += one_case(&mut rng, &unix, port);
                    cases += 1;
                }
                (inputs, cases)
            })
        })
        .collect();
    let (mut inputs, mut cases) = (0, 0);
    for c in clients {
        let (i, n) = c.join().expect("fuzz client thread");
        inputs += i;
        cases += n;
    }
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    eprintln!(
        "fuzz: {inputs} inputs in {cases} connections; largest child RSS {} kB",
        worst_child.load(Ordering::Relaxed)
    );

    assert!(
        srv.try_wait().is_none(),
        "postmaster exited during fuzzing (seed {seed})\n{}",
        srv.stderr()
    );
    assert!(cases > 200, "only {cases} connections in {seconds} s");
    let after = srv.wait_children(0);
    assert_eq!(
        (pid_of(&after, "walwriter"), pid_of(&after, "checkpointer")),
        (walwriter, checkpointer),
        "the server crash-restarted during fuzzing (seed {seed})\n{}",
        srv.stderr()
    );
    let worst = worst_child.load(Ordering::Relaxed);
    assert!(
        worst < CHILD_RSS_LIMIT_KB,
        "a child reached {worst} kB RSS (limit {CHILD_RSS_LIMIT_KB} kB, seed {seed})"
    );
    let growth = vm_rss_kb(srv.pid).saturating_sub(pm_rss_before);
    assert!(
        growth < POSTMASTER_GROWTH_LIMIT_KB,
        "postmaster RSS grew by {growth} kB (seed {seed})"
    );

    let mut s = handshake(&unix).expect("a normal session after fuzzing");
    let r = exchange(&mut s, &msg(b'Q', &cstr("SELECT 1")));
    assert!(
        r.iter().any(|(t, _)| *t == b'D'),
        "SELECT 1 after fuzzing: {r:?}"
    );
    drop(s);
    srv.stop_ok();
}
