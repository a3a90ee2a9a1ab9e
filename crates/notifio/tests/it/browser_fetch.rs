//! The browser fetch path end to end: a real Chromium (Debian's `chromium`, installed by
//! `.ci/run`) reading the fake portal on 127.0.0.1 through the real watcher, with the same
//! ladders, retry and classification as plain HTTP.
//!
//! A test that needs a browser (or Xvfb) it cannot find says so and names the package; under
//! `CI=true` it fails instead.

use crate::util::{check_once, load_config};
use fake_portal::{Behaviour, ChallengeKind, Portal, Render, SiteSpec};
use notifio::fetch::{FetchMode, browser};
use notifio::watch::{PassResult, WatchEvent, Watcher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One browser test at a time: each starts its own browser (several hundred MB), the counts of
/// browser processes are per test, and CI has two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The browser these tests drive, or `None` (with a notice) when there is none outside CI.
fn browser_or_skip(test: &str) -> Option<PathBuf> {
    match browser::find_executable(None, std::env::var_os("PATH")) {
        Ok(p) => Some(p),
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test} needs a browser under CI: {e} (install Debian's `chromium`)"
            );
            eprintln!("SKIPPED {test}: {e}; install Debian's `chromium` package to run it");
            None
        }
    }
}

/// Every process whose environment says it is a browser of ours started by `owner`.
fn browser_processes(owner: u32) -> Vec<u32> {
    let marker = format!("{}={owner}", browser::OWNER_ENV);
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        // A zombie has an empty environment: it is gone but for its exit status.
        if env.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

fn site(name: &str) -> SiteSpec {
    SiteSpec {
        name: name.into(),
        listings: 30,
        page_bytes: 40_000,
        ..SiteSpec::default()
    }
}

/// A config: short ladders and retries, the browser profile in `dir`, then `body`.
fn config_text(dir: &Path, body: &str) -> String {
    format!(
        "[watch]\ninterval = \"1h\"\nspacing = \"50ms\"\nstate_dir = {:?}\ndashboard = false\n\n\
         [browser]\nprofile_dir = {:?}\n\n\
         [backoff]\nchallenge = [\"1s\"]\nrate_limited = [\"1s\", \"2s\"]\ndenied = [\"1s\"]\nerror = [\"1s\"]\n\n\
         [retry.search]\ninitial = \"10ms\"\ntimeout = \"8s\"\ndeadline = \"15s\"\n\n{body}",
        dir.join("state").display().to_string(),
        dir.join("profile").display().to_string(),
    )
}

/// A `[[search]]` reading the portal's cards, and its site's fetch mode.
fn search(name: &str, url: &str, fetch: FetchMode) -> String {
    let site = url.split('/').nth(2).unwrap_or_default();
    format!(
        "[[search]]\nname = {name:?}\nurl = {url:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n\
         [site.{site:?}]\nfetch = \"{}\"\n\n",
        fetch.as_str()
    )
}

fn result<'a>(results: &'a [PassResult], name: &str) -> &'a PassResult {
    results
        .iter()
        .find(|r| r.search == name)
        .unwrap_or_else(|| panic!("no result for {name}: {results:?}"))
}

