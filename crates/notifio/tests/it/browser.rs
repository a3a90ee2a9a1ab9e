//! The dashboard in a real browser: headless Debian chromium driven through chromedriver by
//! fantoccini, against `web::serve` on 127.0.0.1:0. Checks what only a browser can: the
//! countdown ticks client-side, the reason names the refusal kind, and a new listing appears
//! without a reload, and the listings inbox is marked with clicks and keys. Saves `target/dashboard.png` (and a phone-sized one) to look at.
//!
//! Without chromium/chromedriver (`.ci/install-test-deps.sh` installs them) the test skips with a
//! message, except under `CI=true`, where a missing browser is a failure.

use crate::util::free_port;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use futures_util::FutureExt;
use hyper_util::client::legacy::connect::HttpConnector;
use notifio::status::{
    ChannelState, NewListing, RetryStatus, SearchStatus, SiteStatus, StatusView,
};
use notifio::web::{self, DashboardConfig, StatusSource};
use notifio_policy::{Outcome, RefusalKind, SearchState, SiteState};
use tokio_util::sync::CancellationToken;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const WAIT_7M_12S: u64 = 432_000;

fn epoch_ms() -> u64 {
    notifio::clock::now().as_millis()
}

/// A status source over a view the test edits; `now` is the real clock on each call, as the
/// watch loop's would be, so the page's clock offset is ~0 and deadlines are real.
struct TestSource {
    view: Mutex<StatusView>,
}

impl StatusSource for TestSource {
    fn status(&self) -> StatusView {
        let mut v = self.view.lock().unwrap().clone();
        v.now = epoch_ms();
        v
    }
    fn metrics(&self) -> String {
        String::new()
    }
}

fn initial_view(start: u64) -> StatusView {
    let listing = |id: &str, title: &str, price: f64, ago: u64| NewListing {
        id: id.into(),
        title: Some(title.into()),
        price: Some(price),
        currency: Some("EUR".into()),
        url: Some(format!("https://www.immobilienscout24.de/expose/{id}")),
        first_seen: start - ago,
    };
    StatusView {
        now: start,
        soonest: Some(start + WAIT_7M_12S),
        searches: vec![
            SearchStatus {
                id: 3,
                name: "Madrid under 1200".into(),
                url: "https://www.idealista.com/alquiler-viviendas/madrid-madrid/".into(),
                site: "idealista.com".into(),
                state: SearchState::Waiting,
                next_check_at: Some(start + WAIT_7M_12S),
                last_checked_at: Some(start - 48_000),
                last_outcome: Some(Outcome::Challenge),
                new_listings: vec![],
                found: None,
                matched: None,
                reason: None,
                checks_per_hour: None,
                expected_delay_s: None,
                new_per_day: vec![],
                gone: 0,
                stays_online_s: None,
                online_s: vec![],
            },
            SearchStatus {
                id: 4,
                name: "Berlin 2 rooms".into(),
                url: "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten"
                    .into(),
                site: "immobilienscout24.de".into(),
                state: SearchState::Ok,
                next_check_at: Some(start + 21_000),
                last_checked_at: Some(start - 9_000),
                last_outcome: Some(Outcome::Ok),
                new_listings: vec![
                    listing("158221", "2-Zimmer-Altbau in Kreuzberg", 1150.0, 600_000),
                    listing("158007", "Helle Wohnung am Park", 1290.0, 3_900_000),
                ],
                found: Some(30),
                matched: Some(4),
                reason: None,
                checks_per_hour: None,
                expected_delay_s: None,
                new_per_day: vec![],
                gone: 0,
                stays_online_s: None,
                online_s: vec![],
            },
            SearchStatus {
                id: 5,
                name: "Marketplace Valencia".into(),
                url: "https://www.facebook.com/marketplace/valencia/propertyrentals".into(),
                site: "facebook.com".into(),
                state: SearchState::SessionExpired,
                next_check_at: None,
                last_checked_at: Some(start - 1_800_000),
                last_outcome: Some(Outcome::SessionExpired),
                // Titles and links come from third-party pages: this one must stay inert text.
                new_listings: vec![NewListing {
                    id: "evil".into(),
                    title: Some("<img src=x onerror=\"window.__xss=1\">Piso <b>Ruzafa</b>".into()),
                    url: Some("javascript:window.__xss=2".into()),
                    first_seen: start - 2_000_000,
                    ..NewListing::default()
                }],
                found: None,
                matched: None,
                reason: None,
                checks_per_hour: None,
                expected_delay_s: None,
                new_per_day: vec![],
                gone: 0,
                stays_online_s: None,
                online_s: vec![],
            },
        ],
        sites: vec![
            SiteStatus {
                site: "idealista.com".into(),
                state: SiteState::Waiting,
                kind: Some(RefusalKind::Challenge),
                failures: 3,
                rungs: 5,
                next_retry_at: Some(start + WAIT_7M_12S),
                retry_after_ms: Some(300_000),
                lengthened_by_retry_after: true,
                timeline: vec![
                    Outcome::Ok,
                    Outcome::Ok,
                    Outcome::Ok,
                    Outcome::Challenge,
                    Outcome::Challenge,
                    Outcome::Challenge,
                ],
                // Read in the browser, with a display: the page offers "Open in browser".
                login: true,
                budget: None,
                requests_last_hour: None,
                hint: None,
            },
            SiteStatus {
                site: "immobilienscout24.de".into(),
                state: SiteState::Clear,
                timeline: vec![
                    Outcome::Ok,
                    Outcome::RateLimited,
                    Outcome::Ok,
                    Outcome::Error,
                    Outcome::Ok,
                    Outcome::Ok,
                    Outcome::Ok,
                ],
                ..SiteStatus::default()
            },
            SiteStatus {
                site: "facebook.com".into(),
                state: SiteState::SessionExpired,
                timeline: vec![Outcome::Ok, Outcome::SessionExpired],
                ..SiteStatus::default()
            },
        ],
        retry: RetryStatus {
            requests: 412,
            retried: 9,
            attempts: 11,
            final_failures: 2,
            retry_rate: 0.021,
        },
        warnings: vec!["facebook.com logged us out: refresh its cookies file.".into()],
        config: notifio::status::ConfigStatus::default(),
        watcher: notifio::status::WatcherStatus {
            running: true,
            pid: Some(4242),
            check_running: false,
        },
        channels: vec![notifio::status::ChannelStatus {
            name: "telegram".into(),
            state: ChannelState::Failed,
            pending: 2,
            sent: 5,
            last_sent_at: Some(start - 60_000),
            next_attempt_at: None,
            failed_since: Some(start - 1_000),
            last_error: Some(
                "telegram api.telegram.org: HTTP 401 Unauthorized: Unauthorized".into(),
            ),
        }],
    }
}

