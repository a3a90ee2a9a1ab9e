//! The scheduler: which search to check next, and when (docs/architecture.md#scheduling), as a pure state machine.
//!
//! quinn-proto's shape: the driver calls [`Scheduler::poll_due`] until it returns `None` (or
//! [`Scheduler::poll_due_into`] once, the same checks in one batch), sleeps until
//! [`Scheduler::poll_timeout`], and reports each check's result with
//! [`Scheduler::handle_outcome`]. One timer drives everything; spurious wake-ups are harmless.
//!
//! What it owns, and why here: per-search due times (interval ±10% jitter, so searches sharing
//! a cycle drift apart); site spacing and one request in flight per site (a site never sees a
//! burst from us); the global concurrency cap; the registry gate with the single probe (when a
//! wait expires one search goes back in, not five); single-flight (two searches with the same
//! URL are one fetch, of one *page*); and parking searches of waiting or session-expired sites.
//!
//! The site is the unit of timing. A site keeps its pages that wait for a check in a queue by
//! due time, and has at most one wake-up in the timer wheel (`timers.rs`): at the first
//! [`TICK`] at or after the later of its next allowed start (spacing) and its first page's due
//! time. When it wakes it checks that page, unless something holds it back: a registry wait
//! (found when it wakes, and slept off with a new wake-up) or a paused session. While its
//! check is out it has no wake-up; the outcome queues the page again at its next due time and
//! wakes the site again. A [`Check`] is a small `Copy` value whose id names the site, the page
//! and the site's check count, so an outcome finds its site without a map and a stale id
//! matches nothing.
//!
//! The order is defined, so that a plan can be reproduced: sites that wake on the same tick
//! go in the order their wake-ups were set, and a site checks its earliest due page, ties
//! going to the page added first. `tests/it/scheduler_reference.rs` checks this scheduler against
//! a plain reference one, step by step.

use crate::allocate::RequestBudget;
use crate::backoff::RefusalKind;
use crate::classify::Outcome;
use crate::jitter::{Draws, INTERVAL_JITTER, Jitter};
use crate::registry::{Admission, Entry, Registry};
use crate::site::SiteKey;
use crate::time::Timestamp;
use crate::timers::Wheel;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A configured search's identity (its index in the config, or its database id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SearchId(pub u32);

/// One check handed to the driver. Opaque: the scheduler encodes which search it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckId(pub u64);

/// A search as the scheduler needs it.
#[derive(Clone, Debug)]
pub struct SearchSpec {
    /// Identity.
    pub id: SearchId,
    /// The page to fetch.
    pub url: String,
    /// Its site key.
    pub site: SiteKey,
    /// Time between checks (before jitter).
    pub interval: Duration,
    /// When the first check is due; `None` = at once.
    pub first_due: Option<Timestamp>,
    /// Requests one check of it makes at most (its result pages, at least 1): what a check
    /// takes of its site's request budget.
    pub pages: u32,
}

/// Scheduler settings.
///
/// # Default
/// spacing 2s, concurrency 4, interval jitter 0.1 (±10%).
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Minimum time between the starts of two checks of one site.
    pub spacing: Duration,
    /// Per-site spacing overrides.
    pub site_spacing: HashMap<SiteKey, Duration>,
    /// At most this many checks in flight overall.
    pub concurrency: usize,
    /// Interval jitter fraction (clamped to `[0, 1]`; see [`Jitter`]).
    pub interval_jitter: f64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            spacing: Duration::from_secs(2),
            site_spacing: HashMap::new(),
            concurrency: 4,
            interval_jitter: INTERVAL_JITTER,
        }
    }
}

/// A site as this scheduler numbers it: 0, 1, 2, … in the order [`Scheduler::add_search`]
/// first saw each site key. [`Scheduler::site_key`] gives the key back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteIndex(pub u32);

/// A fetch to perform now.
///
/// A small `Copy` value: it names the check, its site and its target but shares nothing, so
/// issuing one touches no reference count. The driver looks up what it needs once per check:
/// [`Scheduler::check_url`], [`Scheduler::check_searches`] and [`Scheduler::site_key`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    /// Report the result under this id.
    pub id: CheckId,
    /// The site.
    pub site: SiteIndex,
    /// Whether this is the single probe after a wait (use the `probe` request class).
    pub probe: bool,
    /// With a request budget on its site: how many requests beyond its result pages this check
    /// may send (retries, redirects) and still keep every window within the budget; `None`
    /// without a budget. Each one is reported with [`Scheduler::handle_request_sent`].
    pub spare: Option<u32>,
}

/// What changed on a site because of an outcome (for logs, the demo narrative and alerts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reaction {
    /// The site refused; all its searches wait.
    SiteWaiting {
        /// The site.
        site: SiteKey,
        /// Its registry entry after recording.
        entry: Entry,
        /// How many searches are parked on it.
        searches: usize,
    },
    /// The site answered properly after having been waiting.
    SiteCleared {
        /// The site.
        site: SiteKey,
        /// The entry that was cleared.
        was: Entry,
    },
    /// The session on the site expired; it is paused until [`Scheduler::resume_site`].
    SessionExpired {
        /// The site.
        site: SiteKey,
    },
    /// The search's page is gone (404/410); it is paused.
    SearchGone {
        /// The searches.
        searches: Vec<SearchId>,
    },
}

/// How a search stands, as the store keeps it and every status view shows it. JSON and
/// database names are [`SearchState::as_str`] (`ok`, `waiting`, …).
///
/// The scheduler reports the first five ([`Scheduler::search_state`]); the last two are the
/// application's: a paused search is not in the schedule at all, and a page whose result list
/// could not be found leaves its search `Ok` to the scheduler (it is not a refusal), while the
/// user is told its layout is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchState {
    /// Healthy or never checked.
    #[default]
    Ok,
    /// Its site is waiting.
    Waiting,
    /// It is the probe out on its waiting site.
    Probing,
    /// Its site's session expired.
    SessionExpired,
    /// The page is gone.
    SearchGone,
    /// The user paused it (`paused = true`): not checked until resumed.
    Paused,
    /// Its last page was read, but the result list could not be found on it.
    LayoutUnknown,
}

