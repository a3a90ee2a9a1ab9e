//! `notifio.toml` text, through the same validation and resolution `config::parse` runs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio::config::{Environment, parse_in};
use std::path::{Path, PathBuf};

fuzz_target!(|text: &str| {
    // `parse` is `parse_in` with the process environment; a fixed one keeps runs reproducible.
    let env = Environment {
        home: Some(PathBuf::from("/home/fuzz")),
        data_dir: Some(PathBuf::from("/home/fuzz/.local/share/notifio")),
        config_dir: None,
        dashboard_token: None,
    };
    match parse_in(text, Path::new("/fuzz/notifio.toml"), &env) {
        Ok(config) => {
            assert!(
                !config.searches.is_empty(),
                "a config without [[search]] was accepted"
            );
            let _ = config.warnings();
        }
        // Error rendering is user-facing and must not panic either.
        Err(e) => drop(e.to_string()),
    }
});
