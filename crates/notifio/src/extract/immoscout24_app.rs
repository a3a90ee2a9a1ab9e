//! ImmobilienScout24 through its app: the request IS24's own mobile app sends for a search, and
//! the result list it gets back.
//!
//! IS24's web result pages are behind an AWS WAF captcha for plain clients, while its app reads
//! the same results with a plain `POST {app_api}/search/list?…` (no key, JSON back). The user
//! still writes the web search URL their browser shows; [`app_search`] translates its path
//! (region, kind of property, a filter the site folded into the path) and query (price, rooms,
//! area, sorting, the common filters) into the app's query, and returns every parameter it could
//! not carry over, so the caller warns at start-up instead of silently widening the search.
//! [`from_app_json`] reads the answer, whatever transport brought it. The facts (endpoint,
//! parameter names, path slugs, which filter each kind of property accepts, the app's headers)
//! are those flathunter (since October 2025) and fredy (since its PR #125) recorded against the
//! live API; the code is ours. Pure: no I/O, no clock.

use super::parse::{JsonId, non_empty, parse_area, parse_price, parse_rooms};
use super::{Extraction, absolute};
use crate::listing::Listing;
use base64::Engine as _;
use serde::Deserialize;
use std::fmt;
use url::Url;

/// Where the app's endpoints live unless `[site."immobilienscout24.de"] app_api` says otherwise.
pub const DEFAULT_APP_API: &str = "https://api.mobile.immobilienscout24.de/";

/// Where a listing's public page is, whichever endpoint found it.
const EXPOSE_BASE: &str = "https://www.immobilienscout24.de/expose/";

/// The app version the search endpoint answers (it refuses clients that name none); the
/// current app's, as fredy sends it. It says which protocol we speak, not who we are: that is
/// [`USER_AGENT`]'s second token.
pub const APP_USER_AGENT: &str = "ImmoScout_28.1_26.5.2_._";

/// What Notifio sends as `User-Agent` to the app endpoint: the app version the endpoint
/// expects, then an honest product token naming Notifio and its version. Notifio never hides
/// that it is an automated watcher (docs/sites.md says exactly what is sent and why); the
/// request is still one per check under the site's spacing, ladders and single probe.
pub const USER_AGENT: &str = concat!(
    "ImmoScout_28.1_26.5.2_._ notifio/",
    env!("CARGO_PKG_VERSION"),
    " (rental search watcher)"
);

/// The body the app posts with every search: no ad slots, no user data.
pub const APP_BODY: &str = r#"{"supportedResultListTypes":[],"userData":{}}"#;

/// Sorting when the web URL names none: newest first, so a new listing is on page one.
const NEWEST_FIRST: &str = "-firstactivation";

/// The app's search request for one web search URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppSearch {
    /// Always `POST`.
    pub method: &'static str,
    /// `{app_api}/search/list?…` with the translated query.
    pub url: Url,
    /// Request headers, in order: `User-Agent`, `Accept`, `Content-Type`.
    pub headers: [(&'static str, &'static str); 3],
    /// The JSON body ([`APP_BODY`]).
    pub body: &'static str,
    /// The web URL's parameters that are not in `url`, in the order they appeared.
    pub left_out: Vec<LeftOut>,
}

/// A parameter of the web search URL the app search does not carry over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    /// Its name as the web URL writes it.
    pub param: String,
    /// Its value.
    pub value: String,
    /// Why it is left out.
    pub why: WhyLeftOut,
}

/// Why a web URL parameter is not part of the app search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhyLeftOut {
    /// Notifio knows no translation for it.
    Unknown,
    /// The app refuses this filter for this kind of property (it would answer 412 and find
    /// nothing).
    NotForThisKind,
    /// The value is not one Notifio knows how to pass on.
    UnknownValue,
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.why {
            WhyLeftOut::Unknown => "not understood",
            WhyLeftOut::NotForThisKind => "the app does not take it for this kind of property",
            WhyLeftOut::UnknownValue => "value not understood",
        };
        write!(f, "`{}={}` ({why})", self.param, self.value)
    }
}