impl SearchState {
    /// Every state, in the order above.
    pub const ALL: [Self; 7] = [
        Self::Ok,
        Self::Waiting,
        Self::Probing,
        Self::SessionExpired,
        Self::SearchGone,
        Self::Paused,
        Self::LayoutUnknown,
    ];

    /// The name in JSON, the database and tables.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Waiting => "waiting",
            Self::Probing => "probing",
            Self::SessionExpired => "session_expired",
            Self::SearchGone => "search_gone",
            Self::Paused => "paused",
            Self::LayoutUnknown => "layout_unknown",
        }
    }

    /// Parses [`Self::as_str`] back.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for SearchState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// How the scheduler sees one site. JSON names are [`SiteState::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteState {
    /// No entry.
    #[default]
    Clear,
    /// Waiting until its `next_retry_at`.
    Waiting,
    /// A probe is out.
    Probing,
    /// Paused until fresh cookies.
    SessionExpired,
}

impl SiteState {
    /// Every state, in the order above.
    pub const ALL: [Self; 4] = [
        Self::Clear,
        Self::Waiting,
        Self::Probing,
        Self::SessionExpired,
    ];

    /// The name in JSON and tables.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Clear => "clear",
            Self::Waiting => "waiting",
            Self::Probing => "probing",
            Self::SessionExpired => "session_expired",
        }
    }

    /// Parses [`Self::as_str`] back.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for SiteState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// The most distinct search URLs one site can have (the config rejects more): a page's slot
/// on its site is 16 bits of a [`CheckId`].
pub const MAX_URLS_PER_SITE: usize = u16::MAX as usize;

/// Every wake-up falls on a tick: a multiple of this many milliseconds (of the Unix epoch), the
/// first at or after the moment the site may start. Timer coalescing, as kernels do it (Linux's
/// timer slack, Windows' tolerable delay): the sites that come due within one tick share one
/// wake-up of the driver. A check may so start up to 7 ms after it could have, never before (a
/// spacing, a due time or a registry wait only ever moves later), and 8 ms is nothing beside a
/// 2 s spacing or a 30 s interval.
pub const TICK: Duration = Duration::from_millis(TICK_MS);
const TICK_MS: u64 = 8;

/// The tick of a wake-up for `at` (ms): the first tick at or after it.
fn tick_at_or_after(at: u64) -> u64 {
    at.div_ceil(TICK_MS)
}

/// The latest tick that has come by `now`.
fn tick_reached(now: Timestamp) -> u64 {
    now.0 / TICK_MS
}

/// When `tick` comes.
fn tick_time(tick: u64) -> Timestamp {
    Timestamp(tick.saturating_mul(TICK_MS))
}

/// Milliseconds in `d`, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl CheckId {
    /// The id of a site's `count`-th check (wrapping), of the page in `slot`: the site in the
    /// low 32 bits, the slot in the next 16, the count in the top 16.
    fn new(site: usize, slot: usize, count: u16) -> Self {
        Self(u64::from(count) << 48 | (slot as u64) << 32 | site as u64)
    }

    fn site(self) -> usize {
        (self.0 & 0xFFFF_FFFF) as usize
    }

    fn slot(self) -> usize {
        ((self.0 >> 32) & 0xFFFF) as usize
    }
}

/// One URL the scheduler fetches, for every search that watches it: what the driver reads.
#[derive(Debug)]
struct Page {
    url: Arc<str>,
    /// The searches it answers (more than one when searches share a URL).
    searches: Arc<[SearchId]>,
    /// Requests a check of it makes at most: the most pages any of its searches reads.
    requests: u32,
    /// Requests beyond its pages a check of it was seen to need: a redirect within its site
    /// that the budget had no room for ([`Scheduler::handle_deferred`]). Its checks then start
    /// only with room for it too.
    hops: u32,
}

/// A site's request budget and the requests that count against it: the start of each request
/// in the last window (or the last hour, the longer), oldest first.
#[derive(Debug)]
struct Spent {
    budget: Option<RequestBudget>,
    sent: VecDeque<u64>,
    /// Requests other processes sent to the site lately (another `notifio` on the same state:
    /// `check` beside `watch`), as last told ([`Scheduler::set_requests_elsewhere`]).
    elsewhere: Vec<u64>,
}

impl Spent {
    /// How far back requests are kept: the budget's window (and its margin), and an hour for
    /// status views.
    fn keep_ms(&self) -> u64 {
        let per = self.budget.map_or(0, |b| millis(b.per));
        (per + 1000).max(3_600_000)
    }

    fn prune(&mut self, now: u64) {
        let from = now.saturating_sub(self.keep_ms());
        while self.sent.front().is_some_and(|&t| t <= from) {
            self.sent.pop_front();
        }
    }

    /// Whether a check that makes `requests` requests may start at `now`: `Ok` with the
    /// requests it may send beyond those (`None` without a budget), or `Err` with the time it
    /// may start, so that no window of the budget holds more than its requests.
    ///
    /// Only one check of a site is out at a time, so the room counted at its start is room
    /// no other request of the site can take before it ends.
    fn may_start(&mut self, requests: u32, now: u64) -> Result<Option<u32>, u64> {
        self.prune(now);
        let Some(b) = self.budget else {
            return Ok(None);
        };
        let per = millis(b.counted_window());
        let allowed = b.requests.max(1) as usize;
        let need = (requests.max(1) as usize).min(allowed);
        let window_start = now.saturating_sub(per);
        let mut in_window: Vec<u64> = self
            .sent
            .iter()
            .chain(&self.elsewhere)
            .copied()
            .filter(|&t| t > window_start)
            .collect();
        in_window.sort_unstable();
        if in_window.len() + need <= allowed {
            let spare = allowed - in_window.len() - need;
            return Ok(Some(u32::try_from(spare).unwrap_or(u32::MAX)));
        }
        // The request whose leaving the window makes room.
        let leaving = in_window.len() + need - allowed - 1;
        Err(in_window[leaving].saturating_add(per))
    }

