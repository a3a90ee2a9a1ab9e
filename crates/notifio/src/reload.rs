//! Live config: `watch` follows its config file and reloads on SIGHUP, and what changed
//! between two configs, as the running watcher applies it (docs/config.md#live-reload).
//!
//! Two halves. [`ConfigChange::between`] is pure: which searches were added, removed, renamed
//! or changed, and which settings only a restart can apply (the dashboard's address, the
//! state directory, the notifier's channels…), which keep their running values rather than
//! half-apply. [`follow`] does the I/O: it watches the file's directory with the `notify`
//! crate (inotify, FSEvents, kqueue), re-reads it on an event, on SIGHUP, on a
//! [`Nudge`] from the dashboard after it wrote the file, and every few seconds as a fallback
//! (a network filesystem may send no events), and yields each new text as a validated
//! [`Config`] or the error with `file:line:col`. Dashboard edits and edits by hand both reach
//! the watcher this way: one path.

use crate::config::{self, Config, ConfigError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// How long the file must be quiet after an event before it is read: a save is often several
/// writes (an editor's, a script's in chunks), and a half-written file must not be applied
/// (it would drop the searches not written yet). The dashboard's writer waits the same.
const SETTLE: Duration = config::write::SETTLE;
/// How often the file is read anyway when filesystem events work (they may not arrive on a
/// network filesystem), and when they do not.
const POLL_WITH_EVENTS: Duration = Duration::from_secs(10);
const POLL_WITHOUT_EVENTS: Duration = Duration::from_secs(1);

/// A reloaded config, or why the file cannot be used (the running config stays in force).
pub type Reloaded = Result<Config, ConfigError>;

/// What changed between the running config and a new one, and the config in force once the
/// change is applied.
#[derive(Clone, Debug)]
pub struct ConfigChange {
    /// Searches new in the file (by name): their first check is a silent baseline.
    pub added: Vec<String>,
    /// Searches no longer in the file: they stop; their history stays.
    pub removed: Vec<String>,
    /// Searches whose settings differ (URL, interval, listing rules, channels, paused, …):
    /// they apply from the search's next check.
    pub changed: Vec<String>,
    /// `(old, new)`: a search renamed with its URL unchanged keeps its history under the new
    /// name (one removed and one added search with the same URL, and no other with it).
    pub renamed: Vec<(String, String)>,
    /// Settings that differ but apply only at the next start, by key (`watch.dashboard`,
    /// `notify`, `site."x".cookies`). They keep their running values in [`Self::config`].
    pub restart_needed: Vec<String>,
    /// The config in force after the change: the new one, with the settings in
    /// [`Self::restart_needed`] as they were.
    pub config: Config,
}

impl ConfigChange {
    /// What applying `new` to a watcher running `running` changes.
    #[must_use]
    pub fn between(running: &Config, new: Config) -> Self {
        let mut config = new;
        let mut restart_needed = Vec::new();
        {
            let mut keep = |key: &str, differs: bool| {
                if differs {
                    restart_needed.push(key.to_owned());
                }
                differs
            };
            let (w, r) = (&mut config.watch, &running.watch);
            if keep("watch.state_dir", w.state_dir != r.state_dir) {
                w.state_dir.clone_from(&r.state_dir);
            }
            if keep("watch.dashboard", w.dashboard != r.dashboard) {
                w.dashboard = r.dashboard;
            }
            if keep(
                "watch.dashboard_token",
                w.dashboard_token != r.dashboard_token,
            ) {
                w.dashboard_token.clone_from(&r.dashboard_token);
            }
            if keep(
                "watch.dashboard_hosts",
                w.dashboard_hosts != r.dashboard_hosts,
            ) {
                w.dashboard_hosts.clone_from(&r.dashboard_hosts);
            }
            if keep("watch.concurrency", w.concurrency != r.concurrency) {
                w.concurrency = r.concurrency;
            }
            if keep("backoff", config.backoff != running.backoff) {
                config.backoff = running.backoff.clone();
            }
            if keep("retry", config.retry != running.retry) {
                config.retry = running.retry.clone();
            }
            if keep("fetch", config.fetch != running.fetch) {
                config.fetch = running.fetch.clone();
            }
            if keep("notify", config.notify != running.notify) {
                config.notify = running.notify.clone();
            }
            if keep("browser", config.browser != running.browser) {
                config.browser = running.browser.clone();
            }
            // A cookies file added or changed is read when the change applies; one taken away
            // stays loaded until the next start.
            for (site, old) in &running.sites {
                let gone = old.cookies.is_some()
                    && config.sites.get(site).is_none_or(|s| s.cookies.is_none());
                if keep(&format!("site.{site:?}.cookies"), gone) {
                    config.sites.entry(site.clone()).or_default().cookies = old.cookies.clone();
                }
            }
        }

        let old_names: Vec<&str> = running.searches.iter().map(|s| s.name.as_str()).collect();
        let mut added: Vec<String> = Vec::new();
        let mut changed = Vec::new();
        for s in &config.searches {
            match running.searches.iter().find(|o| o.name == s.name) {
                None => added.push(s.name.clone()),
                Some(o) if o != s => changed.push(s.name.clone()),
                Some(_) => {}
            }
        }
        let mut removed: Vec<String> = old_names
            .iter()
            .filter(|n| !config.searches.iter().any(|s| s.name == **n))
            .map(|n| (*n).to_owned())
            .collect();
        let mut renamed = Vec::new();
        let url_of = |c: &Config, name: &str| {
            c.searches
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.url.clone())
        };
        for old in removed.clone() {
            let url = url_of(running, &old);
            let same_url = |c: &Config, names: &[String]| {
                names
                    .iter()
                    .filter(|n| url_of(c, n) == url)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            let olds = same_url(running, &removed);
            let news = same_url(&config, &added);
            if let ([_], [new]) = (olds.as_slice(), news.as_slice()) {
                renamed.push((old.clone(), new.clone()));
            }
        }
        for (old, new) in &renamed {
            removed.retain(|n| n != old);
            added.retain(|n| n != new);
            let before = running.searches.iter().find(|s| &s.name == old);
            let after = config.searches.iter().find(|s| &s.name == new);
            if let (Some(b), Some(a)) = (before, after) {
                let same = config::SearchConfig {
                    name: a.name.clone(),
                    ..b.clone()
                };
                if same != *a {
                    changed.push(new.clone());
                }
            }
        }
        Self {
            added,
            removed,
            changed,
            renamed,
            restart_needed,
            config,
        }
    }

    /// Whether no search changes (settings that need a restart may still differ).
    #[must_use]
    pub fn no_search_changes(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.renamed.is_empty()
    }

    /// One line for the log: "1 search added (`A`), 1 changed (`B`); restart needed for
    /// watch.dashboard".
    #[must_use]
    pub fn summary(&self) -> String {
        let list = |names: &[String]| {
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        for (what, names) in [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
        ] {
            if !names.is_empty() {
                let n = names.len();
                parts.push(format!(
                    "{n} search{} {what} ({})",
                    if n == 1 { "" } else { "es" },
                    list(names)
                ));
            }
        }
        for (old, new) in &self.renamed {
            parts.push(format!("`{old}` renamed `{new}`"));
        }
        let mut s = if parts.is_empty() {
            "no search changed".to_owned()
        } else {
            parts.join(", ")
        };
        if !self.restart_needed.is_empty() {
            s.push_str(&format!(
                "; restart needed for {}",
                self.restart_needed.join(", ")
            ));
        }
        s
    }
}

/// Asks the follower to read the file now (the dashboard, right after writing it).
#[derive(Clone, Debug, Default)]
pub struct Nudge(Arc<Notify>);

impl Nudge {
    /// Read the file as soon as possible.
    pub fn now(&self) {
        self.0.notify_one();
    }
}

/// Follows the config file at `path` until `cancel` fires: the text on disk now is yielded
/// first (an edit made since the running config was read is not missed; the same config
/// again changes nothing), then each text that differs from the last one read, and the text
/// at every SIGHUP, changed or not, each validated.
#[must_use]
pub fn follow(
    path: PathBuf,
    loaded: u64,
    cancel: CancellationToken,
) -> (mpsc::Receiver<Reloaded>, Nudge) {
    let (tx, rx) = mpsc::channel(4);
    let nudge = Nudge::default();
    let wake = Arc::clone(&nudge.0);
    // Read before this returns, so that an edit made right after is seen as one.
    // Parsed only when it is not the text the running config came from (an edit between
    // the start's read and this one): parsing a config of a thousand searches again costs
    // a few MB at start for nothing.
    let first = std::fs::read_to_string(&path).ok();
    if let Some(text) = first
        .as_deref()
        .filter(|t| config::text_digest(t) != loaded)
    {
        let _ = tx.try_send(config::load_text(text, &path));
    }
    // The last text read, as its digest: a thousand searches' config is ~130 KB to keep for
    // one comparison.
    let mut last = first.as_deref().map(config::text_digest);
    drop(first);
    // Watching before this returns, too.
    let (events_tx, mut events) = mpsc::unbounded_channel::<()>();
    let watcher = watch_dirs(&path, events_tx);
    tokio::spawn(async move {
        if let Err(e) = &watcher {
            tracing::info!(
                "cannot watch {} for changes ({e}); reading it every {}s instead",
                path.display(),
                POLL_WITHOUT_EVENTS.as_secs()
            );
        }
        let poll = if watcher.is_ok() {
            POLL_WITH_EVENTS
        } else {
            POLL_WITHOUT_EVENTS
        };
        let mut hangup = hangup();
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            let force = tokio::select! {
                () = cancel.cancelled() => break,
                Some(()) = events.recv() => {
                    // Let the save finish: every event meanwhile is the same save, and the
                    // file is read once it has been left alone for SETTLE.
                    loop {
                        if let Ok(Some(())) = tokio::time::timeout(SETTLE, events.recv()).await {
                            continue;
                        }
                        // A writer whose events did not reach us (its file's time says).
                        let rest = config::write::unsettled_for(&path);
                        if rest.is_zero() {
                            break;
                        }
                        tokio::time::sleep(rest).await;
                    }
                    false
                }
                // The dashboard wrote the file whole, in one rename: read it now.
                () = wake.notified() => false,
                () = next_hangup(&mut hangup) => {
                    tracing::info!("SIGHUP: reloading {}", path.display());
                    true
                }
                _ = ticker.tick() => {
                    // Being written right now: the next event or tick reads it.
                    if !config::write::unsettled_for(&path).is_zero() {
                        continue;
                    }
                    false
                }
            };
            let read = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || std::fs::read_to_string(&path))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
            };
            let reloaded = match read {
                Ok(text) => {
                    let digest = config::text_digest(&text);
                    if !force && last == Some(digest) {
                        continue;
                    }
                    last = Some(digest);
                    let at = path.clone();
                    tokio::task::spawn_blocking(move || config::load_text(&text, &at))
                        .await
                        .unwrap_or_else(|e| {
                            Err(ConfigError::file(
                                &path,
                                format!("reading it failed: {e}"),
                                None,
                            ))
                        })
                }
                Err(e) => {
                    // Gone for a moment (an editor replacing it) reads again on its next event.
                    if last.take().is_none() && !force {
                        continue;
                    }
                    Err(ConfigError::file(
                        &path,
                        format!("cannot read the config file: {e}"),
                        None,
                    ))
                }
            };
            if tx.send(reloaded).await.is_err() {
                break;
            }
        }
        drop(watcher);
    });
    (rx, nudge)
}

