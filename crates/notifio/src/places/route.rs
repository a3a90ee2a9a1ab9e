//! The router's client, as pure functions: the requests that ask MOTIS for travel times, and
//! what its answers say. The requests themselves go through the fetcher.
//!
//! Politeness shapes the questions. Peers ask a router once per listing; Notifio asks once per
//! place and mode for *everything* reachable within the limit, and judges each listing
//! locally from its coordinates ([`super::reach`]):
//! - **transit**: `GET /api/v1/one-to-all?one=LAT,LON&maxTravelTime=MIN&time=…&arriveBy=true`:
//!   every stop from which the place is reached within the limit, arriving at a weekday
//!   morning ([`arrival_time`]: the next Monday–Friday 08:30 in the user's time zone). One
//!   answer serves every listing for a day ([`REACH_TTL`]).
//! - **bike, walk, car**: `GET /api/v1/one-to-many?one=LAT;LON&many=LAT;LON,…&mode=…&max=SECONDS
//!   &maxMatchingDistance=…&arriveBy=true`: the listings of a check in one request (chunked so
//!   that a URL stays short and under the server's `onetomany_max_many`).
//!
//! Followed: MOTIS's `openapi.yaml` at commit 1ab03824fd802a64773e2dbcb206f9c1d45dae2a (API
//! version v5, where `one-to-all` and `one-to-many` are v1 endpoints). Newer MOTIS also serves
//! `one-to-all` as `/api/v6/one-to-all` (which no longer reports a default OSM level) and keeps
//! `/api/v1/one-to-all`, so this works with both.

use super::{AnswerError, Coordinates, TravelMode, endpoint, query_string, read_json};
use notifio_policy::Timestamp;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::time::Duration;
use url::Url;

/// The router asked unless the config names another: Transitous, a free MOTIS instance.
pub const DEFAULT_ROUTER_URL: &str = "https://api.transitous.org";

/// When the user arrives at their place in the reachability question: 08:30 local, a weekday.
pub const ARRIVAL_LOCAL: (i8, i8) = (8, 30);

/// How long a reachability answer stands: a timetable changes little from one day to the next.
pub const REACH_TTL: Duration = Duration::from_secs(24 * 3600);

/// The longest transit limit MOTIS answers by default (`onetoall_max_travel_minutes`, 90);
/// a longer `max_commute` by transit is refused when the config is read.
pub const MAX_TRANSIT_MINUTES: u32 = 90;

/// The longest street-mode limit (MOTIS's default `street_routing_max_direct_seconds`, 6 h).
pub const MAX_STREET_MINUTES: u32 = 360;

/// How far from the street network a point may be and still be routed, in metres (MOTIS's
/// default is 25 m, too tight for a district's centre in a park; newer servers cap it at 250).
pub const MAX_MATCHING_DISTANCE_M: u32 = 250;

/// Listings per `one-to-many` request: below MOTIS's default `onetomany_max_many` (128).
pub const MAX_MANY: usize = 100;

/// The longest URL built, in bytes: well under the 8 KiB that servers and proxies commonly
/// accept for a request line.
pub const MAX_URL_LEN: usize = 4000;

/// The largest `one-to-all` answer read: a 90-minute area in a big city is thousands of stops
/// of a few hundred bytes each.
pub const MAX_REACH_BYTES: usize = 32 * 1024 * 1024;

/// The largest `one-to-many` answer read: [`MAX_MANY`] durations are a few KiB.
pub const MAX_DURATIONS_BYTES: usize = 256 * 1024;

/// A question the router would not answer, caught before it is asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// A limit of zero minutes.
    #[error("a commute limit must be at least 1 minute")]
    ZeroLimit,
    /// A limit past what the router computes.
    #[error("{mode} commutes can be judged up to {max} minutes, not {minutes}")]
    LimitTooLong {
        /// The mode asked.
        mode: TravelMode,
        /// The limit asked.
        minutes: u32,
        /// The longest the router answers for that mode.
        max: u32,
    },
    /// `one-to-many` with transit, or `one-to-all` with a street mode.
    #[error("{0} is not asked this way")]
    WrongMode(TravelMode),
}

