//! The driver: one timer feeding the pure scheduler (DESIGN §5), quinn's `drive_timer` shape.
//!
//! It asks the scheduler what is due, starts those checks as tasks, sleeps until the
//! scheduler's next deadline or until a check finishes, and feeds outcomes back. There is no
//! task or timer per search. Each finished check is classified, extracted and recorded in one
//! store transaction, and every registry change is written to the store *before* the next
//! request is issued, so a crash right after a refusal cannot lose it. `notifio check` runs the
//! same driver for exactly one pass, so both commands share one code path and one state.

use crate::config::Config;
use crate::extract::{self, Extraction, SiteProfile};
use crate::fetch::{BrowserConfig, FetchConfig, FetchMode, FetchRequest, Fetched, Fetcher, Launch};
use crate::listing::Listing;
use crate::notify::{ChannelName, Notification};
use crate::store::{CheckRecord, PageMemo, Recorded, RoutineCheck, Store, StoreError};
use notifio_policy::schedule::{SearchState, SiteState};
use notifio_policy::{
    CheckId, Entry, Markers, Outcome, Reaction, Registry, RequestClass, Scheduler, SchedulerConfig,
    SearchId, SearchSpec, SiteKey, Timestamp, classify,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{Notify, broadcast, mpsc};
use tokio_util::sync::CancellationToken;

mod apply;
pub use apply::{PreviewResult, Request, field_of};

/// Wall-clock now in Unix epoch milliseconds: the one place the app reads the clock.
#[must_use]
pub fn now() -> Timestamp {
    Timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
}

/// In a one-pass watcher a checked search is not due again for this long (i.e. not in the pass).
const ONE_PASS_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

/// How often the retry-metrics snapshot `notifio status` shows is written (not every check).
const META_EVERY: Duration = Duration::from_secs(1);
/// How long an ordinary check's history row and search state may wait in memory before they
/// are written (with every other one kept meanwhile, in one transaction).
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// After this long refused, the user is told once per episode.
pub const BLOCKED_ALERT_AFTER: Duration = Duration::from_secs(30 * 60);

/// Something the watcher did, for logs and the demo's narrative.
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
        /// New listings (empty for a baseline).
        new: Vec<Listing>,
        /// Whether this was a silent baseline.
        baseline: bool,
    },
    /// A site refused; all its searches wait.
    SiteWaiting {
        /// Site.
        site: SiteKey,
        /// The registry entry.
        entry: Entry,
        /// Searches parked.
        searches: usize,
    },
    /// A waiting site answered properly again.
    SiteCleared {
        /// Site.
        site: SiteKey,
    },
    /// A site's session expired.
    SessionExpired {
        /// Site.
        site: SiteKey,
    },
}

/// Counters the dashboard's `/metrics` shows beside the fetcher's.
#[derive(Debug, Default)]
pub struct AppMetrics {
    /// Checks by outcome name.
    pub checks: std::sync::Mutex<HashMap<&'static str, u64>>,
    /// New listings found.
    pub listings_found: AtomicU64,
    /// Checks in flight.
    pub in_flight: AtomicU64,
}

impl AppMetrics {
    /// Prometheus text for these counters.
    pub fn encode(&self, out: &mut String) {
        use std::fmt::Write as _;
        out.push_str(
            "# HELP notifio_checks_total Checks by outcome.\n# TYPE notifio_checks_total counter\n",
        );
        if let Ok(map) = self.checks.lock() {
            let mut v: Vec<_> = map.iter().collect();
            v.sort();
            for (outcome, n) in v {
                let _ = writeln!(out, "notifio_checks_total{{outcome=\"{outcome}\"}} {n}");
            }
        }
        let _ = writeln!(
            out,
            "# HELP notifio_listings_found_total New listings found.\n# TYPE notifio_listings_found_total counter\nnotifio_listings_found_total {}",
            self.listings_found.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP notifio_checks_in_flight Checks in flight.\n# TYPE notifio_checks_in_flight gauge\nnotifio_checks_in_flight {}",
            self.in_flight.load(Ordering::Relaxed)
        );
    }
}

/// A check from [`Scheduler::poll_due_into`] with its site key, URL and searches looked up once
/// (the scheduler hands out a small `Copy` check; one lookup per real fetch costs nothing).
#[derive(Debug, Clone)]
struct Check {
    id: CheckId,
    site: SiteKey,
    url: Arc<str>,
    searches: Arc<[SearchId]>,
    probe: bool,
}

impl Check {
    /// `None` only for an id the scheduler never issued (cannot happen for a fresh check).
    fn resolve(scheduler: &Scheduler, c: notifio_policy::Check) -> Option<Self> {
        Some(Self {
            id: c.id,
            site: scheduler.site_key(c.site).clone(),
            url: Arc::clone(scheduler.check_url(c.id)?),
            searches: Arc::clone(scheduler.check_searches(c.id)?),
            probe: c.probe,
        })
    }
}

/// One search as the driver knows it.
#[derive(Debug, Clone)]
struct SearchInfo {
    db_id: u32,
    name: String,
    notify_existing: bool,
    /// The channels its notifications go to (its `notify = [...]`, else all).
    channels: Vec<ChannelName>,
    profile: Arc<dyn SiteProfile>,
    /// The profile's markers, built once per profile (not per check: ~15 strings each).
    markers: Arc<Markers>,
    has_session: bool,
    site: SiteKey,
    /// Over HTTP or in the browser.
    fetch: FetchMode,
}

