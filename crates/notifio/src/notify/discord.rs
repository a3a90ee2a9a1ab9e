//! Discord: a channel webhook (`https://discord.com/api/webhooks/ID/TOKEN`).
//!
//! One embed per listing (its title links to it), at most 10 embeds and 6,000 embed characters
//! per message, `content` at most 2,000 characters; more listings become more messages. Mentions
//! are switched off, so a listing titled "@everyone" pings nobody. A listing's photo is its
//! embed's `thumbnail`, beside the text, so a list of flats stays a list (Discord fetches it
//! when it shows the message); a message Discord refuses
//! with a 400 because of one is sent again without pictures. A 429 says how long to wait
//! in its body's `retry_after` (seconds, fractional) and in `X-RateLimit-Reset-After`; 401/404
//! (a deleted webhook) are permanent.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{details, found_by, picture, title, truncate};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use http::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// Largest `content`.
pub const MAX_CONTENT: usize = 2000;
/// Embeds per message.
pub const MAX_EMBEDS: usize = 10;
/// Characters over all embeds of one message.
pub const MAX_EMBED_CHARS: usize = 6000;

pub(crate) struct Discord {
    url: String,
}

impl Discord {
    pub(crate) fn new(url: &Secret) -> Self {
        // `wait=true`: Discord answers once the message exists (200 with the message), so an
        // accepted answer means delivered.
        let url = match url::Url::parse(url.expose()) {
            Ok(mut u) => {
                u.query_pairs_mut().append_pair("wait", "true");
                u.to_string()
            }
            Err(_) => url.expose().to_owned(),
        };
        Self { url }
    }
}

/// The JSON bodies for `n`.
pub(crate) fn bodies(n: &Notification, msg: &Message) -> Vec<Value> {
    let Some((site, searches, listings)) = n.listings() else {
        let content = truncate(&format!("**{}**\n{}", msg.subject, msg.text), MAX_CONTENT);
        return vec![json!({"content": content, "allowed_mentions": {"parse": []}})];
    };
    let content = truncate(
        &format!("**{}**\n{}", msg.subject, found_by(site, searches)),
        MAX_CONTENT,
    );
    let mut out = Vec::new();
    let mut embeds: Vec<Value> = Vec::new();
    let mut chars = 0;
    for l in listings {
        let name = truncate(title(l), 256);
        let description = truncate(&details(n, l).join("\n"), 1000);
        let size = name.chars().count() + description.chars().count();
        if !embeds.is_empty() && (embeds.len() == MAX_EMBEDS || chars + size > MAX_EMBED_CHARS) {
            out.push(std::mem::take(&mut embeds));
            chars = 0;
        }
        let mut e = json!({"title": name});
        if !description.is_empty() {
            e["description"] = json!(description);
        }
        if let Some(url) = l.url.as_deref().filter(|u| is_web(u)) {
            e["url"] = json!(url);
        }
        if let Some(photo) = picture(l) {
            // One per embed, and at most MAX_EMBEDS embeds: never more than 10 per message.
            e["thumbnail"] = json!({"url": photo});
        }
        chars += size;
        embeds.push(e);
    }
    if !embeds.is_empty() || out.is_empty() {
        out.push(embeds);
    }
    out.into_iter()
        .enumerate()
        .map(|(i, embeds)| {
            let mut body = json!({"embeds": embeds, "allowed_mentions": {"parse": []}});
            if i == 0 {
                body["content"] = json!(content);
            }
            body
        })
        .collect()
}

/// `body` without its pictures, when it has any.
fn without_pictures(body: &Value) -> Option<Value> {
    let mut plain = body.clone();
    let mut removed = false;
    for e in plain
        .get_mut("embeds")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        removed |= e
            .as_object_mut()
            .and_then(|o| o.remove("thumbnail"))
            .is_some();
    }
    removed.then_some(plain)
}

impl Service for Discord {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Discord
    }

    fn calls(&self, n: &Notification, msg: &Message, _d: &Delivery) -> Vec<Call> {
        bodies(n, msg)
            .iter()
            .map(|b| {
                let call = Call::json(Method::POST, self.url.clone(), b);
                match without_pictures(b) {
                    Some(plain) => {
                        call.or_without_pictures(Call::json(Method::POST, self.url.clone(), &plain))
                    }
                    None => call,
                }
            })
            .collect()
    }

    fn retry_after(&self, f: &crate::fetch::Fetched, body: Option<&Value>) -> Option<Duration> {
        let secs =
            |v: f64| (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v.min(86_400.0)));
        let from_body = body
            .and_then(|b| b.get("retry_after"))
            .and_then(Value::as_f64)
            .and_then(secs);
        let from_header = f
            .header("x-ratelimit-reset-after")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(secs);
        from_body.into_iter().chain(from_header).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::Listing;

    #[test]
    fn embeds_are_capped_per_message() {
        let listings: Vec<Listing> = (0..23)
            .map(|i| Listing {
                id: i.to_string(),
                title: Some(format!("Flat {i}")),
                url: Some(format!("https://portal.example/{i}")),
                ..Listing::default()
            })
            .collect();
        let n = Notification::NewListings {
            site: "portal.example".into(),
            searches: vec!["A".into()],
            listings,
            found_at: 0,
            also_on: Vec::new(),
        };
        let b = bodies(&n, &super::super::render(&n));
        let sizes: Vec<usize> = b
            .iter()
            .map(|m| m["embeds"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, [10, 10, 3]);
        assert!(
            b[0]["content"]
                .as_str()
                .unwrap()
                .starts_with("**23 new listings — A**")
        );
        assert!(b[1].get("content").is_none());
        assert_eq!(b[2]["embeds"][2]["url"], "https://portal.example/22");
    }

    #[test]
    fn each_embed_shows_its_photo_and_the_plain_body_has_none() {
        let listings: Vec<Listing> = (0..12)
            .map(|i| Listing {
                id: i.to_string(),
                title: Some(format!("Flat {i}")),
                image: Some(if i == 3 {
                    "javascript:alert(1)".to_owned()
                } else {
                    format!("https://img.portal.example/{i}.jpg?w=640&h=480")
                }),
                ..Listing::default()
            })
            .collect();
        let n = Notification::NewListings {
            site: "portal.example".into(),
            searches: vec!["A".into()],
            listings,
            found_at: 0,
            also_on: Vec::new(),
        };
        let b = bodies(&n, &super::super::render(&n));
        let photos = |m: &Value| {
            m["embeds"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e.get("thumbnail").is_some())
                .count()
        };
        assert_eq!(b.iter().map(photos).collect::<Vec<_>>(), [9, 2]);
        assert_eq!(
            b[0]["embeds"][0]["thumbnail"]["url"],
            "https://img.portal.example/0.jpg?w=640&h=480"
        );
        assert!(
            b[0]["embeds"][3].get("thumbnail").is_none(),
            "not a web URL"
        );
        let plain = without_pictures(&b[0]).unwrap();
        assert_eq!(photos(&plain), 0);
        assert_eq!(plain["embeds"][0]["title"], "Flat 0");
        assert_eq!(plain["content"], b[0]["content"]);
        let d = Discord::new(&Secret::new("https://discord.example/api/webhooks/1/t"));
        let delivery = Delivery {
            id: 1,
            created_at: 0,
            parts_sent: 0,
            now_ms: 0,
        };
        let calls = d.calls(&n, &super::super::render(&n), &delivery);
        assert!(calls.iter().all(|c| c.plain.is_some()));
    }
}
