//! A site's request budget, spent where listings appear: the square-root rule
//! (docs/policy.md#a-request-budget-per-site).
//!
//! Checked every `T`, a search whose listings arrive as a Poisson process at rate λ keeps a
//! new listing waiting `T / 2` on average. Under a fixed number of requests, the mean wait over
//! all listings is smallest when each search is checked at a rate proportional to `√λ`
//! (minimise `Σ λᵢ / 2rᵢ` subject to `Σ rᵢ = R`: Lagrange gives `rᵢ ∝ √λᵢ`; Kolobov et al.,
//! NeurIPS 2019, and Azar et al. 2018 solve richer forms of it). The same rule over the hours
//! of the week spends fewer requests when listings are rare: the rate is `k·√λ` with one `k`
//! for the week, the one that spends the budget exactly in the busiest hour (so the quiet
//! hours leave requests unspent; that is politeness too).
//!
//! Around the rule: a search is checked at least every `max_interval` (planned early enough
//! that its jitter and its wait behind the site's other checks cannot make it late:
//! [`RequestBudget::longest_wait`]) and never more often than its own `interval`; a search
//! whose page could fill up between two checks (half a page of new listings expected) is
//! checked often enough that it cannot; and the requests of every search (each check is
//! `pages` requests at most) never exceed the budget. With equal rates it is plain
//! round-robin: every search gets the same share.

use crate::jitter::INTERVAL_JITTER;
use crate::schedule::TICK;
use std::time::Duration;

/// A site's request budget: at most `requests` requests in any window of `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestBudget {
    /// Requests allowed in any window of [`Self::per`].
    pub requests: u32,
    /// The window.
    pub per: Duration,
}

impl RequestBudget {
    /// Requests per hour it allows on average.
    #[must_use]
    pub fn per_hour(self) -> f64 {
        f64::from(self.requests) * 3600.0 / self.per.as_secs_f64().max(1e-3)
    }

    /// The window the scheduler counts requests in: [`Self::per`] and a tenth more (at most a
    /// second). The site counts requests as they arrive, and two requests can take different
    /// times to get there, so that no window of the site's own clock holds more than the
    /// budget either.
    #[must_use]
    pub fn counted_window(self) -> Duration {
        self.per + (self.per / 10).min(Duration::from_secs(1))
    }

    /// The longest a check that has come due can wait for its site, on a site whose searches
    /// each make one check of `pages` requests (docs/policy.md#a-request-budget-per-site).
    ///
    /// The scheduler takes a site's checks by due time, and a check is due again only after
    /// it ran, so a due check waits behind at most one check of each other search. Counted
    /// from a full window: the window empties (its [`Self::counted_window`] `W`), then each
    /// check of `c` requests (at most [`Self::requests`] `R`) takes at most `2c - 1` steps of
    /// `W / R`: up to `c - 1` for room in the window, and its `c` requests one spacing apart.
    /// It holds for a spacing of at most `W / R` (a spacing that lets the budget be spent;
    /// a check's time on the wire counts as spacing), with each wake-up's [`TICK`] on top.
    /// Retries, redirects and the requests of other processes are not counted.
    #[must_use]
    pub fn longest_wait(self, pages: impl IntoIterator<Item = u32>) -> Duration {
        let requests = self.requests.max(1);
        let (mut checks, mut steps) = (0u32, 0u32);
        for p in pages {
            checks = checks.saturating_add(1);
            steps = steps.saturating_add(p.clamp(1, requests).saturating_mul(2) - 1);
        }
        let window = self.counted_window();
        let step = window / requests;
        window + step * steps.saturating_sub(1) + TICK * checks.saturating_add(1)
    }
}

/// What the allocation needs to know of one search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Demand {
    /// New listings per hour expected now (0 outside the search's active hours).
    pub rate: f64,
    /// Requests one check makes at most (its result pages).
    pub pages: u32,
    /// Listings its result pages show, when known (0: unknown, no overflow rule).
    pub page_size: u32,
    /// Its own interval: it is never checked more often.
    pub fastest: Duration,
    /// `max_interval`: it is checked at least this often.
    pub slowest: Duration,
}

/// What one search gets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share {
    /// Time between its checks.
    pub interval: Duration,
    /// Checks per hour.
    pub checks_per_hour: f64,
    /// Mean time from a listing appearing to the check that finds it (half the interval).
    pub expected_delay: Duration,
}

/// How much of `max_interval` a search's longest planned interval is at most (see
/// [`allocate`]): less where its site's budget needs it.
pub const SLOWEST_PLANNED: f64 = 0.85;

