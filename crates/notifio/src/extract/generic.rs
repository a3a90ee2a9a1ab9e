//! Generic extraction for sites without a built-in profile, configured per search.
//!
//! Three ways to find listings (docs/sites.md#generic-sites-any-other-site): a CSS selector per card with an id attribute (or
//! the card's first link as id), a link regex whose first capture group is the id, or the
//! page's JSON-LD `ItemList`. Selectors and regexes are checked when the profile is built, so
//! a typo is a config error at start, not a silent "no listings" at run time. A card's fields
//! come from the sub-selectors the user gave, else from defaults that hold on real portals:
//! the first heading is the title (not the photo counter in the first link), rooms and area
//! are read from the card's text by their units, and the picture is the largest image that is
//! not an icon (docs/sites.md).

use super::html::{
    CardMark, CardRules, Field, FieldRule, ImagePick, ImageRule, RawCard, scan_cards, scoped,
};
use super::parse::{
    FIELD_CAP, clean_facts, clean_text, decode_entities, non_empty, parse_area, parse_area_field,
    parse_price, parse_rooms, parse_rooms_field, price_in_text,
};
use super::{Extraction, ProfileError, SiteProfile, absolute, bounds, nothing_found};
use crate::listing::{CardSpec, FieldSpec, Listing, ListingField, ListingSpec};
use lol_html::Selector;
use memchr::memmem;
use notifio_policy::Markers;
use regex::Regex;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::LazyLock;

/// A site read through the search's `listing` spec.
#[derive(Debug, Clone)]
pub struct Generic {
    mode: Mode,
    /// The card selector, for a browser check to know when the cards are there.
    ready: Option<String>,
    /// Where the next page's link is, best first (`listing.next`, else none: `rel="next"`).
    next: Vec<Selector>,
}

#[derive(Debug, Clone)]
enum Mode {
    Cards(Box<CardRules>),
    Link(Regex),
    JsonLd,
}

/// Where the title is when the user names nothing: the card's first heading.
const DEFAULT_TITLE: &str = "h1, h2, h3, h4, h5, h6";
/// Where the price is when the user names nothing.
const DEFAULT_PRICE: &str = "[class*=\"price\"]";
/// Where the description is when the user names nothing.
const DEFAULT_DESCRIPTION: &str = "[class*=\"description\"]";
/// Elements that may paint the picture as a CSS background.
const BACKGROUNDS: &str = "[style*=\"url(\"]";

fn selector(text: &str) -> Result<Selector, ProfileError> {
    selector_within(text, bounds::MAX_DESCENDANT_STEPS)
}

/// A selector that chains at most `steps` descendant steps ([`bounds::check_selector`]).
fn selector_within(text: &str, steps: usize) -> Result<Selector, ProfileError> {
    let invalid = |reason: String| ProfileError::InvalidSelector {
        selector: shortened(text),
        reason,
    };
    bounds::check_selector(text, steps).map_err(invalid)?;
    text.parse().map_err(|e| invalid(format!("{e}")))
}

/// `text` as an error quotes it: at most 80 characters.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A non-empty attribute name, trimmed and lowercased (HTML attribute names are ASCII
/// case-insensitive, and lol_html looks them up as written).
fn attr_name(attr: Option<&str>) -> Option<String> {
    attr.map(|a| a.trim().to_ascii_lowercase())
        .filter(|a| !a.is_empty())
}

impl Generic {
    /// Builds the profile for one spec.
    ///
    /// # Errors
    /// A selector or regex that does not parse, or a link regex without a capture group.
    pub fn new(spec: &ListingSpec) -> Result<Self, ProfileError> {
        let mode = match spec {
            ListingSpec::Selector(card) => Mode::Cards(Box::new(card_rules(card)?)),
            ListingSpec::Link { link, .. } => {
                let re = Regex::new(link).map_err(|e| ProfileError::InvalidRegex {
                    regex: link.clone(),
                    reason: e.to_string(),
                })?;
                if re.captures_len() < 2 {
                    return Err(ProfileError::InvalidRegex {
                        regex: link.clone(),
                        reason: "it needs one capture group around the id, e.g. `/listing/(\\d+)`"
                            .into(),
                    });
                }
                Mode::Link(re)
            }
            ListingSpec::JsonLd { .. } => Mode::JsonLd,
        };
        let ready = match spec {
            ListingSpec::Selector(card) => Some(card.selector.clone()),
            _ => None,
        };
        // The element `next` names may be the link itself or hold it (`li.next`).
        let next = match spec.next() {
            Some(next) => vec![selector(next)?, selector(&scoped(next, "a[href]"))?],
            None => Vec::new(),
        };
        Ok(Self { mode, ready, next })
    }
}

