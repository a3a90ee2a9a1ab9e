//! Simulated weeks of one site with a request budget, against fixed intervals that send the
//! same number of requests (docs/policy.md#a-request-budget-per-site, issue 39).
//!
//! One site, five searches whose new listings arrive as Poisson processes at 6, 2, 1, 0.3 and
//! 0.1 per hour by day and a tenth of that by night (22:00–08:00), drawn from a seed. The
//! budgeted run drives the real scheduler with a budget (4 requests a minute) and learns each
//! search's rates from an empty history, as the watcher does: after every check it tells the
//! search's [`ArrivalRates`] how long it was watched and how many listings were new, and gives
//! every search of the site its share ([`allocate`]). The fixed run drives the same scheduler
//! without a budget, every search at one interval chosen so that the week costs the same
//! number of requests. A listing's time to notify is from its arrival to the first check of
//! its search after it. Each week starts on a Monday at 08:00, when someone starts a watcher.
//!
//! Prints the plan on the last day at noon and at 03:00, one line per seeded week, and the
//! table of the mean over the weeks: requests per hour, mean and p90 time to notify, share
//! notified within 30 s, for the fixed intervals, the budget, and the budget knowing the true
//! rates (what the rule can do at best). Target: the budget's mean time to notify ≥ 40 %
//! lower at the same requests.
//!
//! One week is noisy (a thousand listings: its ratio alone varies by ±0.05), so the figures
//! are the mean of 30 weeks, each from its own seed.
//!
//! Run: `cargo bench -p notifio-policy --bench budget` (optional args: weeks, budget per
//! minute, day rates as `3,1.5,0.5,0.2,0.05`); about a minute.

use notifio_policy::{
    ArrivalRates, BackoffPolicy, Demand, LocalOffset, Outcome, Planned, Registry, RequestBudget,
    Scheduler, SchedulerConfig, SearchId, SearchSpec, Share, SiteKey, Timestamp, allocate,
    plan_site, price, site_price,
};
use std::time::Duration;

/// Monday 2026-11-30 00:00 UTC; the site's local time is UTC.
const MONDAY: u64 = 1_795_996_800_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;
const WEEK: u64 = 7 * DAY;
/// The week starts on Monday morning.
const START: u64 = MONDAY + 8 * HOUR;
const END: u64 = START + WEEK;
/// The example: rates 60× apart.
const DEFAULT_DAY_RATES: [f64; 5] = [6.0, 2.0, 1.0, 0.3, 0.1];
/// The searches' day rates this run: the third argument (`3,1.5,0.5`) or the example. Other
/// rates than the ones the model's constants were chosen on tell whether the gain holds.
static DAY_RATES: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();

fn day_rates() -> &'static [f64] {
    DAY_RATES.get_or_init(|| DEFAULT_DAY_RATES.to_vec())
}
const NIGHT_FACTOR: f64 = 0.1;
const FASTEST: Duration = Duration::from_secs(30);
const SLOWEST: Duration = Duration::from_secs(15 * 60);

fn night(t: u64) -> bool {
    let hour = ((t - MONDAY) / HOUR) % 24;
    !(8..22).contains(&hour)
}

fn rate(search: usize, t: u64) -> f64 {
    day_rates()[search] * if night(t) { NIGHT_FACTOR } else { 1.0 }
}

/// splitmix64 then a uniform in (0, 1].
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// Each search's arrivals over the week: a Poisson process whose rate changes by the hour
/// (thinning of the day's rate).
fn arrivals(seed: u64) -> Vec<Vec<u64>> {
    let mut rng = Rng(seed);
    (0..day_rates().len())
        .map(|i| {
            let top = day_rates()[i];
            let mut t = START as f64;
            let mut out = Vec::new();
            loop {
                t += -rng.next().ln() / top * HOUR as f64;
                if t >= END as f64 {
                    break out;
                }
                if rng.next() <= rate(i, t as u64) / top {
                    out.push(t as u64);
                }
            }
        })
        .collect()
}

/// What a run did: its requests and every listing's time to notify.
struct Week {
    requests: u64,
    delays: Vec<u64>,
}

/// What the budgeted run knows of the rates.
#[derive(Clone, Copy, PartialEq)]
enum Knowing {
    /// What it learns from its checks (the watcher's case).
    Learnt,
    /// The true rates (the best the rule can do, for comparison).
    Truth,
}

fn scheduler(interval: Duration, budget: Option<RequestBudget>) -> Scheduler {
    let config = SchedulerConfig {
        spacing: Duration::from_secs(2),
        ..SchedulerConfig::default()
    };
    let mut s = Scheduler::new(config, Registry::new(BackoffPolicy::default()), 7);
    let site = SiteKey::from_url("https://www.portal.example/").unwrap_or_else(|e| panic!("{e}"));
    s.set_budget(&site, budget);
    for i in 0..day_rates().len() {
        s.add_search(
            SearchSpec {
                id: SearchId(i as u32),
                url: format!("https://www.portal.example/search/{i}"),
                site: site.clone(),
                interval,
                first_due: None,
                pages: 1,
            },
            Timestamp(START),
        );
    }
    s
}

