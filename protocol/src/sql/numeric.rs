//! PostgreSQL's `numeric` for what walshm computes: exact decimals held as
//! an `i128` mantissa and a decimal scale (digits after the point), with
//! PostgreSQL's text form, binary (base-10000) form, the display scale of
//! sums and quotients, and half-away-from-zero rounding.
//!
//! Invariants: `scale <= MAX_SCALE`; every operation is checked and
//! overflow is 22003 ("value overflows numeric format"), never a wrapped
//! number. The range (about 1.7e38 / 10^scale) covers every LSN difference,
//! byte count and average walshm produces; PostgreSQL's own range is wider.

use crate::error::{sqlstate, SqlError};
use std::cmp::Ordering;

/// Largest scale kept (PostgreSQL's NUMERIC_MAX_DISPLAY_SCALE is 1000;
/// an i128 holds at most 38 digits).
const MAX_SCALE: u32 = 30;

/// Significant digits a quotient gets at least (PostgreSQL's NUMERIC_MIN_SIG_DIGITS).
const MIN_SIG_DIGITS: i32 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Numeric {
    pub mantissa: i128,
    pub scale: u32,
}

fn overflow() -> SqlError {
    SqlError::error(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        "value overflows numeric format",
    )
}

fn pow10(n: u32) -> Result<i128, SqlError> {
    10i128.checked_pow(n).ok_or_else(overflow)
}

/// `n / d` rounded half away from zero.
fn div_round(n: i128, d: i128) -> i128 {
    let q = n / d;
    let r = n % d;
    if r.unsigned_abs() * 2 >= d.unsigned_abs() {
        q + if (n < 0) == (d < 0) { 1 } else { -1 }
    } else {
        q
    }
}

impl Numeric {
    pub fn from_int(i: i64) -> Numeric {
        Numeric {
            mantissa: i128::from(i),
            scale: 0,
        }
    }

    pub fn from_u64(u: u64) -> Numeric {
        Numeric {
            mantissa: i128::from(u),
            scale: 0,
        }
    }

    /// The same value at scale `scale` (rounded when it shrinks).
    pub fn rescale(self, scale: u32) -> Result<Numeric, SqlError> {
        let scale = scale.min(MAX_SCALE);
        let mantissa = match scale.cmp(&self.scale) {
            Ordering::Equal => self.mantissa,
            Ordering::Greater => self
                .mantissa
                .checked_mul(pow10(scale - self.scale)?)
                .ok_or_else(overflow)?,
            Ordering::Less => div_round(self.mantissa, pow10(self.scale - scale)?),
        };
        Ok(Numeric { mantissa, scale })
    }

    /// Both at the larger scale.
    fn aligned(self, other: Numeric) -> Result<(i128, i128, u32), SqlError> {
        let scale = self.scale.max(other.scale);
        Ok((
            self.rescale(scale)?.mantissa,
            other.rescale(scale)?.mantissa,
            scale,
        ))
    }

    pub fn checked_add(self, other: Numeric) -> Result<Numeric, SqlError> {
        let (a, b, scale) = self.aligned(other)?;
        let mantissa = a.checked_add(b).ok_or_else(overflow)?;
        Ok(Numeric { mantissa, scale })
    }

    pub fn checked_sub(self, other: Numeric) -> Result<Numeric, SqlError> {
        self.checked_add(Numeric {
            mantissa: other.mantissa.checked_neg().ok_or_else(overflow)?,
            scale: other.scale,
        })
    }

    pub fn checked_mul(self, other: Numeric) -> Result<Numeric, SqlError> {
        let mantissa = self
            .mantissa
            .checked_mul(other.mantissa)
            .ok_or_else(overflow)?;
        Numeric {
            mantissa,
            scale: self.scale + other.scale,
        }
        .rescale(self.scale + other.scale)
    }

    /// Base-10000 weight of the first nonzero digit group and that group
    /// (PostgreSQL's internal representation).
    fn first_group(self) -> (i32, i128) {
        let int_part = self.mantissa.unsigned_abs() / 10u128.pow(self.scale);
        if int_part > 0 {
            let mut weight = 0;
            let mut v = int_part;
            while v >= 10_000 {
                v /= 10_000;
                weight += 1;
            }
            return (weight, v as i128);
        }
        // Only a fraction: pad the scale to whole groups of four digits.
        let groups = self.scale.div_ceil(4);
        let padded = self.mantissa.unsigned_abs() * 10u128.pow(groups * 4 - self.scale);
        let mut weight = -1;
        let mut divisor = 10u128.pow((groups - 1) * 4);
        while divisor > 0 && padded / divisor == 0 {
            weight -= 1;
            divisor /= 10_000;
        }
        let group = padded.checked_div(divisor).map_or(0, |g| g % 10_000);
        (weight, group as i128)
    }

