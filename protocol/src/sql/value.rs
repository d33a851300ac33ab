//! SQL types walshm knows (with PostgreSQL's OIDs) and values, with their
//! text and binary input/output formats as PostgreSQL defines them.
//!
//! Invariants: `Value` variants always match the `SqlType` they are used
//! with (`Int` for int2/int4/int8/oid, `U64` for pg_lsn/xid8/xid, `Text`
//! for text/varchar/name/inet, `Timestamp` for timestamptz in microseconds
//! since the Unix epoch, `Float` for float8, `Numeric` for numeric,
//! `Record` for anonymous records); input functions range-check and report
//! 22P02/22003/22P03 exactly like PostgreSQL. Timestamps are shown in UTC
//! (walshm's TimeZone), as PostgreSQL shows a timestamptz.

use super::numeric::{self, Numeric};
use crate::error::{sqlstate, SqlError};
use std::cmp::Ordering;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlType {
    Bool,
    Bytea,
    Int2,
    Int4,
    Int8,
    Text,
    Varchar,
    Lsn,
    Xid8,
    Void,
    Float8,
    Numeric,
    Timestamptz,
    Name,
    Oid,
    Xid,
    Inet,
    /// An interval, held as Value::Int microseconds (output only:
    /// pg_stat_replication's lag columns).
    Interval,
    /// An anonymous record (a function returning several OUT columns).
    Record,
    /// An untyped string literal or parameter, before context decides.
    Unknown,
}

/// Every type, for OID lookup.
const ALL_TYPES: &[SqlType] = &[
    SqlType::Bool,
    SqlType::Bytea,
    SqlType::Int8,
    SqlType::Int2,
    SqlType::Int4,
    SqlType::Text,
    SqlType::Unknown,
    SqlType::Varchar,
    SqlType::Void,
    SqlType::Lsn,
    SqlType::Xid8,
    SqlType::Float8,
    SqlType::Numeric,
    SqlType::Timestamptz,
    SqlType::Name,
    SqlType::Oid,
    SqlType::Xid,
    SqlType::Inet,
    SqlType::Interval,
    SqlType::Record,
];

impl SqlType {
    pub fn oid(self) -> u32 {
        match self {
            SqlType::Bool => 16,
            SqlType::Bytea => 17,
            SqlType::Int8 => 20,
            SqlType::Int2 => 21,
            SqlType::Int4 => 23,
            SqlType::Text => 25,
            SqlType::Unknown => 705,
            SqlType::Varchar => 1043,
            SqlType::Void => 2278,
            SqlType::Lsn => 3220,
            SqlType::Xid8 => 5069,
            SqlType::Float8 => 701,
            SqlType::Numeric => 1700,
            SqlType::Timestamptz => 1184,
            SqlType::Name => 19,
            SqlType::Oid => 26,
            SqlType::Xid => 28,
            SqlType::Inet => 869,
            SqlType::Interval => 1186,
            SqlType::Record => 2249,
        }
    }

    pub fn from_oid(oid: u32) -> Option<SqlType> {
        ALL_TYPES.iter().copied().find(|t| t.oid() == oid)
    }

    /// typlen for RowDescription.
    pub fn typlen(self) -> i16 {
        match self {
            SqlType::Bool => 1,
            SqlType::Int2 => 2,
            SqlType::Int4 | SqlType::Void | SqlType::Oid | SqlType::Xid => 4,
            SqlType::Int8
            | SqlType::Lsn
            | SqlType::Xid8
            | SqlType::Float8
            | SqlType::Timestamptz => 8,
            SqlType::Name => 64,
            SqlType::Interval => 16,
            SqlType::Unknown => -2,
            SqlType::Bytea
            | SqlType::Text
            | SqlType::Varchar
            | SqlType::Numeric
            | SqlType::Inet
            | SqlType::Record => -1,
        }
    }