fn check_limit(mode: TravelMode, minutes: u32) -> Result<(), RouteError> {
    let max = if mode == TravelMode::Transit {
        MAX_TRANSIT_MINUTES
    } else {
        MAX_STREET_MINUTES
    };
    if minutes == 0 {
        Err(RouteError::ZeroLimit)
    } else if minutes > max {
        Err(RouteError::LimitTooLong { mode, minutes, max })
    } else {
        Ok(())
    }
}

/// Whether `minutes` can be judged by `mode` (for the config to refuse a `max_commute` the
/// router cannot answer, naming the key).
///
/// # Errors
/// [`RouteError::ZeroLimit`], [`RouteError::LimitTooLong`].
pub fn check_max_commute(mode: TravelMode, minutes: u32) -> Result<(), RouteError> {
    check_limit(mode, minutes)
}

/// The arrival time of the reachability question: the first Monday–Friday 08:30 in `tz` after
/// `now` (a typical commute, and the same for every place asked that day). Pure: `now` and the
/// zone are given, so a test fixes both. Falls back to `now` at the end of the calendar.
#[must_use]
pub fn arrival_time(now: Timestamp, tz: &jiff::tz::TimeZone) -> Timestamp {
    use jiff::civil::Weekday;
    let Ok(ms) = i64::try_from(now.as_millis()) else {
        return now;
    };
    let Ok(now_j) = jiff::Timestamp::from_millisecond(ms) else {
        return now;
    };
    let mut day = now_j.to_zoned(tz.clone()).date();
    for _ in 0..8 {
        if !matches!(day.weekday(), Weekday::Saturday | Weekday::Sunday) {
            let at = day.at(ARRIVAL_LOCAL.0, ARRIVAL_LOCAL.1, 0, 0);
            if let Ok(z) = at.to_zoned(tz.clone())
                && z.timestamp() > now_j
            {
                let ms = z.timestamp().as_millisecond();
                return u64::try_from(ms).map_or(now, Timestamp);
            }
        }
        let Ok(next) = day.tomorrow() else {
            return now;
        };
        day = next;
    }
    now
}

/// A time as the API's `date-time` parameters take it: RFC 3339 in UTC, whole seconds.
fn date_time(t: Timestamp) -> String {
    i64::try_from(t.as_millis() / 1000)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(|| "1970-01-01T00:00:00Z".to_owned(), |t| t.to_string())
}

/// `GET {base}/api/v1/one-to-all`: every stop from which `place` is reached by transit within
/// `max_minutes`, arriving at `arrive_at` (from [`arrival_time`]).
///
/// # Errors
/// A limit the router would refuse ([`RouteError`]).
pub fn one_to_all_url(
    base: &Url,
    place: Coordinates,
    max_minutes: u32,
    arrive_at: Timestamp,
) -> Result<Url, RouteError> {
    check_limit(TravelMode::Transit, max_minutes)?;
    let mut url = endpoint(base, "api/v1/one-to-all");
    let (one, max, time) = (
        place.param(','),
        max_minutes.to_string(),
        date_time(arrive_at),
    );
    let matching = MAX_MATCHING_DISTANCE_M.to_string();
    url.set_query(Some(&query_string(&[
        ("one", &one),
        ("maxTravelTime", &max),
        ("time", &time),
        ("arriveBy", "true"),
        ("maxMatchingDistance", &matching),
    ])));
    Ok(url)
}

/// One `one-to-many` request and the listings it asks about (indices into the list given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManyRequest {
    /// The URL to fetch.
    pub url: Url,
    /// Which of the listings it covers, in order.
    pub listings: Range<usize>,
}

