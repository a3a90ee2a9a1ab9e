//! `[notify]`'s service channels (Telegram, Discord, Slack, ntfy, Gotify, Pushover, Matrix, the
//! desktop), Apprise-style `urls`, and the names a search's `notify = [...]` may use.
//!
//! Pure like the rest of validation: secrets are only *located* here ([`SecretSetting`]: an
//! inline value, a `…_file`, an environment variable) and read when the notifier builds its
//! channels, so a config error can never contain one. A URL that holds a secret (a webhook, an
//! Apprise URL) is described when it is wrong, never echoed.

use super::raw::{Field, Table, suggestion};
use super::resolve::{Environment, resolve_path};
use super::{ChannelSettings, ConfigError, SecretSetting, ServiceSettings};
use crate::notify::pace::{Pacing, QuietHours};
use crate::secret::Secret;
use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

type Result<T> = std::result::Result<T, ConfigError>;

/// Telegram's Bot API, unless `api` says otherwise.
const TELEGRAM_API: &str = "https://api.telegram.org";
/// Pushover's API, unless `api` says otherwise.
const PUSHOVER_API: &str = "https://api.pushover.net";

/// The kind of service a channel delivers to. A channel's [`ChannelName`] starts with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// SMTP or sendmail.
    Email,
    /// An mbox file on disk.
    Mailbox,
    /// An HTTP POST (JSON or ntfy plain text).
    Webhook,
    /// A Telegram bot's `sendMessage`.
    Telegram,
    /// A Discord channel webhook.
    Discord,
    /// A Slack incoming webhook.
    Slack,
    /// An ntfy topic.
    Ntfy,
    /// A Gotify server's `/message`.
    Gotify,
    /// Pushover's `messages.json`.
    Pushover,
    /// A Matrix room.
    Matrix,
    /// The desktop's notification service (D-Bus on Linux).
    Desktop,
}

impl ChannelKind {
    /// All kinds, in the order `[notify]` documents them.
    pub const ALL: [Self; 11] = [
        Self::Email,
        Self::Mailbox,
        Self::Webhook,
        Self::Telegram,
        Self::Discord,
        Self::Slack,
        Self::Ntfy,
        Self::Gotify,
        Self::Pushover,
        Self::Matrix,
        Self::Desktop,
    ];

    /// The `[notify]` key, and the name of the first channel of this kind.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Mailbox => "mailbox",
            Self::Webhook => "webhook",
            Self::Telegram => "telegram",
            Self::Discord => "discord",
            Self::Slack => "slack",
            Self::Ntfy => "ntfy",
            Self::Gotify => "gotify",
            Self::Pushover => "pushover",
            Self::Matrix => "matrix",
            Self::Desktop => "desktop",
        }
    }

    /// Parses [`Self::as_str`] back.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A kind names its first channel, so outbox rows can be written for `ChannelKind::Email`.
