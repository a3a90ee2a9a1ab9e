//! Arbitrary bytes as a result page of each built-in profile file (sites/*.toml): the first
//! byte picks the profile, the rest is the page. No panic, and every listing has an id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use notifio::extract::{Catalog, ProfileCache};
use notifio_fuzz::check_extract;
use notifio_policy::SiteKey;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let catalog = Catalog::built_in();
    let files: Vec<_> = catalog
        .entries()
        .iter()
        .filter(|e| e.code.is_none())
        .collect();
    if files.is_empty() {
        return;
    }
    let entry = files[usize::from(pick) % files.len()];
    let url = format!("https://www.{}/search", entry.hosts[0]);
    let Ok(site) = SiteKey::from_url(&url) else {
        return;
    };
    let Ok(profile) =
        ProfileCache::new(Catalog::built_in()).profile_for(&site, Some(&entry.name), None)
    else {
        return;
    };
    check_extract(profile.as_ref(), body, &url);
});