impl AppSearch {
    /// The start-up warning naming what the app search leaves out, if anything.
    #[must_use]
    pub fn warning(&self) -> Option<String> {
        if self.left_out.is_empty() {
            return None;
        }
        let list: Vec<String> = self.left_out.iter().map(ToString::to_string).collect();
        Some(format!(
            "ImmobilienScout24's app search leaves out {} of this search URL, so it may show \
             listings the web search would not; see docs/sites.md",
            list.join(", ")
        ))
    }
}

/// Why a web URL cannot become an app search.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppSearchError {
    /// The path is not `/Suche/…`.
    #[error(
        "`{path}` is not an ImmobilienScout24 search: copy the address of a result page, which \
         looks like https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten?…"
    )]
    NotASearch {
        /// The URL's path.
        path: String,
    },
    /// The last path segment names no kind of property Notifio can translate.
    #[error(
        "ImmobilienScout24 search `{slug}`: Notifio cannot translate this kind of search for the \
         app; use a search for one kind of property (e.g. wohnung-mieten, haus-kaufen, wg-zimmer) \
         or fetch = \"browser\""
    )]
    UnknownKind {
        /// The segment, e.g. `gewerbeflaeche-mieten`.
        slug: String,
    },
    /// A radius or shape search without its location, or a region search without a region.
    #[error(
        "ImmobilienScout24 {kind} search without its `{param}`: copy the whole result page address"
    )]
    NoLocation {
        /// `region`, `radius` or `shape`.
        kind: &'static str,
        /// The missing parameter.
        param: &'static str,
    },
    /// `app_api` is not a base URL a request can be made against.
    #[error("the app endpoint `{0}` must be an http:// or https:// URL")]
    BadEndpoint(String),
}

/// The kinds of property the app searches (its `realestatetype`), as far as their results are
/// listings a flat hunter reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    ApartmentRent,
    ApartmentBuy,
    HouseRent,
    HouseBuy,
    FlatshareRoom,
    ShortTerm,
    Plot,
    GarageRent,
    GarageBuy,
    Investment,
    AssistedLiving,
    Auction,
}

impl Kind {
    fn app_name(self) -> &'static str {
        match self {
            Self::ApartmentRent => "apartmentrent",
            Self::ApartmentBuy => "apartmentbuy",
            Self::HouseRent => "houserent",
            Self::HouseBuy => "housebuy",
            Self::FlatshareRoom => "flatshareroom",
            Self::ShortTerm => "shorttermaccommodation",
            Self::Plot => "livingbuysite",
            Self::GarageRent => "garagerent",
            Self::GarageBuy => "garagebuy",
            Self::Investment => "investment",
            Self::AssistedLiving => "assistedliving",
            Self::Auction => "compulsoryauction",
        }
    }

    fn apartment(self) -> bool {
        matches!(self, Self::ApartmentRent | Self::ApartmentBuy)
    }

    fn house(self) -> bool {
        matches!(self, Self::HouseRent | Self::HouseBuy)
    }

    /// A whole apartment or house.
    fn dwelling(self) -> bool {
        self.apartment() || self.house()
    }

    /// A dwelling, a room in a flat share, a short stay or assisted living: what has
    /// equipment and may allow pets.
    fn lived_in(self) -> bool {
        self.dwelling()
            || matches!(
                self,
                Self::FlatshareRoom | Self::ShortTerm | Self::AssistedLiving
            )
    }

    fn rent(self) -> bool {
        matches!(self, Self::ApartmentRent | Self::HouseRent)
    }

    fn priced(self) -> bool {
        !matches!(self, Self::AssistedLiving | Self::Auction)
    }
}

/// What a filter's value must look like to be passed on.
#[derive(Clone, Copy)]
enum Shape {
    /// `1.0-10000.0`, `-1200`, `50-`, `2` (numbers may be written `1.0E7`).
    Range,
    /// `balcony,cellar`: words separated by commas.
    Words,
    /// `true` or `false`.
    Flag,
    /// Any non-empty text.
    Text,
}

/// A query parameter passed on under its own name.
struct Filter {
    name: &'static str,
    /// The kinds of property the app takes it for (it answers 412 to the others).
    accepts: fn(Kind) -> bool,
    /// What its value must look like.
    shape: Shape,
}

