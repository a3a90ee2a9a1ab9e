//! One check's reading of its search: page 1, then the next result pages its profile finds,
//! up to the search's `pages`, each judged (classified, then read for listings) as it comes.
//!
//! New listings are not always on page one (a site's default order is not by date), so a
//! search may follow its result pages. Every page is a request to the site like any other: it
//! waits the site's spacing after the previous page (start to start), and the scheduler hears
//! of it ([`Read::sent`]) so the site's next check is spaced from the last page, not the
//! first, and every request (each page, retry and redirect) counts against its budget. The single probe after a wait is page 1, asked for with the `probe` request class
//! (no retries: it must say how the site is); once page 1 came back good the site has
//! answered, and the same check reads the other pages under the spacing, as any check would.
//! A refusal on page k ends the
//! check with that refusal and keeps the listings of pages 1..k−1; a page that is missing,
//! empty, or unreadable after page 1 is the end of the results, not a fault of the search.
//! The profiles (`extract/`) say where the next page is; this module decides nothing about
//! *when* the site may be asked again, which stays with the scheduler and the registry.

use crate::extract::bounds::Unreadable;
use crate::extract::immoscout24_app::AppSearch;
use crate::extract::{Extraction, How, PageRead, SiteProfile};
use crate::fetch::{FetchMode, FetchRequest, Fetched, Fetcher, Outgoing, Reply};
use crate::listing::Listing;
use crate::picture;
use http::header::HeaderName;
use notifio_policy::{Markers, Outcome, RequestClass, Timestamp, classify};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How one check reads its pages.
#[derive(Clone, Copy)]
pub(crate) struct Reading<'a> {
    /// The search's profile: reads each page, finds the next.
    pub(crate) profile: &'a Arc<dyn SiteProfile>,
    /// The profile's markers.
    pub(crate) markers: &'a Markers,
    /// The site is read with a session (cookies, or the browser's profile).
    pub(crate) has_session: bool,
    /// Page 1's fingerprint at the last good check, when every search this check answers has
    /// that one: a one-page read of the same bytes is not parsed again.
    pub(crate) expected: Option<&'a str>,
    /// Pages to read at most (the search's `pages`, at least 1).
    pub(crate) pages: u32,
    /// The site's spacing: the least time between the starts of two pages.
    pub(crate) spacing: Duration,
}

/// What one check read.
#[derive(Debug)]
pub(crate) struct Read {
    /// The check's outcome: page 1's, or the refusal that ended it on a later page.
    pub(crate) outcome: Outcome,
    /// The last page fetched: the one that refused, else the last page read.
    pub(crate) fetched: Fetched,
    /// The listings of every page read, in page order, each once; `None` when no page was
    /// read (a refusal on page 1, an unchanged page 1).
    pub(crate) listings: Option<Vec<Listing>>,
    /// Where each page's listings end in `listings` (see `store::CheckRecord::pages`).
    pub(crate) page_ends: Vec<usize>,
    /// Result pages read (0 when page 1 was refused).
    pub(crate) pages: u32,
    /// Page 1's fingerprint (2xx only) when only page 1 was asked for: what the next check
    /// compares against.
    pub(crate) fingerprint: Option<String>,
    /// Page 1 was byte for byte the last good one and was not parsed again.
    pub(crate) same_page: bool,
    /// When each request after the check's first started (later pages; retries and redirects
    /// are noted when their page ends): they count against the site's budget, and the next
    /// check is spaced from the last ([`notifio_policy::Scheduler::handle_request_sent`]).
    pub(crate) sent: Vec<Timestamp>,
    /// Why page 1 was not read, when it is over a bound of its reading.
    pub(crate) unreadable: Option<Unreadable>,
    /// How page 1's listings were read, when they were.
    pub(crate) how: Option<How>,
}

/// `page_one` (a search's request, as built for its web URL) sent as the site's app sends it:
/// `app`'s method, headers and body to `app`'s URL, over HTTP ([`FetchMode::App`]), never
/// conditional. Every other part of the request (site, class, markers) stays.
pub(crate) fn app_request(app: &AppSearch, page_one: FetchRequest) -> FetchRequest {
    let headers = app
        .headers
        .iter()
        .filter_map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            Some((name, (*value).to_owned()))
        })
        .collect();
    FetchRequest {
        url: app.url.to_string(),
        via: FetchMode::App,
        conditional: false,
        ready: None,
        post_json: None,
        outgoing: Some(Outgoing {
            method: http::Method::POST,
            headers,
            body: bytes::Bytes::from_static(app.body.as_bytes()),
        }),
        ..page_one
    }
}

