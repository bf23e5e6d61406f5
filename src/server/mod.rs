//! The HTTP API: Kubernetes-shaped nodes (with the discovery, Tables,
//! selectors, pages and events `kubectl` uses), history, the registry at a
//! past time, store status, health and metrics. Reads only what is durable.

mod discovery;
mod events;
mod nodes;
mod paging;
mod params;
mod patch;
mod pods;
mod push;
mod selectors;
mod table;
mod v1;
mod watch;

use std::sync::Arc;

pub use v1::{HistoryParams, NodeEntry};

use axum::extract::DefaultBodyLimit;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::controller::view::View;
use crate::metrics::Metrics;
use crate::store::Store;

/// Request bodies are small here; anything larger is refused.
pub const BODY_LIMIT: usize = 1 << 20;

/// What the handlers read.
#[derive(Clone)]
pub struct AppState {
    pub view: Arc<View>,
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub controller: crate::controller::ControllerHandle,
    /// Cancelled when the server stops: long watches end with it.
    pub shutdown: CancellationToken,
}

/// The router, for tests and for [`serve`].
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/version", get(discovery::version))
        .route("/api", get(discovery::api))
        .route("/api/v1", get(discovery::api_v1))
        .route("/apis", get(discovery::apis))
        .route("/apis/coordination.k8s.io", get(discovery::coordination))
        .route(
            "/apis/coordination.k8s.io/v1",
            get(discovery::coordination_v1),
        )
        .route(
            "/api/v1/nodes",
            get(nodes::list_nodes).post(push::create_node),
        )
        .route("/api/v1/nodes/{name}", get(nodes::get_node))
        .route(
            "/api/v1/nodes/{name}/status",
            get(nodes::get_node)
                .put(push::put_status)
                .patch(push::patch_status),
        )
        .route("/api/v1/events", get(events::list_events))
        .route(
            "/api/v1/namespaces/{namespace}/events",
            get(events::list_namespaced_events),
        )
        .route(
            "/api/v1/namespaces/{namespace}/events/{name}",
            get(events::get_event),
        )
        .route("/api/v1/pods", get(pods::list_pods))
        .route("/api/v1/namespaces/{namespace}/pods", get(pods::list_pods))
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}",
            get(pods::get_pod),
        )
        .route(
            "/apis/coordination.k8s.io/v1/leases",
            get(push::list_all_leases),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            get(push::list_leases).post(push::create_lease),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            get(push::get_lease)
                .put(push::put_lease)
                .patch(push::patch_lease),
        )
        .route("/v1/nodes", get(v1::list_node_records))
        .route("/v1/nodes/{name}", get(v1::get_node_record))
        .route("/v1/history", get(v1::history))
        .route("/v1/at", get(v1::at))
        .route("/v1/store", get(v1::store_status))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(v1::metrics))
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
pub(crate) fn status_error(code: StatusCode, reason: &str, message: String) -> Response {
    let body = crate::kube::status_error(code.as_u16(), reason, &message, None, None);
    (code, Json(body)).into_response()
}

pub(crate) fn bad_request(message: String) -> Response {
    status_error(StatusCode::BAD_REQUEST, "BadRequest", message)
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Response {
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

#[allow(clippy::result_large_err)]
/// Whether the caller may write to node `name`. Without `--token-file`
/// every caller may; the token layer (when configured) narrows this.
pub(crate) fn auth_node(_headers: &HeaderMap, _name: &str) -> Result<(), Response> {
    Ok(())
}

/// `?watch=true` on resources nodekeeper lists but does not stream.
pub(crate) fn watch_not_served(resource: &str) -> Response {
    status_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("watching {resource} is not supported by nodekeeper; nodes can be watched, and /v1/history has every event"),
    )
}