/// The week: checks as the scheduler issues them, each answered at once. With `plan`, every
/// search gets its share of the budget after each check (the budgeted run); `on_plan` hears
/// each plan.
fn run(
    mut s: Scheduler,
    arrivals: &[Vec<u64>],
    plan: Option<(RequestBudget, Knowing)>,
    mut on_plan: impl FnMut(u64, &[Share]),
) -> Week {
    let n = arrivals.len();
    let offset = LocalOffset(0);
    let mut last_check = vec![START; n];
    let mut next_arrival = vec![0usize; n];
    let mut models = vec![ArrivalRates::new(); n];
    let mut week = Week {
        requests: 0,
        delays: Vec::new(),
    };
    let (mut k, mut k_at) = (0.0, 0);
    let mut now = START;
    let mut due = Vec::new();
    while now < END {
        due.clear();
        s.poll_due_into(Timestamp(now), &mut due);
        for c in &due {
            week.requests += 1;
            let ids: Vec<usize> = s
                .check_searches(c.id)
                .map(|a| a.iter().map(|id| id.0 as usize).collect())
                .unwrap_or_default();
            s.handle_outcome(c.id, Outcome::Ok, None, Timestamp(now));
            for &i in &ids {
                let mut new = 0;
                while next_arrival[i] < arrivals[i].len() && arrivals[i][next_arrival[i]] <= now {
                    week.delays.push(now - arrivals[i][next_arrival[i]]);
                    next_arrival[i] += 1;
                    new += 1;
                }
                models[i].observe(Timestamp(last_check[i]), Timestamp(now), new, offset);
                last_check[i] = now;
            }
            let Some((budget, knowing)) = plan else {
                continue;
            };
            let h = offset.hour_of_week(Timestamp(now));
            // Learning, the plan is the watcher's own (notifio_policy::plan); knowing the
            // true rates, the same rule is fed them instead.
            let planned: Vec<Planned<'_>> = models
                .iter()
                .map(|m| Planned {
                    model: m,
                    pages: 1,
                    page_size: 25,
                    fastest: FASTEST,
                    slowest: SLOWEST,
                    resting: false,
                })
                .collect();
            // The week's busiest hour sets the price; worked out again every 10 minutes.
            if now >= k_at {
                k = match knowing {
                    Knowing::Truth => price(budget, day_rates().iter().map(|r| r.sqrt()).sum()),
                    Knowing::Learnt => site_price(&planned, budget),
                };
                k_at = now + 600_000;
            }
            let shares = match knowing {
                Knowing::Learnt => plan_site(&planned, budget, k, h),
                Knowing::Truth => {
                    let demands: Vec<Demand> = (0..models.len())
                        .map(|i| Demand {
                            rate: rate(i, now),
                            pages: 1,
                            page_size: 25,
                            fastest: FASTEST,
                            slowest: SLOWEST,
                        })
                        .collect();
                    allocate(&demands, budget, k)
                }
            };
            for (i, share) in shares.iter().enumerate() {
                let id = SearchId(i as u32);
                s.set_interval(id, share.interval);
                // A shorter interval applies now, as the watcher does it: the next check is
                // no later than the new interval after the last one.
                let by = last_check[i] + share.interval.as_millis() as u64;
                s.hasten(id, Timestamp(by.max(now)));
            }
            on_plan(now, &shares);
        }
        match s.poll_timeout() {
            Some(t) => now = t.0.max(now + 1),
            None => break,
        }
    }
    week
}

/// Requests per hour, mean and p90 time to notify (s), share notified within 30 s.
fn figures(w: &Week) -> [f64; 4] {
    let mut d = w.delays.clone();
    d.sort_unstable();
    let len = d.len().max(1) as f64;
    let mean = d.iter().sum::<u64>() as f64 / len / 1000.0;
    let p90 = d.get(d.len() * 9 / 10).copied().unwrap_or(0) as f64 / 1000.0;
    let within = d.iter().filter(|&&x| x <= 30_000).count() as f64 / len;
    let per_hour = w.requests as f64 / (WEEK / HOUR) as f64;
    [per_hour, mean, p90, within]
}

/// Fixed intervals that spend `requests` over the week.
fn fixed_for(requests: u64, arrivals: &[Vec<u64>]) -> Week {
    let n = day_rates().len() as f64;
    let interval = Duration::from_secs_f64(n * WEEK as f64 / 1000.0 / requests.max(1) as f64);
    run(scheduler(interval, None), arrivals, None, |_, _| {})
}

