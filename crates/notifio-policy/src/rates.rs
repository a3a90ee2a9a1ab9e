//! How often new listings appear on a search, learnt from its own checks: new listings per
//! hour, by hour of the week (docs/policy.md#a-request-budget-per-site).
//!
//! A crawler only learns whether a page changed; a check tells Notifio how many listings on it
//! are new. Each good check adds how long the search was watched since the check before (its
//! exposure, spread over the hours of the week it covered) and how many listings were new
//! (spread the same way: in a Poisson process an arrival is equally likely at any moment of
//! the interval). An hour of the week's rate is shrunk toward the same hour on any day, that
//! toward the search's rate over the whole week times its site's daily rhythm
//! ([`SiteRhythm`], pooled over the site's searches), and the weekly rate toward a prior every
//! new search shares: a new search starts even with the others, its site's searches together
//! show the day and the night within a day, a few weeks the weekday. Everything decays
//! with a half-life of [`HALF_LIFE`], so a market that changes is followed.
//!
//! Hours are local: a user's "07:00–23:00" and a portal's quiet night are local time. The shell
//! passes the offset from UTC ([`LocalOffset`]); nothing here reads a clock or a time zone.

use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Hours in a week: the model's buckets, Monday 00:00 local first.
pub const HOURS_PER_WEEK: usize = 168;

/// The rate (new listings per hour) a search with no history is assumed to have, the same for
/// every search so that new ones start even. Low: a site that has shown nothing yet is not
/// asked at its full budget (in the simulated week this beat 0.5 and 1 per hour: benches/budget.rs).
pub const DEFAULT_PRIOR: f64 = 0.2;

/// After this long, what a check taught counts half.
pub const HALF_LIFE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Pseudo-exposure, in hours, of the prior of a search's weekly rate (a new search's).
pub const PRIOR_HOURS: f64 = 1.0;
/// Pseudo-exposure, in hours, of a search's weekly rate times its site's rhythm, as the prior
/// of one hour of the day: an hour is seen once a day, so its own evidence is thin for days,
/// and the site's rhythm (learnt from all its searches) is a good guess meanwhile.
const HOUR_OF_DAY_PRIOR_HOURS: f64 = 12.0;
/// Pseudo-exposure, in hours, of the site's average as the prior of its rhythm in one hour of
/// the day: the rhythm pools every search of the site, so its evidence is plentiful, and a
/// heavier prior would pull a quiet night toward the day.
const RHYTHM_PRIOR_HOURS: f64 = 0.5;
/// Pseudo-exposure, in hours, of the hour of the day as the prior of one hour of the week
/// (seen once a week).
const HOUR_OF_WEEK_PRIOR_HOURS: f64 = 6.0;

/// The longest gap between two checks that counts as watched time (a laptop asleep for a
/// week is not a week of evidence).
const LONGEST_EXPOSURE: Duration = Duration::from_secs(24 * 3600);

const HOUR_MS: u64 = 3_600_000;

/// Seconds east of UTC of the user's local time (`+3600` in Madrid in winter). Given by the
/// shell, which knows the time zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalOffset(pub i32);

impl LocalOffset {
    /// The hour of the week of `t` in this local time: 0 is Monday 00:00–01:00.
    #[must_use]
    pub fn hour_of_week(self, t: Timestamp) -> usize {
        let local_ms = i128::from(t.0) + i128::from(self.0) * 1000;
        let hours = local_ms.div_euclid(i128::from(HOUR_MS));
        // 1970-01-01 00:00 UTC was a Thursday: hour 72 of its week.
        ((hours + 72).rem_euclid(HOURS_PER_WEEK as i128)) as usize
    }

    /// The minute of the day of `t` in this local time (0..1440).
    #[must_use]
    pub fn minute_of_day(self, t: Timestamp) -> u32 {
        let local_ms = i128::from(t.0) + i128::from(self.0) * 1000;
        (local_ms.div_euclid(60_000).rem_euclid(1440)) as u32
    }
}

