//! Keeping secrets that hide in URLs out of what Notifio shows: a search URL may carry
//! `user:password@` (and an SMTP URL a user name), and neither a password nor anything derived
//! from it may reach output, logs, the state database or an error message.
//!
//! One function, applied wherever a URL leaves the fetcher's hands as text; the fetcher itself
//! sends such credentials as `Authorization: Basic`, never in a request line.

use std::borrow::Cow;

/// `url` with the password of its `user:password@` replaced by `***`; unchanged when it has
/// none. Works on text that does not parse as a URL too (it is for error messages).
#[must_use]
pub fn url_password(url: &str) -> Cow<'_, str> {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return Cow::Borrowed(url);
    };
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else {
        return Cow::Borrowed(url);
    };
    let Some(colon) = authority[..at].find(':') else {
        return Cow::Borrowed(url);
    };
    Cow::Owned(format!(
        "{}:***{}",
        &url[..start + colon],
        &url[start + at..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_password_is_replaced() {
        assert_eq!(
            url_password("https://ana:hunter2@portal.example/s?q=a:b@c"),
            "https://ana:***@portal.example/s?q=a:b@c"
        );
        assert_eq!(url_password("smtp://u:pw@h:25"), "smtp://u:***@h:25");
        assert_eq!(url_password("https://:pw@h/"), "https://:***@h/");
        assert_eq!(url_password("https://ana@h/x:y@z"), "https://ana@h/x:y@z");
        assert_eq!(url_password("https://h:8080/a@b"), "https://h:8080/a@b");
        assert_eq!(url_password("not a url"), "not a url");
        assert!(matches!(url_password("https://h/"), Cow::Borrowed(_)));
    }
}