impl AsRef<str> for ChannelKind {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A configured channel's name: its kind (`telegram`), or for a second channel of the same
/// kind (from `urls`) `telegram-2`, and so on in config order. It is what a search's
/// `notify = [...]` lists, what the outbox's `channel` column holds and what `status` shows.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChannelName(String);

impl ChannelName {
    /// A name as stored or configured.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The `n`-th channel (1-based) of `kind`: `telegram`, `telegram-2`, ….
    #[must_use]
    pub fn numbered(kind: ChannelKind, n: usize) -> Self {
        if n <= 1 {
            Self(kind.as_str().to_owned())
        } else {
            Self(format!("{}-{n}", kind.as_str()))
        }
    }

    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The kind the name starts with, if it is one of ours.
    #[must_use]
    pub fn kind(&self) -> Option<ChannelKind> {
        let base = match self.0.rsplit_once('-') {
            Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
            _ => self.0.as_str(),
        };
        ChannelKind::parse(base)
    }
}

impl From<ChannelKind> for ChannelName {
    fn from(kind: ChannelKind) -> Self {
        Self::numbered(kind, 1)
    }
}

impl fmt::Display for ChannelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl AsRef<str> for ChannelName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The `[notify]` keys of the service channels, in the order they are built.
pub(super) const SERVICE_KEYS: &[&str] = &[
    "telegram", "discord", "slack", "ntfy", "gotify", "pushover", "matrix", "desktop", "urls",
];

/// Apprise schemes we understand.
const SCHEMES: &[&str] = &[
    "tgram", "discord", "slack", "ntfy", "ntfys", "gotify", "gotifys", "pover", "matrix",
    "matrixs", "dbus",
];

/// The variable a channel's secret may come from: `NOTIFIO_TELEGRAM_TOKEN`.
pub(crate) fn env_name(kind: ChannelKind, key: &str) -> String {
    format!(
        "NOTIFIO_{}_{}",
        kind.as_str().to_ascii_uppercase(),
        key.to_ascii_uppercase()
    )
}

/// `key` / `key_file` / `NOTIFIO_<KIND>_<KEY>` of table `t`.
fn secret(
    t: &Table<'_>,
    kind: ChannelKind,
    key: &str,
    base: &Path,
    env: &Environment,
    check: fn(&Field<'_>, &str) -> Result<()>,
) -> Result<SecretSetting> {
    let file_key = format!("{key}_file");
    let value = t.get(key);
    let file = t.get(&file_key);
    if let (Some(_), Some(f)) = (&value, &file) {
        return Err(f
            .err(format!("give `{key}` or `{file_key}`, not both"))
            .with_hint(format!(
                "keep the secret out of the config: `{file_key}` (mode 0600) or {}",
                env_name(kind, key)
            )));
    }
    let value = match value {
        Some(f) => {
            let s = f.non_empty_str()?;
            check(&f, s)?;
            Some(Secret::new(s))
        }
        None => None,
    };
    let file = match file {
        Some(f) => Some(resolve_path(f.str()?, base, env).map_err(|m| f.err(m))?),
        None => None,
    };
    Ok(SecretSetting {
        key: format!("notify.{}.{key}", kind.as_str()),
        env: Some(env_name(kind, key)),
        file,
        value,
    })
}

fn no_check(_: &Field<'_>, _: &str) -> Result<()> {
    Ok(())
}

/// An http(s) URL with a host, described (never echoed) when it is not one.
fn web_url(f: &Field<'_>, s: &str) -> Result<()> {
    match url::Url::parse(s) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some_and(|h| !h.is_empty()) =>
        {
            Ok(())
        }
        Ok(_) => Err(f.err("must be an http:// or https:// URL with a host")),
        Err(e) => Err(f.err(format!("not a URL: {e}"))),
    }
}

/// A plain (non-secret) URL setting, with a default.
fn url_setting(t: &Table<'_>, key: &str, default: Option<&str>) -> Result<String> {
    match t.get(key) {
        Some(f) => {
            let s = f.non_empty_str()?;
            web_url(&f, s)?;
            Ok(s.trim_end_matches('/').to_owned())
        }
        None => default.map(str::to_owned).ok_or_else(|| {
            t.err(key, format!("missing `{key}`"))
                .with_hint(format!("{key} = \"https://…\""))
        }),
    }
}

/// A string or integer id (`chat_id = -1001234567890` or `"@channel"`).
fn id_setting(t: &Table<'_>, key: &str, hint: &str) -> Result<String> {
    let Some(f) = t.get(key) else {
        return Err(t
            .err(key, format!("missing `{key}`"))
            .with_hint(hint.to_owned()));
    };
    match f.as_integer() {
        Some(n) => Ok(n.to_string()),
        None => Ok(f.non_empty_str()?.to_owned()),
    }
}

fn room(f: &Field<'_>, s: &str) -> Result<String> {
    if s.starts_with('!') && s.contains(':') {
        Ok(s.to_owned())
    } else {
        Err(f
            .err("a Matrix room is given by its id, like \"!abc123:matrix.org\"")
            .with_hint("find it in the room's settings (Advanced → Internal room ID); aliases like #room:server are not resolved"))
    }
}

fn table_channel(
    t: &Table<'_>,
    kind: ChannelKind,
    base: &Path,
    env: &Environment,
) -> Result<ServiceSettings> {
    let allow = |keys: &[&str]| {
        let mut all = keys.to_vec();
        all.extend_from_slice(PACING_KEYS);
        t.allow(&all)
    };
    Ok(match kind {
        ChannelKind::Telegram => {
            allow(&["token", "token_file", "chat_id", "api"])?;
            ServiceSettings::Telegram {
                api: url_setting(t, "api", Some(TELEGRAM_API))?,
                token: secret(t, kind, "token", base, env, no_check)?,
                chat_id: id_setting(
                    t,
                    "chat_id",
                    "chat_id = \"-1001234567890\" (a group), a user id, or \"@channelname\"",
                )?,
            }
        }
        ChannelKind::Discord | ChannelKind::Slack => {
            allow(&["url", "url_file"])?;
            let url = secret(t, kind, "url", base, env, web_url)?;
            if kind == ChannelKind::Discord {
                ServiceSettings::Discord { url }
            } else {
                ServiceSettings::Slack { url }
            }
        }
        ChannelKind::Ntfy => {
            allow(&["url", "url_file", "token", "token_file"])?;
            let token = (t.get("token").is_some() || t.get("token_file").is_some())
                .then(|| secret(t, kind, "token", base, env, no_check))
                .transpose()?;
            ServiceSettings::Ntfy {
                url: secret(t, kind, "url", base, env, web_url)?,
                token,
            }
        }
        ChannelKind::Gotify => {
            allow(&["url", "token", "token_file"])?;
            ServiceSettings::Gotify {
                url: url_setting(t, "url", None)?,
                token: secret(t, kind, "token", base, env, no_check)?,
            }
        }
        ChannelKind::Pushover => {
            allow(&["user", "user_file", "token", "token_file", "api"])?;
            ServiceSettings::Pushover {
                api: url_setting(t, "api", Some(PUSHOVER_API))?,
                user: secret(t, kind, "user", base, env, no_check)?,
                token: secret(t, kind, "token", base, env, no_check)?,
            }
        }
        ChannelKind::Matrix => {
            allow(&["homeserver", "api", "room", "token", "token_file"])?;
            let homeserver = match t.get("api") {
                Some(_) => url_setting(t, "api", None)?,
                None => url_setting(t, "homeserver", None)?,
            };
            let Some(room_f) = t.get("room") else {
                return Err(t
                    .err("room", "missing `room`")
                    .with_hint("room = \"!abc123:matrix.org\""));
            };
            ServiceSettings::Matrix {
                homeserver,
                room: room(&room_f, room_f.non_empty_str()?)?,
                token: secret(t, kind, "token", base, env, no_check)?,
            }
        }
        _ => ServiceSettings::Desktop,
    })
}

/// The keys of a channel's rhythm, in `[notify]` and in each channel's table.
pub(super) const PACING_KEYS: &[&str] = &["quiet_hours", "digest", "heartbeat"];

/// The shortest and longest digest period.
const DIGEST_RANGE: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(86_400));
/// The shortest and longest heartbeat period.
const HEARTBEAT_RANGE: (Duration, Duration) =
    (Duration::from_secs(3600), Duration::from_secs(720 * 3600));

