//! Arbitrary bytes as a ImmoScout24 result page: no panic, and every listing has an id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio::extract::ImmoScout24;
use notifio_fuzz::{IS24, check_extract};

fuzz_target!(|body: &[u8]| check_extract(&ImmoScout24, body, IS24));
