//! Reading the figures a card shows: price, rooms, area, and the text around them.
//!
//! Portals write "1.250 €/mes", "1,250.50 $", "2 hab.", "3 Zi.", "60 m²"; these helpers turn such
//! text into numbers. They are deliberately unit-driven: a number only counts as rooms or area
//! when its unit follows it, so a freshness chip ("28 minutos") or a floor ("2ª planta") is never
//! read as a figure.

use regex::Regex;
use std::sync::LazyLock;

/// Longest text kept for one field; protects memory against unclosed elements.
pub(crate) const FIELD_CAP: usize = 4 * 1024;

// ASCII word boundaries (`(?-u:\b)`): the regex crate's fast engines give up on Unicode ones
// as soon as the text has a non-ASCII byte ("60 m²", "3ª planta"), which is most details.
static ROOMS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(?-u:\b)(\d+(?:[.,]\d+)?)\+?(?:\s*[-–]\s*\d+(?:[.,]\d+)?)?\s*(?:habitaciones|habitación|habs?|dormitorios?|dorm|zimmer|zi|bedrooms?|bedroom|beds?|bds?|br|rooms?|local[ei]|camer[ae]|quartos?|pièces?|chambres?|(?:slaap)?kamers?|pokoje|pokoi|pokój|rum|værelser|rom)(?-u:\b)",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

// Portuguese and French typology: "T2" is two bedrooms (a chip on its own, or a word in a
// card's text: "Apartamento T3 em Lisboa").
static TYPOLOGY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?-u:\b)T(\d{1,2})(?-u:\b)").unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

