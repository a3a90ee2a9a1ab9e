//! Every rule of the two designs, run rather than reasoned about: the per-site backoff registry
//! and the configuration and retry conditions of request-level retry (both restated in
//! docs/policy.md), plus docs/policy.md's and docs/architecture.md's readings of them. Each
//! sentence maps to a test that fails if the rule is broken.
//!
//! The backoff registry (docs/policy.md#four-ladders, with
//! docs/policy.md#keyed-by-site-not-by-search, docs/policy.md#the-formula and
//! docs/policy.md#the-single-probe):
//! - "Keyed by host, not by search URL. A refusal comes from the site, so it applies to every
//!   search on it." → `a_refusal_applies_to_every_search_on_the_site`,
//!   `site_keys_follow_the_registrable_domain` (and
//!   `scheduler::five_searches_on_one_refusing_site_see_one_request_per_rung`)
//! - "one entry, one counter, one nextRetryAt, one shared decision for every search on that
//!   domain" → `a_refusal_applies_to_every_search_on_the_site`
//! - the four `LADDERS` → `ladders_step_by_step_with_mid_range_jitter` (prints them first)
//! - "The last entry in each is the ceiling" → `the_last_rung_is_the_ceiling`
//! - "a change of kind resets the count rather than inheriting it" / `failures = previous.kind
//!   === kind ? failures + 1 : 1` → `same_kind_climbs_a_rung`, `kind_change_resets_the_count`
//! - "a host that refused us three times and then had a dropped connection would be handed the
//!   fourth rung of the error ladder" → `a_network_blip_after_three_refusals_gets_error_rung_one`
//! - `step = ladder[min(max(failures, 1) - 1, len - 1)]` →
//!   `zero_failures_counts_as_the_first_rung`,
//!   `the_last_rung_is_the_ceiling`
//! - `Math.round(step * (0.85 + random() * 0.3))` → `jitter_bounds_are_0_85_and_1_15`,
//!   `jitter_rounds_half_up_like_math_round`
//! - "Jitter matters because several searches usually share a cycle … come back in the same
//!   instant" → `jitter_spreads_sites_blocked_in_the_same_cycle`
//! - "the site's own Retry-After wins whenever it asks for longer than our ladder would, and
//!   never when it asks for less" → `retry_after_longer_wins`, `retry_after_shorter_loses`
//! - "Never wait longer than this, whatever a site's Retry-After claims" / `MAX_WAIT_MS = 1h` /
//!   "a Retry-After of eighty six thousand seconds" → `retry_after_is_capped_at_max_wait`,
//!   `max_wait_is_one_hour`
//! - "soonest(): When the next waiting host comes due, or null if none are waiting" →
//!   `soonest_is_the_earliest_waiting_site`, `soonest_is_none_when_nothing_waits`,
//!   `a_probing_site_is_not_waiting`
//! - "record takes now as a parameter" → `record_sets_next_retry_at_from_the_given_now`
//! - "delayFor takes its randomness as a parameter" / "Mid-range jitter, so a step comes back as
//!   exactly itself" → `ladders_step_by_step_with_mid_range_jitter`, `delay_is_a_pure_function`
//! - "a host coming out of a wait can be given a single probe search instead of all five at
//!   once" → `the_probe_gate_admits_one_and_only_one`, `clear_then_refuse_starts_at_rung_one`
//! - "testable files … may not import electron" (purity) → `the_policy_crate_stays_pure`
//! - docs/policy.md#four-ladders: overrides → `backoff_policy_rejects_bad_overrides`,
//!   `overridden_ladders_are_used`
//!
//! Request-level retry — configuration
//! (docs/policy.md#request-level-retry-and-why-the-probe-never-retries):
//! - "maxAttempts: 3 // Total 3 attempts (1 initial + 2 retries)" →
//!   `three_attempts_mean_exactly_two_sleeps`
//! - "initialDelayMs: 100" and "backoffMultiplier: 3 (100ms → 300ms → 900ms)" →
//!   `retry_delays_are_100_then_300_ms`, `the_multiplier_would_give_900_ms_on_a_fourth_attempt`
//! - "jitter: true // ±25% randomization" → `retry_jitter_is_25_percent`
//! - docs/policy.md#request-level-retry-and-why-the-probe-never-retries: probe class =
//!   1 attempt → `probe_never_retries`
//! - docs/policy.md#request-level-retry-and-why-the-probe-never-retries: overall deadline
//!   → `the_deadline_cuts_retries_short`, `attempt_timeout_respects_the_deadline`
//! - docs/policy.md#request-level-retry-and-why-the-probe-never-retries: overrides →
//!   `retry_policy_rejects_bad_overrides`
//!
//! Request-level retry — retry conditions
//! (docs/policy.md#request-level-retry-and-why-the-probe-never-retries):
//! - "HTTP 5xx server errors (500-599)" → `every_5xx_is_retried`
//! - "Timeout errors (AbortError from fetch timeout)" (+ connection failures, docs/policy.md) →
//!   `timeouts_and_connect_failures_are_retried`
//! - "HTTP 4xx client errors (400-499)" → `no_4xx_is_retried`
//! - "Successful responses (2xx, 3xx)" → `no_2xx_or_3xx_is_retried`
//! - "Validation errors (our own schema validation failures)" →
//!   `validation_failures_are_not_retried`
//!
//! docs/architecture.md#classifying-a-response's table → the `classify_*` tests, one per row.

