//! `interval` input and output (for comparing pg_stat_replication's
//! lag columns, `WHERE write_lag < interval '10 s'`).
//!
//! A walshm interval is a signed count of microseconds (`Value::Int`):
//! days are 24 hours and there is no month field, so the units of months
//! and longer (`mon`, `year`, `decade`, `century`, `millennium`) are
//! refused as not supported rather than turned into 30-day months.
//!
//! Input, PostgreSQL's common forms (case-insensitive, any order, summed):
//! * `N unit` pairs, N a signed decimal (`1.5 min`), the unit glued on or
//!   not (`10s`, `10 s`): microsecond(s) / us / usec(s) / usecond(s),
//!   millisecond(s) / ms / msec(s) / msecond(s), second(s) / s / sec(s),
//!   minute(s) / m / min(s), hour(s) / h / hr(s), day(s) / d, week(s) / w;
//! * `[+-]HH:MM[:SS[.frac]]` (hours, minutes, seconds);
//! * a bare number: seconds (`'5'::interval` is 5 s, as in PostgreSQL);
//! * an optional leading `@` and trailing `ago` (negates the whole).
//!
//! Bad input is PostgreSQL's 22007 (invalid_datetime_format) `invalid
//! input syntax for type interval: "..."`; a sum beyond i64 microseconds
//! is 22015 (interval_field_overflow).
//!
//! Output: PostgreSQL's `postgres` IntervalStyle for this subset:
//! `[N day[s] ]HH:MM:SS[.ffffff]`, negative fields signed
//! (`-1 days -00:00:01`).

use crate::SqlError;

const US_PER_SECOND: i64 = 1_000_000;
const US_PER_DAY: i64 = 86_400 * US_PER_SECOND;

/// PostgreSQL's invalid_datetime_format.
const INVALID_DATETIME_FORMAT: &str = "22007";
/// PostgreSQL's interval_field_overflow.
const INTERVAL_FIELD_OVERFLOW: &str = "22015";

fn bad(input: &str) -> SqlError {
    SqlError::error(
        INVALID_DATETIME_FORMAT,
        format!("invalid input syntax for type interval: \"{input}\""),
    )
}

fn overflow() -> SqlError {
    SqlError::error(INTERVAL_FIELD_OVERFLOW, "interval field value out of range")
}

/// Microseconds per `unit`; Err(true) for a known unit walshm does not
/// support (months and longer), Err(false) for an unknown word.
fn unit_us(unit: &str) -> Result<i64, bool> {
    Ok(match unit {
        "us" | "usec" | "usecs" | "usecond" | "useconds" | "microsecond" | "microseconds" => 1,
        "ms" | "msec" | "msecs" | "msecond" | "mseconds" | "millisecond" | "milliseconds" => 1_000,
        "s" | "sec" | "secs" | "second" | "seconds" => US_PER_SECOND,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * US_PER_SECOND,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600 * US_PER_SECOND,
        "d" | "day" | "days" => US_PER_DAY,
        "w" | "week" | "weeks" => 7 * US_PER_DAY,
        "mon" | "mons" | "month" | "months" | "y" | "yr" | "yrs" | "year" | "years" | "dec"
        | "decs" | "decade" | "decades" | "c" | "cent" | "century" | "centuries" | "mil"
        | "mils" | "millennium" | "millennia" | "millenniums" => return Err(true),
        _ => return Err(false),
    })
}

/// One lexical piece of an interval.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    /// A signed decimal number, as written.
    Number(&'a str),
    /// `[+-]HH:MM[:SS[.frac]]`.
    Clock(&'a str),
    Word(String),
}

fn pieces(input: &str) -> Option<Vec<Piece<'_>>> {
    let b = input.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() || c == b',' {
            i += 1;
        } else if c.is_ascii_digit() || c == b'.' || c == b'+' || c == b'-' {
            let start = i;
            i += 1;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b':') {
                i += 1;
            }
            let text = &input[start..i];
            out.push(if text.contains(':') {
                Piece::Clock(text)
            } else {
                Piece::Number(text)
            });
        } else if c.is_ascii_alphabetic() || c == b'@' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphabetic() || b[i] == b'@') {
                i += 1;
            }
            out.push(Piece::Word(input[start..i].to_ascii_lowercase()));
        } else {
            return None;
        }
    }
    Some(out)
}

/// `number * per` in microseconds, rounded; None on a malformed number.
fn scaled(number: &str, per: i64) -> Option<Result<i64, SqlError>> {
    let digits = number.trim_start_matches(['+', '-']);
    if digits.is_empty() || digits == "." || digits.matches('.').count() > 1 {
        return None;
    }
    let v: f64 = number.parse().ok()?;
    let us = (v * per as f64).round();
    Some(if us.abs() < i64::MAX as f64 {
        Ok(us as i64)
    } else {
        Err(overflow())
    })
}

