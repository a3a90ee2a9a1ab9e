//! Profile files for pages that embed their result list as JSON (`[json]` in a profile file):
//! the page's `<script id="…">` holds the data (Next.js's `__NEXT_DATA__`, for instance), one
//! JSONPath names the list and more, each relative to one result, name its fields.
//!
//! The script is found by a byte search and only its text is handed to serde_json, as for
//! JSON-LD: no HTML parser runs. Paths are RFC 9535 JSONPath (serde_json_path) rather than a
//! home-made dotted syntax, because real payloads keep fields in lists of name/value pairs
//! (`attributes.attribute[?@.name=='PRICE'].values[0]`), which needs filters.

use super::generic::{script_bodies, str_or_num};
use super::parse::{non_empty, parse_area_field, parse_price, parse_rooms_field, push_capped};
use super::{Extraction, absolute};
use crate::listing::Listing;
use serde::Deserialize;
use serde_json::Value;
use serde_json_path::JsonPath;
use std::collections::HashSet;

/// `[json]` as written in a profile file: JSONPath expressions (`$.…`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JsonTable {
    /// The `id` of the `<script>` element whose text is the JSON.
    script: String,
    /// The list of results, from the document's root.
    items: String,
    /// Each result's id, from the result.
    id: String,
    link: Option<String>,
    title: Option<String>,
    price: Option<String>,
    /// The currency of a price the JSON gives as a bare number (`"EUR"`).
    currency: Option<String>,
    rooms: Option<String>,
    area: Option<String>,
    image: Option<String>,
    description: Option<String>,
}

/// A compiled `[json]`: reads the listings of a page.
#[derive(Debug)]
pub(super) struct JsonReader {
    /// `id="…"` as it appears in the script's start tag.
    id_attr: Vec<u8>,
    ready: String,
    items: JsonPath,
    id: JsonPath,
    link: Option<JsonPath>,
    title: Option<JsonPath>,
    price: Option<JsonPath>,
    currency: Option<String>,
    rooms: Option<JsonPath>,
    area: Option<JsonPath>,
    image: Option<JsonPath>,
    description: Option<JsonPath>,
}

impl JsonReader {
    /// Compiles the table; the error names the key (`json.price`) and what is wrong with it.
    pub(super) fn new(t: JsonTable) -> Result<Self, (String, String)> {
        let script = t.script.trim();
        if script.is_empty() || script.contains(['"', '\'', '<', '>']) || script.contains(' ') {
            return Err((
                "json.script".into(),
                format!(
                    "`{}`: give the script element's id, e.g. \"__NEXT_DATA__\"",
                    t.script
                ),
            ));
        }
        let path = |key: &str, p: &str| {
            super::bounds::check_json_path(p)
                .map_err(|e| (format!("json.{key}"), format!("`{p}`: {e}")))?;
            JsonPath::parse(p.trim()).map_err(|e| {
                (
                    format!("json.{key}"),
                    format!("`{p}` is not a JSONPath: {e}"),
                )
            })
        };
        let opt = |key: &str, p: Option<String>| p.map(|p| path(key, &p)).transpose();
        Ok(Self {
            id_attr: format!("id=\"{script}\"").into_bytes(),
            ready: format!("script[id=\"{script}\"]"),
            items: path("items", &t.items)?,
            id: path("id", &t.id)?,
            link: opt("link", t.link)?,
            title: opt("title", t.title)?,
            price: opt("price", t.price)?,
            currency: t
                .currency
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty()),
            rooms: opt("rooms", t.rooms)?,
            area: opt("area", t.area)?,
            image: opt("image", t.image)?,
            description: opt("description", t.description)?,
        })
    }

    /// The selector a browser check waits for: the script itself.
    pub(super) fn ready_selector(&self) -> &str {
        &self.ready
    }

    /// The page's listings: `LayoutUnknown` when the script, its JSON or the list is missing,
    /// `NoResults` when the list is empty.
    pub(super) fn extract(&self, body: &[u8], page_url: &url::Url) -> Extraction {
        let Some(doc) = self.script_json(body) else {
            return Extraction::LayoutUnknown;
        };
        let Some(Value::Array(items)) = self.items.query(&doc).first() else {
            return Extraction::LayoutUnknown;
        };
        if items.is_empty() {
            return Extraction::NoResults;
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for item in items {
            let Some(l) = self.listing(item, page_url) else {
                continue;
            };
            if seen.insert(l.id.clone()) {
                out.push(l);
            }
        }
        Extraction::Listings(out)
    }

    fn listing(&self, item: &Value, page_url: &url::Url) -> Option<Listing> {
        let text = |p: &Option<JsonPath>| p.as_ref().and_then(|p| scalar(p.query(item).first()?));
        let id = scalar(self.id.query(item).first()?)?;
        let price = text(&self.price).and_then(|t| parse_price(&t));
        Some(Listing {
            id,
            url: text(&self.link).and_then(|h| absolute(page_url, &h)),
            title: text(&self.title).and_then(|t| capped(&t)),
            price: price.as_ref().map(|p| p.0),
            currency: price.and_then(|p| p.1.or_else(|| self.currency.clone())),
            rooms: text(&self.rooms).and_then(|t| parse_rooms_field(&t)),
            area_m2: text(&self.area).and_then(|t| parse_area_field(&t)),
            image: text(&self.image).and_then(|h| absolute(page_url, &h)),
            description: text(&self.description).and_then(|t| capped(&t)),
            fallback: Vec::new(),
        })
    }

    /// The JSON of the `<script>` whose start tag carries `id="…"`: the first such script whose
    /// text parses (the same words inside another script's string are passed over).
    fn script_json(&self, body: &[u8]) -> Option<Value> {
        script_bodies(body, &self.id_attr).find_map(|t| serde_json::from_slice(t).ok())
    }
}

