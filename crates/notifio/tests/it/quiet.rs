//! Quiet hours, digests and heartbeats (docs/notifications.md#quiet-hours-digests-and-a-heartbeat)
//! against a fake webhook and a fake Telegram on 127.0.0.1 and a real SQLite state database.
//! Time is the sender's `now` (the fake clock) and its time zone is UTC, so "23:30" below is
//! 23:30 of the quiet hours; a restart is a new `Sender` on the same database.

use crate::util::{Fake, answer, fast_ladder, fast_retry};
use jiff::tz::TimeZone;
use notifio::config::{Config, Environment, parse_in};
use notifio::listing::Listing;
use notifio::notify::{Channels, Notification, Sender, outbox};
use rusqlite::Connection;
use std::path::{Path, PathBuf};

const SEARCH: &str =
    "[[search]]\nname = \"Madrid under 1200\"\nurl = \"https://www.idealista.com/x\"\n";
const MIN: u64 = 60_000;
const HOUR: u64 = 60 * MIN;

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

/// A fresh sender on `db`, as a restarted notifio makes: quiet hours in UTC.
fn sender(db: &Path, cfg: &Config) -> Sender {
    Sender::new(db.to_path_buf(), channels(cfg), fast_retry(), fast_ladder())
        .with_time_zone(TimeZone::UTC)
}

/// A state directory with the store's schema, and its database path.
fn state(dir: &Path) -> PathBuf {
    drop(notifio::store::Store::open(dir).unwrap());
    notifio::store::Store::file_in(dir)
}

/// Epoch ms of a UTC time.
fn at(s: &str) -> u64 {
    let dt: jiff::civil::DateTime = s.parse().unwrap();
    u64::try_from(
        dt.to_zoned(TimeZone::UTC)
            .unwrap()
            .timestamp()
            .as_millisecond(),
    )
    .unwrap()
}

fn listing(id: &str, price: f64) -> Listing {
    Listing {
        id: id.into(),
        title: Some(format!("Flat {id}")),
        price: Some(price),
        currency: Some("EUR".into()),
        rooms: Some(2.0),
        area_m2: Some(64.0),
        url: Some(format!("https://portal.example/listing/{id}")),
        image: None,
        description: None,
        fallback: Vec::new(),
    }
}

fn found(id: &str, now: u64) -> Notification {
    Notification::NewListings {
        site: "portal.example".into(),
        searches: vec!["Madrid under 1200".into()],
        listings: vec![listing(id, 1000.0)],
        found_at: now,
        also_on: Vec::new(),
    }
}

/// What the watch loop does: enqueue inside a transaction of its own connection.
fn enqueue(db: &Path, n: &Notification, channels: &[&str], now: u64) {
    let mut conn = Connection::open(db).unwrap();
    let tx = conn.transaction().unwrap();
    outbox::enqueue(&tx, n, channels, now).unwrap();
    tx.commit().unwrap();
}

