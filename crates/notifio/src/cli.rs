//! The command line (docs/architecture.md#interfaces): `demo`, `watch`, `check`, `status`, `ladders`, `init`,
//! `notify test`, `login`, `service`, and `completions` and `man` (generated from this
//! definition, `generate.rs`).
//!
//! Thin glue over the library. Exit codes are part of the interface: 0 when the command ran
//! (whatever the sites answered), 2 for a bad config or usage (the message names
//! file:line:col and the key), 1 for a runtime failure.

use crate::config::{self, Config, ConfigError};
use crate::notify::NotifyError;
use crate::runner::{Hooks, RunError};
use crate::status;
use crate::watch::{PassResult, Watcher};
use clap::{Parser, Subcommand};
use notifio_policy::backoff::describe_steps;
use notifio_policy::{BackoffPolicy, RefusalKind, RequestClass, RetryPolicies, format_duration};
use serde::Serialize;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// `notifio --version`: the version and the commit the binary was built from (`notifio 0.1.0
/// (commit 0123456789ab)`, or `unknown commit` from a source without git: build.rs), so a bug
/// report names the exact build.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("NOTIFIO_COMMIT"), ")");

/// Watches rental search pages and tells you within seconds when a new listing appears —
/// politely: a site that refuses is left alone on a per-site ladder, and comes back through a
/// single probe.
#[derive(Debug, Parser)]
#[command(name = "notifio", version = VERSION, about, long_about = None)]
pub struct Cli {
    /// Config file (default: ./notifio.toml, then the platform config dir).
    #[arg(long, short = 'c', global = true, env = "NOTIFIO_CONFIG")]
    pub config: Option<PathBuf>,
    /// More log output (-v info, -vv debug). RUST_LOG overrides.
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Offline demo: a fake portal on loopback, five searches, a site that refuses and recovers.
    Demo {
        /// Compress the demo's timeline by this factor (ladders and script shrink; shown on start).
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Stop after this many seconds (default: run until Ctrl-C).
        #[arg(long)]
        duration: Option<f64>,
        /// Dashboard address (default 127.0.0.1:7878; port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:7878")]
        dashboard: String,
    },
    /// Watch every configured search until Ctrl-C.
    ///
    /// Prints a line per baseline, new listing, listing held back by a filter, price drop,
    /// refusal, probe and recovery. Sites read with the browser (`fetch = "browser"`, the
    /// default for Idealista and Facebook) need Chromium, Chrome, Edge or Brave; without one
    /// `watch` exits 2 naming `[browser] executable`.
    Watch {
        /// Print only what is announced (new listings, price drops).
        #[arg(long, short = 'q')]
        quiet: bool,
    },
    /// One pass over all searches; prints what each found.
    ///
    /// Sites read with the browser need Chromium, Chrome, Edge or Brave, as for `watch`.
    Check {
        /// One JSON object per line per search on stdout.
        #[arg(long)]
        json: bool,
        /// Send notifications for new listings found (default: only record them).
        #[arg(long)]
        notify: bool,
        /// Check sites even while they are waiting (ignores the backoff registry).
        #[arg(long)]
        force: bool,
        /// Read every page in full and list its listings, even if it has not changed since the
        /// last good check (by default an unchanged page is a 304 or a hash match, not a parse).
        #[arg(long)]
        fresh: bool,
    },
    /// Searches and sites: state, refusal kind, rung, countdown, last outcome.
    Status {
        /// The dashboard's /api/status JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Open a site in Notifio's browser profile, in a window, to log in or solve a challenge
    /// yourself; returns when you close the window. Checks then use that session.
    Login {
        /// The site (`facebook.com`, `127.0.0.1:8080`, or any URL or search name on it).
        site: String,
    },
    /// Print the backoff ladders and the retry schedule.
    ///
    /// Kinds of refusal, each with its own ladder (the last rung is the ceiling):
    /// challenge (an anti-bot page), rate_limited (HTTP 429), denied (401/403/451 without a
    /// challenge), error (5xx or a network failure after request-level retries). A site's
    /// Retry-After can lengthen a wait, never shorten it, and no wait exceeds max_wait (1h).
    Ladders {
        /// Milliseconds, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the site profiles: the built-in ones and your files in `sites/` beside the
    /// config (or in ~/.config/notifio/sites), with the hosts each covers and where it comes
    /// from. A search on one of those hosts is read without a `listing` spec.
    Profiles {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write a commented starter config.
    Init {
        /// Where (default ./notifio.toml).
        path: Option<PathBuf>,
    },
    /// Notification channels.
    Notify {
        /// What to do with them.
        #[command(subcommand)]
        action: NotifyCommand,
    },
    /// Start `notifio watch` at login: a systemd user unit (Linux) or a launchd agent (macOS).
    Service {
        /// What to do.
        #[command(subcommand)]
        action: ServiceCommand,
    },
    /// Print the shell completion script for SHELL.
    ///
    /// bash: `source <(notifio completions bash)` in ~/.bashrc; zsh: write it as `_notifio` in a
    /// directory of your `fpath`; fish: `notifio completions fish >
    /// ~/.config/fish/completions/notifio.fish`. The Debian package installs them.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page, notifio(1), as roff: `notifio man | man -l -`.
    Man {
        /// Instead, write notifio.1 and a page per subcommand (notifio-watch.1, …) into DIR.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// `notifio service …`.
#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write and enable the service: `notifio watch --config <absolute path>` at login,
    /// restarted when it fails. Prints what it wrote and how to undo it.
    Install,
    /// Disable the service and remove its file.
    Uninstall,
    /// Whether the service is installed and running.
    Status,
    /// Print the systemd user unit for `notifio watch` (with `--config`, for that file; without,
    /// the default config lookup), to manage the service yourself. The Debian package installs
    /// it as /usr/lib/systemd/user/notifio.service.
    Unit {
        /// The binary the unit starts (default: this one).
        #[arg(long, value_name = "PATH")]
        exe: Option<PathBuf>,
    },
}

/// `notifio notify …`.
#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Send one test message to each configured channel (or the named ones) and print, per
    /// channel, `delivered` or the service's error. Exit 1 when any channel failed.
    Test {
        /// Channel names (`telegram`, `email`, `telegram-2`, …); default: all.
        channels: Vec<String>,
    },
}

/// A failure with its exit code.
#[derive(Debug)]
pub enum Failure {
    /// Bad config or usage: exit 2.
    Config(ConfigError),
    /// A config problem found after parsing (e.g. a session without cookies): exit 2.
    Usage(String),
    /// Anything else: exit 1.
    Runtime(anyhow::Error),
    /// Whoever read stdout closed it (`notifio check --json | head -1`): the command ends
    /// quietly, exit 0.
    StdoutClosed,
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::Runtime(e)
    }
}

/// A watcher that cannot start because of what the config asks for (a session without cookies,
/// an unusable profile) is a config problem: exit 2. Anything else is a runtime failure.
fn watch_failure(e: crate::watch::WatchError) -> Failure {
    use crate::watch::WatchError;
    match e {
        WatchError::NeedsSession { .. } | WatchError::Profile { .. } | WatchError::Cookies(_) => {
            Failure::Usage(e.to_string())
        }
        WatchError::Browser(e) => Failure::Config(e),
        other => Failure::Runtime(other.into()),
    }
}

/// A run that could not start because of what the config asks for (channels, sessions) is a
/// config problem, exit 2, as it is for `check`; anything else is a runtime failure.
fn run_failure(e: RunError) -> Failure {
    match e {
        RunError::Watch(w) => watch_failure(w),
        RunError::Channels(n @ NotifyError::Database { .. }) => Failure::Runtime(n.into()),
        RunError::Channels(n) => Failure::Usage(n.to_string()),
        other => Failure::Runtime(other.into()),
    }
}

/// Entry point used by `main.rs`.
#[must_use]
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo narrates in its own words; its log stays quiet unless asked (-v or RUST_LOG).
    let quiet = matches!(cli.command, Command::Demo { .. });
    init_logging(cli.verbose, quiet);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Config(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Usage(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
        Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
    }
}

/// Writes `text` to stdout (no newline added). `println!` would panic on a closed pipe; a
/// reader that has seen enough is not an error.
fn write_out(text: &str) -> Result<(), Failure> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::StdoutClosed),
        Err(e) => Err(Failure::Runtime(
            anyhow::Error::new(e).context("writing to stdout"),
        )),
    }
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = match verbose {
        0 if quiet => "error",
        0 => "warn",
        1 => "info,notifio=info",
        _ => "debug,hyper=info,hyper_util=info,reqwest=info,h2=info,rustls=info",
    };
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour codes only on a terminal: a log redirected to a file or journald stays plain text.
    // Closing our own browser is not an error, whatever its DevTools client says about it.
    // Every field of an event (the message too) is shown through `terminal::line`: pages
    // write some of the text logged, and a line break or an escape in it must not forge a
    // line or reach the terminal.
    let fields = tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = crate::terminal::line(&text);
        if field.name() == "message" {
            write!(w, "{text}")
        } else {
            write!(w, "{field}={text}")
        }
    });
    let layer = tracing_subscriber::fmt::layer()
        .fmt_fields(tracing_subscriber::field::MakeExt::delimited(fields, " "))
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_filter(filter)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            !crate::fetch::browser::is_closing_noise(meta)
        }));
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