/// A string or a number as text; anything else (an object, a list, `null`) is no value.
fn scalar(v: &Value) -> Option<String> {
    str_or_num(Some(v))
}

/// Whitespace collapsed, cut at the field cap a card's text gets.
fn capped(text: &str) -> Option<String> {
    let clean = non_empty(text)?;
    let mut out = String::new();
    push_capped(&mut out, &clean);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(toml_text: &str) -> JsonReader {
        JsonReader::new(toml::from_str(toml_text).unwrap()).unwrap()
    }

    const PAYLOAD: &str = r#"<html><body><script>var x = '<script id="__NEXT_DATA__">';</script>
<script id="__NEXT_DATA__" type="application/json">{"props":{"list":[
 {"id":"7","attrs":[{"name":"PRICE","values":["€ 1.150"]},{"name":"ROOMS","values":["2"]}],
  "url":"/ad/7","title":"  Bright\n flat ","img":[{"u":"https://img.example/7.jpg"}],"area":64.5},
 {"id":8,"attrs":[{"name":"FLOOR","values":["3"]}],"url":"javascript:alert(1)"},
 {"id":"7","title":"the same ad again"},
 {"title":"no id"}
]}}</script></body></html>"#;

    const SPEC: &str = r#"
script = "__NEXT_DATA__"
items = "$.props.list"
id = "$.id"
link = "$.url"
title = "$.title"
price = "$.attrs[?@.name=='PRICE'].values[0]"
rooms = "$.attrs[?@.name=='ROOMS'].values[0]"
area = "$.area"
image = "$.img[0].u"
"#;

    #[test]
    fn reads_each_result_by_its_paths_and_a_missing_field_is_none() {
        let url = url::Url::parse("https://portal.example/search").unwrap();
        let Extraction::Listings(l) = reader(SPEC).extract(PAYLOAD.as_bytes(), &url) else {
            panic!("no listings");
        };
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l[0].id, "7");
        assert_eq!(l[0].url.as_deref(), Some("https://portal.example/ad/7"));
        assert_eq!(l[0].title.as_deref(), Some("Bright flat"));
        assert_eq!(
            (l[0].price, l[0].currency.as_deref()),
            (Some(1150.0), Some("EUR"))
        );
        assert_eq!((l[0].rooms, l[0].area_m2), (Some(2.0), Some(64.5)));
        assert_eq!(l[0].image.as_deref(), Some("https://img.example/7.jpg"));
        // A number id; no price, rooms (a floor is not rooms), title; a javascript: link dropped.
        assert_eq!(l[1].id, "8");
        assert_eq!((l[1].price, l[1].rooms, &l[1].url), (None, None, &None));
    }

    #[test]
    fn a_bare_number_price_takes_the_stated_currency() {
        let url = url::Url::parse("https://portal.example/").unwrap();
        let page = r#"<script id="d">{"r":[{"id":1,"p":950}]}</script>"#;
        let r = reader(
            "script = \"d\"\nitems = \"$.r\"\nid = \"$.id\"\nprice = \"$.p\"\ncurrency = \"EUR\"",
        );
        let Extraction::Listings(l) = r.extract(page.as_bytes(), &url) else {
            panic!("no listings");
        };
        assert_eq!(
            (l[0].price, l[0].currency.as_deref()),
            (Some(950.0), Some("EUR"))
        );
    }

    #[test]
    fn a_missing_script_or_list_is_layout_unknown_and_an_empty_list_no_results() {
        let url = url::Url::parse("https://portal.example/").unwrap();
        let r = reader(SPEC);
        for page in [
            "<html>nothing</html>",
            r#"<script id="__NEXT_DATA__">{"props":{"list":</script>"#,
            r#"<script id="__NEXT_DATA__">{"props":{"other":[]}}</script>"#,
            r#"<script id="__NEXT_DATA__">{"props":{"list":{"id":1}}}</script>"#,
        ] {
            assert_eq!(
                r.extract(page.as_bytes(), &url),
                Extraction::LayoutUnknown,
                "{page}"
            );
        }
        let empty = r#"<script id="__NEXT_DATA__">{"props":{"list":[]}}</script>"#;
        assert_eq!(r.extract(empty.as_bytes(), &url), Extraction::NoResults);
    }

    #[test]
    fn a_bad_path_or_script_id_names_its_key() {
        let bad = |t: &str| match JsonReader::new(toml::from_str(t).unwrap()) {
            Err((key, message)) => format!("{key}: {message}"),
            Ok(_) => panic!("accepted: {t}"),
        };
        let e =
            bad("script = \"d\"\nitems = \"$.r\"\nid = \"$.id\"\nprice = \"$.attrs[?@.name==\"");
        assert!(e.starts_with("json.price: "), "{e}");
        let e = bad("script = \"a b\"\nitems = \"$.r\"\nid = \"$.id\"");
        assert!(e.starts_with("json.script: "), "{e}");
        let e = bad("script = \"d\"\nitems = \"$..*..*..*\"\nid = \"$.id\"");
        assert!(
            e.starts_with("json.items: ") && e.contains("3 times"),
            "{e}"
        );
        let e = bad("script = \"d\"\nitems = \"$.r\"\nid = \"$..a..b\"");
        assert!(e.starts_with("json.id: "), "{e}");
    }
}
