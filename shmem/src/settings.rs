//! Run-time settings: every switch, with PostgreSQL's names where one exists.
//!
//! `Settings` is `#[repr(C)]` plain data copied into the shared-memory header
//! at creation, so that every process runs with the same choices. Settings
//! are given as `--set NAME=VALUE` or in `DIR/walshm.conf` (`name = value`
//! lines, `#` comments). An unknown name or a bad value is an error that
//! lists what is valid.

use crate::variants::{
    parse_bool, Insertion, LockLayout, Reservation, VarAccess, WaitQueue, XidClear,
};
use std::fmt;

/// Every setting in force for one run.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Client backends allowed at once (proc slots = this + auxiliaries).
    pub max_connections: u32,
    /// WAL buffer pages of 8 KiB.
    pub wal_buffers: u32,
    /// Walwriter sleep between rounds, milliseconds.
    pub wal_writer_delay_ms: u32,
    /// Number of WAL insertion locks (PostgreSQL's NUM_XLOGINSERT_LOCKS).
    pub wal_insert_locks: u32,
    /// Call fdatasync on WAL.
    pub fsync: bool,
    /// Commits wait for their WAL flush.
    pub synchronous_commit: bool,
    /// The walwriter initializes WAL buffer pages ahead of insertion.
    pub wal_preinit: bool,
    pub lwlock_queue: WaitQueue,
    pub inserting_at: VarAccess,
    pub insert_lock_layout: LockLayout,
    pub wal_insertion: Insertion,
    pub wal_reservation: Reservation,
    pub xid_clear: XidClear,
    /// Seconds between online checkpoints.
    pub checkpoint_timeout_s: u32,
    /// WAL (MB) written before a checkpoint is requested.
    pub max_wal_size_mb: u32,
    /// WAL (MB) kept before the last checkpoint's redo point.
    pub wal_keep_size_mb: u32,
    /// TCP port, also the number in the Unix socket's name.
    pub port: u32,
    /// Directory of the Unix socket (empty: the data directory).
    pub unix_socket_directories: Text<256>,
    /// TCP addresses to listen on (empty: none; loopback only).
    pub listen_addresses: Text<64>,
    /// SCRAM-SHA-256 password for TCP connections (empty: TCP refused).
    pub password: Text<192>,
    /// Microseconds a connection backend polls its socket without
    /// sleeping before it blocks on the next client message; only while
    /// sessions take at most half the CPUs (0: never poll).
    pub client_poll_us: u32,
    /// Seconds a client has for the whole start-up and authentication
    /// exchange (PostgreSQL's authentication_timeout).
    pub authentication_timeout_s: u32,
    /// Bytes one session may hold for a single value or a single reply
    /// message; beyond it the statement fails with 53200.
    pub session_memory_limit: u64,
}

/// A short string stored inline (plain data, so it can live in shared
/// memory). Always valid UTF-8, NUL-padded.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Text<const N: usize>([u8; N]);

impl<const N: usize> Text<N> {
    pub const fn empty() -> Self {
        Text([0; N])
    }

    /// None if `s` does not fit (N - 1 bytes at most) or contains NUL.
    pub fn new(s: &str) -> Option<Self> {
        if s.len() >= N || s.contains('\0') {
            return None;
        }
        let mut b = [0; N];
        b[..s.len()].copy_from_slice(s.as_bytes());
        Some(Text(b))
    }

    pub fn as_str(&self) -> &str {
        let end = self.0.iter().position(|&c| c == 0).unwrap_or(N);
        std::str::from_utf8(&self.0[..end]).unwrap_or("")
    }
}

impl<const N: usize> fmt::Debug for Text<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_connections: 100,
            wal_buffers: 2048,
            wal_writer_delay_ms: 200,
            wal_insert_locks: 8,
            fsync: true,
            synchronous_commit: true,
            wal_preinit: true,
            lwlock_queue: WaitQueue::Modern,
            inserting_at: VarAccess::Atomic,
            insert_lock_layout: LockLayout::Padded,
            wal_insertion: Insertion::Parallel,
            wal_reservation: Reservation::Spinlock,
            xid_clear: XidClear::Group,
            checkpoint_timeout_s: 300,
            max_wal_size_mb: 1024,
            wal_keep_size_mb: 0,
            port: 5432,
            unix_socket_directories: Text::empty(),
            listen_addresses: Text::empty(),
            password: Text::empty(),
            client_poll_us: 100,
            authentication_timeout_s: 60,
            session_memory_limit: 256 << 20,
        }
    }
}

