//! Time as plain numbers: a [`Timestamp`] is Unix epoch milliseconds, exactly what the JSON
//! interfaces show. The shell reads the clock once per event and passes it in; this crate never
//! does, which is what lets a simulator drive a day of scheduling in seconds.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time: milliseconds since the Unix epoch.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, or zero if `earlier` is later.
    #[must_use]
    pub fn saturating_since(self, earlier: Self) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Self;
    fn add(self, rhs: Duration) -> Self {
        Self(
            self.0
                .saturating_add(u64::try_from(rhs.as_millis()).unwrap_or(u64::MAX)),
        )
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Self;
    fn sub(self, rhs: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(u64::try_from(rhs.as_millis()).unwrap_or(u64::MAX)),
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// Formats a duration in the largest unit that represents it exactly, as docs/policy.md
/// prints ladders: `1m`, `30s`, `1h`, `100ms`, `90s`. Zero is `0s`.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1_000)] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// Formats a countdown for people: `2m 41s`, `1h 05m`, `7s`, `0s`.
#[must_use]
pub fn format_countdown(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A moment as a time of day in UTC, `14:03:07 UTC`, for log lines and reasons that would
/// otherwise print epoch milliseconds. (UTC: the local zone is the OS's business, and this
/// crate reads nothing from the OS.)
#[must_use]
pub fn format_time_of_day(t: Timestamp) -> String {
    let s = t.0 / 1000;
    format!(
        "{:02}:{:02}:{:02} UTC",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day_are_utc_clock_times() {
        assert_eq!(format_time_of_day(Timestamp(0)), "00:00:00 UTC");
        // 2026-12-01T14:03:07.999Z
        assert_eq!(
            format_time_of_day(Timestamp(1_796_133_787_999)),
            "14:03:07 UTC"
        );
    }

    #[test]
    fn durations_print_in_their_largest_exact_unit() {
        assert_eq!(format_duration(Duration::from_secs(60)), "1m");
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
        assert_eq!(format_duration(Duration::from_millis(100)), "100ms");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn countdowns_read_like_a_clock() {
        assert_eq!(format_countdown(Duration::from_secs(161)), "2m 41s");
        assert_eq!(format_countdown(Duration::from_secs(7)), "7s");
        assert_eq!(format_countdown(Duration::from_secs(3900)), "1h 05m");
    }

    #[test]
    fn timestamp_arithmetic_saturates() {
        assert_eq!(Timestamp(5) - Duration::from_millis(10), Timestamp(0));
        assert_eq!(
            Timestamp(u64::MAX) + Duration::from_secs(1),
            Timestamp(u64::MAX)
        );
        assert_eq!(
            Timestamp(10).saturating_since(Timestamp(20)),
            Duration::ZERO
        );
    }
}
