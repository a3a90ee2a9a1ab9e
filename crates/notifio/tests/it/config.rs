//! The config file's rules, each asserted with the exact `file:line:col: key: message` a user
//! would see; the design's first example config, the starter file and every ```toml block of
//! docs/config.md must parse.

use notifio::config::{
    self, Config, ConfigError, Environment, STARTER, WebhookFormat, parse_in, write_starter,
};
use notifio::extract::Catalog;
use notifio::listing::{CardSpec, FieldSpec, ListingSpec};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fixed machine: home /home/ana, no token in the environment.
fn env() -> Environment {
    Environment {
        home: Some(PathBuf::from("/home/ana")),
        data_dir: Some(PathBuf::from("/home/ana/.local/share/notifio")),
        config_dir: None,
        dashboard_token: None,
        browser: None,
    }
}

/// One valid search, appended after the text under test so line numbers start at 1.
const MIN: &str = "\n[[search]]\nname = \"min\"\nurl = \"https://www.idealista.com/x\"\n";

fn cfg_path() -> &'static Path {
    Path::new("/etc/notifio/notifio.toml")
}

fn parse_with(text: &str, env: &Environment) -> Result<Config, ConfigError> {
    parse_in(text, cfg_path(), env)
}

fn ok(text: &str) -> Config {
    match parse_with(text, &env()) {
        Ok(c) => c,
        Err(e) => panic!("expected to parse, got:\n{e}\n--- text ---\n{text}"),
    }
}

/// The error's display with the directory stripped: `notifio.toml:1:2: …`.
fn err(text: &str) -> String {
    err_with(text, &env())
}

fn err_with(text: &str, env: &Environment) -> String {
    match parse_with(text, env) {
        Ok(c) => panic!("expected an error, parsed: {c:#?}\n--- text ---\n{text}"),
        Err(e) => e.to_string().replace("/etc/notifio/", ""),
    }
}

/// Asserts the first line of the error exactly, and that the hint (if `hint` is given)
/// contains it.
#[track_caller]
fn assert_err(text: &str, first_line: &str, hint: Option<&str>) {
    let e = err(text);
    let mut lines = e.lines();
    assert_eq!(lines.next(), Some(first_line), "full error:\n{e}");
    if let Some(h) = hint {
        let rest: Vec<&str> = lines.collect();
        let rest = rest.join("\n");
        assert!(rest.starts_with("  hint: "), "no hint in:\n{e}");
        assert!(rest.contains(h), "hint lacks {h:?}:\n{e}");
    }
}

// ---- defaults and the documented examples ----

#[test]
fn a_single_search_gets_every_default() {
    let c = ok(MIN);
    assert_eq!(c.path, cfg_path());
    assert_eq!(c.watch.interval, Duration::from_secs(30));
    assert_eq!(c.watch.spacing, Duration::from_secs(2));
    assert_eq!(c.watch.concurrency, 4);
    assert_eq!(
        c.watch.state_dir,
        PathBuf::from("/home/ana/.local/share/notifio")
    );
    assert_eq!(c.watch.dashboard, Some("127.0.0.1:7878".parse().unwrap()));
    assert_eq!(c.watch.dashboard_token, None);
    assert!(!c.watch.notify_existing);
    assert_eq!(c.watch.history, 100);
    assert_eq!(c.backoff, notifio_policy::BackoffPolicy::default());
    assert_eq!(c.retry, notifio_policy::RetryPolicies::default());
    assert_eq!(c.fetch.body_cap, 10 * 1024 * 1024);
    assert_eq!(c.fetch.user_agent, None);
    assert_eq!(
        c.notify.mailbox,
        Some(PathBuf::from(
            "/home/ana/.local/share/notifio/notifications.mbox"
        ))
    );
    assert!(c.notify.email.is_none() && c.notify.webhook.is_none());
    let s = &c.searches[0];
    assert_eq!(s.name, "min");
    assert_eq!(s.site.as_str(), "idealista.com");
    assert_eq!(s.interval, Duration::from_secs(30));
    assert_eq!((s.profile.as_deref(), s.listing.as_ref()), (None, None));
    assert!(c.sites.is_empty());
    assert!(c.warnings().is_empty());
}

/// The example config of the project's first design, minus the commented alternative.
const FIRST_EXAMPLE: &str = r#"
[watch]
interval = "30s"          # per search, ±10% jitter
spacing = "2s"            # min gap between requests to one site
concurrency = 4
state_dir = "~/.local/share/notifio"
dashboard = "127.0.0.1:7878"   # false to disable

[backoff]                 # overrides; defaults are in docs/policy.md
challenge = ["1m", "3m", "8m", "15m", "30m"]
rate_limited = ["2m", "5m", "15m", "30m"]
denied = ["5m", "15m", "30m", "1h"]
error = ["30s", "2m", "5m"]
max_wait = "1h"
jitter = 0.15

[retry.search]            # also retry.probe, retry.detail, retry.notify
attempts = 3
initial = "100ms"
multiplier = 3.0
jitter = 0.25
timeout = "10s"           # per attempt
deadline = "20s"          # all attempts together
retry_header = true       # X-Retry-Count

[notify]
email = { to = "me@example.com", from = "notifio@localhost", smtp = "smtp://127.0.0.1:2525" }
mailbox = "notifications.mbox"
webhook = { url = "http://127.0.0.1:9000/hook" }

[[search]]
name = "Madrid under 1200"
url = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/con-precio-hasta_1200/"
interval = "45s"
profile = "idealista"     # optional: idealista | immoscout24 | facebook | generic; default by site
# generic sites: one of
listing = { selector = "article.listing", id_attr = "data-id" }

[site."facebook.com"]
cookies = "~/.config/notifio/facebook.cookies.txt"
spacing = "5s"
"#;

#[test]
fn the_design_example_parses_to_what_it_says() {
    let c = ok(FIRST_EXAMPLE);
    assert_eq!(
        c.watch.state_dir,
        PathBuf::from("/home/ana/.local/share/notifio")
    );
    assert_eq!(c.backoff, notifio_policy::BackoffPolicy::default());
    assert_eq!(c.retry, notifio_policy::RetryPolicies::default());
    let email = c.notify.email.as_ref().unwrap();
    assert_eq!(email.to, vec!["me@example.com".to_owned()]);
    assert_eq!(email.smtp, "smtp://127.0.0.1:2525");
    assert_eq!(
        c.notify.mailbox,
        Some(PathBuf::from("/etc/notifio/notifications.mbox"))
    );
    let hook = c.notify.webhook.as_ref().unwrap();
    assert_eq!(hook.format, WebhookFormat::Json);
    let s = &c.searches[0];
    assert_eq!(s.interval, Duration::from_secs(45));
    assert_eq!(s.profile.as_deref(), Some("idealista"));
    assert_eq!(
        s.listing,
        Some(ListingSpec::Selector(Box::new(CardSpec::new(
            "article.listing",
            Some("data-id")
        ))))
    );
    let fb = &c.sites["facebook.com"];
    assert_eq!(
        fb.cookies,
        Some(PathBuf::from(
            "/home/ana/.config/notifio/facebook.cookies.txt"
        ))
    );
    assert_eq!(fb.spacing, Some(Duration::from_secs(5)));
    // facebook.com has settings but no search on it: that is worth a word at start.
    assert_eq!(
        c.warnings(),
        vec!["[site.\"facebook.com\"] has settings but no search is on that site".to_owned()]
    );
}

