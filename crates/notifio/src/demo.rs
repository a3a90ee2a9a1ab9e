//! `notifio demo`: the whole product, offline.
//!
//! It starts the fake portal in-process on loopback with two sites (one well-behaved, one that
//! starts refusing after a while and then recovers), writes an explicit demo config with short
//! ladders (printed at start, so nothing is hidden), and hands it to the [`runner`] — exactly
//! what `notifio watch` runs, dashboard and mbox notifier included — narrating each event on
//! one line. What is the demo's own is here: the portal, its script, its config, its words.
//!
//! [`runner`]: crate::runner

use crate::config;
use crate::runner::{self, Hooks, Narrator};
use crate::watch::WatchEvent;
use anyhow::Context as _;
use fake_portal::{Behaviour, ChallengeKind, Portal, Render, SiteSpec};
use notifio_policy::{Reaction, SiteKey, format_duration};
use std::collections::HashMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn scaled(d: Duration, speed: f64) -> Duration {
    Duration::from_millis(((d.as_millis() as f64) / speed).round().max(1.0) as u64)
}

fn dur(d: Duration) -> String {
    // Config durations are written in ms when compressed, so any speed factor is exact.
    format!("\"{}ms\"", d.as_millis())
}

/// `notifio demo`.
///
/// # Errors
/// When the portal, config or watcher cannot start.
pub async fn run(speed: f64, duration: Option<f64>, dashboard: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        speed.is_finite() && speed > 0.0,
        "--speed must be a positive number, e.g. 1 or 4"
    );
    let s = |secs: u64| scaled(Duration::from_secs(secs), speed);
    // A third site builds its listings with JavaScript: it is read in the browser, when this
    // machine has one (NOTIFIO_BROWSER or [browser] executable's search; `none` = no browser).
    let browser = crate::fetch::browser::find_executable(
        config::Environment::from_process().browser.as_deref(),
        std::env::var_os("PATH"),
    );
    let mut sites = vec![
        SiteSpec::new("rentals-demo"),
        SiteSpec::new("idealista-demo"),
    ];
    if browser.is_ok() {
        sites.push(SiteSpec {
            render: Render::Script(Duration::from_millis(400)),
            ..SiteSpec::new(SCRIPTED_SITE)
        });
    }
    let portal = Portal::start(sites)
        .await
        .context("starting the fake portal on 127.0.0.1")?;
    let friendly: HashMap<String, String> = portal
        .sites()
        .iter()
        .filter_map(|n| {
            SiteKey::from_url(&portal.base_url(n)).ok().map(|k| {
                let how = if n == SCRIPTED_SITE {
                    ", read through the browser"
                } else {
                    ""
                };
                (k.as_str().to_owned(), format!("{n} ({k}{how})"))
            })
        })
        .collect();

    let state_dir = std::env::temp_dir().join(format!("notifio-demo-{}", std::process::id()));
    std::fs::create_dir_all(&state_dir)?;
    let dashboard_addr: SocketAddr = dashboard.parse().with_context(|| {
        format!("--dashboard `{dashboard}` is not an address like 127.0.0.1:7878")
    })?;
    let dashboard_addr = if std::net::TcpListener::bind(dashboard_addr).is_ok() {
        dashboard_addr
    } else {
        SocketAddr::from(([127, 0, 0, 1], 0))
    };
    let config_path = state_dir.join("demo.toml");
    let toml = demo_config(&portal, &state_dir, dashboard_addr, speed, browser.is_ok());
    std::fs::write(&config_path, &toml)?;
    let cfg = config::load(&config_path)
        .map_err(|e| anyhow::anyhow!("the demo config is invalid (a bug): {e}"))?;

    println!("Notifio demo — everything runs on this machine; nothing leaves 127.0.0.1.");
    println!(
        "Fake portal: rentals-demo at {}, idealista-demo at {}",
        portal.base_url("rentals-demo"),
        portal.base_url("idealista-demo")
    );
    match &browser {
        Ok(exe) => println!(
            "{SCRIPTED_SITE} at {} builds its listings with JavaScript: read through the browser ({}).",
            portal.base_url(SCRIPTED_SITE),
            exe.display()
        ),
        Err(e) => println!(
            "Skipped the site read through the browser: {e}. Install Chromium (or Chrome, Edge, \
             Brave) to see it; everything else works without one."
        ),
    }
    println!(
        "Demo config ({}), time compressed ×{speed}:",
        config_path.display()
    );
    println!(
        "  interval {}, spacing {}; ladders shortened for the demo:",
        format_duration(cfg.watch.interval),
        format_duration(cfg.watch.spacing)
    );
    for kind in notifio_policy::RefusalKind::ALL {
        println!(
            "    {:<13} {}",
            kind.as_str(),
            cfg.backoff.describe_ladder(kind)
        );
    }
    println!(
        "Script: idealista-demo behaves for {}, then answers 429 (Retry-After {}), then challenge pages, then recovers.",
        format_duration(s(45)),
        format_duration(s(20))
    );
    println!(
        "New listings appear every {} or so; after {} one of them on rentals-demo gets cheaper. Ctrl-C to stop.\n",
        format_duration(s(12)),
        format_duration(s(30))
    );

    portal.set_behaviour(
        "idealista-demo",
        Behaviour::Script(vec![
            (Duration::ZERO, Behaviour::Normal),
            (
                s(45),
                Behaviour::RateLimited {
                    retry_after: Some(s(20).as_secs().max(1).to_string()),
                },
            ),
            (s(75), Behaviour::Challenge(ChallengeKind::Cloudflare, 403)),
            (s(110), Behaviour::Normal),
        ]),
    );
    let cancel = CancellationToken::new();
    // New listings appear over time, alternating between the sites.
    let adder = {
        let portal = portal.clone();
        let cancel = cancel.clone();
        let every = s(12);
        tokio::spawn(async move {
            let mut n = 0usize;
            loop {
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(every) => {}
                }
                // Each new flat matches one search, so each message names its search.
                let searches = demo_searches(&portal);
                let (site, slug) = searches[n % searches.len()].1;
                portal.add_listing(site, Some(slug));
                n += 1;
            }
        })
    };
    // One price drop: the newest flat of the first search gets 12% cheaper.
    let dropper = {
        let portal = portal.clone();
        let cancel = cancel.clone();
        let after = s(30);
        tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(after) => {}
            }
            let (site, slug) = DEMO_SEARCHES[0].1;
            if let Some(l) = portal.listings(site, slug).first() {
                portal.set_price(site, &l.id, l.price * 88 / 100 / 10 * 10);
            }
        })
    };
    if let Some(secs) = duration {
        let stop = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(secs.max(0.0))).await;
            stop.cancel();
        });
    }
    let mailbox = cfg
        .notify
        .mailbox
        .clone()
        .unwrap_or_else(|| state_dir.join("notifications.mbox"));
    let narrator = narrator(friendly, mailbox.clone());
    let hooks = Hooks {
        narrator: Some(narrator),
        on_dashboard: Some(Box::new(|addr| println!("Dashboard: http://{addr}/\n"))),
    };
    let result = runner::run(cfg, cancel.clone(), hooks).await;
    cancel.cancel();
    adder.abort();
    dropper.abort();
    portal.shutdown().await;
    println!(
        "\nStopped. State: {}  Mailbox: {}",
        state_dir.display(),
        mailbox.display()
    );
    println!(
        "Inspect it with: notifio status --config {}",
        config_path.display()
    );
    Ok(result?)
}

