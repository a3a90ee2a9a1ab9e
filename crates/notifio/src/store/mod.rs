//! The state database: searches, listings, the backoff registry, check history and the outbox,
//! in one SQLite file (WAL, mode 0600) under the state dir.
//!
//! Why one embedded file: a check's new listings and their notification rows must commit in one
//! transaction (nothing lost, nothing twice across a crash), and every registry change must be
//! on disk before the next request goes out, so a restart never knocks on a site before its
//! `next_retry_at`. `notifio status` and the dashboard read the same rows the watcher writes,
//! so they can never disagree. The outbox table itself belongs to `notify::outbox`.

mod inbox;
mod lifecycle;
mod lock;
mod names;
mod news;
mod prices;
mod requests;
mod schema;

pub use lifecycle::SearchLifecycle;
pub use lock::{Holder, StateLock};
pub use names::{ByName, Named};

use crate::listing::Listing;
use crate::notify::outbox;
use crate::notify::{ChannelName, Notification};
use notifio_policy::{Entry, Outcome, SearchState, SiteKey};
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A store failure. SQLite messages never contain secrets (none are stored). Each message
/// says its cause once: none carries an error `source` that would print it again.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state directory or its database cannot be used: which file, the real cause, and
    /// what to do. Notifio never deletes or rewrites a database it cannot read.
    #[error("{message}")]
    Unusable {
        /// The file or directory.
        path: PathBuf,
        /// The whole message.
        message: String,
    },
    /// Another `notifio watch` (or a `check`'s pass) holds the state directory.
    #[error(
        "another notifio {}{} is using the state directory {}: {}",
        match by { Holder::Watch => "watch", Holder::Check => "check" },
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        dir.display(),
        match by {
            Holder::Watch => "stop it first, or give this one its own `state_dir` under [watch]",
            Holder::Check => "it ends after one pass; try again then",
        }
    )]
    Locked {
        /// The state directory.
        dir: PathBuf,
        /// The process holding it, as it wrote in the lock file.
        pid: Option<u32>,
        /// What kind of run holds it.
        by: Holder,
    },
    /// The database was written by a newer Notifio.
    #[error(
        "the state database is at schema version {found}, newer than this Notifio understands ({known}); upgrade Notifio"
    )]
    TooNew {
        /// Version in the file.
        found: i64,
        /// Newest version we know.
        known: i64,
    },
    /// A query failed.
    #[error("state database error: {0}")]
    Sql(rusqlite::Error),
    /// A stored value could not be decoded.
    #[error("state database holds a value this version cannot read: {0}")]
    Decode(#[from] serde_json::Error),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sql(e)
    }
}

/// What to say about an SQLite failure on the database at `path`, by its code.
fn unusable_db(path: &Path, e: &rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    let p = path.display();
    let message = match e.sqlite_error_code() {
        Some(C::NotADatabase | C::DatabaseCorrupt) => format!(
            "the state database {p} is damaged or is not a Notifio database ({e}); notifio never deletes or rewrites a database it cannot read: move it aside (mv {p} {p}.broken) to start afresh, or restore a backup"
        ),
        Some(C::ReadOnly) => format!(
            "the state database {p} is read-only ({e}): make the file and its directory writable by you, or set `state_dir` under [watch] to a directory you can write"
        ),
        Some(C::CannotOpen | C::PermissionDenied) => format!(
            "cannot open the state database {p} ({e}): check that you may read and write it and its directory"
        ),
        Some(C::DatabaseBusy | C::DatabaseLocked) => format!(
            "the state database {p} is locked by another process ({e}); try again when it is done"
        ),
        Some(C::DiskFull) => format!("the disk holding the state database {p} is full ({e})"),
        _ => format!("cannot use the state database {p}: {e}"),
    };
    StoreError::Unusable {
        path: path.to_owned(),
        message,
    }
}

/// What to say when a file or directory of the state dir cannot be made.
fn unusable_path(path: &Path, what: &str, e: &std::io::Error) -> StoreError {
    let p = path.display();
    let hint = match e.kind() {
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            "; make it writable by you, or set `state_dir` under [watch] to a directory you can write"
        }
        std::io::ErrorKind::NotADirectory | std::io::ErrorKind::AlreadyExists => {
            "; a file is in the way: set `state_dir` under [watch] to a directory"
        }
        _ => "",
    };
    StoreError::Unusable {
        path: path.to_owned(),
        message: format!("cannot create {what} {p}: {e}{hint}"),
    }
}

/// One configured search as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchRow {
    /// Stable id (assigned on first sight of the search's name).
    pub id: u32,
    /// Name from the config.
    pub name: String,
    /// URL.
    pub url: String,
    /// Site key.
    pub site: String,
    /// When the baseline was taken (None: never checked successfully).
    pub baseline_at: Option<u64>,
    /// Last check time.
    pub last_checked_at: Option<u64>,
    /// Last outcome.
    pub last_outcome: Option<Outcome>,
    /// Its state as the watcher last saw it.
    pub state: SearchState,
    /// Next check time as the watcher planned it.
    pub next_check_at: Option<u64>,
    /// Listings on its last page read (None: never read since filters were counted).
    pub found: Option<u32>,
    /// How many of them its filters let through.
    pub matched: Option<u32>,
}

