//! `notifio.toml`: read, validated with a file:line:col for every mistake, then resolved against
//! the machine (docs/config.md, docs/architecture.md#precise-semantics).
//!
//! Three steps, as in ripgrep's lowargs → hiargs: `raw` keeps the spans, `validate` turns
//! text into checked values without I/O, `resolve` expands `~`, relative paths, platform
//! directories and env secrets. Everything a bad config can get wrong is caught here, before
//! anything runs (exit code 2); nothing here holds or prints a secret.

mod channels;
mod duration;
pub mod edit;
mod error;
mod raw;
mod resolve;
mod starter;
mod validate;
pub mod write;
pub use validate::{BLOCKABLE, MAX_INTERVAL, MAX_PAGES, MAX_SEARCHES_PER_SITE, text_digest};

pub use duration::{
    BUDGET_EXPECTED, DURATION_EXPECTED, HOURS_EXPECTED, SIZE_EXPECTED, parse_budget,
    parse_duration, parse_hours, parse_size,
};
pub use error::{ConfigError, Spot};
pub use resolve::{BROWSER_ENV, DASHBOARD_TOKEN_ENV, Environment, SMTP_PASSWORD_ENV, default_path};
pub use starter::{STARTER, write_starter};

use crate::extract::immoscout24_app::AppSearch;
pub use crate::fetch::FetchMode;
pub use crate::filter::AnnounceRules;
use crate::listing::ListingSpec;
pub use channels::{ChannelKind, ChannelName};
use notifio_policy::{BackoffPolicy, RetryPolicies, SiteKey, format_duration};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Intervals below this get a warning at start (docs/architecture.md#precise-semantics); they are not refused.
pub const WARN_INTERVAL_BELOW: Duration = Duration::from_secs(10);

/// The validated, resolved configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// `[watch]`: the loop's pace and where state lives.
    pub watch: WatchSettings,
    /// `[backoff]`: per-site ladders (docs/policy.md#four-ladders), validated by [`BackoffPolicy::new`].
    pub backoff: BackoffPolicy,
    /// `[retry.*]`: request-level retry per class (docs/policy.md#request-level-retry-and-why-the-probe-never-retries).
    pub retry: RetryPolicies,
    /// `[fetch]`: HTTP client settings.
    pub fetch: FetchSettings,
    /// `[notify]`: notification channels.
    pub notify: NotifySettings,
    /// `[browser]`: the browser that reads sites with `fetch = "browser"`.
    pub browser: BrowserSettings,
    /// `[[search]]`: at least one, names unique, in file order.
    pub searches: Vec<SearchConfig>,
    /// `[site."…"]`: per-site settings keyed by [`SiteKey`] text (`facebook.com`).
    pub sites: BTreeMap<String, SiteSettings>,
    /// A digest of the text it was read from: the live reload parses the file again only
    /// once its text differs from this.
    pub text_digest: u64,
    /// The site profiles: the built-in ones and the user's files in `sites/`
    /// (docs/sites.md#writing-a-profile).
    pub profiles: Arc<crate::extract::Catalog>,
}

/// `[watch]`.
#[derive(Clone, PartialEq)]
pub struct WatchSettings {
    /// Default interval between checks of one search (30s), ±10% jitter.
    pub interval: Duration,
    /// Minimum gap between two checks of one site, start to start (2s).
    pub spacing: Duration,
    /// Checks in flight at once, over all sites (4).
    pub concurrency: usize,
    /// The request budget of a site that sets none (`None`: no budget, fixed intervals).
    pub budget: Option<notifio_policy::RequestBudget>,
    /// Every search is checked at least this often (15 min), budget or not.
    pub max_interval: Duration,
    /// The hours listings come in, local time, for searches that set none (`None`: all day).
    pub active_hours: Option<notifio_policy::ActiveHours>,
    /// Where the database lives (the platform data dir, e.g. `~/.local/share/notifio`).
    pub state_dir: PathBuf,
    /// The dashboard's address (`127.0.0.1:7878`); `None` when `dashboard = false`.
    pub dashboard: Option<SocketAddr>,
    /// Bearer token for the dashboard: `NOTIFIO_DASHBOARD_TOKEN`, else `dashboard_token`.
    /// Redacted in `Debug`.
    pub dashboard_token: Option<String>,
    /// Host names the dashboard answers to besides its address, `localhost`, `127.0.0.1` and
    /// `[::1]` (requests naming any other host get 421): `name` or `name:port`.
    pub dashboard_hosts: Vec<String>,
    /// Announce the listings found by a search's first check (false: silent baseline).
    pub notify_existing: bool,
    /// Checks kept in history per search (100).
    pub history: usize,
    /// Good checks in a row that must miss a listing before it is gone (3).
    pub gone_after: u32,
    /// Defaults for every search's filters and price-change keys (none: every listing is
    /// announced, and every price drop).
    pub announce: AnnounceRules,
}