/// A setting name or value that was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError(pub String);

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingError {}

/// Name, what values it takes, and what it does (for errors and --help).
pub const SETTINGS_HELP: &[(&str, &str, &str)] = &[
    ("max_connections", "1..=4096", "backends allowed at once"),
    (
        "wal_buffers",
        "pages (8kB) or size with kB/MB/GB, 4 pages..=1GB",
        "WAL buffer size in shared memory",
    ),
    (
        "wal_writer_delay",
        "ms, or with ms/s, 1..=10000 ms",
        "walwriter sleep between flushes",
    ),
    (
        "wal_insert_locks",
        "1..=128",
        "number of WAL insertion locks",
    ),
    (
        "fsync",
        "on|off",
        "fdatasync WAL (off: measure the insert path alone)",
    ),
    (
        "synchronous_commit",
        "on|off",
        "commits wait for their WAL flush",
    ),
    (
        "wal_preinit",
        "on|off",
        "walwriter pre-initializes WAL pages (seed 003)",
    ),
    (
        "lwlock_queue",
        "modern|legacy",
        "LWLock wait queue (seed 002)",
    ),
    (
        "inserting_at",
        "atomic|waitlist",
        "insertingAt access (seed 000)",
    ),
    (
        "insert_lock_layout",
        "padded|packed",
        "insertion lock layout (seed 001)",
    ),
    (
        "wal_insertion",
        "parallel|single",
        "insertion scheme (seed 003)",
    ),
    (
        "wal_reservation",
        "spinlock|atomic",
        "insert space reservation",
    ),
    (
        "xid_clear",
        "group|exclusive",
        "XID clear at commit (seed 004)",
    ),
    (
        "checkpoint_timeout",
        "seconds, or with s/min/h, 1..=86400",
        "time between checkpoints",
    ),
    (
        "max_wal_size",
        "MB, or with MB/GB, 2..=1000000",
        "WAL written between checkpoints",
    ),
    (
        "wal_keep_size",
        "MB, or with MB/GB, 0..=1000000",
        "WAL kept before the last checkpoint",
    ),
    ("port", "1..=65535", "TCP port and Unix socket number"),
    (
        "client_poll",
        "us, or with us/ms, 0..=10000 us (0 = off)",
        "how long a backend polls for the next client message before it sleeps, while sessions use at most half the CPUs",
    ),
    (
        "authentication_timeout",
        "seconds, or with s/min, 1..=600",
        "time a client has to complete start-up and authentication",
    ),
    (
        "session_memory_limit",
        "kB, or with kB/MB/GB, 1MB..=1GB",
        "largest value or reply message one session may build (53200 beyond)",
    ),
    (
        "unix_socket_directories",
        "a directory ('' = the data directory)",
        "where the Unix socket .s.PGSQL.PORT is created",
    ),
    (
        "listen_addresses",
        "'' (none), 'localhost' or '127.0.0.1'",
        "TCP listening (loopback only)",
    ),
    (
        "password",
        "SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey> ('' = TCP logins refused)",
        "SCRAM verifier for TCP logins (plain text: init/start --pwfile FILE or WALSHM_PASSWORD)",
    ),
];

