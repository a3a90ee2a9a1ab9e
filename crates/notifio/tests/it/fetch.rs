//! The fetcher against the fake portal over real loopback HTTP: every rule of request-level retry
//! (docs/policy.md#request-level-retry-and-why-the-probe-never-retries), the hostile-response
//! limits, cookies and conditional requests.
//!
//! Real time is the subject here (real sockets, the portal's own request timestamps), so these
//! tests do not pause the clock; the retry loop's exact virtual-time schedule is unit-tested in
//! `src/fetch/retry.rs`. Timing bounds are the retry policy's ±25% below and generous above (a
//! loaded 2-core machine can only make things later).

use crate::util::{RawServer, raw_response};
use bytes::Bytes;
use fake_portal::{Behaviour, ChallengeKind, Portal, RecordedRequest, SiteSpec};
use notifio::fetch::cookies::{self, CookieJar};
use notifio::fetch::{FetchConfig, FetchRequest, Fetched, Fetcher, Spare};
use notifio_policy::{
    Markers, Outcome, RequestClass, RetryBudget, RetryPolicy, SiteKey, TransportFailure, classify,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

const MIB: usize = 1024 * 1024;

async fn portal() -> Portal {
    let site = |name: &str| SiteSpec {
        page_bytes: 20_000,
        ..SiteSpec::new(name)
    };
    Portal::start(vec![site("a"), site("b")]).await.unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy(attempts: u32, initial: u64, timeout: u64, deadline: u64, header: bool) -> RetryPolicy {
    RetryPolicy::new(
        attempts,
        ms(initial),
        3.0,
        0.25,
        ms(timeout),
        ms(deadline),
        header,
    )
    .unwrap()
}

fn fetcher_with(tweak: impl FnOnce(&mut FetchConfig)) -> Fetcher {
    let mut cfg = FetchConfig {
        rng_seed: Some(7),
        ..FetchConfig::default()
    };
    tweak(&mut cfg);
    Fetcher::new(cfg).unwrap()
}

fn fetcher() -> Fetcher {
    fetcher_with(|_| {})
}

fn key(p: &Portal, site: &str) -> SiteKey {
    SiteKey::from_url(&p.base_url(site)).unwrap()
}

fn search(p: &Portal, site: &str, class: RequestClass) -> FetchRequest {
    FetchRequest {
        url: p.search_url(site, "madrid"),
        site: key(p, site),
        class,
        conditional: false,
        post_json: None,
        via: notifio::fetch::FetchMode::Http,
        ready: None,
        markers: None,
        outgoing: None,
        spare: None,
    }
}

/// An unconditional search GET of `url` (a server other than the portal).
fn plain_search(url: &str) -> FetchRequest {
    FetchRequest {
        url: url.to_owned(),
        site: SiteKey::from_url(url).unwrap(),
        class: RequestClass::Search,
        conditional: false,
        post_json: None,
        via: notifio::fetch::FetchMode::Http,
        ready: None,
        markers: None,
        outgoing: None,
        spare: None,
    }
}

async fn get(f: &Fetcher, p: &Portal, site: &str) -> Fetched {
    f.fetch(
        &search(p, site, RequestClass::Search),
        &CancellationToken::new(),
    )
    .await
}

fn seen(p: &Portal, site: &str) -> Vec<RecordedRequest> {
    p.requests()
        .into_iter()
        .filter(|r| r.site == site)
        .collect()
}

fn gaps(reqs: &[RecordedRequest]) -> Vec<u64> {
    reqs.windows(2).map(|w| w[1].at - w[0].at).collect()
}

fn outcome(f: &Fetched) -> Outcome {
    classify(&f.facts(false).unwrap(), &Markers::generic())
}

// ---- the retry rules (docs/policy.md#request-level-retry-and-why-the-probe-never-retries) ----

#[tokio::test]
async fn a_5xx_then_200_is_two_attempts_about_100ms_apart() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::FailNext(1));
    let f = fetcher();
    let got = get(&f, &p, "a").await;
    assert_eq!(got.status(), Some(200));
    assert_eq!(got.attempts, 2);
    assert_eq!(outcome(&got), Outcome::Ok);
    let reqs = seen(&p, "a");
    assert_eq!(reqs.len(), 2);
    let g = gaps(&reqs)[0];
    assert!((74..=200).contains(&g), "first sleep {g} ms, want 100 ±25%");
    assert_eq!(reqs[0].header("x-retry-count"), None);
    assert_eq!(reqs[1].header("x-retry-count"), Some("1"));
}

#[tokio::test]
async fn three_5xx_are_three_attempts_two_sleeps_then_a_final_failure() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::ServerError(503));
    let f = fetcher();
    let got = get(&f, &p, "a").await;
    assert_eq!((got.status(), got.attempts), (Some(503), 3));
    assert_eq!(outcome(&got), Outcome::Error);
    assert_eq!(got.error(), Some("HTTP 503 Service Unavailable"));
    let reqs = seen(&p, "a");
    assert_eq!(reqs.len(), 3, "three attempts, so exactly two sleeps");
    let g = gaps(&reqs);
    println!("sleeps between attempts: {g:?} ms (nominal 100, 300)");
    assert!((74..=200).contains(&g[0]), "{g:?}");
    assert!((224..=450).contains(&g[1]), "{g:?}");
    let counts: Vec<Option<&str>> = reqs.iter().map(|r| r.header("x-retry-count")).collect();
    assert_eq!(counts, vec![None, Some("1"), Some("2")]);
    let m = f.metrics().snapshot();
    assert_eq!(
        (m.requests, m.retried, m.attempts, m.final_failures),
        (1, 1, 2, 1)
    );
}

