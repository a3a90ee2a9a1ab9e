//! Site profiles against our own pages shaped like the sites' (`tests/fixtures/`) and, when
//! they are at hand, the real third-party pages (`tests/support/real_pages.rs`: ignored
//! without them, required under `CI=true`): ids, fields, block pages, logged-out pages, and
//! pages that are not result lists at all.

use notifio::extract::immoscout24_app::{
    AppSearch, AppSearchError, DEFAULT_APP_API, WhyLeftOut, app_search,
};
use notifio::extract::{Extraction, SiteProfile, profile_for};
use notifio::listing::{CardSpec, FieldSpec, Listing, ListingField, ListingSpec};
use notifio_policy::{Outcome, ResponseFacts, SiteKey, classify};
use regex::Regex;
use std::collections::BTreeSet;
use std::sync::Arc;
use url::Url;

const OWN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");

fn own(name: &str) -> Vec<u8> {
    std::fs::read(format!("{OWN}{name}")).unwrap()
}

fn profile(url: &str, spec: Option<ListingSpec>) -> Arc<dyn SiteProfile> {
    profile_for(&SiteKey::from_url(url).unwrap(), None, spec.as_ref()).unwrap()
}

fn listings(e: Extraction) -> Vec<Listing> {
    match e {
        Extraction::Listings(l) => l,
        other => panic!("expected listings, got {other:?}"),
    }
}

fn by_id<'a>(l: &'a [Listing], id: &str) -> &'a Listing {
    l.iter()
        .find(|l| l.id == id)
        .unwrap_or_else(|| panic!("no listing {id}"))
}

fn facts<'a>(
    status: u16,
    requested: &'a str,
    final_url: &'a str,
    body: &'a [u8],
    has_session: bool,
) -> ResponseFacts<'a> {
    ResponseFacts {
        status: Some(status),
        failure: None,
        headers: &[],
        requested_url: requested,
        final_url,
        body_head: body,
        has_session,
    }
}

const IDEALISTA: &str = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/";

#[test]
#[cfg_attr(
    not(real_pages),
    ignore = "needs the real pages (NOTIFIO_REAL_PAGES=DIR)"
)]
fn idealista_real_page_yields_its_30_cards() {
    let body = crate::real_pages::read("idealista_es_search.html");
    let text = String::from_utf8_lossy(&body);
    let expected: BTreeSet<String> = Regex::new(r#"data-element-id="(\d+)""#)
        .unwrap()
        .captures_iter(&text)
        .map(|c| c[1].to_owned())
        .collect();
    assert_eq!(expected.len(), 30);

    let p = profile(IDEALISTA, None);
    assert_eq!(p.name(), "idealista");
    let got = listings(p.extract(&body, &Url::parse(IDEALISTA).unwrap()));
    let ids: BTreeSet<String> = got.iter().map(|l| l.id.clone()).collect();
    assert_eq!(got.len(), 30);
    assert_eq!(ids, expected);
    assert_eq!(got[0].id, "93640910", "page order");

    let first = by_id(&got, "93640910");
    assert_eq!(first.price, Some(1200.0));
    assert_eq!(first.currency.as_deref(), Some("EUR"));
    assert_eq!(first.rooms, Some(2.0));
    assert_eq!(first.area_m2, Some(72.0));
    assert_eq!(
        first.title.as_deref(),
        Some("Casa o chalet independiente en Simancas, Madrid")
    );
    assert_eq!(
        first.url.as_deref(),
        Some("https://www.idealista.com/inmueble/93640910/")
    );
    assert!(
        first
            .image
            .as_deref()
            .unwrap()
            .starts_with("https://img4.idealista.com/")
    );

    // "Garaje opc. 225 €/mes" comes first: neither a price nor an area.
    let garage = by_id(&got, "86097526");
    assert_eq!(
        (garage.price, garage.rooms, garage.area_m2),
        (Some(7500.0), Some(4.0), Some(313.0))
    );
    // "Garaje incluido" before the rooms; a "13 minutos" chip after.
    let l = by_id(&got, "112519434");
    assert_eq!(
        (l.price, l.rooms, l.area_m2),
        (Some(1350.0), Some(1.0), Some(68.0))
    );
    // A studio shows no room count.
    let studio = by_id(&got, "1832955");
    assert_eq!(
        (studio.price, studio.rooms, studio.area_m2),
        (Some(1500.0), None, Some(53.0))
    );
    assert!(got.iter().all(|l| l.price.is_some() && l.area_m2.is_some()));
}

#[test]
#[cfg_attr(
    not(real_pages),
    ignore = "needs the real pages (NOTIFIO_REAL_PAGES=DIR)"
)]
fn idealista_real_page_is_not_a_challenge() {
    let body = crate::real_pages::read("idealista_es_search.html");
    let p = profile(IDEALISTA, None);
    // The page loads DataDome's tags.js and sets ddjskey: that is normal, not a block.
    assert!(String::from_utf8_lossy(&body).contains("ddjskey"));
    let f = facts(200, IDEALISTA, IDEALISTA, &body, false);
    assert_eq!(classify(&f, &p.markers()), Outcome::Ok);
}

#[test]
fn idealista_edge_cases() {
    let p = profile(IDEALISTA, None);
    let got = listings(p.extract(
        &own("idealista_edge_cases.html"),
        &Url::parse(IDEALISTA).unwrap(),
    ));
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(
        ids,
        ["1001", "1002"],
        "the project ad without item-link is skipped"
    );
    let a = &got[0];
    assert_eq!(
        a.title.as_deref(),
        Some("Piso en calle de O'Donnell & Goya")
    );
    assert_eq!(
        (a.price, a.currency.as_deref()),
        (Some(1250.0), Some("EUR"))
    );
    assert_eq!(
        (a.rooms, a.area_m2),
        (Some(2.0), Some(60.0)),
        "28 minutos is not a figure"
    );
    assert_eq!(
        a.image.as_deref(),
        Some("https://www.idealista.com/img/1001.jpg")
    );
    let b = &got[1];
    assert_eq!(b.title.as_deref(), Some("Ático en Chamberí"));
    assert_eq!(b.price, Some(950.0));
    assert_eq!((b.rooms, b.area_m2), (None, None), "chips only: no figures");
}

#[test]
fn idealista_datadome_block_and_checkvalidation_are_challenges() {
    let p = profile(IDEALISTA, None);
    let body = own("datadome_block.html");
    for status in [200, 403] {
        let f = facts(status, IDEALISTA, IDEALISTA, &body, false);
        assert_eq!(
            classify(&f, &p.markers()),
            Outcome::Challenge,
            "status {status}"
        );
    }
    let redirected = "https://www.idealista.com/checkvalidation?url=x";
    let f = facts(200, IDEALISTA, redirected, b"<html></html>", false);
    assert_eq!(classify(&f, &p.markers()), Outcome::Challenge);
    // And the block page holds no result list.
    assert_eq!(
        p.extract(&body, &Url::parse(IDEALISTA).unwrap()),
        Extraction::LayoutUnknown
    );
}

const IS24: &str = "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten";

fn is24_expected(json: &[u8]) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(json).unwrap();
    let entries = &v["resultList"]["resultListModel"]["searchResponseModel"]["resultlist.resultlist"]
        ["resultlistEntries"][0]["resultlistEntry"];
    entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["@id"].as_str().unwrap().to_owned())
        .collect()
}

