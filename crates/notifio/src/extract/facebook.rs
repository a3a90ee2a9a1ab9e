//! Facebook Marketplace: the search feed embedded as JSON, read with a byte scan.
//!
//! Search pages carry their results in `<script type="application/json" data-sjs>` blocks as
//! `…"marketplace_search":{"feed_units":{"edges":[{"node":{"listing":{…}}}]}}`. A 2 MB page
//! is mostly other JSON, so instead of parsing every block we find `"marketplace_search":`
//! with memmem and let serde_json read only the `feed_units` object after it. Marketplace
//! needs a logged-in session: cookies are required, and a logged-out page (`"USER_ID":"0"`)
//! or a redirect to `/login/` or `/checkpoint/` means the session expired.

use super::parse::{JsonId, non_empty, parse_area, parse_price, parse_rooms};
use super::{Extraction, SiteProfile, absolute, nothing_found};
use crate::listing::Listing;
use memchr::memmem;
use notifio_policy::Markers;
use serde::Deserialize;
use std::time::Duration;

/// The Facebook Marketplace profile.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facebook;

impl SiteProfile for Facebook {
    fn name(&self) -> &str {
        "facebook"
    }

    fn default_fetch(&self) -> &'static str {
        "browser"
    }

    fn markers(&self) -> Markers {
        Markers::generic()
            .with_login_paths(&["/login/", "/checkpoint/"])
            .with_logged_out_body(&["\"USER_ID\":\"0\""])
    }

    fn extract(&self, body: &[u8], page_url: &url::Url) -> Extraction {
        extract_feed(body, page_url)
    }

    fn needs_cookies(&self) -> bool {
        true
    }

    fn ready_selector(&self) -> Option<&str> {
        Some("a[href*=\"/marketplace/item/\"]")
    }

    /// Marketplace loads more results as one scrolls; there is no page 2 to ask for.
    fn paged(&self) -> bool {
        false
    }

    fn required_cookies(&self) -> &'static [&'static str] {
        &["c_user", "xs"]
    }

    fn default_spacing(&self) -> Option<Duration> {
        Some(Duration::from_secs(5))
    }
}

#[derive(Deserialize)]
struct FeedUnits {
    #[serde(default)]
    edges: Vec<Edge>,
}

#[derive(Deserialize)]
struct Edge {
    node: Option<Node>,
}

#[derive(Deserialize)]
struct Node {
    listing: Option<FbListing>,
}

#[derive(Deserialize)]
struct FbListing {
    id: Option<JsonId>,
    marketplace_listing_title: Option<String>,
    listing_price: Option<FbPrice>,
    #[serde(default)]
    is_sold: bool,
    #[serde(default)]
    is_pending: bool,
    primary_listing_photo: Option<Photo>,
    #[serde(default)]
    custom_sub_titles_with_rendering_flags: Vec<Subtitle>,
}

#[derive(Deserialize)]
struct FbPrice {
    formatted_amount: Option<String>,
    amount: Option<String>,
}

#[derive(Deserialize)]
struct Photo {
    image: Option<Image>,
}

#[derive(Deserialize)]
struct Image {
    uri: Option<String>,
}

#[derive(Deserialize)]
struct Subtitle {
    subtitle: Option<String>,
}

/// Every `feed_units` object that follows a `"marketplace_search":` key.
fn feeds(body: &[u8]) -> impl Iterator<Item = FeedUnits> + '_ {
    let search = memmem::Finder::new(b"\"marketplace_search\":");
    let units = memmem::Finder::new(b"\"feed_units\":");
    let mut pos = 0;
    std::iter::from_fn(move || {
        loop {
            let hit = pos + search.find(body.get(pos..)?)?;
            pos = hit + 1;
            let from = hit + b"\"marketplace_search\":".len();
            // feed_units belongs to this search object when it comes before the next one.
            let next_search = search.find(&body[from..]).map_or(body.len(), |i| from + i);
            let Some(u) = units.find(&body[from..next_search]) else {
                continue;
            };
            let value = &body[from + u + b"\"feed_units\":".len()..];
            if let Some(Ok(feed)) = serde_json::Deserializer::from_slice(value)
                .into_iter::<FeedUnits>()
                .next()
            {
                return Some(feed);
            }
        }
    })
}

fn extract_feed(body: &[u8], page_url: &url::Url) -> Extraction {
    let mut found_feed = false;
    let mut edges = 0usize;
    let mut out: Vec<Listing> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for feed in feeds(body) {
        found_feed = true;
        edges += feed.edges.len();
        for listing in feed.edges.into_iter().filter_map(|e| e.node?.listing) {
            // Sold and pending items are not "new" to anyone looking for a flat.
            if listing.is_sold || listing.is_pending {
                continue;
            }
            let Some(id) = listing.id.and_then(JsonId::into_id) else {
                continue;
            };
            if !seen.insert(id.clone()) {
                continue;
            }
            let title = listing
                .marketplace_listing_title
                .as_deref()
                .and_then(non_empty);
            let formatted = listing
                .listing_price
                .as_ref()
                .and_then(|p| p.formatted_amount.as_deref())
                .and_then(parse_price);
            let amount = listing
                .listing_price
                .as_ref()
                .and_then(|p| p.amount.as_deref())
                .and_then(|a| a.trim().parse::<f64>().ok())
                .filter(|a| a.is_finite());
            let subtitles: Vec<&str> = listing
                .custom_sub_titles_with_rendering_flags
                .iter()
                .filter_map(|s| s.subtitle.as_deref())
                .chain(title.as_deref())
                .collect();
            out.push(Listing {
                url: absolute(page_url, &format!("/marketplace/item/{id}/")),
                id,
                price: amount.or(formatted.as_ref().map(|p| p.0)),
                currency: formatted.and_then(|p| p.1),
                rooms: subtitles.iter().find_map(|s| parse_rooms(s)),
                area_m2: subtitles.iter().find_map(|s| parse_area(s)),
                image: listing
                    .primary_listing_photo
                    .and_then(|p| p.image?.uri)
                    .and_then(|u| absolute(page_url, &u)),
                title,
                description: None,
                fallback: Vec::new(),
            });
        }
    }
    match (found_feed, edges) {
        (false, _) => nothing_found(body),
        (true, 0) => Extraction::NoResults,
        (true, _) => Extraction::Listings(out),
    }
}
