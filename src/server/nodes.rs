//! `/api/v1/nodes`: nodes as the Kubernetes API serves them (lists with
//! selectors and pages, single nodes, as JSON or as a kubectl Table), and
//! what operators write to them (`PATCH`, `PUT`, `DELETE` of a node).

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::core::v1::Node as KubeNode;

use super::node_json;
use super::node_writes::{self, NodeWrite, PatchFormat, WriteError};
use super::params::{wants_table, DeleteOptions, ListParams};
use super::{
    bad_request, forbidden, not_found, paging, refusal, table, Answer, AppState, Caller, Identity,
};
use crate::controller::{Preconditions, PushError, WriteRequest};
use crate::model::{Micros, Node};

/// How often a patch without a precondition is applied again when the
/// node changed under it, as kube-apiserver's GuaranteedUpdate applies it
/// until it lands. Each time follows another write to the node that landed
/// first, so only a thousand writes to one node during one patch reach it:
/// 300 writers patching one node at once take 299 at most.
const PATCH_RETRIES: usize = 1_000;

/// How long a patch that met a conflict waits for the node's newer version
/// to be published before it is applied again; past this the conflict is
/// answered.
const PATCH_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The fields nodes can be selected by, as in kube-apiserver.
const NODE_FIELDS: &[&str] = &["metadata.name", "spec.unschedulable"];

pub(crate) async fn list_nodes(
    State(s): State<AppState>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    let (params, watch) = ListParams::list(params)?;
    if watch {
        return self::watch(s, &headers, &params).await;
    }
    let query = params.query(NODE_FIELDS).map_err(bad_request)?;

    // The version the view is known to show every change up to, read before
    // the view itself: the store's durable seq can be ahead of the view for
    // a moment, and a list+watch from there would miss that change.
    let version = s.view.published();
    let table = wants_table(&headers);
    if query.unfiltered() && !table {
        // Every node: the snapshot shared by all lists while nothing changes.
        let all = s.node_json.all(&s.view).await;
        let page = paging::page(
            &all.items,
            |i| &i.name,
            params.limit,
            query.continue_from.as_ref(),
            version,
            true,
        );
        return Ok(s.node_json.list_response(all, page.range, &page.metadata));
    }
    // The view is in name order, as etcd keys are: pages follow it.
    let (stamp, mut shown) = s.view.shown();
    if !query.unfiltered() {
        shown.retain(|s| selected(&query, &s.node));
    }
    let page = paging::page(
        &shown,
        |s| &s.node.name,
        params.limit,
        query.continue_from.as_ref(),
        version,
        query.unfiltered(),
    );
    let shown = &shown[page.range];
    if table {
        let rows: Vec<_> = shown
            .iter()
            .map(|s| (Node::clone(&s.node), s.beat))
            .collect();
        let table = table::node_table(&rows, page.metadata, query.include, Micros::now());
        return Ok(Json(table).into_response());
    }
    let items = s.node_json.encode(shown).await;
    let count = items.len();
    Ok(s.node_json.list_response(
        std::sync::Arc::new(node_json::Encoded { stamp, items }),
        0..count,
        &page.metadata,
    ))
}

/// Whether a list's or a watch's selectors pick `node`.
fn selected(query: &super::params::ListQuery, node: &Node) -> bool {
    let unschedulable = if node.unschedulable { "true" } else { "false" };
    query.fields.matches(|field| match field {
        "metadata.name" => Some(node.name.as_str()),
        "spec.unschedulable" => Some(unschedulable),
        _ => None,
    }) && (query.labels.is_empty() || query.labels.matches(&crate::k8s::node_labels(node)))
}

pub(crate) async fn get_node(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    let include = ListParams::get(params)?;
    let shown = s
        .view
        .shown_node(&name)
        .ok_or_else(|| not_found("nodes", &name))?;
    if wants_table(&headers) {
        // A single object's Table carries the object's resourceVersion.
        let metadata = super::at_version(shown.node.resource_version);
        let row = (Node::clone(&shown.node), shown.beat);
        let table = table::node_table(&[row], metadata, include, Micros::now());
        return Ok(Json(table).into_response());
    }
    Ok(node_json::response(s.node_json.one(shown).await))
}

