//! The postmaster's listening sockets: the Unix socket `.s.PGSQL.PORT` (in
//! `unix_socket_directories`, by default the data directory) and, only when
//! `listen_addresses` is set, TCP on 127.0.0.1. Both are non-blocking; the
//! main loop polls them beside its self-pipe and forks one backend per
//! accepted connection.
//!
//! A failed `accept` (out of descriptors: EMFILE, ENFILE; or out of
//! memory) leaves the connection queued and the socket readable, so a loop
//! that polled it again at once would spin. [`AcceptPause`] takes a
//! listener out of the poll set for [`ACCEPT_RETRY`] instead (PostgreSQL's
//! postmaster sleeps 100 ms after a failed accept; leaving the socket out
//! keeps the rest of the loop going meanwhile), with one log line per
//! burst of failures.

use crate::log;
use shmem::Settings;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a listener whose accept failed stays out of the poll set.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// At most one log line per this interval about a repeated condition
/// (failed accepts, a registration cap).
pub const REPEAT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Logs a repeated condition at most once per [`REPEAT_LOG_INTERVAL`].
#[derive(Default)]
pub struct RateLimitedLog {
    logged_at: Option<Instant>,
}

impl RateLimitedLog {
    /// Logs `msg` unless a line went out less than an interval ago.
    pub fn log(&mut self, level: &str, msg: impl FnOnce() -> String) {
        let now = Instant::now();
        if self
            .logged_at
            .is_some_and(|t| now < t + REPEAT_LOG_INTERVAL)
        {
            return;
        }
        self.logged_at = Some(now);
        log(level, &msg());
    }
}

/// The back-off after a failed accept (see the module header).
#[derive(Default)]
pub struct AcceptPause {
    until: Option<Instant>,
    said: RateLimitedLog,
}

impl AcceptPause {
    /// Whether the listener is still paused (clears an expired pause).
    fn active(&mut self) -> bool {
        match self.until {
            Some(t) if Instant::now() < t => true,
            _ => {
                self.until = None;
                false
            }
        }
    }

    /// When the pause ends (for the main loop's poll timeout).
    pub fn resume_at(&self) -> Option<Instant> {
        self.until
    }

    /// Every connection waiting on one listener (`accept` until it would
    /// block), none while paused; a failed accept pauses (and is logged as
    /// about `what`), keeping what was accepted before it.
    pub fn accept_waiting<T>(
        &mut self,
        what: &str,
        mut accept: impl FnMut() -> io::Result<T>,
    ) -> Vec<T> {
        let mut got = Vec::new();
        if self.active() {
            return got;
        }
        loop {
            match accept() {
                Ok(x) => got.push(x),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed(what, &e);
                    return got;
                }
            }
        }
    }

    /// An accept on `what` failed with `e`: pause, and say so (once per
    /// burst).
    fn failed(&mut self, what: &str, e: &io::Error) {
        self.until = Some(Instant::now() + ACCEPT_RETRY);
        self.said.log("LOG", || {
            format!(
                "could not accept new connection on {what}: {e}; retrying in {} ms",
                ACCEPT_RETRY.as_millis()
            )
        });
    }
}

pub struct Listeners {
    pub unix: UnixListener,
    pub unix_path: PathBuf,
    lock_path: PathBuf,
    pub tcp: Option<TcpListener>,
    pause: AcceptPause,
}

