//! "Also on another portal": whether two listings on different sites are likely the same flat.
//!
//! Agencies post one flat on several portals. A new listing that looks like one first seen on
//! another site in the last [`WINDOW`] is noted in its message ("also on idealista.com, seen
//! 2 h ago", with that link) — never silently dropped, since this is a guess — unless the
//! search asks to skip such duplicates. The guess is deliberately narrow, because a false
//! match costs the user a flat: the same number of rooms, areas within 2%, prices within 3%,
//! and titles (which on portals carry the street or district) sharing distinctive words. Each
//! figure must be known on both sides. Pure: no I/O.

use crate::filter::fold;
use crate::listing::Listing;
use crate::price::currency_code;
use std::collections::HashSet;
use std::time::Duration;

/// How far back a listing on another site counts.
pub const WINDOW: Duration = Duration::from_secs(14 * 24 * 3600);
/// Areas differ by at most this share of the larger.
pub const AREA_WITHIN: f64 = 0.02;
/// Prices differ by at most this share of the larger.
pub const PRICE_WITHIN: f64 = 0.03;

/// Words that say what a flat is, not where: they never make two titles similar. Spanish,
/// German, English, Italian, Portuguese and French, as the portals write them.
const GENERIC: &[&str] = &[
    "alquiler",
    "venta",
    "piso",
    "pisos",
    "apartamento",
    "apartamentos",
    "atico",
    "estudio",
    "duplex",
    "chalet",
    "casa",
    "habitacion",
    "habitaciones",
    "hab",
    "dormitorio",
    "dormitorios",
    "calle",
    "avenida",
    "plaza",
    "paseo",
    "con",
    "del",
    "las",
    "los",
    "por",
    "para",
    "una",
    "planta",
    "wohnung",
    "zimmer",
    "mieten",
    "miete",
    "strasse",
    "str",
    "und",
    "mit",
    "der",
    "die",
    "das",
    "flat",
    "apartment",
    "room",
    "rooms",
    "studio",
    "rent",
    "for",
    "the",
    "and",
    "with",
    "near",
    "street",
    "road",
    "appartamento",
    "affitto",
    "camere",
    "locali",
    "via",
    "apartamento",
    "arrendamento",
    "quartos",
    "rua",
    "appartement",
    "louer",
    "location",
    "pieces",
    "rue",
    "sur",
    "dans",
    "avec",
];

/// Whether `a` and `b` (on different sites) are likely one flat: see the module doc.
#[must_use]
pub fn likely_same(a: &Listing, b: &Listing) -> bool {
    same_figures(a, b) && similar_titles(a.title.as_deref(), b.title.as_deref())
}

fn same_figures(a: &Listing, b: &Listing) -> bool {
    let (Some(ra), Some(rb)) = (a.rooms, b.rooms) else {
        return false;
    };
    if (ra - rb).abs() > 1e-9 {
        return false;
    }
    let (Some(aa), Some(ab)) = (a.area_m2, b.area_m2) else {
        return false;
    };
    let (Some(pa), Some(pb)) = (a.price, b.price) else {
        return false;
    };
    if let (Some(ca), Some(cb)) = (a.currency.as_deref(), b.currency.as_deref())
        && currency_code(ca) != currency_code(cb)
    {
        return false;
    }
    close(aa, ab, AREA_WITHIN) && close(pa, pb, PRICE_WITHIN)
}

/// The values `y` for which [`close`]`(x, y, share)` can hold, widened by a hair for rounding:
/// what the store may narrow its search for a twin to, before [`likely_same`] decides.
#[must_use]
pub fn within(x: f64, share: f64) -> (f64, f64) {
    let hair = 1e-6;
    (x * (1.0 - share) - hair, (x + hair) / (1.0 - share))
}

/// `x` and `y` differ by at most `share` of the larger (both positive).
fn close(x: f64, y: f64, share: f64) -> bool {
    let big = x.max(y);
    x > 0.0 && y > 0.0 && (x - y).abs() <= big * share + 1e-9
}

/// A title's distinctive words: folded, three characters or more (or a number of two digits
/// or more: a street number), not a [`GENERIC`] word.
fn distinctive(title: &str) -> HashSet<String> {
    fold(title)
        .split(' ')
        .filter(|w| {
            let digits = w.bytes().all(|b| b.is_ascii_digit());
            (if digits {
                w.len() >= 2
            } else {
                w.chars().count() >= 3
            }) && !GENERIC.contains(w)
        })
        .map(str::to_owned)
        .collect()
}

