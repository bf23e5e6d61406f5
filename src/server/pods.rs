//! `/api/v1/pods`: the mirror pods of kubelets' static pods, and nothing
//! else (`docs/decisions/mirror-pods.md`). nodekeeper schedules nothing.
//!
//! A kubelet creates a mirror pod for each static pod
//! (kubernetes `pkg/kubelet/pod/mirror_client.go:69-107`), learns which
//! exist through its pods reflector (`pkg/kubelet/config/apiserver.go:38`,
//! `fieldSelector=spec.nodeName=NAME`), deletes one that no longer matches
//! its static pod with a UID precondition (`mirror_client.go:116-143`), and
//! patches each pod's status (`pkg/kubelet/status/status_manager.go:883-957`,
//! through `pkg/util/pod/pod.go:34-71`). Each mirror pod is kept with its
//! node like its CSINode: stored beside it, in its history, deleted with it,
//! at most [`crate::controller::MAX_OBJECTS_PER_NODE`] a node.

// Checks return a ready response as their error, built once per refused
// request: its size does not matter.
#![allow(clippy::result_large_err)]

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde_json::{json, Value};

use super::params::{wants_table, ListParams};
use super::push::{body_json, json_body, malformed, push_error, ContentType};
use super::{bad_request, status_error, AppState, Caller};
use crate::controller::ObjectWrite;
use crate::k8s::patch::{apply_with_keys, PatchKind};
use crate::k8s::{paging, table};
use crate::model::{Micros, NodeObject, ObjectKey};

/// The resource, as errors and the history name it.
pub(crate) const RESOURCE: &str = "pods";
/// The annotation that makes a pod a mirror pod: the static pod's hash
/// (kubernetes `pkg/kubelet/types/pod_update.go` `ConfigMirrorAnnotationKey`).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The largest pod kept, as JSON: a static control-plane pod takes a few kB.
const MAX_BYTES: usize = 128 * 1024;
/// What nodekeeper says to a pod that is not a mirror pod.
const SCHEDULES_NOTHING: &str = "nodekeeper schedules nothing: it keeps only the mirror pods \
     kubelets create for their static pods (annotation kubernetes.io/config.mirror, and \
     spec.nodeName set to the kubelet's node)";

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

/// The merge keys of a pod's status lists (k8s.io/api `core/v1/types.go`
/// `PodStatus`: `patchMergeKey`); the container statuses declare none,
/// so a strategic merge patch replaces them whole.
fn status_merge_key(field: &str) -> Option<&'static str> {
    match field {
        "conditions" => Some("type"),
        "podIPs" | "hostIPs" => Some("ip"),
        "resourceClaimStatuses" => Some("name"),
        _ => None,
    }
}

/// Where a pod is kept: `namespace/name`, with its node.
fn key(node: &str, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        node: node.to_string(),
        resource: RESOURCE.to_string(),
        name: format!("{namespace}/{name}"),
    }
}

/// The pod kept as `namespace/name`: a node's own, looked up by its key
/// (a kubelet asks for its own pods), else on whichever node.
fn find(s: &AppState, caller: &Caller, namespace: &str, name: &str) -> Option<NodeObject> {
    if let Caller::Node(node) = caller {
        if let Some(own) = s.view.node_object(&key(node, namespace, name)) {
            return Some(own);
        }
    }
    s.view
        .find_node_object(RESOURCE, &format!("{namespace}/{name}"))
}

fn not_found(name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(crate::k8s::not_found(RESOURCE, name)),
    )
        .into_response()
}

/// The pod as served: the stored JSON with its resourceVersion (the seq
/// of the history entry that wrote it).
pub(crate) fn served(object: &NodeObject) -> Value {
    let mut value: Value = serde_json::from_str(&object.json).unwrap_or(Value::Null);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(
            "resourceVersion".into(),
            Value::String(object.generation.to_string()),
        );
    }
    value
}

