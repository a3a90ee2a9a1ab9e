//! `fake-portal`: runs the loopback portal until Ctrl-C/SIGTERM, for benchmarks against other
//! watchers (urlwatch, changedetection.io) and manual poking. Prints one line per site with its
//! URLs. Benchmarks script it from outside: `--script` makes every site refuse on a timeline,
//! `--render-after` and `--images` serve pages only a browser reads in full, SIGUSR1 adds a
//! listing to every search, SIGUSR2 prints what each site has served so far (the browser
//! benchmark's bytes), and `--log` writes the request log at exit.

use clap::Parser;
use fake_portal::{Behaviour, ChallengeKind, Portal, Render, SiteSpec};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

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
    /// Approximate size of a result page in bytes.
    #[arg(long, default_value_t = 300_000)]
    page_bytes: usize,
    /// Send no `ETag`/`Last-Modified` and never answer 304 (every check downloads the page).
    #[arg(long)]
    no_validators: bool,
    /// Result pages carry no cards in their HTML: a script builds them this long after the
    /// page loads (e.g. `100ms`), as single-page apps do. Plain HTTP sees none.
    #[arg(long, value_parser = parse_duration)]
    render_after: Option<Duration>,
    /// Result pages show this many images (48 KiB each, `/img/N.jpg`).
    #[arg(long, default_value_t = 0)]
    images: usize,
    /// A timeline every site follows from start, e.g. `10s=429:6,25s=challenge,40s=normal`.
    /// Kinds: `normal`, `429[:retry-after]`, `challenge[:status]` (Cloudflare, default 403),
    /// `403`, `5xx` (any status 500–599).
    #[arg(long, value_parser = parse_script)]
    script: Option<Script>,
    /// At exit, write every request as `at_ms<TAB>site<TAB>method<TAB>path<TAB>if-none-match`
    /// to this file, after a first line `# t0 <ms>` (when the portal started).
    #[arg(long)]
    log: Option<PathBuf>,
}

/// A parsed `--script` (a newtype: clap would read a bare `Vec` as a multi-value flag).
#[derive(Clone, Debug)]
struct Script(Vec<(Duration, Behaviour)>);

/// `10s=429:6,25s=challenge,40s=normal`.
fn parse_script(s: &str) -> Result<Script, String> {
    let mut steps = Vec::new();
    for step in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (at, kind) = step
            .split_once('=')
            .ok_or_else(|| format!("`{step}`: expected OFFSET=KIND, e.g. 10s=429:6"))?;
        let at = parse_duration(at)?;
        let (kind, arg) = kind.split_once(':').unwrap_or((kind, ""));
        let b = match kind {
            "normal" => Behaviour::Normal,
            "429" => Behaviour::RateLimited {
                retry_after: (!arg.is_empty()).then(|| arg.to_owned()),
            },
            "challenge" => Behaviour::Challenge(
                ChallengeKind::Cloudflare,
                if arg.is_empty() {
                    403
                } else {
                    arg.parse()
                        .map_err(|_| format!("`{step}`: `{arg}` is not a status"))?
                },
            ),
            "403" => Behaviour::Forbidden,
            code => match code.parse::<u16>() {
                Ok(c) if (500..600).contains(&c) => Behaviour::ServerError(c),
                _ => {
                    return Err(format!(
                        "`{step}`: unknown kind `{kind}` (normal, 429, challenge, 403, 5xx)"
                    ));
                }
            },
        };
        if steps.last().is_some_and(|(prev, _)| *prev > at) {
            return Err(format!("`{step}`: offsets must ascend"));
        }
        steps.push((at, b));
    }
    Ok(Script(steps))
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
            page_bytes: args.page_bytes,
            validators: !args.no_validators,
            render: args.render_after.map_or(Render::Html, Render::Script),
            images: args.images,
            ..SiteSpec::new(&format!("site{}", i + 1))
        })
        .collect();
    let portal = Portal::start(specs).await?;
    let t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    if let Some(Script(steps)) = &args.script {
        for site in portal.sites() {
            portal.set_behaviour(&site, Behaviour::Script(steps.clone()));
        }
    }
    // Every signal is listened for before the URLs are printed: a script that signals as soon
    // as it has read them must not meet the default action (which ends the process).
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    let mut term = signal(SignalKind::terminate())?;
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
    {
        let p = portal.clone();
        tokio::spawn(async move {
            while usr1.recv().await.is_some() {
                for site in p.sites() {
                    p.add_listing(&site, None);
                }
                eprintln!("SIGUSR1: one new listing on every search of every site");
            }
        });
    }
    {
        let p = portal.clone();
        tokio::spawn(async move {
            while usr2.recv().await.is_some() {
                print!("{}", served(&p));
                let _ = std::io::stdout().flush();
            }
        });
    }
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    if let Some(path) = &args.log {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(out, "# t0 {t0}")?;
        for r in portal.requests() {
            writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}",
                r.at,
                r.site,
                r.method,
                r.path,
                r.header("if-none-match").unwrap_or("-")
            )?;
        }
        out.flush()?;
    }
    portal.shutdown().await;
    Ok(())
}

/// What every site has served so far, one line each (`served SITE REQUESTS BYTES`), then
/// `served end`: response body bytes as sent (compressed when sent so), for SIGUSR2.
fn served(p: &Portal) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for site in p.sites() {
        let _ = writeln!(
            out,
            "served {site} {} {}",
            p.request_count(&site),
            p.bytes_sent(&site)
        );
    }
    out.push_str("served end\n");
    out
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, parse_script, served};
    use fake_portal::Behaviour;
    use std::time::Duration;

    #[test]
    fn scripts() {
        let s = parse_script("6s=429:6,21s=challenge,36s=normal").unwrap().0;
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[0],
            (
                Duration::from_secs(6),
                Behaviour::RateLimited {
                    retry_after: Some("6".into())
                }
            )
        );
        assert_eq!(s[2], (Duration::from_secs(36), Behaviour::Normal));
        assert!(parse_script("5s=teapot").is_err());
        assert!(parse_script("5s=normal,1s=429").is_err());
        assert!(parse_script("429").is_err());
    }

    #[tokio::test]
    async fn served_counts_each_site() {
        let portal = fake_portal::Portal::start(vec![
            fake_portal::SiteSpec::new("a"),
            fake_portal::SiteSpec::new("b"),
        ])
        .await
        .unwrap();
        let url = portal.search_url("a", "s1");
        let addr = url.trim_start_matches("http://").split('/').next().unwrap();
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(
            &mut conn,
            b"GET /search/s1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        let mut body = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut conn, &mut body)
            .await
            .unwrap();
        let text = served(&portal);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let a: Vec<&str> = lines[0].split(' ').collect();
        assert_eq!(&a[..3], ["served", "a", "1"], "{text}");
        let bytes: u64 = a[3].parse().unwrap();
        assert!(bytes > 250_000 && (bytes as usize) < body.len(), "{text}");
        assert_eq!(lines[1], "served b 0 0");
        assert_eq!(lines[2], "served end");
        portal.shutdown().await;
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10d").is_err());
    }
}
