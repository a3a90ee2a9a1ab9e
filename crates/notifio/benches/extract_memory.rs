//! Peak heap memory of one extraction, as a multiple of the page's size (issue 8's target:
//! ≤ 2×). A counting global allocator records the high-water mark of live heap bytes above
//! what was live before the call; the page itself is allocated beforehand and not counted.
//! Not timed (the counter would perturb criterion), so a bench binary of its own:
//!
//! ```text
//! cargo bench -p notifio --bench extract_memory
//! ```

use notifio::extract::{Extraction, profile_for};
use notifio::listing::{CardSpec, ListingSpec};
use notifio_policy::SiteKey;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use url::Url;

mod pages;

#[path = "../tests/support/real_pages.rs"]
mod real_pages;

/// Live and peak heap bytes. Hand-written (a dozen lines) rather than a crate: all it does is
/// add and subtract sizes around the system allocator.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; only counters are updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grow(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Extra heap bytes at the peak of `f`, beyond what was live when it started.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

fn main() {
    let mut rows: Vec<(String, usize, usize, usize)> = Vec::new();
    let mut measure = |label: &str, url: &str, spec: Option<ListingSpec>, page: &[u8]| {
        let key = SiteKey::from_url(url).expect("a valid bench URL");
        let profile = profile_for(&key, None, spec.as_ref()).expect("a profile");
        let page_url = Url::parse(url).expect("a valid bench URL");
        let (extraction, peak) = peak_of(|| profile.extract(page, &page_url));
        let n = match extraction {
            Extraction::Listings(l) => l.len(),
            _ => 0,
        };
        rows.push((label.to_owned(), page.len(), peak, n));
    };

    if let Some(page) = real_pages::read_or_say("idealista_es_search.html", "Idealista") {
        measure(
            "Idealista (real page)",
            "https://www.idealista.com/alquiler-viviendas/madrid-madrid/",
            None,
            &page,
        );
    }
    if let Some(json) =
        real_pages::read_or_say("immoscout24_resultlist_2020.json", "ImmobilienScout24")
    {
        let mut page = b"<html><head><script>IS24.resultList = ".to_vec();
        page.extend_from_slice(&json);
        page.extend_from_slice(b";</script></head><body></body></html>");
        measure(
            "ImmoScout24 (real IS24.resultList JSON)",
            "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten",
            None,
            &page,
        );
    }
    measure(
        "Facebook-shaped (synthetic)",
        "https://www.facebook.com/marketplace/madrid/propertyrentals",
        None,
        &pages::facebook_page(2_000_000),
    );
    measure(
        "generic selector (synthetic portal page)",
        "http://127.0.0.1:8080/search",
        Some(ListingSpec::Selector(Box::new(CardSpec::new(
            "article.listing",
            Some("data-id"),
        )))),
        &pages::generic_page(300_000, 40),
    );

    println!("| page | size | listings | peak extra heap | × page size | target ≤ 2× |");
    println!("|---|---|---|---|---|---|");
    for (label, size, peak, n) in rows {
        let ratio = peak as f64 / size as f64;
        println!(
            "| {label} | {} KB | {n} | {} KB | {ratio:.2}× | {} |",
            size / 1000,
            peak / 1000,
            if ratio <= 2.0 { "met" } else { "**not met**" }
        );
    }
}
