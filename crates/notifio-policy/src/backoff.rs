//! The four ladders: how long to leave a site alone after it refused us
//! (docs/policy.md#four-ladders).
//!
//! One ladder per *kind* of refusal rather than one pessimistic ladder for everything. The last
//! rung is the ceiling, so a ladder is a list and not a formula. Jitter (±15% by default) matters
//! because several searches usually share a cycle: without it, every site blocked in the same
//! cycle comes back in the same instant, which is the burst that got them blocked in the first
//! place. A site's `Retry-After` can lengthen a wait, never shorten it, and nothing waits longer
//! than [`MAX_WAIT`]: a header is remote input, and an hour of silence is already the worst thing
//! we are prepared to do to a user.

use crate::jitter::Jitter;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Never wait longer than this, whatever a site's Retry-After claims.
pub const MAX_WAIT: Duration = Duration::from_secs(60 * 60);

/// Why a site refused us; each kind has its own ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// An anti-bot page (Cloudflare, DataDome, Geetest, …): the site suspects automation.
    /// Starts short (1m): challenges often clear quickly, but climbs to 30m if they persist.
    Challenge,
    /// HTTP 429: the site says we asked too often. 2m → 30m; Retry-After may lengthen it.
    RateLimited,
    /// 401/403/451 without challenge markers: the site does not want us at all right now.
    /// The longest ladder (5m → 1h): knocking again soon will not change its mind.
    Denied,
    /// 5xx or a network failure after request-level retries: probably not about us, so it is
    /// short (30s → 5m) and a change from a refusal kind starts it at rung 1.
    Error,
}

impl RefusalKind {
    /// All kinds, in the order they are printed.
    pub const ALL: [Self; 4] = [
        Self::Challenge,
        Self::RateLimited,
        Self::Denied,
        Self::Error,
    ];

    /// The name used in config, JSON and the database.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Challenge => "challenge",
            Self::RateLimited => "rate_limited",
            Self::Denied => "denied",
            Self::Error => "error",
        }
    }

    /// Parses [`Self::as_str`] back.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// What a person should read: "showed a challenge page", "rate-limited us (429)", …
    #[must_use]
    pub const fn describe(self) -> &'static str {
        match self {
            Self::Challenge => "showed a challenge page",
            Self::RateLimited => "rate-limited us (429)",
            Self::Denied => "denied access (401/403)",
            Self::Error => "failed (5xx or network error)",
        }
    }
}

impl fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// The four ladders. Defaults are those of docs/policy.md#four-ladders.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ladders {
    /// Anti-bot pages. Default `1m → 3m → 8m → 15m → 30m`.
    pub challenge: Vec<Duration>,
    /// 429s. Default `2m → 5m → 15m → 30m`.
    pub rate_limited: Vec<Duration>,
    /// 401/403/451. Default `5m → 15m → 30m → 1h`.
    pub denied: Vec<Duration>,
    /// 5xx and network failures. Default `30s → 2m → 5m`.
    pub error: Vec<Duration>,
}

fn mins(m: &[u64]) -> Vec<Duration> {
    m.iter().map(|m| Duration::from_secs(m * 60)).collect()
}

impl Default for Ladders {
    fn default() -> Self {
        Self {
            challenge: mins(&[1, 3, 8, 15, 30]),
            rate_limited: mins(&[2, 5, 15, 30]),
            denied: mins(&[5, 15, 30, 60]),
            error: vec![
                Duration::from_secs(30),
                Duration::from_secs(120),
                Duration::from_secs(300),
            ],
        }
    }
}

impl Ladders {
    /// The ladder for one kind.
    #[must_use]
    pub fn get(&self, kind: RefusalKind) -> &[Duration] {
        match kind {
            RefusalKind::Challenge => &self.challenge,
            RefusalKind::RateLimited => &self.rate_limited,
            RefusalKind::Denied => &self.denied,
            RefusalKind::Error => &self.error,
        }
    }

    fn get_mut(&mut self, kind: RefusalKind) -> &mut Vec<Duration> {
        match kind {
            RefusalKind::Challenge => &mut self.challenge,
            RefusalKind::RateLimited => &mut self.rate_limited,
            RefusalKind::Denied => &mut self.denied,
            RefusalKind::Error => &mut self.error,
        }
    }

    /// Replaces one kind's ladder (validated when the policy is built).
    #[must_use]
    pub fn with(mut self, kind: RefusalKind, ladder: Vec<Duration>) -> Self {
        *self.get_mut(kind) = ladder;
        self
    }
}

