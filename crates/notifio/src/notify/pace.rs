//! When a channel may speak: quiet hours, digests and a heartbeat, each channel its own.
//!
//! A phone that buzzes at 3 a.m. for a flat nobody can visit before 9 gets muted, and then
//! the flat that matters is missed too. So a channel can keep quiet for some hours of the
//! local day, can batch what comes in into one digest per period, and can say now and then
//! that it is still watching, so that its silence can be trusted. None of this is a second
//! path for messages: the rules here only decide *when* the sender delivers a channel's
//! outbox rows, and that it merges the rows that waited into one digest
//! (docs/notifications.md#quiet-hours-digests-and-a-heartbeat).
//!
//! Quiet hours are wall-clock hours of the machine's time zone, worked out with jiff at each
//! look, so they follow summer time: a window ends at its end's wall-clock time on that day
//! (a time the spring change skips ends it at the first moment after the gap; one the autumn
//! change repeats ends it the first time).

use super::{AlsoOn, Notification};
use crate::listing::Listing;
use crate::price::PriceChange;
use jiff::tz::TimeZone;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use std::time::Duration;

/// The message every malformed `quiet_hours` gets.
pub const QUIET_HOURS_EXPECTED: &str = "expected quiet hours like \"23:00-07:00\", or \"off\"";

/// Hours of the local day in which a channel sends nothing (`quiet_hours = "23:00-07:00"`).
/// The window may run past midnight; its start is included, its end is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuietHours {
    /// From this minute of the local day (0..1440).
    from: u32,
    /// To this one (1..=1440; 1440 is midnight at the day's end).
    to: u32,
}

/// A `"HH:MM"` as a minute of the day; `24:00` is the day's end (1440).
pub(crate) fn minute_of_day(t: &str) -> Option<u32> {
    let (h, m) = t.trim().split_once(':')?;
    if h.trim().len() > 2 || m.trim().len() != 2 {
        return None;
    }
    let (h, m): (u32, u32) = (h.trim().parse().ok()?, m.trim().parse().ok()?);
    ((h < 24 && m < 60) || (h == 24 && m == 0)).then_some(h * 60 + m)
}

impl QuietHours {
    /// Parses `"23:00-07:00"`; `""` and `"off"` are no quiet hours (`None`).
    ///
    /// # Errors
    /// [`QUIET_HOURS_EXPECTED`] for anything else, and a window that starts when it ends.
    pub fn parse(s: &str) -> Result<Option<Self>, String> {
        let s = s.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let err = || QUIET_HOURS_EXPECTED.to_owned();
        let (from, to) = s.split_once('-').ok_or_else(err)?;
        let (from, to) = (
            minute_of_day(from).ok_or_else(err)?,
            minute_of_day(to).ok_or_else(err)?,
        );
        if from % 1440 == to % 1440 {
            return Err(
                "the quiet hours start and end at the same time: \"off\" turns them off".to_owned(),
            );
        }
        Ok(Some(Self {
            from: from % 1440,
            to: if to == 0 { 1440 } else { to },
        }))
    }

    /// Whether `minute` of the local day is inside.
    fn contains_minute(self, minute: u32) -> bool {
        if self.from < self.to {
            (self.from..self.to).contains(&minute)
        } else {
            minute >= self.from || minute < self.to
        }
    }

    /// When the quiet window that `t_ms` (epoch ms) is in ends (epoch ms), in time zone `tz`;
    /// `None` when `t_ms` is not inside one.
    #[must_use]
    pub fn end_after(self, t_ms: u64, tz: &TimeZone) -> Option<u64> {
        let at = jiff::Timestamp::from_millisecond(i64::try_from(t_ms).ok()?).ok()?;
        let local = at.to_zoned(tz.clone());
        let minute =
            u32::try_from(i32::from(local.hour()) * 60 + i32::from(local.minute())).ok()?;
        if !self.contains_minute(minute) {
            return None;
        }
        let mut day = local.date();
        // Past midnight's start (23:30 in "23:00-07:00"): it ends tomorrow.
        if self.from > self.to && minute >= self.from {
            day = day.tomorrow().ok()?;
        }
        let end = if self.to >= 1440 {
            day.tomorrow().ok()?.at(0, 0, 0, 0)
        } else {
            let (h, m) = (
                i8::try_from(self.to / 60).ok()?,
                i8::try_from(self.to % 60).ok()?,
            );
            day.at(h, m, 0, 0)
        };
        let end = end.to_zoned(tz.clone()).ok()?.timestamp().as_millisecond();
        let end = u64::try_from(end).ok()?;
        // The repeated hour of an autumn change: the window ended the first time round.
        (end > t_ms).then_some(end)
    }
}