/// One finished check, to record.
#[derive(Clone, Debug)]
pub struct CheckRecord<'a> {
    /// The searches this fetch answered (id, name, notify_existing).
    pub searches: &'a [(u32, String, bool)],
    /// The site.
    pub site: &'a SiteKey,
    /// How it ended.
    pub outcome: Outcome,
    /// HTTP status, if any.
    pub status: Option<u16>,
    /// Attempts made.
    pub attempts: u32,
    /// Latency in ms.
    pub latency_ms: u64,
    /// Listings extracted: of a successful check, or of the pages read before a refusal.
    pub listings: Option<&'a [Listing]>,
    /// Where each result page's listings end in `listings` (page 1's are
    /// `listings[..pages[0]]`, page 2's follow, …); empty: one page. A search's baseline
    /// covers the pages its checks have read: a listing first seen on a page never read
    /// before is part of the baseline, not news (unless `notify_existing`).
    pub pages: &'a [usize],
    /// When the check finished.
    pub now: u64,
    /// For each of `searches`, the channels its notifications go to: news found by several
    /// searches goes to all of theirs, once each.
    pub channels: &'a [Vec<ChannelName>],
    /// Check-history rows to keep per search.
    pub history: usize,
    /// For each of `searches`, what of its news is announced (filters, price rules); a search
    /// without an entry announces everything.
    pub rules: &'a [&'a crate::filter::AnnounceRules],
    /// Good checks in a row that must miss a listing before it is gone (`[watch] gone_after`).
    pub gone_after: u32,
}

/// One search's share of an ordinary check that found nothing to announce and changed no
/// site state: its history row, written later with others (see [`Tx::record_routine`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RoutineCheck {
    /// The search.
    pub search_id: u32,
    /// When the check finished.
    pub at: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// HTTP status, if any.
    pub status: Option<u16>,
    /// Attempts made.
    pub attempts: u32,
    /// Latency in ms.
    pub latency_ms: u64,
    /// The check read the search's page and found it as it was (a 304, or the same bytes):
    /// the listings missing from it are missed once more (see `lifecycle`).
    pub read_page: bool,
}

/// What recording a check found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recorded {
    /// Listings never seen on the site before (announced unless this was a baseline): neither
    /// their id nor their link (see `record_check_in`).
    pub new: Vec<Listing>,
    /// Listings with a new id whose link the site has shown before: the same listing under
    /// another id (the search's id rule changed, or the site's ids did), so not new.
    pub rekeyed: usize,
    /// Whether this check was the silent baseline of at least one search.
    pub baseline: bool,
    /// Whether a notification was enqueued.
    pub enqueued: bool,
    /// Known listings whose price changed since the store last saw one (announced or not,
    /// as each search's rules say).
    pub changes: Vec<crate::price::PriceChange>,
    /// Listings that are gone since this check (missed by all their searches).
    pub gone: usize,
}

/// What the last good page of a search looked like. A page whose fingerprint matches cannot
/// hold a new listing, so it is not parsed again; the validators let the server answer 304
/// instead of sending it at all. Kept per search (not per URL) so a search added later with
/// the same URL still gets its own first, full read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageMemo {
    /// Hash of status, final URL and body of the last page judged `ok` (hex).
    pub fingerprint: String,
    /// Its `ETag`, if the server sent one.
    pub etag: Option<String>,
    /// Its `Last-Modified`, if the server sent one.
    pub last_modified: Option<String>,
}

/// One configured search, as [`Store::sync_searches`] takes it.
#[derive(Clone, Debug)]
pub struct SearchSync {
    /// Name from the config (the identity of the search).
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Its site key.
    pub site: String,
    /// A fingerprint of how its pages are read (profile, selectors, Notifio version): when it
    /// changes, the remembered page memo no longer says anything and is dropped.
    pub rules: String,
}

/// The state database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// Prepared statements each connection keeps (see [`Store::open`]).
const STATEMENTS_KEPT: usize = 64;

impl Store {
    /// The database file inside a state dir.
    #[must_use]
    pub fn file_in(state_dir: &Path) -> PathBuf {
        state_dir.join("notifio.db")
    }

