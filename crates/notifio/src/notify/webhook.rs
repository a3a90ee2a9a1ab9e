//! The webhook channel: one HTTP POST per notification, as JSON (schema in
//! `docs/notifications.md`) or as ntfy-compatible plain text, through the fetcher's `notify`
//! retry class like every HTTP channel.
//!
//! Only a 2xx counts as accepted. Beyond the fetcher's quick retries, retrying is the outbox's
//! job (then the error ladder), so a delivery survives restarts and outages instead of living in
//! an in-memory loop. The URL is a secret (Slack, ntfy topics and the like carry one): it never
//! reaches a log line or an error, only its host does.

use super::http::{Call, HttpChannel, Service};
use super::{ChannelKind, Delivery, Message, Notification, NotifyError};
use crate::config::{WebhookFormat, WebhookSettings};
use crate::fetch::{Fetcher, Outgoing};
use http::Method;
use http::header;
use serde::Serialize;
use std::fmt;

/// Version of the JSON body; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// A ready webhook channel.
pub struct Webhook {
    url: url::Url,
    format: WebhookFormat,
    fetcher: Fetcher,
    secret: super::Secret,
}

// Manual Debug: scheme and host only; webhook URLs often carry a token in the path or query.
impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
    /// Builds the channel, reading its URL (environment through `env`, file, config).
    ///
    /// # Errors
    /// The URL is missing, unreadable, or not http(s) with a host (the message never shows it).
    pub fn new(
        settings: &WebhookSettings,
        fetcher: Fetcher,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, NotifyError> {
        let secret = settings.url.resolve(env)?;
        let url = url::Url::parse(secret.expose())
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .ok_or_else(|| {
                NotifyError::Webhook(
                    "the URL must be an http:// or https:// URL with a host".into(),
                )
            })?;
        Ok(Self {
            url,
            format: settings.format,
            fetcher,
            secret,
        })
    }

    /// As a channel of [`super::Channels`].
    #[must_use]
    pub fn into_channel(self) -> HttpChannel {
        let (fetcher, secret) = (self.fetcher.clone(), self.secret.clone());
        HttpChannel::new(Box::new(self), fetcher, vec![secret])
    }
}

impl Service for Webhook {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Webhook
    }

    fn calls(&self, n: &Notification, msg: &Message, _d: &Delivery) -> Vec<Call> {
        match self.format {
            WebhookFormat::Json => vec![Call::json(
                Method::POST,
                self.url.to_string(),
                &serde_json::to_value(JsonBody {
                    version: SCHEMA_VERSION,
                    subject: &msg.subject,
                    text: &msg.text,
                    notification: n,
                })
                .unwrap_or_default(),
            )],
            WebhookFormat::Ntfy => {
                // ntfy reads its headers from query parameters too; that keeps a non-ASCII
                // subject out of HTTP header values.
                let mut url = self.url.clone();
                url.query_pairs_mut().append_pair("title", &msg.subject);
                if let Some(link) = first_link(n) {
                    url.query_pairs_mut().append_pair("click", link);
                }
                vec![Call {
                    url: url.to_string(),
                    outgoing: Outgoing {
                        method: Method::POST,
                        headers: vec![(
                            header::CONTENT_TYPE,
                            "text/plain; charset=utf-8".to_owned(),
                        )],
                        body: msg.text.clone().into(),
                    },
                    plain: None,
                }]
            }
        }
    }

    fn accepted(&self, _body: Option<&serde_json::Value>) -> bool {
        true
    }
}

fn first_link(n: &Notification) -> Option<&str> {
    n.listings()
        .and_then(|(_, _, listings)| listings.iter().find_map(|l| l.url.as_deref()))
}
