//! The email channel: SMTP through lettre (tokio + rustls) or a local `sendmail`.
//!
//! The SMTP URL chooses the security: `smtp://` upgrades with STARTTLS when the server offers
//! it, `smtp+starttls://` requires it, `smtps://` is implicit TLS. A password never crosses
//! the network in the clear: with a user name, `smtp://` requires STARTTLS too, unless the
//! server is this machine (loopback) or `allow_plaintext` says the user accepts it. The user name is in the URL;
//! the password comes from env `NOTIFIO_SMTP_PASSWORD` or a `password_file` that only its owner
//! can read, never from the URL (config files get shared). The password lives in a [`Secret`]
//! whose `Debug` is redacted, and every error message is scrubbed of it before it is returned.

use super::{DeliveryError, Message};
use crate::config::EmailSettings;
use crate::secret::{FileError, Secret};
use lettre::message::{Mailbox as Address, MultiPart};
use lettre::transport::smtp::AsyncSmtpTransportBuilder;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSendmailTransport, AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use notifio_policy::AttemptResult;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Environment variable holding the SMTP password.
pub const PASSWORD_ENV: &str = "NOTIFIO_SMTP_PASSWORD";

/// Default per-attempt timeout for SMTP (the notify retry class's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The email channel cannot be set up. Messages never contain the password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmailError {
    /// The `smtp` setting is not a URL we understand.
    #[error(
        "email smtp = {url:?}: {reason} (expected smtp://[user@]host[:port], smtps://…, smtp+starttls://…, or sendmail)"
    )]
    BadUrl {
        /// The URL with any password removed.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The URL carries a password.
    #[error(
        "email smtp URL contains a password; remove it and set {PASSWORD_ENV} or password_file instead"
    )]
    PasswordInUrl,
    /// A user name but no password.
    #[error(
        "email smtp URL names user {user:?} but no password is set: set {PASSWORD_ENV} or password_file"
    )]
    MissingPassword {
        /// The user name from the URL.
        user: String,
    },
    /// The password file is readable by others.
    #[error(
        "password file {path} is readable by group or others (mode {mode:04o}); run `chmod 600 {path}`",
        path = path.display()
    )]
    PasswordFileExposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The password file cannot be read.
    #[error("cannot read password file {path}: {source}", path = path.display())]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A from/to address does not parse.
    #[error("email {field} address {value:?} is not valid: {reason}")]
    BadAddress {
        /// `from` or `to`.
        field: &'static str,
        /// The address as given.
        value: String,
        /// Why.
        reason: String,
    },
    /// No recipient.
    #[error("email has no `to` address")]
    NoRecipient,
    /// TLS setup failed.
    #[error("email TLS setup for {host}: {reason}")]
    Tls {
        /// Server name.
        host: String,
        /// Why.
        reason: String,
    },
}

enum Transport {
    /// Built on first send: lettre's connection pool spawns a task when it is created, which
    /// needs a tokio runtime, and the channel is often configured before one runs. Dropped
    /// when an exchange overran its time (the pool's connection may be mid-dialogue) and
    /// built again at the next send.
    Smtp {
        builder: AsyncSmtpTransportBuilder,
        built: Mutex<Option<AsyncSmtpTransport<Tokio1Executor>>>,
    },
    Sendmail(AsyncSendmailTransport<Tokio1Executor>),
}

/// A ready email channel.
pub struct Email {
    transport: Transport,
    from: Address,
    to: Vec<Address>,
    /// Where we connect, for logs and errors (no credentials).
    endpoint: String,
    secret: Option<Secret>,
    /// How long one exchange with the server may take in all.
    timeout: Duration,
}

