//! Run-time settings: every switch, with PostgreSQL's names where one exists.
//!
//! `Settings` is `#[repr(C)]` plain data copied into the shared-memory header
//! at creation, so that every process runs with the same choices. Settings
//! are given as `--set NAME=VALUE` or in `DIR/walshm.conf` (`name = value`
//! lines, `#` comments). An unknown name or a bad value is an error that
//! lists what is valid.
//!
//! One table, one row per setting (as PostgreSQL's guc_tables.c): the
//! [`declare_settings!`] invocation below declares each setting once — its
//! field (name, type, default) and its [`Setting`] row (name, [`Kind`] with
//! unit and range, help, [`Context`], seed). The struct, `Default`,
//! [`SETTINGS`] and the row's accessors are generated from it; the parser
//! ([`Settings::set`]), `--help`, `SHOW` ([`Settings::show`]), the
//! configuration file ([`Settings::describe`]) and every error message read
//! the table and nothing else.
//!
//! Invariants: every row's accessors name that row's field (the macro writes
//! both from one line); the default of every row shows as a value the row's
//! own parser accepts and that reads back unchanged (tested below); a
//! `secret` row's value is never echoed in an error or answered by SHOW.
//!
//! Units: a number is stored in one [`Unit`] and shown (and read when bare)
//! in another of the same family. Memory takes kB/MB/GB, time us/ms/s/min/h;
//! a value must be a whole number of the stored unit (so wal_buffers is a
//! multiple of 8kB) and lie in the row's range.

use crate::variants::{
    parse_bool, Insertion, LockLayout, Reservation, VarAccess, WaitQueue, XidClear,
};
use std::fmt;

/// Capacity of the `password` field (a SCRAM verifier and its NUL).
const PASSWORD_BYTES: usize = 192;

macro_rules! declare_settings {
    ($(
        $(#[$doc:meta])*
        $field:ident: $ty:ty = $default:expr =>
            $name:literal, $kind:expr, $help:expr $(, $option:ident($($arg:expr),*))*;
    )*) => {
        /// Every setting in force for one run.
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Settings {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings { $($field: $default,)* }
            }
        }

        /// Every setting, in declaration order (help, config file, errors).
        pub static SETTINGS: &[Setting] = &[$(
            Setting::new($name, $kind, $help, Access {
                get: {
                    fn get(s: &Settings) -> Value<'_> {
                        Field::value(&s.$field)
                    }
                    get
                },
                put: {
                    fn put(s: &mut Settings, v: Value<'_>) -> bool {
                        match <$ty as Field>::from_value(v) {
                            Some(x) => {
                                s.$field = x;
                                true
                            }
                            None => false,
                        }
                    }
                    put
                },
            })$(.$option($($arg),*))*,
        )*];
    };
}

