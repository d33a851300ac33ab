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
    fn now_is_after_2024() {
        assert!(pg_now_us() > 24 * 365 * SECS_PER_DAY * USECS_PER_SEC);
    }
}
