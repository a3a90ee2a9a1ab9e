//! End to end: the real watcher against the fake portal on loopback, with a temp state dir and
//! short ladders set in config. Time is real here (the subject is the wall-clock behaviour of
//! the driver), but every wait is a few hundred ms to a few seconds.

use crate::util::{RawServer, check_once, load_config, next_matching, raw_response, search_toml};
use fake_portal::{Behaviour, Portal, SiteSpec};
use notifio::config;
use notifio::notify::{ChannelKind, ChannelName};
use notifio::store::Store;
use notifio::watch::{WatchEvent, Watcher};
use notifio_policy::Reaction;
use std::path::Path;
use std::time::Duration;
use tokio::sync::broadcast::Receiver;
use tokio_util::sync::CancellationToken;

fn config_text(
    state_dir: &Path,
    portal: &Portal,
    site: &str,
    searches: usize,
    interval: &str,
) -> String {
    let mut t = format!(
        "[watch]\ninterval = \"{interval}\"\nspacing = \"100ms\"\nconcurrency = 4\nstate_dir = {:?}\ndashboard = false\n\n\
         [backoff]\nchallenge = [\"1s\"]\nrate_limited = [\"1s\", \"2s\"]\ndenied = [\"1s\"]\nerror = [\"1s\"]\n\n\
         [retry.search]\ninitial = \"10ms\"\n\n",
        state_dir.display().to_string()
    );
    for i in 0..searches {
        t.push_str(&search_toml(
            &format!("search {i}"),
            &portal.search_url(site, &format!("s{i}")),
        ));
    }
    t
}

/// A watcher running in the background.
type WatchTask =
    tokio::task::JoinHandle<Result<Vec<notifio::watch::PassResult>, notifio::watch::WatchError>>;

/// Starts a watcher on `cfg` in the background, notifying `channels`: its events, the token
/// that stops it, and its task.
fn spawn_watcher(
    cfg: config::Config,
    channels: Vec<ChannelName>,
) -> (Receiver<WatchEvent>, CancellationToken, WatchTask) {
    let mut watcher = Watcher::new(cfg, channels, false).unwrap();
    let rx = watcher.subscribe();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { watcher.run(stop).await });
    (rx, cancel, task)
}

fn portal_site(name: &str) -> SiteSpec {
    SiteSpec {
        name: name.into(),
        listings: 30,
        page_bytes: 40_000,
        ..SiteSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_listing_is_recorded_once_and_announced_once() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![portal_site("flats")]).await.unwrap();
    let cfg = load_config(
        dir.path(),
        &config_text(dir.path(), &portal, "flats", 1, "200ms"),
    );
    let (mut rx, cancel, task) = spawn_watcher(cfg, vec![ChannelKind::Mailbox.into()]);

    let baseline = next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::CheckDone { .. })
    })
    .await;
    let WatchEvent::CheckDone {
        baseline: true,
        listings: 30,
        new,
        ..
    } = baseline
    else {
        panic!("first check must be a 30-listing baseline: {baseline:?}")
    };
    assert_eq!(new.len(), 0, "a baseline announces nothing");

    let added = portal.add_listing("flats", None);
    let found = next_matching(
        &mut rx,
        Duration::from_secs(10),
        |e| matches!(e, WatchEvent::CheckDone { new, .. } if !new.is_empty()),
    )
    .await;
    let WatchEvent::CheckDone { new, .. } = found else {
        unreachable!()
    };
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].id, added.id);
    // Later checks see it again (or get a 304: the page has not changed) without announcing it.
    for _ in 0..2 {
        let again = next_matching(&mut rx, Duration::from_secs(10), |e| {
            matches!(e, WatchEvent::CheckDone { .. })
        })
        .await;
        let WatchEvent::CheckDone { new, .. } = again else {
            unreachable!()
        };
        assert!(new.is_empty(), "seen before: not new");
    }
    let conditional = portal
        .requests()
        .iter()
        .filter(|r| {
            r.headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("if-none-match"))
        })
        .count();
    assert!(conditional >= 2, "repeat checks use conditional requests");
    cancel.cancel();
    task.await.unwrap().unwrap();

    let store = Store::open(dir.path()).unwrap();
    let rows: i64 = store
        .conn()
        .query_row("SELECT COUNT(*) FROM listings", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 31);
    let outbox: i64 = store
        .conn()
        .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        outbox, 1,
        "one notification row for the one new listing on the one channel"
    );
    portal.shutdown().await;
}