/// The result list ImmobilienScout24's page embeds, read from the page and bare: the ids of
/// `expected`, each once, with their fields.
fn is24_result_json_reads(json: &[u8], expected: &[String]) -> Vec<Listing> {
    let p = profile(IS24, None);
    assert_eq!(p.name(), "immoscout24");
    let url = Url::parse(IS24).unwrap();

    let mut page =
        b"<!DOCTYPE html><html><head><script>\nvar IS24 = IS24 || {};\nIS24.resultList = ".to_vec();
    page.extend_from_slice(json);
    page.extend_from_slice(
        b";\n</script></head><body><div id=\"resultListItems\"></div></body></html>",
    );

    let mut out = Vec::new();
    for body in [page.as_slice(), json] {
        let got = listings(p.extract(body, &url));
        let ids: Vec<String> = got.iter().map(|l| l.id.clone()).collect();
        assert_eq!(ids, expected);
        out = got;
    }
    out
}

/// The real page's result list (20 flats, Berlin, 2020).
#[test]
#[cfg_attr(
    not(real_pages),
    ignore = "needs the real pages (NOTIFIO_REAL_PAGES=DIR)"
)]
fn is24_result_json_embedded_and_bare() {
    let json = crate::real_pages::read("immoscout24_resultlist_2020.json");
    let expected = is24_expected(&json);
    assert_eq!(expected.len(), 20);
    let got = is24_result_json_reads(&json, &expected);
    {
        let first = by_id(&got, "123393909");
        assert_eq!(first.price, Some(415.8));
        assert_eq!(first.currency.as_deref(), Some("EUR"));
        assert_eq!((first.rooms, first.area_m2), (Some(2.0), Some(51.0)));
        assert_eq!(
            first.url.as_deref(),
            Some("https://www.immobilienscout24.de/expose/123393909")
        );
        assert!(
            first
                .title
                .as_deref()
                .unwrap()
                .starts_with("2 Zimmer, Küche, Bad")
        );
        assert!(
            first
                .image
                .as_deref()
                .unwrap()
                .starts_with("https://pictures.immobilienscout24.de/")
        );
        assert_eq!(by_id(&got, "123595845").area_m2, Some(38.48));
    }
}

/// Our own result list in the page's shape: an id on the entry only, a flat without a price
/// or a picture, a decimal area, and one flat listed twice.
#[test]
fn is24_result_json_of_our_own_reads_every_field() {
    let json = own("is24_resultlist.json");
    let expected: Vec<String> = ["900000001", "900000002", "900000003", "900000004"]
        .map(String::from)
        .to_vec();
    let got = is24_result_json_reads(&json, &expected);
    let first = by_id(&got, "900000001");
    assert_eq!(
        (first.price, first.currency.as_deref()),
        (Some(850.5), Some("EUR"))
    );
    assert_eq!((first.rooms, first.area_m2), (Some(2.0), Some(51.0)));
    assert_eq!(
        first.url.as_deref(),
        Some("https://www.immobilienscout24.de/expose/900000001")
    );
    assert_eq!(
        first.title.as_deref(),
        Some("2 Zimmer mit Balkon in ruhiger Lage")
    );
    assert!(
        first
            .image
            .as_deref()
            .unwrap()
            .starts_with("https://pictures.immobilienscout24.de/")
    );
    let second = by_id(&got, "900000002");
    assert_eq!(
        (second.area_m2, second.image.as_deref()),
        (Some(38.48), None)
    );
    assert_eq!(
        by_id(&got, "900000003").price,
        None,
        "no price, not a number from elsewhere"
    );
    assert_eq!(by_id(&got, "900000004").price, Some(1290.0));
}

/// ImmobilienScout24's GeeTest block page is a challenge at 200 and 405, recognised by the
/// site's own markers too, and holds no result list.
fn is24_block_page_is_a_challenge(body: &[u8]) {
    let p = profile(IS24, None);
    for status in [200, 405] {
        let f = facts(status, IS24, IS24, body, false);
        assert_eq!(
            classify(&f, &p.markers()),
            Outcome::Challenge,
            "status {status}"
        );
    }
    // The site-specific markers alone recognise it, even without the generic Geetest ones.
    let mut only_site = p.markers();
    only_site
        .challenge_body
        .retain(|m| m.contains("Roboter") || m.contains("blockiert"));
    assert!(!only_site.challenge_body.is_empty());
    let f = facts(200, IS24, IS24, body, false);
    assert_eq!(classify(&f, &only_site), Outcome::Challenge);
    assert_eq!(
        p.extract(body, &Url::parse(IS24).unwrap()),
        Extraction::LayoutUnknown
    );
}

#[test]
fn is24_block_page_of_our_own_is_a_challenge_at_200_and_405() {
    is24_block_page_is_a_challenge(&own("is24_block.html"));
}

#[test]
#[cfg_attr(
    not(real_pages),
    ignore = "needs the real pages (NOTIFIO_REAL_PAGES=DIR)"
)]
fn is24_real_block_page_is_a_challenge_at_200_and_405() {
    is24_block_page_is_a_challenge(&crate::real_pages::read("immoscout24_block_geetest.html"));
}

#[test]
fn is24_html_cards_both_layouts() {
    let p = profile(IS24, None);
    let got = listings(p.extract(&own("is24_cards.html"), &Url::parse(IS24).unwrap()));
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["111", "222"]);
    let old = &got[0];
    assert_eq!(
        old.title.as_deref(),
        Some("NEU Schöne 2-Zimmer-Wohnung mit Balkon")
    );
    assert_eq!(
        (old.price, old.rooms, old.area_m2),
        (Some(815.92), Some(2.0), Some(66.5))
    );
    assert_eq!(
        old.url.as_deref(),
        Some("https://www.immobilienscout24.de/expose/111")
    );
    let new = &got[1];
    assert_eq!(new.title.as_deref(), Some("Altbau in Kreuzberg"));
    assert_eq!(
        (new.price, new.rooms, new.area_m2),
        (Some(1250.0), Some(3.0), Some(90.0))
    );
}

#[test]
fn is24_empty_result_json_is_no_results() {
    let p = profile(IS24, None);
    let body = br#"<script>IS24.resultList = {"resultListModel":{"searchResponseModel":{"resultlist.resultlist":{"paging":{"numberOfHits":0},"resultlistEntries":[{"@numberOfHits":"0"}]}}}};</script>"#;
    assert_eq!(
        p.extract(body, &Url::parse(IS24).unwrap()),
        Extraction::NoResults
    );
}

// ---- ImmobilienScout24's app --------------------------------------------------------------

/// The app's result list, read by the immoscout24 profile whichever URL it came from: links
/// are the public expose pages, figures are read by their units (a plot shows no rooms and a
/// price per m² first), ads and blank ids are skipped, a repeated id counts once.
#[test]
fn is24_app_result_list() {
    let p = profile(IS24, None);
    let body = own("is24_app_list.json");
    for came_from in [
        "http://127.0.0.1:9/search/list?searchType=region",
        "https://api.mobile.immobilienscout24.de/search/list?searchType=region",
        IS24,
    ] {
        let got = listings(p.extract(&body, &Url::parse(came_from).unwrap()));
        let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["150000001", "150000002", "150000003"], "{came_from}");
        let a = &got[0];
        assert_eq!(
            a.title.as_deref(),
            Some("Helle 3-Zimmer-Wohnung mit Südbalkon in Friedrichshain")
        );
        assert_eq!(
            (a.price, a.currency.as_deref(), a.rooms, a.area_m2),
            (Some(1490.0), Some("EUR"), Some(3.0), Some(78.5))
        );
        assert_eq!(
            a.url.as_deref(),
            Some("https://www.immobilienscout24.de/expose/150000001")
        );
        assert!(
            a.image.as_deref().unwrap().starts_with(
                "https://pictures.immobilienscout24.example/listings/aaaa-0001.jpg/ORIG/resize/800x600"
            ) && a.image.as_deref().unwrap().ends_with("/quality/80"),
            "the full picture: {:?}",
            a.image
        );
        let b = &got[1];
        assert_eq!(
            (b.price, b.rooms, b.area_m2),
            (Some(640.0), Some(1.5), Some(39.18))
        );
        assert!(
            b.image.as_deref().unwrap().ends_with("/quality/20"),
            "preview"
        );
        let plot = &got[2];
        assert_eq!(
            (plot.price, plot.rooms, plot.area_m2, plot.image.as_deref()),
            (Some(189_000.0), None, Some(612.0), None)
        );
    }
}

