//! `Retry-After` values from a hostile server, at an arbitrary `now`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio_policy::{Timestamp, parse_retry_after};
use std::time::Duration;

fuzz_target!(|input: (u64, &str)| {
    let (now, value) = input;
    let got = parse_retry_after(value, Timestamp(now));
    let trimmed = value.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        // delay-seconds never depends on `now` and never fails.
        assert!(got.is_some(), "{value:?}");
        assert_eq!(
            got,
            parse_retry_after(value, Timestamp(now.wrapping_add(1)))
        );
    } else if let (Some(a), Some(b)) = (
        got,
        parse_retry_after(value, Timestamp(now.saturating_add(1_000))),
    ) {
        // An HTTP-date: a later `now` never means a longer wait.
        assert!(b <= a, "{value:?}: {a:?} then {b:?}");
        assert!(a - b <= Duration::from_secs(1));
    }
});