/// The seed's bug as a regression test: five searches on one site, the site answers 429 with
/// Retry-After: 3. After the refusal no request reaches the site until the wait has passed,
/// then exactly one probe, then the siblings, spaced out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_searches_on_a_refusing_site_wait_together_and_come_back_through_one_probe() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![portal_site("busy")]).await.unwrap();
    let cfg = load_config(
        dir.path(),
        &config_text(dir.path(), &portal, "busy", 5, "300ms"),
    );
    let (mut rx, cancel, task) = spawn_watcher(cfg, vec![]);

    // Let all five take their baseline, then the site starts refusing.
    for _ in 0..5 {
        next_matching(&mut rx, Duration::from_secs(10), |e| {
            matches!(e, WatchEvent::CheckDone { .. })
        })
        .await;
    }
    portal.set_behaviour(
        "busy",
        Behaviour::RateLimited {
            retry_after: Some("3".into()),
        },
    );
    let waiting = next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::Reaction(Reaction::SiteWaiting { .. }))
    })
    .await;
    let WatchEvent::Reaction(Reaction::SiteWaiting {
        entry, searches, ..
    }) = waiting
    else {
        unreachable!()
    };
    assert_eq!(searches, 5, "all five searches wait on the one site");
    assert_eq!(entry.failures, 1);
    let refused_at = portal
        .requests()
        .iter()
        .filter(|r| r.site == "busy")
        .map(|r| r.at)
        .max()
        .unwrap();
    // The site recovers before our wait ends; we must still not knock early.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    portal.set_behaviour("busy", Behaviour::Normal);
    let probe = next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::CheckStarted { probe: true, .. })
    })
    .await;
    let WatchEvent::CheckStarted {
        searches: probe_searches,
        ..
    } = probe
    else {
        unreachable!()
    };
    assert_eq!(probe_searches.len(), 1, "exactly one search is the probe");
    next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::Reaction(Reaction::SiteCleared { .. }))
    })
    .await;
    // Let the four siblings go out again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    cancel.cancel();
    task.await.unwrap().unwrap();

    let after: Vec<u64> = portal
        .requests()
        .iter()
        .filter(|r| r.site == "busy" && r.at > refused_at)
        .map(|r| r.at)
        .collect();
    assert!(
        after.len() >= 5,
        "the probe and then the siblings: {after:?}"
    );
    assert!(
        after[0] >= refused_at + 3000,
        "first request {} ms after the refusal, before Retry-After 3s passed",
        after[0] - refused_at
    );
    // The probe was alone: the next request came only after it was answered and spaced.
    // Times are the portal's arrival times, so allow loopback jitter under load (the exact
    // spacing is proven on a virtual clock in notifio-policy's scheduler tests).
    const JITTER: u64 = 50;
    assert!(
        after[1] + JITTER >= after[0] + 100,
        "a sibling went out {} ms after the probe",
        after[1] - after[0]
    );
    for w in after.windows(2) {
        assert!(
            w[1] + JITTER >= w[0] + 100,
            "two requests {} ms apart: spacing is 100 ms",
            w[1] - w[0]
        );
    }
    portal.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_during_a_wait_does_not_knock_early() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![portal_site("strict")]).await.unwrap();
    let text = config_text(dir.path(), &portal, "strict", 2, "300ms");
    let (mut rx, cancel, task) = spawn_watcher(load_config(dir.path(), &text), vec![]);
    next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::CheckDone { .. })
    })
    .await;
    portal.set_behaviour(
        "strict",
        Behaviour::RateLimited {
            retry_after: Some("3".into()),
        },
    );
    next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::Reaction(Reaction::SiteWaiting { .. }))
    })
    .await;
    let refused_at = portal
        .requests()
        .iter()
        .filter(|r| r.site == "strict")
        .map(|r| r.at)
        .max()
        .unwrap();
    cancel.cancel();
    task.await.unwrap().unwrap();
    portal.set_behaviour("strict", Behaviour::Normal);

    // A new process (a new watcher on the same state dir) keeps the wait.
    let (mut rx, cancel, task) = spawn_watcher(load_config(dir.path(), &text), vec![]);
    next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::Reaction(Reaction::SiteCleared { .. }))
    })
    .await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    let after: Vec<u64> = portal
        .requests()
        .iter()
        .filter(|r| r.site == "strict" && r.at > refused_at)
        .map(|r| r.at)
        .collect();
    assert!(!after.is_empty());
    assert!(
        after[0] >= refused_at + 3000,
        "restart knocked {} ms after the refusal",
        after[0] - refused_at
    );
    portal.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_one_pass_reports_every_search_and_skips_a_waiting_site() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![portal_site("a"), portal_site("b")])
        .await
        .unwrap();
    // A wait long enough that the second pass surely falls inside it, however slow the machine.
    let mut text = config_text(dir.path(), &portal, "a", 2, "30s")
        .replace("denied = [\"1s\"]", "denied = [\"1m\"]");
    text.push_str(&search_toml("on b", &portal.search_url("b", "x")));
    portal.set_behaviour("b", Behaviour::Forbidden);
    let results = check_once(load_config(dir.path(), &text)).await;
    assert_eq!(results.len(), 3);
    let by_name = |n: &str| results.iter().find(|r| r.search == n).unwrap();
    assert_eq!(by_name("search 0").outcome.as_str(), "ok");
    assert_eq!(by_name("search 0").listings.len(), 30);
    assert_eq!(by_name("on b").outcome.as_str(), "denied");
    assert_eq!(by_name("on b").status, Some(403));
    assert!(by_name("on b").next_retry_at.is_some());

    // A second pass skips b (waiting) without a request.
    let before = portal.request_count("b");
    let results = check_once(load_config(dir.path(), &text)).await;
    assert_eq!(
        results
            .iter()
            .find(|r| r.search == "on b")
            .unwrap()
            .outcome
            .as_str(),
        "waiting"
    );
    let after: Vec<_> = portal
        .requests()
        .into_iter()
        .filter(|r| r.site == "b")
        .collect();
    assert_eq!(
        after.len(),
        before,
        "a waiting site gets no request from `check`: {after:#?}"
    );
    portal.shutdown().await;
}

