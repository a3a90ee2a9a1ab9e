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
//! - a search outside its `active_hours` gets only its `max_interval`, the plan lines read the
//!   same in `status` and the dashboard, and a site with two searches and no budget gets the
//!   suggestion → `active_hours_rest_a_search_and_the_plan_is_shown_everywhere`
//! - hours whose history shows no listings drop to `max_interval`: the watcher plans with what
//!   the store kept → `learnt_quiet_hours_drop_to_max_interval`
//! - the budget is the site's, whoever sends: a `check` beside a `watch` (and a `watch` after
//!   a `check`) never sends more than it in a window → `check_and_watch_spend_one_budget`
//! - a redirect within the site that the budget has no room for waits for room; it is never
//!   recorded as the site refusing → `a_redirect_the_budget_has_no_room_for_waits_and_is_no_refusal`

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

/// Search `name` in a status view.
fn search_named(view: &Value, name: &str) -> Value {
    view["searches"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no search {name}: {view:#}"))
        .clone()
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
        "[watch]\ninterval = \"100ms\"\nspacing = \"50ms\"\nmax_interval = \"4s\"\nstate_dir = {:?}\ndashboard = false\n\n\
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
    let closest = requests.windows(2).map(|w| w[1].0 - w[0].0).min();
    println!("closest two requests: {closest:?} ms apart");
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
            // `max_interval` is a promise: the plan leaves room for the longest wait for the
            // site's budget; the margin is the lag of a loaded machine between a check
            // falling due and its request arriving.
            assert!(
                w[1] - w[0] <= 4000 + 400,
                "{name} waited {} ms",
                w[1] - w[0]
            );
        }
    }
    let view = status(&path);
    let (b, q) = (search_named(&view, "busy"), search_named(&view, "quiet"));
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

    // A refusal still sends the site down its ladder: nothing for its 2 s. The refusal is the
    // first request to arrive after the switch; the window is counted from it, on the portal's
    // clock, less what was already on its way.
    let switched = notifio::clock::now().as_millis();
    portal.set_behaviour("flats", Behaviour::RateLimited { retry_after: None });
    wait_for(Duration::from_secs(5), "the site to wait", || {
        (!crate::util::backoff(&state).is_empty()).then_some(())
    })
    .await;
    let refused_at = portal
        .requests()
        .iter()
        .map(|r| r.at)
        .find(|at| *at >= switched)
        .expect("the refused request");
    let quiet_until = refused_at + 1800;
    let left = quiet_until.saturating_sub(notifio::clock::now().as_millis());
    tokio::time::sleep(Duration::from_millis(left)).await;
    let during = portal
        .requests()
        .iter()
        .filter(|r| r.at > refused_at + 100 && r.at < quiet_until)
        .count();
    assert_eq!(during, 0, "a budget never asks a waiting site");
    assert_eq!(watch.terminate(), Some(0));
}

/// Checks an hour a search gets at its floor (`max_interval`, planned with room for the
/// longest wait for a budget of 4/s shared by `searches` one-page searches), by the policy's
/// own rule.
fn floor_per_hour(max_interval_s: u64, searches: usize) -> f64 {
    use notifio_policy::allocate::slowest_planned;
    let budget = notifio_policy::RequestBudget {
        requests: 4,
        per: Duration::from_secs(1),
    };
    let wait = budget.longest_wait(std::iter::repeat_n(1, searches));
    3600.0 / slowest_planned(Duration::from_secs(max_interval_s), wait).as_secs_f64()
}