fn load_config(path: Option<PathBuf>) -> Result<Config, Failure> {
    let path = path.unwrap_or_else(config::default_path);
    let cfg = config::load(&path)?;
    for w in cfg.warnings() {
        tracing::warn!("{w}");
        eprintln!("warning: {w}");
    }
    Ok(cfg)
}

/// `watch` and `demo` run their checks on one worker thread: with a second one, nearly every
/// spawned check, finished request and wake-up of the loop also woke the other thread (futex and
/// epoll hand-offs), ~7% of the CPU per check, and its malloc arena cost ~3 MB of RSS
/// (docs/benchmarks/watch.md). A page large enough to take long to parse goes to the blocking
/// pool (`watch::check`), so a hostile page still does not hold up the checks of other sites.
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| Failure::Runtime(e.into()))
}

/// Runs `job` as a task on the runtime's workers rather than on the calling thread: the
/// watcher's loop and the checks it spawns then hand off inside the worker pool (usually on the
/// same thread) instead of waking the main thread for every finished check.
fn on_workers(
    rt: tokio::runtime::Runtime,
    job: impl Future<Output = Result<(), Failure>> + Send + 'static,
) -> Result<(), Failure> {
    rt.block_on(async { tokio::spawn(job).await })
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("the watcher stopped: {e}")))?
}

