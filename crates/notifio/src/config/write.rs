//! The one writer of the config file: the dashboard's edits, applied to the file *as it is at
//! that moment*, so that no edit is lost, by hand or through the dashboard.
//!
//! A hand edit and a dashboard edit can meet: an editor saving (a new file renamed over the
//! old, or the old one truncated and rewritten), a slow writer appending in chunks, a script.
//! [`Writer::apply`] therefore (1) waits until the file has been quiet for [`SETTLE`], so a writer in
//! the middle of its save is let finish; (2) reads it and applies the change to that text;
//! (3) writes the result to a temporary file beside it; (4) looks at the file again, and if
//! it changed meanwhile starts over from (1) with the new text; (5) renames the temporary file
//! over it; and (6) checks that nobody wrote into the file it read after reading it (a writer
//! holding it open), in which case that writer's text is put back and the change applied to
//! it; and (7) for a moment after, looks for a writer that read the file before our rename and
//! renamed its own text over ours (a script's or an editor's save at the same moment): if its
//! text lacks the change, the change is applied to it. A file the user made read-only is the
//! user saying no: it is never replaced. What is left is the instant between (4) and (5),
//! microseconds, and a save renamed over ours later than [`GRACE`]; docs/reliability.md says so.
//!
//! The live reload waits for the same quiet time before it applies a file by hand
//! (`crate::reload`), so a file written in several chunks is applied once, complete.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How long the config file must have been left alone before it is read for an edit or a
/// reload: longer than the pauses of a slow writer (an editor's save in several writes, a
/// script writing chunk by chunk), short enough that an edit applies within a couple of
/// seconds.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The longest a dashboard edit waits for the file to be left alone.
const PATIENCE: Duration = Duration::from_secs(10);

/// How many times a change is applied again to a file that changed underneath it.
const ATTEMPTS: usize = 5;

/// How long after its rename an edit looks for a writer that read the file just before it
/// and renamed its own text over it a moment later (a script's or an editor's save at the
/// same moment), which would drop the edit. Within it the edit is applied again to that
/// writer's text; a human edit made after it is the human's say.
const GRACE: Duration = Duration::from_millis(250);

/// Why an edit of the file was not written. The change's own refusal comes back as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError<E> {
    /// The change itself refused the text (a name taken, a value the config refuses): the
    /// refusal is the caller's to tell.
    #[error("the change was refused")]
    Change(E),
    /// The file is read-only: the user does not want it changed.
    #[error(
        "the config file {} is read-only, so the dashboard leaves it as it is; make it writable (chmod u+w) to edit it from here",
        .0.display()
    )]
    ReadOnly(PathBuf),
    /// The file kept changing (someone is editing it): nothing was written.
    #[error(
        "the config file {} kept changing while the dashboard tried to edit it (is it being edited?); nothing was written, try again",
        .0.display()
    )]
    Busy(PathBuf),
    /// The file could not be read or written.
    #[error("cannot {what} the config file {}: {source}", path.display())]
    Io {
        /// What was being done (`read`, `write`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What the file looked like when it was read: enough to tell that it changed since.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    text: String,
    id: Identity,
}

