//! The commented starter config that `notifio init` writes.
//!
//! It must always parse (a test does exactly that), so everything optional is commented out with
//! its default, and the one live search is a real, valid example to edit.

use super::ConfigError;
use std::io::Write;
use std::path::Path;

/// The starter `notifio.toml`: one search to edit, every other key commented out at its default.
pub const STARTER: &str = r#"# notifio.toml: what to watch, and how politely.
# Every key is optional except at least one [[search]]. Durations are "200ms", "30s", "2m", "1h".
# Relative paths are relative to this file; "~" is your home directory.
# Reference: docs/config.md
# `notifio watch` follows this file: edits apply live, no restart. Its dashboard
# (http://127.0.0.1:7878/) adds, edits, pauses and deletes searches by editing this file too,
# keeping your comments.

# One [[search]] per result page to watch. Names must be unique.
[[search]]
name = "Madrid under 1200"
url = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/con-precio-hasta_1200/"
# interval = "45s"          # this search's own interval (default: watch.interval)
# profile = "idealista"     # idealista | immoscout24 | facebook | generic (default: by site)
# notify_existing = false   # announce what the first check finds, instead of a silent baseline
# notify = ["telegram", "email"]   # the channels this search notifies (default: every one in [notify])
# paused = true             # kept, but not checked (the dashboard's Pause / Resume)
# Filters decide what is announced (everything is recorded); each may also go in [watch]:
# max_price = 1200          # also min_price, min_rooms / max_rooms, min_area / max_area (m²)
# include = ["terraza", "/balc[oó]n/"]   # at least one in the title or description (accents, case ignored)
# exclude = ["WG", "Tausch"]             # none of these
# strict = false            # true: an unknown price/rooms/area fails a bound set on it
# min_drop = "5%"           # smallest price drop announced (or an amount: 50); any drop by default
# notify_price_rises = false
# skip_cross_site_duplicates = false   # true: do not announce a flat likely seen on another site
# pages = 1                 # result pages to read per check, 1 to 10, each a request under the spacing
# max_interval = "15m"      # with a site budget: checked at least this often (default: watch.max_interval)
# active_hours = "08:00-22:00"   # with a site budget: the hours its listings come in (default: watch.active_hours)

# ImmobilienScout24: paste the web search URL; it is read through the request IS24's app sends.
# [[search]]
# name = "Berlin 2 rooms"
# url = "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten?numberofrooms=2.0-"

# A site without a built-in profile: tell notifio how to find listings, in one of these ways.
# [[search]]
# name = "Local agency"
# url = "https://agency.example/rentals?max=1200"
# listing = { selector = "article.listing", id_attr = "data-id" }
#   # each field a card shows may be located inside it (else it is found by default):
#   # title / price / rooms / area / image / description = ".sub-selector" or { selector = "img", attr = "data-src" }
# listing = { link = "/listing/(\\d+)" }     # a regex with one capture group: the id
# listing = "json-ld"                        # the page's JSON-LD ItemList
#   # with `pages`, the next page is its rel="next" link, or: next = "li.pagination-next"

[watch]
# interval = "30s"          # default interval per search, ±10% jitter; below 10s portals block you
# spacing = "2s"            # at least this long between two requests to one site
# concurrency = 4           # checks in flight at once
# state_dir = "~/.local/share/notifio"   # default: your platform's data directory
# dashboard = "127.0.0.1:7878"           # false to disable; other addresses need a token
# dashboard_token = "…"     # or set NOTIFIO_DASHBOARD_TOKEN (preferred)
# notify_existing = false
# history = 100             # checks kept per search
# gone_after = 3            # a listing missing from its searches' pages on 3 good checks in a row is gone
# budget = "4/min"          # a request budget per site: at most 4 requests in any minute, spent on each
#                           # site's searches where its listings appear (docs/policy.md). Worth it once a
#                           # site has two or more searches; without one, every search keeps its interval.
# max_interval = "15m"      # with a budget, every search is still checked at least this often
# active_hours = "07:00-23:00"   # with a budget, the hours listings come in (local time); quieter outside

