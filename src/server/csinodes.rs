//! `storage.k8s.io/v1` CSINodes, as a kubelet keeps its own: read, listed,
//! created, replaced, patched and deleted. Each is kept with its node (the
//! same name): stored beside it, in its history, and deleted with it.
//!
//! Every kubelet creates its CSINode at start, drivers or none
//! (kubernetes `pkg/volume/csi/csi_plugin.go:375-414`, `nodeinfomanager.go:433-483`):
//! without one it reports NotReady and exits after about 140 s.

// Checks return a ready response as their error, built once per refused
// request: its size does not matter.
#![allow(clippy::result_large_err)]

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::storage::v1::CSINode;
use serde_json::Value;

use super::params::ListParams;
use super::push::{json_body, patched, push_error, ContentType};
use super::{bad_request, status_error, AppState, Caller};
use crate::controller::ObjectWrite;
use crate::model::{Micros, NodeObject, ObjectKey};

/// The resource, as errors and the history name it.
const RESOURCE: &str = "csinodes.storage.k8s.io";
const API_VERSION: &str = "storage.k8s.io/v1";
/// The largest CSINode kept, as JSON: room for dozens of drivers.
const MAX_BYTES: usize = 64 * 1024;
/// The fields CSINodes can be selected by, as in kube-apiserver.
const FIELDS: &[&str] = &["metadata.name"];

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        node: name.to_string(),
        resource: RESOURCE.to_string(),
        name: name.to_string(),
    }
}

fn not_found(name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(crate::k8s::not_found(RESOURCE, name)),
    )
        .into_response()
}

/// The object as served: the stored JSON with its resourceVersion.
fn served(object: &NodeObject) -> Value {
    let mut value: Value = serde_json::from_str(&object.json).unwrap_or(Value::Null);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(
            "resourceVersion".into(),
            Value::String(object.generation.to_string()),
        );
    }
    value
}

/// `GET /apis/storage.k8s.io/v1/csinodes/{name}`.
pub(crate) async fn get_csinode(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    match s.view.node_object(&key(&name)) {
        Some(object) => Json(served(&object)).into_response(),
        None => not_found(&name),
    }
}

/// `GET /apis/storage.k8s.io/v1/csinodes`: every node's, by name.
pub(crate) async fn list_csinodes(
    State(s): State<AppState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    let params = match ListParams::from_query(params) {
        Ok(p) => p,
        Err(e) => return bad_request(e.to_string()),
    };
    match params.is_watch() {
        Ok(false) => {}
        Ok(true) => return super::watch_not_served("csinodes"),
        Err(e) => return bad_request(e.to_string()),
    }
    let query = match params.query(FIELDS) {
        Ok(q) => q,
        Err(e) => return bad_request(e.to_string()),
    };
    let version = s.store.durable_seq();
    let items: Vec<Value> = s
        .view
        .node_objects(RESOURCE)
        .iter()
        .filter(|o| {
            query
                .fields
                .matches(|f| (f == "metadata.name").then_some(o.name.as_str()))
        })
        .map(served)
        .filter(|v| {
            query.labels.is_empty()
                || query.labels.matches(
                    &v["metadata"]["labels"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                                .collect()
                        })
                        .unwrap_or_default(),
                )
        })
        .collect();
    Json(crate::k8s::list(
        "storage.k8s.io/v1",
        "CSINode",
        version,
        items,
    ))
    .into_response()
}

/// `POST /apis/storage.k8s.io/v1/csinodes`.
pub(crate) async fn create_csinode(
    State(s): State<AppState>,
    caller: Caller,
    ct: ContentType,
    body: Bytes,
) -> Response {
    let csinode = match json_body::<CSINode>(ct.as_str(), &body) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let name = csinode.metadata.name.clone().unwrap_or_default();
    if let Err(r) = super::authz::admit(&caller, super::authz::Kind::CSINode, &name) {
        return r;
    }
    let object = match stored(csinode, &name, None) {
        Ok(o) => o,
        Err(r) => return r,
    };
    write(&s, object, ObjectWrite::Create, StatusCode::CREATED).await
}

