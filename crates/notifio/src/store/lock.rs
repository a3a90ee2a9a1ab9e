//! One owner of the schedule per state directory. Two watchers on one directory would both
//! knock on every site (twice the requests the ladders and spacing allow) and announce every
//! listing twice. `watch` takes an exclusive lock on `notifio.lock` in the state directory for
//! as long as it runs and writes its pid there, so a second one can say who holds it.
//!
//! `check` takes the same lock when it is free, for its one pass: it then owns the schedule
//! (the sites' waits and each search's next check are its to write, and a `watch` started
//! meanwhile waits for it to finish). When a watcher holds the lock, `check` runs as its
//! guest: it reads the waits the watcher wrote and records what it finds, but leaves the
//! schedule to the watcher, so what `status` shows stays what the watcher will do
//! (docs/reliability.md). `status` takes no lock.
//!
//! The lock is the OS's (`flock`, through rustix's safe wrapper): it goes away with the process
//! however it ends, so a crashed watcher never leaves a stale lock behind.

use super::StoreError;
use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

/// The lock file's name inside the state directory.
const LOCK_FILE: &str = "notifio.lock";

/// Who holds a state directory's lock: the kind of run is written beside its pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// `notifio watch` (or the demo): for as long as it runs.
    Watch,
    /// `notifio check`: for one pass.
    Check,
}

impl Holder {
    /// What the lock file says after the pid (`watch` writes nothing, as older versions did).
    fn tag(self) -> &'static str {
        match self {
            Self::Watch => "",
            Self::Check => " check",
        }
    }

    /// The holder a lock file's text names: `"<pid>"` or `"<pid> check"`.
    fn read(text: &str) -> (Option<u32>, Self) {
        let mut words = text.split_whitespace();
        let pid = words.next().and_then(|w| w.parse().ok());
        let holder = match words.next() {
            Some("check") => Self::Check,
            _ => Self::Watch,
        };
        (pid, holder)
    }
}

/// The state directory, held by this process until dropped.
#[derive(Debug)]
pub struct StateLock {
    // Held for its lock; closing the file releases it.
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// Takes the lock of `state_dir` (which must exist) for `holder`, without waiting.
    ///
    /// # Errors
    /// [`StoreError::Locked`] when another process holds it; `Unusable` when the lock file
    /// cannot be made.
    pub(super) fn acquire(state_dir: &Path, holder: Holder) -> Result<Self, StoreError> {
        let path = state_dir.join(LOCK_FILE);
        let unusable = |e: std::io::Error| StoreError::Unusable {
            path: path.clone(),
            message: format!("cannot take the lock file {}: {e}", path.display()),
        };
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let mut file = opts.open(&path).map_err(unusable)?;
        #[cfg(unix)]
        {
            use rustix::fs::{FlockOperation, flock};
            let mut tries = 0;
            let locked = loop {
                let r = flock(&file, FlockOperation::NonBlockingLockExclusive);
                // `status` looks with a shared lock for an instant ([`Self::holder`]): that is
                // no holder, so try again a few times before naming one.
                if r == Err(rustix::io::Errno::WOULDBLOCK) && tries < PROBE_TRIES {
                    tries += 1;
                    std::thread::sleep(PROBE_PAUSE);
                    continue;
                }
                break r;
            };
            if let Err(e) = locked {
                if e == rustix::io::Errno::WOULDBLOCK {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    let (pid, by) = Holder::read(&text);
                    return Err(StoreError::Locked {
                        dir: state_dir.to_owned(),
                        pid,
                        by,
                    });
                }
                return Err(unusable(e.into()));
            }
        }
        file.set_len(0).map_err(unusable)?;
        file.rewind().map_err(unusable)?;
        writeln!(file, "{}{}", std::process::id(), holder.tag()).map_err(unusable)?;
        file.flush().map_err(unusable)?;
        Ok(Self { _file: file, path })
    }

    /// The lock file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who holds the lock of `state_dir` now (its pid and kind of run), or `None` when no
    /// process does: what `status` says about a running watcher. Looks with a shared lock held
    /// for an instant, never creating anything.
    #[must_use]
    pub fn holder(state_dir: &Path) -> Option<(Option<u32>, Holder)> {
        let path = state_dir.join(LOCK_FILE);
        let mut file = File::open(&path).ok()?;
        #[cfg(unix)]
        {
            use rustix::fs::{FlockOperation, flock};
            match flock(&file, FlockOperation::NonBlockingLockShared) {
                Ok(()) => return None, // released when `file` closes
                Err(e) if e == rustix::io::Errno::WOULDBLOCK => {}
                Err(_) => return None,
            }
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        Some(Holder::read(&text))
    }
}

/// How many times a lock another process holds is tried again, and how long apart (see
/// [`StateLock::holder`]).
const PROBE_TRIES: u32 = 4;
const PROBE_PAUSE: std::time::Duration = std::time::Duration::from_millis(25);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_first_holder_and_a_dropped_one_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let first = StateLock::acquire(dir.path(), Holder::Watch).unwrap();
        // flock locks belong to the open file: a second open in this process conflicts too.
        let err = StateLock::acquire(dir.path(), Holder::Check).unwrap_err();
        assert!(
            matches!(err, StoreError::Locked { pid: Some(p), by: Holder::Watch, .. } if p == std::process::id()),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        drop(first);
        let check = StateLock::acquire(dir.path(), Holder::Check).unwrap();
        let err = StateLock::acquire(dir.path(), Holder::Watch).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Locked {
                    by: Holder::Check,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("notifio check"), "{err}");
        drop(check);
        StateLock::acquire(dir.path(), Holder::Watch).unwrap();
    }

    #[test]
    fn the_holder_is_seen_without_taking_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(StateLock::holder(dir.path()), None, "no lock file");
        let lock = StateLock::acquire(dir.path(), Holder::Check).unwrap();
        assert_eq!(
            StateLock::holder(dir.path()),
            Some((Some(std::process::id()), Holder::Check))
        );
        drop(lock);
        assert_eq!(
            StateLock::holder(dir.path()),
            None,
            "the file stays, the lock not"
        );
        // A look does not stop a watcher from starting.
        let _file = File::open(dir.path().join(LOCK_FILE)).unwrap();
        StateLock::acquire(dir.path(), Holder::Watch).unwrap();
    }

    #[test]
    fn a_lock_file_names_its_holder_and_old_ones_are_watchers() {
        assert_eq!(Holder::read("123\n"), (Some(123), Holder::Watch));
        assert_eq!(Holder::read("123 check\n"), (Some(123), Holder::Check));
        assert_eq!(Holder::read(""), (None, Holder::Watch));
    }
}
