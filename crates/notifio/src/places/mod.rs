//! Places: where a listing is, where the user's places are, and how long it takes between
//! them (docs/commutes.md).
//!
//! A flat is first judged by where it is ("how long to work?"), so a listing gets a place
//! (coordinates and how precise they are) and each of the user's named places a travel time.
//! Everything here is pure: the geocoder and the router are reached through the app's one HTTP
//! stack (the fetcher), so their clients are request builders and answer parsers
//! ([`geocode`], [`route`]); a listing is judged locally against a cached reachability answer
//! ([`reach`]), so the router is asked once per place and mode a day, never once per listing.
//!
//! - [`address`]: what a card shows, turned into a query a geocoder can answer and a cache key.
//! - [`geocode`]: the geocoder's requests and answers (MOTIS `geocode`, Nominatim `search`).
//! - [`route`]: the router's requests and answers (MOTIS `one-to-all`, `one-to-many`).
//! - [`reach`]: a listing's travel time from those answers, the filter, the area for the map.

pub mod address;
pub mod geocode;
pub mod reach;
pub mod route;

#[cfg(test)]
mod against_fakes;
#[cfg(test)]
#[path = "../../tests/support/motis.rs"]
mod fake;

use serde::{Deserialize, Serialize};
use std::fmt;
use url::Url;

/// The mean Earth radius of the haversine formula, in metres.
const EARTH_RADIUS_M: f64 = 6_371_008.8;

/// A point on Earth in WGS 84 degrees, as geocoders, routers and map tiles use them.
///
/// Always valid: both finite, the latitude in −90…90, the longitude in −180…180, and not
/// exactly (0, 0): pages that lack a position often write zeros ("null island"), and a flat in
/// the Gulf of Guinea is a missing place, not a far one.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawCoordinates")]
pub struct Coordinates {
    lat: f64,
    lon: f64,
}

/// What deserializing reads before [`Coordinates::new`] checks it.
#[derive(Deserialize)]
struct RawCoordinates {
    lat: f64,
    lon: f64,
}

impl TryFrom<RawCoordinates> for Coordinates {
    type Error = CoordinatesError;
    fn try_from(r: RawCoordinates) -> Result<Self, Self::Error> {
        Self::new(r.lat, r.lon)
    }
}

/// Why two numbers are not a place.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinatesError {
    /// Not a number, or infinite.
    #[error("coordinates must be numbers")]
    NotANumber,
    /// A latitude past a pole.
    #[error("latitude {0} is outside -90..90")]
    Latitude(f64),
    /// A longitude past the antimeridian.
    #[error("longitude {0} is outside -180..180")]
    Longitude(f64),
    /// (0, 0): what pages write when they have no position.
    #[error("0, 0 is what a page writes when it has no position")]
    NullIsland,
    /// Text that is not `latitude, longitude`.
    #[error("`{0}` is not `latitude, longitude` in degrees (e.g. `52.5219, 13.4132`)")]
    Text(String),
}

impl Coordinates {
    /// The point at `lat`, `lon` (degrees), if it is a valid one.
    ///
    /// # Errors
    /// See [`CoordinatesError`].
    pub fn new(lat: f64, lon: f64) -> Result<Self, CoordinatesError> {
        if !lat.is_finite() || !lon.is_finite() {
            return Err(CoordinatesError::NotANumber);
        }
        if !(-90.0..=90.0).contains(&lat) {
            return Err(CoordinatesError::Latitude(lat));
        }
        if !(-180.0..=180.0).contains(&lon) {
            return Err(CoordinatesError::Longitude(lon));
        }
        if lat == 0.0 && lon == 0.0 {
            return Err(CoordinatesError::NullIsland);
        }
        Ok(Self { lat, lon })
    }

    /// `"52.5219, 13.4132"` (a config's `at = …` written as coordinates): latitude first, as
    /// maps print it.
    ///
    /// # Errors
    /// [`CoordinatesError::Text`] when it is not two numbers, else as [`Self::new`].
    pub fn parse(text: &str) -> Result<Self, CoordinatesError> {
        let bad = || CoordinatesError::Text(text.chars().take(80).collect());
        let (lat, lon) = text.split_once(',').ok_or_else(bad)?;
        let num = |s: &str| s.trim().parse::<f64>().map_err(|_| bad());
        Self::new(num(lat)?, num(lon)?)
    }

    /// Whether `text` looks like coordinates rather than an address: two numbers and a comma.
    #[must_use]
    pub fn looks_like(text: &str) -> bool {
        text.split_once(',').is_some_and(|(a, b)| {
            let num = |s: &str| {
                let s = s.trim();
                !s.is_empty() && s.parse::<f64>().is_ok()
            };
            num(a) && num(b)
        })
    }

