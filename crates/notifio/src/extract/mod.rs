//! Extraction: turning a fetched result page into listings, one profile per site.
//!
//! A profile knows where a site keeps its result list (HTML cards, embedded JSON), which pages
//! mean "blocked" or "logged out" (markers for `notifio_policy::classify`), and what "no
//! results" looks like, so an empty search is never mistaken for a changed layout. Everything
//! here streams (`lol_html`, or serde_json on just the embedded JSON slice): no DOM is built.

pub mod auto;
pub mod bounds;
pub mod catalog;
mod dom;
pub mod facebook;
pub mod generic;
mod html;
pub mod idealista;
mod image;
pub mod immoscout24;
pub mod immoscout24_app;
mod json_paths;
mod parse;
mod sane;

use crate::listing::{Listing, ListingSpec};
pub use catalog::Catalog;
use notifio_policy::{Markers, SiteKey};
use regex::Regex;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

pub use facebook::Facebook;
pub use generic::Generic;
pub use idealista::Idealista;
pub use immoscout24::ImmoScout24;

/// What a page yielded.
#[derive(Clone, Debug, PartialEq)]
pub enum Extraction {
    /// The result list was found; these are its listings in page order (possibly none, e.g.
    /// when every card is an ad or sold).
    Listings(Vec<Listing>),
    /// The site says the search has no results.
    NoResults,
    /// The result list could not be found: the layout changed or this is not a result page.
    LayoutUnknown,
    /// The page is over a bound of its reading ([`bounds`]): too deep, too slow, too large.
    Unreadable(bounds::Unreadable),
}

/// What reading one result page yielded: its listings (or why none), how they were read, and
/// the link to the page after it, when one was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct PageRead {
    /// The listings, or why there are none.
    pub extraction: Extraction,
    /// The next result page, when asked for and shown.
    pub next: Option<url::Url>,
    /// How the listings were read (`None` when there are none).
    pub how: Option<How>,
}

/// How a page's listings were read (`check --json` `"read"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum How {
    /// By the search's profile (or its `listing` spec).
    Profile,
    /// By auto mode: the site has no profile and the search no `listing` spec.
    Auto(auto::Structure),
    /// By auto mode, because the search's profile found no result list on a page that is
    /// not a "no results" page.
    Fallback(auto::Structure),
}

impl How {
    /// The name `check --json` gives it: `profile`, `auto` or `auto_fallback`.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Profile => "profile",
            Self::Auto(_) => "auto",
            Self::Fallback(_) => "auto_fallback",
        }
    }

    /// The structure auto mode chose, when it read the page.
    #[must_use]
    pub const fn structure(&self) -> Option<&auto::Structure> {
        match self {
            Self::Profile => None,
            Self::Auto(s) | Self::Fallback(s) => Some(s),
        }
    }
}

/// Reads one result page with `profile` within the bounds of [`bounds`]: its listings and, when
/// `next_of` names its page number, the link to the next page. Costs at most
/// [`bounds::CPU_BUDGET`] of this thread's CPU time, so callers run it on a thread where that
/// holds nobody up (the blocking pool).
#[must_use]
pub fn read_page(
    profile: &dyn SiteProfile,
    body: &[u8],
    page_url: &url::Url,
    next_of: Option<u32>,
) -> PageRead {
    let (read, over) = bounds::within(bounds::CPU_BUDGET, || {
        let (extraction, how) = if profile.name() == auto::NAME {
            match auto::read(body, page_url) {
                Some(found) => (
                    Extraction::Listings(found.listings),
                    Some(How::Auto(found.structure)),
                ),
                None => (nothing_found(body), None),
            }
        } else {
            match profile.extract(body, page_url) {
                // The profile found no result list on a page that does not say "no results":
                // the page may have moved on; auto mode reads it if it can, and says so.
                Extraction::LayoutUnknown if !bounds::over() => match auto::read(body, page_url) {
                    Some(found) => (
                        Extraction::Listings(found.listings),
                        Some(How::Fallback(found.structure)),
                    ),
                    None => (Extraction::LayoutUnknown, None),
                },
                e @ Extraction::Listings(_) => (e, Some(How::Profile)),
                e => (e, None),
            }
        };
        let next = match (&extraction, next_of) {
            (Extraction::Listings(_), Some(page)) if !bounds::over() => match how {
                Some(How::Fallback(_)) => auto::Auto.next_page(body, page_url, page),
                _ => profile.next_page(body, page_url, page),
            },
            _ => None,
        };
        PageRead {
            extraction,
            next,
            how,
        }
    });
    match over {
        Some(why) => PageRead {
            extraction: Extraction::Unreadable(why),
            next: None,
            how: None,
        },
        None => read,
    }
}

