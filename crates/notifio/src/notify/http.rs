//! The HTTP channels' shared half: every service (webhook, Telegram, Discord, Slack, ntfy,
//! Gotify, Pushover, Matrix) says which requests deliver a message and how to read its answers;
//! this module sends them through the one HTTP stack, the [`Fetcher`], with the `notify` retry
//! class, and turns what came back into a [`DeliveryError`] the outbox can act on.
//!
//! A message the service's limits split is sent part by part; each accepted part is recorded at
//! once, so a retry resumes after it. A 429 carries the wait the service asked for (its body's
//! `retry_after`, or `Retry-After`); a 4xx that means "bad token / no such chat" is permanent.
//! A part that carries pictures has the same part without them beside it: a service that
//! answers 400 to the pictured part (Telegram could not fetch the photo, Slack could not
//! download an image) gets the plain one at once, so a picture never costs a message.
//! The URL of a request is never logged or put in an error (bot tokens live in paths), only its
//! host, and every message is scrubbed of the channel's secrets.

use super::{ChannelKind, Delivery, DeliveryError, Message, Notification, NotifyError, Secret};
use crate::fetch::{FetchConfig, FetchRequest, Fetched, Fetcher, Outgoing};
use http::header::{self, HeaderName};
use http::{Method, StatusCode};
use notifio_policy::{AttemptResult, RetryPolicies, SiteKey, TransportFailure};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Largest service answer read: error bodies are small JSON.
const RESPONSE_CAP: usize = 256 * 1024;
/// An error description from a service is cut to this many characters.
const DESCRIPTION_MAX: usize = 200;

/// One request that delivers one part of a message.
pub(crate) struct Call {
    /// Where (may hold a secret: never logged).
    pub url: String,
    /// What.
    pub outgoing: Outgoing,
    /// The same part without its pictures: sent instead when the service answers 400 to this
    /// one, and what counts from then on.
    pub plain: Option<Box<Self>>,
}

impl Call {
    /// A request with a JSON body.
    pub(crate) fn json(method: Method, url: String, body: &serde_json::Value) -> Self {
        Self {
            url,
            outgoing: Outgoing {
                method,
                headers: vec![
                    (header::CONTENT_TYPE, "application/json".to_owned()),
                    (header::ACCEPT, "application/json".to_owned()),
                ],
                body: serde_json::to_vec(body).unwrap_or_default().into(),
            },
            plain: None,
        }
    }

    /// A request with these headers and body.
    pub(crate) fn new(url: String, outgoing: Outgoing) -> Self {
        Self {
            url,
            outgoing,
            plain: None,
        }
    }

    /// Sets the same part without pictures, for a service that refuses them.
    #[must_use]
    pub(crate) fn or_without_pictures(mut self, plain: Self) -> Self {
        self.plain = Some(Box::new(plain));
        self
    }

    /// Adds a header.
    #[must_use]
    pub(crate) fn header(mut self, name: HeaderName, value: impl Into<String>) -> Self {
        self.outgoing.headers.push((name, value.into()));
        self
    }
}

/// What one service does: the requests for a message, and how to read the answers.
pub(crate) trait Service: Send + Sync {
    /// Which service.
    fn kind(&self) -> ChannelKind;
    /// The requests that deliver `msg`, one per part, in order (at least one).
    fn calls(&self, n: &Notification, msg: &Message, d: &Delivery) -> Vec<Call>;
    /// Whether a 2xx answer is an acceptance (Telegram also says `"ok": true`).
    fn accepted(&self, body: Option<&serde_json::Value>) -> bool {
        body.and_then(|b| b.get("ok"))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(true)
    }
    /// The wait a refusal's body asks for (Telegram's `parameters.retry_after`, …).
    fn retry_after(&self, _f: &Fetched, _body: Option<&serde_json::Value>) -> Option<Duration> {
        None
    }
    /// The service's own words for a refusal.
    fn description(&self, body: Option<&serde_json::Value>, text: &str) -> Option<String> {
        let from_json = body.and_then(|b| {
            ["description", "message", "error", "errorDescription"]
                .iter()
                .find_map(|k| b.get(*k).and_then(serde_json::Value::as_str))
                .map(str::to_owned)
        });
        from_json.or_else(|| {
            let t = text.trim();
            (!t.is_empty() && !t.starts_with('<') && !t.starts_with('{')).then(|| t.to_owned())
        })
    }
}

/// A channel that delivers over HTTP through the fetcher.
pub struct HttpChannel {
    service: Box<dyn Service>,
    fetcher: Fetcher,
    /// Scrubbed out of every message (defence in depth: a service could echo one back).
    secrets: Vec<Secret>,
}

impl HttpChannel {
    pub(crate) fn new(service: Box<dyn Service>, fetcher: Fetcher, secrets: Vec<Secret>) -> Self {
        Self {
            service,
            fetcher,
            secrets,
        }
    }

    /// Which service.
    #[must_use]
    pub fn kind(&self) -> ChannelKind {
        self.service.kind()
    }

    fn scrub(&self, text: &str) -> String {
        self.secrets
            .iter()
            .fold(text.to_owned(), |t, s| s.scrub(&t))
    }

