//! The portal's pages: deterministic listings and realistic HTML around them.
//!
//! Result pages are padded to the site's `page_bytes` (real portals ship ~300 KB of navigation,
//! inline CSS and scripts around ~30 cards), so that fetch, decompression and extraction costs
//! in tests and benchmarks look like the real thing. Everything derives from the site's seed.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::fmt::Write as _;

/// How many cards a result page shows (the newest ones).
pub const CARDS_PER_PAGE: usize = 30;

/// The size of each image a result page shows (`SiteSpec::images`).
pub const IMAGE_BYTES: usize = 48 * 1024;

/// What a site's result pages carry besides the cards (`SiteSpec::render`, `poll`, `images`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Extras {
    /// Cards built by a script this long after load instead of being in the HTML.
    pub(crate) render_after: Option<std::time::Duration>,
    /// A script calls `/poll` this often.
    pub(crate) poll: Option<std::time::Duration>,
    /// Images shown.
    pub(crate) images: usize,
}

/// A listing on the fake portal, as a test would expect an extractor to read it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeListing {
    /// The listing id (`data-id` and the `/listing/{id}` link).
    pub id: String,
    /// Title, e.g. `2-room flat in Chamberí`.
    pub title: String,
    /// Monthly rent in euros.
    pub price: u32,
    /// Rooms.
    pub rooms: u32,
    /// Living area in m².
    pub area: u32,
    /// Absolute URL of the detail page.
    pub url: String,
    /// The search it appears on; `None` = every search of the site.
    pub search: Option<String>,
    /// The card's description.
    pub description: String,
    /// Figures the card does not show (so a reader cannot know them).
    pub hidden: Hidden,
}

/// Which of its figures a card leaves out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hidden {
    /// No price on the card.
    pub price: bool,
    /// No rooms on the card.
    pub rooms: bool,
    /// No area on the card.
    pub area: bool,
}

impl FakeListing {
    /// The price as the page prints it: `1.250 €/mes`.
    #[must_use]
    pub fn price_text(&self) -> String {
        format!("{} €/mes", thousands(self.price))
    }
}

const KINDS: [&str; 6] = [
    "Studio",
    "1-room flat",
    "2-room flat",
    "3-room flat",
    "Penthouse",
    "Duplex",
];
const AREAS: [&str; 12] = [
    "Chamberí",
    "Malasaña",
    "Lavapiés",
    "Salamanca",
    "Retiro",
    "Chueca",
    "Arganzuela",
    "Tetuán",
    "Prenzlauer Berg",
    "Kreuzberg",
    "Neukölln",
    "Gràcia",
];
const WORDS: [&str; 16] = [
    "bright",
    "renovated",
    "quiet",
    "balcony",
    "lift",
    "furnished",
    "terrace",
    "close to the metro",
    "exterior",
    "air conditioning",
    "built-in wardrobes",
    "parquet floors",
    "south-facing",
    "high ceilings",
    "storage room",
    "pets allowed",
];

/// The `n`-th listing of a site with this seed (0-based); ids are stable across runs.
pub(crate) fn make_listing(seed: u64, n: u64, base_url: &str, search: Option<&str>) -> FakeListing {
    let mut rng = SmallRng::seed_from_u64(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let kind = rng.random_range(0..KINDS.len());
    let rooms = match kind {
        0 => 1,
        1 => 1,
        2 => 2,
        3 => 3,
        _ => rng.random_range(2..=5),
    };
    let area = 25 + rooms * 20 + rng.random_range(0..25);
    let price = (area * rng.random_range(14..=24) / 10) * 10;
    let id = (40_000_000 + (seed % 1000) * 100_000 + n).to_string();
    FakeListing {
        url: format!("{base_url}/listing/{id}"),
        id: id.clone(),
        title: format!(
            "{} in {}",
            KINDS[kind],
            AREAS[rng.random_range(0..AREAS.len())]
        ),
        price,
        rooms,
        area,
        search: search.map(str::to_owned),
        description: description(&id),
        hidden: Hidden::default(),
    }
}

fn thousands(n: u32) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push('.');
        }
        out.push(c);
    }
    out
}