declare_settings! {
    /// Client backends allowed at once (proc slots = this + auxiliaries).
    max_connections: u32 = 100 =>
        "max_connections", Kind::count(1, 4096), "backends allowed at once";
    /// WAL buffer pages of 8 KiB.
    wal_buffers: u32 = 2048 =>
        "wal_buffers", Kind::int(Unit::PAGES, Unit::PAGES, 4, (1 << 30) / 8192),
        "WAL buffer size in shared memory";
    /// Walwriter sleep between rounds, milliseconds.
    wal_writer_delay_ms: u32 = 200 =>
        "wal_writer_delay", Kind::int(Unit::MS, Unit::MS, 1, 10_000),
        "walwriter sleep between flushes";
    /// Number of WAL insertion locks (PostgreSQL's NUM_XLOGINSERT_LOCKS).
    wal_insert_locks: u32 = 8 =>
        "wal_insert_locks", Kind::count(1, 128), "number of WAL insertion locks";
    /// Call fdatasync on WAL.
    fsync: bool = true =>
        "fsync", Kind::Bool, "fdatasync WAL (off: measure the insert path alone)";
    /// Commits wait for their WAL flush.
    synchronous_commit: bool = true =>
        "synchronous_commit", Kind::Bool, "commits wait for their WAL flush",
        context(Context::Session);
    /// The walwriter initializes WAL buffer pages ahead of insertion.
    wal_preinit: bool = true =>
        "wal_preinit", Kind::Bool, "walwriter pre-initializes WAL pages", seed("003");
    /// LWLock wait queue.
    lwlock_queue: WaitQueue = WaitQueue::Modern =>
        "lwlock_queue", Kind::Enum(WaitQueue::NAMES), "LWLock wait queue", seed("002");
    /// How insertingAt is read and written.
    inserting_at: VarAccess = VarAccess::Atomic =>
        "inserting_at", Kind::Enum(VarAccess::NAMES), "insertingAt access", seed("000");
    /// WAL insertion lock layout.
    insert_lock_layout: LockLayout = LockLayout::Padded =>
        "insert_lock_layout", Kind::Enum(LockLayout::NAMES), "insertion lock layout",
        seed("001");
    /// WAL insertion scheme.
    wal_insertion: Insertion = Insertion::Parallel =>
        "wal_insertion", Kind::Enum(Insertion::NAMES), "insertion scheme", seed("003");
    /// How insert space is reserved (beyond the seeds).
    wal_reservation: Reservation = Reservation::Spinlock =>
        "wal_reservation", Kind::Enum(Reservation::NAMES), "insert space reservation";
    /// XID clear at transaction end.
    xid_clear: XidClear = XidClear::Group =>
        "xid_clear", Kind::Enum(XidClear::NAMES), "XID clear at commit", seed("004");
    /// Seconds between online checkpoints.
    checkpoint_timeout_s: u32 = 300 =>
        "checkpoint_timeout", Kind::int(Unit::S, Unit::S, 1, 86_400),
        "time between checkpoints";
    /// WAL (MB) written before a checkpoint is requested.
    max_wal_size_mb: u32 = 1024 =>
        "max_wal_size", Kind::int(Unit::MB, Unit::MB, 2, 1_000_000),
        "WAL written between checkpoints";
    /// WAL (MB) kept before the last checkpoint's redo point.
    wal_keep_size_mb: u32 = 0 =>
        "wal_keep_size", Kind::int(Unit::MB, Unit::MB, 0, 1_000_000),
        "WAL kept before the last checkpoint";
    /// TCP port, also the number in the Unix socket's name.
    port: u32 = 5432 =>
        "port", Kind::count(1, 65535), "TCP port and Unix socket number";
    /// Directory of the Unix socket (empty: the data directory).
    unix_socket_directories: Text<256> = Text::empty() =>
        "unix_socket_directories",
        Kind::Text { valid: "a directory ('' = the data directory)", check: any_text },
        "where the Unix socket .s.PGSQL.PORT is created";
    /// TCP addresses to listen on (empty: none; loopback only).
    listen_addresses: Text<64> = Text::empty() =>
        "listen_addresses",
        Kind::Text { valid: "'' (none), 'localhost' or '127.0.0.1'", check: loopback_only },
        "TCP listening (loopback only)";
    /// SCRAM-SHA-256 password for TCP connections (empty: TCP refused).
    password: Text<PASSWORD_BYTES> = Text::empty() =>
        "password",
        Kind::Text {
            valid: "SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey> ('' = TCP logins refused)",
            check: scram_verifier_only,
        },
        "SCRAM verifier for TCP logins (plain text: init/start --pwfile FILE or WALSHM_PASSWORD)",
        secret();
    /// Microseconds a connection backend polls its socket without
    /// sleeping before it blocks on the next client message; only while
    /// sessions take at most half the CPUs (0: never poll).
    client_poll_us: u32 = 100 =>
        "client_poll", Kind::int(Unit::US, Unit::US, 0, 10_000),
        "how long a backend polls for the next client message before it sleeps (0 = off), while sessions use at most half the CPUs";
    /// Seconds a client has for the whole start-up and authentication
    /// exchange (PostgreSQL's authentication_timeout).
    authentication_timeout_s: u32 = 60 =>
        "authentication_timeout", Kind::int(Unit::S, Unit::S, 1, 600),
        "time a client has to complete start-up and authentication";
    /// Bytes one session may hold for a single value or a single reply
    /// message; beyond it the statement fails with 53200.
    session_memory_limit: u64 = 256 << 20 =>
        "session_memory_limit", Kind::int(Unit::BYTES, Unit::KB, 1 << 20, 1 << 30),
        "largest value or reply message one session may build (53200 beyond)";
}