/// A site with cookies that starts redirecting to its login page: the site is paused (no
/// ladder, no more requests), the user is told once, and a restart keeps it paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_pauses_the_site_and_notifies_once() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![portal_site("members")]).await.unwrap();
    let cookies = dir.path().join("members.cookies.txt");
    std::fs::write(
        &cookies,
        "# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tsecret-value\n",
    )
    .unwrap();
    // A cookies file is a session: readable by its owner only, or it is refused.
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&cookies, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let site_key = notifio_policy::SiteKey::from_url(&portal.base_url("members")).unwrap();
    let mut text = config_text(dir.path(), &portal, "members", 2, "200ms");
    text.push_str(&format!(
        "[site.\"{site_key}\"]\ncookies = {:?}\n",
        cookies.display().to_string()
    ));
    let cfg = load_config(dir.path(), &text);
    let (mut rx, cancel, task) = spawn_watcher(cfg, vec![ChannelKind::Mailbox.into()]);
    next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::CheckDone { .. })
    })
    .await;
    portal.set_behaviour("members", Behaviour::LoginRedirect);
    next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::Reaction(Reaction::SessionExpired { .. }))
    })
    .await;
    let paused_at = portal.request_count("members");
    tokio::time::sleep(Duration::from_millis(800)).await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    // Redirect target (/login) may be fetched once by the client following the redirect.
    assert!(
        portal.request_count("members") <= paused_at + 1,
        "a paused site gets no more checks"
    );
    // The cookie value was sent (only to its site) and never stored.
    assert!(portal.requests().iter().any(|r| {
        r.headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("cookie") && v.contains("session=secret-value"))
    }));
    let db = std::fs::read(dir.path().join("notifio.db")).unwrap();
    assert!(
        !db.windows(12).any(|w| w == b"secret-value"),
        "cookie values never reach the database"
    );

    let store = Store::open(dir.path()).unwrap();
    let alerts: i64 = store
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM outbox WHERE payload LIKE '%session_expired%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(alerts, 1, "one notification per episode");
    drop(store);

    // After a restart the site is still paused: no request at all.
    let before = portal.request_count("members");
    let cfg = load_config(dir.path(), &text);
    let (_events, cancel, task) = spawn_watcher(cfg, vec![ChannelKind::Mailbox.into()]);
    tokio::time::sleep(Duration::from_millis(600)).await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(portal.request_count("members"), before);
    let store = Store::open(dir.path()).unwrap();
    let alerts: i64 = store
        .conn()
        .query_row(
            "SELECT COUNT(*) FROM outbox WHERE payload LIKE '%session_expired%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(alerts, 1, "still one notification after the restart");
    portal.shutdown().await;
}

