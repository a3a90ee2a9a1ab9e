//! A budgeted site's plan from what its searches learnt (docs/policy.md#a-request-budget-per-site):
//! the one place that turns each search's model into the [`Demand`] the square-root rule
//! ([`allocate`]) reads, and the site's price `k` from the busiest hour of its week. The
//! watcher and the simulated week both plan through here, so the benchmark measures the
//! watcher's own planning.

use crate::allocate::{Demand, RequestBudget, Share, allocate, price};
use crate::rates::{ArrivalRates, DEFAULT_PRIOR, HOURS_PER_WEEK, SiteRhythm};
use std::time::Duration;

/// One search of a budgeted site, as its plan sees it.
#[derive(Clone, Copy, Debug)]
pub struct Planned<'a> {
    /// What its checks taught of its new listings.
    pub model: &'a ArrivalRates,
    /// Requests one check makes at most (its result pages).
    pub pages: u32,
    /// Listings its first result page showed last (0: not known yet).
    pub page_size: u32,
    /// Its own interval: it is never checked more often.
    pub fastest: Duration,
    /// `max_interval`: it is checked at least this often.
    pub slowest: Duration,
    /// Outside the active hours the user gave it: no listings are expected now.
    pub resting: bool,
}

/// The expected rate of each search's new listings in hour `h` of the week, shrunk toward
/// the site's rhythm (what its searches together show of the day and the week).
fn rates_at<'a>(searches: &'a [Planned<'a>]) -> impl Fn(&ArrivalRates, usize) -> f64 + 'a {
    let rhythm = SiteRhythm::of(searches.iter().map(|s| s.model));
    move |m, h| m.rate_in_hour(h, DEFAULT_PRIOR, rhythm.shape(h))
}

/// The site's `k` (see [`price`]): the budget spent in the busiest hour of the week, as the
/// models now expect it.
#[must_use]
pub fn site_price(searches: &[Planned<'_>], budget: RequestBudget) -> f64 {
    let rate = rates_at(searches);
    let peak = (0..HOURS_PER_WEEK)
        .map(|h| {
            searches
                .iter()
                .map(|s| f64::from(s.pages.max(1)) * rate(s.model, h).sqrt())
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    price(budget, peak)
}

/// Each search's share of `budget` in hour `hour` of the week (in the order of `searches`),
/// at the site's price `k` (from [`site_price`]).
#[must_use]
pub fn plan_site(
    searches: &[Planned<'_>],
    budget: RequestBudget,
    k: f64,
    hour: usize,
) -> Vec<Share> {
    let rate = rates_at(searches);
    let demands: Vec<Demand> = searches
        .iter()
        .map(|s| Demand {
            rate: if s.resting { 0.0 } else { rate(s.model, hour) },
            pages: s.pages.max(1),
            page_size: s.page_size,
            fastest: s.fastest,
            slowest: s.slowest,
        })
        .collect();
    allocate(&demands, budget, k)
}

#[cfg(test)]
mod tests {
    use super::{Planned, plan_site, site_price};
    use crate::allocate::RequestBudget;
    use crate::rates::{ArrivalRates, LocalOffset};
    use crate::time::Timestamp;
    use std::time::Duration;

    fn planned(model: &ArrivalRates, resting: bool) -> Planned<'_> {
        Planned {
            model,
            pages: 1,
            page_size: 0,
            fastest: Duration::from_secs(5),
            slowest: Duration::from_secs(900),
            resting,
        }
    }

    #[test]
    fn the_busier_search_gets_more_and_a_resting_one_only_its_floor() {
        let budget = RequestBudget {
            requests: 4,
            per: Duration::from_secs(60),
        };
        let (mut busy, quiet) = (ArrivalRates::new(), ArrivalRates::new());
        let hour = 3_600_000;
        for i in 0..48u64 {
            let (from, to) = (Timestamp(i * hour), Timestamp((i + 1) * hour));
            busy.observe(from, to, 6, LocalOffset::default());
        }
        let searches = [planned(&busy, false), planned(&quiet, false)];
        let k = site_price(&searches, budget);
        assert!(k > 0.0);
        let shares = plan_site(&searches, budget, k, 10);
        assert!(
            shares[0].checks_per_hour > 2.0 * shares[1].checks_per_hour,
            "{shares:?}"
        );
        let resting = [planned(&busy, true), planned(&quiet, false)];
        let shares = plan_site(&resting, budget, k, 10);
        // 900 s, less the jitter and the longest wait of two searches on 4/min (76.274 s).
        let floor = 3600.0 / ((900.0 - 76.274) / 1.1);
        let wait = budget.longest_wait([1, 1]);
        let planned = crate::allocate::slowest_planned(Duration::from_secs(900), wait);
        assert!((3600.0 / planned.as_secs_f64() - floor).abs() < 1e-6);
        assert!(
            (shares[0].checks_per_hour - floor).abs() < 1e-6,
            "only its max_interval: {shares:?}"
        );
    }
}