/// A finished fetch, handed back to the driver.
#[derive(Debug)]
struct Done {
    check: Check,
    outcome: Outcome,
    fetched: Fetched,
    listings: Option<Vec<Listing>>,
    /// The page's fingerprint (2xx only).
    fingerprint: Option<String>,
    /// The page was byte-for-byte the last good one, so it was not parsed again.
    same_page: bool,
}

/// How long `check` runs: until every search was checked once or is parked on a waiting site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `notifio watch`: forever (until cancelled).
    Forever,
    /// `notifio check`: one pass.
    OnePass,
}

/// The result of one search in a `check` pass.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PassResult {
    /// Search name.
    pub search: String,
    /// URL.
    pub url: String,
    /// Site key.
    pub site: String,
    /// Outcome name, or `waiting`.
    pub outcome: String,
    /// HTTP status.
    pub status: Option<u16>,
    /// Attempts made.
    pub attempts: u32,
    /// Listings on the page.
    pub listings: Vec<Listing>,
    /// Ids of listings seen for the first time.
    pub new: Vec<String>,
    /// The page was the same as at the last good check (a 304, or the same bytes), so it was
    /// not read again and `listings` is empty.
    pub unchanged: bool,
    /// When the site may be tried again, if it is waiting.
    pub next_retry_at: Option<u64>,
    /// How the page was (or would be) read: `http` or `browser`.
    pub via: FetchMode,
    /// Why the outcome is not `ok`, in a short sentence (no secrets); absent when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Everything a running watcher needs.
pub struct Watcher {
    config: Config,
    store: Store,
    scheduler: Scheduler,
    fetcher: Fetcher,
    searches: HashMap<SearchId, SearchInfo>,
    by_site: HashMap<SiteKey, Vec<SearchId>>,
    channels: Vec<ChannelName>,
    outbox_wake: Arc<Notify>,
    events: broadcast::Sender<WatchEvent>,
    metrics: Arc<AppMetrics>,
    running: HashMap<CheckId, Check>,
    /// How long a check may take before it stops counting against `concurrency`
    /// ([`slow_after`]).
    slow_after: Duration,
    mode: Mode,
    /// Each search's last good page (mirrors the store; see [`PageMemo`]).
    pages: HashMap<SearchId, PageMemo>,
    /// The state/next-check pair last written per search: unchanged ones are not rewritten.
    written_states: HashMap<u32, (&'static str, Option<u64>)>,
    /// Sites known to have no backoff row and no expired session on disk.
    clear_sites: HashSet<SiteKey>,
    /// When the metrics snapshot was last written.
    meta_written: Option<Instant>,
    /// A notification was enqueued in the open transaction: wake the sender once it commits
    /// (woken earlier, it would look before the row is visible and go back to sleep).
    wake_sender: bool,
    /// Ordinary checks' history rows not yet written (see [`Watcher::finish`]).
    pending_checks: Vec<RoutineCheck>,
    /// Search states not yet written; a state written directly since replaces its entry.
    pending_states: BTreeMap<u32, (&'static str, Option<u64>)>,
    /// When the oldest pending row was kept.
    pending_since: Option<Instant>,
    /// While set, search states go to `pending_states` instead of the store.
    deferring: bool,
    /// Live config, previews and login windows ([`Watcher::requests`]).
    live: apply::Live,
}

/// Why the watcher could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A search's site profile could not be built.
    #[error("search `{search}`: {source}")]
    Profile {
        /// The search.
        search: String,
        /// Why.
        source: extract::ProfileError,
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
        channels: Vec<ChannelName>,
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
        channels: Vec<ChannelName>,
        force: bool,
    ) -> Result<Self, WatchError> {
        Self::build(config, channels, force, Mode::OnePass)
    }

    fn build(
        config: Config,
        channels: Vec<ChannelName>,
        force: bool,
        mode: Mode,
    ) -> Result<Self, WatchError> {
        let mut store = Store::open(&config.watch.state_dir)?;
        let fetch_cfg = FetchConfig {
            retry: config.retry.clone(),
            body_cap: config.fetch.body_cap,
            browser: if config.uses_browser() {
                Some(browser_for(&config).map_err(WatchError::Browser)?)
            } else {
                // Started only by a browser check: one a reload adds, or a preview.
                browser_for(&config).ok()
            },
            ..FetchConfig::default()
        };
        let fetch_cfg = FetchConfig {
            user_agent: config
                .fetch
                .user_agent
                .clone()
                .unwrap_or(fetch_cfg.user_agent),
            accept_language: config
                .fetch
                .accept_language
                .clone()
                .unwrap_or(fetch_cfg.accept_language),
            ..fetch_cfg
        };
        let fetcher = Fetcher::new(fetch_cfg).map_err(|e| WatchError::Fetch(e.to_string()))?;

        let mut site_spacing = HashMap::new();
        let mut sessions: HashMap<SiteKey, Vec<String>> = HashMap::new();
        for (key, settings) in &config.sites {
            let site = SiteKey::from_stored(key.clone());
            if let Some(s) = settings.spacing {
                site_spacing.insert(site.clone(), s);
            }
            if let Some(path) = &settings.cookies {
                let jar = crate::fetch::cookies::load(path)
                    .map_err(|e| WatchError::Cookies(format!("site `{key}`: {e}")))?;
                let names = jar.names();
                fetcher.set_cookies(site.clone(), jar);
                sessions.insert(site, names);
            }
        }
        let mut profiles = Vec::with_capacity(config.searches.len());
        let mut made = extract::ProfileCache::default();
        for s in &config.searches {
            let forced = s.profile.as_deref().or_else(|| {
                config
                    .sites
                    .get(s.site.as_str())
                    .and_then(|x| x.profile.as_deref())
            });
            let profile = made
                .shared_for(&s.site, forced, s.listing.as_ref())
                .map_err(|source| WatchError::Profile {
                    search: s.name.clone(),
                    source,
                })?;
            profiles.push(profile);
        }
        let ids = store.sync_searches(&apply::sync_rows(&config.searches, &profiles))?;

        let mut searches = HashMap::new();
        let mut by_site: HashMap<SiteKey, Vec<SearchId>> = HashMap::new();
        for ((s, &db_id), shared) in config.searches.iter().zip(&ids).zip(profiles) {
            let extract::SharedProfile { profile, markers } = shared;
            // In the browser the profile is the session (`notifio login`); cookies.txt is for
            // plain HTTP.
            if profile.needs_cookies() && s.fetch == FetchMode::Http {
                let problem = match sessions.get(&s.site) {
                    None => "no cookies file is configured for it".to_owned(),
                    Some(names) => {
                        let missing: Vec<_> = profile
                            .required_cookies()
                            .iter()
                            .filter(|c| !names.iter().any(|n| n == *c))
                            .collect();
                        if missing.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "the cookies file lacks {missing:?} (are you logged in when you export it?)"
                            )
                        }
                    }
                };
                if !problem.is_empty() {
                    return Err(WatchError::NeedsSession {
                        search: s.name.clone(),
                        site: s.site.to_string(),
                        problem,
                    });
                }
            }
            if let Some(spacing) = profile.default_spacing() {
                site_spacing.entry(s.site.clone()).or_insert(spacing);
            }
            let id = SearchId(db_id);
            by_site.entry(s.site.clone()).or_default().push(id);
            let shared = extract::SharedProfile { profile, markers };
            let has_cookies = sessions.contains_key(&s.site);
            searches.insert(
                id,
                apply::search_info(s, db_id, shared, &channels, has_cookies),
            );
        }

