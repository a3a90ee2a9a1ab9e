//! The HTTP transport under the fetcher: hyper-util's pooled client over rustls (ring, the
//! webpki roots, HTTP/1.1 and HTTP/2 by ALPN) with tower-http's gzip/brotli/deflate decoding.
//!
//! Why not reqwest, which the webhook notifier still uses: a kept-alive HTTP/1 connection
//! keeps the read buffer its largest response grew it to, up to hyper's default of ~400 KB,
//! and reqwest does not expose hyper's cap on it. Watching 100 sites means 100 idle
//! connections: in the `watch` benchmark their buffers were ~3 MB of a ~30 MB peak RSS.
//! Capped at [`READ_BUF_MAX`] they cost that much at most, with no CPU cost measured (a
//! 300 KB page is read in a few more calls). Redirects, cookies, timeouts and the body cap
//! are the fetcher's own anyway (see `fetch/mod.rs`).
//!
//! Not carried over from reqwest: proxies from `HTTP_PROXY`/`HTTPS_PROXY` (see the README).

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::sync::Arc;
use std::time::Duration;
use tower_http::decompression::{Decompression, DecompressionBody};
use tower_service::Service;

/// The most a connection's read buffer grows to between reads. A response head (status line
/// and headers) must fit in a few times this: hyper checks the cap between reads, so a head
/// somewhat over 32 KiB still parses (four times what nginx passes on by default) and an
/// endless one is refused as malformed.
pub(crate) const READ_BUF_MAX: usize = 32 * 1024;

/// A response whose body is decoded as it is read.
pub(crate) type Response = http::Response<DecompressionBody<hyper::body::Incoming>>;

/// The error of sending a request (before any body): hyper-util's.
pub(crate) type SendError = hyper_util::client::legacy::Error;

/// The pooled client. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Transport {
    service: Decompression<Client<HttpsConnector<HttpConnector>, Full<Bytes>>>,
}

impl Transport {
    /// A client whose idle connections close after `idle`, trusting the webpki roots and
    /// `extra_roots` (DER certificates).
    ///
    /// # Errors
    /// An extra root that is not a usable certificate, or rustls refusing its own default
    /// protocol versions (a build problem).
    pub(crate) fn new(idle: Duration, extra_roots: &[Vec<u8>]) -> Result<Self, String> {
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
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(idle)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http1_max_buf_size(READ_BUF_MAX)
            .build(https);
        Ok(Self {
            service: Decompression::new(client),
        })
    }

    /// Sends one request (no redirects followed). The response's body is decoded as it is
    /// read; a decoded response has no `content-encoding` or `content-length` any more.
    pub(crate) async fn send(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> Result<Response, SendError> {
        // The client is always ready (its pool queues), so `call` needs no `poll_ready` wait.
        let mut service = self.service.clone();
        std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
        service.call(req).await
    }
}

/// How a failure of the transport reads to the fetcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Broken {
    /// The response arrived but is not HTTP (a control character in a header value, a broken
    /// status line, a head over [`READ_BUF_MAX`]) or its body does not decode: malformed,
    /// which the ADR does not retry.
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
