//! `/api/v1/pods`: nodekeeper runs no pods, so every list is empty and every pod is missing.
//!
//! `kubectl describe node` lists the node's non-terminated pods; an empty
//! list (not a 404) lets it print the node.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::params::ListParams;
use super::{bad_request, AppState};

/// The fields pods can be selected by, as in kube-apiserver.
pub const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];

/// `GET /api/v1/pods` and `/api/v1/namespaces/{namespace}/pods`: an empty
/// `PodList` once the query is valid, or a watch with nothing to stream
/// (see [`super::empty`]).
pub(crate) async fn list_pods(
    State(s): State<AppState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    match ListParams::from_query(params) {
        Ok(p) => super::empty::PODS.list(s, p).await,
        Err(e) => bad_request(e.to_string()),
    }
}

/// `GET /api/v1/namespaces/{namespace}/pods/{name}`: never found.
pub(crate) async fn get_pod(Path((_namespace, name)): Path<(String, String)>) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(crate::kube::not_found("pods", &name)),
    )
        .into_response()
}
