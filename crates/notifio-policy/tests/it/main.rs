//! The policy crate's integration tests, one binary (as ripgrep's `tests/tests.rs`): a module
//! per area, and `common` for what the scheduler tests share.
//!
//! `cargo test -p notifio-policy --test it scheduler::` runs one area.

mod budget;
mod common;
mod fuzz_regressions;
mod proptests;
mod scheduler;
mod scheduler_reference;
mod scheduler_sites;
mod seed_rules;
