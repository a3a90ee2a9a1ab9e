//! What a card says about where a flat is, turned into a question a geocoder can answer.
//!
//! Cards write places for people: Idealista's "Piso en calle de Alcalá, Goya, Madrid",
//! immobiliare's "Bilocale via Mario de' Fiori, Spagna, Roma", Kleinanzeigen's "10115 Berlin -
//! Mitte". The flat's kind in front is no part of the address and confuses a geocoder, so it
//! goes; a spaced dash separates a district like a comma. The cache key is the query folded as
//! filters fold text (case, accents, punctuation, spaces), so two cards writing one address
//! differently ask the geocoder once. What the text can give at best (a street, a district, a
//! city) bounds the precision of whatever the geocoder answers: a street found for "Berlin" is
//! still only Berlin.

use super::Precision;

/// The longest address text read (in characters): a card's location is a line, not a page.
pub const MAX_ADDRESS_CHARS: usize = 200;

/// A card's location as a geocoder is asked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressQuery {
    /// What is sent: the address without the flat's kind, one space between words, ", "
    /// between parts.
    pub text: String,
    /// The cache key: [`cache_key`] of `text`. One key, one question, ever.
    pub key: String,
    /// The finest place the text can name.
    pub best: Precision,
}

/// The query for a card's location text; `None` for text with nothing to look up (empty,
/// only punctuation) or longer than [`MAX_ADDRESS_CHARS`].
#[must_use]
pub fn query(card_text: &str) -> Option<AddressQuery> {
    if card_text.chars().count() > MAX_ADDRESS_CHARS {
        return None;
    }
    let parts = parts(card_text);
    if parts.is_empty() {
        return None;
    }
    let text = parts.join(", ");
    let key = cache_key(&text);
    if key.is_empty() {
        return None;
    }
    Some(AddressQuery {
        best: best_precision(&parts),
        key,
        text,
    })
}

/// The cache key of an address: folded as filters fold text ([`crate::filter::fold`]), so
/// "Calle Mayor 3, Sol, Madrid" and "calle mayor 3,  sol, MADRID" are one key.
#[must_use]
pub fn cache_key(text: &str) -> String {
    crate::filter::fold(text)
}

/// The parts of a location text: split at commas and spaced dashes, whitespace collapsed,
/// control characters dropped, empty parts gone, the flat's kind taken off the first.
fn parts(text: &str) -> Vec<String> {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut parts: Vec<String> = clean
        .split(',')
        .flat_map(|p| p.split(" - ").collect::<Vec<_>>())
        .flat_map(|p| p.split(" – ").collect::<Vec<_>>())
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| p.chars().any(char::is_alphanumeric))
        .collect();
    if let Some(first) = parts.first_mut() {
        *first = without_kind(first);
        if first.is_empty() {
            parts.remove(0);
        }
    }
    parts
}

/// Words that name what a flat is, in front of its address on Spanish, Portuguese and Italian
/// cards ("Piso en …", "Apartamento em …", "Appartamento in …"; folded).
const KINDS: &[&str] = &[
    "piso",
    "atico",
    "casa",
    "chalet",
    "duplex",
    "estudio",
    "apartamento",
    "loft",
    "habitacion",
    "planta baja",
    "casa o chalet",
    "chalet adosado",
    "chalet pareado",
    "casa rural",
    "finca rustica",
    "moradia",
    "quarto",
    "appartamento",
    "monolocale",
    "bilocale",
    "trilocale",
    "quadrilocale",
    "pentalocale",
    "attico",
    "mansarda",
    "villa",
    "villetta",
    "stanza",
];

/// The words that join a flat's kind to its address: "en", "em", "in".
const JOINS: &[&str] = &["en", "em", "in"];

/// Street words an Italian card writes straight after the flat's kind ("Bilocale via …").
const ITALIAN_STREETS: &[&str] = &[
    "via", "viale", "piazza", "corso", "largo", "vicolo", "piazzale",
];