/// `quiet_hours`, `digest` and `heartbeat` of table `t`, each over `base` (`[notify]`'s, for
/// a channel's table); `""` or `"off"` turns one off.
pub(super) fn pacing(t: &Table<'_>, base: Pacing) -> Result<Pacing> {
    let mut p = base;
    if let Some(f) = t.get("quiet_hours") {
        p.quiet_hours = QuietHours::parse(f.str()?).map_err(|m| {
            f.err(m).with_hint(
                "quiet_hours = \"23:00-07:00\": nothing is sent from 23:00 to 07:00 local time, \
                 then one digest of what came in",
            )
        })?;
    }
    p.digest = period(
        t,
        "digest",
        base.digest,
        DIGEST_RANGE,
        "digest = \"1h\": at most one message an hour",
    )?;
    p.heartbeat = period(
        t,
        "heartbeat",
        base.heartbeat,
        HEARTBEAT_RANGE,
        "heartbeat = \"24h\": a \"Still watching\" message once a day",
    )?;
    Ok(p)
}

/// [`pacing`] of a channel's table, if it sets any of its keys.
pub(super) fn own_pacing(t: &Table<'_>, base: Pacing) -> Result<Option<Pacing>> {
    if PACING_KEYS.iter().all(|k| t.get(k).is_none()) {
        return Ok(None);
    }
    pacing(t, base).map(Some)
}

