//! What the store holds and what it is still owed: the watcher's write-behind journal.
//!
//! An ordinary check (no new page to read, no change to its site's backoff or session) writes
//! only a history row and its search's next check time. The journal keeps those in memory and
//! they go to disk together at most [`FLUSH_EVERY`] later, or in the transaction of the next
//! check that writes anything else: most checks then cost no commit of their own. A crash loses
//! at most that second of history; what politeness and delivery depend on (backoff entries,
//! listings, the outbox) is never kept back. The journal also remembers what the disk already
//! says (each search's state, the sites with nothing stored), so nothing is rewritten unchanged.
//!
//! A `check` beside a running watcher is the watcher's guest ([`Journal::guest`]): the
//! schedule on disk (sites' waits and probes, each search's state and next check, the retry
//! metrics) is the watcher's, so the guest writes none of it, only what it found.

use super::check::Check;
use crate::fetch::FetchMetrics;
use crate::store::{RoutineCheck, StoreError, Tx};
use notifio_policy::schedule::{SearchState, SiteState};
use notifio_policy::{Scheduler, SearchId, SiteKey, Timestamp};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long an ordinary check's history row and search state may wait in memory before they
/// are written (with every other one kept meanwhile, in one transaction).
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often the retry-metrics snapshot `notifio status` shows is written (not every check).
const META_EVERY: Duration = Duration::from_secs(1);

/// A search's state as stored, and its next check time.
pub(super) type StateRow = (SearchState, Option<u64>);

#[derive(Debug, Default)]
pub(super) struct Journal {
    /// The schedule on disk belongs to another process (a running watcher): write none of it.
    guest: bool,
    /// The state the store has, or is owed, per search.
    states_written: HashMap<u32, StateRow>,
    /// Sites known to have no backoff row and no expired session on disk.
    clear_sites: HashSet<SiteKey>,
    /// Owed: ordinary checks' history rows, in order.
    checks: Vec<RoutineCheck>,
    /// Owed: search states; a state written directly since replaces its entry.
    states: BTreeMap<u32, StateRow>,
    /// When the oldest owed row was kept.
    owed_since: Option<Instant>,
    /// When the metrics snapshot was last written.
    meta_written: Option<Instant>,
}

impl Journal {
    /// A journal that writes history and findings but leaves the schedule to the watcher
    /// that owns the state directory.
    pub(super) fn guest() -> Self {
        Self {
            guest: true,
            ..Self::default()
        }
    }

    /// Whether the schedule on disk is another process's (see [`Self::guest`]).
    pub(super) fn is_guest(&self) -> bool {
        self.guest
    }

    /// Whether the disk already says `site` is clear: no backoff row, no expired session (so
    /// [`Self::write_site`] would write nothing for it but search states).
    pub(super) fn site_clear_on_disk(&self, scheduler: &Scheduler, site: &SiteKey) -> bool {
        site_clear(scheduler, site) && self.clear_sites.contains(site)
    }

    /// Writes a site's registry entry and the states of its searches `ids`. The registry
    /// change reaches the disk before anything else can be sent.
    pub(super) fn write_site(
        &mut self,
        tx: &Tx<'_>,
        scheduler: &Scheduler,
        site: &SiteKey,
        ids: &[SearchId],
        now: Timestamp,
    ) -> Result<(), StoreError> {
        if self.guest {
            return Ok(());
        }
        let clear = site_clear(scheduler, site);
        if !(clear && self.clear_sites.contains(site)) {
            let registry = scheduler.registry();
            tx.save_backoff(site, registry.entry(site), registry.is_probing(site))?;
            if clear {
                // A site that answers again is no longer session-expired.
                tx.set_session_expired(site, false, now.as_millis())?;
                self.clear_sites.insert(site.clone());
            } else {
                self.clear_sites.remove(site);
            }
        }
        for &id in ids {
            let row = state_row(scheduler, id, None);
            self.write_state(tx, id, row)?;
        }
        Ok(())
    }

    /// A probe's start on disk, so status shows it and a crash mid-probe leaves the site
    /// waiting, not clear. (An ordinary check writes nothing until it finishes: its searches
    /// stay "due" on disk meanwhile, and one transaction per check is half the cost of two.)
    pub(super) fn write_probe(
        &mut self,
        tx: &Tx<'_>,
        scheduler: &Scheduler,
        check: &Check,
        started: Timestamp,
    ) -> Result<(), StoreError> {
        if self.guest {
            return Ok(());
        }
        self.clear_sites.remove(&check.site);
        tx.save_backoff(&check.site, scheduler.registry().entry(&check.site), true)?;
        for &id in check.searches.iter() {
            // A healthy search being checked right now is due now, not "unscheduled".
            let row = state_row(scheduler, id, Some(started));
            self.write_state(tx, id, row)?;
        }
        Ok(())
    }

