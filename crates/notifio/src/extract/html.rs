//! The streaming card scanner shared by the HTML profiles: one `lol_html` pass, no DOM.
//!
//! A result page is hundreds of kilobytes and is read every 30 seconds, so building a tree
//! (scraper/html5ever: ~17× slower on Idealista's page) is the wrong tool. Instead the card
//! selector opens a card and field selectors capture text while the card is open. Text
//! handlers are scoped to the field selectors (never document-wide), so lol_html can skip the
//! text of the rest of the page (its big inline scripts included) without decoding it.

use super::parse::{decode_entities, push_capped};
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
    pub(crate) link: Selector,
    pub(crate) title: Option<Selector>,
    pub(crate) price: Option<Selector>,
    pub(crate) rooms: Option<Selector>,
    pub(crate) area: Option<Selector>,
    /// Each match is one separate text ("2 hab.", "60 m²", "8 minutos").
    pub(crate) details: Option<Selector>,
    pub(crate) image: Option<Selector>,
}

/// Splits a selector list at its top-level commas (not those inside quotes or brackets).
fn split_list(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None::<char>, 0);
    for (i, c) in list.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '(') => depth += 1,
            (None, ']' | ')') => depth -= 1,
            (None, ',') if depth == 0 => {
                parts.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(list[start..].trim());
    parts.retain(|p| !p.is_empty());
    parts
}

/// `inner` restricted to descendants of `card` (both may be selector lists). Scoping lets
/// lol_html skip field matching (and text capture) everywhere outside the result cards,
/// which on a real page is most of it.
pub(crate) fn scoped(card: &str, inner: &str) -> String {
    let mut out = Vec::new();
    for c in split_list(card) {
        for i in split_list(inner) {
            out.push(format!("{c} {i}"));
        }
    }
    out.join(", ")
}

/// Text fields captured from a card, in [`RawCard::texts`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    LinkText = 0,
    Title = 1,
    Price = 2,
    Rooms = 3,
    Area = 4,
}

const FIELDS: usize = 5;

/// What one card yielded, raw (entities decoded in attributes; texts still raw).
#[derive(Clone, Debug, Default)]
pub(crate) struct RawCard {
    pub(crate) id: Option<String>,
    pub(crate) link: Option<String>,
    pub(crate) link_title: Option<String>,
    pub(crate) image: Option<String>,
    pub(crate) texts: [Option<String>; FIELDS],
    pub(crate) details: Vec<String>,
}

impl RawCard {
    /// A captured text field, raw.
    pub(crate) fn text(&self, field: Field) -> Option<&str> {
        self.texts[field as usize].as_deref()
    }
}

#[derive(Default)]
struct Scan {
    cards: Vec<RawCard>,
    current: Option<RawCard>,
    serial: u64,
    open: [bool; FIELDS],
    detail_open: bool,
}

impl Scan {
    fn close_card(&mut self) {
        if let Some(card) = self.current.take() {
            self.cards.push(card);
        }
        self.open = [false; FIELDS];
        self.detail_open = false;
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

/// Scans `body` for cards. Returns the cards in page order, or the parser's error.
pub(crate) fn scan_cards(body: &[u8], rules: &CardRules) -> Result<Vec<RawCard>, String> {
    let state: Shared = Rc::default();
    let mut handlers: Vec<(Cow<'_, Selector>, ElementContentHandlers<'_>)> = Vec::new();

    let st = Rc::clone(&state);
    let id_attr = rules.id_attr.clone();
    handlers.push((
        Cow::Borrowed(&rules.card),
        ElementContentHandlers::default().element(move |el: &mut Element<'_, '_>| {
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
        }),
    ));

    let st = Rc::clone(&state);
    handlers.push((
        Cow::Borrowed(&rules.link),
        ElementContentHandlers::default()
            .element(move |el: &mut Element<'_, '_>| {
                {
                    let mut s = st.borrow_mut();
                    let Some(card) = s.current.as_mut() else {
                        return Ok(());
                    };
                    if card.link.is_some() {
                        return Ok(());
                    }
                    let Some(href) = attr(el, "href") else {
                        return Ok(());
                    };
                    card.link = Some(href);
                    card.link_title = attr(el, "title");
                    card.texts[Field::LinkText as usize] = Some(String::new());
                    s.open[Field::LinkText as usize] = true;
                }
                on_end(el, &st, |s| s.open[Field::LinkText as usize] = false);
                Ok(())
            })
            .text(field_text(&state, Field::LinkText)),
    ));

    for (selector, field) in [
        (&rules.title, Field::Title),
        (&rules.price, Field::Price),
        (&rules.rooms, Field::Rooms),
        (&rules.area, Field::Area),
    ] {
        if let Some(selector) = selector {
            handlers.push((
                Cow::Borrowed(selector),
                ElementContentHandlers::default()
                    .element(field_handler(&state, field))
                    .text(field_text(&state, field)),
            ));
        }
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

    if let Some(image) = &rules.image {
        let st = Rc::clone(&state);
        handlers.push((
            Cow::Borrowed(image),
            ElementContentHandlers::default().element(move |el: &mut Element<'_, '_>| {
                let mut s = st.borrow_mut();
                if let Some(card) = s.current.as_mut().filter(|c| c.image.is_none()) {
                    card.image = ["src", "data-src", "data-lazy"]
                        .iter()
                        .filter_map(|a| attr(el, a))
                        .find(|v| !v.starts_with("data:"));
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

fn run<'h, 's>(
    body: &[u8],
    element_content_handlers: Vec<(Cow<'s, Selector>, ElementContentHandlers<'h>)>,
    document_content_handlers: Vec<DocumentContentHandlers<'h>>,
) -> Result<(), String> {
    let settings = Settings {
        element_content_handlers,
        document_content_handlers,
        // Non-strict: a page whose markup is ambiguous for the streaming parser is still read
        // as well as it can be rather than rejected.
        strict: false,
        ..Settings::new()
    };
    let mut rewriter = HtmlRewriter::new(settings, |_: &[u8]| {});
    rewriter.write(body).map_err(|e| e.to_string())?;
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
    }
}
