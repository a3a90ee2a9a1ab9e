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
//! Internally: one timer queue of events (a search comes due, a site may send again) — an
//! timing wheel, see `timers.rs` — and per site a sorted list of its due searches, most
//! overdue first, threaded through the targets. Targets and sites are arrays of 32-byte records
//! indexed by `u32`, with the cold parts (URLs, search ids, site keys) in parallel arrays; a
//! [`Check`] is a small `Copy` value (no reference counts); the registry is only consulted for
//! sites that have an entry, and a check's id encodes its target, so the common path of a check
//! hashes nothing and allocates nothing. Nothing is scanned. The cost at 100,000 searches is
//! cache misses on the records, so a batch of due events reads its records ahead together.

use crate::backoff::RefusalKind;
use crate::classify::Outcome;
use crate::registry::{Admission, Entry, Registry};
use crate::site::SiteKey;
use crate::time::Timestamp;
use crate::timers::{Node, Timers};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, VecDeque};
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

/// "No time": no wake-up pending.
const NEVER: u64 = u64::MAX;
/// End of a site's due queue.
const NIL: u32 = u32::MAX;

/// One URL to fetch, answering one or more searches: what a check touches, in 32 bytes so
/// that two share a cache line and 100,000 of them take 3.2 MB. The URL and the search ids
/// are cold (only the driver reads them) and live in `Scheduler::urls` / `searches`.
#[derive(Debug)]
#[repr(align(32))]
struct Target {
    /// When it is next due (ms); while queued, its place in the site's queue.
    next_due: u64,
    /// The interval in ms (the shortest of its searches'; saturates at ~49 days).
    interval_ms: u32,
    /// The sequence number of the check in flight (the high half of its `CheckId`).
    seq: u32,
    site: u32,
    /// The next target in its site's due queue, or `NIL`.
    queue_next: u32,
    state: TargetState,
    probe: bool,
}

/// A site as the hot path needs it (32 bytes; its key is cold, in `Scheduler::site_keys`).
#[derive(Debug)]
#[repr(align(32))]
struct SiteSlot {
    /// No start before this (last start + spacing; 0 before the first start).
    next_start: u64,
    /// Spacing in ms (saturates at ~49 days).
    spacing_ms: u32,
    /// The pending wake-up (`NEVER` if none): its node is in the timer wheel at this time, or
    /// a far-heap entry for it exists.
    wake_at: u64,
    /// The due queue: targets ready to go, sorted by (due, index), threaded through
    /// `Target::queue_next`. Usually 0-2 long, so a sorted list beats a heap.
    head: u32,
    tail: u32,
    in_flight: bool,
    paused: bool,
    in_ready: bool,
    /// The registry may have an entry (or a probe) for this site. When false the registry is
    /// not consulted at all: it is only ever changed through this scheduler.
    gated: bool,
}

const _: () = assert!(size_of::<Target>() == 32);
const _: () = assert!(size_of::<SiteSlot>() == 32);

/// The pure scheduler. See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    registry: Registry,
    targets: Vec<Target>,
    /// Per target: its URL and the searches it answers (cold: read by the driver only).
    urls: Vec<Arc<str>>,
    searches: Vec<Arc<[SearchId]>>,
    by_url: HashMap<String, usize>,
    by_search: HashMap<SearchId, usize>,
    sites: Vec<SiteSlot>,
    /// Per site: its key (cold).
    site_keys: Vec<SiteKey>,
    /// Per site: its targets (cold: only counted when a site starts waiting).
    site_targets: Vec<Vec<u32>>,
    site_index: HashMap<SiteKey, usize>,
    events: Timers,
    scratch: Vec<(u64, Node)>,
    ready: VecDeque<u32>,
    in_flight: usize,
    next_check: u32,
    rng: SmallRng,
}