    fn record(&mut self, at: u64) {
        let pos = self.sent.partition_point(|&t| t <= at);
        self.sent.insert(pos, at);
    }
}

/// What the timing knows of a page: its slot on the site, and the time between its checks
/// (the shortest of its searches' intervals, before jitter, in ms; saturating at ~49 days,
/// longer than a watcher means anything by an interval). It travels with the page through its
/// cycle (waiting, in flight, gone), so that a check reads its site record and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cadence {
    slot: u16,
    interval_ms: u32,
}

/// A page waiting for its check, due at `due` (ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiting {
    due: u64,
    page: Cadence,
}

impl Waiting {
    /// The queue's order: by due time, ties to the page added first.
    fn order(&self) -> (u64, u16) {
        (self.due, self.page.slot)
    }
}

/// The check out on a site.
#[derive(Clone, Copy, Debug)]
struct Flight {
    id: CheckId,
    /// The page it fetches, as it was waiting.
    page: Waiting,
    /// It is the single probe after a wait.
    probe: bool,
    /// It is slow and no longer counts against the concurrency cap
    /// ([`Scheduler::release_slot`]).
    released: bool,
}

/// How many waiting pages a site keeps in its own record; more go to the heap (a [`SmallVec`]
/// does that by itself). So that a check reads its site's record and nothing else: with the
/// queue in an allocation of its own, each check waited on one more memory load, and a
/// simulated day of 100,000 searches took over twice as long (docs/benchmarks/scheduler.md).
/// Sixteen covers the heaviest use we know of (the watch benchmark and the simulated day both
/// have ten searches per site) in 256 bytes.
const INLINE_PAGES: usize = 16;

/// A site, the unit of timing. Each of its pages is at one point of its cycle: waiting in
/// `queue`, out with the check `in_flight`, `gone`, or (in a one-pass run) `checked`.
#[derive(Debug)]
struct SiteRecord {
    key: SiteKey,
    spacing_ms: u64,
    /// No check starts before this: the last start plus the spacing (0 before the first).
    next_start: u64,
    /// Its pages, by slot (in the order they were added).
    pages: Vec<Page>,
    /// Its pages waiting for a check, in order (see [`Waiting::order`]).
    queue: SmallVec<[Waiting; INLINE_PAGES]>,
    /// The check out on it: one at a time.
    in_flight: Option<Flight>,
    /// Its pages that are gone (404/410), until a search asks for one again.
    gone: Vec<Cadence>,
    /// In a one-pass run ([`Scheduler::check_each_once`]): its pages checked in the pass, each
    /// with its next due time as a watcher would plan it. They are not queued again.
    checked: Vec<Waiting>,
    /// In a one-pass run: its pages not checked because its request budget had no room, each
    /// with the time it has ([`Scheduler::budget_wait`]).
    over_budget: Vec<(u16, u64)>,
    /// Slots of pages no search watches any more (all removed) and not in flight: a new URL
    /// takes one of them before growing `pages` ([`Scheduler::remove_search`]).
    free: Vec<u16>,
    /// How many checks it has started (wrapping): in each [`CheckId`], so that the id of an
    /// old check does not name the next one.
    checks: u16,
    /// Paused until fresh cookies (its session expired).
    paused: bool,
    /// A refusal is on record: the registry has an entry for it, so a start asks the registry
    /// first. Without it the registry is not consulted (it only changes through this
    /// scheduler, so a site with nothing recorded needs no hash lookup per check).
    refused: bool,
    /// Its pending wake-up in the wheel (a tick).
    wake: Option<u64>,
    /// Its request budget and the requests that count against it; `None` until it has one
    /// (a site without a budget keeps no record of its requests).
    spent: Option<Box<Spent>>,
}

impl SiteRecord {
    /// Queues `page`, due at `due`, in order.
    fn queue(&mut self, page: Cadence, due: u64) {
        let page = Waiting { due, page };
        let at = self.queue.partition_point(|w| w.order() < page.order());
        self.queue.insert(at, page);
    }

    /// Its first waiting page.
    fn first(&self) -> Option<Waiting> {
        self.queue.first().copied()
    }

    /// Page `slot` as it waits, is out or was checked in a one-pass run (its due time then),
    /// or `None` if it is gone.
    fn waiting(&self, slot: usize) -> Option<Waiting> {
        let flight = self.in_flight.map(|f| f.page);
        let mut pages = flight.iter().chain(&self.queue).chain(&self.checked);
        pages.find(|w| usize::from(w.page.slot) == slot).copied()
    }

    /// Page `slot`'s cadence, wherever it is in its cycle.
    fn cadence_mut(&mut self, slot: usize) -> Option<&mut Cadence> {
        let flight = self.in_flight.as_mut().map(|f| &mut f.page.page);
        let waiting = self.queue.iter_mut().map(|w| &mut w.page);
        let checked = self.checked.iter_mut().map(|w| &mut w.page);
        let mut pages = flight
            .into_iter()
            .chain(waiting)
            .chain(checked)
            .chain(&mut self.gone);
        pages.find(|c| usize::from(c.slot) == slot)
    }

    /// How many searches watch its pages.
    fn searches(&self) -> usize {
        self.pages.iter().map(|p| p.searches.len()).sum()
    }
}

/// The pure scheduler. See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    registry: Registry,
    /// By [`SiteIndex`].
    sites: Vec<SiteRecord>,
    site_index: HashMap<SiteKey, usize>,
    /// Where each URL's page is, and each search's: `(site, slot)`.
    by_url: HashMap<String, (usize, usize)>,
    by_search: HashMap<SearchId, (usize, usize)>,
    /// Each search's own interval (ms, as in [`Cadence`]): a page's cadence is the shortest of
    /// its searches', worked out again when one of them leaves or changes.
    intervals: HashMap<SearchId, u32>,
    /// Each search's result pages: a page's requests are the most of its searches'.
    pages: HashMap<SearchId, u32>,
    /// Sites' request budgets, also for sites not known yet.
    budgets: HashMap<SiteKey, RequestBudget>,
    wheel: Wheel,
    /// Checks in flight that count against the cap.
    in_flight: usize,
    jitter: Jitter,
    draws: Draws,
    /// One pass: each page is checked once ([`Self::check_each_once`]).
    once: bool,
}