    /// Sends the parts not yet accepted, in order, stopping at the first refusal.
    pub(crate) async fn send(
        &self,
        n: &Notification,
        msg: &Message,
        d: &Delivery,
        on_part: &(dyn Fn(u32) + Sync),
    ) -> Result<(), DeliveryError> {
        let calls = self.service.calls(n, msg, d);
        let never = CancellationToken::new();
        for (i, call) in calls.into_iter().enumerate().skip(d.parts_sent as usize) {
            let Call {
                url,
                outgoing,
                plain,
            } = call;
            let (status, verdict) = self.exchange(&url, outgoing, &never).await;
            match (verdict, plain) {
                (Err(e), Some(plain)) if status == Some(400) => {
                    // The service's words are scrubbed of secrets already.
                    tracing::warn!(
                        channel = %self.kind(),
                        error = %e.message,
                        "the service refused the message's pictures; sending it without them"
                    );
                    self.exchange(&plain.url, plain.outgoing, &never).await.1?;
                }
                (verdict, _) => verdict?,
            }
            on_part(u32::try_from(i + 1).unwrap_or(u32::MAX));
        }
        Ok(())
    }

    /// Sends one request and judges the answer: its status (when there was one) and whether it
    /// was accepted.
    async fn exchange(
        &self,
        url: &str,
        outgoing: Outgoing,
        never: &CancellationToken,
    ) -> (Option<u16>, Result<(), DeliveryError>) {
        let host = url::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| "?".to_owned());
        let Ok(site) = SiteKey::from_url(url) else {
            let mut e = DeliveryError::new(
                AttemptResult::Invalid,
                format!(
                    "{}: the service URL is not an http(s) URL with a host",
                    self.kind()
                ),
            );
            e.permanent = true;
            return (None, Err(e));
        };
        let req = FetchRequest::notify(url, site, outgoing);
        let fetched = self.fetcher.fetch(&req, never).await;
        (fetched.status(), self.judge(&host, &fetched))
    }

    /// Accepted, or why not.
    fn judge(&self, host: &str, f: &Fetched) -> Result<(), DeliveryError> {
        let kind = self.kind();
        let fail = |attempt, message: String| {
            let mut e = DeliveryError::new(attempt, self.scrub(&message));
            e.retried = true;
            e
        };
        if let Some(failure) = f.failure() {
            let attempt = match failure {
                TransportFailure::Timeout => AttemptResult::Timeout,
                TransportFailure::Connect => AttemptResult::Connect,
                _ => AttemptResult::Invalid,
            };
            let why = f.error().unwrap_or("no usable answer");
            return Err(fail(attempt, format!("{kind} {host}: {why}")));
        }
        let Some(status) = f.status() else {
            return Err(fail(
                AttemptResult::Invalid,
                format!("{kind} {host}: no answer"),
            ));
        };
        let body = (f.body().len() <= RESPONSE_CAP)
            .then(|| serde_json::from_slice::<serde_json::Value>(f.body()).ok())
            .flatten();
        if (200..300).contains(&status) && self.service.accepted(body.as_ref()) {
            return Ok(());
        }
        let reason = StatusCode::from_u16(status)
            .ok()
            .and_then(|c| c.canonical_reason())
            .unwrap_or("");
        let text = String::from_utf8_lossy(&f.body()[..f.body().len().min(1024)]);
        let said = self
            .service
            .description(body.as_ref(), &text)
            .or_else(|| {
                f.error()
                    .map(str::to_owned)
                    .filter(|_| (300..400).contains(&status))
            })
            .map(|d| {
                let clean: String = d.chars().filter(|c| !c.is_control()).collect();
                format!(": {}", super::message::truncate(&clean, DESCRIPTION_MAX))
            })
            .unwrap_or_default();
        let permanent = (300..500).contains(&status) && !matches!(status, 408 | 425 | 429);
        let mut e = fail(
            AttemptResult::Status(status),
            format!("{kind} {host}: HTTP {status} {reason}{said}")
                .replace("  ", " ")
                .replace(" :", ":"),
        );
        if permanent {
            e.message
                .push_str(" (not retried: fix the channel's settings, then restart notifio)");
        }
        e.permanent = permanent;
        e.retry_after = [f.retry_after(), self.service.retry_after(f, body.as_ref())]
            .into_iter()
            .flatten()
            .max();
        Err(e)
    }
}

/// The fetcher the channels share: the `notify` retry class, an honest User-Agent (services
/// are told who calls them; sites get a browser's), a small body cap for answers.
///
/// # Errors
/// The HTTP client cannot be initialised.
pub fn notify_fetcher(retry: &RetryPolicies) -> Result<Fetcher, NotifyError> {
    Fetcher::new(FetchConfig {
        user_agent: concat!("notifio/", env!("CARGO_PKG_VERSION")).to_owned(),
        body_cap: RESPONSE_CAP,
        retry: retry.clone(),
        ..FetchConfig::default()
    })
    .map_err(|e| NotifyError::Channel(format!("notification HTTP client: {e}")))
}
