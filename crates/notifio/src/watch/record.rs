//! What a finished check writes, and what it sets off.
//!
//! Everything a check writes is one transaction ([`Store::transaction`]): the rows the journal
//! kept back, the site's registry entry and its searches' states (before anything else can be
//! sent), the check with its listings and their notifications, the page's memo, and news about
//! the site (blocked for long, session expired). Only after the commit does the check touch the
//! world: the fetcher opens or closes the site, the sender is woken, events go out. An ordinary
//! check (nothing new to read, nothing changed about its site) writes nothing: the journal
//! keeps its rows for the next transaction.
//!
//! [`Store::transaction`]: crate::store::Store::transaction

use super::check::{Check, Done};
use super::pass::Pass;
use super::setup::{SearchInfo, Searches};
use super::{BLOCKED_ALERT_AFTER, Mode, WatchError, WatchEvent, Watcher};
use crate::clock::now;
use crate::config::Config;
use crate::fetch::{FetchMode, Fetcher};
use crate::filter::AnnounceRules;
use crate::notify::{ChannelName, Notification};
use crate::store::{CheckRecord, PageMemo, Recorded, RoutineCheck, StoreError, Tx};
use notifio_policy::{Outcome, Reaction, SearchId, Timestamp};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Watcher {
    /// Records a finished check and acts on what the scheduler made of it.
    pub(super) fn finish(&mut self, done: Done, pass: &mut Pass) -> Result<(), WatchError> {
        self.running.remove(&done.check.id);
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        let t = now();
        // Every request after the first counts against the site's budget, and a check that
        // sent several is spaced from its last, not its first.
        for &at in &done.sent {
            self.scheduler.handle_request_sent(done.check.id, at);
        }
        self.share_requests(&done.check.site, &done.sent)?;
        let reaction = if done.fetched.is_deferred() {
            // Notifio's own budget held a redirect back: not the site's doing.
            self.scheduler.handle_deferred(done.check.id, t)
        } else {
            self.scheduler.handle_outcome(
                done.check.id,
                done.outcome,
                done.fetched.retry_after(),
                t,
            )
        };
        self.after_check(&done);
        let ordinary = reaction.is_none()
            && done.listings.is_none()
            && self
                .journal
                .site_clear_on_disk(&self.scheduler, &done.check.site);
        let recorded = if ordinary {
            self.keep(&done, t);
            if self.journal.flush_in() == Some(Duration::ZERO) {
                self.flush()?;
            }
            Recorded::default()
        } else {
            self.record(&done, reaction.as_ref(), t)?
        };
        forget_bad_page(&self.fetcher, &self.pages, &done);
        self.count(&done, &recorded);
        self.learn(&done, &recorded, t);
        if let Some(reaction) = reaction {
            self.react(&reaction);
            self.announce(|| WatchEvent::Reaction(reaction));
        }
        self.announce(|| check_done(&done, &recorded, &self.searches));
        if self.mode == Mode::OnePass {
            pass.checked(&done, &recorded, &self.searches, &self.scheduler);
        }
        Ok(())
    }

    /// An ordinary check's rows go to the journal.
    fn keep(&mut self, done: &Done, t: Timestamp) {
        let Done {
            check,
            outcome,
            fetched,
            same_page,
            ..
        } = done;
        // The page as it was: a 304, or the same bytes as the last good one.
        let read_page = *same_page || *outcome == Outcome::Unchanged;
        let latency_ms = u64::try_from(fetched.latency.as_millis()).unwrap_or(u64::MAX);
        let rows = check
            .searches
            .iter()
            .filter_map(|id| self.searches.get(id))
            .map(|s| RoutineCheck {
                search_id: s.db_id,
                at: t.as_millis(),
                outcome: *outcome,
                status: fetched.status(),
                attempts: fetched.attempts,
                latency_ms,
                read_page,
            });
        self.journal
            .keep(rows, &self.scheduler, self.searches.on_site(&check.site));
    }

    /// Every write a check causes, in one transaction; the sender is woken after the commit
    /// when a notification was enqueued (woken earlier, it would look before the row is
    /// visible and go back to sleep).
    fn record(
        &mut self,
        done: &Done,
        reaction: Option<&Reaction>,
        t: Timestamp,
    ) -> Result<Recorded, WatchError> {
        let history = self.config.watch.history;
        let gone_after = self.config.watch.gone_after;
        let site = &done.check.site;
        let (recorded, told) = self.store.transaction(|tx| {
            self.journal.flush(tx, history, gone_after)?;
            self.journal
                .write_site(tx, &self.scheduler, site, self.searches.on_site(site), t)?;
            let recorded = record_check(tx, &self.searches, done, t, (history, gone_after))?;
            remember_page(tx, &mut self.pages, &self.searches, done)?;
            // News about a site is told by the run that owns its schedule.
            let told = match reaction {
                Some(r) if !self.journal.is_guest() => {
                    site_news(tx, r, &self.searches, &self.config, t)?
                }
                _ => false,
            };
            if !self.journal.is_guest() {
                self.plans.save(tx, t, false)?;
            }
            if self.journal.meta_due() {
                let plan = self
                    .plans
                    .view(&self.searches, &self.config, &self.scheduler, t);
                self.journal.write_meta(tx, self.fetcher.metrics(), &plan)?;
            }
            Ok::<_, StoreError>((recorded, told))
        })?;
        if recorded.enqueued || told {
            self.outbox_wake.notify_one();
        }
        Ok(recorded)
    }

    /// Writes the rows the journal kept, the models that learnt something, and the metrics
    /// snapshot; every model with `all` (shutdown).
    pub(super) fn flush_all(&mut self, all: bool) -> Result<(), WatchError> {
        let history = self.config.watch.history;
        let gone_after = self.config.watch.gone_after;
        let t = now();
        let plan = self
            .plans
            .view(&self.searches, &self.config, &self.scheduler, t);
        Ok(self.store.transaction(|tx| {
            self.journal.flush(tx, history, gone_after)?;
            if !self.journal.is_guest() {
                self.plans.save(tx, t, all)?;
            }
            self.journal.write_meta(tx, self.fetcher.metrics(), &plan)
        })?)
    }

    /// Writes the rows the journal kept, and the metrics snapshot.
    pub(super) fn flush(&mut self) -> Result<(), WatchError> {
        self.flush_all(false)
    }

    /// What a good check teaches about its searches' arrival rates, and its site's new plan
    /// when it has a budget (see `budget`). A preview's search teaches nothing.
    fn learn(&mut self, done: &Done, recorded: &Recorded, t: Timestamp) {
        // A held redirect read nothing of the page: it says nothing about new listings.
        if !matches!(done.outcome, Outcome::Ok | Outcome::Unchanged) {
            return;
        }
        let page_size = done
            .page_ends
            .first()
            .copied()
            .or_else(|| done.listings.as_ref().map(Vec::len))
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        for id in done.check.searches.iter() {
            let Some(info) = self.searches.get(id) else {
                continue;
            };
            let new = recorded
                .new
                .iter()
                .filter(|l| info.rules.filters.matches(l))
                .count();
            let new = u32::try_from(new).unwrap_or(u32::MAX);
            let baseline = recorded.baseline && !info.notify_existing;
            let db_id = info.db_id;
            self.plans.observe(db_id, t, new, page_size, baseline);
            if new > 0 {
                self.plans.save_soon(db_id);
            }
        }
        let site = done.check.site.clone();
        self.plans
            .replan(&site, &self.searches, &self.config, &mut self.scheduler, t);
    }

    /// A probe's start on disk (see [`super::journal::Journal::write_probe`]).
    pub(super) fn record_probe(&mut self, check: &Check) -> Result<(), WatchError> {
        Ok(self
            .store
            .transaction(|tx| self.journal.write_probe(tx, &self.scheduler, check, now()))?)
    }

    /// At shutdown: the checks still out are given back to the scheduler, and their sites'
    /// states written as the scheduler now sees them.
    pub(super) fn abandon_running(&mut self) -> Result<(), WatchError> {
        let running = std::mem::take(&mut self.running);
        for id in running.keys() {
            self.scheduler.abandon(*id);
        }
        let t = now();
        Ok(self.store.transaction(|tx| {
            for check in running.values() {
                let site = &check.site;
                self.journal.write_site(
                    tx,
                    &self.scheduler,
                    site,
                    self.searches.on_site(site),
                    t,
                )?;
            }
            Ok::<_, StoreError>(())
        })?)
    }

    /// What the check's outcome means for the fetcher and the log.
    fn react(&self, reaction: &Reaction) {
        match reaction {
            Reaction::SiteWaiting { site, entry, .. } => {
                tracing::warn!(site = %site, kind = %entry.kind, failures = entry.failures, until = %notifio_policy::format_time_of_day(entry.next_retry_at), "site refused; all its searches wait");
                self.fetcher.close_site(site.clone());
            }
            Reaction::SiteCleared { site, .. } => {
                tracing::info!(site = %site, "site clear again");
                self.fetcher.open_site(site);
            }
            Reaction::SessionExpired { site } => {
                tracing::warn!(site = %site, "session expired; log in again (notifio login, or fresh cookies)");
                self.fetcher.close_site(site.clone());
            }
            Reaction::SearchGone { .. } => {}
        }
    }

    /// The `/metrics` counters, and a note when listings came back under new ids.
    fn count(&self, done: &Done, recorded: &Recorded) {
        if let Ok(mut m) = self.metrics.checks.lock() {
            *m.entry(done.outcome.reported()).or_default() += 1;
        }
        self.metrics
            .listings_found
            .fetch_add(recorded.new.len() as u64, Ordering::Relaxed);
        if recorded.rekeyed > 0 {
            tracing::info!(site = %done.check.site, listings = recorded.rekeyed, "listings known by their links came back under new ids; not announced");
        }
    }
}