    /// Division with PostgreSQL's result scale: at least 16 significant
    /// digits, at least either operand's scale; 22012 for a zero divisor.
    pub fn checked_div(self, other: Numeric) -> Result<Numeric, SqlError> {
        if other.mantissa == 0 {
            return Err(SqlError::error(
                sqlstate::DIVISION_BY_ZERO,
                "division by zero",
            ));
        }
        let (w1, g1) = self.first_group();
        let (w2, g2) = other.first_group();
        let mut qweight = w1 - w2;
        if g1 <= g2 {
            qweight -= 1;
        }
        let rscale = (MIN_SIG_DIGITS - qweight * 4)
            .max(self.scale as i32)
            .max(other.scale as i32)
            .clamp(0, MAX_SCALE as i32) as u32;
        // self / other at rscale = self.m * 10^(rscale + other.scale - self.scale) / other.m
        let shift = rscale as i64 + other.scale as i64 - self.scale as i64;
        let (n, d) = if shift >= 0 {
            (
                self.mantissa
                    .checked_mul(pow10(shift as u32)?)
                    .ok_or_else(overflow)?,
                other.mantissa,
            )
        } else {
            (
                self.mantissa,
                other
                    .mantissa
                    .checked_mul(pow10((-shift) as u32)?)
                    .ok_or_else(overflow)?,
            )
        };
        Ok(Numeric {
            mantissa: div_round(n, d),
            scale: rscale,
        })
    }

    pub fn compare(self, other: Numeric) -> Ordering {
        match self.aligned(other) {
            Ok((a, b, _)) => a.cmp(&b),
            // Cannot align without overflow: the one with more integer digits wins.
            Err(_) => self.to_f64().total_cmp(&other.to_f64()),
        }
    }

    pub fn to_f64(self) -> f64 {
        self.mantissa as f64 / 10f64.powi(self.scale as i32)
    }

    /// Rounded to a whole number (numeric to bigint), 22003 outside bigint.
    pub fn to_i64(self) -> Result<i64, SqlError> {
        let whole = self.rescale(0)?.mantissa;
        i64::try_from(whole).map_err(|_| {
            SqlError::error(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, "bigint out of range")
        })
    }

    pub fn from_f64(f: f64) -> Result<Numeric, SqlError> {
        if !f.is_finite() {
            return Err(SqlError::not_supported(
                "numeric NaN and infinity are not supported by walshm",
            ));
        }
        // PostgreSQL converts through 15 significant digits, trailing zeros dropped.
        let mut n = parse(&format!("{f:.14e}"))?;
        while n.scale > 0 && n.mantissa % 10 == 0 {
            n.mantissa /= 10;
            n.scale -= 1;
        }
        Ok(n)
    }

    /// PostgreSQL's text form: all `scale` digits after the point.
    pub fn to_text(self) -> String {
        let digits = self.mantissa.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let padded = if digits.len() <= scale {
            format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
        } else {
            digits
        };
        let (int_part, frac) = padded.split_at(padded.len() - scale);
        let sign = if self.mantissa < 0 { "-" } else { "" };
        if scale == 0 {
            format!("{sign}{int_part}")
        } else {
            format!("{sign}{int_part}.{frac}")
        }
    }

    /// PostgreSQL's binary (send) form: ndigits, weight, sign, dscale, then
    /// base-10000 digit groups, each an i16, all big-endian.
    pub fn to_binary(self) -> Vec<u8> {
        let abs = self.mantissa.unsigned_abs();
        let frac_groups = self.scale.div_ceil(4);
        let padded = abs * 10u128.pow(frac_groups * 4 - self.scale);
        let mut groups = Vec::new();
        let mut v = padded;
        while v > 0 {
            groups.push((v % 10_000) as i16);
            v /= 10_000;
        }
        groups.reverse();
        // groups now covers integer groups then frac_groups fraction groups.
        let weight = groups.len() as i32 - frac_groups as i32 - 1;
        // Strip leading and trailing zero groups (PostgreSQL sends none).
        let lead = groups.iter().take_while(|&&g| g == 0).count();
        let weight = weight - lead as i32;
        let mut groups = groups.split_off(lead);
        while groups.last() == Some(&0) {
            groups.pop();
        }
        let sign: u16 = if self.mantissa < 0 { 0x4000 } else { 0 };
        let weight = if groups.is_empty() { 0 } else { weight };
        let mut out = Vec::with_capacity(8 + 2 * groups.len());
        out.extend_from_slice(&(groups.len() as i16).to_be_bytes());
        out.extend_from_slice(&(weight as i16).to_be_bytes());
        out.extend_from_slice(&sign.to_be_bytes());
        out.extend_from_slice(&(self.scale as u16).to_be_bytes());
        for g in groups {
            out.extend_from_slice(&g.to_be_bytes());
        }
        out
    }
}

