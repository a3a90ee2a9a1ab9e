//! A day of scheduling in seconds: the pure scheduler driven by a virtual clock, the way the
//! real driver drives it (poll_due_into, jump to poll_timeout, feed outcomes back).
//!
//! 100,000 searches over 10,000 sites (10 per site), interval 30 s, spacing 2 s, concurrency
//! 10,000 (never binds), for 24 simulated hours. 5% of sites refuse for a while (a scripted
//! window of 10 min to 3 h, a mix of challenge / rate_limited / denied / error, some with a
//! Retry-After of up to 2 h). Outcomes are reported at once. Prints wall time, checks per
//! second and the politeness figures, which must be: 0 requests inside a wait window, exactly
//! 1 probe per expired wait, 0 spacing violations.
//!
//! Run: `cargo bench -p notifio-policy --bench simulate` (optional args: hours, sites,
//! searches per site).

use notifio_policy::schedule::prefetch;
use notifio_policy::{
    BackoffPolicy, Outcome, Registry, Scheduler, SchedulerConfig, SearchId, SearchSpec, SiteKey,
    Timestamp,
};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000;

/// splitmix64: a fixed, seedable script (the scheduler's own randomness is its seed).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Clone, Copy)]
struct Script {
    from: u64,
    until: u64,
    outcome: Outcome,
    retry_after: Option<Duration>,
}

/// What the bench remembers per site to check every request against the politeness rules:
/// one array of 8-byte records indexed by site, times in ms since `T0` (no maps, and eight
/// sites to a cache line, so the checking costs little beside the scheduler it measures).
#[derive(Clone, Copy, Default)]
struct Book {
    /// The previous request's start + 1 (0 = none yet).
    last_start: u32,
    /// The end of the wait the last refusal set, if no request has gone out since (0 = none).
    wait_until: u32,
}

/// Whether site `s` has a refusal script (one site in twenty).
fn scripted(s: usize) -> bool {
    s % 20 == 7
}

