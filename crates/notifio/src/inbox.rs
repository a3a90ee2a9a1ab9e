//! The listings inbox as a user sees it (docs/dashboard.md#the-listings-inbox): what a listing
//! is marked, the query behind the page and `GET /api/listings`, and the inbox as a file —
//! an Atom feed, CSV or JSON. Pure: the store reads the rows, the web layer serves them.

use crate::listing::Listing;
use crate::notify::message::escape;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// What the user made of a listing. Kept per listing (not per search), across restarts and
/// config edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ListingState {
    /// Not looked at yet.
    #[default]
    New,
    /// Looked at.
    Seen,
    /// Liked: its price drops are always announced.
    Favourite,
    /// Not wanted: never announced again, not even for a price drop, and out of the inbox.
    Hidden,
    /// The user wrote to the landlord.
    Contacted,
}

impl ListingState {
    /// Every state, in the order the page offers them.
    pub const ALL: [Self; 5] = [
        Self::New,
        Self::Seen,
        Self::Favourite,
        Self::Hidden,
        Self::Contacted,
    ];

    /// Its name in JSON, the database and the page.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Seen => "seen",
            Self::Favourite => "favourite",
            Self::Hidden => "hidden",
            Self::Contacted => "contacted",
        }
    }

    /// The state named `name`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// `GET /api/listings?search=&site=&state=&matched=&min_price=&max_price=&since=&page=&per_page=`.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxQuery {
    /// Only the listings of this search (by name).
    pub search: Option<String>,
    /// Only this site's.
    pub site: Option<String>,
    /// Only listings marked so; none: every listing but the hidden.
    pub state: Option<ListingState>,
    /// Only those the search's filters let through (true) or held back (false).
    pub matched: Option<bool>,
    /// Price at least.
    pub min_price: Option<f64>,
    /// Price at most.
    pub max_price: Option<f64>,
    /// First seen at or after (epoch ms).
    pub since: Option<u64>,
    /// Only the gone (true) or those still online (false).
    pub gone: Option<bool>,
    /// Only listings that were news to a search (first seen after its baseline): what it
    /// announced or held back, not the page it found at first.
    pub news_only: bool,
    /// 1-based.
    pub page: usize,
    /// Listings per page (at most [`Self::MAX_PER_PAGE`]).
    pub per_page: usize,
}

impl Default for InboxQuery {
    fn default() -> Self {
        Self {
            search: None,
            site: None,
            state: None,
            matched: None,
            min_price: None,
            max_price: None,
            since: None,
            gone: None,
            news_only: false,
            page: 1,
            per_page: 50,
        }
    }
}

impl InboxQuery {
    /// The largest page the API serves.
    pub const MAX_PER_PAGE: usize = 500;
    /// The most listings an export or a feed holds.
    pub const MAX_EXPORT: usize = 10_000;

    /// The query of a URL's parameters; `now` (epoch ms) for a relative `since` ("24h").
    /// An unknown parameter or a bad value is an error naming it.
    ///
    /// # Errors
    /// `(parameter, why)`.
    pub fn from_params(params: &[(String, String)], now: u64) -> Result<Self, (String, String)> {
        let mut q = Self::default();
        for (key, value) in params {
            let bad = |why: &str| (key.clone(), format!("`{key}={value}`: {why}"));
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            match key.as_str() {
                "search" => q.search = Some(value.to_owned()),
                "news" => {
                    q.news_only = match value {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        _ => return Err(bad("expected true or false")),
                    };
                }
                "site" => q.site = Some(value.to_owned()),
                "state" => {
                    q.state = Some(ListingState::parse(value).ok_or_else(|| {
                        bad("expected new, seen, favourite, hidden or contacted")
                    })?);
                }
                "matched" | "gone" => {
                    let v = match value {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        _ => return Err(bad("expected true or false")),
                    };
                    if key == "gone" {
                        q.gone = Some(v);
                    } else {
                        q.matched = Some(v);
                    }
                }
                "min_price" | "max_price" => {
                    let v: f64 = value
                        .parse()
                        .ok()
                        .filter(|v: &f64| v.is_finite())
                        .ok_or_else(|| bad("expected a number"))?;
                    if key == "min_price" {
                        q.min_price = Some(v);
                    } else {
                        q.max_price = Some(v);
                    }
                }
                "since" => q.since = Some(since(value, now).ok_or_else(|| {
                    bad("expected epoch milliseconds, an RFC 3339 time or a duration such as 24h")
                })?),
                "page" => {
                    q.page = value
                        .parse()
                        .ok()
                        .filter(|&p| p >= 1)
                        .ok_or_else(|| bad("expected a page number from 1"))?;
                }
                "per_page" => {
                    q.per_page = value
                        .parse()
                        .ok()
                        .filter(|&p| (1..=Self::MAX_PER_PAGE).contains(&p))
                        .ok_or_else(|| bad("expected 1 to 500"))?;
                }
                // The file formats and the token are the web layer's.
                "format" | "token" => {}
                _ => {
                    return Err((
                        key.clone(),
                        format!(
                            "unknown parameter `{key}` (known: search, site, state, matched, gone, \
                             news, min_price, max_price, since, page, per_page, format)"
                        ),
                    ));
                }
            }
        }
        Ok(q)
    }
}

