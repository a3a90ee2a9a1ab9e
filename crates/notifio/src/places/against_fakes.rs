//! The clients' requests, sent over real HTTP to the fakes of MOTIS and Nominatim
//! (`tests/support/motis.rs`), and their answers read by the clients' parsers: the fakes and
//! the clients are built from the same published descriptions, and these tests hold them to
//! it, so that the black-box tests built on the fakes test what the real services would do.

use super::address::query;
use super::fake::{GEOCODE, GeoFake, Kind, ONE_TO_ALL, ONE_TO_MANY, SEARCH, Trouble};
use super::geocode::{Geocoder, GeocoderApi, USER_AGENT};
use super::reach::{Verdict, street_commute, transit_commute, within};
use super::route::{
    self, one_to_all_url, one_to_many_requests, parse_one_to_all, parse_one_to_many,
};
use super::{Coordinates, Precision, TravelMode, UserPlace};
use notifio_policy::Timestamp;
use std::time::Duration;
use url::Url;

/// A client for the fakes on loopback (the app's own requests go through its fetcher).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .user_agent(USER_AGENT)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn get(url: &Url) -> (u16, Vec<u8>, Option<String>) {
    let r = client().get(url.as_str()).send().await.unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, r.bytes().await.unwrap().to_vec(), retry)
}

fn at(lat: f64, lon: f64) -> Coordinates {
    Coordinates::new(lat, lon).unwrap()
}

#[tokio::test]
async fn both_geocoder_apis_read_the_fakes_answers() {
    let fake = GeoFake::start().await;
    fake.address(
        "Calle Mayor 3, Sol, Madrid",
        40.416_3,
        -3.705_9,
        Kind::Street,
    )
    .address("10115 Berlin, Mitte", 52.532_6, 13.384_9, Kind::District);
    for api in [GeocoderApi::Motis, GeocoderApi::Nominatim] {
        let g = Geocoder {
            api,
            base: Url::parse(&fake.url).unwrap(),
            language: Some("es".into()),
        };
        let q = query("Piso en calle Mayor 3, Sol, MADRID").unwrap();
        let (status, body, _) = get(&g.request_url(&q)).await;
        assert_eq!(status, 200, "{api:?}");
        let p = g.read_answer(&body, &q).unwrap().unwrap();
        assert_eq!(
            (p.at.lat(), p.at.lon(), p.precision),
            (40.416_3, -3.705_9, Precision::Street)
        );
        let q = query("10115 Berlin - Mitte").unwrap();
        let (_, body, _) = get(&g.request_url(&q)).await;
        let p = g.read_answer(&body, &q).unwrap().unwrap();
        assert_eq!(p.precision, Precision::District, "{api:?}");
        // Not in the table: found nothing, an answer like any other.
        let q = query("Nowhere Street 1, Atlantis").unwrap();
        let (status, body, _) = get(&g.request_url(&q)).await;
        assert_eq!(status, 200);
        assert_eq!(g.read_answer(&body, &q), Ok(None));
    }
    assert_eq!(fake.count(GEOCODE), 3);
    assert_eq!(fake.count(SEARCH), 3);
    // Every request named Notifio.
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.user_agent.as_deref() == Some(USER_AGENT))
    );
}

#[tokio::test]
async fn transit_reachability_is_one_request_for_every_listing() {
    let fake = GeoFake::start().await;
    fake.stop("Near", 52.50, 13.30, 20)
        .stop("Far", 52.60, 13.60, 50)
        .stop("Late", 52.45, 13.20, 95);
    let work = UserPlace {
        name: "Work".into(),
        at: at(52.5219, 13.4132),
        by: TravelMode::Transit,
    };
    let url = one_to_all_url(
        &Url::parse(&fake.url).unwrap(),
        work.at,
        35,
        route::arrival_time(Timestamp(1_788_000_000_000), &jiff::tz::TimeZone::UTC),
    )
    .unwrap();
    let (status, body, _) = get(&url).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let reach = parse_one_to_all(&body).unwrap();
    let names: Vec<&str> = reach.stops.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Near"], "only the stops within the limit asked");
    // Many listings, judged locally from that one answer.
    let near = Some(super::Place {
        at: at(52.502, 13.30),
        precision: Precision::Street,
    });
    let far = Some(super::Place {
        at: at(52.40, 13.10),
        precision: Precision::Street,
    });
    let c = transit_commute(&work, near, Some(&reach), 35);
    assert_eq!(c.to_string(), "24 min by transit to Work");
    assert_eq!(within(&c, 35), Verdict::Pass);
    let c = transit_commute(&work, far, Some(&reach), 35);
    assert_eq!(within(&c, 35), Verdict::HeldBack);
    assert_eq!(fake.count(ONE_TO_ALL), 1);
    // A limit past the server's is refused by the server too (and never asked by the client).
    let too_long = Url::parse(
        &url.as_str()
            .replace("maxTravelTime=35", "maxTravelTime=120"),
    )
    .unwrap();
    let (status, body, _) = get(&too_long).await;
    assert_eq!(status, 422);
    assert!(
        parse_one_to_all(&body).is_err(),
        "an error body is no reachability"
    );
}

