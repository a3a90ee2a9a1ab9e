//! `notifio check`'s answer: one [`PassResult`] per search, from the first check of it in the
//! pass, or from its site's wait when it is parked (docs/architecture.md#interfaces, `check --json`).

use super::check::Done;
use super::setup::Searches;
use crate::config::SearchConfig;
use crate::extract::How;
use crate::fetch::FetchMode;
use crate::filter::CheckedListing;
use crate::price::PriceChange;
use crate::store::Recorded;
use notifio_policy::schedule::SearchState;
use notifio_policy::{Outcome, Scheduler, SearchId, Timestamp};
use std::collections::HashMap;

/// What `check` (and a dashboard preview) reports of a search: how its check ended, or that
/// its site was not asked, waiting after a refusal. JSON names are the outcome's (`ok`,
/// `challenge`, …) or `waiting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reported {
    /// The check ran and ended so.
    Checked(Outcome),
    /// The site is waiting (or a login window has the browser): nothing was sent.
    Waiting,
}

impl Reported {
    /// The name in JSON and the table.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Checked(o) => o.as_str(),
            Self::Waiting => "waiting",
        }
    }
}

impl Default for Reported {
    fn default() -> Self {
        Self::Checked(Outcome::Ok)
    }
}

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl serde::Serialize for Reported {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The result of one search in a `check` pass.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PassResult {
    /// Search name.
    pub search: String,
    /// URL.
    pub url: String,
    /// Site key.
    pub site: String,
    /// How its check ended, or `waiting`.
    pub outcome: Reported,
    /// HTTP status.
    pub status: Option<u16>,
    /// Attempts made.
    pub attempts: u32,
    /// Listings on the page, each with whether the search's filters let it through.
    pub listings: Vec<CheckedListing>,
    /// Ids of listings seen for the first time that the filters let through.
    pub new: Vec<String>,
    /// This was the search's first good check, a silent baseline: its `new` listings are
    /// recorded, never announced.
    pub baseline: bool,
    /// Known listings on the page whose price changed since the last check that saw them.
    pub price_changes: Vec<PriceChange>,
    /// The page was the same as at the last good check (a 304, or the same bytes), so it was
    /// not read again and `listings` is empty.
    pub unchanged: bool,
    /// When the site may be tried again, if it is waiting.
    pub next_retry_at: Option<u64>,
    /// How the page was (or would be) read: `http`, `browser` or `app`.
    pub via: FetchMode,
    /// Result pages read (0 when the first was refused, or the search was not checked).
    pub pages: u32,
    /// Why the outcome is not `ok`, in a short sentence (no secrets); absent when it is,
    /// except for a redirect into a waiting site, which says where it led.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How the listings were read: `profile`, `auto` (no profile, no `listing`: read by the
    /// page's structure) or `auto_fallback` (the profile found no result list; auto mode
    /// did); absent when nothing was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<&'static str>,
    /// Where auto mode found the listings: a CSS selector to pin in `listing`, or the
    /// embedded data it read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structure: Option<String>,
}

/// The pass so far: the answer for each search that has one.
#[derive(Debug, Default)]
pub(super) struct Pass {
    results: HashMap<SearchId, PassResult>,
}

impl Pass {
    /// Whether every one of `searches` has its answer.
    pub(super) fn has_all(&self, searches: usize) -> bool {
        self.results.len() >= searches
    }

    /// The answers, in config order.
    pub(super) fn into_results(self) -> Vec<PassResult> {
        let mut order: Vec<_> = self.results.into_iter().collect();
        order.sort_by_key(|(id, _)| id.0);
        order.into_iter().map(|(_, r)| r).collect()
    }

    /// A finished check answers each of its searches: the first answer in a pass is the one
    /// reported (a short interval may re-check).
    pub(super) fn checked(
        &mut self,
        done: &Done,
        recorded: &Recorded,
        searches: &Searches,
        scheduler: &Scheduler,
    ) {
        let Done {
            check,
            outcome,
            fetched,
            listings,
            same_page,
            ..
        } = done;
        let entry = scheduler.registry().entry(&check.site);
        for id in check.searches.iter() {
            let Some(info) = searches.get(id) else {
                continue;
            };
            self.results.entry(*id).or_insert_with(|| PassResult {
                search: info.name.clone(),
                url: crate::redact::url_password(&check.url).into_owned(),
                site: check.site.to_string(),
                outcome: Reported::Checked(*outcome),
                status: fetched.status(),
                attempts: fetched.attempts,
                listings: info.rules.checked(listings.as_deref().unwrap_or_default()),
                new: recorded
                    .new
                    .iter()
                    .filter(|l| info.rules.filters.matches(l))
                    .map(|l| l.id.clone())
                    .collect(),
                baseline: recorded.baseline && !info.notify_existing,
                price_changes: recorded.changes.clone(),
                unchanged: *same_page || *outcome == Outcome::Unchanged,
                next_retry_at: entry.map(|e| e.next_retry_at.as_millis()),
                via: fetched.via,
                pages: done.pages,
                reason: crate::reason::of_check(
                    *outcome,
                    fetched,
                    &info.markers,
                    done.unreadable.as_ref(),
                ),
                read: done.how.as_ref().map(How::as_str),
                structure: done
                    .how
                    .as_ref()
                    .and_then(How::structure)
                    .map(ToString::to_string),
            });
        }
    }

    /// Answers each search parked on a waiting or session-expired site and not being checked
    /// (`running` says which are): it will not be checked in this pass.
    pub(super) fn parked(
        &mut self,
        searches: &Searches,
        configured: &[SearchConfig],
        scheduler: &Scheduler,
        running: impl Fn(&SearchId) -> bool,
        now: Timestamp,
    ) {
        for (id, info) in searches.iter() {
            if self.results.contains_key(id) {
                continue;
            }
            if let Some(room) = scheduler.budget_wait(*id) {
                let budget = scheduler
                    .budget(&info.site)
                    .map(super::budget::budget_text)
                    .unwrap_or_default();
                let reason = format!(
                    "waiting for the site's request budget ({budget}, shared with any other \
                     notifio on this state) until {}, in {}",
                    notifio_policy::format_time_of_day(room),
                    notifio_policy::time::format_countdown(room.saturating_since(now))
                );
                let url = url_of(configured, &info.name);
                self.results.insert(
                    *id,
                    waiting(info, url, Reported::Waiting, Some(room), reason),
                );
                continue;
            }
            let Some((state, next)) = scheduler.search_state(*id) else {
                continue;
            };
            if !matches!(state, SearchState::Waiting | SearchState::SessionExpired) || running(id) {
                continue;
            }
            // A wait that is over (or ends within the scheduler's tick) is not a reason to
            // skip the search: its probe goes out at the next poll.
            if state == SearchState::Waiting
                && next.is_none_or(|t| t.saturating_since(now) <= notifio_policy::TICK)
            {
                continue;
            }
            let url = url_of(configured, &info.name);
            let reason = match scheduler.registry().entry(&info.site) {
                Some(entry) if state == SearchState::Waiting => {
                    crate::reason::of_waiting(entry, now)
                }
                _ if info.fetch == FetchMode::Browser => format!(
                    "the site's session expired: run `notifio login {}`",
                    info.site
                ),
                _ => "the site's session expired: export fresh cookies".into(),
            };
            let outcome = if state == SearchState::Waiting {
                Reported::Waiting
            } else {
                Reported::Checked(Outcome::SessionExpired)
            };
            self.results
                .insert(*id, waiting(info, url, outcome, next, reason));
        }
    }
}

/// The configured URL of search `name`, without a password.
fn url_of(configured: &[SearchConfig], name: &str) -> String {
    configured
        .iter()
        .find(|s| s.name == name)
        .map(|s| crate::redact::url_password(&s.url).into_owned())
        .unwrap_or_default()
}

/// The answer for a search the pass did not check, and why.
fn waiting(
    info: &super::setup::SearchInfo,
    url: String,
    outcome: Reported,
    next: Option<Timestamp>,
    reason: String,
) -> PassResult {
    PassResult {
        search: info.name.clone(),
        url,
        site: info.site.to_string(),
        outcome,
        status: None,
        attempts: 0,
        listings: Vec::new(),
        new: Vec::new(),
        baseline: false,
        price_changes: Vec::new(),
        unchanged: false,
        next_retry_at: next.map(Timestamp::as_millis),
        via: info.fetch,
        pages: 0,
        reason: Some(reason),
        read: None,
        structure: None,
    }
}
