//! The requests each Notifio process sends to sites with a request budget, in the state
//! database they share (docs/policy.md#a-request-budget-per-site). The budget is the site's,
//! whoever sends: a `check` run beside `watch` reads what the watcher spent in the window
//! before it asks the site anything, and the watcher reads what the `check` spent, so that the
//! two together never send more than the budget in any window.
//!
//! Each site's recent requests are one `meta` row (`site_requests:<site>`, a JSON list of
//! `[ms, process]`), read and written in the transaction that decides the next checks, so two
//! processes cannot both take the last room. Each process names its requests with a token of
//! its own (random, so a pid reused after a restart is no confusion); a request older than the
//! caller's `keep_after` (the longest window) is dropped when the row is written.

use super::{StoreError, Tx};
use notifio_policy::{SiteKey, Timestamp};
use rusqlite::OptionalExtension as _;

const PREFIX: &str = "site_requests:";

type Sent = Vec<(u64, i64)>;

impl Tx<'_> {
    fn sent_to(&self, site: &SiteKey) -> Result<Sent, StoreError> {
        let text: Option<String> = self
            .0
            .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
            .query_row([format!("{PREFIX}{}", site.as_str())], |r| r.get(0))
            .optional()?;
        // A row this version cannot read is started afresh: it only ever delays a check.
        Ok(text
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default())
    }

    /// Records that process `process` sent requests to `site` at `at`, forgetting the
    /// site's requests sent before `keep_after`.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn record_requests(
        &self,
        process: i64,
        site: &SiteKey,
        at: &[Timestamp],
        keep_after: Timestamp,
    ) -> Result<(), StoreError> {
        let mut sent = self.sent_to(site)?;
        sent.retain(|&(t, _)| t > keep_after.as_millis());
        sent.extend(at.iter().map(|t| (t.as_millis(), process)));
        sent.sort_unstable();
        let text = serde_json::to_string(&sent)?;
        self.put_meta(&format!("{PREFIX}{}", site.as_str()), &text)
    }

    /// The requests processes other than `process` sent to `site` after `since`, oldest first.
    ///
    /// # Errors
    /// On SQL failure.
    pub fn requests_elsewhere(
        &self,
        process: i64,
        site: &SiteKey,
        since: Timestamp,
    ) -> Result<Vec<Timestamp>, StoreError> {
        Ok(self
            .sent_to(site)?
            .into_iter()
            .filter(|&(t, by)| by != process && t > since.as_millis())
            .map(|(t, _)| Timestamp(t))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Store;
    use notifio_policy::{SiteKey, Timestamp};

    #[test]
    fn each_process_reads_what_the_others_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = Store::open(dir.path()).unwrap();
        let mut b = Store::open(dir.path()).unwrap();
        let site = SiteKey::from_stored("flats.example".to_owned());
        let (t0, t1, t2) = (
            Timestamp(1_000_000),
            Timestamp(1_001_000),
            Timestamp(1_002_000),
        );
        a.transaction(|tx| tx.record_requests(1, &site, &[t0, t1], Timestamp(0)))
            .unwrap();
        b.transaction(|tx| tx.record_requests(2, &site, &[t2], Timestamp(0)))
            .unwrap();
        let seen = |s: &mut Store, me, since| {
            s.transaction(|tx| tx.requests_elsewhere(me, &site, since))
                .unwrap()
        };
        assert_eq!(seen(&mut b, 2, Timestamp(0)), vec![t0, t1]);
        assert_eq!(seen(&mut a, 1, Timestamp(0)), vec![t2]);
        assert_eq!(seen(&mut b, 2, t0), vec![t1], "only those after `since`");
        // Requests before `keep_after` are forgotten when the row is written.
        a.transaction(|tx| tx.record_requests(1, &site, &[], Timestamp(1_000_500)))
            .unwrap();
        assert_eq!(seen(&mut b, 2, Timestamp(0)), vec![t1]);
        let other = SiteKey::from_stored("rooms.example".to_owned());
        assert!(
            a.transaction(|tx| tx.requests_elsewhere(1, &other, Timestamp(0)))
                .unwrap()
                .is_empty()
        );
    }
}
