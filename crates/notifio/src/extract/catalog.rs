//! Sites as data: the profiles Notifio knows, each described by a TOML file.
//!
//! A profile file says which sites it covers (`hosts`), how their result pages are fetched
//! (`fetch`), how a card and its fields are found (`[listing]`, the same keys as a search's
//! `listing`, or `[json]`: JSONPaths into a script's JSON, for pages that embed their results
//! that way), and what the site's refusal pages look like (`[markers]`). The built-in files
//! are embedded in the binary (`crates/notifio/sites/`); a user adds one, or overrides a
//! built-in one by its `name`, by dropping a file into `sites/` beside the config. Where a
//! site needs what only code can do (Idealista's project ads, ImmobilienScout24's app
//! request, Facebook's embedded JSON) the file says `code = "…"` and still names the hosts
//! and the fetch mode, so every site is listed and picked the same way (docs/sites.md).
//!
//! Read with serde and `deny_unknown_fields` rather than the config's spanned walker: the
//! files are small and flat, and toml's errors already carry the line, column and key.

use super::generic::Generic;
use super::json_paths::{JsonReader, JsonTable};
use super::{Extraction, ProfileError, SiteProfile};
use crate::listing::{CardSpec, FieldSpec, ListingSpec};
use notifio_policy::{Markers, SiteKey};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

/// The profile files built into the binary: `(file name, text)`; the code profiles, then the
/// files in name order (fuzz/seed.sh seeds `extract_profiles` by a file's place in it).
const BUILT_IN: &[(&str, &str)] = &[
    ("idealista.toml", include_str!("../../sites/idealista.toml")),
    (
        "immoscout24.toml",
        include_str!("../../sites/immoscout24.toml"),
    ),
    ("facebook.toml", include_str!("../../sites/facebook.toml")),
    (
        "immobiliare.toml",
        include_str!("../../sites/immobiliare.toml"),
    ),
    ("immowelt.toml", include_str!("../../sites/immowelt.toml")),
    (
        "kleinanzeigen.toml",
        include_str!("../../sites/kleinanzeigen.toml"),
    ),
    ("rightmove.toml", include_str!("../../sites/rightmove.toml")),
    ("subito.toml", include_str!("../../sites/subito.toml")),
    (
        "wg-gesucht.toml",
        include_str!("../../sites/wg-gesucht.toml"),
    ),
    ("willhaben.toml", include_str!("../../sites/willhaben.toml")),
];

/// The code profiles a file may name with `code = "…"`.
const CODE_PROFILES: [&str; 3] = ["idealista", "immoscout24", "facebook"];

/// The name of the profile that reads a site by the search's own `listing` spec.
pub const GENERIC: &str = "generic";