/// Kills chromedriver (by its own pid) when the test ends, even on a panic.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// "7m 12s" / "45s" / "1h 05m" → seconds.
fn parse_countdown(text: &str) -> u64 {
    text.split_whitespace()
        .map(|part| {
            let (n, unit) = part.split_at(part.len() - 1);
            let n: u64 = n
                .parse()
                .unwrap_or_else(|_| panic!("not a countdown: {text:?}"));
            match unit {
                "h" => n * 3600,
                "m" => n * 60,
                "s" => n,
                _ => panic!("not a countdown: {text:?}"),
            }
        })
        .sum()
}

fn artifact(name: &str) -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp; the screenshot goes beside it, in <target>/.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join(name)
}

/// Whether chromium and chromedriver are missing (then the test skips, except under CI).
fn browser_missing() -> bool {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return false;
    }
    let msg = format!(
        "browser test needs {missing:?}: run .ci/install-test-deps.sh \
         (apt-get install chromium chromium-driver)"
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    true
}

/// chromedriver on a free port and a headless chromium session through it; both end when the
/// returned values are dropped (and `client.close()`).
async fn open_browser() -> (Driver, Client, tempfile::TempDir) {
    let port = free_port();
    let driver = Driver(
        Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let profile = tempfile::tempdir().unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--disable-quic",
                "--disable-dev-shm-usage", "--window-size=1100,1250",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        }),
    );
    // chromedriver speaks plain HTTP on loopback: no TLS, so no rustls crypto provider to pick.
    let client = ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap();
    (driver, client, profile)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_ticks_explains_and_updates_live() {
    if browser_missing() {
        return;
    }
    let start = epoch_ms();
    let source = Arc::new(TestSource {
        view: Mutex::new(initial_view(start)),
    });
    let cancel = CancellationToken::new();
    let cfg = DashboardConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: None,
        hosts: Vec::new(),
    };
    let (addr, server) = web::serve(cfg, source.clone(), cancel.clone())
        .await
        .unwrap();
    let (_driver, client, _profile) = open_browser().await;

    // Run the checks, then always close the session (so chromium exits) before reporting.
    let outcome = std::panic::AssertUnwindSafe(drive(&client, addr, &source))
        .catch_unwind()
        .await;
    close_and_report(&client, outcome, &cancel, server).await;
}

