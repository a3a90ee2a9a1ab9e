//! What a running watcher is asked between checks: a reloaded config to apply, a preview to
//! make, a site to open in a window for the user. The driver serves these from one channel
//! ([`Watcher::requests`]), so the scheduler stays the one that decides when a site is asked.
//!
//! Applying a config ([`Watcher::apply`]) changes searches only: an added search is scheduled
//! (its first check is a silent baseline: its store row is new), a removed or paused one
//! stops and keeps its history, a changed one takes its new settings from its next check.
//! Sites' waits, probes, spacing already earned and the outbox are untouched: nothing a change
//! does lets a site be asked sooner than it would have been. A preview is a check like any
//! other (the site's wait, spacing and single probe hold; a waiting site answers "waiting"
//! without a request; a refusal counts for the site), whose listings are shown, not recorded.

use super::check::Done;
use super::pass::Reported;
use super::setup::{SearchInfo, profile_spacing, profiles_for, rules_fingerprint, sync_rows};
use super::{WatchError, Watcher};
use crate::clock::now;
use crate::config::{Config, ConfigError, SearchConfig};
use crate::extract::{self, How, SharedProfile};
use crate::fetch::FetchMode;
use crate::listing::Listing;
use crate::pages::judge;
use crate::reload::{ConfigChange, Reloaded};
use crate::status::ConfigStatus;
use crate::store::StoreError;
use notifio_policy::schedule::{SearchState, SiteState};
use notifio_policy::{Outcome, SearchId, SearchSpec, SiteKey};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

/// Previews' scheduler ids count down from here; the store's ids count up from 1.
const FIRST_PREVIEW_ID: u32 = u32::MAX;
/// A preview's page is checked once and then taken out of the schedule: it is never due again
/// before that (its interval as the scheduler sees it).
const PREVIEW_INTERVAL: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);
/// At most this many listings of a preview are sent back.
const PREVIEW_LISTINGS: usize = 100;

/// A request to the running watcher.
#[derive(Debug)]
#[non_exhaustive]
pub enum Request {
    /// The config file changed: apply it, or keep the running config and show why not.
    Reload(Box<Reloaded>),
    /// Check this search's page once and answer with what it shows, recording nothing but
    /// what the site's answer means for the site.
    Preview(Box<SearchConfig>, oneshot::Sender<PreviewResult>),
    /// Close the headless browser, open `site` in a window for the user (as `notifio login`
    /// does), and resume when they close it. Answered once the window opens.
    Login(SiteKey, oneshot::Sender<Result<String, String>>),
    /// The login window of a site was closed (sent by the watcher's own login task).
    LoginDone(SiteKey, Result<(), String>),
}

/// What a preview found.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PreviewResult {
    /// The page asked for (no password).
    pub url: String,
    /// Its site.
    pub site: String,
    /// How the check ended (`ok`, `challenge`, …), `waiting` when the site was not asked, or
    /// `error` when the preview could not be made.
    pub outcome: Reported,
    /// HTTP status, when a request was made.
    pub status: Option<u16>,
    /// Why the outcome is not `ok`, in a sentence.
    pub reason: Option<String>,
    /// The listings the page shows (the first 100).
    pub listings: Vec<Listing>,
    /// How many listings it shows in all.
    pub found: usize,
    /// When a waiting site may be asked again.
    pub next_retry_at: Option<u64>,
    /// `http` or `browser`.
    pub via: Option<FetchMode>,
    /// How the listings were read (`profile`, `auto`, `auto_fallback`), as `check --json`.
    pub read: Option<&'static str>,
    /// Where auto mode found them: a card selector to pin, or the embedded data read.
    pub structure: Option<String>,
}

/// A preview waiting for its check.
#[derive(Debug)]
struct Pending {
    info: SearchInfo,
    url: String,
    reply: oneshot::Sender<PreviewResult>,
}

/// A login window asked for, waiting for the browser checks in flight to end.
#[derive(Debug)]
struct LoginAsked {
    site: SiteKey,
    url: String,
    reply: oneshot::Sender<Result<String, String>>,
}

