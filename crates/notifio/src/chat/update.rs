//! Telegram's updates as Notifio reads them (`getUpdates`), and who may steer.
//!
//! Only what Notifio acts on is read: a message's text, chat and sender, and a button press's
//! data, chat and sender. Anything else in an update is ignored, and an update that does not
//! parse is skipped (its `update_id` still moves the offset on, so it is never asked for
//! again). Only the configured chat may steer, and in a group, when a list of users is given,
//! only they: an update from anyone else changes nothing and gets no answer.

use serde::Deserialize;

/// Most updates asked for at once.
pub const BATCH: u32 = 50;

/// The answer to `getUpdates`.
#[derive(Clone, Debug, Deserialize)]
pub struct Updates {
    /// Whether Telegram took the request.
    pub ok: bool,
    /// The updates, oldest first.
    #[serde(default)]
    pub result: Vec<serde_json::Value>,
}

/// Who sent an update, and from where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sender {
    /// The chat it came from.
    pub chat: i64,
    /// The user who sent it (none for a channel post).
    pub user: Option<i64>,
}

/// One update Notifio acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// A message with text (a command or not).
    Text {
        /// Its `update_id`.
        id: i64,
        /// Who sent it.
        from: Sender,
        /// When it was sent (Unix seconds).
        date: i64,
        /// The text.
        text: String,
    },
    /// A press on a button of a message the bot sent.
    Press {
        /// Its `update_id`.
        id: i64,
        /// Who pressed.
        from: Sender,
        /// The `callback_query` id to answer.
        query: String,
        /// The message the button is under (to redraw its buttons).
        message: Option<i64>,
        /// The button's data.
        data: String,
    },
    /// Anything else (a photo, an edit, a member joining): only its id counts.
    Other {
        /// Its `update_id`.
        id: i64,
    },
}

impl Update {
    /// Its `update_id`: the next `getUpdates` asks from one past the last handled.
    #[must_use]
    pub const fn id(&self) -> i64 {
        match self {
            Self::Text { id, .. } | Self::Press { id, .. } | Self::Other { id } => *id,
        }
    }

    /// Who sent it, when it is something Notifio acts on.
    #[must_use]
    pub const fn sender(&self) -> Option<Sender> {
        match self {
            Self::Text { from, .. } | Self::Press { from, .. } => Some(*from),
            Self::Other { .. } => None,
        }
    }

    /// Reads one update; `None` when it has no `update_id` (it cannot be acknowledged).
    #[must_use]
    pub fn read(v: &serde_json::Value) -> Option<Self> {
        let id = v.get("update_id")?.as_i64()?;
        let int = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_i64);
        if let Some(m) = v.get("message") {
            let (Some(chat), Some(text)) = (
                int(m.get("chat").and_then(|c| c.get("id"))),
                m.get("text").and_then(serde_json::Value::as_str),
            ) else {
                return Some(Self::Other { id });
            };
            return Some(Self::Text {
                id,
                from: Sender {
                    chat,
                    user: int(m.get("from").and_then(|f| f.get("id"))),
                },
                date: int(m.get("date")).unwrap_or(0),
                text: text.to_owned(),
            });
        }
        if let Some(q) = v.get("callback_query") {
            let message = q.get("message");
            let (Some(query), Some(chat), Some(data)) = (
                q.get("id").and_then(serde_json::Value::as_str),
                int(message
                    .and_then(|m| m.get("chat"))
                    .and_then(|c| c.get("id"))),
                q.get("data").and_then(serde_json::Value::as_str),
            ) else {
                return Some(Self::Other { id });
            };
            return Some(Self::Press {
                id,
                from: Sender {
                    chat,
                    user: int(q.get("from").and_then(|f| f.get("id"))),
                },
                query: query.to_owned(),
                message: int(message.and_then(|m| m.get("message_id"))),
                data: data.to_owned(),
            });
        }
        Some(Self::Other { id })
    }
}

/// Whether `from` may steer: it is the configured chat and, when `users` lists any, one of
/// them sent it.
#[must_use]
pub fn allowed(from: Sender, chat: i64, users: &[i64]) -> bool {
    from.chat == chat && (users.is_empty() || from.user.is_some_and(|u| users.contains(&u)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_presses_and_the_rest() {
        let text = json!({"update_id": 10, "message": {"message_id": 5, "date": 1700000000,
            "chat": {"id": -100, "type": "group"}, "from": {"id": 42, "is_bot": false},
            "text": "/status"}});
        assert_eq!(
            Update::read(&text),
            Some(Update::Text {
                id: 10,
                from: Sender {
                    chat: -100,
                    user: Some(42)
                },
                date: 1_700_000_000,
                text: "/status".into()
            })
        );
        let press = json!({"update_id": 11, "callback_query": {"id": "q1", "from": {"id": 42},
            "message": {"message_id": 77, "chat": {"id": -100}}, "data": "m:f:3"}});
        assert_eq!(
            Update::read(&press),
            Some(Update::Press {
                id: 11,
                from: Sender {
                    chat: -100,
                    user: Some(42)
                },
                query: "q1".into(),
                message: Some(77),
                data: "m:f:3".into()
            })
        );
        let photo = json!({"update_id": 12, "message": {"chat": {"id": 1}, "photo": []}});
        assert_eq!(Update::read(&photo), Some(Update::Other { id: 12 }));
        assert_eq!(
            Update::read(&json!({"update_id": 13, "edited_message": {}})),
            Some(Update::Other { id: 13 })
        );
        assert_eq!(Update::read(&json!({"message": {}})), None);
        assert_eq!(Update::read(&json!("garbage")), None);
    }

    #[test]
    fn only_the_configured_chat_and_users_steer() {
        let from = |chat, user| Sender { chat, user };
        assert!(allowed(from(7, Some(1)), 7, &[]));
        assert!(!allowed(from(8, Some(1)), 7, &[]));
        assert!(allowed(from(-100, Some(42)), -100, &[42, 43]));
        assert!(!allowed(from(-100, Some(44)), -100, &[42, 43]));
        assert!(!allowed(from(-100, None), -100, &[42]));
    }
}