/// `GET {base}/api/v1/one-to-many` from each of `listings` to `place` by a street mode, within
/// `max_minutes`: as few requests as the limits allow ([`MAX_MANY`] listings, [`MAX_URL_LEN`]
/// bytes each), none for no listings.
///
/// # Errors
/// Transit ([`RouteError::WrongMode`]), or a limit the router would refuse.
pub fn one_to_many_requests(
    base: &Url,
    place: Coordinates,
    mode: TravelMode,
    listings: &[Coordinates],
    max_minutes: u32,
) -> Result<Vec<ManyRequest>, RouteError> {
    let profile = mode.street_profile().ok_or(RouteError::WrongMode(mode))?;
    check_limit(mode, max_minutes)?;
    let one = place.param(';');
    let max = (u64::from(max_minutes) * 60).to_string();
    let matching = MAX_MATCHING_DISTANCE_M.to_string();
    let build = |many: &str| {
        let mut url = endpoint(base, "api/v1/one-to-many");
        url.set_query(Some(&query_string(&[
            ("one", &one),
            ("many", many),
            ("mode", profile),
            ("max", &max),
            ("maxMatchingDistance", &matching),
            ("arriveBy", "true"),
        ])));
        url
    };
    let fixed = build("").as_str().len();
    let mut out = Vec::new();
    let mut start = 0;
    while start < listings.len() {
        let mut end = start;
        let mut len = fixed;
        while end < listings.len() && end - start < MAX_MANY {
            // `;` and `,` are escaped: 2 bytes more each.
            let item = listings[end].param(';').len() + 2 + if end > start { 3 } else { 0 };
            if end > start && len + item > MAX_URL_LEN {
                break;
            }
            len += item;
            end += 1;
        }
        let many: Vec<String> = listings[start..end].iter().map(|c| c.param(';')).collect();
        out.push(ManyRequest {
            url: build(&many.join(",")),
            listings: start..end,
        });
        start = end;
    }
    Ok(out)
}

/// A stop from which the user's place is reached within the limit: MOTIS's `ReachablePlace`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReachableStop {
    /// Where the stop is.
    pub at: Coordinates,
    /// Its name, for people (cut to 100 characters).
    pub name: String,
    /// The timetable's stop id, if the answer has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_id: Option<String>,
    /// Minutes from leaving this stop to arriving at the place.
    pub minutes: u32,
    /// Connections used (`k`: 1 direct, 2 with one transfer…).
    pub connections: u32,
}

/// A `one-to-all` answer: what the transit time of any listing is judged from, for a day.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reachable {
    /// The stops the place is reached from within the limit asked.
    pub stops: Vec<ReachableStop>,
}

/// MOTIS's `Place` (openapi.yaml `components/schemas/Place`): the fields read.
#[derive(Deserialize)]
struct MotisPlace {
    lat: f64,
    lon: f64,
    #[serde(default)]
    name: String,
    #[serde(default, rename = "stopId")]
    stop_id: Option<String>,
}

/// MOTIS's `ReachablePlace`.
#[derive(Deserialize)]
struct MotisReachablePlace {
    place: MotisPlace,
    /// Total travel duration in minutes (an integer).
    duration: i64,
    #[serde(default)]
    k: u32,
}

/// MOTIS's `Reachable`. `all` is read as required: MOTIS always writes it (empty when nothing
/// is reachable), and a body without it (`{"error": …}`) must not read as "nothing reachable".
#[derive(Deserialize)]
struct MotisReachable {
    all: Vec<MotisReachablePlace>,
}

/// A `one-to-all` answer (`Reachable`: `one`, and `all` the reachable places). A stop whose
/// position is no place (a timetable's missing coordinates, written as 0, 0) is left out: the
/// other stops still tell. Durations are read as magnitudes (the server computes an arrival
/// question backwards and reports it positive).
///
/// # Errors
/// [`AnswerError`] for an answer that is too large or not a `Reachable`.
pub fn parse_one_to_all(body: &[u8]) -> Result<Reachable, AnswerError> {
    let r: MotisReachable = read_json(body, MAX_REACH_BYTES)?;
    let stops = r
        .all
        .into_iter()
        .filter_map(|p| {
            let at = Coordinates::new(p.place.lat, p.place.lon).ok()?;
            Some(ReachableStop {
                at,
                name: p.place.name.chars().take(100).collect(),
                stop_id: p.place.stop_id.map(|s| s.chars().take(100).collect()),
                minutes: u32::try_from(p.duration.unsigned_abs()).unwrap_or(u32::MAX),
                connections: p.k,
            })
        })
        .collect();
    Ok(Reachable { stops })
}

