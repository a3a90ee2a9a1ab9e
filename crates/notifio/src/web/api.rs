//! The dashboard's JSON API for managing searches (docs/dashboard.md): list, add, patch,
//! delete, pause and resume them, preview a page, open a site in a window for the user.
//!
//! Every change is an edit of the config file (`config::edit`, the rest of the file kept
//! byte for byte), validated as `watch` would validate it at start, applied to the file as it
//! is at that moment and written atomically (`config::write`: a hand edit made at the same
//! time is never lost), and then applied by the live reload like an edit made by hand: the
//! file stays the one source of truth. Previews and login windows are requests to the running watcher, whose scheduler
//! decides when a site is asked. Errors are `{"error", "field"}` with 400 (a value the config
//! refuses, `field` naming its key), 413 (a body over [`MAX_BODY`]), 404 (no such search) or 409 (a name taken, the last
//! search, a file that cannot be edited, is read-only, keeps changing, or is invalid
//! elsewhere). Mutating routes are guarded
//! by `auth::require_mutation_rules`.

use crate::config::{self, edit, edit::EditError};
use crate::reload::Nudge;
use crate::watch::{PreviewResult, Request, field_of};
use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use notifio_policy::SiteKey;
use serde_json::{Map, Value as Json_};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use toml_edit::{Item, Value};

/// How long a preview may wait for its turn on its site and its check.
const PREVIEW_WAIT: Duration = Duration::from_secs(90);
/// How long "Open in browser" may wait for the browser checks in flight to end.
const LOGIN_WAIT: Duration = Duration::from_secs(60);

/// What the API needs of a running `notifio watch`: its config file, its request channel and
/// the follower of its config file.
#[derive(Debug)]
pub struct App {
    config_path: PathBuf,
    watcher: mpsc::Sender<Request>,
    nudge: Nudge,
    /// One edit of the file at a time: read, change, validate, write.
    edit: tokio::sync::Mutex<()>,
    /// The one writer of the file (it applies each change to the file as it is then).
    writer: config::write::Writer,
    /// The state database, for the listings inbox (`listings.rs`).
    state_db: PathBuf,
    /// The inbox's connection to it, opened on first use.
    inbox: std::sync::Mutex<Option<crate::store::Store>>,
    /// The config file's text as it last was when settled ([`listed`]).
    settled: std::sync::Mutex<Option<String>>,
}

impl App {
    /// The API of the watcher that runs `config_path`, with its state database at `state_db`.
    #[must_use]
    pub fn new(
        config_path: PathBuf,
        watcher: mpsc::Sender<Request>,
        nudge: Nudge,
        state_db: PathBuf,
    ) -> Self {
        // The file the watcher just started with: complete, whenever it was written.
        let settled = std::sync::Mutex::new(std::fs::read_to_string(&config_path).ok());
        Self {
            writer: config::write::Writer::new(config_path.clone()),
            config_path,
            watcher,
            nudge,
            edit: tokio::sync::Mutex::new(()),
            state_db,
            inbox: std::sync::Mutex::new(None),
            settled,
        }
    }

    /// Runs `f` on the inbox's connection to the state database (blocking: call it on the
    /// blocking pool).
    pub(super) fn with_inbox_store<R>(
        &self,
        f: impl FnOnce(&mut crate::store::Store) -> Result<R, crate::store::StoreError>,
    ) -> Result<R, crate::store::StoreError> {
        let mut guard = self
            .inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let store = match guard.take() {
            Some(store) => guard.insert(store),
            None => guard.insert(crate::store::Store::open_existing(&self.state_db)?),
        };
        f(store)
    }
}

/// An API error: `{"error": "...", "field": "url"}`.
#[derive(Debug)]
pub(super) struct ApiError {
    status: StatusCode,
    error: String,
    field: Option<String>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, error: impl Into<String>, field: Option<&str>) -> Self {
        Self {
            status,
            error: error.into(),
            field: field.map(str::to_owned),
        }
    }

    fn bad(error: impl Into<String>, field: &str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, error, Some(field))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.error, "field": self.field });
        (self.status, Json(body)).into_response()
    }
}