fn description(id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let mut rng = SmallRng::seed_from_u64(h);
    let mut words: Vec<&str> = (0..8)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect();
    words.dedup();
    format!(
        "A {} home: {}. Available now, minimum stay twelve months, deposit two months.",
        words[0],
        words.join(", ")
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"es\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>",
        escape(title)
    );
    // Inline CSS, as real portals ship it.
    for i in 0..40 {
        let _ = write!(
            out,
            ".c{i}{{margin:{i}px;padding:{}px;color:#{:06x};font:14px/1.4 sans-serif}}",
            i % 7,
            (i * 0x1f3d5) % 0xff_ffff
        );
    }
    out.push_str("</style></head><body>");
    out.push_str("<header><nav class=\"main-nav\"><a href=\"/\">Inicio</a> <a href=\"/search/all\">Alquiler</a> <a href=\"/login\">Acceder</a></nav></header>");
}

fn pad_to(out: &mut String, target: usize) {
    out.push_str("<footer class=\"seo-links\">");
    let mut i = 0usize;
    while out.len() + 40 < target {
        let area = AREAS[i % AREAS.len()];
        let kind = KINDS[i % KINDS.len()];
        let _ = writeln!(
            out,
            "<a class=\"seo\" href=\"/search/seo-{i}\">{kind} en alquiler en {area} ({i})</a>"
        );
        i += 1;
    }
    out.push_str("</footer></body></html>\n");
}

/// The link from a result page to the next.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NextLink<'a> {
    /// Where it points (a path on the site).
    pub(crate) href: &'a str,
    /// With `rel="next"`; else only its class, `next-page`.
    pub(crate) rel: bool,
}

/// A search result page: newest listing first, then the link to the next page if any, padded
/// to `page_bytes`.
pub(crate) fn result_page(
    site: &str,
    search: &str,
    listings: &[&FakeListing],
    page_bytes: usize,
    extras: Extras,
    next: Option<NextLink<'_>>,
) -> String {
    let mut out = String::with_capacity(page_bytes + 4096);
    head(&mut out, &format!("Pisos en alquiler: {search} — {site}"));
    let _ = write!(
        out,
        "<main><h1 class=\"results-title\">{} pisos en alquiler ({})</h1>",
        listings.len(),
        escape(search)
    );
    if extras.images > 0 {
        out.push_str("<section class=\"gallery\">");
        for i in 0..extras.images {
            let _ = write!(
                out,
                "<img src=\"/img/{i}.jpg\" width=\"320\" height=\"240\" alt=\"photo {i}\">"
            );
        }
        out.push_str("</section>");
    }
    out.push_str("<section class=\"results\">");
    if let Some(after) = extras.render_after {
        scripted_cards(&mut out, listings, after);
        listings_tail(&mut out, extras, page_bytes, next);
        return out;
    }
    for l in listings {
        let _ = writeln!(
            out,
            "<article class=\"listing\" data-id=\"{id}\"><a class=\"listing-link\" href=\"/listing/{id}\">\
             <h2 class=\"title\">{title}</h2></a>{price}{rooms}{area}\
             <p class=\"description\">{desc}</p></article>",
            id = l.id,
            title = escape(&l.title),
            price = if l.hidden.price {
                String::new()
            } else {
                format!("<span class=\"price\">{}</span>", l.price_text())
            },
            rooms = if l.hidden.rooms {
                String::new()
            } else {
                format!("<span class=\"rooms\">{} hab.</span>", l.rooms)
            },
            area = if l.hidden.area {
                String::new()
            } else {
                format!("<span class=\"area\">{} m²</span>", l.area)
            },
            desc = escape(&l.description),
        );
    }
    listings_tail(&mut out, extras, page_bytes, next);
    out
}

fn listings_tail(out: &mut String, extras: Extras, page_bytes: usize, next: Option<NextLink<'_>>) {
    out.push_str("</section>");
    if let Some(next) = next {
        let rel = if next.rel { " rel=\"next\"" } else { "" };
        let _ = write!(
            out,
            "<nav class=\"pagination\"><a class=\"next-page\"{rel} href=\"{}\">Siguiente</a></nav>",
            escape(next.href)
        );
    }
    out.push_str("</main>");
    if let Some(every) = extras.poll {
        let _ = write!(
            out,
            "<script>setInterval(function () {{ fetch('/poll?t=' + Date.now()); }}, {});</script>",
            every.as_millis()
        );
    }
    pad_to(out, page_bytes);
}

