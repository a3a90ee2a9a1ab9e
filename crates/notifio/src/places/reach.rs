//! Judging a listing locally: its travel time to each of the user's places from the router's
//! cached answers, whether a search's `max_commute` lets it through, and the area the map
//! draws. No request is made here; that is what lets the router be asked once per place and
//! mode a day instead of once per listing.
//!
//! Transit: the `one-to-all` answer lists the stops from which the place is reached within
//! the limit, with their minutes. A listing's time is the best, over the stops within
//! [`WALK_RADIUS_M`] of it, of the stop's minutes plus the walk to it (at
//! [`WALK_METRES_PER_MINUTE`] along [`DETOUR`] times the straight line), or walking all the
//! way if that is quicker. A listing near no such stop is *beyond* the limit, not unknown:
//! the answer covers everything within it. Street modes: `one-to-many` gives the time
//! directly. A listing placed only to its district is "about"; only to its city, unknown.

use super::route::Reachable;
use super::{Commute, Coordinates, Place, UserPlace};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// How far a listing's walk to a stop may be, in metres (straight line): about a quarter of
/// an hour on foot.
pub const WALK_RADIUS_M: f64 = 1200.0;

/// Walking speed: 4.5 km/h.
pub const WALK_METRES_PER_MINUTE: f64 = 75.0;

/// Streets are not straight lines: a walk is this much longer than the crow flies.
pub const DETOUR: f64 = 1.3;

/// The most circles an area is drawn with (the largest kept): a browser draws that many fast.
pub const MAX_AREA_CIRCLES: usize = 3000;

/// Minutes to walk `distance_m` metres of straight line.
#[must_use]
pub fn walk_minutes(distance_m: f64) -> f64 {
    distance_m * DETOUR / WALK_METRES_PER_MINUTE
}

/// The metres of straight line walked in `minutes`.
fn walk_reach_m(minutes: f64) -> f64 {
    minutes * WALK_METRES_PER_MINUTE / DETOUR
}

/// The transit minutes from `listing` to `place` by a `one-to-all` answer: the best stop within
/// walking distance plus the walk, or the walk alone if quicker (fractional).
fn transit_minutes(reach: &Reachable, place: Coordinates, listing: Coordinates) -> f64 {
    // A degree of latitude is 111 km everywhere: stops further north or south than the
    // radius are skipped before any trigonometry.
    let lat_span = WALK_RADIUS_M / 111_000.0;
    reach
        .stops
        .iter()
        .filter(|s| (s.at.lat() - listing.lat()).abs() <= lat_span)
        .filter_map(|s| {
            let d = s.at.distance_m(listing);
            (d <= WALK_RADIUS_M).then(|| f64::from(s.minutes) + walk_minutes(d))
        })
        .fold(walk_minutes(place.distance_m(listing)), f64::min)
}

/// Whole minutes, rounded up (a commute of 26.2 minutes is said as 27).
fn whole(minutes: f64) -> u32 {
    // Finite, non-negative and capped: the cast cannot wrap.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let m = minutes.ceil().clamp(0.0, f64::from(u32::MAX)) as u32;
    m
}

/// The commute to `user`'s place from a listing, by an answer asked with a limit of `asked`
/// minutes: `answer` (`None` when there is none) gives the listing's minutes from its point,
/// `None` when the listing is not within the limit. No place on the card, or only its city,
/// gives an unknown commute; a district's, an approximate one.
fn commute(
    user: &UserPlace,
    listing: Option<Place>,
    asked: u32,
    answer: Option<impl FnOnce(Coordinates) -> Option<u32>>,
) -> Commute {
    let mut c = Commute::unknown(&user.name, user.by);
    let (Some(listing), Some(answer)) = (listing, answer) else {
        return c;
    };
    if !listing.precision.gives_commute() {
        return c;
    }
    c.approximate = listing.precision.is_approximate();
    match answer(listing.at) {
        Some(m) if m <= asked => c.minutes = Some(m),
        _ => c.more_than = Some(asked),
    }
    c
}

/// The commute by transit from a listing to `user`'s place: `reach` is the cached
/// `one-to-all` answer for that place, asked with a limit of `asked` minutes (`None` when
/// there is none: the router was unreachable or refused).
#[must_use]
pub fn transit_commute(
    user: &UserPlace,
    listing: Option<Place>,
    reach: Option<&Reachable>,
    asked: u32,
) -> Commute {
    let answer = reach.map(|r| move |at| Some(whole(transit_minutes(r, user.at, at))));
    commute(user, listing, asked, answer)
}

