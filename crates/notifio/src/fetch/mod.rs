//! The HTTP side of a check (docs/architecture.md#one-check-end-to-end): one call = one
//! request class with its own retry policy, hard limits that end as classified outcomes,
//! conditional requests, per-site cookies.
//!
//! Every decision (retry or not, how long to sleep, how to classify) belongs to
//! `notifio-policy`; this module performs it. Remote input is hostile by default: bodies are
//! capped *after* decompression (a gzip bomb stops at the cap), redirects are followed by hand
//! (at most 5, cookies re-chosen per hop so they never leave their site), a stalled body runs
//! into the deadline, and nothing a server sends can panic or allocate without bound.

pub mod browser;
mod charset;
pub mod cookies;
pub mod metrics;
mod retry;
mod transport;

pub use browser::{Browser, BrowserConfig, Launch};
pub use metrics::FetchMetrics;

use base64::Engine as _;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use http_body_util::Full;
use notifio_policy::classify::BODY_HEAD;
use notifio_policy::retry::GiveUp;
use notifio_policy::{
    AttemptResult, Markers, RequestClass, ResponseFacts, RetryBudget, RetryPolicies, SiteKey,
    TransportFailure, parse_retry_after,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use url::Url;

/// Who asks: the tool, its version and where to read about it, as honest watchers say it
/// (urlwatch sends `urlwatch/2.29 (+https://…)`). Notifio hides nothing about being
/// automation; a user may name something else, for every site (`[fetch] user_agent`) or for
/// one (`[site."…"] user_agent`): docs/sites.md#who-is-asking-the-user-agent.
pub const DEFAULT_USER_AGENT: &str = concat!(
    "notifio/",
    env!("CARGO_PKG_VERSION"),
    " (+",
    env!("CARGO_PKG_REPOSITORY"),
    ")"
);
/// Spanish first (Idealista), then English and German.
pub const DEFAULT_ACCEPT_LANGUAGE: &str = "es-ES,es;q=0.9,en;q=0.8,de;q=0.7";
/// What a browser asks for when it navigates.
const ACCEPT: &str = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
/// Bound on remembered ETag/Last-Modified pairs (one per watched URL in practice).
const MAX_VALIDATORS: usize = 10_000;
/// The retry header of request-level retry (`x-retry-count: n` on the n-th retry, when the class
/// sends it; docs/policy.md#request-level-retry-and-why-the-probe-never-retries).
const RETRY_COUNT: header::HeaderName = header::HeaderName::from_static("x-retry-count");
/// Seeds the body-size key of a host (the fallback for a URL never read before: a site's
/// pages tend to be alike in size), so that a host's key is not a URL's key.
const HOST_SIZE_SEED: u64 = 0x5173_e5ee_d0f0_5175;

/// How a check reads its page (`[site."…"] fetch`): one attempt over plain HTTP, in the
/// browser, or as the site's own app asks for it. Everything around an attempt (retry, budget,
/// metrics, classification) is the same.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FetchMode {
    /// A plain HTTP request (this module's client).
    #[default]
    Http,
    /// A real browser with the user's profile ([`browser`]).
    Browser,
    /// The request the site's mobile app sends for the same search (ImmobilienScout24:
    /// `extract::immoscout24_app`), over this module's HTTP client: a POST with its own
    /// headers and body ([`FetchRequest::outgoing`]), no cookies, no redirects.
    App,
}

impl FetchMode {
    /// The names a config may give.
    pub const NAMES: [&'static str; 3] = ["http", "browser", "app"];

    /// The name in config and JSON.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Browser => "browser",
            Self::App => "app",
        }
    }

    /// Parses [`Self::as_str`] (case-insensitive).
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "http" => Some(Self::Http),
            "browser" => Some(Self::Browser),
            "app" => Some(Self::App),
            _ => None,
        }
    }

    /// The mode a site gets when its config names none: what its profile asks for
    /// ([`crate::extract::SiteProfile::default_fetch`]: the browser for the sites that
    /// refuse plain HTTP clients, the app's request for ImmobilienScout24), else HTTP.
    #[must_use]
    pub fn default_for(profile: &dyn crate::extract::SiteProfile) -> Self {
        Self::parse(profile.default_fetch()).unwrap_or_default()
    }

    /// Whether this mode can read a site with this profile: only ImmobilienScout24 has an app
    /// request Notifio knows.
    #[must_use]
    pub fn fits_profile(self, profile: &str) -> bool {
        self != Self::App || profile == "immoscout24"
    }
}

impl std::fmt::Display for FetchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the fetcher talks to sites.
///
/// # Default
/// [`DEFAULT_USER_AGENT`] (`notifio/VERSION (+repository)`), `es-ES,es;q=0.9,en;q=0.8,de;q=0.7`, a 10 MiB body cap, at most 5
/// redirects, the retry policies of
/// docs/policy.md#request-level-retry-and-why-the-probe-never-retries (`probe`: one attempt), a
/// per-site retry budget of 500 tokens (retry 5, success refund 1), jitter seeded from the OS.
#[derive(Clone, Debug)]
pub struct FetchConfig {
    /// `User-Agent` header.
    pub user_agent: String,
    /// `Accept-Language` header.
    pub accept_language: String,
    /// Largest body kept, counted after decompression.
    pub body_cap: usize,
    /// Redirects followed before giving up with `TooManyRedirects`.
    pub max_redirects: usize,
    /// Retry policy per request class.
    pub retry: RetryPolicies,
    /// The retry budget each site starts with.
    pub budget: RetryBudget,
    /// Seed for retry jitter; `None` = from the OS (tests and benchmarks fix it).
    pub rng_seed: Option<u64>,
    /// Certificates (DER) trusted besides the webpki roots: a private CA, or a test's own
    /// certificate. Empty by default.
    pub extra_roots: Vec<Vec<u8>>,
    /// A proxy URL for every request; `None` (the default) = the proxies the environment
    /// names (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, read as curl does).
    pub proxy: Option<String>,
    /// The browser for [`FetchMode::Browser`] requests; `None` (the default) = such requests
    /// fail at once.
    pub browser: Option<BrowserConfig>,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            user_agent: DEFAULT_USER_AGENT.to_owned(),
            accept_language: DEFAULT_ACCEPT_LANGUAGE.to_owned(),
            body_cap: 10 * 1024 * 1024,
            max_redirects: 5,
            retry: RetryPolicies::default(),
            budget: RetryBudget::default(),
            rng_seed: None,
            extra_roots: Vec::new(),
            proxy: None,
            browser: None,
        }
    }
}