/// A check's `spare` (what its site's request budget leaves it beyond its pages) bounds its
/// retries and redirects, and `requests` counts every one sent: what the budget is charged.
#[tokio::test]
async fn retries_and_redirects_spend_the_checks_spare_and_are_counted() {
    let p = portal().await;
    let f = fetcher();
    let cancel = CancellationToken::new();
    p.set_behaviour("a", Behaviour::ServerError(503));
    let no_room = FetchRequest {
        spare: Some(Spare::new(0)),
        ..search(&p, "a", RequestClass::Search)
    };
    let got = f.fetch(&no_room, &cancel).await;
    assert_eq!((got.attempts, got.requests, seen(&p, "a").len()), (1, 1, 1));
    assert!(
        got.error()
            .is_some_and(|e| e.contains("request budget has no room")),
        "{:?}",
        got.error()
    );
    let one_retry = FetchRequest {
        spare: Some(Spare::new(1)),
        ..search(&p, "a", RequestClass::Search)
    };
    let got = f.fetch(&one_retry, &cancel).await;
    assert_eq!((got.attempts, got.requests, seen(&p, "a").len()), (2, 2, 3));
    // Without a budget the retry policy alone decides: three attempts, three requests.
    let got = get(&f, &p, "a").await;
    assert_eq!((got.attempts, got.requests, seen(&p, "a").len()), (3, 3, 6));

    p.set_behaviour("b", Behaviour::RedirectLoop);
    let before = p.requests().len();
    let two_hops = FetchRequest {
        spare: Some(Spare::new(2)),
        ..search(&p, "b", RequestClass::Search)
    };
    let got = f.fetch(&two_hops, &cancel).await;
    // Held back by Notifio's own budget: deferred, no failure of the site's.
    assert!(got.is_deferred(), "{got:?}");
    assert_eq!(got.failure(), None);
    assert!(
        got.error()
            .is_some_and(|e| e.contains("request budget has no room")),
        "{:?}",
        got.error()
    );
    assert_eq!(
        got.requests, 3,
        "the page and the two redirects the spare allows"
    );
    assert_eq!(p.requests().len() - before, 3, "no request past the spare");
}

#[tokio::test]
async fn four_xx_are_never_retried() {
    let p = portal().await;
    let f = fetcher();
    for (b, status, want) in [
        (Behaviour::Gone, 404, Outcome::SearchGone),
        (Behaviour::Forbidden, 403, Outcome::Denied),
        (
            Behaviour::RateLimited {
                retry_after: Some("120".into()),
            },
            429,
            Outcome::RateLimited,
        ),
    ] {
        let before = p.request_count("a");
        p.set_behaviour("a", b);
        let got = get(&f, &p, "a").await;
        assert_eq!((got.status(), got.attempts), (Some(status), 1));
        assert_eq!(p.request_count("a") - before, 1, "{status}: one request");
        assert_eq!(outcome(&got), want);
    }
    // The 429's Retry-After came through parsed.
    p.set_behaviour(
        "a",
        Behaviour::RateLimited {
            retry_after: Some("120".into()),
        },
    );
    assert_eq!(
        get(&f, &p, "a").await.retry_after(),
        Some(Duration::from_secs(120))
    );
    assert_eq!(f.metrics().snapshot().retried, 0);
}

#[tokio::test]
async fn a_timeout_is_retried() {
    let p = portal().await;
    // The first request hangs; from 150ms on the site answers.
    p.set_behaviour(
        "a",
        Behaviour::Script(vec![
            (Duration::ZERO, Behaviour::Hang),
            (ms(150), Behaviour::Normal),
        ]),
    );
    let f = fetcher_with(|c| c.retry.search = policy(3, 100, 100, 5000, true));
    let got = get(&f, &p, "a").await;
    assert_eq!((got.status(), got.attempts), (Some(200), 2), "{got:?}");
    assert!(got.latency >= ms(175), "timeout 100 + sleep ≥ 75");
}

#[tokio::test]
async fn connection_refused_and_reset_are_retried() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::Reset);
    let f = fetcher_with(|c| c.retry.search = policy(3, 10, 1000, 5000, true));
    let got = get(&f, &p, "a").await;
    assert_eq!(got.failure(), Some(TransportFailure::Connect), "{got:?}");
    assert_eq!(got.attempts, 3);
    assert_eq!(outcome(&got), Outcome::Error);

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{closed}/search/x");
    let req = plain_search(&url);
    let got = f.fetch(&req, &CancellationToken::new()).await;
    assert_eq!(
        (got.failure(), got.attempts),
        (Some(TransportFailure::Connect), 3)
    );
    let err = got.error().unwrap_or_default().to_owned();
    assert!(!err.contains(&url), "errors do not carry the URL: {err}");
}

/// A raw loopback server answering `response`, and a search fetched from it once with a
/// three-attempt policy (so a retry would show in the attempts and connections).
async fn fetch_raw(response: Vec<u8>) -> (Fetched, RawServer, Fetcher, FetchRequest) {
    let server = RawServer::start(response).await;
    let req = plain_search(&format!("{}/search/x", server.url));
    let f = fetcher_with(|c| c.retry.search = policy(3, 10, 1000, 5000, true));
    let got = f.fetch(&req, &CancellationToken::new()).await;
    (got, server, f, req)
}

#[tokio::test]
async fn a_response_that_does_not_parse_is_malformed_and_not_retried() {
    // A control character in a header value: the response arrives but is not HTTP, so it is
    // not retried like a broken connection.
    let (got, server, ..) = fetch_raw(raw_response("200 OK", &[b"X-Note: a\x01b"], "ok")).await;
    assert_eq!(got.failure(), Some(TransportFailure::Malformed), "{got:?}");
    assert_eq!(got.attempts, 1);
    assert_eq!(server.connections(), 1);
    assert_eq!(outcome(&got), Outcome::Error);
}

