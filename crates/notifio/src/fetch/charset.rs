//! A fetched HTTP body in UTF-8, decoded the way browsers decide a page's encoding: a byte
//! order mark, else the `Content-Type` header's `charset`, else a `<meta charset>` or
//! `http-equiv` declaration in the first 1024 bytes (the WHATWG prescan), else UTF-8. Labels
//! are WHATWG's (`latin1` and `iso-8859-1` mean windows-1252), decoding is `encoding_rs`.
//!
//! One entry point, [`to_utf8`], applied to an HTTP body before anything reads it (the
//! challenge markers, the extractors, the page fingerprint), so both see the same text. A body
//! that is already UTF-8, the common case, is handed back without a copy; its invalid bytes
//! are left for the readers, which replace them. A browser-rendered page is UTF-8 already and
//! does not come through here.
//!
//! The prescan is hand-written: `encoding_rs` maps labels and BOMs but leaves the prescan to
//! the HTML parser, and the parsers that have one (html5ever) would build the whole document.

use bytes::Bytes;
use encoding_rs::{Encoding, UTF_8, UTF_16BE, UTF_16LE, WINDOWS_1252, X_USER_DEFINED};

/// How far into the body a `<meta>` declaration is looked for (the WHATWG limit).
const PRESCAN_LEN: usize = 1024;

/// `body` as UTF-8: decoded from the encoding its BOM, its `content-type` header (`headers`:
/// lower-case names) or its `<meta>` declares. A UTF-8 body loses only its BOM.
#[must_use]
pub(crate) fn to_utf8(body: Bytes, headers: &[(String, String)]) -> Bytes {
    let (encoding, bom) = match Encoding::for_bom(&body) {
        Some((e, len)) => (e, len),
        None => (declared(&body, headers).unwrap_or(UTF_8), 0),
    };
    if encoding == UTF_8 {
        return body.slice(bom..);
    }
    let (text, _) = encoding.decode_without_bom_handling(&body[bom..]);
    Bytes::from(text.into_owned())
}

/// The encoding the header names, else the one a `<meta>` names (not for JSON, which is
/// UTF-8 by definition).
fn declared(body: &[u8], headers: &[(String, String)]) -> Option<&'static Encoding> {
    let content_type = headers
        .iter()
        .find(|(n, _)| n == "content-type")
        .map(|(_, v)| v.as_str());
    if let Some(e) = content_type.and_then(header_charset) {
        return Some(e);
    }
    if content_type.is_some_and(|t| t.to_ascii_lowercase().contains("json")) {
        return None;
    }
    prescan(&body[..body.len().min(PRESCAN_LEN)])
}

/// `text/html; charset="ISO-8859-1"` → windows-1252.
fn header_charset(content_type: &str) -> Option<&'static Encoding> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("charset") {
            return None;
        }
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
        Encoding::for_label(value.as_bytes())
    })
}

fn is_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ')
}

/// An attribute as the prescan reads it: name and value, ASCII lower-cased.
type Attr = (Vec<u8>, Vec<u8>);

/// The WHATWG "prescan a byte stream to determine its encoding" over `bytes` (already cut at
/// 1024): running out of bytes ends it without an answer, as the spec's abort does.
fn prescan(bytes: &[u8]) -> Option<&'static Encoding> {
    let mut p = Prescan { bytes, pos: 0 };
    while p.pos < bytes.len() {
        let rest = &bytes[p.pos..];
        if rest.starts_with(b"<!--") {
            let end = memchr::memmem::find(&bytes[p.pos + 2..], b"-->")?;
            p.pos += 2 + end + 3;
            continue;
        }
        if rest.len() > 5
            && rest[..5].eq_ignore_ascii_case(b"<meta")
            && (is_space(rest[5]) || rest[5] == b'/')
        {
            p.pos += 5;
            if let Some(e) = p.meta()? {
                return Some(e);
            }
        } else if rest.len() > 1
            && (rest[1].is_ascii_alphabetic()
                || (rest[1] == b'/' && rest.get(2).is_some_and(u8::is_ascii_alphabetic)))
            && rest[0] == b'<'
        {
            // Some other tag: skip its name and attributes.
            while p.pos < bytes.len() && !is_space(bytes[p.pos]) && bytes[p.pos] != b'>' {
                p.pos += 1;
            }
            while p.attribute()?.is_some() {}
        } else if rest.starts_with(b"<!") || rest.starts_with(b"</") || rest.starts_with(b"<?") {
            p.pos += memchr::memchr(b'>', &bytes[p.pos..])?;
        }
        p.pos += 1;
    }
    None
}

