//! A day of scheduling in seconds: the pure scheduler driven by a virtual clock, the way the
//! real driver drives it (poll_due_into, jump to poll_timeout, feed outcomes back).
//!
//! 100,000 searches over 10,000 sites (10 per site), interval 30 s, spacing 2 s, concurrency
//! 10,000 (never binds), for 24 simulated hours. 5% of sites refuse for a while (a scripted
//! window of 10 min to 3 h, a mix of challenge / rate_limited / denied / error, some with a
//! Retry-After of up to 2 h). Outcomes are reported at once.
//!
//! The day runs twice from the same seed and script. The first run is timed: the scheduler
//! and the driver only, as in `notifio watch` (which checks nothing either). The second run
//! checks every request against the politeness rules: 0 requests inside a wait window,
//! exactly 1 probe per expired wait, 0 spacing violations. Both runs fold every check (id,
//! time, probe flag) into a digest, and the bench fails unless the digests match, so the
//! figures are those of the timed day, check for check. Prints both wall times, checks per
//! second and the politeness figures.
//!
//! Run: `cargo bench -p notifio-policy --bench simulate` (optional args: hours, sites,
//! searches per site).

use notifio_policy::{
    BackoffPolicy, Check, Outcome, Registry, Scheduler, SchedulerConfig, SearchId, SearchSpec,
    SiteKey, Timestamp,
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

/// The scripted day: who refuses when, and the scheduler's setup.
struct Day {
    hours: f64,
    n_sites: usize,
    per_site: usize,
    end: u64,
    scripts: Vec<Option<Script>>,
    /// The scripts' refusal windows `[from, until)` in ms since `T0`, by site (empty if none):
    /// read only for scripted sites.
    windows: Vec<(u32, u32)>,
}

const SPACING_MS: u64 = 2_000;

impl Day {
    fn new(hours: f64, n_sites: usize, per_site: usize) -> Self {
        let span_ms = (hours * 3_600_000.0) as u64;
        assert!(span_ms < u64::from(u32::MAX) / 2, "at most ~596 hours");
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
                let retry_after = (r >> 50)
                    .is_multiple_of(3)
                    .then(|| Duration::from_secs(60 + (r >> 8) % 7_140));
                Some(Script {
                    from,
                    until: from + len,
                    outcome,
                    retry_after,
                })
            })
            .collect();
        let windows = scripts
            .iter()
            .map(|sc| sc.map_or((0, 0), |sc| ((sc.from - T0) as u32, (sc.until - T0) as u32)))
            .collect();
        Self {
            hours,
            n_sites,
            per_site,
            end: T0 + span_ms,
            scripts,
            windows,
        }
    }

    /// A scheduler with every search added, seeded the same way each time.
    fn scheduler(&self) -> Scheduler {
        let config = SchedulerConfig {
            spacing: Duration::from_millis(SPACING_MS),
            concurrency: 10_000,
            ..SchedulerConfig::default()
        };
        let mut s = Scheduler::new(config, Registry::new(BackoffPolicy::default()), 42);
        let now0 = Timestamp(T0);
        for i in 0..self.n_sites {
            let key = SiteKey::from_url(&format!("https://www.site{i}.example/")).unwrap();
            for k in 0..self.per_site {
                s.add_search(
                    SearchSpec {
                        id: SearchId((i * self.per_site + k) as u32),
                        url: format!("https://www.site{i}.example/search/{k}?max=1200"),
                        site: key.clone(),
                        interval: Duration::from_secs(30),
                        first_due: None,
                        pages: 1,
                    },
                    now0,
                );
            }
        }
        s
    }

    /// What site `site` answers at `rel` ms since `T0`: the window is read only for scripted
    /// sites, the script only inside its window.
    #[inline(always)]
    fn answer(&self, site: usize, rel: u32) -> (Outcome, Option<Duration>) {
        let refusing = scripted(site) && {
            let (from, until) = self.windows[site];
            rel >= from && rel < until
        };
        match refusing {
            true => {
                self.scripts[site].map_or((Outcome::Ok, None), |sc| (sc.outcome, sc.retry_after))
            }
            false => (Outcome::Ok, None),
        }
    }
}

