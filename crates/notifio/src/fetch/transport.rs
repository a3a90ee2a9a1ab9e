//! The HTTP transport under the fetcher: hyper-util's pooled client over rustls (ring, the
//! webpki roots, HTTP/1.1 and HTTP/2 by ALPN), and the body's content codings decoded as it
//! is read ([`Body`]).
//!
//! Decoding is ours rather than tower-http's, which took only one coding and only zlib-wrapped
//! deflate: servers send raw deflate (no zlib header, which browsers accept), stack codings
//! (`Content-Encoding: gzip, gzip`), and any body that does not decode, whatever its coding,
//! is the same malformed answer (never retried). The decoders are async-compression's.
//!
//! Why not reqwest (notifio no longer uses it; every channel goes through here): a kept-alive
//! HTTP/1 connection
//! keeps the read buffer its largest response grew it to, up to hyper's default of ~400 KB,
//! and reqwest does not expose hyper's cap on it. Watching 100 sites means 100 idle
//! connections: in the `watch` benchmark their buffers were 3-4 MB of a ~30 MB peak RSS.
//! Capped at [`READ_BUF_MAX`] they cost that much at most, with no CPU cost measured (a
//! 300 KB page is read in a few more calls). Redirects, cookies, timeouts and the body cap
//! are the fetcher's own anyway (see `fetch/mod.rs`).
//!
//! Proxies are read from the environment as curl reads them (`HTTPS_PROXY`, `HTTP_PROXY`,
//! `ALL_PROXY`, `NO_PROXY`), as reqwest did: an https site is reached through a `CONNECT`
//! tunnel (TLS stays end to end), a plain-http one by sending the request to the proxy.

use async_compression::tokio::bufread::{BrotliDecoder, DeflateDecoder, GzipDecoder, ZlibDecoder};
use bytes::Bytes;
use futures_util::TryStreamExt as _;
use http::Uri;
use http::uri::Scheme;
use http_body_util::BodyExt as _;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The most a connection's read buffer grows to between reads. A response head (status line
/// and headers) must fit in a few times this: hyper checks the cap between reads, so a head
/// somewhat over 32 KiB still parses (four times what nginx passes on by default) and an
/// endless one is refused as malformed.
pub(crate) const READ_BUF_MAX: usize = 32 * 1024;

/// A response as it arrived; [`Body::of`] decodes its body.
pub(crate) type Response = http::Response<hyper::body::Incoming>;

/// What the fetcher asks for: the codings [`Body`] decodes.
pub(crate) const ACCEPT_ENCODING: &str = "gzip, deflate, br";

/// The error of sending a request (before any body): hyper-util's.
pub(crate) type SendError = hyper_util::client::legacy::Error;

/// The pooled client. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Transport {
    service: Client<Connector, Full<Bytes>>,
    proxies: Arc<Matcher>,
}

impl Transport {
    /// A client whose idle connections close after `idle`, trusting the webpki roots and
    /// `extra_roots` (DER certificates), through `proxy` (a URL) or, when `None`, the proxies
    /// the environment names.
    ///
    /// # Errors
    /// An extra root that is not a usable certificate, or rustls refusing its own default
    /// protocol versions (a build problem).
    pub(crate) fn new(
        idle: Duration,
        extra_roots: &[Vec<u8>],
        proxy: Option<&str>,
    ) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for der in extra_roots {
            roots
                .add(rustls::pki_types::CertificateDer::from(der.clone()))
                .map_err(|e| format!("a trusted certificate that cannot be used: {e}"))?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let proxies = Arc::new(match proxy {
            Some(url) => Matcher::builder().all(url.to_owned()).build(),
            None => Matcher::from_env(),
        });
        let connector = Connector {
            direct: https(tls.clone(), tcp.clone()),
            tcp,
            tls,
            proxies: Arc::clone(&proxies),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(idle)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http1_max_buf_size(READ_BUF_MAX)
            .build(connector);
        Ok(Self {
            service: client,
            proxies,
        })
    }

    /// Sends one request (no redirects followed).
    pub(crate) async fn send(
        &self,
        mut req: http::Request<Full<Bytes>>,
    ) -> Result<Response, SendError> {
        // A plain-http request through a proxy carries the proxy's credentials itself (an
        // https one gives them to the tunnel, see `Connector`).
        if req.uri().scheme() == Some(&Scheme::HTTP)
            && let Some(auth) = self
                .proxies
                .intercept(req.uri())
                .and_then(|p| p.basic_auth().cloned())
        {
            req.headers_mut()
                .insert(http::header::PROXY_AUTHORIZATION, auth);
        }
        // The client is always ready (its pool queues requests for a connection), so this
        // `poll_ready` returns at once; it is there because the `Service` contract asks for it.
        let mut service = self.service.clone();
        std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
        service.call(req).await
    }
}

/// TLS (HTTP/1.1 and HTTP/2 by ALPN) for https, plain TCP for http, over `inner`.
fn https<C>(tls: rustls::ClientConfig, inner: C) -> HttpsConnector<C> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(inner)
}

