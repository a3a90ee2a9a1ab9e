//! Property tests over random operation sequences (governor's `tests/proptests.rs` is the
//! model): random sites, searches (some sharing a URL), spacing, concurrency and max_wait;
//! random outcomes including Retry-After, held or answered at once; random time jumps and
//! spurious wake-ups. After every step:
//! - no check is issued to a site before its `next_retry_at`, and a check on a site with an
//!   entry is the probe (`no_check_before_next_retry_at`);
//! - no wait exceeds max_wait, and Retry-After never shortens a wait;
//! - never two checks in flight on one site, never more than `concurrency` overall, and
//!   starts on one site are at least `spacing` apart;
//! - nothing is due before `poll_timeout()`: `poll_due(t)` for any `t < poll_timeout()` is `None`;
//! - `poll_due_into` (the driver's batch form) issues exactly the checks, in the same order,
//!   that calling `poll_due` until `None` would (`batch_and_single_polls_agree`).

use crate::common::{Check, PollCheck, outcome};
use notifio_policy::{
    BackoffPolicy, CheckId, Ladders, Outcome, RefusalKind, Registry, Scheduler, SchedulerConfig,
    SearchId, SearchSpec, SiteKey, Timestamp,
};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

#[derive(Clone, Debug)]
enum Op {
    /// Let this many ms pass (the driver woke up for its own reasons).
    Advance(u64),
    /// Jump to `poll_timeout()`, as the real driver does.
    ToTimeout,
    /// A spurious wake-up somewhere before `poll_timeout()`: `frac` of the way there.
    Spurious(f64),
    /// Answer the `pick`-th check in flight.
    Answer {
        pick: usize,
        outcome: Outcome,
        retry_after_s: Option<u64>,
    },
    /// Abandon the `pick`-th check in flight (shutdown).
    Abandon(usize),
    /// The `pick`-th check in flight is slow: give its slot back (`release_slot`).
    Release(usize),
    /// Fresh cookies for site `n`.
    Resume(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..600_000).prop_map(Op::Advance),
        3 => Just(Op::ToTimeout),
        2 => (0.0f64..1.0).prop_map(Op::Spurious),
        8 => (any::<usize>(), outcome(), prop::option::of(prop_oneof![0u64..600, 0u64..200_000]))
            .prop_map(|(pick, outcome, retry_after_s)| Op::Answer { pick, outcome, retry_after_s }),
        1 => any::<usize>().prop_map(Op::Abandon),
        1 => any::<usize>().prop_map(Op::Release),
        1 => (0usize..4).prop_map(Op::Resume),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    /// (site index, url index, interval ms) per search.
    searches: Vec<(usize, usize, u64)>,
    spacing_ms: u64,
    concurrency: usize,
    max_wait_s: u64,
    short_ladders: bool,
    seed: u64,
    /// Drain with `poll_due_into` instead of `poll_due` until `None`.
    batch: bool,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop::collection::vec((0usize..4, 0usize..3, 1_000u64..120_000), 1..12),
        0u64..5_000,
        1usize..6,
        prop_oneof![Just(3600u64), 5u64..3600],
        any::<bool>(),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(searches, spacing_ms, concurrency, max_wait_s, short_ladders, seed, batch)| Setup {
                searches,
                spacing_ms,
                concurrency,
                max_wait_s,
                short_ladders,
                seed,
                batch,
            },
        )
}

fn url(site: usize, n: usize) -> String {
    format!("http://127.0.0.1:{}/search/{n}", 8000 + site)
}

struct Harness {
    s: Scheduler,
    now: Timestamp,
    in_flight: Vec<Check>,
    /// The checks in flight whose slot was given back (`release_slot`).
    released: std::collections::HashSet<CheckId>,
    last_start: HashMap<SiteKey, Timestamp>,
    spacing: Duration,
    concurrency: usize,
    max_wait: Duration,
    /// Every check issued, in order: (time, check id, probe).
    issued: Vec<(Timestamp, CheckId, bool)>,
    batch: bool,
}

