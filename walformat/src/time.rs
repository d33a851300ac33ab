//! PostgreSQL timestamps: microseconds since 2000-01-01 00:00:00 UTC.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time of the PostgreSQL epoch (2000-01-01 00:00:00 UTC).
pub const PG_EPOCH_UNIX_SECS: i64 = 946_684_800;
const USECS_PER_SEC: i64 = 1_000_000;
const SECS_PER_DAY: i64 = 86_400;

/// PostgreSQL's END_TIMESTAMP: the first instant past timestamptz's range
/// (294277-01-01 00:00:00 UTC), in microseconds since 2000-01-01.
pub const PG_END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
/// 0001-01-01 00:00:00 UTC in microseconds since 2000-01-01: the earliest
/// instant [`format_unix_secs`] writes as PostgreSQL does (earlier years
/// are BC, written differently).
pub const PG_FIRST_AD_TIMESTAMP: i64 = -63_082_281_600_000_000;

/// A PostgreSQL timestamp (microseconds since 2000-01-01) as microseconds
/// since the Unix epoch, or None when it lies outside the years PostgreSQL
/// prints here (0001-01-01 up to its END_TIMESTAMP, and within i64 once
/// moved to the Unix epoch): a value from another process (a standby's
/// reply time) may be anything, and is then shown as NULL.
pub fn pg_timestamp_to_unix_us(us: i64) -> Option<i64> {
    if !(PG_FIRST_AD_TIMESTAMP..PG_END_TIMESTAMP).contains(&us) {
        return None;
    }
    us.checked_add(PG_EPOCH_UNIX_SECS * USECS_PER_SEC)
}

/// Current time in microseconds since the PostgreSQL epoch.
pub fn pg_now_us() -> i64 {
    let unix_us = match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
    };
    unix_us.saturating_sub(PG_EPOCH_UNIX_SECS * USECS_PER_SEC)
}

/// Formats a timestamp as `pg_waldump`'s `timestamptz_to_str` does when run
/// with `TZ=UTC`: `YYYY-MM-DD HH:MM:SS.ffffff UTC`. Like the C code, seconds
/// truncate toward zero and the fraction keeps the sign of `us`.
pub fn format_pg_timestamp(us: i64) -> String {
    let unix_secs = us / USECS_PER_SEC + PG_EPOCH_UNIX_SECS;
    let frac = us % USECS_PER_SEC;
    format!("{}.{frac:06} UTC", format_unix_secs(unix_secs))
}

