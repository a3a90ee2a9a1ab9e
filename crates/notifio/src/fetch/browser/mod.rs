//! The browser transport: one attempt of a check made by a real Chromium over the DevTools
//! Protocol, with the user's own persistent profile (docs/sites.md#reading-a-site-plain-http-or-the-browser).
//!
//! Sites that refuse plain HTTP clients (DataDome, AWS WAF, login walls) are read the way the
//! user reads them: in a browser, with the user's session. This module only *performs* an
//! attempt; the retry loop, the registry, the scheduler, `classify` and the extractors are the
//! same for every fetch mode. It owns the one browser of the process: started on the first
//! browser check, restarted after a crash, closed at exit; on Linux it dies with us even after a
//! SIGKILL (a parent-death signal). Nothing here hides automation or solves a challenge: the
//! headless browser says it is one (`HeadlessChrome`, `navigator.webdriver`), and a refusal
//! seen through it is backed off exactly like one seen over HTTP.
//!
//! Why `chromiumoxide`: a maintained, tokio-native CDP client with the whole protocol typed
//! from Chromium's own protocol files, a connection and event dispatch we do not have to write,
//! and no browser download of its own (we start the user's browser ourselves, so we can give
//! it a parent-death signal and a process group; `headless_chrome` is blocking and fetches a
//! browser, and WebDriver cannot read a navigation's status and headers).
//!
//! Three parts: this module owns the one browser and its tabs; `process` finds, starts and
//! stops the browser program (and opens `notifio login`'s window); `page` reads one page in
//! a tab (the main document's status and headers, readiness, the rendered DOM).

mod page;
mod process;

pub use process::{
    FindError, find_executable, has_display, install_hint, launch_args, login, running_as_root,
};

