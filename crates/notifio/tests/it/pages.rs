//! Following a search's result pages (`pages`), end to end: the real watcher against the
//! fake portal, whose sites spread their listings over pages that link to the next. Time is
//! real (the subject is what reaches the site and when), every wait a few hundred ms.

use crate::util::{load_config, next_matching};
use fake_portal::{Behaviour, Portal, SiteSpec};
use notifio::config;
use notifio::notify::outbox;
use notifio::notify::{ChannelKind, Notification};
use notifio::store::Store;
use notifio::watch::{PassResult, WatchEvent, Watcher};
use std::path::Path;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Spacing on the fake site: long enough that a request sent without it would show.
const SPACING_MS: u64 = 300;
/// Loopback arrival times wobble a little under load (as in tests/watch.rs).
const JITTER_MS: u64 = 50;

/// 12 listings, 5 a page, on at most 3 pages: 5, 5, 2.
fn paged_site(name: &str) -> SiteSpec {
    SiteSpec {
        listings: 12,
        per_page: 5,
        pages: 3,
        page_bytes: 8_000,
        ..SiteSpec::new(name)
    }
}

fn config_text(state_dir: &Path, searches: &[(&str, String, u32)], extra: &str) -> String {
    let mut t = format!(
        "[watch]\ninterval = \"1s\"\nspacing = \"{SPACING_MS}ms\"\nstate_dir = {:?}\ndashboard = false\n\n\
         [backoff]\nrate_limited = [\"1s\"]\ndenied = [\"1s\"]\nerror = [\"1s\"]\n\n\
         [retry.search]\ninitial = \"10ms\"\n{extra}\n",
        state_dir.display().to_string()
    );
    for (name, url, pages) in searches {
        t.push_str(&format!(
            "[[search]]\nname = {name:?}\nurl = {url:?}\npages = {pages}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n"
        ));
    }
    t
}

/// A state dir, the paged site `flats`, and the config of one search `a` on it reading
/// `pages` pages.
async fn one_search(pages: u32) -> (tempfile::TempDir, Portal, config::Config) {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![paged_site("flats")]).await.unwrap();
    let searches = [("a", portal.search_url("flats", "a"), pages)];
    let cfg = load_config(dir.path(), &config_text(dir.path(), &searches, ""));
    (dir, portal, cfg)
}

/// One `notifio check` pass in-process (mailbox channel on), its results by search.
async fn pass(cfg: &config::Config, force: bool) -> Vec<PassResult> {
    let mut w =
        Watcher::for_one_pass(cfg.clone(), vec![ChannelKind::Mailbox.into()], force).unwrap();
    w.run(CancellationToken::new()).await.unwrap()
}

/// The ids of every listing announced so far (the outbox's new-listings messages), in order.
fn announced(state_dir: &Path) -> Vec<String> {
    let store = Store::open(state_dir).unwrap();
    outbox::due(store.conn(), u64::MAX, 1000)
        .unwrap()
        .into_iter()
        .filter_map(|row| match row.notification().unwrap() {
            Notification::NewListings { listings, .. } => Some(listings),
            _ => None,
        })
        .flatten()
        .map(|l| l.id)
        .collect()
}

fn ids(listings: &[fake_portal::FakeListing]) -> Vec<String> {
    listings.iter().map(|l| l.id.clone()).collect()
}

/// The arrival times (ms) and paths of the requests a site got after `from`.
fn requests(portal: &Portal, site: &str, from: u64) -> Vec<(u64, String)> {
    portal
        .requests()
        .into_iter()
        .filter(|r| r.site == site && r.at >= from)
        .map(|r| (r.at, r.path))
        .collect()
}

