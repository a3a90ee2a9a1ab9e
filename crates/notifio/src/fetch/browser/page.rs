//! One page in a tab: navigate, take the main document's status and headers (for
//! `classify`), wait until the page has loaded, read the rendered DOM. Everything here answers
//! with a [`Visit`]; nothing a page does can hang or crash us.
//!
//! A page is read only once it has loaded (docs/sites.md#when-a-page-has-loaded): its cards (the
//! profile's ready selector) are there and their count has held for a moment, also while the
//! document is still loading (a last script that never finishes keeps it `loading` forever);
//! or the document is complete and the network quiet, for a short moment without a ready
//! selector and for longer with one that matches nothing yet (a script may still be building
//! the cards). A page still loading at the attempt's deadline is a timeout, retried as one,
//! never read half-built: a document read before its cards arrived is judged a layout
//! change. A page that leaves for a site waiting after a refusal (a redirect, or its own
//! script) ends the read at once, like an unchanged page.

use super::{Attempt, PageRequest, Route, Tab, TransportFailure, lock};
use bytes::Bytes;
use chromiumoxide::cdp::browser_protocol::browser::EventDownloadWillBegin;
use chromiumoxide::cdp::browser_protocol::inspector::EventTargetCrashed;
use chromiumoxide::cdp::browser_protocol::network::{
    EventLoadingFailed, EventLoadingFinished, EventRequestWillBeSent, EventResponseReceived,
    Headers, ResourceType, SetExtraHttpHeadersParams,
};
use chromiumoxide::cdp::browser_protocol::page::{
    EventLoadEventFired, NavigateParams, NavigateReturns,
};
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::types::CommandResponse;
use chromiumoxide::{Browser as CdpBrowser, Page};
use futures_util::StreamExt;
use futures_util::stream::{BoxStream, SelectAll, select_all};
use notifio_policy::SiteKey;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// "Network idle": the load event has fired and no request has been in flight this long.
const IDLE_AFTER: Duration = Duration::from_millis(500);
/// The same, for a page whose profile names its cards (a ready selector) and that shows none:
/// the network went quiet, but a script may still be building the cards from data it already
/// has (a timer, a framework's first render), later still on a busy machine. A page that
/// really has none (no results, a challenge, a new layout) is read this much later.
const NO_CARDS_IDLE_AFTER: Duration = Duration::from_secs(2);
/// How often the page is asked whether its result list (or "no results" marker) is there yet.
const READY_POLL: Duration = Duration::from_millis(50);
/// The cards are read once their count has held this long, as the page answered every poll
/// in between: a long page is parsed as it streams in, and scripts add cards in batches (the
/// first card is not the last).
const CARDS_STEADY: Duration = Duration::from_millis(300);
/// The same for a document still loading (its parser waits for a script, maybe one in the
/// middle of its list), once all its HTML has arrived.
const LOADING_STEADY: Duration = Duration::from_millis(500);

/// How a visit went.
pub(super) enum Visit {
    /// A document arrived (its status may be anything).
    Page(Attempt),
    /// No document: the navigation failed (refused, DNS, timed out…); the tab is fine.
    NoPage(TransportFailure, String),
    /// The tab or the browser broke (crash, lost connection): not retried in this check.
    Broken(String),
    /// The page redirected (this status, from this URL) into a site that is closed to us
    /// now; the redirect was not followed.
    Held(SiteKey, u16, String),
}

/// The main document as it arrived.
struct Document {
    status: u16,
    url: String,
    headers: Vec<(String, String)>,
}

fn header_list(h: &Headers) -> Vec<(String, String)> {
    let Some(map) = h.inner().as_object() else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(map.len());
    for (name, value) in map {
        let value = value.as_str().unwrap_or_default();
        // The browser joins repeated headers with newlines.
        for v in value.split('\n') {
            out.push((name.to_ascii_lowercase(), v.to_owned()));
        }
    }
    out
}