/// MOTIS's `Duration`: seconds when a path was found, an empty object when not.
#[derive(Deserialize)]
struct MotisDuration {
    #[serde(default)]
    duration: Option<f64>,
}

/// A `one-to-many` answer: one entry per listing asked (`expected`), in order: the travel
/// time in seconds (rounded up), `None` where there is no path within the limit.
///
/// # Errors
/// [`AnswerError::Malformed`] for an answer of another length, or a duration that is negative
/// or not a number; other [`AnswerError`]s as for any answer.
pub fn parse_one_to_many(body: &[u8], expected: usize) -> Result<Vec<Option<u32>>, AnswerError> {
    let all: Vec<MotisDuration> = read_json(body, MAX_DURATIONS_BYTES)?;
    if all.len() != expected {
        return Err(AnswerError::Malformed(format!(
            "{} durations for {expected} places",
            all.len()
        )));
    }
    all.into_iter()
        .map(|d| match d.duration {
            None => Ok(None),
            Some(s) if s.is_finite() && s >= 0.0 => {
                // Bounded by the check: a cast of a finite, non-negative, capped value.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let secs = s.ceil().min(f64::from(u32::MAX)) as u32;
                Ok(Some(secs))
            }
            Some(s) => Err(AnswerError::Malformed(format!("a duration of {s} seconds"))),
        })
        .collect()
}

