//! Issue 9's reliability suite: the real `notifio watch` binary against the fake portal (and a
//! few raw TCP servers for what hyper refuses to send) on 127.0.0.1, with time compressed by
//! short intervals and ladders. Crash safety under repeated SIGKILL, an SMTP outage, a matrix
//! of hostile servers, and (ignored by default) a soak run.
//!
//! Ignored variants: `cargo test -p notifio --test it -- --ignored reliability:: --nocapture`
//! (`NOTIFIO_SOAK_SECS` sets the soak's length, default 300).

use crate::util::{Notifio, RawServer, raw_response, wait_for};
use fake_portal::{Behaviour, ChallengeKind, Portal, SiteSpec};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn now_ms() -> u64 {
    notifio::clock::now().as_millis()
}

fn site(name: &str, page_bytes: usize) -> SiteSpec {
    SiteSpec {
        page_bytes,
        ..SiteSpec::new(name)
    }
}

/// `127.0.0.1:PORT` (a site key) → the portal's name for that site.
fn site_names(portal: &Portal) -> HashMap<String, String> {
    portal
        .sites()
        .into_iter()
        .map(|n| (portal.base_url(&n).replace("http://", ""), n))
        .collect()
}

/// The mbox split into messages.
fn mbox_messages(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split("\nFrom notifio@localhost ")
        .filter(|m| m.contains("Subject:"))
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------- (a) crash safety

/// SIGKILLs the watcher at `kills` seeded pseudo-random moments while listings appear about
/// every 600 ms, restarting it each time; one site refuses with 429 + Retry-After on and off.
/// Afterwards one clean run drains. Every listing must be in the mbox, duplicates ≤ kills, and
/// no request may reach the refusing site, after any restart, before the `next_retry_at` that
/// was on disk when the previous process died.
async fn crash_safety(kills: usize, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = Portal::start(vec![site("calm", 30_000), site("strict", 30_000)])
        .await
        .unwrap();
    let names = site_names(&portal);
    let searches = [
        ("calm", "c0"),
        ("calm", "c1"),
        ("calm", "c2"),
        ("strict", "s0"),
        ("strict", "s1"),
    ];
    let mbox = state.join("notifications.mbox");
    let mut text = crate::util::watch_toml(state, "300ms", "100ms");
    text.push_str(&format!(
        "[backoff]\nrate_limited = [\"1500ms\", \"3s\"]\nerror = [\"300ms\"]\n\n\
         [notify]\nmailbox = {:?}\n\n",
        mbox.display().to_string()
    ));
    for (s, slug) in searches {
        text.push_str(&crate::util::search_toml(
            &format!("{s} {slug}"),
            &portal.search_url(s, slug),
        ));
    }
    let cfg = crate::util::write_config(state, &text);

    let mut child = Notifio::start(state, &cfg, false, None);
    wait_for(Duration::from_secs(20), "the baselines", || {
        crate::util::all_baselined(state, searches.len()).then_some(())
    })
    .await;
    // The strict site refuses for 2.5 s every 5 s (Retry-After 2), from now on.
    let mut script = Vec::new();
    for k in 0..20u64 {
        script.push((
            Duration::from_millis(5000 * k + 2000),
            Behaviour::RateLimited {
                retry_after: Some("2".into()),
            },
        ));
        script.push((Duration::from_millis(5000 * k + 4500), Behaviour::Normal));
    }
    portal.set_behaviour("strict", Behaviour::Script(script));

    // Listings appear every ~600 ms, round robin over the searches.
    let stop = tokio_util::sync::CancellationToken::new();
    let adder = {
        let portal = portal.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut added = Vec::new();
            for i in 0.. {
                let (s, slug) = searches[i % searches.len()];
                added.push(portal.add_listing(s, Some(slug)).url);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(600)) => {}
                    () = stop.cancelled() => break,
                }
            }
            added
        })
    };

    let mut rng = SmallRng::seed_from_u64(seed);
    // (site name, next_retry_at on disk, when the process died)
    let mut waits: Vec<(String, u64, u64)> = Vec::new();
    for k in 0..kills {
        if k == 0 {
            // At least one kill lands while a site is waiting (the case that matters).
            wait_for(Duration::from_secs(15), "a waiting site", || {
                (!crate::util::backoff(state).is_empty()).then_some(())
            })
            .await;
        } else {
            let life = rng.random_range(300..1500);
            tokio::time::sleep(Duration::from_millis(life)).await;
        }
        child.kill();
        let died = now_ms();
        for (key, entry) in crate::util::backoff(state) {
            let at = entry["next_retry_at"].as_u64().unwrap();
            if at > died {
                waits.push((names[&key].clone(), at, died));
            }
        }
        child = Notifio::start(state, &cfg, false, None);
    }
    stop.cancel();
    let added = adder.await.unwrap();
    portal.set_behaviour("strict", Behaviour::Normal);

    // The final, clean run drains everything.
    let delivered = wait_for(Duration::from_secs(30), "every listing in the mbox", || {
        let msgs = mbox_messages(&mbox);
        added
            .iter()
            .all(|url| msgs.iter().any(|m| m.contains(url.as_str())))
            .then_some(msgs)
    })
    .await;
    assert!(child.alive(), "the watcher is still running");
    assert_eq!(child.terminate(), Some(0));

    let duplicates: usize = added
        .iter()
        .map(|url| {
            delivered
                .iter()
                .filter(|m| m.contains(url.as_str()))
                .count()
                - 1
        })
        .sum();
    let mut early = Vec::new();
    for (site, until, died) in &waits {
        for r in portal.requests() {
            if &r.site == site && r.at > *died && r.at < *until {
                early.push(format!(
                    "{} {} ms before {until} (process died at {died})",
                    r.path,
                    until - r.at
                ));
            }
        }
    }
    println!(
        "crash safety: {kills} kills, {} listings, {} messages, {duplicates} duplicates, {} kills during a wait",
        added.len(),
        delivered.len(),
        waits.len()
    );
    assert!(!waits.is_empty(), "no kill landed during a wait");
    assert!(
        early.is_empty(),
        "requests before next_retry_at: {early:#?}"
    );
    assert!(
        duplicates <= kills,
        "{duplicates} duplicates after {kills} kills"
    );
    portal.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_safety_five_sigkills() {
    crash_safety(5, 0x5eed).await;
}

