//! The polite budget in the watcher (docs/policy.md#a-request-budget-per-site): what each good
//! check teaches about how often its searches get new listings, and, on a site with a budget,
//! each search's interval from what was learnt.
//!
//! The decisions are the policy crate's (`notifio_policy::rates`, `notifio_policy::plan`):
//! this module keeps each search's model, asks for the site's plan after each of its checks,
//! hands the intervals to the scheduler (which also holds every check to the budget's window),
//! keeps the models in the store so a restart does not forget a week of watching, and says
//! what the plan is for `notifio status` and the dashboard. A site without a budget keeps its
//! searches' own intervals; its searches still learn, so a budget set later starts informed.

use super::setup::Searches;
use super::{WatchError, Watcher};
use crate::clock::now;
use crate::config::Config;
use crate::store::{StoreError, Tx};
use notifio_policy::{
    ArrivalRates, Check, LocalOffset, Planned, RequestBudget, Scheduler, SearchId, Share, SiteKey,
    Timestamp, plan_site, site_price,
};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// How often a site's price (the `k` of the square-root rule, from the week's busiest hour)
/// is worked out again.
const REPRICE_EVERY: Duration = Duration::from_secs(600);
/// How often a search's model is written when nothing new was found (a crash loses at most
/// this much of what was learnt, never a listing).
const SAVE_EVERY: Duration = Duration::from_secs(60);
/// How often the user's offset from UTC is read again (summer time).
const OFFSET_EVERY: Duration = Duration::from_secs(3600);

/// What one search's checks taught, and its share now.
#[derive(Debug, Default)]
struct Learnt {
    rates: ArrivalRates,
    /// Its last good check: the start of the next exposure.
    last_good: Option<Timestamp>,
    /// Listings its first result page showed at the last good check.
    page_size: u32,
    /// Changed since it was last written.
    dirty: bool,
    saved_at: Option<Timestamp>,
    /// Its share of its site's budget, when the site has one.
    share: Option<Share>,
}

/// A site's price and when it was worked out.
#[derive(Debug, Clone, Copy)]
struct Price {
    k: f64,
    at: Timestamp,
}

/// Every search's model, every budgeted site's price, and the user's offset from UTC.
#[derive(Debug, Default)]
pub(super) struct Plans {
    learnt: HashMap<u32, Learnt>,
    prices: HashMap<SiteKey, Price>,
    offset: LocalOffset,
    offset_at: Option<Timestamp>,
    shared: Shared,
}

/// This process's name for the requests it sends to budgeted sites, in the store every
/// process on the state directory reads (`store/requests.rs`): random, so that another
/// process (or this one's pid reused after a restart) never takes them for its own.
#[derive(Debug)]
struct Shared {
    process: i64,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            process: rand::random::<i64>() & i64::MAX,
        }
    }
}

/// How far back the requests of a budgeted site are kept in the store: its window is at most
/// an hour (and a margin).
const SHARED_FOR: Duration = Duration::from_secs(3600 + 60);

impl Watcher {
    /// The checks due now, with the requests other processes on this state directory sent to
    /// budgeted sites counted first and this process's own starts written for them, in one
    /// transaction: a `check` beside `watch` spends one budget with it, and the two cannot both
    /// take the last room of a window (docs/policy.md#a-request-budget-per-site).
    pub(super) fn poll_due(&mut self, due: &mut Vec<Check>) -> Result<(), WatchError> {
        let sites: Vec<SiteKey> = self.scheduler.budgeted_sites().cloned().collect();
        if sites.is_empty() {
            self.scheduler.poll_due_into(now(), due);
            return Ok(());
        }
        let process = self.plans.shared.process;
        let scheduler = &mut self.scheduler;
        self.store.transaction(|tx| {
            let t = now();
            let since = Timestamp(t.as_millis().saturating_sub(millis(SHARED_FOR)));
            for site in &sites {
                let sent = tx.requests_elsewhere(process, site, since)?;
                scheduler.set_requests_elsewhere(site, &sent);
            }
            scheduler.poll_due_into(t, due);
            for c in due.iter() {
                let site = scheduler.site_key(c.site);
                if sites.contains(site) {
                    tx.record_requests(process, site, &[t], since)?;
                }
            }
            Ok::<_, WatchError>(())
        })
    }

