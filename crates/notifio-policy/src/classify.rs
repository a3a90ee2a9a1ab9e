//! Classifying a response (docs/architecture.md#classifying-a-response): what did the site just tell us?
//!
//! Pure: status, headers, requested and final URL, and the first 64 KiB of the body go in; an
//! [`Outcome`] comes out. Anti-bot pages are recognised at *any* status, because challenges are
//! served as 200, 403, 429 and 503 alike. Widget markers (reCAPTCHA, hCaptcha) only count in
//! the first 64 KiB: real result pages load reCAPTCHA for their contact forms far down the page
//! (Idealista's does at ~700 KB), while a challenge page is small and shows it at once. Some
//! vendors' scripts are loaded by ordinary pages too (AWS WAF's token SDK, Cloudflare's bot
//! detection): those count only on a page that is little more than its script
//! ([`SCRIPT_PAGE_MAX`]), which is what their interstitials are. Site profiles add their own
//! markers through [`Markers`]; the generic ones are always applied.

use crate::backoff::RefusalKind;
use memchr::memmem;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How much of the body classification looks at.
pub const BODY_HEAD: usize = 64 * 1024;

/// A page at most this long that loads a [`Markers::challenge_script`] is that script's
/// interstitial: AWS WAF's and Cloudflare's bot-fight pages are a few KB, while a result page
/// that merely includes the same SDK is hundreds of KB.
pub const SCRIPT_PAGE_MAX: usize = 16 * 1024;

/// What a check concluded. JSON and database names are [`Outcome::as_str`]: `Unchanged`
/// (a 304, or the same bytes) and `Held` are reported as `ok`, which they are to the user and
/// to the site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// 2xx and the page was recognised.
    Ok,
    /// 304 Not Modified: the page has not changed since the last check.
    Unchanged,
    /// The page redirected into another site that is closed to us now (waiting after a
    /// refusal, or its session expired), so the redirect was not followed. The search's own
    /// site answered, so nobody refused; but nothing was learnt about the page either.
    /// Never from [`classify`]: the fetcher says so.
    Held,
    /// An anti-bot page.
    Challenge,
    /// 429.
    RateLimited,
    /// 401/403/451 (and other 4xx) without challenge markers.
    Denied,
    /// Redirected to a login/checkpoint page, or a logged-out marker on a site with cookies.
    SessionExpired,
    /// 5xx, timeout or a transport failure, after retries.
    Error,
    /// 404/410: the search no longer exists.
    SearchGone,
    /// 2xx, but the result list could not be found on the page.
    LayoutUnknown,
}

impl Outcome {
    /// One outcome per reported name ([`Self::as_str`]): `Unchanged` and `Held` report as `ok`.
    pub const REPORTED: [Self; 8] = [
        Self::Ok,
        Self::Challenge,
        Self::RateLimited,
        Self::Denied,
        Self::SessionExpired,
        Self::Error,
        Self::SearchGone,
        Self::LayoutUnknown,
    ];

    /// The name in JSON, the database and logs. `Unchanged` and `Held` report as `ok`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok | Self::Unchanged | Self::Held => "ok",
            Self::Challenge => "challenge",
            Self::RateLimited => "rate_limited",
            Self::Denied => "denied",
            Self::SessionExpired => "session_expired",
            Self::Error => "error",
            Self::SearchGone => "search_gone",
            Self::LayoutUnknown => "layout_unknown",
        }
    }

    /// The outcome as it is reported (one of [`Self::REPORTED`]): `Unchanged` and `Held`
    /// are `Ok`.
    #[must_use]
    pub const fn reported(self) -> Self {
        match self {
            Self::Unchanged | Self::Held => Self::Ok,
            other => other,
        }
    }

    /// Parses [`Self::as_str`] back (`ok` → `Ok`).
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::REPORTED.into_iter().find(|o| o.as_str() == s)
    }

    /// The ladder this outcome climbs, if it is a site refusal.
    #[must_use]
    pub const fn refusal_kind(self) -> Option<RefusalKind> {
        match self {
            Self::Challenge => Some(RefusalKind::Challenge),
            Self::RateLimited => Some(RefusalKind::RateLimited),
            Self::Denied => Some(RefusalKind::Denied),
            Self::Error => Some(RefusalKind::Error),
            _ => None,
        }
    }
}

