//! The streaming card scanner shared by the HTML profiles: one `lol_html` pass, no DOM.
//!
//! A result page is hundreds of kilobytes and is read every 30 seconds, so building a tree
//! (scraper/html5ever: ~17× slower on Idealista's page) is the wrong tool. Instead the card
//! selector opens a card and field selectors capture text (or an attribute) while the card is
//! open. Text handlers are scoped to the field selectors or the cards (never document-wide), so
//! lol_html can skip the text of the rest of the page (its big inline scripts included) without
//! decoding it.

use super::bounds::{self, Unreadable};
use super::image;
use super::parse::{BETWEEN_TEXTS, clean_text, decode_entities, push_capped, push_capped_to};
use lol_html::html_content::{Element, EndTag, TextChunk, TextType};
use lol_html::{DocumentContentHandlers, ElementContentHandlers, HtmlRewriter, Selector, Settings};
use std::borrow::Cow;
use std::cell::RefCell;
use std::rc::Rc;

/// Where the parts of a card are. Field selectors are matched anywhere but only count inside
/// an open card.
#[derive(Clone, Debug)]
pub(crate) struct CardRules {
    pub(crate) card: Selector,
    pub(crate) id_attr: Option<String>,
    /// The card's links: the first is its link; all of them offer their text as a title.
    pub(crate) link: Selector,
    pub(crate) title: Option<FieldRule>,
    pub(crate) price: Option<FieldRule>,
    pub(crate) rooms: Option<FieldRule>,
    pub(crate) area: Option<FieldRule>,
    /// The card's description or teaser.
    pub(crate) description: Option<FieldRule>,
    /// Where the title is when `title` yields nothing sane: the generic reader's rule.
    pub(crate) title_fallback: Option<FieldRule>,
    /// Where the price is when `price` yields nothing sane: the generic reader's rule.
    pub(crate) price_fallback: Option<FieldRule>,
    /// Where the picture is when `image` yields none: the generic reader's rule.
    pub(crate) image_fallback: Option<ImageRule>,
    /// Where the description is when `description` yields none: the generic reader's rule.
    pub(crate) description_fallback: Option<FieldRule>,
    /// Each match is one separate text ("2 hab.", "60 m²", "8 minutos").
    pub(crate) details: Option<Selector>,
    pub(crate) image: Option<ImageRule>,
    /// Elements whose `style` may paint the picture (`background-image`), used when no image
    /// element yields one.
    pub(crate) background: Option<Selector>,
    /// Keep the card's whole visible text ([`RawCard::whole_text`]), for figures found by unit.
    pub(crate) card_text: bool,
    /// What every card's start tag carries, when the card selector guarantees it: lets
    /// [`scan_cards`] read only the part of the page that holds the cards.
    pub(crate) mark: Option<CardMark>,
}

/// One field of a card: the first match of `selector` inside it, read as text or, with
/// `attr`, as that attribute.
#[derive(Clone, Debug)]
pub(crate) struct FieldRule {
    pub(crate) selector: Selector,
    pub(crate) attr: Option<String>,
}

impl FieldRule {
    /// The text of the first match.
    pub(crate) fn text(selector: Selector) -> Self {
        Self {
            selector,
            attr: None,
        }
    }
}

/// Where a card's picture is and how to choose it.
#[derive(Clone, Debug)]
pub(crate) struct ImageRule {
    pub(crate) selector: Selector,
    pub(crate) pick: ImagePick,
}

/// How a card's picture is chosen among the elements the image selector matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ImagePick {
    /// The largest that is not an icon ([`image::candidate`]).
    Largest,
    /// The first that names one: in `attr` if given, else as an `<img>` or background shows it.
    First { attr: Option<String> },
}

/// An attribute every card's start tag carries (and, if known, the card's tag name).
#[derive(Clone, Debug)]
pub(crate) struct CardMark {
    /// The card's tag name, lowercase (`None`: any element).
    pub(crate) tag: Option<Cow<'static, str>>,
    /// The attribute name, lowercase.
    pub(crate) attr: Cow<'static, str>,
}

impl CardMark {
    /// The mark of a card selector that is one compound selector naming `attr` (the id
    /// attribute), e.g. `article.listing` with `data-id`: every card that yields a listing
    /// carries it. `None` for selector lists and combinators, where that is not certain.
    pub(crate) fn for_selector(selector: &str, attr: &str) -> Option<Self> {
        let selector = selector.trim();
        let simple = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '#');
        let attr = attr.trim().to_ascii_lowercase();
        if attr.is_empty()
            || !attr
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
        // Only a plain `tag.class#id` compound: anything else (lists, combinators, pseudo
        // classes, attribute conditions that may negate) keeps the whole page.
        if selector.is_empty() || !selector.chars().all(simple) {
            return None;
        }
        let tag_len = selector.find(['.', '#']).unwrap_or(selector.len());
        let tag = &selector[..tag_len];
        Some(Self {
            tag: (!tag.is_empty()).then(|| Cow::Owned(tag.to_ascii_lowercase())),
            attr: Cow::Owned(attr),
        })
    }
}