    /// The name PostgreSQL's format_type() prints (in error messages).
    pub fn display_name(self) -> &'static str {
        match self {
            SqlType::Bool => "boolean",
            SqlType::Bytea => "bytea",
            SqlType::Int2 => "smallint",
            SqlType::Int4 => "integer",
            SqlType::Int8 => "bigint",
            SqlType::Text => "text",
            SqlType::Varchar => "character varying",
            SqlType::Lsn => "pg_lsn",
            SqlType::Xid8 => "xid8",
            SqlType::Void => "void",
            SqlType::Float8 => "double precision",
            SqlType::Numeric => "numeric",
            SqlType::Timestamptz => "timestamp with time zone",
            SqlType::Name => "name",
            SqlType::Oid => "oid",
            SqlType::Xid => "xid",
            SqlType::Inet => "inet",
            SqlType::Interval => "interval",
            SqlType::Record => "record",
            SqlType::Unknown => "unknown",
        }
    }

    /// The catalog name (typname), used as a column name for casts of literals.
    pub fn typname(self) -> &'static str {
        match self {
            SqlType::Bool => "bool",
            SqlType::Int2 => "int2",
            SqlType::Int4 => "int4",
            SqlType::Int8 => "int8",
            SqlType::Varchar => "varchar",
            SqlType::Float8 => "float8",
            SqlType::Timestamptz => "timestamptz",
            other => other.display_name(),
        }
    }

    /// Resolves a type name written in SQL.
    pub fn from_name(name: &str) -> Result<SqlType, SqlError> {
        Ok(match name {
            "bool" | "boolean" => SqlType::Bool,
            "bytea" => SqlType::Bytea,
            "int2" | "smallint" => SqlType::Int2,
            "int" | "int4" | "integer" => SqlType::Int4,
            "int8" | "bigint" => SqlType::Int8,
            "text" => SqlType::Text,
            "varchar" | "character varying" => SqlType::Varchar,
            "pg_lsn" => SqlType::Lsn,
            "xid8" => SqlType::Xid8,
            "void" => SqlType::Void,
            "unknown" => SqlType::Unknown,
            "float8" | "double precision" => SqlType::Float8,
            "numeric" | "decimal" => SqlType::Numeric,
            "timestamptz" | "timestamp with time zone" => SqlType::Timestamptz,
            "name" => SqlType::Name,
            "oid" => SqlType::Oid,
            "xid" => SqlType::Xid,
            "inet" => SqlType::Inet,
            "interval" => SqlType::Interval,
            "record" => SqlType::Record,
            _ => {
                return Err(SqlError::error(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("type \"{name}\" does not exist"),
                ))
            }
        })
    }

    pub fn is_integer(self) -> bool {
        matches!(self, SqlType::Int2 | SqlType::Int4 | SqlType::Int8)
    }

    /// Integers, numeric and float8: what arithmetic takes.
    pub fn is_numeric(self) -> bool {
        self.is_integer() || matches!(self, SqlType::Numeric | SqlType::Float8)
    }

    /// Types whose values are strings (text, varchar, name).
    pub fn is_string(self) -> bool {
        matches!(self, SqlType::Text | SqlType::Varchar | SqlType::Name)
    }

    /// Implicit (assignment-free) coercion PostgreSQL applies to function arguments.
    pub fn coerces_implicitly_to(self, target: SqlType) -> bool {
        self == target
            || matches!(
                (self, target),
                (SqlType::Int2, SqlType::Int4 | SqlType::Int8)
                    | (SqlType::Int4, SqlType::Int8)
                    | (
                        SqlType::Int2 | SqlType::Int4 | SqlType::Int8,
                        SqlType::Numeric | SqlType::Float8
                    )
                    | (SqlType::Numeric, SqlType::Float8)
                    | (SqlType::Varchar | SqlType::Name, SqlType::Text)
                    | (SqlType::Text, SqlType::Varchar)
            )
    }
}

/// A float8 compared by its bits (so values can be `Eq`; SQL comparison
/// is `compare_values`).
#[derive(Debug, Clone, Copy)]
pub struct F64(pub f64);

impl PartialEq for F64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for F64 {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Text(String),
    Bytea(Vec<u8>),
    /// pg_lsn, xid8 and xid.
    U64(u64),
    Void,
    Float(F64),
    /// Boxed: keeps `Value` at 32 bytes (an i128 would make it 48).
    Numeric(Box<Numeric>),
    /// timestamptz: microseconds since 1970-01-01 00:00:00 UTC.
    Timestamp(i64),
    /// A record's fields with their types.
    Record(Vec<(Value, SqlType)>),
}

impl Value {
    pub fn numeric(n: Numeric) -> Value {
        Value::Numeric(Box::new(n))
    }
}

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_US: i64 = walformat::PG_EPOCH_UNIX_SECS * 1_000_000;