impl Scheduler {
    /// A scheduler with no searches. `registry` carries restored entries; `seed` drives the
    /// interval jitter and the backoff jitter (the shell seeds it from the OS).
    #[must_use]
    pub fn new(config: SchedulerConfig, registry: Registry, seed: u64) -> Self {
        Self {
            jitter: Jitter::new(config.interval_jitter),
            config,
            registry,
            sites: Vec::new(),
            site_index: HashMap::new(),
            by_url: HashMap::new(),
            by_search: HashMap::new(),
            intervals: HashMap::new(),
            pages: HashMap::new(),
            budgets: HashMap::new(),
            wheel: Wheel::new(),
            in_flight: 0,
            draws: Draws::new(seed),
            once: false,
        }
    }

    /// Makes this a one-pass scheduler (`notifio check`): each page is checked once. After a
    /// good check its next due time is worked out as always (interval, jitter) and kept, so
    /// [`Self::search_state`] reports the time a watcher would check it next, but the page is
    /// not queued again. A site that refuses in the pass is not asked again in it, even when
    /// its wait ends before the pass does: its pages report its wait.
    pub fn check_each_once(&mut self) {
        self.once = true;
    }

    /// Adds a search. A search whose URL is already scheduled joins that fetch (single-flight);
    /// the shorter interval wins.
    ///
    /// # Panics
    /// With more than 65,535 distinct URLs on one site.
    pub fn add_search(&mut self, spec: SearchSpec, now: Timestamp) {
        let due = spec.first_due.unwrap_or(now).0;
        let interval_ms = u32::try_from(millis(spec.interval)).unwrap_or(u32::MAX);
        self.intervals.insert(spec.id, interval_ms);
        let requests = spec.pages.max(1);
        self.pages.insert(spec.id, requests);
        if let Some(&(s, slot)) = self.by_url.get(&spec.url) {
            self.by_search.insert(spec.id, (s, slot));
            let site = &mut self.sites[s];
            let page = &mut site.pages[slot];
            let alone = page.searches.is_empty();
            page.requests = if alone {
                requests
            } else {
                page.requests.max(requests)
            };
            page.searches = page.searches.iter().copied().chain([spec.id]).collect();
            match site.cadence_mut(slot) {
                // A page whose searches were all removed keeps no cadence of theirs.
                Some(cadence) if alone => cadence.interval_ms = interval_ms,
                Some(cadence) => cadence.interval_ms = cadence.interval_ms.min(interval_ms),
                None => {
                    // Its searches were all removed and it was not in flight: it waits again.
                    site.free.retain(|&f| usize::from(f) != slot);
                    site.queue(
                        Cadence {
                            slot: slot as u16,
                            interval_ms,
                        },
                        due,
                    );
                    self.arm(s);
                    return;
                }
            }
            if let Some(at) = site.gone.iter().position(|c| usize::from(c.slot) == slot) {
                // A search added again for a page that was gone gets a fresh chance.
                let page = site.gone.remove(at);
                site.queue(page, due);
                self.arm(s);
            }
            return;
        }
        let s = self.site_for(&spec.site);
        let site = &mut self.sites[s];
        let slot = match site.free.pop() {
            Some(free) => {
                // The page no search watches any more gives its slot to this URL.
                let slot = usize::from(free);
                let old = std::mem::replace(
                    &mut site.pages[slot],
                    Page {
                        url: spec.url.as_str().into(),
                        searches: Arc::new([spec.id]),
                        requests,
                        hops: 0,
                    },
                );
                self.by_url.remove(&*old.url);
                slot
            }
            None => {
                let slot = site.pages.len();
                assert!(
                    slot < MAX_URLS_PER_SITE,
                    "more than 65,535 search URLs on one site"
                );
                site.pages.push(Page {
                    url: spec.url.as_str().into(),
                    searches: Arc::new([spec.id]),
                    requests,
                    hops: 0,
                });
                slot
            }
        };
        // Below `MAX_URLS_PER_SITE`: a `u16`.
        site.queue(
            Cadence {
                slot: slot as u16,
                interval_ms,
            },
            due,
        );
        self.by_url.insert(spec.url, (s, slot));
        self.by_search.insert(spec.id, (s, slot));
        self.arm(s);
    }

    /// Stops scheduling a search; returns whether it was scheduled. Its page is no longer
    /// fetched once no other search watches it (a check of it already in flight still lands,
    /// and its outcome still counts for the site). Its site, the site's registry entry and
    /// its spacing are untouched: removing a search never lets a waiting site be asked sooner.
    pub fn remove_search(&mut self, id: SearchId) -> bool {
        let Some((s, slot)) = self.by_search.remove(&id) else {
            return false;
        };
        self.intervals.remove(&id);
        self.pages.remove(&id);
        let page = &mut self.sites[s].pages[slot];
        page.searches = page.searches.iter().copied().filter(|x| *x != id).collect();
        page.requests = page
            .searches
            .iter()
            .filter_map(|x| self.pages.get(x))
            .max()
            .copied()
            .unwrap_or(1);
        let shortest = page
            .searches
            .iter()
            .filter_map(|x| self.intervals.get(x))
            .min()
            .copied();
        match shortest {
            Some(ms) => {
                if let Some(c) = self.sites[s].cadence_mut(slot) {
                    c.interval_ms = ms;
                }
            }
            None => self.retire_page(s, slot),
        }
        true
    }

