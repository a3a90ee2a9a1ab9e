//! Gotify: `POST {server}/message` with the application token in `X-Gotify-Key`, the body as
//! Markdown (`client::display`) and the first listing's link as the notification's click URL
//! (`client::notification`). One message per notification: Gotify sets no length limit.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{details, found_by, title};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use http::Method;
use http::header::HeaderName;
use serde_json::json;

pub(crate) struct Gotify {
    url: String,
    token: Secret,
}

impl Gotify {
    pub(crate) fn new(url: &str, token: Secret) -> Self {
        Self {
            url: format!("{}/message", url.trim_end_matches('/')),
            token,
        }
    }
}

/// Markdown's special characters, backslash-escaped (listing titles come from sites).
pub(crate) fn md(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\`*_{}[]()<>#+-.!|~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The Markdown text of `n`.
pub(crate) fn markdown(n: &Notification, msg: &Message) -> String {
    let Some((site, searches, listings)) = n.listings() else {
        return md(&msg.text);
    };
    let mut out = md(&found_by(site, searches));
    out.push('\n');
    for l in listings {
        let name = md(title(l));
        match l.url.as_deref().filter(|u| is_web(u)) {
            Some(u) => out.push_str(&format!("\n**[{name}]({})**", u.replace(')', "%29"))),
            None => out.push_str(&format!("\n**{name}**")),
        }
        for line in details(n, l) {
            out.push_str(&format!("  \n{}", md(&line)));
        }
        out.push('\n');
    }
    out
}

impl Service for Gotify {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Gotify
    }

    fn calls(&self, n: &Notification, msg: &Message, _d: &Delivery) -> Vec<Call> {
        let mut extras = json!({"client::display": {"contentType": "text/markdown"}});
        if let Some((_, _, listings)) = n.listings()
            && let Some(u) = listings
                .iter()
                .find_map(|l| l.url.as_deref().filter(|u| is_web(u)))
        {
            extras["client::notification"] = json!({"click": {"url": u}});
        }
        let body = json!({
            "title": msg.subject,
            "message": markdown(n, msg),
            "priority": 5,
            "extras": extras,
        });
        vec![
            Call::json(Method::POST, self.url.clone(), &body)
                .header(HeaderName::from_static("x-gotify-key"), self.token.expose()),
        ]
    }
}
