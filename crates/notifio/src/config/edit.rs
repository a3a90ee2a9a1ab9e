//! Changes to the config file's `[[search]]` tables, as the dashboard makes them: add, patch,
//! delete, pause, resume.
//!
//! The file stays the user's: its comments, order and formatting are what make it worth
//! keeping in version control, so an edit touches one `[[search]]` table and leaves every
//! other byte as it was (toml_edit keeps the formatting of what it does not change; a new
//! search is spliced in as text after the last one, a deleted one cut out as text).
//! Comments belong to what they are next to: the block of comment lines right above a
//! table's header is the table's, and so is the block right after its last line (its
//! commented-out options) unless that block runs straight into the next header. A comment
//! with a blank line between it and the table, such as the file's own header, is nobody's
//! and stays byte for byte. These functions only transform text; the caller validates the
//! result (`config::load_text`) before writing it (`config::write`), and the live reload then
//! applies it like any edit made by hand: one path for both.

use std::ops::Range;
use std::str::FromStr as _;
use toml_edit::{ArrayOfTables, DocumentMut, ImDocument, Item, Table, Value};

/// Why an edit could not be made. No variant carries a value from the file other than names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// No `[[search]]` has this name.
    #[error("no search is named `{0}`")]
    NoSuchSearch(String),
    /// A `[[search]]` has this name already.
    #[error("a search named `{0}` exists already")]
    DuplicateName(String),
    /// The search is the only one: a config needs at least one.
    #[error(
        "`{0}` is the only search, and a config needs at least one: add another first, or pause this one"
    )]
    LastSearch(String),
    /// The file cannot be edited without changing what the user wrote elsewhere in it.
    #[error("the config file cannot be edited from the dashboard: {0}")]
    NotEditable(String),
}

/// The searches of `text`, in file order: each `[[search]]` table's keys and values.
///
/// # Errors
/// [`EditError::NotEditable`] when the text is not TOML or its searches are not
/// `[[search]]` tables.
pub fn searches(text: &str) -> Result<Vec<Table>, EditError> {
    let doc = DocumentMut::from_str(text).map_err(not_toml)?;
    Ok(match doc.get("search") {
        None => Vec::new(),
        Some(item) => tables(item)?.iter().cloned().collect(),
    })
}

/// `text` with a new `[[search]]` of `fields` (in that order) after the last search (at the
/// end of the file when there is none). Every byte of `text` is kept, in order, around it.
///
/// # Errors
/// [`EditError::DuplicateName`] when `fields` names a search that exists; `NotEditable` as
/// [`searches`].
pub fn add_search(text: &str, fields: &[(String, Value)]) -> Result<String, EditError> {
    // Spliced in as text: the rest need not round-trip through toml_edit, only parse.
    let doc = DocumentMut::from_str(text).map_err(not_toml)?;
    let existing = doc.get("search").map(tables).transpose()?;
    if let Some(name) = fields
        .iter()
        .find(|(k, _)| k == "name")
        .and_then(|(_, v)| v.as_str())
        && existing
            .iter()
            .flat_map(|a| a.iter())
            .any(|t| is_named(t, name))
    {
        return Err(EditError::DuplicateName(name.to_owned()));
    }
    let mut table = Table::new();
    for (key, value) in fields {
        table.insert(key, Item::Value(bare(value.clone())));
    }
    let mut aot = ArrayOfTables::new();
    aot.push(table);
    let mut one = DocumentMut::new();
    one.insert("search", Item::ArrayOfTables(aot));
    let rendered = one.to_string();

    // After the last search and its trailing comments (its commented-out options).
    let at = ImDocument::parse(text)
        .ok()
        .and_then(|im| {
            im.get("search")
                .and_then(Item::as_array_of_tables)
                .and_then(|a| a.iter().last().and_then(end_of))
        })
        .map_or(text.len(), |end| trailing_end(text, end));
    let mut out = String::with_capacity(text.len() + rendered.len() + 2);
    out.push_str(&text[..at]);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&rendered);
    let rest = &text[at..];
    if !rest.is_empty() && !rest.starts_with('\n') {
        out.push('\n');
    }
    out.push_str(rest);
    Ok(out)
}