#[test]
fn is24_app_answers_that_are_empty_or_malformed() {
    let p = profile(IS24, None);
    let url = Url::parse("http://127.0.0.1:9/search/list").unwrap();
    let empty = br#"{"totalResults":0,"resultListItems":[]}"#;
    assert_eq!(p.extract(empty, &url), Extraction::NoResults);
    let only_ads = br#"{"resultListItems":[{"type":"ADVERTISEMENT","item":{"id":"x"}}]}"#;
    assert_eq!(p.extract(only_ads, &url), Extraction::Listings(vec![]));
    // The app's shape with the wrong types inside: the layout changed.
    let wrong = br#"  {"resultListItems":[{"type":"EXPOSE_RESULT","item":{"id":"1","attributes":"2 Zi."}}]}"#;
    assert_eq!(p.extract(wrong, &url), Extraction::LayoutUnknown);
    let cut = br#"{"resultListItems":[{"type":"EXPOSE_RESULT","item":{"id":"1""#;
    assert_eq!(p.extract(cut, &url), Extraction::LayoutUnknown);
    // Not the app's shape: the web page paths still apply.
    assert!(matches!(
        p.extract(&own("is24_cards.html"), &Url::parse(IS24).unwrap()),
        Extraction::Listings(l) if l.len() == 2
    ));
}

fn app(web: &str) -> Result<AppSearch, AppSearchError> {
    app_search(
        &Url::parse(web).unwrap(),
        &Url::parse(DEFAULT_APP_API).unwrap(),
    )
}

/// The app query as (name, value) pairs, in order.
fn query(search: &AppSearch) -> Vec<(String, String)> {
    search.url.query_pairs().into_owned().collect()
}

fn param(search: &AppSearch, name: &str) -> Option<String> {
    search
        .url
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

const IS24_WEB: &str = "https://www.immobilienscout24.de/Suche/de/berlin/berlin";

/// A web search with region, kind, price, rooms, area and sorting becomes the app's POST with
/// the same search; the website's tracking parameter is dropped without a word.
#[test]
fn is24_web_search_becomes_the_app_request() {
    let s = app(&format!(
        "{IS24_WEB}/wohnung-mieten?price=-1500.0&pricetype=rentpermonth&numberofrooms=2.0-&livingspace=50.0-90.0&sorting=2&enteredFrom=result_list"
    ))
    .unwrap();
    assert_eq!(s.method, "POST");
    assert_eq!(
        (s.url.scheme(), s.url.host_str(), s.url.path()),
        (
            "https",
            Some("api.mobile.immobilienscout24.de"),
            "/search/list"
        )
    );
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
    };
    assert_eq!(
        query(&s),
        pairs(&[
            ("searchType", "region"),
            ("realestatetype", "apartmentrent"),
            ("geocodes", "/de/berlin/berlin"),
            ("exclusioncriteria", "swapflat"),
            ("price", "-1500.0"),
            ("pricetype", "rentpermonth"),
            ("numberofrooms", "2.0-"),
            ("livingspace", "50.0-90.0"),
            ("sorting", "-firstactivation"),
        ])
    );
    assert!(
        s.url.as_str().contains("geocodes=%2Fde%2Fberlin%2Fberlin"),
        "{}",
        s.url
    );
    // The app version the endpoint needs, then an honest product token: never hidden.
    let ua = concat!(
        "ImmoScout_28.1_26.5.2_._ notifio/",
        env!("CARGO_PKG_VERSION"),
        " (rental search watcher)"
    );
    assert_eq!(
        s.headers,
        [
            ("User-Agent", ua),
            ("Accept", "application/json"),
            ("Content-Type", "application/json"),
        ]
    );
    let body: serde_json::Value = serde_json::from_str(s.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"supportedResultListTypes": [], "userData": {}})
    );
    assert_eq!(s.left_out, []);
    assert_eq!(s.warning(), None);
}

/// `app_api` replaces the endpoint's base URL, with or without a trailing slash.
#[test]
fn is24_app_endpoint_is_overridable() {
    let web = Url::parse(&format!("{IS24_WEB}/wohnung-mieten")).unwrap();
    for base in ["http://127.0.0.1:8099/is24", "http://127.0.0.1:8099/is24/"] {
        let s = app_search(&web, &Url::parse(base).unwrap()).unwrap();
        assert_eq!(
            s.url.as_str().split('?').next(),
            Some("http://127.0.0.1:8099/is24/search/list"),
            "{base}"
        );
    }
    let s = app_search(&web, &Url::parse("http://127.0.0.1:8099").unwrap()).unwrap();
    assert_eq!(s.url.path(), "/search/list");
    let e = app_search(&web, &Url::parse("ftp://127.0.0.1/").unwrap()).unwrap_err();
    assert!(matches!(e, AppSearchError::BadEndpoint(_)), "{e}");
}

/// Every parameter the app search cannot carry over is named, with the reason; nothing is
/// changed silently. Website noise is not a filter and is not reported.
#[test]
fn is24_parameters_the_app_search_leaves_out_are_named() {
    let s = app(&format!(
        "{IS24_WEB}/haus-mieten?floor=2-7&pricetype=calculatedtotalrent&listingtags=holzbalken&price=cheap&sorting=99&utm_source=mail&referrer=x&pagenumber=3&numberofrooms=4.0-"
    ))
    .unwrap();
    let left: Vec<(&str, &str, WhyLeftOut)> = s
        .left_out
        .iter()
        .map(|l| (l.param.as_str(), l.value.as_str(), l.why))
        .collect();
    assert_eq!(
        left,
        [
            ("floor", "2-7", WhyLeftOut::NotForThisKind),
            (
                "pricetype",
                "calculatedtotalrent",
                WhyLeftOut::NotForThisKind
            ),
            ("listingtags", "holzbalken", WhyLeftOut::Unknown),
            ("price", "cheap", WhyLeftOut::UnknownValue),
            ("sorting", "99", WhyLeftOut::UnknownValue),
        ]
    );
    for gone in [
        "floor",
        "pricetype",
        "listingtags",
        "price",
        "utm_source",
        "pagenumber",
    ] {
        assert_eq!(param(&s, gone), None, "{gone}");
    }
    assert_eq!(param(&s, "numberofrooms").as_deref(), Some("4.0-"));
    assert_eq!(param(&s, "sorting").as_deref(), Some("-firstactivation"));
    let warning = s.warning().unwrap();
    for named in [
        "`floor=2-7`",
        "`pricetype=calculatedtotalrent`",
        "`listingtags=holzbalken` (not understood)",
        "`price=cheap` (value not understood)",
        "`sorting=99`",
    ] {
        assert!(warning.contains(named), "{named} in {warning}");
    }
    assert!(!warning.contains("utm_source") && !warning.contains("pagenumber"));
}

