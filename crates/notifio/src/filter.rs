//! A search's own filters: which of the listings on its page are worth announcing.
//!
//! A portal's search filters are coarse, so users filter again: price, rooms and area ranges,
//! words that must (`include`) or must not (`exclude`) occur in the title or description. The
//! filters decide what is *announced*, never what is recorded: a listing that does not match is
//! still remembered, so it is not "new" again tomorrow, and a later price drop can bring it in.
//! A figure the page did not show passes a numeric filter unless `strict` (we do not hide a flat
//! because its card left the rooms out). Pure: no I/O, no clock.

use crate::listing::Listing;
use crate::price::PriceRules;
use icu_normalizer::DecomposingNormalizerBorrowed;
use icu_normalizer::properties::CanonicalCombiningClassMapBorrowed;

/// What of a search's news is announced: its filters, its price-change rules and whether a
/// likely duplicate of a listing on another site is announced at all.
///
/// # Default
/// No filter, price drops announced whatever their size, rises not, duplicates announced (with
/// a note).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnnounceRules {
    /// Which listings match.
    pub filters: Filters,
    /// Which price changes are announced.
    pub prices: PriceRules,
    /// `skip_cross_site_duplicates`: a new listing that is likely the same flat as one first
    /// seen on another site in the last 14 days is not announced (by default it is, noted).
    pub skip_cross_site_duplicates: bool,
}

/// A listing as `check --json` reports it: with whether the search's filters let it through.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CheckedListing {
    /// The listing as the page showed it.
    #[serde(flatten)]
    pub listing: Listing,
    /// Whether the search's filters let it through (it is announced when new).
    pub matched: bool,
}

impl AnnounceRules {
    /// `listings`, each judged by these filters.
    #[must_use]
    pub fn checked(&self, listings: &[Listing]) -> Vec<CheckedListing> {
        listings
            .iter()
            .map(|l| CheckedListing {
                listing: l.clone(),
                matched: self.filters.matches(l),
            })
            .collect()
    }
}

/// One search's filters (`min_price` … `strict` in `[[search]]`, defaults in `[watch]`).
///
/// # Default
/// No bounds, no words, not strict: every listing matches.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filters {
    /// Lowest price (inclusive), in the page's currency.
    pub min_price: Option<f64>,
    /// Highest price (inclusive).
    pub max_price: Option<f64>,
    /// Fewest rooms (inclusive).
    pub min_rooms: Option<f64>,
    /// Most rooms (inclusive).
    pub max_rooms: Option<f64>,
    /// Smallest living area in m² (inclusive).
    pub min_area: Option<f64>,
    /// Largest living area in m² (inclusive).
    pub max_area: Option<f64>,
    /// At least one must occur in the title or description (none given: no condition).
    pub include: Vec<Pattern>,
    /// None may occur in the title or description.
    pub exclude: Vec<Pattern>,
    /// An unknown price, rooms or area fails a bound set on it (instead of passing).
    pub strict: bool,
}

