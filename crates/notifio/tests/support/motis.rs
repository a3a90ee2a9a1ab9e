//! Fakes of the services Notifio asks about places (docs/commutes.md), as real HTTP servers on
//! 127.0.0.1: MOTIS (`GET /api/v1/geocode`, `/api/v1/one-to-all`, `/api/v1/one-to-many`) and
//! a Nominatim-compatible geocoder (`GET /search`), served by one fake so that a test can
//! point either API at it.
//!
//! Built from the published descriptions, not from Notifio's client: MOTIS's `openapi.yaml`
//! at commit 1ab03824fd802a64773e2dbcb206f9c1d45dae2a (required parameters checked, the
//! schemas `Match`, `Reachable`, `ReachablePlace`, `Place`, `Duration`, `Error` answered) and
//! Nominatim's "Search queries" and "Place Output" (`format=jsonv2`). Scripted: a table of
//! addresses with their coordinates, stops with their minutes to the place asked about, and
//! street times from the straight line at each mode's speed. It counts requests per endpoint
//! and can refuse (429 with `Retry-After`), fail (503), hang, or be down (connections refused).
//!
//! Shared by the unit tests of `notifio::places` (`#[path]`-included) and the integration
//! tests, so it uses nothing of Notifio's.

#![allow(dead_code, unreachable_pub, unused_qualifications)]

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The endpoints the fake serves, as counted.
pub const GEOCODE: &str = "/api/v1/geocode";
/// MOTIS's transit reachability.
pub const ONE_TO_ALL: &str = "/api/v1/one-to-all";
/// MOTIS's street routing, many to one.
pub const ONE_TO_MANY: &str = "/api/v1/one-to-many";
/// Nominatim's search.
pub const SEARCH: &str = "/search";

/// MOTIS's default `onetoall_max_travel_minutes`.
const MAX_TRAVEL_MINUTES: u64 = 90;
/// MOTIS's default `onetomany_max_many`.
const MAX_MANY: usize = 128;

/// How precise an address in the table is, as each API says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// MOTIS `ADDRESS`; Nominatim `road`, rank 26.
    Street,
    /// MOTIS `PLACE` (no category); Nominatim `suburb`, rank 20.
    District,
    /// MOTIS `PLACE` (no category); Nominatim `city`, rank 16.
    City,
}

/// What the fake does instead of answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trouble {
    /// Answers.
    None,
    /// `429 Too Many Requests` with `Retry-After: seconds`.
    TooMany {
        /// The `Retry-After` in seconds.
        retry_after_s: u64,
    },
    /// `503 Service Unavailable`.
    Unavailable,
    /// Never answers (the connection stays open).
    Hang,
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Request {
    /// The endpoint's path (`/api/v1/geocode`…).
    pub endpoint: String,
    /// Path and query, as received.
    pub uri: String,
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
}

#[derive(Clone, Debug)]
struct Address {
    lat: f64,
    lon: f64,
    kind: Kind,
    name: String,
}

#[derive(Clone, Debug)]
struct Stop {
    name: String,
    lat: f64,
    lon: f64,
    minutes: u64,
}

#[derive(Default)]
struct Script {
    /// By [`key`] of the text.
    addresses: HashMap<String, Address>,
    stops: Vec<Stop>,
    requests: Vec<Request>,
    trouble: Option<Trouble>,
}

/// A running fake of MOTIS and Nominatim.
#[derive(Clone)]
pub struct GeoFake {
    /// `http://127.0.0.1:PORT`: the base URL of both APIs.
    pub url: String,
    addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    running: Arc<Mutex<Option<Running>>>,
}

struct Running {
    stop: CancellationToken,
    closed: tokio::sync::oneshot::Receiver<()>,
}