use notifio_policy::retry::GiveUp;
use notifio_policy::{
    Admission, AttemptResult, BackoffConfigError, BackoffPolicy, Ladders, MAX_WAIT, Markers,
    Outcome, RefusalKind, Registry, RequestClass, ResponseFacts, RetryConfigError, RetryDecision,
    RetryPolicies, RetryPolicy, SiteKey, SiteKeyError, Timestamp, TransportFailure, classify,
    parse_retry_after,
};
use std::time::Duration;

/// Mid-range jitter, so a step comes back as exactly itself.
const NO_JITTER: f64 = 0.5;
/// Just below 1: the top of the jitter range.
const TOP: f64 = 1.0 - f64::EPSILON;
const NOW: Timestamp = Timestamp(1_700_000_000_000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
fn mins(n: u64) -> Duration {
    Duration::from_secs(n * 60)
}
fn site(s: &str) -> SiteKey {
    SiteKey::from_url(s).unwrap()
}

// ------------------------------------------------ the ladders (docs/policy.md#four-ladders)

#[test]
fn ladders_step_by_step_with_mid_range_jitter() {
    let p = BackoffPolicy::default();
    // Print the ladders before asserting anything (docs/policy.md: they come first).
    for kind in RefusalKind::ALL {
        println!("{:>12}: {}", kind.as_str(), p.describe_ladder(kind));
    }
    let expect: [(RefusalKind, &[u64]); 4] = [
        (
            RefusalKind::Challenge,
            &[60_000, 180_000, 480_000, 900_000, 1_800_000],
        ),
        (
            RefusalKind::RateLimited,
            &[120_000, 300_000, 900_000, 1_800_000],
        ),
        (
            RefusalKind::Denied,
            &[300_000, 900_000, 1_800_000, 3_600_000],
        ),
        (RefusalKind::Error, &[30_000, 120_000, 300_000]),
    ];
    for (kind, steps) in expect {
        for (i, &step) in steps.iter().enumerate() {
            let failures = u32::try_from(i + 1).unwrap();
            assert_eq!(
                p.delay_for(kind, failures, None, NO_JITTER),
                ms(step),
                "{kind} rung {failures}"
            );
        }
    }
    assert_eq!(
        p.describe_ladder(RefusalKind::Challenge),
        "1m → 3m → 8m → 15m → 30m"
    );
    assert_eq!(
        p.describe_ladder(RefusalKind::RateLimited),
        "2m → 5m → 15m → 30m"
    );
    assert_eq!(
        p.describe_ladder(RefusalKind::Denied),
        "5m → 15m → 30m → 1h"
    );
    assert_eq!(p.describe_ladder(RefusalKind::Error), "30s → 2m → 5m");
}

#[test]
fn the_last_rung_is_the_ceiling() {
    let p = BackoffPolicy::default();
    for kind in RefusalKind::ALL {
        let last = *p.ladders().get(kind).last().unwrap();
        for failures in [p.rungs(kind) as u32, p.rungs(kind) as u32 + 1, 50, u32::MAX] {
            assert_eq!(p.delay_for(kind, failures, None, NO_JITTER), last);
        }
    }
}

#[test]
fn zero_failures_counts_as_the_first_rung() {
    let p = BackoffPolicy::default();
    assert_eq!(
        p.delay_for(RefusalKind::Challenge, 0, None, NO_JITTER),
        mins(1)
    );
}

#[test]
fn jitter_bounds_are_0_85_and_1_15() {
    let p = BackoffPolicy::default();
    // 0.85× and 1.15× of the first challenge rung (60s).
    assert_eq!(p.delay_for(RefusalKind::Challenge, 1, None, 0.0), secs(51));
    assert_eq!(p.delay_for(RefusalKind::Challenge, 1, None, TOP), secs(69));
    for kind in RefusalKind::ALL {
        for failures in 1..=6 {
            let step = p.delay_for(kind, failures, None, NO_JITTER).as_secs_f64();
            for i in 0..=100 {
                let r = f64::from(i) / 100.0 * TOP;
                let d = p.delay_for(kind, failures, None, r).as_secs_f64();
                assert!(
                    d >= step * 0.85 - 0.001 && d <= step * 1.15 + 0.001,
                    "{kind} {failures} {r}: {d}"
                );
            }
        }
    }
}

#[test]
fn jitter_rounds_half_up_like_math_round() {
    // A 1ms rung at ×0.85 is 0.85ms → 1 (Math.round); 3ms at 0.5 exactly is 3.
    let ladders = Ladders::default().with(RefusalKind::Error, vec![ms(1), ms(3), ms(10)]);
    let p = BackoffPolicy::new(ladders, 0.15, MAX_WAIT).unwrap();
    assert_eq!(p.delay_for(RefusalKind::Error, 1, None, 0.0), ms(1));
    // 10ms × 0.85 = 8.5 → 9 (half up, as Math.round does for positives).
    assert_eq!(p.delay_for(RefusalKind::Error, 3, None, 0.0), ms(9));
}

#[test]
fn delay_is_a_pure_function() {
    let p = BackoffPolicy::default();
    for r in [0.0, 0.1, 0.5, 0.77, TOP] {
        assert_eq!(
            p.delay_for(RefusalKind::Denied, 2, Some(secs(10)), r),
            p.delay_for(RefusalKind::Denied, 2, Some(secs(10)), r)
        );
    }
}

#[test]
fn jitter_spreads_sites_blocked_in_the_same_cycle() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let a = site("https://a.example/");
    let b = site("https://b.example/");
    let ea = reg
        .record(&a, RefusalKind::Challenge, NOW, None, 0.1)
        .clone();
    let eb = reg
        .record(&b, RefusalKind::Challenge, NOW, None, 0.9)
        .clone();
    assert_ne!(ea.next_retry_at, eb.next_retry_at);
    assert!(eb.next_retry_at.as_millis() - ea.next_retry_at.as_millis() > 10_000);
}

