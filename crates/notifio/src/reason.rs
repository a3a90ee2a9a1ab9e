//! Why a check did not come back `ok`, in one short sentence a user can act on: "DNS failure:
//! cannot resolve www.example.com", "HTTP 503 Service Unavailable after 3 attempts", "challenge
//! page (DataDome), HTTP 403". `check` prints it (human line and `--json` `"reason"`).
//!
//! Built from what the fetcher kept (status, failure, its one-line error, which never holds a
//! cookie or a URL) and the challenge marker that matched; a host name is the most of a URL it
//! names, so a URL's password cannot end up here.

use crate::extract::bounds::Unreadable;
use crate::fetch::Fetched;
use notifio_policy::classify::{challenge_marker, challenge_vendor};
use notifio_policy::{
    Entry, Markers, Outcome, Timestamp, TransportFailure, format_duration, format_time_of_day,
};
use std::time::Duration;

/// Why `outcome` (not `ok`/unchanged) came of `fetched` (and, for a page that was not read,
/// the bound it is over); `None` for a good page.
#[must_use]
pub fn of_check(
    outcome: Outcome,
    fetched: &Fetched,
    markers: &Markers,
    unreadable: Option<&Unreadable>,
) -> Option<String> {
    let status = fetched.status().map(http_status);
    let why = match outcome {
        Outcome::LayoutUnknown if unreadable.is_some() => format!(
            "{}, but {}",
            status.unwrap_or_default(),
            unreadable.map(ToString::to_string).unwrap_or_default()
        ),
        Outcome::Ok | Outcome::Unchanged => return None,
        Outcome::Held if fetched.is_deferred() => {
            "redirect not followed now: the site's request budget has no room for it; \
             due again when it has"
                .to_owned()
        }
        Outcome::Held => format!(
            "redirected to {}, which is closed to us now (waiting, or its session expired): not followed",
            fetched.held_at()?
        ),
        Outcome::Challenge => {
            let marker = fetched
                .facts(false)
                .and_then(|facts| challenge_marker(&facts, markers));
            let who = match marker {
                Some(m) => challenge_vendor(m)
                    .map_or_else(|| format!("the site's own marker `{m}`"), str::to_owned),
                None => "an anti-bot page".to_owned(),
            };
            let at = fetched
                .status()
                .map(|s| format!(", HTTP {s}"))
                .unwrap_or_default();
            format!("challenge page ({who}){at}")
        }
        Outcome::RateLimited => format!(
            "{}{}",
            status.unwrap_or_else(|| "HTTP 429".into()),
            retry_after(fetched)
        ),
        Outcome::Denied => format!(
            "{}: the site refuses this page (no challenge page)",
            status.unwrap_or_else(|| "refused".into())
        ),
        Outcome::SessionExpired => {
            if fetched.final_url() == fetched.requested_url {
                "the page says you are logged out: export fresh cookies".to_owned()
            } else {
                format!(
                    "redirected to a login page ({}): export fresh cookies",
                    path_of(fetched.final_url())
                )
            }
        }
        Outcome::SearchGone => format!(
            "{}: the search page no longer exists",
            status.unwrap_or_else(|| "gone".into())
        ),
        Outcome::LayoutUnknown => {
            if fetched.body().is_empty() {
                format!("{} with an empty page", status.unwrap_or_default())
            } else {
                format!(
                    "{}, but no result list where this search looks for one (the layout changed, or this is another kind of page)",
                    status.unwrap_or_default()
                )
            }
        }
        Outcome::Error => error(fetched, status),
    };
    Some(why)
}

/// Why a search was skipped: its site is waiting after a refusal.
#[must_use]
pub fn of_waiting(entry: &Entry, now: Timestamp) -> String {
    let left = entry.next_retry_at.saturating_since(now);
    format!(
        "the site is waiting after {} (refusal {} in a row) until {}, in {}",
        entry.kind.as_str(),
        entry.failures,
        format_time_of_day(entry.next_retry_at),
        notifio_policy::time::format_countdown(left)
    )
}

fn error(fetched: &Fetched, status: Option<String>) -> String {
    let told = fetched.error().unwrap_or("");
    let url = url::Url::parse(&fetched.requested_url).ok();
    let name = url
        .as_ref()
        .and_then(url::Url::host_str)
        .unwrap_or_default();
    let host = match url.as_ref().and_then(url::Url::port) {
        Some(port) => format!("{name}:{port}"),
        None => name.to_owned(),
    };
    let attempts = if fetched.attempts > 1 {
        format!(" after {} attempts", fetched.attempts)
    } else {
        String::new()
    };
    let lower = told.to_ascii_lowercase();
    let what = match fetched.failure() {
        Some(TransportFailure::Timeout) => told.to_owned(),
        Some(TransportFailure::Connect) => {
            if lower.contains("dns error") || lower.contains("lookup address") {
                format!("DNS failure: cannot resolve {name}")
            } else if lower.contains("connection refused") {
                format!("connection refused by {host}")
            } else if lower.contains("reset") {
                format!("connection reset by {host}")
            } else if lower.contains("certificate") {
                format!("TLS failure: {host} presented a certificate that is not trusted")
            } else if lower.contains("tls") || lower.contains("handshake") {
                format!("TLS failure with {host}")
            } else {
                format!("connection to {host} failed: {told}")
            }
        }
        Some(TransportFailure::Malformed) => format!("malformed response: {told}"),
        Some(TransportFailure::TooManyRedirects | TransportFailure::BodyTooLarge) => {
            told.to_owned()
        }
        None => match status {
            Some(s) => format!("{s}{}", retry_after(fetched)),
            None => "no response".to_owned(),
        },
    };
    format!("{what}{attempts}")
}

