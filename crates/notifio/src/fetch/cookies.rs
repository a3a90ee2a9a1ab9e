//! Session cookies from a Netscape `cookies.txt` export (the format browser export extensions
//! and curl write), for sites that need a login (Facebook Marketplace).
//!
//! Cookie values are credentials: they never appear in `Debug` output, errors or logs, and the
//! fetcher sends a jar only to hosts of the site it was configured for. Parsing is hand-written
//! (seven tab-separated fields): the cookie crates parse `Set-Cookie` headers, not this format,
//! and we need errors that name the offending line without echoing its value.

use std::fmt;
use std::path::{Path, PathBuf};
use url::Url;

/// A cookies file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CookieError {
    /// The file could not be read.
    #[error("cannot read cookies file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The path is a directory or another non-file.
    #[error("cookies file {} is not a file: give the cookies.txt your browser exported", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// The file is readable by group or others: it holds a logged-in session.
    #[error(
        "cookies file {path} is readable by group or others (mode {mode:04o}): it holds your logged-in session; run `chmod 600 {path}`",
        path = path.display()
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is not text (a binary file, another format).
    #[error("cookies file {} is not a text file: a cookies.txt export (Netscape format) is plain text", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// A line is not a cookies.txt line. The message never contains the cookie's value.
    #[error(
        "{}line {line}: {reason}; a cookies.txt line has 7 tab-separated fields: domain, \
         include-subdomains (TRUE/FALSE), path, secure (TRUE/FALSE), expiry (Unix seconds), \
         name, value — export the file again from your browser",
        file.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default()
    )]
    Malformed {
        /// The file, when loaded from one.
        file: Option<PathBuf>,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// One cookie.
#[derive(Clone, PartialEq, Eq)]
struct Cookie {
    /// Lower-case, without a leading dot.
    domain: String,
    include_subdomains: bool,
    path: String,
    secure: bool,
    /// Unix seconds; 0 = session cookie (never expires here).
    expires: u64,
    name: String,
    value: String,
}

impl fmt::Debug for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cookie")
            .field("domain", &self.domain)
            .field("path", &self.path)
            .field("name", &self.name)
            .field("value", &"<redacted>")
            .finish()
    }
}

impl Cookie {
    fn matches(&self, url: &Url, now_secs: u64) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let domain_ok = host == self.domain
            || (self.include_subdomains
                && host.len() > self.domain.len()
                && host.ends_with(&self.domain)
                && host.as_bytes()[host.len() - self.domain.len() - 1] == b'.');
        let path = url.path();
        // RFC 6265 §5.1.4 path-match.
        let path_ok = path == self.path
            || (path.starts_with(&self.path)
                && (self.path.ends_with('/') || path[self.path.len()..].starts_with('/')));
        let secure_ok = !self.secure || url.scheme() == "https";
        let fresh = self.expires == 0 || self.expires > now_secs;
        domain_ok && path_ok && secure_ok && fresh
    }
}

/// The cookies of one site.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CookieJar {
    cookies: Vec<Cookie>,
}

impl fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CookieJar")
            .field("cookies", &self.cookies)
            .finish()
    }
}

impl CookieJar {
    /// The `Cookie:` header value for a request to `url` (domain, path, secure and expiry
    /// rules of RFC 6265), or `None` when no cookie applies.
    #[must_use]
    pub fn header_for(&self, url: &Url) -> Option<String> {
        let now = crate::clock::now().as_millis() / 1000;
        let parts: Vec<String> = self
            .cookies
            .iter()
            .filter(|c| c.matches(url, now))
            .map(|c| format!("{}={}", c.name, c.value))
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Cookie names (for status output; values are never shown).
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.cookies.iter().map(|c| c.name.clone()).collect()
    }

    /// Number of cookies.
    #[must_use]
    pub fn len(&self) -> usize {
        self.cookies.len()
    }

    /// Whether the jar is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.cookies.is_empty()
    }

    /// The distinct cookie domains (to check a jar belongs to the site it is configured for).
    #[must_use]
    pub fn domains(&self) -> Vec<String> {
        let mut d: Vec<String> = self.cookies.iter().map(|c| c.domain.clone()).collect();
        d.sort();
        d.dedup();
        d
    }
}

fn flag(s: &str, what: &str) -> Result<bool, String> {
    match s {
        "TRUE" | "true" => Ok(true),
        "FALSE" | "false" => Ok(false),
        _ => Err(format!("{what} must be TRUE or FALSE")),
    }
}

fn bad_header_char(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_control() || b == b';')
}

