//! A page as a tree: for reading a page no profile describes (auto mode), and for knowing how
//! deep a page nests before the streaming reader is given it.
//!
//! Hand-written rather than html5ever (scraper), for two measured reasons. Speed: auto mode
//! must read a page within 10× of what its profile costs, and building an html5ever DOM of
//! Idealista's 775 KB page alone is ~12× the profile's whole read (docs/benchmarks/extract.md).
//! Bounds that are ours: a page is read in one pass with no recursion, at most [`MAX_DEPTH`]
//! levels deep (deeper elements stay at that level, as Blink's parser stops nesting at 512)
//! and at most [`MAX_NODES`] nodes, whatever it holds.
//!
//! It follows the HTML rules that shape a result page: void elements, raw-text elements
//! (script, style, …), comments, the implied end tags of `p`, `li`, `dt`/`dd`, `option` and
//! table rows and cells, and end tags that close the element they name (one that names no
//! open element is ignored). It is not a conforming parser (no adoption agency, no foster
//! parenting): a result page's cards do not need one.

use super::parse::{clean_text, decode_entities};
use memchr::{memchr, memmem};
use std::borrow::Cow;
use std::collections::HashMap;

/// Deepest level an element is nested at; deeper start tags stay at this level.
pub(crate) const MAX_DEPTH: usize = 512;

/// Most nodes (elements and texts) kept; the rest of a larger page is not read.
pub(crate) const MAX_NODES: usize = 400_000;

/// A node's index in [`Dom::nodes`]: document order, so a subtree is a range of indices.
pub(crate) type NodeId = u32;

/// A byte range of the page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: u32,
    pub(crate) end: u32,
}

impl Span {
    fn new(start: usize, end: usize) -> Self {
        // A page is at most the fetcher's body cap (tens of MB): u32 holds it.
        let clamp = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        Self {
            start: clamp(start),
            end: clamp(end),
        }
    }

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }

    fn is_empty(self) -> bool {
        self.end <= self.start
    }
}

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The root.
    Document,
    /// An element: its interned lowercase tag name ([`Dom::tag_name`]) and the raw text of
    /// its attributes (between the name and the `>`).
    Element { tag: u16, attrs: Span },
    /// Visible text (raw: entities not decoded), never blank.
    Text(Span),
}

/// One node of the tree.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    pub(crate) parent: NodeId,
    /// One past the last node of its subtree.
    pub(crate) end: NodeId,
}

/// A `<script>` of the page: its start tag's attributes and its body.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Script {
    pub(crate) attrs: Span,
    pub(crate) body: Span,
}

/// A page as a tree of elements and texts, in document order.
pub(crate) struct Dom<'a> {
    src: &'a [u8],
    nodes: Vec<Node>,
    tags: Vec<Box<str>>,
    scripts: Vec<Script>,
    /// The page had more than [`MAX_NODES`] nodes: the rest was not read.
    pub(crate) truncated: bool,
}

/// What the tokenizer hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Token {
    /// `<name attrs>`; `self_closing` for `<name … />`.
    Start {
        name: Span,
        attrs: Span,
        self_closing: bool,
    },
    /// `</name>`.
    End { name: Span },
    /// Text between tags (raw).
    Text(Span),
    /// A raw-text element (`script`, `style`, …): its start tag and its body, whole.
    Raw { name: Span, attrs: Span, body: Span },
}

/// Elements whose content is not markup.
const RAW_TEXT: [&str; 10] = [
    "script",
    "style",
    "textarea",
    "title",
    "xmp",
    "iframe",
    "noembed",
    "noframes",
    "noscript",
    "plaintext",
];

/// Elements that never have content.
pub(crate) const VOID: [&str; 14] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];

/// Splits a page into tokens, in one forward pass.
pub(crate) struct Tokens<'a> {
    src: &'a [u8],
    pos: usize,
}

impl<'a> Tokens<'a> {
    pub(crate) fn new(src: &'a [u8]) -> Self {
        Self { src, pos: 0 }
    }

