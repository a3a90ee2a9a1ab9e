//! `notifio demo` and the runner shared with `notifio watch`.
//!
//! The demo shows the whole product offline: it starts the fake portal in-process on loopback
//! with two sites (one well-behaved, one that starts refusing after a while and then recovers),
//! writes an explicit demo config with short ladders (printed at start, so nothing is hidden),
//! and runs the *real* watcher — the same code path as `notifio watch` — with the dashboard
//! and the mbox notifier, narrating each event on one line.

use crate::config::{self, Config};
use crate::notify;
use crate::status::{self, StatusView};
use crate::store::Store;
use crate::watch::{AppMetrics, WatchEvent, Watcher};
use crate::web::{self, DashboardConfig, StatusSource};
use anyhow::Context as _;
use fake_portal::{Behaviour, ChallengeKind, Portal, SiteSpec};
use notifio_policy::{BackoffPolicy, SiteKey, format_duration};
use std::collections::HashMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The dashboard's view of a running watcher: status from the same database the watcher
/// writes (through a connection of its own), metrics from the fetcher and the app counters.
struct LiveStatus {
    store: Mutex<Store>,
    backoff: BackoffPolicy,
    fetcher: crate::fetch::Fetcher,
    metrics: Arc<AppMetrics>,
    /// Sites read in the browser (the watcher keeps it current across reloads).
    browser_sites: Arc<Mutex<std::collections::HashSet<String>>>,
    /// A window can be opened for the user: a display, and a browser Notifio starts itself.
    can_login: bool,
}

impl StatusSource for LiveStatus {
    fn status(&self) -> StatusView {
        let Ok(store) = self.store.lock() else {
            return StatusView::default();
        };
        match status::build(&store, crate::watch::now().as_millis(), &self.backoff) {
            // The watcher writes its retry metrics to the store at most once a second (for
            // `notifio status`); the dashboard lives beside it and reads them first-hand.
            Ok(mut view) => {
                if self.can_login
                    && let Ok(browser_sites) = self.browser_sites.lock()
                {
                    for site in &mut view.sites {
                        site.login = browser_sites.contains(&site.site);
                    }
                }
                StatusView {
                    retry: self.fetcher.metrics().snapshot(),
                    warnings: self.fetcher.metrics().warnings(),
                    ..view
                }
            }
            Err(e) => StatusView {
                warnings: vec![format!("status unavailable: {e}")],
                ..StatusView::default()
            },
        }
    }

    fn metrics(&self) -> String {
        let mut out = String::new();
        self.fetcher.metrics().encode_prometheus(&mut out);
        self.metrics.encode(&mut out);
        let pending = self
            .store
            .lock()
            .ok()
            .and_then(|store| notify::outbox::pending_count(store.conn()).ok());
        if let Some(n) = pending {
            out.push_str(&format!(
                "# HELP notifio_outbox_pending Notifications waiting to be delivered.\n# TYPE notifio_outbox_pending gauge\nnotifio_outbox_pending {n}\n"
            ));
        }
        out
    }
}

/// Something that prints the watcher's events (the demo's narrative).
pub type Narrator = Box<dyn FnMut(&WatchEvent) + Send>;

/// Runs the watcher with the notifier and the dashboard until Ctrl-C/SIGTERM (or `stop`).
///
/// # Errors
/// Start-up failures (store, dashboard address, channels) and store failures while running.
pub async fn watch_until_signal(cfg: Config, narrator: Option<Narrator>) -> anyhow::Result<()> {
    run_watcher(cfg, narrator, CancellationToken::new(), None).await
}