/// A pod's value for a selectable field (`POD_FIELDS`).
pub(crate) fn field<'a>(pod: &'a Value, name: &str) -> Option<&'a str> {
    let value = match name {
        "metadata.name" => &pod["metadata"]["name"],
        "metadata.namespace" => &pod["metadata"]["namespace"],
        "spec.nodeName" => &pod["spec"]["nodeName"],
        "spec.restartPolicy" => &pod["spec"]["restartPolicy"],
        "spec.schedulerName" => &pod["spec"]["schedulerName"],
        "spec.serviceAccountName" => &pod["spec"]["serviceAccountName"],
        "spec.hostNetwork" => {
            return Some(if pod["spec"]["hostNetwork"] == true {
                "true"
            } else {
                "false"
            })
        }
        "status.phase" => &pod["status"]["phase"],
        "status.podIP" | "status.podIPs" => &pod["status"]["podIPs"][0]["ip"],
        "status.nominatedNodeName" => &pod["status"]["nominatedNodeName"],
        _ => return None,
    };
    value.as_str()
}

/// A pod's labels, for a label selector.
pub(crate) fn labels(pod: &Value) -> std::collections::BTreeMap<String, String> {
    pod["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// `GET /api/v1/pods`.
pub(crate) async fn list_pods(
    State(s): State<AppState>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    list(s, None, &headers, params).await
}

/// `GET /api/v1/namespaces/{namespace}/pods`.
pub(crate) async fn list_namespaced_pods(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    list(s, Some(namespace), &headers, params).await
}

/// A `PodList` or a Table of the pods kept, selected; or a watch.
async fn list(
    s: AppState,
    namespace: Option<String>,
    headers: &HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    let params = match ListParams::from_query(params) {
        Ok(p) => p,
        Err(e) => return bad_request(e.to_string()),
    };
    match params.is_watch() {
        Ok(false) => {}
        Ok(true) => return super::pod_watch::watch(s, namespace, params, headers).await,
        Err(e) => return bad_request(e.to_string()),
    }
    let query = match params.query(POD_FIELDS) {
        Ok(q) => q,
        Err(e) => return bad_request(e.to_string()),
    };
    // Every change the view shows is at or before this version, so a
    // watch from it misses none (it may see one twice).
    let version = s.view.published();
    // A kubelet's reflector pins its node (`spec.nodeName=NAME`): only
    // that node's pods are read.
    let objects = match query.fields.required("spec.nodeName") {
        Some(node) => s.view.node_objects_on(RESOURCE, node),
        None => s.view.node_objects(RESOURCE),
    };
    // Kept by `namespace/name`, the order of kube-apiserver's etcd keys
    // (`/registry/pods/NAMESPACE/NAME`): pages follow it.
    let mut items: Vec<(String, Value)> = objects
        .iter()
        .map(served)
        .filter(|pod| {
            namespace
                .as_deref()
                .is_none_or(|ns| pod["metadata"]["namespace"] == ns)
                && query.fields.matches(|f| field(pod, f))
                && query.labels.matches(&labels(pod))
        })
        .map(|pod| {
            let key = format!(
                "{}/{}",
                pod["metadata"]["namespace"].as_str().unwrap_or(""),
                pod["metadata"]["name"].as_str().unwrap_or("")
            );
            (key, pod)
        })
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    // `limit` and `continue` as for nodes: a reflector's first list asks
    // for pages of 500 (client-go `tools/pager/pager.go:31`, `tools/cache/reflector.go:693-719`).
    let page = paging::page(
        &items,
        |(key, _)| key,
        params.limit,
        query.continue_from.as_ref(),
        version,
        query.unfiltered(),
    );
    let metadata = page.metadata;
    let items: Vec<Value> = items.drain(page.range).map(|(_, pod)| pod).collect();
    if wants_table(headers) {
        return Json(table::pod_table(
            &items,
            metadata,
            query.include,
            Micros::now(),
        ))
        .into_response();
    }
    Json(crate::k8s::list_page("v1", "Pod", metadata, items)).into_response()
}

/// `GET /api/v1/namespaces/{namespace}/pods/{name}` (and `…/status`).
pub(crate) async fn get_pod(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    caller: Caller,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    let include = match ListParams::from_query(params).and_then(|p| p.include_object()) {
        Ok(include) => include,
        Err(e) => return bad_request(e.to_string()),
    };
    let Some(object) = find(&s, &caller, &namespace, &name) else {
        return not_found(&name);
    };
    let pod = served(&object);
    if wants_table(&headers) {
        let metadata = ListMeta {
            resource_version: Some(object.generation.to_string()),
            ..ListMeta::default()
        };
        return Json(table::pod_table(&[pod], metadata, include, Micros::now())).into_response();
    }
    Json(pod).into_response()
}

/// `POST /api/v1/namespaces/{namespace}/pods`: a kubelet's mirror pod.
pub(crate) async fn create_pod(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
    caller: Caller,
    ct: ContentType,
    body: Bytes,
) -> Response {
    let pod = match json_body::<Value>(ct.as_str(), &body)
        .and_then(|pod| crate::k8s::read_pod(pod).map_err(|e| malformed(&e)))
    {
        Ok(p) => p,
        Err(r) => return r,
    };
    let object = match mirror_pod(&s, &caller, pod, &namespace) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let summary = summary(&object);
    write(
        &s,
        object,
        ObjectWrite::Create,
        summary,
        StatusCode::CREATED,
    )
    .await
}

/// The pod to keep, if it is a mirror pod this caller may write: checked
/// as kube-apiserver's NodeRestriction admission checks a node's pod
/// (kubernetes `plugin/pkg/admission/noderestriction/admission.go`
/// `admitPodCreate`: the mirror annotation, its own node, an owner
/// reference to that node only), with the server's metadata and status
/// (`pkg/registry/core/pod/strategy.go` `PrepareForCreate`: `Pending`).
fn mirror_pod(
    s: &AppState,
    caller: &Caller,
    mut pod: Pod,
    namespace: &str,
) -> Result<NodeObject, Response> {
    let meta = &mut pod.metadata;
    let name = meta.name.clone().unwrap_or_default();
    match meta.namespace.as_deref() {
        None | Some("") => meta.namespace = Some(namespace.to_string()),
        Some(ns) if ns == namespace => {}
        Some(_) => return Err(bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        )),
    }
    if name.is_empty() {
        return Err(super::push::invalid(
            "Pod",
            &name,
            "metadata.name: Required value: name is required (nodekeeper does not generate names)"
                .into(),
        ));
    }
    let mirror = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    if !mirror || node.is_empty() {
        return Err(status_error(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("pods {name:?} is forbidden: {SCHEDULES_NOTHING}"),
        ));
    }
    super::authz::admit_pod(caller, &name, &node, "create")?;
    let node_uid = s.view.get(&node).map(|(n, _)| n.uid);
    for owner in meta.owner_references.iter().flatten() {
        if owner.kind != "Node" || owner.name != node || Some(&owner.uid) != node_uid.as_ref() {
            return Err(status_error(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "pods {name:?} is forbidden: a mirror pod may be owned by its node only \
                     (Node {node:?}, uid {:?}), not by {} {:?} (uid {:?})",
                    node_uid.as_deref().unwrap_or(""),
                    owner.kind,
                    owner.name,
                    owner.uid
                ),
            ));
        }
    }
    meta.uid = Some(uuid::Uuid::new_v4().to_string());
    meta.creation_timestamp = Some(crate::k8s::time(Micros::now()));
    meta.resource_version = None;
    meta.managed_fields = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.generation = Some(1);
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..PodStatus::default()
    });
    stored(&pod, &node, namespace, &name)
}