// ---- units ----

/// What a number measures, which decides the suffixes it may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// A plain count: no suffix.
    Count,
    /// Bytes: kB, MB, GB.
    Memory,
    /// Microseconds: us, ms, s, min, h.
    Time,
}

const MEMORY_SUFFIXES: &[(&str, u64)] = &[("kB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30)];
const TIME_SUFFIXES: &[(&str, u64)] = &[
    ("us", 1),
    ("ms", 1_000),
    ("s", 1_000_000),
    ("min", 60_000_000),
    ("h", 3_600_000_000),
];

impl Family {
    /// Accepted suffixes with their size in the family's smallest unit,
    /// smallest first.
    fn suffixes(self) -> &'static [(&'static str, u64)] {
        match self {
            Family::Count => &[],
            Family::Memory => MEMORY_SUFFIXES,
            Family::Time => TIME_SUFFIXES,
        }
    }
}

/// A unit a setting is stored or shown in: a family and a size in the
/// family's smallest unit (bytes, microseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    pub family: Family,
    pub scale: u64,
    /// Written after a shown value ("" for counts and pages).
    pub suffix: &'static str,
    /// What a bare number means, for help.
    pub name: &'static str,
}

impl Unit {
    pub const COUNT: Unit = Unit::new(Family::Count, 1, "", "");
    pub const BYTES: Unit = Unit::new(Family::Memory, 1, "", "bytes");
    pub const KB: Unit = Unit::new(Family::Memory, 1 << 10, "kB", "kB");
    pub const MB: Unit = Unit::new(Family::Memory, 1 << 20, "MB", "MB");
    /// WAL buffer pages: shown bare.
    pub const PAGES: Unit = Unit::new(Family::Memory, 8192, "", "pages (8kB)");
    pub const US: Unit = Unit::new(Family::Time, 1, "us", "us");
    pub const MS: Unit = Unit::new(Family::Time, 1_000, "ms", "ms");
    pub const S: Unit = Unit::new(Family::Time, 1_000_000, "s", "seconds");

    const fn new(family: Family, scale: u64, suffix: &'static str, name: &'static str) -> Unit {
        Unit {
            family,
            scale,
            suffix,
            name,
        }
    }

    /// Size of `suffix` ("" = this unit) in the family's smallest unit.
    fn suffix_scale(self, suffix: &str) -> Option<u64> {
        if suffix.is_empty() {
            return Some(self.scale);
        }
        self.family
            .suffixes()
            .iter()
            .find(|(s, _)| s.eq_ignore_ascii_case(suffix))
            .map(|&(_, scale)| scale)
    }

    /// `amount` (in the smallest unit) with the largest suffix that divides
    /// it, for help: 32768 bytes is "32kB".
    fn pretty(self, amount: u64) -> String {
        let best = self
            .family
            .suffixes()
            .iter()
            .rev()
            .find(|(_, scale)| amount != 0 && amount.is_multiple_of(*scale));
        match best {
            Some((suffix, scale)) => format!("{}{suffix}", amount / scale),
            None => amount.to_string(),
        }
    }
}

/// Splits "123kB" into (123, "kB"); None without leading digits.
fn number_and_suffix(value: &str) -> Option<(u64, &str)> {
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    if digits == 0 {
        return None;
    }
    let n = value[..digits].parse().ok()?;
    Some((n, value[digits..].trim()))
}

// ---- rows ----

