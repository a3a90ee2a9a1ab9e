//! The CLI as a user runs it: the real binary, its stdout/stderr and exit codes.

use std::process::Command;
use std::time::Duration;

fn notifio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_notifio"))
}

#[test]
fn ladders_print_the_seed_ladders_in_the_shortest_unit() {
    let out = notifio().arg("ladders").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}");
    for line in [
        "challenge     1m → 3m → 8m → 15m → 30m",
        "rate_limited  2m → 5m → 15m → 30m",
        "denied        5m → 15m → 30m → 1h",
        "error         30s → 2m → 5m",
        "100ms → 300ms",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
    assert!(text.contains("probe   1 attempt, no retry"), "{text}");
}

#[test]
fn ladders_json_is_the_design_schema_with_the_seed_numbers() {
    let out = notifio().args(["ladders", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = serde_json::json!({
        "ladders": {
            "challenge": [60000, 180000, 480000, 900000, 1800000],
            "rate_limited": [120000, 300000, 900000, 1800000],
            "denied": [300000, 900000, 1800000, 3600000],
            "error": [30000, 120000, 300000]
        },
        "jitter": 0.15,
        "max_wait_ms": 3600000,
        "retry": {
            "search": {"attempts": 3, "initial_ms": 100, "multiplier": 3.0, "jitter": 0.25, "delays_ms": [100, 300]},
            "probe": {"attempts": 1, "initial_ms": 100, "multiplier": 3.0, "jitter": 0.25, "delays_ms": []},
            "detail": {"attempts": 3, "initial_ms": 100, "multiplier": 3.0, "jitter": 0.25, "delays_ms": [100, 300]},
            "notify": {"attempts": 3, "initial_ms": 100, "multiplier": 3.0, "jitter": 0.25, "delays_ms": [100, 300]}
        }
    });
    assert_eq!(v, expected);
}

#[test]
fn a_bad_config_exits_2_and_names_file_line_col_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[watch]\ninterval = \"30 seconds\"\n\n[[search]]\nname = \"x\"\nurl = \"https://www.idealista.com/a/\"\n").unwrap();
    let out = notifio()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.toml:2:12"), "{err}");
    assert!(err.contains("interval"), "{err}");
    assert!(
        err.contains("expected a duration like 30s, 2m, 1h"),
        "{err}"
    );
}

#[test]
fn an_unknown_key_exits_2_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.toml");
    std::fs::write(&path, "[watch]\nintervall = \"30s\"\n\n[[search]]\nname = \"x\"\nurl = \"https://www.idealista.com/a/\"\n").unwrap();
    let out = notifio()
        .args(["status", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("typo.toml:2:1"), "{err}");
    assert!(err.contains("interval"), "did-you-mean missing: {err}");
}

