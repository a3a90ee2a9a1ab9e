//! The embedded dashboard page: `index.html` with `app.css` and `app.js` inlined, so the
//! binary serves everything itself (no CDN, no second request). Each response gets a fresh
//! CSP nonce: only our own inline script and style run, even if a listing title from a site
//! ever slipped markup past the page's text-only rendering.

use std::sync::LazyLock;

/// The page skeleton; `{{STYLE}}`, `{{SCRIPT}}` and `{{NONCE}}` are filled in here.
const INDEX_HTML: &str = include_str!("index.html");
/// The page's stylesheet.
const APP_CSS: &str = include_str!("app.css");
/// The page's script: polls `api/status`, renders, ticks the countdowns.
const APP_JS: &str = include_str!("app.js");

/// The page with style and script inlined, built once; only the nonce varies per response.
static TEMPLATE: LazyLock<String> = LazyLock::new(|| {
    INDEX_HTML
        .replace("{{STYLE}}", APP_CSS)
        .replace("{{SCRIPT}}", APP_JS)
});

/// Renders the page and its `Content-Security-Policy` header value.
pub(super) fn render() -> (String, String) {
    // 128 random bits in hex (hex digits are valid in a CSP nonce's base64 grammar).
    let nonce = format!("{:032x}", rand::random::<u128>());
    let html = TEMPLATE.replace("{{NONCE}}", &nonce);
    // Images may come from the sites (the inbox's thumbnails, loaded by the user's browser,
    // without a referrer, as when they look at the site): nothing else may.
    let csp = format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
         connect-src 'self'; img-src 'self' data: https: http:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'"
    );
    (html, csp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_is_self_contained_and_nonced() {
        let (html, csp) = render();
        assert!(
            !html.contains("{{"),
            "unfilled placeholder left in the page"
        );
        // No external assets: nothing is loaded from another origin.
        for needle in ["src=\"http", "href=\"http", "src=\"//", "@import"] {
            assert!(!html.contains(needle), "external asset: {needle}");
        }
        let nonce = csp
            .split("'nonce-")
            .nth(1)
            .and_then(|s| s.split('\'').next())
            .unwrap();
        assert_eq!(html.matches(&format!("nonce=\"{nonce}\"")).count(), 2);
        let (_, csp2) = render();
        assert_ne!(csp, csp2, "the nonce must change per response");
    }
}