    /// Page `slot` of site `s` has no search any more: out of the queue and the gone list, and
    /// its slot free for another URL once no check of it is in flight.
    fn retire_page(&mut self, s: usize, slot: usize) {
        let site = &mut self.sites[s];
        if !site.pages[slot].searches.is_empty() {
            return;
        }
        site.queue.retain(|w| usize::from(w.page.slot) != slot);
        site.checked.retain(|w| usize::from(w.page.slot) != slot);
        site.gone.retain(|c| usize::from(c.slot) != slot);
        if site.queue.is_empty()
            && let Some(tick) = site.wake.take()
        {
            // Nothing left to wake it for: `poll_timeout` must not name a wake-up for nothing.
            self.wheel.remove(tick, s as u32);
        }
        let site = &mut self.sites[s];
        let flying = site
            .in_flight
            .is_some_and(|f| usize::from(f.page.page.slot) == slot);
        if !flying && !site.free.iter().any(|&f| usize::from(f) == slot) {
            site.free.push(slot as u16);
        }
    }

    /// A search's interval changes, from its next check on (the check already planned keeps
    /// its time). Returns whether the search is scheduled.
    pub fn set_interval(&mut self, id: SearchId, interval: Duration) -> bool {
        let Some(&(s, slot)) = self.by_search.get(&id) else {
            return false;
        };
        let interval_ms = u32::try_from(millis(interval)).unwrap_or(u32::MAX);
        self.intervals.insert(id, interval_ms);
        let shortest = self.sites[s].pages[slot]
            .searches
            .iter()
            .filter_map(|x| self.intervals.get(x))
            .min()
            .copied()
            .unwrap_or(interval_ms);
        if let Some(c) = self.sites[s].cadence_mut(slot) {
            c.interval_ms = shortest;
        }
        true
    }

    /// The least time between two checks of `site`, start to start, from now on (a site not
    /// known yet gets it when its first search is added). The start already allowed keeps
    /// its time, so a shorter spacing never brings a check forward past the old one.
    pub fn set_spacing(&mut self, site: &SiteKey, spacing: Duration) {
        self.config.site_spacing.insert(site.clone(), spacing);
        if let Some(&s) = self.site_index.get(site) {
            self.sites[s].spacing_ms = millis(spacing);
        }
    }

    /// The search's page is due at `now` if it was due later (a preview of that page, asked
    /// for by the user). Spacing, the registry's waits and the single probe still decide when
    /// it starts. Returns whether the search is scheduled and waiting.
    pub fn hasten(&mut self, id: SearchId, now: Timestamp) -> bool {
        let Some(&(s, slot)) = self.by_search.get(&id) else {
            return false;
        };
        let site = &mut self.sites[s];
        let Some(at) = site
            .queue
            .iter()
            .position(|w| usize::from(w.page.slot) == slot)
        else {
            return false;
        };
        if site.queue[at].due > now.0 {
            let page = site.queue.remove(at).page;
            site.queue(page, now.0);
            self.arm(s);
        }
        true
    }

    /// The index of site `key`, numbering it if it is new.
    fn site_for(&mut self, key: &SiteKey) -> usize {
        if let Some(&s) = self.site_index.get(key) {
            return s;
        }
        let s = self.sites.len();
        assert!(s < (1 << 31), "more than 2^31 sites");
        let spacing = self.config.site_spacing.get(key).copied();
        self.sites.push(SiteRecord {
            key: key.clone(),
            spacing_ms: millis(spacing.unwrap_or(self.config.spacing)),
            next_start: 0,
            pages: Vec::new(),
            queue: SmallVec::new(),
            in_flight: None,
            gone: Vec::new(),
            checked: Vec::new(),
            over_budget: Vec::new(),
            free: Vec::new(),
            checks: 0,
            paused: false,
            refused: self.registry.entry(key).is_some(),
            wake: None,
            spent: self.budgets.get(key).map(|&b| {
                Box::new(Spent {
                    budget: Some(b),
                    sent: VecDeque::new(),
                    elsewhere: Vec::new(),
                })
            }),
        });
        self.site_index.insert(key.clone(), s);
        s
    }

    /// The registry (entries, probe state, `soonest()`).
    #[must_use]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The page check `id` fetches, if this scheduler issued `id`.
    fn page(&self, id: CheckId) -> Option<&Page> {
        self.sites.get(id.site())?.pages.get(id.slot())
    }

    /// The page check `id` fetches, for any id this scheduler issued (in flight or not);
    /// `None` for an id it never issued. Cloning the `Arc` does not copy the URL.
    #[must_use]
    pub fn check_url(&self, id: CheckId) -> Option<&Arc<str>> {
        self.page(id).map(|p| &p.url)
    }

    /// Every search check `id` answers (more than one when searches share a URL), for any id
    /// this scheduler issued; `None` for an id it never issued. A search added later for the
    /// same URL joins this list.
    #[must_use]
    pub fn check_searches(&self, id: CheckId) -> Option<&Arc<[SearchId]>> {
        self.page(id).map(|p| &p.searches)
    }

    /// The key of a site this scheduler numbered (see [`SiteIndex`]).
    ///
    /// # Panics
    /// If `site` did not come from this scheduler (a [`Check`] or [`Self::site_index`]).
    #[must_use]
    pub fn site_key(&self, site: SiteIndex) -> &SiteKey {
        &self.sites[site.0 as usize].key
    }

    /// The number of a site this scheduler knows, or `None`.
    #[must_use]
    pub fn site_index(&self, key: &SiteKey) -> Option<SiteIndex> {
        self.site_index.get(key).map(|&s| SiteIndex(s as u32))
    }

    /// Every check that may start at `now`, appended to `out`: the checks, in the order,
    /// that calling [`Self::poll_due`] until `None` would return. Then sleep until
    /// [`Self::poll_timeout`].
    pub fn poll_due_into(&mut self, now: Timestamp, out: &mut Vec<Check>) {
        out.extend(std::iter::from_fn(|| self.poll_due(now)));
    }

