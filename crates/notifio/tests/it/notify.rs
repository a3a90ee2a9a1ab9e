//! Notifications end to end: a real SMTP server (mailin-embedded) and a real HTTP server (axum)
//! on 127.0.0.1, a real SQLite file shared by a "store" connection and the sender's own.

use crate::util::{fast_ladder, fast_retry};
use crate::util::{free_port, parse_mail as parse_email, start_smtp};
use notifio::listing::Listing;
use notifio::notify::{
    ChannelKind, ChannelName, Channels, Email, EmailError, EmailSettings, Mailbox, Notification,
    SecretSetting, Sender, Webhook, WebhookFormat, WebhookSettings, notify_fetcher, outbox,
};
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------- helpers

fn listing(id: &str, title: &str, price: f64) -> Listing {
    Listing {
        id: id.into(),
        title: Some(title.into()),
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

fn new_listings(searches: &[&str], listings: Vec<Listing>) -> Notification {
    Notification::NewListings {
        site: "portal.example".into(),
        searches: searches.iter().map(|s| s.to_string()).collect(),
        listings,
        found_at: 1_700_000_000_000,
        also_on: Vec::new(),
    }
}

/// What the watch loop does: enqueue inside a transaction on the store's own connection.
fn enqueue<C: AsRef<str>>(db: &Path, n: &Notification, channels: &[C], now: u64) {
    let mut conn = Connection::open(db).unwrap();
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))
        .unwrap();
    conn.execute_batch(outbox::SCHEMA).unwrap();
    let tx = conn.transaction().unwrap();
    outbox::enqueue(&tx, n, channels, now).unwrap();
    tx.commit().unwrap();
}

/// Every column of every outbox row, as text.
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

fn email_settings(port: u16, user: &str) -> EmailSettings {
    let at = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    EmailSettings {
        to: vec!["me@example.com".into()],
        from: "Notifio <notifio@localhost>".into(),
        smtp: format!("smtp://{at}127.0.0.1:{port}"),
        password_file: None,
        allow_plaintext: false,
    }
}

fn email_channels(port: u16) -> Channels {
    let email =
        Email::with_password(email_settings(port, ""), None, Duration::from_secs(2)).unwrap();
    Channels::new().with_email(email)
}

fn sender(db: &Path, channels: Channels) -> Sender {
    Sender::new(db.to_path_buf(), channels, fast_retry(), fast_ladder())
}

fn db_in(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("notifio.sqlite")
}

// ---------------------------------------------------------------- email

