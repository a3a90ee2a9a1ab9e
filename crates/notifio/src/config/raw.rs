//! The spanned view of a config file: TOML parsed by toml_edit, so every key and value keeps the
//! byte span it came from, walked by a small cursor that knows the dotted key path.
//!
//! Why not `#[derive(Deserialize)]` with `Spanned<T>` and `deny_unknown_fields`: serde's errors
//! carry neither the key path (`search[2].interval`) nor the unknown key's name except inside
//! message text, keys that take two shapes (`dashboard = "addr" | false`, `to = "a" | ["a", "b"]`,
//! `listing = "json-ld" | {…}`) need hand-written `Deserialize` impls anyway, and implicit tables
//! have no span to give `Spanned`. Walking the document directly keeps every error at its place.

use super::duration::{DURATION_EXPECTED, duration_hint, parse_duration};
use super::error::ConfigError;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;
use toml_edit::{Item, Key, TableLike, Value};

/// The file being read: its name (for messages) and text (for line:col).
#[derive(Clone, Copy)]
pub(crate) struct Src<'a> {
    pub(crate) file: &'a Path,
    pub(crate) text: &'a str,
}

impl Src<'_> {
    /// An error at `span` (or at the start of the file when there is none).
    pub(crate) fn err(
        &self,
        span: Option<Range<usize>>,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        let offset = span.map_or(0, |s| s.start);
        ConfigError::at(self.file, self.text, offset, key, message)
    }
}

/// One node of the document: a value, a table (header or inline) or an array of tables.
#[derive(Clone, Copy)]
enum Node<'a> {
    Value(&'a Value),
    Table(&'a dyn TableLike),
    Tables(&'a toml_edit::ArrayOfTables),
}

impl<'a> Node<'a> {
    fn of(item: &'a Item) -> Option<Self> {
        match item {
            Item::None => None,
            Item::Value(Value::InlineTable(t)) => Some(Self::Table(t)),
            Item::Value(v) => Some(Self::Value(v)),
            Item::Table(t) => Some(Self::Table(t)),
            Item::ArrayOfTables(a) => Some(Self::Tables(a)),
        }
    }

    fn of_value(v: &'a Value) -> Self {
        match v {
            Value::InlineTable(t) => Self::Table(t),
            v => Self::Value(v),
        }
    }

    /// "a string", "an integer", … for "expected X, found Y".
    fn describe(self) -> &'static str {
        match self {
            Self::Value(Value::String(_)) => "a string",
            Self::Value(Value::Integer(_)) => "an integer",
            Self::Value(Value::Float(_)) => "a float",
            Self::Value(Value::Boolean(_)) => "a boolean",
            Self::Value(Value::Datetime(_)) => "a date/time",
            Self::Value(Value::Array(_)) => "an array",
            Self::Value(Value::InlineTable(_)) | Self::Table(_) => "a table",
            Self::Tables(_) => "an array of tables",
        }
    }
}

/// A key's value, with its path and the spans of the key and the value.
#[derive(Clone)]
pub(crate) struct Field<'a> {
    src: Src<'a>,
    /// Dotted path, e.g. `search[2].interval`.
    pub(crate) path: String,
    node: Node<'a>,
    span: Option<Range<usize>>,
}

/// A table (header `[x]`, inline `{…}`, dotted or implicit) being read.
#[derive(Clone)]
pub(crate) struct Table<'a> {
    src: Src<'a>,
    /// Dotted path; empty at the root.
    pub(crate) path: String,
    inner: &'a dyn TableLike,
    /// Where to point when the table as a whole is wrong (its header, or the nearest parent's).
    pub(crate) span: Option<Range<usize>>,
}

/// `key` as it appears in a dotted path: bare when TOML allows it, quoted otherwise.
fn path_segment(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        path_segment(key)
    } else {
        format!("{path}.{}", path_segment(key))
    }
}

/// The closest known name to `unknown` among `valid`, if it is close enough to be a typo.
pub(crate) fn did_you_mean<'v>(unknown: &str, valid: &[&'v str]) -> Option<&'v str> {
    valid
        .iter()
        .map(|v| (strsim::jaro_winkler(unknown, v), *v))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, v)| v)
}