/// How one site's result pages are read and judged.
pub trait SiteProfile: Send + Sync + std::fmt::Debug {
    /// The profile's name: one of the [`Catalog`]'s, or `generic`.
    fn name(&self) -> &str;
    /// [`Markers::generic`] extended with the site's challenge, login and logged-out markers.
    fn markers(&self) -> Markers;
    /// Reads the listings of a result page; links are made absolute against `page_url`.
    fn extract(&self, body: &[u8], page_url: &url::Url) -> Extraction;
    /// How the site is fetched when its config names no `fetch`: `http`, `browser` or `app`.
    fn default_fetch(&self) -> &'static str {
        "http"
    }
    /// Whether the site is only usable with a logged-in session (cookies).
    fn needs_cookies(&self) -> bool {
        false
    }
    /// Cookie names the session must contain.
    fn required_cookies(&self) -> &'static [&'static str] {
        &[]
    }
    /// Recommended minimum gap between two requests to the site, when it differs from the
    /// global default.
    fn default_spacing(&self) -> Option<Duration> {
        None
    }
    /// A CSS selector that matches once a result page rendered by scripts shows its results
    /// (or says there are none): a browser check reads the page as soon as it does. `None`:
    /// the browser waits for the load event and 500 ms without requests.
    fn ready_selector(&self) -> Option<&str> {
        None
    }
    /// The URL of the result page after this one, which is page `page` (1 = the first) of
    /// its search, as the page itself shows it; `None` on the last page, or when the site has
    /// no pages ([`Self::paged`]). `page_url` is the page's own URL, after redirects.
    fn next_page(&self, body: &[u8], page_url: &url::Url, page: u32) -> Option<url::Url> {
        let _ = (body, page_url, page);
        None
    }
    /// Whether the site's results come on numbered pages a search may follow (`pages`):
    /// not Facebook's, which load as one scrolls.
    fn paged(&self) -> bool {
        true
    }
}

/// Why no profile could be built for a search.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// `profile = "…"` names no known profile.
    #[error("unknown profile `{name}`; choose one of: {}", known.join(", "))]
    UnknownProfile {
        /// The name given.
        name: String,
        /// The names the catalog has.
        known: Vec<String>,
    },
    /// A CSS selector the streaming parser does not accept.
    #[error("invalid CSS selector `{selector}`: {reason}")]
    InvalidSelector {
        /// The selector as written.
        selector: String,
        /// The parser's message.
        reason: String,
    },
    /// A link pattern that is not a valid regex, or that has no capture group for the id.
    #[error("invalid link regex `{regex}`: {reason}")]
    InvalidRegex {
        /// The pattern as written.
        regex: String,
        /// The parser's message, or what is missing.
        reason: String,
    },
}

/// Chooses the profile of a search from the built-in profiles (see [`ProfileCache`]).
///
/// # Errors
/// As [`ProfileCache::profile_for`].
pub fn profile_for(
    site: &SiteKey,
    forced: Option<&str>,
    spec: Option<&ListingSpec>,
) -> Result<Arc<dyn SiteProfile>, ProfileError> {
    ProfileCache::default().profile_for(site, forced, spec)
}

