//! `notifio service install | uninstall | status`: start `notifio watch` at login and restart
//! it when it fails, with the user's own service manager (a systemd user unit on Linux, a
//! launchd agent on macOS). No root, nothing system-wide.
//!
//! The files are written from text built here ([`unit_text`], [`plist_text`]), so what they
//! say is tested on any machine (`systemd-analyze verify`, a plist parser); the commands then
//! run `systemctl --user` or `launchctl` and print exactly what they wrote and ran, and how to
//! undo it. The watcher is started with the config file's absolute path, so it does not depend
//! on the directory the service manager starts it in.
//!
//! A package installs one unit for every user instead ([`packaged_unit_text`], printed by
//! `notifio service unit`): it names no config file, so each user's `notifio watch` finds
//! their own by the default lookup, and each user enables it with `systemctl --user`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The systemd user unit's name.
pub const UNIT: &str = "notifio.service";
/// The launchd agent's label (and its plist's file name, with `.plist`).
pub const LABEL: &str = "local.notifio.watch";

/// Why a service command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A file could not be written or removed.
    #[error("{what} {}: {source}", path.display())]
    File {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The service manager refused or could not be run.
    #[error("`{command}` failed: {why}")]
    Manager {
        /// The command line.
        command: String,
        /// Its error output, or why it could not run.
        why: String,
    },
    /// No home directory (or config directory) to put the unit in.
    #[error("cannot find your home directory to put the service file in")]
    NoHome,
    /// This platform has no service manager we support.
    #[error("`notifio service` supports systemd (Linux) and launchd (macOS) only")]
    Unsupported,
}

/// How a word of an `ExecStart=` line is read (systemd.service(5), "Command lines"):
/// specifiers (`%`) are resolved in every word, but `$` variables only in the arguments. The
/// program's path is taken as written, so a `$$` there would stay `$$` and name a file that is
/// not there (`systemd-analyze verify`: "… is not executable").
#[derive(Clone, Copy, PartialEq, Eq)]
enum Word {
    Program,
    Argument,
}

