//! The runner: what `notifio watch` is, and what `notifio demo` runs on its fake portal.
//!
//! It takes the state directory (one watcher per directory), builds the notification channels
//! and their sender, the watcher, and the dashboard, then runs until a signal (Ctrl-C, SIGTERM)
//! or its token. The config file is followed (and SIGHUP heard): a valid change reaches the
//! watcher as a request it applies between checks; the dashboard edits the same file.
//! On the way out the watcher finishes and records the checks still out, and the
//! sender gets a moment to deliver what they found. Both commands go through [`run`], so the
//! demo shows exactly the product.

use crate::config::Config;
use crate::fetch::Fetcher;
use crate::notify::{self, NotifyError};
use crate::status::{self, StatusView};
use crate::store::{Holder, StateLock, Store, StoreError};
use crate::watch::{AppMetrics, WatchError, WatchEvent, Watcher};
use crate::web::{self, DashboardConfig, StatusSource};
use notifio_policy::BackoffPolicy;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long the sender may go on delivering after the watcher stopped.
const SENDER_GRACE: Duration = Duration::from_millis(400);

/// Something that hears of each watcher event (the demo's narrative).
pub type Narrator = Box<dyn FnMut(&WatchEvent) + Send>;

/// Told the dashboard's bound address once it listens (port 0 picks a free one).
pub type OnDashboard = Box<dyn FnOnce(SocketAddr) + Send>;

/// What a caller may add to a run; `notifio watch` adds nothing.
#[derive(Default)]
pub struct Hooks {
    /// Hears every watcher event.
    pub narrator: Option<Narrator>,
    /// Told where the dashboard listens; without it the address goes to stderr.
    pub on_dashboard: Option<OnDashboard>,
}

/// Why a run could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The state directory is held by another watcher, or its database cannot be used.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A notification channel cannot be set up (a config problem, but for its database).
    #[error("notification channels: {0}")]
    Channels(#[source] NotifyError),
    /// The watcher could not start, or a store failure stopped it.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// The dashboard cannot listen where the config says.
    #[error("{0}")]
    Dashboard(String),
}

