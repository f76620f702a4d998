//! Go's `time.ParseDuration` syntax, as istio-iptables' `--probe-timeout` (a Go
//! `time.Duration` flag) takes it: `5s`, `1.5s`, `1m30s`, `250ms`, `0`; a negative one, which
//! would fail every validation at once, is refused.
use std::time::Duration;

/// Go's units, in nanoseconds.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Fraction digits read at most (Go ignores what cannot change the result either).
const MAX_FRACTION_DIGITS: usize = 18;

/// `s` as Go parses a duration: a sequence of decimal numbers, each with an optional fraction
/// and a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`); `0` alone needs none. `None` when it is
/// not one, is negative or exceeds Go's range (an `int64` of nanoseconds).
pub(crate) fn go_duration(s: &str) -> Option<Duration> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return None;
    }
    let mut rest = s;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (whole, after) = rest.split_at(digits);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(a) => a.split_at(a.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let unit_len = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = UNITS.iter().find(|(u, _)| *u == unit)?.1;
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let mut ns = whole.checked_mul(scale)?;
        let fraction = &fraction[..fraction.len().min(MAX_FRACTION_DIGITS)];
        if !fraction.is_empty() {
            let value: u128 = fraction.parse().ok()?;
            let len = u32::try_from(fraction.len()).ok()?;
            ns = ns.checked_add(value.checked_mul(scale)? / 10u128.pow(len))?;
        }
        total = total.checked_add(ns)?;
        rest = next;
    }
    let max = u128::try_from(i64::MAX).ok()?;
    (total <= max).then(|| Duration::from_nanos(u64::try_from(total).unwrap_or(u64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("5s", ms(5000)),
            ("0", Duration::ZERO),
            ("+5s", ms(5000)),
            ("1.5s", ms(1500)),
            (".5s", ms(500)),
            ("5.s", ms(5000)),
            ("250ms", ms(250)),
            ("1m30s", ms(90_000)),
            ("1h", ms(3_600_000)),
            ("2us", Duration::from_micros(2)),
            ("2\u{b5}s", Duration::from_micros(2)),
            ("7ns", Duration::from_nanos(7)),
            ("1s500ms", ms(1500)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(go_duration(text), Some(want), "{text}");
        }
    }

    #[test]
    fn what_go_refuses_and_negative_durations_are_refused() {
        for text in [
            "", "5", "s", ".s", "5x", "-5s", "-0", "5 s", "5s ", "1.2.3s", "5S", "1d", "--5s",
            "3000000h",
        ] {
            assert_eq!(go_duration(text), None, "{text}");
        }
    }
}
