//! Slack: an incoming webhook (`https://hooks.slack.com/services/…`) with Block Kit blocks.
//!
//! A header, a line saying which searches found what, then one section per listing (its title
//! links to it); at most 50 blocks per message and 3,000 characters per section, so many
//! listings become several messages. `text` is the fallback notifications show. A listing's
//! photo is its section's accessory image (a thumbnail beside the text, so it adds no block),
//! at most 10 per message; Slack downloads images when it takes the message and refuses the
//! whole message (400 `invalid_blocks`) when one fails, so that part is sent again without
//! pictures. Slack answers
//! errors in plain text (`invalid_token`, `channel_not_found`, `no_service`): those 4xx are
//! permanent; a 429 carries `Retry-After`.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{MAX_PICTURES, details, found_by, picture, title, truncate};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use http::Method;
use serde_json::{Value, json};

/// Blocks per message.
pub const MAX_BLOCKS: usize = 50;
/// Characters per section text.
pub const MAX_SECTION: usize = 3000;
/// Characters of an image's `alt_text`.
pub const MAX_ALT_TEXT: usize = 2000;

pub(crate) struct Slack {
    url: String,
}

impl Slack {
    pub(crate) fn new(url: &Secret) -> Self {
        Self {
            url: url.expose().to_owned(),
        }
    }
}

/// mrkdwn escaping: Slack asks for exactly these three.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, MAX_SECTION)}})
}

/// A listing's photo as a section's accessory.
fn photo(url: &str, title: &str) -> Value {
    json!({
        "type": "image",
        "image_url": url,
        "alt_text": truncate(&format!("Photo: {title}"), MAX_ALT_TEXT),
    })
}

/// The JSON bodies for `n`.
pub(crate) fn bodies(n: &Notification, msg: &Message) -> Vec<Value> {
    let header = json!({"type": "header", "text": {"type": "plain_text", "text": truncate(&msg.subject, 150)}});
    let mut first = vec![header];
    // Each listing's section, with its photo when it has one.
    let mut rest: Vec<(Value, Option<Value>)> = Vec::new();
    match n.listings() {
        Some((site, searches, listings)) => {
            first.push(section(&esc(&found_by(site, searches))));
            for l in listings {
                let name = esc(&truncate(title(l), 300)).replace('|', "¦");
                let head = match l.url.as_deref().filter(|u| is_web(u)) {
                    Some(url) => format!("*<{url}|{name}>*"),
                    None => format!("*{name}*"),
                };
                let details = details(n, l).join("\n");
                let block = section(&if details.is_empty() {
                    head
                } else {
                    format!("{head}\n{}", esc(&details))
                });
                rest.push((block, picture(l).map(|p| photo(&p, title(l)))));
            }
        }
        _ => first.push(section(&esc(&msg.text))),
    }
    let mut messages = vec![(first, 0)];
    for (mut block, accessory) in rest {
        if messages.last().is_some_and(|(m, _)| m.len() >= MAX_BLOCKS) {
            messages.push((Vec::new(), 0));
        }
        if let Some((m, photos)) = messages.last_mut() {
            if let Some(a) = accessory.filter(|_| *photos < MAX_PICTURES) {
                block["accessory"] = a;
                *photos += 1;
            }
            m.push(block);
        }
    }
    messages
        .into_iter()
        .map(|(blocks, _)| json!({"text": msg.subject, "blocks": blocks}))
        .collect()
}

/// `body` without its pictures, when it has any.
fn without_pictures(body: &Value) -> Option<Value> {
    let mut plain = body.clone();
    let mut removed = false;
    for b in plain
        .get_mut("blocks")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        removed |= b
            .as_object_mut()
            .and_then(|o| o.remove("accessory"))
            .is_some();
    }
    removed.then_some(plain)
}

impl Service for Slack {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Slack
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::Listing;

    #[test]
    fn photos_are_section_accessories_at_most_10_per_message() {
        let listings: Vec<Listing> = (0..60)
            .map(|i| Listing {
                id: i.to_string(),
                title: Some(format!("Flat <{i}> & \"co\"")),
                url: Some(format!("https://portal.example/{i}")),
                image: Some(format!("https://img.portal.example/{i}.jpg")),
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
        let photos = |m: &Value| -> Vec<Value> {
            m["blocks"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s.get("accessory").cloned())
                .collect()
        };
        assert_eq!(b.len(), 2, "50 blocks per message");
        assert_eq!(
            b.iter().map(|m| photos(m).len()).collect::<Vec<_>>(),
            [10, 10]
        );
        let first = &b[0]["blocks"][2]["accessory"];
        assert_eq!(first["type"], "image");
        assert_eq!(first["image_url"], "https://img.portal.example/0.jpg");
        // alt_text is plain text: no mrkdwn escaping, and JSON escapes the quotes.
        assert_eq!(first["alt_text"], "Photo: Flat <0> & \"co\"");
        assert_eq!(
            b[1]["blocks"][0]["accessory"]["image_url"],
            "https://img.portal.example/48.jpg"
        );
        let plain = without_pictures(&b[0]).unwrap();
        assert!(photos(&plain).is_empty());
        assert_eq!(plain["blocks"][2]["text"], b[0]["blocks"][2]["text"]);
        assert_eq!(
            plain["blocks"].as_array().unwrap().len(),
            b[0]["blocks"].as_array().unwrap().len(),
            "the same blocks: a retry without pictures resumes the same parts"
        );
    }
}
