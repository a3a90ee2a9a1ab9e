//! Notifications: the outbox table, the messages, and the sender that delivers them on every
//! channel the user configured: email, an mbox file, a webhook, Telegram, Discord, Slack, ntfy,
//! Gotify, Pushover, Matrix and the desktop's own notifications.
//!
//! The watch loop writes a [`Notification`] into the outbox in the same transaction that records
//! new listings, one row per channel, so a crash can never lose one and one channel's outage
//! never holds another up; the [`Sender`] drains each channel in order and marks a row sent only
//! after the service accepted it (at most one duplicate per crash per channel). Every HTTP
//! channel goes through the [`crate::fetch::Fetcher`] with the `notify` retry class. A channel's
//! quiet hours, digest and heartbeat ([`pace`]) only decide when its rows go and how they are
//! merged; the outbox stays the one path. Secrets
//! (the SMTP password, bot tokens, webhook URLs) never reach a log line, the database, a `Debug`
//! string or an error.

pub mod desktop;
pub mod discord;
pub mod email;
pub mod gotify;
mod http;
pub mod mailbox;
pub mod matrix;
pub mod message;
pub mod ntfy;
pub mod outbox;
pub mod pace;
pub mod pushover;
pub mod sender;
pub mod slack;
pub mod telegram;
pub mod webhook;

use crate::config::ServiceSettings;
use crate::fetch::Fetcher;
use http::Service;
use notifio_policy::AttemptResult;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use desktop::Desktop;
pub use email::{Email, EmailError};
pub use http::{HttpChannel, notify_fetcher};
pub use mailbox::Mailbox;
pub use message::{Message, render};
pub use outbox::OutboxRow;
// The channels' settings and names are the config's vocabulary; secrets have a module of
// their own. Named here too, as what a channel is built from.
pub use crate::config::{ChannelKind, ChannelName, EmailSettings, WebhookFormat, WebhookSettings};
pub use crate::secret::{Secret, SecretSetting};
pub use sender::{DrainReport, Sender};
pub use webhook::Webhook;

/// File name of the default mailbox inside the state dir.
pub const DEFAULT_MAILBOX: &str = "notifications.mbox";

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
        /// Those of them that are likely on another site too (by listing id).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        also_on: Vec<AlsoOn>,
    },
    /// Known listings whose price changed, on one site in one check: drops, and rises when
    /// a search asks for them. Announced once per change.
    PriceChanged {
        /// Site key.
        site: String,
        /// Names of the searches it is announced to.
        searches: Vec<String>,
        /// The listings, with their new price.
        listings: Vec<crate::listing::Listing>,
        /// What changed, one per listing (by listing id).
        changes: Vec<crate::price::PriceChange>,
        /// When the change was seen (epoch ms).
        found_at: u64,
    },
    /// A site has refused us for a long time (once per episode).
    SiteBlocked {
        /// Site key.
        site: String,
        /// What the site's refusals are (`challenge`, `rate_limited`, `denied`, `error` in
        /// JSON).
        kind: notifio_policy::RefusalKind,
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
    /// What waited on one channel (its quiet hours, a digest period), merged into one message
    /// by the sender as it delivers ([`pace::digest`]): new listings and price changes, each
    /// listing once, with all its notes. Never in the outbox: its rows are.
    Digest {
        /// The sites of the listings, as shown ("idealista.com, fotocasa.es").
        site: String,
        /// Every search that found them.
        searches: Vec<String>,
        /// The listings, each once, as last seen.
        listings: Vec<crate::listing::Listing>,
        /// How many of them are new (the others are known listings whose price changed).
        new: usize,
        /// The price changes, one per listing (by listing id): the first price to the last.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        changes: Vec<crate::price::PriceChange>,
        /// New listings that are likely on another site too (by listing id).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        also_on: Vec<AlsoOn>,
        /// How many notifications it merges.
        merged: usize,
        /// When the latest of them was found (epoch ms).
        found_at: u64,
    },
    /// "Still watching: 1,440 checks, 12 new, 0 errors since …": what the checks of one
    /// period did, so that a channel's silence can be trusted (its `heartbeat`).
    Heartbeat {
        /// Checks made in the period.
        checks: u64,
        /// New listings they found.
        new: u64,
        /// Checks that could not read their page (refused, failed, layout unknown).
        errors: u64,
        /// Start of the period (epoch ms).
        since: u64,
        /// The same as the user's clock showed it ("Tue 14 Nov 22:13").
        since_local: String,
    },
}

