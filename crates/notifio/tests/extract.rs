//! Site profiles against real pages (`../shared/fixtures/`) and small synthetic ones
//! (`tests/fixtures/`): ids, fields, block pages, logged-out pages, and pages that are not
//! result lists at all.

use notifio::extract::{Extraction, SiteProfile, profile_for};
use notifio::listing::{Listing, ListingSpec};
use notifio_policy::{Outcome, ResponseFacts, SiteKey, classify};
use regex::Regex;
use std::collections::BTreeSet;
use std::sync::Arc;
use url::Url;

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/fixtures/");
const OWN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");

/// A real page from the shared fixtures; `None` (skip) when absent, except under `CI=true`.
fn shared(name: &str) -> Option<Vec<u8>> {
    match std::fs::read(format!("{SHARED}{name}")) {
        Ok(bytes) => Some(bytes),
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("shared fixture {name} missing under CI: {e}")
        }
        Err(e) => {
            eprintln!("skipping: shared fixture {name} not found ({e})");
            None
        }
    }
}

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
fn idealista_real_page_yields_its_30_cards() {
    let Some(body) = shared("idealista_es_search.html") else {
        return;
    };
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
fn idealista_real_page_is_not_a_challenge() {
    let Some(body) = shared("idealista_es_search.html") else {
        return;
    };
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

#[test]
fn is24_result_json_embedded_and_bare() {
    let Some(json) = shared("immoscout24_resultlist_2020.json") else {
        return;
    };
    let expected = is24_expected(&json);
    assert_eq!(expected.len(), 20);
    let p = profile(IS24, None);
    assert_eq!(p.name(), "immoscout24");
    let url = Url::parse(IS24).unwrap();

    let mut page =
        b"<!DOCTYPE html><html><head><script>\nvar IS24 = IS24 || {};\nIS24.resultList = ".to_vec();
    page.extend_from_slice(&json);
    page.extend_from_slice(
        b";\n</script></head><body><div id=\"resultListItems\"></div></body></html>",
    );

    for body in [page.as_slice(), json.as_slice()] {
        let got = listings(p.extract(body, &url));
        let ids: Vec<String> = got.iter().map(|l| l.id.clone()).collect();
        assert_eq!(ids, expected);
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

#[test]
fn is24_block_page_is_a_challenge_at_200_and_405() {
    let Some(body) = shared("immoscout24_block_geetest.html") else {
        return;
    };
    let p = profile(IS24, None);
    for status in [200, 405] {
        let f = facts(status, IS24, IS24, &body, false);
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
    let f = facts(200, IS24, IS24, &body, false);
    assert_eq!(classify(&f, &only_site), Outcome::Challenge);
    assert_eq!(
        p.extract(&body, &Url::parse(IS24).unwrap()),
        Extraction::LayoutUnknown
    );
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
    ListingSpec::Selector {
        selector: "article.listing".into(),
        id_attr: Some("data-id".into()),
        title: None,
        price: None,
    }
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
    let spec = ListingSpec::Selector {
        selector: "article.listing".into(),
        id_attr: None,
        title: Some("h2".into()),
        price: Some(".price".into()),
    };
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

#[test]
fn generic_link_regex() {
    let spec = ListingSpec::Link {
        link: r"/listing/(\d+)".into(),
    };
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
    let p = profile(PORTAL, Some(ListingSpec::JsonLd));
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
        ListingSpec::Link {
            link: r"/listing/(\d+)".into(),
        },
        ListingSpec::JsonLd,
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
        profile(
            PORTAL,
            Some(ListingSpec::Link {
                link: r"/listing/(\d+)".into(),
            }),
        ),
        profile(PORTAL, Some(ListingSpec::JsonLd)),
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
        Some(ListingSpec::Selector {
            selector: "article.listing".into(),
            id_attr: Some("data-id".into()),
            title: None,
            price: None,
        }),
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
    let p = profile(
        url.as_str(),
        Some(ListingSpec::Link {
            link: r"(\d+)".into(),
        }),
    );
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
