//! `notifio`: parse, run, map errors to exit codes (0 ok, 1 runtime, 2 bad config or usage).
use std::process::ExitCode;

fn main() -> ExitCode {
    // Before any thread exists (see `notifio::memory`).
    notifio::memory::limit_arenas();
    notifio::cli::main()
}
