//! The geocoder's client, as pure functions: the request for an address, and the place its
//! answer gives. The request itself goes through the fetcher, like every request Notifio makes.
//!
//! Two APIs, both on OpenStreetMap data:
//! - **MOTIS** `GET /api/v1/geocode?text=…&language=…` (the default, on Transitous): the
//!   router Notifio asks for travel times is MOTIS too, so one service (or one self-hosted
//!   `motis`) answers both, and nothing about the user's addresses goes anywhere else.
//!   Followed: MOTIS's `openapi.yaml` at commit 1ab03824fd802a64773e2dbcb206f9c1d45dae2a
//!   (API version v5; `geocode` is a v1 endpoint, unchanged in later versions).
//! - **Nominatim** `GET /search?q=…&format=jsonv2&limit=1&addressdetails=1`, or any server
//!   that speaks it (a self-hosted Nominatim, Photon's compatibility endpoint does not).
//!   Followed: Nominatim's "Search queries" and "Place Output" documentation (jsonv2).
//!
//! The usage policies honoured (Transitous's and the OSM Foundation's Nominatim policy) are
//! constants here, for the wiring and the docs to share: at most one request a second to a
//! geocoder, a User-Agent naming Notifio, its version and where to read about it, and every
//! answer cached in the state database and never asked twice (an address's [`cache_key`] is
//! the question; "nothing found" is an answer too).
//!
//! [`cache_key`]: super::address::cache_key

use super::address::AddressQuery;
use super::{AnswerError, Coordinates, Place, Precision, endpoint, query_string, read_json};
use serde::Deserialize;
use std::time::Duration;
use url::Url;

/// The geocoder asked unless the config names another: Transitous's MOTIS (its `geocode`).
pub const DEFAULT_GEOCODER_URL: &str = "https://api.transitous.org";

/// At least this long between two requests to a geocoder (start to start): Nominatim's
/// "an absolute maximum of 1 request per second", kept for every geocoder.
pub const MIN_SPACING: Duration = Duration::from_secs(1);

/// Who asks: Notifio's User-Agent (name, version, where to read about it), as Transitous
/// ("name, version, a way of contact") and Nominatim ("a valid User-Agent identifying the
/// application") ask.
pub const USER_AGENT: &str = crate::fetch::DEFAULT_USER_AGENT;

/// The largest geocoder answer read: ten MOTIS matches or one Nominatim place with its
/// address details are a few KiB.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Which API a geocoder speaks (`[places] geocoder_api = "motis" | "nominatim"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeocoderApi {
    /// MOTIS `GET /api/v1/geocode`.
    Motis,
    /// Nominatim `GET /search`, format `jsonv2`.
    Nominatim,
}

/// A geocoder: where it is, what it speaks, and in which language to ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geocoder {
    /// What it speaks.
    pub api: GeocoderApi,
    /// Its base URL (`https://api.transitous.org`, `http://127.0.0.1:8080/`).
    pub base: Url,
    /// A language tag for names in answers (`de`, `es`), if the user set one.
    pub language: Option<String>,
}

impl Geocoder {
    /// The URL that asks for `query`.
    #[must_use]
    pub fn request_url(&self, query: &AddressQuery) -> Url {
        let lang = self.language.as_deref();
        match self.api {
            GeocoderApi::Motis => motis_url(&self.base, &query.text, lang),
            GeocoderApi::Nominatim => nominatim_url(&self.base, &query.text, lang),
        }
    }

    /// The place a 2xx answer to `query` gives: `None` when the geocoder found nothing (an
    /// answer to cache like any other), its precision no finer than the text allows.
    ///
    /// # Errors
    /// [`AnswerError`] for an answer that is not what the API describes.
    pub fn read_answer(
        &self,
        body: &[u8],
        query: &AddressQuery,
    ) -> Result<Option<Place>, AnswerError> {
        let found = match self.api {
            GeocoderApi::Motis => parse_motis(body)?,
            GeocoderApi::Nominatim => parse_nominatim(body)?,
        };
        Ok(found.map(|p| Place {
            at: p.at,
            precision: p.precision.coarser(query.best),
        }))
    }
}