impl Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown outcome `{name}`")))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Why no usable response arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportFailure {
    /// No response (or no complete body) within the time allowed.
    Timeout,
    /// Connect, reset, DNS or TLS failure.
    Connect,
    /// More redirects than allowed (5).
    TooManyRedirects,
    /// The body (after decompression) passed the size cap.
    BodyTooLarge,
    /// The response could not be decoded (broken gzip, invalid framing).
    Malformed,
}

/// A header that marks an anti-bot response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderMarker {
    /// Lower-case header name.
    pub name: String,
    /// A substring the value must contain (case-insensitive), or `None` for "present".
    pub value_contains: Option<String>,
    /// Only counts when the status is not 2xx (DataDome sets its header on ordinary pages too).
    pub only_on_error: bool,
}

/// Signs of refusal and of a lost session. Profiles extend [`Markers::generic`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Markers {
    /// Substrings of the first 64 KiB of body that mean "challenge page".
    pub challenge_body: Vec<String>,
    /// Substrings that mean "challenge page" only on a page of at most [`SCRIPT_PAGE_MAX`]
    /// bytes (scripts that ordinary pages load too).
    pub challenge_script: Vec<String>,
    /// Headers that mean "challenge page".
    pub challenge_headers: Vec<HeaderMarker>,
    /// Final-URL path prefixes that mean "challenge page" (Idealista's `/checkvalidation`).
    pub challenge_paths: Vec<String>,
    /// Final-URL path prefixes of login pages: being redirected there means the session expired.
    pub login_paths: Vec<String>,
    /// Substrings that mean "you are logged out" (checked only on sites that use cookies).
    pub logged_out_body: Vec<String>,
}

impl Markers {
    /// The markers every site gets: Cloudflare, DataDome, AWS WAF, hCaptcha, reCAPTCHA and
    /// Geetest challenges, and the common login paths.
    #[must_use]
    pub fn generic() -> Self {
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        Self {
            challenge_body: s(&[
                "<title>Just a moment...</title>",
                "_cf_chl_opt",
                "captcha-delivery.com",
                "hcaptcha.com/1/api.js",
                "class=\"h-captcha\"",
                "class=\"g-recaptcha\"",
                "initGeetest",
                "static.geetest.com",
                // AWS WAF's challenge and CAPTCHA interstitials set up `window.gokuProps`.
                "gokuProps",
            ]),
            challenge_script: s(&[
                // AWS WAF: `…awswaf.com/…/challenge.js` and the `AwsWafIntegration` calls.
                "awswaf.com/",
                "AwsWafIntegration",
                // Cloudflare's bot-fight page: nothing but its challenge-platform script.
                "/cdn-cgi/challenge-platform/",
                // Its older form: the bot-management script (`/cdn-cgi/bm/cv/<n>/api.js`) and
                // the parameters it reads (`window['__CF$cv$params']`). Ordinary pages behind
                // Cloudflare carry both as well, hence a script marker, not a body one.
                "/cdn-cgi/bm/cv/",
                "__CF$cv$params",
            ]),
            challenge_headers: vec![
                HeaderMarker {
                    name: "cf-mitigated".into(),
                    value_contains: Some("challenge".into()),
                    only_on_error: false,
                },
                HeaderMarker {
                    name: "x-datadome".into(),
                    value_contains: None,
                    only_on_error: true,
                },
                // AWS WAF's Challenge and CAPTCHA actions (`challenge` at 202, `captcha` at
                // 405): whatever the status, the page is the interstitial.
                HeaderMarker {
                    name: "x-amzn-waf-action".into(),
                    value_contains: None,
                    only_on_error: false,
                },
            ],
            challenge_paths: Vec::new(),
            login_paths: s(&[
                "/login",
                "/signin",
                "/sign-in",
                "/checkpoint",
                "/accounts/login",
                "/auth/login",
            ]),
            logged_out_body: Vec::new(),
        }
    }