const fn filter(name: &'static str, accepts: fn(Kind) -> bool, shape: Shape) -> Filter {
    Filter {
        name,
        accepts,
        shape,
    }
}

/// The filters passed on, with the kinds of property the app takes each for.
const FILTERS: &[Filter] = &[
    filter("price", Kind::priced, Shape::Range),
    filter("pricetype", Kind::rent, Shape::Words),
    filter(
        "numberofrooms",
        |k| k.dwelling() || k == Kind::ShortTerm,
        Shape::Range,
    ),
    filter(
        "livingspace",
        |k| k.dwelling() || k == Kind::FlatshareRoom,
        Shape::Range,
    ),
    filter("exclusioncriteria", |_| true, Shape::Words),
    filter("equipment", Kind::lived_in, Shape::Words),
    filter("apartmenttypes", Kind::apartment, Shape::Words),
    filter("floor", Kind::apartment, Shape::Range),
    filter("buildingtypes", Kind::house, Shape::Words),
    filter("newbuilding", Kind::dwelling, Shape::Flag),
    filter("constructionyear", Kind::dwelling, Shape::Range),
    filter(
        "petsallowedtypes",
        |k| k.lived_in() && !matches!(k, Kind::ApartmentBuy | Kind::HouseBuy),
        Shape::Words,
    ),
    filter("haspromotion", |k| k == Kind::ApartmentRent, Shape::Flag),
    filter("freeofcourtageonly", Kind::priced, Shape::Flag),
    filter("fulltext", |_| true, Shape::Text),
];

/// Parameters the website adds that are no filter (tracking, paging, the address a radius
/// search shows): dropped without a word, as are empty values. Notifio reads from the first
/// page.
const NOISE: &[&str] = &[
    "enteredFrom",
    "referrer",
    "searchId",
    "pagenumber",
    "pagesize",
    "centerofsearchaddress",
];
const NOISE_PREFIXES: &[&str] = &["utm_", "cmp_"];

/// Web sorting numbers and the app's names for them.
const SORTING: &[(&str, &str)] = &[
    ("2", "-firstactivation"),
    ("3", "-price"),
    ("4", "price"),
    ("5", "-rooms"),
    ("6", "rooms"),
    ("7", "-livingspace"),
    ("8", "livingspace"),
];

/// The plain "what am I looking for" path segments.
const BASE_SLUGS: &[(&str, Kind)] = &[
    ("wohnung-mieten", Kind::ApartmentRent),
    ("wohnung-kaufen", Kind::ApartmentBuy),
    ("haus-mieten", Kind::HouseRent),
    ("haus-kaufen", Kind::HouseBuy),
    ("wg-zimmer", Kind::FlatshareRoom),
    ("wohnen-auf-zeit", Kind::ShortTerm),
    ("grundstueck-kaufen", Kind::Plot),
    ("garage-mieten", Kind::GarageRent),
    ("garage-kaufen", Kind::GarageBuy),
    ("anlageimmobilie", Kind::Investment),
    ("seniorenwohnen", Kind::AssistedLiving),
    ("zwangsversteigerung", Kind::Auction),
];

/// Path segments that fold one filter into an apartment search: `{slug}-mieten` and
/// `{slug}-kaufen`.
const APARTMENT_SLUGS: &[(&str, &str, &str)] = &[
    ("souterrainwohnung", "apartmenttypes", "halfbasement"),
    ("erdgeschosswohnung", "apartmenttypes", "groundfloor"),
    ("hochparterrewohnung", "apartmenttypes", "raisedgroundfloor"),
    ("etagenwohnung", "apartmenttypes", "apartment"),
    ("loft", "apartmenttypes", "loft"),
    ("maisonette", "apartmenttypes", "maisonette"),
    ("terrassenwohnung", "apartmenttypes", "terracedflat"),
    ("penthouse", "apartmenttypes", "penthouse"),
    ("dachgeschosswohnung", "apartmenttypes", "roofstorey"),
    ("wohnung-mit-garage", "equipment", "parking"),
    ("wohnung-mit-einbaukueche", "equipment", "builtinkitchen"),
    ("wohnung-mit-keller", "equipment", "cellar"),
    ("wohnung-mit-balkon", "equipment", "balcony"),
    ("wohnung-mit-garten", "equipment", "garden"),
    (
        "barrierefreie-wohnung",
        "equipment",
        "handicappedaccessible",
    ),
    ("neubauwohnung", "newbuilding", "true"),
];