/// `HTTP 503 Service Unavailable`.
fn http_status(s: u16) -> String {
    let reason = http::StatusCode::from_u16(s)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("");
    format!("HTTP {s} {reason}").trim_end().to_owned()
}

fn retry_after(fetched: &Fetched) -> String {
    fetched
        .retry_after()
        .filter(|d| *d > Duration::ZERO)
        .map(|d| {
            format!(
                ", Retry-After {}",
                format_duration(Duration::from_secs(d.as_secs().max(1)))
            )
        })
        .unwrap_or_default()
}

fn path_of(url: &str) -> String {
    url::Url::parse(url).map_or_else(|_| String::new(), |u| u.path().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch::{Reply, Response};
    use bytes::Bytes;

    const URL: &str = "https://ana:hunter2@www.example.com/search?q=1";

    fn failed(failure: TransportFailure, error: &str, attempts: u32) -> Fetched {
        Fetched {
            requested_url: URL.into(),
            attempts,
            requests: attempts,
            latency: Duration::ZERO,
            via: crate::fetch::FetchMode::Http,
            reply: Reply::Failure {
                failure,
                error: error.into(),
                response: None,
            },
        }
    }

    fn answered(status: u16, retry_after: Option<Duration>) -> Fetched {
        Fetched {
            reply: Reply::Response(Response {
                final_url: URL.into(),
                status,
                headers: Vec::new(),
                body: Bytes::new(),
                retry_after,
                problem: None,
            }),
            ..failed(TransportFailure::Connect, "", 1)
        }
    }

    fn why(f: &Fetched) -> String {
        of_check(Outcome::Error, f, &Markers::generic(), None).unwrap()
    }

    #[test]
    fn transport_failures_read_in_plain_words() {
        // hyper-util's words for an offline machine.
        let dns = failed(
            TransportFailure::Connect,
            "client error (Connect): dns error: failed to lookup address information: Temporary failure in name resolution",
            3,
        );
        assert_eq!(
            why(&dns),
            "DNS failure: cannot resolve www.example.com after 3 attempts"
        );
        let refused = failed(
            TransportFailure::Connect,
            "client error (Connect): tcp connect error: Connection refused (os error 111)",
            1,
        );
        assert_eq!(why(&refused), "connection refused by www.example.com");
        let cert = failed(
            TransportFailure::Connect,
            "client error (Connect): invalid peer certificate: UnknownIssuer",
            1,
        );
        assert!(why(&cert).starts_with("TLS failure"), "{}", why(&cert));
        let slow = failed(
            TransportFailure::Timeout,
            "timed out after 10s: no complete response",
            2,
        );
        assert_eq!(
            why(&slow),
            "timed out after 10s: no complete response after 2 attempts"
        );
        for f in [dns, refused, cert, slow] {
            assert!(!why(&f).contains("hunter2"));
        }
    }

    #[test]
    fn refusals_name_their_status_and_retry_after() {
        let f = answered(429, Some(Duration::from_secs(120)));
        assert_eq!(
            of_check(Outcome::RateLimited, &f, &Markers::generic(), None).unwrap(),
            "HTTP 429 Too Many Requests, Retry-After 2m"
        );
        let f = answered(503, Some(Duration::from_secs(1800)));
        assert_eq!(why(&f), "HTTP 503 Service Unavailable, Retry-After 30m");
        assert_eq!(of_check(Outcome::Ok, &f, &Markers::generic(), None), None);
    }

    #[test]
    fn a_held_redirect_says_where_it_led() {
        let held = Fetched {
            reply: Reply::Held {
                site: notifio_policy::SiteKey::from_stored("waiting.example"),
                response: Response {
                    final_url: URL.into(),
                    status: 302,
                    headers: Vec::new(),
                    body: Bytes::new(),
                    retry_after: None,
                    problem: None,
                },
            },
            ..failed(TransportFailure::Connect, "", 1)
        };
        let why = of_check(Outcome::Held, &held, &Markers::generic(), None).unwrap();
        assert!(why.starts_with("redirected to waiting.example"), "{why}");
        assert!(!why.contains("hunter2"), "{why}");
    }
}