/// `check` is one batch pass, so it runs on one thread: the hand-offs between workers (futex
/// and eventfd wake-ups) cost more CPU per check than they save in wall time there.
fn one_thread_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Runtime(e.into()))
}

/// Runs a parsed command.
///
/// # Errors
/// See [`Failure`].
pub fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Profiles { json } => profiles(cli.config, json),
        Command::Ladders { json } => ladders(cli.config, json),
        Command::Init { path } => {
            let path = path.unwrap_or_else(|| PathBuf::from("notifio.toml"));
            if let Err(e) = config::write_starter(&path) {
                // An existing config is left alone; what its sites could use is still said.
                if let Ok(cfg) = config::load(&path) {
                    for hint in crate::watch::budget_hints(&cfg) {
                        eprintln!("hint: {hint}");
                    }
                }
                return Err(e.into());
            }
            write_out(&format!(
                "wrote {} — edit the [[search]] entries, then run `notifio watch --config {}`\n\
                 Two or more searches on one site? Give the site a request budget (`budget = \
                 \"4/min\"` under [site.\"…\"], commented in the file): it spends the site's \
                 requests where listings appear (docs/policy.md#a-request-budget-per-site).\n",
                path.display(),
                path.display()
            ))
        }
        Command::Status { json } => status_command(cli.config, json),
        Command::Check {
            json,
            notify,
            force,
            fresh,
        } => {
            let cfg = load_config(cli.config)?;
            one_thread_runtime()?.block_on(check(cfg, json, notify, force, fresh))
        }
        Command::Login { site } => {
            let cfg = load_config(cli.config)?;
            one_thread_runtime()?.block_on(login(cfg, &site))
        }
        Command::Notify {
            action: NotifyCommand::Test { channels },
        } => {
            let cfg = load_config(cli.config)?;
            one_thread_runtime()?.block_on(notify_test(cfg, channels))
        }
        Command::Service { action } => service(cli.config, &action),
        Command::Completions { shell } => {
            let script = crate::generate::completions(shell);
            write_out(&String::from_utf8_lossy(&script))
        }
        Command::Man { dir: None } => {
            let page = crate::generate::man_page().map_err(|e| Failure::Runtime(e.into()))?;
            write_out(&String::from_utf8_lossy(&page))
        }
        Command::Man { dir: Some(dir) } => man_pages_into(&dir),
        Command::Watch { quiet } => watch(cli.config, quiet),
        Command::Demo {
            speed,
            duration,
            dashboard,
        } => on_workers(runtime()?, async move {
            crate::demo::run(speed, duration, &dashboard)
                .await
                .map_err(|e| match e.downcast::<RunError>() {
                    Ok(run) => run_failure(run),
                    Err(e) => Failure::Runtime(e),
                })
        }),
    }
}