fn card_rules(spec: &CardSpec) -> Result<CardRules, ProfileError> {
    let card = spec.selector.as_str();
    let card_selector = selector(card)?;
    // Sub-selectors are checked on their own first, so an error quotes what the user wrote
    // rather than the scoped form.
    let inner = |text: &str| -> Result<Selector, ProfileError> {
        // Read inside the card, which adds a step.
        selector_within(text, bounds::MAX_DESCENDANT_STEPS - 1)?;
        selector(&scoped(card, text))
    };
    let field = |custom: &Option<FieldSpec>, default: Option<&str>| -> Result<_, ProfileError> {
        Ok(match (custom, default) {
            (Some(f), _) => Some(FieldRule {
                selector: inner(&f.selector)?,
                attr: attr_name(f.attr.as_deref()),
            }),
            (None, Some(d)) => Some(FieldRule::text(inner(d)?)),
            (None, None) => None,
        })
    };
    // Where a field the user (or a profile) named yields nothing sane, the generic reader's
    // rule is read too: the fallback.
    let fallback = |custom: &Option<FieldSpec>, default: &str| -> Result<_, ProfileError> {
        custom
            .as_ref()
            .map(|_| Ok(FieldRule::text(inner(default)?)))
            .transpose()
    };
    let id_attr = spec.id_attr.clone().filter(|a| !a.trim().is_empty());
    let largest = || -> Result<ImageRule, ProfileError> {
        Ok(ImageRule {
            selector: inner("img")?,
            pick: ImagePick::Largest,
        })
    };
    let (image, image_fallback) = match &spec.image {
        Some(f) => (
            ImageRule {
                selector: inner(&f.selector)?,
                pick: ImagePick::First {
                    attr: attr_name(f.attr.as_deref()),
                },
            },
            Some(largest()?),
        ),
        None => (largest()?, None),
    };
    Ok(CardRules {
        card: card_selector,
        // Cards without the id attribute yield no listing, so the page outside the first and
        // last marked element need not be read.
        mark: id_attr
            .as_deref()
            .and_then(|a| CardMark::for_selector(card, a)),
        id_attr,
        link: inner("a[href]")?,
        title: field(&spec.title, Some(DEFAULT_TITLE))?,
        price: field(&spec.price, Some(DEFAULT_PRICE))?,
        // Without a rule, rooms and area are found in the card's text by their units.
        rooms: field(&spec.rooms, None)?,
        area: field(&spec.area, None)?,
        description: field(&spec.description, Some(DEFAULT_DESCRIPTION))?,
        title_fallback: fallback(&spec.title, DEFAULT_TITLE)?,
        price_fallback: fallback(&spec.price, DEFAULT_PRICE)?,
        description_fallback: fallback(&spec.description, DEFAULT_DESCRIPTION)?,
        image_fallback,
        details: None,
        image: Some(image),
        background: spec
            .image
            .is_none()
            .then(|| inner(BACKGROUNDS))
            .transpose()?,
        // The card's text: where rooms and area are found by their units, and where a price
        // or a figure a rule missed is looked for.
        card_text: true,
    })
}

impl SiteProfile for Generic {
    fn name(&self) -> &str {
        "generic"
    }

    fn markers(&self) -> Markers {
        Markers::generic()
    }

    fn ready_selector(&self) -> Option<&str> {
        self.ready.as_deref()
    }

    fn next_page(&self, body: &[u8], page_url: &url::Url, _page: u32) -> Option<url::Url> {
        let rel_next = super::REL_NEXT.as_ref()?;
        let ways: Vec<&Selector> = match self.next.as_slice() {
            [] => vec![rel_next],
            given => given.iter().collect(),
        };
        super::linked_next_page(body, page_url, &ways)
    }

    fn extract(&self, body: &[u8], page_url: &url::Url) -> Extraction {
        match &self.mode {
            Mode::Cards(rules) => extract_cards(body, page_url, rules),
            Mode::Link(re) => extract_links(body, page_url, re),
            Mode::JsonLd => json_ld_list(body, page_url),
        }
    }
}