/// A navigation error as the retry policy sees it (Chromium's `net::ERR_*` names).
fn navigation_failure(error: &str) -> TransportFailure {
    if error.contains("TIMED_OUT") {
        TransportFailure::Timeout
    } else if error.contains("TOO_MANY_REDIRECTS") {
        TransportFailure::TooManyRedirects
    } else if error.contains("INVALID_RESPONSE")
        || error.contains("CONTENT_DECODING")
        || error.contains("RESPONSE_HEADERS")
        || error.contains("INVALID_CHUNKED")
    {
        TransportFailure::Malformed
    } else {
        TransportFailure::Connect
    }
}

pub(super) async fn read_page(
    tab: &mut Tab,
    req: &PageRequest<'_>,
    budget: Duration,
    cap: usize,
    cdp: &CdpBrowser,
) -> Visit {
    let time = AttemptTime::start(budget);
    let page = tab.page.clone();
    let mut events = match listen(&page, cdp).await {
        Ok(events) => events,
        Err(broken) => return broken,
    };
    if let Err(broken) = set_retry_header(tab, req).await {
        return broken;
    }
    let doc = match load(tab, req, &mut events, &time).await {
        Ok(doc) => doc,
        Err(visit) => return visit,
    };
    read_document(&page, doc, cap, &time).await
}

/// The attempt's time, from the start of the visit.
struct AttemptTime {
    started: Instant,
    budget: Duration,
    margin: Duration,
    /// When the page is read as it is, if it has not become ready before.
    soft: Duration,
}

impl AttemptTime {
    fn start(budget: Duration) -> Self {
        let started = Instant::now();
        // Read the page well before the attempt's timeout runs out, so a page that never goes
        // quiet (polling, a ticker) is still read, and one that does not answer is given up on
        // here, as such, rather than by the timeout (a busy machine is slow to do both).
        let margin = (budget / 10).clamp(Duration::from_millis(300), Duration::from_secs(1));
        let soft = budget.saturating_sub(margin * 2);
        Self {
            started,
            budget,
            margin,
            soft,
        }
    }

    /// What is left until the page is read as it is.
    fn until_soft(&self) -> Duration {
        self.soft.saturating_sub(self.started.elapsed())
    }

    /// What is left of the attempt, less a moment to give the tab back.
    fn until_give_back(&self) -> Duration {
        self.budget
            .saturating_sub(self.started.elapsed())
            .saturating_sub(self.margin)
    }
}

/// What the page and the browser say while a page loads.
enum Ev {
    Response(Arc<EventResponseReceived>),
    Failed(Arc<EventLoadingFailed>),
    Sent(Arc<EventRequestWillBeSent>),
    Finished(Arc<EventLoadingFinished>),
    Load,
    Crashed,
    Download(Arc<EventDownloadWillBegin>),
}

type Events = SelectAll<BoxStream<'static, Ev>>;

/// Subscribes to the page's events (and the browser's downloads) before it navigates.
async fn listen(page: &Page, cdp: &CdpBrowser) -> Result<Events, Visit> {
    macro_rules! listen {
        ($t:ty, $f:expr) => {
            match page.event_listener::<$t>().await {
                Ok(s) => s.map($f).boxed(),
                Err(e) => return Err(Visit::Broken(format!("the browser stopped answering: {e}"))),
            }
        };
    }
    let streams: Vec<BoxStream<'static, Ev>> = vec![
        listen!(EventResponseReceived, Ev::Response),
        listen!(EventLoadingFailed, Ev::Failed),
        listen!(EventRequestWillBeSent, Ev::Sent),
        listen!(EventLoadingFinished, Ev::Finished),
        listen!(EventLoadEventFired, |_| Ev::Load),
        listen!(EventTargetCrashed, |_| Ev::Crashed),
        match cdp.event_listener::<EventDownloadWillBegin>().await {
            Ok(s) => s.map(Ev::Download).boxed(),
            Err(e) => return Err(Visit::Broken(format!("the browser stopped answering: {e}"))),
        },
    ];
    Ok(select_all(streams))
}