// Manual Debug: the endpoint and addresses, never the credentials inside the transport.
impl fmt::Debug for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Email")
            .field("endpoint", &self.endpoint)
            .field("from", &self.from.to_string())
            .field(
                "to",
                &self.to.iter().map(ToString::to_string).collect::<Vec<_>>(),
            )
            .field("password", &self.secret.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Email {
    /// Builds the channel, taking the password from env `NOTIFIO_SMTP_PASSWORD` when set,
    /// otherwise from `password_file`.
    ///
    /// # Errors
    /// See [`EmailError`].
    pub fn from_settings(settings: EmailSettings) -> Result<Self, EmailError> {
        let env = std::env::var(PASSWORD_ENV)
            .ok()
            .filter(|s| !s.is_empty())
            .map(Secret::new);
        Self::with_password(settings, env, DEFAULT_TIMEOUT)
    }

    /// Builds the channel with an explicit password (`None`: read `password_file` if set) and
    /// a per-attempt timeout.
    ///
    /// # Errors
    /// See [`EmailError`].
    pub fn with_password(
        settings: EmailSettings,
        password: Option<Secret>,
        timeout: Duration,
    ) -> Result<Self, EmailError> {
        Self::assemble(settings, password, timeout, is_loopback_host)
    }

    /// [`Self::with_password`], with what counts as this machine given (tests).
    fn assemble(
        settings: EmailSettings,
        password: Option<Secret>,
        timeout: Duration,
        is_local: fn(&str) -> bool,
    ) -> Result<Self, EmailError> {
        let from = parse_address("from", &settings.from)?;
        if settings.to.is_empty() {
            return Err(EmailError::NoRecipient);
        }
        let to = settings
            .to
            .iter()
            .map(|t| parse_address("to", t))
            .collect::<Result<Vec<_>, _>>()?;
        // The file is checked whenever it is configured: a world-readable password file is
        // worth refusing even when the env var would win.
        let from_file = match &settings.password_file {
            Some(path) => Some(read_password_file(path)?),
            None => None,
        };
        let secret = password.or(from_file);

        let smtp = settings.smtp.trim();
        if smtp == "sendmail" {
            return Ok(Self {
                transport: Transport::Sendmail(AsyncSendmailTransport::new()),
                from,
                to,
                endpoint: "sendmail".into(),
                secret,
                timeout,
            });
        }
        if let Some(cmd) = smtp.strip_prefix("sendmail:") {
            return Ok(Self {
                transport: Transport::Sendmail(AsyncSendmailTransport::new_with_command(cmd)),
                from,
                to,
                endpoint: format!("sendmail ({cmd})"),
                secret,
                timeout,
            });
        }

        let url = url::Url::parse(smtp).map_err(|e| EmailError::BadUrl {
            url: crate::redact::url_password(smtp).into_owned(),
            reason: e.to_string(),
        })?;
        if url.password().is_some() {
            return Err(EmailError::PasswordInUrl);
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| EmailError::BadUrl {
                url: smtp.to_string(),
                reason: "no host".into(),
            })?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let tls_params = || {
            TlsParameters::new(host.clone()).map_err(|e| EmailError::Tls {
                host: host.clone(),
                reason: e.to_string(),
            })
        };
        let user = percent_encoding::percent_decode_str(url.username())
            .decode_utf8_lossy()
            .into_owned();
        // A password goes over TLS, or to this machine, or where the user said it may.
        let plaintext_ok = user.is_empty() || settings.allow_plaintext || is_local(&host);
        let (tls, default_port) = match url.scheme() {
            "smtp" if plaintext_ok => (Tls::Opportunistic(tls_params()?), 25),
            "smtp" => (Tls::Required(tls_params()?), 25),
            "smtp+starttls" => (Tls::Required(tls_params()?), 587),
            "smtps" => (Tls::Wrapper(tls_params()?), 465),
            other => {
                return Err(EmailError::BadUrl {
                    url: smtp.to_string(),
                    reason: format!("unknown scheme {other:?}"),
                });
            }
        };
        let port = url.port().unwrap_or(default_port);
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.clone())
            .port(port)
            .tls(tls)
            .timeout(Some(timeout));
        if !user.is_empty() {
            let Some(secret) = &secret else {
                return Err(EmailError::MissingPassword { user });
            };
            builder = builder.credentials(Credentials::new(user, secret.expose().to_string()));
        }
        Ok(Self {
            transport: Transport::Smtp {
                builder,
                built: Mutex::new(None),
            },
            from,
            to,
            endpoint: format!("{}://{host}:{port}", url.scheme()),
            secret,
            timeout,
        })
    }

    /// Where mail goes (`smtp://host:port`, `sendmail`), without credentials.
    #[must_use]
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Builds the multipart (plain text + HTML) message.
    fn build(&self, msg: &Message) -> Result<lettre::Message, DeliveryError> {
        let mut b = lettre::Message::builder()
            .from(self.from.clone())
            .subject(msg.subject.clone());
        for to in &self.to {
            b = b.to(to.clone());
        }
        b.multipart(MultiPart::alternative_plain_html(
            msg.text.clone(),
            msg.html.clone(),
        ))
        .map_err(|e| {
            DeliveryError::new(
                AttemptResult::Invalid,
                format!("cannot build the email: {e}"),
            )
        })
    }

    /// Sends one message; `Ok` means the server (or sendmail) accepted it. The whole exchange
    /// (connect, STARTTLS, the SMTP dialogue, the message) has `timeout`: lettre's own timeout
    /// covers the connect only, and a server that accepts the connection and then says nothing
    /// must cost one attempt, not the channel.
    pub(crate) async fn send(&self, msg: &Message) -> Result<(), DeliveryError> {
        let email = self.build(msg)?;
        let sent = tokio::time::timeout(self.timeout, self.hand_over(email)).await;
        let result = match sent {
            Ok(r) => r,
            Err(_) => {
                if let Transport::Smtp { built, .. } = &self.transport {
                    // Its pooled connection stopped mid-dialogue: never reuse it.
                    built.lock().unwrap_or_else(PoisonError::into_inner).take();
                }
                Err((
                    AttemptResult::Timeout,
                    format!(
                        "no answer within {} (retry.notify.timeout)",
                        notifio_policy::format_duration(self.timeout)
                    ),
                ))
            }
        };
        result.map_err(|(attempt, text)| {
            let text = match &self.secret {
                Some(s) => s.scrub(&text),
                None => text,
            };
            DeliveryError::new(attempt, format!("email via {}: {text}", self.endpoint))
        })
    }

    /// The SMTP transport, built on first use.
    fn smtp(
        builder: &AsyncSmtpTransportBuilder,
        built: &Mutex<Option<AsyncSmtpTransport<Tokio1Executor>>>,
    ) -> AsyncSmtpTransport<Tokio1Executor> {
        let mut built = built.lock().unwrap_or_else(PoisonError::into_inner);
        built.get_or_insert_with(|| builder.clone().build()).clone()
    }

    /// Hands the message to the server or sendmail, with what failed and why.
    async fn hand_over(&self, email: lettre::Message) -> Result<(), (AttemptResult, String)> {
        match &self.transport {
            Transport::Smtp { builder, built } => Self::smtp(builder, built)
                .send(email)
                .await
                .map(|_| ())
                .map_err(|e| {
                    let text = e.to_string();
                    if text.contains("STARTTLS is not supported") {
                        // Only asked for when a password would otherwise go in the clear.
                        return (
                            AttemptResult::Invalid,
                            "the server offers no STARTTLS, so the password would cross the \
                             network in the clear; use smtps:// or a server with STARTTLS, or \
                             set email.allow_plaintext = true"
                                .to_owned(),
                        );
                    }
                    let attempt = if e.is_permanent() {
                        AttemptResult::Status(550)
                    } else if e.is_timeout() {
                        AttemptResult::Timeout
                    } else if e.is_transient() {
                        AttemptResult::Status(451)
                    } else {
                        AttemptResult::Connect
                    };
                    (attempt, text)
                }),
            Transport::Sendmail(t) => t
                .send(email)
                .await
                .map_err(|e| (AttemptResult::Connect, e.to_string())),
        }
    }
}

