//! Sites as data, from a user's side: a profile file dropped into `sites/` beside the config
//! reads a portal with no `listing` spec, overrides a built-in profile of the same name, and
//! is listed by `notifio profiles`; a bad file or an unknown name is a config error at its place.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn notifio(args: &[&str], config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_notifio"))
        .args(args)
        .arg("--config")
        .arg(config)
        // Only the `sites/` beside the config: not the machine's ~/.config/notifio/sites.
        .env("XDG_CONFIG_HOME", config.parent().unwrap().join("xdg"))
        .output()
        .unwrap()
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// A fake portal with site `p`, and a config (in a temp dir) whose one search on it has no
/// `listing` spec; `search_extra` goes into the `[[search]]` table.
pub(crate) fn portal_and_config(
    search_extra: &str,
) -> (
    tokio::runtime::Runtime,
    fake_portal::Portal,
    tempfile::TempDir,
    PathBuf,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let portal = rt
        .block_on(fake_portal::Portal::start(vec![
            fake_portal::SiteSpec::new("p"),
        ]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notifio.toml");
    std::fs::write(
        &path,
        format!(
            "[watch]\nstate_dir = {:?}\ndashboard = false\n\n[[search]]\nname = \"s\"\nurl = {:?}\n{search_extra}",
            dir.path().join("state").display().to_string(),
            portal.search_url("p", "s")
        ),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("sites")).unwrap();
    (rt, portal, dir, path)
}

pub(crate) fn host(portal: &fake_portal::Portal) -> String {
    portal
        .base_url("p")
        .trim_start_matches("http://")
        .to_owned()
}

fn profile_file(name: &str, host: &str) -> String {
    format!(
        "name = \"{name}\"\nabout = \"the fake portal\"\nhosts = [\"{host}\"]\n\n[listing]\nselector = \"article.listing\"\nid_attr = \"data-id\"\ntitle = \"h2\"\nprice = {{ selector = \".price\" }}\n"
    )
}

fn checked_listings(out: &Output) -> usize {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(v["outcome"], "ok", "{v}");
    v["listings"].as_array().map_or(0, Vec::len)
}

#[test]
fn a_profile_file_beside_the_config_reads_its_portal_without_a_listing_spec() {
    let (_rt, portal, dir, path) = portal_and_config("");
    // Without the file: a site without a profile, read by auto mode.
    let out = notifio(&["check", "--json"], &path);
    assert!(checked_listings(&out) > 0, "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("\"read\":\"auto\""));

    let file = dir.path().join("sites/fake.toml");
    std::fs::write(&file, profile_file("fake", &host(&portal))).unwrap();
    let out = notifio(&["profiles"], &path);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    let row = listed
        .lines()
        .find(|l| l.starts_with("fake "))
        .unwrap_or_else(|| panic!("no row for the file's profile:\n{listed}"));
    assert!(row.contains(&host(&portal)), "{row}");
    assert!(
        row.contains(&file.display().to_string()),
        "says where it comes from: {row}"
    );
    assert!(
        listed.contains("idealista"),
        "the built-in ones too:\n{listed}"
    );

    let out = notifio(&["check", "--json", "--fresh"], &path);
    assert!(checked_listings(&out) > 0, "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("\"read\":\"profile\""));
    assert!(portal.request_count("p") >= 1);
}

#[test]
fn a_user_file_overrides_the_built_in_profile_of_its_name() {
    let (_rt, portal, dir, path) = portal_and_config("profile = \"idealista\"\n");
    // The built-in idealista profile does not read the fake portal's cards (auto mode does,
    // in its stead, and says so)…
    let out = notifio(&["check", "--json"], &path);
    let v: serde_json::Value =
        serde_json::from_str(text(&out.stdout).lines().next().unwrap_or("{}")).unwrap();
    assert_eq!(v["read"], "auto_fallback", "{v}");
    // …the user's `idealista` does, and `profiles` says it comes from the file.
    let file = dir.path().join("sites/my-idealista.toml");
    std::fs::write(&file, profile_file("idealista", "idealista.com")).unwrap();
    let out = notifio(&["check", "--json", "--fresh"], &path);
    assert!(checked_listings(&out) > 0);
    assert!(text(&out.stdout).contains("\"read\":\"profile\""));
    let out = notifio(&["profiles", "--json"], &path);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mine: Vec<_> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "idealista")
        .collect();
    assert_eq!(mine.len(), 1, "one idealista: {all}");
    assert_eq!(mine[0]["from"], file.display().to_string());
    assert_eq!(mine[0]["fetch"], "http");
    let _ = portal;
}

