//! A scriptable rental portal on loopback: the stand-in for Idealista & co. in Notifio's tests,
//! benchmarks and `notifio demo`.
//!
//! Each site listens on its own port of 127.0.0.1, so each is a distinct Notifio site key
//! (`127.0.0.1:PORT`) and its refusals stay its own. A site serves result pages of realistic
//! size with ~30 listing cards, grows new listings on demand, and can be told to misbehave the
//! way real portals do (429 with Retry-After, 403, anti-bot challenges, 5xx, stalls, resets,
//! login redirects, hostile bodies). Every request is recorded so tests can assert what Notifio
//! sent and when ("no request to site X between t1 and t2").
//!
//! A site can spread its results over several pages (`SiteSpec::pages`): page N is
//! `/search/{s}?page=N` or `/search/{s}/pagina-N.htm`, and each page but the last links to the
//! next in the same form. Every site also answers ImmobilienScout24's app request
//! (`POST /search/list?…&pagenumber=N`, the search named by the last part of `geocodes`) with
//! the app's result-list JSON of the same listings, so the app fetch mode is tested against a
//! server that sees (and records) exactly what Notifio sends.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use fake_portal::{Behaviour, Portal, SiteSpec};
//! let portal = Portal::start(vec![SiteSpec::new("idealista")]).await?;
//! let url = portal.search_url("idealista", "madrid");
//! portal.set_behaviour("idealista", Behaviour::FailNext(1));
//! portal.add_listing("idealista", Some("madrid"));
//! # Ok(()) }
//! ```

mod page;
mod server;

pub use page::{CARDS_PER_PAGE, ChallengeKind, FakeListing, Hidden, IMAGE_BYTES};

use bytes::Bytes;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// At most this many requests are remembered (oldest dropped first), so a long-running
/// `fake-portal` binary does not grow without bound.
pub const MAX_RECORDED: usize = 200_000;
/// Webhook bodies a site keeps ([`Portal::hooks`]).
pub const MAX_HOOKS: usize = 1_000;

/// One site of the portal.
///
/// # Default
/// name `site`, 30 initial listings, 300 000-byte pages, no latency, no random faults, a free
/// port, seed 1, validators on.
#[derive(Clone, Debug)]
pub struct SiteSpec {
    /// The name tests use to address the site (not a host name).
    pub name: String,
    /// Listings present at start (shown on every search of the site).
    pub listings: usize,
    /// Approximate size of a result page.
    pub page_bytes: usize,
    /// Service latency added to every request.
    pub latency: Duration,
    /// Probability that a request in `Normal` behaviour gets a random 503.
    pub fault_rate: f64,
    /// Port to bind; `None` = any free port.
    pub port: Option<u16>,
    /// Seed for listing names/prices and random faults.
    pub seed: u64,
    /// Whether result pages carry validators (`ETag`, `Last-Modified`) and honour conditional
    /// requests with 304. `false` makes every check download the whole page (benchmarks).
    pub validators: bool,
    /// How result pages show their cards: in the HTML, or built by a script.
    pub render: Render,
    /// Result pages call the site from JavaScript this often (`GET /poll`), as live tickers
    /// and chat widgets do.
    pub poll: Option<Duration>,
    /// Result pages show this many images (`/img/N.jpg`, [`IMAGE_BYTES`] each).
    pub images: usize,
    /// Result pages need a session: without the `session` cookie a search redirects to
    /// `/login`, whose form (POST) sets it. [`Portal::expire_sessions`] logs everyone out.
    pub login_wall: bool,
    /// Result pages set a long-lived `visitor` cookie on a visit that sends none.
    pub visitor_cookie: bool,
    /// Cards per result page (newest first).
    pub per_page: usize,
    /// Result pages a search has at most: its newest `per_page × pages` listings are shown,
    /// the older ones are not.
    pub pages: usize,
    /// The link from a page to the next carries `rel="next"` (true), or only its class
    /// `next-page` (false: what a `listing.next` selector is for).
    pub rel_next: bool,
}

/// How a site's result pages show their cards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Render {
    /// In the HTML, as most portals do.
    #[default]
    Html,
    /// Built by a script this long after the page loads: the HTML itself has no cards (a
    /// plain HTTP client sees none), a browser sees them all.
    Script(Duration),
}