        let mut registry = Registry::new(config.backoff.clone());
        if !force {
            let entries = store.backoff_entries()?;
            // A site still waiting stays closed to redirects from other sites, too.
            for (site, _, _) in &entries {
                fetcher.close_site(site.clone());
            }
            registry.restore(entries.into_iter().map(|(site, entry, _)| (site, entry)));
        }
        let sched_cfg = SchedulerConfig {
            spacing: config.watch.spacing,
            site_spacing,
            concurrency: config.watch.concurrency,
            interval_jitter: 0.1,
        };
        let mut scheduler = Scheduler::new(sched_cfg, registry, rand::random());
        let start = now();
        let stored = store.searches()?;
        for (s, &db_id) in config.searches.iter().zip(&ids) {
            // Resume the plan across restarts: a search checked recently is not re-checked at once.
            let (first_due, interval) = match mode {
                Mode::Forever => (
                    stored
                        .iter()
                        .find(|r| r.id == db_id)
                        .and_then(|r| r.next_check_at)
                        .map(Timestamp)
                        .filter(|t| *t > start),
                    s.interval,
                ),
                Mode::OnePass => (None, ONE_PASS_INTERVAL),
            };
            scheduler.add_search(
                SearchSpec {
                    id: SearchId(db_id),
                    url: s.url.clone(),
                    site: s.site.clone(),
                    interval,
                    first_due,
                },
                start,
            );
        }
        if !force {
            for site in store.expired_sessions()? {
                scheduler.pause_site(&site);
                fetcher.close_site(site);
            }
        }
        let mut pages = HashMap::new();
        for (id, memo) in store.page_memos()? {
            let Some(s) = config.searches.iter().zip(&ids).find(|(_, i)| **i == id) else {
                continue;
            };
            fetcher.set_validators(&s.0.url, memo.etag.clone(), memo.last_modified.clone());
            pages.insert(SearchId(id), memo);
        }
        let (events, _) = broadcast::channel(1024);
        let slow_after = slow_after(&config.retry);
        let mut watcher = Self {
            config,
            store,
            scheduler,
            fetcher,
            searches,
            by_site,
            channels,
            outbox_wake: Arc::new(Notify::new()),
            events,
            metrics: Arc::new(AppMetrics::default()),
            running: HashMap::new(),
            slow_after,
            mode,
            pages,
            written_states: HashMap::new(),
            clear_sites: HashSet::new(),
            meta_written: None,
            wake_sender: false,
            pending_checks: Vec::new(),
            pending_states: BTreeMap::new(),
            pending_since: None,
            deferring: false,
            live: apply::Live::default(),
        };
        watcher.park_paused()?;
        Ok(watcher)
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