    /// Latitude in degrees.
    #[must_use]
    pub const fn lat(self) -> f64 {
        self.lat
    }

    /// Longitude in degrees.
    #[must_use]
    pub const fn lon(self) -> f64 {
        self.lon
    }

    /// The great-circle distance to `other` in metres (haversine): what a listing's walk to a
    /// stop is estimated from.
    #[must_use]
    pub fn distance_m(self, other: Self) -> f64 {
        let (p1, p2) = (self.lat.to_radians(), other.lat.to_radians());
        let dp = p2 - p1;
        let dl = (other.lon - self.lon).to_radians();
        let a = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
        2.0 * EARTH_RADIUS_M * a.sqrt().min(1.0).asin()
    }

    /// `lat<sep>lon` with 6 decimals (about 0.1 m), as the routers' parameters take them.
    pub(crate) fn param(self, sep: char) -> String {
        format!("{:.6}{sep}{:.6}", self.lat, self.lon)
    }
}

impl fmt::Display for Coordinates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}, {:.6}", self.lat, self.lon)
    }
}

/// How precisely a listing's place is known, finest first: the order compares coarseness.
///
/// `check --json` says it beside the place; a commute from a `district` is "about", and a
/// `city` gives none (its centre says nothing about where in it the flat is).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Coordinates the page gave for the listing itself.
    Exact,
    /// A street, with or without a house number, as a geocoder placed it.
    Street,
    /// A district, neighbourhood or postcode area: its centre.
    District,
    /// A town or city: its centre.
    City,
}

impl Precision {
    /// The word `check --json` and the map use.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Street => "street",
            Self::District => "district",
            Self::City => "city",
        }
    }

    /// The coarser of the two: what a geocoder's answer is worth when the text asked could
    /// give at best `other` (a street found for "Berlin" is still only Berlin).
    #[must_use]
    pub fn coarser(self, other: Self) -> Self {
        self.max(other)
    }

    /// Whether a travel time from here is "about": the place is an area's centre.
    #[must_use]
    pub const fn is_approximate(self) -> bool {
        matches!(self, Self::District | Self::City)
    }

    /// Whether a travel time from here means anything at all (not a whole city's centre).
    #[must_use]
    pub const fn gives_commute(self) -> bool {
        !matches!(self, Self::City)
    }

    /// What an OpenStreetMap place type says: Nominatim's `addresstype` (and its `type`), the
    /// keys of its `address` details. Finer than a street is still [`Self::Street`] (the
    /// card's text was an address, not the flat's own position); coarser than a city (county,
    /// state, country) is no place for a listing: `None`.
    #[must_use]
    pub fn from_osm_type(kind: &str) -> Option<Self> {
        Some(match kind {
            "house" | "house_number" | "building" | "road" | "street" | "residential"
            | "pedestrian" | "living_street" | "footway" | "service" | "square" | "amenity"
            | "shop" | "tourism" | "office" | "leisure" | "railway" | "highway" | "place" => {
                Self::Street
            }
            "neighbourhood" | "quarter" | "suburb" | "city_district" | "district" | "borough"
            | "postcode" | "hamlet" | "city_block" | "croft" | "allotments"
            | "isolated_dwelling" | "farm" => Self::District,
            "city" | "town" | "village" | "municipality" => Self::City,
            _ => return None,
        })
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a listing is: a point and how precisely it stands for the flat.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Place {
    /// The point: the flat's own, or the centre of what its card names.
    #[serde(flatten)]
    pub at: Coordinates,
    /// How precisely that point stands for the flat.
    pub precision: Precision,
}

/// How the user travels to one of their places (`by = "transit" | "bike" | "walk" | "car"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TravelMode {
    /// Public transport, with walks at either end: MOTIS `one-to-all`.
    Transit,
    /// Cycling the whole way: MOTIS `one-to-many`, profile `BIKE`.
    Bike,
    /// Walking the whole way: MOTIS `one-to-many`, profile `WALK`.
    Walk,
    /// Driving: MOTIS `one-to-many`, profile `CAR` (no traffic, no parking).
    Car,
}

/// A `by = …` that is none of the modes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a way to travel: use transit, bike, walk or car")]
pub struct UnknownMode(pub String);

impl TravelMode {
    /// Every mode, in the order the docs list them.
    pub const ALL: [Self; 4] = [Self::Transit, Self::Bike, Self::Walk, Self::Car];