/// The fetcher could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// A configured header value is not valid in HTTP.
    #[error("{what} {value:?} cannot be sent as an HTTP header (control characters or non-ASCII?)")]
    BadHeader {
        /// Which setting.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// The TLS/HTTP client could not be initialised.
    #[error("cannot initialise the HTTP client: {0}")]
    Client(String),
}

/// One request to make.
#[derive(Clone, Debug)]
pub struct FetchRequest {
    /// Absolute http(s) URL.
    pub url: String,
    /// The site it belongs to (retry budget, metrics, logs).
    pub site: SiteKey,
    /// Which retry policy applies.
    pub class: RequestClass,
    /// Send the ETag/Last-Modified remembered for this URL (a 304 means unchanged).
    pub conditional: bool,
    /// POST this JSON body (webhooks) instead of a GET.
    pub post_json: Option<Bytes>,
    /// Over plain HTTP or in the browser.
    pub via: FetchMode,
    /// In the browser: a CSS selector present once the page shows its results (or says there
    /// are none), so the page is read as soon as it is ready.
    pub ready: Option<Arc<str>>,
    /// The markers that make an answer a refusal rather than a fault (the search's profile's),
    /// so a challenge served with a 5xx is not retried; `None` = [`Markers::generic`].
    pub markers: Option<Arc<Markers>>,
    /// Send this instead of a GET: a notification to a service ([`Self::notify`]). Takes
    /// precedence over `post_json`.
    pub outgoing: Option<Outgoing>,
    /// With a request budget on the site: the retries and redirects the check may still
    /// send; a retry or a redirect past it is not sent. `None`: no limit but the retry policy's.
    pub spare: Option<Spare>,
}

/// The requests a check may send to its site beyond its result pages (retries, redirects),
/// shared by the requests of all its pages: the room its site's request budget had when the
/// check started ([`notifio_policy::Check::spare`]), so no window of the budget overflows.
#[derive(Clone, Debug)]
pub struct Spare(Arc<AtomicU32>);

impl Spare {
    /// Room for `requests` more.
    #[must_use]
    pub fn new(requests: u32) -> Self {
        Self(Arc::new(AtomicU32::new(requests)))
    }

    /// Takes one request's room: `false` when none is left.
    fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// What a notification request sends: its method, headers and body.
///
/// Notification requests ([`FetchRequest::notify`]) differ from page reads in what they must
/// not do: they never carry a site's cookies or conditional validators, never follow a
/// redirect (it would resend the body, and perhaps a token, somewhere the user did not name),
/// and nothing logs their URL or header values (bot tokens live in paths, API keys in headers).
#[derive(Clone)]
pub struct Outgoing {
    /// `POST`, `PUT`, ….
    pub method: Method,
    /// Sent after the fetcher's own (so they replace them: `Accept`, `User-Agent`, …).
    pub headers: Vec<(header::HeaderName, String)>,
    /// The body.
    pub body: Bytes,
}

// Manual Debug: header names only; their values may be secrets.
impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("method", &self.method)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

impl FetchRequest {
    /// A conditional GET of a search page.
    #[must_use]
    pub fn search(url: &str, site: SiteKey) -> Self {
        Self {
            url: url.to_owned(),
            site,
            class: RequestClass::Search,
            conditional: true,
            post_json: None,
            via: FetchMode::Http,
            ready: None,
            markers: None,
            outgoing: None,
            spare: None,
        }
    }

    /// A notification to a service: `outgoing` sent to `url` with the `notify` retry class,
    /// without cookies, validators or redirects (see [`Outgoing`]). `site` is the service's
    /// site key (its retry budget).
    #[must_use]
    pub fn notify(url: &str, site: SiteKey, outgoing: Outgoing) -> Self {
        Self {
            url: url.to_owned(),
            site,
            class: RequestClass::Notify,
            conditional: false,
            post_json: None,
            via: FetchMode::Http,
            ready: None,
            markers: None,
            outgoing: Some(outgoing),
            spare: None,
        }
    }

    /// Same request, another class.
    #[must_use]
    pub fn with_class(mut self, class: RequestClass) -> Self {
        self.class = class;
        self
    }

    /// Same request, read in the browser once `ready` (if any) matches.
    #[must_use]
    pub fn in_browser(mut self, ready: Option<Arc<str>>) -> Self {
        self.via = FetchMode::Browser;
        self.ready = ready;
        self.conditional = false;
        self
    }
}

/// What came back, after all attempts: what was asked, how long it took, and [`Reply`], what
/// really happened.
#[derive(Clone, Debug)]
pub struct Fetched {
    /// The URL asked for.
    pub requested_url: String,
    /// Attempts made, including the first.
    pub attempts: u32,
    /// Requests sent to the site: every attempt and every redirect it followed (a browser
    /// attempt is its document's request). What counts against the site's request budget.
    pub requests: u32,
    /// From the first attempt's start to the end (sleeps included).
    pub latency: Duration,
    /// How it was read. A browser's body is the rendered DOM, already UTF-8.
    pub via: FetchMode,
    /// What happened.
    pub reply: Reply,
}

/// What can come of a request, after its attempts.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A response arrived: the last attempt's (a 5xx after the retries, too).
    Response(Response),
    /// No usable response: why, and the last response when one came (a body over the cap
    /// comes with its status and the part that was read).
    Failure {
        /// What went wrong, for the retry policy and [`notifio_policy::classify`].
        failure: TransportFailure,
        /// The same in words (never cookies or the URL).
        error: String,
        /// The response, when the failure came after one.
        response: Option<Response>,
    },
    /// The shutdown token fired: the call returned at once, and there is nothing to judge.
    Cancelled,
    /// The response redirected into this other site, which is closed to us right now
    /// (waiting after a refusal, or its session expired: [`Fetcher::close_site`]), so the
    /// redirect was not followed. The response is the redirect itself, with no body.
    Held {
        /// The site it leads to.
        site: SiteKey,
        /// The redirect.
        response: Response,
    },
    /// The response redirected, and the site's request budget had no room for following it
    /// now (docs/policy.md#a-request-budget-per-site): nothing was learnt and nobody refused;
    /// the search is due again when the budget has room. The response is the redirect.
    Deferred {
        /// The redirect.
        response: Response,
    },
}