#[tokio::test]
async fn a_body_that_does_not_decode_is_malformed_and_not_retried() {
    let not_gzip = raw_response("200 OK", &[b"Content-Encoding: gzip"], "not a gzip stream");
    let (got, server, ..) = fetch_raw(not_gzip).await;
    assert_eq!(got.failure(), Some(TransportFailure::Malformed), "{got:?}");
    assert_eq!(got.attempts, 1);
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_large_response_head_is_read_and_an_endless_one_is_malformed() {
    // The transport caps a connection's read buffer at 32 KiB (fetch/transport.rs); hyper
    // checks that cap between reads, so a head somewhat over it still parses and a head
    // several times larger is refused instead of growing the buffer without bound.
    let header = |n: usize| format!("X-Padding: {}", "a".repeat(n)).into_bytes();
    let (got, server, f, req) =
        fetch_raw(raw_response("200 OK", &[&header(20 << 10)], "fine")).await;
    assert_eq!(got.status(), Some(200), "{:?}", got.failure());
    assert_eq!(got.body(), b"fine");

    server.answer(raw_response("200 OK", &[&header(256 << 10)], "never read"));
    let got = f.fetch(&req, &CancellationToken::new()).await;
    assert_eq!(
        got.failure(),
        Some(TransportFailure::Malformed),
        "{:?}",
        got.status()
    );
    assert_eq!(got.attempts, 1);
}

/// A real TLS site on loopback: rustls with the self-signed certificate for 127.0.0.1 in
/// tests/fixtures/tls (in no trust store), serving a small page over whichever HTTP version
/// ALPN settles on (hyper-util's server), counting connections and recording each request's
/// HTTP version.
struct TlsSite {
    url: String,
    connections: Arc<AtomicUsize>,
    versions: Arc<std::sync::Mutex<Vec<http::Version>>>,
}

const TLS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls/");

fn test_certificate() -> rustls::pki_types::CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_file(format!("{TLS_DIR}cert.pem")).unwrap()
}

impl TlsSite {
    async fn start(alpn: &[&[u8]]) -> Self {
        use rustls::pki_types::PrivateKeyDer;
        use rustls::pki_types::pem::PemObject;
        let key = PrivateKeyDer::from_pem_file(format!("{TLS_DIR}key.pem")).unwrap();
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![test_certificate()], key)
        .unwrap();
        tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let site = Self {
            url,
            connections: Arc::default(),
            versions: Arc::default(),
        };
        let (connections, versions) = (site.connections.clone(), site.versions.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, versions) = (acceptor.clone(), versions.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let page = hyper::service::service_fn(move |req: http::Request<_>| {
                        versions.lock().unwrap().push(req.version());
                        let body = http_body_util::Full::new(Bytes::from_static(b"<p>hello</p>"));
                        async move { Ok::<_, std::convert::Infallible>(http::Response::new(body)) }
                    });
                    let server = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let _ = server
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), page)
                        .await;
                });
            }
        });
        site
    }

    fn versions(&self) -> Vec<http::Version> {
        self.versions.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn an_https_site_with_an_untrusted_certificate_is_refused() {
    // The fetcher does the handshake, refuses the certificate (a connection failure, as a
    // refused connection is) and never sends the request.
    let site = TlsSite::start(&[b"h2", b"http/1.1"]).await;
    let req = plain_search(&format!("{}/search/x", site.url));
    let got = fetcher().fetch(&req, &CancellationToken::new()).await;
    assert_eq!(got.failure(), Some(TransportFailure::Connect), "{got:?}");
    let error = got.error().unwrap_or_default().to_owned();
    assert!(error.contains("certificate"), "{error}");
    assert!(
        site.connections.load(Ordering::SeqCst) >= 1,
        "a TLS handshake was attempted"
    );
    assert!(site.versions().is_empty(), "no request went out");
}

#[tokio::test]
async fn a_trusted_https_site_is_read_over_http2_or_http1_as_its_alpn_offers() {
    let trusting = || fetcher_with(|c| c.extra_roots = vec![test_certificate().to_vec()]);
    for (alpn, version) in [
        (&[&b"h2"[..], b"http/1.1"][..], http::Version::HTTP_2),
        (&[&b"http/1.1"[..]][..], http::Version::HTTP_11),
    ] {
        let site = TlsSite::start(alpn).await;
        let req = plain_search(&format!("{}/search/x", site.url));
        let f = trusting();
        for _ in 0..2 {
            let got = f.fetch(&req, &CancellationToken::new()).await;
            assert_eq!(got.status(), Some(200), "{got:?}");
            assert_eq!(got.body(), b"<p>hello</p>");
        }
        assert_eq!(site.versions(), vec![version; 2]);
        assert_eq!(
            site.connections.load(Ordering::SeqCst),
            1,
            "the second request reused the connection"
        );
    }
}

#[tokio::test]
async fn a_proxy_carries_plain_http_and_tunnels_https() {
    let (proxy, lines) = crate::util::start_proxy().await;
    let via_proxy = fetcher_with(|c| {
        c.proxy = Some(proxy.clone());
        c.extra_roots = vec![test_certificate().to_vec()];
    });
    // Plain http: the request goes to the proxy in absolute form.
    let p = portal().await;
    let got = get(&via_proxy, &p, "a").await;
    assert_eq!(got.status(), Some(200), "{got:?}");
    assert_eq!(got.text().matches("<article class=\"listing\"").count(), 30);
    let page = format!("GET {}", search(&p, "a", RequestClass::Search).url);
    assert_eq!(
        lines.lock().unwrap().clone(),
        vec![format!("{page} HTTP/1.1")]
    );
    // https: a CONNECT tunnel, with TLS (and HTTP/2) to the site inside it.
    let site = TlsSite::start(&[b"h2", b"http/1.1"]).await;
    let req = plain_search(&format!("{}/search/x", site.url));
    let got = via_proxy.fetch(&req, &CancellationToken::new()).await;
    assert_eq!(got.status(), Some(200), "{got:?}");
    assert_eq!(got.body(), b"<p>hello</p>");
    assert_eq!(site.versions(), vec![http::Version::HTTP_2]);
    let authority = site.url.trim_start_matches("https://");
    assert_eq!(
        lines.lock().unwrap().last().cloned(),
        Some(format!("CONNECT {authority} HTTP/1.1"))
    );
}

#[tokio::test]
async fn a_redirect_into_a_closed_site_is_held_until_the_site_opens() {
    let p = portal().await;
    // `localhost` and `127.0.0.1` are different sites to us (the reliability suite does the
    // same): the raw server sends us on to the portal's site "b".
    let port = p.base_url("b").rsplit(':').next().unwrap().to_owned();
    let location = format!("http://localhost:{port}/search/madrid");
    let location_header = format!("Location: {location}");
    let server =
        RawServer::start(raw_response("302 Found", &[location_header.as_bytes()], "")).await;
    let req = plain_search(&format!("{}/search/x", server.url));
    let f = fetcher();
    let b = SiteKey::from_url(&location).unwrap();
    f.close_site(b.clone());
    let held = f.fetch(&req, &CancellationToken::new()).await;
    assert_eq!(held.held_at(), Some(&b), "{held:?}");
    assert_eq!((held.status(), held.attempts), (Some(302), 1));
    assert!(seen(&p, "b").is_empty(), "the closed site saw a request");
    // The request's own site is never held: closing it does not stop its redirects.
    f.open_site(&b);
    f.close_site(req.site.clone());
    let followed = f.fetch(&req, &CancellationToken::new()).await;
    assert_eq!(followed.held_at(), None);
    assert_eq!(followed.status(), Some(200), "{followed:?}");
    assert_eq!(seen(&p, "b").len(), 1);
}

#[tokio::test]
async fn the_retry_header_can_be_turned_off() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::ServerError(500));
    let f = fetcher_with(|c| c.retry.search = policy(3, 10, 1000, 5000, false));
    assert_eq!(get(&f, &p, "a").await.attempts, 3);
    assert!(
        seen(&p, "a")
            .iter()
            .all(|r| r.header("x-retry-count").is_none())
    );
}