/// The type of a setting's values, with its unit and range.
#[derive(Clone, Copy)]
pub enum Kind {
    /// on|off (and PostgreSQL's other spellings).
    Bool,
    /// A whole number of `stored` units in `min..=max` (stored units);
    /// shown in `shown`, which a bare number means too.
    Int {
        stored: Unit,
        shown: Unit,
        min: u64,
        max: u64,
    },
    /// One of the names (the variant enums' spellings).
    Enum(&'static [&'static str]),
    /// Text that `check` accepts; `valid` says what, for help and errors.
    Text {
        valid: &'static str,
        check: fn(&Setting, &str) -> Result<(), SettingError>,
    },
}

impl Kind {
    const fn count(min: u64, max: u64) -> Kind {
        Kind::int(Unit::COUNT, Unit::COUNT, min, max)
    }

    const fn int(stored: Unit, shown: Unit, min: u64, max: u64) -> Kind {
        Kind::Int {
            stored,
            shown,
            min,
            max,
        }
    }
}

/// When a setting may change (PostgreSQL's GucContext).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// Fixed when the server starts (PGC_POSTMASTER).
    Postmaster,
    /// The server's value is each session's default; SET changes it for
    /// the session (PGC_USERSET).
    Session,
}

/// A setting's value in its kind's terms, between the parser and a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Bool(bool),
    /// In the row's stored unit.
    Int(u64),
    Enum(&'a str),
    Text(&'a str),
}

/// Reads and writes a row's field (generated by [`declare_settings!`]).
#[derive(Clone, Copy)]
pub struct Access {
    get: fn(&Settings) -> Value<'_>,
    /// False if the value does not fit the field's type.
    put: fn(&mut Settings, Value<'_>) -> bool,
}

/// One row of the table.
#[derive(Clone, Copy)]
pub struct Setting {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub context: Context,
    /// The seed discussion (000..004) whose variant this switches.
    pub seed: Option<&'static str>,
    /// Never echoed in errors, never answered by SHOW.
    pub secret: bool,
    access: Access,
}

impl Setting {
    const fn new(name: &'static str, kind: Kind, help: &'static str, access: Access) -> Setting {
        Setting {
            name,
            kind,
            help,
            context: Context::Postmaster,
            seed: None,
            secret: false,
            access,
        }
    }

    const fn context(mut self, context: Context) -> Setting {
        self.context = context;
        self
    }

    const fn seed(mut self, seed: &'static str) -> Setting {
        self.seed = Some(seed);
        self
    }

    const fn secret(mut self) -> Setting {
        self.secret = true;
        self
    }

    /// What values it takes (for help and errors): "1..=128", "on|off".
    pub fn valid(&self) -> String {
        match self.kind {
            Kind::Bool => "on|off".into(),
            Kind::Enum(names) => names.join("|"),
            Kind::Text { valid, .. } => valid.into(),
            Kind::Int {
                stored,
                shown,
                min,
                max,
            } => {
                let range = format!(
                    "{}..={}",
                    stored.pretty(min * stored.scale),
                    stored.pretty(max * stored.scale)
                );
                // Time suffixes finer than the stored unit only fit whole
                // multiples of it: not worth listing ("1s", not "1000000us").
                let names: Vec<_> = stored
                    .family
                    .suffixes()
                    .iter()
                    .filter(|&&(_, scale)| stored.family == Family::Memory || scale >= stored.scale)
                    .map(|(s, _)| *s)
                    .collect();
                if names.is_empty() {
                    return range;
                }
                format!("{}, or with {}; {range}", shown.name, names.join("/"))
            }
        }
    }

    /// What it does, with its seed and whether a session may SET it.
    pub fn what(&self) -> String {
        let mut s = self.help.to_string();
        if let Some(seed) = self.seed {
            s.push_str(&format!(" (seed {seed})"));
        }
        if self.context == Context::Session {
            s.push_str("; a session may SET it");
        }
        s
    }

    /// The error for a value this row refuses (the value itself is left
    /// out for a secret row).
    pub fn invalid(&self, value: &str) -> SettingError {
        let valid = self.valid();
        let name = self.name;
        if self.secret {
            SettingError(format!(
                "invalid value for setting \"{name}\" (valid: {valid})"
            ))
        } else {
            SettingError(format!(
                "invalid value for setting \"{name}\": \"{value}\" (valid: {valid})"
            ))
        }
    }

    /// Parses `text` (already unquoted) into this row's terms.
    pub fn parse<'t>(&self, text: &'t str) -> Result<Value<'t>, SettingError> {
        let bad = || self.invalid(text);
        match self.kind {
            Kind::Bool => parse_bool(text).map(Value::Bool).ok_or_else(bad),
            Kind::Enum(names) => names
                .iter()
                .find(|n| n.eq_ignore_ascii_case(text))
                .map(|n| Value::Enum(n))
                .ok_or_else(bad),
            Kind::Text { check, .. } => check(self, text).map(|()| Value::Text(text)),
            Kind::Int {
                stored,
                shown,
                min,
                max,
            } => parse_quantity(text, stored, shown)
                .filter(|n| (min..=max).contains(n))
                .map(Value::Int)
                .ok_or_else(bad),
        }
    }

    /// The value in force in `s`, as SHOW prints it: "200ms", "on", "".
    pub fn display(&self, s: &Settings) -> String {
        match ((self.access.get)(s), self.kind) {
            (Value::Bool(b), _) => if b { "on" } else { "off" }.into(),
            (Value::Int(n), Kind::Int { stored, shown, .. }) => {
                format!("{}{}", n * stored.scale / shown.scale, shown.suffix)
            }
            (Value::Int(n), _) => n.to_string(),
            (Value::Enum(t), _) => t.into(),
            (Value::Text(t), _) => t.into(),
        }
    }

    /// The value as a configuration file line writes it (text quoted).
    pub fn config_value(&self, s: &Settings) -> String {
        match self.kind {
            Kind::Text { .. } => format!("'{}'", self.display(s)),
            _ => self.display(s),
        }
    }
}