/// The check with its listings, which of them are new, and their notifications.
fn record_check(
    tx: &Tx<'_>,
    searches: &Searches,
    done: &Done,
    t: Timestamp,
    (history, gone_after): (usize, u32),
) -> Result<Recorded, StoreError> {
    let Done {
        check,
        outcome,
        fetched,
        listings,
        page_ends,
        ..
    } = done;
    let infos: Vec<&SearchInfo> = check
        .searches
        .iter()
        .filter_map(|id| searches.get(id))
        .collect();
    let search_rows: Vec<(u32, String, bool)> = infos
        .iter()
        .map(|s| (s.db_id, s.name.clone(), s.notify_existing))
        .collect();
    let routes: Vec<Vec<ChannelName>> = infos.iter().map(|s| s.channels.clone()).collect();
    let rules: Vec<&AnnounceRules> = infos.iter().map(|s| &*s.rules).collect();
    tx.record_check(&CheckRecord {
        searches: &search_rows,
        site: &check.site,
        outcome: *outcome,
        status: fetched.status(),
        attempts: fetched.attempts,
        latency_ms: u64::try_from(fetched.latency.as_millis()).unwrap_or(u64::MAX),
        listings: listings.as_deref(),
        pages: page_ends,
        now: t.as_millis(),
        channels: &routes,
        history,
        rules: &rules,
        gone_after,
    })
}

