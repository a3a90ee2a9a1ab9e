//! The dashboard's access rules: it answers only to the host names it is known by (DNS
//! rebinding: a web page on `evil.example` whose name is made to point at 127.0.0.1 must not
//! read the status from the user's browser), off loopback a bearer token is mandatory, and when
//! a token is set every guarded route checks it in constant time. Kept apart from the routes so
//! the rules are read (and tested) in one place; the token itself never reaches a log or a
//! response.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::WebError;

/// The environment variable the config resolver reads the dashboard token from.
pub const TOKEN_ENV: &str = "NOTIFIO_DASHBOARD_TOKEN";

/// Validates the token against the address: a blank token is an error, and a non-loopback
/// address without one is refused. Returns the token to enforce, if any.
pub(super) fn check_token(
    addr: SocketAddr,
    token: Option<String>,
) -> Result<Option<String>, WebError> {
    match token {
        Some(t) if t.trim().is_empty() => Err(WebError::EmptyToken),
        Some(t) => Ok(Some(t)),
        None if addr.ip().is_loopback() => Ok(None),
        None => Err(WebError::TokenRequired { addr }),
    }
}

/// The `Host` values the dashboard answers to: its bound address, `localhost`, `127.0.0.1` and
/// `[::1]`, each with the bound port, and the names the user lists in `watch.dashboard_hosts`
/// (`name` with the bound port, `name:port` as written, for a reverse proxy). Bound to every
/// address (`0.0.0.0`, `::`), any IP literal with the port is accepted too: an IP cannot be
/// rebound, only a name can.
#[derive(Clone, Debug)]
pub(super) struct AllowedHosts {
    port: u16,
    any_ip: bool,
    /// Lower-case `host:port` pairs (IPv6 in brackets).
    exact: Vec<String>,
}

impl AllowedHosts {
    pub(super) fn new(bound: SocketAddr, extra: &[String]) -> Self {
        let port = bound.port();
        let with_port = |name: &str| format!("{name}:{port}");
        let mut exact = vec![
            with_port("localhost"),
            with_port("127.0.0.1"),
            with_port("[::1]"),
            bound.to_string(),
        ];
        for name in extra {
            let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
            if split_host(&name).1.is_some() {
                exact.push(name);
            } else {
                exact.push(with_port(&name));
            }
        }
        Self {
            port,
            any_ip: bound.ip().is_unspecified(),
            exact,
        }
    }

    /// Whether a request naming `host` (a `Host` header or an HTTP/2 authority) is for us.
    fn allows(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let (name, port) = split_host(&host);
        // No port means the scheme's default: 80 for the dashboard's plain http.
        let port = port.unwrap_or(80);
        let name = name.trim_end_matches('.');
        let pair = format!("{name}:{port}");
        if self.exact.contains(&pair) {
            return true;
        }
        self.any_ip
            && port == self.port
            && name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok()
    }
}

/// `name:port` → (`name`, port); `[v6]:port` keeps the brackets; a bare name has no port.
fn split_host(host: &str) -> (&str, Option<u16>) {
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') || name.ends_with(']') => match port.parse() {
            Ok(p) => (name, Some(p)),
            Err(_) => (host, None),
        },
        _ => (host, None),
    }
}

/// The host a request names: its `Host` header, or its HTTP/2 authority.
fn host_of(req: &Request) -> Option<String> {
    req.headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()))
}

/// Middleware: 421 Misdirected Request unless the request's host is one the dashboard answers
/// to ([`AllowedHosts`]); 403 for a request that would change something (see
/// [`require_mutation_rules`]).
pub(super) async fn require_host(
    State(hosts): State<Arc<AllowedHosts>>,
    req: Request,
    next: Next,
) -> Response {
    if host_of(&req).as_deref().is_some_and(|h| hosts.allows(h)) {
        return next.run(req).await;
    }
    if !req.method().is_safe() {
        return refuse("this dashboard answers only to the names it is known by");
    }
    (
        StatusCode::MISDIRECTED_REQUEST,
        "this dashboard answers only to the names it is known by (localhost, 127.0.0.1, [::1], \
         its own address, and the names in `dashboard_hosts` under [watch])\n",
    )
        .into_response()
}

/// Middleware: lets the request through when no token is configured, or when it carries the
/// token as `Authorization: Bearer <token>` (the scheme in any case, RFC 9110) or
/// `?token=<token>`; otherwise 401.
pub(super) async fn require_token(
    State(token): State<Arc<Option<String>>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(expected) = token.as_deref() else {
        return next.run(req).await;
    };
    if carries_token(&req, expected) {
        return next.run(req).await;
    }
    let mut resp = (
        StatusCode::UNAUTHORIZED,
        "this dashboard needs its token: send `Authorization: Bearer <token>` or open \
         /?token=<token> (the token is `dashboard_token` under [watch], or NOTIFIO_DASHBOARD_TOKEN)\n",
    )
        .into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"notifio\""),
    );
    resp
}

/// What a request that changes something must bring, besides an allowed `Host`: a JSON body
/// (`Content-Type: application/json`, which a cross-site form cannot send without the
/// browser asking us first, and we never say yes), an `Origin` that is absent (not a browser,
/// or a same-origin request of an older one) or the dashboard's own, and the token when one
/// is set. Anything else gets 403 and reaches no route.
#[derive(Debug)]
pub(super) struct MutationRules {
    pub(super) hosts: Arc<AllowedHosts>,
    pub(super) token: Option<String>,
}

