//! Turning a [`Notification`] into words: a subject, a plain-text body and a simple HTML body.
//!
//! One rendering for every channel, so the mbox copy, the email and the webhook's `text` say the
//! same thing; the channels that lay listings out their own way take each listing's
//! [`notes`] (a price change, "also on …") from here too. Pure: no clock (times come from the
//! notification), no I/O.

use super::Notification;
use crate::listing::Listing;
use crate::price::{PriceChange, currency_code};
use notifio_policy::RefusalKind;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

/// A rendered notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// One line: "3 new listings — Madrid under 1200".
    pub subject: String,
    /// Plain-text body.
    pub text: String,
    /// HTML body (escaped; its only external resources are the listings' photos, by URL).
    pub html: String,
}

/// Renders a notification for people.
#[must_use]
pub fn render(n: &Notification) -> Message {
    match n {
        Notification::NewListings {
            site,
            searches,
            listings,
            ..
        } => {
            let names = names(site, searches);
            let subject = format!(
                "{} — {names}",
                plural(listings.len(), "new listing", "new listings")
            );
            listings_message(subject, n, site, searches, listings)
        }
        Notification::PriceChanged {
            site,
            searches,
            listings,
            changes,
            ..
        } => {
            let subject = price_subject(changes, listings, &names(site, searches));
            listings_message(subject, n, site, searches, listings)
        }
        Notification::SiteBlocked {
            site,
            kind,
            since,
            searches,
        } => site_blocked(site, *kind, *since, searches),
        Notification::SessionExpired {
            site,
            cookies_path,
            login,
        } => session_expired(site, cookies_path.as_deref(), *login),
        Notification::Digest {
            site,
            searches,
            listings,
            new,
            changes,
            ..
        } => {
            let subject = format!(
                "Digest: {} — {}",
                digest_counts(*new, changes),
                names(site, searches)
            );
            listings_message(subject, n, site, searches, listings)
        }
        Notification::Heartbeat {
            checks,
            new,
            errors,
            since_local,
            ..
        } => heartbeat(*checks, *new, *errors, since_local),
    }
}

/// "3 new listings, 1 price drop": what a digest holds.
fn digest_counts(new: usize, changes: &[PriceChange]) -> String {
    let drops = changes.iter().filter(|c| c.is_drop()).count();
    let rises = changes.len() - drops;
    let mut parts = Vec::new();
    if new > 0 || changes.is_empty() {
        parts.push(plural(new, "new listing", "new listings"));
    }
    if drops > 0 {
        parts.push(plural(drops, "price drop", "price drops"));
    }
    if rises > 0 {
        parts.push(plural(rises, "price rise", "price rises"));
    }
    parts.join(", ")
}

/// "Still watching: 1,440 checks, 12 new, 0 errors since Tue 14 Nov 22:13".
fn heartbeat(checks: u64, new: u64, errors: u64, since: &str) -> Message {
    let count = |n: u64| grouped(n as f64);
    let checks = if checks == 1 {
        "1 check".to_owned()
    } else {
        format!("{} checks", count(checks))
    };
    let errors = if errors == 1 {
        "1 error".to_owned()
    } else {
        format!("{} errors", count(errors))
    };
    let since = if since.is_empty() {
        String::new()
    } else {
        format!(" since {since}")
    };
    let subject = format!(
        "Still watching: {checks}, {} new, {errors}{since}",
        count(new)
    );
    let text = format!(
        "{subject}.\nNotifio is running and checking your searches: between these messages, \
         silence means nothing new.\n"
    );
    let html = paragraphs(&text);
    Message {
        subject,
        text,
        html,
    }
}

/// Whether a listing's link may go into a message's markup: only http(s) links with a host
/// (Telegram refuses others, refusing the whole message; the others are no safer).
pub(crate) fn is_web(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
}

/// Pictures in one message, on any channel: Telegram's media groups and Discord's embeds take
/// 10, and a message is about its listings, not a gallery.
pub(crate) const MAX_PICTURES: usize = 10;

