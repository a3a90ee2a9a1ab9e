//! The one status view behind `notifio status` and the dashboard's `/api/status` (docs/architecture.md#interfaces).
//! One function builds it, so the terminal and the browser can never disagree.

use serde::{Deserialize, Serialize};

/// Request-level retry metrics in [`StatusView`]: the fetcher's own snapshot.
pub use crate::fetch::metrics::RetryStatus;

/// `GET /api/status`. Times are Unix epoch milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    /// When the view was built.
    pub now: u64,
    /// When the next waiting site comes due (the registry's `soonest()`), if any.
    pub soonest: Option<u64>,
    /// Every configured search.
    pub searches: Vec<SearchStatus>,
    /// Every site with at least one search.
    pub sites: Vec<SiteStatus>,
    /// Request-level retry metrics.
    pub retry: RetryStatus,
    /// Warnings to surface (retry rate over 5%, slow p95, …).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Every notification channel: configured ones in config order, then any that still has
    /// rows but is no longer configured.
    #[serde(default)]
    pub channels: Vec<ChannelStatus>,
    /// The config file's state: an error that keeps the running config in force, settings
    /// that need a restart.
    #[serde(default)]
    pub config: ConfigStatus,
    /// Whether a `notifio watch` runs on this state directory: without one nothing is
    /// checked, and the times shown are what a watcher will do when it starts.
    #[serde(default)]
    pub watcher: WatcherStatus,
}

/// The process that owns the state directory, if one runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatcherStatus {
    /// A `notifio watch` (or the demo) runs on the state directory.
    pub running: bool,
    /// Its pid, when known.
    pub pid: Option<u32>,
    /// A `notifio check` pass holds the state directory right now (and no watcher runs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub check_running: bool,
}

impl WatcherStatus {
    /// What the state directory's lock says.
    #[must_use]
    pub fn of(state_dir: &Path) -> Self {
        use crate::store::{Holder, StateLock};
        match StateLock::holder(state_dir) {
            Some((pid, Holder::Watch)) => Self {
                running: true,
                pid,
                check_running: false,
            },
            Some((pid, Holder::Check)) => Self {
                running: false,
                pid,
                check_running: true,
            },
            None => Self::default(),
        }
    }
}

/// The store's meta key for [`ConfigStatus`], written by the running watcher.
pub const CONFIG_META: &str = "config";

/// The config's state as the running watcher last saw it (live reload).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigStatus {
    /// Why the file as it is now cannot be used (`file:line:col: key: message`); the running
    /// config stays in force meanwhile.
    pub error: Option<String>,
    /// Settings changed in the file that apply only at the next start.
    #[serde(default)]
    pub restart_needed: Vec<String>,
}

/// One notification channel in [`StatusView`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStatus {
    /// Its name (`telegram`, `telegram-2`, `email`).
    pub name: String,
    /// How it delivers now.
    pub state: ChannelState,
    /// Messages not yet delivered.
    pub pending: u64,
    /// Messages delivered.
    pub sent: u64,
    /// When the last one was delivered.
    pub last_sent_at: Option<u64>,
    /// When the next attempt is due, while retrying.
    pub next_attempt_at: Option<u64>,
    /// Since when it failed permanently.
    pub failed_since: Option<u64>,
    /// The service's last error (never a secret).
    pub last_error: Option<String>,
}

/// How a channel delivers, in [`ChannelStatus`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelState {
    /// Delivering (or nothing to deliver).
    #[default]
    Ok,
    /// An outage: its messages are retried on the `error` ladder.
    Retrying,
    /// A permanent failure (a bad token): its messages wait until notifio starts again.
    Failed,
    /// It still has messages in the outbox but is no longer in the config.
    NotConfigured,
}

impl ChannelState {
    /// The name in JSON and tables.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::NotConfigured => "not_configured",
        }
    }
}

