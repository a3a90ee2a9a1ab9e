//! The scheduler driven like the real driver, on a virtual clock: poll_due until `None`, jump
//! `now` to `poll_timeout()`, feed outcomes back. No real time passes.
//!
//! Rules → tests:
//! - the bug a per-search backoff has (five searches on one site each earning their own rung,
//!   docs/policy.md#keyed-by-site-not-by-search) →
//!   `five_searches_on_one_refusing_site_see_one_request_per_rung`
//! - "when a block clears, only one search goes back in" → `exactly_one_probe_when_a_wait_expires`,
//!   `a_failed_probe_climbs_the_ladder_and_keeps_the_siblings_parked`
//! - siblings resume spaced after the probe succeeds → `after_the_probe_succeeds_siblings_go_out_spacing_apart`
//! - docs/architecture.md#scheduling: spacing + one in flight per site → `spacing_and_one_in_flight_per_site`
//! - every result page is a request under the spacing →
//!   `the_next_check_is_spaced_from_a_checks_last_page`
//! - docs/architecture.md#scheduling: global cap → `the_concurrency_cap_holds`
//! - docs/architecture.md#scheduling: single-flight → `identical_urls_are_fetched_once`
//! - docs/architecture.md#classifying-a-response: session_expired → `session_expired_parks_the_site_until_resume_site`
//! - docs/architecture.md#classifying-a-response: search_gone → `search_gone_stops_that_search_only`
//! - docs/architecture.md#scheduling: interval ±10% → `interval_jitter_stays_within_ten_percent`
//! - docs/policy.md#four-ladders: persisted registry → `restored_entries_keep_a_site_waiting_after_restart`
//! - `soonest()`/`poll_timeout()` → `poll_timeout_is_none_with_nothing_to_do`
//! - wake-ups fall on 8 ms ticks, never before a check may start →
//!   `sites_due_within_a_tick_share_one_wake_up`
//! - a hanging site cannot hold the cap → `a_slow_check_gives_its_slot_back_but_keeps_its_site_busy`
//! - an id that names no check in flight (stale, or copying an idle site's ticket) changes
//!   nothing → `an_id_naming_no_check_in_flight_changes_nothing`
//! - a search in flight is neither gone nor due, even added again →
//!   `a_search_in_flight_is_neither_gone_nor_due`
//! - live config (issue 27): a removed search is never checked again, and removing one never
//!   lets its waiting site be asked sooner → `a_removed_search_is_not_checked_and_its_site_keeps_waiting`;
//!   a check out when its search is removed still counts for the site →
//!   `a_check_out_when_its_search_is_removed_still_counts`; a removed page's slot is reused →
//!   `a_page_no_search_watches_gives_its_slot_to_the_next_url`; interval and spacing changes
//!   apply from the next check → `an_interval_change_applies_from_the_next_check`,
//!   `a_spacing_change_applies_to_the_next_start`; a preview's page is brought forward but
//!   not past spacing → `hasten_brings_a_page_forward_but_spacing_still_holds`
//! - one pass (`notifio check`): each page once, and the next check a watcher would make is
//!   its interval away, not "never" → `a_one_pass_scheduler_checks_each_page_once_and_plans_the_next`;
//!   a site that refused in the pass is not asked again when its wait ends →
//!   `a_one_pass_scheduler_asks_a_refusing_site_once_however_long_the_pass`
//! - a request budget counts what other processes sent, and one pass does not wait for room →
//!   `requests_elsewhere_count_and_one_pass_does_not_wait_for_room`

use notifio_policy::schedule::{SearchState, SiteState};
use std::time::Duration;

use crate::common::{Check, MIN, PollCheck, SEC, T0, d, spec, tick};
use notifio_policy::{
    BackoffPolicy, Entry, Outcome, Reaction, RefusalKind, Registry, Scheduler, SchedulerConfig,
    SearchId, SearchSpec, SiteKey, Timestamp,
};

fn sched(concurrency: usize) -> Scheduler {
    let config = SchedulerConfig {
        concurrency,
        ..SchedulerConfig::default()
    };
    Scheduler::new(config, Registry::new(BackoffPolicy::default()), 7)
}

/// A virtual-clock driver. `respond` decides each check's outcome; outcomes are reported at
/// once (the same `now`) unless `hold` is set, in which case checks stay in flight.
struct Sim {
    s: Scheduler,
    now: Timestamp,
    /// Every check issued, with the time it was issued.
    log: Vec<(Timestamp, Check)>,
}

impl Sim {
    fn new(s: Scheduler) -> Self {
        Self {
            s,
            now: T0,
            log: Vec::new(),
        }
    }

    /// Issues everything due now.
    fn poll(&mut self) -> Vec<Check> {
        let mut out = Vec::new();
        while let Some(c) = self.s.poll_check(self.now) {
            self.log.push((self.now, c.clone()));
            out.push(c);
        }
        out
    }

    /// Runs until `until`, answering each check at once with `respond(now, check)`.
    fn run(&mut self, until: Timestamp, mut respond: impl FnMut(Timestamp, &Check) -> Outcome) {
        loop {
            let due = self.poll();
            if !due.is_empty() {
                for c in due {
                    let o = respond(self.now, &c);
                    self.s.handle_outcome(c.id, o, None, self.now);
                }
                continue;
            }
            match self.s.poll_timeout() {
                Some(t) if t <= until => self.now = self.now.max(t),
                _ => break,
            }
        }
        self.now = self.now.max(until);
    }

    fn requests_to(&self, site: &str) -> Vec<(Timestamp, bool)> {
        let key = SiteKey::from_url(site).unwrap();
        self.log
            .iter()
            .filter(|(_, c)| c.site == key)
            .map(|(t, c)| (*t, c.probe))
            .collect()
    }
}

const A: &str = "https://www.idealista.com/";

