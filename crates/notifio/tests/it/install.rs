//! What an installed notifio ships beside itself, checked by the programs that read it: bash
//! loads the completions and completes with them, zsh and fish parse theirs, man-db renders
//! every man page without a warning, and `--version` names the commit the binary was built
//! from. (The Debian package that installs them is built, installed and run by .ci/run.)

use crate::util::can_run;
use std::path::Path;
use std::process::{Command, Output};

const NOTIFIO: &str = env!("CARGO_BIN_EXE_notifio");

fn notifio(args: &[&str]) -> Output {
    let out = Command::new(NOTIFIO).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "notifio {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// bash sources `notifio completions bash`, registers a completion for `notifio`, and that
/// completion offers the subcommands, a subcommand's own subcommands and the shells.
#[test]
fn bash_loads_the_completions_and_completes_subcommands() {
    if !can_run("bash", &["-c", "true"], "bash") {
        return;
    }
    // Completes the words given, the last one being typed, as bash does on Tab.
    let script = r#"
        source <("$1" completions bash) || exit 1
        complete -p notifio || exit 1
        fn=$(complete -p notifio | sed -E 's/.* -F ([^ ]+) .*/\1/')
        words() {
            COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
            COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
            "$fn" notifio "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            echo "${COMPREPLY[*]}"
        }
        words notifio ""
        words notifio service ""
        words notifio completions ""
        words notifio ch
    "#;
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", script, "bash", NOTIFIO])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert!(lines[0].starts_with("complete ") && lines[0].ends_with(" notifio"));
    let words = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let top = words(lines[1]);
    for sub in [
        "demo",
        "watch",
        "check",
        "status",
        "service",
        "completions",
        "man",
    ] {
        assert!(top.iter().any(|w| w == sub), "`{sub}` not offered: {top:?}");
    }
    let service = words(lines[2]);
    for sub in ["install", "uninstall", "status", "unit"] {
        assert!(service.iter().any(|w| w == sub), "{service:?}");
    }
    let shells = words(lines[3]);
    for shell in ["bash", "zsh", "fish", "powershell"] {
        assert!(shells.iter().any(|w| w == shell), "{shells:?}");
    }
    assert_eq!(
        words(lines[4]),
        ["check"],
        "`ch` completes to the one subcommand"
    );
}

/// `shell -n`-style parse of the script `notifio completions shell` prints.
fn parses(shell: &str, check: &[&str], package: &str) {
    if !can_run(shell, &["-c", "true"], package) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("notifio.{shell}"));
    std::fs::write(&file, notifio(&["completions", shell]).stdout).unwrap();
    let out = Command::new(shell).args(check).arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{shell} refuses the script: {stderr}");
    assert!(stderr.trim().is_empty(), "{shell} warned: {stderr}");
}

#[test]
fn zsh_parses_its_completions() {
    parses("zsh", &["-n"], "zsh");
}

#[test]
fn fish_parses_its_completions() {
    parses("fish", &["--no-execute"], "fish");
}

#[test]
fn every_shell_gets_a_script_and_an_unknown_one_is_a_usage_error() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef notifio"),
        ("fish", "complete -c notifio"),
        ("powershell", "Register-ArgumentCompleter"),
        ("elvish", "edit:completion:arg-completer[notifio]"),
    ] {
        let script = String::from_utf8(notifio(&["completions", shell]).stdout).unwrap();
        assert!(
            script.contains(marker),
            "{shell}: no `{marker}` in\n{script}"
        );
    }
    let out = Command::new(NOTIFIO)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// man-db's own rendering, with groff's warnings on (as Debian's lintian checks pages):
/// nothing on stderr. Returns the rendered text.
fn render(page: &Path) -> String {
    let check = Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z"])
        .arg(page)
        .env("LC_ALL", "C.UTF-8")
        .env("MANWIDTH", "80")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{}: {stderr}", page.display());
    assert!(stderr.trim().is_empty(), "{}: {stderr}", page.display());
    let shown = Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(page)
        .env("LC_ALL", "C.UTF-8")
        .env("MANWIDTH", "80")
        .output()
        .unwrap();
    assert!(shown.status.success());
    String::from_utf8(shown.stdout).unwrap()
}