/// `?watch=true`: the same selectors and representation as the list, as a stream.
async fn watch(s: AppState, headers: &HeaderMap, params: &ListParams) -> Answer {
    let super::watch::WatchRequest {
        query,
        bookmarks,
        timeout,
    } = super::watch::watch_request(params, NODE_FIELDS)?;
    let include = query.include;
    let scope = match query.fields.required("metadata.name") {
        Some(name) => super::watch::Scope::One(name.to_string()),
        None => super::watch::Scope::All,
    };
    let filter: super::watch::NodeFilter =
        std::sync::Arc::new(move |node: &Node| selected(&query, node));
    // kubectl get -w asks for Tables: each event carries a one-row Table.
    let render: Option<super::watch::NodeRender> = wants_table(headers).then(|| {
        let render: super::watch::NodeRender =
            std::sync::Arc::new(move |node: &crate::model::Node| {
                let metadata = super::at_version(node.resource_version);
                let table =
                    table::node_table(&[(node.clone(), None)], metadata, include, Micros::now());
                serde_json::to_value(table).unwrap_or_default()
            });
        render
    });
    let watch = super::watch::WatchParams {
        resource_version: params.resource_version.clone(),
        timeout,
        bookmarks,
        filter: Some(filter),
        scope,
        render,
        kind: None,
    };
    super::watch::watch_nodes(s, watch).await
}

/// Who an operator write is recorded as: the token's user, or for a caller
/// without one, `system:anonymous` and the client it said it was.
fn writer(identity: Identity, headers: &HeaderMap) -> String {
    let Identity(user) = identity;
    if user != super::auth::ANONYMOUS {
        return user;
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split_whitespace().next())
        .filter(|a| !a.is_empty())
        .map(|a| a.chars().take(64).collect::<String>());
    match agent {
        Some(agent) => format!("{user} ({agent})"),
        None => user,
    }
}

/// Node tokens push status and Leases; cordons, labels, taints and deletes
/// are for operators.
fn check_operator(caller: &Caller, name: &str) -> Result<(), Response> {
    match caller {
        Caller::Node(own) => Err(forbidden(format!(
            "nodes {name:?} is forbidden: node {own:?} may update its own status and Lease \
             only; cordons, labels, annotations, taints and deletes need an operator's token"
        ))),
        Caller::Limited => Err(forbidden(format!(
            "nodes {name:?} is forbidden: only operators may change a node this way"
        ))),
        Caller::Anonymous | Caller::Operator => Ok(()),
    }
}

pub(super) fn write_error(e: WriteError) -> Response {
    match e {
        WriteError::BadRequest(m) => bad_request(m),
        WriteError::Conflict(m) => refusal(StatusCode::CONFLICT, m),
        WriteError::TooLarge(m) => refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Request entity too large: {m}"),
        ),
        WriteError::Invalid(i) => super::push::rejected(&i),
    }
}

/// Sends a prepared write to the controller.
async fn commit(
    s: &AppState,
    name: &str,
    prepared: node_writes::Prepared,
    by: &str,
) -> Result<crate::model::Node, PushError> {
    s.controller
        .write(|reply| WriteRequest::Edit {
            name: name.to_string(),
            fields: prepared.fields,
            expected_version: prepared.expected_version,
            by: by.to_string(),
            reply,
        })
        .await
}

