//! Extraction time per page (criterion). Targets: ≤ 2 ms median for the 774 KB Idealista page,
//! ≤ 0.7 ms per 300 KB generic page, ≤ 5 ms for a 2 MB Facebook-shaped page; the portals read
//! by profile files on their real page excerpts. scraper (a DOM parser) is measured on the
//! Idealista page for comparison. Figures: docs/benchmarks/extract.md.

use criterion::{Criterion, criterion_group, criterion_main};
use notifio::extract::{Catalog, Extraction, ProfileCache, SiteProfile, profile_for};
use notifio::listing::{CardSpec, ListingSpec};
use notifio_policy::SiteKey;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use url::Url;

mod pages;
use pages::{facebook_page, generic_page};

#[path = "../tests/support/real_pages.rs"]
mod real_pages;

fn profile(url: &str, spec: Option<ListingSpec>) -> Arc<dyn SiteProfile> {
    profile_for(&SiteKey::from_url(url).unwrap(), None, spec.as_ref()).unwrap()
}

fn count(e: &Extraction) -> usize {
    match e {
        Extraction::Listings(l) => l.len(),
        _ => 0,
    }
}

fn benches(c: &mut Criterion) {
    let idealista_url = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/";
    if let Some(page) = real_pages::read_or_say("idealista_es_search.html", "Idealista") {
        let p = profile(idealista_url, None);
        let url = Url::parse(idealista_url).unwrap();
        assert_eq!(count(&p.extract(&page, &url)), 30);
        let mut g = c.benchmark_group(format!("idealista_{}KB", page.len() / 1000));
        g.bench_function("profile_lol_html", |b| {
            b.iter(|| black_box(p.extract(black_box(&page), &url)));
        });
        // The floor: lol_html only counting the cards (what the lead measured at 0.67 ms).
        g.bench_function("lol_html_select_only", |b| {
            b.iter(|| {
                let mut n = 0usize;
                let mut rw = lol_html::HtmlRewriter::new(
                    lol_html::Settings {
                        element_content_handlers: vec![lol_html::element!(
                            "article.item[data-element-id]",
                            |_el| {
                                n += 1;
                                Ok(())
                            }
                        )],
                        ..lol_html::Settings::new()
                    },
                    |_: &[u8]| {},
                );
                rw.write(black_box(&page)).unwrap();
                rw.end().unwrap();
                black_box(n)
            });
        });
        // The DOM way, for comparison: parse the document, select the same cards and fields.
        let text = String::from_utf8_lossy(&page).into_owned();
        let card = scraper::Selector::parse("article.item[data-element-id]").unwrap();
        let link = scraper::Selector::parse("a.item-link").unwrap();
        let price = scraper::Selector::parse(".item-price").unwrap();
        let detail = scraper::Selector::parse(".item-detail").unwrap();
        g.bench_function("scraper_dom", |b| {
            b.iter(|| {
                let doc = scraper::Html::parse_document(black_box(&text));
                let mut n = 0usize;
                for c in doc.select(&card) {
                    let Some(a) = c.select(&link).next() else {
                        continue;
                    };
                    let href = a.value().attr("href").unwrap_or_default().len();
                    let p: String = c.select(&price).flat_map(|p| p.text()).collect();
                    let d: usize = c.select(&detail).map(|d| d.text().count()).sum();
                    n += href + p.len() + d;
                }
                black_box(n)
            });
        });
        g.finish();
    }

    if let Some(json) =
        real_pages::read_or_say("immoscout24_resultlist_2020.json", "ImmobilienScout24")
    {
        let is24 = "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten";
        let mut page = b"<html><head><script>IS24.resultList = ".to_vec();
        page.extend_from_slice(&json);
        page.extend_from_slice(b";</script></head><body></body></html>");
        let p = profile(is24, None);
        let url = Url::parse(is24).unwrap();
        assert_eq!(count(&p.extract(&page, &url)), 20);
        c.bench_function(&format!("immoscout24_json_{}KB", page.len() / 1000), |b| {
            b.iter(|| black_box(p.extract(black_box(&page), &url)));
        });
    }

    let portal = "http://127.0.0.1:8080/search";
    let url = Url::parse(portal).unwrap();
    for (label, page, want) in [
        ("generic", generic_page(300_000, 40), 40),
        // A stress case: the same size made only of cards (about 370).
        ("generic_dense", generic_page(300_000, 370), 370),
    ] {
        let mut g = c.benchmark_group(format!("{label}_{}KB", page.len() / 1000));
        for (name, spec) in [
            (
                "selector",
                ListingSpec::Selector(Box::new(CardSpec::new("article.listing", Some("data-id")))),
            ),
            ("link", ListingSpec::link(r"/listing/(\d+)")),
            ("json_ld_absent", ListingSpec::json_ld()),
        ] {
            let p = profile(portal, Some(spec));
            let n = count(&p.extract(&page, &url));
            assert!(n == want || name == "json_ld_absent", "{label}/{name}: {n}");
            g.bench_function(name, |b| {
                b.iter(|| black_box(p.extract(black_box(&page), &url)));
            });
        }
        g.bench_function("lol_html_select_only", |b| {
            b.iter(|| {
                let mut n = 0usize;
                let mut rw = lol_html::HtmlRewriter::new(
                    lol_html::Settings {
                        element_content_handlers: vec![lol_html::element!(
                            "article.listing",
                            |_el| {
                                n += 1;
                                Ok(())
                            }
                        )],
                        ..lol_html::Settings::new()
                    },
                    |_: &[u8]| {},
                );
                rw.write(black_box(&page)).unwrap();
                rw.end().unwrap();
                black_box(n)
            });
        });
        g.finish();
    }

    // The portals read by built-in profile files, each on its real page excerpt
    // (tests/fixtures/sites/, a few cards each: the per-card cost).
    let sites = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sites"));
    let catalog = Catalog::built_in();
    let mut g = c.benchmark_group("portal_files");
    for entry in catalog.entries().iter().filter(|e| e.code.is_none()) {
        let Ok(page) = std::fs::read(sites.join(format!("{}.html", entry.name))) else {
            continue;
        };
        let url = Url::parse(&format!("https://www.{}/search", entry.hosts[0])).unwrap();
        let site = SiteKey::from_url(url.as_str()).unwrap();
        let p = ProfileCache::new(catalog.clone())
            .profile_for(&site, None, None)
            .unwrap();
        assert!(count(&p.extract(&page, &url)) > 0, "{}", entry.name);
        let label = format!("{}_{}KB", entry.name, page.len() / 1000);
        g.bench_function(label, |b| {
            b.iter(|| black_box(p.extract(black_box(&page), &url)));
        });
    }
    g.finish();

    let fb = "https://www.facebook.com/marketplace/madrid/propertyrentals";
    let page = facebook_page(2_000_000);
    let p = profile(fb, None);
    let url = Url::parse(fb).unwrap();
    assert_eq!(count(&p.extract(&page, &url)), 20);
    c.bench_function(&format!("facebook_{}KB", page.len() / 1000), |b| {
        b.iter(|| black_box(p.extract(black_box(&page), &url)));
    });
}

criterion_group!(extract, benches);
criterion_main!(extract);
