//! The sender: drains the outbox, each channel on its own, in order, with retry, and never
//! drops a row.
//!
//! Each configured channel has a worker of its own (in [`Sender::run`]): it delivers that
//! channel's due rows and sleeps until its next due row or a wake-up. One channel that hangs
//! or waits for a retry therefore never delays another, and every delivery has a deadline on
//! the whole exchange (connect, TLS, the SMTP dialogue or the HTTP request, the answer;
//! [`Channels::deadline`]), so a service that accepts a connection and then says nothing
//! costs its own channel that deadline and nothing else.
//!
//! A row is marked sent only after the transport accepted it; a crash between the two
//! re-sends that one row (at most one duplicate per crash per channel). Before it sends, a
//! worker claims its channel in the database ([`outbox::claim`]) and renews the claim before
//! each row, so a second sender on the same state directory (a `check --notify` beside a
//! watcher, or two at once) never sends the same row too. Failures are retried first on the
//! `notify` retry class (100 ms, 300 ms by default; the fetcher makes them for the HTTP
//! channels) and then on the backoff policy's `error` ladder for as long as the outage lasts;
//! a wait the service asks for (a 429's `retry_after`) is honoured, capped at `max_wait`. A
//! permanent failure (a bad token) holds its channel's rows until the next start, and is
//! logged once. The waits live in the outbox (`next_attempt_at`), not in memory, so they
//! survive restarts.
//!
//! A channel with quiet hours or a digest period ([`pace`]) leaves its rows in the outbox,
//! due at the period's end, and then sends the listings that waited as one digest, marking
//! all of its rows sent in one transaction once the service accepted it. Its heartbeat is
//! written into the outbox here too, so it goes like any other message.

use super::{
    ChannelName, Channels, Delivery, DeliveryError, NotifyError, OutboxRow, outbox, pace, render,
};
use jiff::tz::TimeZone;
use notifio_policy::{AttemptResult, BackoffPolicy, RefusalKind, RetryPolicy};
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

/// Rows handled per pass of a channel before re-querying.
const BATCH: usize = 100;

/// A claimed channel's lease beyond one delivery's deadline: the claim is renewed before each
/// row, so it only runs out when its sender is stuck or gone.
const LEASE_MARGIN: Duration = Duration::from_secs(10);

/// How often a channel another sender holds is looked at again (its rows may be new ones that
/// sender will not see before it lets go).
const CLAIMED_LOOK_AGAIN: Duration = Duration::from_millis(250);

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Rows the transports accepted.
    pub sent: usize,
    /// Rows that failed and were deferred or held.
    pub failed: usize,
    /// Of those, rows that failed permanently: their channel is held until the next start.
    pub held: usize,
    /// Channels another sender was delivering (their rows were left to it).
    pub busy: usize,
    /// Rows still pending after the pass.
    pub pending: u64,
    /// When the next pass is worth making (epoch ms), if anything is pending.
    pub next_attempt_at: Option<u64>,
}

/// Delivers the outbox.
pub struct Sender {
    db_path: PathBuf,
    shared: Arc<Shared>,
    /// Held channels were released once (at this sender's first pass).
    released: bool,
}