// ---------------------------------------------------------------- Retry-After asymmetry

#[test]
fn retry_after_longer_wins() {
    let p = BackoffPolicy::default();
    assert_eq!(
        p.delay_for(RefusalKind::RateLimited, 1, Some(mins(10)), NO_JITTER),
        mins(10)
    );
    // Even against the top of the jitter range.
    assert_eq!(
        p.delay_for(RefusalKind::RateLimited, 1, Some(mins(10)), TOP),
        mins(10)
    );
}

#[test]
fn retry_after_shorter_loses() {
    let p = BackoffPolicy::default();
    assert_eq!(
        p.delay_for(RefusalKind::RateLimited, 1, Some(secs(5)), NO_JITTER),
        mins(2)
    );
    assert_eq!(
        p.delay_for(RefusalKind::RateLimited, 3, Some(Duration::ZERO), NO_JITTER),
        mins(15)
    );
}

#[test]
fn retry_after_is_capped_at_max_wait() {
    let p = BackoffPolicy::default();
    // "a Retry-After of eighty six thousand seconds" → one hour.
    assert_eq!(
        p.delay_for(RefusalKind::RateLimited, 1, Some(secs(86_000)), NO_JITTER),
        MAX_WAIT
    );
    // Even a saturated header.
    let huge = parse_retry_after("99999999999999999999999", NOW);
    assert_eq!(
        p.delay_for(RefusalKind::Error, 1, huge, NO_JITTER),
        MAX_WAIT
    );
    // And the denied ceiling with top jitter (1h × 1.15) is capped too.
    assert_eq!(p.delay_for(RefusalKind::Denied, 4, None, TOP), MAX_WAIT);
}

#[test]
fn max_wait_is_one_hour() {
    assert_eq!(MAX_WAIT, secs(3600));
    assert_eq!(BackoffPolicy::default().max_wait(), MAX_WAIT);
    assert!((BackoffPolicy::default().jitter() - 0.15).abs() < 1e-12);
}

// ---------------------------------------------------------------- the registry

#[test]
fn a_refusal_applies_to_every_search_on_the_site() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let one = site("https://www.idealista.com/alquiler-viviendas/madrid/");
    let five = site("https://m.idealista.com/alquiler-viviendas/madrid/con-precio-hasta_900/");
    assert_eq!(one, five, "one key for every search on the domain");
    reg.record(&one, RefusalKind::Challenge, NOW, None, NO_JITTER);
    assert_eq!(reg.peek(&five, NOW), Admission::Wait(NOW + mins(1)));
    // One counter: a refusal seen by another search climbs the same ladder.
    let e = reg.record(
        &five,
        RefusalKind::Challenge,
        NOW + mins(1),
        None,
        NO_JITTER,
    );
    assert_eq!(e.failures, 2);
    assert_eq!(reg.entries().count(), 1);
}

#[test]
fn record_sets_next_retry_at_from_the_given_now() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let s = site("https://example.com/");
    let e = reg.record(&s, RefusalKind::Denied, NOW, None, NO_JITTER);
    assert_eq!(e.next_retry_at, NOW + mins(5));
    assert_eq!(e.recorded_at, NOW);
    assert_eq!(e.since, NOW);
    let later = Timestamp(42);
    let e = reg.record(&s, RefusalKind::Denied, later, None, NO_JITTER);
    assert_eq!(e.next_retry_at, later + mins(15));
    assert_eq!(e.since, NOW, "the episode began at the first refusal");
}

#[test]
fn same_kind_climbs_a_rung() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let s = site("https://example.com/");
    let mut t = NOW;
    for (i, want) in [1u64, 3, 8, 15, 30, 30].into_iter().enumerate() {
        let e = reg.record(&s, RefusalKind::Challenge, t, None, NO_JITTER);
        assert_eq!(e.failures, i as u32 + 1);
        assert_eq!(e.next_retry_at, t + mins(want));
        t = e.next_retry_at;
    }
}

