//! One line at the end of the notifio tests saying what the real-page tests did
//! (docs/architecture.md#real-pages): without the real third-party pages they are reported as
//! ignored one by one among hundreds of results, which nobody reads; this says how many were
//! skipped, which, and how to run them. It finds them the way a reader would, by their marker
//! in `tests/it/`, and fails if it finds none (the marker changed and this line would lie).
//! Unit tests in `src/` that add a real page to their synthetic ones when it is there
//! (`cfg!(real_pages)`) are named too: without the pages they run on the synthetic ones only.

use std::path::Path;

const MARKER: &str = "not(real_pages)";

/// The names of the tests in `dir` marked as needing the real pages.
fn marked_tests(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let mut rest = text.as_str();
        while let Some(at) = rest.find(MARKER) {
            rest = &rest[at + MARKER.len()..];
            let name = rest
                .find("fn ")
                .map(|f| &rest[f + 3..])
                .and_then(|s| s.split(|c: char| !(c.is_alphanumeric() || c == '_')).next());
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                names.push(name.to_owned());
            }
        }
    }
    Ok(names)
}

/// The tests in the `.rs` files under `dir` that read a real page when it is there
/// (`cfg!(real_pages)` in their body): the name of the `fn` before each use.
fn partly_real(dir: &Path, names: &mut Vec<String>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            partly_real(&path, names)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&path)?;
            for (at, _) in text.match_indices("cfg!(real_pages)") {
                let name = text[..at]
                    .rfind("fn ")
                    .map(|f| &text[f + 3..at])
                    .and_then(|s| s.split(|c: char| !(c.is_alphanumeric() || c == '_')).next());
                if let Some(name) = name.filter(|n| !n.is_empty()) {
                    names.push(name.to_owned());
                }
            }
        }
    }
    Ok(())
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let names = match marked_tests(&dir) {
        Ok(names) if !names.is_empty() => names,
        Ok(_) => {
            eprintln!("error: no test in {} is marked `{MARKER}`", dir.display());
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("error: reading {}: {e}", dir.display());
            std::process::exit(1);
        }
    };
    let pages = env!("NOTIFIO_REAL_PAGES_DIR");
    if cfg!(real_pages) {
        println!(
            "{} real-page tests ran on the pages in {pages}",
            names.len()
        );
    } else {
        println!(
            "{} real-page tests skipped: no real pages in {pages} (NOTIFIO_REAL_PAGES=DIR runs them): {}",
            names.len(),
            names.join(", ")
        );
        let mut partly = Vec::new();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        if partly_real(&src, &mut partly).is_ok() && !partly.is_empty() {
            println!(
                "{} more ran on the synthetic pages only: {}",
                partly.len(),
                partly.join(", ")
            );
        }
    }
}
