//! Config text → [`Config`]: every rule of docs/config.md, each failure pointing at its key.
//!
//! Pure apart from the [`Environment`] value it is handed (home, data dir, token): no file or
//! network I/O, so each rule is tested with a string. What only the machine can vouch for (a
//! cookies or password file, an SMTP password in the environment) is handed to `resolve` as a
//! [`Pending`] check that remembers where the config names it. Validation that belongs to a policy type
//! (ladders, retry) is done by that type's constructor and only *located* here, so the rules
//! live in one place (`notifio-policy`).

use super::raw::{Field, Src, Table, parse_document, suggestion};
use super::resolve::{
    BROWSER_ENV, DASHBOARD_TOKEN_ENV, Environment, Named, Pending, SMTP_PASSWORD_ENV, base_dir,
    resolve_path,
};
use super::{
    BrowserSettings, Config, ConfigError, EmailSettings, FetchMode, FetchSettings, NotifySettings,
    SearchConfig, SiteSettings, Spot, WatchSettings, WebhookFormat, WebhookSettings,
};
use crate::filter::{AnnounceRules, Pattern};
use crate::listing::{CardSpec, FieldSpec, ListingSpec};
use crate::price::MinDrop;
use notifio_policy::{
    BackoffConfigError, BackoffPolicy, Ladders, MAX_WAIT, RefusalKind, RequestClass,
    RetryConfigError, RetryPolicies, RetryPolicy, SiteKey,
};
use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const ROOT_KEYS: &[&str] = &[
    "watch", "backoff", "retry", "fetch", "notify", "browser", "search", "site",
];
const BROWSER_KEYS: &[&str] = &["executable", "headless", "profile_dir", "connect", "block"];
/// Resource types `[browser] block` may name: the DevTools Protocol's `Network.ResourceType`
/// values, lower-case. `document` is not among them: the page itself is what a check reads.
pub const BLOCKABLE: &[&str] = &[
    "stylesheet",
    "image",
    "media",
    "font",
    "script",
    "texttrack",
    "xhr",
    "fetch",
    "prefetch",
    "eventsource",
    "websocket",
    "manifest",
    "signedexchange",
    "ping",
    "cspviolationreport",
    "preflight",
    "other",
];
const DEFAULT_BLOCK: &[&str] = &["image", "media", "font"];
const WATCH_KEYS: &[&str] = &[
    "interval",
    "spacing",
    "concurrency",
    "state_dir",
    "dashboard",
    "dashboard_token",
    "dashboard_hosts",
    "notify_existing",
    "history",
    "gone_after",
    "budget",
    "max_interval",
    "active_hours",
];
/// Filters and price-change keys: in `[watch]` (defaults) and in each `[[search]]`.
const ANNOUNCE_KEYS: &[&str] = &[
    "min_price",
    "max_price",
    "min_rooms",
    "max_rooms",
    "min_area",
    "max_area",
    "include",
    "exclude",
    "strict",
    "min_drop",
    "notify_price_drops",
    "notify_price_rises",
    "skip_cross_site_duplicates",
];
const BACKOFF_KEYS: &[&str] = &[
    "challenge",
    "rate_limited",
    "denied",
    "error",
    "max_wait",
    "jitter",
];
const RETRY_CLASSES: &[&str] = &["search", "probe", "detail", "notify"];
const RETRY_KEYS: &[&str] = &[
    "attempts",
    "initial",
    "multiplier",
    "jitter",
    "timeout",
    "deadline",
    "retry_header",
];
const FETCH_KEYS: &[&str] = &["user_agent", "accept_language", "body_cap"];
const NOTIFY_KEYS: &[&str] = &[
    "email",
    "mailbox",
    "webhook",
    "telegram",
    "discord",
    "slack",
    "ntfy",
    "gotify",
    "pushover",
    "matrix",
    "desktop",
    "urls",
    "quiet_hours",
    "digest",
    "heartbeat",
];
const EMAIL_KEYS: &[&str] = &[
    "to",
    "from",
    "smtp",
    "password_file",
    "allow_plaintext",
    "quiet_hours",
    "digest",
    "heartbeat",
];
const WEBHOOK_KEYS: &[&str] = &[
    "url",
    "url_file",
    "format",
    "quiet_hours",
    "digest",
    "heartbeat",
];
const SEARCH_KEYS: &[&str] = &[
    "name",
    "url",
    "interval",
    "profile",
    "listing",
    "notify_existing",
    "notify",
    "pages",
    "paused",
    "max_interval",
    "active_hours",
];
const SITE_KEYS: &[&str] = &[
    "cookies",
    "spacing",
    "budget",
    "profile",
    "fetch",
    "login_url",
    "app_api",
    "user_agent",
];
const LISTING_KEYS: &[&str] = &[
    "selector",
    "id_attr",
    "title",
    "price",
    "rooms",
    "area",
    "image",
    "description",
    "link",
    "json_ld",
    "next",
];
/// The most result pages a search may read per check (`pages`): each is a request under the
/// site's spacing, so ten pages at the default 2 s already make a check of 18 s.
pub const MAX_PAGES: u32 = 10;
/// The card's fields a `selector` spec may locate.
const CARD_FIELDS: &[&str] = &["title", "price", "rooms", "area", "image", "description"];
const FIELD_KEYS: &[&str] = &["selector", "attr"];

/// Defaults; docs/config.md lists the same numbers.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
const DEFAULT_SPACING: Duration = Duration::from_secs(2);
const DEFAULT_CONCURRENCY: usize = 4;
const DEFAULT_DASHBOARD: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 7878);
const DEFAULT_HISTORY: usize = 100;
/// Good checks in a row that miss a listing before it is gone.
const DEFAULT_GONE_AFTER: u32 = 3;
/// More than this many checks would keep a gone listing online for days.
const MAX_GONE_AFTER: u32 = 1000;
/// Every search is checked at least this often, budget or not.
const DEFAULT_MAX_INTERVAL: Duration = Duration::from_secs(15 * 60);
const DEFAULT_BODY_CAP: usize = 10 * 1024 * 1024;
const DEFAULT_FROM: &str = "notifio@localhost";
const DEFAULT_SMTP: &str = "smtp://localhost:25";
const DEFAULT_BACKOFF_JITTER: f64 = 0.15;

type Result<T> = std::result::Result<T, ConfigError>;

/// Parses and validates `text` (from `path`), resolving paths and env through `env`.
pub(crate) fn config(text: &str, path: &Path, env: &Environment) -> Result<Config> {
    config_and_checks(text, path, env).map(|(c, _)| c)
}

/// [`config`], and the checks of files and secrets it leaves to `resolve::check`.
pub(crate) fn config_and_checks(
    text: &str,
    path: &Path,
    env: &Environment,
) -> Result<(Config, Vec<Pending>)> {
    let mut pending = Vec::new();
    let src = Src { file: path, text };
    let doc = parse_document(src)?;
    let root = Table::root(src, &doc);
    root.allow(ROOT_KEYS)?;
    let base = base_dir(path);

    let watch = watch(&root, &base, env)?;
    let backoff = backoff(&root)?;
    let retry = retry(&root)?;
    let fetch = fetch(&root)?;
    let notify = notify(&root, &watch, &base, env, &mut pending)?;
    let browser = browser(&root, &watch, &base, env)?;
    let profiles = profile_catalog(path, env)?;
    let (sites, fetch_keys, budget_keys) = sites(&root, &base, env, &profiles, &mut pending)?;
    let searches = searches(
        &root,
        &profiles,
        &watch,
        &sites,
        &fetch_keys,
        &notify.channel_names(),
        &mut pending,
    )?;
    budgets_fit(&root, &watch, &sites, &budget_keys, &searches)?;
    let config = Config {
        path: path.to_owned(),
        watch,
        backoff,
        retry,
        fetch,
        notify,
        browser,
        searches,
        sites,
        text_digest: text_digest(text),
        profiles,
    };
    Ok((config, pending))
}

