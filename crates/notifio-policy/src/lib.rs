//! Notifio's policy: every decision about when to knock on a site, and nothing else.
//!
//! This crate is deterministic and performs no I/O: no networking, no database, no timestamps
//! from the OS and no OS randomness. Time comes in as a `now` parameter ([`Timestamp`]) and
//! randomness as a sample in `[0, 1)` or a seed, so every rule of the politeness policy
//! (docs/policy.md: the per-site backoff registry and request-level retry) can be checked by running it with a fixed
//! clock and a fixed random, rather than by reasoning about it. The application crate drives it
//! (quinn-proto / quinn are the model: the core says *what* to do, the shell does it).
//!
//! The purity rule is enforced twice: this crate's `Cargo.toml` depends on no async runtime,
//! HTTP client, database or clock crate, and its `clippy.toml` disallows `Instant::now`,
//! `SystemTime::now` and thread-local RNGs. The compiler also refuses code it cannot check
//! (a `forbid` lint in `Cargo.toml`): every rule in this crate is meant to be read, and none
//! needs more than plain safe Rust.
#![warn(missing_docs)]

pub mod allocate;
pub mod backoff;
pub mod budget;
pub mod classify;
pub mod jitter;
pub mod plan;
pub mod rates;
pub mod registry;
pub mod retry;
pub mod retry_after;
pub mod schedule;
pub mod site;
pub mod time;
mod timers;

pub use allocate::{Demand, RequestBudget, Share, allocate, price};
pub use backoff::{BackoffConfigError, BackoffPolicy, Ladders, MAX_WAIT, RefusalKind};
pub use budget::RetryBudget;
pub use classify::{Markers, Outcome, ResponseFacts, TransportFailure, classify};
pub use plan::{Planned, plan_site, site_price};
pub use rates::{ActiveHours, ArrivalRates, LocalOffset, SiteRhythm};
pub use registry::{Admission, Entry, Registry};
pub use retry::{
    AttemptResult, RequestClass, RetryConfigError, RetryDecision, RetryPolicies, RetryPolicy,
};
pub use retry_after::parse_retry_after;
pub use schedule::{
    Check, CheckId, MAX_URLS_PER_SITE, Reaction, Scheduler, SchedulerConfig, SearchId, SearchSpec,
    SearchState, SiteIndex, SiteState, TICK,
};
pub use site::{SiteKey, SiteKeyError};
pub use time::{Timestamp, format_duration, format_time_of_day};