/// Connects to a site directly, or through the proxy the matcher names for it.
#[derive(Clone)]
pub(crate) struct Connector {
    direct: HttpsConnector<HttpConnector>,
    tcp: HttpConnector,
    tls: rustls::ClientConfig,
    proxies: Arc<Matcher>,
}

impl Service<Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let route = self.proxies.intercept(&dst);
        let mut this = self.clone();
        Box::pin(async move {
            let Some(proxy) = route else {
                let io = this.direct.call(dst).await?;
                return Ok(Conn { io, proxied: false });
            };
            if dst.scheme() == Some(&Scheme::HTTPS) {
                // A CONNECT tunnel through the proxy, TLS with the site inside it.
                let mut tunnel = Tunnel::new(proxy.uri().clone(), this.tcp);
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                let io = https(this.tls, tunnel).call(dst).await?;
                Ok(Conn { io, proxied: false })
            } else {
                // The request itself goes to the proxy, in absolute form.
                let io = this.tcp.call(proxy.uri().clone()).await?;
                Ok(Conn {
                    io: MaybeHttpsStream::Http(io),
                    proxied: true,
                })
            }
        })
    }
}

/// A connection, and whether its requests go to a proxy (so in absolute form).
pub(crate) struct Conn {
    io: MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>,
    proxied: bool,
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied)
    }
}

// The I/O traits, passed through to the stream.
impl hyper::rt::Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

/// One content coding of a response body (`Content-Encoding`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coding {
    Gzip,
    /// zlib-wrapped or raw: told apart by the first two bytes, as browsers do.
    Deflate,
    Brotli,
}

/// The codings a response lists, in the order they were applied (`identity` left out).
///
/// # Errors
/// A coding we cannot decode (`compress`, `zstd`, …), named.
fn codings(headers: &http::HeaderMap) -> Result<Vec<Coding>, String> {
    let mut out = Vec::new();
    for value in headers.get_all(http::header::CONTENT_ENCODING) {
        let value = String::from_utf8_lossy(value.as_bytes());
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            out.push(match name.to_ascii_lowercase().as_str() {
                "identity" => continue,
                "gzip" | "x-gzip" => Coding::Gzip,
                "deflate" => Coding::Deflate,
                "br" => Coding::Brotli,
                other => {
                    return Err(format!(
                        "a body in the `{other}` content coding, which notifio does not decode"
                    ));
                }
            });
        }
    }
    Ok(out)
}