impl From<EditError> for ApiError {
    fn from(e: EditError) -> Self {
        let (status, field) = match &e {
            EditError::NoSuchSearch(_) => (StatusCode::NOT_FOUND, None),
            EditError::DuplicateName(_) => (StatusCode::CONFLICT, Some("name")),
            _ => (StatusCode::CONFLICT, None),
        };
        Self::new(status, e.to_string(), field)
    }
}

type ApiResult = Result<Response, ApiError>;

/// The routes: `GET /api/searches`, `POST /api/searches`, `PATCH` and `DELETE
/// /api/searches/{name}`, `POST /api/searches/{name}/pause|resume`, `POST /api/preview`,
/// `GET /api/profile?url=`, `POST /api/sites/{site}/login`. [`super::serve_app`] adds the
/// guards.
pub(super) fn reads(app: Arc<App>) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/api/searches", get(list))
        .route("/api/profile", get(profile))
        .with_state(app)
}

/// The mutating routes (see [`reads`]).
pub(super) fn changes(app: Arc<App>) -> axum::Router {
    use axum::routing::{patch, post};
    axum::Router::new()
        .route("/api/searches", post(add))
        .route("/api/searches/{name}", patch(change).delete(delete))
        .route("/api/searches/{name}/pause", post(pause))
        .route("/api/searches/{name}/resume", post(resume))
        .route("/api/preview", post(preview))
        .route("/api/sites/{site}/login", post(login))
        .with_state(app)
}

/// The most a request's JSON body may hold. A search or a mark is a few hundred bytes; the
/// cap keeps a runaway or hostile client from making the dashboard buffer megabytes (axum's
/// own default is 2 MB). Set on every route that changes something ([`super::serve_app`]).
pub(super) const MAX_BODY: usize = 64 * 1024;

/// Why a JSON body was not read: 413 when it is over [`MAX_BODY`] (not a complaint about
/// JSON it never got to be), else a 400 saying what it `must` be.
pub(super) fn unread(e: &JsonRejection, must: &str) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body is over the {} KiB a request may send",
                MAX_BODY / 1024
            ),
            None,
        );
    }
    ApiError::new(
        StatusCode::BAD_REQUEST,
        format!("{must}: {}", e.body_text()),
        None,
    )
}

/// A JSON body that is an object, or a 400 (a 413 past [`MAX_BODY`]).
fn object(body: Result<Json<Json_>, JsonRejection>) -> Result<Map<String, Json_>, ApiError> {
    match body {
        Ok(Json(Json_::Object(m))) => Ok(m),
        Ok(_) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
            None,
        )),
        Err(e) => Err(unread(&e, "the body is not JSON")),
    }
}

/// A JSON value as a TOML value (objects become inline tables).
fn toml_value(v: &Json_, field: &str) -> Result<Value, ApiError> {
    Ok(match v {
        Json_::String(s) => Value::from(s.as_str()),
        Json_::Bool(b) => Value::from(*b),
        Json_::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) => Value::from(f),
            _ => {
                return Err(ApiError::bad(
                    format!("`{field}`: {n} is out of range"),
                    field,
                ));
            }
        },
        Json_::Array(a) => {
            let mut out = toml_edit::Array::new();
            for (i, x) in a.iter().enumerate() {
                out.push(toml_value(x, &format!("{field}[{i}]"))?);
            }
            Value::Array(out)
        }
        Json_::Object(m) => {
            let mut out = toml_edit::InlineTable::new();
            for (k, x) in m {
                out.insert(k, toml_value(x, &format!("{field}.{k}"))?);
            }
            Value::InlineTable(out)
        }
        Json_::Null => return Err(ApiError::bad(format!("`{field}` is null"), field)),
    })
}

/// A TOML item as JSON (for listing the searches as the file has them).
fn json_of(item: &Item) -> Json_ {
    match item {
        Item::Value(v) => json_value(v),
        Item::Table(t) => {
            Json_::Object(t.iter().map(|(k, v)| (k.to_owned(), json_of(v))).collect())
        }
        Item::ArrayOfTables(a) => {
            Json_::Array(a.iter().map(|t| json_of(&Item::Table(t.clone()))).collect())
        }
        Item::None => Json_::Null,
    }
}