impl Default for SiteSpec {
    fn default() -> Self {
        Self {
            name: "site".into(),
            listings: 30,
            page_bytes: 300_000,
            latency: Duration::ZERO,
            fault_rate: 0.0,
            port: None,
            seed: 1,
            validators: true,
            render: Render::Html,
            poll: None,
            images: 0,
            login_wall: false,
            visitor_cookie: false,
            per_page: CARDS_PER_PAGE,
            pages: 1,
            rel_next: true,
        }
    }
}

impl SiteSpec {
    /// A default site with this name (its seed is derived from the name).
    #[must_use]
    pub fn new(name: &str) -> Self {
        let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Self {
            name: name.to_owned(),
            seed,
            ..Self::default()
        }
    }
}

/// How a site answers, from the next request on.
#[derive(Clone, Debug, PartialEq)]
pub enum Behaviour {
    /// Result pages (and random 5xx at the site's `fault_rate`).
    Normal,
    /// 429, with this raw `Retry-After` value (`"120"` or an HTTP-date, or garbage) if any.
    RateLimited {
        /// The raw header value.
        retry_after: Option<String>,
    },
    /// 403 without challenge markers.
    Forbidden,
    /// An anti-bot page of this kind with this status.
    Challenge(ChallengeKind, u16),
    /// This status (500–599, or anything) with a small error page.
    ServerError(u16),
    /// The next n requests get 503, then `Normal`.
    FailNext(u32),
    /// The next n requests get this status (500–599) with a small error page, then `Normal`.
    FailNextWith(u32, u16),
    /// Answer normally after this extra delay.
    Slow(Duration),
    /// Never answer (until shutdown).
    Hang,
    /// Reset the connection (TCP RST) instead of answering.
    Reset,
    /// 302 to `/login?next=…`, which serves a login page.
    LoginRedirect,
    /// 200 with this many bytes of HTML.
    HugeBody(u64),
    /// 200 with a small gzip body that decompresses to this many bytes.
    GzipBomb(u64),
    /// 302 to `/redirect/1`, which redirects to `/redirect/2`, … forever.
    RedirectLoop,
    /// 200 with a result page sent one byte per second.
    DripBody,
    /// 200 with a result page containing invalid UTF-8 bytes.
    InvalidUtf8,
    /// 200 with an empty body.
    Empty,
    /// 200 with a hostile page: its one card sits this many `<div>`s deep, and the page is
    /// different on each request (so nothing can tell it is the same page as last time).
    Nested(usize),
    /// 404.
    Gone,
    /// A timeline relative to when it is set: each `(offset, behaviour)` applies from its
    /// offset until the next; `Normal` before the first. Offsets ascending; no nested scripts.
    Script(Vec<(Duration, Self)>),
    /// The next n requests are answered normally, then the behaviour given (a plain one: not
    /// a script, `FailNext` or another `After`): "page 1 is fine, page 2 is refused".
    After(u32, Box<Self>),
}

/// One request as the portal saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// When it arrived, in milliseconds since the Unix epoch.
    pub at: u64,
    /// The site's name.
    pub site: String,
    /// `GET`, `POST`, …
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Request headers, names lower-case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The request body as text (invalid UTF-8 replaced; empty for a GET).
    pub body: String,
}

