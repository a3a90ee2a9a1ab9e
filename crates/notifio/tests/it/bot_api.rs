//! A fake of Telegram's Bot API on 127.0.0.1, from its published description
//! (<https://core.telegram.org/bots/api>): `getUpdates` hands out the updates a test queues
//! (messages and button presses), from the `offset` asked for, holding the request up to its
//! `timeout` (long polling) until one is queued; `sendMessage`, `sendPhoto`, `sendMediaGroup`,
//! `editMessageReplyMarkup` and `answerCallbackQuery` are recorded and answered as Telegram
//! does (`{"ok":true,"result":…}` with message ids). A test can have any method answer 429
//! with `parameters.retry_after`, and count the calls of each.

#![allow(dead_code)] // each test uses what it needs

use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// One call the bot made.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    /// The method (`sendMessage`, …).
    pub(crate) method: String,
    /// Its parameters (JSON body, or the query's and form's pairs as a JSON object).
    pub(crate) params: Value,
    /// The token in its path.
    pub(crate) token: String,
}

#[derive(Default)]
struct State {
    /// Updates not yet confirmed by an offset past them.
    queue: VecDeque<Value>,
    next_update: i64,
    next_message: i64,
    calls: Vec<Call>,
    /// Methods answered 429 for this many calls more, with this `retry_after`.
    limited: Vec<(String, u32, u64)>,
}

/// The fake.
#[derive(Clone)]
pub(crate) struct BotApi {
    /// `http://127.0.0.1:PORT`, the `api` a channel is given.
    pub(crate) url: String,
    state: Arc<Mutex<State>>,
    queued: Arc<Notify>,
}

impl BotApi {
    pub(crate) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = Self {
            url: format!("http://{}", listener.local_addr().unwrap()),
            state: Arc::new(Mutex::new(State {
                next_update: 1000,
                next_message: 1,
                ..State::default()
            })),
            queued: Arc::new(Notify::new()),
        };
        let app = axum::Router::new()
            .route("/{bot}/{method}", axum::routing::any(handle))
            .with_state(api.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        api
    }

    /// Queues a text message from `user` in `chat`; returns its `update_id`.
    pub(crate) fn message(&self, chat: i64, user: i64, text: &str) -> i64 {
        self.push(|id, msg| {
            json!({"update_id": id, "message": {"message_id": msg, "date": now_s(),
                "chat": {"id": chat, "type": if chat < 0 { "group" } else { "private" }},
                "from": {"id": user, "is_bot": false, "first_name": "Ana"}, "text": text}})
        })
    }

    /// Queues a press on a button with `data` under message `message` in `chat`.
    pub(crate) fn press(&self, chat: i64, user: i64, message: i64, data: &str) -> i64 {
        self.push(|id, _| {
            json!({"update_id": id, "callback_query": {"id": format!("q{id}"),
                "from": {"id": user, "is_bot": false, "first_name": "Ana"},
                "message": {"message_id": message, "date": now_s(), "chat": {"id": chat}},
                "chat_instance": "1", "data": data}})
        })
    }

    fn push(&self, make: impl FnOnce(i64, i64) -> Value) -> i64 {
        let id = {
            let mut s = self.state.lock().unwrap();
            let id = s.next_update;
            s.next_update += 1;
            let msg = s.next_message;
            s.next_message += 1;
            let update = make(id, msg);
            s.queue.push_back(update);
            id
        };
        self.queued.notify_waiters();
        id
    }

    /// Has `method` answer 429 with `retry_after` seconds for its next `times` calls.
    pub(crate) fn limit(&self, method: &str, times: u32, retry_after: u64) {
        self.state
            .lock()
            .unwrap()
            .limited
            .push((method.to_owned(), times, retry_after));
    }

    /// Every call so far.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The calls of `method`.
    pub(crate) fn calls_of(&self, method: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// Updates queued and not yet confirmed.
    pub(crate) fn unconfirmed(&self) -> usize {
        self.state.lock().unwrap().queue.len()
    }
}

fn now_s() -> u64 {
    notifio::clock::now().as_millis() / 1000
}

/// The parameters of a call: its query and its body (JSON or a form), as one object.
fn params(query: Option<&str>, body: &str) -> Value {
    let mut out = serde_json::Map::new();
    let mut pairs = |text: &str| {
        for (k, v) in url::form_urlencoded::parse(text.as_bytes()) {
            let v = serde_json::from_str(&v).unwrap_or(Value::String(v.into_owned()));
            out.insert(k.into_owned(), v);
        }
    };
    if let Some(q) = query {
        pairs(q);
    }
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(m)) => out.extend(m),
        _ => pairs(body),
    }
    Value::Object(out)
}

