//! Journeys: the paths users take across commands and processes, with the real `notifio`
//! binary (the test build; CI runs them again with the packaged `dist` build, named by
//! `NOTIFIO_TEST_BIN`), the fake portal, fakes of the services' HTTP APIs and a silent SMTP
//! server, all on 127.0.0.1. Each journey is a seam where two features meet and a user once lost listings
//! (docs/reliability.md names the guarantee each one holds):
//!
//! - `init` → `check` → `watch` → `status`: the searches are checked again within their
//!   interval, not in ~50 days, and a `check` without `--notify` says what it recorded
//!   silently → `init_check_watch_status_checks_again_within_the_interval`
//! - `check --force` beside `watch`, then a restart: status says what the watcher does, and the
//!   restarted watcher keeps checking → `a_check_beside_watch_leaves_the_watchers_plan`
//! - two `check --notify` at once, alone and beside a running `watch`: every message once →
//!   `two_checks_at_once_send_each_message_once`
//! - one channel dead (a silent SMTP server, a service that never answers) while the others
//!   deliver on time → `a_dead_channel_costs_the_other_channels_nothing`
//! - dashboard add → first check → notification → restart → nothing twice →
//!   `a_search_added_from_the_dashboard_notifies_once_across_a_restart`
//! - a hand edit and a dashboard edit at once, and a slow writer → `hand_and_dashboard_edits_at_once_lose_nothing`
//! - a file written in chunks is applied once, complete → `a_file_written_in_chunks_is_applied_once_complete`;
//!   meanwhile the dashboard shows no search gone → `the_dashboard_lists_no_search_gone_while_the_file_is_being_written`
//! - the dashboard keeps `init`'s header and a search's own comments →
//!   `the_dashboard_keeps_inits_header_and_a_searchs_own_comments`, and leaves a read-only
//!   file alone → `a_read_only_config_is_left_alone`
//! - `status` before any run → `status_before_any_run_says_never_checked_and_no_watcher`, and
//!   while the config is invalid mid-run → `status_with_the_config_broken_mid_run_shows_the_watcher`
//! - `kill -9` of `check --notify` (one mid-delivery, others at random points), then of
//!   `watch` mid-delivery, then `watch` again: nothing lost →
//!   `sigkills_across_check_and_watch_lose_nothing` (and `reliability.rs` kills `watch` at
//!   random points while a site waits)

use crate::util::{Answer, Fake, Notifio, answer, wait_for};
use fake_portal::{Behaviour, Portal, SiteSpec};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const LISTING: &str = "listing = { selector = \"article.listing\", id_attr = \"data-id\" }";

fn notifio() -> Command {
    let mut cmd = Command::new(crate::util::binary());
    cmd.env_remove("RUST_LOG")
        .env_remove("NOTIFIO_CONFIG")
        .env_remove("NOTIFIO_DASHBOARD_TOKEN")
        .env_remove("NOTIFIO_SMTP_PASSWORD")
        .stdin(Stdio::null());
    cmd
}

/// `notifio ARGS --config CONFIG`, waited for (at most `limit`, then killed and failed).
async fn run_within(limit: Duration, args: &[&str], config: &Path) -> Output {
    let child = notifio()
        .args(args)
        .arg("--config")
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    match tokio::time::timeout(limit, waited).await {
        Ok(out) => out.unwrap().unwrap(),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("`notifio {args:?}` did not finish within {limit:?}");
        }
    }
}

async fn run(args: &[&str], config: &Path) -> Output {
    run_within(Duration::from_secs(30), args, config).await
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `notifio status --json`: its exit code and view.
async fn status(config: &Path) -> (Option<i32>, Value) {
    let out = run(&["status", "--json"], config).await;
    let view = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json: {e}\n{}", text(&out)));
    (out.status.code(), view)
}

fn now_ms() -> u64 {
    notifio::clock::now().as_millis()
}

fn search_of<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["searches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no search {name} in {view:#}"))
}

fn site_of<'a>(view: &'a Value, site: &str) -> &'a Value {
    view["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["site"] == site)
        .unwrap_or_else(|| panic!("no site {site} in {view:#}"))
}

fn search(name: &str, url: &str, extra: &str) -> String {
    format!("[[search]]\nname = {name:?}\nurl = {url:?}\n{LISTING}\n{extra}\n")
}

fn watch_section(state: &Path, interval: &str, dashboard: &str) -> String {
    format!(
        "[watch]\ninterval = {interval:?}\nspacing = \"50ms\"\nstate_dir = {:?}\ndashboard = {dashboard}\n\n",
        state.display().to_string()
    )
}

/// The site key the portal's site `name` has (`127.0.0.1:PORT`).
fn site_key(portal: &Portal, name: &str) -> String {
    portal
        .base_url(name)
        .trim_start_matches("http://")
        .to_owned()
}

/// The messages in an mbox file.
fn mbox(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split("\nFrom notifio@localhost ")
        .filter(|m| m.contains("Subject:"))
        .map(str::to_owned)
        .collect()
}

