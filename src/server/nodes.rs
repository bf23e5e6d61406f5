//! `/api/v1/nodes`: nodes as the Kubernetes API serves them.

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::AppState;

/// Query parameters of a node list or watch.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListParams {
    pub watch: Option<String>,
    pub resource_version: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub allow_watch_bookmarks: Option<bool>,
}

impl ListParams {
    fn is_watch(&self) -> bool {
        matches!(self.watch.as_deref(), Some("true" | "1"))
    }
}

pub(crate) async fn list_nodes(
    State(s): State<AppState>,
    Query(params): Query<ListParams>,
) -> Response {
    if params.is_watch() {
        let watch = super::watch::WatchParams {
            resource_version: params.resource_version.clone(),
            timeout: params.timeout_seconds.map(Duration::from_secs),
            bookmarks: params.allow_watch_bookmarks.unwrap_or(false),
            ..Default::default()
        };
        return super::watch::watch_nodes(s, watch).await;
    }
    let items = s
        .view
        .list()
        .into_iter()
        .map(|(n, beat)| crate::kube::node(&n, beat));
    Json(crate::kube::node_list(items, s.store.durable_seq())).into_response()
}

pub(crate) async fn get_node(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    match s.view.get(&name) {
        Some((node, beat)) => Json(crate::kube::node(&node, beat)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(crate::kube::not_found("nodes", &name)),
        )
            .into_response(),
    }
}
