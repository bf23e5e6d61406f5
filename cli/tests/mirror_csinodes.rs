//! The mirror carries each node's CSINode to the API server with its Node
//! (src/mirror/csinodes.rs): created with an owner reference to the API
//! server's Node, replaced when the kubelet's changes, deleted on its own
//! and with its node. Against the fake API server's CSINodes.

mod common;

use common::*;
use nodekeeper_sim::apiserver::FakeApiServer;
use serde_json::{json, Value};

const CSINODES: &str = "/apis/storage.k8s.io/v1/csinodes";

fn mirror_args(api: &FakeApiServer) -> Vec<String> {
    [
        "--master",
        &api.url(),
        "--kube-api-timeout",
        "2s",
        "--leader-elect-lease-duration",
        "2s",
        "--leader-elect-renew-deadline",
        "1s",
        "--leader-elect-retry-period",
        "200ms",
        "--allow-node-registration",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn upstream(what: &str, check: impl Fn() -> bool) {
    eventually(what, || {
        let ok = check();
        async move { ok }
    })
    .await;
}

/// The CSINode a kubelet creates (kubernetes
/// `pkg/volume/csi/nodeinfomanager/nodeinfomanager.go:459-483`).
fn csinode(name: &str, node_uid: &str) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {
            "name": name,
            "annotations": {"storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/gce-pd"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {"drivers": []},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_csinode_goes_up_changes_and_goes_with_it() {
    let api = FakeApiServer::start().await;
    let site = TestSite::unlisted().start();
    let c = site.controller(&mirror_args(&api));
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "edge-51"},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.9"}]},
    });
    let (code, n) = c.call("POST", "/api/v1/nodes").json(&node).send().await;
    assert_eq!(code, 201, "{n}");
    let here = n["metadata"]["uid"].as_str().unwrap().to_string();
    upstream("edge-51 created upstream", || api.node("edge-51").is_some()).await;
    let there = api.node("edge-51").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();

    // Created: owned by the API server's Node, not by nodekeeper's uid.
    let (code, s) = c
        .call("POST", CSINODES)
        .json(&csinode("edge-51", &here))
        .send()
        .await;
    assert_eq!(code, 201, "{s}");
    upstream("the CSINode created upstream", || {
        api.csinode("edge-51").is_some_and(|c| {
            c["metadata"]["ownerReferences"][0]["uid"] == there.as_str()
                && c["metadata"]["annotations"]["storage.alpha.kubernetes.io/migrated-plugins"]
                    == "kubernetes.io/gce-pd"
        })
    })
    .await;

    // A driver registers: replaced upstream.
    let (_, mut kept) = c.call("GET", &format!("{CSINODES}/edge-51")).send().await;
    kept["spec"]["drivers"] = json!([{"name": "csi.example.com", "nodeID": "edge-51"}]);
    let (code, s) = c
        .call("PUT", &format!("{CSINODES}/edge-51"))
        .json(&kept)
        .send()
        .await;
    assert_eq!(code, 200, "{s}");
    upstream("the driver upstream", || {
        api.csinode("edge-51")
            .is_some_and(|c| c["spec"]["drivers"][0]["nodeID"] == "edge-51")
    })
    .await;

    // Deleted on its own: deleted upstream; the Node stays.
    let (code, _) = c
        .call("DELETE", &format!("{CSINODES}/edge-51"))
        .send()
        .await;
    assert_eq!(code, 200);
    upstream("the CSINode deleted upstream", || {
        api.csinode("edge-51").is_none()
    })
    .await;
    assert!(api.node("edge-51").is_some());

    // Created again, then its node deleted: both go upstream.
    let (code, _) = c
        .call("POST", CSINODES)
        .json(&csinode("edge-51", &here))
        .send()
        .await;
    assert_eq!(code, 201);
    upstream("the CSINode back upstream", || {
        api.csinode("edge-51").is_some()
    })
    .await;
    let (code, _) = c.call("DELETE", "/api/v1/nodes/edge-51").send().await;
    assert_eq!(code, 200);
    upstream("the node and its CSINode deleted upstream", || {
        api.node("edge-51").is_none() && api.csinodes().is_empty()
    })
    .await;
}