#[tokio::test]
async fn new_listings_arrive_as_an_email_with_subject_body_and_link() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let port = free_port();
    let received = start_smtp(port);
    let n = new_listings(
        &["Madrid under 1200"],
        vec![
            listing("101", "Sunny flat in Lavapiés", 1150.0),
            listing("102", "Attic <with> terrace", 1199.0),
            listing("103", "Studio near Retiro", 890.0),
        ],
    );
    enqueue(&db, &n, &[ChannelKind::Email], 1000);

    let mut s = sender(&db, email_channels(port));
    let report = s.drain_once(1000).await.unwrap();
    assert_eq!((report.sent, report.failed, report.pending), (1, 0, 0));
    assert_eq!(report.next_attempt_at, None);

    let msgs = received.lock().unwrap().clone();
    assert_eq!(msgs.len(), 1);
    let m = parse_email(&msgs[0]);
    println!("{}\n{}", m.subject, m.text);
    assert_eq!(m.subject, "3 new listings — Madrid under 1200");
    assert!(m.text.contains("* Sunny flat in Lavapiés\n  1,150 € · 2 rooms · 64 m²\n  https://portal.example/listing/101\n"), "{}", m.text);
    assert!(m.text.contains("https://portal.example/listing/103"));
    assert!(
        m.html.contains(
            "<a href=\"https://portal.example/listing/102\">Attic &lt;with&gt; terrace</a>"
        ),
        "{}",
        m.html
    );
    // Nothing left to send: a second pass sends nothing more.
    assert_eq!(s.drain_once(2000).await.unwrap().sent, 0);
    assert_eq!(received.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn smtp_outage_then_recovery_delivers_all_in_order_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let port = free_port(); // nothing listening: connection refused
    for i in 1..=3 {
        let n = new_listings(
            &[&format!("Search {i}")],
            vec![listing(&i.to_string(), "Flat", 1000.0)],
        );
        enqueue(&db, &n, &[ChannelKind::Email], 1000);
    }
    let mut s = sender(&db, email_channels(port));

    // Four failed passes: the notify retry class (5ms, 15ms ±25%), then the error ladder
    // (50ms, 100ms ±15%). Only the head row is tried; the others wait behind it.
    let mut now = 1000;
    let mut waits = Vec::new();
    for _ in 0..4 {
        let r = s.drain_once(now).await.unwrap();
        assert_eq!((r.sent, r.failed, r.pending), (0, 1, 3));
        let next = r.next_attempt_at.unwrap();
        waits.push(next - now);
        now = next;
    }
    println!("waits while the SMTP server is down: {waits:?} ms");
    assert!((3..=7).contains(&waits[0]), "{waits:?}");
    assert!((11..=19).contains(&waits[1]), "{waits:?}");
    assert!((42..=58).contains(&waits[2]), "{waits:?}");
    assert!((85..=115).contains(&waits[3]), "{waits:?}");
    // Rows are never dropped; the error is recorded.
    let dump = outbox_dump(&db);
    assert!(dump.contains("email via smtp://127.0.0.1"), "{dump}");

    // Not due yet: nothing is attempted.
    assert_eq!(s.drain_once(now - 1).await.unwrap().failed, 0);

    let received = start_smtp(port);
    let r = s.drain_once(now).await.unwrap();
    assert_eq!((r.sent, r.failed, r.pending), (3, 0, 0));
    assert_eq!(s.drain_once(now + 10_000).await.unwrap().sent, 0);
    let subjects: Vec<String> = received
        .lock()
        .unwrap()
        .iter()
        .map(|m| parse_email(m).subject)
        .collect();
    assert_eq!(
        subjects,
        [
            "1 new listing — Search 1",
            "1 new listing — Search 2",
            "1 new listing — Search 3"
        ]
    );
}

#[tokio::test]
async fn a_restarted_sender_delivers_what_the_previous_one_did_not() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let port = free_port();
    let n = new_listings(&["Berlin"], vec![listing("7", "Altbau", 1400.0)]);
    enqueue(&db, &n, &[ChannelKind::Email], 1000);
    {
        // The first process: tries once while the server is down, then dies.
        let mut first = sender(&db, email_channels(port));
        assert_eq!(first.drain_once(1000).await.unwrap().failed, 1);
    }
    let received = start_smtp(port);
    let mut second = sender(&db, email_channels(port));
    // The retry time was persisted: the new process honours it, then delivers.
    let r = second.drain_once(1000).await.unwrap();
    assert_eq!((r.sent, r.pending), (0, 1));
    let r = second.drain_once(r.next_attempt_at.unwrap()).await.unwrap();
    assert_eq!((r.sent, r.pending), (1, 0));
    let msgs = received.lock().unwrap().clone();
    assert_eq!(msgs.len(), 1);
    assert_eq!(parse_email(&msgs[0]).subject, "1 new listing — Berlin");
}

#[tokio::test]
async fn a_listing_found_by_two_searches_is_one_message_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let port = free_port();
    let received = start_smtp(port);
    let n = new_listings(
        &["Madrid under 1200", "Lavapiés 2 rooms"],
        vec![listing("55", "Shared find", 1100.0)],
    );
    enqueue(&db, &n, &[ChannelKind::Email], 1000);
    let r = sender(&db, email_channels(port))
        .drain_once(1000)
        .await
        .unwrap();
    assert_eq!(r.sent, 1);
    let msgs = received.lock().unwrap().clone();
    assert_eq!(msgs.len(), 1);
    let m = parse_email(&msgs[0]);
    assert_eq!(
        m.subject,
        "1 new listing — Madrid under 1200, Lavapiés 2 rooms"
    );
    assert!(
        m.text
            .contains("by the searches Madrid under 1200, Lavapiés 2 rooms")
    );
    assert_eq!(
        m.text.matches("https://portal.example/listing/55").count(),
        1
    );
}