fn json_value(v: &Value) -> Json_ {
    match v {
        Value::String(s) => Json_::from(s.value().as_str()),
        Value::Integer(i) => Json_::from(*i.value()),
        Value::Float(f) => Json_::from(*f.value()),
        Value::Boolean(b) => Json_::from(*b.value()),
        Value::Datetime(d) => Json_::from(d.value().to_string()),
        Value::Array(a) => Json_::Array(a.iter().map(json_value).collect()),
        Value::InlineTable(t) => Json_::Object(
            t.iter()
                .map(|(k, v)| (k.to_owned(), json_value(v)))
                .collect(),
        ),
    }
}

/// The config file's text.
async fn read(path: &Path) -> Result<String, ApiError> {
    tokio::fs::read_to_string(path).await.map_err(|e| {
        ApiError::new(
            StatusCode::CONFLICT,
            format!("cannot read the config file {}: {e}", path.display()),
            None,
        )
    })
}

/// Validates `text` as the next config file, the search at `index` being the one edited: a
/// problem in it is a 400 naming its key, anywhere else a 409.
fn validate(path: &Path, text: &str, index: usize) -> Result<config::Config, ApiError> {
    config::load_text(text, path).map_err(|e| {
        let message = match &e.hint {
            Some(h) => format!("{}; {h}", e.message),
            None => e.message.clone(),
        };
        match field_of(&e, index) {
            Some(field) => ApiError::bad(message, &field),
            None => ApiError::new(
                StatusCode::CONFLICT,
                format!("the config file has a problem elsewhere; fix it first: {e}"),
                None,
            ),
        }
    })
}

/// Applies `change` to the config file as it is at that moment (`config::write`: a hand edit
/// made meanwhile is kept, and the change applied to it), then asks the follower to read it.
/// `change` returns the new text, validated, or `None` for no change. Returns the file's text
/// afterwards.
async fn write(
    app: &App,
    change: impl FnMut(&str) -> Result<Option<String>, ApiError>,
) -> Result<String, ApiError> {
    use config::write::WriteError;
    let text = app.writer.apply(change).await.map_err(|e| match e {
        WriteError::Change(e) => e,
        other => ApiError::new(StatusCode::CONFLICT, other.to_string(), None),
    })?;
    app.nudge.now();
    Ok(text)
}

/// The search `name` of `config` as the API shows it, from the file's table.
fn shown(text: &str, name: &str) -> Json_ {
    edit::searches(text)
        .ok()
        .and_then(|ts| ts.into_iter().find(|t| edit::is_named(t, name)))
        .map_or(Json_::Null, |t| redact(json_of(&Item::Table(t))))
}

/// No password of a URL's `user:password@` leaves the API.
fn redact(mut v: Json_) -> Json_ {
    if let Some(Json_::String(u)) = v.get_mut("url") {
        *u = crate::redact::url_password(u).into_owned();
    }
    v
}

/// The searches of the file's `text` as the page lists them: as the file has them, except
/// that while the file is being written (not yet settled: a save in several writes) a search
/// it no longer has is still listed, as the file last had it settled. An addition or a change
/// shows at once; a removal once the file has been left alone, when the watcher applies it
/// too (docs/config.md#live-reload): a search is never shown gone while its table is simply
/// not written yet.
fn listed(app: &App, text: &str) -> Result<Vec<toml_edit::Table>, ApiError> {
    let name = |t: &toml_edit::Table| t.get("name").and_then(Item::as_str).map(str::to_owned);
    let settled_now = app.writer.is_settled();
    let mut settled = app
        .settled
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let current = edit::searches(text);
    if settled_now {
        let tables = current.map_err(ApiError::from)?;
        *settled = Some(text.to_owned());
        return Ok(tables);
    }
    let before = settled
        .as_deref()
        .and_then(|t| edit::searches(t).ok())
        .unwrap_or_default();
    let current = match current {
        Ok(tables) => tables,
        // Cut in the middle of a table: the file as it was.
        Err(_) if !before.is_empty() => return Ok(before),
        Err(e) => return Err(e.into()),
    };
    let mut out: Vec<toml_edit::Table> = before
        .into_iter()
        .map(|b| {
            let now = name(&b).and_then(|n| current.iter().find(|c| edit::is_named(c, &n)));
            now.cloned().unwrap_or(b)
        })
        .collect();
    for c in current {
        let listed = name(&c).is_some_and(|n| out.iter().any(|o| edit::is_named(o, &n)));
        if !listed {
            out.push(c);
        }
    }
    Ok(out)
}