fn five_on_one_site(s: &mut Scheduler) {
    for i in 0..5 {
        s.add_search(
            spec(
                i,
                &format!(
                    "https://www.idealista.com/alquiler/madrid/hasta_{}/",
                    800 + i * 100
                ),
                30 * SEC,
            ),
            T0,
        );
    }
}

#[test]
fn five_searches_on_one_refusing_site_see_one_request_per_rung() {
    let mut sim = Sim::new(sched(16));
    five_on_one_site(&mut sim.s);
    let site = SiteKey::from_url(A).unwrap();
    // The site refuses with challenges for 40 minutes, then answers.
    let clears_at = T0 + d(40 * MIN);
    let mut refusals = 0;
    sim.run(T0 + d(3 * 60 * MIN), |now, _c| {
        if now < clears_at {
            refusals += 1;
            Outcome::Challenge
        } else {
            Outcome::Ok
        }
    });
    // Reconstruct: each request during the refusal was either the first or a probe, and each
    // climbed one rung.
    let reqs = sim.requests_to(A);
    let during: Vec<_> = reqs.iter().filter(|(t, _)| *t < clears_at).collect();
    assert_eq!(during.len(), refusals);
    assert!(!during[0].1, "the first request is an ordinary check");
    assert!(during[1..].iter().all(|(_, probe)| *probe), "{during:?}");
    // Rungs 1m, 3m, 8m, 15m, then 30m (±15%): the 40 minutes hold exactly five requests (at
    // ~0, 1, 4, 12 and 27 minutes), one per rung, where per-search keys would have sent 5×.
    assert_eq!(during.len(), 5, "{during:?}");
    let rungs: Vec<u64> = during
        .windows(2)
        .map(|w| w[1].0.as_millis() - w[0].0.as_millis())
        .collect();
    let ladder = [MIN, 3 * MIN, 8 * MIN, 15 * MIN, 30 * MIN];
    for (gap, rung) in rungs.iter().zip(ladder) {
        let (lo, hi) = (rung * 85 / 100, rung * 115 / 100 + 1);
        assert!((lo..=hi).contains(gap), "gap {gap} for rung {rung}");
    }
    // After it clears, all five are checked again every ~30s.
    assert!(sim.s.registry().entry(&site).is_none());
    assert!(reqs.len() > during.len() + 5 * 200, "{}", reqs.len());
}

#[test]
fn exactly_one_probe_when_a_wait_expires() {
    let mut s = sched(16);
    five_on_one_site(&mut s);
    let first = s.poll_check(T0).unwrap();
    assert!(!first.probe);
    assert!(s.poll_check(T0).is_none(), "one in flight per site");
    s.handle_outcome(first.id, Outcome::RateLimited, Some(d(5 * MIN)), T0);
    let until = T0 + d(5 * MIN);
    assert_eq!(s.registry().soonest(), Some(until));
    // Nothing before the wait ends, however often we poll.
    let mut t = T0;
    while t < until {
        assert!(s.poll_check(t).is_none(), "request at {t} inside the wait");
        t = s.poll_timeout().unwrap().max(t + d(1));
    }
    assert_eq!(s.poll_timeout(), Some(until));
    let probe = s.poll_check(until).unwrap();
    assert!(probe.probe);
    assert_eq!(
        *probe.searches,
        [SearchId(0)],
        "the most overdue goes first"
    );
    assert_eq!(s.site_state(&probe.site), SiteState::Probing);
    assert_eq!(s.search_state(SearchId(0)).unwrap().0, SearchState::Probing);
    // However long the probe takes, nobody else goes.
    for later in [until, until + d(10 * SEC), until + d(2 * 60 * MIN)] {
        assert!(s.poll_check(later).is_none());
    }
    assert_eq!(s.in_flight(), 1);
}

#[test]
fn a_search_in_flight_is_neither_gone_nor_due() {
    let mut s = sched(16);
    five_on_one_site(&mut s);
    let c = s.poll_check(T0).unwrap();
    let first = c.searches[0];
    // While it is out: not gone, no next check promised, and adding its page again under
    // another search (as a config reload would) starts nothing and resets nothing.
    assert_eq!(s.search_state(first), Some((SearchState::Ok, None)));
    s.add_search(spec(9, &c.url, 30 * SEC), T0);
    assert_eq!(s.search_state(SearchId(9)), Some((SearchState::Ok, None)));
    assert!(
        s.poll_check(T0 + d(5 * SEC)).is_none(),
        "one in flight per site"
    );
    s.handle_outcome(c.id, Outcome::Ok, None, T0 + d(5 * SEC));
    let (state, next) = s.search_state(first).unwrap();
    assert_eq!(state, SearchState::Ok);
    let next = next.unwrap();
    assert!(next >= T0 + d(5 * SEC + 27 * SEC), "{next:?}");
    // The siblings go first; that page only once it is due again, as one check for both.
    let mut t = T0 + d(5 * SEC);
    let mut siblings = 0;
    let again = loop {
        if let Some(check) = s.poll_check(t) {
            if check.url == c.url {
                break check;
            }
            siblings += 1;
            s.handle_outcome(check.id, Outcome::Ok, None, t);
        }
        t = s.poll_timeout().unwrap().max(t + d(1));
    };
    assert!(t >= next, "checked again at {t:?}, due {next:?}");
    assert!(siblings >= 4, "{siblings}");
    assert_eq!(*again.searches, [first, SearchId(9)]);
}