/// The dashboard's address, once the watcher printed it.
pub(crate) async fn dashboard_of(child: &Notifio) -> String {
    wait_for(Duration::from_secs(10), "the dashboard's address", || {
        let out = child.output();
        let at = out.find("dashboard: http://")?;
        let rest = &out[at + "dashboard: http://".len()..];
        Some(rest[..rest.find('/')?].to_owned())
    })
    .await
}

/// A JSON request to the dashboard's API as its page sends it.
async fn api(addr: &str, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .request(method, format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .header("origin", format!("http://{addr}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// `notifio init`'s file, made to watch `url` (the portal needs a card selector), with a short
/// interval, its state in `state` and the dashboard as given.
fn starter_for(url: &str, state: &Path, dashboard: &str) -> String {
    let starter = notifio::config::STARTER;
    let example = "name = \"Madrid under 1200\"\nurl = \"https://www.idealista.com/alquiler-viviendas/madrid-madrid/con-precio-hasta_1200/\"";
    assert!(starter.contains(example));
    starter
        .replace(
            example,
            &format!("name = \"Flats\"\nurl = {url:?}\n{LISTING}"),
        )
        .replacen("# interval = \"30s\"", "interval = \"1s\"", 1)
        .replacen("# spacing = \"2s\"", "spacing = \"50ms\"", 1)
        .replacen(
            "# state_dir = \"~/.local/share/notifio\"",
            &format!("state_dir = {:?}", state.display().to_string()),
            1,
        )
        .replacen(
            "# dashboard = \"127.0.0.1:7878\"",
            &format!("dashboard = {dashboard}"),
            1,
        )
}

/// The first check after `check` is the watcher's own, within the interval: a one-pass run
/// stores the next check a watcher would make, never a "not in this pass" time (issue 34.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_check_watch_status_checks_again_within_the_interval() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notifio.toml");
    let init = notifio().arg("init").arg(&path).output().unwrap();
    assert!(init.status.success(), "{}", text(&init));
    let state = dir.path().join("state");
    let mine = starter_for(&portal.search_url("flats", "s"), &state, "false");
    std::fs::write(&path, mine).unwrap();

    let out = run(&["check"], &path).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (code, view) = status(&path).await;
    assert_eq!(code, Some(0), "{view:#}");
    let next = search_of(&view, "Flats")["next_check_at"].as_u64().unwrap();
    let after_check = next.saturating_sub(now_ms());
    assert!(
        after_check <= 1_100 + 500,
        "check stored the next check {after_check} ms away (interval 1 s)"
    );
    assert_eq!(view["watcher"]["running"], false, "{view:#}");
    assert!(text(&out).contains("silent baseline"), "{}", text(&out));
    // A new listing found without --notify: recorded, and `check` says it will not be sent
    // (issue 40.8).
    portal.add_listing("flats", Some("s"));
    let out = run(&["check"], &path).await;
    assert!(
        text(&out).contains("1 new listing was recorded without a notification"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("--notify"), "{}", text(&out));

    let before = portal.request_count("flats");
    let mut watch = Notifio::start(dir.path(), &path, false, None);
    wait_for(Duration::from_secs(8), "watch to check again", || {
        (portal.request_count("flats") >= before + 2).then_some(())
    })
    .await;
    let (_, view) = status(&path).await;
    assert_eq!(view["watcher"]["running"], true, "{view:#}");
    assert!(watch.alive());
    assert_eq!(watch.terminate(), Some(0));
}

/// `check --force` beside a running watcher reads a waiting site, and `status` and the
/// dashboard still say what the watcher does: the site waits (issue 34.8). A restarted watcher keeps checking
/// (issue 34.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_beside_watch_leaves_the_watchers_plan() {
    let portal = Portal::start(vec![SiteSpec::new("a"), SiteSpec::new("b")])
        .await
        .unwrap();
    portal.set_behaviour("b", Behaviour::RateLimited { retry_after: None });
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut text_ = watch_section(&state, "500ms", "\"127.0.0.1:0\"");
    text_.push_str("[backoff]\nrate_limited = [\"1h\"]\njitter = 0\n\n");
    text_.push_str(&search("A", &portal.search_url("a", "s"), ""));
    text_.push_str(&search("B", &portal.search_url("b", "s"), ""));
    let path = crate::util::write_config(dir.path(), &text_);
    let b = site_key(&portal, "b");

    let watch = Notifio::start(dir.path(), &path, false, None);
    let dashboard = dashboard_of(&watch).await;
    wait_for(Duration::from_secs(10), "site b to wait", || {
        crate::util::backoff(&state)
            .iter()
            .any(|(site, _)| *site == b)
            .then_some(())
    })
    .await;
    portal.set_behaviour("b", Behaviour::Normal);
    let b_before = portal.request_count("b");

    let out = run(&["check", "--force", "--json"], &path).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let forced = lines.iter().find(|l| l["search"] == "B").unwrap();
    assert_eq!(forced["outcome"], "ok", "{forced}");
    let (_, view) = status(&path).await;
    assert_eq!(site_of(&view, &b)["state"], "waiting", "{view:#}");
    assert_eq!(search_of(&view, "B")["state"], "waiting", "{view:#}");
    // The dashboard says the same.
    let (code, shown) = api(&dashboard, reqwest::Method::GET, "/api/status", Value::Null).await;
    assert_eq!(code, 200, "{shown}");
    assert_eq!(site_of(&shown, &b)["state"], "waiting", "{shown:#}");
    assert_eq!(search_of(&shown, "B")["state"], "waiting", "{shown:#}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the watcher keeps its waits"),
        "{}",
        text(&out)
    );
    // And that is what the watcher does: nothing more to b than the forced check's request.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(portal.request_count("b"), b_before + 1);

    // A restart resumes the plan, which is seconds away, not days.
    assert_eq!(watch.terminate(), Some(0));
    let a_before = portal.request_count("a");
    let watch = Notifio::start(dir.path(), &path, false, None);
    wait_for(
        Duration::from_secs(8),
        "the restarted watch to check A",
        || (portal.request_count("a") >= a_before + 2).then_some(()),
    )
    .await;
    assert_eq!(watch.terminate(), Some(0));
}

/// Two `check --notify` at once, five rounds, then five more beside a running `watch`: each
/// new listing's message reaches the webhook once (issue 34.4). The webhook answers slowly,
/// which widens the window a second sender had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_checks_at_once_send_each_message_once() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let hook = Fake::start(Answer {
        delay: Duration::from_millis(300),
        ..answer(200, "{}")
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut t = watch_section(&state, "30s", "false");
    t.push_str(&format!(
        "[notify]\nwebhook = {{ url = \"{}/hook\" }}\n\n",
        hook.url
    ));
    t.push_str(&search("Flats", &portal.search_url("flats", "s"), ""));
    let path = crate::util::write_config(dir.path(), &t);
    let out = run(&["check"], &path).await;
    assert!(out.status.success(), "{}", text(&out));

    // Each round: a new listing, and two senders at once.
    let rounds = || {
        let (portal, path) = (portal.clone(), path.clone());
        async move {
            let mut mine = Vec::new();
            for _ in 0..5 {
                mine.push(portal.add_listing("flats", Some("s")).url);
                let (one, two) = tokio::join!(
                    run(&["check", "--notify"], &path),
                    run(&["check", "--notify"], &path)
                );
                assert!(one.status.success(), "{}", text(&one));
                assert!(two.status.success(), "{}", text(&two));
            }
            mine
        }
    };
    let mut added = rounds().await;
    // Then beside a running watcher, whose sender works the same outbox: two more senders a
    // round, five rounds.
    let watch = Notifio::start(dir.path(), &path, false, None);
    added.extend(rounds().await);
    wait_for(Duration::from_secs(10), "every listing sent", || {
        let hits = hook.hits();
        added
            .iter()
            .all(|u| hits.iter().any(|h| h.body.contains(u.as_str())))
            .then_some(())
    })
    .await;
    assert_eq!(watch.terminate(), Some(0));
    let hits = hook.hits();
    for url in &added {
        let n = hits
            .iter()
            .filter(|h| h.body.contains(url.as_str()))
            .count();
        assert_eq!(n, 1, "{url} was sent {n} times: {} requests", hits.len());
    }
    assert_eq!(hits.len(), added.len());
}

/// A Telegram API that takes every request and does not answer for two minutes.
async fn hanging_telegram() -> Fake {
    Fake::start(Answer {
        delay: Duration::from_secs(120),
        ..answer(200, "{\"ok\":true,\"result\":{}}")
    })
    .await
}

/// `watch` of the config at `path`, once its one search has its baseline.
async fn watch_past_baseline(dir: &Path, path: &Path, state: &Path) -> Notifio {
    let watch = Notifio::start(dir, path, false, None);
    wait_for(Duration::from_secs(10), "the baseline", || {
        crate::util::all_baselined(state, 1).then_some(())
    })
    .await;
    watch
}

/// A silent SMTP server (it accepts and never answers) and a Telegram API that never answers:
/// the webhook and the mailbox get every listing on time all the same, and `notify test`
/// answers within the delivery deadline (issue 34.2, 34.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_channel_costs_the_other_channels_nothing() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let smtp_port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming().flatten() {
            held.push(conn); // never a word
        }
    });
    let telegram = hanging_telegram().await;
    let hook = Fake::start(answer(200, "{}")).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut t = watch_section(&state, "300ms", "false");
    t.push_str(&format!(
        "[retry.notify]\ntimeout = \"1s\"\ndeadline = \"2s\"\n\n[notify]\nmailbox = \"out.mbox\"\n\
         email = {{ to = \"me@example.com\", from = \"notifio@localhost\", smtp = \"smtp://127.0.0.1:{smtp_port}\" }}\n\
         webhook = {{ url = \"{}/hook\" }}\n\
         telegram = {{ token = \"1:x\", chat_id = \"1\", api = \"{}\" }}\n\n",
        hook.url, telegram.url
    ));
    t.push_str(&search("Flats", &portal.search_url("flats", "s"), ""));
    let path = crate::util::write_config(dir.path(), &t);
    let mailbox = dir.path().join("out.mbox");

    let mut watch = watch_past_baseline(dir.path(), &path, &state).await;
    for round in 0..3 {
        let l = portal.add_listing("flats", Some("s"));
        let start = Instant::now();
        wait_for(
            Duration::from_secs(4),
            &format!("listing {round} on the webhook and in the mailbox"),
            || {
                let hooked = hook.hits().iter().any(|h| h.body.contains(&l.url));
                let boxed = mbox(&mailbox).iter().any(|m| m.contains(&l.url));
                (hooked && boxed).then_some(())
            },
        )
        .await;
        println!(
            "listing {round}: webhook and mailbox after {:?}",
            start.elapsed()
        );
    }
    assert!(watch.alive(), "{}", watch.output());
    assert_eq!(watch.terminate(), Some(0));

    let start = Instant::now();
    let out = run_within(Duration::from_secs(10), &["notify", "test"], &path).await;
    let said = text(&out);
    println!("notify test took {:?}:\n{said}", start.elapsed());
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(start.elapsed() < Duration::from_secs(6), "{said}");
    for (channel, verdict) in [
        ("webhook", "delivered"),
        ("mailbox", "delivered"),
        ("email", "failed"),
        ("telegram", "failed"),
    ] {
        assert!(
            said.lines()
                .any(|l| l.starts_with(channel) && l.contains(verdict)),
            "{channel}: {said}"
        );
    }
}