impl fmt::Debug for WatchSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchSettings")
            .field("interval", &self.interval)
            .field("spacing", &self.spacing)
            .field("concurrency", &self.concurrency)
            .field("state_dir", &self.state_dir)
            .field("dashboard", &self.dashboard)
            .field(
                "dashboard_token",
                &self.dashboard_token.as_ref().map(|_| "<redacted>"),
            )
            .field("dashboard_hosts", &self.dashboard_hosts)
            .field("notify_existing", &self.notify_existing)
            .field("history", &self.history)
            .field("gone_after", &self.gone_after)
            .field("announce", &self.announce)
            .finish()
    }
}

/// `[fetch]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchSettings {
    /// `User-Agent` header; `None` leaves the fetcher's default.
    pub user_agent: Option<String>,
    /// `Accept-Language` header; `None` leaves the fetcher's default.
    pub accept_language: Option<String>,
    /// Largest response body read, in bytes (10 MiB).
    pub body_cap: usize,
}

/// `[browser]`: how Notifio starts (or finds) the one browser it reads `fetch = "browser"`
/// sites with. Nothing here is checked against the machine until a browser is needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrowserSettings {
    /// `executable` (or `NOTIFIO_BROWSER`): a path or a command name on PATH; `None` = look
    /// for Chromium, Chrome, Edge or Brave (PATH, then the usual install locations). With
    /// where it was set, so a missing browser is reported at that key.
    pub executable: Option<(String, Spot)>,
    /// Run without a window (true).
    pub headless: bool,
    /// The persistent profile: cookies and logins live here (`<state_dir>/browser`).
    pub profile_dir: PathBuf,
    /// The DevTools URL of a browser the user already runs (`http://127.0.0.1:9222`): then
    /// Notifio starts nothing and closes nothing but its own tabs.
    pub connect: Option<String>,
    /// Resource types never loaded (`image`, `media`, `font`), as the DevTools Protocol
    /// names them, lower-case.
    pub block: Vec<String>,
}

/// `[notify]`. With no channel configured at all, `mailbox` is `state_dir/notifications.mbox`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifySettings {
    /// SMTP or sendmail delivery (channel `email`).
    pub email: Option<EmailSettings>,
    /// An mbox file to append to (resolved path; channel `mailbox`).
    pub mailbox: Option<PathBuf>,
    /// A JSON POST per message (channel `webhook`).
    pub webhook: Option<WebhookSettings>,
    /// Telegram, Discord, Slack, ntfy, Gotify, Pushover, Matrix and the desktop: from their
    /// tables first, then `urls`, in file order, each with its channel name.
    pub channels: Vec<ChannelSettings>,
    /// `[notify]`'s `quiet_hours`, `digest` and `heartbeat`: every channel's, unless its own
    /// table says otherwise.
    pub pacing: crate::notify::pace::Pacing,
    /// The channels whose own table sets any of them, by name: what they come to.
    pub channel_pacing: BTreeMap<String, crate::notify::pace::Pacing>,
}

impl NotifySettings {
    /// Every configured channel's name, in the order the notifier builds them: `email`,
    /// `mailbox`, `webhook`, then [`Self::channels`].
    #[must_use]
    pub fn channel_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        if self.email.is_some() {
            names.push("email".to_owned());
        }
        if self.mailbox.is_some() {
            names.push("mailbox".to_owned());
        }
        if self.webhook.is_some() {
            names.push("webhook".to_owned());
        }
        names.extend(self.channels.iter().map(|c| c.name.clone()));
        names
    }

    /// The quiet hours, digest and heartbeat of the channel `name`: its table's, else
    /// `[notify]`'s.
    #[must_use]
    pub fn pacing_of(&self, name: &str) -> crate::notify::pace::Pacing {
        self.channel_pacing
            .get(name)
            .copied()
            .unwrap_or(self.pacing)
    }
}