/// Where a profile comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Built into the binary.
    BuiltIn,
    /// A user's file.
    File(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BuiltIn => f.write_str("built in"),
            Self::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One profile of the catalog.
#[derive(Clone, Debug)]
pub struct Entry {
    /// `name`: what `profile = "…"` names.
    pub name: String,
    /// `about`: one line for `notifio profiles`.
    pub about: String,
    /// `hosts`: the sites (as [`SiteKey`]s: `wg-gesucht.de`) whose searches get it.
    pub hosts: Vec<String>,
    /// `fetch`: `http`, `browser` or `app`, when the site's config names none.
    pub fetch: &'static str,
    /// Where it comes from.
    pub source: Source,
    /// `code = "…"`: read by that code profile; else by the file's `[listing]`.
    pub code: Option<&'static str>,
    /// The profile a file describes (none for a code profile: see [`Entry::code`]).
    declared: Option<Arc<Declared>>,
    /// A digest of the file's text: two catalogs are equal when their files are.
    digest: u64,
}

/// Every profile Notifio can use: the built-in ones, then the user's files over them.
#[derive(Clone, Debug)]
pub struct Catalog {
    entries: Vec<Entry>,
}

impl PartialEq for Catalog {
    fn eq(&self, other: &Self) -> bool {
        self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(&other.entries)
                .all(|(a, b)| a.name == b.name && a.source == b.source && a.digest == b.digest)
    }
}

/// A profile file that cannot be used, with where in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CatalogError {
    /// The file.
    pub path: PathBuf,
    /// Its text (for line:col).
    pub text: String,
    /// Byte offset of the problem.
    pub offset: usize,
    /// The key at fault (`listing.selector`), or empty.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

static BUILT_IN_CATALOG: LazyLock<Arc<Catalog>> = LazyLock::new(|| {
    let mut entries = Vec::new();
    for (file, text) in BUILT_IN {
        match read_file(text, Source::BuiltIn) {
            Ok(e) => entries.push(e),
            // A test reads every built-in file; this cannot happen in a released binary.
            Err(e) => unreachable!("built-in profile {file}: {}", e.message),
        }
    }
    Arc::new(Catalog { entries })
});

impl Catalog {
    /// The profiles built into the binary.
    #[must_use]
    pub fn built_in() -> Arc<Self> {
        Arc::clone(&BUILT_IN_CATALOG)
    }

    /// The built-in profiles with the `*.toml` files of `dirs` over them (a missing directory
    /// adds nothing): a file whose `name` is a built-in one replaces it, and a user's file is
    /// picked first for its hosts.
    ///
    /// # Errors
    /// A file that cannot be read, is over [`MAX_PROFILE_BYTES`] or is not a valid profile;
    /// two user files with one name, or claiming one site.
    pub fn with_user_dirs(dirs: &[PathBuf]) -> Result<Self, CatalogError> {
        let mut catalog = (*Self::built_in()).clone();
        let mut mine: Vec<Entry> = Vec::new();
        for dir in dirs {
            let Ok(read) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = read
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
                .collect();
            files.sort();
            for path in files {
                let text = read_capped(&path).map_err(|message| CatalogError {
                    path: path.clone(),
                    text: String::new(),
                    offset: 0,
                    key: String::new(),
                    message,
                })?;
                let entry =
                    read_file(&text, Source::File(path.clone())).map_err(|e| CatalogError {
                        path: path.clone(),
                        text: text.clone(),
                        ..e
                    })?;
                if let Some(first) = mine.iter().find(|m| m.name == entry.name) {
                    return Err(CatalogError {
                        path: path.clone(),
                        offset: text.find("name").unwrap_or(0),
                        text,
                        key: "name".into(),
                        message: format!(
                            "profile `{}` is also defined in {}: give each file its own name",
                            entry.name, first.source
                        ),
                    });
                }
                // Which of two files would read a site is not for the order of names in a
                // directory to decide.
                let claimed = mine.iter().find_map(|m| {
                    let host = entry.hosts.iter().find(|h| m.hosts.contains(h))?;
                    Some((m, host))
                });
                if let Some((first, host)) = claimed {
                    return Err(CatalogError {
                        path: path.clone(),
                        offset: text.find(&format!("\"{host}\"")).unwrap_or(0),
                        message: format!(
                            "site `{host}` is claimed by this file (profile `{}`) and by {} \
                             (profile `{}`): one file per site, so remove it from one of them",
                            entry.name, first.source, first.name
                        ),
                        text,
                        key: "hosts".into(),
                    });
                }
                mine.push(entry);
            }
        }
        catalog
            .entries
            .retain(|b| !mine.iter().any(|m| m.name == b.name));
        mine.append(&mut catalog.entries);
        Ok(Self { entries: mine })
    }

    /// Every profile, the user's first, then the built-in ones.
    #[must_use]
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The profile named `name` (any case).
    #[must_use]
    pub fn by_name(&self, name: &str) -> Option<&Entry> {
        let name = name.trim();
        self.entries
            .iter()
            .find(|e| e.name.eq_ignore_ascii_case(name))
    }

    /// The profile a site's searches get when none is named; `None`: the generic profile.
    #[must_use]
    pub fn by_site(&self, site: &SiteKey) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.hosts.iter().any(|h| h == site.as_str()))
    }

    /// The names `profile = "…"` accepts, `generic` last.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.entries.iter().map(|e| e.name.clone()).collect();
        names.push(GENERIC.to_owned());
        names
    }

    /// The profile a file describes, shared: `None` for a code profile.
    pub(super) fn declared(&self, name: &str) -> Option<Arc<Declared>> {
        self.by_name(name).and_then(|e| e.declared.clone())
    }
}

/// A profile read from a file's `[listing]` (the generic reader) or `[json]`, with the
/// file's name, markers and fetch mode.
#[derive(Debug)]
pub struct Declared {
    name: String,
    reader: Reader,
    markers: Markers,
    fetch: &'static str,
}

