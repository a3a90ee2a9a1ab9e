//! Which picture a card shows: its photo, not the icons and placeholders around it.
//!
//! Cards carry more than one image: a flatmate icon, an agency logo, a lazy-loading placeholder
//! GIF, and the photo, often only named in `data-src` or `srcset` until a script swaps it in, or
//! painted as a CSS `background-image`. These helpers read an image element's attributes the
//! way a browser would choose what to show and rank candidates by their declared size, so the
//! photo wins; they see attribute values only, never the page.

/// Attributes that hold the real picture of a lazily loaded image, before `srcset` and `src`.
const LAZY_ATTRS: [&str; 3] = ["data-src", "data-lazy-src", "data-lazy"];

/// An image at most this many pixels wide or high (as declared) is an icon.
const ICON_MAX_PX: u64 = 64;

/// The size an image without any declared size is taken to have (200 × 150): larger than a
/// logo or avatar (which usually declare theirs), smaller than a photo that declares its own.
const UNKNOWN_AREA: u64 = 200 * 150;

/// An image a card shows, with how large it says it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Where the picture is (as written: relative links are resolved later).
    pub(crate) url: String,
    /// Declared area in px², or [`UNKNOWN_AREA`].
    pub(crate) area: u64,
}

/// The picture an `<img>` shows, read through `attr` (an attribute getter returning trimmed,
/// entity-decoded values); `None` when it names none or is an icon: declared at most 64 px
/// wide or high, or a `.gif` or `.svg` (spacers, placeholders and pictograms).
pub(crate) fn candidate(attr: impl Fn(&str) -> Option<String>) -> Option<Candidate> {
    let size = |name: &str| attr(name).as_deref().and_then(pixels);
    let (width, height) = (size("width"), size("height"));
    if width.is_some_and(|w| w <= ICON_MAX_PX) || height.is_some_and(|h| h <= ICON_MAX_PX) {
        return None;
    }
    let srcset = attr("srcset");
    let widest = srcset.as_deref().and_then(widest_in_srcset);
    let url = LAZY_ATTRS
        .iter()
        .filter_map(|a| attr(a))
        .find(|v| is_picture_url(v))
        .or_else(|| {
            widest
                .map(|(u, _)| u.to_owned())
                .filter(|u| is_picture_url(u))
        })
        .or_else(|| attr("src").filter(|v| is_picture_url(v)))?;
    if is_icon_url(&url) {
        return None;
    }
    let area = match (width, height) {
        (Some(w), Some(h)) => w.saturating_mul(h),
        (Some(d), None) | (None, Some(d)) => d.saturating_mul(d),
        // A srcset candidate's width is the picture's own: a photo at 4:3.
        (None, None) => widest
            .and_then(|(_, w)| w)
            .map_or(UNKNOWN_AREA, |w| w.saturating_mul(w) / 4 * 3),
    };
    Some(Candidate { url, area })
}

/// The picture named by one attribute the user chose: a URL, the widest `srcset` candidate,
/// or the `url(…)` in a `style`.
pub(crate) fn from_attr(name: &str, value: &str) -> Option<String> {
    let url = if name.eq_ignore_ascii_case("srcset") {
        widest_in_srcset(value).map(|(u, _)| u.to_owned())
    } else if name.eq_ignore_ascii_case("style") {
        style_url(value)
    } else {
        Some(value.trim().to_owned())
    };
    url.filter(|u| is_picture_url(u))
}

/// The picture of an element the user pointed at without naming an attribute: what an
/// `<img>` shows, else its CSS background.
pub(crate) fn of_element(attr: impl Fn(&str) -> Option<String>) -> Option<String> {
    LAZY_ATTRS
        .iter()
        .chain(&["srcset", "src", "style"])
        .find_map(|a| from_attr(a, &attr(a)?))
}

/// A CSS background picture (`background-image: url(…)`), unless it is an icon by its name.
pub(crate) fn background(style: &str) -> Option<String> {
    style_url(style).filter(|u| is_picture_url(u) && !is_icon_url(u))
}

/// Not empty and not an inline `data:` placeholder.
fn is_picture_url(url: &str) -> bool {
    let url = url.trim();
    !url.is_empty()
        && !url
            .get(..5)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"))
}

/// A `.gif` or `.svg` by its path (query and fragment ignored).
fn is_icon_url(url: &str) -> bool {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    ext.eq_ignore_ascii_case("gif") || ext.eq_ignore_ascii_case("svg")
}

/// "64", "64px", " 300 " → pixels; percentages and garbage → `None`.
fn pixels(value: &str) -> Option<u64> {
    let value = value.trim();
    let digits = value.len() - value.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let rest = value[digits..].trim();
    if digits == 0 || !(rest.is_empty() || rest.eq_ignore_ascii_case("px")) {
        return None;
    }
    value[..digits].parse().ok()
}

