//! When a listing is gone (docs/dashboard.md#gone-listings): missed by every search that
//! holds it on `gone_after` good checks in a row; a check that did not read the listing's page
//! does not count, a failed one neither counts nor resets; a listing that comes back is online
//! again. The rules through the store, as the watcher records checks; then the journey through
//! a running watcher and its dashboard, across a restart.

use crate::util::App;
use fake_portal::{Portal, SiteSpec};
use notifio::inbox::InboxQuery;
use notifio::listing::Listing;
use notifio::store::{CheckRecord, Recorded, RoutineCheck, SearchSync, Store};
use notifio_policy::{Outcome, SiteKey};
use std::path::Path;

const MIN: u64 = 60_000;

struct Db {
    store: Store,
    site: SiteKey,
    ids: Vec<u32>,
}

impl Db {
    fn open(dir: &Path, searches: &[&str]) -> Self {
        let mut store = Store::open(dir).unwrap();
        let site = SiteKey::from_url("https://flats.example/").unwrap();
        let rows: Vec<SearchSync> = searches
            .iter()
            .map(|name| SearchSync {
                name: (*name).into(),
                url: format!("https://flats.example/{name}"),
                site: site.to_string(),
                rules: "r".into(),
            })
            .collect();
        let ids = store.sync_searches(&rows).unwrap();
        Self { store, site, ids }
    }

    /// A check of the searches `which` (indexes) at `now` minutes that ended `outcome` with
    /// `pages` (each a list of listing ids).
    fn check(
        &mut self,
        which: &[usize],
        now: u64,
        outcome: Outcome,
        pages: &[&[&str]],
    ) -> Recorded {
        let searches: Vec<(u32, String, bool)> = which
            .iter()
            .map(|i| (self.ids[*i], format!("s{i}"), false))
            .collect();
        let mut listings = Vec::new();
        let mut ends = Vec::new();
        for page in pages {
            listings.extend(page.iter().map(|id| Listing {
                id: (*id).into(),
                title: Some(format!("Flat {id}")),
                url: Some(format!("https://flats.example/listing/{id}")),
                ..Listing::default()
            }));
            ends.push(listings.len());
        }
        let (site, now) = (self.site.clone(), now * MIN);
        self.store
            .transaction(|tx| {
                tx.record_check(&CheckRecord {
                    searches: &searches,
                    site: &site,
                    outcome,
                    status: Some(200),
                    attempts: 1,
                    latency_ms: 1,
                    listings: Some(&listings),
                    pages: if ends.len() > 1 { &ends } else { &[] },
                    now,
                    channels: &[],
                    history: 10,
                    rules: &[],
                    gone_after: 3,
                })
            })
            .unwrap()
    }

    /// A routine check of search `i`: the page as it was (a 304) when `read_page`, or a
    /// transient failure.
    fn routine(&mut self, i: usize, now: u64, read_page: bool) {
        let check = RoutineCheck {
            search_id: self.ids[i],
            at: now * MIN,
            outcome: if read_page {
                Outcome::Unchanged
            } else {
                Outcome::Error
            },
            status: None,
            attempts: 1,
            latency_ms: 1,
            read_page,
        };
        self.store
            .transaction(|tx| tx.record_routine(&[check], &[], 10, 3))
            .unwrap();
    }

    /// `(id, gone_at in minutes)` of every listing, by id.
    fn gone(&self) -> Vec<(String, Option<u64>)> {
        let mut v: Vec<(String, Option<u64>)> = self
            .store
            .inbox(&InboxQuery {
                per_page: 500,
                ..InboxQuery::default()
            })
            .unwrap()
            .listings
            .into_iter()
            .map(|l| (l.listing.id, l.gone_at.map(|g| g / MIN)))
            .collect();
        v.sort();
        v
    }
}

fn gone_ids(db: &Db) -> Vec<String> {
    db.gone()
        .into_iter()
        .filter(|(_, g)| g.is_some())
        .map(|(id, _)| id)
        .collect()
}