/// How a file's profile reads a page.
#[derive(Debug)]
enum Reader {
    /// `[listing]`: cards in the HTML.
    Cards(Generic),
    /// `[json]`: the result list in a script's JSON.
    Json(Box<JsonReader>),
}

impl SiteProfile for Declared {
    fn name(&self) -> &str {
        &self.name
    }

    fn markers(&self) -> Markers {
        self.markers.clone()
    }

    fn extract(&self, body: &[u8], page_url: &url::Url) -> Extraction {
        match &self.reader {
            Reader::Cards(g) => g.extract(body, page_url),
            Reader::Json(j) => j.extract(body, page_url),
        }
    }

    fn ready_selector(&self) -> Option<&str> {
        match &self.reader {
            Reader::Cards(g) => g.ready_selector(),
            Reader::Json(j) => Some(j.ready_selector()),
        }
    }

    /// A `[json]` profile reads one page: its payloads carry no next page's URL.
    fn next_page(&self, body: &[u8], page_url: &url::Url, page: u32) -> Option<url::Url> {
        match &self.reader {
            Reader::Cards(g) => g.next_page(body, page_url, page),
            Reader::Json(_) => None,
        }
    }

    fn default_fetch(&self) -> &'static str {
        self.fetch
    }
}

/// The most a profile file may hold. The largest built-in one is a few KiB; a file far past
/// this is not a profile (a log, a page, a sparse file) and is refused before it is read.
pub const MAX_PROFILE_BYTES: u64 = 256 * 1024;

/// A user's profile file as text, reading no more than [`MAX_PROFILE_BYTES`] of it; the
/// error says why not, naming the cap.
fn read_capped(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| format!("cannot read this profile file: {e}");
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_PROFILE_BYTES {
        return Err(format!(
            "this profile file is over {} KiB, the most a profile may be: not a profile file",
            MAX_PROFILE_BYTES / 1024
        ));
    }
    String::from_utf8(bytes).map_err(|_| "this profile file is not UTF-8 text".to_owned())
}

/// A profile file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    #[serde(default)]
    about: String,
    hosts: Vec<String>,
    fetch: Option<String>,
    code: Option<String>,
    listing: Option<serde_spanned::Spanned<ListingTable>>,
    json: Option<serde_spanned::Spanned<JsonTable>>,
    #[serde(default)]
    markers: MarkersTable,
}

/// `[listing]`: the keys of a search's `listing` (docs/sites.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListingTable {
    selector: Option<String>,
    id_attr: Option<String>,
    link: Option<String>,
    #[serde(default)]
    json_ld: bool,
    title: Option<FieldTable>,
    price: Option<FieldTable>,
    rooms: Option<FieldTable>,
    area: Option<FieldTable>,
    image: Option<FieldTable>,
    description: Option<FieldTable>,
    next: Option<String>,
}

/// A field: `"h2 a"`, or `{ selector = "img", attr = "data-src" }`.
#[derive(Deserialize)]
#[serde(untagged)]
enum FieldTable {
    Selector(String),
    Table {
        selector: String,
        attr: Option<String>,
    },
}

impl From<FieldTable> for FieldSpec {
    fn from(f: FieldTable) -> Self {
        match f {
            FieldTable::Selector(s) => Self::text(&s),
            FieldTable::Table { selector, attr } => Self {
                selector,
                attr: attr.map(|a| a.trim().to_ascii_lowercase()),
            },
        }
    }
}

/// `[markers]`: what the site's refusal pages show, over the generic markers.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MarkersTable {
    #[serde(default)]
    challenge: Vec<String>,
    #[serde(default)]
    challenge_paths: Vec<String>,
    #[serde(default)]
    login_paths: Vec<String>,
    #[serde(default)]
    logged_out: Vec<String>,
}