/// A timestamptz as PostgreSQL prints it with TimeZone UTC and DateStyle
/// ISO: `2026-12-01 11:59:23.123456+00` (trailing zeros of the fraction
/// dropped, no fraction when it is zero).
pub fn format_timestamp(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    let mut s = walformat::format_unix_secs(secs);
    if frac != 0 {
        let f = format!("{frac:06}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    s.push_str("+00");
    s
}

/// float8's output as PostgreSQL 15 prints it: the shortest text that reads
/// back exactly, exponent form below 1e-4 and from 1e15.
pub fn format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e15).contains(&a) {
        let e = format!("{f:e}");
        let (m, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

/// A record's text form: `(a,b)` with values quoted where needed.
fn format_record(fields: &[(Value, SqlType)]) -> String {
    let parts: Vec<String> = fields
        .iter()
        .map(|(v, t)| match format_text(v, *t) {
            None => String::new(),
            Some(bytes) => {
                let s = String::from_utf8_lossy(&bytes).into_owned();
                let needs_quotes = s.is_empty()
                    || s.contains(|c: char| "(),\\\"".contains(c) || c.is_whitespace());
                if needs_quotes {
                    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\"\""))
                } else {
                    s
                }
            }
        })
        .collect();
    format!("({})", parts.join(","))
}

/// inet's binary form: family, bits, is_cidr, length, address bytes.
fn inet_binary(text: &str) -> Vec<u8> {
    match text.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => [&[2u8, 32, 0, 4][..], &a.octets()].concat(),
        Ok(std::net::IpAddr::V6(a)) => [&[3u8, 128, 0, 16][..], &a.octets()].concat(),
        Err(_) => Vec::new(),
    }
}

/// SQL comparison of two non-NULL values of comparable types (None: NULL involved).
pub fn compare_values(a: &Value, b: &Value) -> Option<Ordering> {
    Some(match (a, b) {
        (Value::Null, _) | (_, Value::Null) => return None,
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::U64(x), Value::U64(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bytea(x), Value::Bytea(y)) => x.cmp(y),
        (Value::Timestamp(x), Value::Timestamp(y)) => x.cmp(y),
        (Value::Float(x), Value::Float(y)) => x.0.total_cmp(&y.0),
        (Value::Numeric(x), Value::Numeric(y)) => x.compare(**y),
        (Value::Int(x), Value::Numeric(y)) => Numeric::from_int(*x).compare(**y),
        (Value::Numeric(x), Value::Int(y)) => x.compare(Numeric::from_int(*y)),
        (Value::Int(x), Value::Float(y)) => (*x as f64).total_cmp(&y.0),
        (Value::Float(x), Value::Int(y)) => x.0.total_cmp(&(*y as f64)),
        (Value::Numeric(x), Value::Float(y)) => x.to_f64().total_cmp(&y.0),
        (Value::Float(x), Value::Numeric(y)) => x.0.total_cmp(&y.to_f64()),
        _ => Ordering::Equal,
    })
}

/// Formats an LSN as PostgreSQL does: `%X/%X`.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

fn invalid_syntax(ty: SqlType, input: &str) -> SqlError {
    SqlError::error(
        sqlstate::INVALID_TEXT_REPRESENTATION,
        format!(
            "invalid input syntax for type {}: \"{input}\"",
            ty.display_name()
        ),
    )
}

fn parse_integer(ty: SqlType, input: &str) -> Result<Value, SqlError> {
    let t = input.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid_syntax(ty, input));
    }
    let (min, max) = match ty {
        SqlType::Int2 => (i16::MIN as i64, i16::MAX as i64),
        SqlType::Int4 => (i32::MIN as i64, i32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    };
    match t.parse::<i64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(Value::Int(v)),
        _ => Err(SqlError::error(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "value \"{input}\" is out of range for type {}",
                ty.display_name()
            ),
        )),
    }
}

