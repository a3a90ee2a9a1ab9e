//! The `outbox` table: notifications waiting to be delivered, one row per (notification,
//! channel), so one channel's outage never re-sends, delays or blocks another's copy.
//!
//! These are plain functions over a `rusqlite::Connection` so the store can run [`SCHEMA`] in
//! its migrations and call [`enqueue`] inside the transaction that records new listings (a
//! `Transaction` derefs to `Connection`), while the sender uses its own connection to the same
//! WAL database. Within a channel, rows go out in id order: a channel whose oldest pending row
//! is waiting for a retry holds its later rows back (see [`due`]); a channel whose head failed
//! permanently (a bad token) holds all its rows until [`release_held`] at the next start.
//!
//! One sender at a time delivers a channel: before it sends anything it claims the channel
//! ([`claim`]) for a lease longer than one delivery may take, renews the claim before each row
//! and releases it after. A second sender (a `check --notify` beside a watcher, two checks at
//! once) finds the channel claimed and leaves its rows alone, so a row is never sent by two
//! senders; a sender that died holding a claim holds it only until the lease ends, or not at
//! all once its process is gone.

use super::{ChannelName, Notification};
use rusqlite::{Connection, OptionalExtension, params};

/// How every connection to the state database writes, the store's and the sender's alike:
/// WAL, so the sender delivers while the watcher writes, with `synchronous = NORMAL`, so a
/// commit costs no fsync. A commit is safe from a crash of Notifio (it is in the WAL); only a
/// power cut can undo the last ones, which for the outbox's marks costs one duplicate, as a
/// crash may. (SQLite's default, FULL, synced the disk once per delivered notification: 2% of
/// `watch`'s CPU in its benchmark, and a disk wake-up each time.)
///
/// # Errors
/// On SQL failure.
pub fn set_journal(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))?;
    conn.pragma_update(None, "synchronous", "NORMAL")
}

/// The table and its index. Idempotent; safe to run at every start. (A database from before
/// migration 4 had a `CHECK` on `channel` and no `parts_sent`/`failed_at`: the store's
/// migration 4 rebuilds it, keeping its rows.)
///
/// `outbox_claims` says which sender delivers a channel now, and until when (see [`claim`]).
/// `outbox_digests` says which rows a channel's digest merges once its delivery has begun
/// (see [`begin_digest`]).
///
/// `channel` is the [`ChannelName`]; `payload` is the [`Notification`] as JSON; `last_error`
/// is a delivery error that never contains a secret; `parts_sent` counts the parts of a split
/// message the service already accepted; `failed_at` is set when the row failed permanently
/// (it then holds its channel); `sent_at` is NULL until the transport accepted the row.
pub const SCHEMA: &str = outbox_schema!();

