//! The HTTP side of one site: an axum router behind a hand-driven hyper connection per socket.
//!
//! Driving each connection ourselves (instead of `axum::serve`) is what lets
//! [`Behaviour::Reset`] abort exactly the connection that asked, with a real TCP RST. A
//! middleware records every request and applies the site's behaviour before any route runs.

use crate::page::{self, ChallengeKind};
use crate::{Behaviour, RecordedRequest, Site, now_ms};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use flate2::write::GzEncoder;
use flate2::{Compress, Compression, Crc, FlushCompress};
use futures_util::stream;
use rand::Rng;
use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tower::ServiceExt as _;

/// A rendered result page, kept until its listings change.
pub(crate) struct CachedPage {
    etag: String,
    plain: Bytes,
    gzip: Bytes,
}

/// A bound on the page cache: clients may ask for any search name.
const MAX_CACHED_PAGES: usize = 256;

/// Per-connection handle a handler can use to reset its own connection.
struct ConnCtx {
    /// A second descriptor of the connection's socket, to set `SO_LINGER 0` on.
    sock: std::net::TcpStream,
    abort: Notify,
}

impl ConnCtx {
    /// Closes the connection with an RST: linger 0, then the connection task drops the socket.
    fn reset(&self) {
        let _ = socket2::SockRef::from(&self.sock).set_linger(Some(Duration::ZERO));
        self.abort.notify_one();
    }
}

pub(crate) async fn serve(listener: TcpListener, site: Arc<Site>) {
    let router = router(site.clone());
    loop {
        let stream = tokio::select! {
            () = site.shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "fake-portal: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        tokio::spawn(connection(stream, router.clone(), site.shutdown.clone()));
    }
}

async fn connection(
    stream: TcpStream,
    router: Router,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let Ok(std_stream) = stream.into_std() else {
        return;
    };
    let Ok(dup) = std_stream.try_clone() else {
        return;
    };
    let Ok(stream) = TcpStream::from_std(std_stream) else {
        return;
    };
    let ctx = Arc::new(ConnCtx {
        sock: dup,
        abort: Notify::new(),
    });
    let svc_ctx = ctx.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(svc_ctx.clone());
        router.clone().oneshot(req)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        () = ctx.abort.notified() => {}
        () = shutdown.cancelled() => {}
    }
}

fn router(site: Arc<Site>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/search/list", post(app_search))
        .route("/search/{search}", get(search))
        .route("/search/{search}/{page}", get(search_pagina))
        .route("/listing/{id}", get(detail))
        .route("/login", get(login).post(log_in))
        .route("/poll", get(|| async { StatusCode::NO_CONTENT }))
        .route("/img/{name}", get(image))
        .route("/redirect/{n}", get(redirect))
        .route("/hooks/{name}", post(hook))
        .fallback(|| async { html(StatusCode::NOT_FOUND, page::simple_page("Not found", "")) })
        .layer(middleware::from_fn_with_state(site.clone(), behave))
        .with_state(site)
}