fn ids(r: &PassResult) -> Vec<String> {
    let mut v: Vec<String> = r.listings.iter().map(|l| l.listing.id.clone()).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_built_by_a_script_are_read_in_the_browser_not_over_http() {
    if browser_or_skip("cards_built_by_a_script").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let scripted = |name: &str| SiteSpec {
        render: Render::Script(Duration::from_millis(400)),
        ..site(name)
    };
    let portal = Portal::start(vec![scripted("js"), scripted("plain")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &format!(
            "{}{}",
            search(
                "in the browser",
                &portal.search_url("js", "a"),
                FetchMode::Browser
            ),
            search(
                "over http",
                &portal.search_url("plain", "a"),
                FetchMode::Http
            )
        ),
    );
    let results = check_once(load_config(dir.path(), &text)).await;
    let plain = result(&results, "over http");
    assert_eq!(plain.outcome.as_str(), "layout_unknown", "{plain:?}");
    assert_eq!(plain.via, FetchMode::Http);
    let js = result(&results, "in the browser");
    assert_eq!(js.outcome.as_str(), "ok", "{js:?}");
    assert_eq!(js.via, FetchMode::Browser);
    let mut want: Vec<String> = portal
        .listings("js", "a")
        .into_iter()
        .map(|l| l.id)
        .collect();
    want.sort();
    assert_eq!(ids(js), want, "every card the script built");
    let first = &js.listings[0].listing;
    assert!(first.title.is_some() && first.price.is_some(), "{first:?}");
    assert!(
        first
            .url
            .as_deref()
            .is_some_and(|u| u.starts_with(&portal.base_url("js"))),
        "{first:?}"
    );
    // The JSON line says how the page was read.
    let line = serde_json::to_value(js).unwrap();
    assert_eq!(line["via"], "browser");
    portal.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_resource_types_are_never_requested() {
    if browser_or_skip("blocked_resource_types").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let with_images = |name: &str| SiteSpec {
        images: 20,
        ..site(name)
    };
    let portal = Portal::start(vec![with_images("blocked"), with_images("loaded")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let blocked = config_text(
        dir.path(),
        &search("a", &portal.search_url("blocked", "a"), FetchMode::Browser),
    );
    let r = check_once(load_config(dir.path(), &blocked)).await;
    assert_eq!(r[0].outcome.as_str(), "ok", "{r:?}");
    let images = |site: &str| {
        portal
            .requests()
            .iter()
            .filter(|q| q.site == site && q.path.starts_with("/img/"))
            .count()
    };
    assert_eq!(
        images("blocked"),
        0,
        "no image request with the default block"
    );
    // Without the block (block = []), the same page loads its 20 images.
    let unblocked = config_text(
        other.path(),
        &search("b", &portal.search_url("loaded", "a"), FetchMode::Browser),
    )
    .replace("[browser]\n", "[browser]\nblock = []\n");
    let r = check_once(load_config(other.path(), &unblocked)).await;
    assert_eq!(r[0].outcome.as_str(), "ok", "{r:?}");
    assert_eq!(
        images("loaded"),
        20,
        "the control: images load when not blocked"
    );
    let (with, without) = (portal.bytes_sent("blocked"), portal.bytes_sent("loaded"));
    println!("bytes with the default block: {with}, without: {without}");
    assert!(
        with * 5 <= without,
        "at least 80% fewer bytes: {with} vs {without}"
    );
    portal.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_faults_in_the_browser_follow_the_same_policy() {
    if browser_or_skip("refusals_and_faults").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let portal = Portal::start(vec![site("limited"), site("flaky"), site("guarded")])
        .await
        .unwrap();
    portal.set_behaviour(
        "limited",
        Behaviour::RateLimited {
            retry_after: Some("120".into()),
        },
    );
    portal.set_behaviour("flaky", Behaviour::FailNextWith(2, 500));
    portal.set_behaviour(
        "guarded",
        Behaviour::Challenge(ChallengeKind::Cloudflare, 403),
    );
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &format!(
            "{}{}{}",
            search(
                "limited",
                &portal.search_url("limited", "a"),
                FetchMode::Browser
            ),
            search(
                "flaky",
                &portal.search_url("flaky", "a"),
                FetchMode::Browser
            ),
            search(
                "guarded",
                &portal.search_url("guarded", "a"),
                FetchMode::Browser
            ),
        ),
    );
    let started = notifio::clock::now().as_millis();
    let results = check_once(load_config(dir.path(), &text)).await;

    let limited = result(&results, "limited");
    assert_eq!(limited.outcome.as_str(), "rate_limited", "{limited:?}");
    assert_eq!(limited.status, Some(429));
    assert_eq!(limited.attempts, 1, "a 4xx is never retried");
    let until = limited.next_retry_at.expect("the site waits");
    assert!(
        until >= started + 120_000,
        "Retry-After: 120 lengthens the 1s rung: waits until {until}, started {started}"
    );

    let flaky = result(&results, "flaky");
    assert_eq!(flaky.outcome.as_str(), "ok", "{flaky:?}");
    assert_eq!(flaky.attempts, 3);
    let navigations: Vec<Option<String>> = portal
        .requests()
        .iter()
        .filter(|q| q.site == "flaky" && q.path.starts_with("/search/"))
        .map(|q| q.header("x-retry-count").map(str::to_owned))
        .collect();
    assert_eq!(
        navigations,
        vec![None, Some("1".to_owned()), Some("2".to_owned())],
        "500, 500, 200: three navigations, X-Retry-Count absent, 1, 2"
    );

    let guarded = result(&results, "guarded");
    assert_eq!(guarded.outcome.as_str(), "challenge", "{guarded:?}");
    assert!(guarded.next_retry_at.is_some());

    // The waiting site is skipped by the next pass, without a request.
    let before = portal.request_count("limited");
    let again = check_once(load_config(dir.path(), &text)).await;
    assert_eq!(result(&again, "limited").outcome.as_str(), "waiting");
    assert_eq!(portal.request_count("limited"), before);
    portal.shutdown().await;
}

/// The `notifio` binary with a clean environment for these tests.
fn notifio() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_notifio"));
    c.env_remove("RUST_LOG")
        .env_remove("NOTIFIO_CONFIG")
        .env_remove("NOTIFIO_BROWSER")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY");
    c
}

/// Main browser processes among `pids`: not its helpers (they carry `--type=`), nor its crash
/// reporter.
fn main_processes(pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                !c.is_empty() && !c.contains("--type=") && !c.contains("crashpad")
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_reaches_the_site_between_two_checks() {
    if browser_or_skip("nothing_between_checks").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    // A page that calls its site every 200 ms for as long as it is open; its cards come
    // 600 ms after load, so each check sees it poll a few times.
    let portal = Portal::start(vec![SiteSpec {
        poll: Some(Duration::from_millis(200)),
        render: Render::Script(Duration::from_millis(600)),
        ..site("ticker")
    }])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search(
            "ticker",
            &portal.search_url("ticker", "a"),
            FetchMode::Browser,
        ),
    )
    .replace("interval = \"1h\"", "interval = \"3s\"");
    let mut watcher = Watcher::new(load_config(dir.path(), &text), vec![], false).unwrap();
    let mut events = watcher.subscribe();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { watcher.run(stop).await });
    let mut done_at = Vec::new();
    let mut started_at = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while started_at.len() < 3 {
            match events.recv().await {
                Ok(WatchEvent::CheckStarted { .. }) => {
                    started_at.push(notifio::clock::now().as_millis());
                }
                Ok(WatchEvent::CheckDone { outcome, .. }) => {
                    assert_eq!(outcome.as_str(), "ok");
                    done_at.push(notifio::clock::now().as_millis());
                }
                _ => {}
            }
        }
    })
    .await
    .expect("three checks");
    cancel.cancel();
    task.await.unwrap().unwrap();
    let requests = portal.requests();
    let polls = requests
        .iter()
        .filter(|q| q.path.starts_with("/poll"))
        .count();
    assert!(polls >= 2, "the page polls while it is open: {polls}");
    for (done, next) in done_at.iter().zip(started_at.iter().skip(1)) {
        let between: Vec<_> = requests
            .iter()
            .filter(|q| q.at > *done && q.at < *next)
            .map(|q| (q.at, q.path.clone()))
            .collect();
        assert!(
            between.is_empty(),
            "requests between a check's end ({done}) and the next start ({next}): {between:?}"
        );
    }
    portal.shutdown().await;
}

/// Every live descendant of `root` (from each process's parent in `/proc/PID/stat`).
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for &(child, parent) in &parent_of {
            if parent == p {
                out.push(child);
                todo.push(child);
            }
        }
    }
    out
}

/// A page a check has left is gone, not kept for "Back": after 24 checks in four tabs the
/// browser runs a handful of renderers, not one per page read (the back/forward cache kept
/// each left page alive in a renderer of its own: ~30 renderers, 1.1 GB in the benchmark).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_left_behind_do_not_pile_up_in_memory() {
    if browser_or_skip("pages_left_behind").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let names = ["p1", "p2", "p3", "p4"];
    let portal = Portal::start(names.iter().map(|n| site(n)).collect())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut body = String::new();
    for n in names {
        // Two searches per site, and the site's table once.
        body += &search(
            &format!("{n}a"),
            &portal.search_url(n, "a"),
            FetchMode::Browser,
        );
        body += &format!(
            "[[search]]\nname = \"{n}b\"\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n",
            portal.search_url(n, "b")
        );
    }
    let text = config_text(dir.path(), &body).replace("interval = \"1h\"", "interval = \"1s\"");
    let mut watcher = Watcher::new(load_config(dir.path(), &text), vec![], false).unwrap();
    let fetcher = watcher.fetcher().clone();
    let mut events = watcher.subscribe();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { watcher.run(stop).await });
    tokio::time::timeout(Duration::from_secs(90), async {
        let mut done = 0;
        while done < 24 {
            if let Ok(WatchEvent::CheckDone { outcome, .. }) = events.recv().await {
                assert_eq!(outcome.as_str(), "ok");
                done += 1;
            }
        }
    })
    .await
    .expect("24 checks");
    let browser = fetcher.browser().expect("a browser is set up");
    let pid = browser.pid().await.expect("a browser of ours runs");
    // Renderers rewrite their command line over their environment, so they are found as the
    // browser's descendants, not by our marker.
    let renderers = descendants(pid)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--type=renderer"))
        })
        .count();
    println!("renderers after 24 checks in up to 4 tabs: {renderers}");
    cancel.cancel();
    task.await.unwrap().unwrap();
    assert!(
        renderers <= 12,
        "{renderers} renderers: pages left behind are being kept"
    );
    portal.shutdown().await;
}

