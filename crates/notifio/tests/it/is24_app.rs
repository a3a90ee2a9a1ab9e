//! ImmobilienScout24 through its app's request (`fetch = "app"`), end to end, against a fake of
//! the app endpoint on 127.0.0.1 (the fake portal's `POST /search/list`, `app_api` pointing at
//! it) that records exactly what it gets: through the real `notifio check` binary and through
//! the watcher. The site key stays `immobilienscout24.de` whatever address answers, so its
//! ladders, spacing and single probe are the ones that apply.

use crate::util::next_matching;
use fake_portal::{Behaviour, Portal, RecordedRequest, SiteSpec};
use notifio::config;
use notifio::extract::immoscout24_app::{APP_BODY, USER_AGENT};
use notifio::notify::ChannelKind;
use notifio::watch::{WatchEvent, Watcher};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The web search a user copies from their browser: Berlin flats to rent under 1,200 €, two
/// rooms or more, with the website's tracking parameter and one filter the app does not take.
const WEB: &str = "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten?price=-1200.0&numberofrooms=2.0-&enteredFrom=result_list&listingtags=holzbalken";

/// What the app is asked for that search (without the page number): region, kind, the
/// website's default exclusion of swap flats, the filters, newest first.
const APP_QUERY: &str = "searchType=region&realestatetype=apartmentrent&geocodes=%2Fde%2Fberlin%2Fberlin&exclusioncriteria=swapflat&price=-1200.0&numberofrooms=2.0-&sorting=-firstactivation";

const SPACING_MS: u64 = 250;
/// The longest wait for a watcher's event.
const LIMIT: Duration = Duration::from_secs(10);

/// 7 listings for Berlin, 5 a page: two pages of the app's result list.
fn endpoint() -> SiteSpec {
    SiteSpec {
        listings: 0,
        per_page: 5,
        pages: 2,
        ..SiteSpec::new("is24")
    }
}

fn config_text(state_dir: &Path, portal: &Portal, interval: &str, pages: u32) -> String {
    format!(
        "[watch]\ninterval = \"{interval}\"\nspacing = \"{SPACING_MS}ms\"\nstate_dir = {:?}\ndashboard = false\n\n\
         [backoff]\nrate_limited = [\"1s\"]\ndenied = [\"1s\"]\n\n[retry.search]\ninitial = \"10ms\"\n\n\
         [site.\"immobilienscout24.de\"]\napp_api = \"{}/\"\n\n\
         [[search]]\nname = \"berlin\"\nurl = \"{WEB}\"\npages = {pages}\n",
        state_dir.display().to_string(),
        portal.base_url("is24")
    )
}

fn seed(portal: &Portal, n: usize) {
    for _ in 0..n {
        portal.add_listing("is24", Some("berlin"));
    }
}

/// Asserts one request is the app's search request, page `page`.
#[track_caller]
fn assert_app_request(r: &RecordedRequest, page: Option<u32>) {
    assert_eq!(r.method, "POST");
    let want = match page {
        None => format!("/search/list?{APP_QUERY}"),
        Some(n) => format!("/search/list?{APP_QUERY}&pagenumber={n}"),
    };
    assert_eq!(r.path, want);
    assert_eq!(r.header("user-agent"), Some(USER_AGENT));
    assert!(
        USER_AGENT.contains(" notifio/"),
        "says who asks: {USER_AGENT}"
    );
    assert_eq!(r.header("accept"), Some("application/json"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("cookie"), None, "the app sends no web cookies");
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        body,
        serde_json::from_str::<serde_json::Value>(APP_BODY).unwrap()
    );
    assert_eq!(
        body,
        serde_json::json!({"supportedResultListTypes": [], "userData": {}})
    );
}