/// A period setting (`digest`, `heartbeat`) within `range`, `"off"` or `""` for none.
fn period(
    t: &Table<'_>,
    key: &str,
    base: Option<Duration>,
    (min, max): (Duration, Duration),
    hint: &str,
) -> Result<Option<Duration>> {
    let Some(f) = t.get(key) else {
        return Ok(base);
    };
    if f.as_str()
        .is_some_and(|s| s.trim().is_empty() || s.trim().eq_ignore_ascii_case("off"))
    {
        return Ok(None);
    }
    let d = f
        .duration()
        .map_err(|e| e.with_hint(format!("{hint}, or \"off\"")))?;
    if d < min || d > max {
        return Err(f
            .err(format!(
                "must be from {} to {}",
                notifio_policy::format_duration(min),
                notifio_policy::format_duration(max)
            ))
            .with_hint(hint.to_owned()));
    }
    Ok(Some(d))
}

/// The service channels of `[notify]` (`t`), tables first, then `urls`, with their names; a
/// table that sets its own `quiet_hours`, `digest` or `heartbeat` (over `base`) goes into
/// `pacings` under its channel's name.
pub(super) fn parse(
    t: &Table<'_>,
    base: &Path,
    env: &Environment,
    pacing_base: Pacing,
    pacings: &mut BTreeMap<String, Pacing>,
) -> Result<Vec<ChannelSettings>> {
    let mut out: Vec<(ChannelKind, ServiceSettings)> = Vec::new();
    let mut own: Vec<(ChannelKind, Pacing)> = Vec::new();
    for key in SERVICE_KEYS.iter().filter(|k| **k != "urls") {
        let Some(f) = t.get(key) else { continue };
        let Some(kind) = ChannelKind::parse(key) else {
            continue;
        };
        if kind == ChannelKind::Desktop {
            if f.bool()? {
                out.push((kind, ServiceSettings::Desktop));
            }
            continue;
        }
        let table = f.table()?;
        out.push((kind, table_channel(&table, kind, base, env)?));
        if let Some(p) = own_pacing(&table, pacing_base)? {
            own.push((kind, p));
        }
    }
    if let Some(f) = t.get("urls") {
        let elems = f
            .array()
            .map_err(|_| f.type_err("an array of URLs like [\"tgram://TOKEN/CHAT_ID\"]"))?;
        for (i, e) in elems.iter().enumerate() {
            let s = e.non_empty_str()?;
            let key = format!("notify.urls[{i}]");
            let parsed = apprise(s, &key).map_err(|(m, hint)| {
                let err = e.err(m);
                match hint {
                    Some(h) => err.with_hint(h),
                    None => err,
                }
            })?;
            out.extend(parsed);
        }
    }
    // Tables come first and there is one per kind: each names its kind's first channel.
    for (kind, p) in own {
        pacings.insert(ChannelName::numbered(kind, 1).to_string(), p);
    }
    let mut named = Vec::with_capacity(out.len());
    for (i, (kind, service)) in out.iter().enumerate() {
        let n = out[..=i].iter().filter(|(k, _)| k == kind).count();
        named.push(ChannelSettings {
            name: ChannelName::numbered(*kind, n).to_string(),
            service: service.clone(),
        });
    }
    Ok(named)
}

