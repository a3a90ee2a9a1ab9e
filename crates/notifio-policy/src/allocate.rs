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
//! Around the rule: a search is checked at least every `max_interval` and never more often
//! than its own `interval`; a search whose page could fill up between two checks (half a page
//! of new listings expected) is checked often enough that it cannot; and the requests of every
//! search (each check is `pages` requests at most) never exceed the budget. With equal rates it
//! is plain round-robin: every search gets the same share.

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

/// How much of `max_interval` a search's longest planned interval is (see [`allocate`]).
pub const SLOWEST_PLANNED: f64 = 0.85;

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
    // `max_interval` is a promise: planned a little sooner, so that the interval's jitter
    // (±10 %) and the site's other checks ahead of it never make it late.
    let floor = |d: &Demand| 3600.0 / (d.slowest.as_secs_f64() * SLOWEST_PLANNED).max(1e-3);
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
    fn floors_ceilings_pages_and_full_pages_are_kept() {
        // A search with nothing still gets its max_interval; one with its own interval of
        // 10 min is never checked more often; pages count as requests.
        let mut quiet = demand(0.0);
        quiet.slowest = 15 * MIN;
        let mut slow = demand(100.0);
        slow.fastest = 10 * MIN;
        let mut paged = demand(1.0);
        paged.pages = 3;
        let s = allocate(&[quiet, slow, paged], budget(2), 1e9);
        assert!(
            (s[0].checks_per_hour - 4.0 / SLOWEST_PLANNED).abs() < 1e-6,
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
