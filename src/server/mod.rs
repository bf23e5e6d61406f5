//! The HTTP API: Kubernetes-shaped nodes (with the discovery, Tables,
//! selectors, pages and events `kubectl` uses), history, the registry at a
//! past time, store status, health and metrics. Reads only what is durable.

// Checks return a ready response as their error (`Answer`), built once
// per refused request: its size does not matter.
#![allow(clippy::result_large_err)]

mod api_objects;
mod auth;
pub mod authz;
mod backup;
pub mod bootstrap_tokens;
mod connections;
pub mod console;
mod csinodes;
pub mod csr_signing;
mod csrs;
mod discovery;
mod empty;
mod events;
mod guard;
pub mod handoff;
mod health;
pub mod identity;
mod leases;
pub mod limits;
pub mod node_json;
mod node_objects;
pub(crate) mod node_writes;
mod nodes;
mod openapi;
mod pace;
mod params;
mod pod_watch;
pub mod pods;
mod posted_events;
mod push;
pub mod reload;
mod reviews;
mod serve;
mod v1;
mod watch;
pub mod x509;

use std::sync::Arc;

pub use auth::{authenticate, Authn, Tokens};
pub use authz::check_may_write_node;
pub(crate) use connections::listen;
pub use identity::{principal, Caller, Identity, Principal, User};
pub use limits::{ApiLimits, Budgets};
pub use serve::{
    check_listen, is_connection_error, serve, serve_with, serving_tls, tls_config, Http2Config,
    InsecureListen, ServeConfig,
};
pub use v1::{HistoryParams, NodeEntry};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use tokio_util::sync::CancellationToken;

use crate::k8s::{json_patch, paging, patch, selectors, table};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::view::View;

/// The largest request body, 1 MiB; anything larger is refused (413).
/// kube-apiserver takes 3 MiB, twice etcd's 1.5 MiB, because what it stores
/// is protobuf converted from JSON that can take twice as much. A node here
/// is bounded as JSON ([`crate::validation::MAX_NODE_BYTES`]) to fit in
/// this, so any node can be sent back whole; more would only let the
/// writes in flight hold three times the memory.
pub const BODY_LIMIT: usize = 1 << 20;

