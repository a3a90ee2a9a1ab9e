//! The generic profile (selector with id attribute, selector with first-link id, link regex,
//! JSON-LD; chosen by the first byte) on arbitrary bytes as the page.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio::extract::Generic;
use notifio_fuzz::{PORTAL, check_extract, generic_spec};
use std::sync::LazyLock;

static PROFILES: LazyLock<Vec<Generic>> = LazyLock::new(|| {
    (0..4u8)
        .map(|i| Generic::new(&generic_spec(i)).expect("static spec"))
        .collect()
});

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    check_extract(&PROFILES[usize::from(mode) % PROFILES.len()], body, PORTAL);
});
