//! Price changes of known listings, and which of them are announced.
//!
//! The store keeps each listing's price history; a change is measured from the last price it
//! recorded (so a drop is announced once: the next check compares with the new price). A drop
//! is announced when it is at least `min_drop` (an amount, or a share of the old price) and the
//! listing matches the search's filters; a listing that a bound kept out and that the drop
//! brings in (it was over `max_price`, now it is not) is announced whatever the size of the
//! drop, since the user has never heard of it. Rises are silent unless asked for. Pure: no I/O.

use serde::{Deserialize, Serialize};

/// Prices closer than this are the same price (they are parsed from text, cents at most).
const SAME: f64 = 0.005;

/// The smallest change worth a message (`min_drop`).
///
/// # Default
/// [`MinDrop::Any`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum MinDrop {
    /// Any drop.
    #[default]
    Any,
    /// At least this much, in the listing's currency (`min_drop = 50`).
    Amount(f64),
    /// At least this share of the old price, in percent (`min_drop = "5%"`).
    Percent(f64),
}

impl MinDrop {
    /// Reads `"5%"`, `"50"` or `"any"`.
    ///
    /// # Errors
    /// Anything else, a negative amount, or a percentage not above 0 and below 100.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("any") {
            return Ok(Self::Any);
        }
        if let Some(p) = s.strip_suffix('%') {
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("`{s}` is not a percentage like \"5%\""))?;
            if !(p > 0.0 && p < 100.0) {
                return Err(format!("`{s}`: a percentage above 0 and below 100"));
            }
            return Ok(Self::Percent(p));
        }
        let a: f64 = s
            .parse()
            .map_err(|_| format!("`{s}` is neither an amount (50) nor a percentage (\"5%\")"))?;
        Self::amount(a)
    }

    /// An amount (`min_drop = 50`).
    ///
    /// # Errors
    /// A negative or non-finite amount.
    pub fn amount(a: f64) -> Result<Self, String> {
        if !a.is_finite() || a < 0.0 {
            return Err(format!("{a} is not an amount: give 0 or more"));
        }
        Ok(if a == 0.0 { Self::Any } else { Self::Amount(a) })
    }

    /// Whether a change of `by` from `from` is big enough.
    #[must_use]
    pub fn reached(self, from: f64, by: f64) -> bool {
        match self {
            Self::Any => by > SAME,
            Self::Amount(a) => by + SAME >= a,
            Self::Percent(p) => from > 0.0 && by / from * 100.0 + 1e-9 >= p,
        }
    }
}

/// One search's price-change settings.
///
/// # Default
/// `min_drop` any, `notify_price_drops = true`, `notify_price_rises = false`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PriceRules {
    /// The smallest drop (and rise) announced.
    pub min_drop: MinDrop,
    /// `notify_price_drops`.
    pub drops: bool,
    /// `notify_price_rises`.
    pub rises: bool,
}

impl Default for PriceRules {
    fn default() -> Self {
        Self {
            min_drop: MinDrop::Any,
            drops: true,
            rises: false,
        }
    }
}

/// A known listing's price, changed since the last check that showed one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PriceChange {
    /// The listing (site's id).
    pub id: String,
    /// The price the store had.
    pub from: f64,
    /// The price the page shows now.
    pub to: f64,
    /// Their currency as the card showed it, if it did.
    pub currency: Option<String>,
}

impl PriceChange {
    /// The change between the last recorded price and the page's, if there is one: both
    /// known, different, and in the same currency (or one of them unknown).
    #[must_use]
    pub fn between(id: &str, last: (f64, Option<&str>), now: (f64, Option<&str>)) -> Option<Self> {
        let (from, from_cur) = last;
        let (to, to_cur) = now;
        if !from.is_finite() || !to.is_finite() || (from - to).abs() <= SAME {
            return None;
        }
        if let (Some(a), Some(b)) = (from_cur, to_cur)
            && currency_code(a) != currency_code(b)
        {
            return None;
        }
        Some(Self {
            id: id.to_owned(),
            from,
            to,
            currency: to_cur.or(from_cur).map(str::to_owned),
        })
    }

    /// Whether the price fell.
    #[must_use]
    pub fn is_drop(&self) -> bool {
        self.to < self.from
    }

    /// The change as a share of the old price, in percent (negative for a drop).
    #[must_use]
    pub fn percent(&self) -> f64 {
        if self.from == 0.0 {
            0.0
        } else {
            (self.to - self.from) / self.from * 100.0
        }
    }
}

