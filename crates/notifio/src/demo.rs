//! `notifio demo`: the whole product, offline.
//!
//! It starts the fake portal in-process on loopback with two sites (one well-behaved, one that
//! starts refusing after a while and then recovers), writes an explicit demo config with short
//! ladders (printed at start, so nothing is hidden), and hands it to the [`runner`] — exactly
//! what `notifio watch` runs, dashboard and mbox notifier included — narrating each event on
//! one line, in the words `watch` uses ([`narrate`]). Each search has the filter its name
//! promises, and one new flat is held back by one, so a newcomer sees filters at work. One
//! flat is let (it leaves the site, and the inbox shows it gone), and a second channel, a
//! webhook the portal receives, gets one digest a minute (a minute compressed by `--speed`,
//! like every duration of the demo). What is the demo's own is here: the portal, its script,
//! its config.
//!
//! [`runner`]: crate::runner
//! [`narrate`]: crate::narrate

use crate::config;
use crate::fetch::browser::FindError;
use crate::narrate::{self, Narration};
use crate::runner::{self, Hooks};
use anyhow::Context as _;
use fake_portal::{Behaviour, ChallengeKind, FakeListing, Portal, Render, SiteSpec};
use notifio_policy::{SiteKey, format_duration};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::task::JoinHandle;
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
    let portal = start_portal(browser.is_ok()).await?;
    let friendly = site_names(&portal);

    let state_dir = std::env::temp_dir().join(format!("notifio-demo-{}", std::process::id()));
    std::fs::create_dir_all(&state_dir)?;
    let dashboard_addr = dashboard_address(dashboard)?;
    let config_path = state_dir.join("demo.toml");
    let toml = demo_config(&portal, &state_dir, dashboard_addr, speed, browser.is_ok());
    std::fs::write(&config_path, &toml)?;
    let mut cfg = config::load(&config_path)
        .map_err(|e| anyhow::anyhow!("the demo config is invalid (a bug): {e}"))?;
    // A digest period is at least a minute in a config file; the demo compresses its minute
    // like every other duration, so a digest arrives within a short run.
    let digest = digest_period(speed);
    if let Some(p) = cfg.notify.channel_pacing.get_mut(DIGEST_CHANNEL) {
        p.digest = Some(digest);
    }
    introduce(&portal, &browser, &config_path, &cfg, speed);

    script_refusals(&portal, speed);
    let cancel = CancellationToken::new();
    let adder = spawn_new_listings(&portal, &cancel, s(12));
    let dropper = spawn_later(&portal, &cancel, s(30), price_drop);
    let letting = spawn_later(&portal, &cancel, s(40), let_one);
    let digests = spawn_digest_reader(&portal, &cancel, digest);
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
    let hooks = narrating_hooks(friendly, &mailbox);
    let result = runner::run(cfg, cancel.clone(), hooks).await;
    cancel.cancel();
    adder.abort();
    dropper.abort();
    letting.abort();
    digests.abort();
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

/// Starts the fake portal: its two sites, and the one read through the browser when this
/// machine has one.
async fn start_portal(with_browser: bool) -> anyhow::Result<Portal> {
    let mut sites = vec![
        SiteSpec::new("rentals-demo"),
        SiteSpec::new("idealista-demo"),
    ];
    if with_browser {
        sites.push(SiteSpec {
            render: Render::Script(Duration::from_millis(400)),
            ..SiteSpec::new(SCRIPTED_SITE)
        });
    }
    Portal::start(sites)
        .await
        .context("starting the fake portal on 127.0.0.1")
}

/// What the narration calls each of the portal's sites, by site key.
fn site_names(portal: &Portal) -> HashMap<String, String> {
    portal
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
        .collect()
}

/// The dashboard's address: `--dashboard`, or any free port when that one is taken.
fn dashboard_address(dashboard: &str) -> anyhow::Result<SocketAddr> {
    let dashboard_addr: SocketAddr = dashboard.parse().with_context(|| {
        format!("--dashboard `{dashboard}` is not an address like 127.0.0.1:7878")
    })?;
    Ok(if std::net::TcpListener::bind(dashboard_addr).is_ok() {
        dashboard_addr
    } else {
        println!("({dashboard_addr} is in use: the dashboard takes a free port instead.)");
        SocketAddr::from(([127, 0, 0, 1], 0))
    })
}