/// A cookie the site sets in one `notifio check` is sent by the next one: the profile lives
/// on disk, and the browser is closed cleanly at the end of a pass.
#[test]
fn the_profile_keeps_cookies_between_processes() {
    if browser_or_skip("the_profile_keeps_cookies").is_none() {
        return;
    }
    let _one = SERIAL.blocking_lock();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let portal = rt
        .block_on(Portal::start(vec![SiteSpec {
            visitor_cookie: true,
            ..site("cookies")
        }]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search("c", &portal.search_url("cookies", "a"), FetchMode::Browser),
    );
    let path = crate::util::write_config(dir.path(), &text);
    for _ in 0..2 {
        let out = notifio()
            .arg("--config")
            .arg(&path)
            .args(["check", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(line["outcome"], "ok", "{line}");
        assert_eq!(line["via"], "browser", "{line}");
    }
    let cookies: Vec<Option<String>> = portal
        .requests()
        .iter()
        .filter(|q| q.path.starts_with("/search/"))
        .map(|q| q.header("cookie").map(str::to_owned))
        .collect();
    assert_eq!(cookies.len(), 2, "{cookies:?}");
    assert_eq!(cookies[0], None, "a new profile has no cookie");
    assert!(
        cookies[1]
            .as_deref()
            .is_some_and(|c| c.contains("visitor=v1")),
        "the second process sends the cookie the first got: {cookies:?}"
    );
    rt.block_on(portal.shutdown());
}

#[test]
fn a_browser_that_cannot_be_found_is_a_config_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search("s", "http://127.0.0.1:9/search/a", FetchMode::Browser),
    )
    .replace(
        "[browser]\n",
        "[browser]\nexecutable = \"/nonexistent/chromium\"\n",
    );
    let path = crate::util::write_config(dir.path(), &text);
    for cmd in ["check", "watch"] {
        let out = notifio()
            .arg("--config")
            .arg(&path)
            .arg(cmd)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        let line = text
            .lines()
            .position(|l| l.starts_with("executable"))
            .unwrap()
            + 1;
        assert!(
            err.contains(&format!("notifio.toml:{line}:14: `browser.executable`")),
            "{cmd}: {err}"
        );
        assert!(
            err.contains("/nonexistent/chromium` does not exist"),
            "{err}"
        );
        assert!(
            err.contains("apt install chromium"),
            "how to install one: {err}"
        );
    }
    // NOTIFIO_BROWSER=none: this machine has no browser, and the message says where that
    // came from.
    let plain = crate::util::write_config(
        dir.path(),
        &config_text(
            dir.path(),
            &search("s", "http://127.0.0.1:9/search/a", FetchMode::Browser),
        ),
    );
    let out = notifio()
        .arg("--config")
        .arg(&plain)
        .arg("check")
        .env("NOTIFIO_BROWSER", "none")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`NOTIFIO_BROWSER`"), "{err}");
    assert!(
        err.contains("search `s`"),
        "names the search that needs it: {err}"
    );
    // `status` does not need the browser.
    let out = notifio()
        .arg("--config")
        .arg(&plain)
        .arg("status")
        .env("NOTIFIO_BROWSER", "none")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_killed_mid_check_is_an_error_and_the_next_check_starts_a_new_one() {
    if browser_or_skip("a_browser_killed_mid_check").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let portal = Portal::start(vec![site("slow")]).await.unwrap();
    portal.set_behaviour("slow", Behaviour::Slow(Duration::from_secs(3)));
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search("slow", &portal.search_url("slow", "a"), FetchMode::Browser),
    );
    let mut watcher = Watcher::new(load_config(dir.path(), &text), vec![], false).unwrap();
    let fetcher = watcher.fetcher().clone();
    let mut events = watcher.subscribe();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { watcher.run(stop).await });
    // The first check is under way (the portal holds the page for 3 s): kill the browser.
    crate::util::wait_for(Duration::from_secs(20), "the first request", || {
        (portal.request_count("slow") > 0).then_some(())
    })
    .await;
    let browser = fetcher.browser().expect("a browser is set up");
    let pid = browser.pid().await.expect("a browser of ours runs");
    assert_eq!(
        main_processes(&browser_processes(std::process::id())),
        vec![pid],
        "one browser"
    );
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    portal.set_behaviour("slow", Behaviour::Normal);
    let outcomes = tokio::time::timeout(Duration::from_secs(30), async {
        let mut seen = Vec::new();
        while seen.len() < 2 {
            if let Ok(WatchEvent::CheckDone { outcome, .. }) = events.recv().await {
                seen.push(outcome.as_str());
            }
        }
        seen
    })
    .await
    .expect("two checks");
    assert_eq!(
        outcomes,
        ["error", "ok"],
        "killed: error; then a fresh browser reads it"
    );
    assert_eq!(browser.starts(), 2, "a new browser for the next check");
    let new_pid = browser.pid().await.expect("the new browser runs");
    assert_ne!(new_pid, pid);
    assert_eq!(
        main_processes(&browser_processes(std::process::id())),
        vec![new_pid],
        "never more than one browser of ours"
    );
    cancel.cancel();
    task.await.unwrap().unwrap();
    portal.shutdown().await;
}

#[test]
fn no_browser_outlives_a_killed_watcher() {
    if browser_or_skip("no_browser_outlives").is_none() {
        return;
    }
    let _one = SERIAL.blocking_lock();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let portal = rt.block_on(Portal::start(vec![site("w")])).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search("w", &portal.search_url("w", "a"), FetchMode::Browser),
    );
    let path = crate::util::write_config(dir.path(), &text);
    for signal in ["-KILL", "-TERM"] {
        let mut watch = crate::util::Notifio::start(dir.path(), &path, false, None);
        let before = portal.request_count("w");
        rt.block_on(crate::util::wait_for(
            Duration::from_secs(30),
            "a browser check",
            || (portal.request_count("w") > before).then_some(()),
        ));
        let ours = browser_processes(watch.pid());
        assert_eq!(main_processes(&ours).len(), 1, "{}", watch.output());
        let pid = watch.pid();
        Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        let start = Instant::now();
        while !browser_processes(pid).is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            browser_processes(pid),
            Vec::<u32>::new(),
            "{signal}: no browser process of ours 5 s later"
        );
        let start = Instant::now();
        while watch.alive() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!watch.alive(), "{signal}: the watcher exits");
    }
    rt.block_on(portal.shutdown());
}

/// A page that misbehaves in the browser: each on a loopback address of its own, so each is a
/// site of its own, with its own renderer, as real sites are.
async fn hostile(ip: &str, response: Vec<u8>) -> crate::util::RawServer {
    crate::util::RawServer::start_at(ip, response).await
}