impl PriceRules {
    /// Whether `change` is announced to a search whose filters matched the listing at the old
    /// price (`matched_before`) and match it now (`matched_now`).
    #[must_use]
    pub fn announces(&self, change: &PriceChange, matched_before: bool, matched_now: bool) -> bool {
        if !matched_now {
            return false;
        }
        let by = (change.to - change.from).abs();
        if change.is_drop() {
            // Brought under a bound by the drop: news to the user, whatever its size.
            self.drops && (!matched_before || self.min_drop.reached(change.from, by))
        } else {
            self.rises && self.min_drop.reached(change.from, by)
        }
    }
}

/// The ISO code for a currency as cards show it (`€` and `eur` are `EUR`), for comparing and
/// for "1,200 → 1,050 EUR".
#[must_use]
pub fn currency_code(shown: &str) -> String {
    match shown.trim() {
        "€" => "EUR".into(),
        "$" | "US$" => "USD".into(),
        "£" => "GBP".into(),
        "¥" => "JPY".into(),
        "zł" => "PLN".into(),
        "Fr." | "CHF" | "chf" => "CHF".into(),
        "kr" => "SEK".into(),
        other => other.to_uppercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(from: f64, to: f64) -> PriceChange {
        PriceChange::between("1", (from, Some("€")), (to, Some("EUR"))).unwrap()
    }

    #[test]
    fn a_change_needs_two_prices_that_differ_in_one_currency() {
        assert!(PriceChange::between("1", (1200.0, Some("EUR")), (1200.001, Some("€"))).is_none());
        assert!(PriceChange::between("1", (1200.0, Some("EUR")), (1000.0, Some("CHF"))).is_none());
        let c = PriceChange::between("1", (1200.0, None), (1050.0, Some("€"))).unwrap();
        assert_eq!(c.currency.as_deref(), Some("€"));
        assert!(c.is_drop());
        assert!((c.percent() + 12.5).abs() < 1e-9);
        assert!(!change(1000.0, 1100.0).is_drop());
    }

    #[test]
    fn min_drop_as_an_amount_or_a_share() {
        assert_eq!(MinDrop::parse("5%"), Ok(MinDrop::Percent(5.0)));
        assert_eq!(MinDrop::parse(" 50 "), Ok(MinDrop::Amount(50.0)));
        assert_eq!(MinDrop::parse("0"), Ok(MinDrop::Any));
        assert_eq!(MinDrop::parse("any"), Ok(MinDrop::Any));
        for bad in ["-5", "100%", "0%", "five", "%", "5 EUR"] {
            assert!(MinDrop::parse(bad).is_err(), "{bad}");
        }
        let five = MinDrop::Percent(5.0);
        assert!(five.reached(1000.0, 50.0), "exactly 5%");
        assert!(!five.reached(1000.0, 49.0));
        let fifty = MinDrop::Amount(50.0);
        assert!(fifty.reached(1200.0, 50.0));
        assert!(!fifty.reached(1200.0, 49.5));
        assert!(MinDrop::Any.reached(1200.0, 1.0));
    }

    #[test]
    fn drops_are_announced_rises_only_when_asked() {
        let rules = PriceRules::default();
        assert!(rules.announces(&change(1200.0, 1050.0), true, true));
        assert!(
            !rules.announces(&change(1050.0, 1200.0), true, true),
            "a rise is silent"
        );
        let rises = PriceRules {
            rises: true,
            ..rules
        };
        assert!(rises.announces(&change(1050.0, 1200.0), true, true));
        let off = PriceRules {
            drops: false,
            ..rules
        };
        assert!(!off.announces(&change(1200.0, 1050.0), true, true));
    }

    #[test]
    fn min_drop_holds_back_small_drops_but_not_one_that_brings_a_listing_in() {
        let rules = PriceRules {
            min_drop: MinDrop::Percent(10.0),
            ..PriceRules::default()
        };
        let small = change(1000.0, 950.0);
        assert!(!rules.announces(&small, true, true), "5% < 10%");
        assert!(rules.announces(&change(1000.0, 900.0), true, true));
        assert!(
            rules.announces(&small, false, true),
            "was over max_price, now under it"
        );
        assert!(
            !rules.announces(&change(1000.0, 500.0), true, false),
            "no longer matches"
        );
    }

    #[test]
    fn currency_codes() {
        assert_eq!(currency_code("€"), "EUR");
        assert_eq!(currency_code(" eur "), "EUR");
        assert_eq!(currency_code("CHF"), "CHF");
        assert_eq!(currency_code("$"), "USD");
    }
}
