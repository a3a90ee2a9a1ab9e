//! The app (issue 27) end to end: a real `notifio watch` runner (watcher, live reload,
//! dashboard with its API) in-process against the fake portal on loopback, driven over HTTP
//! the way the page drives it. Time is real (the subject is the running watcher), every wait
//! is bounded by a few seconds.

use fake_portal::{Behaviour, Portal, SiteSpec};
use notifio::config;
use notifio::status::StatusView;
use notifio_policy::Outcome;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "app-token-0c9a7e51d3";

/// A running watcher and what the test needs of it.
struct Running {
    dir: tempfile::TempDir,
    config: PathBuf,
    addr: SocketAddr,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), notifio::runner::RunError>>,
    http: reqwest::Client,
    token: Option<&'static str>,
}

impl Running {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn file(&self) -> String {
        std::fs::read_to_string(&self.config).unwrap()
    }

    /// A JSON request as the page sends it.
    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, self.url(path))
            .header("content-type", "application/json")
            .header("origin", format!("http://{}", self.addr))
            .body(body.to_string());
        if let Some(t) = self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, json_of(resp).await)
    }

    async fn status(&self) -> StatusView {
        let mut req = self.http.get(self.url("/api/status"));
        if let Some(t) = self.token {
            req = req.bearer_auth(t);
        }
        let bytes = req.send().await.unwrap().bytes().await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// Polls `/api/status` until `f` holds, or panics after `limit`.
    async fn until(
        &self,
        limit: Duration,
        what: &str,
        f: impl Fn(&StatusView) -> bool,
    ) -> StatusView {
        let start = Instant::now();
        loop {
            let v = self.status().await;
            if f(&v) {
                return v;
            }
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}: {v:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn stop(self) {
        self.cancel.cancel();
        let r = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        r.expect("the watcher stops").unwrap().unwrap();
    }
}

async fn json_of(resp: reqwest::Response) -> Value {
    let bytes = resp.bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

fn site() -> SiteSpec {
    SiteSpec {
        name: "flats".into(),
        listings: 30,
        page_bytes: 30_000,
        ..SiteSpec::default()
    }
}

fn search(name: &str, url: &str, interval: &str) -> String {
    format!(
        "[[search]]\nname = {name:?}\nurl = {url:?}\ninterval = {interval:?}   # short, for the test\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n"
    )
}

fn config_text(dir: &Path, portal: &Portal, token: Option<&str>) -> String {
    let mut t = format!(
        "# The app test's config: comments and layout must survive every edit.\n\
         [watch]\nspacing = \"100ms\"\nstate_dir = {:?}\ndashboard = \"127.0.0.1:0\"\n{}\n\
         [backoff]\nrate_limited = [\"30s\"]\n\n\
         [retry.search]\ninitial = \"10ms\"\n\n",
        dir.join("state").display().to_string(),
        token
            .map(|t| format!("dashboard_token = {t:?}\n"))
            .unwrap_or_default(),
    );
    t.push_str(&search(
        "first",
        &portal.search_url("flats", "first"),
        "300ms",
    ));
    t.push_str(&format!(
        "# Loopback sites get their own spacing here.\n[site.{:?}]\nspacing = \"100ms\"\n",
        portal.base_url("flats").trim_start_matches("http://")
    ));
    t
}

async fn start(portal: &Portal, token: Option<&'static str>) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("notifio.toml");
    std::fs::write(&config, config_text(dir.path(), portal, token)).unwrap();
    let cfg = config::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let (addr, cancel, task) = crate::util::run_app(cfg).await;
    Running {
        dir,
        config,
        addr,
        cancel,
        task,
        http: crate::util::api_client(),
        token,
    }
}

/// Requests the portal received for one search path.
fn requests_for(portal: &Portal, search: &str) -> usize {
    let path = format!("/search/{search}");
    portal.requests().iter().filter(|r| r.path == path).count()
}

fn find<'a>(v: &'a StatusView, name: &str) -> Option<&'a notifio::status::SearchStatus> {
    v.searches.iter().find(|s| s.name == name)
}

/// `a` and `b` share a prefix and a suffix; the rest (what differs) is returned from each.
fn differing<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    let pre = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .bytes()
        .rev()
        .zip(b[pre..].bytes().rev())
        .take_while(|(x, y)| x == y)
        .count();
    (&a[pre..a.len() - suf], &b[pre..b.len() - suf])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_are_added_patched_paused_resumed_and_deleted_through_the_api() {
    let portal = Portal::start(vec![site()]).await.unwrap();
    let app = start(&portal, None).await;
    app.until(Duration::from_secs(5), "the first search's baseline", |v| {
        find(v, "first").is_some_and(|s| s.last_checked_at.is_some())
    })
    .await;
    let original = app.file();

    // Add: requested within 2 s, and in /api/status with its first check.
    let url = portal.search_url("flats", "added");
    let added_at = Instant::now();
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            json!({"name": "added", "url": url, "interval": "300ms",
                   "listing": {"selector": "article.listing", "id_attr": "data-id"}}),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["search"]["name"], "added");
    let v = app
        .until(
            Duration::from_secs(2),
            "the added search's first check",
            |v| find(v, "added").is_some_and(|s| s.last_checked_at.is_some()),
        )
        .await;
    println!(
        "added search first checked {:?} after the POST",
        added_at.elapsed()
    );
    assert!(requests_for(&portal, "added") >= 1);
    assert_eq!(
        find(&v, "added").unwrap().last_outcome.map(Outcome::as_str),
        Some("ok")
    );
    // Every byte of the file is kept; the new search is one block after the last one.
    let now = app.file();
    let (was, block) = differing(&original, &now);
    assert_eq!(was, "", "nothing of the file was changed");
    assert!(
        block.starts_with("[[search]]\nname = \"added\"\n"),
        "{block:?}"
    );
    assert!(now.find(block).unwrap() < now.find("# Loopback sites").unwrap());

    // Duplicate name: 409 naming `name`; a bad URL: 400 naming `url`. The file is untouched.
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            json!({"name": "added", "url": url}),
        )
        .await;
    assert_eq!(
        (code, body["field"].as_str()),
        (409, Some("name")),
        "{body}"
    );
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            json!({"name": "bad", "url": "not a url"}),
        )
        .await;
    assert_eq!((code, body["field"].as_str()), (400, Some("url")), "{body}");
    assert!(body["error"].as_str().unwrap().len() > 5, "{body}");
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            json!({"name": "x", "url": url.replace("added", "x"), "interval": "soon"}),
        )
        .await;
    assert_eq!(
        (code, body["field"].as_str()),
        (400, Some("interval")),
        "{body}"
    );
    assert_eq!(app.file(), now);

    // Patch the interval: from its next check on, it is an hour.
    let before_patch = app.file();
    let (code, body) = app
        .send(
            reqwest::Method::PATCH,
            "/api/searches/added",
            json!({"interval": "1h"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let after_patch = app.file();
    let (was, is) = differing(&before_patch, &after_patch);
    assert_eq!(
        (was, is),
        ("300ms", "1h"),
        "only the value changed; its comment stays"
    );
    app.until(
        Duration::from_secs(3),
        "the hour-long interval in force",
        |v| {
            find(v, "added")
                .is_some_and(|s| s.next_check_at.is_some_and(|t| t > v.now + 50 * 60_000))
        },
    )
    .await;
    let (code, _) = app
        .send(
            reqwest::Method::PATCH,
            "/api/searches/nowhere",
            json!({"interval": "1m"}),
        )
        .await;
    assert_eq!(code, 404);

    // Pause: `paused = true` in the file, state paused, and no request for it.
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches/first/pause",
            json!({}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert!(app.file().contains("paused = true\n"));
    app.until(Duration::from_secs(2), "`first` paused", |v| {
        find(v, "first").is_some_and(|s| s.state.as_str() == "paused")
    })
    .await;
    // A check already out may still land; after that, nothing.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let n = requests_for(&portal, "first");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        requests_for(&portal, "first"),
        n,
        "a paused search was requested"
    );
    // Resume: the key goes, the file is as before the pause, checks come back.
    let (code, _) = app
        .send(
            reqwest::Method::POST,
            "/api/searches/first/resume",
            json!({}),
        )
        .await;
    assert_eq!(code, 200);
    assert!(!app.file().contains("paused"));
    let start = Instant::now();
    while requests_for(&portal, "first") == n {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "a resumed search was not requested"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Delete: gone from the file and the status, history kept in the store.
    let before_delete = app.file();
    let (code, body) = app
        .send(reqwest::Method::DELETE, "/api/searches/added", json!({}))
        .await;
    assert_eq!(code, 200, "{body}");
    let after = app.file();
    let (was, is) = differing(&before_delete, &after);
    assert_eq!(is, "");
    assert!(was.contains("name = \"added\""), "{was:?}");
    assert!(
        !was.contains("first") && !was.contains("Loopback"),
        "{was:?}"
    );
    app.until(Duration::from_secs(2), "`added` gone", |v| {
        find(v, "added").is_none()
    })
    .await;
    let kept: i64 = crate::util::db(&app.state_dir())
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM checks JOIN searches ON searches.id = checks.search_id WHERE searches.name = 'added'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(kept >= 1, "the deleted search's history is kept");
    let n = requests_for(&portal, "added");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(requests_for(&portal, "added"), n);
    // "Open in browser" for a site read over plain HTTP says why not, and changes nothing.
    let site = portal
        .base_url("flats")
        .trim_start_matches("http://")
        .to_owned();
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            &format!("/api/sites/{site}/login"),
            json!({}),
        )
        .await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("not read in the browser"),
        "{body}"
    );
    // The last search cannot be deleted: 409.
    let (code, body) = app
        .send(reqwest::Method::DELETE, "/api/searches/first", json!({}))
        .await;
    assert_eq!(code, 409, "{body}");
    let (code, _) = app
        .send(reqwest::Method::DELETE, "/api/searches/nowhere", json!({}))
        .await;
    assert_eq!(code, 404);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_by_hand_is_applied_and_an_invalid_one_is_shown_while_the_old_config_runs() {
    let portal = Portal::start(vec![site()]).await.unwrap();
    let app = start(&portal, None).await;
    let original = app.file();
    // A search added by hand is requested within 2 s.
    let by_hand = original.replace(
        "# Loopback sites",
        &format!(
            "{}# Loopback sites",
            search("by hand", &portal.search_url("flats", "hand"), "300ms")
        ),
    );
    std::fs::write(&app.config, &by_hand).unwrap();
    let t = Instant::now();
    while requests_for(&portal, "hand") == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the hand-added search was not requested within 2 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("hand edit picked up in {:?}", t.elapsed());

    // An invalid edit: shown with file:line:col and key, in the API and in `notifio status`;
    // the searches go on.
    let broken = by_hand.replacen("interval = \"300ms\"", "interval = \"soon\"", 1);
    std::fs::write(&app.config, &broken).unwrap();
    let v = app
        .until(Duration::from_secs(3), "the config error", |v| {
            v.config.error.is_some()
        })
        .await;
    let error = v.config.error.clone().unwrap();
    let line = broken.lines().position(|l| l.contains("\"soon\"")).unwrap() + 1;
    assert!(
        error.contains(&format!("notifio.toml:{line}:")) && error.contains("search[0].interval"),
        "{error}"
    );
    let table = notifio::status::render_table(
        &notifio::status::build_from_dir(
            &app.state_dir(),
            &notifio_policy::BackoffPolicy::default(),
            None,
        )
        .unwrap(),
    );
    assert!(
        table.contains("config error") && table.contains("search[0].interval"),
        "{table}"
    );
    let n = requests_for(&portal, "first");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        requests_for(&portal, "first") > n,
        "the running config stopped"
    );
    assert!(requests_for(&portal, "hand") > 0);

    // A restart-only setting: applied searches, the setting named.
    let moved = by_hand.replace("dashboard = \"127.0.0.1:0\"", "dashboard = \"127.0.0.1:1\"");
    std::fs::write(&app.config, &moved).unwrap();
    let v = app
        .until(Duration::from_secs(3), "restart needed", |v| {
            v.config.error.is_none() && !v.config.restart_needed.is_empty()
        })
        .await;
    assert_eq!(v.config.restart_needed, ["watch.dashboard"]);
    // Still served where it was.
    assert!(app.status().await.searches.len() == 2);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_shows_what_a_selector_finds_records_nothing_and_respects_a_waiting_site() {
    let other = SiteSpec {
        name: "other".into(),
        listings: 12,
        page_bytes: 20_000,
        ..SiteSpec::default()
    };
    let portal = Portal::start(vec![site(), other]).await.unwrap();
    let app = start(&portal, None).await;
    let url = portal.search_url("other", "look");
    let (code, r) = app
        .send(
            reqwest::Method::POST,
            "/api/preview",
            json!({"url": url, "listing": {"selector": "article.listing", "id_attr": "data-id"}}),
        )
        .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["outcome"], "ok", "{r}");
    assert_eq!(r["found"], 12);
    let titles: Vec<&str> = r["listings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["title"].as_str())
        .collect();
    assert_eq!(titles.len(), 12);
    let shown: Vec<String> = portal
        .listings("other", "look")
        .iter()
        .map(|l| l.title.clone())
        .collect();
    assert!(
        titles.iter().all(|t| shown.iter().any(|s| s == t)),
        "{titles:?} vs {shown:?}"
    );
    // Nothing recorded: no listing of that site, no search for it.
    let conn = crate::util::db(&app.state_dir()).unwrap();
    let site = portal
        .base_url("other")
        .trim_start_matches("http://")
        .to_owned();
    let stored: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM listings WHERE site = ?1",
            [&site],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, 0);
    assert_eq!(app.status().await.searches.len(), 1);
    // A selector that finds nothing on a result page: auto mode reads it, and says so with
    // the selector it chose.
    let (_, r) = app
        .send(
            reqwest::Method::POST,
            "/api/preview",
            json!({"url": url, "listing": {"selector": "li.nothing"}}),
        )
        .await;
    assert_eq!(
        (&r["outcome"], &r["read"]),
        (&"ok".into(), &"auto_fallback".into()),
        "{r}"
    );
    assert_eq!(r["structure"], "section.results > article.listing", "{r}");
    assert_eq!(r["found"], 12, "{r}");
    // A bad selector is a 400 naming it.
    let (code, r) = app
        .send(
            reqwest::Method::POST,
            "/api/preview",
            json!({"url": url, "listing": {"selector": "[[["}}),
        )
        .await;
    assert_eq!(
        (code, r["field"].as_str()),
        (400, Some("listing.selector")),
        "{r}"
    );

    // The site refuses the next preview: that counts for the site, which then waits; a preview
    // while it waits is answered without a request.
    portal.set_behaviour(
        "other",
        Behaviour::RateLimited {
            retry_after: Some("60".into()),
        },
    );
    let (_, r) = app
        .send(
            reqwest::Method::POST,
            "/api/preview",
            json!({"url": url, "listing": {"selector": "article.listing"}}),
        )
        .await;
    assert_eq!(r["outcome"], "rate_limited", "{r}");
    let asked = portal.request_count("other");
    let (code, r) = app
        .send(
            reqwest::Method::POST,
            "/api/preview",
            json!({"url": url, "listing": {"selector": "article.listing"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(r["outcome"], "waiting", "{r}");
    assert!(
        r["reason"].as_str().unwrap().contains("rate_limited"),
        "{r}"
    );
    assert!(r["next_retry_at"].as_u64().is_some(), "{r}");
    assert_eq!(
        portal.request_count("other"),
        asked,
        "a waiting site was asked"
    );
    app.stop().await;
}

/// The feeds and the inbox's exports are as private as the rest: with a token set, 401 without
/// it (and no listing in the answer), 200 with it as a bearer token or as `?token=` (what a
/// feed reader can be given).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feeds_and_exports_need_the_token() {
    let portal = Portal::start(vec![site()]).await.unwrap();
    let app = start(&portal, Some(TOKEN)).await;
    for path in [
        "/feed.atom",
        "/feed/first.atom",
        "/api/listings/export.csv",
        "/api/listings/export.json",
        "/api/listings",
    ] {
        let bare = app.http.get(app.url(path)).send().await.unwrap();
        assert_eq!(bare.status().as_u16(), 401, "{path} without the token");
        let body = bare.text().await.unwrap();
        assert!(!body.contains("/listing/"), "{path} leaked: {body}");
        let wrong = app
            .http
            .get(app.url(path))
            .bearer_auth("not-it")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status().as_u16(), 401, "{path} with a wrong token");
        let bearer = app
            .http
            .get(app.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(
            bearer.status().as_u16(),
            200,
            "{path} with the bearer token"
        );
        let query = app
            .http
            .get(app.url(&format!("{path}?token={TOKEN}")))
            .send()
            .await
            .unwrap();
        assert_eq!(query.status().as_u16(), 200, "{path}?token=");
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_refused_unless_json_from_the_dashboard_itself_with_the_token() {
    let portal = Portal::start(vec![site()]).await.unwrap();
    let app = start(&portal, Some(TOKEN)).await;
    let before = app.file();
    let body = json!({"name": "sneaky", "url": portal.search_url("flats", "sneaky"),
                      "listing": {"selector": "article.listing"}})
    .to_string();
    let own = format!("http://{}", app.addr);
    let post = |origin: Option<&str>, host: Option<String>, ctype: &str, token: Option<&str>| {
        let mut r = app
            .http
            .post(app.url("/api/searches"))
            .header("content-type", ctype)
            .body(body.clone());
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        if let Some(h) = host {
            r = r.header("host", h);
        }
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let port = app.addr.port();
    let refusals = [
        (
            "cross-origin",
            post(
                Some("http://evil.example"),
                None,
                "application/json",
                Some(TOKEN),
            ),
        ),
        (
            "cross-origin on our port",
            post(
                Some(&format!("http://evil.example:{port}")),
                None,
                "application/json",
                Some(TOKEN),
            ),
        ),
        (
            "an opaque origin",
            post(Some("null"), None, "application/json", Some(TOKEN)),
        ),
        (
            "wrong Host",
            post(
                Some(&own),
                Some(format!("evil.example:{port}")),
                "application/json",
                Some(TOKEN),
            ),
        ),
        (
            "a form post",
            post(
                Some(&own),
                None,
                "application/x-www-form-urlencoded",
                Some(TOKEN),
            ),
        ),
        ("text/plain", post(None, None, "text/plain", Some(TOKEN))),
        ("no token", post(Some(&own), None, "application/json", None)),
        (
            "a wrong token",
            post(Some(&own), None, "application/json", Some("guess")),
        ),
    ];
    for (what, req) in refusals {
        let resp = req.await.unwrap();
        assert_eq!(resp.status(), 403, "{what}");
        let v: Value = json_of(resp).await;
        assert!(
            v["error"].as_str().unwrap().starts_with("refused"),
            "{what}: {v}"
        );
        assert!(!v.to_string().contains(TOKEN), "{what}: {v}");
    }
    // Delete and pause are guarded alike.
    for (method, path) in [
        (reqwest::Method::DELETE, "/api/searches/first"),
        (reqwest::Method::POST, "/api/searches/first/pause"),
    ] {
        let resp = app
            .http
            .request(method, app.url(path))
            .header("content-type", "application/json")
            .header("origin", "http://evil.example")
            .bearer_auth(TOKEN)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{path}");
    }
    assert_eq!(app.file(), before, "a refused request changed the file");
    // The same request, done right (no Origin at all is a client that is not a browser).
    let ok = post(
        Some(&own),
        None,
        "application/json; charset=utf-8",
        Some(TOKEN),
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), 201);
    let ok = app
        .http
        .post(app.url("/api/searches/sneaky/pause"))
        .header("content-type", "application/json")
        .bearer_auth(TOKEN)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    app.stop().await;
}

/// Names and values the config would refuse, or silently change, are refused from the page
/// with the key they are about (issue 40.6): a name is stored without spaces around it and in
/// NFC, so `café` written two ways is one name; an invisible bidi control in a name, an
/// interval past the longest, port 0 in a URL are 400s naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_values_the_config_refuses_are_refused_from_the_page() {
    let portal = Portal::start(vec![site()]).await.unwrap();
    let app = start(&portal, None).await;
    let url = portal.search_url("flats", "n");
    let listing = json!({"selector": "article.listing", "id_attr": "data-id"});
    let add = |name: &str, extra: Value| {
        let mut body =
            json!({"name": name, "url": format!("{url}?{}", name.len()), "listing": listing});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            add("  Spaced  ", json!({})),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["search"]["name"], "Spaced", "{body}");
    assert!(app.file().contains("name = \"Spaced\"\n"));

    let composed = "caf\u{e9}";
    let decomposed = "cafe\u{301}";
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            add(decomposed, json!({})),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["search"]["name"], composed, "stored as NFC: {body}");
    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            add(composed, json!({})),
        )
        .await;
    assert_eq!(
        (code, body["field"].as_str()),
        (409, Some("name")),
        "{body}"
    );

    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            add("Madrid\u{202e}0021", json!({})),
        )
        .await;
    assert_eq!(
        (code, body["field"].as_str()),
        (400, Some("name")),
        "{body}"
    );
    assert!(body["error"].as_str().unwrap().contains("U+202E"), "{body}");

    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            add("Forever", json!({"interval": "18446744073709551615s"})),
        )
        .await;
    assert_eq!(
        (code, body["field"].as_str()),
        (400, Some("interval")),
        "{body}"
    );
    assert!(body["error"].as_str().unwrap().contains("720h"), "{body}");

    let (code, body) = app
        .send(
            reqwest::Method::POST,
            "/api/searches",
            json!({"name": "Port zero", "url": "http://127.0.0.1:0/search/x", "listing": listing}),
        )
        .await;
    assert_eq!((code, body["field"].as_str()), (400, Some("url")), "{body}");
    assert!(body["error"].as_str().unwrap().contains("port 0"), "{body}");

    // A name written by hand with spaces around it is the config's error, at its place.
    let e = config::parse(
        "[[search]]\nname = \" A \"\nurl = \"https://www.idealista.com/a/\"\n",
        Path::new("notifio.toml"),
    )
    .unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (2, "search[0].name"), "{e}");
    app.stop().await;
}