/// PostgreSQL's parse_bool: case-insensitive unique prefixes of true/false/yes/no, on/off, 1/0.
fn parse_bool(input: &str) -> Option<bool> {
    let s = input.trim().to_ascii_lowercase();
    if s.is_empty() {
        return None;
    }
    let prefix_of = |word: &str, min: usize| s.len() >= min && word.starts_with(s.as_str());
    if prefix_of("true", 1) || prefix_of("yes", 1) || prefix_of("on", 2) || s == "1" {
        Some(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || s == "0" {
        Some(false)
    } else {
        None
    }
}

fn parse_bytea(input: &str) -> Result<Vec<u8>, SqlError> {
    if let Some(hex) = input.strip_prefix("\\x") {
        return parse_hex(hex);
    }
    let b = input.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
        } else if b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else if let Some(oct) = b.get(i + 1..i + 4).filter(|o| {
            matches!(o[0], b'0'..=b'3')
                && matches!(o[1], b'0'..=b'7')
                && matches!(o[2], b'0'..=b'7')
        }) {
            out.push((oct[0] - b'0') * 64 + (oct[1] - b'0') * 8 + (oct[2] - b'0'));
            i += 4;
        } else {
            return Err(invalid_syntax(SqlType::Bytea, input));
        }
    }
    Ok(out)
}

fn parse_hex(hex: &str) -> Result<Vec<u8>, SqlError> {
    let mut out = Vec::with_capacity(hex.len() / 2);
    let mut chars = hex.chars().filter(|c| !c.is_ascii_whitespace());
    while let Some(hi) = chars.next() {
        let digit = |c: char| {
            c.to_digit(16).ok_or_else(|| {
                SqlError::error(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!("invalid hexadecimal digit: \"{c}\""),
                )
            })
        };
        let h = digit(hi)?;
        let lo = chars.next().ok_or_else(|| {
            SqlError::error(
                sqlstate::INVALID_PARAMETER_VALUE,
                "invalid hexadecimal data: odd number of digits",
            )
        })?;
        out.push((h * 16 + digit(lo)?) as u8);
    }
    Ok(out)
}

