//! What a recorded check announces, and to whom: a pure decision (docs/architecture.md#one-check-end-to-end).
//!
//! A check's news is its new listings and the price changes of listings it already knew. Each
//! search that heard the check (and is not taking a silent baseline) is told the news its own
//! rules let through: its filters decide which new listings it wants, its price rules which
//! changes; a new listing likely the same as one first seen on another site carries an "also
//! on" note, and goes to no search that skips such duplicates. A listing wanted by several
//! searches is announced once, naming every one of them; listings wanted by the same searches
//! share one message. The store reads what this needs (the other sites' candidates) and writes
//! what it decides (the dashboard's tallies, the outbox rows); nothing here touches either.

use crate::duplicate;
use crate::filter::AnnounceRules;
use crate::inbox::ListingState;
use crate::listing::Listing;
use crate::notify::{AlsoOn, ChannelName, Notification};
use crate::price::PriceChange;

/// One search that heard the check.
#[derive(Clone, Copy, Debug)]
pub struct Hearer<'a> {
    /// Its database id.
    pub id: u32,
    /// Its name, as messages say it.
    pub name: &'a str,
    /// What of the news it announces.
    pub rules: &'a AnnounceRules,
    /// Where its notifications go.
    pub channels: &'a [ChannelName],
    /// It takes a silent baseline with this check: it announces nothing.
    pub baseline: bool,
}

/// A listing first seen on another site, a candidate twin of a new one.
#[derive(Clone, Debug, PartialEq)]
pub struct Elsewhere {
    /// Its site.
    pub site: String,
    /// The listing (its last price).
    pub listing: Listing,
    /// When Notifio first saw it.
    pub first_seen: u64,
}

/// Everything the decision reads.
#[derive(Clone, Copy, Debug)]
pub struct CheckNews<'a> {
    /// The site the check read.
    pub site: &'a str,
    /// When it finished (epoch ms).
    pub now: u64,
    /// The searches it answered.
    pub hearers: &'a [Hearer<'a>],
    /// Every listing on the pages it read.
    pub page: &'a [Listing],
    /// Those never seen on the site before.
    pub new: &'a [Listing],
    /// For each of `new`, listings on other sites that could be the same flat.
    pub elsewhere: &'a [Vec<Elsewhere>],
    /// Known listings whose price changed.
    pub changes: &'a [PriceChange],
    /// What the user marked the listings of `changes` that it changes what is announced
    /// (hidden, favourite), by listing id.
    pub marks: &'a [(String, ListingState)],
}

/// What the check's news comes to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Per search (in `hearers` order): what the dashboard counts.
    pub tallies: Vec<Tally>,
    /// Listings a search announced a price change of: they are its listings now (search id,
    /// listing id).
    pub marked: Vec<(u32, String)>,
    /// The messages, each to its channels.
    pub messages: Vec<Message>,
}

/// "30 found · 4 match" for one search, and the page's listings its filters hold back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// The search's database id.
    pub search: u32,
    /// Listings on the page.
    pub found: usize,
    /// How many of them its filters let through.
    pub matched: usize,
    /// The ids of the others.
    pub held_back: Vec<String>,
}

/// One notification and the channels it goes to.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// What it says.
    pub notification: Notification,
    /// Where it goes, each once.
    pub channels: Vec<ChannelName>,
}

/// Where one search stands before a check, as the store knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaselineSoFar {
    /// The result pages its baseline covers; `None` before its first good look.
    pub pages: Option<u32>,
    /// `notify_existing`: its first look announces what it finds.
    pub notify_existing: bool,
}

/// Who hears a check's news, decided before its listings are looked at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Audience {
    /// The searches (indexes into the check's searches) that announce: all but those
    /// taking a silent baseline now.
    pub searches: Vec<usize>,
    /// The searches whose first look this is (their baseline is written now).
    pub first_looks: Vec<usize>,
    /// The result pages (1, 2, …) whose new listings are news to some search that
    /// announces: a page a search reads for the first time (after raising `pages`) is part
    /// of its baseline, not news. `usize::MAX`: every page.
    pub covered: usize,
}