/// Says what the demo runs: the portal, the config and its ladders, the script.
fn introduce(
    portal: &Portal,
    browser: &Result<PathBuf, FindError>,
    config_path: &Path,
    cfg: &config::Config,
    speed: f64,
) {
    let s = |secs: u64| scaled(Duration::from_secs(secs), speed);
    println!("Notifio demo — everything runs on this machine; nothing leaves 127.0.0.1.");
    println!(
        "Fake portal: rentals-demo at {}, idealista-demo at {}",
        portal.base_url("rentals-demo"),
        portal.base_url("idealista-demo")
    );
    match browser {
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
    println!(
        "After {} a flat on rentals-demo is let and leaves the site: once 3 checks miss it, the \
         dashboard's inbox shows it gone. The webhook channel gets one digest every {} (the \
         config's minute, compressed ×{speed}).\n",
        format_duration(s(40)),
        format_duration(digest_period(speed))
    );
}

/// idealista-demo's script: it behaves, then answers 429, then challenge pages, then
/// recovers.
fn script_refusals(portal: &Portal, speed: f64) {
    let s = |secs: u64| scaled(Duration::from_secs(secs), speed);
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
}

/// New listings appear over time, alternating between the sites. Each fits its search's
/// filter, so each message names its search; two more are held back by a filter: an interior
/// studio by "Retiro with balcony" at first, then a duplex over the first search's budget.
fn spawn_new_listings(
    portal: &Portal,
    cancel: &CancellationToken,
    every: Duration,
) -> JoinHandle<()> {
    let portal = portal.clone();
    let cancel = cancel.clone();
    tokio::spawn(async move {
        let mut n = 0usize;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
            let searches = demo_searches(&portal);
            let search = &searches[n % searches.len()];
            portal.add_listing_with(search.site, Some(search.slug), search.fit);
            if n == 0 {
                // Early, before idealista-demo starts refusing: one flat with a balcony that
                // "Retiro with balcony" announces, one without that its filter holds back.
                let retiro = &DEMO_SEARCHES[4];
                portal.add_listing_with(retiro.site, Some(retiro.slug), retiro.fit);
                portal.add_listing_with(retiro.site, Some(retiro.slug), no_balcony);
            }
            if n == 1 {
                let first = &searches[0];
                portal.add_listing_with(first.site, Some(first.slug), too_dear_for_the_centre);
            }
            n += 1;
        }
    })
}

/// Runs `event` on the portal once `after` has passed, unless the demo ends first.
fn spawn_later(
    portal: &Portal,
    cancel: &CancellationToken,
    after: Duration,
    event: fn(&Portal),
) -> JoinHandle<()> {
    let portal = portal.clone();
    let cancel = cancel.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = tokio::time::sleep(after) => event(&portal),
        }
    })
}

/// One price drop: the newest flat of the first search within its budget gets 12% cheaper.
fn price_drop(portal: &Portal) {
    let first = &DEMO_SEARCHES[0];
    let newest = portal
        .listings(first.site, first.slug)
        .into_iter()
        .find(|l| l.price <= CENTRE_BUDGET);
    if let Some(l) = newest {
        portal.set_price(first.site, &l.id, l.price * 88 / 100 / 10 * 10);
    }
}

/// One flat is let: the third on rentals-demo's first search leaves the site (every search
/// that showed it misses it from then on).
fn let_one(portal: &Portal) {
    let first = &DEMO_SEARCHES[0];
    if let Some(l) = portal.listings(first.site, first.slug).into_iter().nth(2)
        && portal.remove_listing(first.site, &l.id)
    {
        println!(
            "{} was let and left {}: once 3 checks miss it, the inbox shows it gone",
            l.title, first.site
        );
    }
}

/// The demo's digest period: the config's minute, compressed by `speed` (at least a second).
fn digest_period(speed: f64) -> Duration {
    scaled(Duration::from_secs(60), speed).max(Duration::from_secs(1))
}

/// Tells each digest the demo's webhook channel receives (its subject).
fn spawn_digest_reader(
    portal: &Portal,
    cancel: &CancellationToken,
    period: Duration,
) -> JoinHandle<()> {
    let portal = portal.clone();
    let cancel = cancel.clone();
    tokio::spawn(async move {
        let mut told = 0;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            let bodies = portal.hooks(DIGEST_SITE, DIGEST_HOOK);
            for body in bodies.iter().skip(told) {
                let subject = serde_json::from_slice::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v["subject"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| "a message".to_owned());
                println!(
                    "webhook channel (one digest every {}) got: {subject}",
                    format_duration(period)
                );
            }
            told = bodies.len();
        }
    })
}

/// The channel that gets the demo's digests.
const DIGEST_CHANNEL: &str = "webhook";
/// The site whose `/hooks/…` the demo's webhook channel posts to, and the hook's name.
const DIGEST_SITE: &str = "rentals-demo";
const DIGEST_HOOK: &str = "digest";

/// The runner's hooks: each event narrated in the portal's site names, the mailbox named as
/// where messages went, the dashboard's address printed.
fn narrating_hooks(site_names: HashMap<String, String>, mailbox: &Path) -> Hooks {
    let narrator = narrate::narrator(Narration {
        site_names,
        delivered_to: Some(mailbox.to_path_buf()),
        quiet: false,
    });
    Hooks {
        narrator: Some(narrator),
        on_dashboard: Some(Box::new(|addr| println!("Dashboard: http://{addr}/\n"))),
    }
}

