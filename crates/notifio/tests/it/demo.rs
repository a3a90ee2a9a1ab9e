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

#[test]
fn the_demo_tells_the_whole_story_and_delivers_to_the_mailbox() {
    let browser = has_browser();
    let out = Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args([
            "demo",
            "--speed",
            "6",
            "--duration",
            "24",
            "--dashboard",
            "127.0.0.1:0",
        ])
        .env_remove("NOTIFIO_BROWSER")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "demo failed: {stderr}");
    // Stopping closes the demo's own browser: no error is logged for that.
    assert!(!stderr.contains("ERROR"), "{stderr}");
    for (what, needle) in [
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
    ] {
        assert!(
            stdout.contains(needle),
            "the narrative lacks {what} (`{needle}`)"
        );
    }
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
    }
    let dropped = stdout
        .lines()
        .find(|l| l.contains("price dropped on"))
        .unwrap();
    assert!(
        dropped.contains(" in ") && !dropped.contains(": listing "),
        "the drop names the flat by its title, not its id: {dropped}"
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
    // The let flat is gone in the inbox; a second channel takes one digest a minute.
    assert!(
        stdout.contains("was let and left rentals-demo"),
        "the narrative lacks the let flat"
    );
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