/// What "Add a search" says on entering a URL: the profile that reads its site, a file in
/// `sites/` beside the config among them, or auto mode for a site with none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_a_search_names_the_profile_a_url_is_read_with() {
    let portal = Portal::start(vec![site()]).await.unwrap();
    let app = start(&portal, None).await;
    let profile = |url: String| {
        let req = app
            .http
            .get(app.url("/api/profile"))
            .query(&[("url", url)])
            .send();
        async move { json_of(req.await.unwrap()).await }
    };
    let other = portal.search_url("flats", "other");
    let v = profile(other.clone()).await;
    assert_eq!(
        (&v["profile"], &v["needs_listing"], &v["auto"]),
        (&"auto".into(), &false.into(), &true.into()),
        "{v}"
    );
    let v = profile("https://www.idealista.com/alquiler-viviendas/madrid/".into()).await;
    assert_eq!(
        (&v["profile"], &v["fetch"]),
        (&"idealista".into(), &"browser".into()),
        "{v}"
    );
    // The portals read by profile files, by their hosts, with no `listing` to write.
    for (url, name, fetch) in [
        (
            "https://www.wg-gesucht.de/wg-zimmer-in-Berlin.8.0.1.0.html",
            "wg-gesucht",
            "http",
        ),
        (
            "https://www.immowelt.de/classified-search?locations=AD08DE8634",
            "immowelt",
            "browser",
        ),
        (
            "https://www.willhaben.at/iad/immobilien/mietwohnungen/wien",
            "willhaben",
            "http",
        ),
    ] {
        let v = profile(url.into()).await;
        assert_eq!(
            (&v["profile"], &v["fetch"], &v["needs_listing"]),
            (&name.into(), &fetch.into(), &false.into()),
            "{v}"
        );
    }

    let host = portal
        .base_url("flats")
        .trim_start_matches("http://")
        .to_owned();
    std::fs::create_dir_all(app.dir.path().join("sites")).unwrap();
    std::fs::write(
        app.dir.path().join("sites/flats.toml"),
        format!("name = \"flats\"\nabout = \"the test's flats\"\nhosts = [{host:?}]\n[listing]\nselector = \"article.listing\"\nid_attr = \"data-id\"\n"),
    )
    .unwrap();
    let v = profile(other).await;
    assert_eq!(v["profile"], "flats", "{v}");
    assert_eq!(v["about"], "the test's flats");
    assert_eq!(v["needs_listing"], false);
    app.stop().await;
}