/// The fake's key for an address: lower case, one space for every run of anything but letters
/// and digits (the fake's own reading, as a real geocoder's is its own).
fn key(text: &str) -> String {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Metres between two points (haversine).
fn metres(a: (f64, f64), b: (f64, f64)) -> f64 {
    let (p1, p2) = (a.0.to_radians(), b.0.to_radians());
    let h = ((p2 - p1) / 2.0).sin().powi(2)
        + p1.cos() * p2.cos() * ((b.1 - a.1).to_radians() / 2.0).sin().powi(2);
    2.0 * 6_371_008.8 * h.sqrt().min(1.0).asin()
}

/// `latitude<sep>longitude[<sep>level]` as MOTIS's `parse_location` reads it.
fn location(s: &str, sep: char) -> Option<(f64, f64)> {
    let parts: Vec<Result<f64, _>> = s.split(sep).map(|x| x.trim().parse::<f64>()).collect();
    match parts.as_slice() {
        [Ok(lat), Ok(lon)] | [Ok(lat), Ok(lon), Ok(_)] => Some((*lat, *lon)),
        _ => None,
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}

impl GeoFake {
    /// Starts the fake on a free port of 127.0.0.1, answering, with empty tables.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fake = Self {
            url: format!("http://{addr}"),
            addr,
            script: Arc::default(),
            running: Arc::default(),
        };
        fake.serve(listener);
        fake
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let app = axum::Router::new()
            .route(GEOCODE, axum::routing::get(geocode))
            .route(ONE_TO_ALL, axum::routing::get(one_to_all))
            .route(ONE_TO_MANY, axum::routing::get(one_to_many))
            .route(SEARCH, axum::routing::get(search))
            .fallback(|| async { error(StatusCode::NOT_FOUND, "not found") })
            .layer(axum::middleware::from_fn_with_state(
                self.script.clone(),
                record_and_trouble,
            ))
            .with_state(self.script.clone());
        let stop = CancellationToken::new();
        let (tx, closed) = tokio::sync::oneshot::channel();
        let listener = Closable {
            inner: Some(listener),
            stop: stop.clone(),
            closed: Some(tx),
        };
        let shutdown = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await
        });
        *self.running.lock().unwrap() = Some(Running { stop, closed });
    }

    /// Adds an address: a geocoder asked `text` (compared without case or punctuation)
    /// answers these coordinates.
    pub fn address(&self, text: &str, lat: f64, lon: f64, kind: Kind) -> &Self {
        self.script.lock().unwrap().addresses.insert(
            key(text),
            Address {
                lat,
                lon,
                kind,
                name: text.to_owned(),
            },
        );
        self
    }

    /// Adds a stop from which any place asked about is reached in `minutes` by transit.
    pub fn stop(&self, name: &str, lat: f64, lon: f64, minutes: u64) -> &Self {
        self.script.lock().unwrap().stops.push(Stop {
            name: name.to_owned(),
            lat,
            lon,
            minutes,
        });
        self
    }

    /// From now on, `trouble` instead of answers (`Trouble::None` to answer again).
    pub fn trouble(&self, trouble: Trouble) {
        self.script.lock().unwrap().trouble = Some(trouble);
    }

    /// Stops listening: new connections are refused and idle ones closed. Returns once the
    /// port is closed.
    pub async fn down(&self) {
        let running = self.running.lock().unwrap().take();
        if let Some(r) = running {
            r.stop.cancel();
            let _ = r.closed.await;
        }
    }

    /// Listens again, on the same port, after [`Self::down`].
    pub async fn up(&self) {
        if self.running.lock().unwrap().is_some() {
            return;
        }
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.script.lock().unwrap().requests.clone()
    }

    /// How many requests `endpoint` (e.g. [`GEOCODE`]) received.
    pub fn count(&self, endpoint: &str) -> usize {
        self.script
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r.endpoint == endpoint)
            .count()
    }
}

