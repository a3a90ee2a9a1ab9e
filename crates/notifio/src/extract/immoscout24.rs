//! ImmobilienScout24 (immobilienscout24.de): the app's result list, the web page's embedded
//! result JSON, or its HTML cards, whichever the body is.
//!
//! The app's answer (`{"resultListItems": […]}`, see `immoscout24_app`) is recognised by its
//! shape, so it is read the same whether it came from the app endpoint or a saved file. Result
//! pages have embedded the search response as `IS24.resultList = {…}` (with
//! `searchResponseModel["resultlist.resultlist"]`); when it is present only that slice is
//! parsed with serde_json, because it carries exact prices and areas. Otherwise cards with
//! `data-obid` (older `.result-list-entry`, newer `.listing-card`) are read. Block pages
//! (GeeTest "Ich bin kein Roboter", AWS WAF, Imperva) are challenge markers.

use super::html::{
    CardMark, CardRules, Field, FieldRule, ImagePick, ImageRule, scan_cards, scoped,
};
use super::immoscout24_app::{from_app_json, next_app_page, with_page_number};
use super::parse::{clean_text, non_empty, parse_area, parse_number, parse_price, parse_rooms};
use super::{Extraction, SiteProfile, absolute, nothing_found};
use crate::listing::Listing;
use memchr::memmem;
use notifio_policy::Markers;
use serde::Deserialize;
use std::borrow::Cow;
use std::sync::LazyLock;

/// The ImmobilienScout24 profile.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImmoScout24;

static RULES: LazyLock<Option<CardRules>> = LazyLock::new(|| {
    const CARD: &str = "[data-obid]";
    let inner = |s: &str| scoped(CARD, s).parse().ok();
    Some(CardRules {
        card: CARD.parse().ok()?,
        id_attr: Some("data-obid".into()),
        link: inner("a[href*=\"/expose/\"]")?,
        title: Some(FieldRule::text(inner("[class*=\"title\"], h2, h5")?)),
        price: None,
        rooms: None,
        area: None,
        description: None,
        // Older layout: `<dl class="result-list-entry__primary-criterion"><dd>…</dd>`; newer
        // cards list their attributes in `dd` or elements named `*attribute*`.
        details: Some(inner("dd, [class*=\"attribute\"]")?),
        image: Some(ImageRule {
            selector: inner("img")?,
            pick: ImagePick::Largest,
        }),
        title_fallback: None,
        price_fallback: None,
        image_fallback: None,
        description_fallback: None,
        background: None,
        card_text: false,
        mark: Some(CardMark {
            tag: None,
            attr: Cow::Borrowed("data-obid"),
        }),
    })
});

impl SiteProfile for ImmoScout24 {
    fn name(&self) -> &str {
        "immoscout24"
    }

    fn default_fetch(&self) -> &'static str {
        "app"
    }

    fn ready_selector(&self) -> Option<&str> {
        Some("[data-obid]")
    }

    fn markers(&self) -> Markers {
        Markers::generic().with_challenge_body(&[
            "Ich bin kein Roboter - ImmobilienScout24",
            "Warum haben wir deine Anfrage blockiert?",
            "awswaf-captcha",
            "/fro/imperva/",
        ])
    }

    /// The app's answer and the web page's embedded result JSON say how many pages there are;
    /// older HTML pages link to the next with `rel="next"` or a pager link. Both page by
    /// `pagenumber`.
    fn next_page(&self, body: &[u8], page_url: &url::Url, page: u32) -> Option<url::Url> {
        if let Some(next) = next_app_page(body, page_url, page) {
            return next;
        }
        let next = page.checked_add(1)?;
        if let Some(total) = number_of_pages(body) {
            return (page < total).then(|| with_page_number(page_url, next));
        }
        if let Some(linked) = super::REL_NEXT
            .as_ref()
            .and_then(|rel| super::linked_next_page(body, page_url, &[rel]))
        {
            return Some(linked);
        }
        links_to_page(body, next).then(|| with_page_number(page_url, next))
    }

    fn extract(&self, body: &[u8], page_url: &url::Url) -> Extraction {
        if let Some(found) = from_app_json(body, page_url) {
            return found;
        }
        if let Some(found) = from_json(body, page_url) {
            return found;
        }
        from_cards(body, page_url)
    }
}