/// MOTIS `GET {base}/api/v1/geocode?text=…[&language=…]`.
#[must_use]
pub fn motis_url(base: &Url, text: &str, language: Option<&str>) -> Url {
    let mut url = endpoint(base, "api/v1/geocode");
    let mut pairs = vec![("text", text)];
    if let Some(l) = language {
        pairs.push(("language", l));
    }
    url.set_query(Some(&query_string(&pairs)));
    url
}

/// Nominatim `GET {base}/search?q=…&format=jsonv2&limit=1&addressdetails=1[&accept-language=…]`.
#[must_use]
pub fn nominatim_url(base: &Url, text: &str, language: Option<&str>) -> Url {
    let mut url = endpoint(base, "search");
    let mut pairs = vec![
        ("q", text),
        ("format", "jsonv2"),
        ("limit", "1"),
        ("addressdetails", "1"),
    ];
    if let Some(l) = language {
        pairs.push(("accept-language", l));
    }
    url.set_query(Some(&query_string(&pairs)));
    url
}

/// MOTIS's `Match` (openapi.yaml, `components/schemas/Match`): the fields read.
#[derive(Deserialize)]
struct MotisMatch {
    /// `LocationType`: `ADDRESS`, `PLACE` or `STOP`.
    #[serde(rename = "type")]
    kind: String,
    lat: f64,
    lon: f64,
    /// For OSM places: the amenity type (a point of interest), absent for areas.
    #[serde(default)]
    category: Option<String>,
}

/// The precision of a MOTIS match: an `ADDRESS` (a street, with or without its house number)
/// and a `STOP` are street-level points; a `PLACE` with an amenity `category` is a point of
/// interest (street-level), one without is a named area (a district at best; the address
/// text bounds it further).
fn motis_precision(m: &MotisMatch) -> Option<Precision> {
    match m.kind.as_str() {
        "ADDRESS" | "STOP" => Some(Precision::Street),
        "PLACE" => Some(match m.category.as_deref() {
            Some(c) if !c.is_empty() && c != "none" => Precision::Street,
            _ => Precision::District,
        }),
        _ => None,
    }
}

/// A MOTIS `geocode` answer (an array of `Match`, best first): the first match of a type the
/// API lists; `None` for an empty array.
///
/// # Errors
/// [`AnswerError`] for anything else (too large, not an array of matches, impossible
/// coordinates).
pub fn parse_motis(body: &[u8]) -> Result<Option<Place>, AnswerError> {
    let matches: Vec<MotisMatch> = read_json(body, MAX_ANSWER_BYTES)?;
    for m in &matches {
        if let Some(precision) = motis_precision(m) {
            let at = Coordinates::new(m.lat, m.lon)?;
            return Ok(Some(Place { at, precision }));
        }
    }
    Ok(None)
}

/// Nominatim's place (format `jsonv2`): the fields read. Coordinates are strings.
#[derive(Deserialize)]
struct NominatimPlace {
    lat: String,
    lon: String,
    #[serde(default)]
    addresstype: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    place_rank: Option<u32>,
}

/// The precision of a Nominatim place: its `addresstype` (jsonv2), else its `type`, as
/// OpenStreetMap names them ([`Precision::from_osm_type`]); else its `place_rank`, by
/// Nominatim's ranking table (26–30 streets and houses, 19–25 villages, suburbs,
/// neighbourhoods, 13–18 cities and towns; coarser is no place for a listing).
fn nominatim_precision(p: &NominatimPlace) -> Option<Precision> {
    let by_type = [p.addresstype.as_deref(), p.kind.as_deref()]
        .into_iter()
        .flatten()
        .find_map(Precision::from_osm_type);
    by_type.or_else(|| match p.place_rank? {
        26..=30 => Some(Precision::Street),
        19..=25 => Some(Precision::District),
        13..=18 => Some(Precision::City),
        _ => None,
    })
}