/// What every channel's worker shares.
struct Shared {
    channels: Channels,
    retry: RetryPolicy,
    ladder: BackoffPolicy,
    /// This sender's name in the outbox's claims: `<pid>:<random>`.
    owner: String,
    db: Mutex<Option<Connection>>,
    db_path: PathBuf,
    rng: Mutex<SmallRng>,
    /// The time zone quiet hours are in, and heartbeats write their times in.
    tz: TimeZone,
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("db_path", &self.db_path)
            .field("channels", &self.shared.channels)
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
        let mut rng = SmallRng::from_os_rng();
        let owner = format!("{}:{:016x}", std::process::id(), rng.random::<u64>());
        Self {
            shared: Arc::new(Shared {
                channels,
                retry: notify_retry,
                ladder: error_ladder,
                owner,
                db: Mutex::new(None),
                db_path: db_path.clone(),
                rng: Mutex::new(rng),
                tz: crate::clock::time_zone(),
            }),
            db_path,
            released: false,
        }
    }

    /// The time zone the channels' quiet hours are in (the machine's by default). Set before
    /// the sender runs.
    #[must_use]
    pub fn with_time_zone(mut self, tz: TimeZone) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.tz = tz;
        }
        self
    }

    /// Once per sender, before its first delivery: the configured channels' names go to the
    /// store (for `status`), and channels held by a permanent failure get one more try (the
    /// user may have fixed the settings).
    fn start(&mut self) -> Result<(), NotifyError> {
        if self.released {
            return Ok(());
        }
        let shared = &self.shared;
        let names: Vec<String> = shared
            .channels
            .names()
            .iter()
            .map(ToString::to_string)
            .collect();
        let released = shared.with_db(|conn| {
            if let Ok(json) = serde_json::to_string(&names) {
                // The meta table is the store's; a bare outbox file (tests) has none.
                let _ = conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
                    [CHANNELS_META, json.as_str()],
                );
            }
            outbox::release_held(conn)
        })?;
        if released > 0 {
            tracing::info!(
                rows = released,
                "giving channels that failed permanently one more try"
            );
        }
        self.released = true;
        Ok(())
    }

    /// One pass: delivers every due row, each channel in id order and the channels at once,
    /// deferring failures. A channel stops at its first failure so its later rows never
    /// overtake it; a channel another sender is delivering is left to it (`busy`). Each
    /// delivery is bounded by the channels' deadline, so a pass is too.
    ///
    /// # Errors
    /// The database could not be opened or written.
    pub async fn drain_once(&mut self, now_ms: u64) -> Result<DrainReport, NotifyError> {
        self.start()?;
        let shared = &self.shared;
        let names = shared.channels.names();
        let passes = names.iter().map(|name| shared.drain_channel(name, now_ms));
        let results = futures_util::future::join_all(passes).await;
        let mut report = DrainReport::default();
        for pass in results {
            let pass = pass?;
            report.sent += pass.sent;
            report.failed += usize::from(pass.failed);
            report.held += usize::from(pass.held);
            report.busy += usize::from(pass.busy_until.is_some());
        }
        let (pending, next) = shared
            .with_db(|conn| Ok((outbox::pending_count(conn)?, outbox::next_attempt_at(conn)?)))?;
        report.pending = pending;
        report.next_attempt_at = next;
        Ok(report)
    }

    /// Delivers what is due now, waiting (up to `patience`) for channels another sender is
    /// delivering to be let go, so rows enqueued while it worked are not left behind: what
    /// `check --notify` does before it exits.
    ///
    /// # Errors
    /// The database could not be opened or written.
    pub async fn deliver_due(&mut self, patience: Duration) -> Result<DrainReport, NotifyError> {
        let give_up = tokio::time::Instant::now() + patience;
        let mut total = DrainReport::default();
        loop {
            let r = self.drain_once(crate::clock::now().as_millis()).await?;
            total.sent += r.sent;
            total.failed += r.failed;
            total.held += r.held;
            total.busy = r.busy;
            total.pending = r.pending;
            total.next_attempt_at = r.next_attempt_at;
            if r.busy == 0 || tokio::time::Instant::now() >= give_up {
                return Ok(total);
            }
            tokio::time::sleep(CLAIMED_LOOK_AGAIN).await;
        }
    }

    /// Delivers until cancelled, one worker per channel. Each sleeps until its channel's next
    /// due row or until `wake` is notified (the watch loop calls `wake.notify_one()` after
    /// committing new rows; a notification sent while a worker is busy is kept, so none is
    /// missed).
    pub async fn run(mut self, wake: Arc<Notify>, cancel: CancellationToken) {
        let mut db_failures: u32 = 0;
        while let Err(e) = self.start() {
            db_failures = db_failures.saturating_add(1);
            let d = self.shared.db_failed(db_failures);
            tracing::error!(error = %e, retry_in_ms = d.as_millis() as u64, "outbox cannot be opened");
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(d) => {}
            }
        }
        let mut workers = Vec::new();
        let mut wakes = Vec::new();
        for name in self.shared.channels.names() {
            let own = Arc::new(Notify::new());
            wakes.push(Arc::clone(&own));
            let shared = Arc::clone(&self.shared);
            let cancel = cancel.clone();
            workers.push(tokio::spawn(async move {
                shared.work(&name, &own, &cancel).await;
            }));
        }
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = wake.notified() => {
                    for w in &wakes {
                        w.notify_one();
                    }
                }
            }
        }
        // Each worker ends at its next wait; one mid-delivery finishes that row first.
        for w in workers {
            let _ = w.await;
        }
    }
}

