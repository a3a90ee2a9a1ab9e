//! The listings inbox through a running watcher's dashboard (docs/dashboard.md#the-listings-inbox):
//! `GET /api/listings` with its filters, marks set with `POST /api/listings/state` and kept
//! across a restart, what a mark changes in what is announced (a hidden listing's drop is
//! never told, a favourite's always is), the Atom feeds and the CSV/JSON export. A fake
//! portal on loopback, the mailbox channel as the place announcements land.

use crate::util::App;
use fake_portal::{Portal, SiteSpec};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

impl App {
    async fn mark(&self, site: &str, id: &str, state: &str) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("http://{}/api/listings/state", self.addr))
            .header("content-type", "application/json")
            .header("origin", format!("http://{}", self.addr))
            .body(json!({"site": site, "id": id, "state": state}).to_string())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }
}

fn ids(v: &Value) -> Vec<String> {
    v["listings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect()
}

fn config(dir: &Path, portal: &Portal) -> std::path::PathBuf {
    let site = portal.base_url("flats");
    let text = format!(
        "[watch]\nspacing = \"100ms\"\nstate_dir = {state:?}\ndashboard = \"127.0.0.1:0\"\n\n\
         [notify]\nmailbox = \"mail.mbox\"\n\n\
         [[search]]\nname = \"Flats\"\nurl = {url:?}\ninterval = \"300ms\"\n\
         listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\
         # Drops are not announced for this search: only a favourite's is.\n\
         notify_price_drops = false\n\n\
         [[search]]\nname = \"Flats, every drop\"\nurl = {url:?}\ninterval = \"300ms\"\n\
         listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n\
         [site.{host:?}]\nspacing = \"100ms\"\n",
        state = dir.join("state").display().to_string(),
        url = portal.search_url("flats", "all"),
        host = site.trim_start_matches("http://"),
    );
    crate::util::write_config(dir, &text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_are_filtered_marked_announced_by_their_marks_fed_and_exported() {
    let portal = Portal::start(vec![SiteSpec {
        name: "flats".into(),
        listings: 6,
        page_bytes: 10_000,
        ..SiteSpec::default()
    }])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &portal);
    let site = portal
        .base_url("flats")
        .trim_start_matches("http://")
        .to_owned();
    let app = App::start(&config).await;

    // The baseline: every listing of the page, new, found by the search.
    let v = app.until("", "the baseline", |v| v["total"] == 6).await;
    let first = &v["listings"][0];
    assert_eq!(first["state"], "new", "{v}");
    assert_eq!(
        first["searches"],
        json!(["Flats", "Flats, every drop"]),
        "{v}"
    );
    assert_eq!(first["site"], site.as_str(), "{v}");
    assert!(first["price_per_m2"].as_f64().unwrap() > 0.0, "{v}");

    // A new listing comes in: it is first (newest first), and it is what the feeds hold.
    let fresh = portal.add_listing("flats", None);
    let v = app.until("", "the new listing", |v| v["total"] == 7).await;
    assert_eq!(ids(&v)[0], fresh.id, "{v}");
    let paged = app.listings("?per_page=3&page=3").await;
    assert_eq!((ids(&paged).len(), paged["total"].clone()), (1, json!(7)));

    // Each filter, asked of the running server: one answer it must hold, one it must not.
    let total = |q: String| {
        let app = &app;
        async move { app.listings(&q).await["total"].clone() }
    };
    assert_eq!(total(format!("?site={site}")).await, json!(7));
    assert_eq!(total("?site=elsewhere.example".into()).await, json!(0));
    assert_eq!(total("?search=Flats".into()).await, json!(7));
    assert_eq!(total("?search=Houses".into()).await, json!(0));
    assert_eq!(
        total("?matched=true".into()).await,
        json!(7),
        "no filters: all match"
    );
    assert_eq!(total("?matched=false".into()).await, json!(0));
    let price = v["listings"][0]["price"].as_f64().unwrap();
    let around = app
        .listings(&format!("?min_price={price}&max_price={price}"))
        .await;
    assert!(ids(&around).contains(&fresh.id), "{around}");
    assert!(
        around["listings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["price"].as_f64() == Some(price)),
        "{around}"
    );
    let below = app.listings(&format!("?max_price={}", price - 1.0)).await;
    assert!(!ids(&below).contains(&fresh.id), "{below}");
    let above = app.listings(&format!("?min_price={}", price + 1.0)).await;
    assert!(!ids(&above).contains(&fresh.id), "{above}");
    let seen_at = v["listings"][0]["first_seen"].as_u64().unwrap();
    let since = app.listings(&format!("?since={seen_at}")).await;
    assert_eq!(ids(&since), std::slice::from_ref(&fresh.id), "{since}");
    assert_eq!(total("?since=1h".into()).await, json!(7));
    let (status, _, body) = app.get("/api/listings?since=yesterday-ish").await;
    assert!(status == 400 && body.contains("since"), "{body}");

    // Marks: a favourite and a hidden one; a bad state and an unknown listing are refused.
    let all = ids(&v);
    let (fav, hid) = (all[1].clone(), all[2].clone());
    assert_eq!(app.mark(&site, &fav, "favourite").await.0, 200);
    assert_eq!(app.mark(&site, &hid, "hidden").await.0, 200);
    let (status, body) = app.mark(&site, &fav, "liked").await;
    assert_eq!(
        (status, body["field"].clone()),
        (400, json!("state")),
        "{body}"
    );
    assert_eq!(app.mark(&site, "no-such-id", "seen").await.0, 404);
    let (status, _, body) = app.get("/api/listings?state=sleeping").await;
    assert!(status == 400 && body.contains("state"), "{body}");

    let inbox = ids(&app.listings("").await);
    assert!(!inbox.contains(&hid) && inbox.contains(&fav), "{inbox:?}");
    assert_eq!(
        ids(&app.listings("?state=hidden").await),
        std::slice::from_ref(&hid)
    );
    assert_eq!(
        ids(&app.listings("?state=favourite").await),
        std::slice::from_ref(&fav)
    );

    // Both get cheaper, and so does an unmarked one. The search that announces every drop
    // tells the favourite's and the unmarked one's, never the hidden one's; the one that
    // announces no drops still tells the favourite's.
    let plain = all[3].clone();
    for id in [&fav, &hid, &plain] {
        let l = portal
            .listings("flats", "all")
            .into_iter()
            .find(|l| &l.id == id)
            .unwrap();
        portal.set_price("flats", id, l.price - 100);
    }
    let mbox = dir.path().join("mail.mbox");
    let fav_link = format!("/listing/{fav}");
    let mail = crate::util::wait_for(Duration::from_secs(20), "the favourite's drop", || {
        std::fs::read_to_string(&mbox)
            .ok()
            .filter(|m| m.contains(&fav_link) && m.contains(&format!("/listing/{plain}")))
    })
    .await;
    // The three drops were on one page, so one check decided them all.
    let v = app.listings("").await;
    let prices_of = |id: &str| {
        v["listings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == id)
            .map(|l| l["prices"].as_array().map_or(0, Vec::len))
    };
    assert_eq!(prices_of(&plain), Some(2), "{v}");
    assert!(!mail.contains(&format!("/listing/{hid}")), "{mail}");
    let drops: Vec<&str> = mail
        .split("\nFrom ")
        .filter(|m| m.contains(&fav_link))
        .collect();
    // Both searches are told of the favourite's drop: "Flats" (drops off) names it too, not
    // only as the start of "Flats, every drop".
    assert!(
        drops.iter().any(|m| m.contains("Flats, every drop")),
        "{mail}"
    );
    assert!(
        drops
            .iter()
            .any(|m| m.replace("Flats, every drop", "").contains("Flats")),
        "the favourite's drop was not announced for the search with drops off: {mail}"
    );

    // The feeds: valid Atom with the listing that was news, not the baseline, never the hidden.
    let (status, ctype, feed) = app.get("/feed.atom").await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("application/atom+xml"), "{ctype}");
    assert!(
        feed.contains("<feed xmlns=\"http://www.w3.org/2005/Atom\">"),
        "{feed}"
    );
    assert_eq!(feed.matches("<entry>").count(), 1, "{feed}");
    assert!(feed.contains(&format!("/listing/{}", fresh.id)), "{feed}");
    // A real Atom parser reads it: the feed's and the entry's required elements.
    let parsed = atom_syndication::Feed::read_from(feed.as_bytes()).unwrap();
    assert_eq!(parsed.title().as_str(), "Notifio: new listings");
    assert_eq!(parsed.id(), "urn:notifio:feed:all");
    assert_eq!(parsed.entries().len(), 1);
    let entry = &parsed.entries()[0];
    assert_eq!(entry.title().as_str(), fresh.title);
    assert_eq!(entry.links()[0].href(), fresh.url);
    assert!(
        entry.id().starts_with("urn:notifio:listing:"),
        "{}",
        entry.id()
    );
    assert!(
        entry
            .summary()
            .is_some_and(|s| s.as_str().contains("Flats"))
    );
    let (status, _, one) = app.get("/feed/Flats%2C%20every%20drop.atom").await;
    assert_eq!(status, 200);
    assert!(
        one.contains("<title>Notifio: Flats, every drop</title>"),
        "{one}"
    );
    let (status, _, one) = app.get("/feed/Flats.atom").await;
    assert_eq!(status, 200);
    assert!(one.contains("<title>Notifio: Flats</title>"), "{one}");
    assert_eq!(app.get("/feed/Nope.atom").await.0, 404);

    // The export: every listing the filters match, CSV and JSON.
    let (status, ctype, csv) = app.get("/api/listings/export.csv").await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/csv"), "{ctype}");
    let rows: Vec<&str> = csv.trim_end().split("\r\n").collect();
    assert!(rows[0].starts_with("site,id,title,price"), "{csv}");
    assert_eq!(
        rows.len(),
        1 + 6,
        "the header and every listing but the hidden: {csv}"
    );
    assert!(csv.contains(",favourite,"), "{csv}");
    let (_, _, json_export) = app.get("/api/listings/export.json?state=hidden").await;
    let exported: Value = serde_json::from_str(&json_export).unwrap();
    assert_eq!(exported.as_array().map(Vec::len), Some(1), "{exported}");

    // A restart keeps the marks.
    app.stop().await;
    let app = App::start(&config).await;
    let v = app
        .until("?state=favourite", "the marks", |v| v["total"] == 1)
        .await;
    assert_eq!(ids(&v), std::slice::from_ref(&fav));
    assert_eq!(ids(&app.listings("?state=hidden").await), [hid]);
    app.stop().await;
}

/// Text XML 1.0 forbids, in a title a site wrote: U+FFFE and U+FFFF (noncharacters), C0
/// controls. A feed reader drops a feed that is not well-formed, so one listing would hide
/// all the others: both feeds stay well-formed, read by a strict XML parser and by an Atom
/// parser, with the rest of the title kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_title_with_characters_xml_forbids_leaves_the_feeds_readable() {
    let portal = Portal::start(vec![SiteSpec {
        name: "flats".into(),
        listings: 2,
        page_bytes: 4_000,
        ..SiteSpec::default()
    }])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &portal);
    let app = App::start(&config).await;
    app.until("", "the baseline", |v| v["total"] == 2).await;
    let hostile = portal.add_listing_with("flats", None, |l| {
        l.title = "Nice\u{FFFE} flat\u{FFFF} with\u{1} a \u{1b}[31mview\u{7f}".into();
    });
    app.until("", "the hostile listing", |v| v["total"] == 3)
        .await;
    for path in ["/feed.atom", "/feed/Flats.atom"] {
        let (status, _, feed) = app.get(path).await;
        assert_eq!(status, 200, "{path}");
        if let Err(e) = roxmltree::Document::parse(&feed) {
            panic!("{path} is not well-formed XML: {e}\n{feed:?}");
        }
        let parsed = atom_syndication::Feed::read_from(feed.as_bytes()).unwrap();
        let entry = parsed
            .entries()
            .iter()
            .find(|e| e.links().iter().any(|l| l.href() == hostile.url))
            .unwrap_or_else(|| panic!("{path} lacks the listing: {feed}"));
        assert_eq!(
            entry.title().as_str(),
            "Nice flat with a [31mview",
            "{path}"
        );
    }
    app.stop().await;
}