/// Reads the check's pages: `first` (page 1's request), then as many more as `how.pages`
/// allows and the pages link to. `None` when page 1 itself was cancelled (there is no check to
/// speak of); a shutdown later keeps the pages read so far.
pub(crate) async fn read(
    fetcher: &Fetcher,
    first: FetchRequest,
    how: Reading<'_>,
    cancel: &CancellationToken,
) -> Option<Read> {
    let one_page = how.pages <= 1;
    let mut request = first;
    if !one_page {
        // Page 1 unchanged says nothing about the others: every page is read in full.
        request.conditional = false;
    }
    let mut started = tokio::time::Instant::now();
    let fetched = fetcher.fetch(&request, cancel).await;
    if fetched.is_cancelled() {
        return None;
    }
    let fingerprint = one_page.then(|| fingerprint(&fetched)).flatten();
    let expected = how.expected.filter(|_| one_page);
    let same = expected.is_some() && fingerprint.as_deref() == expected;
    let next_of = (!one_page).then_some(1);
    let Judged {
        outcome,
        listings,
        mut next,
        unreadable,
        how: read_how,
    } = judge(
        &fetched,
        how.profile,
        how.markers,
        how.has_session,
        same,
        next_of,
    )
    .await;
    let mut read = Read {
        unreadable,
        how: read_how,
        outcome,
        pages: u32::from(matches!(outcome, Outcome::Ok | Outcome::Unchanged)),
        page_ends: listings.iter().map(Vec::len).collect(),
        listings,
        fetched,
        fingerprint,
        same_page: same && outcome == Outcome::Ok,
        sent: Vec::new(),
    };
    note_extra_requests(&mut read.sent, &read.fetched);
    if one_page || outcome != Outcome::Ok {
        return Some(read);
    }
    let Some(mut all) = read.listings.take() else {
        return Some(read);
    };
    let mut seen: HashSet<String> = all.iter().map(|l| l.id.clone()).collect();
    let mut visited: HashSet<String> = HashSet::from([request.url.clone()]);
    for page in 2..=how.pages {
        let Some(next_url) = next.take() else {
            break;
        };
        if !visited.insert(next_url.to_string()) {
            break;
        }
        // Start to start, as between two checks of the site.
        tokio::select! {
            () = tokio::time::sleep_until(started + how.spacing) => {}
            () = cancel.cancelled() => break,
        }
        request = FetchRequest {
            url: next_url.into(),
            class: RequestClass::Search,
            conditional: false,
            ..request
        };
        started = tokio::time::Instant::now();
        read.sent.push(crate::clock::now());
        let fetched = fetcher.fetch(&request, cancel).await;
        if fetched.is_cancelled() {
            break;
        }
        note_extra_requests(&mut read.sent, &fetched);
        let judged = judge(
            &fetched,
            how.profile,
            how.markers,
            how.has_session,
            false,
            (page < how.pages).then_some(page),
        )
        .await;
        let (outcome, listings) = (judged.outcome, judged.listings);
        next = judged.next;
        if outcome.refusal_kind().is_some() || outcome == Outcome::SessionExpired {
            // The site refused: the check ends with its refusal; the pages before it count.
            tracing::info!(site = %request.site, page, outcome = outcome.as_str(), "a later result page was refused");
            read.outcome = outcome;
            read.fetched = fetched;
            break;
        }
        let Some(listings) = listings.filter(|_| outcome == Outcome::Ok) else {
            // Gone, or not a result page: the results end before this page.
            tracing::debug!(site = %request.site, page, outcome = outcome.as_str(), "no further result page");
            break;
        };
        read.fetched = fetched;
        read.pages += 1;
        let before = all.len();
        all.extend(listings.into_iter().filter(|l| seen.insert(l.id.clone())));
        read.page_ends.push(all.len());
        // A page with nothing new (empty, or the last page served again): the end.
        if all.len() == before {
            break;
        }
    }
    read.listings = Some(all);
    Some(read)
}

/// The requests `fetched` sent beyond its first (retries, redirects), noted as sent now: a
/// little later than they were, which only keeps them in the budget's window a little longer.
fn note_extra_requests(sent: &mut Vec<Timestamp>, fetched: &Fetched) {
    let extra = fetched.requests.saturating_sub(1) as usize;
    if extra > 0 {
        let now = crate::clock::now();
        sent.extend(std::iter::repeat_n(now, extra));
    }
}