    fn name_end(&self, from: usize) -> usize {
        self.src[from..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.')))
            .map_or(self.src.len(), |p| from + p)
    }

    /// The `>` that ends a tag whose attributes start at `from`: not one inside a quoted
    /// attribute value.
    fn tag_end(&self, from: usize) -> usize {
        let s = self.src;
        let mut i = from;
        let mut after_eq = false;
        while i < s.len() {
            match s[i] {
                b'>' => return i,
                b'=' => after_eq = true,
                q @ (b'"' | b'\'') if after_eq => {
                    i = memchr(q, &s[i + 1..]).map_or(s.len(), |p| i + 1 + p);
                    after_eq = false;
                }
                b if b.is_ascii_whitespace() => {}
                _ => after_eq = false,
            }
            i += 1;
        }
        s.len()
    }

    /// Where the raw text of element `name` ends (its `</name`), from `from`.
    fn raw_end(&self, from: usize, name: &[u8]) -> usize {
        let s = self.src;
        let mut at = from;
        while let Some(p) = memmem::find(&s[at..], b"</") {
            let lt = at + p;
            let rest = &s[lt + 2..];
            if rest.len() >= name.len()
                && rest[..name.len()].eq_ignore_ascii_case(name)
                && rest
                    .get(name.len())
                    .is_none_or(|b| b.is_ascii_whitespace() || matches!(b, b'>' | b'/'))
            {
                return lt;
            }
            at = lt + 2;
        }
        s.len()
    }
}

impl Iterator for Tokens<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let s = self.src;
        loop {
            if self.pos >= s.len() {
                return None;
            }
            let Some(lt) = memchr(b'<', &s[self.pos..]).map(|p| self.pos + p) else {
                let text = Span::new(self.pos, s.len());
                self.pos = s.len();
                return Some(Token::Text(text));
            };
            if lt > self.pos {
                let text = Span::new(self.pos, lt);
                self.pos = lt;
                return Some(Token::Text(text));
            }
            let rest = &s[lt + 1..];
            match rest.first() {
                Some(b'!') if rest.starts_with(b"!--") => {
                    self.pos =
                        memmem::find(&s[lt + 4..], b"-->").map_or(s.len(), |p| lt + 4 + p + 3);
                }
                Some(b'!' | b'?') => {
                    self.pos = memchr(b'>', rest).map_or(s.len(), |p| lt + 1 + p + 1);
                }
                Some(b'/') => {
                    let name_start = lt + 2;
                    let name_end = self.name_end(name_start);
                    let close = memchr(b'>', &s[name_start..]).map_or(s.len(), |p| name_start + p);
                    self.pos = (close + 1).min(s.len());
                    if name_end > name_start
                        && s.get(name_start).is_some_and(u8::is_ascii_alphabetic)
                    {
                        return Some(Token::End {
                            name: Span::new(name_start, name_end),
                        });
                    }
                }
                Some(b) if b.is_ascii_alphabetic() => {
                    let name_start = lt + 1;
                    let name_end = self.name_end(name_start);
                    let close = self.tag_end(name_end);
                    let self_closing = close > name_end && s.get(close - 1) == Some(&b'/');
                    let attrs = Span::new(name_end, if self_closing { close - 1 } else { close });
                    let name = Span::new(name_start, name_end);
                    self.pos = (close + 1).min(s.len());
                    let raw = &s[name_start..name_end];
                    if let Some(r) = RAW_TEXT
                        .iter()
                        .find(|r| raw.eq_ignore_ascii_case(r.as_bytes()))
                    {
                        if self_closing && *r != "script" {
                            return Some(Token::Start {
                                name,
                                attrs,
                                self_closing,
                            });
                        }
                        let body_start = self.pos;
                        let body_end = if *r == "plaintext" {
                            s.len()
                        } else {
                            self.raw_end(body_start, raw)
                        };
                        self.pos = if body_end >= s.len() {
                            s.len()
                        } else {
                            memchr(b'>', &s[body_end..]).map_or(s.len(), |p| body_end + p + 1)
                        };
                        return Some(Token::Raw {
                            name,
                            attrs,
                            body: Span::new(body_start, body_end),
                        });
                    }
                    return Some(Token::Start {
                        name,
                        attrs,
                        self_closing,
                    });
                }
                _ => {
                    // A `<` that starts no tag is text.
                    let next = memchr(b'<', &s[lt + 1..]).map_or(s.len(), |p| lt + 1 + p);
                    self.pos = next;
                    return Some(Token::Text(Span::new(lt, next)));
                }
            }
        }
    }
}