struct Prescan<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Prescan<'_> {
    /// The byte at the position; `None` (abort) past the end.
    fn at(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// After `<meta`: its attributes, and the encoding they declare if any. `None` = out of
    /// bytes (abort), `Some(None)` = this meta declares nothing usable.
    fn meta(&mut self) -> Option<Option<&'static Encoding>> {
        let mut seen: Vec<Vec<u8>> = Vec::new();
        let mut got_pragma = false;
        let mut need_pragma: Option<bool> = None;
        let mut charset: Option<&'static Encoding> = None;
        while let Some((name, value)) = self.attribute()? {
            if seen.contains(&name) {
                continue;
            }
            match name.as_slice() {
                b"http-equiv" if value == b"content-type" => got_pragma = true,
                b"content" if charset.is_none() => {
                    if let Some(e) = charset_in_content(&value) {
                        charset = Some(e);
                        need_pragma = Some(true);
                    }
                }
                b"charset" => {
                    charset = Encoding::for_label(&value);
                    need_pragma = Some(false);
                }
                _ => {}
            }
            seen.push(name);
        }
        let usable = match need_pragma {
            None => false,
            Some(true) => got_pragma,
            Some(false) => true,
        };
        Some(charset.filter(|_| usable).map(|e| {
            if e == UTF_16BE || e == UTF_16LE {
                UTF_8
            } else if e == X_USER_DEFINED {
                WINDOWS_1252
            } else {
                e
            }
        }))
    }

    /// The spec's "get an attribute": `Some(None)` at the tag's `>`, `None` out of bytes.
    fn attribute(&mut self) -> Option<Option<Attr>> {
        while is_space(self.at()?) || self.at()? == b'/' {
            self.pos += 1;
        }
        if self.at()? == b'>' {
            return Some(None);
        }
        let mut name = Vec::new();
        loop {
            let b = self.at()?;
            if b == b'=' && !name.is_empty() {
                self.pos += 1;
                break;
            }
            if is_space(b) {
                while is_space(self.at()?) {
                    self.pos += 1;
                }
                if self.at()? != b'=' {
                    return Some(Some((name, Vec::new())));
                }
                self.pos += 1;
                break;
            }
            if b == b'/' || b == b'>' {
                return Some(Some((name, Vec::new())));
            }
            name.push(b.to_ascii_lowercase());
            self.pos += 1;
        }
        while is_space(self.at()?) {
            self.pos += 1;
        }
        let mut value = Vec::new();
        let b = self.at()?;
        if b == b'"' || b == b'\'' {
            loop {
                self.pos += 1;
                let c = self.at()?;
                if c == b {
                    self.pos += 1;
                    return Some(Some((name, value)));
                }
                value.push(c.to_ascii_lowercase());
            }
        }
        if b == b'>' {
            return Some(Some((name, value)));
        }
        loop {
            let c = self.at()?;
            if is_space(c) || c == b'>' {
                return Some(Some((name, value)));
            }
            value.push(c.to_ascii_lowercase());
            self.pos += 1;
        }
    }
}

