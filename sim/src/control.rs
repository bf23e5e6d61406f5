//! The fleet's control HTTP endpoint: read and set each simulated kubelet's state as JSON.
//!
//! - `GET /nodes`, `GET /nodes/{name}`: [`NodeStatus`] objects.
//! - `PUT /nodes/{name}` with `{"state":"down"}`: set one node, answer its new status.
//! - `PUT /nodes` with `{"state":"down"}`: set every node (a whole-site partition).
//! - `GET /stats`: [`FleetStats`](super::FleetStats): nodes by state, and what the fleet pushed.
//! - `POST /reconnect`: every pushing node drops its connection to the
//!   controller at once and reconnects (a reconnect storm); answers
//!   `{"nodes": N}`, the nodes that owe a heartbeat on a new connection,
//!   timed in `GET /stats` as `pushes.lastReconnect`. 409 if the fleet does not push.
//! - `GET /healthz`: `ok`.
//!
//! Errors are `{"error": "..."}` with 400 (bad body or state), 404 (unknown
//! node) or 409 (a reconnect asked of a fleet that does not push).

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{FleetHandle, KubeletState, VALID_STATES};

/// Bodies are one small JSON object; anything bigger is a mistake.
const MAX_BODY: usize = 64 * 1024;

pub(super) fn router(handle: FleetHandle) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/nodes", get(list).put(set_all))
        .route("/nodes/{name}", get(get_one).put(set_one))
        .route("/stats", get(stats))
        .route("/reconnect", post(reconnect))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(handle)
}

#[derive(Serialize)]
struct ErrorBody {
    error: String,
}

fn error(status: StatusCode, error: String) -> Response {
    (status, Json(ErrorBody { error })).into_response()
}

fn unknown(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no simulated node named {name:?}"),
    )
}

#[derive(Deserialize)]
struct SetState {
    // A String rather than KubeletState, so a bad value gets our message.
    state: String,
}

/// The state named by a `{"state": "..."}` body, or the 400 message.
fn parse_state(body: &[u8]) -> Result<KubeletState, String> {
    let req: SetState = serde_json::from_slice(body).map_err(|e| {
        format!("body must be JSON like {{\"state\":\"down\"}} ({e}); valid states: {VALID_STATES}")
    })?;
    req.state
        .parse()
        .map_err(|e: super::ParseStateError| e.to_string())
}

async fn list(State(h): State<FleetHandle>) -> Response {
    Json(h.statuses()).into_response()
}

async fn stats(State(h): State<FleetHandle>) -> Response {
    Json(h.stats()).into_response()
}

#[derive(Serialize)]
struct Reconnecting {
    nodes: u64,
}

async fn reconnect(State(h): State<FleetHandle>) -> Response {
    match h.reconnect() {
        Some(nodes) => {
            tracing::info!(nodes, "simulated fleet: every node reconnects");
            Json(Reconnecting { nodes }).into_response()
        }
        None => error(
            StatusCode::CONFLICT,
            "the fleet does not push, so it holds no connection to drop; start it with --push"
                .into(),
        ),
    }
}

async fn get_one(State(h): State<FleetHandle>, Path(name): Path<String>) -> Response {
    match h.status(&name) {
        Some(s) => Json(s).into_response(),
        None => unknown(&name),
    }
}

async fn set_one(State(h): State<FleetHandle>, Path(name): Path<String>, body: Bytes) -> Response {
    // An unknown node is reported before a bad body: the URL is read first.
    if h.state(&name).is_none() {
        return unknown(&name);
    }
    let state = match parse_state(&body) {
        Ok(s) => s,
        Err(msg) => return error(StatusCode::BAD_REQUEST, msg),
    };
    if h.set(&name, state).is_err() {
        return unknown(&name);
    }
    tracing::info!(node = %name, %state, "simulated node set");
    match h.status(&name) {
        Some(s) => Json(s).into_response(),
        None => unknown(&name),
    }
}

async fn set_all(State(h): State<FleetHandle>, body: Bytes) -> Response {
    let state = match parse_state(&body) {
        Ok(s) => s,
        Err(msg) => return error(StatusCode::BAD_REQUEST, msg),
    };
    h.set_all(state);
    tracing::info!(%state, nodes = h.len(), "simulated fleet: every node set");
    Json(h.statuses()).into_response()
}
