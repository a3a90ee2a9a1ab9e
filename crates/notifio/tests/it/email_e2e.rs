//! Issue 4 end to end: the real `notifio watch` binary, the fake portal (in this process) and a
//! real SMTP server on 127.0.0.1. What a user would see: a flat appears on the portal, an email
//! arrives; SMTP outages and a SIGKILL between detection and delivery lose nothing and send
//! nothing twice; the SMTP password never reaches a log line or the database.

use crate::util::{Notifio, wait_for};
use base64::Engine as _;
use fake_portal::{Portal, SiteSpec};
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(20);

async fn portal() -> Portal {
    Portal::start(vec![SiteSpec {
        name: "flats".into(),
        page_bytes: 40_000,
        ..SiteSpec::default()
    }])
    .await
    .unwrap()
}

/// A config for `searches` (name, url), email to `smtp`, short timings everywhere.
fn config(dir: &Path, searches: &[(&str, String)], smtp: &str) -> PathBuf {
    let mut t = crate::util::watch_toml(dir, "300ms", "100ms");
    t.push_str(&format!(
        "[backoff]\nerror = [\"300ms\", \"600ms\"]\n\n\
         [retry.notify]\ninitial = \"50ms\"\ntimeout = \"2s\"\n\n\
         [notify]\nemail = {{ to = \"me@example.com\", from = \"notifio@localhost\", smtp = \"{smtp}\" }}\n\n"
    ));
    for (name, url) in searches {
        t.push_str(&crate::util::search_toml(name, url));
    }
    crate::util::write_config(dir, &t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_listing_arrives_as_an_email_with_subject_body_and_link() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = portal().await;
    let port = crate::util::free_port();
    let inbox = crate::util::start_smtp(port);
    let cfg = config(
        state,
        &[("Madrid under 1200", portal.search_url("flats", "madrid"))],
        &format!("smtp://127.0.0.1:{port}"),
    );
    let notifio = Notifio::start(state, &cfg, false, None);
    wait_for(LIMIT, "the baseline", || {
        crate::util::all_baselined(state, 1).then_some(())
    })
    .await;
    assert!(inbox.lock().unwrap().is_empty(), "a baseline is silent");

    let flat = portal.add_listing("flats", Some("madrid"));
    wait_for(LIMIT, "the email", || {
        (!inbox.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let mails = crate::util::mails(&inbox);
    assert_eq!(mails.len(), 1);
    let m = &mails[0];
    println!("{}\n{}", m.subject, m.text);
    assert_eq!(m.subject, "1 new listing — Madrid under 1200");
    assert!(
        m.text.contains(&format!("* {}\n", flat.title)),
        "{}",
        m.text
    );
    assert!(m.text.contains(&format!("  {}\n", flat.url)), "{}", m.text);
    assert!(
        m.html.contains(&format!("<a href=\"{}\">", flat.url)),
        "{}",
        m.html
    );
    // Later checks of the same page announce nothing more.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(inbox.lock().unwrap().len(), 1);
    assert_eq!(crate::util::pending(state, "email"), 0);
    notifio.kill();
    portal.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_down_while_three_listings_appear_then_up_delivers_all_three_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = portal().await;
    let port = crate::util::free_port(); // nothing listens yet: the SMTP server is down
    let cfg = config(
        state,
        &[("Berlin", portal.search_url("flats", "berlin"))],
        &format!("smtp://127.0.0.1:{port}"),
    );
    let notifio = Notifio::start(state, &cfg, false, None);
    wait_for(LIMIT, "the baseline", || {
        crate::util::all_baselined(state, 1).then_some(())
    })
    .await;
    let mut flats = Vec::new();
    for i in 1..=3 {
        flats.push(portal.add_listing("flats", Some("berlin")));
        // Each flat is its own check (and its own message), recorded while SMTP is down.
        wait_for(LIMIT, "the outbox row", || {
            (crate::util::outbox_rows(state, "email") >= i).then_some(())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await; // a few failed delivery attempts
    assert_eq!(
        crate::util::pending(state, "email"),
        3,
        "nothing is dropped"
    );
    let errors: Vec<String> = {
        let c = crate::util::db(state).unwrap();
        let mut s = c
            .prepare("SELECT last_error FROM outbox WHERE last_error IS NOT NULL")
            .unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert!(!errors.is_empty(), "the failed attempts are recorded");

    let inbox = crate::util::start_smtp(port);
    wait_for(LIMIT, "three emails", || {
        (inbox.lock().unwrap().len() >= 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await; // room for a duplicate to show up
    let mails = crate::util::mails(&inbox);
    let subjects: Vec<&str> = mails.iter().map(|m| m.subject.as_str()).collect();
    assert_eq!(subjects, ["1 new listing — Berlin"; 3]);
    for (m, flat) in mails.iter().zip(&flats) {
        assert!(m.text.contains(&flat.url), "in order: {}", m.text);
    }
    assert_eq!(crate::util::pending(state, "email"), 0);
    notifio.kill();
    portal.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_recording_and_delivery_delivers_exactly_once_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = portal().await;
    let port = crate::util::free_port();
    let cfg = config(
        state,
        &[("Lisbon", portal.search_url("flats", "lisbon"))],
        &format!("smtp://127.0.0.1:{port}"),
    );
    let first = Notifio::start(state, &cfg, false, None);
    wait_for(LIMIT, "the baseline", || {
        crate::util::all_baselined(state, 1).then_some(())
    })
    .await;
    let flat = portal.add_listing("flats", Some("lisbon"));
    wait_for(LIMIT, "a pending outbox row", || {
        (crate::util::pending(state, "email") == 1).then_some(())
    })
    .await;
    first.kill(); // SIGKILL: detected and recorded, not delivered (SMTP is down)

    let inbox = crate::util::start_smtp(port);
    let second = Notifio::start(state, &cfg, false, None);
    wait_for(LIMIT, "the email after the restart", || {
        (!inbox.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // several checks of the same page
    let mails = crate::util::mails(&inbox);
    assert_eq!(mails.len(), 1, "exactly once: {mails:#?}");
    assert_eq!(mails[0].subject, "1 new listing — Lisbon");
    assert!(mails[0].text.contains(&flat.url));
    assert_eq!(crate::util::pending(state, "email"), 0);
    assert_eq!(crate::util::outbox_rows(state, "email"), 1);
    second.kill();
    portal.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_searches_sharing_a_url_get_one_message_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = portal().await;
    let port = crate::util::free_port();
    let inbox = crate::util::start_smtp(port);
    let url = portal.search_url("flats", "valencia");
    let cfg = config(
        state,
        &[("Valencia cheap", url.clone()), ("Valencia beach", url)],
        &format!("smtp://127.0.0.1:{port}"),
    );
    let notifio = Notifio::start(state, &cfg, false, None);
    wait_for(LIMIT, "both baselines", || {
        crate::util::all_baselined(state, 2).then_some(())
    })
    .await;
    let flat = portal.add_listing("flats", Some("valencia"));
    wait_for(LIMIT, "the email", || {
        (!inbox.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mails = crate::util::mails(&inbox);
    assert_eq!(mails.len(), 1, "one message for both searches: {mails:#?}");
    assert_eq!(
        mails[0].subject,
        "1 new listing — Valencia cheap, Valencia beach"
    );
    assert!(
        mails[0]
            .text
            .contains("by the searches Valencia cheap, Valencia beach"),
        "{}",
        mails[0].text
    );
    assert_eq!(mails[0].text.matches(&flat.url).count(), 1);
    // A clean stop writes the history rows ordinary checks keep in memory for up to a second.
    assert_eq!(notifio.terminate(), Some(0));
    // Single-flight: each request served both searches (one check row each per request; a
    // request in flight at the stop may have no row).
    let (a, b) = (
        crate::util::checks_of(state, "Valencia cheap").len(),
        crate::util::checks_of(state, "Valencia beach").len(),
    );
    let requests = portal.request_count("flats");
    assert_eq!(a, b, "both searches are recorded by every check");
    assert!(
        requests <= a + 1,
        "{requests} requests for {a} checks: the URL is fetched once per check"
    );
    portal.shutdown().await;
}

// ---------------------------------------------------------------- the password

/// A tiny SMTP server that offers `AUTH PLAIN LOGIN` over plain text (mailin-embedded only
/// offers AUTH after TLS, and we want the password to really cross the wire, so it can be
/// looked for everywhere else). It records the decoded credentials and accepts every message.
/// Hand-written on purpose: no embeddable SMTP crate here allows plaintext AUTH.
fn start_auth_smtp() -> (u16, crate::util::Inbox, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let creds: crate::util::Inbox = Arc::default();
    let delivered: Arc<Mutex<usize>> = Arc::default();
    let (c, d) = (creds.clone(), delivered.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (c, d) = (c.clone(), d.clone());
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut w = stream.try_clone().unwrap();
                let mut r = BufReader::new(stream);
                let b64 = |s: &str| {
                    base64::engine::general_purpose::STANDARD
                        .decode(s.trim())
                        .map(|v| String::from_utf8_lossy(&v).into_owned())
                        .unwrap_or_default()
                };
                let mut line = String::new();
                let read = |r: &mut BufReader<_>, line: &mut String| {
                    line.clear();
                    matches!(r.read_line(line), Ok(n) if n > 0)
                };
                let _ = w.write_all(b"220 auth.localhost ESMTP\r\n");
                while read(&mut r, &mut line) {
                    let cmd = line.trim_end().to_string();
                    let upper = cmd.to_ascii_uppercase();
                    let reply: &[u8] = if upper.starts_with("EHLO") {
                        b"250-auth.localhost\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME\r\n"
                    } else if upper.starts_with("AUTH PLAIN") {
                        let mut arg = cmd[10..].trim().to_string();
                        if arg.is_empty() {
                            let _ = w.write_all(b"334 \r\n");
                            read(&mut r, &mut line);
                            arg = line.trim().to_string();
                        }
                        c.lock().unwrap().push(b64(&arg).replace('\0', "|"));
                        b"235 ok\r\n"
                    } else if upper.starts_with("AUTH LOGIN") {
                        let _ = w.write_all(b"334 VXNlcm5hbWU6\r\n");
                        read(&mut r, &mut line);
                        let user = b64(&line);
                        let _ = w.write_all(b"334 UGFzc3dvcmQ6\r\n");
                        read(&mut r, &mut line);
                        c.lock().unwrap().push(format!("|{user}|{}", b64(&line)));
                        b"235 ok\r\n"
                    } else if upper.starts_with("DATA") {
                        let _ = w.write_all(b"354 go on\r\n");
                        while read(&mut r, &mut line) && line.trim_end() != "." {}
                        *d.lock().unwrap() += 1;
                        b"250 queued\r\n"
                    } else if upper.starts_with("QUIT") {
                        let _ = w.write_all(b"221 bye\r\n");
                        break;
                    } else {
                        b"250 ok\r\n"
                    };
                    if w.write_all(reply).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, creds, delivered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smtp_password_never_appears_in_output_or_the_database() {
    const PASSWORD: &str = "s3cret-Pa55-7f1e9c";
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let portal = portal().await;
    let (up, creds, delivered) = start_auth_smtp();
    let down = crate::util::free_port();
    // The address of a server that is down first (connection errors are logged and stored),
    // then the real one (the password is sent and accepted). Same state dir for both runs.
    let cfg_down = config(
        state,
        &[("Porto", portal.search_url("flats", "porto"))],
        &format!("smtp://me@127.0.0.1:{down}"),
    );
    let first = Notifio::start(state, &cfg_down, true, Some(PASSWORD));
    wait_for(LIMIT, "the baseline", || {
        crate::util::all_baselined(state, 1).then_some(())
    })
    .await;
    portal.add_listing("flats", Some("porto"));
    wait_for(LIMIT, "a failed delivery", || {
        crate::util::db(state)
            .and_then(|c| {
                c.query_row("SELECT COUNT(*) FROM outbox WHERE attempts >= 2", [], |r| {
                    r.get::<_, i64>(0)
                })
                .ok()
            })
            .filter(|n| *n >= 1)
    })
    .await;
    assert_eq!(first.terminate(), Some(0), "SIGTERM: a clean exit");

    let cfg_up = config(
        state,
        &[("Porto", portal.search_url("flats", "porto"))],
        &format!("smtp://me@127.0.0.1:{up}"),
    );
    let second = Notifio::start(state, &cfg_up, true, Some(PASSWORD));
    wait_for(LIMIT, "the delivery", || {
        (*delivered.lock().unwrap() >= 1).then_some(())
    })
    .await;
    // The password really was used: the server saw it.
    assert_eq!(
        creds.lock().unwrap().first().map(String::as_str),
        Some(format!("|me|{PASSWORD}").as_str())
    );
    assert_eq!(second.terminate(), Some(0));

    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("\0me\0{PASSWORD}"));
    let encoded_alone = base64::engine::general_purpose::STANDARD.encode(PASSWORD);
    let log = std::fs::read_to_string(state.join("run.err")).unwrap()
        + &std::fs::read_to_string(state.join("run.out")).unwrap();
    assert!(
        log.contains("notification delivery failed") && log.contains("notification delivered"),
        "the -vv log covers both the failures and the delivery:\n{}",
        &log[log.len().saturating_sub(3000)..]
    );
    assert!(log.contains("INFO"), "-vv logs below warn level:\n{log}");
    for needle in [PASSWORD, &encoded, &encoded_alone] {
        assert!(!log.contains(needle), "{needle:?} in the log output");
    }
    let bytes = crate::util::db_bytes(state);
    assert!(bytes.len() > 4096, "the database was read");
    for needle in [PASSWORD, &encoded, &encoded_alone] {
        assert!(
            !crate::util::contains_bytes(&bytes, needle.as_bytes()),
            "{needle:?} in the database files"
        );
    }
    portal.shutdown().await;
}