/// The watcher's state for live requests.
#[derive(Debug, Default)]
pub(super) struct Live {
    receiver: Option<mpsc::Receiver<Request>>,
    sender: Option<mpsc::Sender<Request>>,
    previews: HashMap<SearchId, Pending>,
    made: u32,
    config: ConfigStatus,
    /// Sites read in the browser (the dashboard offers "Open in browser" for them).
    browser_sites: Arc<Mutex<HashSet<String>>>,
    login: Option<LoginAsked>,
    /// Browser sites paused while a login window has the profile, to resume after.
    paused_for_login: Vec<SiteKey>,
}

impl Live {
    /// The receiver, for the driver loop (once).
    pub(super) fn take_receiver(&mut self) -> Option<mpsc::Receiver<Request>> {
        self.receiver.take()
    }

    /// The search a preview's check reads the page as.
    pub(super) fn preview_info(&self, id: &SearchId) -> Option<&SearchInfo> {
        self.previews.get(id).map(|p| &p.info)
    }
}

/// Receives the next request, or never when there is no channel.
pub(super) async fn next_request(rx: &mut Option<mpsc::Receiver<Request>>) -> Option<Request> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Watcher {
    /// A sender of [`Request`]s to this watcher, served by its driver loop between checks.
    /// Call before [`Watcher::run`].
    pub fn requests(&mut self) -> mpsc::Sender<Request> {
        if let Some(tx) = &self.live.sender {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(16);
        self.live.receiver = Some(rx);
        self.live.sender = Some(tx.clone());
        tx
    }

    /// The sites read in the browser, kept current across reloads (for the dashboard's
    /// "Open in browser").
    #[must_use]
    pub fn browser_sites(&self) -> Arc<Mutex<HashSet<String>>> {
        Arc::clone(&self.live.browser_sites)
    }

    /// Serves one request (the driver calls this between checks).
    pub(super) fn serve(&mut self, req: Request) -> Result<(), WatchError> {
        match req {
            Request::Reload(r) => match *r {
                Ok(config) => {
                    let change = ConfigChange::between(&self.config, config);
                    self.apply(change)
                }
                Err(e) => {
                    tracing::warn!(
                        "the config file cannot be used; the running config stays in force: {e}"
                    );
                    let restart = self.live.config.restart_needed.clone();
                    self.set_config_state(Some(e.to_string()), restart)
                }
            },
            Request::Preview(search, reply) => {
                self.preview(*search, reply);
                Ok(())
            }
            Request::Login(site, reply) => self.ask_login(site, reply),
            Request::LoginDone(site, result) => self.login_done(&site, result),
        }
    }

    /// Applies a config change (see the module docs). A change that cannot apply (a browser
    /// search with no browser, a cookies file that cannot be read) leaves everything as it was
    /// and is shown as the config's error.
    ///
    /// # Errors
    /// A store failure (the watcher stops).
    pub fn apply(&mut self, mut change: ConfigChange) -> Result<(), WatchError> {
        // Compared as settings, not as text: a comment edited is no change.
        let digest = std::mem::replace(&mut change.config.text_digest, self.config.text_digest);
        let same = change.config == self.config;
        change.config.text_digest = digest;
        if change.no_search_changes() && same {
            // The file as the watcher already runs it (the follower's first read, a save
            // without changes, a restart-only edit): nothing to rebuild.
            warn_restart(&change.restart_needed);
            return self.set_config_state(None, change.restart_needed);
        }
        let profiles = match self.prepare(&change) {
            Ok(p) => p,
            Err(message) => {
                tracing::warn!(
                    "the config change cannot apply; the running config stays in force: {message}"
                );
                let restart = change.restart_needed.clone();
                return self.set_config_state(Some(message), restart);
            }
        };
        let summary = change.summary();
        let changed = !change.no_search_changes() || change.config != self.config;
        let ConfigChange {
            renamed,
            restart_needed,
            config,
            ..
        } = change;
        let ids = self.store_searches(&renamed, &config, &profiles)?;
        self.load_changed_cookies(&config);
        self.fetcher.set_user_agents(config.site_user_agents());
        let old_urls: HashMap<String, String> = self
            .config
            .searches
            .iter()
            .map(|s| (s.name.clone(), s.url.clone()))
            .collect();
        let renamed_from: HashMap<&str, &str> = renamed
            .iter()
            .map(|(o, n)| (n.as_str(), o.as_str()))
            .collect();
        self.forget_removed(&config, &ids);
        let t = now();
        let known_sites: HashSet<SiteKey> = self.scheduler.sites().cloned().collect();
        for ((s, &db_id), shared) in config.searches.iter().zip(&ids).zip(profiles) {
            let old_name = renamed_from
                .get(s.name.as_str())
                .copied()
                .unwrap_or(&s.name);
            let old_url = old_urls.get(old_name).map(String::as_str);
            self.apply_search(s, db_id, shared, &config, old_url, t)?;
        }
        self.config = config;
        self.apply_sites(&known_sites, t)?;
        self.publish_browser_sites();
        if changed {
            tracing::info!("config reloaded: {summary}");
        }
        warn_restart(&restart_needed);
        self.set_config_state(None, restart_needed)
    }

    /// The renames, then the searches' rows: their database ids, in config order.
    fn store_searches(
        &mut self,
        renamed: &[(String, String)],
        config: &Config,
        profiles: &[SharedProfile],
    ) -> Result<Vec<u32>, WatchError> {
        self.store.transaction(|tx| {
            for (old, new) in renamed {
                tx.rename_search(old, new)?;
            }
            Ok::<_, StoreError>(())
        })?;
        Ok(self
            .store
            .sync_searches(&sync_rows(&config.searches, profiles))?)
    }

    /// A site's cookies file that changed is read again.
    fn load_changed_cookies(&self, config: &Config) {
        for (site, settings) in &config.sites {
            let was = self.config.sites.get(site).and_then(|s| s.cookies.as_ref());
            if let Some(path) = settings.cookies.as_ref().filter(|p| Some(*p) != was) {
                // Read in `prepare` already; read again only if it changed since (then the
                // check at start of the next run reports it).
                if let Ok(jar) = crate::fetch::cookies::load(path) {
                    self.fetcher
                        .set_cookies(SiteKey::from_stored(site.clone()), jar);
                }
            }
        }
    }

    /// The searches no longer watched (removed, or paused) leave the schedule.
    fn forget_removed(&mut self, config: &Config, ids: &[u32]) {
        let keep: HashSet<SearchId> = config
            .searches
            .iter()
            .zip(ids)
            .filter(|(s, _)| !s.paused)
            .map(|(_, id)| SearchId(*id))
            .collect();
        let gone: Vec<SearchId> = self
            .searches
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !keep.contains(id))
            .collect();
        for id in gone {
            self.forget(id);
        }
    }

    /// One search of the new config into the schedule: paused, new or moved to another URL
    /// (due now, its old page forgotten), or kept with its new interval and pages.
    fn apply_search(
        &mut self,
        s: &SearchConfig,
        db_id: u32,
        shared: SharedProfile,
        config: &Config,
        old_url: Option<&str>,
        t: notifio_policy::Timestamp,
    ) -> Result<(), WatchError> {
        let id = SearchId(db_id);
        if s.paused {
            return self.write_paused(db_id);
        }
        let rules = rules_fingerprint(shared.profile.as_ref());
        let has_cookies = config
            .sites
            .get(s.site.as_str())
            .is_some_and(|x| x.cookies.is_some());
        let info = SearchInfo::new(s, db_id, shared, self.searches.channels(), has_cookies);
        let (moved, reread) = match self.searches.get(&id) {
            Some(was) => (
                old_url.is_none_or(|u| u != s.url),
                rules_fingerprint(was.profile.as_ref()) != rules,
            ),
            None => (true, true),
        };
        if moved {
            self.scheduler.remove_search(id);
            self.scheduler.add_search(
                SearchSpec {
                    id,
                    url: s.url.clone(),
                    site: s.site.clone(),
                    interval: s.interval,
                    first_due: None,
                    pages: s.pages,
                },
                t,
            );
        } else {
            self.scheduler.set_interval(id, s.interval);
            self.scheduler.set_pages(id, s.pages);
        }
        if reread {
            self.pages.remove(&id);
        }
        self.searches.insert(id, info);
        if moved {
            // Due now: its state on disk says so until its first check.
            let row = (SearchState::Ok, Some(t.as_millis()));
            self.store
                .transaction(|tx| self.journal.write_state(tx, id, row))?;
        }
        Ok(())
    }

    /// Every site's spacing and budget as the new config says, its plan redone; a site new to
    /// the scheduler whose session expired before stays paused.
    fn apply_sites(
        &mut self,
        known_sites: &HashSet<SiteKey>,
        t: notifio_policy::Timestamp,
    ) -> Result<(), WatchError> {
        let expired = self.store.expired_sessions()?;
        for site in self.searches.sites().cloned().collect::<Vec<_>>() {
            let spacing = self.spacing_of(&site);
            self.scheduler.set_spacing(&site, spacing);
            // A budget set, changed or taken away applies from the next check on.
            self.scheduler
                .set_budget(&site, self.config.budget_for(&site));
            self.plans
                .replan(&site, &self.searches, &self.config, &mut self.scheduler, t);
            if !known_sites.contains(&site) && expired.contains(&site) {
                self.scheduler.pause_site(&site);
                self.fetcher.close_site(site);
            }
        }
        Ok(())
    }

    /// Everything a change needs that can fail, before anything is changed: each search's
    /// profile (in the new config's order), the browser, the cookies files.
    fn prepare(&self, change: &ConfigChange) -> Result<Vec<SharedProfile>, String> {
        let config = &change.config;
        if config.uses_browser() && self.fetcher.browser().is_none() {
            let why = match super::browser_for(config) {
                Err(e) => e.to_string(),
                Ok(_) => "a browser was found, but this watcher started without one".into(),
            };
            return Err(format!(
                "{why} (restart notifio watch once the browser is installed)"
            ));
        }
        for (site, settings) in &config.sites {
            let was = self.config.sites.get(site).and_then(|s| s.cookies.as_ref());
            if let Some(path) = settings.cookies.as_ref().filter(|p| Some(*p) != was) {
                crate::fetch::cookies::load(path).map_err(|e| format!("site `{site}`: {e}"))?;
            }
        }
        profiles_for(config).map_err(|e| e.to_string())
    }

    /// The spacing in force for a site ([`Searches::spacing_of`](super::setup::Searches::spacing_of)).
    fn spacing_of(&self, site: &SiteKey) -> std::time::Duration {
        self.searches.spacing_of(site, &self.config)
    }

    /// Takes a search out of the schedule (removed or paused); its rows stay in the store.
    pub(super) fn forget(&mut self, id: SearchId) {
        self.plans.forget(id.0);
        self.scheduler.remove_search(id);
        self.searches.remove(id);
        self.pages.remove(&id);
        self.journal.forget(id.0);
    }

    fn write_paused(&mut self, db_id: u32) -> Result<(), WatchError> {
        Ok(self.store.transaction(|tx| {
            self.journal
                .write_state(tx, SearchId(db_id), (SearchState::Paused, None))
        })?)
    }

    /// At start: paused searches are in the store (and the dashboard) but not scheduled; what a
    /// previous `watch` said of its config file no longer holds.
    pub(super) fn park_paused(&mut self) -> Result<(), WatchError> {
        if self.mode == super::Mode::Forever {
            let fresh = serde_json::to_string(&ConfigStatus::default()).unwrap_or_default();
            self.store
                .transaction(|tx| tx.put_meta(crate::status::CONFIG_META, &fresh))?;
        }
        let paused: Vec<String> = self
            .config
            .searches
            .iter()
            .filter(|s| s.paused)
            .map(|s| s.name.clone())
            .collect();
        let ids: Vec<SearchId> = self
            .searches
            .iter()
            .filter(|(_, info)| paused.contains(&info.name))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.forget(id);
            self.write_paused(id.0)?;
        }
        self.publish_browser_sites();
        Ok(())
    }

    fn publish_browser_sites(&self) {
        let sites: HashSet<String> = self
            .searches
            .iter()
            .filter(|(_, s)| s.fetch == FetchMode::Browser)
            .map(|(_, s)| s.site.to_string())
            .collect();
        if let Ok(mut set) = self.live.browser_sites.lock() {
            *set = sites;
        }
    }

    fn set_config_state(
        &mut self,
        error: Option<String>,
        restart_needed: Vec<String>,
    ) -> Result<(), WatchError> {
        let state = ConfigStatus {
            error,
            restart_needed,
        };
        if state != self.live.config {
            if let Ok(json) = serde_json::to_string(&state) {
                self.store
                    .transaction(|tx| tx.put_meta(crate::status::CONFIG_META, &json))?;
            }
            self.live.config = state;
        }
        Ok(())
    }

    /// Schedules a preview, or answers at once when its site may not be asked now.
    fn preview(&mut self, s: SearchConfig, reply: oneshot::Sender<PreviewResult>) {
        let url = crate::redact::url_password(&s.url).into_owned();
        // A preview that cannot be made is an `error` to the page, with the reason.
        let failed = |reason: String| PreviewResult {
            url: url.clone(),
            site: s.site.to_string(),
            outcome: Reported::Checked(Outcome::Error),
            reason: Some(reason),
            via: Some(s.fetch),
            ..PreviewResult::default()
        };
        if let Some(early) = self.not_now(&s.site, s.fetch) {
            let _ = reply.send(PreviewResult {
                url,
                site: s.site.to_string(),
                via: Some(s.fetch),
                ..early
            });
            return;
        }
        if self.mode != super::Mode::Forever {
            let _ = reply.send(failed("previews need a running watcher".into()));
            return;
        }
        if s.fetch == FetchMode::Browser && self.fetcher.browser().is_none() {
            let _ = reply.send(failed(
                "this site is read with the browser, and this watcher has none: install Chromium and restart notifio watch".into(),
            ));
            return;
        }
        let forced = s.profile.as_deref().or_else(|| {
            self.config
                .sites
                .get(s.site.as_str())
                .and_then(|x| x.profile.as_deref())
        });
        let shared = match extract::ProfileCache::new(Arc::clone(&self.config.profiles)).shared_for(
            &s.site,
            forced,
            s.listing.as_ref(),
        ) {
            Ok(p) => p,
            Err(e) => {
                let _ = reply.send(failed(e.to_string()));
                return;
            }
        };
        let id = SearchId(FIRST_PREVIEW_ID - self.live.made % (1 << 30));
        self.live.made = self.live.made.wrapping_add(1);
        let has_cookies = self
            .config
            .sites
            .get(s.site.as_str())
            .is_some_and(|x| x.cookies.is_some());
        let info = SearchInfo::new(&s, 0, shared, &[], has_cookies);
        if self.scheduler.site_index(&s.site).is_none() {
            // A site no search is on yet: the rule of `Searches::spacing_of`, with the preview
            // as its only search.
            let spacing = self
                .config
                .spacing_for(&s.site, profile_spacing([info.profile.as_ref()]));
            self.scheduler.set_spacing(&s.site, spacing);
        }
        let t = now();
        self.scheduler.add_search(
            SearchSpec {
                id,
                url: s.url.clone(),
                site: s.site.clone(),
                interval: PREVIEW_INTERVAL,
                first_due: None,
                pages: s.pages,
            },
            t,
        );
        self.scheduler.hasten(id, t);
        tracing::info!(site = %s.site, "preview scheduled");
        self.live.previews.insert(id, Pending { info, url, reply });
    }

    /// Why `site` may not be asked now, as a preview's answer, or `None` when it may. While a
    /// login window has the browser's profile, nothing is read in the browser.
    fn not_now(&self, site: &SiteKey, fetch: FetchMode) -> Option<PreviewResult> {
        let login_open = self.live.login.is_some() || !self.live.paused_for_login.is_empty();
        if login_open && (fetch == FetchMode::Browser || self.live.paused_for_login.contains(site))
        {
            return Some(PreviewResult {
                outcome: Reported::Waiting,
                reason: Some("a login window has the browser; try again once it is closed".into()),
                ..PreviewResult::default()
            });
        }
        match self.scheduler.site_state(site) {
            SiteState::Clear => None,
            SiteState::SessionExpired => Some(PreviewResult {
                outcome: Reported::Checked(Outcome::SessionExpired),
                reason: Some(format!(
                    "the session on {site} expired: log in again (Open in browser, or `notifio login {site}`)"
                )),
                ..PreviewResult::default()
            }),
            SiteState::Waiting | SiteState::Probing => {
                let entry = self.scheduler.registry().entry(site);
                Some(PreviewResult {
                    outcome: Reported::Waiting,
                    reason: Some(match entry {
                        Some(e) if self.scheduler.site_state(site) == SiteState::Waiting => {
                            crate::reason::of_waiting(e, now())
                        }
                        _ => {
                            format!("{site} is being probed after a wait; not asked twice at once")
                        }
                    }),
                    next_retry_at: entry.map(|e| e.next_retry_at.as_millis()),
                    ..PreviewResult::default()
                })
            }
        }
    }

    /// After a check: answers the previews it served (their listings read with their own
    /// rules, off the driver), and those whose site may no longer be asked; starts a login
    /// window that was waiting for the browser checks to end.
    pub(super) fn after_check(&mut self, done: &Done) {
        for id in done.check.searches.iter() {
            let Some(p) = self.live.previews.remove(id) else {
                continue;
            };
            self.scheduler.remove_search(*id);
            let fetched = done.fetched.clone();
            tokio::spawn(async move {
                let Pending { info, url, reply } = p;
                let judged = judge(
                    &fetched,
                    &info.profile,
                    &info.markers,
                    info.has_session,
                    false,
                    None,
                )
                .await;
                let outcome = judged.outcome;
                let mut listings = judged.listings.unwrap_or_default();
                let found = listings.len();
                listings.truncate(PREVIEW_LISTINGS);
                let _ = reply.send(PreviewResult {
                    url,
                    site: info.site.to_string(),
                    outcome: Reported::Checked(outcome),
                    status: fetched.status(),
                    reason: crate::reason::of_check(
                        outcome,
                        &fetched,
                        &info.markers,
                        judged.unreadable.as_ref(),
                    ),
                    listings,
                    found,
                    next_retry_at: None,
                    via: Some(fetched.via),
                    read: judged.how.as_ref().map(How::as_str),
                    structure: judged
                        .how
                        .as_ref()
                        .and_then(How::structure)
                        .map(ToString::to_string),
                });
            });
        }
        let stalled: Vec<SearchId> = self
            .live
            .previews
            .iter()
            .filter(|(id, p)| {
                self.scheduler.site_state(&p.info.site) != SiteState::Clear
                    && !self.running.values().any(|c| c.searches.contains(id))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in stalled {
            if let Some(p) = self.live.previews.remove(&id) {
                self.scheduler.remove_search(id);
                let early = self.not_now(&p.info.site, p.info.fetch).unwrap_or_default();
                let _ = p.reply.send(PreviewResult {
                    url: p.url,
                    site: p.info.site.to_string(),
                    via: Some(p.info.fetch),
                    ..early
                });
            }
        }
        self.maybe_open_login();
    }

    /// "Open in browser": pauses the sites read in the browser, and opens the window once no
    /// browser check is out.
    fn ask_login(
        &mut self,
        site: SiteKey,
        reply: oneshot::Sender<Result<String, String>>,
    ) -> Result<(), WatchError> {
        if self.live.login.is_some() || !self.live.paused_for_login.is_empty() {
            let _ = reply.send(Err("a login window is open already".into()));
            return Ok(());
        }
        let Some(first) = self.config.searches.iter().find(|s| s.site == site) else {
            let _ = reply.send(Err(format!("no search is on {site}")));
            return Ok(());
        };
        if first.fetch != FetchMode::Browser || self.fetcher.browser().is_none() {
            let _ = reply.send(Err(format!(
                "{site} is not read in the browser: fresh cookies go into its cookies file"
            )));
            return Ok(());
        }
        if !crate::fetch::browser::has_display() {
            let _ = reply.send(Err(
                "there is no display to open a window on: run `notifio login` in your desktop session".into(),
            ));
            return Ok(());
        }
        let url = self
            .config
            .sites
            .get(site.as_str())
            .and_then(|s| s.login_url.clone())
            .unwrap_or_else(|| first.url.clone());
        let browser_sites: Vec<SiteKey> = self
            .searches
            .iter()
            .filter(|(_, s)| s.fetch == FetchMode::Browser)
            .map(|(_, s)| s.site.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .filter(|s| self.scheduler.site_state(s) != SiteState::SessionExpired)
            .collect();
        for s in &browser_sites {
            self.scheduler.pause_site(s);
        }
        self.live.paused_for_login = browser_sites;
        self.live.login = Some(LoginAsked { site, url, reply });
        self.maybe_open_login();
        Ok(())
    }

    fn maybe_open_login(&mut self) {
        let busy = self.running.values().any(|c| {
            c.searches
                .iter()
                .filter_map(|id| self.searches.get(id).or_else(|| self.live.preview_info(id)))
                .any(|s| s.fetch == FetchMode::Browser)
        });
        if busy {
            return;
        }
        let Some(LoginAsked { site, url, reply }) = self.live.login.take() else {
            return;
        };
        let launch = super::browser_for(&self.config).map(|b| b.launch);
        let (executable, profile_dir) = match launch {
            Ok(crate::fetch::Launch::Start {
                executable,
                profile_dir,
                ..
            }) => (executable, profile_dir),
            Ok(crate::fetch::Launch::Connect { url: devtools }) => {
                let _ = reply.send(Err(format!(
                    "Notifio reads {site} in your own browser ({devtools}): log in there"
                )));
                self.resume_after_login();
                return;
            }
            Err(e) => {
                let _ = reply.send(Err(e.to_string()));
                self.resume_after_login();
                return;
            }
        };
        let fetcher = self.fetcher.clone();
        let back = self.live.sender.clone();
        let _ = reply.send(Ok(format!(
            "{site} is open in a window: log in (or solve the challenge), then close the window"
        )));
        tracing::info!(%site, "opening a login window; browser checks wait until it is closed");
        tokio::spawn(async move {
            let result = match fetcher.browser() {
                Some(browser) => {
                    browser
                        .while_closed(crate::fetch::browser::login(
                            &executable,
                            &profile_dir,
                            &url,
                        ))
                        .await
                }
                None => Err("no browser".into()),
            };
            if let Some(back) = back {
                let _ = back.send(Request::LoginDone(site, result)).await;
            }
        });
    }

    fn resume_after_login(&mut self) {
        for s in std::mem::take(&mut self.live.paused_for_login) {
            self.scheduler.resume_site(&s);
        }
    }

    fn login_done(&mut self, site: &SiteKey, result: Result<(), String>) -> Result<(), WatchError> {
        self.resume_after_login();
        match result {
            Ok(()) => {
                tracing::info!(%site, "login window closed; checks resume with that session");
                if self.scheduler.site_state(site) == SiteState::SessionExpired {
                    self.scheduler.resume_site(site);
                    self.fetcher.open_site(site);
                    let t = now();
                    self.store.transaction(|tx| {
                        tx.set_session_expired(site, false, t.as_millis())?;
                        self.journal.write_site(
                            tx,
                            &self.scheduler,
                            site,
                            self.searches.on_site(site),
                            t,
                        )
                    })?;
                }
            }
            Err(e) => tracing::warn!(%site, "the login window failed: {e}"),
        }
        Ok(())
    }
}

/// Says in the log which settings wait for a restart, if any.
fn warn_restart(keys: &[String]) {
    if !keys.is_empty() {
        tracing::warn!(
            "restart notifio watch to apply: {} (the running values stay in force)",
            keys.join(", ")
        );
    }
}

/// A config error as the dashboard's API shows it: the message and the key, relative to the
/// search it is in (`url`, `listing.selector`) when it is in `search[index]`.
#[must_use]
pub fn field_of(e: &ConfigError, index: usize) -> Option<String> {
    let prefix = format!("search[{index}]");
    e.key
        .strip_prefix(&prefix)
        .map(|rest| rest.trim_start_matches('.').to_owned())
        .filter(|f| !f.is_empty())
}