#[test]
fn kind_change_resets_the_count() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let s = site("https://example.com/");
    reg.record(&s, RefusalKind::Challenge, NOW, None, NO_JITTER);
    reg.record(&s, RefusalKind::Challenge, NOW, None, NO_JITTER);
    let e = reg.record(&s, RefusalKind::RateLimited, NOW, None, NO_JITTER);
    assert_eq!((e.kind, e.failures), (RefusalKind::RateLimited, 1));
    assert_eq!(e.next_retry_at, NOW + mins(2));
    // And back again: challenge starts over too.
    let e = reg.record(&s, RefusalKind::Challenge, NOW, None, NO_JITTER);
    assert_eq!(e.failures, 1);
}

#[test]
fn a_network_blip_after_three_refusals_gets_error_rung_one() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let s = site("https://example.com/");
    for _ in 0..3 {
        reg.record(&s, RefusalKind::Denied, NOW, None, NO_JITTER);
    }
    let e = reg.record(&s, RefusalKind::Error, NOW, None, NO_JITTER);
    assert_eq!(e.failures, 1);
    assert_eq!(e.next_retry_at, NOW + secs(30), "not the fourth rung (5m)");
}

#[test]
fn soonest_is_the_earliest_waiting_site() {
    let mut reg = Registry::new(BackoffPolicy::default());
    reg.record(
        &site("https://a.example/"),
        RefusalKind::Denied,
        NOW,
        None,
        NO_JITTER,
    );
    reg.record(
        &site("https://b.example/"),
        RefusalKind::Error,
        NOW + secs(10),
        None,
        NO_JITTER,
    );
    reg.record(
        &site("https://c.example/"),
        RefusalKind::Challenge,
        NOW,
        None,
        NO_JITTER,
    );
    assert_eq!(reg.soonest(), Some(NOW + secs(40)));
    reg.clear(&site("https://b.example/"));
    assert_eq!(reg.soonest(), Some(NOW + mins(1)));
}

#[test]
fn soonest_is_none_when_nothing_waits() {
    let mut reg = Registry::new(BackoffPolicy::default());
    assert_eq!(reg.soonest(), None);
    let s = site("https://a.example/");
    reg.record(&s, RefusalKind::Error, NOW, None, NO_JITTER);
    reg.clear(&s);
    assert_eq!(reg.soonest(), None);
}

#[test]
fn a_probing_site_is_not_waiting() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let a = site("https://a.example/");
    let b = site("https://b.example/");
    reg.record(&a, RefusalKind::Error, NOW, None, NO_JITTER);
    reg.record(&b, RefusalKind::Denied, NOW, None, NO_JITTER);
    assert_eq!(reg.admit(&a, NOW + secs(30)), Admission::Probe);
    assert!(reg.is_probing(&a));
    assert_eq!(reg.soonest(), Some(NOW + mins(5)), "a is being tried");
    assert_eq!(reg.admit(&b, NOW + mins(5)), Admission::Probe);
    assert_eq!(reg.soonest(), None);
}

#[test]
fn the_probe_gate_admits_one_and_only_one() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let s = site("https://example.com/");
    assert_eq!(reg.admit(&s, NOW), Admission::Clear);
    reg.record(&s, RefusalKind::Challenge, NOW, None, NO_JITTER);
    let due = NOW + mins(1);
    assert_eq!(reg.admit(&s, due - ms(1)), Admission::Wait(due));
    assert_eq!(reg.admit(&s, due), Admission::Probe);
    for later in [due, due + secs(1), due + mins(10)] {
        assert_eq!(reg.admit(&s, later), Admission::ProbeInFlight);
    }
    // Abandoned (shutdown): the next caller becomes the probe, only one again.
    reg.abandon_probe(&s);
    assert_eq!(reg.admit(&s, due), Admission::Probe);
    assert_eq!(reg.admit(&s, due), Admission::ProbeInFlight);
    // The probe fails: next rung, and the gate closes until its wait passes.
    let e = reg.record(&s, RefusalKind::Challenge, due, None, NO_JITTER);
    assert_eq!(e.failures, 2);
    assert_eq!(reg.admit(&s, due + mins(2)), Admission::Wait(due + mins(3)));
    assert_eq!(reg.admit(&s, due + mins(3)), Admission::Probe);
    // It succeeds: the site is clear, everyone may go.
    assert!(reg.clear(&s).is_some());
    assert_eq!(reg.admit(&s, due + mins(3)), Admission::Clear);
    assert_eq!(reg.admit(&s, due + mins(3)), Admission::Clear);
}

#[test]
fn clear_then_refuse_starts_at_rung_one() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let s = site("https://example.com/");
    for _ in 0..3 {
        reg.record(&s, RefusalKind::RateLimited, NOW, None, NO_JITTER);
    }
    reg.clear(&s);
    let e = reg.record(&s, RefusalKind::RateLimited, NOW, None, NO_JITTER);
    assert_eq!(e.failures, 1);
    assert_eq!(e.next_retry_at, NOW + mins(2));
}