fn parse_lsn(input: &str) -> Option<u64> {
    let (hi, lo) = input.trim().split_once('/')?;
    let ok = |s: &str| !s.is_empty() && s.len() <= 8 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !ok(hi) || !ok(lo) {
        return None;
    }
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// Text input function of `ty`.
pub fn parse_text(ty: SqlType, input: &str) -> Result<Value, SqlError> {
    match ty {
        SqlType::Bool => parse_bool(input)
            .map(Value::Bool)
            .ok_or_else(|| invalid_syntax(ty, input)),
        SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => parse_integer(ty, input),
        SqlType::Text | SqlType::Varchar | SqlType::Unknown => Ok(Value::Text(input.to_string())),
        SqlType::Bytea => parse_bytea(input).map(Value::Bytea),
        SqlType::Lsn => parse_lsn(input)
            .map(Value::U64)
            .ok_or_else(|| invalid_syntax(ty, input)),
        SqlType::Xid8 => input
            .trim()
            .parse::<u64>()
            .map(Value::U64)
            .map_err(|_| invalid_syntax(ty, input)),
        SqlType::Void => Ok(Value::Void),
        SqlType::Float8 => parse_float(input),
        SqlType::Numeric => numeric::parse(input).map(Value::numeric),
        SqlType::Name => Ok(Value::Text(input.chars().take(63).collect())),
        SqlType::Oid | SqlType::Xid => input
            .trim()
            .parse::<u32>()
            .map(|v| {
                if ty == SqlType::Oid {
                    Value::Int(i64::from(v))
                } else {
                    Value::U64(u64::from(v))
                }
            })
            .map_err(|_| invalid_syntax(ty, input)),
        SqlType::Inet => input
            .trim()
            .parse::<std::net::IpAddr>()
            .map(|a| Value::Text(a.to_string()))
            .map_err(|_| invalid_syntax(ty, input)),
        SqlType::Interval => super::interval::parse(input).map(Value::Int),
        SqlType::Timestamptz | SqlType::Record => Err(SqlError::not_supported(format!(
            "input of type {} is not supported by walshm",
            ty.display_name()
        ))),
    }
}

fn parse_float(input: &str) -> Result<Value, SqlError> {
    let t = input.trim();
    let f = match t.to_ascii_lowercase().as_str() {
        "nan" => f64::NAN,
        "infinity" | "inf" | "+infinity" | "+inf" => f64::INFINITY,
        "-infinity" | "-inf" => f64::NEG_INFINITY,
        _ if t
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
            && !t.is_empty() =>
        {
            t.parse::<f64>()
                .map_err(|_| invalid_syntax(SqlType::Float8, input))?
        }
        _ => return Err(invalid_syntax(SqlType::Float8, input)),
    };
    Ok(Value::Float(F64(f)))
}

/// Binary input (receive) function of `ty`, for Bind parameter `index` (0-based).
pub fn parse_binary(ty: SqlType, bytes: &[u8], index: usize) -> Result<Value, SqlError> {
    let bad = || {
        SqlError::error(
            sqlstate::INVALID_BINARY_REPRESENTATION,
            format!(
                "incorrect binary data format in bind parameter {}",
                index + 1
            ),
        )
    };
    let fixed = |n: usize| {
        if bytes.len() == n {
            Ok(bytes)
        } else {
            Err(bad())
        }
    };
    Ok(match ty {
        SqlType::Bool => Value::Bool(fixed(1)?[0] != 0),
        SqlType::Int2 => {
            Value::Int(i16::from_be_bytes(fixed(2)?.try_into().map_err(|_| bad())?) as i64)
        }
        SqlType::Int4 => {
            Value::Int(i32::from_be_bytes(fixed(4)?.try_into().map_err(|_| bad())?) as i64)
        }
        SqlType::Int8 => Value::Int(i64::from_be_bytes(fixed(8)?.try_into().map_err(|_| bad())?)),
        SqlType::Float8 => Value::Float(F64(f64::from_be_bytes(
            fixed(8)?.try_into().map_err(|_| bad())?,
        ))),
        SqlType::Oid => {
            Value::Int(u32::from_be_bytes(fixed(4)?.try_into().map_err(|_| bad())?) as i64)
        }
        SqlType::Xid => {
            Value::U64(u32::from_be_bytes(fixed(4)?.try_into().map_err(|_| bad())?) as u64)
        }
        SqlType::Timestamptz => Value::Timestamp(
            i64::from_be_bytes(fixed(8)?.try_into().map_err(|_| bad())?)
                .checked_add(PG_EPOCH_US)
                .ok_or_else(bad)?,
        ),
        SqlType::Numeric | SqlType::Inet | SqlType::Interval | SqlType::Record => {
            return Err(SqlError::not_supported(format!(
                "binary input of type {} is not supported by walshm",
                ty.display_name()
            )))
        }
        SqlType::Lsn | SqlType::Xid8 => {
            Value::U64(u64::from_be_bytes(fixed(8)?.try_into().map_err(|_| bad())?))
        }
        SqlType::Text | SqlType::Varchar | SqlType::Name | SqlType::Unknown => {
            Value::Text(String::from_utf8(bytes.to_vec()).map_err(|_| {
                SqlError::error(
                    sqlstate::CHARACTER_NOT_IN_REPERTOIRE,
                    "invalid byte sequence for encoding \"UTF8\"",
                )
            })?)
        }
        SqlType::Bytea => Value::Bytea(bytes.to_vec()),
        SqlType::Void => Value::Void,
    })
}

/// Text output function; None for NULL.
pub fn format_text(value: &Value, ty: SqlType) -> Option<Vec<u8>> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => {
            if *b {
                b"t".to_vec()
            } else {
                b"f".to_vec()
            }
        }
        Value::Int(us) if ty == SqlType::Interval => super::interval::format(*us).into_bytes(),
        Value::Int(i) => i.to_string().into_bytes(),
        Value::Text(s) => s.clone().into_bytes(),
        Value::Bytea(b) => {
            let mut s = String::with_capacity(2 + 2 * b.len());
            s.push_str("\\x");
            for byte in b {
                s.push_str(&format!("{byte:02x}"));
            }
            s.into_bytes()
        }
        Value::U64(v) if ty == SqlType::Lsn => format_lsn(*v).into_bytes(),
        Value::U64(v) => v.to_string().into_bytes(),
        Value::Void => Vec::new(),
        Value::Float(f) => format_float(f.0).into_bytes(),
        Value::Numeric(n) => n.to_text().into_bytes(),
        Value::Timestamp(us) => format_timestamp(*us).into_bytes(),
        Value::Record(fields) => format_record(fields).into_bytes(),
    })
}

