//! A per-site retry budget, beyond request-level retry
//! (docs/policy.md#request-level-retry-and-why-the-probe-never-retries): when a site keeps failing,
//! its retries stop and failures go straight to the error ladder, so a sick site never sees 3× its
//! normal load.
//!
//! Shaped after the AWS SDK's standard-mode retry quota and Google SRE's "retries ≤ 10% of
//! requests": a bucket of 500 tokens, a retry costs 5, a first-try success returns 1, a
//! successful retry returns its cost. At a 10% fault rate a site spends ~5.5 tokens per 100
//! requests net of refunds and keeps retrying everything; only a sustained failure rate above
//! ~17% drains the bucket.

use serde::{Deserialize, Serialize};

/// Token bucket of retries for one site.
///
/// # Default
/// capacity 500, retry cost 5, first-try success refund 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryBudget {
    tokens: u32,
    capacity: u32,
    retry_cost: u32,
    success_refund: u32,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::new(500, 5, 1)
    }
}

impl RetryBudget {
    /// A full bucket.
    #[must_use]
    pub fn new(capacity: u32, retry_cost: u32, success_refund: u32) -> Self {
        Self {
            tokens: capacity,
            capacity,
            retry_cost,
            success_refund,
        }
    }

    /// Takes the cost of one retry if the bucket has it. `false`: do not retry.
    pub fn try_spend_retry(&mut self) -> bool {
        if self.tokens >= self.retry_cost {
            self.tokens -= self.retry_cost;
            true
        } else {
            false
        }
    }

    /// A request succeeded; `retried` says whether it needed retries.
    pub fn on_success(&mut self, retried: bool) {
        let refund = if retried {
            self.retry_cost
        } else {
            self.success_refund
        };
        self.tokens = (self.tokens + refund).min(self.capacity);
    }

    /// Tokens left.
    #[must_use]
    pub fn tokens(&self) -> u32 {
        self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ten_percent_fault_rate_is_always_retried() {
        let mut b = RetryBudget::default();
        for i in 0..100_000u32 {
            if i % 10 == 0 {
                assert!(b.try_spend_retry(), "refused a retry at request {i}");
                b.on_success(true);
            } else {
                b.on_success(false);
            }
        }
        assert_eq!(b.tokens(), 500);
    }

    #[test]
    fn a_dead_site_stops_being_retried() {
        let mut b = RetryBudget::default();
        let granted = (0..1000).filter(|_| b.try_spend_retry()).count();
        assert_eq!(granted, 100, "500 tokens / 5 per retry");
        assert!(!b.try_spend_retry());
        b.on_success(false);
        assert!(!b.try_spend_retry(), "one success does not buy a retry");
    }
}
