//! Slack: an incoming webhook (`https://hooks.slack.com/services/…`) with Block Kit blocks.
//!
//! A header, a line saying which searches found what, then one section per listing (its title
//! links to it); at most 50 blocks per message and 3,000 characters per section, so many
//! listings become several messages. `text` is the fallback notifications show. Slack answers
//! errors in plain text (`invalid_token`, `channel_not_found`, `no_service`): those 4xx are
//! permanent; a 429 carries `Retry-After`.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{details, found_by, title, truncate};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use http::Method;
use serde_json::{Value, json};

/// Blocks per message.
pub const MAX_BLOCKS: usize = 50;
/// Characters per section text.
pub const MAX_SECTION: usize = 3000;

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

/// The JSON bodies for `n`.
pub(crate) fn bodies(n: &Notification, msg: &Message) -> Vec<Value> {
    let header = json!({"type": "header", "text": {"type": "plain_text", "text": truncate(&msg.subject, 150)}});
    let mut first = vec![header];
    let mut rest: Vec<Value> = Vec::new();
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
                rest.push(section(&if details.is_empty() {
                    head
                } else {
                    format!("{head}\n{}", esc(&details))
                }));
            }
        }
        _ => first.push(section(&esc(&msg.text))),
    }
    let mut messages = vec![first];
    for block in rest {
        if messages.last().is_some_and(|m| m.len() >= MAX_BLOCKS) {
            messages.push(Vec::new());
        }
        if let Some(m) = messages.last_mut() {
            m.push(block);
        }
    }
    messages
        .into_iter()
        .map(|blocks| json!({"text": msg.subject, "blocks": blocks}))
        .collect()
}

impl Service for Slack {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Slack
    }

    fn calls(&self, n: &Notification, msg: &Message, _d: &Delivery) -> Vec<Call> {
        bodies(n, msg)
            .iter()
            .map(|b| Call::json(Method::POST, self.url.clone(), b))
            .collect()
    }
}