/// `text` as a whole number of `stored` units: a bare number is in `shown`
/// units, a suffix must belong to their family.
fn parse_quantity(text: &str, stored: Unit, shown: Unit) -> Option<u64> {
    let (n, suffix) = number_and_suffix(text)?;
    let amount = n.checked_mul(shown.suffix_scale(suffix)?)?;
    amount
        .is_multiple_of(stored.scale)
        .then_some(amount / stored.scale)
}

/// The row named `name` (any case, surrounding blanks ignored).
pub fn lookup(name: &str) -> Result<&'static Setting, SettingError> {
    let name = name.trim().to_ascii_lowercase();
    SETTINGS.iter().find(|s| s.name == name).ok_or_else(|| {
        let valid: Vec<_> = SETTINGS.iter().map(|s| s.name).collect();
        SettingError(format!(
            "unrecognized setting \"{name}\" (valid: {})",
            valid.join(", ")
        ))
    })
}

// ---- text checks ----

fn any_text(_: &Setting, _: &str) -> Result<(), SettingError> {
    Ok(())
}

/// TCP listening is loopback only: '' (none), 'localhost' or '127.0.0.1'.
fn loopback_only(row: &Setting, value: &str) -> Result<(), SettingError> {
    match value {
        "" | "localhost" | "127.0.0.1" => Ok(()),
        _ => Err(row.invalid(value)),
    }
}

/// The `password` setting holds only a SCRAM verifier (its full syntax is
/// checked by the protocol crate when the server starts). A plain password
/// is refused without echoing it: on a command line it would be readable
/// in /proc/PID/cmdline by every local user.
fn scram_verifier_only(_: &Setting, value: &str) -> Result<(), SettingError> {
    let verifier_like = value.is_empty()
        || (value.starts_with("SCRAM-SHA-256$") && !value.contains(char::is_whitespace));
    if !verifier_like {
        return Err(SettingError(
            "password must be a SCRAM-SHA-256 verifier (SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>), never a plain password: give the plain password with --pwfile FILE (mode 0600) or the WALSHM_PASSWORD environment variable".into(),
        ));
    }
    if value.len() >= PASSWORD_BYTES || value.contains('\0') {
        return Err(SettingError(format!(
            "password: verifier too long (at most {} bytes)",
            PASSWORD_BYTES - 1
        )));
    }
    Ok(())
}