/// The last good page is remembered across processes: a second `check` sends the validators
/// (the server answers 304), a server without validators sends the same bytes and they are not
/// parsed again, a changed page is read in full, and new extraction rules drop the memo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_page_is_not_read_again_even_by_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![
        portal_site("tagged"),
        SiteSpec {
            validators: false,
            ..portal_site("plain")
        },
    ])
    .await
    .unwrap();
    let mut text = config_text(dir.path(), &portal, "tagged", 1, "30s");
    text.push_str(&format!(
        "[[search]]\nname = \"plain\"\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
        portal.search_url("plain", "x")
    ));
    let pass = |text: &str, fresh: bool| {
        let mut w = Watcher::for_one_pass(load_config(dir.path(), text), vec![], false).unwrap();
        if fresh {
            w.forget_pages();
        }
        async move { w.run(CancellationToken::new()).await.unwrap() }
    };
    let by = |r: &[notifio::watch::PassResult], n: &str| {
        r.iter().find(|x| x.search == n).unwrap().clone()
    };
    let last_request = |site: &str| {
        portal
            .requests()
            .into_iter()
            .rev()
            .find(|r| r.site == site && r.path.starts_with("/search/"))
            .unwrap()
    };

    let first = pass(&text, false).await;
    for name in ["search 0", "plain"] {
        let r = by(&first, name);
        assert!(!r.unchanged && r.listings.len() == 30, "{r:?}");
    }
    assert!(last_request("tagged").header("if-none-match").is_none());

    // A new process: the validators come from the store, the plain page is the same bytes.
    let second = pass(&text, false).await;
    let (tagged, plain) = (by(&second, "search 0"), by(&second, "plain"));
    assert_eq!((tagged.status, tagged.unchanged), (Some(304), true));
    assert!(last_request("tagged").header("if-none-match").is_some());
    assert_eq!(
        (plain.status, plain.unchanged, plain.outcome.as_str()),
        (Some(200), true, "ok")
    );
    assert!(plain.listings.is_empty(), "not parsed again");

    // A change is read in full and its listing is new.
    let added = portal.add_listing("plain", Some("x"));
    let third = pass(&text, false).await;
    let plain = by(&third, "plain");
    assert!(!plain.unchanged);
    assert_eq!(plain.new, vec![added.id.clone()]);

    // Other extraction rules: the same page may hold other listings, so it is read again.
    let changed_rules = text.replace(
        "{ selector = \"article.listing\", id_attr = \"data-id\" }",
        "{ selector = \"article.listing\" }",
    );
    let fourth = pass(&changed_rules, false).await;
    for name in ["search 0", "plain"] {
        let r = by(&fourth, name);
        assert!(!r.unchanged && !r.listings.is_empty(), "{r:?}");
    }

    // `check --fresh` reads everything again.
    let fifth = pass(&changed_rules, true).await;
    assert!(fifth.iter().all(|r| !r.unchanged && !r.listings.is_empty()));
    portal.shutdown().await;
}

