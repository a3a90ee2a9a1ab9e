//! Each listing's price history, and the queries the announcing needs: a listing's last price,
//! and the listings first seen on other sites lately (for "also on …").
//!
//! `listings.price` is the last price a card showed (one indexed read per page finds every
//! listing's); `prices` keeps every price it has had since it first changed, with its currency
//! and when it was first shown, so a restart loses no history and a drop is measured from the
//! right price. A listing whose price never changed has no rows: its one price is the one it
//! was first seen with (most never change, and a page of new listings then costs no extra
//! writes). A card without a price changes nothing: the last known price stays.

use super::StoreError;
use crate::duplicate;
use crate::listing::Listing;
use crate::price::{PriceChange, currency_code};
use rusqlite::{Connection, params};

/// Migration 5: the price history (a listing's price so far is its first row, implicitly), a
/// first-seen index for the cross-site query, and what filters let through per search.
pub(super) const MIGRATE_TO_PRICE_HISTORY: &str = "
    CREATE TABLE prices (
        site TEXT NOT NULL,
        listing_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        price REAL NOT NULL,
        currency TEXT,
        PRIMARY KEY (site, listing_id, at)
    ) WITHOUT ROWID;
    CREATE INDEX listings_by_first_seen ON listings (first_seen);
    ALTER TABLE search_listings ADD COLUMN matched INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE searches ADD COLUMN found INTEGER;
    ALTER TABLE searches ADD COLUMN matched INTEGER;";

/// Prices closer than this are one price (they are parsed from text).
const SAME: f64 = 0.005;

/// Records the prices the page shows: a listing's new price becomes its last price and a
/// history row (after the price it had until now, when that was only implicit). Returns the
/// changes against the last recorded price (not a first price, nor a switch of currency,
/// which cannot be compared).
///
/// # Errors
/// On SQL failure.
pub(super) fn record(
    tx: &Connection,
    site: &str,
    page: &[Listing],
    now: u64,
) -> Result<Vec<PriceChange>, StoreError> {
    let priced: Vec<&Listing> = page.iter().filter(|l| l.price.is_some()).collect();
    if priced.is_empty() {
        return Ok(Vec::new());
    }
    let ids = serde_json::to_string(&priced.iter().map(|l| l.id.as_str()).collect::<Vec<_>>())?;
    let mut last = std::collections::HashMap::new();
    {
        let mut stmt = tx.prepare_cached(
            "SELECT listing_id, price, currency, first_seen FROM listings
             WHERE site = ?1 AND listing_id IN (SELECT value FROM json_each(?2))",
        )?;
        let rows = stmt.query_map(params![site, ids], |r| {
            Ok((
                r.get::<_, String>(0)?,
                (
                    r.get::<_, Option<f64>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, u64>(3)?,
                ),
            ))
        })?;
        for row in rows {
            let (id, v) = row?;
            last.insert(id, v);
        }
    }
    let mut changes = Vec::new();
    for l in priced {
        let Some(price) = l.price.filter(|p| p.is_finite()) else {
            continue;
        };
        // Not in `listings` (cannot happen: the page's listings were just written).
        let Some((old, old_currency, first_seen)) = last.get(&l.id) else {
            continue;
        };
        let moved = match old {
            Some(old) => {
                (old - price).abs() > SAME
                    || matches!((old_currency.as_deref(), l.currency.as_deref()),
                        (Some(a), Some(b)) if currency_code(a) != currency_code(b))
            }
            None => true,
        };
        if !moved {
            continue;
        }
        let mut add = tx.prepare_cached(
            "INSERT OR REPLACE INTO prices (site, listing_id, at, price, currency) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        if let Some(old) = old {
            let written: bool = tx
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM prices WHERE site = ?1 AND listing_id = ?2)",
                )?
                .query_row(params![site, l.id], |r| r.get(0))?;
            if !written {
                add.execute(params![site, l.id, first_seen, old, old_currency])?;
            }
        }
        let currency = l.currency.as_deref().or(old_currency.as_deref());
        add.execute(params![site, l.id, now, price, currency])?;
        tx.prepare_cached(
            "UPDATE listings SET price = ?3, currency = ?4 WHERE site = ?1 AND listing_id = ?2",
        )?
        .execute(params![site, l.id, price, currency])?;
        if let Some(old) = old
            && let Some(change) = PriceChange::between(
                &l.id,
                (*old, old_currency.as_deref()),
                (price, l.currency.as_deref()),
            )
        {
            changes.push(change);
        }
    }
    Ok(changes)
}

/// The listings first seen on sites other than `site` since `since` that could be `l`'s twin:
/// the same rooms (as parsed from the same kind of text, so equal), area and price within
/// [`duplicate`]'s shares (the index on rooms and area, which also holds price, first seen
/// and site, answers this without reading any row but the matches), oldest first. Empty when
/// `l` lacks one of the three figures, since matching needs them all.
///
/// [`duplicate`]: crate::duplicate
///
/// # Errors
/// On SQL failure.
pub(super) fn twins_elsewhere(
    tx: &Connection,
    site: &str,
    since: u64,
    l: &Listing,
) -> Result<Vec<crate::announce::Elsewhere>, StoreError> {
    let (Some(rooms), Some(area), Some(price)) = (l.rooms, l.area_m2, l.price) else {
        return Ok(Vec::new());
    };
    let (area_lo, area_hi) = duplicate::within(area, duplicate::AREA_WITHIN);
    let (price_lo, price_hi) = duplicate::within(price, duplicate::PRICE_WITHIN);
    let mut stmt = tx.prepare_cached(
        "SELECT site, listing_id, first_seen, title, price, currency, rooms, area_m2, url
         FROM listings
         WHERE rooms = ?3
           AND area_m2 BETWEEN ?4 AND ?5
           AND price BETWEEN ?6 AND ?7
           AND first_seen >= ?2 AND site <> ?1
         ORDER BY first_seen, site, listing_id",
    )?;
    let rows = stmt.query_map(
        params![site, since, rooms, area_lo, area_hi, price_lo, price_hi],
        |r| {
            Ok(crate::announce::Elsewhere {
                site: r.get(0)?,
                first_seen: r.get(2)?,
                listing: Listing {
                    id: r.get(1)?,
                    title: r.get(3)?,
                    price: r.get(4)?,
                    currency: r.get(5)?,
                    rooms: r.get(6)?,
                    area_m2: r.get(7)?,
                    url: r.get(8)?,
                    ..Listing::default()
                },
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One listing's price history, oldest first: (when, price, currency). Without rows, the
/// price it was first seen with (if any) is its whole history.
///
/// # Errors
/// On SQL failure.
pub(super) fn history(
    conn: &Connection,
    site: &str,
    id: &str,
) -> Result<Vec<(u64, f64, Option<String>)>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT at, price, currency FROM prices WHERE site = ?1 AND listing_id = ?2
         UNION ALL
         SELECT first_seen, price, currency FROM listings
         WHERE site = ?1 AND listing_id = ?2 AND price IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM prices WHERE site = ?1 AND listing_id = ?2)
         ORDER BY 1",
    )?;
    let rows = stmt.query_map(params![site, id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}