/// Quotes one word for a systemd `ExecStart=` line: in double quotes, with `\` and `"`
/// escaped, `%` doubled (specifiers) and, in an argument, `$` doubled (variables).
fn systemd_quote(arg: &str, word: Word) -> String {
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    for c in arg.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if word == Word::Argument => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The systemd user unit that runs `exe watch --config config`.
#[must_use]
pub fn unit_text(exe: &Path, config: &Path) -> String {
    unit(
        exe,
        &["watch", "--config", &config.display().to_string()],
        "# Written by `notifio service install`; `notifio service uninstall` removes it.",
    )
}

/// The systemd user unit a package installs (`/usr/lib/systemd/user/notifio.service`, printed
/// by `notifio service unit`): `exe watch` with the default config lookup. A user manager
/// starts it in the user's home, so that is `~/notifio.toml`, else
/// `~/.config/notifio/notifio.toml`; each user enables it for themselves.
#[must_use]
pub fn packaged_unit_text(exe: &Path) -> String {
    unit(
        exe,
        &["watch"],
        "# `notifio watch` at login, for each user who runs `systemctl --user enable --now notifio`.\n\
         # It reads ~/notifio.toml, else ~/.config/notifio/notifio.toml (`notifio init PATH` writes one).",
    )
}

/// A user unit that runs `exe args…`, restarted when it fails, after the `#` lines of `header`.
fn unit(exe: &Path, args: &[&str], header: &str) -> String {
    let mut exec = systemd_quote(&exe.display().to_string(), Word::Program);
    for arg in args {
        exec.push(' ');
        exec.push_str(&systemd_quote(arg, Word::Argument));
    }
    let mut s = String::new();
    let _ = writeln!(s, "{header}");
    s.push_str("[Unit]\n");
    s.push_str("Description=Notifio: tells you about new rental listings\n");
    s.push_str("After=network-online.target\n\n");
    s.push_str("[Service]\n");
    s.push_str("Type=simple\n");
    let _ = writeln!(s, "ExecStart={exec}");
    // The config reload is also what SIGHUP does (`systemctl --user reload notifio`).
    s.push_str("ExecReload=/bin/kill -HUP $MAINPID\n");
    s.push_str("Restart=on-failure\n");
    s.push_str("RestartSec=10\n\n");
    s.push_str("[Install]\n");
    s.push_str("WantedBy=default.target\n");
    s
}

/// Escapes text for an XML element's content.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The launchd agent that runs `exe watch --config config` at login, again when it fails
/// (not after a clean exit), with its output in `log`.
///
/// Written by hand rather than with the `plist` crate: it is twenty lines of fixed XML, and a
/// Linux build should not carry a plist writer for macOS; the tests read it back with a real
/// parser.
#[must_use]
pub fn plist_text(exe: &Path, config: &Path, log: &Path) -> String {
    let args = [
        exe.display().to_string(),
        "watch".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    let mut s = String::new();
    s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s.push_str("<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n");
    s.push_str(
        "<!-- Written by `notifio service install`; `notifio service uninstall` removes it. -->\n",
    );
    s.push_str("<plist version=\"1.0\">\n<dict>\n");
    let _ = writeln!(s, "  <key>Label</key>\n  <string>{LABEL}</string>");
    s.push_str("  <key>ProgramArguments</key>\n  <array>\n");
    for a in &args {
        let _ = writeln!(s, "    <string>{}</string>", xml(a));
    }
    s.push_str("  </array>\n");
    s.push_str("  <key>RunAtLoad</key>\n  <true/>\n");
    s.push_str("  <key>KeepAlive</key>\n  <dict>\n    <key>SuccessfulExit</key>\n    <false/>\n  </dict>\n");
    s.push_str("  <key>ThrottleInterval</key>\n  <integer>10</integer>\n");
    s.push_str("  <key>ProcessType</key>\n  <string>Background</string>\n");
    let log = xml(&log.display().to_string());
    let _ = writeln!(s, "  <key>StandardOutPath</key>\n  <string>{log}</string>");
    let _ = writeln!(
        s,
        "  <key>StandardErrorPath</key>\n  <string>{log}</string>"
    );
    s.push_str("</dict>\n</plist>\n");
    s
}

/// Which service manager, and where its file goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Manager {
    /// A systemd user unit in `dir` (`~/.config/systemd/user`).
    Systemd {
        /// The unit directory.
        dir: PathBuf,
    },
    /// A launchd agent in `dir` (`~/Library/LaunchAgents`), logging to `log`.
    Launchd {
        /// The agents directory.
        dir: PathBuf,
        /// The log file.
        log: PathBuf,
    },
}

impl Manager {
    /// This machine's: `$XDG_CONFIG_HOME/systemd/user` (else `~/.config/systemd/user`) on
    /// Linux, `~/Library/LaunchAgents` on macOS.
    ///
    /// # Errors
    /// No home directory; another platform.
    pub fn here() -> Result<Self, ServiceError> {
        let home = directories::BaseDirs::new().ok_or(ServiceError::NoHome)?;
        if cfg!(target_os = "macos") {
            let h = home.home_dir();
            return Ok(Self::Launchd {
                dir: h.join("Library/LaunchAgents"),
                log: h.join("Library/Logs/notifio.log"),
            });
        }
        if cfg!(target_os = "linux") {
            let config = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| home.home_dir().join(".config"));
            return Ok(Self::Systemd {
                dir: config.join("systemd/user"),
            });
        }
        Err(ServiceError::Unsupported)
    }

    /// The service file.
    #[must_use]
    pub fn file(&self) -> PathBuf {
        match self {
            Self::Systemd { dir } => dir.join(UNIT),
            Self::Launchd { dir, .. } => dir.join(format!("{LABEL}.plist")),
        }
    }

    /// The file's text for `exe` and `config`.
    #[must_use]
    pub fn text(&self, exe: &Path, config: &Path) -> String {
        match self {
            Self::Systemd { .. } => unit_text(exe, config),
            Self::Launchd { log, .. } => plist_text(exe, config, log),
        }
    }

    fn gui_domain() -> String {
        format!("gui/{}", uid())
    }

    fn enable(&self) -> Vec<Vec<String>> {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match self {
            Self::Systemd { .. } => vec![
                v(&["systemctl", "--user", "daemon-reload"]),
                v(&["systemctl", "--user", "enable", "--now", UNIT]),
            ],
            Self::Launchd { .. } => vec![vec![
                "launchctl".into(),
                "bootstrap".into(),
                Self::gui_domain(),
                self.file().display().to_string(),
            ]],
        }
    }

    fn disable(&self) -> Vec<Vec<String>> {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match self {
            Self::Systemd { .. } => vec![v(&["systemctl", "--user", "disable", "--now", UNIT])],
            Self::Launchd { .. } => vec![vec![
                "launchctl".into(),
                "bootout".into(),
                format!("{}/{LABEL}", Self::gui_domain()),
            ]],
        }
    }

    fn after_disable(&self) -> Vec<Vec<String>> {
        match self {
            Self::Systemd { .. } => vec![vec![
                "systemctl".into(),
                "--user".into(),
                "daemon-reload".into(),
            ]],
            Self::Launchd { .. } => Vec::new(),
        }
    }

    fn query(&self) -> Vec<Vec<String>> {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match self {
            Self::Systemd { .. } => vec![
                v(&["systemctl", "--user", "is-enabled", UNIT]),
                v(&["systemctl", "--user", "is-active", UNIT]),
            ],
            Self::Launchd { .. } => vec![vec![
                "launchctl".into(),
                "print".into(),
                format!("{}/{LABEL}", Self::gui_domain()),
            ]],
        }
    }
}

