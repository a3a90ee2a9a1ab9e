//! The scheduler against a reference scheduler written for obviousness: a `BinaryHeap` of
//! wake-ups and, per site, an ordered set of waiting pages. Random operation sequences (searches
//! added, sharing URLs and coming back after a 404; outcomes of every kind, refusals with
//! Retry-After, session expiry, search gone; pauses and resumes; released slots; abandons;
//! stale ids; spurious polls; time jumps, forward and back) must give the same checks in the
//! same order, the same `poll_timeout`, the same reactions and the same states.
//!
//! The rules the reference spells out, which the scheduler's docs state too:
//! - a site wakes at the first 8 ms tick at or after the later of its next allowed start and
//!   its first waiting page's due time; a wake-up only ever moves earlier;
//! - sites come out by wake-up tick, ties in the order their wake-ups were set (`seq`);
//! - a site checks its earliest due page, ties to the page added first;
//! - intervals saturate at `u32::MAX` ms, and check ids are `count << 48 | slot << 32 | site`.

use crate::common::outcome;
use notifio_policy::jitter::{Draws, Jitter};
use notifio_policy::schedule::{SearchState, SiteState};
use notifio_policy::{
    Admission, BackoffPolicy, Check, CheckId, Entry, Ladders, Outcome, Reaction, RefusalKind,
    Registry, Scheduler, SchedulerConfig, SearchId, SearchSpec, SiteIndex, SiteKey, Timestamp,
};
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::time::Duration;

const TICK_MS: u64 = 8;

struct RefPage {
    url: String,
    searches: Vec<SearchId>,
    interval_ms: u64,
    gone: bool,
}

#[derive(Clone, Copy)]
struct Out {
    id: CheckId,
    slot: usize,
    due: u64,
    probe: bool,
    released: bool,
}

struct RefSite {
    key: SiteKey,
    spacing_ms: u64,
    next_start: u64,
    pages: Vec<RefPage>,
    /// `(due, slot)` of the pages waiting for a check.
    waiting: BTreeSet<(u64, usize)>,
    out: Option<Out>,
    checks: u16,
    paused: bool,
    refused: bool,
    /// `(tick, seq)` of its wake-up.
    wake: Option<(u64, u64)>,
}