/// `[notify.email]` or `notify.email = {…}`, as the config resolves it (a string or an array
/// of recipients in the file; the password never comes from the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmailSettings {
    /// Recipients.
    pub to: Vec<String>,
    /// Sender address (`Notifio <notifio@example.com>`).
    pub from: String,
    /// `smtp://[user@]host[:port]`, `smtps://…`, `smtp+starttls://…`, or `sendmail` /
    /// `sendmail:/path/to/sendmail`.
    pub smtp: String,
    /// A file holding the password (mode 0600 or stricter). Used when the env var is unset.
    pub password_file: Option<PathBuf>,
    /// Send the password over `smtp://` to a server that offers no STARTTLS (false: only to
    /// a loopback server).
    pub allow_plaintext: bool,
}

/// How the body is written (`[notify] webhook.format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WebhookFormat {
    /// `application/json`: `{"version":1,"subject","text","type",…notification fields}`.
    #[default]
    Json,
    /// ntfy: the text as the body, the subject as `title`, the first link as `click`.
    Ntfy,
}

/// `[notify.webhook]` or `notify.webhook = {…}`: where to POST (a secret: `url`, `url_file` or
/// `NOTIFIO_WEBHOOK_URL`) and in which format.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// The URL's source.
    pub url: SecretSetting,
    /// Body format.
    pub format: WebhookFormat,
}

// Manual Debug: the URL's source, never the URL.
impl fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("url", &self.url)
            .field("format", &self.format)
            .finish()
    }
}

/// A secret's source (environment, file, config), resolved when the channel is built.
pub use crate::secret::SecretSetting;

/// One channel beyond email, mailbox and webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelSettings {
    /// Its name: the service (`telegram`), or `telegram-2`, … for more of one service.
    pub name: String,
    /// Where it delivers.
    pub service: ServiceSettings,
}

/// A service and its settings. Secrets are [`SecretSetting`]s: `Debug` never shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceSettings {
    /// `telegram = { token, chat_id, api }`.
    Telegram {
        /// Bot API base URL (`https://api.telegram.org`).
        api: String,
        /// The bot token.
        token: SecretSetting,
        /// The chat: `-100…`, a user id, or `@channel`.
        chat_id: String,
    },
    /// `discord = { url }`: the channel webhook URL (a secret).
    Discord {
        /// The webhook URL.
        url: SecretSetting,
    },
    /// `slack = { url }`: the incoming webhook URL (a secret).
    Slack {
        /// The webhook URL.
        url: SecretSetting,
    },
    /// `ntfy = { url, token }`: the topic URL (topics are secrets too) and an access token.
    Ntfy {
        /// The topic URL.
        url: SecretSetting,
        /// An access token, for protected topics.
        token: Option<SecretSetting>,
    },
    /// `gotify = { url, token }`: the server and an application token.
    Gotify {
        /// The server's base URL.
        url: String,
        /// The application token.
        token: SecretSetting,
    },
    /// `pushover = { user, token, api }`.
    Pushover {
        /// API base URL (`https://api.pushover.net`).
        api: String,
        /// The user (or group) key.
        user: SecretSetting,
        /// The application token.
        token: SecretSetting,
    },
    /// `matrix = { homeserver, room, token }`.
    Matrix {
        /// The homeserver's base URL (the `api` key overrides it).
        homeserver: String,
        /// The room id (`!abc:matrix.org`).
        room: String,
        /// An access token.
        token: SecretSetting,
    },
    /// `desktop = true`.
    Desktop,
}

/// One `[[search]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchConfig {
    /// Unique name, shown in notifications and `status`.
    pub name: String,
    /// The result page's http(s) URL.
    pub url: String,
    /// The site it belongs to (registry key).
    pub site: SiteKey,
    /// Its own interval, else `watch.interval`.
    pub interval: Duration,
    /// `idealista | immoscout24 | facebook | generic`: its own, else its site's, else `None`
    /// (chosen by site).
    pub profile: Option<String>,
    /// How to find listings on a generic site.
    pub listing: Option<ListingSpec>,
    /// Its own, else `watch.notify_existing`.
    pub notify_existing: bool,
    /// How its page is read: its site's `fetch`, else `browser` for the idealista and
    /// facebook profiles and `http` for the rest.
    pub fetch: FetchMode,
    /// `notify = ["telegram", "email"]`: the channels its notifications go to; `None` (the
    /// default) is every configured channel.
    pub notify: Option<Vec<String>>,
    /// Its filters and price-change rules, each key its own or `[watch]`'s. Shared: the
    /// searches that set none of these keys hold one copy, `[watch]`'s, and the watcher holds
    /// the same one.
    pub announce: Arc<AnnounceRules>,
    /// How many result pages a check reads: 1 (the default) to [`MAX_PAGES`].
    pub pages: u32,
    /// With `fetch = "app"`: the app's request for this search, worked out from `url` at
    /// start (ImmobilienScout24). Shared with the checks that send it.
    pub app: Option<Arc<AppSearch>>,
    /// `paused = true`: kept in the config, the store and the dashboard, never checked.
    pub paused: bool,
    /// With a budget, it is still checked at least this often: its own, else `watch.max_interval`.
    pub max_interval: Duration,
    /// With a budget, the hours its listings come in: its own, else `watch.active_hours`.
    pub active_hours: Option<notifio_policy::ActiveHours>,
}