/// The longest interval `allocate` plans for a search whose `max_interval` is `slowest`, on a
/// site whose due checks wait at most `wait` ([`RequestBudget::longest_wait`]): late by all its
/// jitter ([`INTERVAL_JITTER`]) and then by that wait, it is still checked within `slowest`.
/// Never more than [`SLOWEST_PLANNED`] of it; a wait as long as `slowest` (an hourly budget's
/// window against a 15 min `max_interval`) leaves it at that, and `slowest` is then no promise.
/// What a resting search gets, and what a config's budget must afford for every search.
#[must_use]
pub fn slowest_planned(slowest: Duration, wait: Duration) -> Duration {
    let most = slowest.mul_f64(SLOWEST_PLANNED);
    match slowest.checked_sub(wait) {
        Some(left) if !left.is_zero() => most.min(left.div_f64(1.0 + INTERVAL_JITTER)),
        _ => most,
    }
}

/// The share of the budget the busiest hour plans to spend. A window's limit is hard: checks
/// planned at exactly its rate collide with it, wait for room and fall behind their plan (in
/// the simulated week, the busiest search got 12 % fewer checks than planned at 100 %); at
/// 80 % they keep to it.
pub const PEAK_SHARE: f64 = 0.8;

/// The rate at which the busiest hour of the week spends [`PEAK_SHARE`] of `budget`: `k` in
/// `rᵢ = k·√λᵢ`, from `peak`, the largest over the hours of `Σ pagesᵢ·√λᵢ(hour)`.
#[must_use]
pub fn price(budget: RequestBudget, peak: f64) -> f64 {
    if peak > 0.0 {
        budget.per_hour() * PEAK_SHARE / peak
    } else {
        0.0
    }
}