/// What one channel's pass did.
#[derive(Debug, Default)]
struct ChannelPass {
    sent: usize,
    /// A row failed (and was deferred or held).
    failed: bool,
    /// It failed permanently.
    held: bool,
    /// Another sender holds the channel until then.
    busy_until: Option<u64>,
    /// When the channel's next row is due, if it has one and is not held.
    next: Option<u64>,
}

impl Shared {
    /// Runs `f` on the sender's connection, opening it if needed (and dropping it after a
    /// failure, so the next call opens it again).
    fn with_db<R>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Result<R, NotifyError> {
        let mut db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        let conn = match db.take() {
            Some(c) => c,
            None => open(&self.db_path).map_err(|e| self.db_err(e))?,
        };
        let r = f(&conn);
        if r.is_ok() {
            *db = Some(conn);
        }
        r.map_err(|e| self.db_err(e))
    }

    fn db_err(&self, source: rusqlite::Error) -> NotifyError {
        NotifyError::Database {
            path: self.db_path.clone(),
            source,
        }
    }

    fn random(&self) -> f64 {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .random::<f64>()
    }

    /// How long to wait after the database failed `n` times in a row.
    fn db_failed(&self, n: u32) -> Duration {
        self.ladder
            .delay_for(RefusalKind::Error, n, None, self.random())
    }