    /// Writes the requests a check sent beyond its first (its next pages, retries, redirects)
    /// for the other processes, when its site has a budget.
    pub(super) fn share_requests(
        &mut self,
        site: &SiteKey,
        sent: &[Timestamp],
    ) -> Result<(), WatchError> {
        if sent.is_empty() || self.scheduler.budget(site).is_none() {
            return Ok(());
        }
        let process = self.plans.shared.process;
        let since = Timestamp(now().as_millis().saturating_sub(millis(SHARED_FOR)));
        self.store
            .transaction(|tx| tx.record_requests(process, site, sent, since))?;
        Ok(())
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What one search gets, as `status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct SearchPlan {
    /// Checks it gets per hour now.
    pub checks_per_hour: f64,
    /// Mean time from a listing appearing to the check that finds it, in seconds.
    pub expected_delay_s: f64,
}

/// What one site does with its budget, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct SitePlan {
    /// Its budget (`"4/min"`), if it has one.
    pub budget: Option<String>,
    /// Requests it got in the last hour (counted on a site with a budget).
    pub requests_last_hour: Option<u32>,
    /// A suggestion for a site with two or more searches and no budget.
    pub hint: Option<String>,
}

/// The plan of every search (by database id) and site, as the watcher writes it for `status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PlanView {
    /// By search database id.
    pub searches: BTreeMap<u32, SearchPlan>,
    /// By site key.
    pub sites: BTreeMap<String, SitePlan>,
}

/// The store's `meta` key of [`PlanView`].
pub const PLAN_META: &str = "plan";

/// `4/min`, `120/h`.
#[must_use]
pub fn budget_text(b: RequestBudget) -> String {
    let unit = match b.per.as_secs() {
        1 => "s".to_owned(),
        60 => "min".to_owned(),
        3600 => "h".to_owned(),
        _ => notifio_policy::format_duration(b.per),
    };
    format!("{}/{unit}", b.requests)
}

/// The suggestion for a site with `searches` searches and no budget (two or more), as
/// `status`, the dashboard and `check` say it.
#[must_use]
pub(super) fn budget_hint(config: &Config, site: &SiteKey, searches: usize) -> Option<String> {
    (config.budget_for(site).is_none() && searches >= 2).then(|| {
        format!(
            "{searches} searches on {site}: a budget (`budget = \"4/min\"` under [site.\"{site}\"]) spends its requests where listings appear (docs/policy.md)"
        )
    })
}

/// Every suggestion [`budget_hint`] makes for `config`'s sites, in the order of their
/// first search.
#[must_use]
pub fn budget_hints(config: &Config) -> Vec<String> {
    let mut sites: Vec<&SiteKey> = Vec::new();
    let active = || config.searches.iter().filter(|s| !s.paused);
    for s in active() {
        if !sites.contains(&&s.site) {
            sites.push(&s.site);
        }
    }
    sites
        .into_iter()
        .filter_map(|site| {
            let n = active().filter(|s| &s.site == site).count();
            budget_hint(config, site, n)
        })
        .collect()
}

impl Plans {
    /// The models the store keeps.
    pub(super) fn load(stored: Vec<(u32, ArrivalRates, Option<u64>)>, now: Timestamp) -> Self {
        let learnt = stored
            .into_iter()
            .map(|(id, rates, last)| {
                let l = Learnt {
                    rates,
                    last_good: last.map(Timestamp),
                    saved_at: Some(now),
                    ..Learnt::default()
                };
                (id, l)
            })
            .collect();
        Self {
            learnt,
            ..Self::default()
        }
    }

    /// The user's offset from UTC, read again at most once an hour.
    fn offset(&mut self, now: Timestamp) -> LocalOffset {
        let stale = self
            .offset_at
            .is_none_or(|at| now.saturating_since(at) >= OFFSET_EVERY);
        if stale {
            self.offset = crate::clock::local_offset(now);
            self.offset_at = Some(now);
        }
        self.offset
    }

    /// A good check of search `db_id` finished at `now`: `new` listings were new to it (and its
    /// filters let them through), its first page showed `page_size`. A baseline teaches
    /// nothing about arrivals (every listing is "new"): it only starts the exposure.
    pub(super) fn observe(
        &mut self,
        db_id: u32,
        now: Timestamp,
        new: u32,
        page_size: Option<u32>,
        baseline: bool,
    ) {
        let offset = self.offset(now);
        let l = self.learnt.entry(db_id).or_default();
        if let Some(from) = l.last_good.filter(|_| !baseline) {
            l.rates.observe(from, now, new, offset);
            l.dirty = true;
        }
        l.last_good = Some(now);
        if let Some(n) = page_size.filter(|&n| n > 0) {
            l.page_size = n;
        }
    }

    /// Forgets a search taken out of the schedule (its model stays in the store).
    pub(super) fn forget(&mut self, db_id: u32) {
        if let Some(l) = self.learnt.get_mut(&db_id) {
            l.share = None;
        }
    }

    /// Gives every search on `site` its share of the site's budget now and hands the intervals
    /// to the scheduler; a site without a budget keeps its searches' own intervals.
    pub(super) fn replan(
        &mut self,
        site: &SiteKey,
        searches: &Searches,
        config: &Config,
        scheduler: &mut Scheduler,
        now: Timestamp,
    ) {
        let ids: Vec<SearchId> = searches.on_site(site).to_vec();
        let Some(budget) = config.budget_for(site) else {
            for id in &ids {
                self.forget(id.0);
            }
            return;
        };
        let offset = self.offset(now);
        let infos: Vec<_> = ids
            .iter()
            .filter_map(|id| searches.get(id).map(|i| (*id, i)))
            .collect();
        let planned: Vec<Planned<'_>> = infos
            .iter()
            .map(|(id, info)| {
                let learnt = self.learnt.get(&id.0);
                Planned {
                    model: learnt.map_or(&*EMPTY, |l| &l.rates),
                    pages: info.pages,
                    page_size: learnt.map_or(0, |l| l.page_size),
                    fastest: info.interval,
                    slowest: info.max_interval,
                    resting: info
                        .active_hours
                        .is_some_and(|hours| !hours.contains(now, offset)),
                }
            })
            .collect();
        let stale = self
            .prices
            .get(site)
            .is_none_or(|p| now.saturating_since(p.at) >= REPRICE_EVERY);
        if stale {
            let k = site_price(&planned, budget);
            self.prices.insert(site.clone(), Price { k, at: now });
        }
        let k = self.prices.get(site).map_or(0.0, |p| p.k);
        let shares = plan_site(&planned, budget, k, offset.hour_of_week(now));
        for ((id, _), share) in infos.iter().zip(shares) {
            let l = self.learnt.entry(id.0).or_default();
            let was = l.share.map(|s| s.interval);
            l.share = Some(share);
            scheduler.set_interval(*id, share.interval);
            // A shorter interval applies now (the morning after a quiet night): the next check
            // is no later than the new interval after the last one.
            if was.is_none_or(|w| share.interval < w)
                && let Some(last) = l.last_good
            {
                scheduler.hasten(*id, (last + share.interval).max(now));
            }
        }
    }

    /// Writes the models that changed: those that learnt of new listings at once, the others
    /// at most every [`SAVE_EVERY`]; every one with `all` (shutdown).
    pub(super) fn save(
        &mut self,
        tx: &Tx<'_>,
        now: Timestamp,
        all: bool,
    ) -> Result<(), StoreError> {
        for (id, l) in &mut self.learnt {
            let due = l
                .saved_at
                .is_none_or(|at| now.saturating_since(at) >= SAVE_EVERY);
            if l.dirty && (all || due) {
                tx.save_arrival_rates(*id, &l.rates, l.last_good.map(Timestamp::as_millis))?;
                l.dirty = false;
                l.saved_at = Some(now);
            }
        }
        Ok(())
    }

    /// Marks search `db_id`'s model to be written with the next transaction (it just learnt of
    /// new listings).
    pub(super) fn save_soon(&mut self, db_id: u32) {
        if let Some(l) = self.learnt.get_mut(&db_id) {
            l.saved_at = None;
        }
    }

    /// What `status` shows of the plan: every scheduled search's checks per hour and expected
    /// delay (its share on a budgeted site, its own interval elsewhere), and each site's
    /// budget, requests in the last hour, or a suggestion.
    pub(super) fn view(
        &self,
        searches: &Searches,
        config: &Config,
        scheduler: &Scheduler,
        now: Timestamp,
    ) -> PlanView {
        let mut view = PlanView::default();
        for (id, info) in searches.iter() {
            let share = self.learnt.get(&id.0).and_then(|l| l.share);
            let (per_hour, delay) = match share {
                Some(s) => (s.checks_per_hour, s.expected_delay),
                None => (
                    3600.0 / info.interval.as_secs_f64().max(1e-3),
                    info.interval / 2,
                ),
            };
            view.searches.insert(
                info.db_id,
                SearchPlan {
                    checks_per_hour: per_hour,
                    expected_delay_s: delay.as_secs_f64(),
                },
            );
        }
        let hour_ago = Timestamp(now.as_millis().saturating_sub(3_600_000));
        for site in searches.sites() {
            let budget = config.budget_for(site);
            let hint = budget_hint(config, site, searches.on_site(site).len());
            view.sites.insert(
                site.to_string(),
                SitePlan {
                    budget: budget.map(budget_text),
                    requests_last_hour: scheduler
                        .requests_since(site, hour_ago)
                        .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
                    hint,
                },
            );
        }
        view
    }
}

/// The model of a search that has learnt nothing yet.
static EMPTY: std::sync::LazyLock<ArrivalRates> = std::sync::LazyLock::new(ArrivalRates::new);

#[cfg(test)]
mod tests {
    use super::budget_text;
    use notifio_policy::RequestBudget;
    use std::time::Duration;

    #[test]
    fn budgets_read_back_as_written() {
        let b = |n, s| RequestBudget {
            requests: n,
            per: Duration::from_secs(s),
        };
        assert_eq!(budget_text(b(4, 60)), "4/min");
        assert_eq!(budget_text(b(120, 3600)), "120/h");
        assert_eq!(budget_text(b(1, 1)), "1/s");
    }
}