/// Ordinary checks (a 304, nothing new) keep their history rows in memory and write them
/// together: far fewer commits than checks. Nothing is lost: the rows reach the disk within
/// about a second while the watcher runs, and all of them on a clean stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_checks_share_commits_and_every_row_reaches_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![portal_site("flats")]).await.unwrap();
    let text = config_text(dir.path(), &portal, "flats", 4, "100ms")
        .replace("spacing = \"100ms\"", "spacing = \"20ms\"");
    let cfg = load_config(dir.path(), &text);
    let (mut rx, cancel, task) = spawn_watcher(cfg, vec![ChannelKind::Mailbox.into()]);

    // The first pass reads four new pages (each commits on its own).
    let mut checks = 0usize;
    while checks < 4 {
        next_matching(&mut rx, Duration::from_secs(10), |e| {
            matches!(e, WatchEvent::CheckDone { .. })
        })
        .await;
        checks += 1;
    }
    // Then count commits (another connection sees `data_version` change on each) against
    // ordinary checks for a while.
    let reader = Store::open_existing(&Store::file_in(dir.path())).unwrap();
    let version = || -> i64 {
        reader
            .conn()
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .unwrap()
    };
    let (mut commits, mut last, mut ordinary) = (0usize, version(), 0usize);
    let until = tokio::time::Instant::now() + Duration::from_millis(2500);
    while tokio::time::Instant::now() < until {
        if let Ok(Ok(WatchEvent::CheckDone { .. })) =
            tokio::time::timeout(Duration::from_millis(5), rx.recv()).await
        {
            ordinary += 1;
        }
        let v = version();
        if v != last {
            commits += 1;
            last = v;
        }
    }
    assert!(ordinary >= 10, "checks went on: {ordinary}");
    assert!(
        commits * 3 <= ordinary,
        "{commits} commits for {ordinary} ordinary checks: they should share commits"
    );
    // Written without a stop, within about a second.
    let written = || -> usize {
        reader
            .conn()
            .query_row("SELECT COUNT(*) FROM checks", [], |r| r.get::<_, i64>(0))
            .unwrap() as usize
    };
    let seen = checks + ordinary;
    tokio::time::timeout(Duration::from_secs(5), async {
        while written() < seen {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("kept rows are written within a few seconds while watching");
    // A clean stop writes every one (checks that finish after the last event are counted too).
    cancel.cancel();
    while let Ok(ev) = rx.recv().await {
        if matches!(ev, WatchEvent::CheckDone { .. }) {
            ordinary += 1;
        }
    }
    task.await.unwrap().unwrap();
    assert_eq!(written(), checks + ordinary, "one history row per check");
    portal.shutdown().await;
}

/// A page over a megabyte is parsed off the worker thread (on the blocking pool): its listings
/// come out the same as an ordinary page's, in the same pass.
#[tokio::test]
async fn a_page_over_a_megabyte_is_read_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let big = SiteSpec {
        page_bytes: 1_500_000,
        ..portal_site("big")
    };
    let portal = Portal::start(vec![big, portal_site("small")])
        .await
        .unwrap();
    let mut text = config_text(dir.path(), &portal, "big", 1, "30s");
    text.push_str(&search_toml("on small", &portal.search_url("small", "x")));
    let results = check_once(load_config(dir.path(), &text)).await;
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(r.outcome.as_str(), "ok", "{}", r.search);
        assert_eq!(r.listings.len(), 30, "{}", r.search);
    }
    let big_page = portal
        .requests()
        .into_iter()
        .filter(|r| r.site == "big")
        .count();
    assert_eq!(big_page, 1);
    portal.shutdown().await;
}