/// One response as it came back.
#[derive(Clone, Debug)]
pub struct Response {
    /// Its URL, after redirects.
    pub final_url: String,
    /// Its status.
    pub status: u16,
    /// Its headers; names lower-case.
    pub headers: Vec<(String, String)>,
    /// Decompressed body, at most the cap.
    pub body: Bytes,
    /// Its `Retry-After`, parsed (garbage → `None`).
    pub retry_after: Option<Duration>,
    /// What was wrong with it, in words, if anything (`HTTP 503 Service Unavailable`, a
    /// redirect not followed).
    pub problem: Option<String>,
}

impl Fetched {
    /// The facts [`notifio_policy::classify`] needs (the first 64 KiB of body); `None` when
    /// there is nothing to classify (cancelled, or held at a waiting site).
    #[must_use]
    pub fn facts(&self, has_session: bool) -> Option<ResponseFacts<'_>> {
        let (failure, response) = match &self.reply {
            Reply::Response(r) => (None, Some(r)),
            Reply::Failure {
                failure, response, ..
            } => (Some(*failure), response.as_ref()),
            Reply::Cancelled | Reply::Held { .. } | Reply::Deferred { .. } => return None,
        };
        Some(ResponseFacts {
            status: response.map(|r| r.status),
            failure,
            headers: response.map_or(&[], |r| &r.headers),
            requested_url: &self.requested_url,
            final_url: response.map_or(&self.requested_url, |r| &r.final_url),
            body_head: response.map_or(&[], |r| &r.body[..r.body.len().min(BODY_HEAD)]),
            has_session,
        })
    }

    /// The response, if one came (also the one a failure or a held redirect came with).
    #[must_use]
    pub fn response(&self) -> Option<&Response> {
        match &self.reply {
            Reply::Response(r)
            | Reply::Held { response: r, .. }
            | Reply::Deferred { response: r } => Some(r),
            Reply::Failure { response, .. } => response.as_ref(),
            Reply::Cancelled => None,
        }
    }

    /// The response's status, if one came.
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        self.response().map(|r| r.status)
    }

    /// Why no usable response came, if so.
    #[must_use]
    pub fn failure(&self) -> Option<TransportFailure> {
        match self.reply {
            Reply::Failure { failure, .. } => Some(failure),
            _ => None,
        }
    }

    /// The response's body (empty without one).
    #[must_use]
    pub fn body(&self) -> &[u8] {
        self.response().map_or(&[], |r| &r.body)
    }

    /// The URL of the response, after redirects (the one asked for without a response).
    #[must_use]
    pub fn final_url(&self) -> &str {
        self.response()
            .map_or(&self.requested_url, |r| &r.final_url)
    }

    /// The response's `Retry-After`.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.response().and_then(|r| r.retry_after)
    }

    /// What went wrong, in words (never cookies or the URL), if anything did.
    #[must_use]
    pub fn error(&self) -> Option<&str> {
        match &self.reply {
            Reply::Failure { error, .. } => Some(error),
            Reply::Response(r)
            | Reply::Held { response: r, .. }
            | Reply::Deferred { response: r } => r.problem.as_deref(),
            Reply::Cancelled => Some("cancelled"),
        }
    }

    /// The shutdown token fired.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        matches!(self.reply, Reply::Cancelled)
    }

    /// A redirect waits for room in the site's request budget ([`Reply::Deferred`]).
    #[must_use]
    pub fn is_deferred(&self) -> bool {
        matches!(self.reply, Reply::Deferred { .. })
    }

    /// The waiting site a redirect was not followed into, if so.
    #[must_use]
    pub fn held_at(&self) -> Option<&SiteKey> {
        match &self.reply {
            Reply::Held { site, .. } => Some(site),
            _ => None,
        }
    }

    /// A response with a 2xx status and no failure.
    #[must_use]
    pub fn ok_2xx(&self) -> bool {
        matches!(&self.reply, Reply::Response(r) if (200..300).contains(&r.status))
    }

    /// The body as text; invalid UTF-8 is replaced, never an error.
    #[must_use]
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.body())
    }

    /// 304: the page is unchanged since the remembered ETag/Last-Modified.
    #[must_use]
    pub fn not_modified(&self) -> bool {
        matches!(&self.reply, Reply::Response(r) if r.status == 304)
    }

    /// The first value of a response header (name case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.response()?
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn failed(req: &FetchRequest, failure: TransportFailure, error: String) -> Self {
        Self::without_attempt(
            req,
            Reply::Failure {
                failure,
                error,
                response: None,
            },
        )
    }

    /// Cancelled before its first attempt.
    fn cancelled(req: &FetchRequest) -> Self {
        Self::without_attempt(req, Reply::Cancelled)
    }

    fn without_attempt(req: &FetchRequest, reply: Reply) -> Self {
        Self {
            requested_url: req.url.clone(),
            attempts: 0,
            requests: 0,
            latency: Duration::ZERO,
            via: req.via,
            reply,
        }
    }
}