/// (id, next_attempt_at, sent_at) of `channel`'s rows.
fn rows(db: &Path, channel: &str) -> Vec<(i64, i64, Option<i64>)> {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, next_attempt_at, sent_at FROM outbox WHERE channel = ?1 ORDER BY id")
        .unwrap();
    stmt.query_map([channel], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The listing titles of a webhook body.
fn titles(body: &serde_json::Value) -> Vec<String> {
    body["listings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["title"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn quiet_hours_keep_three_listings_for_one_digest_at_their_end_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Fake::start(answer(200, "{}")).await;
    let cfg = config(
        dir.path(),
        &format!(
            "quiet_hours = \"23:00-07:00\"\nwebhook = {{ url = \"{}/hook\" }}",
            hook.url
        ),
    );
    let db = state(dir.path());
    let mut s = sender(&db, &cfg);
    let night = at("2024-01-10T23:30");
    let morning = at("2024-01-11T07:00");
    for (i, id) in ["1", "2", "3"].into_iter().enumerate() {
        let now = night + i as u64 * 10 * MIN;
        enqueue(&db, &found(id, now), &["webhook"], now);
        let r = s.drain_once(now).await.unwrap();
        assert_eq!((r.sent, r.failed, r.pending), (0, 0, i as u64 + 1));
        assert_eq!(r.next_attempt_at, Some(morning), "due at the window's end");
    }
    assert!(hook.hits().is_empty(), "nothing is sent in quiet hours");
    // The rows wait in the outbox behind the first, due at 07:00: a restart keeps them, and
    // keeps quiet.
    drop(s);
    let waiting = rows(&db, "webhook");
    assert_eq!(waiting.len(), 3);
    assert_eq!(waiting[0].1, morning as i64, "{waiting:?}");
    assert!(waiting.iter().all(|&(_, _, sent)| sent.is_none()));
    let mut s = sender(&db, &cfg);
    let r = s.drain_once(at("2024-01-11T03:00")).await.unwrap();
    assert_eq!((r.sent, r.pending), (0, 3));
    assert_eq!(s.drain_once(morning - 1).await.unwrap().sent, 0);
    assert!(hook.hits().is_empty());

    let r = s.drain_once(morning).await.unwrap();
    assert_eq!((r.sent, r.failed, r.pending), (3, 0, 0));
    let hits = hook.hits();
    assert_eq!(hits.len(), 1, "one digest");
    let body = hits[0].json();
    println!("{}\n{}", body["subject"], body["text"]);
    assert_eq!(body["type"], "digest");
    assert_eq!(
        body["subject"],
        "Digest: 3 new listings — Madrid under 1200"
    );
    assert_eq!(titles(&body), ["Flat 1", "Flat 2", "Flat 3"]);
    for id in 1..=3 {
        assert!(
            body["text"]
                .as_str()
                .unwrap()
                .contains(&format!("https://portal.example/listing/{id}"))
        );
    }
    assert!(
        rows(&db, "webhook")
            .iter()
            .all(|&(_, _, sent)| sent == Some(morning as i64)),
        "every merged row marked sent"
    );
    // Nothing twice, after another restart either.
    assert_eq!(s.drain_once(morning + HOUR).await.unwrap().sent, 0);
    let mut s = sender(&db, &cfg);
    assert_eq!(s.drain_once(morning + 2 * HOUR).await.unwrap().sent, 0);
    assert_eq!(hook.hits().len(), 1);
}

#[tokio::test]
async fn a_channel_without_quiet_hours_delivers_at_once_while_another_keeps_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Fake::start(answer(200, "{}")).await;
    let tg = Fake::start(answer(200, r#"{"ok":true,"result":{"message_id":1}}"#)).await;
    let cfg = config(
        dir.path(),
        &format!(
            "quiet_hours = \"23:00-07:00\"\nwebhook = {{ url = \"{}/hook\" }}\n\
             telegram = {{ token = \"1:x\", chat_id = \"1\", api = \"{}\", quiet_hours = \"off\" }}",
            hook.url, tg.url
        ),
    );
    let db = state(dir.path());
    let mut s = sender(&db, &cfg);
    let night = at("2024-01-10T23:30");
    enqueue(&db, &found("1", night), &["webhook", "telegram"], night);
    let r = s.drain_once(night).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 1));
    assert_eq!(tg.hits().len(), 1, "telegram has no quiet hours");
    assert!(hook.hits().is_empty(), "the webhook keeps quiet");
    // At the end, one row alone goes as it is: a digest of one is that message.
    let r = s.drain_once(at("2024-01-11T07:00")).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 0));
    let body = hook.hits()[0].json();
    assert_eq!(body["type"], "new_listings");
    assert_eq!(body["subject"], "1 new listing — Madrid under 1200");
    assert_eq!(tg.hits().len(), 1);
}

