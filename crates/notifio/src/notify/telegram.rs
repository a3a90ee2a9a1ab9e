//! Telegram: a bot's `sendMessage` in HTML parse mode, or the listings' photos with the same
//! text as their caption.
//!
//! A message holds at most 4096 characters, so a notification of many listings becomes several
//! messages, split between listings (never inside a tag: each listing's markup is one block).
//! When the listings have photos and the whole text fits a caption (1,024 characters), it goes
//! as `sendPhoto` (one photo) or `sendMediaGroup` (2–10, the caption on the first): the user sees
//! the flat at a glance. A longer text goes as text alone, never cut to fit. Telegram fetches
//! the photos itself, and refuses the message (a 400: "wrong file identifier/HTTP URL
//! specified", "failed to get HTTP URL content", …) when it cannot use one: the same text then
//! goes by `sendMessage`, so a broken photo never costs the message.
//! A 429 says how long to wait in `parameters.retry_after`; 400 "chat not found" (to the text:
//! a 400 to photos sends the text first), 401 (a bad token) and 403 (the bot was blocked or
//! removed) are permanent, and a 401/403 to photos is never tried again as text.

use super::http::{Call, Service};
use super::message::is_web;
use super::message::{details, escape, found_by, pack, pictures, title, truncate};
use super::{ChannelKind, Delivery, Message, Notification, Secret};
use http::Method;
use std::time::Duration;

/// Largest message text, in UTF-16 code units as Telegram counts them.
pub const MAX_MESSAGE: usize = 4096;
/// Largest photo caption, in UTF-16 code units.
pub const MAX_CAPTION: usize = 1024;
/// Photos in one media group (Telegram takes 2 to 10).
pub const MAX_ALBUM: usize = 10;

/// One message to the chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Post {
    /// Text alone (`sendMessage`).
    Text(String),
    /// Photos (1 to [`MAX_ALBUM`]) with the text as their caption (`sendPhoto`,
    /// `sendMediaGroup`); the same text is what goes if Telegram refuses them.
    Photos {
        /// The photos' URLs.
        photos: Vec<String>,
        /// HTML whose text is at most [`MAX_CAPTION`] long.
        caption: String,
    },
}

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

/// A caption's length as Telegram limits it: its text after the markup is parsed (a link's
/// URL does not count), in UTF-16 code units.
fn caption_len(html: &str) -> usize {
    utf16_len(&strip_tags(html))
}