fn uid() -> u32 {
    #[cfg(unix)]
    {
        rustix::process::getuid().as_raw()
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// Runs one command, returning its output or why it failed.
fn run(cmd: &[String]) -> Result<String, ServiceError> {
    let line = cmd.join(" ");
    let Some((program, args)) = cmd.split_first() else {
        return Ok(String::new());
    };
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| ServiceError::Manager {
            command: line.clone(),
            why: e.to_string(),
        })?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() {
        Ok(text)
    } else {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        Err(ServiceError::Manager {
            command: line,
            why: if err.is_empty() { text } else { err },
        })
    }
}

/// `notifio service install`: writes the file for `exe watch --config config` (both absolute)
/// and enables it. Returns what to print.
///
/// # Errors
/// The file cannot be written, or the service manager refuses (the file stays written, and the
/// message says how to enable it by hand).
pub fn install(manager: &Manager, exe: &Path, config: &Path) -> Result<String, ServiceError> {
    let file = manager.file();
    let text = manager.text(exe, config);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|source| ServiceError::File {
            what: "cannot create the directory",
            path: dir.to_owned(),
            source,
        })?;
    }
    std::fs::write(&file, &text).map_err(|source| ServiceError::File {
        what: "cannot write",
        path: file.clone(),
        source,
    })?;
    let mut out = format!("wrote {}:\n\n{text}\n", file.display());
    for cmd in manager.enable() {
        let line = cmd.join(" ");
        match run(&cmd) {
            Ok(_) => {
                let _ = writeln!(out, "ran: {line}");
            }
            Err(e) => {
                let _ = writeln!(
                    out,
                    "could not run `{line}` ({e}); the file is in place: run it yourself in your desktop session"
                );
                return Err(ServiceError::Manager {
                    command: line,
                    why: format!("{e}\n{out}"),
                });
            }
        }
    }
    let _ = writeln!(
        out,
        "\nnotifio watch now runs at login (and again if it fails). To undo: notifio service uninstall"
    );
    if let Manager::Systemd { .. } = manager {
        let _ = writeln!(
            out,
            "(or by hand: systemctl --user disable --now {UNIT} && rm {})",
            file.display()
        );
    } else {
        let _ = writeln!(
            out,
            "(or by hand: launchctl bootout {}/{LABEL} && rm {})",
            Manager::gui_domain(),
            file.display()
        );
    }
    Ok(out)
}