/// Elements whose content is not markup: a `<` inside them is text.
const RAW_TEXT: [&[u8]; 10] = [
    b"script",
    b"style",
    b"textarea",
    b"title",
    b"xmp",
    b"iframe",
    b"noembed",
    b"noframes",
    b"noscript",
    b"plaintext",
];

/// Whether `rest` (what follows a `<` or `</`) starts with tag name `name`, case-insensitively.
fn names_tag(rest: &[u8], name: &[u8]) -> bool {
    rest.len() > name.len()
        && rest[..name.len()].eq_ignore_ascii_case(name)
        && matches!(
            rest[name.len()],
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/' | b'>'
        )
}

/// Whether position `at` could be inside a comment, a CDATA section or a raw-text element
/// (script, style, …) that started after `from` (a position known to be outside one):
/// walking back, the nearest such start or end decides. Errs towards "yes", which only costs
/// the caller a full read.
fn maybe_in_raw_text(body: &[u8], from: usize, at: usize) -> bool {
    let head = &body[..at];
    for i in memchr::memrchr_iter(b'<', &head[from..]).map(|i| from + i) {
        let rest = &head[i + 1..];
        let (closing, name) = match rest.first() {
            Some(b'/') => (true, &rest[1..]),
            _ => (false, rest),
        };
        match name.first().map(u8::to_ascii_lowercase) {
            Some(b'!') if rest.starts_with(b"![CDATA[") => return true,
            // An unclosed comment.
            Some(b'!')
                if rest.starts_with(b"!--")
                    && memchr::memmem::find(&rest[3..], b"-->").is_none() =>
            {
                return true;
            }
            // Only these letters start a raw-text element's name: most tags stop here.
            Some(b's' | b't' | b'x' | b'i' | b'n' | b'p')
                if RAW_TEXT.iter().any(|t| names_tag(name, t)) =>
            {
                return !closing;
            }
            _ => {}
        }
    }
    false
}

/// If the bytes at `at` are attribute `attr` inside a start tag (of `tag`, if given), that
/// tag's `<` position and name.
fn card_tag_at<'b>(body: &'b [u8], at: usize, mark: &CardMark) -> Option<(usize, &'b [u8])> {
    let after = body.get(at + mark.attr.len())?;
    if !matches!(after, b'=' | b' ' | b'\t' | b'\n' | b'\r' | b'>' | b'/')
        || !body.get(at.checked_sub(1)?)?.is_ascii_whitespace()
    {
        return None;
    }
    let lt = memchr::memrchr(b'<', &body[..at])?;
    if memchr::memchr(b'>', &body[lt..at]).is_some() {
        return None;
    }
    let name_len = body[lt + 1..at]
        .iter()
        .position(|b| !b.is_ascii_alphanumeric() && *b != b'-')?;
    let name = &body[lt + 1..lt + 1 + name_len];
    let wanted = mark
        .tag
        .as_deref()
        .is_none_or(|t| name.eq_ignore_ascii_case(t.as_bytes()));
    (name_len > 0 && wanted).then_some((lt, name))
}

/// The part of `body` that holds the cards: from the start tag of the first card to the end
/// tag closing the last one. A result page wraps its cards in hundreds of kilobytes of head,
/// inline scripts and footer (Idealista: the 32 cards are 246 KB of 775 KB), and lol_html
/// tokenizes whatever it is given, so this is most of the saving on a large page. The card
/// selectors need no ancestor outside a card, so the slice yields the same cards. `None` on
/// any doubt (a card-like tag that may sit in a script or comment, no matching end tag): the
/// caller then reads the whole page. A plain byte search, because no crate finds a tag's
/// extent without tokenizing everything before it.
pub(crate) fn card_region<'b>(body: &'b [u8], mark: &CardMark) -> Option<&'b [u8]> {
    // Forward only: memchr's forward search is vectorised, its reverse search is not.
    let mut cards = memchr::memmem::find_iter(body, mark.attr.as_bytes())
        .filter_map(|at| card_tag_at(body, at, mark));
    let first = cards.next()?;
    let (before_last, last) = cards.fold((first, first), |(_, last), next| (last, next));
    // The first card must not sit in a script or comment; the last one is checked back to the
    // card before it (a card-like tag in a script between cards would show up there).
    if maybe_in_raw_text(body, 0, first.0) || maybe_in_raw_text(body, before_last.0, last.0) {
        return None;
    }
    // The end tag that closes the last card: count same-name tags from its start.
    let (start, name) = last;
    let mut depth = 0usize;
    for lt in memchr::memchr_iter(b'<', &body[start..]).map(|i| start + i) {
        let rest = &body[lt + 1..];
        if names_tag(rest, name) {
            depth += 1;
        } else if rest.first() == Some(&b'/') && names_tag(&rest[1..], name) {
            depth -= 1;
            if depth == 0 {
                let close = memchr::memchr(b'>', rest)?;
                return Some(&body[first.0..=lt + 1 + close]);
            }
        }
    }
    None
}