/// The messages for `n`: its listings' photos captioned with the whole text when it fits a
/// caption, else [`texts`].
pub(crate) fn posts(n: &Notification, msg: &Message) -> Vec<Post> {
    let mut texts = texts(n, msg);
    let mut photos = n
        .listings()
        .map(|(_, _, listings)| pictures(listings))
        .unwrap_or_default();
    photos.truncate(MAX_ALBUM);
    match texts.as_slice() {
        [caption] if !photos.is_empty() && caption_len(caption) <= MAX_CAPTION => {
            vec![Post::Photos {
                photos,
                caption: texts.remove(0),
            }]
        }
        _ => texts.into_iter().map(Post::Text).collect(),
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

/// A media group's items: one photo each, the caption on the first (Telegram shows it for the
/// group).
fn album(photos: &[String], caption: &str) -> Vec<serde_json::Value> {
    photos
        .iter()
        .enumerate()
        .map(|(i, photo)| {
            let mut item = serde_json::json!({"type": "photo", "media": photo});
            if i == 0 {
                item["caption"] = caption.into();
                item["parse_mode"] = "HTML".into();
            }
            item
        })
        .collect()
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
        let method = |name: &str| format!("{}/bot{}/{name}", self.api, self.token.expose());
        let text = |text: &str| {
            Call::json(
                Method::POST,
                method("sendMessage"),
                &serde_json::json!({
                    "chat_id": self.chat_id,
                    "text": text,
                    "parse_mode": "HTML",
                }),
            )
        };
        posts(n, msg)
            .into_iter()
            .map(|post| match post {
                Post::Text(t) => text(&t),
                Post::Photos { photos, caption } => {
                    let pictured = match photos.as_slice() {
                        [photo] => Call::json(
                            Method::POST,
                            method("sendPhoto"),
                            &serde_json::json!({
                                "chat_id": self.chat_id,
                                "photo": photo,
                                "caption": caption,
                                "parse_mode": "HTML",
                            }),
                        ),
                        _ => Call::json(
                            Method::POST,
                            method("sendMediaGroup"),
                            &serde_json::json!({
                                "chat_id": self.chat_id,
                                "media": album(&photos, &caption),
                            }),
                        ),
                    };
                    pictured.or_without_pictures(text(&caption))
                }
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

    fn flats(count: usize, title: &str) -> Notification {
        Notification::NewListings {
            site: "portal.example".into(),
            searches: vec!["Madrid".into()],
            listings: (0..count)
                .map(|i| Listing {
                    id: i.to_string(),
                    title: Some(format!("{title} {i}")),
                    price: Some(1000.0),
                    currency: Some("EUR".into()),
                    url: Some(format!("https://portal.example/{i}")),
                    image: Some(format!("https://img.portal.example/{i}.jpg")),
                    ..Listing::default()
                })
                .collect(),
            found_at: 0,
            also_on: Vec::new(),
        }
    }

    /// The requests for `n`: (method name, JSON body, and the fallback's) per part.
    fn requests(n: &Notification) -> Vec<(String, serde_json::Value, Option<serde_json::Value>)> {
        let tg = Telegram::new("http://127.0.0.1:1", Secret::new("1:tok"), "42");
        let d = Delivery {
            id: 1,
            created_at: 0,
            parts_sent: 0,
            now_ms: 0,
        };
        let body = |c: &Call| serde_json::from_slice(&c.outgoing.body).unwrap();
        tg.calls(n, &super::super::render(n), &d)
            .iter()
            .map(|c| {
                let method = c.url.rsplit('/').next().unwrap().to_owned();
                let plain = c.plain.as_deref().map(|p| {
                    assert!(p.url.ends_with("/sendMessage"));
                    body(p)
                });
                (method, body(c), plain)
            })
            .collect()
    }

    #[test]
    fn one_photo_goes_as_send_photo_with_the_text_as_caption_and_fallback() {
        let n = flats(1, "Sunny <flat> &");
        let text = texts(&n, &super::super::render(&n)).concat();
        let r = requests(&n);
        assert_eq!(r.len(), 1);
        let (method, body, plain) = &r[0];
        assert_eq!(method, "sendPhoto");
        assert_eq!(body["photo"], "https://img.portal.example/0.jpg");
        assert_eq!(body["caption"], text.as_str());
        assert_eq!(body["parse_mode"], "HTML");
        assert_eq!(body["chat_id"], "42");
        assert!(text.contains("Sunny &lt;flat&gt; &amp; 0"), "{text}");
        let plain = plain.as_ref().unwrap();
        assert_eq!(plain["text"], text.as_str());
        assert_eq!(plain["parse_mode"], "HTML");
    }

    #[test]
    fn several_photos_are_one_album_of_at_most_10_with_the_caption_on_the_first() {
        let n = flats(3, "Flat");
        let r = requests(&n);
        let (method, body, plain) = &r[0];
        assert_eq!((r.len(), method.as_str()), (1, "sendMediaGroup"));
        let media = body["media"].as_array().unwrap();
        assert_eq!(media.len(), 3);
        assert_eq!(media[0]["type"], "photo");
        assert_eq!(media[2]["media"], "https://img.portal.example/2.jpg");
        assert_eq!(media[0]["parse_mode"], "HTML");
        assert_eq!(media[0]["caption"], plain.as_ref().unwrap()["text"]);
        assert!(media[1].get("caption").is_none());
        // 12 short listings fit one caption (links do not count); the album shows 10 photos.
        let n = flats(12, "F");
        let Post::Photos { photos, caption } = &posts(&n, &super::super::render(&n))[0] else {
            panic!("12 short listings fit a caption");
        };
        assert_eq!(photos.len(), MAX_ALBUM);
        assert!(caption.contains("F 11"));
        let r = requests(&n);
        assert_eq!(r[0].1["media"].as_array().unwrap().len(), 10);
    }

    #[test]
    fn a_text_too_long_for_a_caption_goes_as_text_uncut() {
        for count in [1, 5, 15, 60] {
            let n = flats(count, &"spacious ".repeat(10));
            let msg = super::super::render(&n);
            let texts = texts(&n, &msg);
            let posts = posts(&n, &msg);
            for p in &posts {
                if let Post::Photos { caption, photos } = p {
                    assert!(caption_len(caption) <= MAX_CAPTION, "{count}");
                    assert!((1..=MAX_ALBUM).contains(&photos.len()));
                    assert_eq!(texts, [caption.as_str()], "the caption is the whole text");
                }
            }
            if caption_len(&texts.concat()) > MAX_CAPTION {
                assert_eq!(posts, texts.into_iter().map(Post::Text).collect::<Vec<_>>());
            } else {
                assert!(matches!(posts[..], [Post::Photos { .. }]), "{count}");
            }
        }
        assert!(
            matches!(requests(&flats(15, &"spacious ".repeat(10)))[0], (ref m, _, None) if m == "sendMessage")
        );
    }

    #[test]
    fn a_caption_counts_its_text_not_its_markup() {
        let html = "<b><a href=\"https://portal.example/a-very-long-link\">Flat &amp; co</a></b>\n";
        assert_eq!(caption_len(html), "Flat & co\n".len());
        assert_eq!(caption_len("<b>Zürich 🏠</b>"), 9, "UTF-16 code units");
    }

    #[test]
    fn only_web_photos_are_sent_escaped_as_urls() {
        let with = |image: &str| {
            let mut n = flats(1, "A");
            if let Notification::NewListings { listings, .. } = &mut n {
                listings[0].image = Some(image.into());
            }
            n
        };
        for bad in [
            "javascript:alert(1)",
            "data:image/png;base64,AAAA",
            "/relative.jpg",
            "https://user:pw@img.example/a.jpg",
        ] {
            let r = requests(&with(bad));
            assert_eq!(r[0].0, "sendMessage", "{bad}");
            assert!(r[0].2.is_none());
        }
        let r = requests(&with("https://img.example/a b\"<x>.jpg"));
        assert_eq!(r[0].1["photo"], "https://img.example/a%20b%22%3Cx%3E.jpg");
    }

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