/// Who of a check's `searches` (in its order) hears its news.
#[must_use]
pub fn audience(searches: &[BaselineSoFar]) -> Audience {
    let mut out = Audience::default();
    for (i, s) in searches.iter().enumerate() {
        match s.pages {
            None => {
                out.first_looks.push(i);
                if s.notify_existing {
                    out.searches.push(i);
                    out.covered = usize::MAX;
                }
            }
            Some(known) => {
                out.searches.push(i);
                let reach = if s.notify_existing {
                    usize::MAX
                } else {
                    known as usize
                };
                out.covered = out.covered.max(reach);
            }
        }
    }
    out
}

/// Decides what `news` announces, and to whom.
#[must_use]
pub fn decide(news: &CheckNews<'_>) -> Decision {
    let tallies = news.hearers.iter().map(|h| tally(h, news.page)).collect();
    let audience: Vec<usize> = (0..news.hearers.len())
        .filter(|&i| !news.hearers[i].baseline)
        .collect();
    let mut groups: Vec<Group> = Vec::new();
    for (i, l) in news.new.iter().enumerate() {
        let mut to: Vec<usize> = audience
            .iter()
            .copied()
            .filter(|&h| news.hearers[h].rules.filters.matches(l))
            .collect();
        if to.is_empty() {
            continue;
        }
        let twin = news
            .elsewhere
            .get(i)
            .into_iter()
            .flatten()
            .find(|e| duplicate::likely_same(l, &e.listing))
            .map(|e| AlsoOn {
                id: l.id.clone(),
                site: e.site.clone(),
                url: e.listing.url.clone(),
                seen_at: e.first_seen,
            });
        if twin.is_some() {
            to.retain(|&h| !news.hearers[h].rules.skip_cross_site_duplicates);
        }
        group(&mut groups, to, Kind::New).add(l, twin);
    }
    let mut marked = Vec::new();
    for change in news.changes {
        let Some(l) = news.page.iter().find(|l| l.id == change.id) else {
            continue;
        };
        let before = Listing {
            price: Some(change.from),
            ..l.clone()
        };
        let mark = news
            .marks
            .iter()
            .find(|(id, _)| *id == l.id)
            .map(|(_, m)| *m);
        // A hidden listing is never announced again; a favourite's drop always is, whatever
        // the search's filters and price rules say.
        let favourite_drop = mark == Some(ListingState::Favourite) && change.to < change.from;
        let to: Vec<usize> = audience
            .iter()
            .copied()
            .filter(|&h| {
                let rules = news.hearers[h].rules;
                mark != Some(ListingState::Hidden)
                    && (favourite_drop
                        || rules.prices.announces(
                            change,
                            rules.filters.matches(&before),
                            rules.filters.matches(l),
                        ))
            })
            .collect();
        marked.extend(to.iter().map(|&h| (news.hearers[h].id, l.id.clone())));
        if !to.is_empty() {
            group(&mut groups, to, Kind::Price).add_change(l, change);
        }
    }
    let messages = groups
        .into_iter()
        .filter_map(|g| g.into_message(news))
        .collect();
    Decision {
        tallies,
        marked,
        messages,
    }
}

