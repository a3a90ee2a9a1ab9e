//! Auto mode: reading a results page that no profile describes, from its URL alone.
//!
//! A results page is a list of cards, each linking to a detail page of its own. So the result
//! list is the repeated structure (same-tag children of one element, or of several elements
//! that look alike: a grid's rows, a list split by an ad) whose items each link to one distinct
//! page of the same shape (`/expose/…`, `/properties/…`) and carry what a listing shows: a
//! price, some words, a photo. Navigation, a pager, "similar searches" and a footer are lists
//! too, but their items lead to search pages or to each other, carry no price, and sit in
//! `nav`, `header` or `footer`. A page that builds its cards from embedded data instead is read
//! from that data: a JSON-LD `ItemList`, or a script's JSON (Next.js's `__NEXT_DATA__`, any
//! `application/json` state) holding an array of results with links.
//!
//! A card's fields are read as a generic card's are: the title is its most important heading
//! (else an element whose class says title, else its link's words), the price the one beside a
//! currency, rooms and area by their units in its facts, the photo the largest image that is
//! not an icon. The structure chosen is reported as a CSS selector a user can paste into
//! `listing` to pin it (docs/sites.md#auto-mode-any-results-page-from-its-url-alone).

use super::dom::{Dom, Kind, NodeId};
use super::generic::str_or_num;
use super::parse::{
    BETWEEN_TEXTS, non_empty, parse_area, parse_number, parse_price, parse_rooms, price_in_text,
};
use super::{Extraction, SiteProfile, absolute, bounds, image, nothing_found, sane};
use crate::listing::Listing;
use notifio_policy::Markers;
use serde_json::Value;
use std::collections::HashMap;

/// The profile of a search on a site without one: auto mode.
#[derive(Debug, Clone, Copy, Default)]
pub struct Auto;

/// The name auto mode reports as its profile.
pub const NAME: &str = "auto";

/// How auto mode found a page's results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Structure {
    /// Cards in the page, matched by this selector (what `listing = { selector = … }` takes).
    Cards {
        /// A CSS selector for the cards.
        selector: String,
    },
    /// The page's JSON-LD `ItemList`.
    JsonLd,
    /// An array of results in a script's JSON.
    Embedded {
        /// How the script is named (`#__NEXT_DATA__`, `script[type="application/json"]`).
        script: String,
    },
}

impl std::fmt::Display for Structure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cards { selector } => write!(f, "{selector}"),
            Self::JsonLd => f.write_str("JSON-LD ItemList"),
            Self::Embedded { script } => write!(f, "embedded JSON in {script}"),
        }
    }
}

/// What auto mode found on a page.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The listings, in page order.
    pub listings: Vec<Listing>,
    /// Where they were found.
    pub structure: Structure,
}

impl SiteProfile for Auto {
    fn name(&self) -> &str {
        NAME
    }

    fn markers(&self) -> Markers {
        Markers::generic()
    }

    fn extract(&self, body: &[u8], page_url: &url::Url) -> Extraction {
        match read(body, page_url) {
            Some(found) => Extraction::Listings(found.listings),
            None => nothing_found(body),
        }
    }

    fn next_page(&self, body: &[u8], page_url: &url::Url, _page: u32) -> Option<url::Url> {
        super::linked_next_page(body, page_url, &[super::REL_NEXT.as_ref()?])
    }
}

/// Reads the results of a page by its structure; `None` when it shows none.
#[must_use]
pub fn read(body: &[u8], page_url: &url::Url) -> Option<Found> {
    let dom = Dom::parse(body);
    let cards = Cards::find(&dom, page_url);
    let in_cards = cards.as_ref().map_or(0, |c| c.listings.len());
    // A page whose HTML shows few or no cards may build them from its data.
    if in_cards < 3
        && !bounds::over()
        && let Some(embedded) = embedded(&dom, body, page_url)
        && embedded.listings.len() > in_cards
    {
        return Some(embedded);
    }
    cards.filter(|c| !c.listings.is_empty()).map(|c| Found {
        listings: c.listings,
        structure: c.structure,
    })
}

// ---------------------------------------------------------------- links and their shapes

/// One link of the page: where it is, where it leads (absolute, no fragment) and its shape.
struct Link {
    node: NodeId,
    url: String,
    shape: u32,
}

/// Query keys that only track a click, not what page it leads to.
fn tracking(key: &str) -> bool {
    key.starts_with("utm_")
        || matches!(
            key,
            "ref" | "referrer" | "source" | "from" | "fbclid" | "gclid"
        )
}

/// A URL's shape: its host, each path segment either as written or `*` where it varies from
/// one listing to the next (it holds a digit, or is a long slug), and its query's keys. Cards
/// of one list lead to pages of one shape.
fn shape_of(u: &url::Url) -> String {
    let mut s = u
        .host_str()
        .unwrap_or_default()
        .trim_start_matches("www.")
        .to_ascii_lowercase();
    let segments: Vec<&str> = u
        .path_segments()
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect();
    let mut varied = false;
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        // After an id, the rest is the listing's slug (`/…/61d026c2/bilderdijkkade`).
        varied |= seg.bytes().any(|b| b.is_ascii_digit())
            || seg.len() > 24
            || seg.matches(['-', '_']).count() >= 2
            // A listing's slug: `/neubau/haverkamp-essen/`.
            || (last && seg.contains(['-', '_']));
        let varies = varied;
        s.push('/');
        if varies {
            s.push('*');
        } else {
            s.push_str(&seg.to_ascii_lowercase());
        }
    }
    let mut keys: Vec<String> = u
        .query_pairs()
        .map(|(k, _)| k.into_owned())
        .filter(|k| !tracking(k))
        .collect();
    keys.sort();
    keys.dedup();
    if !keys.is_empty() {
        s.push('?');
        s.push_str(&keys.join("&"));
    }
    s
}