/// The same for house searches.
const HOUSE_SLUGS: &[(&str, &str, &str)] = &[
    ("einfamilienhaus", "buildingtypes", "singlefamilyhouse"),
    ("doppelhaushaelfte", "buildingtypes", "semidetachedhouse"),
    ("reihenhaus", "buildingtypes", "terracehouse"),
    ("bungalow", "buildingtypes", "bungalow"),
    ("mehrfamilienhaus", "buildingtypes", "multifamilyhouse"),
    ("bauernhaus", "buildingtypes", "farmhouse"),
    ("villa", "buildingtypes", "villa"),
    ("haus-mit-garage", "equipment", "parking"),
    ("haus-mit-keller", "equipment", "cellar"),
    ("neubauhaus", "newbuilding", "true"),
];

/// Slugs that follow neither pattern (the filter sits before the suffix).
const OTHER_SLUGS: &[(&str, Kind, &str, &str)] = &[
    (
        "wohnung-kaufen-mit-balkon",
        Kind::ApartmentBuy,
        "equipment",
        "balcony",
    ),
    (
        "eigentumswohnung-mit-garten",
        Kind::ApartmentBuy,
        "equipment",
        "garden",
    ),
];

/// The kind of property a path's last segment searches, with the filters it stands for.
fn kind_of(slug: &str) -> Option<(Kind, Vec<(&'static str, String)>)> {
    if let Some((_, kind)) = BASE_SLUGS.iter().find(|(s, _)| *s == slug) {
        return Some((*kind, Vec::new()));
    }
    if let Some((_, kind, p, v)) = OTHER_SLUGS.iter().find(|(s, ..)| *s == slug) {
        return Some((*kind, vec![(*p, (*v).to_owned())]));
    }
    for (table, rent, buy) in [
        (APARTMENT_SLUGS, Kind::ApartmentRent, Kind::ApartmentBuy),
        (HOUSE_SLUGS, Kind::HouseRent, Kind::HouseBuy),
    ] {
        for (stem, p, v) in table {
            let kind = match slug.strip_prefix(stem) {
                Some("-mieten") => rent,
                Some("-kaufen") => buy,
                _ => continue,
            };
            return Some((kind, vec![(*p, (*v).to_owned())]));
        }
    }
    // "3-zimmer-wohnung-mieten": one to six rooms (six and more for 6).
    if let Some((n, deal)) = slug.split_once("-zimmer-wohnung-") {
        let kind = match deal {
            "mieten" => Kind::ApartmentRent,
            "kaufen" => Kind::ApartmentBuy,
            _ => return None,
        };
        let rooms = match n {
            "6" => "6.0-".to_owned(),
            "1" | "2" | "3" | "4" | "5" => format!("{n}.0-{n}.5"),
            _ => return None,
        };
        return Some((kind, vec![("numberofrooms", rooms)]));
    }
    // "wohnung-bis-800-euro-warm": a highest warm rent.
    let price = slug
        .strip_prefix("wohnung-bis-")?
        .strip_suffix("-euro-warm")?;
    if price.is_empty() || !price.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((
        Kind::ApartmentRent,
        vec![
            ("price", format!("-{price}")),
            ("pricetype", "calculatedtotalrent".to_owned()),
        ],
    ))
}

/// A number as the website writes bounds: `1`, `1.5`, `1.0E7`.
fn is_bound(s: &str) -> bool {
    let (mantissa, exp) = match s.split_once(['E', 'e']) {
        Some((m, e)) => (m, Some(e)),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, "0"));
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    digits(int) && digits(frac) && exp.is_none_or(digits)
}