fn stored(pod: &Pod, node: &str, namespace: &str, name: &str) -> Result<NodeObject, Response> {
    let value = crate::k8s::typed_pod(pod).map_err(super::internal)?;
    let json = value.to_string();
    if json.len() > MAX_BYTES {
        return Err(status_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!(
                "Pod {name:?} takes {} bytes as JSON; nodekeeper keeps at most {MAX_BYTES}",
                json.len()
            ),
        ));
    }
    let key = key(node, namespace, name);
    Ok(NodeObject {
        node: key.node,
        resource: key.resource,
        name: key.name,
        generation: 0,
        json,
    })
}

/// `PATCH /api/v1/namespaces/{namespace}/pods/{name}/status`, as the
/// kubelet's status manager sends it: a strategic merge patch of the
/// status, with `metadata.uid` as a precondition (`pkg/util/pod/pod.go:50-71`).
/// Only the status changes, as through kube-apiserver's status subresource.
pub(crate) async fn patch_pod_status(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    caller: Caller,
    ct: ContentType,
    body: Bytes,
) -> Response {
    let Some(current) = find(&s, &caller, &namespace, &name) else {
        return not_found(&name);
    };
    if let Err(r) = super::authz::admit_pod(&caller, &name, &current.node, "update") {
        return r;
    }
    let Some(kind) = PatchKind::from_content_type(ct.as_str()) else {
        return status_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/merge-patch+json, application/strategic-merge-patch+json (got {:?})",
                ct.as_str()
            ),
        );
    };
    let patch: Value = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => return malformed(&e),
    };
    let mut pod = served(&current);
    let uid = pod["metadata"]["uid"].clone();
    let mut target = json!({"metadata": {"uid": uid}, "status": pod["status"].take()});
    if let Err(e) = apply_with_keys(kind, &mut target, &patch, status_merge_key) {
        return status_error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", e.to_string());
    }
    // A uid in the patch that is not the pod's: the pod was deleted and
    // created again since the kubelet read it.
    if target["metadata"]["uid"] != uid {
        return status_error(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods {name:?}: Precondition failed: UID in \
                 precondition: {}, UID in object meta: {}",
                target["metadata"]["uid"].as_str().unwrap_or(""),
                uid.as_str().unwrap_or("")
            ),
        );
    }
    pod["status"] = target["status"].take();
    // The kept pod was read as a Pod when it was created: only the patched
    // status can fail to read.
    let mut pod = match crate::k8s::read_pod(pod) {
        Ok(pod) => pod,
        Err(e) => return super::push::invalid("Pod", &name, format!("status: {e}")),
    };
    pod.metadata.resource_version = None;
    let object = match stored(&pod, &current.node, &namespace, &name) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let summary = summary(&object);
    let how = ObjectWrite::Replace {
        expected: Some(current.generation),
    };
    write(&s, object, how, summary, StatusCode::OK).await
}