/// One HTTP service that never answers (its deadline 6 s) beside a webhook: each listing
/// reaches the webhook well within that deadline, so the hanging service costs it nothing.
/// A sender that waited for every channel in one pass would take about 6 s per listing here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_http_channel_costs_the_webhook_nothing() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let telegram = hanging_telegram().await;
    let hook = Fake::start(answer(200, "{}")).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut t = watch_section(&state, "300ms", "false");
    t.push_str(&format!(
        "[retry.notify]\ntimeout = \"3s\"\ndeadline = \"6s\"\n\n[notify]\n\
         webhook = {{ url = \"{}/hook\" }}\n\
         telegram = {{ token = \"1:x\", chat_id = \"1\", api = \"{}\" }}\n\n",
        hook.url, telegram.url
    ));
    t.push_str(&search("Flats", &portal.search_url("flats", "s"), ""));
    let path = crate::util::write_config(dir.path(), &t);
    let mut watch = watch_past_baseline(dir.path(), &path, &state).await;
    for round in 0..3 {
        let l = portal.add_listing("flats", Some("s"));
        let start = Instant::now();
        wait_for(
            Duration::from_secs(2),
            &format!("listing {round} on the webhook while telegram hangs"),
            || {
                hook.hits()
                    .iter()
                    .any(|h| h.body.contains(&l.url))
                    .then_some(())
            },
        )
        .await;
        println!(
            "listing {round}: on the webhook after {:?}",
            start.elapsed()
        );
    }
    assert!(
        !telegram.hits().is_empty(),
        "telegram was asked (and hangs)"
    );
    assert!(watch.alive(), "{}", watch.output());
    assert_eq!(watch.terminate(), Some(0));
}