static AREA: LazyLock<Regex> = LazyLock::new(|| {
    // A range ("70,1 - 177,73 m²": from 70.1) is read as its lower bound.
    Regex::new(r"(?i)(\d[\d.,]*)(?:\s*[-–]\s*\d[\d.,]*)?\s*(?:m²|m2|m\^2|qm|sqm|mq|(ft²|ft2|sq\.?\s?ft|sqft|square\s+feet))(?:[^\p{L}\p{N}]|$)")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// Square metres in a square foot.
const M2_PER_FT2: f64 = 0.092_903_04;

/// A price in a card's text: a number with a currency sign or code right before or after it
/// ("1.250 €", "€ 1.250,-", "£1,500 pcm", "CHF 2'100.–", "4 500 zł", "$2,100"). The number is
/// written with thousands groups of exactly three digits, so "3 Zi. 1.250 €" is not 31250.
static PRICE_IN_TEXT: LazyLock<Regex> = LazyLock::new(|| {
    const NUMBER: &str = r"(\d{1,3}(?:[.,'\x{a0}\x{202f} ]\d{3})+(?:[.,]\d{1,2})?|\d+(?:[.,]\d{1,2})?)(?:,-|\.–|,–)?";
    const SIGN: &str = r"(€|£|\$|CHF|EUR|GBP|USD|SEK|NOK|DKK|PLN|zł|kr\.?|Fr\.)";
    Regex::new(&format!(r"(?i){SIGN}\s?{NUMBER}|{NUMBER}\s?{SIGN}"))
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// What, right after a price, makes it a price per area ("12,50 €/m²", "£3 per sq ft").
static PER_AREA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:/|pro|per|je|al)\s*(?:m²|m2|qm|mq|sq)")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// A listing id in embedded JSON: a string or a number, as sites write it.
#[derive(serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum JsonId {
    S(String),
    N(u64),
}

impl JsonId {
    /// The id as text; `None` when it is blank.
    pub(crate) fn into_id(self) -> Option<String> {
        match self {
            Self::S(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
            Self::N(n) => Some(n.to_string()),
        }
    }
}

/// Reads a number written with thousands and decimal separators in any of the usual styles:
/// "1.250" and "1,250" are 1250; "1.250,50" and "1,250.50" are 1250.5; "415,80" is 415.8.
pub(crate) fn parse_number(raw: &str) -> Option<f64> {
    let cleaned: String = raw
        .chars()
        .filter(|c| !matches!(c, ' ' | '\u{a0}' | '\u{202f}' | '\''))
        .collect();
    let cleaned = cleaned.trim_matches(|c| c == '.' || c == ',');
    if cleaned.is_empty()
        || !cleaned
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b',')
    {
        return None;
    }
    let dots = cleaned.matches('.').count();
    let commas = cleaned.matches(',').count();
    let normal = match (dots, commas) {
        (0, 0) => cleaned.to_owned(),
        (_, 0) | (0, _) => {
            let sep = if dots > 0 { '.' } else { ',' };
            let count = dots + commas;
            let (head, tail) = cleaned.rsplit_once(sep)?;
            let thousands = count > 1 || (tail.len() == 3 && !head.is_empty() && head.len() <= 3);
            if thousands {
                cleaned.replace(sep, "")
            } else {
                format!("{head}.{tail}")
            }
        }
        _ => {
            // Both kinds: the last one is the decimal separator.
            let last_dot = cleaned.rfind('.').unwrap_or(0);
            let last_comma = cleaned.rfind(',').unwrap_or(0);
            let (thousands, decimal) = if last_dot > last_comma {
                (',', '.')
            } else {
                ('.', ',')
            };
            cleaned.replace(thousands, "").replace(decimal, ".")
        }
    };
    normal.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// The first number in `text` with its separators ("1.250" in "1.250 €/mes").
fn first_number(text: &str) -> Option<&str> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let rest = &text[start..];
    let mut end = 0;
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_ascii_digit() {
            end = i + 1;
        } else if matches!(c, '.' | ',' | ' ' | '\u{a0}' | '\u{202f}' | '\'') {
            // A separator only counts when a digit follows it.
            if !chars.peek().is_some_and(|(_, n)| n.is_ascii_digit()) {
                break;
            }
        } else {
            break;
        }
    }
    Some(&rest[..end])
}

/// The currency a price text shows, as an ISO code where the symbol is unambiguous
/// (€ → EUR, £ → GBP); a bare `$` stays `$` because it names many currencies.
pub(crate) fn currency_of(text: &str) -> Option<String> {
    const TABLE: [(&str, &str); 16] = [
        ("€", "EUR"),
        ("EUR", "EUR"),
        ("£", "GBP"),
        ("GBP", "GBP"),
        ("CHF", "CHF"),
        ("Fr.", "CHF"),
        ("US$", "USD"),
        ("USD", "USD"),
        ("R$", "BRL"),
        ("zł", "PLN"),
        ("PLN", "PLN"),
        ("SEK", "SEK"),
        ("NOK", "NOK"),
        ("DKK", "DKK"),
        ("CA$", "CAD"),
        ("$", "$"),
    ];
    TABLE
        .iter()
        .find(|(needle, _)| text.contains(needle))
        .map(|(_, code)| (*code).to_owned())
}

/// "1.250 €/mes" → (1250.0, Some("EUR")).
pub(crate) fn parse_price(text: &str) -> Option<(f64, Option<String>)> {
    let value = parse_number(first_number(text)?)?;
    Some((value, currency_of(text)))
}

/// "2 hab." / "3 Zi." / "3 Zimmer" / "2 bd" / "3 rooms" / "T2" → the first such count in
/// `text` (a chip or a card's whole text). `None` unless a room unit follows the number.
pub(crate) fn parse_rooms(text: &str) -> Option<f64> {
    if let Some(c) = ROOMS.captures(text) {
        return parse_number(c.get(1)?.as_str());
    }
    let c = TYPOLOGY.captures(text)?;
    c.get(1)?.as_str().parse().ok()
}

/// Rooms from a field the user pointed at: a bare number ("3", `data-rooms="3"`) counts too,
/// since the user said what it is.
pub(crate) fn parse_rooms_field(text: &str) -> Option<f64> {
    parse_rooms(text).or_else(|| parse_number(text.trim()))
}

/// Area from a field the user pointed at: a bare number counts too.
pub(crate) fn parse_area_field(text: &str) -> Option<f64> {
    parse_area(text).or_else(|| parse_number(text.trim()))
}

/// "60 m²" / "60 m2" / "60m²" / "89 qm" / "147,7 m²" → the first such area in `text`. `None`
/// unless an area unit follows the number.
pub(crate) fn parse_area(text: &str) -> Option<f64> {
    let c = AREA.captures(text)?;
    let value = parse_number(c.get(1)?.as_str())?;
    Some(if c.get(2).is_some() {
        (value * M2_PER_FT2 * 10.0).round() / 10.0
    } else {
        value
    })
}

/// The first price in a card's text: a number beside a currency, not a price per area
/// ("12,50 €/m²"); a number without its currency (a photo counter, a floor, a postcode) never.
pub(crate) fn price_in_text(text: &str) -> Option<(f64, Option<String>)> {
    for c in PRICE_IN_TEXT.captures_iter(text) {
        let whole = c.get(0)?;
        if PER_AREA.is_match(&text[whole.end()..]) {
            continue;
        }
        let (Some(sign), Some(number)) = (c.get(1).or(c.get(4)), c.get(2).or(c.get(3))) else {
            continue;
        };
        // A code written in letters must stand alone: "12 Kr" is no price in "12 Krefeld".
        let letters = |c: Option<char>| c.is_some_and(char::is_alphabetic);
        if sign.as_str().ends_with(char::is_alphabetic)
            && letters(text[sign.end()..].chars().next())
            || sign.as_str().starts_with(char::is_alphabetic)
                && letters(text[..sign.start()].chars().next_back())
        {
            continue;
        }
        let Some(value) = parse_number(number.as_str()).filter(|v| *v > 0.0) else {
            continue;
        };
        return Some((value, currency_of(sign.as_str())));
    }
    None
}

/// Decodes the HTML character references a streaming parser leaves in text and attributes.
///
/// Hand-written rather than a crate: we need numeric references and the handful of named ones
/// that occur in titles and prices, not the full 2,000-entry table; unknown names stay as is.
pub(crate) fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let decoded = rest.find(';').filter(|&semi| semi <= 10).and_then(|semi| {
            let name = &rest[1..semi];
            let ch = if let Some(num) = name.strip_prefix('#') {
                let code = match num.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => num.parse().ok(),
                };
                code.and_then(char::from_u32)
            } else {
                match name {
                    "amp" => Some('&'),
                    "lt" => Some('<'),
                    "gt" => Some('>'),
                    "quot" => Some('"'),
                    "apos" => Some('\''),
                    "nbsp" => Some('\u{a0}'),
                    "euro" => Some('€'),
                    "pound" => Some('£'),
                    "sup2" => Some('²'),
                    "ndash" => Some('–'),
                    "mdash" => Some('—'),
                    "hellip" => Some('…'),
                    _ => None,
                }
            };
            ch.map(|c| (c, semi + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Decodes entities and collapses runs of whitespace (including no-break spaces) to one space.
pub(crate) fn clean_text(raw: &str) -> String {
    let decoded = decode_entities(raw);
    let mut out = String::with_capacity(decoded.len());
    for word in decoded.split(|c: char| c.is_whitespace()) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// What separates the texts of two elements in a card's text: a whitespace that is not a
/// thousands separator, so "Straße 101" and "520 €" are not "101 520 €", while "3" and "Zi."
/// in two elements still read as "3 Zi.".
pub(crate) const BETWEEN_TEXTS: char = '\u{2003}';

/// [`clean_text`] for a card's text, keeping [`BETWEEN_TEXTS`] where two texts met.
pub(crate) fn clean_facts(raw: &str) -> String {
    let decoded = decode_entities(raw);
    let mut out = String::with_capacity(decoded.len());
    let mut gap: Option<char> = None;
    for c in decoded.chars() {
        if c.is_whitespace() {
            if c == BETWEEN_TEXTS || gap.is_none() {
                gap = Some(c);
            }
            continue;
        }
        if let Some(g) = gap.take().filter(|_| !out.is_empty()) {
            out.push(if g == BETWEEN_TEXTS { g } else { ' ' });
        }
        out.push(c);
    }
    out
}

/// [`clean_text`], or `None` when nothing is left.
pub(crate) fn non_empty(raw: &str) -> Option<String> {
    Some(clean_text(raw)).filter(|s| !s.is_empty())
}

/// Appends a text chunk to a field buffer, up to [`FIELD_CAP`].
pub(crate) fn push_capped(buf: &mut String, chunk: &str) {
    push_capped_to(buf, chunk, FIELD_CAP);
}

/// Appends a text chunk to a buffer, up to `cap` bytes (cut at a character boundary).
pub(crate) fn push_capped_to(buf: &mut String, chunk: &str, cap: usize) {
    if buf.len() >= cap {
        return;
    }
    let room = cap - buf.len();
    if chunk.len() <= room {
        buf.push_str(chunk);
    } else {
        let mut cut = room;
        while !chunk.is_char_boundary(cut) {
            cut -= 1;
        }
        buf.push_str(&chunk[..cut]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_in_the_usual_styles() {
        assert_eq!(
            parse_price("1.250 €/mes"),
            Some((1250.0, Some("EUR".into())))
        );
        assert_eq!(parse_price("1,250.50 $"), Some((1250.5, Some("$".into()))));
        assert_eq!(parse_price("950 €"), Some((950.0, Some("EUR".into()))));
        assert_eq!(parse_price("€1,200"), Some((1200.0, Some("EUR".into()))));
        assert_eq!(
            parse_price("1.250,50 €"),
            Some((1250.5, Some("EUR".into())))
        );
        assert_eq!(parse_price("415,80 €"), Some((415.8, Some("EUR".into()))));
        assert_eq!(
            parse_price("1\u{a0}250 € / mois"),
            Some((1250.0, Some("EUR".into())))
        );
        assert_eq!(
            parse_price("12.500.000 €"),
            Some((12_500_000.0, Some("EUR".into())))
        );
        assert_eq!(parse_price("Precio a consultar"), None);
        assert_eq!(parse_price("1.200€/mes").map(|p| p.0), Some(1200.0));
    }

    #[test]
    fn rooms_need_their_unit() {
        for (text, want) in [
            ("2 hab.", Some(2.0)),
            ("3 Zi.", Some(3.0)),
            ("2 bd", Some(2.0)),
            ("1 habitación", Some(1.0)),
            ("2,5 Zimmer", Some(2.5)),
            ("3 locali", Some(3.0)),
            ("1 locale", Some(1.0)),
            // "5+ locali": at least five, read as five (a `min_rooms = 5` filter keeps it).
            ("5+ locali", Some(5.0)),
            ("4+ bedrooms", Some(4.0)),
            ("T2", Some(2.0)),
            ("Apartamento T3 em Lisboa", Some(3.0)),
            ("3 Zimmer", Some(3.0)),
            ("3 hab.", Some(3.0)),
            ("3 rooms", Some(3.0)),
            ("Wohnung · 89 m² · 3 Zi. · Balkon", Some(3.0)),
            ("BT2 cable", None),
            ("3er WG", None),
            ("5+", None),
            ("28 minutos", None),
            ("2ª planta exterior con ascensor", None),
            ("60 m²", None),
            ("Garaje incluido", None),
        ] {
            assert_eq!(parse_rooms(text), want, "{text}");
        }
    }

    #[test]
    fn area_needs_its_unit() {
        for (text, want) in [
            ("60 m²", Some(60.0)),
            ("60 m2", Some(60.0)),
            ("60m²", Some(60.0)),
            ("38,48 m²", Some(38.48)),
            ("1.200 m²", Some(1200.0)),
            ("89 qm", Some(89.0)),
            ("55 mq · 2 Locali · Piano T", Some(55.0)),
            ("147,7 m²", Some(147.7)),
            ("147.7 m²", Some(147.7)),
            ("Miete 800 €, 12,50 €/m², Fläche 64 m²", Some(64.0)),
            ("28 minutos", None),
            ("Garaje opc. 225 €/mes", None),
            ("2 hab.", None),
        ] {
            assert_eq!(parse_area(text), want, "{text}");
        }
    }

    #[test]
    fn texts_of_two_elements_stay_apart_for_prices_not_for_units() {
        let facts = clean_facts("Stra&szlig;e 101\u{2003}  520 €\u{2003}3\u{2003}Zi.");
        assert_eq!(price_in_text(&facts), Some((520.0, Some("EUR".into()))));
        assert_eq!(parse_rooms(&facts), Some(3.0));
        assert_eq!(clean_facts("  a \n b\u{2003} "), "a b");
    }

    #[test]
    fn a_price_in_text_needs_its_currency() {
        for (text, want) in [
            ("3 Zi. · 89 m² · 1.250 € VB", Some((1250.0, "EUR"))),
            ("€ 1.850 /mnd", Some((1850.0, "EUR"))),
            ("£1,500 pcm (£346 pw)", Some((1500.0, "GBP"))),
            ("CHF 2'100.–", Some((2100.0, "CHF"))),
            ("4 500 zł", Some((4500.0, "PLN"))),
            ("Miete 12,50 €/m², gesamt 800 €", Some((800.0, "EUR"))),
            ("$2,100 / 2br - 900ft²", Some((2100.0, "$"))),
            ("1.250,- €", Some((1250.0, "EUR"))),
            ("Foto 18 · 2. OG · 10115 Berlin", None),
            ("Preis auf Anfrage", None),
            ("12 Krefeld, 3 Zimmer", None),
            ("0 €", None),
        ] {
            assert_eq!(
                price_in_text(text),
                want.map(|(v, c)| (v, Some(c.to_owned()))),
                "{text}"
            );
        }
    }

    #[test]
    fn square_feet_become_square_metres() {
        assert_eq!(parse_area("900ft²"), Some(83.6));
        assert_eq!(parse_area("1,200 sq ft"), Some(111.5));
        assert_eq!(parse_area("650 sqft"), Some(60.4));
        // A range is read as its lower bound.
        assert_eq!(parse_area("70,1 - 177,73 m²"), Some(70.1));
        assert_eq!(parse_rooms("2 - 5 Zimmer"), Some(2.0));
        assert_eq!(parse_rooms("2br - 900ft²"), Some(2.0));
        assert_eq!(parse_rooms("3 kamers"), Some(3.0));
        assert_eq!(parse_rooms("2 pokoje"), Some(2.0));
        assert_eq!(parse_rooms("3 rum och kök"), Some(3.0));
    }

    #[test]
    fn a_field_the_user_named_may_be_a_bare_number() {
        assert_eq!(parse_rooms_field(" 3 "), Some(3.0));
        assert_eq!(parse_rooms_field("2,5 Zi."), Some(2.5));
        assert_eq!(parse_rooms_field("ab 3"), None);
        assert_eq!(parse_area_field("72,5"), Some(72.5));
        assert_eq!(parse_area_field("72 m²"), Some(72.0));
        assert_eq!(parse_area_field("groß"), None);
    }

    #[test]
    fn entities_and_whitespace() {
        assert_eq!(clean_text("  04&nbsp;sep \n "), "04 sep");
        assert_eq!(
            clean_text("O&apos;Donnell &amp; co &#233;&#xE9; &bogus; & x"),
            "O'Donnell & co éé &bogus; & x"
        );
        let mut buf = String::new();
        push_capped(&mut buf, &"é".repeat(FIELD_CAP));
        assert!(buf.len() <= FIELD_CAP);
    }
}