/// The characters of `selector` outside quotes, brackets and parentheses, with their
/// positions: where a list's commas and a chain's combinators are.
fn top_level(selector: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let (mut depth, mut quote) = (0i32, None::<char>);
    selector.char_indices().filter(move |&(_, c)| {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '(') => depth += 1,
            (None, ']' | ')') => depth -= 1,
            (None, _) => return depth == 0,
        }
        false
    })
}

/// Splits a selector list at its top-level commas (not those inside quotes or brackets).
fn split_list(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, _) in top_level(list).filter(|&(_, c)| c == ',') {
        parts.push(list[start..i].trim());
        start = i + 1;
    }
    parts.push(list[start..].trim());
    parts.retain(|p| !p.is_empty());
    parts
}

/// `inner` restricted to descendants of `card` (both may be selector lists). Scoping lets
/// lol_html skip field matching (and text capture) everywhere outside the result cards,
/// which on a real page is most of it. Only the card selector's last compound scopes (`li.card`
/// of `ul.results > li.card`): a field only counts inside an open card anyway, and each
/// descendant step a selector chains multiplies the streaming reader's work on a deep page.
pub(crate) fn scoped(card: &str, inner: &str) -> String {
    let mut out = Vec::new();
    for c in split_list(card) {
        let c = last_compound(c);
        for i in split_list(inner) {
            let joined = format!("{c} {i}");
            if !out.contains(&joined) {
                out.push(joined);
            }
        }
    }
    out.join(", ")
}

/// The last compound selector of a complex one (`li.card` of `ul > li.card`, `a[title="x y"]`
/// of `div a[title="x y"]`).
fn last_compound(selector: &str) -> &str {
    let start = top_level(selector)
        .filter(|&(_, c)| c.is_whitespace() || matches!(c, '>' | '+' | '~'))
        .last()
        .map_or(0, |(i, c)| i + c.len_utf8());
    let last = selector[start..].trim();
    if last.is_empty() {
        selector.trim()
    } else {
        last
    }
}

/// Text fields captured from a card, in [`RawCard::texts`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// The longest text of the card's links.
    LinkText = 0,
    Title = 1,
    Price = 2,
    Rooms = 3,
    Area = 4,
    Description = 5,
    /// The title by the generic reader's rule, when the card has a rule of its own too.
    TitleFallback = 6,
    /// The price by the generic reader's rule, when the card has a rule of its own too.
    PriceFallback = 7,
    /// The description by the generic reader's rule, when the card has a rule of its own too.
    DescriptionFallback = 8,
}

const FIELDS: usize = 9;

/// Most of a card's text that is kept for figures found by unit: they sit near the top.
const CARD_TEXT_CAP: usize = 8 * 1024;

/// What one card yielded, raw (entities decoded in attributes; texts still raw).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawCard {
    pub(crate) id: Option<String>,
    pub(crate) link: Option<String>,
    /// The `title`, else the `aria-label`, of the first link that has one.
    pub(crate) link_title: Option<String>,
    /// Captured text (or attribute value) per [`Field`].
    pub(crate) texts: [Option<String>; FIELDS],
    pub(crate) details: Vec<String>,
    /// The card's visible text outside its title and description (its facts), each text node
    /// followed by a space (when [`CardRules::card_text`]).
    pub(crate) whole_text: String,
    picture: Option<image::Candidate>,
    /// The picture by the generic reader's rule ([`CardRules::image_fallback`]).
    fallback_picture: Option<image::Candidate>,
    background: Option<String>,
}

impl RawCard {
    /// A captured text field, raw.
    pub(crate) fn text(&self, field: Field) -> Option<&str> {
        self.texts[field as usize].as_deref()
    }

    /// The card's picture: the chosen image, else a CSS background.
    pub(crate) fn image(&self) -> Option<&str> {
        self.picture
            .as_ref()
            .map(|c| c.url.as_str())
            .or(self.background.as_deref())
    }

    /// The card's picture by the generic reader's rule, when its own rule found none.
    pub(crate) fn fallback_image(&self) -> Option<&str> {
        self.fallback_picture.as_ref().map(|c| c.url.as_str())
    }
}