/// A search on one site whose page redirects to another site that is waiting after a refusal:
/// the redirect is not followed while the wait runs (the waiting site sees nothing from us),
/// and the search's own site is not blamed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_does_not_lead_into_a_waiting_site() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![portal_site("waiting")]).await.unwrap();
    portal.set_behaviour(
        "waiting",
        Behaviour::RateLimited {
            retry_after: Some("3".into()),
        },
    );
    let other = RawServer::start(raw_response(
        "200 OK",
        &[],
        "<html><body><article class=\"listing\" data-id=\"1\">flat</article></body></html>",
    ))
    .await;
    let mut text = config_text(dir.path(), &portal, "waiting", 1, "300ms");
    text.push_str(&search_toml(
        "via redirect",
        &format!("{}/search/r", other.url),
    ));
    let (mut rx, cancel, task) = spawn_watcher(load_config(dir.path(), &text), vec![]);

    next_matching(&mut rx, Duration::from_secs(10), |e| {
        matches!(e, WatchEvent::Reaction(Reaction::SiteWaiting { .. }))
    })
    .await;
    let refused_at = portal.requests().iter().map(|r| r.at).max().unwrap();
    // From now on the other site's page redirects into the waiting one.
    let location = format!("Location: {}", portal.search_url("waiting", "via-redirect"));
    other.answer(raw_response("302 Found", &[location.as_bytes()], ""));
    let before = other.connections();
    let mut outcomes = Vec::new();
    let _ = tokio::time::timeout(Duration::from_millis(2000), async {
        loop {
            if let Ok(WatchEvent::CheckDone {
                searches, outcome, ..
            }) = rx.recv().await
                && searches.iter().any(|s| s == "via redirect")
            {
                outcomes.push(outcome);
            }
        }
    })
    .await;
    cancel.cancel();
    task.await.unwrap().unwrap();

    let inside: Vec<u64> = portal
        .requests()
        .iter()
        .filter(|r| r.at > refused_at && r.at < refused_at + 3000)
        .map(|r| r.at - refused_at)
        .collect();
    assert!(
        inside.is_empty(),
        "requests reached the waiting site {inside:?} ms after its refusal"
    );
    let checked = other.connections() - before;
    assert!(
        checked >= 3,
        "the redirecting search was checked {checked} times"
    );
    // Each check of the redirecting search ended as "nothing learnt", not as an error or a
    // refusal of its own site.
    let held: Vec<_> = outcomes.iter().skip(1).collect();
    assert!(!held.is_empty(), "{outcomes:?}");
    assert!(
        held.iter().all(|o| **o == notifio_policy::Outcome::Held),
        "{outcomes:?}"
    );
    portal.shutdown().await;
}

/// Changing how a search identifies its listings (here: dropping `id_attr`, so the card's link
/// becomes the id) gives every listing a new id. The same links mean the same listings: the
/// next check announces nothing, keeps their first-seen times, and a listing that really is
/// new is still announced, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_id_rule_does_not_announce_the_page_again() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![portal_site("flats")]).await.unwrap();
    let by_attr = config_text(dir.path(), &portal, "flats", 1, "30s");
    let by_link = by_attr.replace(", id_attr = \"data-id\"", "");
    assert_ne!(by_attr, by_link);
    let pass = |text: &str| {
        let cfg = load_config(dir.path(), text);
        async move { check_once(cfg).await.remove(0) }
    };
    let first_seen = |store: &Store| -> Vec<(String, u64)> {
        let mut stmt = store
            .conn()
            .prepare("SELECT url, first_seen FROM listings ORDER BY url, first_seen")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };

    let first = pass(&by_attr).await;
    assert_eq!(first.listings.len(), 30);
    assert!(
        !first.listings[0].listing.id.starts_with("http"),
        "{first:?}"
    );
    let before = first_seen(&Store::open(dir.path()).unwrap());

    let second = pass(&by_link).await;
    assert_eq!(second.outcome.as_str(), "ok");
    assert!(!second.unchanged, "a changed rule reads the page again");
    assert_eq!(second.listings.len(), 30);
    assert!(
        second.listings[0].listing.id.starts_with("http"),
        "{second:?}"
    );
    assert_eq!(second.new, Vec::<String>::new(), "same links: nothing new");
    // Each link now has two rows (old id, new id), both first seen at the first pass.
    let after = first_seen(&Store::open(dir.path()).unwrap());
    assert_eq!(after.len(), 60);
    let doubled: Vec<_> = before.iter().flat_map(|r| [r.clone(), r.clone()]).collect();
    assert_eq!(after, doubled);

    let added = portal.add_listing("flats", None);
    let third = pass(&by_link).await;
    assert_eq!(third.new.len(), 1, "{third:?}");
    assert!(third.new[0].ends_with(&format!("/listing/{}", added.id)));
    portal.shutdown().await;
}