fn print_plan(label: &str, at_night: bool, shares: &[Share]) {
    println!("\nthe plan on the last day at {label} (as `notifio status` shows it):");
    println!(
        "  {:<8} {:>8} {:>10} {:>8} {:>15}",
        "search", "rate/h", "checks/h", "every", "expected delay"
    );
    for (i, sh) in shares.iter().enumerate() {
        let r = day_rates()[i] * if at_night { NIGHT_FACTOR } else { 1.0 };
        println!(
            "  #{i:<7} {r:>8.2} {:>10.1} {:>7.0}s {:>14.0}s",
            sh.checks_per_hour,
            sh.interval.as_secs_f64(),
            sh.expected_delay.as_secs_f64()
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let weeks: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);
    let per_min: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    if let Some(rates) = args.next() {
        let parsed: Result<Vec<f64>, _> = rates.split(',').map(str::parse).collect();
        match parsed {
            Ok(r) if !r.is_empty() && r.iter().all(|x| *x > 0.0) => {
                let _ = DAY_RATES.set(r);
            }
            _ => {
                eprintln!("the third argument is day rates per hour, e.g. 3,1.5,0.5: {rates:?}");
                std::process::exit(2);
            }
        }
    }
    let budget = RequestBudget {
        requests: per_min,
        per: Duration::from_secs(60),
    };
    println!(
        "one site, {} searches, day rates {:?} per hour, night (22:00-08:00) ×{NIGHT_FACTOR}; \
         budget {per_min}/min; {weeks} seeded weeks, each learnt from an empty history",
        day_rates().len(),
        day_rates()
    );
    let mut sums = [[0.0; 4]; 3];
    let mut ratios = Vec::new();
    let mut truth_ratios = Vec::new();
    for seed in 1..=weeks {
        let arrivals = arrivals(seed);
        let mut noon: Option<Vec<Share>> = None;
        let mut three: Option<Vec<Share>> = None;
        let budgeted = run(
            scheduler(FASTEST, Some(budget)),
            &arrivals,
            Some((budget, Knowing::Learnt)),
            |now, shares| {
                let hour = ((now - MONDAY) / HOUR) % 24;
                if seed == 1 && now >= END - DAY {
                    if hour == 12 && noon.is_none() {
                        noon = Some(shares.to_vec());
                    }
                    if hour == 3 && three.is_none() {
                        three = Some(shares.to_vec());
                    }
                }
            },
        );
        let fixed = fixed_for(budgeted.requests, &arrivals);
        let truth = run(
            scheduler(FASTEST, Some(budget)),
            &arrivals,
            Some((budget, Knowing::Truth)),
            |_, _| {},
        );
        let truth_fixed = fixed_for(truth.requests, &arrivals);
        let [_, bm, ..] = figures(&budgeted);
        let [_, fm, ..] = figures(&fixed);
        let [_, tm, ..] = figures(&truth);
        let [_, tfm, ..] = figures(&truth_fixed);
        let listings: usize = arrivals.iter().map(Vec::len).sum();
        println!(
            "week {seed:>2}: {listings:>4} listings, mean time to notify {bm:5.1} s against {fm:5.1} s: {:.2} (true rates: {:.2})",
            bm / fm,
            tm / tfm
        );
        ratios.push(bm / fm);
        truth_ratios.push(tm / tfm);
        for (sum, w) in sums.iter_mut().zip([&fixed, &budgeted, &truth]) {
            for (s, f) in sum.iter_mut().zip(figures(w)) {
                *s += f / weeks as f64;
            }
        }
        if let (Some(noon), Some(three)) = (&noon, &three) {
            print_plan("noon", false, noon);
            print_plan("03:00", true, three);
            println!();
        }
    }
    println!(
        "\n| run (mean of {weeks} weeks) | requests/h | mean time to notify | p90 | notified within 30 s |\n|---|---|---|---|---|"
    );
    for (label, f) in [
        ("fixed intervals, the same requests", sums[0]),
        ("budget, square-root rule, learnt", sums[1]),
        ("budget, knowing the true rates", sums[2]),
    ] {
        println!(
            "| {label} | {:.1} | {:.1} s | {:.1} s | {:.0} % |",
            f[0],
            f[1],
            f[2],
            f[3] * 100.0
        );
    }
    ratios.sort_by(f64::total_cmp);
    let mean = ratios.iter().sum::<f64>() / ratios.len().max(1) as f64;
    println!(
        "\nmean time to notify, budget / fixed: {mean:.3} over the weeks ({:.1} % lower; weeks {:.2}..{:.2}) at the same requests",
        (1.0 - mean) * 100.0,
        ratios.first().copied().unwrap_or(0.0),
        ratios.last().copied().unwrap_or(0.0)
    );
    let truth = truth_ratios.iter().sum::<f64>() / truth_ratios.len().max(1) as f64;
    println!(
        "knowing the true rates (the rule at best): {truth:.3} ({:.1} % lower); the learnt budget gets {:.0} % of that gain",
        (1.0 - truth) * 100.0,
        (1.0 - mean) / (1.0 - truth).max(1e-9) * 100.0
    );
}
