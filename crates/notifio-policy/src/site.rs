//! The registry's key: the *site*, not the search.
//!
//! A refusal comes from the site, so it applies to every search on it
//! (docs/policy.md#keyed-by-site-not-by-search). The key is the registrable domain (eTLD+1 from the
//! public suffix list, including its private section), lower-cased, IDNA/punycode, no trailing dot,
//! no port: `www.idealista.com` and `m.idealista.com` share one entry. An IP literal or `localhost`
//! has no registrable domain; its key is `host:port` (distinct ports are distinct services, which
//! is also what lets tests run several sites on loopback). A host that is itself a public suffix
//! (`github.io`) keys as itself.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use url::{Host, Url};

/// The identity of a site for backoff purposes. See the module docs for the rules.
///
/// Shared text (`Arc<str>`): the scheduler hands a copy out with every check, and a copy is a
/// reference-count increment rather than an allocation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SiteKey(Arc<str>);

/// Why a URL has no site key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SiteKeyError {
    /// The text is not a URL at all.
    #[error("`{url}` is not a URL: {reason}")]
    NotAUrl {
        /// The offending input.
        url: String,
        /// What the URL parser said.
        reason: String,
    },
    /// Only web pages can be watched.
    #[error("`{url}` uses `{scheme}:`; only http:// and https:// pages can be watched")]
    NotHttp {
        /// The offending input.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// `http:///path` and the like.
    #[error("`{url}` has no host name")]
    NoHost {
        /// The offending input.
        url: String,
    },
}

impl SiteKey {
    /// The site key of a page URL.
    ///
    /// # Errors
    /// When the text is not an absolute http(s) URL with a host.
    pub fn from_url(url: &str) -> Result<Self, SiteKeyError> {
        let parsed = Url::parse(url).map_err(|e| SiteKeyError::NotAUrl {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        Self::from_parsed(&parsed)
    }

    /// The site key of an already parsed URL.
    ///
    /// # Errors
    /// When the URL is not http(s) or has no host.
    pub fn from_parsed(url: &Url) -> Result<Self, SiteKeyError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(SiteKeyError::NotHttp {
                url: url.to_string(),
                scheme: url.scheme().to_owned(),
            });
        }
        let port = url.port_or_known_default().unwrap_or(80);
        match url.host() {
            None => Err(SiteKeyError::NoHost {
                url: url.to_string(),
            }),
            Some(Host::Ipv4(ip)) => Ok(Self(format!("{ip}:{port}").into())),
            Some(Host::Ipv6(ip)) => Ok(Self(format!("[{ip}]:{port}").into())),
            Some(Host::Domain(d)) => {
                // The url crate has already applied IDNA (punycode) and lower-cased the host.
                let host = d.trim_end_matches('.');
                if host.is_empty() {
                    return Err(SiteKeyError::NoHost {
                        url: url.to_string(),
                    });
                }
                if host == "localhost" || host.ends_with(".localhost") {
                    return Ok(Self(format!("{host}:{port}").into()));
                }
                let key = psl::domain_str(host).unwrap_or(host);
                Ok(Self(key.into()))
            }
        }
    }

    /// A key from text that is already a key (as stored in the database).
    #[must_use]
    pub fn from_stored(key: impl Into<String>) -> Self {
        Self(key.into().into())
    }

    /// The key as text, e.g. `idealista.com` or `127.0.0.1:8080`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `host` (a URL host, as the url crate normalises it) belongs to this site.
    /// Used to send cookies only to their site's hosts.
    #[must_use]
    pub fn covers_url(&self, url: &Url) -> bool {
        Self::from_parsed(url).is_ok_and(|k| &k == self)
    }
}

impl fmt::Display for SiteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(u: &str) -> String {
        SiteKey::from_url(u)
            .map(|k| k.0.to_string())
            .unwrap_or_else(|e| format!("ERR {e}"))
    }

    #[test]
    fn subdomains_of_one_site_share_a_key() {
        assert_eq!(
            key("https://www.idealista.com/alquiler-viviendas/"),
            "idealista.com"
        );
        assert_eq!(key("https://m.idealista.com/x"), "idealista.com");
        assert_eq!(key("https://WWW.Idealista.COM./x"), "idealista.com");
        assert_eq!(key("https://www.idealista.it/x"), "idealista.it");
    }

    #[test]
    fn multi_label_and_private_suffixes_are_respected() {
        assert_eq!(key("https://www.rightmove.co.uk/x"), "rightmove.co.uk");
        // github.io is in the private section: each user's site is its own site.
        assert_eq!(key("https://alice.github.io/x"), "alice.github.io");
        assert_eq!(
            key("https://www.immobilienscout24.de:443/Suche"),
            "immobilienscout24.de"
        );
    }

    #[test]
    fn idna_hosts_key_as_punycode() {
        assert_eq!(key("https://www.bücher.de/"), "xn--bcher-kva.de");
    }

    #[test]
    fn ip_literals_and_localhost_key_by_host_and_port() {
        assert_eq!(key("http://127.0.0.1:8080/a"), "127.0.0.1:8080");
        assert_eq!(key("http://127.0.0.1:8081/a"), "127.0.0.1:8081");
        assert_eq!(key("http://localhost/a"), "localhost:80");
        assert_eq!(key("https://[::1]/a"), "[::1]:443");
    }

    #[test]
    fn non_web_urls_are_clear_errors() {
        assert!(key("ftp://example.com/").contains("only http:// and https://"));
        assert!(key("not a url").starts_with("ERR `not a url` is not a URL"));
        assert!(key("mailto:me@example.com").contains("mailto"));
    }
}