#[tokio::test]
async fn a_probe_makes_exactly_one_attempt() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::ServerError(503));
    let f = fetcher();
    let got = f
        .fetch(
            &search(&p, "a", RequestClass::Probe),
            &CancellationToken::new(),
        )
        .await;
    assert_eq!((got.status(), got.attempts), (Some(503), 1));
    assert_eq!(p.request_count("a"), 1);
}

#[tokio::test]
async fn the_deadline_cuts_a_retry_sequence_short() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::ServerError(503));
    // After the first sleep (≥ 75ms) the second (≥ 225ms) would pass the 250ms deadline.
    let f = fetcher_with(|c| c.retry.search = policy(3, 100, 1000, 250, true));
    let got = get(&f, &p, "a").await;
    assert_eq!(got.attempts, 2);
    assert_eq!(p.request_count("a"), 2);
    assert!(got.latency < ms(250), "gave up at once: {:?}", got.latency);
}

#[tokio::test]
async fn cancelling_during_a_sleep_or_an_attempt_returns_at_once() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::ServerError(503));
    let f = fetcher_with(|c| c.retry.search = policy(3, 600, 5000, 20_000, true));
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(80)).await;
        c2.cancel();
    });
    let t = std::time::Instant::now();
    let got = f
        .fetch(&search(&p, "a", RequestClass::Search), &cancel)
        .await;
    let took = t.elapsed();
    assert!(got.is_cancelled());
    assert_eq!(got.attempts, 1);
    assert!(
        took < ms(300),
        "returned after {took:?}, the sleep was ~600ms"
    );
    // Nothing left behind: the planned retry never happens.
    tokio::time::sleep(ms(800)).await;
    assert_eq!(p.request_count("a"), 1);
    assert_eq!(
        f.metrics().snapshot().requests,
        0,
        "cancelled calls are not counted"
    );

    // Cancelling while an attempt hangs.
    p.set_behaviour("b", Behaviour::Hang);
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(50)).await;
        c2.cancel();
    });
    let t = std::time::Instant::now();
    let got = f
        .fetch(&search(&p, "b", RequestClass::Search), &cancel)
        .await;
    assert!(got.is_cancelled() && t.elapsed() < ms(300), "{got:?}");
}

#[tokio::test]
async fn a_spent_budget_skips_retries_for_that_site_only() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::ServerError(503));
    p.set_behaviour("b", Behaviour::ServerError(503));
    let f = fetcher_with(|c| {
        c.retry.search = policy(3, 5, 1000, 5000, true);
        c.budget = RetryBudget::new(10, 5, 1);
    });
    assert_eq!(
        get(&f, &p, "a").await.attempts,
        3,
        "two retries = 10 tokens"
    );
    assert_eq!(f.budget_tokens(&key(&p, "a")), 0);
    let got = get(&f, &p, "a").await;
    assert_eq!(
        got.attempts, 1,
        "budget spent: straight to the error ladder"
    );
    assert!(
        got.error()
            .unwrap_or_default()
            .to_owned()
            .contains("retry budget")
    );
    assert_eq!(
        get(&f, &p, "b").await.attempts,
        3,
        "site b has its own budget"
    );
    // Success refills: one first-try success returns one token.
    p.set_behaviour("a", Behaviour::Normal);
    assert_eq!(get(&f, &p, "a").await.status(), Some(200));
    assert_eq!(f.budget_tokens(&key(&p, "a")), 1);
}

