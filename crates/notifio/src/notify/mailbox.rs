//! The mbox channel: appends each notification to an mbox file in the state dir.
//!
//! It is the default channel when nothing else is configured, so a fresh install shows
//! notifications (`mutt -f`, `less`) without any account. The file is created 0600 because
//! notifications say where the user is looking for a home. Format is mboxrd: a `From ` line,
//! RFC 5322 headers, the plain-text body with `From `-lines escaped as `>From `, a blank line.

use super::{DeliveryError, Message};
use lettre::message::Mailbox as Address;
use lettre::message::header::ContentType;
use notifio_policy::AttemptResult;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// Envelope sender and header address used in the mbox copy.
const ADDRESS: &str = "notifio@localhost";

/// An mbox file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mailbox {
    path: PathBuf,
}

impl Mailbox {
    /// The mailbox at `path` (created on first delivery).
    #[must_use]
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// The file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one message. Blocking file I/O runs on the blocking pool.
    pub(crate) async fn append(&self, msg: &Message, now_ms: u64) -> Result<(), DeliveryError> {
        let entry = format_entry(msg, now_ms);
        let path = self.path.clone();
        let result = tokio::task::spawn_blocking(move || append_bytes(&path, entry.as_bytes()))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
        result.map_err(|e| {
            DeliveryError::new(
                AttemptResult::Connect,
                format!("mailbox {}: {e}", self.path.display()),
            )
        })
    }
}

fn append_bytes(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut file = opts.open(path)?;
    // One write of the whole entry: O_APPEND keeps concurrent appenders from interleaving.
    file.write_all(bytes)?;
    file.sync_data()
}

/// One mbox entry, ending with the blank line that separates it from the next. Headers come
/// from lettre (RFC 2047 encodes a non-ASCII subject); the body is written as-is, 8-bit plain
/// text, so the file stays readable with `less` (lettre would quoted-print lines over 76
/// characters, which an mbox does not need).
#[must_use]
pub fn format_entry(msg: &Message, now_ms: u64) -> String {
    let when = UNIX_EPOCH + Duration::from_millis(now_ms);
    let date = httpdate::fmt_http_date(when);
    let mut out = format!("From {ADDRESS} {}\n", asctime(&date));
    let headers = format!("Notifio <{ADDRESS}>")
        .parse::<Address>()
        .map_err(|e| e.to_string())
        .and_then(|address| {
            lettre::Message::builder()
                .from(address.clone())
                .to(address)
                .subject(msg.subject.clone())
                .date(when)
                .header(ContentType::TEXT_PLAIN)
                .body(String::new())
                .map_err(|e| e.to_string())
        });
    match headers {
        Ok(m) => {
            let raw = String::from_utf8_lossy(&m.formatted()).into_owned();
            let head = raw.split("\r\n\r\n").next().unwrap_or_default();
            for line in head.split("\r\n") {
                if !line.starts_with("Content-Transfer-Encoding:") {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        // Unreachable with fixed addresses; keep the text rather than lose the notification.
        Err(_) => out.push_str(&format!("Subject: {}\n", msg.subject)),
    }
    out.push_str("Content-Transfer-Encoding: 8bit\n\n");
    for line in msg.text.lines() {
        if line.trim_start_matches('>').starts_with("From ") {
            out.push('>');
        }
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// `Tue, 14 Nov 2023 22:13:20 GMT` → `Tue Nov 14 22:13:20 2023` (the `From ` line's asctime
/// date). Rearranging httpdate's output saves hand-written calendar arithmetic.
fn asctime(http_date: &str) -> String {
    let parts: Vec<&str> = http_date.split_whitespace().collect();
    match parts.as_slice() {
        [dow, day, mon, year, time, _] => {
            let day: u32 = day.parse().unwrap_or(1);
            format!("{} {mon} {day:>2} {time} {year}", dow.trim_end_matches(','))
        }
        _ => http_date.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_format_and_escaping() {
        let msg = Message {
            subject: "1 new listing — A".into(),
            text: "From the river\n>From here\nplain\n".into(),
            html: String::new(),
        };
        let e = format_entry(&msg, 1_700_000_000_000);
        println!("{e}");
        assert!(e.starts_with("From notifio@localhost Tue Nov 14 22:13:20 2023\n"));
        assert!(e.contains("\n>From the river\n>>From here\nplain\n\n"));
        assert!(e.contains("Date: Tue, 14 Nov 2023 22:13:20 +0000\n"), "{e}");
        assert!(!e.contains("Subject: 1 new listing — A"));
        assert!(e.ends_with("\n\n"));
    }
}
