//! Request-level retry (docs/policy.md#request-level-retry-and-why-the-probe-never-retries):
//! exponential backoff with ±25% jitter, for 5xx and timeouts/connection failures only.
//!
//! A 4xx is the site telling us something (it is the registry's business, not a blip), a
//! 2xx/3xx succeeded, and a page we cannot parse will not parse better a moment later — none of
//! these are retried. Each request class has its own policy: `probe` never retries, because a
//! probe must reflect the site's real state, like a health check.
//!
//! A 5xx that is really a refusal is not retried either: an anti-bot page served with 503
//! (challenge markers in its headers or body) is the site saying "not you", and a 5xx whose
//! `Retry-After` asks for longer than the next sleep is the site asking for that wait, which
//! the registry's ladder then honours ([`RetryPolicy::decide`]).
//!
//! With 3 attempts there are exactly two sleeps, 100ms then 300ms (±25%). The retry policy's
//! "~1.3s" counts a 900ms sleep that a 3-attempt budget never takes; we document that and do not
//! implement it. The decision is pure ([`RetryPolicy::decide`]); sleeping is the shell's job.

use crate::classify::{Markers, ResponseFacts, TransportFailure, challenge_marker};
use crate::jitter::Jitter;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// What a request is for; each class has its own [`RetryPolicy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestClass {
    /// A search result page. Retry on.
    Search,
    /// The single request sent when a site's wait expires. Retry off: it must reflect the
    /// site's real state.
    Probe,
    /// A listing's detail page. Retry on.
    Detail,
    /// Delivering a notification (webhook, SMTP). Retry on.
    Notify,
}

impl RequestClass {
    /// All classes, in print order.
    pub const ALL: [Self; 4] = [Self::Search, Self::Probe, Self::Detail, Self::Notify];

    /// The name used in config (`[retry.search]`) and JSON.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Search => "search",
            Self::Probe => "probe",
            Self::Detail => "detail",
            Self::Notify => "notify",
        }
    }
}

impl fmt::Display for RequestClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one attempt ended, as far as retrying is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    /// The server answered with this status.
    Status(u16),
    /// No answer within the per-attempt timeout (or the body stalled).
    Timeout,
    /// Connect, reset, DNS or TLS failure.
    Connect,
    /// Our own validation failed (body over the cap, too many redirects, unparsable page).
    Invalid,
    /// The server answered with this status, but the answer is an anti-bot page (challenge
    /// markers): a refusal, never retried, even at 5xx.
    Refused(u16),
}

impl AttemptResult {
    /// How a response (or its absence) reads to the retry policy. A status that would be
    /// retried (5xx) is looked at for challenge markers first, so a challenge served with 503
    /// is [`Self::Refused`]; other statuses are never retried, so their bodies are not read.
    #[must_use]
    pub fn of_response(facts: &ResponseFacts<'_>, markers: &Markers) -> Self {
        match (facts.failure, facts.status) {
            (Some(TransportFailure::Timeout), _) => Self::Timeout,
            (Some(TransportFailure::Connect), _) => Self::Connect,
            (Some(_), _) | (None, None) => Self::Invalid,
            (None, Some(s)) if (500..=599).contains(&s) => {
                if challenge_marker(facts, markers).is_some() {
                    Self::Refused(s)
                } else {
                    Self::Status(s)
                }
            }
            (None, Some(s)) => Self::Status(s),
        }
    }
}

/// Why the loop stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// The attempt succeeded or failed in a way that retrying cannot change.
    NotRetryable,
    /// The attempt budget is spent.
    AttemptsExhausted,
    /// The next sleep would end past the overall deadline.
    DeadlineWouldPass,
    /// The response's `Retry-After` asks for a longer wait than the next sleep: the site is
    /// asking to be left alone, so the failure goes to the registry with that wait.
    RetryAfterLonger,
}

/// The pure decision after an attempt (TrueLayer retry-policies' shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Sleep this long, then make the next attempt.
    Retry {
        /// The jittered delay.
        after: Duration,
    },
    /// Stop here and report the last result.
    DoNotRetry(GiveUp),
}

/// A bad retry override.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RetryConfigError {
    /// attempts counts the first try, so it is at least 1.
    #[error("attempts must be at least 1 (it counts the first try); got 0")]
    ZeroAttempts,
    /// A multiplier below 1 would shrink the delays.
    #[error("multiplier must be a number ≥ 1; got {0}")]
    BadMultiplier(f64),
    /// Jitter is a fraction.
    #[error("jitter must be a fraction in [0, 1), e.g. 0.25 for ±25%; got {0}")]
    BadJitter(f64),
    /// A zero timeout or deadline can never succeed.
    #[error("{0} must be positive")]
    ZeroTime(&'static str),
}