/// `text` with the search `name`'s keys in `set` changed: `Some(value)` sets a key (keeping
/// the comment beside it when it had one), `None` removes it. A new name must not be taken.
///
/// # Errors
/// [`EditError::NoSuchSearch`], [`EditError::DuplicateName`], `NotEditable`.
pub fn patch_search(
    text: &str,
    name: &str,
    set: &[(String, Option<Value>)],
) -> Result<String, EditError> {
    let renamed = set
        .iter()
        .find(|(k, _)| k == "name")
        .and_then(|(_, v)| v.as_ref())
        .and_then(Value::as_str)
        .filter(|new| super::name_key(new) != super::name_key(name));
    edit(text, |aot| {
        if let Some(new) = renamed
            && aot.iter().any(|t| is_named(t, new))
        {
            return Err(EditError::DuplicateName(new.to_owned()));
        }
        let table = find(aot, name)?;
        for (key, value) in set {
            match value {
                Some(v) => set_value(table, key, v.clone()),
                None => {
                    table.remove(key);
                }
            }
        }
        Ok(())
    })
}

/// `text` without the search `name`: its table, the comment block right above its header and
/// the one right after its last line (see the module docs). Every other byte stays, the
/// file's own header comments too.
///
/// # Errors
/// [`EditError::NoSuchSearch`], [`EditError::LastSearch`], `NotEditable`.
pub fn delete_search(text: &str, name: &str) -> Result<String, EditError> {
    // The checks (and the refusal of files it cannot edit cleanly) on the editable document.
    edit(text, |aot| {
        if !aot.iter().any(|t| is_named(t, name)) {
            return Err(EditError::NoSuchSearch(name.to_owned()));
        }
        if aot.len() == 1 {
            return Err(EditError::LastSearch(name.to_owned()));
        }
        Ok(())
    })?;
    // The cut, as text, where the parsed document says the table is.
    let im = ImDocument::parse(text).map_err(not_toml)?;
    let table = im
        .get("search")
        .and_then(Item::as_array_of_tables)
        .and_then(|a| a.iter().find(|t| is_named(t, name)))
        .ok_or_else(|| EditError::NoSuchSearch(name.to_owned()))?;
    let (Some(header), Some(last)) = (table.span().map(|s| s.start), end_of(table)) else {
        return Err(EditError::NotEditable(
            "cannot tell where the search is in the file".into(),
        ));
    };
    let from = attached_above(text, header);
    let mut to = trailing_end(text, last);
    // One blank line between what was before and what comes after, as there was.
    let blank_before = from == 0 || text[..from].ends_with("\n\n");
    if blank_before {
        let next = line_end(text, to);
        if to < text.len() && text[to..next].trim().is_empty() {
            to = next;
        }
    }
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..from]);
    out.push_str(&text[to..]);
    Ok(out)
}

/// Whether a line (with or without its newline) is a comment.
fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with('#')
}

/// The start of the line `at` is on.
fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// Where the comment block right above the header at `header` starts (the header's line when
/// there is none): contiguous comment lines, up to a blank or any other line.
fn attached_above(text: &str, header: usize) -> usize {
    let mut start = line_start(text, header);
    while start > 0 {
        let prev = line_start(text, start - 1);
        if !is_comment(&text[prev..start]) {
            break;
        }
        start = prev;
    }
    start
}

/// Where a table whose last value ends at `last` ends: past that line and the comment lines
/// right after it (its commented-out options), unless they run straight into another header,
/// whose comments they then are.
fn trailing_end(text: &str, last: usize) -> usize {
    let end = line_end(text, last);
    let mut probe = end;
    while probe < text.len() {
        let next = line_end(text, probe);
        let line = &text[probe..next];
        if is_comment(line) {
            probe = next;
            continue;
        }
        if probe > end && line.trim_start().starts_with('[') {
            return end;
        }
        break;
    }
    probe
}

/// `text` with the search `name` paused (`paused = true`) or resumed (the key removed, so a
/// pause and a resume give the file back as it was).
///
/// # Errors
/// [`EditError::NoSuchSearch`], `NotEditable`.
pub fn set_paused(text: &str, name: &str, paused: bool) -> Result<String, EditError> {
    let value = paused.then(|| Value::from(true));
    patch_search(text, name, &[("paused".to_owned(), value)])
}