// ---- hostile responses -----------------------------------------------------------------

#[tokio::test]
async fn a_huge_body_stops_at_the_cap() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::HugeBody(50 * MIB as u64));
    let f = fetcher_with(|c| c.body_cap = MIB);
    let got = get(&f, &p, "a").await;
    assert_eq!(got.failure(), Some(TransportFailure::BodyTooLarge));
    assert_eq!(got.body().len(), MIB);
    assert_eq!(got.attempts, 1, "our own limit is not retried");
    assert_eq!(outcome(&got), Outcome::Error);
}

#[tokio::test]
async fn a_gzip_bomb_stops_at_the_cap_after_decompression() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::GzipBomb(4 * 1024 * MIB as u64));
    let f = fetcher_with(|c| c.body_cap = 2 * MIB);
    let t = std::time::Instant::now();
    let got = get(&f, &p, "a").await;
    assert_eq!(
        got.failure(),
        Some(TransportFailure::BodyTooLarge),
        "{got:?}"
    );
    assert!(got.body().len() <= 2 * MIB);
    assert!(got.body().iter().all(|b| *b == 0));
    assert_eq!(outcome(&got), Outcome::Error);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "stopped early: {:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn a_redirect_loop_ends_after_five_redirects() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::RedirectLoop);
    let f = fetcher();
    let got = get(&f, &p, "a").await;
    assert_eq!(got.failure(), Some(TransportFailure::TooManyRedirects));
    assert_eq!(got.attempts, 1);
    assert_eq!(p.request_count("a"), 6, "the request and five redirects");
    assert!(
        got.final_url().ends_with("/redirect/5"),
        "{}",
        got.final_url()
    );
    assert_eq!(outcome(&got), Outcome::Error);
}

#[tokio::test]
async fn a_dripping_body_hits_the_deadline() {
    let p = portal().await;
    p.set_behaviour("a", Behaviour::DripBody);
    let f = fetcher_with(|c| c.retry.search = policy(3, 100, 800, 800, true));
    let got = get(&f, &p, "a").await;
    assert_eq!(got.failure(), Some(TransportFailure::Timeout));
    assert_eq!(got.attempts, 1, "no time left for a retry");
    assert!(
        got.latency < Duration::from_millis(1500),
        "{:?}",
        got.latency
    );
    assert_eq!(outcome(&got), Outcome::Error);
}

#[tokio::test]
async fn invalid_utf8_is_decoded_lossily_and_an_empty_body_is_a_page() {
    let p = portal().await;
    let f = fetcher();
    p.set_behaviour("a", Behaviour::InvalidUtf8);
    let got = get(&f, &p, "a").await;
    assert_eq!(got.status(), Some(200));
    assert!(std::str::from_utf8(got.body()).is_err());
    assert!(got.text().contains('\u{FFFD}') && got.text().contains("class=\"listing\""));
    assert_eq!(outcome(&got), Outcome::Ok);

    p.set_behaviour("a", Behaviour::Empty);
    let got = get(&f, &p, "a").await;
    assert_eq!(
        (got.status(), got.failure(), got.body().len()),
        (Some(200), None, 0)
    );
    assert_eq!(outcome(&got), Outcome::Ok);
}

#[tokio::test]
async fn retry_after_garbage_huge_and_http_dates() {
    let p = portal().await;
    let f = fetcher();
    let in_2m = httpdate::fmt_http_date(
        UNIX_EPOCH + Duration::from_millis(notifio::clock::now().as_millis() + 120_000),
    );
    for (raw, check) in [
        ("soon", None),
        ("-5", None),
        ("99999999999999999999999", Some(u64::MAX)),
        (in_2m.as_str(), Some(120)),
    ] {
        p.set_behaviour(
            "a",
            Behaviour::RateLimited {
                retry_after: Some(raw.to_owned()),
            },
        );
        let got = get(&f, &p, "a").await;
        assert_eq!(outcome(&got), Outcome::RateLimited);
        match check {
            None => assert_eq!(got.retry_after(), None, "{raw}"),
            Some(u64::MAX) => assert_eq!(got.retry_after(), Some(Duration::from_secs(u64::MAX))),
            Some(secs) => {
                let d = got.retry_after().unwrap().as_secs();
                assert!((secs - 2..=secs).contains(&d), "{raw} → {d}s");
            }
        }
    }
}

#[tokio::test]
async fn challenges_and_login_redirects_are_classified() {
    let p = portal().await;
    let f = fetcher();
    for (kind, status) in [
        (ChallengeKind::Cloudflare, 403),
        (ChallengeKind::DataDome, 403),
        (ChallengeKind::Geetest, 200),
        (ChallengeKind::Cloudflare, 503),
    ] {
        p.set_behaviour("a", Behaviour::Challenge(kind, status));
        let got = get(&f, &p, "a").await;
        assert_eq!(got.status(), Some(status));
        assert_eq!(outcome(&got), Outcome::Challenge, "{kind:?} {status}");
    }
    p.set_behaviour("a", Behaviour::LoginRedirect);
    let got = get(&f, &p, "a").await;
    assert_eq!(got.status(), Some(200));
    assert!(
        got.final_url().ends_with("/login?next=%2Fsearch%2Fmadrid"),
        "{}",
        got.final_url()
    );
    assert_eq!(outcome(&got), Outcome::SessionExpired);
}

// ---- cookies, conditional requests, headers ----------------------------------------------