/// Add a search from the dashboard; its first check is a silent baseline; a new listing is
/// announced once; after a restart nothing is announced twice and the next one is announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_added_from_the_dashboard_notifies_once_across_a_restart() {
    let portal = Portal::start(vec![SiteSpec::new("a"), SiteSpec::new("b")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut t = watch_section(&state, "300ms", "\"127.0.0.1:0\"");
    t.push_str("[notify]\nmailbox = \"out.mbox\"\n\n");
    t.push_str(&search("A", &portal.search_url("a", "s"), ""));
    let path = crate::util::write_config(dir.path(), &t);
    let mailbox = dir.path().join("out.mbox");

    let watch = Notifio::start(dir.path(), &path, false, None);
    let addr = dashboard_of(&watch).await;
    let (code, body) = api(
        &addr,
        reqwest::Method::POST,
        "/api/searches",
        serde_json::json!({
            "name": "Added",
            "url": portal.search_url("b", "s"),
            "listing": {"selector": "article.listing", "id_attr": "data-id"},
        }),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    wait_for(Duration::from_secs(10), "both baselines", || {
        crate::util::all_baselined(&state, 2).then_some(())
    })
    .await;
    assert!(mbox(&mailbox).is_empty(), "a baseline is silent");
    let first = portal.add_listing("b", Some("s"));
    wait_for(
        Duration::from_secs(6),
        "the first listing's message",
        || {
            mbox(&mailbox)
                .iter()
                .any(|m| m.contains(&first.url))
                .then_some(())
        },
    )
    .await;
    assert_eq!(watch.terminate(), Some(0));

    let watch = Notifio::start(dir.path(), &path, false, None);
    let b_before = portal.request_count("b");
    wait_for(Duration::from_secs(8), "checks after the restart", || {
        (portal.request_count("b") >= b_before + 3).then_some(())
    })
    .await;
    let second = portal.add_listing("b", Some("s"));
    wait_for(
        Duration::from_secs(6),
        "the second listing's message",
        || {
            mbox(&mailbox)
                .iter()
                .any(|m| m.contains(&second.url))
                .then_some(())
        },
    )
    .await;
    assert_eq!(watch.terminate(), Some(0));
    let messages = mbox(&mailbox);
    for l in [&first, &second] {
        let n = messages.iter().filter(|m| m.contains(&l.url)).count();
        assert_eq!(n, 1, "{} announced {n} times", l.url);
    }
    assert_eq!(messages.len(), 2, "{messages:#?}");
}

/// A small deterministic sequence for the offsets between the edits (no OS randomness in a
/// test that must be repeatable).
fn offsets(n: usize) -> Vec<u64> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 13
        })
        .collect()
}

