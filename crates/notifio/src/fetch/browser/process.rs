//! The browser program: finding it (PATH, then the usual install locations), the command
//! line we start it with (each flag with its reason; none changes how the browser presents
//! itself to a site), starting it so that it dies with us, and `notifio login`'s window.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use super::{OWNER_ENV, lock};

/// How long the browser may take to start and print its DevTools address.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(20);

/// Browsers looked for on PATH, in this order (Chromium first).
const ON_PATH: [&str; 7] = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
    "msedge",
    "brave-browser",
];

/// The usual install locations, tried after PATH.
fn install_locations() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if cfg!(target_os = "macos") {
        for app in [
            "Google Chrome.app/Contents/MacOS/Google Chrome",
            "Chromium.app/Contents/MacOS/Chromium",
            "Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
            "Brave Browser.app/Contents/MacOS/Brave Browser",
        ] {
            out.push(Path::new("/Applications").join(app));
            if let Some(home) = std::env::var_os("HOME") {
                out.push(Path::new(&home).join("Applications").join(app));
            }
        }
    } else if cfg!(windows) {
        for (var, rel) in [
            ("ProgramFiles", r"Google\Chrome\Application\chrome.exe"),
            ("ProgramFiles(x86)", r"Google\Chrome\Application\chrome.exe"),
            ("LOCALAPPDATA", r"Google\Chrome\Application\chrome.exe"),
            (
                "ProgramFiles(x86)",
                r"Microsoft\Edge\Application\msedge.exe",
            ),
            ("ProgramFiles", r"Microsoft\Edge\Application\msedge.exe"),
            (
                "ProgramFiles",
                r"BraveSoftware\Brave-Browser\Application\brave.exe",
            ),
            ("LOCALAPPDATA", r"Chromium\Application\chrome.exe"),
        ] {
            if let Some(base) = std::env::var_os(var) {
                out.push(Path::new(&base).join(rel));
            }
        }
    } else {
        for p in [
            "/usr/bin/chromium",
            "/usr/bin/chromium-browser",
            "/snap/bin/chromium",
            "/usr/lib/chromium/chromium",
            "/usr/bin/google-chrome",
            "/usr/bin/google-chrome-stable",
            "/opt/google/chrome/chrome",
            "/usr/bin/microsoft-edge",
            "/opt/microsoft/msedge/msedge",
            "/usr/bin/brave-browser",
            "/opt/brave.com/brave/brave",
            "/var/lib/flatpak/exports/bin/org.chromium.Chromium",
        ] {
            out.push(PathBuf::from(p));
        }
    }
    out
}

/// How to install a browser on this platform, for the "no browser" message.
#[must_use]
pub fn install_hint() -> &'static str {
    if cfg!(target_os = "macos") {
        "install Google Chrome or Chromium (`brew install --cask chromium`), or set \
         [browser] executable to its path"
    } else if cfg!(windows) {
        "install Google Chrome or Microsoft Edge, or set [browser] executable to its path"
    } else {
        "install Chromium (Debian/Ubuntu: `sudo apt install chromium`; Fedora: `sudo dnf install \
         chromium`), or set [browser] executable to its path"
    }
}

/// Why no browser can be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    /// `NOTIFIO_BROWSER=none`: the user said there is none.
    #[error("there is no browser (NOTIFIO_BROWSER=none)")]
    Disabled,
    /// Nothing was configured and nothing was found.
    #[error(
        "no Chromium, Chrome, Edge or Brave found (looked for {} on PATH and in the usual \
         install locations)",
        ON_PATH.join(", ")
    )]
    NotFound,
    /// The configured executable does not exist or cannot be run.
    #[error("`{0}` {1}")]
    Unusable(String, &'static str),
}

/// Finds the browser to start: `configured` (a path, or a command name on PATH) if given,
/// else the first of [`ON_PATH`] on `path_var`, else the first existing install location.
///
/// # Errors
/// [`FindError`], for the user.
pub fn find_executable(
    configured: Option<&str>,
    path_var: Option<std::ffi::OsString>,
) -> Result<PathBuf, FindError> {
    find_in(configured, path_var, &install_locations())
}

fn is_runnable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

fn find_in(
    configured: Option<&str>,
    path_var: Option<std::ffi::OsString>,
    locations: &[PathBuf],
) -> Result<PathBuf, FindError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let on_path = |name: &str| which::which_in(name, path_var.clone(), &cwd).ok();
    if let Some(c) = configured {
        if c.eq_ignore_ascii_case("none") {
            return Err(FindError::Disabled);
        }
        if c.contains(['/', '\\']) {
            let p = PathBuf::from(c);
            return if !p.exists() {
                Err(FindError::Unusable(c.to_owned(), "does not exist"))
            } else if !is_runnable(&p) {
                Err(FindError::Unusable(
                    c.to_owned(),
                    "is not an executable file",
                ))
            } else {
                Ok(p)
            };
        }
        return on_path(c).ok_or_else(|| FindError::Unusable(c.to_owned(), "is not on PATH"));
    }
    ON_PATH
        .iter()
        .find_map(|name| on_path(name))
        .or_else(|| locations.iter().find(|p| is_runnable(p)).cloned())
        .ok_or(FindError::NotFound)
}