/// Filters the site folds into the path become parameters; the query replaces them, as on the
/// website; apartment rentals leave out swap flats unless told otherwise.
#[test]
fn is24_path_filters_defaults_and_precedence() {
    let s = app(&format!("{IS24_WEB}/wohnung-mit-balkon-mieten")).unwrap();
    assert_eq!(
        param(&s, "realestatetype").as_deref(),
        Some("apartmentrent")
    );
    assert_eq!(param(&s, "equipment").as_deref(), Some("balcony"));
    assert_eq!(param(&s, "exclusioncriteria").as_deref(), Some("swapflat"));
    let s = app(&format!(
        "{IS24_WEB}/haus-mit-garage-kaufen?equipment=cellar&price=-600000.0"
    ))
    .unwrap();
    assert_eq!(param(&s, "realestatetype").as_deref(), Some("housebuy"));
    assert_eq!(param(&s, "equipment").as_deref(), Some("cellar"));
    assert_eq!(
        param(&s, "exclusioncriteria"),
        None,
        "no default for houses"
    );
    let s = app(&format!(
        "{IS24_WEB}/wohnung-mieten?exclusioncriteria=projectlisting"
    ))
    .unwrap();
    assert_eq!(
        param(&s, "exclusioncriteria").as_deref(),
        Some("projectlisting")
    );
    let s = app(&format!(
        "{IS24_WEB}/wohnung-bis-800-euro-warm?livingspace=40.0-"
    ))
    .unwrap();
    assert_eq!(
        (
            param(&s, "price"),
            param(&s, "pricetype"),
            param(&s, "livingspace")
        ),
        (
            Some("-800".into()),
            Some("calculatedtotalrent".into()),
            Some("40.0-".into())
        )
    );
    let s = app(&format!(
        "{IS24_WEB}/3-zimmer-wohnung-kaufen?sorting=-price"
    ))
    .unwrap();
    assert_eq!(
        (
            param(&s, "realestatetype"),
            param(&s, "numberofrooms"),
            param(&s, "sorting")
        ),
        (
            Some("apartmentbuy".into()),
            Some("3.0-3.5".into()),
            Some("-price".into())
        )
    );
    let s = app(&format!("{IS24_WEB}/wg-zimmer?livingspace=12.0-&sorting=4")).unwrap();
    assert_eq!(
        (
            param(&s, "realestatetype"),
            param(&s, "livingspace"),
            param(&s, "sorting")
        ),
        (
            Some("flatshareroom".into()),
            Some("12.0-".into()),
            Some("price".into())
        )
    );
    // Repeated parameters are one list, as the website writes lists.
    let s = app(&format!(
        "{IS24_WEB}/wohnung-mieten?equipment=balcony&equipment=lift"
    ))
    .unwrap();
    assert_eq!(param(&s, "equipment").as_deref(), Some("balcony,lift"));
}

/// The region comes from the path, or from picked districts, a radius or a drawn shape.
#[test]
fn is24_search_regions() {
    let s = app("https://www.immobilienscout24.de/Suche/de/nordrhein-westfalen/haus-kaufen?geocodes=1276010037,1276010014").unwrap();
    assert_eq!(
        param(&s, "geocodes").as_deref(),
        Some("1276010037,1276010014")
    );
    let s = app("https://www.immobilienscout24.de/Suche/de/wohnung-mieten/").unwrap();
    assert_eq!(param(&s, "geocodes").as_deref(), Some("/de"));
    let s = app("https://www.immobilienscout24.de/Suche/radius/wohnung-mieten?centerofsearchaddress=Berlin;;;;&geocoordinates=52.52;13.40;5.0").unwrap();
    assert_eq!(
        (
            param(&s, "searchType"),
            param(&s, "geocoordinates"),
            param(&s, "geocodes")
        ),
        (Some("radius".into()), Some("52.52;13.40;5.0".into()), None)
    );
    assert_eq!(s.left_out, [], "the radius' address is not a filter");
    let s = app("https://www.immobilienscout24.de/Suche/radius/wohnung-mieten?geocoordinates=52.52;13.40;5.0&geocodes=1276010037&price=").unwrap();
    let left: Vec<&str> = s.left_out.iter().map(|l| l.param.as_str()).collect();
    assert_eq!(
        left,
        ["geocodes"],
        "districts do not apply to a radius search; an empty price is none"
    );
    assert_eq!(param(&s, "price"), None);
    let s = app("https://www.immobilienscout24.de/Suche/shape/haus-kaufen?shape=aW9yfkhfa3htQQ..&price=-600000.0").unwrap();
    assert_eq!(
        (param(&s, "searchType"), param(&s, "shape")),
        (Some("shape".into()), Some("ior~H_kxmA".into()))
    );
}

#[test]
fn is24_urls_the_app_search_cannot_take_are_errors() {
    let e = app("https://www.immobilienscout24.de/expose/150000001").unwrap_err();
    assert!(matches!(e, AppSearchError::NotASearch { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("/Suche/de/berlin/berlin/wohnung-mieten"),
        "{e}"
    );
    for not_a_search in [
        "https://www.immobilienscout24.de/Suche",
        "https://www.immobilienscout24.de/",
        "https://www.immobilienscout24.de",
    ] {
        assert!(
            matches!(app(not_a_search), Err(AppSearchError::NotASearch { .. })),
            "{not_a_search}"
        );
    }
    let e = app(&format!("{IS24_WEB}/gewerbeflaeche-mieten")).unwrap_err();
    assert!(e.to_string().contains("`gewerbeflaeche-mieten`"), "{e}");
    assert!(e.to_string().contains("fetch = \"browser\""), "{e}");
    let e =
        app("https://www.immobilienscout24.de/Suche/radius/wohnung-mieten?price=-900").unwrap_err();
    assert_eq!(
        e,
        AppSearchError::NoLocation {
            kind: "radius",
            param: "geocoordinates"
        }
    );
    let e = app("https://www.immobilienscout24.de/Suche/wohnung-mieten").unwrap_err();
    assert!(
        matches!(e, AppSearchError::NoLocation { kind: "region", .. }),
        "{e}"
    );
}

proptest::proptest! {
    /// Whatever the web URL holds, each of its parameters is in the app query (as given, or
    /// sorting translated), named in `left_out`, or website noise; no URL makes it panic.
    #[test]
    fn is24_no_parameter_is_dropped_silently(
        region in proptest::sample::select(vec![
            "/Suche/de/berlin/berlin", "/Suche/de", "/Suche/radius", "/Suche/shape", "/Suche", "/x",
        ]),
        slug in proptest::sample::select(vec![
            "wohnung-mieten", "haus-kaufen", "wg-zimmer", "loft-mieten", "2-zimmer-wohnung-kaufen",
            "wohnung-bis-700-euro-warm", "garage-mieten", "immobilie-mieten", "",
        ]),
        params in proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "price", "pricetype", "numberofrooms", "livingspace", "sorting", "equipment",
                    "floor", "buildingtypes", "haspromotion", "fulltext", "exclusioncriteria",
                    "geocodes", "geocoordinates", "shape", "enteredFrom", "utm_x", "foo", "PRICE",
                ]),
                proptest::sample::select(vec![
                    "-1200.0", "1.0-2.0", "2", "true", "balcony,lift", "calculatedtotalrent",
                    "rentpermonth", "2", "-price", "a b", "", "52.5;13.4;5", "aW9yfkhfa3htQQ..",
                    "%", "ümlaut",
                ]),
            ),
            0..6,
        ),
    ) {
        let mut web = Url::parse("https://www.immobilienscout24.de/").unwrap();
        web.set_path(&format!("{region}/{slug}"));
        web.query_pairs_mut().extend_pairs(params.iter().copied());
        let Ok(s) = app(web.as_str()) else {
            // Only a URL that is no search of a known kind, or lacks its location, is refused.
            proptest::prop_assert!(
                region == "/x" || region == "/Suche" || slug.is_empty() || slug == "immobilie-mieten"
                    || ["/Suche/radius", "/Suche/shape"].contains(&region),
                "{web} refused"
            );
            return Ok(());
        };
        // The web query as the translator reads it: repeats joined.
        let mut given: Vec<(String, String)> = Vec::new();
        for (k, v) in web.query_pairs() {
            match given.iter_mut().find(|(n, _)| *n == k) {
                Some((_, value)) => {
                    value.push(',');
                    value.push_str(&v);
                }
                None => given.push((k.into_owned(), v.into_owned())),
            }
        }
        for (name, value) in given {
            let value = value.trim().to_owned();
            let noise = value.is_empty() || name == "enteredFrom" || name.starts_with("utm_");
            let reported = s.left_out.iter().any(|l| l.param == name && l.value == value);
            let sent = match name.as_str() {
                // Translated: present under the app's name or encoding.
                "sorting" | "shape" => param(&s, &name).is_some(),
                _ => param(&s, &name) == Some(value.clone()),
            };
            proptest::prop_assert!(
                noise || reported || sent,
                "{name}={value} vanished from {web} -> {}",
                s.url
            );
        }
    }
}

