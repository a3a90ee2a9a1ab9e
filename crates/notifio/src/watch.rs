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
use crate::fetch::{FetchConfig, FetchRequest, Fetched, Fetcher};
use crate::listing::Listing;
use crate::notify::{ChannelKind, Notification};
use crate::store::{CheckRecord, Store, StoreError};
use notifio_policy::schedule::{SearchState, SiteState};
use notifio_policy::{
    Check, CheckId, Entry, Outcome, Reaction, Registry, RequestClass, Scheduler, SchedulerConfig,
    SearchId, SearchSpec, SiteKey, Timestamp, classify,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{Notify, broadcast, mpsc};
use tokio_util::sync::CancellationToken;

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

/// One search as the driver knows it.
#[derive(Debug, Clone)]
struct SearchInfo {
    db_id: u32,
    name: String,
    notify_existing: bool,
    profile: Arc<dyn SiteProfile>,
    has_session: bool,
    site: SiteKey,
}

/// A finished fetch, handed back to the driver.
#[derive(Debug)]
struct Done {
    check: Check,
    outcome: Outcome,
    fetched: Fetched,
    listings: Option<Vec<Listing>>,
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
    /// When the site may be tried again, if it is waiting.
    pub next_retry_at: Option<u64>,
}

/// Everything a running watcher needs.
pub struct Watcher {
    config: Config,
    store: Store,
    scheduler: Scheduler,
    fetcher: Fetcher,
    searches: HashMap<SearchId, SearchInfo>,
    by_site: HashMap<SiteKey, Vec<SearchId>>,
    channels: Vec<ChannelKind>,
    outbox_wake: Arc<Notify>,
    events: broadcast::Sender<WatchEvent>,
    metrics: Arc<AppMetrics>,
    running: HashMap<CheckId, Check>,
    mode: Mode,
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
}

impl Watcher {
    /// Opens the store, restores the registry, and builds the scheduler for `config`.
    ///
    /// # Errors
    /// Store, profile, cookies or client failures.
    pub fn new(
        config: Config,
        channels: Vec<ChannelKind>,
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
        channels: Vec<ChannelKind>,
        force: bool,
    ) -> Result<Self, WatchError> {
        Self::build(config, channels, force, Mode::OnePass)
    }

    fn build(
        config: Config,
        channels: Vec<ChannelKind>,
        force: bool,
        mode: Mode,
    ) -> Result<Self, WatchError> {
        let mut store = Store::open(&config.watch.state_dir)?;
        let fetch_cfg = FetchConfig {
            retry: config.retry.clone(),
            body_cap: config.fetch.body_cap,
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
        let rows: Vec<(String, String, String)> = config
            .searches
            .iter()
            .map(|s| (s.name.clone(), s.url.clone(), s.site.as_str().to_owned()))
            .collect();
        let ids = store.sync_searches(&rows)?;

        let mut searches = HashMap::new();
        let mut by_site: HashMap<SiteKey, Vec<SearchId>> = HashMap::new();
        for (s, &db_id) in config.searches.iter().zip(&ids) {
            let forced = s.profile.as_deref().or_else(|| {
                config
                    .sites
                    .get(s.site.as_str())
                    .and_then(|x| x.profile.as_deref())
            });
            let profile =
                extract::profile_for(&s.site, forced, s.listing.as_ref()).map_err(|source| {
                    WatchError::Profile {
                        search: s.name.clone(),
                        source,
                    }
                })?;
            if profile.needs_cookies() {
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
            searches.insert(
                id,
                SearchInfo {
                    db_id,
                    name: s.name.clone(),
                    notify_existing: s.notify_existing,
                    has_session: sessions.contains_key(&s.site),
                    profile,
                    site: s.site.clone(),
                },
            );
        }

        let mut registry = Registry::new(config.backoff.clone());
        if !force {
            registry.restore(
                store
                    .backoff_entries()?
                    .into_iter()
                    .map(|(site, entry, _)| (site, entry)),
            );
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
            }
        }
        let (events, _) = broadcast::channel(1024);
        Ok(Self {
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
            mode,
        })
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
        let mode = self.mode;
        let (tx, mut rx) = mpsc::unbounded_channel::<Done>();
        let mut results: HashMap<SearchId, PassResult> = HashMap::new();
        loop {
            if cancel.is_cancelled() {
                break;
            }
            let t = now();
            while let Some(check) = self.scheduler.poll_due(t) {
                self.start(check, &tx, &cancel)?;
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
            tokio::select! {
                () = cancel.cancelled() => break,
                Some(done) = rx.recv() => {
                    self.finish(done, mode, &mut results)?;
                }
                () = sleep_or_forever(sleep) => {}
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
                        .map(|s| s.url.clone())
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
                            next_retry_at: next.map(Timestamp::as_millis),
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
        cancel: &CancellationToken,
    ) -> Result<(), WatchError> {
        let Some(info) = check
            .searches
            .first()
            .and_then(|id| self.searches.get(id))
            .cloned()
        else {
            self.scheduler.abandon(check.id);
            return Ok(());
        };
        if check.probe {
            // The probe is on disk before it leaves, so status shows it and a crash mid-probe
            // leaves the site waiting, not clear.
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
            self.store.set_search_state(
                id.0,
                search_state_name(state),
                next.map(Timestamp::as_millis),
            )?;
        }
        let _ = self.events.send(WatchEvent::CheckStarted {
            site: check.site.clone(),
            searches: self.names(&check.searches),
            probe: check.probe,
        });
        self.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        self.running.insert(check.id, check.clone());
        let fetcher = self.fetcher.clone();
        let tx = tx.clone();
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
                conditional: true,
                post_json: None,
            };
            let fetched = fetcher.fetch(&req, &cancel).await;
            if fetched.cancelled {
                return;
            }
            let (outcome, listings) = judge(&fetched, info.profile.as_ref(), info.has_session);
            let _ = tx.send(Done {
                check,
                outcome,
                fetched,
                listings,
            });
        });
        Ok(())
    }

    fn names(&self, ids: &[SearchId]) -> Vec<String> {
        ids.iter()
            .filter_map(|id| self.searches.get(id))
            .map(|s| s.name.clone())
            .collect()
    }

    fn finish(
        &mut self,
        done: Done,
        mode: Mode,
        results: &mut HashMap<SearchId, PassResult>,
    ) -> Result<(), WatchError> {
        let Done {
            check,
            outcome,
            fetched,
            listings,
        } = done;
        self.running.remove(&check.id);
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        let t = now();
        let reaction = self
            .scheduler
            .handle_outcome(check.id, outcome, fetched.retry_after, t);
        // The registry change reaches the disk before anything else can be sent.
        self.persist_site(&check.site)?;

        let search_rows: Vec<(u32, String, bool)> = check
            .searches
            .iter()
            .filter_map(|id| self.searches.get(id))
            .map(|s| (s.db_id, s.name.clone(), s.notify_existing))
            .collect();
        let recorded = self.store.record_check(&CheckRecord {
            searches: &search_rows,
            site: &check.site,
            outcome: outcome.as_str(),
            status: fetched.status,
            attempts: fetched.attempts,
            latency_ms: u64::try_from(fetched.latency.as_millis()).unwrap_or(u64::MAX),
            listings: listings.as_deref(),
            now: t.as_millis(),
            channels: if mode == Mode::OnePass && self.channels.is_empty() {
                &[]
            } else {
                &self.channels
            },
            history: self.config.watch.history,
        })?;
        if recorded.enqueued {
            self.outbox_wake.notify_one();
        }
        if let Ok(mut m) = self.metrics.checks.lock() {
            *m.entry(outcome.as_str()).or_default() += 1;
        }
        self.metrics
            .listings_found
            .fetch_add(recorded.new.len() as u64, Ordering::Relaxed);
        let names = self.names(&check.searches);
        match &reaction {
            Some(Reaction::SiteWaiting {
                site,
                entry,
                searches,
            }) => {
                tracing::warn!(site = %site, kind = %entry.kind, failures = entry.failures, until = entry.next_retry_at.as_millis(), "site refused; all its searches wait");
                let _ = self.events.send(WatchEvent::SiteWaiting {
                    site: site.clone(),
                    entry: entry.clone(),
                    searches: *searches,
                });
                self.maybe_alert_blocked(site, entry, t)?;
            }
            Some(Reaction::SiteCleared { site, .. }) => {
                tracing::info!(site = %site, "site clear again");
                let _ = self
                    .events
                    .send(WatchEvent::SiteCleared { site: site.clone() });
            }
            Some(Reaction::SessionExpired { site }) => {
                tracing::warn!(site = %site, "session expired; export fresh cookies");
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
                    self.store.enqueue(
                        &Notification::SessionExpired {
                            site: site.to_string(),
                            cookies_path,
                        },
                        &self.channels,
                        t.as_millis(),
                    )?;
                    self.outbox_wake.notify_one();
                }
            }
            Some(Reaction::SearchGone { .. }) | None => {}
        }
        let _ = self.events.send(WatchEvent::CheckDone {
            site: check.site.clone(),
            searches: names,
            outcome,
            status: fetched.status,
            listings: listings.as_ref().map_or(0, Vec::len),
            new: if recorded.baseline && recorded.new.len() == listings.as_ref().map_or(0, Vec::len)
            {
                Vec::new()
            } else {
                recorded.new.clone()
            },
            baseline: recorded.baseline,
        });
        if mode == Mode::OnePass {
            let entry = self.scheduler.registry().entry(&check.site);
            for id in check.searches.iter() {
                let Some(info) = self.searches.get(id) else {
                    continue;
                };
                // The first answer in a pass is the one reported (a short interval may re-check).
                results.entry(*id).or_insert_with(|| PassResult {
                    search: info.name.clone(),
                    url: check.url.to_string(),
                    site: check.site.to_string(),
                    outcome: outcome.as_str().to_owned(),
                    status: fetched.status,
                    attempts: fetched.attempts,
                    listings: listings.clone().unwrap_or_default(),
                    new: recorded.new.iter().map(|l| l.id.clone()).collect(),
                    next_retry_at: entry.map(|e| e.next_retry_at.as_millis()),
                });
            }
        }
        if let Ok(json) = serde_json::to_string(&self.fetcher.metrics().snapshot()) {
            self.store.put_meta("retry", &json)?;
        }
        if let Ok(json) = serde_json::to_string(&self.fetcher.metrics().warnings()) {
            self.store.put_meta("warnings", &json)?;
        }
        Ok(())
    }

    fn maybe_alert_blocked(
        &self,
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
            self.store.enqueue(&n, &self.channels, t.as_millis())?;
            self.outbox_wake.notify_one();
        }
        Ok(())
    }

    /// Writes a site's registry entry and every one of its searches' states.
    fn persist_site(&self, site: &SiteKey) -> Result<(), WatchError> {
        let registry = self.scheduler.registry();
        self.store
            .save_backoff(site, registry.entry(site), registry.is_probing(site))?;
        if self.scheduler.site_state(site) != SiteState::SessionExpired
            && registry.entry(site).is_none()
        {
            // A site that answers again is no longer session-expired.
            self.store
                .set_session_expired(site, false, now().as_millis())?;
        }
        for id in self.by_site.get(site).into_iter().flatten() {
            let (state, next) = self
                .scheduler
                .search_state(*id)
                .unwrap_or((SearchState::Ok, None));
            self.store.set_search_state(
                id.0,
                search_state_name(state),
                next.map(Timestamp::as_millis),
            )?;
        }
        Ok(())
    }
}

/// Classifies a fetched page and, when it is a proper page, extracts its listings.
fn judge(
    fetched: &Fetched,
    profile: &dyn SiteProfile,
    has_session: bool,
) -> (Outcome, Option<Vec<Listing>>) {
    let outcome = classify(&fetched.facts(has_session), &profile.markers());
    if outcome != Outcome::Ok {
        return (outcome, None);
    }
    let Ok(url) = url::Url::parse(&fetched.final_url) else {
        return (Outcome::LayoutUnknown, None);
    };
    match profile.extract(&fetched.body, &url) {
        Extraction::Listings(v) => (Outcome::Ok, Some(v)),
        Extraction::NoResults => (Outcome::Ok, Some(Vec::new())),
        Extraction::LayoutUnknown => (Outcome::LayoutUnknown, None),
    }
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