/// A search's `notify = ["telegram", "email"]`, each a configured channel's name.
pub(super) fn routes(f: &Field<'_>, names: &[String]) -> Result<Vec<String>> {
    let elems = f
        .array()
        .map_err(|_| f.type_err("an array of channel names like [\"telegram\", \"email\"]"))?;
    let valid: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut out: Vec<String> = Vec::with_capacity(elems.len());
    for e in &elems {
        let name = e.non_empty_str()?;
        if !valid.contains(&name) {
            return Err(e
                .err(format!("no channel `{name}` is configured in [notify]"))
                .with_hint(suggestion(name, &valid, "channels")));
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

type Parsed = std::result::Result<Vec<(ChannelKind, ServiceSettings)>, (String, Option<String>)>;

/// An Apprise URL (`tgram://TOKEN/CHAT_ID`, `discord://ID/TOKEN`, `ntfys://host/topic`, …) as
/// the channel(s) it names. Errors describe the URL by its scheme only: the rest is secret.
pub(crate) fn apprise(url: &str, key: &str) -> Parsed {
    let Some(u) = AppriseUrl::split(url, key) else {
        return bad(
            "not an Apprise URL",
            "write SERVICE://…, e.g. tgram://TOKEN/CHAT_ID",
        );
    };
    match u.scheme.as_str() {
        "tgram" => telegram_url(&u),
        "discord" => discord_url(&u),
        "slack" => slack_url(&u),
        "ntfy" | "ntfys" => ntfy_url(&u),
        "gotify" | "gotifys" => gotify_url(&u),
        "pover" => pushover_url(&u),
        "matrix" | "matrixs" => matrix_url(&u),
        "dbus" => Ok(vec![(ChannelKind::Desktop, ServiceSettings::Desktop)]),
        other => Err((
            format!("`{other}://` is not a service notifio supports"),
            Some(suggestion(other, SCHEMES, "schemes")),
        )),
    }
}

/// An Apprise URL that names no channel, and how to write one.
fn bad(m: &str, hint: &str) -> Parsed {
    Err((m.to_owned(), Some(hint.to_owned())))
}

/// An Apprise URL in its parts: `scheme://user@host/segments?query#fragment` (`authority` is
/// `user@host`), read by hand since a token is rarely a valid URL host or port.
struct AppriseUrl<'a> {
    /// The config key the URL is at, for the secrets it holds.
    key: &'a str,
    /// Lowercase.
    scheme: String,
    authority: &'a str,
    user: Option<&'a str>,
    host: &'a str,
    /// The path's non-empty segments, percent-decoded.
    segments: Vec<String>,
    query: &'a str,
    fragment: Option<&'a str>,
}

impl<'a> AppriseUrl<'a> {
    /// `None` without a `SERVICE://`.
    fn split(url: &'a str, key: &'a str) -> Option<Self> {
        let (scheme, rest) = url.trim().split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, q),
            None => (rest, ""),
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (rest, None),
        };
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, p),
            None => (rest, ""),
        };
        let (user, host) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(decode)
            .collect();
        Some(Self {
            key,
            scheme,
            authority,
            user,
            host,
            segments,
            query,
            fragment,
        })
    }

    /// The query's parameter `name`, decoded.
    fn param(&self, name: &str) -> Option<String> {
        url::form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// A secret written in the URL.
    fn inline(&self, value: String) -> SecretSetting {
        SecretSetting::inline(self.key, value)
    }
}

/// The web address of `host`, over TLS or not (an Apprise scheme ending in `s`).
fn web(tls: bool, host: &str) -> String {
    format!("{}://{host}", if tls { "https" } else { "http" })
}

/// `tgram://BOT_TOKEN/CHAT_ID[/CHAT_ID…]`: a channel per chat.
fn telegram_url(u: &AppriseUrl<'_>) -> Parsed {
    // The token has a colon (`123456:ABC…`), which is no URL port: read it whole.
    let token = decode(u.authority);
    if token.is_empty() || u.segments.is_empty() {
        return bad(
            "a Telegram URL needs a bot token and a chat id",
            "tgram://BOT_TOKEN/CHAT_ID",
        );
    }
    Ok(u.segments
        .iter()
        .map(|chat| {
            (
                ChannelKind::Telegram,
                ServiceSettings::Telegram {
                    api: TELEGRAM_API.to_owned(),
                    token: u.inline(token.clone()),
                    chat_id: chat.clone(),
                },
            )
        })
        .collect())
}

