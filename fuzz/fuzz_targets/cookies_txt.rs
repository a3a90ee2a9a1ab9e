//! A user's (or a browser extension's) `cookies.txt`: parse it, then use the jar.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio::fetch::cookies::parse_cookies_txt;

fuzz_target!(|text: &str| {
    if let Ok(jar) = parse_cookies_txt(text) {
        assert_eq!(jar.len(), jar.names().len());
        for domain in jar.domains() {
            for scheme in ["https", "http"] {
                if let Ok(url) = url::Url::parse(&format!("{scheme}://{domain}/a/b")) {
                    if let Some(h) = jar.header_for(&url) {
                        // Must be a valid header value: no control characters.
                        assert!(!h.bytes().any(|b| b.is_ascii_control()), "{h:?}");
                    }
                }
            }
        }
    }
});
