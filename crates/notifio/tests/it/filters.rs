//! Filters, price changes and "also on another portal", end to end: the real `notifio check
//! --json --notify` binary against the fake portal, delivering to a real mbox file. Every step
//! is a new process, so everything a later step relies on (what was seen, the price history)
//! survived a restart.

use fake_portal::{FakeListing, Hidden, Portal, SiteSpec};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A portal served by its own runtime, a temp state dir and the config written there.
struct Setup {
    _rt: tokio::runtime::Runtime,
    portal: Portal,
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Setup {
    /// Sites `sites` (a handful of listings each) and one `[[search]]` per `(name, site,
    /// slug, extra keys)`.
    fn new(sites: &[&str], searches: &[(&str, &str, &str, &str)]) -> Self {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let portal = rt
            .block_on(Portal::start(
                sites
                    .iter()
                    .map(|n| SiteSpec {
                        listings: 3,
                        page_bytes: 20_000,
                        ..SiteSpec::new(n)
                    })
                    .collect(),
            ))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut text = format!(
            "[watch]\nstate_dir = {:?}\ndashboard = false\n\n[notify]\nmailbox = {:?}\n",
            dir.path().display().to_string(),
            dir.path().join("out.mbox").display().to_string(),
        );
        for (name, site, slug, extra) in searches {
            text.push_str(&format!(
                "\n[[search]]\nname = {name:?}\nurl = {:?}\nlisting = {{ selector = \"article.listing\", id_attr = \"data-id\" }}\n{extra}\n",
                portal.search_url(site, slug)
            ));
        }
        let config = dir.path().join("notifio.toml");
        std::fs::write(&config, text).unwrap();
        Self {
            _rt: rt,
            portal,
            dir,
            config,
        }
    }

    /// One `notifio check --json --notify` process: its lines by search name.
    fn check(&self) -> Vec<serde_json::Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_notifio"))
            .args(["check", "--json", "--notify", "--config"])
            .arg(&self.config)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn mbox(&self) -> Mbox {
        Mbox::read(&self.dir.path().join("out.mbox"))
    }

    /// A listing on `site`'s search `slug` only, with these figures and title.
    fn add(
        &self,
        site: &str,
        slug: &str,
        title: &str,
        edit: impl FnOnce(&mut FakeListing),
    ) -> FakeListing {
        self.portal.add_listing_with(site, Some(slug), |l| {
            l.title = title.to_owned();
            edit(l);
        })
    }
}

/// The messages of an mbox file: subject (RFC 2047 decoded) and body.
struct Mbox(Vec<(String, String)>);

impl Mbox {
    fn read(path: &Path) -> Self {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Self(Vec::new());
        };
        let mut out = Vec::new();
        for entry in text
            .split("\nFrom notifio@localhost ")
            .filter(|e| !e.trim().is_empty())
        {
            let (head, body) = entry.split_once("\n\n").unwrap_or((entry, ""));
            // Unfold header lines, then decode the subject's encoded words.
            let head = head.replace("\n ", " ").replace("\n\t", " ");
            let subject = head
                .lines()
                .find_map(|l| l.strip_prefix("Subject: "))
                .map(decode_words)
                .unwrap_or_default();
            out.push((subject, body.to_owned()));
        }
        Self(out)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// The messages after the first `n`.
    fn since(&self, n: usize) -> &[(String, String)] {
        &self.0[n.min(self.0.len())..]
    }
}

/// `=?utf-8?b?…?=` words (as lettre writes a non-ASCII subject) decoded; RFC 2047: the space
/// between two encoded words is not part of the text, any other is.
fn decode_words(s: &str) -> String {
    use base64::Engine as _;
    let mut out = String::new();
    let mut after_encoded = false;
    for word in s.split(' ') {
        let encoded = word.len() > 12
            && word[..10].eq_ignore_ascii_case("=?utf-8?b?")
            && word.ends_with("?=");
        if !(out.is_empty() || (encoded && after_encoded)) {
            out.push(' ');
        }
        if encoded {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&word[10..word.len() - 2])
                .unwrap();
            out.push_str(&String::from_utf8(bytes).unwrap());
        } else {
            out.push_str(word);
        }
        after_encoded = encoded;
    }
    out
}

/// A listing to add: its title, whether the search's filters let it through, and how it
/// differs from a plain 2-room, 60 m², 1,000 € flat.
type Case = (&'static str, bool, Box<dyn FnOnce(&mut FakeListing)>);

fn line<'a>(lines: &'a [serde_json::Value], search: &str) -> &'a serde_json::Value {
    lines
        .iter()
        .find(|l| l["search"] == search)
        .unwrap_or_else(|| panic!("no line for {search}: {lines:?}"))
}