/// `discord://WEBHOOK_ID/WEBHOOK_TOKEN`.
fn discord_url(u: &AppriseUrl<'_>) -> Parsed {
    match u.segments.as_slice() {
        [token] if !u.host.is_empty() => Ok(vec![(
            ChannelKind::Discord,
            ServiceSettings::Discord {
                url: u.inline(format!(
                    "https://discord.com/api/webhooks/{}/{token}",
                    decode(u.host)
                )),
            },
        )]),
        _ => bad(
            "a Discord URL needs the webhook's id and token",
            "discord://WEBHOOK_ID/WEBHOOK_TOKEN",
        ),
    }
}

/// `slack://TOKEN_A/TOKEN_B/TOKEN_C`.
fn slack_url(u: &AppriseUrl<'_>) -> Parsed {
    match u.segments.as_slice() {
        [b, c] if !u.host.is_empty() && u.fragment.is_none() => Ok(vec![(
            ChannelKind::Slack,
            ServiceSettings::Slack {
                url: u.inline(format!(
                    "https://hooks.slack.com/services/{}/{b}/{c}",
                    decode(u.host)
                )),
            },
        )]),
        _ => bad(
            "a Slack URL needs the incoming webhook's three tokens (a channel cannot be chosen: the webhook has one)",
            "slack://TOKEN_A/TOKEN_B/TOKEN_C",
        ),
    }
}

/// `ntfy://TOPIC` (ntfy.sh), `ntfys://[TOKEN@]HOST/TOPIC[?token=…]`.
fn ntfy_url(u: &AppriseUrl<'_>) -> Parsed {
    let tls = u.scheme == "ntfys";
    if u.user.is_some_and(|user| user.contains(':')) {
        return bad(
            "ntfy user:password is not supported",
            "use an access token: ntfys://host/topic?token=tk_…",
        );
    }
    let token = u
        .param("token")
        .or_else(|| u.user.map(decode))
        .filter(|t| !t.is_empty());
    let (server, topic) = match u.segments.as_slice() {
        [] if !u.host.is_empty() => ("https://ntfy.sh".to_owned(), decode(u.host)),
        [topic] if !u.host.is_empty() => (web(tls, u.host), topic.clone()),
        _ => {
            return bad(
                "an ntfy URL names one topic",
                "ntfy://TOPIC (ntfy.sh), ntfys://HOST/TOPIC",
            );
        }
    };
    Ok(vec![(
        ChannelKind::Ntfy,
        ServiceSettings::Ntfy {
            url: u.inline(format!("{server}/{topic}")),
            token: token.map(|t| u.inline(t)),
        },
    )])
}

/// `gotifys://HOST[/PATH…]/TOKEN`.
fn gotify_url(u: &AppriseUrl<'_>) -> Parsed {
    match u.segments.split_last() {
        Some((token, prefix)) if !u.host.is_empty() => {
            let mut server = web(u.scheme == "gotifys", u.host);
            for p in prefix {
                server.push('/');
                server.push_str(p);
            }
            Ok(vec![(
                ChannelKind::Gotify,
                ServiceSettings::Gotify {
                    url: server,
                    token: u.inline(token.clone()),
                },
            )])
        }
        _ => bad(
            "a Gotify URL needs a host and an application token",
            "gotifys://HOST/TOKEN",
        ),
    }
}

/// `pover://USER_KEY@APP_TOKEN`.
fn pushover_url(u: &AppriseUrl<'_>) -> Parsed {
    match (u.user, u.segments.as_slice()) {
        (Some(user), []) if !user.is_empty() && !u.host.is_empty() => Ok(vec![(
            ChannelKind::Pushover,
            ServiceSettings::Pushover {
                api: PUSHOVER_API.to_owned(),
                user: u.inline(decode(user)),
                token: u.inline(decode(u.host)),
            },
        )]),
        _ => bad(
            "a Pushover URL needs the user key and the application token (devices cannot be chosen)",
            "pover://USER_KEY@APP_TOKEN",
        ),
    }
}