/// A hand edit (an editor's save: a new file renamed over the old) and a dashboard edit at the
/// same moment, round after round, then a slow writer rewriting the file in place in three
/// chunks with a dashboard edit between them: every search written by either survives
/// (issue 34.5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_and_dashboard_edits_at_once_lose_nothing() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let url = portal.search_url("flats", "s");
    let mut t = watch_section(&state, "30s", "\"127.0.0.1:0\"");
    t.push_str(&search("First", &url, ""));
    let path = crate::util::write_config(dir.path(), &t);
    let watch = Notifio::start(dir.path(), &path, false, None);
    let addr = dashboard_of(&watch).await;

    for (i, ms) in offsets(6).into_iter().enumerate() {
        let hand = {
            let path = path.clone();
            let entry = search(&format!("hand-{i}"), &format!("{url}?h={i}"), "");
            tokio::task::spawn_blocking(move || {
                std::thread::sleep(Duration::from_millis(ms));
                let now = std::fs::read_to_string(&path).unwrap();
                let tmp = path.with_extension("toml.swp");
                std::fs::write(&tmp, format!("{now}\n{entry}")).unwrap();
                std::fs::rename(&tmp, &path).unwrap();
            })
        };
        let body = serde_json::json!({
            "name": format!("dash-{i}"),
            "url": format!("{url}?d={i}"),
            "listing": {"selector": "article.listing", "id_attr": "data-id"},
        });
        let (code, answer) = api(&addr, reqwest::Method::POST, "/api/searches", body).await;
        hand.await.unwrap();
        assert_eq!(code, 201, "round {i}: {answer}");
    }
    let file = std::fs::read_to_string(&path).unwrap();
    for i in 0..6 {
        for who in ["hand", "dash"] {
            assert!(
                file.contains(&format!("name = \"{who}-{i}\"")),
                "{who}-{i} was lost:\n{file}"
            );
        }
    }

    // A slow writer: truncate, then three chunks 400 ms apart; the dashboard asks in between.
    let whole = format!("{file}\n{}", search("slow", &format!("{url}?slow"), ""));
    let third = whole.len() / 3;
    let cut = |at: usize| whole[..at].rfind('\n').map_or(at, |i| i + 1);
    let (one, two) = (cut(third), cut(2 * third));
    let chunks = vec![
        whole[..one].to_owned(),
        whole[one..two].to_owned(),
        whole[two..].to_owned(),
    ];
    let writer = write_in_chunks(&path, chunks);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let body = serde_json::json!({
        "name": "dash-between",
        "url": format!("{url}?between"),
        "listing": {"selector": "article.listing", "id_attr": "data-id"},
    });
    let (code, answer) = api(&addr, reqwest::Method::POST, "/api/searches", body).await;
    writer.await.unwrap();
    assert_eq!(code, 201, "{answer}");
    let file = std::fs::read_to_string(&path).unwrap();
    for name in [
        "First",
        "hand-0",
        "hand-5",
        "dash-5",
        "slow",
        "dash-between",
    ] {
        assert!(
            file.contains(&format!("name = \"{name}\"")),
            "{name} was lost:\n{file}"
        );
    }
    notifio::config::parse(&file, &path).unwrap();
    // And the watcher watches what was written by hand, as what the dashboard added: each
    // search's page is asked for.
    wait_for(Duration::from_secs(20), "every search checked", || {
        let asked: Vec<String> = portal.requests().into_iter().map(|r| r.path).collect();
        let missing: Vec<String> = (0..6)
            .flat_map(|i| [format!("h={i}"), format!("d={i}")])
            .chain(["slow".to_owned(), "between".to_owned()])
            .filter(|q| !asked.iter().any(|p| p.ends_with(&format!("?{q}"))))
            .collect();
        missing.is_empty().then_some(())
    })
    .await;
    assert_eq!(watch.terminate(), Some(0));
}

/// Writes `chunks` into the file at `path` by hand, as a slow script does: truncated, then
/// one chunk every 400 ms into the same open file (the same inode), on the blocking pool.
fn write_in_chunks(path: &Path, chunks: Vec<String>) -> tokio::task::JoinHandle<()> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&path).unwrap();
        for (k, chunk) in chunks.iter().enumerate() {
            if k > 0 {
                std::thread::sleep(Duration::from_millis(400));
            }
            f.write_all(chunk.as_bytes()).unwrap();
            f.flush().unwrap();
        }
    })
}