/// The commute by a street mode from a listing to `user`'s place: `seconds` is the listing's
/// entry in a `one-to-many` answer asked with a limit of `asked` minutes: `Some(Some(s))` a
/// time, `Some(None)` no path within the limit, `None` no answer (not asked, unreachable).
#[must_use]
pub fn street_commute(
    user: &UserPlace,
    listing: Option<Place>,
    seconds: Option<Option<u32>>,
    asked: u32,
) -> Commute {
    let answer = seconds.map(|s| move |_| s.map(|s| s.div_ceil(60)));
    commute(user, listing, asked, answer)
}

/// What a search's `max_commute` says about a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Within every limit.
    Pass,
    /// Beyond a limit: not announced.
    HeldBack,
    /// A limit could not be judged (no place, the router unreachable): announced, saying so,
    /// unless the search is `strict`.
    Unknown,
}

impl Verdict {
    /// Whether the listing is announced: passed, or unknown on a search that is not `strict`.
    #[must_use]
    pub const fn announces(self, strict: bool) -> bool {
        match self {
            Self::Pass => true,
            Self::HeldBack => false,
            Self::Unknown => !strict,
        }
    }

    /// All limits together: any held back holds it back; else any unknown is unknown.
    #[must_use]
    pub fn all(verdicts: impl IntoIterator<Item = Self>) -> Self {
        verdicts
            .into_iter()
            .fold(Self::Pass, |acc, v| match (acc, v) {
                (Self::HeldBack, _) | (_, Self::HeldBack) => Self::HeldBack,
                (Self::Unknown, _) | (_, Self::Unknown) => Self::Unknown,
                _ => Self::Pass,
            })
    }
}

/// Whether `commute` is within `max_minutes` (`max_commute = { Work = "35m" }`). An
/// approximate time is judged like any other: the message says "about".
#[must_use]
pub fn within(commute: &Commute, max_minutes: u32) -> Verdict {
    match (commute.minutes, commute.more_than) {
        (Some(m), _) if m <= max_minutes => Verdict::Pass,
        (Some(_), _) => Verdict::HeldBack,
        // "More than N" with N at least the limit is beyond it; with N below it, unknown.
        (None, Some(n)) if n >= max_minutes => Verdict::HeldBack,
        _ => Verdict::Unknown,
    }
}

/// A disc of the reachable area: its centre and radius.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Circle {
    /// Centre latitude, degrees.
    pub lat: f64,
    /// Centre longitude, degrees.
    pub lon: f64,
    /// Radius in metres.
    pub radius_m: f64,
}