fn page(body: &str) -> Vec<u8> {
    crate::util::raw_response("200 OK", &[], body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_pages_end_as_outcomes_and_never_take_the_browser_down() {
    if browser_or_skip("hostile_pages").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let cards = "<article class=\"listing\" data-id=\"7\"><a href=\"/listing/7\"><h2 class=\"title\">Flat</h2></a></article>";
    let looping = hostile(
        "127.0.0.2",
        page("<html><body><script>for (;;) {}</script></body></html>"),
    )
    .await;
    let hungry = hostile(
        "127.0.0.3",
        page("<html><body><script>var a = []; for (;;) { a.push(new Array(1e6).fill(1.5)); }</script></body></html>"),
    )
    .await;
    let pushy = hostile(
        "127.0.0.4",
        page(&format!(
            "<html><body>{cards}<script>alert('hi'); confirm('sure?'); prompt('name?'); \
             window.open('/popup'); window.open('about:blank');</script></body></html>"
        )),
    )
    .await;
    let download = hostile(
        "127.0.0.5",
        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
          Content-Disposition: attachment; filename=\"flat.bin\"\r\nContent-Length: 4\r\n\
          Connection: close\r\n\r\nabcd"
            .to_vec(),
    )
    .await;
    let portal = Portal::start(vec![site("fine")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut body = String::new();
    for (name, url) in [
        ("looping", format!("{}/search", looping.url)),
        ("hungry", format!("{}/search", hungry.url)),
        ("pushy", format!("{}/search", pushy.url)),
        ("download", format!("{}/search", download.url)),
        ("fine", portal.search_url("fine", "a")),
    ] {
        body.push_str(&search(name, &url, FetchMode::Browser));
    }
    // A shorter attempt timeout (the looping page is given up on in 5 s), and a long error
    // rung, so each site is asked once in the pass.
    let text = config_text(dir.path(), &body)
        .replace(
            "timeout = \"8s\"\ndeadline = \"15s\"",
            "timeout = \"5s\"\ndeadline = \"12s\"",
        )
        .replace("error = [\"1s\"]", "error = [\"1h\"]");
    let cfg = load_config(dir.path(), &text);
    let mut w = Watcher::for_one_pass(cfg, vec![], false).unwrap();
    let fetcher = w.fetcher().clone();
    let started = Instant::now();
    let results = tokio::time::timeout(Duration::from_secs(90), w.run(CancellationToken::new()))
        .await
        .expect("the pass ends")
        .unwrap();
    let took = started.elapsed();
    for r in &results {
        println!(
            "{:<9} {:<15} attempts {} via {}",
            r.search, r.outcome, r.attempts, r.via
        );
    }
    let looped = result(&results, "looping");
    assert_eq!(looped.outcome.as_str(), "error", "{looped:?}");
    assert_eq!(
        looped.attempts, 1,
        "a page that never stops is not tried again at once"
    );
    assert_eq!(result(&results, "hungry").outcome.as_str(), "error");
    let pushy_r = result(&results, "pushy");
    assert_eq!(
        pushy_r.outcome.as_str(),
        "ok",
        "dialogs dismissed, popups closed: {pushy_r:?}"
    );
    assert_eq!(ids(pushy_r), ["7"]);
    let download = result(&results, "download");
    assert_eq!(download.outcome.as_str(), "error", "{download:?}");
    assert_eq!(
        download.attempts, 1,
        "a download is refused at once, not retried"
    );
    let fine = result(&results, "fine");
    assert_eq!(fine.outcome.as_str(), "ok", "{fine:?}");
    assert_eq!(fine.listings.len(), 30);
    let browser = fetcher.browser().unwrap();
    assert_eq!(browser.starts(), 1, "the same browser served every page");
    assert!(took < Duration::from_secs(60), "bounded: {took:?}");
    // The page's popup never loaded: no second request reached its site.
    assert_eq!(
        pushy.request_lines(),
        ["GET /search HTTP/1.1"],
        "only the page itself was requested"
    );
    portal.shutdown().await;
}

/// A site on `ip` whose `/search` page has its cards in the body and then a script, `/drip`,
/// that never finishes loading: the server sends a line of it every 200 ms for `for_at_most`,
/// then stops answering. The page's parser waits for that script, so the document stays
/// `loading` although every card is in it.
async fn dripping_script_site(ip: &str, body: &str, for_at_most: Duration) -> String {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let page = page(&format!(
        "<html><body>{body}<script src=\"/drip\"></script></body></html>"
    ));
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let Some(head) = crate::util::read_head(&mut sock).await else {
                    return;
                };
                if !head.starts_with(b"GET /drip") {
                    let _ = sock.write_all(&page).await;
                    return;
                }
                let start = b"HTTP/1.1 200 OK\r\nContent-Type: text/javascript\r\n\
                              Transfer-Encoding: chunked\r\n\r\n";
                if sock.write_all(start).await.is_err() {
                    return;
                }
                let until = Instant::now() + for_at_most;
                while Instant::now() < until {
                    if sock.write_all(b"4\r\n//.\n\r\n").await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            });
        }
    });
    url
}

/// A page whose cards are all there but whose last script never finishes loading is read as
/// soon as its cards are in the DOM, while the document is still loading; and one whose
/// cards keep changing until the attempt's deadline is read as it is then, not failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_whose_last_script_never_loads_is_read_from_its_cards() {
    if browser_or_skip("a_page_whose_last_script_never_loads").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let cards: String = (1..=3)
        .map(|i| {
            format!(
                "<article class=\"listing\" data-id=\"{i}\"><a href=\"/listing/{i}\">\
                 <h2 class=\"title\">Flat {i}</h2></a></article>"
            )
        })
        .collect();
    let site = dripping_script_site("127.0.0.7", &cards, Duration::from_secs(60)).await;
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search("dripping", &format!("{site}/search"), FetchMode::Browser),
    );
    let started = Instant::now();
    let results = check_once(load_config(dir.path(), &text)).await;
    let took = started.elapsed();
    let r = result(&results, "dripping");
    println!("{} in {took:?}, {} attempts", r.outcome, r.attempts);
    assert_eq!(r.outcome.as_str(), "ok", "{r:?}");
    assert_eq!(ids(r), ["1", "2", "3"]);
    assert_eq!(r.attempts, 1, "{r:?}");
    assert!(
        took < Duration::from_secs(6),
        "read once its cards are there, not at the 8 s timeout: {took:?}"
    );

    // Cards that never stop changing (a script adds one every 100 ms) before the script that
    // never loads: read as they are at the attempt's deadline.
    let growing = format!(
        "{cards}<div id=\"more\"></div><script>let n = 100; setInterval(() => {{ n += 1; \
         document.getElementById('more').insertAdjacentHTML('beforeend', \
         '<article class=\"listing\" data-id=\"' + n + '\"><a href=\"/listing/' + n + '\">' + \
         '<h2 class=\"title\">Flat ' + n + '</h2></a></article>'); }}, 100);</script>"
    );
    let site = dripping_script_site("127.0.0.8", &growing, Duration::from_secs(60)).await;
    let text = config_text(
        dir.path(),
        &search("growing", &format!("{site}/search"), FetchMode::Browser),
    )
    .replace(
        "timeout = \"8s\"\ndeadline = \"15s\"",
        "timeout = \"3s\"\ndeadline = \"6s\"",
    );
    let results = check_once(load_config(dir.path(), &text)).await;
    let r = result(&results, "growing");
    println!(
        "{} after {} attempts: {} cards",
        r.outcome,
        r.attempts,
        r.listings.len()
    );
    assert_eq!(r.outcome.as_str(), "ok", "{r:?}");
    assert_eq!(r.attempts, 1, "{r:?}");
    assert!(
        r.listings.len() > 3,
        "the cards there at the deadline: {r:?}"
    );
}

/// A page still loading at the attempt's deadline without a card (its parser waits for a
/// script that never arrives) is no page yet: an `error` saying so, retried like a timeout,
/// never read half-built as a layout change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_still_loading_at_the_deadline_is_an_error_retried_not_a_layout_change() {
    if browser_or_skip("a_page_still_loading_at_the_deadline").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let site = dripping_script_site(
        "127.0.0.10",
        "<main><h1>Pisos en alquiler</h1></main>",
        Duration::from_secs(30),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search("loading", &format!("{site}/search"), FetchMode::Browser),
    )
    .replace(
        "timeout = \"8s\"\ndeadline = \"15s\"",
        "timeout = \"3s\"\ndeadline = \"7s\"",
    );
    let results = check_once(load_config(dir.path(), &text)).await;
    let r = result(&results, "loading");
    assert_eq!(r.outcome.as_str(), "error", "{r:?}");
    let reason = r.reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("the page did not finish loading in 3 s"),
        "{reason}"
    );
    assert!(r.attempts >= 2, "retried like a timeout: {r:?}");
    assert!(r.listings.is_empty());
}

