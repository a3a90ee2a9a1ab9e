//! When a listing is gone, and how long listings stay online (docs/dashboard.md#gone-listings).
//!
//! A listing is gone once every search that holds it has missed it on `gone_after`
//! consecutive good checks (default 3). A check counts against a listing only if it read the
//! page the listing was last seen on: a search whose page 2 failed, or whose `pages` was
//! lowered, says nothing about the listings further down. A failed check neither counts nor
//! resets the count. A listing that was the last one read and is older than every listing
//! still shown may only have been pushed off the end by newer ones: unless the search now
//! shows fewer listings than before (so nothing was pushed), it is "off the pages", not
//! missed, and followed again if it shows up again. Each search's row keeps the page it last
//! saw the listing on, how many checks in a row missed it, and when the first of them ran; the
//! listing keeps when it went (that first miss, the latest over its searches), so "online
//! for" is `gone_at - first_seen` (to within one interval). A gone listing that comes back
//! is online again.
//!
//! The counts cost little: a page's listings are looked up anyway (to find the new ones), a
//! row is written only when its page or count changes, and an unchanged page touches only the
//! rows already missing (a partial index holds the followed rows).

use super::StoreError;
use rusqlite::{Connection, params};

/// Migration 11: the page each search last saw a listing on and its place when first seen,
/// its misses in a row (-1: gone from this search; -2: from before this migration, and -3:
/// pushed off the pages read, both followed again once seen), when the first of them was,
/// and when the listing went.
pub(super) const MIGRATE_TO_LIFECYCLE: &str = "
    ALTER TABLE search_listings ADD COLUMN seen_page INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE search_listings ADD COLUMN seen_rank INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE search_listings ADD COLUMN misses INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE search_listings ADD COLUMN missing_since INTEGER;
    UPDATE search_listings SET misses = -2;
    ALTER TABLE listings ADD COLUMN gone_at INTEGER;
    CREATE INDEX search_listings_followed ON search_listings (search_id, listing_id)
        WHERE misses >= 0;";

/// `misses` of a row whose listing is gone.
const GONE: i64 = -1;

/// `misses` of a row from before lifecycles were followed.
const UNFOLLOWED: i64 = -2;

/// Where a search's row of a listing stands: the page it was last seen on, its misses, and
/// its age on the search's pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Followed {
    pub(super) page: u32,
    pub(super) misses: i64,
    pub(super) age: Age,
}

/// How old a listing is on a search's pages: when the search first saw it, and its place
/// then (further down is older, on a page of the newest first). The smallest is the oldest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Age {
    pub(super) first_seen: u64,
    pub(super) rank: std::cmp::Reverse<u32>,
}

/// What a good check of a search read: how far it looked, and what it found.
#[derive(Clone, Copy, Debug)]
pub(super) struct Window<'a> {
    /// Result pages read.
    pub(super) pages: u32,
    /// The ids found (a JSON array).
    pub(super) ids: &'a str,
    /// The oldest of them (`None`: none found).
    pub(super) oldest: Option<Age>,
    /// Fewer listings than the search's check before found: none can have been pushed off.
    pub(super) shrank: bool,
}

/// Listing `id` is on page `page` of search `search`'s check, at place `rank`, and the
/// search's row was `was`: the row is followed from here (written only when something
/// changed), and a gone listing is online again.
pub(super) fn seen(
    tx: &Connection,
    search: u32,
    (site, id): (&str, &str),
    (page, rank): (u32, u32),
    was: Followed,
) -> Result<(), StoreError> {
    if was.misses == 0 && was.page == page {
        return Ok(());
    }
    // A row from before this version takes its place from now.
    let rank = if was.misses == UNFOLLOWED {
        rank
    } else {
        was.age.rank.0
    };
    tx.prepare_cached(
        "UPDATE search_listings SET seen_page = ?3, seen_rank = ?4, misses = 0, missing_since = NULL
         WHERE search_id = ?1 AND listing_id = ?2",
    )?
    .execute(params![search, id, page, rank])?;
    if was.misses == GONE {
        tx.prepare_cached(
            "UPDATE listings SET gone_at = NULL WHERE site = ?1 AND listing_id = ?2",
        )?
        .execute(params![site, id])?;
    }
    Ok(())
}

