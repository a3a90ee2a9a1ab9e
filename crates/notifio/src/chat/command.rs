//! The commands a chat may send, and how a name given in one finds its search.
//!
//! A command is typed on a phone, so names may be abbreviated where unique ("/pause mad n" for
//! "Madrid north"), case and accents do not matter, and a mistake answers with what went wrong
//! and the names there are, rather than with silence.

use crate::filter::fold;

/// A command from the chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `/status`: the searches with their state and next check, the sites waiting and why.
    Status,
    /// `/searches`: the searches' names, sites and states.
    Searches,
    /// `/pause NAME`: stop checking a search (the config says `paused = true`).
    Pause(String),
    /// `/resume NAME`: check it again.
    Resume(String),
    /// `/add URL [NAME]`: a new search, validated, previewed and written as the dashboard's
    /// Add a search does.
    Add {
        /// The results page.
        url: String,
        /// Its name, when given.
        name: Option<String>,
    },
    /// `/new`: the latest listings, with their buttons.
    New,
    /// `/favourites`: the favourite listings, with their buttons.
    Favourites,
    /// `/help` (and `/start`, which Telegram sends when a chat begins).
    Help,
    /// A command this is not (its word, for the answer).
    Unknown(String),
    /// A command that needs an argument it lacks (the command, for the answer).
    Missing(&'static str),
}

/// The commands, with their one-line help, as `/help` lists them.
pub const HELP: [(&str, &str); 8] = [
    (
        "/status",
        "searches with their state and next check; sites waiting, and why",
    ),
    ("/searches", "the searches"),
    (
        "/pause NAME",
        "stop checking a search (a unique start of its name will do)",
    ),
    ("/resume NAME", "check it again"),
    ("/add URL [NAME]", "add a search for a results page"),
    ("/new", "the latest listings, with buttons"),
    ("/favourites", "your favourite listings, with buttons"),
    ("/help", "this list"),
];

/// The command in a message's text, `None` for a message that is no command. Telegram adds
/// `@botname` to a command in a group (`/pause@notifio_bot Madrid`): it is dropped.
#[must_use]
pub fn parse(text: &str) -> Option<Command> {
    let text = text.trim();
    let rest = text.strip_prefix('/')?;
    let (word, args) = match rest.split_once(char::is_whitespace) {
        Some((w, a)) => (w, a.trim()),
        None => (rest, ""),
    };
    let word = word.split('@').next().unwrap_or(word).to_lowercase();
    let arg = || (!args.is_empty()).then(|| args.to_owned());
    Some(match word.as_str() {
        "status" => Command::Status,
        "searches" | "list" => Command::Searches,
        "pause" => arg().map_or(Command::Missing("/pause NAME"), Command::Pause),
        "resume" => arg().map_or(Command::Missing("/resume NAME"), Command::Resume),
        "add" => match args.split_once(char::is_whitespace) {
            Some((url, name)) => Command::Add {
                url: url.to_owned(),
                name: Some(name.trim().to_owned()).filter(|n| !n.is_empty()),
            },
            None if !args.is_empty() => Command::Add {
                url: args.to_owned(),
                name: None,
            },
            None => Command::Missing("/add URL [NAME]"),
        },
        "new" | "latest" => Command::New,
        "favourites" | "favorites" | "favs" => Command::Favourites,
        "help" | "start" => Command::Help,
        _ => Command::Unknown(format!("/{word}")),
    })
}

/// What a name given in a command finds among the searches' names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// This search (its index in the names given).
    One(usize),
    /// Several searches start so: their names.
    Several(Vec<String>),
    /// None does.
    None,
}

/// Finds `given` among `names`: the name itself (case and accents aside), else the only name
/// it starts, else the only name whose words its words start in order ("mad n" → "Madrid
/// north").
#[must_use]
pub fn resolve(given: &str, names: &[String]) -> Resolved {
    let want = fold(given.trim());
    if want.is_empty() {
        return Resolved::None;
    }
    let folded: Vec<String> = names.iter().map(|n| fold(n)).collect();
    if let Some(i) = folded.iter().position(|n| *n == want) {
        return Resolved::One(i);
    }
    let words: Vec<&str> = want.split_whitespace().collect();
    let abbreviates = |name: &str| {
        let mut theirs = name.split_whitespace();
        words
            .iter()
            .all(|w| theirs.by_ref().any(|t| t.starts_with(w)))
    };
    for rule in [
        &(|n: &str| n.starts_with(&want)) as &dyn Fn(&str) -> bool,
        &abbreviates,
    ] {
        let hits: Vec<usize> = (0..names.len()).filter(|i| rule(&folded[*i])).collect();
        match hits.as_slice() {
            [] => {}
            [one] => return Resolved::One(*one),
            many => return Resolved::Several(many.iter().map(|i| names[*i].clone()).collect()),
        }
    }
    Resolved::None
}

/// `/help`'s answer.
#[must_use]
pub fn help() -> String {
    HELP.iter()
        .map(|(c, what)| format!("{c} — {what}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_their_arguments() {
        assert_eq!(parse("/status"), Some(Command::Status));
        assert_eq!(parse("  /STATUS  "), Some(Command::Status));
        assert_eq!(
            parse("/pause@notifio_bot Madrid north"),
            Some(Command::Pause("Madrid north".into()))
        );
        assert_eq!(parse("/pause"), Some(Command::Missing("/pause NAME")));
        assert_eq!(
            parse("/add https://x.example/s?q=1 Berlin flats"),
            Some(Command::Add {
                url: "https://x.example/s?q=1".into(),
                name: Some("Berlin flats".into())
            })
        );
        assert_eq!(
            parse("/add https://x.example/s"),
            Some(Command::Add {
                url: "https://x.example/s".into(),
                name: None
            })
        );
        assert_eq!(parse("/add"), Some(Command::Missing("/add URL [NAME]")));
        assert_eq!(parse("/start"), Some(Command::Help));
        assert_eq!(
            parse("/delete all"),
            Some(Command::Unknown("/delete".into()))
        );
        assert_eq!(parse("hello"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn names_may_be_abbreviated_where_unique() {
        let names: Vec<String> = ["Madrid north", "Madrid south", "Málaga", "Berlin"]
            .map(String::from)
            .to_vec();
        assert_eq!(resolve("berlin", &names), Resolved::One(3));
        assert_eq!(resolve("MALAGA", &names), Resolved::One(2), "accents aside");
        assert_eq!(resolve("mad n", &names), Resolved::One(0));
        assert_eq!(resolve("madrid s", &names), Resolved::One(1));
        assert_eq!(
            resolve("mad", &names),
            Resolved::Several(vec!["Madrid north".into(), "Madrid south".into()])
        );
        assert_eq!(resolve("paris", &names), Resolved::None);
        assert_eq!(resolve("  ", &names), Resolved::None);
    }

    #[test]
    fn help_names_every_command() {
        let h = help();
        for (c, _) in HELP {
            assert!(h.contains(c), "{c}");
        }
    }
}
