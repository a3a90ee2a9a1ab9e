//! ntfy: a POST of the plain text to the topic URL (`https://ntfy.sh/my-flat-topic`), with the
//! subject as `Title`, the first listing's link as `Click`, a `Tags` emoji and the first
//! listing's photo as `Attach` and `Icon` (by URL: ntfy's apps load it, the server never
//! fetches it; a server that refuses them with a 400 gets the part again without them). A
//! non-ASCII title is sent as an RFC 2047 encoded word, which ntfy decodes; an access token goes in `Authorization: Bearer`. A message over ntfy's
//! 4,096 bytes would arrive as a file, so longer ones are split between listings.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{details, found_by, pack, picture, title, truncate};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use base64::Engine as _;
use http::Method;
use http::header::{self, HeaderName};

/// Largest message body ntfy shows as text, in bytes.
pub const MAX_MESSAGE: usize = 4096;

pub(crate) struct Ntfy {
    url: String,
    token: Option<Secret>,
}

impl Ntfy {
    pub(crate) fn new(url: &Secret, token: Option<Secret>) -> Self {
        Self {
            url: url.expose().to_owned(),
            token,
        }
    }
}

/// A header value as ntfy reads it: as is when printable ASCII, else an RFC 2047 encoded word.
pub(crate) fn header_text(s: &str) -> String {
    let s: String = s.chars().filter(|c| !c.is_control()).collect();
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        s
    } else {
        format!(
            "=?UTF-8?B?{}?=",
            base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
        )
    }
}

/// A URL fit for a header: http(s) and printable ASCII (a serialized URL always is).
fn header_url(u: &str) -> Option<String> {
    (is_web(u) && u.bytes().all(|b| (0x21..0x7f).contains(&b))).then(|| u.to_owned())
}

/// The message bodies for `n`, each at most [`MAX_MESSAGE`] bytes.
pub(crate) fn texts(n: &Notification, msg: &Message) -> Vec<String> {
    let shorten = |b: &str| truncate(b, MAX_MESSAGE / 4);
    match n.listings() {
        Some((site, searches, listings)) => {
            let blocks = listings
                .iter()
                .map(|l| {
                    let mut b = format!("\n* {}\n", title(l));
                    for line in details(n, l) {
                        b.push_str(&format!("  {line}\n"));
                    }
                    if let Some(u) = &l.url {
                        b.push_str(&format!("  {u}\n"));
                    }
                    b
                })
                .collect();
            pack(
                format!("{}\n", found_by(site, searches)),
                blocks,
                MAX_MESSAGE,
                str::len,
                &shorten,
            )
        }
        _ => vec![truncate(&msg.text, MAX_MESSAGE / 4)],
    }
}

impl Service for Ntfy {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Ntfy
    }

    fn calls(&self, n: &Notification, msg: &Message, _d: &Delivery) -> Vec<Call> {
        let (tags, click, attach) = match n.listings() {
            Some((_, _, listings)) => (
                if matches!(n, Notification::PriceChanged { .. }) {
                    "chart_with_downwards_trend"
                } else {
                    "house"
                },
                listings
                    .iter()
                    .find_map(|l| l.url.as_deref().and_then(header_url)),
                listings
                    .iter()
                    .find_map(|l| picture(l).as_deref().and_then(header_url)),
            ),
            None if matches!(n, Notification::Heartbeat { .. }) => ("white_check_mark", None, None),
            None => ("warning", None, None),
        };
        let parts = texts(n, msg);
        let total = parts.len();
        parts
            .into_iter()
            .enumerate()
            .map(|(i, text)| {
                let title = if total > 1 {
                    format!("{} ({}/{total})", msg.subject, i + 1)
                } else {
                    msg.subject.clone()
                };
                let mut headers: Vec<(HeaderName, String)> = vec![
                    (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
                    (HeaderName::from_static("title"), header_text(&title)),
                    (HeaderName::from_static("tags"), tags.to_owned()),
                ];
                if let Some(c) = &click {
                    headers.push((HeaderName::from_static("click"), c.clone()));
                }
                if let Some(t) = &self.token {
                    headers.push((header::AUTHORIZATION, format!("Bearer {}", t.expose())));
                }
                let outgoing = crate::fetch::Outgoing {
                    method: Method::POST,
                    headers,
                    body: text.into(),
                };
                match (i, &attach) {
                    (0, Some(photo)) => {
                        let mut pictured = outgoing.clone();
                        // The photo as the attachment ntfy's apps show under the text, and
                        // as the notification's icon, so the flat is seen in the list too.
                        pictured.headers.extend([
                            (HeaderName::from_static("attach"), photo.clone()),
                            (HeaderName::from_static("icon"), photo.clone()),
                        ]);
                        Call::new(self.url.clone(), pictured)
                            .or_without_pictures(Call::new(self.url.clone(), outgoing))
                    }
                    _ => Call::new(self.url.clone(), outgoing),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_outside_ascii_become_encoded_words() {
        assert_eq!(header_text("3 new listings"), "3 new listings");
        assert_eq!(
            header_text("1 new listing — Zürich"),
            "=?UTF-8?B?MSBuZXcgbGlzdGluZyDigJQgWsO8cmljaA==?="
        );
        assert_eq!(header_url("https://x.example/a b"), None);
        assert_eq!(header_url("javascript:alert(1)"), None);
    }
}