/// What [`Config::text_digest`] holds for `text`.
#[must_use]
pub fn text_digest(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// A `[fetch]` text that goes into a request header: no control characters (a CR/LF would
/// end the header), visible ASCII or Latin-1.
fn header_text(f: &Field<'_>) -> Result<String> {
    let s = f.non_empty_str()?;
    match http::HeaderValue::from_str(s) {
        Ok(_) => Ok(s.to_owned()),
        Err(_) => Err(f
            .err("cannot be sent as an HTTP header: it has a control character (a line break?) or non-ASCII text")
            .with_hint("write it on one line, in ASCII")),
    }
}

/// The table at `key` of `parent`, with its keys checked against `allowed`.
fn section<'a>(parent: &Table<'a>, key: &str, allowed: &[&str]) -> Result<Option<Table<'a>>> {
    let Some(f) = parent.get(key) else {
        return Ok(None);
    };
    let t = f.table()?;
    t.allow(allowed)?;
    Ok(Some(t))
}

fn path(f: &Field<'_>, base: &Path, env: &Environment) -> Result<PathBuf> {
    resolve_path(f.str()?, base, env).map_err(|m| f.err(m))
}

fn usize_at_least(f: &Field<'_>, min: i64) -> Result<usize> {
    let n = f.integer_at_least(min)?;
    usize::try_from(n).map_err(|_| f.err(format!("{n} is too large")))
}

/// `profile = "…"`: a name the catalog knows (its own files' too), or `generic`.
fn profile(f: &Field<'_>, catalog: &crate::extract::Catalog) -> Result<String> {
    let p = f.non_empty_str()?;
    let names = catalog.names();
    if names.iter().any(|n| n.eq_ignore_ascii_case(p.trim())) {
        Ok(p.trim().to_ascii_lowercase())
    } else {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Err(f
            .err(format!("unknown profile `{p}`"))
            .with_hint(suggestion(p, &names, "profiles")))
    }
}

fn watch(root: &Table<'_>, base: &Path, env: &Environment) -> Result<WatchSettings> {
    let t = section(root, "watch", &[WATCH_KEYS, ANNOUNCE_KEYS].concat())?;
    let Some(t) = t else {
        return Ok(WatchSettings {
            interval: DEFAULT_INTERVAL,
            spacing: DEFAULT_SPACING,
            concurrency: DEFAULT_CONCURRENCY,
            state_dir: default_state_dir(root, env)?,
            dashboard: Some(DEFAULT_DASHBOARD),
            dashboard_token: env.dashboard_token.clone(),
            dashboard_hosts: Vec::new(),
            notify_existing: false,
            history: DEFAULT_HISTORY,
            gone_after: DEFAULT_GONE_AFTER,
            announce: AnnounceRules::default(),
            budget: None,
            max_interval: DEFAULT_MAX_INTERVAL,
            active_hours: None,
        });
    };
    let interval = interval(&t)?.unwrap_or(DEFAULT_INTERVAL);
    let spacing = t.duration("spacing")?.unwrap_or(DEFAULT_SPACING);
    let concurrency = t
        .get("concurrency")
        .map(|f| usize_at_least(&f, 1))
        .transpose()?
        .unwrap_or(DEFAULT_CONCURRENCY);
    let state_dir = match t.get("state_dir") {
        Some(f) => path(&f, base, env)?,
        None => default_state_dir(root, env)?,
    };
    let dashboard_field = t.get("dashboard");
    let dashboard = match &dashboard_field {
        None => Some(DEFAULT_DASHBOARD),
        Some(f) => dashboard(f)?,
    };
    let file_token = t
        .get("dashboard_token")
        .map(|f| f.non_empty_str().map(str::to_owned))
        .transpose()?;
    let dashboard_token = env.dashboard_token.clone().or(file_token);
    // The default address is loopback, so only an explicit `dashboard` can need a token.
    match (dashboard, &dashboard_token, &dashboard_field) {
        (Some(addr), None, Some(f)) if !addr.ip().is_loopback() => {
            return Err(f
                .err(format!(
                    "the dashboard on {addr} would be reachable from other machines without a token"
                ))
                .with_hint(format!(
                    "set {DASHBOARD_TOKEN_ENV} (or watch.dashboard_token), or listen on 127.0.0.1"
                )));
        }
        _ => {}
    }
    let dashboard_hosts = match t.get("dashboard_hosts") {
        Some(f) => f
            .array()?
            .iter()
            .map(dashboard_host)
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let notify_existing = t.bool("notify_existing")?.unwrap_or(false);
    let history = t
        .get("history")
        .map(|f| usize_at_least(&f, 1))
        .transpose()?
        .unwrap_or(DEFAULT_HISTORY);
    let gone_after = t
        .get("gone_after")
        .map(|f| {
            let n = f.integer_at_least(1)?;
            u32::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_GONE_AFTER)
                .ok_or_else(|| f.err(format!("{n} is more than {MAX_GONE_AFTER} checks")))
        })
        .transpose()?
        .unwrap_or(DEFAULT_GONE_AFTER);
    let announce = announce_rules(&t, &AnnounceRules::default())?;
    let budget = t.get("budget").map(|f| budget(&f)).transpose()?;
    let max_interval = max_interval(&t)?.unwrap_or(DEFAULT_MAX_INTERVAL);
    let active_hours = t.get("active_hours").map(|f| hours(&f)).transpose()?;
    Ok(WatchSettings {
        budget,
        max_interval,
        active_hours,
        interval,
        spacing,
        concurrency,
        state_dir,
        dashboard,
        dashboard_token,
        dashboard_hosts,
        notify_existing,
        history,
        gone_after,
        announce,
    })
}

/// A name the dashboard also answers to: `host` or `host:port`, as a `Host` header has it.
fn dashboard_host(f: &Field<'_>) -> Result<String> {
    let s = f.non_empty_str()?.trim();
    let parsed = url::Url::parse(&format!("http://{s}/")).ok();
    let plain = parsed.as_ref().is_some_and(|u| {
        u.host_str().is_some_and(|h| !h.is_empty())
            && u.username().is_empty()
            && u.password().is_none()
            && u.path() == "/"
            && !s.contains(['/', '?', '#', '@'])
    });
    if plain {
        Ok(s.to_owned())
    } else {
        Err(f
            .err(format!("`{s}` is not a host name"))
            .with_hint("give the name as the browser's address bar has it, e.g. \"notifio.lan\" or \"notifio.lan:8443\" (no http://, no path)"))
    }
}

/// The longest `interval` a search may have: a search checked less often than monthly is not
/// being watched, and longer ones would have been shortened silently (the scheduler counts a
/// page's interval in 32-bit milliseconds, ~49 days).
pub const MAX_INTERVAL: Duration = Duration::from_secs(30 * 24 * 3600);

/// An `interval`: longer than zero, at most [`MAX_INTERVAL`].
fn interval(t: &Table<'_>) -> Result<Option<Duration>> {
    let Some(d) = t.positive_duration("interval")? else {
        return Ok(None);
    };
    match t.get("interval") {
        Some(f) if d > MAX_INTERVAL => Err(f
            .err("is longer than the longest interval, 720h (30 days)")
            .with_hint(
                "interval = \"720h\" at most; pause the search (paused = true) to stop checking it",
            )),
        _ => Ok(Some(d)),
    }
}