fn fits(shape: Shape, value: &str) -> bool {
    match shape {
        Shape::Range => match value.split_once('-') {
            Some((lo, hi)) => {
                (lo.is_empty() || is_bound(lo))
                    && (hi.is_empty() || is_bound(hi))
                    && !(lo.is_empty() && hi.is_empty())
            }
            None => is_bound(value),
        },
        Shape::Words => value
            .split(',')
            .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')),
        Shape::Flag => matches!(value, "true" | "false"),
        Shape::Text => !value.trim().is_empty(),
    }
}

/// The website's `shape` is the map polygon as a polyline in base64, with `.` for `=`; the app
/// takes the polyline itself. A value that is no such base64 is taken as the polyline.
fn polyline(shape: &str) -> String {
    let padded = shape.replace('.', "=");
    base64::engine::general_purpose::STANDARD
        .decode(padded.as_bytes())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| shape.to_owned())
}

/// Translates a web search URL into the app's search request against `app_api` (normally
/// [`DEFAULT_APP_API`]).
///
/// Understood: the region in the path (`/Suche/de/berlin/berlin/…`), or `geocodes` (districts),
/// a radius search's `geocoordinates`, a drawn `shape`; the kind of property from the path's last
/// segment, including the filters the site folds into it (`wohnung-mit-balkon-mieten`,
/// `3-zimmer-wohnung-mieten`, …); `price`, `pricetype`, `numberofrooms`, `livingspace`,
/// `sorting` and the common filters in `FILTERS`. Apartment rentals leave out swap flats
/// unless `exclusioncriteria` says otherwise, as the website does. Without `sorting`, newest
/// first. Everything else is in [`AppSearch::left_out`].
///
/// # Errors
/// A URL that is not a search, names no kind of property Notifio knows, lacks its location, or
/// an `app_api` that is not http(s).
pub fn app_search(web: &Url, app_api: &Url) -> Result<AppSearch, AppSearchError> {
    let segments: Vec<&str> = web
        .path_segments()
        .map(|s| s.filter(|p| !p.is_empty()).collect())
        .unwrap_or_default();
    let (Some(&"Suche"), Some((slug, region))) = (
        segments.first(),
        segments.get(1..).and_then(<[_]>::split_last),
    ) else {
        return Err(AppSearchError::NotASearch {
            path: web.path().to_owned(),
        });
    };
    let (kind, from_path) = kind_of(slug).ok_or_else(|| AppSearchError::UnknownKind {
        slug: (*slug).to_owned(),
    })?;
    let query = WebQuery::of(web);
    let (mut params, location) = location_params(kind, region, &query)?;
    let carried = carry_over(kind, from_path, &query, location);
    params.extend(carried.filters);
    params.push(("sorting", carried.sorting.unwrap_or(NEWEST_FIRST).into()));
    let url = search_list_url(app_api, params)?;
    Ok(AppSearch {
        method: "POST",
        url,
        headers: [
            ("User-Agent", USER_AGENT),
            ("Accept", "application/json"),
            ("Content-Type", "application/json"),
        ],
        body: APP_BODY,
        left_out: carried.left_out,
    })
}

/// The app request's query parameters, in order.
type AppParams = Vec<(&'static str, String)>;

/// A web search's query, repeated names joined with commas as the website writes lists.
struct WebQuery(Vec<(String, String)>);

impl WebQuery {
    fn of(web: &Url) -> Self {
        let mut query: Vec<(String, String)> = Vec::new();
        for (k, v) in web.query_pairs() {
            match query.iter_mut().find(|(name, _)| *name == k) {
                Some((_, value)) => {
                    value.push(',');
                    value.push_str(&v);
                }
                None => query.push((k.into_owned(), v.into_owned())),
            }
        }
        Self(query)
    }

    /// The value of `name`, trimmed; `None` when it is missing or empty.
    fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }
}

