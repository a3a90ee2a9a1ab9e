//! `notifio service`: the systemd user unit passes the real `systemd-analyze verify` (Debian's
//! `systemd` package), the launchd agent is read back by a real plist parser, and the
//! commands write, enable, report and remove what they say. The service manager itself cannot
//! run here (no user session in CI): `systemctl` is a script on PATH that records what it was
//! asked, which is what the commands' output is checked against.

use notifio::service::{self, LABEL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NOTIFIO: &str = env!("CARGO_BIN_EXE_notifio");
const ANALYZE: &str = "/usr/bin/systemd-analyze";

fn analyze_missing() -> bool {
    if Path::new(ANALYZE).exists() {
        return false;
    }
    let msg = "systemd-analyze is missing: apt-get install systemd";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
    eprintln!("SKIPPED: {msg}");
    true
}

/// `systemd-analyze --user verify` on `unit`, with a runtime directory of its own.
fn verify(unit: &Path) -> Output {
    let runtime = tempfile::tempdir().unwrap();
    Command::new(ANALYZE)
        .args(["--user", "verify"])
        .arg(unit)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .unwrap()
}

/// The unit that runs `exe` with `config`, written in `dir`; `systemd-analyze verify` accepts
/// it without a word.
fn verified_unit(dir: &Path, exe: &Path, config: &Path) -> String {
    let unit = dir.join("notifio.service");
    let text = service::unit_text(exe, config);
    std::fs::write(&unit, &text).unwrap();
    let out = verify(&unit);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.trim().is_empty(), "systemd-analyze warned: {stderr}");
    text
}

#[test]
fn the_user_unit_passes_systemd_analyze_verify_even_with_awkward_paths() {
    if analyze_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("my configs/100% \"mine\"/notifio.toml");
    let text = verified_unit(dir.path(), Path::new(NOTIFIO), &config);

    // The check has teeth: a unit systemd cannot use fails it.
    let bad = dir.path().join("bad.service");
    std::fs::write(&bad, text.replace(NOTIFIO, "/nonexistent/notifio")).unwrap();
    assert!(!verify(&bad).status.success());
    std::fs::write(&bad, text.replace("on-failure", "sometimes")).unwrap();
    assert!(
        !String::from_utf8_lossy(&verify(&bad).stderr)
            .trim()
            .is_empty()
    );
}

/// A `$` (or a `%`) in the binary's own path: systemd reads the program's path without
/// expanding variables, so the unit must name it with one `$`, or the service cannot start.
#[test]
fn a_dollar_in_the_binarys_path_still_names_the_binary() {
    if analyze_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("apps $HOME 100%");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("notifio");
    std::os::unix::fs::symlink(NOTIFIO, &exe).unwrap();
    let config = dir.path().join("conf $x/notifio.toml");
    let text = verified_unit(dir.path(), &exe, &config);
    // The argument's `$` is still doubled: systemd turns `$$` back into `$` there.
    assert!(text.contains("conf $$x/notifio.toml\"\n"), "{text}");
}