/// How deep a page nests elements as a streaming reader without HTML's implied end tags sees
/// it (`lol_html`: an element is closed by its own end tag only), up to `cap + 1`: the cost of
/// matching descendant selectors grows with it.
pub(crate) fn streaming_depth(src: &[u8], cap: usize) -> usize {
    let mut stack: Vec<Span> = Vec::new();
    let mut deepest = 0;
    let mut foreign = 0usize;
    let name_of = |s: Span| &src[s.range()];
    for token in Tokens::new(src) {
        match token {
            Token::Start {
                name, self_closing, ..
            } => {
                let n = name_of(name);
                if VOID.iter().any(|v| n.eq_ignore_ascii_case(v.as_bytes()))
                    || (self_closing && foreign > 0)
                {
                    continue;
                }
                if n.eq_ignore_ascii_case(b"svg") || n.eq_ignore_ascii_case(b"math") {
                    foreign += 1;
                }
                stack.push(name);
                deepest = deepest.max(stack.len());
                if deepest > cap {
                    return deepest;
                }
            }
            Token::End { name } => {
                let n = name_of(name);
                if let Some(at) = stack
                    .iter()
                    .rposition(|s| name_of(*s).eq_ignore_ascii_case(n))
                {
                    for popped in stack.drain(at..) {
                        let p = name_of(popped);
                        if p.eq_ignore_ascii_case(b"svg") || p.eq_ignore_ascii_case(b"math") {
                            foreign = foreign.saturating_sub(1);
                        }
                    }
                }
            }
            Token::Text(_) | Token::Raw { .. } => {}
        }
    }
    deepest
}

/// Elements a `p` start tag or a block element's start tag closes an open `p` for.
const CLOSES_P: [&str; 31] = [
    "address",
    "article",
    "aside",
    "blockquote",
    "details",
    "div",
    "dl",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "main",
    "menu",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "ul",
    "li",
];

/// Where the search for an open element to close stops.
const SCOPE: [&str; 8] = [
    "html", "table", "td", "th", "caption", "button", "template", "object",
];

impl<'a> Dom<'a> {
    /// Reads `src` into a tree.
    pub(crate) fn parse(src: &'a [u8]) -> Self {
        let mut dom = Self {
            src,
            nodes: vec![Node {
                kind: Kind::Document,
                parent: 0,
                end: 1,
            }],
            tags: Vec::new(),
            scripts: Vec::new(),
            truncated: false,
        };
        let mut interned: HashMap<Box<str>, u16> = HashMap::new();
        // Open elements: node ids; the document at the bottom.
        let mut open: Vec<NodeId> = vec![0];
        let mut foreign = 0usize;
        for token in Tokens::new(src) {
            if dom.nodes.len() >= MAX_NODES {
                dom.truncated = true;
                break;
            }
            match token {
                Token::Text(span) => {
                    if src[span.range()].iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    dom.push_leaf(&open, Kind::Text(span));
                }
                Token::Raw { name, attrs, body } => {
                    let tag = dom.intern(&mut interned, name);
                    if &*dom.tags[tag as usize] == "script" {
                        dom.scripts.push(Script { attrs, body });
                    }
                    dom.push_leaf(&open, Kind::Element { tag, attrs });
                }
                Token::Start {
                    name,
                    attrs,
                    self_closing,
                } => {
                    let tag = dom.intern(&mut interned, name);
                    let (void, foreign_root, implied) = {
                        let tag_name = dom.tag_name(tag);
                        (
                            VOID.contains(&tag_name) || (self_closing && foreign > 0),
                            matches!(tag_name, "svg" | "math"),
                            dom.implied_close(&open, tag_name),
                        )
                    };
                    if let Some(at) = implied {
                        while open.len() > at {
                            dom.pop(&mut open);
                        }
                    }
                    let kind = Kind::Element { tag, attrs };
                    if void {
                        dom.push_leaf(&open, kind);
                    } else {
                        // At the depth cap the deepest element ends, so the new one is its
                        // sibling (Blink's parser does the same at 512).
                        if open.len() > MAX_DEPTH {
                            dom.pop(&mut open);
                        }
                        if foreign_root {
                            foreign += 1;
                        }
                        let id = dom.push_leaf(&open, kind);
                        open.push(id);
                    }
                }
                Token::End { name } => {
                    let raw = &src[name.range()];
                    if raw.eq_ignore_ascii_case(b"body") || raw.eq_ignore_ascii_case(b"html") {
                        continue;
                    }
                    let Some(at) = open
                        .iter()
                        .rposition(|id| dom.is_named(*id, raw))
                        .filter(|at| *at > 0)
                    else {
                        continue;
                    };
                    while open.len() > at {
                        let id = dom.pop(&mut open);
                        if matches!(dom.tag_of(id), Some("svg" | "math")) {
                            foreign = foreign.saturating_sub(1);
                        }
                    }
                }
            }
        }
        while open.len() > 1 {
            dom.pop(&mut open);
        }
        let len = dom.len_id();
        dom.nodes[0].end = len;
        dom
    }

