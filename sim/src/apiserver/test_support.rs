//! What the fake API server's tests share: a kube client without retries,
//! objects to store, and raw requests.

pub(super) use std::io;

pub(super) use ::kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
pub(super) use ::kube::core::Status;
pub(super) use ::kube::ResourceExt;
pub(super) use k8s_openapi::api::coordination::v1::Lease;
pub(super) use k8s_openapi::api::core::v1::{Node, Pod};
pub(super) use tokio::time::timeout;

pub(super) use super::{FakeApiServer, BODY_LIMIT};
pub(super) use serde_json::{json, Value};
use std::fmt;
pub(super) use std::time::Duration;
/// Upper bound for things that happen at once; only reached when a test fails.
pub(super) const LIMIT: Duration = Duration::from_secs(10);

/// A kube client as the mirror builds one, minus its retries of 429, 503
/// and 504, so each test sees every answer.
pub(super) fn client(server: &FakeApiServer) -> ::kube::Client {
    nodekeeper::install_crypto_provider();
    let mut config = ::kube::Config::new(server.url().parse().expect("the URL parses"));
    config.default_retry = false;
    ::kube::Client::try_from(config).expect("the client builds")
}

/// The `Status` of a request that must have failed with one.
pub(super) fn api_error<T: fmt::Debug>(result: Result<T, ::kube::Error>) -> Box<Status> {
    match result {
        Err(::kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub(super) fn node_json(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"site": "a"}},
        "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2025-01-01T00:00:00Z"},
                {"type": "MemoryPressure", "status": "False"}
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
        }
    })
}

pub(super) fn node(name: &str) -> Node {
    serde_json::from_value(node_json(name)).expect("a valid Node")
}

pub(super) fn pod_json(namespace: &str, name: &str, node: Option<&str>, app: &str) -> Value {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}]},
        "status": {"phase": "Running"}
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = node.into();
    }
    pod
}

pub(super) fn rv(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .expect("a numeric resourceVersion")
}

/// A request kube's typed API cannot send, through the same client.
pub(super) async fn raw(
    client: &::kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Result<String, ::kube::Error> {
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body)
        .expect("a valid request");
    client.request_text(request).await
}

/// The events of a watch of nodes, collected until it ends or `n` came.
pub(super) async fn watch_events(
    nodes: &Api<Node>,
    params: &::kube::api::WatchParams,
    from: &str,
    n: usize,
) -> Vec<(String, String, u16)> {
    use ::kube::api::WatchEvent;
    use futures_util::StreamExt;
    let stream = nodes.watch(params, from).await.expect("the watch starts");
    let mut stream = std::pin::pin!(stream);
    let mut seen = Vec::new();
    while seen.len() < n {
        let Some(event) = timeout(LIMIT, stream.next())
            .await
            .expect("an event in time")
        else {
            break;
        };
        seen.push(match event.expect("an event") {
            WatchEvent::Added(n) => ("ADDED".into(), n.name_any(), 0),
            WatchEvent::Modified(n) => ("MODIFIED".into(), n.name_any(), 0),
            WatchEvent::Deleted(n) => ("DELETED".into(), n.name_any(), 0),
            WatchEvent::Bookmark(b) => ("BOOKMARK".into(), b.metadata.resource_version, 0),
            WatchEvent::Error(e) => ("ERROR".into(), e.reason.clone(), e.code),
        });
    }
    seen
}

pub(super) fn ev(kind: &str, name: &str) -> (String, String, u16) {
    (kind.into(), name.into(), 0)
}
