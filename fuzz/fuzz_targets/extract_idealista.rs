//! Arbitrary bytes as a Idealista result page: no panic, and every listing has an id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio::extract::Idealista;
use notifio_fuzz::{IDEALISTA, check_extract};

fuzz_target!(|body: &[u8]| check_extract(&Idealista, body, IDEALISTA));
