//! Shared by the end-to-end tests: the real `notifio` binary as a child process, a real SMTP
//! server (mailin-embedded) on 127.0.0.1, a raw HTTP server for responses hyper will not send,
//! read-only peeks into the state database, and a decoder for the messages the SMTP server
//! receives. Everything is loopback and every wait is bounded, so a broken product fails a test
//! instead of hanging it.

use base64::Engine as _;
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use std::collections::VecDeque;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------- a forward proxy

/// A forward proxy on loopback, as small as a proxy gets: a `CONNECT host:port` gets a tunnel
/// to that address; any other request (absolute form) is passed to its host as it came, and
/// the connection then relays both ways. Records each connection's request line.
pub(crate) async fn start_proxy() -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let line = text.lines().next().unwrap_or_default().to_owned();
                log.lock().unwrap().push(line.clone());
                let mut words = line.split(' ');
                let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                let address = if method == "CONNECT" {
                    target.to_owned()
                } else {
                    let u = url::Url::parse(target).unwrap();
                    format!(
                        "{}:{}",
                        u.host_str().unwrap(),
                        u.port_or_known_default().unwrap()
                    )
                };
                let Ok(mut upstream) = tokio::net::TcpStream::connect(address).await else {
                    return;
                };
                if method == "CONNECT" {
                    let ok = b"HTTP/1.1 200 Connection established\r\n\r\n";
                    if client.write_all(ok).await.is_err() {
                        return;
                    }
                } else if upstream.write_all(&head).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (url, seen)
}

// ---------------------------------------------------------------- a fake service

// A fake of a notification service's HTTP API (a webhook, Telegram, Slack…): records every
// request and answers as the test scripts.

/// One request a fake received.
#[derive(Clone, Debug)]
pub(crate) struct Hit {
    pub(crate) method: String,
    /// Path and query.
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
    pub(crate) at: Instant,
}

impl Hit {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
    pub(crate) fn form(&self) -> Vec<(String, String)> {
        url::form_urlencoded::parse(self.body.as_bytes())
            .into_owned()
            .collect()
    }
}

/// A scripted answer: status, headers, body, and how long to wait before answering.
#[derive(Clone)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: String,
    pub(crate) delay: Duration,
}

pub(crate) fn answer(status: u16, body: &str) -> Answer {
    Answer {
        status,
        headers: vec![("content-type", "application/json".to_owned())],
        body: body.to_owned(),
        delay: Duration::ZERO,
    }
}

#[derive(Clone)]
pub(crate) struct Fake {
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    pub(crate) hits: Arc<Mutex<Vec<Hit>>>,
    /// Answers in order; the last one repeats.
    pub(crate) script: Arc<Mutex<VecDeque<Answer>>>,
}