/// [`SCHEMA`] as a literal, for `concat!`.
macro_rules! outbox_schema {
    () => {
        "
CREATE TABLE IF NOT EXISTS outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    channel         TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    sent_at         INTEGER,
    parts_sent      INTEGER NOT NULL DEFAULT 0,
    failed_at       INTEGER
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (channel, id) WHERE sent_at IS NULL;
CREATE TABLE IF NOT EXISTS outbox_claims (
    channel TEXT    PRIMARY KEY,
    owner   TEXT    NOT NULL,
    until   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox_digests (
    channel TEXT    PRIMARY KEY,
    head    INTEGER NOT NULL,
    through INTEGER NOT NULL
);
"
    };
}
use outbox_schema;

/// Migration 4 of the store: `outbox` as [`SCHEMA`] describes it, from the table of earlier
/// versions (a fresh database has none yet: [`SCHEMA`] creates it first, so the copy works on
/// both). Every pending row stays pending and deliverable.
pub const MIGRATE_TO_NAMED_CHANNELS: &str = concat!(
    outbox_schema!(),
    "ALTER TABLE outbox RENAME TO outbox_v3;
     DROP INDEX IF EXISTS outbox_pending;",
    outbox_schema!(),
    "INSERT INTO outbox (id, channel, kind, payload, created_at, next_attempt_at, attempts, last_error, sent_at)
        SELECT id, channel, kind, payload, created_at, next_attempt_at, attempts, last_error, sent_at FROM outbox_v3;
     DROP TABLE outbox_v3;"
);

/// One pending delivery.
#[derive(Clone, Debug, PartialEq)]
pub struct OutboxRow {
    /// Row id; delivery order within a channel.
    pub id: i64,
    /// Where it goes.
    pub channel: ChannelName,
    /// The notification as stored (JSON); see [`Self::notification`].
    pub payload: String,
    /// Failed attempts so far.
    pub attempts: u32,
    /// When it was enqueued (epoch ms).
    pub created_at: u64,
    /// Not before this (epoch ms).
    pub next_attempt_at: u64,
    /// Parts of a split message already accepted.
    pub parts_sent: u32,
}

impl OutboxRow {
    /// The notification, or why the stored JSON cannot be read (a row written by a newer
    /// version, say: the sender keeps it and retries later rather than dropping it).
    ///
    /// # Errors
    /// The payload is not a notification this version understands.
    pub fn notification(&self) -> Result<Notification, serde_json::Error> {
        serde_json::from_str(&self.payload)
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Queues `n` once per channel, due at `now_ms`. Call it inside the transaction that records
/// the listings it announces.
///
/// # Errors
/// SQLite failed (the caller's transaction should then roll back).
pub fn enqueue<C: AsRef<str>>(
    conn: &Connection,
    n: &Notification,
    channels: &[C],
    now_ms: u64,
) -> rusqlite::Result<()> {
    let payload = serde_json::to_string(n)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let mut stmt = conn.prepare_cached(
        "INSERT INTO outbox (channel, kind, payload, created_at, next_attempt_at)
         VALUES (?1, ?2, ?3, ?4, ?4)",
    )?;
    let mut seen: Vec<&str> = Vec::with_capacity(channels.len());
    for ch in channels {
        let ch = ch.as_ref();
        if seen.contains(&ch) {
            continue;
        }
        seen.push(ch);
        stmt.execute(params![ch, n.kind(), payload, to_i64(now_ms)])?;
    }
    Ok(())
}

/// Pending rows that may be attempted at `now_ms`, oldest first, at most `limit`.
///
/// A row is due when its channel's oldest pending row (the head) is due: a channel waiting to
/// retry its head holds the rows behind it, so deliveries within a channel never overtake one
/// another. Other channels are not held. A channel whose head failed permanently is held
/// entirely (see [`hold`]).
///
/// # Errors
/// SQLite failed.
pub fn due(conn: &Connection, now_ms: u64, limit: usize) -> rusqlite::Result<Vec<OutboxRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.id, o.channel, o.payload, o.attempts, o.created_at, o.next_attempt_at, o.parts_sent
         FROM outbox o
         JOIN (SELECT channel, MIN(id) AS head FROM outbox WHERE sent_at IS NULL GROUP BY channel) h
           ON h.channel = o.channel
         JOIN outbox hr ON hr.id = h.head
         WHERE o.sent_at IS NULL AND hr.next_attempt_at <= ?1 AND hr.failed_at IS NULL
         ORDER BY o.id
         LIMIT ?2",
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![to_i64(now_ms), limit], |r| {
        Ok(OutboxRow {
            id: r.get(0)?,
            channel: ChannelName::new(r.get::<_, String>(1)?),
            payload: r.get(2)?,
            attempts: u32::try_from(r.get::<_, i64>(3)?).unwrap_or(u32::MAX),
            created_at: to_u64(r.get(4)?),
            next_attempt_at: to_u64(r.get(5)?),
            parts_sent: u32::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
        })
    })?;
    rows.collect()
}

/// The rows of `channel` that may be attempted at `now_ms`, oldest first, at most `limit`:
/// its pending rows when its head is due and not held (see [`due`]), else none.
///
/// # Errors
/// SQLite failed.
pub fn due_on(
    conn: &Connection,
    channel: &str,
    now_ms: u64,
    limit: usize,
) -> rusqlite::Result<Vec<OutboxRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.id, o.channel, o.payload, o.attempts, o.created_at, o.next_attempt_at, o.parts_sent
         FROM outbox o
         JOIN outbox hr ON hr.id = (SELECT MIN(id) FROM outbox WHERE channel = ?1 AND sent_at IS NULL)
         WHERE o.channel = ?1 AND o.sent_at IS NULL AND hr.next_attempt_at <= ?2 AND hr.failed_at IS NULL
         ORDER BY o.id
         LIMIT ?3",
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![channel, to_i64(now_ms), limit], |r| {
        Ok(OutboxRow {
            id: r.get(0)?,
            channel: ChannelName::new(r.get::<_, String>(1)?),
            payload: r.get(2)?,
            attempts: u32::try_from(r.get::<_, i64>(3)?).unwrap_or(u32::MAX),
            created_at: to_u64(r.get(4)?),
            next_attempt_at: to_u64(r.get(5)?),
            parts_sent: u32::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
        })
    })?;
    rows.collect()
}