fn extract_cards(body: &[u8], page_url: &url::Url, rules: &CardRules) -> Extraction {
    let Ok(cards) = scan_cards(body, rules) else {
        return Extraction::LayoutUnknown;
    };
    if cards.is_empty() {
        return nothing_found(body);
    }
    let mut out: Vec<Listing> = Vec::with_capacity(cards.len());
    let mut seen = std::collections::HashSet::new();
    for card in cards {
        let Some(listing) = card_listing(&card, page_url, rules) else {
            continue;
        };
        if seen.insert(listing.id.clone()) {
            out.push(listing);
        }
    }
    Extraction::Listings(out)
}

/// One generic card as a listing; `None` when it has no id.
///
/// A field the rules name is read there first; when that yields nothing, or a value that fails
/// its sanity check ([`super::sane`]), it is read as a generic card is read (a heading for the
/// title, an element whose class says price, a price beside its currency in the card's text,
/// rooms and area by their units, the largest photo), and the listing says which fields came
/// that way ([`Listing::fallback`]). A field a rule names and the card does not show stays
/// empty: a number is never taken from a photo counter, a floor or a postcode.
fn card_listing(card: &RawCard, page_url: &url::Url, rules: &CardRules) -> Option<Listing> {
    let url = card.link.as_deref().and_then(|h| absolute(page_url, h));
    let id = if rules.id_attr.is_some() {
        card.id.clone()?
    } else {
        // Without an id attribute the card's first link is its identity.
        let mut u = url::Url::parse(url.as_deref()?).ok()?;
        u.set_fragment(None);
        u.to_string()
    };
    let whole_text = clean_facts(&card.whole_text);
    // The title as shown, for figures only it states.
    let title_text = card
        .text(Field::Title)
        .or_else(|| card.text(Field::TitleFallback))
        .and_then(non_empty);
    let mut fallback = Vec::new();
    let mut took = |field: ListingField, used: bool| {
        if used {
            fallback.push(field);
        }
    };

    let own_title = card
        .text(Field::Title)
        .and_then(non_empty)
        .filter(|t| super::sane::title(t));
    let title = match own_title {
        Some(t) => Some(t),
        None => {
            let found = card
                .text(Field::TitleFallback)
                .and_then(non_empty)
                .or_else(|| card.link_title.as_deref().and_then(non_empty))
                .or_else(|| card.text(Field::LinkText).and_then(non_empty))
                .filter(|t| super::sane::title(t));
            took(
                ListingField::Title,
                found.is_some() && rules.title_fallback.is_some(),
            );
            found
        }
    };

    let own_price = card
        .text(Field::Price)
        .and_then(non_empty)
        .and_then(|t| parse_price(&t))
        .filter(|p| super::sane::price(p.0));
    let price = match own_price {
        Some(p) => Some(p),
        None => {
            let by_class = card
                .text(Field::PriceFallback)
                .and_then(non_empty)
                .and_then(|t| price_in_text(&t).or_else(|| parse_price(&t)));
            let found = by_class
                .or_else(|| price_in_text(&whole_text))
                .filter(|p| super::sane::price(p.0));
            took(
                ListingField::Price,
                found.is_some() && rules.price_fallback.is_some(),
            );
            found
        }
    };

    // A field the rules named is read as they said (a bare "3" is 3 rooms); otherwise, or when
    // it yields nothing sane, the first figure with its unit in the card's text.
    let mut figure = |rule: &Option<FieldRule>,
                      field: Field,
                      which: ListingField,
                      named: fn(&str) -> Option<f64>,
                      found: fn(&str) -> Option<f64>,
                      sane: fn(f64) -> bool| {
        let own = rule
            .as_ref()
            .and_then(|_| card.text(field).and_then(non_empty))
            .and_then(|t| named(&t))
            .filter(|v| sane(*v));
        own.or_else(|| {
            // The card's facts first; a figure only its title states ("2-Zimmer-Wohnung") after.
            let v = found(&whole_text)
                .or_else(|| title_text.as_deref().and_then(found))
                .filter(|v| sane(*v));
            took(which, v.is_some() && rule.is_some());
            v
        })
    };
    let rooms = figure(
        &rules.rooms,
        Field::Rooms,
        ListingField::Rooms,
        parse_rooms_field,
        parse_rooms,
        super::sane::rooms,
    );
    let area_m2 = figure(
        &rules.area,
        Field::Area,
        ListingField::Area,
        parse_area_field,
        parse_area,
        super::sane::area,
    );
    let image = match card.image() {
        Some(i) => Some(i),
        None => {
            let i = card.fallback_image();
            took(ListingField::Image, i.is_some());
            i
        }
    };
    Some(Listing {
        id,
        title,
        price: price.as_ref().map(|p| p.0),
        currency: price.and_then(|p| p.1),
        rooms,
        area_m2,
        url,
        image: image.and_then(|h| absolute(page_url, h)),
        description: card
            .text(Field::Description)
            .and_then(non_empty)
            .or_else(|| card.text(Field::DescriptionFallback).and_then(non_empty)),
        fallback,
    })
}

