//! Idealista (idealista.com / .it / .pt): result cards and DataDome block pages.
//!
//! Cards are `article.item[data-element-id]` with an `a.item-link`; cards without that link
//! are new-build project ads and are skipped. Details ("2 hab.", "72 m²", "2ª planta", and a
//! freshness chip like "8 minutos") are read by their units, so the chip is never a figure.
//! Every normal page loads DataDome's `tags.js` and sets `ddjskey`, so only a page pointing
//! at `captcha-delivery.com` or a redirect to `/checkvalidation` is a block.

use super::html::{
    CardMark, CardRules, Field, FieldRule, ImagePick, ImageRule, scan_cards, scoped,
};
use super::parse::{clean_text, non_empty, parse_area, parse_price, parse_rooms};
use super::{Extraction, SiteProfile, absolute, nothing_found};
use crate::listing::Listing;
use notifio_policy::Markers;
use std::borrow::Cow;
use std::sync::LazyLock;

/// The Idealista profile.
#[derive(Debug, Clone, Copy, Default)]
pub struct Idealista;

static RULES: LazyLock<Option<CardRules>> = LazyLock::new(|| {
    const CARD: &str = "article.item[data-element-id]";
    let inner = |s: &str| scoped(CARD, s).parse().ok();
    Some(CardRules {
        card: CARD.parse().ok()?,
        id_attr: Some("data-element-id".into()),
        link: inner("a.item-link[href]")?,
        title: None,
        price: Some(FieldRule::text(inner("span.item-price")?)),
        rooms: None,
        area: None,
        description: Some(FieldRule::text(inner("div.item-description")?)),
        details: Some(inner("span.item-detail")?),
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
            tag: Some(Cow::Borrowed("article")),
            attr: Cow::Borrowed("data-element-id"),
        }),
    })
});

/// The pager's "Siguiente" (next) link: `…/pagina-N.htm`, with the search's own filters.
static NEXT: LazyLock<Option<lol_html::Selector>> =
    LazyLock::new(|| ".pagination li.next a[href]".parse().ok());

impl SiteProfile for Idealista {
    fn name(&self) -> &str {
        "idealista"
    }

    fn default_fetch(&self) -> &'static str {
        "browser"
    }

    fn next_page(&self, body: &[u8], page_url: &url::Url, _page: u32) -> Option<url::Url> {
        let ways = [NEXT.as_ref()?, super::REL_NEXT.as_ref()?];
        super::linked_next_page(body, page_url, &ways)
    }

    fn ready_selector(&self) -> Option<&str> {
        Some("article.item[data-element-id]")
    }

    fn markers(&self) -> Markers {
        Markers::generic()
            .with_challenge_body(&["geo.captcha-delivery.com", "captcha-delivery.com"])
            .with_challenge_paths(&["/checkvalidation"])
    }

    fn extract(&self, body: &[u8], page_url: &url::Url) -> Extraction {
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
            let details: Vec<String> = card.details.iter().map(|d| clean_text(d)).collect();
            // No item-link: a new-build project ad, not a listing.
            let Some(href) = card.link.as_deref() else {
                continue;
            };
            let Some(id) = card.id.clone().or_else(|| id_from_link(href)) else {
                continue;
            };
            if !seen.insert(id.clone()) {
                continue;
            }
            let price = card
                .text(Field::Price)
                .and_then(non_empty)
                .and_then(|t| parse_price(&t));
            out.push(Listing {
                id,
                title: card
                    .link_title
                    .as_deref()
                    .and_then(non_empty)
                    .or_else(|| card.text(Field::LinkText).and_then(non_empty)),
                price: price.as_ref().map(|p| p.0),
                currency: price.and_then(|p| p.1),
                rooms: details.iter().find_map(|d| parse_rooms(d)),
                area_m2: details.iter().find_map(|d| parse_area(d)),
                url: absolute(page_url, href),
                image: card.image().and_then(|h| absolute(page_url, h)),
                description: card.text(Field::Description).and_then(non_empty),
                fallback: Vec::new(),
            });
        }
        Extraction::Listings(out)
    }
}

/// `/inmueble/{id}/` (.it: `/immobile/{id}/`, .pt: `/imovel/{id}/`) → id.
fn id_from_link(href: &str) -> Option<String> {
    let mut parts = href.split('/').filter(|p| !p.is_empty());
    parts.find(|p| matches!(*p, "inmueble" | "immobile" | "imovel"))?;
    parts
        .next()
        .filter(|id| id.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_from_listing_links() {
        assert_eq!(
            id_from_link("/inmueble/93640910/").as_deref(),
            Some("93640910")
        );
        assert_eq!(
            id_from_link("https://www.idealista.it/immobile/123/").as_deref(),
            Some("123")
        );
        assert_eq!(id_from_link("/obra-nueva/123/"), None);
    }

    /// Reading only the cards' part of the page yields exactly the cards of the whole page.
    #[test]
    fn the_card_region_yields_the_same_cards_as_the_whole_page() {
        // The real page too, when it is at hand (required under CI).
        let real = cfg!(real_pages).then(|| crate::real_pages::read("idealista_es_search.html"));
        let edge = include_bytes!("../../tests/fixtures/idealista_edge_cases.html").to_vec();
        let rules = RULES.as_ref().unwrap();
        for page in real.iter().chain([&edge]) {
            let (region, narrowed) = super::super::html::cards_by_region(page, rules);
            assert!(narrowed.len() >= 3);
            if page.len() > 100_000 {
                // The real page: 30 cards in about a third of it.
                assert_eq!(narrowed.len(), 30);
                assert!(region * 3 < page.len(), "{region} of {}", page.len());
            }
        }
    }
}