/// `GET /api/searches`: the `[[search]]` tables as the file has them ([`listed`]: a search
/// is shown gone only once the file has settled), and the channels a search may name.
async fn list(State(app): State<Arc<App>>) -> ApiResult {
    let text = read(&app.config_path).await?;
    let tables = listed(&app, &text)?;
    let searches: Vec<Json_> = tables
        .iter()
        .map(|t| redact(json_of(&Item::Table(t.clone()))))
        .collect();
    let channels = config::parse(&text, &app.config_path)
        .map(|c| c.notify.channel_names())
        .unwrap_or_default();
    Ok(Json(serde_json::json!({
        "config": app.config_path.display().to_string(),
        "searches": searches,
        "channels": channels,
    }))
    .into_response())
}

#[derive(serde::Deserialize)]
struct UrlQuery {
    url: String,
}

/// `GET /api/profile?url=`: the site of a URL, the profile that reads it, and whether it is
/// read by auto mode (a site without a profile: a `listing` may pin what auto mode finds).
async fn profile(State(app): State<Arc<App>>, Query(q): Query<UrlQuery>) -> ApiResult {
    let site = SiteKey::from_url(q.url.trim()).map_err(|e| ApiError::bad(e.to_string(), "url"))?;
    let text = read(&app.config_path).await.unwrap_or_default();
    let parsed = config::parse(&text, &app.config_path).ok();
    let settings = parsed
        .as_ref()
        .and_then(|c| c.sites.get(site.as_str()).cloned())
        .unwrap_or_default();
    let catalog = parsed.map_or_else(crate::extract::Catalog::built_in, |c| c.profiles);
    let entry = match &settings.profile {
        Some(name) => catalog.by_name(name),
        None => catalog.by_site(&site),
    };
    let profile = settings.profile.clone().unwrap_or_else(|| {
        entry.map_or_else(|| crate::extract::auto::NAME.to_owned(), |e| e.name.clone())
    });
    let about = entry.map(|e| e.about.clone());
    let fetch = settings.fetch.unwrap_or_else(|| {
        entry
            .and_then(|e| crate::fetch::FetchMode::parse(e.fetch))
            .unwrap_or_default()
    });
    Ok(Json(serde_json::json!({
        "site": site.as_str(),
        "profile": profile,
        "about": about,
        "fetch": fetch,
        // No profile: read by auto mode; a `listing` may pin what it finds.
        "needs_listing": false,
        "auto": profile == crate::extract::auto::NAME || profile == "generic",
    }))
    .into_response())
}

/// The fields of a new search, in the order they are written: `name` and `url` first.
fn fields(body: &Map<String, Json_>) -> Result<Vec<(String, Value)>, ApiError> {
    for required in ["name", "url"] {
        match body.get(required) {
            Some(Json_::String(s)) if !s.trim().is_empty() => {}
            Some(_) => {
                return Err(ApiError::bad(
                    format!("`{required}` must be a non-empty string"),
                    required,
                ));
            }
            None => return Err(ApiError::bad(format!("`{required}` is missing"), required)),
        }
    }
    let mut keys: Vec<&String> = body.keys().collect();
    keys.sort_by_key(|k| match k.as_str() {
        "name" => 0,
        "url" => 1,
        _ => 2,
    });
    keys.into_iter()
        .filter(|k| !body[k.as_str()].is_null())
        .map(|k| Ok((k.clone(), toml_value(&body[k.as_str()], k)?)))
        .collect()
}