/// Runs watcher, sender and dashboard until Ctrl-C or SIGTERM, or until `cancel` fires.
///
/// # Errors
/// Start-up failures (state directory, channels, watcher, dashboard address) and store
/// failures while running.
pub async fn run(cfg: Config, cancel: CancellationToken, hooks: Hooks) -> Result<(), RunError> {
    // Signals: Ctrl-C and SIGTERM finish in-flight work, flush the store, exit 0 (and stop a
    // wait for the state directory).
    let signal_cancel = cancel.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        signal_cancel.cancel();
    });
    let state_dir = cfg.watch.state_dir.clone();
    // One watcher per state directory, held until this returns.
    let Some(_lock) = take_state_dir(&state_dir, &cancel).await? else {
        return Ok(()); // stopped while waiting for a `check` to end
    };
    let channels = notify::Channels::from_config(&cfg).map_err(RunError::Channels)?;
    let names = channels.names();
    let sender = notify::Sender::new(
        Store::file_in(&state_dir),
        channels,
        cfg.retry.notify.clone(),
        cfg.backoff.clone(),
    );
    let dashboard = cfg.watch.dashboard.map(|addr| DashboardConfig {
        addr,
        token: cfg.watch.dashboard_token.clone(),
        hosts: cfg.watch.dashboard_hosts.clone(),
    });
    let backoff = cfg.backoff.clone();
    let config_path = cfg.path.clone();
    let cfg_digest = cfg.text_digest;
    // "Open in browser" needs a display and a browser Notifio starts itself.
    let can_login = crate::fetch::browser::has_display()
        && matches!(
            crate::watch::browser_for(&cfg).map(|b| b.launch),
            Ok(crate::fetch::Launch::Start { .. })
        );
    let mut watcher = Watcher::new(cfg, names, false)?;

    // Live reload: the config file's changes (by hand or from the dashboard) and SIGHUP reach
    // the watcher as requests, applied between checks.
    let requests = watcher.requests();
    let (mut reloads, nudge) =
        crate::reload::follow(config_path.clone(), cfg_digest, cancel.clone());
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

    let wake = watcher.outbox_wake();
    let sender_task = tokio::spawn(sender.run(wake.clone(), cancel.clone()));
    wake.notify_one(); // deliver whatever a previous run left in the outbox

    if let Some(dashboard) = dashboard {
        let source = Arc::new(LiveStatus {
            store: Mutex::new(Store::open_existing(&Store::file_in(&state_dir))?),
            backoff,
            fetcher: watcher.fetcher().clone(),
            metrics: watcher.metrics(),
            browser_sites: watcher.browser_sites(),
            can_login,
        });
        let app = Arc::new(web::App::new(
            config_path,
            requests,
            nudge,
            Store::file_in(&state_dir),
        ));
        let (bound, _task) = web::serve_app(dashboard, source, Some(app), cancel.clone())
            .await
            .map_err(|e| RunError::Dashboard(e.to_string()))?;
        tracing::info!("dashboard on http://{bound}/");
        match hooks.on_dashboard {
            Some(f) => f(bound),
            None => eprintln!("dashboard: http://{bound}/"),
        }
    }

    let narration = hooks.narrator.map(|mut narrate| {
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
    let _ = tokio::time::timeout(SENDER_GRACE, sender_task).await;
    if let Some(n) = narration {
        n.abort();
    }
    result.map(drop).map_err(Into::into)
}

/// How often a watcher waiting for a `check`'s pass to end tries the lock again.
const LOCK_RETRY: Duration = Duration::from_millis(200);

/// The state directory's lock for this watcher. A `notifio check` holding it ends after its
/// pass, so it is waited for (said once on stderr); another watcher holding it is an error.
/// `None` when `cancel` fired while waiting.
async fn take_state_dir(
    state_dir: &std::path::Path,
    cancel: &CancellationToken,
) -> Result<Option<StateLock>, RunError> {
    let mut told = false;
    loop {
        match Store::lock(state_dir, Holder::Watch) {
            Ok(lock) => return Ok(Some(lock)),
            Err(StoreError::Locked {
                by: Holder::Check,
                pid,
                ..
            }) => {
                if !told {
                    let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
                    eprintln!("waiting for `notifio check`{pid} to finish its pass…");
                    told = true;
                }
                tokio::select! {
                    () = cancel.cancelled() => return Ok(None),
                    () = tokio::time::sleep(LOCK_RETRY) => {}
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The dashboard's view of a running watcher: status from the same database the watcher
/// writes (through a connection of its own), metrics from the fetcher and the app counters.
struct LiveStatus {
    store: Mutex<Store>,
    backoff: BackoffPolicy,
    fetcher: Fetcher,
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
        match status::build(&store, crate::clock::now().as_millis(), &self.backoff) {
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
                    watcher: status::WatcherStatus {
                        running: true,
                        pid: Some(std::process::id()),
                        check_running: false,
                    },
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
        let pending = self
            .store
            .lock()
            .ok()
            .and_then(|store| notify::outbox::pending_count(store.conn()).ok());
        exposition(self.fetcher.metrics(), &self.metrics, pending)
    }
}

/// `/metrics`: the fetcher's metrics, the app's counters and the outbox in one registry, so
/// one OpenMetrics exposition with its `# EOF` last. Built per scrape (a handful of shared
/// handles), since the outbox figure is read from the database then.
fn exposition(
    fetch: &crate::fetch::FetchMetrics,
    app: &Arc<AppMetrics>,
    outbox_pending: Option<u64>,
) -> String {
    use prometheus_client::metrics::gauge::Gauge;
    let mut registry = prometheus_client::registry::Registry::with_prefix("notifio");
    fetch.register(&mut registry);
    app.register(&mut registry);
    if let Some(n) = outbox_pending {
        let gauge = Gauge::<i64>::default();
        gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
        registry.register(
            "outbox_pending",
            "Notifications waiting to be delivered",
            gauge,
        );
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
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
