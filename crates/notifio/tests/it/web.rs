//! The dashboard's HTTP surface against a real server on 127.0.0.1:0 started by `web::serve`:
//! `/api/status` is exactly the StatusView JSON (and fresh on each call), `/metrics` carries
//! the Prometheus content type, `/healthz` answers without a token, the token rule holds, and
//! no secret reaches any response.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notifio::status::{
    ChannelState, NewListing, RetryStatus, SearchStatus, SiteStatus, StatusView,
};
use notifio::web::{self, DashboardConfig, StatusSource, WebError};
use notifio_policy::{Outcome, RefusalKind, SearchState, SiteState};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "dash-token-5b0c1e7d9a2f";
const SMTP_PASSWORD: &str = "smtp-secret-hunter2-9f8e";
const COOKIE_VALUE: &str = "c_user=cookie-secret-77aa";

/// A status source whose view the test can change. It also holds the kind of secrets the real
/// watch loop holds (SMTP password, cookies), which must never reach a response.
struct TestSource {
    view: Mutex<StatusView>,
    metrics: Mutex<String>,
    #[allow(dead_code)]
    smtp_password: String,
    #[allow(dead_code)]
    cookies: String,
}

impl StatusSource for TestSource {
    fn status(&self) -> StatusView {
        self.view.lock().unwrap().clone()
    }
    fn metrics(&self) -> String {
        self.metrics.lock().unwrap().clone()
    }
}

fn sample_view() -> StatusView {
    let now = 1_760_000_000_000;
    StatusView {
        now,
        soonest: Some(now + 432_000),
        searches: vec![
            SearchStatus {
                id: 3,
                name: "Madrid under 1200".into(),
                url: "https://www.idealista.com/alquiler-viviendas/madrid-madrid/".into(),
                site: "idealista.com".into(),
                state: SearchState::Waiting,
                next_check_at: Some(now + 432_000),
                last_checked_at: Some(now - 60_000),
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
                next_check_at: Some(now + 21_000),
                last_checked_at: Some(now - 9_000),
                last_outcome: Some(Outcome::Ok),
                new_listings: vec![NewListing {
                    id: "158221".into(),
                    title: Some("2-Zimmer in Kreuzberg".into()),
                    price: Some(1150.0),
                    currency: Some("EUR".into()),
                    url: Some("https://www.immobilienscout24.de/expose/158221".into()),
                    first_seen: now - 120_000,
                }],
                found: Some(30),
                matched: Some(4),
                reason: Some("all good".into()),
                checks_per_hour: None,
                expected_delay_s: None,
                new_per_day: vec![],
                gone: 0,
                stays_online_s: None,
                online_s: vec![],
            },
        ],
        sites: vec![SiteStatus {
            site: "idealista.com".into(),
            state: SiteState::Waiting,
            kind: Some(RefusalKind::Challenge),
            failures: 3,
            rungs: 5,
            next_retry_at: Some(now + 432_000),
            retry_after_ms: Some(120_000),
            lengthened_by_retry_after: false,
            timeline: vec![Outcome::Ok, Outcome::Challenge, Outcome::Challenge],
            login: false,
            budget: None,
            requests_last_hour: None,
            hint: None,
        }],
        retry: RetryStatus {
            requests: 120,
            retried: 3,
            attempts: 4,
            final_failures: 1,
            retry_rate: 0.025,
        },
        warnings: vec!["retry rate 6.0% over the last hour (above 5%)".into()],
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
            last_sent_at: Some(now - 60_000),
            next_attempt_at: None,
            failed_since: Some(now - 1_000),
            last_error: Some(
                "telegram api.telegram.org: HTTP 401 Unauthorized: Unauthorized".into(),
            ),
        }],
    }
}

const METRICS: &str = "# HELP notifio_requests_total Requests made.\n\
# TYPE notifio_requests_total counter\n\
notifio_requests_total{class=\"search\"} 120\n\
# EOF\n";

fn source() -> Arc<TestSource> {
    Arc::new(TestSource {
        view: Mutex::new(sample_view()),
        metrics: Mutex::new(METRICS.to_string()),
        smtp_password: SMTP_PASSWORD.into(),
        cookies: COOKIE_VALUE.into(),
    })
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

async fn start(
    src: Arc<TestSource>,
    token: Option<&str>,
) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    let cfg = DashboardConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: token.map(str::to_string),
        hosts: Vec::new(),
    };
    let (addr, task) = web::serve(cfg, src, cancel.clone()).await.unwrap();
    assert_ne!(addr.port(), 0, "serve must report the bound port");
    (addr, cancel, task)
}