/// Only a link that one listing alone has on the page says who it is: cards that all link to
/// one page (a contact form) stay told apart by their ids, so a new one is still announced.
#[test]
fn a_link_shared_by_several_cards_does_not_hide_a_new_listing() {
    use notifio::listing::Listing;
    use notifio::store::{CheckRecord, SearchSync};
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let site = notifio_policy::SiteKey::from_url("https://flats.example/").unwrap();
    let ids = store
        .sync_searches(&[SearchSync {
            name: "s".into(),
            url: "https://flats.example/search".into(),
            site: site.to_string(),
            rules: "r".into(),
        }])
        .unwrap();
    let searches = [(ids[0], "s".to_owned(), false)];
    let card = |id: &str, url: &str| Listing {
        id: id.into(),
        url: Some(url.into()),
        ..Listing::default()
    };
    let mut record = |now: u64, listings: &[Listing]| {
        store
            .transaction(|tx| {
                tx.record_check(&CheckRecord {
                    searches: &searches,
                    site: &site,
                    outcome: notifio_policy::Outcome::Ok,
                    status: Some(200),
                    attempts: 1,
                    latency_ms: 1,
                    listings: Some(listings),
                    pages: &[],
                    now,
                    channels: &[],
                    history: 10,
                    rules: &[],
                    gone_after: 3,
                })
            })
            .unwrap()
    };
    let contact = "https://flats.example/contact";
    let own = "https://flats.example/listing/9";
    let baseline = record(1, &[card("1", contact), card("2", contact), card("9", own)]);
    assert!(baseline.baseline);
    // "3" shares the contact link with "1" on this page: it is new. "9b" is "9" re-keyed.
    let next = record(
        2,
        &[card("1", contact), card("3", contact), card("9b", own)],
    );
    let new: Vec<_> = next.new.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(new, ["3"]);
    assert_eq!(next.rekeyed, 1);
    // A listing without a link and a new id is new.
    let last = record(
        3,
        &[Listing {
            id: "4".into(),
            ..Listing::default()
        }],
    );
    assert_eq!(last.new.len(), 1);
    assert_eq!(last.rekeyed, 0);
}

/// Sites that accept the connection and then never answer cannot hold the others up: with
/// `concurrency = 1`, a check out for half its per-attempt timeout gives its slot back, so the
/// healthy site is checked long before the hanging checks time out. Each hanging site still
/// has its one check in flight and gets no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_sites_do_not_hold_the_concurrency_cap() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![
        portal_site("stuck1"),
        portal_site("stuck2"),
        portal_site("fine"),
    ])
    .await
    .unwrap();
    portal.set_behaviour("stuck1", Behaviour::Hang);
    portal.set_behaviour("stuck2", Behaviour::Hang);
    let mut text = config_text(dir.path(), &portal, "stuck1", 1, "30s")
        .replace("concurrency = 4", "concurrency = 1")
        .replace(
            "[retry.search]\ninitial = \"10ms\"\n",
            "[retry.search]\ninitial = \"10ms\"\ntimeout = \"2s\"\ndeadline = \"4s\"\n",
        );
    assert!(text.contains("concurrency = 1") && text.contains("deadline = \"4s\""));
    text.push_str(&search_toml("on stuck2", &portal.search_url("stuck2", "x")));
    text.push_str(&search_toml("on fine", &portal.search_url("fine", "x")));
    let (mut rx, cancel, task) = spawn_watcher(load_config(dir.path(), &text), vec![]);

    let began = std::time::Instant::now();
    let mut started: Vec<(String, Duration)> = Vec::new();
    let mut ended: Vec<String> = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        while started.len() < 3 {
            match rx.recv().await {
                Ok(WatchEvent::CheckStarted { site, .. }) => {
                    let site = site.to_string();
                    assert!(
                        !started.iter().any(|(s, _)| *s == site),
                        "a second check on {site} before every site had its first"
                    );
                    started.push((site, began.elapsed()));
                }
                Ok(WatchEvent::CheckDone { site, .. }) => ended.push(site.to_string()),
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("event stream ended: {e}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not every site was checked: {started:?}"));
    // Whatever the order, the third check went out while both hanging checks were still out:
    // only the slots they gave back let it go.
    let fine = portal.search_url("fine", "x");
    assert!(
        ended.iter().all(|s| fine.contains(s.as_str())),
        "a hanging check ended before the third start: {ended:?}"
    );
    // Each slow check gives its slot back after 1 s; without that, the third site would wait
    // for a hanging check's 4 s deadline.
    let spread = started[2].1 - started[0].1;
    assert!(
        spread < Duration::from_millis(3000),
        "the cap waited for the hanging checks: {started:?}"
    );
    cancel.cancel();
    task.await.unwrap().unwrap();
    portal.shutdown().await;
}
