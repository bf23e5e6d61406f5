//! `coordination.k8s.io/v1` leases: not kept yet; a get is a 404 and a list is empty.
//!
//! `kubectl describe node` asks for the node's lease in `kube-node-lease`
//! and prints the node without it. Lease heartbeats replace this module.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use k8s_openapi::List;

use super::AppState;

/// `GET /apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}`.
pub(crate) async fn get_lease(Path((_namespace, name)): Path<(String, String)>) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(crate::kube::status_error(
            404,
            "NotFound",
            &format!("leases.coordination.k8s.io {name:?} not found"),
            Some(&name),
            Some("leases"),
        )),
    )
        .into_response()
}

/// `GET /apis/coordination.k8s.io/v1/namespaces/{namespace}/leases` (and all namespaces): empty.
pub(crate) async fn list_leases(State(s): State<AppState>) -> Response {
    Json(List::<Lease> {
        items: Vec::new(),
        metadata: ListMeta {
            resource_version: Some(s.store.durable_seq().to_string()),
            ..ListMeta::default()
        },
    })
    .into_response()
}