/// `first` without a leading "Piso en " / "Bilocale " (before a street word): only when what
/// is dropped is one of [`KINDS`], so a street named "Casa Nova" keeps its name.
fn without_kind(first: &str) -> String {
    let words: Vec<&str> = first.split(' ').collect();
    let folded: Vec<String> = words.iter().map(|w| crate::filter::fold(w)).collect();
    for n in (1..=3).rev() {
        if words.len() <= n {
            continue;
        }
        let kind = folded[..n].join(" ");
        if !KINDS.contains(&kind.as_str()) {
            continue;
        }
        let next = folded[n].as_str();
        if JOINS.contains(&next) && words.len() > n + 1 {
            return words[n + 1..].join(" ");
        }
        if ITALIAN_STREETS.contains(&next) {
            return words[n..].join(" ");
        }
    }
    first.to_owned()
}

/// Whole words (folded) that make a part a street: Spanish, Catalan, Portuguese, Italian,
/// French, English, Dutch, Polish and German ones.
const STREET_WORDS: &[&str] = &[
    "calle",
    "c",
    "avenida",
    "avda",
    "av",
    "paseo",
    "plaza",
    "pza",
    "ronda",
    "camino",
    "travesia",
    "glorieta",
    "carrer",
    "passeig",
    "placa",
    "rua",
    "praca",
    "largo",
    "travessa",
    "via",
    "viale",
    "piazza",
    "corso",
    "vicolo",
    "piazzale",
    "rue",
    "boulevard",
    "bd",
    "bld",
    "chemin",
    "impasse",
    "allee",
    "quai",
    "street",
    "st",
    "road",
    "rd",
    "avenue",
    "ave",
    "lane",
    "ln",
    "drive",
    "dr",
    "square",
    "sq",
    "place",
    "pl",
    "way",
    "crescent",
    "close",
    "terrace",
    "gardens",
    "mews",
    "straat",
    "laan",
    "gracht",
    "kade",
    "plein",
    "weg",
    "ulica",
    "ul",
    "aleja",
    "str",
    "strasse",
    "gasse",
    "platz",
    "damm",
    "ufer",
    "ring",
    "chaussee",
];

/// Endings of German (and Dutch) compound street names, folded: "Hauptstraße" → "hauptstrasse".
const STREET_ENDINGS: &[&str] = &[
    "strasse", "str", "gasse", "weg", "platz", "allee", "damm", "ufer", "chaussee", "steig",
    "straat", "laan", "gracht", "kade", "plein",
];

/// Whether a part names a street.
fn is_street(part: &str) -> bool {
    let folded = crate::filter::fold(part);
    folded.split(' ').any(|w| {
        STREET_WORDS.contains(&w)
            || STREET_ENDINGS
                .iter()
                .any(|e| w.len() > e.len() + 2 && w.ends_with(e))
    })
}

/// Whether a part holds a postcode: 4 or 5 digits ("10115", "1010"), or a UK outward code
/// ("W1", "SW1A", "EC2").
fn has_postcode(part: &str) -> bool {
    part.split(' ').any(|w| {
        let digits = w.chars().filter(char::is_ascii_digit).count();
        let all_digits = digits == w.len();
        let uk = (2..=4).contains(&w.len())
            && w.starts_with(|c: char| c.is_ascii_uppercase())
            && digits > 0
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        (all_digits && (4..=5).contains(&digits)) || uk
    })
}

