//! `/api/v1/pods`: nodekeeper runs no pods, so every list is empty and every pod is missing.
//!
//! `kubectl describe node` lists the node's non-terminated pods; an empty
//! list (not a 404) lets it print the node.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use k8s_openapi::List;

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
/// `PodList`, once the query is valid.
pub(crate) async fn list_pods(
    State(s): State<AppState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    let params = match ListParams::from_query(params) {
        Ok(p) => p,
        Err(e) => return bad_request(e.to_string()),
    };
    match params.is_watch() {
        Ok(false) => {}
        Ok(true) => return super::watch_not_served("pods"),
        Err(e) => return bad_request(e.to_string()),
    }
    if let Err(e) = params.query(POD_FIELDS) {
        return bad_request(e.to_string());
    }
    Json(List::<Pod> {
        items: Vec::new(),
        metadata: ListMeta {
            resource_version: Some(s.store.durable_seq().to_string()),
            ..ListMeta::default()
        },
    })
    .into_response()
}

/// `GET /api/v1/namespaces/{namespace}/pods/{name}`: never found.
pub(crate) async fn get_pod(Path((_namespace, name)): Path<(String, String)>) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(crate::kube::not_found("pods", &name)),
    )
        .into_response()
}
