//! Shell completions and man pages, generated from the CLI definition (`cli::Cli`):
//! `notifio completions SHELL` and `notifio man [--dir DIR]`.
//!
//! They come from the binary itself rather than from files kept in the repository, so what a
//! package installs (packaging/deb.sh runs these commands on the binary it ships) describes
//! exactly that binary: a flag added to the CLI is in the next completions and man page
//! without anyone remembering to regenerate them.

use crate::cli::{Cli, VERSION};
use clap::CommandFactory as _;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};
use std::path::{Path, PathBuf};

/// The CLI definition as the generators read it: built (so each subcommand knows its full
/// name, `notifio-service-install`), without clap's `help` subcommand.
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The completion script for `shell`, for the binary named `notifio`.
#[must_use]
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command(), "notifio", &mut out);
    out
}

/// `cmd`'s page, headed as Notifio's manual.
fn page(cmd: clap::Command) -> Man {
    Man::new(cmd)
        .source(format!("notifio {VERSION}"))
        .manual("Notifio manual")
}

/// What notifio(1) says beyond the CLI definition: exit codes, files, the environment and
/// where the full documentation is.
fn extra_sections() -> Roff {
    let mut roff = Roff::new();
    let item = |roff: &mut Roff, term: &str, text: &str| {
        roff.control("TP", []);
        roff.text([bold(term)]);
        roff.text([roman(text)]);
    };
    roff.control("SH", ["EXIT STATUS"]);
    item(
        &mut roff,
        "0",
        "The command ran (whatever the sites answered).",
    );
    item(
        &mut roff,
        "1",
        "A runtime failure (a notification channel that did not deliver a test message, a \
         file that could not be written, a second watcher on the same state directory).",
    );
    item(
        &mut roff,
        "2",
        "A bad config or bad usage; the message names file:line:col and the key.",
    );
    roff.control("SH", ["FILES"]);
    item(
        &mut roff,
        "./notifio.toml, ~/.config/notifio/notifio.toml",
        "The config file, when --config and NOTIFIO_CONFIG are not given: the first that exists.",
    );
    item(
        &mut roff,
        "~/.local/share/notifio/",
        "The state (SQLite, mode 0600), unless [watch] state_dir says otherwise.",
    );
    item(
        &mut roff,
        "/usr/lib/systemd/user/notifio.service",
        "With the Debian package: `notifio watch` at login, once enabled with \
         systemctl --user enable --now notifio.",
    );
    roff.control("SH", ["ENVIRONMENT"]);
    item(&mut roff, "NOTIFIO_CONFIG", "The config file, as --config.");
    item(
        &mut roff,
        "RUST_LOG",
        "The log filter (overrides -v), e.g. notifio=debug.",
    );
    item(
        &mut roff,
        "HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY",
        "The proxy for the sites' requests (http:// proxies only).",
    );
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(
        "The README and docs/ (the guide, the config reference, troubleshooting) at \
         https://github.com/notifio/notifio; with the Debian package, \
         /usr/share/doc/notifio/README.md.",
    )]);
    roff
}

/// notifio(1), as roff: the CLI definition's sections, then exit codes, files, environment.
///
/// # Errors
/// Never in practice: the page is written into memory.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    page(command()).render(&mut out)?;
    extra_sections().to_writer(&mut out)?;
    Ok(out)
}

/// notifio(1) and a page for every subcommand (notifio-watch(1), notifio-service-install(1),
/// …: the pages notifio(1) refers to), written into `dir`. Returns the files written.
///
/// # Errors
/// A page that cannot be written.
pub fn man_pages_to(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    fn subcommand_pages(
        cmd: &clap::Command,
        dir: &Path,
        written: &mut Vec<PathBuf>,
    ) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let man = page(sub.clone());
            let path = dir.join(man.get_filename());
            let mut out = Vec::new();
            man.render(&mut out)?;
            std::fs::write(&path, out)?;
            written.push(path);
            subcommand_pages(sub, dir, written)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir)?;
    let top = dir.join("notifio.1");
    std::fs::write(&top, man_page()?)?;
    let mut written = vec![top];
    subcommand_pages(&command(), dir, &mut written)?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_man_page_names_every_subcommand_and_the_exit_codes() {
        let page = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(page.contains("\n.TH notifio 1 "), "{page}");
        for sub in [
            "notifio\\-watch(1)",
            "notifio\\-completions(1)",
            "notifio\\-man(1)",
        ] {
            assert!(page.contains(sub), "{sub} missing:\n{page}");
        }
        assert!(page.contains(".SH \"EXIT STATUS\""), "{page}");
        assert!(page.contains(VERSION), "{page}");
    }

    #[test]
    fn every_subcommand_gets_a_page_named_for_its_full_path() {
        let dir = tempfile::tempdir().unwrap();
        let written = man_pages_to(dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for name in [
            "notifio.1",
            "notifio-watch.1",
            "notifio-service-install.1",
            "notifio-notify-test.1",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
    }
}