#[derive(Default)]
struct Scan {
    cards: Vec<RawCard>,
    current: Option<RawCard>,
    serial: u64,
    open: [bool; FIELDS],
    detail_open: bool,
    /// The text of the card link being read, compared with the longest so far at its end.
    link_text: Option<String>,
}

impl Scan {
    fn close_card(&mut self) {
        if let Some(card) = self.current.take() {
            self.cards.push(card);
        }
        self.open = [false; FIELDS];
        self.detail_open = false;
        self.link_text = None;
    }
}

type Shared = Rc<RefCell<Scan>>;

fn attr(el: &Element<'_, '_>, name: &str) -> Option<String> {
    // Trim after decoding: `&#32;` or `&nbsp;` alone must not become an id.
    el.get_attribute(name)
        .map(|v| decode_entities(&v).trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Runs `f` when the element's end tag arrives, if the same card is still open then.
fn on_end(el: &mut Element<'_, '_>, state: &Shared, f: impl FnOnce(&mut Scan) + 'static) {
    let serial = state.borrow().serial;
    let state = Rc::clone(state);
    if let Some(handlers) = el.end_tag_handlers() {
        handlers.push(Box::new(move |_: &mut EndTag<'_>| {
            let mut s = state.borrow_mut();
            if s.serial == serial {
                f(&mut s);
            }
            Ok(())
        }));
    }
}

fn field_handler(
    state: &Shared,
    field: Field,
) -> impl FnMut(&mut Element<'_, '_>) -> lol_html::HandlerResult + 'static {
    let state = Rc::clone(state);
    move |el| {
        {
            let mut s = state.borrow_mut();
            let Some(card) = s.current.as_mut() else {
                return Ok(());
            };
            let slot = &mut card.texts[field as usize];
            if slot.is_some() {
                return Ok(());
            }
            *slot = Some(String::new());
            s.open[field as usize] = true;
        }
        on_end(el, &state, move |s| s.open[field as usize] = false);
        Ok(())
    }
}

/// Takes an attribute as the field's value: from the first element in the card that has it.
fn field_attr_handler(
    state: &Shared,
    field: Field,
    name: String,
) -> impl FnMut(&mut Element<'_, '_>) -> lol_html::HandlerResult + 'static {
    let state = Rc::clone(state);
    move |el| {
        let mut s = state.borrow_mut();
        if let Some(card) = s.current.as_mut() {
            let slot = &mut card.texts[field as usize];
            if slot.is_none() {
                *slot = attr(el, &name);
            }
        }
        Ok(())
    }
}

/// Appends the element's visible text to `field` while that field is open. lol_html calls a
/// text handler once per chunk however many matched elements enclose it, so nested matches
/// (`.price-row > .item-price` for `[class*=price]`) never double the text.
fn field_text(
    state: &Shared,
    field: Field,
) -> impl FnMut(&mut TextChunk<'_>) -> lol_html::HandlerResult + 'static {
    let state = Rc::clone(state);
    move |t| {
        if !matches!(t.text_type(), TextType::Data) {
            return Ok(());
        }
        let mut guard = state.borrow_mut();
        let s = &mut *guard;
        if !s.open[field as usize] {
            return Ok(());
        }
        if let Some(buf) = s
            .current
            .as_mut()
            .and_then(|c| c.texts[field as usize].as_mut())
        {
            push_capped(buf, t.as_str());
        }
        Ok(())
    }
}

/// Each link of the open card: the first gives the card its link, the first with a `title` or
/// `aria-label` its link title, and every link's text competes for the longest (a photo link's
/// counter "18" loses to the headline's link).
fn link_handlers(state: &Shared) -> ElementContentHandlers<'static> {
    let st = Rc::clone(state);
    let text_state = Rc::clone(state);
    ElementContentHandlers::default()
        .element(move |el: &mut Element<'_, '_>| {
            {
                let mut s = st.borrow_mut();
                let Some(card) = s.current.as_mut() else {
                    return Ok(());
                };
                if card.link.is_none() {
                    let Some(href) = attr(el, "href") else {
                        return Ok(());
                    };
                    card.link = Some(href);
                }
                if card.link_title.is_none() {
                    card.link_title = attr(el, "title").or_else(|| attr(el, "aria-label"));
                }
                s.link_text = Some(String::new());
            }
            on_end(el, &st, |s| {
                let text = s.link_text.take().map(|t| clean_text(&t));
                if let (Some(text), Some(card)) = (text, s.current.as_mut()) {
                    let longest = &mut card.texts[Field::LinkText as usize];
                    if longest
                        .as_ref()
                        .is_none_or(|l| text.chars().count() > l.chars().count())
                    {
                        *longest = Some(text);
                    }
                }
            });
            Ok(())
        })
        .text(move |t: &mut TextChunk<'_>| {
            if matches!(t.text_type(), TextType::Data)
                && let Some(buf) = text_state.borrow_mut().link_text.as_mut()
            {
                push_capped(buf, t.as_str());
            }
            Ok(())
        })
}