#[tokio::test]
async fn cookies_go_only_to_their_site() {
    let p = portal().await;
    let f = fetcher();
    let jar = cookies::parse_cookies_txt(
        "# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsid\tSECRET123\n",
    )
    .unwrap();
    assert!(!format!("{jar:?}").contains("SECRET123"));
    f.set_cookies(key(&p, "a"), jar);
    get(&f, &p, "a").await;
    get(&f, &p, "b").await;
    assert_eq!(seen(&p, "a")[0].header("cookie"), Some("sid=SECRET123"));
    assert_eq!(
        seen(&p, "b")[0].header("cookie"),
        None,
        "same host, other port = other site"
    );
    // After a redirect the cookie is chosen again for the new URL (same site: still sent).
    p.set_behaviour("a", Behaviour::LoginRedirect);
    get(&f, &p, "a").await;
    let last = seen(&p, "a").pop().unwrap();
    assert!(last.path.starts_with("/login"));
    assert_eq!(last.header("cookie"), Some("sid=SECRET123"));

    let e = cookies::parse_cookies_txt("# ok\n\nbroken line\n").unwrap_err();
    assert!(e.to_string().starts_with("line 3:"), "{e}");
    assert_eq!(
        CookieJar::default().header_for(&url::Url::parse("http://x/").unwrap()),
        None
    );
}

#[tokio::test]
async fn an_unchanged_page_is_a_304_until_a_listing_appears() {
    let p = portal().await;
    let f = fetcher();
    let mut req = search(&p, "a", RequestClass::Search);
    req.conditional = true;
    let never = CancellationToken::new();
    let first = f.fetch(&req, &never).await;
    assert_eq!(first.status(), Some(200));
    assert!(first.header("etag").is_some());
    let second = f.fetch(&req, &never).await;
    assert!(second.not_modified(), "{:?}", second.status());
    assert_eq!(outcome(&second), Outcome::Unchanged);
    assert!(second.body().is_empty());
    let reqs = seen(&p, "a");
    assert_eq!(reqs[0].header("if-none-match"), None);
    assert_eq!(reqs[1].header("if-none-match"), first.header("etag"));
    assert!(reqs[1].header("if-modified-since").is_some());

    let new = p.add_listing("a", Some("madrid"));
    let third = f.fetch(&req, &never).await;
    assert_eq!(third.status(), Some(200));
    assert!(third.text().contains(&format!("data-id=\"{}\"", new.id)));
    // Unconditional requests never send validators.
    req.conditional = false;
    f.fetch(&req, &never).await;
    assert_eq!(seen(&p, "a").pop().unwrap().header("if-none-match"), None);
}

#[tokio::test]
async fn browser_headers_gzip_and_webhook_posts() {
    let p = Portal::start(vec![SiteSpec::new("a")]).await.unwrap();
    let f = fetcher();
    let got = get(&f, &p, "a").await;
    assert_eq!(got.status(), Some(200));
    assert!(
        got.body().len() >= 290_000,
        "decompressed page: {}",
        got.body().len()
    );
    assert_eq!(got.text().matches("<article class=\"listing\"").count(), 30);
    let r = &seen(&p, "a")[0];
    assert_eq!(
        r.header("user-agent"),
        Some(concat!(
            "notifio/",
            env!("CARGO_PKG_VERSION"),
            " (+https://github.com/notifio/notifio)"
        )),
        "says who asks, as honest watchers do"
    );
    assert!(r.header("accept-language").unwrap().starts_with("es-ES"));
    assert!(r.header("accept-encoding").unwrap().contains("gzip"));

    let hook = FetchRequest {
        url: format!("{}/hook", p.base_url("a")),
        site: key(&p, "a"),
        class: RequestClass::Notify,
        conditional: false,
        post_json: Some(Bytes::from_static(b"{\"new\":1}")),
        via: notifio::fetch::FetchMode::Http,
        ready: None,
        markers: None,
        outgoing: None,
        spare: None,
    };
    let got = f.fetch(&hook, &CancellationToken::new()).await;
    assert_eq!(got.attempts, 1, "a 4xx/405 is not retried");
    let r = seen(&p, "a").pop().unwrap();
    assert_eq!(r.method, "POST");
    assert_eq!(r.header("content-type"), Some("application/json"));

    let mut text = String::new();
    f.metrics().encode_prometheus(&mut text);
    assert!(
        text.contains("notifio_fetch_requests_total{class=\"search\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("notifio_fetch_requests_total{class=\"notify\"} 1"),
        "{text}"
    );
}

// ---------------------------------------------------------------- hostile pages (issue 23)

/// The three-attempt fetcher `fetch_raw` uses, for a server already started.
async fn fetch_from(server: &RawServer) -> Fetched {
    let f = fetcher_with(|c| c.retry.search = policy(3, 10, 1000, 5000, true));
    f.fetch(
        &plain_search(&format!("{}/search/x", server.url)),
        &CancellationToken::new(),
    )
    .await
}

/// A generic search's listings on a fetched page.
fn cards(got: &Fetched) -> Vec<notifio::listing::Listing> {
    use notifio::listing::{CardSpec, FieldSpec, ListingSpec};
    let spec = ListingSpec::Selector(Box::new(CardSpec {
        title: Some(FieldSpec::text("h2")),
        price: Some(FieldSpec::text(".price")),
        ..CardSpec::new("article.listing", Some("data-id"))
    }));
    let url = url::Url::parse(got.final_url()).unwrap();
    let site = SiteKey::from_parsed(&url).unwrap();
    let profile = notifio::extract::profile_for(&site, None, Some(&spec)).unwrap();
    match profile.extract(got.body(), &url) {
        notifio::extract::Extraction::Listings(v) => v,
        other => panic!("{other:?}"),
    }
}

const CARD_PAGE: &str = "<html><head>{META}<title>Wohnungen</title></head><body>\
    <article class=\"listing\" data-id=\"7\"><h2>Größe: 3 Zimmer, Küche</h2>\
    <span class=\"price\">850 €</span><a href=\"/l/7\">ansehen</a></article></body></html>";

#[tokio::test]
async fn pages_in_other_character_sets_read_as_browsers_read_them() {
    let latin = |meta: &str| {
        let page = CARD_PAGE.replace("{META}", meta);
        encoding_rs::WINDOWS_1252.encode(&page).0.into_owned()
    };
    let utf16le = {
        let mut v = vec![0xff, 0xfe];
        for u in CARD_PAGE.replace("{META}", "").encode_utf16() {
            v.extend_from_slice(&u.to_le_bytes());
        }
        v
    };
    let utf16be: Vec<u8> = CARD_PAGE
        .replace("{META}", "")
        .encode_utf16()
        .flat_map(u16::to_be_bytes)
        .collect();
    type Case<'a> = (&'a str, Vec<&'a [u8]>, Vec<u8>);
    let cases: Vec<Case<'_>> = vec![
        (
            "header",
            vec![b"Content-Type: text/html; charset=ISO-8859-1"],
            latin(""),
        ),
        (
            "meta charset",
            vec![],
            latin("<meta charset=\"windows-1252\">"),
        ),
        (
            "http-equiv",
            vec![],
            latin("<meta http-equiv=\"Content-Type\" content=\"text/html; charset=iso-8859-1\">"),
        ),
        ("UTF-16 BOM", vec![], utf16le),
        (
            "UTF-16 header",
            vec![b"Content-Type: text/html; charset=utf-16be"],
            utf16be,
        ),
    ];
    for (what, headers, body) in cases {
        let server =
            RawServer::start(crate::util::raw_response_bytes("200 OK", &headers, &body)).await;
        let got = fetch_from(&server).await;
        assert_eq!(outcome(&got), Outcome::Ok, "{what}: {:?}", got.failure());
        let l = cards(&got);
        assert_eq!(l.len(), 1, "{what}");
        assert_eq!(
            l[0].title.as_deref(),
            Some("Größe: 3 Zimmer, Küche"),
            "{what}"
        );
        assert_eq!(l[0].price, Some(850.0), "{what}");
        assert_eq!(
            l[0].currency.as_deref(),
            Some("EUR"),
            "{what}: the € survived"
        );
    }
}

