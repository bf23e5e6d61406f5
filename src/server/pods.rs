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

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use serde_json::{json, Value};

use super::node_objects::{served, NodeKept};
use super::params::{wants_table, DeleteOptions, ListParams};
use super::push::{body_json, json_body, malformed, ContentType};
use super::{bad_request, forbidden, not_found, refusal, Answer, AppState, Caller};
use crate::controller::ObjectWrite;
use crate::k8s::patch::apply_with_keys;
use crate::k8s::{paging, table};
use crate::model::{Micros, NodeObject, ObjectKey};

/// The resource, as errors and the history name it.
pub(crate) const RESOURCE: &str = "pods";
/// The annotation that makes a pod a mirror pod: the static pod's hash
/// (kubernetes `pkg/kubelet/types/pod_update.go` `ConfigMirrorAnnotationKey`).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Mirror pods as kept: at most 128 kB of JSON (a static control-plane pod
/// takes a few kB).
pub(super) const KEPT: NodeKept = NodeKept {
    resource: RESOURCE,
    kind: "Pod",
    max_bytes: 128 * 1024,
    summary,
};
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
    KEPT.key(node, &format!("{namespace}/{name}"))
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

/// The pod kept as `namespace/name`, or a 404.
fn found(
    s: &AppState,
    caller: &Caller,
    namespace: &str,
    name: &str,
) -> Result<NodeObject, Response> {
    find(s, caller, namespace, name).ok_or_else(|| not_found(RESOURCE, name))
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

/// `GET /api/v1/pods` and `/api/v1/namespaces/{namespace}/pods`: a
/// `PodList` or a Table of the pods kept, selected; or a watch.
pub(crate) async fn list_pods(
    State(s): State<AppState>,
    namespace: Option<Path<String>>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    let namespace = namespace.map(|Path(ns)| ns);
    let (params, watch) = ListParams::list(params)?;
    if watch {
        return super::pod_watch::watch(s, namespace, params, &headers).await;
    }
    let query = params.query(POD_FIELDS).map_err(bad_request)?;
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
        .map(|object| (object.name.clone(), served(object)))
        .filter(|(_, pod)| {
            namespace
                .as_deref()
                .is_none_or(|ns| pod["metadata"]["namespace"] == ns)
                && query.fields.matches(|f| field(pod, f))
                && query.labels.matches(&super::labels_of(pod))
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
    if wants_table(&headers) {
        let table = table::pod_table(&items, metadata, query.include, Micros::now());
        return Ok(Json(table).into_response());
    }
    Ok(Json(crate::k8s::list_page("v1", "Pod", metadata, items)).into_response())
}

/// `GET /api/v1/namespaces/{namespace}/pods/{name}` (and `…/status`).
pub(crate) async fn get_pod(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    caller: Caller,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    let include = ListParams::get(params)?;
    let object = found(&s, &caller, &namespace, &name)?;
    let pod = served(&object);
    if wants_table(&headers) {
        let metadata = super::at_version(object.generation);
        let table = table::pod_table(&[pod], metadata, include, Micros::now());
        return Ok(Json(table).into_response());
    }
    Ok(Json(pod).into_response())
}

/// `POST /api/v1/namespaces/{namespace}/pods`: a kubelet's mirror pod.
pub(crate) async fn create_pod(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
    caller: Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let pod = json_body::<Value>(ct.as_str(), &body)
        .and_then(|pod| crate::k8s::read_pod(pod).map_err(|e| malformed(&e)))?;
    let object = mirror_pod(&s, &caller, pod, &namespace)?;
    KEPT.write(&s, object, ObjectWrite::Create, StatusCode::CREATED)
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
            "the namespace of the provided object does not match the namespace sent on the request",
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
        return Err(forbidden(format!(
            "pods {name:?} is forbidden: {SCHEDULES_NOTHING}"
        )));
    }
    super::authz::admit_pod(caller, &name, &node, "create")?;
    let node_uid = s.view.get(&node).map(|(n, _)| n.uid);
    for owner in meta.owner_references.iter().flatten() {
        if owner.kind != "Node" || owner.name != node || Some(&owner.uid) != node_uid.as_ref() {
            return Err(forbidden(format!(
                "pods {name:?} is forbidden: a mirror pod may be owned by its node only \
                 (Node {node:?}, uid {:?}), not by {} {:?} (uid {:?})",
                node_uid.as_deref().unwrap_or(""),
                owner.kind,
                owner.name,
                owner.uid
            )));
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
    KEPT.object(key(node, namespace, name), value.to_string())
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
) -> Answer {
    let current = found(&s, &caller, &namespace, &name)?;
    super::authz::admit_pod(&caller, &name, &current.node, "update")?;
    let kind = super::push::patch_kind(ct.as_str())?;
    let patch: Value = serde_json::from_slice(&body).map_err(|e| malformed(&e))?;
    let mut pod = served(&current);
    let uid = pod["metadata"]["uid"].clone();
    let mut target = json!({"metadata": {"uid": uid}, "status": pod["status"].take()});
    apply_with_keys(kind, &mut target, &patch, status_merge_key)
        .map_err(|e| refusal(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    // A uid in the patch that is not the pod's: the pod was deleted and
    // created again since the kubelet read it.
    let patched_uid = target["metadata"]["uid"].as_str().unwrap_or("");
    if target["metadata"]["uid"] != uid {
        return Err(precondition_failed(
            &name,
            "UID",
            patched_uid,
            uid.as_str().unwrap_or(""),
        ));
    }
    pod["status"] = target["status"].take();
    // The kept pod was read as a Pod when it was created: only the patched
    // status can fail to read.
    let mut pod = match crate::k8s::read_pod(pod) {
        Ok(pod) => pod,
        Err(e) => return Err(super::push::invalid("Pod", &name, format!("status: {e}"))),
    };
    pod.metadata.resource_version = None;
    let object = stored(&pod, &current.node, &namespace, &name)?;
    let how = ObjectWrite::Replace {
        expected: Some(current.generation),
    };
    KEPT.write(&s, object, how, StatusCode::OK).await
}

/// A 409 for a delete's or a patch's precondition the pod does not meet.
fn precondition_failed(name: &str, what: &str, wanted: &str, got: &str) -> Response {
    refusal(
        StatusCode::CONFLICT,
        format!(
            "Operation cannot be fulfilled on pods {name:?}: Precondition failed: {what} in \
             precondition: {wanted}, {what} in object meta: {got}"
        ),
    )
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
) -> Answer {
    let options: DeleteOptions = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else {
        let json = body_json(ct.as_str(), &body)?;
        serde_json::from_slice(&json).map_err(|e| malformed(&e))?
    };
    let current = found(&s, &caller, &namespace, &name)?;
    super::authz::admit_pod(&caller, &name, &current.node, "delete")?;
    let pod = served(&current);
    let pre = options.preconditions.unwrap_or_default();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    if let Some(wanted) = pre.uid.as_deref().filter(|u| !u.is_empty() && *u != uid) {
        return Err(precondition_failed(&name, "UID", wanted, uid));
    }
    let version = current.generation.to_string();
    if let Some(wanted) = pre
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty() && **v != version)
    {
        return Err(precondition_failed(
            &name,
            "ResourceVersion",
            wanted,
            &version,
        ));
    }
    let how = ObjectWrite::Delete {
        expected: Some(current.generation),
    };
    KEPT.write(&s, current, how, StatusCode::OK).await
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