/// Pages read in the browser are judged against a browser's latency budget: twenty checks
/// of ~0.7 s (a slow loopback site, rendered and read once its cards are there) raise no
/// "search p95 latency" alarm, while the same pages over HTTP do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_read_is_judged_against_a_browsers_latency_budget() {
    if browser_or_skip("a_browser_read_is_judged").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let names = ["slow1", "slow2", "slow3", "slow4"];
    let portal = Portal::start(
        names
            .iter()
            .map(|n| SiteSpec {
                latency: Duration::from_millis(650),
                ..site(n)
            })
            .collect(),
    )
    .await
    .unwrap();
    for via in [FetchMode::Browser, FetchMode::Http] {
        let dir = tempfile::tempdir().unwrap();
        let mut body = String::new();
        for n in names {
            body.push_str(&search(&format!("{n} a"), &portal.search_url(n, "a"), via));
            for q in ["b", "c", "d", "e"] {
                body.push_str(&format!(
                    "[[search]]\nname = \"{n} {q}\"\nurl = {:?}\n\
                     listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
                    portal.search_url(n, q)
                ));
            }
        }
        let mut w = Watcher::for_one_pass(
            load_config(dir.path(), &config_text(dir.path(), &body)),
            vec![],
            false,
        )
        .unwrap();
        let fetcher = w.fetcher().clone();
        let results =
            tokio::time::timeout(Duration::from_secs(90), w.run(CancellationToken::new()))
                .await
                .expect("the pass ends")
                .unwrap();
        assert_eq!(results.len(), 20);
        assert!(
            results.iter().all(|r| r.outcome.as_str() == "ok"),
            "{results:?}"
        );
        let warnings = fetcher.metrics().warnings();
        println!("{via:?}: {warnings:?}");
        match via {
            FetchMode::Browser => assert!(
                warnings.iter().all(|w| !w.contains("p95")),
                "a browser's read is not held to an HTTP request's 500 ms: {warnings:?}"
            ),
            _ => assert!(
                warnings.iter().any(|w| w.starts_with("search p95 latency")),
                "the same latency over HTTP is over its budget: {warnings:?}"
            ),
        }
        fetcher.shutdown().await;
    }
    portal.shutdown().await;
}

/// A virtual X display (Debian's `xvfb`), or `None` with a notice outside CI.
struct Xvfb {
    child: std::process::Child,
    display: String,
}