impl Harness {
    fn new(setup: &Setup) -> Self {
        let max_wait = Duration::from_secs(setup.max_wait_s);
        let ladders = if setup.short_ladders {
            let s = |v: &[u64]| v.iter().map(|&x| Duration::from_secs(x)).collect();
            Ladders {
                challenge: s(&[2, 5, 9]),
                rate_limited: s(&[3, 7]),
                denied: s(&[5, 10, 20]),
                error: s(&[1, 2]),
            }
        } else {
            Ladders::default()
        };
        let policy = BackoffPolicy::new(ladders, 0.15, max_wait).unwrap();
        let spacing = Duration::from_millis(setup.spacing_ms);
        let config = SchedulerConfig {
            spacing,
            concurrency: setup.concurrency,
            ..SchedulerConfig::default()
        };
        let now = Timestamp(1_700_000_000_000);
        let mut s = Scheduler::new(config, Registry::new(policy), setup.seed);
        for (i, &(site, n, interval)) in setup.searches.iter().enumerate() {
            let u = url(site, n);
            s.add_search(
                SearchSpec {
                    id: SearchId(i as u32),
                    site: SiteKey::from_url(&u).unwrap(),
                    url: u,
                    interval: Duration::from_millis(interval),
                    first_due: None,
                    pages: 1,
                },
                now,
            );
        }
        Self {
            s,
            now,
            in_flight: Vec::new(),
            released: std::collections::HashSet::new(),
            last_start: HashMap::new(),
            spacing,
            concurrency: setup.concurrency,
            max_wait,
            issued: Vec::new(),
            batch: setup.batch,
        }
    }

    /// poll_due until None (or poll_due_into), checking every issued check.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        let due = match self.batch {
            true => self.s.poll_checks(self.now),
            false => std::iter::from_fn(|| self.s.poll_check(self.now)).collect(),
        };
        for c in due {
            self.issued.push((self.now, c.id, c.probe));
            match self.s.registry().entry(&c.site) {
                Some(e) => {
                    prop_assert!(
                        self.now >= e.next_retry_at,
                        "check to {} at {} before next_retry_at {}",
                        c.site,
                        self.now,
                        e.next_retry_at
                    );
                    prop_assert!(c.probe, "a check on a waiting site must be the probe");
                }
                None => prop_assert!(!c.probe),
            }
            prop_assert!(
                !self.in_flight.iter().any(|f| f.site == c.site),
                "two checks in flight on {}",
                c.site
            );
            if let Some(&last) = self.last_start.get(&c.site) {
                prop_assert!(
                    self.now.saturating_since(last) >= self.spacing,
                    "spacing broken on {}",
                    c.site
                );
            }
            self.last_start.insert(c.site.clone(), self.now);
            self.in_flight.push(c);
            prop_assert!(self.in_flight.len() - self.released.len() <= self.concurrency);
        }
        prop_assert_eq!(
            self.s.in_flight(),
            self.in_flight.len() - self.released.len()
        );
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Advance(ms) => self.now = self.now + Duration::from_millis(ms),
            Op::ToTimeout => {
                if let Some(t) = self.s.poll_timeout() {
                    self.now = self.now.max(t);
                }
            }
            Op::Spurious(frac) => {
                if let Some(t) = self.s.poll_timeout().filter(|&t| t > self.now) {
                    let span = t.as_millis() - self.now.as_millis();
                    let at = Timestamp(self.now.as_millis() + (span as f64 * frac) as u64);
                    prop_assert!(at < t);
                    self.now = at;
                    prop_assert!(
                        self.s.poll_check(at).is_none(),
                        "something was due at {} before poll_timeout {}",
                        at,
                        t
                    );
                }
            }
            Op::Answer {
                pick,
                outcome,
                retry_after_s,
            } => {
                if self.in_flight.is_empty() {
                    return Ok(());
                }
                let c = self.in_flight.remove(pick % self.in_flight.len());
                self.released.remove(&c.id);
                let retry_after = retry_after_s.map(Duration::from_secs);
                self.s.handle_outcome(c.id, outcome, retry_after, self.now);
                let entry = self.s.registry().entry(&c.site);
                if outcome.refusal_kind().is_some() {
                    let e = entry.expect("a refusal leaves an entry");
                    let wait = e.next_retry_at.saturating_since(self.now);
                    prop_assert!(wait <= self.max_wait, "wait {wait:?} > max_wait");
                    if let Some(ra) = retry_after {
                        prop_assert!(
                            wait >= ra.min(self.max_wait),
                            "Retry-After {ra:?} shortened to {wait:?}"
                        );
                    }
                    prop_assert!(wait > Duration::ZERO);
                } else {
                    prop_assert!(entry.is_none(), "an answer clears the site");
                }
            }
            Op::Abandon(pick) => {
                if !self.in_flight.is_empty() {
                    let c = self.in_flight.remove(pick % self.in_flight.len());
                    self.released.remove(&c.id);
                    self.s.abandon(c.id);
                    // Abandoning twice is harmless.
                    self.s.abandon(c.id);
                }
            }
            Op::Release(pick) => {
                if !self.in_flight.is_empty() {
                    let c = &self.in_flight[pick % self.in_flight.len()];
                    let first = self.released.insert(c.id);
                    prop_assert_eq!(self.s.release_slot(c.id), first);
                }
            }
            Op::Resume(n) => {
                self.s.resume_site(&SiteKey::from_url(&url(n, 0)).unwrap());
            }
        }
        for (_, e) in self.s.registry().entries() {
            prop_assert!(e.next_retry_at.saturating_since(e.recorded_at) <= self.max_wait);
        }
        // An unknown id is ignored.
        prop_assert!(
            self.s
                .handle_outcome(CheckId(u64::MAX), Outcome::Ok, None, self.now)
                .is_none()
        );
        self.drain()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn scheduler_invariants_hold(setup in setup(), ops in prop::collection::vec(op(), 1..200)) {
        let mut h = Harness::new(&setup);
        h.drain()?;
        for op in &ops {
            h.step(op)?;
        }
    }

    #[test]
    fn batch_and_single_polls_agree(setup in setup(), ops in prop::collection::vec(op(), 1..200)) {
        let mut single = Harness::new(&Setup { batch: false, ..setup.clone() });
        let mut batch = Harness::new(&Setup { batch: true, ..setup });
        single.drain()?;
        batch.drain()?;
        for op in &ops {
            single.step(op)?;
            batch.step(op)?;
            prop_assert_eq!(&single.issued, &batch.issued);
            prop_assert_eq!(single.s.poll_timeout(), batch.s.poll_timeout());
        }
    }

    #[test]
    fn delay_for_is_bounded_and_respects_retry_after(
        kind in prop::sample::select(RefusalKind::ALL.to_vec()),
        failures in 0u32..20,
        retry_after_ms in prop::option::of(0u64..10_000_000),
        random in 0.0f64..1.0,
        max_wait_s in 1u64..7200,
    ) {
        let max_wait = Duration::from_secs(max_wait_s);
        let p = BackoffPolicy::new(Ladders::default(), 0.15, max_wait).unwrap();
        let ra = retry_after_ms.map(Duration::from_millis);
        let d = p.delay_for(kind, failures, ra, random);
        prop_assert!(d <= max_wait);
        if let Some(ra) = ra {
            prop_assert!(d >= ra.min(max_wait));
        }
        let rung = p.delay_for(kind, failures, None, random);
        prop_assert!(d >= rung.min(max_wait));
    }
}

