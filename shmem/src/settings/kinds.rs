//! The machinery of the settings table (PostgreSQL's guc.c beside
//! guc_tables.c): units shared by every numeric setting, the kinds of
//! values, and a row's parsing, display, help and error text. The rows
//! themselves are in the parent module, one per setting.
//!
//! Invariants: a number is stored as a whole number of its row's stored
//! unit, inside the row's range; a row's accessors read and write only its
//! own field; nothing here echoes a secret row's value.

use super::Settings;
use crate::variants::{
    parse_bool, GroupCommit, InsertLockSpread, InsertLockWait, Insertion, LockLayout, Reservation,
    VarAccess, WaitQueue, WalSyncMethod, XidClear,
};
use std::fmt;

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
    pub(super) const fn count(min: u64, max: u64) -> Kind {
        Kind::int(Unit::COUNT, Unit::COUNT, min, max)
    }

    pub(super) const fn int(stored: Unit, shown: Unit, min: u64, max: u64) -> Kind {
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

/// Reads and writes a row's field (generated by the parent's
/// `declare_settings!`).
#[derive(Clone, Copy)]
pub struct Access {
    pub(super) get: fn(&Settings) -> Value<'_>,
    /// False if the value does not fit the field's type.
    pub(super) put: fn(&mut Settings, Value<'_>) -> bool,
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
    pub(super) const fn new(
        name: &'static str,
        kind: Kind,
        help: &'static str,
        access: Access,
    ) -> Setting {
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

    pub(super) const fn context(mut self, context: Context) -> Setting {
        self.context = context;
        self
    }

    pub(super) const fn seed(mut self, seed: &'static str) -> Setting {
        self.seed = Some(seed);
        self
    }

    pub(super) const fn secret(mut self) -> Setting {
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

    /// Copies this row's value from `from` into `to`.
    pub fn copy(&self, from: &Settings, to: &mut Settings) {
        let stored = (self.access.put)(to, (self.access.get)(from));
        debug_assert!(stored, "a row's own value fits its field");
    }

    /// Stores a parsed value in `s`; false if it does not fit the field.
    pub fn store(&self, s: &mut Settings, v: Value<'_>) -> bool {
        (self.access.put)(s, v)
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

// ---- field types ----

/// A field type a row can hold: converts to and from [`Value`].
pub(super) trait Field: Sized {
    fn value(&self) -> Value<'_>;
    fn from_value(v: Value<'_>) -> Option<Self>;
}

/// A field type that is a `Value` variant's own payload.
macro_rules! plain_fields {
    ($($t:ty => $variant:ident),*) => {$(
        impl Field for $t {
            fn value(&self) -> Value<'_> {
                Value::$variant(*self)
            }
            fn from_value(v: Value<'_>) -> Option<Self> {
                match v {
                    Value::$variant(x) => Some(x),
                    _ => None,
                }
            }
        }
    )*};
}

plain_fields!(bool => Bool, u64 => Int);

impl Field for u32 {
    fn value(&self) -> Value<'_> {
        Value::Int(u64::from(*self))
    }
    fn from_value(v: Value<'_>) -> Option<Self> {
        u64::from_value(v).and_then(|n| n.try_into().ok())
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
    XidClear,
    InsertLockSpread,
    GroupCommit,
    InsertLockWait,
    WalSyncMethod,
    crate::variants::CommitReply,
    crate::variants::RecoveryTargetAction
);

/// synchronous_commit: a Text row (its aliases are not listed as valid
/// values) whose field is the parsed level.
impl Field for crate::walsnd::SyncCommit {
    fn value(&self) -> Value<'_> {
        Value::Enum(self.name())
    }
    fn from_value(v: Value<'_>) -> Option<Self> {
        match v {
            Value::Text(t) | Value::Enum(t) => Self::parse(t),
            _ => None,
        }
    }
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

/// A setting name or value that was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError(pub String);

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingError {}