const FB: &str = "https://www.facebook.com/marketplace/madrid/propertyrentals";

#[test]
fn facebook_feed_skips_sold_and_pending() {
    let p = profile(FB, None);
    assert_eq!(p.name(), "facebook");
    assert!(p.needs_cookies());
    assert_eq!(p.required_cookies(), ["c_user", "xs"]);
    assert_eq!(p.default_spacing(), Some(std::time::Duration::from_secs(5)));
    let body = own("fb_search.html");
    let got = listings(p.extract(&body, &Url::parse(FB).unwrap()));
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["1234567890123456", "4444444444444444"]);
    let a = &got[0];
    assert_eq!(a.title.as_deref(), Some("2 Beds 1 Bath - Flat in Malasaña"));
    assert_eq!(
        (a.price, a.currency.as_deref()),
        (Some(1250.0), Some("EUR"))
    );
    assert_eq!((a.rooms, a.area_m2), (Some(2.0), Some(60.0)));
    assert_eq!(
        a.url.as_deref(),
        Some("https://www.facebook.com/marketplace/item/1234567890123456/")
    );
    assert_eq!(
        a.image.as_deref(),
        Some("https://scontent.xx.fbcdn.net/v/t45/1.jpg")
    );
    assert_eq!(got[1].title.as_deref(), Some("Room & terrace"));
    // A logged-in page is fine with the session markers.
    let f = facts(200, FB, FB, &body, true);
    assert_eq!(classify(&f, &p.markers()), Outcome::Ok);
}

#[test]
fn facebook_logged_out_and_login_redirects_expire_the_session() {
    let p = profile(FB, None);
    let body = own("fb_logged_out.html");
    let f = facts(200, FB, FB, &body, true);
    assert_eq!(classify(&f, &p.markers()), Outcome::SessionExpired);
    for to in [
        "https://www.facebook.com/login/?next=%2Fmarketplace%2F",
        "https://www.facebook.com/checkpoint/828281030927956/",
    ] {
        let f = facts(200, FB, to, b"<html>Log in</html>", true);
        assert_eq!(classify(&f, &p.markers()), Outcome::SessionExpired, "{to}");
    }
    assert_eq!(
        p.extract(&body, &Url::parse(FB).unwrap()),
        Extraction::LayoutUnknown
    );
}

#[test]
fn facebook_empty_feed_is_no_results() {
    let p = profile(FB, None);
    let body = br#"<script type="application/json" data-sjs>{"data":{"marketplace_search":{"feed_units":{"edges":[],"page_info":{"has_next_page":false}}}}}</script>"#;
    assert_eq!(
        p.extract(body, &Url::parse(FB).unwrap()),
        Extraction::NoResults
    );
}

const PORTAL: &str = "http://127.0.0.1:8080/search/madrid?max=1500";

fn selector_spec() -> ListingSpec {
    ListingSpec::Selector(Box::new(CardSpec::new("article.listing", Some("data-id"))))
}

#[test]
fn generic_selector_cards() {
    let p = profile(PORTAL, Some(selector_spec()));
    assert_eq!(p.name(), "generic");
    let got = listings(p.extract(&own("generic_cards.html"), &Url::parse(PORTAL).unwrap()));
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(
        ids,
        ["17", "18", "19"],
        "no-id card skipped, duplicate dropped"
    );
    let a = &got[0];
    assert_eq!(a.title.as_deref(), Some("Bright flat near the park"));
    assert_eq!(
        (a.price, a.currency.as_deref()),
        (Some(1250.0), Some("EUR"))
    );
    assert_eq!((a.rooms, a.area_m2), (Some(2.0), Some(60.0)));
    assert_eq!(a.url.as_deref(), Some("http://127.0.0.1:8080/listing/17"));
    let b = &got[1];
    assert_eq!(
        (b.price, b.rooms, b.area_m2),
        (Some(1250.5), Some(3.0), Some(60.0))
    );
    assert_eq!(
        b.url.as_deref(),
        Some("http://127.0.0.1:8080/search/listing/18?ref=a&b=1")
    );
    let c = &got[2];
    assert_eq!(
        (c.price, c.rooms, c.area_m2),
        (Some(950.0), Some(2.0), Some(60.0))
    );
}

#[test]
fn generic_selector_without_id_attr_uses_the_first_link() {
    let spec = ListingSpec::Selector(Box::new(CardSpec {
        title: Some(FieldSpec::text("h2")),
        price: Some(FieldSpec::text(".price")),
        ..CardSpec::new("article.listing", None)
    }));
    let p = profile(PORTAL, Some(spec));
    let got = listings(p.extract(&own("generic_cards.html"), &Url::parse(PORTAL).unwrap()));
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "http://127.0.0.1:8080/listing/17",
            "http://127.0.0.1:8080/search/listing/18?ref=a&b=1",
            "http://127.0.0.1:8080/listing/19",
        ]
    );
    assert_eq!(got[2].title.as_deref(), Some("Studio"));
}

fn cards(selector: &str, id_attr: &str) -> CardSpec {
    CardSpec::new(selector, Some(id_attr))
}

fn extract_with(spec: CardSpec, page: &str, fixture: &str) -> Vec<Listing> {
    let p = profile(page, Some(ListingSpec::Selector(Box::new(spec))));
    listings(p.extract(&own(fixture), &Url::parse(page).unwrap()))
}

const KLEINANZEIGEN: &str = "https://www.kleinanzeigen.de/s-wohnung-mieten/berlin/c203l3331";

/// The first link of each card is its photo, whose text is the photo counter ("18"): the
/// title is the card's heading instead, and rooms and area come from the card's text.
#[test]
fn generic_defaults_on_a_kleinanzeigen_like_page() {
    let got = extract_with(
        cards("article.aditem", "data-adid"),
        KLEINANZEIGEN,
        "kleinanzeigen_like.html",
    );
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(
        ids,
        ["2901000001", "2901000002"],
        "the ad slot is no listing"
    );
    let a = &got[0];
    assert_eq!(
        a.title.as_deref(),
        Some("Helle 3-Zimmer-Wohnung mit Balkon")
    );
    assert_eq!(
        (a.price, a.currency.as_deref()),
        (Some(1250.0), Some("EUR"))
    );
    assert_eq!((a.rooms, a.area_m2), (Some(3.0), Some(89.0)));
    assert_eq!(
        a.url.as_deref(),
        Some("https://www.kleinanzeigen.de/s-anzeige/helle-3-zimmer-wohnung/2901000001-203-3331")
    );
    // The 2x candidate of the srcset is the larger picture.
    assert_eq!(
        a.image.as_deref(),
        Some("https://img.kleinanzeigen.example/api/v1/prod-ads/images/aa/aa01?rule=$_35.AUTO")
    );
    let b = &got[1];
    assert_eq!(b.title.as_deref(), Some("Altbau mit Stuck, ruhige Lage"));
    assert_eq!(b.price, Some(1480.0));
    assert_eq!((b.rooms, b.area_m2), (Some(4.0), Some(147.7)));
    assert!(got.iter().all(|l| l.title.as_deref() != Some("18")));
}

