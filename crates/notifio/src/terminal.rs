//! Text from a page on a terminal or in a log. Sites write the titles, ids and error texts
//! Notifio prints, and a terminal obeys the control characters in them: ESC starts CSI and
//! OSC sequences (OSC 52 writes the clipboard, CSI 2J clears the screen), BEL rings, a line
//! break forges a line of a log (`Bcc: …`). Every printer of such text (`watch`'s narration,
//! `check`'s and `status`'s tables, the log's fields) shows it through [`line`]: escaped,
//! never obeyed. JSON output escapes by itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether a terminal could act on `c` rather than show it: C0 (line breaks and tab
/// included), DEL and C1 controls, and the bidirectional embeddings, overrides and isolates,
/// which reorder what is shown around them.
fn obeyed(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` as one line a terminal shows as it is: each character it would obey written as an
/// escape (`\n`, `\r`, `\t`, `\x1b`, `\u{9b}`, `\u{202e}`), everything else kept. Borrowed
/// when there is nothing to escape, which is nearly always.
#[must_use]
pub fn line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(obeyed) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if obeyed(c) && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if obeyed(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// JSON text (as serde_json writes it) with what a terminal would obey escaped as well:
/// serde_json escapes only what JSON requires (below U+0020), and leaves DEL, the C1 controls
/// (U+009B is CSI) and the bidirectional controls raw. Outside strings JSON text holds none of
/// them, so each becomes a `\uXXXX` escape of the same string: the value read back is unchanged.
#[must_use]
pub fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(obeyed) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if obeyed(c) && c != '\n' {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_terminal_would_obey_is_shown_escaped() {
        assert!(matches!(line("2-room flat, Chamberí €"), Cow::Borrowed(_)));
        assert_eq!(
            line("Nice flat\u{1b}]52;c;SGVsbG8=\u{7}"),
            "Nice flat\\x1b]52;c;SGVsbG8=\\x07"
        );
        assert_eq!(line("a\u{1b}[2Jb\0c\u{7f}"), "a\\x1b[2Jb\\x00c\\x7f");
        assert_eq!(
            line("77\r\nBcc: x@example.org"),
            "77\\r\\nBcc: x@example.org"
        );
        assert_eq!(line("\tcol"), "\\tcol");
        assert_eq!(line("\u{9b}31m\u{85}"), "\\u{9b}31m\\u{85}");
        assert_eq!(line("abc\u{202e}fdp.exe"), "abc\\u{202e}fdp.exe");
        assert!(!line("x\u{1b}\u{2067}\n").chars().any(obeyed));
    }

    #[test]
    fn json_keeps_its_values_and_escapes_what_serde_leaves_raw() {
        let value = serde_json::json!({"title": "a\u{1b}[2J\u{9b}31m\u{7f}\u{202e}b", "n": [1, 2]});
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        let shown = json(&pretty);
        assert!(!shown.chars().any(|c| obeyed(c) && c != '\n'), "{shown}");
        assert!(shown.contains("\\u009b31m\\u007f\\u202eb"), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
    }
}