/// Two searches of three pages each on one site: six requests, in page order per check, and
/// every two requests to the site at least its spacing apart, the pages of one check as much
/// as two checks (measured from the portal's request log). `check` reports the pages read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_is_a_request_under_the_sites_spacing() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![paged_site("flats")]).await.unwrap();
    let searches = [
        ("a", portal.search_url("flats", "a"), 3),
        ("b", portal.search_url("flats", "b"), 3),
    ];
    let cfg = load_config(dir.path(), &config_text(dir.path(), &searches, ""));
    let results = pass(&cfg, false).await;
    for r in &results {
        assert_eq!((r.outcome.as_str(), r.pages), ("ok", 3), "{r:?}");
        let want: Vec<String> = (1..=3)
            .flat_map(|p| ids(&portal.listings_on_page("flats", &r.search, p)))
            .collect();
        let got: Vec<String> = r.listings.iter().map(|l| l.listing.id.clone()).collect();
        assert_eq!(got, want, "every page's listings, in page order");
        assert_eq!(got.len(), 12);
    }
    let log = requests(&portal, "flats", 0);
    let paths: Vec<&str> = log.iter().map(|(_, p)| p.as_str()).collect();
    println!("{log:?}");
    assert_eq!(log.len(), 6, "{paths:?}");
    for check in paths.chunks(3) {
        let search = check[0].trim_start_matches("/search/");
        assert_eq!(
            check,
            [
                format!("/search/{search}"),
                format!("/search/{search}?page=2"),
                format!("/search/{search}?page=3"),
            ]
        );
    }
    let gaps: Vec<u64> = log.windows(2).map(|w| w[1].0 - w[0].0).collect();
    println!("gaps between requests to the site (ms): {gaps:?}");
    for g in &gaps {
        assert!(
            g + JITTER_MS >= SPACING_MS,
            "two requests {g} ms apart; spacing is {SPACING_MS} ms: {gaps:?}"
        );
    }
    portal.shutdown().await;
}

/// A refusal on page 2 ends the check and is recorded (the site waits); the listings of page 1
/// are processed, the new one announced once and never again, and the pages not read are
/// read (silently) once the site answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_on_page_two_keeps_page_one_and_the_site_waits() {
    let (dir, portal, cfg) = one_search(3).await;
    let baseline = pass(&cfg, false).await;
    assert_eq!((baseline[0].pages, baseline[0].listings.len()), (3, 12));
    assert!(
        announced(dir.path()).is_empty(),
        "a baseline announces nothing"
    );

    let fresh = portal.add_listing("flats", Some("a"));
    let page_one = ids(&portal.listings("flats", "a"));
    portal.set_behaviour(
        "flats",
        Behaviour::After(
            1,
            Box::new(Behaviour::RateLimited {
                retry_after: Some("60".into()),
            }),
        ),
    );
    let from = fake_portal_now();
    let refused = pass(&cfg, false).await;
    let r = &refused[0];
    assert_eq!(
        (r.outcome.as_str(), r.status, r.pages),
        ("rate_limited", Some(429), 1),
        "{r:?}"
    );
    let got: Vec<String> = r.listings.iter().map(|l| l.listing.id.clone()).collect();
    assert_eq!(got, page_one, "page 1's listings are kept");
    assert_eq!(r.new, std::slice::from_ref(&fresh.id));
    assert_eq!(
        announced(dir.path()),
        std::slice::from_ref(&fresh.id),
        "announced at once"
    );
    let paths: Vec<String> = requests(&portal, "flats", from)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        paths,
        ["/search/a", "/search/a?page=2"],
        "page 3 is not asked for"
    );
    let backoff = crate::util::backoff(dir.path());
    assert_eq!(backoff.len(), 1, "the refusal is recorded: {backoff:?}");
    assert!(r.next_retry_at.is_some(), "the site waits");

    // The site waits: the next pass does not knock.
    let from = fake_portal_now();
    let waiting = pass(&cfg, false).await;
    assert_eq!(waiting[0].outcome.as_str(), "waiting");
    assert!(requests(&portal, "flats", from).is_empty());

    // Answering again (forced past the wait): all pages, nothing new, nothing announced again,
    // though page 1's last listing moved to page 2 when the new one came.
    portal.set_behaviour("flats", Behaviour::Normal);
    let again = pass(&cfg, true).await;
    assert_eq!((again[0].outcome.as_str(), again[0].pages), ("ok", 3));
    assert!(again[0].new.is_empty(), "{:?}", again[0].new);
    assert_eq!(announced(dir.path()), [fresh.id], "once, never again");
    portal.shutdown().await;
}

