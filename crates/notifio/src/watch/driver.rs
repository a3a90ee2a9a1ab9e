//! The driver: ONE sleep, re-armed to whatever comes first (the scheduler's next deadline, the
//! journal's next flush), a channel of finished checks, a channel of slow ones, and the
//! requests a running watcher is sent (`apply`). It starts
//! what the scheduler says is due, hands every finished check to `record` (and the memory of
//! a large page it read back to the system, see `memory`), and on shutdown gives the checks
//! still out a moment to finish and be recorded.

use super::check::{Check, Done, Task};
use super::pass::Pass;
use super::{Mode, WatchError, WatchEvent, Watcher};
use crate::clock::now;
use crate::memory::Trimmer;
use crate::store::PageMemo;
use notifio_policy::CheckId;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long checks still out at shutdown may take to finish and be recorded.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(1500);

/// Where finished and slow checks come back to the driver.
struct Returns {
    done: mpsc::UnboundedSender<Done>,
    slow: mpsc::UnboundedSender<CheckId>,
}

impl Watcher {
    pub(super) async fn drive(
        &mut self,
        cancel: CancellationToken,
    ) -> Result<Vec<super::PassResult>, WatchError> {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
        let (slow_tx, mut slow_rx) = mpsc::unbounded_channel::<CheckId>();
        let returns = Returns {
            done: done_tx,
            slow: slow_tx,
        };
        let mut pass = Pass::default();
        let mut due = Vec::new();
        let mut requests = self.live.take_receiver();
        let mut trimmer = Trimmer::default();
        loop {
            if cancel.is_cancelled() {
                break;
            }
            due.clear();
            self.poll_due(&mut due)?;
            for &c in &due {
                match Check::resolve(&self.scheduler, c) {
                    Some(check) => self.start(check, &returns, &cancel)?,
                    None => self.scheduler.abandon(c.id),
                }
            }
            if self.mode == Mode::OnePass {
                let running = &self.running;
                pass.parked(
                    &self.searches,
                    &self.config.searches,
                    &self.scheduler,
                    |id| running.values().any(|c| c.searches.contains(id)),
                    now(),
                );
                if pass.has_all(self.searches.len()) && self.running.is_empty() {
                    break;
                }
            }
            let next_check = self
                .scheduler
                .poll_timeout()
                .map(|at| at.saturating_since(now()));
            let sleep = match (next_check, self.journal.flush_in()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            tokio::select! {
                () = cancel.cancelled() => break,
                Some(done) = done_rx.recv() => {
                    let read = done.fetched.body().len();
                    self.finish(done, &mut pass)?;
                    // Its page is freed now.
                    trimmer.handle_freed(read, now());
                }
                Some(id) = slow_rx.recv() => self.slow(id),
                Some(req) = super::apply::next_request(&mut requests) => self.serve(req)?,
                () = sleep_or_forever(sleep) => {
                    if self.journal.flush_in() == Some(Duration::ZERO) {
                        self.flush()?;
                    }
                }
            }
        }
        // Shutdown: let in-flight checks finish (they see the token) and record them.
        let grace = tokio::time::sleep(SHUTDOWN_GRACE);
        tokio::pin!(grace);
        while !self.running.is_empty() {
            tokio::select! {
                Some(done) = done_rx.recv() => self.finish(done, &mut pass)?,
                () = &mut grace => break,
            }
        }
        self.abandon_running()?;
        self.flush_all(true)?;
        Ok(pass.into_results())
    }

    /// Starts one due check as a task of its own.
    fn start(
        &mut self,
        check: Check,
        returns: &Returns,
        cancel: &CancellationToken,
    ) -> Result<(), WatchError> {
        // The page is read as its first search reads it (a preview's own rules only when no
        // search watches the page).
        let first = check
            .searches
            .iter()
            .find_map(|id| self.searches.get(id))
            .or_else(|| {
                check
                    .searches
                    .first()
                    .and_then(|id| self.live.preview_info(id))
            });
        let Some(first) = first else {
            self.scheduler.abandon(check.id);
            return Ok(());
        };
        let (profile, markers, has_session, via, app) = (
            Arc::clone(&first.profile),
            Arc::clone(&first.markers),
            first.has_session,
            first.fetch,
            first.app.clone(),
        );
        // Searches sharing this URL share its pages: as many as the most of them asks for.
        let pages = check
            .searches
            .iter()
            .filter_map(|id| self.searches.get(id).or_else(|| self.live.preview_info(id)))
            .map(|i| i.pages)
            .max()
            .unwrap_or(1);
        let spacing = self.scheduler.site_spacing(&check.site);
        if check.probe {
            self.record_probe(&check)?;
        }
        // Conditional, and possibly skipped as the same page, only if every search this fetch
        // answers has the same last good page: a search added later gets its own full read.
        let memos: Vec<Option<&PageMemo>> =
            check.searches.iter().map(|id| self.pages.get(id)).collect();
        let expected = match memos.first() {
            Some(Some(first))
                if memos
                    .iter()
                    .all(|m| m.is_some_and(|m| m.fingerprint == first.fingerprint)) =>
            {
                Some(first.fingerprint.clone())
            }
            _ => None,
        };
        self.announce(|| WatchEvent::CheckStarted {
            site: check.site.clone(),
            searches: self.searches.names(&check.searches),
            probe: check.probe,
        });
        self.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        self.running.insert(check.id, check.clone());
        let task = Task {
            check,
            fetcher: self.fetcher.clone(),
            profile,
            markers,
            has_session,
            via,
            app,
            expected,
            pages,
            spacing,
            slow_after: self.slow_after,
        };
        let (done, slow, cancel) = (returns.done.clone(), returns.slow.clone(), cancel.clone());
        tokio::spawn(async move {
            if let Some(finished) = task.run(&cancel, &slow).await {
                let _ = done.send(finished);
            }
        });
        Ok(())
    }

    /// A check out longer than `slow_after` gives its concurrency slot back (its site still gets
    /// nothing else until it ends).
    fn slow(&mut self, id: CheckId) {
        if self.scheduler.release_slot(id)
            && let Some(check) = self.running.get(&id)
        {
            tracing::info!(site = %check.site, after_ms = self.slow_after.as_millis() as u64, "slow check; its concurrency slot goes to the other sites");
        }
    }
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
