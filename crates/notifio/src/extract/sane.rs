//! Whether a value read for a field is plausible for it: a title that is words, not a photo
//! counter or a seller's shop badge; a price above zero; rooms and an area a home can have.
//!
//! A profile's rule says where a field usually is; when a page moves, the same rule can land on
//! the wrong element and read something that parses but means nothing ("18" photos as a title,
//! a price of 0). A value that fails here is treated as not read, and the field is read the way
//! a generic card is read instead (`generic::card_listing`, docs/sites.md).

/// What a card shows on a badge rather than as its headline.
const BADGES: [&str; 19] = [
    "featured property",
    "premium listing",
    "shop",
    "top",
    "anzeige",
    "gesponsert",
    "sponsored",
    "featured",
    "premium",
    "highlight",
    "neu",
    "new",
    "promoted",
    "ad",
    "advertisement",
    "reserviert",
    "reserved",
    "verified",
    "video",
];

/// A title: at least two letters, not only digits and signs, not a badge ("TOP", "Zum Shop").
pub(crate) fn title(text: &str) -> bool {
    let t = text.trim();
    let letters = t.chars().filter(|c| c.is_alphabetic()).count();
    if letters < 2 {
        return false;
    }
    let lower = t.to_lowercase();
    !(lower.starts_with("zum shop") || BADGES.contains(&lower.as_str()))
}

/// A price above zero.
pub(crate) fn price(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

/// A room count a home can have (a studio shows 0).
pub(crate) fn rooms(value: f64) -> bool {
    (0.0..=50.0).contains(&value)
}

/// A living area in m² a home can have.
pub(crate) fn area(value: f64) -> bool {
    (1.0..=100_000.0).contains(&value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_words_not_counters_or_badges() {
        for ok in ["Helle 3-Zimmer-Wohnung", "Studio", "Tottenham Street, W1"] {
            assert!(title(ok), "{ok}");
        }
        for bad in [
            "18",
            " 2 / 12 ",
            "TOP",
            "Zum Shop von Immobilien Müller",
            "",
            "€ 1.250",
            "ad",
        ] {
            assert!(!title(bad), "{bad}");
        }
        assert!(!price(0.0) && price(950.0) && !price(f64::NAN));
        assert!(rooms(0.0) && rooms(3.5) && !rooms(51.0));
        assert!(area(35.0) && !area(0.0));
    }
}