/// `notifio service uninstall`: disables the service and removes its file. Returns what to
/// print.
///
/// # Errors
/// The file cannot be removed. A service manager that refuses to disable (not running, not
/// loaded) is reported in the output, not an error: the file goes all the same.
pub fn uninstall(manager: &Manager) -> Result<String, ServiceError> {
    let file = manager.file();
    if !file.exists() {
        return Ok(format!(
            "no notifio service is installed ({} does not exist)\n",
            file.display()
        ));
    }
    let mut out = String::new();
    for cmd in manager.disable() {
        let line = cmd.join(" ");
        match run(&cmd) {
            Ok(_) => {
                let _ = writeln!(out, "ran: {line}");
            }
            Err(e) => {
                let _ = writeln!(out, "note: {e}");
            }
        }
    }
    std::fs::remove_file(&file).map_err(|source| ServiceError::File {
        what: "cannot remove",
        path: file.clone(),
        source,
    })?;
    let _ = writeln!(out, "removed {}", file.display());
    for cmd in manager.after_disable() {
        if run(&cmd).is_ok() {
            let _ = writeln!(out, "ran: {}", cmd.join(" "));
        }
    }
    let _ = writeln!(
        out,
        "notifio no longer starts at login. To install it again: notifio service install"
    );
    Ok(out)
}

/// `notifio service status`: whether the file is there, what it runs, and what the service
/// manager says.
#[must_use]
pub fn status(manager: &Manager) -> String {
    let file = manager.file();
    let mut out = String::new();
    match std::fs::read_to_string(&file) {
        Err(_) => {
            let _ = writeln!(
                out,
                "not installed ({} does not exist): notifio service install",
                file.display()
            );
            return out;
        }
        Ok(text) => {
            let _ = writeln!(out, "installed: {}", file.display());
            if let Some(exec) = text
                .lines()
                .find(|l| l.starts_with("ExecStart="))
                .or_else(|| text.lines().find(|l| l.contains("--config")))
            {
                let _ = writeln!(out, "  {}", exec.trim());
            }
        }
    }
    for cmd in manager.query() {
        let line = cmd.join(" ");
        match run(&cmd) {
            Ok(said) => {
                let _ = writeln!(out, "{line}: {}", first_line(&said));
            }
            Err(ServiceError::Manager { why, .. }) => {
                let _ = writeln!(out, "{line}: {}", first_line(&why));
            }
            Err(e) => {
                let _ = writeln!(out, "{line}: {e}");
            }
        }
    }
    out
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_for_systemd() {
        assert_eq!(
            systemd_quote("/opt/notifio", Word::Program),
            "\"/opt/notifio\""
        );
        assert_eq!(
            systemd_quote("/home/a b/100%/$x/\"q\"\\", Word::Argument),
            "\"/home/a b/100%%/$$x/\\\"q\\\"\\\\\""
        );
        // The program's path is not expanded: its `$` stays one `$`.
        assert_eq!(
            systemd_quote("/home/a$b/100%/notifio", Word::Program),
            "\"/home/a$b/100%%/notifio\""
        );
    }

    #[test]
    fn the_unit_runs_watch_with_the_absolute_config_and_restarts_on_failure() {
        let u = unit_text(
            Path::new("/usr/bin/notifio"),
            Path::new("/home/ana/notifio.toml"),
        );
        assert!(u.contains(
            "ExecStart=\"/usr/bin/notifio\" \"watch\" \"--config\" \"/home/ana/notifio.toml\"\n"
        ));
        assert!(u.contains("Restart=on-failure\n"));
        assert!(u.contains("WantedBy=default.target\n"));
    }

    #[test]
    fn the_packaged_unit_runs_watch_with_the_default_config_lookup() {
        let u = packaged_unit_text(Path::new("/usr/bin/notifio"));
        assert!(
            u.contains("ExecStart=\"/usr/bin/notifio\" \"watch\"\n"),
            "{u}"
        );
        assert!(!u.contains("--config"), "{u}");
        assert!(u.contains("Restart=on-failure\n"));
    }

    #[test]
    fn plist_text_escapes_xml() {
        let p = plist_text(
            Path::new("/a&b/notifio"),
            Path::new("/c<d>.toml"),
            Path::new("/l"),
        );
        assert!(p.contains("<string>/a&amp;b/notifio</string>"));
        assert!(p.contains("<string>/c&lt;d&gt;.toml</string>"));
    }
}
