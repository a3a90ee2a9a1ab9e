//! Edge inputs from fuzzing `parse_retry_after` and `classify` (`fuzz/`, docs/fuzzing.md),
//! kept as ordinary tests so `cargo test` re-checks them without the fuzzing toolchain. Both
//! functions take remote input (a server's header, status, URLs and body), so each case pins
//! down the answer, not only the absence of a panic.

use notifio_policy::classify::{BODY_HEAD, is_challenge};
use notifio_policy::{Markers, Outcome, ResponseFacts, Timestamp, classify, parse_retry_after};
use std::time::Duration;

// 2023-11-14T22:13:20Z
const NOW: Timestamp = Timestamp(1_700_000_000_000);

#[test]
fn retry_after_at_the_ends_of_time() {
    let date = "Tue, 14 Nov 2023 22:14:20 GMT"; // NOW + 60 s
    assert_eq!(
        parse_retry_after(date, Timestamp(0)),
        Some(Duration::from_millis(1_700_000_060_000))
    );
    // `now` past every representable date: the wait is zero, never an underflow.
    assert_eq!(
        parse_retry_after(date, Timestamp(u64::MAX)),
        Some(Duration::ZERO)
    );
    assert_eq!(
        parse_retry_after("18446744073709551616", Timestamp(u64::MAX)),
        Some(Duration::from_secs(u64::MAX))
    );
}

#[test]
fn retry_after_hostile_shapes_are_ignored() {
    for v in [
        "\u{feff}120", // byte-order mark
        "١٢٠",         // Arabic-Indic digits are not ASCII digits
        "120\u{0}",    // NUL after the number
        "Tue, 14 Nov 2023 22:14:20 GMT\u{0}",
        "Tue, 31 Feb 2023 22:14:20 GMT", // no such day
        "Tue, 14 Nov 2023 25:14:20 GMT", // no such hour
        "Tue, 14 Nov 99999 22:14:20 GMT",
        "\u{1F600}",
    ] {
        assert_eq!(parse_retry_after(v, NOW), None, "{v:?}");
    }
    // Whitespace `trim` accepts around delay-seconds, including Unicode spaces.
    assert_eq!(
        parse_retry_after("\u{3000}7\t", NOW),
        Some(Duration::from_secs(7))
    );
}

fn facts<'a>(
    status: Option<u16>,
    headers: &'a [(String, String)],
    requested: &'a str,
    final_url: &'a str,
    body: &'a [u8],
) -> ResponseFacts<'a> {
    ResponseFacts {
        status,
        failure: None,
        headers,
        requested_url: requested,
        final_url,
        body_head: body,
        has_session: true,
    }
}

#[test]
fn classify_odd_urls_and_statuses() {
    let m = Markers::generic();
    // URLs with no scheme, no path, only a scheme, or non-ASCII right after `://`.
    for (requested, final_url) in [
        ("", ""),
        ("https://a/", "://"),
        ("https://a/", "https://"),
        ("https://a/", "login"),
        ("https://a/", "ä://ö/login"),
        ("https://a/", "https://ü/login/x"),
    ] {
        let out = classify(&facts(Some(200), &[], requested, final_url, b""), &m);
        assert!(
            matches!(out, Outcome::Ok | Outcome::SessionExpired),
            "{final_url:?}: {out}"
        );
    }
    assert_eq!(
        classify(
            &facts(Some(200), &[], "https://a/", "https://ü/login/x", b""),
            &m
        ),
        Outcome::SessionExpired
    );
    for (status, want) in [
        (0, Outcome::Error),
        (99, Outcome::Error),
        (600, Outcome::Error),
        (u16::MAX, Outcome::Error),
        (499, Outcome::Denied),
    ] {
        assert_eq!(
            classify(
                &facts(Some(status), &[], "https://a/", "https://a/", b""),
                &m
            ),
            want,
            "{status}"
        );
    }
}

#[test]
fn classify_header_markers_with_non_ascii_values() {
    let m = Markers::generic();
    // `to_ascii_lowercase` on a value full of multi-byte characters must neither panic nor
    // match: the marker is ASCII.
    let headers = vec![("CF-Mitigated".to_owned(), "ÇHALLENGE\u{0}".to_owned())];
    assert!(!is_challenge(
        &facts(Some(403), &headers, "https://a/", "https://a/", b""),
        &m
    ));
    let headers = vec![("CF-Mitigated".to_owned(), "x CHALLENGE ü".to_owned())];
    assert_eq!(
        classify(
            &facts(Some(200), &headers, "https://a/", "https://a/", b""),
            &m
        ),
        Outcome::Challenge
    );
}

#[test]
fn classify_markers_straddling_the_body_head_limit() {
    let m = Markers::generic();
    let marker = b"_cf_chl_opt";
    // A marker that ends exactly at BODY_HEAD counts; one that crosses it does not.
    let mut body = vec![b' '; BODY_HEAD - marker.len()];
    body.extend_from_slice(marker);
    assert_eq!(
        classify(
            &facts(Some(200), &[], "https://a/", "https://a/", &body),
            &m
        ),
        Outcome::Challenge
    );
    let mut body = vec![b' '; BODY_HEAD - marker.len() + 1];
    body.extend_from_slice(marker);
    assert_eq!(
        classify(
            &facts(Some(200), &[], "https://a/", "https://a/", &body),
            &m
        ),
        Outcome::Ok
    );
    // Invalid UTF-8 around a marker does not hide it.
    let body = [&[0xff, 0xfe][..], marker, &[0xc3][..]].concat();
    assert_eq!(
        classify(
            &facts(Some(503), &[], "https://a/", "https://a/", &body),
            &m
        ),
        Outcome::Challenge
    );
}
