//! `storage.k8s.io/v1` CSINodes, as a kubelet keeps its own: read, listed,
//! created, replaced, patched and deleted. Each is kept with its node (the
//! same name): stored beside it, in its history, and deleted with it.
//!
//! Every kubelet creates its CSINode at start, drivers or none
//! (kubernetes `pkg/volume/csi/csi_plugin.go:375-414`, `nodeinfomanager.go:433-483`):
//! without one it reports NotReady and exits after about 140 s.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::storage::v1::CSINode;
use serde_json::Value;

use super::authz::{admit, Kind};
use super::node_objects::{served, NodeKept};
use super::openapi::{check_body_fields, check_fields, WriteQuery};
use super::params::ListParams;
use super::push::{json_body, patched, with_warnings, ContentType};
use super::{bad_request, not_found, Answer, AppState, Caller};
use crate::controller::ObjectWrite;
use crate::model::{Micros, NodeObject, ObjectKey};

/// The resource, as errors and the history name it.
const RESOURCE: &str = "csinodes.storage.k8s.io";
const API_VERSION: &str = "storage.k8s.io/v1";
/// CSINodes as kept: at most 64 kB of JSON, room for dozens of drivers.
const KEPT: NodeKept = NodeKept {
    resource: RESOURCE,
    kind: "CSINode",
    max_bytes: 64 * 1024,
    summary,
};
/// The fields CSINodes can be selected by, as in kube-apiserver.
const FIELDS: &[&str] = &["metadata.name"];

/// Where the CSINode `name` is kept: with its node, of the same name.
fn key(name: &str) -> ObjectKey {
    KEPT.key(name, name)
}

/// The CSINode kept as `name`, or a 404.
fn current(s: &AppState, name: &str) -> Result<NodeObject, Response> {
    s.view
        .node_object(&key(name))
        .ok_or_else(|| not_found(RESOURCE, name))
}

/// `GET /apis/storage.k8s.io/v1/csinodes/{name}`.
pub(crate) async fn get_csinode(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    Ok(Json(served(&current(&s, &name)?)).into_response())
}

/// `GET /apis/storage.k8s.io/v1/csinodes`: every node's, by name.
pub(crate) async fn list_csinodes(
    State(s): State<AppState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    let (params, watch) = ListParams::list(params)?;
    if watch {
        return Err(super::watch_not_served("csinodes"));
    }
    let query = params.query(FIELDS).map_err(bad_request)?;
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
        .filter(|v| query.labels.is_empty() || query.labels.matches(&super::labels_of(v)))
        .collect();
    let list = crate::k8s::list(API_VERSION, "CSINode", version, items);
    Ok(Json(list).into_response())
}

/// `POST /apis/storage.k8s.io/v1/csinodes`.
pub(crate) async fn create_csinode(
    State(s): State<AppState>,
    caller: Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let csinode = json_body::<CSINode>(ct.as_str(), &body)?;
    let name = csinode.metadata.name.clone().unwrap_or_default();
    admit(&caller, Kind::CSINode, &name)?;
    let object = stored(csinode, &name, None)?;
    KEPT.write(&s, object, ObjectWrite::Create, StatusCode::CREATED)
        .await
}

/// `PUT /apis/storage.k8s.io/v1/csinodes/{name}`.
pub(crate) async fn put_csinode(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    ct: ContentType,
    Query(query): Query<WriteQuery>,
    body: Bytes,
) -> Answer {
    admit(&caller, Kind::CSINode, &name)?;
    let value = json_body::<Value>(ct.as_str(), &body)?;
    let warnings = check_fields(&query, API_VERSION, "CSINode", &value)?;
    let csinode: CSINode = serde_json::from_value(value).map_err(|e| super::push::malformed(&e))?;
    let expected = crate::k8s::expected_version(&csinode.metadata)
        .map_err(|e| super::push::invalid("CSINode", &name, e))?;
    let answer = replace(&s, csinode, &name, expected).await;
    // Refused or not, the answer carries the warnings.
    Ok(with_warnings(answer.unwrap_or_else(|r| r), &warnings))
}

/// `PATCH /apis/storage.k8s.io/v1/csinodes/{name}` (merge, strategic or JSON patch).
pub(crate) async fn patch_csinode(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    ct: ContentType,
    Query(query): Query<WriteQuery>,
    body: Bytes,
) -> Answer {
    admit(&caller, Kind::CSINode, &name)?;
    let warnings = check_body_fields(&query, API_VERSION, "CSINode", &body)?;
    let current = current(&s, &name)?;
    let csinode = patched::<CSINode>(ct.as_str(), &body, served(&current))?;
    // The patch applies to this version: a write in between is a conflict.
    let answer = replace(&s, csinode, &name, Some(current.generation)).await;
    Ok(with_warnings(answer.unwrap_or_else(|r| r), &warnings))
}

async fn replace(s: &AppState, csinode: CSINode, name: &str, expected: Option<u64>) -> Answer {
    super::push::check_name(csinode.metadata.name.as_deref(), name)?;
    let current = current(s, name)?;
    let object = stored(csinode, name, Some(&current))?;
    let how = ObjectWrite::Replace { expected };
    KEPT.write(s, object, how, StatusCode::OK).await
}

/// `DELETE /apis/storage.k8s.io/v1/csinodes/{name}`: answered with the
/// object as it was, as kube-apiserver answers a delete that needs no
/// finalizing.
pub(crate) async fn delete_csinode(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
) -> Answer {
    admit(&caller, Kind::CSINode, &name)?;
    let current = current(&s, &name)?;
    let how = ObjectWrite::Delete { expected: None };
    KEPT.write(&s, current, how, StatusCode::OK).await
}

/// What the history says a CSINode holds: its drivers.
fn summary(object: &NodeObject) -> String {
    let value: Value = serde_json::from_str(&object.json).unwrap_or_default();
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
    let invalid = |problem: String| super::push::invalid("CSINode", name, problem);
    if name.is_empty() {
        return Err(invalid(
            "metadata.name: Required value: name or generateName is required".into(),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, driver) in csinode.spec.drivers.iter().enumerate() {
        let field = format!("spec.drivers[{i}]");
        if driver.name.is_empty() {
            return Err(invalid(format!("{field}.name: Required value")));
        } else if driver.node_id.is_empty() {
            return Err(invalid(format!("{field}.nodeID: Required value")));
        } else if !seen.insert(driver.name.as_str()) {
            return Err(invalid(format!(
                "{field}.name: Duplicate value: {:?}",
                driver.name
            )));
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
    KEPT.object(key(name), json)
}