    fn len_id(&self) -> NodeId {
        NodeId::try_from(self.nodes.len()).unwrap_or(NodeId::MAX)
    }

    fn intern(&mut self, interned: &mut HashMap<Box<str>, u16>, name: Span) -> u16 {
        let raw = &self.src[name.range()];
        let lower: Cow<'_, str> = match std::str::from_utf8(raw) {
            Ok(s) if !s.bytes().any(|b| b.is_ascii_uppercase()) => Cow::Borrowed(s),
            _ => Cow::Owned(String::from_utf8_lossy(raw).to_ascii_lowercase()),
        };
        if let Some(id) = interned.get(&*lower) {
            return *id;
        }
        // A page with more distinct tag names than u16 holds: the rest have no name.
        let Ok(id) = u16::try_from(self.tags.len()) else {
            return u16::MAX;
        };
        self.tags.push(lower.clone().into());
        interned.insert(lower.into(), id);
        id
    }

    fn push_leaf(&mut self, open: &[NodeId], kind: Kind) -> NodeId {
        let parent = *open.last().unwrap_or(&0);
        let id = self.len_id();
        self.nodes.push(Node {
            kind,
            parent,
            end: id + 1,
        });
        id
    }

    fn pop(&mut self, open: &mut Vec<NodeId>) -> NodeId {
        let id = open.pop().unwrap_or(0);
        let end = self.len_id();
        self.nodes[id as usize].end = end;
        id
    }

    fn is_named(&self, id: NodeId, raw: &[u8]) -> bool {
        self.tag_of(id)
            .is_some_and(|t| t.as_bytes().eq_ignore_ascii_case(raw))
    }

    /// Where the open elements a start tag of `tag` implicitly ends begin: pop to that length.
    fn implied_close(&self, open: &[NodeId], tag: &str) -> Option<usize> {
        let close_to = |wanted: &[&str], stop: &[&str]| {
            for (i, id) in open.iter().enumerate().rev() {
                let t = self.tag_of(*id)?;
                if wanted.contains(&t) {
                    return Some(i);
                }
                if stop.contains(&t) || SCOPE.contains(&t) {
                    return None;
                }
            }
            None
        };
        let mut targets: Vec<usize> = Vec::new();
        if CLOSES_P.contains(&tag) {
            targets.extend(close_to(&["p"], &[]));
        }
        match tag {
            "li" => targets.extend(close_to(&["li"], &["ul", "ol", "menu"])),
            "dt" | "dd" => targets.extend(close_to(&["dt", "dd"], &["dl"])),
            "option" | "optgroup" => targets.extend(close_to(&["option"], &["select", "datalist"])),
            "tr" => targets.extend(close_to(&["tr"], &["tbody", "thead", "tfoot"])),
            "td" | "th" => targets.extend(close_to(&["td", "th"], &["tr"])),
            "thead" | "tbody" | "tfoot" => {
                targets.extend(close_to(&["thead", "tbody", "tfoot"], &[]))
            }
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                let heading = open
                    .last()
                    .and_then(|id| self.tag_of(*id))
                    .is_some_and(|t| t.len() == 2 && t.starts_with('h') && t != "hr");
                if heading {
                    targets.push(open.len() - 1);
                }
            }
            _ => {}
        }
        targets.into_iter().min().filter(|at| *at > 0)
    }

    /// Every node, in document order; [`NodeId`] indexes it.
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node `id`.
    pub(crate) fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }

    /// The page's scripts, in document order.
    pub(crate) fn scripts(&self) -> &[Script] {
        &self.scripts
    }

    /// Raw bytes of a span of the page.
    pub(crate) fn bytes(&self, span: Span) -> &'a [u8] {
        &self.src[span.range()]
    }

    /// The lowercase tag name of element `id`; `None` for a text or the document.
    pub(crate) fn tag_of(&self, id: NodeId) -> Option<&str> {
        match self.nodes.get(id as usize)?.kind {
            Kind::Element { tag, .. } => self.tags.get(usize::from(tag)).map(|t| &**t),
            _ => None,
        }
    }

    /// The interned tag name `tag`.
    pub(crate) fn tag_name(&self, tag: u16) -> &str {
        self.tags.get(usize::from(tag)).map_or("", |t| t)
    }

    /// Whether `id` is an element named `name` (lowercase).
    pub(crate) fn is(&self, id: NodeId, name: &str) -> bool {
        self.tag_of(id) == Some(name)
    }

    /// The element children of `id`.
    pub(crate) fn children(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let end = self.nodes[id as usize].end;
        let mut at = id + 1;
        std::iter::from_fn(move || {
            while at < end {
                let here = at;
                at = self.nodes[here as usize].end.max(here + 1);
                if matches!(self.nodes[here as usize].kind, Kind::Element { .. }) {
                    return Some(here);
                }
            }
            None
        })
    }

    /// The nodes of `id`'s subtree after `id` itself, in document order.
    pub(crate) fn descendants(&self, id: NodeId) -> std::ops::Range<NodeId> {
        id + 1..self.nodes[id as usize].end
    }

    /// The ancestors of `id`, nearest first, up to (not including) the document.
    pub(crate) fn ancestors(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let mut at = id;
        std::iter::from_fn(move || {
            let parent = self.nodes[at as usize].parent;
            (at != 0 && parent != 0).then(|| {
                at = parent;
                parent
            })
        })
    }

    /// Attribute `name` (lowercase) of element `id`, entities decoded and trimmed; `None` when
    /// absent or blank.
    pub(crate) fn attr(&self, id: NodeId, name: &str) -> Option<String> {
        let Kind::Element { attrs, .. } = self.nodes.get(id as usize)?.kind else {
            return None;
        };
        attribute(&self.src[attrs.range()], name)
            .map(|v| {
                decode_entities(&String::from_utf8_lossy(v))
                    .trim()
                    .to_owned()
            })
            .filter(|v| !v.is_empty())
    }

    /// The classes of element `id`.
    pub(crate) fn classes(&self, id: NodeId) -> Vec<String> {
        self.attr(id, "class")
            .map(|c| c.split_ascii_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// The visible text of `id`'s subtree, each text node followed by a space, entities
    /// decoded and whitespace collapsed, cut after `cap` bytes of raw text.
    pub(crate) fn text(&self, id: NodeId, cap: usize) -> String {
        let mut raw = String::new();
        for n in self.descendants(id) {
            if let Kind::Text(span) = self.nodes[n as usize].kind {
                raw.push_str(&String::from_utf8_lossy(&self.src[span.range()]));
                raw.push(' ');
                if raw.len() >= cap {
                    break;
                }
            }
        }
        clean_text(&raw)
    }

    /// The raw text of one text node.
    pub(crate) fn text_of(&self, id: NodeId) -> Option<&'a [u8]> {
        match self.nodes.get(id as usize)?.kind {
            Kind::Text(span) if !span.is_empty() => Some(&self.src[span.range()]),
            _ => None,
        }
    }
}