/// `notifio check --json` sends the translated request (both pages, spaced), reads the app's
/// answer, says `"via": "app"` and `"pages": 2`, and warns once, at start, about the one
/// parameter it could not carry over.
#[test]
fn check_sends_the_apps_request_and_reads_its_answer() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let portal = rt.block_on(Portal::start(vec![endpoint()])).unwrap();
    seed(&portal, 7);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notifio.toml");
    std::fs::write(&path, config_text(dir.path(), &portal, "30s", 2)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(["check", "--json", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    assert_eq!(
        warnings,
        [
            "warning: search \"berlin\": ImmobilienScout24's app search leaves out `listingtags=holzbalken` (not understood) of this search URL, so it may show listings the web search would not; see docs/sites.md"
        ],
        "{stderr}"
    );
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(line["outcome"], "ok", "{line}");
    assert_eq!(line["via"], "app");
    assert_eq!(line["pages"], 2);
    assert_eq!(line["site"], "immobilienscout24.de");
    assert_eq!(line["url"], WEB, "the search as the user wrote it");
    let listings = line["listings"].as_array().unwrap();
    let want: Vec<String> = (1..=2)
        .flat_map(|p| portal.listings_on_page("is24", "berlin", p))
        .map(|l| l.id)
        .collect();
    let got: Vec<&str> = listings.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(got, want);
    assert_eq!(got.len(), 7);
    let first = portal.listings("is24", "berlin")[0].clone();
    assert_eq!(listings[0]["title"], first.title.as_str());
    assert_eq!(listings[0]["price"], f64::from(first.price));
    assert_eq!(listings[0]["rooms"], f64::from(first.rooms));
    assert_eq!(
        listings[0]["url"],
        format!("https://www.immobilienscout24.de/expose/{}", first.id)
    );

    let seen = portal.requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    println!(
        "what the app endpoint got: {} {}",
        seen[0].method, seen[0].path
    );
    for (name, value) in &seen[0].headers {
        println!("  {name}: {value}");
    }
    println!("  body: {}", seen[0].body);
    let mut names: Vec<&str> = seen[0].headers.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "accept",
            "accept-encoding",
            "accept-language",
            "content-length",
            "content-type",
            "host",
            "user-agent"
        ],
        "nothing else: no cookie, no validators"
    );
    assert_app_request(&seen[0], None);
    assert_app_request(&seen[1], Some(2));
    assert!(
        seen[1].at + 50 >= seen[0].at + SPACING_MS,
        "page 2 {} ms after page 1; spacing is {SPACING_MS} ms",
        seen[1].at - seen[0].at
    );
    rt.block_on(portal.shutdown());
}

/// The watcher on the app: a new listing is announced once; a 429 from the API makes the site
/// (`immobilienscout24.de`) wait, and nothing reaches the endpoint until the wait is over; a
/// 401 is `denied`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_announces_and_the_apis_refusals_are_classified_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![endpoint()]).await.unwrap();
    seed(&portal, 3);
    let path = dir.path().join("notifio.toml");
    std::fs::write(&path, config_text(dir.path(), &portal, "1s", 1)).unwrap();
    let cfg = config::load(&path).unwrap();
    let mut watcher = Watcher::new(cfg, vec![ChannelKind::Mailbox.into()], false).unwrap();
    let mut rx = watcher.subscribe();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { watcher.run(stop).await });

    let baseline = next_matching(&mut rx, LIMIT, |e| {
        matches!(e, WatchEvent::CheckDone { .. })
    })
    .await;
    assert!(
        matches!(
            baseline,
            WatchEvent::CheckDone {
                baseline: true,
                listings: 3,
                ..
            }
        ),
        "{baseline:?}"
    );
    let fresh = portal.add_listing("is24", Some("berlin"));
    let found = next_matching(
        &mut rx,
        LIMIT,
        |e| matches!(e, WatchEvent::CheckDone { new, .. } if !new.is_empty()),
    )
    .await;
    let WatchEvent::CheckDone { site, new, .. } = found else {
        unreachable!()
    };
    assert_eq!(site.as_str(), "immobilienscout24.de");
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].id, fresh.id);
    assert_eq!(
        new[0].url.as_deref(),
        Some(format!("https://www.immobilienscout24.de/expose/{}", fresh.id).as_str())
    );

    // 429 with Retry-After: the site waits at least that long.
    portal.set_behaviour(
        "is24",
        Behaviour::RateLimited {
            retry_after: Some("2".into()),
        },
    );
    let waiting = next_matching(&mut rx, LIMIT, |e| {
        matches!(
            e,
            WatchEvent::Reaction(notifio_policy::Reaction::SiteWaiting { .. })
        )
    })
    .await;
    let WatchEvent::Reaction(notifio_policy::Reaction::SiteWaiting { site, entry, .. }) = waiting
    else {
        unreachable!()
    };
    assert_eq!(site.as_str(), "immobilienscout24.de");
    assert_eq!(entry.kind.as_str(), "rate_limited");
    let refused_at = portal.requests().last().unwrap().at;
    portal.set_behaviour("is24", Behaviour::ServerError(401));
    let denied = next_matching(&mut rx, LIMIT, |e| {
        matches!(
            e,
            WatchEvent::Reaction(notifio_policy::Reaction::SiteWaiting { .. })
        )
    })
    .await;
    let WatchEvent::Reaction(notifio_policy::Reaction::SiteWaiting { entry, .. }) = denied else {
        unreachable!()
    };
    assert_eq!(entry.kind.as_str(), "denied", "401 from the API");
    let after: Vec<u64> = portal
        .requests()
        .iter()
        .map(|r| r.at)
        .filter(|at| *at > refused_at)
        .collect();
    assert_eq!(after.len(), 1, "one probe after the wait: {after:?}");
    assert!(
        after[0] >= refused_at + 2000,
        "the probe came {} ms after the 429, before its Retry-After of 2 s",
        after[0] - refused_at
    );
    cancel.cancel();
    task.await.unwrap().unwrap();

    // Every request was the app's, and the new listing was announced once.
    for r in portal.requests() {
        assert_app_request(&r, None);
    }
    assert_eq!(crate::util::outbox_rows(dir.path(), "mailbox"), 1);
    portal.shutdown().await;
}