/// A search's `name` as written: not empty, no spaces around it, nothing invisible in it.
fn search_name(f: &Field<'_>) -> Result<String> {
    let written = f.str()?;
    let name = f.non_empty_str()?;
    if name != written {
        return Err(f
            .err("a search name must not start or end with spaces")
            .with_hint(format!("name = {name:?}")));
    }
    if let Some(c) = name.chars().find(|c| c.is_control() || is_bidi_control(*c)) {
        return Err(f
            .err(format!(
                "a search name must not contain the invisible character U+{:04X}",
                u32::from(c)
            ))
            .with_hint("it can make two names that look alike differ, or show a name reordered; write the name without it"));
    }
    Ok(name.to_owned())
}

/// The characters that change the direction text is shown in (the Unicode bidi controls):
/// they make a name look like another.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn default_state_dir(root: &Table<'_>, env: &Environment) -> Result<PathBuf> {
    env.data_dir.clone().ok_or_else(|| {
        root.err_key(
            "watch.state_dir",
            "this system has no data directory for notifio",
        )
        .with_hint("set state_dir in [watch], e.g. state_dir = \"/var/lib/notifio\"")
    })
}

fn dashboard(f: &Field<'_>) -> Result<Option<SocketAddr>> {
    const EXPECTED: &str = "an address like \"127.0.0.1:7878\", or false to disable";
    if let Some(b) = f.as_bool() {
        return Ok(b.then_some(DEFAULT_DASHBOARD));
    }
    let Some(s) = f.as_str() else {
        return Err(f.type_err(EXPECTED));
    };
    s.trim().parse::<SocketAddr>().map(Some).map_err(|_| {
        f.err(format!("expected {EXPECTED}"))
            .with_hint("give an IP and a port; host names are not resolved here")
    })
}

fn backoff(root: &Table<'_>) -> Result<BackoffPolicy> {
    let Some(t) = section(root, "backoff", BACKOFF_KEYS)? else {
        return Ok(BackoffPolicy::default());
    };
    let mut ladders = Ladders::default();
    let mut fields: HashMap<RefusalKind, (Field<'_>, Vec<Field<'_>>)> = HashMap::new();
    for kind in RefusalKind::ALL {
        let Some(f) = t.get(kind.as_str()) else {
            continue;
        };
        let rungs = f.array()?;
        let steps = rungs
            .iter()
            .map(Field::duration)
            .collect::<Result<Vec<_>>>()?;
        ladders = ladders.with(kind, steps);
        fields.insert(kind, (f, rungs));
    }
    let jitter_f = t.get("jitter");
    let jitter = jitter_f
        .as_ref()
        .map(Field::float)
        .transpose()?
        .unwrap_or(DEFAULT_BACKOFF_JITTER);
    let max_wait_f = t.get("max_wait");
    let max_wait = max_wait_f
        .as_ref()
        .map(Field::duration)
        .transpose()?
        .unwrap_or(MAX_WAIT);
    BackoffPolicy::new(ladders, jitter, max_wait).map_err(|e| {
        let at = match &e {
            BackoffConfigError::EmptyLadder { kind } => fields.get(kind).map(|(f, _)| f.clone()),
            BackoffConfigError::ZeroRung { kind, rung }
            | BackoffConfigError::NotIncreasing { kind, rung, .. } => fields
                .get(kind)
                .and_then(|(_, rungs)| rungs.get(rung.saturating_sub(1)).cloned()),
            BackoffConfigError::BadJitter(_) => jitter_f.clone(),
            BackoffConfigError::ZeroMaxWait => max_wait_f.clone(),
            _ => None,
        };
        match at {
            Some(f) => f.err(e.to_string()),
            None => t.err("", e.to_string()),
        }
    })
}

fn retry(root: &Table<'_>) -> Result<RetryPolicies> {
    let mut policies = RetryPolicies::default();
    let Some(t) = section(root, "retry", RETRY_CLASSES)? else {
        return Ok(policies);
    };
    for class in RequestClass::ALL {
        if let Some(c) = section(&t, class.as_str(), RETRY_KEYS)? {
            *policies.get_mut(class) = retry_policy(&c, class)?;
        }
    }
    Ok(policies)
}

fn retry_policy(t: &Table<'_>, class: RequestClass) -> Result<RetryPolicy> {
    let d = RetryPolicy::default_for(class);
    let attempts = match t.get("attempts") {
        Some(f) => {
            let n = f.integer_at_least(0)?;
            u32::try_from(n).map_err(|_| f.err(format!("{n} attempts is too many")))?
        }
        None => d.attempts(),
    };
    let float = |k: &str, dflt: f64| {
        t.get(k)
            .map(|f| f.float())
            .transpose()
            .map(|v| v.unwrap_or(dflt))
    };
    let multiplier = float("multiplier", d.multiplier())?;
    let jitter = float("jitter", d.jitter())?;
    let initial = t.duration("initial")?.unwrap_or(d.initial());
    let timeout = t.duration("timeout")?.unwrap_or(d.timeout());
    let deadline = t.duration("deadline")?.unwrap_or(d.deadline());
    let retry_header = t.bool("retry_header")?.unwrap_or(d.retry_header());
    RetryPolicy::new(
        attempts,
        initial,
        multiplier,
        jitter,
        timeout,
        deadline,
        retry_header,
    )
    .map_err(|e| {
        let key = match &e {
            RetryConfigError::ZeroAttempts => "attempts",
            RetryConfigError::BadMultiplier(_) => "multiplier",
            RetryConfigError::BadJitter(_) => "jitter",
            RetryConfigError::ZeroTime(what) => what,
            _ => "",
        };
        match t.get(key) {
            Some(f) => f.err(e.to_string()),
            None => t.err(key, e.to_string()),
        }
    })
}

fn fetch(root: &Table<'_>) -> Result<FetchSettings> {
    let mut out = FetchSettings {
        user_agent: None,
        accept_language: None,
        body_cap: DEFAULT_BODY_CAP,
    };
    let Some(t) = section(root, "fetch", FETCH_KEYS)? else {
        return Ok(out);
    };
    let text = |k: &str| t.get(k).map(|f| header_text(&f)).transpose();
    out.user_agent = text("user_agent")?;
    out.accept_language = text("accept_language")?;
    if let Some(f) = t.get("body_cap") {
        out.body_cap = if f.as_integer().is_some() {
            usize_at_least(&f, 1)?
        } else {
            let Some(s) = f.as_str() else {
                return Err(f.type_err("a size like \"10MiB\" or a number of bytes"));
            };
            let n = super::parse_size(s).map_err(|m| f.err(m))?;
            if n == 0 {
                return Err(f.err("must be larger than zero"));
            }
            usize::try_from(n).map_err(|_| f.err("too large for this machine"))?
        };
    }
    Ok(out)
}

fn browser(
    root: &Table<'_>,
    watch: &WatchSettings,
    base: &Path,
    env: &Environment,
) -> Result<BrowserSettings> {
    let t = section(root, "browser", BROWSER_KEYS)?;
    let get = |k: &str| t.as_ref().and_then(|t| t.get(k));
    let executable = match (&env.browser, get("executable")) {
        (Some(from_env), _) => Some((
            from_env.trim().to_owned(),
            Spot::unwritten(root.src_file(), BROWSER_ENV),
        )),
        (None, Some(f)) => {
            let raw = f.non_empty_str()?;
            // A path (with a separator or `~`) is resolved like every path in the file; a bare
            // name is looked up on PATH when the browser is needed.
            let value = if raw.contains(['/', '\\']) || raw.starts_with('~') {
                path(&f, base, env)?.to_string_lossy().into_owned()
            } else {
                raw.trim().to_owned()
            };
            Some((value, Spot::from(f.err(""))))
        }
        (None, None) => None,
    };
    let headless = match get("headless") {
        Some(f) => f.bool()?,
        None => true,
    };
    let profile_dir = match get("profile_dir") {
        Some(f) => path(&f, base, env)?,
        None => watch.state_dir.join("browser"),
    };
    let connect = match get("connect") {
        None => None,
        Some(f) => {
            let raw = f.non_empty_str()?.trim();
            let ok = url::Url::parse(raw)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https" | "ws" | "wss"))
                .filter(|u| u.host_str().is_some());
            if ok.is_none() {
                return Err(f
                    .err(format!("`{raw}` is not a DevTools address"))
                    .with_hint(
                        "start your browser with --remote-debugging-port=9222 and write \
                         connect = \"http://127.0.0.1:9222\"",
                    ));
            }
            Some(raw.to_owned())
        }
    };
    let block = match get("block") {
        None => DEFAULT_BLOCK.iter().map(|s| (*s).to_owned()).collect(),
        Some(f) => {
            let mut out: Vec<String> = Vec::new();
            for e in f.array()? {
                let name = e.non_empty_str()?.trim().to_ascii_lowercase();
                if name == "document" {
                    return Err(e
                        .err("`document` cannot be blocked: it is the page a check reads")
                        .with_hint(format!("block any of: {}", BLOCKABLE.join(", "))));
                }
                if !BLOCKABLE.contains(&name.as_str()) {
                    return Err(e
                        .err(format!("unknown resource type `{name}`"))
                        .with_hint(suggestion(&name, BLOCKABLE, "resource types")));
                }
                if !out.contains(&name) {
                    out.push(name);
                }
            }
            out
        }
    };
    Ok(BrowserSettings {
        executable,
        headless,
        profile_dir,
        connect,
        block,
    })
}