/// One attempt's result (the payload of the retry loop): the fields as the transports find
/// them, made into a [`Reply`] once the loop ends ([`Attempt::into_reply`]).
struct Attempt {
    status: Option<u16>,
    final_url: String,
    headers: Vec<(String, String)>,
    body: Bytes,
    failure: Option<TransportFailure>,
    error: Option<String>,
    /// A redirect into this closed site was not followed.
    held_at: Option<SiteKey>,
    /// A redirect was not followed now: the site's request budget had no room for it.
    deferred: bool,
    /// A failure that another attempt within the same check cannot mend (the browser
    /// crashed or could not start): not retried, whatever its kind.
    retryable: bool,
}

impl Attempt {
    /// What this last attempt amounts to.
    fn into_reply(self) -> Reply {
        let response = self.status.map(|status| Response {
            retry_after: retry_after_of(&self.headers),
            final_url: self.final_url,
            status,
            headers: self.headers,
            body: self.body,
            problem: self.error.clone(),
        });
        match (self.held_at, self.failure, response) {
            (Some(site), _, Some(response)) => Reply::Held { site, response },
            (None, None, Some(response)) if self.deferred => Reply::Deferred { response },
            (_, Some(failure), response) => Reply::Failure {
                failure,
                error: self.error.unwrap_or_else(|| "no usable response".into()),
                response,
            },
            (_, None, Some(response)) => Reply::Response(response),
            (_, None, None) => Reply::Failure {
                failure: TransportFailure::Malformed,
                error: self.error.unwrap_or_else(|| "no response".into()),
                response: None,
            },
        }
    }
}

#[derive(Clone, Default)]
struct Validators {
    etag: Option<String>,
    last_modified: Option<String>,
}

struct Inner {
    transport: transport::Transport,
    /// Sent with every request: User-Agent, Accept, Accept-Language.
    headers: HeaderMap,
    cfg: FetchConfig,
    cookies: Mutex<HashMap<SiteKey, Arc<cookies::CookieJar>>>,
    /// The sites whose user set their own `User-Agent` (`[site."…"] user_agent`).
    user_agents: Mutex<HashMap<SiteKey, String>>,
    validators: Mutex<HashMap<String, Validators>>,
    /// The last body length per URL and per host (by hash): the next read of that URL (or,
    /// the first time, of another URL on that host) reserves that much at once instead of
    /// doubling its buffer up from nothing (a gzip response has no usable length).
    body_sizes: Mutex<HashMap<u64, usize>>,
    budgets: Mutex<HashMap<SiteKey, RetryBudget>>,
    /// Sites a redirect must not lead into now (see [`Fetcher::close_site`]).
    closed: Mutex<HashSet<SiteKey>>,
    rng: Mutex<SmallRng>,
    metrics: FetchMetrics,
    browser: Option<Browser>,
    /// The markers of a request that names none.
    generic_markers: Markers,
}