#[tokio::test]
async fn street_modes_ask_for_many_listings_at_once() {
    let fake = GeoFake::start().await;
    let school = UserPlace {
        name: "School".into(),
        at: at(52.50, 13.40),
        by: TravelMode::Bike,
    };
    // 1 km, 3 km and 20 km north of School.
    let listings: Vec<Coordinates> = [1_000.0, 3_000.0, 20_000.0]
        .iter()
        .map(|m| at(52.50 + m / 111_195.0, 13.40))
        .collect();
    let reqs = one_to_many_requests(
        &Url::parse(&fake.url).unwrap(),
        school.at,
        TravelMode::Bike,
        &listings,
        30,
    )
    .unwrap();
    assert_eq!(reqs.len(), 1);
    let (status, body, _) = get(&reqs[0].url).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let secs = parse_one_to_many(&body, listings.len()).unwrap();
    // 1000 m / 4.2 m/s = 238 s; 3000 m = 714 s; 20 km is beyond 30 minutes.
    assert_eq!(secs, vec![Some(238), Some(714), None]);
    let said: Vec<String> = listings
        .iter()
        .zip(&secs)
        .map(|(c, s)| {
            let place = Some(super::Place {
                at: *c,
                precision: Precision::Street,
            });
            street_commute(&school, place, Some(*s), 30).to_string()
        })
        .collect();
    assert_eq!(
        said,
        [
            "4 min by bike to School",
            "12 min by bike to School",
            "more than 30 min by bike to School"
        ]
    );
    assert_eq!(fake.count(ONE_TO_MANY), 1);
}

#[tokio::test]
async fn the_fake_refuses_fails_and_goes_down_as_scripted() {
    let fake = GeoFake::start().await;
    fake.address("Alexanderplatz, Berlin", 52.5219, 13.4132, Kind::Street);
    let g = Geocoder {
        api: GeocoderApi::Motis,
        base: Url::parse(&fake.url).unwrap(),
        language: None,
    };
    let q = query("Alexanderplatz, Berlin").unwrap();
    let url = g.request_url(&q);
    fake.trouble(Trouble::TooMany { retry_after_s: 120 });
    let (status, _, retry) = get(&url).await;
    assert_eq!((status, retry.as_deref()), (429, Some("120")));
    fake.trouble(Trouble::Unavailable);
    assert_eq!(get(&url).await.0, 503);
    fake.trouble(Trouble::None);
    let (status, body, _) = get(&url).await;
    assert_eq!(status, 200);
    assert!(g.read_answer(&body, &q).unwrap().is_some());
    assert_eq!(fake.count(GEOCODE), 3, "refusals are counted too");

    fake.down().await;
    let refused = client().get(url.as_str()).send().await;
    assert!(refused.is_err_and(|e| e.is_connect()), "down means refused");
    fake.up().await;
    assert_eq!(get(&url).await.0, 200);
    assert_eq!(fake.count(GEOCODE), 4, "a refused connection is no request");
}

#[tokio::test]
async fn a_hanging_service_is_a_timeout() {
    let fake = GeoFake::start().await;
    fake.trouble(Trouble::Hang);
    let url = Url::parse(&format!("{}/api/v1/geocode?text=x", fake.url)).unwrap();
    let r = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap()
        .get(url.as_str())
        .send()
        .await;
    assert!(r.is_err_and(|e| e.is_timeout()));
    assert_eq!(fake.count(GEOCODE), 1);
}