/// One request class's retry policy.
///
/// # Default (for `search`, `detail` and `notify`)
///
/// As in docs/policy.md#request-level-retry-and-why-the-probe-never-retries:
/// - attempts: 3 (1 initial + 2 retries)
/// - initial: 100ms, multiplier: 3 → sleeps 100ms, 300ms
/// - jitter: 0.25 (±25%)
/// - timeout: 10s per attempt, deadline: 20s for all attempts together
/// - retry_header: true (`X-Retry-Count: n` on the n-th retry)
///
/// `probe` is the same with attempts = 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    attempts: u32,
    initial: Duration,
    multiplier: f64,
    jitter: f64,
    timeout: Duration,
    deadline: Duration,
    retry_header: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 3,
            initial: Duration::from_millis(100),
            multiplier: 3.0,
            jitter: 0.25,
            timeout: Duration::from_secs(10),
            deadline: Duration::from_secs(20),
            retry_header: true,
        }
    }
}

impl RetryPolicy {
    /// A validated policy.
    ///
    /// # Errors
    /// Zero attempts, multiplier < 1 or NaN, jitter outside `[0, 1)`, zero timeout or deadline.
    pub fn new(
        attempts: u32,
        initial: Duration,
        multiplier: f64,
        jitter: f64,
        timeout: Duration,
        deadline: Duration,
        retry_header: bool,
    ) -> Result<Self, RetryConfigError> {
        if attempts == 0 {
            return Err(RetryConfigError::ZeroAttempts);
        }
        if !(multiplier >= 1.0 && multiplier.is_finite()) {
            return Err(RetryConfigError::BadMultiplier(multiplier));
        }
        if !(0.0..1.0).contains(&jitter) {
            return Err(RetryConfigError::BadJitter(jitter));
        }
        if timeout.is_zero() {
            return Err(RetryConfigError::ZeroTime("timeout"));
        }
        if deadline.is_zero() {
            return Err(RetryConfigError::ZeroTime("deadline"));
        }
        Ok(Self {
            attempts,
            initial,
            multiplier,
            jitter,
            timeout,
            deadline,
            retry_header,
        })
    }

    /// The default policy for a class (probe: one attempt).
    #[must_use]
    pub fn default_for(class: RequestClass) -> Self {
        match class {
            RequestClass::Probe => Self {
                attempts: 1,
                ..Self::default()
            },
            _ => Self::default(),
        }
    }

    /// Total attempts including the first.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
    /// The first sleep before jitter.
    #[must_use]
    pub fn initial(&self) -> Duration {
        self.initial
    }
    /// Growth factor between sleeps.
    #[must_use]
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }
    /// Jitter fraction (0.25 = ±25%).
    #[must_use]
    pub fn jitter(&self) -> f64 {
        self.jitter
    }
    /// Per-attempt timeout.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// Deadline across all attempts and sleeps.
    #[must_use]
    pub fn deadline(&self) -> Duration {
        self.deadline
    }
    /// Whether retried attempts carry `X-Retry-Count`.
    #[must_use]
    pub fn retry_header(&self) -> bool {
        self.retry_header
    }

    /// The un-jittered sleeps this policy can take: `[100ms, 300ms]` by default. There are
    /// `attempts - 1` of them.
    #[must_use]
    pub fn nominal_delays(&self) -> Vec<Duration> {
        (1..self.attempts).map(|n| self.nominal_delay(n)).collect()
    }

    fn nominal_delay(&self, retry: u32) -> Duration {
        let ms =
            self.initial.as_millis() as f64 * self.multiplier.powi(retry.saturating_sub(1) as i32);
        Duration::from_millis(ms.min(u64::MAX as f64 / 2.0).round() as u64)
    }

    /// The jittered sleep before retry number `retry` (1 = the first retry, i.e. the second
    /// attempt), or `None` when the attempt budget has no such retry. `random` in `[0, 1)`;
    /// 0.5 gives the nominal delay.
    #[must_use]
    pub fn delay_before(&self, retry: u32, random: f64) -> Option<Duration> {
        if retry == 0 || retry >= self.attempts {
            return None;
        }
        Some(Jitter::new(self.jitter).apply(self.nominal_delay(retry), random))
    }

    /// Whether this result is worth another attempt: 5xx, timeouts and connection failures
    /// only. Never any 4xx, 2xx/3xx, or our own validation failures.
    #[must_use]
    pub fn should_retry(result: &AttemptResult) -> bool {
        match result {
            AttemptResult::Status(s) => (500..=599).contains(s),
            AttemptResult::Timeout | AttemptResult::Connect => true,
            AttemptResult::Invalid | AttemptResult::Refused(_) => false,
        }
    }

    /// After attempt number `attempts_made` (1-based) ended with `result` and the response's parsed
    /// `Retry-After` (if any), `elapsed` since the first attempt started: retry after a jittered
    /// sleep, or stop. Gives up at once when the sleep would end past the deadline
    /// (google-cloud-rust's retry loop does the same), and when `Retry-After` asks for longer than
    /// the sleep: a quick retry would knock before the time the site gave (our reading of the retry
    /// rules, docs/policy.md#request-level-retry-and-why-the-probe-never-retries); the registry
    /// then waits the longer of its rung and that time.
    #[must_use]
    pub fn decide(
        &self,
        attempts_made: u32,
        result: &AttemptResult,
        retry_after: Option<Duration>,
        elapsed: Duration,
        random: f64,
    ) -> RetryDecision {
        if !Self::should_retry(result) {
            return RetryDecision::DoNotRetry(GiveUp::NotRetryable);
        }
        let Some(after) = self.delay_before(attempts_made, random) else {
            return RetryDecision::DoNotRetry(GiveUp::AttemptsExhausted);
        };
        if retry_after.is_some_and(|wait| wait > after) {
            return RetryDecision::DoNotRetry(GiveUp::RetryAfterLonger);
        }
        if elapsed + after >= self.deadline {
            return RetryDecision::DoNotRetry(GiveUp::DeadlineWouldPass);
        }
        RetryDecision::Retry { after }
    }

    /// The per-attempt timeout for an attempt starting `elapsed` after the first: the policy's
    /// timeout or the time left before the deadline, whichever is shorter.
    #[must_use]
    pub fn attempt_timeout(&self, elapsed: Duration) -> Duration {
        self.timeout.min(self.deadline.saturating_sub(elapsed))
    }
}