/// The hint for a page URL written without its scheme (`www.example.com/…`, copied from the
/// address bar without `https://`): the parser calls it a relative URL, or, with a port
/// (`localhost:8080/…`), takes the host for a scheme; either way the fix is to write the
/// scheme. `None` for anything that would not become a web page's URL that way.
fn scheme_hint(url: &str, e: &notifio_policy::SiteKeyError) -> Option<String> {
    use notifio_policy::SiteKeyError;
    let written_without_scheme = match e {
        SiteKeyError::NotAUrl { reason, .. } => {
            reason == &url::ParseError::RelativeUrlWithoutBase.to_string()
        }
        // `localhost:8080/x` parses with the scheme `localhost`, `www.example.com:8080/x`
        // with `www.example.com`; `mailto:` and `ftp:` are schemes.
        SiteKeyError::NotHttp { scheme, .. } => scheme.contains('.') || scheme == "localhost",
        _ => false,
    };
    if !written_without_scheme || url.contains("://") {
        return None;
    }
    let fixed = format!("https://{}", url.trim_start_matches('/'));
    let parsed = url::Url::parse(&fixed).ok()?;
    let host = parsed.host_str()?;
    (host.contains('.') || host == "localhost").then(|| format!("write {fixed}"))
}

fn fetch_mode(f: &Field<'_>) -> Result<FetchMode> {
    let raw = f.non_empty_str()?;
    FetchMode::parse(raw).ok_or_else(|| {
        f.err(format!("unknown fetch mode `{raw}`"))
            .with_hint(suggestion(raw, &FetchMode::NAMES, "fetch modes"))
    })
}

fn notify(
    root: &Table<'_>,
    watch: &WatchSettings,
    base: &Path,
    env: &Environment,
    pending: &mut Vec<Pending>,
) -> Result<NotifySettings> {
    let mut out = NotifySettings {
        email: None,
        mailbox: None,
        webhook: None,
        channels: Vec::new(),
        pacing: crate::notify::pace::Pacing::default(),
        channel_pacing: BTreeMap::new(),
    };
    if let Some(t) = section(root, "notify", NOTIFY_KEYS)? {
        out.pacing = super::channels::pacing(&t, crate::notify::pace::Pacing::default())?;
        if let Some(e) = section(&t, "email", EMAIL_KEYS)? {
            out.email = Some(email(&e, base, env, pending)?);
            if let Some(p) = super::channels::own_pacing(&e, out.pacing)? {
                out.channel_pacing.insert("email".to_owned(), p);
            }
        }
        if let Some(f) = t.get("mailbox") {
            out.mailbox = Some(path(&f, base, env)?);
        }
        if let Some(w) = section(&t, "webhook", WEBHOOK_KEYS)? {
            out.webhook = Some(webhook(&w, base, env)?);
            if let Some(p) = super::channels::own_pacing(&w, out.pacing)? {
                out.channel_pacing.insert("webhook".to_owned(), p);
            }
        }
        out.channels = super::channels::parse(&t, base, env, out.pacing, &mut out.channel_pacing)?;
    }
    if out.email.is_none()
        && out.mailbox.is_none()
        && out.webhook.is_none()
        && out.channels.is_empty()
    {
        out.mailbox = Some(watch.state_dir.join("notifications.mbox"));
    }
    Ok(out)
}

fn mailbox_address(f: &Field<'_>, s: &str) -> Result<String> {
    let s = s.trim();
    s.parse::<lettre::message::Mailbox>()
        .map(|_| s.to_owned())
        // lettre's reasons ("Invalid input") add nothing to this.
        .map_err(|_| f.err(format!("`{s}` is not an email address")))
}

fn email(
    t: &Table<'_>,
    base: &Path,
    env: &Environment,
    pending: &mut Vec<Pending>,
) -> Result<EmailSettings> {
    let Some(to_f) = t.get("to") else {
        return Err(t
            .err("to", "missing `to`: who should get the emails")
            .with_hint(
                "to = \"me@example.com\" or to = [\"me@example.com\", \"you@example.com\"]",
            ));
    };
    let to = if let Some(s) = to_f.as_str() {
        vec![mailbox_address(&to_f, s)?]
    } else {
        let elems = to_f
            .array()
            .map_err(|_| to_f.type_err("an address or an array of addresses"))?;
        if elems.is_empty() {
            return Err(to_f.err("must name at least one address"));
        }
        elems
            .iter()
            .map(|e| mailbox_address(e, e.str()?))
            .collect::<Result<Vec<_>>>()?
    };
    let from = match t.get("from") {
        Some(f) => mailbox_address(&f, f.str()?)?,
        None => DEFAULT_FROM.to_owned(),
    };
    let smtp_f = t.get("smtp");
    let smtp = match &smtp_f {
        Some(f) => smtp(f)?,
        None => DEFAULT_SMTP.to_owned(),
    };
    let password_f = t.get("password_file");
    let password_file = password_f
        .as_ref()
        .map(|f| path(f, base, env))
        .transpose()?;
    if let (Some(f), Some(p)) = (&password_f, &password_file) {
        pending.push(Pending {
            what: Named::PasswordFile(p.clone()),
            at: f.err(""),
        });
    }
    let user = url::Url::parse(&smtp)
        .ok()
        .map(|u| {
            percent_encoding::percent_decode_str(u.username())
                .decode_utf8_lossy()
                .into_owned()
        })
        .filter(|u| !u.is_empty());
    if let (Some(f), Some(user), None) = (&smtp_f, user, &password_file) {
        pending.push(Pending {
            what: Named::SmtpUser(user),
            at: f.err(""),
        });
    }
    let allow_plaintext = t.bool("allow_plaintext")?.unwrap_or(false);
    Ok(EmailSettings {
        to,
        from,
        smtp,
        password_file,
        allow_plaintext,
    })
}

/// Checks an SMTP URL without ever echoing it: it might hold a password.
fn smtp(f: &Field<'_>) -> Result<String> {
    let s = f.non_empty_str()?;
    if s == "sendmail" {
        return Ok(s.to_owned());
    }
    let schemes_hint =
        "use smtp://host:port, smtps://host:port, smtp+starttls://host:port or \"sendmail\"";
    let u = url::Url::parse(s).map_err(|e| {
        f.err(format!("not an SMTP URL: {e}"))
            .with_hint(schemes_hint)
    })?;
    if !matches!(u.scheme(), "smtp" | "smtps" | "smtp+starttls") {
        return Err(f
            .err(format!("unsupported scheme `{}:`", u.scheme()))
            .with_hint(schemes_hint));
    }
    if u.password().is_some() {
        return Err(f
            .err("the SMTP URL contains a password; notifio keeps passwords out of its config")
            .with_hint(format!(
                "remove it from the URL (keep the user name) and set {SMTP_PASSWORD_ENV} or email.password_file"
            )));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(f.err("the SMTP URL has no host").with_hint(schemes_hint));
    }
    Ok(s.to_owned())
}