/// The parts of `DeleteOptions` that matter here.
#[derive(Debug, Default, serde::Deserialize)]
struct DeleteOptions {
    #[serde(default)]
    preconditions: Option<Preconditions>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Preconditions {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
}

/// `DELETE /api/v1/namespaces/{namespace}/pods/{name}`, with the
/// preconditions a kubelet sends (`mirror_client.go:133`,
/// `status_manager.go:943-949`): answered with the pod as it was, as
/// kube-apiserver answers a delete with no grace period.
pub(crate) async fn delete_pod(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    caller: Caller,
    ct: ContentType,
    body: Bytes,
) -> Response {
    let options: DeleteOptions = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else {
        match body_json(ct.as_str(), &body)
            .and_then(|json| serde_json::from_slice(&json).map_err(|e| malformed(&e)))
        {
            Ok(o) => o,
            Err(r) => return r,
        }
    };
    let Some(current) = find(&s, &caller, &namespace, &name) else {
        return not_found(&name);
    };
    if let Err(r) = super::authz::admit_pod(&caller, &name, &current.node, "delete") {
        return r;
    }
    let pod = served(&current);
    let pre = options.preconditions.unwrap_or_default();
    let conflict = |what: &str, wanted: &str, got: &str| {
        status_error(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods {name:?}: Precondition failed: {what} in \
                 precondition: {wanted}, {what} in object meta: {got}"
            ),
        )
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    if let Some(wanted) = pre.uid.as_deref().filter(|u| !u.is_empty() && *u != uid) {
        return conflict("UID", wanted, uid);
    }
    let version = current.generation.to_string();
    if let Some(wanted) = pre
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty() && **v != version)
    {
        return conflict("ResourceVersion", wanted, &version);
    }
    let how = ObjectWrite::Delete {
        expected: Some(current.generation),
    };
    let summary = summary(&current);
    write(&s, current, how, summary, StatusCode::OK).await
}

async fn write(
    s: &AppState,
    object: NodeObject,
    how: ObjectWrite,
    summary: String,
    code: StatusCode,
) -> Response {
    match s
        .controller
        .write_object(object, how, RESOURCE, summary)
        .await
    {
        Ok(object) => (code, Json(served(&object))).into_response(),
        Err(e) => push_error(e),
    }
}

/// What the history says of a pod: its phase, and its ready containers.
fn summary(object: &NodeObject) -> String {
    let pod: Value = serde_json::from_str(&object.json).unwrap_or(Value::Null);
    let containers = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["ready"] == true)
        .count();
    format!(
        "mirror pod, {}, {ready}/{containers} ready",
        pod["status"]["phase"].as_str().unwrap_or("no phase")
    )
}
