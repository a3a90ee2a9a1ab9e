//! One `notifio watch` per state directory. Two watchers on one directory would both knock on
//! every site (twice the requests the ladders and spacing allow) and announce every listing
//! twice. `watch` takes an exclusive lock on `notifio.lock` in the state directory for as long
//! as it runs and writes its pid there, so a second one can say who holds it; `check` and
//! `status` take no lock and work beside a running watcher.
//!
//! The lock is the OS's (`flock`, through rustix's safe wrapper): it goes away with the process
//! however it ends, so a crashed watcher never leaves a stale lock behind.

use super::StoreError;
use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

/// The lock file's name inside the state directory.
const LOCK_FILE: &str = "notifio.lock";

/// The state directory, held by this process until dropped.
#[derive(Debug)]
pub struct StateLock {
    // Held for its lock; closing the file releases it.
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// Takes the lock of `state_dir` (which must exist) without waiting.
    ///
    /// # Errors
    /// [`StoreError::Locked`] when another process holds it; `Unusable` when the lock file
    /// cannot be made.
    pub(super) fn acquire(state_dir: &Path) -> Result<Self, StoreError> {
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
            if let Err(e) = flock(&file, FlockOperation::NonBlockingLockExclusive) {
                if e == rustix::io::Errno::WOULDBLOCK {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    return Err(StoreError::Locked {
                        dir: state_dir.to_owned(),
                        pid: text.trim().parse().ok(),
                    });
                }
                return Err(unusable(e.into()));
            }
        }
        file.set_len(0).map_err(unusable)?;
        file.rewind().map_err(unusable)?;
        writeln!(file, "{}", std::process::id()).map_err(unusable)?;
        file.flush().map_err(unusable)?;
        Ok(Self { _file: file, path })
    }

    /// The lock file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_first_holder_and_a_dropped_one_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let first = StateLock::acquire(dir.path()).unwrap();
        // flock locks belong to the open file: a second open in this process conflicts too.
        let err = StateLock::acquire(dir.path()).unwrap_err();
        assert!(
            matches!(err, StoreError::Locked { pid: Some(p), .. } if p == std::process::id()),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        drop(first);
        StateLock::acquire(dir.path()).unwrap();
    }
}