/// What `notifio watch` runs (watcher, notifier, dashboard) until `cancel` fires or a signal
/// arrives. `on_dashboard` receives the dashboard's bound address (port 0 picks a free one).
///
/// # Errors
/// As [`watch_until_signal`].
pub async fn run_watcher(
    cfg: Config,
    narrator: Option<Narrator>,
    cancel: CancellationToken,
    on_dashboard: Option<Box<dyn FnOnce(SocketAddr) + Send>>,
) -> anyhow::Result<()> {
    let state_dir = cfg.watch.state_dir.clone();
    // One watcher per state directory, held until this returns.
    let _lock = Store::lock(&state_dir)?;
    let dashboard = cfg.watch.dashboard;
    let token = cfg.watch.dashboard_token.clone();
    let hosts = cfg.watch.dashboard_hosts.clone();
    let senders = notify::Channels::from_config(&cfg).context("notification channels")?;
    let channels = senders.names();
    let sender = notify::Sender::new(
        Store::file_in(&state_dir),
        senders,
        cfg.retry.notify.clone(),
        cfg.backoff.clone(),
    );
    let backoff = cfg.backoff.clone();
    let config_path = cfg.path.clone();
    let can_login = crate::fetch::browser::has_display()
        && matches!(
            crate::watch::browser_for(&cfg).map(|b| b.launch),
            Ok(crate::fetch::Launch::Start { .. })
        );
    let mut watcher = Watcher::new(cfg, channels, false)?;

    // Live reload: the config file's changes (by hand or from the dashboard) and SIGHUP reach
    // the watcher as requests, applied between checks.
    let requests = watcher.requests();
    let (mut reloads, nudge) = crate::reload::follow(config_path.clone(), cancel.clone());
    let to_watcher = requests.clone();
    tokio::spawn(async move {
        while let Some(r) = reloads.recv().await {
            if to_watcher
                .send(crate::watch::Request::Reload(Box::new(r)))
                .await
                .is_err()
            {
                break;
            }
        }
    });

    // Signals: Ctrl-C and SIGTERM finish in-flight work, flush the store, exit 0.
    let signal_cancel = cancel.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        signal_cancel.cancel();
    });

    let wake = watcher.outbox_wake();
    let sender_task = tokio::spawn(sender.run(wake.clone(), cancel.clone()));
    wake.notify_one(); // deliver whatever a previous run left in the outbox

    if let Some(addr) = dashboard {
        let source = Arc::new(LiveStatus {
            store: Mutex::new(Store::open_existing(&Store::file_in(&state_dir))?),
            backoff,
            fetcher: watcher.fetcher().clone(),
            metrics: watcher.metrics(),
            browser_sites: watcher.browser_sites(),
            can_login,
        });
        let app = Arc::new(web::App::new(config_path, requests, nudge));
        let (bound, _task) = web::serve_app(
            DashboardConfig { addr, token, hosts },
            source,
            Some(app),
            cancel.clone(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        tracing::info!("dashboard on http://{bound}/");
        match on_dashboard {
            Some(f) => f(bound),
            None => eprintln!("dashboard: http://{bound}/"),
        }
    }

    let narration = narrator.map(|mut narrate| {
        let mut rx = watcher.subscribe();
        tokio::spawn(async move {
            while let Ok(ev) = rx.recv().await {
                narrate(&ev);
            }
        })
    });
    let result = watcher.run(cancel.clone()).await;
    cancel.cancel();
    drop(watcher);
    let _ = tokio::time::timeout(Duration::from_millis(400), sender_task).await;
    if let Some(n) = narration {
        n.abort();
    }
    result.map(|_| ()).map_err(Into::into)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

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
    let portal = Portal::start(vec![
        SiteSpec::new("rentals-demo"),
        SiteSpec::new("idealista-demo"),
    ])
    .await
    .context("starting the fake portal on 127.0.0.1")?;
    let friendly: HashMap<String, String> = ["rentals-demo", "idealista-demo"]
        .iter()
        .filter_map(|n| {
            SiteKey::from_url(&portal.base_url(n))
                .ok()
                .map(|k| (k.as_str().to_owned(), format!("{n} ({k})")))
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
    let toml = demo_config(&portal, &state_dir, dashboard_addr, speed);
    std::fs::write(&config_path, &toml)?;
    let cfg = config::load(&config_path)
        .map_err(|e| anyhow::anyhow!("the demo config is invalid (a bug): {e}"))?;

    println!("Notifio demo — everything runs on this machine; nothing leaves 127.0.0.1.");
    println!(
        "Fake portal: rentals-demo at {}, idealista-demo at {}",
        portal.base_url("rentals-demo"),
        portal.base_url("idealista-demo")
    );
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
        "New listings appear every {} or so. Ctrl-C to stop.\n",
        format_duration(s(12))
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
                let (site, slug) = DEMO_SEARCHES[n % DEMO_SEARCHES.len()].1;
                portal.add_listing(site, Some(slug));
                n += 1;
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
    let on_dashboard: Box<dyn FnOnce(SocketAddr) + Send> =
        Box::new(|addr| println!("Dashboard: http://{addr}/\n"));
    let result = run_watcher(cfg, Some(narrator), cancel.clone(), Some(on_dashboard)).await;
    cancel.cancel();
    adder.abort();
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
    result
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

fn demo_config(portal: &Portal, state_dir: &Path, dashboard: SocketAddr, speed: f64) -> String {
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
    for (name, (site, slug)) in DEMO_SEARCHES {
        t.push_str(&format!(
            "[[search]]\nname = {name:?}\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n",
            portal.search_url(site, slug)
        ));
    }
    t
}

fn clock() -> String {
    let secs = crate::watch::now().as_millis() / 1000;
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
                ..
            } => {
                if *baseline && new.is_empty() {
                    Some(format!(
                        "baseline for \"{}\" on {}: {listings} listings recorded silently",
                        searches.join("\", \""),
                        name(site)
                    ))
                } else if new.is_empty() {
                    None
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
                    let _ = outcome;
                    Some(s.trim_end().to_owned())
                }
            }
            WatchEvent::SiteWaiting {
                site,
                entry,
                searches,
            } => {
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
            WatchEvent::SiteCleared { site } => Some(format!(
                "{} clear: the probe succeeded; siblings resume, spaced out",
                name(site)
            )),
            WatchEvent::SessionExpired { site } => Some(format!(
                "{}: session expired — export fresh cookies",
                name(site)
            )),
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