/// The full version: `cargo test -p notifio --test it -- --ignored reliability::crash_safety_twenty`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "20 kills, ~30 s; run with --ignored"]
async fn crash_safety_twenty_sigkills() {
    crash_safety(20, 0x5eed_2020).await;
}

// ---------------------------------------------------------------- (b) SMTP outage

/// SMTP down for ~4 s (standing in for a minute, ladders compressed) while four listings
/// appear, each its own check and message; then up: all four arrive, in order, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_smtp_outage_loses_nothing_and_keeps_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = Portal::start(vec![site("flats", 30_000)]).await.unwrap();
    let port = crate::util::free_port();
    let mut text = crate::util::watch_toml(state, "300ms", "100ms");
    text.push_str(&format!(
        "[backoff]\nerror = [\"200ms\", \"500ms\", \"1s\"]\n\n\
         [retry.notify]\ninitial = \"50ms\"\ntimeout = \"2s\"\n\n\
         [notify]\nemail = {{ to = \"me@example.com\", smtp = \"smtp://127.0.0.1:{port}\" }}\n\n"
    ));
    text.push_str(&crate::util::search_toml(
        "Outage",
        &portal.search_url("flats", "o"),
    ));
    let cfg = crate::util::write_config(state, &text);
    let child = Notifio::start(state, &cfg, false, None);
    wait_for(Duration::from_secs(20), "the baseline", || {
        crate::util::all_baselined(state, 1).then_some(())
    })
    .await;
    let down_since = Instant::now();
    let mut flats = Vec::new();
    for i in 1..=4 {
        flats.push(portal.add_listing("flats", Some("o")));
        wait_for(Duration::from_secs(10), "the outbox row", || {
            (crate::util::outbox_rows(state, "email") >= i).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let attempts: i64 = crate::util::db(state)
        .unwrap()
        .query_row("SELECT MAX(attempts) FROM outbox", [], |r| r.get(0))
        .unwrap();
    assert!(attempts >= 4, "the head row kept being retried: {attempts}");
    assert_eq!(crate::util::pending(state, "email"), 4);
    let inbox = crate::util::start_smtp(port);
    let outage = down_since.elapsed();
    wait_for(Duration::from_secs(10), "four emails", || {
        (inbox.lock().unwrap().len() >= 4).then_some(())
    })
    .await;
    let recovered = down_since.elapsed() - outage;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mails = crate::util::mails(&inbox);
    assert_eq!(mails.len(), 4, "once each");
    for (m, flat) in mails.iter().zip(&flats) {
        assert!(m.text.contains(&flat.url), "in order: {}", m.text);
    }
    println!(
        "outage {:.1} s, {attempts} attempts on the head row, all delivered {:.2} s after SMTP came back",
        outage.as_secs_f64(),
        recovered.as_secs_f64()
    );
    assert!(
        recovered < Duration::from_secs(3),
        "recovery within one rung (1 s ±15%) plus a check: {recovered:?}"
    );
    child.kill();
    portal.shutdown().await;
}

// ---------------------------------------------------------------- (c) hostile servers

/// What a hostile case must be classified as.
struct Expect {
    outcome: &'static str,
    status: Option<u16>,
}

const fn expect(outcome: &'static str, status: Option<u16>) -> Expect {
    Expect { outcome, status }
}

/// Every hostile case at once, each on its own site, beside one well-behaved site, in one
/// watcher process: no panic, each case classified as expected, the Retry-After variants
/// neither shorten a wait nor stretch it past `max_wait`, the process's peak RSS stays under
/// 200 MB, and the good site's checks keep succeeding throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_servers_are_classified_bounded_and_do_not_stop_the_others() {
    const MIB: u64 = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let in_2999 = "Tue, 01 Jan 2999 00:00:00 GMT";
    let in_1990 = "Mon, 01 Jan 1990 00:00:00 GMT";
    let ra = |v: &str| Behaviour::RateLimited {
        retry_after: Some(v.to_owned()),
    };
    let cases: Vec<(&str, Behaviour, Expect)> = vec![
        ("ra-minus-one", ra("-1"), expect("rate_limited", Some(429))),
        ("ra-1e9", ra("1e9"), expect("rate_limited", Some(429))),
        ("ra-abc", ra("abc"), expect("rate_limited", Some(429))),
        ("ra-1990", ra(in_1990), expect("rate_limited", Some(429))),
        ("ra-2999", ra(in_2999), expect("rate_limited", Some(429))),
        (
            "huge-50mb",
            Behaviour::HugeBody(50 * MIB),
            expect("error", Some(200)),
        ),
        (
            "gzip-bomb-10gb",
            Behaviour::GzipBomb(10 * 1024 * MIB),
            expect("error", Some(200)),
        ),
        ("drip", Behaviour::DripBody, expect("error", None)),
        (
            "redirect-loop",
            Behaviour::RedirectLoop,
            expect("error", Some(302)),
        ),
        (
            "invalid-utf8",
            Behaviour::InvalidUtf8,
            expect("ok", Some(200)),
        ),
        (
            "empty",
            Behaviour::Empty,
            expect("layout_unknown", Some(200)),
        ),
        (
            "challenge-200",
            Behaviour::Challenge(ChallengeKind::Cloudflare, 200),
            expect("challenge", Some(200)),
        ),
    ];
    let mut specs = vec![site("good", 30_000)];
    specs.extend(cases.iter().map(|(n, _, _)| site(n, 30_000)));
    let portal = Portal::start(specs).await.unwrap();
    for (n, b, _) in &cases {
        portal.set_behaviour(n, b.clone());
    }
    // Raw servers for what hyper will not send, and a redirect to another host name.
    let two_ra = RawServer::start(raw_response(
        "429 Too Many Requests",
        &[b"Retry-After: 4", b"Retry-After: 1"],
        "slow down",
    ))
    .await
    .url;
    let ctl = RawServer::start(raw_response(
        "429 Too Many Requests",
        &[b"Retry-After: 3\x01\x07", b"X-Note: a\x00b\x1bc"],
        "slow down",
    ))
    .await
    .url;
    let good_port = portal
        .base_url("good")
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let cross = RawServer::start(raw_response(
        "302 Found",
        &[format!("Location: http://localhost:{good_port}/search/cross").as_bytes()],
        "",
    ))
    .await
    .url;
    let mut searches: Vec<(String, String, Option<Expect>)> =
        vec![("good".into(), portal.search_url("good", "g"), None)];
    for (n, _, e) in cases {
        searches.push((n.into(), portal.search_url(n, "x"), Some(e)));
    }
    searches.push((
        "two-retry-after".into(),
        format!("{two_ra}/search/x"),
        Some(expect("rate_limited", Some(429))),
    ));
    // httparse rejects control characters in a header value: the response never parses.
    searches.push((
        "control-chars".into(),
        format!("{ctl}/search/x"),
        Some(expect("error", None)),
    ));
    // Followed (at most 5 hops, cookies re-chosen per hop) and read like any page.
    searches.push((
        "cross-host".into(),
        format!("{cross}/search/x"),
        Some(expect("ok", Some(200))),
    ));

    let mut text = crate::util::watch_toml(state, "300ms", "50ms");
    text.push_str(
        "[backoff]\nrate_limited = [\"2s\"]\nerror = [\"1s\"]\nchallenge = [\"1s\"]\nmax_wait = \"6s\"\njitter = 0\n\n\
         [retry.search]\ntimeout = \"1500ms\"\ndeadline = \"3s\"\ninitial = \"50ms\"\n\n[notify]\nmailbox = \"n.mbox\"\n\n",
    );
    for (name, url, _) in &searches {
        text.push_str(&crate::util::search_toml(name, url));
    }
    let cfg = crate::util::write_config(state, &text);
    let mut child = Notifio::start(state, &cfg, false, None);
    let started = now_ms();

    // Every hostile case gets checked at least once (the drip takes up to its 3 s deadline).
    wait_for(
        Duration::from_secs(25),
        "a check of every hostile site",
        || {
            searches
                .iter()
                .all(|(n, _, _)| !crate::util::checks_of(state, n).is_empty())
                .then_some(())
        },
    )
    .await;
    let good_before = crate::util::checks_of(state, "good").len();
    // Keep it under fire a little longer: the ladders are 1-2 s, so most cases repeat.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let good = crate::util::checks_of(state, "good");
    let hwm_kb = child.proc_status("VmHWM").unwrap();
    let threads = child.proc_status("Threads").unwrap();
    assert!(child.alive(), "the watcher survived:\n{}", child.output());
    let mut report = Vec::new();
    for (name, _, want) in &searches {
        let checks = crate::util::checks_of(state, name);
        report.push(format!("{name}: {checks:?}"));
        if let Some(want) = want {
            let (outcome, status) = &checks[0];
            assert_eq!(
                (outcome.as_str(), *status),
                (want.outcome, want.status),
                "{name}: {checks:?}"
            );
        }
    }
    println!("{}", report.join("\n"));
    assert!(
        good.iter()
            .all(|(o, s)| o == "ok" && matches!(s, Some(200 | 304))),
        "the good site never failed: {good:?}"
    );
    assert!(
        good.len() >= good_before + 5,
        "the good site kept being checked ({good_before} → {})",
        good.len()
    );

    // Retry-After: garbage, negative or past → the ladder's 2 s; future → longer, capped at 6 s.
    let names = site_names(&portal);
    let entries: HashMap<String, serde_json::Value> = crate::util::backoff(state)
        .into_iter()
        .map(|(k, e)| (names.get(&k).cloned().unwrap_or(k), e))
        .collect();
    let wait_of = |site: &str| -> u64 {
        let e = entries
            .get(site)
            .unwrap_or_else(|| panic!("{site} has no backoff entry: {entries:?}"));
        e["next_retry_at"].as_u64().unwrap() - e["recorded_at"].as_u64().unwrap()
    };
    for site in ["ra-minus-one", "ra-1e9", "ra-abc", "ra-1990"] {
        assert_eq!(
            wait_of(site),
            2000,
            "{site}: the ladder's rung, neither shorter nor longer"
        );
    }
    assert_eq!(
        wait_of("ra-2999"),
        6000,
        "a date in 2999 is capped at max_wait"
    );
    let two = entries
        .iter()
        .find(|(k, _)| two_ra.contains(k.as_str()))
        .map(|(_, e)| e["next_retry_at"].as_u64().unwrap() - e["recorded_at"].as_u64().unwrap());
    assert_eq!(
        two,
        Some(4000),
        "two Retry-After headers: the first one counts"
    );

    let output = child.output();
    assert!(!output.contains("panicked"), "{output}");
    println!(
        "peak RSS {} MB, {threads} threads, {} ms under fire",
        hwm_kb / 1024,
        now_ms() - started
    );
    assert!(hwm_kb < 200 * 1024, "peak RSS {hwm_kb} kB");
    child.kill();
    portal.shutdown().await;
}

// ---------------------------------------------------------------- (c) a hostile page

/// Issue 53's first loose end: one site serves a 64 KB page of 6,000 nested `<div>`s, new on
/// every request, read with an ordinary `div div article`; before the reading was bounded it
/// stalled the whole watcher (17.7 s per check, the other site never checked again, `/healthz`
/// silent, SIGTERM ignored). Now that page is refused with a reason, and the other site's new
/// listing is announced, the dashboard answers, and SIGTERM ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_page_holds_up_no_other_site_nor_the_dashboard_nor_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = Portal::start(vec![site("calm", 30_000), site("deep", 30_000)])
        .await
        .unwrap();
    portal.set_behaviour("deep", Behaviour::Nested(6_000));
    let port = crate::util::free_port();
    let mut text = crate::util::watch_toml(state, "1s", "50ms").replace(
        "dashboard = false",
        &format!("dashboard = \"127.0.0.1:{port}\""),
    );
    text.push_str("[notify]\nmailbox = \"n.mbox\"\n\n");
    text.push_str(&crate::util::search_toml(
        "calm",
        &portal.search_url("calm", "c"),
    ));
    text.push_str(&format!(
        "[[search]]\nname = \"deep\"\nurl = {:?}\nlisting = {{ selector = \"div div article\", id_attr = \"data-id\" }}\n\n",
        portal.search_url("deep", "d")
    ));
    let cfg = crate::util::write_config(state, &text);
    let mut child = Notifio::start(state, &cfg, false, None);
    wait_for(Duration::from_secs(20), "calm's baseline", || {
        crate::util::all_baselined(state, 1).then_some(())
    })
    .await;
    wait_for(
        Duration::from_secs(20),
        "two checks of the deep page",
        || (crate::util::checks_of(state, "deep").len() >= 2).then_some(()),
    )
    .await;
    let added = portal.add_listing("calm", None);
    let client = crate::util::api_client();
    let health = format!("http://127.0.0.1:{port}/healthz");
    let announced = Instant::now();
    loop {
        let asked = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(2), client.get(&health).send())
            .await
            .expect("/healthz answers within 2 s")
            .unwrap();
        assert!(answer.status().is_success());
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "{:?}",
            asked.elapsed()
        );
        if mbox_messages(&state.join("n.mbox"))
            .iter()
            .any(|m| m.contains(&added.title))
        {
            break;
        }
        assert!(
            announced.elapsed() < Duration::from_secs(15),
            "calm's new listing was announced:\n{}",
            child.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The deep site keeps being checked on its interval, each check refused in bounded time.
    let deep = wait_for(
        Duration::from_secs(15),
        "a third check of the deep page",
        || {
            let deep = crate::util::checks_of(state, "deep");
            (deep.len() >= 3).then_some(deep)
        },
    )
    .await;
    assert!(
        deep.iter()
            .all(|(o, s)| o == "layout_unknown" && *s == Some(200)),
        "{deep:?}"
    );
    assert!(child.alive());
    let output = child.output();
    assert!(
        output.contains("nests elements more than 256 levels deep"),
        "the reason is told:\n{output}"
    );
    let asked = Instant::now();
    assert_eq!(child.terminate(), Some(0), "SIGTERM ends it cleanly");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    portal.shutdown().await;
}