/// The cards as data, and a script that builds the same markup as the HTML cards `after`
/// the page loads (as single-page apps do). The HTML has no card and no listing link.
fn scripted_cards(out: &mut String, listings: &[&FakeListing], after: std::time::Duration) {
    let data: Vec<serde_json::Value> = listings
        .iter()
        .map(|l| {
            serde_json::json!({
                "id": l.id,
                "title": l.title,
                "price": l.price_text(),
                "rooms": l.rooms,
                "area": l.area,
                "description": l.description,
            })
        })
        .collect();
    let json = serde_json::to_string(&data)
        .unwrap_or_else(|_| "[]".into())
        .replace("</", "<\\/");
    let _ = write!(
        out,
        "<script id=\"listing-data\" type=\"application/json\">{json}</script>\
         <script>setTimeout(function () {{\
           var data = JSON.parse(document.getElementById('listing-data').textContent);\
           var list = document.querySelector('section.results');\
           data.forEach(function (l) {{\
             var card = document.createElement('article');\
             card.className = 'listing'; card.setAttribute('data-id', l.id);\
             var a = document.createElement('a'); a.className = 'listing-link';\
             a.href = '/listing/' + l.id;\
             var h = document.createElement('h2'); h.className = 'title'; h.textContent = l.title;\
             a.appendChild(h); card.appendChild(a);\
             [['price', l.price], ['rooms', l.rooms + ' hab.'], ['area', l.area + ' m\\u00b2']]\
               .forEach(function (f) {{ var s = document.createElement('span');\
                 s.className = f[0]; s.textContent = f[1]; card.appendChild(s); }});\
             var p = document.createElement('p'); p.className = 'description';\
             p.textContent = l.description; card.appendChild(p);\
             list.appendChild(card);\
           }});\
         }}, {});</script>",
        after.as_millis()
    );
}

/// Page `page` of an app search's result list, in the shape of ImmobilienScout24's app answer
/// (`resultListItems` of `EXPOSE_RESULT`s with their headline figures), `total` listings in
/// all, `per_page` a page.
pub(crate) fn app_result_list(
    listings: &[&FakeListing],
    page: usize,
    total: usize,
    per_page: usize,
) -> String {
    let items: Vec<serde_json::Value> = listings
        .iter()
        .map(|l| {
            serde_json::json!({
                "type": "EXPOSE_RESULT",
                "item": {
                    "id": l.id,
                    "title": l.title,
                    "titlePicture": { "full": format!("https://pictures.example/{}.jpg", l.id) },
                    "attributes": [
                        { "label": "", "value": format!("{} €", thousands(l.price)) },
                        { "label": "", "value": format!("{} m²", l.area) },
                        { "label": "", "value": format!("{} Zi.", l.rooms) },
                    ],
                    "realEstateType": "apartmentrent",
                }
            })
        })
        .collect();
    serde_json::json!({
        "totalResults": total,
        "pageSize": per_page,
        "pageNumber": page,
        "numberOfPages": total.div_ceil(per_page.max(1)).max(1),
        "resultListItems": items,
    })
    .to_string()
}

/// A listing's detail page.
pub(crate) fn detail_page(site: &str, l: &FakeListing) -> String {
    let mut out = String::with_capacity(16 * 1024);
    head(&mut out, &format!("{} — {site}", l.title));
    let _ = write!(
        out,
        "<main class=\"detail\" data-id=\"{id}\"><h1 class=\"title\">{title}</h1>\
         <span class=\"price\">{price}</span><span class=\"rooms\">{rooms} hab.</span>\
         <span class=\"area\">{area} m²</span><p class=\"description\">{desc}</p></main>",
        id = l.id,
        title = escape(&l.title),
        price = l.price_text(),
        rooms = l.rooms,
        area = l.area,
        desc = escape(&l.description),
    );
    pad_to(&mut out, 12 * 1024);
    out
}

/// The login form of a login-walled site; it posts back to `/login` with where to go next.
pub(crate) fn login_page(next: &str) -> String {
    simple_page(
        "Iniciar sesión",
        &format!(
            "<form class=\"login\" method=\"post\" action=\"/login\">\
             <input type=\"hidden\" name=\"next\" value=\"{}\">\
             <input name=\"email\" type=\"email\"><input name=\"password\" type=\"password\">\
             <button type=\"submit\">Entrar</button></form>",
            escape(next)
        ),
    )
}

/// A small page with a title and one paragraph (login, errors, index).
/// A page whose one card sits `depth` `<div>`s deep, different on every call: what a hostile
/// site serves to stall a reader whose cost grows with nesting.
pub(crate) fn nested_page(depth: usize) -> String {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "<!doctype html><html><head><title>Deep {n}</title></head><body>{}\
         <article class=\"listing\" data-id=\"deep-{n}\"><a href=\"/listing/deep-{n}\">Deep {n}</a></article>\
         {}</body></html>",
        "<div>".repeat(depth),
        "</div>".repeat(depth)
    )
}