/// A zlib stream starts with a CMF/FLG pair: deflate (method 8), a window of at most 32 KiB,
/// and a check making the pair a multiple of 31 (RFC 1950). Raw deflate does not, except by a
/// chance that browsers take too.
fn is_zlib(head: &[u8]) -> bool {
    match head {
        [cmf, flg, ..] => {
            cmf & 0x0f == 8 && cmf >> 4 <= 7 && ((u16::from(*cmf) << 8) | u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

type Reader = Pin<Box<dyn AsyncBufRead + Send>>;

/// A response body, decoded as it is read: frames as they come when it has no coding, else
/// through one decoder per coding, the last applied first.
pub(crate) enum Body {
    Plain(hyper::body::Incoming),
    Decoded(Reader),
}

/// Why a body could not be read: how it reads to the fetcher, and in words.
pub(crate) type BodyError = (Broken, String);

impl Body {
    /// The body of `resp` and the headers that still describe it. A response without a body
    /// (204, 304) or with an empty one is not decoded; a coding is otherwise removed from the
    /// headers with `content-length` (which counted the encoded bytes).
    ///
    /// # Errors
    /// A coding notifio does not decode, or a body that fails before its first decoder could
    /// look at it (the headers are then as they came).
    pub(crate) async fn of(resp: Response) -> (http::response::Parts, Result<Self, BodyError>) {
        let (mut parts, incoming) = resp.into_parts();
        let list = if matches!(parts.status.as_u16(), 204 | 304) {
            Vec::new()
        } else {
            match codings(&parts.headers) {
                Ok(list) => list,
                Err(e) => return (parts, Err((Broken::Malformed, e))),
            }
        };
        if list.is_empty() {
            return (parts, Ok(Self::Plain(incoming)));
        }
        let stream = incoming.into_data_stream().map_err(std::io::Error::other);
        let mut reader: Reader = Box::pin(tokio_util::io::StreamReader::new(stream));
        for coding in list.iter().rev() {
            let head = match reader.fill_buf().await {
                Ok(head) => head,
                Err(e) => return (parts, Err(reading(&e))),
            };
            if head.is_empty() {
                break; // nothing to decode (an empty body under a coding header)
            }
            reader = match coding {
                Coding::Gzip => {
                    let mut d = GzipDecoder::new(reader);
                    d.multiple_members(true);
                    Box::pin(BufReader::new(d))
                }
                Coding::Deflate if is_zlib(head) => {
                    Box::pin(BufReader::new(ZlibDecoder::new(reader)))
                }
                Coding::Deflate => Box::pin(BufReader::new(DeflateDecoder::new(reader))),
                Coding::Brotli => Box::pin(BufReader::new(BrotliDecoder::new(reader))),
            };
        }
        parts.headers.remove(http::header::CONTENT_ENCODING);
        parts.headers.remove(http::header::CONTENT_LENGTH);
        (parts, Ok(Self::Decoded(reader)))
    }

    /// Appends the next piece of the body to `buf`: at most `limit` bytes, 0 at the end.
    pub(crate) async fn read_into(
        &mut self,
        buf: &mut Vec<u8>,
        limit: usize,
    ) -> Result<usize, BodyError> {
        match self {
            Self::Plain(incoming) => loop {
                match incoming.frame().await {
                    None => return Ok(0),
                    Some(Err(e)) => return Err((broken(&e), describe(&e))),
                    Some(Ok(frame)) => {
                        let Ok(chunk) = frame.into_data() else {
                            continue; // trailers
                        };
                        let n = chunk.len().min(limit);
                        buf.extend_from_slice(&chunk[..n]);
                        if n > 0 || limit == 0 {
                            return Ok(n);
                        }
                    }
                }
            },
            Self::Decoded(reader) => {
                let want = limit.min(64 * 1024);
                // Grow only a full buffer: reserving `want` while some room is left would
                // double a buffer sized from the page's last length just before its end (in
                // the `watch` benchmark, 1.4 MB of the peak heap).
                if buf.len() == buf.capacity() {
                    buf.reserve(want);
                }
                let mut limited = reader.as_mut().take(want as u64);
                limited.read_buf(buf).await.map_err(|e| reading(&e))
            }
        }
    }
}

/// An error out of a decoded body: the connection's, when hyper's or rustls's error is down
/// its chain; otherwise the decoder's (the body is not what its coding says), malformed.
fn reading(e: &std::io::Error) -> BodyError {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        if cause.is::<hyper::Error>() || cause.is::<rustls::Error>() {
            return (broken(e), describe(e));
        }
        next = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => cause.source(),
        };
    }
    (
        Broken::Malformed,
        format!(
            "the body does not decode as its Content-Encoding says: {}",
            describe(e)
        ),
    )
}

/// How a failure of the transport reads to the fetcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Broken {
    /// The response arrived but is not HTTP (a control character in a header value, a broken status
    /// line, a head over [`READ_BUF_MAX`]) or its body does not decode: malformed, which
    /// request-level retry never retries
    /// (docs/policy.md#request-level-retry-and-why-the-probe-never-retries).
    Malformed,
    /// Connecting failed or the connection broke (refused, reset, closed mid-body): retried.
    Connection,
}

/// Classifies an error from sending a request: failing to connect (refused, TLS handshake,
/// certificate) is a connection failure; otherwise as [`broken`].
pub(crate) fn broken_send(e: &SendError) -> Broken {
    if e.is_connect() {
        Broken::Connection
    } else {
        broken(e)
    }
}

/// Classifies an error from sending or from reading a body, by what is down its chain:
/// hyper's own error says whether the response failed to parse, a TLS error is a broken
/// connection, and an `InvalidData` I/O error with neither inside comes from the decoder (a
/// corrupt gzip stream). (An I/O error's `source` skips the error it wraps, so the walk looks
/// inside it.)
pub(crate) fn broken(e: &(dyn std::error::Error + 'static)) -> Broken {
    let mut invalid_data = false;
    let mut next = Some(e);
    while let Some(cause) = next {
        if let Some(h) = cause.downcast_ref::<hyper::Error>() {
            return if h.is_parse() {
                Broken::Malformed
            } else {
                Broken::Connection
            };
        }
        if cause.is::<rustls::Error>() {
            return Broken::Connection;
        }
        next = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => {
                invalid_data |= io.kind() == std::io::ErrorKind::InvalidData;
                match io.get_ref() {
                    Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                    None => None,
                }
            }
            None => cause.source(),
        };
    }
    if invalid_data {
        Broken::Malformed
    } else {
        Broken::Connection
    }
}

/// An error and its causes as one line, each cause once.
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        src = cause.source();
    }
    s
}