/// The app against a real watcher on the fake portal: a search added with the form shows its
/// first check without a reload, the preview lists the cards a selector finds, and delete
/// (after its confirmation) removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_is_previewed_added_and_deleted_from_the_page() {
    if browser_missing() {
        return;
    }
    let agency = fake_portal::SiteSpec {
        name: "agency".into(),
        listings: 9,
        page_bytes: 20_000,
        ..fake_portal::SiteSpec::default()
    };
    let flats = fake_portal::SiteSpec {
        name: "flats".into(),
        page_bytes: 20_000,
        ..fake_portal::SiteSpec::default()
    };
    let portal = fake_portal::Portal::start(vec![flats, agency])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("notifio.toml");
    std::fs::write(
        &config,
        format!(
            "[watch]\nspacing = \"100ms\"\nstate_dir = {:?}\ndashboard = \"127.0.0.1:0\"\n\
             gone_after = 2\n\n\
             [[search]]\nname = \"Flats\"\nurl = {:?}\ninterval = \"2s\"\n\
             listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
            dir.path().join("state").display().to_string(),
            portal.search_url("flats", "all"),
        ),
    )
    .unwrap();
    let cfg = notifio::config::load(&config).unwrap();
    let (addr, cancel, watcher) = crate::util::run_app(cfg).await;
    let (_driver, client, _profile) = open_browser().await;
    let outcome = std::panic::AssertUnwindSafe(drive_app(&client, addr, &portal, &config))
        .catch_unwind()
        .await;
    close_and_report(&client, outcome, &cancel, watcher).await;
}