impl MarkersTable {
    fn markers(&self) -> Markers {
        fn refs(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        Markers::generic()
            .with_challenge_body(&refs(&self.challenge))
            .with_challenge_paths(&refs(&self.challenge_paths))
            .with_login_paths(&refs(&self.login_paths))
            .with_logged_out_body(&refs(&self.logged_out))
    }
}

fn error(text: &str, offset: usize, key: &str, message: impl Into<String>) -> CatalogError {
    CatalogError {
        path: PathBuf::new(),
        text: text.to_owned(),
        offset,
        key: key.to_owned(),
        message: message.into(),
    }
}

/// Where `key = ` is written in `text` (for an error about its value), else 0.
fn key_offset(text: &str, key: &str) -> usize {
    text.lines()
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len() + 1;
            Some((start, line))
        })
        .find(|(_, line)| {
            line.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map_or(0, |(start, line)| {
            start + (line.len() - line.trim_start().len())
        })
}

/// One profile file's entry (its path is filled in by the caller).
fn read_file(text: &str, source: Source) -> Result<Entry, CatalogError> {
    let file: ProfileFile = toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        let message = e.message().trim().to_owned();
        let key = message
            .strip_prefix("unknown field `")
            .and_then(|r| r.split('`').next())
            .unwrap_or_default()
            .to_owned();
        error(text, offset, &key, format!("not a profile file: {message}"))
    })?;
    let name = file.name.trim().to_ascii_lowercase();
    let good_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !good_name || name == GENERIC {
        return Err(error(
            text,
            key_offset(text, "name"),
            "name",
            format!(
                "`{}` cannot name a profile: use letters, digits, `-` and `_` (and not `generic`)",
                file.name
            ),
        ));
    }
    let mut hosts = Vec::with_capacity(file.hosts.len());
    for h in &file.hosts {
        let key = SiteKey::from_url(&format!("https://{}/", h.trim())).map_err(|e| {
            error(
                text,
                key_offset(text, "hosts"),
                "hosts",
                format!("`{h}`: {e}"),
            )
        })?;
        hosts.push(key.as_str().to_owned());
    }
    let fetch = match file.fetch.as_deref().map(str::trim) {
        None | Some("http") => "http",
        Some("browser") => "browser",
        Some("app") if file.code.as_deref() == Some("immoscout24") => "app",
        Some(other) => {
            return Err(error(
                text,
                key_offset(text, "fetch"),
                "fetch",
                format!(
                    "`fetch = \"{other}\"`: use \"http\" or \"browser\" (\"app\" is ImmobilienScout24's only)"
                ),
            ));
        }
    };
    let reader = match (file.listing, file.json) {
        (Some(_), Some(_)) => {
            return Err(error(
                text,
                key_offset(text, "json"),
                "json",
                "give `[listing]` or `[json]`, not both",
            ));
        }
        (Some(listing), None) => {
            let at = listing.span().start;
            let spec =
                listing_spec(listing.into_inner()).map_err(|m| error(text, at, "listing", m))?;
            let generic = Generic::new(&spec)
                .map_err(|e: ProfileError| error(text, at, "listing", e.to_string()))?;
            Some(Reader::Cards(generic))
        }
        (None, Some(json)) => {
            let at = json.span().start;
            let reader = JsonReader::new(json.into_inner()).map_err(|(k, m)| {
                let field = k.trim_start_matches("json.");
                let offset = Some(key_offset(text, field))
                    .filter(|o| *o > at)
                    .unwrap_or(at);
                error(text, offset, &k, m)
            })?;
            Some(Reader::Json(Box::new(reader)))
        }
        (None, None) => None,
    };
    let (code, declared) = match (&file.code, reader) {
        (Some(c), None) => {
            let Some(code) = CODE_PROFILES.iter().find(|p| **p == c.trim()) else {
                return Err(error(
                    text,
                    key_offset(text, "code"),
                    "code",
                    format!(
                        "`code = \"{c}\"` names no code profile; they are: {}",
                        CODE_PROFILES.join(", ")
                    ),
                ));
            };
            (Some(*code), None)
        }
        (None, Some(reader)) => {
            let declared = Declared {
                name: name.clone(),
                reader,
                markers: file.markers.markers(),
                fetch,
            };
            (None, Some(Arc::new(declared)))
        }
        (Some(_), Some(_)) => {
            return Err(error(
                text,
                key_offset(text, "code"),
                "code",
                "give `code` or `[listing]`/`[json]`, not both",
            ));
        }
        (None, None) => {
            return Err(error(
                text,
                0,
                "listing",
                "missing `[listing]` (or `[json]`): how a result is found (see docs/sites.md#writing-a-profile)",
            ));
        }
    };
    Ok(Entry {
        name,
        about: file.about.trim().to_owned(),
        hosts,
        fetch,
        source,
        code,
        declared,
        digest: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
    })
}

