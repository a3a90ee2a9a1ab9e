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
}

/// How to find listings on a page of a site without a built-in profile (`listing = {…}` in a
/// `[[search]]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListingSpec {
    /// Each element matching `selector` is one listing; its id is the `id_attr` attribute, or
    /// when `id_attr` is `None`, the first link inside it. Optional sub-selectors name the
    /// fields; when absent, elements whose class contains `title`, `price`, `rooms`, `area`
    /// are used.
    Selector {
        /// CSS selector of one listing card, e.g. `article.listing`.
        selector: String,
        /// Attribute carrying the id, e.g. `data-id`.
        id_attr: Option<String>,
        /// Sub-selector of the title inside a card.
        title: Option<String>,
        /// Sub-selector of the price inside a card.
        price: Option<String>,
    },
    /// Every link whose href matches `link` is a listing; the first capture group is its id.
    Link {
        /// A regex with one capture group, e.g. `/listing/(\d+)`.
        link: String,
    },
    /// The page's JSON-LD `ItemList` lists the results.
    JsonLd,
}