/// `PATCH /api/v1/nodes/{name}`: merge, strategic merge or JSON patch of
/// the fields operators own, applied to the node as it is now (again, if
/// the controller changed it meanwhile), as kube-apiserver does.
pub(crate) async fn patch_node(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    identity: Identity,
    headers: HeaderMap,
    Query(query): Query<super::openapi::WriteQuery>,
    body: Bytes,
) -> Answer {
    check_operator(&caller, &name)?;
    let content_type = super::push::content_type(&headers);
    let Some(format) = PatchFormat::from_content_type(content_type) else {
        let accepted = "application/json-patch+json, application/merge-patch+json, \
                        application/strategic-merge-patch+json";
        return Err(super::push::unsupported_type(content_type, accepted));
    };
    let body: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| bad_request(format!("the patch is not valid JSON: {e}")))?;
    // A JSON patch names no fields by key: only merge patches are checked.
    let warnings = super::openapi::check_fields(&query, "v1", "Node", &body)?;
    let by = writer(identity, &headers);
    let write = NodeWrite::Patch { format, body };
    // Subscribed before the first read, so no version published after it is missed.
    let mut published = s.view.subscribe();
    for _ in 0..PATCH_RETRIES {
        let (node, beat) = s.view.get(&name).ok_or_else(|| not_found("nodes", &name))?;
        let prepared = node_writes::prepare(&node, beat, &write).map_err(write_error)?;
        match commit(&s, &name, prepared, &by).await {
            Ok(node) => {
                let answer = super::push::json_reply(&crate::k8s::NodeJson::shown(&node, None));
                return Ok(super::push::with_warnings(answer, &warnings));
            }
            // The node changed since it was read: apply the patch again to
            // the newer node, once it is published.
            Err(PushError::Conflict { .. }) => {
                if !newer_published(&s, &name, node.resource_version, &mut published).await {
                    break;
                }
            }
            Err(e) => return Err(super::push::push_error(e)),
        }
    }
    Err(super::push::conflict("nodes", &name))
}

/// Waits until the view shows node `name` at a version other than
/// `version` (or without it): `false` if none is published within
/// [`PATCH_RETRY_WAIT`].
async fn newer_published(
    s: &AppState,
    name: &str,
    version: u64,
    published: &mut tokio::sync::watch::Receiver<u64>,
) -> bool {
    let moved = async {
        loop {
            published.borrow_and_update();
            if s.view
                .get(name)
                .is_none_or(|(n, _)| n.resource_version != version)
            {
                return true;
            }
            if published.changed().await.is_err() {
                return false;
            }
        }
    };
    tokio::time::timeout(PATCH_RETRY_WAIT, moved)
        .await
        .unwrap_or(false)
}

/// `PUT /api/v1/nodes/{name}`: the whole object; its resourceVersion, if
/// given, must be the node's.
pub(crate) async fn put_node(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    identity: Identity,
    headers: HeaderMap,
    Query(query): Query<super::openapi::WriteQuery>,
    body: Bytes,
) -> Answer {
    use super::push::malformed;
    check_operator(&caller, &name)?;
    let json = super::push::body_json(super::push::content_type(&headers), &body)?;
    let value: serde_json::Value = serde_json::from_slice(&json).map_err(|e| malformed(&e))?;
    let warnings = super::openapi::check_fields(&query, "v1", "Node", &value)?;
    let object: KubeNode = serde_json::from_value(value).map_err(|e| malformed(&e))?;
    let (node, beat) = s.view.get(&name).ok_or_else(|| not_found("nodes", &name))?;
    let write = NodeWrite::Replace(Box::new(object));
    let prepared = node_writes::prepare(&node, beat, &write).map_err(write_error)?;
    let node = commit(&s, &name, prepared, &writer(identity, &headers))
        .await
        .map_err(super::push::push_error)?;
    let answer = super::push::json_reply(&crate::k8s::NodeJson::shown(&node, None));
    Ok(super::push::with_warnings(answer, &warnings))
}

/// `DELETE /api/v1/nodes/{name}`: a node no source lists is deleted (its
/// history stays); one a source lists would come back, and is refused.
pub(crate) async fn delete_node(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    identity: Identity,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    check_operator(&caller, &name)?;
    let options: DeleteOptions = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| bad_request(format!("the DeleteOptions are not valid JSON: {e}")))?
    };
    let pre = options.preconditions.unwrap_or_default();
    let resource_version = match pre.resource_version.as_deref() {
        None | Some("") => None,
        Some(v) => Some(v.parse().map_err(|_| {
            bad_request(format!(
                "preconditions.resourceVersion: invalid value {v:?}"
            ))
        })?),
    };
    let preconditions = Preconditions {
        uid: pre.uid.filter(|u| !u.is_empty()),
        resource_version,
    };
    let node = s
        .controller
        .write(|reply| WriteRequest::Delete {
            name: name.clone(),
            preconditions,
            by: writer(identity, &headers),
            reply,
        })
        .await
        .map_err(super::push::push_error)?;
    // What kube-apiserver answers for an object deleted at once.
    Ok(Json(crate::k8s::deleted("nodes", &name, &node.uid)).into_response())
}
