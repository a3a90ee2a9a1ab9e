//! The per-site backoff registry (docs/policy.md#keyed-by-site-not-by-search): one entry, one
//! counter, one `next_retry_at` per site, shared by every search on it.
//!
//! Keyed by site, not by search URL. A refusal comes from the site, so it applies to every
//! search on it. Keying by URL meant five searches on one site each kept their own counter, and
//! each went back to knocking while the others were standing down: both why we stayed blocked
//! and why recovery was slow.
//!
//! A different kind of failure starts its own ladder rather than inheriting a count from an
//! unrelated one: a network blip should not be punished with the wait earned by three refusals.
//!
//! When a site's wait expires, the registry admits exactly one request — the probe — and holds
//! every other search on that site until the probe's outcome is handled: success clears the
//! entry, failure records the next rung. Entries are plain serde data so the shell can persist
//! them and a restart never knocks on a site before its `next_retry_at`.

use crate::backoff::{BackoffPolicy, RefusalKind};
use crate::site::SiteKey;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;

/// What the registry knows about one site that refused us.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The kind of the latest refusal.
    pub kind: RefusalKind,
    /// Consecutive refusals of that kind (1 = first rung).
    pub failures: u32,
    /// No request to the site before this instant.
    pub next_retry_at: Timestamp,
    /// When the latest refusal was recorded.
    pub recorded_at: Timestamp,
    /// When this episode of refusals began (the first refusal after the site was last clear).
    pub since: Timestamp,
    /// The Retry-After the site sent with the latest refusal, if any.
    pub retry_after: Option<Duration>,
    /// Whether that Retry-After made the wait longer than the rung would have.
    pub lengthened_by_retry_after: bool,
}

/// The answer to "may I send a request to this site now?".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// No entry: the site is clear.
    Clear,
    /// The wait has expired and this request is the single probe. The caller must report its
    /// outcome with [`Registry::record`] or [`Registry::clear`] (or [`Registry::abandon_probe`]).
    Probe,
    /// The site is waiting until this instant.
    Wait(Timestamp),
    /// A probe is already out; everyone else stays parked until it resolves.
    ProbeInFlight,
}

/// The registry: entries keyed by [`SiteKey`], plus which sites have a probe out.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    policy: BackoffPolicy,
    entries: HashMap<SiteKey, Entry>,
    probing: HashMap<SiteKey, Timestamp>,
}

impl Registry {
    /// An empty registry with the given policy.
    #[must_use]
    pub fn new(policy: BackoffPolicy) -> Self {
        Self {
            policy,
            entries: HashMap::new(),
            probing: HashMap::new(),
        }
    }

    /// Restores persisted entries (a restart keeps every site's wait).
    pub fn restore(&mut self, entries: impl IntoIterator<Item = (SiteKey, Entry)>) {
        self.entries.extend(entries);
    }

    /// The policy in force.
    #[must_use]
    pub fn policy(&self) -> &BackoffPolicy {
        &self.policy
    }

    /// Records a refusal of `kind` at `now`: same kind as before climbs a rung, a different kind
    /// starts at rung 1. `random` in `[0, 1)` jitters the wait. Ends any probe on the site.
    pub fn record(
        &mut self,
        site: &SiteKey,
        kind: RefusalKind,
        now: Timestamp,
        retry_after: Option<Duration>,
        random: f64,
    ) -> &Entry {
        self.probing.remove(site);
        let previous = self.entries.get(site);
        let failures = match previous {
            Some(p) if p.kind == kind => p.failures.saturating_add(1),
            _ => 1,
        };
        let since = previous.map_or(now, |p| p.since);
        let delay = self.policy.delay_for(kind, failures, retry_after, random);
        let unasked = self.policy.delay_for(kind, failures, None, random);
        let entry = Entry {
            kind,
            failures,
            next_retry_at: now + delay,
            recorded_at: now,
            since,
            retry_after,
            lengthened_by_retry_after: delay > unasked,
        };
        self.entries.insert(site.clone(), entry);
        &self.entries[site]
    }

    /// The site answered properly: forget its refusals (a later refusal starts at rung 1) and
    /// end any probe. Returns the entry that was cleared, if any.
    pub fn clear(&mut self, site: &SiteKey) -> Option<Entry> {
        self.probing.remove(site);
        self.entries.remove(site)
    }

    /// The probe never produced an outcome (shutdown mid-flight): the site goes back to
    /// waiting, and the next caller after `next_retry_at` becomes the probe.
    pub fn abandon_probe(&mut self, site: &SiteKey) {
        self.probing.remove(site);
    }

    /// The entry for a site, if it is waiting or probing.
    #[must_use]
    pub fn entry(&self, site: &SiteKey) -> Option<&Entry> {
        self.entries.get(site)
    }

    /// All entries (for persistence and status).
    pub fn entries(&self) -> impl Iterator<Item = (&SiteKey, &Entry)> {
        self.entries.iter()
    }

    /// Whether a probe is out on the site.
    #[must_use]
    pub fn is_probing(&self, site: &SiteKey) -> bool {
        self.probing.contains_key(site)
    }

    /// Asks to send one request to `site` at `now`, without admitting anything: what
    /// [`Self::admit`] would answer.
    #[must_use]
    pub fn peek(&self, site: &SiteKey, now: Timestamp) -> Admission {
        match self.entries.get(site) {
            None => Admission::Clear,
            Some(_) if self.probing.contains_key(site) => Admission::ProbeInFlight,
            Some(e) if now < e.next_retry_at => Admission::Wait(e.next_retry_at),
            Some(_) => Admission::Probe,
        }
    }

    /// The single-probe gate: asks to send one request to `site` at `now`. Exactly one caller
    /// gets [`Admission::Probe`] after a wait expires; the rest get `ProbeInFlight` until the
    /// probe's outcome is recorded or cleared.
    pub fn admit(&mut self, site: &SiteKey, now: Timestamp) -> Admission {
        let answer = self.peek(site, now);
        if answer == Admission::Probe {
            self.probing.insert(site.clone(), now);
        }
        answer
    }

    /// When the next waiting site comes due, or `None` if none are waiting (`soonest()` in
    /// docs/policy.md#the-single-probe). Sites with a probe out are not waiting: they are being
    /// tried.
    #[must_use]
    pub fn soonest(&self) -> Option<Timestamp> {
        self.entries
            .iter()
            .filter(|(site, _)| !self.probing.contains_key(*site))
            .map(|(_, e)| e.next_retry_at)
            .min()
    }
}
