//! `notifio demo` as a newcomer runs it, compressed: the real binary for ~24 s at speed 6.
//! Its narrative must show a refusal, the single probe, the recovery, a price drop, and at
//! least one notification delivered to the mbox it names; with a browser on the machine, a
//! site whose listings are built by JavaScript read through it; without one, everything else.

use std::process::Command;

/// Whether this machine has a browser the demo will find (under CI it must).
fn has_browser() -> bool {
    let found = notifio::fetch::browser::find_executable(None, std::env::var_os("PATH")).is_ok();
    assert!(
        found || std::env::var("CI").as_deref() != Ok("true"),
        "CI has Debian's chromium"
    );
    if !found {
        eprintln!("no browser here: the demo's browser site is not checked (install `chromium`)");
    }
    found
}

/// What the story must tell before the demo is stopped: (what, a line's words).
const STORY: [(&str, &str); 14] = [
    ("the shortened ladders", "ladders shortened for the demo"),
    ("a dashboard URL", "Dashboard: http://127.0.0.1:"),
    ("a silent baseline", "recorded silently"),
    (
        "a refusal that parks all three searches",
        "refused (rate_limited, Retry-After",
    ),
    ("all searches waiting together", "all 3 searches wait until"),
    ("a challenge refusal", "refused (challenge"),
    ("the single probe", "probe sent to idealista-demo"),
    ("the recovery", "clear: the probe succeeded"),
    ("a new listing", "new listing on"),
    ("a price drop", "price dropped on rentals-demo"),
    (
        "a flat a search's filter holds back",
        "held back by the filters of \"Madrid centre, up to 1200\"",
    ),
    (
        "the flat without a balcony held back",
        "held back by the filters of \"Retiro with balcony\"",
    ),
    ("the let flat", "was let and left rentals-demo"),
    (
        "a digest the webhook channel received",
        "webhook channel (one digest every",
    ),
];

/// Runs the demo as a newcomer does, reads its narrative as it comes, asks its dashboard for
/// the inbox once a listing is new, and stops it with Ctrl-C (SIGINT) once the whole story is
/// told (`--duration` only bounds a demo that never tells it).
/// GETs a JSON answer from the running demo's dashboard (loopback: no token needed).
fn get_json(url: &str) -> serde_json::Value {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = crate::util::api_client().get(url).send().await.unwrap();
        assert!(r.status().is_success(), "{url}: {}", r.status());
        serde_json::from_str(&r.text().await.unwrap()).unwrap()
    })
}