fn image_handler(
    state: &Shared,
    pick: ImagePick,
    fallback: bool,
) -> impl FnMut(&mut Element<'_, '_>) -> lol_html::HandlerResult + 'static {
    let state = Rc::clone(state);
    move |el| {
        let mut s = state.borrow_mut();
        let Some(card) = s.current.as_mut() else {
            return Ok(());
        };
        let picture = if fallback {
            &mut card.fallback_picture
        } else {
            &mut card.picture
        };
        match &pick {
            ImagePick::Largest => {
                let Some(c) = image::candidate(|a| attr(el, a)) else {
                    return Ok(());
                };
                // Strictly larger: on a tie the first in the card wins.
                if picture.as_ref().is_none_or(|p| c.area > p.area) {
                    *picture = Some(c);
                }
            }
            ImagePick::First { attr: name } => {
                if picture.is_some() {
                    return Ok(());
                }
                let url = match name {
                    Some(name) => attr(el, name).and_then(|v| image::from_attr(name, &v)),
                    None => image::of_element(|a| attr(el, a)),
                };
                *picture = url.map(|url| image::Candidate { url, area: 0 });
            }
        }
        Ok(())
    }
}

/// Scans `body` for cards. Returns the cards in page order, or the parser's error.
pub(crate) fn scan_cards(body: &[u8], rules: &CardRules) -> Result<Vec<RawCard>, String> {
    if let Some(region) = rules.mark.as_ref().and_then(|m| card_region(body, m)) {
        let cards = scan_all(region, rules)?;
        // No card in the region (its marks were on other elements): read it all to be sure.
        if !cards.is_empty() {
            return Ok(cards);
        }
    }
    scan_all(body, rules)
}

/// For the profiles' tests: the cards `rules` find in `page` by its card region, after
/// asserting that a region was found and that reading the whole page finds the same cards;
/// with the region's length.
#[cfg(test)]
pub(crate) fn cards_by_region(page: &[u8], rules: &CardRules) -> (usize, Vec<RawCard>) {
    let mark = rules.mark.as_ref().expect("these rules have a card mark");
    let region = card_region(page, mark).expect("the page has a card region");
    let whole = CardRules {
        mark: None,
        ..rules.clone()
    };
    let narrowed = scan_cards(page, rules).unwrap();
    assert_eq!(narrowed, scan_cards(page, &whole).unwrap());
    (region.len(), narrowed)
}