/// The command line we start the browser with. Every flag has a reason a user would accept;
/// none changes how the browser presents itself to a site.
#[must_use]
pub fn launch_args(
    profile_dir: &Path,
    headless: bool,
    as_root: bool,
    block_images: bool,
    start_url: &str,
) -> Vec<String> {
    let mut args = vec![
        // CDP on a free loopback port; the browser prints the address on stderr and writes
        // it to `DevToolsActivePort` in the profile.
        "--remote-debugging-port=0".to_owned(),
        format!("--user-data-dir={}", profile_dir.display()),
        // The browser talks to the sites you watch and nothing else: no first-run pages, no
        // background calls home for updates, sync, translations or safe-browsing lists.
        "--no-first-run".to_owned(),
        "--no-default-browser-check".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--disable-default-apps".to_owned(),
        // The same cookie store for the headless browser and `notifio login`'s window, and
        // no OS keyring prompt from a browser nobody sees (the profile is 0700 instead).
        "--password-store=basic".to_owned(),
        "--use-mock-keychain".to_owned(),
        // A page that allocates without end crashes its own tab, not the machine.
        "--js-flags=--max-old-space-size=512".to_owned(),
        // Containers keep /dev/shm tiny; the browser would crash on large pages.
        "--disable-dev-shm-usage".to_owned(),
        // A check leaves each page for good, so keeping left pages for "Back" only costs
        // memory: with the back/forward cache on, every page left stayed alive in a renderer
        // of its own (~30 renderers and 1.1 GB PSS after a minute of four tabs in the browser
        // benchmark); without it a few renderers are reused (~450 MB).
        "--disable-features=BackForwardCache".to_owned(),
        // Each tab reads its page as the tab in front would: a tab nobody looks at has its
        // timers slowed to once a second, so a page whose cards a timer builds was read before
        // they were there (`layout_unknown`: 10 of 30 such pages in four tabs, 0 with this).
        "--disable-background-timer-throttling".to_owned(),
    ];
    if headless {
        args.push("--headless".to_owned());
        args.push("--mute-audio".to_owned());
        if block_images {
            // `block` holds `image`: images are refused where they are requested (the tab's
            // request interception) and, here, never asked for by the page at all. With the
            // interception alone, one image of twenty sometimes reached the site (a flaky
            // `blocked_resource_types_are_never_requested` in CI). A window a person looks
            // at (`notifio login`) shows its images.
            args.push("--blink-settings=imagesEnabled=false".to_owned());
        }
    }
    if as_root {
        // Chromium refuses to start as root with its sandbox on (CI runs as root).
        args.push("--no-sandbox".to_owned());
    }
    args.push(start_url.to_owned());
    args
}