    /// The config's word for a mode, exactly as [`Self::as_str`] writes it.
    ///
    /// # Errors
    /// [`UnknownMode`] with the word (cut to 40 characters) for anything else.
    pub fn parse(word: &str) -> Result<Self, UnknownMode> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == word)
            .ok_or_else(|| UnknownMode(word.chars().take(40).collect()))
    }

    /// The config's word.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Transit => "transit",
            Self::Bike => "bike",
            Self::Walk => "walk",
            Self::Car => "car",
        }
    }

    /// How a message says it: "by transit", "on foot".
    #[must_use]
    pub const fn phrase(self) -> &'static str {
        match self {
            Self::Transit => "by transit",
            Self::Bike => "by bike",
            Self::Walk => "on foot",
            Self::Car => "by car",
        }
    }

    /// MOTIS's `Mode` for a street mode's `one-to-many` profile; `None` for transit.
    #[must_use]
    pub const fn street_profile(self) -> Option<&'static str> {
        match self {
            Self::Transit => None,
            Self::Bike => Some("BIKE"),
            Self::Walk => Some("WALK"),
            Self::Car => Some("CAR"),
        }
    }
}

impl fmt::Display for TravelMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of the user's places (`[[place]] name = "Work", at = …, by = …`), resolved to a point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserPlace {
    /// The user's name for it, as messages say it ("to Work").
    pub name: String,
    /// Where it is.
    pub at: Coordinates,
    /// How the user gets there.
    pub by: TravelMode,
}

/// The travel time from a listing to one of the user's places, as a message says it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commute {
    /// The user's place's name.
    pub place: String,
    /// How.
    pub mode: TravelMode,
    /// Minutes, rounded up; `None` when not known (see `more_than`).
    pub minutes: Option<u32>,
    /// When `minutes` is `None` because the router's answer covers only this many minutes and
    /// the listing is not within them: "more than 35 min". `None` with `minutes` `None` is
    /// unknown (no place on the card, the router unreachable).
    pub more_than: Option<u32>,
    /// The listing's place is a district's centre: "about".
    pub approximate: bool,
}

impl Commute {
    /// A commute nobody could work out.
    #[must_use]
    pub fn unknown(place: &str, mode: TravelMode) -> Self {
        Self {
            place: place.to_owned(),
            mode,
            minutes: None,
            more_than: None,
            approximate: false,
        }
    }

    /// Whether the time is known, or at least known to be longer than a bound.
    #[must_use]
    pub const fn is_known(&self) -> bool {
        self.minutes.is_some() || self.more_than.is_some()
    }
}

/// "27 min", "1 h 05 min".
fn fmt_minutes(m: u32) -> String {
    if m < 60 {
        format!("{m} min")
    } else {
        format!("{} h {:02} min", m / 60, m % 60)
    }
}

impl fmt::Display for Commute {
    /// "27 min by transit to Work", "about 12 min by bike to School", "more than 35 min by
    /// transit to Work", "commute to Work unknown".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let about = if self.approximate { "about " } else { "" };
        let (mode, place) = (self.mode.phrase(), &self.place);
        match (self.minutes, self.more_than) {
            (Some(m), _) => write!(f, "{about}{} {mode} to {place}", fmt_minutes(m)),
            (None, Some(m)) => write!(f, "{about}more than {} {mode} to {place}", fmt_minutes(m)),
            (None, None) => write!(f, "commute to {place} unknown"),
        }
    }
}

/// The line a message and the inbox show: each commute, joined by " · ".
#[must_use]
pub fn commute_line(commutes: &[Commute]) -> String {
    commutes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" · ")
}

/// Why a geocoder's or router's answer was not read: a classified outcome, never a panic.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// Larger than an honest answer to this question can be.
    #[error("the answer has {size} bytes, more than the {cap} it may have")]
    TooLarge {
        /// The body's size.
        size: usize,
        /// The cap for this kind of answer.
        cap: usize,
    },
    /// Not the JSON the API's description promises.
    #[error("not the answer the API describes: {0}")]
    Malformed(String),
    /// A position that is no place on Earth.
    #[error("an answer with impossible coordinates: {0}")]
    Coordinates(#[from] CoordinatesError),
}

/// Reads `body` as JSON of type `T`, refusing it over `cap` bytes. serde_json bounds nesting,
/// so a hostile answer is an error, not a deep recursion.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
    cap: usize,
) -> Result<T, AnswerError> {
    if body.len() > cap {
        return Err(AnswerError::TooLarge {
            size: body.len(),
            cap,
        });
    }
    serde_json::from_slice(body).map_err(|e| {
        let mut s = e.to_string();
        s.truncate(200);
        AnswerError::Malformed(s)
    })
}

