//! The API a real kubelet uses, call by call, against the real binary
//! (docs/kubelet-api.md lists the calls with their upstream lines).
//! Bodies are sent as a v1.33 kubelet sends them: creates and updates in
//! Kubernetes protobuf (`pkg/kubelet/apis/config/v1beta1/defaults.go:218`,
//! `cmd/kubelet/app/server.go:1214-1224`), with
//! `Accept: application/vnd.kubernetes.protobuf,application/json`
//! (`server.go:1221`), written by the simulator's own encoder.

mod common;

use common::{client, Controller, TestSite};
use nodekeeper_sim::protobuf::{encode, PROTOBUF};
use serde_json::{json, Value};

const ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

/// A request as a kubelet makes it: `body` sent in protobuf when
/// `content_type` is [`PROTOBUF`], else as JSON.
async fn kubelet(
    c: &Controller,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, String, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let bytes = if content_type == PROTOBUF {
        encode(body)
    } else {
        body.to_string().into_bytes()
    };
    let response = client()
        .request(method, format!("{}{path}", c.url))
        .header("accept", ACCEPT)
        .header("content-type", content_type)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let code = response.status().as_u16();
    let answer_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = response.text().await.unwrap();
    (
        code,
        answer_type,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The Node a kubelet registers (`pkg/kubelet/kubelet_node_status.go:92`,
/// built by `initialNode`): labels, the attach-detach annotation, status.
fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {},
        "status": {
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "conditions": [{
                "type": "Ready", "status": "False",
                "lastHeartbeatTime": "2026-11-30T09:00:00Z", "lastTransitionTime": "2026-11-30T09:00:00Z",
                "reason": "KubeletNotReady", "message": "CSINode is not yet initialized",
            }],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.9"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": "v1.33.13", "operatingSystem": "linux", "architecture": "amd64",
                         "machineID": "m", "systemUUID": "u", "bootID": "b", "kernelVersion": "6.1",
                         "osImage": "Debian", "containerRuntimeVersion": "containerd://2.0.0", "kubeProxyVersion": ""},
        },
    })
}

/// The Lease a kubelet creates and renews
/// (`component-helpers/apimachinery/lease/controller.go:169`, `:190`).
fn lease(name: &str, renew: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_registers_and_renews_in_protobuf() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);

    let (code, answer_type, created) =
        kubelet(&c, "POST", "/api/v1/nodes", PROTOBUF, &node("edge-9")).await;
    assert_eq!(code, 201, "{created}");
    // Answered in JSON, which the kubelet's Accept admits and client-go
    // decodes by the answer's type (client-go rest/request.go).
    assert!(answer_type.starts_with("application/json"), "{answer_type}");
    assert_eq!(created["metadata"]["name"], "edge-9");
    assert_eq!(created["metadata"]["labels"]["kubernetes.io/arch"], "amd64");
    assert_eq!(created["status"]["capacity"]["cpu"], "2");
    assert_eq!(created["status"]["nodeInfo"]["kubeletVersion"], "v1.33.13");
    let ready = &created["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["message"], "CSINode is not yet initialized");

    // Again: 409, which sends a kubelet on to GET its node (`:103-112`).
    let (code, _, again) = kubelet(&c, "POST", "/api/v1/nodes", PROTOBUF, &node("edge-9")).await;
    assert_eq!(code, 409, "{again}");
    assert_eq!(again["reason"], "AlreadyExists");

    let (code, _, l) = kubelet(
        &c,
        "POST",
        LEASES,
        PROTOBUF,
        &lease("edge-9", "2026-11-30T09:00:00.250000Z"),
    )
    .await;
    assert_eq!(code, 201, "{l}");
    assert_eq!(l["spec"]["renewTime"], "2026-11-30T09:00:00.250000Z");
    let (code, _, l) = kubelet(
        &c,
        "PUT",
        &format!("{LEASES}/edge-9"),
        PROTOBUF,
        &lease("edge-9", "2026-11-30T09:00:10.500000Z"),
    )
    .await;
    assert_eq!(code, 200, "{l}");
    assert_eq!(l["spec"]["renewTime"], "2026-11-30T09:00:10.500000Z");
    assert_eq!(l["spec"]["leaseDurationSeconds"], 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_cannot_be_read_get_the_status_that_says_why() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let raw = |method: &str, path: &str, content_type: &'static str, body: Vec<u8>| {
        let request = client()
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{}{path}", c.url),
            )
            .header("content-type", content_type)
            .body(body);
        async move {
            let r = request.send().await.unwrap();
            let code = r.status().as_u16();
            (code, r.json::<Value>().await.unwrap())
        }
    };
    // Not the protobuf envelope.
    let (code, s) = raw("POST", "/api/v1/nodes", PROTOBUF, b"{}".to_vec()).await;
    assert_eq!(code, 400, "{s}");
    assert!(s["message"].as_str().unwrap().contains("k8s\\x00"), "{s}");
    // The envelope cut short.
    let mut cut = encode(&node("edge-8"));
    cut.truncate(cut.len() / 2);
    let (code, s) = raw("POST", "/api/v1/nodes", PROTOBUF, cut).await;
    assert_eq!(code, 400, "{s}");
    // A kind sent to the wrong place: a Lease posted as a Node.
    let (code, s) = raw(
        "POST",
        "/api/v1/nodes",
        PROTOBUF,
        encode(&lease("edge-8", "2026-11-30T09:00:00.000000Z")),
    )
    .await;
    assert_eq!(code, 400, "{s}");
    // A type nodekeeper has no reader for: 415, naming the ones it has.
    let (code, s) = raw("POST", "/api/v1/nodes", "application/cbor", vec![0xa0]).await;
    assert_eq!(code, 415, "{s}");
    assert!(s["message"].as_str().unwrap().contains(PROTOBUF), "{s}");
}