/// The candidate of a `srcset` with the largest width descriptor (or density, when no widths
/// are given), with its width if it has one. Hand-written after the HTML standard's parsing
/// rules: a URL is a run of non-space characters (it may contain commas), its descriptors
/// follow up to the next comma; no crate parses just this.
fn widest_in_srcset(srcset: &str) -> Option<(&str, Option<u64>)> {
    let mut best: Option<(&str, Option<u64>, f64)> = None;
    let mut rest = srcset;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == ',');
        if rest.is_empty() {
            break;
        }
        let url_end = rest
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let (mut url, after) = rest.split_at(url_end);
        let descriptors;
        if url.ends_with(',') {
            url = url.trim_end_matches(',');
            descriptors = "";
            rest = after;
        } else {
            let end = after.find(',').unwrap_or(after.len());
            descriptors = &after[..end];
            rest = &after[end..];
        }
        if url.is_empty() {
            continue;
        }
        let (mut width, mut density) = (None, None);
        for d in descriptors.split_ascii_whitespace() {
            if let Some(w) = d.strip_suffix(['w', 'W']) {
                width = w.parse::<u64>().ok();
            } else if let Some(x) = d.strip_suffix(['x', 'X']) {
                density = x.parse::<f64>().ok().filter(|x| x.is_finite());
            }
        }
        // Widths outrank densities: 1x is the smallest there is.
        let rank = width.map_or_else(|| density.unwrap_or(1.0), |w| 1e6 + w as f64);
        if best.is_none_or(|(_, _, r)| rank > r) {
            best = Some((url, width, rank));
        }
    }
    best.map(|(u, w, _)| (u, w))
}

/// The first `url(…)` in a CSS declaration list, quotes removed.
fn style_url(style: &str) -> Option<String> {
    let lower = style.to_ascii_lowercase();
    let start = lower.find("url(")? + 4;
    let inner = style[start..].trim_start();
    let url = match inner.chars().next()? {
        q @ ('"' | '\'') => &inner[1..][..inner[1..].find(q)?],
        _ => &inner[..inner.find(')')?],
    };
    Some(url.trim().to_owned()).filter(|u| !u.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn srcset_candidates_by_width_then_density() {
        assert_eq!(
            widest_in_srcset("a.jpg 320w, b.jpg 1024w,c.jpg 640w"),
            Some(("b.jpg", Some(1024)))
        );
        assert_eq!(
            widest_in_srcset("a.jpg, b.jpg 2x, c.jpg 1.5x"),
            Some(("b.jpg", None))
        );
        // A comma inside a URL is part of it.
        assert_eq!(
            widest_in_srcset("https://cdn.example/w_400,h_300/p.jpg 400w"),
            Some(("https://cdn.example/w_400,h_300/p.jpg", Some(400)))
        );
        assert_eq!(widest_in_srcset("only.jpg"), Some(("only.jpg", None)));
        assert_eq!(widest_in_srcset(" , "), None);
    }

    #[test]
    fn icons_are_not_pictures() {
        for icon in [
            &[
                ("src", "/i/flatmate.png"),
                ("width", "24"),
                ("height", "24"),
            ][..],
            &[("src", "/i/logo.png"), ("height", "64px")],
            &[("src", "/i/blank.gif")],
            &[("src", "/i/pin.SVG?v=3")],
            &[("src", "data:image/png;base64,AAAA")],
            &[("alt", "no picture at all")],
        ] {
            assert_eq!(candidate(attrs(icon)), None, "{icon:?}");
        }
    }

    #[test]
    fn the_real_picture_comes_from_lazy_attributes_first() {
        let c = candidate(attrs(&[
            ("src", "/i/placeholder.gif"),
            ("data-src", "/p/1.jpg"),
            ("srcset", "/p/1-small.jpg 300w"),
        ]))
        .unwrap();
        assert_eq!(c.url, "/p/1.jpg");
        assert_eq!(c.area, 300 * 300 / 4 * 3);
        let c = candidate(attrs(&[
            ("src", "/p/1-small.jpg"),
            ("srcset", "/p/1-small.jpg 300w, /p/1-big.jpg 1200w"),
            ("width", "400"),
            ("height", "300"),
        ]))
        .unwrap();
        assert_eq!((c.url.as_str(), c.area), ("/p/1-big.jpg", 120_000));
        let c = candidate(attrs(&[("src", "/p/2.jpg"), ("width", "50%")])).unwrap();
        assert_eq!((c.url.as_str(), c.area), ("/p/2.jpg", UNKNOWN_AREA));
    }

    #[test]
    fn backgrounds_and_chosen_attributes() {
        assert_eq!(
            background("height: 10em; background-image: URL( \"https://img.example/a.jpg\" );")
                .as_deref(),
            Some("https://img.example/a.jpg")
        );
        assert_eq!(
            background("background:url(/p/b.webp) center").as_deref(),
            Some("/p/b.webp")
        );
        assert_eq!(background("background: url('/i/dot.svg')"), None);
        assert_eq!(background("color: red"), None);
        assert_eq!(
            from_attr("srcset", "a.jpg 1x, b.jpg 2x").as_deref(),
            Some("b.jpg")
        );
        assert_eq!(
            from_attr("data-original", " /p/c.jpg ").as_deref(),
            Some("/p/c.jpg")
        );
        assert_eq!(from_attr("data-src", "data:image/gif;base64,R0"), None);
        assert_eq!(
            of_element(attrs(&[("style", "background-image:url(/p/d.jpg)")])).as_deref(),
            Some("/p/d.jpg")
        );
    }
}
