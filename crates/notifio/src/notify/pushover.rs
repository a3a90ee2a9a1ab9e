//! Pushover: `POST {api}/1/messages.json`, form-encoded, with the application `token` and the
//! `user` key. A message holds at most 1,024 characters (HTML: `html=1`), so a notification of
//! many listings becomes several; each links its first listing (`url`, at most 512 characters).
//! Pushover answers errors as `{"status":0,"errors":[…]}`: a 4xx (a bad token or user key) is
//! permanent; a 429 means the month's quota is spent, and waits on the ladder.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{details, escape, found_by, pack, title, truncate};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use crate::fetch::Outgoing;
use http::Method;
use http::header;

/// Largest message, in characters.
pub const MAX_MESSAGE: usize = 1024;

pub(crate) struct Pushover {
    url: String,
    user: Secret,
    token: Secret,
}

impl Pushover {
    pub(crate) fn new(api: &str, user: Secret, token: Secret) -> Self {
        Self {
            url: format!("{}/1/messages.json", api.trim_end_matches('/')),
            user,
            token,
        }
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// The HTML messages for `n` with the link each one opens.
pub(crate) fn messages(n: &Notification, msg: &Message) -> Vec<(String, Option<String>)> {
    let shorten = |b: &str| escape(&truncate(b, MAX_MESSAGE / 6));
    let Some((site, searches, listings)) = n.listings() else {
        return vec![(escape(&truncate(&msg.text, MAX_MESSAGE / 6)), None)];
    };
    let blocks: Vec<String> = listings
        .iter()
        .map(|l| {
            let name = escape(&truncate(title(l), 200));
            let head = match l.url.as_deref().filter(|u| is_web(u) && u.len() <= 512) {
                Some(u) => format!("<a href=\"{}\">{name}</a>", escape(u)),
                None => name,
            };
            format!("\n<b>{head}</b>\n{}\n", escape(&details(n, l).join("\n")))
        })
        .collect();
    let parts = pack(
        format!("{}\n", escape(&found_by(site, searches))),
        blocks,
        MAX_MESSAGE,
        chars,
        &shorten,
    );
    parts
        .into_iter()
        .map(|p| {
            let link = listings
                .iter()
                .filter_map(|l| l.url.as_deref())
                .find(|u| p.contains(&format!("href=\"{}\"", escape(u))))
                .map(str::to_owned);
            (p, link)
        })
        .collect()
}

impl Service for Pushover {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Pushover
    }

    fn calls(&self, n: &Notification, msg: &Message, _d: &Delivery) -> Vec<Call> {
        messages(n, msg)
            .into_iter()
            .map(|(text, link)| {
                let mut form = url::form_urlencoded::Serializer::new(String::new());
                form.append_pair("token", self.token.expose())
                    .append_pair("user", self.user.expose())
                    .append_pair("title", &truncate(&msg.subject, 250))
                    .append_pair("message", &text)
                    .append_pair("html", "1");
                if let Some(link) = link {
                    form.append_pair("url", &link)
                        .append_pair("url_title", "Open the listing");
                }
                Call {
                    url: self.url.clone(),
                    outgoing: Outgoing {
                        method: Method::POST,
                        headers: vec![
                            (
                                header::CONTENT_TYPE,
                                "application/x-www-form-urlencoded".to_owned(),
                            ),
                            (header::ACCEPT, "application/json".to_owned()),
                        ],
                        body: form.finish().into(),
                    },
                    plain: None,
                }
            })
            .collect()
    }

    fn accepted(&self, body: Option<&serde_json::Value>) -> bool {
        body.and_then(|b| b.get("status"))
            .and_then(serde_json::Value::as_i64)
            .is_none_or(|s| s == 1)
    }

    fn description(&self, body: Option<&serde_json::Value>, _text: &str) -> Option<String> {
        let errors = body?.get("errors")?.as_array()?;
        let words: Vec<&str> = errors
            .iter()
            .filter_map(serde_json::Value::as_str)
            .collect();
        (!words.is_empty()).then(|| words.join("; "))
    }
}
