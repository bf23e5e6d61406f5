//! Writes from kubelets: node status (`PUT`/`PATCH nodes/{name}/status`)
//! and self-registration (`POST nodes`); their Leases are in `leases.rs`.
//! Each is checked here and decided by the controller; errors are the
//! Statuses kubectl shows.

// Checks return a ready response as their error, built once per refused
// request: its size does not matter.
#![allow(clippy::result_large_err)]

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::core::v1::Node as KubeNode;
use serde::de::DeserializeOwned;

use std::collections::BTreeMap;

use super::node_writes;
use super::patch::{self, PatchKind};
use super::{bad_request, refusal, status_error, Answer, AppState};
use crate::controller::{PushError, PushedStatus, WriteRequest};

/// A refused write, as a Kubernetes `Status`.
pub(crate) fn push_error(e: PushError) -> Response {
    match e {
        PushError::NotFound { kind, name } => {
            refusal(StatusCode::NOT_FOUND, format!("{kind} {name:?} not found"))
        }
        PushError::AlreadyExists { kind, name } => status_error(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{kind} {name:?} already exists"),
        ),
        PushError::Conflict { kind, name } => conflict(kind, &name),
        PushError::Forbidden(message) => refusal(StatusCode::FORBIDDEN, message),
        PushError::Invalid(message) => refusal(StatusCode::UNPROCESSABLE_ENTITY, message),
        PushError::Rejected(invalid) => rejected(&invalid),
        PushError::TooManyRequests {
            message,
            retry_after,
        } => {
            let mut response = refusal(StatusCode::TOO_MANY_REQUESTS, message);
            if let Ok(value) = HeaderValue::from_str(&retry_after.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        PushError::PreconditionFailed(message) | PushError::StillListed(message) => {
            refusal(StatusCode::CONFLICT, message)
        }
        PushError::Store(e) => super::internal(e),
        // Not made durable, so not made: the writer may try again later.
        PushError::Unavailable(message) => refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the change was not made: {message}"),
        ),
        PushError::Stopped => refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "the controller is stopping",
        ),
    }
}

/// kube-apiserver's 409 for a write at a version the object has moved past.
pub(super) fn conflict(resource: &str, name: &str) -> Response {
    refusal(
        StatusCode::CONFLICT,
        node_writes::conflict_message(resource, name),
    )
}

/// The 422 naming each refused field, as kube-apiserver's.
pub(super) fn rejected(invalid: &crate::validation::Invalid) -> Response {
    let status = crate::k8s::invalid(invalid);
    (StatusCode::UNPROCESSABLE_ENTITY, Json(status)).into_response()
}

/// The 415 for a body of a type that is not `accepted` (media types).
pub(super) fn unsupported_type(ct: &str, accepted: &str) -> Response {
    refusal(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "the body of the request was in an unknown format - accepted media types include: \
             {accepted} (got {ct:?})"
        ),
    )
}

/// How a `PATCH` sent as `ct` applies: a merge or a strategic merge patch.
pub(super) fn patch_kind(ct: &str) -> Result<PatchKind, Response> {
    PatchKind::from_content_type(ct).ok_or_else(|| {
        let accepted = "application/merge-patch+json, application/strategic-merge-patch+json";
        unsupported_type(ct, accepted)
    })
}

/// A refusal of a body whose name is not the one on the URL.
pub(super) fn check_name(sent: Option<&str>, name: &str) -> Result<(), Response> {
    match sent {
        Some(sent) if sent != name => Err(bad_request(format!(
            "the name of the object ({sent}) does not match the name on the URL ({name})"
        ))),
        _ => Ok(()),
    }
}

/// A 200 with `value` as JSON. It is written into this thread's reply
/// buffer, then copied into a body of its exact size: axum's `Json` starts
/// at 128 bytes and grows, copying, to the kilobytes a node takes, and a
/// body with room to spare costs hyper's `Bytes` one more allocation to
/// share it (thousands of times a second here).
pub(super) fn json_reply<T: serde::Serialize>(value: &T) -> Response {
    let body = REPLY_BUFFER.with_borrow_mut(|buffer| {
        buffer.clear();
        let written = serde_json::to_writer(&mut *buffer, value).map(|()| buffer.to_vec());
        // A reply far larger than a node's does not stay held by the thread.
        if buffer.capacity() > 4 * REPLY_CAPACITY {
            *buffer = Vec::with_capacity(REPLY_CAPACITY);
        }
        written
    });
    match body {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => super::internal(e),
    }
}