/// A file rewritten in place in three chunks 400 ms apart (the first chunk alone parses, with
/// one search of three) is applied once, complete: no search is dropped meanwhile
/// (issue 34.6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_in_chunks_is_applied_once_complete() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let url = portal.search_url("flats", "s");
    let head = watch_section(&state, "1s", "false");
    let [s1, s2, s3] = ["S1", "S2", "S3"].map(|n| search(n, &format!("{url}?{n}"), ""));
    let path = crate::util::write_config(dir.path(), &format!("{head}{s1}{s2}{s3}"));
    let mut watch = Notifio::start(dir.path(), &path, true, None);
    wait_for(Duration::from_secs(10), "the baselines", || {
        crate::util::all_baselined(&state, 3).then_some(())
    })
    .await;
    let s3_slower = s3.replace(LISTING, &format!("{LISTING}\ninterval = \"2s\""));
    write_in_chunks(&path, vec![format!("{head}{s1}"), s2, s3_slower])
        .await
        .unwrap();
    wait_for(Duration::from_secs(6), "the reload", || {
        watch.output().contains("config reloaded").then_some(())
    })
    .await;
    let log = watch.output();
    let reloads: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("config reloaded"))
        .collect();
    assert!(
        !log.contains("removed"),
        "a half-written file was applied:\n{log}"
    );
    assert_eq!(reloads.len(), 1, "{reloads:#?}");
    assert!(
        reloads[0].contains("1 search changed (`S3`)"),
        "{reloads:#?}"
    );
    assert!(watch.alive());
    assert_eq!(watch.terminate(), Some(0));
}

/// The dashboard's list of searches while a file is written by hand in three chunks 400 ms
/// apart (same inode): a search still being written is never shown gone; an addition or a
/// change shows at once, a removal once the file has settled (docs/config.md#live-reload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_lists_no_search_gone_while_the_file_is_being_written() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let url = portal.search_url("flats", "s");
    let head = watch_section(&state, "1s", "\"127.0.0.1:0\"");
    let [s1, s2, s3] = ["S1", "S2", "S3"].map(|n| search(n, &format!("{url}?{n}"), ""));
    let path = crate::util::write_config(dir.path(), &format!("{head}{s1}{s2}{s3}"));
    let watch = Notifio::start(dir.path(), &path, false, None);
    let addr = dashboard_of(&watch).await;
    let listed = |addr: String| async move {
        let (code, v) = api(&addr, reqwest::Method::GET, "/api/searches", Value::Null).await;
        assert_eq!(code, 200, "{v}");
        v["searches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_owned(),
                    s["interval"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let names = |l: &[(String, Value)]| l.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&listed(addr.clone()).await), ["S1", "S2", "S3"]);
    // S4 is new, S3 changes: each shows as soon as it is written.
    let s3_slower = s3.replace(LISTING, &format!("{LISTING}\ninterval = \"2s\""));
    let s4 = search("S4", &format!("{url}?S4"), "");
    let writing = write_in_chunks(
        &path,
        vec![format!("{head}{s1}{s4}"), s2.clone(), s3_slower],
    );
    let mut seen = Vec::new();
    while !writing.is_finished() {
        seen.push(names(&listed(addr.clone()).await));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    writing.await.unwrap();
    println!("{seen:?}");
    assert!(seen.len() > 10, "{seen:?}");
    for names in &seen {
        for n in ["S1", "S2", "S3"] {
            assert!(names.contains(&n.to_owned()), "{n} shown gone: {seen:?}");
        }
    }
    assert!(
        seen.iter().any(|n| n.contains(&"S4".to_owned())),
        "an addition shows at once: {seen:?}"
    );
    let now = listed(addr.clone()).await;
    assert_eq!(
        now.iter().find(|(n, _)| n == "S3").map(|(_, i)| i.clone()),
        Some(Value::from("2s")),
        "{now:?}"
    );
    // A real removal: S2 goes, once the file has been left alone.
    std::fs::write(&path, format!("{head}{s1}{s4}{s3}")).unwrap();
    let started = Instant::now();
    loop {
        let names = names(&listed(addr.clone()).await);
        if !names.contains(&"S2".to_owned()) {
            assert_eq!(names, ["S1", "S4", "S3"]);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "S2 never went: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(watch);
}

/// `notifio init`'s file with the dashboard on, for the dashboard's edits: its path, the
/// portal's search URL, and the watcher with its dashboard's address.
async fn init_with_dashboard(
    dir: &Path,
    portal: &Portal,
) -> (std::path::PathBuf, String, Notifio, String) {
    let path = dir.join("notifio.toml");
    let init = notifio().arg("init").arg(&path).output().unwrap();
    assert!(init.status.success(), "{}", text(&init));
    let url = portal.search_url("flats", "s");
    std::fs::write(
        &path,
        starter_for(&url, &dir.join("state"), "\"127.0.0.1:0\""),
    )
    .unwrap();
    let watch = Notifio::start(dir, &path, false, None);
    let addr = dashboard_of(&watch).await;
    (path, url, watch, addr)
}

fn new_search(name: &str, url: &str) -> Value {
    serde_json::json!({
        "name": name,
        "url": url,
        "listing": {"selector": "article.listing", "id_attr": "data-id"},
    })
}

/// `notifio init`'s file edited from the dashboard: a new search goes after the first one's
/// commented-out options, and deleting the first keeps the file's header byte for byte
/// (issue 34.7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_keeps_inits_header_and_a_searchs_own_comments() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, url, watch, addr) = init_with_dashboard(dir.path(), &portal).await;
    let starter = notifio::config::STARTER;
    let header = &starter[..starter.find("\n\n").unwrap() + 2];
    assert_eq!(
        header.lines().count(),
        7 + 1,
        "the header as init writes it"
    );

    let body = new_search("Second", &format!("{url}?2"));
    let (code, body) = api(&addr, reqwest::Method::POST, "/api/searches", body).await;
    assert_eq!(code, 201, "{body}");
    let file = std::fs::read_to_string(&path).unwrap();
    let second = file.find("name = \"Second\"").unwrap();
    assert!(second > file.find("# pages = 1").unwrap(), "{file}");
    assert!(second < file.find("# ImmobilienScout24").unwrap(), "{file}");

    let (code, body) = api(
        &addr,
        reqwest::Method::DELETE,
        "/api/searches/Flats",
        Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let file = std::fs::read_to_string(&path).unwrap();
    assert!(file.starts_with(header), "the header went:\n{file}");
    assert!(!file.contains("name = \"Flats\""), "{file}");
    assert_eq!(watch.terminate(), Some(0));
}

/// A config file the user made read-only is answered 409 and left as it is (issue 34.10).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_config_is_left_alone() {
    use std::os::unix::fs::PermissionsExt as _;
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, url, watch, addr) = init_with_dashboard(dir.path(), &portal).await;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let file = std::fs::read_to_string(&path).unwrap();
    let body = new_search("Third", &format!("{url}?3"));
    let (code, body) = api(&addr, reqwest::Method::POST, "/api/searches", body).await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("read-only"),
        "{body}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        file,
        "left as it was"
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o444);
    assert_eq!(watch.terminate(), Some(0));
}