/// One `[site."…"]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteSettings {
    /// A Netscape `cookies.txt` export for this site (resolved path).
    pub cookies: Option<PathBuf>,
    /// Its request budget, else `watch.budget` (see [`Config::budget_for`]).
    pub budget: Option<notifio_policy::RequestBudget>,
    /// Overrides `watch.spacing` for this site.
    pub spacing: Option<Duration>,
    /// Profile for this site's searches that name none.
    pub profile: Option<String>,
    /// `fetch = "http" | "browser" | "app"`; `None` = by profile (see
    /// [`SearchConfig::fetch`]).
    pub fetch: Option<FetchMode>,
    /// Where `notifio login` opens the site (else its first search's URL).
    pub login_url: Option<String>,
    /// With `fetch = "app"`: the app endpoint's base URL instead of the app's own.
    pub app_api: Option<url::Url>,
    /// The `User-Agent` of this site's plain requests instead of `[fetch] user_agent`.
    pub user_agent: Option<String>,
}

impl Config {
    /// The sites with their own `user_agent`, for [`crate::fetch::Fetcher::set_user_agents`].
    #[must_use]
    pub fn site_user_agents(&self) -> std::collections::HashMap<SiteKey, String> {
        self.sites
            .iter()
            .filter_map(|(site, s)| {
                let agent = s.user_agent.clone()?;
                Some((SiteKey::from_stored(site.clone()), agent))
            })
            .collect()
    }

    /// The request budget of `site`: its own, else `[watch] budget`, else none (fixed
    /// intervals).
    #[must_use]
    pub fn budget_for(&self, site: &SiteKey) -> Option<notifio_policy::RequestBudget> {
        self.sites
            .get(site.as_str())
            .and_then(|s| s.budget)
            .or(self.watch.budget)
    }

    /// Things that are allowed but probably unwise, one line each, for the log at start:
    /// intervals below 10s on real sites (loopback is exempt: that is tests and `demo`), the
    /// parameters of a search URL an app request leaves out (one line per search), and
    /// `[site]` tables no search uses.
    #[must_use]
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.searches {
            if s.interval < WARN_INTERVAL_BELOW && !is_loopback(&s.url) {
                out.push(format!(
                    "interval {} on \"{}\" is below 10s: real portals will block you",
                    format_duration(s.interval),
                    s.name
                ));
            }
            if let Some(w) = s.app.as_deref().and_then(AppSearch::warning) {
                out.push(format!("search \"{}\": {w}", s.name));
            }
        }
        for (site, settings) in &self.sites {
            let on_site: Vec<_> = self
                .searches
                .iter()
                .filter(|s| s.site.as_str() == site)
                .collect();
            if on_site.is_empty() {
                out.push(format!(
                    "[site.\"{site}\"] has settings but no search is on that site"
                ));
            } else if settings.cookies.is_some()
                && on_site.iter().all(|s| s.fetch == FetchMode::Browser)
            {
                out.push(format!(
                    "[site.\"{site}\"] cookies are used only with fetch = \"http\"; the browser \
                     uses its own profile (log in with `notifio login {site}`)"
                ));
            }
        }
        out
    }

    /// Whether any search is read through the browser.
    #[must_use]
    pub fn uses_browser(&self) -> bool {
        self.searches
            .iter()
            .any(|s| !s.paused && s.fetch == FetchMode::Browser)
    }

    /// The spacing in force for a site, the one place that decides it: its `[site]` setting,
    /// else what its searches' site profile asks for (`profile_default`: Facebook's, say),
    /// else `watch.spacing`.
    #[must_use]
    pub fn spacing_for(&self, site: &SiteKey, profile_default: Option<Duration>) -> Duration {
        self.sites
            .get(site.as_str())
            .and_then(|s| s.spacing)
            .or(profile_default)
            .unwrap_or(self.watch.spacing)
    }
}

fn is_loopback(u: &str) -> bool {
    match url::Url::parse(u)
        .ok()
        .and_then(|u| u.host().map(|h| h.to_owned()))
    {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost"),
        None => false,
    }
}