/// The app's search type, kind of property and location for the path's `region` (a region,
/// a radius or a drawn shape), and the query parameter that holds the location, if one does.
fn location_params(
    kind: Kind,
    region: &[&str],
    query: &WebQuery,
) -> Result<(AppParams, &'static str), AppSearchError> {
    let mut params: AppParams = Vec::new();
    // The query parameter that holds the location, if one does.
    let location = match region.first() {
        Some(&"radius") => "geocoordinates",
        Some(&"shape") => "shape",
        _ => "geocodes",
    };
    match region.first() {
        Some(&"radius") => {
            let at = query
                .get("geocoordinates")
                .ok_or(AppSearchError::NoLocation {
                    kind: "radius",
                    param: "geocoordinates",
                })?;
            params.push(("searchType", "radius".into()));
            params.push(("realestatetype", kind.app_name().into()));
            params.push(("geocoordinates", at));
        }
        Some(&"shape") => {
            let shape = query.get("shape").ok_or(AppSearchError::NoLocation {
                kind: "shape",
                param: "shape",
            })?;
            params.push(("searchType", "shape".into()));
            params.push(("realestatetype", kind.app_name().into()));
            params.push(("shape", polyline(&shape)));
        }
        _ => {
            // Districts picked on the map replace the path's region.
            let geocodes = query
                .get("geocodes")
                .or_else(|| (!region.is_empty()).then(|| format!("/{}", region.join("/"))))
                .ok_or(AppSearchError::NoLocation {
                    kind: "region",
                    param: "geocodes",
                })?;
            params.push(("searchType", "region".into()));
            params.push(("realestatetype", kind.app_name().into()));
            params.push(("geocodes", geocodes));
        }
    }
    Ok((params, location))
}

/// What of a web search's filters the app request carries, and what it leaves out.
struct CarriedOver {
    filters: AppParams,
    sorting: Option<&'static str>,
    left_out: Vec<LeftOut>,
}

/// The filters the path implies (`from_path`), then the query's (which replace them, as on
/// the website), as far as the app takes them for `kind`; `location` is already carried.
fn carry_over(kind: Kind, from_path: AppParams, query: &WebQuery, location: &str) -> CarriedOver {
    // What the path implies, then the query (which replaces it, as on the website).
    let mut filters: AppParams = from_path;
    if kind == Kind::ApartmentRent && !filters.iter().any(|(p, _)| *p == "exclusioncriteria") {
        filters.push(("exclusioncriteria", "swapflat".into()));
    }
    let mut sorting = None;
    let mut left_out = Vec::new();
    let mut leave = |param: &str, value: &str, why| {
        left_out.push(LeftOut {
            param: param.to_owned(),
            value: value.to_owned(),
            why,
        });
    };
    for (name, value) in &query.0 {
        let value = value.trim();
        // An empty value filters nothing.
        if value.is_empty()
            || name == location
            || NOISE.contains(&name.as_str())
            || NOISE_PREFIXES.iter().any(|p| name.starts_with(p))
        {
            continue;
        }
        if name == "sorting" {
            match SORTING
                .iter()
                .find(|(web, app)| *web == value || *app == value)
            {
                Some((_, app)) => sorting = Some(*app),
                None if value == "standard" => sorting = Some("standard"),
                None => leave(name, value, WhyLeftOut::UnknownValue),
            }
            continue;
        }
        let Some(f) = FILTERS.iter().find(|f| f.name == name) else {
            leave(name, value, WhyLeftOut::Unknown);
            continue;
        };
        // "Warm rent" exists for apartments only.
        let accepted = (f.accepts)(kind)
            && !(f.name == "pricetype"
                && value == "calculatedtotalrent"
                && kind != Kind::ApartmentRent);
        if !accepted {
            leave(name, value, WhyLeftOut::NotForThisKind);
        } else if !fits(f.shape, value) {
            leave(name, value, WhyLeftOut::UnknownValue);
        } else {
            filters.retain(|(p, _)| *p != f.name);
            filters.push((f.name, value.to_owned()));
        }
    }
    CarriedOver {
        filters,
        sorting,
        left_out,
    }
}