#[test]
fn a_missing_config_exits_2_and_suggests_init() {
    let out = notifio()
        .args(["check", "--config", "/nonexistent/notifio.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("notifio init"));
}

#[test]
fn usage_errors_exit_2() {
    let out = notifio().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn init_writes_a_starter_that_parses_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notifio.toml");
    let out = notifio().arg("init").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    notifio::config::load(&path).unwrap();
    let again = notifio().arg("init").arg(&path).output().unwrap();
    assert_ne!(
        again.status.code(),
        Some(0),
        "must not overwrite an existing config"
    );
}

/// A fake portal with one site, `p` (served by the returned runtime), and a config in a temp
/// dir with one search on it, `s`; `watch` goes into the config's `[watch]` table.
fn one_search(
    watch: &str,
) -> (
    tokio::runtime::Runtime,
    fake_portal::Portal,
    tempfile::TempDir,
    std::path::PathBuf,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let portal = rt
        .block_on(fake_portal::Portal::start(vec![
            fake_portal::SiteSpec::new("p"),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notifio.toml");
    std::fs::write(
        &path,
        format!(
            "[watch]\n{watch}state_dir = {:?}\ndashboard = false\n\n[[search]]\nname = \"s\"\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n",
            dir.path().display().to_string(),
            portal.search_url("p", "s")
        ),
    )
    .unwrap();
    (rt, portal, dir, path)
}

/// `notifio watch --config path` as a child, once site `p` has seen `checks` requests.
fn watch_until_checked(
    path: &std::path::Path,
    portal: &fake_portal::Portal,
    checks: usize,
) -> std::process::Child {
    let child = notifio()
        .args(["watch", "--config"])
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while portal.request_count("p") < checks {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "watch never checked"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// `notifio watch` on SIGTERM finishes in-flight work, flushes the store and exits 0 within 2 s.
#[test]
fn watch_exits_cleanly_on_sigterm_within_two_seconds() {
    let (rt, portal, dir, path) = one_search("interval = \"300ms\"\nspacing = \"50ms\"\n");
    let mut child = watch_until_checked(&path, &portal, 2);
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let sent = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "watch did not exit within 2 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    let store = notifio::store::Store::open(dir.path()).unwrap();
    let checks: i64 = store
        .conn()
        .query_row("SELECT COUNT(*) FROM checks", [], |r| r.get(0))
        .unwrap();
    assert!(checks >= 2, "checks were recorded before exit");
    rt.block_on(portal.shutdown());
}

/// `notifio watch [-q]` on `path`, its stdout appended to `out`.
fn watch_printing_to(
    path: &std::path::Path,
    out: &std::path::Path,
    quiet: bool,
) -> std::process::Child {
    let file = std::fs::File::create(out).unwrap();
    let mut cmd = notifio();
    cmd.args(["watch", "--config"]).arg(path);
    if quiet {
        cmd.arg("-q");
    }
    cmd.env_remove("RUST_LOG")
        .stdout(file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits (bounded) until `out` has a line containing `needle`; returns the whole text.
fn printed(out: &std::path::Path, needle: &str) -> String {
    let t0 = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "`watch` never printed {needle:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `watch` says what it does as it does it: a line for the baseline, a new listing, a refusal,
/// the probe and the recovery (the demo's lines); `-q` keeps only the new listing.
#[test]
fn watch_prints_a_line_per_baseline_new_listing_refusal_and_recovery() {
    let (rt, portal, dir, path) = one_search("interval = \"300ms\"\nspacing = \"50ms\"\n");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "[[search]]",
        "[backoff]\nrate_limited = [\"500ms\"]\n\n[[search]]",
    );
    std::fs::write(&path, text).unwrap();
    let site = portal
        .base_url("p")
        .trim_start_matches("http://")
        .to_owned();
    let out = dir.path().join("watch.out");
    let mut child = watch_printing_to(&path, &out, false);
    printed(
        &out,
        &format!("baseline for \"s\" on {site}: 30 listings recorded silently"),
    );
    let flat = portal.add_listing("p", Some("s"));
    printed(
        &out,
        &format!("new listing on {site} for \"s\": {}", flat.title),
    );
    portal.set_behaviour(
        "p",
        fake_portal::Behaviour::RateLimited { retry_after: None },
    );
    printed(
        &out,
        &format!("{site} refused (rate_limited): its search waits until"),
    );
    portal.set_behaviour("p", fake_portal::Behaviour::Normal);
    printed(&out, &format!("probe sent to {site}: \"s\" goes first"));
    printed(&out, &format!("{site} clear: the probe succeeded"));
    let _ = child.kill();
    let _ = child.wait();

    // -q: only what is announced.
    let state = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(&path).unwrap().replace(
        &format!("state_dir = {:?}", dir.path().display().to_string()),
        &format!("state_dir = {:?}", state.path().display().to_string()),
    );
    std::fs::write(&path, text).unwrap();
    let quiet_out = dir.path().join("quiet.out");
    let mut child = watch_printing_to(&path, &quiet_out, true);
    let t0 = std::time::Instant::now();
    while notifio::store::Store::open_existing(&notifio::store::Store::file_in(state.path()))
        .ok()
        .and_then(|s| {
            s.conn()
                .query_row("SELECT COUNT(*) FROM checks", [], |r| r.get::<_, i64>(0))
                .ok()
        })
        .unwrap_or(0)
        < 1
    {
        assert!(t0.elapsed() < Duration::from_secs(20), "no baseline");
        std::thread::sleep(Duration::from_millis(50));
    }
    let flat = portal.add_listing("p", Some("s"));
    let said = printed(
        &quiet_out,
        &format!("new listing on {site} for \"s\": {}", flat.title),
    );
    assert!(!said.contains("baseline"), "{said}");
    let _ = child.kill();
    let _ = child.wait();
    rt.block_on(portal.shutdown());
}

#[test]
fn a_facebook_search_over_http_without_cookies_is_a_config_error_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fb.toml");
    std::fs::write(
        &path,
        format!(
            "[watch]\nstate_dir = {:?}\ndashboard = false\n\n[site.\"facebook.com\"]\nfetch = \"http\"\n\n[[search]]\nname = \"bikes\"\nurl = \"https://www.facebook.com/marketplace/madrid/search?query=bike\"\n",
            dir.path().display().to_string()
        ),
    )
    .unwrap();
    let out = notifio()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs your logged-in session"), "{err}");
    assert!(err.contains("[site.\"facebook.com\"]"), "{err}");
}

/// `notifio` with `HTTP_PROXY` set to `proxy` and no other proxy variable.
fn through_proxy(proxy: &str) -> Command {
    let mut cmd = notifio();
    for name in [
        "NO_PROXY",
        "no_proxy",
        "ALL_PROXY",
        "all_proxy",
        "http_proxy",
    ] {
        cmd.env_remove(name);
    }
    cmd.env("HTTP_PROXY", proxy);
    cmd
}

/// Proxies come from the environment, as curl reads them: `notifio check` with `HTTP_PROXY`
/// set sends its request to that proxy (a forward proxy on loopback), in absolute form.
#[test]
fn check_goes_through_the_proxy_the_environment_names() {
    let (rt, portal, _dir, path) = one_search("");
    let (proxy, lines) = rt.block_on(crate::util::start_proxy());
    let url = portal.search_url("p", "s");
    let out = through_proxy(&proxy)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        lines.lock().unwrap().clone(),
        vec![format!("GET {url} HTTP/1.1")]
    );
    assert_eq!(
        portal.request_count("p"),
        1,
        "the page was read, through the proxy"
    );
}

/// `notifio ARGS --config path`, run to the end.
fn run(args: &[&str], path: &std::path::Path) -> std::process::Output {
    notifio()
        .args(args)
        .arg("--config")
        .arg(path)
        .output()
        .unwrap()
}

/// A p/// A portal with sites `good`, `busy` (503), `blocked` (a DataDome page at 403) and `empty`
/// (200, no bytes), a port nothing listens on, and a config with one search on each.
fn troubled_searches() -> (
    tokio::runtime::Runtime,
    fake_portal::Portal,
    tempfile::TempDir,
    std::path::PathBuf,
) {
    use fake_portal::{Behaviour, ChallengeKind, SiteSpec};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let names = ["good", "busy", "blocked", "empty"];
    let portal = rt
        .block_on(fake_portal::Portal::start(
            names.iter().map(|n| SiteSpec::new(n)).collect(),
        ))
        .unwrap();
    portal.set_behaviour("busy", Behaviour::ServerError(503));
    portal.set_behaviour(
        "blocked",
        Behaviour::Challenge(ChallengeKind::DataDome, 403),
    );
    portal.set_behaviour("empty", Behaviour::Empty);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = format!(
        "[watch]\nstate_dir = {:?}\ndashboard = false\n\n[retry.search]\ninitial = \"10ms\"\n",
        dir.path().display().to_string()
    );
    let mut urls: Vec<String> = names.iter().map(|n| portal.search_url(n, "s")).collect();
    urls.push(format!(
        "http://127.0.0.1:{}/search/s",
        crate::util::free_port()
    ));
    for (i, url) in urls.iter().enumerate() {
        cfg.push_str(&format!(
            "\n[[search]]\nname = \"s{i}\"\nurl = {url:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n"
        ));
    }
    let path = dir.path().join("notifio.toml");
    std::fs::write(&path, cfg).unwrap();
    (rt, portal, dir, path)
}

#[test]
fn check_says_why_each_search_is_not_ok() {
    let (_rt, _portal, _dir, path) = troubled_searches();
    let out = run(&["check", "--json"], &path);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by = |name: &str| lines.iter().find(|l| l["search"] == name).unwrap().clone();
    assert_eq!(by("s0")["outcome"], "ok");
    assert!(by("s0").get("reason").is_none(), "no reason on an ok line");
    let reason = |name: &str| by(name)["reason"].as_str().unwrap().to_owned();
    assert_eq!(
        reason("s1"),
        "HTTP 503 Service Unavailable after 3 attempts"
    );
    assert_eq!(reason("s2"), "challenge page (DataDome), HTTP 403");
    assert_eq!(reason("s3"), "HTTP 200 OK with an empty page");
    let refused = reason("s4");
    assert!(
        refused.starts_with("connection refused by 127.0.0.1:")
            && refused.ends_with("after 3 attempts"),
        "{refused}"
    );
    // The human line says the same.
    let out = run(&["check", "--force"], &path);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("s2 ")).unwrap();
    assert!(
        line.ends_with(": challenge page (DataDome), HTTP 403"),
        "{line}"
    );
    // A second pass without --force: the refusing sites wait, and say until when.
    let out = run(&["check", "--json"], &path);
    let text = String::from_utf8_lossy(&out.stdout);
    let waiting: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["search"] == "s2")
        .unwrap();
    assert_eq!(waiting["outcome"], "waiting");
    let why = waiting["reason"].as_str().unwrap();
    assert!(
        why.starts_with("the site is waiting after challenge (refusal 2 in a row) until ")
            || why.starts_with("the site is waiting after challenge (refusal 1 in a row) until "),
        "{why}"
    );
    assert!(why.contains(" UTC, in "), "{why}");
}

#[test]
fn a_closed_stdout_ends_check_quietly() {
    let (_rt, _portal, _dir, path) = troubled_searches();
    for args in [
        &["check", "--json"][..],
        &["check"],
        &["status"],
        &["ladders"],
    ] {
        let mut child = notifio()
            .args(args)
            .arg("--config")
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // `| head -0`: the reader goes away before anything is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_urls_password_is_never_printed_stored_or_sent_in_a_request_line() {
    let (rt, portal, dir, path) = one_search("");
    let plain = portal.search_url("p", "s");
    let with_password = plain.replacen("http://", "http://ana:hunter2@", 1);
    let cfg = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        cfg.replace(&format!("{plain:?}"), &format!("{with_password:?}")),
    )
    .unwrap();
    let (proxy, lines) = rt.block_on(crate::util::start_proxy());
    let out = through_proxy(&proxy)
        .args(["-vv", "check", "--json", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("\"url\":\"http://ana:***@127.0.0.1:"),
        "{stdout}"
    );
    for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(!text.contains("hunter2"), "{what}: {text}");
    }
    let line = lines.lock().unwrap().clone();
    assert_eq!(
        line,
        vec![format!("GET {plain} HTTP/1.1")],
        "no credentials in the request line"
    );
    let sent = portal.requests();
    assert_eq!(
        sent[0].header("authorization"),
        Some("Basic YW5hOmh1bnRlcjI="),
        "the credentials go as Basic auth instead"
    );
    let status = run(&["status", "--json"], &path);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("ana:***@"), "{status}");
    assert!(!status.contains("hunter2"), "{status}");
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let p = entry.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("notifio.db")
        {
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !bytes.windows(7).any(|w| w == b"hunter2"),
                "{}",
                p.display()
            );
        }
    }
}

/// Waits (bounded) for a child to exit and returns its output.
fn finish_within(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("the child did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_second_watch_on_one_state_dir_exits_1_naming_the_first() {
    let (rt, portal, _dir, path) = one_search("interval = \"300ms\"\nspacing = \"50ms\"\n");
    let mut first = watch_until_checked(&path, &portal, 1);
    let second = notifio()
        .args(["watch", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish_within(second, Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("(pid {})", first.id())), "{err}");
    assert!(err.contains("is using the state directory"), "{err}");
    // check and status still work beside the running watcher.
    for args in [&["check"][..], &["status"]] {
        let out = run(args, &path);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first watcher is still running"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    let _ = first.wait();
    rt.block_on(portal.shutdown());
}

#[test]
fn a_damaged_database_is_named_once_and_left_alone() {
    let (_rt, _portal, dir, path) = one_search("");
    let db = dir.path().join("notifio.db");
    // Not a database at all, then a real one with a page overwritten.
    std::fs::write(&db, vec![b'x'; 8192]).unwrap();
    let mut cases = vec![("garbage", std::fs::read(&db).unwrap())];
    std::fs::remove_file(&db).unwrap();
    let out = run(&["check"], &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    {
        // Fold the WAL in so the pages are in the file, then damage the second half.
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
            .unwrap();
    }
    let mut bytes = std::fs::read(&db).unwrap();
    let half = bytes.len() / 2;
    for b in &mut bytes[half..] {
        *b = 0xa5;
    }
    cases.push(("damaged pages", bytes));
    for (what, bytes) in cases {
        let _ = std::fs::remove_file(dir.path().join("notifio.db-wal"));
        let _ = std::fs::remove_file(dir.path().join("notifio.db-shm"));
        std::fs::write(&db, &bytes).unwrap();
        for cmd in ["check", "status", "watch"] {
            let out = run(&[cmd], &path);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{what} {cmd}: {err}");
            let said = format!(
                "the state database {} is damaged or is not a Notifio database",
                db.display()
            );
            assert_eq!(
                err.matches(&said).count(),
                1,
                "{what} {cmd}: named, once: {err}"
            );
            assert_eq!(
                err.matches("not a database").count() + err.matches("malformed").count(),
                1,
                "{what} {cmd}: the cause, once: {err}"
            );
            assert!(
                err.contains("never deletes or rewrites"),
                "{what} {cmd}: {err}"
            );
            assert!(!err.contains("cannot create the state directory"), "{err}");
            assert!(
                std::fs::read(&db).unwrap() == bytes,
                "{what} {cmd}: the file is left as it was"
            );
        }
    }
}

#[test]
fn a_state_dir_that_cannot_be_written_says_which_file_and_why() {
    let (_rt, _portal, dir, path) = one_search("");
    let cfg = std::fs::read_to_string(&path).unwrap();
    let state = format!("state_dir = {:?}", dir.path().display().to_string());
    // A file where the directory should be.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    std::fs::write(
        &path,
        cfg.replace(
            &state,
            &format!("state_dir = {:?}", file.display().to_string()),
        ),
    )
    .unwrap();
    let out = run(&["status"], &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is a file, not a directory"), "{err}");
    // A directory that exists but takes no new file (sysfs refuses even root).
    if std::path::Path::new("/sys/kernel").is_dir() {
        std::fs::write(&path, cfg.replace(&state, "state_dir = \"/sys/kernel\"")).unwrap();
        let out = run(&["check"], &path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot create the state database /sys/kernel/notifio.db"),
            "{err}"
        );
        assert!(!err.contains("state directory /sys"), "{err}");
    }
}

/// Every command refuses `text` (written as `notifio.toml` in a temp dir, `{DIR}` replaced by
/// it) the same way at start: exit 2, `notifio.toml:LINE:COL: `KEY`: …` on stderr.
#[track_caller]
fn every_command_refuses(text: &str, files: &[(&str, &[u8], u32)], located: &str, says: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes, mode) in files {
        let p = dir.path().join(name);
        if name.ends_with('/') {
            std::fs::create_dir(&p).unwrap();
        } else {
            std::fs::write(&p, bytes).unwrap();
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    let path = dir.path().join("notifio.toml");
    let dir_text = dir.path().display().to_string();
    std::fs::write(&path, text.replace("{DIR}", &dir_text)).unwrap();
    for args in [
        &["watch"][..],
        &["check"],
        &["check", "--notify"],
        &["status"],
    ] {
        let child = notifio()
            .env_remove("NOTIFIO_SMTP_PASSWORD")
            .args(args)
            .arg("--config")
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = finish_within(child, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr).replace(&format!("{dir_text}/"), "");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("error: notifio.toml:{located}")),
            "{args:?}: {err}"
        );
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

const WATCH: &str = "[watch]\nstate_dir = \"{DIR}/state\"\ndashboard = false\n";
const SEARCH: &str = "\n[[search]]\nname = \"s\"\nurl = \"http://127.0.0.1:9/s\"\nlisting = { selector = \"article\", id_attr = \"data-id\" }\n";
const COOKIES: &str = "# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\tv\n";

#[test]
fn files_the_config_names_are_checked_by_every_command_at_start() {
    let email = format!(
        "{WATCH}[notify.email]\nto = \"me@example.com\"\nsmtp = \"smtp://ana@127.0.0.1:2525\"\npassword_file = \"pw.txt\"\n{SEARCH}"
    );
    every_command_refuses(
        &email,
        &[("pw.txt", b"hunter2\n", 0o644)],
        "7:17: `notify.email.password_file`: ",
        "readable by group or others (mode 0644)",
    );
    let site =
        |file: &str| format!("{WATCH}\n[site.\"127.0.0.1:9\"]\ncookies = \"{file}\"\n{SEARCH}");
    let at = "6:11: `site.\"127.0.0.1:9\".cookies`: ";
    every_command_refuses(
        &site("c.txt"),
        &[("c.txt", b"not a cookie line\n", 0o600)],
        at,
        "line 1:",
    );
    every_command_refuses(
        &site("c.txt"),
        &[("c.txt", b"SQLite format 3\0\x01\x02", 0o600)],
        at,
        "is not a text file",
    );
    every_command_refuses(&site("c/"), &[("c/", b"", 0o700)], at, "is not a file");
    every_command_refuses(
        &site("c.txt"),
        &[("c.txt", COOKIES.as_bytes(), 0o644)],
        at,
        "readable by group or others",
    );
    every_command_refuses(&site("none.txt"), &[], at, "cannot read cookies file");
    every_command_refuses(
        &format!(
            "{WATCH}[notify.email]\nto = \"me@example.com\"\nsmtp = \"smtp://ana@127.0.0.1:2525\"\n{SEARCH}"
        ),
        &[],
        "6:8: `notify.email.smtp`: ",
        "names user \"ana\" but no password is set",
    );
}

#[test]
fn values_the_watcher_would_refuse_are_refused_by_every_command_at_start() {
    every_command_refuses(
        &format!("{WATCH}[fetch]\nuser_agent = \"Mozilla\\r\\nX-Evil: 1\"\n{SEARCH}"),
        &[],
        "5:14: `fetch.user_agent`: ",
        "cannot be sent as an HTTP header",
    );
    every_command_refuses(
        &format!(
            "{WATCH}\n[[search]]\nname = \"fb\"\nurl = \"https://www.facebook.com/marketplace/madrid\"\n"
        ),
        &[],
        "7:7: `search[0].url`: ",
        "needs your logged-in session",
    );
}

/// Control characters a raw byte of which a terminal would obey: ESC (CSI, OSC), BEL, NUL,
/// CR, and the C1 CSI.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect()
}

/// Text from a page reaches a terminal or a log escaped (docs/reliability.md): a title that
/// writes to the clipboard (OSC 52) and clears the screen, an id with a line break that
/// would forge a line (`Bcc: …`). `watch`'s narration and its log (`-vv`), `check`'s human
/// output, `status`; `check --json` escapes by being JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_text_reaches_the_terminal_and_the_log_escaped() {
    let portal = fake_portal::Portal::start(vec![fake_portal::SiteSpec {
        name: "p".into(),
        listings: 3,
        page_bytes: 4_000,
        ..fake_portal::SiteSpec::default()
    }])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = crate::util::write_config(
        dir.path(),
        &format!(
            "[watch]\nspacing = \"100ms\"\nstate_dir = {:?}\ndashboard = false\n\n\
             [[search]]\nname = \"s\"\nurl = {:?}\ninterval = \"300ms\"\n\
             listing = {{ selector = \"article.listing\", id_attr = \"data-id\", title = \"h2\" }}\n\n\
             [site.{:?}]\nspacing = \"100ms\"\n",
            dir.path().join("state").display().to_string(),
            portal.search_url("p", "s"),
            portal.base_url("p").trim_start_matches("http://"),
        ),
    );
    let run_now = |args: &'static [&'static str]| {
        let path = path.clone();
        tokio::task::spawn_blocking(move || run(args, &path))
    };
    let baseline = run_now(&["check"]).await.unwrap();
    assert!(baseline.status.success());
    let hostile = |portal: &fake_portal::Portal, n: u32| {
        portal.add_listing_with("p", None, |l| {
            l.title = format!("Nice flat {n}\u{1b}]52;c;SGVsbG8=\u{7}\u{1b}[2J\u{9b}31m");
        });
        portal.add_listing_with("p", None, |l| {
            l.id = format!("77{n}\r\nBcc: evil@example.org");
            l.title = String::new();
        });
    };

    // `watch -vv`: the narration on stdout and the log on stderr.
    hostile(&portal, 1);
    let watch = crate::util::Notifio::start(dir.path(), &path, true, None);
    let said = crate::util::wait_for(Duration::from_secs(20), "the narration", || {
        let out = std::fs::read_to_string(&watch.out).unwrap_or_default();
        (out.contains("Nice flat 1") && out.contains("Bcc")).then_some(out)
    })
    .await;
    let log = watch.output();
    watch.terminate();
    println!("{log}");
    assert!(
        said.contains("Nice flat 1\\x1b]52;c;SGVsbG8=\\x07\\x1b[2J\\u{9b}31m"),
        "{said}"
    );
    assert!(said.contains("771\\r\\nBcc: evil@example.org"), "{said}");
    assert_eq!(
        raw_controls(&log),
        [] as [char; 0],
        "watch wrote raw controls"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("Bcc:")),
        "a forged line: {log}"
    );

    // `check`'s human output, and `status`.
    hostile(&portal, 2);
    let out = run_now(&["check"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Nice flat 2\\x1b]52"), "{text}");
    assert!(text.contains("772\\r\\nBcc"), "{text}");
    assert_eq!(
        raw_controls(&text),
        [] as [char; 0],
        "check wrote raw controls"
    );
    assert!(!text.lines().any(|l| l.starts_with("Bcc:")), "{text}");
    let status = run_now(&["status"]).await.unwrap();
    let text = String::from_utf8_lossy(&status.stdout).into_owned()
        + &String::from_utf8_lossy(&status.stderr);
    assert_eq!(raw_controls(&text), [] as [char; 0], "{text}");

    // `check --json`: JSON escapes them; the values read back are the page's own.
    hostile(&portal, 3);
    let out = run_now(&["check", "--json", "--fresh"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(raw_controls(&text), [] as [char; 0], "{text}");
    let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let ids: Vec<&str> = v["listings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["id"].as_str())
        .collect();
    assert!(ids.contains(&"773\r\nBcc: evil@example.org"), "{ids:?}");
}