impl Xvfb {
    fn start_or_skip(test: &str) -> Option<Self> {
        use std::io::BufRead as _;
        let spawned = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "1280x800x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "{test} needs Xvfb under CI: {e} (install Debian's `xvfb`)"
                );
                eprintln!("SKIPPED {test}: no Xvfb ({e}); install Debian's `xvfb` package");
                return None;
            }
        };
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        let n: u32 = line.trim().parse().expect("Xvfb prints its display number");
        Some(Self {
            child,
            display: format!(":{n}"),
        })
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn login_without_a_display_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search("s", "http://127.0.0.1:9/search/a", FetchMode::Browser),
    );
    let path = crate::util::write_config(dir.path(), &text);
    let out = notifio()
        .arg("--config")
        .arg(&path)
        .args(["login", "127.0.0.1:9"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no display"), "{err}");
    // An unknown site is named, with the sites the config has.
    let out = notifio()
        .arg("--config")
        .arg(&path)
        .args(["login", "example.org"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no search is on example.org"), "{err}");
    assert!(err.contains("127.0.0.1:9"), "{err}");
}

/// The whole session story on a login-walled site: `notifio login` opens a window (under
/// Xvfb), the user (here: this test, over the DevTools Protocol) logs in and closes it; `watch`
/// then reads the site with that session; when the site logs us out, the site is paused and
/// one notification says to run `notifio login`.
#[test]
fn a_login_in_a_window_is_the_session_watch_reads_with_until_it_expires() {
    if browser_or_skip("a_login_in_a_window").is_none() {
        return;
    }
    let Some(x) = Xvfb::start_or_skip("a_login_in_a_window") else {
        return;
    };
    let _one = SERIAL.blocking_lock();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let portal = rt
        .block_on(Portal::start(vec![SiteSpec {
            login_wall: true,
            ..site("walled")
        }]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mbox = dir.path().join("mail.mbox");
    let text = config_text(
        dir.path(),
        &format!(
            "[notify]\nmailbox = {:?}\n\n{}",
            mbox.display().to_string(),
            search(
                "walled",
                &portal.search_url("walled", "a"),
                FetchMode::Browser
            )
        ),
    )
    .replace("interval = \"1h\"", "interval = \"2s\"");
    let path = crate::util::write_config(dir.path(), &text);
    let site_key = portal
        .base_url("walled")
        .trim_start_matches("http://")
        .to_owned();

    // notifio login: a visible window on the search's page, which redirects to the form.
    let mut login = notifio()
        .arg("--config")
        .arg(&path)
        .args(["login", &site_key])
        .env("DISPLAY", &x.display)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let active = dir.path().join("profile").join("DevToolsActivePort");
    rt.block_on(async {
        let (port, ws_path) =
            crate::util::wait_for(Duration::from_secs(30), "the login window", || {
                let text = std::fs::read_to_string(&active).ok()?;
                let mut lines = text.lines();
                Some((
                    lines.next()?.trim().to_owned(),
                    lines.next()?.trim().to_owned(),
                ))
            })
            .await;
        // The window shows the search's page, which the site redirected to its form.
        let list = format!("http://127.0.0.1:{port}/json/list");
        let pages = || async {
            let body = reqwest::get(&list).await.ok()?.text().await.ok()?;
            let v: Vec<serde_json::Value> = serde_json::from_str(&body).ok()?;
            Some(
                v.into_iter()
                    .filter(|t| t["type"] == "page")
                    .map(|t| {
                        (
                            t["id"].as_str().unwrap_or("").to_owned(),
                            t["url"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let started = Instant::now();
        let form_url = loop {
            if let Some(u) = pages()
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|(_, u)| u)
                .find(|u| u.contains("/login?next="))
            {
                break u;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the login form shows"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // The user logs in (here in a tab of that window, driven over the DevTools Protocol)...
        let (user, mut handler) =
            chromiumoxide::Browser::connect(format!("ws://127.0.0.1:{port}{ws_path}"))
                .await
                .unwrap();
        let driving = tokio::spawn(async move {
            use futures_util::StreamExt as _;
            while let Some(r) = handler.next().await {
                if r.is_err() {
                    break;
                }
            }
        });
        let tab = user.new_page(form_url.as_str()).await.unwrap();
        let fill = "document.querySelector('input[name=email]').value = 'ana@example.org';\
                    document.querySelector('input[name=password]').value = 'secret';\
                    document.querySelector('form').submit();";
        let started = Instant::now();
        while portal.sessions("walled") == 0 {
            let _ = tab.evaluate(fill).await;
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the form is sent"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        crate::util::wait_for(Duration::from_secs(10), "the listings after login", || {
            portal
                .requests()
                .iter()
                .any(|q| {
                    q.path == "/search/a"
                        && q.header("cookie").is_some_and(|c| c.contains("session="))
                })
                .then_some(())
        })
        .await;
        // ... and closes the window (every tab of it).
        for (id, _) in pages().await.unwrap_or_default() {
            let _ = user
                .execute(
                    chromiumoxide::cdp::browser_protocol::target::CloseTargetParams::new(
                        chromiumoxide::cdp::browser_protocol::target::TargetId::new(id),
                    ),
                )
                .await;
        }
        drop(user);
        let _ = tokio::time::timeout(Duration::from_secs(5), driving).await;
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = login.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "login returns when the window closes"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = login.wait_with_output().unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Log in"));

    // watch reads the walled site with the session from the window.
    let state = dir.path().join("state");
    let mut watch = crate::util::Notifio::start(dir.path(), &path, false, None);
    rt.block_on(crate::util::wait_for(
        Duration::from_secs(30),
        "a good check",
        || {
            crate::util::checks_of(&state, "walled")
                .iter()
                .any(|(o, s)| o == "ok" && *s == Some(200))
                .then_some(())
        },
    ));
    assert!(watch.alive(), "{}", watch.output());

    // The site logs everyone out: the next check is `session_expired`, the site is paused,
    // and one notification says what to do.
    portal.expire_sessions("walled");
    let expected = format!("notifio login {site_key}");
    rt.block_on(crate::util::wait_for(
        Duration::from_secs(30),
        "the notification",
        || {
            std::fs::read_to_string(&mbox)
                .ok()
                .filter(|m| m.contains(&expected))
                .map(|_| ())
        },
    ));
    assert!(
        crate::util::checks_of(&state, "walled")
            .iter()
            .any(|(o, _)| o == "session_expired"),
        "{:?}",
        crate::util::checks_of(&state, "walled")
    );
    let searches_before = portal.request_count("walled");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        portal.request_count("walled"),
        searches_before,
        "a paused site gets no request"
    );
    let mail = std::fs::read_to_string(&mbox).unwrap();
    assert_eq!(
        mail.matches(&expected).count(),
        1,
        "one notification:\n{mail}"
    );
    assert_eq!(watch.terminate(), Some(0));
    rt.block_on(portal.shutdown());
}

/// The real Idealista page (`tests/support/real_pages.rs`), read through the browser, gives the same
/// listings as the same bytes read over HTTP. It is served with a Content-Security-Policy that
/// lets nothing but the document load, so the page's own scripts, frames and pictures never
/// try to reach the real site: every request stays on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(real_pages),
    ignore = "needs the real pages (NOTIFIO_REAL_PAGES=DIR)"
)]
async fn the_real_idealista_page_reads_the_same_in_the_browser() {
    if browser_or_skip("the_real_idealista_page").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let page = String::from_utf8(crate::real_pages::read("idealista_es_search.html")).unwrap();
    let server = hostile(
        "127.0.0.6",
        crate::util::raw_response(
            "200 OK",
            &[
                b"Content-Security-Policy: default-src 'none'",
                b"X-DNS-Prefetch-Control: off",
            ],
            &page,
        ),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}/alquiler-viviendas/madrid-madrid/", server.url);
    let site = url.split('/').nth(2).unwrap().to_owned();
    let text = config_text(
        dir.path(),
        &format!(
            "[[search]]\nname = \"madrid\"\nurl = {url:?}\nprofile = \"idealista\"\n\n\
             [site.{site:?}]\nfetch = \"browser\"\n"
        ),
    );
    let cfg = load_config(dir.path(), &text);
    assert_eq!(cfg.searches[0].fetch, FetchMode::Browser);
    let results = check_once(cfg).await;
    let r = &results[0];
    assert_eq!(r.outcome.as_str(), "ok", "{r:?}");
    assert_eq!(r.via, FetchMode::Browser);
    // The same page over HTTP, through the same profile.
    let parsed = url::Url::parse(&url).unwrap();
    let profile = notifio::extract::profile_for(
        &notifio_policy::SiteKey::from_parsed(&parsed).unwrap(),
        Some("idealista"),
        None,
    )
    .unwrap();
    let notifio::extract::Extraction::Listings(over_http) =
        profile.extract(page.as_bytes(), &parsed)
    else {
        panic!("the fixture reads over HTTP");
    };
    assert_eq!(over_http.len(), 30);
    assert_eq!(r.listings.len(), 30, "every card, in the browser too");
    for (b, h) in r.listings.iter().map(|c| &c.listing).zip(&over_http) {
        assert_eq!(
            (
                &b.id, &b.title, &b.price, &b.rooms, &b.area_m2, &b.url, &b.image
            ),
            (
                &h.id, &h.title, &h.price, &h.rooms, &h.area_m2, &h.url, &h.image
            ),
            "the same listing, field by field"
        );
    }
    assert_eq!(
        server.request_lines(),
        ["GET /alquiler-viviendas/madrid-madrid/ HTTP/1.1"],
        "only the document was requested"
    );
}

/// A browser the test starts and keeps for several passes, as a watcher keeps its one browser:
/// Notifio's own command line, reached by each pass through `[browser] connect` (a pass closes
/// only the tabs it opened).
struct KeptBrowser {
    child: std::process::Child,
    devtools: String,
    _profile: tempfile::TempDir,
}

impl KeptBrowser {
    async fn start(exe: &Path) -> Self {
        let profile = tempfile::tempdir().unwrap();
        let args = browser::launch_args(
            profile.path(),
            true,
            browser::running_as_root(),
            false,
            "about:blank",
        );
        let child = Command::new(exe)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let active = profile.path().join("DevToolsActivePort");
        let port = crate::util::wait_for(Duration::from_secs(30), "the browser's DevTools", || {
            let text = std::fs::read_to_string(&active).ok()?;
            text.lines().next()?.trim().parse::<u16>().ok()
        })
        .await;
        Self {
            child,
            devtools: format!("http://127.0.0.1:{port}"),
            _profile: profile,
        }
    }
}

impl Drop for KeptBrowser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Six sites (six loopback ports) serve `page` to six Idealista searches (read in the browser,
/// their default), and one `check` pass reads them all, `runs` times in a row through one
/// browser: every pass reads every page whole (`want` cards each), none half-loaded. The
/// pages may run their own scripts but reach nothing beyond their own server.
async fn six_sites_read_whole_in_every_pass(test: &str, page: &str, want: &[String], runs: u32) {
    let Some(exe) = browser_or_skip(test) else {
        return;
    };
    let _one = SERIAL.lock().await;
    let kept = KeptBrowser::start(&exe).await;
    let response = crate::util::raw_response(
        "200 OK",
        &[
            b"Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'",
            b"X-DNS-Prefetch-Control: off",
        ],
        page,
    );
    let mut servers = Vec::new();
    for _ in 0..6 {
        servers.push(crate::util::RawServer::start(response.clone()).await);
    }
    let mut searches = String::new();
    for (i, s) in servers.iter().enumerate() {
        searches.push_str(&format!(
            "[[search]]\nname = \"madrid {i}\"\nurl = \"{}/alquiler-viviendas/madrid-madrid/\"\n\
             profile = \"idealista\"\n\n",
            s.url
        ));
    }
    let started = Instant::now();
    for run in 1..=runs {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[watch]\nstate_dir = {:?}\ndashboard = false\n\n\
             [browser]\nconnect = {:?}\n\n{searches}",
            dir.path().join("state").display().to_string(),
            kept.devtools,
        );
        let cfg = load_config(dir.path(), &text);
        assert!(cfg.searches.iter().all(|s| s.fetch == FetchMode::Browser));
        let results = check_once(cfg).await;
        assert_eq!(results.len(), 6, "run {run}: {results:?}");
        let read: Vec<String> = results
            .iter()
            .map(|r| format!("{} {}/{}", r.search, r.outcome.as_str(), r.listings.len()))
            .collect();
        let whole = |r: &PassResult| {
            (r.outcome.as_str(), r.via, ids(r)) == ("ok", FetchMode::Browser, want.to_vec())
        };
        assert!(
            results.iter().all(whole),
            "run {run} of {runs}: a page read before it had loaded: {read:?}\n{results:?}"
        );
    }
    println!(
        "{test}: {runs} passes of 6 pages, all read whole, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for s in &servers {
        assert!(
            s.request_lines()
                .iter()
                .all(|l| l == "GET /alquiler-viviendas/madrid-madrid/ HTTP/1.1"),
            "only the document was requested: {:?}",
            s.request_lines()
        );
    }
}

/// The real Idealista page (775 KB) on six sites, read in one pass, twenty passes in a row:
/// pages loading at once are each read once they have loaded. (Before, six at once on two
/// cores left some still loading at the deadline, read half-built as `layout_unknown`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(real_pages),
    ignore = "needs the real pages (NOTIFIO_REAL_PAGES=DIR)"
)]
async fn six_real_idealista_pages_at_once_are_each_read_once_loaded() {
    let page = String::from_utf8(crate::real_pages::read("idealista_es_search.html")).unwrap();
    let url = url::Url::parse("http://127.0.0.1/alquiler-viviendas/madrid-madrid/").unwrap();
    let profile = notifio::extract::profile_for(
        &notifio_policy::SiteKey::from_parsed(&url).unwrap(),
        Some("idealista"),
        None,
    )
    .unwrap();
    let notifio::extract::Extraction::Listings(cards) = profile.extract(page.as_bytes(), &url)
    else {
        panic!("the real page reads over HTTP");
    };
    let mut want: Vec<String> = cards.into_iter().map(|c| c.id).collect();
    want.sort();
    assert_eq!(want.len(), 30);
    six_sites_read_whole_in_every_pass("six_real_idealista_pages", &page, &want, 20).await;
}

/// The same race on a page of our own (`tests/fixtures/idealista_script_cards.html`), so a
/// fresh clone tests it: its script builds the cards after a framework's worth of work, in two
/// batches; six such pages loading at once on two cores were read half-built (15 of 30 cards)
/// in the first pass. Ten passes: it failed in the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_pages_whose_script_builds_the_cards_are_each_read_once_loaded() {
    let page = include_str!("../fixtures/idealista_script_cards.html");
    let (_, data) = page
        .split_once("<script id=\"ads\" type=\"application/json\">")
        .unwrap();
    let (data, _) = data.split_once("</script>").unwrap();
    let ads: Vec<serde_json::Value> = serde_json::from_str(data).unwrap();
    let mut want: Vec<String> = ads
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    want.sort();
    assert_eq!(want.len(), 30);
    six_sites_read_whole_in_every_pass("six_pages_whose_script_builds_the_cards", page, &want, 10)
        .await;
}

/// A watcher running `cfg`, once one of its sites refused and waits: its events, the token
/// that stops it, its task.
async fn watch_until_a_site_waits(
    cfg: notifio::config::Config,
) -> (
    tokio::sync::broadcast::Receiver<WatchEvent>,
    CancellationToken,
    tokio::task::JoinHandle<Result<Vec<PassResult>, notifio::watch::WatchError>>,
) {
    let mut watcher = Watcher::new(cfg, vec![], false).unwrap();
    let mut events = watcher.subscribe();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { watcher.run(stop).await });
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(WatchEvent::Reaction(notifio_policy::Reaction::SiteWaiting { .. })) =
                events.recv().await
            {
                break;
            }
        }
    })
    .await
    .expect("the site refuses and waits");
    (events, cancel, task)
}

/// A page read in the browser that redirects into a site waiting after a refusal is not
/// followed: the waiting site gets no request, and the check ends as "nothing learnt".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_redirect_does_not_lead_into_a_waiting_site() {
    if browser_or_skip("a_browser_redirect").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let portal = Portal::start(vec![site("waiting")]).await.unwrap();
    portal.set_behaviour(
        "waiting",
        Behaviour::RateLimited {
            retry_after: Some("30".into()),
        },
    );
    let other = hostile(
        "127.0.0.7",
        page("<html><body><article class=\"listing\" data-id=\"1\"><a href=\"/l/1\">flat</a></article></body></html>"),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &format!(
            "{}{}",
            search(
                "waiting",
                &portal.search_url("waiting", "a"),
                FetchMode::Browser
            ),
            search(
                "via redirect",
                &format!("{}/search/r", other.url),
                FetchMode::Browser
            ),
        ),
    )
    .replace("interval = \"1h\"", "interval = \"500ms\"");
    let (mut events, cancel, task) = watch_until_a_site_waits(load_config(dir.path(), &text)).await;
    let refused = portal.request_count("waiting");
    // From now on the other site's page redirects into the waiting one.
    let location = format!("Location: {}", portal.search_url("waiting", "via-redirect"));
    other.answer(crate::util::raw_response(
        "302 Found",
        &[location.as_bytes()],
        "",
    ));
    let before = other.request_lines().len();
    let mut outcomes = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(4), async {
        loop {
            if let Ok(WatchEvent::CheckDone {
                searches, outcome, ..
            }) = events.recv().await
                && searches.iter().any(|s| s == "via redirect")
            {
                outcomes.push(outcome);
            }
        }
    })
    .await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        portal.request_count("waiting"),
        refused,
        "no request reached the waiting site"
    );
    assert!(
        other.request_lines().len() > before,
        "the redirecting page was read"
    );
    // The first reads may still be of the old page: a check that was out when the page
    // changed, or one whose event was queued before it. Every read after those is held.
    let held: Vec<_> = outcomes
        .iter()
        .skip_while(|o| **o == notifio_policy::Outcome::Ok)
        .collect();
    assert!(!held.is_empty(), "{outcomes:?}");
    assert!(
        held.iter().all(|o| **o == notifio_policy::Outcome::Held),
        "held redirects are nothing learnt: {outcomes:?}"
    );
    portal.shutdown().await;
}