fn listing_spec(t: ListingTable) -> Result<ListingSpec, String> {
    let forms = [t.selector.is_some(), t.link.is_some(), t.json_ld];
    match forms {
        [true, false, false] => Ok(ListingSpec::Selector(Box::new(CardSpec {
            selector: t.selector.unwrap_or_default(),
            id_attr: t.id_attr.map(|a| a.trim().to_ascii_lowercase()),
            title: t.title.map(Into::into),
            price: t.price.map(Into::into),
            rooms: t.rooms.map(Into::into),
            area: t.area.map(Into::into),
            image: t.image.map(Into::into),
            description: t.description.map(Into::into),
            next: t.next,
        }))),
        [false, true, false] => Ok(ListingSpec::Link {
            link: t.link.unwrap_or_default(),
            next: t.next,
        }),
        [false, false, true] => Ok(ListingSpec::JsonLd { next: t.next }),
        [false, false, false] => {
            Err("give one way to find listings: `selector`, `link` or `json_ld = true`".into())
        }
        _ => Err("give one way to find listings, not several".into()),
    }
}

/// Where a user's profile files are: `sites/` beside the config file, then `sites/` in the
/// platform config directory (`~/.config/notifio/sites`). A name defined in both is an error.
#[must_use]
pub fn user_dirs(config: &Path, platform_config_dir: Option<&Path>) -> Vec<PathBuf> {
    let beside = config
        .parent()
        .map_or_else(|| PathBuf::from("sites"), |p| p.join("sites"));
    let mut dirs = vec![beside];
    if let Some(p) = platform_config_dir.map(|p| p.join("sites"))
        && !dirs.contains(&p)
    {
        dirs.push(p);
    }
    dirs
}

/// `notifio profiles`: one row per profile, then how a site without one is read.
#[must_use]
pub fn listing_text(catalog: &Catalog) -> String {
    let rows: Vec<[String; 5]> = catalog
        .entries()
        .iter()
        .map(|e| {
            [
                e.name.clone(),
                e.fetch.to_owned(),
                e.hosts.join(", "),
                e.source.to_string(),
                e.about.clone(),
            ]
        })
        .collect();
    let head = ["PROFILE", "FETCH", "HOSTS", "FROM", "READS"].map(str::to_owned);
    let mut widths = [0usize; 4];
    for r in std::iter::once(&head).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&head).chain(&rows) {
        for (w, cell) in widths.iter().zip(r.iter()) {
            out.push_str(cell);
            out.push_str(&" ".repeat(w - cell.chars().count() + 2));
        }
        out.push_str(&r[4]);
        out.push('\n');
    }
    out.push_str(
        "generic: any other site, read by the search's own `listing` spec (docs/sites.md)\n",
    );
    out
}

