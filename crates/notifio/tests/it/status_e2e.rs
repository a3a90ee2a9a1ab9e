//! The dashboard's `/api/status` and `/metrics` against a running watcher (the same runner as
//! `notifio watch`) on the fake portal, with one refusing site, and `notifio status --json`
//! reading the same numbers from the same database.

use fake_portal::{Behaviour, ChallengeKind, Portal, SiteSpec};
use notifio::status::StatusView;
use notifio_policy::{Outcome, RefusalKind, SearchState};
use std::net::SocketAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn site(name: &str) -> SiteSpec {
    SiteSpec {
        page_bytes: 30_000,
        ..SiteSpec::new(name)
    }
}

async fn get(addr: SocketAddr, path: &str) -> reqwest::Response {
    reqwest::get(format!("http://{addr}{path}")).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_status_shows_a_refusing_site_waiting_and_its_searches_share_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let portal = Portal::start(vec![site("calm"), site("wall")])
        .await
        .unwrap();
    portal.set_behaviour("wall", Behaviour::Challenge(ChallengeKind::DataDome, 403));
    // The calm site fails its first request once: the retry shows in the metrics.
    portal.set_behaviour("calm", Behaviour::FailNext(1));
    let mut text = format!(
        "[watch]\ninterval = \"500ms\"\nspacing = \"50ms\"\nstate_dir = {:?}\ndashboard = \"127.0.0.1:0\"\n\n\
         [backoff]\nchallenge = [\"30s\", \"1m\"]\n\n[retry.search]\ninitial = \"10ms\"\n\n",
        dir.path().display().to_string()
    );
    for (name, s, slug) in [
        ("calm one", "calm", "a"),
        ("wall one", "wall", "a"),
        ("wall two", "wall", "b"),
    ] {
        text.push_str(&format!(
            "[[search]]\nname = \"{name}\"\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n",
            portal.search_url(s, slug)
        ));
    }
    let path = dir.path().join("notifio.toml");
    std::fs::write(&path, &text).unwrap();
    let cfg = notifio::config::load(&path).unwrap();

    let cancel = CancellationToken::new();
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let hooks = notifio::runner::Hooks {
        narrator: None,
        on_dashboard: Some(Box::new(move |a: SocketAddr| {
            let _ = addr_tx.send(a);
        })),
    };
    let runner = tokio::spawn(notifio::runner::run(cfg, cancel.clone(), hooks));
    let addr = tokio::time::timeout(Duration::from_secs(10), addr_rx)
        .await
        .unwrap()
        .unwrap();

    // Poll until the wall is waiting and the calm site has been checked.
    let mut view = StatusView::default();
    for _ in 0..100 {
        view = serde_json::from_str(&get(addr, "/api/status").await.text().await.unwrap()).unwrap();
        let wall_waiting = view.sites.iter().any(|s| s.state.as_str() == "waiting");
        let calm_ok = view
            .searches
            .iter()
            .any(|s| s.name == "calm one" && s.last_outcome.map(Outcome::as_str) == Some("ok"));
        if wall_waiting && calm_ok {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall_key = notifio_policy::SiteKey::from_url(&portal.base_url("wall"))
        .unwrap()
        .to_string();
    let wall = view
        .sites
        .iter()
        .find(|s| s.site == wall_key)
        .expect("the wall site is listed");
    assert_eq!(wall.state.as_str(), "waiting");
    assert_eq!(wall.kind.map(RefusalKind::as_str), Some("challenge"));
    assert_eq!(wall.failures, 1);
    assert_eq!(wall.rungs, 2);
    let deadline = wall.next_retry_at.expect("a waiting site has a deadline");
    assert!(deadline > view.now + 20_000, "30s ±15% from the refusal");
    assert_eq!(view.soonest, Some(deadline));
    for name in ["wall one", "wall two"] {
        let s = view.searches.iter().find(|s| s.name == name).unwrap();
        assert_eq!(s.state.as_str(), "waiting", "{name}");
        assert_eq!(
            s.next_check_at,
            Some(deadline),
            "{name} shares its site's deadline"
        );
        assert!(
            s.reason.as_deref().unwrap_or("").contains("challenge page"),
            "{:?}",
            s.reason
        );
    }
    let calm = view.searches.iter().find(|s| s.name == "calm one").unwrap();
    assert_eq!(calm.state.as_str(), "ok");
    assert!(
        view.retry.retried >= 1,
        "the 503-then-200 was retried: {:?}",
        view.retry
    );

    // /metrics: Prometheus text exposition that counts the retry.
    let metrics = get(addr, "/metrics").await.text().await.unwrap();
    let mut retried = 0.0;
    for line in metrics.lines().filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP ") || line.starts_with("# TYPE ") || line == "# EOF",
                "bad comment line: {line}"
            );
            continue;
        }
        let (name, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not `name value`: {line}"));
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        assert!(name.starts_with("notifio_"), "{line}");
        if name.starts_with("notifio_fetch_retried_requests_total") {
            retried += v;
        }
    }
    assert!(retried >= 1.0, "metrics count the retry:\n{metrics}");
    assert!(
        metrics.contains("notifio_checks_total{outcome=\"challenge\"}"),
        "{metrics}"
    );
    // One exposition: a real OpenMetrics parser reads it whole (`# EOF` once, at the end),
    // with the fetcher's metrics, the app's counters and the outbox in it.
    assert_eq!(metrics.matches("# EOF").count(), 1, "{metrics}");
    assert!(
        metrics.ends_with("# EOF\n"),
        "`# EOF` is the last line:\n{metrics}"
    );
    let parsed = openmetrics_parser::openmetrics::parse_openmetrics(&metrics)
        .unwrap_or_else(|e| panic!("not OpenMetrics: {e:?}\n{metrics}"));
    for family in [
        "notifio_fetch_requests",
        "notifio_fetch_retried_requests",
        "notifio_fetch_latency_seconds",
        "notifio_checks",
        "notifio_listings_found",
        "notifio_checks_in_flight",
        "notifio_outbox_pending",
    ] {
        assert!(
            parsed.families.contains_key(family),
            "no {family} in {:?}",
            parsed.families.keys().collect::<Vec<_>>()
        );
    }

    // `notifio status --json` reads the same database: same states and deadlines.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(["status", "--json", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: StatusView = serde_json::from_slice(&out.stdout).unwrap();
    let api: StatusView =
        serde_json::from_str(&get(addr, "/api/status").await.text().await.unwrap()).unwrap();
    assert_eq!(
        cli.sites, api.sites,
        "the terminal and the dashboard agree on sites"
    );
    let states = |v: &StatusView| {
        v.searches
            .iter()
            .map(|s| (s.name.clone(), s.state, s.next_check_at))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        states(&cli)
            .into_iter()
            .filter(|s| s.1 == SearchState::Waiting)
            .collect::<Vec<_>>(),
        states(&api)
            .into_iter()
            .filter(|s| s.1 == SearchState::Waiting)
            .collect::<Vec<_>>()
    );

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    portal.shutdown().await;
}