    /// Opens (creating it 0600 if needed), checks and migrates the database in `state_dir`.
    ///
    /// # Errors
    /// [`StoreError::Unusable`] (naming the file, the cause and what to do) when the directory
    /// or file cannot be created, opened or written, or the file is damaged; `TooNew` when the
    /// schema is newer than ours.
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        Self::create_dir(state_dir)?;
        let path = Self::file_in(state_dir);
        create_private(&path).map_err(|e| unusable_path(&path, "the state database", &e))?;
        let conn = Self::prepare(&path).map_err(|e| match e {
            StoreError::Sql(e) => unusable_db(&path, &e),
            other => other,
        })?;
        Ok(Self { conn, path })
    }

    /// Creates the state directory (and its parents) if needed.
    fn create_dir(state_dir: &Path) -> Result<(), StoreError> {
        if state_dir.exists() && !state_dir.is_dir() {
            return Err(StoreError::Unusable {
                path: state_dir.to_owned(),
                message: format!(
                    "the state directory {} is a file, not a directory: set `state_dir` under [watch] to a directory",
                    state_dir.display()
                ),
            });
        }
        std::fs::create_dir_all(state_dir)
            .map_err(|e| unusable_path(state_dir, "the state directory", &e))
    }

    /// Opens the file, sets it up, checks it can be read throughout, and migrates it.
    fn prepare(path: &Path) -> Result<Connection, StoreError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // A damaged file is found here, once, before anything is written to it, with its name, rather than by whichever query
        // first touches the bad page. quick_check reads every page (milliseconds for the
        // few MB a state database holds).
        let verdict: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
        if verdict != "ok" {
            // The verdict names b-tree pages; "database disk image is malformed" says enough.
            tracing::debug!(%verdict, "quick_check");
            return Err(StoreError::Sql(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                None,
            )));
        }
        outbox::set_journal(&conn)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // 1 MB of page cache instead of SQLite's 2 MB: the hot pages (searches, the newest
        // checks, index interiors) fit, and memory is part of the product (≤ 30 MB RSS).
        conn.pragma_update(None, "cache_size", -1024)?;
        // Every statement a check runs stays prepared: rusqlite keeps 16 by default, fewer
        // than one finished check uses since price history and filters, so each check parsed
        // its SQL again (5% of `watch`'s CPU over 1,000 searches).
        conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        schema::migrate(&conn)?;
        // Write access now, not at the first check: a read-only file says so at start.
        conn.execute_batch("BEGIN IMMEDIATE; COMMIT;")?;
        Ok(conn)
    }

    /// Takes the state directory for one `notifio watch`, or one `check` pass (see
    /// [`StateLock`]), without waiting.
    ///
    /// # Errors
    /// [`StoreError::Locked`] naming the process that holds it; `Unusable` when the directory
    /// or lock file cannot be made.
    pub fn lock(state_dir: &Path, holder: Holder) -> Result<StateLock, StoreError> {
        Self::create_dir(state_dir)?;
        StateLock::acquire(state_dir, holder)
    }

    /// Opens an existing database read-mostly (for `notifio status` and the dashboard).
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn open_existing(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| unusable_db(path, &e))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(Self {
            conn,
            path: path.to_owned(),
        })
    }

    /// Runs `f` in one write transaction and commits it when `f` returns `Ok`. When `f` fails
    /// (or panics) the transaction is dropped, and dropping it rolls it back: nothing
    /// half-written stays. Every write to the database goes through here, so a finished
    /// check's writes cost one commit, not one per statement.
    ///
    /// The write lock is taken at BEGIN (`IMMEDIATE`): a deferred transaction that reads first
    /// and writes later cannot wait for the notification sender's connection (SQLite answers
    /// "database is locked" at once instead of using the busy timeout), which stopped `watch`.
    /// Hold no transaction across an `await`: on `check`'s one-threaded runtime the sender's
    /// connection would block the only thread waiting for it.
    ///
    /// # Errors
    /// When the lock cannot be taken within the busy timeout, whatever `f` returns, or a
    /// failed commit.
    pub fn transaction<R, E: From<StoreError>>(
        &mut self,
        f: impl FnOnce(&Tx<'_>) -> Result<R, E>,
    ) -> Result<R, E> {
        let tx = Tx(self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StoreError::from)?);
        let r = f(&tx)?;
        tx.0.commit().map_err(StoreError::from)?;
        Ok(r)
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The raw connection (for the outbox functions and tests).
    #[must_use]
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Makes sure each configured search has a row, returning ids in the given order. Searches
    /// are identified by name, so reordering the config keeps their history.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn sync_searches(&mut self, searches: &[SearchSync]) -> Result<Vec<u32>, StoreError> {
        self.transaction(|tx| tx.sync_searches(searches))
    }

    /// All active searches in config order.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn searches(&self) -> Result<Vec<SearchRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, name, url, site, baseline_at, last_checked_at, last_outcome, state, next_check_at, found, matched FROM searches WHERE active ORDER BY id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(SearchRow {
                id: r.get(0)?,
                name: r.get(1)?,
                url: r.get(2)?,
                site: r.get(3)?,
                baseline_at: r.get(4)?,
                last_checked_at: r.get(5)?,
                last_outcome: r.get::<_, Option<ByName<Outcome>>>(6)?.map(|o| o.0),
                state: r.get::<_, ByName<SearchState>>(7)?.0,
                next_check_at: r.get(8)?,
                found: r.get(9)?,
                matched: r.get(10)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The remembered last good page of every search that has one.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn page_memos(&self) -> Result<Vec<(u32, PageMemo)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, page_fingerprint, page_etag, page_last_modified FROM searches WHERE active AND page_fingerprint IS NOT NULL",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get(0)?,
                PageMemo {
                    fingerprint: r.get(1)?,
                    etag: r.get(2)?,
                    last_modified: r.get(3)?,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every stored registry entry, with whether a probe was out.
    ///
    /// # Errors
    /// On SQL failure or an undecodable entry.
    pub fn backoff_entries(&self) -> Result<Vec<(SiteKey, Entry, bool)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT site, entry, probing FROM backoff ORDER BY site")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, bool>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (site, json, probing) = row?;
            out.push((
                SiteKey::from_stored(site),
                serde_json::from_str(&json)?,
                probing,
            ));
        }
        Ok(out)
    }

    /// Sites whose session is marked expired.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn expired_sessions(&self) -> Result<Vec<SiteKey>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT site FROM sites WHERE session_expired ORDER BY site")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows
            .map(|r| r.map(SiteKey::from_stored))
            .collect::<Result<_, _>>()?)
    }

    /// The last `n` outcomes of checks on a site, oldest first (for the dashboard timeline).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn site_timeline(&self, site: &str, n: usize) -> Result<Vec<Outcome>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT c.outcome FROM checks c JOIN searches s ON s.id = c.search_id WHERE s.site = ?1 ORDER BY c.id DESC LIMIT ?2",
        )?;
        let mut v = stmt
            .query_map(params![site, n], |r| Ok(r.get::<_, ByName<Outcome>>(0)?.0))?
            .collect::<Result<Vec<_>, _>>()?;
        v.reverse();
        Ok(v)
    }

    /// A listing's price history, oldest first: when each price was first shown, the price
    /// and its currency.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn price_history(
        &self,
        site: &str,
        listing_id: &str,
    ) -> Result<Vec<(u64, f64, Option<String>)>, StoreError> {
        prices::history(&self.conn, site, listing_id)
    }

    /// What a search's listings did lately: new ones per day, how many are gone, how long
    /// they stayed online.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn lifecycle(&self, search_id: u32, now: u64) -> Result<SearchLifecycle, StoreError> {
        lifecycle::of_search(&self.conn, search_id, now)
    }

    /// The newest listings first seen by a search that its filters let through (newest
    /// first).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn recent_listings(
        &self,
        search_id: u32,
        n: usize,
    ) -> Result<Vec<(Listing, u64)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT l.listing_id, l.title, l.price, l.currency, l.rooms, l.area_m2, l.url, l.image, l.first_seen
             FROM search_listings sl JOIN listings l ON l.site = sl.site AND l.listing_id = sl.listing_id
             JOIN searches s ON s.id = sl.search_id
             WHERE sl.search_id = ?1 AND sl.matched AND s.baseline_at IS NOT NULL AND l.first_seen > s.baseline_at
             ORDER BY l.first_seen DESC, l.rowid DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![search_id, n], |r| {
            Ok((
                Listing {
                    id: r.get(0)?,
                    title: r.get(1)?,
                    price: r.get(2)?,
                    currency: r.get(3)?,
                    rooms: r.get(4)?,
                    area_m2: r.get(5)?,
                    url: r.get(6)?,
                    image: r.get(7)?,
                    description: None,
                    fallback: Vec::new(),
                },
                r.get(8)?,
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One page of the listings inbox (docs/dashboard.md#the-listings-inbox).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn inbox(
        &self,
        q: &crate::inbox::InboxQuery,
    ) -> Result<crate::inbox::InboxPage, StoreError> {
        inbox::page(&self.conn, q)
    }

    /// Reads a value stored with [`Tx::put_meta`].
    ///
    /// # Errors
    /// On SQL failure.
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
            .query_row([key], |r| r.get(0))
            .optional()?)
    }

    /// What each search's checks taught about its arrival rates, and its last good check
    /// (epoch ms). A model this version cannot read is left out (it is learnt again).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn arrival_rates(
        &self,
    ) -> Result<Vec<(u32, notifio_policy::ArrivalRates, Option<u64>)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT search_id, model, last_good_at FROM rates")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, u32>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<u64>>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, json, last) = row?;
            if let Ok(model) = serde_json::from_str(&json) {
                out.push((id, model, last));
            }
        }
        Ok(out)
    }
}