/// The attributes in a start tag's attribute text: (name, raw value) pairs.
fn attributes(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut i = 0;
    std::iter::from_fn(move || {
        let s = text;
        while i < s.len() && (s[i].is_ascii_whitespace() || s[i] == b'/') {
            i += 1;
        }
        if i >= s.len() {
            return None;
        }
        let start = i;
        while i < s.len() && !s[i].is_ascii_whitespace() && !matches!(s[i], b'=' | b'/') {
            i += 1;
        }
        let name = &s[start..i];
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= s.len() || s[i] != b'=' {
            return Some((name, &s[i..i]));
        }
        i += 1;
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        let value = match s.get(i) {
            Some(q @ (b'"' | b'\'')) => {
                let from = i + 1;
                let to = memchr(*q, &s[from..]).map_or(s.len(), |p| from + p);
                i = (to + 1).min(s.len());
                &s[from..to]
            }
            _ => {
                let from = i;
                while i < s.len() && !s[i].is_ascii_whitespace() {
                    i += 1;
                }
                &s[from..i]
            }
        };
        Some((name, value))
    })
}

/// The raw value of attribute `name` in a start tag's attribute text.
pub(crate) fn attribute<'t>(text: &'t [u8], name: &str) -> Option<&'t [u8]> {
    attributes(text)
        .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(dom: &Dom<'_>, id: NodeId) -> Vec<String> {
        dom.children(id)
            .map(|c| dom.tag_of(c).unwrap_or("").to_owned())
            .collect()
    }

    fn find(dom: &Dom<'_>, name: &str) -> NodeId {
        (0..dom.nodes().len() as NodeId)
            .find(|id| dom.is(*id, name))
            .unwrap()
    }

    #[test]
    fn implied_end_tags_make_siblings() {
        let dom = Dom::parse(b"<ul><li>a<li>b<li>c</ul><p>one<p>two<div>x</div>");
        let ul = find(&dom, "ul");
        assert_eq!(tags(&dom, ul), ["li", "li", "li"]);
        assert_eq!(tags(&dom, 0), ["ul", "p", "p", "div"]);
        let li = dom.children(ul).nth(1).unwrap();
        assert_eq!(dom.text(li, 100), "b");
    }

    #[test]
    fn raw_text_comments_and_attributes() {
        let page = br#"<div class="a b" data-x='1>2'><!-- <li>no</li> --><script id=s>var t='<li>'</script>
            <a href="/x?a=1&amp;b=2" hidden>link</a><img src=/p.jpg/></div><li>after"#;
        let dom = Dom::parse(page);
        let div = find(&dom, "div");
        assert_eq!(dom.classes(div), ["a", "b"]);
        assert_eq!(dom.attr(div, "data-x").as_deref(), Some("1>2"));
        assert_eq!(tags(&dom, div), ["script", "a", "img"]);
        let a = find(&dom, "a");
        assert_eq!(dom.attr(a, "href").as_deref(), Some("/x?a=1&b=2"));
        assert_eq!(dom.scripts().len(), 1);
        assert_eq!(dom.bytes(dom.scripts()[0].body), b"var t='<li>'");
        assert_eq!(tags(&dom, 0), ["div", "li"]);
        assert_eq!(dom.text(div, 100), "link");
    }

    #[test]
    fn stray_end_tags_are_ignored_and_unclosed_ones_closed() {
        let dom = Dom::parse(b"<div><span>a</b></span></i><section>b</div>c");
        let div = find(&dom, "div");
        assert_eq!(tags(&dom, div), ["span", "section"]);
        assert_eq!(dom.text(0, 100), "a b c");
        let section = find(&dom, "section");
        assert_eq!(dom.node(section).parent, div);
    }

    #[test]
    fn nesting_stops_at_the_depth_cap() {
        let mut page = "<div>".repeat(MAX_DEPTH + 100);
        page.push_str("<article>deep</article>");
        page.push_str(&"</div>".repeat(MAX_DEPTH + 100));
        let dom = Dom::parse(page.as_bytes());
        let depth = |id: NodeId| dom.ancestors(id).count() + 1;
        let deepest = (0..dom.nodes().len() as NodeId).map(depth).max().unwrap();
        assert_eq!(deepest, MAX_DEPTH + 1, "the text in the deepest element");
        let article = find(&dom, "article");
        assert_eq!(dom.text(article, 100), "deep");
        assert_eq!(streaming_depth(page.as_bytes(), 10_000), MAX_DEPTH + 101);
        assert_eq!(
            streaming_depth(page.as_bytes(), 50),
            51,
            "stops past the cap"
        );
    }

    #[test]
    fn streaming_depth_counts_like_a_reader_without_implied_ends() {
        // Unclosed `li`s nest for a streaming reader; void and foreign self-closing tags do not.
        assert_eq!(streaming_depth(b"<ul><li>a<li>b<li>c</ul>", 100), 4);
        assert_eq!(
            streaming_depth(b"<div><img><br><svg><path/><g/></svg></div>", 100),
            2
        );
        assert_eq!(streaming_depth(b"<script><div><div><div></script>", 100), 0);
    }

    #[test]
    fn a_page_is_cut_at_the_node_cap() {
        let page = "<i>x</i>".repeat(MAX_NODES);
        let dom = Dom::parse(page.as_bytes());
        assert!(dom.truncated);
        assert!(dom.nodes().len() <= MAX_NODES);
    }

    #[test]
    fn hostile_bytes_never_panic() {
        for page in [
            &b"<"[..],
            b"</",
            b"<a",
            b"<a href='",
            b"<!--",
            b"<script>",
            b"</>",
            b"<a =x>",
            b"<<<>>>",
            b"<\xff\xfe>",
            b"<div/><p/></p></p>",
        ] {
            let dom = Dom::parse(page);
            let _ = dom.text(0, 1000);
            let _ = streaming_depth(page, 10);
        }
    }
}