/// A search's count of the page: all of it when it has no filters.
fn tally(h: &Hearer<'_>, page: &[Listing]) -> Tally {
    let filters = &h.rules.filters;
    let held_back: Vec<String> = if filters.is_empty() {
        Vec::new()
    } else {
        page.iter()
            .filter(|l| !filters.matches(l))
            .map(|l| l.id.clone())
            .collect()
    };
    Tally {
        search: h.id,
        found: page.len(),
        matched: page.len() - held_back.len(),
        held_back,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    New,
    Price,
}

/// One message: its kind, the searches (indices into `hearers`) it names, and what it says.
struct Group {
    kind: Kind,
    searches: Vec<usize>,
    listings: Vec<Listing>,
    also_on: Vec<AlsoOn>,
    changes: Vec<PriceChange>,
}

impl Group {
    fn add(&mut self, l: &Listing, also: Option<AlsoOn>) {
        self.listings.push(l.clone());
        self.also_on.extend(also);
    }

    fn add_change(&mut self, l: &Listing, change: &PriceChange) {
        self.listings.push(l.clone());
        self.changes.push(change.clone());
    }

    /// The notification, to every channel of its searches (each once); `None` when they have
    /// no channel.
    fn into_message(self, news: &CheckNews<'_>) -> Option<Message> {
        let mut channels: Vec<ChannelName> = Vec::new();
        for &h in &self.searches {
            for c in news.hearers[h].channels {
                if !channels.contains(c) {
                    channels.push(c.clone());
                }
            }
        }
        if channels.is_empty() {
            return None;
        }
        let site = news.site.to_owned();
        let searches = self
            .searches
            .iter()
            .map(|&h| news.hearers[h].name.to_owned())
            .collect();
        let notification = match self.kind {
            Kind::New => Notification::NewListings {
                site,
                searches,
                listings: self.listings,
                found_at: news.now,
                also_on: self.also_on,
            },
            Kind::Price => Notification::PriceChanged {
                site,
                searches,
                listings: self.listings,
                changes: self.changes,
                found_at: news.now,
            },
        };
        Some(Message {
            notification,
            channels,
        })
    }
}

/// The group of `kind` for exactly these searches, made if needed.
fn group(groups: &mut Vec<Group>, searches: Vec<usize>, kind: Kind) -> &mut Group {
    let at = match groups
        .iter()
        .position(|g| g.kind == kind && g.searches == searches)
    {
        Some(at) => at,
        None => {
            groups.push(Group {
                kind,
                searches,
                listings: Vec::new(),
                also_on: Vec::new(),
                changes: Vec::new(),
            });
            groups.len() - 1
        }
    };
    &mut groups[at]
}

#[cfg(test)]
mod tests {
    use super::{Audience, BaselineSoFar, audience};

    #[test]
    fn a_first_look_is_silent_unless_it_notifies_existing_and_new_pages_are_baseline() {
        let first = BaselineSoFar {
            pages: None,
            notify_existing: false,
        };
        let known = |pages| BaselineSoFar {
            pages: Some(pages),
            notify_existing: false,
        };
        assert_eq!(
            audience(&[first, known(2), known(1)]),
            Audience {
                searches: vec![1, 2],
                first_looks: vec![0],
                covered: 2,
            }
        );
        let loud = BaselineSoFar {
            notify_existing: true,
            ..first
        };
        assert_eq!(
            audience(&[loud, known(1)]),
            Audience {
                searches: vec![0, 1],
                first_looks: vec![0],
                covered: usize::MAX,
            }
        );
        assert_eq!(audience(&[first]).searches, Vec::<usize>::new());
        assert_eq!(audience(&[first]).covered, 0, "nothing is news");
    }

    use super::*;
    use crate::filter::Filters;

    fn flat(id: &str, price: f64) -> Listing {
        Listing {
            id: id.into(),
            title: Some(format!("Piso en calle Mayor {id}")),
            price: Some(price),
            currency: Some("EUR".into()),
            rooms: Some(2.0),
            area_m2: Some(60.0),
            url: Some(format!("https://a.example/{id}")),
            ..Listing::default()
        }
    }

    fn rules(max_price: Option<f64>, skip_duplicates: bool) -> AnnounceRules {
        AnnounceRules {
            filters: Filters {
                max_price,
                ..Filters::default()
            },
            skip_cross_site_duplicates: skip_duplicates,
            ..AnnounceRules::default()
        }
    }

    fn channels(names: &[&str]) -> Vec<ChannelName> {
        names.iter().map(|n| ChannelName::new(*n)).collect()
    }

    fn news<'a>(
        hearers: &'a [Hearer<'a>],
        page: &'a [Listing],
        new: &'a [Listing],
        elsewhere: &'a [Vec<Elsewhere>],
        changes: &'a [PriceChange],
    ) -> CheckNews<'a> {
        CheckNews {
            site: "a.example",
            now: 1_000,
            hearers,
            page,
            new,
            elsewhere,
            changes,
            marks: &[],
        }
    }

    fn said(m: &Message) -> (Vec<String>, Vec<String>, Vec<&str>) {
        let Some((_, searches, listings)) = m.notification.listings() else {
            panic!("{m:?}");
        };
        (
            searches.to_vec(),
            listings.iter().map(|l| l.id.clone()).collect(),
            m.channels.iter().map(ChannelName::as_str).collect(),
        )
    }

    #[test]
    fn each_search_hears_what_its_filters_let_through_once_per_flat() {
        let (cheap, any) = (rules(Some(1000.0), false), rules(None, false));
        let (mail, chat) = (channels(&["email"]), channels(&["telegram", "email"]));
        let hearers = [
            Hearer {
                id: 1,
                name: "cheap",
                rules: &cheap,
                channels: &mail,
                baseline: false,
            },
            Hearer {
                id: 2,
                name: "any",
                rules: &any,
                channels: &chat,
                baseline: false,
            },
        ];
        let page = [flat("1", 900.0), flat("2", 1500.0)];
        let d = decide(&news(&hearers, &page, &page, &[], &[]));
        // The cheap flat to both searches in one message, to each channel once; the dear one
        // only to the search without a ceiling.
        assert_eq!(d.messages.len(), 2, "{d:?}");
        assert_eq!(
            said(&d.messages[0]),
            (
                vec!["cheap".into(), "any".into()],
                vec!["1".into()],
                vec!["email", "telegram"]
            )
        );
        assert_eq!(
            said(&d.messages[1]),
            (
                vec!["any".into()],
                vec!["2".into()],
                vec!["telegram", "email"]
            )
        );
        assert_eq!(
            d.tallies[0],
            Tally {
                search: 1,
                found: 2,
                matched: 1,
                held_back: vec!["2".into()]
            }
        );
        assert_eq!(d.tallies[1].matched, 2);
    }

    /// A hidden listing's drop is told to nobody; a favourite's drop to every search, even one
    /// whose price rules announce no drops and whose ceiling the flat is above.
    #[test]
    fn hidden_is_never_announced_and_a_favourites_drop_always_is() {
        let silent = AnnounceRules {
            prices: crate::price::PriceRules {
                drops: false,
                ..crate::price::PriceRules::default()
            },
            ..rules(Some(1000.0), false)
        };
        let any = rules(None, false);
        let mail = channels(&["email"]);
        let hearers = [
            Hearer {
                id: 1,
                name: "no drops",
                rules: &silent,
                channels: &mail,
                baseline: false,
            },
            Hearer {
                id: 2,
                name: "any",
                rules: &any,
                channels: &mail,
                baseline: false,
            },
        ];
        let page = [flat("1", 1400.0), flat("2", 1400.0), flat("3", 1400.0)];
        let drop = |id: &str| PriceChange {
            id: id.into(),
            from: 1500.0,
            to: 1400.0,
            currency: Some("EUR".into()),
        };
        let changes = [drop("1"), drop("2"), drop("3")];
        let marks = [
            ("1".to_owned(), ListingState::Hidden),
            ("2".to_owned(), ListingState::Favourite),
        ];
        let d = decide(&CheckNews {
            marks: &marks,
            ..news(&hearers, &page, &[], &[], &changes)
        });
        let told: Vec<_> = d.messages.iter().map(said).collect();
        assert_eq!(
            told,
            [
                (
                    vec!["no drops".into(), "any".into()],
                    vec!["2".into()],
                    vec!["email"]
                ),
                (vec!["any".into()], vec!["3".into()], vec!["email"]),
            ],
            "{d:?}"
        );
        // A favourite's rise follows the rules as before: not announced by default.
        let rise = [PriceChange {
            to: 1600.0,
            ..drop("2")
        }];
        let d = decide(&CheckNews {
            marks: &marks,
            ..news(&hearers, &page, &[], &[], &rise)
        });
        assert!(d.messages.is_empty(), "{d:?}");
    }

    #[test]
    fn a_baseline_announces_nothing_but_is_counted() {
        let any = rules(None, false);
        let mail = channels(&["email"]);
        let hearers = [Hearer {
            id: 1,
            name: "new search",
            rules: &any,
            channels: &mail,
            baseline: true,
        }];
        let page = [flat("1", 900.0)];
        let d = decide(&news(&hearers, &page, &page, &[], &[]));
        assert!(d.messages.is_empty(), "{d:?}");
        assert_eq!(d.tallies[0].found, 1);
    }

    #[test]
    fn a_likely_twin_on_another_site_is_noted_or_skipped_as_the_search_asks() {
        let (noting, skipping) = (rules(None, false), rules(None, true));
        let mail = channels(&["email"]);
        let hearers = [
            Hearer {
                id: 1,
                name: "noting",
                rules: &noting,
                channels: &mail,
                baseline: false,
            },
            Hearer {
                id: 2,
                name: "skipping",
                rules: &skipping,
                channels: &mail,
                baseline: false,
            },
        ];
        let page = [flat("1", 900.0)];
        let twin = Elsewhere {
            site: "b.example".into(),
            listing: Listing {
                id: "b7".into(),
                url: Some("https://b.example/7".into()),
                ..flat("b7", 905.0)
            },
            first_seen: 500,
        };
        let d = decide(&news(&hearers, &page, &page, &[vec![twin]], &[]));
        assert_eq!(d.messages.len(), 1, "{d:?}");
        assert_eq!(said(&d.messages[0]).0, vec!["noting".to_owned()]);
        let Notification::NewListings { also_on, .. } = &d.messages[0].notification else {
            panic!("{d:?}");
        };
        assert_eq!(also_on[0].site, "b.example");
        assert_eq!(also_on[0].seen_at, 500);
    }

    #[test]
    fn a_price_drop_goes_to_the_searches_whose_rules_announce_it_and_marks_it_theirs() {
        let (cheap, rises_only) = (
            rules(Some(1000.0), false),
            AnnounceRules {
                prices: crate::price::PriceRules {
                    drops: false,
                    rises: true,
                    ..Default::default()
                },
                ..AnnounceRules::default()
            },
        );
        let mail = channels(&["email"]);
        let hearers = [
            Hearer {
                id: 1,
                name: "cheap",
                rules: &cheap,
                channels: &mail,
                baseline: false,
            },
            Hearer {
                id: 2,
                name: "rises",
                rules: &rises_only,
                channels: &mail,
                baseline: false,
            },
        ];
        let page = [flat("1", 950.0)];
        let drop = PriceChange {
            id: "1".into(),
            from: 1200.0,
            to: 950.0,
            currency: Some("EUR".into()),
        };
        let d = decide(&news(
            &hearers,
            &page,
            &[],
            &[],
            std::slice::from_ref(&drop),
        ));
        assert_eq!(d.marked, vec![(1, "1".to_owned())]);
        assert_eq!(d.messages.len(), 1, "{d:?}");
        let Notification::PriceChanged {
            searches, changes, ..
        } = &d.messages[0].notification
        else {
            panic!("{d:?}");
        };
        assert_eq!(
            (searches.as_slice(), changes.as_slice()),
            (&["cheap".to_owned()][..], &[drop][..])
        );
    }
}