#[test]
fn the_demo_tells_the_whole_story_and_delivers_to_the_mailbox() {
    use std::io::BufRead as _;
    let browser = has_browser();
    let mut child = Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args([
            "demo",
            "--speed",
            "6",
            "--duration",
            "90",
            "--dashboard",
            "127.0.0.1:0",
        ])
        .env_remove("NOTIFIO_BROWSER")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr_pipe = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut { stderr_pipe }, &mut s);
        s
    });
    let mut told = String::new();
    let mut inbox: Option<serde_json::Value> = None;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let story_told = |told: &str| {
        STORY.iter().all(|(_, n)| told.contains(n))
            && (!browser || told.contains("baseline for \"Valencia, built by JavaScript\""))
    };
    while !story_told(&told) {
        let Some(Ok(line)) = lines.next() else { break };
        told.push_str(&line);
        told.push('\n');
        if inbox.is_none() && line.contains("new listing on") {
            let dashboard = told
                .lines()
                .find_map(|l| l.strip_prefix("Dashboard: "))
                .expect("the dashboard is named before any listing")
                .trim()
                .to_owned();
            inbox = Some(get_json(&format!("{dashboard}api/listings?per_page=500")));
        }
    }
    // Ctrl-C, as a newcomer stops it: the demo stops cleanly and says where its state is.
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    for line in lines.map_while(Result::ok) {
        told.push_str(&line);
        told.push('\n');
    }
    let status = child.wait().unwrap();
    let stderr = stderr_reader.join().unwrap();
    let stdout = told;
    println!("{stdout}");
    assert!(status.success(), "demo failed ({status}): {stderr}");
    assert!(
        stdout.contains("\nStopped. State: "),
        "Ctrl-C stops the demo as --duration does: {stdout}"
    );
    // Stopping closes the demo's own browser: no error is logged for that.
    assert!(!stderr.contains("ERROR"), "{stderr}");
    for (what, needle) in STORY {
        assert!(
            stdout.contains(needle),
            "the narrative lacks {what} (`{needle}`)"
        );
    }
    // The dashboard served the inbox while the demo ran: the listings it had, newest first.
    let inbox = inbox.expect("a new listing was told, and the inbox asked for then");
    let listings = inbox["listings"].as_array().expect("an inbox page");
    assert!(
        inbox["total"].as_u64().unwrap_or(0) >= 5 && !listings.is_empty(),
        "the baselines' listings are in the inbox: {inbox:.400}"
    );
    assert!(
        listings.iter().any(|l| l["searches"]
            .as_array()
            .is_some_and(|s| s.iter().any(|n| n == "Retiro with balcony"))),
        "each listing names the searches that found it"
    );
    if browser {
        assert!(
            stdout.contains("builds its listings with JavaScript: read through the browser"),
            "{stdout}"
        );
        let baseline = stdout
            .lines()
            .find(|l| l.contains("baseline for \"Valencia, built by JavaScript\""))
            .expect("the browser site's baseline");
        assert!(baseline.contains("read through the browser"), "{baseline}");
        assert!(
            baseline.contains(": 30 listings"),
            "every card the script built: {baseline}"
        );
    }
    // Each search announces only what its name promises, and a drop names its flat.
    let price_of = |line: &str| -> u32 {
        let p = line.rsplit(", ").next().unwrap_or_default();
        p.split(' ')
            .next()
            .unwrap_or_default()
            .parse()
            .unwrap_or_else(|_| panic!("no price in {line}"))
    };
    for line in stdout.lines().filter(|l| l.contains("new listing on")) {
        let line = line.split("  → ").next().unwrap_or(line);
        if line.contains("\"Madrid centre, up to 1200\"") {
            assert!(price_of(line) <= 1200, "{line}");
        }
        if line.contains("\"Salamanca under 1500\"") {
            assert!(price_of(line) < 1500, "{line}");
        }
        if line.contains("\"Madrid, 2+ rooms\"") {
            assert!(!line.contains("Studio"), "{line}");
        }
        if line.contains("\"Retiro with balcony\"") {
            assert!(!line.contains("Interior studio"), "no balcony: {line}");
        }
    }
    let dropped = stdout
        .lines()
        .find(|l| l.contains("price dropped on"))
        .unwrap();
    assert!(
        dropped.contains(" in ") && !dropped.contains(": listing "),
        "the drop names the flat by its title, not its id: {dropped}"
    );
    let balconyless = stdout
        .lines()
        .find(|l| l.contains("held back by the filters of \"Retiro with balcony\""))
        .unwrap();
    assert!(
        balconyless.contains("Interior studio in Retiro"),
        "{balconyless}"
    );
    // The probe comes after the refusal and the recovery after a probe.
    let refusal = stdout.find("refused (rate_limited").unwrap();
    let probe = stdout[refusal..].find("probe sent").unwrap() + refusal;
    assert!(stdout[probe..].contains("clear: the probe succeeded"));

    let mailbox = stdout
        .lines()
        .find_map(|l| l.split("Mailbox: ").nth(1))
        .expect("the demo says where the mailbox is")
        .trim();
    let mbox = std::fs::read_to_string(mailbox).unwrap();
    assert!(mbox.starts_with("From "), "an mbox starts with a From line");
    assert!(
        mbox.contains("Subject:") && mbox.contains("new listing"),
        "a delivered notification: {mbox:.400}"
    );
    assert!(
        mbox.contains("\n  Price dropped: "),
        "the price drop delivered, under its listing's title: {mbox}"
    );
    let state_dir = std::path::Path::new(mailbox).parent().unwrap();
    // The let flat is gone in the inbox; the webhook channel's digest arrived (above).
    let store = notifio::store::Store::open(state_dir).unwrap();
    let gone = store
        .inbox(&notifio::inbox::InboxQuery {
            gone: Some(true),
            ..notifio::inbox::InboxQuery::default()
        })
        .unwrap();
    assert_eq!(gone.total, 1, "{:?}", gone.listings);
    assert!(gone.listings[0].online_ms().is_some());
    let config = std::fs::read_to_string(state_dir.join("demo.toml")).unwrap();
    assert!(config.contains("digest = \"1m\""), "{config}");
    drop(store);
    let _ = std::fs::remove_dir_all(state_dir);
}

/// The README's first command on a machine with no browser at all: the demo says it skipped
/// its browser site, and everything else runs.
#[test]
fn the_demo_runs_without_a_browser() {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args([
            "demo",
            "--speed",
            "6",
            "--duration",
            "5",
            "--dashboard",
            "127.0.0.1:0",
        ])
        .env("PATH", empty.path())
        .env("NOTIFIO_BROWSER", "none")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Skipped the site read through the browser"),
        "{stdout}"
    );
    assert!(!stdout.contains("Valencia"), "{stdout}");
    assert!(
        stdout.contains("recorded silently"),
        "the rest runs: {stdout}"
    );
    if let Some(mailbox) = stdout.lines().find_map(|l| l.split("Mailbox: ").nth(1)) {
        let _ = std::fs::remove_dir_all(std::path::Path::new(mailbox.trim()).parent().unwrap());
    }
}
