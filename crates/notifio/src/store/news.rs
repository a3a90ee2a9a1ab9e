//! A recorded check's news, written down in the check's transaction. What it announces, and
//! to whom, is [`crate::announce::decide`]'s; this reads what the decision needs (listings on
//! other sites that could be the same flat) and writes what it decides: the outbox rows, and
//! what the dashboard counts ("30 found · 4 match").

use super::{CheckRecord, StoreError, prices};
use crate::announce::{self, CheckNews, Hearer};
use crate::duplicate;
use crate::filter::AnnounceRules;
use crate::listing::Listing;
use crate::notify::outbox;
use crate::price::PriceChange;
use rusqlite::{Connection, params};

/// The rules of search `i` of `rec` (none given: announce everything, the defaults).
fn rules_of<'a>(rec: &'a CheckRecord<'_>, i: usize) -> &'a AnnounceRules {
    static DEFAULT: std::sync::LazyLock<AnnounceRules> =
        std::sync::LazyLock::new(AnnounceRules::default);
    rec.rules.get(i).copied().unwrap_or(&*DEFAULT)
}

/// Decides and writes the check's news: the dashboard's counts for every search of `rec`,
/// and the messages for those in `audience` (indices into `rec.searches`: those not taking a
/// silent baseline). Returns whether a notification was enqueued.
///
/// # Errors
/// On SQL failure.
pub(super) fn announce(
    tx: &Connection,
    rec: &CheckRecord<'_>,
    audience: &[usize],
    page: &[Listing],
    new: &[Listing],
    changes: &[PriceChange],
) -> Result<bool, StoreError> {
    let site = rec.site.as_str();
    let since = rec
        .now
        .saturating_sub(u64::try_from(duplicate::WINDOW.as_millis()).unwrap_or(u64::MAX));
    // A check only some baseline heard announces nothing: no other site to look at.
    let elsewhere = if audience.is_empty() {
        Vec::new()
    } else {
        new.iter()
            .map(|l| prices::twins_elsewhere(tx, site, since, l))
            .collect::<Result<Vec<_>, _>>()?
    };
    let hearers: Vec<Hearer<'_>> = rec
        .searches
        .iter()
        .enumerate()
        .map(|(i, (id, name, _))| Hearer {
            id: *id,
            name,
            rules: rules_of(rec, i),
            channels: rec.channels.get(i).map_or(&[], Vec::as_slice),
            baseline: !audience.contains(&i),
        })
        .collect();
    let changed: Vec<&str> = changes.iter().map(|c| c.id.as_str()).collect();
    let marks = super::inbox::marks_of(tx, site, &changed)?;
    let decision = announce::decide(&CheckNews {
        site,
        now: rec.now,
        hearers: &hearers,
        page,
        new,
        elsewhere: &elsewhere,
        changes,
        marks: &marks,
    });

    let mut counts =
        tx.prepare_cached("UPDATE searches SET found = ?2, matched = ?3 WHERE id = ?1")?;
    let mut held_back = tx.prepare_cached(
        "UPDATE search_listings SET matched = 0 WHERE search_id = ?1 AND listing_id = ?2 AND first_seen = ?3",
    )?;
    for t in &decision.tallies {
        counts.execute(params![t.search, t.found, t.matched])?;
        for id in &t.held_back {
            held_back.execute(params![t.search, id, rec.now])?;
        }
    }
    // Announced now: it is one of this search's listings on the dashboard too.
    let mut mark = tx.prepare_cached(
        "UPDATE search_listings SET matched = 1 WHERE search_id = ?1 AND listing_id = ?2",
    )?;
    for (search, listing) in &decision.marked {
        mark.execute(params![search, listing])?;
    }
    for m in &decision.messages {
        let channels: Vec<&str> = m.channels.iter().map(|c| c.as_str()).collect();
        outbox::enqueue(tx, &m.notification, &channels, rec.now)?;
    }
    Ok(!decision.messages.is_empty())
}
