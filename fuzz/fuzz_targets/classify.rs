//! Arbitrary responses through `classify`, with the generic markers and every profile's.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use notifio::extract::{Facebook, Idealista, ImmoScout24, SiteProfile};
use notifio_policy::classify::is_challenge;
use notifio_policy::{Markers, Outcome, ResponseFacts, TransportFailure, classify};
use std::sync::LazyLock;

static MARKERS: LazyLock<[Markers; 4]> = LazyLock::new(|| {
    [
        Markers::generic(),
        Idealista.markers(),
        ImmoScout24.markers(),
        Facebook.markers(),
    ]
});

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    markers: u8,
    status: Option<u16>,
    failure: Option<u8>,
    headers: Vec<(String, String)>,
    requested_url: &'a str,
    same_url: bool,
    final_url: &'a str,
    has_session: bool,
    body: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    let markers = &MARKERS[usize::from(input.markers) % MARKERS.len()];
    let failure = input.failure.map(|f| match f % 5 {
        0 => TransportFailure::Timeout,
        1 => TransportFailure::Connect,
        2 => TransportFailure::TooManyRedirects,
        3 => TransportFailure::BodyTooLarge,
        _ => TransportFailure::Malformed,
    });
    let facts = ResponseFacts {
        status: input.status,
        failure,
        headers: &input.headers,
        requested_url: input.requested_url,
        final_url: if input.same_url {
            input.requested_url
        } else {
            input.final_url
        },
        body_head: input.body,
        has_session: input.has_session,
    };
    let outcome = classify(&facts, markers);
    if failure.is_some() || input.status.is_none() {
        assert_eq!(outcome, Outcome::Error);
    } else if is_challenge(&facts, markers) {
        assert_eq!(outcome, Outcome::Challenge);
    }
    assert_eq!(
        Outcome::parse(outcome.as_str()).map(Outcome::as_str),
        Some(outcome.as_str())
    );
});