fn html(status: StatusCode, body: String) -> Response<Body> {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

fn redirect_to(location: &str) -> Response<Body> {
    (
        StatusCode::FOUND,
        [(header::LOCATION, location.to_owned())],
        String::new(),
    )
        .into_response()
}

/// Percent-encodes everything but RFC 3986 unreserved characters (enough for `?next=`).
fn encode_component(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Counts the bytes each response sends (by its length), around [`behave_inner`].
async fn behave(State(site): State<Arc<Site>>, req: Request, next: Next) -> Response<Body> {
    let site2 = site.clone();
    let r = behave_inner(State(site), req, next).await;
    // A body built from bytes knows its exact length (hyper writes it as `Content-Length`
    // only later, so the header is not there yet); a streamed one (drip, gzip bomb) does not
    // and counts only if it set the header itself.
    let len = r
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .or_else(|| axum::body::HttpBody::size_hint(r.body()).exact())
        .unwrap_or(0);
    site2.bytes.fetch_add(len, Ordering::SeqCst);
    r
}

/// The most of a request body the portal reads (and records); a larger one is cut here.
const MAX_REQUEST_BODY: usize = 1 << 20;

/// Records the request, waits the site's latency, then applies its behaviour.
async fn behave_inner(State(site): State<Arc<Site>>, req: Request, next: Next) -> Response<Body> {
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    site.count.fetch_add(1, Ordering::SeqCst);
    // The body is read here, once, so it can be recorded; the route gets the same bytes.
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, MAX_REQUEST_BODY)
        .await
        .unwrap_or_default();
    let req = Request::from_parts(parts, Body::from(body.clone()));
    site.shared.record(RecordedRequest {
        at: now_ms(),
        site: site.spec.name.clone(),
        method: req.method().to_string(),
        path: path.clone(),
        headers: req
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    if !site.spec.latency.is_zero() {
        tokio::time::sleep(site.spec.latency).await;
    }
    if path.starts_with("/login") || path.starts_with("/redirect/") {
        return next.run(req).await;
    }
    if site.spec.login_wall && path.starts_with("/search/") && !has_session(&site, req.headers()) {
        return redirect_to(&format!("/login?next={}", encode_component(&path)));
    }
    let (behaviour, fault) = {
        let mut st = site.lock();
        let b = st.current(tokio::time::Instant::now());
        let fault = b == Behaviour::Normal
            && site.spec.fault_rate > 0.0
            && st.rng.random::<f64>() < site.spec.fault_rate;
        (b, fault)
    };
    if fault {
        return error_page(503);
    }
    match behaviour {
        Behaviour::Normal
        | Behaviour::FailNext(_)
        | Behaviour::FailNextWith(..)
        | Behaviour::Script(_)
        | Behaviour::After(..) => next.run(req).await,
        Behaviour::RateLimited { retry_after } => {
            let mut r = html(
                StatusCode::TOO_MANY_REQUESTS,
                page::simple_page("Too many requests", "<p>Slow down.</p>"),
            );
            if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(&v).ok()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
        Behaviour::Forbidden => html(
            StatusCode::FORBIDDEN,
            page::simple_page("Access denied", "<p>You do not have access.</p>"),
        ),
        Behaviour::Challenge(kind, status) => challenge(kind, status),
        Behaviour::ServerError(code) => error_page(code),
        Behaviour::Slow(d) => {
            tokio::time::sleep(d).await;
            next.run(req).await
        }
        Behaviour::Hang => {
            site.shutdown.cancelled().await;
            error_page(503)
        }
        Behaviour::Reset => {
            if let Some(ctx) = req.extensions().get::<Arc<ConnCtx>>() {
                ctx.reset();
            }
            // The connection task drops this future with the connection.
            site.shutdown.cancelled().await;
            error_page(503)
        }
        Behaviour::LoginRedirect => {
            redirect_to(&format!("/login?next={}", encode_component(&path)))
        }
        Behaviour::HugeBody(n) => huge_body(n),
        Behaviour::GzipBomb(n) => gzip_bomb(n),
        Behaviour::RedirectLoop => redirect_to("/redirect/1"),
        Behaviour::DripBody => {
            let body = plain_body(next.run(without_gzip(req)).await).await;
            let s = stream::unfold((body, 0usize), |(body, i)| async move {
                if i >= body.len() {
                    return None;
                }
                if i > 0 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                let chunk = body.slice(i..i + 1);
                Some((Ok::<_, std::io::Error>(chunk), (body, i + 1)))
            });
            let mut r = Response::new(Body::from_stream(s));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
        Behaviour::InvalidUtf8 => {
            let body = plain_body(next.run(without_gzip(req)).await).await;
            let mut bytes = body.to_vec();
            let at = bytes.len() / 2;
            bytes.splice(at..at, [0xff, 0xfe, 0xc3, 0x28, 0xa0, 0xa1]);
            let mut r = Response::new(Body::from(bytes));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
        Behaviour::Empty => html(StatusCode::OK, String::new()),
        Behaviour::Nested(depth) => html(StatusCode::OK, page::nested_page(depth)),
        Behaviour::Gone => html(
            StatusCode::NOT_FOUND,
            page::simple_page("Not found", "<p>This search no longer exists.</p>"),
        ),
    }
}

fn without_gzip(mut req: Request) -> Request {
    req.headers_mut().remove(header::ACCEPT_ENCODING);
    req
}

async fn plain_body(r: Response<Body>) -> Bytes {
    axum::body::to_bytes(r.into_body(), 64 * 1024 * 1024)
        .await
        .unwrap_or_default()
}

fn error_page(code: u16) -> Response<Body> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    html(
        status,
        page::simple_page(
            &format!(
                "{} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            ),
            "<p>Something went wrong on our side.</p>",
        ),
    )
}

fn challenge(kind: ChallengeKind, status: u16) -> Response<Body> {
    let (headers, body) = page::challenge(kind);
    let mut r = html(
        StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN),
        body,
    );
    for (n, v) in headers {
        r.headers_mut().insert(n, HeaderValue::from_static(v));
    }
    r
}

const CHUNK: usize = 64 * 1024;

fn huge_body(n: u64) -> Response<Body> {
    let filler: Bytes = "<p class=\"filler\">lorem ipsum dolor sit amet</p>\n"
        .repeat(CHUNK / 48 + 1)
        .into_bytes()
        .into();
    let s = stream::unfold(0u64, move |sent| {
        let filler = filler.clone();
        async move {
            if sent >= n {
                return None;
            }
            let len = usize::try_from((n - sent).min(CHUNK as u64)).unwrap_or(CHUNK);
            Some((
                Ok::<_, std::io::Error>(filler.slice(..len)),
                sent + len as u64,
            ))
        }
    });
    let mut r = Response::new(Body::from_stream(s));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&n.to_string()) {
        r.headers_mut().insert(header::CONTENT_LENGTH, v);
    }
    r
}

/// Raw deflate of `len` zero bytes ending in a full flush (byte-aligned, no references
/// outside itself), so copies can be concatenated into one valid deflate stream.
fn deflate_zeros(len: usize) -> Vec<u8> {
    let mut c = Compress::new(Compression::default(), false);
    let mut out = Vec::with_capacity(len / 256 + 1024);
    let zeros = vec![0u8; len];
    let _ = c.compress_vec(&zeros, &mut out, FlushCompress::Full);
    out
}

/// A gzip body of `n` zero bytes (~1000:1). One 1 MiB block is compressed once and repeated,
/// and the CRC is computed only for what is actually sent, so a bomb of any size costs the
/// portal only what the client reads, and never blocks the runtime for long.
fn gzip_bomb(n: u64) -> Response<Body> {
    const BLOCK: u64 = 1024 * 1024;
    let block = Bytes::from(deflate_zeros(BLOCK as usize));
    let header = Bytes::from_static(&[0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff]);
    let zeros = Bytes::from(vec![0u8; BLOCK as usize]);
    // State: bytes of zeros emitted so far, the running CRC; None = done.
    let s = stream::unfold(Some((0u64, Crc::new(), false)), move |st| {
        let (block, header, zeros) = (block.clone(), header.clone(), zeros.clone());
        async move {
            let (fed, mut crc, started) = st?;
            if !started {
                return Some((Ok::<_, std::io::Error>(header), Some((fed, crc, true))));
            }
            if fed >= n {
                // Final empty fixed-Huffman block, then CRC32 and ISIZE (little-endian).
                let mut tail = vec![0x03, 0x00];
                tail.extend_from_slice(&crc.sum().to_le_bytes());
                tail.extend_from_slice(&((n & 0xffff_ffff) as u32).to_le_bytes());
                return Some((Ok(Bytes::from(tail)), None));
            }
            let len = (n - fed).min(BLOCK);
            let data = if len == BLOCK {
                block
            } else {
                Bytes::from(deflate_zeros(len as usize))
            };
            crc.update(&zeros[..len as usize]);
            tokio::task::yield_now().await;
            Some((Ok(data), Some((fed + len, crc, true))))
        }
    });
    let mut r = Response::new(Body::from_stream(s));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    r
}

fn gzip(data: &[u8]) -> Bytes {
    let mut enc = GzEncoder::new(Vec::with_capacity(data.len() / 4), Compression::fast());
    if enc.write_all(data).is_err() {
        return Bytes::new();
    }
    enc.finish().map(Bytes::from).unwrap_or_default()
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| {
            e.trim()
                .split(';')
                .next()
                .is_some_and(|t| t.trim() == "gzip")
        })
}

async fn index(State(site): State<Arc<Site>>) -> Response<Body> {
    html(
        StatusCode::OK,
        page::simple_page(
            &site.spec.name,
            "<p><a href=\"/search/all\">Pisos en alquiler</a></p>",
        ),
    )
}

/// The request's cookie `name`, if any.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

fn has_session(site: &Site, headers: &HeaderMap) -> bool {
    cookie(headers, "session").is_some_and(|t| site.lock().sessions.contains(t))
}

/// Page 1 of a search, or page N with `?page=N`.
async fn search(
    State(site): State<Arc<Site>>,
    Path(search): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response<Body> {
    let page = match q.get("page").map(|p| p.parse::<usize>()) {
        None => 1,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => return not_found(),
    };
    search_response(&site, search, page, Pager::Query, &headers)
}

/// Page N of a search as `/search/{s}/pagina-N.htm` (Idealista's form).
async fn search_pagina(
    State(site): State<Arc<Site>>,
    Path((search, page)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response<Body> {
    let n = page
        .strip_prefix("pagina-")
        .and_then(|p| p.strip_suffix(".htm"))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n >= 1);
    match n {
        Some(n) => search_response(&site, search, n, Pager::Pagina, &headers),
        None => not_found(),
    }
}

fn not_found() -> Response<Body> {
    html(
        StatusCode::NOT_FOUND,
        page::simple_page("Not found", "<p>This search no longer exists.</p>"),
    )
}

/// How a page links to the next: in the form it was asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pager {
    /// `/search/{s}?page=N`.
    Query,
    /// `/search/{s}/pagina-N.htm`.
    Pagina,
}

impl Pager {
    fn href(self, search: &str, page: usize) -> String {
        match self {
            Self::Query => crate::Portal::page_path(search, page),
            Self::Pagina => format!("/search/{search}/pagina-{page}.htm"),
        }
    }
}

fn search_response(
    site: &Arc<Site>,
    search: String,
    page: usize,
    pager: Pager,
    headers: &HeaderMap,
) -> Response<Body> {
    let mut r = search_page(site, search, page, pager, headers);
    if site.spec.visitor_cookie && cookie(headers, "visitor").is_none() {
        let n = {
            let mut st = site.lock();
            st.visitors += 1;
            st.visitors
        };
        if let Ok(v) = HeaderValue::from_str(&format!(
            "visitor=v{n}; Max-Age=31536000; Path=/; SameSite=Lax"
        )) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

fn search_page(
    site: &Arc<Site>,
    search: String,
    page: usize,
    pager: Pager,
    headers: &HeaderMap,
) -> Response<Body> {
    let key = if page == 1 {
        search.clone()
    } else {
        format!("{search}\0{page}\0{}", pager == Pager::Pagina)
    };
    let (etag, last_modified, plain, gz) = {
        let mut st = site.lock();
        let (visible, more) = st.visible_on(&search, page, &site.spec);
        let next = more.then(|| pager.href(&search, page + 1));
        if visible.is_empty() && page > 1 {
            return not_found();
        }
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (l, _) in &visible {
            // Everything a card shows: a changed price is a changed page.
            let card = format!(
                "{}|{}|{}|{}|{}|{:?}",
                l.id, l.title, l.price, l.rooms, l.area, l.hidden
            );
            for b in card.bytes().chain(std::iter::once(b',')) {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
        for b in next.as_deref().unwrap_or_default().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        let etag = format!("\"{h:016x}\"");
        let last_modified = visible
            .iter()
            .map(|(_, t)| *t)
            .max()
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let cached = st.cache.get(&key).filter(|c| c.etag == etag);
        let (plain, gz) = if let Some(c) = cached {
            (c.plain.clone(), c.gzip.clone())
        } else {
            let refs: Vec<_> = visible.iter().map(|(l, _)| *l).collect();
            let extras = page::Extras {
                render_after: match site.spec.render {
                    crate::Render::Html => None,
                    crate::Render::Script(after) => Some(after),
                },
                poll: site.spec.poll,
                images: site.spec.images,
            };
            let text = page::result_page(
                &site.spec.name,
                &search,
                &refs,
                site.spec.page_bytes,
                extras,
                next.as_deref().map(|href| page::NextLink {
                    href,
                    rel: site.spec.rel_next,
                }),
            );
            let plain = Bytes::from(text);
            let gz = gzip(&plain);
            if st.cache.len() >= MAX_CACHED_PAGES {
                st.cache.clear();
            }
            st.cache.insert(
                key,
                CachedPage {
                    etag: etag.clone(),
                    plain: plain.clone(),
                    gzip: gz.clone(),
                },
            );
            (plain, gz)
        };
        (etag, last_modified, plain, gz)
    };
    let last_modified = httpdate::fmt_http_date(last_modified);
    let unchanged = if !site.spec.validators {
        false
    } else if let Some(inm) = headers.get(header::IF_NONE_MATCH) {
        // RFC 9110 §13.1.3: If-None-Match wins over If-Modified-Since when both are sent.
        inm.to_str().is_ok_and(|v| {
            v.split(',')
                .map(str::trim)
                .any(|t| t == "*" || t.trim_start_matches("W/") == etag)
        })
    } else if let Some(ims) = headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok())
    {
        httpdate::parse_http_date(&last_modified).is_ok_and(|lm| lm <= ims)
    } else {
        false
    };
    let mut builder = Response::builder();
    if site.spec.validators {
        builder = builder
            .header(header::ETAG, &etag)
            .header(header::LAST_MODIFIED, &last_modified);
    }
    builder = builder
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::VARY, "Accept-Encoding");
    let body = if unchanged {
        builder = builder.status(StatusCode::NOT_MODIFIED);
        Body::empty()
    } else {
        builder = builder
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/html; charset=utf-8");
        if accepts_gzip(headers) {
            builder = builder.header(header::CONTENT_ENCODING, "gzip");
            Body::from(gz)
        } else {
            Body::from(plain)
        }
    };
    builder.body(body).unwrap_or_else(|_| error_page(500))
}

/// ImmobilienScout24's app search (`POST /search/list?…`): the search named by the last part
/// of `geocodes` (`/de/berlin/berlin` → `berlin`), page `pagenumber`, as the app's result-list
/// JSON.
async fn app_search(
    State(site): State<Arc<Site>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response<Body> {
    let search = q
        .get("geocodes")
        .and_then(|g| g.rsplit('/').find(|p| !p.is_empty()))
        .unwrap_or("all")
        .to_owned();
    let page = q
        .get("pagenumber")
        .and_then(|p| p.parse::<usize>().ok())
        .filter(|p| *p >= 1)
        .unwrap_or(1);
    let body = {
        let st = site.lock();
        let (visible, _) = st.visible_on(&search, page, &site.spec);
        let total = st
            .listings
            .iter()
            .filter(|(l, _)| l.search.as_deref().is_none_or(|s| s == search))
            .count()
            .min(site.spec.per_page.max(1) * site.spec.pages.max(1));
        let refs: Vec<_> = visible.iter().map(|(l, _)| *l).collect();
        page::app_result_list(&refs, page, total, site.spec.per_page.max(1))
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json;charset=UTF-8")],
        body,
    )
        .into_response()
}

async fn detail(State(site): State<Arc<Site>>, Path(id): Path<String>) -> Response<Body> {
    let found = site
        .lock()
        .listings
        .iter()
        .find(|(l, _)| l.id == id)
        .map(|(l, _)| l.clone());
    match found {
        Some(l) => html(StatusCode::OK, page::detail_page(&site.spec.name, &l)),
        None => html(
            StatusCode::NOT_FOUND,
            page::simple_page("Not found", "<p>This listing is no longer available.</p>"),
        ),
    }
}

async fn login(Query(q): Query<HashMap<String, String>>) -> Response<Body> {
    html(
        StatusCode::OK,
        page::login_page(q.get("next").map_or("/", String::as_str)),
    )
}

/// The login form's target: any e-mail address opens a session (a `session` cookie, a month
/// long), then back to where the visitor was going.
async fn log_in(State(site): State<Arc<Site>>, body: Bytes) -> Response<Body> {
    let form: HashMap<String, String> = url_form(&body);
    if form.get("email").is_none_or(|e| e.trim().is_empty()) {
        return html(
            StatusCode::UNAUTHORIZED,
            page::login_page(form.get("next").map_or("/", String::as_str)),
        );
    }
    let token = {
        let mut st = site.lock();
        let token = format!("t{:016x}", st.rng.random::<u64>());
        st.sessions.insert(token.clone());
        token
    };
    let next = form
        .get("next")
        .filter(|n| n.starts_with('/') && !n.starts_with("//"))
        .map_or("/", String::as_str);
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::from_str(next) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!(
        "session={token}; Max-Age=2592000; Path=/; HttpOnly; SameSite=Lax"
    )) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `application/x-www-form-urlencoded` → pairs (hand-written: three fields from our own form).
fn url_form(body: &[u8]) -> HashMap<String, String> {
    let decode = |s: &str| -> String {
        let s = s.replace('+', " ");
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%'
                && i + 2 < bytes.len()
                && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
            {
                out.push(b);
                i += 3;
                continue;
            }
            out.push(bytes[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// An image of [`page::IMAGE_BYTES`] bytes (not a real picture: only its transfer matters).
async fn image() -> Response<Body> {
    let mut r = Response::new(Body::from(vec![0x5a_u8; page::IMAGE_BYTES]));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("image/jpeg"));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A webhook sink: the body is kept for [`crate::Portal::hooks`] (the oldest dropped past
/// [`crate::MAX_HOOKS`]), and answered 204.
async fn hook(
    State(site): State<Arc<Site>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response<Body> {
    let mut st = site.lock();
    if st.hooks.len() >= crate::MAX_HOOKS {
        st.hooks.remove(0);
    }
    st.hooks.push((name, body));
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    r
}

async fn redirect(Path(n): Path<u64>) -> Response<Body> {
    redirect_to(&format!("/redirect/{}", n.saturating_add(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// One request over a fresh connection: the status line and the body.
    async fn request(base: &str, method: &str, path: &str, body: &str) -> (String, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = base.trim_start_matches("http://");
        let mut sock = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(head.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        sock.read_to_end(&mut out).await.unwrap();
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_owned(), body.to_owned())
    }

    fn ids(page: &str) -> Vec<String> {
        page.split("data-id=\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap().to_owned())
            .collect()
    }

    /// A portal of one site `name` with `listings` listings, 5 a page, on `pages` pages.
    async fn paged(name: &str, listings: usize, pages: usize) -> (crate::Portal, String) {
        let portal = crate::Portal::start(vec![crate::SiteSpec {
            listings,
            per_page: 5,
            pages,
            page_bytes: 2_000,
            ..crate::SiteSpec::new(name)
        }])
        .await
        .unwrap();
        let base = portal.base_url(name);
        (portal, base)
    }

    #[tokio::test]
    async fn results_spread_over_pages_that_link_to_the_next_in_their_own_form() {
        let (portal, base) = paged("paged", 12, 3).await;
        let (status, one) = request(&base, "GET", "/search/s", "").await;
        assert!(status.contains("200"), "{status}");
        let want: Vec<String> = portal
            .listings("paged", "s")
            .into_iter()
            .map(|l| l.id)
            .collect();
        assert_eq!(ids(&one), want);
        assert_eq!(want.len(), 5);
        assert!(one.contains("<a class=\"next-page\" rel=\"next\" href=\"/search/s?page=2\">"));
        let (_, two) = request(&base, "GET", "/search/s?page=2", "").await;
        let want2: Vec<String> = portal
            .listings_on_page("paged", "s", 2)
            .into_iter()
            .map(|l| l.id)
            .collect();
        assert_eq!(ids(&two), want2);
        assert!(two.contains("href=\"/search/s?page=3\""));
        let (_, three) = request(&base, "GET", "/search/s/pagina-3.htm", "").await;
        assert_eq!(ids(&three).len(), 2, "12 listings: 5, 5, 2");
        assert!(!three.contains("next-page"), "the last page links nowhere");
        let (_, two_pagina) = request(&base, "GET", "/search/s/pagina-2.htm", "").await;
        assert!(two_pagina.contains("href=\"/search/s/pagina-3.htm\""));
        let (status, _) = request(&base, "GET", "/search/s?page=4", "").await;
        assert!(status.contains("404"), "past the last page: {status}");
        // Taking page 1's first listing off moves page 2's first up to page 1.
        assert!(portal.remove_listing("paged", &want[0]));
        assert_eq!(portal.listings("paged", "s").last().unwrap().id, want2[0]);
    }

    #[tokio::test]
    async fn the_app_search_answers_the_app_json_and_its_request_is_recorded() {
        let (portal, base) = paged("app", 7, 2).await;
        let (status, body) = request(
            &base,
            "POST",
            "/search/list?searchType=region&geocodes=%2Fde%2Fberlin%2Fberlin&pagenumber=2",
            "{\"userData\":{}}",
        )
        .await;
        assert!(status.contains("200"), "{status}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["pageNumber"], 2);
        assert_eq!(v["numberOfPages"], 2);
        let items = v["resultListItems"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[0]["item"]["id"],
            portal.listings_on_page("app", "berlin", 2)[0].id.as_str()
        );
        let seen = portal.requests();
        assert_eq!(seen.last().unwrap().method, "POST");
        assert_eq!(seen.last().unwrap().body, "{\"userData\":{}}");
    }

    #[tokio::test]
    async fn the_gzip_bomb_is_a_valid_gzip_of_n_zeros() {
        let n = 2 * 1024 * 1024 + 12_345;
        let body = axum::body::to_bytes(gzip_bomb(n).into_body(), usize::MAX)
            .await
            .unwrap();
        assert!(body.len() < 20_000, "compressed to {} bytes", body.len());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out.len() as u64, n);
        assert!(out.iter().all(|b| *b == 0));
    }
}
