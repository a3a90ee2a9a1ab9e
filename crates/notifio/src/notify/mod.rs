//! Notifications: the outbox table, the messages, and the sender that delivers them by email,
//! to an mbox file and to a webhook.
//!
//! The watch loop writes a [`Notification`] into the outbox in the same transaction that records
//! new listings, so a crash can never lose one; the [`Sender`] drains the outbox in order and
//! marks a row sent only after the transport accepted it (at most one duplicate per crash).
//! The SMTP password never reaches a log line, the database, a `Debug` string or an error.

pub mod email;
pub mod mailbox;
pub mod message;
pub mod outbox;
pub mod sender;
pub mod webhook;

use notifio_policy::AttemptResult;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

pub use email::{Email, EmailError, EmailSettings, Secret};
pub use mailbox::Mailbox;
pub use message::{Message, render};
pub use outbox::OutboxRow;
pub use sender::{DrainReport, Sender};
pub use webhook::{Webhook, WebhookFormat, WebhookSettings};

/// File name of the default mailbox inside the state dir.
pub const DEFAULT_MAILBOX: &str = "notifications.mbox";

/// A way of reaching the user. The outbox holds one row per (notification, channel), so an
/// email outage never re-sends the mbox copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// SMTP or sendmail.
    Email,
    /// An mbox file on disk.
    Mailbox,
    /// An HTTP POST (JSON or ntfy plain text).
    Webhook,
}

impl ChannelKind {
    /// All kinds.
    pub const ALL: [Self; 3] = [Self::Email, Self::Mailbox, Self::Webhook];

    /// The name stored in the outbox's `channel` column.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Mailbox => "mailbox",
            Self::Webhook => "webhook",
        }
    }

    /// Parses [`Self::as_str`] back.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something worth telling the user. Stored as JSON in the outbox and sent as-is (plus subject
/// and text) in the webhook's JSON body; `type` names the variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Notification {
    /// New listings on one site found in one check. `searches` names every search that found
    /// them, so a flat found by two searches is announced once, naming both.
    NewListings {
        /// Site key (`idealista.com`).
        site: String,
        /// Names of the searches that found them in this check.
        searches: Vec<String>,
        /// The new listings.
        listings: Vec<crate::listing::Listing>,
        /// When they were found (epoch ms).
        found_at: u64,
    },
    /// A site has refused us for a long time (once per episode).
    SiteBlocked {
        /// Site key.
        site: String,
        /// Refusal kind (`challenge`, `rate_limited`, `denied`, `error`).
        kind: String,
        /// Start of the episode (epoch ms).
        since: u64,
        /// Searches on that site that cannot run.
        searches: Vec<String>,
    },
    /// A site with cookies logged us out (once per episode).
    SessionExpired {
        /// Site key.
        site: String,
        /// Where the user should put fresh cookies (a path, never cookie values).
        cookies_path: Option<String>,
        /// The site is read in the browser: the user logs in again with `notifio login`.
        #[serde(default)]
        login: bool,
    },
}

impl Notification {
    /// The `type` tag, for logs.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NewListings { .. } => "new_listings",
            Self::SiteBlocked { .. } => "site_blocked",
            Self::SessionExpired { .. } => "session_expired",
        }
    }
}

/// Where notifications go: built from settings by the lead's config resolution.
#[derive(Default)]
pub struct Channels {
    email: Option<Email>,
    mailbox: Option<Mailbox>,
    webhook: Option<Webhook>,
}

// Manual Debug: says which channels exist, never their settings (the email one holds a secret).
impl fmt::Debug for Channels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.kinds()).finish()
    }
}

impl Channels {
    /// No channels.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the email channel.
    #[must_use]
    pub fn with_email(mut self, email: Email) -> Self {
        self.email = Some(email);
        self
    }

    /// Adds the mbox channel.
    #[must_use]
    pub fn with_mailbox(mut self, mailbox: Mailbox) -> Self {
        self.mailbox = Some(mailbox);
        self
    }

    /// Adds the webhook channel.
    #[must_use]
    pub fn with_webhook(mut self, webhook: Webhook) -> Self {
        self.webhook = Some(webhook);
        self
    }

    /// The `[notify]` section resolved: the channels configured, or when none is, the default
    /// mailbox `<state_dir>/notifications.mbox` (so a fresh install shows notifications without
    /// any account). A relative mailbox path is relative to `state_dir`.
    ///
    /// # Errors
    /// An unusable email setup (bad URL or address, missing or exposed password) or webhook URL.
    pub fn from_settings(
        email: Option<EmailSettings>,
        mailbox: Option<PathBuf>,
        webhook: Option<WebhookSettings>,
        state_dir: &Path,
    ) -> Result<Self, NotifyError> {
        let mut channels = Self::new();
        if let Some(settings) = email {
            channels.email = Some(Email::from_settings(settings)?);
        }
        if let Some(settings) = webhook {
            channels.webhook = Some(Webhook::new(settings)?);
        }
        let mailbox = match mailbox {
            Some(path) => Some(state_dir.join(path)),
            None if channels.email.is_none() && channels.webhook.is_none() => {
                Some(state_dir.join(DEFAULT_MAILBOX))
            }
            None => None,
        };
        channels.mailbox = mailbox.map(Mailbox::new);
        Ok(channels)
    }

    /// The configured channels: what [`outbox::enqueue`] should be given.
    #[must_use]
    pub fn kinds(&self) -> Vec<ChannelKind> {
        let mut kinds = Vec::new();
        if self.email.is_some() {
            kinds.push(ChannelKind::Email);
        }
        if self.mailbox.is_some() {
            kinds.push(ChannelKind::Mailbox);
        }
        if self.webhook.is_some() {
            kinds.push(ChannelKind::Webhook);
        }
        kinds
    }

    /// Delivers one message on one channel.
    pub(crate) async fn deliver(
        &self,
        kind: ChannelKind,
        n: &Notification,
        msg: &Message,
        now_ms: u64,
    ) -> Result<(), DeliveryError> {
        let not_configured = || DeliveryError {
            attempt: AttemptResult::Invalid,
            message: format!("the {kind} channel is no longer configured; the row waits for it"),
        };
        match kind {
            ChannelKind::Email => match &self.email {
                Some(e) => e.send(msg).await,
                None => Err(not_configured()),
            },
            ChannelKind::Mailbox => match &self.mailbox {
                Some(m) => m.append(msg, now_ms).await,
                None => Err(not_configured()),
            },
            ChannelKind::Webhook => match &self.webhook {
                Some(w) => w.send(n, msg).await,
                None => Err(not_configured()),
            },
        }
    }
}

/// One failed delivery attempt: what the retry policy needs to know, and a message that is safe
/// to log and store (never a secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryError {
    /// How the attempt ended, for [`notifio_policy::RetryPolicy::should_retry`].
    pub attempt: AttemptResult,
    /// Human-readable reason, free of secrets.
    pub message: String,
}

impl fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeliveryError {}

/// Why the notifier could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// The outbox database could not be opened or queried.
    #[error("outbox database {path}: {source}")]
    Database {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// The email channel is misconfigured.
    #[error(transparent)]
    Email(#[from] EmailError),
    /// The webhook URL is unusable.
    #[error("webhook: {0}")]
    Webhook(String),
}