pub(crate) fn simple_page(title: &str, body_html: &str) -> String {
    let mut out = String::new();
    head(&mut out, title);
    let _ = writeln!(
        out,
        "<main><h1>{}</h1>{body_html}</main></body></html>",
        escape(title)
    );
    out
}

/// The kind of anti-bot page a site shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengeKind {
    /// Cloudflare managed challenge (`cf-mitigated: challenge`, "Just a moment...").
    Cloudflare,
    /// DataDome (`x-datadome`, a `geo.captcha-delivery.com` script).
    DataDome,
    /// Geetest slider (`initGeetest`), as ImmobilienScout24 shows it.
    Geetest,
}

/// Headers and body of a challenge page, with the markers real vendors use.
pub(crate) fn challenge(kind: ChallengeKind) -> (Vec<(&'static str, &'static str)>, String) {
    match kind {
        ChallengeKind::Cloudflare => (
            vec![("cf-mitigated", "challenge"), ("server", "cloudflare")],
            "<!DOCTYPE html><html lang=\"en-US\"><head><title>Just a moment...</title>\
             <meta http-equiv=\"refresh\" content=\"390\"></head><body>\
             <div class=\"main-wrapper\"><h1>Verifying you are human. This may take a few seconds.</h1></div>\
             <script>(function(){window._cf_chl_opt={cvId: '3',cType: 'managed'};}());</script>\
             </body></html>\n"
                .to_owned(),
        ),
        ChallengeKind::DataDome => (
            vec![("x-datadome", "protected"), ("x-dd-b", "1")],
            "<html><head><title>portal</title></head><body style=\"margin:0\">\
             <script data-cfasync=\"false\">var dd={'rt':'c','cid':'AHrlqAAAAAMA','hsh':'2211F522B61E269B869FA6EAFFB5E1','s':17434,'host':'geo.captcha-delivery.com'}</script>\
             <script data-cfasync=\"false\" src=\"https://ct.captcha-delivery.com/c.js\"></script>\
             <iframe src=\"https://geo.captcha-delivery.com/captcha/?initialCid=AHrlqAAAAAMA\" width=\"100%\" height=\"100%\"></iframe>\
             </body></html>\n"
                .to_owned(),
        ),
        ChallengeKind::Geetest => (
            vec![],
            "<!DOCTYPE html><html><head><title>Ich bin kein Roboter</title>\
             <script src=\"https://static.geetest.com/static/tools/gt.js\"></script></head><body>\
             <div id=\"captcha-box\"></div><script>initGeetest({gt: 'a1b2c3', challenge: 'd4e5f6', offline: false, new_captcha: true, product: 'float'}, function (captchaObj) { captchaObj.appendTo('#captcha-box'); });</script>\
             </body></html>\n"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_are_deterministic_and_pages_have_the_requested_size() {
        let a = make_listing(7, 3, "http://x", None);
        assert_eq!(a, make_listing(7, 3, "http://x", None));
        assert_ne!(a.id, make_listing(7, 4, "http://x", None).id);
        assert_eq!(thousands(1250), "1.250");
        assert_eq!(thousands(950), "950");
        let ls: Vec<FakeListing> = (0..30)
            .map(|n| make_listing(1, n, "http://x", None))
            .collect();
        let refs: Vec<&FakeListing> = ls.iter().collect();
        let page = result_page("s", "q", &refs, 300_000, Extras::default(), None);
        assert!((299_000..305_000).contains(&page.len()), "{}", page.len());
        assert_eq!(page.matches("<article class=\"listing\"").count(), 30);
        assert!(page.contains(&format!("data-id=\"{}\"", ls[0].id)));
        let scripted = result_page(
            "s",
            "q",
            &refs,
            40_000,
            Extras {
                render_after: Some(std::time::Duration::from_millis(300)),
                poll: Some(std::time::Duration::from_millis(200)),
                images: 3,
            },
            None,
        );
        assert!(!scripted.contains("<article"), "no card in the HTML itself");
        assert!(!scripted.contains("/listing/4"), "no listing link either");
        assert!(
            scripted.contains(&ls[0].id),
            "the data is there for the script"
        );
        assert!(scripted.contains("}, 300);"));
        assert!(scripted.contains("fetch('/poll"));
        assert_eq!(scripted.matches("<img src=\"/img/").count(), 3);
    }
}