/// An open write transaction (see [`Store::transaction`]): the database's writes. Dropped
/// without being committed, it rolls back.
pub struct Tx<'s>(rusqlite::Transaction<'s>);

impl Tx<'_> {
    /// [`Store::sync_searches`]'s body.
    fn sync_searches(&self, searches: &[SearchSync]) -> Result<Vec<u32>, StoreError> {
        let tx = &self.0;
        let mut ids = Vec::with_capacity(searches.len());
        for SearchSync {
            name,
            url,
            site,
            rules,
        } in searches
        {
            let existing: Option<(u32, String, Option<String>)> = tx
                .query_row(
                    "SELECT id, url, rules FROM searches WHERE name = ?1",
                    [name],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let id = match existing {
                Some((id, old_url, old_rules)) => {
                    if &old_url != url {
                        // A changed URL is a different search: take a new silent baseline.
                        tx.execute(
                            "UPDATE searches SET url = ?2, site = ?3, baseline_at = NULL, baseline_pages = NULL, state = ?4, last_outcome = NULL,
                             page_fingerprint = NULL, page_etag = NULL, page_last_modified = NULL WHERE id = ?1",
                            params![id, url, site, ByName(SearchState::Ok)],
                        )?;
                    }
                    if old_rules.as_deref() != Some(rules.as_str()) {
                        // Read differently now: the same page may hold other listings.
                        tx.execute(
                            "UPDATE searches SET rules = ?2, page_fingerprint = NULL, page_etag = NULL, page_last_modified = NULL WHERE id = ?1",
                            params![id, rules],
                        )?;
                    }
                    id
                }
                None => {
                    tx.execute(
                        "INSERT INTO searches (name, url, site, state, rules) VALUES (?1, ?2, ?3, ?5, ?4)",
                        params![name, url, site, rules, ByName(SearchState::Ok)],
                    )?;
                    u32::try_from(tx.last_insert_rowid()).unwrap_or(u32::MAX)
                }
            };
            ids.push(id);
        }
        tx.execute(
            &format!(
                "UPDATE searches SET active = (id IN ({}))",
                ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
            [],
        )?;
        Ok(ids)
    }

    /// Gives a search's row, and so its history and listings, a new name (a search renamed in
    /// the config). Returns `false`, changing nothing, when a row has that name already (a
    /// search of that name that was removed earlier: its row is the one the name now means).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn rename_search(&self, old: &str, new: &str) -> Result<bool, StoreError> {
        let n = self.0.execute(
            "UPDATE searches SET name = ?2 WHERE name = ?1 AND NOT EXISTS (SELECT 1 FROM searches WHERE name = ?2)",
            params![old, new],
        )?;
        Ok(n == 1)
    }

    /// Records one finished check: history row, the searches' last outcome, and — for a
    /// successful check — the listings, which of them are new, and their notification rows.
    ///
    /// # Errors
    /// On SQL failure (nothing is written then).
    pub fn record_check(&self, rec: &CheckRecord<'_>) -> Result<Recorded, StoreError> {
        record_check_in(&self.0, rec)
    }

    /// Writes ordinary checks' history rows (in order) and search states that were kept in
    /// memory: one commit for many checks instead of one each (each commit appends every page
    /// it touched to the WAL).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn record_routine(
        &self,
        checks: &[RoutineCheck],
        states: &[(u32, SearchState, Option<u64>)],
        history: usize,
        gone_after: u32,
    ) -> Result<(), StoreError> {
        let tx = &self.0;
        for c in checks {
            if c.read_page {
                lifecycle::missed_again(tx, c.search_id, gone_after)?;
            }
            write_history(
                tx,
                c.search_id,
                c.at,
                c.outcome,
                c.status,
                c.attempts,
                c.latency_ms,
                0,
                history,
            )?;
        }
        let mut state =
            tx.prepare_cached("UPDATE searches SET state = ?2, next_check_at = ?3 WHERE id = ?1")?;
        for (id, name, next) in states {
            state.execute(params![id, ByName(*name), next])?;
        }
        Ok(())
    }

    /// Remembers a search's last good page.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn set_page_memo(&self, id: u32, memo: &PageMemo) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "UPDATE searches SET page_fingerprint = ?2, page_etag = ?3, page_last_modified = ?4 WHERE id = ?1",
            )?
            .execute(params![id, memo.fingerprint, memo.etag, memo.last_modified])?;
        Ok(())
    }

    /// Saves the scheduler's view of a search (its state and next check time).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn set_search_state(
        &self,
        id: u32,
        state: SearchState,
        next_check_at: Option<u64>,
    ) -> Result<(), StoreError> {
        self.0
            .prepare_cached("UPDATE searches SET state = ?2, next_check_at = ?3 WHERE id = ?1")?
            .execute(params![id, ByName(state), next_check_at])?;
        Ok(())
    }

    /// Writes a site's registry entry (or removes it when cleared), and whether a probe is out.
    /// Called before the next request is issued.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn save_backoff(
        &self,
        site: &SiteKey,
        entry: Option<&Entry>,
        probing: bool,
    ) -> Result<(), StoreError> {
        match entry {
            Some(e) => {
                self.0
                    .prepare_cached(
                        "INSERT INTO backoff (site, entry, probing) VALUES (?1, ?2, ?3)
                         ON CONFLICT(site) DO UPDATE SET entry = excluded.entry, probing = excluded.probing",
                    )?
                    .execute(params![site.as_str(), serde_json::to_string(e)?, probing])?;
            }
            None => {
                self.0
                    .prepare_cached("DELETE FROM backoff WHERE site = ?1")?
                    .execute([site.as_str()])?;
            }
        }
        Ok(())
    }

    /// Marks a site's session expired (or not). Returns whether this changed anything, so the
    /// "session expired" notification goes out once per episode.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn set_session_expired(
        &self,
        site: &SiteKey,
        expired: bool,
        now: u64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .0
            .prepare_cached(
                "INSERT INTO sites (site, session_expired, changed_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT(site) DO UPDATE SET session_expired = excluded.session_expired, changed_at = excluded.changed_at
                 WHERE sites.session_expired != excluded.session_expired",
            )?
            .execute(params![site.as_str(), expired, now])?;
        Ok(changed == 1)
    }

    /// Records that the "blocked for a long time" alert was sent for the episode that began at
    /// `since`. Returns `true` only the first time per episode.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn claim_blocked_alert(&self, site: &SiteKey, since: u64) -> Result<bool, StoreError> {
        let changed = self
            .0
            .prepare_cached(
                "INSERT INTO sites (site, session_expired, changed_at, blocked_alert_for) VALUES (?1, 0, ?2, ?2)
                 ON CONFLICT(site) DO UPDATE SET blocked_alert_for = excluded.blocked_alert_for
                 WHERE sites.blocked_alert_for IS NULL OR sites.blocked_alert_for != excluded.blocked_alert_for",
            )?
            .execute(params![site.as_str(), since])?;
        Ok(changed == 1)
    }

    /// Enqueues a site-level notification (blocked for long, session expired).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn enqueue(
        &self,
        n: &Notification,
        channels: &[ChannelName],
        now: u64,
    ) -> Result<(), StoreError> {
        outbox::enqueue(&self.0, n, channels, now)?;
        Ok(())
    }

    /// Keeps what a search's checks taught about its arrival rates, and its last good check.
    ///
    /// # Errors
    /// On SQL failure, or a model that does not serialise.
    pub fn save_arrival_rates(
        &self,
        search_id: u32,
        model: &notifio_policy::ArrivalRates,
        last_good_at: Option<u64>,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(model)?;
        self.0
            .prepare_cached(
                "INSERT INTO rates (search_id, model, last_good_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT(search_id) DO UPDATE SET model = excluded.model, last_good_at = excluded.last_good_at",
            )?
            .execute(params![search_id, json, last_good_at])?;
        Ok(())
    }

    /// Stores a small JSON value under a key (metrics snapshot for `notifio status`).
    ///
    /// # Errors
    /// On SQL failure.
    pub fn put_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.0
            .prepare_cached("INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")?
            .execute(params![key, value])?;
        Ok(())
    }

    /// Marks listing `id` of `site` (the inbox's new, seen, favourite, hidden, contacted).
    /// Returns whether there is such a listing.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn set_listing_state(
        &self,
        site: &str,
        id: &str,
        state: crate::inbox::ListingState,
        now: u64,
    ) -> Result<bool, StoreError> {
        inbox::set_state(&self.0, site, id, state, now)
    }
}

