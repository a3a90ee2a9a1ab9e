//! The request-level retry loop
//! (docs/policy.md#request-level-retry-and-why-the-probe-never-retries): attempts, cancellable
//! sleeps, deadline.
//!
//! Hand-written because no crate has all of the retry policy's pieces at once (symmetric ±25%
//! jitter, 5xx/timeouts only, a per-attempt timeout that shrinks to the time left before one
//! overall deadline, a per-attempt header, per-class policies, a per-site budget, metrics hooks).
//! Its shape follows google-cloud-rust's `src/gax/src/retry_loop_internal.rs`: each attempt gets
//! `min(attempt timeout, time left)`, and the loop gives up at once when the next sleep would end
//! past the deadline. Every *decision* is `notifio_policy::RetryPolicy::decide`; this file only
//! sleeps and counts. Sleeps race the cancellation token inside `select!`, so cancelling drops the
//! timer with the future: no task or timer outlives the call.

use notifio_policy::retry::GiveUp;
use notifio_policy::{AttemptResult, RetryDecision, RetryPolicy};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How a retry loop ended.
#[derive(Debug)]
pub(crate) struct LoopOutcome<T> {
    /// The last attempt's result (`None` only when cancelled before any attempt ended).
    pub(crate) result: Option<AttemptResult>,
    /// The last attempt's payload; `None` when it timed out (or was cancelled).
    pub(crate) payload: Option<T>,
    /// Attempts started, including the first.
    pub(crate) attempts: u32,
    /// The token fired; the loop returned at once.
    pub(crate) cancelled: bool,
    /// Why it stopped retrying, if it did not succeed first.
    pub(crate) give_up: Option<GiveUp>,
    /// A retry was due but the site's budget was spent.
    pub(crate) budget_denied: bool,
    /// The sleeps actually started (jittered).
    pub(crate) sleeps: Vec<Duration>,
    /// Per-attempt timeouts used.
    pub(crate) timeouts: Vec<Duration>,
}