#[test]
fn a_failed_probe_climbs_the_ladder_and_keeps_the_siblings_parked() {
    let mut s = sched(16);
    five_on_one_site(&mut s);
    let c = s.poll_check(T0).unwrap();
    s.handle_outcome(c.id, Outcome::Denied, None, T0);
    let e1 = s.registry().entry(&c.site).unwrap().clone();
    // Not before the wait's end; at the latest on the first tick after it.
    assert!(s.poll_check(e1.next_retry_at - d(1)).is_none());
    let at1 = tick(e1.next_retry_at);
    let probe = s.poll_check(at1).unwrap();
    assert!(probe.probe);
    let r = s.handle_outcome(probe.id, Outcome::Denied, None, at1);
    let Some(Reaction::SiteWaiting {
        entry, searches, ..
    }) = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(entry.failures, 2);
    assert_eq!(searches, 5);
    assert!(s.poll_check(entry.next_retry_at - d(1)).is_none());
    let probe2 = s.poll_check(tick(entry.next_retry_at)).unwrap();
    assert!(probe2.probe);
    assert!(s.poll_check(entry.next_retry_at + d(MIN)).is_none());
}

#[test]
fn after_the_probe_succeeds_siblings_go_out_spacing_apart() {
    let mut sim = Sim::new(sched(16));
    five_on_one_site(&mut sim.s);
    let c = sim.poll().remove(0);
    sim.s.handle_outcome(c.id, Outcome::Error, None, T0);
    let until = sim.s.registry().entry(&c.site).unwrap().next_retry_at;
    sim.run(until + d(25 * SEC), |_, _| Outcome::Ok);
    let reqs = sim.requests_to(A);
    let after: Vec<_> = reqs.iter().filter(|(t, _)| *t >= until).collect();
    assert!(after[0].1, "the probe");
    assert_eq!(
        after[0].0,
        tick(until),
        "at the first tick of the wait's end"
    );
    // The four siblings follow, each at least 2 s (spacing) after the previous request.
    assert!(after.len() >= 5, "{after:?}");
    for w in after.windows(2) {
        assert!(
            w[1].0.as_millis() - w[0].0.as_millis() >= 2 * SEC,
            "{after:?}"
        );
    }
    assert_eq!(
        after[4].0,
        tick(until) + d(8 * SEC),
        "and no slower than that"
    );
    assert!(after[1..].iter().all(|(_, p)| !p));
    assert!(sim.s.registry().entry(&c.site).is_none());
}

#[test]
fn spacing_and_one_in_flight_per_site() {
    let mut s = sched(16);
    five_on_one_site(&mut s);
    let a = s.poll_check(T0).unwrap();
    assert!(s.poll_check(T0).is_none());
    // Even after the spacing has passed, nothing while the first is in flight.
    assert!(s.poll_check(T0 + d(10 * SEC)).is_none());
    s.handle_outcome(a.id, Outcome::Ok, None, T0 + d(10 * SEC));
    let b = s.poll_check(T0 + d(10 * SEC)).unwrap();
    s.handle_outcome(b.id, Outcome::Ok, None, T0 + d(10 * SEC) + d(100));
    // Start to start ≥ spacing, even though b finished quickly.
    assert!(s.poll_check(T0 + d(12 * SEC) - d(1)).is_none());
    assert_eq!(s.poll_timeout(), Some(T0 + d(12 * SEC)));
    assert!(s.poll_check(T0 + d(12 * SEC)).is_some());
}

#[test]
fn per_site_spacing_overrides_apply() {
    let mut config = SchedulerConfig::default();
    config
        .site_spacing
        .insert(SiteKey::from_url(A).unwrap(), d(5 * SEC));
    let mut s = Scheduler::new(config, Registry::default(), 1);
    five_on_one_site(&mut s);
    let a = s.poll_check(T0).unwrap();
    s.handle_outcome(a.id, Outcome::Ok, None, T0);
    assert!(s.poll_check(T0 + d(4999)).is_none());
    assert!(s.poll_check(T0 + d(5 * SEC)).is_some());
    assert_eq!(s.site_spacing(&SiteKey::from_url(A).unwrap()), d(5 * SEC));
    let other = SiteKey::from_url("http://127.0.0.1:1/").unwrap();
    assert_eq!(s.site_spacing(&other), d(2 * SEC), "the default");
}

/// A check that reads more pages sends one request per page: the next check on the site
/// starts a spacing after the *last* of them, not after the check's first.
#[test]
fn the_next_check_is_spaced_from_a_checks_last_page() {
    let mut s = sched(16);
    five_on_one_site(&mut s);
    let a = s.poll_check(T0).unwrap();
    // Pages 2 and 3 of a's search, spaced 2 s apart by the driver.
    s.handle_request_sent(a.id, T0 + d(2 * SEC));
    s.handle_request_sent(a.id, T0 + d(4 * SEC));
    s.handle_outcome(a.id, Outcome::Ok, None, T0 + d(4 * SEC) + d(300));
    assert!(s.poll_check(T0 + d(6 * SEC) - d(1)).is_none());
    assert_eq!(s.poll_timeout(), Some(T0 + d(6 * SEC)));
    let b = s.poll_check(T0 + d(6 * SEC)).unwrap();
    // A stale id (a's, landed) and an earlier time change nothing.
    s.handle_request_sent(a.id, T0 + d(60 * SEC));
    s.handle_request_sent(b.id, T0);
    s.handle_outcome(b.id, Outcome::Ok, None, T0 + d(6 * SEC));
    assert!(s.poll_check(T0 + d(8 * SEC)).is_some());
}

#[test]
fn the_concurrency_cap_holds() {
    let mut s = sched(3);
    for i in 0..10 {
        s.add_search(
            spec(i, &format!("http://127.0.0.1:{}/s", 9000 + i), 30 * SEC),
            T0,
        );
    }
    let first: Vec<_> = std::iter::from_fn(|| s.poll_check(T0)).collect();
    assert_eq!(first.len(), 3);
    assert_eq!(s.in_flight(), 3);
    assert!(s.poll_check(T0 + d(60 * SEC)).is_none());
    s.handle_outcome(first[0].id, Outcome::Ok, None, T0 + d(SEC));
    let next: Vec<_> = std::iter::from_fn(|| s.poll_check(T0 + d(SEC))).collect();
    assert_eq!(next.len(), 1, "one slot freed, one check");
    let sites: std::collections::HashSet<_> =
        first.iter().chain(&next).map(|c| c.site.clone()).collect();
    assert_eq!(sites.len(), 4, "distinct sites");
}