/// `notifio profiles --json`.
#[must_use]
pub fn listing_json(catalog: &Catalog) -> serde_json::Value {
    catalog
        .entries()
        .iter()
        .map(|e| {
            serde_json::json!({
                "name": e.name,
                "about": e.about,
                "hosts": e.hosts,
                "fetch": e.fetch,
                "code": e.code.is_some(),
                "from": match &e.source {
                    Source::BuiltIn => serde_json::Value::from("built-in"),
                    Source::File(p) => serde_json::Value::from(p.display().to_string()),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(url: &str) -> SiteKey {
        SiteKey::from_url(url).unwrap()
    }

    #[test]
    fn every_built_in_file_reads() {
        for (file, text) in BUILT_IN {
            let e = read_file(text, Source::BuiltIn).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(
                format!("{}.toml", e.name),
                *file,
                "the file is named after its profile"
            );
            assert!(!e.hosts.is_empty(), "{file} covers some host");
            assert!(!e.about.is_empty(), "{file} says what it reads");
        }
        let c = Catalog::built_in();
        assert_eq!(
            c.by_site(&key("https://www.idealista.pt/x")).unwrap().code,
            Some("idealista")
        );
        assert!(c.by_site(&key("https://example.org/")).is_none());
        assert_eq!(c.names().last().map(String::as_str), Some("generic"));
    }

    #[test]
    fn a_user_file_adds_a_profile_and_overrides_a_built_in_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("mine.toml"),
            "name = \"mine\"\nabout = \"my portal\"\nhosts = [\"my-portal.example\"]\n[listing]\nselector = \"li.ad\"\nid_attr = \"data-id\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("pararius.toml"),
            "name = \"Pararius\"\nhosts = [\"pararius.nl\"]\nfetch = \"browser\"\n[listing]\nselector = \"li.mine\"\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a profile").unwrap();
        let c = Catalog::with_user_dirs(&[dir.path().to_owned()]).unwrap();
        let mine = c.by_site(&key("https://www.my-portal.example/s")).unwrap();
        assert_eq!((mine.name.as_str(), mine.fetch), ("mine", "http"));
        assert_eq!(mine.source, Source::File(dir.path().join("mine.toml")));
        let p = c.by_name("pararius").unwrap();
        assert_eq!(p.fetch, "browser", "the user's file wins");
        assert_eq!(
            c.entries().iter().filter(|e| e.name == "pararius").count(),
            1
        );
        assert!(c.by_name("idealista").is_some(), "the other built-ins stay");
        assert_ne!(c, *Catalog::built_in());
        let again = Catalog::with_user_dirs(&[dir.path().to_owned()]).unwrap();
        assert_eq!(c, again);
    }

    #[test]
    fn a_bad_profile_file_names_its_place_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let bad = |text: &str| {
            let p = dir.path().join("bad.toml");
            std::fs::write(&p, text).unwrap();
            let e = Catalog::with_user_dirs(&[dir.path().to_owned()]).unwrap_err();
            std::fs::remove_file(&p).unwrap();
            assert_eq!(e.path, p);
            e
        };
        let e = bad("name = \"x\"\nhosts = [\"x.example\"]\n[listing]\nselectr = \"li\"\n");
        assert_eq!(e.key, "selectr", "{e}");
        assert_eq!(&e.text[e.offset..e.offset + 7], "selectr");
        let e = bad("name = \"x\"\nhosts = [\"x.example\"]\n[listing]\nselector = \"li[\"\n");
        assert_eq!(e.key, "listing");
        assert!(e.message.contains("`li[`"), "{e}");
        let e = bad(
            "name = \"x\"\nhosts = [\"x.example\"]\nfetch = \"curl\"\n[listing]\nselector = \"li\"\n",
        );
        assert_eq!(e.key, "fetch");
        assert!(e.text[e.offset..].starts_with("fetch"));
        let e = bad("name = \"generic\"\nhosts = [\"x.example\"]\n[listing]\nselector = \"li\"\n");
        assert_eq!(e.key, "name");
        let e = bad("name = \"x\"\nhosts = [\"x.example\"]\ncode = \"zillow\"\n");
        assert!(
            e.message.contains("idealista, immoscout24, facebook"),
            "{e}"
        );
        let e = bad("name = \"x\"\nhosts = [\"x.example\"]\n");
        assert_eq!(e.key, "listing");
        let e = bad(
            "name = \"x\"\nhosts = [\"x.example\"]\n[json]\nscript = \"d\"\nitems = \"$.r\"\nid = \"$.id\"\nprice = \"$.p[?\"\n",
        );
        assert_eq!(e.key, "json.price", "{e}");
        assert!(e.text[e.offset..].starts_with("price = "), "{e}");
        let e = bad(
            "name = \"x\"\nhosts = [\"x.example\"]\n[json]\nscript = \"d\"\nitem = \"$.r\"\nid = \"$.id\"\n",
        );
        assert_eq!(e.key, "item", "{e}");
        let e = bad(
            "name = \"x\"\nhosts = [\"x.example\"]\n[listing]\nselector = \"li\"\n[json]\nscript = \"d\"\nitems = \"$.r\"\nid = \"$.id\"\n",
        );
        assert_eq!(e.key, "json", "{e}");
    }

    #[test]
    fn a_json_profile_file_reads_its_script() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("j.toml"),
            "name = \"j\"\nhosts = [\"j.example\"]\n[json]\nscript = \"data\"\nitems = \"$.ads\"\nid = \"$.n\"\ntitle = \"$.t\"\n",
        )
        .unwrap();
        let c = Catalog::with_user_dirs(&[dir.path().to_owned()]).unwrap();
        let p = c.declared("j").unwrap();
        let url = url::Url::parse("https://j.example/s").unwrap();
        let page = br#"<script id="data">{"ads":[{"n":4,"t":"Flat"}]}</script>"#;
        let Extraction::Listings(l) = p.extract(page, &url) else {
            panic!("no listings");
        };
        assert_eq!(
            (l[0].id.as_str(), l[0].title.as_deref()),
            ("4", Some("Flat"))
        );
        assert_eq!(p.ready_selector(), Some("script[id=\"data\"]"));
        assert_eq!(p.next_page(page, &url, 1), None);
    }
}
