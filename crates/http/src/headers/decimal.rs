//! Exact comparison of the numbers in headers with the numbers in bodies.

use serde_json::Number;

/// An exact decimal: `(-1)^negative × digits × 10^exponent`, with `digits` free of leading and
/// trailing zeros, and zero written as `(false, "", 0)`. Equal numbers are equal values.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl Decimal {
    /// Parses `[+-]digits[.digits][(e|E)[+-]digits]`; `None` for anything else.
    fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let (int_part, frac_part) = match mantissa.split_once('.') {
            Some((int_part, frac_part)) => (int_part, frac_part),
            None => (mantissa, ""),
        };
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(int_part) || (mantissa.contains('.') && !all_digits(frac_part)) {
            return None;
        }
        let exponent: i64 = match exponent {
            None => 0,
            Some(e) => {
                let magnitude = e.strip_prefix(['+', '-']).unwrap_or(e);
                // Nine significant digits keep the arithmetic below far from overflow.
                let significant = magnitude.trim_start_matches('0');
                if !all_digits(magnitude) || significant.len() > 9 {
                    return None;
                }
                e.parse().ok()?
            }
        };
        let frac_len = i64::try_from(frac_part.len()).ok()?;
        Some(Decimal::normalize(
            negative,
            format!("{int_part}{frac_part}"),
            exponent - frac_len,
        ))
    }

    fn normalize(negative: bool, digits: String, exponent: i64) -> Decimal {
        let digits = digits.trim_start_matches('0');
        let trimmed = digits.trim_end_matches('0');
        if trimmed.is_empty() {
            return Decimal {
                negative: false,
                digits: String::new(),
                exponent: 0,
            };
        }
        let zeros = i64::try_from(digits.len() - trimmed.len()).unwrap_or(i64::MAX);
        Decimal {
            negative,
            digits: trimmed.to_owned(),
            exponent: exponent.saturating_add(zeros),
        }
    }

    fn from_integer(value: i128) -> Decimal {
        Decimal::normalize(value < 0, value.unsigned_abs().to_string(), 0)
    }
}

/// Whether header text names the same number as the body: exactly for integers (`042` and `42.0`
/// match `42`), by `f64` value for fractions.
pub(super) fn number_matches(text: &str, body: &Number) -> bool {
    let Some(header) = Decimal::parse(text) else {
        return false;
    };
    let integer = body
        .as_i64()
        .map(i128::from)
        .or_else(|| body.as_u64().map(i128::from))
        .or_else(|| integral_f64(body).map(i128::from));
    match integer {
        Some(integer) => header == Decimal::from_integer(integer),
        None => body
            .as_f64()
            .is_some_and(|f| text.parse::<f64>().is_ok_and(|h| h == f)),
    }
}

/// A float that holds an integer small enough for `i64`, as that integer.
pub(super) fn integral_f64(n: &Number) -> Option<i64> {
    // 2^63: every integral f64 below it in magnitude converts exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    let f = n.as_f64()?;
    (f.is_finite() && f.fract() == 0.0 && f.abs() < LIMIT).then_some(f as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_parsing() {
        let d = |s| Decimal::parse(s);
        assert_eq!(d("42"), Some(Decimal::from_integer(42)));
        assert_eq!(d("-0.0"), Some(Decimal::from_integer(0)));
        assert_eq!(d("1.50"), d("15e-1"));
        assert_eq!(d("-1200"), d("-1.2e3"));
        for bad in [
            "", "-", "+", "1.", ".1", "1e", "1e+", "e5", "1..2", "1e5.0", "١٢", "1_000",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }
}