/// `PUT /apis/storage.k8s.io/v1/csinodes/{name}`.
pub(crate) async fn put_csinode(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    ct: ContentType,
    Query(query): Query<super::openapi::WriteQuery>,
    body: Bytes,
) -> Response {
    if let Err(r) = super::authz::admit(&caller, super::authz::Kind::CSINode, &name) {
        return r;
    }
    let value = match json_body::<Value>(ct.as_str(), &body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let warnings = match super::openapi::check_fields(&query, API_VERSION, "CSINode", &value) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let csinode: CSINode = match serde_json::from_value(value) {
        Ok(c) => c,
        Err(e) => return super::push::malformed(&e),
    };
    let expected = match crate::k8s::expected_version(&csinode.metadata) {
        Ok(e) => e,
        Err(e) => return super::push::invalid("CSINode", &name, e),
    };
    let answer = replace(&s, csinode, &name, expected).await;
    super::openapi::with_warnings(answer, &warnings)
}

/// `PATCH /apis/storage.k8s.io/v1/csinodes/{name}` (merge, strategic or JSON patch).
pub(crate) async fn patch_csinode(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    ct: ContentType,
    Query(query): Query<super::openapi::WriteQuery>,
    body: Bytes,
) -> Response {
    if let Err(r) = super::authz::admit(&caller, super::authz::Kind::CSINode, &name) {
        return r;
    }
    // A JSON patch names no fields by key: only merge patches are checked.
    let warnings = match serde_json::from_slice::<Value>(&body) {
        Ok(patch) => match super::openapi::check_fields(&query, API_VERSION, "CSINode", &patch) {
            Ok(w) => w,
            Err(r) => return r,
        },
        Err(_) => Vec::new(),
    };
    let Some(current) = s.view.node_object(&key(&name)) else {
        return not_found(&name);
    };
    let generation = current.generation;
    let csinode = match patched::<CSINode>(ct.as_str(), &body, served(&current)) {
        Ok(c) => c,
        Err(r) => return r,
    };
    // The patch applies to this version: a write in between is a conflict.
    let answer = replace(&s, csinode, &name, Some(generation)).await;
    super::openapi::with_warnings(answer, &warnings)
}

async fn replace(s: &AppState, csinode: CSINode, name: &str, expected: Option<u64>) -> Response {
    if csinode.metadata.name.as_deref().is_some_and(|n| n != name) {
        return bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            csinode.metadata.name.unwrap_or_default()
        ));
    }
    let Some(current) = s.view.node_object(&key(name)) else {
        return not_found(name);
    };
    let object = match stored(csinode, name, Some(&current)) {
        Ok(o) => o,
        Err(r) => return r,
    };
    write(s, object, ObjectWrite::Replace { expected }, StatusCode::OK).await
}

/// `DELETE /apis/storage.k8s.io/v1/csinodes/{name}`: answered with the
/// object as it was, as kube-apiserver answers a delete that needs no
/// finalizing.
pub(crate) async fn delete_csinode(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
) -> Response {
    if let Err(r) = super::authz::admit(&caller, super::authz::Kind::CSINode, &name) {
        return r;
    }
    let Some(current) = s.view.node_object(&key(&name)) else {
        return not_found(&name);
    };
    write(
        &s,
        current,
        ObjectWrite::Delete { expected: None },
        StatusCode::OK,
    )
    .await
}

async fn write(s: &AppState, object: NodeObject, how: ObjectWrite, code: StatusCode) -> Response {
    let summary = summary(&object);
    match s
        .controller
        .write_object(object, how, RESOURCE, summary)
        .await
    {
        Ok(object) => (code, Json(served(&object))).into_response(),
        Err(e) => push_error(e),
    }
}

/// What the history says a CSINode holds: its drivers.
fn summary(object: &NodeObject) -> String {
    let value: Value = serde_json::from_str(&object.json).unwrap_or(Value::Null);
    let drivers: Vec<&str> = value["spec"]["drivers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["name"].as_str())
        .collect();
    if drivers.is_empty() {
        "no CSI drivers".to_string()
    } else {
        format!("CSI drivers {}", drivers.join(", "))
    }
}

/// The object to keep: checked as kube-apiserver's validation checks it
/// (`pkg/apis/storage/validation/validation.go` `ValidateCSINode`: a name,
/// drivers with a name and a node ID, each driver once), with the
/// server's metadata (uid and creation time: new, or the current one's).
fn stored(
    mut csinode: CSINode,
    name: &str,
    current: Option<&NodeObject>,
) -> Result<NodeObject, Response> {
    if name.is_empty() {
        return Err(super::push::invalid(
            "CSINode",
            name,
            "metadata.name: Required value: name or generateName is required".into(),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, driver) in csinode.spec.drivers.iter().enumerate() {
        let field = format!("spec.drivers[{i}]");
        let problem = if driver.name.is_empty() {
            Some(format!("{field}.name: Required value"))
        } else if driver.node_id.is_empty() {
            Some(format!("{field}.nodeID: Required value"))
        } else if !seen.insert(driver.name.as_str()) {
            Some(format!("{field}.name: Duplicate value: {:?}", driver.name))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(super::push::invalid("CSINode", name, problem));
        }
    }
    let meta = &mut csinode.metadata;
    meta.resource_version = None;
    meta.managed_fields = None;
    meta.namespace = None;
    match current.map(|c| serde_json::from_str::<CSINode>(&c.json)) {
        Some(Ok(current)) => {
            meta.uid = current.metadata.uid;
            meta.creation_timestamp = current.metadata.creation_timestamp;
        }
        _ => {
            meta.uid = Some(uuid::Uuid::new_v4().to_string());
            meta.creation_timestamp = Some(crate::k8s::time(Micros::now()));
        }
    }
    let json = serde_json::to_string(&csinode).map_err(super::internal)?;
    if json.len() > MAX_BYTES {
        return Err(status_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!(
                "CSINode {name:?} takes {} bytes as JSON; nodekeeper keeps at most {MAX_BYTES}",
                json.len()
            ),
        ));
    }
    Ok(NodeObject {
        node: name.to_string(),
        resource: RESOURCE.to_string(),
        name: name.to_string(),
        generation: 0,
        json,
    })
}