#[test]
fn the_starter_file_parses() {
    let c = ok(STARTER);
    assert_eq!(c.searches.len(), 1);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn write_starter_creates_the_file_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/notifio.toml");
    write_starter(&path).unwrap();
    let c = config::load(&path).unwrap();
    assert_eq!(c.searches[0].name, "Madrid under 1200");

    std::fs::write(&path, "# mine\n").unwrap();
    let e = write_starter(&path).unwrap_err();
    assert_eq!(e.line, 0);
    assert!(
        e.to_string().ends_with(
            "notifio.toml: already exists; not overwriting it\n  hint: edit it, or pass another path to `notifio init`"
        ),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# mine\n");
}

#[test]
fn a_missing_file_names_the_path_and_suggests_init() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.toml");
    let e = config::load(&path).unwrap_err().to_string();
    let shown = path.display().to_string();
    assert_eq!(
        e,
        format!(
            "{shown}: no config file here\n  hint: run `notifio init {shown}` to write a commented starter config, or pass --config"
        )
    );
}

/// The ```toml blocks of a doc file, with their 1-based line numbers.
fn toml_blocks(doc_path: &str) -> Vec<(usize, String)> {
    let doc = std::fs::read_to_string(doc_path).unwrap_or_else(|e| panic!("{doc_path}: {e}"));
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in doc.lines().enumerate() {
        match (&mut current, line.trim_end()) {
            (None, "```toml") => current = Some((i + 1, String::new())),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some((_, text)), l) => {
                text.push_str(l);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "unclosed ```toml block in {doc_path}");
    blocks
}

#[test]
fn every_toml_block_in_the_docs_parses() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let config_md = toml_blocks(&format!("{root}/docs/config.md"));
    assert!(
        config_md.len() >= 10,
        "only {} toml blocks",
        config_md.len()
    );
    let mut checked = 0;
    for doc in [
        "docs/config.md",
        "docs/guide.md",
        "docs/sites.md",
        "docs/notifications.md",
        "docs/dashboard.md",
        "README.md",
    ] {
        let path = format!("{root}/{doc}");
        if !Path::new(&path).exists() {
            continue;
        }
        for (line, text) in toml_blocks(&path) {
            // A block that starts with a profile's `name` is a profile file (docs/sites.md):
            // it must load as one, from a `sites/` directory, under that name.
            if text.starts_with("name = ") {
                let dir = tempfile::tempdir().expect("temp dir");
                std::fs::write(dir.path().join("doc.toml"), &text).expect("write profile");
                let catalog = Catalog::with_user_dirs(&[dir.path().to_path_buf()])
                    .unwrap_or_else(|e| panic!("{doc} block at line {line} is no profile:\n{e}"));
                let name = text
                    .lines()
                    .next()
                    .and_then(|l| l.split('"').nth(1))
                    .unwrap_or_default();
                let entry = catalog.by_name(name);
                assert!(
                    entry.is_some_and(|e| e.source != notifio::extract::catalog::Source::BuiltIn),
                    "{doc} block at line {line}: profile {name:?} not loaded from the file"
                );
                checked += 1;
                continue;
            }
            // A block that shows one section gets a search so it is a whole config; a block
            // that already has searches must stand alone.
            let whole = if text.contains("[[search]]") {
                text.clone()
            } else {
                format!("{text}{MIN}")
            };
            let token_env = Environment {
                dashboard_token: Some("t".into()),
                ..env()
            };
            if let Err(e) = parse_with(&whole, &token_env) {
                panic!("{doc} block at line {line} does not parse:\n{e}\n---\n{text}");
            }
            checked += 1;
        }
    }
    assert!(
        checked > config_md.len(),
        "the other docs' examples are checked too"
    );
}

/// A relative `mailbox` is relative to the config file's directory, like every path in the
/// file: the resolved path says so, and so does every doc that shows one.
#[test]
fn a_relative_mailbox_is_beside_the_config_file_and_the_docs_say_so() {
    let c = ok(&format!(
        "[watch]\nstate_dir = \"/var/lib/notifio\"\n[notify]\nmailbox = \"notifications.mbox\"\n{MIN}"
    ));
    assert_eq!(
        c.notify.mailbox,
        Some(PathBuf::from("/etc/notifio/notifications.mbox"))
    );
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for doc in ["docs/config.md", "docs/notifications.md", "docs/guide.md"] {
        for (line, text) in toml_blocks(&format!("{root}/{doc}")) {
            for l in text
                .lines()
                .filter(|l| l.trim_start().starts_with("mailbox"))
            {
                assert!(
                    !l.contains("state_dir"),
                    "{doc} block at line {line}: {l} (a relative mailbox is relative to the config file's directory)"
                );
            }
        }
    }
}

// ---- syntax, unknown keys, types ----

