//! Reading as the real web moves (issue 52): every built-in profile on every real saved page of
//! its portal, older and newer layouts alike (`tests/fixtures/sites/`), and auto mode on real
//! pages of portals that have no profile (`tests/fixtures/auto/`), each scored field by field
//! against what a person reads on the cards (`tests/support/reading.rs`); and, as a user meets
//! them, a search with only a URL, a profile that misses a field, and a profile whose cards
//! vanished. The tables these tests print are the figures in docs/BENCHMARKS.md.

#[path = "../support/reading.rs"]
mod scoring;

use crate::profiles::notifio;
use notifio::extract::{Catalog, Extraction, ProfileCache, read_page};
use notifio_policy::SiteKey;
use scoring::Score;
use serde_json::Value;
use std::path::Path;

fn fixtures(dir: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
}

/// Reads every page of `dir` with the profile `forced` (or its portal's), prints the table and
/// returns the pages' scores, the total, and the pages read as `layout_unknown`.
fn read_all(dir: &str, forced: Option<&str>) -> (Vec<Score>, Score, Vec<String>) {
    let pages = scoring::pages(&fixtures(dir));
    let mut total = Score {
        page: "all".into(),
        ..Score::default()
    };
    let mut scores = Vec::new();
    let mut unknown = Vec::new();
    println!("{}", Score::header());
    for page in &pages {
        let site = SiteKey::from_url(page.base.as_str()).unwrap();
        let profile = ProfileCache::new(Catalog::built_in())
            .profile_for(&site, forced, None)
            .unwrap();
        let read = read_page(profile.as_ref(), &page.html, &page.base, None);
        let got = match read.extraction {
            Extraction::Listings(l) => l,
            other => {
                unknown.push(format!("{}: {other:?}", page.name));
                Vec::new()
            }
        };
        let s = scoring::score(page, &got);
        println!("{}", s.row());
        total.add(&s);
        scores.push(s);
    }
    println!("{}", total.row());
    (scores, total, unknown)
}

/// The bar for the profiles: on every real page in the repository, every card and
/// none invented, and at least 98 % of the titles, prices, rooms and areas the cards show read
/// right (a value read where a card shows none counts as wrong).
#[test]
fn every_profile_reads_every_real_page_of_its_portal() {
    let (scores, total, unknown) = read_all("sites", None);
    assert!(scores.len() >= 11, "{} pages", scores.len());
    assert!(unknown.is_empty(), "{unknown:?}");
    for s in &scores {
        assert_eq!(
            (s.matched, s.invented),
            (s.expected, 0),
            "{}: every card, none invented: {:#?}",
            s.page,
            s.misses
        );
    }
    let fields = [total.title, total.price, total.rooms, total.area];
    let right: usize = fields.iter().map(|f| f.right).sum();
    let shown: usize = fields.iter().map(|f| f.shown + f.invented).sum();
    let share = right as f64 / shown as f64;
    let misses: Vec<&String> = scores.iter().flat_map(|s| &s.misses).collect();
    assert!(
        share >= 0.98,
        "fields read right: {right} of {shown} ({:.1} %): {misses:#?}",
        share * 100.0
    );
}

/// The bar for auto mode, with no profile and no selector, on real pages of portals
/// without a profile: at least 95 % of the cards found, at most 2 % of its listings invented,
/// at least 90 % of the prices shown read right, and no page with cards `layout_unknown`.
#[test]
fn auto_mode_reads_the_real_pages_of_portals_without_a_profile() {
    let (scores, total, unknown) = read_all("auto", Some("auto"));
    let portals: std::collections::BTreeSet<&str> = scores
        .iter()
        .map(|s| s.page.split('-').next().unwrap_or(&s.page))
        .collect();
    assert!(portals.len() >= 10, "portals: {portals:?}");
    assert!(
        unknown.is_empty(),
        "pages with cards read as nothing: {unknown:?}"
    );
    let misses: Vec<&String> = scores.iter().flat_map(|s| &s.misses).collect();
    assert!(
        total.matched * 100 >= total.expected * 95,
        "cards found: {} of {}: {misses:#?}",
        total.matched,
        total.expected
    );
    assert!(
        total.invented * 100 <= total.found * 2,
        "invented: {} of {}: {misses:#?}",
        total.invented,
        total.found
    );
    assert!(
        total.price.right * 100 >= total.price.shown * 90 && total.price.invented == 0,
        "prices: {:?}: {misses:#?}",
        total.price
    );
}

