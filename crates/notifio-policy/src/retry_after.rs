//! `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
//!
//! The header is remote input. A date in the past means "now" (zero); garbage or a negative
//! number is ignored (`None`), so it can neither shorten nor break a wait; a huge number
//! saturates rather than overflowing, and the backoff policy's `max_wait` caps it later.

use crate::time::Timestamp;
use std::time::{Duration, UNIX_EPOCH};

/// Parses one `Retry-After` value at `now`. Accepts delay-seconds (`120`) and the three
/// HTTP-date forms (IMF-fixdate, RFC 850, asctime).
#[must_use]
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: delay-seconds. Too many digits for u64 saturates instead of failing.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    let at_ms = date
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Some(Duration::from_millis(at_ms.saturating_sub(now.as_millis())))
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2023-11-14T22:13:20Z
    const NOW: Timestamp = Timestamp(1_700_000_000_000);

    #[test]
    fn delay_seconds() {
        assert_eq!(
            parse_retry_after("120", NOW),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", NOW), Some(Duration::ZERO));
    }

    #[test]
    fn all_three_http_date_forms() {
        // 60 s after NOW in each of the three forms RFC 9110 requires recipients to accept.
        let want = Some(Duration::from_secs(60));
        assert_eq!(
            parse_retry_after("Tue, 14 Nov 2023 22:14:20 GMT", NOW),
            want
        );
        assert_eq!(
            parse_retry_after("Tuesday, 14-Nov-23 22:14:20 GMT", NOW),
            want
        );
        assert_eq!(parse_retry_after("Tue Nov 14 22:14:20 2023", NOW), want);
    }

    #[test]
    fn past_dates_mean_now() {
        assert_eq!(
            parse_retry_after("Mon, 01 Jan 1990 00:00:00 GMT", NOW),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn garbage_and_negatives_are_ignored() {
        for v in ["-1", "abc", "1e9", "1.5", "", "12 seconds", "+5", "\u{0}7"] {
            assert_eq!(parse_retry_after(v, NOW), None, "{v:?}");
        }
    }

    #[test]
    fn huge_values_saturate_instead_of_overflowing() {
        assert_eq!(
            parse_retry_after("99999999999999999999999999", NOW),
            Some(Duration::from_secs(u64::MAX))
        );
        let far = parse_retry_after("Tue, 01 Jan 2999 00:00:00 GMT", NOW).unwrap_or_default();
        assert!(far > Duration::from_secs(900 * 365 * 86_400));
    }
}