/// What the handlers read: one [`SharedState`] behind one reference, so
/// the `State` extractor's copy for each request is one reference count.
#[derive(Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    pub fn new(shared: SharedState) -> AppState {
        AppState(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

/// The parts of an [`AppState`].
pub struct SharedState {
    pub view: Arc<View>,
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub controller: crate::controller::ControllerHandle,
    /// Cancelled when the server stops: long watches end with it.
    pub shutdown: CancellationToken,
    /// The mirror, when an API server is configured.
    pub mirror: Option<Arc<crate::mirror::MirrorState>>,
    /// The checks behind `/livez` and `/readyz`.
    pub health: Arc<crate::readiness::Health>,
    /// Each node's list JSON, reused while the node is unchanged.
    pub node_json: Arc<node_json::NodeJson>,
}

/// The router without `--token-file`: every caller is [`Caller::Anonymous`].
pub fn router(state: AppState) -> Router {
    secured_router(state, None)
}

/// The router for [`serve`] with the default [`ApiLimits`]; with `tokens`,
/// every request but the health checks needs a bearer token (see
/// [`authenticate`]).
pub fn secured_router(state: AppState, tokens: impl Into<Authn>) -> Router {
    let budgets = Budgets::new(ApiLimits::default(), Some(state.metrics.clone()));
    limited_router(state, tokens, budgets)
}

/// [`secured_router`] with the given request budgets.
pub fn limited_router(state: AppState, tokens: impl Into<Authn>, budgets: Arc<Budgets>) -> Router {
    route_table(state, tokens.into(), budgets)
}

/// [`limited_router`]'s body, not generic, so that it is compiled once: a
/// generic function is compiled for each type and crate it is used with, and
/// this one brings every handler's code and the decoders of the objects they
/// read (docs/decisions/binary-size.md).
/// Over 80 lines: it is the route table, one line per endpoint, read whole.
fn route_table(state: AppState, authn: Authn, budgets: Arc<Budgets>) -> Router {
    let routes = discovery::routes()
        .route("/openapi/v2", get(openapi::v2))
        .route("/openapi/v3", get(openapi::v3_index))
        .route("/openapi/v3/{*path}", get(openapi::v3))
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
            get(events::list_events).post(posted_events::post_core_event),
        )
        .route(
            "/api/v1/namespaces/{namespace}/events/{name}",
            get(events::get_event).patch(posted_events::patch_event),
        )
        .route(
            "/apis/events.k8s.io/v1/namespaces/{namespace}/events",
            axum::routing::post(posted_events::post_events_event),
        )
        .route(
            "/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}",
            axum::routing::patch(posted_events::patch_event),
        )
        .route("/api/v1/pods", get(pods::list_pods))
        .route(
            "/api/v1/namespaces/{namespace}/pods",
            get(pods::list_pods).post(pods::create_pod),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/status",
            get(pods::get_pod).patch(pods::patch_pod_status),
        )
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}",
            get(pods::get_pod).delete(pods::delete_pod),
        )
        .route(
            "/apis/coordination.k8s.io/v1/leases",
            get(leases::list_all_leases),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            get(leases::list_leases).post(leases::create_lease),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}",
            get(leases::get_lease)
                .put(leases::put_lease)
                .patch(leases::patch_lease),
        )
        .route(
            "/apis/storage.k8s.io/v1/csinodes",
            get(csinodes::list_csinodes).post(csinodes::create_csinode),
        )
        .route(
            "/apis/storage.k8s.io/v1/csinodes/{name}",
            get(csinodes::get_csinode)
                .put(csinodes::put_csinode)
                .patch(csinodes::patch_csinode)
                .delete(csinodes::delete_csinode),
        )
        .route(
            "/api/v1/namespaces/{namespace}/secrets",
            get(bootstrap_tokens::list_secrets).post(bootstrap_tokens::create_secret),
        )
        .route(
            "/api/v1/namespaces/{namespace}/secrets/{name}",
            get(bootstrap_tokens::get_secret).delete(bootstrap_tokens::delete_secret),
        )
        .route(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            get(csrs::list_csrs).post(csrs::create_csr),
        )
        .route(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}",
            get(csrs::get_csr)
                .patch(csrs::patch_csr)
                .delete(csrs::delete_csr),
        )
        .route(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/approval",
            get(csrs::get_csr).put(csrs::put_approval),
        )
        .route(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/status",
            get(csrs::get_csr).put(csrs::put_status),
        )
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(reviews::create_token_review).layer(Extension(authn.clone())),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(reviews::create_subject_access_review).layer(Extension(authn.clone())),
        )
        .route("/v1/nodes", get(v1::list_node_records))
        .route("/v1/nodes/{name}", get(v1::get_node_record))
        .route("/v1/history", get(v1::history))
        .route("/v1/at", get(v1::at))
        .route("/v1/store", get(v1::store_status))
        .route("/v1/backup", get(backup::backup))
        .route("/v1/sources", get(v1::sources))
        .route("/v1/mirror", get(v1::mirror))
        .route("/v1/readiness", get(console::readiness))
        .route("/v1/console", get(console::about))
        .route("/healthz", get(health::healthz))
        .route("/livez", get(health::livez))
        .route("/livez/{check}", get(health::livez_check))
        .route("/readyz", get(health::readyz))
        .route("/readyz/{check}", get(health::readyz_check))
        .route("/metrics", get(v1::metrics))
        .merge(empty::SERVICES.routes(
            &[
                "/api/v1/services",
                "/api/v1/namespaces/{namespace}/services",
            ],
            "/api/v1/namespaces/{namespace}/services/{name}",
        ))
        .merge(empty::CSI_DRIVERS.routes(
            &["/apis/storage.k8s.io/v1/csidrivers"],
            "/apis/storage.k8s.io/v1/csidrivers/{name}",
        ))
        .merge(empty::RUNTIME_CLASSES.routes(
            &["/apis/node.k8s.io/v1/runtimeclasses"],
            "/apis/node.k8s.io/v1/runtimeclasses/{name}",
        ))
        .fallback(not_found_path);
    // The console's pages stay outside the auth layer: they carry no data.
    harden_with(routes, authn, budgets)
        .merge(console::pages())
        .with_state(state)
}

/// [`harden_with`] with the default [`ApiLimits`].
pub fn harden<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    tokens: impl Into<Authn>,
) -> Router<S> {
    harden_with(routes, tokens, Budgets::new(ApiLimits::default(), None))
}