/// `notifio profiles`: the site profiles this machine knows, built in and the user's own.
fn profiles(config_path: Option<PathBuf>, json: bool) -> Result<(), Failure> {
    let path = config_path.unwrap_or_else(config::default_path);
    let env = config::Environment::from_process();
    let dirs = crate::extract::catalog::user_dirs(&path, env.config_dir.as_deref());
    let catalog = crate::extract::Catalog::with_user_dirs(&dirs).map_err(|e| {
        Failure::from(ConfigError::at(
            &e.path, &e.text, e.offset, &e.key, e.message,
        ))
    })?;
    write_out(&if json {
        format!("{}\n", crate::extract::catalog::listing_json(&catalog))
    } else {
        crate::extract::catalog::listing_text(&catalog)
    })
}

/// `notifio ladders`: the waits after each refusal, for the config's ladders or the defaults.
fn ladders(config_path: Option<PathBuf>, json: bool) -> Result<(), Failure> {
    let (backoff, retry) = match config_path {
        Some(p) => {
            let c = config::load(&p)?;
            (c.backoff, c.retry)
        }
        None => (BackoffPolicy::default(), RetryPolicies::default()),
    };
    if json {
        write_out(&format!("{}\n", ladders_json(&backoff, &retry)))
    } else {
        write_out(&ladders_text(&backoff, &retry))
    }
}

/// `notifio status`: what the running watcher does (or the last one did), even while the
/// config has a mistake, which it names (and exits 2 for).
fn status_command(config_path: Option<PathBuf>, json: bool) -> Result<(), Failure> {
    let path = config_path.unwrap_or_else(config::default_path);
    // A config with a mistake still names a state directory: status shows what the
    // running watcher does, and the mistake.
    let (cfg, mistake) = match load_config(Some(path.clone())) {
        Ok(cfg) => (Some(cfg), None),
        Err(Failure::Config(e)) if e.line > 0 => (None, Some(e)),
        Err(e) => return Err(e),
    };
    let state_dir = match &cfg {
        Some(c) => c.watch.state_dir.clone(),
        None => config::state_dir_despite_errors(&path).ok_or_else(|| {
            Failure::Usage(
                "this system has no data directory for notifio; set state_dir in [watch]"
                    .to_owned(),
            )
        })?,
    };
    let backoff = cfg.as_ref().map(|c| c.backoff.clone()).unwrap_or_default();
    let mut view = status::build_from_dir(&state_dir, &backoff, cfg.as_ref())
        .map_err(|e| Failure::Runtime(e.into()))?;
    if !view.watcher.running {
        // What a previous watcher said of its file and planned is stale.
        view.config = status::ConfigStatus::default();
        for q in &mut view.searches {
            (q.checks_per_hour, q.expected_delay_s) = (None, None);
        }
        for site in &mut view.sites {
            (site.requests_last_hour, site.hint) = (None, None);
        }
    }
    if let Some(e) = &mistake
        && view.config.error.is_none()
    {
        view.config.error = Some(e.to_string());
    }
    if json {
        let text = serde_json::to_string_pretty(&view).map_err(|e| Failure::Runtime(e.into()))?;
        write_out(&format!("{}\n", crate::terminal::json(&text)))?;
    } else {
        write_out(&status::render_table(&view))?;
    }
    // The view is shown; the exit code still says the file needs fixing.
    mistake.map_or(Ok(()), |e| Err(Failure::Config(e)))
}