/// [`Store::record_check`]'s body, inside the transaction: who hears the check, what of its
/// listings is new, what is gone, what got cheaper, what is announced, and each search's
/// history row.
fn record_check_in(tx: &Connection, rec: &CheckRecord<'_>) -> Result<Recorded, StoreError> {
    let mut out = Recorded::default();
    if let Some(listings) = rec.listings {
        let pages_read = u32::try_from(rec.pages.len().max(1)).unwrap_or(u32::MAX);
        let audience = take_baselines(tx, rec, pages_read)?;
        out.baseline = !audience.first_looks.is_empty();
        let news = record_listings(tx, rec, listings, pages_read, audience.covered, &mut out)?;
        out.changes = prices::record(tx, rec.site.as_str(), listings, rec.now)?;
        out.enqueued = news::announce(tx, rec, &audience.searches, listings, &news, &out.changes)?;
    }
    for (id, _, _) in rec.searches {
        write_history(
            tx,
            *id,
            rec.now,
            rec.outcome,
            rec.status,
            rec.attempts,
            rec.latency_ms,
            out.new.len(),
            rec.history,
        )?;
    }
    Ok(out)
}

/// Reads where each search stands on its baseline, lets [`announce::audience`] decide who
/// hears this check, and writes the baselines it takes and the pages it adds to them.
fn take_baselines(
    tx: &Connection,
    rec: &CheckRecord<'_>,
    pages_read: u32,
) -> Result<crate::announce::Audience, StoreError> {
    let mut so_far = Vec::with_capacity(rec.searches.len());
    for (id, _, notify_existing) in rec.searches {
        let pages: Option<u32> = tx
            .prepare_cached(
                "SELECT CASE WHEN baseline_at IS NULL THEN NULL
                        ELSE COALESCE(baseline_pages, 1) END FROM searches WHERE id = ?1",
            )?
            .query_row([id], |r| r.get(0))?;
        so_far.push(crate::announce::BaselineSoFar {
            pages,
            notify_existing: *notify_existing,
        });
    }
    let audience = crate::announce::audience(&so_far);
    for ((id, _, _), s) in rec.searches.iter().zip(&so_far) {
        match s.pages {
            None => tx
                .prepare_cached(
                    "UPDATE searches SET baseline_at = ?2, baseline_pages = ?3 WHERE id = ?1",
                )?
                .execute(params![id, rec.now, pages_read])?,
            Some(known) if pages_read > known => tx
                .prepare_cached("UPDATE searches SET baseline_pages = ?2 WHERE id = ?1")?
                .execute(params![id, pages_read])?,
            Some(_) => 0,
        };
    }
    Ok(audience)
}