#[test]
fn an_unknown_profile_name_is_an_error_naming_the_known_ones() {
    let (_rt, _portal, dir, path) = portal_and_config("profile = \"zillow\"\n");
    std::fs::write(
        dir.path().join("sites/fake.toml"),
        profile_file("fake", "fake.example"),
    )
    .unwrap();
    let out = notifio(&["check"], &path);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("unknown profile `zillow`"), "{err}");
    assert!(
        [
            "`idealista`",
            "`immoscout24`",
            "`facebook`",
            "`fake`",
            "`generic`"
        ]
        .iter()
        .all(|n| err.contains(n)),
        "names the known ones, the user's too: {err}"
    );
    assert!(err.contains("notifio.toml:"), "at its place: {err}");
}

#[test]
fn a_bad_profile_file_stops_every_command_at_its_line_and_key() {
    let (_rt, _portal, dir, path) =
        portal_and_config("listing = { selector = \"article.listing\" }\n");
    std::fs::write(
        dir.path().join("sites/bad.toml"),
        "name = \"bad\"\nhosts = [\"bad.example\"]\n\n[listing]\nselector = \"li\"\nprize = \".price\"\n",
    )
    .unwrap();
    for args in [&["check"][..], &["profiles"][..]] {
        let out = notifio(args, &path);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains("bad.toml:6:1"), "{args:?}: {err}");
        assert!(err.contains("prize"), "{args:?}: {err}");
    }
}

/// Issue 53: a `[json]` profile whose list path descends five times (`$..*..*..*..*..*`) took
/// 3 GB on a 13 KB page and aborted the process; a selector of 1,000 descendant steps grew to
/// 21 GB. Both are refused at start, at their place in their file.
#[test]
fn a_profile_that_would_explode_is_refused_at_its_line_and_key() {
    let (_rt, _portal, dir, path) = portal_and_config("profile = \"boom\"\n");
    let cases = [
        (
            "name = \"boom\"\nhosts = [\"boom.example\"]\n\n[json]\nscript = \"__NEXT_DATA__\"\nitems = \"$..*..*..*..*..*\"\nid = \"$.id\"\n",
            "boom.toml:6:1",
            "json.items",
        ),
        (
            &*format!(
                "name = \"boom\"\nhosts = [\"boom.example\"]\n\n[listing]\nselector = \"{}article\"\n",
                "div ".repeat(1_000)
            ),
            "boom.toml:4:1",
            "1000 descendant steps",
        ),
    ];
    for (file, place, what) in cases {
        std::fs::write(dir.path().join("sites/boom.toml"), file).unwrap();
        let out = notifio(&["check"], &path);
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert!(err.contains(place) && err.contains(what), "{err}");
        assert!(err.len() < 600, "a long selector is quoted short: {err}");
    }
}