pub enum Accepted {
    Unix(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

impl Accepted {
    /// The connection's socket descriptor.
    pub fn raw_fd(&self) -> RawFd {
        match self {
            Accepted::Unix(s) => s.as_raw_fd(),
            Accepted::Tcp(s) => s.as_raw_fd(),
        }
    }
}

impl Listeners {
    /// Opens the sockets. A socket file left by a dead postmaster is
    /// removed (we own the data directory's pid file by now).
    pub fn open(datadir: &Path, s: &Settings) -> Result<Listeners, String> {
        let dir = match s.unix_socket_directories.as_str() {
            "" => datadir.to_path_buf(),
            d => PathBuf::from(d),
        };
        let unix_path = dir.join(format!(".s.PGSQL.{}", s.port));
        let lock_path = dir.join(format!(".s.PGSQL.{}.lock", s.port));
        take_socket_lock(&lock_path)?;
        if unix_path.exists() {
            std::fs::remove_file(&unix_path).map_err(|e| {
                format!(
                    "could not remove stale socket \"{}\": {e}",
                    unix_path.display()
                )
            })?;
        }
        let unix = UnixListener::bind(&unix_path).map_err(|e| {
            format!(
                "could not create Unix socket \"{}\": {e}",
                unix_path.display()
            )
        })?;
        // Owner-only: only our own uid may even try (peer credentials are
        // checked again at start-up).
        std::fs::set_permissions(&unix_path, std::fs::Permissions::from_mode(0o600)).map_err(
            |e| {
                format!(
                    "could not set permissions of \"{}\": {e}",
                    unix_path.display()
                )
            },
        )?;
        unix.set_nonblocking(true).map_err(|e| e.to_string())?;
        let tcp = match s.listen_addresses.as_str() {
            "" => None,
            _ => {
                let addr = format!("127.0.0.1:{}", s.port);
                let l = TcpListener::bind(&addr)
                    .map_err(|e| format!("could not listen on {addr}: {e}"))?;
                l.set_nonblocking(true).map_err(|e| e.to_string())?;
                Some(l)
            }
        };
        Ok(Listeners {
            unix,
            unix_path,
            lock_path,
            tcp,
            pause: AcceptPause::default(),
        })
    }

    /// The sockets to poll (none while a failed accept's pause lasts).
    pub fn fds(&self) -> Vec<RawFd> {
        if self.pause.resume_at().is_some() {
            return Vec::new();
        }
        let mut v = vec![self.unix.as_raw_fd()];
        if let Some(t) = &self.tcp {
            v.push(t.as_raw_fd());
        }
        v
    }

    /// When a paused accept is tried again.
    pub fn resume_at(&self) -> Option<Instant> {
        self.pause.resume_at()
    }

    /// Every connection waiting to be accepted (none while paused; after
    /// a failed accept on the Unix socket the TCP one waits too).
    pub fn accept_all(&mut self) -> Vec<Accepted> {
        let unix = &self.unix;
        let mut out: Vec<Accepted> = self
            .pause
            .accept_waiting("the Unix socket", || unix.accept())
            .into_iter()
            .map(|(s, _)| {
                let _ = s.set_nonblocking(false);
                Accepted::Unix(s)
            })
            .collect();
        if let Some(t) = &self.tcp {
            let tcp = self.pause.accept_waiting("the TCP socket", || t.accept());
            out.extend(tcp.into_iter().map(|(s, _)| {
                let _ = s.set_nonblocking(false);
                let _ = s.set_nodelay(true);
                Accepted::Tcp(s)
            }));
        }
        out
    }
}

/// Creates the socket's lock file (mode 0600, our PID inside), refusing
/// when a live process owns it: two servers must not share a socket name
/// (e.g. the same `unix_socket_directories` and `port`).
fn take_socket_lock(lock_path: &Path) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(lock_path)
        {
            Ok(mut f) => {
                return f
                    .write_all(format!("{}\n", std::process::id()).as_bytes())
                    .map_err(|e| format!("could not write \"{}\": {e}", lock_path.display()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner: i32 = std::fs::read_to_string(lock_path)
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(0);
                if owner > 0 && owner != std::process::id() as i32 && process_exists(owner) {
                    return Err(format!(
                        "socket lock file \"{}\" is held by another server (PID {owner})",
                        lock_path.display()
                    ));
                }
                let _ = std::fs::remove_file(lock_path);
            }
            Err(e) => return Err(format!("could not create \"{}\": {e}", lock_path.display())),
        }
    }
    Err(format!("could not create \"{}\"", lock_path.display()))
}

/// Signal 0 sends nothing; it only checks existence (and that we may
/// signal it).
fn process_exists(pid: i32) -> bool {
    shmem::sys::kill(pid, None)
}

impl Drop for Listeners {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.unix_path);
        let _ = std::fs::remove_file(&self.lock_path);
    }
}
