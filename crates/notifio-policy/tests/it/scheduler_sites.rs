//! The scheduler's per-site storage, driven on a virtual clock: the cases the other scheduler
//! tests do not reach because their sites hold few URLs with one interval.
//!
//! - a site keeps up to 16 waiting URLs in its own record and the rest on the heap; more than
//!   16 (some added while a check is in flight) still go in (due, index) order, spaced →
//!   `more_searches_on_a_site_than_its_record_holds_still_go_in_order`
//! - URLs with different intervals on one site each keep their own →
//!   `searches_with_different_intervals_on_one_site_keep_their_own`
//! - a check id names one check: once abandoned, its id is not the next check's →
//!   `an_abandoned_checks_id_does_not_end_the_next_check`
//! - a site paused while its check is out stays quiet after the answer, until resumed →
//!   `a_site_paused_while_its_check_is_out_stays_quiet_until_resumed`
//! - a jitter window wider than 2^32 ms (full jitter on a 40-day interval) is still drawn
//!   whole → `a_jitter_window_too_wide_for_the_record_is_still_drawn_whole`

use crate::common::{MIN, PollCheck, SEC, T0, d, spec};
use notifio_policy::schedule::SearchState;
use notifio_policy::{
    BackoffPolicy, Outcome, Registry, Scheduler, SchedulerConfig, SearchId, Timestamp,
};

fn sched() -> Scheduler {
    let config = SchedulerConfig {
        concurrency: 16,
        ..SchedulerConfig::default()
    };
    Scheduler::new(config, Registry::new(BackoffPolicy::default()), 11)
}

fn url(n: u32) -> String {
    format!("https://www.idealista.com/alquiler/zona-{n}/")
}

/// Runs until `until`, answering every check at once with `Ok`; returns (time, search) per
/// check.
fn run(s: &mut Scheduler, from: Timestamp, until: Timestamp) -> Vec<(u64, SearchId)> {
    let mut now = from;
    let mut log = Vec::new();
    loop {
        while let Some(c) = s.poll_check(now) {
            log.push((now.as_millis(), c.searches[0]));
            s.handle_outcome(c.id, Outcome::Ok, None, now);
        }
        match s.poll_timeout() {
            Some(t) if t <= until => now = now.max(t),
            _ => return log,
        }
    }
}

/// More URLs than a site's record holds (16), the last two added while a check is out.
const URLS: u32 = 18;

#[test]
fn more_searches_on_a_site_than_its_record_holds_still_go_in_order() {
    let mut s = sched();
    for n in 0..URLS - 2 {
        s.add_search(spec(n, &url(n), MIN), T0);
    }
    // The first check goes out; two more searches arrive while it is in flight (the site's
    // waiting pages move from its record to the heap), both due at once.
    let first = s.poll_check(T0).unwrap();
    assert_eq!(*first.searches, [SearchId(0)]);
    for n in URLS - 2..URLS {
        s.add_search(spec(n, &url(n), MIN), T0);
    }
    assert!(
        s.poll_check(T0 + d(5 * SEC)).is_none(),
        "one in flight per site"
    );
    s.handle_outcome(first.id, Outcome::Ok, None, T0);
    assert_eq!(
        s.search_state(SearchId(URLS - 1)),
        Some((SearchState::Ok, Some(T0 + d(2 * SEC))))
    );
    let log = run(&mut s, T0, T0 + d(10 * MIN));
    // The other seventeen, in index order (all were due at T0), one every 2 s (spacing).
    let start: Vec<_> = log[..URLS as usize - 1].to_vec();
    let want: Vec<_> = (1..URLS)
        .map(|n| (T0.as_millis() + u64::from(n) * 2 * SEC, SearchId(n)))
        .collect();
    assert_eq!(start, want);
    // Then each search about once a minute (±10%, plus up to 34 s of spacing behind its
    // seventeen siblings), and never two starts on the site within 2 s.
    let behind = u64::from(URLS - 1) * 2 * SEC;
    for n in 0..URLS {
        let times: Vec<u64> = std::iter::once(T0.as_millis())
            .filter(|_| n == 0)
            .chain(
                log.iter()
                    .filter(|(_, id)| *id == SearchId(n))
                    .map(|(t, _)| *t),
            )
            .collect();
        assert!((9..=11).contains(&times.len()), "search {n}: {times:?}");
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            assert!((54 * SEC..=66 * SEC + behind).contains(&gap), "{n}: {gap}");
        }
    }
    for w in log.windows(2) {
        assert!(w[1].0 - w[0].0 >= 2 * SEC, "{w:?}");
    }
}