    /// The next check to start at `now`, or `None` when nothing may start now. Call repeatedly
    /// until `None`, then sleep until [`Self::poll_timeout`].
    pub fn poll_due(&mut self, now: Timestamp) -> Option<Check> {
        while self.in_flight < self.config.concurrency {
            let s = self.wheel.poll(tick_reached(now))? as usize;
            self.sites[s].wake = None;
            if let Some(check) = self.start(s, now) {
                return Some(check);
            }
        }
        None
    }

    /// Site `s` woke at `now`: starts the check of its earliest due page, unless something
    /// holds it back (then it sleeps until that ends, or until an outcome or
    /// [`Self::resume_site`] wakes it).
    fn start(&mut self, s: usize, now: Timestamp) -> Option<Check> {
        let site = &self.sites[s];
        if site.in_flight.is_some() || site.paused {
            return None;
        }
        let first = site.first()?;
        let at = site.next_start.max(first.due);
        if now.0 < at {
            // Woken early: a registry wait can end before the spacing does, a clock can go back.
            self.wake_at(s, at);
            return None;
        }
        let page = &site.pages[usize::from(first.page.slot)];
        let (requests, hops) = (page.requests, page.hops);
        let spare = match self.sites[s].spent.as_mut() {
            None => None,
            Some(spent) => match spent.may_start(requests.saturating_add(hops), now.0) {
                // The room kept for its hops is the fetch's to spend.
                Ok(spare) => spare.map(|n| n.saturating_add(hops)),
                Err(may) => {
                    if self.once {
                        // One pass does not wait for room: the page is answered by when the
                        // budget has it, and the site's next page is looked at now.
                        let site = &mut self.sites[s];
                        let w = site.queue.remove(0);
                        site.checked.push(Waiting {
                            due: may.max(w.due),
                            page: w.page,
                        });
                        site.over_budget.push((w.page.slot, may));
                        self.wake_at(s, now.0);
                        return None;
                    }
                    // Its budget's window is full: the check waits for room, in order.
                    self.wake_at(s, may);
                    return None;
                }
            },
        };
        let site = &self.sites[s];
        let probe = match site.refused {
            false => false,
            true => match self.registry.admit(&site.key, now) {
                Admission::Clear => false,
                Admission::Probe => true,
                Admission::Wait(until) => {
                    self.wake_at(s, until.0);
                    return None;
                }
                Admission::ProbeInFlight => return None,
            },
        };
        let site = &mut self.sites[s];
        site.queue.remove(0);
        site.checks = site.checks.wrapping_add(1);
        let id = CheckId::new(s, usize::from(first.page.slot), site.checks);
        site.in_flight = Some(Flight {
            id,
            page: first,
            probe,
            released: false,
        });
        site.next_start = now.0.saturating_add(site.spacing_ms);
        if let Some(spent) = site.spent.as_mut() {
            spent.record(now.0);
        }
        self.in_flight += 1;
        Some(Check {
            id,
            site: SiteIndex(s as u32),
            probe,
            spare,
        })
    }

    /// Wakes idle site `s` for its next check: at the later of its next allowed start and its
    /// first page's due time. A paused site, or one with every page gone, sleeps.
    fn arm(&mut self, s: usize) {
        let site = &self.sites[s];
        if site.in_flight.is_some() || site.paused {
            return;
        }
        if let Some(first) = site.first() {
            self.wake_at(s, site.next_start.max(first.due));
        }
    }

    /// Site `s` wakes at the first tick at or after `at`, unless it wakes sooner already.
    fn wake_at(&mut self, s: usize, at: u64) {
        let tick = tick_at_or_after(at);
        let site = &mut self.sites[s];
        if site.wake.is_some_and(|pending| pending <= tick) {
            return;
        }
        if let Some(pending) = site.wake.replace(tick) {
            self.wheel.remove(pending, s as u32);
        }
        self.wheel.insert(tick, s as u32);
    }

    /// Check `id`, still in flight, sent another request to its site at `now` (the next page
    /// of its results, a retry, a redirect): the site's next check starts no sooner than
    /// `now` plus its spacing, as after a check of its own, and the request counts against the
    /// site's budget. Call it once per request beyond the check's first, before
    /// [`Self::handle_outcome`]; an id not in flight changes nothing.
    pub fn handle_request_sent(&mut self, id: CheckId, now: Timestamp) {
        let Some(site) = self.sites.get_mut(id.site()) else {
            return;
        };
        if site.in_flight.is_some_and(|f| f.id == id) {
            site.next_start = site.next_start.max(now.0.saturating_add(site.spacing_ms));
            if let Some(spent) = site.spent.as_mut() {
                spent.record(now.0);
            }
        }
    }

    /// Gives `site` a request budget (`None`: none): from now on no window of its `per` holds
    /// more than its `requests` requests, counting every page of every check (probes and
    /// previews too); spacing and the registry's waits still hold. A site not known yet gets
    /// it when its first search is added.
    pub fn set_budget(&mut self, site: &SiteKey, budget: Option<RequestBudget>) {
        match budget {
            Some(b) => {
                self.budgets.insert(site.clone(), b);
            }
            None => {
                self.budgets.remove(site);
            }
        }
        if let Some(&s) = self.site_index.get(site) {
            let record = &mut self.sites[s];
            match (&mut record.spent, budget) {
                (Some(spent), b) => spent.budget = b,
                (None, Some(b)) => {
                    record.spent = Some(Box::new(Spent {
                        budget: Some(b),
                        sent: VecDeque::new(),
                        elsewhere: Vec::new(),
                    }));
                }
                (None, None) => {}
            }
            self.arm(s);
        }
    }

    /// The requests other processes sent to `site` lately (another `notifio` on the same state
    /// directory: `check` beside `watch`), replacing those told before: no window of its budget
    /// holds more than its requests, theirs and ours together. A site without a budget (or not
    /// known) ignores them.
    pub fn set_requests_elsewhere(&mut self, site: &SiteKey, sent: &[Timestamp]) {
        let Some(&s) = self.site_index.get(site) else {
            return;
        };
        if let Some(spent) = self.sites[s].spent.as_mut() {
            spent.elsewhere = sent.iter().map(|t| t.0).collect();
        }
    }