use super::{Attempt, TransportFailure};
use bytes::Bytes;
use chromiumoxide::cdp::browser_protocol::browser::{
    SetDownloadBehaviorBehavior, SetDownloadBehaviorParams,
};
use chromiumoxide::cdp::browser_protocol::fetch::{
    self as cdp_fetch, ContinueRequestParams, EventRequestPaused, FailRequestParams,
    RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::network::{ErrorReason, ResourceType};
use chromiumoxide::cdp::browser_protocol::page::{
    EventJavascriptDialogOpening, HandleJavaScriptDialogParams, NavigateParams,
};
use chromiumoxide::cdp::browser_protocol::target::{
    CloseTargetParams, CreateTargetParams, EventTargetCreated, TargetId,
};
use chromiumoxide::cdp::js_protocol::runtime::TerminateExecutionParams;
use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::{Browser as CdpBrowser, Page};
use futures_util::StreamExt;
use notifio_policy::SiteKey;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use page::{Visit, read_page};
use process::{Process, start_process};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The environment variable every browser process of ours carries (its value: our pid), so
/// that it can be told apart from the user's own browsers (`ps e`, tests reading `/proc`).
pub const OWNER_ENV: &str = "NOTIFIO_BROWSER_OWNER";
/// A tab is closed and replaced after this many checks, so that nothing a site's pages leave
/// behind in it (and the CDP client's per-tab bookkeeping) grows over a day. A tab's renderer
/// grows by ~1.4 MB per 300 KB page it has read until the tab is closed (the browser
/// benchmark's soak: one renderer 78 → 136 MB over 40 checks); 20 keeps that under ~30 MB a
/// tab, for a new tab (a few ms) every 20 checks.
const CHECKS_PER_TAB: u32 = 20;
/// Idle tabs kept for reuse; more are closed. Each tab keeps a renderer (~45 MB with a 300 KB
/// page behind it) while it waits; a `watch` rarely has more than two browser checks at once
/// (the soak of the browser benchmark: ~0.6 on average), and a burst beyond that opens a tab
/// for the check and closes it after.
const IDLE_TABS: usize = 2;
/// How long leaving a page for `about:blank` may take before the tab is closed instead.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pages loading in the browser at once; more wait their turn. Loading a page is the
/// renderer's CPU (parsing, layout, the page's scripts): six 775 KB pages at once on a 2-core
/// laptop each got a third of a core, and the ones still building at the deadline were read
/// half-built. Two keep both cores busy while a page's network wait leaves room for another.
const PAGES_AT_ONCE: usize = 2;

/// How many of our own browsers are being closed right now. A browser that exits resets its
/// DevTools connection, which chromiumoxide reports as an `ERROR` (`WS Connection error: …
/// ResetWithoutClosingHandshake`); when we closed it ourselves (Ctrl-C, the end of a
/// `check`, a login window), that is no error, and the log filter drops it
/// ([`is_closing_noise`]). A browser that dies on its own is still reported, by us.
static CLOSING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a log event is chromiumoxide's error about the connection of a browser we are
/// closing ourselves: the log filter of the CLI drops those.
#[must_use]
pub fn is_closing_noise(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() == tracing::Level::ERROR
        && meta.target().starts_with("chromiumoxide")
        && CLOSING.load(std::sync::atomic::Ordering::Relaxed) > 0
}

/// Held while one of our browsers is closed ([`CLOSING`]).
struct Closing;

impl Closing {
    fn begin() -> Self {
        CLOSING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        CLOSING.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the browser transport needs, resolved from `[browser]` at start.
#[derive(Clone, Debug)]
pub struct BrowserConfig {
    /// Start our own browser, or use one the user runs.
    pub launch: Launch,
    /// Resource types never requested (CDP names, lower-case: `image`, `media`, `font`).
    pub block: Vec<String>,
}

/// Where the browser comes from.
#[derive(Clone, Debug)]
pub enum Launch {
    /// Start this executable with this profile.
    Start {
        /// The browser executable.
        executable: PathBuf,
        /// The persistent profile directory (created 0700).
        profile_dir: PathBuf,
        /// Without a window.
        headless: bool,
    },
    /// Connect to the DevTools endpoint of a browser the user runs (`http://127.0.0.1:9222`,
    /// or its `ws://…` URL); only our own tabs are opened and closed.
    Connect {
        /// The DevTools URL.
        url: String,
    },
}

/// A running browser and what we keep of it.
struct Running {
    cdp: CdpBrowser,
    /// Drives the CDP connection; ends when the browser goes away.
    handler: JoinHandle<()>,
    /// `None` when connected to the user's own browser.
    process: Mutex<Option<Process>>,
    idle: Mutex<Vec<Tab>>,
    /// The target ids of our tabs (popups they open are closed).
    ours: Mutex<HashSet<TargetId>>,
    /// Closes popups opened by our tabs.
    popups: Mutex<Option<JoinHandle<()>>>,
}

impl Running {
    fn alive(&self) -> bool {
        !self.handler.is_finished()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.handler.abort();
        if let Some(p) = lock(&self.popups).take() {
            p.abort();
        }
    }
}

/// Closes every popup (a new page whose opener is one of our tabs) as soon as it appears: a
/// check reads one page, and a page that opens windows does not get to open them.
async fn close_popups(r: &Arc<Running>) {
    let Ok(mut created) = r.cdp.event_listener::<EventTargetCreated>().await else {
        return;
    };
    let weak = Arc::downgrade(r);
    let task = tokio::spawn(async move {
        while let Some(ev) = created.next().await {
            let Some(r) = weak.upgrade() else { break };
            let info = &ev.target_info;
            let from_ours = info
                .opener_id
                .as_ref()
                .is_some_and(|o| lock(&r.ours).contains(o));
            if from_ours {
                tracing::debug!("closing a popup a page opened");
                let _ = r
                    .cdp
                    .execute(CloseTargetParams::new(info.target_id.clone()))
                    .await;
            }
        }
    });
    *lock(&r.popups) = Some(task);
}

/// One of our tabs.
struct Tab {
    page: Page,
    checks: u32,
    /// An `X-Retry-Count` header is set on the tab.
    retry_header: bool,
    /// Where this tab's documents may go during the current check (the guard reads it).
    route: Arc<Mutex<Route>>,
    /// Woken by the guard when it stops the main document on its way into a waiting site,
    /// so that the check ends then rather than at its deadline.
    stopped: Arc<tokio::sync::Notify>,
    /// The last page read in this tab never fired its load event.
    unloaded: bool,
    /// Answers blocked requests and dialogs for as long as the tab lives.
    guard: JoinHandle<()>,
}

/// The sites a check's documents may not enter: those closed to us while they wait after a
/// refusal or their session expired ([`super::Fetcher::close_site`]), unless it is the check's
/// own site. A redirect or a frame into one is stopped before its request is sent, as the HTTP
/// path stops a redirect; `held` names the site the main document was stopped at.
#[derive(Default)]
struct Route {
    site: Option<SiteKey>,
    closed: Vec<SiteKey>,
    held: Option<SiteKey>,
}

impl Route {
    /// The closed site `url` would enter, if any.
    fn stops(&self, url: &str) -> Option<SiteKey> {
        let key = SiteKey::from_url(url).ok()?;
        (self.site.as_ref() != Some(&key) && self.closed.contains(&key)).then_some(key)
    }
}

impl Drop for Tab {
    fn drop(&mut self) {
        self.guard.abort();
    }
}

/// One browser check's request.
#[derive(Clone, Debug)]
pub(super) struct PageRequest<'a> {
    pub(crate) url: &'a str,
    /// A CSS selector that is in the DOM once the page shows its results (or says there are
    /// none); `None` = wait for the load event and 500 ms without requests.
    pub(crate) ready: Option<&'a str>,
    /// Retries so far (0 on the first attempt); `X-Retry-Count` when > 0 and `header`.
    pub(crate) retry_n: u32,
    pub(crate) header: bool,
    /// This attempt's timeout: the page is read before it runs out.
    pub(crate) timeout: Duration,
    /// Largest body kept (the DOM's text, UTF-8).
    pub(crate) body_cap: usize,
    /// The check's own site, and the sites closed to it now.
    pub(crate) site: &'a SiteKey,
    pub(crate) closed: Vec<SiteKey>,
}

/// The one browser of the process. Cheap to share; started on the first browser check.
pub struct Browser {
    cfg: BrowserConfig,
    running: tokio::sync::Mutex<Option<Arc<Running>>>,
    starts: std::sync::atomic::AtomicU32,
    /// Turns to load a page ([`PAGES_AT_ONCE`]).
    turns: tokio::sync::Semaphore,
}

/// A turn to load a page in the browser, held for the whole request (its retries included).
pub(super) type Turn<'a> = tokio::sync::SemaphorePermit<'a>;

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// An attempt that failed before or without a page.
fn failed(url: &str, failure: TransportFailure, error: String, retryable: bool) -> Attempt {
    Attempt {
        status: None,
        final_url: url.to_owned(),
        headers: Vec::new(),
        body: Bytes::new(),
        failure: Some(failure),
        error: Some(error),
        held_at: None,
        deferred: false,
        retryable,
    }
}

impl Browser {
    /// A browser that starts (or connects) when first needed.
    #[must_use]
    pub fn new(cfg: BrowserConfig) -> Self {
        Self {
            cfg,
            running: tokio::sync::Mutex::new(None),
            starts: std::sync::atomic::AtomicU32::new(0),
            turns: tokio::sync::Semaphore::new(PAGES_AT_ONCE),
        }
    }

    /// Waits for a turn to load a page: at most [`PAGES_AT_ONCE`] load at once, so each gets
    /// the CPU it needs to finish before its deadline (the wait is not part of it).
    pub(super) async fn turn(&self) -> Option<Turn<'_>> {
        // The semaphore is never closed; `None` would only mean "no limit".
        self.turns.acquire().await.ok()
    }

    /// How many times a browser was started (or connected to) so far.
    #[must_use]
    pub fn starts(&self) -> u32 {
        self.starts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The pid of the browser we started, if one runs.
    pub async fn pid(&self) -> Option<u32> {
        let running = self.running.lock().await;
        let r = running.as_ref()?;
        lock(&r.process).as_ref().map(Process::pid)
    }

    /// The running browser, started (or restarted after a crash) if needed. Never more than
    /// one: a dead one is killed and reaped before another starts.
    async fn running(&self) -> Result<Arc<Running>, String> {
        let mut slot = self.running.lock().await;
        if let Some(r) = slot.as_ref() {
            if r.alive() {
                return Ok(Arc::clone(r));
            }
            tracing::warn!("the browser went away (crashed or killed); a new one starts");
        }
        if let Some(old) = slot.take()
            && let Some(mut p) = lock(&old.process).take()
        {
            p.kill();
        }
        let started = self.start().await?;
        self.starts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = Arc::new(started);
        close_popups(&r).await;
        *slot = Some(Arc::clone(&r));
        Ok(r)
    }

    async fn start(&self) -> Result<Running, String> {
        let (process, ws) = match &self.cfg.launch {
            Launch::Start {
                executable,
                profile_dir,
                headless,
            } => {
                // One browser per profile: beside a running `watch`, a `check` borrows its
                // browser (tabs of its own, closed at the end; the browser stays).
                if let Some(ws) = process::already_running(profile_dir) {
                    tracing::info!(
                        "the browser profile is open in another notifio: reading pages in its browser"
                    );
                    (None, ws)
                } else {
                    let block_images = self.cfg.block.iter().any(|t| t == "image");
                    let (p, ws) = start_process(
                        executable,
                        profile_dir,
                        *headless,
                        block_images,
                        "about:blank",
                    )
                    .await?;
                    (Some(p), ws)
                }
            }
            Launch::Connect { url } => (None, devtools_ws_url(url).await?),
        };
        let config = HandlerConfig {
            // Certificates are checked as in any browser.
            ignore_https_errors: false,
            // The page's own size, not an emulated one.
            viewport: None,
            request_timeout: Duration::from_secs(30),
            ..HandlerConfig::default()
        };
        let (cdp, mut handler) = CdpBrowser::connect_with_config(ws, config)
            .await
            .map_err(|e| format!("cannot connect to the browser's DevTools: {e}"))?;
        let handler = tokio::spawn(async move {
            // Each item is one round of processed messages. Unparsable events are skipped
            // inside; an error that reaches us is the connection's (the browser is gone), and
            // the stream would keep repeating it: stop, which drops every listener and pending
            // command, so the checks waiting on them end at once.
            while let Some(item) = handler.next().await {
                if let Err(e) = item {
                    tracing::debug!(error = %e, "the browser's DevTools connection ended");
                    break;
                }
            }
        });
        // Downloads are refused: a check reads pages, never files.
        let _ = cdp
            .execute(SetDownloadBehaviorParams {
                behavior: SetDownloadBehaviorBehavior::Deny,
                browser_context_id: None,
                download_path: None,
                // So that a check whose page turns out to be a download ends at once.
                events_enabled: Some(true),
            })
            .await;
        Ok(Running {
            cdp,
            handler,
            process: Mutex::new(process),
            idle: Mutex::new(Vec::new()),
            ours: Mutex::default(),
            popups: Mutex::new(None),
        })
    }

    /// Closes our tabs, and the browser if we started it (cleanly, so its cookies are on
    /// disk), waiting at most a few seconds before killing it.
    pub async fn shutdown(&self) {
        let running = self.running.lock().await.take();
        if let Some(r) = running {
            close(r).await;
        }
    }

    /// Runs `f` with the browser closed: the login window (`notifio login`, the dashboard's
    /// "Open in browser") needs the profile to itself. Closes the browser as
    /// [`Self::shutdown`] does, and no check can start another until `f` is done (one that
    /// tries waits); the next check after it starts the browser again, with the profile's
    /// new session.
    pub async fn while_closed<T>(&self, f: impl Future<Output = T>) -> T {
        let mut slot = self.running.lock().await;
        if let Some(r) = slot.take() {
            close(r).await;
        }
        let out = f.await;
        drop(slot);
        out
    }

    async fn take_tab(&self, r: &Arc<Running>) -> Result<Tab, String> {
        let idle = lock(&r.idle).pop();
        if let Some(t) = idle {
            return Ok(t);
        }
        let page = r
            .cdp
            .new_page(CreateTargetParams::new("about:blank"))
            .await
            .map_err(|e| format!("cannot open a tab: {e}"))?;
        lock(&r.ours).insert(page.target_id().clone());
        // The blocked resource types, and the site's icon: a check reads a page and shows no
        // tab strip, so the icon would be one more request to the site for nothing.
        let mut patterns: Vec<RequestPattern> = self
            .cfg
            .block
            .iter()
            .filter_map(|t| resource_type(t))
            .map(|t| RequestPattern {
                url_pattern: None,
                resource_type: Some(t),
                request_stage: Some(RequestStage::Request),
            })
            .collect();
        patterns.push(RequestPattern {
            url_pattern: Some("*/favicon.ico*".into()),
            resource_type: None,
            request_stage: Some(RequestStage::Request),
        });
        // Every document (the page, its redirects, its frames) passes the guard, which stops
        // the ones that would enter a site closed to us.
        patterns.push(RequestPattern {
            url_pattern: None,
            resource_type: Some(ResourceType::Document),
            request_stage: Some(RequestStage::Request),
        });
        page.execute(cdp_fetch::EnableParams {
            patterns: Some(patterns),
            handle_auth_requests: None,
        })
        .await
        .map_err(|e| format!("cannot set up the tab: {e}"))?;
        let route: Arc<Mutex<Route>> = Arc::default();
        let stopped: Arc<tokio::sync::Notify> = Arc::default();
        let guard = tab_guard(&page, Arc::clone(&route), Arc::clone(&stopped)).await?;
        Ok(Tab {
            page,
            checks: 0,
            retry_header: false,
            route,
            stopped,
            unloaded: false,
            guard,
        })
    }

    /// Gives a tab back after a check: it leaves the page for `about:blank` (so nothing of the
    /// site runs between checks: no timers, polling or sockets), or is closed when that does
    /// not work or it has served its checks. A tab whose page never loaded (a script that
    /// never finishes) is closed at once: chromiumoxide would hold the navigation away back
    /// until that page loads, up to its 30 s request timeout.
    async fn give_back(&self, r: &Arc<Running>, mut tab: Tab) {
        tab.checks += 1;
        if tab.unloaded {
            close_tab(r, &tab).await;
            return;
        }
        let left = tokio::time::timeout(
            LEAVE_TIMEOUT,
            tab.page.execute(NavigateParams::new("about:blank")),
        )
        .await
        .is_ok_and(|res| res.is_ok());
        let keep = left && tab.checks < CHECKS_PER_TAB && lock(&r.idle).len() < IDLE_TABS;
        if keep {
            lock(&r.idle).push(tab);
        } else {
            close_tab(r, &tab).await;
        }
    }

    /// One attempt: navigate a tab, take the main document's status and headers, wait until
    /// the page is ready, read the rendered DOM, leave the page.
    pub(super) async fn attempt(&self, req: &PageRequest<'_>) -> Attempt {
        let started = Instant::now();
        let r = match self.running().await {
            Ok(r) => r,
            Err(e) => {
                return failed(
                    req.url,
                    TransportFailure::Connect,
                    format!("cannot start the browser: {e}"),
                    false,
                );
            }
        };
        let tab = match self.take_tab(&r).await {
            Ok(t) => t,
            Err(e) => {
                // A browser that cannot open a tab is broken: the next check starts anew.
                if let Some(mut p) = lock(&r.process).take() {
                    p.kill();
                }
                return failed(req.url, TransportFailure::Connect, e, false);
            }
        };
        // Dropped before the end (the attempt's timeout, shutdown): the tab is closed, since
        // the page in it may still be running.
        let mut lease = Lease {
            tab: Some(tab),
            running: Arc::clone(&r),
        };
        if let Some(tab) = lease.tab.as_ref() {
            *lock(&tab.route) = Route {
                site: Some(req.site.clone()),
                closed: req.closed.clone(),
                held: None,
            };
        }
        let budget = req.timeout.saturating_sub(started.elapsed());
        let outcome = match lease.tab.as_mut() {
            Some(tab) => read_page(tab, req, budget, req.body_cap, &r.cdp).await,
            None => Visit::Broken("no tab".into()),
        };
        let Some(tab) = lease.tab.take() else {
            return failed(req.url, TransportFailure::Connect, "no tab".into(), false);
        };
        match outcome {
            Visit::Page(mut a) => {
                self.give_back(&r, tab).await;
                a.retryable = true;
                a
            }
            Visit::NoPage(failure, error) => {
                self.give_back(&r, tab).await;
                failed(req.url, failure, error, true)
            }
            Visit::Held(site, status, from) => {
                self.give_back(&r, tab).await;
                Attempt {
                    status: Some(status),
                    final_url: if from.is_empty() {
                        req.url.to_owned()
                    } else {
                        from
                    },
                    headers: Vec::new(),
                    body: Bytes::new(),
                    failure: None,
                    error: Some(format!(
                        "redirected to {site}, which is waiting: not followed"
                    )),
                    held_at: Some(site),
                    deferred: false,
                    retryable: true,
                }
            }
            Visit::Broken(error) => {
                close_tab(&r, &tab).await;
                let gone = !r.alive() || lock(&r.process).as_mut().is_some_and(Process::exited);
                let error = if gone {
                    "the browser went away during the check (crashed or killed)".to_owned()
                } else {
                    error
                };
                failed(req.url, TransportFailure::Connect, error, false)
            }
        }
    }
}

/// Closes a running browser: our tabs, then the browser itself if we started it (cleanly, so
/// its cookies are on disk), killing it after a few seconds.
async fn close(r: Arc<Running>) {
    let tabs: Vec<Tab> = std::mem::take(&mut *lock(&r.idle));
    for t in tabs {
        let _ = r
            .cdp
            .execute(CloseTargetParams::new(t.page.target_id().clone()))
            .await;
    }
    let process = lock(&r.process).take();
    let Some(mut process) = process else {
        return;
    };
    let _closing = Closing::begin();
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        r.cdp
            .execute(chromiumoxide::cdp::browser_protocol::browser::CloseParams::default()),
    )
    .await;
    let until = Instant::now() + Duration::from_secs(5);
    while !process.exited() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    process.kill();
    // The connection went with the browser: stop reading it before the guard goes, so its
    // reset cannot be reported after it.
    r.handler.abort();
    let until = Instant::now() + Duration::from_millis(500);
    while !r.handler.is_finished() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Closes a tab from the browser side, first stopping whatever script its page runs (a page in
/// an endless loop would otherwise keep its renderer, which other tabs of the same site share,
/// busy after the tab is gone).
async fn close_tab(r: &Arc<Running>, tab: &Tab) {
    let id = tab.page.target_id().clone();
    lock(&r.ours).remove(&id);
    let _ = tokio::time::timeout(
        Duration::from_millis(500),
        tab.page.execute(TerminateExecutionParams::default()),
    )
    .await;
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        r.cdp.execute(CloseTargetParams::new(id)),
    )
    .await;
}

/// A tab lent to one attempt: closed if the attempt is dropped midway.
struct Lease {
    tab: Option<Tab>,
    running: Arc<Running>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(tab) = self.tab.take() {
            let r = Arc::clone(&self.running);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { close_tab(&r, &tab).await });
            }
        }
    }
}