/// When `channel`'s head row is tried next, or `None` when it has nothing pending or its head
/// is held.
///
/// # Errors
/// SQLite failed.
pub fn next_attempt_on(conn: &Connection, channel: &str) -> rusqlite::Result<Option<u64>> {
    conn.prepare_cached(
        "SELECT next_attempt_at FROM outbox
         WHERE id = (SELECT MIN(id) FROM outbox WHERE channel = ?1 AND sent_at IS NULL)
           AND failed_at IS NULL",
    )?
    .query_row([channel], |r| r.get::<_, i64>(0))
    .optional()
    .map(|v| v.map(to_u64))
}

/// Who holds a channel's claim, and until when (epoch ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The sender holding it (`<pid>:<random>`).
    pub owner: String,
    /// Its lease ends then.
    pub until: u64,
}

/// Claims `channel` for `owner` until `until_ms` (or renews `owner`'s claim), unless another
/// owner's lease is still running at `now_ms`: one statement, so two senders racing for a
/// channel cannot both win. Returns whether `owner` holds the claim now.
///
/// # Errors
/// SQLite failed.
pub fn claim(
    conn: &Connection,
    channel: &str,
    owner: &str,
    now_ms: u64,
    until_ms: u64,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "INSERT INTO outbox_claims (channel, owner, until) VALUES (?1, ?2, ?3)
             ON CONFLICT (channel) DO UPDATE SET owner = excluded.owner, until = excluded.until
             WHERE outbox_claims.owner = excluded.owner OR outbox_claims.until <= ?4",
        )?
        .execute(params![channel, owner, to_i64(until_ms), to_i64(now_ms)])?;
    Ok(changed == 1)
}

/// Takes over the claim of `channel` from `dead`, whose process is gone, unless someone else
/// took it meanwhile. Returns whether `owner` holds it now.
///
/// # Errors
/// SQLite failed.
pub fn take_over(
    conn: &Connection,
    channel: &str,
    dead: &str,
    owner: &str,
    until_ms: u64,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE outbox_claims SET owner = ?3, until = ?4 WHERE channel = ?1 AND owner = ?2",
        )?
        .execute(params![channel, dead, owner, to_i64(until_ms)])?;
    Ok(changed == 1)
}

/// The claim on `channel`, if any.
///
/// # Errors
/// SQLite failed.
pub fn claim_of(conn: &Connection, channel: &str) -> rusqlite::Result<Option<Claim>> {
    conn.prepare_cached("SELECT owner, until FROM outbox_claims WHERE channel = ?1")?
        .query_row([channel], |r| {
            Ok(Claim {
                owner: r.get(0)?,
                until: to_u64(r.get(1)?),
            })
        })
        .optional()
}