fn webhook(t: &Table<'_>, base: &Path, env: &Environment) -> Result<WebhookSettings> {
    let file = t.get("url_file").map(|f| path(&f, base, env)).transpose()?;
    let value = match (t.get("url"), &file) {
        (Some(f), None) => {
            let url = f.non_empty_str()?;
            // The URL is often a secret (Slack, ntfy topics): describe the problem, never echo it.
            match url::Url::parse(url) {
                Ok(u)
                    if matches!(u.scheme(), "http" | "https")
                        && u.host_str().is_some_and(|h| !h.is_empty()) => {}
                Ok(_) => {
                    return Err(
                        f.err("the webhook URL must be an http:// or https:// URL with a host")
                    );
                }
                Err(e) => return Err(f.err(format!("not a URL: {e}"))),
            }
            Some(crate::secret::Secret::new(url))
        }
        (Some(f), Some(_)) => return Err(f.err("give `url` or `url_file`, not both")),
        (None, Some(_)) => None,
        (None, None) => {
            return Err(t.err("url", "missing `url`").with_hint(
                "url = \"https://ntfy.sh/my-topic\", or url_file = \"hook.url\" (mode 0600)",
            ));
        }
    };
    let format = match t.get("format") {
        None => WebhookFormat::Json,
        Some(ff) => match ff.non_empty_str()? {
            "json" => WebhookFormat::Json,
            "ntfy" => WebhookFormat::Ntfy,
            other => {
                return Err(ff
                    .err(format!("unknown webhook format `{other}`"))
                    .with_hint(suggestion(other, &["json", "ntfy"], "formats")));
            }
        },
    };
    Ok(WebhookSettings {
        url: crate::config::SecretSetting {
            key: "notify.webhook.url".to_owned(),
            env: Some("NOTIFIO_WEBHOOK_URL".to_owned()),
            file,
            value,
        },
        format,
    })
}

/// `[site."facebook.com"]`, `[site."www.facebook.com"]` and `[site."https://facebook.com/x"]`
/// all name the site `facebook.com`.
fn site_key(name: &str) -> std::result::Result<SiteKey, String> {
    let name = name.trim();
    if name.contains("://") {
        return SiteKey::from_url(name).map_err(|e| e.to_string());
    }
    SiteKey::from_url(&format!("http://{name}/")).map_err(|_| {
        format!("`{name}` is not a site: give a domain like \"facebook.com\" or a page URL")
    })
}

/// Where each `[site]` table sets `fetch` (an error there, for a search that cannot use it).
type FetchKeys = HashMap<String, ConfigError>;
/// Where each `[site]` table sets `budget` (an error there, for a budget its searches do not fit).
type BudgetKeys = HashMap<String, ConfigError>;

fn sites(
    root: &Table<'_>,
    base: &Path,
    env: &Environment,
    catalog: &crate::extract::Catalog,
    pending: &mut Vec<Pending>,
) -> Result<(BTreeMap<String, SiteSettings>, FetchKeys, BudgetKeys)> {
    let mut out: BTreeMap<String, SiteSettings> = BTreeMap::new();
    let mut fetch_keys = FetchKeys::new();
    let mut budget_keys = BudgetKeys::new();
    let Some(f) = root.get("site") else {
        return Ok((out, fetch_keys, budget_keys));
    };
    let mut first_name: HashMap<String, String> = HashMap::new();
    for (name, f) in f.table()?.entries() {
        let t = f.table()?;
        t.allow(SITE_KEYS)?;
        let key = site_key(name).map_err(|m| f.err(m))?;
        if let Some(first) = first_name.get(key.as_str()) {
            return Err(f
                .err(format!(
                    "`{name}` is the same site as `{first}` (both are {key})"
                ))
                .with_hint("merge the two tables: settings apply to the whole site"));
        }
        first_name.insert(key.as_str().to_owned(), name.to_owned());
        let cookies_f = t.get("cookies");
        let cookies = cookies_f.as_ref().map(|c| path(c, base, env)).transpose()?;
        if let (Some(f), Some(p)) = (&cookies_f, &cookies) {
            pending.push(Pending {
                what: Named::Cookies {
                    path: p.clone(),
                    site: key.as_str().to_owned(),
                    required: Vec::new(),
                },
                at: f.err(""),
            });
        }
        if let Some(f) = t.get("fetch") {
            fetch_keys.insert(key.as_str().to_owned(), f.err(""));
        }
        if let Some(f) = t.get("budget") {
            budget_keys.insert(key.as_str().to_owned(), f.err(""));
        }
        let settings = SiteSettings {
            cookies,
            budget: t.get("budget").map(|f| budget(&f)).transpose()?,
            spacing: t.duration("spacing")?,
            profile: t.get("profile").map(|p| profile(&p, catalog)).transpose()?,
            fetch: t.get("fetch").map(|m| fetch_mode(&m)).transpose()?,
            app_api: t.get("app_api").map(|u| app_api(&u)).transpose()?,
            user_agent: t.get("user_agent").map(|f| header_text(&f)).transpose()?,
            login_url: t
                .get("login_url")
                .map(|u| {
                    let raw = u.non_empty_str()?.trim();
                    let same_site = url::Url::parse(raw)
                        .ok()
                        .filter(|p| matches!(p.scheme(), "http" | "https"))
                        .and_then(|p| SiteKey::from_parsed(&p).ok());
                    match same_site {
                        Some(k) if k == key => Ok(raw.to_owned()),
                        Some(k) => Err(u.err(format!(
                            "`{raw}` is on {k}, not on {key}: a login page of this site is needed"
                        ))),
                        None => Err(u.err(format!("`{raw}` is not an http(s) URL"))),
                    }
                })
                .transpose()?,
        };
        out.insert(key.as_str().to_owned(), settings);
    }
    Ok((out, fetch_keys, budget_keys))
}

/// `app_api`: the base URL the app's requests go to instead of the app's own endpoint.
fn app_api(f: &Field<'_>) -> Result<url::Url> {
    let raw = f.non_empty_str()?.trim();
    url::Url::parse(raw)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| {
            f.err(format!("`{raw}` is not an http(s) URL"))
                .with_hint(format!(
                    "the app endpoint's base URL, e.g. \"{}\"",
                    crate::extract::immoscout24_app::DEFAULT_APP_API
                ))
        })
}

/// `pages`: how many result pages a check reads, 1 to [`MAX_PAGES`].
fn pages(f: &Field<'_>) -> Result<u32> {
    let n = f.integer_at_least(1)?;
    match u32::try_from(n) {
        Ok(n) if n <= MAX_PAGES => Ok(n),
        _ => Err(f
            .err(format!("{n} pages is more than {MAX_PAGES}"))
            .with_hint(format!(
                "each page is a request under the site's spacing; read at most {MAX_PAGES}, or sort the search by date so new listings come first"
            ))),
    }
}

/// Searches one site may have: it gets one request per `spacing`, so 1,000 searches already
/// take over half an hour to go round at the default 2 s (and the scheduler numbers a site's
/// URLs in 16 bits: [`notifio_policy::MAX_URLS_PER_SITE`]).
pub const MAX_SEARCHES_PER_SITE: usize = 1_000;
const _: () = assert!(MAX_SEARCHES_PER_SITE <= notifio_policy::MAX_URLS_PER_SITE);

