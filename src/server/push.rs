//! Writes from kubelets: node status (`PUT`/`PATCH nodes/{name}/status`),
//! self-registration (`POST nodes`) and node Leases. Each is checked here
//! and decided by the controller; errors are the Statuses kubectl shows.

// Checks return a ready response as their error, built once per refused
// request: its size does not matter.
#![allow(clippy::result_large_err)]

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::api::core::v1::Node as KubeNode;
use serde::de::DeserializeOwned;

use super::patch::{self, PatchKind};
use super::{status_error, AppState};
use crate::controller::{PushError, PushedStatus};
use crate::kube_input;
use crate::model::NODE_LEASE_NAMESPACE;

/// A refused write, as a Kubernetes `Status`.
pub(crate) fn push_error(e: PushError) -> Response {
    match e {
        PushError::NotFound { kind, name } => status_error(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{kind} {name:?} not found"),
        ),
        PushError::AlreadyExists { kind, name } => status_error(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{kind} {name:?} already exists"),
        ),
        PushError::Conflict { kind, name } => status_error(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {kind} {name:?}: the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        ),
        PushError::Forbidden(message) => status_error(StatusCode::FORBIDDEN, "Forbidden", message),
        PushError::Invalid(message) => {
            status_error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message)
        }
        PushError::Rejected(invalid) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(crate::kube::invalid(&invalid)),
        )
            .into_response(),
        PushError::PreconditionFailed(message) | PushError::StillListed(message) => {
            status_error(StatusCode::CONFLICT, "Conflict", message)
        }
        PushError::Store(e) => status_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            e.to_string(),
        ),
        // Not made durable, so not made: the writer may try again later.
        PushError::Unavailable(message) => status_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            format!("the change was not made: {message}"),
        ),
        PushError::Stopped => status_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the controller is stopping".into(),
        ),
    }
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Parses a JSON body of a `PUT` or `POST`.
pub(crate) fn json_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, Response> {
    let ct = content_type(headers);
    let media = ct.split(';').next().unwrap_or("").trim();
    if !(media == "application/json" || media.is_empty()) {
        return Err(status_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json (got {ct:?})"),
        ));
    }
    serde_json::from_slice(body).map_err(|e| malformed(&e))
}

fn malformed(e: &serde_json::Error) -> Response {
    status_error(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        format!("the request body is not valid JSON for this object: {e}"),
    )
}

/// Applies a `PATCH` body to `current` (a Kubernetes object as JSON).
fn patched<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &Bytes,
    mut current: serde_json::Value,
) -> Result<T, Response> {
    let ct = content_type(headers);
    let Some(kind) = PatchKind::from_content_type(ct) else {
        return Err(status_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/merge-patch+json, application/strategic-merge-patch+json (got {ct:?})"
            ),
        ));
    };
    let patch: serde_json::Value = serde_json::from_slice(body).map_err(|e| malformed(&e))?;
    patch::apply(kind, &mut current, &patch)
        .map_err(|e| status_error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", e))?;
    serde_json::from_value(current).map_err(|e| malformed(&e))
}

fn invalid(kind: &str, name: &str, reason: String) -> Response {
    status_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!("{kind} {name:?} is invalid: {reason}"),
    )
}

/// Refused fields, each named, as kube-apiserver's 422.
fn invalid_fields(
    kind: &'static str,
    name: &str,
    causes: Vec<crate::validation::FieldError>,
) -> Response {
    let e = crate::validation::Invalid {
        kind,
        name: name.to_string(),
        causes,
    };
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        Json(crate::kube::invalid(&e)),
    )
        .into_response()
}

/// The current node as a status patch applies to it: as the API shows it,
/// but with `nodeInfo` as stored (not the display defaults), so a patch
/// that does not set a field does not store what was only shown.
///
/// Only what `patch` names is rendered (the top-level parts it names, and
/// within `status` the fields it names, or all of them for a directive):
/// the merge leaves the rest as it was, and only the status fields the
/// patch names are pushed, so rendering them for every heartbeat was waste.
fn current_node(
    s: &AppState,
    name: &str,
    patch: &serde_json::Value,
) -> Result<serde_json::Value, Response> {
    let Some((node, beat)) = s.view.get(name) else {
        return Err((
            StatusCode::NOT_FOUND,
            Json(crate::kube::not_found("nodes", name)),
        )
            .into_response());
    };
    let mut kube = crate::kube::node(&node, beat);
    // A patch that is not an object, or has a directive at the top, gets it all.
    let whole = patch
        .as_object()
        .is_none_or(|p| p.keys().any(|k| k.starts_with('$')));
    let names = |key: &str| whole || patch.get(key).is_some();
    if !names("metadata") {
        // The name stays: the push checks it against the URL's.
        kube.metadata = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: kube.metadata.name.take(),
            ..Default::default()
        };
    }
    if !names("spec") {
        kube.spec = None;
    }
    let status_named = |key: &str| match patch.get("status") {
        _ if whole => true,
        Some(serde_json::Value::Object(status)) => {
            status.contains_key(key) || status.keys().any(|k| k.starts_with('$'))
        }
        // Not an object: the merge decides what that means; render it all.
        Some(_) => true,
        None => false,
    };
    if let Some(status) = &mut kube.status {
        if !status_named("addresses") {
            status.addresses = None;
        }
        if !status_named("capacity") {
            status.capacity = None;
        }
        if !status_named("allocatable") {
            status.allocatable = None;
        }
        if !status_named("conditions") {
            status.conditions = None;
        }
        if !status_named("daemonEndpoints") {
            status.daemon_endpoints = None;
        }
        if !status_named("nodeInfo") {
            status.node_info = None;
        }
    }
    if !names("status") {
        kube.status = None;
    }
    let mut current = serde_json::to_value(kube).map_err(super::internal)?;
    if status_named("nodeInfo") {
        current["status"]["nodeInfo"] =
            serde_json::to_value(&node.node_info).map_err(super::internal)?;
    }
    Ok(current)
}