impl RecordedRequest {
    /// The first value of a header (name case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The state a site changes at runtime.
pub(crate) struct SiteMut {
    pub(crate) behaviour: Behaviour,
    pub(crate) set_at: Instant,
    pub(crate) script_index: Option<usize>,
    pub(crate) fail_left: u32,
    /// Requests still answered normally under [`Behaviour::After`].
    pub(crate) normal_left: u32,
    /// Oldest first, with the time each appeared or last changed.
    pub(crate) listings: Vec<(FakeListing, SystemTime)>,
    pub(crate) next_n: u64,
    pub(crate) rng: SmallRng,
    pub(crate) cache: HashMap<String, server::CachedPage>,
    /// Session tokens a login handed out (login-walled sites).
    pub(crate) sessions: std::collections::HashSet<String>,
    /// Visitor cookies handed out so far.
    pub(crate) visitors: u64,
    /// What was posted to `/hooks/{name}` (a webhook sink for the demo), oldest first.
    pub(crate) hooks: Vec<(String, Bytes)>,
}

impl SiteMut {
    /// The behaviour to apply to a request arriving `now`: scripts resolved, `FailNext`
    /// counted down (to `ServerError(503)` or `Normal`).
    pub(crate) fn current(&mut self, now: Instant) -> Behaviour {
        let (leaf, index) = match &self.behaviour {
            Behaviour::Script(steps) => {
                let elapsed = now.saturating_duration_since(self.set_at);
                match steps.iter().rposition(|(at, _)| *at <= elapsed) {
                    Some(i) => (steps[i].1.clone(), Some(i)),
                    None => (Behaviour::Normal, None),
                }
            }
            other => (other.clone(), None),
        };
        if index != self.script_index {
            self.script_index = index;
            match leaf {
                Behaviour::FailNext(n) | Behaviour::FailNextWith(n, _) | Behaviour::After(n, _) => {
                    self.fail_left = n;
                    self.normal_left = n;
                }
                _ => {}
            }
        }
        let leaf = match leaf {
            Behaviour::After(..) if self.normal_left > 0 => {
                self.normal_left -= 1;
                Behaviour::Normal
            }
            Behaviour::After(_, then) => *then,
            other => other,
        };
        match leaf {
            Behaviour::FailNext(_) if self.fail_left > 0 => {
                self.fail_left -= 1;
                Behaviour::ServerError(503)
            }
            Behaviour::FailNextWith(_, status) if self.fail_left > 0 => {
                self.fail_left -= 1;
                Behaviour::ServerError(status)
            }
            Behaviour::FailNext(_)
            | Behaviour::FailNextWith(..)
            | Behaviour::Script(_)
            | Behaviour::After(..) => Behaviour::Normal,
            other => other,
        }
    }

