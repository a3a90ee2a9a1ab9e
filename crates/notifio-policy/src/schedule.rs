//! The scheduler: which search to check next, and when (DESIGN §5), as a pure state machine.
//!
//! quinn-proto's shape: the driver calls [`Scheduler::poll_due`] until it returns `None`, sleeps
//! until [`Scheduler::poll_timeout`], and reports each check's result with
//! [`Scheduler::handle_outcome`]. One timer drives everything; spurious wake-ups are harmless.
//!
//! What it owns, and why here: per-search due times (interval ±10% jitter, so searches sharing
//! a cycle drift apart); site spacing and one request in flight per site (a site never sees a
//! burst from us); the global concurrency cap; the registry gate with the single probe (when a
//! wait expires one search goes back in, not five); single-flight (two searches with the same
//! URL are one fetch); and parking searches of waiting or session-expired sites.
//!
//! Internally: one timer queue of events (a search comes due, a site may send again) with lazy
//! deletion — a timing wheel, see `timers.rs` — and per site a min-heap of its due searches, most
//! overdue first. Sites are indexed by integer; the registry is only consulted for sites that
//! have an entry, and a check's id encodes its target, so the common path of a check hashes
//! nothing and allocates nothing. Nothing is scanned.

use crate::backoff::RefusalKind;
use crate::classify::Outcome;
use crate::registry::{Admission, Entry, Registry};
use crate::site::SiteKey;
use crate::time::Timestamp;
use crate::timers::Timers;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
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
    /// Interval jitter fraction.
    pub interval_jitter: f64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            spacing: Duration::from_secs(2),
            site_spacing: HashMap::new(),
            concurrency: 4,
            interval_jitter: 0.1,
        }
    }
}

/// A fetch to perform now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Report the result under this id.
    pub id: CheckId,
    /// The site.
    pub site: SiteKey,
    /// The page to fetch (shared with the scheduler: handing it out does not copy it).
    pub url: Arc<str>,
    /// Every search this fetch answers (more than one when searches share a URL).
    pub searches: Arc<[SearchId]>,
    /// Whether this is the single probe after a wait (use the `probe` request class).
    pub probe: bool,
    /// When it was due (before spacing and waits).
    pub due: Timestamp,
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

/// How the scheduler sees one search (for status views).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchState {
    /// Healthy or never checked.
    Ok,
    /// Its site is waiting.
    Waiting,
    /// It is the probe out on its waiting site.
    Probing,
    /// Its site's session expired.
    SessionExpired,
    /// The page is gone.
    SearchGone,
}

/// How the scheduler sees one site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteState {
    /// No entry.
    Clear,
    /// Waiting until its `next_retry_at`.
    Waiting,
    /// A probe is out.
    Probing,
    /// Paused until fresh cookies.
    SessionExpired,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TargetState {
    Idle,
    Queued,
    InFlight,
    Gone,
}

/// One URL to fetch, answering one or more searches.
#[derive(Debug)]
struct Target {
    url: Arc<str>,
    site: usize,
    searches: Arc<[SearchId]>,
    /// The id of the check in flight, when `state` is `InFlight`.
    check: CheckId,
    interval: Duration,
    next_due: Timestamp,
    state: TargetState,
    probe: bool,
}

#[derive(Debug)]
struct SiteSlot {
    key: SiteKey,
    spacing: Duration,
    last_start: Option<Timestamp>,
    in_flight: bool,
    due: BinaryHeap<Reverse<(Timestamp, usize)>>,
    wake_at: Option<Timestamp>,
    paused: bool,
    in_ready: bool,
    /// The registry may have an entry (or a probe) for this site. When false the registry is
    /// not consulted at all: it is only ever changed through this scheduler.
    gated: bool,
    targets: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    TargetDue(usize),
    SiteWake(usize),
}