/// A hanging site cannot hold the others up: its slow check gives its slot back, but its site
/// still gets nothing else until that check ends, and ending it counts it out once.
#[test]
fn a_slow_check_gives_its_slot_back_but_keeps_its_site_busy() {
    let mut s = sched(1);
    s.add_search(spec(1, "http://127.0.0.1:9001/a", 30 * SEC), T0);
    s.add_search(spec(2, "http://127.0.0.1:9001/b", 30 * SEC), T0);
    // Site 9002's search is due a second later, so the slow check is site 9001's.
    s.add_search(spec(3, "http://127.0.0.1:9002/c", 30 * SEC), T0 + d(SEC));
    let slow = s.poll_check(T0).unwrap();
    assert!(slow.url.contains(":9001/"));
    assert!(
        s.poll_check(T0 + d(5 * SEC)).is_none(),
        "the cap of one holds"
    );
    assert!(s.release_slot(slow.id));
    assert!(!s.release_slot(slow.id), "released once");
    assert_eq!(s.in_flight(), 0);
    // The other site goes out; the slow one's sibling does not (one in flight per site).
    let other = s.poll_check(T0 + d(5 * SEC)).unwrap();
    assert_ne!(other.site, slow.site);
    assert!(s.poll_check(T0 + d(10 * SEC)).is_none());
    assert_eq!(s.in_flight(), 1);
    // The slow check ends: the cap's count is the other check's alone, and its sibling waits
    // for the cap.
    s.handle_outcome(slow.id, Outcome::Ok, None, T0 + d(10 * SEC));
    assert_eq!(s.in_flight(), 1);
    assert!(
        !s.release_slot(slow.id),
        "an ended check has no slot to give back"
    );
    assert!(s.poll_check(T0 + d(10 * SEC)).is_none());
    s.handle_outcome(other.id, Outcome::Ok, None, T0 + d(10 * SEC));
    assert_eq!(s.in_flight(), 0);
    // A released check that is abandoned (shutdown) is counted out once too.
    let sibling = s.poll_check(T0 + d(10 * SEC)).unwrap();
    assert_eq!(sibling.site, slow.site);
    assert!(s.release_slot(sibling.id));
    s.abandon(sibling.id);
    assert_eq!(s.in_flight(), 0);
    // It goes back in, spacing (2 s) after its start; a released check that ends well leaves
    // its site as any answer would.
    assert!(s.poll_check(T0 + d(11 * SEC)).is_none());
    let again = s.poll_check(T0 + d(12 * SEC)).unwrap();
    assert_eq!(again.searches, sibling.searches);
    assert!(s.release_slot(again.id));
    s.handle_outcome(again.id, Outcome::Ok, None, T0 + d(12 * SEC));
    assert_eq!(s.in_flight(), 0);
    assert_eq!(s.site_state(&slow.site), SiteState::Clear);
    assert!(s.poll_timeout().is_some());
}

#[test]
fn identical_urls_are_fetched_once() {
    let mut s = sched(16);
    let url = "https://www.idealista.com/alquiler/madrid/";
    s.add_search(spec(1, url, 30 * SEC), T0);
    s.add_search(spec(2, url, 45 * SEC), T0);
    let c = s.poll_check(T0).unwrap();
    assert_eq!(*c.searches, [SearchId(1), SearchId(2)]);
    assert!(s.poll_check(T0 + d(10 * SEC)).is_none());
    s.handle_outcome(c.id, Outcome::Ok, None, T0);
    assert!(s.poll_check(T0).is_none());
    // The shorter interval wins: due again within 30s ±10%.
    let next = s.poll_timeout().unwrap();
    assert!(
        next <= T0 + d(33 * SEC) && next >= T0 + d(27 * SEC),
        "{next}"
    );
}

#[test]
fn session_expired_parks_the_site_until_resume_site() {
    let mut sim = Sim::new(sched(16));
    let fb = "https://www.facebook.com/marketplace/berlin/";
    sim.s.add_search(spec(1, fb, 30 * SEC), T0);
    sim.s.add_search(
        spec(2, "https://www.facebook.com/marketplace/munich/", 30 * SEC),
        T0,
    );
    sim.s.add_search(spec(3, A, 30 * SEC), T0);
    let key = SiteKey::from_url(fb).unwrap();
    let mut told = 0;
    let c = sim.poll();
    for c in c {
        let o = if c.site == key {
            Outcome::SessionExpired
        } else {
            Outcome::Ok
        };
        if let Some(Reaction::SessionExpired { .. }) = sim.s.handle_outcome(c.id, o, None, T0) {
            told += 1;
        }
    }
    assert_eq!(told, 1);
    assert_eq!(sim.s.site_state(&key), SiteState::SessionExpired);
    assert_eq!(
        sim.s.search_state(SearchId(2)).unwrap().0,
        SearchState::SessionExpired
    );
    sim.run(T0 + d(3 * 60 * MIN), |_, _| Outcome::Ok);
    let fb_reqs = sim.requests_to(fb);
    assert_eq!(fb_reqs.len(), 1, "parked for hours: {fb_reqs:?}");
    assert!(sim.requests_to(A).len() > 300, "other sites go on");
    sim.s.resume_site(&key);
    let now = sim.now;
    sim.run(now + d(10 * SEC), |_, _| Outcome::Ok);
    assert_eq!(sim.requests_to(fb).len(), 3, "both searches resume, spaced");
}