/// Which of the page's listings each search already has, and where each stands in its
/// lifecycle (the page it was last seen on, its misses): one indexed lookup per search
/// instead of two INSERT OR IGNOREs per listing (a changed page usually differs by one
/// listing). A search's listing is always in `listings` too: both rows are written in the
/// same transaction and neither is ever deleted.
fn known_listings(
    tx: &Connection,
    rec: &CheckRecord<'_>,
    page_ids: &str,
) -> Result<Vec<HashMap<String, lifecycle::Followed>>, StoreError> {
    let mut known_stmt = tx.prepare_cached(
        "SELECT listing_id, seen_page, misses, first_seen, seen_rank FROM search_listings WHERE search_id = ?1 AND listing_id IN (SELECT value FROM json_each(?2))",
    )?;
    let mut known = Vec::with_capacity(rec.searches.len());
    for (id, _, _) in rec.searches {
        known.push(
            known_stmt
                .query_map(params![id, page_ids], |r| {
                    Ok((
                        r.get(0)?,
                        lifecycle::Followed {
                            page: r.get(1)?,
                            misses: r.get(2)?,
                            age: lifecycle::Age {
                                first_seen: r.get(3)?,
                                rank: std::cmp::Reverse(r.get(4)?),
                            },
                        },
                    ))
                })?
                .collect::<Result<_, _>>()?,
        );
    }
    Ok(known)
}