/// Gives up `owner`'s claim on `channel` (another owner's is left alone).
///
/// # Errors
/// SQLite failed.
pub fn release(conn: &Connection, channel: &str, owner: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM outbox_claims WHERE channel = ?1 AND owner = ?2")?
        .execute(params![channel, owner])?;
    Ok(())
}

/// Records that the transport accepted row `id`.
///
/// # Errors
/// SQLite failed.
pub fn mark_sent(conn: &Connection, id: i64, now_ms: u64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE outbox SET sent_at = ?2, last_error = NULL WHERE id = ?1")?
        .execute(params![id, to_i64(now_ms)])?;
    Ok(())
}

/// Records that the first `parts` parts of row `id` were accepted (a retry resumes after them).
///
/// # Errors
/// SQLite failed.
pub fn mark_parts_sent(conn: &Connection, id: i64, parts: u32) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE outbox SET parts_sent = MAX(parts_sent, ?2) WHERE id = ?1")?
        .execute(params![id, i64::from(parts)])?;
    Ok(())
}

/// Records a permanent failure of row `id` (a bad token, a chat that does not exist): the row
/// and every later row of its channel are held, not retried, until [`release_held`]. `error`
/// must not contain secrets.
///
/// # Errors
/// SQLite failed.
pub fn hold(
    conn: &Connection,
    id: i64,
    now_ms: u64,
    attempts: u32,
    error: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE outbox SET failed_at = ?2, next_attempt_at = ?2, attempts = ?3, last_error = ?4 WHERE id = ?1",
    )?
    .execute(params![id, to_i64(now_ms), i64::from(attempts), error])?;
    Ok(())
}

/// Gives every held channel one more try (a sender starting: the user may have fixed the
/// settings). Returns the rows released.
///
/// # Errors
/// SQLite failed.
pub fn release_held(conn: &Connection) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE outbox SET failed_at = NULL WHERE failed_at IS NOT NULL AND sent_at IS NULL",
    )?
    .execute([])
}

/// Records a failed attempt: the row is retried at `next_attempt_at_ms`. `error` must not
/// contain secrets (delivery errors are built that way).
///
/// # Errors
/// SQLite failed.
pub fn defer(
    conn: &Connection,
    id: i64,
    next_attempt_at_ms: u64,
    attempts: u32,
    error: &str,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE outbox SET next_attempt_at = ?2, attempts = ?3, last_error = ?4 WHERE id = ?1",
    )?
    .execute(params![
        id,
        to_i64(next_attempt_at_ms),
        i64::from(attempts),
        error
    ])?;
    Ok(())
}

/// Makes `channel`'s pending rows wait until `until_ms` (its quiet hours, its digest period):
/// not an attempt, and no error. Rows already waiting longer (a retry) keep their time.
///
/// # Errors
/// SQLite failed.
pub fn wait_until(conn: &Connection, channel: &str, until_ms: u64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE outbox SET next_attempt_at = ?2
         WHERE channel = ?1 AND sent_at IS NULL AND failed_at IS NULL AND next_attempt_at < ?2",
    )?
    .execute(params![channel, to_i64(until_ms)])?;
    Ok(())
}

/// The rows of `channel`'s digest headed by row `head`: the last row id it merges, once its
/// delivery began. A digest's rows are fixed from its first attempt on, so a retry (after a
/// crash, say, with some of its parts accepted) sends the same message, and the rows that
/// came in meanwhile go in the next one.
///
/// # Errors
/// SQLite failed.
pub fn digest_through(
    conn: &Connection,
    channel: &str,
    head: i64,
) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT through FROM outbox_digests WHERE channel = ?1 AND head = ?2")?
        .query_row(params![channel, head], |r| r.get(0))
        .optional()
}