/// One search in [`StatusView`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchStatus {
    /// Stable id (database id).
    pub id: u32,
    /// The user's name for it.
    pub name: String,
    /// The page watched.
    pub url: String,
    /// Its site key.
    pub site: String,
    /// How it stands: `ok`, `waiting`, `probing`, `session_expired`, `search_gone`,
    /// `layout_unknown` or `paused`.
    pub state: SearchState,
    /// When it will next be checked, if known.
    pub next_check_at: Option<u64>,
    /// When it was last checked.
    pub last_checked_at: Option<u64>,
    /// The last check's outcome (`ok`, `challenge`, …).
    pub last_outcome: Option<Outcome>,
    /// The latest listings first seen by this search that its filters let through (newest
    /// first, a few).
    pub new_listings: Vec<NewListing>,
    /// Listings on its last page read ("30 found"), if it was read since filters were kept.
    #[serde(default)]
    pub found: Option<u32>,
    /// How many of them its filters let through ("4 match").
    #[serde(default)]
    pub matched: Option<u32>,
    /// A plain-language reason for its state ("idealista.com showed a challenge page; 3rd
    /// refusal; next try at …").
    #[serde(default)]
    pub reason: Option<String>,
    /// Checks it gets per hour now, as the running watcher plans them (its share of its
    /// site's budget, or its own interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks_per_hour: Option<f64>,
    /// The mean time from a listing appearing to the check that finds it, as the plan makes
    /// it (half the time between checks), in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_delay_s: Option<f64>,
    /// New listings it found per day, the last 14 days, oldest first (today last).
    #[serde(default)]
    pub new_per_day: Vec<u32>,
    /// Its listings that are gone (missed by every search on `gone_after` good checks).
    #[serde(default)]
    pub gone: u32,
    /// How long its gone listings stayed online, the mean of the latest 50, in seconds
    /// ("listings here stay online 6 h on average"); none before the first is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stays_online_s: Option<u64>,
    /// How long each of those stayed online, in seconds, oldest first (the chart).
    #[serde(default)]
    pub online_s: Vec<u64>,
}

/// A recently found listing, for the dashboard.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NewListing {
    /// Site's listing id.
    pub id: String,
    /// Title, if any.
    pub title: Option<String>,
    /// Price, if any.
    pub price: Option<f64>,
    /// Currency, if any.
    pub currency: Option<String>,
    /// Link, if any.
    pub url: Option<String>,
    /// When Notifio first saw it.
    pub first_seen: u64,
}

/// One site in [`StatusView`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteStatus {
    /// Site key.
    pub site: String,
    /// `clear | waiting | probing | session_expired`.
    pub state: SiteState,
    /// The refusal kind, when waiting/probing.
    pub kind: Option<RefusalKind>,
    /// Consecutive refusals of that kind.
    pub failures: u32,
    /// Rungs on that kind's ladder.
    pub rungs: u32,
    /// When the wait ends.
    pub next_retry_at: Option<u64>,
    /// The Retry-After the site sent with its latest refusal, in ms.
    pub retry_after_ms: Option<u64>,
    /// Whether that Retry-After lengthened the wait.
    #[serde(default)]
    pub lengthened_by_retry_after: bool,
    /// The last checks on this site, oldest first (`ok`, `challenge`, …).
    #[serde(default)]
    pub timeline: Vec<Outcome>,
    /// The dashboard can open it in a window for the user to log in or solve a challenge
    /// (it is read in the browser, and there is a display): "Open in browser".
    #[serde(default)]
    pub login: bool,
    /// Its request budget (`"4/min"`), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// Requests it got in the last hour (on a site with a budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_last_hour: Option<u32>,
    /// A suggestion (a site with two or more searches and no budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