/// A bad backoff override.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BackoffConfigError {
    /// A ladder needs at least one rung.
    #[error("the {kind} ladder is empty; give at least one wait, e.g. [\"1m\"]")]
    EmptyLadder {
        /// Which ladder.
        kind: RefusalKind,
    },
    /// A zero wait would knock again at once.
    #[error("the {kind} ladder has a zero wait at rung {rung}; every wait must be positive")]
    ZeroRung {
        /// Which ladder.
        kind: RefusalKind,
        /// 1-based rung.
        rung: usize,
    },
    /// Rungs must not get shorter: the last rung is the ceiling.
    #[error("the {kind} ladder must not decrease: rung {rung} ({this}) is shorter than rung {prev_rung} ({prev})", prev_rung = rung - 1)]
    NotIncreasing {
        /// Which ladder.
        kind: RefusalKind,
        /// 1-based rung that is shorter than the one before.
        rung: usize,
        /// That rung, formatted.
        this: String,
        /// The one before, formatted.
        prev: String,
    },
    /// Jitter is a fraction: 0.15 means ±15%.
    #[error("jitter must be a fraction in [0, 1), e.g. 0.15 for ±15%; got {0}")]
    BadJitter(f64),
    /// max_wait must be positive.
    #[error("max_wait must be positive")]
    ZeroMaxWait,
}

/// Ladders, jitter and the ceiling, validated. `Default` is the documented policy
/// (docs/policy.md#four-ladders, docs/policy.md#the-formula).
///
/// # Default
/// - ladders: see [`Ladders::default`]
/// - jitter: 0.15 (±15%)
/// - max_wait: [`MAX_WAIT`] (1h)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackoffPolicy {
    ladders: Ladders,
    jitter: f64,
    max_wait: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self {
            ladders: Ladders::default(),
            jitter: 0.15,
            max_wait: MAX_WAIT,
        }
    }
}

impl BackoffPolicy {
    /// Builds a policy from overrides, rejecting what would make no sense.
    ///
    /// # Errors
    /// Empty ladder, a zero rung, a decreasing ladder, jitter outside `[0, 1)` (or NaN), zero
    /// `max_wait`.
    pub fn new(
        ladders: Ladders,
        jitter: f64,
        max_wait: Duration,
    ) -> Result<Self, BackoffConfigError> {
        for kind in RefusalKind::ALL {
            let ladder = ladders.get(kind);
            if ladder.is_empty() {
                return Err(BackoffConfigError::EmptyLadder { kind });
            }
            for (i, step) in ladder.iter().enumerate() {
                if step.is_zero() {
                    return Err(BackoffConfigError::ZeroRung { kind, rung: i + 1 });
                }
                if i > 0 && *step < ladder[i - 1] {
                    return Err(BackoffConfigError::NotIncreasing {
                        kind,
                        rung: i + 1,
                        this: crate::format_duration(*step),
                        prev: crate::format_duration(ladder[i - 1]),
                    });
                }
            }
        }
        if !(0.0..1.0).contains(&jitter) {
            return Err(BackoffConfigError::BadJitter(jitter));
        }
        if max_wait.is_zero() {
            return Err(BackoffConfigError::ZeroMaxWait);
        }
        Ok(Self {
            ladders,
            jitter,
            max_wait,
        })
    }

    /// The ladders in force.
    #[must_use]
    pub fn ladders(&self) -> &Ladders {
        &self.ladders
    }

    /// The jitter fraction (0.15 = ±15%).
    #[must_use]
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The ceiling on any wait.
    #[must_use]
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// How long to wait after the `failures`-th consecutive refusal of `kind`
    /// (docs/policy.md#the-formula): the rung for `failures` (the last rung once past the end),
    /// jittered by `random` in `[0, 1)` (0.5 returns the rung exactly), lengthened by `retry_after`
    /// if the site asked for longer, and capped at `max_wait`.
    #[must_use]
    pub fn delay_for(
        &self,
        kind: RefusalKind,
        failures: u32,
        retry_after: Option<Duration>,
        random: f64,
    ) -> Duration {
        let ladder = self.ladders.get(kind);
        let rung = (failures.max(1) as usize - 1).min(ladder.len() - 1);
        // Half up, as JS Math.round does for positive values (docs/policy.md#the-formula).
        Jitter::new(self.jitter)
            .apply(ladder[rung], random)
            .max(retry_after.unwrap_or(Duration::ZERO))
            .min(self.max_wait)
    }

    /// The number of rungs on `kind`'s ladder.
    #[must_use]
    pub fn rungs(&self, kind: RefusalKind) -> usize {
        self.ladders.get(kind).len()
    }

    /// A ladder as people read it: `1m → 3m → 8m → 15m → 30m`.
    #[must_use]
    pub fn describe_ladder(&self, kind: RefusalKind) -> String {
        describe_steps(self.ladders.get(kind))
    }
}

/// Durations joined as `1m → 3m → 8m`.
#[must_use]
pub fn describe_steps(steps: &[Duration]) -> String {
    steps
        .iter()
        .map(|d| crate::format_duration(*d))
        .collect::<Vec<_>>()
        .join(" → ")
}
