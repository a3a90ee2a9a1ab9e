//! The sender: a task that drains the outbox, in order, with retry, and never drops a row.
//!
//! It owns its own SQLite connection to the store's WAL database, so nothing is shared across
//! tasks. A row is marked sent only after the transport accepted it; a crash between the two
//! re-sends that one row (at most one duplicate per crash). Failures are retried first on the
//! `notify` retry class (100 ms, 300 ms by default) and then on the backoff policy's `error`
//! ladder for as long as the outage lasts. The waits live in the outbox (`next_attempt_at`),
//! not in memory, so they survive restarts; the task sleeps until the next due row or a wake-up.

use super::{ChannelKind, Channels, DeliveryError, NotifyError, outbox, render};
use notifio_policy::{BackoffPolicy, RefusalKind, RetryPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::Connection;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Rows handled per pass before re-querying.
const BATCH: usize = 100;

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Rows the transports accepted.
    pub sent: usize,
    /// Rows that failed and were deferred.
    pub failed: usize,
    /// Rows still pending after the pass.
    pub pending: u64,
    /// When the next pass is worth making (epoch ms), if anything is pending.
    pub next_attempt_at: Option<u64>,
}

/// Delivers the outbox.
pub struct Sender {
    db_path: PathBuf,
    channels: Channels,
    retry: RetryPolicy,
    ladder: BackoffPolicy,
    conn: Option<Connection>,
    rng: SmallRng,
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("db_path", &self.db_path)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

/// Now as epoch milliseconds (the shell's clock).
#[must_use]
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Sender {
    /// A sender for the database at `db_path` (opened on first use). `notify_retry` is the
    /// `notify` retry class; `error_ladder` supplies the `error` ladder used once its attempts
    /// are spent.
    #[must_use]
    pub fn new(
        db_path: PathBuf,
        channels: Channels,
        notify_retry: RetryPolicy,
        error_ladder: BackoffPolicy,
    ) -> Self {
        Self {
            db_path,
            channels,
            retry: notify_retry,
            ladder: error_ladder,
            conn: None,
            rng: SmallRng::from_os_rng(),
        }
    }

    fn db_err(&self, source: rusqlite::Error) -> NotifyError {
        NotifyError::Database {
            path: self.db_path.clone(),
            source,
        }
    }

    fn conn(&mut self) -> Result<&Connection, NotifyError> {
        let conn = match self.conn.take() {
            Some(c) => c,
            None => open(&self.db_path).map_err(|e| self.db_err(e))?,
        };
        Ok(self.conn.insert(conn))
    }

    /// How long to wait after the `attempts`-th consecutive failure of a row.
    fn delay_after(&mut self, attempts: u32, err: &DeliveryError) -> Duration {
        let quick = self.retry.attempts().saturating_sub(1); // sleeps the retry class allows
        if RetryPolicy::should_retry(&err.attempt) && attempts <= quick {
            let r = self.rng.random::<f64>();
            if let Some(d) = self.retry.delay_before(attempts, r) {
                return d;
            }
        }
        // Past the quick retries (or not worth them): the error ladder, rung 1 first.
        let rung = attempts.saturating_sub(quick).max(1);
        let r = self.rng.random::<f64>();
        self.ladder.delay_for(RefusalKind::Error, rung, None, r)
    }

    /// One pass: delivers every due row in id order, deferring failures. A channel stops at its
    /// first failure so its later rows never overtake it.
    ///
    /// # Errors
    /// The database could not be opened or written.
    pub async fn drain_once(&mut self, now_ms: u64) -> Result<DrainReport, NotifyError> {
        let mut report = DrainReport::default();
        let rows = outbox::due(self.conn()?, now_ms, BATCH).map_err(|e| self.db_err(e))?;
        let mut blocked: Vec<ChannelKind> = Vec::new();
        for row in rows {
            if blocked.contains(&row.channel) {
                continue;
            }
            let result = match row.notification() {
                Ok(n) => {
                    let msg = render(&n);
                    self.channels.deliver(row.channel, &n, &msg, now_ms).await
                }
                Err(e) => Err(DeliveryError {
                    attempt: notifio_policy::AttemptResult::Invalid,
                    message: format!("unreadable outbox payload ({e}); kept for a newer version"),
                }),
            };
            match result {
                Ok(()) => {
                    outbox::mark_sent(self.conn()?, row.id, now_ms).map_err(|e| self.db_err(e))?;
                    tracing::info!(id = row.id, channel = %row.channel, "notification delivered");
                    report.sent += 1;
                }
                Err(err) => {
                    let attempts = row.attempts.saturating_add(1);
                    let delay = self.delay_after(attempts, &err);
                    let next =
                        now_ms.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
                    outbox::defer(self.conn()?, row.id, next, attempts, &err.message)
                        .map_err(|e| self.db_err(e))?;
                    tracing::warn!(
                        id = row.id,
                        channel = %row.channel,
                        attempts,
                        retry_in_ms = delay.as_millis() as u64,
                        error = %err,
                        "notification delivery failed; will retry"
                    );
                    blocked.push(row.channel);
                    report.failed += 1;
                }
            }
        }
        let conn = self.conn()?;
        let pending = outbox::pending_count(conn);
        let next = outbox::next_attempt_at(conn);
        report.pending = pending.map_err(|e| self.db_err(e))?;
        report.next_attempt_at = next.map_err(|e| self.db_err(e))?;
        Ok(report)
    }

    /// Drains until cancelled: after each pass, sleeps until the next due row or until `wake`
    /// is notified (the watch loop calls `wake.notify_one()` after committing new rows; a
    /// notification sent while the sender is busy is kept, so none is missed).
    pub async fn run(mut self, wake: Arc<Notify>, cancel: CancellationToken) {
        let mut db_failures: u32 = 0;
        loop {
            let now = now_ms();
            let pass = tokio::select! {
                () = cancel.cancelled() => return,
                r = self.drain_once(now) => r,
            };
            let sleep = match pass {
                Ok(report) => {
                    db_failures = 0;
                    report
                        .next_attempt_at
                        .map(|t| Duration::from_millis(t.saturating_sub(now_ms())))
                }
                Err(e) => {
                    db_failures = db_failures.saturating_add(1);
                    self.conn = None; // reopen next time
                    let r = self.rng.random::<f64>();
                    let d = self
                        .ladder
                        .delay_for(RefusalKind::Error, db_failures, None, r);
                    tracing::error!(error = %e, retry_in_ms = d.as_millis() as u64, "outbox pass failed");
                    Some(d)
                }
            };
            tokio::select! {
                () = cancel.cancelled() => return,
                () = wake.notified() => {}
                () = sleep_or_forever(sleep) => {}
            }
        }
    }
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Opens the database for the sender: WAL, a busy timeout (the store writes concurrently), and
/// the outbox schema (idempotent, so the sender also works on a fresh file). A new file is
/// created 0600.
fn open(path: &std::path::Path) -> rusqlite::Result<Connection> {
    #[cfg(unix)]
    if !path.exists() {
        use std::os::unix::fs::OpenOptionsExt;
        // Ignore failure here; Connection::open reports it properly.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
    }
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))?;
    // The sender touches a handful of outbox pages: a small page cache (default 2 MB).
    conn.pragma_update(None, "cache_size", -256)?;
    conn.execute_batch(outbox::SCHEMA)?;
    Ok(conn)
}