/// Fixes the rows of `channel`'s digest: those from `head` to `through` (see
/// [`digest_through`]).
///
/// # Errors
/// SQLite failed.
pub fn begin_digest(
    conn: &Connection,
    channel: &str,
    head: i64,
    through: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO outbox_digests (channel, head, through) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![channel, head, through])?;
    Ok(())
}

/// Records that the transport accepted `channel`'s digest of rows `ids`: all of them sent,
/// and the digest done, in one transaction (a crash leaves either all of them to send again
/// or none).
///
/// # Errors
/// SQLite failed.
pub fn mark_digest_sent(
    conn: &Connection,
    channel: &str,
    ids: &[i64],
    now_ms: u64,
) -> rusqlite::Result<()> {
    let tx = conn.unchecked_transaction()?;
    for id in ids {
        mark_sent(&tx, *id, now_ms)?;
    }
    tx.prepare_cached("DELETE FROM outbox_digests WHERE channel = ?1")?
        .execute([channel])?;
    tx.commit()
}

/// Rows not yet delivered, all channels.
///
/// # Errors
/// SQLite failed.
pub fn pending_count(conn: &Connection) -> rusqlite::Result<u64> {
    conn.prepare_cached("SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL")?
        .query_row([], |r| r.get::<_, i64>(0))
        .map(to_u64)
}

/// When the sender should next look: the earliest `next_attempt_at` among the channels' head
/// rows (rows held behind a head do not count), or `None` when nothing is pending.
///
/// # Errors
/// SQLite failed.
pub fn next_attempt_at(conn: &Connection) -> rusqlite::Result<Option<u64>> {
    conn.prepare_cached(
        "SELECT MIN(o.next_attempt_at) FROM outbox o
         JOIN (SELECT MIN(id) AS head FROM outbox WHERE sent_at IS NULL GROUP BY channel) h
           ON h.head = o.id
         WHERE o.failed_at IS NULL",
    )?
    .query_row([], |r| r.get::<_, Option<i64>>(0))
    .optional()
    .map(|v| v.flatten().map(to_u64))
}

/// One channel's deliveries as the outbox knows them, for `status` and the dashboard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelSummary {
    /// The channel.
    pub channel: String,
    /// Rows not yet accepted.
    pub pending: u64,
    /// Rows accepted.
    pub sent: u64,
    /// When the last row was accepted (epoch ms).
    pub last_sent_at: Option<u64>,
    /// The error of the channel's head row, if its last attempt failed.
    pub last_error: Option<String>,
    /// When the head row failed permanently: the channel is held.
    pub failed_at: Option<u64>,
    /// When the head row is tried next.
    pub next_attempt_at: Option<u64>,
}