/// A page judged good (and read) becomes its searches' memo: its fingerprint and validators.
fn remember_page(
    tx: &Tx<'_>,
    pages: &mut HashMap<SearchId, PageMemo>,
    searches: &Searches,
    done: &Done,
) -> Result<(), StoreError> {
    let (Outcome::Ok, Some(_), Some(fingerprint)) =
        (done.outcome, &done.listings, &done.fingerprint)
    else {
        return Ok(());
    };
    let memo = PageMemo {
        fingerprint: fingerprint.clone(),
        etag: done.fetched.header("etag").map(str::to_owned),
        last_modified: done.fetched.header("last-modified").map(str::to_owned),
    };
    // Only the searches the watcher keeps: a preview's page is shown, not remembered.
    for id in done.check.searches.iter() {
        if pages.get(id) != Some(&memo)
            && let Some(info) = searches.get(id)
        {
            tx.set_page_memo(info.db_id, &memo)?;
            pages.insert(*id, memo.clone());
        }
    }
    Ok(())
}

/// A 2xx that was not judged good must not be what a later 304 vouches for: the fetcher goes
/// back to the validators of the last good page.
fn forget_bad_page(fetcher: &Fetcher, pages: &HashMap<SearchId, PageMemo>, done: &Done) {
    let fetched = &done.fetched;
    let ok_2xx =
        fetched.failure().is_none() && fetched.status().is_some_and(|s| (200..300).contains(&s));
    if ok_2xx && !matches!(done.outcome, Outcome::Ok | Outcome::Unchanged) {
        let memo = done.check.searches.first().and_then(|id| pages.get(id));
        fetcher.set_validators(
            &done.check.url,
            memo.and_then(|m| m.etag.clone()),
            memo.and_then(|m| m.last_modified.clone()),
        );
    }
}