/// A new name as the file gets it: without spaces around it, in Unicode NFC (a name the
/// page sends is stored the way names are compared, `config::name_key`).
fn normalize_name(body: &mut Map<String, Json_>) {
    if let Some(Json_::String(name)) = body.get_mut("name") {
        *name = config::name_key(name.trim()).into_owned();
    }
}

/// `POST /api/searches`.
async fn add(State(app): State<Arc<App>>, body: Result<Json<Json_>, JsonRejection>) -> ApiResult {
    let mut body = object(body)?;
    normalize_name(&mut body);
    let fields = fields(&body)?;
    let name = body["name"].as_str().unwrap_or_default().trim().to_owned();
    let _one = app.edit.lock().await;
    let path = app.config_path.clone();
    let new = write(&app, |text| {
        let new = edit::add_search(text, &fields)?;
        let index = edit::searches(&new).map_or(0, |s| s.len().saturating_sub(1));
        validate(&path, &new, index)?;
        Ok(Some(new))
    })
    .await?;
    tracing::info!(search = %name, "search added from the dashboard");
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({ "search": shown(&new, &name) })),
    )
        .into_response())
}

/// Index of the search named `name` in `text`.
fn index_of(text: &str, name: &str) -> usize {
    edit::searches(text)
        .ok()
        .and_then(|ts| ts.iter().position(|t| edit::is_named(t, name)))
        .unwrap_or(0)
}

/// Runs one edit of the search `name`: read, change, validate, write; answers with the search
/// as written (under `shown_as`, its name afterwards).
async fn edit_one(
    app: &App,
    name: &str,
    shown_as: &str,
    change: impl Fn(&str) -> Result<String, EditError>,
) -> ApiResult {
    let _one = app.edit.lock().await;
    let mut changed = false;
    let new = write(app, |text| {
        let new = change(text)?;
        if new == text {
            return Ok(None);
        }
        validate(&app.config_path, &new, index_of(&new, shown_as))?;
        changed = true;
        Ok(Some(new))
    })
    .await?;
    if changed {
        tracing::info!(search = %name, "search changed from the dashboard");
    }
    Ok(Json(serde_json::json!({ "search": shown(&new, shown_as) })).into_response())
}

/// `PATCH /api/searches/{name}`: the body's keys are set, `null` removes one.
async fn change(
    State(app): State<Arc<App>>,
    UrlPath(name): UrlPath<String>,
    body: Result<Json<Json_>, JsonRejection>,
) -> ApiResult {
    let mut body = object(body)?;
    normalize_name(&mut body);
    let mut set = Vec::with_capacity(body.len());
    for (k, v) in &body {
        if matches!(k.as_str(), "name" | "url") && v.as_str().is_none_or(|s| s.trim().is_empty()) {
            return Err(ApiError::bad(
                format!("`{k}` must be a non-empty string"),
                k,
            ));
        }
        let value = if v.is_null() {
            None
        } else {
            Some(toml_value(v, k)?)
        };
        set.push((k.clone(), value));
    }
    let shown_as = body
        .get("name")
        .and_then(Json_::as_str)
        .map_or_else(|| name.clone(), str::to_owned);
    edit_one(&app, &name, &shown_as, |text| {
        edit::patch_search(text, &name, &set)
    })
    .await
}

/// `DELETE /api/searches/{name}`: its history stays in the state database.
async fn delete(State(app): State<Arc<App>>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let _one = app.edit.lock().await;
    write(&app, |text| {
        let new = edit::delete_search(text, &name)?;
        validate(&app.config_path, &new, usize::MAX)?;
        Ok(Some(new))
    })
    .await?;
    tracing::info!(search = %name, "search deleted from the dashboard");
    Ok(Json(serde_json::json!({ "deleted": name })).into_response())
}

/// `POST /api/searches/{name}/pause`.
async fn pause(State(app): State<Arc<App>>, UrlPath(name): UrlPath<String>) -> ApiResult {
    edit_one(&app, &name, &name, |text| {
        edit::set_paused(text, &name, true)
    })
    .await
}