#[test]
fn restored_entries_keep_their_wait() {
    let mut reg = Registry::new(BackoffPolicy::default());
    let s = site("https://example.com/");
    reg.record(&s, RefusalKind::Denied, NOW, Some(mins(20)), NO_JITTER);
    let saved: Vec<_> = reg
        .entries()
        .map(|(k, e)| (k.clone(), serde_json::to_string(e).unwrap()))
        .collect();
    let mut fresh = Registry::new(BackoffPolicy::default());
    fresh.restore(
        saved
            .into_iter()
            .map(|(k, e)| (k, serde_json::from_str(&e).unwrap())),
    );
    assert_eq!(
        fresh.admit(&s, NOW + mins(19)),
        Admission::Wait(NOW + mins(20))
    );
    let e = fresh.entry(&s).unwrap();
    assert!(e.lengthened_by_retry_after);
    assert_eq!(e.retry_after, Some(mins(20)));
}

// ---------------------------------------------------------------- overrides

#[test]
fn overridden_ladders_are_used() {
    let ladders = Ladders::default().with(RefusalKind::RateLimited, vec![secs(1), secs(2)]);
    let p = BackoffPolicy::new(ladders, 0.0, mins(30)).unwrap();
    assert_eq!(p.delay_for(RefusalKind::RateLimited, 1, None, 0.0), secs(1));
    assert_eq!(p.delay_for(RefusalKind::RateLimited, 9, None, TOP), secs(2));
    assert_eq!(
        p.delay_for(RefusalKind::Denied, 4, None, NO_JITTER),
        mins(30)
    );
    assert_eq!(p.describe_ladder(RefusalKind::RateLimited), "1s → 2s");
}

#[test]
fn backoff_policy_rejects_bad_overrides() {
    let d = Ladders::default;
    let e = BackoffPolicy::new(d().with(RefusalKind::Denied, vec![]), 0.15, MAX_WAIT);
    assert_eq!(
        e.unwrap_err(),
        BackoffConfigError::EmptyLadder {
            kind: RefusalKind::Denied
        }
    );
    let e = BackoffPolicy::new(
        d().with(RefusalKind::Error, vec![secs(1), Duration::ZERO]),
        0.15,
        MAX_WAIT,
    );
    assert_eq!(
        e.unwrap_err(),
        BackoffConfigError::ZeroRung {
            kind: RefusalKind::Error,
            rung: 2
        }
    );
    let e = BackoffPolicy::new(
        d().with(RefusalKind::Challenge, vec![mins(3), mins(1)]),
        0.15,
        MAX_WAIT,
    )
    .unwrap_err();
    assert!(matches!(
        e,
        BackoffConfigError::NotIncreasing { rung: 2, .. }
    ));
    assert!(
        e.to_string()
            .contains("rung 2 (1m) is shorter than rung 1 (3m)"),
        "{e}"
    );
    for j in [-0.1, 1.0, 1.5, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            BackoffPolicy::new(d(), j, MAX_WAIT),
            Err(BackoffConfigError::BadJitter(_))
        ));
    }
    assert_eq!(
        BackoffPolicy::new(d(), 0.15, Duration::ZERO),
        Err(BackoffConfigError::ZeroMaxWait)
    );
    assert_eq!(
        BackoffPolicy::new(d(), 0.15, MAX_WAIT),
        Ok(BackoffPolicy::default())
    );
}

// ---------------------------------------------------------------- site keys

#[test]
fn site_keys_follow_the_registrable_domain() {
    let k = |u: &str| SiteKey::from_url(u).unwrap().as_str().to_owned();
    assert_eq!(k("https://www.idealista.com/a"), "idealista.com");
    assert_eq!(k("https://m.idealista.com/b?x=1"), "idealista.com");
    assert_eq!(k("HTTPS://WWW.IDEALISTA.COM./c"), "idealista.com");
    assert_eq!(
        k("https://www.immobilienscout24.de/Suche"),
        "immobilienscout24.de"
    );
    assert_eq!(k("https://www.facebook.com/marketplace/"), "facebook.com");
    assert_eq!(k("https://www.rightmove.co.uk/x"), "rightmove.co.uk");
    assert_eq!(k("https://alice.github.io/"), "alice.github.io");
    assert_ne!(k("https://alice.github.io/"), k("https://bob.github.io/"));
    assert_eq!(k("https://www.bücher.de/"), "xn--bcher-kva.de");
    assert_eq!(k("https://example.com:8443/"), "example.com", "no port");
    assert_eq!(k("http://127.0.0.1:8080/"), "127.0.0.1:8080");
    assert_ne!(k("http://127.0.0.1:8080/"), k("http://127.0.0.1:8081/"));
    assert_eq!(k("http://localhost:3000/"), "localhost:3000");
    assert_eq!(k("http://[::1]:9000/"), "[::1]:9000");
    assert_eq!(
        SiteKey::from_stored("idealista.com").as_str(),
        "idealista.com"
    );
}