/// Every route that reads a JSON body caps it (docs/dashboard.md#endpoints): 3 MB, sent whole
/// with its length or chunked without one, is `413 Payload Too Large` naming the cap, not a
/// 400 about JSON, and changes nothing; a body under the cap is read as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_cap_is_413_on_every_json_route() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let portal = Portal::start(vec![site()]).await.unwrap();
    let app = start(&portal, None).await;
    let before = app.file();
    let pad = |n: usize| {
        json!({"name": "big", "url": portal.search_url("flats", "big"),
               "listing": {"selector": "article.listing"}, "site": "x", "id": "1",
               "state": "seen", "description": "a".repeat(n)})
    };
    let routes = [
        (reqwest::Method::POST, "/api/searches"),
        (reqwest::Method::PATCH, "/api/searches/first"),
        (reqwest::Method::POST, "/api/preview"),
        (reqwest::Method::POST, "/api/listings/state"),
    ];
    for (method, path) in &routes {
        let (status, v) = app.send(method.clone(), path, pad(3_000_000)).await;
        println!("{method} {path}: {status} {v}");
        assert_eq!(status, 413, "{method} {path}: {v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains("64 KiB"), "{method} {path}: {v}");
        // Under the cap, the route reads the body and answers about its content.
        let (status, v) = app.send(method.clone(), path, pad(30_000)).await;
        assert_ne!(status, 413, "{method} {path}: {v}");
        assert!(
            !v["error"].as_str().unwrap_or_default().contains("not JSON"),
            "{method} {path}: {v}"
        );
    }
    // Chunked, with no length to refuse it by: the route stops reading at the cap.
    let mut tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /api/listings/state HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        app.addr
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("10000\r\n{}\r\n", " ".repeat(0x10000));
    let mut answer = Vec::new();
    for _ in 0..48 {
        // The server may answer and close before all of it is sent.
        if tcp.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(app.file(), before, "a refused body changed the config");
    app.stop().await;
}