#[tokio::test]
async fn api_status_round_trips_the_status_view_and_is_fresh_each_call() {
    let src = source();
    let (addr, cancel, task) = start(src.clone(), None).await;
    let http = client();
    let url = format!("http://{addr}/api/status");

    let resp = http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("application/json"), "{ct}");
    let raw: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    // The key names of docs/dashboard.md#endpoints, at the top level and in each entry.
    for key in ["now", "soonest", "searches", "sites", "retry", "warnings"] {
        assert!(raw.get(key).is_some(), "missing top-level key {key}: {raw}");
    }
    for key in [
        "id",
        "name",
        "url",
        "site",
        "state",
        "next_check_at",
        "last_checked_at",
        "last_outcome",
        "new_listings",
        "found",
        "matched",
    ] {
        assert!(raw["searches"][0].get(key).is_some(), "search lacks {key}");
    }
    assert_eq!(raw["searches"][1]["found"], 30);
    assert_eq!(raw["searches"][1]["matched"], 4);
    for key in [
        "site",
        "state",
        "kind",
        "failures",
        "rungs",
        "next_retry_at",
        "retry_after_ms",
    ] {
        assert!(raw["sites"][0].get(key).is_some(), "site lacks {key}");
    }
    for key in [
        "requests",
        "retried",
        "attempts",
        "final_failures",
        "retry_rate",
    ] {
        assert!(raw["retry"].get(key).is_some(), "retry lacks {key}");
    }
    let view: StatusView = serde_json::from_value(raw).unwrap();
    assert_eq!(view, sample_view());

    // The view is built on each request: a change in the source shows at once.
    {
        let mut v = src.view.lock().unwrap();
        v.sites[0].failures = 4;
        let now = v.now;
        v.searches[0].new_listings.push(NewListing {
            id: "new-1".into(),
            first_seen: now,
            ..NewListing::default()
        });
    }
    let body = http.get(&url).send().await.unwrap().text().await.unwrap();
    let view: StatusView = serde_json::from_str(&body).unwrap();
    assert_eq!(view.sites[0].failures, 4);
    assert_eq!(view.searches[0].new_listings[0].id, "new-1");

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("server stops on cancel")
        .unwrap();
    assert!(
        http.get(&url).send().await.is_err(),
        "server still answering after cancel"
    );
}

#[tokio::test]
async fn metrics_and_healthz() {
    let src = source();
    let (addr, cancel, _task) = start(src.clone(), None).await;
    let http = client();

    let resp = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        web::METRICS_CONTENT_TYPE,
        "OpenMetrics text"
    );
    assert_eq!(
        web::METRICS_CONTENT_TYPE,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert_eq!(resp.text().await.unwrap(), METRICS);

    *src.metrics.lock().unwrap() = "notifio_checks_total 7\n".into();
    let body = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "notifio_checks_total 7\n");

    let resp = http
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "ok");

    let resp = http.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(resp.headers().contains_key("content-security-policy"));
    assert!(resp.text().await.unwrap().contains("api/status"));

    // No mutating endpoints.
    for path in ["/", "/api/status", "/metrics"] {
        let resp = http
            .post(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 405, "POST {path}");
    }
    cancel.cancel();
}

#[tokio::test]
async fn non_loopback_bind_needs_a_token() {
    for addr in ["0.0.0.0:0", "[::]:0", "192.0.2.10:7878"] {
        let cfg = DashboardConfig {
            addr: addr.parse().unwrap(),
            token: None,
            hosts: Vec::new(),
        };
        let err = web::serve(cfg, source(), CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(err, WebError::TokenRequired { .. }),
            "{addr}: {err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("dashboard_token") && msg.contains("NOTIFIO_DASHBOARD_TOKEN"),
            "{msg}"
        );
    }
    // A blank token is no token.
    let cfg = DashboardConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: Some("   ".into()),
        hosts: Vec::new(),
    };
    let err = web::serve(cfg, source(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, WebError::EmptyToken), "{err}");
}

#[tokio::test]
async fn bind_failure_is_reported() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = DashboardConfig {
        addr: taken.local_addr().unwrap(),
        token: None,
        hosts: Vec::new(),
    };
    let err = web::serve(cfg, source(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, WebError::Bind { .. }), "{err}");
}