/// A refusal of a mutating request: 403 with `{"error", "field": null}`.
fn refuse(why: &str) -> Response {
    let body = serde_json::json!({ "error": format!("refused: {why}"), "field": null });
    (StatusCode::FORBIDDEN, axum::Json(body)).into_response()
}

/// Middleware for the routes that change something (see [`MutationRules`]).
pub(super) async fn require_mutation_rules(
    State(rules): State<Arc<MutationRules>>,
    req: Request,
    next: Next,
) -> Response {
    if !host_of(&req)
        .as_deref()
        .is_some_and(|h| rules.hosts.allows(h))
    {
        return refuse("this dashboard answers only to the names it is known by");
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let ours = origin
            .to_str()
            .ok()
            .and_then(|o| url::Url::parse(o).ok())
            .filter(|u| u.scheme() == "http" && u.path() == "/" && u.username().is_empty())
            .and_then(|u| {
                let host = u.host_str()?.to_owned();
                Some(match u.port() {
                    Some(p) => format!("{host}:{p}"),
                    None => host,
                })
            })
            .is_some_and(|h| rules.hosts.allows(&h));
        if !ours {
            return refuse("a request from another site's page (its Origin is not this dashboard)");
        }
    }
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return refuse("changes need `Content-Type: application/json`");
    }
    if let Some(expected) = rules.token.as_deref().filter(|t| !t.trim().is_empty())
        && !carries_token(&req, expected)
    {
        return refuse("this dashboard needs its token (`Authorization: Bearer <token>`)");
    }
    next.run(req).await
}

/// Whether the request carries `expected` as `Authorization: Bearer <token>` (the scheme in
/// any case, RFC 9110) or `?token=<token>`.
fn carries_token(req: &Request, expected: &str) -> bool {
    let from_header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .is_some_and(|given| same(given, expected));
    from_header
        || req.uri().query().is_some_and(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .any(|(k, v)| k == "token" && same(&v, expected))
        })
}

/// The credentials of `Bearer <token>`: the scheme is case-insensitive, one or more spaces
/// follow it (RFC 9110 §11.1, §11.4).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim_start_matches(' ').trim_end())
}

/// Constant-time equality (`subtle`), so response timing does not reveal how much of a guess
/// was right. Only the length can leak, which a long random token makes harmless.
fn same(given: &str, expected: &str) -> bool {
    given.as_bytes().ct_eq(expected.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_needs_no_token_but_other_addresses_do() {
        let lo: SocketAddr = "127.0.0.1:7878".parse().unwrap();
        let lo6: SocketAddr = "[::1]:7878".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7878".parse().unwrap();
        let lan: SocketAddr = "192.168.1.5:7878".parse().unwrap();
        assert_eq!(check_token(lo, None).unwrap(), None);
        assert_eq!(check_token(lo6, None).unwrap(), None);
        assert!(matches!(
            check_token(any, None),
            Err(WebError::TokenRequired { .. })
        ));
        assert!(matches!(
            check_token(lan, None),
            Err(WebError::TokenRequired { .. })
        ));
        assert_eq!(
            check_token(lan, Some("s3cret".into())).unwrap().as_deref(),
            Some("s3cret")
        );
        assert!(matches!(
            check_token(lo, Some("  ".into())),
            Err(WebError::EmptyToken)
        ));
    }

    #[test]
    fn the_dashboard_answers_to_its_own_names_only() {
        let lo: SocketAddr = "127.0.0.1:7878".parse().unwrap();
        let h = AllowedHosts::new(lo, &["Notifio.LAN".into(), "proxy.example:443".into()]);
        for ok in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST:7878",
            "[::1]:7878",
            "notifio.lan:7878",
            "notifio.lan.:7878",
            "proxy.example:443",
        ] {
            assert!(h.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7878",
            "127.0.0.1:7879",
            "localhost",
            "127.0.0.1",
            "notifio.lan:8080",
            "proxy.example:7878",
            "192.168.1.5:7878",
            "",
            "localhost:7878.evil.example",
            "[::1]",
        ] {
            assert!(!h.allows(bad), "{bad}");
        }
        // Bound to every address: IP literals on the port are the machine's own.
        let any = AllowedHosts::new("0.0.0.0:7878".parse().unwrap(), &[]);
        assert!(any.allows("192.168.1.5:7878"));
        assert!(any.allows("[fe80::1]:7878"));
        assert!(!any.allows("evil.example:7878"));
        assert!(!any.allows("192.168.1.5:80"));
        // Port 80 may be left out, as browsers do.
        let on80 = AllowedHosts::new("127.0.0.1:80".parse().unwrap(), &[]);
        assert!(on80.allows("localhost"));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in ["Bearer abc", "bearer abc", "BEARER   abc ", " Bearer abc"] {
            assert_eq!(bearer(v), Some("abc"), "{v:?}");
        }
        for v in ["Basic abc", "Bearerabc", "Bearer"] {
            assert_eq!(bearer(v), None, "{v:?}");
        }
    }

    #[test]
    fn token_comparison_is_exact() {
        assert!(same("abc123", "abc123"));
        assert!(!same("abc12", "abc123"));
        assert!(!same("abc124", "abc123"));
        assert!(!same("", "abc123"));
    }

    #[test]
    fn error_explains_how_to_set_the_token() {
        let msg = WebError::TokenRequired {
            addr: "0.0.0.0:7878".parse().unwrap(),
        }
        .to_string();
        assert!(msg.contains("dashboard_token"), "{msg}");
        assert!(msg.contains(TOKEN_ENV), "{msg}");
        assert!(msg.contains("[watch]"), "{msg}");
    }
}
