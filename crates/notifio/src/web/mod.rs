//! The dashboard: one embedded page, `/api/status` (docs/dashboard.md#endpoints), `/metrics`
//! (Prometheus text) and `/healthz`, served by `notifio watch`, and with an [`App`] the API
//! that manages searches (`api.rs`). Status is read from a [`StatusSource`] the watch loop
//! hands it, and the page polls it, so what the browser shows is exactly what `notifio status`
//! prints; changes go through the config file and the live reload. Off loopback it refuses to
//! start without a bearer token, it answers only requests whose `Host` is one of its own names
//! (421 otherwise), and a request that changes something must also be JSON from the
//! dashboard's own origin (403 otherwise).

mod api;
mod auth;
mod listings;
mod page;

pub use api::App;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::status::StatusView;

pub use auth::TOKEN_ENV;

/// The content type of `/metrics`: OpenMetrics text (what prometheus-client writes: `_total`
/// counters, `# EOF` last), which Prometheus asks for first.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the dashboard reads. Implemented by the watch loop; tests implement it over a mutex.
pub trait StatusSource: Send + Sync + 'static {
    /// The status view, built fresh on each call (may touch the store, so it runs on a
    /// blocking thread).
    fn status(&self) -> StatusView;
    /// Prometheus text exposition, already rendered.
    fn metrics(&self) -> String;
}

/// Where the dashboard listens and the token it requires.
#[derive(Clone)]
pub struct DashboardConfig {
    /// Address to bind (`[watch] dashboard`, default `127.0.0.1:7878`; port 0 picks one).
    pub addr: SocketAddr,
    /// Bearer token (`[watch] dashboard_token` or env `NOTIFIO_DASHBOARD_TOKEN`). Required when
    /// `addr` is not loopback; when set, every route but `/healthz` requires it.
    pub token: Option<String>,
    /// Host names the dashboard also answers to (`[watch] dashboard_hosts`), besides its
    /// address, `localhost`, `127.0.0.1` and `[::1]`: `name` (with the bound port) or
    /// `name:port`.
    pub hosts: Vec<String>,
}

/// Redacts the token: a config struct is the kind of thing that ends up in a log line.
impl std::fmt::Debug for DashboardConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardConfig")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// A non-loopback bind without a token would show the user's searches to the network.
    #[error(
        "the dashboard address {addr} is reachable from other machines, so it needs a token: \
         set `dashboard_token` under [watch] in the config or the environment variable \
         {TOKEN_ENV}, or bind it to 127.0.0.1 (or set `dashboard = false` to disable it)"
    )]
    TokenRequired {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The token was set but is empty or blank, which would be guessable.
    #[error(
        "the dashboard token is empty: set `dashboard_token` under [watch] or {TOKEN_ENV} to a \
         long random string (e.g. `openssl rand -hex 16`)"
    )]
    EmptyToken,
    /// The address could not be bound (in use, no permission, not local).
    #[error(
        "cannot listen on {addr} for the dashboard: {source} (is another notifio running? \
         change `dashboard` under [watch], or set it to false)"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Binds `cfg.addr` and serves the dashboard (reading only) until `cancel` fires. Returns the
/// bound address (useful with port 0) and the server task, which ends after a graceful
/// shutdown.
pub async fn serve(
    cfg: DashboardConfig,
    source: Arc<dyn StatusSource>,
    cancel: CancellationToken,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), WebError> {
    serve_app(cfg, source, None, cancel).await
}