/// Formats seconds since 1970-01-01 00:00:00 UTC as `YYYY-MM-DD HH:MM:SS`
/// (UTC, proleptic Gregorian).
pub fn format_unix_secs(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(SECS_PER_DAY);
    let secs_of_day = unix_secs.rem_euclid(SECS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        secs_of_day / 3600,
        (secs_of_day / 60) % 60,
        secs_of_day % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Proleptic Gregorian (year, month, day) to days since 1970-01-01 (the
/// inverse of [`civil_from_days`]); None for a month or day that does not
/// exist.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> Option<i64> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let max = *month_days.get(month.checked_sub(1)? as usize)?;
    if day == 0 || day > max {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// Parses a timestamptz in ISO 8601 form, as `recovery_target_time` takes
/// it: `YYYY-MM-DD[( |T)HH:MM[:SS[.ffffff]]][ ][zone]`, zone `Z`, `UTC`,
/// `GMT` or an offset `+HH`, `+HHMM`, `+HH:MM` (or `-`); without a zone
/// the time is UTC (walshm's TimeZone). Returns microseconds since
/// 2000-01-01 00:00:00 UTC, or None for anything else (PostgreSQL's other
/// input forms, such as month names or `now`, are not taken).
pub fn parse_pg_timestamp(text: &str) -> Option<i64> {
    let t = text.trim();
    let (date, rest) = t.split_at(t.find([' ', 'T']).unwrap_or(t.len()));
    let days = parse_date(date)?;
    let rest = rest.get(1..).unwrap_or("").trim_start();
    let zone_at = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ':' || c == '.'))
        .unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(zone_at);
    let us_of_day = if clock.is_empty() {
        0
    } else {
        parse_clock(clock)?
    };
    let offset_s = parse_zone(zone.trim())?;
    let unix_s = days.checked_mul(SECS_PER_DAY)?.checked_sub(offset_s)?;
    let pg_s = unix_s.checked_sub(PG_EPOCH_UNIX_SECS)?;
    let us = pg_s.checked_mul(USECS_PER_SEC)?.checked_add(us_of_day)?;
    (PG_FIRST_AD_TIMESTAMP..PG_END_TIMESTAMP)
        .contains(&us)
        .then_some(us)
}

/// `YYYY-MM-DD` to days since 1970-01-01.
fn parse_date(date: &str) -> Option<i64> {
    let mut parts = date.splitn(3, '-');
    let year: i64 = digits(parts.next()?, 4..=6)?;
    let month = digits(parts.next()?, 1..=2)?;
    let day = digits(parts.next()?, 1..=2)?;
    days_from_civil(year, month as u32, day as u32)
}

/// `HH:MM[:SS[.ffffff]]` to microseconds since midnight.
fn parse_clock(clock: &str) -> Option<i64> {
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut parts = hms.split(':');
    let h: i64 = digits(parts.next()?, 1..=2)?;
    let m: i64 = digits(parts.next()?, 1..=2)?;
    let s: i64 = parts.next().map_or(Some(0), |p| digits(p, 1..=2))?;
    if parts.next().is_some() || h > 23 || m > 59 || s > 59 || frac.len() > 6 {
        return None;
    }
    let us = if frac.is_empty() {
        0
    } else {
        digits(frac, 1..=6)? * 10i64.pow(6 - frac.len() as u32)
    };
    Some(((h * 60 + m) * 60 + s) * USECS_PER_SEC + us)
}

/// A zone to its offset east of UTC in seconds ('' is UTC).
fn parse_zone(zone: &str) -> Option<i64> {
    if zone.is_empty()
        || ["Z", "UTC", "GMT"]
            .iter()
            .any(|z| zone.eq_ignore_ascii_case(z))
    {
        return Some(0);
    }
    let sign = match zone.as_bytes()[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let body = &zone[1..];
    let (h, m) = match (body.split_once(':'), body.len()) {
        (Some((h, m)), _) => (h, m),
        (None, 4) => body.split_at(2),
        (None, _) => (body, "0"),
    };
    let (h, m): (i64, i64) = (digits(h, 1..=2)?, digits(m, 1..=2)?);
    (h <= 15 && m <= 59).then_some(sign * (h * 3600 + m * 60))
}

/// A run of ASCII digits whose length is in `len`, as a number.
fn digits(s: &str, len: std::ops::RangeInclusive<usize>) -> Option<i64> {
    let ok = len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| s.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_pg_timestamp(0), "2000-01-01 00:00:00.000000 UTC");
        // 2026-11-29 21:14:47.123456 UTC
        let unix = 1_795_986_887i64;
        let us = (unix - PG_EPOCH_UNIX_SECS) * USECS_PER_SEC + 123_456;
        assert_eq!(format_pg_timestamp(us), "2026-11-29 21:14:47.123456 UTC");
        assert_eq!(
            format_pg_timestamp(-USECS_PER_SEC),
            "1999-12-31 23:59:59.000000 UTC"
        );
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn out_of_range_timestamps_have_no_unix_time() {
        let epoch_us = PG_EPOCH_UNIX_SECS * USECS_PER_SEC;
        assert_eq!(pg_timestamp_to_unix_us(0), Some(epoch_us));
        let first = pg_timestamp_to_unix_us(PG_FIRST_AD_TIMESTAMP).unwrap();
        assert_eq!(
            civil_from_days(first / USECS_PER_SEC / SECS_PER_DAY),
            (1, 1, 1)
        );
        for bad in [
            i64::MIN,
            PG_FIRST_AD_TIMESTAMP - 1,
            PG_END_TIMESTAMP,
            i64::MAX,
        ] {
            assert_eq!(pg_timestamp_to_unix_us(bad), None, "{bad}");
        }
        let last = pg_timestamp_to_unix_us(i64::MAX - epoch_us).unwrap();
        assert!(format_unix_secs(last / USECS_PER_SEC).starts_with("294247-"));
    }

    #[test]
    fn parses_iso_timestamps_as_recovery_target_time_takes_them() {
        let at = |s: &str| parse_pg_timestamp(s).map(format_pg_timestamp);
        let want = Some("2026-11-29 21:14:47.123456 UTC".to_string());
        for s in [
            "2026-11-29 21:14:47.123456",
            "2026-11-29T21:14:47.123456Z",
            "2026-11-29 21:14:47.123456+00",
            "2026-11-29 21:14:47.123456 UTC",
            "2026-11-29 23:14:47.123456+02:00",
            "2026-11-29 20:14:47.123456-0100",
            " 2026-11-29 22:14:47.123456 +01 ",
        ] {
            assert_eq!(at(s), want, "{s}");
        }
        assert_eq!(
            at("2026-11-29 21:14:47.12"),
            Some("2026-11-29 21:14:47.120000 UTC".into())
        );
        assert_eq!(
            at("2000-01-01"),
            Some("2000-01-01 00:00:00.000000 UTC".into())
        );
        assert_eq!(
            at("2024-02-29 00:00"),
            Some("2024-02-29 00:00:00.000000 UTC".into())
        );
        for bad in [
            "",
            "now",
            "yesterday",
            "2026-13-01",
            "2025-02-29",
            "2026-11-29 24:00:00",
            "2026-11-29 21:60",
            "2026-11-29 21:14:47.1234567",
            "2026-11-29 21:14:47 CEST",
            "2026-11-29 21:14:47+99",
            "29/11/2026",
            "2026-11-29 21:14:47:00",
        ] {
            assert_eq!(parse_pg_timestamp(bad), None, "{bad:?}");
        }
        for days in [-1_000_000, -1, 0, 11_016, 20_000, 3_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), Some(days));
        }
    }

    #[test]
    fn now_is_after_2024() {
        assert!(pg_now_us() > 24 * 365 * SECS_PER_DAY * USECS_PER_SEC);
    }
}