/// A new listing that is likely the same flat as one first seen on another site
/// ([`crate::duplicate`]): "also on idealista.com, seen 2 h ago".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlsoOn {
    /// The new listing's id.
    pub id: String,
    /// The other site.
    pub site: String,
    /// The other listing's link.
    pub url: Option<String>,
    /// When Notifio first saw the other listing (epoch ms).
    pub seen_at: u64,
}

impl Notification {
    /// Site, searches and listings of a notification about listings (new ones, or price
    /// changes); `None` for the other kinds. Every channel shows these listings one by one,
    /// each with its [`message::notes`].
    #[must_use]
    pub fn listings(&self) -> Option<(&str, &[String], &[crate::listing::Listing])> {
        match self {
            Self::NewListings {
                site,
                searches,
                listings,
                ..
            }
            | Self::PriceChanged {
                site,
                searches,
                listings,
                ..
            }
            | Self::Digest {
                site,
                searches,
                listings,
                ..
            } => Some((site, searches, listings)),
            _ => None,
        }
    }

    /// The `type` tag, for logs.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NewListings { .. } => "new_listings",
            Self::PriceChanged { .. } => "price_changed",
            Self::SiteBlocked { .. } => "site_blocked",
            Self::SessionExpired { .. } => "session_expired",
            Self::Digest { .. } => "digest",
            Self::Heartbeat { .. } => "heartbeat",
        }
    }
}

/// One way of reaching the user, ready to deliver.
pub enum Channel {
    /// SMTP or sendmail (boxed: its transport is large, and there is one of it).
    Email(Box<Email>),
    /// An mbox file.
    Mailbox(Mailbox),
    /// A service reached over HTTP through the fetcher (webhook, Telegram, Discord, …).
    Http(HttpChannel),
    /// The desktop's notification service.
    Desktop(Desktop),
}

impl Channel {
    /// What kind of service it is.
    #[must_use]
    pub fn kind(&self) -> ChannelKind {
        match self {
            Self::Email(_) => ChannelKind::Email,
            Self::Mailbox(_) => ChannelKind::Mailbox,
            Self::Http(h) => h.kind(),
            Self::Desktop(_) => ChannelKind::Desktop,
        }
    }

    /// Delivers one message. `parts_sent` parts of it were accepted before (a message the
    /// service's limits split); `on_part(n)` is called as soon as part `n` (1-based) is
    /// accepted, so a retry resumes after it instead of sending it twice.
    pub(crate) async fn deliver(
        &self,
        n: &Notification,
        msg: &Message,
        delivery: &Delivery,
        on_part: &(dyn Fn(u32) + Sync),
    ) -> Result<(), DeliveryError> {
        match self {
            Self::Email(e) => e.send(msg).await,
            Self::Mailbox(m) => m.append(msg, delivery.now_ms).await,
            Self::Http(h) => h.send(n, msg, delivery, on_part).await,
            Self::Desktop(d) => d.show(n, msg).await,
        }
    }
}

/// Which delivery of which row this is: what services that split or deduplicate need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Delivery {
    /// The outbox row (Matrix's transaction id).
    pub id: i64,
    /// When the row was enqueued (with the id, unique across a reset state directory).
    pub created_at: u64,
    /// Parts the service already accepted.
    pub parts_sent: u32,
    /// Now (epoch ms).
    pub now_ms: u64,
}

/// The deadline of one whole delivery when the config sets none: the `notify` retry class's
/// default deadline.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(20);

/// Where notifications go: the configured channels, each under its [`ChannelName`].
pub struct Channels {
    list: Vec<(ChannelName, Channel)>,
    /// Each channel's quiet hours, digest and heartbeat; a channel not here has none.
    pacing: Vec<(ChannelName, pace::Pacing)>,
    /// How long one delivery may take in all, whatever the channel.
    deadline: Duration,
}

impl Default for Channels {
    fn default() -> Self {
        Self {
            list: Vec::new(),
            pacing: Vec::new(),
            deadline: DEFAULT_DEADLINE,
        }
    }
}