/// A shape's family: the same with its fixed path segments unnamed (`see/apa/*` and
/// `est/apa/*` are one family: a site's listings in two districts).
fn family_of(shape: &str) -> String {
    let (path, query) = shape.split_once('?').unwrap_or((shape, ""));
    let mut parts = path.split('/');
    let mut out = parts.next().unwrap_or_default().to_owned();
    for seg in parts {
        out.push('/');
        out.push(if seg == "*" { '*' } else { 'L' });
    }
    if !query.is_empty() {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// Words in a link's path that name an action on a listing, not the listing: such links sit
/// beside the listing's own link on every card.
const ACTIONS: [&str; 19] = [
    "bookmark",
    "favourite",
    "favorite",
    "favourites",
    "favorites",
    "merkliste",
    "watchlist",
    "login",
    "share",
    "contact",
    "compare",
    "report",
    "myaccount",
    "save",
    "rechner",
    "finanzierung",
    "immobilienfinanzierung",
    "calculator",
    "mortgage",
];

fn is_action(shape: &str) -> bool {
    shape
        .split(['/', '?', '&', '-', '_'])
        .any(|p| ACTIONS.contains(&p))
}

/// Whether a shape can be a listing's page: some part of it names one listing.
fn names_one(shape: &str) -> bool {
    shape.contains('*') || shape.contains('?')
}

/// The links of the page, in document order, with their shapes interned.
fn links(dom: &Dom<'_>, page: &url::Url) -> (Vec<Link>, Vec<String>) {
    let mut out = Vec::new();
    let mut shapes: Vec<String> = Vec::new();
    let mut index: HashMap<String, u32> = HashMap::new();
    let here = {
        let mut p = page.clone();
        p.set_fragment(None);
        p
    };
    for (id, node) in dom.nodes().iter().enumerate() {
        let Kind::Element { .. } = node.kind else {
            continue;
        };
        let id = NodeId::try_from(id).unwrap_or(NodeId::MAX);
        if !dom.is(id, "a") {
            continue;
        }
        let Some(href) = dom.attr(id, "href") else {
            continue;
        };
        let Some(mut u) = absolute(page, &href).and_then(|a| url::Url::parse(&a).ok()) else {
            continue;
        };
        u.set_fragment(None);
        // The search itself, another of its pages or another order of it: never a listing.
        let paging = |k: &str| {
            matches!(
                k,
                "page"
                    | "pagination"
                    | "p"
                    | "pg"
                    | "offset"
                    | "start"
                    | "seite"
                    | "pagina"
                    | "sort"
                    | "order"
                    | "orderby"
            )
        };
        if u == here || (u.path() == here.path() && u.query_pairs().any(|(k, _)| paging(&k))) {
            continue;
        }
        let shape = shape_of(&u);
        let n = u32::try_from(shapes.len()).unwrap_or(u32::MAX);
        let shape = *index.entry(shape.clone()).or_insert_with(|| {
            shapes.push(shape);
            n
        });
        out.push(Link {
            node: id,
            url: u.into(),
            shape,
        });
    }
    (out, shapes)
}

/// The links inside `id`'s subtree (itself included): a range of `links`, which is in
/// document order.
fn links_in<'l>(dom: &Dom<'_>, links: &'l [Link], id: NodeId) -> &'l [Link] {
    let end = dom.node(id).end;
    let lo = links.partition_point(|l| l.node < id);
    let hi = links.partition_point(|l| l.node < end);
    &links[lo..hi.max(lo)]
}

// ---------------------------------------------------------------- the repeated structure

/// Most links of one item looked at: an item with more is a block, not a card.
const ITEM_LINKS: usize = 40;
/// Most items of one group looked at.
const GROUP_ITEMS: usize = 1_000;

/// Items of one kind: same-tag children of elements that look alike, whose links share a shape.
struct Group {
    /// The first parent seen (the group is keyed by the parents' tag and first class, and
    /// the items' tag).
    parent: NodeId,
    items: Vec<NodeId>,
}

/// A group judged as a result list.
struct Judged {
    /// Each card and its link, in page order.
    cards: Vec<(NodeId, String)>,
    score: f64,
    /// The family of the cards' links' shape.
    family: String,
}

/// What a group is judged against: the page's host (as shapes write it) and its path's first
/// segment.
struct PageParts {
    first: Option<String>,
    host: String,
}

/// The result list found in a page's HTML.
struct Cards {
    listings: Vec<Listing>,
    structure: Structure,
}

/// Whether `id` or an ancestor is page furniture: navigation, header, footer, aside, a menu,
/// a breadcrumb or a pager.
fn in_furniture(dom: &Dom<'_>, id: NodeId) -> bool {
    std::iter::once(id).chain(dom.ancestors(id)).any(|a| {
        if matches!(dom.tag_of(a), Some("nav" | "header" | "footer" | "aside")) {
            return true;
        }
        if dom
            .attr(a, "role")
            .is_some_and(|r| r == "navigation" || r == "banner" || r == "contentinfo")
        {
            return true;
        }
        let named = |v: Option<String>| {
            v.is_some_and(|v| {
                let v = v.to_ascii_lowercase();
                [
                    "footer",
                    "breadcrumb",
                    "pagination",
                    "pager",
                    "navbar",
                    "menu",
                ]
                .iter()
                .any(|w| {
                    v.split(|c: char| !c.is_ascii_alphanumeric())
                        .any(|p| p == *w)
                })
            })
        };
        named(dom.attr(a, "class")) || named(dom.attr(a, "id"))
    })
}

impl Cards {
    fn find(dom: &Dom<'_>, page: &url::Url) -> Option<Self> {
        let (links, shapes) = links(dom, page);
        if links.is_empty() {
            return None;
        }
        let parts = PageParts {
            first: page
                .path_segments()
                .and_then(|mut s| s.find(|s| !s.is_empty()))
                .map(str::to_ascii_lowercase),
            host: page
                .host_str()
                .unwrap_or_default()
                .trim_start_matches("www.")
                .to_ascii_lowercase(),
        };
        // Items grouped by (the parent's tag and classes, the item's tag).
        let mut groups: HashMap<(u16, String, u16), Group> = HashMap::new();
        let mut by_tag: HashMap<u16, Vec<NodeId>> = HashMap::new();
        for (id, node) in dom.nodes().iter().enumerate() {
            let Kind::Element {
                tag: parent_tag, ..
            } = node.kind
            else {
                continue;
            };
            let id = NodeId::try_from(id).unwrap_or(NodeId::MAX);
            by_tag.clear();
            for child in dom.children(id) {
                if let Kind::Element { tag, .. } = dom.node(child).kind {
                    by_tag.entry(tag).or_default().push(child);
                }
            }
            // Parents that look alike: the same tag and first class (a grid's rows, a list
            // split by an ad, a card's wrapper whether it is a "top" ad or not).
            let classes = dom.classes(id).into_iter().next().unwrap_or_default();
            for (tag, items) in by_tag.drain() {
                if items.len() < 2 && classes.is_empty() {
                    continue;
                }
                let group = groups
                    .entry((parent_tag, classes.clone(), tag))
                    .or_insert_with(|| Group {
                        parent: id,
                        items: Vec::new(),
                    });
                if group.items.len() < GROUP_ITEMS {
                    group.items.extend(items);
                }
            }
            if bounds::over() {
                return None;
            }
        }
        let mut judged: Vec<Judged> = groups
            .into_values()
            .filter(|g| g.items.len() >= 2)
            .filter_map(|g| judge(dom, &links, &shapes, &parts, g))
            .collect();
        judged.sort_by(|a, b| b.score.total_cmp(&a.score));
        let best = outermost(dom, &judged)?;
        let best = merged(dom, best, &links, &shapes);
        let listings: Vec<Listing> = best
            .iter()
            .map(|(card, url)| read_card(dom, *card, url, page))
            .collect();
        let selector = selector_for(dom, &best);
        Some(Self {
            listings,
            structure: Structure::Cards { selector },
        })
    }
}

/// The best group, or one about as good whose items hold its items: the whole card rather
/// than its text column (`li > article`, `div.card > section.main`), so that the photo and
/// the price beside it are read too.
fn outermost<'j>(dom: &Dom<'_>, judged: &'j [Judged]) -> Option<&'j Judged> {
    let mut best = judged.first()?;
    loop {
        let urls: std::collections::HashSet<&str> =
            best.cards.iter().map(|(_, u)| u.as_str()).collect();
        let first = best.cards.first().map(|(c, _)| *c)?;
        let outer = judged.iter().find(|j| {
            j.score >= 0.8 * best.score
                && j.cards.len() + 1 >= best.cards.len()
                && j.cards
                    .first()
                    .is_some_and(|(c, _)| dom.ancestors(first).any(|a| a == *c))
                && j.cards
                    .iter()
                    .filter(|(_, u)| urls.contains(u.as_str()))
                    .count()
                    * 10
                    >= urls.len() * 9
        });
        match outer {
            Some(o) => best = o,
            None => return Some(best),
        }
    }
}

/// The cards of `best` with the other cards of the same kind on the page (the same tag and
/// first class, one link of the same family): a featured card above the list, the rows of a
/// grid.
fn merged(
    dom: &Dom<'_>,
    best: &Judged,
    links: &[Link],
    shapes: &[String],
) -> Vec<(NodeId, String)> {
    let kind = |id: NodeId| {
        (
            dom.tag_of(id).map(str::to_owned),
            dom.classes(id).into_iter().next(),
        )
    };
    let Some(want) = best.cards.first().map(|(c, _)| kind(*c)) else {
        return Vec::new();
    };
    let mut cards = best.cards.clone();
    let mut urls: std::collections::HashSet<String> =
        cards.iter().map(|(_, u)| u.clone()).collect();
    let nodes = NodeId::try_from(dom.nodes().len()).unwrap_or(NodeId::MAX);
    for id in 1..nodes {
        if !matches!(dom.node(id).kind, Kind::Element { .. }) || kind(id) != want {
            continue;
        }
        let overlaps = cards
            .iter()
            .any(|(c, _)| dom.descendants(*c).contains(&id) || dom.descendants(id).contains(c));
        if overlaps || in_furniture(dom, id) {
            continue;
        }
        let mine = links_in(dom, links, id);
        if mine.len() > ITEM_LINKS {
            continue;
        }
        let mut of = mine.iter().filter(|l| {
            let shape = &shapes[l.shape as usize];
            !is_action(shape) && family_of(shape) == best.family
        });
        let Some(first) = of.next() else {
            continue;
        };
        if of.all(|l| l.url == first.url) && urls.insert(first.url.clone()) {
            cards.push((id, first.url.clone()));
        }
    }
    cards.sort_by_key(|(c, _)| *c);
    cards
}

/// An item's own link when it has none of its group's shape (a sponsored project among flats):
/// the first page it links to at least twice (photo and headline), not an action.
fn own_link<'l>(dom: &Dom<'_>, mine: &'l [Link], shapes: &[String], host: &str) -> Option<&'l str> {
    let candidates = mine.iter().filter(|l| {
        let shape = &shapes[l.shape as usize];
        // On the site itself (a partner's ad links elsewhere), and not an action.
        names_one(shape) && !is_action(shape) && shape.split('/').next() == Some(host)
    });
    // Each page linked: how often, and whether a link to it shows words or a photo (a pager's
    // "2" and "›" do not).
    let mut counts: Vec<(&str, usize, bool)> = Vec::new();
    for l in candidates {
        let shows = std::iter::once(l.node)
            .chain(dom.descendants(l.node))
            .any(|d| dom.is(d, "img"))
            || dom
                .text(l.node, 256)
                .chars()
                .filter(|c| c.is_alphabetic())
                .count()
                >= 8;
        match counts.iter_mut().find(|(u, _, _)| *u == l.url) {
            Some((_, n, s)) => {
                *n += 1;
                *s |= shows;
            }
            None => counts.push((&l.url, 1, shows)),
        }
    }
    counts
        .iter()
        .find(|(_, n, shows)| *n >= 2 && *shows)
        .map(|(u, _, _)| *u)
}

/// Judges one group: its cards (items with exactly one link of the group's shape, each to a
/// page of its own) and how much it looks like a result list.
fn judge(
    dom: &Dom<'_>,
    links: &[Link],
    shapes: &[String],
    page: &PageParts,
    mut group: Group,
) -> Option<Judged> {
    let host = page.host.as_str();
    group.items.sort_unstable();
    group.items.dedup();
    // The shape most items link to; among as many, the one linked most often and with the
    // most words (the listing's own link: photo, headline, price), not an action's.
    #[derive(Default)]
    struct Seen {
        items: usize,
        links: usize,
        words: usize,
    }
    let mut seen: HashMap<u32, Seen> = HashMap::new();
    let mut item_shapes: Vec<u32> = Vec::new();
    for item in &group.items {
        let mine = links_in(dom, links, *item);
        if mine.len() > ITEM_LINKS {
            continue;
        }
        item_shapes.clear();
        for l in mine {
            let e = seen.entry(l.shape).or_default();
            e.links += 1;
            e.words += dom.text(l.node, 256).split_whitespace().count();
            item_shapes.push(l.shape);
        }
        item_shapes.sort_unstable();
        item_shapes.dedup();
        for s in &item_shapes {
            seen.entry(*s).or_default().items += 1;
        }
    }
    // A listing's own link is on most items, and usually twice (its photo and its headline);
    // an agent's, once; a bookmark's or a calculator's is no listing's.
    let rank = |s: u32, e: &Seen| {
        (
            e.items + e.links.min(2 * e.items),
            e.words,
            std::cmp::Reverse(s),
        )
    };
    let (&shape, best) = seen
        .iter()
        .filter(|(s, _)| {
            let shape = &shapes[**s as usize];
            names_one(shape) && !is_action(shape)
        })
        .max_by_key(|(s, e)| rank(**s, e))?;
    if best.items < 2 {
        return None;
    }

    let family = family_of(&shapes[shape as usize]);
    let mut cards: Vec<(NodeId, String)> = Vec::new();
    let mut wrappers = 0usize;
    let mut urls: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for item in &group.items {
        let mine = links_in(dom, links, *item);
        if mine.len() > ITEM_LINKS {
            wrappers += 1;
            continue;
        }
        // The group's shape; else one of its family (the same site's listings under another
        // fixed path).
        let kin = |want: &dyn Fn(u32) -> bool| {
            let mut of = mine
                .iter()
                .filter(|l| want(l.shape))
                .map(|l| l.url.as_str());
            let first = of.next()?;
            Some((first, of.any(|u| u != first)))
        };
        let found = kin(&|s| s == shape)
            .or_else(|| {
                kin(&|s| {
                    !is_action(&shapes[s as usize]) && family_of(&shapes[s as usize]) == family
                })
            })
            .or_else(|| own_link(dom, mine, shapes, host).map(|u| (u, false)));
        let Some((first, several)) = found else {
            continue;
        };
        if several {
            wrappers += 1;
            continue;
        }
        if urls.insert(first) {
            cards.push((*item, first.to_owned()));
        }
    }
    if cards.len() < 2 {
        return None;
    }
    // Page furniture holds no result list (a footer of a thousand links to other searches).
    if in_furniture(dom, group.parent) {
        return None;
    }
    let n = cards.len() as f64;
    let (mut priced, mut worded, mut rich) = (0usize, 0usize, 0usize);
    for (card, _) in &cards {
        let text = dom.text(*card, 4 * 1024);
        let letters = text.chars().filter(|c| c.is_alphabetic()).count();
        if (12..=4_000).contains(&letters) {
            worded += 1;
        }
        let has_price = price_in_text(&text).is_some();
        if has_price {
            priced += 1;
        }
        // A card shows more than its link's words: a price, a photo, a second text.
        let texts = dom
            .descendants(*card)
            .filter(|d| matches!(dom.node(*d).kind, Kind::Text(_)))
            .take(2)
            .count();
        let photo = std::iter::once(*card)
            .chain(dom.descendants(*card))
            .any(|d| dom.is(d, "img"));
        if has_price || photo || texts >= 2 {
            rich += 1;
        }
        if bounds::over() {
            return None;
        }
    }
    let priced = priced as f64 / n;
    let worded = worded as f64 / n;
    let rich = rich as f64 / n;
    let shape_text = &shapes[shape as usize];
    let leads_elsewhere = match (page.first.as_deref(), shape_text.split('/').nth(1)) {
        (Some(p), Some(s)) if p == s => 0.7,
        _ => 1.0,
    };
    let items = group.items.len() as f64;
    let whole = 1.0 - wrappers as f64 / items;
    // Items without a link of the shape are ads, spacers or a card's other parts: the more of
    // them, the less this is the list of cards itself.
    let share = 0.5 + 0.5 * n / items;
    // The number of cards counts, but less than what each shows: thirty priced cards are a
    // result list before three thousand bare links.
    let score = (1.0 + n).ln()
        * (0.25 + priced)
        * (0.2 + worded)
        * (0.2 + rich)
        * leads_elsewhere
        * whole
        * share;
    // A handful of bare links is a menu, not a result list.
    if priced < 0.3 && (cards.len() < 4 || worded < 0.5 || rich < 0.5) {
        return None;
    }
    Some(Judged {
        cards,
        score,
        family,
    })
}

/// A CSS selector for the cards: the items' tag and the classes they all share, under their
/// parent's id (when they have one parent) or the classes their parents share
/// (`ul#srchrslt-adtable > li.ad-listitem`).
fn selector_for(dom: &Dom<'_>, cards: &[(NodeId, String)]) -> String {
    let plain = |c: &str| {
        !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
            && !c.starts_with(|ch: char| ch.is_ascii_digit())
    };
    let shared = |ids: &mut dyn Iterator<Item = NodeId>| -> String {
        let mut common: Option<Vec<String>> = None;
        for id in ids {
            let classes = dom.classes(id);
            common = Some(match common {
                None => classes,
                Some(c) => c.into_iter().filter(|x| classes.contains(x)).collect(),
            });
        }
        let mut common = common.unwrap_or_default();
        common.retain(|c| plain(c));
        common.truncate(2);
        common.iter().map(|c| format!(".{c}")).collect()
    };
    let tag_of = |id: NodeId| dom.tag_of(id).unwrap_or("div").to_owned();
    let item = match cards.first() {
        Some((first, _)) => format!(
            "{}{}",
            tag_of(*first),
            shared(&mut cards.iter().map(|(c, _)| *c))
        ),
        None => return String::new(),
    };
    let mut parents: Vec<NodeId> = cards.iter().map(|(c, _)| dom.node(*c).parent).collect();
    parents.dedup();
    let parent = parents[0];
    let parent = match dom
        .attr(parent, "id")
        .filter(|i| plain(i) && parents.len() == 1)
    {
        Some(id) => format!("{}#{id}", tag_of(parent)),
        None => format!("{}{}", tag_of(parent), shared(&mut parents.iter().copied())),
    };
    format!("{parent} > {item}")
}

// ---------------------------------------------------------------- a card's fields

/// The text of the first element in `card` that `pick` accepts and whose text `take` reads.
fn first_text<T>(
    dom: &Dom<'_>,
    card: NodeId,
    pick: impl Fn(NodeId) -> bool,
    take: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    dom.descendants(card)
        .filter(|id| matches!(dom.node(*id).kind, Kind::Element { .. }) && pick(*id))
        .find_map(|id| take(&dom.text(id, 2 * 1024)))
}

/// Whether an attribute of `id` that names what an element is (class, id, itemprop,
/// data-testid) contains `word`. Typography classes (`text-title3`, `font-title`) say how a
/// text looks, not what it is, and do not count.
fn named(dom: &Dom<'_>, id: NodeId, word: &str) -> bool {
    ["class", "itemprop", "data-testid", "id"].iter().any(|a| {
        dom.attr(id, a).is_some_and(|v| {
            v.to_ascii_lowercase()
                .split_ascii_whitespace()
                .filter(|t| !t.starts_with("text-") && !t.starts_with("font-"))
                .any(|t| t.contains(word))
        })
    })
}

/// A heading's level (1 for `h1`), `None` for another element.
fn heading_level(dom: &Dom<'_>, id: NodeId) -> Option<u8> {
    match dom.tag_of(id)?.as_bytes() {
        [b'h', d @ b'1'..=b'6'] => Some(d - b'0'),
        _ => None,
    }
}

/// Whether `id` is prose rather than a card's facts: a heading, a title or a description.
/// A box merely named so that holds several texts (the type line, the facts, the address) is
/// not prose.
fn is_prose(dom: &Dom<'_>, id: NodeId) -> bool {
    let one_text = || {
        dom.descendants(id)
            .filter(|d| matches!(dom.node(*d).kind, Kind::Text(_)))
            .nth(2)
            .is_none()
    };
    heading_level(dom, id).is_some()
        || ((named(dom, id, "title") && !named(dom, id, "subtitle"))
            || named(dom, id, "description"))
            && one_text()
}

/// A card's facts: its visible text outside its headings, title and description, with the
/// accessible names (`aria-label`) of elements that show an icon instead of words ("2 locali"
/// beside a bed icon).
fn facts(dom: &Dom<'_>, card: NodeId, cap: usize) -> String {
    let mut raw = String::new();
    let range = dom.descendants(card);
    let mut at = range.start;
    while at < range.end && raw.len() < cap {
        let node = dom.node(at);
        match node.kind {
            Kind::Text(_) => {
                if let Some(t) = dom.text_of(at) {
                    let t = String::from_utf8_lossy(t);
                    // "m<sup>2</sup>": the exponent belongs to the unit before it.
                    if dom.is(node.parent, "sup") && t.trim() == "2" {
                        raw.truncate(raw.trim_end().len());
                        raw.push('²');
                    } else {
                        raw.push_str(&t);
                    }
                    raw.push(BETWEEN_TEXTS);
                }
                at += 1;
            }
            Kind::Element { .. } if is_prose(dom, at) => at = node.end.max(at + 1),
            Kind::Element { .. } => {
                let empty = !dom
                    .descendants(at)
                    .any(|d| matches!(dom.node(d).kind, Kind::Text(_)));
                if empty && let Some(label) = dom.attr(at, "aria-label") {
                    raw.push_str(&label);
                    raw.push(BETWEEN_TEXTS);
                }
                at += 1;
            }
            Kind::Document => at += 1,
        }
    }
    super::parse::clean_facts(&raw)
}

/// A card's title: its most important heading; else an element whose class says title; else
/// the words of its link; else its first line of words; else its link's `title`.
fn title_of(dom: &Dom<'_>, card: NodeId, is_main_link: &dyn Fn(NodeId) -> bool) -> Option<String> {
    let sane_title = |t: &str| non_empty(t).filter(|t| sane::title(t));
    let all = || std::iter::once(card).chain(dom.descendants(card));
    let heading = all()
        .filter_map(|id| heading_level(dom, id).map(|l| (l, id)))
        .filter_map(|(l, id)| sane_title(&dom.text(id, 1024)).map(|t| (l, t)))
        .min_by_key(|(l, _)| *l)
        .map(|(_, t)| t);
    let letters = |t: &String| t.chars().filter(|c| c.is_alphabetic()).count() >= 8;
    heading
        .or_else(|| {
            first_text(
                dom,
                card,
                |id| named(dom, id, "title") && !named(dom, id, "subtitle"),
                sane_title,
            )
        })
        .or_else(|| {
            all()
                .filter(|id| is_main_link(*id))
                .filter_map(|id| sane_title(&dom.text(id, 1024)))
                .filter(letters)
                .max_by_key(|t| t.chars().count())
        })
        .or_else(|| {
            all()
                .filter_map(|id| dom.text_of(id))
                .map(String::from_utf8_lossy)
                .filter_map(|t| sane_title(&t))
                .find(|t| letters(t) && price_in_text(t).is_none())
        })
        .or_else(|| {
            all().filter(|id| is_main_link(*id)).find_map(|id| {
                dom.attr(id, "title")
                    .or_else(|| dom.attr(id, "aria-label"))
                    .and_then(|t| sane_title(&t))
            })
        })
}

/// One card as a listing: its fields read as a generic card's are.
fn read_card(dom: &Dom<'_>, card: NodeId, url: &str, page: &url::Url) -> Listing {
    let is_main_link = |id: NodeId| {
        dom.is(id, "a")
            && dom.attr(id, "href").is_some_and(|h| {
                absolute(page, &h).is_some_and(|a| a.split('#').next() == Some(url))
            })
    };
    let title = title_of(dom, card, &is_main_link);
    let facts = facts(dom, card, 8 * 1024);
    let price = first_text(
        dom,
        card,
        |id| named(dom, id, "price") || named(dom, id, "preis") || named(dom, id, "prezzo"),
        |t| {
            price_in_text(t)
                .or_else(|| parse_price(t))
                .filter(|p| sane::price(p.0))
        },
    )
    .or_else(|| price_in_text(&facts));
    // The card's facts first; a figure only its title states ("2-Zimmer-Wohnung") after.
    let figure = |read: fn(&str) -> Option<f64>, sane: fn(f64) -> bool| {
        read(&facts)
            .or_else(|| title.as_deref().and_then(read))
            .filter(|v| sane(*v))
    };
    let picture = std::iter::once(card)
        .chain(dom.descendants(card))
        .filter(|id| dom.is(*id, "img"))
        .filter_map(|id| image::candidate(|a| dom.attr(id, a)))
        .fold(None::<image::Candidate>, |best, c| match best {
            Some(b) if b.area >= c.area => Some(b),
            _ => Some(c),
        })
        .map(|c| c.url)
        .or_else(|| {
            std::iter::once(card)
                .chain(dom.descendants(card))
                .find_map(|id| dom.attr(id, "style").and_then(|s| image::background(&s)))
        });
    let description = first_text(dom, card, |id| named(dom, id, "description"), non_empty);
    let (rooms, area_m2) = (
        figure(parse_rooms, sane::rooms),
        figure(parse_area, sane::area),
    );
    Listing {
        id: url.to_owned(),
        title,
        price: price.as_ref().map(|p| p.0),
        currency: price.and_then(|p| p.1),
        rooms,
        area_m2,
        url: Some(url.to_owned()),
        image: picture.and_then(|p| absolute(page, &p)),
        description,
        fallback: Vec::new(),
    }
}

// ---------------------------------------------------------------- embedded results

/// Most JSON values looked at in one page's scripts.
const JSON_NODES: usize = 500_000;

/// The results a page embeds as data: its JSON-LD `ItemList`, else the best array of results
/// in a script's JSON.
fn embedded(dom: &Dom<'_>, body: &[u8], page: &url::Url) -> Option<Found> {
    if let Extraction::Listings(listings) = super::generic::json_ld_list(body, page)
        && listings.len() >= 2
    {
        return Some(Found {
            listings,
            structure: Structure::JsonLd,
        });
    }
    let mut best: Option<(f64, Found)> = None;
    for script in dom.scripts() {
        let attrs = dom.bytes(script.attrs);
        let is_json = memchr::memmem::find(attrs, b"application/json").is_some()
            || memchr::memmem::find(attrs, b"__NEXT_DATA__").is_some();
        if !is_json {
            continue;
        }
        let Ok(value) = serde_json::from_slice::<Value>(dom.bytes(script.body)) else {
            continue;
        };
        let name = super::dom::attribute(attrs, "id")
            .map(|i| format!("#{}", String::from_utf8_lossy(i)))
            .unwrap_or_else(|| "script[type=\"application/json\"]".to_owned());
        let mut budget = JSON_NODES;
        if let Some((score, listings)) = best_array(&value, page, &mut budget)
            && best.as_ref().is_none_or(|(s, _)| score > *s)
        {
            best = Some((
                score,
                Found {
                    listings,
                    structure: Structure::Embedded {
                        script: name.clone(),
                    },
                },
            ));
        }
        if bounds::over() {
            break;
        }
    }
    best.map(|(_, f)| f)
}

/// The array of objects in `v` that most looks like a result list, as listings, with its score;
/// walks at most `budget` values, without recursion.
fn best_array(v: &Value, page: &url::Url, budget: &mut usize) -> Option<(f64, Vec<Listing>)> {
    let mut best: Option<(f64, Vec<Listing>)> = None;
    let mut stack: Vec<&Value> = vec![v];
    while let Some(v) = stack.pop() {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        match v {
            Value::Array(items) => {
                let objects = items.iter().filter(|i| i.is_object()).count();
                if objects >= 2 {
                    let listings: Vec<Listing> =
                        items.iter().filter_map(|i| json_listing(i, page)).collect();
                    if listings.len() >= 2 {
                        let n = listings.len() as f64;
                        let priced =
                            listings.iter().filter(|l| l.price.is_some()).count() as f64 / n;
                        let titled =
                            listings.iter().filter(|l| l.title.is_some()).count() as f64 / n;
                        let score = n * (0.25 + priced) * (0.2 + titled);
                        if best.as_ref().is_none_or(|(s, _)| score > *s) {
                            best = Some((score, listings));
                        }
                    }
                }
                stack.extend(items.iter().rev());
            }
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    best
}

/// The first of `keys` that `item` has, as text.
fn field<'v>(item: &'v serde_json::Map<String, Value>, keys: &[&str]) -> Option<&'v Value> {
    keys.iter()
        .find_map(|k| item.get(*k))
        .filter(|v| !v.is_null())
}

/// A number in a JSON value: a number, a numeric string, or an object's `value`/`amount`.
fn json_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => parse_price(s)
            .map(|p| p.0)
            .or_else(|| parse_number(s.trim())),
        Value::Object(m) => field(m, &["value", "amount", "raw", "min"]).and_then(json_number),
        _ => None,
    }
}

