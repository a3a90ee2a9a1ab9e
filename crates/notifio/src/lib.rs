//! Notifio, the application: config, fetcher, extractors, store, notifier, the watch loop that
//! drives the pure scheduler, the dashboard and the CLI. Every decision about *when* to knock
//! on a site lives in `notifio-policy`; this crate does the I/O those decisions call for.

pub mod announce;
pub mod chat;
pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod duplicate;
pub mod extract;
pub mod fetch;
pub mod filter;
pub mod generate;
pub mod inbox;
pub mod listing;
pub mod memory;
pub mod narrate;
pub mod notify;
mod pages;
pub mod picture;
pub mod places;
pub mod price;
#[cfg(test)]
#[path = "../tests/support/real_pages.rs"]
mod real_pages;
pub mod reason;
pub mod redact;
pub mod reload;
pub mod runner;
pub mod secret;
pub mod service;
pub mod status;
pub mod store;
pub mod terminal;
pub mod watch;
pub mod web;
