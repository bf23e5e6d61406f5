//! `/api/v1/nodes`: nodes as the Kubernetes API serves them.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::AppState;

pub(crate) async fn list_nodes(State(s): State<AppState>) -> Response {
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