# Where notifications go. With none configured: state_dir/notifications.mbox.
[notify]
# mailbox = "notifications.mbox"
# email = { to = "me@example.com", from = "notifio@localhost", smtp = "smtp+starttls://me@smtp.example.com:587" }
#   (password: env NOTIFIO_SMTP_PASSWORD or password_file = "~/.config/notifio/smtp-password")
# webhook = { url = "https://example.org/hook" }     # a JSON POST per message (url_file, NOTIFIO_WEBHOOK_URL)
# quiet_hours = "23:00-07:00"   # local time: nothing is sent then; one digest per channel at the end
# digest = "1h"                 # at most one message an hour per channel: a digest of what came in
# heartbeat = "24h"             # "Still watching: 1,440 checks, 12 new, 0 errors since …" once a day
#   (each may also go in a channel's table, overriding these; "off" turns one off there)
# Secrets: NOTIFIO_<SERVICE>_TOKEN (or _URL) in the environment, or token_file/url_file (mode 0600).
# `notifio notify test` sends a test message to each channel. docs/notifications.md: how to get tokens.
# telegram = { token_file = "~/.config/notifio/telegram.token", chat_id = "-1001234567890" }
# discord = { url_file = "~/.config/notifio/discord.url" }      # https://discord.com/api/webhooks/ID/TOKEN
# slack = { url_file = "~/.config/notifio/slack.url" }          # https://hooks.slack.com/services/…
# ntfy = { url = "https://ntfy.sh/my-long-secret-topic" }      # token = "tk_…" for a protected topic
# gotify = { url = "https://gotify.example.org", token_file = "~/.config/notifio/gotify.token" }
# pushover = { user_file = "~/.config/notifio/pushover.user", token_file = "~/.config/notifio/pushover.token" }
# matrix = { homeserver = "https://matrix.org", room = "!abc123:matrix.org", token_file = "~/.config/notifio/matrix.token" }
# desktop = true                                    # the desktop's own notifications
# urls = ["tgram://BOT_TOKEN/CHAT_ID", "discord://ID/TOKEN", "ntfys://ntfy.sh/topic"]   # Apprise-style

# How long to leave a site alone after it refused us (the last rung is the ceiling).
[backoff]
# challenge = ["1m", "3m", "8m", "15m", "30m"]
# rate_limited = ["2m", "5m", "15m", "30m"]
# denied = ["5m", "15m", "30m", "1h"]
# error = ["30s", "2m", "5m"]
# max_wait = "1h"
# jitter = 0.15

# Request-level retry for 5xx and timeouts; also [retry.probe] (1 attempt), [retry.detail], [retry.notify].
# [retry.search]
# attempts = 3
# initial = "100ms"
# multiplier = 3.0
# jitter = 0.25
# timeout = "10s"
# deadline = "20s"
# retry_header = true

# [fetch]
# user_agent = "…"     # default: notifio/VERSION (+https://github.com/notifio/notifio)
# accept_language = "es-ES,es;q=0.9,en;q=0.8"
# body_cap = "10MiB"

# Per-site settings; the key is a domain or a URL of the site.
# [site."facebook.com"]
# cookies = "~/.config/notifio/facebook.cookies.txt"   # a Netscape cookies.txt export
# spacing = "5s"
# budget = "2/min"         # this site's own request budget (default: watch.budget)
# profile = "facebook"
# fetch = "browser"        # http | browser | app (default: browser for idealista and facebook, app for IS24)
# [site."immobilienscout24.de"]
# app_api = "https://api.mobile.immobilienscout24.de/"   # where the app requests go
"#;

/// Writes [`STARTER`] to `path`, creating its directory; never overwrites an existing file.
///
/// # Errors
/// The file exists already, or it cannot be created or written.
pub fn write_starter(path: &Path) -> Result<(), ConfigError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            ConfigError::file(
                path,
                format!("cannot create the directory {}: {e}", dir.display()),
                None,
            )
        })?;
    }
    // create_new: the existence check and the creation are one step, so nothing is clobbered
    // even if two `notifio init` race.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                ConfigError::file(
                    path,
                    "already exists; not overwriting it",
                    Some("edit it, or pass another path to `notifio init`".to_owned()),
                )
            } else {
                ConfigError::file(path, format!("cannot create the file: {e}"), None)
            }
        })?;
    file.write_all(STARTER.as_bytes())
        .map_err(|e| ConfigError::file(path, format!("cannot write the file: {e}"), None))
}