/// A search's learnt arrival rates. Cheap to keep (two numbers per hour of the week) and
/// serialisable, so the store can keep it across restarts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArrivalRates {
    /// Decayed new listings seen, per hour of the week.
    listings: Vec<f64>,
    /// Decayed hours watched, per hour of the week.
    hours: Vec<f64>,
    /// When the decay was last applied (epoch ms).
    decayed_at: u64,
}

impl Default for ArrivalRates {
    fn default() -> Self {
        Self::new()
    }
}

impl ArrivalRates {
    /// A search with no history: every estimate is the prior.
    #[must_use]
    pub fn new() -> Self {
        Self {
            listings: vec![0.0; HOURS_PER_WEEK],
            hours: vec![0.0; HOURS_PER_WEEK],
            decayed_at: 0,
        }
    }

    /// A good check at `to`, the one before it at `from`, found `new` listings: the hours in
    /// between were watched and `new` arrived during them.
    pub fn observe(&mut self, from: Timestamp, to: Timestamp, new: u32, offset: LocalOffset) {
        if self.listings.len() != HOURS_PER_WEEK || self.hours.len() != HOURS_PER_WEEK {
            *self = Self::new(); // a stored model of another shape: start afresh
        }
        self.decay(to);
        let span = to.0.saturating_sub(from.0);
        if span == 0 {
            return;
        }
        let longest = u64::try_from(LONGEST_EXPOSURE.as_millis()).unwrap_or(u64::MAX);
        let start = to.0 - span.min(longest);
        let watched = (to.0 - start) as f64;
        let mut at = start;
        while at < to.0 {
            // To the next local hour boundary (offsets are whole minutes: ms arithmetic).
            let local = i128::from(at) + i128::from(offset.0) * 1000;
            let into = local.rem_euclid(i128::from(HOUR_MS)) as u64;
            let end = (at + (HOUR_MS - into)).min(to.0);
            let h = offset.hour_of_week(Timestamp(at));
            let piece = (end - at) as f64;
            self.hours[h] += piece / HOUR_MS as f64;
            self.listings[h] += f64::from(new) * piece / watched;
            at = end;
        }
    }

    /// Multiplies what was learnt by the decay since it was last applied.
    fn decay(&mut self, now: Timestamp) {
        if self.decayed_at == 0 || now.0 <= self.decayed_at {
            self.decayed_at = self.decayed_at.max(now.0);
            return;
        }
        let elapsed = (now.0 - self.decayed_at) as f64 / HALF_LIFE.as_millis() as f64;
        let factor = 0.5f64.powf(elapsed);
        for v in self.listings.iter_mut().chain(self.hours.iter_mut()) {
            *v *= factor;
        }
        self.decayed_at = now.0;
    }

    /// New listings per hour expected in hour of the week `h` (0..168). `prior` is the rate a
    /// search with no history is assumed to have, and `shape` how hour `h` compares with the
    /// week on the search's site (its [`SiteRhythm`]; 1.0 when nothing is known): the search's
    /// weekly rate times the shape is what its hour is shrunk toward.
    #[must_use]
    pub fn rate_in_hour(&self, h: usize, prior: f64, shape: f64) -> f64 {
        let (e, t) = self.totals();
        let week = shrunk(e, t, prior);
        let hour = h % 24;
        let (mut e_day, mut t_day) = (0.0, 0.0);
        for d in 0..7 {
            let b = d * 24 + hour;
            e_day += self.listings.get(b).copied().unwrap_or(0.0);
            t_day += self.hours.get(b).copied().unwrap_or(0.0);
        }
        let of_day = shrunk_by(e_day, t_day, week * shape, HOUR_OF_DAY_PRIOR_HOURS);
        let e_b = self.listings.get(h).copied().unwrap_or(0.0);
        let t_b = self.hours.get(h).copied().unwrap_or(0.0);
        shrunk_by(e_b, t_b, of_day, HOUR_OF_WEEK_PRIOR_HOURS)
    }

    /// New listings per hour over the whole week, given `prior`.
    #[must_use]
    pub fn weekly_rate(&self, prior: f64) -> f64 {
        let (e, t) = self.totals();
        shrunk(e, t, prior)
    }

    /// The hours watched so far (decayed): how much the estimate rests on evidence.
    #[must_use]
    pub fn hours_watched(&self) -> f64 {
        self.totals().1
    }