// ---------------------------------------------------------------- (d) soak

/// 1,000 searches on 20 sites with random 5xx and scripted refusals, for `NOTIFIO_SOAK_SECS`
/// (default 300). RSS after the first third must not grow by more than 10 % (+4 MB slack), the
/// open fds and threads must stay flat, and checks in flight never exceed the concurrency plus
/// one slow check per site (a slow check gives its slot back but stays in flight).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: minutes; NOTIFIO_SOAK_SECS=300 cargo test -p notifio --test it -- --ignored reliability::soak --nocapture"]
async fn soak_a_thousand_searches_with_random_faults() {
    let secs: u64 = std::env::var("NOTIFIO_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let specs: Vec<SiteSpec> = (0..20)
        .map(|i| SiteSpec {
            fault_rate: 0.05,
            page_bytes: 20_000,
            ..SiteSpec::new(&format!("soak{i}"))
        })
        .collect();
    let portal = Portal::start(specs).await.unwrap();
    let mut text = crate::util::watch_toml(state, "30s", "50ms");
    text.push_str(
        "[backoff]\nrate_limited = [\"5s\", \"10s\"]\nerror = [\"2s\", \"5s\"]\nchallenge = [\"5s\"]\ndenied = [\"5s\"]\n\n\
         [notify]\nmailbox = \"n.mbox\"\n\n",
    );
    for i in 0..1000 {
        let site = format!("soak{}", i % 20);
        text.push_str(&crate::util::search_toml(
            &format!("search {i}"),
            &portal.search_url(&site, &format!("q{}", i / 20)),
        ));
    }
    text = text.replace("dashboard = false", "dashboard = \"127.0.0.1:0\"");
    let cfg = crate::util::write_config(state, &text);
    let mut child = Notifio::start(state, &cfg, false, None);
    let dashboard = wait_for(Duration::from_secs(20), "the dashboard address", || {
        let out = child.output();
        let line = out
            .lines()
            .find(|l| l.contains("dashboard: http://"))?
            .to_owned();
        Some(
            line.split("http://")
                .nth(1)?
                .trim_end_matches('/')
                .to_owned(),
        )
    })
    .await;
    let http = reqwest::Client::new();
    let mut rng = SmallRng::seed_from_u64(7);
    let start = Instant::now();
    let mut samples = Vec::new(); // (secs, rss kB, fds, threads, in flight)
    while start.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        // Random faults beyond the 5 % of 503s: a site refuses, hangs or resets for a while.
        let victim = format!("soak{}", rng.random_range(0..20));
        let b = match rng.random_range(0..4) {
            0 => Behaviour::RateLimited {
                retry_after: Some("7".into()),
            },
            1 => Behaviour::Challenge(ChallengeKind::Cloudflare, 403),
            2 => Behaviour::Hang,
            _ => Behaviour::Reset,
        };
        portal.set_behaviour(
            &victim,
            Behaviour::Script(vec![
                (Duration::ZERO, b),
                (Duration::from_secs(8), Behaviour::Normal),
            ]),
        );
        portal.add_listing(&victim, None);
        let metrics = http
            .get(format!("http://{dashboard}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let in_flight: u64 = metrics
            .lines()
            .find(|l| l.starts_with("notifio_checks_in_flight "))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0);
        let sample = (
            start.elapsed().as_secs(),
            child.proc_status("VmRSS").unwrap(),
            child.fd_count(),
            child.proc_status("Threads").unwrap(),
            in_flight,
        );
        println!(
            "soak t={}s rss={} kB fds={} threads={} in_flight={}",
            sample.0, sample.1, sample.2, sample.3, sample.4
        );
        samples.push(sample);
        assert!(child.alive(), "{}", child.output());
    }
    let hwm = child.proc_status("VmHWM").unwrap();
    let requests = portal.requests().len();
    assert!(!child.output().contains("panicked"));
    child.kill();
    let third = samples.len() / 3;
    let base = &samples[third];
    let last = samples.last().unwrap();
    let max_rss = samples[third..].iter().map(|s| s.1).max().unwrap();
    println!(
        "soak: {secs} s, {requests} requests; RSS {} → {} kB (max after first third {max_rss}, peak {hwm}); fds {} → {}; threads {} → {}",
        base.1, last.1, base.2, last.2, base.3, last.3
    );
    assert!(
        max_rss <= base.1 + base.1 / 10 + 4096,
        "RSS grew: {samples:?}"
    );
    assert!(last.2 <= base.2 + 8, "fd leak: {samples:?}");
    assert!(last.3 <= base.3 + 2, "thread leak: {samples:?}");
    assert!(
        samples.iter().all(|s| s.4 <= 4 + 20),
        "checks in flight above concurrency + one slow check per site: {samples:?}"
    );
    portal.shutdown().await;
}
