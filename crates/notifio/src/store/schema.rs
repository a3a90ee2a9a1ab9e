//! Numbered migrations, applied in order at start-up inside one transaction each, tracked by
//! SQLite's `user_version`. A database from a newer Notifio is refused rather than damaged.

use super::StoreError;
use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "CREATE TABLE searches (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        url TEXT NOT NULL,
        site TEXT NOT NULL,
        active INTEGER NOT NULL DEFAULT 1,
        baseline_at INTEGER,
        last_checked_at INTEGER,
        last_outcome TEXT,
        state TEXT NOT NULL DEFAULT 'ok',
        next_check_at INTEGER
    );
    CREATE TABLE listings (
        site TEXT NOT NULL,
        listing_id TEXT NOT NULL,
        first_seen INTEGER NOT NULL,
        title TEXT, price REAL, currency TEXT, rooms REAL, area_m2 REAL, url TEXT, image TEXT,
        PRIMARY KEY (site, listing_id)
    );
    CREATE TABLE search_listings (
        search_id INTEGER NOT NULL REFERENCES searches(id),
        site TEXT NOT NULL,
        listing_id TEXT NOT NULL,
        first_seen INTEGER NOT NULL,
        PRIMARY KEY (search_id, listing_id)
    ) WITHOUT ROWID;
    CREATE TABLE backoff (
        site TEXT PRIMARY KEY,
        entry TEXT NOT NULL,
        probing INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE sites (
        site TEXT PRIMARY KEY,
        session_expired INTEGER NOT NULL DEFAULT 0,
        changed_at INTEGER NOT NULL,
        blocked_alert_for INTEGER
    );
    CREATE TABLE checks (
        id INTEGER PRIMARY KEY,
        search_id INTEGER NOT NULL REFERENCES searches(id),
        at INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        status INTEGER,
        attempts INTEGER NOT NULL,
        latency_ms INTEGER NOT NULL,
        new_count INTEGER NOT NULL
    );
    CREATE INDEX checks_by_search ON checks (search_id, id);
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    // 2: what the last good page of each search looked like, so an unchanged page costs a 304
    // or a hash instead of a parse, across restarts and `check` runs (see `PageMemo`).
    "ALTER TABLE searches ADD COLUMN rules TEXT;
    ALTER TABLE searches ADD COLUMN page_fingerprint TEXT;
    ALTER TABLE searches ADD COLUMN page_etag TEXT;
    ALTER TABLE searches ADD COLUMN page_last_modified TEXT;",
    // 3: a listing is also found by its link, so one that comes back under another id (the
    // search's id rule changed, or the site's ids did) is not announced again.
    "CREATE INDEX listings_by_url ON listings (site, url);",
    // 4: the outbox names its channels (`telegram`, `telegram-2`, …) instead of three fixed
    // kinds, remembers the parts of a split message already accepted, and marks a permanent
    // failure that holds its channel. Its rows are kept, still due.
    crate::notify::outbox::MIGRATE_TO_NAMED_CHANNELS,
    // 5: each listing's price history, and what each search's filters let through.
    super::prices::MIGRATE_TO_PRICE_HISTORY,
    // 6: how many result pages a search's baseline covers (NULL: one, as before `pages`), so
    // the listings of a page read for the first time are a baseline too, not news.
    "ALTER TABLE searches ADD COLUMN baseline_pages INTEGER;",
    // 7: a new listing's possible twins on other sites are found by their figures, not by
    // reading every listing of the last two weeks (that cost `watch` 0.35 ms per check over
    // 1,000 searches).
    "CREATE INDEX listings_by_figures ON listings (rooms, area_m2);",
    // 8: that index also holds what the look-up tests (price, when, which site), so the
    // dozens of listings of similar rooms and area are ruled out without reading each one's
    // row (each row is a page read when another connection's write has emptied the cache).
    "DROP INDEX listings_by_figures;
    CREATE INDEX listings_by_figures ON listings (rooms, area_m2, price, first_seen, site);",
    // 9: what each search's checks taught about how often its new listings come (its
    // `ArrivalRates`, as JSON), and its last good check, so a restart keeps what a week of
    // watching learnt (docs/policy.md#a-request-budget-per-site).
    "CREATE TABLE rates (
        search_id INTEGER PRIMARY KEY REFERENCES searches(id),
        model TEXT NOT NULL,
        last_good_at INTEGER
    );",
    // 10: what the user made of each listing (the inbox), kept beside the listing.
    super::inbox::MIGRATE_TO_MARKS,
    // 11: which listings are gone, and when they went (docs/dashboard.md#gone-listings).
    super::lifecycle::MIGRATE_TO_LIFECYCLE,
];

/// Brings the schema up to date (including the outbox's own schema).
pub(super) fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(StoreError::TooNew {
            found: version,
            known,
        });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(version).unwrap_or(0))
    {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    conn.execute_batch(crate::notify::outbox::SCHEMA)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state database from before the price history (schema 4) keeps every price it knew:
    /// a listing's price so far is its history, so the first drop after an upgrade is measured
    /// right.
    #[test]
    fn an_older_database_keeps_its_known_prices_as_history() {
        let conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..4] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
        conn.execute_batch(
            "INSERT INTO listings (site, listing_id, first_seen, price, currency)
             VALUES ('a.com', '1', 5, 1200.0, 'EUR'), ('a.com', '2', 6, NULL, NULL);",
        )
        .unwrap();
        migrate(&conn).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, MIGRATIONS.len() as i64);
        let history = |id| super::super::prices::history(&conn, "a.com", id).unwrap();
        assert_eq!(history("1"), [(5, 1200.0, Some("EUR".to_owned()))]);
        assert_eq!(history("2"), []);
    }
}