/// numeric's input function: `[+-]digits[.digits][e[+-]digits]`; None if
/// the text is not a number (the caller reports 22P02).
pub fn parse(input: &str) -> Result<Numeric, SqlError> {
    let t = input.trim();
    let (negative, rest) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (mant_text, exp) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i32>().ok()),
        None => (rest, Some(0)),
    };
    let (int_part, frac) = mant_text.split_once('.').unwrap_or((mant_text, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let Some(exp) = exp else {
        return Err(invalid(input));
    };
    if (int_part.is_empty() && frac.is_empty()) || !all_digits(int_part) || !all_digits(frac) {
        return Err(invalid(input));
    }
    let mut mantissa: i128 = 0;
    for b in int_part.bytes().chain(frac.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(b - b'0')))
            .ok_or_else(overflow)?;
    }
    let scale = frac.len() as i64 - i64::from(exp);
    let n = if scale >= 0 {
        Numeric {
            mantissa,
            scale: u32::try_from(scale).map_err(|_| overflow())?,
        }
        .rescale(scale.min(i64::from(MAX_SCALE)) as u32)?
    } else {
        Numeric {
            mantissa: mantissa
                .checked_mul(pow10((-scale) as u32)?)
                .ok_or_else(overflow)?,
            scale: 0,
        }
    };
    Ok(Numeric {
        mantissa: if negative { -n.mantissa } else { n.mantissa },
        scale: n.scale,
    })
}

fn invalid(input: &str) -> SqlError {
    SqlError::error(
        sqlstate::INVALID_TEXT_REPRESENTATION,
        format!("invalid input syntax for type numeric: \"{input}\""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Numeric {
        parse(s).unwrap()
    }

    #[test]
    fn text_round_trips() {
        for s in [
            "0",
            "1.50",
            "-0.001",
            "16777216",
            "123456789012345678901234567890",
        ] {
            assert_eq!(n(s).to_text(), s);
        }
        assert_eq!(n("1e3").to_text(), "1000");
        assert_eq!(n("1.5e-2").to_text(), "0.015");
        assert!(parse("abc").is_err());
        assert!(parse("1.2.3").is_err());
    }

    #[test]
    fn division_scale_matches_postgres() {
        // SELECT 3::numeric / 2 = 1.5000000000000000; 2/2 = 1.00000000000000000000
        assert_eq!(
            n("3").checked_div(n("2")).unwrap().to_text(),
            "1.5000000000000000"
        );
        assert_eq!(
            n("2").checked_div(n("2")).unwrap().to_text(),
            "1.00000000000000000000"
        );
        assert_eq!(
            n("10").checked_div(n("3")).unwrap().to_text(),
            "3.3333333333333333"
        );
        assert_eq!(n("1").checked_div(n("0")).unwrap_err().code, "22012");
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(n("2.5").to_i64().unwrap(), 3);
        assert_eq!(n("-2.5").to_i64().unwrap(), -3);
        assert_eq!(n("2.49").to_i64().unwrap(), 2);
    }

    #[test]
    fn binary_form() {
        // 16777216 = 1677 7216 -> ndigits 2, weight 1, sign 0, dscale 0.
        assert_eq!(
            n("16777216").to_binary(),
            vec![0, 2, 0, 1, 0, 0, 0, 0, 0x06, 0x8d, 0x1c, 0x30]
        );
        // 1.5 -> groups [1, 5000], weight 0, dscale 1.
        assert_eq!(
            n("1.5").to_binary(),
            vec![0, 2, 0, 0, 0, 0, 0, 1, 0, 1, 0x13, 0x88]
        );
        assert_eq!(n("0").to_binary(), vec![0, 0, 0, 0, 0, 0, 0, 0]);
    }
}
