//! Auto mode (no profile, no selector) on arbitrary bytes as the page, through the bounded
//! reading the watcher runs (`read_page`): it must end within its bounds on any page, and every
//! listing it reads must have an id and a web link.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio::extract::{Extraction, auto::Auto, read_page};
use notifio_fuzz::PORTAL;

fuzz_target!(|data: &[u8]| {
    let url = url::Url::parse(PORTAL).expect("static URL");
    let read = read_page(&Auto, data, &url, Some(1));
    if let Extraction::Listings(listings) = read.extraction {
        for l in &listings {
            assert!(!l.id.trim().is_empty(), "listing with an empty id: {l:?}");
            assert!(
                l.url.as_deref().is_some_and(|u| u.starts_with("http")),
                "listing without a web link: {l:?}"
            );
        }
    }
    if let Some(next) = read.next {
        assert!(matches!(next.scheme(), "http" | "https"), "next page {next}");
    }
});