/// Reads, parses, validates and resolves the config file at `path`, then checks the files and
/// secrets it names on this machine (cookies files, the SMTP password): what every command runs
/// at start, so all of them accept or refuse a config alike.
///
/// # Errors
/// The file cannot be read (the message names the path and suggests `notifio init`), any
/// [`parse`] error, or a named file or secret that cannot be used (at the key naming it).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ConfigError::file(
                path,
                "no config file here",
                Some(format!(
                    "run `notifio init {}` to write a commented starter config, or pass --config",
                    path.display()
                )),
            )
        } else {
            ConfigError::file(path, format!("cannot read the config file: {e}"), None)
        }
    })?;
    load_text(&text, path)
}

/// A search name as names are compared (two names that look the same are the same name):
/// Unicode NFC, so `café` written with an `é` and written with `e` + a combining accent agree.
#[must_use]
pub fn name_key(name: &str) -> std::borrow::Cow<'_, str> {
    icu_normalizer::ComposingNormalizerBorrowed::new_nfc().normalize(name)
}

/// The state directory the config file at `path` names, read even when the file has a
/// mistake elsewhere (or does not parse at all): `notifio status` then still shows what the
/// running watcher does. Its `[watch] state_dir` if it can be found (by a TOML parse, else by
/// its line), resolved as [`load`] would; else the platform's data directory.
#[must_use]
pub fn state_dir_despite_errors(path: &Path) -> Option<PathBuf> {
    let env = Environment::from_process();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let written = match text.parse::<toml::Table>() {
        Ok(t) => t
            .get("watch")
            .and_then(|w| w.get("state_dir"))
            .and_then(toml::Value::as_str)
            .map(str::to_owned),
        Err(_) => state_dir_line(&text),
    };
    match written {
        Some(raw) => resolve::resolve_path(&raw, &resolve::base_dir(path), &env).ok(),
        None => env.data_dir,
    }
}

/// `state_dir = "…"` under `[watch]`, found line by line in a file TOML cannot parse.
fn state_dir_line(text: &str) -> Option<String> {
    let mut in_watch = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_watch = line.trim_end_matches(|c: char| c != ']') == "[watch]";
            continue;
        }
        let Some(value) = line.strip_prefix("state_dir").map(str::trim_start) else {
            continue;
        };
        let Some(value) = value.strip_prefix('=').map(str::trim) else {
            continue;
        };
        if in_watch {
            let quoted = value.strip_prefix('"')?;
            return quoted.split('"').next().map(str::to_owned);
        }
    }
    None
}

/// [`load`] of config `text` that is (or is about to be) the file at `path`: what the live
/// reload and the dashboard's edits run, so a text is accepted or refused exactly as `watch`
/// would at start.
///
/// # Errors
/// As [`load`], except reading the file.
pub fn load_text(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let (config, pending) = validate::config_and_checks(text, path, &Environment::from_process())?;
    resolve::check(&pending)?;
    Ok(config)
}

/// Parses, validates and resolves config `text` that came from `path` (used for messages and
/// as the base of relative paths), reading the process environment for `~`, the platform data
/// directory and `NOTIFIO_DASHBOARD_TOKEN`.
///
/// # Errors
/// The first problem found, with file:line:col, key and hint.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    parse_in(text, path, &Environment::from_process())
}

/// [`parse`] with an explicit [`Environment`] (tests, embedding).
///
/// # Errors
/// As [`parse`].
pub fn parse_in(text: &str, path: &Path, env: &Environment) -> Result<Config, ConfigError> {
    validate::config(text, path, env)
}

#[cfg(test)]
mod lenient_tests {
    use super::*;

    #[test]
    fn the_state_dir_is_found_in_a_file_that_does_not_parse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        std::fs::write(
            &path,
            "[watch]\nstate_dir = \"state\"\ninterval = \n[[search]\n",
        )
        .unwrap();
        assert_eq!(
            state_dir_despite_errors(&path),
            Some(dir.path().join("state"))
        );
        std::fs::write(
            &path,
            "[watch]\nstate_dir = \"/srv/n\"\ninterval = \"soon\"\n",
        )
        .unwrap();
        assert_eq!(
            state_dir_despite_errors(&path),
            Some(PathBuf::from("/srv/n"))
        );
        std::fs::write(&path, "[site.x]\nstate_dir = \"/not/this\"\n[[search\n").unwrap();
        assert_eq!(
            state_dir_despite_errors(&path),
            Environment::from_process().data_dir
        );
    }
}