#[test]
fn toml_syntax_errors_have_a_position() {
    let e = err("[watch]\ninterval = \"30s\nspacing = \"2s\"\n");
    assert!(e.starts_with("notifio.toml:2:16: invalid TOML: "), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    let dup = err("[watch]\ninterval = \"30s\"\ninterval = \"40s\"\n");
    assert!(
        dup.starts_with("notifio.toml:3:1: invalid TOML: duplicate key"),
        "{dup}"
    );
}

#[test]
fn unknown_keys_get_a_did_you_mean_and_the_valid_keys() {
    assert_err(
        &format!("[wach]\ninterval = \"30s\"\n{MIN}"),
        "notifio.toml:1:2: `wach`: unknown key `wach`",
        Some(
            "did you mean `watch`? valid keys here: `watch`, `backoff`, `retry`, `fetch`, `notify`, `browser`, `search`, `site`",
        ),
    );
    assert_err(
        &format!("[watch]\nintervall = \"30s\"\n{MIN}"),
        "notifio.toml:2:1: `watch.intervall`: unknown key `intervall`",
        Some("did you mean `interval`?"),
    );
    assert_err(
        "[[search]]\nnmae = \"a\"\nurl = \"https://x.com/\"\n",
        "notifio.toml:2:1: `search[0].nmae`: unknown key `nmae`",
        Some("did you mean `name`?"),
    );
    assert_err(
        &format!("[retry.serch]\nattempts = 2\n{MIN}"),
        "notifio.toml:1:8: `retry.serch`: unknown key `serch`",
        Some("did you mean `search`?"),
    );
    // Nothing close: just the list.
    let e = err(&format!("[watch]\nzzz = 1\n{MIN}"));
    assert!(
        e.contains("hint: valid keys here: `interval`, `spacing`"),
        "{e}"
    );
    assert!(!e.contains("did you mean"), "{e}");
}

#[test]
fn wrong_types_say_what_was_expected() {
    assert_err(
        &format!("[watch]\nconcurrency = \"4\"\n{MIN}"),
        "notifio.toml:2:15: `watch.concurrency`: expected an integer, found a string",
        None,
    );
    assert_err(
        &format!("[watch]\nnotify_existing = \"yes\"\n{MIN}"),
        "notifio.toml:2:19: `watch.notify_existing`: expected `true` or `false`, found a string",
        None,
    );
    assert_err(
        &format!("watch = 3\n{MIN}"),
        "notifio.toml:1:9: `watch`: expected a table, found an integer",
        None,
    );
}

// ---- durations ----

#[test]
fn bad_durations_get_the_expected_message_and_a_fix() {
    assert_err(
        &format!("[watch]\ninterval = \"30 seconds\"\n{MIN}"),
        "notifio.toml:2:12: `watch.interval`: expected a duration like 30s, 2m, 1h",
        Some("write \"30s\""),
    );
    assert_err(
        &format!("[watch]\ninterval = 30\n{MIN}"),
        "notifio.toml:2:12: `watch.interval`: expected a duration like 30s, 2m, 1h, found an integer",
        Some("\"30s\""),
    );
    let two = format!(
        "{MIN}\n[[search]]\nname = \"b\"\nurl = \"https://b.example/\"\nlisting = \"json-ld\"\n\n[[search]]\nname = \"c\"\nurl = \"https://c.example/\"\n  interval = \"1 day\"\n"
    );
    assert_err(
        &two,
        "notifio.toml:14:14: `search[2].interval`: expected a duration like 30s, 2m, 1h",
        None,
    );
    assert_err(
        &format!("[watch]\ninterval = \"0s\"\n{MIN}"),
        "notifio.toml:2:12: `watch.interval`: must be longer than zero",
        None,
    );
    assert_eq!(
        config::parse_duration("30 seconds"),
        Err("expected a duration like 30s, 2m, 1h".to_owned())
    );
}

#[test]
fn short_intervals_are_allowed_but_warned_about_except_on_loopback() {
    let c = ok(&format!(
        "{MIN}interval = \"5s\"\n[[search]]\nname = \"local\"\nurl = \"http://127.0.0.1:8080/s\"\ninterval = \"200ms\"\nlisting = \"json-ld\"\n"
    ));
    assert_eq!(c.searches[0].interval, Duration::from_secs(5));
    assert_eq!(c.searches[1].interval, Duration::from_millis(200));
    assert_eq!(
        c.warnings(),
        vec!["interval 5s on \"min\" is below 10s: real portals will block you".to_owned()]
    );
}

// ---- searches ----

#[test]
fn at_least_one_search() {
    assert_err(
        "[watch]\ninterval = \"30s\"\n",
        "notifio.toml:1:1: `search`: no searches: nothing to watch",
        Some("[[search]]"),
    );
    assert_err(
        "search = []\n",
        "notifio.toml:1:10: `search`: no searches: nothing to watch",
        None,
    );
    assert_err(
        "[search]\nname = \"a\"\nurl = \"https://a.com/\"\n",
        "notifio.toml:1:1: `search`: expected an array of tables, found a single table",
        Some("write [[search]] with two brackets"),
    );
}

#[test]
fn duplicate_search_names_point_at_the_second() {
    assert_err(
        &format!("{MIN}\n[[search]]\nname = \"min\"\nurl = \"https://b.example/\"\n"),
        "notifio.toml:7:8: `search[1].name`: duplicate search name `min`",
        Some("the first search with this name is on line 3"),
    );
}

#[test]
fn missing_name_or_url_points_at_the_search() {
    assert_err(
        "[[search]]\nurl = \"https://a.com/\"\n",
        "notifio.toml:1:1: `search[0].name`: missing `name`",
        Some("name = "),
    );
    assert_err(
        "[[search]]\nname = \"a\"\n",
        "notifio.toml:1:1: `search[0].url`: missing `url`",
        None,
    );
}

#[test]
fn search_urls_must_be_http_with_a_host() {
    assert_err(
        "[[search]]\nname = \"a\"\nurl = \"ftp://files.example/x\"\n",
        "notifio.toml:3:7: `search[0].url`: `ftp://files.example/x` uses `ftp:`; only http:// and https:// pages can be watched",
        None,
    );
    assert_err(
        "[[search]]\nname = \"a\"\nurl = \"idealista.com/madrid\"\n",
        "notifio.toml:3:7: `search[0].url`: `idealista.com/madrid` is not a URL: relative URL without a base",
        Some("write https://idealista.com/madrid"),
    );
    // Copied from the address bar without its scheme, with a port: the host reads as a scheme.
    assert_err(
        "[[search]]\nname = \"a\"\nurl = \"www.example.com:8080/pisos?x=1\"\n",
        "notifio.toml:3:7: `search[0].url`: `www.example.com:8080/pisos?x=1` uses `www.example.com:`; only http:// and https:// pages can be watched",
        Some("write https://www.example.com:8080/pisos?x=1"),
    );
    assert_err(
        "[[search]]\nname = \"a\"\nurl = \"www.example.com/pisos\"\n",
        "notifio.toml:3:7: `search[0].url`: `www.example.com/pisos` is not a URL: relative URL without a base",
        Some("write https://www.example.com/pisos"),
    );
    let e = err("[[search]]\nname = \"a\"\nurl = \"https://\"\n");
    assert!(
        e.starts_with("notifio.toml:3:7: `search[0].url`: `https://` is not a URL"),
        "{e}"
    );
}

#[test]
fn profiles_are_checked_and_inherited_from_the_site() {
    assert_err(
        "[[search]]\nname = \"a\"\nurl = \"https://a.com/\"\nprofile = \"idealsta\"\n",
        "notifio.toml:4:11: `search[0].profile`: unknown profile `idealsta`",
        Some(
            "did you mean `idealista`? valid profiles: `idealista`, `immoscout24`, `facebook`, `immobiliare`, `immowelt`, `kleinanzeigen`, `rightmove`, `subito`, `wg-gesucht`, `willhaben`, `generic`",
        ),
    );
    let c = ok(
        "[[search]]\nname = \"a\"\nurl = \"https://www.agency.example/r\"\nlisting = \"json-ld\"\n[site.\"agency.example\"]\nprofile = \"generic\"\n",
    );
    assert_eq!(c.searches[0].profile.as_deref(), Some("generic"));
}

#[test]
fn notify_existing_per_search_overrides_watch() {
    let c = ok(&format!(
        "[watch]\nnotify_existing = true\n{MIN}[[search]]\nname = \"b\"\nurl = \"https://b.example/\"\nlisting = \"json-ld\"\nnotify_existing = false\n"
    ));
    assert!(c.watch.notify_existing && c.searches[0].notify_existing);
    assert!(!c.searches[1].notify_existing);
}

// ---- listing ----

fn listing_of(l: &str) -> Result<Option<ListingSpec>, String> {
    let text = format!("[[search]]\nname = \"a\"\nurl = \"https://a.example/\"\nlisting = {l}\n");
    parse_with(&text, &env())
        .map(|c| c.searches[0].listing.clone())
        .map_err(|e| e.to_string().replace("/etc/notifio/", ""))
}

#[test]
fn listing_forms() {
    assert_eq!(listing_of("\"json-ld\""), Ok(Some(ListingSpec::json_ld())));
    assert_eq!(
        listing_of("{ json_ld = true }"),
        Ok(Some(ListingSpec::json_ld()))
    );
    assert_eq!(
        listing_of(r#"{ link = "/listing/(\\d+)" }"#),
        Ok(Some(ListingSpec::link(r"/listing/(\d+)")))
    );
    assert_eq!(
        listing_of(r#"{ selector = "article.card", title = "h2 a", price = ".price" }"#),
        Ok(Some(ListingSpec::Selector(Box::new(CardSpec {
            title: Some(FieldSpec::text("h2 a")),
            price: Some(FieldSpec::text(".price")),
            ..CardSpec::new("article.card", None)
        }))))
    );
}

#[test]
fn card_fields_are_selectors_or_selectors_with_an_attribute() {
    let spec = listing_of(
        r#"{ selector = "article.aditem", id_attr = "data-adid", title = { selector = "h2 a", attr = "title" }, rooms = ".tags", area = { selector = ".tags", attr = "data-area" }, image = { selector = "img", attr = "Data-Src" } }"#,
    );
    assert_eq!(
        spec,
        Ok(Some(ListingSpec::Selector(Box::new(CardSpec {
            title: Some(FieldSpec::attr("h2 a", "title")),
            rooms: Some(FieldSpec::text(".tags")),
            area: Some(FieldSpec::attr(".tags", "data-area")),
            image: Some(FieldSpec::attr("img", "Data-Src")),
            ..CardSpec::new("article.aditem", Some("data-adid"))
        }))))
    );
    // `{ selector = "…" }` alone is the same as the string.
    assert_eq!(
        listing_of(r#"{ selector = "li", price = { selector = ".p" } }"#),
        Ok(Some(ListingSpec::Selector(Box::new(CardSpec {
            price: Some(FieldSpec::text(".p")),
            ..CardSpec::new("li", None)
        }))))
    );
}

#[test]
fn a_bad_card_field_is_an_error_at_its_key() {
    assert_eq!(
        listing_of(r#"{ selector = "li", rooms = 5 }"#),
        Err("notifio.toml:4:38: `search[0].listing.rooms`: expected a CSS selector inside the card, or { selector = \"…\", attr = \"…\" }, found an integer".into())
    );
    assert_eq!(
        listing_of(r#"{ selector = "li", image = { attr = "src" } }"#),
        Err("notifio.toml:4:38: `search[0].listing.image`: missing `selector`: which element inside the card holds it\n  hint: e.g. { selector = \"img\", attr = \"data-src\" }".into())
    );
    let e = listing_of(r#"{ selector = "li", image = { selector = "img", atr = "src" } }"#)
        .unwrap_err();
    assert!(
        e.starts_with("notifio.toml:4:58: `search[0].listing.image.atr`: unknown key `atr`\n  hint: did you mean `attr`?"),
        "{e}"
    );
    assert_eq!(
        listing_of(r#"{ selector = "li", image = { selector = "img", attr = "data src" } }"#),
        Err("notifio.toml:4:65: `search[0].listing.image.attr`: `data src` is not an attribute name (it contains ' ')\n  hint: write the attribute's name alone, e.g. \"data-id\" or \"data-src\"".into())
    );
    let e = listing_of(r#"{ selector = "li", area = { selector = "]" } }"#).unwrap_err();
    assert!(
        e.starts_with("notifio.toml:4:50: `search[0].listing.area.selector`: `]` is not a CSS selector notifio can run: "),
        "{e}"
    );
    assert_eq!(
        listing_of(r#"{ link = "/(x)", image = "img" }"#),
        Err("notifio.toml:4:36: `search[0].listing.image`: `image` only applies with `selector`, not with `link`".into())
    );
    assert_eq!(
        listing_of(r#"{ selector = "li", id_attr = "data-id>" }"#),
        Err("notifio.toml:4:40: `search[0].listing.id_attr`: `data-id>` is not an attribute name (it contains '>')\n  hint: write the attribute's name alone, e.g. \"data-id\" or \"data-src\"".into())
    );
}

#[test]
fn a_listing_that_is_neither_is_an_error_at_that_key() {
    let expected = "expected \"json-ld\", { selector = \"…\", id_attr = \"…\" }, { link = \"…\" } or { json_ld = true }";
    assert_eq!(
        listing_of("\"css\""),
        Err(format!(
            "notifio.toml:4:11: `search[0].listing`: {expected}"
        ))
    );
    assert_eq!(
        listing_of("{}"),
        Err(format!(
            "notifio.toml:4:11: `search[0].listing`: {expected}"
        ))
    );
    assert_eq!(
        listing_of("5"),
        Err(format!(
            "notifio.toml:4:11: `search[0].listing`: expected {expected}, found an integer"
        ))
    );
    assert_eq!(
        listing_of(r#"{ selector = "a", link = "/(x)" }"#),
        Err("notifio.toml:4:11: `search[0].listing`: give one way to find listings, not `selector` and `link`".into())
    );
    let e = listing_of(r#"{ selectr = "a" }"#).unwrap_err();
    assert!(
        e.starts_with("notifio.toml:4:13: `search[0].listing.selectr`: unknown key `selectr`\n  hint: did you mean `selector`?"),
        "{e}"
    );
    assert_eq!(
        listing_of(r#"{ link = "/(x)", id_attr = "data-id" }"#),
        Err("notifio.toml:4:38: `search[0].listing.id_attr`: `id_attr` only applies with `selector`, not with `link`".into())
    );
    assert_eq!(
        listing_of("{ json_ld = false }"),
        Err("notifio.toml:4:23: `search[0].listing.json_ld`: `json_ld = false` describes no listings\n  hint: use json_ld = true, a selector or a link regex".into())
    );
}

#[test]
fn link_regexes_must_compile_with_exactly_one_group() {
    let e = listing_of(r#"{ link = "/listing/\\d+" }"#).unwrap_err();
    assert!(
        e.starts_with("notifio.toml:4:20: `search[0].listing.link`: the link regex needs exactly one capture group (the listing id); it has 0"),
        "{e}"
    );
    let e = listing_of(r#"{ link = "/(a)/(b)" }"#).unwrap_err();
    assert!(e.contains("it has 2"), "{e}");
    // A non-capturing group is fine.
    assert!(listing_of(r#"{ link = "/(?:flat|house)/(\\d+)" }"#).is_ok());
    let e = listing_of(r#"{ link = "/listing/(\\d+" }"#).unwrap_err();
    assert_eq!(
        e,
        "notifio.toml:4:20: `search[0].listing.link`: not a valid regex: unclosed group"
    );
}

#[test]
fn css_selectors_must_parse() {
    let e = listing_of(r#"{ selector = "article[" }"#).unwrap_err();
    assert!(
        e.starts_with("notifio.toml:4:24: `search[0].listing.selector`: `article[` is not a CSS selector notifio can run: "),
        "{e}"
    );
    let e = listing_of(r#"{ selector = "a", price = ">>" }"#).unwrap_err();
    assert!(e.contains("`search[0].listing.price`"), "{e}");
}

// ---- backoff and retry ----

#[test]
fn ladders_are_checked_by_the_policy_and_located_here() {
    assert_err(
        &format!("[backoff]\nchallenge = []\n{MIN}"),
        "notifio.toml:2:13: `backoff.challenge`: the challenge ladder is empty; give at least one wait, e.g. [\"1m\"]",
        None,
    );
    assert_err(
        &format!("[backoff]\nrate_limited = [\"5m\", \"2m\"]\n{MIN}"),
        "notifio.toml:2:23: `backoff.rate_limited[1]`: the rate_limited ladder must not decrease: rung 2 (2m) is shorter than rung 1 (5m)",
        None,
    );
    assert_err(
        &format!("[backoff]\nerror = [\"0s\", \"1m\"]\n{MIN}"),
        "notifio.toml:2:10: `backoff.error[0]`: the error ladder has a zero wait at rung 1; every wait must be positive",
        None,
    );
    assert_err(
        &format!("[backoff]\ndenied = [\"5m\", \"ten minutes\"]\n{MIN}"),
        "notifio.toml:2:17: `backoff.denied[1]`: expected a duration like 30s, 2m, 1h",
        None,
    );
    assert_err(
        &format!("[backoff]\njitter = 1.0\n{MIN}"),
        "notifio.toml:2:10: `backoff.jitter`: jitter must be a fraction in [0, 1), e.g. 0.15 for ±15%; got 1",
        None,
    );
    assert_err(
        &format!("[backoff]\nmax_wait = \"0s\"\n{MIN}"),
        "notifio.toml:2:12: `backoff.max_wait`: max_wait must be positive",
        None,
    );
    let c = ok(&format!(
        "[backoff]\nerror = [\"1s\", \"2s\"]\njitter = 0\n{MIN}"
    ));
    assert_eq!(
        c.backoff
            .describe_ladder(notifio_policy::RefusalKind::Error),
        "1s → 2s"
    );
    assert_eq!(c.backoff.jitter(), 0.0);
    // The other ladders keep their defaults.
    assert_eq!(
        c.backoff
            .describe_ladder(notifio_policy::RefusalKind::Challenge),
        "1m → 3m → 8m → 15m → 30m"
    );
}

#[test]
fn retry_overrides_per_class() {
    assert_err(
        &format!("[retry.search]\nattempts = 0\n{MIN}"),
        "notifio.toml:2:12: `retry.search.attempts`: attempts must be at least 1 (it counts the first try); got 0",
        None,
    );
    assert_err(
        &format!("[retry.notify]\njitter = -0.1\n{MIN}"),
        "notifio.toml:2:10: `retry.notify.jitter`: jitter must be a fraction in [0, 1), e.g. 0.25 for ±25%; got -0.1",
        None,
    );
    assert_err(
        &format!("[retry.detail]\nmultiplier = 0.5\n{MIN}"),
        "notifio.toml:2:14: `retry.detail.multiplier`: multiplier must be a number ≥ 1; got 0.5",
        None,
    );
    assert_err(
        &format!("[retry.probe]\ntimeout = \"0s\"\n{MIN}"),
        "notifio.toml:2:11: `retry.probe.timeout`: timeout must be positive",
        None,
    );
    let c = ok(&format!(
        "[retry.search]\nattempts = 5\nmultiplier = 2\nretry_header = false\n{MIN}"
    ));
    assert_eq!(c.retry.search.attempts(), 5);
    assert_eq!(c.retry.search.multiplier(), 2.0);
    assert!(!c.retry.search.retry_header());
    // Unset keys and classes keep their class defaults: the probe still makes one attempt.
    assert_eq!(c.retry.search.initial(), Duration::from_millis(100));
    assert_eq!(c.retry.probe.attempts(), 1);
}

// ---- watch ----

#[test]
fn concurrency_and_history_must_be_positive() {
    assert_err(
        &format!("[watch]\nconcurrency = 0\n{MIN}"),
        "notifio.toml:2:15: `watch.concurrency`: must be at least 1; got 0",
        None,
    );
    assert_err(
        &format!("[watch]\nhistory = -3\n{MIN}"),
        "notifio.toml:2:11: `watch.history`: must be at least 1; got -3",
        None,
    );
}

#[test]
fn dashboard_is_an_address_or_false() {
    let c = ok(&format!("[watch]\ndashboard = false\n{MIN}"));
    assert_eq!(c.watch.dashboard, None);
    let c = ok(&format!("[watch]\ndashboard = \"127.0.0.1:9999\"\n{MIN}"));
    assert_eq!(c.watch.dashboard, Some("127.0.0.1:9999".parse().unwrap()));
    assert_err(
        &format!("[watch]\ndashboard = 7878\n{MIN}"),
        "notifio.toml:2:13: `watch.dashboard`: expected an address like \"127.0.0.1:7878\", or false to disable, found an integer",
        None,
    );
    assert_err(
        &format!("[watch]\ndashboard = \"localhost:7878\"\n{MIN}"),
        "notifio.toml:2:13: `watch.dashboard`: expected an address like \"127.0.0.1:7878\", or false to disable",
        Some("host names are not resolved"),
    );
}

#[test]
fn a_dashboard_reachable_from_the_network_needs_a_token() {
    let text = format!("[watch]\ndashboard = \"0.0.0.0:7878\"\n{MIN}");
    assert_err(
        &text,
        "notifio.toml:2:13: `watch.dashboard`: the dashboard on 0.0.0.0:7878 would be reachable from other machines without a token",
        Some("set NOTIFIO_DASHBOARD_TOKEN (or watch.dashboard_token), or listen on 127.0.0.1"),
    );
    // From the environment (preferred) …
    let with_env = Environment {
        dashboard_token: Some("from-env".into()),
        ..env()
    };
    let c = parse_with(&text, &with_env).unwrap();
    assert_eq!(c.watch.dashboard_token.as_deref(), Some("from-env"));
    // … or from the file; the environment wins when both are set.
    let in_file =
        format!("[watch]\ndashboard = \"0.0.0.0:7878\"\ndashboard_token = \"from-file\"\n{MIN}");
    assert_eq!(
        ok(&in_file).watch.dashboard_token.as_deref(),
        Some("from-file")
    );
    let both = parse_with(&in_file, &with_env).unwrap();
    assert_eq!(both.watch.dashboard_token.as_deref(), Some("from-env"));
    // Debug never shows it.
    let shown = format!("{both:?}");
    assert!(
        !shown.contains("from-env") && !shown.contains("from-file"),
        "{shown}"
    );
    assert!(shown.contains("<redacted>"));
}

#[test]
fn paths_expand_tilde_and_are_relative_to_the_config_file() {
    let c = ok(&format!(
        "[watch]\nstate_dir = \"state\"\n[notify]\nmailbox = \"~/mail/notifio.mbox\"\n{MIN}"
    ));
    assert_eq!(c.watch.state_dir, PathBuf::from("/etc/notifio/state"));
    assert_eq!(
        c.notify.mailbox,
        Some(PathBuf::from("/home/ana/mail/notifio.mbox"))
    );
    assert_err(
        &format!("[watch]\nstate_dir = \"~bob/state\"\n{MIN}"),
        "notifio.toml:2:13: `watch.state_dir`: `~bob/state`: only `~` and `~/…` are expanded; write the full path",
        None,
    );
    let no_home = Environment::default();
    let e = err_with(MIN, &no_home);
    assert!(
        e.starts_with("notifio.toml:1:1: `watch.state_dir`: this system has no data directory"),
        "{e}"
    );
}

// ---- fetch ----

#[test]
fn body_cap_takes_sizes_or_bytes() {
    let cap = |v: &str| {
        ok(&format!("[fetch]\nbody_cap = {v}\n{MIN}"))
            .fetch
            .body_cap
    };
    assert_eq!(cap("\"2MiB\""), 2 * 1024 * 1024);
    assert_eq!(cap("\"500kB\""), 500_000);
    assert_eq!(cap("65536"), 65536);
    assert_err(
        &format!("[fetch]\nbody_cap = \"ten megs\"\n{MIN}"),
        "notifio.toml:2:12: `fetch.body_cap`: expected a size like 10MiB, 512KiB or a number of bytes",
        None,
    );
    assert_err(
        &format!("[fetch]\nbody_cap = 0\n{MIN}"),
        "notifio.toml:2:12: `fetch.body_cap`: must be at least 1; got 0",
        None,
    );
    let c = ok(&format!(
        "[fetch]\nuser_agent = \"notifio/0.1\"\naccept_language = \"de-DE\"\n{MIN}"
    ));
    assert_eq!(c.fetch.user_agent.as_deref(), Some("notifio/0.1"));
    assert_eq!(c.fetch.accept_language.as_deref(), Some("de-DE"));
}

// ---- notify ----

#[test]
fn email_to_is_a_string_or_an_array_and_smtp_is_checked() {
    let c = ok(&format!(
        "[notify.email]\nto = [\"a@example.com\", \"Bo <b@example.com>\"]\nsmtp = \"smtps://me@mail.example:465\"\npassword_file = \"smtp.pw\"\n{MIN}"
    ));
    let e = c.notify.email.as_ref().unwrap();
    assert_eq!(e.to, vec!["a@example.com", "Bo <b@example.com>"]);
    assert_eq!(e.from, "notifio@localhost");
    assert_eq!(e.password_file, Some(PathBuf::from("/etc/notifio/smtp.pw")));
    // An email channel means no default mailbox.
    assert_eq!(c.notify.mailbox, None);

    let c = ok(&format!(
        "[notify]\nemail = {{ to = \"a@example.com\", smtp = \"sendmail\" }}\n{MIN}"
    ));
    assert_eq!(c.notify.email.unwrap().smtp, "sendmail");

    assert_err(
        &format!("[notify.email]\nto = \"not an address\"\n{MIN}"),
        "notifio.toml:2:6: `notify.email.to`: `not an address` is not an email address",
        None,
    );
    assert_err(
        &format!("[notify.email]\nto = []\n{MIN}"),
        "notifio.toml:2:6: `notify.email.to`: must name at least one address",
        None,
    );
    assert_err(
        &format!("[notify.email]\nfrom = \"me@example.com\"\n{MIN}"),
        "notifio.toml:1:1: `notify.email.to`: missing `to`: who should get the emails",
        None,
    );
    assert_err(
        &format!("[notify.email]\nto = \"a@example.com\"\nsmtp = \"http://mail.example\"\n{MIN}"),
        "notifio.toml:3:8: `notify.email.smtp`: unsupported scheme `http:`",
        Some("smtp+starttls://"),
    );
}

#[test]
fn an_smtp_password_in_the_url_is_refused_without_echoing_it() {
    let e = err(&format!(
        "[notify.email]\nto = \"a@example.com\"\nsmtp = \"smtp+starttls://me:hunter2@mail.example:587\"\n{MIN}"
    ));
    assert_eq!(
        e,
        "notifio.toml:3:8: `notify.email.smtp`: the SMTP URL contains a password; notifio keeps passwords out of its config\n  hint: remove it from the URL (keep the user name) and set NOTIFIO_SMTP_PASSWORD or email.password_file"
    );
    assert!(!e.contains("hunter2"));
}

#[test]
fn webhooks_are_checked_and_their_urls_stay_out_of_debug() {
    let c = ok(&format!(
        "[notify.webhook]\nurl = \"https://ntfy.sh/secret-topic\"\nformat = \"ntfy\"\n{MIN}"
    ));
    let hook = c.notify.webhook.as_ref().unwrap();
    assert_eq!(hook.format, WebhookFormat::Ntfy);
    assert_eq!(c.notify.mailbox, None);
    let shown = format!("{c:?}");
    assert!(!shown.contains("secret-topic"), "{shown}");
    assert!(shown.contains("https://ntfy.sh/…"), "{shown}");

    assert_err(
        &format!("[notify.webhook]\nurl = \"https://ntfy.sh/t\"\nformat = \"jsn\"\n{MIN}"),
        "notifio.toml:3:10: `notify.webhook.format`: unknown webhook format `jsn`",
        Some("did you mean `json`?"),
    );
    let e = err(&format!(
        "[notify.webhook]\nurl = \"ftp://x.example/secret-path\"\n{MIN}"
    ));
    assert_eq!(
        e,
        "notifio.toml:2:7: `notify.webhook.url`: the webhook URL must be an http:// or https:// URL with a host"
    );
}

// ---- sites ----

#[test]
fn site_keys_accept_a_domain_or_a_url_and_normalise() {
    let c = ok(&format!(
        "[site.\"www.Facebook.com\"]\nspacing = \"5s\"\n[site.\"https://m.idealista.com/x\"]\ncookies = \"idealista.txt\"\n{MIN}"
    ));
    let keys: Vec<&str> = c.sites.keys().map(String::as_str).collect();
    assert_eq!(keys, ["facebook.com", "idealista.com"]);
    assert_eq!(
        c.sites["idealista.com"].cookies,
        Some(PathBuf::from("/etc/notifio/idealista.txt"))
    );
    assert_eq!(
        c.spacing_for(&c.searches[0].site, None),
        Duration::from_secs(2),
        "idealista has no spacing of its own"
    );
    let ten = Some(Duration::from_secs(10));
    assert_eq!(
        c.spacing_for(&c.searches[0].site, ten),
        Duration::from_secs(10),
        "a profile's spacing beats watch.spacing"
    );
    let fb = notifio_policy::SiteKey::from_url("https://facebook.com/").unwrap();
    assert_eq!(
        c.spacing_for(&fb, ten),
        Duration::from_secs(5),
        "the site's own setting beats its profile's"
    );

    assert_err(
        &format!(
            "[site.\"facebook.com\"]\nspacing = \"5s\"\n[site.\"www.facebook.com\"]\nspacing = \"9s\"\n{MIN}"
        ),
        "notifio.toml:3:1: `site.\"www.facebook.com\"`: `www.facebook.com` is the same site as `facebook.com` (both are facebook.com)",
        Some("merge the two tables"),
    );
    assert_err(
        &format!("[site.\"ftp://x.example\"]\nspacing = \"5s\"\n{MIN}"),
        "notifio.toml:1:1: `site.\"ftp://x.example\"`: `ftp://x.example/` uses `ftp:`; only http:// and https:// pages can be watched",
        None,
    );
    assert_err(
        &format!("[site.\"a.com\"]\ncookie = \"c.txt\"\n{MIN}"),
        "notifio.toml:2:1: `site.\"a.com\".cookie`: unknown key `cookie`",
        Some("did you mean `cookies`?"),
    );
}

// ---- other TOML shapes ----

#[test]
fn dotted_keys_and_inline_arrays_of_searches_work_too() {
    let c = ok(
        "watch.interval = \"40s\"\nsearch = [{ name = \"a\", url = \"https://a.example/\", listing = \"json-ld\" }, { name = \"b\", url = \"https://b.example/\", interval = \"1m\", listing = \"json-ld\" }]\n",
    );
    assert_eq!(c.searches[0].interval, Duration::from_secs(40));
    assert_eq!(c.searches[1].interval, Duration::from_secs(60));
    assert_err(
        &format!("watch.intervall = \"40s\"\n{MIN}"),
        "notifio.toml:1:7: `watch.intervall`: unknown key `intervall`",
        Some("did you mean `interval`?"),
    );
    assert_err(
        "search = [{ name = \"a\", url = \"https://a.example/\", listing = \"json-ld\" }, { name = \"a\", url = \"https://b.example/\" }]\n",
        "notifio.toml:1:85: `search[1].name`: duplicate search name `a`",
        None,
    );
}

/// What users see, printed before anything is asserted (run with `--nocapture`): a human
/// reading this catches a confusing message that an assertion on one substring would not.
#[test]
fn error_gallery() {
    let cases = [
        format!("[watch]\ninterval = \"30 seconds\"\n{MIN}"),
        format!("[wach]\n{MIN}"),
        format!("[backoff]\ndenied = [\"5m\", \"1m\"]\n{MIN}"),
        format!("{MIN}listing = {{ link = \"/x/\\\\d+\" }}\n"),
        format!("[watch]\ndashboard = \"0.0.0.0:80\"\n{MIN}"),
        "[[search]]\nname = \"a\"\nurl = \"file:///etc/passwd\"\n".to_owned(),
    ];
    for text in &cases {
        println!("{}\n", err(text));
    }
    for text in &cases {
        let e = parse_with(text, &env()).unwrap_err();
        assert!(e.line > 0 && e.col > 0 && !e.key.is_empty(), "{e}");
    }
}

/// A site gets one request per `spacing`: more searches on one site than can go round in a
/// reasonable time is a config error pointing at the one too many.
#[test]
fn too_many_searches_on_one_site_is_an_error_at_the_one_too_many() {
    let n = config::MAX_SEARCHES_PER_SITE + 1;
    let mut text = String::with_capacity(n * 64);
    for i in 0..n {
        text.push_str(&format!(
            "[[search]]\nname = \"s{i}\"\nurl = \"https://a.example/{i}\"\nlisting = \"json-ld\"\n"
        ));
    }
    let e = err(&text);
    let line = 4 * (n - 1) + 3;
    assert!(
        e.starts_with(&format!(
            "notifio.toml:{line}:7: `search[{}].url`: more than 1000 searches on a.example",
            n - 1
        )),
        "{e}"
    );
    // One fewer is fine.
    text.truncate(text.rfind("[[search]]").unwrap());
    assert_eq!(ok(&text).searches.len(), n - 1);
}

#[test]
fn dashboard_hosts_are_host_names() {
    let c = ok(&format!(
        "[watch]\ndashboard_hosts = [\"notifio.lan\", \"proxy.example:8443\"]\n{MIN}"
    ));
    assert_eq!(
        c.watch.dashboard_hosts,
        vec!["notifio.lan", "proxy.example:8443"]
    );
    assert!(ok(MIN).watch.dashboard_hosts.is_empty());
    assert_err(
        &format!("[watch]\ndashboard_hosts = [\"ok.lan\", \"http://notifio.lan/\"]\n{MIN}"),
        "notifio.toml:2:30: `watch.dashboard_hosts[1]`: `http://notifio.lan/` is not a host name",
        Some("notifio.lan:8443"),
    );
}

/// Filters and price rules: `[watch]` gives defaults, each search key replaces its own.
#[test]
fn filters_and_price_rules_default_from_watch_and_each_search_key_replaces_one() {
    use notifio::filter::Pattern;
    use notifio::price::MinDrop;
    let c = ok(
        "[watch]\nmax_price = 1200\nexclude = [\"WG\", \"/tausch/\"]\nmin_drop = \"5%\"\n\n\
         [[search]]\nname = \"a\"\nurl = \"https://www.idealista.com/a\"\n\n\
         [[search]]\nname = \"b\"\nurl = \"https://www.idealista.com/b\"\nmax_price = 900.5\nmin_rooms = 2\n\
         include = [\"Ático\"]\nexclude = []\nstrict = true\nmin_drop = 50\nnotify_price_rises = true\n\
         skip_cross_site_duplicates = true\n",
    );
    let a = &c.searches[0].announce;
    assert_eq!(a.filters.max_price, Some(1200.0));
    assert_eq!(a.filters.exclude.len(), 2);
    assert_eq!(a.filters.exclude[0], Pattern::Words("wg".into()));
    assert!(matches!(a.filters.exclude[1], Pattern::Regex(_)));
    assert_eq!(a.prices.min_drop, MinDrop::Percent(5.0));
    assert!(a.prices.drops && !a.prices.rises && !a.skip_cross_site_duplicates);
    let b = &c.searches[1].announce;
    assert_eq!(b.filters.max_price, Some(900.5));
    assert_eq!(b.filters.min_rooms, Some(2.0));
    assert_eq!(b.filters.include, vec![Pattern::Words("atico".into())]);
    assert!(b.filters.exclude.is_empty(), "its own (empty) list");
    assert!(b.filters.strict);
    assert_eq!(b.prices.min_drop, MinDrop::Amount(50.0));
    assert!(b.prices.rises && b.skip_cross_site_duplicates);
    assert_eq!(c.watch.announce.filters.max_price, Some(1200.0));
    assert!(ok(MIN).searches[0].announce.filters.is_empty());
}

#[test]
fn a_bad_filter_names_its_key() {
    let search = "[[search]]\nname = \"s\"\nurl = \"https://www.idealista.com/a\"\n";
    assert_err(
        &format!("{search}min_price = 1500\nmax_price = 1000\n"),
        "notifio.toml:5:13: `search[0].max_price`: `min_price` (1500) is above `max_price` (1000): nothing can match",
        None,
    );
    // The bound from [watch] and the search's own are compared too.
    assert_err(
        &format!("[watch]\nmax_rooms = 2\n\n{search}min_rooms = 3\n"),
        "notifio.toml:7:13: `search[0].min_rooms`: `min_rooms` (3) is above `max_rooms` (2): nothing can match",
        None,
    );
    assert_err(
        &format!("{search}max_area = -5\n"),
        "notifio.toml:4:12: `search[0].max_area`: must be a number of 0 or more; got -5",
        None,
    );
    assert_err(
        &format!("{search}include = [\"balcón\", \"/(terraza/\"]\n"),
        "notifio.toml:4:22: `search[0].include[1]`: not a valid regex: unclosed group",
        Some("a regex between slashes"),
    );
    assert_err(
        &format!("{search}exclude = [\" \"]\n"),
        "notifio.toml:4:12: `search[0].exclude[0]`: an empty word matches everything",
        None,
    );
    assert_err(
        &format!("{search}min_drop = \"five percent\"\n"),
        "notifio.toml:4:12: `search[0].min_drop`: `five percent` is neither an amount (50) nor a percentage (\"5%\")",
        Some("min_drop = \"5%\""),
    );
    assert_err(
        &format!("{search}min_drop = \"120%\"\n"),
        "notifio.toml:4:12: `search[0].min_drop`: `120%`: a percentage above 0 and below 100",
        None,
    );
    assert_err(
        &format!("{search}strict = \"yes\"\n"),
        "notifio.toml:4:10: `search[0].strict`: expected `true` or `false`, found a string",
        None,
    );
}

// ---- pages, app fetch, app_api ----

const IS24_SEARCH: &str =
    "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten?price=-1200.0";

#[test]
fn pages_default_to_one_and_are_one_to_ten() {
    assert_eq!(ok(MIN).searches[0].pages, 1);
    let c = ok("[[search]]\nname = \"x\"\nurl = \"https://www.idealista.com/x\"\npages = 3\n");
    assert_eq!(c.searches[0].pages, 3);
    assert_err(
        "[[search]]\nname = \"x\"\nurl = \"https://www.idealista.com/x\"\npages = 11\n",
        "notifio.toml:4:9: `search[0].pages`: 11 pages is more than 10",
        Some("each page is a request under the site's spacing"),
    );
    assert_err(
        "[[search]]\nname = \"x\"\nurl = \"https://www.idealista.com/x\"\npages = 0\n",
        "notifio.toml:4:9: `search[0].pages`: must be at least 1; got 0",
        None,
    );
    // Facebook Marketplace has no pages to follow.
    let fb = "[site.\"facebook.com\"]\ncookies = \"fb.txt\"\n\n[[search]]\nname = \"fb\"\nurl = \"https://www.facebook.com/marketplace/madrid/propertyrentals\"\npages = 2\n";
    assert_err(
        fb,
        "notifio.toml:7:9: `search[0].pages`: search `fb` is read with the facebook profile, which reads one page: its site shows more results as you scroll, not on pages",
        Some("remove `pages`"),
    );
}

#[test]
fn a_listing_may_say_where_its_next_page_is() {
    assert_eq!(
        listing_of(r#"{ link = "/l/(\\d+)", next = "a.next" }"#),
        Ok(Some(ListingSpec::Link {
            link: r"/l/(\d+)".into(),
            next: Some("a.next".into())
        }))
    );
    assert_eq!(
        listing_of(r#"{ json_ld = true, next = "li.next" }"#),
        Ok(Some(ListingSpec::JsonLd {
            next: Some("li.next".into())
        }))
    );
    let Ok(Some(ListingSpec::Selector(card))) =
        listing_of(r#"{ selector = "article", id_attr = "data-id", next = "nav a.more" }"#)
    else {
        panic!("a selector spec");
    };
    assert_eq!(card.next.as_deref(), Some("nav a.more"));
    let e = listing_of(r#"{ selector = "article", next = "a[" }"#).unwrap_err();
    assert!(
        e.contains("`search[0].listing.next`: `a[` is not a CSS selector"),
        "{e}"
    );
}

/// ImmobilienScout24 is read through its app's request by default; the request is worked out
/// at start, and the endpoint can be moved.
#[test]
fn is24_searches_use_the_app_by_default_worked_out_at_start() {
    let c = ok(&format!(
        "[[search]]\nname = \"b\"\nurl = \"{IS24_SEARCH}\"\n"
    ));
    let s = &c.searches[0];
    assert_eq!(s.fetch, config::FetchMode::App);
    let app = s.app.as_ref().expect("the app request");
    assert_eq!(app.url.host_str(), Some("api.mobile.immobilienscout24.de"));
    assert!(app.url.as_str().contains("price=-1200.0"), "{}", app.url);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());

    let c = ok(&format!(
        "[site.\"immobilienscout24.de\"]\napp_api = \"http://127.0.0.1:8099/is24/\"\n\n[[search]]\nname = \"b\"\nurl = \"{IS24_SEARCH}&listingtags=holzbalken\"\n"
    ));
    let app = c.searches[0].app.as_ref().unwrap();
    assert_eq!(
        app.url.as_str().split('?').next(),
        Some("http://127.0.0.1:8099/is24/search/list")
    );
    assert_eq!(
        c.sites["immobilienscout24.de"]
            .app_api
            .as_ref()
            .map(url::Url::as_str),
        Some("http://127.0.0.1:8099/is24/")
    );
    // What the app leaves out: one warning for the search, naming it.
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("search \"b\": ImmobilienScout24's app search leaves out `listingtags=holzbalken` (not understood)"),
        "{}",
        w[0]
    );

    // http and browser stay available, and then there is no app request.
    for mode in ["http", "browser"] {
        let c = ok(&format!(
            "[site.\"immobilienscout24.de\"]\nfetch = \"{mode}\"\n\n[[search]]\nname = \"b\"\nurl = \"{IS24_SEARCH}\"\n"
        ));
        assert_eq!(c.searches[0].fetch.as_str(), mode);
        assert!(c.searches[0].app.is_none());
    }
}

#[test]
fn an_app_search_that_cannot_be_translated_is_an_error_at_its_url() {
    assert_err(
        "[[search]]\nname = \"b\"\nurl = \"https://www.immobilienscout24.de/expose/150000001\"\n",
        "notifio.toml:3:7: `search[0].url`: `/expose/150000001` is not an ImmobilienScout24 search: copy the address of a result page, which looks like https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten?…",
        None,
    );
    assert_err(
        "[[search]]\nname = \"b\"\nurl = \"https://www.immobilienscout24.de/Suche/de/berlin/berlin/gewerbeflaeche-mieten\"\n",
        "notifio.toml:3:7: `search[0].url`: ImmobilienScout24 search `gewerbeflaeche-mieten`: Notifio cannot translate this kind of search for the app; use a search for one kind of property (e.g. wohnung-mieten, haus-kaufen, wg-zimmer) or fetch = \"browser\"",
        None,
    );
    assert_err(
        &format!(
            "[site.\"immobilienscout24.de\"]\napp_api = \"ftp://x/\"\n\n[[search]]\nname = \"b\"\nurl = \"{IS24_SEARCH}\"\n"
        ),
        "notifio.toml:2:11: `site.\"immobilienscout24.de\".app_api`: `ftp://x/` is not an http(s) URL",
        Some("https://api.mobile.immobilienscout24.de/"),
    );
}

#[test]
fn the_app_fetch_mode_is_for_immobilienscout24_only() {
    assert_err(
        "[site.\"idealista.com\"]\nfetch = \"app\"\n\n[[search]]\nname = \"x\"\nurl = \"https://www.idealista.com/x\"\n",
        "notifio.toml:2:9: `site.\"idealista.com\".fetch`: search `x` is read with the idealista profile, which has no app request: fetch = \"app\" is for ImmobilienScout24 (the immoscout24 profile)",
        Some("fetch = \"http\" or \"browser\""),
    );
    assert_err(
        "[site.\"idealista.com\"]\nfetch = \"apps\"\n\n[[search]]\nname = \"x\"\nurl = \"https://www.idealista.com/x\"\n",
        "notifio.toml:2:9: `site.\"idealista.com\".fetch`: unknown fetch mode `apps`",
        Some("`app`"),
    );
}

/// `quiet_hours`, `digest` and `heartbeat`: `[notify]`'s are every channel's, a channel's
/// table overrides them, and `"off"` (or `""`) turns one off for that channel alone.
#[test]
fn quiet_hours_digest_and_heartbeat_apply_per_channel() {
    let c = ok(&format!(
        "[notify]\nquiet_hours = \"23:00-07:00\"\ndigest = \"1h\"\nmailbox = \"n.mbox\"\n\
         webhook = {{ url = \"https://hooks.example/x\", quiet_hours = \"off\", heartbeat = \"24h\" }}\n\
         telegram = {{ token = \"1:x\", chat_id = \"1\", quiet_hours = \"22:00-08:00\", digest = \"\" }}\n{MIN}"
    ));
    let n = &c.notify;
    let everywhere = n.pacing_of("mailbox");
    assert_eq!(
        everywhere.quiet_hours.map(|q| q.to_string()).as_deref(),
        Some("23:00-07:00")
    );
    assert_eq!(everywhere.digest, Some(Duration::from_secs(3600)));
    assert_eq!(everywhere.heartbeat, None);
    let hook = n.pacing_of("webhook");
    assert_eq!(hook.quiet_hours, None, "off for this channel alone");
    assert_eq!(hook.digest, Some(Duration::from_secs(3600)), "[notify]'s");
    assert_eq!(hook.heartbeat, Some(Duration::from_secs(86_400)));
    let tg = n.pacing_of("telegram");
    assert_eq!(
        tg.quiet_hours.map(|q| q.to_string()).as_deref(),
        Some("22:00-08:00")
    );
    assert_eq!(tg.digest, None);
    // None of it by default.
    assert_eq!(
        ok(MIN).notify.pacing_of("mailbox"),
        notifio::notify::pace::Pacing::default()
    );
}

#[test]
fn bad_quiet_hours_digests_and_heartbeats_name_their_place_and_key() {
    assert_err(
        &format!("[notify]\nquiet_hours = \"25:00-07:00\"\n{MIN}"),
        "notifio.toml:2:15: `notify.quiet_hours`: expected quiet hours like \"23:00-07:00\", or \"off\"",
        Some("quiet_hours = \"23:00-07:00\""),
    );
    assert_err(
        &format!("[notify]\nquiet_hours = \"07:00-07:00\"\n{MIN}"),
        "notifio.toml:2:15: `notify.quiet_hours`: the quiet hours start and end at the same time: \"off\" turns them off",
        None,
    );
    assert_err(
        &format!("[notify]\nquiet_hours = 23\n{MIN}"),
        "notifio.toml:2:15: `notify.quiet_hours`: expected a string, found an integer",
        None,
    );
    assert_err(
        &format!(
            "[notify.telegram]\ntoken = \"1:x\"\nchat_id = \"1\"\nquiet_hours = \"23:00-7\"\n{MIN}"
        ),
        "notifio.toml:4:15: `notify.telegram.quiet_hours`: expected quiet hours like \"23:00-07:00\", or \"off\"",
        None,
    );
    assert_err(
        &format!("[notify]\ndigest = \"10s\"\n{MIN}"),
        "notifio.toml:2:10: `notify.digest`: must be from 1m to 24h",
        Some("digest = \"1h\""),
    );
    assert_err(
        &format!("[notify.webhook]\nurl = \"https://h.example/\"\nheartbeat = \"daily\"\n{MIN}"),
        "notifio.toml:3:13: `notify.webhook.heartbeat`: expected a duration like 30s, 2m, 1h",
        Some("heartbeat = \"24h\""),
    );
    assert_err(
        &format!("[notify.email]\nto = \"me@example.com\"\nheartbeat = \"5m\"\n{MIN}"),
        "notifio.toml:3:13: `notify.email.heartbeat`: must be from 1h to 720h",
        None,
    );
}