/// What the user is told about a site, once per episode each: that it has refused for longer
/// than [`BLOCKED_ALERT_AFTER`], or that its session expired. Whether a notification was
/// enqueued.
fn site_news(
    tx: &Tx<'_>,
    reaction: &Reaction,
    searches: &Searches,
    config: &Config,
    t: Timestamp,
) -> Result<bool, StoreError> {
    let (site, news) = match reaction {
        Reaction::SiteWaiting { site, entry, .. }
            if t.saturating_since(entry.since) >= BLOCKED_ALERT_AFTER
                && tx.claim_blocked_alert(site, entry.since.as_millis())? =>
        {
            let news = Notification::SiteBlocked {
                site: site.to_string(),
                kind: entry.kind,
                since: entry.since.as_millis(),
                searches: searches.names(searches.on_site(site)),
            };
            (site, news)
        }
        Reaction::SessionExpired { site }
            if tx.set_session_expired(site, true, t.as_millis())? =>
        {
            let login = searches
                .on_site(site)
                .first()
                .and_then(|id| searches.get(id))
                .is_some_and(|s| s.fetch == FetchMode::Browser);
            let cookies_path = config
                .sites
                .get(site.as_str())
                .and_then(|s| s.cookies.as_ref())
                .map(|p| p.display().to_string());
            let news = Notification::SessionExpired {
                site: site.to_string(),
                cookies_path: if login { None } else { cookies_path },
                login,
            };
            (site, news)
        }
        _ => return Ok(false),
    };
    tx.enqueue(&news, &searches.site_channels(site), t.as_millis())?;
    Ok(true)
}

/// The event for a finished check; a baseline's listings are not "new".
fn check_done(done: &Done, recorded: &Recorded, searches: &Searches) -> WatchEvent {
    use crate::listing::Listing;
    let listings = done.listings.as_ref().map_or(0, Vec::len);
    let matched = |l: &Listing| {
        done.check
            .searches
            .iter()
            .any(|id| searches.get(id).is_some_and(|s| s.rules.filters.matches(l)))
    };
    let (new, held_back): (Vec<Listing>, Vec<Listing>) =
        if recorded.baseline && recorded.new.len() == listings {
            (Vec::new(), Vec::new())
        } else {
            recorded.new.iter().cloned().partition(|l| matched(l))
        };
    let on_page = done.listings.as_deref().unwrap_or_default();
    WatchEvent::CheckDone {
        site: done.check.site.clone(),
        searches: searches.names(&done.check.searches),
        outcome: done.outcome,
        status: done.fetched.status(),
        listings,
        new,
        held_back,
        baseline: recorded.baseline,
        price_changes: recorded.changes.clone(),
        price_changed: recorded
            .changes
            .iter()
            .filter_map(|c| on_page.iter().find(|l| l.id == c.id).cloned())
            .collect(),
    }
}