/// A picture's URL longer than this is not shown (Discord takes 2,048 characters, Slack
/// 3,000); a real photo's URL is far shorter.
pub(crate) const MAX_PICTURE_URL: usize = 2000;

/// The listing's photo as a channel may show it: an http(s) URL with a host and no
/// `user:password@`, serialized (ASCII, percent-encoded), at most [`MAX_PICTURE_URL`] long.
/// `None` for anything else (`data:`, `javascript:`, a relative path): the channel shows text.
pub(crate) fn picture(l: &Listing) -> Option<String> {
    let u = url::Url::parse(l.image.as_deref()?.trim()).ok()?;
    let usable = matches!(u.scheme(), "http" | "https")
        && u.has_host()
        && u.username().is_empty()
        && u.password().is_none();
    let s = String::from(u);
    (usable && s.len() <= MAX_PICTURE_URL).then_some(s)
}

/// The photos of `listings` a message shows: each listing's [`picture`], once each, at most
/// [`MAX_PICTURES`], in listing order.
pub(crate) fn pictures(listings: &[Listing]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in listings.iter().filter_map(picture) {
        if out.len() == MAX_PICTURES {
            break;
        }
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// "Found on idealista.com by the search Madrid.": the line that says where listings came from.
pub(crate) fn found_by(site: &str, searches: &[String]) -> String {
    if searches.is_empty() {
        format!("Found on {site}.")
    } else if searches.len() > 1 {
        format!("Found on {site} by the searches {}.", searches.join(", "))
    } else {
        format!("Found on {site} by the search {}.", searches.join(", "))
    }
}

/// A listing's title as shown everywhere.
pub(crate) fn title(l: &Listing) -> &str {
    l.title.as_deref().unwrap_or("(untitled listing)")
}

/// `s` cut to at most `max` characters, ending in `…` when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Packs whole `blocks` into as few parts as fit `limit` (measured by `len`), in order; `head`
/// starts the first part. A block that does not fit even alone is replaced by `shorten(block)`,
/// which must fit. Parts never cut a block, so markup inside one is never cut either.
pub(crate) fn pack(
    head: String,
    blocks: Vec<String>,
    limit: usize,
    len: fn(&str) -> usize,
    shorten: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = if len(&head) > limit {
        shorten(&head)
    } else {
        head
    };
    for block in blocks {
        let block = if len(&block) > limit {
            shorten(&block)
        } else {
            block
        };
        if !current.is_empty() && len(&current) + len(&block) > limit {
            parts.push(std::mem::take(&mut current));
        }
        current.push_str(&block);
    }
    if !current.is_empty() || parts.is_empty() {
        parts.push(current);
    }
    parts
}

/// The searches a message names, or its site when it names none.
fn names(site: &str, searches: &[String]) -> String {
    if searches.is_empty() {
        site.to_string()
    } else {
        searches.join(", ")
    }
}

/// "Price dropped: 1,200 → 1,050 EUR (−12.5%) — Sunny flat" for one change; "3 price drops —
/// Madrid" for several.
fn price_subject(changes: &[PriceChange], listings: &[Listing], names: &str) -> String {
    if let [change] = changes {
        let title = listings
            .iter()
            .find(|l| l.id == change.id)
            .map_or("(untitled listing)", title);
        return format!("{} — {title}", price_change(change));
    }
    let drops = changes.iter().filter(|c| c.is_drop()).count();
    let what = if drops == changes.len() {
        plural(drops, "price drop", "price drops")
    } else if drops == 0 {
        plural(changes.len(), "price rise", "price rises")
    } else {
        plural(changes.len(), "price change", "price changes")
    };
    format!("{what} — {names}")
}

/// "Price dropped: 1,200 → 1,050 EUR (−12.5%)", "Price rose: 1,050 → 1,200 EUR (+14.3%)".
pub(crate) fn price_change(c: &PriceChange) -> String {
    let currency = c
        .currency
        .as_deref()
        .map(|cur| format!(" {}", currency_code(cur)))
        .unwrap_or_default();
    let pct = number((c.percent().abs() * 10.0).round() / 10.0);
    let (what, sign) = if c.is_drop() {
        ("dropped", '\u{2212}')
    } else {
        ("rose", '+')
    };
    format!(
        "Price {what}: {} → {}{currency} ({sign}{pct}%)",
        grouped(c.from),
        grouped(c.to)
    )
}

/// "seen 2 h ago": how long before `at` something was first seen at `seen`.
fn seen_ago(seen: u64, at: u64) -> String {
    let mins = at.saturating_sub(seen) / 60_000;
    match mins {
        0 => "seen moments ago".to_owned(),
        1..=59 => format!("seen {mins} min ago"),
        60..=2879 => format!("seen {} h ago", mins / 60),
        _ => format!("seen {} days ago", mins / 1440),
    }
}

/// What a listing's message says about it besides its facts, one line each, for every
/// channel: its price change, or that it is likely on another site too ("Also on
/// idealista.com, seen 2 h ago: <link>").
pub(crate) fn notes(n: &Notification, l: &Listing) -> Vec<String> {
    let also_on = |also_on: &[super::AlsoOn], found_at: u64| -> Vec<String> {
        also_on
            .iter()
            .filter(|a| a.id == l.id)
            .map(|a| {
                let link = a
                    .url
                    .as_deref()
                    .map(|u| format!(": {u}"))
                    .unwrap_or_default();
                format!(
                    "Also on {}, {}{link}",
                    a.site,
                    seen_ago(a.seen_at, found_at)
                )
            })
            .collect()
    };
    match n {
        Notification::PriceChanged { changes, .. } => changes
            .iter()
            .filter(|c| c.id == l.id)
            .map(price_change)
            .collect(),
        Notification::NewListings {
            also_on: twins,
            found_at,
            ..
        } => also_on(twins, *found_at),
        Notification::Digest {
            changes,
            also_on: twins,
            found_at,
            ..
        } => {
            let mut lines: Vec<String> = changes
                .iter()
                .filter(|c| c.id == l.id)
                .map(price_change)
                .collect();
            lines.extend(also_on(twins, *found_at));
            lines
        }
        _ => Vec::new(),
    }
}

/// A listing's lines under its title on every channel: its [`notes`], then its [`facts`].
pub(crate) fn details(n: &Notification, l: &Listing) -> Vec<String> {
    let mut lines = notes(n, l);
    let facts = facts(l);
    if !facts.is_empty() {
        lines.push(facts);
    }
    lines
}

/// How wide a listing's photo is shown in the HTML body, in CSS pixels: enough to recognise
/// the flat, small enough that a message of several listings stays easy to scroll.
const PHOTO_WIDTH: u32 = 320;

fn listings_message(
    subject: String,
    n: &Notification,
    site: &str,
    searches: &[String],
    listings: &[Listing],
) -> Message {
    let found_by = found_by(site, searches);
    let mut text = format!("{found_by}\n");
    let mut html = format!("<html><body>\n<p>{}</p>\n<ul>\n", escape(&found_by));
    let mut photos = 0;
    for l in listings {
        let title = title(l);
        let facts = facts(l);
        let notes = notes(n, l);
        let _ = write!(text, "\n* {title}\n");
        for note in &notes {
            let _ = writeln!(text, "  {note}");
        }
        if !facts.is_empty() {
            let _ = writeln!(text, "  {facts}");
        }
        if let Some(url) = &l.url {
            let _ = writeln!(text, "  {url}");
        }
        let head = match &l.url {
            Some(url) => format!("<a href=\"{}\">{}</a>", escape(url), escape(title)),
            None => escape(title),
        };
        let _ = write!(html, "<li><b>{head}</b>");
        if let Some(src) = picture(l).filter(|_| photos < MAX_PICTURES) {
            photos += 1;
            let img = format!(
                "<img src=\"{}\" alt=\"{}\" width=\"{PHOTO_WIDTH}\" style=\"max-width:100%;height:auto\" referrerpolicy=\"no-referrer\">",
                escape(&src),
                escape(&format!("Photo: {}", truncate(title, 300)))
            );
            match l.url.as_deref().filter(|u| is_web(u)) {
                Some(url) => {
                    let _ = write!(html, "<br><a href=\"{}\">{img}</a>", escape(url));
                }
                None => {
                    let _ = write!(html, "<br>{img}");
                }
            }
        }
        for note in &notes {
            let _ = write!(html, "<br>{}", escape(note));
        }
        if !facts.is_empty() {
            let _ = write!(html, "<br>{}", escape(&facts));
        }
        if let Some(url) = &l.url {
            let _ = write!(html, "<br>{}", escape(url));
        }
        html.push_str("</li>\n");
    }
    html.push_str("</ul>\n</body></html>\n");
    Message {
        subject,
        text,
        html,
    }
}

/// "1,250 € · 3 rooms · 85 m²": the facts a listing has, in a fixed order.
pub(crate) fn facts(l: &Listing) -> String {
    let mut parts = Vec::new();
    if let Some(price) = l.price {
        parts.push(price_text(price, l.currency.as_deref()));
    }
    if let Some(rooms) = l.rooms {
        let r = number(rooms);
        parts.push(if rooms == 1.0 {
            format!("{r} room")
        } else {
            format!("{r} rooms")
        });
    }
    if let Some(area) = l.area_m2 {
        parts.push(format!("{} m²", number(area)));
    }
    parts.join(" · ")
}

/// A price with its currency: `1,250 €`, `$1,250`, `1,250.50 CHF`.
fn price_text(price: f64, currency: Option<&str>) -> String {
    let amount = grouped(price);
    match currency.map(str::trim) {
        Some("EUR" | "eur" | "€") => format!("{amount} €"),
        Some("USD" | "usd" | "$") => format!("${amount}"),
        Some("GBP" | "gbp" | "£") => format!("£{amount}"),
        Some(c) if !c.is_empty() => format!("{amount} {c}"),
        _ => amount,
    }
}

/// Whole numbers without decimals, others with up to two (`2.5`, `85`).
fn number(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Thousands separators: 1250 → `1,250`; 1250.5 → `1,250.50`.
fn grouped(v: f64) -> String {
    let neg = v < 0.0;
    let v = v.abs();
    let whole = v.trunc() as u64;
    let cents = ((v - v.trunc()) * 100.0).round() as u64;
    let digits = whole.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if cents > 0 {
        let _ = write!(out, ".{cents:02}");
    }
    if neg { format!("-{out}") } else { out }
}

fn site_blocked(site: &str, kind: RefusalKind, since: u64, searches: &[String]) -> Message {
    let why = match kind {
        RefusalKind::Challenge => "challenge pages",
        RefusalKind::RateLimited => "rate limiting, HTTP 429",
        RefusalKind::Denied => "access denied, HTTP 401/403",
        RefusalKind::Error => "server or network errors",
    };
    let when = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(since));
    let subject = format!("Cannot check {site} ({why})");
    let mut text = format!(
        "We have not been able to check {site} since {when} ({why}).\n\
         Notifio keeps backing off politely and will resume on its own when the site answers.\n"
    );
    if !searches.is_empty() {
        let _ = writeln!(text, "Searches waiting: {}.", searches.join(", "));
    }
    let html = paragraphs(&text);
    Message {
        subject,
        text,
        html,
    }
}

fn session_expired(site: &str, cookies_path: Option<&str>, login: bool) -> Message {
    let subject = format!("Your {site} session expired");
    let text = match cookies_path {
        _ if login => format!(
            "Your {site} session expired — run `notifio login {site}` and log in again in the \
             window it opens.\nSearches on {site} are paused until then.\n"
        ),
        Some(path) => format!(
            "Your {site} session expired — export fresh cookies to {path}.\n\
             Searches on {site} are paused until then.\n"
        ),
        None => format!(
            "Your {site} session expired — export fresh cookies and point the site's `cookies` \
             setting at them.\nSearches on {site} are paused until then.\n"
        ),
    };
    let html = paragraphs(&text);
    Message {
        subject,
        text,
        html,
    }
}

fn paragraphs(text: &str) -> String {
    let mut html = String::from("<html><body>\n");
    for line in text.lines().filter(|l| !l.is_empty()) {
        let _ = writeln!(html, "<p>{}</p>", escape(line));
    }
    html.push_str("</body></html>\n");
    html
}

/// HTML and XML text/attribute escaping, for the e-mail, the channels that take HTML and the
/// Atom feeds: the five special characters as entities, and what XML 1.0 forbids (U+FFFE,
/// U+FFFF, control characters but tab and line breaks) dropped, with the other control
/// characters, so that one title from a site cannot make a feed or a message unreadable.
/// Not worth a crate.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            '\u{FFFE}' | '\u{FFFF}' => {}
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(id: &str, price: f64) -> Listing {
        Listing {
            id: id.into(),
            title: Some(format!("Flat <{id}> & co")),
            price: Some(price),
            currency: Some("EUR".into()),
            rooms: Some(3.0),
            area_m2: Some(85.5),
            url: Some(format!("https://example.com/flat/{id}?a=1&b=2")),
            image: None,
            description: None,
            fallback: Vec::new(),
        }
    }

    #[test]
    fn new_listings_subject_and_body() {
        let n = Notification::NewListings {
            site: "example.com".into(),
            searches: vec!["Madrid under 1200".into()],
            listings: vec![
                listing("1", 1150.0),
                listing("2", 1250.5),
                listing("3", 990.0),
            ],
            found_at: 0,
            also_on: Vec::new(),
        };
        let m = render(&n);
        println!("{}\n{}", m.subject, m.text);
        assert_eq!(m.subject, "3 new listings — Madrid under 1200");
        assert!(
            m.text
                .contains("* Flat <1> & co\n  1,150 € · 3 rooms · 85.5 m²\n")
        );
        assert!(m.text.contains("1,250.50 €"));
        assert!(m.text.contains("https://example.com/flat/2?a=1&b=2"));
        assert!(m.html.contains(
            "<a href=\"https://example.com/flat/1?a=1&amp;b=2\">Flat &lt;1&gt; &amp; co</a>"
        ));
        assert!(!m.html.contains("<1>"));
    }

    #[test]
    fn the_html_drops_what_xml_forbids_from_a_title() {
        let hostile = Listing {
            title: Some("Nice\u{FFFE} flat\u{FFFF}\u{1}\u{1b}[2J\u{85} <b>".into()),
            ..listing("1", 1000.0)
        };
        let n = Notification::NewListings {
            site: "example.com".into(),
            searches: vec!["A".into()],
            listings: vec![hostile],
            found_at: 0,
            also_on: Vec::new(),
        };
        let html = render(&n).html;
        assert!(html.contains("Nice flat[2J &lt;b&gt;"), "{html}");
        assert!(
            !html
                .chars()
                .any(|c| matches!(c, '\u{FFFE}' | '\u{FFFF}') || c.is_control() && c != '\n'),
            "{html:?}"
        );
    }

    #[test]
    fn only_web_photos_show_and_the_html_escapes_them() {
        let with = |image: &str| Listing {
            image: Some(image.into()),
            ..listing("1", 1000.0)
        };
        for bad in [
            "javascript:alert(1)",
            "data:image/png;base64,AAAA",
            "//img.example/a.jpg",
            "img/a.jpg",
            "https://user:pw@img.example/a.jpg",
            "ftp://img.example/a.jpg",
        ] {
            assert_eq!(picture(&with(bad)), None, "{bad}");
        }
        assert_eq!(
            picture(&with("https://img.example/a b\".jpg?x=1&y=<2>")).as_deref(),
            Some("https://img.example/a%20b%22.jpg?x=1&y=%3C2%3E")
        );
        let long = format!("https://img.example/{}", "a".repeat(MAX_PICTURE_URL));
        assert_eq!(picture(&with(&long)), None);

        let n = Notification::NewListings {
            site: "example.com".into(),
            searches: vec!["A".into()],
            listings: (0..12)
                .map(|i| with(&format!("https://img.example/{i}.jpg?w=1&h=2")))
                .chain([with("javascript:alert(1)")])
                .collect(),
            found_at: 0,
            also_on: Vec::new(),
        };
        let m = render(&n);
        assert!(m.html.contains(
            "<br><a href=\"https://example.com/flat/1?a=1&amp;b=2\"><img src=\"https://img.example/0.jpg?w=1&amp;h=2\" alt=\"Photo: Flat &lt;1&gt; &amp; co\" width=\"320\""
        ), "{}", m.html);
        assert_eq!(m.html.matches("<img ").count(), MAX_PICTURES);
        assert!(!m.html.contains("javascript:"));
        assert!(
            !m.text.contains("img.example"),
            "the plain text shows no photos"
        );
        assert_eq!(
            pictures(&[
                with("https://a.example/x.jpg"),
                with("https://a.example/x.jpg")
            ]),
            ["https://a.example/x.jpg"]
        );
    }

    #[test]
    fn two_searches_are_both_named() {
        let n = Notification::NewListings {
            site: "example.com".into(),
            searches: vec!["A".into(), "B".into()],
            listings: vec![listing("1", 1000.0)],
            found_at: 0,
            also_on: Vec::new(),
        };
        let m = render(&n);
        assert_eq!(m.subject, "1 new listing — A, B");
        assert!(
            m.text
                .starts_with("Found on example.com by the searches A, B.")
        );
    }

    #[test]
    fn a_price_drop_is_marked_in_the_subject_and_under_its_title() {
        let mut flat = listing("7", 1050.0);
        flat.title = Some("Sunny flat".into());
        let change = |from: f64, to: f64| PriceChange {
            id: "7".into(),
            from,
            to,
            currency: Some("€".into()),
        };
        let n = Notification::PriceChanged {
            site: "idealista.com".into(),
            searches: vec!["Madrid".into()],
            listings: vec![flat.clone()],
            changes: vec![change(1200.0, 1050.0)],
            found_at: 0,
        };
        let m = render(&n);
        println!("{}\n{}", m.subject, m.text);
        assert_eq!(
            m.subject,
            "Price dropped: 1,200 → 1,050 EUR (\u{2212}12.5%) — Sunny flat"
        );
        assert!(m.text.contains(
            "* Sunny flat\n  Price dropped: 1,200 → 1,050 EUR (\u{2212}12.5%)\n  1,050 € · 3 rooms"
        ));
        assert!(m.html.contains("<br>Price dropped: 1,200 → 1,050 EUR"));
        assert_eq!(
            price_change(&change(1050.0, 1200.0)),
            "Price rose: 1,050 → 1,200 EUR (+14.3%)"
        );
        let mut other = listing("8", 900.0);
        other.title = Some("Other".into());
        let two = Notification::PriceChanged {
            site: "idealista.com".into(),
            searches: vec!["Madrid".into()],
            listings: vec![flat.clone(), other],
            changes: vec![
                change(1200.0, 1050.0),
                PriceChange {
                    id: "8".into(),
                    ..change(1000.0, 900.0)
                },
            ],
            found_at: 0,
        };
        assert_eq!(render(&two).subject, "2 price drops — Madrid");
        let Notification::PriceChanged {
            site,
            searches,
            listings,
            found_at,
            ..
        } = two
        else {
            unreachable!()
        };
        let mixed = Notification::PriceChanged {
            site,
            searches,
            listings,
            found_at,
            changes: vec![
                change(1200.0, 1050.0),
                PriceChange {
                    id: "8".into(),
                    ..change(800.0, 900.0)
                },
            ],
        };
        assert_eq!(render(&mixed).subject, "2 price changes — Madrid");
    }

    #[test]
    fn a_likely_duplicate_is_noted_with_its_site_age_and_link() {
        let hour = 3_600_000;
        let n = Notification::NewListings {
            site: "fotocasa.es".into(),
            searches: vec!["Madrid".into()],
            listings: vec![listing("1", 1000.0), listing("2", 1100.0)],
            found_at: 10 * hour,
            also_on: vec![super::super::AlsoOn {
                id: "2".into(),
                site: "idealista.com".into(),
                url: Some("https://www.idealista.com/inmueble/9/".into()),
                seen_at: 8 * hour - 60_000,
            }],
        };
        let m = render(&n);
        println!("{}", m.text);
        assert_eq!(
            m.text
                .matches(
                    "  Also on idealista.com, seen 2 h ago: https://www.idealista.com/inmueble/9/\n"
                )
                .count(),
            1
        );
        let second = m.text.find("* Flat <2>").unwrap();
        assert!(
            m.text[second..].contains("Also on"),
            "under the right listing"
        );
        assert_eq!(seen_ago(0, 59_000), "seen moments ago");
        assert_eq!(seen_ago(0, 5 * 60_000), "seen 5 min ago");
        assert_eq!(seen_ago(0, 3 * 24 * hour), "seen 3 days ago");
    }

    #[test]
    fn pack_keeps_blocks_whole_and_within_the_limit() {
        let blocks: Vec<String> = (0..5)
            .map(|i| format!("<b>{i}{}</b>", "x".repeat(20)))
            .collect();
        let parts = pack("HEAD\n".into(), blocks, 60, |s| s.chars().count(), &|b| {
            truncate(b, 10)
        });
        println!("{parts:#?}");
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.chars().count() <= 60));
        assert!(parts[0].starts_with("HEAD\n<b>0"));
        assert_eq!(parts.concat().matches("<b>").count(), 5);
        assert_eq!(parts.concat().matches("</b>").count(), 5);
        let long = pack(
            String::new(),
            vec!["y".repeat(100)],
            60,
            |s| s.len(),
            &|b| truncate(b, 50),
        );
        assert_eq!(long, vec![format!("{}…", "y".repeat(49))]);
        assert_eq!(truncate("abc", 3), "abc");
    }

    #[test]
    fn prices_and_numbers() {
        assert_eq!(price_text(1_234_567.0, Some("USD")), "$1,234,567");
        assert_eq!(price_text(950.0, Some("CHF")), "950 CHF");
        assert_eq!(price_text(950.0, None), "950");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(3.0), "3");
    }

    #[test]
    fn site_events() {
        let m = render(&Notification::SiteBlocked {
            site: "idealista.com".into(),
            kind: RefusalKind::Challenge,
            since: 1_700_000_000_000,
            searches: vec!["Madrid".into()],
        });
        assert!(m.text.starts_with(
            "We have not been able to check idealista.com since Tue, 14 Nov 2023 22:13:20 GMT (challenge pages)."
        ));
        let login = render(&Notification::SessionExpired {
            site: "facebook.com".into(),
            cookies_path: None,
            login: true,
        });
        assert!(
            login.text.contains("run `notifio login facebook.com`"),
            "{}",
            login.text
        );
        let m = render(&Notification::SessionExpired {
            site: "facebook.com".into(),
            cookies_path: Some("/home/me/fb.txt".into()),
            login: false,
        });
        assert!(m.text.starts_with(
            "Your facebook.com session expired — export fresh cookies to /home/me/fb.txt."
        ));
    }
}