fn scan_all(body: &[u8], rules: &CardRules) -> Result<Vec<RawCard>, String> {
    let state: Shared = Rc::default();
    let mut handlers: Vec<(Cow<'_, Selector>, ElementContentHandlers<'_>)> = Vec::new();

    let st = Rc::clone(&state);
    let id_attr = rules.id_attr.clone();
    let card = ElementContentHandlers::default().element(move |el: &mut Element<'_, '_>| {
        let id = id_attr.as_deref().and_then(|a| attr(el, a));
        {
            let mut s = st.borrow_mut();
            if let Some(cur) = &s.current {
                // A match inside the open card with the same (or no) id is part of it;
                // a different id means the previous card was closed implicitly.
                if id.is_none() || id == cur.id {
                    return Ok(());
                }
            }
            s.close_card();
            s.serial += 1;
            s.current = Some(RawCard {
                id,
                ..RawCard::default()
            });
        }
        on_end(el, &st, Scan::close_card);
        Ok(())
    });
    let card = if rules.card_text {
        let st = Rc::clone(&state);
        card.text(move |t: &mut TextChunk<'_>| {
            let mut guard = st.borrow_mut();
            let s = &mut *guard;
            // The title and the description are prose: figures in them ("2-Zimmer-Wohnung",
            // "about 60 m²") are not the card's facts.
            let prose = [
                Field::Title,
                Field::TitleFallback,
                Field::Description,
                Field::DescriptionFallback,
            ]
            .iter()
            .any(|f| s.open[*f as usize]);
            if matches!(t.text_type(), TextType::Data)
                && !prose
                && let Some(card) = s.current.as_mut()
            {
                push_capped_to(&mut card.whole_text, t.as_str(), CARD_TEXT_CAP);
                // Text nodes of different elements stay apart: "3" and "89 m²" are not
                // "389 m²".
                if t.last_in_text_node() {
                    let mut gap = [0u8; 4];
                    push_capped_to(
                        &mut card.whole_text,
                        BETWEEN_TEXTS.encode_utf8(&mut gap),
                        CARD_TEXT_CAP,
                    );
                }
            }
            Ok(())
        })
    } else {
        card
    };
    handlers.push((Cow::Borrowed(&rules.card), card));
    handlers.push((Cow::Borrowed(&rules.link), link_handlers(&state)));

    for (rule, field) in [
        (&rules.title, Field::Title),
        (&rules.price, Field::Price),
        (&rules.rooms, Field::Rooms),
        (&rules.area, Field::Area),
        (&rules.description, Field::Description),
        (&rules.title_fallback, Field::TitleFallback),
        (&rules.price_fallback, Field::PriceFallback),
        (&rules.description_fallback, Field::DescriptionFallback),
    ] {
        let Some(rule) = rule else {
            continue;
        };
        let handler = match &rule.attr {
            Some(name) => ElementContentHandlers::default().element(field_attr_handler(
                &state,
                field,
                name.clone(),
            )),
            None => ElementContentHandlers::default()
                .element(field_handler(&state, field))
                .text(field_text(&state, field)),
        };
        handlers.push((Cow::Borrowed(&rule.selector), handler));
    }

    if let Some(details) = &rules.details {
        let st = Rc::clone(&state);
        handlers.push((
            Cow::Borrowed(details),
            ElementContentHandlers::default()
                .element(move |el: &mut Element<'_, '_>| {
                    {
                        let mut s = st.borrow_mut();
                        let Some(card) = s.current.as_mut() else {
                            return Ok(());
                        };
                        if card.details.len() >= 32 {
                            return Ok(());
                        }
                        card.details.push(String::new());
                        s.detail_open = true;
                    }
                    on_end(el, &st, |s| s.detail_open = false);
                    Ok(())
                })
                .text({
                    let st = Rc::clone(&state);
                    move |t: &mut TextChunk<'_>| {
                        if !matches!(t.text_type(), TextType::Data) {
                            return Ok(());
                        }
                        let mut guard = st.borrow_mut();
                        let s = &mut *guard;
                        let buf = s.current.as_mut().and_then(|c| c.details.last_mut());
                        if let (true, Some(buf)) = (s.detail_open, buf) {
                            push_capped(buf, t.as_str());
                        }
                        Ok(())
                    }
                }),
        ));
    }

    for (rule, fallback) in [(&rules.image, false), (&rules.image_fallback, true)] {
        if let Some(rule) = rule {
            handlers.push((
                Cow::Borrowed(&rule.selector),
                ElementContentHandlers::default().element(image_handler(
                    &state,
                    rule.pick.clone(),
                    fallback,
                )),
            ));
        }
    }

    if let Some(selector) = &rules.background {
        let st = Rc::clone(&state);
        handlers.push((
            Cow::Borrowed(selector),
            ElementContentHandlers::default().element(move |el: &mut Element<'_, '_>| {
                let mut s = st.borrow_mut();
                if let Some(card) = s.current.as_mut().filter(|c| c.background.is_none()) {
                    card.background = attr(el, "style").and_then(|v| image::background(&v));
                }
                Ok(())
            }),
        ));
    }

    run(body, handlers, Vec::new())?;
    let mut s = state.borrow_mut();
    s.close_card();
    Ok(std::mem::take(&mut s.cards))
}

/// The page's visible text (no scripts or styles), entities left raw, up to `cap` bytes.
/// Used on the cold path only, to look for a "no results" message.
pub(crate) fn visible_text(body: &[u8], cap: usize) -> String {
    let out = Rc::new(RefCell::new(String::new()));
    let o = Rc::clone(&out);
    let text = DocumentContentHandlers::default().text(move |t: &mut TextChunk<'_>| {
        if matches!(t.text_type(), TextType::Data | TextType::RCData) {
            let mut s = o.borrow_mut();
            if s.len() < cap {
                s.push_str(t.as_str());
                s.push(' ');
            }
        }
        Ok(())
    });
    // A parser error only ends the text early; what was seen is still useful.
    let _ = run(body, Vec::new(), vec![text]);
    out.take()
}

/// The `href` of the first element (in page order) that matches `selectors[i]` and has one,
/// for the smallest such `i`: a list of ways to find one link, best first. The pass stops as
/// soon as the best way has matched. Used once per further result page, to find the next.
pub(crate) fn first_href(body: &[u8], selectors: &[&Selector]) -> Option<String> {
    let found: Rc<RefCell<Vec<Option<String>>>> =
        Rc::new(RefCell::new(vec![None; selectors.len()]));
    let handlers = selectors
        .iter()
        .enumerate()
        .map(|(i, sel)| {
            let found = Rc::clone(&found);
            let handler =
                ElementContentHandlers::default().element(move |el: &mut Element<'_, '_>| {
                    let mut found = found.borrow_mut();
                    if found[i].is_none() {
                        found[i] = attr(el, "href").filter(|h| !h.trim().is_empty());
                    }
                    // The best way matched: nothing later can win.
                    if i == 0 && found[0].is_some() {
                        return Err("found".into());
                    }
                    Ok(())
                });
            (Cow::Borrowed(*sel), handler)
        })
        .collect();
    // Stopping early is an error to the rewriter; either way what was found stands.
    let _ = run(body, handlers, Vec::new());
    found.take().into_iter().flatten().next()
}