/// "did you mean `x`? valid keys: a, b, c" — the hint for an unknown name.
pub(crate) fn suggestion(unknown: &str, valid: &[&str], what: &str) -> String {
    let list = valid
        .iter()
        .map(|v| format!("`{v}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match did_you_mean(unknown, valid) {
        Some(v) => format!("did you mean `{v}`? valid {what}: {list}"),
        None => format!("valid {what}: {list}"),
    }
}

impl<'a> Table<'a> {
    /// The document root.
    /// The config file this table is in.
    pub(crate) fn src_file(&self) -> &'a Path {
        self.src.file
    }

    pub(crate) fn root(src: Src<'a>, doc: &'a toml_edit::Table) -> Self {
        Self {
            src,
            path: String::new(),
            inner: doc,
            span: None,
        }
    }

    /// Rejects keys not in `allowed`, pointing at the first unknown key with a did-you-mean.
    pub(crate) fn allow(&self, allowed: &[&str]) -> Result<(), ConfigError> {
        for (key, _) in self.inner.iter() {
            if !allowed.contains(&key) {
                let span = self.key_span(key);
                return Err(self
                    .src
                    .err(span, &join(&self.path, key), format!("unknown key `{key}`"))
                    .with_hint(suggestion(key, allowed, "keys here")));
            }
        }
        Ok(())
    }

    fn key_span(&self, key: &str) -> Option<Range<usize>> {
        self.inner
            .key(key)
            .and_then(Key::span)
            .or_else(|| self.span.clone())
    }

    /// The value at `key`, if present.
    pub(crate) fn get(&self, key: &str) -> Option<Field<'a>> {
        let (k, item) = self.inner.get_key_value(key)?;
        let node = Node::of(item)?;
        let span = item
            .span()
            .or_else(|| k.span())
            .or_else(|| self.span.clone());
        Some(Field {
            src: self.src,
            path: join(&self.path, key),
            node,
            span,
        })
    }

    /// Every key and its value, in file order.
    pub(crate) fn entries(&self) -> Vec<(&'a str, Field<'a>)> {
        let inner: &'a dyn TableLike = self.inner;
        inner
            .iter()
            .filter_map(|(k, _)| Some((k, self.get(k)?)))
            .collect()
    }

    /// An error about this table as a whole (a missing key, say).
    pub(crate) fn err(&self, key: &str, message: impl Into<String>) -> ConfigError {
        self.src
            .err(self.span.clone(), &join(&self.path, key), message)
    }

    /// An error about this table, under a key path given whole (`watch.state_dir` from the root).
    pub(crate) fn err_key(&self, full_key: &str, message: impl Into<String>) -> ConfigError {
        self.src.err(self.span.clone(), full_key, message)
    }

    /// Optional string at `key`.
    pub(crate) fn str(&self, key: &str) -> Result<Option<(&'a str, Field<'a>)>, ConfigError> {
        self.get(key).map(|f| Ok((f.str()?, f))).transpose()
    }

    /// Optional boolean at `key`.
    pub(crate) fn bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        self.get(key).map(|f| f.bool()).transpose()
    }

    /// Optional duration at `key`.
    pub(crate) fn duration(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        self.get(key).map(|f| f.duration()).transpose()
    }

    /// Optional positive duration at `key` (zero is an error).
    pub(crate) fn positive_duration(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        self.get(key)
            .map(|f| {
                let d = f.duration()?;
                if d.is_zero() {
                    return Err(f.err("must be longer than zero"));
                }
                Ok(d)
            })
            .transpose()
    }
}

impl<'a> Field<'a> {
    /// An error at this value.
    pub(crate) fn err(&self, message: impl Into<String>) -> ConfigError {
        self.src.err(self.span.clone(), &self.path, message)
    }

    /// "expected {what}, found {actual}".
    pub(crate) fn type_err(&self, what: &str) -> ConfigError {
        self.err(format!("expected {what}, found {}", self.node.describe()))
    }

