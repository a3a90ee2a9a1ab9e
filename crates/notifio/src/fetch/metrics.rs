//! Retry metrics (docs/policy.md#request-level-retry-and-why-the-probe-never-retries, "mitigation
//! strategies"): counters and latency histograms in Prometheus text, plus the hourly warnings the
//! dashboard shows.
//!
//! Counters and histograms are prometheus-client's; `/metrics` registers them with the app's own
//! counters in one registry ([`FetchMetrics::register`]), so the page is one exposition with
//! one `# EOF` at its end, as OpenMetrics requires (docs/dashboard.md). The last hour is a
//! small ring of samples, because Prometheus counters cannot answer "retry rate over the last
//! hour" by themselves and the dashboard must work without a Prometheus server. The latency
//! alert judges each read against its own budget: a page read in a browser waits for its
//! rendering and its cards by design, so it is measured against [`BROWSER_SEARCH_P95_WARN`],
//! not the HTTP request's [`SEARCH_P95_WARN`]. Warnings need
//! at least [`MIN_SAMPLES`] requests in the hour, so one retried request at start-up is not
//! reported as a 100% retry rate.

use notifio_policy::RequestClass;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The retry policy's alert threshold on the retry rate.
pub const RETRY_RATE_WARN: f64 = 0.05;
/// The retry policy's latency budget for critical paths (the `search` class p95), for a page read
/// over HTTP (or the app's request).
pub const SEARCH_P95_WARN: Duration = Duration::from_millis(500);
/// The same budget for a search page read in the browser: besides the request, the page is
/// rendered and read only once its cards are in the DOM (polled every 50 ms, their count
/// unchanged for 300 ms) or it has been quiet for 500 ms after its load event, and it may wait
/// its turn to load (docs/sites.md#when-a-page-has-loaded). On
/// loopback that alone is 0.3–0.7 s (the demo's script-built site: p95 644 ms); a real site
/// adds its network and scripts.
pub const BROWSER_SEARCH_P95_WARN: Duration = Duration::from_secs(3);
/// Fewest requests in the hour before a rate or p95 warning is raised.
pub const MIN_SAMPLES: usize = 20;
const WINDOW: Duration = Duration::from_secs(3600);
/// Ring bound: at 30 s per search this is hundreds of searches' hour.
const MAX_SAMPLES: usize = 100_000;

/// The retry metrics as `notifio status` and `/api/status` show them (`retry`).
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    // Static strings: recording a request allocates nothing for its labels.
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    class: &'static str,
    retried: &'static str,
}

struct Sample {
    at: Instant,
    class: RequestClass,
    in_browser: bool,
    retried: bool,
    latency: Duration,
}

/// The `search` samples of one way of reading (HTTP or the browser) in the window.
#[derive(Default)]
struct SearchReads {
    n: usize,
    /// Slower than their budget.
    slow: usize,
}

impl SearchReads {
    /// Whether the p95 (nearest rank) exceeds the budget: exactly when at least `m − rank + 1`
    /// of the `m` samples are slower than it, so no sort is needed.
    fn p95_over(&self) -> bool {
        let m = self.n;
        m > 0 && self.slow >= m - p95_rank(m)
    }
}

/// A way of reading a search page, and its latency budget.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    Http,
    Browser,
}

impl Read {
    const fn of(in_browser: bool) -> Self {
        if in_browser {
            Self::Browser
        } else {
            Self::Http
        }
    }

    const fn budget(self) -> Duration {
        match self {
            Self::Http => SEARCH_P95_WARN,
            Self::Browser => BROWSER_SEARCH_P95_WARN,
        }
    }
}

/// The last hour's requests, with running counts so the per-request warning checks are O(1)
/// (recounting or sorting up to 100,000 samples on every request cost milliseconds each).
#[derive(Default)]
struct Window {
    samples: VecDeque<Sample>,
    retried: usize,
    /// `search` samples read over HTTP (or the app's request).
    search: SearchReads,
    /// `search` samples read in the browser.
    browser_search: SearchReads,
}