/// A good check of `search` read `read`: every followed listing last seen on the pages it
/// read and not among what it found is missed once more; one that was there last time and
/// is older than all it found is off the pages instead. Returns the listings that are gone now.
pub(super) fn missed(
    tx: &Connection,
    search: u32,
    read: Window<'_>,
    now: u64,
    gone_after: u32,
) -> Result<usize, StoreError> {
    const NOT_READ: &str = "search_id = ?1 AND misses >= 0 AND seen_page <= ?2
        AND listing_id NOT IN (SELECT value FROM json_each(?3))";
    if let (Some(oldest), false) = (read.oldest, read.shrank) {
        tx.prepare_cached(&format!(
            "UPDATE search_listings SET misses = -3 WHERE {NOT_READ} AND misses = 0
               AND (first_seen < ?4 OR (first_seen = ?4 AND seen_rank > ?5))"
        ))?
        .execute(params![
            search,
            read.pages,
            read.ids,
            oldest.first_seen,
            oldest.rank.0
        ])?;
    }
    let n = tx
        .prepare_cached(&format!(
            "UPDATE search_listings SET misses = misses + 1, missing_since = COALESCE(missing_since, ?4)
             WHERE {NOT_READ}"
        ))?
        .execute(params![search, read.pages, read.ids, now])?;
    if n == 0 {
        return Ok(0);
    }
    declare_gone(tx, search, gone_after)
}

/// A good check of `search` found its page as it was (304, or the same bytes): the listings
/// already missing are missed once more. Returns the listings that are gone now.
pub(super) fn missed_again(
    tx: &Connection,
    search: u32,
    gone_after: u32,
) -> Result<usize, StoreError> {
    let n = tx
        .prepare_cached(
            "UPDATE search_listings SET misses = misses + 1
             WHERE search_id = ?1 AND misses >= 0 AND missing_since IS NOT NULL",
        )?
        .execute(params![search])?;
    if n == 0 {
        return Ok(0);
    }
    declare_gone(tx, search, gone_after)
}

/// The listings `search` has missed `gone_after` times that no other active search still
/// sees: each is gone, since the latest first miss over its searches.
fn declare_gone(tx: &Connection, search: u32, gone_after: u32) -> Result<usize, StoreError> {
    let candidates: Vec<(String, String)> = tx
        .prepare_cached(
            "SELECT site, listing_id FROM search_listings
             WHERE search_id = ?1 AND misses >= 0 AND misses >= ?2",
        )?
        .query_map(params![search, gone_after], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut gone = 0;
    for (site, id) in candidates {
        let still_seen: bool = tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM search_listings sl JOIN searches s ON s.id = sl.search_id
                 WHERE sl.site = ?1 AND sl.listing_id = ?2 AND s.active
                   AND sl.misses >= 0 AND sl.misses < ?3)",
            )?
            .query_row(params![site, id, gone_after], |r| r.get(0))?;
        if still_seen {
            continue;
        }
        tx.prepare_cached(
            "UPDATE listings SET gone_at = (SELECT MAX(missing_since) FROM search_listings
               WHERE site = ?1 AND listing_id = ?2 AND misses >= ?3)
             WHERE site = ?1 AND listing_id = ?2",
        )?
        .execute(params![site, id, gone_after])?;
        tx.prepare_cached(
            "UPDATE search_listings SET misses = -1 WHERE site = ?1 AND listing_id = ?2 AND misses >= ?3",
        )?
        .execute(params![site, id, gone_after])?;
        gone += 1;
    }
    Ok(gone)
}