/// Accepts one value or an array of them (the result JSON was converted from XML, where a
/// single entry is not wrapped in an array). Hand-written rather than `#[serde(untagged)]`,
/// which would buffer the whole ~150 KB entry list before trying each shape.
enum OneOrMany<T> {
    Many(Vec<T>),
    One(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object or an array of objects")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element()? {
                    out.push(item);
                }
                Ok(OneOrMany::Many(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(OneOrMany::One)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<T> Default for OneOrMany<T> {
    fn default() -> Self {
        Self::Many(Vec::new())
    }
}

impl<T> OneOrMany<T> {
    fn into_vec(self) -> Vec<T> {
        match self {
            Self::Many(v) => v,
            Self::One(t) => vec![t],
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Num {
    F(f64),
    S(String),
}

impl Num {
    fn value(&self) -> Option<f64> {
        match self {
            Self::F(f) => Some(*f),
            Self::S(s) => parse_number(s.trim()),
        }
    }
}

#[derive(Deserialize)]
struct SearchResponseModel {
    #[serde(rename = "resultlist.resultlist")]
    result_list: Option<ResultList>,
}

#[derive(Deserialize)]
struct ResultList {
    #[serde(rename = "resultlistEntries", default)]
    entries: OneOrMany<Entries>,
}

#[derive(Deserialize)]
struct Entries {
    #[serde(rename = "resultlistEntry", default)]
    entry: OneOrMany<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "@id")]
    id: Option<String>,
    #[serde(rename = "resultlist.realEstate")]
    real_estate: Option<RealEstate>,
}

#[derive(Deserialize)]
struct RealEstate {
    #[serde(rename = "@id")]
    id: Option<String>,
    title: Option<String>,
    price: Option<Price>,
    #[serde(rename = "livingSpace")]
    living_space: Option<Num>,
    #[serde(rename = "numberOfRooms")]
    rooms: Option<Num>,
    #[serde(rename = "titlePicture")]
    title_picture: Option<Picture>,
}

#[derive(Deserialize)]
struct Price {
    value: Option<Num>,
    currency: Option<String>,
}

#[derive(Deserialize)]
struct Picture {
    #[serde(rename = "@xlink.href")]
    href: Option<String>,
}

/// The listings of the embedded result JSON, or `None` when the page embeds none.
fn from_json(body: &[u8], page_url: &url::Url) -> Option<Extraction> {
    let key = memmem::find(body, b"\"searchResponseModel\"")?;
    let after = key + "\"searchResponseModel\"".len();
    let colon = after + memchr::memchr(b':', body.get(after..)?)?;
    let value = body.get(colon + 1..)?;
    // Parse just this object; whatever follows it (`};` of the script) is never read.
    let model = serde_json::Deserializer::from_slice(value)
        .into_iter::<SearchResponseModel>()
        .next()?
        .ok()?;
    let entries: Vec<Entry> = model
        .result_list?
        .entries
        .into_vec()
        .into_iter()
        .flat_map(|e| e.entry.into_vec())
        .collect();
    if entries.is_empty() {
        return Some(Extraction::NoResults);
    }
    let mut out: Vec<Listing> = Vec::with_capacity(entries.len());
    let mut seen = std::collections::HashSet::new();
    for entry in entries {
        let Some(re) = entry.real_estate else {
            continue;
        };
        let id = re.id.or(entry.id).map(|id| id.trim().to_owned());
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            continue;
        };
        if !seen.insert(id.clone()) {
            continue;
        }
        let url = absolute(page_url, &format!("/expose/{id}"));
        out.push(Listing {
            title: re.title.as_deref().and_then(non_empty),
            price: re.price.as_ref().and_then(|p| p.value.as_ref()?.value()),
            currency: re.price.and_then(|p| p.currency),
            rooms: re.rooms.and_then(|r| r.value()),
            area_m2: re.living_space.and_then(|a| a.value()),
            url,
            image: re
                .title_picture
                .and_then(|p| p.href)
                .and_then(|h| absolute(page_url, &h)),
            id,
            description: None,
            fallback: Vec::new(),
        });
    }
    Some(Extraction::Listings(out))
}

/// `"numberOfPages": N` in the page's embedded result JSON.
fn number_of_pages(body: &[u8]) -> Option<u32> {
    const KEY: &[u8] = b"\"numberOfPages\"";
    let at = memmem::find(body, KEY)? + KEY.len();
    let rest = body.get(at..)?;
    let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
    let rest = rest.strip_prefix(b":")?;
    let digits: Vec<u8> = rest
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// Whether the page links to result page `page` (`pagenumber=N` in a pager link).
fn links_to_page(body: &[u8], page: u32) -> bool {
    let needle = format!("pagenumber={page}");
    memmem::find_iter(body, needle.as_bytes())
        .any(|at| !body.get(at + needle.len()).is_some_and(u8::is_ascii_digit))
}

fn from_cards(body: &[u8], page_url: &url::Url) -> Extraction {
    let Some(rules) = RULES.as_ref() else {
        return Extraction::LayoutUnknown;
    };
    let Ok(cards) = scan_cards(body, rules) else {
        return Extraction::LayoutUnknown;
    };
    if cards.is_empty() {
        return nothing_found(body);
    }
    let mut out: Vec<Listing> = Vec::with_capacity(cards.len());
    let mut seen = std::collections::HashSet::new();
    for card in cards {
        let Some(id) = card.id.clone() else {
            continue;
        };
        if !seen.insert(id.clone()) {
            continue;
        }
        let details: Vec<String> = card.details.iter().map(|d| clean_text(d)).collect();
        let price = details
            .iter()
            .find(|d| d.contains('€'))
            .and_then(|d| parse_price(d));
        out.push(Listing {
            title: card
                .text(Field::Title)
                .and_then(non_empty)
                .or_else(|| card.link_title.as_deref().and_then(non_empty))
                .or_else(|| card.text(Field::LinkText).and_then(non_empty)),
            price: price.as_ref().map(|p| p.0),
            currency: price.and_then(|p| p.1),
            rooms: details.iter().find_map(|d| parse_rooms(d)),
            area_m2: details.iter().find_map(|d| parse_area(d)),
            url: card
                .link
                .as_deref()
                .and_then(|h| absolute(page_url, h))
                .or_else(|| absolute(page_url, &format!("/expose/{id}"))),
            image: card.image().and_then(|h| absolute(page_url, h)),
            id,
            description: None,
            fallback: Vec::new(),
        });
    }
    Extraction::Listings(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reading only the cards' part of the page yields exactly the cards of the whole page,
    /// whatever element the cards are (an `article` in the older layout, a `div` in the newer).
    #[test]
    fn the_card_region_yields_the_same_cards_as_the_whole_page() {
        let page = include_bytes!("../../tests/fixtures/is24_cards.html");
        let (region, narrowed) = super::super::html::cards_by_region(page, RULES.as_ref().unwrap());
        assert!(region < page.len());
        let ids: Vec<_> = narrowed.iter().filter_map(|c| c.id.as_deref()).collect();
        assert_eq!(ids, ["111", "222"]);
    }
}