    /// Adds body markers of challenge pages.
    #[must_use]
    pub fn with_challenge_body(mut self, markers: &[&str]) -> Self {
        self.challenge_body
            .extend(markers.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Adds final-URL path prefixes of challenge pages.
    #[must_use]
    pub fn with_challenge_paths(mut self, paths: &[&str]) -> Self {
        self.challenge_paths
            .extend(paths.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Adds login path prefixes.
    #[must_use]
    pub fn with_login_paths(mut self, paths: &[&str]) -> Self {
        self.login_paths
            .extend(paths.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Adds logged-out markers.
    #[must_use]
    pub fn with_logged_out_body(mut self, markers: &[&str]) -> Self {
        self.logged_out_body
            .extend(markers.iter().map(|s| (*s).to_owned()));
        self
    }
}

impl Default for Markers {
    fn default() -> Self {
        Self::generic()
    }
}

/// Everything classification looks at.
#[derive(Clone, Copy, Debug)]
pub struct ResponseFacts<'a> {
    /// The final status, or `None` if no response arrived.
    pub status: Option<u16>,
    /// Why no usable response arrived, if so.
    pub failure: Option<TransportFailure>,
    /// Response headers; names lower-case.
    pub headers: &'a [(String, String)],
    /// The URL we asked for.
    pub requested_url: &'a str,
    /// The URL after redirects.
    pub final_url: &'a str,
    /// The first bytes of the body (only the first [`BODY_HEAD`] are looked at).
    pub body_head: &'a [u8],
    /// Whether we sent session cookies (enables logged-out markers).
    pub has_session: bool,
}

fn path_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(url, |i| &url[i + 3..]);
    after_scheme.find('/').map_or("/", |i| &after_scheme[i..])
}

fn contains_any(haystack: &[u8], needles: &[String]) -> bool {
    needles
        .iter()
        .any(|n| !n.is_empty() && memmem::find(haystack, n.as_bytes()).is_some())
}

/// Whether a response is an anti-bot page (used by `classify`, and by extractors that meet
/// an unexpected page).
#[must_use]
pub fn is_challenge(facts: &ResponseFacts<'_>, markers: &Markers) -> bool {
    challenge_marker(facts, markers).is_some()
}

/// The marker that makes a response an anti-bot page (a header name, a body substring or a
/// path prefix), or `None` when it is not one. [`challenge_vendor`] names whose it is.
#[must_use]
pub fn challenge_marker<'m>(facts: &ResponseFacts<'_>, markers: &'m Markers) -> Option<&'m str> {
    let is_error = facts.status.is_some_and(|s| !(200..300).contains(&s));
    let header_hit = markers.challenge_headers.iter().find(|m| {
        (!m.only_on_error || is_error)
            && facts.headers.iter().any(|(name, value)| {
                name.eq_ignore_ascii_case(&m.name)
                    && m.value_contains.as_ref().is_none_or(|want| {
                        value
                            .to_ascii_lowercase()
                            .contains(&want.to_ascii_lowercase())
                    })
            })
    });
    if let Some(m) = header_hit {
        return Some(&m.name);
    }
    let head = &facts.body_head[..facts.body_head.len().min(BODY_HEAD)];
    if let Some(hit) = first_in(head, &markers.challenge_body) {
        return Some(hit);
    }
    if facts.body_head.len() <= SCRIPT_PAGE_MAX
        && let Some(hit) = first_in(head, &markers.challenge_script)
    {
        return Some(hit);
    }
    let path = path_of(facts.final_url);
    markers
        .challenge_paths
        .iter()
        .find(|p| path.starts_with(p.as_str()))
        .map(String::as_str)
}

/// Whose anti-bot page a [`challenge_marker`] belongs to, in the name users know it by
/// (`DataDome`, `Cloudflare`, …); `None` for a site's own marker.
#[must_use]
pub fn challenge_vendor(marker: &str) -> Option<&'static str> {
    let m = marker.to_ascii_lowercase();
    let vendors: [(&str, &[&str]); 6] = [
        ("AWS WAF", &["awswaf", "gokuprops", "x-amzn-waf"]),
        (
            "Cloudflare",
            &[
                "cf-mitigated",
                "_cf_chl",
                "just a moment",
                "challenge-platform",
                "/cdn-cgi/bm/",
                "__cf$cv$params",
            ],
        ),
        ("DataDome", &["datadome", "captcha-delivery"]),
        ("hCaptcha", &["hcaptcha", "h-captcha"]),
        ("reCAPTCHA", &["recaptcha"]),
        ("Geetest", &["geetest"]),
    ];
    vendors
        .into_iter()
        .find(|(_, needles)| needles.iter().any(|n| m.contains(n)))
        .map(|(name, _)| name)
}

fn first_in<'m>(haystack: &[u8], needles: &'m [String]) -> Option<&'m str> {
    needles
        .iter()
        .find(|n| !n.is_empty() && memmem::find(haystack, n.as_bytes()).is_some())
        .map(String::as_str)
}

/// Classifies one response (docs/architecture.md#classifying-a-response). A 2xx comes back `Ok`; whether the page is recognised
/// (`LayoutUnknown`) is the extractor's call.
#[must_use]
pub fn classify(facts: &ResponseFacts<'_>, markers: &Markers) -> Outcome {
    if let Some(failure) = facts.failure {
        return match failure {
            TransportFailure::Timeout
            | TransportFailure::Connect
            | TransportFailure::TooManyRedirects
            | TransportFailure::BodyTooLarge
            | TransportFailure::Malformed => Outcome::Error,
        };
    }
    let Some(status) = facts.status else {
        return Outcome::Error;
    };
    if is_challenge(facts, markers) {
        return Outcome::Challenge;
    }
    let redirected = facts.final_url != facts.requested_url;
    if redirected {
        let path = path_of(facts.final_url);
        if markers
            .login_paths
            .iter()
            .any(|p| path.starts_with(p.as_str()))
        {
            return Outcome::SessionExpired;
        }
    }
    if facts.has_session
        && contains_any(
            &facts.body_head[..facts.body_head.len().min(BODY_HEAD)],
            &markers.logged_out_body,
        )
    {
        return Outcome::SessionExpired;
    }
    match status {
        429 => Outcome::RateLimited,
        401 | 403 | 451 => Outcome::Denied,
        404 | 410 => Outcome::SearchGone,
        304 => Outcome::Unchanged,
        200..=299 => Outcome::Ok,
        400..=499 => Outcome::Denied,
        _ => Outcome::Error,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A response with this status, these headers and this body (also used by `retry`'s tests).
    pub(crate) fn facts<'a>(
        status: u16,
        headers: &'a [(String, String)],
        body: &'a [u8],
    ) -> ResponseFacts<'a> {
        ResponseFacts {
            status: Some(status),
            failure: None,
            headers,
            requested_url: "https://www.immobilienscout24.de/Suche/de/berlin/wohnung-mieten",
            final_url: "https://www.immobilienscout24.de/Suche/de/berlin/wohnung-mieten",
            body_head: body,
            has_session: false,
        }
    }

    /// An AWS WAF interstitial as it is built: `gokuProps`, the challenge script from the
    /// integration's `awswaf.com` host, and an `AwsWafIntegration` call.
    const AWS_PAGE: &str = r#"<!DOCTYPE html><html><head><meta charset="utf-8"><title></title>
<script type="text/javascript">window.gokuProps = {"key":"AQID","iv":"BAUG","context":"x"};</script>
<script src="https://3b1e4c.edge.sdk.awswaf.com/3b1e4c/52a8/challenge.js"></script>
</head><body><div id="challenge-container"></div>
<script>AwsWafIntegration.saveReferrer(); AwsWafIntegration.checkForceRefresh().then(function (f) { if (f) { AwsWafIntegration.forceRefreshToken().then(function () { window.location.reload(true); }); } else { AwsWafIntegration.getToken().then(function () { window.location.reload(true); }); } });</script>
<noscript><h1>JavaScript is disabled</h1></noscript></body></html>"#;

    #[test]
    fn aws_waf_is_a_challenge_at_any_status() {
        let m = Markers::generic();
        for status in [200, 202, 401, 403, 405, 503] {
            assert_eq!(
                classify(&facts(status, &[], AWS_PAGE.as_bytes()), &m),
                Outcome::Challenge,
                "{status}"
            );
        }
        // Only the header (a CAPTCHA action at 405, an empty challenge at 202).
        for (status, action) in [(202, "challenge"), (405, "captcha"), (200, "challenge")] {
            let h = [("x-amzn-waf-action".to_owned(), action.to_owned())];
            assert_eq!(classify(&facts(status, &h, b""), &m), Outcome::Challenge);
            let marker = challenge_marker(&facts(status, &h, b""), &m).unwrap();
            assert_eq!(challenge_vendor(marker), Some("AWS WAF"));
        }
        // Only the script and the calls, no gokuProps.
        let script_only = AWS_PAGE.replace("window.gokuProps", "window.props");
        let f = facts(202, &[], script_only.as_bytes());
        assert_eq!(classify(&f, &m), Outcome::Challenge);
        assert_eq!(
            challenge_vendor(challenge_marker(&f, &m).unwrap()),
            Some("AWS WAF")
        );
    }

    #[test]
    fn a_result_page_that_loads_the_waf_sdk_is_still_a_page() {
        // A real result page is large; its head may load the same integration script.
        let mut page = String::from(
            "<html><head><script src=\"https://x.token.awswaf.com/x/y/challenge.js\"></script>\
             <script>AwsWafIntegration.getToken();</script>\
             <script src=\"/cdn-cgi/challenge-platform/scripts/jsd/main.js\"></script>\
             <script>window['__CF$cv$params']={r:'6f0e'};</script>\
             <script src='/cdn-cgi/bm/cv/2172558837/api.js'></script></head><body>",
        );
        while page.len() < 3 * SCRIPT_PAGE_MAX {
            page.push_str("<article class=\"listing\" data-id=\"1\"><h2>Wohnung</h2></article>");
        }
        assert_eq!(
            classify(&facts(200, &[], page.as_bytes()), &Markers::generic()),
            Outcome::Ok
        );
    }

    #[test]
    fn cloudflares_bot_fight_page_is_a_challenge() {
        let page = br#"<html><head></head><body><script>(function(){window._cf_chl_ctx={cvId:'3'};var a=document.createElement('script');a.src='/cdn-cgi/challenge-platform/h/b/orchestrate/jsch/v1?ray=8f1';document.getElementsByTagName('head')[0].appendChild(a);})();</script></body></html>"#;
        let bare = br#"<html><body><script src="/cdn-cgi/challenge-platform/h/g/orchestrate/chl_page/v1?ray=8f1"></script></body></html>"#;
        let m = Markers::generic();
        for status in [200, 403, 503] {
            for body in [&page[..], &bare[..]] {
                let f = facts(status, &[], body);
                assert_eq!(classify(&f, &m), Outcome::Challenge, "{status}");
                assert_eq!(
                    challenge_vendor(challenge_marker(&f, &m).unwrap()),
                    Some("Cloudflare")
                );
            }
        }
    }

    /// Cloudflare's older bot-fight page (Bot Fight Mode's `bm/cv` script): a 200 whose only
    /// content is the parameters and the script that reads them; no challenge-platform URL.
    #[test]
    fn cloudflares_older_bot_fight_page_is_a_challenge() {
        let page = br#"<!DOCTYPE html><html><head></head><body><script type="text/javascript">(function(){window['__CF$cv$params']={r:'6f0e1d2c3b4a5968',m:'bm90LWEtcmVhbC10b2tlbg',s:[0x1a2b3c4d5e,0x6f7a8b9c0d]};})();</script><script src='/cdn-cgi/bm/cv/2172558837/api.js'></script></body></html>"#;
        let params_only =
            br#"<html><body><script>window['__CF$cv$params']={r:'6f0e'};</script></body></html>"#;
        let script_only =
            br#"<html><body><script src="/cdn-cgi/bm/cv/2172558837/api.js"></script></body></html>"#;
        let m = Markers::generic();
        for status in [200, 403, 503] {
            for body in [&page[..], &params_only[..], &script_only[..]] {
                let f = facts(status, &[], body);
                assert_eq!(classify(&f, &m), Outcome::Challenge, "{status}");
                assert_eq!(
                    challenge_vendor(challenge_marker(&f, &m).unwrap()),
                    Some("Cloudflare")
                );
            }
        }
    }

    #[test]
    fn vendors_are_named_for_the_generic_markers() {
        let m = Markers::generic();
        for marker in m.challenge_body.iter().chain(&m.challenge_script) {
            assert!(challenge_vendor(marker).is_some(), "{marker}");
        }
        for h in &m.challenge_headers {
            assert!(challenge_vendor(&h.name).is_some(), "{}", h.name);
        }
        assert_eq!(challenge_vendor("captcha-delivery.com"), Some("DataDome"));
        assert_eq!(challenge_vendor("/checkvalidation"), None);
    }
}