/// Binary output (send) function; None for NULL.
pub fn format_binary(value: &Value, ty: SqlType) -> Option<Vec<u8>> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => vec![*b as u8],
        // Provably in range: an Int of type int2/int4 only comes from a
        // range-checked input function, an i16/i32 binary value, a literal
        // typed int4 because it fits, or a bool (0/1) (module invariant).
        Value::Int(i) => match ty {
            SqlType::Int2 => (*i as i16).to_be_bytes().to_vec(),
            SqlType::Int4 => (*i as i32).to_be_bytes().to_vec(),
            SqlType::Oid => (*i as u32).to_be_bytes().to_vec(),
            // interval_send: microseconds, days, months.
            SqlType::Interval => [i.to_be_bytes(), [0; 8]].concat(),
            _ => i.to_be_bytes().to_vec(),
        },
        Value::Text(s) if ty == SqlType::Inet => inet_binary(s),
        Value::Text(s) => s.clone().into_bytes(),
        Value::Bytea(b) => b.clone(),
        Value::U64(v) if ty == SqlType::Xid => (*v as u32).to_be_bytes().to_vec(),
        Value::U64(v) => v.to_be_bytes().to_vec(),
        Value::Void => Vec::new(),
        Value::Float(f) => f.0.to_bits().to_be_bytes().to_vec(),
        Value::Numeric(n) => n.to_binary(),
        Value::Timestamp(us) => us.wrapping_sub(PG_EPOCH_US).to_be_bytes().to_vec(),
        Value::Record(fields) => record_binary(fields),
    })
}

/// record_send: field count, then each field's type OID, length (-1 for
/// NULL) and binary value.
fn record_binary(fields: &[(Value, SqlType)]) -> Vec<u8> {
    let mut out = (fields.len() as i32).to_be_bytes().to_vec();
    for (v, t) in fields {
        out.extend_from_slice(&t.oid().to_be_bytes());
        match format_binary(v, *t) {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(b) => {
                out.extend_from_slice(&(b.len() as i32).to_be_bytes());
                out.extend_from_slice(&b);
            }
        }
    }
    out
}

/// `format_text` of an owned value: a text payload is moved, not copied.
pub fn into_text_format(value: Value, ty: SqlType) -> Option<Vec<u8>> {
    match value {
        Value::Text(s) => Some(s.into_bytes()),
        other => format_text(&other, ty),
    }
}

/// `format_binary` of an owned value: a text or bytea payload is moved, not copied.
pub fn into_binary_format(value: Value, ty: SqlType) -> Option<Vec<u8>> {
    match value {
        Value::Text(s) if ty != SqlType::Inet => Some(s.into_bytes()),
        Value::Bytea(b) => Some(b),
        other => format_binary(&other, ty),
    }
}

fn out_of_range(t: SqlType) -> SqlError {
    SqlError::error(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{} out of range", t.display_name()),
    )
}