/// The area from which `place` is reached by transit within `limit` minutes, for the map:
/// around each stop reached with time to spare, the disc a walk can cover in that time (at
/// most [`WALK_RADIUS_M`]), and around the place the disc of a walk all the way. This is the
/// same rule [`transit_commute`] judges by, drawn: a listing inside a disc is within the limit.
///
/// Simplified for drawing: of the discs centred within about 100 m of each other, the largest
/// stands for the rest (so an edge may be off by that much), and at most [`MAX_AREA_CIRCLES`]
/// are kept, the largest first.
#[must_use]
pub fn reach_area(reach: &Reachable, place: Coordinates, limit: u32) -> Vec<Circle> {
    let mut cells: HashMap<(i64, i64), Circle> = HashMap::new();
    let discs = reach
        .stops
        .iter()
        .filter(|s| s.minutes < limit)
        .map(|s| {
            let spare = f64::from(limit - s.minutes);
            (s.at, walk_reach_m(spare).min(WALK_RADIUS_M))
        })
        .chain(std::iter::once((place, walk_reach_m(f64::from(limit)))));
    for (at, radius_m) in discs {
        // Cells of a thousandth of a degree: about 111 m by 70 m at 50°.
        #[allow(clippy::cast_possible_truncation)]
        let key = (
            (at.lat() * 1000.0).round() as i64,
            (at.lon() * 1000.0).round() as i64,
        );
        let c = Circle {
            lat: at.lat(),
            lon: at.lon(),
            radius_m,
        };
        cells
            .entry(key)
            .and_modify(|old| {
                if radius_m > old.radius_m {
                    *old = c;
                }
            })
            .or_insert(c);
    }
    let mut out: Vec<Circle> = cells.into_values().collect();
    out.sort_by(|a, b| {
        b.radius_m
            .total_cmp(&a.radius_m)
            .then(a.lat.total_cmp(&b.lat))
            .then(a.lon.total_cmp(&b.lon))
    });
    out.truncate(MAX_AREA_CIRCLES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::places::route::ReachableStop;
    use crate::places::{Precision, TravelMode};

    fn at(lat: f64, lon: f64) -> Coordinates {
        Coordinates::new(lat, lon).unwrap()
    }

    fn stop(lat: f64, lon: f64, minutes: u32) -> ReachableStop {
        ReachableStop {
            at: at(lat, lon),
            name: format!("{lat},{lon}"),
            stop_id: None,
            minutes,
            connections: 1,
        }
    }

    fn work() -> UserPlace {
        UserPlace {
            name: "Work".into(),
            at: at(52.5219, 13.4132),
            by: TravelMode::Transit,
        }
    }

    fn street(c: Coordinates) -> Option<Place> {
        Some(Place {
            at: c,
            precision: Precision::Street,
        })
    }

    /// Metres north of a point, as coordinates.
    fn north(c: Coordinates, m: f64) -> Coordinates {
        at(c.lat() + m / 111_195.0, c.lon())
    }

    #[test]
    fn walking_is_a_fixed_rate_along_a_detour() {
        assert!((walk_minutes(750.0) - 13.0).abs() < 1e-9);
        assert_eq!(walk_minutes(0.0), 0.0);
        assert!((walk_reach_m(13.0) - 750.0).abs() < 1e-9);
    }

    #[test]
    fn the_best_stop_within_walking_distance_counts() {
        let s1 = at(52.50, 13.30);
        let s2 = north(s1, 2000.0);
        let reach = Reachable {
            stops: vec![stop(s1.lat(), s1.lon(), 20), stop(s2.lat(), s2.lon(), 5)],
        };
        // 300 m north of s1: 20 + 300·1.3/75 = 25.2 → 26. s2 is 1.7 km away: too far to walk.
        let flat = north(s1, 300.0);
        let c = transit_commute(&work(), street(flat), Some(&reach), 35);
        assert_eq!(c.minutes, Some(26));
        assert!(!c.approximate);
        assert_eq!(c.to_string(), "26 min by transit to Work");
        // 1 km north of s1: s1 is 20 + 17.3 = 37.3, s2 (1 km away) is 5 + 17.3 = 22.3 → 23.
        let c = transit_commute(&work(), street(north(s1, 1000.0)), Some(&reach), 35);
        assert_eq!(c.minutes, Some(23));
        // Far from every stop, far from Work: beyond the limit, not unknown.
        let c = transit_commute(&work(), street(at(52.30, 13.00)), Some(&reach), 35);
        assert_eq!((c.minutes, c.more_than), (None, Some(35)));
        assert_eq!(c.to_string(), "more than 35 min by transit to Work");
        // Near a stop, but the walk makes it late: beyond.
        let c = transit_commute(&work(), street(north(s1, -1150.0)), Some(&reach), 25);
        assert_eq!(c.more_than, Some(25));
    }

    #[test]
    fn walking_all_the_way_counts_too() {
        let reach = Reachable { stops: vec![] };
        // 600 m from Work: 10.4 → 11 minutes on foot, with no stop at all.
        let c = transit_commute(&work(), street(north(work().at, 600.0)), Some(&reach), 35);
        assert_eq!(c.minutes, Some(11));
    }

    #[test]
    fn district_is_about_city_and_nothing_are_unknown() {
        let s = at(52.50, 13.30);
        let reach = Reachable {
            stops: vec![stop(s.lat(), s.lon(), 20)],
        };
        let district = Some(Place {
            at: north(s, 150.0),
            precision: Precision::District,
        });
        let c = transit_commute(&work(), district, Some(&reach), 35);
        assert_eq!(c.to_string(), "about 23 min by transit to Work");
        let city = Some(Place {
            at: north(s, 150.0),
            precision: Precision::City,
        });
        assert_eq!(
            transit_commute(&work(), city, Some(&reach), 35).to_string(),
            "commute to Work unknown"
        );
        assert!(!transit_commute(&work(), None, Some(&reach), 35).is_known());
        // The router unreachable: unknown, whatever the listing.
        assert!(!transit_commute(&work(), street(s), None, 35).is_known());
    }

    #[test]
    fn street_modes_read_their_durations() {
        let school = UserPlace {
            name: "School".into(),
            at: at(52.5, 13.4),
            by: TravelMode::Bike,
        };
        let flat = street(at(52.51, 13.41));
        let c = street_commute(&school, flat, Some(Some(661)), 30);
        assert_eq!(c.to_string(), "12 min by bike to School");
        let c = street_commute(&school, flat, Some(None), 30);
        assert_eq!(c.to_string(), "more than 30 min by bike to School");
        let c = street_commute(&school, flat, None, 30);
        assert_eq!(c.to_string(), "commute to School unknown");
        // A duration past the limit asked (a lenient server) is still beyond it.
        let c = street_commute(&school, flat, Some(Some(31 * 60)), 30);
        assert_eq!(c.more_than, Some(30));
    }

    #[test]
    fn the_filter_holds_back_only_what_is_known_to_be_too_far() {
        use Verdict::{HeldBack, Pass, Unknown};
        let mut c = Commute::unknown("Work", TravelMode::Transit);
        assert_eq!(within(&c, 35), Unknown);
        c.minutes = Some(35);
        assert_eq!(within(&c, 35), Pass);
        c.minutes = Some(36);
        assert_eq!(within(&c, 35), HeldBack);
        c.minutes = None;
        c.more_than = Some(35);
        assert_eq!(within(&c, 35), HeldBack);
        assert_eq!(within(&c, 30), HeldBack);
        // Known to be over 35, judged against 45: cannot say.
        assert_eq!(within(&c, 45), Unknown);
        assert!(Pass.announces(true));
        assert!(!HeldBack.announces(false));
        assert!(Unknown.announces(false));
        assert!(!Unknown.announces(true));
        assert_eq!(Verdict::all([]), Pass);
        assert_eq!(Verdict::all([Pass, Unknown, Pass]), Unknown);
        assert_eq!(Verdict::all([Unknown, HeldBack, Pass]), HeldBack);
    }

    #[test]
    fn the_area_is_the_rule_drawn() {
        let s1 = at(52.50, 13.30);
        let s2 = north(s1, 3000.0);
        let s3 = north(s1, 50.0); // in s1's cell, less time to spare
        let reach = Reachable {
            stops: vec![
                stop(s1.lat(), s1.lon(), 20),
                stop(s2.lat(), s2.lon(), 33),
                stop(s3.lat(), s3.lon(), 30),
                stop(52.6, 13.5, 35), // no time to spare: no disc
            ],
        };
        let place = work().at;
        let area = reach_area(&reach, place, 35);
        println!("{area:?}");
        assert_eq!(area.len(), 3);
        // Around Work: 35 minutes of walking, 2019 m; s1: 15 minutes to spare, 865 m (s3,
        // beside it, with 5, is left out); s2: 2 minutes to spare, 115 m.
        assert!(
            (area[0].radius_m - 2019.2).abs() < 0.1,
            "{}",
            area[0].radius_m
        );
        assert_eq!((area[0].lat, area[0].lon), (place.lat(), place.lon()));
        assert!(
            (area[1].radius_m - 865.4).abs() < 0.1,
            "{}",
            area[1].radius_m
        );
        assert_eq!((area[1].lat, area[1].lon), (s1.lat(), s1.lon()));
        assert!((area[2].radius_m - 115.4).abs() < 0.1);
        // A point inside a disc is judged within the limit, and one outside all beyond it.
        for (flat, inside) in [
            (north(s1, 800.0), true),
            (north(s1, 900.0), false),
            (north(s2, 100.0), true),
            (north(s2, 130.0), false),
            (at(52.40, 13.10), false),
        ] {
            let judged = transit_commute(&work(), street(flat), Some(&reach), 35)
                .minutes
                .is_some();
            let drawn = area
                .iter()
                .any(|c| at(c.lat, c.lon).distance_m(flat) <= c.radius_m);
            assert_eq!((judged, drawn), (inside, inside), "{flat}");
        }
    }

    #[test]
    fn a_huge_area_is_capped() {
        // Far-apart stops (550 m), none merged: 5,000 discs and Work's.
        let stops = (0..5000)
            .map(|i| stop(50.0 + f64::from(i) * 0.005, 10.0, 10 + i % 20))
            .collect();
        let area = reach_area(&Reachable { stops }, at(50.0, 10.0), 40);
        assert_eq!(area.len(), MAX_AREA_CIRCLES);
        assert!(area.windows(2).all(|w| w[0].radius_m >= w[1].radius_m));
    }
}
