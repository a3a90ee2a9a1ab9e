//! What a recorded check announces, and to whom: its new listings that each search's filters
//! let through (with a note when one is likely on another site too), and the price changes
//! its searches' rules announce. The decisions are the pure modules' (`filter`, `price`,
//! `duplicate`); this writes them down in the check's transaction: the outbox rows, and what
//! the dashboard counts ("30 found · 4 match").
//!
//! A listing found by several searches of one check is announced once, naming every search
//! that wants it; listings wanted by the same searches share one message.

use super::prices;
use super::{CheckRecord, StoreError};
use crate::duplicate;
use crate::filter::AnnounceRules;
use crate::listing::Listing;
use crate::notify::{AlsoOn, ChannelName, Notification, outbox};
use crate::price::PriceChange;
use rusqlite::{Connection, params};

/// The rules of search `i` of `rec` (none given: announce everything, the defaults).
fn rules_of<'a>(rec: &'a CheckRecord<'_>, i: usize) -> &'a AnnounceRules {
    static DEFAULT: std::sync::LazyLock<AnnounceRules> =
        std::sync::LazyLock::new(AnnounceRules::default);
    rec.rules.get(i).copied().unwrap_or(&*DEFAULT)
}

/// Writes what the check's page tells the dashboard (listings found and matched per search,
/// and which newly linked ones each search's filters let through), then enqueues the news for
/// the searches in `audience` (indices into `rec.searches`: those not taking a silent
/// baseline). Returns whether a notification was enqueued.
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
    tally(tx, rec, page)?;
    let site = rec.site.as_str();
    let mut groups: Vec<Group> = Vec::new();

    // New listings, to the searches whose filters let them through.
    let since = rec
        .now
        .saturating_sub(u64::try_from(duplicate::WINDOW.as_millis()).unwrap_or(u64::MAX));
    for l in new {
        let mut to: Vec<usize> = audience
            .iter()
            .copied()
            .filter(|&i| rules_of(rec, i).filters.matches(l))
            .collect();
        if to.is_empty() {
            continue;
        }
        let twin = prices::twins_elsewhere(tx, site, since, l)?
            .into_iter()
            .find(|e| duplicate::likely_same(l, &e.listing))
            .map(|e| AlsoOn {
                id: l.id.clone(),
                site: e.site.clone(),
                url: e.listing.url.clone(),
                seen_at: e.first_seen,
            });
        if twin.is_some() {
            to.retain(|&i| !rules_of(rec, i).skip_cross_site_duplicates);
        }
        group(&mut groups, to, Kind::New).add(l, twin);
    }

    // Price changes, to the searches whose rules announce them.
    let mut mark = tx.prepare_cached(
        "UPDATE search_listings SET matched = 1 WHERE search_id = ?1 AND listing_id = ?2",
    )?;
    for change in changes {
        let Some(l) = page.iter().find(|l| l.id == change.id) else {
            continue;
        };
        let before = Listing {
            price: Some(change.from),
            ..l.clone()
        };
        let to: Vec<usize> = audience
            .iter()
            .copied()
            .filter(|&i| {
                let rules = rules_of(rec, i);
                rules.prices.announces(
                    change,
                    rules.filters.matches(&before),
                    rules.filters.matches(l),
                )
            })
            .collect();
        for &i in &to {
            // Announced now: it is one of this search's listings on the dashboard too.
            if let Some((id, _, _)) = rec.searches.get(i) {
                mark.execute(params![id, l.id])?;
            }
        }
        if !to.is_empty() {
            group(&mut groups, to, Kind::Price).add_change(l, change);
        }
    }

    let mut enqueued = false;
    for g in groups {
        let mut channels: Vec<&ChannelName> = Vec::new();
        for &i in &g.searches {
            for c in rec.channels.get(i).into_iter().flatten() {
                if !channels.contains(&c) {
                    channels.push(c);
                }
            }
        }
        if channels.is_empty() {
            continue;
        }
        let searches = g
            .searches
            .iter()
            .filter_map(|&i| rec.searches.get(i).map(|(_, name, _)| name.clone()))
            .collect();
        let n = match g.kind {
            Kind::New => Notification::NewListings {
                site: site.to_owned(),
                searches,
                listings: g.listings,
                found_at: rec.now,
                also_on: g.also_on,
            },
            Kind::Price => Notification::PriceChanged {
                site: site.to_owned(),
                searches,
                listings: g.listings,
                changes: g.changes,
                found_at: rec.now,
            },
        };
        outbox::enqueue(
            tx,
            &n,
            &channels.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
            rec.now,
        )?;
        enqueued = true;
    }
    Ok(enqueued)
}

/// Per search: how many of the page's listings there are and how many its filters let
/// through, and for the ones it linked just now whether they matched.
fn tally(tx: &Connection, rec: &CheckRecord<'_>, page: &[Listing]) -> Result<(), StoreError> {
    let mut counts =
        tx.prepare_cached("UPDATE searches SET found = ?2, matched = ?3 WHERE id = ?1")?;
    let mut unmatched = tx.prepare_cached(
        "UPDATE search_listings SET matched = 0 WHERE search_id = ?1 AND listing_id = ?2 AND first_seen = ?3",
    )?;
    for (i, (id, _, _)) in rec.searches.iter().enumerate() {
        let filters = &rules_of(rec, i).filters;
        if filters.is_empty() {
            counts.execute(params![id, page.len(), page.len()])?;
            continue;
        }
        let mut matched = 0;
        for l in page {
            if filters.matches(l) {
                matched += 1;
            } else {
                unmatched.execute(params![id, l.id, rec.now])?;
            }
        }
        counts.execute(params![id, page.len(), matched])?;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    New,
    Price,
}

/// One message: its kind, the searches (indices) it names, and what it says.
struct Group {
    kind: Kind,
    searches: Vec<usize>,
    listings: Vec<Listing>,
    also_on: Vec<AlsoOn>,
    changes: Vec<PriceChange>,
}

impl Group {
    fn add(&mut self, l: &Listing, also: Option<AlsoOn>) {
        self.listings.push(l.clone());
        self.also_on.extend(also);
    }

    fn add_change(&mut self, l: &Listing, change: &PriceChange) {
        self.listings.push(l.clone());
        self.changes.push(change.clone());
    }
}

/// The group of `kind` for exactly these searches, made if needed.
fn group(groups: &mut Vec<Group>, searches: Vec<usize>, kind: Kind) -> &mut Group {
    let at = match groups
        .iter()
        .position(|g| g.kind == kind && g.searches == searches)
    {
        Some(at) => at,
        None => {
            groups.push(Group {
                kind,
                searches,
                listings: Vec::new(),
                also_on: Vec::new(),
                changes: Vec::new(),
            });
            groups.len() - 1
        }
    };
    &mut groups[at]
}
