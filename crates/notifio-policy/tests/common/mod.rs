//! What the scheduler tests share: a [`Check`] with its site key and searches looked up, the
//! way the real driver (`watch.rs`) resolves the scheduler's small `Copy` check once per fetch.

use notifio_policy::{CheckId, Scheduler, SearchId, SiteKey, Timestamp};
use std::sync::Arc;

/// A check as the driver sees it after looking up its site key, URL and searches.
#[allow(dead_code)] // each test file reads its own subset of the fields
#[derive(Clone, Debug)]
pub(crate) struct Check {
    pub(crate) id: CheckId,
    pub(crate) site: SiteKey,
    pub(crate) url: Arc<str>,
    pub(crate) searches: Arc<[SearchId]>,
    pub(crate) probe: bool,
}

/// `poll_due`, resolved.
pub(crate) trait PollCheck {
    /// [`Scheduler::poll_due`] with the check's site key, URL and searches looked up.
    fn poll_check(&mut self, now: Timestamp) -> Option<Check>;
}

impl PollCheck for Scheduler {
    fn poll_check(&mut self, now: Timestamp) -> Option<Check> {
        let c = self.poll_due(now)?;
        Some(Check {
            id: c.id,
            site: self.site_key(c.site).clone(),
            url: Arc::clone(self.check_url(c.id).expect("an issued check has a URL")),
            searches: Arc::clone(
                self.check_searches(c.id)
                    .expect("an issued check has searches"),
            ),
            probe: c.probe,
        })
    }
}