/// `notifio man DIR`: one page per command, written into `dir`.
fn man_pages_into(dir: &std::path::Path) -> Result<(), Failure> {
    let written = crate::generate::man_pages_to(dir).map_err(|e| {
        Failure::Runtime(
            anyhow::Error::new(e).context(format!("writing the man pages into {}", dir.display())),
        )
    })?;
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    write_out(&format!("{}\n", names.join("\n")))
}

/// `notifio watch`: the runner, narrating as the demo does (sites by their own names).
fn watch(config_path: Option<PathBuf>, quiet: bool) -> Result<(), Failure> {
    let cfg = load_config(config_path)?;
    let hooks = Hooks {
        narrator: Some(crate::narrate::narrator(crate::narrate::Narration {
            quiet,
            ..crate::narrate::Narration::default()
        })),
        on_dashboard: None,
    };
    on_workers(runtime()?, async move {
        crate::runner::run(cfg, CancellationToken::new(), hooks)
            .await
            .map_err(run_failure)
    })
}

/// `notifio service install | uninstall | status`.
fn service(config: Option<PathBuf>, action: &ServiceCommand) -> Result<(), Failure> {
    // Printing a unit needs no service manager; the others use this machine's.
    let manager = || crate::service::Manager::here().map_err(|e| Failure::Usage(e.to_string()));
    let text = match action {
        ServiceCommand::Install => {
            let manager = manager()?;
            // The config must load now: a unit that starts a watcher which exits 2 at once
            // would only fail over and over.
            let cfg = load_config(config)?;
            let absolute = std::fs::canonicalize(&cfg.path).unwrap_or(cfg.path.clone());
            crate::service::install(&manager, &this_binary()?, &absolute)
                .map_err(|e| Failure::Runtime(e.into()))?
        }
        ServiceCommand::Uninstall => {
            crate::service::uninstall(&manager()?).map_err(|e| Failure::Runtime(e.into()))?
        }
        ServiceCommand::Status => crate::service::status(&manager()?),
        ServiceCommand::Unit { exe } => unit(config, exe.clone())?,
    };
    write_out(&text)
}

/// The running binary's real path: what a service must start.
fn this_binary() -> Result<PathBuf, Failure> {
    std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("cannot find the notifio binary: {e}")))
}

/// `notifio service unit`: the unit for `exe` (default: this binary), with the config file
/// made absolute when one is named (a service manager starts it in another directory).
fn unit(config: Option<PathBuf>, exe: Option<PathBuf>) -> Result<String, Failure> {
    let exe = match exe {
        Some(exe) => exe,
        None => this_binary()?,
    };
    Ok(match config {
        Some(path) => {
            let absolute = std::path::absolute(&path).unwrap_or(path);
            crate::service::unit_text(&exe, &absolute)
        }
        None => crate::service::packaged_unit_text(&exe),
    })
}

