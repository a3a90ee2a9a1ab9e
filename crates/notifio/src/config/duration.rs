//! Durations (`"200ms"`, `"30s"`, `"2m"`, `"1h"`, `"1m30s"`) and byte sizes (`"10MiB"`) as people
//! write them in `notifio.toml` (docs/architecture.md#precise-semantics).
//!
//! Hand-written rather than humantime: docs/architecture.md#precise-semantics allows exactly `ms`, `s`, `m`, `h`, and
//! `"30 seconds"` must be an error (humantime accepts it, and `"1M"` would be a month there).

use std::time::Duration;

/// The message every malformed duration gets (a test pins it; docs quote it).
pub const DURATION_EXPECTED: &str = "expected a duration like 30s, 2m, 1h";

/// The message every malformed request budget gets.
pub const BUDGET_EXPECTED: &str = "expected a request budget like \"4/min\" or \"120/h\"";

/// The message every malformed `active_hours` gets.
pub const HOURS_EXPECTED: &str = "expected hours like \"07:00-23:00\"";

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

/// Parses a request budget: a whole number of requests per second, minute or hour
/// (`"4/min"`, `"120/h"`, `"1/s"`; `m`, `minute`, `hour`, `sec` too).
///
/// # Errors
/// [`BUDGET_EXPECTED`] for anything else, and for zero requests.
pub fn parse_budget(s: &str) -> Result<notifio_policy::RequestBudget, String> {
    let err = || BUDGET_EXPECTED.to_owned();
    let (n, unit) = s.split_once('/').ok_or_else(err)?;
    let requests: u32 = n.trim().parse().map_err(|_| err())?;
    if requests == 0 {
        return Err(
            "a budget of 0 requests would never check anything; pause the site's searches instead"
                .to_owned(),
        );
    }
    let per = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return Err(err()),
    };
    Ok(notifio_policy::RequestBudget { requests, per })
}

/// Parses `active_hours`: `"HH:MM-HH:MM"` in local time; the end may be earlier than the start
/// (a range past midnight), never equal to it.
///
/// # Errors
/// [`HOURS_EXPECTED`] for anything else.
pub fn parse_hours(s: &str) -> Result<notifio_policy::ActiveHours, String> {
    let err = || HOURS_EXPECTED.to_owned();
    let minute = |t: &str| -> Option<u32> {
        let (h, m) = t.trim().split_once(':')?;
        let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
        // 24:00 is the end of the day.
        ((h < 24 && m < 60) || (h == 24 && m == 0)).then_some(h * 60 + m)
    };
    let (from, to) = s.split_once('-').ok_or_else(err)?;
    let (from, to) = (minute(from).ok_or_else(err)?, minute(to).ok_or_else(err)?);
    if from % 1440 == to % 1440 {
        return Err(
            "the hours start and end at the same time: leave active_hours out for all day"
                .to_owned(),
        );
    }
    Ok(notifio_policy::ActiveHours {
        from: from % 1440,
        to: if to == 1440 { 1440 } else { to },
    })
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

    #[test]
    fn budgets_and_hours_read_as_people_write_them() {
        let b = parse_budget("4/min").unwrap();
        assert_eq!((b.requests, b.per), (4, Duration::from_secs(60)));
        assert_eq!(
            parse_budget(" 120 / h ").unwrap().per,
            Duration::from_secs(3600)
        );
        assert_eq!(parse_budget("1/s").unwrap().per, Duration::from_secs(1));
        for bad in ["4", "4/week", "x/min", "-1/h", "4.5/min", ""] {
            assert_eq!(parse_budget(bad).unwrap_err(), BUDGET_EXPECTED, "{bad}");
        }
        assert!(parse_budget("0/min").unwrap_err().contains("never check"));
        let h = parse_hours("07:00-23:00").unwrap();
        assert_eq!((h.from, h.to), (420, 1380));
        let night = parse_hours("22:30-06:00").unwrap();
        assert_eq!((night.from, night.to), (1350, 360));
        assert_eq!(
            parse_hours("00:00-24:00").unwrap_err(),
            "the hours start and end at the same time: leave active_hours out for all day"
        );
        assert_eq!(parse_hours("08:00-24:00").unwrap().to, 1440);
        for bad in ["7-23", "07:00", "25:00-01:00", "07:60-08:00", "a-b"] {
            assert_eq!(parse_hours(bad).unwrap_err(), HOURS_EXPECTED, "{bad}");
        }
    }
}