#[test]
fn search_gone_stops_that_search_only() {
    let mut sim = Sim::new(sched(16));
    let gone = "https://www.idealista.com/old-search/";
    sim.s.add_search(spec(1, gone, 30 * SEC), T0);
    sim.s.add_search(spec(2, A, 30 * SEC), T0);
    let mut reaction = None;
    let c = sim.poll().remove(0);
    assert_eq!(*c.searches, [SearchId(1)]);
    reaction = reaction.or(sim.s.handle_outcome(c.id, Outcome::SearchGone, None, T0));
    assert_eq!(
        reaction,
        Some(Reaction::SearchGone {
            searches: vec![SearchId(1)]
        })
    );
    sim.run(T0 + d(10 * MIN), |_, _| Outcome::Ok);
    let key = SiteKey::from_url(A).unwrap();
    let gone_checks = sim
        .log
        .iter()
        .filter(|(_, c)| c.searches.contains(&SearchId(1)))
        .count();
    assert_eq!(gone_checks, 1);
    assert!(sim.requests_to(A).len() >= 18);
    assert_eq!(sim.s.site_state(&key), SiteState::Clear);
    assert_eq!(
        sim.s.search_state(SearchId(1)),
        Some((SearchState::SearchGone, None))
    );
}

#[test]
fn a_404_on_the_probe_still_reports_search_gone() {
    let mut s = sched(16);
    five_on_one_site(&mut s);
    let c = s.poll_check(T0).unwrap();
    s.handle_outcome(c.id, Outcome::Error, None, T0);
    let at = tick(s.registry().entry(&c.site).unwrap().next_retry_at);
    let p = s.poll_check(at).unwrap();
    assert!(p.probe);
    let r = s.handle_outcome(p.id, Outcome::SearchGone, None, at);
    assert!(matches!(r, Some(Reaction::SearchGone { .. })), "{r:?}");
    // The site answered, so it is clear and the siblings go.
    assert!(s.registry().entry(&c.site).is_none());
    assert!(s.poll_check(at + d(2 * SEC)).is_some());
}

#[test]
fn interval_jitter_stays_within_ten_percent() {
    let mut sim = Sim::new(sched(16));
    sim.s.add_search(spec(1, A, 30 * SEC), T0);
    sim.run(T0 + d(24 * 60 * MIN), |_, _| Outcome::Ok);
    let times: Vec<u64> = sim
        .requests_to(A)
        .iter()
        .map(|(t, _)| t.as_millis())
        .collect();
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() > 2500);
    assert!(gaps.iter().all(|g| (27 * SEC..=33 * SEC).contains(g)));
    let (lo, hi) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
    assert!(
        *lo < 27_500 && *hi > 32_500,
        "jitter spans the range: {lo}..{hi}"
    );
}

#[test]
fn a_one_pass_scheduler_checks_each_page_once_and_plans_the_next() {
    let mut s = sched(16);
    s.check_each_once();
    let mut sim = Sim::new(s);
    sim.s.add_search(spec(1, A, 20 * SEC), T0);
    sim.s
        .add_search(spec(2, "https://www.fotocasa.es/", 10 * SEC), T0);
    sim.run(T0 + d(10 * MIN), |_, _| Outcome::Ok);
    assert_eq!(
        sim.log.len(),
        2,
        "each page once in ten minutes: {:?}",
        sim.log
    );
    assert_eq!(sim.s.poll_timeout(), None, "nothing left to wake for");
    for (id, interval) in [(1, 20 * SEC), (2, 10 * SEC)] {
        let (state, next) = sim.s.search_state(SearchId(id)).unwrap();
        assert_eq!(state, SearchState::Ok);
        let after = next.unwrap().as_millis() - T0.as_millis();
        // What a watcher started now would honour: the interval ±10%, not a "never" sentinel.
        assert!(
            (interval * 9 / 10..=interval * 11 / 10).contains(&after),
            "search {id} next in {after} ms"
        );
    }
    // A refusal in a one-pass run still waits on the site's ladder, from the same due time.
    let mut s = sched(16);
    s.check_each_once();
    let mut sim = Sim::new(s);
    sim.s.add_search(spec(1, A, 20 * SEC), T0);
    sim.run(T0 + d(SEC), |_, _| Outcome::RateLimited);
    let (state, next) = sim.s.search_state(SearchId(1)).unwrap();
    assert_eq!(state, SearchState::Waiting);
    assert!(next.unwrap() >= T0 + d(2 * MIN) - d(20 * SEC), "{next:?}");
}

/// Issue 53, item 7: a one-pass `check` kept running (a slow search elsewhere) asked a site
/// that had refused again once its wait ended, climbing its ladder twice in one pass. One pass
/// asks each page at most once; a refused site's pages, this one and those behind it, are
/// answered by its wait.
#[test]
fn a_one_pass_scheduler_asks_a_refusing_site_once_however_long_the_pass() {
    let mut s = sched(16);
    s.check_each_once();
    let mut sim = Sim::new(s);
    sim.s.add_search(spec(1, A, 20 * SEC), T0);
    sim.s.add_search(
        spec(2, "https://www.idealista.com/alquiler/b/", 20 * SEC),
        T0,
    );
    // Far past the challenge ladder's first rung (1 min) and the next.
    sim.run(T0 + d(30 * MIN), |_, _| Outcome::Challenge);
    assert_eq!(
        sim.requests_to(A).len(),
        1,
        "one request to the refusing site in the pass: {:?}",
        sim.log
    );
    assert_eq!(sim.s.poll_timeout(), None, "nothing left to wake for");
    let entry = sim
        .s
        .registry()
        .entry(&SiteKey::from_url(A).unwrap())
        .unwrap();
    assert_eq!(entry.failures, 1, "one rung climbed: {entry:?}");
    for id in [1, 2] {
        let (state, next) = sim.s.search_state(SearchId(id)).unwrap();
        assert_eq!(state, SearchState::Waiting, "search {id}");
        assert_eq!(next, Some(entry.next_retry_at), "search {id}");
    }
}

