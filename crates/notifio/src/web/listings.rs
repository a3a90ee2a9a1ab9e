//! The listings inbox over HTTP (docs/dashboard.md#the-listings-inbox): `GET /api/listings`
//! (filters, pages), its export as CSV or JSON, Atom feeds (`/feed.atom`,
//! `/feed/<search>.atom`) and `POST /api/listings/state` to mark a listing.
//!
//! Reads and marks go to the state database through a connection of the dashboard's own
//! (SQLite serialises its writes with the watcher's); the queries run on tokio's blocking
//! pool, so a large export never stalls the page's other requests. Feeds and exports sit
//! behind the same token as every other reading route off loopback (`?token=` works for a
//! feed reader); marking is a change, guarded like the search API.

use super::api::{self, ApiError, App};
use crate::inbox::{self, InboxListing, InboxQuery, ListingState};
use crate::store::Store;
use axum::Json;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

type ApiResult = Result<Response, ApiError>;

/// The reading routes.
pub(super) fn reads(app: Arc<App>) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/api/listings", get(list))
        .route("/api/listings/export.csv", get(export_csv))
        .route("/api/listings/export.json", get(export_json))
        .route("/feed.atom", get(feed_all))
        .route("/feed/{file}", get(feed_search))
        .with_state(app)
}

/// The mutating route.
pub(super) fn changes(app: Arc<App>) -> axum::Router {
    use axum::routing::post;
    axum::Router::new()
        .route("/api/listings/state", post(set_state))
        .with_state(app)
}

/// The query of `raw` (a URL's query string), or a 400 naming the parameter.
fn query(raw: Option<&str>) -> Result<InboxQuery, ApiError> {
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    InboxQuery::from_params(&pairs, crate::clock::now().0)
        .map_err(|(field, why)| ApiError::new(StatusCode::BAD_REQUEST, why, Some(&field)))
}

/// Runs `f` on the dashboard's connection to the state database, on the blocking pool.
async fn with_store<R: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&mut Store) -> Result<R, crate::store::StoreError> + Send + 'static,
) -> Result<R, ApiError> {
    let app = Arc::clone(app);
    tokio::task::spawn_blocking(move || app.with_inbox_store(f))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the inbox query failed: {e}"),
                None,
            )
        })?
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string(), None))
}

/// Every listing `q` matches, up to [`InboxQuery::MAX_EXPORT`], in pages.
fn all(store: &Store, q: &InboxQuery) -> Result<Vec<InboxListing>, crate::store::StoreError> {
    let mut out = Vec::new();
    let mut q = InboxQuery {
        per_page: InboxQuery::MAX_PER_PAGE,
        page: 1,
        ..q.clone()
    };
    loop {
        let page = store.inbox(&q)?;
        let done = page.listings.is_empty()
            || (q.page * q.per_page) as u64 >= page.total
            || out.len() >= InboxQuery::MAX_EXPORT;
        out.extend(page.listings);
        if done {
            out.truncate(InboxQuery::MAX_EXPORT);
            return Ok(out);
        }
        q.page += 1;
    }
}

/// `GET /api/listings`: one page, newest first.
async fn list(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> ApiResult {
    let q = query(raw.as_deref())?;
    let page = with_store(&app, move |s| s.inbox(&q)).await?;
    Ok(Json(page.to_json()).into_response())
}

/// A download named `name`.
fn attachment(body: String, content_type: &str, name: &str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// `GET /api/listings/export.csv`: every listing the filters match, as CSV.
async fn export_csv(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> ApiResult {
    let q = query(raw.as_deref())?;
    let listings = with_store(&app, move |s| all(s, &q)).await?;
    Ok(attachment(
        inbox::csv(&listings),
        "text/csv; charset=utf-8",
        "notifio-listings.csv",
    ))
}

/// `GET /api/listings/export.json`: every listing the filters match, as one JSON array.
async fn export_json(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> ApiResult {
    let q = query(raw.as_deref())?;
    let listings = with_store(&app, move |s| all(s, &q)).await?;
    let json: Vec<_> = listings.iter().map(InboxListing::to_json).collect();
    Ok(attachment(
        serde_json::Value::Array(json).to_string(),
        "application/json",
        "notifio-listings.json",
    ))
}

/// The newest listings a feed holds.
const FEED_ENTRIES: usize = 100;

/// A feed of `q`'s newest announced listings: what the searches' filters let through,
/// found after their baselines, not hidden.
async fn feed(app: &Arc<App>, q: InboxQuery, title: String, id: String) -> ApiResult {
    let q = InboxQuery {
        matched: Some(true),
        news_only: true,
        per_page: FEED_ENTRIES,
        page: 1,
        ..q
    };
    let page = with_store(app, move |s| s.inbox(&q)).await?;
    let body = inbox::atom(&title, &id, &page.listings, crate::clock::now().0);
    Ok((
        [(header::CONTENT_TYPE, "application/atom+xml; charset=utf-8")],
        body,
    )
        .into_response())
}

/// `GET /feed.atom`: every search's.
async fn feed_all(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> ApiResult {
    let q = query(raw.as_deref())?;
    feed(
        &app,
        q,
        "Notifio: new listings".to_owned(),
        "urn:notifio:feed:all".to_owned(),
    )
    .await
}

/// `GET /feed/<search>.atom`: one search's (404 for a search the watcher does not have).
async fn feed_search(
    State(app): State<Arc<App>>,
    UrlPath(file): UrlPath<String>,
    RawQuery(raw): RawQuery,
) -> ApiResult {
    let Some(name) = file.strip_suffix(".atom") else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "feeds are /feed.atom and /feed/<search>.atom",
            None,
        ));
    };
    let name = name.to_owned();
    let known = {
        let name = name.clone();
        with_store(&app, move |s| {
            Ok(s.searches()?.iter().any(|row| row.name == name))
        })
        .await?
    };
    if !known {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no search named `{name}`"),
            None,
        ));
    }
    let q = InboxQuery {
        search: Some(name.clone()),
        ..query(raw.as_deref())?
    };
    let id = format!(
        "urn:notifio:feed:{}",
        percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC)
    );
    feed(&app, q, format!("Notifio: {name}"), id).await
}

/// `POST /api/listings/state` `{"site", "id", "state"}`: marks a listing; 404 when there is
/// no such listing, 400 for a state that is not one.
async fn set_state(
    State(app): State<Arc<App>>,
    body: Result<Json<serde_json::Value>, axum::extract::rejection::JsonRejection>,
) -> ApiResult {
    let Json(body) =
        body.map_err(|e| api::unread(&e, "the body must be JSON: {\"site\", \"id\", \"state\"}"))?;
    let text = |key: &str| {
        body.get(key)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("`{key}` must be a string"),
                    Some(key),
                )
            })
    };
    let (site, id, name) = (text("site")?, text("id")?, text("state")?);
    let state = ListingState::parse(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("`{name}` is not a listing state: new, seen, favourite, hidden or contacted"),
            Some("state"),
        )
    })?;
    let (s, i) = (site.clone(), id.clone());
    let found = with_store(&app, move |store| {
        store.transaction(|tx| tx.set_listing_state(&s, &i, state, crate::clock::now().0))
    })
    .await?;
    if !found {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no listing `{id}` on {site}"),
            None,
        ));
    }
    Ok(Json(serde_json::json!({ "site": site, "id": id, "state": state })).into_response())
}
