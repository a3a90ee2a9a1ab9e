//! One check as a task: read the search's pages (`crate::pages`: fetch, classify, extract,
//! follow the next page), and hand the result back.
//!
//! A task owns what it needs (the fetcher is a cheap handle) and touches no shared state: the
//! driver starts it and gets a [`Done`] back, and only the driver records anything. A check may
//! be skipped as "the same page" when every search it answers last saw a page with the same
//! fingerprint; classification still runs then (headers may differ), extraction does not.

use crate::extract::bounds::Unreadable;
use crate::extract::immoscout24_app::AppSearch;
use crate::extract::{How, SiteProfile};
use crate::fetch::{FetchMode, FetchRequest, Fetched, Fetcher, Spare};
use crate::listing::Listing;
use crate::pages;
use notifio_policy::{
    CheckId, Markers, Outcome, RequestClass, Scheduler, SearchId, SiteKey, Timestamp,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A check from [`Scheduler::poll_due_into`] with its site key, URL and searches looked up once
/// (the scheduler hands out a small `Copy` check; one lookup per real fetch costs nothing).
#[derive(Debug, Clone)]
pub(super) struct Check {
    pub(super) id: CheckId,
    pub(super) site: SiteKey,
    pub(super) url: Arc<str>,
    pub(super) searches: Arc<[SearchId]>,
    pub(super) probe: bool,
    /// The requests beyond its pages its site's budget leaves it (retries, redirects).
    pub(super) spare: Option<u32>,
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
            spare: c.spare,
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
    /// Result pages read.
    pub(super) pages: u32,
    /// Where each page's listings end in `listings`.
    pub(super) page_ends: Vec<usize>,
    /// When each request after its first started (its other pages, retries, redirects).
    pub(super) sent: Vec<Timestamp>,
    /// Why page 1 was not read, when it is over a bound of its reading.
    pub(super) unreadable: Option<Unreadable>,
    /// How page 1's listings were read, when they were.
    pub(super) how: Option<How>,
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
    /// With `fetch = "app"`: the request sent instead of a GET of the search's URL.
    pub(super) app: Option<Arc<AppSearch>>,
    /// The fingerprint every search this check answers last saw, when they agree: the page is
    /// asked for conditionally, and the same bytes are not parsed again.
    pub(super) expected: Option<String>,
    /// Result pages to read at most (the most any of its searches asks for).
    pub(super) pages: u32,
    /// The site's spacing, between the starts of two pages.
    pub(super) spacing: Duration,
    /// After this long the driver is told (on `slow`) that the check is slow.
    pub(super) slow_after: Duration,
}

impl Task {
    /// Fetches and judges the pages; `None` when `cancel` stopped the first fetch.
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
            app,
            expected,
            pages,
            spacing,
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
                FetchMode::Http | FetchMode::App => None,
            },
            markers: Some(Arc::clone(&markers)),
            outgoing: None,
            spare: check.spare.map(Spare::new),
        };
        let req = match &app {
            Some(app) => pages::app_request(app, req),
            None => req,
        };
        let how = pages::Reading {
            profile: &profile,
            markers: &markers,
            has_session,
            expected: expected.as_deref(),
            pages,
            spacing,
        };
        let read = pages::read(&fetcher, req, how, cancel);
        tokio::pin!(read);
        let read = tokio::select! {
            biased;
            read = &mut read => read,
            () = tokio::time::sleep(slow_after) => {
                let _ = slow.send(check.id);
                read.await
            }
        }?;
        Some(Done {
            check,
            outcome: read.outcome,
            fetched: read.fetched,
            listings: read.listings,
            fingerprint: read.fingerprint,
            same_page: read.same_page,
            pages: read.pages,
            page_ends: read.page_ends,
            sent: read.sent,
            unreadable: read.unreadable,
            how: read.how,
        })
    }
}