// ---------------------------------------------------------------- secrets

fn write_file(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_group_or_world_readable_password_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("smtp.password");
    write_file(&file, "correct-horse-battery\n", 0o644);
    let mut settings = email_settings(2525, "me");
    settings.password_file = Some(file.clone());
    let err = Email::with_password(settings.clone(), None, Duration::from_secs(1)).unwrap_err();
    let text = err.to_string();
    println!("{text}");
    assert!(matches!(
        err,
        EmailError::PasswordFileExposed { mode: 0o644, .. }
    ));
    assert!(text.contains("chmod 600"), "{text}");
    assert!(!text.contains("correct-horse"), "{text}");

    write_file(&file, "correct-horse-battery\n", 0o600);
    let email = Email::with_password(settings, None, Duration::from_secs(1)).unwrap();
    assert!(!format!("{email:?}").contains("correct-horse"));
}

#[tokio::test]
async fn the_password_is_never_logged_stored_or_printed() {
    const PASSWORD: &str = "pa55-Wörd-9f8e7d";
    let (logs, _guard) = crate::util::capture_log();

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("smtp.password");
    write_file(&file, PASSWORD, 0o600);
    // One server that is down (connection refused) and one that is up but offers no AUTH over
    // plain text: two failure paths whose errors end up in logs and in the outbox.
    let down = free_port();
    let up = free_port();
    let received = start_smtp(up);
    let make = |port| {
        let mut settings = email_settings(port, "me%40example.com");
        settings.password_file = Some(file.clone());
        Email::with_password(settings, None, Duration::from_secs(2)).unwrap()
    };
    let mut dump = String::new();
    for port in [down, up] {
        let db = dir.path().join(format!("{port}.sqlite"));
        let channels = Channels::new().with_email(make(port));
        let dbg = format!("{channels:?}");
        enqueue(
            &db,
            &new_listings(&["S"], vec![listing("1", "F", 1.0)]),
            &[ChannelKind::Email],
            1000,
        );
        let mut s = sender(&db, channels);
        assert!(!format!("{s:?}").contains(PASSWORD), "{dbg}");
        let r = s.drain_once(1000).await.unwrap();
        assert_eq!(r.failed, 1);
        dump.push_str(&outbox_dump(&db));
    }
    assert!(received.lock().unwrap().is_empty());

    let logs = logs.text();
    println!("{logs}");
    assert!(
        logs.contains("notification delivery failed"),
        "the failures were logged"
    );
    assert!(!logs.contains(PASSWORD));
    println!("{dump}");
    assert!(
        dump.contains("email via smtp://127.0.0.1"),
        "errors are stored: {dump}"
    );
    assert!(!dump.contains(PASSWORD));
}

// ---------------------------------------------------------------- mbox

