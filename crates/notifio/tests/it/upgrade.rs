//! Upgrades from every earlier schema: a state database written by the real `notifio` of each
//! schema version (`tests/fixtures/state-db/v1.db` … `v11.db`, made by the `make.sh` beside
//! them with the binaries of the commit each README entry names), opened with today's code,
//! still holds every search, listing, price, price history row, backoff entry and outbox row
//! it had, and its pending notifications are still due.
//!
//! Each `vN.json` is what `vN.db` held when it was made, read out of it by `make.sh`. The test
//! first reads the untouched copy the same way (so a fixture and its manifest that disagree
//! fail as such), then opens the copy with [`Store::open`] (which migrates it) and reads it
//! again.

use crate::util::{search_toml, watch_toml, write_config};
use notifio::store::Store;
use notifio_policy::RefusalKind;
use rusqlite::{Connection, OpenFlags, types::ValueRef};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Every schema version there is a fixture of.
const VERSIONS: std::ops::RangeInclusive<i64> = 1..=11;

/// The first schema version with the `prices` table (price history).
const PRICE_HISTORY: i64 = 5;

/// The first schema version with `searches.baseline_pages`.
const BASELINE_PAGES: i64 = 6;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state-db")
}

/// `vN.json`.
fn manifest(version: i64) -> Value {
    let path = fixtures().join(format!("v{version}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A fresh state directory whose database is a copy of `vN.db`.
fn state_with(version: i64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = fixtures().join(format!("v{version}.db"));
    std::fs::copy(&from, Store::file_in(dir.path()))
        .unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    dir
}

fn user_version(conn: &Connection) -> i64 {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap()
}

/// Every row `sql` returns, as a JSON object of its columns (as `make.sh` reads them).
fn rows(conn: &Connection, sql: &str) -> Vec<Value> {
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
    let mut out = Vec::new();
    let mut rows = stmt.query([]).unwrap();
    while let Some(row) = rows.next().unwrap() {
        let mut object = Map::new();
        for (i, name) in names.iter().enumerate() {
            let value = match row.get_ref(i).unwrap() {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(n) => Value::from(n),
                ValueRef::Real(x) => Value::from(x),
                ValueRef::Text(t) => Value::from(std::str::from_utf8(t).unwrap()),
                ValueRef::Blob(_) => panic!("{sql}: a blob in `{name}`"),
            };
            object.insert(name.clone(), value);
        }
        out.push(Value::Object(object));
    }
    out
}

/// `name → n` for a query of (name, n) rows.
fn counts(conn: &Connection, sql: &str) -> Value {
    let mut object = Map::new();
    for row in rows(conn, sql) {
        object.insert(row["name"].as_str().unwrap().to_owned(), row["n"].clone());
    }
    Value::Object(object)
}

/// What a manifest records, read the same way out of `conn`: searches, listings with their
/// prices, the price history (from schema 5), the sites' backoff entries (as JSON), the
/// outbox (`pending`: not sent yet), per search its listings and recorded checks, and (from
/// schema 6) how many pages its baseline covers. `version`: the schema the fixture was made at.
fn contents(conn: &Connection, version: i64) -> Map<String, Value> {
    let mut m = Map::new();
    let searches = if version >= BASELINE_PAGES {
        "SELECT name, url, site, baseline_at, baseline_pages FROM searches ORDER BY id"
    } else {
        "SELECT name, url, site, baseline_at FROM searches ORDER BY id"
    };
    m.insert("searches".into(), rows(conn, searches).into());
    m.insert(
        "search_listings".into(),
        counts(
            conn,
            "SELECT s.name, COUNT(*) AS n FROM search_listings sl
             JOIN searches s ON s.id = sl.search_id GROUP BY s.id ORDER BY s.id",
        ),
    );
    m.insert(
        "checks".into(),
        counts(
            conn,
            "SELECT s.name, COUNT(*) AS n FROM checks c
             JOIN searches s ON s.id = c.search_id GROUP BY s.id ORDER BY s.id",
        ),
    );
    m.insert(
        "sites".into(),
        rows(
            conn,
            "SELECT site, session_expired, changed_at, blocked_alert_for FROM sites ORDER BY site",
        )
        .into(),
    );
    m.insert(
        "listings".into(),
        rows(
            conn,
            "SELECT site, listing_id, first_seen, price, currency, title, url, rooms, area_m2
             FROM listings ORDER BY site, listing_id",
        )
        .into(),
    );
    if version >= PRICE_HISTORY {
        m.insert(
            "prices".into(),
            rows(
                conn,
                "SELECT site, listing_id, at, price, currency FROM prices
                 ORDER BY site, listing_id, at",
            )
            .into(),
        );
    }
    let backoff: Vec<Value> = rows(
        conn,
        "SELECT site, entry, probing FROM backoff ORDER BY site",
    )
    .into_iter()
    .map(|mut r| {
        let entry = r["entry"].as_str().unwrap().to_owned();
        r["entry"] = serde_json::from_str(&entry).unwrap();
        r
    })
    .collect();
    m.insert("backoff".into(), backoff.into());
    let outbox: Vec<Value> = rows(
        conn,
        "SELECT id, channel, kind, payload, sent_at IS NULL AS pending, attempts FROM outbox
         ORDER BY id",
    )
    .into_iter()
    .map(|mut r| {
        r["pending"] = Value::Bool(r["pending"] == 1);
        r
    })
    .collect();
    m.insert("outbox".into(), outbox.into());
    m
}

/// How `found` differs from the manifest `expected`, section by section: the rows of the
/// manifest that are missing or changed, and rows it does not have (empty: none).
fn differences(
    version: i64,
    when: &str,
    expected: &Value,
    found: &Map<String, Value>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (section, rows) in found {
        let Some(want) = expected.get(section) else {
            out.push(format!("v{version}.json has no `{section}`"));
            continue;
        };
        if want == rows {
            continue;
        }
        match (want.as_array(), rows.as_array()) {
            (Some(want), Some(rows)) => {
                let before = out.len();
                for row in want.iter().filter(|r| !rows.contains(r)) {
                    out.push(format!(
                        "v{version}.db {when}: `{section}` lost or changed {row}"
                    ));
                }
                for row in rows.iter().filter(|r| !want.contains(r)) {
                    out.push(format!(
                        "v{version}.db {when}: `{section}` has a row not in v{version}.json: {row}"
                    ));
                }
                if out.len() == before {
                    out.push(format!(
                        "v{version}.db {when}: `{section}` has its rows in another order"
                    ));
                }
            }
            _ => out.push(format!(
                "v{version}.db {when}: `{section}` is {rows}, v{version}.json says {want}"
            )),
        }
    }
    out
}

/// The schema version a database made by today's code has.
fn current_version() -> i64 {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path()).unwrap());
    user_version(&Connection::open(Store::file_in(dir.path())).unwrap())
}

#[test]
fn every_earlier_schema_upgrades_with_all_its_rows() {
    let current = current_version();
    assert_eq!(
        current,
        *VERSIONS.end(),
        "a new schema version: make its fixture (tests/fixtures/state-db/README.md)"
    );
    // Every version is checked, and every difference reported, before the test fails.
    let mut problems = Vec::new();
    for version in VERSIONS {
        let expected = manifest(version);
        assert_eq!(expected["version"], version);
        let dir = state_with(version);
        let path = Store::file_in(dir.path());

        // The fixture as its version left it.
        {
            let conn =
                Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            assert_eq!(user_version(&conn), version, "v{version}.db");
            let found = contents(&conn, version);
            assert_eq!(
                found.len() + 2, // and `version`, `commit`
                expected.as_object().unwrap().len(),
                "v{version}.json has other sections than the test reads"
            );
            problems.extend(differences(version, "as made", &expected, &found));
        }

        // Opened (and so migrated) by today's code.
        if let Err(e) = Store::open(dir.path()) {
            problems.push(format!("v{version}.db does not open: {e}"));
            continue;
        }
        let conn = Connection::open(&path).unwrap();
        if user_version(&conn) != current {
            problems.push(format!(
                "v{version}.db is at schema {} after the upgrade, not {current}",
                user_version(&conn)
            ));
        }
        let found = contents(&conn, version);
        problems.extend(differences(version, "after the upgrade", &expected, &found));

        // Every pending notification is still due, in order, and readable by today's sender.
        let pending: Vec<(i64, String)> = expected["outbox"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["pending"] == true)
            .map(|r| {
                let id = r["id"].as_i64().unwrap();
                (id, r["channel"].as_str().unwrap().to_owned())
            })
            .collect();
        assert!(!pending.is_empty(), "v{version}.json: no pending row");
        let due = notifio::notify::outbox::due(&conn, u64::MAX, 1000).unwrap();
        let due_ids: Vec<(i64, String)> = due
            .iter()
            .map(|r| (r.id, r.channel.as_str().to_owned()))
            .collect();
        if due_ids != pending {
            problems.push(format!(
                "v{version}.db after the upgrade: due (id, channel) {due_ids:?}, \
                 pending in v{version}.json {pending:?}"
            ));
        }
        for row in &due {
            if let Err(e) = row.notification() {
                problems.push(format!(
                    "v{version}.db after the upgrade: outbox row {} cannot be read: {e}",
                    row.id
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Runs the binary with `args`, its output in files in `dir`, for at most 30 s.
fn run_bounded(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let (out, err) = (dir.join("cmd.out"), dir.join("cmd.err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("NOTIFIO_CONFIG")
        .env_remove("NOTIFIO_DASHBOARD_TOKEN")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("notifio {args:?} still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    (status.code(), read(&out), read(&err))
}

/// The real binary on the oldest database: `notifio status --json` shows its searches, their
/// listings, and the site that was waiting when it was written, with the same wait.
#[test]
fn status_shows_what_the_oldest_database_holds() {
    let version = *VERSIONS.start();
    let expected = manifest(version);
    let dir = state_with(version);
    let mut config = watch_toml(dir.path(), "30s", "0s");
    for s in expected["searches"].as_array().unwrap() {
        config.push_str(&search_toml(
            s["name"].as_str().unwrap(),
            s["url"].as_str().unwrap(),
        ));
    }
    let path = write_config(dir.path(), &config);
    let (code, stdout, stderr) = run_bounded(
        dir.path(),
        &["--config", path.to_str().unwrap(), "status", "--json"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let view: notifio::status::StatusView =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));

    let names = |v: &[Value]| -> Vec<String> {
        v.iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let shown: Vec<String> = view.searches.iter().map(|s| s.name.clone()).collect();
    assert_eq!(shown, names(expected["searches"].as_array().unwrap()));

    let waiting = &expected["backoff"][0];
    let site = waiting["site"].as_str().unwrap();
    let entry = &waiting["entry"];
    let status = view
        .sites
        .iter()
        .find(|s| s.site == site)
        .unwrap_or_else(|| panic!("{site} not in {:?}", view.sites));
    assert_eq!(status.state.as_str(), "waiting");
    assert_eq!(status.kind.map(RefusalKind::as_str), entry["kind"].as_str());
    assert_eq!(Some(u64::from(status.failures)), entry["failures"].as_u64());
    assert_eq!(status.next_retry_at, entry["next_retry_at"].as_u64());
    assert!(status.lengthened_by_retry_after);
    // Each search shows, with their prices, the listings it found after its baseline: here
    // portal A's new listing on each of its three searches, which see every listing of the site.
    let listings = expected["listings"].as_array().unwrap();
    let mut shown_news = 0;
    for (s, old) in view
        .searches
        .iter()
        .zip(expected["searches"].as_array().unwrap())
    {
        assert_eq!(s.url, old["url"].as_str().unwrap());
        assert_eq!(s.site, old["site"].as_str().unwrap());
        if s.site == site {
            assert_eq!(s.state.as_str(), "waiting", "{s:?}");
            continue;
        }
        assert_eq!(s.state.as_str(), "ok", "{s:?}");
        let baseline = old["baseline_at"].as_u64().unwrap();
        let mut news: Vec<(String, Option<f64>)> = listings
            .iter()
            .filter(|l| l["site"] == old["site"] && l["first_seen"].as_u64().unwrap() > baseline)
            .map(|l| {
                (
                    l["listing_id"].as_str().unwrap().to_owned(),
                    l["price"].as_f64(),
                )
            })
            .collect();
        news.sort_by(|a, b| a.0.cmp(&b.0));
        let mut shown: Vec<(String, Option<f64>)> = s
            .new_listings
            .iter()
            .map(|l| (l.id.clone(), l.price))
            .collect();
        shown.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(shown, news, "{}: {s:?}", s.name);
        shown_news += shown.len();
    }
    assert!(
        shown_news >= 3,
        "no search shows a listing of the old database"
    );
}