/// Whether this process runs as root (then the browser needs `--no-sandbox`).
#[must_use]
pub fn running_as_root() -> bool {
    #[cfg(unix)]
    {
        rustix::process::geteuid().is_root()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// A browser process we started, and its process group.
pub(super) struct Process {
    child: Child,
}

impl Process {
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the browser and everything it started (its process group), then reaps it.
    pub(super) fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid().cast_signed()) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(super) fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Asks the browser to quit (SIGTERM: it closes cleanly, writing its cookies).
    fn terminate(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid().cast_signed()) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        #[cfg(not(unix))]
        let _ = self.child.kill();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.exited() {
            self.kill();
        } else {
            // The group may still hold helpers (zygote, renderers) for a moment.
            #[cfg(unix)]
            if let Some(pid) = rustix::process::Pid::from_raw(self.pid().cast_signed()) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Runs `cmd.spawn()` on one thread that lives as long as the process. On Linux the browser
/// gets a parent-death signal, and the kernel sends that when the *thread* that spawned it
/// ends: a runtime's worker or blocking thread may end long before we do.
fn spawn_detached(cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: std::sync::OnceLock<Mutex<std::sync::mpsc::Sender<Job>>> =
        std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("notifio-browser-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            });
        if let Err(e) = started {
            tracing::warn!(error = %e, "cannot start the browser spawner thread");
        }
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = std::sync::mpsc::channel();
    lock(spawner)
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("the browser spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| std::io::Error::other("the browser spawner thread is gone"))?
}

/// Starts the browser and waits for its DevTools address on stderr. Stderr keeps being read
/// (and logged at debug level) on a thread of its own, so the browser never blocks on a full
/// pipe; its last lines explain a failed start.
pub(super) async fn start_process(
    executable: &Path,
    profile_dir: &Path,
    headless: bool,
    block_images: bool,
    start_url: &str,
) -> Result<(Process, String), String> {
    create_profile_dir(profile_dir)?;
    if let Some(pid) = profile_in_use(profile_dir) {
        return Err(format!(
            "the browser profile {} is in use by another browser (pid {pid}): is another \
             `notifio watch`, `check` or `login` running? A profile serves one browser at a time",
            profile_dir.display()
        ));
    }
    let as_root = running_as_root();
    if as_root {
        tracing::info!("running as root: starting the browser with --no-sandbox");
    }
    let mut cmd = Command::new(executable);
    cmd.args(launch_args(
        profile_dir,
        headless,
        as_root,
        block_images,
        start_url,
    ))
    .env(OWNER_ENV, std::process::id().to_string())
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Its own process group: Ctrl-C in the terminal reaches us, not the browser (we close
        // it ourselves, cookies flushed), and the whole group can be killed at once.
        cmd.process_group(0);
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = rustix::process::getpid();
        // SAFETY: the closure runs in the forked child before exec and only makes two system
        // calls (prctl, getppid) that are async-signal-safe; it allocates nothing. It is why
        // no browser of ours outlives notifio, even after a SIGKILL: an orphaned Chromium
        // would otherwise keep ~300 MB and its connections to the sites until the user finds
        // and kills it by hand.
        unsafe {
            cmd.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))?;
                // The parent died between fork and prctl: the signal will never come.
                if rustix::process::getppid() != Some(parent) {
                    return Err(std::io::Error::other("notifio exited"));
                }
                Ok(())
            });
        }
    }
    let mut child =
        spawn_detached(cmd).map_err(|e| format!("cannot start {}: {e}", executable.display()))?;
    let stderr = child.stderr.take();
    let mut process = Process { child };
    let (url_tx, url_rx) = tokio::sync::oneshot::channel::<Result<String, String>>();
    let Some(stderr) = stderr else {
        return Err("the browser's stderr is not readable".into());
    };
    let reader = std::thread::Builder::new()
        .name("notifio-browser-log".into())
        .spawn(move || {
            let mut tx = Some(url_tx);
            let mut tail: Vec<String> = Vec::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                tracing::debug!(target: "notifio::browser", "{line}");
                if let Some(at) = line.find("ws://") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(Ok(line[at..].trim().to_owned()));
                    }
                } else if tx.is_some() {
                    if tail.len() >= 8 {
                        tail.remove(0);
                    }
                    tail.push(line);
                }
            }
            if let Some(tx) = tx.take() {
                let said = tail.join(" / ");
                let _ = tx.send(Err(if said.is_empty() {
                    "the browser exited at once".to_owned()
                } else {
                    format!("the browser exited at once: {said}")
                }));
            }
        });
    if let Err(e) = reader {
        return Err(format!("cannot read the browser's output: {e}"));
    }
    match tokio::time::timeout(LAUNCH_TIMEOUT, url_rx).await {
        Ok(Ok(Ok(url))) => Ok((process, url)),
        Ok(Ok(Err(said))) => {
            process.kill();
            Err(said)
        }
        Ok(Err(_)) => {
            process.kill();
            Err("the browser exited at once".into())
        }
        Err(_) => {
            process.kill();
            Err(format!(
                "the browser did not start within {} s",
                LAUNCH_TIMEOUT.as_secs()
            ))
        }
    }
}

/// The pid of a live browser that holds `profile_dir` (Chromium's `SingletonLock` link names
/// `host-pid`), if any. Two browsers cannot share a profile: the second would hand its window
/// to the first and exit.
fn profile_in_use(profile_dir: &Path) -> Option<u32> {
    let target = std::fs::read_link(profile_dir.join("SingletonLock")).ok()?;
    let pid: u32 = target.to_string_lossy().rsplit('-').next()?.parse().ok()?;
    if pid == std::process::id() {
        return None;
    }
    #[cfg(target_os = "linux")]
    {
        Path::new("/proc")
            .join(pid.to_string())
            .exists()
            .then_some(pid)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Some(pid)
    }
}

/// The DevTools address of a live browser that already holds `profile_dir` (the browser of a
/// `notifio watch` that runs beside a `check`, read from the `DevToolsActivePort` file it
/// writes in the profile), if any.
pub(super) fn already_running(profile_dir: &Path) -> Option<String> {
    profile_in_use(profile_dir)?;
    let text = std::fs::read_to_string(profile_dir.join("DevToolsActivePort")).ok()?;
    let mut lines = text.lines();
    let port: u16 = lines.next()?.trim().parse().ok()?;
    let path = lines.next()?.trim();
    path.starts_with("/devtools/browser/")
        .then(|| format!("ws://127.0.0.1:{port}{path}"))
}

