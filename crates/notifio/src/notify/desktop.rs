//! The desktop channel: the operating system's own notifications through `notify-rust` (the
//! freedesktop notification service over D-Bus on Linux and the BSDs, the notification centre
//! on macOS and Windows).
//!
//! On D-Bus a notification of new listings carries a `default` action: clicking it opens the
//! first listing in the browser (`xdg-open`), for as long as the notification lives (an hour at
//! most; a few at a time). A machine with no notification service (no session bus, nobody
//! owning `org.freedesktop.Notifications`) is a permanent failure: the channel says so once and
//! holds its rows until notifio starts again, and the other channels carry on.

use super::message::is_web;
use super::message::{details, escape, found_by, title};
use super::{DeliveryError, Message, Notification};
use notifio_policy::AttemptResult;
use std::sync::Arc;
use std::time::Duration;

/// How long one call to the notification service may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a click on a notification is waited for.
#[cfg(all(unix, not(target_os = "macos")))]
const CLICK_WAIT: Duration = Duration::from_secs(3600);
/// Notifications whose click is waited for at once; later ones show without the action.
const CLICKABLE: usize = 16;

/// The desktop's notification service.
#[derive(Clone, Debug)]
pub struct Desktop {
    clickable: Arc<tokio::sync::Semaphore>,
}

impl Default for Desktop {
    fn default() -> Self {
        Self::new()
    }
}

/// Summary, body (freedesktop markup: servers that do not render it strip it) and the link a
/// click opens.
pub(crate) fn content(n: &Notification, msg: &Message) -> (String, String, Option<String>) {
    let Some((site, searches, listings)) = n.listings() else {
        return (msg.subject.clone(), escape(&msg.text), None);
    };
    let mut body = escape(&found_by(site, searches));
    for l in listings.iter().take(5) {
        let name = escape(title(l));
        match l.url.as_deref().filter(|u| is_web(u)) {
            Some(u) => body.push_str(&format!("\n<b><a href=\"{}\">{name}</a></b>", escape(u))),
            None => body.push_str(&format!("\n<b>{name}</b>")),
        }
        for line in details(n, l) {
            body.push_str(&format!(" — {}", escape(&line)));
        }
    }
    if listings.len() > 5 {
        body.push_str(&format!("\n… and {} more", listings.len() - 5));
    }
    let link = listings
        .iter()
        .find_map(|l| l.url.clone().filter(|u| is_web(u)));
    (msg.subject.clone(), body, link)
}

impl Desktop {
    /// The channel (nothing is contacted until the first notification).
    #[must_use]
    pub fn new() -> Self {
        Self {
            clickable: Arc::new(tokio::sync::Semaphore::new(CLICKABLE)),
        }
    }

    /// Shows one notification; `Ok` once the service took it.
    pub(crate) async fn show(&self, n: &Notification, msg: &Message) -> Result<(), DeliveryError> {
        let (summary, body, link) = content(n, msg);
        let mut note = notify_rust::Notification::new();
        note.appname("notifio").summary(&summary).body(&body);
        #[cfg(all(unix, not(target_os = "macos")))]
        {
            if link.is_some() {
                note.action("default", "Open the listing");
            }
            note.hint(notify_rust::Hint::Category("email.arrived".to_owned()));
            match tokio::time::timeout(CALL_TIMEOUT, note.show_async()).await {
                Ok(Ok(handle)) => {
                    if let (Some(url), Ok(permit)) =
                        (link, self.clickable.clone().try_acquire_owned())
                    {
                        tokio::spawn(async move {
                            let _permit = permit;
                            let wait = handle.wait_for_action_async(|r| {
                                if matches!(r, notify_rust::NotificationResponse::Action(a) if a == "default") {
                                    open(&url);
                                }
                            });
                            let _ = tokio::time::timeout(CLICK_WAIT, wait).await;
                        });
                    }
                    Ok(())
                }
                Ok(Err(e)) => Err(no_service(&e.to_string())),
                Err(_) => Err(DeliveryError::new(
                    AttemptResult::Timeout,
                    "desktop: the notification service did not answer within 10 s",
                )),
            }
        }
        #[cfg(not(all(unix, not(target_os = "macos"))))]
        {
            let _ = (&self.clickable, link, CALL_TIMEOUT);
            tokio::task::spawn_blocking(move || note.show().map(|_| ()))
                .await
                .map_err(|e| no_service(&e.to_string()))?
                .map_err(|e| no_service(&e.to_string()))
        }
    }
}

fn no_service(why: &str) -> DeliveryError {
    let mut e = DeliveryError::new(
        AttemptResult::Connect,
        format!(
            "desktop: no notification service answered ({why}); desktop notifications wait until notifio starts again, the other channels carry on"
        ),
    );
    e.permanent = true;
    e
}

/// Opens an http(s) link in the user's browser (never anything else: the link came from a site).
#[cfg(all(unix, not(target_os = "macos")))]
fn open(url: &str) {
    if is_web(url) {
        match std::process::Command::new("xdg-open")
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            // Reap it in the background so no zombie is left.
            Ok(mut child) => {
                std::thread::spawn(move || child.wait());
            }
            Err(e) => tracing::warn!("cannot open the listing: xdg-open: {e}"),
        }
    }
}