use crate::store::{SearchRow, Store, StoreError};
use notifio_policy::time::format_countdown;
use notifio_policy::{BackoffPolicy, Entry, Outcome, RefusalKind, SearchState, SiteState};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// How many listings and timeline dots the view carries.
const RECENT_LISTINGS: usize = 5;
const TIMELINE: usize = 20;

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Builds the status view of `state_dir` at the current time, as `notifio status` shows it:
/// whether a watcher runs, and the searches of `config` (when it could be read) that the
/// state database does not know yet, as never checked. A state directory no run has used is
/// not created: its view is the config's searches, never checked.
///
/// # Errors
/// When the database exists but cannot be opened or read.
pub fn build_from_dir(
    state_dir: &Path,
    backoff: &BackoffPolicy,
    config: Option<&crate::config::Config>,
) -> Result<StatusView, StoreError> {
    let now = crate::clock::now().as_millis();
    // A file where the directory should be is an error worth its own message (Store::open's).
    let used = Store::file_in(state_dir).exists() || (state_dir.exists() && !state_dir.is_dir());
    let mut view = if used {
        build(&Store::open(state_dir)?, now, backoff)?
    } else {
        StatusView {
            now,
            ..StatusView::default()
        }
    };
    view.watcher = WatcherStatus::of(state_dir);
    if let Some(config) = config {
        add_never_checked(&mut view, config);
    }
    Ok(view)
}

/// The configured searches the view does not have (never checked by any run), and their
/// sites: state `ok`, no outcome, no next check.
fn add_never_checked(view: &mut StatusView, config: &crate::config::Config) {
    for s in config.searches.iter().filter(|s| !s.paused) {
        if view.searches.iter().any(|q| q.name == s.name) {
            continue;
        }
        view.searches.push(SearchStatus {
            name: s.name.clone(),
            url: crate::redact::url_password(&s.url).into_owned(),
            site: s.site.to_string(),
            state: SearchState::Ok,
            ..SearchStatus::default()
        });
        if !view.sites.iter().any(|x| x.site == s.site.as_str()) {
            view.sites.push(SiteStatus {
                site: s.site.to_string(),
                state: SiteState::Clear,
                ..SiteStatus::default()
            });
        }
    }
}

/// The one function that builds the status view (docs/architecture.md#interfaces) from the store.
///
/// # Errors
/// When the database cannot be read.
pub fn build(store: &Store, now: u64, backoff: &BackoffPolicy) -> Result<StatusView, StoreError> {
    let entries: HashMap<String, (Entry, bool)> = store
        .backoff_entries()?
        .into_iter()
        .map(|(site, e, probing)| (site.as_str().to_owned(), (e, probing)))
        .collect();
    let expired: Vec<String> = store
        .expired_sessions()?
        .into_iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    let rows = store.searches()?;

    let mut searches = Vec::with_capacity(rows.len());
    for row in &rows {
        let entry = entries.get(&row.site);
        searches.push(search_status(
            store,
            row,
            entry,
            expired.contains(&row.site),
            now,
        )?);
    }
    let mut site_keys: Vec<&String> = rows.iter().map(|r| &r.site).collect();
    site_keys.sort();
    site_keys.dedup();
    let mut sites = Vec::with_capacity(site_keys.len());
    for site in site_keys {
        let entry = entries.get(site);
        sites.push(site_status(
            store,
            site,
            entry,
            expired.contains(site),
            backoff,
        )?);
    }
    let soonest = entries
        .values()
        .filter(|(_, probing)| !probing)
        .map(|(e, _)| e.next_retry_at.as_millis())
        .min();
    let configured: Vec<String> = meta(store, crate::notify::sender::CHANNELS_META)?;
    let channels = channels(&configured, crate::notify::outbox::summaries(store.conn())?);
    let plan: crate::watch::PlanView = meta(store, crate::watch::PLAN_META)?;
    add_plan(&plan, &mut searches, &mut sites);
    Ok(StatusView {
        now,
        soonest,
        searches,
        sites,
        retry: meta(store, "retry")?,
        warnings: meta(store, "warnings")?,
        channels,
        config: meta(store, CONFIG_META)?,
        watcher: WatcherStatus::default(),
    })
}

/// A JSON value the watcher keeps in the store's meta table; missing or unreadable (an older
/// or newer shape): the default.
fn meta<T: serde::de::DeserializeOwned + Default>(
    store: &Store,
    key: &str,
) -> Result<T, StoreError> {
    Ok(store
        .meta(key)?
        .and_then(|j| serde_json::from_str(&j).ok())
        .unwrap_or_default())
}