const WG_GESUCHT: &str = "https://www.wg-gesucht.de/wg-zimmer-in-Berlin.8.0.1.0.html";

/// The only `<img>`s of each card are flatmate icons; the photo is a CSS background. A shared
/// room shows no room count ("3er WG" is the flat, not the room), so rooms stay empty.
#[test]
fn generic_defaults_on_a_wg_gesucht_like_page() {
    let got = extract_with(
        cards(".wgg_card", "data-id"),
        WG_GESUCHT,
        "wg_gesucht_like.html",
    );
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["9800001", "9800002"]);
    let a = &got[0];
    assert_eq!(
        a.title.as_deref(),
        Some("Helles Zimmer in 3er WG nahe Rosenthaler Platz")
    );
    assert_eq!(
        a.image.as_deref(),
        Some("https://img.wg-gesucht.example/media/up/2025/01/9800001_a.small.jpg")
    );
    assert_eq!((a.rooms, a.area_m2), (None, Some(18.0)));
    assert_eq!(
        a.price,
        Some(520.0),
        "no element's class says price: the price beside its currency in the card's text"
    );
    assert_eq!(
        got[1].image.as_deref(),
        Some("https://img.wg-gesucht.example/media/up/2025/01/9800002_b.small.jpg")
    );
    assert!(
        got.iter()
            .all(|l| !l.image.as_deref().unwrap().contains("flatmate"))
    );

    // The sub-selectors of docs/config.md's worked example.
    let got = extract_with(
        CardSpec {
            price: Some(FieldSpec::text(".middle .col-xs-3")),
            area: Some(FieldSpec::text(".middle .text-right")),
            ..cards(".wgg_card", "data-id")
        },
        WG_GESUCHT,
        "wg_gesucht_like.html",
    );
    let prices: Vec<_> = got.iter().map(|l| (l.price, l.area_m2)).collect();
    assert_eq!(
        prices,
        [(Some(520.0), Some(18.0)), (Some(430.0), Some(14.0))]
    );
}

/// Rooms as "hab.", "T3", "rooms"; area as "qm" and with a decimal point; a title from a
/// link's `aria-label`, the longest link text or a link's `title`; a photo beside a logo, in
/// `data-src`, in a `srcset`, or as a background.
#[test]
fn generic_defaults_read_each_field_in_its_common_forms() {
    let page = "https://portal.example/search";
    let got = extract_with(cards("li.card", "data-ref"), page, "generic_fields.html");
    let row = |l: &Listing| {
        (
            l.id.clone(),
            l.title.clone(),
            l.price,
            l.rooms,
            l.area_m2,
            l.image.clone(),
        )
    };
    let s = |t: &str| Some(t.to_owned());
    assert_eq!(
        got.iter().map(row).collect::<Vec<_>>(),
        [
            (
                "es-1".into(),
                s("Piso exterior en Chamberí"),
                Some(1100.0),
                Some(3.0),
                Some(85.0),
                s("https://portal.example/fotos/es-1-principal.jpg"),
            ),
            (
                "pt-2".into(),
                s("Apartamento T3 com varanda em Arroios"),
                Some(1350.0),
                Some(3.0),
                Some(96.5),
                s("https://portal.example/fotos/pt-2-large.jpg"),
            ),
            (
                "en-3".into(),
                s("Two bedroom flat with garden, Hackney"),
                Some(1450.0),
                Some(2.0),
                Some(64.0),
                s("https://portal.example/photos/en-3.webp"),
            ),
            (
                "de-4".into(),
                s("Maisonette am Park"),
                Some(980.0),
                // "Zimmer: 2,5" puts the unit first: not found by default.
                None,
                None,
                s("https://portal.example/bilder/de-4.jpg"),
            ),
        ]
    );
    assert_eq!(got[2].currency.as_deref(), Some("GBP"));
}

/// Each field may name an attribute, and a bare number there counts. A field the user names
/// that yields nothing on a card is read as a generic card's is (issue 52: a rule written for
/// one layout must not lose the field on the next), and the listing says which fields came so.
#[test]
fn generic_sub_selectors_may_name_an_attribute() {
    let page = "https://portal.example/search";
    let spec = CardSpec {
        title: Some(FieldSpec::attr("a[href]", "href")),
        rooms: Some(FieldSpec::attr(".keyfacts", "data-rooms")),
        area: Some(FieldSpec::attr(".keyfacts", "data-area")),
        image: Some(FieldSpec::attr(".photo", "style")),
        ..cards("li.card", "data-ref")
    };
    let got = extract_with(spec, page, "generic_fields.html");
    let de = by_id(&got, "de-4");
    assert_eq!(de.title.as_deref(), Some("/expose/de-4"));
    assert_eq!((de.rooms, de.area_m2), (Some(2.5), Some(61.0)));
    assert_eq!(
        de.image.as_deref(),
        Some("https://portal.example/bilder/de-4.jpg"),
        "no .photo in this card: its largest picture"
    );
    assert_eq!(de.fallback, [ListingField::Image]);
    let es = by_id(&got, "es-1");
    assert_eq!(
        (es.rooms, es.area_m2),
        (Some(3.0), Some(85.0)),
        "no data-rooms on this card: read from its text by their units"
    );
    assert!(
        es.fallback.contains(&ListingField::Rooms) && es.fallback.contains(&ListingField::Area),
        "{:?}",
        es.fallback
    );
    assert_eq!(
        by_id(&got, "en-3").image.as_deref(),
        Some("https://portal.example/photos/en-3.webp")
    );

    // An image sub-selector without an attribute takes its first match as a browser shows it
    // (here the logo: the user chose `img`); with `srcset`, the widest candidate.
    let spec = |image| CardSpec {
        image: Some(image),
        ..cards("li.card", "data-ref")
    };
    let got = extract_with(spec(FieldSpec::text("img")), page, "generic_fields.html");
    assert_eq!(
        by_id(&got, "es-1").image.as_deref(),
        Some("https://portal.example/static/agency-logo.png")
    );
    let got = extract_with(
        spec(FieldSpec::attr("img", "srcset")),
        page,
        "generic_fields.html",
    );
    assert_eq!(
        by_id(&got, "pt-2").image.as_deref(),
        Some("https://portal.example/fotos/pt-2-large.jpg")
    );
    // No srcset there: the card's largest picture instead, and it says so.
    let es = by_id(&got, "es-1");
    assert_eq!(
        es.image.as_deref(),
        Some("https://portal.example/fotos/es-1-principal.jpg")
    );
    assert_eq!(es.fallback, [ListingField::Image]);
}

#[test]
fn generic_link_regex() {
    let spec = ListingSpec::link(r"/listing/(\d+)");
    let p = profile(PORTAL, Some(spec));
    let got = listings(p.extract(&own("generic_links.html"), &Url::parse(PORTAL).unwrap()));
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["31", "32", "33"], "deduplicated, in page order");
    assert_eq!(
        got[0].title.as_deref(),
        Some("Flat thirty-one"),
        "text from the later link"
    );
    assert_eq!(
        got[2].url.as_deref(),
        Some("http://127.0.0.1:8080/listing/33#photos")
    );
}