#[tokio::test]
async fn a_digest_every_hour_sends_five_messages_in_ten_minutes_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Fake::start(answer(200, "{}")).await;
    let cfg = config(
        dir.path(),
        &format!(
            "webhook = {{ url = \"{}/hook\", digest = \"1h\" }}",
            hook.url
        ),
    );
    let db = state(dir.path());
    let mut s = sender(&db, &cfg);
    let first = at("2024-01-10T10:00");
    for i in 0..5u64 {
        let now = first + i * 2 * MIN + 30_000;
        let id = (i + 1).to_string();
        if i == 3 {
            // A known listing's price drops: merged too, under its title.
            let drop = Notification::PriceChanged {
                site: "portal.example".into(),
                searches: vec!["Madrid under 1200".into()],
                listings: vec![listing("1", 900.0)],
                changes: vec![notifio::price::PriceChange {
                    id: "1".into(),
                    from: 1000.0,
                    to: 900.0,
                    currency: Some("EUR".into()),
                }],
                found_at: now,
            };
            enqueue(&db, &drop, &["webhook"], now);
        } else {
            enqueue(&db, &found(&id, now), &["webhook"], now);
        }
        let r = s.drain_once(now).await.unwrap();
        assert_eq!(r.sent, 0);
        assert_eq!(
            r.next_attempt_at,
            Some(first + 30_000 + HOUR),
            "the first message starts the hour"
        );
    }
    assert_eq!(s.drain_once(first + 59 * MIN).await.unwrap().sent, 0);
    assert!(hook.hits().is_empty());
    let r = s.drain_once(first + 30_000 + HOUR).await.unwrap();
    assert_eq!((r.sent, r.pending), (5, 0));
    let hits = hook.hits();
    assert_eq!(hits.len(), 1);
    let body = hits[0].json();
    println!("{}\n{}", body["subject"], body["text"]);
    assert_eq!(
        body["subject"],
        "Digest: 4 new listings, 1 price drop — Madrid under 1200"
    );
    assert_eq!(body["merged"], 5);
    assert_eq!(titles(&body), ["Flat 1", "Flat 2", "Flat 3", "Flat 5"]);
    assert!(
        body["text"]
            .as_str()
            .unwrap()
            .contains("* Flat 1\n  Price dropped: 1,000 → 900 EUR (\u{2212}10%)\n  900 €")
    );
    // The next message starts the next hour.
    let later = first + 2 * HOUR;
    enqueue(&db, &found("6", later), &["webhook"], later);
    let r = s.drain_once(later).await.unwrap();
    assert_eq!((r.sent, r.next_attempt_at), (0, Some(later + HOUR)));
}

#[tokio::test]
async fn a_digest_that_failed_is_retried_with_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Fake::start(answer(500, "{}")).await;
    let cfg = config(
        dir.path(),
        &format!(
            "quiet_hours = \"23:00-07:00\"\nwebhook = {{ url = \"{}/hook\" }}",
            hook.url
        ),
    );
    let db = state(dir.path());
    let night = at("2024-01-10T23:30");
    let morning = at("2024-01-11T07:00");
    enqueue(&db, &found("1", night), &["webhook"], night);
    enqueue(&db, &found("2", night), &["webhook"], night);
    let mut s = sender(&db, &cfg);
    assert_eq!(s.drain_once(night).await.unwrap().sent, 0);
    let r = s.drain_once(morning).await.unwrap();
    assert_eq!((r.sent, r.failed, r.pending), (0, 1, 2));
    let failed_digest = hook.hits().len();
    assert!(failed_digest >= 1);
    // A third listing comes in while the digest waits for its retry; then a restart.
    enqueue(&db, &found("3", morning + MIN), &["webhook"], morning + MIN);
    drop(s);
    hook.set(answer(200, "{}"));
    let mut s = sender(&db, &cfg);
    let r = s.drain_once(morning + HOUR).await.unwrap();
    assert_eq!((r.sent, r.pending), (2, 1), "{r:?}");
    // The row that came in after the digest's rows were fixed goes next, as it is.
    let r = s.drain_once(morning + HOUR).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 0), "{r:?}");
    let hits = hook.hits();
    let sent: Vec<serde_json::Value> = hits[failed_digest..].iter().map(|h| h.json()).collect();
    assert_eq!(
        sent.len(),
        2,
        "the digest, then the row that came in after it"
    );
    assert_eq!(
        titles(&sent[0]),
        ["Flat 1", "Flat 2"],
        "the same rows as tried"
    );
    assert_eq!(sent[1]["type"], "new_listings");
    assert_eq!(titles(&sent[1]), ["Flat 3"]);
    assert_eq!(s.drain_once(morning + 2 * HOUR).await.unwrap().sent, 0);
}

