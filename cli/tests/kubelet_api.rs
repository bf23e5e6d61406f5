//! The API a real kubelet uses, call by call, against the real binary
//! (docs/kubelet-api.md lists the calls with their upstream lines).
//! Bodies are sent as a v1.33 kubelet sends them: creates and updates in
//! Kubernetes protobuf (`pkg/kubelet/apis/config/v1beta1/defaults.go:218`,
//! `cmd/kubelet/app/server.go:1214-1224`), with
//! `Accept: application/vnd.kubernetes.protobuf,application/json`
//! (`server.go:1221`), written by the simulator's own encoder.

mod common;

use common::{client, Controller, Kubectl, TestSite};
use nodekeeper_sim::protobuf::{encode, PROTOBUF};
use serde_json::{json, Value};

const ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

/// A request as a kubelet makes it, with no token: `body` sent in protobuf
/// when `content_type` is [`PROTOBUF`], else as JSON: the status, the
/// answer's type and the answer.
async fn kubelet(
    c: &Controller,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, String, Value) {
    let answer = c
        .call(method, path)
        .token(None)
        .header("accept", ACCEPT)
        .kubelet_body(content_type, body)
        .answer()
        .await;
    (answer.code, answer.content_type, answer.body)
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

    // The kubelet names its Node as the Lease's owner at a renewal, and
    // reads the node for it only while the Lease it was answered has none
    // (pkg/kubelet/util/nodelease.go:32-38 `SetNodeOwnerFunc`): the owner
    // is kept and answered, or every renewal costs a node GET.
    let owner = json!([{"apiVersion": "v1", "kind": "Node", "name": "edge-9",
                        "uid": created["metadata"]["uid"]}]);
    let mut owned = lease("edge-9", "2026-11-30T09:00:20.000000Z");
    owned["metadata"]["ownerReferences"] = owner.clone();
    let (code, _, l) = kubelet(&c, "PUT", &format!("{LEASES}/edge-9"), PROTOBUF, &owned).await;
    assert_eq!(code, 200, "{l}");
    assert_eq!(l["metadata"]["ownerReferences"], owner, "{l}");
    let mut renewal = l.clone();
    renewal["spec"]["renewTime"] = json!("2026-11-30T09:00:30.000000Z");
    let (code, _, l) = kubelet(&c, "PUT", &format!("{LEASES}/edge-9"), PROTOBUF, &renewal).await;
    assert_eq!(code, 200, "{l}");
    let (code, _, got) = kubelet(
        &c,
        "GET",
        &format!("{LEASES}/edge-9"),
        "application/json",
        &Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["metadata"]["ownerReferences"], owner, "{got}");
    assert_eq!(got["spec"]["renewTime"], "2026-11-30T09:00:30.000000Z");
    // An owner without its uid is refused, as kube-apiserver refuses it.
    let mut bad = got.clone();
    bad["metadata"]["ownerReferences"][0]["uid"] = json!("");
    let (code, _, s) = kubelet(&c, "PUT", &format!("{LEASES}/edge-9"), PROTOBUF, &bad).await;
    assert_eq!(code, 422, "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("metadata.ownerReferences.uid"),
        "{s}"
    );
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

const CSINODES: &str = "/apis/storage.k8s.io/v1/csinodes";

/// The CSINode a kubelet creates at start (kubernetes
/// `pkg/volume/csi/nodeinfomanager/nodeinfomanager.go` `CreateCSINode`:
/// an owner reference to its Node, no drivers, the migrated-plugins
/// annotation set by `setMigrationAnnotation`).
fn csinode(name: &str, node_uid: &str) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {
            "name": name,
            "annotations": {"storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs,kubernetes.io/gce-pd"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {"drivers": []},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_initialises_its_csinode_and_it_is_kept_with_the_node() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let (code, _, n) = kubelet(&c, "POST", "/api/v1/nodes", PROTOBUF, &node("edge-7")).await;
    assert_eq!(code, 201, "{n}");

    // csi_plugin.go:986: wait until the API answers, 404 included.
    let (code, _, s) = kubelet(
        &c,
        "GET",
        &format!("{CSINODES}/edge-7?resourceVersion=0"),
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(code, 404, "{s}");
    assert_eq!(s["reason"], "NotFound");
    // nodeinfomanager.go:433, :459, :483: get (404), get the node, create.
    let (code, _, _) = kubelet(&c, "GET", &format!("{CSINODES}/edge-7"), "", &Value::Null).await;
    assert_eq!(code, 404);
    let (code, _, n) = kubelet(&c, "GET", "/api/v1/nodes/edge-7", "", &Value::Null).await;
    assert_eq!(code, 200);
    let uid = n["metadata"]["uid"].as_str().unwrap().to_string();
    let (code, _, created) =
        kubelet(&c, "POST", CSINODES, PROTOBUF, &csinode("edge-7", &uid)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["kind"], "CSINode");
    assert_eq!(
        created["metadata"]["ownerReferences"][0]["uid"],
        uid.as_str()
    );
    assert_eq!(created["spec"]["drivers"], json!([]));
    // Its version is the seq of its history entry, as a node's is.
    let created_rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(created["metadata"]["uid"]
        .as_str()
        .is_some_and(|u| !u.is_empty()));
    // Created again (a second kubelet start racing the first): 409.
    let (code, _, s) = kubelet(&c, "POST", CSINODES, PROTOBUF, &csinode("edge-7", &uid)).await;
    assert_eq!(code, 409, "{s}");
    assert_eq!(s["reason"], "AlreadyExists");

    // A driver registers (nodeinfomanager.go installDriverToCSINode): the
    // object read, a driver added, replaced with its resourceVersion.
    let mut with_driver = created.clone();
    with_driver["spec"]["drivers"] = json!([{"name": "csi.example.com", "nodeID": "edge-7", "topologyKeys": ["topology.example.com/zone"]}]);
    let (code, _, updated) = kubelet(
        &c,
        "PUT",
        &format!("{CSINODES}/edge-7"),
        PROTOBUF,
        &with_driver,
    )
    .await;
    assert_eq!(code, 200, "{updated}");
    let updated_rv: u64 = updated["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(updated_rv > created_rv, "{updated}");
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(updated["spec"]["drivers"][0]["nodeID"], "edge-7");
    // The same write from the stale version: a conflict, as kube-apiserver's.
    let (code, _, s) = kubelet(
        &c,
        "PUT",
        &format!("{CSINODES}/edge-7"),
        PROTOBUF,
        &with_driver,
    )
    .await;
    assert_eq!(code, 409, "{s}");
    assert_eq!(s["reason"], "Conflict");
    // Refused as kube-apiserver's validation refuses it.
    let mut no_id = updated.clone();
    no_id["spec"]["drivers"][0]["nodeID"] = json!("");
    let (code, _, s) = kubelet(
        &c,
        "PUT",
        &format!("{CSINODES}/edge-7"),
        "application/json",
        &no_id,
    )
    .await;
    assert_eq!(code, 422, "{s}");
    // Only for a registered node: nodekeeper keeps it with its node.
    let (code, _, s) = kubelet(
        &c,
        "POST",
        CSINODES,
        "application/json",
        &csinode("stranger", "x"),
    )
    .await;
    assert_eq!(code, 403, "{s}");

    // In the node's history.
    let event = c.wait_event("edge-7", "ObjectChanged").await;
    assert_eq!(event["resource"], "csinodes.storage.k8s.io");
    assert_eq!(event["action"], "created");
    let (_, history) = c.get("/v1/history?node=edge-7").await;
    let changes: Vec<String> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ObjectChanged")
        .map(|e| {
            format!(
                "{} {}",
                e["action"].as_str().unwrap(),
                e["summary"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            "created no CSI drivers",
            "updated CSI drivers csi.example.com"
        ]
    );
    // Listed, and discovered.
    let (code, list) = c.get(CSINODES).await;
    assert_eq!(code, 200);
    assert_eq!(list["kind"], "CSINodeList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, storage) = c.get("/apis/storage.k8s.io/v1").await;
    assert_eq!(storage["resources"][0]["name"], "csinodes");

    // Durable: a restart serves it as it was.
    drop(c);
    let c = site.controller_with(&["--allow-node-registration"]);
    let (code, again) = c.get(&format!("{CSINODES}/edge-7")).await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(again, updated);

    // Deleted with its node.
    let response = client()
        .delete(format!("{}/api/v1/nodes/edge-7", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let (code, _) = c.get(&format!("{CSINODES}/edge-7")).await;
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csinode_is_deleted_on_its_own() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let (code, _, n) = kubelet(&c, "POST", "/api/v1/nodes", PROTOBUF, &node("edge-6")).await;
    assert_eq!(code, 201, "{n}");
    let uid = n["metadata"]["uid"].as_str().unwrap();
    let (code, _, _) = kubelet(&c, "POST", CSINODES, PROTOBUF, &csinode("edge-6", uid)).await;
    assert_eq!(code, 201);
    let (code, _, gone) = kubelet(
        &c,
        "DELETE",
        &format!("{CSINODES}/edge-6"),
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{gone}");
    assert_eq!(gone["metadata"]["name"], "edge-6");
    let (code, _, s) = kubelet(
        &c,
        "DELETE",
        &format!("{CSINODES}/edge-6"),
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(code, 404, "{s}");
    // The node stays.
    let (code, _) = c.get("/api/v1/nodes/edge-6").await;
    assert_eq!(code, 200);
}

/// A reflector's first list and its watch, as client-go makes them
/// (`tools/cache/reflector.go`, `tools/pager/pager.go`): `limit=500&resourceVersion=0`,
/// then `allowWatchBookmarks=true&resourceVersion=RV&timeoutSeconds=…&watch=true`.
async fn list_then_watch(c: &Controller, path: &str, selector: &str, list_kind: &str) {
    let sep = if selector.is_empty() { "" } else { "&" };
    let (code, _, list) = kubelet(
        c,
        "GET",
        &format!("{path}?{selector}{sep}limit=500&resourceVersion=0"),
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{path}: {list}");
    assert_eq!(list["kind"], list_kind);
    assert_eq!(list["items"], json!([]));
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(rv.parse::<u64>().is_ok(), "{list}");
    // A watch from the list's version runs to its timeout, with nothing to send.
    let started = tokio::time::Instant::now();
    let response = client()
        .get(format!(
            "{}{path}?{selector}{sep}allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=1&watch=true",
            c.url
        ))
        .header("accept", ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "{path}");
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let body = response.text().await.unwrap();
    assert_eq!(body, "", "{path}: nothing of it is kept");
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelets_reflectors_list_and_watch_what_it_needs() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    // pkg/kubelet/kubelet.go:538-546: services with a cluster IP.
    list_then_watch(
        &c,
        "/api/v1/services",
        "fieldSelector=spec.clusterIP%21%3DNone",
        "ServiceList",
    )
    .await;
    // pkg/kubelet/config/apiserver.go:38: the pods bound to the node.
    list_then_watch(
        &c,
        "/api/v1/pods",
        "fieldSelector=spec.nodeName%3Dedge-5",
        "PodList",
    )
    .await;
    // pkg/kubelet/volume_host.go:70-73, runtimeclass_manager.go:38-39.
    list_then_watch(
        &c,
        "/apis/storage.k8s.io/v1/csidrivers",
        "",
        "CSIDriverList",
    )
    .await;
    list_then_watch(
        &c,
        "/apis/node.k8s.io/v1/runtimeclasses",
        "",
        "RuntimeClassList",
    )
    .await;
    // Field selectors are the resource's own, as kube-apiserver checks them.
    let (code, _, s) = kubelet(
        &c,
        "GET",
        "/api/v1/services?fieldSelector=spec.nodeName%3Dx",
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(code, 400, "{s}");
    assert_eq!(s["message"], "field label not supported: spec.nodeName");
    for (path, resource) in [
        ("/api/v1/namespaces/default/services/kubernetes", "services"),
        (
            "/apis/storage.k8s.io/v1/csidrivers/csi.example.com",
            "csidrivers.storage.k8s.io",
        ),
        (
            "/apis/node.k8s.io/v1/runtimeclasses/runc",
            "runtimeclasses.node.k8s.io",
        ),
    ] {
        let (code, _, s) = kubelet(&c, "GET", path, "", &Value::Null).await;
        assert_eq!(code, 404, "{path}: {s}");
        assert_eq!(s["details"]["kind"], resource);
    }
    // Discovered: /apis names node.k8s.io, each group its resources.
    let (_, apis) = c.get("/apis").await;
    let groups: Vec<&str> = apis["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        groups,
        [
            "coordination.k8s.io",
            "storage.k8s.io",
            "node.k8s.io",
            "events.k8s.io",
            "certificates.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io"
        ]
    );
    let (_, node_v1) = c.get("/apis/node.k8s.io/v1").await;
    assert_eq!(node_v1["resources"][0]["name"], "runtimeclasses");
}

/// What a client with client-go's `WatchListClient` gate on sends first
/// (`tools/cache/reflector.go` `watchList`), refused as a v1.33
/// kube-apiserver refuses it with its `WatchList` gate at its default
/// (apimachinery `pkg/apis/meta/internalversion/validation/validation.go`
/// `validateWatchOptions`), so the client falls back to list and watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_lists_are_refused_so_clients_fall_back() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let streaming = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    for path in [
        "/api/v1/nodes",
        "/api/v1/pods",
        "/api/v1/services",
        "/apis/storage.k8s.io/v1/csidrivers",
        "/apis/node.k8s.io/v1/runtimeclasses",
    ] {
        let (code, _, s) =
            kubelet(&c, "GET", &format!("{path}?{streaming}"), "", &Value::Null).await;
        assert_eq!(code, 422, "{path}: {s}");
        assert_eq!(
            s,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                "reason": "Invalid",
                "details": {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [{
                    "reason": "FieldValueForbidden",
                    "message": "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                    "field": "sendInitialEvents",
                }]},
                "code": 422,
            }),
            "{path}"
        );
    }
    // Decoded before validated, validated before the field labels are
    // converted (apiserver `pkg/endpoints/handlers/get.go` `ListResource`):
    // a malformed selector beside them is a 400, a field label nodes lack a 422.
    for (selector, code) in [
        ("labelSelector=a%20in%20(b", 400),
        ("fieldSelector=a", 400),
        ("fieldSelector=spec.nodeName%3Dx", 422),
    ] {
        let path = format!("/api/v1/nodes?{selector}&{streaming}");
        let (got, _, s) = kubelet(&c, "GET", &path, "", &Value::Null).await;
        assert_eq!(got, code, "{path}: {s}");
    }
    // resourceVersionMatch on a plain watch is refused too.
    let (code, _, s) = kubelet(
        &c,
        "GET",
        "/api/v1/nodes?watch=true&resourceVersionMatch=NotOlderThan",
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(code, 422, "{s}");
    assert_eq!(s["details"]["causes"][0]["field"], "resourceVersionMatch");
}

/// A Node event as the kubelet's recorder posts it (client-go
/// `tools/record/event.go` `makeEvent`; the node reference of
/// `pkg/kubelet/kubelet.go:554-559`: uid = the node's name).
fn node_event(node: &str, reason: &str, message: &str, nanos: u64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{node}.{nanos:x}"), "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": node, "uid": node},
        "reason": reason, "message": message,
        "source": {"component": "kubelet", "host": node},
        "firstTimestamp": "2026-11-30T09:00:00Z", "lastTimestamp": "2026-11-30T09:00:00Z",
        "count": 1, "type": "Normal",
        "reportingComponent": "kubelet", "reportingInstance": node,
    })
}

/// kubectl (v1.32 here) with nothing from the environment: its stdout.
async fn kubectl(c: &Controller, dir: &std::path::Path, args: &[&str]) -> String {
    Kubectl::new(&c.url, dir).ok(args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelets_events_are_kept_in_its_nodes_history_and_shown_by_kubectl() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let (code, _, n) = kubelet(&c, "POST", "/api/v1/nodes", PROTOBUF, &node("edge-4")).await;
    assert_eq!(code, 201, "{n}");
    let events = "/api/v1/namespaces/default/events";
    let (code, _, sent) = kubelet(
        &c,
        "POST",
        events,
        PROTOBUF,
        &node_event("edge-4", "Starting", "Starting kubelet.", 1),
    )
    .await;
    assert_eq!(code, 201, "{sent}");
    assert_eq!(sent["reason"], "Starting");
    // A repeat is patched first (events_cache.go); 404 makes it a new post.
    let (code, _, s) = kubelet(
        &c,
        "PATCH",
        &format!("{events}/edge-4.1"),
        "application/strategic-merge-patch+json",
        &json!({"count": 2, "lastTimestamp": "2026-11-30T09:01:00Z"}),
    )
    .await;
    assert_eq!(code, 404, "{s}");
    assert_eq!(s["reason"], "NotFound");
    // An event about a pod on the node, in its namespace.
    let mut pod_event = node_event(
        "edge-4",
        "Pulled",
        "Container image \"pause:3.10\" already present on machine",
        2,
    );
    pod_event["metadata"]["namespace"] = json!("kube-system");
    pod_event["involvedObject"] =
        json!({"kind": "Pod", "namespace": "kube-system", "name": "etcd-edge-4", "uid": "p-1"});
    let (code, _, s) = kubelet(
        &c,
        "POST",
        "/api/v1/namespaces/kube-system/events",
        PROTOBUF,
        &pod_event,
    )
    .await;
    assert_eq!(code, 201, "{s}");
    // events.k8s.io/v1, as newer recorders post them.
    let (code, _, s) = kubelet(
        &c,
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        "application/json",
        &json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "edge-4.3", "namespace": "default"},
            "eventTime": "2026-11-30T09:00:00.000000Z",
            "reportingController": "kubelet", "reportingInstance": "edge-4",
            "action": "Starting", "reason": "NodeAllocatableEnforced",
            "regarding": {"kind": "Node", "name": "edge-4", "uid": "edge-4"},
            "note": "Updated Node Allocatable limit across pods", "type": "Normal",
        }),
    )
    .await;
    assert_eq!(code, 201, "{s}");

    // In the node's history, marked as the kubelet's.
    let history = c
        .wait_for("/v1/history?node=edge-4", "three kubelet events", |h| {
            h.as_array()
                .unwrap()
                .iter()
                .filter(|e| e["kind"] == "KubeletEvent")
                .count()
                == 3
        })
        .await;
    let posted: Vec<&Value> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "KubeletEvent")
        .collect();
    assert_eq!(posted[0]["component"], "kubelet");
    assert_eq!(posted[0]["type"], "Normal");
    assert_eq!(posted[0]["reason"], "Starting");
    assert_eq!(posted[0]["object"], "Node/edge-4");
    assert_eq!(posted[1]["object"], "Pod/kube-system/etcd-edge-4");
    assert_eq!(posted[2]["reason"], "NodeAllocatableEnforced");

    // kubectl shows them: get events, and describe node.
    let dir = site.path();
    let listed = kubectl(&c, dir, &["get", "events", "-A"]).await;
    assert!(listed.contains("Starting kubelet."), "{listed}");
    assert!(listed.contains("pod/etcd-edge-4"), "{listed}");
    let described = kubectl(&c, dir, &["describe", "node", "edge-4"]).await;
    let events_part = described.split("Events:").nth(1).unwrap_or_default();
    assert!(events_part.contains("Starting kubelet."), "{described}");
    assert!(
        events_part.contains("NodeAllocatableEnforced"),
        "{described}"
    );
    assert!(events_part.contains("kubelet"), "{described}");

    // Another node's events, and a node's token, are its own.
    let (code, _, s) = kubelet(
        &c,
        "POST",
        events,
        "application/json",
        &node_event("ghost", "Starting", "x", 4),
    )
    .await;
    assert_eq!(code, 403, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_that_floods_events_is_held_to_its_budget() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let (code, _, n) = kubelet(&c, "POST", "/api/v1/nodes", PROTOBUF, &node("edge-3")).await;
    assert_eq!(code, 201, "{n}");
    let (mut created, mut refused) = (0, 0);
    let mut retry_after = None;
    for i in 0..60u64 {
        let response = client()
            .post(format!("{}/api/v1/namespaces/default/events", c.url))
            .header("content-type", PROTOBUF)
            .body(encode(&node_event("edge-3", "Flood", &"x".repeat(4000), i)))
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            201 => created += 1,
            429 => {
                refused += 1;
                retry_after = response
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_string());
                let s: Value = response.json().await.unwrap();
                assert_eq!(s["reason"], "TooManyRequests");
            }
            other => panic!("{other}"),
        }
    }
    // 50 at once, and one more for each 5 s the loop took.
    assert!((50..=52).contains(&created), "{created}");
    assert_eq!(created + refused, 60);
    assert!(retry_after.is_some_and(|r| r.parse::<u64>().unwrap() >= 1));
    // Messages are cut to 1 kB.
    let history = c
        .wait_for("/v1/history?node=edge-3", "the flood", |h| {
            h.as_array()
                .unwrap()
                .iter()
                .filter(|e| e["kind"] == "KubeletEvent")
                .count()
                == created
        })
        .await;
    let kept = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "KubeletEvent")
        .unwrap();
    assert_eq!(kept["message"].as_str().unwrap().len(), 1024);
}

/// A status patch as a v1.33 kubelet sends it once its node is Ready and
/// has pulled images: the two-way strategic merge patch between the node
/// it read and the node its status setters built (`PatchNodeStatus`,
/// kubernetes `staging/src/k8s.io/component-helpers/node/util/status.go:39`,
/// from `kubelet_node_status.go:643`), JSON whatever the content type
/// configured. Images come from `nodestatus.Images`, the runtime handlers
/// and features from `RuntimeHandlers` and `NodeFeatures`, volumes in use
/// from `VolumesInUse` (`pkg/kubelet/nodestatus/setters.go`).
fn status_patch(beat: &str) -> Value {
    json!({"status": {
        "$setElementOrder/conditions": [{"type": "Ready"}],
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": beat,
                        "lastTransitionTime": "2026-11-30T09:00:30Z",
                        "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
        "features": {"supplementalGroupsPolicy": true},
        "images": [
            {"names": ["registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
                       "registry.k8s.io/pause:3.10"], "sizeBytes": 320368},
            {"names": ["docker.io/library/nginx:1.27"], "sizeBytes": 72955450},
        ],
        "runtimeHandlers": [{"features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}},
                            {"name": "runc", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}}],
        "volumesInUse": ["kubernetes.io/csi/ebs.csi.aws.com^vol-0a1"],
    }})
}

/// What a kubelet reports beyond its conditions (images, its port, runtime
/// handlers, features, volumes in use) and the architecture label it adds
/// are kept, shown by GET and kubectl, survive a kill -9, and the same
/// patch again changes no version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelets_images_and_port_are_kept_and_shown() {
    const SMP: &str = "application/strategic-merge-patch+json";
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    // Registered with its port (`initialNode` sets daemonEndpoints), and
    // here without its architecture label, as a node a source listed.
    let mut registration = node("edge-5");
    registration["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("kubernetes.io/arch");
    let (code, _, n) = kubelet(&c, "POST", "/api/v1/nodes", PROTOBUF, &registration).await;
    assert_eq!(code, 201, "{n}");
    assert_eq!(
        n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        10250
    );
    assert!(
        n["metadata"]["labels"]["kubernetes.io/arch"].is_null(),
        "{n}"
    );
    let status = "/api/v1/nodes/edge-5/status";
    // The kubelet adds the missing label in its status patch
    // (kubelet_node_status.go:614-631), and other labels a node may set
    // with it (a_kubelets_own_labels_follow_noderestriction_and_operators_labels_stay).
    let mut first = status_patch("2026-11-30T09:00:30Z");
    first["metadata"] =
        json!({"labels": {"kubernetes.io/arch": "amd64", "example.com/other": "x"}});
    let (code, _, patched) = kubelet(&c, "PATCH", status, SMP, &first).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        patched["metadata"]["labels"]["kubernetes.io/arch"], "amd64",
        "{patched}"
    );
    assert_eq!(
        patched["metadata"]["labels"]["example.com/other"], "x",
        "{patched}"
    );
    let check = |n: &Value| {
        let s = &n["status"];
        assert_eq!(
            s["daemonEndpoints"],
            json!({"kubeletEndpoint": {"Port": 10250}}),
            "{n}"
        );
        assert_eq!(s["images"], status_patch("")["status"]["images"], "{n}");
        assert_eq!(s["runtimeHandlers"][1]["name"], "runc", "{n}");
        assert_eq!(s["features"]["supplementalGroupsPolicy"], true, "{n}");
        assert_eq!(
            s["volumesInUse"][0], "kubernetes.io/csi/ebs.csi.aws.com^vol-0a1",
            "{n}"
        );
    };
    check(&patched);
    let (code, _, got) = kubelet(&c, "GET", "/api/v1/nodes/edge-5", "", &Value::Null).await;
    assert_eq!(code, 200);
    check(&got);
    let version = got["metadata"]["resourceVersion"].clone();

    // The same patch again (a kubelet's 5-minute report with nothing
    // changed but its heartbeat): nothing new to keep, no new version.
    let mut same = status_patch("2026-11-30T09:05:30Z");
    same["metadata"] = first["metadata"].clone();
    let (code, _, again) = kubelet(&c, "PATCH", status, SMP, &same).await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(again["metadata"]["resourceVersion"], version);
    // Past the bound: a 422 naming the field, nothing kept of it.
    let mut over = status_patch("2026-11-30T09:05:40Z");
    over["status"]["images"][0]["names"] =
        json!((0..6).map(|i| format!("r/i:{i}")).collect::<Vec<_>>());
    let (code, _, refused) = kubelet(&c, "PATCH", status, SMP, &over).await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["details"]["causes"][0]["field"], "status.images[0].names",
        "{refused}"
    );

    let dir = tempfile::tempdir().unwrap();
    let port = kubectl(
        &c,
        dir.path(),
        &[
            "get",
            "node",
            "edge-5",
            "-o",
            "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}",
        ],
    )
    .await;
    assert_eq!(port, "10250");
    let yaml = kubectl(&c, dir.path(), &["get", "node", "edge-5", "-o", "yaml"]).await;
    assert!(yaml.contains("docker.io/library/nginx:1.27"), "{yaml}");
    assert!(yaml.contains("Port: 10250"), "{yaml}");

    // Written before the answer: a kill -9 loses none of it.
    c.kill9();
    let c = site.controller_with(&["--allow-node-registration"]);
    let (code, _, got) = kubelet(&c, "GET", "/api/v1/nodes/edge-5", "", &Value::Null).await;
    assert_eq!(code, 200);
    check(&got);
    assert_eq!(got["metadata"]["labels"]["kubernetes.io/arch"], "amd64");
}

/// A kubelet's request over TLS, as `who` (a node's client certificate,
/// or its bearer token): the status, the `Warning` headers and the answer.
async fn as_node(
    c: &Controller,
    who: &NodeCredential,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Vec<String>, Value) {
    nodekeeper::install_crypto_provider();
    let server_pem = c.server_pem.as_deref().unwrap();
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(10))
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(server_pem.as_bytes()).unwrap());
    if let NodeCredential::Certificate(pem) = who {
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let bytes = match content_type {
        PROTOBUF => encode(body),
        _ => body.to_string().into_bytes(),
    };
    let mut request = builder
        .build()
        .unwrap()
        .request(method, format!("{}{path}", c.url))
        .header("accept", ACCEPT)
        .header("content-type", content_type)
        .body(bytes);
    if let NodeCredential::Token(token) = who {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the controller answers");
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let text = response.text().await.unwrap();
    (
        code,
        warnings,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

enum NodeCredential {
    /// A client certificate and its key, PEM.
    Certificate(String),
    Token(&'static str),
}

/// NodeRestriction's label rules on a node's writes to its own Node
/// (kubernetes `plugin/pkg/admission/noderestriction/admission.go:489-553`
/// `admitNode`, `:591-615` `getForbiddenLabels`; the labels a kubelet may
/// set, `staging/src/k8s.io/kubelet/pkg/apis/well_known_labels.go:35-79`),
/// the same for a node's token and its client certificate; what the
/// kubelet sends (`pkg/kubelet/kubelet_node_status.go` `initialNode`,
/// `updateDefaultLabels`; `pkg/volume/csi/nodeinfomanager/nodeinfomanager.go:49`,
/// `:165-220`, `:340-360`) kept as its edits, and an operator's labels not
/// overwritten (docs/kubelet-api.md, section 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelets_own_labels_follow_noderestriction_and_operators_labels_stay() {
    const SMP: &str = "application/strategic-merge-patch+json";
    let site = TestSite::unlisted().start();
    let ca = common::Ca::new();
    let c = site
        .run()
        .tls()
        .client_ca(&ca.pem)
        .tokens("op-secret,admin,uid-0\nn41-secret,system:node:edge-41,uid-1,system:nodes\n")
        .flags(&["--allow-node-registration"])
        .start();
    let (cert, _) = ca.issue("system:node:edge-42", "system:nodes");
    for (name, who) in [
        ("edge-41", NodeCredential::Token("n41-secret")),
        ("edge-42", NodeCredential::Certificate(cert)),
    ] {
        // Registering with a label no node may set: admission.go:509-513.
        let mut bad = node(name);
        bad["metadata"]["labels"]["node-role.kubernetes.io/edge"] = json!("");
        let (code, _, s) = as_node(&c, &who, "POST", "/api/v1/nodes", PROTOBUF, &bad).await;
        assert_eq!(code, 403, "{s}");
        assert_eq!(
            s["message"],
            format!(
                "nodes \"{name}\" is forbidden: node \"{name}\" is not allowed to set the \
                 following labels: node-role.kubernetes.io/edge"
            )
        );
        // As a kubelet registers: its labels (with one from --node-labels)
        // and the attach-detach annotation, both kept.
        let mut registration = node(name);
        registration["metadata"]["labels"]["example.com/rack"] = json!("r1");
        let (code, _, n) =
            as_node(&c, &who, "POST", "/api/v1/nodes", PROTOBUF, &registration).await;
        assert_eq!(code, 201, "{n}");
        assert_eq!(n["metadata"]["labels"]["example.com/rack"], "r1", "{n}");
        assert_eq!(
            n["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"],
            "true",
            "{n}"
        );

        // An operator labels the node.
        let (code, s) = c
            .call("PATCH", &format!("/api/v1/nodes/{name}"))
            .header("content-type", "application/merge-patch+json")
            .body(
                "application/merge-patch+json",
                json!({"metadata": {
                    "labels": {"team": "blue", "topology.kubernetes.io/zone": "z1"},
                    "annotations": {"owner": "ops"},
                }})
                .to_string(),
            )
            .send()
            .await;
        assert_eq!(code, 200, "{s}");

        // The kubelet's status patch with metadata: its CSI driver's node
        // ID and topology, its zone (a kubelet label: the kubelet's value,
        // as on kube-apiserver), and the operator's `team` and `owner`
        // changed (kept as the operator set them, with a warning).
        let status = format!("/api/v1/nodes/{name}/status");
        let mut patch = status_patch("2026-11-30T09:00:30Z");
        patch["metadata"] = json!({
            "labels": {"topology.hostpath.csi/node": name, "topology.kubernetes.io/zone": "z2",
                       "team": "red"},
            "annotations": {"csi.volume.kubernetes.io/nodeid": format!("{{\"hostpath.csi.k8s.io\":\"{name}\"}}"),
                            "owner": null},
        });
        let (code, warnings, n) = as_node(&c, &who, "PATCH", &status, SMP, &patch).await;
        assert_eq!(code, 200, "{n}");
        let labels = &n["metadata"]["labels"];
        assert_eq!(labels["topology.hostpath.csi/node"], name, "{n}");
        assert_eq!(labels["topology.kubernetes.io/zone"], "z2", "{n}");
        assert_eq!(labels["team"], "blue", "{n}");
        assert_eq!(labels["example.com/rack"], "r1", "{n}");
        let annotations = &n["metadata"]["annotations"];
        assert_eq!(annotations["owner"], "ops", "{n}");
        assert_eq!(
            annotations["csi.volume.kubernetes.io/nodeid"],
            format!("{{\"hostpath.csi.k8s.io\":\"{name}\"}}")
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with(r#"299 - "label \"team\" is kept as \"blue\""#),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with(r#"299 - "annotation \"owner\" is kept as \"ops\""#),
            "{warnings:?}"
        );

        // A label NodeRestriction forbids on update: its 403
        // (admission.go:545-549), and nothing of the patch is kept.
        let mut forbidden = status_patch("2026-11-30T09:00:40Z");
        forbidden["metadata"] = json!({"labels": {"node-role.kubernetes.io/edge": "",
                                                  "example.com/more": "x"}});
        let (code, _, s) = as_node(&c, &who, "PATCH", &status, SMP, &forbidden).await;
        assert_eq!(code, 403, "{s}");
        assert_eq!(
            s["message"],
            format!(
                "nodes \"{name}\" is forbidden: is not allowed to modify labels: \
                 node-role.kubernetes.io/edge"
            )
        );
        // Past the bound on what a kubelet adds: a 422 naming it.
        let mut many = status_patch("2026-11-30T09:00:50Z");
        many["metadata"] = json!({"labels": (0..130)
            .map(|i| (format!("example.com/l{i}"), json!("")))
            .collect::<serde_json::Map<String, Value>>()});
        let (code, _, s) = as_node(&c, &who, "PATCH", &status, SMP, &many).await;
        assert_eq!(code, 422, "{s}");
        assert_eq!(s["details"]["causes"][0]["field"], "metadata.labels", "{s}");
        assert!(
            s["details"]["causes"][0]["message"]
                .as_str()
                .unwrap()
                .contains("must have at most 128 items"),
            "{s}"
        );
        let (_, got) = c.get(&format!("/api/v1/nodes/{name}")).await;
        assert!(
            got["metadata"]["labels"]["example.com/more"].is_null(),
            "{got}"
        );
        assert!(
            got["metadata"]["labels"]["example.com/l0"].is_null(),
            "{got}"
        );

        // Registered with its labels and annotations, in one entry; each
        // kept write after is an edit under the kubelet's name.
        let (_, history) = c.get(&format!("/v1/history?node={name}")).await;
        let registered = &history[0];
        assert_eq!(registered["kind"], "Registered", "{history}");
        assert_eq!(
            registered["record"]["annotations"]
                ["volumes.kubernetes.io/controller-managed-attach-detach"],
            "true",
            "{history}"
        );
        assert_eq!(
            registered["record"]["labels"]["example.com/rack"], "r1",
            "{history}"
        );
        let by_kubelet: Vec<String> = history
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "OperatorChanged" && e["by"] == format!("system:node:{name}"))
            .flat_map(|e| e["changes"].as_array().unwrap().clone())
            .map(|ch| format!("{} {} {}", ch["field"], ch["key"], ch["to"]))
            .collect();
        assert_eq!(
            by_kubelet,
            [
                format!(r#""metadata.labels" "topology.hostpath.csi/node" "{name}""#),
                r#""metadata.labels" "topology.kubernetes.io/zone" "z2""#.to_string(),
                format!(
                    r#""metadata.annotations" "csi.volume.kubernetes.io/nodeid" "{{\"hostpath.csi.k8s.io\":\"{name}\"}}""#
                ),
            ],
            "{history}"
        );
    }
}