/// The demo's five searches: (name, (site, search slug)); three are on the refusing site.
const DEMO_SEARCHES: [(&str, (&str, &str)); 5] = [
    (
        "Madrid centre, up to 1200",
        ("rentals-demo", "madrid-centre"),
    ),
    ("Chamberí flats", ("idealista-demo", "chamberi")),
    ("Madrid, 2+ rooms", ("rentals-demo", "madrid-2-rooms")),
    ("Salamanca under 1500", ("idealista-demo", "salamanca")),
    ("Retiro with balcony", ("idealista-demo", "retiro")),
];

/// The site whose listings are built by a script (only when a browser is found).
const SCRIPTED_SITE: &str = "spa-demo";
/// Its search.
const SCRIPTED_SEARCH: (&str, (&str, &str)) =
    ("Valencia, built by JavaScript", (SCRIPTED_SITE, "valencia"));

/// The searches of this demo run: the five, and the browser site's when it runs.
fn demo_searches(portal: &Portal) -> Vec<(&'static str, (&'static str, &'static str))> {
    let mut v = DEMO_SEARCHES.to_vec();
    if portal.sites().iter().any(|n| n == SCRIPTED_SITE) {
        v.push(SCRIPTED_SEARCH);
    }
    v
}

fn demo_config(
    portal: &Portal,
    state_dir: &Path,
    dashboard: SocketAddr,
    speed: f64,
    with_browser: bool,
) -> String {
    let s = |secs: u64| dur(scaled(Duration::from_secs(secs), speed));
    let ladder = |v: &[u64]| v.iter().map(|x| s(*x)).collect::<Vec<_>>().join(", ");
    let mut t = format!(
        "# Notifio demo config: short ladders and intervals so the whole story fits in a few minutes.\n\
         [watch]\ninterval = {}\nspacing = {}\nconcurrency = 4\nstate_dir = {:?}\ndashboard = \"{dashboard}\"\n\n\
         [backoff]\nchallenge = [{}]\nrate_limited = [{}]\ndenied = [{}]\nerror = [{}]\nmax_wait = {}\n\n\
         [notify]\nmailbox = {:?}\n\n",
        s(8),
        s(1),
        state_dir.display().to_string(),
        ladder(&[10, 20, 40]),
        ladder(&[15, 30]),
        ladder(&[30, 60]),
        ladder(&[5, 10, 20]),
        s(120),
        state_dir.join("notifications.mbox").display().to_string(),
    );
    if with_browser {
        t.push_str(&format!(
            "[browser]\nprofile_dir = {:?}\n\n",
            state_dir.join("browser").display().to_string()
        ));
    }
    for (name, (site, slug)) in demo_searches(portal) {
        t.push_str(&format!(
            "[[search]]\nname = {name:?}\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n",
            portal.search_url(site, slug)
        ));
    }
    // Every site says how it is read: the demo works on a machine without a browser.
    for name in portal.sites() {
        let fetch = if name == SCRIPTED_SITE {
            "browser"
        } else {
            "http"
        };
        t.push_str(&format!(
            "[site.{:?}]\nfetch = \"{fetch}\"\n\n",
            portal.base_url(&name).trim_start_matches("http://")
        ));
    }
    t
}