/// The HTTP client with retry, limits, cookies and metrics. Cheap to clone.
#[derive(Clone)]
pub struct Fetcher {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("user_agent", &self.inner.cfg.user_agent)
            .field("body_cap", &self.inner.cfg.body_cap)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A transport failure as the retry policy sees it.
fn failure_of(broken: transport::Broken) -> TransportFailure {
    match broken {
        transport::Broken::Malformed => TransportFailure::Malformed,
        transport::Broken::Connection => TransportFailure::Connect,
    }
}

/// How an attempt reads to the retry policy (a challenge at 5xx is a refusal; a broken
/// browser is not retried), and the `Retry-After` it carries.
fn attempt_result(
    a: &Attempt,
    requested_url: &str,
    markers: &Markers,
) -> (AttemptResult, Option<Duration>) {
    if !a.retryable {
        return (AttemptResult::Invalid, None);
    }
    let facts = ResponseFacts {
        status: a.status,
        failure: a.failure,
        headers: &a.headers,
        requested_url,
        final_url: &a.final_url,
        body_head: &a.body[..a.body.len().min(BODY_HEAD)],
        has_session: false,
    };
    (
        AttemptResult::of_response(&facts, markers),
        retry_after_of(&a.headers),
    )
}

/// A response's `Retry-After`, parsed (garbage → `None`).
fn retry_after_of(headers: &[(String, String)]) -> Option<Duration> {
    headers
        .iter()
        .find(|(n, _)| n == "retry-after")
        .and_then(|(_, v)| parse_retry_after(v, crate::clock::now()))
}

impl Fetcher {
    /// Builds the client (rustls, gzip/brotli/deflate, HTTP/1.1 and HTTP/2; redirects are
    /// followed by hand so limits and cookies apply per hop). See `fetch/transport.rs`.
    ///
    /// # Errors
    /// A header setting that is not a valid header value, or a TLS initialisation failure.
    pub fn new(cfg: FetchConfig) -> Result<Self, FetchError> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static(ACCEPT));
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static(transport::ACCEPT_ENCODING),
        );
        headers.insert(
            header::ACCEPT_LANGUAGE,
            HeaderValue::from_str(&cfg.accept_language).map_err(|_| FetchError::BadHeader {
                what: "accept_language",
                value: cfg.accept_language.clone(),
            })?,
        );
        let ua = HeaderValue::from_str(&cfg.user_agent).map_err(|_| FetchError::BadHeader {
            what: "user_agent",
            value: cfg.user_agent.clone(),
        })?;
        headers.insert(header::USER_AGENT, ua);
        let transport = transport::Transport::new(
            Duration::from_secs(60),
            &cfg.extra_roots,
            cfg.proxy.as_deref(),
        )
        .map_err(FetchError::Client)?;
        let cfg_browser = cfg.browser.clone();
        let rng = match cfg.rng_seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => SmallRng::from_rng(&mut rand::rng()),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                transport,
                headers,
                cfg,
                cookies: Mutex::default(),
                user_agents: Mutex::default(),
                validators: Mutex::default(),
                body_sizes: Mutex::default(),
                budgets: Mutex::default(),
                closed: Mutex::default(),
                rng: Mutex::new(rng),
                metrics: FetchMetrics::new(),
                browser: cfg_browser.map(Browser::new),
                generic_markers: Markers::generic(),
            }),
        })
    }

    /// Keeps redirects out of `site` until [`Self::open_site`]: a response of another site
    /// that redirects there is not followed ([`Fetched::held_at`]). The watcher closes a site
    /// while it waits after a refusal or its session is expired, so a search on one site
    /// cannot knock on a waiting one through a redirect. (A request *to* `site` itself is the
    /// scheduler's business and is not affected.)
    pub fn close_site(&self, site: SiteKey) {
        lock(&self.inner.closed).insert(site);
    }

    /// Lets redirects into `site` be followed again.
    pub fn open_site(&self, site: &SiteKey) {
        lock(&self.inner.closed).remove(site);
    }

    /// Cookies for a site; sent only to URLs whose site key is `site` (and whose host, path
    /// and scheme the cookie allows). Replaces the site's previous jar.
    pub fn set_cookies(&self, site: SiteKey, jar: cookies::CookieJar) {
        lock(&self.inner.cookies).insert(site, Arc::new(jar));
    }

    /// The `User-Agent` each of these sites gets instead of [`FetchConfig::user_agent`] (the
    /// sites' `[site."…"] user_agent`), replacing the previous ones; sent, like cookies, only
    /// to URLs of that site, on every hop. A request with its own headers (a notification, an
    /// app request) keeps them.
    pub fn set_user_agents(&self, agents: HashMap<SiteKey, String>) {
        *lock(&self.inner.user_agents) = agents;
    }

    /// The retry metrics.
    #[must_use]
    pub fn metrics(&self) -> &FetchMetrics {
        &self.inner.metrics
    }

    /// Tokens left in a site's retry budget (full if it has never retried).
    #[must_use]
    pub fn budget_tokens(&self, site: &SiteKey) -> u32 {
        lock(&self.inner.budgets)
            .get(site)
            .map_or(self.inner.cfg.budget.tokens(), RetryBudget::tokens)
    }

    /// Fetches with the class's retry policy. Never panics on server input; every limit ends
    /// as a [`TransportFailure`]. When `cancel` fires (during an attempt or a sleep) it returns
    /// at once with `cancelled = true` and leaves nothing running.
    pub async fn fetch(&self, req: &FetchRequest, cancel: &CancellationToken) -> Fetched {
        // A page in the browser waits for its turn to load before its time starts.
        let browser = self.inner.browser.as_ref();
        let _turn = match browser.filter(|_| req.via == FetchMode::Browser) {
            Some(b) => tokio::select! {
                biased;
                () = cancel.cancelled() => return Fetched::cancelled(req),
                t = b.turn() => t,
            },
            None => None,
        };
        let started = Instant::now();
        let url = match Url::parse(&req.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            _ => {
                return Fetched::failed(
                    req,
                    TransportFailure::Malformed,
                    "not an absolute http(s) URL".into(),
                );
            }
        };
        let policy = self.inner.cfg.retry.get(req.class);
        let header = policy.retry_header();
        let url = &url;
        let markers = req
            .markers
            .as_deref()
            .unwrap_or(&self.inner.generic_markers);
        let sent = &AtomicU32::new(0);
        let no_room = &AtomicBool::new(false);
        let out = retry::run(
            policy,
            cancel,
            || lock(&self.inner.rng).random::<f64>(),
            || {
                let retry = lock(&self.inner.budgets)
                    .entry(req.site.clone())
                    .or_insert_with(|| self.inner.cfg.budget.clone())
                    .try_spend_retry();
                let room = !retry || req.spare.as_ref().is_none_or(Spare::take);
                no_room.store(!room, Ordering::Relaxed);
                retry && room
            },
            |n, timeout| async move {
                let a = match req.via {
                    FetchMode::Http | FetchMode::App => {
                        self.attempt(req, url, n, header, sent).await
                    }
                    FetchMode::Browser => {
                        sent.fetch_add(1, Ordering::Relaxed);
                        self.browser_attempt(req, n, header, timeout).await
                    }
                };
                let (result, retry_after) = attempt_result(&a, &req.url, markers);
                (result, retry_after, a)
            },
        )
        .await;
        let latency = started.elapsed();

        let mut reply = match out.payload {
            _ if out.cancelled => Reply::Cancelled,
            Some(a) => a.into_reply(),
            None => Reply::Failure {
                failure: TransportFailure::Timeout,
                error: format!(
                    "timed out after {}: no complete response",
                    notifio_policy::format_duration(
                        out.timeouts.last().copied().unwrap_or_default()
                    )
                ),
                response: None,
            },
        };
        if let Reply::Response(r) = &mut reply
            && r.problem.is_none()
            && r.status >= 500
        {
            let reason = StatusCode::from_u16(r.status)
                .ok()
                .and_then(|c| c.canonical_reason())
                .unwrap_or("");
            r.problem = Some(format!("HTTP {} {reason}", r.status).trim_end().to_owned());
        }
        let fetched = Fetched {
            requested_url: req.url.clone(),
            attempts: out.attempts,
            requests: sent.load(Ordering::Relaxed),
            latency,
            via: req.via,
            reply,
        };
        let mut fetched = fetched;
        if fetched.is_cancelled() {
            return fetched;
        }
        if out.budget_denied {
            let note = match no_room.load(Ordering::Relaxed) {
                true => " (retry skipped: the site's request budget has no room for it)",
                false => " (retry skipped: the site's retry budget is spent)",
            };
            match &mut fetched.reply {
                Reply::Failure { error, .. } => error.push_str(note),
                Reply::Response(Response {
                    problem: Some(p), ..
                }) => p.push_str(note),
                _ => {}
            }
        }

        // The site answered (not a 5xx): refill its budget.
        let answered = fetched.failure().is_none() && fetched.status().is_some_and(|s| s < 500);
        if answered {
            let mut budgets = lock(&self.inner.budgets);
            if let Some(b) = budgets.get_mut(&req.site) {
                b.on_success(fetched.attempts > 1);
            }
        }
        if req.post_json.is_none()
            && req.via == FetchMode::Http
            && req.outgoing.is_none()
            && fetched.ok_2xx()
        {
            self.remember_validators(&req.url, &fetched);
        }
        let final_failure =
            fetched.failure().is_some() || fetched.status().is_none_or(|s| s >= 500);
        if final_failure {
            tracing::warn!(
                site = %req.site,
                class = %req.class,
                attempts = fetched.attempts,
                gave_up = ?out.give_up.filter(|g| *g != GiveUp::NotRetryable),
                error = fetched.error().unwrap_or("unknown"),
                "request failed"
            );
        }
        self.inner.metrics.record(metrics::RequestRecord {
            class: req.class,
            in_browser: req.via == FetchMode::Browser,
            attempts: fetched.attempts,
            latency,
            final_failure,
            budget_denied: out.budget_denied,
        });
        fetched
    }

    /// One attempt in the browser.
    async fn browser_attempt(
        &self,
        req: &FetchRequest,
        retry_n: u32,
        header: bool,
        timeout: Duration,
    ) -> Attempt {
        let Some(browser) = &self.inner.browser else {
            return Attempt {
                status: None,
                final_url: req.url.clone(),
                headers: Vec::new(),
                body: Bytes::new(),
                failure: Some(TransportFailure::Malformed),
                error: Some("this site is read with the browser, but none is set up".into()),
                held_at: None,
                deferred: false,
                retryable: false,
            };
        };
        let closed: Vec<SiteKey> = lock(&self.inner.closed).iter().cloned().collect();
        browser
            .attempt(&browser::PageRequest {
                url: &req.url,
                ready: req.ready.as_deref(),
                retry_n,
                header,
                timeout,
                body_cap: self.inner.cfg.body_cap,
                site: &req.site,
                closed,
            })
            .await
    }

    /// The browser, if one is set up (started or not).
    #[must_use]
    pub fn browser(&self) -> Option<&Browser> {
        self.inner.browser.as_ref()
    }

    /// Closes what the fetcher holds open: the browser, cleanly (its cookies flushed to the
    /// profile). Call before exiting.
    pub async fn shutdown(&self) {
        if let Some(b) = &self.inner.browser {
            b.shutdown().await;
        }
    }

    fn remember_validators(&self, url: &str, f: &Fetched) {
        self.set_validators(
            url,
            f.header("etag").map(str::to_owned),
            f.header("last-modified").map(str::to_owned),
        );
    }

    /// Sets the `ETag`/`Last-Modified` that conditional requests for `url` send (both `None`:
    /// forget them). Every 2xx remembers its own; the watcher overrides that with the last page
    /// it judged good (a 200 challenge page must not become the page a 304 vouches for), and
    /// restores remembered ones at start.
    pub fn set_validators(&self, url: &str, etag: Option<String>, last_modified: Option<String>) {
        let v = Validators {
            etag,
            last_modified,
        };
        let mut map = lock(&self.inner.validators);
        if v.etag.is_none() && v.last_modified.is_none() {
            map.remove(url);
            return;
        }
        if map.len() >= MAX_VALIDATORS && !map.contains_key(url) {
            map.clear();
        }
        map.insert(url.to_owned(), v);
    }

    fn cookie_header(&self, url: &Url) -> Option<String> {
        let jar = {
            let jars = lock(&self.inner.cookies);
            // Most sites have no jar: skip working out the URL's site key.
            if jars.is_empty() {
                return None;
            }
            jars.get(&SiteKey::from_parsed(url).ok()?).cloned()?
        };
        jar.header_for(url)
    }

    /// The `User-Agent` the user set for `url`'s site, if any.
    fn site_user_agent(&self, url: &Url) -> Option<String> {
        let agents = lock(&self.inner.user_agents);
        if agents.is_empty() {
            return None;
        }
        agents.get(&SiteKey::from_parsed(url).ok()?).cloned()
    }

    /// One request: the default headers, then `extra` (a value that is not a valid header
    /// value, such as a stored ETag with a control character, is an error).
    fn request(
        &self,
        method: &Method,
        url: &Url,
        body: Option<Bytes>,
        extra: Vec<(header::HeaderName, String)>,
    ) -> Result<http::Request<Full<Bytes>>, String> {
        // A URL's own `user:password@` never goes into a request line (nor a proxy's): it is
        // sent as Basic credentials to that URL, which a relative redirect keeps.
        let mut target = url.clone();
        let credentials = (!url.username().is_empty() || url.password().is_some()).then(|| {
            let decode = |s: &str| percent_encoding::percent_decode_str(s).collect::<Vec<u8>>();
            let mut pair = decode(url.username());
            pair.push(b':');
            pair.extend(decode(url.password().unwrap_or_default()));
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            (header::AUTHORIZATION, format!("Basic {encoded}"))
        });
        let _ = target.set_username("");
        let _ = target.set_password(None);
        let uri: http::Uri = target
            .as_str()
            .parse()
            .map_err(|e| format!("not a valid request URI: {e}"))?;
        let mut request = http::Request::new(Full::new(body.unwrap_or_default()));
        *request.method_mut() = method.clone();
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.clone_from(&self.inner.headers);
        if let Some((name, value)) = credentials {
            let value = HeaderValue::try_from(value)
                .map_err(|_| "credentials that are not a valid header value".to_owned())?;
            headers.insert(name, value);
        }
        for (name, value) in extra {
            let value = HeaderValue::try_from(value)
                .map_err(|_| format!("a {name} value that is not a valid header value"))?;
            headers.insert(name, value);
        }
        Ok(request)
    }

    /// One attempt: the request and its redirects, then the capped body.
    /// `sent` counts its requests.
    async fn attempt(
        &self,
        req: &FetchRequest,
        url: &Url,
        retry_n: u32,
        header: bool,
        sent: &AtomicU32,
    ) -> Attempt {
        let mut hop = Hop::first(req, url);
        loop {
            sent.fetch_add(1, Ordering::Relaxed);
            let (extra, sent_validators) = self.hop_headers(req, &hop, retry_n, header);
            let resp = match self.send(&hop, extra).await {
                Ok(r) => r,
                Err((failure, error)) => {
                    return Attempt {
                        status: None,
                        final_url: hop.url.to_string(),
                        headers: Vec::new(),
                        body: Bytes::new(),
                        failure: Some(failure),
                        error: Some(error),
                        held_at: None,
                        deferred: false,
                        retryable: true,
                    };
                }
            };
            let status = resp.status();
            let headers = header_list(resp.headers());
            let location = status
                .is_redirection()
                .then(|| resp.headers().get(header::LOCATION))
                .flatten()
                .and_then(|l| l.to_str().ok())
                .and_then(|l| hop.url.join(l).ok());
            if let (true, Some(next)) = (
                matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308),
                location,
            ) {
                if let Some(stopped) = self.redirect_not_followed(req, &hop, status, headers, &next)
                {
                    return stopped;
                }
                hop.follow(status, next);
                continue;
            }
            // "Not modified" means nothing to a request that named no version of the page: a
            // server that always answers 304 must not look healthy forever.
            if status == StatusCode::NOT_MODIFIED && !sent_validators {
                return Attempt {
                    status: Some(status.as_u16()),
                    final_url: hop.url.to_string(),
                    headers,
                    body: Bytes::new(),
                    failure: Some(TransportFailure::Malformed),
                    error: Some(
                        "HTTP 304 Not Modified to a request that named no version of the page"
                            .into(),
                    ),
                    held_at: None,
                    deferred: false,
                    retryable: true,
                };
            }
            return self.read_body(resp, &hop.url).await;
        }
    }

    /// The headers one hop adds to the defaults, and whether they name a version of the page
    /// (`If-None-Match`, `If-Modified-Since`).
    fn hop_headers(
        &self,
        req: &FetchRequest,
        hop: &Hop,
        retry_n: u32,
        header: bool,
    ) -> (Vec<(header::HeaderName, String)>, bool) {
        let mut extra: Vec<(header::HeaderName, String)> = Vec::new();
        if hop.body.is_some() && req.outgoing.is_none() {
            extra.push((header::CONTENT_TYPE, "application/json".into()));
        }
        if header && retry_n > 0 {
            extra.push((RETRY_COUNT, retry_n.to_string()));
        }
        match &req.outgoing {
            Some(o) => extra.extend(o.headers.iter().cloned()),
            None => {
                extra.extend(self.cookie_header(&hop.url).map(|c| (header::COOKIE, c)));
                extra.extend(
                    self.site_user_agent(&hop.url)
                        .map(|a| (header::USER_AGENT, a)),
                );
            }
        }
        let before = extra.len();
        if hop.redirects == 0
            && req.conditional
            && req.outgoing.is_none()
            && hop.method == Method::GET
        {
            let v = lock(&self.inner.validators).get(&req.url).cloned();
            if let Some(v) = v {
                extra.extend(v.etag.map(|e| (header::IF_NONE_MATCH, e)));
                extra.extend(v.last_modified.map(|m| (header::IF_MODIFIED_SINCE, m)));
            }
        }
        let sent_validators = extra.len() > before;
        (extra, sent_validators)
    }

    /// Sends one hop's request: its response (status and headers), or why there is none.
    async fn send(
        &self,
        hop: &Hop,
        extra: Vec<(header::HeaderName, String)>,
    ) -> Result<transport::Response, (TransportFailure, String)> {
        match self.request(&hop.method, &hop.url, hop.body.clone(), extra) {
            Ok(request) => self.inner.transport.send(request).await.map_err(|e| {
                let failure = failure_of(transport::broken_send(&e));
                (failure, transport::describe(&e))
            }),
            Err(error) => Err((TransportFailure::Malformed, error)),
        }
    }

    /// A redirect (to `next`) that ends the attempt where it is, as what it is; `None` when it
    /// is to be followed.
    fn redirect_not_followed(
        &self,
        req: &FetchRequest,
        hop: &Hop,
        status: StatusCode,
        headers: Vec<(String, String)>,
        next: &Url,
    ) -> Option<Attempt> {
        let cfg = &self.inner.cfg;
        let stop = |failure, error, held_at, deferred| {
            Some(Attempt {
                status: Some(status.as_u16()),
                final_url: hop.url.to_string(),
                headers,
                body: Bytes::new(),
                failure,
                error: Some(error),
                held_at,
                deferred,
                retryable: true,
            })
        };
        if req.outgoing.is_some() {
            // A redirect is a misconfigured endpoint: say so, without its Location
            // (which may carry a token) and without resending the body.
            let what = match req.class {
                RequestClass::Notify => "for a notification: configure the URL it redirects to",
                _ => "for a request with a body: check the endpoint (`app_api`)",
            };
            let error = format!("HTTP {} redirect, not followed {what}", status.as_u16());
            return stop(None, error, None, false);
        }
        if hop.redirects >= cfg.max_redirects || !matches!(next.scheme(), "http" | "https") {
            let error = if hop.redirects >= cfg.max_redirects {
                format!("more than {} redirects", cfg.max_redirects)
            } else {
                format!("redirected to a {}: URL", next.scheme())
            };
            return stop(Some(TransportFailure::TooManyRedirects), error, None, false);
        }
        // Another site that is waiting (or whose session expired) is not knocked on
        // through a redirect either: the check stops here, at the redirect.
        if let Ok(to) = SiteKey::from_parsed(next)
            && to != req.site
            && lock(&self.inner.closed).contains(&to)
        {
            let error = format!("redirected to {to}, which is waiting: not followed");
            return stop(None, error, Some(to), false);
        }
        // Following it would overflow the site's request budget: the request waits for room
        // (the search is due again when there is), which is no fault of the site's.
        if req.spare.as_ref().is_some_and(|s| !s.take()) {
            let error = "redirect not followed now: the site's request budget has no room for it"
                .to_owned();
            return stop(None, error, None, true);
        }
        None
    }

    /// Reads the response's body (capped, decoded to UTF-8) into the attempt, its buffer
    /// sized by what this URL (else its host) sent last time.
    async fn read_body(&self, resp: transport::Response, url: &Url) -> Attempt {
        let status = resp.status();
        let size_key = xxhash_rust::xxh3::xxh3_64(url.as_str().as_bytes());
        let host_key = xxhash_rust::xxh3::xxh3_64_with_seed(
            url.host_str().unwrap_or_default().as_bytes(),
            HOST_SIZE_SEED,
        );
        let expected = {
            let sizes = lock(&self.inner.body_sizes);
            sizes
                .get(&size_key)
                .or_else(|| sizes.get(&host_key))
                .copied()
                .unwrap_or(0)
        };
        let (body_headers, body, failure, error) =
            read_capped(resp, self.inner.cfg.body_cap, expected).await;
        let headers = header_list(&body_headers);
        // A 304 (or any empty body) says nothing about the page's size: remembering 0
        // would make the next 200 grow its buffer by doubling, copying it each time.
        if failure.is_none() && !body.is_empty() {
            let mut sizes = lock(&self.inner.body_sizes);
            if sizes.len() >= MAX_VALIDATORS && !sizes.contains_key(&size_key) {
                sizes.clear();
            }
            sizes.insert(size_key, body.len());
            sizes.insert(host_key, body.len());
        }
        let body = charset::to_utf8(body, &headers);
        Attempt {
            status: Some(status.as_u16()),
            final_url: url.to_string(),
            headers,
            body,
            failure,
            error,
            held_at: None,
            deferred: false,
            retryable: true,
        }
    }
}