impl Fake {
    pub(crate) async fn start(first: Answer) -> Self {
        use axum::extract::{OriginalUri, State};
        use axum::http::{HeaderMap, Method};
        let fake = Self {
            url: String::new(),
            hits: Arc::default(),
            script: Arc::new(Mutex::new(VecDeque::from([first]))),
        };
        async fn handle(
            State(f): State<Fake>,
            method: Method,
            OriginalUri(uri): OriginalUri,
            headers: HeaderMap,
            body: String,
        ) -> axum::response::Response {
            f.hits.lock().unwrap().push(Hit {
                method: method.to_string(),
                path: uri.to_string(),
                headers: headers
                    .iter()
                    .map(|(n, v)| {
                        (
                            n.to_string(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    })
                    .collect(),
                body,
                at: Instant::now(),
            });
            let a = {
                let mut s = f.script.lock().unwrap();
                if s.len() > 1 {
                    s.pop_front().unwrap()
                } else {
                    s[0].clone()
                }
            };
            tokio::time::sleep(a.delay).await;
            let mut resp = axum::response::Response::new(axum::body::Body::from(a.body));
            *resp.status_mut() = http::StatusCode::from_u16(a.status).unwrap();
            for (n, v) in a.headers {
                resp.headers_mut().insert(n, v.parse().unwrap());
            }
            resp
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let fake = Self { url, ..fake };
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        fake
    }

    pub(crate) fn then(&self, a: Answer) -> &Self {
        self.script.lock().unwrap().push_back(a);
        self
    }

    pub(crate) fn set(&self, a: Answer) {
        *self.script.lock().unwrap() = VecDeque::from([a]);
    }

    pub(crate) fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

// ---------------------------------------------------------------- the app in-process

/// A running watcher with its dashboard (see [`run_app`]), and a client for its API.
pub(crate) struct App {
    pub(crate) addr: std::net::SocketAddr,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), notifio::runner::RunError>>,
    pub(crate) http: reqwest::Client,
}

/// A client for the dashboard's API on loopback: no proxy, a 20 s deadline.
pub(crate) fn api_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

impl App {
    /// Runs the watcher of the config file at `config`.
    pub(crate) async fn start(config: &Path) -> Self {
        let cfg = notifio::config::load(config).unwrap_or_else(|e| panic!("{e}"));
        let (addr, cancel, task) = run_app(cfg).await;
        Self {
            addr,
            cancel,
            task,
            http: api_client(),
        }
    }

    /// Stops it, as Ctrl-C does.
    pub(crate) async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }

    /// `GET path`: its status, content type and body.
    pub(crate) async fn get(&self, path: &str) -> (u16, String, String) {
        let resp = self
            .http
            .get(format!("http://{}{path}", self.addr))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        (status, ctype, resp.text().await.unwrap())
    }

    /// `GET path`, which must answer 200 with JSON.
    pub(crate) async fn json(&self, path: &str) -> Value {
        let (status, _, body) = self.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }

    /// `GET /api/listings{query}`.
    pub(crate) async fn listings(&self, query: &str) -> Value {
        self.json(&format!("/api/listings{query}")).await
    }

    /// `GET /api/status`.
    pub(crate) async fn status(&self) -> Value {
        self.json("/api/status").await
    }

    /// Waits until `/api/listings{query}` says `f`.
    pub(crate) async fn until(&self, query: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let v = self.listings(query).await;
            if f(&v) {
                return v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "timed out waiting for {what}: {v}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A running `notifio watch` (watcher, live reload, dashboard with its API) in this process,
/// as `notifio watch` runs it (`runner::run`): its dashboard's address, the token that stops it, its task.
pub(crate) async fn run_app(
    cfg: notifio::config::Config,
) -> (
    std::net::SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), notifio::runner::RunError>>,
) {
    let cancel = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let hooks = notifio::runner::Hooks {
        narrator: None,
        on_dashboard: Some(Box::new(move |addr| {
            let _ = tx.send(addr);
        })),
    };
    let task = tokio::spawn(notifio::runner::run(cfg, cancel.clone(), hooks));
    let addr = tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .expect("the dashboard starts")
        .expect("the watcher starts");
    (addr, cancel, task)
}

// ---------------------------------------------------------------- waiting

/// Polls `f` every 50 ms (letting the runtime serve the in-process portal meanwhile) until it
/// returns `Some`, or panics with `what` after `limit`.
pub(crate) async fn wait_for<T>(
    limit: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next event from a watcher that `f` accepts (lagging is not an error), or a panic after
/// `limit`.
pub(crate) async fn next_matching(
    rx: &mut tokio::sync::broadcast::Receiver<notifio::watch::WatchEvent>,
    limit: Duration,
    mut f: impl FnMut(&notifio::watch::WatchEvent) -> bool,
) -> notifio::watch::WatchEvent {
    tokio::time::timeout(limit, async {
        loop {
            match rx.recv().await {
                Ok(ev) if f(&ev) => return ev,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("event stream ended: {e}"),
            }
        }
    })
    .await
    .expect("timed out waiting for an event")
}

// ---------------------------------------------------------------- a raw HTTP server

/// A server on 127.0.0.1 (a site of its own: not the fake portal) that reads each request's
/// head, answers with the bytes currently set, and closes: for responses hyper will not send
/// (two Retry-After headers, control characters in a header value) and for redirects to
/// another site. It counts the connections it takes.
pub(crate) struct RawServer {
    /// `http://127.0.0.1:<port>`.
    pub(crate) url: String,
    response: Arc<Mutex<Vec<u8>>>,
    connections: Arc<AtomicUsize>,
    /// The request line of each request read.
    lines: Arc<Mutex<Vec<String>>>,
}

impl RawServer {
    pub(crate) async fn start(response: impl Into<Vec<u8>>) -> Self {
        Self::start_at("127.0.0.1", response).await
    }

    /// [`Self::start`] on another loopback address (`127.0.0.2`, …): a browser gives each
    /// address a renderer of its own, as it does each real site.
    pub(crate) async fn start_at(ip: &str, response: impl Into<Vec<u8>>) -> Self {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = Self {
            url,
            response: Arc::new(Mutex::new(response.into())),
            connections: Arc::new(AtomicUsize::new(0)),
            lines: Arc::default(),
        };
        let (response, connections) = (server.response.clone(), server.connections.clone());
        let lines = server.lines.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                let response = response.lock().unwrap().clone();
                let lines = lines.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") && seen.len() < 65_536 {
                        match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
                            .await
                        {
                            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                    }
                    if let Some(line) = String::from_utf8_lossy(&seen).lines().next() {
                        lines.lock().unwrap().push(line.to_owned());
                    }
                    let _ = sock.write_all(&response).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        server
    }

    /// From the next connection on, answer with `response`.
    pub(crate) fn answer(&self, response: impl Into<Vec<u8>>) {
        *self.response.lock().unwrap() = response.into();
    }

    /// Connections taken so far.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The request lines read so far (`GET /path HTTP/1.1`), in order.
    pub(crate) fn request_lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

/// Reads a request's head (up to its blank line) from `sock`; `None` when the client goes away
/// first.
pub(crate) async fn read_head(sock: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt as _;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match sock.read(&mut buf).await {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    Some(head)
}

/// An HTTP/1.1 response: the status line, `headers` as given (raw bytes), then an HTML
/// content type, the body's length and `Connection: close`.
pub(crate) fn raw_response(status: &str, headers: &[&[u8]], body: &str) -> Vec<u8> {
    raw_response_bytes(status, headers, body.as_bytes())
}

/// [`raw_response`] with a body of any bytes (compressed, another character set).
pub(crate) fn raw_response_bytes(status: &str, headers: &[&[u8]], body: &[u8]) -> Vec<u8> {
    let mut r = format!("HTTP/1.1 {status}\r\n").into_bytes();
    for h in headers {
        r.extend_from_slice(h);
        r.extend_from_slice(b"\r\n");
    }
    r.extend_from_slice(
        format!(
            "Content-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    r.extend_from_slice(body);
    r
}

// ---------------------------------------------------------------- SMTP

/// A free loopback port with nothing listening on it (yet): an SMTP server that is "down".
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[derive(Clone, Default)]
struct Capture {
    received: Arc<Mutex<Vec<String>>>,
    current: Vec<u8>,
}

impl mailin_embedded::Handler for Capture {
    fn data_start(
        &mut self,
        _domain: &str,
        _from: &str,
        _is8bit: bool,
        _to: &[String],
    ) -> mailin_embedded::Response {
        self.current.clear();
        mailin_embedded::response::OK
    }
    fn data(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.current.extend_from_slice(buf);
        Ok(())
    }
    fn data_end(&mut self) -> mailin_embedded::Response {
        let msg = String::from_utf8_lossy(&std::mem::take(&mut self.current)).into_owned();
        self.received.lock().unwrap().push(msg);
        mailin_embedded::response::OK
    }
}

/// Raw messages an SMTP server accepted, in arrival order.
pub(crate) type Inbox = Arc<Mutex<Vec<String>>>;

/// Starts a real SMTP server (mailin-embedded) on `port`; it runs until the test process ends.
pub(crate) fn start_smtp(port: u16) -> Inbox {
    let capture = Capture::default();
    let received = capture.received.clone();
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let mut server = mailin_embedded::Server::new(capture);
    server
        .with_name("test.localhost")
        .with_num_threads(2)
        .with_tcp_listener(listener);
    std::thread::spawn(move || {
        let _ = server.serve();
    });
    received
}

/// A received message, decoded: subject RFC 2047-decoded, text and HTML parts
/// transfer-decoded.
#[derive(Debug)]
pub(crate) struct Mail {
    /// The Subject header.
    pub(crate) subject: String,
    /// The text/plain part.
    pub(crate) text: String,
    /// The text/html part.
    pub(crate) html: String,
}

fn decode_words(s: &str) -> String {
    let re = regex::Regex::new(r"=\?(?i:utf-8)\?([bBqQ])\?([^?]*)\?=").unwrap();
    // Whitespace between two encoded words is not part of the text (RFC 2047 §6.2).
    let joined = regex::Regex::new(r"\?=\s+=\?")
        .unwrap()
        .replace_all(s, "?==?");
    re.replace_all(&joined, |c: &regex::Captures<'_>| {
        let bytes = if c[1].eq_ignore_ascii_case("b") {
            base64::engine::general_purpose::STANDARD
                .decode(&c[2])
                .unwrap()
        } else {
            quoted_printable::decode(c[2].replace('_', " "), quoted_printable::ParseMode::Robust)
                .unwrap()
        };
        String::from_utf8(bytes).unwrap()
    })
    .into_owned()
}

fn split_head(raw: &str) -> (Vec<(String, String)>, &str) {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.split("\r\n") {
        if line.starts_with([' ', '\t']) {
            if let Some(last) = headers.last_mut() {
                last.1.push_str(line);
            }
        } else if let Some((k, v)) = line.split_once(':') {
            headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    (headers, body)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Decodes one multipart/alternative message as lettre writes it.
pub(crate) fn parse_mail(raw: &str) -> Mail {
    let (headers, body) = split_head(raw);
    let subject = decode_words(header(&headers, "subject").unwrap());
    let ctype = header(&headers, "content-type").unwrap();
    assert!(ctype.starts_with("multipart/alternative"), "{ctype}");
    let boundary = ctype.split("boundary=").nth(1).unwrap().trim_matches('"');
    let (mut text, mut html) = (String::new(), String::new());
    for part in body.split(&format!("--{boundary}")).skip(1) {
        if part.starts_with("--") {
            break;
        }
        let (ph, pb) = split_head(part.trim_start_matches("\r\n"));
        let decoded = match header(&ph, "content-transfer-encoding").unwrap_or("7bit") {
            "quoted-printable" => {
                quoted_printable::decode(pb, quoted_printable::ParseMode::Robust).unwrap()
            }
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(pb.replace(['\r', '\n'], ""))
                .unwrap(),
            _ => pb.as_bytes().to_vec(),
        };
        let decoded = String::from_utf8(decoded).unwrap().replace("\r\n", "\n");
        match header(&ph, "content-type").unwrap_or("") {
            t if t.starts_with("text/plain") => text = decoded,
            t if t.starts_with("text/html") => html = decoded,
            _ => {}
        }
    }
    Mail {
        subject,
        text,
        html,
    }
}

/// Every message in an inbox, decoded.
pub(crate) fn mails(inbox: &Inbox) -> Vec<Mail> {
    inbox
        .lock()
        .unwrap()
        .iter()
        .map(|m| parse_mail(m))
        .collect()
}

// ---------------------------------------------------------------- policies and logs

/// The `notify` retry class with ms-scale sleeps: 5ms then 15ms (±25%).
pub(crate) fn fast_retry() -> notifio_policy::RetryPolicy {
    notifio_policy::RetryPolicy::new(
        3,
        Duration::from_millis(5),
        3.0,
        0.25,
        Duration::from_secs(2),
        Duration::from_secs(5),
        true,
    )
    .unwrap()
}

/// The error ladder 50ms → 100ms → 200ms (±15%), the others as the seed's.
pub(crate) fn fast_ladder() -> notifio_policy::BackoffPolicy {
    use notifio_policy::{BackoffPolicy, Ladders, RefusalKind};
    let ms = |v: &[u64]| v.iter().map(|m| Duration::from_millis(*m)).collect();
    let ladders = Ladders::default().with(RefusalKind::Error, ms(&[50, 100, 200]));
    BackoffPolicy::new(ladders, 0.15, Duration::from_secs(3600)).unwrap()
}

/// What this thread logs, at every level, while the guard lives: to look for secrets in.
///
/// One global subscriber writes to the buffer of the thread it runs on. A scoped subscriber
/// per test (`set_default`) races with the other test threads over tracing's per-callsite
/// interest cache: a callsite first hit elsewhere can be cached as "never", and the test then
/// sees an empty log under load. A global one is never missing, so nothing is cached away.
pub(crate) fn capture_log() -> (LogBuf, LogGuard) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| ThreadLog)
            .with_filter(tracing_subscriber::filter::filter_fn(|_| {
                CAPTURE.with(|c| c.borrow().is_some())
            }));
        let _ = tracing_subscriber::registry().with(layer).try_init();
    });
    let logs = LogBuf::default();
    CAPTURE.with(|c| *c.borrow_mut() = Some(logs.clone()));
    (logs, LogGuard(()))
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<LogBuf>> = const { std::cell::RefCell::new(None) };
}

/// Stops [`capture_log`]'s capture on this thread when dropped.
pub(crate) struct LogGuard(());

impl Drop for LogGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| *c.borrow_mut() = None);
    }
}

/// Writes to the capturing buffer of the thread it is on, if any.
struct ThreadLog;

impl std::io::Write for ThreadLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(log) = c.borrow().as_ref() {
                log.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log [`capture_log`] collects.
#[derive(Clone, Default)]
pub(crate) struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl LogBuf {
    /// Everything logged so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

// ---------------------------------------------------------------- config

/// One `[[search]]` with the fake portal's card selector.
pub(crate) fn search_toml(name: &str, url: &str) -> String {
    format!(
        "[[search]]\nname = {name:?}\nurl = {url:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n\n"
    )
}

/// A `[watch]` section with a short interval and spacing, no dashboard, state in `state_dir`.
pub(crate) fn watch_toml(state_dir: &Path, interval: &str, spacing: &str) -> String {
    format!(
        "[watch]\ninterval = \"{interval}\"\nspacing = \"{spacing}\"\nstate_dir = {:?}\ndashboard = false\n\n",
        state_dir.display().to_string()
    )
}

/// Writes `text` to `dir/notifio.toml` and returns the path.
pub(crate) fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("notifio.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Writes `text` to `dir/notifio.toml` and loads it as every command does; a config the
/// loader refuses fails the test, showing the text.
pub(crate) fn load_config(dir: &Path, text: &str) -> notifio::config::Config {
    let path = write_config(dir, text);
    notifio::config::load(&path).unwrap_or_else(|e| panic!("config: {e}\n{text}"))
}

// ---------------------------------------------------------------- in this process

/// One `notifio check` pass in this process, bounded by a minute.
pub(crate) async fn check_once(cfg: notifio::config::Config) -> Vec<notifio::watch::PassResult> {
    let mut w = notifio::watch::Watcher::for_one_pass(cfg, vec![], false).unwrap();
    tokio::time::timeout(Duration::from_secs(60), w.run(CancellationToken::new()))
        .await
        .expect("the pass ends")
        .unwrap()
}

// ---------------------------------------------------------------- tools a test runs

/// Whether `program args…` runs and exits 0 here: a tool a test drives besides Notifio (bash,
/// man, zsh…). Where it does not, the test is skipped with a line naming the Debian package
/// to install, and passes; under `CI=true` it fails instead, since .ci/install-test-deps.sh
/// installs every such package and a missing one must not pass unseen.
pub(crate) fn can_run(program: &str, args: &[&str], package: &str) -> bool {
    let runs = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if runs {
        return true;
    }
    let msg = format!(
        "`{program}` does not run here: apt-get install {package} (.ci/install-test-deps.sh)"
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
    eprintln!("SKIPPED: {msg}");
    false
}

// ---------------------------------------------------------------- the binary

/// Runs `cmd`, which must succeed (else its stderr is the panic), and returns its stdout.
pub(crate) fn stdout_of_success(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?}: {err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `notifio` binary black-box tests run: the one `cargo test` built, or the one
/// `NOTIFIO_TEST_BIN` names (CI runs the journeys again with the packaged `dist` build).
pub(crate) fn binary() -> PathBuf {
    std::env::var_os("NOTIFIO_TEST_BIN")
        .filter(|p| !p.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_notifio")),
            PathBuf::from,
        )
}

/// Runs the binary with `args` to its end and returns what it did, whatever its exit.
pub(crate) fn run_binary<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> std::process::Output {
    Command::new(binary()).args(args).output().unwrap()
}

/// A running `notifio watch` child. Its stdout and stderr go to files (so a chatty `-vv` run can
/// never block on a full pipe). Dropping it SIGKILLs it.
pub(crate) struct Notifio {
    child: Child,
    /// Where stdout and stderr are appended.
    pub(crate) out: PathBuf,
    /// Where stderr is appended.
    pub(crate) err: PathBuf,
}

impl Notifio {
    /// Starts `notifio [-vv] --config CONFIG watch`, appending output to `dir/run.out|err`.
    /// `RUST_LOG` is removed; `NOTIFIO_SMTP_PASSWORD` is set to `password` or removed.
    pub(crate) fn start(dir: &Path, config: &Path, verbose: bool, password: Option<&str>) -> Self {
        let out = dir.join("run.out");
        let err = dir.join("run.err");
        let open = |p: &Path| File::options().create(true).append(true).open(p).unwrap();
        let mut cmd = Command::new(binary());
        if verbose {
            cmd.arg("-vv");
        }
        cmd.arg("--config")
            .arg(config)
            .arg("watch")
            .env_remove("RUST_LOG")
            .env_remove("NOTIFIO_CONFIG")
            .env_remove("NOTIFIO_DASHBOARD_TOKEN")
            .stdin(Stdio::null())
            .stdout(open(&out))
            .stderr(open(&err));
        match password {
            Some(p) => cmd.env("NOTIFIO_SMTP_PASSWORD", p),
            None => cmd.env_remove("NOTIFIO_SMTP_PASSWORD"),
        };
        let child = cmd.spawn().unwrap();
        Self { child, out, err }
    }

    /// The child's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running (it has not exited or crashed).
    pub(crate) fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGKILL (what `Child::kill` sends on Unix) and reap.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait up to 10 s for a clean exit; returns the exit code.
    pub(crate) fn terminate(mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// A `kB` field of `/proc/<pid>/status` (`VmHWM`, `VmRSS`, `Threads`…).
    pub(crate) fn proc_status(&self, field: &str) -> Option<u64> {
        proc_status(&format!("/proc/{}/status", self.pid()), field)
    }

    /// Open file descriptors (`/proc/<pid>/fd`).
    pub(crate) fn fd_count(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Everything it wrote to stdout and stderr so far.
    pub(crate) fn output(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        format!("{}{}", read(&self.out), read(&self.err))
    }
}

impl Drop for Notifio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A numeric field of a `/proc/.../status` file (the first number after the colon).
pub(crate) fn proc_status(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(&format!("{field}:")))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

// ---------------------------------------------------------------- the state database

/// Opens the state database read-only, or `None` while it does not exist yet.
pub(crate) fn db(state_dir: &Path) -> Option<Connection> {
    let path = notifio::store::Store::file_in(state_dir);
    if !path.exists() {
        return None;
    }
    let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.busy_timeout(Duration::from_secs(2)).ok()?;
    Some(conn)
}

/// Whether every configured search has taken its silent baseline.
pub(crate) fn all_baselined(state_dir: &Path, searches: usize) -> bool {
    db(state_dir)
        .and_then(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM searches WHERE baseline_at IS NOT NULL",
                [],
                |r| r.get::<_, i64>(0),
            )
            .ok()
        })
        .is_some_and(|n| n as usize >= searches)
}

/// Outbox rows not yet sent, for `channel`.
pub(crate) fn pending(state_dir: &Path, channel: &str) -> i64 {
    db(state_dir)
        .and_then(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL AND channel = ?1",
                [channel],
                |r| r.get(0),
            )
            .ok()
        })
        .unwrap_or(0)
}

/// Outbox rows in total, for `channel`.
pub(crate) fn outbox_rows(state_dir: &Path, channel: &str) -> i64 {
    db(state_dir)
        .and_then(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM outbox WHERE channel = ?1",
                [channel],
                |r| r.get(0),
            )
            .ok()
        })
        .unwrap_or(0)
}

/// Every `backoff` row: (site, entry as JSON).
pub(crate) fn backoff(state_dir: &Path) -> Vec<(String, Value)> {
    let Some(c) = db(state_dir) else {
        return Vec::new();
    };
    let Ok(mut stmt) = c.prepare("SELECT site, entry FROM backoff") else {
        return Vec::new(); // not migrated yet
    };
    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .unwrap()
        .map(|r| {
            let (site, entry) = r.unwrap();
            (site, serde_json::from_str(&entry).unwrap())
        })
        .collect()
}

/// The outcomes and statuses of a search's recorded checks, oldest first.
pub(crate) fn checks_of(state_dir: &Path, search: &str) -> Vec<(String, Option<u16>)> {
    let Some(c) = db(state_dir) else {
        return Vec::new();
    };
    // Not migrated yet (the child is still starting): nothing recorded.
    let Ok(mut stmt) = c.prepare(
        "SELECT c.outcome, c.status FROM checks c JOIN searches s ON s.id = c.search_id
         WHERE s.name = ?1 ORDER BY c.id",
    ) else {
        return Vec::new();
    };
    stmt.query_map([search], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The raw bytes of every file in the state dir whose name starts with `notifio.db` (the
/// database, its WAL and shared-memory files).
pub(crate) fn db_bytes(state_dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(state_dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("notifio.db") {
            all.extend(std::fs::read(e.path()).unwrap_or_default());
        }
    }
    all
}

/// Whether `needle` occurs in `hay`.
pub(crate) fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && memchr::memmem::find(hay, needle).is_some()
}