/// One `include`/`exclude` entry: words, or a `/regex/`.
#[derive(Clone, Debug)]
pub enum Pattern {
    /// A word or phrase, kept folded ([`fold`]): it occurs where its folded form is part of
    /// the folded text, so `wg` is found in "WG-Zimmer" and `balcon` in "Balcones".
    Words(String),
    /// A regular expression, as written between the slashes, matched against the text as the
    /// page has it, ignoring case (`(?-i)` turns that off).
    Regex(regex::Regex),
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Words(a), Self::Words(b)) => a == b,
            (Self::Regex(a), Self::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl Pattern {
    /// Reads an entry: `/…/` is a regex, anything else words.
    ///
    /// # Errors
    /// An empty entry, or a regex that does not compile (the message says what is wrong).
    pub fn parse(entry: &str) -> Result<Self, String> {
        let trimmed = entry.trim();
        if let Some(inner) = trimmed
            .strip_prefix('/')
            .and_then(|r| r.strip_suffix('/'))
            .filter(|_| trimmed.len() >= 2)
        {
            if inner.is_empty() {
                return Err("an empty regex `//` matches everything".into());
            }
            return regex::RegexBuilder::new(inner)
                .case_insensitive(true)
                // A user's regex runs on every card of every check: keep it small.
                .size_limit(1 << 20)
                .build()
                .map(Self::Regex)
                .map_err(|e| regex_problem(&e));
        }
        let words = fold(trimmed);
        if words.is_empty() {
            return Err("an empty word matches everything".into());
        }
        Ok(Self::Words(words))
    }

    /// Whether it occurs in `text` (as the page has it) whose folded form is `folded`.
    fn occurs(&self, text: &str, folded: &str) -> bool {
        match self {
            Self::Words(w) => folded.contains(w.as_str()),
            Self::Regex(re) => re.is_match(text),
        }
    }
}

impl Filters {
    /// Whether no filter is set (every listing matches).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self
            == Self {
                strict: self.strict,
                ..Self::default()
            }
    }

    /// Whether `l` is worth announcing to this search.
    #[must_use]
    pub fn matches(&self, l: &Listing) -> bool {
        self.matches_figures(l.price, l.rooms, l.area_m2) && self.matches_words(l)
    }

    /// The numeric bounds alone, for a listing with these figures (a price drop asks whether
    /// the old price matched too).
    #[must_use]
    pub fn matches_figures(
        &self,
        price: Option<f64>,
        rooms: Option<f64>,
        area: Option<f64>,
    ) -> bool {
        self.within(price, self.min_price, self.max_price)
            && self.within(rooms, self.min_rooms, self.max_rooms)
            && self.within(area, self.min_area, self.max_area)
    }

    /// Whether `include` finds one of its entries and `exclude` none in the title and
    /// description.
    #[must_use]
    pub fn matches_words(&self, l: &Listing) -> bool {
        if self.include.is_empty() && self.exclude.is_empty() {
            return true;
        }
        let text = [l.title.as_deref(), l.description.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("\n");
        let folded = fold(&text);
        (self.include.is_empty() || self.include.iter().any(|p| p.occurs(&text, &folded)))
            && !self.exclude.iter().any(|p| p.occurs(&text, &folded))
    }

    fn within(&self, value: Option<f64>, min: Option<f64>, max: Option<f64>) -> bool {
        if min.is_none() && max.is_none() {
            return true;
        }
        match value {
            None => !self.strict,
            Some(v) => min.is_none_or(|m| v >= m) && max.is_none_or(|m| v <= m),
        }
    }
}

/// "not a valid regex: unclosed group": regex's syntax errors draw a caret diagram over several
/// lines; the last line says what is wrong (a config error's own prefix already says where).
pub(crate) fn regex_problem(e: &regex::Error) -> String {
    let text = e.to_string();
    let what = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid")
        .trim()
        .trim_start_matches("error: ")
        .to_owned();
    format!("not a valid regex: {what}")
}

/// Text as filters and duplicate matching compare it: lower case, accents dropped (NFD, then
/// no combining marks), letters without a decomposition spelt out (`ß` → `ss`, `ø` → `o`),
/// every run of anything but letters and digits one space. "Ático  en Chamberí!" → "atico en
/// chamberi".
#[must_use]
pub fn fold(text: &str) -> String {
    let nfd = DecomposingNormalizerBorrowed::new_nfd();
    let marks = CanonicalCombiningClassMapBorrowed::new();
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in nfd.normalize_iter(text.chars()) {
        if marks.get_u8(c) != 0 {
            continue;
        }
        if !c.is_alphanumeric() {
            space = !out.is_empty();
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        match c {
            'ß' | 'ẞ' => out.push_str("ss"),
            'ø' | 'Ø' => out.push('o'),
            'æ' | 'Æ' => out.push_str("ae"),
            'œ' | 'Œ' => out.push_str("oe"),
            'ł' | 'Ł' => out.push('l'),
            'đ' | 'Đ' => out.push('d'),
            'þ' | 'Þ' => out.push_str("th"),
            c => out.extend(c.to_lowercase()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(title: &str, price: Option<f64>, rooms: Option<f64>, area: Option<f64>) -> Listing {
        Listing {
            id: "1".into(),
            title: Some(title.into()),
            price,
            rooms,
            area_m2: area,
            ..Listing::default()
        }
    }

    fn words(list: &[&str]) -> Vec<Pattern> {
        list.iter().map(|w| Pattern::parse(w).unwrap()).collect()
    }

    #[test]
    fn folding_drops_case_accents_and_punctuation() {
        for (text, folded) in [
            ("Ático  en Chamberí!", "atico en chamberi"),
            ("Straße", "strasse"),
            ("WG-Zimmer", "wg zimmer"),
            ("Þórsgata, Reykjavík", "thorsgata reykjavik"),
            ("  ", ""),
            ("Ørestad 2½", "orestad 2½"),
        ] {
            assert_eq!(fold(text), folded, "{text}");
        }
    }

    #[test]
    fn each_bound_is_inclusive_and_an_unknown_figure_passes_unless_strict() {
        let f = Filters {
            min_price: Some(800.0),
            max_price: Some(1200.0),
            min_rooms: Some(2.0),
            max_rooms: Some(3.0),
            min_area: Some(50.0),
            max_area: Some(90.0),
            ..Filters::default()
        };
        let ok = flat("x", Some(1200.0), Some(2.0), Some(50.0));
        assert!(f.matches(&ok));
        for (what, l) in [
            (
                "price above",
                flat("x", Some(1200.5), Some(2.0), Some(60.0)),
            ),
            ("price below", flat("x", Some(799.0), Some(2.0), Some(60.0))),
            ("rooms above", flat("x", Some(900.0), Some(4.0), Some(60.0))),
            ("rooms below", flat("x", Some(900.0), Some(1.0), Some(60.0))),
            ("area above", flat("x", Some(900.0), Some(2.0), Some(91.0))),
            ("area below", flat("x", Some(900.0), Some(2.0), Some(49.0))),
        ] {
            assert!(!f.matches(&l), "{what}");
        }
        let unknown = flat("x", None, None, None);
        assert!(f.matches(&unknown), "unknown figures pass");
        let strict = Filters {
            strict: true,
            ..f.clone()
        };
        assert!(!strict.matches(&unknown), "strict: unknown fails");
        assert!(strict.matches(&ok));
        // Strict only where a bound is set.
        let only_price = Filters {
            max_price: Some(1000.0),
            strict: true,
            ..Filters::default()
        };
        assert!(only_price.matches(&flat("x", Some(900.0), None, None)));
        assert!(!only_price.matches(&flat("x", None, Some(2.0), Some(50.0))));
    }

    #[test]
    fn words_ignore_case_and_accents_and_regexes_are_regexes() {
        let mut l = flat("Ático luminoso en CHAMBERÍ", None, None, None);
        l.description = Some("Piso con balcón, sin ascensor. Ideal WG.".into());
        let f = |inc: &[&str], exc: &[&str]| Filters {
            include: words(inc),
            exclude: words(exc),
            ..Filters::default()
        };
        assert!(f(&["atico"], &[]).matches(&l));
        assert!(f(&["chamberi"], &[]).matches(&l));
        assert!(f(&["BALCON"], &[]).matches(&l), "in the description");
        assert!(f(&["terraza", "balcón"], &[]).matches(&l), "one of them");
        assert!(!f(&["terraza"], &[]).matches(&l));
        assert!(!f(&[], &["wg"]).matches(&l));
        assert!(!f(&[], &["Sin Ascensor"]).matches(&l), "a phrase");
        assert!(f(&[], &["tausch"]).matches(&l));
        assert!(f(&["/lumin(oso|osa)/"], &[]).matches(&l));
        assert!(!f(&[], &[r"/\bwg\b/"]).matches(&l), "regexes ignore case");
        assert!(
            f(&[], &[r"/(?-i)\bwg\b/"]).matches(&l),
            "unless told not to"
        );
        assert!(
            f(&["/^Ático/"], &[]).matches(&l),
            "against the text as written"
        );
        let untitled = Listing::default();
        assert!(
            !f(&["atico"], &[]).matches(&untitled),
            "nothing to find it in"
        );
        assert!(f(&[], &["atico"]).matches(&untitled));
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        assert!(Pattern::parse("  ").unwrap_err().contains("empty"));
        assert!(Pattern::parse("//").unwrap_err().contains("empty regex"));
        let e = Pattern::parse("/(unclosed/").unwrap_err();
        assert!(e.starts_with("not a valid regex:"), "{e}");
        assert!(Pattern::parse("/").unwrap_err().contains("empty word"));
        assert!(Pattern::parse("¡!").unwrap_err().contains("empty word"));
    }

    #[test]
    fn no_filter_is_empty() {
        assert!(Filters::default().is_empty());
        assert!(
            Filters {
                strict: true,
                ..Filters::default()
            }
            .is_empty()
        );
        assert!(
            !Filters {
                exclude: words(&["wg"]),
                ..Filters::default()
            }
            .is_empty()
        );
    }
}