/// The four classes' policies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicies {
    /// Search result pages.
    pub search: RetryPolicy,
    /// The single probe after a wait (one attempt).
    pub probe: RetryPolicy,
    /// Listing detail pages.
    pub detail: RetryPolicy,
    /// Notification delivery.
    pub notify: RetryPolicy,
}

impl Default for RetryPolicies {
    fn default() -> Self {
        Self {
            search: RetryPolicy::default_for(RequestClass::Search),
            probe: RetryPolicy::default_for(RequestClass::Probe),
            detail: RetryPolicy::default_for(RequestClass::Detail),
            notify: RetryPolicy::default_for(RequestClass::Notify),
        }
    }
}

impl RetryPolicies {
    /// The policy for a class.
    #[must_use]
    pub fn get(&self, class: RequestClass) -> &RetryPolicy {
        match class {
            RequestClass::Search => &self.search,
            RequestClass::Probe => &self.probe,
            RequestClass::Detail => &self.detail,
            RequestClass::Notify => &self.notify,
        }
    }

    /// Mutable access, for config overrides.
    pub fn get_mut(&mut self, class: RequestClass) -> &mut RetryPolicy {
        match class {
            RequestClass::Search => &mut self.search,
            RequestClass::Probe => &mut self.probe,
            RequestClass::Detail => &mut self.detail,
            RequestClass::Notify => &mut self.notify,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::tests::facts;

    #[test]
    fn a_challenge_at_5xx_is_a_refusal_and_is_not_retried() {
        let m = Markers::generic();
        let page = b"<html><head><title>Just a moment...</title></head></html>";
        let plain = b"<html><body>Service Unavailable</body></html>";
        let cf = [("cf-mitigated".to_owned(), "challenge".to_owned())];
        assert_eq!(
            AttemptResult::of_response(&facts(503, &[], page), &m),
            AttemptResult::Refused(503)
        );
        assert_eq!(
            AttemptResult::of_response(&facts(503, &cf, plain), &m),
            AttemptResult::Refused(503)
        );
        assert_eq!(
            AttemptResult::of_response(&facts(503, &[], plain), &m),
            AttemptResult::Status(503)
        );
        // A 403 challenge is not retried anyway; its body is not read for that.
        assert_eq!(
            AttemptResult::of_response(&facts(403, &[], page), &m),
            AttemptResult::Status(403)
        );
        let p = RetryPolicy::default();
        assert_eq!(
            p.decide(1, &AttemptResult::Refused(503), None, Duration::ZERO, 0.5),
            RetryDecision::DoNotRetry(GiveUp::NotRetryable)
        );
        assert_eq!(
            p.decide(1, &AttemptResult::Status(503), None, Duration::ZERO, 0.5),
            RetryDecision::Retry {
                after: Duration::from_millis(100)
            }
        );
    }

    #[test]
    fn a_retry_after_longer_than_the_next_sleep_stops_the_quick_retries() {
        let p = RetryPolicy::default();
        let s503 = AttemptResult::Status(503);
        let secs = Duration::from_secs;
        // 1800 s asked for, 100 ms planned: no retry; the registry gets the 1800 s.
        assert_eq!(
            p.decide(1, &s503, Some(secs(1800)), Duration::ZERO, 0.5),
            RetryDecision::DoNotRetry(GiveUp::RetryAfterLonger)
        );
        assert_eq!(
            p.decide(
                2,
                &s503,
                Some(Duration::from_millis(301)),
                Duration::ZERO,
                0.5
            ),
            RetryDecision::DoNotRetry(GiveUp::RetryAfterLonger)
        );
        // A Retry-After the sleep already covers (or 0, a past date) changes nothing.
        for short in [Duration::ZERO, Duration::from_millis(100)] {
            assert_eq!(
                p.decide(1, &s503, Some(short), Duration::ZERO, 0.5),
                RetryDecision::Retry {
                    after: Duration::from_millis(100)
                }
            );
        }
        // Not retryable stays not retryable, whatever the header says.
        assert_eq!(
            p.decide(
                1,
                &AttemptResult::Status(429),
                Some(secs(1)),
                Duration::ZERO,
                0.5
            ),
            RetryDecision::DoNotRetry(GiveUp::NotRetryable)
        );
    }
}