/// Start tags of links with their href, found by a byte-level regex. Link mode needs no HTML
/// parser: a page with thousands of menu and footer links would otherwise make the parser
/// materialise every one of them.
static LINK_TAG: LazyLock<regex::bytes::Regex> = LazyLock::new(|| {
    regex::bytes::Regex::new(
        r#"(?i-u)<a\s[^>]*?href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))[^>]*>"#,
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// The text of a link: what follows its start tag up to `</a`, tags removed.
fn link_text(after: &[u8]) -> String {
    let window = &after[..after.len().min(FIELD_CAP)];
    let end = memmem::find(window, b"</a")
        .or_else(|| memmem::find(window, b"</A"))
        .unwrap_or(window.len());
    let mut text = Vec::with_capacity(end);
    let mut in_tag = false;
    for &b in &window[..end] {
        match b {
            b'<' => in_tag = true,
            b'>' if in_tag => {
                in_tag = false;
                text.push(b' ');
            }
            _ if !in_tag => text.push(b),
            _ => {}
        }
    }
    clean_text(&String::from_utf8_lossy(&text))
}

fn extract_links(body: &[u8], page_url: &url::Url, re: &Regex) -> Extraction {
    let mut out: Vec<Listing> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for caps in LINK_TAG.captures_iter(body) {
        let Some(raw) = caps.get(1).or_else(|| caps.get(2)).or_else(|| caps.get(3)) else {
            continue;
        };
        let href = decode_entities(String::from_utf8_lossy(raw.as_bytes()).trim());
        // `is_match` first: most links on a page are not listings, and it is much cheaper
        // than resolving capture groups.
        if !re.is_match(&href) {
            continue;
        }
        let Some(id) = re
            .captures(&href)
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().to_owned())
        else {
            continue;
        };
        if id.is_empty() {
            continue;
        }
        let tag_end = caps.get(0).map_or(0, |m| m.end());
        match index.get(&id) {
            // Seen before: only its text may still be missing (an image link first).
            Some(&i) => {
                if out[i].title.is_none() {
                    out[i].title = non_empty(&link_text(&body[tag_end..]));
                }
            }
            None => {
                index.insert(id.clone(), out.len());
                out.push(Listing {
                    id,
                    title: non_empty(&link_text(&body[tag_end..])),
                    url: absolute(page_url, &href),
                    ..Listing::default()
                });
            }
        }
    }
    if out.is_empty() {
        return nothing_found(body);
    }
    Extraction::Listings(out)
}

/// The bodies of the page's `<script type="application/ld+json">` blocks.
fn json_ld_blocks(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    script_bodies(body, b"application/ld+json")
}

/// The bodies of the `<script>` elements whose start tag holds `attr` (`id="__NEXT_DATA__"`,
/// `application/ld+json`), found by a byte scan: these blocks hold raw JSON, so no HTML parser
/// is needed to read them. The same words elsewhere (in text, or in another script) may still
/// yield a body that is not JSON: callers parse and pass over those.
pub(super) fn script_bodies<'a>(body: &'a [u8], attr: &[u8]) -> impl Iterator<Item = &'a [u8]> {
    let finder = memmem::Finder::new(attr).into_owned();
    let mut pos = 0;
    std::iter::from_fn(move || {
        loop {
            let hit = pos + finder.find(body.get(pos..)?)?;
            pos = hit + 1;
            let open_end = hit + memchr::memchr(b'>', &body[hit..])? + 1;
            // Only inside a script's start tag counts: `<script` before it, no `>` between.
            let tag_start = memchr::memrchr(b'<', &body[..hit]).unwrap_or(0);
            let tag = &body[tag_start..hit];
            if !(tag.starts_with(b"<script") || tag.starts_with(b"<SCRIPT")) || tag.contains(&b'>')
            {
                continue;
            }
            let rest = &body[open_end..];
            let close = memmem::find(rest, b"</script")
                .or_else(|| memmem::find(rest, b"</SCRIPT"))
                .unwrap_or(rest.len());
            pos = open_end + close;
            return Some(&rest[..close]);
        }
    })
}

