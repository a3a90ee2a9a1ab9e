//! What `watch` (and the demo) say while they work: one short line per baseline, new listing,
//! listing held back by a search's filters, price drop, refusal, probe and recovery, on stdout.
//!
//! A newcomer must be able to tell that a search was checked and what came of it without
//! opening the dashboard; the demo tells its story with the same lines, so what it shows is
//! what `watch` says. `watch -q` keeps only what is announced (new listings, price drops).

use crate::listing::Listing;
use crate::runner::Narrator;
use crate::watch::WatchEvent;
use notifio_policy::{Reaction, SiteKey, format_duration};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// How the lines are worded.
#[derive(Clone, Debug, Default)]
pub struct Narration {
    /// What to call each site (by site key, e.g. `rentals-demo (127.0.0.1:41233)`); a site
    /// not named here is called by its key.
    pub site_names: HashMap<String, String>,
    /// Where notifications land, said after each announced line (the demo's mailbox).
    pub delivered_to: Option<PathBuf>,
    /// Only what is announced: new listings and price drops.
    pub quiet: bool,
}

/// `HH:MM:SS` (UTC) of a time in milliseconds since the Unix epoch.
fn time_of_day(ms: u64) -> String {
    let secs = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60
    )
}

/// `, 1610 EUR`, or nothing when the card showed no price.
fn price(l: &Listing) -> String {
    l.price
        .map(|p| format!(", {p:.0} {}", l.currency.as_deref().unwrap_or("")))
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default()
}

impl Narration {
    fn site(&self, site: &SiteKey) -> String {
        self.site_names
            .get(site.as_str())
            .cloned()
            .unwrap_or_else(|| site.to_string())
    }

    fn delivered(&self) -> String {
        self.delivered_to
            .as_ref()
            .map(|p| format!("  → {}", p.display()))
            .unwrap_or_default()
    }

    /// The lines an event is told in (none for most).
    #[must_use]
    pub fn lines(&self, ev: &WatchEvent) -> Vec<String> {
        let mut out = Vec::new();
        match ev {
            WatchEvent::CheckStarted {
                site,
                searches,
                probe: true,
            } if !self.quiet => out.push(format!(
                "probe sent to {}: \"{}\" goes first; its siblings stay parked",
                self.site(site),
                searches.join("\", \"")
            )),
            WatchEvent::CheckDone {
                site,
                searches,
                listings,
                new,
                held_back,
                baseline,
                price_changes,
                price_changed,
                ..
            } => {
                let names = searches.join("\", \"");
                if *baseline && new.is_empty() && held_back.is_empty() && !self.quiet {
                    out.push(format!(
                        "baseline for \"{names}\" on {}: {listings} listings recorded silently",
                        self.site(site),
                    ));
                }
                for l in new {
                    out.push(format!(
                        "new listing on {} for \"{names}\": {}{}{}",
                        self.site(site),
                        l.title.as_deref().unwrap_or(&l.id),
                        price(l),
                        self.delivered()
                    ));
                }
                if !self.quiet {
                    for l in held_back {
                        out.push(format!(
                            "held back by the filters of \"{names}\" on {}: {}{} (recorded, not announced)",
                            self.site(site),
                            l.title.as_deref().unwrap_or(&l.id),
                            price(l),
                        ));
                    }
                }
                // Drops are what searches announce by default; a rise is not told here.
                for c in price_changes.iter().filter(|c| c.is_drop()) {
                    let flat = price_changed
                        .iter()
                        .find(|l| l.id == c.id)
                        .and_then(|l| l.title.clone())
                        .unwrap_or_else(|| format!("listing {}", c.id));
                    out.push(format!(
                        "price dropped on {} for \"{names}\": {flat}, {}{}",
                        self.site(site),
                        crate::notify::message::price_change(c)
                            .trim_start_matches("Price dropped: "),
                        self.delivered()
                    ));
                }
            }
            WatchEvent::Reaction(Reaction::SiteWaiting {
                site,
                entry,
                searches,
            }) if !self.quiet => {
                let ra = entry
                    .retry_after
                    .map(|d| {
                        format!(
                            ", Retry-After {}",
                            format_duration(Duration::from_secs(d.as_secs()))
                        )
                    })
                    .unwrap_or_default();
                let who = if *searches == 1 {
                    "its search waits".to_owned()
                } else {
                    format!("all {searches} searches wait")
                };
                out.push(format!(
                    "{} refused ({}{ra}): {who} until {} (rung {})",
                    self.site(site),
                    entry.kind,
                    time_of_day(entry.next_retry_at.as_millis()),
                    entry.failures
                ));
            }
            WatchEvent::Reaction(Reaction::SiteCleared { site, .. }) if !self.quiet => {
                out.push(format!(
                    "{} clear: the probe succeeded; siblings resume, spaced out",
                    self.site(site)
                ));
            }
            WatchEvent::Reaction(Reaction::SessionExpired { site }) if !self.quiet => {
                out.push(format!(
                    "{}: session expired — log in again (`notifio login {site}`) or export fresh cookies",
                    self.site(site)
                ));
            }
            _ => {}
        }
        out
    }
}

/// A narrator that prints each event's lines on stdout, each after the time of day.
#[must_use]
pub fn narrator(narration: Narration) -> Narrator {
    Box::new(move |ev| {
        let lines = narration.lines(ev);
        if lines.is_empty() {
            return;
        }
        let now = time_of_day(crate::clock::now().as_millis());
        let mut out = std::io::stdout().lock();
        for l in lines {
            // Titles and ids are the sites' text: shown, never obeyed (terminal.rs).
            let _ = writeln!(out, "{now} {}", crate::terminal::line(&l));
        }
        let _ = out.flush();
    })
}