    async fn drive(&mut self, cancel: CancellationToken) -> Result<Vec<PassResult>, WatchError> {
        let mode = self.mode;
        let (tx, mut rx) = mpsc::unbounded_channel::<Done>();
        let (slow_tx, mut slow_rx) = mpsc::unbounded_channel::<CheckId>();
        let mut results: HashMap<SearchId, PassResult> = HashMap::new();
        let mut due = Vec::new();
        let mut requests = self.live.take_receiver();
        loop {
            if cancel.is_cancelled() {
                break;
            }
            let t = now();
            due.clear();
            self.scheduler.poll_due_into(t, &mut due);
            for &c in &due {
                match Check::resolve(&self.scheduler, c) {
                    Some(check) => self.start(check, &tx, &slow_tx, &cancel)?,
                    None => self.scheduler.abandon(c.id),
                }
            }
            if mode == Mode::OnePass {
                self.collect_waiting(&mut results);
                if results.len() >= self.searches.len() && self.running.is_empty() {
                    break;
                }
            }
            let sleep = self
                .scheduler
                .poll_timeout()
                .map(|at| at.saturating_since(now()));
            let flush_in = self.flush_in();
            let sleep = match (sleep, flush_in) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            tokio::select! {
                () = cancel.cancelled() => break,
                Some(done) = rx.recv() => {
                    self.finish(done, mode, &mut results)?;
                }
                Some(req) = apply::next_request(&mut requests) => self.serve(req)?,
                Some(id) = slow_rx.recv() => {
                    if self.scheduler.release_slot(id)
                        && let Some(check) = self.running.get(&id)
                    {
                        tracing::info!(site = %check.site, after_ms = self.slow_after.as_millis() as u64, "slow check; its concurrency slot goes to the other sites");
                    }
                }
                () = sleep_or_forever(sleep) => {
                    if self.flush_in() == Some(Duration::ZERO) {
                        self.flush()?;
                    }
                }
            }
        }
        // Shutdown: let in-flight checks finish (they see the token) and record them.
        let grace = tokio::time::sleep(Duration::from_millis(1500));
        tokio::pin!(grace);
        while !self.running.is_empty() {
            tokio::select! {
                Some(done) = rx.recv() => self.finish(done, mode, &mut results)?,
                () = &mut grace => break,
            }
        }
        for (id, check) in std::mem::take(&mut self.running) {
            self.scheduler.abandon(id);
            self.persist_site(&check.site)?;
        }
        self.flush()?;
        let mut order: Vec<_> = results.into_iter().collect();
        order.sort_by_key(|(id, _)| id.0);
        Ok(order.into_iter().map(|(_, r)| r).collect())
    }

    fn collect_waiting(&self, results: &mut HashMap<SearchId, PassResult>) {
        for (id, info) in &self.searches {
            if results.contains_key(id) {
                continue;
            }
            if let Some((state, next)) = self.scheduler.search_state(*id) {
                let parked = matches!(state, SearchState::Waiting | SearchState::SessionExpired)
                    && !self.running.values().any(|c| c.searches.contains(id));
                if parked {
                    let url = self
                        .config
                        .searches
                        .iter()
                        .find(|s| s.name == info.name)
                        .map(|s| crate::redact::url_password(&s.url).into_owned())
                        .unwrap_or_default();
                    results.insert(
                        *id,
                        PassResult {
                            search: info.name.clone(),
                            url,
                            site: info.site.to_string(),
                            outcome: if state == SearchState::Waiting {
                                "waiting".into()
                            } else {
                                "session_expired".into()
                            },
                            status: None,
                            attempts: 0,
                            listings: Vec::new(),
                            new: Vec::new(),
                            unchanged: false,
                            next_retry_at: next.map(Timestamp::as_millis),
                            via: info.fetch,
                            reason: Some(match self.scheduler.registry().entry(&info.site) {
                                Some(entry) if state == SearchState::Waiting => {
                                    crate::reason::of_waiting(entry, now())
                                }
                                _ if info.fetch == FetchMode::Browser => format!(
                                    "the site's session expired: run `notifio login {}`",
                                    info.site
                                ),
                                _ => "the site's session expired: export fresh cookies".into(),
                            }),
                        },
                    );
                }
            }
        }
    }