impl std::fmt::Display for QuietHours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hm = |m: u32| format!("{:02}:{:02}", m / 60, m % 60);
        write!(f, "{}-{}", hm(self.from), hm(self.to))
    }
}

/// A channel's rhythm: when it keeps quiet, how it batches, how often it says it is alive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pacing {
    /// Hours in which it sends nothing; what came in goes out as one digest at their end.
    pub quiet_hours: Option<QuietHours>,
    /// One digest per this period: the first message that waits starts the period.
    pub digest: Option<Duration>,
    /// A "Still watching" message this often.
    pub heartbeat: Option<Duration>,
}

impl Pacing {
    /// Whether messages can pile up on purpose, so that what waited goes out merged.
    #[must_use]
    pub fn batches(&self) -> bool {
        self.quiet_hours.is_some() || self.digest.is_some()
    }

    /// Until when (epoch ms) the channel's pending rows wait, the oldest of them enqueued at
    /// `oldest_ms`, looked at `now_ms`: the end of its digest period, pushed on to the end of
    /// the quiet hours that period ends in; `None` when they may go now.
    #[must_use]
    pub fn held_until(&self, oldest_ms: u64, now_ms: u64, tz: &TimeZone) -> Option<u64> {
        let mut at = now_ms;
        if let Some(period) = self.digest {
            at = at.max(oldest_ms.saturating_add(millis(period)));
        }
        if let Some(end) = self.quiet_hours.and_then(|q| q.end_after(at, tz)) {
            at = end;
        }
        (at > now_ms).then_some(at)
    }
}

/// Whether a notification is one a digest merges: new listings and price changes. The others
/// (a site that blocks us, an expired session, a heartbeat) say something a list of flats
/// cannot, and go out as they are, right after the digest.
#[must_use]
pub fn merges(n: &Notification) -> bool {
    matches!(
        n,
        Notification::NewListings { .. } | Notification::PriceChanged { .. }
    )
}

/// One [`Notification::Digest`] of `ns` (those that [`merges`]; others are left out), in
/// order: each listing once (a site's listing by its id), with its latest facts; a new listing
/// whose price then changed counts as new and shows the change; several changes of one price
/// show as one, from the first price to the last.
#[must_use]
pub fn digest(ns: &[Notification]) -> Notification {
    let mut sites: Vec<String> = Vec::new();
    let mut searches: Vec<String> = Vec::new();
    let mut listings: Vec<(String, Listing)> = Vec::new();
    let mut new = 0;
    let mut changes: Vec<PriceChange> = Vec::new();
    let mut also_on: Vec<AlsoOn> = Vec::new();
    let mut merged = 0;
    let mut found_at = 0;
    let mut keep = |site: &str, l: &Listing| -> bool {
        match listings.iter_mut().find(|(s, k)| s == site && k.id == l.id) {
            Some((_, known)) => {
                *known = l.clone();
                false
            }
            None => {
                listings.push((site.to_owned(), l.clone()));
                true
            }
        }
    };
    for n in ns {
        let (site, names, found) = match n {
            Notification::NewListings {
                site,
                searches,
                listings: ls,
                found_at,
                also_on: twins,
            } => {
                for l in ls {
                    if keep(site, l) {
                        new += 1;
                    }
                }
                for t in twins {
                    if !also_on.iter().any(|a| a.id == t.id && a.site == t.site) {
                        also_on.push(t.clone());
                    }
                }
                (site, searches, *found_at)
            }
            Notification::PriceChanged {
                site,
                searches,
                listings: ls,
                changes: cs,
                found_at,
            } => {
                for l in ls {
                    keep(site, l);
                }
                for c in cs {
                    match changes.iter_mut().find(|k| k.id == c.id) {
                        Some(k) => {
                            k.to = c.to;
                            k.currency.clone_from(&c.currency);
                        }
                        None => changes.push(c.clone()),
                    }
                }
                (site, searches, *found_at)
            }
            _ => continue,
        };
        merged += 1;
        found_at = found_at.max(found);
        if !sites.contains(site) {
            sites.push(site.clone());
        }
        for s in names {
            if !searches.contains(s) {
                searches.push(s.clone());
            }
        }
    }
    // A change back to where it started is no change.
    changes.retain(|c| c.from != c.to);
    Notification::Digest {
        site: sites.join(", "),
        searches,
        listings: listings.into_iter().map(|(_, l)| l).collect(),
        new,
        changes,
        also_on,
        merged,
        found_at,
    }
}