#[tokio::test]
async fn the_default_channel_is_an_mbox_file_created_0600() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let channels = Channels::default_mailbox(dir.path());
    assert_eq!(channels.names(), [ChannelName::from(ChannelKind::Mailbox)]);
    let mut odd = listing("9", "Loft\nFrom the owner: no agents", 2000.0);
    odd.currency = Some("CHF".into());
    enqueue(
        &db,
        &new_listings(&["Zürich"], vec![odd]),
        &channels.names(),
        1000,
    );
    enqueue(
        &db,
        &Notification::SessionExpired {
            site: "facebook.com".into(),
            cookies_path: Some("/home/me/fb.cookies.txt".into()),
            login: false,
        },
        &channels.names(),
        1000,
    );
    let r = sender(&db, channels)
        .drain_once(1_700_000_000_000)
        .await
        .unwrap();
    assert_eq!(r.sent, 2);

    let path = dir.path().join("notifications.mbox");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mbox = std::fs::read_to_string(&path).unwrap();
    println!("{mbox}");
    let starts: Vec<&str> = mbox.lines().filter(|l| l.starts_with("From ")).collect();
    assert_eq!(
        starts,
        [
            "From notifio@localhost Tue Nov 14 22:13:20 2023",
            "From notifio@localhost Tue Nov 14 22:13:20 2023"
        ]
    );
    assert!(
        mbox.contains("\n>From the owner: no agents\n"),
        "escaped From line"
    );
    assert!(mbox.contains("2,000 CHF · 2 rooms · 64 m²"));
    assert!(mbox.contains("https://portal.example/listing/9\n"));
    assert!(mbox.contains("Subject: Your facebook.com session expired\n"));
    assert!(mbox.contains(
        "Your facebook.com session expired — export fresh cookies to /home/me/fb.cookies.txt."
    ));
    // Each entry is separated from the next by a blank line.
    assert!(mbox.contains("\n\nFrom notifio@localhost "));
    assert!(mbox.ends_with("\n\n"));
}

#[tokio::test]
async fn an_email_outage_does_not_resend_the_mbox_copy() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let port = free_port();
    let mbox = dir.path().join("copy.mbox");
    let channels = email_channels(port).with_mailbox(Mailbox::new(mbox.clone()));
    let kinds = channels.names();
    enqueue(
        &db,
        &new_listings(&["A"], vec![listing("1", "F", 1.0)]),
        &kinds,
        1000,
    );
    let mut s = sender(&db, channels);
    let r = s.drain_once(1000).await.unwrap();
    assert_eq!((r.sent, r.failed), (1, 1));
    let r = s.drain_once(r.next_attempt_at.unwrap()).await.unwrap();
    assert_eq!((r.sent, r.failed), (0, 1));
    let text = std::fs::read_to_string(&mbox).unwrap();
    assert_eq!(text.matches("\nSubject: ").count(), 1);
}

// ---------------------------------------------------------------- webhook

type Hits = Arc<Mutex<Vec<(String, String, String)>>>;

async fn start_hook() -> (String, Hits) {
    use axum::extract::{OriginalUri, State};
    use axum::http::HeaderMap;
    let hits: Hits = Arc::default();
    async fn hook(
        State(hits): State<Hits>,
        OriginalUri(uri): OriginalUri,
        headers: HeaderMap,
        body: String,
    ) -> &'static str {
        let ctype = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        hits.lock().unwrap().push((uri.to_string(), ctype, body));
        "ok"
    }
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), hits)
}

/// A webhook channel to `url` through the notify fetcher (ms-scale retries).
fn webhook(url: &str, format: WebhookFormat) -> Webhook {
    let mut retry = notifio_policy::RetryPolicies::default();
    *retry.get_mut(notifio_policy::RequestClass::Notify) = fast_retry();
    let settings = WebhookSettings {
        url: SecretSetting::inline("notify.webhook.url", url),
        format,
    };
    Webhook::new(&settings, notify_fetcher(&retry).unwrap(), &|_| None).unwrap()
}

