//! From a config to a watcher ready to run: the fetcher and its cookies, each search's site
//! profile and channels, the store's rows for the searches, and the scheduler with the plan and
//! the waits the store remembers (a restart neither knocks early nor re-checks at once).
//!
//! Every check of a config that needs the machine but not the network happens here, before the
//! first request: a session without cookies, a profile that cannot be built, a missing browser.

use super::{Journal, Mode, WatchError, Watcher};
use crate::clock::now;
use crate::config::{Config, SearchConfig};
use crate::extract::immoscout24_app::AppSearch;
use crate::extract::{self, SharedProfile, SiteProfile};
use crate::fetch::{BrowserConfig, FetchConfig, FetchMode, Fetcher, Launch};
use crate::filter::AnnounceRules;
use crate::notify::ChannelName;
use crate::store::{Holder, SearchSync, Store, StoreError};
use notifio_policy::{
    Markers, Registry, Scheduler, SchedulerConfig, SearchId, SearchSpec, SiteKey, Timestamp,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, broadcast};

/// One search as the watcher knows it.
#[derive(Debug, Clone)]
pub(super) struct SearchInfo {
    pub(super) db_id: u32,
    pub(super) name: String,
    pub(super) notify_existing: bool,
    /// The channels its notifications go to (its `notify = [...]`, else all).
    pub(super) channels: Vec<ChannelName>,
    pub(super) profile: Arc<dyn SiteProfile>,
    /// The profile's markers, built once per profile (not per check: ~15 strings each).
    pub(super) markers: Arc<Markers>,
    pub(super) has_session: bool,
    pub(super) site: SiteKey,
    /// Over HTTP, in the browser, or as the site's app asks.
    pub(super) fetch: FetchMode,
    /// Result pages a check reads at most.
    pub(super) pages: u32,
    /// With `fetch = "app"`: the request sent instead of a GET of the search's URL.
    pub(super) app: Option<Arc<AppSearch>>,
    /// What of its news is announced (filters, price rules).
    pub(super) rules: Arc<AnnounceRules>,
    /// Its own interval: without a budget the time between its checks, with one the
    /// shortest it gets.
    pub(super) interval: Duration,
    /// With a budget, it is checked at least this often.
    pub(super) max_interval: Duration,
    /// With a budget, the hours its listings come in.
    pub(super) active_hours: Option<notifio_policy::ActiveHours>,
}

impl SearchInfo {
    /// A configured search as the driver keeps it: `shared` is its profile, `channels` every
    /// configured channel, `has_cookies` whether its site has a cookies file.
    pub(super) fn new(
        s: &SearchConfig,
        db_id: u32,
        shared: SharedProfile,
        channels: &[ChannelName],
        has_cookies: bool,
    ) -> Self {
        let SharedProfile { profile, markers } = shared;
        Self {
            db_id,
            name: s.name.clone(),
            notify_existing: s.notify_existing,
            channels: match &s.notify {
                Some(names) => channels
                    .iter()
                    .filter(|c| names.iter().any(|n| n == c.as_str()))
                    .cloned()
                    .collect(),
                None => channels.to_vec(),
            },
            has_session: s.fetch == FetchMode::Browser || has_cookies,
            fetch: s.fetch,
            pages: s.pages,
            app: s.app.clone(),
            markers,
            profile,
            site: s.site.clone(),
            rules: Arc::clone(&s.announce),
            interval: s.interval,
            max_interval: s.max_interval,
            active_hours: s.active_hours,
        }
    }
}

/// The configured searches, by id and by site, and every configured channel.
#[derive(Debug, Default)]
pub(super) struct Searches {
    by_id: HashMap<SearchId, SearchInfo>,
    by_site: HashMap<SiteKey, Vec<SearchId>>,
    /// All channels, in configured order.
    channels: Vec<ChannelName>,
}

