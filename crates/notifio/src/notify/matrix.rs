//! Matrix: `PUT {homeserver}/_matrix/client/v3/rooms/{room}/send/m.room.message/{txnId}` with
//! an access token, an `m.text` message with an HTML `formatted_body`.
//!
//! Photos: a `formatted_body` may show `<img>` only from the homeserver's own media
//! (`mxc://` URIs), which would mean downloading each photo and uploading it to the user's
//! homeserver. Notifio fetches nothing but search pages, so a listing's photo is a "Photo" link
//! under its facts (and its URL in the plain `body`); clients that preview links show it.
//!
//! The transaction id is made of the outbox row's id (and its creation time, so a state
//! directory started afresh never reuses one): a retried send is the same transaction, which
//! the homeserver does not post twice. A 429 (`M_LIMIT_EXCEEDED`) says how long to wait in
//! `retry_after_ms`; 401/403 (`M_UNKNOWN_TOKEN`, `M_FORBIDDEN`) are permanent.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{details, escape, found_by, pack, picture, title, truncate};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use http::Method;
use http::header;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::json;
use std::time::Duration;

/// Largest `formatted_body` of one event, in bytes (events are capped at 64 KiB in all).
pub const MAX_EVENT_HTML: usize = 24 * 1024;

pub(crate) struct Matrix {
    base: String,
    room: String,
    token: Secret,
}

impl Matrix {
    pub(crate) fn new(homeserver: &str, room: &str, token: Secret) -> Self {
        Self {
            base: homeserver.trim_end_matches('/').to_owned(),
            room: room.to_owned(),
            token,
        }
    }
}

/// `(body, formatted_body)` pairs for `n`.
pub(crate) fn events(n: &Notification, msg: &Message) -> Vec<(String, String)> {
    let Some((site, searches, listings)) = n.listings() else {
        let html = msg
            .text
            .lines()
            .map(escape)
            .collect::<Vec<_>>()
            .join("<br>");
        return vec![(
            format!("{}\n{}", msg.subject, msg.text),
            format!("<b>{}</b><br>{html}", escape(&msg.subject)),
        )];
    };
    let blocks: Vec<String> = listings
        .iter()
        .map(|l| {
            let name = escape(&truncate(title(l), 300));
            let head = match l.url.as_deref().filter(|u| is_web(u)) {
                Some(u) => format!("<a href=\"{}\">{name}</a>", escape(u)),
                None => name,
            };
            let mut details: Vec<String> = details(n, l).iter().map(|d| escape(d)).collect();
            if let Some(photo) = picture(l) {
                details.push(format!("<a href=\"{}\">Photo</a>", escape(&photo)));
            }
            format!("<li><b>{head}</b><br>{}</li>", details.join("<br>"))
        })
        .collect();
    let head = format!(
        "<p><b>{}</b><br>{}</p>",
        escape(&msg.subject),
        escape(&found_by(site, searches))
    );
    let shorten = |b: &str| format!("<li>{}</li>", escape(&truncate(b, 1000)));
    let parts = pack(head, blocks, MAX_EVENT_HTML, str::len, &shorten);
    let mut texts = Vec::with_capacity(parts.len());
    // The plain body of each event holds the same listings as its HTML.
    let mut rest = listings.iter();
    for p in parts {
        let mut plain = if texts.is_empty() {
            format!("{}\n{}\n", msg.subject, found_by(site, searches))
        } else {
            String::new()
        };
        for _ in 0..p.matches("<li>").count() {
            if let Some(l) = rest.next() {
                plain.push_str(&format!("\n* {}\n", title(l)));
                for line in details(n, l) {
                    plain.push_str(&format!("  {line}\n"));
                }
                if let Some(u) = &l.url {
                    plain.push_str(&format!("  {u}\n"));
                }
                if let Some(photo) = picture(l) {
                    plain.push_str(&format!("  Photo: {photo}\n"));
                }
            }
        }
        texts.push((plain, p.replacen("<li>", "<ul><li>", 1) + "</ul>"));
    }
    texts
}

/// The transaction id of part `part` (1-based) of row `d`.
pub(crate) fn txn_id(d: &Delivery, part: usize) -> String {
    format!("notifio.{}.{}.{part}", d.id, d.created_at)
}

impl Service for Matrix {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Matrix
    }

    fn calls(&self, n: &Notification, msg: &Message, d: &Delivery) -> Vec<Call> {
        let room = utf8_percent_encode(&self.room, NON_ALPHANUMERIC);
        events(n, msg)
            .into_iter()
            .enumerate()
            .map(|(i, (body, html))| {
                let url = format!(
                    "{}/_matrix/client/v3/rooms/{room}/send/m.room.message/{}",
                    self.base,
                    utf8_percent_encode(&txn_id(d, i + 1), NON_ALPHANUMERIC)
                );
                Call::json(
                    Method::PUT,
                    url,
                    &json!({
                        "msgtype": "m.text",
                        "body": body,
                        "format": "org.matrix.custom.html",
                        "formatted_body": html,
                    }),
                )
                .header(
                    header::AUTHORIZATION,
                    format!("Bearer {}", self.token.expose()),
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
            .get("retry_after_ms")?
            .as_u64()
            .map(Duration::from_millis)
    }

    fn description(&self, body: Option<&serde_json::Value>, _text: &str) -> Option<String> {
        let b = body?;
        let code = b.get("errcode").and_then(serde_json::Value::as_str)?;
        let error = b
            .get("error")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        Some(format!("{code} {error}").trim().to_owned())
    }
}