/// `matrixs://ACCESS_TOKEN@HOMESERVER/!ROOM_ID:SERVER`.
fn matrix_url(u: &AppriseUrl<'_>) -> Parsed {
    let Some(token) = u
        .user
        .filter(|user| !user.is_empty() && !user.contains(':'))
    else {
        return bad(
            "a Matrix URL needs an access token (logging in with user:password is not supported)",
            "matrixs://ACCESS_TOKEN@HOMESERVER/!ROOM_ID:SERVER",
        );
    };
    match (u.segments.as_slice(), u.fragment) {
        ([r], None) if r.starts_with('!') && !u.host.is_empty() => Ok(vec![(
            ChannelKind::Matrix,
            ServiceSettings::Matrix {
                homeserver: web(u.scheme == "matrixs", u.host),
                room: r.clone(),
                token: u.inline(decode(token)),
            },
        )]),
        _ => bad(
            "a Matrix URL names one room by its id (aliases like #room are not resolved)",
            "matrixs://ACCESS_TOKEN@HOMESERVER/!ROOM_ID:SERVER",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(url: &str) -> ServiceSettings {
        let mut v = apprise(url, "k").unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0).1
    }

    fn secret(s: &SecretSetting) -> &str {
        s.value.as_ref().unwrap().expose()
    }

    #[test]
    fn apprise_urls_name_the_services() {
        let ServiceSettings::Telegram {
            token,
            chat_id,
            api,
        } = one("tgram://123456:AA-bb_C/-1001234567890")
        else {
            panic!()
        };
        assert_eq!(
            (secret(&token), chat_id.as_str(), api.as_str()),
            (
                "123456:AA-bb_C",
                "-1001234567890",
                "https://api.telegram.org"
            )
        );
        assert_eq!(apprise("tgram://1:x/2/3", "k").unwrap().len(), 2);
        let ServiceSettings::Discord { url } = one("discord://42/tok") else {
            panic!()
        };
        assert_eq!(secret(&url), "https://discord.com/api/webhooks/42/tok");
        let ServiceSettings::Slack { url } = one("slack://T1/B2/C3") else {
            panic!()
        };
        assert_eq!(secret(&url), "https://hooks.slack.com/services/T1/B2/C3");
        let ServiceSettings::Ntfy { url, token } = one("ntfy://flats") else {
            panic!()
        };
        assert_eq!((secret(&url), token), ("https://ntfy.sh/flats", None));
        let ServiceSettings::Ntfy { url, token } = one("ntfys://ntfy.example.org/flats?token=tk_1")
        else {
            panic!()
        };
        assert_eq!(
            (secret(&url), secret(token.as_ref().unwrap())),
            ("https://ntfy.example.org/flats", "tk_1")
        );
        let ServiceSettings::Gotify { url, token } = one("gotify://127.0.0.1:8080/sub/Atok") else {
            panic!()
        };
        assert_eq!(
            (url.as_str(), secret(&token)),
            ("http://127.0.0.1:8080/sub", "Atok")
        );
        let ServiceSettings::Pushover { user, token, .. } = one("pover://ukey@atok") else {
            panic!()
        };
        assert_eq!((secret(&user), secret(&token)), ("ukey", "atok"));
        let ServiceSettings::Matrix {
            homeserver,
            room,
            token,
        } = one("matrixs://syt_x@matrix.org/!abc:matrix.org")
        else {
            panic!()
        };
        assert_eq!(
            (homeserver.as_str(), room.as_str(), secret(&token)),
            ("https://matrix.org", "!abc:matrix.org", "syt_x")
        );
        assert_eq!(one("dbus://"), ServiceSettings::Desktop);
    }

    #[test]
    fn bad_apprise_urls_name_the_scheme_never_the_secret() {
        let (m, hint) = apprise("mailto://me:hunter2@example.com", "k").unwrap_err();
        assert_eq!(m, "`mailto://` is not a service notifio supports");
        assert!(hint.unwrap().contains("tgram"));
        let (m, _) = apprise("tgram://sekrit-token", "k").unwrap_err();
        assert!(!m.contains("sekrit"), "{m}");
        assert!(apprise("matrix://user:pw@host/!r:x", "k").is_err());
        assert!(apprise("matrixs://tok@host/#alias:x", "k").is_err());
    }
}
