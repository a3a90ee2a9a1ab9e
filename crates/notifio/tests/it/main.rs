//! Notifio's integration tests, one binary (as ripgrep's `tests/tests.rs`): a module per area,
//! `util` for what they share. Everything runs against real servers on loopback (the fake
//! portal, an SMTP server, fakes of the services' HTTP APIs) and the real `notifio` binary.
//!
//! `cargo test -p notifio --test it watch::` runs one area.

mod app;
mod bot_api;
mod browser;
mod browser_fetch;
mod budget;
mod channels;
mod cli;
mod config;
mod demo;
mod doc_links;
mod email_e2e;
mod extract;
mod fetch;
mod filters;
mod fuzz_regressions;
mod inbox;
mod install;
mod is24_app;
mod journeys;
mod lifecycle;
mod notify;
mod pages;
mod profiles;
mod quiet;
mod reading;
#[path = "../support/real_pages.rs"]
mod real_pages;
mod reliability;
mod service;
mod status_e2e;
mod upgrade;
mod util;
mod watch;
mod web;