/// Where an attempt is in its redirects: the URL it asks next, how, and how many redirects
/// it has followed.
struct Hop {
    url: Url,
    method: Method,
    body: Option<Bytes>,
    redirects: usize,
}

impl Hop {
    fn first(req: &FetchRequest, url: &Url) -> Self {
        let (method, body) = match (&req.outgoing, &req.post_json) {
            (Some(o), _) => (o.method.clone(), Some(o.body.clone())),
            (None, Some(json)) => (Method::POST, Some(json.clone())),
            (None, None) => (Method::GET, None),
        };
        Self {
            url: url.clone(),
            method,
            body,
            redirects: 0,
        }
    }

    /// Follows a redirect (`status`) to `next`.
    fn follow(&mut self, status: StatusCode, next: Url) {
        self.redirects += 1;
        if status == StatusCode::SEE_OTHER
            || (self.method == Method::POST && matches!(status.as_u16(), 301 | 302))
        {
            self.method = Method::GET;
            self.body = None;
        }
        self.url = next;
    }
}

/// A GET to a local service of ours (a user's browser's DevTools endpoint), through the same
/// HTTP transport as every site request, without retries, cookies or site headers. The body
/// is capped at 1 MiB.
pub(crate) async fn local_get(url: &str) -> Result<Bytes, String> {
    let t = transport::Transport::new(Duration::from_secs(10), &[], None)?;
    let mut request = http::Request::new(Full::new(Bytes::new()));
    *request.uri_mut() = url.parse().map_err(|e| format!("not a valid URL: {e}"))?;
    let resp = tokio::time::timeout(Duration::from_secs(10), t.send(request))
        .await
        .map_err(|_| "no answer within 10 s".to_owned())?
        .map_err(|e| transport::describe(&e))?;
    if !resp.status().is_success() {
        return Err(format!("HTTP {}", resp.status().as_u16()));
    }
    let (_, body, failure, error) = read_capped(resp, 1 << 20, 0).await;
    match failure {
        None => Ok(body),
        Some(_) => Err(error.unwrap_or_else(|| "unreadable answer".into())),
    }
}