/// A page whose own script navigates into a site waiting after a refusal: the navigation is
/// stopped, and the check ends at once as held (not at its deadline as an
/// unknown layout); another search on the same site keeps its 2 s cadence meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_navigation_into_a_waiting_site_ends_the_check_at_once() {
    if browser_or_skip("a_script_navigation").is_none() {
        return;
    }
    let _one = SERIAL.lock().await;
    let portal = Portal::start(vec![site("waiting")]).await.unwrap();
    portal.set_behaviour(
        "waiting",
        Behaviour::RateLimited {
            retry_after: Some("60".into()),
        },
    );
    let cards = "<article class=\"listing\" data-id=\"1\"><a href=\"/l/1\">flat</a></article>";
    let other = hostile(
        "127.0.0.9",
        page(&format!("<html><body>{cards}</body></html>")),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &format!(
            "{}{}[[search]]\nname = \"steady\"\nurl = \"{}/search/steady\"\n\
             listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
            search(
                "waiting",
                &portal.search_url("waiting", "a"),
                FetchMode::Browser
            ),
            search(
                "via script",
                &format!("{}/search/script", other.url),
                FetchMode::Browser
            ),
            // "steady" is on the same site: its `[site]` table is the one above.
            other.url,
        ),
    )
    .replace("interval = \"1h\"", "interval = \"2s\"");
    let (mut events, cancel, task) = watch_until_a_site_waits(load_config(dir.path(), &text)).await;
    let refused = portal.request_count("waiting");
    // From now on the page of "via script" leaves for the waiting site as soon as it runs.
    let leave = format!(
        "<html><head><script>if (location.pathname === '/search/script') \
         location.href = {:?};</script></head><body>{cards}</body></html>",
        portal.search_url("waiting", "via-script")
    );
    other.answer(page(&leave));
    let mut script = Vec::new();
    let mut steady = Vec::new();
    let watched = Instant::now();
    let _ = tokio::time::timeout(Duration::from_secs(9), async {
        loop {
            if let Ok(WatchEvent::CheckDone {
                searches, outcome, ..
            }) = events.recv().await
            {
                if searches.iter().any(|s| s == "via script") {
                    script.push(outcome);
                }
                if searches.iter().any(|s| s == "steady") {
                    steady.push(watched.elapsed());
                }
            }
        }
    })
    .await;
    cancel.cancel();
    task.await.unwrap().unwrap();
    println!("via script: {script:?}\nsteady at: {steady:?}");
    assert_eq!(
        portal.request_count("waiting"),
        refused,
        "no request reached the waiting site"
    );
    // The first may be a read of the old page (a check out when the page changed).
    let held: Vec<_> = script
        .iter()
        .skip_while(|o| **o == notifio_policy::Outcome::Ok)
        .collect();
    assert!(held.len() >= 2, "checked at its cadence: {script:?}");
    assert!(
        held.iter().all(|o| **o == notifio_policy::Outcome::Held),
        "a page that leaves for a waiting site is nothing learnt: {script:?}"
    );
    let gaps: Vec<Duration> = steady.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(steady.len() >= 3, "steady: {steady:?}");
    assert!(
        gaps.iter().all(|g| *g < Duration::from_millis(3500)),
        "the other search on the site keeps its 2 s cadence: {gaps:?}"
    );
    portal.shutdown().await;
}

