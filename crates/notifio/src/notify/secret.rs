//! Where a channel's secret (a bot token, a webhook URL) comes from: the environment, a file
//! only its owner can read, or the config itself, in that order. The environment wins so that a
//! config file that gets shared or committed can hold none; a file that group or others can read
//! is refused, like `email.password_file`. The value lives in a [`Secret`] from then on.

use super::{NotifyError, Secret, email};
use std::fmt;
use std::path::PathBuf;

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
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Secret, NotifyError> {
        if let Some(v) = self.env.as_deref().and_then(env) {
            return Ok(Secret::new(v.trim()));
        }
        if let Some(path) = &self.file {
            return email::read_password_file(path).map_err(|e| {
                NotifyError::Channel(match e {
                    email::EmailError::PasswordFileExposed { mode, .. } => format!(
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
        Err(NotifyError::Channel(format!(
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