/// Writes the check's listings: each search's link to the ones it did not have, the ones the
/// site never showed before (in `out.new`), what each search has seen again, and, after a
/// check that read all it set out to, what is missing now. Returns the new listings on the
/// pages `covered` (the news).
fn record_listings(
    tx: &Connection,
    rec: &CheckRecord<'_>,
    listings: &[Listing],
    pages_read: u32,
    covered: usize,
    out: &mut Recorded,
) -> Result<Vec<Listing>, StoreError> {
    let site = rec.site.as_str();
    // The page (1, 2, …) listing `i` was found on.
    let page_of = |i: usize| rec.pages.iter().take_while(|end| i >= **end).count() + 1;
    let mut news: Vec<Listing> = Vec::new();
    let mut insert_listing = tx.prepare_cached(
        "INSERT OR IGNORE INTO listings (site, listing_id, first_seen, title, price, currency, rooms, area_m2, url, image)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    let mut link = tx.prepare_cached("INSERT OR IGNORE INTO search_listings (search_id, site, listing_id, first_seen, seen_page, seen_rank) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
    let page_ids =
        serde_json::to_string(&listings.iter().map(|l| l.id.as_str()).collect::<Vec<_>>())?;
    let known = known_listings(tx, rec, &page_ids)?;
    // A listing with a new id is still not new if the site showed its link before under
    // another id: changing `id_attr`, or a profile reading ids differently, would otherwise
    // announce the whole page. Only a link that no other listing on this page shares counts
    // (cards that all link to one contact page say nothing).
    let mut links: HashMap<&str, usize> = HashMap::new();
    for url in listings.iter().filter_map(|l| l.url.as_deref()) {
        *links.entry(url).or_default() += 1;
    }
    let mut seen_link = tx.prepare_cached(
        "SELECT MIN(first_seen) FROM listings WHERE site = ?1 AND url = ?2 AND listing_id <> ?3",
    )?;
    let mut keep_first_seen = tx.prepare_cached(
        "UPDATE listings SET first_seen = ?3 WHERE site = ?1 AND listing_id = ?2",
    )?;
    // The oldest listing each search found now (a new one's age is this check).
    let mut oldest: Vec<Option<lifecycle::Age>> = vec![None; rec.searches.len()];
    for (i, l) in listings.iter().enumerate() {
        let page = u32::try_from(page_of(i)).unwrap_or(u32::MAX);
        let rank = u32::try_from(i).unwrap_or(u32::MAX);
        let mut missing: Vec<u32> = Vec::new();
        for (((id, _, _), k), old) in rec.searches.iter().zip(&known).zip(&mut oldest) {
            let age = match k.get(&l.id) {
                Some(was) => {
                    lifecycle::seen(tx, *id, (site, &l.id), (page, rank), *was)?;
                    was.age
                }
                None => {
                    missing.push(*id);
                    lifecycle::Age {
                        first_seen: rec.now,
                        rank: std::cmp::Reverse(rank),
                    }
                }
            };
            *old = Some(old.map_or(age, |o| o.min(age)));
        }
        if missing.is_empty() {
            continue;
        }
        let fresh = insert_listing.execute(params![
            site, l.id, rec.now, l.title, l.price, l.currency, l.rooms, l.area_m2, l.url, l.image
        ])? == 1;
        for id in missing {
            link.execute(params![id, site, l.id, rec.now, page, rank])?;
        }
        if !fresh {
            continue;
        }
        let first_seen = match l.url.as_deref() {
            Some(url) if links.get(url) == Some(&1) => {
                seen_link.query_row(params![site, url, l.id], |r| r.get::<_, Option<u64>>(0))?
            }
            _ => None,
        };
        match first_seen {
            Some(first_seen) => {
                // Known since then: "recent listings" keep their place.
                keep_first_seen.execute(params![site, l.id, first_seen])?;
                out.rekeyed += 1;
            }
            None => {
                if page_of(i) <= covered {
                    news.push(l.clone());
                }
                out.new.push(l.clone());
            }
        }
    }
    // A check that read all it set out to (no refusal cut it short) tells which of the
    // listings it read before are missing now.
    if rec.outcome == Outcome::Ok {
        for ((id, _, _), oldest) in rec.searches.iter().zip(oldest) {
            // What its check before found (`found` is written after this).
            let found_before: Option<usize> = tx
                .prepare_cached("SELECT found FROM searches WHERE id = ?1")?
                .query_row([id], |r| r.get(0))?;
            let read = lifecycle::Window {
                pages: pages_read,
                ids: &page_ids,
                oldest,
                shrank: found_before.is_some_and(|n| listings.len() < n),
            };
            out.gone += lifecycle::missed(tx, *id, read, rec.now, rec.gone_after)?;
        }
    }
    Ok(news)
}

/// One search's check-history row, its last check and outcome, and the pruning to the last
/// `history` rows.
#[allow(clippy::too_many_arguments)]
fn write_history(
    tx: &Connection,
    search_id: u32,
    at: u64,
    outcome: Outcome,
    status: Option<u16>,
    attempts: u32,
    latency_ms: u64,
    new_count: usize,
    history: usize,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO checks (search_id, at, outcome, status, attempts, latency_ms, new_count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![search_id, at, ByName(outcome), status, attempts, latency_ms, new_count])?;
    tx.prepare_cached("UPDATE searches SET last_checked_at = ?2, last_outcome = ?3 WHERE id = ?1")?
        .execute(params![search_id, at, ByName(outcome)])?;
    tx.prepare_cached(
        "DELETE FROM checks WHERE search_id = ?1 AND id <= (SELECT id FROM checks WHERE search_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
    )?
    .execute(params![search_id, history])?;
    Ok(())
}

/// Creates the file with mode 0600 before SQLite opens it, so the database is never readable
/// by others, not even for an instant.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: std::ffi::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    /// `transaction` commits what its closure wrote when the closure succeeds, and nothing of
    /// it when the closure fails or panics: the transaction is dropped, and dropping rolls back.
    #[test]
    fn a_transaction_commits_on_ok_and_rolls_back_on_error_or_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let site = SiteKey::from_stored("flats.example".to_owned());
        let expired = |store: &Store| store.expired_sessions().unwrap();

        let failed: Result<(), StoreError> = store.transaction(|tx| {
            tx.set_session_expired(&site, true, 1)?;
            Err(StoreError::Sql(rusqlite::Error::InvalidQuery))
        });
        assert!(failed.is_err());
        assert!(
            expired(&store).is_empty(),
            "a failed closure leaves nothing"
        );

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store.transaction(|tx| -> Result<(), StoreError> {
                tx.set_session_expired(&site, true, 2)?;
                panic!("in the middle of a check");
            })
        }));
        assert!(panicked.is_err());
        assert!(
            expired(&store).is_empty(),
            "a panicking closure leaves nothing"
        );

        store
            .transaction(|tx| tx.set_session_expired(&site, true, 3))
            .unwrap();
        assert_eq!(expired(&store), [site]);
    }

    /// Root (as tests run here) may write a read-only file, so the read-only case is the
    /// mapping of SQLite's own code: the file, the cause once, what to do.
    #[test]
    fn each_storage_failure_names_the_file_and_what_to_do() {
        let p = Path::new("/home/ana/.local/share/notifio/notifio.db");
        let say = |code| unusable_db(p, &sqlite(code)).to_string();
        let ro = say(rusqlite::ffi::SQLITE_READONLY);
        assert!(
            ro.starts_with(&format!("the state database {} is read-only", p.display())),
            "{ro}"
        );
        assert!(ro.contains("writable"), "{ro}");
        assert_eq!(ro.matches("readonly").count(), 1, "{ro}");
        let bad = say(rusqlite::ffi::SQLITE_NOTADB);
        assert!(bad.contains("never deletes or rewrites"), "{bad}");
        assert!(
            bad.contains(&format!("mv {0} {0}.broken", p.display())),
            "{bad}"
        );
        let corrupt = say(rusqlite::ffi::SQLITE_CORRUPT);
        assert_eq!(corrupt.matches("malformed").count(), 1, "{corrupt}");
        let dir = unusable_path(
            Path::new("/srv/state"),
            "the state directory",
            &std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        )
        .to_string();
        assert!(
            dir.starts_with("cannot create the state directory /srv/state: "),
            "{dir}"
        );
        assert!(dir.contains("state_dir"), "{dir}");
        // No error source: `{:#}` (anyhow's chain) says the cause once.
        let e = StoreError::from(sqlite(rusqlite::ffi::SQLITE_CORRUPT));
        assert!(std::error::Error::source(&e).is_none());
    }
}