/// `notifio notify test [CHANNEL…]`: one test message per channel, sent directly (not through
/// the outbox), all channels at once; one line per channel.
async fn notify_test(cfg: Config, names: Vec<String>) -> Result<(), Failure> {
    use crate::notify::{ChannelName, Channels};
    let channels = Channels::from_config(&cfg).map_err(|e| Failure::Usage(e.to_string()))?;
    let all = channels.names();
    let chosen: Vec<ChannelName> = if names.is_empty() {
        all.clone()
    } else {
        let mut chosen = Vec::new();
        for n in names {
            let name = ChannelName::new(n);
            if !all.contains(&name) {
                let valid: Vec<&str> = all.iter().map(ChannelName::as_str).collect();
                return Err(Failure::Usage(format!(
                    "no channel `{name}` is configured; configured: {}",
                    valid.join(", ")
                )));
            }
            chosen.push(name);
        }
        chosen
    };
    let results =
        crate::notify::sender::send_test(&channels, &chosen, crate::clock::now().as_millis()).await;
    let width = chosen.iter().map(|c| c.as_str().len()).max().unwrap_or(0);
    let mut failed = 0;
    for (name, result) in results {
        match result {
            Ok(()) => println!("{name:<width$}  delivered"),
            Err(e) => {
                failed += 1;
                let what = if e.permanent { "refused" } else { "failed" };
                println!("{name:<width$}  {what}: {e}");
            }
        }
    }
    if failed > 0 {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "{failed} of {} channel{} did not deliver the test message",
            chosen.len(),
            if chosen.len() == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// `notifio login SITE`: the site's `login_url`, else its first search's page, in a window of
/// the same profile the headless checks use.
async fn login(cfg: Config, which: &str) -> Result<(), Failure> {
    let which = which.trim();
    let site = cfg
        .searches
        .iter()
        .find(|s| s.name == which)
        .map(|s| s.site.clone())
        .or_else(|| {
            let url = if which.contains("://") {
                which.to_owned()
            } else {
                format!("http://{which}/")
            };
            notifio_policy::SiteKey::from_url(&url).ok()
        })
        .ok_or_else(|| {
            Failure::Usage(format!("`{which}` is not a site, a URL or a search name"))
        })?;
    let Some(first) = cfg.searches.iter().find(|s| s.site == site) else {
        let known: Vec<String> = cfg.searches.iter().map(|s| s.site.to_string()).collect();
        return Err(Failure::Usage(format!(
            "no search is on {site}; sites in {}: {}",
            cfg.path.display(),
            known.join(", ")
        )));
    };
    let url = cfg
        .sites
        .get(site.as_str())
        .and_then(|s| s.login_url.clone())
        .unwrap_or_else(|| first.url.clone());
    if first.fetch != crate::fetch::FetchMode::Browser {
        let how = match first.fetch {
            crate::fetch::FetchMode::App => "through its app's request (fetch = \"app\")",
            _ => "over plain HTTP (fetch = \"http\")",
        };
        eprintln!(
            "note: {site} is read {how}, so checks will not use this session; set \
             [site.\"{site}\"] fetch = \"browser\" to read it in the browser"
        );
    }
    let browser = crate::watch::browser_for(&cfg)?;
    match browser.launch {
        crate::fetch::Launch::Connect { url: devtools } => {
            println!(
                "Notifio reads {site} in your own browser ({devtools}): log in there, at {url}"
            );
            Ok(())
        }
        crate::fetch::Launch::Start {
            executable,
            profile_dir,
            ..
        } => {
            println!(
                "Opening {url} in Notifio's browser profile ({}).\nLog in (or solve the \
                 challenge), then close the window; checks on {site} will use that session.",
                profile_dir.display()
            );
            crate::fetch::browser::login(&executable, &profile_dir, &url)
                .await
                .map_err(|e| Failure::Runtime(anyhow::anyhow!(e)))?;
            let mut store = crate::store::Store::open(&cfg.watch.state_dir)
                .map_err(|e| Failure::Runtime(e.into()))?;
            if store
                .expired_sessions()
                .map_err(|e| Failure::Runtime(e.into()))?
                .contains(&site)
            {
                store
                    .transaction(|tx| {
                        tx.set_session_expired(&site, false, crate::clock::now().as_millis())
                    })
                    .map_err(|e| Failure::Runtime(e.into()))?;
            }
            println!("Done. `notifio check` shows what {site} gives with this session.");
            Ok(())
        }
    }
}

async fn check(
    cfg: Config,
    json: bool,
    notify: bool,
    force: bool,
    fresh: bool,
) -> Result<(), Failure> {
    let hints = crate::watch::budget_hints(&cfg);
    let senders = if notify {
        Some(
            crate::notify::Channels::from_config(&cfg)
                .map_err(|e| Failure::Usage(e.to_string()))?,
        )
    } else {
        None
    };
    let channel_kinds = senders
        .as_ref()
        .map(crate::notify::Channels::names)
        .unwrap_or_default();
    let total = cfg.searches.len() as u64;
    let state_dir = cfg.watch.state_dir.clone();
    let retry = cfg.retry.notify.clone();
    let deadline = retry.deadline();
    let backoff = cfg.backoff.clone();
    let mut watcher = Watcher::for_one_pass(cfg, channel_kinds, force).map_err(watch_failure)?;
    let guest = watcher.is_guest();
    if fresh {
        watcher.forget_pages();
    }
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} checking {pos}/{len} searches {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(b)
    } else {
        None
    };
    let mut events = watcher.subscribe();
    let progress = bar.clone();
    let ticker = tokio::spawn(async move {
        while let Ok(ev) = events.recv().await {
            if let (
                crate::watch::WatchEvent::CheckDone {
                    searches, outcome, ..
                },
                Some(b),
            ) = (&ev, &progress)
            {
                b.inc(searches.len() as u64);
                b.set_message(format!("{} → {outcome}", searches.join(", ")));
            }
        }
    });
    let cancel = CancellationToken::new();
    let ctrl_c = cancel.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });
    let results = watcher
        .run(cancel)
        .await
        .map_err(|e| Failure::Runtime(e.into()))?;
    drop(watcher);
    ticker.abort();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(channels) = senders {
        let mut sender = crate::notify::Sender::new(
            crate::store::Store::file_in(&state_dir),
            channels,
            retry,
            backoff,
        );
        // A channel another sender is delivering (a running watcher's) is waited for, up to
        // one delivery's lease, so this pass's rows are not left behind.
        sender
            .deliver_due(deadline + std::time::Duration::from_secs(10))
            .await
            .map_err(|e| Failure::Runtime(e.into()))?;
    }
    for r in &results {
        if json {
            let line = serde_json::to_string(r).map_err(|e| Failure::Runtime(e.into()))?;
            write_out(&format!("{}\n", crate::terminal::json(&line)))?;
        } else {
            write_out(&pass_result_text(r))?;
        }
    }
    let mut notes = pass_notes(&results, notify, guest, force);
    for hint in hints {
        notes.push_str(&format!("hint: {hint}\n"));
    }
    if !notes.is_empty() {
        // With --json, stdout holds only the JSON lines.
        if json {
            eprint!("{notes}");
        } else {
            write_out(&format!("\n{notes}"))?;
        }
    }
    Ok(())
}