/// Titles share at least one distinctive word, and at least half of the shorter title's.
fn similar_titles(a: Option<&str>, b: Option<&str>) -> bool {
    let (Some(a), Some(b)) = (a, b) else {
        return false;
    };
    let (wa, wb) = (distinctive(a), distinctive(b));
    let shared = wa.intersection(&wb).count();
    let fewer = wa.len().min(wb.len());
    shared >= 1 && shared * 2 >= fewer
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The store narrows its search for a twin to [`within`]: every figure [`close`]
        /// accepts must be inside it, or a true twin would never be looked at.
        #[test]
        fn within_holds_every_figure_close_accepts(
            x in 1.0f64..1e7,
            ratio in 0.9f64..1.1,
            area in proptest::bool::ANY,
        ) {
            let share = if area { AREA_WITHIN } else { PRICE_WITHIN };
            let y = x * ratio;
            let (lo, hi) = within(x, share);
            if close(x, y, share) {
                proptest::prop_assert!(lo <= y && y <= hi, "{y} outside {lo}..{hi} for {x}");
            }
        }
    }

    /// The edges: a figure exactly `share` of the larger away is a twin and inside the range.
    #[test]
    fn within_includes_its_edges() {
        let (lo, hi) = within(1000.0, PRICE_WITHIN);
        assert!(close(1000.0, 970.0, PRICE_WITHIN) && lo <= 970.0);
        let edge = 1000.0 / (1.0 - PRICE_WITHIN);
        assert!(close(1000.0, edge, PRICE_WITHIN) && edge <= hi);
        assert!(!close(1000.0, hi + 1.0, PRICE_WITHIN));
    }

    fn flat(title: &str, price: f64, rooms: f64, area: f64) -> Listing {
        Listing {
            id: "x".into(),
            title: Some(title.into()),
            price: Some(price),
            currency: Some("€".into()),
            rooms: Some(rooms),
            area_m2: Some(area),
            ..Listing::default()
        }
    }

    #[test]
    fn the_same_flat_on_two_portals_matches() {
        let here = flat("Piso en calle de Ponzano, Chamberí", 1200.0, 3.0, 85.0);
        let there = flat(
            "Piso en alquiler en Calle Ponzano 45, Madrid",
            1180.0,
            3.0,
            84.0,
        );
        assert!(likely_same(&here, &there));
        assert!(likely_same(&there, &here), "symmetric");
        let german = flat(
            "3-Zimmer-Wohnung in Kreuzberg, Wrangelstraße",
            1450.0,
            3.0,
            78.0,
        );
        let english = flat(
            "Bright 3 room flat, Wrangelstrasse, Kreuzberg",
            1490.0,
            3.0,
            79.5,
        );
        assert!(likely_same(&german, &english), "accents and ß folded");
    }

    /// The near-misses the issue asks for: each differs from a real duplicate in one way only.
    #[test]
    fn near_misses_do_not_match() {
        let here = flat("Piso en calle de Ponzano, Chamberí", 1200.0, 3.0, 85.0);
        for (why, other) in [
            (
                "one room more",
                flat("Piso en Ponzano, Chamberí", 1200.0, 4.0, 85.0),
            ),
            (
                "area 3% off",
                flat("Piso en Ponzano, Chamberí", 1200.0, 3.0, 82.4),
            ),
            (
                "price 4% off",
                flat("Piso en Ponzano, Chamberí", 1250.0, 3.0, 85.0),
            ),
            (
                "other street",
                flat("Piso en calle de Fuencarral, Malasaña", 1200.0, 3.0, 85.0),
            ),
            (
                "only generic words shared",
                flat("Piso en alquiler", 1200.0, 3.0, 85.0),
            ),
        ] {
            assert!(!likely_same(&here, &other), "{why}");
        }
        let mut unknown = here.clone();
        unknown.area_m2 = None;
        assert!(
            !likely_same(&here, &unknown),
            "an unknown figure is no match"
        );
        let mut chf = here.clone();
        chf.currency = Some("CHF".into());
        assert!(!likely_same(&here, &chf), "another currency");
    }

    #[test]
    fn limits_are_inclusive() {
        assert!(close(100.0, 98.0, AREA_WITHIN));
        assert!(!close(100.0, 97.9, AREA_WITHIN));
        assert!(close(1000.0, 970.0, PRICE_WITHIN));
        assert!(!close(1000.0, 969.0, PRICE_WITHIN));
        assert!(!close(0.0, 0.0, PRICE_WITHIN));
    }
}