    fn totals(&self) -> (f64, f64) {
        (self.listings.iter().sum(), self.hours.iter().sum())
    }
}

/// Hours a user says listings come in (`active_hours = "07:00-23:00"`): outside them a search
/// is taken to have no new listings, so it is checked only every `max_interval`. A range may
/// run past midnight (`"22:00-06:00"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveHours {
    /// From this minute of the local day (0..1440), included.
    pub from: u32,
    /// To this one, excluded.
    pub to: u32,
}

impl ActiveHours {
    /// Whether `t` (local time by `offset`) is inside.
    #[must_use]
    pub fn contains(self, t: Timestamp, offset: LocalOffset) -> bool {
        let m = offset.minute_of_day(t);
        if self.from <= self.to {
            (self.from..self.to).contains(&m)
        } else {
            m >= self.from || m < self.to
        }
    }
}

/// A site's daily rhythm: how each hour of the day compares with the site's average, pooled
/// over all its searches. A market's rhythm (listings posted by day, few at night) is the
/// site's more than any one search's, and five searches learn it five times as fast as one:
/// it is the shape each search's hours are shrunk toward.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteRhythm {
    factor: [f64; 24],
}

impl Default for SiteRhythm {
    fn default() -> Self {
        Self { factor: [1.0; 24] }
    }
}

impl SiteRhythm {
    /// The rhythm of the site whose searches have learnt `models`.
    #[must_use]
    pub fn of<'a>(models: impl IntoIterator<Item = &'a ArrivalRates>) -> Self {
        let (mut e, mut t) = ([0.0f64; 24], [0.0f64; 24]);
        for m in models {
            for b in 0..HOURS_PER_WEEK.min(m.listings.len()).min(m.hours.len()) {
                e[b % 24] += m.listings[b];
                t[b % 24] += m.hours[b];
            }
        }
        let (all_e, all_t): (f64, f64) = (e.iter().sum(), t.iter().sum());
        if all_e <= 0.0 || all_t <= 0.0 {
            return Self::default();
        }
        let mean = all_e / all_t;
        let mut factor = [1.0; 24];
        for (h, f) in factor.iter_mut().enumerate() {
            // An hour with its neighbours, half weight each: a market's rhythm is smooth, and
            // one hour's count alone is noisy for weeks.
            let (mut e_h, mut t_h) = (0.0, 0.0);
            for (d, w) in [(23, 0.5), (0, 1.0), (1, 0.5)] {
                e_h += w * e[(h + d) % 24];
                t_h += w * t[(h + d) % 24];
            }
            *f = shrunk_by(e_h, t_h, mean, RHYTHM_PRIOR_HOURS) / mean;
        }
        Self { factor }
    }

    /// How hour of the week `h` compares with the week (1.0: average).
    #[must_use]
    pub fn shape(&self, h: usize) -> f64 {
        self.factor[h % 24]
    }
}

/// A rate from `events` in `hours`, shrunk toward `toward` by [`PRIOR_HOURS`].
fn shrunk(events: f64, hours: f64, toward: f64) -> f64 {
    shrunk_by(events, hours, toward, PRIOR_HOURS)
}