/// The pure scheduler. See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    registry: Registry,
    targets: Vec<Target>,
    by_url: HashMap<String, usize>,
    by_search: HashMap<SearchId, usize>,
    sites: Vec<SiteSlot>,
    site_index: HashMap<SiteKey, usize>,
    events: Timers<Event>,
    scratch: Vec<(u64, Event)>,
    ready: VecDeque<usize>,
    in_flight: usize,
    next_check: u32,
    rng: SmallRng,
}

impl Scheduler {
    /// A scheduler with no searches. `registry` carries restored entries; `seed` drives the
    /// interval jitter and the backoff jitter (the shell seeds it from the OS).
    #[must_use]
    pub fn new(config: SchedulerConfig, registry: Registry, seed: u64) -> Self {
        Self {
            config,
            registry,
            targets: Vec::new(),
            by_url: HashMap::new(),
            by_search: HashMap::new(),
            sites: Vec::new(),
            site_index: HashMap::new(),
            events: Timers::new(),
            scratch: Vec::new(),
            ready: VecDeque::new(),
            in_flight: 0,
            next_check: 0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// Adds a search. A search whose URL is already scheduled joins that fetch (single-flight);
    /// the shorter interval wins.
    pub fn add_search(&mut self, spec: SearchSpec, now: Timestamp) {
        let due = spec.first_due.unwrap_or(now);
        if let Some(&t) = self.by_url.get(&spec.url) {
            let target = &mut self.targets[t];
            target.searches = target.searches.iter().copied().chain([spec.id]).collect();
            target.interval = target.interval.min(spec.interval);
            self.by_search.insert(spec.id, t);
            if target.state == TargetState::Gone {
                // A search added again for a page that was gone gets a fresh chance.
                target.state = TargetState::Idle;
                target.next_due = due;
                self.events.push(due.0, Event::TargetDue(t));
            }
            return;
        }
        let site = self.site_slot(&spec.site);
        let t = self.targets.len();
        self.targets.push(Target {
            url: spec.url.as_str().into(),
            site,
            searches: Arc::new([spec.id]),
            check: CheckId(0),
            interval: spec.interval,
            next_due: due,
            state: TargetState::Idle,
            probe: false,
        });
        self.sites[site].targets.push(t);
        self.by_url.insert(spec.url, t);
        self.by_search.insert(spec.id, t);
        self.events.push(due.0, Event::TargetDue(t));
    }

    fn site_slot(&mut self, key: &SiteKey) -> usize {
        if let Some(&i) = self.site_index.get(key) {
            return i;
        }
        let i = self.sites.len();
        let spacing = self
            .config
            .site_spacing
            .get(key)
            .copied()
            .unwrap_or(self.config.spacing);
        let gated = self.registry.entry(key).is_some();
        self.sites.push(SiteSlot {
            key: key.clone(),
            spacing,
            last_start: None,
            in_flight: false,
            due: BinaryHeap::new(),
            wake_at: None,
            paused: false,
            in_ready: false,
            gated,
            targets: Vec::new(),
        });
        self.site_index.insert(key.clone(), i);
        i
    }

    /// The registry (entries, probe state, `soonest()`).
    #[must_use]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The next check to start at `now`, or `None` when nothing may start now. Call repeatedly
    /// until `None`, then sleep until [`Self::poll_timeout`].
    pub fn poll_due(&mut self, now: Timestamp) -> Option<Check> {
        if self.events.any_due(now.0) {
            let mut due = std::mem::take(&mut self.scratch);
            self.events.drain_due(now.0, &mut due);
            for (at, event) in due.drain(..) {
                self.handle_event(Timestamp(at), event);
            }
            self.scratch = due;
        }
        while self.in_flight < self.config.concurrency {
            let s = self.ready.pop_front()?;
            self.sites[s].in_ready = false;
            if let Some(check) = self.try_dispatch(s, now) {
                return Some(check);
            }
        }
        None
    }

    fn handle_event(&mut self, at: Timestamp, event: Event) {
        {
            match event {
                Event::TargetDue(t) => {
                    let target = &mut self.targets[t];
                    if target.state == TargetState::Idle && target.next_due == at {
                        target.state = TargetState::Queued;
                        let site = target.site;
                        self.sites[site].due.push(Reverse((at, t)));
                        self.mark_ready(site);
                    }
                }
                Event::SiteWake(s) => {
                    if self.sites[s].wake_at == Some(at) {
                        self.sites[s].wake_at = None;
                        self.mark_ready(s);
                    }
                }
            }
        }
    }

    fn mark_ready(&mut self, s: usize) {
        if !self.sites[s].in_ready {
            self.sites[s].in_ready = true;
            self.ready.push_back(s);
        }
    }

    fn set_wake(&mut self, s: usize, at: Timestamp) {
        let site = &mut self.sites[s];
        if site.wake_at.is_none_or(|w| at < w) {
            site.wake_at = Some(at);
            self.events.push(at.0, Event::SiteWake(s));
        }
    }

    fn try_dispatch(&mut self, s: usize, now: Timestamp) -> Option<Check> {
        let site = &self.sites[s];
        if site.due.is_empty() || site.paused || site.in_flight {
            return None;
        }
        if let Some(last) = site.last_start {
            let allowed = last + site.spacing;
            if now < allowed {
                self.set_wake(s, allowed);
                return None;
            }
        }
        let probe = if site.gated {
            match self.registry.admit(&site.key, now) {
                Admission::Clear => false,
                Admission::Probe => true,
                Admission::Wait(until) => {
                    self.set_wake(s, until);
                    return None;
                }
                Admission::ProbeInFlight => return None,
            }
        } else {
            false
        };
        let site = &mut self.sites[s];
        let Reverse((due, t)) = site.due.pop()?;
        site.in_flight = true;
        site.last_start = Some(now);
        // The id carries the target's index (low 32 bits) and a sequence number, so an outcome
        // finds its check without a map; a stale or unknown id does not match `target.check`.
        let id = CheckId((u64::from(self.next_check) << 32) | t as u64);
        self.next_check = self.next_check.wrapping_add(1);
        let target = &mut self.targets[t];
        target.state = TargetState::InFlight;
        target.probe = probe;
        target.check = id;
        self.in_flight += 1;
        Some(Check {
            id,
            site: site.key.clone(),
            url: Arc::clone(&target.url),
            searches: Arc::clone(&target.searches),
            probe,
            due,
        })
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
        let t = self.take_in_flight(id)?;
        let s = self.targets[t].site;
        let key = self.sites[s].key.clone();
        let reaction = if let Some(kind) = outcome.refusal_kind() {
            self.requeue(t);
            Some(self.record_refusal(s, &key, kind, retry_after, now))
        } else {
            let cleared = if self.sites[s].gated {
                self.sites[s].gated = false;
                self.registry.clear(&key).map(|was| Reaction::SiteCleared {
                    site: key.clone(),
                    was,
                })
            } else {
                None
            };
            match outcome {
                Outcome::SessionExpired => {
                    self.sites[s].paused = true;
                    self.requeue(t);
                    Some(Reaction::SessionExpired { site: key })
                }
                Outcome::SearchGone => {
                    // The search's fate matters more to the user than the site clearing (which
                    // status views show anyway), so a probe that finds a 404 reports SearchGone.
                    self.targets[t].state = TargetState::Gone;
                    Some(Reaction::SearchGone {
                        searches: self.targets[t].searches.to_vec(),
                    })
                }
                _ => {
                    self.reschedule(t, now);
                    cleared
                }
            }
        };
        self.mark_ready(s);
        reaction
    }

    fn record_refusal(
        &mut self,
        s: usize,
        key: &SiteKey,
        kind: RefusalKind,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Reaction {
        let random = self.rng.random::<f64>();
        self.sites[s].gated = true;
        let entry = self
            .registry
            .record(key, kind, now, retry_after, random)
            .clone();
        let searches = self.sites[s]
            .targets
            .iter()
            .map(|&t| self.targets[t].searches.len())
            .sum();
        Reaction::SiteWaiting {
            site: key.clone(),
            entry,
            searches,
        }
    }

    /// The check was abandoned without an outcome (shutdown): the search goes back in the queue
    /// and a probe, if it was one, is released.
    pub fn abandon(&mut self, id: CheckId) {
        let probe = self
            .targets
            .get((id.0 & 0xFFFF_FFFF) as usize)
            .is_some_and(|t| t.probe);
        let Some(t) = self.take_in_flight(id) else {
            return;
        };
        let s = self.targets[t].site;
        if probe {
            self.registry.abandon_probe(&self.sites[s].key.clone());
        }
        self.requeue(t);
        self.mark_ready(s);
    }

    /// Ends check `id` if it is in flight: returns its target.
    fn take_in_flight(&mut self, id: CheckId) -> Option<usize> {
        let t = (id.0 & 0xFFFF_FFFF) as usize;
        let target = self.targets.get_mut(t)?;
        if target.state != TargetState::InFlight || target.check != id {
            return None;
        }
        target.probe = false;
        let s = target.site;
        self.sites[s].in_flight = false;
        self.in_flight -= 1;
        Some(t)
    }

    fn requeue(&mut self, t: usize) {
        let target = &mut self.targets[t];
        target.state = TargetState::Queued;
        let site = target.site;
        self.sites[site].due.push(Reverse((target.next_due, t)));
    }

    fn reschedule(&mut self, t: usize, now: Timestamp) {
        let j = self.config.interval_jitter;
        let factor = 1.0 - j + self.rng.random::<f64>() * 2.0 * j;
        let target = &mut self.targets[t];
        let next = now
            + Duration::from_millis((target.interval.as_millis() as f64 * factor).round() as u64);
        target.next_due = next;
        target.state = TargetState::Idle;
        self.events.push(next.0, Event::TargetDue(t));
    }

    /// The user refreshed the site's cookies: resume its searches.
    pub fn resume_site(&mut self, site: &SiteKey) {
        if let Some(&s) = self.site_index.get(site) {
            self.sites[s].paused = false;
            self.mark_ready(s);
        }
    }

    /// Marks a site paused (restored from the store at start-up).
    pub fn pause_site(&mut self, site: &SiteKey) {
        if let Some(&s) = self.site_index.get(site) {
            self.sites[s].paused = true;
        }
    }

    /// The next instant at which [`Self::poll_due`] may return something, or `None` if nothing
    /// is scheduled (everything parked, or waiting for in-flight checks). May be early (stale
    /// events): a spurious poll is harmless.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if !self.ready.is_empty() && self.in_flight < self.config.concurrency {
            return Some(Timestamp(0));
        }
        self.events.next_deadline().map(Timestamp)
    }

    /// Checks in flight.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// How a search looks right now, and when it will next be checked.
    #[must_use]
    pub fn search_state(&self, id: SearchId) -> Option<(SearchState, Option<Timestamp>)> {
        let &t = self.by_search.get(&id)?;
        let target = &self.targets[t];
        let site = &self.sites[target.site];
        if target.state == TargetState::Gone {
            return Some((SearchState::SearchGone, None));
        }
        if site.paused {
            return Some((SearchState::SessionExpired, None));
        }
        if target.state == TargetState::InFlight && target.probe {
            return Some((SearchState::Probing, None));
        }
        if let Some(entry) = self.registry.entry(&site.key) {
            return Some((
                SearchState::Waiting,
                Some(entry.next_retry_at.max(target.next_due)),
            ));
        }
        let spaced = site.last_start.map(|l| l + site.spacing);
        let next = match target.state {
            TargetState::InFlight => None,
            _ => Some(spaced.map_or(target.next_due, |s| s.max(target.next_due))),
        };
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