/// A listener that closes its port when told to (axum's graceful shutdown also stops
/// accepting, but says nothing when the port is closed).
struct Closable {
    inner: Option<tokio::net::TcpListener>,
    stop: CancellationToken,
    closed: Option<tokio::sync::oneshot::Sender<()>>,
}

impl axum::serve::Listener for Closable {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some(listener) = &self.inner else {
                return std::future::pending().await;
            };
            tokio::select! {
                () = self.stop.cancelled() => {
                    self.inner = None;
                    if let Some(tx) = self.closed.take() {
                        let _ = tx.send(());
                    }
                }
                conn = listener.accept() => {
                    if let Ok(conn) = conn {
                        return conn;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.as_ref().map_or_else(
            || Err(std::io::ErrorKind::NotConnected.into()),
            |l| l.local_addr(),
        )
    }
}

/// Counts every request, then answers with the scripted trouble if there is one.
async fn record_and_trouble(
    State(script): State<Arc<Mutex<Script>>>,
    uri: Uri,
    headers: HeaderMap,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let trouble = {
        let mut s = script.lock().unwrap();
        s.requests.push(Request {
            endpoint: uri.path().to_owned(),
            uri: uri.to_string(),
            user_agent: headers
                .get("user-agent")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        });
        s.trouble.unwrap_or(Trouble::None)
    };
    match trouble {
        Trouble::None => next.run(request).await,
        Trouble::TooMany { retry_after_s } => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", retry_after_s.to_string())],
            "Too Many Requests",
        )
            .into_response(),
        Trouble::Unavailable => {
            (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable").into_response()
        }
        Trouble::Hang => std::future::pending::<Response>().await,
    }
}

/// MOTIS `GET /api/v1/geocode`: `text` required; an array of `Match`.
async fn geocode(
    State(script): State<Arc<Mutex<Script>>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(text) = q.get("text") else {
        return error(StatusCode::BAD_REQUEST, "missing text");
    };
    let found = script.lock().unwrap().addresses.get(&key(text)).cloned();
    let matches: Vec<Value> = found
        .into_iter()
        .map(|a| {
            let mut m = json!({
                "type": if a.kind == Kind::Street { "ADDRESS" } else { "PLACE" },
                "name": a.name,
                "id": format!("fake/{}", key(&a.name)),
                "lat": a.lat,
                "lon": a.lon,
                "tokens": [[0, text.chars().count()]],
                "areas": [{ "name": "Fakeville", "adminLevel": 8, "matched": true, "default": true }],
                "score": 1.0,
            });
            if a.kind == Kind::Street {
                m["street"] = json!(a.name);
            }
            m
        })
        .collect();
    axum::Json(matches).into_response()
}

/// Nominatim `GET /search`: `q`, `format=jsonv2`; an array of places, coordinates as strings.
async fn search(
    State(script): State<Arc<Mutex<Script>>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(text) = q.get("q") else {
        return error(StatusCode::BAD_REQUEST, "Nothing to search for.");
    };
    if q.get("format").map(String::as_str) != Some("jsonv2") {
        return error(
            StatusCode::BAD_REQUEST,
            "the fake speaks format=jsonv2 only",
        );
    }
    let found = script.lock().unwrap().addresses.get(&key(text)).cloned();
    let places: Vec<Value> = found
        .into_iter()
        .map(|a| {
            let (category, kind, rank, addresstype) = match a.kind {
                Kind::Street => ("highway", "residential", 26, "road"),
                Kind::District => ("boundary", "administrative", 20, "suburb"),
                Kind::City => ("boundary", "administrative", 16, "city"),
            };
            json!({
                "place_id": 1,
                "licence": "Data © OpenStreetMap contributors, ODbL 1.0. https://osm.org/copyright",
                "osm_type": "way",
                "osm_id": 1,
                "lat": format!("{:.7}", a.lat),
                "lon": format!("{:.7}", a.lon),
                "category": category,
                "type": kind,
                "place_rank": rank,
                "importance": 0.5,
                "addresstype": addresstype,
                "name": a.name,
                "display_name": a.name,
                "address": { addresstype: a.name },
                "boundingbox": [
                    format!("{:.7}", a.lat - 0.001), format!("{:.7}", a.lat + 0.001),
                    format!("{:.7}", a.lon - 0.001), format!("{:.7}", a.lon + 0.001),
                ],
            })
        })
        .collect();
    axum::Json(places).into_response()
}

/// MOTIS `GET /api/v1/one-to-all`: `one` and `maxTravelTime` required; a `Reachable` with the
/// stops reached within `maxTravelTime`.
async fn one_to_all(
    State(script): State<Arc<Mutex<Script>>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(one) = q.get("one").and_then(|s| location(s, ',')) else {
        return error(StatusCode::BAD_REQUEST, "one: not a latitude,longitude");
    };
    let Some(max) = q.get("maxTravelTime").and_then(|s| s.parse::<u64>().ok()) else {
        return error(StatusCode::BAD_REQUEST, "maxTravelTime: required integer");
    };
    if max > MAX_TRAVEL_MINUTES {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("maxTravelTime too large ({max} > {MAX_TRAVEL_MINUTES})"),
        );
    }
    if let Some(b) = q.get("arriveBy")
        && b != "true"
        && b != "false"
    {
        return error(StatusCode::BAD_REQUEST, "arriveBy: not a boolean");
    }
    let stops = script.lock().unwrap().stops.clone();
    let all: Vec<Value> = stops
        .iter()
        .filter(|s| s.minutes <= max)
        .enumerate()
        .map(|(i, s)| {
            json!({
                "place": {
                    "name": s.name, "stopId": format!("fake_{i}"),
                    "lat": s.lat, "lon": s.lon, "level": 0.0,
                },
                "duration": s.minutes,
                "k": 1,
            })
        })
        .collect();
    axum::Json(json!({
        "one": { "name": "START", "lat": one.0, "lon": one.1, "level": 0.0 },
        "all": all,
    }))
    .into_response()
}

/// MOTIS `GET /api/v1/one-to-many`: `one`, `many`, `mode`, `max`, `maxMatchingDistance` and
/// `arriveBy` required; a `Duration` per place of `many`, `{}` when beyond `max`. Times are
/// the straight line at 1.2 m/s (walk), 4.2 m/s (bike) or 8.3 m/s (car).
async fn one_to_many(Query(q): Query<HashMap<String, String>>) -> Response {
    for name in [
        "one",
        "many",
        "mode",
        "max",
        "maxMatchingDistance",
        "arriveBy",
    ] {
        if !q.contains_key(name) {
            return error(StatusCode::BAD_REQUEST, &format!("missing {name}"));
        }
    }
    let Some(one) = location(&q["one"], ';') else {
        return error(StatusCode::BAD_REQUEST, "one: not a latitude;longitude");
    };
    let many: Option<Vec<(f64, f64)>> = q["many"].split(',').map(|s| location(s, ';')).collect();
    let Some(many) = many else {
        return error(StatusCode::BAD_REQUEST, "many: not latitude;longitude,…");
    };
    if many.len() > MAX_MANY {
        return error(StatusCode::UNPROCESSABLE_ENTITY, "too many places in many");
    }
    let speed = match q["mode"].as_str() {
        "WALK" => 1.2,
        "BIKE" => 4.2,
        "CAR" => 8.3,
        m => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("mode {m} not supported for one-to-many"),
            );
        }
    };
    let Ok(max) = q["max"].parse::<f64>() else {
        return error(StatusCode::BAD_REQUEST, "max: not a number");
    };
    let durations: Vec<Value> = many
        .iter()
        .map(|&p| {
            let secs = (metres(one, p) / speed).round();
            if secs <= max {
                json!({ "duration": secs })
            } else {
                json!({})
            }
        })
        .collect();
    axum::Json(durations).into_response()
}