/// A Nominatim `search` answer (an array of places, best first; `limit=1` asks for one): the
/// first; `None` for an empty array or a place coarser than a city.
///
/// # Errors
/// [`AnswerError`] for anything else (too large, not an array of places, coordinates that
/// are not numbers or not on Earth).
pub fn parse_nominatim(body: &[u8]) -> Result<Option<Place>, AnswerError> {
    let places: Vec<NominatimPlace> = read_json(body, MAX_ANSWER_BYTES)?;
    let Some(p) = places.first() else {
        return Ok(None);
    };
    let num = |s: &str| {
        s.trim().parse::<f64>().map_err(|_| {
            AnswerError::Malformed(format!(
                "`{}` is not a coordinate",
                s.chars().take(40).collect::<String>()
            ))
        })
    };
    let at = Coordinates::new(num(&p.lat)?, num(&p.lon)?)?;
    Ok(nominatim_precision(p).map(|precision| Place { at, precision }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::places::address::query;

    fn base(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn motis_request_follows_the_description() {
        let url = motis_url(
            &base(DEFAULT_GEOCODER_URL),
            "calle de Alcalá, Goya, Madrid",
            Some("es"),
        );
        assert_eq!(
            url.as_str(),
            "https://api.transitous.org/api/v1/geocode?text=calle%20de%20Alcal%C3%A1%2C%20Goya%2C%20Madrid&language=es"
        );
        let url = motis_url(&base("http://127.0.0.1:8080/motis"), "Berlin", None);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8080/motis/api/v1/geocode?text=Berlin"
        );
    }

    #[test]
    fn nominatim_request_follows_the_description() {
        let url = nominatim_url(
            &base("https://nominatim.example.org/"),
            "10115 Berlin, Mitte",
            Some("de"),
        );
        assert_eq!(
            url.as_str(),
            "https://nominatim.example.org/search?q=10115%20Berlin%2C%20Mitte&format=jsonv2&limit=1&addressdetails=1&accept-language=de"
        );
        // The pairs read back as the server reads them.
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs[0], ("q".into(), "10115 Berlin, Mitte".into()));
    }

    #[test]
    fn motis_matches_give_their_precision() {
        let body =
            br#"[{"type":"ADDRESS","name":"Calle Mayor 3","id":"x","lat":40.4163,"lon":-3.7059,
            "tokens":[[0,11]],"areas":[{"name":"Madrid","adminLevel":8,"matched":true}],"score":1.5,
            "street":"Calle Mayor","houseNumber":"3","zip":"28013"}]"#;
        let p = parse_motis(body).unwrap().unwrap();
        assert_eq!((p.at.lat(), p.at.lon()), (40.4163, -3.7059));
        assert_eq!(p.precision, Precision::Street);
        let place = br#"[{"type":"PLACE","name":"Mitte","id":"node/1","lat":52.53,"lon":13.38,"tokens":[],"areas":[],"score":3}]"#;
        assert_eq!(
            parse_motis(place).unwrap().unwrap().precision,
            Precision::District
        );
        let poi = br#"[{"type":"PLACE","category":"school","name":"Schule","id":"node/2","lat":52.53,"lon":13.38,"tokens":[],"areas":[],"score":3}]"#;
        assert_eq!(
            parse_motis(poi).unwrap().unwrap().precision,
            Precision::Street
        );
        assert_eq!(parse_motis(b"[]"), Ok(None));
        // A type the description does not list is skipped, not guessed at.
        let odd = br#"[{"type":"GALAXY","lat":1,"lon":2},{"type":"STOP","lat":52.5,"lon":13.4}]"#;
        assert_eq!(
            parse_motis(odd).unwrap().unwrap().precision,
            Precision::Street
        );
    }

    #[test]
    fn nominatim_places_give_their_precision() {
        let road = br#"[{"place_id":1,"licence":"ODbL","osm_type":"way","osm_id":"5","lat":"52.5301","lon":"13.4012",
            "category":"highway","type":"residential","place_rank":26,"importance":0.1,"addresstype":"road",
            "name":"Invalidenstra\u00dfe","display_name":"Invalidenstra\u00dfe, Mitte, Berlin","address":{"road":"Invalidenstra\u00dfe"},
            "boundingbox":["52.5","52.6","13.3","13.4"]}]"#;
        let p = parse_nominatim(road).unwrap().unwrap();
        assert_eq!((p.at.lat(), p.at.lon()), (52.5301, 13.4012));
        assert_eq!(p.precision, Precision::Street);
        let suburb = br#"[{"lat":"52.53","lon":"13.38","addresstype":"suburb","type":"administrative","place_rank":20}]"#;
        assert_eq!(
            parse_nominatim(suburb).unwrap().unwrap().precision,
            Precision::District
        );
        // Without addresstype (plain `json`, older servers): its type, then its rank.
        let city = br#"[{"lat":"52.52","lon":"13.40","class":"place","type":"city"}]"#;
        assert_eq!(
            parse_nominatim(city).unwrap().unwrap().precision,
            Precision::City
        );
        let ranked = br#"[{"lat":"52.52","lon":"13.40","type":"yes","place_rank":30}]"#;
        assert_eq!(
            parse_nominatim(ranked).unwrap().unwrap().precision,
            Precision::Street
        );
        let state = br#"[{"lat":"52.52","lon":"13.40","addresstype":"state","place_rank":8}]"#;
        assert_eq!(parse_nominatim(state), Ok(None));
        assert_eq!(parse_nominatim(b"[]"), Ok(None));
    }

    #[test]
    fn hostile_answers_are_errors_not_panics() {
        for body in [
            &b"<html>Bandwidth limit exceeded</html>"[..],
            b"{}",
            b"[{\"type\":\"ADDRESS\"}]",
            b"[{\"type\":\"ADDRESS\",\"lat\":\"x\",\"lon\":1}]",
            b"null",
            b"",
        ] {
            assert!(
                parse_motis(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(matches!(
            parse_motis(br#"[{"type":"ADDRESS","lat":123.0,"lon":1}]"#),
            Err(AnswerError::Coordinates(_))
        ));
        assert!(matches!(
            parse_nominatim(br#"[{"lat":"NaN","lon":"1"}]"#),
            Err(AnswerError::Coordinates(_))
        ));
        assert!(matches!(
            parse_nominatim(br#"[{"lat":"fifty","lon":"1"}]"#),
            Err(AnswerError::Malformed(_))
        ));
        assert!(matches!(
            parse_nominatim(br#"[{"lat":52.5,"lon":13.4}]"#),
            Err(AnswerError::Malformed(_))
        ));
        let huge = format!("[{}]", "0,".repeat(MAX_ANSWER_BYTES / 2) + "0");
        assert!(matches!(
            parse_motis(huge.as_bytes()),
            Err(AnswerError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_text_bounds_the_answer() {
        let g = Geocoder {
            api: GeocoderApi::Motis,
            base: base(DEFAULT_GEOCODER_URL),
            language: None,
        };
        // The geocoder found a street called like the city; the text named only the city.
        let q = query("Berlin").unwrap();
        let body = br#"[{"type":"ADDRESS","name":"Berlin","id":"1","lat":52.52,"lon":13.40,"tokens":[],"areas":[],"score":1}]"#;
        let p = g.read_answer(body, &q).unwrap().unwrap();
        assert_eq!(p.precision, Precision::City);
        let q = query("Piso en Calle Mayor 3, Sol, Madrid").unwrap();
        assert_eq!(
            g.request_url(&q).as_str(),
            "https://api.transitous.org/api/v1/geocode?text=Calle%20Mayor%203%2C%20Sol%2C%20Madrid"
        );
        let p = g.read_answer(body, &q).unwrap().unwrap();
        assert_eq!(p.precision, Precision::Street);
        let n = Geocoder {
            api: GeocoderApi::Nominatim,
            ..g
        };
        assert!(
            n.request_url(&q)
                .as_str()
                .contains("/search?q=Calle%20Mayor%203")
        );
    }

    #[test]
    fn the_user_agent_names_notifio_and_its_version() {
        assert!(USER_AGENT.starts_with(concat!("notifio/", env!("CARGO_PKG_VERSION"))));
        assert!(
            USER_AGENT.contains("http"),
            "a way to read about it: {USER_AGENT}"
        );
    }
}