#[tokio::test]
async fn aws_waf_and_cloudflare_bot_fight_pages_are_challenges_at_any_status() {
    let aws = include_str!("../fixtures/aws_waf_challenge.html");
    let cf = include_str!("../fixtures/cloudflare_bot_fight.html");
    // The older form: Bot Fight Mode's `bm/cv` script and its parameters, served as a 200.
    let cf_bm = include_str!("../fixtures/cloudflare_bot_fight_bm.html");
    let header: &[u8] = b"x-amzn-waf-action: challenge";
    for (status, headers, body) in [
        ("202 Accepted", vec![header], aws),
        ("202 Accepted", vec![], aws),
        ("200 OK", vec![], aws),
        ("401 Unauthorized", vec![], aws),
        (
            "405 Method Not Allowed",
            vec![&b"x-amzn-waf-action: captcha"[..]],
            "",
        ),
        ("200 OK", vec![], cf),
        ("403 Forbidden", vec![], cf),
        ("503 Service Unavailable", vec![], cf),
        ("200 OK", vec![], cf_bm),
        ("403 Forbidden", vec![], cf_bm),
    ] {
        let server = RawServer::start(raw_response(status, &headers, body)).await;
        let got = fetch_from(&server).await;
        assert_eq!(outcome(&got), Outcome::Challenge, "{status} {headers:?}");
        assert_eq!(got.attempts, 1, "{status}: a challenge is never retried");
    }
}

#[tokio::test]
async fn a_challenge_served_with_503_is_one_request_then_the_challenge_ladder() {
    let p = portal().await;
    let f = fetcher_with(|c| c.retry.search = policy(3, 10, 1000, 5000, true));
    p.set_behaviour("a", Behaviour::Challenge(ChallengeKind::Cloudflare, 503));
    let got = get(&f, &p, "a").await;
    assert_eq!(got.status(), Some(503));
    assert_eq!(got.attempts, 1);
    assert_eq!(seen(&p, "a").len(), 1, "one request, no retries");
    assert_eq!(outcome(&got), Outcome::Challenge);
    // A plain 503 still gets request-level retries.
    p.set_behaviour("a", Behaviour::ServerError(503));
    let got = get(&f, &p, "a").await;
    assert_eq!(got.attempts, 3);
    assert_eq!(outcome(&got), Outcome::Error);
}