struct Reference {
    config: SchedulerConfig,
    jitter: Jitter,
    registry: Registry,
    draws: Draws,
    sites: Vec<RefSite>,
    site_of: HashMap<SiteKey, usize>,
    page_of_url: HashMap<String, (usize, usize)>,
    page_of_search: HashMap<SearchId, (usize, usize)>,
    /// Wake-ups `(tick, seq, site)`; one whose site no longer has it is skipped.
    wakes: BinaryHeap<Reverse<(u64, u64, usize)>>,
    seq: u64,
    in_flight: usize,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Reference {
    fn new(config: SchedulerConfig, registry: Registry, seed: u64) -> Self {
        let jitter = Jitter::new(config.interval_jitter);
        let (site_of, page_of_url, page_of_search) = Default::default();
        let (draws, wakes) = (Draws::new(seed), BinaryHeap::new());
        Self {
            config,
            jitter,
            registry,
            draws,
            sites: Vec::new(),
            site_of,
            page_of_url,
            page_of_search,
            wakes,
            seq: 0,
            in_flight: 0,
        }
    }

    fn add_search(&mut self, spec: SearchSpec, now: Timestamp) {
        let due = spec.first_due.unwrap_or(now).0;
        let interval_ms = ms(spec.interval).min(u64::from(u32::MAX));
        if let Some(&(s, slot)) = self.page_of_url.get(&spec.url) {
            self.page_of_search.insert(spec.id, (s, slot));
            let page = &mut self.sites[s].pages[slot];
            page.searches.push(spec.id);
            page.interval_ms = page.interval_ms.min(interval_ms);
            if page.gone {
                page.gone = false;
                self.sites[s].waiting.insert((due, slot));
                self.arm(s);
            }
            return;
        }
        let s = match self.site_of.get(&spec.site) {
            Some(&s) => s,
            None => {
                let spacing = self.config.site_spacing.get(&spec.site).copied();
                self.sites.push(RefSite {
                    key: spec.site.clone(),
                    spacing_ms: ms(spacing.unwrap_or(self.config.spacing)),
                    next_start: 0,
                    pages: Vec::new(),
                    waiting: BTreeSet::new(),
                    out: None,
                    checks: 0,
                    paused: false,
                    refused: self.registry.entry(&spec.site).is_some(),
                    wake: None,
                });
                self.site_of.insert(spec.site.clone(), self.sites.len() - 1);
                self.sites.len() - 1
            }
        };
        let site = &mut self.sites[s];
        let slot = site.pages.len();
        let page = RefPage {
            url: spec.url.clone(),
            searches: vec![spec.id],
            interval_ms,
            gone: false,
        };
        site.pages.push(page);
        site.waiting.insert((due, slot));
        self.page_of_url.insert(spec.url, (s, slot));
        self.page_of_search.insert(spec.id, (s, slot));
        self.arm(s);
    }

    fn wake_at(&mut self, s: usize, at: u64) {
        let tick = at.div_ceil(TICK_MS);
        if self.sites[s].wake.is_none_or(|(t, _)| tick < t) {
            self.seq += 1;
            self.sites[s].wake = Some((tick, self.seq));
            self.wakes.push(Reverse((tick, self.seq, s)));
        }
    }

    fn arm(&mut self, s: usize) {
        let site = &self.sites[s];
        if let (None, false, Some(&(due, _))) = (site.out, site.paused, site.waiting.first()) {
            self.wake_at(s, site.next_start.max(due));
        }
    }

    fn poll_due(&mut self, now: Timestamp) -> Option<Check> {
        while self.in_flight < self.config.concurrency {
            let &Reverse((tick, seq, s)) = self.wakes.peek()?;
            if tick > now.0 / TICK_MS {
                return None;
            }
            self.wakes.pop();
            if self.sites[s].wake != Some((tick, seq)) {
                continue; // stale: the site's wake-up moved earlier since
            }
            self.sites[s].wake = None;
            if let Some(check) = self.start(s, now) {
                return Some(check);
            }
        }
        None
    }

    fn start(&mut self, s: usize, now: Timestamp) -> Option<Check> {
        let site = &self.sites[s];
        if site.out.is_some() || site.paused {
            return None;
        }
        let &(due, slot) = site.waiting.first()?;
        if now.0 < site.next_start.max(due) {
            self.wake_at(s, site.next_start.max(due));
            return None;
        }
        let probe = match site.refused.then(|| self.registry.admit(&site.key, now)) {
            None | Some(Admission::Clear) => false,
            Some(Admission::Probe) => true,
            Some(Admission::Wait(until)) => {
                self.wake_at(s, until.0);
                return None;
            }
            Some(Admission::ProbeInFlight) => return None,
        };
        let site = &mut self.sites[s];
        site.waiting.remove(&(due, slot));
        site.checks = site.checks.wrapping_add(1);
        let id = CheckId(u64::from(site.checks) << 48 | (slot as u64) << 32 | s as u64);
        site.out = Some(Out {
            id,
            slot,
            due,
            probe,
            released: false,
        });
        site.next_start = now.0.saturating_add(site.spacing_ms);
        self.in_flight += 1;
        Some(Check {
            id,
            site: SiteIndex(s as u32),
            probe,
            spare: None,
        })
    }

    fn land(&mut self, id: CheckId) -> Option<(usize, Out)> {
        let s = (id.0 & 0xFFFF_FFFF) as usize;
        let out = self.sites.get(s)?.out.filter(|o| o.id == id)?;
        self.sites[s].out = None;
        self.in_flight -= usize::from(!out.released);
        Some((s, out))
    }

    fn handle_outcome(
        &mut self,
        id: CheckId,
        outcome: Outcome,
        retry_after: Option<Duration>,
        now: Timestamp,
    ) -> Option<Reaction> {
        let (s, out) = self.land(id)?;
        let reaction = if let Some(kind) = outcome.refusal_kind() {
            self.sites[s].waiting.insert((out.due, out.slot));
            let random = self.draws.next_f64();
            let site = &mut self.sites[s];
            site.refused = true;
            let entry = self
                .registry
                .record(&site.key, kind, now, retry_after, random)
                .clone();
            let searches = site.pages.iter().map(|p| p.searches.len()).sum();
            Some(Reaction::SiteWaiting {
                site: site.key.clone(),
                entry,
                searches,
            })
        } else {
            let site = &mut self.sites[s];
            let was = std::mem::take(&mut site.refused).then(|| self.registry.clear(&site.key));
            let cleared = was.flatten().map(|was| Reaction::SiteCleared {
                site: site.key.clone(),
                was,
            });
            match outcome {
                Outcome::SessionExpired => {
                    site.paused = true;
                    site.waiting.insert((out.due, out.slot));
                    Some(Reaction::SessionExpired {
                        site: site.key.clone(),
                    })
                }
                Outcome::SearchGone => {
                    site.pages[out.slot].gone = true;
                    Some(Reaction::SearchGone {
                        searches: site.pages[out.slot].searches.clone(),
                    })
                }
                _ => {
                    let random = self.draws.next_f64();
                    let due =
                        self.jitter
                            .due_after(now.0, site.pages[out.slot].interval_ms, random);
                    site.waiting.insert((due, out.slot));
                    cleared
                }
            }
        };
        self.arm(s);
        reaction
    }

    fn abandon(&mut self, id: CheckId) {
        if let Some((s, out)) = self.land(id) {
            self.sites[s].waiting.insert((out.due, out.slot));
            if out.probe {
                self.registry.abandon_probe(&self.sites[s].key);
            }
            self.arm(s);
        }
    }

    fn release_slot(&mut self, id: CheckId) -> bool {
        let s = (id.0 & 0xFFFF_FFFF) as usize;
        let out = self.sites.get_mut(s).and_then(|site| site.out.as_mut());
        let Some(out) = out.filter(|o| o.id == id && !o.released) else {
            return false;
        };
        out.released = true;
        self.in_flight -= 1;
        true
    }

    fn pause_site(&mut self, key: &SiteKey, resume: bool) {
        if let Some(&s) = self.site_of.get(key) {
            self.sites[s].paused = !resume;
            if resume {
                self.arm(s);
            }
        }
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        let next = self
            .sites
            .iter()
            .filter_map(|s| s.wake)
            .map(|(tick, _)| tick)
            .min();
        next.filter(|_| self.in_flight < self.config.concurrency)
            .map(|tick| Timestamp(tick.saturating_mul(TICK_MS)))
    }

    fn search_state(&self, id: SearchId) -> Option<(SearchState, Option<Timestamp>)> {
        let &(s, slot) = self.page_of_search.get(&id)?;
        let site = &self.sites[s];
        let out = site.out.filter(|o| o.slot == slot);
        Some(if site.pages[slot].gone {
            (SearchState::SearchGone, None)
        } else if site.paused {
            (SearchState::SessionExpired, None)
        } else if out.is_some_and(|o| o.probe) {
            (SearchState::Probing, None)
        } else {
            let waiting = site.waiting.iter().find(|w| w.1 == slot).map(|w| w.0);
            let due = Timestamp(out.map_or_else(|| waiting.unwrap_or(0), |o| o.due));
            match self.registry.entry(&site.key) {
                Some(entry) => (SearchState::Waiting, Some(entry.next_retry_at.max(due))),
                None => (
                    SearchState::Ok,
                    out.is_none().then(|| Timestamp(site.next_start).max(due)),
                ),
            }
        })
    }

    fn site_state(&self, key: &SiteKey) -> SiteState {
        match self.site_of.get(key) {
            Some(&s) if self.sites[s].paused => SiteState::SessionExpired,
            _ if self.registry.is_probing(key) => SiteState::Probing,
            _ if self.registry.entry(key).is_some() => SiteState::Waiting,
            _ => SiteState::Clear,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// A search on page `page` of site `site` (so some share a URL, or come back to a gone
    /// page), due at once or this many ms from now.
    Add {
        site: usize,
        page: usize,
        interval_ms: u64,
        first_due_ms: Option<u64>,
    },
    /// The clock moves on (the driver woke for its own reasons), or back.
    Advance(u64),
    Back(u64),
    /// Jump to `poll_timeout()`, as the driver does; or `frac` of the way there (spurious).
    ToTimeout,
    Spurious(f64),
    /// The `pick`-th check in flight ends.
    Answer {
        pick: usize,
        outcome: Outcome,
        retry_after_s: Option<u64>,
    },
    Abandon(usize),
    /// The `pick`-th check in flight is slow.
    Release(usize),
    /// An id that is no longer in flight is answered, abandoned and released.
    Stale(usize),
    Pause(usize),
    Resume(usize),
}

const SITES: usize = 4;

fn url(site: usize, page: usize) -> String {
    format!("http://127.0.0.1:{}/search/{page}", 8000 + site)
}

fn key(site: usize) -> SiteKey {
    SiteKey::from_url(&url(site, 0)).unwrap()
}

fn add() -> impl Strategy<Value = Op> {
    let interval = prop_oneof![1_000u64..120_000, Just(30_000), Just(u64::MAX)];
    let first_due = prop::option::of(prop_oneof![0u64..20, 0u64..600_000]);
    (0..SITES, 0usize..4, interval, first_due).prop_map(
        |(site, page, interval_ms, first_due_ms)| Op::Add {
            site,
            page,
            interval_ms,
            first_due_ms,
        },
    )
}

fn op() -> impl Strategy<Value = Op> {
    let retry_after = prop::option::of(prop_oneof![0u64..600, 0u64..200_000]);
    prop_oneof![
        2 => add(),
        3 => prop_oneof![0u64..20, 0u64..600_000].prop_map(Op::Advance),
        1 => prop_oneof![0u64..20, 0u64..5_000].prop_map(Op::Back),
        4 => Just(Op::ToTimeout),
        2 => (0.0f64..1.0).prop_map(Op::Spurious),
        8 => (any::<usize>(), outcome(), retry_after)
            .prop_map(|(pick, outcome, retry_after_s)| Op::Answer { pick, outcome, retry_after_s }),
        1 => any::<usize>().prop_map(Op::Abandon),
        1 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Stale),
        1 => (0..SITES).prop_map(Op::Pause),
        1 => (0..SITES).prop_map(Op::Resume),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    seed: u64,
    spacing_ms: u64,
    /// Site 1's own spacing.
    site_1_spacing_ms: Option<u64>,
    concurrency: usize,
    jitter: f64,
    short_ladders: bool,
    max_wait_s: u64,
    /// Site 2 was waiting when the app stopped: `(kind, failures, ms until next_retry_at)`.
    restored: Option<(usize, u32, u64)>,
    /// Site 3's session had expired when the app stopped.
    paused: bool,
    /// ms past a tick at the start.
    offset_ms: u64,
    /// Drain with `poll_due_into` rather than `poll_due` until `None`.
    batch: bool,
    searches: Vec<Op>,
}

fn setup() -> impl Strategy<Value = Setup> {
    let restored = prop::option::of((0usize..4, 1u32..4, 0u64..900_000));
    (
        (
            any::<u64>(),
            0u64..5_000,
            prop::option::of(0u64..8_000),
            1usize..6,
        ),
        (
            prop_oneof![Just(0.1), 0.0f64..1.0],
            any::<bool>(),
            prop_oneof![Just(3_600u64), 5u64..3_600],
        ),
        (restored, any::<bool>(), 0u64..8, any::<bool>()),
        prop::collection::vec(add(), 1..8),
    )
        .prop_map(|(a, b, c, searches)| Setup {
            seed: a.0,
            spacing_ms: a.1,
            site_1_spacing_ms: a.2,
            concurrency: a.3,
            jitter: b.0,
            short_ladders: b.1,
            max_wait_s: b.2,
            restored: c.0,
            paused: c.1,
            offset_ms: c.2,
            batch: c.3,
            searches,
        })
}

/// The scheduler and the reference, driven alike and compared after every step.
struct Pair {
    real: Scheduler,
    reference: Reference,
    now: Timestamp,
    batch: bool,
    in_flight: Vec<Check>,
    ended: Vec<CheckId>,
    searches: u32,
}

impl Pair {
    fn new(setup: &Setup) -> Self {
        let now = Timestamp(1_700_000_000_000 + setup.offset_ms);
        let ladders = match setup.short_ladders {
            true => {
                let s = |v: &[u64]| v.iter().map(|&x| Duration::from_secs(x)).collect();
                Ladders {
                    challenge: s(&[2, 5, 9]),
                    rate_limited: s(&[3, 7]),
                    denied: s(&[5, 10, 20]),
                    error: s(&[1, 2]),
                }
            }
            false => Ladders::default(),
        };
        let policy =
            BackoffPolicy::new(ladders, 0.15, Duration::from_secs(setup.max_wait_s)).unwrap();
        let mut registry = Registry::new(policy);
        if let Some((kind, failures, wait_ms)) = setup.restored {
            let entry = Entry {
                kind: RefusalKind::ALL[kind],
                failures,
                next_retry_at: now + Duration::from_millis(wait_ms),
                recorded_at: now,
                since: now,
                retry_after: None,
                lengthened_by_retry_after: false,
            };
            registry.restore([(key(2), entry)]);
        }
        let mut config = SchedulerConfig {
            spacing: Duration::from_millis(setup.spacing_ms),
            concurrency: setup.concurrency,
            interval_jitter: setup.jitter,
            ..SchedulerConfig::default()
        };
        if let Some(spacing) = setup.site_1_spacing_ms {
            config
                .site_spacing
                .insert(key(1), Duration::from_millis(spacing));
        }
        let real = Scheduler::new(config.clone(), registry.clone(), setup.seed);
        let reference = Reference::new(config, registry, setup.seed);
        let (in_flight, ended) = (Vec::new(), Vec::new());
        let mut pair = Self {
            real,
            reference,
            now,
            batch: setup.batch,
            in_flight,
            ended,
            searches: 0,
        };
        for op in &setup.searches {
            pair.apply(op);
        }
        if setup.paused {
            pair.real.pause_site(&key(3));
            pair.reference.pause_site(&key(3), false);
        }
        pair
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Add {
                site,
                page,
                interval_ms,
                first_due_ms,
            } => {
                self.searches += 1;
                let spec = SearchSpec {
                    id: SearchId(self.searches),
                    url: url(site, page),
                    site: key(site),
                    interval: Duration::from_millis(interval_ms),
                    first_due: first_due_ms.map(|ms| self.now + Duration::from_millis(ms)),
                    pages: 1,
                };
                self.real.add_search(spec.clone(), self.now);
                self.reference.add_search(spec, self.now);
            }
            Op::Advance(ms) => self.now = self.now + Duration::from_millis(ms),
            Op::Back(ms) => self.now = self.now - Duration::from_millis(ms),
            Op::ToTimeout => {
                self.now = self
                    .real
                    .poll_timeout()
                    .map_or(self.now, |t| t.max(self.now))
            }
            Op::Spurious(frac) => {
                if let Some(t) = self.real.poll_timeout().filter(|&t| t > self.now) {
                    self.now =
                        self.now + Duration::from_millis(((t.0 - self.now.0) as f64 * frac) as u64);
                }
            }
            Op::Answer {
                pick,
                outcome,
                retry_after_s,
            } => {
                if !self.in_flight.is_empty() {
                    let c = self.in_flight.remove(pick % self.in_flight.len());
                    let retry_after = retry_after_s.map(Duration::from_secs);
                    self.answer(c.id, outcome, retry_after);
                    self.ended.push(c.id);
                }
            }
            Op::Abandon(pick) => {
                if !self.in_flight.is_empty() {
                    let c = self.in_flight.remove(pick % self.in_flight.len());
                    self.real.abandon(c.id);
                    self.reference.abandon(c.id);
                    self.ended.push(c.id);
                }
            }
            Op::Release(pick) => {
                if let Some(c) = self.in_flight.get(pick % self.in_flight.len().max(1)) {
                    assert_eq!(
                        self.real.release_slot(c.id),
                        self.reference.release_slot(c.id)
                    );
                }
            }
            Op::Stale(pick) => {
                if let Some(&id) = self.ended.get(pick % self.ended.len().max(1)) {
                    self.answer(id, Outcome::Challenge, None);
                    self.real.abandon(id);
                    self.reference.abandon(id);
                    assert!(!self.real.release_slot(id) && !self.reference.release_slot(id));
                }
            }
            Op::Pause(site) => {
                self.real.pause_site(&key(site));
                self.reference.pause_site(&key(site), false);
            }
            Op::Resume(site) => {
                self.real.resume_site(&key(site));
                self.reference.pause_site(&key(site), true);
            }
        }
    }

    fn answer(&mut self, id: CheckId, outcome: Outcome, retry_after: Option<Duration>) {
        let real = self.real.handle_outcome(id, outcome, retry_after, self.now);
        let reference = self
            .reference
            .handle_outcome(id, outcome, retry_after, self.now);
        assert_eq!(real, reference, "the reaction to {outcome:?}");
    }

    /// Polls both at `now` and compares everything either shows.
    fn poll_and_compare(&mut self) -> Result<(), TestCaseError> {
        let due = match self.batch {
            true => {
                let mut due = Vec::new();
                self.real.poll_due_into(self.now, &mut due);
                due
            }
            false => std::iter::from_fn(|| self.real.poll_due(self.now)).collect(),
        };
        let want: Vec<_> = std::iter::from_fn(|| self.reference.poll_due(self.now)).collect();
        prop_assert_eq!(&due, &want, "the checks at {}", self.now);
        self.in_flight.extend(due);
        prop_assert_eq!(self.real.poll_timeout(), self.reference.poll_timeout());
        prop_assert_eq!(self.real.in_flight(), self.reference.in_flight);
        for c in &self.in_flight {
            let (s, slot) = (
                (c.id.0 & 0xFFFF_FFFF) as usize,
                ((c.id.0 >> 32) & 0xFFFF) as usize,
            );
            let page = &self.reference.sites[s].pages[slot];
            prop_assert_eq!(
                self.real.check_url(c.id).map(|u| u.to_string()),
                Some(page.url.clone())
            );
            prop_assert_eq!(
                self.real.check_searches(c.id).map(|s| s.to_vec()),
                Some(page.searches.clone())
            );
            prop_assert_eq!(self.real.site_key(c.site), &self.reference.sites[s].key);
        }
        for id in (1..=self.searches).map(SearchId) {
            prop_assert_eq!(
                self.real.search_state(id),
                self.reference.search_state(id),
                "{:?}",
                id
            );
        }
        for site in (0..SITES).map(key) {
            prop_assert_eq!(
                self.real.site_state(&site),
                self.reference.site_state(&site)
            );
            prop_assert_eq!(
                self.real.registry().entry(&site),
                self.reference.registry.entry(&site)
            );
        }
        let sites: Vec<_> = self.real.sites().cloned().collect();
        let want: Vec<_> = self.reference.sites.iter().map(|s| s.key.clone()).collect();
        prop_assert_eq!(sites, want);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_scheduler_does_what_the_reference_does(
        setup in setup(),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut pair = Pair::new(&setup);
        pair.poll_and_compare()?;
        for op in &ops {
            pair.apply(op);
            pair.poll_and_compare()?;
        }
    }
}
