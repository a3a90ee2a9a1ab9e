//! The `outbox` table: notifications waiting to be delivered, one row per (notification,
//! channel), so an email outage never re-sends the mbox copy.
//!
//! These are plain functions over a `rusqlite::Connection` so the store can run [`SCHEMA`] in
//! its migrations and call [`enqueue`] inside the transaction that records new listings (a
//! `Transaction` derefs to `Connection`), while the sender uses its own connection to the same
//! WAL database. Within a channel, rows go out in id order: a channel whose oldest pending row
//! is waiting for a retry holds its later rows back (see [`due`]).

use super::{ChannelKind, Notification};
use rusqlite::{Connection, OptionalExtension, params};

/// The table and its index. Idempotent; safe to run at every start.
///
/// `payload` is the [`Notification`] as JSON; `last_error` is a delivery error that never
/// contains a secret; `sent_at` is NULL until the transport accepted the row.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    channel         TEXT    NOT NULL CHECK (channel IN ('email', 'mailbox', 'webhook')),
    kind            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    sent_at         INTEGER
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (channel, id) WHERE sent_at IS NULL;
";

/// One pending delivery.
#[derive(Clone, Debug, PartialEq)]
pub struct OutboxRow {
    /// Row id; delivery order within a channel.
    pub id: i64,
    /// Where it goes.
    pub channel: ChannelKind,
    /// The notification as stored (JSON); see [`Self::notification`].
    pub payload: String,
    /// Failed attempts so far.
    pub attempts: u32,
    /// When it was enqueued (epoch ms).
    pub created_at: u64,
    /// Not before this (epoch ms).
    pub next_attempt_at: u64,
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
pub fn enqueue(
    conn: &Connection,
    n: &Notification,
    channels: &[ChannelKind],
    now_ms: u64,
) -> rusqlite::Result<()> {
    let payload = serde_json::to_string(n)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let mut stmt = conn.prepare_cached(
        "INSERT INTO outbox (channel, kind, payload, created_at, next_attempt_at)
         VALUES (?1, ?2, ?3, ?4, ?4)",
    )?;
    let mut seen = Vec::with_capacity(channels.len());
    for ch in channels {
        if seen.contains(ch) {
            continue;
        }
        seen.push(*ch);
        stmt.execute(params![ch.as_str(), n.kind(), payload, to_i64(now_ms)])?;
    }
    Ok(())
}

/// Pending rows that may be attempted at `now_ms`, oldest first, at most `limit`.
///
/// A row is due when its channel's oldest pending row (the head) is due: a channel waiting to
/// retry its head holds the rows behind it, so deliveries within a channel never overtake one
/// another. Other channels are not held.
///
/// # Errors
/// SQLite failed.
pub fn due(conn: &Connection, now_ms: u64, limit: usize) -> rusqlite::Result<Vec<OutboxRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.id, o.channel, o.payload, o.attempts, o.created_at, o.next_attempt_at
         FROM outbox o
         JOIN (SELECT channel, MIN(id) AS head FROM outbox WHERE sent_at IS NULL GROUP BY channel) h
           ON h.channel = o.channel
         JOIN outbox hr ON hr.id = h.head
         WHERE o.sent_at IS NULL AND hr.next_attempt_at <= ?1
         ORDER BY o.id
         LIMIT ?2",
    )?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![to_i64(now_ms), limit], |r| {
        let channel: String = r.get(1)?;
        let channel = ChannelKind::parse(&channel).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                1,
                rusqlite::types::Type::Text,
                format!("unknown outbox channel {channel:?}").into(),
            )
        })?;
        Ok(OutboxRow {
            id: r.get(0)?,
            channel,
            payload: r.get(2)?,
            attempts: u32::try_from(r.get::<_, i64>(3)?).unwrap_or(u32::MAX),
            created_at: to_u64(r.get(4)?),
            next_attempt_at: to_u64(r.get(5)?),
        })
    })?;
    rows.collect()
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
           ON h.head = o.id",
    )?
    .query_row([], |r| r.get::<_, Option<i64>>(0))
    .optional()
    .map(|v| v.flatten().map(to_u64))
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
        let both = [ChannelKind::Email, ChannelKind::Mailbox, ChannelKind::Email];
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
        let both = [ChannelKind::Email, ChannelKind::Mailbox];
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
    fn enqueue_joins_the_callers_transaction() {
        let mut conn = db();
        let tx = conn.transaction().unwrap();
        enqueue(&tx, &note("a"), &[ChannelKind::Mailbox], 1).unwrap();
        drop(tx); // rolled back
        assert_eq!(pending_count(&conn).unwrap(), 0);
    }
}