/// [`serve`], with the API that manages searches when `app` is given (`notifio watch`).
pub async fn serve_app(
    cfg: DashboardConfig,
    source: Arc<dyn StatusSource>,
    app: Option<Arc<App>>,
    cancel: CancellationToken,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), WebError> {
    let token = auth::check_token(cfg.addr, cfg.token)?;
    let listener = tokio::net::TcpListener::bind(cfg.addr)
        .await
        .map_err(|source| WebError::Bind {
            addr: cfg.addr,
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| WebError::Bind {
        addr: cfg.addr,
        source,
    })?;
    if token.is_some() {
        tracing::info!(
            "dashboard on http://{bound}/ (token required: open http://{bound}/?token=<your token>)"
        );
    } else {
        tracing::info!("dashboard on http://{bound}/");
    }
    let hosts = Arc::new(auth::AllowedHosts::new(bound, &cfg.hosts));
    let mut routes = router(source, token.clone());
    if let Some(app) = app {
        let token = token.filter(|t| !t.trim().is_empty());
        let reads = api::reads(Arc::clone(&app))
            .merge(listings::reads(Arc::clone(&app)))
            .route_layer(middleware::from_fn_with_state(
                Arc::new(token.clone()),
                auth::require_token,
            ));
        let rules = Arc::new(auth::MutationRules {
            hosts: Arc::clone(&hosts),
            token,
        });
        let changes = api::changes(Arc::clone(&app))
            .merge(listings::changes(app))
            .layer(DefaultBodyLimit::max(api::MAX_BODY))
            .route_layer(middleware::from_fn_with_state(
                rules,
                auth::require_mutation_rules,
            ));
        routes = routes.merge(reads).merge(changes);
    }
    let routes = routes
        .layer(middleware::from_fn(common_headers))
        .layer(middleware::from_fn_with_state(hosts, auth::require_host));
    let task = tokio::spawn(async move {
        let shutdown = cancel.cancelled_owned();
        if let Err(e) = axum::serve(listener, routes)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!("dashboard server stopped: {e}");
        }
    });
    Ok((bound, task))
}

/// The dashboard's reading routes. With `Some(token)`, every route except `/healthz` requires
/// `Authorization: Bearer <token>` or `?token=<token>`. [`serve_app`] adds the API's routes,
/// the headers every response carries and the `Host` check, which needs the bound address.
fn router(source: Arc<dyn StatusSource>, token: Option<String>) -> Router {
    let guarded = Router::new()
        .route("/", get(index))
        .route("/api/status", get(status))
        .route("/metrics", get(metrics))
        .with_state(source)
        .route_layer(middleware::from_fn_with_state(
            Arc::new(token.filter(|t| !t.trim().is_empty())),
            auth::require_token,
        ));
    Router::new().route("/healthz", get(healthz)).merge(guarded)
}

/// `GET /`: the page, with a fresh CSP nonce for its inline script and style.
async fn index() -> Response {
    let (html, csp) = page::render();
    let mut resp = ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response();
    if let Ok(v) = HeaderValue::from_str(&csp) {
        resp.headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, v);
    }
    resp
}

/// `GET /api/status`: the source's [`StatusView`] as JSON, unchanged.
async fn status(State(source): State<Arc<dyn StatusSource>>) -> Response {
    match tokio::task::spawn_blocking(move || source.status()).await {
        Ok(view) => axum::Json(view).into_response(),
        Err(e) => {
            tracing::warn!("building the status view failed: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "status unavailable, see the notifio log\n",
            )
                .into_response()
        }
    }
}

/// `GET /metrics`: the source's Prometheus text.
async fn metrics(State(source): State<Arc<dyn StatusSource>>) -> Response {
    match tokio::task::spawn_blocking(move || source.metrics()).await {
        Ok(text) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response(),
        Err(e) => {
            tracing::warn!("rendering metrics failed: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "metrics unavailable, see the notifio log\n",
            )
                .into_response()
        }
    }
}

/// `GET /healthz`: liveness, no token needed, says nothing about the searches.
async fn healthz() -> &'static str {
    "ok"
}

/// Headers on every response: never cached (the data is live and may be private), never
/// sniffed or framed, and no Referer, since a page URL may carry `?token=`.
async fn common_headers(req: axum::extract::Request, next: middleware::Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}