/// Answers, for the tab's whole life, the requests it must not make (blocked resource types
/// fail at once, so they are never sent; a document continues unless it would enter a site
/// closed to us) and any dialog a page opens (dismissed).
async fn tab_guard(
    page: &Page,
    route: Arc<Mutex<Route>>,
    left_for_waiting: Arc<tokio::sync::Notify>,
) -> Result<JoinHandle<()>, String> {
    let paused = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(|e| format!("cannot set up the tab: {e}"))?;
    let dialogs = page
        .event_listener::<EventJavascriptDialogOpening>()
        .await
        .map_err(|e| format!("cannot set up the tab: {e}"))?;
    let page = page.clone();
    Ok(tokio::spawn(async move {
        enum Ev {
            Paused(Arc<EventRequestPaused>),
            Dialog,
        }
        let mut events =
            futures_util::stream::select(paused.map(Ev::Paused), dialogs.map(|_| Ev::Dialog));
        while let Some(ev) = events.next().await {
            match ev {
                Ev::Paused(p) => {
                    let document = p.resource_type == ResourceType::Document;
                    let stopped = document
                        .then(|| lock(&route).stops(&p.request.url))
                        .flatten();
                    if document && stopped.is_none() {
                        let _ = page
                            .execute(ContinueRequestParams::new(p.request_id.clone()))
                            .await;
                        continue;
                    }
                    if let Some(site) = stopped {
                        tracing::info!(to = %site, "a page leads to a waiting site; not followed");
                        let main = p.frame_id.inner() == page.target_id().inner();
                        if main {
                            lock(&route).held = Some(site);
                            left_for_waiting.notify_one();
                        }
                    }
                    let _ = page
                        .execute(FailRequestParams::new(
                            p.request_id.clone(),
                            ErrorReason::BlockedByClient,
                        ))
                        .await;
                }
                Ev::Dialog => {
                    let _ = page.execute(HandleJavaScriptDialogParams::new(false)).await;
                }
            }
        }
    }))
}