/// One browser per profile: a `check` beside a running `watch` reads its pages in the
/// watcher's browser (tabs of its own), starts none, and leaves that browser running.
#[test]
fn a_check_beside_a_running_watch_borrows_its_browser() {
    if browser_or_skip("a_check_beside_a_running_watch").is_none() {
        return;
    }
    let _one = SERIAL.blocking_lock();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let portal = rt.block_on(Portal::start(vec![site("shared")])).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        dir.path(),
        &search("s", &portal.search_url("shared", "a"), FetchMode::Browser),
    );
    let path = crate::util::write_config(dir.path(), &text);
    let watch = crate::util::Notifio::start(dir.path(), &path, false, None);
    rt.block_on(crate::util::wait_for(
        Duration::from_secs(30),
        "a browser check",
        || (portal.request_count("shared") > 0).then_some(()),
    ));
    let watchers = main_processes(&browser_processes(watch.pid()));
    assert_eq!(watchers.len(), 1, "{}", watch.output());
    let mut check = notifio()
        .arg("--config")
        .arg(&path)
        .args(["check", "--json", "--force"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let checker = check.id();
    let mut ours = Vec::new();
    let started = Instant::now();
    while check.try_wait().unwrap().is_none() {
        ours.extend(browser_processes(checker));
        assert!(started.elapsed() < Duration::from_secs(60), "check ends");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["outcome"], "ok", "{line}");
    assert_eq!(line["via"], "browser");
    assert!(
        ours.is_empty(),
        "the check started no browser of its own: {ours:?}"
    );
    assert_eq!(
        main_processes(&browser_processes(watch.pid())),
        watchers,
        "the watcher's browser is still the one running"
    );
    assert_eq!(watch.terminate(), Some(0));
    rt.block_on(portal.shutdown());
}

/// "Open in browser" on the dashboard: the running watcher's browser is closed while the login
/// window has the profile, no check can start another meanwhile, and the next check starts it
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_closed_frees_the_profile_holds_checks_back_and_the_next_check_restarts_it() {
    use notifio::fetch::{BrowserConfig, FetchConfig, FetchRequest, Fetcher, Launch};
    let Some(executable) = browser_or_skip("while_closed") else {
        return;
    };
    let _one = SERIAL.lock().await;
    let portal = Portal::start(vec![site("plain")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fetcher = Fetcher::new(FetchConfig {
        browser: Some(BrowserConfig {
            launch: Launch::Start {
                executable,
                profile_dir: dir.path().join("profile"),
                headless: true,
            },
            block: Vec::new(),
        }),
        ..FetchConfig::default()
    })
    .unwrap();
    let url = portal.search_url("plain", "a");
    let site = notifio_policy::SiteKey::from_url(&url).unwrap();
    let req = FetchRequest::search(&url, site).in_browser(None);
    let first = fetcher.fetch(&req, &CancellationToken::new()).await;
    assert_eq!(first.status(), Some(200), "{:?}", first.error());
    let browser = fetcher.browser().unwrap();
    let pid = browser.pid().await.expect("a browser of ours runs");

    let (pending, asked) = browser
        .while_closed(async {
            crate::util::wait_for(Duration::from_secs(10), "the browser to close", || {
                main_processes(&browser_processes(std::process::id()))
                    .is_empty()
                    .then_some(())
            })
            .await;
            // What the login window would do here; a check asked for meanwhile waits.
            let (f, r) = (fetcher.clone(), req.clone());
            let pending = tokio::spawn(async move { f.fetch(&r, &CancellationToken::new()).await });
            let asked = portal.request_count("plain");
            tokio::time::sleep(Duration::from_millis(600)).await;
            assert!(
                !pending.is_finished(),
                "a check ran while the profile was lent"
            );
            assert_eq!(portal.request_count("plain"), asked);
            assert!(main_processes(&browser_processes(std::process::id())).is_empty());
            (pending, asked)
        })
        .await;
    let second = pending.await.unwrap();
    assert_eq!(second.status(), Some(200), "{:?}", second.error());
    assert_eq!(portal.request_count("plain"), asked + 1);
    assert_eq!(
        browser.starts(),
        2,
        "the next check started the browser again"
    );
    assert_ne!(browser.pid().await, Some(pid));
    fetcher.shutdown().await;
}