/// `notifio man` renders with `man -l` and says what the CLI says, with the exit codes and
/// the version; `man --dir` writes it and a page per subcommand, and each of those renders
/// too.
#[test]
fn the_man_pages_render_with_man() {
    if !can_run("man", &["--version"], "man-db") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("notifio.1");
    std::fs::write(&page, notifio(&["man"]).stdout).unwrap();
    let text = render(&page);
    println!("{text}");
    for needle in [
        "NAME",
        "SYNOPSIS",
        "notifio-watch(1)",
        "notifio-completions(1)",
        "EXIT STATUS",
        "~/.config/notifio/notifio.toml",
        env!("CARGO_PKG_VERSION"),
    ] {
        assert!(text.contains(needle), "the page lacks `{needle}`");
    }

    let pages = dir.path().join("pages");
    let listed =
        String::from_utf8(notifio(&["man", "--dir", pages.to_str().unwrap()]).stdout).unwrap();
    let written: Vec<&Path> = listed.lines().map(Path::new).collect();
    assert!(written.len() > 10, "{listed}");
    assert_eq!(
        std::fs::read(pages.join("notifio.1")).unwrap(),
        std::fs::read(&page).unwrap(),
        "`man` prints the page `man --dir` writes"
    );
    for page in &written {
        assert!(
            page.is_file(),
            "{} was listed but not written",
            page.display()
        );
        render(page);
    }
    let check = render(&pages.join("notifio-check.1"));
    assert!(check.contains("--json"), "{check}");
}

/// `notifio --version` is `notifio VERSION (commit HASH)` with this checkout's HEAD when it
/// was built from git, and says `unknown commit` otherwise.
#[test]
fn version_names_the_commit_it_was_built_from() {
    let version = String::from_utf8(notifio(&["--version"]).stdout).unwrap();
    println!("{version}");
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let expected = match head {
        Some(head) => format!("commit {}", &head[..12]),
        None => {
            eprintln!("no git here: the binary says it does not know its commit");
            "unknown commit".to_owned()
        }
    };
    assert_eq!(
        version.trim(),
        format!("notifio {} ({expected})", env!("CARGO_PKG_VERSION"))
    );
}

/// Building the binary says nothing about the tests: the build script (compiled and run here
/// as cargo runs it, for a checkout without the real pages) prints no `cargo::warning`, so
/// `cargo run` shows a newcomer the demo and nothing else. What the test run skipped is said
/// by the test run (`tests/real_pages.rs`), and the script still hands it the directory.
#[test]
fn the_build_script_warns_about_nothing_when_the_real_pages_are_missing() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = dir.path().join("build-script");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let built = Command::new(rustc)
        .args(["--edition", "2021", "-o"])
        .arg(&script)
        .arg(manifest.join("build.rs"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let empty = dir.path().join("no-pages");
    std::fs::create_dir(&empty).unwrap();
    let out = Command::new(&script)
        .current_dir(manifest)
        .env("CARGO_MANIFEST_DIR", manifest)
        .env("NOTIFIO_REAL_PAGES", &empty)
        .env_remove("CI")
        .output()
        .unwrap();
    assert!(out.status.success());
    let said = String::from_utf8(out.stdout).unwrap();
    println!("{said}");
    let warnings: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("cargo::warning") || l.starts_with("cargo:warning"))
        .collect();
    assert!(warnings.is_empty(), "the build warns: {warnings:?}");
    assert!(
        said.lines()
            .any(|l| l.starts_with("cargo::rustc-env=NOTIFIO_REAL_PAGES_DIR=")),
        "the tests still learn where the pages were looked for"
    );
    assert!(
        !said.contains("cargo::rustc-cfg=real_pages"),
        "without the pages their tests are not turned on"
    );
}