/// One search as the view shows it: its state, why, when it is checked next, what it found.
fn search_status(
    store: &Store,
    row: &SearchRow,
    entry: Option<&(Entry, bool)>,
    session_expired: bool,
    now: u64,
) -> Result<SearchStatus, StoreError> {
    let state = shown_state(row, session_expired);
    let lifecycle = store.lifecycle(row.id, now)?;
    let entry = entry.map(|(e, _)| e);
    let new_listings = store
        .recent_listings(row.id, RECENT_LISTINGS)?
        .into_iter()
        .map(|(l, first_seen)| NewListing {
            id: l.id,
            title: l.title,
            price: l.price,
            currency: l.currency,
            url: l.url,
            first_seen,
        })
        .collect();
    Ok(SearchStatus {
        id: row.id,
        name: row.name.clone(),
        url: row.url.clone(),
        site: row.site.clone(),
        state,
        next_check_at: next_check_at(state, entry, row.next_check_at),
        last_checked_at: row.last_checked_at,
        last_outcome: row.last_outcome,
        new_listings,
        found: row.found,
        matched: row.matched,
        reason: search_reason(state, entry, &row.site),
        checks_per_hour: None,
        expected_delay_s: None,
        new_per_day: lifecycle.new_per_day,
        gone: lifecycle.gone,
        stays_online_s: lifecycle.stays_online_ms.map(|ms| ms / 1000),
        online_s: lifecycle.online_ms.iter().map(|ms| ms / 1000).collect(),
    })
}

/// The state a search is shown in: an expired session on its site overrides all but a pause,
/// and a healthy search whose last page had no result list is shown as `layout_unknown`.
fn shown_state(row: &SearchRow, session_expired: bool) -> SearchState {
    match row.state {
        SearchState::Paused => SearchState::Paused,
        _ if session_expired => SearchState::SessionExpired,
        SearchState::Ok if row.last_outcome == Some(Outcome::LayoutUnknown) => {
            SearchState::LayoutUnknown
        }
        state => state,
    }
}

/// A plain-language reason for a search's state, where it has one.
fn search_reason(state: SearchState, entry: Option<&Entry>, site: &str) -> Option<String> {
    match (state, entry) {
        (SearchState::Waiting | SearchState::Probing, Some(e)) => {
            let mut r = format!(
                "{site} {}; {} refusal in a row",
                e.kind.describe(),
                ordinal(e.failures)
            );
            if e.lengthened_by_retry_after {
                r.push_str("; the site's Retry-After lengthened the wait");
            }
            if state == SearchState::Probing {
                r.push_str("; this search is the probe");
            }
            Some(r)
        }
        (SearchState::SessionExpired, _) => Some(format!(
            "the session on {site} expired: log in again (`notifio login {site}` if it is read in the browser, fresh cookies if it uses a cookies file)"
        )),
        (SearchState::SearchGone, _) => {
            Some("the page is gone (404/410): check the search URL".to_owned())
        }
        (SearchState::Paused, _) => {
            Some("paused (`paused = true` in the config): not checked until resumed".to_owned())
        }
        (SearchState::LayoutUnknown, _) => Some(
            "the result list could not be found on the page: the site's layout may have changed"
                .to_owned(),
        ),
        (SearchState::Ok | SearchState::Waiting | SearchState::Probing, _) => None,
    }
}

/// When a search in `state` is checked next: a waiting one not before its site's wait ends,
/// one that waits for the user (or is the probe out now) at no planned time.
fn next_check_at(state: SearchState, entry: Option<&Entry>, planned: Option<u64>) -> Option<u64> {
    match (state, entry) {
        (SearchState::Waiting, Some(e)) => {
            Some(e.next_retry_at.as_millis().max(planned.unwrap_or(0)))
        }
        (
            SearchState::SearchGone
            | SearchState::SessionExpired
            | SearchState::Probing
            | SearchState::Paused,
            _,
        ) => None,
        (SearchState::Ok | SearchState::Waiting | SearchState::LayoutUnknown, _) => planned,
    }
}

