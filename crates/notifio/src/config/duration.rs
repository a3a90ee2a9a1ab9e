//! Durations (`"200ms"`, `"30s"`, `"2m"`, `"1h"`, `"1m30s"`) and byte sizes (`"10MiB"`) as people
//! write them in `notifio.toml` (DESIGN §9).
//!
//! Hand-written rather than humantime: DESIGN §9 allows exactly `ms`, `s`, `m`, `h`, and
//! `"30 seconds"` must be an error (humantime accepts it, and `"1M"` would be a month there).

use std::time::Duration;

/// The message every malformed duration gets (a test pins it; docs quote it).
pub const DURATION_EXPECTED: &str = "expected a duration like 30s, 2m, 1h";

/// The message every malformed size gets.
pub const SIZE_EXPECTED: &str = "expected a size like 10MiB, 512KiB or a number of bytes";

/// Parses `"200ms"`, `"1s"`, `"2m"`, `"1h"`, compounds like `"1m30s"` and decimals like `"1.5s"`.
/// No spaces, no other units, and at least one unit: a bare `"30"` is ambiguous.
///
/// # Errors
/// [`DURATION_EXPECTED`] for anything else, including overflow.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || DURATION_EXPECTED.to_owned();
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(err());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_nanos: u64 = match unit {
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(err()),
        };
        total = total
            .checked_add(scale(num, unit_nanos).ok_or_else(err)?)
            .ok_or_else(err)?;
        rest = after;
    }
    Ok(total)
}

/// `num` (digits with at most one `.`) times `unit_nanos`, exact for integers.
fn scale(num: &str, unit_nanos: u64) -> Option<Duration> {
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return None;
    }
    if let Ok(n) = num.parse::<u64>() {
        let nanos = u128::from(n) * u128::from(unit_nanos);
        let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
        return Some(Duration::new(secs, (nanos % 1_000_000_000) as u32));
    }
    let x: f64 = num.parse().ok()?;
    // Round to whole nanoseconds so "0.1s" is exactly 100ms.
    let nanos = (x * unit_nanos as f64).round();
    Duration::try_from_secs_f64(nanos / 1e9).ok()
}

/// A hint for the common ways to get a duration wrong, if any applies.
pub(crate) fn duration_hint(s: &str) -> Option<String> {
    let t = s.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        return Some(format!("add a unit: \"{t}s\" (units: ms, s, m, h)"));
    }
    let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
    if !digits.is_empty() && t.contains(char::is_whitespace) {
        let word = t[digits.len()..].trim().to_ascii_lowercase();
        let unit = if word.starts_with("ms") || word.starts_with("milli") {
            "ms"
        } else if word.starts_with('h') {
            "h"
        } else if word.starts_with("mi") || word == "m" {
            "m"
        } else {
            "s"
        };
        return Some(format!(
            "write \"{digits}{unit}\": a number and a unit (ms, s, m, h) with no space"
        ));
    }
    None
}

/// Parses a byte size: `"10MiB"`, `"512KiB"`, `"1GiB"`, decimal `"10MB"`/`"500kB"`, `"100B"` or
/// plain digits (bytes). Binary units are 1024-based, decimal ones 1000-based.
///
/// # Errors
/// [`SIZE_EXPECTED`] for anything else, including overflow.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let err = || SIZE_EXPECTED.to_owned();
    let t = s.trim();
    let num_len = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(num_len);
    let n: u64 = num.parse().map_err(|_| err())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(err()),
    };
    n.checked_mul(mult).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> Result<u128, String> {
        parse_duration(s).map(|d| d.as_millis())
    }

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(ms("200ms"), Ok(200));
        assert_eq!(ms("1s"), Ok(1_000));
        assert_eq!(ms("2m"), Ok(120_000));
        assert_eq!(ms("1h"), Ok(3_600_000));
        assert_eq!(ms("1m30s"), Ok(90_000));
        assert_eq!(ms("1.5s"), Ok(1_500));
        assert_eq!(parse_duration("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(ms(" 30s "), Ok(30_000));
        assert_eq!(ms("0s"), Ok(0));
    }

    #[test]
    fn everything_else_gets_the_one_message() {
        for bad in [
            "",
            "30",
            "30 seconds",
            "30 s",
            "s",
            "1d",
            "1.2.3s",
            "-1s",
            "1M",
            "30sec",
            "99999999999999999999h",
        ] {
            assert_eq!(
                parse_duration(bad),
                Err(DURATION_EXPECTED.to_owned()),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn hints_fix_the_common_mistakes() {
        assert_eq!(
            duration_hint("30").as_deref(),
            Some("add a unit: \"30s\" (units: ms, s, m, h)")
        );
        assert!(duration_hint("30 seconds").unwrap().contains("\"30s\""));
        assert!(duration_hint("2 minutes").unwrap().contains("\"2m\""));
        assert!(duration_hint("1 hour").unwrap().contains("\"1h\""));
        assert!(duration_hint("500 ms").unwrap().contains("\"500ms\""));
        assert_eq!(duration_hint("soon"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10MiB"), Ok(10 * 1024 * 1024));
        assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("500kB"), Ok(500_000));
        assert_eq!(parse_size("1234"), Ok(1234));
        assert_eq!(parse_size("10 MiB"), Ok(10 * 1024 * 1024));
        for bad in ["", "MiB", "10 mebibytes", "1.5MiB", "-1", "99999999999GiB"] {
            assert_eq!(parse_size(bad), Err(SIZE_EXPECTED.to_owned()), "{bad:?}");
        }
    }
}