#[tokio::test]
async fn a_503_asking_for_a_longer_wait_than_the_next_sleep_is_not_retried() {
    let long = raw_response("503 Service Unavailable", &[b"Retry-After: 1800"], "busy");
    let (got, server, ..) = fetch_raw(long).await;
    assert_eq!(got.attempts, 1);
    assert_eq!(server.connections(), 1);
    assert_eq!(got.retry_after(), Some(Duration::from_secs(1800)));
    assert_eq!(outcome(&got), Outcome::Error);
    // Retry-After: 0 asks for nothing the sleeps do not already give.
    let now = raw_response("503 Service Unavailable", &[b"Retry-After: 0"], "busy");
    let (got, server, ..) = fetch_raw(now).await;
    assert_eq!(got.attempts, 3);
    assert_eq!(server.connections(), 3);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[tokio::test]
async fn content_codings_raw_or_zlib_deflate_and_stacked_are_decoded() {
    let page = CARD_PAGE.replace("{META}", "");
    let plain = page.as_bytes();
    let cases: Vec<(&[u8], Vec<u8>)> = vec![
        (b"Content-Encoding: deflate", raw_deflate(plain)),
        (b"Content-Encoding: deflate", zlib(plain)),
        (b"Content-Encoding: gzip, gzip", gzip(&gzip(plain))),
        (
            b"Content-Encoding: deflate, gzip",
            gzip(&raw_deflate(plain)),
        ),
        (b"Content-Encoding: x-gzip", gzip(plain)),
        (b"Content-Encoding: identity", plain.to_vec()),
    ];
    for (coding, body) in cases {
        let server =
            RawServer::start(crate::util::raw_response_bytes("200 OK", &[coding], &body)).await;
        let got = fetch_from(&server).await;
        let what = String::from_utf8_lossy(coding);
        assert_eq!(got.failure(), None, "{what}: {:?}", got.error());
        assert_eq!(got.body(), plain, "{what}");
        if !what.contains("identity") {
            assert_eq!(got.header("content-encoding"), None, "{what}: decoded");
        }
        assert_eq!(cards(&got).len(), 1, "{what}");
    }
    // Two separate headers are one list too.
    let body = gzip(&zlib(plain));
    let server = RawServer::start(crate::util::raw_response_bytes(
        "200 OK",
        &[b"Content-Encoding: deflate", b"Content-Encoding: gzip"],
        &body,
    ))
    .await;
    assert_eq!(fetch_from(&server).await.body(), plain);
}

#[tokio::test]
async fn every_body_that_does_not_decode_is_malformed_after_one_attempt() {
    let page = CARD_PAGE.replace("{META}", "");
    let mut truncated = gzip(page.as_bytes());
    truncated.truncate(truncated.len() / 2);
    let cases: Vec<(&[u8], Vec<u8>)> = vec![
        (
            b"Content-Encoding: br",
            b"this is not a brotli stream at all".to_vec(),
        ),
        (
            b"Content-Encoding: gzip",
            b"this is not a gzip stream".to_vec(),
        ),
        (
            b"Content-Encoding: deflate",
            b"\xff\xff\xff not deflate".to_vec(),
        ),
        (b"Content-Encoding: gzip", truncated),
        (b"Content-Encoding: gzip, br", gzip(page.as_bytes())),
        (b"Content-Encoding: zstd", page.clone().into_bytes()),
    ];
    for (coding, body) in cases {
        let server =
            RawServer::start(crate::util::raw_response_bytes("200 OK", &[coding], &body)).await;
        let got = fetch_from(&server).await;
        let what = String::from_utf8_lossy(coding);
        assert_eq!(
            got.failure(),
            Some(TransportFailure::Malformed),
            "{what}: {:?}",
            got.error()
        );
        assert_eq!(got.attempts, 1, "{what}");
        assert_eq!(server.connections(), 1, "{what}");
        assert_eq!(outcome(&got), Outcome::Error, "{what}");
    }
}

#[tokio::test]
async fn a_304_to_a_request_without_validators_is_malformed() {
    let (got, server, f, req) = fetch_raw(raw_response("304 Not Modified", &[], "")).await;
    assert_eq!(got.failure(), Some(TransportFailure::Malformed), "{got:?}");
    assert_eq!(got.attempts, 1);
    assert_eq!(server.connections(), 1);
    assert_eq!(outcome(&got), Outcome::Error);
    assert!(!got.not_modified());
    // With a validator sent, the same 304 means unchanged.
    f.set_validators(&req.url, Some("\"v1\"".into()), None);
    let conditional = FetchRequest {
        conditional: true,
        ..req
    };
    let got = f.fetch(&conditional, &CancellationToken::new()).await;
    assert!(got.not_modified(), "{got:?}");
    assert_eq!(outcome(&got), Outcome::Unchanged);
}

/// `notifio check` says who asks: `notifio/VERSION (+repository)` on every plain request by
/// default, and a site's own `[site."…"] user_agent` where the user set one, for that site
/// only (docs/sites.md#who-is-asking-the-user-agent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_names_notifio_as_its_user_agent_unless_a_site_says_otherwise() {
    let p = portal().await;
    let dir = tempfile::tempdir().unwrap();
    let search = |name: &str, site: &str| {
        format!(
            "[[search]]\nname = {name:?}\nurl = {:?}\n\
             listing = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n",
            p.search_url(site, "s")
        )
    };
    let text = format!(
        "[watch]\nstate_dir = {:?}\ndashboard = false\n\n{}{}[site.{:?}]\nuser_agent = \"MyWatcher/2 (ana@example.org)\"\n",
        dir.path().join("state").display().to_string(),
        search("a", "a"),
        search("b", "b"),
        p.base_url("b").trim_start_matches("http://"),
    );
    let config = crate::util::write_config(dir.path(), &text);
    let out = tokio::task::spawn_blocking(move || {
        crate::util::run_binary(["--config", config.to_str().unwrap(), "check", "--json"])
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let agent = |site: &str| {
        let seen = seen(&p, site);
        assert!(!seen.is_empty(), "{site} was asked");
        seen.iter()
            .map(|r| r.header("user-agent").unwrap_or_default().to_owned())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(
        agent("a").into_iter().collect::<Vec<_>>(),
        [concat!(
            "notifio/",
            env!("CARGO_PKG_VERSION"),
            " (+https://github.com/notifio/notifio)"
        )]
    );
    assert_eq!(
        agent("b").into_iter().collect::<Vec<_>>(),
        ["MyWatcher/2 (ana@example.org)"]
    );
}