    /// The sites with a request budget.
    pub fn budgeted_sites(&self) -> impl Iterator<Item = &SiteKey> {
        self.budgets.keys()
    }

    /// In a one-pass run: when the request budget of search `id`'s site has room for its
    /// check, if the pass did not check it for want of room (it does not wait for it).
    #[must_use]
    pub fn budget_wait(&self, id: SearchId) -> Option<Timestamp> {
        let &(s, slot) = self.by_search.get(&id)?;
        self.sites[s]
            .over_budget
            .iter()
            .find(|(p, _)| usize::from(*p) == slot)
            .map(|&(_, at)| Timestamp(at))
    }

    /// Requests `site` started since `since` (counted only for a site that has a budget, over
    /// the last hour or its window, the longer).
    #[must_use]
    pub fn requests_since(&self, site: &SiteKey, since: Timestamp) -> Option<usize> {
        let &s = self.site_index.get(site)?;
        let spent = self.sites[s].spent.as_ref()?;
        Some(spent.sent.iter().filter(|&&t| t > since.0).count())
    }

    /// The request budget of `site`, if it has one.
    #[must_use]
    pub fn budget(&self, site: &SiteKey) -> Option<RequestBudget> {
        self.budgets.get(site).copied()
    }

    /// A search's result pages changes (its requests per check), from its next check on.
    /// Returns whether the search is scheduled.
    pub fn set_pages(&mut self, id: SearchId, pages: u32) -> bool {
        let Some(&(s, slot)) = self.by_search.get(&id) else {
            return false;
        };
        self.pages.insert(id, pages.max(1));
        let page = &mut self.sites[s].pages[slot];
        page.requests = page
            .searches
            .iter()
            .filter_map(|x| self.pages.get(x))
            .max()
            .copied()
            .unwrap_or(1);
        true
    }

    /// The spacing in force on `site` (its own, else the default): the least time between
    /// the starts of two requests to it.
    #[must_use]
    pub fn site_spacing(&self, site: &SiteKey) -> Duration {
        let ms = match self.site_index.get(site) {
            Some(&s) => self.sites[s].spacing_ms,
            None => millis(
                self.config
                    .site_spacing
                    .get(site)
                    .copied()
                    .unwrap_or(self.config.spacing),
            ),
        };
        Duration::from_millis(ms)
    }

    /// Reports how check `id` ended at `now`. `retry_after` is the site's Retry-After, if any.
    /// Returns what changed on the site, if anything worth telling.
    pub fn handle_outcome(
        &mut self,
        id: CheckId,
        outcome: Outcome,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Option<Reaction> {
        let (s, flight) = self.land(id)?;
        let Waiting { due, page } = flight.page;
        let reaction = match outcome.refusal_kind() {
            Some(kind) => {
                let site = &mut self.sites[s];
                if self.once {
                    // One pass asks a site that refused no more, however long the pass runs:
                    // this page and those queued behind it are answered by its wait.
                    site.checked.push(Waiting { due, page });
                    let queued: Vec<Waiting> = site.queue.drain(..).collect();
                    site.checked.extend(queued);
                } else {
                    // The page keeps its due time: it goes first again when the wait ends.
                    site.queue(page, due);
                }
                Some(self.record_refusal(s, kind, retry_after, now))
            }
            None => {
                let cleared = self.clear_refusal(s);
                let site = &mut self.sites[s];
                match outcome {
                    Outcome::SessionExpired => {
                        site.paused = true;
                        site.queue(page, due);
                        Some(Reaction::SessionExpired {
                            site: site.key.clone(),
                        })
                    }
                    // The search's fate matters more to the user than the site clearing (which
                    // status views show anyway), so a probe that finds a 404 reports
                    // SearchGone.
                    Outcome::SearchGone => {
                        site.gone.push(page);
                        Some(Reaction::SearchGone {
                            searches: site.pages[usize::from(page.slot)].searches.to_vec(),
                        })
                    }
                    _ => {
                        let random = self.draws.next_f64();
                        let interval = u64::from(page.interval_ms);
                        let due = self.jitter.due_after(now.0, interval, random);
                        if self.once {
                            site.checked.push(Waiting { due, page });
                        } else {
                            site.queue(page, due);
                        }
                        cleared
                    }
                }
            }
        };
        // Its searches were removed while it was out: the outcome counted, the page goes.
        self.retire_page(s, usize::from(page.slot));
        self.arm(s);
        reaction
    }

    /// Check `id` ended at `now` without reading its page because its site's request budget
    /// had no room for a redirect within the site (docs/policy.md#a-request-budget-per-site).
    /// The site answered and refused nothing: no ladder, no record; a probe is released. The
    /// page is due again at once, and its checks from now on start only with room for the
    /// redirect too (in a one-pass run it is not checked again). Returns what changed on the
    /// site: a refusal it had is cleared, since it answered.
    pub fn handle_deferred(&mut self, id: CheckId, now: Timestamp) -> Option<Reaction> {
        let (s, flight) = self.land(id)?;
        let page = flight.page.page;
        let slot = usize::from(page.slot);
        let cleared = self.clear_refusal(s);
        let site = &mut self.sites[s];
        if let Some(p) = site.pages.get_mut(slot) {
            p.hops = p.hops.max(1);
        }
        if self.once {
            site.checked.push(Waiting { due: now.0, page });
        } else {
            site.queue(page, now.0);
        }
        self.retire_page(s, slot);
        self.arm(s);
        cleared
    }

    /// Records a refusal of site `s` in the registry: all its searches wait.
    fn record_refusal(
        &mut self,
        s: usize,
        kind: RefusalKind,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Reaction {
        let random = self.draws.next_f64();
        let site = &mut self.sites[s];
        site.refused = true;
        let entry = self
            .registry
            .record(&site.key, kind, now, retry_after, random);
        Reaction::SiteWaiting {
            site: site.key.clone(),
            entry: entry.clone(),
            searches: site.searches(),
        }
    }

    /// Site `s` answered: forgets its refusals, if it had any.
    fn clear_refusal(&mut self, s: usize) -> Option<Reaction> {
        let site = &mut self.sites[s];
        if !std::mem::take(&mut site.refused) {
            return None;
        }
        let was = self.registry.clear(&site.key)?;
        Some(Reaction::SiteCleared {
            site: site.key.clone(),
            was,
        })
    }

    /// Ends check `id` if it is the one in flight on its site: its site and what it was.
    fn land(&mut self, id: CheckId) -> Option<(usize, Flight)> {
        let s = id.site();
        let flight = self.sites.get_mut(s)?.in_flight.take_if(|f| f.id == id)?;
        if !flight.released {
            self.in_flight -= 1;
        }
        Some((s, flight))
    }

    /// The check was abandoned without an outcome (shutdown): the search goes back in the queue
    /// and a probe, if it was one, is released.
    pub fn abandon(&mut self, id: CheckId) {
        let Some((s, flight)) = self.land(id) else {
            return;
        };
        self.sites[s].queue(flight.page.page, flight.page.due);
        if flight.probe {
            self.registry.abandon_probe(&self.sites[s].key);
        }
        self.retire_page(s, usize::from(flight.page.page.slot));
        self.arm(s);
    }

    /// Check `id` is slow (a site that accepts the connection and then stalls): it stays in
    /// flight for its site, which gets no other check until it ends, but it no longer counts
    /// against the concurrency cap, so a few hanging sites cannot hold every other site up.
    /// Returns whether it was released (`false` for an id not in flight, or released before).
    /// The cap then bounds the checks that are making progress; the slow ones are bounded by
    /// the number of sites, one each.
    pub fn release_slot(&mut self, id: CheckId) -> bool {
        let site = self.sites.get_mut(id.site());
        let flight = site.and_then(|site| site.in_flight.as_mut());
        match flight {
            Some(flight) if flight.id == id && !flight.released => {
                flight.released = true;
                self.in_flight -= 1;
                true
            }
            _ => false,
        }
    }

    /// The user refreshed the site's cookies: resume its searches.
    pub fn resume_site(&mut self, site: &SiteKey) {
        if let Some(&s) = self.site_index.get(site) {
            self.sites[s].paused = false;
            self.arm(s);
        }
    }

    /// Marks a site paused (restored from the store at start-up).
    pub fn pause_site(&mut self, site: &SiteKey) {
        if let Some(&s) = self.site_index.get(site) {
            self.sites[s].paused = true;
        }
    }

    /// The next instant at which [`Self::poll_due`] may return something: a [`TICK`], possibly
    /// already past. `None` if nothing is scheduled (everything parked), or while every slot
    /// of the concurrency cap is taken (only an outcome, an abandon or a released slot can
    /// free one). May be early (a site that wakes and finds a registry wait, or its session
    /// paused): a spurious poll is harmless.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.in_flight >= self.config.concurrency {
            return None;
        }
        self.wheel.next_expiration().map(tick_time)
    }