/// `since` as epoch ms: epoch ms, RFC 3339, or a duration before `now`.
fn since(value: &str, now: u64) -> Option<u64> {
    if let Ok(ms) = value.parse::<u64>() {
        return Some(ms);
    }
    if let Ok(t) = value.parse::<jiff::Timestamp>() {
        return u64::try_from(t.as_millisecond()).ok();
    }
    let ago = crate::config::parse_duration(value).ok()?;
    Some(now.saturating_sub(u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)))
}

/// A twin of an inbox listing on another site: the same flat, shown once.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AlsoOnListing {
    /// Its site.
    pub site: String,
    /// Its id there.
    pub id: String,
    /// Its link there.
    pub url: Option<String>,
    /// Its price there.
    pub price: Option<f64>,
    /// When Notifio first saw it there.
    pub first_seen: u64,
}

/// One listing of the inbox.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxListing {
    /// Its site.
    pub site: String,
    /// The listing as last seen (its last price).
    pub listing: Listing,
    /// When Notifio first saw it (epoch ms).
    pub first_seen: u64,
    /// When it went from its searches' pages (epoch ms: the first of the checks that missed
    /// it); `None` while it is online.
    pub gone_at: Option<u64>,
    /// What the user made of it.
    pub state: ListingState,
    /// The searches that found it (by name).
    pub searches: Vec<String>,
    /// Whether some search's filters let it through.
    pub matched: bool,
    /// Its prices so far, oldest first (epoch ms, price); empty without a price.
    pub prices: Vec<(u64, f64)>,
    /// The same flat on other sites.
    pub also_on: Vec<AlsoOnListing>,
}

impl InboxListing {
    /// Price per square metre, when both are known.
    #[must_use]
    pub fn price_per_m2(&self) -> Option<f64> {
        match (self.listing.price, self.listing.area_m2) {
            (Some(p), Some(a)) if a > 0.0 => Some((p / a * 100.0).round() / 100.0),
            _ => None,
        }
    }

    /// How long it was online (ms), once it is gone.
    #[must_use]
    pub fn online_ms(&self) -> Option<u64> {
        self.gone_at.map(|g| g.saturating_sub(self.first_seen))
    }

    /// As the API shows it.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        let l = &self.listing;
        serde_json::json!({
            "site": self.site,
            "id": l.id,
            "title": l.title,
            "price": l.price,
            "currency": l.currency,
            "price_per_m2": self.price_per_m2(),
            "rooms": l.rooms,
            "area_m2": l.area_m2,
            "url": l.url,
            // Listings stored before the rule applied where they are read: same rule here.
            "image": crate::notify::message::picture(l).filter(|p| {
                crate::picture::may_show(p, &notifio_policy::SiteKey::from_stored(self.site.clone()))
            }),
            "state": self.state,
            "searches": self.searches,
            "matched": self.matched,
            "first_seen": self.first_seen,
            "gone_at": self.gone_at,
            "online_s": self.online_ms().map(|ms| ms / 1000),
            "prices": self.prices.iter().map(|(at, p)| serde_json::json!([at, p])).collect::<Vec<_>>(),
            "also_on": self.also_on,
        })
    }
}

/// One page of the inbox.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxPage {
    /// Listings matching the query (twins counted each).
    pub total: u64,
    /// This page (1-based).
    pub page: usize,
    /// Its size.
    pub per_page: usize,
    /// Its listings, newest first.
    pub listings: Vec<InboxListing>,
}

impl InboxPage {
    /// As `GET /api/listings` answers it.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "total": self.total,
            "page": self.page,
            "per_page": self.per_page,
            "listings": self.listings.iter().map(InboxListing::to_json).collect::<Vec<_>>(),
        })
    }
}

