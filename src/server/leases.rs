//! Node Leases as kubelets keep them (`kube-node-lease/leases/{name}`):
//! read, listed, created, replaced and patched. Each write is checked here
//! and decided by the controller; errors are the Statuses kubectl shows.
//!
//! A node whose kubelet keeps no Lease (a probed node) is served the one its
//! heartbeats make ([`crate::k8s::heartbeat_lease`]), as kube-apiserver
//! would hold one for every node whose kubelet is alive: `kubectl describe
//! node` reads it. A kubelet that writes it back (`PUT`, `PATCH`) makes a
//! Lease of its own in its place.

// Checks return a ready response as their error, built once per refused
// request: its size does not matter.
#![allow(clippy::result_large_err)]

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::coordination::v1::Lease as KubeLease;

use super::authz::{admit, Kind};
use super::push::{
    body_json, conflict, created, invalid, json_body, json_reply, malformed, patched, push_error,
    ContentType,
};
use super::{refusal, Answer, AppState};
use crate::controller::PushError;
use crate::k8s::LeaseJson;
use crate::model::{Lease, NODE_LEASE_NAMESPACE};

fn check_namespace(namespace: &str) -> Result<(), Response> {
    if namespace == NODE_LEASE_NAMESPACE {
        return Ok(());
    }
    Err(refusal(
        StatusCode::NOT_FOUND,
        format!("nodekeeper keeps node Leases only, in namespace {NODE_LEASE_NAMESPACE:?} (not {namespace:?})"),
    ))
}

fn lease_not_found(name: &str) -> Response {
    super::not_found("leases.coordination.k8s.io", name)
}

/// `GET .../namespaces/kube-node-lease/leases/{name}`.
pub(crate) async fn get_lease(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Answer {
    check_namespace(&namespace)?;
    let (lease, _) = served_lease(&s, &name).ok_or_else(|| lease_not_found(&name))?;
    Ok(json_reply(&LeaseJson(&lease)))
}

/// The Lease served for `name`, and whether it is the kubelet's own: its
/// stored Lease, else the one its node's heartbeats make, if the node is
/// registered.
fn served_lease(s: &AppState, name: &str) -> Option<(Lease, bool)> {
    if let Some(lease) = s.view.lease(name) {
        return Some((lease, true));
    }
    s.view
        .with_node(name, crate::k8s::heartbeat_lease)
        .map(|lease| (lease, false))
}

/// `GET /apis/coordination.k8s.io/v1/leases`: every namespace, which is one here.
pub(crate) async fn list_all_leases(State(s): State<AppState>) -> Response {
    lease_list(&s)
}

/// `GET .../namespaces/kube-node-lease/leases`.
pub(crate) async fn list_leases(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
) -> Answer {
    check_namespace(&namespace)?;
    Ok(lease_list(&s))
}

fn lease_list(s: &AppState) -> Response {
    let mut leases: std::collections::BTreeMap<String, Lease> = s
        .view
        .leases()
        .into_iter()
        .map(|lease| (lease.name.clone(), lease))
        .collect();
    for (node, beat) in s.view.list() {
        if !leases.contains_key(&node.name) {
            leases.insert(node.name.clone(), crate::k8s::heartbeat_lease(&node, beat));
        }
    }
    Json(crate::k8s::lease_list(
        leases.values(),
        s.store.durable_seq(),
    ))
    .into_response()
}

/// `POST .../namespaces/kube-node-lease/leases`: a kubelet's first renewal.
pub(crate) async fn create_lease(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
    caller: super::Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    check_namespace(&namespace)?;
    let kube = json_body::<KubeLease>(ct.as_str(), &body)?;
    let name = kube.metadata.name.clone().unwrap_or_default();
    admit(&caller, Kind::Lease, &name)?;
    let lease = crate::k8s::lease(&kube, &name).map_err(|e| invalid("Lease", &name, e))?;
    let lease = s.controller.create_lease(lease).await.map_err(push_error)?;
    Ok(created(json_reply(&LeaseJson(&lease))))
}

/// `PUT .../leases/{name}`: a renewal.
pub(crate) async fn put_lease(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    caller: super::Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    check_namespace(&namespace)?;
    admit(&caller, Kind::Lease, &name)?;
    let (lease, expected) = renewal(ct.as_str(), &body, &name)?;
    if !s.view.has_lease(&name) && s.view.with_node(&name, |_, _| ()).is_some() {
        return replace_served(&s, lease).await;
    }
    update_lease(&s, lease, expected).await
}

/// A kubelet's write of the Lease its node's heartbeats made: the kubelet's
/// own Lease from now on. If another write made one first, the writer reads
/// that one and writes again, as after any conflict.
async fn replace_served(s: &AppState, lease: Lease) -> Answer {
    match s.controller.create_lease(lease).await {
        Ok(lease) => Ok(json_reply(&LeaseJson(&lease))),
        Err(PushError::AlreadyExists { kind, name }) => Err(conflict(kind, &name)),
        Err(e) => Err(push_error(e)),
    }
}

/// The Lease a `PUT` of `body` (sent as `ct`) writes and the version it
/// expects, read through k8s-openapi's Lease, which says what is refused.
fn renewal(ct: &str, body: &Bytes, name: &str) -> Result<(Lease, Option<u64>), Response> {
    let body = body_json(ct, body)?;
    let kube = serde_json::from_slice::<KubeLease>(&body).map_err(|e| malformed(&e))?;
    let lease = crate::k8s::lease(&kube, name).map_err(|e| invalid("Lease", name, e))?;
    let expected =
        crate::k8s::expected_version(&kube.metadata).map_err(|e| invalid("Lease", name, e))?;
    Ok((lease, expected))
}

/// `PATCH .../leases/{name}`.
pub(crate) async fn patch_lease(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    caller: super::Caller,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    check_namespace(&namespace)?;
    admit(&caller, Kind::Lease, &name)?;
    let (current, own) = served_lease(&s, &name).ok_or_else(|| lease_not_found(&name))?;
    let current = serde_json::to_value(LeaseJson(&current)).map_err(super::internal)?;
    let kube = patched::<KubeLease>(ct.as_str(), &body, current)?;
    // The patch applies to the current Lease; its version is not a precondition.
    let lease = crate::k8s::lease(&kube, &name).map_err(|e| invalid("Lease", &name, e))?;
    if own {
        update_lease(&s, lease, None).await
    } else {
        replace_served(&s, lease).await
    }
}

async fn update_lease(s: &AppState, lease: Lease, expected: Option<u64>) -> Answer {
    let lease = s.controller.update_lease(lease, expected).await;
    Ok(json_reply(&LeaseJson(&lease.map_err(push_error)?)))
}