#[derive(Default)]
struct Figures {
    checks: u64,
    refusals: u64,
    probes: u64,
    inside_wait: u64,
    not_probe_after_wait: u64,
    spacing_violations: u64,
    waits_expired: u64,
    longest_wait_ms: u64,
}

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let hours = args.first().copied().unwrap_or(24.0);
    let n_sites = args.get(1).copied().unwrap_or(10_000.0) as usize;
    let per_site = args.get(2).copied().unwrap_or(10.0) as usize;
    let span_ms = (hours * 3_600_000.0) as u64;
    assert!(span_ms < u64::from(u32::MAX) / 2, "at most ~596 hours");
    let end = T0 + span_ms;
    let spacing_ms = 2_000;

    let scripts: Vec<Option<Script>> = (0..n_sites)
        .map(|s| {
            if !scripted(s) {
                return None;
            }
            let r = mix(s as u64);
            let from = T0 + (r % span_ms.max(1));
            let len = 600_000 + (r >> 20) % 10_200_000; // 10 min .. 3 h
            let kind = (r >> 40) % 4;
            let outcome = [
                Outcome::Challenge,
                Outcome::RateLimited,
                Outcome::Denied,
                Outcome::Error,
            ][kind as usize];
            let retry_after =
                ((r >> 50) % 3 == 0).then(|| Duration::from_secs(60 + (r >> 8) % 7_140));
            Some(Script {
                from,
                until: from + len,
                outcome,
                retry_after,
            })
        })
        .collect();

    let config = SchedulerConfig {
        spacing: Duration::from_millis(spacing_ms),
        concurrency: 10_000,
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, Registry::new(BackoffPolicy::default()), 42);
    let keys: Vec<SiteKey> = (0..n_sites)
        .map(|i| SiteKey::from_url(&format!("https://www.site{i}.example/")).unwrap())
        .collect();
    let now0 = Timestamp(T0);
    for (i, key) in keys.iter().enumerate() {
        for k in 0..per_site {
            s.add_search(
                SearchSpec {
                    id: SearchId((i * per_site + k) as u32),
                    url: format!("https://www.site{i}.example/search/{k}?max=1200"),
                    site: key.clone(),
                    interval: Duration::from_secs(30),
                    first_due: None,
                },
                now0,
            );
        }
    }

    let mut books = vec![Book::default(); n_sites];
    // The scripts' refusal windows `[from, until)` in ms since `T0`, by site (empty if none):
    // read only for scripted sites.
    let windows: Vec<(u32, u32)> = scripts
        .iter()
        .map(|sc| sc.map_or((0, 0), |sc| ((sc.from - T0) as u32, (sc.until - T0) as u32)))
        .collect();
    let mut f = Figures::default();

    let started = wall_clock();
    let mut now = T0;
    let mut due = Vec::new();
    while now <= end {
        due.clear();
        s.poll_due_into(Timestamp(now), &mut due);
        for (i, &c) in due.iter().enumerate() {
            // Start loading the next check's book, so its cache miss overlaps this check's
            // work (the last one again at the end of the batch: harmless, and no branch).
            let next = due[(i + 1).min(due.len() - 1)].site.0 as usize;
            prefetch(&books[next]);
            let site = c.site.0 as usize;
            let book = &mut books[site];
            let rel = (now - T0) as u32;
            f.checks += 1;
            if book.last_start != 0 && u64::from(rel + 1 - book.last_start) < spacing_ms {
                f.spacing_violations += 1;
            }
            book.last_start = rel + 1;
            if book.wait_until != 0 {
                if rel < book.wait_until {
                    f.inside_wait += 1;
                }
                if !c.probe {
                    f.not_probe_after_wait += 1;
                }
                f.waits_expired += 1;
                book.wait_until = 0;
            }
            if c.probe {
                f.probes += 1;
            }
            // The window is read only for scripted sites, the script only inside its window.
            let refusing = scripted(site) && {
                let (from, until) = windows[site];
                rel >= from && rel < until
            };
            let (outcome, retry_after) = match refusing {
                true => {
                    scripts[site].map_or((Outcome::Ok, None), |sc| (sc.outcome, sc.retry_after))
                }
                false => (Outcome::Ok, None),
            };
            s.handle_outcome(c.id, outcome, retry_after, Timestamp(now));
            if outcome.refusal_kind().is_some() {
                f.refusals += 1;
                let key = s.site_key(c.site);
                let e = s.registry().entry(key).map_or(0, |e| e.next_retry_at.0);
                f.longest_wait_ms = f.longest_wait_ms.max(e - now);
                books[site].wait_until = (e.saturating_sub(T0) as u32).max(1);
            }
        }
        match s.poll_timeout() {
            Some(t) => now = t.0.max(now + 1),
            None => break,
        }
    }
    let wall = started.elapsed();

    let waits_pending = books.iter().filter(|b| b.wait_until != 0).count();
    println!(
        "simulated {hours} h: {} searches on {n_sites} sites, interval 30s, spacing 2s",
        n_sites * per_site
    );
    println!("wall time           {:.2} s", wall.as_secs_f64());
    println!("checks              {}", f.checks);
    println!(
        "checks/s (wall)     {:.0}   ({:.0} ns per check)",
        f.checks as f64 / wall.as_secs_f64(),
        wall.as_secs_f64() * 1e9 / f.checks.max(1) as f64
    );
    println!("refusals            {}", f.refusals);
    println!("requests in a wait  {}   (must be 0)", f.inside_wait);
    println!(
        "probes / expired    {} / {} = {:.3}   (must be 1; {} waits still running at the end)",
        f.probes,
        f.waits_expired,
        f.probes as f64 / f.waits_expired.max(1) as f64,
        waits_pending
    );
    println!(
        "non-probe first req {}   (must be 0)",
        f.not_probe_after_wait
    );
    println!("spacing violations  {}   (must be 0)", f.spacing_violations);
    println!(
        "longest wait        {:.1} min (cap 60)",
        f.longest_wait_ms as f64 / 60_000.0
    );
    let ok = f.inside_wait == 0
        && f.probes == f.waits_expired
        && f.not_probe_after_wait == 0
        && f.spacing_violations == 0
        && f.longest_wait_ms <= 3_600_000;
    if !ok {
        eprintln!("POLITENESS VIOLATED");
        std::process::exit(1);
    }
}

/// The benchmark measures real elapsed time; the scheduler itself never reads a clock.
#[allow(clippy::disallowed_methods)]
fn wall_clock() -> std::time::Instant {
    std::time::Instant::now()
}