/// Issue 53, item 5: requests another process sent to a budgeted site (a `watch` beside a
/// `check`) count against its budget, and a one-pass scheduler does not wait for room: the page
/// it has no room for is answered with when the budget has it.
#[test]
fn requests_elsewhere_count_and_one_pass_does_not_wait_for_room() {
    let mut s = sched(16);
    s.check_each_once();
    let key = SiteKey::from_url(A).unwrap();
    let budget = notifio_policy::RequestBudget {
        requests: 2,
        per: Duration::from_secs(60),
    };
    s.set_budget(&key, Some(budget));
    s.add_search(spec(1, A, 20 * SEC), T0);
    s.add_search(
        spec(2, "https://www.idealista.com/alquiler/b/", 20 * SEC),
        T0,
    );
    s.set_requests_elsewhere(&key, &[T0 - d(10 * SEC)]);
    let mut sim = Sim::new(s);
    sim.run(T0 + d(10 * MIN), |_, _| Outcome::Ok);
    assert_eq!(sim.log.len(), 1, "room for one of the two: {:?}", sim.log);
    let waits: Vec<Timestamp> = (1..=2)
        .filter_map(|i| sim.s.budget_wait(SearchId(i)))
        .collect();
    // The other process's request leaves the window (kept a tenth longer, at most 1 s).
    assert_eq!(waits, vec![T0 - d(10 * SEC) + d(61 * SEC)]);
    assert_eq!(sim.s.poll_timeout(), None, "nothing left to wake for");
}

#[test]
fn restored_entries_keep_a_site_waiting_after_restart() {
    let key = SiteKey::from_url(A).unwrap();
    let until = T0 + d(10 * MIN);
    let entry = Entry {
        kind: RefusalKind::RateLimited,
        failures: 2,
        next_retry_at: until,
        recorded_at: T0 - d(5 * MIN),
        since: T0 - d(7 * MIN),
        retry_after: None,
        lengthened_by_retry_after: false,
    };
    let mut registry = Registry::new(BackoffPolicy::default());
    registry.restore([(key.clone(), entry)]);
    let mut sim = Sim::new(Scheduler::new(SchedulerConfig::default(), registry, 3));
    five_on_one_site(&mut sim.s);
    sim.s
        .add_search(spec(9, "http://127.0.0.1:8080/", 30 * SEC), T0);
    assert_eq!(sim.s.site_state(&key), SiteState::Waiting);
    assert_eq!(
        sim.s.search_state(SearchId(0)),
        Some((SearchState::Waiting, Some(until)))
    );
    // The probe fails: it climbs from the restored count (rung 3 of rate_limited = 15m).
    sim.run(until + d(MIN), |_, c| {
        if c.probe {
            Outcome::RateLimited
        } else {
            Outcome::Ok
        }
    });
    let reqs = sim.requests_to(A);
    assert_eq!(reqs, vec![(until, true)]);
    assert_eq!(sim.s.registry().entry(&key).unwrap().failures, 3);
    assert!(sim.requests_to("http://127.0.0.1:8080/").len() > 20);
}

#[test]
fn poll_timeout_is_none_with_nothing_to_do() {
    let mut s = sched(4);
    assert_eq!(s.poll_timeout(), None);
    assert!(s.poll_check(T0).is_none());
    s.add_search(spec(1, A, 30 * SEC), T0 + d(SEC));
    assert_eq!(s.poll_timeout(), Some(T0 + d(SEC)));
    assert!(s.poll_check(T0).is_none());
    let c = s.poll_check(T0 + d(SEC)).unwrap();
    // In flight and nothing else scheduled: the driver waits for the outcome.
    assert_eq!(s.poll_timeout(), None);
    s.abandon(c.id);
    assert!(s.poll_check(T0 + d(SEC)).is_none(), "spacing still applies");
    assert!(s.poll_check(T0 + d(3 * SEC)).is_some());
}

#[test]
fn sites_due_within_a_tick_share_one_wake_up() {
    let mut s = sched(16);
    // T0 is on a tick. Four sites: three due 1, 5 and 8 ms later, one 9 ms later.
    let sites = [
        "idealista.com",
        "fotocasa.es",
        "pisos.com",
        "habitaclia.com",
    ];
    for (i, (site, ms)) in sites.iter().zip([1, 5, 8, 9]).enumerate() {
        let first = spec(i as u32, &format!("https://www.{site}/"), 30 * SEC);
        let first_due = Some(T0 + d(ms));
        s.add_search(SearchSpec { first_due, ..first }, T0);
    }
    // One wake-up for the first three, on the tick; none of them goes before it.
    assert_eq!(s.poll_timeout(), Some(T0 + d(8)));
    assert!(
        s.poll_check(T0 + d(7)).is_none(),
        "due, but the tick has not come"
    );
    assert_eq!(s.poll_checks(T0 + d(8)).len(), 3);
    // The fourth, due after that tick, waits for the next one.
    assert_eq!(s.poll_timeout(), Some(T0 + d(16)));
    assert!(s.poll_check(T0 + d(15)).is_none());
    assert_eq!(s.poll_checks(T0 + d(16)).len(), 1);
}

