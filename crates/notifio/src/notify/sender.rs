//! The sender: a task that drains the outbox, each channel in order and all channels at once,
//! with retry, and never drops a row.
//!
//! It owns its own SQLite connection to the store's WAL database, so nothing is shared across
//! tasks. A row is marked sent only after the transport accepted it; a crash between the two
//! re-sends that one row (at most one duplicate per crash per channel). Channels are delivered
//! concurrently, so one that hangs or waits never delays another. Failures are retried first on
//! the `notify` retry class (100 ms, 300 ms by default; the fetcher makes them for the HTTP
//! channels) and then on the backoff policy's `error` ladder for as long as the outage lasts; a
//! wait the service asks for (a 429's `retry_after`) is honoured, capped at `max_wait`. A
//! permanent failure (a bad token) holds its channel's rows until the next start, and is logged
//! once. The waits live in the outbox (`next_attempt_at`), not in memory, so they survive
//! restarts; the task sleeps until the next due row or a wake-up.

use super::{
    ChannelName, Channels, Delivery, DeliveryError, NotifyError, OutboxRow, outbox, render,
};
use notifio_policy::{BackoffPolicy, RefusalKind, RetryPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rusqlite::Connection;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The store's `meta` key under which the sender records the configured channels' names (for
/// `status`, which reads the store, not the config's secrets).
pub const CHANNELS_META: &str = "channels";

/// Rows handled per pass before re-querying.
const BATCH: usize = 100;

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Rows the transports accepted.
    pub sent: usize,
    /// Rows that failed and were deferred or held.
    pub failed: usize,
    /// Of those, rows that failed permanently: their channel is held until the next start.
    pub held: usize,
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
    /// Held channels were released once (at this sender's first pass).
    released: bool,
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("db_path", &self.db_path)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
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
            released: false,
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
        let max = self.ladder.max_wait();
        // A rate limit that says how long: exactly that (the service knows; capped).
        if let (notifio_policy::AttemptResult::Status(429), Some(wait)) =
            (err.attempt, err.retry_after)
        {
            return wait.min(max);
        }
        let quick = if err.retried {
            0 // the transport made them already
        } else {
            self.retry.attempts().saturating_sub(1) // sleeps the retry class allows
        };
        let base = if RetryPolicy::should_retry(&err.attempt) && attempts <= quick {
            let r = self.rng.random::<f64>();
            self.retry.delay_before(attempts, r)
        } else {
            None
        };
        let base = base.unwrap_or_else(|| {
            // Past the quick retries (or not worth them): the error ladder, rung 1 first.
            let rung = attempts.saturating_sub(quick).max(1);
            let r = self.rng.random::<f64>();
            self.ladder.delay_for(RefusalKind::Error, rung, None, r)
        });
        // A Retry-After can lengthen the wait, never shorten it.
        base.max(err.retry_after.unwrap_or_default()).min(max)
    }

    /// One pass: delivers every due row, each channel in id order and the channels at once,
    /// deferring failures. A channel stops at its first failure so its later rows never
    /// overtake it.
    ///
    /// # Errors
    /// The database could not be opened or written.
    pub async fn drain_once(&mut self, now_ms: u64) -> Result<DrainReport, NotifyError> {
        let mut report = DrainReport::default();
        if !self.released {
            let names: Vec<String> = self
                .channels
                .names()
                .iter()
                .map(|n| n.to_string())
                .collect();
            if let Ok(json) = serde_json::to_string(&names) {
                // The meta table is the store's; a bare outbox file (tests) has none.
                let _ = self.conn()?.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
                    [CHANNELS_META, json.as_str()],
                );
            }
            let n = outbox::release_held(self.conn()?).map_err(|e| self.db_err(e))?;
            if n > 0 {
                tracing::info!(
                    rows = n,
                    "giving channels that failed permanently one more try"
                );
            }
            self.released = true;
        }
        let rows = outbox::due(self.conn()?, now_ms, BATCH).map_err(|e| self.db_err(e))?;
        let mut by_channel: Vec<(ChannelName, Vec<OutboxRow>)> = Vec::new();
        for row in rows {
            match by_channel.iter_mut().find(|(c, _)| *c == row.channel) {
                Some((_, list)) => list.push(row),
                None => by_channel.push((row.channel.clone(), vec![row])),
            }
        }
        let Some(conn) = self.conn.take() else {
            return Err(self.db_err(rusqlite::Error::InvalidQuery));
        };
        let conn = Mutex::new(conn);
        let channels = &self.channels;
        let passes = by_channel
            .into_iter()
            .map(|(_, rows)| deliver_channel(channels, rows, &conn, now_ms));
        let results = futures_util::future::join_all(passes).await;
        self.conn = Some(conn.into_inner().unwrap_or_else(PoisonError::into_inner));
        for pass in results {
            let pass = pass.map_err(|e| self.db_err(e))?;
            report.sent += pass.sent;
            let Some((row, err)) = pass.failed else {
                continue;
            };
            let attempts = row.attempts.saturating_add(1);
            report.failed += 1;
            if err.permanent {
                outbox::hold(self.conn()?, row.id, now_ms, attempts, &err.message)
                    .map_err(|e| self.db_err(e))?;
                tracing::error!(
                    id = row.id,
                    channel = %row.channel,
                    error = %err,
                    "notification channel failed permanently; its messages wait until notifio starts again"
                );
                report.held += 1;
                continue;
            }
            let delay = self.delay_after(attempts, &err);
            let next = now_ms.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
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
            let now = crate::clock::now().as_millis();
            let pass = tokio::select! {
                () = cancel.cancelled() => return,
                r = self.drain_once(now) => r,
            };
            let sleep = match pass {
                Ok(report) => {
                    db_failures = 0;
                    report.next_attempt_at.map(|t| {
                        Duration::from_millis(t.saturating_sub(crate::clock::now().as_millis()))
                    })
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

/// Sends one test message (a made-up listing) to each of `names` at once, straight through
/// their transports (not the outbox): what `notifio notify test` prints.
pub async fn send_test(
    channels: &Channels,
    names: &[ChannelName],
    now_ms: u64,
) -> Vec<(ChannelName, Result<(), DeliveryError>)> {
    let n = super::Notification::NewListings {
        site: "notifio".to_owned(),
        searches: vec!["notifio notify test".to_owned()],
        listings: vec![crate::listing::Listing {
            id: "test".to_owned(),
            title: Some("Test message from notifio: this channel works".to_owned()),
            price: Some(1234.0),
            currency: Some("EUR".to_owned()),
            rooms: Some(3.0),
            area_m2: Some(85.0),
            url: Some("https://example.com/notifio-test".to_owned()),
            image: None,
            description: None,
        }],
        found_at: now_ms,
        also_on: Vec::new(),
    };
    let msg = render(&n);
    let delivery = Delivery {
        id: 0,
        created_at: now_ms,
        parts_sent: 0,
        now_ms,
    };
    let sends = names.iter().map(|name| {
        let (n, msg, delivery) = (&n, &msg, &delivery);
        async move {
            let result = match channels.get(name) {
                Some(c) => c.deliver(n, msg, delivery, &|_| {}).await,
                None => Err(DeliveryError::new(
                    notifio_policy::AttemptResult::Invalid,
                    format!("no channel `{name}` is configured"),
                )),
            };
            (name.clone(), result)
        }
    });
    futures_util::future::join_all(sends).await
}

/// What one channel's share of a pass did.
struct ChannelPass {
    sent: usize,
    /// The row that failed (its channel stopped there) and why.
    failed: Option<(OutboxRow, DeliveryError)>,
}

/// Delivers one channel's due rows in order, marking each sent (and each part of a split one)
/// as soon as the service accepted it; stops at the first failure.
async fn deliver_channel(
    channels: &Channels,
    rows: Vec<OutboxRow>,
    conn: &Mutex<Connection>,
    now_ms: u64,
) -> rusqlite::Result<ChannelPass> {
    let lock = || conn.lock().unwrap_or_else(PoisonError::into_inner);
    let mut pass = ChannelPass {
        sent: 0,
        failed: None,
    };
    for row in rows {
        let result = match (row.notification(), channels.get(&row.channel)) {
            (Ok(n), Some(channel)) => {
                let msg = render(&n);
                let delivery = Delivery {
                    id: row.id,
                    created_at: row.created_at,
                    parts_sent: row.parts_sent,
                    now_ms,
                };
                let part_error = Mutex::new(None);
                let on_part = |parts: u32| {
                    if let Err(e) = outbox::mark_parts_sent(&lock(), row.id, parts) {
                        *part_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    }
                };
                let r = channel.deliver(&n, &msg, &delivery, &on_part).await;
                if let Some(e) = part_error
                    .into_inner()
                    .unwrap_or_else(PoisonError::into_inner)
                {
                    return Err(e);
                }
                r
            }
            (Ok(_), None) => Err(DeliveryError::new(
                notifio_policy::AttemptResult::Invalid,
                format!(
                    "the {} channel is no longer configured; the row waits for it",
                    row.channel
                ),
            )),
            (Err(e), _) => Err(DeliveryError::new(
                notifio_policy::AttemptResult::Invalid,
                format!("unreadable outbox payload ({e}); kept for a newer version"),
            )),
        };
        match result {
            Ok(()) => {
                outbox::mark_sent(&lock(), row.id, now_ms)?;
                tracing::info!(id = row.id, channel = %row.channel, "notification delivered");
                pass.sent += 1;
            }
            Err(err) => {
                pass.failed = Some((row, err));
                break;
            }
        }
    }
    Ok(pass)
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
    outbox::set_journal(&conn)?;
    // The sender touches a handful of outbox pages: a small page cache (default 2 MB).
    conn.pragma_update(None, "cache_size", -256)?;
    conn.execute_batch(outbox::SCHEMA)?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sender's connection syncs like the store's: WAL with `synchronous = NORMAL`, so a
    /// delivered notification costs no fsync, and the outbox schema is there on a new file,
    /// created private.
    #[test]
    fn the_senders_connection_is_wal_without_a_sync_per_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.db");
        let conn = open(&path).unwrap();
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        let sync: i64 = conn
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!((mode.as_str(), sync), ("wal", 1), "1 is NORMAL");
        assert_eq!(outbox::pending_count(&conn).unwrap(), 0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let perms = std::fs::metadata(&path).unwrap().permissions();
            assert_eq!(perms.mode() & 0o777, 0o600);
        }
    }
}
