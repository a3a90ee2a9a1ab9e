//! One check as a task: fetch the search page, classify the answer, extract the listings.
//!
//! A task owns what it needs (the fetcher is a cheap handle) and touches no shared state: the
//! driver starts it and gets a [`Done`] back, and only the driver records anything. A check may
//! be skipped as "the same page" when every search it answers last saw a page with the same
//! fingerprint; classification still runs then (headers may differ), extraction does not.

use crate::extract::{Extraction, SiteProfile};
use crate::fetch::{FetchMode, FetchRequest, Fetched, Fetcher};
use crate::listing::Listing;
use notifio_policy::{
    CheckId, Markers, Outcome, RequestClass, Scheduler, SearchId, SiteKey, classify,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Pages larger than this are parsed on the blocking pool. `watch` runs its checks on one
/// worker thread (fewer thread hand-offs per check), and a huge page (up to the body cap) must
/// not hold up other sites' checks meanwhile; an ordinary page (~300 KB) parses in ~1 ms.
const PARSE_INLINE_MAX: usize = 1 << 20;

/// A check from [`Scheduler::poll_due_into`] with its site key, URL and searches looked up once
/// (the scheduler hands out a small `Copy` check; one lookup per real fetch costs nothing).
#[derive(Debug, Clone)]
pub(super) struct Check {
    pub(super) id: CheckId,
    pub(super) site: SiteKey,
    pub(super) url: Arc<str>,
    pub(super) searches: Arc<[SearchId]>,
    pub(super) probe: bool,
}

impl Check {
    /// `None` only for an id the scheduler never issued (cannot happen for a fresh check).
    pub(super) fn resolve(scheduler: &Scheduler, c: notifio_policy::Check) -> Option<Self> {
        Some(Self {
            id: c.id,
            site: scheduler.site_key(c.site).clone(),
            url: Arc::clone(scheduler.check_url(c.id)?),
            searches: Arc::clone(scheduler.check_searches(c.id)?),
            probe: c.probe,
        })
    }
}

/// A finished check, handed back to the driver.
#[derive(Debug)]
pub(super) struct Done {
    pub(super) check: Check,
    pub(super) outcome: Outcome,
    pub(super) fetched: Fetched,
    pub(super) listings: Option<Vec<Listing>>,
    /// The page's fingerprint (2xx only).
    pub(super) fingerprint: Option<String>,
    /// The page was byte-for-byte the last good one, so it was not parsed again.
    pub(super) same_page: bool,
}

/// Everything one check needs, owned, so it runs as a task of its own.
pub(super) struct Task {
    pub(super) check: Check,
    pub(super) fetcher: Fetcher,
    /// How the page is read: the profile, its markers, and whether a session is expected.
    pub(super) profile: Arc<dyn SiteProfile>,
    pub(super) markers: Arc<Markers>,
    pub(super) has_session: bool,
    pub(super) via: FetchMode,
    /// The fingerprint every search this check answers last saw, when they agree: the page is
    /// asked for conditionally, and the same bytes are not parsed again.
    pub(super) expected: Option<String>,
    /// After this long the driver is told (on `slow`) that the check is slow.
    pub(super) slow_after: Duration,
}

impl Task {
    /// Fetches and judges the page; `None` when `cancel` stopped the fetch.
    pub(super) async fn run(
        self,
        cancel: &CancellationToken,
        slow: &mpsc::UnboundedSender<CheckId>,
    ) -> Option<Done> {
        let Self {
            check,
            fetcher,
            profile,
            markers,
            has_session,
            via,
            expected,
            slow_after,
        } = self;
        let req = FetchRequest {
            url: check.url.to_string(),
            site: check.site.clone(),
            class: if check.probe {
                RequestClass::Probe
            } else {
                RequestClass::Search
            },
            conditional: expected.is_some() && via == FetchMode::Http,
            post_json: None,
            via,
            ready: match via {
                FetchMode::Browser => profile.ready_selector().map(Arc::from),
                FetchMode::Http => None,
            },
            markers: Some(Arc::clone(&markers)),
            outgoing: None,
        };
        let fetch = fetcher.fetch(&req, cancel);
        tokio::pin!(fetch);
        let fetched = tokio::select! {
            biased;
            fetched = &mut fetch => fetched,
            () = tokio::time::sleep(slow_after) => {
                let _ = slow.send(check.id);
                fetch.await
            }
        };
        if fetched.cancelled {
            return None;
        }
        let fingerprint = fingerprint(&fetched);
        let same = expected.is_some() && fingerprint == expected;
        let (outcome, listings) = judge(&fetched, &profile, &markers, has_session, same).await;
        Some(Done {
            check,
            outcome,
            fetched,
            listings,
            fingerprint,
            same_page: same && outcome == Outcome::Ok,
        })
    }
}

/// Classifies a fetched page and, when it is a proper page, extracts its listings.
///
/// `same_page`: the bytes are those of the last page judged good, so a listing cannot be new;
/// classification still runs (headers may differ), extraction does not.
async fn judge(
    fetched: &Fetched,
    profile: &Arc<dyn SiteProfile>,
    markers: &Markers,
    has_session: bool,
    same_page: bool,
) -> (Outcome, Option<Vec<Listing>>) {
    if let Some(site) = &fetched.held_at {
        // The search's own site answered (with a redirect); the site it leads to is waiting.
        // Nothing is learnt about the page and nobody refused: the search is simply due
        // again after its interval, like an unchanged page.
        tracing::info!(to = %site, "a redirect leads to a waiting site; not followed");
        return (Outcome::Unchanged, None);
    }
    let outcome = classify(&fetched.facts(has_session), markers);
    if outcome != Outcome::Ok || same_page {
        return (outcome, None);
    }
    let Ok(url) = url::Url::parse(&fetched.final_url) else {
        return (Outcome::LayoutUnknown, None);
    };
    let extraction = if fetched.body.len() <= PARSE_INLINE_MAX {
        profile.extract(&fetched.body, &url)
    } else {
        let (profile, body) = (Arc::clone(profile), fetched.body.clone());
        tokio::task::spawn_blocking(move || profile.extract(&body, &url))
            .await
            .unwrap_or(Extraction::LayoutUnknown)
    };
    match extraction {
        Extraction::Listings(v) => (Outcome::Ok, Some(v)),
        Extraction::NoResults => (Outcome::Ok, Some(Vec::new())),
        Extraction::LayoutUnknown => (Outcome::LayoutUnknown, None),
    }
}

/// A 2xx page's identity: status, final URL and body, hashed (xxh3, 128 bits, hex). Hashing
/// 300 KB costs ~20 µs; parsing it costs a millisecond or more.
fn fingerprint(fetched: &Fetched) -> Option<String> {
    let status = fetched.status.filter(|s| (200..300).contains(s))?;
    if fetched.failure.is_some() {
        return None;
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&status.to_le_bytes());
    h.update(fetched.final_url.as_bytes());
    h.update(&[0]);
    h.update(&fetched.body);
    Some(format!("{:032x}", h.digest128()))
}