/// A file's identity and version as the filesystem tells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    #[cfg(unix)]
    dev: u64,
    #[cfg(unix)]
    ino: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt as _;
        Self {
            #[cfg(unix)]
            dev: meta.dev(),
            #[cfg(unix)]
            ino: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// How long until `path` has been left alone for [`SETTLE`] (zero when it has, or when it
/// cannot be looked at: the read then says why).
#[must_use]
pub fn unsettled_for(path: &Path) -> Duration {
    let Ok(modified) = std::fs::metadata(path).and_then(|m| m.modified()) else {
        return Duration::ZERO;
    };
    SETTLE.saturating_sub(crate::clock::since(modified))
}

/// The dashboard's writer of one config file. It remembers the file as it last wrote it: a
/// file that is still exactly that needs no waiting before the next edit (a user clicking
/// through several changes is not slowed down by their own writes).
#[derive(Debug)]
pub struct Writer {
    path: PathBuf,
    ours: Mutex<Option<Identity>>,
}

impl Writer {
    /// The writer of the config file at `path`.
    #[must_use]
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            ours: Mutex::new(None),
        }
    }

    /// Applies `change` to the config file as it is when the file is quiet, and writes the
    /// result in one step (a temporary file renamed over it, with its permissions; through a
    /// symlink to its target). `change` gets the file's text and returns the new text, or
    /// `None` for "no change" (nothing is written); it may be called more than once, each time
    /// with the file's latest text. Returns the text the file holds afterwards.
    ///
    /// # Errors
    /// [`WriteError::Change`] when `change` refuses, `ReadOnly`, `Busy` (the file kept
    /// changing for [`PATIENCE`], or under [`ATTEMPTS`] edits in a row), `Io`.
    pub async fn apply<E>(
        &self,
        mut change: impl FnMut(&str) -> Result<Option<String>, E>,
    ) -> Result<String, WriteError<E>> {
        let target = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
        // A writer's text that a rename of ours replaced: it goes back before anything else.
        let mut put_back: Option<String> = None;
        for _ in 0..ATTEMPTS {
            self.settle(&target).await?;
            let (mut opened, seen) = read(&target)?;
            if let Some(theirs) = &put_back {
                if replace_if_unchanged(&target, &seen, theirs)?.is_some() {
                    put_back = None;
                }
                continue; // and the change is applied to it
            }
            let Some(new) = change(&seen.text).map_err(WriteError::Change)? else {
                return Ok(seen.text);
            };
            if new == seen.text {
                return Ok(new);
            }
            let Some(written) = replace_if_unchanged(&target, &seen, &new)? else {
                continue; // changed underneath: apply the change again, to the new text
            };
            // Someone who had the old file open wrote to it after we read it.
            match written_since(&mut opened, &seen) {
                Some(theirs) => put_back = Some(theirs),
                None => {
                    let written = Some(written);
                    *self.ours.lock().unwrap_or_else(PoisonError::into_inner) = written;
                    // (7) A writer that read the file before our rename may rename its text
                    // over ours a moment later: if that text lacks the change, apply it there.
                    match replaced_soon(&target, written).await {
                        Some(theirs) if matches!(change(&theirs), Ok(Some(t)) if t != theirs) => {
                            continue;
                        }
                        Some(theirs) => return Ok(theirs),
                        None => return Ok(new),
                    }
                }
            }
        }
        Err(WriteError::Busy(target))
    }

    /// Whether the file is as this writer wrote it last: then it is complete, however
    /// recently it was written.
    fn is_ours(&self, path: &Path) -> bool {
        let now = std::fs::metadata(path).ok().map(|m| Identity::of(&m));
        let ours = *self.ours.lock().unwrap_or_else(PoisonError::into_inner);
        now.is_some() && now == ours
    }

    /// Whether the file is settled: left alone for [`SETTLE`], or as this writer wrote it.
    #[must_use]
    pub fn is_settled(&self) -> bool {
        self.is_ours(&self.path) || unsettled_for(&self.path).is_zero()
    }

    /// Waits until `path` has been left alone for [`SETTLE`], at most [`PATIENCE`]; at once
    /// when it is the file this writer wrote last.
    async fn settle<E>(&self, path: &Path) -> Result<(), WriteError<E>> {
        let give_up = tokio::time::Instant::now() + PATIENCE;
        loop {
            if self.is_ours(path) {
                return Ok(());
            }
            let wait = unsettled_for(path);
            if wait.is_zero() {
                return Ok(());
            }
            if tokio::time::Instant::now() + wait > give_up {
                return Err(WriteError::Busy(path.to_owned()));
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// The file's text when, within [`GRACE`], `path` is no longer the file we wrote (`ours`).
async fn replaced_soon(path: &Path, ours: Option<Identity>) -> Option<String> {
    let until = tokio::time::Instant::now() + GRACE;
    while tokio::time::Instant::now() < until {
        let now = std::fs::metadata(path).ok().map(|m| Identity::of(&m));
        if now != ours {
            return std::fs::read_to_string(path).ok();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// The file's text and identity, and the open file (to tell later whether it was written
/// after this read). A read-only file is refused here.
fn read<E>(path: &Path) -> Result<(File, Seen), WriteError<E>> {
    let io = |source| WriteError::Io {
        what: "read",
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if read_only(&meta) {
        return Err(WriteError::ReadOnly(path.to_owned()));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    Ok((
        file,
        Seen {
            text,
            id: Identity::of(&meta),
        },
    ))
}

/// Whether the owner may not write the file (the mode the user set, not whether root could).
fn read_only(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        meta.permissions().mode() & 0o200 == 0
    }
    #[cfg(not(unix))]
    {
        meta.permissions().readonly()
    }
}

/// What was written into the file we read after we read it, if anything (its text now).
fn written_since(opened: &mut File, seen: &Seen) -> Option<String> {
    let meta = opened.metadata().ok()?;
    if Identity::of(&meta) == seen.id {
        return None;
    }
    let mut text = String::new();
    opened.rewind().ok()?;
    opened.read_to_string(&mut text).ok()?;
    (text != seen.text).then_some(text)
}

/// Writes `text` over `path` in one step, unless the file is no longer what `seen` says;
/// returns whether it wrote.
fn replace_if_unchanged<E>(
    path: &Path,
    seen: &Seen,
    text: &str,
) -> Result<Option<Identity>, WriteError<E>> {
    let io = |source| WriteError::Io {
        what: "write",
        path: path.to_owned(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "notifio.toml".into());
    let tmp = dir.join(format!(".{name}.notifio-{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        if let Ok(meta) = std::fs::metadata(path) {
            f.set_permissions(meta.permissions())?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        // What the file is once renamed (a rename keeps it): whoever replaces it after is told.
        let written = Identity::of(&f.metadata()?);
        // The last look before the rename: the file as read, byte for byte.
        let now = std::fs::read_to_string(path)?;
        let id = std::fs::metadata(path).map(|m| Identity::of(&m))?;
        if now != seen.text || id != seen.id {
            return Ok(None);
        }
        std::fs::rename(&tmp, path)?;
        Ok(Some(written))
    })();
    if !matches!(result, Ok(Some(_))) {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(text: &str, line: &str) -> Result<Option<String>, String> {
        Ok(Some(format!("{text}{line}\n")))
    }

    /// Makes `path` look written long ago (settled), so a test does not wait for it.
    fn backdate(path: &Path) {
        let file = File::options().write(true).open(path).unwrap();
        let now = std::time::UNIX_EPOCH + Duration::from_millis(crate::clock::now().as_millis());
        file.set_modified(now - 2 * SETTLE).unwrap();
    }

    /// A writer that read the file before our rename and renames its own text over ours a
    /// moment after: the change is applied again, to its text.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_save_renamed_over_ours_a_moment_later_gets_the_change_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        std::fs::write(&path, "a\n").unwrap();
        backdate(&path);
        let stale = std::fs::read_to_string(&path).unwrap();
        let hand = {
            let path = path.clone();
            std::thread::spawn(move || {
                // It read the file before our edit; it saves once ours is there.
                while std::fs::read_to_string(&path).unwrap() == stale {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let tmp = path.with_extension("swp");
                std::fs::write(&tmp, format!("{stale}by hand\n")).unwrap();
                std::fs::rename(&tmp, &path).unwrap();
            })
        };
        let once = |text: &str| {
            if text.contains("dashboard") {
                Ok(None)
            } else {
                append(text, "dashboard")
            }
        };
        let out = Writer::new(path.clone()).apply(once).await.unwrap();
        hand.join().unwrap();
        let file = std::fs::read_to_string(&path).unwrap();
        assert_eq!(file, out);
        assert!(
            file.contains("by hand") && file.contains("dashboard"),
            "{file}"
        );
    }

    #[tokio::test]
    async fn a_change_is_applied_to_the_file_as_it_is_and_nothing_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        std::fs::write(&path, "a\n").unwrap();
        backdate(&path);
        let mut calls = 0;
        let out = Writer::new(path.clone())
            .apply(|text| {
                calls += 1;
                if calls == 1 {
                    // A hand edit lands between our read and our write.
                    std::fs::write(&path, format!("{text}by hand\n")).unwrap();
                    backdate(&path);
                }
                append(text, "dashboard")
            })
            .await
            .unwrap();
        assert_eq!(out, "a\nby hand\ndashboard\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), out);
        assert_eq!(calls, 2, "applied again to the new text");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left");
    }

    #[tokio::test]
    async fn a_file_written_through_an_open_handle_after_the_read_keeps_that_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        std::fs::write(&path, "a\n").unwrap();
        backdate(&path);
        // A writer that opened the file before the edit, and writes to it after our read.
        let mut writer = File::options().append(true).open(&path).unwrap();
        let mut calls = 0;
        let out = Writer::new(path.clone())
            .apply(|text| {
                calls += 1;
                if calls == 1 {
                    writer.write_all(b"slow writer\n").unwrap();
                    // As a writer that paused for long would look: settled.
                    backdate(&path);
                }
                append(text, "dashboard")
            })
            .await
            .unwrap();
        assert!(out.contains("slow writer\n"), "{out}");
        assert!(out.ends_with("dashboard\n"), "{out}");
    }

    /// A writer that had the file open and wrote to it after our read, when our rename had
    /// already replaced the file: what it wrote is found through the file we read.
    #[test]
    fn what_was_written_into_the_replaced_file_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        std::fs::write(&path, "a\n").unwrap();
        let (mut opened, seen) = read::<String>(&path).unwrap();
        assert_eq!(written_since(&mut opened, &seen), None);
        let mut writer = File::options().append(true).open(&path).unwrap();
        assert!(
            replace_if_unchanged::<String>(&path, &seen, "a\nours\n")
                .unwrap()
                .is_some()
        );
        writer.write_all(b"theirs\n").unwrap();
        assert_eq!(
            written_since(&mut opened, &seen).as_deref(),
            Some("a\ntheirs\n")
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nours\n");
    }

    #[tokio::test]
    async fn a_read_only_file_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        std::fs::write(&path, "a\n").unwrap();
        backdate(&path);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        }
        #[cfg(not(unix))]
        {
            let mut p = std::fs::metadata(&path).unwrap().permissions();
            p.set_readonly(true);
            std::fs::set_permissions(&path, p).unwrap();
        }
        let e = Writer::new(path.clone())
            .apply(|t| append(t, "x"))
            .await
            .unwrap_err();
        assert!(matches!(e, WriteError::ReadOnly(_)), "{e}");
        assert!(e.to_string().contains("read-only"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\n");
    }

    #[tokio::test]
    async fn a_file_just_written_is_let_settle_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        std::fs::write(&path, "a\n").unwrap();
        assert!(unsettled_for(&path) > Duration::ZERO);
        let writer = Writer::new(path.clone());
        let start = std::time::Instant::now();
        writer.apply(|t| append(t, "x")).await.unwrap();
        assert!(start.elapsed() >= SETTLE - Duration::from_millis(50));
        // Its own write needs no settling.
        let start = std::time::Instant::now();
        writer.apply(|t| append(t, "y")).await.unwrap();
        assert!(start.elapsed() < SETTLE / 2, "{:?}", start.elapsed());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nx\ny\n");
        assert_eq!(unsettled_for(&dir.path().join("missing")), Duration::ZERO);
    }
}