/// What a search's listings did lately: the dashboard's chart and `status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchLifecycle {
    /// New listings per day, the last [`Self::DAYS`] days, oldest first (today last).
    pub new_per_day: Vec<u32>,
    /// Listings of this search that are gone (since lifecycles were followed).
    pub gone: u32,
    /// The mean time its latest gone listings stayed online (ms); `None` before the first is gone.
    pub stays_online_ms: Option<u64>,
    /// The time each of its latest gone listings stayed online (ms), newest last (at most
    /// [`Self::SAMPLES`]): the chart's second row.
    pub online_ms: Vec<u64>,
}

impl SearchLifecycle {
    /// Days in `new_per_day`.
    pub const DAYS: usize = 14;
    /// Gone listings in `online_ms`, and in the mean.
    pub const SAMPLES: usize = 50;
}

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// Search `search`'s lifecycle as of `now`: its days are the 24-hour steps back from `now`
/// (the last one ends at `now`), not calendar days, so the chart needs no time zone.
pub(super) fn of_search(
    conn: &Connection,
    search: u32,
    now: u64,
) -> Result<SearchLifecycle, StoreError> {
    let days = SearchLifecycle::DAYS as u64;
    let from = now.saturating_sub(days * DAY_MS);
    let mut new_per_day = vec![0u32; SearchLifecycle::DAYS];
    // A listing is new to a search when it came after the search's baseline.
    let mut stmt = conn.prepare_cached(
        "SELECT sl.first_seen FROM search_listings sl JOIN searches s ON s.id = sl.search_id
         WHERE sl.search_id = ?1 AND sl.first_seen > ?2 AND sl.first_seen <= ?3
           AND s.baseline_at IS NOT NULL AND sl.first_seen > s.baseline_at",
    )?;
    for at in stmt.query_map(params![search, from, now], |r| r.get::<_, u64>(0))? {
        let age = now.saturating_sub(at?);
        let back = usize::try_from(age / DAY_MS).unwrap_or(usize::MAX);
        if let Some(day) = SearchLifecycle::DAYS.checked_sub(back + 1) {
            new_per_day[day] += 1;
        }
    }
    let gone: u32 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM search_listings sl JOIN listings l
               ON l.site = sl.site AND l.listing_id = sl.listing_id
             WHERE sl.search_id = ?1 AND sl.misses = -1 AND l.gone_at IS NOT NULL",
        )?
        .query_row(params![search], |r| r.get(0))?;
    let mut online_ms: Vec<u64> = conn
        .prepare_cached(
            "SELECT l.gone_at - l.first_seen FROM search_listings sl JOIN listings l
               ON l.site = sl.site AND l.listing_id = sl.listing_id
             WHERE sl.search_id = ?1 AND sl.misses = -1 AND l.gone_at IS NOT NULL
             ORDER BY l.gone_at DESC LIMIT ?2",
        )?
        .query_map(params![search, SearchLifecycle::SAMPLES], |r| {
            r.get::<_, i64>(0)
        })?
        .map(|d| d.map(|d| u64::try_from(d).unwrap_or(0)))
        .collect::<Result<_, _>>()?;
    online_ms.reverse();
    Ok(SearchLifecycle {
        new_per_day,
        gone,
        stays_online_ms: mean(&online_ms),
        online_ms,
    })
}

/// The mean ("listings stay online 6 h on average"), rounded to the nearest ms.
fn mean(values: &[u64]) -> Option<u64> {
    let n = u128::try_from(values.len()).ok().filter(|n| *n > 0)?;
    let sum: u128 = values.iter().map(|v| u128::from(*v)).sum();
    u64::try_from((sum + n / 2) / n).ok()
}

#[cfg(test)]
mod tests {
    use super::mean;

    #[test]
    fn the_average_is_the_mean() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean(&[5]), Some(5));
        assert_eq!(mean(&[9, 1, 5]), Some(5));
        assert_eq!(mean(&[1, 2]), Some(2), "rounded to the nearest");
        assert_eq!(mean(&[1, 1, 10]), Some(4), "not the median (1)");
        assert_eq!(mean(&[u64::MAX, u64::MAX]), Some(u64::MAX));
    }
}