// ---------------------------------------------------------------- as a user meets it

/// The one line `check --json` printed, as JSON, after asserting it ran.
fn checked(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().next().unwrap_or_default()).unwrap()
}

fn ids(line: &Value) -> Vec<String> {
    let mut ids: Vec<String> = line["listings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["url"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// The fake portal and a config whose one search on it ends its table with `extra`.
struct Setup {
    _rt: tokio::runtime::Runtime,
    portal: fake_portal::Portal,
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
}

fn setup(extra: &str) -> Setup {
    let (_rt, portal, dir, config) = crate::profiles::portal_and_config(extra);
    Setup {
        _rt,
        portal,
        dir,
        config,
    }
}

/// A search with only a URL on a site with no profile: read by auto mode, which says so and
/// names the structure it chose; pasted into `listing`, that selector reads the same cards.
#[test]
fn a_search_with_only_a_url_is_read_by_its_structure_and_can_be_pinned() {
    let s = setup("");
    let line = checked(&notifio(&["check", "--json", "--fresh"], &s.config));
    assert_eq!(line["outcome"], "ok", "{line}");
    assert_eq!(line["read"], "auto", "{line}");
    let structure = line["structure"].as_str().unwrap().to_owned();
    assert_eq!(structure, "section.results > article.listing");
    let wanted: Vec<String> = {
        let mut v: Vec<String> = s
            .portal
            .listings("p", "s")
            .iter()
            .map(|l| l.url.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids(&line), wanted, "every card, none more");
    let first = &line["listings"][0];
    assert!(
        first["price"].as_f64().is_some() && first["title"].is_string(),
        "{first}"
    );
    // Pinned: the same cards through the selector.
    let text = std::fs::read_to_string(&s.config).unwrap();
    std::fs::write(
        &s.config,
        format!("{text}listing = {{ selector = {structure:?} }}\n"),
    )
    .unwrap();
    let pinned = checked(&notifio(&["check", "--json", "--fresh"], &s.config));
    assert_eq!(pinned["read"], "profile", "{pinned}");
    assert_eq!(ids(&pinned), wanted);
    assert!(s.dir.path().exists());
}

fn profile_file(host: &str, listing: &str) -> String {
    format!("name = \"p\"\nhosts = [\"{host}\"]\n\n[listing]\n{listing}")
}

fn host(s: &Setup) -> String {
    crate::profiles::host(&s.portal)
}

/// A profile whose price rule no longer finds the price (the portal moved it): the price is
/// read from the card as a generic card's is, and `check --json` says which fields came so.
#[test]
fn a_field_the_profile_misses_is_read_from_the_card_and_said_so() {
    let s = setup("");
    std::fs::write(
        s.dir.path().join("sites/p.toml"),
        profile_file(
            &host(&s),
            "selector = \"article.listing\"\nid_attr = \"data-id\"\ntitle = \"h2\"\nprice = \".old-price-class\"\n",
        ),
    )
    .unwrap();
    let line = checked(&notifio(&["check", "--json", "--fresh"], &s.config));
    assert_eq!(line["read"], "profile", "{line}");
    let listings = line["listings"].as_array().unwrap();
    let portal = s.portal.listings("p", "s");
    assert_eq!(listings.len(), portal.len());
    for l in listings {
        let id = l["id"].as_str().unwrap();
        let want = portal.iter().find(|p| p.id == id).unwrap();
        assert_eq!(l["price"].as_f64(), Some(f64::from(want.price)), "{l}");
        assert_eq!(l["fallback"], serde_json::json!(["price"]), "{l}");
    }
}

/// A profile whose card selector finds nothing on a page that is a result page: auto mode
/// reads it, and the search says so (`auto_fallback`).
#[test]
fn a_profile_whose_cards_vanished_falls_back_to_auto_mode() {
    let s = setup("");
    std::fs::write(
        s.dir.path().join("sites/p.toml"),
        profile_file(&host(&s), "selector = \"div.gone-card-class\"\n"),
    )
    .unwrap();
    let line = checked(&notifio(&["check", "--json", "--fresh"], &s.config));
    assert_eq!(line["outcome"], "ok", "{line}");
    assert_eq!(line["read"], "auto_fallback", "{line}");
    assert_eq!(
        line["listings"].as_array().unwrap().len(),
        s.portal.listings("p", "s").len()
    );
}
