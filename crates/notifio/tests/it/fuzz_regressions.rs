//! Edge inputs from fuzzing the cookies.txt parser, the config parser and the extractors
//! (`fuzz/`, docs/fuzzing.md), kept as ordinary tests so `cargo test` re-checks them without
//! the fuzzing toolchain. Each pins down an answer, not only the absence of a panic; the
//! extractor cases assert the fuzz targets' own property: no listing has a blank id.

use notifio::config::{Environment, parse_in};
use notifio::extract::{Extraction, Facebook, Generic, Idealista, ImmoScout24, SiteProfile};
use notifio::fetch::cookies::parse_cookies_txt;
use notifio::listing::{CardSpec, Listing, ListingSpec};
use std::path::{Path, PathBuf};
use url::Url;

const IDEALISTA: &str = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/";
const IS24: &str = "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten";
const FB: &str = "https://www.facebook.com/marketplace/madrid/propertyrentals";
const PORTAL: &str = "http://127.0.0.1:8080/search/madrid?max=1500";

/// Runs an extractor and checks the fuzz targets' properties on the way (with the next page's).
fn extract(profile: &dyn SiteProfile, body: &[u8], page_url: &str) -> Extraction {
    let url = Url::parse(page_url).unwrap();
    let got = profile.extract(body, &url);
    if let Extraction::Listings(ls) = &got {
        for l in ls {
            assert!(
                !l.id.trim().is_empty(),
                "blank id from {:?}: {l:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
    if let Some(next) = profile.next_page(body, &url, 1) {
        assert!(matches!(next.scheme(), "http" | "https"), "{next}");
        assert_ne!(next, url);
    }
    got
}

fn ids(e: &Extraction) -> Vec<&str> {
    match e {
        Extraction::Listings(ls) => ls.iter().map(|l: &Listing| l.id.as_str()).collect(),
        _ => Vec::new(),
    }
}

fn generic(spec: ListingSpec) -> Generic {
    Generic::new(&spec).unwrap()
}

fn cards_by_attr() -> Generic {
    generic(ListingSpec::Selector(Box::new(CardSpec::new(
        "article.listing",
        Some("data-id"),
    ))))
}

// ---- cookies.txt ----------------------------------------------------------------------------

#[test]
fn cookies_degenerate_lines() {
    // A bare `#HttpOnly_`, a dots-only domain, a non-finite expiry, a control character in a
    // value: errors naming the line.
    for (text, line) in [
        ("\n#HttpOnly_", 2),
        ("\t\t\t\t\t\tx", 1),
        ("...\tTRUE\t/\tFALSE\t0\tn\tv", 1),
        ("a.b\tTRUE\t/\tFALSE\tNaN\tn\tv", 1),
        ("a.b\tTRUE\t/\tFALSE\t1e400\tn\tv", 1),
        ("a.b\tTRUE\t/\tFALSE\tinf\tn\tv", 1),
        ("a.b\tTRUE\t/\tFALSE\t0\tn\tsecret\u{7f}", 1),
    ] {
        let err = parse_cookies_txt(text).unwrap_err().to_string();
        assert!(err.starts_with(&format!("line {line}:")), "{text:?}: {err}");
        // The message never echoes a cookie value.
        assert!(!err.contains("secret"), "{err}");
    }
    // Blank lines of any kind are skipped, including a line of six tabs (seven empty fields).
    assert!(
        parse_cookies_txt("\r\n\r\n \t\n\t\t\t\t\t\t\n")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn cookies_huge_expiry_saturates_and_stays_fresh() {
    let jar = parse_cookies_txt("a.example\tFALSE\t/\tTRUE\t1e30\tsid\tv").unwrap();
    let url = Url::parse("https://a.example/x").unwrap();
    assert_eq!(jar.header_for(&url).as_deref(), Some("sid=v"));
}

#[test]
fn cookies_domain_longer_than_host_and_multibyte_paths() {
    let jar = parse_cookies_txt(
        "www.a.example\tTRUE\t/\tTRUE\t0\tx\t1\na.example\tTRUE\t/ü\tTRUE\t0\ty\t2",
    )
    .unwrap();
    // Host shorter than the cookie domain: no match, no out-of-range index.
    assert_eq!(
        jar.header_for(&Url::parse("https://a.example/").unwrap()),
        None
    );
    // The URL path is percent-encoded, the cookie path is not: no match, no slicing panic.
    assert_eq!(
        jar.header_for(&Url::parse("https://a.example/ü/").unwrap()),
        None
    );
}

// ---- config -------------------------------------------------------------------------------

fn env() -> Environment {
    Environment {
        home: Some(PathBuf::from("/home/fuzz")),
        data_dir: Some(PathBuf::from("/home/fuzz/.local/share/notifio")),
        config_dir: None,
        dashboard_token: None,
        browser: None,
    }
}

fn config_err(text: &str) -> String {
    parse_in(text, Path::new("/fuzz/notifio.toml"), &env())
        .unwrap_err()
        .to_string()
}

#[test]
fn config_errors_after_multibyte_text_point_at_a_character() {
    // The error span is a byte offset; the column must count characters.
    let err =
        config_err("# ü\n[[search]]\nurl = \"https://www.idealista.com/\"\nintervall = \"1m\"\n");
    assert!(err.contains("notifio.toml:4:1"), "{err}");
    let err = config_err("ü = 1");
    assert!(err.contains(":1:1"), "{err}");
}

#[test]
fn config_hostile_values_are_errors() {
    for text in [
        "",
        "\u{0}",
        "[[search]]\nurl = \"http://[::1\"\n",
        "[[search]]\nurl = \"https://www.idealista.com/\"\ninterval = \"99999999999999999999h\"\n",
        "[[search]]\nurl = \"https://www.idealista.com/\"\ninterval = \"1.5.5s\"\n",
        "[[search]]\nurl = \"https://www.idealista.com/\"\ninterval = \"nanms\"\n",
    ] {
        let err = config_err(text);
        assert!(err.contains("notifio.toml"), "{text:?}: {err}");
    }
}

// ---- extractors ----------------------------------------------------------------------------

#[test]
fn extractors_on_empty_and_non_html_bytes() {
    let junk: [&[u8]; 5] = [
        b"",
        b"\xff\xfe\x00<",
        b"<article",
        b"<script>",
        b"\"searchResponseModel\":",
    ];
    for body in junk {
        for (p, url) in [
            (&Idealista as &dyn SiteProfile, IDEALISTA),
            (&ImmoScout24, IS24),
            (&Facebook, FB),
            (&cards_by_attr(), PORTAL),
        ] {
            assert_eq!(
                extract(p, body, url),
                Extraction::LayoutUnknown,
                "{}: {body:?}",
                p.name()
            );
        }
    }
}

#[test]
fn blank_ids_after_entity_decoding_are_not_ids() {
    // `data-element-id="&#32;"` is a space once decoded: the card falls back to its link.
    let body = br#"<article class="item" data-element-id="&#32;"><a class="item-link" href="/inmueble/7/">x</a></article>"#;
    assert_eq!(ids(&extract(&Idealista, body, IDEALISTA)), ["7"]);
    let body = br#"<article class="listing" data-id="&nbsp;"><a href="/listing/1">x</a></article>
<article class="listing" data-id=" 2 "><a href="/listing/2">y</a></article>"#;
    assert_eq!(ids(&extract(&cards_by_attr(), body, PORTAL)), ["2"]);
}

#[test]
fn blank_ids_in_embedded_json_are_skipped() {
    // ImmobilienScout24's result JSON with a whitespace `@id`: that entry is skipped, a padded
    // id is trimmed.
    let body = br#"{"searchResponseModel":{"resultlist.resultlist":{"resultlistEntries":[{"resultlistEntry":[
        {"@id":" ","resultlist.realEstate":{"@id":" ","title":"blank"}},
        {"@id":" 42 ","resultlist.realEstate":{"title":"padded"}}]}]}}}"#;
    assert_eq!(ids(&extract(&ImmoScout24, body, IS24)), ["42"]);
}