/// What a status patch itself sets: only that is pushed. The rest of the
/// merged object is what readers were shown (times cut to seconds, probe
/// heartbeats overlaid), and must not pass for a heartbeat or a report.
#[derive(Debug, Default)]
struct PatchedFields {
    /// The condition types the patch names.
    conditions: Vec<String>,
    addresses: bool,
    node_info: bool,
    capacity: bool,
}

impl PatchedFields {
    fn of(patch: &serde_json::Value) -> PatchedFields {
        let status = &patch["status"];
        PatchedFields {
            conditions: status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("type")?.as_str().map(str::to_string))
                .collect(),
            addresses: !status["addresses"].is_null(),
            node_info: !status["nodeInfo"].is_null(),
            capacity: !status["capacity"].is_null(),
        }
    }

    fn keep_only(&self, status: &mut PushedStatus) {
        status
            .conditions
            .retain(|c| self.conditions.contains(&c.kind));
        if !self.addresses {
            status.addresses = None;
        }
        if !self.node_info {
            status.node_info = None;
        }
        if !self.capacity {
            status.capacity = None;
        }
    }
}

/// Pushes a node's status; `only` limits it to what a patch set.
async fn write_status(
    s: &AppState,
    name: String,
    node: KubeNode,
    only: Option<PatchedFields>,
) -> Response {
    if node.metadata.name.as_deref().is_some_and(|n| n != name) {
        return status_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                node.metadata.name.unwrap_or_default()
            ),
        );
    }
    if only.is_none() {
        if let Err(e) = kube_input::check_condition_types(&node) {
            return invalid_fields("Node", &name, vec![e]);
        }
    }
    let status = match kube_input::pushed_status(&node) {
        Ok(mut status) => {
            if let Some(only) = &only {
                only.keep_only(&mut status);
            }
            status
        }
        Err(causes) => return invalid_fields("Node", &name, causes),
    };
    let expected = match kube_input::expected_version(&node.metadata) {
        Ok(v) => v,
        Err(e) => return invalid("Node", &name, e),
    };
    match s.controller.status(name, status, expected).await {
        Ok(node) => Json(crate::kube::node(&node, None)).into_response(),
        Err(e) => push_error(e),
    }
}

/// `PUT /api/v1/nodes/{name}/status`: the whole status, replaced.
pub(crate) async fn put_status(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: super::Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = super::check_may_write_node(&caller, &name) {
        return r;
    }
    match json_body::<KubeNode>(&headers, &body) {
        Ok(node) => write_status(&s, name, node, None).await,
        Err(r) => r,
    }
}

/// `PATCH /api/v1/nodes/{name}/status`: merge or strategic-merge patch.
pub(crate) async fn patch_status(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: super::Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = super::check_may_write_node(&caller, &name) {
        return r;
    }
    // Bounded before merging: a merge by type costs the product of the two lists.
    let patch: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let current = match current_node(&s, &name, &patch) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let only = PatchedFields::of(&patch);
    if let Err(e) =
        crate::validation::extra_conditions([], only.conditions.iter().map(String::as_str))
    {
        return invalid_fields("Node", &name, vec![e]);
    }
    match patched::<KubeNode>(&headers, &body, current) {
        // The patch applies to the current object; its version is not a precondition.
        Ok(mut node) => {
            node.metadata.resource_version = None;
            write_status(&s, name, node, Some(only)).await
        }
        Err(r) => r,
    }
}