async fn drive_app(client: &Client, addr: SocketAddr, portal: &fake_portal::Portal, config: &Path) {
    client.goto(&format!("http://{addr}/")).await.unwrap();
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(r#"[data-search-name="Flats"]"#))
        .await
        .unwrap();
    client
        .execute("window.__notReloaded = true; return true;", vec![])
        .await
        .unwrap();
    let url = portal.search_url("agency", "rooms");
    let form = client.find(Locator::Css("#add")).await.unwrap();
    form.find(Locator::Css("input[name=url]"))
        .await
        .unwrap()
        .send_keys(&url)
        .await
        .unwrap();
    // Leaving the field asks which profile reads the site: none, so the selector is asked for.
    form.find(Locator::Css("input[name=name]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let selector = client
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(
            "#add fieldset.generic:not([hidden]) input[name=selector]",
        ))
        .await
        .expect("a generic site asks for a card selector");
    let profile = form
        .find(Locator::Css("[data-testid=profile]"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(profile.contains("no built-in profile"), "{profile}");
    selector.send_keys("article.listing").await.unwrap();
    form.find(Locator::Css("input[name=id_attr]"))
        .await
        .unwrap()
        .send_keys("data-id")
        .await
        .unwrap();
    form.find(Locator::Css("[data-testid=preview]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(
            r#"[data-testid=preview-outcome][data-outcome="ok"]"#,
        ))
        .await
        .expect("the preview answers");
    let cards = form
        .find_all(Locator::Css("[data-testid=preview-listings] li"))
        .await
        .unwrap();
    let shown = portal.listings("agency", "rooms");
    assert_eq!(
        cards.len(),
        shown.len(),
        "the preview lists every card the selector finds"
    );
    let first = cards[0].text().await.unwrap();
    assert!(shown.iter().any(|l| first.contains(&l.title)), "{first}");
    // Shown, not recorded: the page has no search for it yet.
    assert!(
        client
            .find_all(Locator::Css(r#"[data-search-name="Rooms"]"#))
            .await
            .unwrap()
            .is_empty()
    );

    form.find(Locator::Css("input[name=name]"))
        .await
        .unwrap()
        .send_keys("Rooms")
        .await
        .unwrap();
    form.find(Locator::Css("[data-testid=add]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // Its first check shows on the page, without a reload.
    let checked = client
        .wait()
        .at_most(Duration::from_secs(8))
        .for_element(Locator::Css(
            r#"[data-search-name="Rooms"][data-state="ok"] [data-testid=last-check] .outcome"#,
        ))
        .await
        .expect("the added search's first check appears");
    assert_eq!(checked.text().await.unwrap(), "ok");
    assert!(
        std::fs::read_to_string(config)
            .unwrap()
            .contains("name = \"Rooms\"")
    );
    let kept = client
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(kept, serde_json::Value::Bool(true), "the page was reloaded");
    let png = client.screenshot().await.unwrap();
    std::fs::write(artifact("dashboard-app.png"), png).unwrap();

    // Delete asks first, on the card; then the card goes and the file no longer has it.
    client
        .find(Locator::Css(
            r#"[data-search-name="Rooms"] [data-testid=delete]"#,
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .find(Locator::Css(
            r#"[data-search-name="Rooms"] [data-testid=confirm-delete]"#,
        ))
        .await
        .expect("delete asks for a confirmation")
        .click()
        .await
        .unwrap();
    let start = Instant::now();
    while !client
        .find_all(Locator::Css(r#"[data-search-name="Rooms"]"#))
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the deleted search stayed on the page"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!std::fs::read_to_string(config).unwrap().contains("Rooms"));
}

async fn drive(client: &Client, addr: SocketAddr, source: &TestSource) {
    client.goto(&format!("http://{addr}/")).await.unwrap();
    let waiting = r#"[data-search-id="3"]"#;

    // The first poll has rendered once the waiting search's countdown has text.
    let countdown_sel = format!("{waiting} .countdown");
    let countdown = client
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(&countdown_sel))
        .await
        .unwrap();
    let before = Instant::now();
    let t1 = countdown.text().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    // Re-find: the card is re-rendered on each poll.
    let t2 = client
        .find(Locator::Css(&countdown_sel))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let elapsed = before.elapsed();
    let (s1, s2) = (parse_countdown(&t1), parse_countdown(&t2));
    println!("countdown of the waiting search: {t1:?} then {t2:?}, {elapsed:.1?} later");
    let wait_s = WAIT_7M_12S / 1000;
    assert!(s1 <= wait_s && s1 > wait_s - 30, "{t1}");
    // It must tick down, and by no more than the time that passed (plus one whole second for
    // rounding and the page's 250 ms tick): the deadline is the server's, not a local timer.
    let most = (elapsed.as_secs_f64() + 1.0).ceil() as u64;
    assert!(
        s2 < s1 && s1 - s2 <= most,
        "countdown did not tick with the clock: {t1} → {t2} in {elapsed:?}"
    );

    let reason = client
        .find(Locator::Css(&format!("{waiting} .reason")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    println!("reason: {reason}");
    assert!(
        reason.contains("challenge"),
        "reason lacks the kind: {reason}"
    );
    assert!(reason.contains("idealista.com"), "{reason}");
    assert!(reason.contains("3rd refusal"), "{reason}");
    assert!(reason.contains("next try in 7m"), "{reason}");

    let site = r#"[data-site="idealista.com"]"#;
    let rung = client
        .find(Locator::Css(&format!("{site} .rung")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(rung, "3 of 5");
    let ra = client
        .find(Locator::Css(&format!("{site} [data-testid=retry-after]")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(ra.contains("Retry-After lengthened the wait"), "{ra}");
    // "Open in browser" where the site can be opened for the user, and nowhere else (the
    // facebook.com card's site cannot: no display, or not read in the browser).
    let open = client
        .find_all(Locator::Css("[data-testid=open-in-browser]"))
        .await
        .unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(
        open[0].attr("data-site").await.unwrap().as_deref(),
        Some("idealista.com")
    );
    let dots = client
        .find_all(Locator::Css(&format!("{site} .timeline .dot")))
        .await
        .unwrap();
    assert_eq!(dots.len(), 6);
    let warnings = client
        .find(Locator::Css("#warnings"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        warnings.contains("facebook.com logged us out"),
        "{warnings}"
    );
    let channel = client
        .find(Locator::Css(
            r#"[data-channel="telegram"][data-state="failed"] [data-testid=channel-error]"#,
        ))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        channel.starts_with("Failed permanently: telegram api.telegram.org: HTTP 401 Unauthorized"),
        "{channel}"
    );

    // What the page had and what the search's filters let through.
    let found = client
        .find(Locator::Css(r#"[data-search-id="4"] [data-testid=found]"#))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(found.trim(), "· 30 found · 4 match");
    assert!(
        client
            .find_all(Locator::Css(r#"[data-search-id="3"] [data-testid=found]"#))
            .await
            .unwrap()
            .is_empty(),
        "a search never read says nothing about it"
    );

    // Site-supplied markup is shown as text and a `javascript:` URL is not made a link.
    let evil = r#"[data-search-id="5"] [data-listing-id="evil"]"#;
    let text = client
        .find(Locator::Css(evil))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("<img src=x"), "{text}");
    for tag in ["img", "b", "a"] {
        let found = client
            .find_all(Locator::Css(&format!("{evil} {tag}")))
            .await
            .unwrap();
        assert!(found.is_empty(), "site markup became a <{tag}> element");
    }
    let xss = client
        .execute("return window.__xss === undefined;", vec![])
        .await
        .unwrap();
    assert_eq!(xss, serde_json::Value::Bool(true), "site markup ran script");

    // A marker in the page's JS state survives only if the page is not reloaded.
    client
        .execute("window.__notReloaded = true; return true;", vec![])
        .await
        .unwrap();
    {
        let mut v = source.view.lock().unwrap();
        v.searches[1].new_listings.insert(
            0,
            NewListing {
                id: "new-1".into(),
                title: Some("Ático con terraza, Prenzlauer Berg".into()),
                price: Some(1190.0),
                currency: Some("EUR".into()),
                url: Some("https://www.immobilienscout24.de/expose/new-1".into()),
                first_seen: epoch_ms(),
            },
        );
    }
    let appeared = client
        .wait()
        .at_most(Duration::from_secs(8))
        .for_element(Locator::Css(
            r#"[data-search-id="4"] [data-listing-id="new-1"]"#,
        ))
        .await
        .expect("the new listing did not appear without a reload");
    let text = appeared.text().await.unwrap();
    assert!(text.contains("Ático con terraza"), "{text}");
    let href = appeared
        .find(Locator::Css("a"))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap();
    assert_eq!(
        href.as_deref(),
        Some("https://www.immobilienscout24.de/expose/new-1")
    );
    let kept = client
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .unwrap();
    assert_eq!(kept, serde_json::Value::Bool(true), "the page was reloaded");

    let png = client.screenshot().await.unwrap();
    std::fs::write(artifact("dashboard.png"), png).unwrap();
    client.set_window_size(412, 915).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let png = client.screenshot().await.unwrap();
    std::fs::write(artifact("dashboard-phone.png"), png).unwrap();
    println!("screenshots: {}", artifact("dashboard*.png").display());
}

/// The listings inbox in the page: marked with a click and with keys, kept across a reload
/// (and so in the state database), the hidden one out of the inbox; a let listing shown gone,
/// with the search's lifecycle chart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_are_marked_with_clicks_and_keys_and_stay_marked_after_a_reload() {
    if browser_missing() {
        return;
    }
    let flats = fake_portal::SiteSpec {
        name: "flats".into(),
        listings: 5,
        page_bytes: 10_000,
        ..fake_portal::SiteSpec::default()
    };
    let portal = fake_portal::Portal::start(vec![flats]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("notifio.toml");
    std::fs::write(
        &config,
        format!(
            "[watch]\nspacing = \"100ms\"\nstate_dir = {:?}\ndashboard = \"127.0.0.1:0\"\n\
             gone_after = 2\n\n\
             [[search]]\nname = \"Flats\"\nurl = {:?}\ninterval = \"2s\"\n\
             listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
            dir.path().join("state").display().to_string(),
            portal.search_url("flats", "all"),
        ),
    )
    .unwrap();
    let cfg = notifio::config::load(&config).unwrap();
    let (addr, cancel, watcher) = crate::util::run_app(cfg).await;
    let (_driver, client, _profile) = open_browser().await;
    let outcome = std::panic::AssertUnwindSafe(drive_inbox(&client, addr, &portal))
        .catch_unwind()
        .await;
    close_and_report(&client, outcome, &cancel, watcher).await;
}

/// Always closes the session (so chromium exits) and stops the server or watcher, then
/// reports what the test's drive found.
async fn close_and_report(
    client: &Client,
    outcome: std::thread::Result<()>,
    cancel: &CancellationToken,
    stopped: impl Future,
) {
    let _ = client.clone().close().await;
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), stopped).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The rows of the inbox as (id, state), in order: read in one script, since the list is
/// re-rendered under the test's feet.
const INBOX_ROWS: &str = "return Array.from(document.querySelectorAll('[data-testid=inbox-listing]'))\
                          .map((li) => [li.dataset.id, li.dataset.state]);";

/// Runs `script` in the page until what it returns satisfies `f`, for up to 20 s.
async fn script_until(
    client: &Client,
    what: &str,
    script: &str,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let v = client.execute(script, vec![]).await.unwrap();
        if f(&v) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the inbox's rows satisfy `f`.
async fn inbox_until(
    client: &Client,
    what: &str,
    f: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let rows = |v: &serde_json::Value| -> Vec<(String, String)> {
        serde_json::from_value(v.clone()).unwrap_or_default()
    };
    rows(&script_until(client, what, INBOX_ROWS, |v| f(&rows(v))).await)
}

async fn drive_inbox(client: &Client, addr: SocketAddr, portal: &fake_portal::Portal) {
    client.goto(&format!("http://{addr}/")).await.unwrap();
    let rows = inbox_until(client, "the baseline's five listings", |r| r.len() == 5).await;
    assert!(rows.iter().all(|(_, s)| s == "new"), "{rows:?}");
    let (first, second) = (rows[0].0.clone(), rows[1].0.clone());

    // A click on the first row's favourite button.
    client
        .find(Locator::Css(&format!(
            "[data-testid=inbox-listing][data-id=\"{first}\"] button[data-mark=favourite]"
        )))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    inbox_until(client, "the favourite", |r| {
        r.iter().any(|(id, s)| *id == first && s == "favourite")
    })
    .await;

    // Keys: j moves to the second row (the click selected the first), h hides it, and c marks
    // the row that took its place contacted.
    let body = client.find(Locator::Css("body")).await.unwrap();
    body.send_keys("jh").await.unwrap();
    inbox_until(client, "the hidden listing leaving the inbox", |r| {
        r.len() == 4 && !r.iter().any(|(id, _)| *id == second)
    })
    .await;
    body.send_keys("c").await.unwrap();
    let _ = inbox_until(client, "a contacted listing", |r| {
        r.iter().any(|(_, s)| s == "contacted")
    })
    .await;

    // A reload reads the marks back from the state database.
    client.refresh().await.unwrap();
    let rows = inbox_until(client, "the marks after a reload", |r| r.len() == 4).await;
    let state_of = |id: &str| rows.iter().find(|(i, _)| i == id).map(|(_, s)| s.clone());
    assert_eq!(state_of(&first).as_deref(), Some("favourite"), "{rows:?}");
    assert_eq!(
        state_of(&second),
        None,
        "the hidden listing is out: {rows:?}"
    );
    let contacted: Vec<_> = rows.iter().filter(|(_, s)| s == "contacted").collect();
    assert_eq!(contacted.len(), 1, "{rows:?}");

    // The hidden one is still there under "hidden".
    client
        .find(Locator::Css("[data-testid=inbox-state]"))
        .await
        .unwrap()
        .select_by_value("hidden")
        .await
        .unwrap();
    let rows = inbox_until(client, "the hidden view", |r| r.len() == 1).await;
    assert_eq!(rows[0], (second, "hidden".to_owned()));

    // The favourite is let: two checks (2 s apart) miss it, and "gone" shows it, marked so.
    assert!(portal.remove_listing("flats", &first));
    client
        .find(Locator::Css("[data-testid=inbox-state]"))
        .await
        .unwrap()
        .select_by_value("")
        .await
        .unwrap();
    client
        .find(Locator::Css("[data-testid=inbox-gone]"))
        .await
        .unwrap()
        .select_by_value("true")
        .await
        .unwrap();
    let start = Instant::now();
    let gone = loop {
        let v = client
            .execute(
                "return Array.from(document.querySelectorAll('[data-testid=inbox-listing]'))\
                 .map((li) => [li.dataset.id, li.querySelector('[data-testid=gone]') ? \
                 li.querySelector('[data-testid=gone]').textContent : '']);",
                vec![],
            )
            .await
            .unwrap();
        let rows: Vec<(String, String)> = serde_json::from_value(v).unwrap_or_default();
        if rows.len() == 1 && !rows[0].1.is_empty() {
            break rows;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for the let listing to be gone: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(gone[0].0, first, "{gone:?}");
    assert!(gone[0].1.contains("gone after"), "{gone:?}");
    // The search's card draws its lifecycle and says how long listings stay online.
    let start = Instant::now();
    loop {
        let text = client
            .execute(
                "const e = document.querySelector('[data-testid=stays-online]');\
                 return e ? e.textContent : '';",
                vec![],
            )
            .await
            .unwrap();
        let text = text.as_str().unwrap_or_default().to_owned();
        if text.contains("stay online") {
            assert!(text.contains("on average (1 gone)"), "{text}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the search card shows no lifecycle: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let bars = client
        .execute(
            "return document.querySelectorAll('[data-testid=lifecycle] svg rect').length;",
            vec![],
        )
        .await
        .unwrap();
    assert!(bars.as_u64().unwrap_or(0) >= 2, "bars drawn: {bars}");
}

/// One flat on a page: a card with a photo, as a portal shows it.
fn one_flat_page(id: &str, price: u32) -> Vec<u8> {
    crate::util::raw_response(
        "200 OK",
        &[],
        &format!(
            "<!doctype html><html><body><main>\
             <article class=\"listing\" data-id=\"{id}\"><a href=\"/listing/{id}\">\
             <img src=\"/img/{id}.jpg\" width=\"320\" height=\"240\" alt=\"\">\
             <h2 class=\"title\">Sunny 2-room flat in Lavapiés</h2></a>\
             <span class=\"price\">{price} €</span><span class=\"rooms\">2 hab.</span>\
             <span class=\"area\">64 m²</span><p>Bright, with a balcony.</p></article>\
             </main></body></html>"
        ),
    )
}

/// The inbox row of one flat as the page draws it: its photo, its price history's sparkline
/// after a drop, the twin on another site folded into its "also on", and its mark kept
/// across a hand edit of the config that the watcher applies; and, on the search cards, the
/// budgeted site's plan line and the suggestion for the site that has two searches after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_row_shows_photo_price_history_and_twin_and_keeps_its_mark_across_an_edit() {
    if browser_missing() {
        return;
    }
    let first = crate::util::RawServer::start(one_flat_page("a1", 1200)).await;
    let twin = crate::util::RawServer::start(one_flat_page("b7", 1200)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("notifio.toml");
    let searches = |extra: &str| {
        format!(
            "[watch]\nspacing = \"100ms\"\nstate_dir = {:?}\ndashboard = \"127.0.0.1:0\"\n\n\
             [site.{:?}]\nbudget = \"60/min\"\n\n\
             [[search]]\nname = \"Lavapiés\"\nurl = \"{}/flats\"\ninterval = \"1s\"\n\
             listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n\
             [[search]]\nname = \"Lavapiés elsewhere\"\nurl = \"{}/flats\"\ninterval = \"1s\"\n\
             listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n{extra}",
            dir.path().join("state").display().to_string(),
            twin.url.trim_start_matches("http://"),
            first.url,
            twin.url,
        )
    };
    std::fs::write(&config, searches("")).unwrap();
    let cfg = notifio::config::load(&config).unwrap();
    let (addr, cancel, watcher) = crate::util::run_app(cfg).await;
    let (_driver, client, _profile) = open_browser().await;
    let outcome = std::panic::AssertUnwindSafe(async {
        client.goto(&format!("http://{addr}/")).await.unwrap();
        const ROW: &str = "const li = document.querySelector('[data-testid=inbox-listing]');\
             if (!li) return null;\
             const img = li.querySelector('img.thumb');\
             const spark = li.querySelector('svg.spark polyline');\
             return { n: document.querySelectorAll('[data-testid=inbox-listing]').length,\
               id: li.dataset.id, state: li.dataset.state,\
               img: img ? img.getAttribute('src') : null,\
               spark: spark ? spark.closest('svg').getAttribute('aria-label') : null,\
               points: spark ? spark.getAttribute('points').split(' ').length : 0,\
               also: Array.from(li.querySelectorAll('a.also')).map((a) => a.getAttribute('href')),\
               found: li.querySelector('.found').textContent };";
        let until = |what: &'static str, f: fn(&serde_json::Value) -> bool| {
            script_until(&client, what, ROW, move |v| !v.is_null() && f(v))
        };
        // The same flat on two sites is one row, with its photo and the other site.
        let v = until("one row for the flat and its twin", |v| {
            v["n"] == 1 && v["also"].as_array().is_some_and(|a| a.len() == 1)
        })
        .await;
        let (shown, other) = if v["id"] == "a1" {
            (&first, &twin)
        } else {
            (&twin, &first)
        };
        assert_eq!(
            v["img"].as_str(),
            Some(format!("{}/img/{}.jpg", shown.url, v["id"].as_str().unwrap()).as_str()),
            "the row's thumbnail is the card's photo: {v}"
        );
        assert!(
            v["also"][0].as_str().unwrap().starts_with(&other.url),
            "also on links the twin's page: {v}"
        );
        assert!(v["found"].as_str().unwrap().contains(" · also on "), "{v}");
        assert!(v["spark"].is_null(), "one price is no history: {v}");
        let shown_id = v["id"].clone();

        // The flat gets cheaper on both sites: the row draws its price history.
        first.answer(one_flat_page("a1", 1100));
        twin.answer(one_flat_page("b7", 1100));
        let v = until("the sparkline of the drop", |v| !v["spark"].is_null()).await;
        assert_eq!(v["spark"], "price history: 1200 → 1100", "{v}");
        assert_eq!(v["points"], 2, "{v}");
        assert_eq!(v["n"], 1, "still one flat: {v}");

        // Marked a favourite, then the config is edited by hand: a third search is added.
        client
            .find(Locator::Css(
                "[data-testid=inbox-listing] button[data-mark=favourite]",
            ))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        until("the favourite", |v| v["state"] == "favourite").await;
        std::fs::write(
            &config,
            searches(&format!(
                "\n[[search]]\nname = \"Lavapiés, 2+ rooms\"\nurl = \"{}/two-rooms\"\n\
                 min_rooms = 2\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
                first.url
            )),
        )
        .unwrap();
        let start = Instant::now();
        while !first
            .request_lines()
            .iter()
            .any(|l| l.starts_with("GET /two-rooms"))
        {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the edit was never applied"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        client.refresh().await.unwrap();
        let v = until("the row after the edit and a reload", |v| v["n"] == 1).await;
        assert_eq!(v["state"], "favourite", "the mark survives the edit: {v}");
        assert_eq!(v["id"], shown_id, "the same flat heads the row: {v}");
        // The budgeted site's search says its plan; the other site, with two searches now and
        // no budget, gets the suggestion.
        let plan_and_hint = format!(
            "const plan = document.querySelector('[data-search-name=\"Lavapiés elsewhere\"] \
             [data-testid=plan]');\
             const hint = document.querySelector('[data-site=\"{}\"] [data-testid=site-hint]');\
             return [plan ? plan.textContent : '', hint ? hint.textContent : ''];",
            first.url.trim_start_matches("http://")
        );
        let shown = script_until(&client, "the plan line and the hint", &plan_and_hint, |v| {
            v[0].as_str().is_some_and(|p| !p.is_empty())
                && v[1].as_str().is_some_and(|h| !h.is_empty())
        })
        .await;
        let (plan, hint) = (shown[0].as_str().unwrap(), shown[1].as_str().unwrap());
        assert!(
            plan.starts_with("checked about every ") && plan.contains(" · typically notified within "),
            "{plan}"
        );
        assert!(hint.starts_with("2 searches on "), "{hint}");
    })
    .catch_unwind()
    .await;
    close_and_report(&client, outcome, &cancel, watcher).await;
}

/// A page names pictures on a host of the user's own network (127.0.0.2 here, not the
/// watched site's 127.0.0.1; once as a decimal IPv4 number): the dashboard, rendered in
/// Chromium, shows none of them and asks that host nothing, while the site's own picture
/// still loads, without a referrer (docs/dashboard.md#pictures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_asks_no_private_host_a_page_names_for_a_picture() {
    if browser_missing() {
        return;
    }
    let private = crate::util::RawServer::start_at(
        "127.0.0.2",
        crate::util::raw_response("200 OK", &[], "rebooting"),
    )
    .await;
    let port = private.url.rsplit(':').next().unwrap().to_owned();
    let card = |id: &str, src: &str| {
        format!(
            "<article class=\"listing\" data-id=\"{id}\"><a href=\"/listing/{id}\">\
             <img src=\"{src}\" width=\"320\" height=\"240\" alt=\"\">\
             <h2 class=\"title\">Flat {id}</h2></a><span class=\"price\">1000 €</span></article>"
        )
    };
    let page = format!(
        "<!doctype html><html><body><main>{}{}{}</main></body></html>",
        card("named", &format!("{}/admin/reboot?from=img", private.url)),
        card(
            "decimal",
            &format!("http://2130706434:{port}/admin/reboot?from=decimal")
        ),
        card("own", "/img/own.jpg"),
    );
    let site = crate::util::RawServer::start(crate::util::raw_response("200 OK", &[], &page)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("notifio.toml");
    std::fs::write(
        &config,
        format!(
            "[watch]\nspacing = \"100ms\"\nstate_dir = {:?}\ndashboard = \"127.0.0.1:0\"\n\n\
             [[search]]\nname = \"Flats\"\nurl = \"{}/flats\"\ninterval = \"1s\"\n\
             listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
            dir.path().join("state").display().to_string(),
            site.url,
        ),
    )
    .unwrap();
    let cfg = notifio::config::load(&config).unwrap();
    let (addr, cancel, watcher) = crate::util::run_app(cfg).await;
    let (_driver, client, _profile) = open_browser().await;
    let outcome = std::panic::AssertUnwindSafe(async {
        client.goto(&format!("http://{addr}/")).await.unwrap();
        let rows = script_until(
            &client,
            "the three rows",
            "return Array.from(document.querySelectorAll('[data-testid=inbox-listing]'))\
             .map((li) => { const img = li.querySelector('img');\
               return [li.dataset.id, img ? img.getAttribute('src') : null,\
                       img ? img.getAttribute('referrerpolicy') : null]; });",
            |v| v.as_array().is_some_and(|a| a.len() == 3),
        )
        .await;
        println!("{rows}");
        let row = |id: &str| {
            rows.as_array()
                .unwrap()
                .iter()
                .find(|r| r[0] == id)
                .cloned()
                .unwrap()
        };
        assert_eq!(
            row("own")[1].as_str(),
            Some(format!("{}/img/own.jpg", site.url).as_str()),
            "the site's own picture is shown: {rows}"
        );
        assert_eq!(row("own")[2], "no-referrer", "{rows}");
        for id in ["named", "decimal"] {
            assert!(row(id)[1].is_null(), "a picture on a private host: {rows}");
        }
        // The shown picture was asked for: pictures load here, and none went to 127.0.0.2.
        let start = Instant::now();
        while !site
            .request_lines()
            .iter()
            .any(|l| l.starts_with("GET /img/own.jpg"))
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the site's own picture was never loaded: {:?}",
                site.request_lines()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            private.connections(),
            0,
            "the browser asked the private host: {:?}",
            private.request_lines()
        );
    })
    .catch_unwind()
    .await;
    close_and_report(&client, outcome, &cancel, watcher).await;
}