/// Check-history rows as the store writes them: (at, outcome, new_count).
fn checks(db: &Path, rows: &[(u64, &str, i64)]) {
    let conn = Connection::open(db).unwrap();
    conn.execute(
        "INSERT OR IGNORE INTO searches (id, name, url, site) VALUES (1, 'Madrid under 1200', 'https://www.idealista.com/x', 'idealista.com')",
        [],
    )
    .unwrap();
    for (at, outcome, new) in rows {
        conn.execute(
            "INSERT INTO checks (search_id, at, outcome, status, attempts, latency_ms, new_count) VALUES (1, ?1, ?2, 200, 1, 100, ?3)",
            rusqlite::params![*at as i64, outcome, new],
        )
        .unwrap();
    }
}

/// The figures of the checks in [from, to), as the table holds them.
fn figures(db: &Path, from: u64, to: u64) -> (i64, i64, i64) {
    let conn = Connection::open(db).unwrap();
    conn.query_row(
        "SELECT COUNT(*), SUM(new_count), SUM(outcome <> 'ok') FROM checks WHERE at >= ?1 AND at < ?2",
        [from as i64, to as i64],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .unwrap()
}

#[tokio::test]
async fn a_heartbeat_tells_the_checks_of_its_day_once_and_keeps_quiet_hours() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Fake::start(answer(200, "{}")).await;
    let cfg = config(
        dir.path(),
        &format!(
            "quiet_hours = \"23:00-07:00\"\nwebhook = {{ url = \"{}/hook\", heartbeat = \"24h\" }}",
            hook.url
        ),
    );
    let db = state(dir.path());
    let start = at("2024-01-10T12:00");
    // The first look starts the first day; nothing is sent for it.
    let mut s = sender(&db, &cfg);
    let r = s.drain_once(start).await.unwrap();
    assert_eq!((r.sent, r.pending), (0, 0));
    // A day of checks: 1,440 a minute apart; 12 new listings; 3 refusals or errors. One check
    // before the day started is not counted.
    let mut day: Vec<(u64, &str, i64)> = (0..1440u64)
        .map(|i| (start + i * MIN, "ok", i64::from(i % 120 == 0)))
        .collect();
    day[10].1 = "error";
    day[500].1 = "challenge";
    day[900].1 = "rate_limited";
    day.push((start - MIN, "error", 5));
    checks(&db, &day);
    // A restart during the day neither sends one nor starts the day again.
    drop(s);
    let mut s = sender(&db, &cfg);
    assert_eq!(s.drain_once(start + 23 * HOUR).await.unwrap().pending, 0);
    let noon = start + 24 * HOUR;
    let r = s.drain_once(noon).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 0));
    let hits = hook.hits();
    assert_eq!(hits.len(), 1);
    let body = hits[0].json();
    println!("{}", body["subject"]);
    let (n, new, errors) = figures(&db, start, noon);
    assert_eq!((n, new, errors), (1440, 12, 3));
    assert_eq!(
        body["subject"],
        "Still watching: 1,440 checks, 12 new, 3 errors since Wed 10 Jan 12:00"
    );
    assert_eq!(
        (
            &body["type"],
            &body["checks"],
            &body["new"],
            &body["errors"]
        ),
        (
            &serde_json::json!("heartbeat"),
            &serde_json::json!(n),
            &serde_json::json!(new),
            &serde_json::json!(errors)
        )
    );
    // Not twice: a restart at the same moment, and later that day.
    drop(s);
    let mut s = sender(&db, &cfg);
    assert_eq!(s.drain_once(noon).await.unwrap().sent, 0);
    assert_eq!(s.drain_once(noon + 10 * HOUR).await.unwrap().sent, 0);
    assert_eq!(hook.hits().len(), 1);
    // A day that ends in quiet hours: its heartbeat waits for their end (the next one's
    // period starts when it was written, 23:30).
    let night = at("2024-01-12T23:30");
    checks(&db, &[(night - HOUR, "ok", 0)]);
    let r = s.drain_once(night).await.unwrap();
    assert_eq!((r.sent, r.pending), (0, 1));
    assert_eq!(r.next_attempt_at, Some(at("2024-01-13T07:00")));
    drop(s);
    let mut s = sender(&db, &cfg);
    let r = s.drain_once(at("2024-01-13T07:00")).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 0));
    let body = hook.hits()[1].json();
    assert_eq!(
        body["subject"],
        "Still watching: 1 check, 0 new, 0 errors since Thu 11 Jan 12:00"
    );
}
