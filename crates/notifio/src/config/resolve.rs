//! Resolution against the machine: `~`, paths relative to the config file, the platform's data
//! and config directories, secrets from the environment, and the files the config names.
//!
//! [`check`] is the one start-up check of those files and secrets, run by `config::load` for
//! every command: a cookies file that is missing, a directory, binary, malformed, readable by
//! others or without the session's cookies, a password file readable by others, an SMTP user
//! without a password. Each is an error at the key that names it (exit 2), before anything
//! runs, so `status` and `check` refuse what `watch` would.
//!
//! Kept apart from validation (ripgrep's lowargs → hiargs) and passed in as an [`Environment`]
//! value, so tests can pin the home directory and the token without touching process-wide
//! state (`set_var` is `unsafe` in edition 2024 and races between test threads).

use super::ConfigError;
use directories::{BaseDirs, ProjectDirs};
use std::fmt;
use std::path::{Path, PathBuf};

/// The environment variable holding the dashboard's bearer token.
pub const DASHBOARD_TOKEN_ENV: &str = "NOTIFIO_DASHBOARD_TOKEN";
/// The environment variable naming the browser executable (overrides `[browser] executable`;
/// `none` = there is no browser on this machine).
pub const BROWSER_ENV: &str = "NOTIFIO_BROWSER";
/// The environment variable holding the SMTP password (read by the notifier, named here for the
/// config's hints).
pub const SMTP_PASSWORD_ENV: &str = "NOTIFIO_SMTP_PASSWORD";

/// What config resolution reads from the machine. [`Environment::from_process`] fills it from
/// the real one; tests build it by hand.
#[derive(Clone, Default)]
pub struct Environment {
    /// The user's home directory, for `~`.
    pub home: Option<PathBuf>,
    /// The platform data directory for notifio (`~/.local/share/notifio` on Linux), the
    /// default `state_dir`.
    pub data_dir: Option<PathBuf>,
    /// The platform config directory for notifio (`~/.config/notifio` on Linux): its `sites/`
    /// holds the user's profile files, beside the config's own `sites/`.
    pub config_dir: Option<PathBuf>,
    /// `NOTIFIO_DASHBOARD_TOKEN`, when set and not empty.
    pub dashboard_token: Option<String>,
    /// `NOTIFIO_BROWSER`, when set and not empty.
    pub browser: Option<String>,
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Environment")
            .field("home", &self.home)
            .field("data_dir", &self.data_dir)
            .field("config_dir", &self.config_dir)
            .field(
                "dashboard_token",
                &self.dashboard_token.as_ref().map(|_| "<redacted>"),
            )
            .field("browser", &self.browser)
            .finish()
    }
}

fn project_dirs() -> Option<ProjectDirs> {
    ProjectDirs::from("", "", "notifio")
}

impl Environment {
    /// The running process's home, data directory, `NOTIFIO_DASHBOARD_TOKEN` and
    /// `NOTIFIO_BROWSER`.
    #[must_use]
    pub fn from_process() -> Self {
        Self {
            home: BaseDirs::new().map(|b| b.home_dir().to_owned()),
            data_dir: project_dirs().map(|p| p.data_dir().to_owned()),
            config_dir: project_dirs().map(|p| p.config_dir().to_owned()),
            dashboard_token: std::env::var(DASHBOARD_TOKEN_ENV)
                .ok()
                .filter(|t| !t.trim().is_empty()),
            browser: std::env::var(BROWSER_ENV)
                .ok()
                .filter(|t| !t.trim().is_empty()),
        }
    }
}

/// Something the config names that only the machine can vouch for.
#[derive(Clone, Debug)]
pub(crate) enum Named {
    /// A site's cookies file, and the cookie names its searches' sessions need.
    Cookies {
        path: PathBuf,
        site: String,
        required: Vec<&'static str>,
    },
    /// The SMTP password file.
    PasswordFile(PathBuf),
    /// A user name in the SMTP URL, with no password file: the password must be in the
    /// environment.
    SmtpUser(String),
}

/// A [`Named`] check and where the config names it (a [`ConfigError`] without a message).
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) what: Named,
    pub(crate) at: ConfigError,
}