/// Whether this machine can show the user a window (`notifio login`).
#[must_use]
pub fn has_display() -> bool {
    if cfg!(any(target_os = "macos", windows)) {
        return true;
    }
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

/// `notifio login`: opens the profile in a visible window on `url`, for the user to log in or
/// solve a challenge themselves, and returns when they close it (the browser's last window).
/// The session then lives in the profile, where every headless check finds it.
///
/// # Errors
/// No display, the profile in use, or a browser that does not start.
pub async fn login(executable: &Path, profile_dir: &Path, url: &str) -> Result<(), String> {
    if !has_display() {
        return Err(
            "there is no display to show a browser window on (DISPLAY and \
                    WAYLAND_DISPLAY are not set): run `notifio login` in your desktop session, \
                    or over `ssh -X`"
                .into(),
        );
    }
    let (mut process, ws) = start_process(executable, profile_dir, false, false, url).await?;
    // The DevTools HTTP endpoint of the same port: used only to see whether a window is left.
    let list = ws
        .strip_prefix("ws://")
        .and_then(|rest| rest.split('/').next())
        .map(|host| format!("http://{host}/json/list"));
    let mut empty_polls = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if process.exited() {
            return Ok(());
        }
        let Some(list) = &list else { continue };
        let pages = match crate::fetch::local_get(list).await {
            Ok(body) => serde_json::from_slice::<Vec<serde_json::Value>>(&body)
                .map(|targets| {
                    targets
                        .iter()
                        .filter(|t| t.get("type").and_then(|v| v.as_str()) == Some("page"))
                        .count()
                })
                .unwrap_or(1),
            Err(_) => 1,
        };
        empty_polls = if pages == 0 { empty_polls + 1 } else { 0 };
        if empty_polls >= 2 {
            // The last window is closed but the browser stays (macOS does): let it shut down
            // cleanly, so the new session reaches the disk.
            process.terminate();
            let until = Instant::now() + Duration::from_secs(10);
            while !process.exited() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            return Ok(());
        }
    }
}

/// The profile holds the user's sessions: only they may read it.
fn create_profile_dir(dir: &Path) -> Result<(), String> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
        .map_err(|e| format!("cannot create the browser profile {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launch_flags_never_hide_automation() {
        let args = launch_args(Path::new("/p"), true, false, true, "about:blank").join(" ");
        assert!(args.contains("--blink-settings=imagesEnabled=false"));
        assert!(
            !launch_args(Path::new("/p"), true, false, false, "about:blank")
                .join(" ")
                .contains("imagesEnabled"),
            "images load when `block` leaves them"
        );
        for banned in [
            "AutomationControlled",
            "disable-blink-features",
            "user-agent",
            "load-extension",
            "disable-popup-blocking",
        ] {
            assert!(!args.contains(banned), "{banned} in {args}");
        }
        assert!(args.contains("--user-data-dir=/p"));
        assert!(args.contains("--headless"));
        assert!(!args.contains("--no-sandbox"), "only as root");
        assert!(
            launch_args(Path::new("/p"), false, true, true, "about:blank")
                .iter()
                .any(|a| a == "--no-sandbox")
        );
        assert!(
            !launch_args(Path::new("/p"), false, false, true, "about:blank")
                .iter()
                .any(|a| a == "--headless")
        );
    }

    #[test]
    fn finding_the_executable() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("google-chrome");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = Some(dir.path().as_os_str().to_owned());
        assert_eq!(find_in(None, path.clone(), &[]), Ok(fake.clone()));
        let empty = tempfile::tempdir().unwrap();
        let nothing = Some(empty.path().as_os_str().to_owned());
        assert_eq!(
            find_in(None, nothing.clone(), &[]),
            Err(FindError::NotFound)
        );
        assert_eq!(
            find_in(None, nothing.clone(), std::slice::from_ref(&fake)),
            Ok(fake.clone()),
            "an install location after PATH"
        );
        assert_eq!(
            find_in(Some("none"), path.clone(), std::slice::from_ref(&fake)),
            Err(FindError::Disabled)
        );
        assert_eq!(
            find_in(Some("google-chrome"), path.clone(), &[]),
            Ok(fake.clone())
        );
        assert!(matches!(
            find_in(Some("/no/such/chromium"), path.clone(), &[]),
            Err(FindError::Unusable(_, "does not exist"))
        ));
        assert!(matches!(
            find_in(Some("chromium"), nothing, &[]),
            Err(FindError::Unusable(_, "is not on PATH"))
        ));
        let not_exec = dir.path().join("plain");
        std::fs::write(&not_exec, "x").unwrap();
        assert!(matches!(
            find_in(Some(not_exec.to_str().unwrap()), path, &[]),
            Err(FindError::Unusable(_, "is not an executable file"))
        ));
    }
}