/// The store's `meta` key under which `channel`'s heartbeat keeps the start of its period.
#[must_use]
pub fn heartbeat_key(channel: &str) -> String {
    format!("heartbeat.{channel}")
}

/// `channel`'s heartbeat at `now_ms`, every `every`: when its period is over, a
/// [`Notification::Heartbeat`] with the figures of the store's `checks` over the period goes
/// into the outbox, and the new period starts, in one transaction (taken before it reads, so
/// two senders on one state directory write one heartbeat). A channel's first look starts its
/// first period. Returns when the next heartbeat is due (epoch ms).
///
/// # Errors
/// SQLite failed (a database without the store's tables too).
pub fn heartbeat(
    conn: &Connection,
    channel: &str,
    every: Duration,
    now_ms: u64,
    tz: &TimeZone,
) -> rusqlite::Result<u64> {
    let key = heartbeat_key(channel);
    let every = millis(every);
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let since = tx
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row([&key], |r| r.get::<_, String>(0))
        .optional()?
        .and_then(|v| v.parse::<u64>().ok())
        // A clock set back past the period's start: the period starts again.
        .filter(|since| *since <= now_ms);
    let start_period = |tx: &Transaction<'_>| {
        tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)")?
            .execute(params![key, now_ms.to_string()])
    };
    let next = match since {
        Some(since) if now_ms < since.saturating_add(every) => {
            return Ok(since.saturating_add(every)); // dropped: nothing written
        }
        Some(since) => {
            let (checks, new, errors) = tx
                .prepare_cached(
                    "SELECT COUNT(*), COALESCE(SUM(new_count), 0),
                            COALESCE(SUM(outcome <> ?3), 0)
                     FROM checks WHERE at >= ?1 AND at < ?2",
                )?
                .query_row(
                    params![
                        to_i64(since),
                        to_i64(now_ms),
                        crate::store::ByName(notifio_policy::Outcome::Ok)
                    ],
                    |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, i64>(2)?,
                        ))
                    },
                )?;
            let n = Notification::Heartbeat {
                checks: to_u64(checks),
                new: to_u64(new),
                errors: to_u64(errors),
                since,
                since_local: local_time(since, tz),
            };
            super::outbox::enqueue(&tx, &n, &[channel], now_ms)?;
            start_period(&tx)?;
            now_ms.saturating_add(every)
        }
        None => {
            start_period(&tx)?;
            now_ms.saturating_add(every)
        }
    };
    tx.commit()?;
    Ok(next)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `t_ms` as the user's clock shows it: "Tue 14 Nov 22:13".