/// `HH:00-HH:00`, an hour-long window starting `ahead` hours from now, local time.
fn hours_from_now(ahead: u64) -> String {
    let now = notifio::clock::now();
    let offset = notifio::clock::local_offset(now).0;
    let local_s = (i64::try_from(now.as_millis() / 1000).unwrap() + i64::from(offset)).max(0);
    let hour = u64::try_from(local_s).unwrap() / 3600 % 24;
    let (from, to) = ((hour + ahead) % 24, (hour + ahead + 1) % 24);
    format!("{from:02}:00-{to:02}:00")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_hours_rest_a_search_and_the_plan_is_shown_everywhere() {
    let portal = Portal::start(vec![SiteSpec::new("flats"), SiteSpec::new("rooms")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let key = |name: &str| {
        portal
            .base_url(name)
            .trim_start_matches("http://")
            .to_owned()
    };
    let (flats, rooms) = (key("flats"), key("rooms"));
    let mut t = format!(
        "[watch]\ninterval = \"100ms\"\nspacing = \"50ms\"\nmax_interval = \"4s\"\nstate_dir = {:?}\n\
         dashboard = \"127.0.0.1:0\"\n\n[site.{flats:?}]\nbudget = \"4/s\"\n\n",
        state.display().to_string()
    );
    // "asleep" listens only in an hour that starts two hours from now.
    let resting = format!("active_hours = \"{}\"\n", hours_from_now(2));
    for (name, site, extra) in [
        ("awake", "flats", String::new()),
        ("asleep", "flats", resting),
        ("r1", "rooms", "interval = \"1s\"\n".to_owned()),
        ("r2", "rooms", "interval = \"1s\"\n".to_owned()),
    ] {
        t.push_str(&format!(
            "[[search]]\nname = {name:?}\nurl = {:?}\n{extra}{LISTING}\n\n",
            portal.search_url(site, name)
        ));
    }
    let path = write_config(dir.path(), &t);
    let watch = Notifio::start(dir.path(), &path, false, None);
    let dashboard = crate::journeys::dashboard_of(&watch).await;
    let view = wait_for(Duration::from_secs(10), "the plans", || {
        let view = status(&path);
        let planned = view["searches"]
            .as_array()?
            .iter()
            .all(|s| s["checks_per_hour"].is_number() && s["last_checked_at"].is_number());
        planned.then_some(view)
    })
    .await;
    let plan = search_named;
    let (awake, asleep) = (plan(&view, "awake"), plan(&view, "asleep"));
    // Resting, a search gets its floor: `max_interval`, planned early enough for the longest
    // wait for the site's budget.
    let floor = floor_per_hour(4, 2);
    let per_hour = |s: &Value| s["checks_per_hour"].as_f64().unwrap();
    assert!(
        (per_hour(&asleep) - floor).abs() < floor * 0.01,
        "asleep gets only max_interval: {asleep:#}"
    );
    assert!(
        per_hour(&awake) > 2.0 * per_hour(&asleep),
        "awake: {awake:#}\nasleep: {asleep:#}"
    );
    // And the watcher does it: over a few seconds, asleep is asked about every 2.4 s.
    let from = notifio::clock::now().as_millis();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let asked = |name: &str| {
        portal
            .requests()
            .iter()
            .filter(|r| r.at >= from && r.path.ends_with(&format!("/{name}")))
            .count()
    };
    let (a, z) = (asked("awake"), asked("asleep"));
    println!("in 4 s: awake {a} requests, asleep {z}");
    assert!((1..=4).contains(&z), "asleep: {z} requests in 4 s");
    assert!(a > z, "awake {a}, asleep {z}");

    // The same plan in the table, in words, and in the dashboard's view.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(["status", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    println!("{table}");
    assert!(
        table.contains("checked about every 2 s now · typically notified within 1 s"),
        "asleep's plan line: {table}"
    );
    assert!(
        table.contains(&format!("{flats:<22}")) && table.contains("4/s, "),
        "{table}"
    );
    let hint = format!("hint: 2 searches on {rooms}: a budget (`budget = \"4/min\"`");
    assert!(table.contains(&hint), "the suggestion for rooms: {table}");
    assert_eq!(
        table.matches("hint: ").count(),
        1,
        "none for the site with a budget: {table}"
    );
    let answer = crate::util::api_client()
        .get(format!("http://{dashboard}/api/status"))
        .send()
        .await
        .unwrap();
    let shown: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    let site_of = |site: &str| {
        shown["sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["site"] == site)
            .unwrap()
            .clone()
    };
    assert_eq!(site_of(&flats)["budget"], "4/s", "{shown:#}");
    assert!(site_of(&flats)["hint"].is_null(), "{shown:#}");
    assert!(
        site_of(&rooms)["hint"]
            .as_str()
            .is_some_and(|h| h.starts_with("2 searches on ")),
        "{shown:#}"
    );
    let asleep_shown = plan(&shown, "asleep");
    assert!(
        (per_hour(&asleep_shown) - floor).abs() < floor * 0.01,
        "{asleep_shown:#}"
    );
    assert!(per_hour(&plan(&shown, "r1")) > 0.0, "{shown:#}");
    assert_eq!(watch.terminate(), Some(0));
}

/// Two weeks of history in the store (kept as a watcher keeps it) say that listings come
/// all day but not at night, and it is night now (seven hours around this one): the watcher,
/// started on it, checks both searches only every `max_interval` (planned at 85 % of it),
/// where an empty history would have had them checked more than twice as often.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learnt_quiet_hours_drop_to_max_interval() {
    use notifio_policy::{ArrivalRates, Timestamp};
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let key = portal.base_url("flats");
    let site = key.trim_start_matches("http://");
    let mut t = format!(
        "[watch]\ninterval = \"100ms\"\nspacing = \"50ms\"\nmax_interval = \"2s\"\n\
         state_dir = {:?}\ndashboard = false\n\n[site.{site:?}]\nbudget = \"4/s\"\n\n",
        state.display().to_string()
    );
    for name in ["north", "south"] {
        t.push_str(&format!(
            "[[search]]\nname = {name:?}\nurl = {:?}\n{LISTING}\n\n",
            portal.search_url("flats", name)
        ));
    }
    let path = write_config(dir.path(), &t);
    // A first pass makes the searches' rows (and their baselines).
    crate::util::stdout_of_success(
        std::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
            .args(["check", "--config"])
            .arg(&path),
    );
    let now = notifio::clock::now();
    let offset = notifio::clock::local_offset(now);
    // The site's night is now: no listings from three hours before this hour of the day to
    // three after, day after day.
    let here = offset.hour_of_week(now) % 24;
    let night = |h: usize| (h + 24 - here) % 24 <= 3 || (here + 24 - h) % 24 <= 3;
    let hour = 3_600_000;
    let mut model = ArrivalRates::new();
    let from = now.as_millis() / hour * hour - 14 * 24 * hour;
    for i in 0..14 * 24 {
        let (a, b) = (from + i * hour, from + (i + 1) * hour);
        let new = if night(offset.hour_of_week(Timestamp(a)) % 24) {
            0
        } else {
            20
        };
        model.observe(Timestamp(a), Timestamp(b), new, offset);
    }
    let ids: Vec<u32> = {
        let db = crate::util::db(&state).unwrap();
        let mut stmt = db.prepare("SELECT id FROM searches").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(ids.len(), 2);
    let mut store = notifio::store::Store::open(&state).unwrap();
    store
        .transaction(|tx| {
            ids.iter()
                .try_for_each(|id| tx.save_arrival_rates(*id, &model, Some(now.as_millis())))
        })
        .map_err(|e: notifio::store::StoreError| e)
        .unwrap();
    drop(store);

    // The pass wrote its plan too (from an empty history): the watcher's replaces it at its
    // first checks.
    let watch = Notifio::start(dir.path(), &path, false, None);
    let floor = floor_per_hour(2, 2);
    let at_floor = |s: &Value| {
        s["checks_per_hour"]
            .as_f64()
            .is_some_and(|n| (n - floor).abs() < floor * 0.01)
    };
    let start = std::time::Instant::now();
    loop {
        let view = status(&path);
        if ["north", "south"]
            .iter()
            .all(|n| at_floor(&search_named(&view, n)))
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "in their quiet hour both get only max_interval ({floor:.0}/h): {view:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(watch.terminate(), Some(0));
}

/// `init` says what a budget is for, and `check` suggests one for a site with two searches,
/// until the site has one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_and_check_suggest_a_budget_for_a_site_with_two_searches() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        crate::util::stdout_of_success(
            std::process::Command::new(env!("CARGO_BIN_EXE_notifio")).args(args),
        )
    };
    let starter = dir.path().join("starter.toml");
    let said = run(&["init", starter.to_str().unwrap()]);
    assert!(
        said.contains("request budget")
            && said.contains("docs/policy.md#a-request-budget-per-site"),
        "{said}"
    );
    let portal = Portal::start(vec![SiteSpec::new("rooms")]).await.unwrap();
    let site = portal
        .base_url("rooms")
        .trim_start_matches("http://")
        .to_owned();
    let mut t = format!(
        "[watch]\nstate_dir = {:?}\ndashboard = false\n\n",
        dir.path().join("state").display().to_string()
    );
    for name in ["r1", "r2"] {
        t.push_str(&format!(
            "[[search]]\nname = {name:?}\nurl = {:?}\n{LISTING}\n\n",
            portal.search_url("rooms", name)
        ));
    }
    let path = write_config(dir.path(), &t);
    let said = run(&["check", "--config", path.to_str().unwrap()]);
    assert!(
        said.contains(&format!("hint: 2 searches on {site}: a budget")),
        "{said}"
    );
    // `init` on the config it would have written leaves it alone, and says the same.
    let before = std::fs::read(&path).unwrap();
    let again = crate::util::run_binary([std::ffi::OsStr::new("init"), path.as_os_str()]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert_ne!(again.status.code(), Some(0), "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert!(
        err.contains(&format!("hint: 2 searches on {site}: a budget")),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
    std::fs::write(&path, format!("{t}[site.{site:?}]\nbudget = \"4/min\"\n")).unwrap();
    let said = run(&["check", "--config", path.to_str().unwrap()]);
    assert!(!said.contains("hint:"), "the site has a budget now: {said}");
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
    let out = crate::util::run_binary([
        std::ffi::OsStr::new("check"),
        "--config".as_ref(),
        path.as_os_str(),
    ]);
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
    let out = crate::util::run_binary([
        std::ffi::OsStr::new("check"),
        "--config".as_ref(),
        path.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("reads 3 pages"), "{err}");
}

/// The benchmark of docs/BENCHMARKS.md ("budget, black box"), not a test: `notifio watch`
/// with a budget of 30/min beside one with every search at a fixed interval, each on its own
/// fake portal, the same listings arriving at the same moments (four searches, Poisson at 12,
/// 4, 1.2 and 0.4 a minute, seeded). Four minutes and a half a round; each listing's time to
/// notify is from its arrival on the portal to its webhook message. A first round runs the
/// budget alone and counts its requests; the second runs it again beside fixed intervals
/// that send that many requests, and prints both runs' requests and mean time to notify.
///
/// `cargo test --release -p notifio --test it -- --ignored budget::bench --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark of nine minutes"]
async fn bench_a_budget_against_fixed_intervals_side_by_side() {
    let secs: u64 = std::env::var("NOTIFIO_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(240);
    let rates_per_min = [12.0, 4.0, 1.2, 0.4];
    let names = ["a", "b", "c", "d"];
    // The arrivals: one schedule for every portal.
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
    let first = race(&schedule, &names, &[None]).await;
    // Requests are counted from the baselines to 30 s after the last arrival.
    let window_ms = (secs + 30) * 1000;
    let fixed_ms = (window_ms as f64 * names.len() as f64 / first[0].0).round() as u64;
    println!(
        "round 1: the budget sent {} requests; fixed intervals of {fixed_ms} ms send as many",
        first[0].0
    );
    let second = race(&schedule, &names, &[None, Some(fixed_ms)]).await;
    let ((br, bm), (fr, fm)) = (second[0], second[1]);
    println!(
        "round 2, side by side: budget {bm:.2} s at {br} requests, fixed {fm:.2} s at {fr} requests: ratio of mean times to notify {:.2} (requests {:.2})",
        bm / fm,
        br / fr
    );
}

/// Runs one `notifio watch` per entry of `modes` at once (`None`: the budget of 30/min,
/// `Some(ms)`: every search at that interval), each on its own portal, through `schedule`'s
/// arrivals; returns each run's requests and mean time to notify (s).
async fn race(schedule: &[(u64, usize)], names: &[&str], modes: &[Option<u64>]) -> Vec<(f64, f64)> {
    use crate::util::{Fake, answer};
    let spec = || SiteSpec {
        page_bytes: 20_000,
        listings: 10,
        ..SiteSpec::new("flats")
    };
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for (k, mode) in modes.iter().enumerate() {
        let label = format!("{k}-{}", if mode.is_some() { "fixed" } else { "budget" });
        let portal = Portal::start(vec![spec()]).await.unwrap();
        let hook = Fake::start(answer(200, "{}")).await;
        let run_dir = dir.path().join(&label);
        std::fs::create_dir_all(&run_dir).unwrap();
        let site = portal
            .base_url("flats")
            .trim_start_matches("http://")
            .to_owned();
        let (interval, site_table) = match mode {
            None => (
                "1s".to_owned(),
                format!("[site.{site:?}]\nbudget = \"30/min\"\n\n"),
            ),
            Some(ms) => (format!("{ms}ms"), String::new()),
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
    for (at, i) in schedule {
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
    for (_, portal, _, child, _) in runs {
        assert_eq!(child.terminate(), Some(0));
        portal.shutdown().await;
    }
    figures
}

/// A site on 127.0.0.1 whose `/search` redirects to `/results` (within the site), where the
/// cards are; `/plain` shows the same cards. Returns its URL and the arrival time (ms) and path
/// of every request.
async fn redirecting_site() -> (String, std::sync::Arc<std::sync::Mutex<Vec<(u64, String)>>>) {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log: std::sync::Arc<std::sync::Mutex<Vec<(u64, String)>>> = Default::default();
    let seen = log.clone();
    let cards = "<html><body><article class=\"listing\" data-id=\"1\"><a href=\"/l/1\">\
                 <h2>Flat</h2></a></article></body></html>";
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let Some(head) = crate::util::read_head(&mut sock).await else {
                    return;
                };
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let path = line.split(' ').nth(1).unwrap_or("").to_owned();
                seen.lock()
                    .unwrap()
                    .push((notifio::clock::now().as_millis(), path.clone()));
                let response = if path == "/search" {
                    "HTTP/1.1 302 Found\r\nLocation: /results\r\nContent-Length: 0\r\n\
                     Connection: close\r\n\r\n"
                        .to_owned()
                } else {
                    crate::util::raw_response("200 OK", &[], cards)
                        .into_iter()
                        .map(char::from)
                        .collect()
                };
                let _ = sock.write_all(response.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (url, log)
}

/// Issue 53, item 6: a search whose URL redirects within its budgeted site, when the budget
/// has no room for the redirect, was recorded as the site refusing ("refused (error): all 2
/// searches wait", the error ladder, the probe too). Notifio's own budget is no refusal: the
/// redirect waits for room, the site never waits, no window holds more than the budget, and
/// the search reads its page once there is room for both of its requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_the_budget_has_no_room_for_waits_and_is_no_refusal() {
    let (url, log) = redirecting_site().await;
    let site = url.trim_start_matches("http://").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[watch]\ninterval = \"100ms\"\nspacing = \"50ms\"\nmax_interval = \"2s\"\nstate_dir = {:?}\n\
         dashboard = false\n\n[backoff]\nerror = [\"10s\"]\njitter = 0\n\n\
         [site.{site:?}]\nbudget = \"2/s\"\n\n\
         [[search]]\nname = \"redirects\"\nurl = \"{url}/search\"\n{LISTING}\n\n\
         [[search]]\nname = \"plain\"\nurl = \"{url}/plain\"\n{LISTING}\n\n",
        dir.path().join("state").display().to_string()
    );
    let cfg = crate::util::load_config(dir.path(), &text);
    let mut watcher = notifio::watch::Watcher::new(cfg, vec![], false).unwrap();
    let mut events = watcher.subscribe();
    let cancel = tokio_util::sync::CancellationToken::new();
    let stop = cancel.clone();
    let task = tokio::spawn(async move { watcher.run(stop).await });
    let mut reactions = Vec::new();
    let mut read_whole = 0;
    let until = tokio::time::Instant::now() + Duration::from_secs(4);
    while let Ok(Ok(ev)) = tokio::time::timeout_at(until, events.recv()).await {
        match ev {
            notifio::watch::WatchEvent::Reaction(r) => reactions.push(r),
            notifio::watch::WatchEvent::CheckDone {
                searches, listings, ..
            } if searches.iter().any(|s| s == "redirects") && listings == 1 => read_whole += 1,
            _ => {}
        }
    }
    cancel.cancel();
    task.await.unwrap().unwrap();
    let log = log.lock().unwrap().clone();
    let redirected = log.iter().filter(|(_, p)| p == "/search").count();
    println!(
        "{} requests, {redirected} to /search, {read_whole} whole reads",
        log.len()
    );
    assert!(
        reactions.is_empty(),
        "the site refused nothing: {reactions:?}"
    );
    assert!(read_whole >= 1, "the search read its page: {log:?}");
    // Never more than 2 requests in a second (less the lag between notifio starting a request
    // and its arrival on a loaded machine; notifio keeps a margin of a tenth of the unit).
    for (i, (at, _)) in log.iter().enumerate() {
        let in_window = log[i..]
            .iter()
            .take_while(|(t, _)| *t < at + 1000 - 150)
            .count();
        assert!(
            in_window <= 2,
            "{in_window} requests in the second from {at}: {log:?}"
        );
    }
}

/// `notifio check --json` with `config`: each search's answer.
fn check_json(config: &std::path::Path) -> Vec<Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(["check", "--json", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Issue 53, item 5: with `budget = "4/min"`, a `watch` sent 4 requests and a `check` beside
/// it 4 more in the same minute. The budget is the site's, whoever sends: a `check` beside a
/// `watch` that spent the window sends nothing and says when the budget has room, and a
/// `watch` started after a `check` spent it waits for room. The portal counts what arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_watch_spend_one_budget() {
    let portal = Portal::start(vec![SiteSpec {
        page_bytes: 20_000,
        ..SiteSpec::new("flats")
    }])
    .await
    .unwrap();
    let site = portal
        .base_url("flats")
        .trim_start_matches("http://")
        .to_owned();
    let config = |dir: &std::path::Path| {
        let mut t = format!(
            "[watch]\ninterval = \"100ms\"\nspacing = \"50ms\"\nstate_dir = {:?}\n\
             dashboard = false\n\n[site.{site:?}]\nbudget = \"4/min\"\n\n",
            dir.join("state").display().to_string()
        );
        for name in ["a", "b", "c", "d"] {
            t.push_str(&format!(
                "[[search]]\nname = {name:?}\nurl = {:?}\n{LISTING}\n\n",
                portal.search_url("flats", name)
            ));
        }
        write_config(dir, &t)
    };
    let arrived = || {
        portal
            .requests()
            .iter()
            .filter(|r| r.site == "flats")
            .count()
    };

    // A watch spends the window; a check beside it waits for the budget.
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    let watch = Notifio::start(dir.path(), &path, false, None);
    wait_for(
        Duration::from_secs(20),
        "the watcher's four requests",
        || (arrived() >= 4).then_some(()),
    )
    .await;
    let answers = check_json(&path);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(arrived(), 4, "the check sent nothing: {answers:#?}");
    assert_eq!(answers.len(), 4);
    let now = notifio::clock::now().as_millis();
    for a in &answers {
        assert_eq!(a["outcome"], "waiting", "{a:#}");
        let reason = a["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("request budget (4/min"), "{reason}");
        let room = a["next_retry_at"].as_u64().unwrap_or_default();
        assert!(
            room > now && room <= now + 61_000,
            "room within the minute: {room} vs {now}"
        );
    }
    assert_eq!(watch.terminate(), Some(0));

    // A check spends the window; a watch started after it waits for room.
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    let before = arrived();
    let answers = check_json(&path);
    assert!(answers.iter().all(|a| a["outcome"] == "ok"), "{answers:#?}");
    assert_eq!(arrived() - before, 4);
    let watch = Notifio::start(dir.path(), &path, false, None);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        arrived() - before,
        4,
        "the watcher waits for the window the check spent"
    );
    assert_eq!(watch.terminate(), Some(0));
}