fn resource_type(name: &str) -> Option<ResourceType> {
    Some(match name {
        "stylesheet" => ResourceType::Stylesheet,
        "image" => ResourceType::Image,
        "media" => ResourceType::Media,
        "font" => ResourceType::Font,
        "script" => ResourceType::Script,
        "texttrack" => ResourceType::TextTrack,
        "xhr" => ResourceType::Xhr,
        "fetch" => ResourceType::Fetch,
        "prefetch" => ResourceType::Prefetch,
        "eventsource" => ResourceType::EventSource,
        "websocket" => ResourceType::WebSocket,
        "manifest" => ResourceType::Manifest,
        "signedexchange" => ResourceType::SignedExchange,
        "ping" => ResourceType::Ping,
        "cspviolationreport" => ResourceType::CspViolationReport,
        "preflight" => ResourceType::Preflight,
        "other" => ResourceType::Other,
        _ => return None,
    })
}

/// The WebSocket URL of a browser the user runs: `ws://…` as given, else asked from its
/// `/json/version` endpoint (http).
async fn devtools_ws_url(url: &str) -> Result<String, String> {
    if url.starts_with("ws://") || url.starts_with("wss://") {
        return Ok(url.to_owned());
    }
    let base = url.trim_end_matches('/');
    let version = if base.ends_with("/json/version") {
        base.to_owned()
    } else {
        format!("{base}/json/version")
    };
    let body = super::local_get(&version)
        .await
        .map_err(|e| format!("cannot reach the browser at {url}: {e}"))?;
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|_| format!("{version} did not answer with DevTools JSON"))?;
    v.get("webSocketDebuggerUrl")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("{version} names no webSocketDebuggerUrl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_blockable_type_has_a_cdp_name() {
        for t in crate::config::BLOCKABLE {
            assert!(resource_type(t).is_some(), "{t}");
        }
    }
}
