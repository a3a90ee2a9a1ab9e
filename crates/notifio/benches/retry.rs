//! The promise of request-level retry
//! (docs/policy.md#request-level-retry-and-why-the-probe-never-retries), measured: against the fake
//! portal with 20 ms service latency and 10% injected 5xx, request-level retry should lift the
//! success rate to ≥ 99.8% (theory: 1 − 0.1³ = 99.9%) while keeping p95 latency ≤ 500 ms. The same
//! load without retries is the baseline. Bounded: a few thousand requests per mode over loopback.
//!
//! Run: `cargo bench -p notifio --bench retry` (env `RETRY_BENCH_REQUESTS`, default 3000;
//! `RETRY_BENCH_CONCURRENCY`, default 16). Figures go to `docs/benchmarks/fetch.md`.

use fake_portal::{Portal, SiteSpec};
use futures_util::StreamExt as _;
use notifio::fetch::{FetchConfig, FetchRequest, Fetcher};
use notifio_policy::{RequestClass, RetryPolicy, SiteKey};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SITES: usize = 4;

struct Row {
    mode: &'static str,
    requests: usize,
    ok: usize,
    p50: Duration,
    p95: Duration,
    p99: Duration,
    max: Duration,
    attempts: u64,
    retry_rate: f64,
    warnings: Vec<String>,
    budget_skipped: u64,
    wall: Duration,
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

async fn run(mode: &'static str, retries: bool, n: usize, conc: usize) -> Row {
    let specs = (0..SITES)
        .map(|i| SiteSpec {
            latency: Duration::from_millis(20),
            fault_rate: 0.10,
            seed: 1000 + i as u64,
            ..SiteSpec::new(&format!("site{i}"))
        })
        .collect();
    let portal = Portal::start(specs).await.expect("bind loopback");
    let mut cfg = FetchConfig {
        rng_seed: Some(42),
        ..FetchConfig::default()
    };
    if !retries {
        cfg.retry.search = RetryPolicy::default_for(RequestClass::Probe);
    }
    let fetcher = Fetcher::new(cfg).expect("client");
    let reqs: Vec<FetchRequest> = (0..n)
        .map(|i| {
            let site = format!("site{}", i % SITES);
            let url = portal.search_url(&site, &format!("s{}", i % 3));
            FetchRequest {
                site: SiteKey::from_url(&url).expect("key"),
                url,
                class: RequestClass::Search,
                conditional: false,
                post_json: None,
                via: notifio::fetch::FetchMode::Http,
                ready: None,
                markers: None,
                outgoing: None,
                spare: None,
            }
        })
        .collect();
    let never = CancellationToken::new();
    let started = std::time::Instant::now();
    let results: Vec<(bool, Duration)> = futures_util::stream::iter(reqs.iter())
        .map(|r| {
            let f = fetcher.clone();
            let never = never.clone();
            async move {
                let got = f.fetch(r, &never).await;
                (
                    got.status() == Some(200) && got.failure().is_none(),
                    got.latency,
                )
            }
        })
        .buffer_unordered(conc)
        .collect()
        .await;
    let wall = started.elapsed();
    let mut lat: Vec<Duration> = results.iter().map(|(_, l)| *l).collect();
    lat.sort_unstable();
    let snap = fetcher.metrics().snapshot();
    let mut text = String::new();
    fetcher.metrics().encode_prometheus(&mut text);
    let budget_skipped = text
        .lines()
        .filter(|l| l.starts_with("notifio_fetch_retries_skipped_budget_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let row = Row {
        mode,
        requests: n,
        ok: results.iter().filter(|(ok, _)| *ok).count(),
        p50: pct(&lat, 0.50),
        p95: pct(&lat, 0.95),
        p99: pct(&lat, 0.99),
        max: *lat.last().unwrap_or(&Duration::ZERO),
        attempts: snap.attempts,
        retry_rate: snap.retry_rate,
        warnings: fetcher.metrics().warnings(),
        budget_skipped,
        wall,
    };
    portal.shutdown().await;
    row
}

fn main() {
    let n = env("RETRY_BENCH_REQUESTS", 3000);
    let conc = env("RETRY_BENCH_CONCURRENCY", 16);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "retry bench: {n} search requests per mode, {conc} in flight, {SITES} sites, \
         20 ms latency, 10% injected 503, ~300 KB pages (gzip)"
    );
    println!(
        "| mode | requests | success | p50 | p95 | p99 | max | retry attempts | retry rate (metrics) | wall |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (mode, retries) in [("retry (3 attempts)", true), ("no retry", false)] {
        let r = rt.block_on(run(mode, retries, n, conc));
        println!(
            "| {} | {} | {:.2}% ({} failed) | {} ms | {} ms | {} ms | {} ms | {} | {:.1}% | {:.1} s |",
            r.mode,
            r.requests,
            100.0 * r.ok as f64 / r.requests as f64,
            r.requests - r.ok,
            r.p50.as_millis(),
            r.p95.as_millis(),
            r.p99.as_millis(),
            r.max.as_millis(),
            r.attempts,
            100.0 * r.retry_rate,
            r.wall.as_secs_f64(),
        );
        println!(
            "  retries skipped by the per-site budget: {}",
            r.budget_skipped
        );
        for w in r.warnings {
            println!("  warning shown: {w}");
        }
    }
}