fn ids(v: &serde_json::Value) -> Vec<String> {
    let mut ids: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Each numeric filter (inclusive bounds; an unknown figure passes, unless `strict`), and
/// include / exclude with accents, case and a regex: `check --json` keeps every listing and
/// says which matched, `new` and the mbox have only the matched ones, and a listing filtered
/// out is recorded (not new again after a restart).
#[test]
fn filters_decide_what_is_announced_and_everything_is_recorded() {
    let s = Setup::new(
        &["p"],
        &[
            ("price", "p", "price", "min_price = 800\nmax_price = 1200"),
            ("rooms", "p", "rooms", "min_rooms = 2\nmax_rooms = 3"),
            ("area", "p", "area", "min_area = 50\nmax_area = 90"),
            ("strict", "p", "strict", "max_price = 1200\nstrict = true"),
            (
                "words",
                "p",
                "words",
                "include = [\"terraza\", \"/balc[oó]n/\"]\nexclude = [\"WG\", \"tausch\"]",
            ),
        ],
    );
    let baseline = s.check();
    assert_eq!(baseline.len(), 5);
    assert!(
        baseline.iter().all(|l| l["outcome"] == "ok"),
        "{baseline:?}"
    );
    let before = s.mbox().len();
    assert_eq!(before, 0, "a baseline is silent");

    let plain = |l: &mut FakeListing| {
        l.rooms = 2;
        l.area = 60;
        l.price = 1000;
    };
    // (search, ids it must announce, ids it must not)
    let mut want: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    let mut add = |search: &str, cases: Vec<Case>| {
        let (mut yes, mut no) = (Vec::new(), Vec::new());
        for (title, matches, edit) in cases {
            let l = s.add("p", search, title, |l| {
                plain(l);
                edit(l);
            });
            if matches {
                yes.push(l.id)
            } else {
                no.push(l.id)
            }
        }
        want.push((search.to_owned(), yes, no));
    };
    add(
        "price",
        vec![
            (
                "Flat at the top of the range",
                true,
                Box::new(|l| l.price = 1200),
            ),
            ("Flat at the bottom", true, Box::new(|l| l.price = 800)),
            ("Flat over budget", false, Box::new(|l| l.price = 1210)),
            (
                "Flat suspiciously cheap",
                false,
                Box::new(|l| l.price = 790),
            ),
            (
                "Flat without a price",
                true,
                Box::new(|l| l.hidden.price = true),
            ),
        ],
    );
    add(
        "rooms",
        vec![
            ("Three rooms", true, Box::new(|l| l.rooms = 3)),
            ("Four rooms", false, Box::new(|l| l.rooms = 4)),
            ("One room", false, Box::new(|l| l.rooms = 1)),
            ("Rooms not given", true, Box::new(|l| l.hidden.rooms = true)),
        ],
    );
    add(
        "area",
        vec![
            ("Ninety metres", true, Box::new(|l| l.area = 90)),
            ("Ninety-five metres", false, Box::new(|l| l.area = 95)),
            ("Forty metres", false, Box::new(|l| l.area = 40)),
            ("Area not given", true, Box::new(|l| l.hidden.area = true)),
        ],
    );
    add(
        "strict",
        vec![
            ("Priced within", true, Box::new(|l| l.price = 1100)),
            (
                "Unknown price, strict",
                false,
                Box::new(|l| {
                    l.hidden = Hidden {
                        price: true,
                        ..Hidden::default()
                    }
                }),
            ),
        ],
    );
    add(
        "words",
        vec![
            ("Ático con TERRAZA en Chamberí", true, Box::new(|_| {})),
            (
                "Piso luminoso",
                true,
                Box::new(|l| l.description = "Salón con BALCÓN a la calle.".into()),
            ),
            ("WG-Zimmer con terraza", false, Box::new(|_| {})),
            (
                "Piso con terraza",
                false,
                Box::new(|l| l.description = "Nur zum Wohnungstausch!".into()),
            ),
            ("Piso interior", false, Box::new(|_| {})),
        ],
    );

    let lines = s.check();
    let mbox = s.mbox();
    let messages = mbox.since(before);
    for (search, yes, no) in &want {
        let l = line(&lines, search);
        assert_eq!(ids(&l["new"]), sorted(yes.clone()), "{search}: {l}");
        for listing in l["listings"].as_array().unwrap() {
            let id = listing["id"].as_str().unwrap().to_owned();
            if yes.contains(&id) {
                assert_eq!(listing["matched"], true, "{search}: {listing}");
            } else if no.contains(&id) {
                assert_eq!(listing["matched"], false, "{search}: {listing}");
            }
        }
        let msg = messages
            .iter()
            .find(|(subject, _)| subject.ends_with(&format!("— {search}")))
            .unwrap_or_else(|| panic!("no message for {search}: {messages:?}"));
        assert_eq!(
            msg.0,
            format!(
                "{} new listing{} — {search}",
                yes.len(),
                if yes.len() == 1 { "" } else { "s" }
            )
        );
        for id in yes {
            assert!(
                msg.1.contains(&format!("/listing/{id}\n")),
                "{search}: {}",
                msg.1
            );
        }
        for id in no {
            assert!(
                !msg.1.contains(&format!("/listing/{id}\n")),
                "{search}: {}",
                msg.1
            );
        }
    }
    assert_eq!(messages.len(), 5, "one message per search: {messages:?}");
    let words = messages.iter().find(|m| m.0.ends_with("— words")).unwrap();
    assert!(
        words.1.contains("* Ático con TERRAZA en Chamberí\n"),
        "{}",
        words.1
    );

    // A new process: what was filtered out was recorded, so nothing is new or sent again.
    let again = s.check();
    for l in &again {
        assert!(l["new"].as_array().unwrap().is_empty(), "{l}");
    }
    assert_eq!(s.mbox().len(), before + 5);
}

/// Price changes across restarts: a drop is announced once, marked in the subject, and not
/// again while the price stays; a rise is silent; a drop smaller than `min_drop` is silent,
/// except one that brings a listing under `max_price`, which is then announced as a drop.
/// The history keeps every price.
#[test]
fn a_price_drop_is_announced_once_and_the_history_survives_restarts() {
    let s = Setup::new(
        &["p"],
        &[
            ("all", "p", "all", ""),
            (
                "budget",
                "p",
                "budget",
                "max_price = 1000\nmin_drop = \"20%\"",
            ),
        ],
    );
    s.check();
    let flat = s.add("p", "all", "Sunny flat in Lavapiés", |l| l.price = 1200);
    let over = s.add("p", "budget", "Flat just over budget", |l| l.price = 1100);
    let cheap = s.add("p", "budget", "Flat within budget", |l| l.price = 900);
    let lines = s.check();
    assert_eq!(ids(&line(&lines, "all")["new"]), vec![flat.id.clone()]);
    assert_eq!(
        ids(&line(&lines, "budget")["new"]),
        vec![cheap.id.clone()],
        "1100 > max_price"
    );
    let seen = s.mbox().len();
    assert_eq!(seen, 2);

    // 1,200 → 1,050 (−12.5%); 1,100 → 990 (10% < min_drop, but now under max_price);
    // 900 → 880 (2% < min_drop).
    s.portal.set_price("p", &flat.id, 1050).unwrap();
    s.portal.set_price("p", &over.id, 990).unwrap();
    s.portal.set_price("p", &cheap.id, 880).unwrap();
    let lines = s.check();
    let changes = &line(&lines, "all")["price_changes"];
    assert_eq!(changes[0]["id"], flat.id.as_str());
    assert_eq!(changes[0]["from"], 1200.0);
    assert_eq!(changes[0]["to"], 1050.0);
    assert!(line(&lines, "all")["new"].as_array().unwrap().is_empty());
    assert_eq!(
        line(&lines, "budget")["price_changes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let mbox = s.mbox();
    let news = mbox.since(seen);
    println!("{news:#?}");
    assert_eq!(news.len(), 2, "{news:?}");
    let drop = news.iter().find(|m| m.1.contains(&flat.url)).unwrap();
    assert_eq!(
        drop.0,
        "Price dropped: 1,200 → 1,050 EUR (−12.5%) — Sunny flat in Lavapiés"
    );
    assert!(
        drop.1.contains(
            "* Sunny flat in Lavapiés\n  Price dropped: 1,200 → 1,050 EUR (−12.5%)\n  1,050 € · "
        ),
        "{}",
        drop.1
    );
    let brought_in = news.iter().find(|m| m.1.contains(&over.url)).unwrap();
    assert_eq!(
        brought_in.0,
        "Price dropped: 1,100 → 990 EUR (−10%) — Flat just over budget"
    );
    assert!(
        !brought_in.1.contains(&cheap.url),
        "a 2% drop is under min_drop"
    );

    // Restart: the price stays, nothing is announced again.
    let lines = s.check();
    assert!(
        line(&lines, "all")["price_changes"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.mbox().len(), seen + 2);

    // A rise is recorded and silent.
    s.portal.set_price("p", &flat.id, 1150).unwrap();
    let lines = s.check();
    assert_eq!(line(&lines, "all")["price_changes"][0]["to"], 1150.0);
    assert_eq!(s.mbox().len(), seen + 2, "no message for a rise");

    // The history, read from the state database the processes left.
    let store = notifio::store::Store::open(s.dir.path()).unwrap();
    let site = line(&lines, "all")["site"].as_str().unwrap().to_owned();
    let prices: Vec<f64> = store
        .price_history(&site, &flat.id)
        .unwrap()
        .iter()
        .map(|(_, p, _)| *p)
        .collect();
    assert_eq!(prices, [1200.0, 1050.0, 1150.0]);
    let currencies: Vec<_> = store
        .price_history(&site, &flat.id)
        .unwrap()
        .into_iter()
        .map(|(_, _, c)| c)
        .collect();
    assert!(
        currencies.iter().all(|c| c.as_deref() == Some("EUR")),
        "{currencies:?}"
    );
}

/// The same flat on a second portal is announced with "also on <the other site>, seen …" and
/// that listing's link; three near-misses (a room more, 3.5% more area, 4% dearer) get no
/// note; `skip_cross_site_duplicates` leaves the duplicate out of that search's messages.
#[test]
fn the_same_flat_on_another_portal_is_noted_and_near_misses_are_not() {
    let s = Setup::new(
        &["first", "second"],
        &[
            ("first", "first", "madrid", ""),
            ("second", "second", "madrid", ""),
            (
                "second, no duplicates",
                "second",
                "madrid-2",
                "skip_cross_site_duplicates = true",
            ),
        ],
    );
    s.check();
    let original = s.add(
        "first",
        "madrid",
        "Piso en calle de Ponzano, Chamberí",
        |l| {
            (l.price, l.rooms, l.area) = (1200, 3, 85);
        },
    );
    s.check();
    let seen = s.mbox().len();
    assert_eq!(seen, 1);
    let figures = |price, rooms, area| {
        move |l: &mut FakeListing| (l.price, l.rooms, l.area) = (price, rooms, area)
    };
    let pair = s.add(
        "second",
        "madrid",
        "Piso en alquiler en Calle Ponzano 45",
        figures(1180, 3, 84),
    );
    let misses = [
        s.add(
            "second",
            "madrid",
            "Ponzano, Chamberí: one more room",
            figures(1200, 4, 85),
        ),
        s.add(
            "second",
            "madrid",
            "Ponzano, Chamberí: bigger",
            figures(1200, 3, 88),
        ),
        s.add(
            "second",
            "madrid",
            "Ponzano, Chamberí: dearer",
            figures(1250, 3, 85),
        ),
    ];
    let skipped = s.add(
        "second",
        "madrid-2",
        "Calle Ponzano, Chamberí",
        figures(1200, 3, 85),
    );
    let other = s.add(
        "second",
        "madrid-2",
        "Calle Fuencarral, Malasaña",
        figures(1200, 3, 85),
    );
    let lines = s.check();
    let first_site = line(&lines, "first")["site"].as_str().unwrap().to_owned();

    let mbox = s.mbox();
    let news = mbox.since(seen);
    println!("{news:#?}");
    let second = news
        .iter()
        .find(|m| m.0 == "4 new listings — second")
        .unwrap();
    let note = format!(
        "  Also on {first_site}, seen moments ago: {}\n",
        original.url
    );
    assert_eq!(second.1.matches(&note).count(), 1, "{}", second.1);
    let block = |l: &FakeListing| {
        let at = second.1.find(&format!("* {}\n", l.title)).unwrap();
        let rest = &second.1[at..];
        rest[..rest[2..].find("\n* ").map_or(rest.len(), |e| e + 2)].to_owned()
    };
    assert!(block(&pair).contains(&note), "{}", block(&pair));
    for miss in &misses {
        assert!(!block(miss).contains("Also on"), "{}", block(miss));
    }
    // The search that skips duplicates hears of the other flat only.
    let skipping = news
        .iter()
        .find(|m| m.0.ends_with("— second, no duplicates"))
        .unwrap();
    assert_eq!(skipping.0, "1 new listing — second, no duplicates");
    assert!(skipping.1.contains(&other.url) && !skipping.1.contains(&skipped.url));
    assert_eq!(
        ids(&line(&lines, "second, no duplicates")["new"]),
        sorted(vec![skipped.id.clone(), other.id.clone()]),
        "both are new listings that match; only the message leaves the duplicate out"
    );
}