/// `{app_api}/search/list?{params}`.
fn search_list_url(app_api: &Url, params: AppParams) -> Result<Url, AppSearchError> {
    if !matches!(app_api.scheme(), "http" | "https") || app_api.cannot_be_a_base() {
        return Err(AppSearchError::BadEndpoint(app_api.to_string()));
    }
    let mut base = app_api.clone();
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    let mut url = base
        .join("search/list")
        .map_err(|_| AppSearchError::BadEndpoint(app_api.to_string()))?;
    url.set_query(None);
    url.query_pairs_mut().extend_pairs(params);
    Ok(url)
}

/// `url` asking for result page `page`: its `pagenumber` set (the web search and the app
/// request both page this way), every other parameter kept in order.
pub(crate) fn with_page_number(url: &Url, page: u32) -> Url {
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| k != "pagenumber")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut out = url.clone();
    out.set_query(None);
    out.query_pairs_mut()
        .extend_pairs(kept)
        .append_pair("pagenumber", &page.to_string());
    out
}

/// Where the app's answer says it is in the result list.
#[derive(Deserialize)]
struct Paging {
    #[serde(rename = "pageNumber")]
    page_number: Option<u32>,
    #[serde(rename = "numberOfPages")]
    number_of_pages: Option<u32>,
}

/// After page `page` of the app's result list: `Some(next)` when `body` is one (`None` in it
/// on the last page, or when it does not say how many pages there are), `None` when `body` is
/// not the app's answer at all.
pub(crate) fn next_app_page(body: &[u8], page_url: &Url, page: u32) -> Option<Option<Url>> {
    if !is_app_json(body) {
        return None;
    }
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let Ok(paging) = serde_json::from_slice::<Paging>(body) else {
        return Some(None);
    };
    let current = paging.page_number.unwrap_or(page);
    Some(
        paging
            .number_of_pages
            .filter(|total| current < *total)
            .map(|_| with_page_number(page_url, current.saturating_add(1))),
    )
}

#[derive(Deserialize)]
struct ResultList {
    #[serde(rename = "resultListItems")]
    items: Vec<ResultItem>,
}

#[derive(Deserialize)]
struct ResultItem {
    #[serde(rename = "type")]
    kind: Option<String>,
    item: Option<Expose>,
}

#[derive(Deserialize)]
struct Expose {
    id: Option<JsonId>,
    title: Option<String>,
    #[serde(rename = "titlePicture")]
    title_picture: Option<Picture>,
    #[serde(default)]
    attributes: Vec<Attribute>,
}

#[derive(Deserialize)]
struct Picture {
    full: Option<String>,
    preview: Option<String>,
}

/// One headline figure: `{"label": "", "value": "2.300 €"}`. The labels are empty, so the
/// unit in the value is all that says which figure it is (a plot has no rooms, so position
/// says nothing).
#[derive(Deserialize)]
struct Attribute {
    value: Option<String>,
}

/// Whether `body` looks like the app's result list: a JSON object with `resultListItems`.
fn is_app_json(body: &[u8]) -> bool {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && memchr::memmem::find(body, b"\"resultListItems\"").is_some()
}