fn not_toml(e: toml_edit::TomlError) -> EditError {
    EditError::NotEditable(format!("it is not valid TOML ({})", e.message().trim()))
}

/// The text as an editable document, refused if writing it back would change it (beyond the
/// newline a last line without one gets).
fn document(text: &str) -> Result<DocumentMut, EditError> {
    let doc = DocumentMut::from_str(text).map_err(not_toml)?;
    let back = doc.to_string();
    if back != text && back.trim_end() != text.trim_end() {
        return Err(EditError::NotEditable(
            "writing it back would reformat it; edit it by hand".into(),
        ));
    }
    Ok(doc)
}

/// Runs `f` on the `[[search]]` tables of `text` and renders the result.
fn edit(
    text: &str,
    f: impl FnOnce(&mut ArrayOfTables) -> Result<(), EditError>,
) -> Result<String, EditError> {
    let mut doc = document(text)?;
    let Some(item) = doc.get_mut("search") else {
        return Err(EditError::NotEditable("it has no searches".into()));
    };
    tables(item)?;
    let Some(aot) = item.as_array_of_tables_mut() else {
        return Err(not_tables());
    };
    f(aot)?;
    Ok(doc.to_string())
}

fn not_tables() -> EditError {
    EditError::NotEditable(
        "its searches are not written as [[search]] tables; write them that way to edit them from the dashboard".into(),
    )
}

fn tables(item: &Item) -> Result<&ArrayOfTables, EditError> {
    item.as_array_of_tables().ok_or_else(not_tables)
}

fn name_of(t: &Table) -> Option<&str> {
    t.get("name").and_then(Item::as_str)
}

/// Whether `t` is the search called `name`, as names are compared (`config::name_key`).
pub fn is_named(t: &Table, name: &str) -> bool {
    name_of(t).is_some_and(|n| super::name_key(n) == super::name_key(name))
}

fn find<'a>(aot: &'a mut ArrayOfTables, name: &str) -> Result<&'a mut Table, EditError> {
    aot.iter_mut()
        .find(|t| is_named(t, name))
        .ok_or_else(|| EditError::NoSuchSearch(name.to_owned()))
}

/// Sets `key` to `value`: an existing value keeps its decor (the spaces and the comment
/// around it), a new key is added after the table's last one.
fn set_value(table: &mut Table, key: &str, value: Value) {
    match table.get_mut(key) {
        Some(Item::Value(old)) => {
            let decor = old.decor().clone();
            let mut value = bare(value);
            *value.decor_mut() = decor;
            *old = value;
        }
        _ => {
            table.insert(key, Item::Value(bare(value)));
        }
    }
}

/// A value as toml_edit formats a new one (` = "x"`, inline tables `{ a = 1 }`).
fn bare(mut value: Value) -> Value {
    value.decor_mut().clear();
    if let Value::InlineTable(t) = &mut value {
        t.fmt();
    }
    if let Value::Array(a) = &mut value {
        a.fmt();
    }
    value.decorated(" ", "")
}

/// The end of the last value written in a table (sub-tables included), from an [`ImDocument`].
fn end_of(t: &Table) -> Option<usize> {
    t.iter()
        .filter_map(|(_, item)| match item {
            Item::Value(v) => v.span().map(|s: Range<usize>| s.end),
            Item::Table(t) => end_of(t),
            Item::ArrayOfTables(a) => a.iter().filter_map(end_of).max(),
            Item::None => None,
        })
        .max()
}