/// Parses the text of a Netscape `cookies.txt` file. Blank lines and `#` comments are skipped;
/// `#HttpOnly_` lines are cookies.
///
/// # Errors
/// The first malformed line, by 1-based number (the message never contains cookie values).
pub fn parse_cookies_txt(text: &str) -> Result<CookieJar, CookieError> {
    let mut cookies = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let err = |reason: String| CookieError::Malformed {
            file: None,
            line: line_no,
            reason,
        };
        let line = raw.trim_end_matches('\r');
        let line = match line.strip_prefix("#HttpOnly_") {
            Some(rest) => rest,
            None if line.trim().is_empty() || line.starts_with('#') => continue,
            None => line,
        };
        let fields: Vec<&str> = line.split('\t').collect();
        // Some exporters drop the trailing tab of an empty value: accept 6 fields then.
        if fields.len() != 7 && fields.len() != 6 {
            return Err(err(format!(
                "found {} tab-separated field{}",
                fields.len(),
                if fields.len() == 1 { "" } else { "s" }
            )));
        }
        let domain = fields[0]
            .trim()
            .trim_start_matches('.')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if domain.is_empty() {
            return Err(err("the domain is empty".into()));
        }
        let domain = if domain.is_ascii() {
            domain
        } else {
            // An internationalized domain (a browser may export `bücher.example`): punycode it,
            // as the url crate does to the host of every URL it parses, or it never matches.
            match url::Host::parse(&domain) {
                Ok(url::Host::Domain(ascii)) => ascii,
                _ => {
                    return Err(err("the domain (field 1) is not a valid host name".into()));
                }
            }
        };
        let include_subdomains =
            flag(fields[1].trim(), "include-subdomains (field 2)").map_err(err)?;
        let path = fields[2].trim();
        if !path.starts_with('/') {
            return Err(err("the path (field 3) must start with /".into()));
        }
        let secure = flag(fields[3].trim(), "secure (field 4)").map_err(err)?;
        let expiry = fields[4].trim();
        let expires = if expiry.starts_with('-') {
            0 // some exporters write -1 for session cookies
        } else {
            expiry
                .parse::<f64>()
                .ok()
                .filter(|e| e.is_finite() && *e >= 0.0)
                .map(|e| e as u64)
                .ok_or_else(|| err("the expiry (field 5) must be Unix seconds".into()))?
        };
        let name = fields[5].trim();
        if name.is_empty() || name.contains('=') || bad_header_char(name) {
            return Err(err(
                "the cookie name (field 6) is empty or contains = ; or a control character".into(),
            ));
        }
        let value = fields.get(6).copied().unwrap_or("");
        if bad_header_char(value) {
            return Err(err(format!(
                "the value of cookie `{name}` contains ; or a control character"
            )));
        }
        cookies.push(Cookie {
            domain,
            include_subdomains,
            path: path.to_owned(),
            secure,
            expires,
            name: name.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(CookieJar { cookies })
}

/// Reads and parses a cookies file.
///
/// # Errors
/// The file cannot be read, or a line is malformed (the error names file and line).
pub fn load(path: &Path) -> Result<CookieJar, CookieError> {
    let io = |source| CookieError::Io {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(CookieError::NotAFile {
            path: path.to_owned(),
        });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(CookieError::Exposed {
                path: path.to_owned(),
                mode,
            });
        }
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let text = match String::from_utf8(bytes) {
        Ok(t) if !t.contains('\0') => t,
        _ => {
            return Err(CookieError::NotText {
                path: path.to_owned(),
            });
        }
    };
    parse_cookies_txt(&text).map_err(|e| match e {
        CookieError::Malformed { line, reason, .. } => CookieError::Malformed {
            file: Some(path.to_owned()),
            line,
            reason,
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# Netscape HTTP Cookie File\n\
        # https://curl.se/docs/http-cookies.html\n\
        \n\
        .facebook.com\tTRUE\t/\tTRUE\t2000000000\tc_user\t1000123\n\
        #HttpOnly_.facebook.com\tTRUE\t/\tTRUE\t0\txs\tSECRETVALUE\n\
        www.facebook.com\tFALSE\t/marketplace\tFALSE\t2000000000\tlocale\tes_ES\n\
        .facebook.com\tTRUE\t/\tFALSE\t1\told\tgone\n";

    fn url(u: &str) -> Url {
        Url::parse(u).unwrap()
    }

    #[test]
    fn parses_and_matches_domain_path_secure_expiry() {
        let jar = parse_cookies_txt(FILE).unwrap();
        assert_eq!(jar.len(), 4);
        assert_eq!(jar.names(), vec!["c_user", "xs", "locale", "old"]);
        assert_eq!(
            jar.header_for(&url("https://www.facebook.com/marketplace/madrid"))
                .as_deref(),
            Some("c_user=1000123; xs=SECRETVALUE; locale=es_ES")
        );
        // Subdomain: only include-subdomains cookies; wrong path drops `locale`.
        assert_eq!(
            jar.header_for(&url("https://m.facebook.com/")).as_deref(),
            Some("c_user=1000123; xs=SECRETVALUE")
        );
        // Plain http: secure cookies stay home.
        assert_eq!(
            jar.header_for(&url("http://www.facebook.com/marketplace"))
                .as_deref(),
            Some("locale=es_ES")
        );
        // Path-match is on segment boundaries; other domains get nothing.
        assert_eq!(
            jar.header_for(&url("http://www.facebook.com/marketplaceX")),
            None
        );
        assert_eq!(jar.header_for(&url("https://notfacebook.com/")), None);
        assert_eq!(jar.header_for(&url("https://facebook.com.evil.io/")), None);
    }

    #[test]
    fn an_internationalized_domain_matches_its_punycode_host() {
        let jar = parse_cookies_txt(
            ".Bücher.example\tTRUE\t/\tTRUE\t0\tsid\tv1\n\
             xn--mnchen-3ya.example\tFALSE\t/\tTRUE\t0\tlang\tde\n",
        )
        .unwrap();
        assert_eq!(
            jar.domains(),
            vec!["xn--bcher-kva.example", "xn--mnchen-3ya.example"]
        );
        assert_eq!(
            jar.header_for(&url("https://www.bücher.example/suche"))
                .as_deref(),
            Some("sid=v1")
        );
        assert_eq!(
            jar.header_for(&url("https://münchen.example/")).as_deref(),
            Some("lang=de")
        );
        let e = parse_cookies_txt("bü cher.example\tTRUE\t/\tTRUE\t0\tsid\tSECRET\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 1: the domain (field 1) is not a valid host name"),
            "{e}"
        );
        assert!(!e.contains("SECRET"), "{e}");
    }

    #[test]
    fn malformed_lines_are_named_and_values_never_echoed() {
        let bad =
            "# header\n.x.com\tTRUE\t/\tTRUE\t0\tok\tv\n.x.com TRUE / TRUE 0 sid SECRETVALUE\n";
        let e = parse_cookies_txt(bad).unwrap_err().to_string();
        assert!(e.starts_with("line 3: found 1 tab-separated field;"), "{e}");
        assert!(!e.contains("SECRETVALUE"), "{e}");
        let bad_flag = ".x.com\tYES\t/\tTRUE\t0\tsid\tSECRETVALUE\n";
        let e = parse_cookies_txt(bad_flag).unwrap_err().to_string();
        assert!(e.contains("line 1: include-subdomains"), "{e}");
        assert!(!e.contains("SECRETVALUE"));
        let bad_expiry = "\n\n.x.com\tTRUE\t/\tTRUE\tsoon\tsid\tSECRETVALUE\n";
        let e = parse_cookies_txt(bad_expiry).unwrap_err().to_string();
        assert!(e.contains("line 3: the expiry"), "{e}");
    }

    #[test]
    fn debug_redacts_values() {
        let jar = parse_cookies_txt(FILE).unwrap();
        let dbg = format!("{jar:?}");
        assert!(
            !dbg.contains("SECRETVALUE") && !dbg.contains("1000123"),
            "{dbg}"
        );
        assert!(dbg.contains("xs") && dbg.contains("<redacted>"), "{dbg}");
    }

    fn private(p: &Path, bytes: &[u8]) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(p, bytes).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fb.cookies.txt");
        private(&p, b"x\n");
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("fb.cookies.txt: line 1:"), "{e}");
        let e = load(&dir.path().join("missing.txt"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot read cookies file"), "{e}");
    }

    #[test]
    fn a_directory_a_binary_or_an_exposed_file_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            load(dir.path()),
            Err(CookieError::NotAFile { .. })
        ));
        let bin = dir.path().join("cookies.sqlite");
        private(&bin, b"SQLite format 3\0\x10\x00\xff\xfe");
        let e = load(&bin).unwrap_err();
        assert!(matches!(e, CookieError::NotText { .. }), "{e}");
        let open = dir.path().join("open.txt");
        private(&open, FILE.as_bytes());
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load(&open).unwrap_err().to_string();
        assert!(e.contains("mode 0644") && e.contains("chmod 600"), "{e}");
        assert!(!e.contains("SECRETVALUE"), "{e}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load(&open).unwrap().len(), 4);
    }
}