/// Hands out one shared profile per (profile, spec) pair: a thousand searches with the same
/// `listing` rules share one set of compiled selectors (each set is about a kilobyte), and one
/// set of markers (built once here, not on every check).
pub struct ProfileCache {
    catalog: Arc<Catalog>,
    made: Vec<(String, Option<ListingSpec>, SharedProfile)>,
}

impl Default for ProfileCache {
    fn default() -> Self {
        Self::new(Catalog::built_in())
    }
}

/// A profile with its markers, as [`ProfileCache`] shares them.
#[derive(Clone)]
pub struct SharedProfile {
    /// The profile.
    pub profile: Arc<dyn SiteProfile>,
    /// `profile.markers()`, built once.
    pub markers: Arc<Markers>,
}

impl ProfileCache {
    /// A cache over the profiles of `catalog`.
    #[must_use]
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self {
            catalog,
            made: Vec::new(),
        }
    }

    /// The catalog it hands out profiles from.
    #[must_use]
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The profile of a search: the forced one if given, else the search's own `listing`
    /// spec when it has one (the user said how to read the page), else its site's profile in
    /// the catalog, else generic with the spec. A code profile (Idealista,
    /// ImmobilienScout24, Facebook) ignores a spec, as it always has.
    ///
    /// # Errors
    /// An unknown forced name, a generic site without a spec, or a spec whose selector or
    /// regex does not parse.
    pub fn profile_for(
        &mut self,
        site: &SiteKey,
        forced: Option<&str>,
        spec: Option<&ListingSpec>,
    ) -> Result<Arc<dyn SiteProfile>, ProfileError> {
        self.shared_for(site, forced, spec).map(|s| s.profile)
    }

    /// [`Self::profile_for`] with the profile's markers.
    ///
    /// # Errors
    /// As [`Self::profile_for`].
    pub fn shared_for(
        &mut self,
        site: &SiteKey,
        forced: Option<&str>,
        spec: Option<&ListingSpec>,
    ) -> Result<SharedProfile, ProfileError> {
        let name = self.profile_name(site, forced, spec.is_some())?;
        // Only the generic profile reads the spec.
        let spec = spec.filter(|_| name == catalog::GENERIC);
        if let Some((_, _, p)) = self
            .made
            .iter()
            .find(|(n, s, _)| *n == name && s.as_ref() == spec)
        {
            return Ok(p.clone());
        }
        let profile = self.make_profile(&name, spec)?;
        let shared = SharedProfile {
            markers: Arc::new(profile.markers()),
            profile,
        };
        self.made.push((name, spec.cloned(), shared.clone()));
        Ok(shared)
    }

    fn profile_name(
        &self,
        site: &SiteKey,
        forced: Option<&str>,
        has_spec: bool,
    ) -> Result<String, ProfileError> {
        if let Some(name) = forced {
            let name = name.trim().to_ascii_lowercase();
            if name == catalog::GENERIC || name == auto::NAME {
                return Ok(name);
            }
            return self
                .catalog
                .by_name(&name)
                .map(|e| e.name.clone())
                .ok_or_else(|| ProfileError::UnknownProfile {
                    name,
                    known: self.catalog.names(),
                });
        }
        Ok(match self.catalog.by_site(site) {
            Some(e) if e.code.is_some() || !has_spec => e.name.clone(),
            _ if has_spec => catalog::GENERIC.to_owned(),
            // No profile and no `listing` spec: the page is read by its structure.
            _ => auto::NAME.to_owned(),
        })
    }

    fn make_profile(
        &self,
        name: &str,
        spec: Option<&ListingSpec>,
    ) -> Result<Arc<dyn SiteProfile>, ProfileError> {
        if name == auto::NAME {
            return Ok(Arc::new(auto::Auto));
        }
        let code = self.catalog.by_name(name).and_then(|e| e.code);
        Ok(match code {
            Some("idealista") => Arc::new(Idealista),
            Some("immoscout24") => Arc::new(ImmoScout24),
            Some("facebook") => Arc::new(Facebook),
            _ => match self.catalog.declared(name) {
                Some(declared) => declared,
                None => match spec {
                    Some(spec) => Arc::new(Generic::new(spec)?),
                    // `profile = "generic"` and no rules: the page is read by its structure.
                    None => Arc::new(auto::Auto),
                },
            },
        })
    }
}