fn clock() -> String {
    let secs = crate::clock::now().as_millis() / 1000;
    format!(
        "{:02}:{:02}:{:02}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60
    )
}

fn at(ms: u64) -> String {
    let secs = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60
    )
}

fn narrator(names: HashMap<String, String>, mailbox: PathBuf) -> Narrator {
    let name = move |site: &SiteKey| {
        names
            .get(site.as_str())
            .cloned()
            .unwrap_or_else(|| site.to_string())
    };
    Box::new(move |ev| {
        let line = match ev {
            WatchEvent::CheckStarted {
                site,
                searches,
                probe: true,
            } => Some(format!(
                "probe sent to {}: \"{}\" goes first; its siblings stay parked",
                name(site),
                searches.join("\", \"")
            )),
            WatchEvent::CheckStarted { .. } => None,
            WatchEvent::CheckDone {
                site,
                searches,
                outcome,
                listings,
                new,
                baseline,
                price_changes,
                ..
            } => {
                if *baseline && new.is_empty() {
                    Some(format!(
                        "baseline for \"{}\" on {}: {listings} listings recorded silently",
                        searches.join("\", \""),
                        name(site)
                    ))
                } else {
                    let mut s = String::new();
                    for l in new {
                        let price = l
                            .price
                            .map(|p| format!(", {p:.0} {}", l.currency.as_deref().unwrap_or("")))
                            .unwrap_or_default();
                        s.push_str(&format!(
                            "new listing on {} for \"{}\": {}{price}  → {}\n",
                            name(site),
                            searches.join("\", \""),
                            l.title.as_deref().unwrap_or(&l.id),
                            mailbox.display()
                        ));
                    }
                    // The demo's searches announce every drop (no min_drop) and no rise.
                    for c in price_changes.iter().filter(|c| c.is_drop()) {
                        s.push_str(&format!(
                            "price dropped on {} for \"{}\": listing {}, {}  → {}\n",
                            name(site),
                            searches.join("\", \""),
                            c.id,
                            crate::notify::message::price_change(c)
                                .trim_start_matches("Price dropped: "),
                            mailbox.display()
                        ));
                    }
                    let _ = outcome;
                    (!s.is_empty()).then(|| s.trim_end().to_owned())
                }
            }
            WatchEvent::Reaction(Reaction::SiteWaiting {
                site,
                entry,
                searches,
            }) => {
                let ra = entry
                    .retry_after
                    .map(|d| {
                        format!(
                            ", Retry-After {}",
                            format_duration(Duration::from_secs(d.as_secs()))
                        )
                    })
                    .unwrap_or_default();
                Some(format!(
                    "{} refused ({}{ra}): all {searches} searches wait until {} (rung {})",
                    name(site),
                    entry.kind,
                    at(entry.next_retry_at.as_millis()),
                    entry.failures
                ))
            }
            WatchEvent::Reaction(Reaction::SiteCleared { site, .. }) => Some(format!(
                "{} clear: the probe succeeded; siblings resume, spaced out",
                name(site)
            )),
            WatchEvent::Reaction(Reaction::SessionExpired { site }) => Some(format!(
                "{}: session expired — export fresh cookies",
                name(site)
            )),
            WatchEvent::Reaction(Reaction::SearchGone { .. }) => None,
        };
        if let Some(line) = line {
            let mut out = std::io::stdout().lock();
            for l in line.lines() {
                let _ = writeln!(out, "{} {l}", clock());
            }
            let _ = out.flush();
        }
    })
}