// Manual Debug: names the channels, never their settings (they hold secrets).
impl fmt::Debug for Channels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.list.iter().map(|(n, _)| n.as_str()))
            .finish()
    }
}

impl Channels {
    /// No channels.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The deadline of one whole delivery on any channel (the `notify` retry class's
    /// `deadline`): a service that accepts the connection and then says nothing costs its own
    /// channel this long and no other channel anything.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// See [`Self::with_deadline`]. Default: 20 s.
    #[must_use]
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Delivers one message on the channel `name` within [`Self::deadline`] (connect, TLS, the
    /// service's dialogue and its answer all count). See [`Channel::deliver`] for the parts.
    pub(crate) async fn deliver(
        &self,
        name: &ChannelName,
        n: &Notification,
        msg: &Message,
        delivery: &Delivery,
        on_part: &(dyn Fn(u32) + Sync),
    ) -> Result<(), DeliveryError> {
        let Some(channel) = self.get(name) else {
            return Err(DeliveryError::new(
                AttemptResult::Invalid,
                format!("the {name} channel is not configured; its messages wait for it"),
            ));
        };
        match tokio::time::timeout(self.deadline, channel.deliver(n, msg, delivery, on_part)).await
        {
            Ok(r) => r,
            Err(_) => Err(DeliveryError::new(
                AttemptResult::Timeout,
                format!(
                    "{name}: no complete answer within {} (retry.notify.deadline)",
                    notifio_policy::format_duration(self.deadline)
                ),
            )),
        }
    }

    /// Adds a channel under the next free name of its kind (`telegram`, then `telegram-2`).
    #[must_use]
    pub fn with(mut self, channel: Channel) -> Self {
        let kind = channel.kind();
        let n = self.list.iter().filter(|(_, c)| c.kind() == kind).count() + 1;
        self.list.push((ChannelName::numbered(kind, n), channel));
        self
    }

    /// Adds a channel under a name of its own (the one the config gave it).
    #[must_use]
    pub fn with_named(mut self, name: ChannelName, channel: Channel) -> Self {
        self.list.push((name, channel));
        self
    }

    /// Sets the quiet hours, digest and heartbeat of the channel `name`
    /// (docs/notifications.md#quiet-hours-digests-and-a-heartbeat).
    #[must_use]
    pub fn with_pacing(mut self, name: impl Into<ChannelName>, pacing: pace::Pacing) -> Self {
        let name = name.into();
        self.pacing.retain(|(n, _)| *n != name);
        self.pacing.push((name, pacing));
        self
    }

    /// The quiet hours, digest and heartbeat of the channel `name` (none unless set).
    #[must_use]
    pub fn pacing(&self, name: &ChannelName) -> pace::Pacing {
        self.pacing
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| *p)
            .unwrap_or_default()
    }

    /// Adds the email channel.
    #[must_use]
    pub fn with_email(self, email: Email) -> Self {
        self.with(Channel::Email(Box::new(email)))
    }

    /// Adds the mbox channel.
    #[must_use]
    pub fn with_mailbox(self, mailbox: Mailbox) -> Self {
        self.with(Channel::Mailbox(mailbox))
    }

    /// Adds the webhook channel.
    #[must_use]
    pub fn with_webhook(self, webhook: Webhook) -> Self {
        self.with(Channel::Http(webhook.into_channel()))
    }

    /// The channels the config asks for, or when none is configured the default mailbox
    /// `<state_dir>/notifications.mbox` (so a fresh install shows notifications without any
    /// account). Secrets come from the environment (`NOTIFIO_<CHANNEL>_TOKEN`, …), then their
    /// `*_file`, then the config itself.
    ///
    /// # Errors
    /// An unusable email setup, a secret file that others can read, a missing secret, or an
    /// HTTP client that cannot be built.
    pub fn from_config(cfg: &crate::config::Config) -> Result<Self, NotifyError> {
        Self::from_config_with_env(cfg, &|name| {
            std::env::var(name).ok().filter(|v| !v.trim().is_empty())
        })
    }