/// A host that is this machine: a loopback IP or `localhost`.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost") || host.ends_with(".localhost"),
    }
}

fn parse_address(field: &'static str, value: &str) -> Result<Address, EmailError> {
    value
        .parse()
        .map_err(|e: lettre::address::AddressError| EmailError::BadAddress {
            field,
            value: value.to_string(),
            reason: e.to_string(),
        })
}

/// Reads a password file, refusing one that group or others can read.
///
/// # Errors
/// [`EmailError::PasswordFileExposed`] or [`EmailError::PasswordFile`].
pub fn read_password_file(path: &Path) -> Result<Secret, EmailError> {
    crate::secret::read_file(path).map_err(|e| match e {
        FileError::Exposed { path, mode } => EmailError::PasswordFileExposed { path, mode },
        FileError::Unreadable { path, source } => EmailError::PasswordFile { path, source },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(smtp: &str) -> EmailSettings {
        EmailSettings {
            to: vec!["me@example.com".into()],
            from: "Notifio <notifio@localhost>".into(),
            smtp: smtp.into(),
            password_file: None,
            allow_plaintext: false,
        }
    }

    #[test]
    fn urls_choose_tls_and_port() {
        let t = Duration::from_secs(1);
        let e = Email::with_password(settings("smtp://127.0.0.1:2525"), None, t).unwrap();
        assert_eq!(e.endpoint(), "smtp://127.0.0.1:2525");
        let e = Email::with_password(settings("smtps://mail.example.com"), None, t).unwrap();
        assert_eq!(e.endpoint(), "smtps://mail.example.com:465");
        let e =
            Email::with_password(settings("smtp+starttls://mail.example.com"), None, t).unwrap();
        assert_eq!(e.endpoint(), "smtp+starttls://mail.example.com:587");
        let e = Email::with_password(settings("sendmail"), None, t).unwrap();
        assert_eq!(e.endpoint(), "sendmail");
    }

    #[test]
    fn password_rules() {
        let t = Duration::from_secs(1);
        let err = Email::with_password(settings("smtp://me:hunter2@host"), None, t).unwrap_err();
        assert!(matches!(err, EmailError::PasswordInUrl));
        assert!(!err.to_string().contains("hunter2"));
        let err =
            Email::with_password(settings("smtp://me%40example.com@host"), None, t).unwrap_err();
        assert!(err.to_string().contains("\"me@example.com\""), "{err}");
        let e = Email::with_password(settings("smtp://me@host"), Some(Secret::new("hunter2")), t)
            .unwrap();
        let dbg = format!("{e:?}");
        assert!(!dbg.contains("hunter2"), "{dbg}");
        let err = Email::with_password(settings("ftp://host"), None, t).unwrap_err();
        assert!(err.to_string().contains("unknown scheme"));
        let mut s = settings("smtp://host");
        s.to.clear();
        assert!(matches!(
            Email::with_password(s, None, t).unwrap_err(),
            EmailError::NoRecipient
        ));
    }

    /// An SMTP server on 127.0.0.1 that offers AUTH but no STARTTLS, recording every command
    /// line it reads; it accepts whatever it is sent.
    async fn plaintext_server() -> (u16, std::sync::Arc<Mutex<Vec<String>>>) {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let (r, mut w) = sock.into_split();
                    let mut lines = BufReader::new(r).lines();
                    let _ = w.write_all(b"220 test ESMTP\r\n").await;
                    let mut in_data = false;
                    while let Ok(Some(line)) = lines.next_line().await {
                        log.lock().unwrap().push(line.clone());
                        let reply: &[u8] = if in_data {
                            if line == "." {
                                in_data = false;
                                b"250 ok\r\n"
                            } else {
                                continue;
                            }
                        } else {
                            match line
                                .split(' ')
                                .next()
                                .unwrap_or("")
                                .to_ascii_uppercase()
                                .as_str()
                            {
                                "EHLO" => b"250-test\r\n250 AUTH PLAIN LOGIN\r\n",
                                "AUTH" => b"235 ok\r\n",
                                "DATA" => {
                                    in_data = true;
                                    b"354 go\r\n"
                                }
                                "QUIT" => b"221 bye\r\n",
                                _ => b"250 ok\r\n",
                            }
                        };
                        let _ = w.write_all(reply).await;
                    }
                });
            }
        });
        (port, seen)
    }

    fn message() -> Message {
        Message {
            subject: "1 new listing — test".into(),
            text: "a flat".into(),
            html: "<p>a flat</p>".into(),
        }
    }

    #[tokio::test]
    async fn the_password_never_goes_in_the_clear_to_another_machine() {
        let t = Duration::from_secs(5);
        let remote: fn(&str) -> bool = |_| false;
        let (port, seen) = plaintext_server().await;
        let s = settings(&format!("smtp://ana@127.0.0.1:{port}"));
        // Taken for another machine: STARTTLS is required, so nothing is authenticated.
        let e = Email::assemble(s.clone(), Some(Secret::new("hunter2")), t, remote).unwrap();
        let err = e.send(&message()).await.unwrap_err();
        assert!(err.message.contains("no STARTTLS"), "{}", err.message);
        assert!(err.message.contains("allow_plaintext"), "{}", err.message);
        assert_eq!(err.attempt, AttemptResult::Invalid);
        let lines = seen.lock().unwrap().clone();
        assert!(lines.iter().all(|l| !l.starts_with("AUTH")), "{lines:?}");
        assert!(lines.iter().all(|l| !l.contains("MAIL FROM")), "{lines:?}");
        // The user allows it: the password is sent, the mail goes.
        let allowed = EmailSettings {
            allow_plaintext: true,
            ..s.clone()
        };
        let e = Email::assemble(allowed, Some(Secret::new("hunter2")), t, remote).unwrap();
        e.send(&message()).await.unwrap();
        assert!(seen.lock().unwrap().iter().any(|l| l.starts_with("AUTH")));
        // A loopback server is this machine: allowed by default.
        seen.lock().unwrap().clear();
        let e = Email::with_password(s, Some(Secret::new("hunter2")), t).unwrap();
        e.send(&message()).await.unwrap();
        assert!(seen.lock().unwrap().iter().any(|l| l.starts_with("AUTH")));
        // Without a user name there is no password to protect.
        let anonymous = settings(&format!("smtp://127.0.0.1:{port}"));
        let e = Email::assemble(anonymous, None, t, remote).unwrap();
        e.send(&message()).await.unwrap();
    }

    #[test]
    fn loopback_hosts_are_this_machine() {
        for h in [
            "127.0.0.1",
            "127.3.4.5",
            "::1",
            "[::1]",
            "localhost",
            "LOCALHOST",
            "mail.localhost",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "mail.example.com",
            "10.0.0.1",
            "localhost.example.com",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn redaction() {
        assert_eq!(Secret::new("pw").scrub("a pw b"), "a *** b");
        assert_eq!(format!("{:?}", Secret::new("pw")), "Secret(***)");
    }
}
