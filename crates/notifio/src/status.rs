//! The one status view behind `notifio status` and the dashboard's `/api/status` (DESIGN §8).
//! One function builds it, so the terminal and the browser can never disagree.

use serde::{Deserialize, Serialize};

/// `GET /api/status`. Times are Unix epoch milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    /// When the view was built.
    pub now: u64,
    /// When the next waiting site comes due (the registry's `soonest()`), if any.
    pub soonest: Option<u64>,
    /// Every configured search.
    pub searches: Vec<SearchStatus>,
    /// Every site with at least one search.
    pub sites: Vec<SiteStatus>,
    /// Request-level retry metrics.
    pub retry: RetryStatus,
    /// Warnings to surface (retry rate over 5%, slow p95, …).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// One search in [`StatusView`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchStatus {
    /// Stable id (database id).
    pub id: u32,
    /// The user's name for it.
    pub name: String,
    /// The page watched.
    pub url: String,
    /// Its site key.
    pub site: String,
    /// `ok | waiting | probing | session_expired | search_gone | layout_unknown`.
    pub state: String,
    /// When it will next be checked, if known.
    pub next_check_at: Option<u64>,
    /// When it was last checked.
    pub last_checked_at: Option<u64>,
    /// The last check's outcome (`ok`, `challenge`, …).
    pub last_outcome: Option<String>,
    /// The latest listings first seen by this search (newest first, a few).
    pub new_listings: Vec<NewListing>,
    /// A plain-language reason for its state ("idealista.com showed a challenge page; 3rd
    /// refusal; next try at …").
    #[serde(default)]
    pub reason: Option<String>,
}

/// A recently found listing, for the dashboard.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NewListing {
    /// Site's listing id.
    pub id: String,
    /// Title, if any.
    pub title: Option<String>,
    /// Price, if any.
    pub price: Option<f64>,
    /// Currency, if any.
    pub currency: Option<String>,
    /// Link, if any.
    pub url: Option<String>,
    /// When Notifio first saw it.
    pub first_seen: u64,
}

/// One site in [`StatusView`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteStatus {
    /// Site key.
    pub site: String,
    /// `clear | waiting | probing | session_expired`.
    pub state: String,
    /// The refusal kind, when waiting/probing.
    pub kind: Option<String>,
    /// Consecutive refusals of that kind.
    pub failures: u32,
    /// Rungs on that kind's ladder.
    pub rungs: u32,
    /// When the wait ends.
    pub next_retry_at: Option<u64>,
    /// The Retry-After the site sent with its latest refusal, in ms.
    pub retry_after_ms: Option<u64>,
    /// Whether that Retry-After lengthened the wait.
    #[serde(default)]
    pub lengthened_by_retry_after: bool,
    /// The last checks on this site, oldest first: outcome names (`ok`, `challenge`, …).
    #[serde(default)]
    pub timeline: Vec<String>,
}

/// Retry metrics in [`StatusView`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RetryStatus {
    /// Requests made (first attempts).
    pub requests: u64,
    /// Requests that needed at least one retry.
    pub retried: u64,
    /// Retry attempts (attempts beyond the first).
    pub attempts: u64,
    /// Requests that still failed after their last attempt.
    pub final_failures: u64,
    /// retried / requests over the last hour.
    pub retry_rate: f64,
}
