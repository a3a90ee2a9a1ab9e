//! Arbitrary bytes as a Facebook result page: no panic, and every listing has an id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio::extract::Facebook;
use notifio_fuzz::{FB, check_extract};

fuzz_target!(|body: &[u8]| check_extract(&Facebook, body, FB));
