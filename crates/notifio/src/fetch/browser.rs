//! The browser transport: one attempt of a check made by a real Chromium over the DevTools
//! Protocol, with the user's own persistent profile (DESIGN §10, fetch modes).
//!
//! Sites that refuse plain HTTP clients (DataDome, AWS WAF, login walls) are read the way the
//! user reads them: in a browser, with the user's session. This module only *performs* an
//! attempt; the retry loop, the registry, the scheduler, `classify` and the extractors are the
//! same for every fetch mode. It owns the one browser of the process: started on the first
//! browser check, restarted after a crash, closed at exit; on Linux it dies with us even after a
//! SIGKILL (a parent-death signal). Nothing here hides automation or solves a challenge: the
//! headless browser says it is one (`HeadlessChrome`, `navigator.webdriver`), and a refusal
//! seen through it is backed off exactly like one seen over HTTP.
//!
//! Why `chromiumoxide`: a maintained, tokio-native CDP client with the whole protocol typed
//! from Chromium's own protocol files, a connection and event dispatch we do not have to write,
//! and no browser download of its own (we start the user's browser ourselves, so we can give
//! it a parent-death signal and a process group; `headless_chrome` is blocking and fetches a
//! browser, and WebDriver cannot read a navigation's status and headers).

use super::{Attempt, TransportFailure};
use bytes::Bytes;
use chromiumoxide::cdp::browser_protocol::browser::{
    EventDownloadWillBegin, SetDownloadBehaviorBehavior, SetDownloadBehaviorParams,
};
use chromiumoxide::cdp::browser_protocol::fetch::{
    self as cdp_fetch, EventRequestPaused, FailRequestParams, RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::inspector::EventTargetCrashed;
use chromiumoxide::cdp::browser_protocol::network::{
    ErrorReason, EventLoadingFailed, EventLoadingFinished, EventRequestWillBeSent,
    EventResponseReceived, Headers, ResourceType, SetExtraHttpHeadersParams,
};
use chromiumoxide::cdp::browser_protocol::page::{
    EventJavascriptDialogOpening, EventLoadEventFired, HandleJavaScriptDialogParams, NavigateParams,
};
use chromiumoxide::cdp::browser_protocol::target::{
    CloseTargetParams, CreateTargetParams, EventTargetCreated, TargetId,
};
use chromiumoxide::cdp::js_protocol::runtime::{EvaluateParams, TerminateExecutionParams};
use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::{Browser as CdpBrowser, Page};
use futures_util::StreamExt;
use futures_util::stream::{BoxStream, select_all};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The environment variable every browser process of ours carries (its value: our pid), so
/// that it can be told apart from the user's own browsers (`ps e`, tests reading `/proc`).
pub const OWNER_ENV: &str = "NOTIFIO_BROWSER_OWNER";

/// How long the browser may take to start and print its DevTools address.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(20);
/// "Network idle": the load event has fired and no request has been in flight this long.
const IDLE_AFTER: Duration = Duration::from_millis(500);
/// How often the page is asked whether its result list (or "no results" marker) is there yet.
const READY_POLL: Duration = Duration::from_millis(50);
/// A tab is closed and replaced after this many checks, so that nothing a site's pages leave
/// behind in it (and the CDP client's per-tab bookkeeping) grows over a day.
const CHECKS_PER_TAB: u32 = 50;
/// Idle tabs kept for reuse; more are closed.
const IDLE_TABS: usize = 8;
/// How long leaving a page for `about:blank` may take before the tab is closed instead.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Browsers looked for on PATH, in this order (DESIGN §10: Chromium first).
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

/// What the browser transport needs, resolved from `[browser]` at start.
#[derive(Clone, Debug)]
pub struct BrowserConfig {
    /// Start our own browser, or use one the user runs.
    pub launch: Launch,
    /// Resource types never requested (CDP names, lower-case: `image`, `media`, `font`).
    pub block: Vec<String>,
}

/// Where the browser comes from.
#[derive(Clone, Debug)]
pub enum Launch {
    /// Start this executable with this profile.
    Start {
        /// The browser executable.
        executable: PathBuf,
        /// The persistent profile directory (created 0700).
        profile_dir: PathBuf,
        /// Without a window.
        headless: bool,
    },
    /// Connect to the DevTools endpoint of a browser the user runs (`http://127.0.0.1:9222`,
    /// or its `ws://…` URL); only our own tabs are opened and closed.
    Connect {
        /// The DevTools URL.
        url: String,
    },
}

/// The command line we start the browser with. Every flag has a reason a user would accept;
/// none changes how the browser presents itself to a site.
#[must_use]
pub fn launch_args(
    profile_dir: &Path,
    headless: bool,
    as_root: bool,
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
    ];
    if headless {
        args.push("--headless".to_owned());
        args.push("--mute-audio".to_owned());
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
struct Process {
    child: Child,
}

impl Process {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the browser and everything it started (its process group), then reaps it.
    fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid().cast_signed()) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn exited(&mut self) -> bool {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the browser and waits for its DevTools address on stderr. Stderr keeps being read
/// (and logged at debug level) on a thread of its own, so the browser never blocks on a full
/// pipe; its last lines explain a failed start.
async fn start_process(
    executable: &Path,
    profile_dir: &Path,
    headless: bool,
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
    cmd.args(launch_args(profile_dir, headless, as_root, start_url))
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
    let (mut process, ws) = start_process(executable, profile_dir, false, url).await?;
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
        let pages = match super::local_get(list).await {
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

/// A running browser and what we keep of it.
struct Running {
    cdp: CdpBrowser,
    /// Drives the CDP connection; ends when the browser goes away.
    handler: JoinHandle<()>,
    /// `None` when connected to the user's own browser.
    process: Mutex<Option<Process>>,
    idle: Mutex<Vec<Tab>>,
    /// The target ids of our tabs (popups they open are closed).
    ours: Mutex<HashSet<TargetId>>,
    /// Closes popups opened by our tabs.
    popups: Mutex<Option<JoinHandle<()>>>,
}

impl Running {
    fn alive(&self) -> bool {
        !self.handler.is_finished()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.handler.abort();
        if let Some(p) = lock(&self.popups).take() {
            p.abort();
        }
    }
}

/// Closes every popup (a new page whose opener is one of our tabs) as soon as it appears: a
/// check reads one page, and a page that opens windows does not get to open them.
async fn close_popups(r: &Arc<Running>) {
    let Ok(mut created) = r.cdp.event_listener::<EventTargetCreated>().await else {
        return;
    };
    let weak = Arc::downgrade(r);
    let task = tokio::spawn(async move {
        while let Some(ev) = created.next().await {
            let Some(r) = weak.upgrade() else { break };
            let info = &ev.target_info;
            let from_ours = info
                .opener_id
                .as_ref()
                .is_some_and(|o| lock(&r.ours).contains(o));
            if from_ours {
                tracing::debug!("closing a popup a page opened");
                let _ = r
                    .cdp
                    .execute(CloseTargetParams::new(info.target_id.clone()))
                    .await;
            }
        }
    });
    *lock(&r.popups) = Some(task);
}

/// One of our tabs.
struct Tab {
    page: Page,
    checks: u32,
    /// An `X-Retry-Count` header is set on the tab.
    retry_header: bool,
    /// Answers blocked requests and dialogs for as long as the tab lives.
    guard: JoinHandle<()>,
}

impl Drop for Tab {
    fn drop(&mut self) {
        self.guard.abort();
    }
}

/// One browser check's request.
#[derive(Clone, Debug)]
pub(super) struct PageRequest<'a> {
    pub(crate) url: &'a str,
    /// A CSS selector that is in the DOM once the page shows its results (or says there are
    /// none); `None` = wait for the load event and 500 ms without requests.
    pub(crate) ready: Option<&'a str>,
    /// Retries so far (0 on the first attempt); `X-Retry-Count` when > 0 and `header`.
    pub(crate) retry_n: u32,
    pub(crate) header: bool,
    /// This attempt's timeout: the page is read before it runs out.
    pub(crate) timeout: Duration,
    /// Largest body kept (the DOM's text, UTF-8).
    pub(crate) body_cap: usize,
}

/// The one browser of the process. Cheap to share; started on the first browser check.
pub struct Browser {
    cfg: BrowserConfig,
    running: tokio::sync::Mutex<Option<Arc<Running>>>,
    starts: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// An attempt that failed before or without a page.
fn failed(url: &str, failure: TransportFailure, error: String, retryable: bool) -> Attempt {
    Attempt {
        status: None,
        final_url: url.to_owned(),
        headers: Vec::new(),
        body: Bytes::new(),
        failure: Some(failure),
        error: Some(error),
        held_at: None,
        retryable,
    }
}

impl Browser {
    /// A browser that starts (or connects) when first needed.
    #[must_use]
    pub fn new(cfg: BrowserConfig) -> Self {
        Self {
            cfg,
            running: tokio::sync::Mutex::new(None),
            starts: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// How many times a browser was started (or connected to) so far.
    #[must_use]
    pub fn starts(&self) -> u32 {
        self.starts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The pid of the browser we started, if one runs.
    pub async fn pid(&self) -> Option<u32> {
        let running = self.running.lock().await;
        let r = running.as_ref()?;
        lock(&r.process).as_ref().map(Process::pid)
    }

    /// The running browser, started (or restarted after a crash) if needed. Never more than
    /// one: a dead one is killed and reaped before another starts.
    async fn running(&self) -> Result<Arc<Running>, String> {
        let mut slot = self.running.lock().await;
        if let Some(r) = slot.as_ref() {
            if r.alive() {
                return Ok(Arc::clone(r));
            }
            tracing::warn!("the browser went away (crashed or killed); a new one starts");
        }
        if let Some(old) = slot.take()
            && let Some(mut p) = lock(&old.process).take()
        {
            p.kill();
        }
        let started = self.start().await?;
        self.starts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = Arc::new(started);
        close_popups(&r).await;
        *slot = Some(Arc::clone(&r));
        Ok(r)
    }

    async fn start(&self) -> Result<Running, String> {
        let (process, ws) = match &self.cfg.launch {
            Launch::Start {
                executable,
                profile_dir,
                headless,
            } => {
                let (p, ws) =
                    start_process(executable, profile_dir, *headless, "about:blank").await?;
                (Some(p), ws)
            }
            Launch::Connect { url } => (None, devtools_ws_url(url).await?),
        };
        let config = HandlerConfig {
            // Certificates are checked as in any browser.
            ignore_https_errors: false,
            // The page's own size, not an emulated one.
            viewport: None,
            request_timeout: Duration::from_secs(30),
            ..HandlerConfig::default()
        };
        let (cdp, mut handler) = CdpBrowser::connect_with_config(ws, config)
            .await
            .map_err(|e| format!("cannot connect to the browser's DevTools: {e}"))?;
        let handler = tokio::spawn(async move {
            // Each item is one round of processed messages. Unparsable events are skipped
            // inside; an error that reaches us is the connection's (the browser is gone), and
            // the stream would keep repeating it: stop, which drops every listener and pending
            // command, so the checks waiting on them end at once.
            while let Some(item) = handler.next().await {
                if let Err(e) = item {
                    tracing::debug!(error = %e, "the browser's DevTools connection ended");
                    break;
                }
            }
        });
        // Downloads are refused: a check reads pages, never files.
        let _ = cdp
            .execute(SetDownloadBehaviorParams {
                behavior: SetDownloadBehaviorBehavior::Deny,
                browser_context_id: None,
                download_path: None,
                // So that a check whose page turns out to be a download ends at once.
                events_enabled: Some(true),
            })
            .await;
        Ok(Running {
            cdp,
            handler,
            process: Mutex::new(process),
            idle: Mutex::new(Vec::new()),
            ours: Mutex::default(),
            popups: Mutex::new(None),
        })
    }

    /// Closes our tabs, and the browser if we started it (cleanly, so its cookies are on
    /// disk), waiting at most a few seconds before killing it.
    pub async fn shutdown(&self) {
        let running = self.running.lock().await.take();
        if let Some(r) = running {
            close(r).await;
        }
    }

    /// Runs `f` with the browser closed: the login window (`notifio login`, the dashboard's
    /// "Open in browser") needs the profile to itself. Closes the browser as
    /// [`Self::shutdown`] does, and no check can start another until `f` is done (one that
    /// tries waits); the next check after it starts the browser again, with the profile's
    /// new session.
    pub async fn while_closed<T>(&self, f: impl Future<Output = T>) -> T {
        let mut slot = self.running.lock().await;
        if let Some(r) = slot.take() {
            close(r).await;
        }
        let out = f.await;
        drop(slot);
        out
    }

    async fn take_tab(&self, r: &Arc<Running>) -> Result<Tab, String> {
        let idle = lock(&r.idle).pop();
        if let Some(t) = idle {
            return Ok(t);
        }
        let page = r
            .cdp
            .new_page(CreateTargetParams::new("about:blank"))
            .await
            .map_err(|e| format!("cannot open a tab: {e}"))?;
        lock(&r.ours).insert(page.target_id().clone());
        // The blocked resource types, and the site's icon: a check reads a page and shows no
        // tab strip, so the icon would be one more request to the site for nothing.
        let mut patterns: Vec<RequestPattern> = self
            .cfg
            .block
            .iter()
            .filter_map(|t| resource_type(t))
            .map(|t| RequestPattern {
                url_pattern: None,
                resource_type: Some(t),
                request_stage: Some(RequestStage::Request),
            })
            .collect();
        patterns.push(RequestPattern {
            url_pattern: Some("*/favicon.ico*".into()),
            resource_type: None,
            request_stage: Some(RequestStage::Request),
        });
        page.execute(cdp_fetch::EnableParams {
            patterns: Some(patterns),
            handle_auth_requests: None,
        })
        .await
        .map_err(|e| format!("cannot set up the tab: {e}"))?;
        let guard = tab_guard(&page).await?;
        Ok(Tab {
            page,
            checks: 0,
            retry_header: false,
            guard,
        })
    }

    /// Gives a tab back after a check: it leaves the page for `about:blank` (so nothing of the
    /// site runs between checks: no timers, polling or sockets), or is closed when that does
    /// not work or it has served its checks.
    async fn give_back(&self, r: &Arc<Running>, mut tab: Tab) {
        tab.checks += 1;
        let left = tokio::time::timeout(
            LEAVE_TIMEOUT,
            tab.page.execute(NavigateParams::new("about:blank")),
        )
        .await
        .is_ok_and(|res| res.is_ok());
        let keep = left && tab.checks < CHECKS_PER_TAB && lock(&r.idle).len() < IDLE_TABS;
        if keep {
            lock(&r.idle).push(tab);
        } else {
            close_tab(r, &tab).await;
        }
    }

    /// One attempt: navigate a tab, take the main document's status and headers, wait until
    /// the page is ready, read the rendered DOM, leave the page.
    pub(super) async fn attempt(&self, req: &PageRequest<'_>) -> Attempt {
        let started = Instant::now();
        let r = match self.running().await {
            Ok(r) => r,
            Err(e) => {
                return failed(
                    req.url,
                    TransportFailure::Connect,
                    format!("cannot start the browser: {e}"),
                    false,
                );
            }
        };
        let tab = match self.take_tab(&r).await {
            Ok(t) => t,
            Err(e) => {
                // A browser that cannot open a tab is broken: the next check starts anew.
                if let Some(mut p) = lock(&r.process).take() {
                    p.kill();
                }
                return failed(req.url, TransportFailure::Connect, e, false);
            }
        };
        // Dropped before the end (the attempt's timeout, shutdown): the tab is closed, since
        // the page in it may still be running.
        let mut lease = Lease {
            tab: Some(tab),
            running: Arc::clone(&r),
        };
        let budget = req.timeout.saturating_sub(started.elapsed());
        let outcome = match lease.tab.as_mut() {
            Some(tab) => read_page(tab, req, budget, req.body_cap, &r.cdp).await,
            None => Visit::Broken("no tab".into()),
        };
        let Some(tab) = lease.tab.take() else {
            return failed(req.url, TransportFailure::Connect, "no tab".into(), false);
        };
        match outcome {
            Visit::Page(mut a) => {
                self.give_back(&r, tab).await;
                a.retryable = true;
                a
            }
            Visit::NoPage(failure, error) => {
                self.give_back(&r, tab).await;
                failed(req.url, failure, error, true)
            }
            Visit::Broken(error) => {
                close_tab(&r, &tab).await;
                let gone = !r.alive() || lock(&r.process).as_mut().is_some_and(Process::exited);
                let error = if gone {
                    "the browser went away during the check (crashed or killed)".to_owned()
                } else {
                    error
                };
                failed(req.url, TransportFailure::Connect, error, false)
            }
        }
    }
}

/// Closes a running browser: our tabs, then the browser itself if we started it (cleanly, so
/// its cookies are on disk), killing it after a few seconds.
async fn close(r: Arc<Running>) {
    let tabs: Vec<Tab> = std::mem::take(&mut *lock(&r.idle));
    for t in tabs {
        let _ = r
            .cdp
            .execute(CloseTargetParams::new(t.page.target_id().clone()))
            .await;
    }
    let process = lock(&r.process).take();
    let Some(mut process) = process else {
        return;
    };
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        r.cdp
            .execute(chromiumoxide::cdp::browser_protocol::browser::CloseParams::default()),
    )
    .await;
    let until = Instant::now() + Duration::from_secs(5);
    while !process.exited() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    process.kill();
}

/// Closes a tab from the browser side, first stopping whatever script its page runs (a page in
/// an endless loop would otherwise keep its renderer, which other tabs of the same site share,
/// busy after the tab is gone).
async fn close_tab(r: &Arc<Running>, tab: &Tab) {
    let id = tab.page.target_id().clone();
    lock(&r.ours).remove(&id);
    let _ = tokio::time::timeout(
        Duration::from_millis(500),
        tab.page.execute(TerminateExecutionParams::default()),
    )
    .await;
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        r.cdp.execute(CloseTargetParams::new(id)),
    )
    .await;
}

/// A tab lent to one attempt: closed if the attempt is dropped midway.
struct Lease {
    tab: Option<Tab>,
    running: Arc<Running>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(tab) = self.tab.take() {
            let r = Arc::clone(&self.running);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move { close_tab(&r, &tab).await });
            }
        }
    }
}

/// Answers, for the tab's whole life, the requests it must not make (blocked resource types
/// fail at once, so they are never sent) and any dialog a page opens (dismissed).
async fn tab_guard(page: &Page) -> Result<JoinHandle<()>, String> {
    let paused = page
        .event_listener::<EventRequestPaused>()
        .await
        .map_err(|e| format!("cannot set up the tab: {e}"))?;
    let dialogs = page
        .event_listener::<EventJavascriptDialogOpening>()
        .await
        .map_err(|e| format!("cannot set up the tab: {e}"))?;
    let page = page.clone();
    Ok(tokio::spawn(async move {
        enum Ev {
            Paused(Arc<EventRequestPaused>),
            Dialog,
        }
        let mut events =
            futures_util::stream::select(paused.map(Ev::Paused), dialogs.map(|_| Ev::Dialog));
        while let Some(ev) = events.next().await {
            match ev {
                Ev::Paused(p) => {
                    let _ = page
                        .execute(FailRequestParams::new(
                            p.request_id.clone(),
                            ErrorReason::BlockedByClient,
                        ))
                        .await;
                }
                Ev::Dialog => {
                    let _ = page.execute(HandleJavaScriptDialogParams::new(false)).await;
                }
            }
        }
    }))
}

fn resource_type(name: &str) -> Option<ResourceType> {
    Some(match name {
        "stylesheet" => ResourceType::Stylesheet,
        "image" => ResourceType::Image,
        "media" => ResourceType::Media,
        "font" => ResourceType::Font,
        "script" => ResourceType::Script,
        "texttrack" => ResourceType::TextTrack,
        "xhr" => ResourceType::Xhr,
        "fetch" => ResourceType::Fetch,
        "prefetch" => ResourceType::Prefetch,
        "eventsource" => ResourceType::EventSource,
        "websocket" => ResourceType::WebSocket,
        "manifest" => ResourceType::Manifest,
        "signedexchange" => ResourceType::SignedExchange,
        "ping" => ResourceType::Ping,
        "cspviolationreport" => ResourceType::CspViolationReport,
        "preflight" => ResourceType::Preflight,
        "other" => ResourceType::Other,
        _ => return None,
    })
}

/// How a visit went.
enum Visit {
    /// A document arrived (its status may be anything).
    Page(Attempt),
    /// No document: the navigation failed (refused, DNS, timed out…); the tab is fine.
    NoPage(TransportFailure, String),
    /// The tab or the browser broke (crash, lost connection): not retried in this check.
    Broken(String),
}

/// The main document as it arrived.
struct Document {
    status: u16,
    url: String,
    headers: Vec<(String, String)>,
}

fn header_list(h: &Headers) -> Vec<(String, String)> {
    let Some(map) = h.inner().as_object() else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(map.len());
    for (name, value) in map {
        let value = value.as_str().unwrap_or_default();
        // The browser joins repeated headers with newlines.
        for v in value.split('\n') {
            out.push((name.to_ascii_lowercase(), v.to_owned()));
        }
    }
    out
}

/// A navigation error as the retry policy sees it (Chromium's `net::ERR_*` names).
fn navigation_failure(error: &str) -> TransportFailure {
    if error.contains("TIMED_OUT") {
        TransportFailure::Timeout
    } else if error.contains("TOO_MANY_REDIRECTS") {
        TransportFailure::TooManyRedirects
    } else if error.contains("INVALID_RESPONSE")
        || error.contains("CONTENT_DECODING")
        || error.contains("RESPONSE_HEADERS")
        || error.contains("INVALID_CHUNKED")
    {
        TransportFailure::Malformed
    } else {
        TransportFailure::Connect
    }
}

async fn read_page(
    tab: &mut Tab,
    req: &PageRequest<'_>,
    budget: Duration,
    cap: usize,
    cdp: &CdpBrowser,
) -> Visit {
    let started = Instant::now();
    // Read the page a little before the attempt's timeout runs out, so a page that never goes
    // quiet (polling, a ticker) is still read.
    let soft = budget.saturating_sub((budget / 10).min(Duration::from_secs(1)));
    let page = tab.page.clone();
    let frame = page.target_id().inner().clone();

    enum Ev {
        Response(Arc<EventResponseReceived>),
        Failed(Arc<EventLoadingFailed>),
        Sent(Arc<EventRequestWillBeSent>),
        Finished(Arc<EventLoadingFinished>),
        Load,
        Crashed,
        Download(Arc<EventDownloadWillBegin>),
    }
    macro_rules! listen {
        ($t:ty, $f:expr) => {
            match page.event_listener::<$t>().await {
                Ok(s) => s.map($f).boxed(),
                Err(e) => return Visit::Broken(format!("the browser stopped answering: {e}")),
            }
        };
    }
    let streams: Vec<BoxStream<'static, Ev>> = vec![
        listen!(EventResponseReceived, Ev::Response),
        listen!(EventLoadingFailed, Ev::Failed),
        listen!(EventRequestWillBeSent, Ev::Sent),
        listen!(EventLoadingFinished, Ev::Finished),
        listen!(EventLoadEventFired, |_| Ev::Load),
        listen!(EventTargetCrashed, |_| Ev::Crashed),
        match cdp.event_listener::<EventDownloadWillBegin>().await {
            Ok(s) => s.map(Ev::Download).boxed(),
            Err(e) => return Visit::Broken(format!("the browser stopped answering: {e}")),
        },
    ];
    let mut events = select_all(streams);

    let want_header = req.header && req.retry_n > 0;
    if want_header || tab.retry_header {
        let headers = if want_header {
            serde_json::json!({ "X-Retry-Count": req.retry_n.to_string() })
        } else {
            serde_json::json!({})
        };
        if let Err(e) = page
            .execute(SetExtraHttpHeadersParams::new(Headers::new(headers)))
            .await
        {
            return Visit::Broken(format!("the browser stopped answering: {e}"));
        }
        tab.retry_header = want_header;
    }

    let nav_page = page.clone();
    let url = req.url.to_owned();
    let mut navigation = Box::pin(async move { nav_page.execute(NavigateParams::new(url)).await });
    let mut navigated = false;

    let mut doc: Option<Document> = None;
    let mut main_request: Option<String> = None;
    let mut loaded = false;
    let mut in_flight: HashSet<String> = HashSet::new();
    let mut quiet_since = Instant::now();
    let mut poll = tokio::time::interval(READY_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    loop {
        let left = soft.saturating_sub(started.elapsed());
        tokio::select! {
            biased;
            ev = events.next() => {
                let Some(ev) = ev else {
                    return Visit::Broken("the browser closed the connection".into());
                };
                match ev {
                    Ev::Download(d) if *d.frame_id.inner() == frame => {
                        // Refused by the browser (downloads are denied); nothing to read.
                        return Visit::NoPage(
                            TransportFailure::Malformed,
                            "the page is a file download, not a page".into(),
                        );
                    }
                    Ev::Download(_) => {}
                    Ev::Crashed => {
                        return Visit::Broken(
                            "the page crashed the tab (it may have run out of memory)".into(),
                        );
                    }
                    Ev::Response(e) => {
                        let main = e.r#type == ResourceType::Document
                            && e.frame_id.as_ref().is_some_and(|f| *f.inner() == frame);
                        if main {
                            main_request = Some(e.request_id.inner().clone());
                            doc = Some(Document {
                                status: u16::try_from(e.response.status).unwrap_or(0),
                                url: e.response.url.clone(),
                                headers: header_list(&e.response.headers),
                            });
                        }
                    }
                    Ev::Failed(e) => {
                        let id = e.request_id.inner();
                        in_flight.remove(id);
                        quiet_since = Instant::now();
                        let is_main = main_request.as_deref() == Some(id.as_str());
                        if is_main && doc.is_none() && e.canceled != Some(true) {
                            return Visit::NoPage(
                                navigation_failure(&e.error_text),
                                format!("the page did not load: {}", e.error_text),
                            );
                        }
                    }
                    Ev::Sent(e) => {
                        let id = e.request_id.inner();
                        in_flight.insert(id.clone());
                        // The navigation's own request: a document of the main frame whose
                        // request id is its loader's (redirects keep the id).
                        let main = e.r#type.as_ref() == Some(&ResourceType::Document)
                            && e.frame_id.as_ref().is_some_and(|f| *f.inner() == frame)
                            && e.loader_id.inner() == id;
                        if main {
                            main_request = Some(id.clone());
                        }
                    }
                    Ev::Finished(e) => {
                        in_flight.remove(e.request_id.inner());
                        quiet_since = Instant::now();
                    }
                    Ev::Load => {
                        loaded = true;
                        quiet_since = Instant::now();
                    }
                }
            }
            res = &mut navigation, if !navigated => {
                navigated = true;
                match res {
                    Ok(r) => {
                        if let (Some(err), None) = (r.result.error_text.as_deref(), &doc) {
                            // A download is refused; anything else means no page came back.
                            // A download (refused), or a navigation the browser itself
                            // stopped: not a network fault another attempt would mend.
                            if err.contains("ERR_ABORTED") {
                                let what = if r.result.is_download == Some(true) {
                                    "the page is a file download, not a page"
                                } else {
                                    "the browser stopped loading the page"
                                };
                                return Visit::NoPage(TransportFailure::Malformed, what.into());
                            }
                            if err.contains("ERR_HTTP_RESPONSE_CODE_FAILURE") {
                                // An error status with an empty body: the document event
                                // carries the status.
                                continue;
                            }
                            return Visit::NoPage(
                                navigation_failure(err),
                                format!("the page did not load: {err}"),
                            );
                        }
                    }
                    Err(e) => {
                        if doc.is_none() && !page_alive(&page).await {
                            return Visit::Broken(format!("the browser stopped answering: {e}"));
                        }
                    }
                }
            }
            () = tokio::time::sleep(left) => {
                if doc.is_some() {
                    break;
                }
                return Visit::NoPage(
                    TransportFailure::Timeout,
                    format!("no page within {} ms", budget.as_millis()),
                );
            }
            _ = poll.tick() => {
                if doc.is_none() {
                    continue;
                }
                let idle = loaded && in_flight.is_empty() && quiet_since.elapsed() >= IDLE_AFTER;
                if idle {
                    break;
                }
                // A page whose scripts never yield does not answer: bounded, like everything.
                let left = soft.saturating_sub(started.elapsed()).min(Duration::from_secs(1));
                if let Some(sel) = req.ready
                    && tokio::time::timeout(left, selector_present(&page, sel))
                        .await
                        .unwrap_or(false)
                {
                    break;
                }
            }
        }
    }
    let Some(doc) = doc else {
        return Visit::NoPage(TransportFailure::Timeout, "no page".into());
    };
    // What is left of the attempt, less a moment to give the tab back: a page whose scripts
    // never stop cannot be read, and another attempt would not read it either.
    let left = budget
        .saturating_sub(started.elapsed())
        .saturating_sub(Duration::from_millis(200));
    let (body, over) = match tokio::time::timeout(left, read_dom(&page, cap)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return Visit::Broken(format!("cannot read the page: {e}")),
        Err(_) => {
            return Visit::Broken(
                "the page does not answer (its scripts never stop), so it was not read".into(),
            );
        }
    };
    Visit::Page(Attempt {
        status: Some(doc.status),
        final_url: doc.url,
        headers: doc.headers,
        body,
        failure: over.then_some(TransportFailure::BodyTooLarge),
        error: over.then(|| format!("page larger than the {cap}-byte cap")),
        held_at: None,
        retryable: true,
    })
}

async fn page_alive(page: &Page) -> bool {
    tokio::time::timeout(
        Duration::from_secs(1),
        page.execute(EvaluateParams::new("1")),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}

/// Whether `selector` matches in the page's current document.
async fn selector_present(page: &Page, selector: &str) -> bool {
    let Ok(quoted) = serde_json::to_string(selector) else {
        return false;
    };
    let expr = format!(
        "(() => {{ try {{ return document.querySelector({quoted}) !== null; }} catch (e) {{ return false; }} }})()"
    );
    let mut params = EvaluateParams::new(expr);
    params.return_by_value = Some(true);
    match page.execute(params).await {
        Ok(r) => {
            r.result
                .result
                .value
                .as_ref()
                .and_then(serde_json::Value::as_bool)
                == Some(true)
        }
        Err(_) => false,
    }
}

/// The rendered document as HTML (doctype and `documentElement.outerHTML`), at most `cap`
/// bytes; `true` when it was longer. The slice is taken in the page, so a page that builds a
/// gigantic DOM never sends it to us whole.
async fn read_dom(page: &Page, cap: usize) -> Result<(Bytes, bool), String> {
    let expr = format!(
        "(() => {{ const d = document; \
         let h = (d.doctype ? new XMLSerializer().serializeToString(d.doctype) : '') + \
         (d.documentElement ? d.documentElement.outerHTML : ''); \
         const over = h.length > {cap}; \
         return {{ over, html: over ? h.slice(0, {cap}) : h }}; }})()"
    );
    let mut params = EvaluateParams::new(expr);
    params.return_by_value = Some(true);
    let r = page.execute(params).await.map_err(|e| e.to_string())?;
    if let Some(ex) = &r.result.exception_details {
        return Err(ex.text.clone());
    }
    let value = r.result.result.value.clone().unwrap_or_default();
    let mut over = value.get("over").and_then(serde_json::Value::as_bool) == Some(true);
    let html = value
        .get("html")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let mut bytes = html.as_bytes();
    if bytes.len() > cap {
        let mut end = cap;
        while !html.is_char_boundary(end) {
            end -= 1;
        }
        bytes = &bytes[..end];
        over = true;
    }
    Ok((Bytes::copy_from_slice(bytes), over))
}

/// The WebSocket URL of a browser the user runs: `ws://…` as given, else asked from its
/// `/json/version` endpoint (http).
async fn devtools_ws_url(url: &str) -> Result<String, String> {
    if url.starts_with("ws://") || url.starts_with("wss://") {
        return Ok(url.to_owned());
    }
    let base = url.trim_end_matches('/');
    let version = if base.ends_with("/json/version") {
        base.to_owned()
    } else {
        format!("{base}/json/version")
    };
    let body = super::local_get(&version)
        .await
        .map_err(|e| format!("cannot reach the browser at {url}: {e}"))?;
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|_| format!("{version} did not answer with DevTools JSON"))?;
    v.get("webSocketDebuggerUrl")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("{version} names no webSocketDebuggerUrl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launch_flags_never_hide_automation() {
        let args = launch_args(Path::new("/p"), true, false, "about:blank").join(" ");
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
            launch_args(Path::new("/p"), false, true, "about:blank")
                .iter()
                .any(|a| a == "--no-sandbox")
        );
        assert!(
            !launch_args(Path::new("/p"), false, false, "about:blank")
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

    #[test]
    fn navigation_errors_are_classified() {
        assert_eq!(
            navigation_failure("net::ERR_CONNECTION_REFUSED"),
            TransportFailure::Connect
        );
        assert_eq!(
            navigation_failure("net::ERR_NAME_NOT_RESOLVED"),
            TransportFailure::Connect
        );
        assert_eq!(
            navigation_failure("net::ERR_TIMED_OUT"),
            TransportFailure::Timeout
        );
        assert_eq!(
            navigation_failure("net::ERR_TOO_MANY_REDIRECTS"),
            TransportFailure::TooManyRedirects
        );
        assert_eq!(
            navigation_failure("net::ERR_INVALID_RESPONSE"),
            TransportFailure::Malformed
        );
    }

    #[test]
    fn every_blockable_type_has_a_cdp_name() {
        for t in crate::config::BLOCKABLE {
            assert!(resource_type(t).is_some(), "{t}");
        }
    }
}
