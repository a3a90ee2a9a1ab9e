//! The watcher: one timer feeding the pure scheduler (docs/architecture.md#scheduling), quinn's `drive_timer` shape.
//!
//! It asks the scheduler what is due, starts those checks as tasks, sleeps until the
//! scheduler's next deadline or until a check finishes, and feeds outcomes back. There is no
//! task or timer per search. Each finished check is recorded in one store transaction, and every
//! registry change is written to the store *before* the next request is issued, so a crash right
//! after a refusal cannot lose it. `notifio check` runs the same watcher for exactly one pass, so
//! both commands share one code path and one state.
//!
//! In parts, each the home of one concern:
//! - `setup`: from the config to a running watcher (profiles, sessions, the store's plan);
//! - `driver`: the loop: what is due, what is slow, when to wake, shutdown;
//! - `check`: one check as a task: fetch its page, classify it, extract its listings;
//! - `record`: what a finished check writes, in one transaction, and what it sets off;
//! - `journal`: what the store holds and what it is still owed (rows kept back a second);
//! - `pass`: `notifio check`'s one answer per search;
//! - `apply`: what the watcher is asked between checks (a reloaded config, a preview, a login
//!   window).

mod apply;
mod budget;
mod check;
mod driver;
mod journal;
mod pass;
mod record;
mod setup;

pub use apply::{PreviewResult, Request, field_of};
pub use budget::{PLAN_META, PlanView, SearchPlan, SitePlan, budget_hints, budget_text};
pub use setup::browser_for;

use crate::config::Config;
use crate::fetch::Fetcher;
use crate::listing::Listing;
use crate::store::{PageMemo, Store};
use check::Check;
use journal::Journal;
use notifio_policy::{CheckId, Outcome, Reaction, Scheduler, SearchId, SiteKey};
use setup::Searches;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

/// After this long refused, the user is told once per episode.
pub const BLOCKED_ALERT_AFTER: Duration = Duration::from_secs(30 * 60);

/// Something the watcher did, for logs, the demo's narrative and `check`'s progress bar.
#[derive(Clone, Debug)]
pub enum WatchEvent {
    /// A check started.
    CheckStarted {
        /// Site.
        site: SiteKey,
        /// Search names.
        searches: Vec<String>,
        /// Whether it is the single probe after a wait.
        probe: bool,
    },
    /// A check finished.
    CheckDone {
        /// Site.
        site: SiteKey,
        /// Search names.
        searches: Vec<String>,
        /// Outcome.
        outcome: Outcome,
        /// HTTP status.
        status: Option<u16>,
        /// Listings on the page.
        listings: usize,
        /// New listings that one of the searches' filters lets through (empty for a
        /// baseline).
        new: Vec<Listing>,
        /// New listings that none of the searches' filters lets through: recorded, never
        /// announced (empty for a baseline).
        held_back: Vec<Listing>,
        /// Whether this was a silent baseline.
        baseline: bool,
        /// Known listings whose price changed.
        price_changes: Vec<crate::price::PriceChange>,
        /// Those listings as the page shows them now (their titles, for a narrator).
        price_changed: Vec<Listing>,
    },
    /// What the scheduler made of a check for its site or searches (a site waiting, clear
    /// again, its session expired, a search gone), sent before the check's `CheckDone`.
    Reaction(Reaction),
}

/// Counters the dashboard's `/metrics` shows beside the fetcher's.
#[derive(Debug, Default)]
pub struct AppMetrics {
    /// Checks by outcome, as reported (`Unchanged` and `Held` count as `Ok`).
    pub checks: std::sync::Mutex<HashMap<Outcome, u64>>,
    /// New listings found.
    pub listings_found: AtomicU64,
    /// Checks in flight.
    pub in_flight: AtomicU64,
}

impl AppMetrics {
    /// Registers these counters in the app's `notifio` registry (`notifio_checks_total`,
    /// `notifio_listings_found_total`, `notifio_checks_in_flight`), read at each encoding.
    pub fn register(self: &Arc<Self>, registry: &mut prometheus_client::registry::Registry) {
        registry.register_collector(Box::new(AppCollector(Arc::clone(self))));
    }
}

/// [`AppMetrics`] as prometheus-client encodes them. A collector rather than
/// prometheus-client's own counters: the watcher keeps them as plain atomics and a map it
/// updates as each check is recorded, and the collector reads them at each scrape.
#[derive(Debug)]
struct AppCollector(Arc<AppMetrics>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

impl prometheus_client::collector::Collector for AppCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        // Every outcome, 0 until one is seen: a series exists from the start (and a family
        // is never empty, which some exposition parsers refuse).
        let checks: Vec<(&'static str, u64)> = {
            let map = self
                .0
                .checks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Outcome::REPORTED
                .iter()
                .map(|o| (o.as_str(), map.get(o).copied().unwrap_or(0)))
                .collect()
        };
        let mut family = encoder.encode_descriptor(
            "checks",
            "Checks by outcome",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (outcome, n) in checks {
            ConstCounter::new(n).encode(family.encode_family(&OutcomeLabel { outcome })?)?;
        }
        let found = ConstCounter::new(self.0.listings_found.load(Ordering::Relaxed));
        found.encode(encoder.encode_descriptor(
            "listings_found",
            "New listings found",
            None,
            found.metric_type(),
        )?)?;
        let in_flight = ConstGauge::new(
            i64::try_from(self.0.in_flight.load(Ordering::Relaxed)).unwrap_or(i64::MAX),
        );
        in_flight.encode(encoder.encode_descriptor(
            "checks_in_flight",
            "Checks in flight",
            None,
            in_flight.metric_type(),
        )?)?;
        Ok(())
    }
}