/// A listing that moves between pages (one above it was let; a new one pushed it down) is the
/// same listing: never new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_moving_between_pages_is_not_new() {
    let (dir, portal, cfg) = one_search(3).await;
    pass(&cfg, false).await;

    // Up: page 1's first listing is let, page 2's first moves to page 1.
    let mover = portal.listings_on_page("flats", "a", 2)[0].clone();
    assert!(portal.remove_listing("flats", &portal.listings("flats", "a")[0].id));
    assert!(ids(&portal.listings("flats", "a")).contains(&mover.id));
    let r = pass(&cfg, false).await;
    assert_eq!((r[0].outcome.as_str(), r[0].pages), ("ok", 3));
    assert!(r[0].new.is_empty(), "moved up, not new: {:?}", r[0].new);

    // Down: a new listing pushes page 1's last one to page 2.
    let pushed = portal.listings("flats", "a").last().unwrap().clone();
    let fresh = portal.add_listing("flats", Some("a"));
    assert_eq!(portal.listings_on_page("flats", "a", 2)[0].id, pushed.id);
    let r = pass(&cfg, false).await;
    assert_eq!(
        r[0].new,
        std::slice::from_ref(&fresh.id),
        "only the new one"
    );
    assert_eq!(announced(dir.path()), [fresh.id]);
    portal.shutdown().await;
}

/// Raising `pages` reads pages no check read before: their listings are a baseline for those
/// pages, not news. A listing that appears later on any page is announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_read_for_the_first_time_are_a_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![paged_site("flats")]).await.unwrap();
    let one = [("a", portal.search_url("flats", "a"), 1)];
    let r = pass(
        &load_config(dir.path(), &config_text(dir.path(), &one, "")),
        false,
    )
    .await;
    assert_eq!((r[0].pages, r[0].listings.len()), (1, 5));
    let three = [("a", portal.search_url("flats", "a"), 3)];
    let cfg = load_config(dir.path(), &config_text(dir.path(), &three, ""));
    let r = pass(&cfg, false).await;
    assert_eq!((r[0].pages, r[0].listings.len()), (3, 12));
    assert_eq!(r[0].new.len(), 7, "seen for the first time");
    assert!(announced(dir.path()).is_empty(), "but not news");
    let fresh = portal.add_listing("flats", Some("a"));
    let r = pass(&cfg, false).await;
    assert_eq!(r[0].new, std::slice::from_ref(&fresh.id));
    assert_eq!(announced(dir.path()), [fresh.id]);
    portal.shutdown().await;
}

/// The next page in another form: `pagina-N.htm` links, found by a `listing.next` selector on
/// a site whose links carry no `rel="next"`; a search with fewer pages than `pages` stops at
/// its last page without asking for one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_selector_follows_pagina_links_and_the_last_page_ends_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![SiteSpec {
        rel_next: false,
        ..paged_site("flats")
    }])
    .await
    .unwrap();
    let url = format!("{}/search/a/pagina-1.htm", portal.base_url("flats"));
    let text = config_text(dir.path(), &[("a", url, 10)], "").replace(
        "id_attr = \"data-id\" }",
        "id_attr = \"data-id\", next = \"nav.pagination a.next-page\" }",
    );
    let cfg = load_config(dir.path(), &text);
    let r = pass(&cfg, false).await;
    assert_eq!(
        (r[0].outcome.as_str(), r[0].pages, r[0].listings.len()),
        ("ok", 3, 12),
        "{:?}",
        r[0]
    );
    let paths: Vec<String> = requests(&portal, "flats", 0)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(
        paths,
        [
            "/search/a/pagina-1.htm",
            "/search/a/pagina-2.htm",
            "/search/a/pagina-3.htm"
        ]
    );
    // Without the selector (and without rel="next") there is no next page to follow.
    let dir2 = tempfile::tempdir().unwrap();
    let plain = config_text(
        dir2.path(),
        &[("a", portal.search_url("flats", "a"), 10)],
        "",
    );
    let r = pass(&load_config(dir2.path(), &plain), false).await;
    assert_eq!((r[0].pages, r[0].listings.len()), (1, 5));
    portal.shutdown().await;
}