/// The registry alone, driven by random records/clears/admits: the probe gate never admits two
/// and never admits before `next_retry_at`.
mod registry_gate {
    use super::*;
    use notifio_policy::Admission;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        #[test]
        fn the_gate_admits_one_probe_and_never_early(
            ops in prop::collection::vec((0usize..3, 0u8..5, 0u64..4_000_000, prop::option::of(0u64..10_000)), 1..300)
        ) {
            let mut reg = Registry::new(BackoffPolicy::default());
            let mut now = Timestamp(1_700_000_000_000);
            let mut probing: HashMap<usize, bool> = HashMap::new();
            let keys: Vec<SiteKey> = (0..3).map(|s| SiteKey::from_url(&url(s, 0)).unwrap()).collect();
            for (site, action, jump, ra) in ops {
                let key = keys[site].clone();
                now = now + Duration::from_millis(jump % 600_000);
                match action {
                    0 | 1 => {
                        let before = reg.entry(&key).cloned();
                        let answer = reg.admit(&key, now);
                        let p = probing.entry(site).or_default();
                        match answer {
                            Admission::Clear => prop_assert!(before.is_none()),
                            Admission::Probe => {
                                prop_assert!(!*p, "second probe admitted");
                                prop_assert!(now >= before.unwrap().next_retry_at);
                                *p = true;
                            }
                            Admission::ProbeInFlight => prop_assert!(*p),
                            Admission::Wait(until) => {
                                prop_assert!(now < until);
                                prop_assert!(!*p);
                            }
                        }
                    }
                    2 => {
                        let kind = RefusalKind::ALL[(jump % 4) as usize];
                        let r = ra.map(Duration::from_secs);
                        let e = reg.record(&key, kind, now, r, (jump % 1000) as f64 / 1000.0).clone();
                        prop_assert!(e.next_retry_at.saturating_since(now) <= notifio_policy::MAX_WAIT);
                        if let Some(r) = r {
                            prop_assert!(e.next_retry_at >= now + r.min(notifio_policy::MAX_WAIT));
                        }
                        probing.insert(site, false);
                    }
                    3 => {
                        reg.clear(&key);
                        probing.insert(site, false);
                    }
                    _ => {
                        reg.abandon_probe(&key);
                        probing.insert(site, false);
                    }
                }
                if let Some(s) = reg.soonest() {
                    prop_assert!(reg.entries().any(|(k, e)| e.next_retry_at == s && !reg.is_probing(k)));
                }
            }
        }
    }
}