#[test]
fn searches_with_different_intervals_on_one_site_keep_their_own() {
    let mut s = sched();
    s.add_search(spec(1, &url(1), 10 * SEC), T0);
    s.add_search(spec(2, &url(2), 40 * SEC), T0);
    let log = run(&mut s, T0, T0 + d(20 * MIN));
    let count = |id| log.iter().filter(|(_, s)| *s == SearchId(id)).count();
    // 20 minutes: ~120 checks of the 10 s search, ~30 of the 40 s one (±10% jitter; the
    // spacing delays the 10 s search by at most 2 s when they collide).
    assert!((105..=134).contains(&count(1)), "{}", count(1));
    assert!((27..=34).contains(&count(2)), "{}", count(2));
    let gaps = |id| {
        let t: Vec<u64> = log
            .iter()
            .filter(|(_, s)| *s == SearchId(id))
            .map(|(t, _)| *t)
            .collect();
        t.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>()
    };
    assert!(gaps(1).iter().all(|g| (9 * SEC..=13 * SEC).contains(g)));
    assert!(gaps(2).iter().all(|g| (36 * SEC..=46 * SEC).contains(g)));
    // A third search joins the 40 s one's URL with a shorter interval: the shorter wins.
    let now = T0 + d(20 * MIN);
    s.add_search(spec(3, &url(2), 20 * SEC), now);
    let later = run(&mut s, now, now + d(10 * MIN));
    let n = later.iter().filter(|(_, s)| *s == SearchId(2)).count();
    assert!((26..=34).contains(&n), "{n}");
}

#[test]
fn a_jitter_window_too_wide_for_the_record_is_still_drawn_whole() {
    let config = SchedulerConfig {
        interval_jitter: 1.0,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, Registry::new(BackoffPolicy::default()), 5);
    // 40 days × ±100%: a window of 80 days, 6.9e9 ms, more than a u32 holds.
    let interval = 40 * 24 * 60 * MIN;
    s.add_search(spec(1, &url(1), interval), T0);
    let log = run(&mut s, T0, T0 + d(200 * interval));
    let gaps: Vec<u64> = log.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(gaps.len() > 150, "{}", gaps.len());
    assert!(gaps.iter().all(|&g| g <= 2 * interval + 8), "{gaps:?}");
    let (lo, hi) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
    assert!(
        *lo < interval / 10 && *hi > interval * 19 / 10,
        "the whole window is drawn: {lo}..{hi}"
    );
}

#[test]
fn an_abandoned_checks_id_does_not_end_the_next_check() {
    let mut s = sched();
    s.add_search(spec(1, &url(1), 30 * SEC), T0);
    let a = s.poll_check(T0).unwrap();
    s.abandon(a.id);
    let b = s.poll_check(T0 + d(2 * SEC)).unwrap();
    assert_eq!(a.searches, b.searches, "the same search goes out again");
    assert_ne!(a.id, b.id);
    assert_eq!(
        s.handle_outcome(a.id, Outcome::Ok, None, T0 + d(2 * SEC)),
        None
    );
    s.abandon(a.id);
    assert_eq!(s.in_flight(), 1, "the old id ended nothing");
    s.handle_outcome(b.id, Outcome::Ok, None, T0 + d(2 * SEC));
    assert_eq!(s.in_flight(), 0);
    // The URL is still known under either id.
    assert_eq!(s.check_url(a.id), s.check_url(b.id));
}

#[test]
fn a_site_paused_while_its_check_is_out_stays_quiet_until_resumed() {
    let mut s = sched();
    s.add_search(spec(1, &url(1), 30 * SEC), T0);
    s.add_search(spec(2, &url(2), 30 * SEC), T0);
    let c = s.poll_check(T0).unwrap();
    assert_eq!(*c.searches, [SearchId(1)]);
    s.pause_site(&c.site);
    s.handle_outcome(c.id, Outcome::Ok, None, T0 + d(SEC));
    let quiet = run(&mut s, T0 + d(SEC), T0 + d(10 * MIN));
    assert!(quiet.is_empty(), "{quiet:?}");
    assert_eq!(
        s.search_state(SearchId(2)),
        Some((SearchState::SessionExpired, None))
    );
    let now = T0 + d(10 * MIN);
    s.resume_site(&c.site);
    let log = run(&mut s, now, now + d(3 * SEC));
    // The most overdue first, at once; the other one spacing later.
    let t = now.as_millis();
    assert_eq!(log, [(t, SearchId(2)), (t + 2 * SEC, SearchId(1))]);
}
