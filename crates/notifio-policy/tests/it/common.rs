//! What the scheduler tests share: a [`Check`] with its site key and searches looked up, the
//! way the real driver (`notifio::watch`) resolves the scheduler's small `Copy` check once per fetch.

use notifio_policy::{CheckId, Outcome, Scheduler, SearchId, SearchSpec, SiteKey, Timestamp};
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;

/// The tests' epoch.
pub(crate) const T0: Timestamp = Timestamp(1_700_000_000_000);
/// A second and a minute, in ms.
pub(crate) const SEC: u64 = 1000;
pub(crate) const MIN: u64 = 60 * SEC;

/// The scheduler's first wake-up at or after `t`: wake-ups fall on a [`notifio_policy::TICK`].
pub(crate) fn tick(t: Timestamp) -> Timestamp {
    let k = notifio_policy::TICK.as_millis() as u64;
    Timestamp(t.as_millis().div_ceil(k) * k)
}

/// `ms` as a duration.
pub(crate) fn d(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A search on `url` (its site from the URL), due at once.
pub(crate) fn spec(id: u32, url: &str, interval_ms: u64) -> SearchSpec {
    SearchSpec {
        id: SearchId(id),
        url: url.to_owned(),
        site: SiteKey::from_url(url).unwrap(),
        interval: d(interval_ms),
        first_due: None,
        pages: 1,
    }
}

/// A check as the driver sees it after looking up its site key, URL and searches.
#[derive(Clone, Debug)]
pub(crate) struct Check {
    pub(crate) id: CheckId,
    pub(crate) site: SiteKey,
    pub(crate) url: Arc<str>,
    pub(crate) searches: Arc<[SearchId]>,
    pub(crate) probe: bool,
    pub(crate) spare: Option<u32>,
}

/// `poll_due` and `poll_due_into`, resolved.
pub(crate) trait PollCheck {
    /// [`Scheduler::poll_due`] with the check's site key, URL and searches looked up.
    fn poll_check(&mut self, now: Timestamp) -> Option<Check>;
    /// [`Scheduler::poll_due_into`], resolved the same way.
    fn poll_checks(&mut self, now: Timestamp) -> Vec<Check>;
}

/// A scheduler's check with its site key, URL and searches looked up.
fn resolve(s: &Scheduler, c: notifio_policy::Check) -> Check {
    Check {
        id: c.id,
        site: s.site_key(c.site).clone(),
        url: Arc::clone(s.check_url(c.id).expect("an issued check has a URL")),
        searches: Arc::clone(
            s.check_searches(c.id)
                .expect("an issued check has searches"),
        ),
        probe: c.probe,
        spare: c.spare,
    }
}

impl PollCheck for Scheduler {
    fn poll_check(&mut self, now: Timestamp) -> Option<Check> {
        let c = self.poll_due(now)?;
        Some(resolve(self, c))
    }

    fn poll_checks(&mut self, now: Timestamp) -> Vec<Check> {
        let mut due = Vec::new();
        self.poll_due_into(now, &mut due);
        due.into_iter().map(|c| resolve(self, c)).collect()
    }
}

/// Any outcome a check can have, the ordinary ones more often than the rest.
pub(crate) fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Ok),
        1 => Just(Outcome::Unchanged),
        2 => Just(Outcome::Challenge),
        2 => Just(Outcome::RateLimited),
        2 => Just(Outcome::Denied),
        2 => Just(Outcome::Error),
        1 => Just(Outcome::LayoutUnknown),
        1 => Just(Outcome::SessionExpired),
        1 => Just(Outcome::SearchGone),
    ]
}