/// The built-in profiles with the user's files over them; a bad file is a config error at
/// its own line and key.
fn profile_catalog(path: &Path, env: &Environment) -> Result<Arc<crate::extract::Catalog>> {
    let dirs = crate::extract::catalog::user_dirs(path, env.config_dir.as_deref());
    crate::extract::Catalog::with_user_dirs(&dirs)
        .map(Arc::new)
        .map_err(|e| ConfigError::at(&e.path, &e.text, e.offset, &e.key, e.message))
}

fn searches(
    root: &Table<'_>,
    profiles: &Arc<crate::extract::Catalog>,
    watch: &WatchSettings,
    sites: &BTreeMap<String, SiteSettings>,
    fetch_keys: &FetchKeys,
    channels: &[String],
    pending: &mut [Pending],
) -> Result<Vec<SearchConfig>> {
    let elems = search_tables(root)?;
    let mut read = SearchReader {
        watch,
        sites,
        fetch_keys,
        channels,
        profiles: crate::extract::ProfileCache::new(Arc::clone(profiles)),
        watch_announce: Arc::new(watch.announce.clone()),
        names: HashMap::new(),
        per_site: HashMap::new(),
    };
    let mut out = Vec::with_capacity(elems.len());
    for e in &elems {
        out.push(read.search(&e.table()?, pending)?);
    }
    Ok(out)
}

/// The `[[search]]` array: present, an array of tables, not empty.
fn search_tables<'a>(root: &Table<'a>) -> Result<Vec<Field<'a>>> {
    const EXAMPLE: &str = "[[search]]\n  name = \"Madrid\"\n  url = \"https://www.idealista.com/alquiler-viviendas/madrid-madrid/\"";
    let Some(f) = root.get("search") else {
        return Err(root
            .err("search", "no searches: nothing to watch")
            .with_hint(format!("add at least one search:\n  {EXAMPLE}")));
    };
    if f.is_table() {
        return Err(f
            .err("expected an array of tables, found a single table")
            .with_hint("write [[search]] with two brackets, once per search"));
    }
    let elems = f.array()?;
    if elems.is_empty() {
        return Err(f
            .err("no searches: nothing to watch")
            .with_hint(format!("add at least one search:\n  {EXAMPLE}")));
    }
    Ok(elems)
}

/// Reads one `[[search]]` after another, with what they must agree on: unique names, at most
/// [`MAX_SEARCHES_PER_SITE`] per site, one profile per name and spec.
struct SearchReader<'a, 'c> {
    watch: &'c WatchSettings,
    sites: &'c BTreeMap<String, SiteSettings>,
    fetch_keys: &'c FetchKeys,
    channels: &'c [String],
    profiles: crate::extract::ProfileCache,
    /// The rules of every search that sets no filter or price key of its own (most).
    watch_announce: Arc<AnnounceRules>,
    /// The first field of each name: its line is only worked out for a duplicate (doing it
    /// for every search made a config of thousands of searches quadratic to read).
    names: HashMap<String, Field<'a>>,
    per_site: HashMap<SiteKey, usize>,
}

impl<'a> SearchReader<'a, '_> {
    /// One search: its name, its URL and site, its pace, how it is read, what it announces.
    fn search(&mut self, t: &Table<'a>, pending: &mut [Pending]) -> Result<SearchConfig> {
        t.allow(&[SEARCH_KEYS, ANNOUNCE_KEYS].concat())?;
        let name = self.unique_name(t)?;
        let (url, url_f, site) = self.url_and_site(t)?;
        let watch = self.watch;
        let interval = interval(t)?.unwrap_or(watch.interval);
        let max_interval = max_interval(t)?.unwrap_or(watch.max_interval);
        let active_hours = match t.get("active_hours") {
            Some(f) => Some(hours(&f)?),
            None => watch.active_hours,
        };
        let site_settings = self.sites.get(site.as_str());
        let profile = match t.get("profile") {
            Some(p) => Some(profile(&p, self.profiles.catalog())?),
            None => site_settings.and_then(|s| s.profile.clone()),
        };
        let listing = t.get("listing").map(|l| listing(&l)).transpose()?;
        // The profile is built here, as the watcher will build it, so a search it cannot
        // read (a generic site without `listing`) is refused by every command at start.
        let shared = self
            .profiles
            .shared_for(&site, profile.as_deref(), listing.as_ref())
            .map_err(|e| {
                let at = t
                    .get("listing")
                    .map_or_else(|| t.err("listing", ""), |l| l.err(""));
                ConfigError {
                    message: e.to_string(),
                    ..at
                }
            })?;
        let profile_name = shared.profile.name();
        let fetch = site_settings
            .and_then(|s| s.fetch)
            .unwrap_or_else(|| FetchMode::default_for(shared.profile.as_ref()));
        if shared.profile.needs_cookies() {
            needs_cookies(&name, &site, &url_f, site_settings, &shared, pending)?;
        }
        let notify_existing = t.bool("notify_existing")?.unwrap_or(watch.notify_existing);
        self.fetch_fits(&name, &site, &url_f, fetch, profile_name)?;
        let app = app_request(&url, &url_f, fetch, site_settings)?;
        let pages = search_pages(t, &name, &shared)?;
        let notify = t
            .get("notify")
            .map(|f| super::channels::routes(&f, self.channels))
            .transpose()?;
        let announce = match announce_rules(t, &watch.announce)? {
            own if own == *self.watch_announce => Arc::clone(&self.watch_announce),
            own => Arc::new(own),
        };
        let paused = t.bool("paused")?.unwrap_or(false);
        Ok(SearchConfig {
            name,
            url,
            site,
            interval,
            profile,
            listing,
            notify_existing,
            fetch,
            notify,
            announce,
            pages,
            app,
            paused,
            max_interval,
            active_hours,
        })
    }

    /// `name`: present, a valid name, and not one an earlier search has (compared as NFC:
    /// names that look the same are the same name).
    fn unique_name(&mut self, t: &Table<'a>) -> Result<String> {
        let Some((_, name_f)) = t.str("name")? else {
            return Err(t
                .err("name", "missing `name`")
                .with_hint("every search needs a unique name, e.g. name = \"Madrid under 1200\""));
        };
        let name = search_name(&name_f)?;
        let key = super::name_key(&name).into_owned();
        if let Some(first) = self.names.get(&key) {
            return Err(name_f
                .err(format!("duplicate search name `{name}`"))
                .with_hint(format!(
                    "the first search with this name is on line {}; names must be unique (names that look the same, written with other Unicode characters, count as the same)",
                    first.err("").line
                )));
        }
        self.names.insert(key, name_f);
        Ok(name)
    }

    /// `url`: present, a site's page (not port 0), and not one search too many on its site.
    fn url_and_site(&mut self, t: &Table<'a>) -> Result<(String, Field<'a>, SiteKey)> {
        let Some((_, url_f)) = t.str("url")? else {
            return Err(t
                .err("url", "missing `url`")
                .with_hint("url = \"https://…\": the search result page to watch"));
        };
        let url = url_f.non_empty_str()?.to_owned();
        let site = SiteKey::from_url(&url).map_err(|e| {
            let hint = scheme_hint(&url, &e);
            let err = url_f.err(e.to_string());
            match hint {
                Some(h) => err.with_hint(h),
                None => err,
            }
        })?;
        if url::Url::parse(&url).is_ok_and(|u| u.port() == Some(0)) {
            return Err(url_f
                .err("port 0 is not a port a site listens on")
                .with_hint("write the site's port, or none for the scheme's own (443 for https)"));
        }
        let on_site = self.per_site.entry(site.clone()).or_default();
        *on_site += 1;
        if *on_site > MAX_SEARCHES_PER_SITE {
            return Err(url_f
                .err(format!(
                    "more than {MAX_SEARCHES_PER_SITE} searches on {site}"
                ))
                .with_hint("a site gets one request per `spacing` (2 s by default), so a round of this many takes over half an hour; use fewer, broader searches"));
        }
        Ok((url, url_f, site))
    }

    /// The site's `fetch` mode can read this search's profile (`app` is ImmobilienScout24's).
    fn fetch_fits(
        &self,
        name: &str,
        site: &SiteKey,
        url_f: &Field<'a>,
        fetch: FetchMode,
        profile_name: &str,
    ) -> Result<()> {
        if fetch.fits_profile(profile_name) {
            return Ok(());
        }
        let message = format!(
            "search `{name}` is read with the {profile_name} profile, which has no app request: fetch = \"{fetch}\" is for ImmobilienScout24 (the immoscout24 profile)"
        );
        let at = self
            .fetch_keys
            .get(site.as_str())
            .cloned()
            .unwrap_or_else(|| url_f.err(""));
        Err(ConfigError { message, ..at }
            .with_hint("use fetch = \"http\" or \"browser\" for this site"))
    }
}