/// Every built-in profile file (a portal's `crates/notifio/sites/<name>.toml`, not a code
/// profile) is picked by its portal's host and reads that portal's real saved results page
/// (`tests/fixtures/sites/<name>.html`, provenance in its README) field by field, as a person
/// reads the cards (`<name>.json`): a field a card does not show is none.
#[test]
fn each_portal_profile_reads_its_real_results_page_field_by_field() {
    use notifio::extract::{Catalog, Extraction, ProfileCache};
    use notifio_policy::SiteKey;
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sites"));
    let catalog = Catalog::built_in();
    let portals: Vec<_> = catalog
        .entries()
        .iter()
        .filter(|e| e.code.is_none())
        .map(|e| e.name.clone())
        .collect();
    assert!(portals.len() >= 7, "portal profiles: {portals:?}");
    for name in &portals {
        let page = std::fs::read(dir.join(format!("{name}.html")))
            .unwrap_or_else(|e| panic!("{name}: every portal profile has a real page: {e}"));
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).unwrap())
                .unwrap_or_else(|e| panic!("{name}.json: {e}"));
        let base = url::Url::parse(expected["base_url"].as_str().unwrap()).unwrap();
        let site = SiteKey::from_url(base.as_str()).unwrap();
        let profile = ProfileCache::new(catalog.clone())
            .profile_for(&site, None, None)
            .unwrap();
        assert_eq!(
            profile.name(),
            name,
            "{base} is read with its portal's profile"
        );
        let Extraction::Listings(got) = profile.extract(&page, &base) else {
            panic!("{name}: no listings on its page");
        };
        let want = expected["listings"].as_array().unwrap();
        assert_eq!(
            got.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
            want.iter()
                .map(|l| l["id"].as_str().unwrap())
                .collect::<Vec<_>>(),
            "{name}: the cards' ids in page order"
        );
        for (l, w) in got.iter().zip(want) {
            let at = format!("{name} listing {}", l.id);
            let text = |k: &str| w[k].as_str().map(str::to_owned);
            let num = |k: &str| w[k].as_f64();
            let href = text("href").map(|h| base.join(&h).unwrap().to_string());
            assert_eq!(l.url, href, "{at}: link");
            assert_eq!(l.title, text("title"), "{at}: title");
            assert_eq!(l.price, num("price"), "{at}: price");
            assert_eq!(l.rooms, num("rooms"), "{at}: rooms");
            assert_eq!(l.area_m2, num("area_m2"), "{at}: area");
            let image = text("image").map(|i| base.join(&i).unwrap().to_string());
            assert_eq!(l.image, image, "{at}: image");
        }
        if let Some(next) = expected["next"].as_str() {
            assert_eq!(
                profile.next_page(&page, &base, 1).map(|u| u.to_string()),
                Some(base.join(next).unwrap().to_string()),
                "{name}: next page"
            );
        }
    }
}

/// A file in `sites/` that is far too large for a profile (1 GiB, sparse) is refused by its
/// size, naming the file and the cap, after reading no more than the cap: the command runs
/// with 256 MiB of address space and still answers at once with a config error.
#[test]
fn a_huge_profile_file_is_refused_by_its_size_without_reading_it() {
    let (_rt, _portal, dir, path) =
        portal_and_config("listing = { selector = \"article.listing\" }\n");
    let huge = dir.path().join("sites/huge.toml");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let started = std::time::Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 262144 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_notifio"))
        .args(["profiles", "--config"])
        .arg(&path)
        .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
        .output()
        .unwrap();
    let err = text(&out.stderr);
    println!("{err}({:?})", started.elapsed());
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&huge.display().to_string()), "{err}");
    assert!(err.contains("256 KiB"), "names the cap: {err}");
}

/// Two of the user's files that claim the same site cannot both be picked for it: a config
/// error naming both files and the site, for `profiles` and for every other command.
#[test]
fn two_profile_files_claiming_one_site_are_an_error_naming_both() {
    let (_rt, portal, dir, path) = portal_and_config("");
    let (a, b) = (
        dir.path().join("sites/a.toml"),
        dir.path().join("sites/b.toml"),
    );
    std::fs::write(&a, profile_file("fake-a", &host(&portal))).unwrap();
    std::fs::write(&b, profile_file("fake-b", &host(&portal))).unwrap();
    for args in [&["profiles"][..], &["check", "--json"][..]] {
        let out = notifio(args, &path);
        let err = text(&out.stderr);
        println!("{args:?}: {err}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for needle in [
            a.display().to_string(),
            b.display().to_string(),
            host(&portal),
        ] {
            assert!(err.contains(&needle), "{args:?} lacks {needle}: {err}");
        }
        assert!(err.contains("b.toml:3:"), "at the host's place: {err}");
    }
    assert_eq!(portal.request_count("p"), 0, "nothing was checked");
}