/// Watches the directories holding the config file (and its target, when it is a symlink):
/// editors replace a file by renaming a new one over it, which a watch on the file itself
/// would not survive. Only events naming the file are passed on.
fn watch_dirs(
    path: &Path,
    tx: mpsc::UnboundedSender<()>,
) -> notify::Result<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    let mut names: Vec<std::ffi::OsString> = path.file_name().into_iter().map(Into::into).collect();
    let mut dirs = vec![dir_of(path)];
    if let Ok(target) = std::fs::canonicalize(path) {
        names.extend(target.file_name().map(Into::into));
        let dir = dir_of(&target);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res
            && changes_the_file(ev.kind)
            && ev
                .paths
                .iter()
                .any(|p| p.file_name().is_some_and(|n| names.iter().any(|x| x == n)))
        {
            let _ = tx.send(());
        }
    })?;
    for dir in &dirs {
        watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// Whether an event can mean new contents: not one of the file being opened or read, which
/// our own read of it causes (the follower would otherwise wake itself ten times a second,
/// reading the file each time: 7% of `watch`'s CPU with a config of 1,000 searches).
fn changes_the_file(kind: notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    match kind {
        notify::EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        notify::EventKind::Access(_) => false,
        _ => true,
    }
}

fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = Option<()>;

fn hangup() -> Hangup {
    #[cfg(unix)]
    {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
    }
    #[cfg(not(unix))]
    {
        None
    }
}

async fn next_hangup(h: &mut Hangup) {
    #[cfg(unix)]
    if let Some(s) = h
        && s.recv().await.is_some()
    {
        return;
    }
    let _ = h;
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"[watch]
state_dir = "/tmp/notifio-reload-test"
dashboard = "127.0.0.1:7878"

[[search]]
name = "A"
url = "https://www.idealista.com/alquiler-viviendas/a/"

[[search]]
name = "B"
url = "https://www.idealista.com/alquiler-viviendas/b/"
interval = "1m"
"#;

    fn parse(text: &str) -> Config {
        config::parse(text, Path::new("notifio.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn searches_added_removed_and_changed_are_told_apart() {
        let running = parse(BASE);
        let new = BASE
            .replace("interval = \"1m\"", "interval = \"2m\"")
            .replace(
                "name = \"A\"\nurl = \"https://www.idealista.com/alquiler-viviendas/a/\"",
                "name = \"C\"\nurl = \"https://www.idealista.com/alquiler-viviendas/c/\"",
            );
        let change = ConfigChange::between(&running, parse(&new));
        assert_eq!(change.added, ["C"]);
        assert_eq!(change.removed, ["A"]);
        assert_eq!(change.changed, ["B"]);
        assert!(change.renamed.is_empty());
        assert!(change.restart_needed.is_empty());
        assert_eq!(
            change.summary(),
            "1 search added (`C`), 1 search removed (`A`), 1 search changed (`B`)"
        );
        let same = ConfigChange::between(&running, parse(BASE));
        assert!(same.no_search_changes(), "{same:?}");
        assert_eq!(same.summary(), "no search changed");
    }

    #[test]
    fn a_new_name_on_the_same_url_is_a_rename() {
        let running = parse(BASE);
        let change = ConfigChange::between(&running, parse(&BASE.replace("\"B\"", "\"B2\"")));
        assert_eq!(change.renamed, [("B".to_owned(), "B2".to_owned())]);
        assert!(change.added.is_empty() && change.removed.is_empty());
        assert!(change.changed.is_empty());
        // Renamed and retimed: a rename that also changed.
        let both = BASE.replace("\"B\"", "\"B2\"").replace("\"1m\"", "\"5m\"");
        let change = ConfigChange::between(&running, parse(&both));
        assert_eq!(change.renamed.len(), 1);
        assert_eq!(change.changed, ["B2"]);
        // Two new searches on the old URL: which one is the old one is anybody's guess.
        let two = BASE.replace("name = \"B\"", "name = \"B2\"")
            + "\n[[search]]\nname = \"B3\"\nurl = \"https://www.idealista.com/alquiler-viviendas/b/\"\n";
        let change = ConfigChange::between(&running, parse(&two));
        assert!(change.renamed.is_empty());
        assert_eq!(change.removed, ["B"]);
        assert_eq!(change.added, ["B2", "B3"]);
    }

    #[test]
    fn the_dashboard_and_state_dir_need_a_restart_and_keep_their_running_values() {
        let running = parse(BASE);
        let new = BASE
            .replace("7878", "7979")
            .replace("/tmp/notifio-reload-test", "/tmp/elsewhere")
            + "\n[notify]\nmailbox = \"/tmp/x.mbox\"\n";
        let new = new.replacen(
            "[[search]]\nname = \"A\"",
            "[[search]]\npaused = true\nname = \"A\"",
            1,
        );
        let change = ConfigChange::between(&running, parse(&new));
        // The browser's profile lives in the state directory, so it moves too.
        assert_eq!(
            change.restart_needed,
            ["watch.state_dir", "watch.dashboard", "notify", "browser"]
        );
        assert_eq!(change.config.watch.dashboard, running.watch.dashboard);
        assert_eq!(change.config.watch.state_dir, running.watch.state_dir);
        assert_eq!(change.config.notify, running.notify);
        // The search change applies all the same.
        assert_eq!(change.changed, ["A"]);
        assert!(change.config.searches[0].paused);
        assert!(
            change.summary().ends_with(
                "; restart needed for watch.state_dir, watch.dashboard, notify, browser"
            )
        );
    }

    /// Our own reading of the file (open, read, close) is not a change; a write, a rename, a
    /// removal or a close after writing is.
    #[test]
    fn reading_the_file_is_not_a_change_of_it() {
        use notify::EventKind;
        use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind};
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            assert!(!changes_the_file(kind), "{kind:?}");
        }
        for kind in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
        ] {
            assert!(changes_the_file(kind), "{kind:?}");
        }
    }

    async fn next(rx: &mut mpsc::Receiver<Reloaded>) -> Reloaded {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a reload within 5 s")
            .expect("the follower runs")
    }

    #[tokio::test]
    async fn an_edit_is_yielded_validated_and_an_unchanged_save_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        let text = BASE.replace(
            "/tmp/notifio-reload-test",
            &dir.path().display().to_string(),
        );
        std::fs::write(&path, &text).unwrap();
        let cancel = CancellationToken::new();
        // Not the text the watcher loaded (digest 0): the first read is yielded.
        let (mut rx, nudge) = follow(path.clone(), 0, cancel.clone());
        let first = next(&mut rx).await.unwrap();
        assert_eq!(first.searches[1].interval, Duration::from_secs(60));
        std::fs::write(&path, text.replace("\"1m\"", "\"3m\"")).unwrap();
        let c = next(&mut rx).await.unwrap();
        assert_eq!(c.searches[1].interval, Duration::from_secs(180));
        // A broken edit is yielded as the error, at its place.
        std::fs::write(&path, text.replace("\"1m\"", "\"soon\"")).unwrap();
        let e = next(&mut rx).await.unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (12, "search[1].interval"), "{e}");
        // The same text again (a nudge, or an editor saving without changes) is not.
        std::fs::write(&path, text.replace("\"1m\"", "\"soon\"")).unwrap();
        nudge.now();
        assert!(
            tokio::time::timeout(Duration::from_millis(500), rx.recv())
                .await
                .is_err()
        );
        // Replaced by a rename, as editors and the dashboard save.
        let tmp = dir.path().join(".notifio.toml.new");
        std::fs::write(&tmp, &text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        let c = next(&mut rx).await.unwrap();
        assert_eq!(c.searches[1].interval, Duration::from_secs(60));
        cancel.cancel();
    }

    /// The text the running config was loaded from is not parsed again at start; the first
    /// edit after it is.
    #[tokio::test]
    async fn the_text_already_running_is_not_yielded_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notifio.toml");
        let text = BASE.replace(
            "/tmp/notifio-reload-test",
            &dir.path().display().to_string(),
        );
        std::fs::write(&path, &text).unwrap();
        let loaded = config::load(&path).unwrap();
        assert_eq!(loaded.text_digest, config::text_digest(&text));
        let cancel = CancellationToken::new();
        let (mut rx, _nudge) = follow(path.clone(), loaded.text_digest, cancel.clone());
        assert!(
            tokio::time::timeout(Duration::from_millis(300), rx.recv())
                .await
                .is_err(),
            "the running text came back as a reload"
        );
        std::fs::write(&path, text.replace("\"1m\"", "\"3m\"")).unwrap();
        let c = next(&mut rx).await.unwrap();
        assert_eq!(c.searches[1].interval, Duration::from_secs(180));
        cancel.cancel();
    }
}