fn valid_names() -> String {
    SETTINGS_HELP
        .iter()
        .map(|(n, _, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `password` setting holds only a SCRAM verifier (its full syntax is
/// checked by the protocol crate when the server starts). A plain password
/// is refused without echoing it: on a command line it would be readable
/// in /proc/PID/cmdline by every local user.
fn password_verifier(value: &str) -> Result<Text<192>, SettingError> {
    let verifier_like = value.is_empty()
        || (value.starts_with("SCRAM-SHA-256$") && !value.contains(char::is_whitespace));
    if !verifier_like {
        return Err(SettingError(
            "password must be a SCRAM-SHA-256 verifier (SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>), never a plain password: give the plain password with --pwfile FILE (mode 0600) or the WALSHM_PASSWORD environment variable".into(),
        ));
    }
    Text::new(value)
        .ok_or_else(|| SettingError("password: verifier too long (at most 191 bytes)".into()))
}

fn bad_value(name: &str, value: &str) -> SettingError {
    let valid = SETTINGS_HELP
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, v, _)| *v)
        .unwrap_or("?");
    SettingError(format!(
        "invalid value for setting \"{name}\": \"{value}\" (valid: {valid})"
    ))
}

/// Splits "123kB" into (123, "kb").
fn number_and_unit(value: &str) -> Option<(u64, String)> {
    let v = value.trim();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    if digits == 0 {
        return None;
    }
    let n: u64 = v[..digits].parse().ok()?;
    Some((n, v[digits..].trim().to_ascii_lowercase()))
}

fn in_range(n: u64, lo: u64, hi: u64) -> Option<u32> {
    (lo..=hi).contains(&n).then_some(n as u32)
}

impl Settings {
    /// Applies one `NAME=VALUE`.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), SettingError> {
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim().trim_matches('\'').trim_matches('"');
        let bad = || bad_value(&name, value);
        match name.as_str() {
            "max_connections" => {
                self.max_connections = number_and_unit(value)
                    .filter(|(_, u)| u.is_empty())
                    .and_then(|(n, _)| in_range(n, 1, 4096))
                    .ok_or_else(bad)?
            }
            "wal_buffers" => {
                let (n, unit) = number_and_unit(value).ok_or_else(bad)?;
                let bytes = match unit.as_str() {
                    "" => n.saturating_mul(8192),
                    "kb" => n.saturating_mul(1024),
                    "mb" => n.saturating_mul(1 << 20),
                    "gb" => n.saturating_mul(1 << 30),
                    _ => return Err(bad()),
                };
                if bytes % 8192 != 0 {
                    return Err(bad());
                }
                self.wal_buffers = in_range(bytes / 8192, 4, (1 << 30) / 8192).ok_or_else(bad)?;
            }
            "wal_writer_delay" => {
                let (n, unit) = number_and_unit(value).ok_or_else(bad)?;
                let ms = match unit.as_str() {
                    "" | "ms" => n,
                    "s" => n.saturating_mul(1000),
                    _ => return Err(bad()),
                };
                self.wal_writer_delay_ms = in_range(ms, 1, 10_000).ok_or_else(bad)?;
            }
            "wal_insert_locks" => {
                self.wal_insert_locks = number_and_unit(value)
                    .filter(|(_, u)| u.is_empty())
                    .and_then(|(n, _)| in_range(n, 1, 128))
                    .ok_or_else(bad)?
            }
            "fsync" => self.fsync = parse_bool(value).ok_or_else(bad)?,
            "synchronous_commit" => self.synchronous_commit = parse_bool(value).ok_or_else(bad)?,
            "wal_preinit" => self.wal_preinit = parse_bool(value).ok_or_else(bad)?,
            "lwlock_queue" => self.lwlock_queue = WaitQueue::parse(value).ok_or_else(bad)?,
            "inserting_at" => self.inserting_at = VarAccess::parse(value).ok_or_else(bad)?,
            "insert_lock_layout" => {
                self.insert_lock_layout = LockLayout::parse(value).ok_or_else(bad)?
            }
            "wal_insertion" => self.wal_insertion = Insertion::parse(value).ok_or_else(bad)?,
            "wal_reservation" => {
                self.wal_reservation = Reservation::parse(value).ok_or_else(bad)?
            }
            "xid_clear" => self.xid_clear = XidClear::parse(value).ok_or_else(bad)?,
            "checkpoint_timeout" => {
                let (n, unit) = number_and_unit(value).ok_or_else(bad)?;
                let s = match unit.as_str() {
                    "" | "s" => n,
                    "min" => n.saturating_mul(60),
                    "h" => n.saturating_mul(3600),
                    _ => return Err(bad()),
                };
                self.checkpoint_timeout_s = in_range(s, 1, 86_400).ok_or_else(bad)?;
            }
            "max_wal_size" => {
                let (n, unit) = number_and_unit(value).ok_or_else(bad)?;
                let mb = match unit.as_str() {
                    "" | "mb" => n,
                    "gb" => n.saturating_mul(1024),
                    _ => return Err(bad()),
                };
                self.max_wal_size_mb = in_range(mb, 2, 1_000_000).ok_or_else(bad)?;
            }
            "wal_keep_size" => {
                let (n, unit) = number_and_unit(value).ok_or_else(bad)?;
                let mb = match unit.as_str() {
                    "" | "mb" => n,
                    "gb" => n.saturating_mul(1024),
                    _ => return Err(bad()),
                };
                self.wal_keep_size_mb = in_range(mb, 0, 1_000_000).ok_or_else(bad)?;
            }
            "port" => {
                self.port = number_and_unit(value)
                    .filter(|(_, u)| u.is_empty())
                    .and_then(|(n, _)| in_range(n, 1, 65535))
                    .ok_or_else(bad)?
            }
            "unix_socket_directories" => {
                self.unix_socket_directories = Text::new(value).ok_or_else(bad)?
            }
            "listen_addresses" => {
                if !["", "localhost", "127.0.0.1"].contains(&value) {
                    return Err(bad());
                }
                self.listen_addresses = Text::new(value).ok_or_else(bad)?;
            }
            "password" => self.password = password_verifier(value)?,
            "client_poll" => {
                let (n, unit) = number_and_unit(value).ok_or_else(bad)?;
                let us = match unit.as_str() {
                    "" | "us" => n,
                    "ms" => n.saturating_mul(1000),
                    _ => return Err(bad()),
                };
                self.client_poll_us = in_range(us, 0, 10_000).ok_or_else(bad)?;
            }
            "authentication_timeout" => {
                let (n, unit) = number_and_unit(value).ok_or_else(bad)?;
                let s = match unit.as_str() {
                    "" | "s" => n,
                    "min" => n.saturating_mul(60),
                    _ => return Err(bad()),
                };
                self.authentication_timeout_s = in_range(s, 1, 600).ok_or_else(bad)?;
            }
            "session_memory_limit" => {
                let (n, unit) = number_and_unit(value).ok_or_else(bad)?;
                let bytes = match unit.as_str() {
                    "" | "kb" => n.saturating_mul(1024),
                    "mb" => n.saturating_mul(1 << 20),
                    "gb" => n.saturating_mul(1 << 30),
                    _ => return Err(bad()),
                };
                if !(1 << 20..=1 << 30).contains(&bytes) {
                    return Err(bad());
                }
                self.session_memory_limit = bytes;
            }
            _ => {
                return Err(SettingError(format!(
                    "unrecognized setting \"{name}\" (valid: {})",
                    valid_names()
                )))
            }
        }
        Ok(())
    }

    /// Applies "NAME=VALUE".
    pub fn set_assignment(&mut self, assignment: &str) -> Result<(), SettingError> {
        let (name, value) = assignment
            .split_once('=')
            .ok_or_else(|| SettingError(format!("expected NAME=VALUE, got \"{assignment}\"")))?;
        self.set(name, value)
    }

    /// Applies a configuration file's text; errors name the line.
    pub fn apply_config_text(&mut self, text: &str, origin: &str) -> Result<(), SettingError> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            self.set_assignment(line)
                .map_err(|e| SettingError(format!("{origin}:{}: {e}", i + 1)))?;
        }
        Ok(())
    }

    /// Every setting as `name = value` lines (what `init` writes, what the
    /// postmaster logs).
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        let onoff = |b: bool| if b { "on" } else { "off" }.to_string();
        vec![
            ("max_connections", self.max_connections.to_string()),
            ("wal_buffers", self.wal_buffers.to_string()),
            (
                "wal_writer_delay",
                format!("{}ms", self.wal_writer_delay_ms),
            ),
            ("wal_insert_locks", self.wal_insert_locks.to_string()),
            ("fsync", onoff(self.fsync)),
            ("synchronous_commit", onoff(self.synchronous_commit)),
            ("wal_preinit", onoff(self.wal_preinit)),
            ("lwlock_queue", self.lwlock_queue.name().into()),
            ("inserting_at", self.inserting_at.name().into()),
            ("insert_lock_layout", self.insert_lock_layout.name().into()),
            ("wal_insertion", self.wal_insertion.name().into()),
            ("wal_reservation", self.wal_reservation.name().into()),
            ("xid_clear", self.xid_clear.name().into()),
            (
                "checkpoint_timeout",
                format!("{}s", self.checkpoint_timeout_s),
            ),
            ("max_wal_size", format!("{}MB", self.max_wal_size_mb)),
            ("wal_keep_size", format!("{}MB", self.wal_keep_size_mb)),
            ("port", self.port.to_string()),
            ("client_poll", format!("{}us", self.client_poll_us)),
            (
                "authentication_timeout",
                format!("{}s", self.authentication_timeout_s),
            ),
            (
                "session_memory_limit",
                format!("{}kB", self.session_memory_limit / 1024),
            ),
            (
                "unix_socket_directories",
                format!("'{}'", self.unix_socket_directories.as_str()),
            ),
            (
                "listen_addresses",
                format!("'{}'", self.listen_addresses.as_str()),
            ),
            ("password", format!("'{}'", self.password.as_str())),
        ]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_described_setting_round_trips() {
        let s = Settings {
            fsync: false,
            lwlock_queue: WaitQueue::Legacy,
            wal_buffers: 64,
            port: 6543,
            password: Text::new(
                "SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0c2FsdA==$qGvNmFBTzLyyEhsDt0wYnVzJYvxQbiAW1N3SOqS6xAo=:V2dNqBZKhBBiIsG0Q5DdfzkLm8AeFAcPbRjEmQEIHtw=",
            )
            .unwrap(),
            listen_addresses: Text::new("localhost").unwrap(),
            client_poll_us: 250,
            authentication_timeout_s: 5,
            session_memory_limit: 3 << 20,
            ..Default::default()
        };
        let mut t = Settings::default();
        for (n, v) in s.describe() {
            t.set(n, &v).unwrap();
        }
        assert_eq!(s, t);
        assert_eq!(s.describe().len(), SETTINGS_HELP.len());
    }

    #[test]
    fn units_and_errors() {
        let mut s = Settings::default();
        s.set("wal_buffers", "16MB").unwrap();
        assert_eq!(s.wal_buffers, 2048);
        s.set("wal_writer_delay", "1s").unwrap();
        assert_eq!(s.wal_writer_delay_ms, 1000);
        s.set("client_poll", "2ms").unwrap();
        assert_eq!(s.client_poll_us, 2000);
        s.set("client_poll", "0").unwrap();
        assert_eq!(s.client_poll_us, 0);
        assert!(s.set("client_poll", "11ms").is_err());
        assert!(s.set("client_poll", "5s").is_err());
        s.set("authentication_timeout", "2min").unwrap();
        assert_eq!(s.authentication_timeout_s, 120);
        assert!(s.set("authentication_timeout", "0").is_err());
        assert!(s.set("authentication_timeout", "11min").is_err());
        s.set("session_memory_limit", "64MB").unwrap();
        assert_eq!(s.session_memory_limit, 64 << 20);
        assert!(s.set("session_memory_limit", "512kB").is_err());
        assert!(s.set("session_memory_limit", "2GB").is_err());
        let e = s.set("nope", "1").unwrap_err().0;
        assert!(
            e.contains("unrecognized setting") && e.contains("wal_buffers"),
            "{e}"
        );
        let e = s.set("lwlock_queue", "fast").unwrap_err().0;
        assert!(e.contains("modern|legacy"), "{e}");
        assert!(s.set("wal_insert_locks", "0").is_err());
        assert!(s.set("wal_insert_locks", "129").is_err());
        assert!(s.set_assignment("fsync").is_err());
        let e = s
            .apply_config_text("# c\nfsync = off\nbogus = 1\n", "walshm.conf")
            .unwrap_err()
            .0;
        assert!(e.starts_with("walshm.conf:3:"), "{e}");
        assert!(!s.fsync);
    }

    #[test]
    fn password_takes_only_a_verifier() {
        let mut s = Settings::default();
        let e = s.set("password", "hunter2").unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "the error echoes the password: {e}");
        assert!(
            e.contains("--pwfile") && e.contains("WALSHM_PASSWORD"),
            "{e}"
        );
        assert!(s
            .set_assignment("password=SCRAM-SHA-256$4096:c2FsdA==$a:b")
            .is_ok());
        assert!(s.set("password", "").is_ok());
    }
}