/// `POST /api/searches/{name}/resume`.
async fn resume(State(app): State<Arc<App>>, UrlPath(name): UrlPath<String>) -> ApiResult {
    edit_one(&app, &name, &name, |text| {
        edit::set_paused(text, &name, false)
    })
    .await
}

/// `POST /api/preview` (`{"url", "listing"?, "profile"?}`): one check of the page through
/// the running watcher, shown and not recorded.
async fn preview(
    State(app): State<Arc<App>>,
    body: Result<Json<Json_>, JsonRejection>,
) -> ApiResult {
    let body = object(body)?;
    for key in body.keys() {
        if !matches!(key.as_str(), "url" | "listing" | "profile") {
            return Err(ApiError::bad(
                format!("unknown key `{key}`: a preview takes url, listing and profile"),
                key,
            ));
        }
    }
    let name = format!("preview {:016x}", rand::random::<u64>());
    let mut with_name = body.clone();
    with_name.insert("name".into(), Json_::from(name.as_str()));
    let fields = fields(&with_name)?;
    let text = read(&app.config_path).await?;
    let candidate = edit::add_search(&text, &fields)?;
    let index = edit::searches(&candidate).map_or(0, |s| s.len().saturating_sub(1));
    let cfg = validate(&app.config_path, &candidate, index)?;
    let Some(search) = cfg.searches.into_iter().find(|s| s.name == name) else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the preview's search went missing",
            None,
        ));
    };
    let (tx, rx) = oneshot::channel::<PreviewResult>();
    app.watcher
        .send(Request::Preview(Box::new(search), tx))
        .await
        .map_err(|_| stopped())?;
    match tokio::time::timeout(PREVIEW_WAIT, rx).await {
        Ok(Ok(result)) => Ok(Json(result).into_response()),
        Ok(Err(_)) => Err(stopped()),
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "the site's turn did not come within 90 s; try again later",
            None,
        )),
    }
}

fn stopped() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the watcher is stopping",
        None,
    )
}

/// `POST /api/sites/{site}/login`: what `notifio login` does, for the running watcher.
async fn login(State(app): State<Arc<App>>, UrlPath(site): UrlPath<String>) -> ApiResult {
    let key = SiteKey::from_url(&format!("http://{}/", site.trim()))
        .map_err(|e| ApiError::bad(e.to_string(), "site"))?;
    let (tx, rx) = oneshot::channel();
    app.watcher
        .send(Request::Login(key, tx))
        .await
        .map_err(|_| stopped())?;
    match tokio::time::timeout(LOGIN_WAIT, rx).await {
        Ok(Ok(Ok(message))) => Ok((
            StatusCode::ACCEPTED,
            Json(serde_json::json!({ "message": message })),
        )
            .into_response()),
        Ok(Ok(Err(e))) => Err(ApiError::new(StatusCode::CONFLICT, e, None)),
        Ok(Err(_)) => Err(stopped()),
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "the browser checks in flight did not end in time; try again",
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_become_toml_values_and_back() {
        let v: Json_ = serde_json::json!({"selector": "article", "n": 3, "ok": true, "x": [1.5]});
        let t = toml_value(&v, "listing").unwrap();
        assert_eq!(
            t.to_string(),
            "{ n = 3, ok = true, selector = \"article\", x = [1.5] }"
        );
        assert_eq!(json_value(&t), v);
        assert!(toml_value(&Json_::Null, "interval").is_err());
    }

    #[test]
    fn a_new_search_needs_a_name_and_a_url_and_they_come_first() {
        let body = serde_json::json!({"interval": "1m", "url": "https://x.org/", "name": "X"});
        let f = fields(body.as_object().unwrap()).unwrap();
        let keys: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["name", "url", "interval"]);
        let e = fields(serde_json::json!({"name": "X"}).as_object().unwrap()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("url"));
        let e = fields(
            serde_json::json!({"name": 3, "url": "u"})
                .as_object()
                .unwrap(),
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("name"));
    }
}
