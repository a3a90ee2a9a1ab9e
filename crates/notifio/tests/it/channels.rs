//! The notification channels of issue 26 against small fakes of each service: real HTTP
//! servers on 127.0.0.1 that record every request and answer as each test scripts. Each test
//! asserts the exact request a service receives (method, path, headers, JSON or form fields,
//! limits). Time is the sender's `now` parameter wherever a wait is asserted; the one real wait
//! (a hanging service) is bounded at 1.8 s.

use crate::util::{Answer, Fake, answer, fast_ladder, fast_retry};
use notifio::config::{Config, Environment, ServiceSettings, parse_in};
use notifio::listing::Listing;
use notifio::notify::{ChannelName, Channels, Notification, Sender, outbox};
use notifio_policy::BackoffPolicy;
use rusqlite::Connection;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- helpers

const SEARCH: &str =
    "[[search]]\nname = \"Madrid under 1200\"\nurl = \"https://www.idealista.com/x\"\n";

/// The config `notify` (a `[notify]` body) in `dir`, with ms-scale notify retries.
fn config(dir: &Path, notify: &str) -> Config {
    let text = format!(
        "[watch]\nstate_dir = {:?}\n[retry.notify]\ninitial = \"5ms\"\ntimeout = \"2s\"\ndeadline = \"5s\"\n[notify]\n{notify}\n{SEARCH}",
        dir.display()
    );
    let env = Environment {
        home: Some(dir.to_path_buf()),
        data_dir: Some(dir.to_path_buf()),
        config_dir: None,
        dashboard_token: None,
        browser: None,
    };
    parse_in(&text, &dir.join("notifio.toml"), &env).unwrap()
}

fn channels(cfg: &Config) -> Channels {
    Channels::from_config_with_env(cfg, &|_| None).unwrap()
}

fn listing(id: &str, title: &str, price: f64) -> Listing {
    Listing {
        id: id.into(),
        title: Some(title.into()),
        price: Some(price),
        currency: Some("EUR".into()),
        rooms: Some(2.0),
        area_m2: Some(64.0),
        url: Some(format!("https://portal.example/listing/{id}")),
        image: Some(format!("https://img.portal.example/{id}.jpg")),
        description: None,
        fallback: Vec::new(),
    }
}

fn new_listings(listings: Vec<Listing>) -> Notification {
    Notification::NewListings {
        site: "portal.example".into(),
        searches: vec!["Madrid under 1200".into()],
        listings,
        found_at: 1_700_000_000_000,
        also_on: Vec::new(),
    }
}

/// A state directory with the store's schema, and its database path.
fn state(dir: &Path) -> PathBuf {
    drop(notifio::store::Store::open(dir).unwrap());
    notifio::store::Store::file_in(dir)
}

fn enqueue(db: &Path, n: &Notification, channels: &[ChannelName], now: u64) {
    let mut conn = Connection::open(db).unwrap();
    let tx = conn.transaction().unwrap();
    outbox::enqueue(&tx, n, channels, now).unwrap();
    tx.commit().unwrap();
}

fn sender(db: &Path, channels: Channels) -> Sender {
    Sender::new(db.to_path_buf(), channels, fast_retry(), fast_ladder())
}

fn outbox_dump(db: &Path) -> String {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn.prepare("SELECT * FROM outbox").unwrap();
    let cols = stmt.column_count();
    let mut out = String::new();
    let mut rows = stmt.query([]).unwrap();
    while let Some(row) = rows.next().unwrap() {
        for i in 0..cols {
            let v: rusqlite::types::Value = row.get(i).unwrap();
            out.push_str(&format!("{v:?}|"));
        }
        out.push('\n');
    }
    out
}

const TG_OK: &str = r#"{"ok":true,"result":{"message_id":1}}"#;

// ---------------------------------------------------------------- every service, exactly