/// Whether a reachability answer fetched at `fetched_at` still stands at `now`.
#[must_use]
pub fn is_fresh(fetched_at: Timestamp, now: Timestamp) -> bool {
    let ttl = u64::try_from(REACH_TTL.as_millis()).unwrap_or(u64::MAX);
    now.as_millis() < fetched_at.as_millis().saturating_add(ttl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lat: f64, lon: f64) -> Coordinates {
        Coordinates::new(lat, lon).unwrap()
    }

    fn ts(rfc3339: &str) -> Timestamp {
        let t: jiff::Timestamp = rfc3339.parse().unwrap();
        Timestamp(u64::try_from(t.as_millisecond()).unwrap())
    }

    fn berlin() -> jiff::tz::TimeZone {
        // Central European time as a POSIX rule, so the test needs no zone database.
        jiff::tz::TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").unwrap()
    }

    #[test]
    fn arrival_is_the_next_weekday_morning() {
        let tz = berlin();
        // Wednesday 2026-09-02 07:00 in Berlin (05:00 UTC): today 08:30 local, 06:30 UTC.
        let t = arrival_time(ts("2026-09-02T05:00:00Z"), &tz);
        assert_eq!(date_time(t), "2026-09-02T06:30:00Z");
        // Wednesday 09:00 local: tomorrow.
        let t = arrival_time(ts("2026-09-02T07:00:00Z"), &tz);
        assert_eq!(date_time(t), "2026-09-03T06:30:00Z");
        // Friday evening: Monday.
        let t = arrival_time(ts("2026-09-04T18:00:00Z"), &tz);
        assert_eq!(date_time(t), "2026-09-07T06:30:00Z");
        // Saturday 2026-10-24, in summer time; Monday the 26th is in winter time (UTC+1).
        let t = arrival_time(ts("2026-10-24T10:00:00Z"), &tz);
        assert_eq!(date_time(t), "2026-10-26T07:30:00Z");
        // Exactly 08:30 has passed: the next weekday.
        let t = arrival_time(ts("2026-09-02T06:30:00Z"), &tz);
        assert_eq!(date_time(t), "2026-09-03T06:30:00Z");
        // Another zone: Madrid is the same; New York is UTC-4 in September.
        let ny = jiff::tz::TimeZone::posix("EST5EDT,M3.2.0,M11.1.0").unwrap();
        let t = arrival_time(ts("2026-09-02T05:00:00Z"), &ny);
        assert_eq!(date_time(t), "2026-09-02T12:30:00Z");
        let utc = jiff::tz::TimeZone::UTC;
        let t = arrival_time(ts("2026-09-05T00:00:00Z"), &utc);
        assert_eq!(date_time(t), "2026-09-07T08:30:00Z");
    }

    #[test]
    fn one_to_all_request_follows_the_description() {
        let base = Url::parse(DEFAULT_ROUTER_URL).unwrap();
        let url = one_to_all_url(
            &base,
            at(52.521_918, 13.413_215),
            35,
            ts("2026-09-03T06:30:00Z"),
        )
        .unwrap();
        assert_eq!(
            url.as_str(),
            "https://api.transitous.org/api/v1/one-to-all?one=52.521918%2C13.413215&maxTravelTime=35\
             &time=2026-09-03T06%3A30%3A00Z&arriveBy=true&maxMatchingDistance=250"
        );
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs[0], ("one".into(), "52.521918,13.413215".into()));
        assert_eq!(pairs[2], ("time".into(), "2026-09-03T06:30:00Z".into()));
        assert_eq!(
            one_to_all_url(&base, at(1.0, 1.0), 91, Timestamp(0)),
            Err(RouteError::LimitTooLong {
                mode: TravelMode::Transit,
                minutes: 91,
                max: 90
            })
        );
        assert_eq!(
            one_to_all_url(&base, at(1.0, 1.0), 0, Timestamp(0)),
            Err(RouteError::ZeroLimit)
        );
        assert!(check_max_commute(TravelMode::Bike, 120).is_ok());
        assert_eq!(
            check_max_commute(TravelMode::Transit, 120)
                .unwrap_err()
                .to_string(),
            "transit commutes can be judged up to 90 minutes, not 120"
        );
    }

    #[test]
    fn one_to_many_asks_for_many_listings_at_once() {
        let base = Url::parse("http://127.0.0.1:8080").unwrap();
        let listings = [at(52.5, 13.4), at(52.51, 13.41)];
        let reqs =
            one_to_many_requests(&base, at(52.52, 13.42), TravelMode::Bike, &listings, 30).unwrap();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].listings, 0..2);
        assert_eq!(
            reqs[0].url.as_str(),
            "http://127.0.0.1:8080/api/v1/one-to-many?one=52.520000%3B13.420000\
             &many=52.500000%3B13.400000%2C52.510000%3B13.410000&mode=BIKE&max=1800\
             &maxMatchingDistance=250&arriveBy=true"
        );
        let pairs: Vec<(String, String)> = reqs[0].url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs[1],
            (
                "many".into(),
                "52.500000;13.400000,52.510000;13.410000".into()
            )
        );
        assert_eq!(
            one_to_many_requests(&base, at(1.0, 1.0), TravelMode::Transit, &listings, 30),
            Err(RouteError::WrongMode(TravelMode::Transit))
        );
        assert_eq!(
            one_to_many_requests(&base, at(1.0, 1.0), TravelMode::Walk, &[], 30),
            Ok(vec![])
        );
    }

    #[test]
    fn a_long_list_is_chunked_under_both_limits() {
        let listings: Vec<Coordinates> = (0..250)
            .map(|i| at(-33.0 - f64::from(i) * 0.001, -70.0 - f64::from(i) * 0.001))
            .collect();
        let check = |reqs: &[ManyRequest]| {
            let ranges: Vec<Range<usize>> = reqs.iter().map(|r| r.listings.clone()).collect();
            // Each covers the next listings, in order, and all are covered once.
            assert_eq!(ranges.first().unwrap().start, 0);
            assert_eq!(ranges.last().unwrap().end, 250);
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            for r in reqs {
                assert!(
                    r.url.as_str().len() <= MAX_URL_LEN,
                    "{}",
                    r.url.as_str().len()
                );
                assert!(r.listings.len() <= MAX_MANY);
                let many = r
                    .url
                    .query_pairs()
                    .find(|(k, _)| k == "many")
                    .unwrap()
                    .1
                    .into_owned();
                assert_eq!(many.split(',').count(), r.listings.len());
                let first = many.split(',').next().unwrap().to_owned();
                assert_eq!(first, listings[r.listings.start].param(';'));
            }
            ranges
        };
        // The count cuts: 100 a request.
        let base = Url::parse("https://api.transitous.org").unwrap();
        let reqs =
            one_to_many_requests(&base, at(-33.4, -70.6), TravelMode::Car, &listings, 45).unwrap();
        assert_eq!(check(&reqs), vec![0..100, 100..200, 200..250]);
        // Behind a long base path, the URL's length cuts first.
        let long = Url::parse(&format!("https://example.org/{}/", "p".repeat(2500))).unwrap();
        let reqs =
            one_to_many_requests(&long, at(-33.4, -70.6), TravelMode::Car, &listings, 45).unwrap();
        let ranges = check(&reqs);
        assert!(ranges.len() > 3, "{ranges:?}");
        println!("250 listings behind a long path: {ranges:?}");
    }

    #[test]
    fn one_to_all_answers_are_read() {
        let body = br#"{"one":{"name":"START","lat":52.52,"lon":13.41,"level":0},
            "all":[
              {"place":{"name":"S+U Alexanderplatz","stopId":"de-VBB_900100003","lat":52.5219,"lon":13.4115,"level":0,
                        "departure":"2026-09-03T06:21:00Z"},"duration":9,"k":1},
              {"place":{"name":"Broken stop","lat":0,"lon":0,"level":0},"duration":3,"k":1},
              {"place":{"name":"U Rosa-Luxemburg-Platz","lat":52.5283,"lon":13.4103,"level":0},"duration":-14,"k":2}
            ]}"#;
        let r = parse_one_to_all(body).unwrap();
        assert_eq!(r.stops.len(), 2, "the stop at 0,0 is left out");
        assert_eq!(r.stops[0].name, "S+U Alexanderplatz");
        assert_eq!(r.stops[0].stop_id.as_deref(), Some("de-VBB_900100003"));
        assert_eq!(r.stops[0].minutes, 9);
        assert_eq!(r.stops[1].minutes, 14);
        assert_eq!(r.stops[1].connections, 2);
        assert_eq!(
            parse_one_to_all(br#"{"one":{"name":"x","lat":1,"lon":1,"level":0},"all":[]}"#)
                .unwrap()
                .stops,
            vec![]
        );
        // A cached answer reads back the same.
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Reachable>(&json).unwrap(), r);
        for bad in [
            &b"[]"[..],
            br#"{"all":[{"place":{"lat":"north","lon":1},"duration":3}]}"#,
            br#"{"all":[{"place":{"lat":1,"lon":1},"duration":2.5}]}"#,
            // An error body has no `all`: it must not read as "nothing reachable".
            br#"{"error":"maxTravelTime too large"}"#,
            b"{}",
        ] {
            assert!(
                parse_one_to_all(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn one_to_many_answers_are_read() {
        assert_eq!(
            parse_one_to_many(br#"[{"duration":812},{},{"duration":60.2}]"#, 3),
            Ok(vec![Some(812), None, Some(61)])
        );
        assert!(matches!(
            parse_one_to_many(br#"[{"duration":812}]"#, 2),
            Err(AnswerError::Malformed(_))
        ));
        assert!(matches!(
            parse_one_to_many(br#"[{"duration":-5}]"#, 1),
            Err(AnswerError::Malformed(_))
        ));
        assert!(matches!(
            parse_one_to_many(br#"{"error":"mode CAR not supported"}"#, 1),
            Err(AnswerError::Malformed(_))
        ));
        assert!(matches!(
            parse_one_to_many(&vec![b' '; MAX_DURATIONS_BYTES + 1], 1),
            Err(AnswerError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_reachability_answer_stands_for_a_day() {
        let day = 24 * 3600 * 1000;
        assert!(is_fresh(Timestamp(1_000), Timestamp(1_000)));
        assert!(is_fresh(Timestamp(1_000), Timestamp(1_000 + day - 1)));
        assert!(!is_fresh(Timestamp(1_000), Timestamp(1_000 + day)));
        assert!(is_fresh(Timestamp(u64::MAX - 5), Timestamp(u64::MAX - 1)));
    }
}