#[test]
fn site_key_errors_say_what_is_wrong() {
    assert!(matches!(
        SiteKey::from_url("ftp://example.com/"),
        Err(SiteKeyError::NotHttp { .. })
    ));
    assert!(matches!(
        SiteKey::from_url("example.com/flats"),
        Err(SiteKeyError::NotAUrl { .. })
    ));
    assert!(matches!(
        SiteKey::from_url("file:///etc/passwd"),
        Err(SiteKeyError::NotHttp { .. })
    ));
    let e = SiteKey::from_url("ftp://example.com/")
        .unwrap_err()
        .to_string();
    assert!(e.contains("only http:// and https://"), "{e}");
}

// ------------------------------------------------------------ request-level retry: configuration

#[test]
fn three_attempts_mean_exactly_two_sleeps() {
    let p = RetryPolicy::default();
    assert_eq!(p.attempts(), 3);
    assert_eq!(p.nominal_delays(), vec![ms(100), ms(300)]);
    assert!(p.delay_before(1, NO_JITTER).is_some());
    assert!(p.delay_before(2, NO_JITTER).is_some());
    assert_eq!(
        p.delay_before(3, NO_JITTER),
        None,
        "no third sleep (no 900ms)"
    );
    assert_eq!(p.delay_before(0, NO_JITTER), None);
    // Driven as a loop: three 503s → sleep, sleep, give up.
    let mut sleeps = Vec::new();
    let mut elapsed = Duration::ZERO;
    for attempt in 1.. {
        match p.decide(
            attempt,
            &AttemptResult::Status(503),
            None,
            elapsed,
            NO_JITTER,
        ) {
            RetryDecision::Retry { after } => {
                sleeps.push(after);
                elapsed += after;
            }
            RetryDecision::DoNotRetry(why) => {
                assert_eq!(why, GiveUp::AttemptsExhausted);
                assert_eq!(attempt, 3);
                break;
            }
        }
    }
    assert_eq!(sleeps, vec![ms(100), ms(300)]);
}

#[test]
fn retry_delays_are_100_then_300_ms() {
    let p = RetryPolicy::default();
    assert_eq!(p.initial(), ms(100));
    assert!((p.multiplier() - 3.0).abs() < 1e-12);
    assert_eq!(p.delay_before(1, NO_JITTER), Some(ms(100)));
    assert_eq!(p.delay_before(2, NO_JITTER), Some(ms(300)));
}

#[test]
fn the_multiplier_would_give_900_ms_on_a_fourth_attempt() {
    let p = RetryPolicy::new(4, ms(100), 3.0, 0.25, secs(10), secs(20), true).unwrap();
    assert_eq!(p.nominal_delays(), vec![ms(100), ms(300), ms(900)]);
}

#[test]
fn retry_jitter_is_25_percent() {
    let p = RetryPolicy::default();
    assert!((p.jitter() - 0.25).abs() < 1e-12);
    assert_eq!(p.delay_before(1, 0.0), Some(ms(75)));
    assert_eq!(p.delay_before(1, TOP), Some(ms(125)));
    assert_eq!(p.delay_before(2, 0.0), Some(ms(225)));
    assert_eq!(p.delay_before(2, TOP), Some(ms(375)));
    for i in 0..=100 {
        let r = f64::from(i) / 100.0 * TOP;
        let d = p.delay_before(2, r).unwrap();
        assert!(d >= ms(225) && d <= ms(375), "{d:?}");
    }
}

#[test]
fn probe_never_retries() {
    let all = RetryPolicies::default();
    let probe = all.get(RequestClass::Probe);
    assert_eq!(probe.attempts(), 1);
    assert!(probe.nominal_delays().is_empty());
    assert_eq!(
        probe.decide(
            1,
            &AttemptResult::Status(503),
            None,
            Duration::ZERO,
            NO_JITTER
        ),
        RetryDecision::DoNotRetry(GiveUp::AttemptsExhausted)
    );
    assert_eq!(
        probe.decide(1, &AttemptResult::Timeout, None, Duration::ZERO, NO_JITTER),
        RetryDecision::DoNotRetry(GiveUp::AttemptsExhausted)
    );
    for class in [
        RequestClass::Search,
        RequestClass::Detail,
        RequestClass::Notify,
    ] {
        assert_eq!(all.get(class), &RetryPolicy::default(), "{class}");
    }
}

#[test]
fn the_deadline_cuts_retries_short() {
    let p = RetryPolicy::new(3, ms(100), 3.0, 0.0, secs(10), secs(1), true).unwrap();
    assert_eq!(
        p.decide(1, &AttemptResult::Timeout, None, ms(850), NO_JITTER),
        RetryDecision::Retry { after: ms(100) }
    );
    // 950ms spent + 100ms sleep would pass the 1s deadline.
    assert_eq!(
        p.decide(1, &AttemptResult::Timeout, None, ms(950), NO_JITTER),
        RetryDecision::DoNotRetry(GiveUp::DeadlineWouldPass)
    );
}

#[test]
fn attempt_timeout_respects_the_deadline() {
    let p = RetryPolicy::default();
    assert_eq!(p.timeout(), secs(10));
    assert_eq!(p.deadline(), secs(20));
    assert_eq!(p.attempt_timeout(Duration::ZERO), secs(10));
    assert_eq!(p.attempt_timeout(secs(15)), secs(5));
    assert_eq!(p.attempt_timeout(secs(25)), Duration::ZERO);
    assert!(p.retry_header());
}