/// A site whose profile reads a logged-in session has a cookies file, and the cookies that
/// file must hold are noted for the check of the file on this machine.
fn needs_cookies(
    name: &str,
    site: &SiteKey,
    url_f: &Field<'_>,
    site_settings: Option<&SiteSettings>,
    shared: &crate::extract::SharedProfile,
    pending: &mut [Pending],
) -> Result<()> {
    let has_file = site_settings.is_some_and(|s| s.cookies.is_some());
    if !has_file {
        return Err(url_f
            .err(format!(
                "search `{name}` is on {site}, which needs your logged-in session: no cookies file is configured for it"
            ))
            .with_hint(format!(
                "export your cookies as cookies.txt (Netscape format) and add\n    [site.\"{site}\"]\n    cookies = \"~/.config/notifio/{site}.cookies.txt\""
            )));
    }
    for p in pending.iter_mut() {
        if let Named::Cookies {
            site: s, required, ..
        } = &mut p.what
            && s == site.as_str()
        {
            for c in shared.profile.required_cookies() {
                if !required.contains(c) {
                    required.push(c);
                }
            }
        }
    }
    Ok(())
}

/// The app's request, worked out once, here: a search it cannot express is refused at start,
/// and what it leaves out is one warning at start (`Config::warnings`).
fn app_request(
    url: &str,
    url_f: &Field<'_>,
    fetch: FetchMode,
    site_settings: Option<&SiteSettings>,
) -> Result<Option<Arc<crate::extract::immoscout24_app::AppSearch>>> {
    if fetch != FetchMode::App {
        return Ok(None);
    }
    let web = url::Url::parse(url).map_err(|e| url_f.err(e.to_string()))?;
    let api = match site_settings.and_then(|s| s.app_api.clone()) {
        Some(api) => api,
        None => url::Url::parse(crate::extract::immoscout24_app::DEFAULT_APP_API)
            .map_err(|e| url_f.err(e.to_string()))?,
    };
    let search = crate::extract::immoscout24_app::app_search(&web, &api)
        .map_err(|e| url_f.err(e.to_string()))?;
    Ok(Some(Arc::new(search)))
}

/// `pages` (1 by default), refused for a profile that reads one page.
fn search_pages(t: &Table<'_>, name: &str, shared: &crate::extract::SharedProfile) -> Result<u32> {
    let pages = t.get("pages").map(|p| pages(&p)).transpose()?.unwrap_or(1);
    if pages > 1 && !shared.profile.paged() {
        let at = t
            .get("pages")
            .map_or_else(|| t.err("pages", ""), |p| p.err(""));
        let profile_name = shared.profile.name();
        return Err(ConfigError {
            message: format!(
                "search `{name}` is read with the {profile_name} profile, which reads one page: its site shows more results as you scroll, not on pages"
            ),
            ..at
        }
        .with_hint("remove `pages` from this search"));
    }
    Ok(pages)
}

/// `budget`: requests per second, minute or hour.
fn budget(f: &Field<'_>) -> Result<notifio_policy::RequestBudget> {
    let s = f.non_empty_str()?;
    super::duration::parse_budget(s).map_err(|m| f.err(m).with_hint("budget = \"4/min\": at most 4 requests to the site in any minute, spent where its listings appear (docs/policy.md)"))
}

/// `active_hours`: `"07:00-23:00"`, local time.
fn hours(f: &Field<'_>) -> Result<notifio_policy::ActiveHours> {
    let s = f.non_empty_str()?;
    super::duration::parse_hours(s).map_err(|m| f.err(m))
}

/// `max_interval`: longer than zero, at most [`MAX_INTERVAL`].
fn max_interval(t: &Table<'_>) -> Result<Option<Duration>> {
    let Some(d) = t.positive_duration("max_interval")? else {
        return Ok(None);
    };
    match t.get("max_interval") {
        Some(f) if d > MAX_INTERVAL => {
            Err(f.err("is longer than the longest interval, 720h (30 days)"))
        }
        _ => Ok(Some(d)),
    }
}

/// Every site with a budget can keep its promises with it: each of its searches is checked
/// at least every `max_interval`, and one check (its result pages) fits the budget's window.
fn budgets_fit(
    root: &Table<'_>,
    watch: &WatchSettings,
    sites: &BTreeMap<String, SiteSettings>,
    budget_keys: &BudgetKeys,
    searches: &[SearchConfig],
) -> Result<()> {
    let mut by_site: BTreeMap<&str, Vec<&SearchConfig>> = BTreeMap::new();
    for s in searches.iter().filter(|s| !s.paused) {
        by_site.entry(s.site.as_str()).or_default().push(s);
    }
    for (site, on_site) in by_site {
        let own = sites.get(site).and_then(|x| x.budget);
        let Some(b) = own.or(watch.budget) else {
            continue;
        };
        let at = || match (own, budget_keys.get(site)) {
            (Some(_), Some(e)) => e.clone(),
            _ => root.err_key("watch.budget", ""),
        };
        let pages = on_site.iter().map(|s| s.pages).max().unwrap_or(1);
        if pages > b.requests {
            let mut e = at();
            e.message = format!(
                "a check of a search on {site} reads {pages} pages, more than the budget's {} requests in its window",
                b.requests
            );
            return Err(e.with_hint(format!(
                "budget = \"{pages}/min\" at least, or fewer `pages`"
            )));
        }
        let least: f64 = on_site
            .iter()
            .map(|s| {
                f64::from(s.pages) * 3600.0
                    / (s.max_interval.as_secs_f64() * notifio_policy::allocate::SLOWEST_PLANNED)
            })
            .sum();
        if least > b.per_hour() {
            let mut e = at();
            e.message = format!(
                "the budget ({} requests a {}) is less than the {} searches on {site} need to be checked every max_interval at least (about {} requests an hour)",
                b.requests,
                notifio_policy::format_duration(b.per),
                on_site.len(),
                least.ceil()
            );
            return Err(
                e.with_hint("raise the budget, or max_interval in [watch] (or in the searches)")
            );
        }
    }
    Ok(())
}