    /// [`Self::from_config`] reading environment variables through `env` (tests).
    ///
    /// # Errors
    /// As [`Self::from_config`].
    pub fn from_config_with_env(
        cfg: &crate::config::Config,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, NotifyError> {
        let n = &cfg.notify;
        let mut channels = Self::new().with_deadline(cfg.retry.notify.deadline());
        if let Some(settings) = &n.email {
            let password = env(email::PASSWORD_ENV).map(Secret::new);
            channels = channels.with_email(Email::with_password(
                settings.clone(),
                password,
                cfg.retry.notify.timeout(),
            )?);
        }
        if let Some(path) = &n.mailbox {
            // Already resolved by the config: a relative `mailbox` is relative to the config
            // file's directory, like every path in it (docs/config.md), not to `state_dir`.
            channels = channels.with_mailbox(Mailbox::new(path.clone()));
        }
        let needs_http = n.webhook.is_some()
            || n.channels
                .iter()
                .any(|c| !matches!(c.service, ServiceSettings::Desktop));
        let fetcher = if needs_http {
            Some(notify_fetcher(&cfg.retry)?)
        } else {
            None
        };
        if let (Some(settings), Some(fetcher)) = (&n.webhook, &fetcher) {
            channels = channels.with_webhook(Webhook::new(settings, fetcher.clone(), env)?);
        }
        for c in &n.channels {
            let name = ChannelName::new(c.name.clone());
            let channel = match (&c.service, &fetcher) {
                (ServiceSettings::Desktop, _) => Channel::Desktop(Desktop::new()),
                (service, Some(fetcher)) => {
                    Channel::Http(http_channel(service, fetcher.clone(), env)?)
                }
                (_, None) => continue, // unreachable: `needs_http` covers every HTTP channel
            };
            channels = channels.with_named(name, channel);
        }
        if channels.list.is_empty() {
            channels =
                channels.with_mailbox(Mailbox::new(cfg.watch.state_dir.join(DEFAULT_MAILBOX)));
        }
        for name in channels.names() {
            let pacing = n.pacing_of(name.as_str());
            if pacing != pace::Pacing::default() {
                channels = channels.with_pacing(name, pacing);
            }
        }
        Ok(channels)
    }

    /// The default when nothing is configured: the mbox file in `state_dir`.
    #[must_use]
    pub fn default_mailbox(state_dir: &Path) -> Self {
        Self::new().with_mailbox(Mailbox::new(state_dir.join(DEFAULT_MAILBOX)))
    }

    /// The configured channels' names, in config order: what the outbox rows are written for.
    #[must_use]
    pub fn names(&self) -> Vec<ChannelName> {
        self.list.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The channel called `name`.
    #[must_use]
    pub fn get(&self, name: &ChannelName) -> Option<&Channel> {
        self.list.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// Every channel with its name.
    pub fn iter(&self) -> impl Iterator<Item = (&ChannelName, &Channel)> {
        self.list.iter().map(|(n, c)| (n, c))
    }
}

/// The channel `service` describes, its secrets read (environment through `env`, then file,
/// then config).
fn http_channel(
    service: &ServiceSettings,
    fetcher: Fetcher,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<HttpChannel, NotifyError> {
    let (svc, secrets): (Box<dyn Service>, Vec<Secret>) = match service {
        ServiceSettings::Telegram {
            api,
            token,
            chat_id,
        } => {
            let token = token.resolve(env)?;
            (
                Box::new(telegram::Telegram::new(api, token.clone(), chat_id)),
                vec![token],
            )
        }
        ServiceSettings::Discord { url } => {
            let url = url.resolve(env)?;
            (Box::new(discord::Discord::new(&url)), vec![url])
        }
        ServiceSettings::Slack { url } => {
            let url = url.resolve(env)?;
            (Box::new(slack::Slack::new(&url)), vec![url])
        }
        ServiceSettings::Ntfy { url, token } => {
            let url = url.resolve(env)?;
            let token = token.as_ref().map(|t| t.resolve(env)).transpose()?;
            let mut secrets = vec![url.clone()];
            secrets.extend(token.clone());
            (Box::new(ntfy::Ntfy::new(&url, token)), secrets)
        }
        ServiceSettings::Gotify { url, token } => {
            let token = token.resolve(env)?;
            (
                Box::new(gotify::Gotify::new(url, token.clone())),
                vec![token],
            )
        }
        ServiceSettings::Pushover { api, user, token } => {
            let token = token.resolve(env)?;
            let user = user.resolve(env)?;
            (
                Box::new(pushover::Pushover::new(api, user.clone(), token.clone())),
                vec![token, user],
            )
        }
        ServiceSettings::Matrix {
            homeserver,
            room,
            token,
        } => {
            let token = token.resolve(env)?;
            (
                Box::new(matrix::Matrix::new(homeserver, room, token.clone())),
                vec![token],
            )
        }
        ServiceSettings::Desktop => {
            return Err(NotifyError::Channel(
                "the desktop channel is not an HTTP channel".to_owned(),
            ));
        }
    };
    Ok(HttpChannel::new(svc, fetcher, secrets))
}

/// One failed delivery attempt: what the retry policy needs to know, and a message that is safe
/// to log and store (never a secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryError {
    /// How the attempt ended, for [`notifio_policy::RetryPolicy::should_retry`].
    pub attempt: AttemptResult,
    /// Human-readable reason, free of secrets.
    pub message: String,
    /// The service asked us to wait this long (a 429's `retry_after`, a `Retry-After`).
    pub retry_after: Option<Duration>,
    /// Retrying cannot help (a bad token, a chat that does not exist): the channel holds its
    /// rows until notifio starts again, and `status` says why.
    pub permanent: bool,
    /// The transport already made the `notify` class's quick retries (the fetcher does), so the
    /// outbox goes straight to the error ladder.
    pub retried: bool,
}

impl DeliveryError {
    /// A failure that may be retried, with no wait asked for.
    #[must_use]
    pub fn new(attempt: AttemptResult, message: impl Into<String>) -> Self {
        Self {
            attempt,
            message: message.into(),
            retry_after: None,
            permanent: false,
            retried: false,
        }
    }
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
    /// A channel cannot be set up (a missing or exposed secret, an unusable URL). The message
    /// names the config key and never contains the secret.
    #[error("{0}")]
    Channel(String),
    /// A channel's secret cannot be read (unset, an unreadable or exposed file). The message
    /// names the config key and never contains the secret.
    #[error(transparent)]
    Secret(#[from] crate::secret::SecretError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::Listing;
    use crate::price::PriceChange;

    /// Every channel that lays listings out its own way shows each listing's notes: the price
    /// drop (with the subject saying so) and "Also on …" under the right title.
    #[test]
    fn every_channel_shows_a_listings_notes() {
        let flat = Listing {
            id: "7".into(),
            title: Some("Sunny flat".into()),
            price: Some(1050.0),
            currency: Some("EUR".into()),
            url: Some("https://portal.example/listing/7".into()),
            ..Listing::default()
        };
        let drop = Notification::PriceChanged {
            site: "portal.example".into(),
            searches: vec!["Madrid".into()],
            listings: vec![flat.clone()],
            changes: vec![PriceChange {
                id: "7".into(),
                from: 1200.0,
                to: 1050.0,
                currency: Some("EUR".into()),
            }],
            found_at: 0,
        };
        let twin = Notification::NewListings {
            site: "portal.example".into(),
            searches: vec!["Madrid".into()],
            listings: vec![flat],
            found_at: 7_200_000,
            also_on: vec![AlsoOn {
                id: "7".into(),
                site: "idealista.com".into(),
                url: Some("https://www.idealista.com/inmueble/9/".into()),
                seen_at: 0,
            }],
        };
        for (n, note) in [
            (&drop, "Price dropped: 1,200 → 1,050 EUR (\u{2212}12.5%)"),
            (&twin, "Also on idealista.com, seen 2 h ago"),
        ] {
            let msg = render(n);
            let outputs: Vec<(&str, String)> = vec![
                ("text", msg.text.clone()),
                ("telegram", telegram::texts(n, &msg).concat()),
                ("discord", format!("{:?}", discord::bodies(n, &msg))),
                ("slack", format!("{:?}", slack::bodies(n, &msg))),
                ("ntfy", ntfy::texts(n, &msg).concat()),
                ("gotify", gotify::markdown(n, &msg).replace('\\', "")),
                ("pushover", format!("{:?}", pushover::messages(n, &msg))),
                ("matrix", format!("{:?}", matrix::events(n, &msg))),
                ("desktop", desktop::content(n, &msg).1),
            ];
            for (channel, out) in outputs {
                assert!(out.contains(note), "{channel} lacks `{note}`: {out}");
            }
        }
        assert!(render(&drop).subject.starts_with("Price dropped: "));
    }
}