/// The profile a site's searches get when none is named, among the built-in ones (`auto`
/// for a site without one).
#[must_use]
pub fn default_profile(site: &SiteKey) -> String {
    Catalog::built_in()
        .by_site(site)
        .map_or_else(|| auto::NAME.to_owned(), |e| e.name.clone())
}

/// Conservative "no results" phrases, matched in the page's visible text only (never in
/// scripts, where translation tables mention them on every page). "0 results" must not be
/// the tail of "10 results".
static NO_RESULTS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        // No `\b`: Unicode word boundaries would force the slow regex engine over the whole
        // page text; the phrases are specific enough without them.
        r"(?i)(?:^|[^\d.,])0 (?:results|ergebnisse|treffer|resultados|risultati|résultats)|no results|no matching (?:results|listings)|keine (?:ergebnisse|treffer)|no hay resultados|nessun risultato|nenhum resultado|aucun résultat|no hay anuncios|non ci sono annunci|não há anúncios",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// Whether the page's visible text says the search found nothing.
pub(crate) fn shows_no_results(body: &[u8]) -> bool {
    let text = parse::clean_text(&html::visible_text(body, 512 * 1024));
    NO_RESULTS.is_match(&text)
}

/// `LayoutUnknown`, or `NoResults` when the page says so.
pub(crate) fn nothing_found(body: &[u8]) -> Extraction {
    if shows_no_results(body) {
        Extraction::NoResults
    } else {
        Extraction::LayoutUnknown
    }
}

/// `href` made absolute against the page; `None` for links that cannot be resolved or that
/// are not http(s). Every listing link and photo is made here, so no channel is ever handed a
/// `javascript:` or `data:` link, nor the search URL's own `user:password@`.
pub(crate) fn absolute(page_url: &url::Url, href: &str) -> Option<String> {
    let mut u = page_url.join(href.trim()).ok()?;
    if !matches!(u.scheme(), "http" | "https") {
        return None;
    }
    // Only fails for URLs that cannot have credentials, which http(s) URLs can.
    let _ = u.set_username("");
    let _ = u.set_password(None);
    Some(u.into())
}

/// Where a page links to its next page by the standards: `<link rel="next">` in its head, or
/// an `<a rel="next">`.
pub(crate) static REL_NEXT: LazyLock<Option<lol_html::Selector>> = LazyLock::new(|| {
    "link[rel~=\"next\"][href], a[rel~=\"next\"][href]"
        .parse()
        .ok()
});