/// The filters and price-change keys of `t` (`[watch]` or a `[[search]]`), each key not
/// given taken from `defaults` (`[watch]`'s, for a search).
fn announce_rules(t: &Table<'_>, defaults: &AnnounceRules) -> Result<AnnounceRules> {
    let mut rules = defaults.clone();
    let bounds = [
        ("min_price", "max_price"),
        ("min_rooms", "max_rooms"),
        ("min_area", "max_area"),
    ];
    let f = &mut rules.filters;
    for (key, slot) in [
        ("min_price", &mut f.min_price),
        ("max_price", &mut f.max_price),
        ("min_rooms", &mut f.min_rooms),
        ("max_rooms", &mut f.max_rooms),
        ("min_area", &mut f.min_area),
        ("max_area", &mut f.max_area),
    ] {
        if let Some(field) = t.get(key) {
            let v = field.float()?;
            if !v.is_finite() || v < 0.0 {
                return Err(field.err(format!("must be a number of 0 or more; got {v}")));
            }
            *slot = Some(v);
        }
    }
    for (key, list) in [("include", &mut f.include), ("exclude", &mut f.exclude)] {
        if let Some(field) = t.get(key) {
            *list = field
                .array()?
                .iter()
                .map(|e| {
                    let raw = e.str()?;
                    Pattern::parse(raw).map_err(|m| {
                        e.err(m).with_hint(
                            "a word or phrase (case and accents ignored), or a regex between slashes: \"/\\\\bWG\\\\b/\"",
                        )
                    })
                })
                .collect::<Result<_>>()?;
        }
    }
    if let Some(strict) = t.bool("strict")? {
        f.strict = strict;
    }
    let filters = f.clone();
    for (min_key, max_key) in bounds {
        let value = |k: &str| match k {
            "min_price" => filters.min_price,
            "max_price" => filters.max_price,
            "min_rooms" => filters.min_rooms,
            "max_rooms" => filters.max_rooms,
            "min_area" => filters.min_area,
            _ => filters.max_area,
        };
        if let (Some(lo), Some(hi)) = (value(min_key), value(max_key))
            && lo > hi
        {
            // At whichever of the two this table sets (the other may come from [watch]).
            let at = t
                .get(max_key)
                .or_else(|| t.get(min_key))
                .map_or_else(|| t.err(max_key, ""), |f| f.err(""));
            return Err(ConfigError {
                message: format!(
                    "`{min_key}` ({lo}) is above `{max_key}` ({hi}): nothing can match"
                ),
                ..at
            });
        }
    }
    if let Some(field) = t.get("min_drop") {
        rules.prices.min_drop = match (field.as_str(), field.float()) {
            (Some(s), _) => MinDrop::parse(s),
            (None, Ok(a)) => MinDrop::amount(a),
            (None, Err(_)) => Err("expected an amount (50) or a percentage (\"5%\")".to_owned()),
        }
        .map_err(|m| {
            field
                .err(m)
                .with_hint("min_drop = 50 (in the listing's currency) or min_drop = \"5%\"")
        })?;
    }
    if let Some(b) = t.bool("notify_price_drops")? {
        rules.prices.drops = b;
    }
    if let Some(b) = t.bool("notify_price_rises")? {
        rules.prices.rises = b;
    }
    if let Some(b) = t.bool("skip_cross_site_duplicates")? {
        rules.skip_cross_site_duplicates = b;
    }
    Ok(rules)
}

const LISTING_EXPECTED: &str = "expected \"json-ld\", { selector = \"…\", id_attr = \"…\" }, { link = \"…\" } or { json_ld = true }";

fn listing(f: &Field<'_>) -> Result<ListingSpec> {
    if let Some(s) = f.as_str() {
        return match s.trim() {
            "json-ld" | "json_ld" => Ok(ListingSpec::json_ld()),
            _ => Err(f.err(LISTING_EXPECTED)),
        };
    }
    if !f.is_table() {
        return Err(f.type_err(LISTING_EXPECTED));
    }
    let t = f.table()?;
    t.allow(LISTING_KEYS)?;
    let forms: Vec<&str> = ["selector", "link", "json_ld"]
        .into_iter()
        .filter(|k| t.get(k).is_some())
        .collect();
    let next = css(&t, "next")?;
    match forms.as_slice() {
        [] => Err(f.err(LISTING_EXPECTED)),
        ["selector"] => {
            let selector = css(&t, "selector")?.unwrap_or_default();
            let id_attr = t.get("id_attr").map(|a| attr_name(&a)).transpose()?;
            let field = |key: &str| t.get(key).map(|f| card_field(&f)).transpose();
            Ok(ListingSpec::Selector(Box::new(CardSpec {
                selector,
                id_attr,
                title: field("title")?,
                price: field("price")?,
                rooms: field("rooms")?,
                area: field("area")?,
                image: field("image")?,
                description: field("description")?,
                next,
            })))
        }
        [form] => {
            for only_selector in std::iter::once(&"id_attr").chain(CARD_FIELDS) {
                if let Some(x) = t.get(only_selector) {
                    return Err(x.err(format!(
                        "`{only_selector}` only applies with `selector`, not with `{form}`"
                    )));
                }
            }
            if *form == "link" {
                link(&t, next)
            } else {
                let j = t.get("json_ld").ok_or_else(|| f.err(LISTING_EXPECTED))?;
                if j.bool()? {
                    Ok(ListingSpec::JsonLd { next })
                } else {
                    Err(j
                        .err("`json_ld = false` describes no listings")
                        .with_hint("use json_ld = true, a selector or a link regex"))
                }
            }
        }
        several => Err(f.err(format!(
            "give one way to find listings, not {}",
            several
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(" and ")
        ))),
    }
}

/// A CSS selector at `key`, checked with lol_html (the engine the extractor runs it on).
fn css(t: &Table<'_>, key: &str) -> Result<Option<String>> {
    t.get(key).map(|f| css_value(&f)).transpose()
}

fn css_value(f: &Field<'_>) -> Result<String> {
    let s = f.non_empty_str()?;
    s.parse::<lol_html::Selector>()
        .map_err(|e| f.err(format!("`{s}` is not a CSS selector notifio can run: {e}")))?;
    Ok(s.to_owned())
}

const FIELD_EXPECTED: &str =
    "a CSS selector inside the card, or { selector = \"…\", attr = \"…\" }";

/// One field of a card: `"h2 a"` (its text) or `{ selector = "img", attr = "data-src" }`.
fn card_field(f: &Field<'_>) -> Result<FieldSpec> {
    if f.as_str().is_some() {
        return Ok(FieldSpec {
            selector: css_value(f)?,
            attr: None,
        });
    }
    if !f.is_table() {
        return Err(f.type_err(FIELD_EXPECTED));
    }
    let t = f.table()?;
    t.allow(FIELD_KEYS)?;
    let Some(selector) = css(&t, "selector")? else {
        return Err(f
            .err("missing `selector`: which element inside the card holds it")
            .with_hint("e.g. { selector = \"img\", attr = \"data-src\" }"));
    };
    Ok(FieldSpec {
        selector,
        attr: t.get("attr").map(|a| attr_name(&a)).transpose()?,
    })
}

/// An HTML attribute name (`data-id`, `srcset`): no spaces, quotes, `=`, `<`, `>` or `/`,
/// which could never name an attribute and so would silently match nothing.
fn attr_name(f: &Field<'_>) -> Result<String> {
    let name = f.non_empty_str()?;
    if let Some(bad) = name.chars().find(|c| {
        c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '=' | '<' | '>' | '/')
    }) {
        return Err(f
            .err(format!(
                "`{name}` is not an attribute name (it contains {bad:?})"
            ))
            .with_hint("write the attribute's name alone, e.g. \"data-id\" or \"data-src\""));
    }
    Ok(name.to_owned())
}

fn link(t: &Table<'_>, next: Option<String>) -> Result<ListingSpec> {
    let Some(f) = t.get("link") else {
        return Err(t.err("link", "missing `link`"));
    };
    let s = f.non_empty_str()?;
    let re = regex::Regex::new(s).map_err(|e| f.err(crate::filter::regex_problem(&e)))?;
    let groups = re.captures_len() - 1;
    if groups != 1 {
        return Err(f
            .err(format!(
                "the link regex needs exactly one capture group (the listing id); it has {groups}"
            ))
            .with_hint(
                "e.g. link = \"/listing/(\\\\d+)\"; write (?:…) for groups that are not the id",
            ));
    }
    Ok(ListingSpec::Link {
        link: s.to_owned(),
        next,
    })
}