/// Explicit cast of a value to `target` (CAST / `::`), via PostgreSQL's
/// built-in casts or, failing those, I/O conversion through text.
pub fn cast(value: Value, from: SqlType, target: SqlType) -> Result<Value, SqlError> {
    if value == Value::Null || from == target {
        return Ok(value);
    }
    match (&value, target) {
        (Value::Int(i), t) if t.is_integer() => parse_integer(t, &i.to_string()),
        (Value::Int(i), SqlType::Numeric) => Ok(Value::numeric(Numeric::from_int(*i))),
        (Value::Int(i), SqlType::Float8) => Ok(Value::Float(F64(*i as f64))),
        (Value::Numeric(n), t) if t.is_integer() => {
            parse_integer(t, &n.to_i64().map_err(|_| out_of_range(t))?.to_string())
                .map_err(|_| out_of_range(t))
        }
        (Value::Numeric(n), SqlType::Float8) => Ok(Value::Float(F64(n.to_f64()))),
        (Value::Float(f), SqlType::Numeric) => Numeric::from_f64(f.0).map(Value::numeric),
        (Value::Float(f), t) if t.is_integer() => {
            let r = f.0.round();
            if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&r) {
                return Err(out_of_range(t));
            }
            parse_integer(t, &(r as i64).to_string()).map_err(|_| out_of_range(t))
        }
        (Value::Bool(b), SqlType::Int4) => Ok(Value::Int(*b as i64)),
        (Value::Int(i), SqlType::Bool) if from == SqlType::Int4 => Ok(Value::Bool(*i != 0)),
        (Value::Void, _) => Err(SqlError::error(
            sqlstate::CANNOT_COERCE,
            format!("cannot cast type void to {}", target.display_name()),
        )),
        _ => {
            let text = format_text(&value, from).unwrap_or_default();
            let text = String::from_utf8(text).map_err(|_| {
                SqlError::error(
                    sqlstate::CHARACTER_NOT_IN_REPERTOIRE,
                    "invalid byte sequence for encoding \"UTF8\"",
                )
            })?;
            parse_text(target, &text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_formatting_matches_postgres() {
        assert_eq!(format_lsn(0x1_0000_0028), "1/28");
        assert_eq!(format_lsn(0x16B3748), "0/16B3748");
        assert_eq!(
            parse_text(SqlType::Lsn, "1/28").unwrap(),
            Value::U64(0x1_0000_0028)
        );
        assert!(parse_text(SqlType::Lsn, "1-28").is_err());
    }

    #[test]
    fn integer_input_errors() {
        assert_eq!(parse_text(SqlType::Int4, " 42 ").unwrap(), Value::Int(42));
        let e = parse_text(SqlType::Int4, "abc").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("22P02", "invalid input syntax for type integer: \"abc\"")
        );
        let e = parse_text(SqlType::Int4, "9999999999").unwrap_err();
        assert_eq!(e.code, "22003");
        assert_eq!(
            parse_text(SqlType::Int8, "9999999999").unwrap(),
            Value::Int(9_999_999_999)
        );
    }

    #[test]
    fn bool_input_accepts_postgres_spellings() {
        for t in ["t", "TRUE", "yes", "on", "1", " tr "] {
            assert_eq!(
                parse_text(SqlType::Bool, t).unwrap(),
                Value::Bool(true),
                "{t}"
            );
        }
        for f in ["f", "false", "n", "off", "0"] {
            assert_eq!(
                parse_text(SqlType::Bool, f).unwrap(),
                Value::Bool(false),
                "{f}"
            );
        }
        assert!(parse_text(SqlType::Bool, "o").is_err());
        assert!(parse_text(SqlType::Bool, "maybe").is_err());
    }

    #[test]
    fn bytea_round_trips() {
        assert_eq!(
            parse_text(SqlType::Bytea, "\\x00ff41").unwrap(),
            Value::Bytea(vec![0, 255, 65])
        );
        assert_eq!(
            parse_text(SqlType::Bytea, "a\\\\b\\001").unwrap(),
            Value::Bytea(b"a\\b\x01".to_vec())
        );
        assert_eq!(
            format_text(&Value::Bytea(vec![0, 255]), SqlType::Bytea).unwrap(),
            b"\\x00ff"
        );
        assert!(parse_text(SqlType::Bytea, "\\x0").is_err());
        assert!(parse_text(SqlType::Bytea, "\\xzz").is_err());
        assert!(parse_text(SqlType::Bytea, "a\\9").is_err());
    }

    #[test]
    fn binary_formats() {
        assert_eq!(
            parse_binary(SqlType::Int4, &7i32.to_be_bytes(), 0).unwrap(),
            Value::Int(7)
        );
        assert_eq!(
            parse_binary(SqlType::Int4, &[1, 2], 0).unwrap_err().code,
            "22P03"
        );
        assert_eq!(
            format_binary(&Value::U64(5), SqlType::Lsn).unwrap(),
            5u64.to_be_bytes()
        );
        assert_eq!(
            format_binary(&Value::Int(5), SqlType::Int4).unwrap(),
            5i32.to_be_bytes()
        );
        assert_eq!(
            format_binary(&Value::Bool(true), SqlType::Bool).unwrap(),
            vec![1]
        );
    }

    #[test]
    fn casts() {
        assert_eq!(
            cast(Value::Int(5), SqlType::Int4, SqlType::Text).unwrap(),
            Value::Text("5".into())
        );
        assert_eq!(
            cast(Value::Text("x".into()), SqlType::Text, SqlType::Bytea).unwrap(),
            Value::Bytea(b"x".to_vec())
        );
        assert_eq!(
            cast(Value::U64(0x10), SqlType::Lsn, SqlType::Text).unwrap(),
            Value::Text("0/10".into())
        );
        assert_eq!(
            cast(Value::Int(1 << 40), SqlType::Int8, SqlType::Int4)
                .unwrap_err()
                .code,
            "22003"
        );
    }
}