#[test]
fn generic_json_ld_item_list() {
    let p = profile(PORTAL, Some(ListingSpec::json_ld()));
    let url = Url::parse("https://portal.example/search").unwrap();
    let got = listings(p.extract(&own("generic_jsonld.html"), &url));
    let ids: Vec<&str> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(
        ids,
        ["apt-41", "https://portal.example/listing/42", "SKU-43"]
    );
    let a = &got[0];
    assert_eq!(a.title.as_deref(), Some("Flat 41"));
    assert_eq!(
        (a.price, a.currency.as_deref()),
        (Some(1250.0), Some("EUR"))
    );
    assert_eq!((a.rooms, a.area_m2), (Some(2.0), Some(60.0)));
    assert_eq!(a.url.as_deref(), Some("https://portal.example/listing/41"));
    assert_eq!(a.image.as_deref(), Some("https://portal.example/p/41.jpg"));
}

#[test]
fn no_results_page_versus_unknown_layout() {
    let url = Url::parse(PORTAL).unwrap();
    let specs = [
        selector_spec(),
        ListingSpec::link(r"/listing/(\d+)"),
        ListingSpec::json_ld(),
    ];
    let body = own("no_results.html");
    for spec in &specs {
        let p = profile(PORTAL, Some(spec.clone()));
        assert_eq!(p.extract(&body, &url), Extraction::NoResults, "{spec:?}");
    }
    for site in [IDEALISTA, IS24] {
        assert_eq!(
            profile(site, None).extract(&body, &url),
            Extraction::NoResults
        );
    }
    // The same phrases only inside a script do not count.
    let scripted = b"<html><script>var t={empty:'No results'};</script><p>Welcome</p></html>";
    let p = profile(PORTAL, Some(selector_spec()));
    assert_eq!(p.extract(scripted, &url), Extraction::LayoutUnknown);
}

#[test]
fn garbage_and_invalid_utf8_never_panic() {
    let url = Url::parse(PORTAL).unwrap();
    let mut invalid = b"<article class=\"listing\" data-id=\"7\"><a href=\"/listing/7\"><h2 class=\"title\">Caf\xe9 \xff\xfe</h2></a><span class=\"price\">1.250 \x80/mes</span></article>".to_vec();
    invalid.extend_from_slice(b"<a href=\"/listing/\xc3\x28\">x</a>");
    let garbage: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let profiles = [
        profile(PORTAL, Some(selector_spec())),
        profile(PORTAL, Some(ListingSpec::link(r"/listing/(\d+)"))),
        profile(PORTAL, Some(ListingSpec::json_ld())),
        profile(IDEALISTA, None),
        profile(IS24, None),
        profile(FB, None),
    ];
    for p in &profiles {
        let _ = p.extract(&invalid, &url);
        assert_eq!(
            p.extract(&garbage, &url),
            Extraction::LayoutUnknown,
            "{}",
            p.name()
        );
        assert_eq!(
            p.extract(b"", &url),
            Extraction::LayoutUnknown,
            "{}",
            p.name()
        );
        let broken = b"<script>IS24.resultList = {\"searchResponseModel\": {\"resultlist.resultlist\": [1,2,";
        let _ = p.extract(broken, &url);
        let fb_broken = b"\"marketplace_search\":{\"feed_units\":{\"edges\":[{\"node\":";
        let _ = p.extract(fb_broken, &url);
    }
    let got = listings(profiles[0].extract(&invalid, &url));
    assert_eq!(got[0].id, "7");
    assert_eq!(got[0].price, Some(1250.0));
    assert!(got[0].title.as_deref().unwrap().starts_with("Caf"));
}

/// Issue 23 item 8: only http(s) links reach a listing (and so any channel), and a search
/// URL's own `user:password@` is not copied into the links made from it.
#[test]
fn listing_links_are_http_or_nothing() {
    let page = br#"<html><body>
        <article class="listing" data-id="1"><h2>A</h2><a href="javascript:alert(document.cookie)">x</a><img src="data:image/png;base64,AAAA"></article>
        <article class="listing" data-id="2"><h2>B</h2><a href="data:text/html,<script>alert(1)</script>">x</a></article>
        <article class="listing" data-id="3"><h2>C</h2><a href=" JavaScript:void(0)">x</a></article>
        <article class="listing" data-id="4"><h2>D</h2><a href="/flat/4">x</a><img src="/p/4.jpg"></article>
        <article class="listing" data-id="5"><h2>E</h2><a href="mailto:owner@example.com">x</a></article>
        </body></html>"#;
    let url = Url::parse("https://ana:hunter2@rentals.example/search").unwrap();
    let p = profile(
        url.as_str(),
        Some(ListingSpec::Selector(Box::new(CardSpec::new(
            "article.listing",
            Some("data-id"),
        )))),
    );
    let got = listings(p.extract(page, &url));
    assert_eq!(got.len(), 5);
    let links: Vec<_> = got
        .iter()
        .map(|l| (l.url.as_deref(), l.image.as_deref()))
        .collect();
    assert_eq!(
        links,
        vec![
            (None, None),
            (None, None),
            (None, None),
            (
                Some("https://rentals.example/flat/4"),
                Some("https://rentals.example/p/4.jpg")
            ),
            (None, None),
        ]
    );
    // Link mode: a `javascript:` href matching the pattern is a listing without a link.
    let p = profile(url.as_str(), Some(ListingSpec::link(r"(\d+)")));
    let got = listings(p.extract(
        br#"<a href="javascript:open(77)">x</a><a href="/flat/78">y</a>"#,
        &url,
    ));
    let urls: Vec<_> = got
        .iter()
        .map(|l| (l.id.as_str(), l.url.as_deref()))
        .collect();
    assert_eq!(
        urls,
        vec![
            ("77", None),
            ("78", Some("https://rentals.example/flat/78"))
        ]
    );
}

// ---- the next result page ------------------------------------------------------------------

fn next(p: &dyn SiteProfile, body: &[u8], url: &str, page: u32) -> Option<String> {
    p.next_page(body, &Url::parse(url).unwrap(), page)
        .map(String::from)
}

/// Idealista's pager ("Siguiente"): page 2 of the real page is `…/pagina-2.htm`, with the
/// search's own path; pages of our own hold the rules.
#[test]
#[cfg_attr(
    not(real_pages),
    ignore = "needs the real pages (NOTIFIO_REAL_PAGES=DIR)"
)]
fn idealista_real_next_page_is_the_pagers_siguiente() {
    let body = crate::real_pages::read("idealista_es_search.html");
    let url = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/";
    let p = profile(url, None);
    assert_eq!(
        next(p.as_ref(), &body, url, 1).as_deref(),
        Some("https://www.idealista.com/alquiler-viviendas/madrid-madrid/pagina-2.htm")
    );
}