/// Just past the newline ending the line `at` is on (or the end of the text).
fn line_end(text: &str, at: usize) -> usize {
    text.get(at..)
        .and_then(|rest| rest.find('\n'))
        .map_or(text.len(), |i| at + i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# My notifio config.
[watch]
interval = "45s"   # not too often

# Flats in Madrid
[[search]]
name = "Madrid"
url = "https://www.idealista.com/alquiler-viviendas/madrid-madrid/"
interval = "1m"    # a minute is plenty

[[search]]
name = "Berlin"    # the second one
url = "https://www.immobilienscout24.de/Suche/de/berlin/berlin/wohnung-mieten"

# Sites
[site."facebook.com"]
spacing = "5s"
"#;

    fn field(k: &str, v: impl Into<Value>) -> (String, Value) {
        (k.to_owned(), v.into())
    }

    /// The lines of `a` that are not in `b`, and the other way round, by a plain diff of the
    /// common prefix and suffix (what an edit of one place may change).
    fn changed<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
        let pre = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        let suf = a[pre..]
            .bytes()
            .rev()
            .zip(b[pre..].bytes().rev())
            .take_while(|(x, y)| x == y)
            .count();
        (&a[pre..a.len() - suf], &b[pre..b.len() - suf])
    }

    #[test]
    fn a_new_search_goes_after_the_last_one_and_every_other_byte_stays() {
        let out = add_search(
            FILE,
            &[
                field("name", "Valencia"),
                field("url", "https://example.org/flats?q=1"),
                field("interval", "2m"),
            ],
        )
        .unwrap();
        let (was, now) = changed(FILE, &out);
        assert_eq!(was, "");
        assert_eq!(
            now,
            "[[search]]\nname = \"Valencia\"\nurl = \"https://example.org/flats?q=1\"\ninterval = \"2m\"\n\n"
        );
        // After Berlin's last line, before the comment that belongs to [site."facebook.com"].
        let at = out.find("name = \"Valencia\"").unwrap();
        assert!(at > out.find("wohnung-mieten").unwrap());
        assert!(at < out.find("# Sites").unwrap());
        assert_eq!(searches(&out).unwrap().len(), 3);
    }

    #[test]
    fn a_search_is_appended_to_a_file_without_a_final_newline_or_searches() {
        let out = add_search(
            "[watch]\ninterval = \"1m\"",
            &[field("name", "A"), field("url", "u")],
        )
        .unwrap();
        assert_eq!(
            out,
            "[watch]\ninterval = \"1m\"\n\n[[search]]\nname = \"A\"\nurl = \"u\"\n"
        );
        let out = add_search("", &[field("name", "A")]).unwrap();
        assert_eq!(out, "[[search]]\nname = \"A\"\n");
    }

    #[test]
    fn inline_tables_and_arrays_are_written_inline() {
        let mut listing = toml_edit::InlineTable::new();
        listing.insert("selector", "article.card".into());
        listing.insert("id_attr", "data-id".into());
        let mut notify = toml_edit::Array::new();
        notify.push("telegram");
        let out = add_search(
            FILE,
            &[
                field("name", "Generic"),
                (String::from("listing"), Value::InlineTable(listing)),
                (String::from("notify"), Value::Array(notify)),
            ],
        )
        .unwrap();
        assert!(
            out.contains("listing = { selector = \"article.card\", id_attr = \"data-id\" }\nnotify = [\"telegram\"]\n"),
            "{out}"
        );
    }

    #[test]
    fn a_taken_name_is_refused() {
        let e = add_search(FILE, &[field("name", "Berlin")]).unwrap_err();
        assert_eq!(e, EditError::DuplicateName("Berlin".into()));
        let e =
            patch_search(FILE, "Madrid", &[("name".into(), Some("Berlin".into()))]).unwrap_err();
        assert_eq!(e, EditError::DuplicateName("Berlin".into()));
    }

    #[test]
    fn a_patch_changes_one_value_and_keeps_its_comment() {
        let out = patch_search(FILE, "Madrid", &[("interval".into(), Some("5m".into()))]).unwrap();
        assert_eq!(changed(FILE, &out), ("1", "5"));
        assert!(
            out.contains("interval = \"5m\"    # a minute is plenty\n"),
            "{out}"
        );
        // A renamed search keeps the comment beside its name.
        let out = patch_search(
            FILE,
            "Berlin",
            &[("name".into(), Some("Berlin Mitte".into()))],
        )
        .unwrap();
        assert!(
            out.contains("name = \"Berlin Mitte\"    # the second one\n"),
            "{out}"
        );
        assert_eq!(changed(FILE, &out), ("", " Mitte"));
    }

    #[test]
    fn a_new_key_goes_after_the_tables_last_one_and_none_removes_a_key() {
        let out = patch_search(FILE, "Berlin", &[("interval".into(), Some("3m".into()))]).unwrap();
        let (was, now) = changed(FILE, &out);
        assert_eq!(was, "");
        assert_eq!(now, "interval = \"3m\"\n");
        assert!(
            out.contains("wohnung-mieten\"\ninterval = \"3m\"\n\n# Sites"),
            "{out}"
        );
        let back = patch_search(&out, "Berlin", &[("interval".into(), None)]).unwrap();
        assert_eq!(back, FILE);
    }

    #[test]
    fn pause_then_resume_gives_the_file_back() {
        let paused = set_paused(FILE, "Madrid", true).unwrap();
        let (was, now) = changed(FILE, &paused);
        assert_eq!(was, "");
        assert_eq!(now, "paused = true\n");
        assert!(
            paused.contains("a minute is plenty\npaused = true\n\n[[search]]"),
            "{paused}"
        );
        assert_eq!(
            set_paused(&paused, "Madrid", true).unwrap(),
            paused,
            "idempotent"
        );
        assert_eq!(set_paused(&paused, "Madrid", false).unwrap(), FILE);
        assert_eq!(set_paused(FILE, "Madrid", false).unwrap(), FILE);
    }

    #[test]
    fn delete_takes_the_table_and_its_comment_and_nothing_else() {
        let out = delete_search(FILE, "Madrid").unwrap();
        let (was, now) = changed(FILE, &out);
        assert_eq!(now, "");
        assert!(
            was.starts_with("# Flats in Madrid\n[[search]]\nname = \"Madrid\""),
            "{was:?}"
        );
        assert!(was.ends_with("a minute is plenty\n\n"), "{was:?}");
        assert_eq!(searches(&out).unwrap().len(), 1);
        let e = delete_search(&out, "Berlin").unwrap_err();
        assert_eq!(e, EditError::LastSearch("Berlin".into()));
        assert_eq!(
            delete_search(FILE, "Nowhere").unwrap_err(),
            EditError::NoSuchSearch("Nowhere".into())
        );
    }

    /// `notifio init`'s file: deleting its first search keeps the file's header byte for byte
    /// and takes the search's own comments with it; a new search goes after the last one's
    /// commented-out options, not between them and it.
    #[test]
    fn the_starter_files_header_and_a_searchs_own_comments_stay_where_they_belong() {
        let starter = crate::config::STARTER;
        let out = add_search(
            starter,
            &[
                field("name", "Second"),
                field(
                    "url",
                    "https://www.idealista.com/alquiler-viviendas/valencia/",
                ),
            ],
        )
        .unwrap();
        let options = out.find("# pages = 1").unwrap();
        let second = out.find("name = \"Second\"").unwrap();
        assert!(second > options, "after the first search's options:\n{out}");
        assert!(
            second < out.find("# ImmobilienScout24").unwrap(),
            "before the next section's comment:\n{out}"
        );
        let header_end = starter.find("\n\n").unwrap() + 2;
        let header = &starter[..header_end];
        let cut = delete_search(&out, "Madrid under 1200").unwrap();
        assert!(cut.starts_with(header), "the header stays:\n{cut}");
        assert!(!cut.contains("Madrid under 1200"));
        assert!(
            !cut.contains("# notify_existing = false   # announce"),
            "its options go"
        );
        assert!(cut.contains("name = \"Second\""));
        assert!(cut.contains("# ImmobilienScout24: paste"), "{cut}");
        assert!(!cut.contains("\n\n\n"), "no doubled blank line:\n{cut}");
        crate::config::parse(&cut, std::path::Path::new("notifio.toml")).unwrap();
    }

    #[test]
    fn a_comment_running_into_the_next_header_is_that_searchs() {
        let text = "[[search]]\nname = \"A\"\n# about B\n[[search]]\nname = \"B\"\n# B's option\n";
        assert_eq!(
            delete_search(text, "A").unwrap(),
            "# about B\n[[search]]\nname = \"B\"\n# B's option\n"
        );
        assert_eq!(
            delete_search(text, "B").unwrap(),
            "[[search]]\nname = \"A\"\n"
        );
    }

    #[test]
    fn files_it_cannot_edit_cleanly_are_refused() {
        let inline = "search = [{ name = \"A\", url = \"u\" }]\n";
        assert!(matches!(
            set_paused(inline, "A", true),
            Err(EditError::NotEditable(_))
        ));
        assert!(matches!(
            add_search("[[search]\n", &[field("name", "A")]),
            Err(EditError::NotEditable(_))
        ));
    }
}