#[tokio::test]
async fn a_new_listing_reaches_each_service_once_with_its_link() {
    let dir = tempfile::tempdir().unwrap();
    let tg = Fake::start(answer(200, TG_OK)).await;
    let dc = Fake::start(answer(200, r#"{"id":"1"}"#)).await;
    let sl = Fake::start(Answer {
        headers: vec![("content-type", "text/plain".into())],
        ..answer(200, "ok")
    })
    .await;
    let nt = Fake::start(answer(200, r#"{"id":"x"}"#)).await;
    let go = Fake::start(answer(200, r#"{"id":1}"#)).await;
    let po = Fake::start(answer(200, r#"{"status":1,"request":"r"}"#)).await;
    // The homeserver fails three times (the fetcher's three attempts), then accepts: every
    // attempt carries the same transaction id, so the room gets the message once.
    let mx = Fake::start(answer(502, "{}")).await;
    mx.then(answer(502, "{}"))
        .then(answer(502, "{}"))
        .then(answer(200, r#"{"event_id":"$e"}"#));
    let notify = format!(
        r#"telegram = {{ token = "123456:TG-secret", chat_id = "-1001234567890", api = "{tg}" }}
discord = {{ url = "{dc}/api/webhooks/42/dc-secret" }}
slack = {{ url = "{sl}/services/T0/B0/sl-secret" }}
ntfy = {{ url = "{nt}/flats-secret", token = "tk_ntfy" }}
gotify = {{ url = "{go}", token = "go-secret" }}
pushover = {{ user = "u-key", token = "po-secret", api = "{po}" }}
matrix = {{ homeserver = "{mx}", room = "!room:example.org", token = "mx-secret" }}"#,
        tg = tg.url,
        dc = dc.url,
        sl = sl.url,
        nt = nt.url,
        go = go.url,
        po = po.url,
        mx = mx.url
    );
    let cfg = config(dir.path(), &notify);
    let ch = channels(&cfg);
    let names: Vec<String> = ch.names().iter().map(|n| n.to_string()).collect();
    assert_eq!(
        names,
        [
            "telegram", "discord", "slack", "ntfy", "gotify", "pushover", "matrix"
        ]
    );
    let db = state(dir.path());
    let n = new_listings(vec![listing("101", "Sunny flat — Lavapiés", 1150.0)]);
    enqueue(&db, &n, &ch.names(), 1000);
    let mut s = sender(&db, ch);
    let r = s.drain_once(1000).await.unwrap();
    assert_eq!((r.sent, r.failed), (6, 1), "all but the failing homeserver");
    let r = s.drain_once(r.next_attempt_at.unwrap()).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 0));
    let link = "https://portal.example/listing/101";

    let photo = "https://img.portal.example/101.jpg";

    // The listing has a photo and the text fits a caption: the photo, captioned.
    let t = &tg.hits()[..];
    assert_eq!(t.len(), 1);
    assert_eq!(
        (t[0].method.as_str(), t[0].path.as_str()),
        ("POST", "/bot123456:TG-secret/sendPhoto")
    );
    assert_eq!(t[0].header("content-type"), Some("application/json"));
    assert!(t[0].header("user-agent").unwrap().starts_with("notifio/"));
    let j = t[0].json();
    println!("telegram: {j}");
    assert_eq!(j["chat_id"], "-1001234567890");
    assert_eq!(j["parse_mode"], "HTML");
    assert_eq!(j["photo"], photo);
    let text = j["caption"].as_str().unwrap();
    assert!(text.encode_utf16().count() <= 1024);
    assert!(text.starts_with("<b>1 new listing — Madrid under 1200</b>\nFound on portal.example by the search Madrid under 1200."), "{text}");
    assert!(
        text.contains(&format!(
            "<b><a href=\"{link}\">Sunny flat — Lavapiés</a></b>\n1,150 € · 2 rooms · 64 m²"
        )),
        "{text}"
    );

    let d = &dc.hits()[..];
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].method.as_str(), d[0].path.as_str()),
        ("POST", "/api/webhooks/42/dc-secret?wait=true")
    );
    let j = d[0].json();
    println!("discord: {j}");
    assert_eq!(
        j["content"],
        "**1 new listing — Madrid under 1200**\nFound on portal.example by the search Madrid under 1200."
    );
    assert_eq!(j["embeds"].as_array().unwrap().len(), 1);
    assert_eq!(j["embeds"][0]["title"], "Sunny flat — Lavapiés");
    assert_eq!(j["embeds"][0]["url"], link);
    assert_eq!(j["embeds"][0]["description"], "1,150 € · 2 rooms · 64 m²");
    assert_eq!(
        j["embeds"][0]["thumbnail"]["url"],
        "https://img.portal.example/101.jpg"
    );
    assert_eq!(j["allowed_mentions"]["parse"], serde_json::json!([]));

    let sh = &sl.hits()[..];
    assert_eq!(sh.len(), 1);
    assert_eq!(
        (sh[0].method.as_str(), sh[0].path.as_str()),
        ("POST", "/services/T0/B0/sl-secret")
    );
    let j = sh[0].json();
    println!("slack: {j}");
    assert_eq!(j["text"], "1 new listing — Madrid under 1200");
    assert_eq!(j["blocks"][0]["type"], "header");
    assert_eq!(
        j["blocks"][0]["text"]["text"],
        "1 new listing — Madrid under 1200"
    );
    assert_eq!(j["blocks"][2]["text"]["type"], "mrkdwn");
    assert_eq!(
        j["blocks"][2]["text"]["text"],
        format!("*<{link}|Sunny flat — Lavapiés>*\n1,150 € · 2 rooms · 64 m²")
    );
    assert_eq!(j["blocks"][2]["accessory"]["type"], "image");
    assert_eq!(j["blocks"][2]["accessory"]["image_url"], photo);
    assert_eq!(
        j["blocks"][2]["accessory"]["alt_text"],
        "Photo: Sunny flat — Lavapiés"
    );

    let nh = &nt.hits()[..];
    assert_eq!(nh.len(), 1);
    assert_eq!(
        (nh[0].method.as_str(), nh[0].path.as_str()),
        ("POST", "/flats-secret")
    );
    println!("ntfy: {:?}\n{}", nh[0].headers, nh[0].body);
    // The subject has an em dash: an RFC 2047 encoded word, which ntfy decodes.
    assert_eq!(
        nh[0].header("title"),
        Some("=?UTF-8?B?MSBuZXcgbGlzdGluZyDigJQgTWFkcmlkIHVuZGVyIDEyMDA=?=")
    );
    assert_eq!(nh[0].header("click"), Some(link));
    assert_eq!(nh[0].header("tags"), Some("house"));
    assert_eq!(
        nh[0].header("attach"),
        Some("https://img.portal.example/101.jpg")
    );
    assert_eq!(
        nh[0].header("icon"),
        Some("https://img.portal.example/101.jpg"),
        "the photo is the notification's icon too"
    );
    assert_eq!(nh[0].header("authorization"), Some("Bearer tk_ntfy"));
    assert!(nh[0].body.contains(&format!(
        "* Sunny flat — Lavapiés\n  1,150 € · 2 rooms · 64 m²\n  {link}\n"
    )));

    let gh = &go.hits()[..];
    assert_eq!(gh.len(), 1);
    assert_eq!(
        (gh[0].method.as_str(), gh[0].path.as_str()),
        ("POST", "/message")
    );
    assert_eq!(gh[0].header("x-gotify-key"), Some("go-secret"));
    let j = gh[0].json();
    println!("gotify: {j}");
    assert_eq!(j["title"], "1 new listing — Madrid under 1200");
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains(&format!("**[Sunny flat — Lavapiés]({link})**"))
    );
    assert_eq!(
        j["extras"]["client::display"]["contentType"],
        "text/markdown"
    );
    assert_eq!(j["extras"]["client::notification"]["click"]["url"], link);

    let ph = &po.hits()[..];
    assert_eq!(ph.len(), 1);
    assert_eq!(
        (ph[0].method.as_str(), ph[0].path.as_str()),
        ("POST", "/1/messages.json")
    );
    assert_eq!(
        ph[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    let form = ph[0].form();
    println!("pushover: {form:?}");
    let field = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(field("token"), Some("po-secret"));
    assert_eq!(field("user"), Some("u-key"));
    assert_eq!(field("title"), Some("1 new listing — Madrid under 1200"));
    assert_eq!(field("html"), Some("1"));
    assert_eq!(field("url"), Some(link));
    assert!(
        field("message")
            .unwrap()
            .contains(&format!("<a href=\"{link}\">Sunny flat — Lavapiés</a>"))
    );
    assert!(field("message").unwrap().chars().count() <= 1024);

    let m = &mx.hits()[..];
    assert_eq!(m.len(), 4);
    let txn = "/_matrix/client/v3/rooms/%21room%3Aexample%2Eorg/send/m.room.message/notifio%2E7%2E1000%2E1";
    for h in m {
        assert_eq!(
            (h.method.as_str(), h.path.as_str()),
            ("PUT", txn),
            "the same transaction every time"
        );
        assert_eq!(h.header("authorization"), Some("Bearer mx-secret"));
    }
    let j = m[3].json();
    println!("matrix: {j}");
    assert_eq!(j["msgtype"], "m.text");
    assert_eq!(j["format"], "org.matrix.custom.html");
    assert!(
        j["formatted_body"]
            .as_str()
            .unwrap()
            .contains(&format!("<a href=\"{link}\">Sunny flat — Lavapiés</a>"))
    );
    assert!(j["body"].as_str().unwrap().contains(link));
    // Matrix shows <img> only from the homeserver's media: the photo is a link.
    assert!(
        j["formatted_body"]
            .as_str()
            .unwrap()
            .contains(&format!("<br><a href=\"{photo}\">Photo</a></li>"))
    );
    assert!(
        j["body"]
            .as_str()
            .unwrap()
            .contains(&format!("  Photo: {photo}\n"))
    );
    assert!(!j["formatted_body"].as_str().unwrap().contains("<img"));
}

#[tokio::test]
async fn a_4500_character_message_splits_for_telegram_between_listings() {
    let dir = tempfile::tempdir().unwrap();
    let tg = Fake::start(answer(200, TG_OK)).await;
    let cfg = config(
        dir.path(),
        &format!(
            "telegram = {{ token = \"1:x\", chat_id = 7, api = \"{}\" }}",
            tg.url
        ),
    );
    let listings: Vec<Listing> = (0..30)
        .map(|i| {
            listing(
                &i.to_string(),
                &format!(
                    "Flat {i} <with> a long description & {}",
                    "view ".repeat(20)
                ),
                900.0,
            )
        })
        .collect();
    let n = new_listings(listings);
    let db = state(dir.path());
    let ch = channels(&cfg);
    enqueue(&db, &n, &ch.names(), 1000);
    let r = sender(&db, ch).drain_once(1000).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 0));
    let texts: Vec<String> = tg
        .hits()
        .iter()
        .map(|h| h.json()["text"].as_str().unwrap().to_owned())
        .collect();
    let total: usize = texts.iter().map(|t| t.encode_utf16().count()).sum();
    println!(
        "{} messages, {total} characters: {:?}",
        texts.len(),
        texts
            .iter()
            .map(|t| t.encode_utf16().count())
            .collect::<Vec<_>>()
    );
    assert!(total > 4500, "{total}");
    assert_eq!(texts.len(), 2);
    for t in &texts {
        assert!(t.encode_utf16().count() <= 4096);
        assert_eq!(
            t.matches("<a href=").count(),
            t.matches("</a>").count(),
            "no cut tag"
        );
        assert_eq!(
            t.matches("<b>").count(),
            t.matches("</b>").count(),
            "no cut tag"
        );
    }
    let all = texts.concat();
    for i in 0..30 {
        assert_eq!(
            all.matches(&format!("listing/{i}\"")).count(),
            1,
            "listing {i} once"
        );
    }
    assert_eq!(tg.hits()[0].json()["chat_id"], "7");
}

#[tokio::test]
async fn a_discord_429_waits_its_retry_after_and_the_others_deliver_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let tg = Fake::start(answer(200, TG_OK)).await;
    let dc = Fake::start(Answer {
        headers: vec![
            ("content-type", "application/json".into()),
            ("x-ratelimit-reset-after", "1.5".into()),
        ],
        ..answer(
            429,
            r#"{"message":"You are being rate limited.","retry_after":2.0,"global":false}"#,
        )
    })
    .await;
    dc.then(answer(200, r#"{"id":"1"}"#));
    let cfg = config(
        dir.path(),
        &format!(
            "telegram = {{ token = \"1:x\", chat_id = \"1\", api = \"{}\" }}\ndiscord = {{ url = \"{}/api/webhooks/1/t\" }}",
            tg.url, dc.url
        ),
    );
    let db = state(dir.path());
    let ch = channels(&cfg);
    enqueue(
        &db,
        &new_listings(vec![listing("1", "A", 1.0)]),
        &ch.names(),
        1000,
    );
    let mut s = sender(&db, ch);
    let r = s.drain_once(1000).await.unwrap();
    assert_eq!(
        (r.sent, r.failed),
        (1, 1),
        "telegram on time, discord told to wait"
    );
    assert_eq!(tg.hits().len(), 1);
    assert_eq!(dc.hits().len(), 1, "a 429 is not retried at once");
    assert_eq!(
        r.next_attempt_at,
        Some(3000),
        "exactly the 2 s Discord asked for"
    );
    assert_eq!(s.drain_once(2999).await.unwrap().failed, 0);
    assert_eq!(dc.hits().len(), 1, "nothing before the wait is over");
    assert!(
        outbox_dump(&db)
            .contains("discord 127.0.0.1: HTTP 429 Too Many Requests: You are being rate limited.")
    );
    let r = s.drain_once(3000).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 0));
    assert_eq!(s.drain_once(10_000).await.unwrap().sent, 0);
    assert_eq!(
        (tg.hits().len(), dc.hits().len()),
        (1, 2),
        "each delivered exactly once"
    );
}

#[tokio::test]
async fn a_hanging_service_does_not_hold_the_others_up() {
    let dir = tempfile::tempdir().unwrap();
    let tg = Fake::start(answer(200, TG_OK)).await;
    let sl = Fake::start(Answer {
        delay: Duration::from_millis(1500),
        ..answer(200, "ok")
    })
    .await;
    let cfg = config(
        dir.path(),
        &format!(
            "slack = {{ url = \"{}/s\" }}\ntelegram = {{ token = \"1:x\", chat_id = \"1\", api = \"{}\" }}",
            sl.url, tg.url
        ),
    );
    let db = state(dir.path());
    let ch = channels(&cfg);
    for i in 0..3 {
        enqueue(
            &db,
            &new_listings(vec![listing(&i.to_string(), "A", 1.0)]),
            &ch.names(),
            1000,
        );
    }
    let start = Instant::now();
    let r = sender(&db, ch).drain_once(1000).await.unwrap();
    assert_eq!(r.sent, 6);
    assert!(
        start.elapsed() >= Duration::from_millis(1800),
        "slack's three took 3 × 600 ms"
    );
    let tg_done = tg.hits().last().unwrap().at.duration_since(start);
    println!(
        "telegram's 3 messages were out after {tg_done:?}; slack answered after {:?}",
        start.elapsed()
    );
    assert!(
        tg_done < Duration::from_millis(1000),
        "telegram waited for slack: {tg_done:?}"
    );
}

#[tokio::test]
async fn a_bad_telegram_token_is_a_permanent_failure_shown_in_status() {
    let dir = tempfile::tempdir().unwrap();
    let tg = Fake::start(answer(
        401,
        r#"{"ok":false,"error_code":401,"description":"Unauthorized"}"#,
    ))
    .await;
    let mb = dir.path().join("n.mbox");
    let cfg = config(
        dir.path(),
        &format!(
            "mailbox = {mb:?}\ntelegram = {{ token = \"999:bad-token\", chat_id = \"1\", api = \"{}\" }}",
            tg.url
        ),
    );
    let db = state(dir.path());
    let ch = channels(&cfg);
    enqueue(
        &db,
        &new_listings(vec![listing("1", "A", 1.0)]),
        &ch.names(),
        1000,
    );
    let mut s = sender(&db, ch);
    let r = s.drain_once(1000).await.unwrap();
    assert_eq!(
        (r.sent, r.failed, r.held),
        (1, 1, 1),
        "the mailbox delivered, telegram refused"
    );
    enqueue(
        &db,
        &new_listings(vec![listing("2", "B", 1.0)]),
        &["telegram", "mailbox"].map(ChannelName::new),
        2000,
    );
    let r = s.drain_once(2000).await.unwrap();
    assert_eq!((r.sent, r.failed), (1, 0), "not retried, not asked again");
    assert_eq!(tg.hits().len(), 1);
    assert!(
        tg.hits()[0].path.ends_with("/sendPhoto"),
        "a bad token on a photo is not tried again as text"
    );

    let store = notifio::store::Store::open(dir.path()).unwrap();
    let view = notifio::status::build(&store, 3000, &BackoffPolicy::default()).unwrap();
    let json = serde_json::to_string(&view).unwrap();
    println!("{}", notifio::status::render_table(&view));
    let t = view.channels.iter().find(|c| c.name == "telegram").unwrap();
    assert_eq!(t.state.as_str(), "failed");
    assert_eq!((t.pending, t.failed_since), (2, Some(1000)));
    let err = t.last_error.as_deref().unwrap();
    assert!(
        err.starts_with("telegram 127.0.0.1: HTTP 401 Unauthorized: Unauthorized"),
        "{err}"
    );
    let m = view.channels.iter().find(|c| c.name == "mailbox").unwrap();
    assert_eq!((m.state.as_str(), m.sent), ("ok", 2));
    assert!(notifio::status::render_table(&view).contains("telegram         failed"));
    assert!(!json.contains("bad-token"), "{json}");
}

// ---------------------------------------------------------------- pictures

/// A `[notify]` Telegram channel on the fake at `api`.
fn telegram(api: &str) -> String {
    format!("telegram = {{ token = \"1:x\", chat_id = \"7\", api = \"{api}\" }}")
}

/// Delivers `n` on the channels `notify` configures; the drain's (sent, failed).
async fn deliver(dir: &Path, notify: &str, n: &Notification) -> (usize, usize) {
    let cfg = config(dir, notify);
    let db = state(dir);
    let ch = channels(&cfg);
    enqueue(&db, n, &ch.names(), 1000);
    let r = sender(&db, ch).drain_once(1000).await.unwrap();
    (r.sent, r.failed)
}

fn with_image(id: &str, image: Option<&str>) -> Listing {
    Listing {
        image: image.map(str::to_owned),
        ..listing(id, &format!("Flat {id}"), 1000.0)
    }
}

#[tokio::test]
async fn several_photos_reach_telegram_as_one_album_captioned_on_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let tg = Fake::start(answer(200, r#"{"ok":true,"result":[]}"#)).await;
    let listings: Vec<Listing> = (0..12)
        .map(|i| {
            let id = i.to_string();
            // One without a photo and one with a `data:` one: in the caption, not the album.
            match i {
                4 => with_image(&id, None),
                5 => with_image(&id, Some("data:image/png;base64,AAAA")),
                _ => with_image(&id, Some(&format!("https://img.portal.example/{id}.jpg"))),
            }
        })
        .collect();
    let n = new_listings(listings);
    assert_eq!(deliver(dir.path(), &telegram(&tg.url), &n).await, (1, 0));
    let t = tg.hits();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].path, "/bot1:x/sendMediaGroup");
    let j = t[0].json();
    println!("telegram: {j}");
    assert_eq!(j["chat_id"], "7");
    let media = j["media"].as_array().unwrap();
    let urls: Vec<&str> = media.iter().map(|m| m["media"].as_str().unwrap()).collect();
    assert_eq!(urls.len(), 10, "Telegram's most per album");
    assert_eq!(urls[3], "https://img.portal.example/3.jpg");
    assert_eq!(urls[4], "https://img.portal.example/6.jpg");
    assert!(media.iter().all(|m| m["type"] == "photo"));
    let caption = media[0]["caption"].as_str().unwrap();
    assert_eq!(media[0]["parse_mode"], "HTML");
    // Telegram's 1,024 counts the text once parsed: links and tags do not count.
    let shown = regex::Regex::new("<[^>]*>")
        .unwrap()
        .replace_all(caption, "");
    assert!(shown.encode_utf16().count() <= 1024, "{shown}");
    assert!(
        caption.contains("Flat 11") && caption.contains("Flat 4"),
        "{caption}"
    );
    assert!(media[1..].iter().all(|m| m.get("caption").is_none()));
}

#[tokio::test]
async fn a_photo_telegram_refuses_still_delivers_the_message_as_text() {
    for (listings, method, refusal) in [
        (
            vec![listing("1", "Sunny flat", 900.0)],
            "sendPhoto",
            "Bad Request: wrong file identifier/HTTP URL specified",
        ),
        (
            vec![listing("1", "A", 900.0), listing("2", "B", 950.0)],
            "sendMediaGroup",
            "Bad Request: failed to get HTTP URL content",
        ),
        (
            vec![listing("1", "A", 900.0)],
            "sendPhoto",
            "Bad Request: wrong type of the web page content",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let tg = Fake::start(answer(
            400,
            &format!(r#"{{"ok":false,"error_code":400,"description":"{refusal}"}}"#),
        ))
        .await;
        tg.then(answer(200, TG_OK));
        let n = new_listings(listings);
        assert_eq!(
            deliver(dir.path(), &telegram(&tg.url), &n).await,
            (1, 0),
            "{refusal}"
        );
        let t = tg.hits();
        let paths: Vec<&str> = t.iter().map(|h| h.path.as_str()).collect();
        assert_eq!(
            paths,
            [format!("/bot1:x/{method}").as_str(), "/bot1:x/sendMessage"]
        );
        let first = t[0].json();
        let caption = first["caption"]
            .as_str()
            .or(first["media"][0]["caption"].as_str())
            .unwrap();
        let text = t[1].json();
        println!("{refusal}: {text}");
        assert_eq!(text["text"], caption, "the same message, as text");
        assert_eq!(text["parse_mode"], "HTML");
        assert_eq!(text["chat_id"], "7");
        assert!(text.get("photo").is_none());
    }
}

#[tokio::test]
async fn listings_without_a_web_photo_go_to_telegram_as_text() {
    for image in [
        None,
        Some("data:image/jpeg;base64,/9j/4AAQ"),
        Some("javascript:alert(1)"),
        Some("/img/1.jpg"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let tg = Fake::start(answer(200, TG_OK)).await;
        let n = new_listings(vec![with_image("1", image)]);
        assert_eq!(deliver(dir.path(), &telegram(&tg.url), &n).await, (1, 0));
        let t = tg.hits();
        assert_eq!(t.len(), 1, "{image:?}");
        assert_eq!(t[0].path, "/bot1:x/sendMessage", "{image:?}");
        let j = t[0].json();
        assert!(j["text"].as_str().unwrap().contains("Flat 1"));
        assert!(!t[0].body.contains("data:") && !t[0].body.contains("javascript:"));
    }
}

#[tokio::test]
async fn discord_slack_and_ntfy_refusing_a_picture_get_the_message_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let dc = Fake::start(answer(
        400,
        r#"{"message":"Invalid Form Body","code":50035}"#,
    ))
    .await;
    dc.then(answer(200, r#"{"id":"1"}"#));
    let sl = Fake::start(Answer {
        headers: vec![("content-type", "text/plain".into())],
        ..answer(400, "invalid_blocks")
    })
    .await;
    sl.then(answer(200, "ok"));
    let nt = Fake::start(answer(
        400,
        r#"{"code":40013,"http":400,"error":"invalid request: attachment URL is invalid"}"#,
    ))
    .await;
    nt.then(answer(200, r#"{"id":"x"}"#));
    let notify = format!(
        "discord = {{ url = \"{}/api/webhooks/1/t\" }}\nslack = {{ url = \"{}/s\" }}\nntfy = {{ url = \"{}/flats\" }}",
        dc.url, sl.url, nt.url
    );
    let n = new_listings(vec![listing("1", "Sunny flat", 900.0)]);
    assert_eq!(deliver(dir.path(), &notify, &n).await, (3, 0));
    let photo = "https://img.portal.example/1.jpg";

    let d = dc.hits();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].json()["embeds"][0]["thumbnail"]["url"], photo);
    let plain = d[1].json();
    assert!(plain["embeds"][0].get("thumbnail").is_none());
    assert_eq!(plain["embeds"][0]["title"], "Sunny flat");

    let s = sl.hits();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].json()["blocks"][2]["accessory"]["image_url"], photo);
    let plain = s[1].json();
    assert!(plain["blocks"][2].get("accessory").is_none());
    assert_eq!(plain["blocks"][2]["text"], s[0].json()["blocks"][2]["text"]);

    let h = nt.hits();
    assert_eq!(h.len(), 2);
    assert_eq!(h[0].header("attach"), Some(photo));
    assert_eq!(h[0].header("icon"), Some(photo));
    assert_eq!(h[1].header("attach"), None);
    assert_eq!(h[1].header("icon"), None, "no picture at all in the retry");
    assert_eq!(h[1].body, h[0].body);
}

#[tokio::test]
async fn an_email_shows_each_listings_photo_in_its_html_part_only() {
    let dir = tempfile::tempdir().unwrap();
    let port = crate::util::free_port();
    let inbox = crate::util::start_smtp(port);
    let notify = format!(
        "email = {{ to = \"me@example.com\", from = \"notifio@localhost\", smtp = \"smtp://127.0.0.1:{port}\" }}"
    );
    let n = new_listings(vec![
        listing("1", "Sunny <flat> & \"co\"", 900.0),
        with_image("2", Some("javascript:alert(1)")),
        with_image("3", Some("https://img.portal.example/3.jpg?w=640&h=480")),
    ]);
    assert_eq!(deliver(dir.path(), &notify, &n).await, (1, 0));
    let deadline = Instant::now() + Duration::from_secs(10);
    while inbox.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mails = crate::util::mails(&inbox);
    assert_eq!(mails.len(), 1);
    let m = &mails[0];
    println!("{}", m.html);
    assert!(m.html.contains(
        "<a href=\"https://portal.example/listing/1\"><img src=\"https://img.portal.example/1.jpg\" alt=\"Photo: Sunny &lt;flat&gt; &amp; &quot;co&quot;\" width=\"320\""
    ), "{}", m.html);
    assert!(
        m.html
            .contains("<img src=\"https://img.portal.example/3.jpg?w=640&amp;h=480\""),
        "{}",
        m.html
    );
    assert_eq!(m.html.matches("<img ").count(), 2);
    assert!(!m.html.contains("javascript:"));
    assert!(!m.text.contains("img.portal.example"), "{}", m.text);
    assert!(m.text.contains("* Sunny <flat> & \"co\"\n"), "{}", m.text);
}

// ---------------------------------------------------------------- Apprise URLs

/// A service's settings with its secrets resolved, comparable across how they were written.
fn resolved(s: &ServiceSettings) -> String {
    let v = |x: &notifio::config::SecretSetting| x.resolve(&|_| None).unwrap().expose().to_owned();
    match s {
        ServiceSettings::Telegram {
            api,
            token,
            chat_id,
        } => format!("telegram {api} {} {chat_id}", v(token)),
        ServiceSettings::Discord { url } => format!("discord {}", v(url)),
        ServiceSettings::Slack { url } => format!("slack {}", v(url)),
        ServiceSettings::Ntfy { url, token } => {
            format!("ntfy {} {:?}", v(url), token.as_ref().map(v))
        }
        ServiceSettings::Gotify { url, token } => format!("gotify {url} {}", v(token)),
        ServiceSettings::Pushover { api, user, token } => {
            format!("pushover {api} {} {}", v(user), v(token))
        }
        ServiceSettings::Matrix {
            homeserver,
            room,
            token,
        } => format!("matrix {homeserver} {room} {}", v(token)),
        other => format!("{other:?}"),
    }
}

#[test]
fn apprise_urls_parse_to_the_same_channels_as_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let tables = config(
        dir.path(),
        r#"telegram = { token = "123:abc", chat_id = "-100" }
discord = { url = "https://discord.com/api/webhooks/42/tok" }
slack = { url = "https://hooks.slack.com/services/T/B/C" }
ntfy = { url = "https://ntfy.example.org/flats", token = "tk_1" }
gotify = { url = "https://gotify.example.org", token = "gtok" }
pushover = { user = "ukey", token = "ptok" }
matrix = { homeserver = "https://matrix.org", room = "!r:matrix.org", token = "mtok" }
desktop = true"#,
    );
    let urls = config(
        dir.path(),
        r#"urls = ["tgram://123:abc/-100", "discord://42/tok", "slack://T/B/C", "ntfys://ntfy.example.org/flats?token=tk_1",
        "gotifys://gotify.example.org/gtok", "pover://ukey@ptok", "matrixs://mtok@matrix.org/!r:matrix.org", "dbus://"]"#,
    );
    let a: Vec<(String, String)> = tables
        .notify
        .channels
        .iter()
        .map(|c| (c.name.clone(), resolved(&c.service)))
        .collect();
    let b: Vec<(String, String)> = urls
        .notify
        .channels
        .iter()
        .map(|c| (c.name.clone(), resolved(&c.service)))
        .collect();
    println!("{a:#?}");
    assert_eq!(a.len(), 8);
    assert_eq!(a, b);
    // Both ways at once: the URL's channel is the second of its kind.
    let both = config(
        dir.path(),
        "telegram = { token = \"1:a\", chat_id = \"1\" }\nurls = [\"tgram://2:b/2\"]",
    );
    let names: Vec<&str> = both
        .notify
        .channels
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["telegram", "telegram-2"]);
}

// ---------------------------------------------------------------- secrets

#[tokio::test]
async fn secrets_never_appear_in_the_log_the_database_or_status() {
    let (logs, _guard) = crate::util::capture_log();

    let dir = tempfile::tempdir().unwrap();
    // Services that refuse, one of them echoing the token back; one that is down.
    let tg = Fake::start(answer(400, r#"{"ok":false,"error_code":400,"description":"Bad Request: chat not found for bot 777:TG-SECRET"}"#)).await;
    let dc = Fake::start(answer(500, r#"{"message":"oops"}"#)).await;
    let down = format!("http://127.0.0.1:{}", crate::util::free_port());
    let token_file = dir.path().join("gotify.token");
    std::fs::write(&token_file, "GOTIFY-SECRET\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let cfg = config(
        dir.path(),
        &format!(
            "telegram = {{ token = \"777:TG-SECRET\", chat_id = \"1\", api = \"{}\" }}\ndiscord = {{ url = \"{}/api/webhooks/1/DC-SECRET\" }}\ngotify = {{ url = \"{down}\", token_file = {token_file:?} }}\nurls = [\"ntfy://127.0.0.1:{}/NTFY-SECRET-TOPIC\"]",
            tg.url,
            dc.url,
            crate::util::free_port()
        ),
    );
    let secrets = [
        "TG-SECRET",
        "DC-SECRET",
        "GOTIFY-SECRET",
        "NTFY-SECRET-TOPIC",
    ];
    let shown = format!("{cfg:?}");
    let ch = channels(&cfg);
    let shown = format!("{shown}{ch:?}");
    let db = state(dir.path());
    enqueue(
        &db,
        &new_listings(vec![listing("1", "A", 1.0)]),
        &ch.names(),
        1000,
    );
    let mut s = sender(&db, ch);
    let r = s.drain_once(1000).await.unwrap();
    assert_eq!(r.failed, 4);
    let store = notifio::store::Store::open(dir.path()).unwrap();
    let view = notifio::status::build(&store, 2000, &BackoffPolicy::default()).unwrap();
    let status = format!(
        "{}{}",
        serde_json::to_string(&view).unwrap(),
        notifio::status::render_table(&view)
    );
    let dump = outbox_dump(&db);
    let logs = logs.text();
    println!("{logs}\n{dump}\n{status}");
    assert!(logs.contains("notification channel failed permanently"));
    assert!(logs.contains("notification delivery failed; will retry"));
    assert!(
        dump.contains("Bad Request: chat not found for bot ***"),
        "scrubbed: {dump}"
    );
    for secret in secrets {
        assert!(!logs.contains(secret), "{secret} in the log");
        assert!(!dump.contains(secret), "{secret} in the database");
        assert!(!status.contains(secret), "{secret} in status");
        assert!(!shown.contains(secret), "{secret} in a Debug string");
    }
}

#[test]
fn an_exposed_token_file_is_refused_naming_the_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tg.token");
    std::fs::write(&file, "123:SECRET").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = config(
        dir.path(),
        &format!("telegram = {{ token_file = {file:?}, chat_id = \"1\" }}"),
    );
    let err = Channels::from_config_with_env(&cfg, &|_| None)
        .unwrap_err()
        .to_string();
    println!("{err}");
    assert!(
        err.contains("`notify.telegram.token_file`") && err.contains("chmod 600"),
        "{err}"
    );
    assert!(!err.contains("SECRET"));
    // The environment wins over the file (and is never checked against it).
    let env = |k: &str| (k == "NOTIFIO_TELEGRAM_TOKEN").then(|| "from-env".to_owned());
    assert!(Channels::from_config_with_env(&cfg, &env).is_ok());
}

// ---------------------------------------------------------------- routing

#[tokio::test]
async fn a_search_routes_its_notifications_to_the_channels_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let portal = fake_portal::Portal::start(vec![fake_portal::SiteSpec::new("a")])
        .await
        .unwrap();
    let tg = Fake::start(answer(200, TG_OK)).await;
    let mb = dir.path().join("n.mbox");
    let text = format!(
        "[watch]\nstate_dir = {:?}\nnotify_existing = true\n[notify]\nmailbox = {mb:?}\ntelegram = {{ token = \"1:x\", chat_id = \"1\", api = \"{}\" }}\n\
         [[search]]\nname = \"to telegram\"\nurl = \"{}\"\nnotify = [\"telegram\"]\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
        dir.path().display(),
        tg.url,
        portal.search_url("a", "madrid")
    );
    let env = Environment {
        home: None,
        data_dir: Some(dir.path().to_path_buf()),
        config_dir: None,
        dashboard_token: None,
        browser: None,
    };
    let cfg = parse_in(&text, &dir.path().join("notifio.toml"), &env).unwrap();
    assert_eq!(
        cfg.searches[0].notify.as_deref(),
        Some(&["telegram".to_owned()][..])
    );
    let ch = channels(&cfg);
    let mut w = notifio::watch::Watcher::for_one_pass(cfg, ch.names(), false).unwrap();
    w.run(tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    drop(w);
    let db = notifio::store::Store::file_in(dir.path());
    let conn = Connection::open(&db).unwrap();
    let channels: Vec<String> = conn
        .prepare("SELECT channel FROM outbox")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        channels,
        ["telegram"],
        "the mailbox is not this search's channel"
    );
    let bad = text.replace("notify = [\"telegram\"]", "notify = [\"telegrm\"]");
    let err = parse_in(&bad, &dir.path().join("notifio.toml"), &env)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`search[0].notify[0]`: no channel `telegrm` is configured in [notify]"),
        "{err}"
    );
    assert!(err.contains("did you mean `telegram`?"), "{err}");
}

// ---------------------------------------------------------------- the desktop and `notify test`

/// What our notification server was asked to show.
#[derive(Clone, Debug)]
struct Shown {
    app: String,
    summary: String,
    body: String,
    actions: Vec<String>,
}

/// A freedesktop notification server of our own, recording what it gets.
struct NotificationServer {
    shown: Arc<Mutex<Vec<Shown>>>,
}

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl NotificationServer {
    #[allow(clippy::too_many_arguments)]
    async fn notify(
        &self,
        app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        actions: Vec<String>,
        _hints: std::collections::HashMap<String, zbus::OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        let mut shown = self.shown.lock().unwrap();
        shown.push(Shown {
            app: app_name,
            summary,
            body,
            actions,
        });
        u32::try_from(shown.len()).unwrap()
    }

    fn get_capabilities(&self) -> Vec<String> {
        vec![
            "body".into(),
            "body-markup".into(),
            "body-hyperlinks".into(),
            "actions".into(),
        ]
    }

    fn get_server_information(&self) -> (String, String, String, String) {
        (
            "fake".into(),
            "notifio tests".into(),
            "1".into(),
            "1.2".into(),
        )
    }

    fn close_notification(&self, _id: u32) {}
}

/// A private session bus (`dbus-daemon`, Debian's `dbus` package) and its address.
fn session_bus(dir: &Path) -> (std::process::Child, String) {
    use std::io::BufRead as _;
    let socket = dir.join("bus");
    let mut child = std::process::Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile", "--print-address=1"])
        .arg(format!("--address=unix:path={}", socket.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("dbus-daemon not found: install Debian's `dbus` package (apt-get install dbus)");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().to_owned())
}

/// `notifio --config CONFIG notify test ARGS…` with the session bus at `bus`: (exit code, stdout, stderr).
async fn notify_test(config: &Path, bus: &str, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
        .arg("--config")
        .arg(config)
        .args(["notify", "test"])
        .args(args)
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .env_remove("RUST_LOG")
        .env_remove("NOTIFIO_TELEGRAM_TOKEN")
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .unwrap()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mailbox = "notifications.mbox"` writes beside the config file (docs/config.md: paths
/// are relative to its directory), not into `state_dir`.
#[test]
fn a_relative_mailbox_is_written_beside_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    let text = "[watch]\nstate_dir = \"../state\"\ndashboard = false\n[notify]\nmailbox = \"notifications.mbox\"\n\n\
         [[search]]\nname = \"s\"\nurl = \"http://127.0.0.1:9/search\"\n\
         listing = { selector = \"article\" }\n";
    let path = crate::util::write_config(&conf, text);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
        .arg("--config")
        .arg(&path)
        .args(["notify", "test", "mailbox"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("delivered"), "{said}");
    let mail = std::fs::read_to_string(conf.join("notifications.mbox")).unwrap();
    assert!(mail.starts_with("From "), "{mail}");
    assert!(
        !dir.path().join("state/notifications.mbox").exists(),
        "nothing in state_dir"
    );
}

#[tokio::test]
async fn notify_test_reaches_telegram_discord_and_a_real_desktop_bus() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, bus) = session_bus(dir.path());
    let shown: Arc<Mutex<Vec<Shown>>> = Arc::default();
    let server = zbus::connection::Builder::address(bus.as_str())
        .name("org.freedesktop.Notifications")
        .serve_at(
            "/org/freedesktop/Notifications",
            NotificationServer {
                shown: shown.clone(),
            },
        )
        .build()
        .await
        .unwrap();
    let tg = Fake::start(answer(200, TG_OK)).await;
    let dc = Fake::start(answer(404, r#"{"message":"Unknown Webhook","code":10015}"#)).await;
    let config = crate::util::write_config(
        dir.path(),
        &format!(
            "[watch]\nstate_dir = {:?}\n[notify]\ntelegram = {{ token = \"5:TG\", chat_id = \"1\", api = \"{}\" }}\ndiscord = {{ url = \"{}/api/webhooks/1/x\" }}\ndesktop = true\n{SEARCH}",
            dir.path().display(),
            tg.url,
            dc.url
        ),
    );

    let (code, out, err) = notify_test(&config, &bus, &[]).await;
    println!("{out}{err}");
    assert_eq!(code, 1, "a channel failed");
    assert!(out.contains("telegram  delivered\n"), "{out}");
    assert!(
        out.contains("discord   refused: discord 127.0.0.1: HTTP 404 Not Found: Unknown Webhook"),
        "{out}"
    );
    assert!(out.contains("desktop   delivered\n"), "{out}");
    assert!(
        err.contains("1 of 3 channels did not deliver the test message"),
        "{err}"
    );
    assert!(
        tg.hits()[0].json()["text"]
            .as_str()
            .unwrap()
            .contains("https://example.com/notifio-test")
    );

    let got = shown.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].app, "notifio");
    assert_eq!(got[0].summary, "1 new listing — notifio notify test");
    assert!(got[0].body.contains("<b><a href=\"https://example.com/notifio-test\">Test message from notifio: this channel works</a></b> — 1,234 € · 3 rooms · 85 m²"), "{:?}", got[0].body);
    assert_eq!(got[0].actions, ["default", "Open the listing"]);

    let (code, out, _) = notify_test(&config, &bus, &["desktop", "telegram"]).await;
    assert_eq!((code, out.matches("delivered").count()), (0, 2), "{out}");
    let (code, _, err) = notify_test(&config, &bus, &["telegrm"]).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("no channel `telegrm` is configured; configured: telegram, discord, desktop"),
        "{err}"
    );

    // Nobody owns org.freedesktop.Notifications any more: said once, and a clear failure.
    drop(server);
    let (code, out, _) = notify_test(&config, &bus, &["desktop"]).await;
    println!("{out}");
    assert_eq!(code, 1);
    assert!(
        out.starts_with("desktop  refused: desktop: no notification service answered ("),
        "{out}"
    );
    // No session bus at all.
    let (code, out, _) = notify_test(
        &config,
        "unix:path=/nonexistent/bus",
        &["desktop", "telegram"],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        out.contains("desktop   refused: desktop: no notification service answered")
            && out.contains("telegram  delivered"),
        "{out}"
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
}

// ---------------------------------------------------------------- crash between two channels

/// Outbox rows of `channel` the service accepted, read from the watcher's database.
fn sent(state: &Path, channel: &str) -> i64 {
    crate::util::db(state)
        .and_then(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM outbox WHERE channel = ?1 AND sent_at IS NOT NULL",
                [channel],
                |r| r.get(0),
            )
            .ok()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn sigkill_between_two_channels_resends_only_what_was_not_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = fake_portal::Portal::start(vec![fake_portal::SiteSpec::new("a")])
        .await
        .unwrap();
    let tg = Fake::start(answer(200, TG_OK)).await;
    // Discord hangs: the process dies while its delivery is in flight.
    let dc = Fake::start(Answer {
        delay: Duration::from_secs(30),
        ..answer(200, r#"{"id":"1"}"#)
    })
    .await;
    let mut text = crate::util::watch_toml(state, "300ms", "100ms");
    text.push_str(&format!(
        "[notify]\ntelegram = {{ token = \"1:x\", chat_id = \"1\", api = \"{}\" }}\ndiscord = {{ url = \"{}/api/webhooks/1/x\" }}\n\n",
        tg.url, dc.url
    ));
    text.push_str(&crate::util::search_toml(
        "flats",
        &portal.search_url("a", "madrid"),
    ));
    let cfg = crate::util::write_config(state, &text);

    let child = crate::util::Notifio::start(state, &cfg, false, None);
    crate::util::wait_for(Duration::from_secs(20), "the baseline", || {
        crate::util::all_baselined(state, 1).then_some(())
    })
    .await;
    portal.add_listing("a", Some("madrid"));
    crate::util::wait_for(
        Duration::from_secs(20),
        "telegram's delivery, discord's in flight",
        || (sent(state, "telegram") == 1 && !dc.hits().is_empty()).then_some(()),
    )
    .await;
    child.kill();
    assert_eq!(sent(state, "discord"), 0);

    dc.set(answer(200, r#"{"id":"1"}"#));
    let child = crate::util::Notifio::start(state, &cfg, false, None);
    crate::util::wait_for(
        Duration::from_secs(20),
        "discord's delivery after the restart",
        || (sent(state, "discord") == 1).then_some(()),
    )
    .await;
    // A few more passes of the watcher: nothing else goes out.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let out = child.output();
    child.terminate();
    println!("{out}");
    assert_eq!(
        tg.hits().len(),
        1,
        "telegram had accepted: it gets nothing again"
    );
    assert_eq!(
        dc.hits().len(),
        2,
        "discord: the request the crash cut off, then the delivery"
    );
    assert_eq!(dc.hits()[1].json()["embeds"].as_array().unwrap().len(), 1);
}

#[test]
fn the_starter_config_shows_every_channel_commented_out() {
    let dir = tempfile::tempdir().unwrap();
    let keys = [
        "telegram", "discord", "slack", "ntfy", "gotify", "pushover", "matrix", "desktop", "urls",
    ];
    let text: String = notifio::config::STARTER
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if keys.iter().any(|k| rest.starts_with(&format!("{k} = "))) => {
                rest.to_owned()
            }
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let env = Environment {
        home: Some(dir.path().to_path_buf()),
        data_dir: Some(dir.path().to_path_buf()),
        config_dir: None,
        dashboard_token: None,
        browser: None,
    };
    let cfg = parse_in(&text, &dir.path().join("notifio.toml"), &env).unwrap();
    let names: Vec<&str> = cfg
        .notify
        .channels
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "telegram",
            "discord",
            "slack",
            "ntfy",
            "gotify",
            "pushover",
            "matrix",
            "desktop",
            "telegram-2",
            "discord-2",
            "ntfy-2"
        ]
    );
}