impl Searches {
    pub(super) fn get(&self, id: &SearchId) -> Option<&SearchInfo> {
        self.by_id.get(id)
    }

    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Every configured channel, in configured order.
    pub(super) fn channels(&self) -> &[ChannelName] {
        &self.channels
    }

    /// The sites that have a search.
    pub(super) fn sites(&self) -> impl Iterator<Item = &SiteKey> {
        self.by_site.keys()
    }

    /// Adds or replaces a search (a reload); a search that moved to another site leaves the
    /// old one.
    pub(super) fn insert(&mut self, id: SearchId, info: SearchInfo) {
        let moved_from = self
            .by_id
            .get(&id)
            .map(|was| was.site.clone())
            .filter(|was| *was != info.site);
        if let Some(was) = moved_from {
            self.leave_site(id, &was);
        }
        let on_site = self.by_site.entry(info.site.clone()).or_default();
        if !on_site.contains(&id) {
            on_site.push(id);
        }
        self.by_id.insert(id, info);
    }

    /// Takes a search out (removed or paused).
    pub(super) fn remove(&mut self, id: SearchId) -> Option<SearchInfo> {
        let info = self.by_id.remove(&id)?;
        self.leave_site(id, &info.site);
        Some(info)
    }

    fn leave_site(&mut self, id: SearchId, site: &SiteKey) {
        if let Some(ids) = self.by_site.get_mut(site) {
            ids.retain(|x| *x != id);
            if ids.is_empty() {
                self.by_site.remove(site);
            }
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&SearchId, &SearchInfo)> {
        self.by_id.iter()
    }

    /// The searches on `site`, in config order.
    pub(super) fn on_site(&self, site: &SiteKey) -> &[SearchId] {
        self.by_site.get(site).map_or(&[], Vec::as_slice)
    }

    /// The spacing in force for `site` ([`Config::spacing_for`]): the first of its searches'
    /// profiles that asks for one, in the order they were added. Every caller (start, a
    /// config applied live) asks here.
    pub(super) fn spacing_of(&self, site: &SiteKey, config: &Config) -> Duration {
        let profiles = self
            .on_site(site)
            .iter()
            .filter_map(|id| self.get(id))
            .map(|i| i.profile.as_ref());
        config.spacing_for(site, profile_spacing(profiles))
    }

    /// The names of `ids`, for events and notifications.
    pub(super) fn names(&self, ids: &[SearchId]) -> Vec<String> {
        ids.iter()
            .filter_map(|id| self.by_id.get(id))
            .map(|s| s.name.clone())
            .collect()
    }

    /// The channels of every search on `site`: where news about the site goes, in configured
    /// order whatever order the searches listed them in.
    pub(super) fn site_channels(&self, site: &SiteKey) -> Vec<ChannelName> {
        let mut out: Vec<ChannelName> = Vec::new();
        for s in self
            .on_site(site)
            .iter()
            .filter_map(|id| self.by_id.get(id))
        {
            for c in &s.channels {
                if !out.contains(c) {
                    out.push(c.clone());
                }
            }
        }
        out.sort_by_key(|c| self.channels.iter().position(|x| x == c));
        out
    }
}

impl Watcher {
    pub(super) fn build(
        config: Config,
        channels: Vec<ChannelName>,
        force: bool,
        mode: Mode,
    ) -> Result<Self, WatchError> {
        let mut store = Store::open(&config.watch.state_dir)?;
        // A one-pass run owns the schedule when no watcher does, and is a watcher's guest
        // otherwise (store/lock.rs). `watch` takes the lock itself (runner.rs).
        let lock = match mode {
            Mode::Forever => None,
            Mode::OnePass => match Store::lock(&config.watch.state_dir, Holder::Check) {
                Ok(lock) => Some(lock),
                Err(StoreError::Locked { pid, by, .. }) => {
                    tracing::info!(
                        ?pid,
                        ?by,
                        "a notifio run owns the state directory; this pass leaves the schedule to it"
                    );
                    None
                }
                Err(e) => return Err(e.into()),
            },
        };
        let guest = mode == Mode::OnePass && lock.is_none();
        let fetcher = fetcher_for(&config)?;
        let sessions = load_cookies(&config, &fetcher)?;
        let profiles = profiles_for(&config)?;
        let ids = store.sync_searches(&sync_rows(&config.searches, &profiles))?;
        let searches = searches(&config, &ids, profiles, &sessions, channels)?;
        let site_spacing = searches
            .sites()
            .map(|site| (site.clone(), searches.spacing_of(site, &config)))
            .collect();

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
        if mode == Mode::OnePass {
            // Each search once, and what is stored as its next check is the time a watcher
            // would check it next (its interval from now), never a "not in this pass" time.
            scheduler.check_each_once();
        }
        let start = now();
        let stored = store.searches()?;
        for (s, &db_id) in config.searches.iter().zip(&ids) {
            // Resume the plan across restarts: a search checked recently is not re-checked at
            // once. A one-pass run checks every search now, whatever the plan says.
            let first_due = match mode {
                Mode::Forever => stored
                    .iter()
                    .find(|r| r.id == db_id)
                    .and_then(|r| r.next_check_at)
                    .map(Timestamp)
                    .filter(|t| *t > start),
                Mode::OnePass => None,
            };
            scheduler.add_search(
                SearchSpec {
                    id: SearchId(db_id),
                    url: s.url.clone(),
                    site: s.site.clone(),
                    interval: s.interval,
                    first_due,
                    pages: s.pages,
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
        for site in searches.sites() {
            scheduler.set_budget(site, config.budget_for(site));
        }
        let mut plans = super::budget::Plans::load(store.arrival_rates()?, start);
        for site in searches.sites().cloned().collect::<Vec<_>>() {
            plans.replan(&site, &searches, &config, &mut scheduler, start);
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
        let mut watcher = Self {
            slow_after: slow_after(&config.retry),
            config,
            store,
            scheduler,
            fetcher,
            searches,
            pages,
            journal: if guest {
                Journal::guest()
            } else {
                Journal::default()
            },
            _lock: lock,
            plans,
            running: HashMap::new(),
            mode,
            outbox_wake: Arc::new(Notify::new()),
            events,
            metrics: Arc::default(),
            live: Default::default(),
        };
        watcher.park_paused()?;
        Ok(watcher)
    }
}

/// The store's rows for `searches` (read with `profiles`, in the same order).
pub(super) fn sync_rows(searches: &[SearchConfig], profiles: &[SharedProfile]) -> Vec<SearchSync> {
    searches
        .iter()
        .zip(profiles)
        .map(|(s, p)| SearchSync {
            name: s.name.clone(),
            // What the database, `status` and the dashboard show: never a password.
            url: crate::redact::url_password(&s.url).into_owned(),
            site: s.site.as_str().to_owned(),
            rules: rules_fingerprint(p.profile.as_ref()),
        })
        .collect()
}

/// The fetcher `config` asks for: its retry classes, limits and headers, and the browser when a
/// search is read with one.
fn fetcher_for(config: &Config) -> Result<Fetcher, WatchError> {
    let defaults = FetchConfig::default();
    let fetch_cfg = FetchConfig {
        retry: config.retry.clone(),
        body_cap: config.fetch.body_cap,
        browser: if config.uses_browser() {
            Some(browser_for(config).map_err(WatchError::Browser)?)
        } else {
            // Started only by a browser check: a search a reload adds, or a preview.
            browser_for(config).ok()
        },
        user_agent: config
            .fetch
            .user_agent
            .clone()
            .unwrap_or(defaults.user_agent.clone()),
        accept_language: config
            .fetch
            .accept_language
            .clone()
            .unwrap_or(defaults.accept_language.clone()),
        ..defaults
    };
    let fetcher = Fetcher::new(fetch_cfg).map_err(|e| WatchError::Fetch(e.to_string()))?;
    fetcher.set_user_agents(config.site_user_agents());
    Ok(fetcher)
}

/// Loads each site's `cookies` file into the fetcher; the cookie names per site, to check the
/// sessions that profiles need.
fn load_cookies(
    config: &Config,
    fetcher: &Fetcher,
) -> Result<HashMap<SiteKey, Vec<String>>, WatchError> {
    let mut sessions = HashMap::new();
    for (key, settings) in &config.sites {
        if let Some(path) = &settings.cookies {
            let site = SiteKey::from_stored(key.clone());
            let jar = crate::fetch::cookies::load(path)
                .map_err(|e| WatchError::Cookies(format!("site `{key}`: {e}")))?;
            let names = jar.names();
            fetcher.set_cookies(site.clone(), jar);
            sessions.insert(site, names);
        }
    }
    Ok(sessions)
}

/// Each search's profile (its own, else its site's, else the site's default), in config order;
/// searches with the same rules share one.
pub(super) fn profiles_for(config: &Config) -> Result<Vec<SharedProfile>, WatchError> {
    let mut made = extract::ProfileCache::new(Arc::clone(&config.profiles));
    config
        .searches
        .iter()
        .map(|s| {
            let forced = s.profile.as_deref().or_else(|| {
                config
                    .sites
                    .get(s.site.as_str())
                    .and_then(|x| x.profile.as_deref())
            });
            made.shared_for(&s.site, forced, s.listing.as_ref())
                .map_err(|source| WatchError::Profile {
                    search: s.name.clone(),
                    source,
                })
        })
        .collect()
}

/// The spacing a site's profile asks for: the first of its searches' profiles that asks.
pub(super) fn profile_spacing<'a>(
    profiles: impl IntoIterator<Item = &'a dyn SiteProfile>,
) -> Option<Duration> {
    profiles.into_iter().find_map(|p| p.default_spacing())
}

/// The searches as the watcher knows them. A profile that needs a logged-in session, read over
/// plain HTTP, must have the cookies it names (in the browser, the profile is the session:
/// `notifio login`).
fn searches(
    config: &Config,
    ids: &[u32],
    profiles: Vec<SharedProfile>,
    sessions: &HashMap<SiteKey, Vec<String>>,
    channels: Vec<ChannelName>,
) -> Result<Searches, WatchError> {
    let mut out = Searches::default();
    for ((s, &db_id), shared) in config.searches.iter().zip(ids).zip(profiles) {
        if shared.profile.needs_cookies()
            && s.fetch == FetchMode::Http
            && let Some(problem) = session_problem(shared.profile.as_ref(), sessions.get(&s.site))
        {
            return Err(WatchError::NeedsSession {
                search: s.name.clone(),
                site: s.site.to_string(),
                problem,
            });
        }
        let info = SearchInfo::new(s, db_id, shared, &channels, sessions.contains_key(&s.site));
        out.insert(SearchId(db_id), info);
    }
    out.channels = channels;
    Ok(out)
}

/// What is wrong with the cookies a profile needs, if anything.
fn session_problem(profile: &dyn SiteProfile, cookies: Option<&Vec<String>>) -> Option<String> {
    let Some(names) = cookies else {
        return Some("no cookies file is configured for it".to_owned());
    };
    let missing: Vec<_> = profile
        .required_cookies()
        .iter()
        .filter(|c| !names.iter().any(|n| n == *c))
        .collect();
    (!missing.is_empty()).then(|| {
        format!("the cookies file lacks {missing:?} (are you logged in when you export it?)")
    })
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
pub(super) fn rules_fingerprint(profile: &dyn SiteProfile) -> String {
    let rules = format!("{}/{profile:?}", env!("CARGO_PKG_VERSION"));
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(rules.as_bytes()))
}
