//! The policy's states and outcomes as database values: each is stored under the name it has
//! in JSON and in `notifio status` (`ok`, `waiting`, `rate_limited`, …), so the database, the
//! views and the logs say one thing, and a name read back is the enum again, never a string
//! compared by hand.
//!
//! A name this version does not know is a [`FromSqlError`] naming it: the schema version
//! already refuses a database from a newer Notifio, so it can only mean a damaged value.

use notifio_policy::{Outcome, SearchState};
use rusqlite::ToSql;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};

/// A value stored by its name.
pub trait Named: Copy + Sized + 'static {
    /// What it is, for an error ("search state").
    const WHAT: &'static str;
    /// Its name.
    fn name(self) -> &'static str;
    /// The value of a name.
    fn from_name(name: &str) -> Option<Self>;
}

impl Named for SearchState {
    const WHAT: &'static str = "search state";
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn from_name(name: &str) -> Option<Self> {
        Self::parse(name)
    }
}

impl Named for Outcome {
    const WHAT: &'static str = "check outcome";
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn from_name(name: &str) -> Option<Self> {
        Self::parse(name)
    }
}

/// `T` in a column, by its name. Rust's orphan rule keeps rusqlite's traits off the policy's
/// own types, so they go in and out through this wrapper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByName<T>(pub T);

impl<T: Named> ToSql for ByName<T> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.0.name()))
    }
}

impl<T: Named> FromSql for ByName<T> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let name = value.as_str()?;
        T::from_name(name)
            .map(ByName)
            .ok_or_else(|| FromSqlError::Other(format!("unknown {} `{name}`", T::WHAT).into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn every_state_and_outcome_reads_back_as_itself() {
        let conn = Connection::open_in_memory().unwrap();
        for s in SearchState::ALL {
            let back: ByName<SearchState> = conn
                .query_row("SELECT ?1", [ByName(s)], |r| r.get(0))
                .unwrap();
            assert_eq!(back.0, s);
        }
        for o in Outcome::REPORTED {
            let back: ByName<Outcome> = conn
                .query_row("SELECT ?1", [ByName(o)], |r| r.get(0))
                .unwrap();
            assert_eq!(back.0, o);
        }
        // A 304 is stored as `ok`: what it was to the user and the site.
        let back: ByName<Outcome> = conn
            .query_row("SELECT ?1", [ByName(Outcome::Unchanged)], |r| r.get(0))
            .unwrap();
        assert_eq!(back.0, Outcome::Ok);
    }

    #[test]
    fn an_unknown_name_is_an_error_that_names_it() {
        let conn = Connection::open_in_memory().unwrap();
        let e = conn
            .query_row("SELECT 'sleeping'", [], |r| {
                r.get::<_, ByName<SearchState>>(0)
            })
            .unwrap_err();
        assert!(
            e.to_string().contains("unknown search state `sleeping`"),
            "{e}"
        );
    }
}