/// One site as the view shows it: its state, its registry entry, its last checks.
fn site_status(
    store: &Store,
    site: &str,
    entry: Option<&(Entry, bool)>,
    session_expired: bool,
    backoff: &BackoffPolicy,
) -> Result<SiteStatus, StoreError> {
    let state = match entry {
        _ if session_expired => SiteState::SessionExpired,
        Some((_, true)) => SiteState::Probing,
        Some(_) => SiteState::Waiting,
        None => SiteState::Clear,
    };
    let entry = entry.map(|(e, _)| e);
    let kind = entry.map(|e| e.kind);
    Ok(SiteStatus {
        timeline: store.site_timeline(site, TIMELINE)?,
        site: site.to_owned(),
        state,
        kind,
        failures: entry.map_or(0, |e| e.failures),
        rungs: kind.map_or(0, |k: RefusalKind| backoff.rungs(k) as u32),
        next_retry_at: entry.map(|e| e.next_retry_at.as_millis()),
        retry_after_ms: entry
            .and_then(|e| e.retry_after)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        lengthened_by_retry_after: entry.is_some_and(|e| e.lengthened_by_retry_after),
        login: false,
        budget: None,
        requests_last_hour: None,
        hint: None,
    })
}

/// The running watcher's plan: each healthy search's checks per hour and expected delay, each
/// site's budget and its use.
fn add_plan(
    plan: &crate::watch::PlanView,
    searches: &mut [SearchStatus],
    sites: &mut [SiteStatus],
) {
    for q in searches {
        if let Some(p) = plan
            .searches
            .get(&q.id)
            .filter(|_| q.state == SearchState::Ok)
        {
            q.checks_per_hour = Some(p.checks_per_hour);
            q.expected_delay_s = Some(p.expected_delay_s);
        }
    }
    for site in sites {
        if let Some(p) = plan.sites.get(&site.site) {
            site.budget.clone_from(&p.budget);
            site.requests_last_hour = p.requests_last_hour;
            site.hint.clone_from(&p.hint);
        }
    }
}

/// The channels' states from the outbox's summaries, configured ones first.
fn channels(
    configured: &[String],
    mut rows: Vec<crate::notify::outbox::ChannelSummary>,
) -> Vec<ChannelStatus> {
    let rest: Vec<String> = rows
        .iter()
        .map(|r| r.channel.clone())
        .filter(|c| !configured.contains(c))
        .collect();
    let mut out = Vec::new();
    let mut take = |name: &str, known: bool| {
        let row = rows
            .iter()
            .position(|r| r.channel == name)
            .map(|i| rows.remove(i))
            .unwrap_or_default();
        let state = if !known {
            ChannelState::NotConfigured
        } else if row.failed_at.is_some() {
            ChannelState::Failed
        } else if row.last_error.is_some() && row.pending > 0 {
            ChannelState::Retrying
        } else {
            ChannelState::Ok
        };
        out.push(ChannelStatus {
            name: name.to_owned(),
            state,
            pending: row.pending,
            sent: row.sent,
            last_sent_at: row.last_sent_at,
            next_attempt_at: row
                .next_attempt_at
                .filter(|_| state == ChannelState::Retrying),
            failed_since: row.failed_at,
            last_error: row.last_error,
        });
    };
    for name in configured {
        take(name, true);
    }
    for name in rest {
        take(&name, false);
    }
    out
}

fn countdown(now: u64, at: Option<u64>) -> String {
    match at {
        None => "—".to_owned(),
        Some(t) if t <= now => "due".to_owned(),
        Some(t) => format_countdown(Duration::from_millis(t - now)),
    }
}

/// "checked about every 40 s now · typically notified within 20 s": a search's plan, as the
/// table and the dashboard say it.
#[must_use]
pub fn plan_line(q: &SearchStatus) -> Option<String> {
    let (per_hour, delay) = (q.checks_per_hour?, q.expected_delay_s?);
    let every = Duration::from_secs_f64(3600.0 / per_hour.max(1e-6));
    let within = Duration::from_secs_f64(delay.max(0.0));
    Some(format!(
        "checked about every {} now · typically notified within {}",
        about(every),
        about(within)
    ))
}