async fn handle(
    axum::extract::State(api): axum::extract::State<BotApi>,
    axum::extract::Path((bot, method)): axum::extract::Path<(String, String)>,
    uri: http::Uri,
    body: String,
) -> axum::response::Response {
    let token = bot.strip_prefix("bot").unwrap_or_default().to_owned();
    let p = params(uri.query(), &body);
    let reply = |status: u16, v: Value| {
        let mut r = axum::response::Response::new(axum::body::Body::from(v.to_string()));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r
    };
    {
        let mut s = api.state.lock().unwrap();
        s.calls.push(Call {
            method: method.clone(),
            params: p.clone(),
            token,
        });
        if let Some(l) = s.limited.iter_mut().find(|l| l.0 == method && l.1 > 0) {
            l.1 -= 1;
            let after = l.2;
            return reply(
                429,
                json!({"ok": false, "error_code": 429,
                    "description": format!("Too Many Requests: retry after {after}"),
                    "parameters": {"retry_after": after}}),
            );
        }
    }
    match method.as_str() {
        "getUpdates" => {
            let offset = p["offset"].as_i64().unwrap_or(0);
            let timeout = p["timeout"].as_u64().unwrap_or(0).min(30);
            let limit = usize::try_from(p["limit"].as_u64().unwrap_or(100)).unwrap_or(100);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            loop {
                let ready = {
                    let mut s = api.state.lock().unwrap();
                    // An offset confirms every update before it.
                    s.queue
                        .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
                    s.queue.iter().take(limit).cloned().collect::<Vec<_>>()
                };
                if !ready.is_empty() || tokio::time::Instant::now() >= deadline {
                    return reply(200, json!({"ok": true, "result": ready}));
                }
                let _ = tokio::time::timeout_at(deadline, api.queued.notified()).await;
            }
        }
        "sendMessage" | "sendPhoto" | "sendMediaGroup" => {
            let id = {
                let mut s = api.state.lock().unwrap();
                let id = s.next_message;
                s.next_message += 1;
                id
            };
            let chat = p["chat_id"].clone();
            let message = json!({"message_id": id, "date": now_s(), "chat": {"id": chat}});
            let result = if method == "sendMediaGroup" {
                json!([message])
            } else {
                message
            };
            reply(200, json!({"ok": true, "result": result}))
        }
        "editMessageReplyMarkup" => reply(
            200,
            json!({"ok": true, "result": {"message_id": p["message_id"], "date": now_s()}}),
        ),
        "answerCallbackQuery" => reply(200, json!({"ok": true, "result": true})),
        "getMe" => reply(
            200,
            json!({"ok": true, "result": {"id": 1, "is_bot": true, "username": "notifio_test_bot"}}),
        ),
        _ => reply(
            404,
            json!({"ok": false, "error_code": 404, "description": "Not Found"}),
        ),
    }
}

/// The fake answers as the description says, and what it hands out reads as Notifio reads
/// updates: a long poll waits for a queued update, an offset confirms the ones before it.
#[tokio::test]
async fn the_fake_hands_out_updates_as_telegram_does() {
    let api = BotApi::start().await;
    let client = crate::util::api_client();
    let get = |offset: i64, timeout: u64| {
        let url = format!(
            "{}/bot1:x/getUpdates?offset={offset}&timeout={timeout}",
            api.url
        );
        let client = client.clone();
        async move {
            let text = client.get(url).send().await.unwrap().text().await.unwrap();
            serde_json::from_str::<Value>(&text).unwrap()
        }
    };
    let empty = get(0, 0).await;
    assert_eq!(empty["result"], json!([]));
    let waiting = tokio::spawn(get(0, 5));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let id = api.message(7, 42, "/status");
    let got = waiting.await.unwrap();
    let update = notifio::chat::Update::read(&got["result"][0]).unwrap();
    assert_eq!(update.id(), id);
    assert!(matches!(update, notifio::chat::Update::Text { ref text, .. } if text == "/status"));
    let press = api.press(7, 42, 3, "m:f:1");
    let both = get(id, 0).await;
    assert_eq!(both["result"].as_array().unwrap().len(), 2);
    let after = get(press + 1, 0).await;
    assert_eq!(
        after["result"],
        json!([]),
        "an offset confirms what is before it"
    );
    assert_eq!(api.unconfirmed(), 0);
    api.limit("sendMessage", 1, 3);
    let r = client
        .post(format!("{}/bot1:x/sendMessage", api.url))
        .header("content-type", "application/json")
        .body(json!({"chat_id": 7, "text": "hi"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["parameters"]["retry_after"], 3);
    assert_eq!(api.calls_of("sendMessage").len(), 1);
}