#[tokio::test]
async fn token_is_enforced_on_every_route_but_healthz() {
    let (addr, cancel, _task) = start(source(), Some(TOKEN)).await;
    let http = client();
    for path in ["/", "/api/status", "/metrics"] {
        let url = format!("http://{addr}{path}");
        let resp = http.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), 401, "GET {path} without token");
        assert!(resp.headers().contains_key("www-authenticate"));

        let resp = http.get(&url).bearer_auth("wrong").send().await.unwrap();
        assert_eq!(resp.status(), 401, "GET {path} with a wrong token");
        let resp = http
            .get(&url)
            .bearer_auth(&TOKEN[..TOKEN.len() - 1])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "GET {path} with a prefix of the token");
        let resp = http.get(format!("{url}?token=wrong")).send().await.unwrap();
        assert_eq!(resp.status(), 401, "GET {path}?token=wrong");

        let resp = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(resp.status(), 200, "GET {path} with bearer token");
        let resp = http
            .get(format!("{url}?token={TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "GET {path}?token=");
    }
    let resp = http
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "healthz needs no token");
    cancel.cancel();
}

#[tokio::test]
async fn no_secret_reaches_any_response() {
    let src = source();
    let (addr, cancel, _task) = start(src, Some(TOKEN)).await;
    let http = client();
    let secrets = [TOKEN, SMTP_PASSWORD, COOKIE_VALUE];
    let mut seen = 0;
    for path in [
        "/",
        "/api/status",
        "/metrics",
        "/healthz",
        "/nope",
        "/api/status?token=wrong",
    ] {
        for auth in [false, true] {
            let mut req = http.get(format!("http://{addr}{path}"));
            if auth {
                req = req.bearer_auth(TOKEN);
            }
            let resp = req.send().await.unwrap();
            let headers = format!("{:?}", resp.headers());
            let body = resp.text().await.unwrap();
            for s in secrets {
                assert!(!body.contains(s), "{path} (auth {auth}) body leaks {s}");
                assert!(
                    !headers.contains(s),
                    "{path} (auth {auth}) headers leak {s}"
                );
            }
            seen += 1;
        }
    }
    assert_eq!(seen, 12);
    // Nor the config's Debug output or the errors a user sees.
    let cfg = DashboardConfig {
        addr: "0.0.0.0:7878".parse().unwrap(),
        token: Some(TOKEN.into()),
        hosts: Vec::new(),
    };
    assert!(!format!("{cfg:?}").contains(TOKEN));
    let busy = DashboardConfig {
        addr,
        token: Some(TOKEN.into()),
        hosts: Vec::new(),
    };
    let err = web::serve(busy, source(), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(!format!("{err} {err:?}").contains(TOKEN));
    cancel.cancel();
}

/// DNS rebinding (issue 23 item 15): a page on `evil.example`, its name pointed at 127.0.0.1,
/// reaches the dashboard from the user's browser with `Host: evil.example`. Only the
/// dashboard's own names get an answer.
#[tokio::test]
async fn only_requests_for_the_dashboards_own_names_are_answered() {
    let cancel = CancellationToken::new();
    let cfg = DashboardConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: Some(TOKEN.into()),
        hosts: vec!["notifio.lan".into()],
    };
    let (addr, _task) = web::serve(cfg, source(), cancel.clone()).await.unwrap();
    let http = client();
    let port = addr.port();
    for path in ["/", "/api/status", "/metrics", "/healthz"] {
        let url = format!("http://{addr}{path}");
        for host in [
            "evil.example".to_owned(),
            format!("evil.example:{port}"),
            format!("127.0.0.1.evil.example:{port}"),
            format!("notifio.lan:{}", port + 1),
        ] {
            let resp = http
                .get(&url)
                .header("host", &host)
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 421, "GET {path} Host: {host}");
            let body = resp.text().await.unwrap();
            assert!(!body.contains("Madrid"), "{body}");
        }
        for host in [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("notifio.lan:{port}"),
        ] {
            let resp = http
                .get(&url)
                .header("host", &host)
                .header("authorization", format!("bearer {TOKEN}"))
                .send()
                .await
                .unwrap();
            assert_eq!(
                resp.status(),
                200,
                "GET {path} Host: {host}, lower-case scheme"
            );
        }
    }
    cancel.cancel();
}