fn find_item_list(v: &Value) -> Option<&Value> {
    match v {
        Value::Array(items) => items.iter().find_map(find_item_list),
        Value::Object(map) => {
            let is_list = match map.get("@type") {
                Some(Value::String(t)) => t == "ItemList",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "ItemList"),
                _ => false,
            };
            if is_list {
                return Some(v);
            }
            map.get("@graph")
                .or_else(|| map.get("mainEntity"))
                .and_then(find_item_list)
        }
        _ => None,
    }
}

/// A JSON string (trimmed, not blank) or number as text.
pub(super) fn str_or_num(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => super::parse::parse_number(s.trim()),
        Value::Object(m) => number(m.get("value")),
        _ => None,
    }
}

fn json_ld_listing(element: &Value, page_url: &url::Url) -> Option<Listing> {
    // `itemListElement[]` is a ListItem whose `item` is the thing or its URL, or the thing itself.
    let item = element.get("item").unwrap_or(element);
    let link = match item {
        Value::String(s) => Some(s.clone()),
        _ => str_or_num(item.get("url")).or_else(|| str_or_num(element.get("url"))),
    };
    let url = link.as_deref().and_then(|h| absolute(page_url, h));
    let id = str_or_num(item.get("@id"))
        .or_else(|| url.clone())
        .or_else(|| str_or_num(item.get("sku")))?;
    let offers = item.get("offers").map(|o| match o {
        Value::Array(a) => a.first().unwrap_or(o),
        _ => o,
    });
    let image = match item.get("image") {
        Some(Value::Array(a)) => a
            .first()
            .and_then(|i| str_or_num(Some(i)).or_else(|| str_or_num(i.get("url")))),
        Some(i @ Value::Object(_)) => str_or_num(i.get("url")),
        other => str_or_num(other),
    };
    Some(Listing {
        id,
        title: str_or_num(item.get("name")).and_then(|t| non_empty(&t)),
        price: offers.and_then(|o| number(o.get("price"))),
        currency: offers.and_then(|o| str_or_num(o.get("priceCurrency"))),
        rooms: number(item.get("numberOfRooms")),
        area_m2: number(item.get("floorSize")),
        url,
        image: image.and_then(|h| absolute(page_url, &h)),
        description: None,
        fallback: Vec::new(),
    })
}

/// The listings of the page's JSON-LD `ItemList` (auto mode reads it too).
pub(super) fn json_ld_list(body: &[u8], page_url: &url::Url) -> Extraction {
    for block in json_ld_blocks(body) {
        let Ok(value) = serde_json::from_slice::<Value>(block) else {
            continue;
        };
        let Some(list) = find_item_list(&value) else {
            continue;
        };
        let elements = match list.get("itemListElement") {
            Some(Value::Array(a)) => a.as_slice(),
            Some(one @ Value::Object(_)) => std::slice::from_ref(one),
            _ => &[],
        };
        if elements.is_empty() {
            return Extraction::NoResults;
        }
        let mut out: Vec<Listing> = Vec::with_capacity(elements.len());
        let mut seen = std::collections::HashSet::new();
        for listing in elements.iter().filter_map(|e| json_ld_listing(e, page_url)) {
            if seen.insert(listing.id.clone()) {
                out.push(listing);
            }
        }
        return Extraction::Listings(out);
    }
    nothing_found(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With an id attribute, only the part of the page between the first and last marked card
    /// is read, and it yields the same cards as the whole page.
    #[test]
    fn the_card_region_yields_the_same_cards_as_the_whole_page() {
        let page = include_bytes!("../../tests/fixtures/generic_cards.html");
        let spec =
            ListingSpec::Selector(Box::new(CardSpec::new("article.listing", Some("data-id"))));
        let Mode::Cards(rules) = Generic::new(&spec).unwrap().mode else {
            panic!("a selector spec reads cards");
        };
        let (region, narrowed) = super::super::html::cards_by_region(page, &rules);
        assert!(region < page.len());
        assert!(narrowed.len() >= 3);
    }
}