/// The listings of the app's result list, or `None` when `body` is not one (an HTML page, the
/// website's embedded JSON). An answer of that shape that does not parse is `LayoutUnknown`.
/// Links are the listings' public pages (`https://www.immobilienscout24.de/expose/{id}`),
/// whatever endpoint answered.
pub(crate) fn from_app_json(body: &[u8], page_url: &Url) -> Option<Extraction> {
    if !is_app_json(body) {
        return None;
    }
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let Ok(list) = serde_json::from_slice::<ResultList>(body) else {
        return Some(Extraction::LayoutUnknown);
    };
    if list.items.is_empty() {
        return Some(Extraction::NoResults);
    }
    let mut out: Vec<Listing> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // Other item types are ads and project teasers, not listings.
    let exposes = list
        .items
        .into_iter()
        .filter(|i| i.kind.as_deref() == Some("EXPOSE_RESULT"))
        .filter_map(|i| i.item);
    for expose in exposes {
        let Some(id) = expose.id.and_then(JsonId::into_id) else {
            continue;
        };
        if !seen.insert(id.clone()) {
            continue;
        }
        let figures: Vec<&str> = expose
            .attributes
            .iter()
            .filter_map(|a| a.value.as_deref())
            .collect();
        // The rent or price, not a price per m².
        let price = figures
            .iter()
            .filter(|v| v.contains('€') && !v.contains("/m"))
            .find_map(|v| parse_price(v));
        let picture = expose.title_picture.and_then(|p| p.full.or(p.preview));
        out.push(Listing {
            title: expose.title.as_deref().and_then(non_empty),
            price: price.as_ref().map(|p| p.0),
            currency: price.and_then(|p| p.1),
            rooms: figures.iter().find_map(|v| parse_rooms(v)),
            area_m2: figures.iter().find_map(|v| parse_area(v)),
            url: Some(format!("{EXPOSE_BASE}{id}")),
            image: picture.and_then(|h| absolute(page_url, &h)),
            description: None,
            id,
            fallback: Vec::new(),
        });
    }
    Some(Extraction::Listings(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_app_version_then_notifio() {
        let (app, us) = USER_AGENT.split_once(' ').unwrap();
        assert_eq!(app, APP_USER_AGENT);
        assert!(
            us.starts_with(concat!("notifio/", env!("CARGO_PKG_VERSION"), " ")),
            "{us}"
        );
    }

    #[test]
    fn a_page_number_is_set_once_and_the_rest_of_the_query_kept() {
        let u = Url::parse("http://x/search/list?a=1&pagenumber=2&b=%2Fde").unwrap();
        assert_eq!(
            with_page_number(&u, 3).as_str(),
            "http://x/search/list?a=1&b=%2Fde&pagenumber=3"
        );
    }

    #[test]
    fn bounds_and_ranges_as_the_website_writes_them() {
        for ok in ["1.0-10000.0", "-1200", "50-", "2", "1.0-1.0E7", "2-7"] {
            assert!(fits(Shape::Range, ok), "{ok}");
        }
        for bad in ["-", "", "abc", "1,5-3", "1-2-3", "1.-2", "--5"] {
            assert!(!fits(Shape::Range, bad), "{bad}");
        }
        assert!(fits(Shape::Words, "balcony,builtinkitchen,a_plus"));
        assert!(!fits(Shape::Words, "balcony,,cellar"));
        assert!(!fits(Shape::Words, "balcony;drop"));
        assert!(fits(Shape::Flag, "true") && !fits(Shape::Flag, "yes"));
    }

    #[test]
    fn path_slugs_name_a_kind_and_its_filters() {
        let kind = |s: &str| kind_of(s).map(|(k, p)| (k.app_name(), p));
        assert_eq!(kind("wg-zimmer"), Some(("flatshareroom", vec![])));
        assert_eq!(
            kind("penthouse-kaufen"),
            Some(("apartmentbuy", vec![("apartmenttypes", "penthouse".into())]))
        );
        assert_eq!(
            kind("haus-mit-garage-kaufen"),
            Some(("housebuy", vec![("equipment", "parking".into())]))
        );
        assert_eq!(
            kind("3-zimmer-wohnung-mieten"),
            Some(("apartmentrent", vec![("numberofrooms", "3.0-3.5".into())]))
        );
        assert_eq!(
            kind("6-zimmer-wohnung-kaufen"),
            Some(("apartmentbuy", vec![("numberofrooms", "6.0-".into())]))
        );
        assert_eq!(
            kind("wohnung-bis-800-euro-warm"),
            Some((
                "apartmentrent",
                vec![
                    ("price", "-800".into()),
                    ("pricetype", "calculatedtotalrent".into())
                ]
            ))
        );
        for unknown in [
            "gewerbeflaeche-mieten",
            "7-zimmer-wohnung-mieten",
            "wohnung-bis--euro-warm",
            "immobilie-mieten",
            "loft-tauschen",
        ] {
            assert_eq!(kind(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn a_drawn_shape_becomes_its_polyline() {
        // The website's base64 (with `.` for `=`) of the polyline `ior~H_kxmA`.
        assert_eq!(polyline("aW9yfkhfa3htQQ.."), "ior~H_kxmA");
        // Already a polyline: kept.
        assert_eq!(polyline("ior~H_kxmAr`Pig`@"), "ior~H_kxmAr`Pig`@");
    }
}
