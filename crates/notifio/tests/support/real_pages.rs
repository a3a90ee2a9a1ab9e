//! The real third-party pages (docs/architecture.md#real-pages): where they are, and how a
//! test or a benchmark reads one. Shared by the integration tests, the unit tests and the
//! benchmarks (`#[path]`-included), so all of them find the pages the same way.
//!
//! A test that needs one is marked
//! `#[cfg_attr(not(real_pages), ignore = "needs the real pages (NOTIFIO_REAL_PAGES=DIR)")]`:
//! without the pages it is reported as ignored, with that reason; with them, or under
//! `CI=true`, it runs and a page that is missing fails it.

#![allow(dead_code)] // each includer uses what it needs

use std::path::PathBuf;

/// Where the real pages are looked for (`NOTIFIO_REAL_PAGES`, else `../shared/fixtures`).
pub(crate) fn dir() -> PathBuf {
    PathBuf::from(env!("NOTIFIO_REAL_PAGES_DIR"))
}

/// The bytes of real page `name`; a test marked as needing the real pages fails without it.
pub(crate) fn read(name: &str) -> Vec<u8> {
    let path = dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "real page {} is missing ({e}): put the real pages there or set NOTIFIO_REAL_PAGES=DIR",
            path.display()
        )
    })
}

/// The bytes of real page `name`, or `None` with one line saying what is skipped (for
/// benchmarks, which run whatever they can).
pub(crate) fn read_or_say(name: &str, skipped: &str) -> Option<Vec<u8>> {
    match std::fs::read(dir().join(name)) {
        Ok(bytes) => Some(bytes),
        Err(_) => {
            eprintln!(
                "skipping {skipped}: needs the real page {name} (in {}; set NOTIFIO_REAL_PAGES=DIR)",
                dir().display()
            );
            None
        }
    }
}
