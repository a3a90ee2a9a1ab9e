//! The reading benchmark (issue 52): on every real page in the repository, what each way of
//! reading gets right (cards expected / found / invented; titles, prices, rooms and areas
//! right of those the cards show, `+n` for values read where a card shows none), and what it
//! costs (median of a few reads, in the release build): the portals' profiles on their pages,
//! auto mode on the pages of portals without a profile, auto mode on the profiled portals'
//! pages beside their profiles (its cost as a multiple of theirs), and auto mode on a 1 MB page.
//! Figures: docs/BENCHMARKS.md, docs/benchmarks/extract.md.
//!
//! `cargo bench -p notifio --bench reading` (about a minute).

#[path = "../tests/support/reading.rs"]
mod scoring;

#[path = "../tests/support/real_pages.rs"]
mod real_pages;

use notifio::extract::{Catalog, Extraction, ProfileCache, SiteProfile, read_page};
use notifio_policy::SiteKey;
use scoring::Score;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reads of one page timed; the median is reported.
const RUNS: usize = 15;

fn profile(url: &url::Url, forced: Option<&str>) -> Arc<dyn SiteProfile> {
    ProfileCache::new(Catalog::built_in())
        .profile_for(&SiteKey::from_url(url.as_str()).unwrap(), forced, None)
        .unwrap()
}

/// The median time of reading `page` with `profile`, and what the last read found.
fn timed(profile: &dyn SiteProfile, page: &[u8], url: &url::Url) -> (Duration, Extraction) {
    let mut times = Vec::with_capacity(RUNS);
    let mut last = Extraction::LayoutUnknown;
    for _ in 0..RUNS {
        let started = Instant::now();
        last = std::hint::black_box(read_page(profile, page, url, None)).extraction;
        times.push(started.elapsed());
    }
    times.sort();
    (times[RUNS / 2], last)
}

fn listings(e: Extraction) -> Vec<notifio::listing::Listing> {
    match e {
        Extraction::Listings(l) => l,
        _ => Vec::new(),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Scores every page of `dir` read by `forced` (or its portal's profile): the table, and the
/// total.
fn table(title: &str, dir: &Path, forced: Option<&str>) -> Score {
    println!("\n{title}\n{}  {:>10}", Score::header(), "time");
    let mut total = Score {
        page: "all".into(),
        ..Score::default()
    };
    for page in scoring::pages(dir) {
        let p = profile(&page.base, forced);
        let (time, read) = timed(p.as_ref(), &page.html, &page.base);
        let s = scoring::score(&page, &listings(read));
        println!("{}  {:>10}", s.row(), ms(time));
        total.add(&s);
    }
    println!("{}", total.row());
    let fields = [total.title, total.price, total.rooms, total.area];
    let right: usize = fields.iter().map(|f| f.right).sum();
    let asked: usize = fields.iter().map(|f| f.shown + f.invented).sum();
    println!(
        "cards {} of {} ({:.1} %), invented {} of {} read; fields right {right} of {asked} ({:.1} %); prices {:.1} %",
        total.matched,
        total.expected,
        100.0 * total.matched as f64 / total.expected.max(1) as f64,
        total.invented,
        total.found,
        100.0 * right as f64 / asked.max(1) as f64,
        100.0 * total.price.share(),
    );
    total
}

fn main() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    table(
        "Profiles, on every real page of their portals",
        &fixtures.join("sites"),
        None,
    );
    table(
        "Auto mode, on real pages of portals without a profile",
        &fixtures.join("auto"),
        Some("auto"),
    );
    table(
        "Auto mode, on the real pages of the portals with a profile",
        &fixtures.join("sites"),
        Some("auto"),
    );

    // Cost: auto mode beside the profile on the same page.
    println!(
        "\nCost per page, median of {RUNS} reads\n{:<32} {:>8} {:>10} {:>10} {:>7}",
        "page", "KB", "profile", "auto", "ratio"
    );
    let mut pages: Vec<(String, Vec<u8>, url::Url)> = scoring::pages(&fixtures.join("sites"))
        .into_iter()
        .map(|p| (p.name, p.html, p.base))
        .collect();
    let idealista =
        url::Url::parse("https://www.idealista.com/alquiler-viviendas/madrid-madrid/").unwrap();
    if let Some(page) = real_pages::read_or_say("idealista_es_search.html", "the Idealista page") {
        pages.insert(
            0,
            ("idealista (775 KB, real)".into(), page, idealista.clone()),
        );
    }
    for (name, html, url) in &pages {
        let (by_profile, _) = timed(profile(url, None).as_ref(), html, url);
        let (by_auto, _) = timed(profile(url, Some("auto")).as_ref(), html, url);
        println!(
            "{:<32} {:>8} {:>10} {:>10} {:>6.1}×",
            name,
            html.len() / 1000,
            ms(by_profile),
            ms(by_auto),
            by_auto.as_secs_f64() / by_profile.as_secs_f64()
        );
    }

    // A 1 MB page: the largest real page, its inline script grown to 1 MB.
    if let Some((name, html, url)) = pages.iter().max_by_key(|(_, h, _)| h.len()) {
        let mut big = html.clone();
        let pad = (1usize << 20).saturating_sub(big.len());
        let script = format!("<script>var pad = \"{}\";</script>", "x".repeat(pad));
        let at = big.len().saturating_sub(7);
        big.splice(at..at, script.into_bytes());
        let auto = profile(url, Some("auto"));
        let (time, read) = timed(auto.as_ref(), &big, url);
        println!(
            "\nauto mode on a 1 MB page ({name} with its script grown to {} KB): {} for {} listings",
            big.len() / 1000,
            ms(time),
            listings(read).len()
        );
    }
}