#[must_use]
pub fn local_time(t_ms: u64, tz: &TimeZone) -> String {
    i64::try_from(t_ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|ts| {
            ts.to_zoned(tz.clone())
                .strftime("%a %-d %b %H:%M")
                .to_string()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3_600_000;
    const M: u64 = 60_000;

    fn q(s: &str) -> QuietHours {
        QuietHours::parse(s).unwrap().unwrap()
    }

    /// Epoch ms of a UTC civil time.
    fn utc(s: &str) -> u64 {
        let dt: jiff::civil::DateTime = s.parse().unwrap();
        let ts = dt.to_zoned(TimeZone::UTC).unwrap().timestamp();
        u64::try_from(ts.as_millisecond()).unwrap()
    }

    #[test]
    fn quiet_hours_parse_as_people_write_them() {
        let night = q("23:00-07:00");
        assert_eq!((night.from, night.to), (1380, 420));
        assert_eq!(night.to_string(), "23:00-07:00");
        assert_eq!(q(" 22:30 - 06:15 ").to_string(), "22:30-06:15");
        assert_eq!(q("13:00-24:00").to, 1440);
        assert_eq!(q("13:00-00:00").to, 1440, "midnight ends the day");
        assert_eq!(QuietHours::parse("off"), Ok(None));
        assert_eq!(QuietHours::parse("OFF"), Ok(None));
        assert_eq!(QuietHours::parse(""), Ok(None));
        for bad in [
            "25:00-07:00",
            "23:00",
            "23:60-07:00",
            "7-23",
            "23:00-7:0",
            "night",
            "23:00-07:00-08:00",
            "24:30-01:00",
        ] {
            assert_eq!(
                QuietHours::parse(bad),
                Err(QUIET_HOURS_EXPECTED.to_owned()),
                "{bad}"
            );
        }
        assert!(
            QuietHours::parse("07:00-07:00")
                .unwrap_err()
                .contains("start and end at the same time")
        );
    }

    #[test]
    fn a_window_over_midnight_ends_the_next_morning() {
        let tz = TimeZone::UTC;
        let night = q("23:00-07:00");
        assert_eq!(night.end_after(utc("2024-01-10T22:59:59"), &tz), None);
        assert_eq!(
            night.end_after(utc("2024-01-10T23:00"), &tz),
            Some(utc("2024-01-11T07:00"))
        );
        assert_eq!(
            night.end_after(utc("2024-01-10T23:59"), &tz),
            Some(utc("2024-01-11T07:00"))
        );
        assert_eq!(
            night.end_after(utc("2024-01-11T03:00"), &tz),
            Some(utc("2024-01-11T07:00")),
            "after midnight: the same morning"
        );
        assert_eq!(
            night.end_after(utc("2024-01-11T07:00"), &tz),
            None,
            "end excluded"
        );
        assert_eq!(night.end_after(utc("2024-01-11T12:00"), &tz), None);
        // A window within one day, and one to its end.
        let lunch = q("12:00-14:00");
        assert_eq!(
            lunch.end_after(utc("2024-01-11T13:30"), &tz),
            Some(utc("2024-01-11T14:00"))
        );
        assert_eq!(lunch.end_after(utc("2024-01-11T11:59"), &tz), None);
        let evening = q("20:00-24:00");
        assert_eq!(
            evening.end_after(utc("2024-12-31T21:00"), &tz),
            Some(utc("2025-01-01T00:00")),
            "across a year's end"
        );
    }

    #[test]
    fn quiet_hours_are_local_time_and_follow_summer_time() {
        // Central European time: UTC+1, UTC+2 from the last Sunday of March 02:00.
        let cet = TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").unwrap();
        let night = q("23:00-07:00");
        // 22:30 UTC is 23:30 local in winter: quiet until 07:00 local, 06:00 UTC.
        assert_eq!(
            night.end_after(utc("2024-01-10T22:30"), &cet),
            Some(utc("2024-01-11T06:00"))
        );
        // The night the clocks go forward (31 March 2024) is an hour shorter.
        let start = utc("2024-03-30T22:00"); // 23:00 CET
        let end = night.end_after(start, &cet).unwrap();
        assert_eq!(end, utc("2024-03-31T05:00"), "07:00 CEST");
        assert_eq!(end - start, 7 * H);
        // The night they go back (27 October 2024) is an hour longer.
        let start = utc("2024-10-26T21:00"); // 23:00 CEST
        assert_eq!(night.end_after(start, &cet).unwrap() - start, 9 * H);
        // An end the change skips (02:30 on 31 March) comes at the first moment after it.
        let early = q("01:00-02:30");
        let at = utc("2024-03-31T00:15"); // 01:15 CET
        assert_eq!(early.end_after(at, &cet), Some(utc("2024-03-31T01:30")));
        assert_eq!(
            local_time(utc("2024-03-31T01:30"), &cet),
            "Sun 31 Mar 03:30"
        );
    }

    #[test]
    fn a_digest_period_starts_with_the_first_message_and_waits_out_quiet_hours() {
        let tz = TimeZone::UTC;
        let hourly = Pacing {
            digest: Some(Duration::from_secs(3600)),
            ..Pacing::default()
        };
        let first = utc("2024-01-10T10:05");
        assert_eq!(
            hourly.held_until(first, first + 10 * M, &tz),
            Some(first + H)
        );
        assert_eq!(hourly.held_until(first, first + H, &tz), None);
        let both = Pacing {
            quiet_hours: Some(q("23:00-07:00")),
            ..hourly
        };
        // The period ends at 23:40, inside quiet hours: at their end.
        let late = utc("2024-01-10T22:40");
        assert_eq!(
            both.held_until(late, late, &tz),
            Some(utc("2024-01-11T07:00"))
        );
        assert_eq!(both.held_until(late, utc("2024-01-11T07:00"), &tz), None);
        assert!(!Pacing::default().batches() && both.batches());
        assert_eq!(Pacing::default().held_until(late, late, &tz), None);
    }
}