#[test]
fn retry_policy_rejects_bad_overrides() {
    let new = |a, m, j, t, d| RetryPolicy::new(a, ms(100), m, j, t, d, true);
    assert_eq!(
        new(0, 3.0, 0.25, secs(1), secs(2)),
        Err(RetryConfigError::ZeroAttempts)
    );
    for m in [0.5, f64::NAN, f64::INFINITY, -3.0] {
        assert!(matches!(
            new(3, m, 0.25, secs(1), secs(2)),
            Err(RetryConfigError::BadMultiplier(_))
        ));
    }
    for j in [-0.01, 1.0, f64::NAN] {
        assert!(matches!(
            new(3, 3.0, j, secs(1), secs(2)),
            Err(RetryConfigError::BadJitter(_))
        ));
    }
    assert_eq!(
        new(3, 3.0, 0.25, Duration::ZERO, secs(2)),
        Err(RetryConfigError::ZeroTime("timeout"))
    );
    assert_eq!(
        new(3, 3.0, 0.25, secs(1), Duration::ZERO),
        Err(RetryConfigError::ZeroTime("deadline"))
    );
    assert!(new(1, 1.0, 0.0, secs(1), secs(1)).is_ok());
}

// --------------------------------------------------------- request-level retry: retry conditions

#[test]
fn every_5xx_is_retried() {
    for s in 500..=599 {
        assert!(RetryPolicy::should_retry(&AttemptResult::Status(s)), "{s}");
    }
    assert!(!RetryPolicy::should_retry(&AttemptResult::Status(600)));
}

#[test]
fn timeouts_and_connect_failures_are_retried() {
    assert!(RetryPolicy::should_retry(&AttemptResult::Timeout));
    assert!(RetryPolicy::should_retry(&AttemptResult::Connect));
}

#[test]
fn no_4xx_is_retried() {
    let p = RetryPolicy::default();
    for s in 400..=499 {
        assert!(!RetryPolicy::should_retry(&AttemptResult::Status(s)), "{s}");
        assert_eq!(
            p.decide(
                1,
                &AttemptResult::Status(s),
                None,
                Duration::ZERO,
                NO_JITTER
            ),
            RetryDecision::DoNotRetry(GiveUp::NotRetryable)
        );
    }
}

#[test]
fn no_2xx_or_3xx_is_retried() {
    for s in (200..=299).chain(300..=399) {
        assert!(!RetryPolicy::should_retry(&AttemptResult::Status(s)), "{s}");
    }
}

#[test]
fn validation_failures_are_not_retried() {
    assert!(!RetryPolicy::should_retry(&AttemptResult::Invalid));
}

// ------------------------------------ classification (docs/architecture.md#classifying-a-response)

fn facts<'a>(
    status: Option<u16>,
    headers: &'a [(String, String)],
    final_url: &'a str,
    body: &'a [u8],
) -> ResponseFacts<'a> {
    ResponseFacts {
        status,
        failure: None,
        headers,
        requested_url: "https://www.example.com/search?q=flat",
        final_url,
        body_head: body,
        has_session: false,
    }
}
const REQ: &str = "https://www.example.com/search?q=flat";
const PAGE: &[u8] = b"<html><title>Flats</title><ul class=results><li>1</li></ul></html>";

fn hdr(name: &str, value: &str) -> Vec<(String, String)> {
    vec![(name.to_owned(), value.to_owned())]
}

#[test]
fn classify_2xx_is_ok_and_304_is_unchanged() {
    let m = Markers::generic();
    assert_eq!(classify(&facts(Some(200), &[], REQ, PAGE), &m), Outcome::Ok);
    assert_eq!(classify(&facts(Some(204), &[], REQ, b""), &m), Outcome::Ok);
    assert_eq!(
        classify(&facts(Some(304), &[], REQ, b""), &m),
        Outcome::Unchanged
    );
    assert_eq!(Outcome::Unchanged.as_str(), "ok");
}