    /// The value as a string.
    pub(crate) fn str(&self) -> Result<&'a str, ConfigError> {
        match self.node {
            Node::Value(Value::String(s)) => Ok(s.value()),
            _ => Err(self.type_err("a string")),
        }
    }

    /// The value as a non-empty string (surrounding whitespace trimmed).
    pub(crate) fn non_empty_str(&self) -> Result<&'a str, ConfigError> {
        let s = self.str()?.trim();
        if s.is_empty() {
            return Err(self.err("must not be empty"));
        }
        Ok(s)
    }

    /// The value as a string, if it is one (for keys that take two shapes).
    pub(crate) fn as_str(&self) -> Option<&'a str> {
        match self.node {
            Node::Value(Value::String(s)) => Some(s.value()),
            _ => None,
        }
    }

    /// The value as a boolean, if it is one.
    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self.node {
            Node::Value(Value::Boolean(b)) => Some(*b.value()),
            _ => None,
        }
    }

    /// The value as an integer, if it is one.
    pub(crate) fn as_integer(&self) -> Option<i64> {
        match self.node {
            Node::Value(Value::Integer(i)) => Some(*i.value()),
            _ => None,
        }
    }

    /// The value as a boolean.
    pub(crate) fn bool(&self) -> Result<bool, ConfigError> {
        self.as_bool()
            .ok_or_else(|| self.type_err("`true` or `false`"))
    }

    /// The value as a float; integers are accepted (`3` means `3.0`).
    pub(crate) fn float(&self) -> Result<f64, ConfigError> {
        match self.node {
            Node::Value(Value::Float(x)) => Ok(*x.value()),
            Node::Value(Value::Integer(i)) => Ok(*i.value() as f64),
            _ => Err(self.type_err("a number")),
        }
    }

    /// The value as an integer of at least `min`.
    pub(crate) fn integer_at_least(&self, min: i64) -> Result<i64, ConfigError> {
        let n = self
            .as_integer()
            .ok_or_else(|| self.type_err("an integer"))?;
        if n < min {
            return Err(self.err(format!("must be at least {min}; got {n}")));
        }
        Ok(n)
    }

    /// The value as a duration string (`"30s"`).
    pub(crate) fn duration(&self) -> Result<Duration, ConfigError> {
        let Some(s) = self.as_str() else {
            let e = self.err(format!(
                "{DURATION_EXPECTED}, found {}",
                self.node.describe()
            ));
            return Err(match self.as_integer() {
                Some(n) => e.with_hint(format!(
                    "durations are strings with a unit: \"{n}s\" (units: ms, s, m, h)"
                )),
                None => e,
            });
        };
        parse_duration(s).map_err(|m| {
            let e = self.err(m);
            match duration_hint(s) {
                Some(h) => e.with_hint(h),
                None => e,
            }
        })
    }

    /// The value as a table (header or inline).
    pub(crate) fn table(&self) -> Result<Table<'a>, ConfigError> {
        match self.node {
            Node::Table(t) => Ok(Table {
                src: self.src,
                path: self.path.clone(),
                inner: t,
                span: self.span.clone(),
            }),
            _ => Err(self.type_err("a table")),
        }
    }

    /// Whether the value is a table.
    pub(crate) fn is_table(&self) -> bool {
        matches!(self.node, Node::Table(_))
    }

    /// The elements of an array or an array of tables, with paths `key[0]`, `key[1]`, ….
    pub(crate) fn array(&self) -> Result<Vec<Self>, ConfigError> {
        let elem = |i: usize, node: Node<'a>, span: Option<Range<usize>>| Self {
            src: self.src,
            path: format!("{}[{i}]", self.path),
            node,
            span: span.or_else(|| self.span.clone()),
        };
        match self.node {
            Node::Value(Value::Array(a)) => Ok(a
                .iter()
                .enumerate()
                .map(|(i, v)| elem(i, Node::of_value(v), v.span()))
                .collect()),
            Node::Tables(a) => Ok(a
                .iter()
                .enumerate()
                .map(|(i, t)| elem(i, Node::Table(t), t.span()))
                .collect()),
            _ => Err(self.type_err("an array")),
        }
    }
}

/// Parses the text, turning a TOML syntax error into a positioned [`ConfigError`].
pub(crate) fn parse_document(src: Src<'_>) -> Result<toml_edit::ImDocument<&str>, ConfigError> {
    toml_edit::ImDocument::parse(src.text).map_err(|e| {
        // toml_edit's message may span several lines ("invalid key\nexpected …"); keep them on
        // one line after the position prefix.
        let message = e
            .message()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        src.err(e.span(), "", format!("invalid TOML: {message}"))
    })
}
