//! The one error type of the config module, and the byte-offset → line:col conversion.
//!
//! Every config mistake is reported the way compilers do, `file:line:col: key: message`, so an
//! editor or terminal can jump to it; a hint on the next line says what to write instead.

use std::fmt;
use std::path::{Path, PathBuf};

/// A config file that cannot be used, and where.
///
/// Displays as `notifio.toml:12:11: `search[2].interval`: expected a duration like 30s, 2m, 1h`
/// followed by `  hint: …` on the next line when there is a hint. `line` and `col` are 1-based;
/// they are 0 when the problem is not at a place in the file (a missing file), and `key` is
/// empty when no key is involved. Messages never contain secret values.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    /// The config file, as the user named it.
    pub file: PathBuf,
    /// 1-based line, 0 when not in the file.
    pub line: usize,
    /// 1-based column in characters, 0 when not in the file.
    pub col: usize,
    /// The dotted key path, e.g. `search[2].interval`; empty when not about a key.
    pub key: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl ConfigError {
    /// An error that is about the file as a whole (cannot read it, cannot write it).
    pub(crate) fn file(file: &Path, message: impl Into<String>, hint: Option<String>) -> Self {
        Self {
            file: file.to_owned(),
            line: 0,
            col: 0,
            key: String::new(),
            message: message.into(),
            hint,
        }
    }

    /// An error at byte `offset` of `text` (the file's contents).
    pub(crate) fn at(
        file: &Path,
        text: &str,
        offset: usize,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        let (line, col) = line_col(text, offset);
        Self {
            file: file.to_owned(),
            line,
            col,
            key: key.into(),
            message: message.into(),
            hint: None,
        }
    }

    /// Adds a hint.
    #[must_use]
    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// A place in the config file (file, line, column, key), kept with a value whose problems can
/// only be found later, against the machine (a browser executable that is not installed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spot {
    /// The config file.
    pub file: PathBuf,
    /// 1-based line, 0 when not in the file (a value from the environment).
    pub line: usize,
    /// 1-based column, 0 when not in the file.
    pub col: usize,
    /// The dotted key path.
    pub key: String,
}

impl Spot {
    /// A key that is not written in the file (its default, or the environment variable named
    /// in `key`).
    #[must_use]
    pub fn unwritten(file: &Path, key: &str) -> Self {
        Self {
            file: file.to_owned(),
            line: 0,
            col: 0,
            key: key.to_owned(),
        }
    }

    /// The error to report about the value at this place.
    #[must_use]
    pub fn error(&self, message: impl Into<String>, hint: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line: self.line,
            col: self.col,
            key: self.key.clone(),
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
}

impl From<ConfigError> for Spot {
    fn from(e: ConfigError) -> Self {
        Self {
            file: e.file,
            line: e.line,
            col: e.col,
            key: e.key,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.col)?;
        }
        f.write_str(": ")?;
        if !self.key.is_empty() {
            write!(f, "`{}`: ", self.key)?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// 1-based (line, column) of a byte offset, the column counted in characters.
///
/// Hand-written because toml's own error `Display` renders a multi-line snippet, not the single
/// `file:line:col` prefix that editors and terminals jump to, and toml_edit hands us only byte
/// spans. Columns count characters rather than bytes so an `ü` earlier on the line does not push
/// the caret to the right. An offset past the end (or inside a multi-byte character) is clamped.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_one_based_line_and_char_column() {
        let text = "a = 1\nbü = \"x\"\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 4), (1, 5));
        assert_eq!(line_col(text, 6), (2, 1));
        // "bü = " is 6 bytes but 5 characters: the value starts at column 6.
        let value = text.find('"').unwrap();
        assert_eq!(line_col(text, value), (2, 6));
        // Past the end and inside a character are clamped, never a panic.
        assert_eq!(line_col(text, 999), (3, 1));
        assert_eq!(line_col(text, 8), (2, 2));
    }

    #[test]
    fn display_has_position_key_and_hint() {
        let e = ConfigError::at(Path::new("n.toml"), "x\ny = 1", 2, "y", "bad")
            .with_hint("write it well");
        assert_eq!(e.to_string(), "n.toml:2:1: `y`: bad\n  hint: write it well");
        let io = ConfigError::file(Path::new("n.toml"), "not found", None);
        assert_eq!(io.to_string(), "n.toml: not found");
    }
}