/// A response's headers as [`Fetched::headers`] keeps them (names lower-case).
fn header_list(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Reads a body (decoded as it arrives), stopping at `cap`. `expected` is this URL's last
/// body length, if known. Returns the headers that describe the body read.
async fn read_capped(
    resp: transport::Response,
    cap: usize,
    expected: usize,
) -> (HeaderMap, Bytes, Option<TransportFailure>, Option<String>) {
    // An exact length (a plain body: hyper reads no more than Content-Length, and a 304 has
    // none) is the size to reserve; a decoded body's is unknown (its Content-Length counts the
    // encoded bytes), so the last length gets 1/16 more room, for a page that grew a little.
    // Remote input either way: capped.
    let (parts, body) = transport::Body::of(resp).await;
    let mut body = match body {
        Ok(b) => b,
        Err((broken, error)) => {
            return (
                parts.headers,
                Bytes::new(),
                Some(failure_of(broken)),
                Some(error),
            );
        }
    };
    let hint = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(expected.saturating_add(expected / 16))
        .min(cap)
        .min(4 << 20);
    let mut buf = Vec::with_capacity(hint);
    loop {
        // One byte past the cap tells a body that ends there from one that goes on.
        let room = cap - buf.len();
        match body.read_into(&mut buf, room + 1).await {
            Ok(0) => return (parts.headers, fitted(buf), None, None),
            Ok(_) if buf.len() > cap => {
                buf.truncate(cap);
                return (
                    parts.headers,
                    fitted(buf),
                    Some(TransportFailure::BodyTooLarge),
                    Some(format!(
                        "body larger than the {cap}-byte cap (after decompression)"
                    )),
                );
            }
            Ok(_) => {}
            Err((broken, error)) => {
                return (
                    parts.headers,
                    fitted(buf),
                    Some(failure_of(broken)),
                    Some(error),
                );
            }
        }
    }
}

/// A body read without a good size hint grew by doubling and may hold up to twice its
/// length; it lives on through parsing and storing, so give the slack back first. (Shrinking
/// in place costs no copy in glibc's allocator; in the `watch` benchmark's first pass, where
/// no page's size is known yet, this was ~3 MB of the peak RSS.)
fn fitted(mut buf: Vec<u8>) -> Bytes {
    if buf.capacity() - buf.len() > buf.len() / 16 {
        buf.shrink_to_fit();
    }
    Bytes::from(buf)
}