#[test]
fn a_check_resolves_to_its_url_searches_and_site_key() {
    let mut s = sched(16);
    let a = "https://www.idealista.com/alquiler/madrid/";
    let b = "https://www.fotocasa.es/es/alquiler/";
    s.add_search(spec(1, a, 30 * SEC), T0);
    s.add_search(spec(2, b, 30 * SEC), T0);
    s.add_search(spec(3, a, 30 * SEC), T0);
    let checks: Vec<_> = std::iter::from_fn(|| s.poll_due(T0)).collect();
    assert_eq!(checks.len(), 2);
    for c in &checks {
        let url = s.check_url(c.id).unwrap().to_string();
        let key = s.site_key(c.site).clone();
        assert_eq!(key, SiteKey::from_url(&url).unwrap());
        assert_eq!(s.site_index(&key), Some(c.site));
        let searches = s.check_searches(c.id).unwrap().to_vec();
        if url == a {
            assert_eq!(searches, [SearchId(1), SearchId(3)]);
        } else {
            assert_eq!((url.as_str(), searches.as_slice()), (b, &[SearchId(2)][..]));
        }
        // Still answerable after the outcome: the target outlives the check.
        s.handle_outcome(c.id, Outcome::Ok, None, T0);
        assert_eq!(s.check_url(c.id).unwrap().as_ref(), url);
    }
    assert_ne!(checks[0].site, checks[1].site);
    assert_eq!(
        s.check_url(notifio_policy::CheckId(u64::from(u32::MAX))),
        None
    );
    assert_eq!(
        s.site_index(&SiteKey::from_url("https://example.org/").unwrap()),
        None
    );
}

#[test]
fn an_id_naming_no_check_in_flight_changes_nothing() {
    let mut s = sched(4);
    s.add_search(spec(1, "https://www.idealista.com/a/", 30 * SEC), T0);
    let c = s.poll_check(T0).unwrap();
    s.handle_outcome(c.id, Outcome::Ok, None, T0);
    assert_eq!(s.in_flight(), 0);
    // The id of the check that just ended, the same id with the slot half all ones (a slot the
    // site does not have), and with the site half all ones (a site no scheduler numbers):
    // none names a check in flight.
    let forged = notifio_policy::CheckId(c.id.0 | (0xFFFF << 32));
    let idle = notifio_policy::CheckId(c.id.0 | 0xFFFF_FFFF);
    for id in [c.id, forged, idle] {
        assert_eq!(s.handle_outcome(id, Outcome::Challenge, None, T0), None);
        s.abandon(id);
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.site_state(&c.site), SiteState::Clear);
    }
    // The search is still due an interval (± 10%) later, and goes out then.
    let t = s.poll_timeout().unwrap();
    assert!(t >= T0 + d(27 * SEC) && t <= T0 + d(33 * SEC), "{t:?}");
    assert!(s.poll_check(t).is_some());
}

#[test]
fn a_removed_search_is_not_checked_and_its_site_keeps_waiting() {
    let mut sim = Sim::new(sched(16));
    let (a, b) = (
        "https://www.idealista.com/a/",
        "https://www.idealista.com/b/",
    );
    sim.s.add_search(spec(1, a, 30 * SEC), T0);
    sim.s.add_search(spec(2, b, 30 * SEC), T0);
    // The site refuses the first check: both searches wait.
    let c = sim.poll();
    assert_eq!(c.len(), 1);
    let reaction = sim
        .s
        .handle_outcome(c[0].id, Outcome::RateLimited, None, T0);
    let Some(Reaction::SiteWaiting { entry, .. }) = reaction else {
        panic!("{reaction:?}")
    };
    let removed = *c[0].searches.first().unwrap();
    sim.log.clear();
    assert!(sim.s.remove_search(removed));
    assert!(!sim.s.remove_search(removed), "removed twice");
    assert_eq!(sim.s.search_state(removed), None);
    // Nothing goes out before the wait ends; the other search is then the probe.
    sim.run(entry.next_retry_at - d(1), |_, c| {
        panic!("asked during the wait: {c:?}")
    });
    sim.run(entry.next_retry_at + d(10 * MIN), |_, _| Outcome::Ok);
    assert!(!sim.log.is_empty());
    for (_, c) in &sim.log {
        assert!(
            !c.searches.contains(&removed),
            "removed search checked: {c:?}"
        );
    }
    assert!(sim.log[0].0 >= entry.next_retry_at);
}

#[test]
fn a_check_out_when_its_search_is_removed_still_counts() {
    let mut s = sched(4);
    let a = "https://www.idealista.com/a/";
    s.add_search(spec(1, a, 30 * SEC), T0);
    s.add_search(spec(2, "https://www.idealista.com/b/", 30 * SEC), T0);
    let c = s.poll_check(T0).unwrap();
    assert_eq!(*c.searches, [SearchId(1)]);
    assert!(s.remove_search(SearchId(1)));
    // The refusal it brings back is the site's all the same.
    let r = s.handle_outcome(c.id, Outcome::Challenge, None, T0);
    assert!(matches!(r, Some(Reaction::SiteWaiting { .. })), "{r:?}");
    assert_eq!(s.site_state(&c.site), SiteState::Waiting);
    // Only search 2 is left to probe, and the page of search 1 never goes out again.
    let until = s.registry().entry(&c.site).unwrap().next_retry_at;
    let probe = s.poll_check(until).unwrap();
    assert!(probe.probe);
    assert_eq!(*probe.searches, [SearchId(2)]);
    s.handle_outcome(probe.id, Outcome::Ok, None, until);
    let mut now = until;
    for _ in 0..20 {
        now = s.poll_timeout().unwrap();
        let c = s.poll_check(now).unwrap();
        assert_eq!(*c.searches, [SearchId(2)]);
        s.handle_outcome(c.id, Outcome::Ok, None, now);
    }
    assert!(now > until + d(5 * MIN));
}

