//! Telegram: a bot's `sendMessage` in HTML parse mode.
//!
//! A message holds at most 4096 characters, so a notification of many listings becomes several
//! messages, split between listings (never inside a tag: each listing's markup is one block).
//! A 429 says how long to wait in `parameters.retry_after`; 400 "chat not found", 401 (a bad
//! token) and 403 (the bot was blocked or removed) are permanent.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{details, escape, found_by, pack, title, truncate};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use http::Method;
use std::time::Duration;

/// Largest message text, in UTF-16 code units as Telegram counts them.
pub const MAX_MESSAGE: usize = 4096;

/// A Telegram chat reached through a bot.
pub(crate) struct Telegram {
    api: String,
    token: Secret,
    chat_id: String,
}

/// Telegram counts text in UTF-16 code units; raw markup counts more than the parsed text, so
/// a part that fits by this measure always fits.
fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// The messages for `n`: HTML, each at most [`MAX_MESSAGE`] long.
pub(crate) fn texts(n: &Notification, msg: &Message) -> Vec<String> {
    let shorten = |block: &str| {
        // A block too long alone (a hostile title or link): its plain words, cut.
        let plain = block.replace(['\n'], " ");
        escape(&truncate(&strip_tags(&plain), MAX_MESSAGE / 6))
    };
    match n.listings() {
        Some((site, searches, listings)) => {
            let head = format!(
                "<b>{}</b>\n{}\n",
                escape(&msg.subject),
                escape(&found_by(site, searches))
            );
            let blocks = listings
                .iter()
                .map(|l| {
                    let name = escape(&truncate(title(l), 300));
                    let head = match l.url.as_deref().filter(|u| is_web(u)) {
                        Some(url) => format!("<a href=\"{}\">{name}</a>", escape(url)),
                        None => name,
                    };
                    let details = details(n, l).join("\n");
                    if details.is_empty() {
                        format!("\n<b>{head}</b>\n")
                    } else {
                        format!("\n<b>{head}</b>\n{}\n", escape(&details))
                    }
                })
                .collect();
            pack(head, blocks, MAX_MESSAGE, utf16_len, &shorten)
        }
        _ => {
            let head = format!("<b>{}</b>\n", escape(&msg.subject));
            let blocks = msg
                .text
                .lines()
                .map(|l| format!("{}\n", escape(l)))
                .collect();
            pack(head, blocks, MAX_MESSAGE, utf16_len, &shorten)
        }
    }
}

fn strip_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

impl Telegram {
    pub(crate) fn new(api: &str, token: Secret, chat_id: &str) -> Self {
        Self {
            api: api.trim_end_matches('/').to_owned(),
            token,
            chat_id: chat_id.to_owned(),
        }
    }
}

impl Service for Telegram {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Telegram
    }

    fn calls(&self, n: &Notification, msg: &Message, _d: &Delivery) -> Vec<Call> {
        let url = format!("{}/bot{}/sendMessage", self.api, self.token.expose());
        texts(n, msg)
            .into_iter()
            .map(|text| {
                Call::json(
                    Method::POST,
                    url.clone(),
                    &serde_json::json!({
                        "chat_id": self.chat_id,
                        "text": text,
                        "parse_mode": "HTML",
                    }),
                )
            })
            .collect()
    }

    fn retry_after(
        &self,
        _f: &crate::fetch::Fetched,
        body: Option<&serde_json::Value>,
    ) -> Option<Duration> {
        body?
            .pointer("/parameters/retry_after")?
            .as_u64()
            .map(Duration::from_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::Listing;

    #[test]
    fn many_listings_split_between_listings_with_balanced_tags() {
        let listings: Vec<Listing> = (0..40)
            .map(|i| Listing {
                id: i.to_string(),
                title: Some(format!("Flat {i} <nice> & {}", "bright ".repeat(12))),
                price: Some(1000.0 + f64::from(i)),
                currency: Some("EUR".into()),
                url: Some(format!("https://portal.example/listing/{i}?a=1&b=2")),
                ..Listing::default()
            })
            .collect();
        let n = Notification::NewListings {
            site: "portal.example".into(),
            searches: vec!["Madrid".into()],
            listings,
            found_at: 0,
            also_on: Vec::new(),
        };
        let parts = texts(&n, &super::super::render(&n));
        println!(
            "{} parts: {:?}",
            parts.len(),
            parts.iter().map(|p| utf16_len(p)).collect::<Vec<_>>()
        );
        assert!(parts.len() >= 2);
        for p in &parts {
            assert!(utf16_len(p) <= MAX_MESSAGE);
            assert_eq!(p.matches("<a ").count(), p.matches("</a>").count());
            assert_eq!(p.matches("<b>").count(), p.matches("</b>").count());
        }
        let all = parts.concat();
        for i in 0..40 {
            assert_eq!(
                all.matches(&format!("/listing/{i}?a=1&amp;b=2\"")).count(),
                1
            );
        }
        assert!(parts[0].starts_with("<b>40 new listings — Madrid</b>"));
    }
}