#[tokio::test]
async fn a_webhook_receives_the_json_and_ntfy_gets_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let (url, hits) = start_hook().await;
    let json = webhook(&url.clone(), WebhookFormat::Json);
    let n = new_listings(
        &["Madrid under 1200"],
        vec![listing("101", "Sunny flat", 1150.0)],
    );
    enqueue(&db, &n, &[ChannelKind::Webhook], 1000);
    let r = sender(&db, Channels::new().with_webhook(json))
        .drain_once(1000)
        .await
        .unwrap();
    assert_eq!(r.sent, 1);

    let (uri, ctype, body) = hits.lock().unwrap()[0].clone();
    assert_eq!(uri, "/hook");
    assert_eq!(ctype, "application/json");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    println!("{}", serde_json::to_string_pretty(&v).unwrap());
    assert_eq!(v["version"], 1);
    assert_eq!(v["type"], "new_listings");
    assert_eq!(v["subject"], "1 new listing — Madrid under 1200");
    assert_eq!(v["site"], "portal.example");
    assert_eq!(v["searches"][0], "Madrid under 1200");
    assert_eq!(v["found_at"], 1_700_000_000_000u64);
    assert_eq!(
        v["listings"][0]["url"],
        "https://portal.example/listing/101"
    );
    assert_eq!(v["listings"][0]["price"], 1150.0);
    assert!(v["text"].as_str().unwrap().contains("Sunny flat"));

    let ntfy = webhook(&url, WebhookFormat::Ntfy);
    enqueue(&db, &n, &[ChannelKind::Webhook], 2000);
    let r = sender(&db, Channels::new().with_webhook(ntfy))
        .drain_once(2000)
        .await
        .unwrap();
    assert_eq!(r.sent, 1);
    let (uri, ctype, body) = hits.lock().unwrap()[1].clone();
    let query: Vec<(String, String)> = url::Url::parse(&format!("http://x{uri}"))
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    assert_eq!(
        query,
        [
            (
                "title".to_string(),
                "1 new listing — Madrid under 1200".to_string()
            ),
            (
                "click".to_string(),
                "https://portal.example/listing/101".to_string()
            )
        ]
    );
    assert!(ctype.starts_with("text/plain"));
    assert!(body.contains("* Sunny flat\n"));
}

#[tokio::test]
async fn a_webhook_404_holds_its_channel_without_dropping_anything() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let (url, hits) = start_hook().await;
    // Wrong path: the server answers 404. Retrying cannot help: the channel holds its rows,
    // shown in status, until the next start gives it one more try.
    let hook = webhook(&url.replace("/hook", "/missing"), WebhookFormat::Json);
    enqueue(
        &db,
        &new_listings(&["A"], vec![]),
        &[ChannelKind::Webhook],
        1000,
    );
    let mut s = sender(&db, Channels::new().with_webhook(hook));
    let r = s.drain_once(1000).await.unwrap();
    assert_eq!((r.failed, r.held, r.pending), (1, 1, 1));
    assert_eq!(r.next_attempt_at, None, "a held channel is not retried");
    assert_eq!(s.drain_once(1_000_000).await.unwrap().failed, 0);
    let dump = outbox_dump(&db);
    assert!(dump.contains("HTTP 404 Not Found"), "{dump}");
    assert!(hits.lock().unwrap().is_empty());
    // The next process tries it once more (the user may have fixed the URL).
    let again = webhook(&url.replace("/hook", "/missing"), WebhookFormat::Json);
    let r = sender(&db, Channels::new().with_webhook(again))
        .drain_once(2000)
        .await
        .unwrap();
    assert_eq!((r.failed, r.held), (1, 1));
    let fixed = webhook(&url, WebhookFormat::Json);
    let r = sender(&db, Channels::new().with_webhook(fixed))
        .drain_once(3000)
        .await
        .unwrap();
    assert_eq!((r.sent, r.pending), (1, 0));
    assert_eq!(hits.lock().unwrap().len(), 1);
}

// ---------------------------------------------------------------- the task

#[tokio::test]
async fn the_running_sender_wakes_on_notify_and_stops_on_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let db = db_in(&dir);
    let mbox = dir.path().join("n.mbox");
    let channels = Channels::new().with_mailbox(Mailbox::new(mbox.clone()));
    let wake = Arc::new(tokio::sync::Notify::new());
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(sender(&db, channels).run(wake.clone(), cancel.clone()));

    // Written after the sender went to sleep with an empty outbox: only the wake-up finds it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    enqueue(
        &db,
        &new_listings(&["A"], vec![listing("1", "F", 1.0)]),
        &[ChannelKind::Mailbox],
        1000,
    );
    wake.notify_one();
    // Delivered and marked sent (the file appears a moment before the row is marked: a
    // cancel in between would leave it pending, to be delivered again after a restart).
    let conn = Connection::open(&db).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while outbox::pending_count(&conn).unwrap() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "not delivered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(mbox.exists());
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .unwrap()
        .unwrap();
}