#[test]
fn classify_anti_bot_pages_at_any_status_are_challenges() {
    let m = Markers::generic();
    let cf = hdr("cf-mitigated", "challenge");
    let dd = hdr("x-datadome", "protected");
    let bodies: [&[u8]; 6] = [
        b"<html><head><title>Just a moment...</title></head></html>",
        b"<script src=\"https://geo.captcha-delivery.com/captcha/\"></script>",
        b"<script src=\"https://js.hcaptcha.com/1/api.js\"></script>",
        b"<div class=\"g-recaptcha\" data-sitekey=\"x\"></div>",
        b"<div class=\"h-captcha\"></div>",
        b"<script src=\"https://static.geetest.com/v4/gt4.js\"></script>initGeetest",
    ];
    for status in [200, 403, 429, 503] {
        assert_eq!(
            classify(&facts(Some(status), &cf, REQ, PAGE), &m),
            Outcome::Challenge,
            "cf {status}"
        );
        for body in bodies {
            assert_eq!(
                classify(&facts(Some(status), &[], REQ, body), &m),
                Outcome::Challenge,
                "{status} {}",
                String::from_utf8_lossy(body)
            );
        }
    }
    assert_eq!(
        classify(&facts(Some(403), &dd, REQ, PAGE), &m),
        Outcome::Challenge
    );
    // DataDome's header on an ordinary 200 page is not a challenge.
    assert_eq!(classify(&facts(Some(200), &dd, REQ, PAGE), &m), Outcome::Ok);
    // A reCAPTCHA far down a real result page (past 64 KiB) does not count.
    let mut long = vec![b' '; 70 * 1024];
    long.extend_from_slice(b"<div class=\"g-recaptcha\"></div>");
    assert_eq!(
        classify(&facts(Some(200), &[], REQ, &long), &m),
        Outcome::Ok
    );
    // A site profile adds its own markers.
    let idealista = Markers::generic().with_challenge_paths(&["/checkvalidation"]);
    assert_eq!(
        classify(
            &facts(
                Some(200),
                &[],
                "https://www.example.com/checkvalidation?x",
                PAGE
            ),
            &idealista
        ),
        Outcome::Challenge
    );
}

#[test]
fn classify_429_is_rate_limited() {
    let m = Markers::generic();
    assert_eq!(
        classify(&facts(Some(429), &[], REQ, b"slow down"), &m),
        Outcome::RateLimited
    );
}

#[test]
fn classify_401_403_451_are_denied() {
    let m = Markers::generic();
    for s in [401, 403, 451] {
        assert_eq!(
            classify(&facts(Some(s), &[], REQ, b"go away"), &m),
            Outcome::Denied,
            "{s}"
        );
    }
}

#[test]
fn classify_login_redirects_are_session_expired() {
    let m = Markers::generic();
    for url in [
        "https://www.example.com/login?next=/search",
        "https://www.example.com/checkpoint/block",
    ] {
        assert_eq!(
            classify(&facts(Some(200), &[], url, PAGE), &m),
            Outcome::SessionExpired,
            "{url}"
        );
    }
    // A profile's logged-out marker, only when we sent a session.
    let fb = Markers::generic().with_logged_out_body(&["Log in to continue"]);
    let mut f = facts(Some(200), &[], REQ, b"<h1>Log in to continue</h1>");
    assert_eq!(classify(&f, &fb), Outcome::Ok);
    f.has_session = true;
    assert_eq!(classify(&f, &fb), Outcome::SessionExpired);
}

#[test]
fn classify_5xx_and_transport_failures_are_errors() {
    let m = Markers::generic();
    for s in [500, 502, 503, 504, 599] {
        assert_eq!(
            classify(&facts(Some(s), &[], REQ, b"oops"), &m),
            Outcome::Error,
            "{s}"
        );
    }
    for failure in [TransportFailure::Timeout, TransportFailure::Connect] {
        let mut f = facts(None, &[], REQ, b"");
        f.failure = Some(failure);
        assert_eq!(classify(&f, &m), Outcome::Error, "{failure:?}");
    }
    assert_eq!(classify(&facts(None, &[], REQ, b""), &m), Outcome::Error);
}

#[test]
fn classify_404_410_are_search_gone() {
    let m = Markers::generic();
    for s in [404, 410] {
        assert_eq!(
            classify(&facts(Some(s), &[], REQ, b"not found"), &m),
            Outcome::SearchGone
        );
    }
}

#[test]
fn outcomes_map_to_their_ladders() {
    assert_eq!(
        Outcome::Challenge.refusal_kind(),
        Some(RefusalKind::Challenge)
    );
    assert_eq!(
        Outcome::RateLimited.refusal_kind(),
        Some(RefusalKind::RateLimited)
    );
    assert_eq!(Outcome::Denied.refusal_kind(), Some(RefusalKind::Denied));
    assert_eq!(Outcome::Error.refusal_kind(), Some(RefusalKind::Error));
    // Not ladders: session expiry pauses, search_gone/layout_unknown are the search's problem.
    for o in [
        Outcome::Ok,
        Outcome::Unchanged,
        Outcome::SessionExpired,
        Outcome::SearchGone,
        Outcome::LayoutUnknown,
    ] {
        assert_eq!(o.refusal_kind(), None, "{o:?}");
    }
    assert_eq!(
        Outcome::parse("layout_unknown"),
        Some(Outcome::LayoutUnknown)
    );
}

// ---------------------------------------------------------------- purity

#[test]
fn the_policy_crate_stays_pure() {
    let manifest = include_str!("../../Cargo.toml");
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|s| s.split("[dev-dependencies]").next())
        .unwrap();
    for banned in [
        "tokio",
        "reqwest",
        "rusqlite",
        "hyper",
        "async-std",
        "chrono",
        "getrandom",
    ] {
        assert!(!deps.contains(banned), "notifio-policy depends on {banned}");
    }
    let clippy = include_str!("../../clippy.toml");
    for banned in ["Instant::now", "SystemTime::now", "thread_rng"] {
        assert!(
            clippy.contains(banned),
            "clippy.toml must disallow {banned}"
        );
    }
}