/// `POST /api/v1/nodes`: a kubelet registering its node.
pub(crate) async fn create_node(
    State(s): State<AppState>,
    caller: super::Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let node = match json_body::<KubeNode>(&headers, &body) {
        Ok(node) => node,
        Err(r) => return r,
    };
    let name = node.metadata.name.clone().unwrap_or_default();
    if let Err(r) = super::check_may_write_node(&caller, &name) {
        return r;
    }
    let (spec, status) = match kube_input::node_registration(&node) {
        Ok(parts) => parts,
        Err(causes) => return invalid_fields("Node", &name, causes),
    };
    match s.controller.register(spec, status).await {
        Ok(node) => (StatusCode::CREATED, Json(crate::kube::node(&node, None))).into_response(),
        Err(e) => push_error(e),
    }
}

fn check_namespace(namespace: &str) -> Result<(), Response> {
    if namespace == NODE_LEASE_NAMESPACE {
        return Ok(());
    }
    Err(status_error(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("nodekeeper keeps node Leases only, in namespace {NODE_LEASE_NAMESPACE:?} (not {namespace:?})"),
    ))
}

fn lease_not_found(name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(crate::kube::not_found("leases.coordination.k8s.io", name)),
    )
        .into_response()
}

/// `GET .../namespaces/kube-node-lease/leases/{name}`.
pub(crate) async fn get_lease(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    if let Err(r) = check_namespace(&namespace) {
        return r;
    }
    match s.view.lease(&name) {
        Some(lease) => Json(kube_input::kube_lease(&lease)).into_response(),
        None => lease_not_found(&name),
    }
}

/// `GET /apis/coordination.k8s.io/v1/leases`: every namespace, which is one here.
pub(crate) async fn list_all_leases(State(s): State<AppState>) -> Response {
    lease_list(&s)
}

/// `GET .../namespaces/kube-node-lease/leases`.
pub(crate) async fn list_leases(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
) -> Response {
    if let Err(r) = check_namespace(&namespace) {
        return r;
    }
    lease_list(&s)
}

fn lease_list(s: &AppState) -> Response {
    let items: Vec<KubeLease> = s.view.leases().iter().map(kube_input::kube_lease).collect();
    let list = k8s_openapi::List::<KubeLease> {
        items,
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta {
            resource_version: Some(s.store.durable_seq().to_string()),
            ..Default::default()
        },
    };
    Json(list).into_response()
}

/// `POST .../namespaces/kube-node-lease/leases`: a kubelet's first renewal.
pub(crate) async fn create_lease(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
    caller: super::Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = check_namespace(&namespace) {
        return r;
    }
    let kube = match json_body::<KubeLease>(&headers, &body) {
        Ok(l) => l,
        Err(r) => return r,
    };
    let name = kube.metadata.name.clone().unwrap_or_default();
    if let Err(r) = super::check_may_write_node(&caller, &name) {
        return r;
    }
    let lease = match kube_input::lease(&kube, &name) {
        Ok(l) => l,
        Err(e) => return invalid("Lease", &name, e),
    };
    match s.controller.create_lease(lease).await {
        Ok(lease) => (StatusCode::CREATED, Json(kube_input::kube_lease(&lease))).into_response(),
        Err(e) => push_error(e),
    }
}

/// `PUT .../leases/{name}`: a renewal.
pub(crate) async fn put_lease(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    caller: super::Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) =
        check_namespace(&namespace).and_then(|()| super::check_may_write_node(&caller, &name))
    {
        return r;
    }
    match json_body::<KubeLease>(&headers, &body) {
        Ok(kube) => update_lease(&s, &name, kube, true).await,
        Err(r) => r,
    }
}

/// `PATCH .../leases/{name}`.
pub(crate) async fn patch_lease(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    caller: super::Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) =
        check_namespace(&namespace).and_then(|()| super::check_may_write_node(&caller, &name))
    {
        return r;
    }
    let Some(current) = s.view.lease(&name) else {
        return lease_not_found(&name);
    };
    let current = match serde_json::to_value(kube_input::kube_lease(&current)) {
        Ok(v) => v,
        Err(e) => return super::internal(e),
    };
    match patched::<KubeLease>(&headers, &body, current) {
        Ok(kube) => update_lease(&s, &name, kube, false).await,
        Err(r) => r,
    }
}

async fn update_lease(
    s: &AppState,
    name: &str,
    kube: KubeLease,
    version_is_precondition: bool,
) -> Response {
    let lease = match kube_input::lease(&kube, name) {
        Ok(l) => l,
        Err(e) => return invalid("Lease", name, e),
    };
    let expected = if version_is_precondition {
        match kube_input::expected_version(&kube.metadata) {
            Ok(v) => v,
            Err(e) => return invalid("Lease", name, e),
        }
    } else {
        None
    };
    match s.controller.update_lease(lease, expected).await {
        Ok(lease) => Json(kube_input::kube_lease(&lease)).into_response(),
        Err(e) => push_error(e),
    }
}