#[test]
fn idealista_next_page_is_the_pagers_siguiente() {
    let url = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/";
    let p = profile(url, None);
    // A page of our own: the pager's "next" wins over a page-number link; the last page has
    // no "next"; a pager that points at the page itself is no next page.
    let page = |pager: &str| {
        format!("<html><body><div class=\"pagination\"><ul>{pager}</ul></div></body></html>")
    };
    let third = page(
        "<li><a href=\"/alquiler-viviendas/madrid-madrid/pagina-2.htm\">2</a></li><li class=\"selected\"><span>3</span></li>\
         <li><a href=\"/alquiler-viviendas/madrid-madrid/pagina-4.htm\">4</a></li>\
         <li class=\"next\"><a class=\"icon-arrow-right-after\" href=\"/alquiler-viviendas/madrid-madrid/pagina-4.htm?ordenado-por=precios-asc\"><span>Siguiente</span></a></li>",
    );
    let on = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/pagina-3.htm";
    assert_eq!(
        next(p.as_ref(), third.as_bytes(), on, 3).as_deref(),
        Some(
            "https://www.idealista.com/alquiler-viviendas/madrid-madrid/pagina-4.htm?ordenado-por=precios-asc"
        )
    );
    let last =
        page("<li><a href=\"pagina-3.htm\">3</a></li><li class=\"selected\"><span>4</span></li>");
    assert_eq!(next(p.as_ref(), last.as_bytes(), on, 4), None);
    let itself = page("<li class=\"next\"><a href=\"pagina-3.htm\">Siguiente</a></li>");
    assert_eq!(next(p.as_ref(), itself.as_bytes(), on, 3), None);
}

/// ImmobilienScout24 pages by `pagenumber`, web and app alike: the web page's embedded result
/// JSON and the app's answer say how many pages there are.
#[test]
fn is24_next_page_by_pagenumber_web_and_app() {
    let p = profile(IS24, None);
    // Our page-shaped result list says `numberOfPages: 2`, as the real one does.
    {
        let json = own("is24_resultlist.json");
        // `numberOfPages: 2`: page 1 has a next, page 2 does not.
        let web = "https://www.immobilienscout24.de/Suche/radius/wohnung-mieten?geocoordinates=52.51051;13.43068;5.0&price=-500.0";
        let second = next(p.as_ref(), &json, web, 1).unwrap();
        let second = Url::parse(&second).unwrap();
        let q: Vec<(String, String)> = second
            .query_pairs()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        assert_eq!(q.last(), Some(&("pagenumber".to_owned(), "2".to_owned())));
        assert!(
            q.iter().any(|(k, v)| k == "price" && v == "-500.0"),
            "{second}"
        );
        assert_eq!(second.path(), "/Suche/radius/wohnung-mieten");
        assert_eq!(next(p.as_ref(), &json, second.as_str(), 2), None);
    }
    // The app's answer: page 1 of 11, asked of the app endpoint; the next is the same request
    // with `pagenumber=2` (replaced, never repeated).
    let app = own("is24_app_list.json");
    let api = "http://127.0.0.1:9/search/list?searchType=region&geocodes=%2Fde%2Fberlin&sorting=-firstactivation";
    assert_eq!(
        next(p.as_ref(), &app, api, 1).as_deref(),
        Some(
            "http://127.0.0.1:9/search/list?searchType=region&geocodes=%2Fde%2Fberlin&sorting=-firstactivation&pagenumber=2"
        )
    );
    let on_2 = format!("{api}&pagenumber=2");
    let last = String::from_utf8(app.clone())
        .unwrap()
        .replace("\"pageNumber\": 1", "\"pageNumber\": 11");
    assert_eq!(next(p.as_ref(), last.as_bytes(), &on_2, 11), None);
    let third = next(
        p.as_ref(),
        &String::from_utf8(app)
            .unwrap()
            .replace("\"pageNumber\": 1", "\"pageNumber\": 2")
            .into_bytes(),
        &on_2,
        2,
    )
    .unwrap();
    assert_eq!(third.matches("pagenumber=").count(), 1, "{third}");
    assert!(third.ends_with("&pagenumber=3"), "{third}");
    // An older HTML page: its pager links to `pagenumber=2` (not `…=20`).
    let cards = b"<div data-obid=\"1\"><a href=\"/expose/1\">x</a></div><a href=\"/Suche/de/berlin/berlin/wohnung-mieten?pagenumber=2\">2</a>";
    let web = "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten";
    assert_eq!(
        next(p.as_ref(), cards, web, 1).as_deref(),
        Some("https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten?pagenumber=2")
    );
    let only_20 = b"<a href=\"?pagenumber=20\">20</a>";
    assert_eq!(next(p.as_ref(), only_20, web, 1), None);
}

/// A generic site's next page: `rel="next"` (a `<link>` or an `<a>`) by default, the
/// `listing.next` selector when given (the link, or an element around it); never a
/// `javascript:` link, never the page itself.
#[test]
fn generic_next_page_by_rel_next_or_the_next_selector() {
    let cards =
        || ListingSpec::Selector(Box::new(CardSpec::new("article.listing", Some("data-id"))));
    let p = profile(PORTAL, Some(cards()));
    let url = "http://127.0.0.1:8080/search/flats";
    let head = b"<html><head><link rel=\"prev\" href=\"/p0\"><link rel=\"next\" href=\"/search/flats?page=2\"></head><body></body></html>";
    assert_eq!(
        next(p.as_ref(), head, url, 1).as_deref(),
        Some("http://127.0.0.1:8080/search/flats?page=2")
    );
    let anchor = b"<nav><a rel=\"nofollow next\" href=\"?page=3&amp;sort=new\">Next</a></nav>";
    assert_eq!(
        next(p.as_ref(), anchor, url, 2).as_deref(),
        Some("http://127.0.0.1:8080/search/flats?page=3&sort=new")
    );
    let none = b"<nav><a class=\"next-page\" href=\"?page=2\">Next</a></nav>";
    assert_eq!(
        next(p.as_ref(), none, url, 1),
        None,
        "no rel=next, no selector"
    );
    let script = b"<a rel=\"next\" href=\"javascript:more()\">Next</a>";
    assert_eq!(next(p.as_ref(), script, url, 1), None);
    let itself = b"<a rel=\"next\" href=\"/search/flats\">Next</a>";
    assert_eq!(next(p.as_ref(), itself, url, 1), None);

    let with_next = |next: &str| {
        let mut card = CardSpec::new("article.listing", Some("data-id"));
        card.next = Some(next.to_owned());
        profile(PORTAL, Some(ListingSpec::Selector(Box::new(card))))
    };
    // The selector names the link itself, or the element holding it.
    let page = b"<a rel=\"next\" href=\"/elsewhere\">x</a><ul class=\"pager\"><li class=\"nxt\"><a href=\"/search/flats/pagina-2.htm\">&gt;</a></li></ul>";
    for sel in ["li.nxt", "ul.pager li.nxt a"] {
        assert_eq!(
            next(with_next(sel).as_ref(), page, url, 1).as_deref(),
            Some("http://127.0.0.1:8080/search/flats/pagina-2.htm"),
            "{sel}"
        );
    }
    assert_eq!(
        next(with_next("a.missing").as_ref(), page, url, 1),
        None,
        "the selector, not rel=next"
    );
    // The link and JSON-LD forms take `next` too.
    let link = ListingSpec::Link {
        link: r"/listing/(\d+)".into(),
        next: Some("li.nxt".into()),
    };
    assert_eq!(
        next(profile(PORTAL, Some(link)).as_ref(), page, url, 1).as_deref(),
        Some("http://127.0.0.1:8080/search/flats/pagina-2.htm")
    );
    let json_ld = ListingSpec::JsonLd {
        next: Some("li.nxt".into()),
    };
    assert!(next(profile(PORTAL, Some(json_ld)).as_ref(), page, url, 1).is_some());
}

/// Facebook Marketplace has no pages: it loads more as one scrolls.
#[test]
fn facebook_reads_one_page() {
    let url = "https://www.facebook.com/marketplace/madrid/propertyrentals";
    let p = profile(url, None);
    assert!(!p.paged());
    let body = b"<a rel=\"next\" href=\"/marketplace/madrid/propertyrentals?page=2\">next</a>";
    assert_eq!(next(p.as_ref(), body, url, 1), None);
    assert!(profile(PORTAL, Some(ListingSpec::json_ld())).paged());
}