/// `notifio service unit` prints the unit a package installs: `notifio watch` with the default
/// config lookup, for the binary named; with `--config`, that file, made absolute. Both pass
/// `systemd-analyze verify`.
#[test]
fn service_unit_prints_a_unit_systemd_accepts() {
    if analyze_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let print = |args: &[&str]| {
        let out = Command::new(NOTIFIO)
            .args(["service", "unit", "--exe", NOTIFIO])
            .args(args)
            .current_dir(dir.path())
            .env_remove("NOTIFIO_CONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let unit = dir.path().join("notifio.service");
        std::fs::write(&unit, &text).unwrap();
        let verified = verify(&unit);
        let stderr = String::from_utf8_lossy(&verified.stderr);
        assert!(
            verified.status.success() && stderr.trim().is_empty(),
            "{stderr}\n{text}"
        );
        text
    };
    let packaged = print(&[]);
    println!("{packaged}");
    assert!(
        packaged.contains(&format!("ExecStart=\"{NOTIFIO}\" \"watch\"\n")),
        "{packaged}"
    );
    assert!(packaged.contains("systemctl --user enable --now notifio"));
    let named = print(&["--config", "mine.toml"]);
    let absolute = std::path::absolute(dir.path().join("mine.toml")).unwrap();
    assert!(
        named.contains(&format!(
            "\"watch\" \"--config\" \"{}\"\n",
            absolute.display()
        )),
        "{named}"
    );
}

#[test]
fn the_launchd_agent_is_a_plist_that_runs_watch_at_login_and_after_a_failure() {
    let config = Path::new("/Users/ana/Notifio & co/<notifio>.toml");
    let log = Path::new("/Users/ana/Library/Logs/notifio.log");
    let text = service::plist_text(Path::new("/opt/notifio/bin/notifio"), config, log);
    let v =
        plist::Value::from_reader_xml(text.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let d = v.as_dictionary().unwrap();
    assert_eq!(
        d.get("Label").and_then(plist::Value::as_string),
        Some(LABEL)
    );
    let args: Vec<&str> = d
        .get("ProgramArguments")
        .and_then(plist::Value::as_array)
        .unwrap()
        .iter()
        .filter_map(plist::Value::as_string)
        .collect();
    assert_eq!(
        args,
        [
            "/opt/notifio/bin/notifio",
            "watch",
            "--config",
            "/Users/ana/Notifio & co/<notifio>.toml"
        ]
    );
    assert_eq!(
        d.get("RunAtLoad").and_then(plist::Value::as_boolean),
        Some(true)
    );
    let keep = d
        .get("KeepAlive")
        .and_then(plist::Value::as_dictionary)
        .unwrap();
    assert_eq!(
        keep.get("SuccessfulExit")
            .and_then(plist::Value::as_boolean),
        Some(false),
        "restarted after a failure, not after a clean exit"
    );
    assert_eq!(
        d.get("StandardErrorPath").and_then(plist::Value::as_string),
        Some("/Users/ana/Library/Logs/notifio.log")
    );
}

/// A `systemctl` that records each call (one line of arguments) and says what `is-enabled` /
/// `is-active` would.
fn fake_systemctl(bin: &Path, log: &Path) {
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {:?}\ncase \"$2\" in is-enabled) echo enabled;; is-active) echo active;; esac\nexit 0\n",
        log.display().to_string()
    );
    let path = bin.join("systemctl");
    std::fs::write(&path, script).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn notifio(home: &Path, path: &str, args: &[&str]) -> Output {
    Command::new(NOTIFIO)
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("PATH", path)
        .env_remove("NOTIFIO_CONFIG")
        .output()
        .unwrap()
}

fn config_in(dir: &Path) -> PathBuf {
    let path = dir.join("notifio.toml");
    std::fs::write(
        &path,
        format!(
            "[watch]\nstate_dir = {:?}\ndashboard = false\n\n[[search]]\nname = \"Berlin\"\nurl = \"https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten\"\n",
            dir.join("state").display().to_string()
        ),
    )
    .unwrap();
    path
}

#[cfg(target_os = "linux")]
#[test]
fn install_status_and_uninstall_say_what_they_did() {
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = home.path().join("systemctl.log");
    fake_systemctl(&bin, &calls);
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let config = config_in(home.path());
    let unit = home.path().join(".config/systemd/user/notifio.service");

    // A relative --config is written as an absolute path.
    let out = Command::new(NOTIFIO)
        .args(["service", "install", "--config", "notifio.toml"])
        .current_dir(home.path())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("PATH", &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&unit).unwrap();
    let absolute = std::fs::canonicalize(&config).unwrap();
    assert!(
        text.contains(&format!("\"--config\" \"{}\"", absolute.display())),
        "{text}"
    );
    assert!(
        stdout.contains(&format!("wrote {}", unit.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&text),
        "the output shows what was written: {stdout}"
    );
    assert!(
        stdout.contains("ran: systemctl --user enable --now notifio.service"),
        "{stdout}"
    );
    assert!(
        stdout.contains("To undo: notifio service uninstall"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap(),
        "--user daemon-reload\n--user enable --now notifio.service\n"
    );
    if !analyze_missing() {
        let v = verify(&unit);
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    }

    let out = notifio(home.path(), &path, &["service", "status"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("installed: {}", unit.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains("is-enabled notifio.service: enabled"),
        "{stdout}"
    );
    assert!(
        stdout.contains("is-active notifio.service: active"),
        "{stdout}"
    );

    let out = notifio(home.path(), &path, &["service", "uninstall"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("ran: systemctl --user disable --now notifio.service"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("removed {}", unit.display())),
        "{stdout}"
    );
    assert!(!unit.exists());
    let out = notifio(home.path(), &path, &["service", "status"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("not installed"));
}

#[cfg(target_os = "linux")]
#[test]
fn without_a_service_manager_the_unit_is_written_and_the_command_says_what_to_run() {
    let home = tempfile::tempdir().unwrap();
    let empty = home.path().join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let config = config_in(home.path());
    let out = notifio(
        home.path(),
        &empty.display().to_string(),
        &[
            "service",
            "install",
            "--config",
            &config.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("systemctl --user daemon-reload"),
        "{stderr}"
    );
    assert!(stderr.contains("run it yourself"), "{stderr}");
    assert!(
        home.path()
            .join(".config/systemd/user/notifio.service")
            .exists()
    );
    // A config that does not load is refused before anything is written.
    let bad = home.path().join("bad.toml");
    std::fs::write(&bad, "[[search]]\nname = 1\n").unwrap();
    let other = tempfile::tempdir().unwrap();
    let out = notifio(
        other.path(),
        "/usr/bin:/bin",
        &["service", "install", "--config", &bad.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !other
            .path()
            .join(".config/systemd/user/notifio.service")
            .exists()
    );
}