impl Window {
    fn count(&mut self, s: &Sample, add: bool) {
        let step = |n: &mut usize| *n = if add { *n + 1 } else { n.saturating_sub(1) };
        if s.retried {
            step(&mut self.retried);
        }
        if s.class == RequestClass::Search {
            let read = Read::of(s.in_browser);
            let reads = self.reads_mut(read);
            step(&mut reads.n);
            if s.latency > read.budget() {
                step(&mut reads.slow);
            }
        }
    }

    fn reads(&self, read: Read) -> &SearchReads {
        match read {
            Read::Http => &self.search,
            Read::Browser => &self.browser_search,
        }
    }

    fn reads_mut(&mut self, read: Read) -> &mut SearchReads {
        match read {
            Read::Http => &mut self.search,
            Read::Browser => &mut self.browser_search,
        }
    }

    /// Whether this way of reading has enough samples and its p95 is over its budget.
    fn p95_alert(&self, read: Read) -> bool {
        let r = self.reads(read);
        r.n >= MIN_SAMPLES && r.p95_over()
    }

    fn push(&mut self, s: Sample) {
        if self.samples.len() >= MAX_SAMPLES {
            self.pop();
        }
        self.count(&s, true);
        self.samples.push_back(s);
    }

    fn pop(&mut self) {
        if let Some(old) = self.samples.pop_front() {
            self.count(&old, false);
        }
    }

    fn prune(&mut self, now: Instant) {
        while self
            .samples
            .front()
            .is_some_and(|s| now.saturating_duration_since(s.at) > WINDOW)
        {
            self.pop();
        }
    }
}

/// Index of the 95th percentile (nearest rank) among `m` sorted samples.
fn p95_rank(m: usize) -> usize {
    ((m as f64 * 0.95).ceil() as usize).clamp(1, m) - 1
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
    ])
}

/// The fetcher's metrics. One per [`super::Fetcher`].
pub struct FetchMetrics {
    requests: Family<ClassLabels, Counter>,
    retried: Family<ClassLabels, Counter>,
    retry_attempts: Family<ClassLabels, Counter>,
    final_failures: Family<ClassLabels, Counter>,
    budget_denied: Family<ClassLabels, Counter>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    total_requests: AtomicU64,
    total_retried: AtomicU64,
    total_attempts: AtomicU64,
    total_failures: AtomicU64,
    window: Mutex<Window>,
    warned_rate: AtomicBool,
    warned_p95: AtomicBool,
    warned_browser_p95: AtomicBool,
}

impl std::fmt::Debug for FetchMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchMetrics")
            .field("snapshot", &self.snapshot())
            .finish_non_exhaustive()
    }
}

impl Default for FetchMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// One finished request, as the metrics see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestRecord {
    pub(crate) class: RequestClass,
    /// Read in the browser (judged against [`BROWSER_SEARCH_P95_WARN`]).
    pub(crate) in_browser: bool,
    pub(crate) attempts: u32,
    pub(crate) latency: Duration,
    pub(crate) final_failure: bool,
    pub(crate) budget_denied: bool,
}

impl FetchMetrics {
    /// Empty metrics (named `notifio_fetch_*` once [registered](Self::register)).
    #[must_use]
    pub fn new() -> Self {
        let m = Self {
            requests: Family::default(),
            retried: Family::default(),
            retry_attempts: Family::default(),
            final_failures: Family::default(),
            budget_denied: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            total_requests: AtomicU64::new(0),
            total_retried: AtomicU64::new(0),
            total_attempts: AtomicU64::new(0),
            total_failures: AtomicU64::new(0),
            window: Mutex::new(Window::default()),
            warned_rate: AtomicBool::new(false),
            warned_p95: AtomicBool::new(false),
            warned_browser_p95: AtomicBool::new(false),
        };
        // Every class's series from the start, at 0: a rate over them is defined before the
        // first retry (and no family is empty, which some exposition parsers refuse).
        for class in RequestClass::ALL {
            let labels = ClassLabels {
                class: class.as_str(),
            };
            for family in [
                &m.requests,
                &m.retried,
                &m.retry_attempts,
                &m.final_failures,
                &m.budget_denied,
            ] {
                drop(family.get_or_create(&labels));
            }
            for retried in ["false", "true"] {
                drop(m.latency.get_or_create(&LatencyLabels {
                    class: class.as_str(),
                    retried,
                }));
            }
        }
        m
    }

