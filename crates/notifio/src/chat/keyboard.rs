//! The buttons under a listing in a Telegram message, and what a press on one means.
//!
//! Each listing message carries Favourite, Contacted, Seen and Hide (the dashboard inbox's
//! marks), and a link to the listing. A press sets that mark (pressing the mark a listing
//! already has takes it off again), and the buttons are redrawn to show the listing's mark.
//! A button's data is at most 64 bytes (Telegram's limit), so it names the listing by its
//! number in the state database, not by its site and id.

use crate::inbox::ListingState;
use serde_json::{Value, json};

/// Most listings of a digest that get their own row of buttons: Telegram caps a message's
/// keyboard (about a hundred buttons), and a phone screen more so.
pub const DIGEST_ROWS: usize = 20;

/// The marks a button sets, in the order they are shown.
const MARKS: [(ListingState, &str, &str); 4] = [
    (ListingState::Favourite, "★", "Favourite"),
    (ListingState::Contacted, "✉", "Contacted"),
    (ListingState::Seen, "✓", "Seen"),
    (ListingState::Hidden, "✕", "Hide"),
];

/// One letter per mark in a button's data.
fn letter(state: ListingState) -> char {
    match state {
        ListingState::New => 'n',
        ListingState::Seen => 's',
        ListingState::Favourite => 'f',
        ListingState::Hidden => 'h',
        ListingState::Contacted => 'c',
    }
}

/// A press on a listing's button: set `state` on listing `listing` (its number in the state
/// database).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Press {
    /// The mark asked for.
    pub state: ListingState,
    /// The listing's number.
    pub listing: i64,
}

impl Press {
    /// The button's data: `m:<mark letter>:<listing>`.
    #[must_use]
    pub fn data(self) -> String {
        format!("m:{}:{}", letter(self.state), self.listing)
    }

    /// The press a button's data stands for; `None` for data Notifio did not write.
    #[must_use]
    pub fn parse(data: &str) -> Option<Self> {
        let rest = data.strip_prefix("m:")?;
        let (l, id) = rest.split_once(':')?;
        let state = ListingState::ALL
            .into_iter()
            .find(|s| l.len() == 1 && l.starts_with(letter(*s)))?;
        let listing = id.parse().ok().filter(|n: &i64| *n > 0)?;
        Some(Self { state, listing })
    }

    /// The mark a press leads to, from the listing's mark now: pressing the mark it has takes
    /// it off (back to new).
    #[must_use]
    pub fn outcome(self, now: ListingState) -> ListingState {
        if now == self.state {
            ListingState::New
        } else {
            self.state
        }
    }
}

/// A mark's button, showing whether the listing has it.
fn button(state: ListingState, listing: i64, now: ListingState, short: bool) -> Value {
    let (_, sign, word) = MARKS
        .iter()
        .find(|(s, _, _)| *s == state)
        .copied()
        .unwrap_or((state, "", ""));
    let text = match (short, now == state) {
        (true, true) => format!("[{sign}]"),
        (true, false) => sign.to_owned(),
        (false, true) => format!("{sign} {word} ✔"),
        (false, false) => format!("{sign} {word}"),
    };
    json!({ "text": text, "callback_data": Press { state, listing }.data() })
}

/// The keyboard under one listing's message: its marks, the one it has ticked, and a link to
/// the listing when it has a web address.
#[must_use]
pub fn listing_keyboard(listing: i64, now: ListingState, url: Option<&str>) -> Value {
    let marks: Vec<Value> = MARKS
        .iter()
        .map(|(s, _, _)| button(*s, listing, now, false))
        .collect();
    let mut rows = vec![Value::Array(marks)];
    if let Some(url) = url.filter(|u| u.starts_with("https://") || u.starts_with("http://")) {
        rows.push(json!([{ "text": "Open the listing ↗", "url": url }]));
    }
    json!({ "inline_keyboard": rows })
}

/// The keyboard under a digest: one row of short buttons per listing (`1 ★ ✉ ✓ ✕`) for the
/// first [`DIGEST_ROWS`]; with how many listings got none (the message says so).
#[must_use]
pub fn digest_keyboard(listings: &[(i64, ListingState)]) -> (Value, usize) {
    let rows: Vec<Value> = listings
        .iter()
        .take(DIGEST_ROWS)
        .enumerate()
        .map(|(i, (id, now))| {
            let mut row =
                vec![json!({ "text": format!("{}", i + 1), "callback_data": format!("i:{id}") })];
            row.extend(MARKS.iter().map(|(s, _, _)| button(*s, *id, *now, true)));
            Value::Array(row)
        })
        .collect();
    (
        json!({ "inline_keyboard": rows }),
        listings.len().saturating_sub(DIGEST_ROWS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_press_round_trips_and_fits_telegrams_limit() {
        for state in ListingState::ALL {
            let p = Press {
                state,
                listing: i64::MAX,
            };
            assert!(p.data().len() <= 64, "{}", p.data());
            assert_eq!(Press::parse(&p.data()), Some(p));
        }
        for bad in [
            "", "m:", "m:x:1", "m:f:", "m:f:-3", "m:f:0", "x:f:1", "m:ff:1", "i:3",
        ] {
            assert_eq!(Press::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn pressing_the_mark_a_listing_has_takes_it_off() {
        let fav = Press {
            state: ListingState::Favourite,
            listing: 1,
        };
        assert_eq!(fav.outcome(ListingState::New), ListingState::Favourite);
        assert_eq!(fav.outcome(ListingState::Seen), ListingState::Favourite);
        assert_eq!(fav.outcome(ListingState::Favourite), ListingState::New);
    }

    #[test]
    fn the_keyboard_ticks_the_mark_and_links_the_listing() {
        let k = listing_keyboard(7, ListingState::Contacted, Some("https://x.example/l/7"));
        let rows = k["inline_keyboard"].as_array().unwrap();
        let texts: Vec<&str> = rows[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["★ Favourite", "✉ Contacted ✔", "✓ Seen", "✕ Hide"]);
        assert_eq!(rows[0][3]["callback_data"], "m:h:7");
        assert_eq!(rows[1][0]["url"], "https://x.example/l/7");
        // No link button for a link Telegram would refuse.
        let k = listing_keyboard(7, ListingState::New, Some("javascript:alert(1)"));
        assert_eq!(k["inline_keyboard"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_long_digest_gets_buttons_for_its_first_listings_and_says_how_many_not() {
        let listings: Vec<(i64, ListingState)> = (1..=25).map(|i| (i, ListingState::New)).collect();
        let (k, without) = digest_keyboard(&listings);
        assert_eq!(k["inline_keyboard"].as_array().unwrap().len(), DIGEST_ROWS);
        assert_eq!(without, 5);
        assert_eq!(k["inline_keyboard"][0][1]["callback_data"], "m:f:1");
        let buttons: usize = k["inline_keyboard"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().len())
            .sum();
        assert!(buttons <= 100, "{buttons} buttons");
    }
}
