//! The listings inbox: every listing the searches found, newest first, with what the user
//! marked it (docs/dashboard.md#the-listings-inbox).
//!
//! A listing's mark (new, seen, favourite, hidden, contacted) belongs to the listing, not to
//! a search: it is kept in `listings` beside the listing itself, so it survives restarts,
//! renaming or removing a search, and a config edit. What a mark changes in what is announced
//! is [`crate::announce`]'s (a hidden listing is never announced again, a favourite's price
//! drop always is); this module reads the inbox and writes marks.

use super::StoreError;
use super::names::{ByName, Named};
use super::prices;
use crate::duplicate;
use crate::inbox::{AlsoOnListing, InboxListing, InboxPage, InboxQuery, ListingState};
use crate::listing::Listing;
use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

/// Migration 10: each listing's mark and when it was set (NULL: new, never marked), and the
/// searches of a listing found by the listing (the inbox names them for every row).
pub(super) const MIGRATE_TO_MARKS: &str = "
    ALTER TABLE listings ADD COLUMN state TEXT;
    ALTER TABLE listings ADD COLUMN state_at INTEGER;
    CREATE INDEX search_listings_by_listing ON search_listings (site, listing_id);";

impl Named for ListingState {
    const WHAT: &'static str = "listing state";
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn from_name(name: &str) -> Option<Self> {
        Self::parse(name)
    }
}

/// The `WHERE` clause of `q` over `listings l`, and its parameters.
fn filters(q: &InboxQuery) -> (String, Vec<Value>) {
    let mut clauses = vec![
        // Listings of searches still configured: a removed search's listings leave the inbox
        // (their marks stay, should it come back).
        "EXISTS (SELECT 1 FROM search_listings sl JOIN searches s ON s.id = sl.search_id
          WHERE sl.site = l.site AND sl.listing_id = l.listing_id AND s.active
          AND (?1 IS NULL OR s.name = ?1) AND (?2 IS NULL OR sl.matched = ?2)
          AND (?3 = 0 OR (s.baseline_at IS NOT NULL AND sl.first_seen > s.baseline_at)))"
            .to_owned(),
    ];
    let mut values = vec![
        q.search.clone().map_or(Value::Null, Value::Text),
        q.matched
            .map_or(Value::Null, |m| Value::Integer(i64::from(m))),
        Value::Integer(i64::from(q.news_only)),
    ];
    let mut push = |clause: &str, v: Value| {
        values.push(v);
        clauses.push(clause.replace('?', &format!("?{}", values.len())));
    };
    if let Some(site) = &q.site {
        push("l.site = ?", Value::Text(site.clone()));
    }
    match q.state {
        // The inbox without a state asked for leaves the hidden out: that is what hiding is.
        None => push(
            "(l.state IS NULL OR l.state <> ?)",
            Value::Text("hidden".into()),
        ),
        Some(ListingState::New) => push(
            "(l.state IS NULL OR l.state = ?)",
            Value::Text("new".into()),
        ),
        Some(s) => push("l.state = ?", Value::Text(s.as_str().to_owned())),
    }
    if let Some(min) = q.min_price {
        push("l.price >= ?", Value::Real(min));
    }
    if let Some(max) = q.max_price {
        push("l.price <= ?", Value::Real(max));
    }
    if let Some(gone) = q.gone {
        push(
            "(l.gone_at IS NOT NULL) = ?",
            Value::Integer(i64::from(gone)),
        );
    }
    if let Some(since) = q.since {
        push(
            "l.first_seen >= ?",
            Value::Integer(i64::try_from(since).unwrap_or(i64::MAX)),
        );
    }
    (clauses.join(" AND "), values)
}

/// One page of the inbox for `q`, newest first, twins on other sites grouped into the first
/// seen of them (as "also on").
///
/// # Errors
/// On SQL failure.
pub(super) fn page(conn: &Connection, q: &InboxQuery) -> Result<InboxPage, StoreError> {
    let (clause, values) = filters(q);
    let total: u64 = conn.query_row(
        &format!("SELECT COUNT(*) FROM listings l WHERE {clause}"),
        params_from_iter(values.iter()),
        |r| r.get(0),
    )?;
    let per_page = q.per_page.clamp(1, InboxQuery::MAX_PER_PAGE);
    let offset = q.page.saturating_sub(1).saturating_mul(per_page);
    let mut stmt = conn.prepare(&format!(
        "SELECT l.site, l.listing_id, l.title, l.price, l.currency, l.rooms, l.area_m2, l.url,
                l.image, l.first_seen, l.state, l.gone_at,
                (SELECT group_concat(name, char(31)) FROM (SELECT s.name FROM search_listings sl
                   JOIN searches s ON s.id = sl.search_id
                   WHERE sl.site = l.site AND sl.listing_id = l.listing_id AND s.active
                   ORDER BY s.name)),
                (SELECT MAX(sl.matched) FROM search_listings sl JOIN searches s ON s.id = sl.search_id
                   WHERE sl.site = l.site AND sl.listing_id = l.listing_id AND s.active)
         FROM listings l WHERE {clause}
         ORDER BY l.first_seen DESC, l.site, l.listing_id LIMIT {per_page} OFFSET {offset}"
    ))?;
    let rows = stmt.query_map(params_from_iter(values.iter()), |r| {
        let searches: Option<String> = r.get(12)?;
        let state: Option<ByName<ListingState>> = r.get(10)?;
        Ok(InboxListing {
            site: r.get(0)?,
            listing: Listing {
                id: r.get(1)?,
                title: r.get(2)?,
                price: r.get(3)?,
                currency: r.get(4)?,
                rooms: r.get(5)?,
                area_m2: r.get(6)?,
                url: r.get(7)?,
                image: r.get(8)?,
                description: None,
                fallback: Vec::new(),
            },
            first_seen: r.get(9)?,
            gone_at: r.get(11)?,
            state: state.map_or(ListingState::New, |s| s.0),
            searches: searches
                .map(|s| s.split('\u{1f}').map(str::to_owned).collect())
                .unwrap_or_default(),
            matched: r.get::<_, Option<bool>>(13)?.unwrap_or(true),
            prices: Vec::new(),
            also_on: Vec::new(),
        })
    })?;
    let mut listings: Vec<InboxListing> = rows.collect::<Result<_, _>>()?;
    for l in &mut listings {
        l.prices = prices::history(conn, &l.site, &l.listing.id)?
            .into_iter()
            .map(|(at, price, _)| (at, price))
            .collect();
    }
    Ok(InboxPage {
        total,
        page: q.page.max(1),
        per_page,
        listings: group_twins(listings),
    })
}