/// What judging one fetched page yielded.
#[derive(Debug)]
pub(crate) struct Judged {
    pub(crate) outcome: Outcome,
    /// Its listings, when it is a result page that was read.
    pub(crate) listings: Option<Vec<Listing>>,
    /// The result page after it, when asked for and shown.
    pub(crate) next: Option<url::Url>,
    /// Why the page was not read: it is over a bound of its reading (`layout_unknown`).
    pub(crate) unreadable: Option<Unreadable>,
    /// How its listings were read, when they were.
    pub(crate) how: Option<How>,
}

impl Judged {
    fn of(outcome: Outcome) -> Self {
        Self {
            outcome,
            listings: None,
            next: None,
            unreadable: None,
            how: None,
        }
    }
}

/// Classifies a fetched page and, when it is a proper page, extracts its listings (and, with
/// `next_of`, the link to the page after page `next_of`).
///
/// The reading runs on the blocking pool, within the bounds of `extract::bounds`: whatever the
/// page holds, it costs at most a bounded CPU time there and never holds up the thread that
/// runs the other checks, the dashboard and the shutdown.
///
/// `same_page`: the bytes are those of the last page judged good, so a listing cannot be new;
/// classification still runs (headers may differ), extraction does not.
pub(crate) async fn judge(
    fetched: &Fetched,
    profile: &Arc<dyn SiteProfile>,
    markers: &Markers,
    has_session: bool,
    same_page: bool,
    next_of: Option<u32>,
) -> Judged {
    let response = match &fetched.reply {
        Reply::Held { site, .. } => {
            // The search's own site answered (with a redirect); the site it leads to is
            // waiting. Nothing is learnt about the page and nobody refused: the search is
            // simply due again after its interval.
            tracing::info!(to = %site, "a redirect leads to a waiting site; not followed");
            return Judged::of(Outcome::Held);
        }
        Reply::Deferred { .. } => {
            // The site answered (with a redirect within itself) and Notifio's own budget had
            // no room to follow it: nobody refused, nothing was learnt.
            tracing::info!("a redirect waits for room in the site's request budget");
            return Judged::of(Outcome::Held);
        }
        // Nothing came back to judge; the check ends as an error of the fetch.
        Reply::Cancelled => return Judged::of(Outcome::Error),
        Reply::Response(r) => Some(r),
        Reply::Failure { .. } => None,
    };
    let outcome = fetched
        .facts(has_session)
        .map_or(Outcome::Error, |facts| classify(&facts, markers));
    let Some(response) = response.filter(|_| outcome == Outcome::Ok && !same_page) else {
        return Judged::of(outcome);
    };
    let Ok(url) = url::Url::parse(&response.final_url) else {
        return Judged::of(Outcome::LayoutUnknown);
    };
    let site = notifio_policy::SiteKey::from_parsed(&url).ok();
    let (profile, body) = (Arc::clone(profile), response.body.clone());
    let read = tokio::task::spawn_blocking(move || {
        crate::extract::read_page(profile.as_ref(), &body, &url, next_of)
    })
    .await
    .unwrap_or(PageRead {
        extraction: Extraction::LayoutUnknown,
        next: None,
        how: None,
    });
    let (outcome, listings, unreadable) = match read.extraction {
        Extraction::Listings(mut v) => {
            // A picture on a host of the user's own network, other than this site's, is not
            // kept: showing it would have the user's browser ask that host (picture.rs).
            if let Some(site) = &site {
                for l in &mut v {
                    if l.image
                        .as_deref()
                        .is_some_and(|i| !picture::may_show(i, site))
                    {
                        l.image = None;
                    }
                }
            }
            (Outcome::Ok, Some(v), None)
        }
        Extraction::NoResults => (Outcome::Ok, Some(Vec::new()), None),
        Extraction::LayoutUnknown => (Outcome::LayoutUnknown, None, None),
        Extraction::Unreadable(why) => {
            tracing::warn!(reason = %why, "a result page was not read");
            (Outcome::LayoutUnknown, None, Some(why))
        }
    };
    Judged {
        outcome,
        listings,
        next: read.next,
        unreadable,
        how: read.how,
    }
}

/// A 2xx page's identity: status, final URL and body, hashed (xxh3, 128 bits, hex). Hashing
/// 300 KB costs ~20 µs; parsing it costs a millisecond or more.
pub(crate) fn fingerprint(fetched: &Fetched) -> Option<String> {
    let Reply::Response(r) = &fetched.reply else {
        return None;
    };
    if !(200..300).contains(&r.status) {
        return None;
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&r.status.to_le_bytes());
    h.update(r.final_url.as_bytes());
    h.update(&[0]);
    h.update(&r.body);
    Some(format!("{:032x}", h.digest128()))
}