/// `[+-]HH:MM[:SS[.frac]]` in microseconds.
fn clock(text: &str) -> Option<i64> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let parts: Vec<&str> = body.split(':').collect();
    let whole = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (h, m, s) = match parts.as_slice() {
        [h, m] => (whole(h)?, whole(m)?, 0),
        [h, m, s] => {
            let secs = scaled(s, US_PER_SECOND)?.ok()?;
            (!s.starts_with(['+', '-'])).then_some(())?;
            (whole(h)?, whole(m)?, secs)
        }
        _ => return None,
    };
    if m > 59 || s >= 60 * US_PER_SECOND {
        return None;
    }
    let us = h
        .checked_mul(3_600 * US_PER_SECOND)?
        .checked_add(m * 60 * US_PER_SECOND + s)?;
    Some(if neg { -us } else { us })
}

/// Text input of an interval: microseconds (see the module header).
pub fn parse(input: &str) -> Result<i64, SqlError> {
    let ps = pieces(input).ok_or_else(|| bad(input))?;
    let mut total: i64 = 0;
    let mut ago = false;
    let mut any = false;
    let mut k = 0;
    while k < ps.len() {
        let add = match &ps[k] {
            Piece::Word(w) if w == "@" && k == 0 => 0,
            Piece::Word(w) if w == "ago" && k + 1 == ps.len() && any => {
                ago = true;
                0
            }
            Piece::Word(_) => return Err(bad(input)),
            Piece::Clock(c) => {
                any = true;
                clock(c).ok_or_else(|| bad(input))?
            }
            Piece::Number(n) => {
                any = true;
                let per = match ps.get(k + 1) {
                    Some(Piece::Word(u)) if u != "ago" => {
                        k += 1;
                        unit_us(u).map_err(|known| {
                            if known {
                                SqlError::not_supported(format!(
                                    "interval unit \"{u}\" is not supported by walshm (no month field)"
                                ))
                            } else {
                                bad(input)
                            }
                        })?
                    }
                    _ => US_PER_SECOND,
                };
                scaled(n, per).ok_or_else(|| bad(input))??
            }
        };
        total = total.checked_add(add).ok_or_else(overflow)?;
        k += 1;
    }
    if !any {
        return Err(bad(input));
    }
    Ok(if ago { -total } else { total })
}

/// Text output (see the module header).
pub fn format(us: i64) -> String {
    if us >= 0 {
        return crate::replication::format_interval(us);
    }
    let days = us / US_PER_DAY;
    let rest = us % US_PER_DAY;
    let mut out = match days {
        0 => String::new(),
        d => format!("{d} days "),
    };
    if rest != 0 || days == 0 {
        let time = crate::replication::format_interval(-rest);
        out.push_str(if rest < 0 { "-" } else { "" });
        out.push_str(&time);
    } else {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = US_PER_SECOND;

    #[test]
    fn postgresql_common_forms() {
        for (text, us) in [
            ("1 second", S),
            ("5 min", 300 * S),
            ("10 s", 10 * S),
            ("10s", 10 * S),
            ("1.5 minutes", 90 * S),
            ("250 ms", 250_000),
            ("7 us", 7),
            ("2 hours 3 mins", 7_380 * S),
            ("1 day", 86_400 * S),
            ("1 week", 7 * 86_400 * S),
            ("01:02:03", 3_723 * S),
            ("10:30", 37_800 * S),
            ("00:00:00.5", S / 2),
            ("1 day 01:00:00", 90_000 * S),
            ("-1 s", -S),
            ("5", 5 * S),
            ("@ 3 sec ago", -3 * S),
            ("  1 HOUR  ", 3_600 * S),
            ("1 hour, 2 min", 3_720 * S),
        ] {
            assert_eq!(parse(text).map_err(|e| e.message), Ok(us), "{text}");
        }
    }

    #[test]
    fn bad_input_is_22007_and_months_are_not_supported() {
        for text in [
            "", "abc", "1 parsec", "1:2:3:4", "10:61", "1 s s", "--1 s", "1..2 s", "ago", "1;",
            "01:02:60",
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.code, INVALID_DATETIME_FORMAT, "{text}: {}", e.message);
        }
        assert_eq!(parse("1 month").unwrap_err().code, "0A000");
        assert_eq!(
            parse("9999999999999 days").unwrap_err().code,
            INTERVAL_FIELD_OVERFLOW
        );
    }

    #[test]
    fn output_is_postgresql_style() {
        assert_eq!(format(3_723 * S), "01:02:03");
        assert_eq!(format(-S), "-00:00:01");
        assert_eq!(format(-86_400 * S - S), "-1 days -00:00:01");
        assert_eq!(format(-2 * 86_400 * S), "-2 days");
        assert_eq!(
            format(parse("1 day 00:00:00.25").unwrap()),
            "1 day 00:00:00.25"
        );
    }
}
