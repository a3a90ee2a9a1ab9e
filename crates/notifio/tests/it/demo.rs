//! `notifio demo` as a newcomer runs it, compressed: the real binary for ~24 s at speed 6.
//! Its narrative must show a refusal, the single probe, the recovery, and at least one
//! notification delivered to the mbox it names.

use std::process::Command;

#[test]
fn the_demo_tells_the_whole_story_and_delivers_to_the_mailbox() {
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
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    ] {
        assert!(
            stdout.contains(needle),
            "the narrative lacks {what} (`{needle}`)"
        );
    }
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
    let state_dir = std::path::Path::new(mailbox).parent().unwrap();
    let _ = std::fs::remove_dir_all(state_dir);
}