/// One demo search: its name states its filter, which its config carries; `fit` makes a new
/// flat one it lets through.
struct DemoSearch {
    name: &'static str,
    site: &'static str,
    slug: &'static str,
    /// Its filter, as `[[search]]` keys (TOML lines).
    filter: &'static str,
    /// Makes a new flat of the portal's one this search announces.
    fit: fn(&mut FakeListing),
}

/// The first search's `max_price`.
const CENTRE_BUDGET: u32 = 1200;

/// Names a new flat after `area`, keeping its kind ("2-room flat in Chamberí").
fn located(l: &mut FakeListing, area: &str) {
    let kind = l.title.split(" in ").next().unwrap_or("Flat").to_owned();
    l.title = format!("{kind} in {area}");
}

/// A flat with `rooms` rooms, so called.
fn rooms(l: &mut FakeListing, rooms: u32, area: &str) {
    l.rooms = rooms;
    l.title = format!("{rooms}-room flat in {area}");
}

/// A 3,150 EUR duplex in the centre: over the first search's budget, held back by its filter.
fn too_dear_for_the_centre(l: &mut FakeListing) {
    l.title = "Duplex in Chueca".into();
    l.rooms = 4;
    l.area = 150;
    l.price = 3150;
}

/// The title of the flat "Retiro with balcony" holds back.
const NO_BALCONY_TITLE: &str = "Interior studio in Retiro";

/// An interior studio in Retiro without a balcony: held back by "Retiro with balcony".
fn no_balcony(l: &mut FakeListing) {
    NO_BALCONY_TITLE.clone_into(&mut l.title);
    l.rooms = 1;
    l.area = 30;
    l.description = "A quiet interior studio near the park, furnished, lift.".into();
}

/// The demo's five searches; three are on the refusing site.
const DEMO_SEARCHES: [DemoSearch; 5] = [
    DemoSearch {
        name: "Madrid centre, up to 1200",
        site: "rentals-demo",
        slug: "madrid-centre",
        filter: "max_price = 1200\n",
        fit: |l| {
            located(l, "Malasaña");
            l.price = l.price.min(CENTRE_BUDGET - 50);
        },
    },
    DemoSearch {
        name: "Chamberí flats",
        site: "idealista-demo",
        slug: "chamberi",
        filter: "exclude = [\"studio\"]\n",
        fit: |l| rooms(l, 2, "Chamberí"),
    },
    DemoSearch {
        name: "Madrid, 2+ rooms",
        site: "rentals-demo",
        slug: "madrid-2-rooms",
        filter: "min_rooms = 2\n",
        fit: |l| rooms(l, l.rooms.max(2), "Tetuán"),
    },
    DemoSearch {
        name: "Salamanca under 1500",
        site: "idealista-demo",
        slug: "salamanca",
        filter: "max_price = 1499\n",
        fit: |l| {
            located(l, "Salamanca");
            l.price = l.price.min(1450);
        },
    },
    DemoSearch {
        name: "Retiro with balcony",
        site: "idealista-demo",
        slug: "retiro",
        filter: "include = [\"balcony\"]\n",
        fit: |l| {
            located(l, "Retiro");
            l.description = format!(
                "A bright home with a balcony over the park. {}",
                l.description
            );
        },
    },
];

/// The site whose listings are built by a script (only when a browser is found).
const SCRIPTED_SITE: &str = "spa-demo";
/// Its search.
const SCRIPTED_SEARCH: DemoSearch = DemoSearch {
    name: "Valencia, built by JavaScript",
    site: SCRIPTED_SITE,
    slug: "valencia",
    filter: "",
    fit: |l| located(l, "Ruzafa, Valencia"),
};

/// The searches of this demo run: the five, and the browser site's when it runs.
fn demo_searches(portal: &Portal) -> Vec<&'static DemoSearch> {
    let mut v: Vec<&'static DemoSearch> = DEMO_SEARCHES.iter().collect();
    if portal.sites().iter().any(|n| n == SCRIPTED_SITE) {
        v.push(&SCRIPTED_SEARCH);
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
         [notify]\nmailbox = {:?}\n         # A second channel, received by the fake portal: one digest a minute (the demo compresses it).\n         webhook = {{ url = {:?}, digest = \"1m\" }}\n\n",
        s(8),
        s(1),
        state_dir.display().to_string(),
        ladder(&[10, 20, 40]),
        ladder(&[15, 30]),
        ladder(&[30, 60]),
        ladder(&[5, 10, 20]),
        s(120),
        state_dir.join("notifications.mbox").display().to_string(),
        format!("{}/hooks/{DIGEST_HOOK}", portal.base_url(DIGEST_SITE)),
    );
    if with_browser {
        t.push_str(&format!(
            "[browser]\nprofile_dir = {:?}\n\n",
            state_dir.join("browser").display().to_string()
        ));
    }
    for search in demo_searches(portal) {
        t.push_str(&format!(
            "[[search]]\nname = {:?}\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n{}\n",
            search.name,
            portal.search_url(search.site, search.slug),
            search.filter,
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