/// Each search's share of `budget` now (see the module docs), in the order of `demands`; `k`
/// from [`price`].
#[must_use]
pub fn allocate(demands: &[Demand], budget: RequestBudget, k: f64) -> Vec<Share> {
    let cap = budget.per_hour();
    // `max_interval` is a promise: planned sooner, so that the interval's jitter (±10 %) and
    // the site's other checks ahead of it in its budget never make it late.
    let wait = budget.longest_wait(demands.iter().map(|d| d.pages));
    let floor = |d: &Demand| 3600.0 / slowest_planned(d.slowest, wait).as_secs_f64().max(1e-3);
    let ceil = |d: &Demand| 3600.0 / d.fastest.as_secs_f64().max(1e-3);
    // What a search needs whatever the rule says: its floor, and enough to keep its page from
    // filling up between two checks.
    let least = |d: &Demand| {
        let overflow = if d.page_size > 0 {
            2.0 * d.rate.max(0.0) / f64::from(d.page_size)
        } else {
            0.0
        };
        floor(d).max(overflow).min(ceil(d).max(floor(d)))
    };
    let rate_with = |k: f64, d: &Demand| {
        (k * d.rate.max(0.0).sqrt())
            .max(least(d))
            .min(ceil(d).max(least(d)))
    };
    let spend = |k: f64| {
        demands
            .iter()
            .map(|d| rate_with(k, d) * f64::from(d.pages.max(1)))
            .sum::<f64>()
    };
    // The rule's `k`, lowered (bisection) until the requests fit the budget; the floors are
    // never lowered (a budget too small for them is refused by the config).
    let mut k = k.max(0.0);
    if spend(k) > cap {
        let (mut lo, mut hi) = (0.0, k);
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if spend(mid) > cap {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        k = lo;
    }
    demands
        .iter()
        .map(|d| {
            let per_hour = rate_with(k, d);
            let interval = Duration::from_secs_f64(3600.0 / per_hour.max(1e-9));
            Share {
                interval,
                checks_per_hour: per_hour,
                expected_delay: interval / 2,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn demand(rate: f64) -> Demand {
        Demand {
            rate,
            pages: 1,
            page_size: 0,
            fastest: Duration::from_secs(10),
            slowest: 15 * MIN,
        }
    }

    fn budget(per_min: u32) -> RequestBudget {
        RequestBudget {
            requests: per_min,
            per: MIN,
        }
    }

    #[test]
    fn equal_rates_are_round_robin() {
        let d = vec![demand(1.0); 4];
        let s = allocate(&d, budget(5), price(budget(5), 4.0));
        for share in &s {
            // 5 a minute, 80 % of it at the peak, shared by four: one a minute each.
            assert!((share.checks_per_hour - 60.0).abs() < 1e-6, "{share:?}");
            assert_eq!(share.interval, MIN);
            assert_eq!(share.expected_delay, MIN / 2);
        }
    }

    #[test]
    fn shares_follow_the_square_root_of_the_rates_within_the_budget() {
        let rates = [6.0, 2.0, 1.0, 0.3, 0.1];
        let d: Vec<Demand> = rates.iter().map(|&r| demand(r)).collect();
        let peak: f64 = rates.iter().map(|r: &f64| r.sqrt()).sum();
        let s = allocate(&d, budget(4), price(budget(4), peak));
        let total: f64 = s.iter().map(|x| x.checks_per_hour).sum();
        assert!(
            (total - 240.0 * PEAK_SHARE).abs() < 1e-6,
            "the busiest hour spends its share: {total}"
        );
        let ratio = s[0].checks_per_hour / s[2].checks_per_hour;
        assert!((ratio - 6f64.sqrt()).abs() < 1e-6, "{ratio}");
        // At a tenth of the rates (a quiet night) the same price spends √0.1 of the budget.
        let night: Vec<Demand> = rates.iter().map(|&r| demand(r / 10.0)).collect();
        let n = allocate(&night, budget(4), price(budget(4), peak));
        let spent: f64 = n.iter().map(|x| x.checks_per_hour).sum();
        assert!(
            (spent / (240.0 * PEAK_SHARE) - 0.1f64.sqrt()).abs() < 0.01,
            "{spent}"
        );
    }

    #[test]
    fn a_due_check_waits_for_the_window_then_a_share_of_it_per_request() {
        // Six searches of one page on 2/min, the window counted as 61 s: it empties, then
        // one request every 30.5 s; the sixth check starts 61 + 5 × 30.5 s on, and each
        // wake-up may fall up to a tick late.
        let six = budget(2).longest_wait([1; 6]);
        assert_eq!(six, Duration::from_millis(61_000 + 5 * 30_500 + 7 * 8));
        // A check of `c` pages takes up to `2c - 1` steps (room, then its pages); pages
        // beyond the budget count as the budget (the config refuses them anyway).
        let paged = budget(2).longest_wait([1, 1, 3]);
        assert_eq!(paged, Duration::from_millis(61_000 + 4 * 30_500 + 4 * 8));
        assert_eq!(budget(4).longest_wait([1, 3, 2]), paged);
        let hourly = RequestBudget {
            requests: 120,
            per: 60 * MIN,
        };
        assert_eq!(
            hourly.longest_wait([1]),
            Duration::from_millis(3_601_000 + 2 * 8)
        );
    }

    #[test]
    fn max_interval_is_planned_early_enough_for_the_jitter_and_the_longest_wait() {
        // The case that went 902.9 s between two checks on a 15 min max_interval: six
        // searches on 2/min, one of them with nothing. Late by its whole jitter and then
        // by the longest wait, it is still checked within max_interval.
        let mut d = vec![demand(2.0); 6];
        d[2] = demand(0.0);
        let b = budget(2);
        let s = allocate(&d, b, price(b, 5.0 * 2f64.sqrt()));
        let latest = s[2].interval.mul_f64(1.0 + INTERVAL_JITTER) + b.longest_wait([1; 6]);
        assert!(latest <= 15 * MIN, "{latest:?}: {s:?}");
        assert!(
            latest > 15 * MIN - Duration::from_millis(5),
            "no earlier than needed"
        );
        // Where the wait alone is longer than max_interval (an hourly budget's window), no
        // plan can promise it: the search gets 85 % of it, as a budget with room would.
        let hourly = RequestBudget {
            requests: 120,
            per: 60 * MIN,
        };
        let s = allocate(&d, hourly, price(hourly, 5.0 * 2f64.sqrt()));
        assert_eq!(s[2].interval.as_millis(), 765_000);
        // And a budget by the second waits so little that 85 % of it is the earlier.
        let by_the_second = RequestBudget {
            requests: 10,
            per: Duration::from_secs(1),
        };
        let s = allocate(&d, by_the_second, price(by_the_second, 1.0));
        assert_eq!(s[2].interval.as_millis(), 765_000);
    }

    #[test]
    fn floors_ceilings_pages_and_full_pages_are_kept() {
        // A search with nothing still gets its max_interval, planned early enough for the
        // jitter and the longest wait of the site (183.032 s, below); one with its own
        // interval of 10 min is never checked more often; pages count as requests.
        let mut quiet = demand(0.0);
        quiet.slowest = 15 * MIN;
        let mut slow = demand(100.0);
        slow.fastest = 10 * MIN;
        let mut paged = demand(1.0);
        paged.pages = 3;
        let s = allocate(&[quiet, slow, paged], budget(2), 1e9);
        let every = (900.0 - 183.032) / 1.1;
        assert!(
            (s[0].checks_per_hour - 3600.0 / every).abs() < 1e-6,
            "{s:?}"
        );
        assert!((s[1].checks_per_hour - 6.0).abs() < 1e-6, "{s:?}");
        let spent = s[0].checks_per_hour + s[1].checks_per_hour + 3.0 * s[2].checks_per_hour;
        assert!(s[2].checks_per_hour > 0.0);
        assert!(spent <= 120.0 + 1e-6, "{spent}");
        // 60 new listings an hour on a page of 20: at least 6 checks an hour (10 per check
        // at most), even where the rule's price would give fewer.
        let mut busy = demand(60.0);
        busy.page_size = 20;
        let s = allocate(&[busy, demand(1.0)], budget(10), 0.1);
        assert!(s[0].checks_per_hour >= 6.0 - 1e-9, "{s:?}");
    }
}