/// The guard over every route, one layer in this order: the bearer-token
/// check, so an unauthorized request is refused before anything else; the
/// request budgets and the body deadline; the body cap; and every error
/// answered as a `Status`. A method a path does not serve is a 405 `Status`.
/// (The guard reads every admitted body whole, within [`BODY_LIMIT`], before
/// the handler; health checks read none.)
pub fn harden_with<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    tokens: impl Into<Authn>,
    budgets: Arc<Budgets>,
) -> Router<S> {
    routes
        .method_not_allowed_fallback(method_not_allowed)
        .layer(guard::GuardLayer::new(tokens.into(), budgets))
}

/// Error answers that are not JSON (axum's rejections are plain text, its
/// 405 and 413 have no body) become Kubernetes `Status` objects, keeping
/// their headers (`Allow`, `Retry-After`, …). Health checks answer in
/// plain text, as Kubernetes components do.
async fn errors_as_status(health: bool, response: Response) -> Response {
    if !is_plain_error(health, &response) {
        return response;
    }
    let code = response.status();
    let (mut parts, body) = response.into_parts();
    // axum's rejection texts say what was wrong; keep them (they are short).
    let text = match axum::body::to_bytes(body, 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if !text.is_empty() {
        text
    } else if code == StatusCode::PAYLOAD_TOO_LARGE {
        format!("Request entity too large: limit is {BODY_LIMIT}")
    } else {
        code.canonical_reason().unwrap_or("error").to_string()
    };
    let status = refusal(code, message);
    parts.headers.remove(header::CONTENT_TYPE);
    parts.headers.remove(header::CONTENT_LENGTH);
    let (new_parts, body) = status.into_parts();
    parts.headers.extend(new_parts.headers);
    Response::from_parts(parts, body)
}

/// An error answer [`errors_as_status`] rewrites: not a health check's,
/// and not JSON already.
fn is_plain_error(health: bool, response: &Response) -> bool {
    let code = response.status();
    if health || !(code.is_client_error() || code.is_server_error()) {
        return false;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    !is_json
}

/// The `reason` Kubernetes gives a status code.
fn status_reason(code: StatusCode) -> &'static str {
    match code.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        408 | 504 => "Timeout",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        500..=599 => "InternalError",
        _ => "Unknown",
    }
}

/// Any method a path does not serve, as kube-apiserver answers it.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let path = uri.path();
    refusal(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "the server does not allow this method on the requested resource ({method} {path})"
        ),
    )
}

/// A Kubernetes `Status` error response.
pub(crate) fn status_error(code: StatusCode, reason: &str, message: String) -> Response {
    let body = crate::k8s::status_error(code.as_u16(), reason, &message, None, None);
    (code, Json(body)).into_response()
}

/// A handler's answer: `Err` is a refusal, answered as it is.
pub(crate) type Answer = Result<Response, Response>;

/// A `Status` with the reason Kubernetes gives `code`.
pub(crate) fn refusal(code: StatusCode, message: impl std::fmt::Display) -> Response {
    status_error(code, status_reason(code), message.to_string())
}

pub(crate) fn bad_request(message: impl std::fmt::Display) -> Response {
    refusal(StatusCode::BAD_REQUEST, message)
}

pub(crate) fn forbidden(message: impl std::fmt::Display) -> Response {
    refusal(StatusCode::FORBIDDEN, message)
}

/// The 404 kube-apiserver answers for a missing object.
pub(crate) fn not_found(resource: &str, name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(crate::k8s::not_found(resource, name)),
    )
        .into_response()
}

/// A stored object's JSON as served, with its resourceVersion.
pub(crate) fn with_version(json: &str, version: u64) -> serde_json::Value {
    let mut value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.insert("resourceVersion".into(), version.to_string().into());
    }
    value
}

/// A response whose body is JSON already (or is streamed as JSON).
pub(crate) fn json_response(body: impl Into<axum::body::Body>) -> Response {
    let content_type = [(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    )];
    (content_type, body.into()).into_response()
}

pub(crate) use crate::k8s::at_version;

/// An object's labels, for a label selector.
pub(crate) fn labels_of(value: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    let labels = value["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten();
    labels
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect()
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Response {
    refusal(StatusCode::INTERNAL_SERVER_ERROR, e)
}

async fn not_found_path(uri: axum::http::Uri) -> Response {
    let path = uri.path();
    refusal(
        StatusCode::NOT_FOUND,
        format!("the server could not find the requested resource {path}"),
    )
}

/// `?watch=true` on resources nodekeeper lists but does not stream.
pub(crate) fn watch_not_served(resource: &str) -> Response {
    refusal(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("watching {resource} is not supported by nodekeeper; nodes can be watched, and /v1/history has every event"),
    )
}
