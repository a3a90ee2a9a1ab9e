//! Detection latency, end to end (issue 4): from a listing appearing on the fake portal to a
//! real SMTP server (mailin-embedded) on 127.0.0.1 receiving the email that names it.
//!
//! Runs the real `notifio watch` binary as a child process (the path users run), adds listings
//! one at a time at random moments (gaps uniform in 0.6–1.4 × interval, so their phase against
//! the checks is random) and prints p50/p90/p99/max against the target
//! `interval + spacing × searches-on-site + 1 s`. A timed benchmark, not a test: `harness = false`.
//!
//! ```text
//! cargo bench -p notifio --bench latency                          # 100 listings, interval 5 s
//! cargo bench -p notifio --bench latency -- --interval 1 --listings 50   # compressed
//! ```

use fake_portal::{Portal, SiteSpec};
use rand::Rng as _;
use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Emails as they arrived: (when, raw message).
type Inbox = Arc<Mutex<Vec<(Instant, String)>>>;

#[derive(Clone, Default)]
struct Capture {
    inbox: Inbox,
    current: Vec<u8>,
}

impl mailin_embedded::Handler for Capture {
    fn data_start(&mut self, _: &str, _: &str, _: bool, _: &[String]) -> mailin_embedded::Response {
        self.current.clear();
        mailin_embedded::response::OK
    }
    fn data(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.current.extend_from_slice(buf);
        Ok(())
    }
    fn data_end(&mut self) -> mailin_embedded::Response {
        let msg = String::from_utf8_lossy(&std::mem::take(&mut self.current)).into_owned();
        if let Ok(mut v) = self.inbox.lock() {
            v.push((Instant::now(), msg));
        }
        mailin_embedded::response::OK
    }
}

struct Args {
    interval: f64,
    spacing: f64,
    listings: usize,
    searches: usize,
}

fn args() -> Args {
    let mut a = Args {
        interval: 5.0,
        spacing: 2.0,
        listings: 100,
        searches: 3,
    };
    let argv: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < argv.len() {
        let v = argv.get(i + 1).and_then(|s| s.parse::<f64>().ok());
        match (argv[i].as_str(), v) {
            ("--interval", Some(v)) => a.interval = v,
            ("--spacing", Some(v)) => a.spacing = v,
            ("--listings", Some(v)) => a.listings = v as usize,
            ("--searches", Some(v)) => a.searches = (v as usize).max(1),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() {
    let a = args();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let portal = rt
        .block_on(Portal::start(vec![SiteSpec::new("latency")]))
        .unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let smtp_port = listener.local_addr().unwrap().port();
    let capture = Capture::default();
    let inbox = capture.inbox.clone();
    let mut server = mailin_embedded::Server::new(capture);
    server
        .with_name("bench.localhost")
        .with_num_threads(2)
        .with_tcp_listener(listener);
    std::thread::spawn(move || {
        let _ = server.serve();
    });

    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (1..=a.searches).map(|i| format!("s{i}")).collect();
    let mut cfg = format!(
        "[watch]\ninterval = \"{}ms\"\nspacing = \"{}ms\"\nconcurrency = 4\nstate_dir = {:?}\n\
         dashboard = false\n\n[notify]\nemail = {{ to = \"me@example.com\", from = \
         \"notifio@localhost\", smtp = \"smtp://127.0.0.1:{smtp_port}\" }}\n\n",
        (a.interval * 1000.0) as u64,
        (a.spacing * 1000.0) as u64,
        dir.path().join("state").display().to_string(),
    );
    for n in &names {
        cfg.push_str(&format!(
            "[[search]]\nname = {n:?}\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n",
            portal.search_url("latency", n)
        ));
    }
    let cfg_path = dir.path().join("notifio.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(["watch", "--config"])
        .arg(&cfg_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let bound = a.interval + a.spacing * a.searches as f64 + 1.0;
    eprintln!(
        "latency: {} listings, interval {} s, spacing {} s, {} searches on the site (target p99 ≤ {bound:.1} s)",
        a.listings, a.interval, a.spacing, a.searches
    );
    // Baselines first: every search checked once (silently).
    std::thread::sleep(Duration::from_secs_f64(bound + 1.0));

    let mut rng = rand::rng();
    let mut added: HashMap<String, Instant> = HashMap::new();
    let mut order = Vec::new();
    for i in 0..a.listings {
        let gap = a.interval * rng.random_range(0.6..1.4);
        std::thread::sleep(Duration::from_secs_f64(gap));
        let l = portal.add_listing("latency", Some(&names[i % names.len()]));
        added.insert(l.id.clone(), Instant::now());
        order.push(l.id);
        if (i + 1) % 10 == 0 {
            let got = inbox.lock().map(|v| v.len()).unwrap_or(0);
            eprintln!(
                "  {}/{} listings added, {got} emails so far",
                i + 1,
                a.listings
            );
        }
    }
    // Wait for the stragglers (bounded).
    let deadline = Instant::now() + Duration::from_secs_f64(bound * 3.0 + 5.0);
    let mut latencies: HashMap<String, f64> = HashMap::new();
    loop {
        let mails = inbox.lock().map(|v| v.clone()).unwrap_or_default();
        for (at, raw) in &mails {
            // Undo quoted-printable soft line breaks so an id split across lines is found.
            let text = raw.replace("=\r\n", "").replace("=\n", "");
            for id in &order {
                if !latencies.contains_key(id) && text.contains(id.as_str()) {
                    let t0 = added[id];
                    latencies.insert(id.clone(), at.saturating_duration_since(t0).as_secs_f64());
                }
            }
        }
        if latencies.len() == order.len() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    rt.block_on(portal.shutdown());

    let mut v: Vec<f64> = latencies.values().copied().collect();
    v.sort_by(f64::total_cmp);
    let emails = inbox.lock().map(|v| v.len()).unwrap_or(0);
    let p99 = percentile(&v, 99.0);
    println!(
        "latency over {} listings ({} emails): p50 {:.2} s, p90 {:.2} s, p99 {:.2} s, max {:.2} s, min {:.2} s; missing {}",
        v.len(),
        emails,
        percentile(&v, 50.0),
        percentile(&v, 90.0),
        p99,
        v.last().copied().unwrap_or(f64::NAN),
        v.first().copied().unwrap_or(f64::NAN),
        order.len() - v.len()
    );
    println!(
        "target p99 ≤ interval + spacing × searches + 1 s = {bound:.1} s: {}",
        if p99 <= bound && v.len() == order.len() {
            "met"
        } else {
            "NOT met"
        }
    );
}