#[test]
fn a_page_no_search_watches_gives_its_slot_to_the_next_url() {
    let mut s = sched(4);
    let (a, b) = (
        "https://www.idealista.com/a/",
        "https://www.idealista.com/b/",
    );
    s.add_search(spec(1, a, 30 * SEC), T0);
    let first = s.poll_check(T0).unwrap();
    s.handle_outcome(first.id, Outcome::Ok, None, T0);
    assert!(s.remove_search(SearchId(1)));
    assert_eq!(s.poll_timeout(), None, "nothing left to check");
    s.add_search(spec(2, b, 30 * SEC), T0 + d(SEC));
    let c = s.poll_check(T0 + d(2 * SEC)).unwrap();
    assert_eq!(&*c.url, b);
    assert_eq!(*c.searches, [SearchId(2)]);
    // The same slot, a new page: the old check's id names nothing now.
    assert_eq!(c.id.0 >> 32 & 0xFFFF, first.id.0 >> 32 & 0xFFFF);
    assert_ne!(c.id, first.id);
    s.handle_outcome(c.id, Outcome::Ok, None, T0 + d(2 * SEC));
    // And the first URL, added again, is a page of its own again.
    s.add_search(spec(3, a, 30 * SEC), T0 + d(3 * SEC));
    let c = s.poll_check(T0 + d(4 * SEC)).unwrap();
    assert_eq!((&*c.url, &*c.searches), (a, &[SearchId(3)][..]));
}

#[test]
fn a_search_removed_and_added_again_is_due_again() {
    let mut s = sched(4);
    let a = "https://www.idealista.com/a/";
    s.add_search(spec(1, a, 30 * SEC), T0);
    s.add_search(spec(2, a, 60 * SEC), T0);
    let c = s.poll_check(T0).unwrap();
    s.handle_outcome(c.id, Outcome::Ok, None, T0);
    // Search 1 (the 30 s one) leaves: the page's cadence is search 2's 60 s from its next check.
    assert!(s.remove_search(SearchId(1)));
    let t = s.poll_timeout().unwrap();
    assert!(
        t <= T0 + d(33 * SEC),
        "the check already planned keeps its time: {t}"
    );
    let c = s.poll_check(t).unwrap();
    assert_eq!(*c.searches, [SearchId(2)]);
    s.handle_outcome(c.id, Outcome::Ok, None, t);
    let next = s.poll_timeout().unwrap();
    assert!(
        next >= t + d(54 * SEC) && next <= t + d(66 * SEC),
        "{next} after {t}"
    );
    // Both leave, then one comes back: due at once (its first_due), alone on the page.
    assert!(s.remove_search(SearchId(2)));
    assert_eq!(s.poll_timeout(), None);
    s.add_search(spec(1, a, 30 * SEC), next);
    let c = s.poll_check(next).unwrap();
    assert_eq!(*c.searches, [SearchId(1)]);
}

#[test]
fn an_interval_change_applies_from_the_next_check() {
    let mut s = sched(4);
    s.add_search(spec(1, "https://www.idealista.com/a/", 30 * SEC), T0);
    let c = s.poll_check(T0).unwrap();
    s.handle_outcome(c.id, Outcome::Ok, None, T0);
    let planned = s.poll_timeout().unwrap();
    assert!(s.set_interval(SearchId(1), Duration::from_secs(120)));
    assert_eq!(
        s.poll_timeout(),
        Some(planned),
        "the planned check keeps its time"
    );
    let c = s.poll_check(planned).unwrap();
    s.handle_outcome(c.id, Outcome::Ok, None, planned);
    let next = s.poll_timeout().unwrap();
    assert!(
        next >= planned + d(108 * SEC) && next <= planned + d(132 * SEC),
        "{next}"
    );
    assert!(!s.set_interval(SearchId(9), Duration::from_secs(1)));
}

#[test]
fn a_spacing_change_applies_to_the_next_start() {
    let mut s = sched(4);
    let key = SiteKey::from_url(A).unwrap();
    s.set_spacing(&key, Duration::from_secs(10));
    s.add_search(spec(1, "https://www.idealista.com/a/", 5 * MIN), T0);
    s.add_search(spec(2, "https://www.idealista.com/b/", 5 * MIN), T0);
    let c = s.poll_check(T0).unwrap();
    s.handle_outcome(c.id, Outcome::Ok, None, T0);
    assert_eq!(
        s.poll_timeout(),
        Some(tick(T0 + d(10 * SEC))),
        "set before the site existed"
    );
    s.set_spacing(&key, Duration::from_secs(30));
    let c = s.poll_check(T0 + d(10 * SEC)).unwrap();
    s.handle_outcome(c.id, Outcome::Ok, None, T0 + d(10 * SEC));
    s.add_search(
        spec(3, "https://www.idealista.com/c/", 5 * MIN),
        T0 + d(10 * SEC),
    );
    assert_eq!(s.poll_timeout(), Some(tick(T0 + d(40 * SEC))));
}

#[test]
fn hasten_brings_a_page_forward_but_spacing_still_holds() {
    let mut s = sched(4);
    s.add_search(spec(1, "https://www.idealista.com/a/", 5 * MIN), T0);
    s.add_search(spec(2, "https://www.idealista.com/b/", 5 * MIN), T0);
    let c = s.poll_check(T0).unwrap();
    assert_eq!(*c.searches, [SearchId(1)]);
    s.handle_outcome(c.id, Outcome::Ok, None, T0);
    let c = s.poll_check(T0 + d(2 * SEC)).unwrap();
    s.handle_outcome(c.id, Outcome::Ok, None, T0 + d(2 * SEC));
    assert!(s.poll_timeout().unwrap() > T0 + d(4 * MIN));
    // Search 1's page, hastened right after search 2's check, waits for the spacing.
    assert!(s.hasten(SearchId(1), T0 + d(2 * SEC)));
    assert_eq!(s.poll_timeout(), Some(tick(T0 + d(4 * SEC))));
    assert!(s.poll_check(T0 + d(3 * SEC)).is_none());
    let c = s.poll_check(T0 + d(4 * SEC)).unwrap();
    assert_eq!(*c.searches, [SearchId(1)]);
    // In flight, there is nothing to bring forward.
    assert!(!s.hasten(SearchId(1), T0 + d(4 * SEC)));
    assert!(!s.hasten(SearchId(7), T0));
}
