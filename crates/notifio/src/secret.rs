//! Secrets: a value that never shows ([`Secret`]), and where one comes from
//! ([`SecretSetting`]): the environment, a file only its owner can read, or the config itself,
//! in that order. The environment wins so that a config file that gets shared or committed can
//! hold none; a file that group or others can read is refused. The value lives in a [`Secret`]
//! from then on: the config only *locates* secrets, the channels read them when they are built.

use std::fmt;
use std::path::{Path, PathBuf};

/// A secret value (a password, a token, a webhook URL). `Debug` prints `***`; only the
/// transport sees the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the transport that sends it (and tests). Never log it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the secret in `text` (defence in depth for messages that
    /// come back from a server or a library).
    #[must_use]
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.0, "***")
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A file holding a secret cannot be used. Messages name the file, never its contents.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Group or others can read it.
    #[error(
        "password file {path} is readable by group or others (mode {mode:04o}); run `chmod 600 {path}`",
        path = path.display()
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// It cannot be read.
    #[error("cannot read password file {path}: {source}", path = path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Reads a secret from a file, refusing one that group or others can read; a trailing newline
/// is not part of it.
///
/// # Errors
/// The file cannot be read, or its mode lets group or others read it.
pub fn read_file(path: &Path) -> Result<Secret, FileError> {
    let unreadable = |source| FileError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(unreadable)?
            .permissions()
            .mode()
            & 0o7777;
        if mode & 0o077 != 0 {
            return Err(FileError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    Ok(Secret::new(text.trim_end_matches(['\r', '\n'])))
}

/// A secret that cannot be read: the message names the config key, never the value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SecretError(String);

/// A secret as configured, not yet read.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretSetting {
    /// The config key it belongs to (`notify.telegram.token`), for messages.
    pub key: String,
    /// The environment variable read first (`NOTIFIO_TELEGRAM_TOKEN`), if any.
    pub env: Option<String>,
    /// A file holding it (mode 0600 or stricter), read next: the `…_file` key.
    pub file: Option<PathBuf>,
    /// The value written in the config, or taken from an Apprise URL.
    pub value: Option<Secret>,
}

// Manual Debug: where the secret comes from, never the value (of a URL, its origin only).
impl fmt::Debug for SecretSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = self.value.as_ref().map(|v| {
            url::Url::parse(v.expose())
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .map_or_else(
                    || "***".to_owned(),
                    |u| format!("{}/…", u.origin().ascii_serialization()),
                )
        });
        f.debug_struct("SecretSetting")
            .field("key", &self.key)
            .field("env", &self.env)
            .field("file", &self.file)
            .field("value", &shown)
            .finish()
    }
}

impl SecretSetting {
    /// A secret written inline (in the config or an Apprise URL).
    #[must_use]
    pub fn inline(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            env: None,
            file: None,
            value: Some(Secret::new(value)),
        }
    }

    /// Reads the secret: the environment variable (looked up through `env`), else the file,
    /// else the inline value.
    ///
    /// # Errors
    /// None of them is set, the file cannot be read, or group or others can read it. The
    /// message names the key and never the value.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Secret, SecretError> {
        if let Some(v) = self.env.as_deref().and_then(env) {
            return Ok(Secret::new(v.trim()));
        }
        if let Some(path) = &self.file {
            return read_file(path).map_err(|e| {
                SecretError(match e {
                    FileError::Exposed { mode, .. } => format!(
                        "`{}_file`: {} is readable by group or others (mode {mode:04o}); run `chmod 600 {}`",
                        self.key,
                        path.display(),
                        path.display()
                    ),
                    other => format!("`{}_file`: {other}", self.key),
                })
            });
        }
        if let Some(v) = &self.value {
            return Ok(v.clone());
        }
        let env_hint = self
            .env
            .as_deref()
            .map(|e| format!(", `{}_file` or {e}", self.key))
            .unwrap_or_default();
        Err(SecretError(format!(
            "`{}` is not set: give it in the config{env_hint}",
            self.key
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_wins_then_file_then_inline_and_debug_hides_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tok");
        std::fs::write(&file, "from-file\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let mut s = SecretSetting {
            key: "notify.telegram.token".into(),
            env: Some("NOTIFIO_TELEGRAM_TOKEN".into()),
            file: Some(file.clone()),
            value: Some(Secret::new("inline-value")),
        };
        let env = |k: &str| (k == "NOTIFIO_TELEGRAM_TOKEN").then(|| "from-env".to_owned());
        let none = |_: &str| None;
        assert_eq!(s.resolve(&env).unwrap().expose(), "from-env");
        assert_eq!(s.resolve(&none).unwrap().expose(), "from-file");
        s.file = None;
        assert_eq!(s.resolve(&none).unwrap().expose(), "inline-value");
        assert!(!format!("{s:?}").contains("inline-value"));
        s.value = None;
        let err = s.resolve(&none).unwrap_err().to_string();
        assert!(err.contains("NOTIFIO_TELEGRAM_TOKEN"), "{err}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            s.file = Some(file);
            let err = s.resolve(&none).unwrap_err().to_string();
            assert!(
                err.contains("chmod 600") && !err.contains("from-file"),
                "{err}"
            );
        }
    }
}
