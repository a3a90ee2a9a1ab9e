//! Two things the code needs from where it is built.
//!
//! **The commit**, for `notifio --version` (`notifio 0.1.0 (commit 0123456789ab)`): a bug
//! report then names the exact build. It is asked of git when this crate is a git checkout
//! (its build.rs is tracked there); a packaged crate reads the commit cargo recorded in
//! `.cargo_vcs_info.json`; otherwise (a tarball, no git) it is "unknown commit". A packager can
//! name it with `NOTIFIO_COMMIT=…`. The script runs again only when HEAD moves (the HEAD file,
//! the branch's ref and `packed-refs`), not on every edit.
//!
//! **The real third-party pages** some tests and benchmarks read
//! (docs/architecture.md#real-pages). They are other people's site content, so they stay
//! outside the repository: in `NOTIFIO_REAL_PAGES` if set, else in `../shared/fixtures` beside
//! the checkout. When they are there (or `CI=true`, where they are required) the `real_pages`
//! cfg is on and their tests run; otherwise those tests are compiled as ignored, with the
//! reason, so a fresh clone passes, and the test run (not the build) says what it skipped. The
//! directory reaches the code as `env!("NOTIFIO_REAL_PAGES_DIR")`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    commit(&manifest);
    real_pages(&manifest);
}

/// `git args…` in `dir`: its trimmed output, or `None` without git or outside a repository.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    out.status.success().then(|| text.trim().to_owned())
}

/// Sets `NOTIFIO_COMMIT` to `commit <12 hex digits>` or `unknown commit`.
fn commit(manifest: &Path) {
    println!("cargo::rerun-if-env-changed=NOTIFIO_COMMIT");
    let vcs_info = manifest.join(".cargo_vcs_info.json");
    let named = std::env::var("NOTIFIO_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty());
    let commit = named.or_else(|| {
        // A checkout of this repository, not a copy of the crate inside some other checkout
        // (`cargo package` unpacks one under target/, which git ignores).
        if git(manifest, &["ls-files", "--error-unmatch", "build.rs"]).is_some() {
            watch_head(manifest);
            git(manifest, &["rev-parse", "HEAD"])
        } else if vcs_info.is_file() {
            println!("cargo::rerun-if-changed={}", vcs_info.display());
            packaged_commit(&vcs_info)
        } else {
            None
        }
    });
    match commit {
        Some(c) => {
            let short: String = c.trim().chars().take(12).collect();
            println!("cargo::rustc-env=NOTIFIO_COMMIT=commit {short}");
        }
        None => println!("cargo::rustc-env=NOTIFIO_COMMIT=unknown commit"),
    }
}

/// Reruns this script when HEAD moves: the HEAD file (a checkout, a detached HEAD), the ref
/// it points to, and `packed-refs` (where the ref lives after `git gc`). Only files that exist
/// are named: cargo reruns a script on every build for a missing one.
fn watch_head(manifest: &Path) {
    let mut files = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(manifest, &["symbolic-ref", "-q", "HEAD"]) {
        files.push(branch);
    }
    for file in files {
        let Some(path) = git(
            manifest,
            &["rev-parse", "--path-format=absolute", "--git-path", &file],
        ) else {
            continue;
        };
        if Path::new(&path).is_file() {
            println!("cargo::rerun-if-changed={path}");
        }
    }
}

/// The commit cargo recorded when it packaged this crate: `"sha1": "…"` in
/// `.cargo_vcs_info.json`.
fn packaged_commit(vcs_info: &Path) -> Option<String> {
    let text = std::fs::read_to_string(vcs_info).ok()?;
    let (_, rest) = text.split_once("\"sha1\"")?;
    let (_, rest) = rest.split_once('"')?;
    let (sha, _) = rest.split_once('"')?;
    (sha.len() >= 12 && sha.chars().all(|c| c.is_ascii_hexdigit())).then(|| sha.to_owned())
}

/// Sets the `real_pages` cfg and `NOTIFIO_REAL_PAGES_DIR`.
fn real_pages(manifest: &Path) {
    println!("cargo::rustc-check-cfg=cfg(real_pages)");
    println!("cargo::rerun-if-env-changed=NOTIFIO_REAL_PAGES");
    println!("cargo::rerun-if-env-changed=CI");
    let dir = std::env::var_os("NOTIFIO_REAL_PAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../../shared/fixtures"));
    let dir = dir.canonicalize().unwrap_or(dir); // the path as a reader would write it
    let present = dir.join("idealista_es_search.html").is_file();
    // Pages put there later turn the tests on at the next build: the directory is watched,
    // or, while it is missing, its nearest existing parent, unless that parent holds this
    // checkout (it would change with every build).
    // Compared as the filesystem resolves them (`..` in a path that is missing is not).
    let checkout = manifest
        .canonicalize()
        .unwrap_or_else(|_| manifest.to_owned());
    let watched = dir
        .ancestors()
        .find(|a| a.is_dir())
        .and_then(|a| a.canonicalize().ok())
        .filter(|a| *a == dir || !checkout.starts_with(a));
    if let Some(watched) = watched {
        println!("cargo::rerun-if-changed={}", watched.display());
    }
    println!("cargo::rustc-env=NOTIFIO_REAL_PAGES_DIR={}", dir.display());
    let required = std::env::var("CI").as_deref() == Ok("true");
    let has_tests = manifest.join("tests/it").is_dir();
    // No `cargo::warning` when they are missing: it would show above every `cargo run` of
    // someone who only wanted the demo. The test run says what it skipped
    // (`tests/real_pages.rs`).
    if present || (required && has_tests) {
        println!("cargo::rustc-cfg=real_pages");
    }
}