/// Folds one check into the day's digest: its id (site, slot, sequence number), its time and
/// its probe flag, in order. A multiply chain that nothing waits on, so it costs ~5
/// instructions and no time on the critical path.
#[inline(always)]
fn fold(digest: u64, check: &Check, now: u64) -> u64 {
    (digest.rotate_left(23) ^ check.id.0 ^ (now << 1 | u64::from(check.probe)))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// What the timed run counts.
struct Run {
    checks: u64,
    refusals: u64,
    digest: u64,
}

/// The timed run: the scheduler and the driver, nothing else.
#[inline(never)]
fn timed_day(s: &mut Scheduler, day: &Day) -> Run {
    let mut run = Run {
        checks: 0,
        refusals: 0,
        digest: 0,
    };
    let mut now = T0;
    let mut due = Vec::new();
    while now <= day.end {
        due.clear();
        s.poll_due_into(Timestamp(now), &mut due);
        run.checks += due.len() as u64;
        for c in &due {
            run.digest = fold(run.digest, c, now);
            let (outcome, retry_after) = day.answer(c.site.0 as usize, (now - T0) as u32);
            s.handle_outcome(c.id, outcome, retry_after, Timestamp(now));
            // Every scripted outcome is a refusal: no need to ask the outcome.
            run.refusals += u64::from(outcome != Outcome::Ok);
        }
        match s.poll_timeout() {
            Some(t) => now = t.0.max(now + 1),
            None => break,
        }
    }
    run
}

/// The checking run: the same day, every request checked against the politeness rules.
#[inline(never)]
fn verified_day(s: &mut Scheduler, day: &Day) -> (Figures, u64, usize) {
    let mut books = vec![Book::default(); day.n_sites];
    let mut f = Figures::default();
    let mut digest = 0;
    let mut now = T0;
    let mut due = Vec::new();
    while now <= day.end {
        due.clear();
        s.poll_due_into(Timestamp(now), &mut due);
        for &c in &due {
            digest = fold(digest, &c, now);
            let site = c.site.0 as usize;
            let book = &mut books[site];
            let rel = (now - T0) as u32;
            f.checks += 1;
            if book.last_start != 0 && u64::from(rel + 1 - book.last_start) < SPACING_MS {
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
            let (outcome, retry_after) = day.answer(site, rel);
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
    let waits_pending = books.iter().filter(|b| b.wait_until != 0).count();
    (f, digest, waits_pending)
}

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let day = Day::new(
        args.first().copied().unwrap_or(24.0),
        args.get(1).copied().unwrap_or(10_000.0) as usize,
        args.get(2).copied().unwrap_or(10.0) as usize,
    );

    let mut s = day.scheduler();
    let started = wall_clock();
    let run = timed_day(&mut s, &day);
    let wall = started.elapsed();
    drop(s);

    let mut s = day.scheduler();
    let started = wall_clock();
    let (f, digest, waits_pending) = verified_day(&mut s, &day);
    let checking_wall = started.elapsed();

    println!(
        "simulated {} h: {} searches on {} sites, interval 30s, spacing 2s",
        day.hours,
        day.n_sites * day.per_site,
        day.n_sites
    );
    println!("wall time           {:.2} s", wall.as_secs_f64());
    println!("checks              {}", run.checks);
    println!(
        "checks/s (wall)     {:.0}   ({:.0} ns per check)",
        run.checks as f64 / wall.as_secs_f64(),
        wall.as_secs_f64() * 1e9 / run.checks.max(1) as f64
    );
    println!("refusals            {}", run.refusals);
    println!(
        "checking run        {:.2} s, digest {digest:016x} ({})",
        checking_wall.as_secs_f64(),
        if digest == run.digest && f.checks == run.checks && f.refusals == run.refusals {
            "the same day"
        } else {
            "A DIFFERENT DAY"
        }
    );
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
    let same_day = digest == run.digest && f.checks == run.checks && f.refusals == run.refusals;
    let ok = f.inside_wait == 0
        && f.probes == f.waits_expired
        && f.not_probe_after_wait == 0
        && f.spacing_violations == 0
        && f.longest_wait_ms <= 3_600_000;
    if !same_day {
        eprintln!("THE CHECKING RUN SAW A DIFFERENT DAY");
        std::process::exit(1);
    }
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