/// Runs every check, in file order; the first failure is the error, at its key.
pub(crate) fn check(pending: &[Pending]) -> Result<(), ConfigError> {
    for p in pending {
        let problem = match &p.what {
            Named::Cookies {
                path,
                site,
                required,
            } => match crate::fetch::cookies::load(path) {
                Err(e) => Some((e.to_string(), None)),
                Ok(jar) => {
                    let names = jar.names();
                    let missing: Vec<_> = required
                        .iter()
                        .filter(|c| !names.iter().any(|n| n == *c))
                        .collect();
                    (!missing.is_empty()).then(|| {
                        (
                            format!(
                                "the cookies file for {site} lacks {missing:?}, which a logged-in session has"
                            ),
                            Some("export it again while you are logged in to the site".to_owned()),
                        )
                    })
                }
            },
            Named::PasswordFile(path) => crate::secret::read_file(path)
                .err()
                .map(|e| (e.to_string(), None)),
            Named::SmtpUser(user) => std::env::var(SMTP_PASSWORD_ENV)
                .ok()
                .filter(|v| !v.is_empty())
                .is_none()
                .then(|| {
                    (
                        format!("the SMTP URL names user {user:?} but no password is set"),
                        Some(format!(
                            "set {SMTP_PASSWORD_ENV}, or email.password_file to a file only you can read"
                        )),
                    )
                }),
        };
        if let Some((message, hint)) = problem {
            return Err(ConfigError {
                message,
                hint,
                ..p.at.clone()
            });
        }
    }
    Ok(())
}

/// Where `notifio` looks for its config when `--config` is not given: `./notifio.toml` if it
/// exists, else `notifio.toml` in the platform config directory (`~/.config/notifio/` on Linux).
#[must_use]
pub fn default_path() -> PathBuf {
    let local = PathBuf::from("notifio.toml");
    if local.exists() {
        return local;
    }
    project_dirs().map_or(local, |p| p.config_dir().join("notifio.toml"))
}

/// The directory relative paths in the config file are resolved against: the file's own.
pub(crate) fn base_dir(config_path: &Path) -> PathBuf {
    let abs = std::path::absolute(config_path).unwrap_or_else(|_| config_path.to_owned());
    abs.parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

/// A path from the config: `~` and `~/…` expand to the home directory, absolute paths stay,
/// anything else is relative to `base` (the config file's directory).
///
/// # Errors
/// Empty text, `~user` forms, or `~` when there is no home directory; the message is for the
/// user.
pub(crate) fn resolve_path(raw: &str, base: &Path, env: &Environment) -> Result<PathBuf, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err("a path must not be empty".to_owned());
    }
    if let Some(rest) = raw.strip_prefix('~') {
        let rest = if rest.is_empty() {
            ""
        } else if let Some(r) = rest.strip_prefix('/').or_else(|| rest.strip_prefix('\\')) {
            r
        } else {
            return Err(format!(
                "`{raw}`: only `~` and `~/…` are expanded; write the full path"
            ));
        };
        let Some(home) = &env.home else {
            return Err(format!(
                "`{raw}` starts with `~` but there is no home directory; write the full path"
            ));
        };
        return Ok(if rest.is_empty() {
            home.clone()
        } else {
            home.join(rest)
        });
    }
    let p = Path::new(raw);
    Ok(if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment {
        Environment {
            home: Some(PathBuf::from("/home/ana")),
            data_dir: Some(PathBuf::from("/home/ana/.local/share/notifio")),
            config_dir: None,
            dashboard_token: Some("s3cret".into()),
            browser: None,
        }
    }

    #[test]
    fn tilde_relative_and_absolute_paths() {
        let base = Path::new("/etc/notifio");
        let r = |s| resolve_path(s, base, &env());
        assert_eq!(r("~"), Ok(PathBuf::from("/home/ana")));
        assert_eq!(r("~/c.txt"), Ok(PathBuf::from("/home/ana/c.txt")));
        assert_eq!(r("c.txt"), Ok(PathBuf::from("/etc/notifio/c.txt")));
        assert_eq!(r("./d/c.txt"), Ok(PathBuf::from("/etc/notifio/./d/c.txt")));
        assert_eq!(r("/var/c.txt"), Ok(PathBuf::from("/var/c.txt")));
        assert!(r("~bob/x").unwrap_err().contains("only `~` and `~/…`"));
        assert!(r(" ").unwrap_err().contains("empty"));
        let no_home = Environment::default();
        assert!(
            resolve_path("~/x", base, &no_home)
                .unwrap_err()
                .contains("no home directory")
        );
    }

    #[test]
    fn base_dir_is_the_config_files_directory() {
        assert_eq!(
            base_dir(Path::new("/etc/notifio/notifio.toml")),
            PathBuf::from("/etc/notifio")
        );
        // A bare file name resolves against the current directory, absolutely.
        assert!(base_dir(Path::new("notifio.toml")).is_absolute());
    }

    #[test]
    fn debug_never_shows_the_token() {
        let shown = format!("{:?}", env());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }
}