/// `reply` as a `201 Created`.
pub(super) fn created(mut reply: Response) -> Response {
    *reply.status_mut() = StatusCode::CREATED;
    reply
}

thread_local! {
    /// Where [`json_reply`] writes: one per runtime worker, reused.
    static REPLY_BUFFER: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(Vec::with_capacity(REPLY_CAPACITY));
}

/// Bytes a rendered node usually takes, with room to spare.
const REPLY_CAPACITY: usize = 4096;

/// A request's `Content-Type` read from its headers (see [`ContentType`]).
pub(super) fn content_type(headers: &HeaderMap) -> &str {
    as_text(headers.get(header::CONTENT_TYPE))
}

/// A header's value as text: empty when absent or not text.
fn as_text(value: Option<&HeaderValue>) -> &str {
    value.and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// A request's `Content-Type` (empty when absent or not text), taken
/// without a copy of the request's headers: axum's `HeaderMap` extractor
/// clones the whole map, once a request: 2,000 a second at 10,000 kubelets.
pub(crate) struct ContentType(Option<HeaderValue>);

impl ContentType {
    pub fn as_str(&self) -> &str {
        as_text(self.0.as_ref())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ContentType {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // A header value shares the request's buffer: cloning it copies nothing.
        Ok(ContentType(
            parts.headers.get(header::CONTENT_TYPE).cloned(),
        ))
    }
}

/// Parses the body of a `PUT` or `POST` sent as `ct`: JSON, or Kubernetes
/// protobuf as kubelets send it.
pub(crate) fn json_body<T: DeserializeOwned>(ct: &str, body: &Bytes) -> Result<T, Response> {
    let json = body_json(ct, body)?;
    serde_json::from_slice(&json).map_err(|e| malformed(&e))
}

/// A `Node` sent as `ct`, read through a `Value` as a patched node is
/// ([`patched_with`]): serde compiles a type's deserializer once for each way
/// it is read, and a `Node`'s is large (docs/decisions/binary-size.md).
fn node_body(ct: &str, body: &Bytes) -> Result<KubeNode, Response> {
    let value = json_body::<serde_json::Value>(ct, body)?;
    serde_json::from_value(value).map_err(|e| malformed(&e))
}

/// The body of a `PUT` or `POST` sent as `ct`, as JSON: a JSON body as it
/// is, a protobuf one read into the Kubernetes JSON of its object
/// ([`crate::k8s::protobuf`]); any other type is refused (415), as
/// kube-apiserver refuses a type it has no serializer for.
pub(crate) fn body_json(ct: &str, body: &Bytes) -> Result<Bytes, Response> {
    if crate::k8s::protobuf::is_protobuf(ct) {
        return crate::k8s::protobuf::to_json(body)
            .map(Bytes::from)
            .map_err(|e| bad_request(format!("the request body could not be decoded: {e}")));
    }
    let media = ct.split(';').next().unwrap_or("").trim();
    if !(media == "application/json" || media.is_empty()) {
        let accepted = format!("application/json, {}", crate::k8s::protobuf::MEDIA_TYPE);
        return Err(unsupported_type(ct, &accepted));
    }
    Ok(body.clone())
}

pub(super) fn malformed(e: &serde_json::Error) -> Response {
    bad_request(format!(
        "the request body is not valid JSON for this object: {e}"
    ))
}

/// Applies a `PATCH` body sent as `ct` to `current` (a Kubernetes object as JSON).
pub(super) fn patched<T: DeserializeOwned>(
    ct: &str,
    body: &Bytes,
    current: serde_json::Value,
) -> Result<T, Response> {
    patched_with(ct, serde_json::from_slice(body), current)
}

/// [`patched`] with the body already parsed (a body that is not JSON is
/// refused after the media type is checked, as before parsing).
pub(super) fn patched_with<T: DeserializeOwned>(
    ct: &str,
    patch: Result<serde_json::Value, serde_json::Error>,
    mut current: serde_json::Value,
) -> Result<T, Response> {
    let kind = patch_kind(ct)?;
    let patch = patch.map_err(|e| malformed(&e))?;
    patch::apply_owned(kind, &mut current, patch)
        .map_err(|e| refusal(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    serde_json::from_value(current).map_err(|e| malformed(&e))
}

pub(super) fn invalid(kind: &str, name: &str, reason: String) -> Response {
    refusal(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("{kind} {name:?} is invalid: {reason}"),
    )
}

/// Refused fields, each named, as kube-apiserver's 422.
pub(super) fn invalid_fields(
    kind: &'static str,
    name: &str,
    causes: Vec<crate::validation::FieldError>,
) -> Response {
    let e = crate::validation::Invalid {
        kind,
        name: name.to_string(),
        causes,
    };
    rejected(&e)
}

/// The current node as a status patch applies to it: as the API shows it,
/// but with `nodeInfo` as stored (not the display defaults), so a patch
/// that does not set a field does not store what was only shown.
///
/// Only what `patch` names is written (the top-level parts it names, and
/// within `status` the fields it names, or all of them for a directive):
/// the merge leaves the rest as it was, and only the status fields the
/// patch names are pushed.
pub(super) fn current_node(
    s: &AppState,
    name: &str,
    patch: &serde_json::Value,
) -> Result<serde_json::Value, Response> {
    let status_named = |key: &str| status_named(patch, key);
    // A patch that is not an object, or has a directive at the top, gets it all.
    let names = |key: &str| whole(patch) || patch.get(key).is_some();
    let parts = crate::k8s::Parts {
        metadata: names("metadata"),
        spec: names("spec"),
        status: names("status"),
        addresses: status_named("addresses"),
        allocatable: status_named("allocatable"),
        capacity: status_named("capacity"),
        conditions: status_named("conditions"),
        node_info: status_named("nodeInfo"),
        reported: REPORTED.iter().any(|key| status_named(key)),
        stored_node_info: true,
    };
    // Written from the published node in place: no copy of it per push.
    let written = s.view.with_node(name, |node, _| {
        serde_json::to_value(crate::k8s::NodeJson::parts(node, parts))
    });
    match written {
        Some(current) => current.map_err(super::internal),
        None => Err(super::not_found("nodes", name)),
    }
}

/// Whether `patch` may change the status field `key`, so that it must be rendered.
fn status_named(patch: &serde_json::Value, key: &str) -> bool {
    match patch.get("status") {
        _ if whole(patch) => true,
        Some(serde_json::Value::Object(status)) => status.keys().any(|k| names_field(k, key)),
        // Not an object: the merge decides what that means; render it all.
        Some(_) => true,
        None => false,
    }
}

/// A patch that is not an object, or has a directive at the top, gets the
/// whole node rendered.
fn whole(patch: &serde_json::Value) -> bool {
    patch
        .as_object()
        .is_none_or(|p| p.keys().any(|k| k.starts_with('$')))
}

/// Whether the key `patch_key` of a patch's map can change the field `field`:
/// the field itself, a directive about that field's list
/// (`$setElementOrder/conditions`, as kubelets send with every status
/// patch), or a directive about the whole map (`$patch`, `$retainKeys`).
fn names_field(patch_key: &str, field: &str) -> bool {
    match patch_key.strip_prefix('$') {
        None => patch_key == field,
        Some(directive) => match directive.split_once('/') {
            Some((_, of)) => of == field,
            None => true,
        },
    }
}

/// The `status` fields kept as the kubelet reports them
/// ([`crate::model::Reported`]): a patch naming any of them pushes all
/// six, as the merge left them.
const REPORTED: [&str; 6] = [
    "daemonEndpoints",
    "features",
    "images",
    "runtimeHandlers",
    "volumesAttached",
    "volumesInUse",
];

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
    reported: bool,
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
            // Named at all, even as null (a field the kubelet no longer
            // reports is deleted by its patch with a null).
            reported: status
                .as_object()
                .is_some_and(|o| o.keys().any(|k| REPORTED.iter().any(|f| names_field(k, f)))),
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
        if !self.reported {
            status.reported = None;
        }
    }
}

/// The status a node object pushes, and the version it expects; `only`
/// limits it to what a patch set.
fn status_to_write(
    name: &str,
    mut node: KubeNode,
    only: Option<PatchedFields>,
) -> Result<(PushedStatus, Option<u64>), Response> {
    check_name(node.metadata.name.as_deref(), name)?;
    if only.is_none() {
        if let Err(e) = crate::k8s::check_condition_types(&node) {
            return Err(invalid_fields("Node", name, vec![e]));
        }
    }
    let status = match crate::k8s::pushed_status_of(node.status.take()) {
        Ok(mut status) => {
            if let Some(only) = &only {
                only.keep_only(&mut status);
            }
            status
        }
        Err(causes) => return Err(invalid_fields("Node", name, causes)),
    };
    match crate::k8s::expected_version(&node.metadata) {
        Ok(expected) => Ok((status, expected)),
        Err(e) => Err(invalid("Node", name, e)),
    }
}

/// The status a patch pushes by the general merge onto `current` (the node
/// as [`current_node`] renders it for that patch), and the labels and
/// annotations the merge leaves the node with when the patch names
/// `metadata`.
fn merged_status(
    ct: &str,
    patch: Result<serde_json::Value, serde_json::Error>,
    current: serde_json::Value,
    name: &str,
    only: PatchedFields,
) -> Result<MergedStatus, Response> {
    let mut node: KubeNode = patched_with(ct, patch, current)?;
    // The patch applies to the current object; its version is not a precondition.
    node.metadata.resource_version = None;
    let metadata = Metadata {
        labels: node.metadata.labels.take(),
        annotations: node.metadata.annotations.take(),
    };
    let (status, expected) = status_to_write(name, node, Some(only))?;
    Ok((status, expected, metadata))
}

/// A status patch's status, the version it expects, and the metadata it
/// leaves.
type MergedStatus = (PushedStatus, Option<u64>, Metadata);

/// The labels and annotations a kubelet's write leaves its node with;
/// `None` where it names none.
#[derive(Debug, Default)]
struct Metadata {
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

/// Keeps what a kubelet's status patch does to its node's labels and
/// annotations, by NodeRestriction's rules and
/// nodekeeper's precedence ([`node_writes::kubelet_metadata`]), as an edit
/// of the node recorded under the writer's name; nothing when it changes
/// nothing. Answers the warnings for keys kept as they were.
///
/// kube-apiserver keeps a status patch's metadata (its status strategy
/// resets only the spec: kubernetes `pkg/registry/core/node/strategy.go`
/// `nodeStatusStrategy.PrepareForUpdate`), within what NodeRestriction lets
/// a node set (`plugin/pkg/admission/noderestriction/admission.go` `admitNode`).
async fn kubelet_metadata(
    s: &AppState,
    name: &str,
    principal: &super::Principal,
    wants: &Metadata,
) -> Result<Vec<String>, Response> {
    if wants.labels.is_none() && wants.annotations.is_none() {
        return Ok(Vec::new());
    }
    let Some((node, _)) = s.view.get(name) else {
        return Ok(Vec::new());
    };
    let mut object = crate::k8s::node(&node, None);
    let (shown_labels, shown_annotations) = (
        object.metadata.labels.take().unwrap_or_default(),
        object.metadata.annotations.take().unwrap_or_default(),
    );
    let caller = principal.caller();
    // An authenticated operator writes what it sends, as kube-apiserver
    // takes it; nodes and anonymous callers (kubelets of a site without
    // credentials) are held to a kubelet's precedence, and nodes to
    // NodeRestriction.
    let decided = if matches!(caller, super::Caller::Operator) {
        Ok(node_writes::KubeletMetadata {
            labels: wants.labels.clone().unwrap_or(shown_labels.clone()),
            annotations: wants
                .annotations
                .clone()
                .unwrap_or(shown_annotations.clone()),
            kept: Vec::new(),
        })
    } else {
        node_writes::kubelet_metadata(
            name,
            matches!(caller, super::Caller::Node(_)),
            (&shown_labels, &shown_annotations),
            (wants.labels.as_ref(), wants.annotations.as_ref()),
        )
    };
    let decided = match decided {
        Ok(decided) => decided,
        Err(node_writes::MetadataRefusal::Forbidden(message)) => {
            return Err(node_forbidden(name, &message))
        }
        Err(node_writes::MetadataRefusal::Invalid(invalid)) => return Err(rejected(&invalid)),
    };
    if decided.labels == shown_labels && decided.annotations == shown_annotations {
        return Ok(decided.kept);
    }
    object.metadata.labels = Some(decided.labels);
    object.metadata.annotations = Some(decided.annotations);
    let fields = crate::k8s::operator_fields(&node, &object, false)
        .map_err(|e| super::nodes::write_error(e.into()))?;
    s.controller
        .write(|reply| WriteRequest::Edit {
            name: name.to_string(),
            fields,
            expected_version: Some(node.resource_version),
            by: principal.user().name.clone(),
            reply,
        })
        .await
        .map_err(push_error)?;
    Ok(decided.kept)
}

/// NodeRestriction's 403 on a node's own Node.
fn node_forbidden(name: &str, message: &str) -> Response {
    super::authz::forbidden_object("nodes", name, message)
}

/// Adds a `Warning` header (`299 - "TEXT"`, RFC 7234, as kube-apiserver
/// sends warnings; client-go logs each, kubectl prints each) for each of
/// `warnings`. The text is quoted as Rust quotes a string: `\` and `"`
/// escaped as the RFC's quoted-string wants, and a control character (a
/// field name in a body may hold one) escaped too, not left to make the
/// header invalid.
pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for text in warnings {
        if let Ok(value) = HeaderValue::from_str(&format!("299 - {text:?}")) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

async fn push_status(
    s: &AppState,
    name: String,
    status: PushedStatus,
    expected: Option<u64>,
) -> Response {
    match s.controller.status(name, status, expected).await {
        Ok(node) => json_reply(&crate::k8s::NodeJson::shown(&node, None)),
        Err(e) => push_error(e),
    }
}

/// `PUT /api/v1/nodes/{name}/status`: the whole status, replaced.
pub(crate) async fn put_status(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: super::Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    super::check_may_write_node(&caller, &name)?;
    let node = node_body(ct.as_str(), &body)?;
    let (status, expected) = status_to_write(&name, node, None)?;
    Ok(push_status(&s, name, status, expected).await)
}

/// `PATCH /api/v1/nodes/{name}/status`: merge or strategic-merge patch.
pub(crate) async fn patch_status(
    State(s): State<AppState>,
    Path(name): Path<String>,
    // The caller as one shared value: naming the user costs a copy only
    // when a patch sets a label.
    principal: super::Principal,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    super::check_may_write_node(principal.caller(), &name)?;
    let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&body);
    let patch = parsed.as_ref().unwrap_or(&serde_json::Value::Null);
    let current = current_node(&s, &name, patch)?;
    let only = PatchedFields::of(patch);
    // Bounded before merging: a merge by type costs the product of the two lists.
    crate::validation::extra_conditions([], only.conditions.iter().map(String::as_str))
        .map_err(|e| invalid_fields("Node", &name, vec![e]))?;
    let (status, expected, metadata) = merged_status(ct.as_str(), parsed, current, &name, only)?;
    let warnings = kubelet_metadata(&s, &name, &principal, &metadata).await?;
    Ok(with_warnings(
        push_status(&s, name, status, expected).await,
        &warnings,
    ))
}

/// `POST /api/v1/nodes`: a kubelet registering its node, with its labels
/// (a node's own within NodeRestriction's rules: `admission.go:509-513`)
/// and its annotations (the attach-detach choice,
/// `kubelet_node_status.go` `initialNode`), in one write.
pub(crate) async fn create_node(
    State(s): State<AppState>,
    caller: super::Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let mut node = node_body(ct.as_str(), &body)?;
    let name = node.metadata.name.clone().unwrap_or_default();
    super::check_may_write_node(&caller, &name)?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if let super::Caller::Node(own) = &caller {
        if let Some(message) = node_writes::registration_refusal(own, &labels) {
            return Err(node_forbidden(&name, &message));
        }
    }
    let annotations = node.metadata.annotations.take().unwrap_or_default();
    let bounds = node_writes::kubelet_metadata(
        &name,
        false,
        (&BTreeMap::new(), &BTreeMap::new()),
        (Some(&labels), Some(&annotations)),
    );
    if let Err(node_writes::MetadataRefusal::Invalid(invalid)) = bounds {
        return Err(rejected(&invalid));
    }
    let mut causes = crate::validation::annotations(&annotations);
    if annotations.contains_key(crate::k8s::SOURCE_ANNOTATION) {
        causes.push(crate::validation::FieldError::forbidden(
            format!("metadata.annotations[{}]", crate::k8s::SOURCE_ANNOTATION),
            "records where the node came from, and is set by nodekeeper",
        ));
    }
    if !causes.is_empty() {
        return Err(invalid_fields("Node", &name, causes));
    }
    let (spec, status) = crate::k8s::node_registration(&node)
        .map_err(|causes| invalid_fields("Node", &name, causes))?;
    let node = s.controller.write(|reply| WriteRequest::Register {
        spec,
        annotations,
        status,
        reply,
    });
    let node = node.await.map_err(push_error)?;
    Ok(created(json_reply(&crate::k8s::NodeJson::shown(
        &node, None,
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_is_quoted_and_one_with_a_control_character_is_escaped_not_dropped() {
        let warnings = [
            r#"unknown field "spec.a\b""#.to_string(),
            "unknown field \"metadata.labels.x\ny\"".to_string(),
        ];
        let response = with_warnings(Response::default(), &warnings);
        let sent: Vec<_> = response
            .headers()
            .get_all(header::WARNING)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        assert_eq!(
            sent,
            [
                r#"299 - "unknown field \"spec.a\\b\"""#,
                r#"299 - "unknown field \"metadata.labels.x\ny\"""#,
            ]
        );
    }

    async fn content_type_of(request: axum::http::Request<()>) -> String {
        let (mut parts, ()) = request.into_parts();
        let ct = ContentType::from_request_parts(&mut parts, &())
            .await
            .unwrap();
        ct.as_str().to_string()
    }

    #[tokio::test]
    async fn the_content_type_is_read_as_the_header_map_reads_it() {
        let with = |value: &'static [u8]| {
            axum::http::Request::builder()
                .header(
                    header::CONTENT_TYPE,
                    HeaderValue::from_bytes(value).unwrap(),
                )
                .body(())
                .unwrap()
        };
        for value in [
            &b"application/strategic-merge-patch+json"[..],
            b"application/json; charset=utf-8",
            b"",
            // Not text: read as absent, as `content_type` reads it.
            b"caf\xe9",
        ] {
            let request = with(value);
            let expected = content_type(request.headers()).to_string();
            assert_eq!(content_type_of(request).await, expected, "{value:?}");
        }
        let bare = axum::http::Request::builder().body(()).unwrap();
        assert_eq!(content_type_of(bare).await, "");
    }

    #[test]
    fn a_list_directive_names_its_list_and_a_map_directive_names_all() {
        assert!(names_field("conditions", "conditions"));
        assert!(!names_field("nodeInfo", "conditions"));
        // What kubelets send with every status patch: only the conditions.
        assert!(names_field("$setElementOrder/conditions", "conditions"));
        assert!(!names_field("$setElementOrder/conditions", "addresses"));
        assert!(!names_field("$setElementOrder/conditions", "capacity"));
        assert!(names_field(
            "$deleteFromPrimitiveList/addresses",
            "addresses"
        ));
        // About the whole map: every field.
        assert!(names_field("$patch", "capacity"));
        assert!(names_field("$retainKeys", "nodeInfo"));
    }

    #[test]
    fn a_patch_naming_any_reported_field_pushes_all_six() {
        let of = |patch: serde_json::Value| PatchedFields::of(&patch).reported;
        // What a kubelet sends in the steady state: conditions only.
        assert!(!of(serde_json::json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": [{"type": "Ready", "lastHeartbeatTime": "2026-12-04T00:00:00Z"}]
        }})));
        assert!(of(serde_json::json!({"status": {"images": []}})));
        // A field the kubelet no longer reports is deleted with a null.
        assert!(of(serde_json::json!({"status": {"volumesInUse": null}})));
        assert!(of(
            serde_json::json!({"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}})
        ));
        assert!(of(serde_json::json!({"status": {"$patch": "replace"}})));
        let mut status = PushedStatus {
            reported: Some(crate::model::Reported::sample()),
            ..PushedStatus::default()
        };
        PatchedFields::of(&serde_json::json!({"status": {"conditions": []}}))
            .keep_only(&mut status);
        assert_eq!(status.reported, None);
    }

    #[test]
    fn a_patch_with_a_directive_at_the_top_renders_everything() {
        assert!(whole(
            &serde_json::json!({"$patch": "replace", "status": {}})
        ));
        assert!(whole(&serde_json::json!([1])));
        assert!(!whole(&serde_json::json!({"status": {"conditions": []}})));
    }
}