/// One embedded result as a listing: it needs a link to a page of its own.
fn json_listing(item: &Value, page: &url::Url) -> Option<Listing> {
    let map = item.as_object()?;
    let link = field(
        map,
        &[
            "url",
            "link",
            "href",
            "permalink",
            "detailUrl",
            "canonicalUrl",
            "seoUrl",
            "shareUrl",
            "path",
        ],
    )
    .and_then(|v| str_or_num(Some(v)))?;
    let url = absolute(page, &link)?;
    let parsed = url::Url::parse(&url).ok()?;
    if !names_one(&shape_of(&parsed)) || parsed.path() == page.path() {
        return None;
    }
    let title = field(
        map,
        &["title", "name", "headline", "heading", "subject", "label"],
    )
    .and_then(|v| str_or_num(Some(v)))
    .and_then(|t| non_empty(&t))
    .filter(|t| sane::title(t));
    let price_value = field(
        map,
        &[
            "price",
            "rent",
            "priceValue",
            "rentPrice",
            "totalRent",
            "baseRent",
            "amount",
            "cost",
        ],
    );
    let price = price_value
        .and_then(json_number)
        .filter(|p| sane::price(*p));
    let currency = price_value
        .and_then(|v| match v {
            Value::String(s) => super::parse::currency_of(s),
            Value::Object(m) => {
                field(m, &["currency", "currencyCode"]).and_then(|c| str_or_num(Some(c)))
            }
            _ => None,
        })
        .or_else(|| {
            field(map, &["currency", "priceCurrency", "currencyCode"])
                .and_then(|c| str_or_num(Some(c)))
        });
    let rooms = field(
        map,
        &[
            "rooms",
            "numberOfRooms",
            "roomCount",
            "bedrooms",
            "numberOfBedrooms",
        ],
    )
    .and_then(json_number)
    .filter(|r| sane::rooms(*r));
    let area = field(
        map,
        &[
            "area",
            "livingSpace",
            "livingArea",
            "floorSize",
            "size",
            "surface",
            "squareMeters",
            "sqm",
        ],
    )
    .and_then(json_number)
    .filter(|a| sane::area(*a));
    let image = field(
        map,
        &[
            "image",
            "imageUrl",
            "thumbnail",
            "thumbnailUrl",
            "photo",
            "mainImage",
            "picture",
        ],
    )
    .and_then(|v| match v {
        Value::Array(a) => a.first().and_then(|i| {
            str_or_num(Some(i)).or_else(|| i.get("url").and_then(|u| str_or_num(Some(u))))
        }),
        Value::Object(m) => field(m, &["url", "src", "href"]).and_then(|u| str_or_num(Some(u))),
        other => str_or_num(Some(other)),
    })
    .and_then(|i| absolute(page, &i));
    let mut id = parsed.clone();
    id.set_fragment(None);
    Some(Listing {
        id: id.into(),
        title,
        price,
        currency,
        rooms,
        area_m2: area,
        url: Some(url),
        image,
        description: None,
        fallback: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> url::Url {
        url::Url::parse("https://homes.example/rent/berlin").unwrap()
    }

    const CARDS: &str = r#"<html><body>
<header><nav><ul><li><a href="/rent/hamburg">Hamburg</a></li><li><a href="/rent/munich">Munich</a></li><li><a href="/rent/cologne">Cologne</a></li></ul></nav></header>
<main><ul class="results">
 <li class="card"><a href="/expose/101"><img src="/p/101.jpg" width="400" height="300"></a><h2>Bright flat in Mitte</h2><p>2 rooms · 54 m²</p><span class="price">1.150 €</span></li>
 <li class="ad"><div>Banner: buy a sofa</div></li>
 <li class="card featured"><a href="/expose/102"><img src="/p/102.jpg"></a><h2>Quiet flat near the park</h2><p>3 Zimmer · 81 m²</p><span class="price">1.480 €</span></li>
 <li class="card"><a href="/expose/103"><h3>Loft with terrace</h3></a><p>1 room, 40 m², rent 990 € warm</p></li>
</ul>
<div class="pagination"><a href="/rent/berlin?page=2">2</a><a href="/rent/berlin?page=3">3</a></div>
</main><footer><a href="/about">About us</a><a href="/jobs">Jobs</a><a href="/imprint">Imprint</a></footer></body></html>"#;

    #[test]
    fn the_result_list_is_the_repeated_structure_of_priced_cards() {
        let found = read(CARDS.as_bytes(), &page()).unwrap();
        let rows: Vec<_> = found
            .listings
            .iter()
            .map(|l| {
                (
                    l.id.as_str(),
                    l.title.as_deref(),
                    l.price,
                    l.rooms,
                    l.area_m2,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "https://homes.example/expose/101",
                    Some("Bright flat in Mitte"),
                    Some(1150.0),
                    Some(2.0),
                    Some(54.0)
                ),
                (
                    "https://homes.example/expose/102",
                    Some("Quiet flat near the park"),
                    Some(1480.0),
                    Some(3.0),
                    Some(81.0)
                ),
                (
                    "https://homes.example/expose/103",
                    Some("Loft with terrace"),
                    Some(990.0),
                    Some(1.0),
                    Some(40.0)
                ),
            ]
        );
        assert_eq!(
            found.listings[0].image.as_deref(),
            Some("https://homes.example/p/101.jpg")
        );
        assert_eq!(
            found.structure,
            Structure::Cards {
                selector: "ul.results > li.card".into()
            }
        );
    }

    #[test]
    fn embedded_results_are_read_when_the_html_shows_no_cards() {
        let body = r#"<html><body><div id="app"></div>
<script id="__NEXT_DATA__" type="application/json">{"props":{"pageProps":{"nav":[{"url":"/about","name":"About"}],
"results":[{"id":1,"url":"/expose/1","title":"Flat one","price":{"value":900,"currency":"EUR"},"rooms":2,"livingSpace":50},
{"id":2,"url":"/expose/2","title":"Flat two","price":"1.100 €","rooms":3,"livingSpace":70}]}}}</script></body></html>"#;
        let found = read(body.as_bytes(), &page()).unwrap();
        assert_eq!(
            found.structure,
            Structure::Embedded {
                script: "#__NEXT_DATA__".into()
            }
        );
        let l = &found.listings;
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].title.as_deref(), Some("Flat one"));
        assert_eq!(
            (l[0].price, l[0].currency.as_deref()),
            (Some(900.0), Some("EUR"))
        );
        assert_eq!(
            (l[1].price, l[1].rooms, l[1].area_m2),
            (Some(1100.0), Some(3.0), Some(70.0))
        );
    }

    #[test]
    fn menus_footers_and_pagers_are_no_result_list() {
        let body = r#"<html><body><nav><a href="/rent/hamburg">Hamburg</a><a href="/rent/munich">Munich</a></nav>
<ul class="cities"><li><a href="/rent/a-b-c">A</a></li><li><a href="/rent/d-e-f">D</a></li></ul>
<p>No flats match your search.</p><footer><ul><li><a href="/about">About</a></li><li><a href="/jobs">Jobs</a></li></ul></footer></body></html>"#;
        assert!(read(body.as_bytes(), &page()).is_none());
        assert_eq!(
            Auto.extract(body.as_bytes(), &page()),
            Extraction::LayoutUnknown
        );
    }

    #[test]
    fn shapes_keep_what_names_a_kind_of_page() {
        let s = |u: &str| shape_of(&url::Url::parse(u).unwrap());
        assert_eq!(
            s("https://www.x.de/s-anzeige/helle-3-zimmer-wohnung/3471974249-196-2099"),
            "x.de/s-anzeige/*/*"
        );
        assert_eq!(
            s("https://x.de/s-anzeige/premium-apartment-mit-potenzial/3465657924-196-2069"),
            "x.de/s-anzeige/*/*"
        );
        assert_eq!(
            s("https://x.co.uk/properties/89825950"),
            "x.co.uk/properties/*"
        );
        assert_eq!(s("https://x.org/about"), "x.org/about");
        assert_eq!(
            s("https://x.org/detail.php?id=4&utm_source=y"),
            "x.org/detail.php?id"
        );
        assert!(!names_one("x.org/about") && names_one("x.org/expose/*"));
    }
}