/// Epoch ms as RFC 3339 (UTC).
fn rfc3339(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// "1,200 EUR · 2 rooms · 65 m² · 18.46 EUR/m²": a listing's figures in one line.
fn figures(l: &InboxListing) -> String {
    let mut parts = Vec::new();
    let cur = l.listing.currency.as_deref().unwrap_or("");
    if let Some(p) = l.listing.price {
        parts.push(format!("{p} {cur}").trim().to_owned());
    }
    if let Some(r) = l.listing.rooms {
        parts.push(format!("{r} rooms"));
    }
    if let Some(a) = l.listing.area_m2 {
        parts.push(format!("{a} m²"));
    }
    if let Some(ppm) = l.price_per_m2() {
        parts.push(format!("{ppm} {cur}/m²").replace("  ", " "));
    }
    parts.join(" · ")
}

/// The Atom 1.0 feed (RFC 4287) of `listings`: `title` names it, `id` is its permanent
/// identifier (a `urn:`), `updated` its newest entry (or `now` when empty).
#[must_use]
pub fn atom(title: &str, id: &str, listings: &[InboxListing], now: u64) -> String {
    let updated = listings.iter().map(|l| l.first_seen).max().unwrap_or(now);
    let mut s = String::new();
    let _ = write!(
        s,
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n\
         <feed xmlns=\"http://www.w3.org/2005/Atom\">\n\
         <title>{}</title>\n<id>{}</id>\n<updated>{}</updated>\n\
         <author><name>Notifio</name></author>\n<generator>Notifio</generator>\n",
        escape(title),
        escape(id),
        rfc3339(updated)
    );
    for l in listings {
        let entry_id = format!(
            "urn:notifio:listing:{}:{}",
            percent_encoding::utf8_percent_encode(&l.site, percent_encoding::NON_ALPHANUMERIC),
            percent_encoding::utf8_percent_encode(
                &l.listing.id,
                percent_encoding::NON_ALPHANUMERIC
            )
        );
        let title = l.listing.title.as_deref().unwrap_or("(untitled listing)");
        let mut summary = figures(l);
        if !summary.is_empty() {
            summary.push_str(". ");
        }
        let _ = write!(summary, "On {}", l.site);
        if !l.searches.is_empty() {
            let _ = write!(summary, ", found by {}", l.searches.join(", "));
        }
        for twin in &l.also_on {
            let _ = write!(summary, "; also on {}", twin.site);
        }
        summary.push('.');
        let _ = write!(
            s,
            "<entry>\n<title>{}</title>\n<id>{}</id>\n<updated>{}</updated>\n<published>{}</published>\n",
            escape(title),
            escape(&entry_id),
            rfc3339(l.first_seen),
            rfc3339(l.first_seen)
        );
        if let Some(url) = l
            .listing
            .url
            .as_deref()
            .filter(|u| crate::notify::message::is_web(u))
        {
            let _ = writeln!(s, "<link rel=\"alternate\" href=\"{}\"/>", escape(url));
        }
        let _ = write!(s, "<summary>{}</summary>\n</entry>\n", escape(&summary));
    }
    s.push_str("</feed>\n");
    s
}

/// One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. A field
/// that a spreadsheet would run as a formula (`=`, `+`, `-`, `@` first) is prefixed with `'`,
/// since titles come from the sites. Hand-written: one rule does not need a CSV crate.
fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// The inbox as CSV: a header, then one row per listing (twins as rows of their own).
#[must_use]
pub fn csv(listings: &[InboxListing]) -> String {
    let num = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut s = String::from(
        "site,id,title,price,currency,price_per_m2,rooms,area_m2,url,image,state,searches,matched,first_seen,gone_at\r\n",
    );
    let mut row = |l: &InboxListing, site: &str, id: &str, url: Option<&str>, price| {
        let fields = [
            csv_field(site),
            csv_field(id),
            csv_field(l.listing.title.as_deref().unwrap_or("")),
            num(price),
            csv_field(l.listing.currency.as_deref().unwrap_or("")),
            num(l.price_per_m2()),
            num(l.listing.rooms),
            num(l.listing.area_m2),
            csv_field(url.unwrap_or("")),
            csv_field(l.listing.image.as_deref().unwrap_or("")),
            l.state.as_str().to_owned(),
            csv_field(&l.searches.join("; ")),
            l.matched.to_string(),
            rfc3339(l.first_seen),
            l.gone_at.map(rfc3339).unwrap_or_default(),
        ];
        s.push_str(&fields.join(","));
        s.push_str("\r\n");
    };
    for l in listings {
        row(
            l,
            &l.site,
            &l.listing.id,
            l.listing.url.as_deref(),
            l.listing.price,
        );
        for t in &l.also_on {
            row(l, &t.site, &t.id, t.url.as_deref(), t.price);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(id: &str, title: &str) -> InboxListing {
        InboxListing {
            site: "flats.example".into(),
            listing: Listing {
                id: id.into(),
                title: Some(title.into()),
                price: Some(1200.0),
                currency: Some("EUR".into()),
                rooms: Some(2.0),
                area_m2: Some(65.0),
                url: Some(format!("https://flats.example/l/{id}?a=1&b=2")),
                image: None,
                description: None,
                fallback: Vec::new(),
            },
            first_seen: 1_764_900_000_000,
            gone_at: None,
            state: ListingState::New,
            searches: vec!["Madrid".into()],
            matched: true,
            prices: vec![],
            also_on: vec![],
        }
    }

    #[test]
    fn every_state_reads_back_by_its_name() {
        for s in ListingState::ALL {
            assert_eq!(ListingState::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::String(s.as_str().into())
            );
        }
        assert_eq!(ListingState::parse("liked"), None);
    }

    #[test]
    fn a_query_reads_its_parameters_and_names_a_bad_one() {
        let p = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>()
        };
        let now = 10 * 3_600_000;
        let q = InboxQuery::from_params(
            &p(&[
                ("state", "favourite"),
                ("matched", "true"),
                ("min_price", "900"),
                ("since", "2h"),
                ("page", "2"),
                ("per_page", "10"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(q.state, Some(ListingState::Favourite));
        assert_eq!(q.matched, Some(true));
        assert_eq!(q.min_price, Some(900.0));
        assert_eq!(q.since, Some(8 * 3_600_000));
        assert_eq!((q.page, q.per_page), (2, 10));
        let since = InboxQuery::from_params(&p(&[("since", "2026-12-05T00:00:00Z")]), now)
            .unwrap()
            .since;
        assert_eq!(since, Some(1_796_428_800_000));
        for (bad, key) in [
            (("state", "liked"), "state"),
            (("per_page", "100000"), "per_page"),
            (("min_price", "NaN"), "min_price"),
            (("color", "red"), "color"),
        ] {
            let e = InboxQuery::from_params(&p(&[bad]), now).unwrap_err();
            assert_eq!(e.0, key, "{e:?}");
        }
    }

    #[test]
    fn the_atom_feed_escapes_what_sites_write() {
        let mut l = listing("7", "Flat <b>&</b> \"terrace\"\u{7}");
        l.also_on.push(AlsoOnListing {
            site: "other.example".into(),
            id: "x".into(),
            url: None,
            price: Some(1190.0),
            first_seen: 0,
        });
        let feed = atom("Notifio: Madrid", "urn:notifio:feed:Madrid", &[l], 0);
        assert!(feed.starts_with("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<feed xmlns=\"http://www.w3.org/2005/Atom\">"));
        assert!(
            feed.contains("<title>Flat &lt;b&gt;&amp;&lt;/b&gt; &quot;terrace&quot;</title>"),
            "{feed}"
        );
        assert!(
            feed.contains("href=\"https://flats.example/l/7?a=1&amp;b=2\""),
            "{feed}"
        );
        assert!(
            feed.contains("<id>urn:notifio:listing:flats%2Eexample:7</id>"),
            "{feed}"
        );
        assert!(
            feed.contains("<updated>2025-12-05T02:00:00Z</updated>"),
            "{feed}"
        );
        assert!(feed.contains("also on other.example"), "{feed}");
        assert_eq!(feed.matches("<entry>").count(), 1);
    }

    #[test]
    fn csv_quotes_and_defuses_formulas() {
        let mut l = listing("1", "=HYPERLINK(\"http://x\")");
        l.searches = vec!["A, B".into(), "C".into()];
        let out = csv(&[l]);
        let mut lines = out.split("\r\n");
        assert!(lines.next().unwrap().starts_with("site,id,title,price"));
        let row = lines.next().unwrap();
        assert!(row.contains(",\"'=HYPERLINK(\"\"http://x\"\")\","), "{row}");
        assert!(row.contains(",\"A, B; C\","), "{row}");
        assert!(row.contains(",18.46,"), "{row}");
    }
}
