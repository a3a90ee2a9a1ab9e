//! Scores a reading of a real results page against what a person reads on its cards: the
//! page's `.json` beside it (`tests/fixtures/sites/` for the portals with a profile,
//! `tests/fixtures/auto/` for portals without one; provenance in each folder's README). Shared
//! by the reading tests (`tests/it/reading.rs`) and the reading benchmark
//! (`benches/reading.rs`), so the figures in docs/BENCHMARKS.md are the ones the tests hold.

#![allow(dead_code, unreachable_pub)]

use notifio::listing::Listing;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One real page with what a person reads on it.
pub struct Page {
    /// The file's name without `.html`.
    pub name: String,
    pub html: Vec<u8>,
    pub expected: Value,
    pub base: url::Url,
}

/// The pages (`*.html` with a `.json` beside) in `dir`, by name.
pub fn pages(dir: &Path) -> Vec<Page> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .filter_map(|p| {
            let json = p.with_extension("json");
            let expected: Value = serde_json::from_slice(&std::fs::read(&json).ok()?)
                .unwrap_or_else(|e| {
                    panic!("{}: {e}", json.display());
                });
            let base = url::Url::parse(expected["base_url"].as_str()?).ok()?;
            Some(Page {
                name: p.file_stem()?.to_string_lossy().into_owned(),
                html: std::fs::read(&p).ok()?,
                expected,
                base,
            })
        })
        .collect()
}

/// Right answers of one field over the cards that show it, and values read where the card
/// shows none.
#[derive(Clone, Copy, Debug, Default)]
pub struct Field {
    pub right: usize,
    pub shown: usize,
    pub invented: usize,
}

impl Field {
    fn add(&mut self, other: Self) {
        self.right += other.right;
        self.shown += other.shown;
        self.invented += other.invented;
    }

    /// Right answers as a share of the cards that show the field (1 when none does).
    pub fn share(&self) -> f64 {
        if self.shown == 0 {
            1.0
        } else {
            self.right as f64 / self.shown as f64
        }
    }

    fn cell(&self) -> String {
        let extra = if self.invented > 0 {
            format!(" +{}", self.invented)
        } else {
            String::new()
        };
        format!("{}/{}{extra}", self.right, self.shown)
    }
}

/// How one reading of a page went.
#[derive(Clone, Debug, Default)]
pub struct Score {
    pub page: String,
    /// Result cards on the page.
    pub expected: usize,
    /// Listings read.
    pub found: usize,
    /// Listings read that are cards of the page.
    pub matched: usize,
    /// Listings read that are no card of the page.
    pub invented: usize,
    pub title: Field,
    pub price: Field,
    pub rooms: Field,
    pub area: Field,
    /// What went wrong, one line per value (for a failing test to show).
    pub misses: Vec<String>,
}

impl Score {
    /// Adds another page's score into a total.
    pub fn add(&mut self, other: &Self) {
        self.expected += other.expected;
        self.found += other.found;
        self.matched += other.matched;
        self.invented += other.invented;
        self.title.add(other.title);
        self.price.add(other.price);
        self.rooms.add(other.rooms);
        self.area.add(other.area);
    }

    /// The header of [`Self::row`].
    pub fn header() -> String {
        format!(
            "{:<32} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "page", "cards", "found", "invented", "title", "price", "rooms", "area"
        )
    }

    /// One line: cards expected / found / invented, and each field right of shown (+ values
    /// read where the card shows none).
    pub fn row(&self) -> String {
        format!(
            "{:<32} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
            self.page,
            self.expected,
            self.matched,
            self.invented,
            self.title.cell(),
            self.price.cell(),
            self.rooms.cell(),
            self.area.cell()
        )
    }
}

/// `u` absolute against `base`, without its fragment.
fn canonical(base: &url::Url, u: &str) -> Option<String> {
    let mut u = base.join(u.trim()).ok()?;
    u.set_fragment(None);
    Some(u.to_string())
}

fn same_text(a: &str, b: &str) -> bool {
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    words(a) == words(b)
}

fn same_number(got: f64, want: f64) -> bool {
    (got - want).abs() <= 0.01 * want.abs().max(1.0)
}

/// Scores `got` (what a reading of `page` yielded) against the page's expectations.
pub fn score(page: &Page, got: &[Listing]) -> Score {
    let want = page.expected["listings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let expected = page.expected["cards"]
        .as_u64()
        .map_or(want.len(), |n| usize::try_from(n).unwrap_or(0));
    let mut s = Score {
        page: page.name.clone(),
        expected,
        found: got.len(),
        ..Score::default()
    };
    let wanted: Vec<Option<String>> = want
        .iter()
        .map(|w| w["href"].as_str().and_then(|h| canonical(&page.base, h)))
        .collect();
    for l in got {
        let at = l.url.as_deref().and_then(|u| canonical(&page.base, u));
        let Some(i) = at
            .as_ref()
            .and_then(|u| wanted.iter().position(|w| w.as_ref() == Some(u)))
        else {
            s.invented += 1;
            s.misses
                .push(format!("invented: {:?} {:?}", l.url, l.title));
            continue;
        };
        s.matched += 1;
        let w = &want[i];
        let mut text = |f: &mut Field, name: &str, got: Option<&str>| match w[name].as_str() {
            Some(want) => {
                f.shown += 1;
                if got.is_some_and(|g| same_text(g, want)) {
                    f.right += 1;
                } else {
                    s.misses
                        .push(format!("{name} of {}: {got:?}, not {want:?}", w["href"]));
                }
            }
            None => {
                if got.is_some() {
                    f.invented += 1;
                    s.misses
                        .push(format!("{name} of {}: {got:?}, shows none", w["href"]));
                }
            }
        };
        text(&mut s.title, "title", l.title.as_deref());
        let mut number = |f: &mut Field, name: &str, got: Option<f64>| match w[name].as_f64() {
            Some(want) => {
                f.shown += 1;
                if got.is_some_and(|g| same_number(g, want)) {
                    f.right += 1;
                } else {
                    s.misses
                        .push(format!("{name} of {}: {got:?}, not {want}", w["href"]));
                }
            }
            None => {
                if got.is_some() {
                    f.invented += 1;
                    s.misses
                        .push(format!("{name} of {}: {got:?}, shows none", w["href"]));
                }
            }
        };
        number(&mut s.price, "price", l.price);
        number(&mut s.rooms, "rooms", l.rooms);
        number(&mut s.area, "area_m2", l.area_m2);
    }
    // Cards in the expectations but not read.
    for (i, w) in wanted.iter().enumerate() {
        let read = got.iter().any(|l| {
            l.url
                .as_deref()
                .and_then(|u| canonical(&page.base, u))
                .as_ref()
                == w.as_ref()
        });
        if !read {
            s.misses.push(format!("missed card: {}", want[i]["href"]));
        }
    }
    s
}