/// A duration as people round it: 40 s, 3 min, 2 h.
fn about(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 90.0 {
        format!("{:.0} s", s.round().max(1.0))
    } else if s < 5400.0 {
        format!("{:.0} min", (s / 60.0).round())
    } else {
        format!("{:.0} h", (s / 3600.0).round())
    }
}

/// `notifio status` as a table.
#[must_use]
pub fn render_table(v: &StatusView) -> String {
    let mut s = String::new();
    if !v.watcher.running {
        let busy = if v.watcher.check_running {
            " (a `notifio check` pass is running)"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "no watcher running{busy}: nothing is checked until `notifio watch` starts; a site's wait below still holds then\n"
        );
    }
    if let Some(e) = &v.config.error {
        let what = if v.watcher.running {
            "the running config stays in force until the file is fixed"
        } else {
            "`notifio watch` will not start until the file is fixed"
        };
        let _ = writeln!(s, "config error ({what}):\n  {}", e.replace('\n', "\n  "));
    }
    if !v.config.restart_needed.is_empty() {
        let _ = writeln!(
            s,
            "restart needed: {} changed in the config file; restart `notifio watch` to apply",
            v.config.restart_needed.join(", ")
        );
    }
    for w in &v.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    let _ = writeln!(
        s,
        "{:<28} {:<22} {:<16} {:>10}  LAST OUTCOME",
        "SEARCH", "SITE", "STATE", "NEXT"
    );
    for q in &v.searches {
        // Without a watcher no search is checked at any time: no countdown.
        let next = if v.watcher.running {
            countdown(v.now, q.next_check_at)
        } else {
            "—".to_owned()
        };
        let _ = writeln!(
            s,
            "{:<28} {:<22} {:<16} {:>10}  {}",
            q.name,
            q.site,
            q.state,
            next,
            q.last_outcome.map_or("never checked", Outcome::as_str)
        );
        if let Some(r) = &q.reason {
            let _ = writeln!(s, "    {}", crate::terminal::line(r));
        }
        if let Some(plan) = plan_line(q).filter(|_| v.watcher.running) {
            let _ = writeln!(s, "    {plan}");
        }
    }
    let _ = writeln!(
        s,
        "\n{:<22} {:<16} {:<13} {:>6} {:>10}  BUDGET",
        "SITE", "STATE", "KIND", "RUNG", "NEXT TRY"
    );
    for site in &v.sites {
        let rung = if site.rungs > 0 {
            format!("{} of {}", site.failures.min(site.rungs), site.rungs)
        } else {
            "—".to_owned()
        };
        let budget = match (&site.budget, site.requests_last_hour) {
            (Some(b), Some(n)) => format!("{b}, {n} requests in the last hour"),
            (Some(b), None) => b.clone(),
            (None, _) => "—".to_owned(),
        };
        let _ = writeln!(
            s,
            "{:<22} {:<16} {:<13} {:>6} {:>10}  {budget}",
            site.site,
            site.state,
            site.kind.map_or("—", RefusalKind::as_str),
            rung,
            countdown(v.now, site.next_retry_at)
        );
        if let Some(hint) = site.hint.as_deref().filter(|_| v.watcher.running) {
            let _ = writeln!(s, "    hint: {hint}");
        }
    }
    if !v.channels.is_empty() {
        let _ = writeln!(
            s,
            "\n{:<16} {:<14} {:>7} {:>7}  LAST ERROR",
            "CHANNEL", "STATE", "PENDING", "SENT"
        );
        for c in &v.channels {
            let _ = writeln!(
                s,
                "{:<16} {:<14} {:>7} {:>7}  {}",
                c.name,
                c.state.as_str(),
                c.pending,
                c.sent,
                crate::terminal::line(c.last_error.as_deref().unwrap_or("—"))
            );
        }
    }
    let r = &v.retry;
    let _ = writeln!(
        s,
        "\nrequests {}  retried {}  retry attempts {}  final failures {}  retry rate {:.1}%",
        r.requests,
        r.retried,
        r.attempts,
        r.final_failures,
        r.retry_rate * 100.0
    );
    s
}