    /// The listings visible on result page `page` (1 = the first) of `search`, newest first,
    /// and whether a page follows.
    pub(crate) fn visible_on(
        &self,
        search: &str,
        page: usize,
        spec: &SiteSpec,
    ) -> (Vec<(&FakeListing, SystemTime)>, bool) {
        let per_page = spec.per_page.max(1);
        let shown: Vec<(&FakeListing, SystemTime)> = self
            .listings
            .iter()
            .rev()
            .filter(|(l, _)| l.search.as_deref().is_none_or(|s| s == search))
            .take(per_page.saturating_mul(spec.pages.max(1)))
            .map(|(l, t)| (l, *t))
            .collect();
        let from = per_page.saturating_mul(page.saturating_sub(1));
        let on_page = shown.iter().skip(from).take(per_page).copied().collect();
        (on_page, shown.len() > from.saturating_add(per_page))
    }
}

/// One running site.
pub(crate) struct Site {
    pub(crate) spec: SiteSpec,
    pub(crate) base_url: String,
    pub(crate) state: Mutex<SiteMut>,
    pub(crate) count: AtomicUsize,
    /// Response body bytes sent (their exact length; compressed when sent so; streamed bodies
    /// of unknown length are not counted).
    pub(crate) bytes: std::sync::atomic::AtomicU64,
    pub(crate) shared: Arc<Shared>,
    pub(crate) shutdown: CancellationToken,
}

impl Site {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SiteMut> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters to a test double; keep serving.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// State shared by all sites.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) requests: Mutex<VecDeque<RecordedRequest>>,
}

impl Shared {
    pub(crate) fn record(&self, r: RecordedRequest) {
        let mut q = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() >= MAX_RECORDED {
            q.pop_front();
        }
        q.push_back(r);
    }
}

struct Inner {
    sites: Vec<Arc<Site>>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A running portal. Cheap to clone; dropping the last clone (or [`Portal::shutdown`]) stops
/// every site.
#[derive(Clone)]
pub struct Portal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Portal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.inner.sites.iter().map(|s| (&s.spec.name, &s.base_url)))
            .finish()
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Portal {
    /// Binds every site on 127.0.0.1 (its `port`, or a free one) and starts serving.
    ///
    /// # Errors
    /// When a port cannot be bound.
    pub async fn start(sites: Vec<SiteSpec>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let shutdown = CancellationToken::new();
        let mut built = Vec::new();
        let mut listeners = Vec::new();
        for spec in sites {
            let listener =
                tokio::net::TcpListener::bind(("127.0.0.1", spec.port.unwrap_or(0))).await?;
            let port = listener.local_addr()?.port();
            let base_url = format!("http://127.0.0.1:{port}");
            let start = SystemTime::now();
            let listings = (0..spec.listings as u64)
                .map(|n| (page::make_listing(spec.seed, n, &base_url, None), start))
                .collect();
            let site = Arc::new(Site {
                state: Mutex::new(SiteMut {
                    behaviour: Behaviour::Normal,
                    set_at: Instant::now(),
                    script_index: None,
                    fail_left: 0,
                    normal_left: 0,
                    listings,
                    next_n: spec.listings as u64,
                    rng: SmallRng::seed_from_u64(spec.seed),
                    cache: HashMap::new(),
                    sessions: std::collections::HashSet::new(),
                    visitors: 0,
                    hooks: Vec::new(),
                }),
                spec,
                base_url,
                count: AtomicUsize::new(0),
                bytes: std::sync::atomic::AtomicU64::new(0),
                shared: shared.clone(),
                shutdown: shutdown.clone(),
            });
            listeners.push((listener, site.clone()));
            built.push(site);
        }
        let tasks = listeners
            .into_iter()
            .map(|(l, site)| tokio::spawn(server::serve(l, site)))
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                sites: built,
                shared,
                shutdown,
                tasks: Mutex::new(tasks),
            }),
        })
    }

    fn site(&self, name: &str) -> &Arc<Site> {
        self.inner
            .sites
            .iter()
            .find(|s| s.spec.name == name)
            .unwrap_or_else(|| panic!("fake-portal has no site named {name:?}"))
    }

    /// The names of the sites, in start order.
    #[must_use]
    pub fn sites(&self) -> Vec<String> {
        self.inner
            .sites
            .iter()
            .map(|s| s.spec.name.clone())
            .collect()
    }

    /// `http://127.0.0.1:PORT` of a site.
    ///
    /// # Panics
    /// On an unknown site name (a bug in the test).
    #[must_use]
    pub fn base_url(&self, site: &str) -> String {
        self.site(site).base_url.clone()
    }

    /// The URL of a search's result page: base URL + `/search/<search>`.
    ///
    /// # Panics
    /// On an unknown site name.
    #[must_use]
    pub fn search_url(&self, site: &str, search: &str) -> String {
        format!("{}/search/{search}", self.base_url(site))
    }

    /// The path of a search's result page `page` as its pages link to it: `/search/{search}`
    /// for page 1, `/search/{search}?page=N` after (the form a request for `pagina-N.htm`
    /// links on in is `/search/{search}/pagina-N.htm`).
    #[must_use]
    pub fn page_path(search: &str, page: usize) -> String {
        if page <= 1 {
            format!("/search/{search}")
        } else {
            format!("/search/{search}?page={page}")
        }
    }

    /// Changes how a site answers; takes effect on the next request.
    ///
    /// # Panics
    /// On an unknown site name.
    pub fn set_behaviour(&self, site: &str, b: Behaviour) {
        let mut st = self.site(site).lock();
        st.fail_left = match b {
            Behaviour::FailNext(n) | Behaviour::FailNextWith(n, _) => n,
            _ => 0,
        };
        st.normal_left = match b {
            Behaviour::After(n, _) => n,
            _ => 0,
        };
        st.behaviour = b;
        st.set_at = Instant::now();
        st.script_index = None;
    }

    /// Adds a new listing at the top of a search's page (`None`: of every search on the site).
    ///
    /// # Panics
    /// On an unknown site name.
    pub fn add_listing(&self, site: &str, search: Option<&str>) -> FakeListing {
        let site = self.site(site);
        let mut st = site.lock();
        let n = st.next_n;
        st.next_n += 1;
        let l = page::make_listing(site.spec.seed, n, &site.base_url, search);
        st.listings.push((l.clone(), SystemTime::now()));
        l
    }

    /// Adds a new listing like [`Self::add_listing`], changed by `edit` first (its title,
    /// price, figures, description, hidden fields) — e.g. the same flat on two sites.
    ///
    /// # Panics
    /// On an unknown site name.
    pub fn add_listing_with(
        &self,
        site: &str,
        search: Option<&str>,
        edit: impl FnOnce(&mut FakeListing),
    ) -> FakeListing {
        let site = self.site(site);
        let mut st = site.lock();
        let n = st.next_n;
        st.next_n += 1;
        let mut l = page::make_listing(site.spec.seed, n, &site.base_url, search);
        edit(&mut l);
        st.listings.push((l.clone(), SystemTime::now()));
        l
    }

    /// Sets a listing's price (it keeps its place on the page); its pages change (new
    /// `ETag` and `Last-Modified`). Returns the listing as it is now, or `None` for an id the
    /// site does not have.
    ///
    /// # Panics
    /// On an unknown site name.
    pub fn set_price(&self, site: &str, id: &str, price: u32) -> Option<FakeListing> {
        let mut st = self.site(site).lock();
        let (l, changed) = st.listings.iter_mut().find(|(l, _)| l.id == id)?;
        l.price = price;
        *changed = SystemTime::now();
        Some(l.clone())
    }

    /// The listings a search's (first) page shows right now, newest first.
    ///
    /// # Panics
    /// On an unknown site name.
    #[must_use]
    pub fn listings(&self, site: &str, search: &str) -> Vec<FakeListing> {
        self.listings_on_page(site, search, 1)
    }

    /// The listings result page `page` (1 = the first) of a search shows right now, newest
    /// first.
    ///
    /// # Panics
    /// On an unknown site name.
    #[must_use]
    pub fn listings_on_page(&self, site: &str, search: &str, page: usize) -> Vec<FakeListing> {
        let site = self.site(site);
        site.lock()
            .visible_on(search, page, &site.spec)
            .0
            .into_iter()
            .map(|(l, _)| l.clone())
            .collect()
    }

    /// Takes a listing off the site (it was let): the ones after it move up, to earlier
    /// pages. Returns whether the site had it.
    ///
    /// # Panics
    /// On an unknown site name.
    pub fn remove_listing(&self, site: &str, id: &str) -> bool {
        let mut st = self.site(site).lock();
        let before = st.listings.len();
        st.listings.retain(|(l, _)| l.id != id);
        st.listings.len() < before
    }

    /// Puts a listing taken off with [`Self::remove_listing`] back, at the top of its pages
    /// (the let fell through, and the site shows it as fresh).
    ///
    /// # Panics
    /// On an unknown site name.
    pub fn put_back(&self, site: &str, listing: FakeListing) {
        let mut st = self.site(site).lock();
        st.listings.push((listing, SystemTime::now()));
    }

    /// The bodies posted to `/hooks/{name}` on `site` so far, oldest first: the site doubles
    /// as a webhook receiver (at most [`MAX_HOOKS`] kept).
    ///
    /// # Panics
    /// On an unknown site name.
    #[must_use]
    pub fn hooks(&self, site: &str, name: &str) -> Vec<Bytes> {
        self.site(site)
            .lock()
            .hooks
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Every request so far (the last [`MAX_RECORDED`]), in arrival order.
    #[must_use]
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner
            .shared
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Requests a site has received so far.
    ///
    /// # Panics
    /// On an unknown site name.
    #[must_use]
    pub fn request_count(&self, site: &str) -> usize {
        self.site(site).count.load(Ordering::SeqCst)
    }

    /// Response body bytes a site has sent so far (compressed size when it compressed; the
    /// streamed bodies of hostile behaviours, whose length is unknown, are not counted).
    ///
    /// # Panics
    /// On an unknown site name.
    #[must_use]
    pub fn bytes_sent(&self, site: &str) -> u64 {
        self.site(site).bytes.load(Ordering::SeqCst)
    }

    /// Logs every session of a login-walled site out: its searches redirect to `/login` again.
    ///
    /// # Panics
    /// On an unknown site name.
    pub fn expire_sessions(&self, site: &str) {
        self.site(site).lock().sessions.clear();
    }

    /// Sessions a login-walled site has handed out and not expired.
    ///
    /// # Panics
    /// On an unknown site name.
    #[must_use]
    pub fn sessions(&self, site: &str) -> usize {
        self.site(site).lock().sessions.len()
    }

    /// Stops every site (also for other clones of this handle) and waits for the listeners to
    /// close. Connections in flight are dropped.
    pub async fn shutdown(self) {
        self.inner.shutdown.cancel();
        let tasks = std::mem::take(
            &mut *self
                .inner
                .tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for t in tasks {
            let _ = t.await;
        }
    }
}