/// The spec's "extract a character encoding from a meta element" (`text/html; charset=…`).
fn charset_in_content(value: &[u8]) -> Option<&'static Encoding> {
    let mut pos = 0;
    loop {
        let found = memchr::memmem::find(&value[pos..], b"charset")?;
        pos += found + 7;
        while value.get(pos).is_some_and(|b| is_space(*b)) {
            pos += 1;
        }
        if value.get(pos) != Some(&b'=') {
            continue;
        }
        pos += 1;
        while value.get(pos).is_some_and(|b| is_space(*b)) {
            pos += 1;
        }
        let rest = &value[pos..];
        let label = match rest.first()? {
            q @ (b'"' | b'\'') => {
                let end = memchr::memchr(*q, &rest[1..])?;
                &rest[1..=end]
            }
            _ => {
                let end = rest
                    .iter()
                    .position(|b| is_space(*b) || *b == b';')
                    .unwrap_or(rest.len());
                &rest[..end]
            }
        };
        return Encoding::for_label(label);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ct(v: &str) -> Vec<(String, String)> {
        vec![("content-type".to_owned(), v.to_owned())]
    }

    /// As the extractors read it: invalid UTF-8 replaced.
    fn text(b: Bytes) -> String {
        String::from_utf8_lossy(&b).into_owned()
    }

    /// "Größe 850 €" in windows-1252.
    const LATIN: &[u8] = b"Gr\xf6\xdfe 850 \x80";

    #[test]
    fn the_header_charset_decodes_the_body() {
        for label in ["windows-1252", "ISO-8859-1", "latin1", "\"iso-8859-1\""] {
            let got = to_utf8(
                Bytes::from_static(LATIN),
                &ct(&format!("text/html; charset={label}")),
            );
            assert_eq!(text(got), "Größe 850 €", "{label}");
        }
    }

    #[test]
    fn a_meta_declaration_is_found_in_the_first_1024_bytes() {
        let page = |meta: &str| {
            let mut v = format!(
                "<!DOCTYPE html><html><head><!-- <meta charset=utf-8> -->{meta}</head><body>"
            )
            .into_bytes();
            v.extend_from_slice(LATIN);
            v
        };
        for meta in [
            "<meta charset=\"windows-1252\">",
            "<META CHARSET=iso-8859-1>",
            "<meta http-equiv=\"Content-Type\" content=\"text/html; charset=ISO-8859-1\">",
            "<meta content='text/html;charset=latin1' http-equiv='content-type'/>",
        ] {
            let got = text(to_utf8(Bytes::from(page(meta)), &ct("text/html")));
            assert!(got.ends_with("Größe 850 €"), "{meta}: {got}");
        }
        // Without http-equiv, `content` alone declares nothing; a meta past 1024 bytes is not
        // read; a comment hides one.
        for body in [
            page("<meta content=\"text/html; charset=ISO-8859-1\">"),
            page(&format!("{}<meta charset=latin1>", " ".repeat(1024))),
            page(""),
        ] {
            let got = text(to_utf8(Bytes::from(body), &[]));
            assert!(got.ends_with("Gr\u{fffd}\u{fffd}e 850 \u{fffd}"), "{got}");
        }
    }

    #[test]
    fn the_bom_wins_then_the_header_then_the_meta() {
        // UTF-16LE with a BOM, while the header says latin1 and a meta says windows-1252.
        let mut le = vec![0xff, 0xfe];
        for u in "<meta charset=windows-1252>Größe €".encode_utf16() {
            le.extend_from_slice(&u.to_le_bytes());
        }
        let got = text(to_utf8(Bytes::from(le), &ct("text/html; charset=latin1")));
        assert_eq!(got, "<meta charset=windows-1252>Größe €");
        // UTF-16BE named by the header, no BOM.
        let be: Vec<u8> = "Größe €"
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        assert_eq!(
            text(to_utf8(Bytes::from(be), &ct("text/html; charset=utf-16be"))),
            "Größe €"
        );
        // The header beats the meta.
        let mut body = b"<meta charset=utf-8>".to_vec();
        body.extend_from_slice(LATIN);
        let got = text(to_utf8(
            Bytes::from(body),
            &ct("text/html; charset=windows-1252"),
        ));
        assert!(got.ends_with("Größe 850 €"), "{got}");
        // A UTF-16 label in a meta means UTF-8 (the page could not have been read otherwise).
        let body = "<meta charset=utf-16>Größe".as_bytes();
        assert_eq!(
            text(to_utf8(Bytes::copy_from_slice(body), &[])),
            "<meta charset=utf-16>Größe"
        );
    }

    #[test]
    fn utf8_is_handed_back_without_a_copy_less_its_bom() {
        let page = Bytes::from_static("<p>Größe €</p>".as_bytes());
        let got = to_utf8(page.clone(), &ct("text/html; charset=utf-8"));
        assert_eq!(got.as_ptr(), page.as_ptr(), "no copy");
        let got = to_utf8(page.clone(), &[]);
        assert_eq!(got.as_ptr(), page.as_ptr(), "undeclared: UTF-8, no copy");
        let with_bom = Bytes::from([&[0xef, 0xbb, 0xbf][..], &page[..]].concat());
        assert_eq!(to_utf8(with_bom, &[]), page);
        // JSON is UTF-8 whatever a string inside it looks like.
        let json = Bytes::from_static(br#"{"html":"<meta charset=latin1>"}"#);
        let got = to_utf8(json.clone(), &ct("application/json"));
        assert_eq!(got.as_ptr(), json.as_ptr());
    }

    #[test]
    fn truncated_and_hostile_prescans_end_without_an_answer() {
        for body in [
            &b"<meta charset=\"windows-1252"[..],
            b"<!-- never closed <meta charset=latin1>",
            b"<meta",
            b"<a href='x",
            b"<meta content=\"charset=\">",
            b"<meta http-equiv=content-type content=\"charset='latin1\">",
            b"<<<<>>>>\0\xff<meta/charset=x-user-defined/>",
        ] {
            let _ = prescan(body);
        }
        assert_eq!(
            prescan(b"<meta/charset=x-user-defined>"),
            Some(WINDOWS_1252)
        );
        assert_eq!(prescan(b"<meta charset=\"windows-1252"), None);
        assert_eq!(prescan(b"<!-- <meta charset=latin1>"), None);
        assert_eq!(
            prescan(b"<meta charset=nonsense><meta charset=latin1>"),
            Some(WINDOWS_1252)
        );
    }
}