#[test]
fn a_listing_missed_on_three_good_checks_in_a_row_is_gone_and_comes_back_when_seen() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), &["a"]);
    db.check(&[0], 0, Outcome::Ok, &[&["1", "2", "3"]]);
    // "2" is let: missed at minute 10 (the page changed), then on two unchanged pages, with
    // a failed check between them that neither counts nor resets.
    let r = db.check(&[0], 10, Outcome::Ok, &[&["1", "3"]]);
    assert_eq!(r.gone, 0);
    db.routine(0, 11, true);
    db.routine(0, 12, false);
    assert!(gone_ids(&db).is_empty(), "{:?}", db.gone());
    db.routine(0, 13, true);
    assert_eq!(
        db.gone(),
        [
            ("1".into(), None),
            ("2".into(), Some(10)),
            ("3".into(), None)
        ],
        "gone since the first check that missed it"
    );
    let life = db.store.lifecycle(db.ids[0], 20 * MIN).unwrap();
    assert_eq!((life.gone, life.stays_online_ms), (1, Some(10 * MIN)));
    assert_eq!(life.online_ms, [10 * MIN]);

    // It comes back: online again, and missed anew from zero.
    db.check(&[0], 30, Outcome::Ok, &[&["1", "2", "3"]]);
    assert!(gone_ids(&db).is_empty(), "{:?}", db.gone());
    let life = db.store.lifecycle(db.ids[0], 31 * MIN).unwrap();
    assert_eq!((life.gone, life.stays_online_ms), (0, None));
    db.check(&[0], 40, Outcome::Ok, &[&["1", "3"]]);
    db.routine(0, 41, true);
    assert!(gone_ids(&db).is_empty(), "two misses are not three");
}

#[test]
fn a_check_that_did_not_read_a_listings_page_does_not_count_against_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), &["a"]);
    db.check(&[0], 0, Outcome::Ok, &[&["1", "2"], &["4", "3"]]);
    // Page 2 was refused three times: page 1's listings were read, page 2's were not.
    for t in [10, 20, 30] {
        db.check(&[0], t, Outcome::RateLimited, &[&["1", "2"]]);
    }
    // And three good checks that read page 1 only (page 2 failed, so the results "ended").
    for t in [40, 50, 60] {
        db.check(&[0], t, Outcome::Ok, &[&["1", "2"]]);
    }
    assert!(gone_ids(&db).is_empty(), "{:?}", db.gone());
    // Three good checks of both pages without "4": it is gone.
    for t in [70, 80, 90] {
        db.check(&[0], t, Outcome::Ok, &[&["1", "2"], &["3"]]);
    }
    assert_eq!(gone_ids(&db), ["4"]);
}

#[test]
fn a_listing_pushed_off_the_end_by_newer_ones_is_not_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), &["a"]);
    db.check(&[0], 0, Outcome::Ok, &[&["1", "2", "3"]]);
    // A new one on top pushes "3", the oldest, off the end of the page; then "2".
    db.check(&[0], 10, Outcome::Ok, &[&["4", "1", "2"]]);
    db.check(&[0], 20, Outcome::Ok, &[&["5", "4", "1"]]);
    for t in 21..30 {
        db.routine(0, t, true);
    }
    assert!(gone_ids(&db).is_empty(), "{:?}", db.gone());
    // But one let from the middle, with older ones still shown, is missed; so is one that
    // was last when the page got shorter (nothing pushed it).
    db.check(&[0], 30, Outcome::Ok, &[&["5", "1"]]);
    db.routine(0, 31, true);
    db.routine(0, 32, true);
    assert_eq!(gone_ids(&db), ["4"]);
    db.check(&[0], 40, Outcome::Ok, &[&["5"]]);
    db.routine(0, 41, true);
    db.routine(0, 42, true);
    assert_eq!(gone_ids(&db), ["1", "4"]);
    // "3" comes back (bumped to the top): followed again, and never was gone.
    db.check(&[0], 50, Outcome::Ok, &[&["3", "5"]]);
    assert_eq!(db.gone()[2], ("3".into(), None));
}

#[test]
fn a_listing_is_gone_only_once_every_search_that_holds_it_misses_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), &["a", "b"]);
    db.check(&[0], 0, Outcome::Ok, &[&["1", "2"]]);
    db.check(&[1], 1, Outcome::Ok, &[&["2", "3"]]);
    // "2" leaves a's page (its price went above a's ceiling, say) but stays on b's.
    for t in [10, 20, 30, 40] {
        db.check(&[0], t, Outcome::Ok, &[&["1"]]);
        db.check(&[1], t + 1, Outcome::Ok, &[&["2", "3"]]);
    }
    assert!(gone_ids(&db).is_empty(), "{:?}", db.gone());
    // Then it leaves b's too: gone once b has missed it three times, since b's first miss.
    db.check(&[1], 51, Outcome::Ok, &[&["3"]]);
    db.routine(1, 52, true);
    db.routine(1, 53, true);
    assert_eq!(db.gone()[1], ("2".into(), Some(51)));
    // Each search counts it among its gone listings.
    for id in &db.ids {
        assert_eq!(db.store.lifecycle(*id, 60 * MIN).unwrap().gone, 1);
    }
}

