//! `fake-portal`: runs the loopback portal until Ctrl-C, for benchmarks against other watchers
//! (urlwatch, changedetection.io) and manual poking. Prints one line per site with its URL.

use clap::Parser;
use fake_portal::{Portal, SiteSpec};
use std::time::Duration;

/// A scriptable rental portal on 127.0.0.1.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Number of sites (one port each).
    #[arg(long, default_value_t = 2)]
    sites: usize,
    /// Searches per site (printed as URLs; any search name works).
    #[arg(long, default_value_t = 3)]
    searches: usize,
    /// First port; site i listens on port-base + i. Default: free ports.
    #[arg(long)]
    port_base: Option<u16>,
    /// Add a new listing to one search of every site at this interval (e.g. `10s`, `500ms`).
    #[arg(long, value_parser = parse_duration)]
    new_every: Option<Duration>,
    /// Service latency per request (e.g. `20ms`).
    #[arg(long, value_parser = parse_duration, default_value = "0ms")]
    latency: Duration,
    /// Probability of a random 503 per request.
    #[arg(long, default_value_t = 0.0)]
    fault_rate: f64,
}

/// `500ms`, `10s`, `2m`, `1h`. Hand-written: four units are not worth a dependency.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{s}` needs a unit: ms, s, m or h"))?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 10s"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let specs: Vec<SiteSpec> = (0..args.sites)
        .map(|i| SiteSpec {
            port: args
                .port_base
                .map(|p| p.saturating_add(u16::try_from(i).unwrap_or(u16::MAX))),
            latency: args.latency,
            fault_rate: args.fault_rate,
            ..SiteSpec::new(&format!("site{}", i + 1))
        })
        .collect();
    let portal = Portal::start(specs).await?;
    let searches: Vec<String> = (1..=args.searches).map(|i| format!("s{i}")).collect();
    for site in portal.sites() {
        let urls: Vec<String> = searches
            .iter()
            .map(|s| portal.search_url(&site, s))
            .collect();
        println!("{site} {} {}", portal.base_url(&site), urls.join(" "));
    }
    if let Some(every) = args.new_every {
        let p = portal.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            let mut i = 0usize;
            loop {
                tick.tick().await;
                for site in p.sites() {
                    let search = searches.get(i % searches.len().max(1)).map(String::as_str);
                    let l = p.add_listing(&site, search);
                    let search = search.unwrap_or("*");
                    eprintln!("{site}/{search}: new listing {} ({})", l.id, l.title);
                }
                i += 1;
            }
        });
    }
    tokio::signal::ctrl_c().await?;
    portal.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10d").is_err());
    }
}