    fn start(
        &mut self,
        check: Check,
        tx: &mpsc::UnboundedSender<Done>,
        slow_tx: &mpsc::UnboundedSender<CheckId>,
        cancel: &CancellationToken,
    ) -> Result<(), WatchError> {
        // The page is read as its first search reads it (a preview's own rules only when no
        // search watches the page).
        let Some((profile, markers, has_session, via)) = check
            .searches
            .iter()
            .find_map(|id| self.searches.get(id))
            .or_else(|| {
                check
                    .searches
                    .first()
                    .and_then(|id| self.live.preview_info(id))
            })
            .map(|i| {
                (
                    Arc::clone(&i.profile),
                    Arc::clone(&i.markers),
                    i.has_session,
                    i.fetch,
                )
            })
        else {
            self.scheduler.abandon(check.id);
            return Ok(());
        };
        if check.probe {
            self.store.begin()?;
            let written = self.record_start(&check);
            match written {
                Ok(()) => self.store.commit()?,
                Err(e) => {
                    self.store.rollback();
                    return Err(e);
                }
            }
        }
        // Conditional, and possibly skipped as the same page, only if every search this fetch
        // answers has the same last good page: a search added later gets its own full read.
        let memos: Vec<Option<&PageMemo>> =
            check.searches.iter().map(|id| self.pages.get(id)).collect();
        let expected = match memos.first() {
            Some(Some(first))
                if memos
                    .iter()
                    .all(|m| m.is_some_and(|m| m.fingerprint == first.fingerprint)) =>
            {
                Some(first.fingerprint.clone())
            }
            _ => None,
        };
        // Events are for the demo's narrative and the check progress bar; without a listener
        // they are not even built (two allocations per check saved in `watch`).
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(WatchEvent::CheckStarted {
                site: check.site.clone(),
                searches: self.names(&check.searches),
                probe: check.probe,
            });
        }
        self.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        self.running.insert(check.id, check.clone());
        let fetcher = self.fetcher.clone();
        let tx = tx.clone();
        let slow_tx = slow_tx.clone();
        let slow_after = self.slow_after;
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let req = FetchRequest {
                url: check.url.to_string(),
                site: check.site.clone(),
                class: if check.probe {
                    RequestClass::Probe
                } else {
                    RequestClass::Search
                },
                conditional: expected.is_some() && via == FetchMode::Http,
                post_json: None,
                via,
                ready: match via {
                    FetchMode::Browser => profile.ready_selector().map(Arc::from),
                    FetchMode::Http => None,
                },
                markers: Some(Arc::clone(&markers)),
                outgoing: None,
            };
            let fetch = fetcher.fetch(&req, &cancel);
            tokio::pin!(fetch);
            let fetched = tokio::select! {
                biased;
                fetched = &mut fetch => fetched,
                () = tokio::time::sleep(slow_after) => {
                    let _ = slow_tx.send(check.id);
                    fetch.await
                }
            };
            if fetched.cancelled {
                return;
            }
            let fingerprint = fingerprint(&fetched);
            let same = expected.is_some() && fingerprint == expected;
            let (outcome, listings) = judge(&fetched, &profile, &markers, has_session, same).await;
            let _ = tx.send(Done {
                check,
                outcome,
                fetched,
                listings,
                fingerprint,
                same_page: same && outcome == Outcome::Ok,
            });
        });
        Ok(())
    }

    /// A probe's start on disk, so status shows it and a crash mid-probe leaves the site
    /// waiting, not clear. (An ordinary check writes nothing until it finishes: its searches
    /// stay "due" on disk meanwhile, and one transaction per check is half the cost of two.)
    ///
    /// No write transaction is ever held across an `await`: the notification sender's
    /// connection would block a runtime thread waiting for it (on `check`'s one-threaded
    /// runtime, the only one).
    fn record_start(&mut self, check: &Check) -> Result<(), WatchError> {
        if check.probe {
            self.clear_sites.remove(&check.site);
            self.store.save_backoff(
                &check.site,
                self.scheduler.registry().entry(&check.site),
                true,
            )?;
        }
        let started = now();
        for id in check.searches.iter() {
            let (state, next) = self
                .scheduler
                .search_state(*id)
                .unwrap_or((SearchState::Ok, None));
            // A healthy search being checked right now is due now, not "unscheduled".
            let next = if state == SearchState::Ok {
                next.or(Some(started))
            } else {
                next
            };
            self.write_search_state(id.0, state, next)?;
        }
        Ok(())
    }

    /// Writes a search's state and next check time unless that is what the disk already has.
    fn write_search_state(
        &mut self,
        id: u32,
        state: SearchState,
        next: Option<Timestamp>,
    ) -> Result<(), WatchError> {
        let row = (search_state_name(state), next.map(Timestamp::as_millis));
        if self.written_states.get(&id) != Some(&row) {
            if self.deferring {
                self.pending_states.insert(id, row);
                self.pending_since.get_or_insert_with(Instant::now);
            } else {
                // Newer than any kept state of this search, which must not overwrite it later.
                self.pending_states.remove(&id);
                self.store.set_search_state(id, row.0, row.1)?;
            }
            self.written_states.insert(id, row);
        }
        Ok(())
    }

    fn names(&self, ids: &[SearchId]) -> Vec<String> {
        ids.iter()
            .filter_map(|id| self.searches.get(id))
            .map(|s| s.name.clone())
            .collect()
    }

    /// Records a finished check: every write it causes is one transaction.
    ///
    /// An ordinary check (no new page to read, no change to its site's backoff or session)
    /// writes only a history row and its search's next check time. Those wait in memory and go
    /// to disk together at most [`FLUSH_EVERY`] later, or before the next check that writes
    /// anything else: most checks then cost no commit of their own. A crash loses at most that
    /// second of history; what politeness and delivery depend on (backoff entries, listings,
    /// the outbox) is never kept back.
    fn finish(
        &mut self,
        done: Done,
        mode: Mode,
        results: &mut HashMap<SearchId, PassResult>,
    ) -> Result<(), WatchError> {
        self.running.remove(&done.check.id);
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        let t = now();
        let reaction =
            self.scheduler
                .handle_outcome(done.check.id, done.outcome, done.fetched.retry_after, t);
        self.after_check(&done);
        if reaction.is_none() && done.listings.is_none() && self.clear_on_disk(&done.check.site) {
            self.finish_in_tx(done, mode, results, t, reaction, true)?;
            if self
                .pending_since
                .is_some_and(|since| since.elapsed() >= FLUSH_EVERY)
            {
                self.flush()?;
            }
            return Ok(());
        }
        self.store.begin()?;
        let written = self
            .write_pending()
            .and_then(|()| self.finish_in_tx(done, mode, results, t, reaction, false));
        match written {
            Ok(()) => {
                self.store.commit()?;
                if std::mem::take(&mut self.wake_sender) {
                    self.outbox_wake.notify_one();
                }
                Ok(())
            }
            Err(e) => {
                self.store.rollback();
                Err(e)
            }
        }
    }

    /// Writes the rows ordinary checks kept in memory, and the metrics snapshot, in one
    /// transaction.
    fn flush(&mut self) -> Result<(), WatchError> {
        self.store.begin()?;
        match self.write_pending().and_then(|()| self.write_meta()) {
            Ok(()) => Ok(self.store.commit()?),
            Err(e) => {
                self.store.rollback();
                Err(e)
            }
        }
    }

    /// When the kept rows must be written (`None`: there are none).
    fn flush_in(&self) -> Option<Duration> {
        self.pending_since
            .map(|since| FLUSH_EVERY.saturating_sub(since.elapsed()))
    }

    fn write_pending(&mut self) -> Result<(), WatchError> {
        if self.pending_since.take().is_none() {
            return Ok(());
        }
        let checks = std::mem::take(&mut self.pending_checks);
        let states: Vec<(u32, &str, Option<u64>)> = std::mem::take(&mut self.pending_states)
            .into_iter()
            .map(|(id, (state, next))| (id, state, next))
            .collect();
        self.store
            .record_routine(&checks, &states, self.config.watch.history)?;
        Ok(())
    }

    /// Whether the disk already says `site` is clear: no backoff row, no expired session (so
    /// [`Self::persist_site`] would write nothing for it but search states).
    fn clear_on_disk(&self, site: &SiteKey) -> bool {
        let registry = self.scheduler.registry();
        registry.entry(site).is_none()
            && !registry.is_probing(site)
            && self.scheduler.site_state(site) != SiteState::SessionExpired
            && self.clear_sites.contains(site)
    }

    fn finish_in_tx(
        &mut self,
        done: Done,
        mode: Mode,
        results: &mut HashMap<SearchId, PassResult>,
        t: Timestamp,
        reaction: Option<Reaction>,
        routine: bool,
    ) -> Result<(), WatchError> {
        let Done {
            check,
            outcome,
            fetched,
            listings,
            fingerprint,
            same_page,
        } = done;
        // The registry change reaches the disk before anything else can be sent.
        if routine {
            self.deferring = true;
            let persisted = self.persist_site(&check.site);
            self.deferring = false;
            persisted?;
        } else {
            self.persist_site(&check.site)?;
        }

        let recorded = if routine {
            let latency_ms = u64::try_from(fetched.latency.as_millis()).unwrap_or(u64::MAX);
            let ids = check.searches.iter().filter_map(|id| self.searches.get(id));
            self.pending_checks.extend(ids.map(|s| RoutineCheck {
                search_id: s.db_id,
                at: t.as_millis(),
                outcome: outcome.as_str(),
                status: fetched.status,
                attempts: fetched.attempts,
                latency_ms,
            }));
            self.pending_since.get_or_insert_with(Instant::now);
            Recorded::default()
        } else {
            let infos: Vec<&SearchInfo> = check
                .searches
                .iter()
                .filter_map(|id| self.searches.get(id))
                .collect();
            let search_rows: Vec<(u32, String, bool)> = infos
                .iter()
                .map(|s| (s.db_id, s.name.clone(), s.notify_existing))
                .collect();
            let routes: Vec<Vec<ChannelName>> = infos.iter().map(|s| s.channels.clone()).collect();
            self.store.record_check(&CheckRecord {
                searches: &search_rows,
                site: &check.site,
                outcome: outcome.as_str(),
                status: fetched.status,
                attempts: fetched.attempts,
                latency_ms: u64::try_from(fetched.latency.as_millis()).unwrap_or(u64::MAX),
                listings: listings.as_deref(),
                now: t.as_millis(),
                channels: &routes,
                history: self.config.watch.history,
            })?
        };
        if recorded.enqueued {
            self.wake_sender = true;
        }
        self.remember_page(&check, outcome, &fetched, listings.is_some(), fingerprint)?;
        if let Ok(mut m) = self.metrics.checks.lock() {
            *m.entry(outcome.as_str()).or_default() += 1;
        }
        self.metrics
            .listings_found
            .fetch_add(recorded.new.len() as u64, Ordering::Relaxed);
        if recorded.rekeyed > 0 {
            tracing::info!(site = %check.site, listings = recorded.rekeyed, "listings known by their links came back under new ids; not announced");
        }
        match &reaction {
            Some(Reaction::SiteWaiting {
                site,
                entry,
                searches,
            }) => {
                tracing::warn!(site = %site, kind = %entry.kind, failures = entry.failures, until = %notifio_policy::format_time_of_day(entry.next_retry_at), "site refused; all its searches wait");
                self.fetcher.close_site(site.clone());
                let _ = self.events.send(WatchEvent::SiteWaiting {
                    site: site.clone(),
                    entry: entry.clone(),
                    searches: *searches,
                });
                self.maybe_alert_blocked(site, entry, t)?;
            }
            Some(Reaction::SiteCleared { site, .. }) => {
                tracing::info!(site = %site, "site clear again");
                self.fetcher.open_site(site);
                let _ = self
                    .events
                    .send(WatchEvent::SiteCleared { site: site.clone() });
            }
            Some(Reaction::SessionExpired { site }) => {
                tracing::warn!(site = %site, "session expired; log in again (notifio login, or fresh cookies)");
                self.fetcher.close_site(site.clone());
                let _ = self
                    .events
                    .send(WatchEvent::SessionExpired { site: site.clone() });
                if self.store.set_session_expired(site, true, t.as_millis())? {
                    let cookies_path = self
                        .config
                        .sites
                        .get(site.as_str())
                        .and_then(|s| s.cookies.as_ref())
                        .map(|p| p.display().to_string());
                    let login = self
                        .by_site
                        .get(site)
                        .and_then(|ids| ids.first())
                        .and_then(|id| self.searches.get(id))
                        .is_some_and(|s| s.fetch == FetchMode::Browser);
                    self.store.enqueue(
                        &Notification::SessionExpired {
                            site: site.to_string(),
                            cookies_path: if login { None } else { cookies_path },
                            login,
                        },
                        &self.site_channels(site),
                        t.as_millis(),
                    )?;
                    self.wake_sender = true;
                }
            }
            Some(Reaction::SearchGone { .. }) | None => {}
        }
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(WatchEvent::CheckDone {
                site: check.site.clone(),
                searches: self.names(&check.searches),
                outcome,
                status: fetched.status,
                listings: listings.as_ref().map_or(0, Vec::len),
                new: if recorded.baseline
                    && recorded.new.len() == listings.as_ref().map_or(0, Vec::len)
                {
                    Vec::new()
                } else {
                    recorded.new.clone()
                },
                baseline: recorded.baseline,
            });
        }
        if mode == Mode::OnePass {
            let entry = self.scheduler.registry().entry(&check.site);
            for id in check.searches.iter() {
                let Some(info) = self.searches.get(id) else {
                    continue;
                };
                // The first answer in a pass is the one reported (a short interval may re-check).
                results.entry(*id).or_insert_with(|| PassResult {
                    search: info.name.clone(),
                    url: crate::redact::url_password(&check.url).into_owned(),
                    site: check.site.to_string(),
                    outcome: outcome.as_str().to_owned(),
                    status: fetched.status,
                    attempts: fetched.attempts,
                    listings: listings.clone().unwrap_or_default(),
                    new: recorded.new.iter().map(|l| l.id.clone()).collect(),
                    unchanged: same_page || outcome == Outcome::Unchanged,
                    next_retry_at: entry.map(|e| e.next_retry_at.as_millis()),
                    via: fetched.via,
                    reason: crate::reason::of_check(outcome, &fetched, &info.markers),
                });
            }
        }
        // An ordinary check's flush writes the snapshot.
        if !routine && self.meta_written.is_none_or(|t| t.elapsed() >= META_EVERY) {
            self.write_meta()?;
        }
        Ok(())
    }

    /// The retry metrics and warnings `notifio status` shows.
    fn write_meta(&mut self) -> Result<(), WatchError> {
        if let Ok(json) = serde_json::to_string(&self.fetcher.metrics().snapshot()) {
            self.store.put_meta("retry", &json)?;
        }
        if let Ok(json) = serde_json::to_string(&self.fetcher.metrics().warnings()) {
            self.store.put_meta("warnings", &json)?;
        }
        self.meta_written = Some(Instant::now());
        Ok(())
    }

    /// After a check: a page judged good becomes its searches' memo (fingerprint and
    /// validators, on disk in the check's transaction); any other 2xx must not be what a later
    /// 304 vouches for, so the fetcher goes back to the last good page's validators.
    fn remember_page(
        &mut self,
        check: &Check,
        outcome: Outcome,
        fetched: &Fetched,
        parsed: bool,
        fingerprint: Option<String>,
    ) -> Result<(), WatchError> {
        let ok_2xx =
            fetched.failure.is_none() && fetched.status.is_some_and(|s| (200..300).contains(&s));
        match (outcome, parsed, fingerprint) {
            (Outcome::Ok, true, Some(fingerprint)) => {
                let memo = PageMemo {
                    fingerprint,
                    etag: fetched.header("etag").map(str::to_owned),
                    last_modified: fetched.header("last-modified").map(str::to_owned),
                };
                for id in check.searches.iter() {
                    if self.pages.get(id) != Some(&memo)
                        && let Some(info) = self.searches.get(id)
                    {
                        self.store.set_page_memo(info.db_id, &memo)?;
                        self.pages.insert(*id, memo.clone());
                    }
                }
            }
            (Outcome::Ok | Outcome::Unchanged, _, _) => {}
            _ if ok_2xx => {
                let memo = check.searches.first().and_then(|id| self.pages.get(id));
                self.fetcher.set_validators(
                    &check.url,
                    memo.and_then(|m| m.etag.clone()),
                    memo.and_then(|m| m.last_modified.clone()),
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// The channels of every search on `site`: where news about the site goes.
    fn site_channels(&self, site: &SiteKey) -> Vec<ChannelName> {
        let mut out: Vec<ChannelName> = Vec::new();
        for id in self.by_site.get(site).into_iter().flatten() {
            for c in self
                .searches
                .get(id)
                .map(|s| s.channels.as_slice())
                .unwrap_or_default()
            {
                if !out.contains(c) {
                    out.push(c.clone());
                }
            }
        }
        // In configured order, whatever order the searches listed them in.
        out.sort_by_key(|c| self.channels.iter().position(|x| x == c));
        out
    }

    fn maybe_alert_blocked(
        &mut self,
        site: &SiteKey,
        entry: &Entry,
        t: Timestamp,
    ) -> Result<(), WatchError> {
        if t.saturating_since(entry.since) >= BLOCKED_ALERT_AFTER
            && self
                .store
                .claim_blocked_alert(site, entry.since.as_millis())?
        {
            let n = Notification::SiteBlocked {
                site: site.to_string(),
                kind: entry.kind.as_str().to_owned(),
                since: entry.since.as_millis(),
                searches: self
                    .by_site
                    .get(site)
                    .map(|ids| self.names(ids))
                    .unwrap_or_default(),
            };
            self.store
                .enqueue(&n, &self.site_channels(site), t.as_millis())?;
            self.wake_sender = true;
        }
        Ok(())
    }

    /// Writes a site's registry entry and every one of its searches' states.
    fn persist_site(&mut self, site: &SiteKey) -> Result<(), WatchError> {
        let registry = self.scheduler.registry();
        let entry = registry.entry(site);
        let clear = entry.is_none()
            && !registry.is_probing(site)
            && self.scheduler.site_state(site) != SiteState::SessionExpired;
        if !(clear && self.clear_sites.contains(site)) {
            self.store
                .save_backoff(site, entry, registry.is_probing(site))?;
            if clear {
                // A site that answers again is no longer session-expired.
                self.store
                    .set_session_expired(site, false, now().as_millis())?;
                self.clear_sites.insert(site.clone());
            } else {
                self.clear_sites.remove(site);
            }
        }
        let ids = self.by_site.get(site).cloned().unwrap_or_default();
        for id in ids {
            let (state, next) = self
                .scheduler
                .search_state(id)
                .unwrap_or((SearchState::Ok, None));
            self.write_search_state(id.0, state, next)?;
        }
        Ok(())
    }
}

/// Pages larger than this are parsed on the blocking pool. `watch` runs its checks on one
/// worker thread (fewer thread hand-offs per check), and a huge page (up to the body cap) must
/// not hold up other sites' checks meanwhile; an ordinary page (~300 KB) parses in ~1 ms.
const PARSE_INLINE_MAX: usize = 1 << 20;

/// Classifies a fetched page and, when it is a proper page, extracts its listings.
///
/// `same_page`: the bytes are those of the last page judged good, so a listing cannot be new;
/// classification still runs (headers may differ), extraction does not.
async fn judge(
    fetched: &Fetched,
    profile: &Arc<dyn SiteProfile>,
    markers: &Markers,
    has_session: bool,
    same_page: bool,
) -> (Outcome, Option<Vec<Listing>>) {
    if let Some(site) = &fetched.held_at {
        // The search's own site answered (with a redirect); the site it leads to is waiting.
        // Nothing is learnt about the page and nobody refused: the search is simply due
        // again after its interval, like an unchanged page.
        tracing::info!(to = %site, "a redirect leads to a waiting site; not followed");
        return (Outcome::Unchanged, None);
    }
    let outcome = classify(&fetched.facts(has_session), markers);
    if outcome != Outcome::Ok || same_page {
        return (outcome, None);
    }
    let Ok(url) = url::Url::parse(&fetched.final_url) else {
        return (Outcome::LayoutUnknown, None);
    };
    let extraction = if fetched.body.len() <= PARSE_INLINE_MAX {
        profile.extract(&fetched.body, &url)
    } else {
        let (profile, body) = (Arc::clone(profile), fetched.body.clone());
        tokio::task::spawn_blocking(move || profile.extract(&body, &url))
            .await
            .unwrap_or(Extraction::LayoutUnknown)
    };
    match extraction {
        Extraction::Listings(v) => (Outcome::Ok, Some(v)),
        Extraction::NoResults => (Outcome::Ok, Some(Vec::new())),
        Extraction::LayoutUnknown => (Outcome::LayoutUnknown, None),
    }
}

/// A 2xx page's identity: status, final URL and body, hashed (xxh3, 128 bits, hex). Hashing
/// 300 KB costs ~20 µs; parsing it costs a millisecond or more.
fn fingerprint(fetched: &Fetched) -> Option<String> {
    let status = fetched.status.filter(|s| (200..300).contains(s))?;
    if fetched.failure.is_some() {
        return None;
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&status.to_le_bytes());
    h.update(fetched.final_url.as_bytes());
    h.update(&[0]);
    h.update(&fetched.body);
    Some(format!("{:032x}", h.digest128()))
}

/// The browser `[browser]` describes: the user's own (via `connect`) or one we start. A browser
/// that cannot be found is a config problem (exit 2) at `[browser] executable`.
///
/// # Errors
/// No browser found, or the configured one is missing or not executable.
pub fn browser_for(config: &Config) -> Result<BrowserConfig, crate::config::ConfigError> {
    let b = &config.browser;
    let launch = match &b.connect {
        Some(url) => Launch::Connect { url: url.clone() },
        None => {
            let configured = b.executable.as_ref();
            let executable = crate::fetch::browser::find_executable(
                configured.map(|(v, _)| v.as_str()),
                std::env::var_os("PATH"),
            )
            .map_err(|e| {
                let spot = configured.map_or_else(
                    || crate::config::Spot::unwritten(&config.path, "browser.executable"),
                    |(_, spot)| spot.clone(),
                );
                let needs = config
                    .searches
                    .iter()
                    .find(|s| s.fetch == FetchMode::Browser)
                    .map(|s| {
                        format!(
                            " (search `{}` on {} is read with the browser)",
                            s.name, s.site
                        )
                    })
                    .unwrap_or_default();
                spot.error(
                    format!("{e}{needs}"),
                    format!(
                        "{}; or read the site without one: [site.\"…\"] fetch = \"http\"",
                        crate::fetch::browser::install_hint()
                    ),
                )
            })?;
            Launch::Start {
                executable,
                profile_dir: b.profile_dir.clone(),
                headless: b.headless,
            }
        }
    };
    Ok(BrowserConfig {
        launch,
        block: b.block.clone(),
    })
}

/// How long a check may be out before it is slow and gives its concurrency slot back (its site
/// still gets nothing else until it ends): half a search request's per-attempt timeout, at
/// most 5 s. A healthy page takes well under a second; a site that accepts the connection and
/// then stalls would otherwise hold a slot until its deadline (20 s by default), and a few
/// such sites would hold up every other site.
fn slow_after(retry: &notifio_policy::RetryPolicies) -> Duration {
    (retry.search.timeout() / 2).min(Duration::from_secs(5))
}

/// How a search's pages are read (profile, selectors) and by which Notifio: the store drops a
/// search's page memo when this changes, since the same page may then yield other listings.
fn rules_fingerprint(profile: &dyn SiteProfile) -> String {
    let rules = format!("{}/{profile:?}", env!("CARGO_PKG_VERSION"));
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(rules.as_bytes()))
}

/// The state name the store and the status view use.
#[must_use]
pub const fn search_state_name(state: SearchState) -> &'static str {
    match state {
        SearchState::Ok => "ok",
        SearchState::Waiting => "waiting",
        SearchState::Probing => "probing",
        SearchState::SessionExpired => "session_expired",
        SearchState::SearchGone => "search_gone",
    }
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