#[test]
fn new_listings_per_day_count_what_came_after_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), &["a"]);
    const DAY: u64 = 24 * 60;
    db.check(&[0], 0, Outcome::Ok, &[&["1", "2"]]);
    db.check(&[0], DAY + 5, Outcome::Ok, &[&["3", "1", "2"]]);
    db.check(&[0], 3 * DAY, Outcome::Ok, &[&["5", "4", "3", "1", "2"]]);
    let life = db.store.lifecycle(db.ids[0], 3 * DAY * MIN + 1).unwrap();
    let n = life.new_per_day.len();
    assert_eq!(n, 14);
    // Today: "4" and "5"; the 24 hours before: "3" (two days less five minutes ago); the
    // baseline is not news.
    assert_eq!(&life.new_per_day[n - 3..], [0, 1, 2]);
    assert_eq!(life.new_per_day.iter().sum::<u32>(), 3);
}

/// The journey: a watcher on a fake portal, `gone_after = 2`; a listing is let, and the
/// inbox, its `gone` filter and the search's status say it is gone and how long it was
/// online; a restart keeps it; the listing put back is online again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_let_listing_is_gone_in_the_inbox_and_the_status_across_a_restart() {
    let portal = Portal::start(vec![SiteSpec {
        name: "flats".into(),
        listings: 5,
        page_bytes: 8_000,
        ..SiteSpec::default()
    }])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let site = portal.base_url("flats");
    let text = format!(
        "[watch]\nspacing = \"100ms\"\nstate_dir = {state:?}\ndashboard = \"127.0.0.1:0\"\n\
         gone_after = 2\n\n[notify]\nmailbox = \"mail.mbox\"\n\n\
         [[search]]\nname = \"Flats\"\nurl = {url:?}\ninterval = \"300ms\"\n\
         listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n\
         [site.{host:?}]\nspacing = \"100ms\"\n",
        state = dir.path().join("state").display().to_string(),
        url = portal.search_url("flats", "all"),
        host = site.trim_start_matches("http://"),
    );
    let config = crate::util::write_config(dir.path(), &text);
    let let_one = portal.listings("flats", "all")[2].clone();

    let app = App::start(&config).await;
    app.until("", "the baseline", |v| v["total"] == 5).await;
    assert!(portal.remove_listing("flats", &let_one.id));
    let removed_at = now_ms();
    let v = app
        .until("?gone=true", "the let listing gone", |v| v["total"] == 1)
        .await;
    let gone = &v["listings"][0];
    assert_eq!(gone["id"], let_one.id.as_str(), "{v}");
    let gone_at = gone["gone_at"].as_u64().unwrap();
    assert!(gone_at >= removed_at, "{v}");
    assert!(gone["online_s"].as_u64().is_some(), "{v}");
    assert_eq!(app.listings("?gone=false").await["total"], 4);
    let status = app.status().await;
    let search = &status["searches"][0];
    assert_eq!(search["gone"], 1, "{status}");
    assert!(search["stays_online_s"].as_u64().is_some(), "{status}");
    app.stop().await;

    // A restart keeps it gone; a search that still misses it does not move when it went.
    let app = App::start(&config).await;
    let v = app
        .until("?gone=true", "still gone after a restart", |v| {
            v["total"] == 1
        })
        .await;
    assert_eq!(v["listings"][0]["gone_at"].as_u64(), Some(gone_at), "{v}");
    // Put back (the let fell through): online again.
    portal.put_back("flats", let_one.clone());
    app.until("?gone=false", "back online", |v| v["total"] == 5)
        .await;
    assert_eq!(app.listings("?gone=true").await["total"], 0);
    app.stop().await;
    portal.shutdown().await;
}

fn now_ms() -> u64 {
    notifio::clock::now().as_millis()
}