    /// The lease a claim taken at `now_ms` runs to: one delivery's deadline and a margin.
    fn lease_end(&self, now_ms: u64) -> u64 {
        let lease = self.channels.deadline() + LEASE_MARGIN;
        now_ms.saturating_add(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
    }

    /// Claims `channel` for this sender, or says until when another sender holds it. A claim
    /// whose process is gone (a crashed watcher) is taken over at once.
    fn claim(&self, channel: &str, now_ms: u64) -> Result<Option<u64>, NotifyError> {
        let until = self.lease_end(now_ms);
        self.with_db(|conn| {
            if outbox::claim(conn, channel, &self.owner, now_ms, until)? {
                return Ok(None);
            }
            let Some(held) = outbox::claim_of(conn, channel)? else {
                // Released between the two statements: try once more.
                return Ok(
                    (!outbox::claim(conn, channel, &self.owner, now_ms, until)?).then_some(now_ms)
                );
            };
            if !process_alive(&held.owner)
                && outbox::take_over(conn, channel, &held.owner, &self.owner, until)?
            {
                tracing::info!(
                    channel,
                    "taking over the deliveries of a sender that is gone"
                );
                return Ok(None);
            }
            Ok(Some(held.until))
        })
    }

    /// One worker's life: deliver `channel`'s due rows, sleep until the next is due (or the
    /// claim of another sender may have ended, or a wake-up), until `cancel`.
    async fn work(&self, channel: &ChannelName, wake: &Notify, cancel: &CancellationToken) {
        let mut db_failures: u32 = 0;
        loop {
            let now = crate::clock::now().as_millis();
            let sleep = match self.drain_channel(channel, now).await {
                Ok(pass) => {
                    db_failures = 0;
                    let claimed = pass
                        .busy_until
                        .map(|until| until.min(now.saturating_add(millis(CLAIMED_LOOK_AGAIN))));
                    let next = match (pass.next, claimed) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    next.map(|t| {
                        Duration::from_millis(t.saturating_sub(crate::clock::now().as_millis()))
                    })
                }
                Err(e) => {
                    db_failures = db_failures.saturating_add(1);
                    let d = self.db_failed(db_failures);
                    tracing::error!(error = %e, %channel, retry_in_ms = d.as_millis() as u64, "outbox pass failed");
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

    /// Delivers `channel`'s due rows in order under a claim, marking each sent (and each part
    /// of a split one) as soon as the service accepted it; stops at the first failure, which
    /// is deferred (or held, when permanent).
    async fn drain_channel(
        &self,
        channel: &ChannelName,
        now_ms: u64,
    ) -> Result<ChannelPass, NotifyError> {
        let mut pass = ChannelPass::default();
        let name = channel.as_str();
        let heartbeat = self.heartbeat(channel, now_ms);
        let rows = self.with_db(|conn| outbox::due_on(conn, name, now_ms, BATCH))?;
        if rows.is_empty() {
            pass.next = earliest(
                self.with_db(|conn| outbox::next_attempt_on(conn, name))?,
                heartbeat,
            );
            return Ok(pass);
        }
        if let Some(until) = self.claim(name, now_ms)? {
            pass.busy_until = Some(until);
            return Ok(pass);
        }
        let result = self.deliver_rows(channel, now_ms, &mut pass).await;
        let released = self.with_db(|conn| outbox::release(conn, name, &self.owner));
        result?;
        released?;
        pass.next = earliest(
            self.with_db(|conn| outbox::next_attempt_on(conn, name))?,
            heartbeat,
        );
        Ok(pass)
    }

    /// Writes `channel`'s heartbeat into the outbox when its period is over
    /// ([`pace::heartbeat`]); returns when the next one is due. A heartbeat that cannot be
    /// written (the store's tables missing) is logged and never holds a delivery up.
    fn heartbeat(&self, channel: &ChannelName, now_ms: u64) -> Option<u64> {
        let every = self.channels.pacing(channel).heartbeat?;
        match self.with_db(|conn| pace::heartbeat(conn, channel.as_str(), every, now_ms, &self.tz))
        {
            Ok(next) => Some(next),
            Err(e) => {
                tracing::warn!(%channel, error = %e, "cannot write the channel's heartbeat");
                None
            }
        }
    }

    /// The claimed part of [`Self::drain_channel`]: the rows due now, read again under the
    /// claim (another sender may have sent some since), one by one.
    async fn deliver_rows(
        &self,
        channel: &ChannelName,
        now_ms: u64,
        pass: &mut ChannelPass,
    ) -> Result<(), NotifyError> {
        let name = channel.as_str();
        let rows = self.with_db(|conn| outbox::due_on(conn, name, now_ms, BATCH))?;
        let Some(head) = rows.first() else {
            return Ok(());
        };
        let pacing = self.channels.pacing(channel);
        // Quiet hours, a digest period: the rows wait in the outbox, due when they are over.
        if let Some(until) = pacing.held_until(head.created_at, now_ms, &self.tz) {
            self.with_db(|conn| outbox::wait_until(conn, name, until))?;
            tracing::debug!(%channel, until, "the channel keeps quiet; its messages wait");
            return Ok(());
        }
        // What waited on purpose goes out merged: the rows of listings, in one digest.
        let mergeable: Vec<i64> = if pacing.batches() {
            rows.iter()
                .filter(|r| r.notification().is_ok_and(|n| pace::merges(&n)))
                .map(|r| r.id)
                .collect()
        } else {
            Vec::new()
        };
        let mut digest: Option<Vec<i64>> = None;
        for row in &rows {
            if digest.as_ref().is_some_and(|d| d.contains(&row.id)) {
                continue; // sent in the digest
            }
            if digest.is_some() && mergeable.contains(&row.id) {
                continue; // came in after the digest's rows were fixed: the next digest's
            }
            // Renewed before each row: the lease then covers this one delivery.
            let now = crate::clock::now().as_millis().max(now_ms);
            if self.claim(name, now)?.is_some() {
                break; // this sender was too slow and another took over
            }
            if digest.is_none() && mergeable.contains(&row.id) {
                let members = self.digest_rows(channel, row, &rows, &mergeable)?;
                if members.len() > 1 {
                    let ns: Vec<_> = members
                        .iter()
                        .filter_map(|r| r.notification().ok())
                        .collect();
                    let n = pace::digest(&ns);
                    let ids: Vec<i64> = members.iter().map(|r| r.id).collect();
                    match self.deliver_as(row, &n, now_ms).await? {
                        Ok(()) => {
                            self.with_db(|conn| {
                                outbox::mark_digest_sent(conn, name, &ids, now_ms)
                            })?;
                            tracing::info!(id = row.id, rows = ids.len(), %channel, "digest delivered");
                            pass.sent += ids.len();
                            digest = Some(ids);
                            continue;
                        }
                        Err(err) => {
                            pass.failed = true;
                            pass.held = err.permanent;
                            self.record_failure(row, &err, now_ms)?;
                            break;
                        }
                    }
                }
                // A digest of one row is that row, as it is.
                digest = Some(Vec::new());
            }
            match self.deliver(row, now_ms).await? {
                Ok(()) => {
                    self.with_db(|conn| outbox::mark_sent(conn, row.id, now_ms))?;
                    tracing::info!(id = row.id, %channel, "notification delivered");
                    pass.sent += 1;
                }
                Err(err) => {
                    pass.failed = true;
                    pass.held = err.permanent;
                    self.record_failure(row, &err, now_ms)?;
                    break;
                }
            }
        }
        Ok(())
    }

    /// The rows a digest headed by `head` merges, among `rows` (those in `mergeable`): fixed
    /// in the outbox at its first attempt ([`outbox::begin_digest`]), so every retry of it
    /// sends the same message.
    fn digest_rows<'r>(
        &self,
        channel: &ChannelName,
        head: &OutboxRow,
        rows: &'r [OutboxRow],
        mergeable: &[i64],
    ) -> Result<Vec<&'r OutboxRow>, NotifyError> {
        let name = channel.as_str();
        let last = mergeable.last().copied().unwrap_or(head.id);
        let through = self.with_db(|conn| match outbox::digest_through(conn, name, head.id)? {
            Some(through) => Ok(through),
            None => {
                outbox::begin_digest(conn, name, head.id, last)?;
                Ok(last)
            }
        })?;
        Ok(rows
            .iter()
            .filter(|r| r.id >= head.id && r.id <= through && mergeable.contains(&r.id))
            .collect())
    }

    /// Delivers one row within the channels' deadline. The outer `Result` is the database's
    /// (a part accepted could not be recorded), the inner one the delivery's.
    async fn deliver(
        &self,
        row: &OutboxRow,
        now_ms: u64,
    ) -> Result<Result<(), DeliveryError>, NotifyError> {
        let n = match row.notification() {
            Ok(n) => n,
            Err(e) => {
                return Ok(Err(DeliveryError::new(
                    AttemptResult::Invalid,
                    format!("unreadable outbox payload ({e}); kept for a newer version"),
                )));
            }
        };
        self.deliver_as(row, &n, now_ms).await
    }

    /// Delivers `n` as row `row`'s delivery (its id, its parts already accepted): the row's
    /// own notification, or the digest it heads.
    async fn deliver_as(
        &self,
        row: &OutboxRow,
        n: &super::Notification,
        now_ms: u64,
    ) -> Result<Result<(), DeliveryError>, NotifyError> {
        let msg = render(n);
        let delivery = Delivery {
            id: row.id,
            created_at: row.created_at,
            parts_sent: row.parts_sent,
            now_ms,
        };
        let part_error = Mutex::new(None);
        let on_part = |parts: u32| {
            if let Err(e) = self.with_db(|conn| outbox::mark_parts_sent(conn, row.id, parts)) {
                *part_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
            }
        };
        let r = self
            .channels
            .deliver(&row.channel, n, &msg, &delivery, &on_part)
            .await;
        if let Some(e) = part_error
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
        {
            return Err(e);
        }
        Ok(r)
    }

    /// A failed delivery: held when permanent, else deferred to its next attempt.
    fn record_failure(
        &self,
        row: &OutboxRow,
        err: &DeliveryError,
        now_ms: u64,
    ) -> Result<(), NotifyError> {
        let attempts = row.attempts.saturating_add(1);
        if err.permanent {
            self.with_db(|conn| outbox::hold(conn, row.id, now_ms, attempts, &err.message))?;
            tracing::error!(
                id = row.id,
                channel = %row.channel,
                error = %err,
                "notification channel failed permanently; its messages wait until notifio starts again"
            );
            return Ok(());
        }
        let delay = self.delay_after(attempts, err);
        let next = now_ms.saturating_add(millis(delay));
        self.with_db(|conn| outbox::defer(conn, row.id, next, attempts, &err.message))?;
        tracing::warn!(
            id = row.id,
            channel = %row.channel,
            attempts,
            retry_in_ms = delay.as_millis() as u64,
            error = %err,
            "notification delivery failed; will retry"
        );
        Ok(())
    }

    /// How long to wait after the `attempts`-th consecutive failure of a row.
    fn delay_after(&self, attempts: u32, err: &DeliveryError) -> Duration {
        let max = self.ladder.max_wait();
        // A rate limit that says how long: exactly that (the service knows; capped).
        if let (AttemptResult::Status(429), Some(wait)) = (err.attempt, err.retry_after) {
            return wait.min(max);
        }
        let quick = if err.retried {
            0 // the transport made them already
        } else {
            self.retry.attempts().saturating_sub(1) // sleeps the retry class allows
        };
        let base = if RetryPolicy::should_retry(&err.attempt) && attempts <= quick {
            self.retry.delay_before(attempts, self.random())
        } else {
            None
        };
        let base = base.unwrap_or_else(|| {
            // Past the quick retries (or not worth them): the error ladder, rung 1 first.
            let rung = attempts.saturating_sub(quick).max(1);
            self.ladder
                .delay_for(RefusalKind::Error, rung, None, self.random())
        });
        // A Retry-After can lengthen the wait, never shorten it.
        base.max(err.retry_after.unwrap_or_default()).min(max)
    }
}

/// Whether the process that took a claim (`<pid>:<random>`) still runs on this machine. An
/// owner that names no pid, or one this platform cannot look up, counts as alive: its lease
/// then decides.
fn process_alive(owner: &str) -> bool {
    let Some(pid) = owner.split(':').next().and_then(|p| p.parse::<i32>().ok()) else {
        return true;
    };
    #[cfg(unix)]
    {
        match rustix::process::Pid::from_raw(pid) {
            Some(pid) => {
                // ESRCH: no such process. EPERM: it exists, under another user.
                !matches!(
                    rustix::process::test_kill_process(pid),
                    Err(rustix::io::Errno::SRCH)
                )
            }
            None => true,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// The earlier of two times, either of which may be unknown.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Sends one test message (a made-up listing) to each of `names` at once, straight through
/// their transports (not the outbox), each within the channels' deadline: what
/// `notifio notify test` prints.
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
            fallback: Vec::new(),
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
            let result = channels.deliver(name, n, msg, delivery, &|_| {}).await;
            (name.clone(), result)
        }
    });
    futures_util::future::join_all(sends).await
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

    #[test]
    fn a_claim_of_a_process_that_is_gone_is_free() {
        assert!(process_alive(&format!("{}:ab", std::process::id())));
        // Pids are below 2^22 on Linux; this one cannot be running.
        assert!(!process_alive("2147483000:ab"));
        assert!(process_alive("someone-else"), "unknown: the lease decides");
    }
}
