//! The HTTP API: Kubernetes-shaped nodes, history, the registry at a past
//! time, store status, health and metrics. Reads only what is durable.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::controller::view::View;
use crate::metrics::Metrics;
use crate::model::Micros;
use crate::store::{HistoryQuery, Store};

/// Request bodies are small here; anything larger is refused.
pub const BODY_LIMIT: usize = 1 << 20;

/// What the handlers read.
#[derive(Clone)]
pub struct AppState {
    pub view: Arc<View>,
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
}

/// The router, for tests and for [`serve`].
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/v1/nodes", get(list_nodes))
        .route("/api/v1/nodes/{name}", get(get_node))
        .route("/v1/nodes", get(list_node_records))
        .route("/v1/nodes/{name}", get(get_node_record))
        .route("/v1/history", get(history))
        .route("/v1/at", get(at))
        .route("/v1/store", get(store_status))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .fallback(not_found_path)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// A Kubernetes `Status` error response.
fn status_error(code: StatusCode, reason: &str, message: String) -> Response {
    let body = crate::kube::status_error(code.as_u16(), reason, &message, None, None);
    (code, Json(body)).into_response()
}

fn bad_request(message: String) -> Response {
    status_error(StatusCode::BAD_REQUEST, "BadRequest", message)
}

fn internal(e: impl std::fmt::Display) -> Response {
    status_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalError",
        e.to_string(),
    )
}

async fn not_found_path(uri: axum::http::Uri) -> Response {
    status_error(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!(
            "the server could not find the requested resource {}",
            uri.path()
        ),
    )
}

async fn list_nodes(State(s): State<AppState>) -> Response {
    let items = s
        .view
        .list()
        .into_iter()
        .map(|(n, beat)| crate::kube::node(&n, beat));
    Json(crate::kube::node_list(items, s.store.durable_seq())).into_response()
}

async fn get_node(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    match s.view.get(&name) {
        Some((node, beat)) => Json(crate::kube::node(&node, beat)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(crate::kube::not_found("nodes", &name)),
        )
            .into_response(),
    }
}

/// A node as `/v1/nodes` serves it: the registry record and the newest heartbeat.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct NodeEntry {
    pub node: crate::model::Node,
    pub heartbeat: Option<Micros>,
}

async fn list_node_records(State(s): State<AppState>) -> Response {
    let entries: Vec<NodeEntry> = s
        .view
        .list()
        .into_iter()
        .map(|(node, heartbeat)| NodeEntry { node, heartbeat })
        .collect();
    Json(entries).into_response()
}

async fn get_node_record(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    match s.view.get(&name) {
        Some((node, heartbeat)) => Json(NodeEntry { node, heartbeat }).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(crate::kube::not_found("nodes", &name)),
        )
            .into_response(),
    }
}

/// Query of `/v1/history`, the same filters as `nodekeeper history`.
#[derive(Debug, Default, Deserialize)]
pub struct HistoryParams {
    pub node: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub condition: Option<String>,
    pub after: Option<u64>,
    pub limit: Option<usize>,
}

impl HistoryParams {
    /// Validates the parameters into a store query; times are RFC 3339 or ages (`10m`).
    pub fn to_query(&self, now: Micros) -> Result<HistoryQuery, String> {
        let instant = |flag: &str, v: &Option<String>| {
            v.as_deref()
                .map(|t| Micros::parse_instant(t, now).map_err(|e| format!("{flag}: {e}")))
                .transpose()
        };
        Ok(HistoryQuery {
            node: self.node.clone(),
            since: instant("since", &self.since)?,
            until: instant("until", &self.until)?,
            condition: self.condition.clone(),
            after_seq: self.after,
            limit: self.limit,
        })
    }
}

async fn history(
    State(s): State<AppState>,
    params: Result<Query<HistoryParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(params) = match params {
        Ok(p) => p,
        Err(e) => return bad_request(e.body_text()),
    };
    let query = match params.to_query(Micros::now()) {
        Ok(q) => q,
        Err(e) => return bad_request(e),
    };
    let store = s.store.clone();
    match tokio::task::spawn_blocking(move || store.history(&query)).await {
        Ok(Ok(events)) => Json(events).into_response(),
        Ok(Err(e)) => internal(e),
        Err(e) => internal(e),
    }
}

#[derive(Debug, Deserialize)]
struct AtParams {
    time: Option<String>,
}

async fn at(State(s): State<AppState>, Query(params): Query<AtParams>) -> Response {
    let Some(time) = params.time else {
        return bad_request("give ?time= as RFC 3339 or an age such as 10m".into());
    };
    let until = match Micros::parse_instant(&time, Micros::now()) {
        Ok(t) => t,
        Err(e) => return bad_request(e),
    };
    let store = s.store.clone();
    let query = HistoryQuery {
        until: Some(until),
        ..HistoryQuery::default()
    };
    match tokio::task::spawn_blocking(move || store.history(&query)).await {
        Ok(Ok(events)) => {
            let version = events.last().map_or(0, |e| e.seq);
            let nodes = crate::history::replay(&events);
            Json(crate::kube::node_list(
                nodes.values().map(|n| crate::kube::node(n, None)),
                version,
            ))
            .into_response()
        }
        Ok(Err(e)) => internal(e),
        Err(e) => internal(e),
    }
}

async fn store_status(State(s): State<AppState>) -> Response {
    let store = s.store.clone();
    match tokio::task::spawn_blocking(move || store.status()).await {
        Ok(Ok(status)) => Json(status).into_response(),
        Ok(Err(e)) => internal(e),
        Err(e) => internal(e),
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    s.metrics.store_size.set(s.store.size_on_disk() as i64);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}