/// The next page as `selectors` find it (the first of them that matches anything wins),
/// resolved against `page_url`; never the page itself, never anything but http(s). Unlike a
/// listing's link, a relative one keeps the search URL's own `user:password@`, as a relative
/// redirect does: the next page is part of the same search.
pub(crate) fn linked_next_page(
    body: &[u8],
    page_url: &url::Url,
    selectors: &[&lol_html::Selector],
) -> Option<url::Url> {
    let href = html::first_href(body, selectors)?;
    page_url
        .join(href.trim())
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u != page_url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::CardSpec;

    fn key(url: &str) -> SiteKey {
        SiteKey::from_url(url).unwrap()
    }

    #[test]
    fn searches_with_the_same_rules_share_one_profile() {
        let site = |u: &str| SiteKey::from_url(u).unwrap();
        let spec = |sel: &str| ListingSpec::Selector(Box::new(CardSpec::new(sel, Some("data-id"))));
        let mut made = ProfileCache::default();
        let a = made
            .profile_for(&site("https://a.example/1"), None, Some(&spec("li.x")))
            .unwrap();
        let b = made
            .profile_for(&site("https://b.example/2"), None, Some(&spec("li.x")))
            .unwrap();
        let c = made
            .profile_for(&site("https://a.example/3"), None, Some(&spec("li.y")))
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b), "same generic rules: one profile");
        assert!(!Arc::ptr_eq(&a, &c), "other rules: another profile");
        let i1 = made
            .profile_for(
                &site("https://www.idealista.com/a"),
                None,
                Some(&spec("li.x")),
            )
            .unwrap();
        let i2 = made
            .profile_for(&site("https://www.idealista.it/b"), None, None)
            .unwrap();
        assert!(Arc::ptr_eq(&i1, &i2), "a site profile ignores the spec");
        assert_eq!(i1.name(), "idealista");
        assert_eq!(
            made.profile_for(&site("https://c.example/"), None, None)
                .unwrap()
                .name(),
            "auto"
        );
    }

    #[test]
    fn a_shared_profile_builds_its_markers_once() {
        let mut made = ProfileCache::default();
        let url = "https://www.idealista.com/a";
        let a = made.shared_for(&key(url), None, None).unwrap();
        let b = made.shared_for(&key(url), None, None).unwrap();
        assert!(Arc::ptr_eq(&a.markers, &b.markers), "one set of markers");
        assert_eq!(*a.markers, a.profile.markers(), "the profile's own markers");
    }

    #[test]
    fn profile_by_site_and_forced() {
        let spec = ListingSpec::link(r"/listing/(\d+)");
        for (url, want) in [
            ("https://www.idealista.com/alquiler-viviendas/", "idealista"),
            ("https://www.idealista.it/affitto-case/", "idealista"),
            ("https://www.idealista.pt/arrendar-casas/", "idealista"),
            ("https://www.immobilienscout24.de/Suche/", "immoscout24"),
            ("https://www.facebook.com/marketplace/", "facebook"),
            ("http://127.0.0.1:8080/search", "generic"),
        ] {
            assert_eq!(
                profile_for(&key(url), None, Some(&spec)).unwrap().name(),
                want
            );
        }
        let forced = profile_for(&key("http://127.0.0.1:1/"), Some("Idealista"), None).unwrap();
        assert_eq!(forced.name(), "idealista");
    }

    #[test]
    fn profile_errors_say_what_to_do() {
        let site = key("https://example.org/");
        let err = profile_for(&site, Some("zillow"), None).unwrap_err();
        assert!(
            err.to_string()
                .contains("idealista, immoscout24, facebook, immobiliare, immowelt, kleinanzeigen, rightmove, subito, wg-gesucht, willhaben, generic"),
            "{err}"
        );
        // No profile and no spec: auto mode reads the page.
        assert_eq!(profile_for(&site, None, None).unwrap().name(), auto::NAME);
        let bad = ListingSpec::Selector(Box::new(CardSpec::new("article[", None)));
        let err = profile_for(&site, None, Some(&bad)).unwrap_err();
        assert!(err.to_string().contains("`article[`"), "{err}");
        let bad = ListingSpec::link("/listing/(\\d+");
        assert!(matches!(
            profile_for(&site, None, Some(&bad)).unwrap_err(),
            ProfileError::InvalidRegex { .. }
        ));
        let no_group = ListingSpec::link("/listing/\\d+");
        let err = profile_for(&site, None, Some(&no_group)).unwrap_err();
        assert!(err.to_string().contains("capture group"), "{err}");
    }

    /// `depth` nested `<div>`s around one card, repeated up to `total` bytes.
    fn nested(depth: usize, total: usize) -> Vec<u8> {
        let block = format!(
            "{}<article data-id=\"1\"><a href=\"/1\">x</a></article>{}",
            "<div>".repeat(depth),
            "</div>".repeat(depth)
        );
        let mut page = String::from("<html><body>");
        while page.len() < total.max(block.len()) {
            page.push_str(&block);
        }
        page.into_bytes()
    }

    fn cards(selector: &str) -> Generic {
        Generic::new(&ListingSpec::Selector(Box::new(CardSpec::new(
            selector,
            Some("data-id"),
        ))))
        .unwrap()
    }

    #[test]
    fn a_page_nested_too_deeply_is_not_read() {
        // The issue's page: 6,000 nested divs (64 KB) read with an ordinary selector took
        // 17.7 s; it is refused before the streaming reader sees it.
        let page = nested(6_000, 0);
        let url = url::Url::parse("http://127.0.0.1:1/s").unwrap();
        let started = crate::clock::thread_cpu_time();
        let read = read_page(&cards("div div article"), &page, &url, Some(1));
        let used = crate::clock::thread_cpu_time() - started;
        assert_eq!(
            read.extraction,
            Extraction::Unreadable(bounds::Unreadable::TooDeep {
                limit: bounds::STREAMING_DEPTH_MAX
            })
        );
        assert!(used < Duration::from_secs(1), "{used:?}");
        // A page just within the depth is read.
        let page = nested(bounds::STREAMING_DEPTH_MAX - 3, 0);
        let read = read_page(&cards("article"), &page, &url, None);
        assert!(matches!(read.extraction, Extraction::Listings(ref l) if l.len() == 1));
    }

    #[test]
    fn a_reading_stops_soon_after_its_budget_is_spent() {
        // Within the depth, but every element matches every step: the cost explodes with the
        // page's size, and the budget stops it.
        let page = nested(150, 1 << 20);
        let url = url::Url::parse("http://127.0.0.1:1/s").unwrap();
        let budget = Duration::from_millis(100);
        let started = crate::clock::thread_cpu_time();
        let (_, why) = bounds::within(budget, || cards("div div div article").extract(&page, &url));
        let used = crate::clock::thread_cpu_time() - started;
        assert_eq!(why, Some(bounds::Unreadable::TooSlow { budget }));
        assert!(used < budget + Duration::from_millis(900), "{used:?}");
    }

    #[test]
    fn selectors_that_would_explode_are_refused_when_built() {
        let site = key("https://example.org/");
        for bad in [
            "div ".repeat(1_000) + "article",
            "main section div ul li".to_owned(),
        ] {
            let spec = ListingSpec::Selector(Box::new(CardSpec::new(&bad, None)));
            let err = profile_for(&site, None, Some(&spec)).unwrap_err();
            assert!(
                matches!(err, ProfileError::InvalidSelector { .. })
                    && err.to_string().contains("descendant steps"),
                "{err}"
            );
        }
        let ok = ListingSpec::Selector(Box::new(CardSpec::new("main section ul > li", None)));
        assert!(profile_for(&site, None, Some(&ok)).is_ok());
        // A field is read inside its card: one step fewer.
        let field = ListingSpec::Selector(Box::new(CardSpec {
            title: Some(crate::listing::FieldSpec::text("div div div h2")),
            ..CardSpec::new("li.card", None)
        }));
        assert!(profile_for(&site, None, Some(&field)).is_err());
    }

    #[test]
    fn no_results_phrases_are_conservative() {
        assert!(shows_no_results(
            b"<p>Sorry, no results for this search</p>"
        ));
        assert!(shows_no_results(b"<h1>0 Ergebnisse</h1>"));
        assert!(!shows_no_results(b"<h1>10 results</h1>"));
        assert!(!shows_no_results(
            b"<script>var t = {noResults: 'No results'};</script><p>Welcome</p>"
        ));
    }
}
