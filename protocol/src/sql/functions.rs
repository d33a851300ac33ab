//! Pure helpers behind the SQL functions: WAL file names, pg_size_pretty's
//! rounding, LIKE matching. No Session, no I/O, so each is tested against
//! PostgreSQL's own outputs here.
//!
//! Invariants: every function is total (no panics on any input); LIKE runs
//! in O(pattern x text) time (greedy `%` with one backtrack point, no
//! exponential backtracking).

use super::numeric::Numeric;

/// The WAL segment file holding the byte just before `lsn`, as
/// PostgreSQL's pg_walfile_name (an LSN on a segment boundary names the
/// previous segment): `TTTTTTTTXXXXXXXXYYYYYYYY`.
pub fn walfile_name(lsn: u64, timeline: u32, seg_size: u64) -> String {
    let seg_size = seg_size.max(1);
    let segno = lsn.saturating_sub(1) / seg_size;
    let per_id = 0x1_0000_0000 / seg_size;
    format!(
        "{timeline:08X}{:08X}{:08X}",
        segno / per_id.max(1),
        segno % per_id.max(1)
    )
}

const SIZE_UNITS: &[&str] = &["kB", "MB", "GB", "TB", "PB"];
/// Sizes below this many of a unit are shown in that unit.
const SIZE_LIMIT: i128 = 10 * 1024;
/// The same in half-units (one extra bit kept for rounding), minus one.
const SIZE_LIMIT_HALVES: i128 = 2 * SIZE_LIMIT - 1;

/// Halves `x`, rounding half away from zero.
fn half_rounded(x: i128) -> i128 {
    (x + if x < 0 { -1 } else { 1 }) / 2
}

/// pg_size_pretty's ladder on a whole number of bytes; `shift` divides by
/// a power of two (floor for bigint, truncation for numeric, as PostgreSQL).
fn size_ladder(bytes: i128, shift: fn(i128, u32) -> i128) -> String {
    let mut size = shift(bytes, 9);
    let mut unit = 0;
    while size.abs() >= SIZE_LIMIT_HALVES && unit + 1 < SIZE_UNITS.len() {
        size = shift(size, 10);
        unit += 1;
    }
    format!("{} {}", half_rounded(size), SIZE_UNITS[unit])
}

/// pg_size_pretty(bigint).
pub fn size_pretty_int(bytes: i64) -> String {
    if i128::from(bytes).abs() < SIZE_LIMIT {
        return format!("{bytes} bytes");
    }
    size_ladder(i128::from(bytes), |x, n| x >> n)
}

/// pg_size_pretty(numeric): small values print as they are ("100.5 bytes").
pub fn size_pretty_numeric(bytes: Numeric) -> String {
    let limit = Numeric {
        mantissa: SIZE_LIMIT,
        scale: 0,
    };
    let abs = Numeric {
        mantissa: bytes.mantissa.abs(),
        scale: bytes.scale,
    };
    if abs.compare(limit).is_lt() {
        return format!("{} bytes", bytes.to_text());
    }
    let whole = bytes.mantissa / 10i128.pow(bytes.scale.min(38));
    size_ladder(whole, |x, n| x / (1i128 << n))
}

/// SQL LIKE: `%` any run, `_` one character, `\` escapes the next one;
/// `insensitive` for ILIKE (Unicode simple lower-casing).
pub fn like(text: &str, pattern: &str, insensitive: bool) -> bool {
    let fold = |s: &str| -> Vec<char> {
        if insensitive {
            s.chars().flat_map(char::to_lowercase).collect()
        } else {
            s.chars().collect()
        }
    };
    let t = fold(text);
    let p = compile_like(&fold(pattern));
    let (mut ti, mut pi) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some(LikeTok::Any) => {
                backtrack = Some((pi, ti));
                pi += 1;
            }
            Some(LikeTok::One) => {
                ti += 1;
                pi += 1;
            }
            Some(LikeTok::Char(c)) if *c == t[ti] => {
                ti += 1;
                pi += 1;
            }
            _ => match backtrack {
                Some((bp, bt)) => {
                    pi = bp + 1;
                    ti = bt + 1;
                    backtrack = Some((bp, bt + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|x| *x == LikeTok::Any)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LikeTok {
    Any,
    One,
    Char(char),
}

fn compile_like(p: &[char]) -> Vec<LikeTok> {
    let mut out = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        out.push(match p[i] {
            '%' => LikeTok::Any,
            '_' => LikeTok::One,
            '\\' if i + 1 < p.len() => {
                i += 1;
                LikeTok::Char(p[i])
            }
            c => LikeTok::Char(c),
        });
        i += 1;
    }
    out.dedup_by(|a, b| *a == LikeTok::Any && *b == LikeTok::Any);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::numeric::parse;

    #[test]
    fn walfile_names_match_postgres() {
        let mb16 = 16 << 20;
        // SELECT pg_walfile_name('0/16B6C50'), pg_walfile_name('0/1000000') on PostgreSQL 15.
        for (lsn, tli, segment_size, want) in [
            (0x16B_6C50, 1, mb16, "000000010000000000000001"),
            (0x100_0000, 1, mb16, "000000010000000000000000"),
            (0x1_0000_0028, 1, mb16, "000000010000000100000000"),
            (0x1_0100_0028, 2, mb16, "000000020000000100000001"),
            (0x400_0000, 1, 1 << 20, "00000001000000000000003F"),
        ] {
            assert_eq!(walfile_name(lsn, tli, segment_size), want, "{lsn:#x}");
        }
    }

    #[test]
    fn size_pretty_matches_postgres() {
        // Each pair checked against PostgreSQL 15's pg_size_pretty(bigint).
        for (n, want) in [
            (0, "0 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (10485247, "10239 kB"),
            (10485248, "10 MB"),
            (10485760, "10 MB"),
            (1099511627775, "1024 GB"),
            (5_000_000_000_000_000, "4547 TB"),
            (-1, "-1 bytes"),
            (-10240, "-10 kB"),
            (-10752, "-11 kB"),
            (-10485760, "-10 MB"),
        ] {
            assert_eq!(size_pretty_int(n), want, "{n}");
        }
        for (n, want) in [
            ("100.5", "100.5 bytes"),
            ("1535999", "1500 kB"),
            ("-10752", "-11 kB"),
            ("16777216.5", "16 MB"),
            ("500000000000000000000", "444089 PB"),
        ] {
            assert_eq!(size_pretty_numeric(parse(n).unwrap()), want, "{n}");
        }
    }

    #[test]
    fn like_patterns() {
        assert!(like("wal_buffers", "wal%", false));
        assert!(like("wal_buffers", "%buf%", false));
        assert!(!like("fsync", "wal%", false));
        assert!(like("abc", "a_c", false));
        assert!(!like("abc", "a_", false));
        assert!(like("a%c", "a\\%c", false));
        assert!(!like("abc", "a\\%c", false));
        assert!(like("WAL", "wal", true));
        assert!(!like("WAL", "wal", false));
        assert!(like("", "%", false));
        assert!(like("aaa", "%a%a%a%", false));
        assert!(!like(
            &"a".repeat(5000),
            &format!("{}b", "%a".repeat(50)),
            false
        ));
    }
}