// ---- field types ----

/// A field type a row can hold: converts to and from [`Value`].
trait Field: Sized {
    fn value(&self) -> Value<'_>;
    fn from_value(v: Value<'_>) -> Option<Self>;
}

impl Field for bool {
    fn value(&self) -> Value<'_> {
        Value::Bool(*self)
    }
    fn from_value(v: Value<'_>) -> Option<Self> {
        match v {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
}

impl Field for u32 {
    fn value(&self) -> Value<'_> {
        Value::Int(u64::from(*self))
    }
    fn from_value(v: Value<'_>) -> Option<Self> {
        u64::from_value(v).and_then(|n| n.try_into().ok())
    }
}

impl Field for u64 {
    fn value(&self) -> Value<'_> {
        Value::Int(*self)
    }
    fn from_value(v: Value<'_>) -> Option<Self> {
        match v {
            Value::Int(n) => Some(n),
            _ => None,
        }
    }
}

impl<const N: usize> Field for Text<N> {
    fn value(&self) -> Value<'_> {
        Value::Text(self.as_str())
    }
    fn from_value(v: Value<'_>) -> Option<Self> {
        match v {
            Value::Text(t) => Text::new(t),
            _ => None,
        }
    }
}

macro_rules! enum_fields {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn value(&self) -> Value<'_> {
                Value::Enum(self.name())
            }
            fn from_value(v: Value<'_>) -> Option<Self> {
                match v {
                    Value::Enum(name) => <$t>::parse(name),
                    _ => None,
                }
            }
        }
    )*};
}

enum_fields!(
    WaitQueue,
    VarAccess,
    LockLayout,
    Insertion,
    Reservation,
    XidClear
);

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

/// A setting name or value that was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError(pub String);

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingError {}

// ---- the whole set ----

impl Settings {
    /// Applies one `NAME=VALUE` (quotes around the value are dropped).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), SettingError> {
        let row = lookup(name)?;
        let value = value.trim().trim_matches('\'').trim_matches('"');
        let parsed = row.parse(value)?;
        if (row.access.put)(self, parsed) {
            Ok(())
        } else {
            Err(row.invalid(value))
        }
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