/// Sets (or clears) the tab's `X-Retry-Count` header for this attempt.
async fn set_retry_header(tab: &mut Tab, req: &PageRequest<'_>) -> Result<(), Visit> {
    let want_header = req.header && req.retry_n > 0;
    if want_header || tab.retry_header {
        let headers = if want_header {
            serde_json::json!({ "X-Retry-Count": req.retry_n.to_string() })
        } else {
            serde_json::json!({})
        };
        if let Err(e) = tab
            .page
            .execute(SetExtraHttpHeadersParams::new(Headers::new(headers)))
            .await
        {
            return Err(Visit::Broken(format!("the browser stopped answering: {e}")));
        }
        tab.retry_header = want_header;
    }
    Ok(())
}

/// Navigates and follows the page until it is ready to be read (its cards are there, or it
/// went quiet, or the soft deadline came with a document): its main document, or the visit
/// as it ended without one to read.
async fn load(
    tab: &mut Tab,
    req: &PageRequest<'_>,
    events: &mut Events,
    time: &AttemptTime,
) -> Result<Document, Visit> {
    let page = tab.page.clone();
    let nav_page = page.clone();
    let url = req.url.to_owned();
    let mut navigation = Box::pin(async move { nav_page.execute(NavigateParams::new(url)).await });
    let mut navigated = false;

    let mut loading = Loading::new(tab);
    let stopped = Arc::clone(&tab.stopped);
    // Until this document's load event, chromiumoxide holds the tab's next navigation back
    // (it runs one at a time, each until its page loads, up to its 30 s request timeout):
    // a tab whose page never loads is closed after the check rather than reused.
    tab.unloaded = true;
    let mut poll = tokio::time::interval(READY_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    loop {
        let left = time.until_soft();
        tokio::select! {
            biased;
            ev = events.next() => {
                let Some(ev) = ev else {
                    return Err(Visit::Broken("the browser closed the connection".into()));
                };
                if let Some(v) = loading.on_event(ev, tab) {
                    return Err(v);
                }
            }
            res = &mut navigation, if !navigated => {
                navigated = true;
                if let Some(v) = loading.on_navigated(res, &page).await {
                    return Err(v);
                }
            }
            // The guard stopped this page on its way into a waiting site (its own script, once
            // it is there): nothing more is learnt from it.
            () = stopped.notified() => {
                if let Some(v) = loading.held() {
                    return Err(v);
                }
            }
            () = tokio::time::sleep(left) => {
                if loading.doc.is_none() {
                    return Err(Visit::NoPage(
                        TransportFailure::Timeout,
                        format!("no page within {} ms", time.budget.as_millis()),
                    ));
                }
                // Cards, or a complete document that never went quiet (a ticker, a
                // challenge page polling): read as it is. A document still loading without
                // cards is not a page yet.
                if loading.cards.is_some() || loading.loaded {
                    break;
                }
                // Unless it does not even answer: a script that never stops, which another
                // attempt would not get past either.
                if !page_alive(&page, time.margin).await {
                    return Err(Visit::Broken(NOT_ANSWERING.into()));
                }
                return Err(Visit::NoPage(
                    TransportFailure::Timeout,
                    format!(
                        "the page did not finish loading in {} s",
                        time.budget.as_millis().div_ceil(1000)
                    ),
                ));
            }
            _ = poll.tick() => {
                if loading.ready(&page, req.ready, time).await {
                    break;
                }
            }
        }
    }
    loading
        .doc
        .ok_or_else(|| Visit::NoPage(TransportFailure::Timeout, "no page".into()))
}

/// What is known of a page while it loads.
struct Loading {
    /// The tab's main frame.
    frame: String,
    route: Arc<Mutex<Route>>,
    doc: Option<Document>,
    /// The last redirect of the navigation (status, URL), for a redirect that is held.
    redirect: Option<(u16, String)>,
    main_request: Option<String>,
    /// Every byte of the main document has arrived (it may still be parsing).
    main_finished: bool,
    loaded: bool,
    in_flight: HashSet<String>,
    quiet_since: Instant,
    /// The profile's cards in the document at the last poll, and since when the page has
    /// answered every poll with that count.
    cards: Option<Cards>,
    cards_since: Instant,
}

impl Loading {
    fn new(tab: &Tab) -> Self {
        Self {
            frame: tab.page.target_id().inner().clone(),
            route: Arc::clone(&tab.route),
            doc: None,
            redirect: None,
            main_request: None,
            main_finished: false,
            loaded: false,
            in_flight: HashSet::new(),
            quiet_since: Instant::now(),
            cards: None,
            cards_since: Instant::now(),
        }
    }

    /// Held: the redirect that was stopped, else (the page's own script left for the waiting
    /// site) the page that did it.
    fn held(&self) -> Option<Visit> {
        let site = lock(&self.route).held.take()?;
        let (status, url) = self
            .redirect
            .clone()
            .or_else(|| self.doc.as_ref().map(|d| (d.status, d.url.clone())))
            .unwrap_or((0, String::new()));
        Some(Visit::Held(site, status, url))
    }

    /// Takes in one event of the page; `Some` when it ends the visit.
    fn on_event(&mut self, ev: Ev, tab: &mut Tab) -> Option<Visit> {
        let frame = &self.frame;
        match ev {
            Ev::Download(d) if d.frame_id.inner() == frame => {
                // Refused by the browser (downloads are denied); nothing to read.
                return Some(Visit::NoPage(
                    TransportFailure::Malformed,
                    "the page is a file download, not a page".into(),
                ));
            }
            Ev::Download(_) => {}
            Ev::Crashed => {
                return Some(Visit::Broken(
                    "the page crashed the tab (it may have run out of memory)".into(),
                ));
            }
            Ev::Response(e) => {
                let main = e.r#type == ResourceType::Document
                    && e.frame_id.as_ref().is_some_and(|f| f.inner() == frame);
                if main {
                    self.main_request = Some(e.request_id.inner().clone());
                    self.doc = Some(Document {
                        status: u16::try_from(e.response.status).unwrap_or(0),
                        url: e.response.url.clone(),
                        headers: header_list(&e.response.headers),
                    });
                }
            }
            Ev::Failed(e) => {
                let id = e.request_id.inner();
                self.in_flight.remove(id);
                self.quiet_since = Instant::now();
                let is_main = self.main_request.as_deref() == Some(id.as_str());
                if is_main
                    && self.doc.is_none()
                    && let Some(v) = self.held()
                {
                    return Some(v);
                }
                if is_main && self.doc.is_none() && e.canceled != Some(true) {
                    return Some(Visit::NoPage(
                        navigation_failure(&e.error_text),
                        format!("the page did not load: {}", e.error_text),
                    ));
                }
            }
            Ev::Sent(e) => {
                let id = e.request_id.inner();
                self.in_flight.insert(id.clone());
                // The navigation's own request: a document of the main frame whose
                // request id is its loader's (redirects keep the id).
                let main = e.r#type.as_ref() == Some(&ResourceType::Document)
                    && e.frame_id.as_ref().is_some_and(|f| f.inner() == frame)
                    && e.loader_id.inner() == id;
                if main {
                    self.main_request = Some(id.clone());
                    if let Some(r) = &e.redirect_response {
                        self.redirect = Some((u16::try_from(r.status).unwrap_or(0), r.url.clone()));
                    }
                }
            }
            Ev::Finished(e) => {
                let id = e.request_id.inner();
                self.in_flight.remove(id);
                self.quiet_since = Instant::now();
                self.main_finished |= self.main_request.as_deref() == Some(id.as_str());
            }
            // Only this document's load counts: the tab's previous page (the
            // `about:blank` it was left on) can report its own load after we started
            // listening, and taking that one would start the 500 ms of quiet before
            // the page even arrived (its script-built cards then missed on a busy
            // machine: the browser benchmark saw it).
            Ev::Load if self.doc.is_some() => {
                self.loaded = true;
                tab.unloaded = false;
                self.quiet_since = Instant::now();
            }
            Ev::Load => {}
        }
        None
    }

    /// Takes in the navigation's answer; `Some` when it ends the visit.
    async fn on_navigated(
        &mut self,
        res: chromiumoxide::Result<CommandResponse<NavigateReturns>>,
        page: &Page,
    ) -> Option<Visit> {
        match res {
            Ok(r) => {
                if let (Some(_), None) = (r.result.error_text.as_deref(), &self.doc)
                    && let Some(v) = self.held()
                {
                    return Some(v);
                }
                if let (Some(err), None) = (r.result.error_text.as_deref(), &self.doc) {
                    // A download is refused; anything else means no page came back.
                    // A download (refused), or a navigation the browser itself
                    // stopped: not a network fault another attempt would mend.
                    if err.contains("ERR_ABORTED") {
                        let what = if r.result.is_download == Some(true) {
                            "the page is a file download, not a page"
                        } else {
                            "the browser stopped loading the page"
                        };
                        return Some(Visit::NoPage(TransportFailure::Malformed, what.into()));
                    }
                    if err.contains("ERR_HTTP_RESPONSE_CODE_FAILURE") {
                        // An error status with an empty body: the document event
                        // carries the status.
                        return None;
                    }
                    return Some(Visit::NoPage(
                        navigation_failure(err),
                        format!("the page did not load: {err}"),
                    ));
                }
            }
            Err(e) => {
                if self.doc.is_none() && !page_alive(page, Duration::from_secs(1)).await {
                    return Some(Visit::Broken(format!("the browser stopped answering: {e}")));
                }
            }
        }
        None
    }

    /// At a poll: whether the page has loaded (its cards have stopped coming, or it went
    /// quiet).
    async fn ready(&mut self, page: &Page, selector: Option<&str>, time: &AttemptTime) -> bool {
        if self.doc.is_none() {
            return false;
        }
        let Some(sel) = selector else {
            return self.quiet_for(IDLE_AFTER);
        };
        // A page whose scripts never yield does not answer: bounded, like everything.
        let left = time.until_soft().min(Duration::from_secs(1));
        let answer = tokio::time::timeout(left, cards_shown(page, sel))
            .await
            .ok()
            .flatten();
        let Some(now) = answer else {
            // No answer: the page is busy (or starved of CPU), so nothing it showed so far
            // has held; count again from the next answer.
            self.cards_since = Instant::now();
            return false;
        };
        if now != self.cards {
            self.cards_since = Instant::now();
        }
        self.cards = now;
        let steady = self.cards_since.elapsed();
        match now {
            Some(Cards { loading: false, .. }) => steady >= CARDS_STEADY,
            Some(Cards { loading: true, .. }) => self.main_finished && steady >= LOADING_STEADY,
            None => self.quiet_for(NO_CARDS_IDLE_AFTER) && steady >= NO_CARDS_IDLE_AFTER,
        }
    }

    /// The document is complete and no request has been in flight for `after`.
    fn quiet_for(&self, after: Duration) -> bool {
        self.loaded && self.in_flight.is_empty() && self.quiet_since.elapsed() >= after
    }
}

/// Reads the rendered document the page has become, within what is left of the attempt.
async fn read_document(page: &Page, doc: Document, cap: usize, time: &AttemptTime) -> Visit {
    // What is left of the attempt, less a moment to give the tab back: a page whose scripts
    // never stop cannot be read, and another attempt would not read it either.
    let left = time.until_give_back();
    let (body, over) = match tokio::time::timeout(left, read_dom(page, cap)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return Visit::Broken(format!("cannot read the page: {e}")),
        Err(_) => return Visit::Broken(NOT_ANSWERING.into()),
    };
    Visit::Page(Attempt {
        status: Some(doc.status),
        final_url: doc.url,
        headers: doc.headers,
        body,
        failure: over.then_some(TransportFailure::BodyTooLarge),
        error: over.then(|| format!("page larger than the {cap}-byte cap")),
        held_at: None,
        deferred: false,
        retryable: true,
    })
}

/// Why a page whose scripts never yield is not read (nor tried again in this check).
const NOT_ANSWERING: &str = "the page does not answer (its scripts never stop), so it was not read";

/// Whether the page runs a trivial script within `within`.
async fn page_alive(page: &Page, within: Duration) -> bool {
    tokio::time::timeout(within, page.execute(EvaluateParams::new("1")))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// The profile's cards in the document at one poll.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Cards {
    count: u64,
    /// The document is still being parsed (`document.readyState` is `loading`).
    loading: bool,
}

/// How many elements match `selector` in the current document (`None` when none does), and
/// whether it is still loading; `None` when the page does not answer.
async fn cards_shown(page: &Page, selector: &str) -> Option<Option<Cards>> {
    let quoted = serde_json::to_string(selector).ok()?;
    let expr = format!(
        "(() => {{ try {{ return [document.querySelectorAll({quoted}).length, \
         document.readyState === 'loading']; }} catch (e) {{ return [0, true]; }} }})()"
    );
    let mut params = EvaluateParams::new(expr);
    params.return_by_value = Some(true);
    let r = page.execute(params).await.ok()?;
    let value = r.result.result.value?;
    let count = value.get(0)?.as_u64()?;
    let loading = value.get(1)?.as_bool()?;
    Some((count > 0).then_some(Cards { count, loading }))
}

/// The rendered document as HTML (doctype and `documentElement.outerHTML`), at most `cap`
/// bytes; `true` when it was longer. The slice is taken in the page, so a page that builds a
/// gigantic DOM never sends it to us whole.
async fn read_dom(page: &Page, cap: usize) -> Result<(Bytes, bool), String> {
    let expr = format!(
        "(() => {{ const d = document; \
         let h = (d.doctype ? new XMLSerializer().serializeToString(d.doctype) : '') + \
         (d.documentElement ? d.documentElement.outerHTML : ''); \
         const over = h.length > {cap}; \
         return {{ over, html: over ? h.slice(0, {cap}) : h }}; }})()"
    );
    let mut params = EvaluateParams::new(expr);
    params.return_by_value = Some(true);
    let r = page.execute(params).await.map_err(|e| e.to_string())?;
    if let Some(ex) = &r.result.exception_details {
        return Err(ex.text.clone());
    }
    let value = r.result.result.value.clone().unwrap_or_default();
    let mut over = value.get("over").and_then(serde_json::Value::as_bool) == Some(true);
    let html = value
        .get("html")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let mut bytes = html.as_bytes();
    if bytes.len() > cap {
        let mut end = cap;
        while !html.is_char_boundary(end) {
            end -= 1;
        }
        bytes = &bytes[..end];
        over = true;
    }
    Ok((Bytes::copy_from_slice(bytes), over))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn navigation_errors_are_classified() {
        assert_eq!(
            navigation_failure("net::ERR_CONNECTION_REFUSED"),
            TransportFailure::Connect
        );
        assert_eq!(
            navigation_failure("net::ERR_NAME_NOT_RESOLVED"),
            TransportFailure::Connect
        );
        assert_eq!(
            navigation_failure("net::ERR_TIMED_OUT"),
            TransportFailure::Timeout
        );
        assert_eq!(
            navigation_failure("net::ERR_TOO_MANY_REDIRECTS"),
            TransportFailure::TooManyRedirects
        );
        assert_eq!(
            navigation_failure("net::ERR_INVALID_RESPONSE"),
            TransportFailure::Malformed
        );
    }
}