/// `base` joined with an API path (`api/v1/geocode`, `search`): a base may carry a path of
/// its own (`https://example.org/motis/`), which is kept.
pub(crate) fn endpoint(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    let joined = format!("{}/{path}", url.path().trim_end_matches('/'));
    url.set_path(&joined);
    url
}

/// A query string from `pairs`, every byte but the unreserved ones percent-encoded (a space is
/// `%20`, never `+`, which servers read differently): the same URL for the same question,
/// whatever the server.
pub(crate) fn query_string(pairs: &[(&str, &str)]) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, ESCAPE)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lat: f64, lon: f64) -> Coordinates {
        Coordinates::new(lat, lon).unwrap()
    }

    #[test]
    fn coordinates_are_checked() {
        assert!(Coordinates::new(52.52, 13.40).is_ok());
        assert_eq!(
            Coordinates::new(91.0, 0.5),
            Err(CoordinatesError::Latitude(91.0))
        );
        assert_eq!(
            Coordinates::new(10.0, -180.5),
            Err(CoordinatesError::Longitude(-180.5))
        );
        assert_eq!(
            Coordinates::new(f64::NAN, 1.0),
            Err(CoordinatesError::NotANumber)
        );
        assert_eq!(
            Coordinates::new(1.0, f64::INFINITY),
            Err(CoordinatesError::NotANumber)
        );
        assert_eq!(
            Coordinates::new(0.0, 0.0),
            Err(CoordinatesError::NullIsland)
        );
        // The equator and the prime meridian are places, only their crossing is suspect.
        assert!(Coordinates::new(0.0, 32.58).is_ok());
        assert!(Coordinates::new(-90.0, 180.0).is_ok());
    }

    #[test]
    fn coordinates_parse_from_config_text() {
        let c = Coordinates::parse(" 52.5219 , 13.4132").unwrap();
        assert_eq!((c.lat(), c.lon()), (52.5219, 13.4132));
        assert!(matches!(
            Coordinates::parse("Alexanderplatz, Berlin"),
            Err(CoordinatesError::Text(_))
        ));
        assert_eq!(
            Coordinates::parse("152.5, 13.4"),
            Err(CoordinatesError::Latitude(152.5))
        );
        assert!(Coordinates::looks_like("52.5219, 13.4132"));
        assert!(Coordinates::looks_like("-33.9,18.4"));
        assert!(!Coordinates::looks_like("Alexanderplatz, Berlin"));
        assert!(!Coordinates::looks_like("10115, Berlin"));
        assert!(!Coordinates::looks_like("12,"));
    }

    #[test]
    fn coordinates_deserialize_through_the_same_checks() {
        let c: Coordinates = serde_json::from_str(r#"{"lat": 40.4168, "lon": -3.7038}"#).unwrap();
        assert_eq!(c, at(40.4168, -3.7038));
        assert!(serde_json::from_str::<Coordinates>(r#"{"lat": 95, "lon": 1}"#).is_err());
        assert!(serde_json::from_str::<Coordinates>(r#"{"lat": 0, "lon": 0}"#).is_err());
        // A place is flat in JSON: `{"lat":…,"lon":…,"precision":"street"}`.
        let p = Place {
            at: at(40.4168, -3.7038),
            precision: Precision::Street,
        };
        let json = serde_json::to_value(p).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"lat": 40.4168, "lon": -3.7038, "precision": "street"})
        );
        assert_eq!(serde_json::from_value::<Place>(json).unwrap(), p);
        assert!(
            serde_json::from_value::<Place>(
                serde_json::json!({"lat": 400, "lon": 1, "precision": "street"})
            )
            .is_err()
        );
    }

    #[test]
    fn haversine_matches_known_distances() {
        // Berlin Alexanderplatz to Brandenburger Tor: about 2.9 km.
        let d = at(52.521_918, 13.413_215).distance_m(at(52.516_275, 13.377_704));
        assert!((2_400.0..2_500.0).contains(&d), "{d}");
        // One degree of latitude: 111.2 km everywhere.
        let d = at(10.0, 20.0).distance_m(at(11.0, 20.0));
        assert!((d - 111_195.0).abs() < 10.0, "{d}");
        // Madrid to Berlin: 1,870 km.
        let d = at(40.4168, -3.7038).distance_m(at(52.52, 13.405));
        assert!((1_860_000.0..1_880_000.0).contains(&d), "{d}");
        assert_eq!(at(1.0, 1.0).distance_m(at(1.0, 1.0)), 0.0);
        // Antipodes: half the circumference, no NaN from rounding past 1.
        let d = at(45.0, 10.0).distance_m(at(-45.0, -170.0));
        assert!(
            (d - std::f64::consts::PI * EARTH_RADIUS_M).abs() < 1.0,
            "{d}"
        );
    }

    #[test]
    fn precision_orders_by_coarseness() {
        assert_eq!(Precision::Street.coarser(Precision::City), Precision::City);
        assert_eq!(
            Precision::District.coarser(Precision::Exact),
            Precision::District
        );
        assert!(Precision::District.is_approximate());
        assert!(!Precision::Street.is_approximate());
        assert!(!Precision::City.gives_commute());
        assert_eq!(Precision::from_osm_type("road"), Some(Precision::Street));
        assert_eq!(
            Precision::from_osm_type("suburb"),
            Some(Precision::District)
        );
        assert_eq!(
            Precision::from_osm_type("postcode"),
            Some(Precision::District)
        );
        assert_eq!(Precision::from_osm_type("town"), Some(Precision::City));
        assert_eq!(Precision::from_osm_type("state"), None);
        assert_eq!(Precision::from_osm_type("country"), None);
        assert_eq!(
            serde_json::to_string(&Precision::District).unwrap(),
            "\"district\""
        );
    }

    #[test]
    fn travel_modes_parse_from_config_words() {
        assert_eq!(TravelMode::parse("transit"), Ok(TravelMode::Transit));
        assert_eq!(TravelMode::parse("bike"), Ok(TravelMode::Bike));
        assert_eq!(TravelMode::parse("walk"), Ok(TravelMode::Walk));
        assert_eq!(TravelMode::parse("car"), Ok(TravelMode::Car));
        let e = TravelMode::parse("Bicycle").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`Bicycle` is not a way to travel: use transit, bike, walk or car"
        );
        assert_eq!(TravelMode::Transit.street_profile(), None);
        assert_eq!(TravelMode::Bike.street_profile(), Some("BIKE"));
    }

    #[test]
    fn a_commute_reads_as_a_message_says_it() {
        let work = Commute {
            place: "Work".into(),
            mode: TravelMode::Transit,
            minutes: Some(27),
            more_than: None,
            approximate: false,
        };
        let school = Commute {
            place: "School".into(),
            mode: TravelMode::Bike,
            minutes: Some(12),
            more_than: None,
            approximate: true,
        };
        assert_eq!(
            commute_line(&[work.clone(), school]),
            "27 min by transit to Work · about 12 min by bike to School"
        );
        assert_eq!(
            Commute::unknown("Work", TravelMode::Transit).to_string(),
            "commute to Work unknown"
        );
        let far = Commute {
            minutes: None,
            more_than: Some(35),
            ..work.clone()
        };
        assert_eq!(far.to_string(), "more than 35 min by transit to Work");
        let long = Commute {
            minutes: Some(65),
            mode: TravelMode::Walk,
            ..work
        };
        assert_eq!(long.to_string(), "1 h 05 min on foot to Work");
        assert_eq!(commute_line(&[]), "");
    }

    #[test]
    fn answers_are_bounded_and_classified() {
        let r: Result<Vec<u32>, _> = read_json(b"[1,2,3]", 7);
        assert_eq!(r, Ok(vec![1, 2, 3]));
        assert_eq!(
            read_json::<Vec<u32>>(b"[1,2,3] ", 7),
            Err(AnswerError::TooLarge { size: 8, cap: 7 })
        );
        assert!(matches!(
            read_json::<Vec<u32>>(b"<html>busy</html>", 100),
            Err(AnswerError::Malformed(_))
        ));
        // Deep nesting is an error, not a stack overflow.
        let deep = "[".repeat(100_000);
        assert!(matches!(
            read_json::<serde_json::Value>(deep.as_bytes(), 1 << 20),
            Err(AnswerError::Malformed(_))
        ));
    }

    #[test]
    fn endpoints_keep_a_base_path_and_queries_escape_everything() {
        let base = Url::parse("https://api.transitous.org").unwrap();
        assert_eq!(
            endpoint(&base, "api/v1/geocode").as_str(),
            "https://api.transitous.org/api/v1/geocode"
        );
        let base = Url::parse("https://example.org/motis/?x=1#y").unwrap();
        assert_eq!(
            endpoint(&base, "api/v1/geocode").as_str(),
            "https://example.org/motis/api/v1/geocode"
        );
        assert_eq!(
            query_string(&[("text", "Calle Mayor 3, Sol & Ópera"), ("one", "1.5;2")]),
            "text=Calle%20Mayor%203%2C%20Sol%20%26%20%C3%93pera&one=1.5%3B2"
        );
    }
}
