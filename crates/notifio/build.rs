//! Finds the real third-party pages some tests and benchmarks read (docs/architecture.md#real-pages).
//!
//! They are other people's site content, so they stay outside the repository: in
//! `NOTIFIO_REAL_PAGES` if set, else in `../shared/fixtures` beside the checkout. When they are
//! there (or `CI=true`, where they are required) the `real_pages` cfg is on and their tests run;
//! otherwise those tests are compiled as ignored, with the reason, so a fresh clone passes and
//! says what it skipped. The directory reaches the code as `env!("NOTIFIO_REAL_PAGES_DIR")`.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(real_pages)");
    println!("cargo::rerun-if-env-changed=NOTIFIO_REAL_PAGES");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let dir = std::env::var_os("NOTIFIO_REAL_PAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../../shared/fixtures"));
    let dir = dir.canonicalize().unwrap_or(dir); // the path as a reader would write it
    let present = dir.join("idealista_es_search.html").is_file();
    if dir.is_dir() {
        println!("cargo::rerun-if-changed={}", dir.display());
    }
    println!("cargo::rustc-env=NOTIFIO_REAL_PAGES_DIR={}", dir.display());
    let required = std::env::var("CI").as_deref() == Ok("true");
    if present || required {
        println!("cargo::rustc-cfg=real_pages");
    } else {
        println!(
            "cargo::warning=the real-page tests are skipped (shown as ignored): no real pages in {}; set NOTIFIO_REAL_PAGES=DIR to run them",
            dir.display()
        );
    }
}