/// The finest place the parts can name: a street word → a street (a house number alone does
/// not make one: "1010 Wien" is a postcode); a postcode, or more than one part (a district
/// and its city) → a district; one part alone → a city.
fn best_precision(parts: &[String]) -> Precision {
    if parts.iter().any(|p| is_street(p)) {
        Precision::Street
    } else if parts.len() > 1 || parts.iter().any(|p| has_postcode(p)) {
        Precision::District
    } else {
        Precision::City
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> AddressQuery {
        query(text).unwrap()
    }

    #[test]
    fn idealista_titles_lose_the_flats_kind() {
        let a = q("Piso en calle de Alcalá, Goya, Madrid");
        assert_eq!(a.text, "calle de Alcalá, Goya, Madrid");
        assert_eq!(a.best, Precision::Street);
        assert_eq!(a.key, "calle de alcala goya madrid");
        let a = q("Ático en Calle Mayor, 3, Sol, Madrid");
        assert_eq!(a.text, "Calle Mayor, 3, Sol, Madrid");
        let a = q("Casa o chalet independiente en Urbanización Los Altos, Boadilla del Monte");
        // Four words before "en" are not a kind we know: kept (the geocoder may still read it).
        assert_eq!(
            a.text,
            "Casa o chalet independiente en Urbanización Los Altos, Boadilla del Monte"
        );
        let a = q("Chalet adosado en Carrer de Mallorca 12, Eixample, Barcelona");
        assert_eq!(a.text, "Carrer de Mallorca 12, Eixample, Barcelona");
        assert_eq!(a.best, Precision::Street);
        let a = q("Piso en Chamberí, Madrid");
        assert_eq!(a.text, "Chamberí, Madrid");
        assert_eq!(a.best, Precision::District);
        // Portuguese and Italian.
        assert_eq!(
            q("Apartamento em Rua Augusta, Baixa, Lisboa").text,
            "Rua Augusta, Baixa, Lisboa"
        );
        assert_eq!(
            q("Bilocale via Mario de' Fiori, Spagna, Roma").text,
            "via Mario de' Fiori, Spagna, Roma"
        );
        assert_eq!(
            q("Appartamento in Via Roma 5, Torino").text,
            "Via Roma 5, Torino"
        );
    }

    #[test]
    fn a_street_named_like_a_kind_keeps_its_name() {
        assert_eq!(q("Casa Nova 4, Porto").text, "Casa Nova 4, Porto");
        assert_eq!(q("Villa Borghese, Roma").text, "Villa Borghese, Roma");
        assert_eq!(q("Piso").text, "Piso");
    }

    #[test]
    fn kleinanzeigen_postcode_and_district() {
        let a = q("10115 Berlin - Mitte");
        assert_eq!(a.text, "10115 Berlin, Mitte");
        assert_eq!(a.best, Precision::District);
        assert_eq!(a.key, "10115 berlin mitte");
        let a = q("1010 Wien");
        assert_eq!(a.best, Precision::District);
        assert_eq!(q("Düsseldorf-Derendorf").best, Precision::City);
        assert_eq!(q("Berlin").best, Precision::City);
        assert_eq!(q("Mitte, Berlin").best, Precision::District);
    }

    #[test]
    fn streets_are_recognised_across_languages() {
        for text in [
            "Tottenham Street, Fitzrovia, W1",
            "276 Midwood St, Brooklyn, NY 11225",
            "Hauptstraße 5, 80331 München",
            "Kastanienallee 12, Berlin",
            "Bilderdijkkade 4, Amsterdam",
            "ul. Marszałkowska 10, Warszawa",
            "12 rue de Rivoli, Paris",
            "Calle Mayor 3, Sol, Madrid",
            "Mariahilfer Str. 40, 1070 Wien",
        ] {
            assert_eq!(q(text).best, Precision::Street, "{text}");
        }
        // Words that only end like a street name are not streets.
        assert_eq!(q("Sol, Madrid").best, Precision::District);
        assert_eq!(q("Fitzrovia, W1").best, Precision::District);
        assert_eq!(q("Fitzrovia W1").best, Precision::District);
    }

    #[test]
    fn one_address_is_one_key() {
        let a = q("Calle Mayor 3, Sol, Madrid");
        let b = q("calle mayor 3,  sol, MADRID");
        let c = q("Piso en Calle Mayor 3 , Sol ,Madrid");
        let d = q("Ático en calle Mayor 3, Sol, Madrid.");
        assert_eq!(a.key, b.key);
        assert_eq!(a.key, c.key);
        assert_eq!(a.key, d.key);
        assert_eq!(a.key, "calle mayor 3 sol madrid");
        assert_ne!(a.key, q("Calle Mayor 5, Sol, Madrid").key);
        assert_eq!(
            cache_key("Gran Vía,  MADRID"),
            cache_key("gran via, madrid")
        );
    }

    #[test]
    fn nothing_to_look_up_is_no_query() {
        assert_eq!(query(""), None);
        assert_eq!(query(" , - ,"), None);
        assert_eq!(query(&"a".repeat(MAX_ADDRESS_CHARS + 1)), None);
        assert!(query(&"a".repeat(MAX_ADDRESS_CHARS)).is_some());
        // Control characters never reach a geocoder.
        assert_eq!(
            q("Calle\u{0}Mayor\n3,\tMadrid").text,
            "Calle Mayor 3, Madrid"
        );
    }
}