/// When a wait ends, the single probe is page 1 (the probe request class); once it came back
/// good, the same check reads pages 2 and 3 under the spacing, and the next check comes after
/// the interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_is_page_one_and_the_other_pages_follow_in_its_check() {
    let (_dir, portal, cfg) = one_search(3).await;
    let mut watcher = Watcher::new(cfg, vec![], false).unwrap();
    let mut rx = watcher.subscribe();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { watcher.run(stop).await });
    let site_changed = |e: &WatchEvent| {
        matches!(
            e,
            WatchEvent::Reaction(notifio_policy::Reaction::SiteWaiting { .. })
                | WatchEvent::Reaction(notifio_policy::Reaction::SiteCleared { .. })
        )
    };
    portal.set_behaviour("flats", Behaviour::RateLimited { retry_after: None });
    let waiting = next_matching(&mut rx, Duration::from_secs(10), site_changed).await;
    assert!(
        matches!(
            waiting,
            WatchEvent::Reaction(notifio_policy::Reaction::SiteWaiting { .. })
        ),
        "{waiting:?}"
    );
    let refused_at = fake_portal_now();
    portal.set_behaviour("flats", Behaviour::Normal);
    let cleared = next_matching(&mut rx, Duration::from_secs(10), site_changed).await;
    assert!(
        matches!(
            cleared,
            WatchEvent::Reaction(notifio_policy::Reaction::SiteCleared { .. })
        ),
        "{cleared:?}"
    );
    // Let the check after the probe run: interval 1 s.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    let after = requests(&portal, "flats", refused_at);
    println!("{after:?}");
    assert!(
        after.len() >= 4,
        "the probe's check, then the next: {after:?}"
    );
    let paths: Vec<&str> = after.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(
        paths[..4],
        [
            "/search/a",
            "/search/a?page=2",
            "/search/a?page=3",
            "/search/a"
        ],
        "the probe, its other pages, then the next check from page 1"
    );
    for w in after[..3].windows(2) {
        assert!(
            w[1].0 >= w[0].0 + SPACING_MS - JITTER_MS,
            "spaced: {after:?}"
        );
    }
    assert!(
        after[3].0 >= after[0].0 + 900 - JITTER_MS,
        "after the interval"
    );
    portal.shutdown().await;
}

/// `check` after a refusal on page 2 and its wait: the probe reads page 1, and once it has
/// cleared the site the same check reads the other pages under the spacing; `check` reports
/// what was read, not "waiting" (issue 40.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_reports_what_it_read_and_the_check_reads_the_other_pages() {
    let (dir, portal, cfg) = one_search(3).await;
    pass(&cfg, false).await;
    portal.set_behaviour(
        "flats",
        Behaviour::After(1, Box::new(Behaviour::RateLimited { retry_after: None })),
    );
    let refused = pass(&cfg, false).await;
    assert_eq!(
        refused[0].outcome.as_str(),
        "rate_limited",
        "{:?}",
        refused[0]
    );
    portal.set_behaviour("flats", Behaviour::Normal);
    // The wait (the ladder's 1 s, ±15%) ends.
    let until = crate::util::backoff(dir.path())[0].1["next_retry_at"]
        .as_u64()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(
        until.saturating_sub(fake_portal_now()) + 50,
    ))
    .await;
    let from = fake_portal_now();
    let probed = pass(&cfg, false).await;
    let r = &probed[0];
    println!("{r:?}");
    assert_eq!((r.outcome.as_str(), r.pages), ("ok", 3), "{r:?}");
    assert_eq!(r.listings.len(), 12);
    let log = requests(&portal, "flats", from);
    let paths: Vec<&str> = log.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(paths, ["/search/a", "/search/a?page=2", "/search/a?page=3"]);
    for w in log.windows(2) {
        assert!(w[1].0 >= w[0].0 + SPACING_MS - JITTER_MS, "spaced: {log:?}");
    }
    assert!(
        crate::util::backoff(dir.path()).is_empty(),
        "the site is clear"
    );
    portal.shutdown().await;
}

/// Now as the fake portal stamps its request log (ms since the epoch).
fn fake_portal_now() -> u64 {
    notifio::clock::now().as_millis()
}