/// What a pass tells beside its results: new listings recorded without being sent (a later
/// `watch` will not announce them), and that a running watcher keeps its schedule.
fn pass_notes(results: &[PassResult], notify: bool, guest: bool, force: bool) -> String {
    let mut out = String::new();
    let new: usize = results
        .iter()
        .filter(|r| !r.baseline)
        .map(|r| r.new.len())
        .sum();
    if !notify && new > 0 {
        let (n, s, were) = if new == 1 {
            ("1 new listing".to_owned(), "it", "was")
        } else {
            (format!("{new} new listings"), "them", "were")
        };
        out.push_str(&format!(
            "{n} {were} recorded without a notification (this pass ran without --notify), so \
             `notifio watch` will not announce {s}; `notifio check --notify` sends new listings \
             as it finds them.\n"
        ));
    }
    if guest {
        out.push_str(
            "A `notifio watch` runs on this state directory: this pass recorded what it found, \
             and the sites' waits and the searches' next checks stay as the watcher plans them \
             (`notifio status` shows them).\n",
        );
        if force {
            out.push_str(
                "--force read sites the watcher is leaving alone; the watcher keeps its waits.\n",
            );
        }
    }
    out
}

/// A search's lines in `check`'s human output.
fn pass_result_text(r: &PassResult) -> String {
    use crate::terminal::line;
    use std::fmt::Write as _;
    let mut out = String::new();
    let new = if r.baseline {
        ", the first look: a silent baseline".to_owned()
    } else if r.new.is_empty() {
        String::new()
    } else {
        format!(", {} new", r.new.len())
    };
    let via = match r.via {
        crate::fetch::FetchMode::Browser => ", in the browser",
        crate::fetch::FetchMode::App => ", through the app",
        crate::fetch::FetchMode::Http => "",
    };
    let pages = if r.pages > 1 {
        format!(" on {} pages", r.pages)
    } else {
        String::new()
    };
    let status = r
        .status
        .map(|s| format!(" (HTTP {s}{via})"))
        .unwrap_or_default();
    let wait = r
        .next_retry_at
        .map(|t| {
            format!(
                "; next try in {}",
                notifio_policy::time::format_countdown(std::time::Duration::from_millis(
                    t.saturating_sub(crate::clock::now().as_millis())
                ))
            )
        })
        .unwrap_or_default();
    if r.unchanged {
        let _ = writeln!(
            out,
            "{:<28} {:<16} unchanged since the last check{status} (--fresh lists it again)",
            line(&r.search),
            r.outcome
        );
        return out;
    }
    let reason = r
        .reason
        .as_deref()
        .map(|why| format!(": {}", line(why)))
        .unwrap_or_default();
    let matched = r.listings.iter().filter(|l| l.matched).count();
    let filtered = if matched == r.listings.len() {
        String::new()
    } else {
        format!(" ({matched} match)")
    };
    let _ = writeln!(
        out,
        "{:<28} {:<16} {} listings{filtered}{pages}{new}{status}{wait}{reason}",
        line(&r.search),
        r.outcome,
        r.listings.len()
    );
    for c in &r.listings {
        let l = &c.listing;
        let name = line(l.title.as_deref().unwrap_or(&l.id));
        if !r.baseline && r.new.contains(&l.id) {
            let url = line(l.url.as_deref().unwrap_or(""));
            let _ = writeln!(out, "    new: {name}  {url}");
        }
        if let Some(change) = r.price_changes.iter().find(|p| p.id == l.id) {
            let _ = writeln!(
                out,
                "    {}: {name}",
                crate::notify::message::price_change(change)
            );
        }
    }
    out
}

