//! A site's request budget with the real binary and the fake portal (docs/policy.md#a-request-budget-per-site):
//! time compressed to seconds (a budget per second, `max_interval` of seconds), the rules the
//! ones a real run uses.
//!
//! - the budget is never exceeded in any window of its unit, spacing holds, a search whose
//!   listings keep coming gets more checks than quiet ones, each is still checked every
//!   `max_interval`, and `status --json` shows the plan
//!   → `a_budget_is_spent_where_listings_appear_and_never_exceeded`
//! - a refusal still sends the site down its ladder → same test, at its end
//! - a budget the searches cannot fit is refused at its key → `a_budget_too_small_is_refused_at_its_key`

use crate::util::{Notifio, wait_for, write_config};
use fake_portal::{Behaviour, Portal, SiteSpec};
use serde_json::Value;
use std::time::Duration;

const LISTING: &str = "listing = { selector = \"article.listing\", id_attr = \"data-id\" }";

fn status(config: &std::path::Path) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(["status", "--json", "--config"])
        .arg(config)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_spent_where_listings_appear_and_never_exceeded() {
    let portal = Portal::start(vec![SiteSpec {
        page_bytes: 20_000,
        ..SiteSpec::new("flats")
    }])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let site = portal
        .base_url("flats")
        .trim_start_matches("http://")
        .to_owned();
    let mut t = format!(
        "[watch]\ninterval = \"100ms\"\nspacing = \"50ms\"\nmax_interval = \"2s\"\nstate_dir = {:?}\ndashboard = false\n\n\
         [backoff]\nrate_limited = [\"2s\"]\njitter = 0\n\n[site.{site:?}]\nbudget = \"4/s\"\n\n",
        state.display().to_string()
    );
    for name in ["busy", "quiet", "still"] {
        t.push_str(&format!(
            "[[search]]\nname = {name:?}\nurl = {:?}\n{LISTING}\n\n",
            portal.search_url("flats", name)
        ));
    }
    let path = write_config(dir.path(), &t);
    let watch = Notifio::start(dir.path(), &path, false, None);
    wait_for(Duration::from_secs(10), "the baselines", || {
        crate::util::all_baselined(&state, 3).then_some(())
    })
    .await;
    // New listings keep coming on one search only.
    let from = notifio::clock::now().as_millis();
    for _ in 0..30 {
        portal.add_listing("flats", Some("busy"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let requests: Vec<(u64, String)> = portal
        .requests()
        .into_iter()
        .filter(|r| r.site == "flats")
        .map(|r| (r.at, r.path))
        .collect();
    // Never more than 4 in any second, never two within the spacing. The budget is kept on
    // notifio's clock when it starts a request; the portal stamps the arrival, which on a
    // loaded machine can lag it by tens of milliseconds, so the window counted here is the
    // second less that lag (notifio itself keeps a margin of a tenth of the unit).
    const ARRIVAL_LAG_MS: u64 = 150;
    for (i, (at, _)) in requests.iter().enumerate() {
        let in_window = requests[i..]
            .iter()
            .take_while(|(t, _)| *t < at + 1000 - ARRIVAL_LAG_MS)
            .count();
        assert!(
            in_window <= 4,
            "{in_window} requests in the second from {at}"
        );
    }
    for w in requests.windows(2) {
        assert!(w[1].0 + 5 >= w[0].0 + 50, "spacing: {w:?}");
    }
    let of = |name: &str| {
        requests
            .iter()
            .filter(|(t, p)| *t >= from + 2000 && p.ends_with(&format!("/{name}")))
            .map(|(t, _)| *t)
            .collect::<Vec<_>>()
    };
    let (busy, quiet, still) = (of("busy"), of("quiet"), of("still"));
    println!(
        "checks after learning: busy {}, quiet {}, still {}",
        busy.len(),
        quiet.len(),
        still.len()
    );
    assert!(
        busy.len() > quiet.len() && busy.len() > still.len(),
        "the busy search gets the budget: {} / {} / {}",
        busy.len(),
        quiet.len(),
        still.len()
    );
    for (name, times) in [("quiet", &quiet), ("still", &still)] {
        assert!(!times.is_empty(), "{name} is still checked");
        for w in times.windows(2) {
            assert!(
                w[1] - w[0] <= 2000 + 100,
                "{name} waited {} ms",
                w[1] - w[0]
            );
        }
    }
    let view = status(&path);
    let plan = |name: &str| {
        view["searches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()
            .clone()
    };
    let (b, q) = (plan("busy"), plan("quiet"));
    println!(
        "busy: {}, quiet: {}",
        b["checks_per_hour"], q["checks_per_hour"]
    );
    assert!(
        b["checks_per_hour"].as_f64().unwrap() > q["checks_per_hour"].as_f64().unwrap(),
        "{view:#}"
    );
    assert!(b["expected_delay_s"].as_f64().unwrap() < q["expected_delay_s"].as_f64().unwrap());
    let site_view = &view["sites"][0];
    assert_eq!(site_view["budget"], "4/s", "{view:#}");
    assert!(
        site_view["requests_last_hour"].as_u64().unwrap() > 10,
        "{view:#}"
    );

    // A refusal still sends the site down its ladder: nothing for its 2 s.
    portal.set_behaviour("flats", Behaviour::RateLimited { retry_after: None });
    wait_for(Duration::from_secs(5), "the site to wait", || {
        (!crate::util::backoff(&state).is_empty()).then_some(())
    })
    .await;
    let refused_at = notifio::clock::now().as_millis();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = portal
        .requests()
        .iter()
        .filter(|r| r.at > refused_at + 100)
        .count();
    assert_eq!(during, 0, "a budget never asks a waiting site");
    assert_eq!(watch.terminate(), Some(0));
}

#[test]
fn a_budget_too_small_is_refused_at_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = format!(
        "[watch]\nstate_dir = {:?}\ndashboard = false\n\n[site.\"127.0.0.1:9\"]\nbudget = \"10/h\"\n\n",
        dir.path().join("state").display().to_string()
    );
    for i in 0..5 {
        t.push_str(&format!(
            "[[search]]\nname = \"s{i}\"\nurl = \"http://127.0.0.1:9/s{i}\"\n{LISTING}\n\n"
        ));
    }
    let path = write_config(dir.path(), &t);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("notifio.toml:6:10"), "{err}");
    assert!(err.contains("site.\"127.0.0.1:9\".budget"), "{err}");
    assert!(err.contains("5 searches"), "{err}");
    let pages = t
        .replace("budget = \"10/h\"", "budget = \"2/min\"")
        .replacen(
            &format!("url = \"http://127.0.0.1:9/s0\"\n{LISTING}\n"),
            &format!("url = \"http://127.0.0.1:9/s0\"\n{LISTING}\npages = 3\n"),
            1,
        );
    std::fs::write(&path, pages).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("reads 3 pages"), "{err}");
}

/// The benchmark of docs/BENCHMARKS.md ("budget, black box"), not a test: two `notifio watch`
/// side by side, each on its own fake portal, the same listings arriving at the same moments
/// (four searches, Poisson at 12, 4, 1.2 and 0.4 a minute, seeded), one with a budget of
/// 30/min, the other with every search at the interval that spends what the budget plans at
/// its peak (80 %: every 10 s). Four minutes; each listing's time to notify is from its
/// arrival on the portal to its webhook message. Prints both runs' requests and mean time to
/// notify, and the ratio at equal requests (a periodic check's mean wait is half its
/// interval, so the fixed run's mean is scaled by its requests over the budget's).
///
/// `cargo test --release -p notifio --test it -- --ignored budget::bench --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark of four minutes"]
async fn bench_a_budget_against_fixed_intervals_side_by_side() {
    use crate::util::{Fake, answer};
    let secs: u64 = std::env::var("NOTIFIO_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(240);
    let rates_per_min = [12.0, 4.0, 1.2, 0.4];
    let names = ["a", "b", "c", "d"];
    // The arrivals: one schedule for both portals.
    let mut x: u64 = 0x5eed_2026;
    let mut uniform = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    };
    let mut schedule: Vec<(u64, usize)> = Vec::new();
    for (i, r) in rates_per_min.iter().enumerate() {
        let mut t = 0.0;
        loop {
            t += -uniform().ln() / r * 60_000.0;
            if t >= (secs * 1000) as f64 {
                break;
            }
            schedule.push((t as u64, i));
        }
    }
    schedule.sort_unstable();
    let spec = || SiteSpec {
        page_bytes: 20_000,
        listings: 10,
        ..SiteSpec::new("flats")
    };
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for (label, budget) in [("budget", true), ("fixed", false)] {
        let portal = Portal::start(vec![spec()]).await.unwrap();
        let hook = Fake::start(answer(200, "{}")).await;
        let run_dir = dir.path().join(label);
        std::fs::create_dir_all(&run_dir).unwrap();
        let site = portal
            .base_url("flats")
            .trim_start_matches("http://")
            .to_owned();
        let (interval, site_table) = if budget {
            ("1s", format!("[site.{site:?}]\nbudget = \"30/min\"\n\n"))
        } else {
            ("10s", String::new())
        };
        let mut t = format!(
            "[watch]\ninterval = {interval:?}\nspacing = \"100ms\"\nmax_interval = \"60s\"\nstate_dir = {:?}\ndashboard = false\n\n\
             [notify]\nwebhook = {{ url = \"{}/hook\" }}\n\n{site_table}",
            run_dir.join("state").display().to_string(),
            hook.url
        );
        for n in names {
            t.push_str(&format!(
                "[[search]]\nname = {n:?}\nurl = {:?}\n{LISTING}\n\n",
                portal.search_url("flats", n)
            ));
        }
        let path = write_config(&run_dir, &t);
        let child = Notifio::start(&run_dir, &path, false, None);
        wait_for(Duration::from_secs(20), "the baselines", || {
            crate::util::all_baselined(&run_dir.join("state"), names.len()).then_some(())
        })
        .await;
        runs.push((label, portal, hook, child, path));
    }
    let start = std::time::Instant::now();
    let mut added: Vec<(String, u64)> = Vec::new();
    let before: Vec<usize> = runs.iter().map(|r| r.1.request_count("flats")).collect();
    for (at, i) in &schedule {
        let wait = Duration::from_millis(*at).saturating_sub(start.elapsed());
        tokio::time::sleep(wait).await;
        let now = start.elapsed().as_millis() as u64;
        let mut id = String::new();
        for r in &runs {
            id = r.1.add_listing("flats", Some(names[*i])).url;
        }
        // The same listing number on both portals: its path is the same.
        added.push((id.rsplit('/').next().unwrap_or_default().to_owned(), now));
    }
    tokio::time::sleep(Duration::from_secs(30)).await; // the last ones' notifications
    let mut figures = Vec::new();
    for (r, b) in runs.iter().zip(&before) {
        let requests = r.1.request_count("flats") - b;
        let hits = r.2.hits();
        let mut delays = Vec::new();
        for (id, at) in &added {
            let needle = format!("/listing/{id}");
            if let Some(h) = hits.iter().find(|h| h.body.contains(&needle)) {
                let arrived = h.at.saturating_duration_since(start).as_millis() as u64;
                delays.push(arrived.saturating_sub(*at));
            }
        }
        let mean = delays.iter().sum::<u64>() as f64 / delays.len().max(1) as f64 / 1000.0;
        println!(
            "{}: {} listings notified of {}, {requests} requests, mean time to notify {mean:.2} s",
            r.0,
            delays.len(),
            added.len()
        );
        figures.push((requests as f64, mean));
    }
    let (br, bm) = figures[0];
    let (fr, fm) = figures[1];
    let at_equal = fm * fr / br;
    println!(
        "ratio of mean times to notify at equal requests: {:.2} (budget {bm:.2} s; fixed {fm:.2} s at {fr} requests, {at_equal:.2} s at the budget's {br})",
        bm / at_equal
    );
    for (_, portal, _, child, _) in runs {
        assert_eq!(child.terminate(), Some(0));
        portal.shutdown().await;
    }
}