/// `status` before any run says "never checked" and "no watcher running", and creates
/// nothing (issue 40.13).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_before_any_run_says_never_checked_and_no_watcher() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut t = watch_section(&state, "500ms", "false");
    t.push_str(&search("Flats", &portal.search_url("flats", "s"), ""));
    let path = crate::util::write_config(dir.path(), &t);
    let out = run(&["status"], &path).await;
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(table.contains("no watcher running"), "{table}");
    assert!(table.contains("never checked"), "{table}");
    assert!(
        !state.join("notifio.db").exists(),
        "status created the database"
    );
    let (_, view) = status(&path).await;
    assert_eq!(view["watcher"]["running"], false, "{view:#}");
    assert_eq!(search_of(&view, "Flats")["state"], "ok", "{view:#}");
}

/// With the config broken while `watch` runs, `status` still shows the watcher's searches and
/// countdowns and names the mistake (exit 2), and the watcher goes on (issue 34.9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_with_the_config_broken_mid_run_shows_the_watcher() {
    let portal = Portal::start(vec![SiteSpec::new("flats")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut t = watch_section(&state, "500ms", "false");
    t.push_str(&search("Flats", &portal.search_url("flats", "s"), ""));
    let path = crate::util::write_config(dir.path(), &t);
    let watch = Notifio::start(dir.path(), &path, false, None);
    wait_for(Duration::from_secs(10), "the baseline", || {
        crate::util::all_baselined(&state, 1).then_some(())
    })
    .await;
    // A bad value, then a TOML syntax error: each named at its line and column.
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let line_of = |needle: &str| t.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let broken = [
        (
            "a bad value",
            "interval = \"500ms\"",
            "interval = \"soon\"",
            "`watch.interval`",
        ),
        (
            "a syntax error",
            "name = \"Flats\"",
            "name = \"Flats",
            "invalid TOML",
        ),
    ];
    for (what, good, bad, says) in broken {
        std::fs::write(&path, t.replace(good, bad)).unwrap();
        let view = wait_for(Duration::from_secs(8), what, || {
            let out = Command::new(crate::util::binary())
                .args(["status", "--json", "--config"])
                .arg(&path)
                .output()
                .ok()?;
            let view: Value = serde_json::from_slice(&out.stdout).ok()?;
            (out.status.code() == Some(2) && !view["config"]["error"].is_null()).then_some(view)
        })
        .await;
        let flats = search_of(&view, "Flats");
        assert!(
            flats["next_check_at"].as_u64().is_some(),
            "{what}: {view:#}"
        );
        let error = view["config"]["error"].as_str().unwrap();
        let at = format!("{name}:{}:", line_of(good));
        assert!(
            error.contains(&at) && error.contains(says),
            "{what} at {at}: {error}"
        );
        assert_eq!(view["watcher"]["running"], true, "{what}: {view:#}");
        let out = run(&["status"], &path).await;
        let table = String::from_utf8_lossy(&out.stdout).into_owned();
        println!("{what}:\n{table}{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            table.contains("Flats") && table.contains("config error"),
            "{what}: {table}"
        );
        assert!(!table.contains("no watcher running"), "{what}: {table}");
    }
    // And the watcher goes on with the config it runs.
    let before = portal.request_count("flats");
    wait_for(
        Duration::from_secs(5),
        "checks with the running config",
        || (portal.request_count("flats") >= before + 2).then_some(()),
    )
    .await;
    assert_eq!(watch.terminate(), Some(0));
}

/// Waits until the webhook has taken more than `seen` requests: the message it holds is
/// mid-exchange for its 250 ms answer delay, so a kill now lands during a delivery.
async fn until_a_delivery_is_in_flight(hook: &Fake, seen: usize) {
    wait_for(Duration::from_secs(10), "a delivery in flight", || {
        (hook.hits().len() > seen).then_some(())
    })
    .await;
}

/// `kill -9` across a journey: `check --notify` SIGKILLed three times while it delivers to a
/// slow webhook (the first kill while a message is mid-exchange, the others at random points,
/// each on a live process), then `watch`, SIGKILLed mid-delivery of new listings, then `watch`
/// again: every listing's message arrives, with at most one duplicate per kill, and a claim
/// left by a killed sender does not hold the channel (its process is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_across_check_and_watch_lose_nothing() {
    // Four sites: four first looks that announce what they find, four messages.
    let names: Vec<String> = (0..4).map(|i| format!("S{i}")).collect();
    let portal = Portal::start(names.iter().map(|n| SiteSpec::new(n)).collect())
        .await
        .unwrap();
    let hook = Fake::start(Answer {
        delay: Duration::from_millis(250),
        ..answer(200, "{}")
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut t = watch_section(&state, "500ms", "false");
    t.push_str(&format!(
        "[retry.notify]\ntimeout = \"1s\"\ndeadline = \"2s\"\n\n[notify]\nwebhook = {{ url = \"{}/hook\" }}\n\n",
        hook.url
    ));
    for n in &names {
        let url = portal.search_url(n, "s");
        t.push_str(&search(n, &url, "notify_existing = true"));
    }
    let path = crate::util::write_config(dir.path(), &t);
    let check_kills = 3;
    for (k, ms) in offsets(check_kills).into_iter().enumerate() {
        let mut child = notifio()
            .args(["check", "--notify", "--config"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if k == 0 {
            until_a_delivery_is_in_flight(&hook, 0).await;
        } else {
            tokio::time::sleep(Duration::from_millis(150 + ms * 60)).await;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "kill {k} would land on a process that had already ended"
        );
        let _ = child.kill();
        let _ = child.wait();
        println!(
            "kill {k} of check --notify after {} hook hits",
            hook.hits().len()
        );
    }
    let start = Instant::now();
    let watch = Notifio::start(dir.path(), &path, false, None);
    let pending = || {
        let db = crate::util::db(&state)?;
        let pending: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL",
                [],
                |r| r.get(0),
            )
            .ok()?;
        let rows: i64 = db
            .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
            .ok()?;
        Some((rows, pending))
    };
    wait_for(Duration::from_secs(10), "every message delivered", || {
        let (rows, pending) = pending()?;
        (rows >= names.len() as i64 && pending == 0).then_some(())
    })
    .await;
    println!("delivered {:?} after the watch started", start.elapsed());
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "a dead sender's claim held the channel for its whole lease"
    );

    // New flats while `watch` runs; it is SIGKILLed while it delivers one of them.
    let seen = hook.hits().len();
    let new: Vec<String> = names
        .iter()
        .map(|n| portal.add_listing(n, Some("s")).url)
        .collect();
    until_a_delivery_is_in_flight(&hook, seen).await;
    let mut watch = watch;
    assert!(watch.alive(), "the watcher was running when it was killed");
    watch.kill();
    let (rows, left) = pending().expect("the state database");
    println!("watch killed mid-delivery: {left} of {rows} outbox rows pending");
    assert!(left > 0, "the kill landed before every message was sent");
    let watch = Notifio::start(dir.path(), &path, false, None);
    wait_for(Duration::from_secs(15), "the new flats delivered", || {
        let hits = hook.hits();
        new.iter()
            .all(|u| hits.iter().any(|h| h.body.contains(u.as_str())))
            .then_some(())
    })
    .await;
    wait_for(Duration::from_secs(10), "nothing pending", || {
        (pending()?.1 == 0).then_some(())
    })
    .await;
    assert_eq!(watch.terminate(), Some(0));

    let kills = check_kills + 1;
    let hits = hook.hits();
    for n in &names {
        let got = hits
            .iter()
            .filter(|h| {
                h.json()["searches"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|x| x == n.as_str()))
            })
            .count();
        // Its first look, and its new flat (together, or apart).
        assert!((1..=2 + kills).contains(&got), "{n}: {got} messages");
    }
    for u in &new {
        let got = hits.iter().filter(|h| h.body.contains(u.as_str())).count();
        assert!(
            (1..=2).contains(&got),
            "{u}: {got} messages after one kill of watch"
        );
    }
    assert!(
        hits.len() <= 2 * names.len() + kills,
        "{} messages after {kills} kills",
        hits.len()
    );
}