/// Runs `attempt(n, timeout)` (n = retries so far: 0 on the first attempt; `timeout` = the
/// time this attempt gets, which an attempt that can return something partial uses to stop
/// in time) under `policy`. An attempt yields its result, its response's parsed `Retry-After`
/// (a longer one than the next sleep stops the retries) and its payload.
///
/// `random` supplies jitter samples in `[0, 1)`; `spend_retry` asks the site's budget for one
/// retry. The attempt future is wrapped in the per-attempt timeout, so a stalled body is cut
/// off too; a timed-out attempt has no payload.
pub(crate) async fn run<T, F, Fut>(
    policy: &RetryPolicy,
    cancel: &CancellationToken,
    mut random: impl FnMut() -> f64,
    mut spend_retry: impl FnMut() -> bool,
    mut attempt: F,
) -> LoopOutcome<T>
where
    F: FnMut(u32, Duration) -> Fut,
    Fut: Future<Output = (AttemptResult, Option<Duration>, T)>,
{
    let start = Instant::now();
    let mut out = LoopOutcome {
        result: None,
        payload: None,
        attempts: 0,
        cancelled: false,
        give_up: None,
        budget_denied: false,
        sleeps: Vec::new(),
        timeouts: Vec::new(),
    };
    loop {
        let timeout = policy.attempt_timeout(start.elapsed());
        if timeout.is_zero() {
            // Only reachable if a sleep overran; decide() never plans past the deadline.
            out.give_up = Some(GiveUp::DeadlineWouldPass);
            return out;
        }
        let retry_n = out.attempts;
        out.attempts += 1;
        out.timeouts.push(timeout);
        let fut = tokio::time::timeout(timeout, attempt(retry_n, timeout));
        let (result, retry_after, payload) = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                out.cancelled = true;
                return out;
            }
            r = fut => match r {
                Ok((result, retry_after, payload)) => (result, retry_after, Some(payload)),
                Err(_elapsed) => (AttemptResult::Timeout, None, None),
            },
        };
        out.result = Some(result);
        out.payload = payload;
        match policy.decide(
            out.attempts,
            &result,
            retry_after,
            start.elapsed(),
            random(),
        ) {
            RetryDecision::DoNotRetry(why) => {
                out.give_up = Some(why);
                return out;
            }
            RetryDecision::Retry { after } => {
                if !spend_retry() {
                    out.budget_denied = true;
                    return out;
                }
                out.sleeps.push(after);
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => {
                        out.cancelled = true;
                        return out;
                    }
                    () = tokio::time::sleep(after) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    type Scripted = std::pin::Pin<Box<dyn Future<Output = (AttemptResult, Option<Duration>, u32)>>>;

    /// A fake attempt that answers each call from a script, taking `took` of virtual time.
    fn script(
        results: Vec<AttemptResult>,
        took: Duration,
        log: Arc<Mutex<Vec<(u32, Duration)>>>,
        start: Instant,
    ) -> impl FnMut(u32, Duration) -> Scripted {
        let mut i = 0usize;
        move |n, _timeout| {
            let r = results[i.min(results.len() - 1)];
            i += 1;
            let log = log.clone();
            Box::pin(async move {
                log.lock().unwrap().push((n, start.elapsed()));
                tokio::time::sleep(took).await;
                (r, None, n)
            })
        }
    }

    /// A script that nobody watches (no log of the calls).
    fn answers(
        results: Vec<AttemptResult>,
        took: Duration,
    ) -> impl FnMut(u32, Duration) -> Scripted {
        script(results, took, Arc::default(), Instant::now())
    }

    /// `run` as most tests call it: never cancelled, the jitter sample in the middle of its
    /// range (each sleep is then exactly its step), and a budget that grants every retry.
    async fn run_plainly(
        policy: &RetryPolicy,
        attempt: impl FnMut(u32, Duration) -> Scripted,
    ) -> LoopOutcome<u32> {
        run(policy, &CancellationToken::new(), || 0.5, || true, attempt).await
    }

    fn policy(attempts: u32, deadline_ms: u64) -> RetryPolicy {
        RetryPolicy::new(
            attempts,
            Duration::from_millis(100),
            3.0,
            0.25,
            Duration::from_secs(1),
            Duration::from_millis(deadline_ms),
            true,
        )
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn two_sleeps_of_100_then_300ms_for_three_attempts() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let f = script(
            vec![AttemptResult::Status(503)],
            Duration::from_millis(10),
            log.clone(),
            start,
        );
        let out = run_plainly(&policy(3, 20_000), f).await;
        assert_eq!(out.attempts, 3);
        assert_eq!(
            out.sleeps,
            vec![Duration::from_millis(100), Duration::from_millis(300)]
        );
        assert_eq!(out.result, Some(AttemptResult::Status(503)));
        assert_eq!(out.give_up, Some(GiveUp::AttemptsExhausted));
        let starts: Vec<u128> = log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, t)| t.as_millis())
            .collect();
        assert_eq!(
            starts,
            vec![0, 110, 420],
            "attempt start times in virtual ms"
        );
        let ns: Vec<u32> = log.lock().unwrap().iter().map(|(n, _)| *n).collect();
        assert_eq!(ns, vec![0, 1, 2], "retry numbers passed to attempts");
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_extremes_stay_within_25_percent() {
        for (r, want) in [(0.0, [75, 225]), (0.999_999, [125, 375])] {
            let f = answers(vec![AttemptResult::Connect], Duration::ZERO);
            let out = run(
                &policy(3, 20_000),
                &CancellationToken::new(),
                || r,
                || true,
                f,
            )
            .await;
            let got: Vec<u128> = out.sleeps.iter().map(Duration::as_millis).collect();
            assert_eq!(got, want.to_vec());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn non_retryable_results_make_one_attempt() {
        for r in [
            AttemptResult::Status(200),
            AttemptResult::Status(404),
            AttemptResult::Status(403),
            AttemptResult::Status(429),
            AttemptResult::Status(304),
            AttemptResult::Invalid,
        ] {
            let out = run_plainly(&policy(3, 20_000), answers(vec![r], Duration::ZERO)).await;
            assert_eq!(out.attempts, 1, "{r:?}");
            assert!(out.sleeps.is_empty());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_is_retried_and_has_no_payload() {
        let f = answers(vec![AttemptResult::Status(200)], Duration::from_secs(5));
        let out = run_plainly(&policy(3, 20_000), f).await;
        assert_eq!(out.attempts, 3, "every attempt hit the 1s timeout");
        assert_eq!(out.result, Some(AttemptResult::Timeout));
        assert!(out.payload.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_cuts_the_sequence_short_and_shrinks_the_last_timeout() {
        // Deadline 1.3s; each attempt takes 0.5s. t=0.5 fail, sleep 0.1 → t=0.6 second
        // attempt gets min(1s, 0.7s) = 0.7s, fails at 1.1; 1.1 + 0.3 ≥ 1.3 → give up.
        let f = answers(vec![AttemptResult::Status(500)], Duration::from_millis(500));
        let out = run_plainly(&policy(3, 1300), f).await;
        assert_eq!(out.attempts, 2);
        assert_eq!(out.give_up, Some(GiveUp::DeadlineWouldPass));
        assert_eq!(
            out.timeouts,
            vec![Duration::from_secs(1), Duration::from_millis(700)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_during_a_sleep_returns_at_once() {
        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            c2.cancel();
        });
        let start = Instant::now();
        let f = script(
            vec![AttemptResult::Status(503)],
            Duration::from_millis(10),
            Arc::default(),
            start,
        );
        let out = run(&policy(3, 20_000), &cancel, || 0.5, || true, f).await;
        assert!(out.cancelled);
        assert_eq!(out.attempts, 1);
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(30),
            "not the full 110ms"
        );
        assert_eq!(out.result, Some(AttemptResult::Status(503)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_budget_skips_the_retry() {
        let f = answers(vec![AttemptResult::Status(503)], Duration::ZERO);
        let out = run(
            &policy(3, 20_000),
            &CancellationToken::new(),
            || 0.5,
            || false,
            f,
        )
        .await;
        assert_eq!(out.attempts, 1);
        assert!(out.budget_denied);
        assert!(out.sleeps.is_empty());
    }
}