#[derive(Serialize)]
struct LaddersJson {
    ladders: KindsJson,
    jitter: f64,
    max_wait_ms: u64,
    retry: ClassesJson,
}

#[derive(Serialize)]
struct KindsJson {
    challenge: Vec<u64>,
    rate_limited: Vec<u64>,
    denied: Vec<u64>,
    error: Vec<u64>,
}

#[derive(Serialize)]
struct ClassesJson {
    search: ClassJson,
    probe: ClassJson,
    detail: ClassJson,
    notify: ClassJson,
}

#[derive(Serialize)]
struct ClassJson {
    attempts: u32,
    initial_ms: u64,
    multiplier: f64,
    jitter: f64,
    delays_ms: Vec<u64>,
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `notifio ladders --json` (docs/architecture.md#interfaces).
#[must_use]
pub fn ladders_json(backoff: &BackoffPolicy, retry: &RetryPolicies) -> String {
    let l = |k| backoff.ladders().get(k).iter().map(|d| ms(*d)).collect();
    let c = |class| {
        let p = retry.get(class);
        ClassJson {
            attempts: p.attempts(),
            initial_ms: ms(p.initial()),
            multiplier: p.multiplier(),
            jitter: p.jitter(),
            delays_ms: p.nominal_delays().into_iter().map(ms).collect(),
        }
    };
    let j = LaddersJson {
        ladders: KindsJson {
            challenge: l(RefusalKind::Challenge),
            rate_limited: l(RefusalKind::RateLimited),
            denied: l(RefusalKind::Denied),
            error: l(RefusalKind::Error),
        },
        jitter: backoff.jitter(),
        max_wait_ms: ms(backoff.max_wait()),
        retry: ClassesJson {
            search: c(RequestClass::Search),
            probe: c(RequestClass::Probe),
            detail: c(RequestClass::Detail),
            notify: c(RequestClass::Notify),
        },
    };
    serde_json::to_string(&j).unwrap_or_default()
}

/// `notifio ladders` for people.
#[must_use]
pub fn ladders_text(backoff: &BackoffPolicy, retry: &RetryPolicies) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Backoff ladders, per site (the last rung is the ceiling; ±{:.0}% jitter; never more than {}):",
        backoff.jitter() * 100.0,
        format_duration(backoff.max_wait())
    );
    for kind in RefusalKind::ALL {
        let _ = writeln!(
            s,
            "  {:<13} {}",
            kind.as_str(),
            backoff.describe_ladder(kind)
        );
    }
    s.push_str("A site's Retry-After can lengthen a wait, never shorten it.\n\n");
    s.push_str("Request retry (5xx, timeouts and connection failures only; never 4xx):\n");
    for class in RequestClass::ALL {
        let p = retry.get(class);
        let delays = p.nominal_delays();
        let sleeps = if delays.is_empty() {
            "no retry".to_owned()
        } else {
            format!(
                "sleeps {} (±{:.0}%)",
                describe_steps(&delays),
                p.jitter() * 100.0
            )
        };
        let why = if class == RequestClass::Probe && p.attempts() == 1 {
            " — a probe must reflect the site's real state"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  {:<7} {} attempt{}, {sleeps}, {} per attempt, {} deadline{why}",
            class.as_str(),
            p.attempts(),
            if p.attempts() == 1 { "" } else { "s" },
            format_duration(p.timeout()),
            format_duration(p.deadline()),
        );
    }
    s
}