/// Every channel that has outbox rows, by name.
///
/// # Errors
/// SQLite failed.
pub fn summaries(conn: &Connection) -> rusqlite::Result<Vec<ChannelSummary>> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.channel,
                (SELECT COUNT(*) FROM outbox WHERE channel = c.channel AND sent_at IS NULL),
                (SELECT COUNT(*) FROM outbox WHERE channel = c.channel AND sent_at IS NOT NULL),
                (SELECT MAX(sent_at) FROM outbox WHERE channel = c.channel),
                h.last_error, h.failed_at, h.next_attempt_at
         FROM (SELECT DISTINCT channel FROM outbox) c
         LEFT JOIN outbox h ON h.id =
             (SELECT MIN(id) FROM outbox WHERE channel = c.channel AND sent_at IS NULL)
         ORDER BY c.channel",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(ChannelSummary {
            channel: r.get(0)?,
            pending: to_u64(r.get(1)?),
            sent: to_u64(r.get(2)?),
            last_sent_at: r.get::<_, Option<i64>>(3)?.map(to_u64),
            last_error: r.get(4)?,
            failed_at: r.get::<_, Option<i64>>(5)?.map(to_u64),
            next_attempt_at: r.get::<_, Option<i64>>(6)?.map(to_u64),
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn.execute_batch(SCHEMA).unwrap(); // idempotent
        conn
    }

    fn note(site: &str) -> Notification {
        Notification::SessionExpired {
            site: site.into(),
            cookies_path: None,
            login: false,
        }
    }

    #[test]
    fn one_row_per_channel_and_due_in_order() {
        let conn = db();
        let both = ["email", "mailbox", "email"];
        enqueue(&conn, &note("a"), &both, 1000).unwrap();
        enqueue(&conn, &note("b"), &both, 1000).unwrap();
        assert_eq!(pending_count(&conn).unwrap(), 4);
        assert!(due(&conn, 999, 10).unwrap().is_empty());
        let rows = due(&conn, 1000, 10).unwrap();
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![1, 2, 3, 4]);
        assert_eq!(rows[0].notification().unwrap(), note("a"));
        assert_eq!(next_attempt_at(&conn).unwrap(), Some(1000));
    }

    #[test]
    fn a_waiting_head_holds_its_channel_only() {
        let conn = db();
        let both = ["email", "mailbox"];
        enqueue(&conn, &note("a"), &both, 1000).unwrap(); // 1 email, 2 mailbox
        enqueue(&conn, &note("b"), &both, 1000).unwrap(); // 3 email, 4 mailbox
        defer(&conn, 1, 5000, 1, "connection refused").unwrap();
        mark_sent(&conn, 2, 1000).unwrap();
        let ids: Vec<i64> = due(&conn, 2000, 10).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![4], "email row 3 waits behind row 1");
        mark_sent(&conn, 4, 2000).unwrap();
        // Row 3 is due by its own time but held: the sender must sleep until the head's time.
        assert_eq!(next_attempt_at(&conn).unwrap(), Some(5000));
        let ids: Vec<i64> = due(&conn, 5000, 10).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![1, 3]);
        let err: String = conn
            .query_row("SELECT last_error FROM outbox WHERE id = 1", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(err, "connection refused");
        mark_sent(&conn, 1, 5000).unwrap();
        mark_sent(&conn, 3, 5000).unwrap();
        assert_eq!(pending_count(&conn).unwrap(), 0);
        assert_eq!(next_attempt_at(&conn).unwrap(), None);
    }

    #[test]
    fn a_held_channel_waits_until_released_and_others_go_on() {
        let conn = db();
        let both = ["telegram", "email"];
        enqueue(&conn, &note("a"), &both, 1000).unwrap(); // 1 telegram, 2 email
        enqueue(&conn, &note("b"), &both, 1000).unwrap(); // 3 telegram, 4 email
        hold(&conn, 1, 1000, 1, "telegram: HTTP 401 Unauthorized").unwrap();
        let ids: Vec<i64> = due(&conn, 9_999_999, 10)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, vec![2, 4], "telegram is held whole");
        mark_sent(&conn, 2, 1000).unwrap();
        mark_sent(&conn, 4, 1000).unwrap();
        assert_eq!(
            next_attempt_at(&conn).unwrap(),
            None,
            "a held channel is not waited for"
        );
        let s = summaries(&conn).unwrap();
        assert_eq!(s[1].channel, "telegram");
        assert_eq!((s[1].pending, s[1].failed_at), (2, Some(1000)));
        assert_eq!(
            s[1].last_error.as_deref(),
            Some("telegram: HTTP 401 Unauthorized")
        );
        assert_eq!(
            (s[0].pending, s[0].sent, s[0].last_sent_at),
            (0, 2, Some(1000))
        );
        assert_eq!(release_held(&conn).unwrap(), 1);
        let ids: Vec<i64> = due(&conn, 1000, 10).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![1, 3]);
        mark_parts_sent(&conn, 1, 2).unwrap();
        mark_parts_sent(&conn, 1, 1).unwrap();
        assert_eq!(due(&conn, 1000, 10).unwrap()[0].parts_sent, 2);
    }

    #[test]
    fn migration_4_keeps_old_rows_deliverable() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE outbox (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                channel TEXT NOT NULL CHECK (channel IN ('email', 'mailbox', 'webhook')),
                kind TEXT NOT NULL, payload TEXT NOT NULL, created_at INTEGER NOT NULL,
                next_attempt_at INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                last_error TEXT, sent_at INTEGER);
             INSERT INTO outbox (channel, kind, payload, created_at, next_attempt_at, attempts)
                VALUES ('email', 'session_expired', '{\"type\":\"session_expired\",\"site\":\"a\",\"cookies_path\":null}', 5, 5, 2);",
        )
        .unwrap();
        conn.execute_batch(MIGRATE_TO_NAMED_CHANNELS).unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let rows = due(&conn, 5, 10).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].channel.as_str(), rows[0].attempts), ("email", 2));
        assert_eq!(rows[0].notification().unwrap(), note("a"));
        // New channel names go in now; and a fresh database migrates too.
        enqueue(&conn, &note("b"), &["telegram-2"], 6).unwrap();
        let fresh = Connection::open_in_memory().unwrap();
        fresh.execute_batch(MIGRATE_TO_NAMED_CHANNELS).unwrap();
        enqueue(&fresh, &note("c"), &["matrix"], 1).unwrap();
    }

    #[test]
    fn one_sender_holds_a_channel_until_it_releases_or_its_lease_ends() {
        let conn = db();
        assert!(claim(&conn, "email", "1:a", 1000, 31_000).unwrap());
        assert!(
            !claim(&conn, "email", "2:b", 1000, 31_000).unwrap(),
            "held by 1:a"
        );
        assert!(
            claim(&conn, "mailbox", "2:b", 1000, 31_000).unwrap(),
            "channels apart"
        );
        assert!(
            claim(&conn, "email", "1:a", 2000, 32_000).unwrap(),
            "its owner renews"
        );
        assert_eq!(
            claim_of(&conn, "email").unwrap(),
            Some(Claim {
                owner: "1:a".into(),
                until: 32_000
            })
        );
        release(&conn, "email", "2:b").unwrap();
        assert!(
            !claim(&conn, "email", "2:b", 3000, 33_000).unwrap(),
            "not its claim"
        );
        assert!(
            claim(&conn, "email", "2:b", 32_000, 62_000).unwrap(),
            "lease over"
        );
        assert!(!take_over(&conn, "email", "1:a", "3:c", 70_000).unwrap());
        assert!(take_over(&conn, "email", "2:b", "3:c", 70_000).unwrap());
        release(&conn, "email", "3:c").unwrap();
        assert_eq!(claim_of(&conn, "email").unwrap(), None);
    }

    #[test]
    fn a_channels_due_rows_and_next_attempt_are_its_own() {
        let conn = db();
        enqueue(&conn, &note("a"), &["email", "mailbox"], 1000).unwrap(); // 1, 2
        enqueue(&conn, &note("b"), &["email", "mailbox"], 1000).unwrap(); // 3, 4
        defer(&conn, 1, 5000, 1, "timeout").unwrap();
        assert!(due_on(&conn, "email", 2000, 10).unwrap().is_empty());
        let ids: Vec<i64> = due_on(&conn, "mailbox", 2000, 10)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, [2, 4]);
        assert_eq!(next_attempt_on(&conn, "email").unwrap(), Some(5000));
        assert_eq!(next_attempt_on(&conn, "mailbox").unwrap(), Some(1000));
        hold(&conn, 1, 6000, 2, "bad token").unwrap();
        assert_eq!(next_attempt_on(&conn, "email").unwrap(), None, "held");
        assert_eq!(next_attempt_on(&conn, "nowhere").unwrap(), None);
    }

    #[test]
    fn enqueue_joins_the_callers_transaction() {
        let mut conn = db();
        let tx = conn.transaction().unwrap();
        enqueue(&tx, &note("a"), &["mailbox"], 1).unwrap();
        drop(tx); // rolled back
        assert_eq!(pending_count(&conn).unwrap(), 0);
    }
}
