//! Shared checks for Notifio's fuzz targets (docs/fuzzing.md).
//!
//! Each target feeds remote or user-controlled input to one parser; the checks here are the
//! properties every extractor must keep on *any* page, so the targets stay one-liners and the
//! regression tests in `crates/*/tests/it/fuzz_regressions.rs` assert the same thing.

use notifio::extract::{Extraction, SiteProfile};
use notifio::listing::{CardSpec, FieldSpec, ListingSpec};

/// The page URLs the extractors are fed (the same the integration tests use).
pub const IDEALISTA: &str = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/";
/// ImmobilienScout24 search URL.
pub const IS24: &str = "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten";
/// Facebook Marketplace search URL.
pub const FB: &str = "https://www.facebook.com/marketplace/madrid/propertyrentals";
/// A generic site (the fake portal).
pub const PORTAL: &str = "http://127.0.0.1:8080/search/madrid?max=1500";

/// Runs `profile.extract` on `body` and asserts every listing has a non-empty id; then
/// `profile.next_page`, which must be an http(s) URL other than the page itself, if any.
pub fn check_extract(profile: &dyn SiteProfile, body: &[u8], page_url: &str) {
    let url = url::Url::parse(page_url).expect("static URL");
    if let Extraction::Listings(listings) = profile.extract(body, &url) {
        for l in &listings {
            assert!(!l.id.trim().is_empty(), "listing with an empty id: {l:?}");
        }
    }
    if let Some(next) = profile.next_page(body, &url, 1) {
        assert!(matches!(next.scheme(), "http" | "https"), "next page {next}");
        assert_ne!(next, url, "the next page is not the page itself");
    }
}

/// The generic specs, chosen by the first input byte: selector with id attribute, selector
/// with first-link id, link regex, JSON-LD.
pub fn generic_spec(selector: u8) -> ListingSpec {
    match selector % 4 {
        0 => ListingSpec::Selector(Box::new(CardSpec::new("article.listing", Some("data-id")))),
        1 => ListingSpec::Selector(Box::new(CardSpec {
            title: Some(FieldSpec::text("h2")),
            price: Some(FieldSpec::text(".price")),
            rooms: Some(FieldSpec::text(".rooms")),
            image: Some(FieldSpec::attr("img", "data-src")),
            next: Some("li.next".into()),
            ..CardSpec::new("article.listing", None)
        })),
        2 => ListingSpec::link(r"/listing/(\d+)"),
        _ => ListingSpec::json_ld(),
    }
}
