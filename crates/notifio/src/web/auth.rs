//! The dashboard's one access rule: off loopback a bearer token is mandatory, and when a token
//! is set every guarded route checks it in constant time. Kept apart from the routes so the
//! rule is read (and tested) in one place; the token itself never reaches a log or a response.

use std::net::SocketAddr;
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

/// Middleware: lets the request through when no token is configured, or when it carries the
/// token as `Authorization: Bearer <token>` or `?token=<token>`; otherwise 401.
pub(super) async fn require_token(
    State(token): State<Arc<Option<String>>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(expected) = token.as_deref() else {
        return next.run(req).await;
    };
    let from_header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .is_some_and(|given| same(given, expected));
    let from_query = req.uri().query().is_some_and(|q| {
        url::form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "token" && same(&v, expected))
    });
    if from_header || from_query {
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