    /// Every setting as (name, value) in configuration-file form (what
    /// `init` writes, what `set` reads back).
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        SETTINGS
            .iter()
            .map(|row| (row.name, row.config_value(self)))
            .collect()
    }

    /// SHOW NAME: the value in force, or None for an unknown or secret
    /// setting.
    pub fn show(&self, name: &str) -> Option<String> {
        let row = lookup(name).ok()?;
        (!row.secret).then(|| row.display(self))
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
        assert_eq!(s.describe().len(), SETTINGS.len());
    }

    #[test]
    fn every_row_reads_back_its_default_and_is_declared_once() {
        let defaults = Settings::default();
        for (i, row) in SETTINGS.iter().enumerate() {
            let mut s = Settings::default();
            let shown = row.config_value(&defaults);
            s.set(row.name, &shown)
                .unwrap_or_else(|e| panic!("{}: default {shown:?}: {e}", row.name));
            assert_eq!(s, defaults, "{}", row.name);
            assert!(
                SETTINGS[..i].iter().all(|r| r.name != row.name),
                "{} declared twice",
                row.name
            );
        }
    }

    #[test]
    fn each_row_writes_its_own_field() {
        // A changed value of one row changes that row's display only.
        let mut s = Settings::default();
        s.set("wal_insert_locks", "3").unwrap();
        s.set("xid_clear", "exclusive").unwrap();
        let base = Settings::default();
        let changed: Vec<_> = SETTINGS
            .iter()
            .filter(|r| r.display(&s) != r.display(&base))
            .map(|r| r.name)
            .collect();
        assert_eq!(changed, ["wal_insert_locks", "xid_clear"]);
        assert_eq!(s.wal_insert_locks, 3);
        assert_eq!(s.xid_clear, XidClear::Exclusive);
    }

    #[test]
    fn units_and_errors() {
        let mut s = Settings::default();
        s.set("wal_buffers", "16MB").unwrap();
        assert_eq!(s.wal_buffers, 2048);
        assert!(
            s.set("wal_buffers", "12kB").is_err(),
            "not a multiple of 8kB"
        );
        assert!(s.set("wal_buffers", "3").is_err());
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
        assert!(
            s.set("checkpoint_timeout", "1500ms").is_err(),
            "not whole s"
        );
        s.set("checkpoint_timeout", "1h").unwrap();
        assert_eq!(s.checkpoint_timeout_s, 3600);
        s.set("max_wal_size", "2GB").unwrap();
        assert_eq!(s.max_wal_size_mb, 2048);
        assert!(s.set("max_wal_size", "2s").is_err(), "a time for a size");
        s.set("session_memory_limit", "64MB").unwrap();
        assert_eq!(s.session_memory_limit, 64 << 20);
        s.set("session_memory_limit", "2048").unwrap();
        assert_eq!(s.session_memory_limit, 2 << 20, "bare number is kB");
        assert!(s.set("session_memory_limit", "512kB").is_err());
        assert!(s.set("session_memory_limit", "2GB").is_err());
        assert!(s.set("port", "99999999999999999999999").is_err());
        let e = s.set("nope", "1").unwrap_err().0;
        assert!(
            e.contains("unrecognized setting") && e.contains("wal_buffers"),
            "{e}"
        );
        let e = s.set("lwlock_queue", "fast").unwrap_err().0;
        assert!(e.contains("modern|legacy"), "{e}");
        let e = s.set("wal_insert_locks", "0").unwrap_err().0;
        assert!(
            e.contains("invalid value for setting") && e.contains("1..=128"),
            "{e}"
        );
        assert!(s.set("wal_insert_locks", "129").is_err());
        assert!(s.set("listen_addresses", "0.0.0.0").is_err());
        assert!(s.set_assignment("fsync").is_err());
        let e = s
            .apply_config_text("# c\nfsync = off\nbogus = 1\n", "walshm.conf")
            .unwrap_err()
            .0;
        assert!(e.starts_with("walshm.conf:3:"), "{e}");
        assert!(!s.fsync);
    }

    #[test]
    fn help_names_units_seeds_and_ranges() {
        let row = |n| lookup(n).unwrap();
        assert_eq!(row("wal_insert_locks").valid(), "1..=128");
        assert_eq!(row("fsync").valid(), "on|off");
        assert_eq!(
            row("wal_buffers").valid(),
            "pages (8kB), or with kB/MB/GB; 32kB..=1GB"
        );
        assert_eq!(
            row("wal_writer_delay").valid(),
            "ms, or with ms/s/min/h; 1ms..=10s"
        );
        assert!(row("xid_clear").what().ends_with("(seed 004)"));
        assert!(row("synchronous_commit").what().contains("SET"));
    }

    #[test]
    fn show_answers_every_setting_but_the_password() {
        let s = Settings::default();
        assert_eq!(s.show("wal_writer_delay").as_deref(), Some("200ms"));
        assert_eq!(s.show("WAL_BUFFERS").as_deref(), Some("2048"));
        assert_eq!(s.show("session_memory_limit").as_deref(), Some("262144kB"));
        assert_eq!(s.show("listen_addresses").as_deref(), Some(""));
        assert_eq!(s.show("password"), None);
        assert_eq!(s.show("nope"), None);
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
        let long = format!("SCRAM-SHA-256${}", "x".repeat(200));
        let e = s.set("password", &long).unwrap_err().to_string();
        assert!(!e.contains("xxxx") && e.contains("too long"), "{e}");
        assert!(s
            .set_assignment("password=SCRAM-SHA-256$4096:c2FsdA==$a:b")
            .is_ok());
        assert!(s.set("password", "").is_ok());
    }
}
