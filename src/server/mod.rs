//! The HTTP API: Kubernetes-shaped nodes (with the discovery, Tables,
//! selectors, pages and events `kubectl` uses), history, the registry at a
//! past time, store status, health and metrics. Reads only what is durable.

mod auth;
pub mod console;
mod discovery;
mod events;
pub(crate) mod json_patch;
pub(crate) mod node_writes;
mod nodes;
mod paging;
mod params;
pub(crate) mod patch;
pub(crate) mod pods;
mod push;
pub(crate) mod selectors;
mod serve;
mod table;
mod v1;
mod watch;

use std::sync::Arc;

pub use auth::{authenticate, check_may_write_node, Caller, Identity, Tokens};
pub use serve::{check_listen, serve, serve_with, tls_config, ServeConfig};
pub use v1::{HistoryParams, NodeEntry};

use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
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
    /// The mirror, when an API server is configured.
    pub mirror: Option<Arc<crate::mirror::MirrorState>>,
}

/// The router without `--token-file`: every caller is [`Caller::Anonymous`].
pub fn router(state: AppState) -> Router {
    secured_router(state, None)
}

/// The router for [`serve`]; with `tokens`, writes need a bearer token
/// (see [`authenticate`]).
pub fn secured_router(state: AppState, tokens: Option<Arc<Tokens>>) -> Router {
    let routes = Router::new()
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
        .route(
            "/api/v1/nodes/{name}",
            get(nodes::get_node)
                .patch(nodes::patch_node)
                .put(nodes::put_node)
                .delete(nodes::delete_node),
        )
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
        .route("/v1/sources", get(v1::sources))
        .route("/v1/mirror", get(v1::mirror))
        .route("/v1/readiness", get(console::readiness))
        .route("/v1/console", get(console::about))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(v1::metrics))
        .fallback(not_found_path);
    // The console's pages stay outside the auth layer: they carry no data.
    harden(routes, tokens)
        .merge(console::pages())
        .with_state(state)
}

/// The layers over every route: the body cap (answered with a `Status`),
/// and outermost the bearer-token check, so an unauthorized write is
/// refused before anything else.
pub fn harden<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    tokens: Option<Arc<Tokens>>,
) -> Router<S> {
    routes
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::map_response(too_large_as_status))
        .layer(middleware::from_fn_with_state(tokens, authenticate))
}

/// axum's body-limit rejection is plain text; clients expect a `Status`.
async fn too_large_as_status(response: Response) -> Response {
    let is_status = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if response.status() != StatusCode::PAYLOAD_TOO_LARGE || is_status {
        return response;
    }
    status_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {BODY_LIMIT}"),
    )
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

/// `?watch=true` on resources nodekeeper lists but does not stream.
pub(crate) fn watch_not_served(resource: &str) -> Response {
    status_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!("watching {resource} is not supported by nodekeeper; nodes can be watched, and /v1/history has every event"),
    )
}