/// Pieces the page is handed to the reader in when it nests deeply: the budget is looked at
/// between two pieces, and a piece of a deep page holds few tags.
const DEEP_PIECE: usize = 256;
/// Pieces for an ordinary page (the budget is looked at between them too).
const PIECE: usize = 64 * 1024;
/// A page nesting deeper than this is handed over in [`DEEP_PIECE`]s.
const DEEP: usize = 64;

/// Runs the streaming reader over `body` within the bounds of `super::bounds`: a page nested
/// too deeply is not read, and the reading stops once its budget is used up (both recorded as
/// the reason, and an error here).
fn run<'h, 's>(
    body: &[u8],
    element_content_handlers: Vec<(Cow<'s, Selector>, ElementContentHandlers<'h>)>,
    document_content_handlers: Vec<DocumentContentHandlers<'h>>,
) -> Result<(), String> {
    let depth = super::dom::streaming_depth(body, bounds::STREAMING_DEPTH_MAX);
    if depth > bounds::STREAMING_DEPTH_MAX {
        let why = Unreadable::TooDeep {
            limit: bounds::STREAMING_DEPTH_MAX,
        };
        bounds::trip(why.clone());
        return Err(why.to_string());
    }
    let settings = Settings {
        element_content_handlers,
        document_content_handlers,
        // Non-strict: a page whose markup is ambiguous for the streaming parser is still read
        // as well as it can be rather than rejected.
        strict: false,
        memory_settings: lol_html::MemorySettings {
            max_allowed_memory_usage: bounds::STREAMING_MEMORY_MAX,
            ..lol_html::MemorySettings::default()
        },
        ..Settings::new()
    };
    let mut rewriter = HtmlRewriter::new(settings, |_: &[u8]| {});
    let piece = if depth > DEEP { DEEP_PIECE } else { PIECE };
    for chunk in body.chunks(piece) {
        if let Err(e) = rewriter.write(chunk) {
            if matches!(e, lol_html::errors::RewritingError::MemoryLimitExceeded(_)) {
                bounds::trip(Unreadable::TooLarge {
                    limit: bounds::STREAMING_MEMORY_MAX,
                });
            }
            return Err(e.to_string());
        }
        if bounds::over() {
            return Err("stopped: over the reading budget".into());
        }
    }
    rewriter.end().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoping_distributes_over_selector_lists() {
        assert_eq!(scoped("article.item", ".price"), "article.item .price");
        assert_eq!(
            scoped("li.a, div[data-x=\"1,2\"]", "h2, [title=\"a,b\"]"),
            "li.a h2, li.a [title=\"a,b\"], div[data-x=\"1,2\"] h2, div[data-x=\"1,2\"] [title=\"a,b\"]"
        );
        // Only the card's last compound scopes; the same scoped selector is not repeated.
        assert_eq!(scoped("div div > article", ".price"), "article .price");
        assert_eq!(
            scoped("main ul > li.card, ol li.card", "a[title=\"x y\"]"),
            "li.card a[title=\"x y\"]"
        );
        assert_eq!(last_compound("div [data-x=\"a b\"]"), "[data-x=\"a b\"]");
    }

    const MARK: &CardMark = &CardMark {
        tag: Some(Cow::Borrowed("article")),
        attr: Cow::Borrowed("data-element-id"),
    };

    fn rules(mark: Option<&CardMark>) -> CardRules {
        let card = "article.card[data-element-id]";
        CardRules {
            card: card.parse().unwrap(),
            id_attr: Some("data-element-id".into()),
            link: scoped(card, "a[href]").parse().unwrap(),
            title: None,
            price: Some(FieldRule::text(scoped(card, ".price").parse().unwrap())),
            rooms: None,
            area: None,
            description: None,
            title_fallback: None,
            price_fallback: None,
            image_fallback: None,
            description_fallback: None,
            details: None,
            image: None,
            background: None,
            card_text: false,
            mark: mark.cloned(),
        }
    }

    fn ids(body: &str, mark: Option<&CardMark>) -> Vec<String> {
        scan_cards(body.as_bytes(), &rules(mark))
            .unwrap()
            .into_iter()
            .filter_map(|c| c.id)
            .collect()
    }

    const CARD: &str = r#"<article class="card" data-element-id="1"><a href="/1">one</a><span class="price">10</span></article>"#;

    #[test]
    fn the_region_runs_from_the_first_card_to_the_end_tag_of_the_last() {
        let body = format!(
            "<html><head><script>var x = 1 < 2;</script></head><body><nav>menu</nav>{CARD}\n\
             <article class=\"card\" data-element-id=\"2\"><article>nested</article>\
             <a href=\"/2\">two</a></article><footer><div data-element-id=\"ad\"></div></footer>"
        );
        let region = card_region(body.as_bytes(), MARK).map(|r| std::str::from_utf8(r).unwrap());
        assert_eq!(
            region,
            Some(
                &format!(
                    "{CARD}\n<article class=\"card\" data-element-id=\"2\"><article>nested</article>\
                     <a href=\"/2\">two</a></article>"
                )[..]
            )
        );
        assert_eq!(ids(&body, Some(MARK)), ["1", "2"]);
        // The attribute in text or on another tag is not a card.
        let text = "<p>data-element-id=\"3\"</p><div data-element-id=\"4\"></div>";
        assert_eq!(card_region(text.as_bytes(), MARK), None);
    }

    #[test]
    fn a_card_like_tag_in_a_script_or_comment_means_the_whole_page_is_read() {
        for before in [
            "<script>tpl = '<article class=\"card\" data-element-id=\"0\">",
            "<SCRIPT type=text/template><article class=\"card\" data-element-id=\"0\">",
            "<!-- <article class=\"card\" data-element-id=\"0\">",
            "<textarea><article class=\"card\" data-element-id=\"0\">",
        ] {
            let close = if before.starts_with("<!--") {
                "-->"
            } else if before.starts_with("<textarea") {
                "</textarea>"
            } else {
                "</script>"
            };
            let body = format!("<body>{before}</article>{close}{CARD}</body>");
            assert_eq!(card_region(body.as_bytes(), MARK), None, "{before}");
            assert_eq!(ids(&body, Some(MARK)), ids(&body, None), "{before}");
            assert_eq!(ids(&body, None), ["1"], "{before}");
        }
        // A closed script before the cards is fine.
        let body = format!("<script>if (a <b) x = '</div>';</script>{CARD}");
        assert!(card_region(body.as_bytes(), MARK).is_some());
        // A template in a script after the last card: the whole page; between cards: the
        // region, which reads that script as a script.
        let template =
            "<script>t='<article class=\"card\" data-element-id=\"9\"><a href=/9>';</script>";
        let after = format!("{CARD}{template}");
        assert_eq!(card_region(after.as_bytes(), MARK), None);
        let between = format!("{CARD}{template}{}", CARD.replace("\"1\"", "\"2\""));
        assert!(card_region(between.as_bytes(), MARK).is_some());
        for body in [after, between] {
            assert_eq!(ids(&body, Some(MARK)), ids(&body, None));
            assert!(!ids(&body, None).contains(&"9".to_owned()));
        }
    }

    #[test]
    fn a_last_card_without_an_end_tag_means_the_whole_page_is_read() {
        let body =
            format!("{CARD}<article class=\"card\" data-element-id=\"2\"><a href=\"/2\">x</a>");
        assert_eq!(card_region(body.as_bytes(), MARK), None);
        assert_eq!(ids(&body, Some(MARK)), ["1", "2"]);
    }

    #[test]
    fn only_a_plain_compound_card_selector_narrows_the_page() {
        let mark = CardMark::for_selector("article.listing", "data-id").unwrap();
        assert_eq!(mark.tag.as_deref(), Some("article"));
        assert_eq!(mark.attr, "data-id");
        let any = CardMark::for_selector(" .card#x ", " Data-ID ").unwrap();
        assert_eq!((any.tag, &*any.attr), (None, "data-id"));
        for selector in [
            "li, div.card",
            "ul > li",
            "div li",
            "li:not(.ad)",
            "li[data-x]",
            "",
        ] {
            assert!(
                CardMark::for_selector(selector, "data-id").is_none(),
                "{selector}"
            );
        }
        assert!(CardMark::for_selector("li", "data id").is_none());
    }

    #[test]
    fn a_region_without_cards_falls_back_to_the_whole_page() {
        // The only marked element is not a card; the cards carry no id (so yield no listing,
        // but they are still cards: the page is not "layout unknown").
        let body =
            "<div data-element-id=\"x\"></div><article class=\"card\"><a href=/1>1</a></article>";
        let mark = CardMark {
            tag: None,
            attr: Cow::Borrowed("data-element-id"),
        };
        assert!(card_region(body.as_bytes(), &mark).is_some());
        let rules = CardRules {
            card: "article.card".parse().unwrap(),
            ..rules(Some(&mark))
        };
        let cards = scan_cards(body.as_bytes(), &rules).unwrap();
        assert_eq!(cards.len(), 1);
    }
}