    /// Checks in flight that count against the concurrency cap (not the released ones: see
    /// [`Self::release_slot`]).
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// How a search looks right now, and when it will next be checked.
    #[must_use]
    pub fn search_state(&self, id: SearchId) -> Option<(SearchState, Option<Timestamp>)> {
        let &(s, slot) = self.by_search.get(&id)?;
        let site = &self.sites[s];
        let Some(Waiting { due, .. }) = site.waiting(slot) else {
            return Some((SearchState::SearchGone, None));
        };
        if site.paused {
            return Some((SearchState::SessionExpired, None));
        }
        let flight = site
            .in_flight
            .filter(|f| usize::from(f.page.page.slot) == slot);
        if flight.is_some_and(|f| f.probe) {
            return Some((SearchState::Probing, None));
        }
        let due = Timestamp(due);
        if let Some(entry) = self.registry.entry(&site.key) {
            return Some((SearchState::Waiting, Some(entry.next_retry_at.max(due))));
        }
        // `next_start` is 0 before the site's first check: then only the due time counts.
        let next = flight
            .is_none()
            .then(|| Timestamp(site.next_start).max(due));
        Some((SearchState::Ok, next))
    }

    /// How a site looks right now.
    #[must_use]
    pub fn site_state(&self, key: &SiteKey) -> SiteState {
        if self
            .site_index
            .get(key)
            .is_some_and(|&s| self.sites[s].paused)
        {
            return SiteState::SessionExpired;
        }
        if self.registry.is_probing(key) {
            return SiteState::Probing;
        }
        if self.registry.entry(key).is_some() {
            return SiteState::Waiting;
        }
        SiteState::Clear
    }

    /// The sites the scheduler knows.
    pub fn sites(&self) -> impl Iterator<Item = &SiteKey> {
        self.sites.iter().map(|s| &s.key)
    }
}

#[cfg(test)]
mod tests {
    use super::{CheckId, TICK_MS, tick_at_or_after, tick_reached, tick_time};
    use crate::time::Timestamp;

    #[test]
    fn a_check_id_names_its_site_slot_and_count() {
        let id = CheckId::new(7, 65_534, u16::MAX);
        assert_eq!((id.site(), id.slot()), (7, 65_534));
        assert_eq!(id.0 >> 48, 0xFFFF);
        // An id with the site half all ones names no site a scheduler numbers (below 2^31).
        assert_eq!(CheckId(u64::MAX).site(), 0xFFFF_FFFF);
    }

    #[test]
    fn wake_ups_fall_on_the_first_tick_at_or_after() {
        assert_eq!(TICK_MS, 8);
        assert_eq!(tick_at_or_after(16), 2);
        assert_eq!(tick_at_or_after(17), 3);
        assert_eq!(tick_time(tick_at_or_after(17)), Timestamp(24));
        assert_eq!(tick_reached(Timestamp(23)), 2, "tick 3 comes at 24 ms");
        assert_eq!(tick_time(tick_at_or_after(u64::MAX)), Timestamp(u64::MAX));
    }
}