    /// Keeps an ordinary check's history rows and its searches' states for the next flush.
    pub(super) fn keep(
        &mut self,
        checks: impl IntoIterator<Item = RoutineCheck>,
        scheduler: &Scheduler,
        ids: &[SearchId],
    ) {
        for &id in ids.iter().filter(|_| !self.guest) {
            let row = state_row(scheduler, id, None);
            if self.states_written.get(&id.0) != Some(&row) {
                self.states.insert(id.0, row);
                self.states_written.insert(id.0, row);
            }
        }
        self.checks.extend(checks);
        self.owed_since.get_or_insert_with(Instant::now);
    }

    /// When the kept rows must be written (`None`: there are none).
    pub(super) fn flush_in(&self) -> Option<Duration> {
        self.owed_since
            .map(|since| FLUSH_EVERY.saturating_sub(since.elapsed()))
    }

    /// Writes every kept row.
    pub(super) fn flush(
        &mut self,
        tx: &Tx<'_>,
        history: usize,
        gone_after: u32,
    ) -> Result<(), StoreError> {
        if self.owed_since.take().is_none() {
            return Ok(());
        }
        let checks = std::mem::take(&mut self.checks);
        let states: Vec<(u32, SearchState, Option<u64>)> = std::mem::take(&mut self.states)
            .into_iter()
            .map(|(id, (state, next))| (id, state, next))
            .collect();
        tx.record_routine(&checks, &states, history, gone_after)
    }

    /// Whether the metrics snapshot is older than [`META_EVERY`].
    pub(super) fn meta_due(&self) -> bool {
        self.meta_written.is_none_or(|t| t.elapsed() >= META_EVERY)
    }

    /// Writes the retry metrics, warnings and the budget's plan `notifio status` shows.
    pub(super) fn write_meta(
        &mut self,
        tx: &Tx<'_>,
        metrics: &FetchMetrics,
        plan: &super::PlanView,
    ) -> Result<(), StoreError> {
        self.meta_written = Some(Instant::now());
        if self.guest {
            return Ok(());
        }
        if let Ok(json) = serde_json::to_string(&metrics.snapshot()) {
            tx.put_meta("retry", &json)?;
        }
        if let Ok(json) = serde_json::to_string(&metrics.warnings()) {
            tx.put_meta("warnings", &json)?;
        }
        if let Ok(json) = serde_json::to_string(plan) {
            tx.put_meta(super::PLAN_META, &json)?;
        }
        Ok(())
    }

    /// Forgets what it kept or knows of a search taken out of the schedule (removed or
    /// paused): its state is written afresh if it comes back.
    pub(super) fn forget(&mut self, db_id: u32) {
        self.states.remove(&db_id);
        self.states_written.remove(&db_id);
    }

    /// Writes a search's state now unless that is what the disk already has.
    pub(super) fn write_state(
        &mut self,
        tx: &Tx<'_>,
        id: SearchId,
        row: StateRow,
    ) -> Result<(), StoreError> {
        if !self.guest && self.states_written.get(&id.0) != Some(&row) {
            // Newer than any kept state of this search, which must not overwrite it later.
            self.states.remove(&id.0);
            tx.set_search_state(id.0, row.0, row.1)?;
            self.states_written.insert(id.0, row);
        }
        Ok(())
    }
}

/// Whether nothing about `site` needs storing: no entry, no probe out, no expired session.
fn site_clear(scheduler: &Scheduler, site: &SiteKey) -> bool {
    let registry = scheduler.registry();
    registry.entry(site).is_none()
        && !registry.is_probing(site)
        && scheduler.site_state(site) != SiteState::SessionExpired
}

/// A search's state row as the scheduler sees it; `due_now` stands in for a healthy search's
/// missing next check time.
fn state_row(scheduler: &Scheduler, id: SearchId, due_now: Option<Timestamp>) -> StateRow {
    let (state, next) = scheduler
        .search_state(id)
        .unwrap_or((SearchState::Ok, None));
    let next = if state == SearchState::Ok {
        next.or(due_now)
    } else {
        next
    };
    (state, next.map(Timestamp::as_millis))
}