/// How long `check` runs: until every search was checked once or is parked on a waiting site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `notifio watch`: forever (until cancelled).
    Forever,
    /// `notifio check`: one pass.
    OnePass,
}

pub use pass::{PassResult, Reported};

/// Everything a running watcher needs.
pub struct Watcher {
    config: Config,
    store: Store,
    scheduler: Scheduler,
    fetcher: Fetcher,
    /// The configured searches as the watcher knows them, and the channels.
    searches: Searches,
    /// Each search's last good page (mirrors the store; see [`PageMemo`]).
    pages: HashMap<SearchId, PageMemo>,
    /// What the store holds, and the rows it is still owed.
    journal: Journal,
    /// A one-pass run that owns the state directory holds its lock for the pass.
    _lock: Option<crate::store::StateLock>,
    /// What the checks taught about arrival rates, and each budgeted site's plan.
    plans: budget::Plans,
    /// Checks out now.
    running: HashMap<CheckId, Check>,
    /// How long a check may take before it stops counting against `concurrency`.
    slow_after: Duration,
    mode: Mode,
    outbox_wake: Arc<Notify>,
    events: broadcast::Sender<WatchEvent>,
    metrics: Arc<AppMetrics>,
    /// Live config, previews and login windows ([`Watcher::requests`]).
    live: apply::Live,
}

/// Why the watcher could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A search's site profile could not be built.
    #[error("search `{search}`: {source}")]
    Profile {
        /// The search.
        search: String,
        /// Why.
        source: crate::extract::ProfileError,
    },
    /// A cookies file could not be used.
    #[error("{0}")]
    Cookies(String),
    /// A site that needs a logged-in session has no (usable) cookies configured.
    #[error(
        "search `{search}` is on {site}, which needs your logged-in session: {problem}\n  hint: export your cookies as cookies.txt (Netscape format) and add\n    [site.\"{site}\"]\n    cookies = \"~/.config/notifio/{site}.cookies.txt\""
    )]
    NeedsSession {
        /// The search.
        search: String,
        /// Its site.
        site: String,
        /// What is missing.
        problem: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot start the HTTP client: {0}")]
    Fetch(String),
    /// A search needs the browser and there is none to use.
    #[error("{0}")]
    Browser(crate::config::ConfigError),
}

impl Watcher {
    /// Opens the store, restores the registry, and builds the scheduler for `config`.
    ///
    /// # Errors
    /// Store, profile, cookies or client failures.
    pub fn new(
        config: Config,
        channels: Vec<crate::notify::ChannelName>,
        force: bool,
    ) -> Result<Self, WatchError> {
        Self::build(config, channels, force, Mode::Forever)
    }

    /// A watcher for one pass (`notifio check`): every search is due at once, whatever the
    /// stored plan says, and none is due again within the pass. Waiting sites still wait.
    ///
    /// # Errors
    /// Store, profile, cookies or client failures.
    pub fn for_one_pass(
        config: Config,
        channels: Vec<crate::notify::ChannelName>,
        force: bool,
    ) -> Result<Self, WatchError> {
        Self::build(config, channels, force, Mode::OnePass)
    }

    /// Forgets every remembered page (`check --fresh`): each page is fetched in full and read
    /// again, and its listings are reported even if nothing changed.
    pub fn forget_pages(&mut self) {
        for s in &self.config.searches {
            self.fetcher.set_validators(&s.url, None, None);
        }
        self.pages.clear();
    }

    /// Subscribes to the event stream (the demo narrates it).
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<WatchEvent> {
        self.events.subscribe()
    }

    /// Wakes the outbox sender when a notification is enqueued.
    #[must_use]
    pub fn outbox_wake(&self) -> Arc<Notify> {
        self.outbox_wake.clone()
    }

    /// The fetcher (its metrics feed `/metrics`).
    #[must_use]
    pub fn fetcher(&self) -> &Fetcher {
        &self.fetcher
    }

    /// App-level counters.
    #[must_use]
    pub fn metrics(&self) -> Arc<AppMetrics> {
        self.metrics.clone()
    }

    /// The config in force.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether this one-pass run is a running watcher's guest: it records what it finds, but
    /// the sites' waits and the searches' next checks stay as the watcher plans them
    /// (store/lock.rs).
    #[must_use]
    pub fn is_guest(&self) -> bool {
        self.journal.is_guest()
    }

    /// Runs until `cancel` fires, or for a one-pass watcher until the pass is complete.
    /// On cancel, in-flight checks get up to 1.5 s to finish and be recorded.
    ///
    /// # Errors
    /// A store failure stops the watcher (nothing can be recorded safely any more).
    pub async fn run(&mut self, cancel: CancellationToken) -> Result<Vec<PassResult>, WatchError> {
        let result = self.drive(cancel).await;
        // The browser (if one was started) closes cleanly, its cookies on disk.
        self.fetcher.shutdown().await;
        result
    }

    /// Sends `event` to whoever listens; without a listener it is not even built (events cost
    /// a few allocations per check, and `watch` has no listener).
    fn announce(&self, event: impl FnOnce() -> WatchEvent) {
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(event());
        }
    }
}
