//! nodekeeper's own endpoints: registry records, history, the registry at a
//! past time, store status and metrics.

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::{bad_request, internal, AppState};
use crate::model::Micros;
use crate::store::HistoryQuery;

/// A node as `/v1/nodes` serves it: the registry record and the newest heartbeat.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct NodeEntry {
    pub node: crate::model::Node,
    pub heartbeat: Option<Micros>,
}

pub(crate) async fn list_node_records(State(s): State<AppState>) -> Response {
    let entries: Vec<NodeEntry> = s
        .view
        .list()
        .into_iter()
        .map(|(node, heartbeat)| NodeEntry { node, heartbeat })
        .collect();
    Json(entries).into_response()
}

pub(crate) async fn get_node_record(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Response {
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

pub(crate) async fn history(
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
pub(crate) struct AtParams {
    time: Option<String>,
}

pub(crate) async fn at(State(s): State<AppState>, Query(params): Query<AtParams>) -> Response {
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

pub(crate) async fn store_status(State(s): State<AppState>) -> Response {
    let store = s.store.clone();
    match tokio::task::spawn_blocking(move || store.status()).await {
        Ok(Ok(status)) => Json(status).into_response(),
        Ok(Err(e)) => internal(e),
        Err(e) => internal(e),
    }
}

pub(crate) async fn metrics(State(s): State<AppState>) -> Response {
    s.metrics.store_size.set(s.store.size_on_disk() as i64);
    if s.mirror.is_some() {
        let oldest = s
            .store
            .outbox()
            .ok()
            .and_then(|entries| entries.iter().map(|(_, e)| e.enqueued).min());
        let age = oldest.map_or(0.0, |t| crate::model::Micros::now().since(t).as_secs_f64());
        s.metrics.mirror_oldest_age.set(age);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}

/// `GET /v1/sources`: how the cloud or inventory source is doing.
/// `GET /v1/mirror`: the mirror's backlog, last error and leadership.
pub(crate) async fn mirror(State(s): State<AppState>) -> Response {
    let Some(mirror) = &s.mirror else {
        return super::status_error(
            StatusCode::NOT_FOUND,
            "NotFound",
            "no API server is configured (--kubeconfig or --master): nothing is mirrored".into(),
        );
    };
    let store = s.store.clone();
    let mirror = mirror.clone();
    match tokio::task::spawn_blocking(move || mirror.status(&store)).await {
        Ok(Ok(status)) => Json(status).into_response(),
        Ok(Err(e)) => super::status_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            e.to_string(),
        ),
        Err(e) => super::status_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            e.to_string(),
        ),
    }
}

pub(crate) async fn sources(State(s): State<AppState>) -> Response {
    match s.view.source_status() {
        Some(status) => Json(status).into_response(),
        None => super::status_error(
            StatusCode::NOT_FOUND,
            "NotFound",
            "no cloud or inventory source is configured".into(),
        ),
    }
}