    /// Registers these metrics in `registry` under `fetch_` (`notifio_fetch_requests_total`
    /// in the app's `notifio` registry). The registry shares them: what is recorded later
    /// shows in its next encoding.
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("fetch");
        registry.register(
            "requests",
            "Requests made (a request is all attempts of one fetch)",
            self.requests.clone(),
        );
        registry.register(
            "retried_requests",
            "Requests that needed at least one retry",
            self.retried.clone(),
        );
        registry.register(
            "retry_attempts",
            "Attempts beyond the first",
            self.retry_attempts.clone(),
        );
        registry.register(
            "final_failures",
            "Requests that still failed (5xx, timeout, transport) after their last attempt",
            self.final_failures.clone(),
        );
        registry.register(
            "retries_skipped_budget",
            "Retries skipped because the site's retry budget was spent",
            self.budget_denied.clone(),
        );
        registry.register(
            "latency_seconds",
            "Request latency including retries, by class and whether it was retried",
            self.latency.clone(),
        );
    }

    pub(crate) fn record(&self, r: RequestRecord) {
        let class = ClassLabels {
            class: r.class.as_str(),
        };
        let retried = r.attempts > 1;
        self.requests.get_or_create(&class).inc();
        self.total_requests.fetch_add(1, Ordering::Relaxed);
        if retried {
            self.retried.get_or_create(&class).inc();
            self.total_retried.fetch_add(1, Ordering::Relaxed);
        }
        let extra = u64::from(r.attempts.saturating_sub(1));
        self.retry_attempts.get_or_create(&class).inc_by(extra);
        self.total_attempts.fetch_add(extra, Ordering::Relaxed);
        if r.final_failure {
            self.final_failures.get_or_create(&class).inc();
            self.total_failures.fetch_add(1, Ordering::Relaxed);
        }
        if r.budget_denied {
            self.budget_denied.get_or_create(&class).inc();
        }
        self.latency
            .get_or_create(&LatencyLabels {
                class: class.class,
                retried: if retried { "true" } else { "false" },
            })
            .observe(r.latency.as_secs_f64());
        let now = Instant::now();
        {
            let mut w = self.lock_window();
            w.prune(now);
            w.push(Sample {
                at: now,
                class: r.class,
                in_browser: r.in_browser,
                retried,
                latency: r.latency,
            });
        }
        self.log_warning_transitions();
    }

    fn lock_window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// (retry rate, requests) over the last hour.
    fn hourly_rate(&self) -> (f64, usize) {
        let mut w = self.lock_window();
        w.prune(Instant::now());
        let (n, retried) = (w.samples.len(), w.retried);
        (
            if n == 0 {
                0.0
            } else {
                retried as f64 / n as f64
            },
            n,
        )
    }

    /// (p95 latency, samples) of the `search` class read this way over the last hour.
    fn hourly_search_p95(&self, read: Read) -> (Duration, usize) {
        let mut w = self.lock_window();
        w.prune(Instant::now());
        let mut lat: Vec<Duration> = w
            .samples
            .iter()
            .filter(|s| s.class == RequestClass::Search && Read::of(s.in_browser) == read)
            .map(|s| s.latency)
            .collect();
        if lat.is_empty() {
            return (Duration::ZERO, 0);
        }
        lat.sort_unstable();
        (lat[p95_rank(lat.len())], lat.len())
    }

    /// Totals since start, and the retry rate over the last hour (the dashboard's `retry`).
    #[must_use]
    pub fn snapshot(&self) -> RetryStatus {
        RetryStatus {
            requests: self.total_requests.load(Ordering::Relaxed),
            retried: self.total_retried.load(Ordering::Relaxed),
            attempts: self.total_attempts.load(Ordering::Relaxed),
            final_failures: self.total_failures.load(Ordering::Relaxed),
            retry_rate: self.hourly_rate().0,
        }
    }

    /// Appends these metrics alone as one OpenMetrics exposition (`# EOF` last): for
    /// benchmarks and tests; `/metrics` registers them with the rest ([`Self::register`]).
    pub fn encode_prometheus(&self, out: &mut String) {
        let mut registry = Registry::with_prefix("notifio");
        self.register(&mut registry);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(out, &registry);
    }

    /// Current warnings: the last hour's retry rate above 5%, or the `search` class p95 above
    /// 500 ms (the retry policy's alerts).
    #[must_use]
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let (rate, n) = self.hourly_rate();
        if n >= MIN_SAMPLES && rate > RETRY_RATE_WARN {
            out.push(format!(
                "retry rate over the last hour is {:.1}% of {n} requests (alert above {:.0}%): \
                 a site is failing often; see the sites table",
                rate * 100.0,
                RETRY_RATE_WARN * 100.0
            ));
        }
        for read in [Read::Http, Read::Browser] {
            let over = {
                let mut w = self.lock_window();
                w.prune(Instant::now());
                w.p95_alert(read)
            };
            if over {
                // The sort (for the figure in the message) only while the warning stands.
                let (p95, _) = self.hourly_search_p95(read);
                let what = match read {
                    Read::Http => "search",
                    Read::Browser => "browser search",
                };
                out.push(format!(
                    "{what} p95 latency over the last hour is {} ms (budget {} ms)",
                    p95.as_millis(),
                    read.budget().as_millis()
                ));
            }
        }
        out
    }

    /// Logs a warning when one starts (not on every request while it lasts).
    fn log_warning_transitions(&self) {
        let (rate, n) = self.hourly_rate();
        let rate_on = n >= MIN_SAMPLES && rate > RETRY_RATE_WARN;
        if rate_on != self.warned_rate.swap(rate_on, Ordering::Relaxed) && rate_on {
            tracing::warn!(
                retry_rate = rate,
                requests = n,
                "retry rate over the last hour passed 5%"
            );
        }
        for (read, warned) in [
            (Read::Http, &self.warned_p95),
            (Read::Browser, &self.warned_browser_p95),
        ] {
            let p95_on = self.lock_window().p95_alert(read);
            if p95_on != warned.swap(p95_on, Ordering::Relaxed) && p95_on {
                let (p95, _) = self.hourly_search_p95(read);
                tracing::warn!(
                    p95_ms = p95.as_millis() as u64,
                    budget_ms = read.budget().as_millis() as u64,
                    browser = read == Read::Browser,
                    "search p95 latency over the last hour passed its budget"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(class: RequestClass, attempts: u32, ms: u64) -> RequestRecord {
        RequestRecord {
            class,
            in_browser: false,
            attempts,
            latency: Duration::from_millis(ms),
            final_failure: false,
            budget_denied: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_rate_warning_needs_samples_and_expires_after_an_hour() {
        let m = FetchMetrics::new();
        m.record(rec(RequestClass::Search, 2, 150));
        assert!(m.warnings().is_empty(), "one request is not a rate");
        for _ in 0..19 {
            m.record(rec(RequestClass::Search, 1, 20));
        }
        assert!(m.warnings().is_empty(), "1 of 20 = 5% is not above 5%");
        m.record(rec(RequestClass::Search, 3, 450));
        let w = m.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("is 9.5% of 21 requests"), "{w:?}");
        let s = m.snapshot();
        assert_eq!((s.requests, s.retried, s.attempts), (21, 2, 3));
        assert!((s.retry_rate - 2.0 / 21.0).abs() < 1e-9);
        tokio::time::advance(Duration::from_secs(3601)).await;
        assert!(m.warnings().is_empty());
        assert_eq!(m.snapshot().retry_rate, 0.0);
        assert_eq!(m.snapshot().requests, 21, "totals outlive the window");
    }

    #[tokio::test(start_paused = true)]
    async fn slow_search_p95_warns_other_classes_do_not_count() {
        let m = FetchMetrics::new();
        for _ in 0..30 {
            m.record(rec(RequestClass::Notify, 1, 2000));
        }
        assert!(m.warnings().is_empty());
        for i in 0..20 {
            m.record(rec(RequestClass::Search, 1, if i < 18 { 100 } else { 900 }));
        }
        let w = m.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("search p95 latency over the last hour is 900 ms"),
            "{w:?}"
        );
    }

    /// A browser read is judged against a browser's budget: the demo's 644 ms on loopback is
    /// no alarm there, while the same figure over HTTP is one.
    #[tokio::test(start_paused = true)]
    async fn a_browser_read_is_judged_against_a_browsers_budget() {
        let m = FetchMetrics::new();
        let browser = |ms| RequestRecord {
            in_browser: true,
            ..rec(RequestClass::Search, 1, ms)
        };
        for _ in 0..20 {
            m.record(browser(644));
        }
        assert!(m.warnings().is_empty(), "{:?}", m.warnings());
        for _ in 0..20 {
            m.record(rec(RequestClass::Search, 1, 644));
        }
        assert_eq!(
            m.warnings(),
            ["search p95 latency over the last hour is 644 ms (budget 500 ms)"],
            "the HTTP reads alone"
        );
        for _ in 0..20 {
            m.record(browser(4200));
        }
        assert_eq!(
            m.warnings(),
            [
                "search p95 latency over the last hour is 644 ms (budget 500 ms)",
                "browser search p95 latency over the last hour is 4200 ms (budget 3000 ms)"
            ]
        );
    }

    #[test]
    fn the_counted_p95_test_agrees_with_sorting() {
        let mut x = 7u64;
        for m in 1..300usize {
            let mut w = Window::default();
            let mut lat = Vec::new();
            for _ in 0..m {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                // Mostly fast, a varying share slow, some exactly at the budget.
                let ms = match (x >> 33) % 100 {
                    r if r < (m as u64 % 13) => 501 + r,
                    99 => 500,
                    r => r * 4,
                };
                lat.push(Duration::from_millis(ms));
                w.push(Sample {
                    at: Instant::now(),
                    class: RequestClass::Search,
                    in_browser: false,
                    retried: false,
                    latency: Duration::from_millis(ms),
                });
            }
            lat.sort_unstable();
            assert_eq!(
                w.search.p95_over(),
                lat[p95_rank(m)] > SEARCH_P95_WARN,
                "m = {m}"
            );
        }
    }

    #[test]
    fn the_window_counts_follow_evictions() {
        let mut w = Window::default();
        for i in 0..MAX_SAMPLES + 10 {
            w.push(Sample {
                at: Instant::now(),
                class: if i % 2 == 0 {
                    RequestClass::Search
                } else {
                    RequestClass::Notify
                },
                in_browser: i % 4 == 0,
                retried: i % 3 == 0,
                latency: Duration::from_millis(match i % 7 {
                    0 => 4000,
                    1 => 900,
                    _ => 10,
                }),
            });
        }
        let count = |f: &dyn Fn(&Sample) -> bool| w.samples.iter().filter(|s| f(s)).count();
        assert_eq!(w.samples.len(), MAX_SAMPLES);
        assert_eq!(w.retried, count(&|s| s.retried));
        for (read, reads) in [(Read::Http, &w.search), (Read::Browser, &w.browser_search)] {
            let mine =
                |s: &Sample| s.class == RequestClass::Search && Read::of(s.in_browser) == read;
            assert_eq!(reads.n, count(&|s| mine(s)));
            assert_eq!(reads.slow, count(&|s| mine(s) && s.latency > read.budget()));
        }
    }

    #[test]
    fn prometheus_text_has_every_series() {
        let m = FetchMetrics::new();
        m.record(RequestRecord {
            final_failure: true,
            budget_denied: true,
            ..rec(RequestClass::Detail, 3, 450)
        });
        let mut out = String::new();
        m.encode_prometheus(&mut out);
        for want in [
            "notifio_fetch_requests_total{class=\"detail\"} 1",
            "notifio_fetch_retried_requests_total{class=\"detail\"} 1",
            "notifio_fetch_retry_attempts_total{class=\"detail\"} 2",
            "notifio_fetch_final_failures_total{class=\"detail\"} 1",
            "notifio_fetch_retries_skipped_budget_total{class=\"detail\"} 1",
            "notifio_fetch_latency_seconds_bucket{le=\"0.5\",class=\"detail\",retried=\"true\"} 1",
        ] {
            assert!(out.contains(want), "missing {want} in\n{out}");
        }
    }
}