/// A rate from `events` in `hours`, shrunk toward `toward` by `weight` hours of it.
fn shrunk_by(events: f64, hours: f64, toward: f64, weight: f64) -> f64 {
    (events + weight * toward) / (hours + weight)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Monday 2026-11-30 00:00 UTC.
    const MONDAY: u64 = 1_795_996_800_000;

    #[test]
    fn hours_of_the_week_start_on_monday_in_local_time() {
        let utc = LocalOffset(0);
        assert_eq!(utc.hour_of_week(Timestamp(MONDAY)), 0);
        assert_eq!(utc.hour_of_week(Timestamp(MONDAY + 25 * HOUR_MS)), 25);
        assert_eq!(utc.hour_of_week(Timestamp(MONDAY - 1)), 167, "Sunday 23:59");
        // Madrid in winter: Monday 00:30 local is Sunday 23:30 UTC.
        let madrid = LocalOffset(3600);
        assert_eq!(madrid.hour_of_week(Timestamp(MONDAY - HOUR_MS / 2)), 0);
        assert_eq!(madrid.minute_of_day(Timestamp(MONDAY)), 60);
        assert_eq!(LocalOffset(-5 * 3600).hour_of_week(Timestamp(MONDAY)), 163);
    }

    #[test]
    fn a_new_search_is_the_prior_and_evidence_moves_it() {
        let mut r = ArrivalRates::new();
        assert_eq!(r.rate_in_hour(10, 1.0, 1.0), 1.0);
        assert_eq!(r.weekly_rate(3.0), 3.0);
        // Three days watched every minute, 2 listings an hour in the day, none at night.
        let mut t = MONDAY;
        while t < MONDAY + 3 * 24 * HOUR_MS {
            let hour = ((t - MONDAY) / HOUR_MS) % 24;
            let new = u32::from((7..23).contains(&hour) && (t / 60_000).is_multiple_of(30));
            r.observe(Timestamp(t), Timestamp(t + 60_000), new, LocalOffset(0));
            t += 60_000;
        }
        let rhythm = SiteRhythm::of([&r]);
        let day = r.rate_in_hour(24 * 3 + 12, 1.0, rhythm.shape(12)); // Thursday: never seen
        let night = r.rate_in_hour(24 * 3 + 3, 1.0, rhythm.shape(3));
        assert!((1.5..2.5).contains(&day), "day {day}");
        assert!(night < 0.2, "night {night}");
        assert!(
            rhythm.shape(12) > 1.2 && rhythm.shape(3) < 0.2,
            "{rhythm:?}"
        );
        // 72 hours watched, each decayed by its age: ∫ 2^(-t/168 h) over three days.
        assert!(
            (60.0..65.0).contains(&r.hours_watched()),
            "{}",
            r.hours_watched()
        );
        // Without a rhythm, the night is shrunk toward the week: higher.
        assert!(r.rate_in_hour(24 * 3 + 3, 1.0, 1.0) > night);
    }

    #[test]
    fn active_hours_may_run_past_midnight() {
        let day = ActiveHours {
            from: 7 * 60,
            to: 23 * 60,
        };
        let night = ActiveHours {
            from: 22 * 60,
            to: 6 * 60,
        };
        let at = |h: u64| Timestamp(MONDAY + h * HOUR_MS);
        assert!(day.contains(at(7), LocalOffset(0)) && !day.contains(at(23), LocalOffset(0)));
        assert!(night.contains(at(23), LocalOffset(0)) && night.contains(at(5), LocalOffset(0)));
        assert!(!night.contains(at(12), LocalOffset(0)));
        // 06:30 UTC is 07:30 in Madrid in winter.
        let half = Timestamp(MONDAY + 6 * HOUR_MS + HOUR_MS / 2);
        assert!(day.contains(half, LocalOffset(3600)) && !day.contains(half, LocalOffset(0)));
    }

    #[test]
    fn evidence_decays_by_half_in_a_week() {
        let mut r = ArrivalRates::new();
        r.observe(
            Timestamp(MONDAY),
            Timestamp(MONDAY + HOUR_MS),
            10,
            LocalOffset(0),
        );
        let before = r.hours_watched();
        let a_week_on = Timestamp(MONDAY + HOUR_MS + 7 * 24 * HOUR_MS);
        r.observe(a_week_on, a_week_on, 0, LocalOffset(0));
        assert!((r.hours_watched() - before / 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_long_gap_counts_a_day_at_most_and_a_bad_shape_starts_afresh() {
        let mut r = ArrivalRates::new();
        r.observe(Timestamp(0), Timestamp(MONDAY), 5, LocalOffset(0));
        assert!((r.hours_watched() - 24.0).abs() < 1e-6);
        let mut odd: ArrivalRates =
            serde_json::from_str(r#"{"listings":[1.0],"hours":[2.0],"decayed_at":0}"#).unwrap();
        odd.observe(
            Timestamp(MONDAY),
            Timestamp(MONDAY + HOUR_MS),
            1,
            LocalOffset(0),
        );
        assert!((odd.hours_watched() - 1.0).abs() < 1e-9);
    }
}
