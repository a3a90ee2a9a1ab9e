//! What a search result page yields: listings, and how a generic site's page is read.
//!
//! Shared by the extractors (which produce [`Listing`]s), the store (which remembers them),
//! the notifier (which announces them) and the config (which carries a [`ListingSpec`]).

use serde::{Deserialize, Serialize};

/// One listing found on a result page. Identity is (site, `id`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// The site's own id for the listing (`/inmueble/{id}/`, `data-obid`, …).
    pub id: String,
    /// Headline as the site shows it.
    pub title: Option<String>,
    /// Price as a number (1250.0 for "1.250 €/mes").
    pub price: Option<f64>,
    /// ISO-ish currency code or symbol as shown ("EUR", "€").
    pub currency: Option<String>,
    /// Number of rooms.
    pub rooms: Option<f64>,
    /// Living area in m².
    pub area_m2: Option<f64>,
    /// Absolute link to the listing.
    pub url: Option<String>,
    /// Absolute link to the main photo.
    pub image: Option<String>,
    /// The card's description or teaser text, where the site shows one (what `include` and
    /// `exclude` look at besides the title).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The fields the profile's own rule did not yield (or yielded a value that fails its
    /// sanity check), so they were read from the card as a generic card is read
    /// (docs/sites.md#when-a-profile-misses-a-field): `check --json` shows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallback: Vec<ListingField>,
}

/// A field of a listing, as `check --json` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListingField {
    /// The headline.
    Title,
    /// The price.
    Price,
    /// The rooms.
    Rooms,
    /// The living area.
    Area,
    /// The photo.
    Image,
}

/// How to find listings on a page of a site without a built-in profile (`listing = {…}` in a
/// `[[search]]`), and where its next result page is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListingSpec {
    /// Each element matching the card selector is one listing (see [`CardSpec`]).
    Selector(Box<CardSpec>),
    /// Every link whose href matches `link` is a listing; the first capture group is its id.
    Link {
        /// A regex with one capture group, e.g. `/listing/(\d+)`.
        link: String,
        /// Where the link to the next result page is (see [`CardSpec::next`]).
        next: Option<String>,
    },
    /// The page's JSON-LD `ItemList` lists the results.
    JsonLd {
        /// Where the link to the next result page is (see [`CardSpec::next`]).
        next: Option<String>,
    },
}

impl ListingSpec {
    /// Every link whose href matches `link` is a listing; the next page by `rel="next"`.
    #[must_use]
    pub fn link(link: &str) -> Self {
        Self::Link {
            link: link.to_owned(),
            next: None,
        }
    }

    /// The JSON-LD `ItemList`; the next page by `rel="next"`.
    #[must_use]
    pub const fn json_ld() -> Self {
        Self::JsonLd { next: None }
    }

    /// The `next` selector (`listing.next`), whatever the form.
    #[must_use]
    pub fn next(&self) -> Option<&str> {
        match self {
            Self::Selector(card) => card.next.as_deref(),
            Self::Link { next, .. } | Self::JsonLd { next } => next.as_deref(),
        }
    }
}

/// One listing card of a generic site: where it is, what identifies it, and where each field
/// it shows is. A field without a rule is found by default (docs/sites.md): the title is the
/// card's first heading, else its link's `title`/`aria-label`, else its longest link text; the
/// price is an element whose class contains `price`; rooms and area are read from the card's
/// text by their units; the image is the card's largest picture that is not an icon; the
/// description is an element whose class contains `description`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardSpec {
    /// CSS selector of one listing card, e.g. `article.listing`.
    pub selector: String,
    /// Attribute carrying the id, e.g. `data-id`; `None`: the card's first link is its id.
    pub id_attr: Option<String>,
    /// Where the title is.
    pub title: Option<FieldSpec>,
    /// Where the price is.
    pub price: Option<FieldSpec>,
    /// Where the number of rooms is.
    pub rooms: Option<FieldSpec>,
    /// Where the living area is.
    pub area: Option<FieldSpec>,
    /// Where the main photo is.
    pub image: Option<FieldSpec>,
    /// Where the description is.
    pub description: Option<FieldSpec>,
    /// Where the link to the next result page is (`listing.next`): a CSS selector matching
    /// the link itself or an element around it. `None`: a `rel="next"` link or `<link>`.
    pub next: Option<String>,
}

/// Where one field of a card is: the first element inside the card matching `selector`, read
/// as its text or, when `attr` is given, as that attribute's value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldSpec {
    /// CSS selector inside the card, e.g. `h2 a`.
    pub selector: String,
    /// Attribute to read instead of the text, e.g. `data-src` or `title`.
    pub attr: Option<String>,
}

impl FieldSpec {
    /// The text of the first element matching `selector`.
    #[must_use]
    pub fn text(selector: &str) -> Self {
        Self {
            selector: selector.to_owned(),
            attr: None,
        }
    }

    /// The attribute `attr` of the first element matching `selector`.
    #[must_use]
    pub fn attr(selector: &str, attr: &str) -> Self {
        Self {
            selector: selector.to_owned(),
            attr: Some(attr.to_owned()),
        }
    }
}

impl CardSpec {
    /// Cards matching `selector` with their id in `id_attr`, every field found by default.
    #[must_use]
    pub fn new(selector: &str, id_attr: Option<&str>) -> Self {
        Self {
            selector: selector.to_owned(),
            id_attr: id_attr.map(str::to_owned),
            ..Self::default()
        }
    }
}