/// Milliseconds as a `u32`, saturating (~49 days: longer intervals or spacings are not
/// meaningful for a watcher).
fn millis32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
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
            urls: Vec::new(),
            searches: Vec::new(),
            by_url: HashMap::new(),
            by_search: HashMap::new(),
            sites: Vec::new(),
            site_keys: Vec::new(),
            site_targets: Vec::new(),
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
            let searches = &mut self.searches[t];
            *searches = searches.iter().copied().chain([spec.id]).collect();
            let target = &mut self.targets[t];
            target.interval_ms = target.interval_ms.min(millis32(spec.interval));
            self.by_search.insert(spec.id, t);
            if target.state == TargetState::Gone {
                // A search added again for a page that was gone gets a fresh chance.
                target.state = TargetState::Idle;
                target.next_due = due.0;
                self.events.push(due.0, Node::target(t as u32));
            }
            return;
        }
        let site = self.site_slot(&spec.site);
        let t = self.targets.len();
        assert!(t < (1 << 31), "more than 2^31 search URLs");
        self.targets.push(Target {
            next_due: due.0,
            interval_ms: millis32(spec.interval),
            seq: 0,
            site: site as u32,
            queue_next: NIL,
            state: TargetState::Idle,
            probe: false,
        });
        self.urls.push(spec.url.as_str().into());
        self.searches.push(Arc::new([spec.id]));
        self.site_targets[site].push(t as u32);
        self.by_url.insert(spec.url, t);
        self.by_search.insert(spec.id, t);
        self.events.push(due.0, Node::target(t as u32));
    }

    fn site_slot(&mut self, key: &SiteKey) -> usize {
        if let Some(&i) = self.site_index.get(key) {
            return i;
        }
        let i = self.sites.len();
        assert!(i < (1 << 31), "more than 2^31 sites");
        let spacing = self
            .config
            .site_spacing
            .get(key)
            .copied()
            .unwrap_or(self.config.spacing);
        let gated = self.registry.entry(key).is_some();
        self.sites.push(SiteSlot {
            next_start: 0,
            spacing_ms: millis32(spacing),
            wake_at: NEVER,
            head: NIL,
            tail: NIL,
            in_flight: false,
            paused: false,
            in_ready: false,
            gated,
        });
        self.site_keys.push(key.clone());
        self.site_targets.push(Vec::new());
        self.site_index.insert(key.clone(), i);
        i
    }

    /// The registry (entries, probe state, `soonest()`).
    #[must_use]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The page check `id` fetches, for any id this scheduler issued (in flight or not);
    /// `None` for an id it never issued. Cloning the `Arc` does not copy the URL.
    #[must_use]
    pub fn check_url(&self, id: CheckId) -> Option<&Arc<str>> {
        self.urls.get((id.0 & 0xFFFF_FFFF) as usize)
    }

    /// Every search check `id` answers (more than one when searches share a URL), for any id
    /// this scheduler issued; `None` for an id it never issued. A search added later for the
    /// same URL joins this list.
    #[must_use]
    pub fn check_searches(&self, id: CheckId) -> Option<&Arc<[SearchId]>> {
        self.searches.get((id.0 & 0xFFFF_FFFF) as usize)
    }

    /// The key of a site this scheduler numbered (see [`SiteIndex`]).
    ///
    /// # Panics
    /// If `site` did not come from this scheduler (a [`Check`] or [`Self::site_index`]).
    #[must_use]
    pub fn site_key(&self, site: SiteIndex) -> &SiteKey {
        &self.site_keys[site.0 as usize]
    }

    /// The number of a site this scheduler knows, or `None`.
    #[must_use]
    pub fn site_index(&self, key: &SiteKey) -> Option<SiteIndex> {
        self.site_index.get(key).map(|&s| SiteIndex(s as u32))
    }

    /// The next check to start at `now`, or `None` when nothing may start now. Call repeatedly
    /// until `None`, then sleep until [`Self::poll_timeout`].
    pub fn poll_due(&mut self, now: Timestamp) -> Option<Check> {
        if self.events.any_due(now.0) {
            let mut due = std::mem::take(&mut self.scratch);
            let (targets, sites) = (&self.targets, &self.sites);
            self.events
                .drain_due(now.0, &mut due, |at, node| match node.split() {
                    Ok(t) => {
                        let target = &targets[t as usize];
                        target.state == TargetState::Idle && target.next_due == at
                    }
                    Err(s) => sites[s as usize].wake_at == at,
                });
            self.touch(&due);
            for &(at, node) in &due {
                self.handle_event(at, node);
            }
            due.clear();
            self.scratch = due;
        }
        while self.in_flight < self.config.concurrency {
            let s = self.ready.pop_front()? as usize;
            self.sites[s].in_ready = false;
            if let Some(check) = self.try_dispatch(s, now) {
                return Some(check);
            }
        }
        None
    }

    /// Reads, for each event of a batch, the records its handling will need (a target's own
    /// record and its site's queue tail, for `enqueue`; a site's queue head, for `dequeue`),
    /// all at once before handling any: the loads of different events are independent, so
    /// their cache misses overlap instead of coming one by one. (A safe stand-in for a
    /// prefetch instruction.)
    fn touch(&self, due: &[(u64, Node)]) {
        let mut acc = 0u32;
        for &(_, node) in due {
            let t = match node.split() {
                Ok(t) => match self.targets.get(t as usize) {
                    Some(target) => match self.sites.get(target.site as usize) {
                        Some(site) => site.tail,
                        None => continue,
                    },
                    None => continue,
                },
                Err(s) => self.sites[s as usize].head,
            };
            if let Some(target) = self.targets.get(t as usize) {
                acc ^= target.queue_next;
            }
        }
        std::hint::black_box(acc);
    }

    fn handle_event(&mut self, at: u64, node: Node) {
        match node.split() {
            Ok(t) => {
                let target = &mut self.targets[t as usize];
                if target.state == TargetState::Idle && target.next_due == at {
                    target.state = TargetState::Queued;
                    let site = target.site as usize;
                    self.enqueue(site, t);
                    self.mark_ready(site);
                }
            }
            Err(s) => {
                let site = &mut self.sites[s as usize];
                if site.wake_at == at {
                    site.wake_at = NEVER;
                    self.mark_ready(s as usize);
                }
            }
        }
    }

    /// Puts the site in the ready queue if it has something to send (a site with an empty due
    /// queue could not dispatch anything, so it is not worth a visit).
    fn mark_ready(&mut self, s: usize) {
        let site = &mut self.sites[s];
        if !site.in_ready && site.head != NIL {
            site.in_ready = true;
            self.ready.push_back(s as u32);
        }
    }

    fn set_wake(&mut self, s: usize, at: u64) {
        let site = &mut self.sites[s];
        if at < site.wake_at {
            let node = Node::site(s as u32);
            if site.wake_at != NEVER {
                self.events.remove(site.wake_at, node);
            }
            site.wake_at = at;
            self.events.push(at, node);
        }
    }

    /// Inserts target `t` into site `s`'s due queue, ordered by (due, index) like a min-heap
    /// would pop them. Appending (the usual case: things come due in time order) and putting a
    /// requeued check back in front are O(1).
    fn enqueue(&mut self, s: usize, t: u32) {
        let key = (self.targets[t as usize].next_due, t);
        let site = &mut self.sites[s];
        let targets = &mut self.targets;
        if site.head == NIL {
            targets[t as usize].queue_next = NIL;
            site.head = t;
            site.tail = t;
            return;
        }
        let tail = site.tail;
        if key >= (targets[tail as usize].next_due, tail) {
            targets[tail as usize].queue_next = t;
            targets[t as usize].queue_next = NIL;
            site.tail = t;
            return;
        }
        let mut prev = site.head;
        if key < (targets[prev as usize].next_due, prev) {
            targets[t as usize].queue_next = prev;
            site.head = t;
            return;
        }
        // Somewhere in the middle: `key` is below the tail's, so the walk ends before it.
        loop {
            let next = targets[prev as usize].queue_next;
            if key < (targets[next as usize].next_due, next) {
                targets[t as usize].queue_next = next;
                targets[prev as usize].queue_next = t;
                return;
            }
            prev = next;
        }
    }

    fn dequeue(&mut self, s: usize) -> Option<u32> {
        let site = &mut self.sites[s];
        let t = site.head;
        if t == NIL {
            return None;
        }
        site.head = self.targets[t as usize].queue_next;
        if site.head == NIL {
            site.tail = NIL;
        }
        Some(t)
    }

    fn try_dispatch(&mut self, s: usize, now: Timestamp) -> Option<Check> {
        let site = &self.sites[s];
        if site.head == NIL || site.paused || site.in_flight {
            return None;
        }
        if now.0 < site.next_start {
            self.set_wake(s, site.next_start);
            return None;
        }
        let probe = if site.gated {
            match self.registry.admit(&self.site_keys[s], now) {
                Admission::Clear => false,
                Admission::Probe => true,
                Admission::Wait(until) => {
                    self.set_wake(s, until.0);
                    return None;
                }
                Admission::ProbeInFlight => return None,
            }
        } else {
            false
        };
        let t = self.dequeue(s)?;
        let site = &mut self.sites[s];
        site.in_flight = true;
        site.next_start = now.0.saturating_add(u64::from(site.spacing_ms));
        // The id carries the target's index (low 32 bits) and a sequence number, so an outcome
        // finds its check without a map; a stale or unknown id does not match `target.seq`.
        let seq = self.next_check;
        let id = CheckId((u64::from(seq) << 32) | u64::from(t));
        self.next_check = seq.wrapping_add(1);
        let target = &mut self.targets[t as usize];
        target.state = TargetState::InFlight;
        target.probe = probe;
        target.seq = seq;
        self.in_flight += 1;
        Some(Check {
            id,
            site: SiteIndex(s as u32),
            probe,
            due: Timestamp(target.next_due),
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
        let s = self.targets[t].site as usize;
        let reaction = if let Some(kind) = outcome.refusal_kind() {
            self.requeue(t);
            Some(self.record_refusal(s, kind, retry_after, now))
        } else {
            let cleared = if self.sites[s].gated {
                self.sites[s].gated = false;
                let key = &self.site_keys[s];
                self.registry.clear(key).map(|was| Reaction::SiteCleared {
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
                    Some(Reaction::SessionExpired {
                        site: self.site_keys[s].clone(),
                    })
                }
                Outcome::SearchGone => {
                    // The search's fate matters more to the user than the site clearing (which
                    // status views show anyway), so a probe that finds a 404 reports SearchGone.
                    self.targets[t].state = TargetState::Gone;
                    Some(Reaction::SearchGone {
                        searches: self.searches[t].to_vec(),
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
        kind: RefusalKind,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Reaction {
        let random = self.rng.random::<f64>();
        self.sites[s].gated = true;
        let key = self.site_keys[s].clone();
        let entry = self
            .registry
            .record(&key, kind, now, retry_after, random)
            .clone();
        let searches = self.site_targets[s]
            .iter()
            .map(|&t| self.searches[t as usize].len())
            .sum();
        Reaction::SiteWaiting {
            site: key,
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
        let s = self.targets[t].site as usize;
        if probe {
            self.registry.abandon_probe(&self.site_keys[s]);
        }
        self.requeue(t);
        self.mark_ready(s);
    }

    /// Ends check `id` if it is in flight: returns its target.
    fn take_in_flight(&mut self, id: CheckId) -> Option<usize> {
        let t = (id.0 & 0xFFFF_FFFF) as usize;
        let target = self.targets.get_mut(t)?;
        if target.state != TargetState::InFlight || u64::from(target.seq) != id.0 >> 32 {
            return None;
        }
        target.probe = false;
        let s = target.site as usize;
        self.sites[s].in_flight = false;
        self.in_flight -= 1;
        Some(t)
    }

    fn requeue(&mut self, t: usize) {
        let target = &mut self.targets[t];
        target.state = TargetState::Queued;
        let site = target.site as usize;
        self.enqueue(site, t as u32);
    }

    fn reschedule(&mut self, t: usize, now: Timestamp) {
        let j = self.config.interval_jitter;
        let factor = 1.0 - j + self.rng.random::<f64>() * 2.0 * j;
        let target = &mut self.targets[t];
        // `+ 0.5` then truncate: rounds like `f64::round` for the non-negative values here
        // (a negative product saturates to 0 either way) without a libm call.
        let ms = (f64::from(target.interval_ms) * factor + 0.5) as u64;
        let next = now.0.saturating_add(ms);
        target.next_due = next;
        target.state = TargetState::Idle;
        self.events.push(next, Node::target(t as u32));
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
        let site = &self.sites[target.site as usize];
        if target.state == TargetState::Gone {
            return Some((SearchState::SearchGone, None));
        }
        if site.paused {
            return Some((SearchState::SessionExpired, None));
        }
        if target.state == TargetState::InFlight && target.probe {
            return Some((SearchState::Probing, None));
        }
        if let Some(entry) = self.registry.entry(&self.site_keys[target.site as usize]) {
            return Some((
                SearchState::Waiting,
                Some(entry.next_retry_at.max(Timestamp(target.next_due))),
            ));
        }
        // `next_start` is 0 before the site's first check: then only the due time counts.
        let next = match target.state {
            TargetState::InFlight => None,
            _ => Some(Timestamp(site.next_start.max(target.next_due))),
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
        self.site_keys.iter()
    }
}
