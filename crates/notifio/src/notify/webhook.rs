//! The webhook channel: one HTTP POST per notification, as JSON (schema in
//! `docs/notifications.md`) or as ntfy-compatible plain text.
//!
//! Each POST is one attempt with a per-attempt timeout; retrying is the outbox's job (the
//! `notify` retry class, then the error ladder), so a delivery survives restarts and outages
//! instead of living in an in-memory retry loop. Only a 2xx counts as accepted.

use super::{DeliveryError, Message, Notification, NotifyError};
use notifio_policy::AttemptResult;
use serde::Serialize;
use std::time::Duration;

/// Version of the JSON body; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// How the body is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WebhookFormat {
    /// `application/json`: `{"version":1,"subject","text","type",…notification fields}`.
    #[default]
    Json,
    /// ntfy: the text as the body, the subject as `title`, the first link as `click`.
    Ntfy,
}

/// `[notify] webhook = {…}` as the config resolves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Where to POST.
    pub url: String,
    /// Body format.
    pub format: WebhookFormat,
    /// Per-attempt timeout (the notify retry class's `timeout`).
    pub timeout: Duration,
}

/// A ready webhook channel.
#[derive(Clone)]
pub struct Webhook {
    url: url::Url,
    format: WebhookFormat,
    client: reqwest::Client,
}

// Manual Debug: scheme and host only; webhook URLs often carry a token in the path or query.
impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field(
                "endpoint",
                &format!(
                    "{}://{}",
                    self.url.scheme(),
                    self.url.host_str().unwrap_or("?")
                ),
            )
            .field("format", &self.format)
            .finish()
    }
}

#[derive(Serialize)]
struct JsonBody<'a> {
    version: u32,
    subject: &'a str,
    text: &'a str,
    #[serde(flatten)]
    notification: &'a Notification,
}

impl Webhook {
    /// Builds the channel.
    ///
    /// # Errors
    /// The URL is not http(s), or the HTTP client cannot be built.
    pub fn new(settings: WebhookSettings) -> Result<Self, NotifyError> {
        let url = url::Url::parse(&settings.url)
            .map_err(|e| NotifyError::Webhook(format!("url {:?}: {e}", settings.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(NotifyError::Webhook(format!(
                "url {:?} must be http:// or https://",
                settings.url
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .user_agent(concat!("notifio/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| NotifyError::Webhook(format!("http client: {e}")))?;
        Ok(Self {
            url,
            format: settings.format,
            client,
        })
    }

    /// POSTs one notification; `Ok` only for a 2xx.
    pub(crate) async fn send(&self, n: &Notification, msg: &Message) -> Result<(), DeliveryError> {
        let request = match self.format {
            WebhookFormat::Json => {
                let body = serde_json::to_vec(&JsonBody {
                    version: SCHEMA_VERSION,
                    subject: &msg.subject,
                    text: &msg.text,
                    notification: n,
                })
                .map_err(|e| DeliveryError {
                    attempt: AttemptResult::Invalid,
                    message: format!("webhook: cannot encode JSON: {e}"),
                })?;
                self.client
                    .post(self.url.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body)
            }
            WebhookFormat::Ntfy => {
                // ntfy reads its headers from query parameters too; that keeps a non-ASCII
                // subject out of HTTP header values.
                let mut url = self.url.clone();
                url.query_pairs_mut().append_pair("title", &msg.subject);
                if let Some(link) = first_link(n) {
                    url.query_pairs_mut().append_pair("click", link);
                }
                self.client
                    .post(url)
                    .header(reqwest::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                    .body(msg.text.clone())
            }
        };
        let host = self.url.host_str().unwrap_or("?");
        match request.send().await {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(DeliveryError {
                attempt: AttemptResult::Status(resp.status().as_u16()),
                message: format!("webhook {host}: HTTP {}", resp.status()),
            }),
            Err(e) => Err(DeliveryError {
                attempt: if e.is_timeout() {
                    AttemptResult::Timeout
                } else {
                    AttemptResult::Connect
                },
                // without_url: the URL may carry a token in its query.
                message: format!("webhook {host}: {}", e.without_url()),
            }),
        }
    }
}

fn first_link(n: &Notification) -> Option<&str> {
    match n {
        Notification::NewListings { listings, .. } => {
            listings.iter().find_map(|l| l.url.as_deref())
        }
        _ => None,
    }
}