/// Folds each listing that is likely the same flat as one listed before it on the page (from
/// another site) into that one's `also_on`: the list shows each flat once, where it was
/// last found, with the other sites that show it.
fn group_twins(listings: Vec<InboxListing>) -> Vec<InboxListing> {
    let mut out: Vec<InboxListing> = Vec::with_capacity(listings.len());
    for l in listings {
        let twin = out.iter_mut().find(|o| {
            o.site != l.site
                && o.first_seen.abs_diff(l.first_seen)
                    <= u64::try_from(duplicate::WINDOW.as_millis()).unwrap_or(u64::MAX)
                && duplicate::likely_same(&o.listing, &l.listing)
        });
        match twin {
            Some(o) => o.also_on.push(AlsoOnListing {
                site: l.site,
                id: l.listing.id,
                url: l.listing.url,
                price: l.listing.price,
                first_seen: l.first_seen,
            }),
            None => out.push(l),
        }
    }
    out
}

/// Marks a listing. Returns whether it exists.
///
/// # Errors
/// On SQL failure.
pub(super) fn set_state(
    tx: &Connection,
    site: &str,
    id: &str,
    state: ListingState,
    now: u64,
) -> Result<bool, StoreError> {
    let stored = (state != ListingState::New).then_some(ByName(state));
    let n = tx.execute(
        "UPDATE listings SET state = ?3, state_at = ?4 WHERE site = ?1 AND listing_id = ?2",
        rusqlite::params![site, id, stored, now],
    )?;
    Ok(n > 0)
}

/// The marks that change what is announced (hidden, favourite) among the listings `ids` of
/// `site`.
///
/// # Errors
/// On SQL failure.
pub(super) fn marks_of(
    tx: &Connection,
    site: &str,
    ids: &[&str],
) -> Result<Vec<(String, ListingState)>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids = serde_json::to_string(ids)?;
    let mut stmt = tx.prepare_cached(
        "SELECT listing_id, state FROM listings WHERE site = ?1
         AND listing_id IN (SELECT value FROM json_each(?2)) AND state IN (?3, ?4)",
    )?;
    let marks = [ListingState::Hidden, ListingState::Favourite].map(ByName);
    let rows = stmt.query_map(rusqlite::params![site, ids, marks[0], marks[1]], |r| {
        Ok((r.get(0)?, r.get::<_, ByName<ListingState>>(1)?.0))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(site: &str, id: &str, title: &str, price: f64, first_seen: u64) -> InboxListing {
        InboxListing {
            site: site.into(),
            listing: Listing {
                id: id.into(),
                title: Some(title.into()),
                price: Some(price),
                currency: Some("EUR".into()),
                rooms: Some(2.0),
                area_m2: Some(60.0),
                url: Some(format!("https://{site}/{id}")),
                ..Listing::default()
            },
            first_seen,
            gone_at: None,
            state: ListingState::New,
            searches: vec!["Flats".into()],
            matched: true,
            prices: Vec::new(),
            also_on: Vec::new(),
        }
    }

    #[test]
    fn the_same_flat_on_two_sites_is_one_row_with_its_twin() {
        let day = 24 * 3600 * 1000;
        let got = group_twins(vec![
            flat(
                "a.example",
                "1",
                "Bright flat with balcony in Retiro",
                1200.0,
                30 * day,
            ),
            flat(
                "b.example",
                "x9",
                "Bright flat with balcony, Retiro",
                1210.0,
                29 * day,
            ),
            // The same figures on the same site: another flat there, not a twin.
            flat(
                "a.example",
                "2",
                "Bright flat with balcony in Retiro",
                1200.0,
                28 * day,
            ),
            // Another site, other figures: another flat.
            flat("c.example", "7", "Studio near the park", 700.0, 28 * day),
            // The same flat, but seen long before the window: not folded.
            flat(
                "b.example",
                "old",
                "Bright flat with balcony in Retiro",
                1200.0,
                0,
            ),
        ]);
        let rows: Vec<(&str, &str)> = got
            .iter()
            .map(|l| (l.site.as_str(), l.listing.id.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("a.example", "1"),
                ("a.example", "2"),
                ("c.example", "7"),
                ("b.example", "old")
            ]
        );
        let twins: Vec<(&str, &str)> = got[0]
            .also_on
            .iter()
            .map(|t| (t.site.as_str(), t.id.as_str()))
            .collect();
        assert_eq!(twins, [("b.example", "x9")]);
        assert_eq!(got[0].also_on[0].price, Some(1210.0));
        assert!(got[1..].iter().all(|l| l.also_on.is_empty()));
    }
}
