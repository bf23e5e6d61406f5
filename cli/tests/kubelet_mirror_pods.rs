//! Mirror pods, as a v1.33 kubelet keeps them for its static pods, against
//! the real binary (docs/decisions/mirror-pods.md; docs/kubelet-api.md
//! section 2.6). The kubelet's calls, with their upstream lines (kubernetes
//! v1.33.13):
//!
//! - create: `pkg/kubelet/pod/mirror_client.go:69-107` (annotation
//!   `kubernetes.io/config.mirror` = the static pod's hash, an owner
//!   reference to its Node with `controller: true`), body in protobuf;
//! - learn which exist: the pods reflector, `pkg/kubelet/config/apiserver.go:38`
//!   (`fieldSelector=spec.nodeName=NAME`), `:66` (list, then watch);
//! - status: `pkg/kubelet/status/status_manager.go:885` (get), `:915`
//!   through `pkg/util/pod/pod.go:34-71` (a strategic merge patch of the
//!   status carrying `metadata.uid` as a precondition);
//! - delete a stale one: `mirror_client.go:116-143` (grace 0, UID
//!   precondition; a 404 or 409 is not logged), `status_manager.go:943-949`.

mod common;

use std::time::Duration;

use common::{client, Controller, Kubectl, TestSite};
use nodekeeper_sim::protobuf::PROTOBUF;
use serde_json::{json, Value};

const ACCEPT: &str = "application/vnd.kubernetes.protobuf,application/json";
const PODS: &str = "/api/v1/namespaces/kube-system/pods";

/// A request as a kubelet makes it (protobuf body when `content_type` is
/// [`PROTOBUF`]), with a bearer token if given.
async fn send(
    c: &Controller,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
    token: Option<&str>,
) -> (u16, Value) {
    let call = c
        .call(method, path)
        .header("accept", ACCEPT)
        .kubelet_body(content_type, body);
    match token {
        Some(token) => call.token(Some(token)),
        None => call,
    }
    .send()
    .await
}

/// The Node a kubelet registers (`pkg/kubelet/kubelet_node_status.go:92`).
fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "conditions": [{
                "type": "Ready", "status": "True",
                "lastHeartbeatTime": "2026-11-30T09:00:00Z", "lastTransitionTime": "2026-11-30T09:00:00Z",
                "reason": "KubeletReady", "message": "kubelet is posting ready status",
            }],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.9"}],
        },
    })
}

/// Registers `name` and answers its uid.
async fn register(c: &Controller, name: &str) -> String {
    let (code, n) = send(c, "POST", "/api/v1/nodes", PROTOBUF, &node(name), None).await;
    assert_eq!(code, 201, "{n}");
    n["metadata"]["uid"].as_str().unwrap().to_string()
}

/// The mirror pod of static pod `pod` on `node`, as `CreateMirrorPod` sends it.
fn mirror_pod(pod: &str, node: &str, node_uid: &str, hash: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{pod}-{node}"),
            "namespace": "kube-system",
            "labels": {"component": pod},
            "annotations": {
                "kubernetes.io/config.hash": hash,
                "kubernetes.io/config.mirror": hash,
                "kubernetes.io/config.source": "file",
            },
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": true}],
        },
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "restartPolicy": "Always",
            "containers": [{"name": pod, "image": format!("registry.k8s.io/{pod}:v1.33.13")}],
        },
    })
}

/// A watch's lines as they come, until `n` are read or it ends.
struct Watch {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Watch {
    async fn start(c: &Controller, query: &str) -> Watch {
        let response = client()
            .get(format!(
                "{}/api/v1/pods?{query}&timeoutSeconds=8&watch=true",
                c.url
            ))
            .header("accept", ACCEPT)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        Watch {
            response,
            buffer: Vec::new(),
        }
    }

    /// The next event that is not a bookmark.
    async fn next(&mut self) -> Value {
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=at).collect();
                let event: Value = serde_json::from_slice(&line).unwrap();
                if event["type"] != "BOOKMARK" {
                    return event;
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(9), self.response.chunk())
                .await
                .expect("a watch event within its timeout")
                .unwrap()
                .expect("the watch ended before the event");
            self.buffer.extend_from_slice(&chunk);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_creates_sees_patches_and_deletes_its_mirror_pods() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let uid = register(&c, "edge-31").await;
    let by_node = "fieldSelector=spec.nodeName%3Dedge-31";

    // The reflector's list (apiserver.go:38): none yet, and its version.
    let (code, list) = send(
        &c,
        "GET",
        &format!("/api/v1/pods?{by_node}&limit=500&resourceVersion=0"),
        "",
        &Value::Null,
        None,
    )
    .await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"], json!([]));
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let mut watch = Watch::start(
        &c,
        &format!("{by_node}&allowWatchBookmarks=true&resourceVersion={rv}"),
    )
    .await;

    // Created in protobuf (mirror_client.go:99).
    let pod = mirror_pod("etcd", "edge-31", &uid, "h1");
    let (code, created) = send(&c, "POST", PODS, PROTOBUF, &pod, None).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["metadata"]["annotations"]["kubernetes.io/config.mirror"],
        "h1"
    );
    assert_eq!(
        created["metadata"]["ownerReferences"][0]["uid"],
        uid.as_str()
    );
    assert_eq!(created["spec"]["nodeName"], "edge-31");
    assert_eq!(created["status"]["phase"], "Pending");
    let pod_uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let created_rv: u64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(created_rv > rv.parse().unwrap());
    // The watch sees it: the kubelet does not create it again at its next sync.
    let added = watch.next().await;
    assert_eq!(added["type"], "ADDED", "{added}");
    assert_eq!(added["object"]["metadata"]["uid"], pod_uid.as_str());
    assert_eq!(
        added["object"]["metadata"]["resourceVersion"],
        created_rv.to_string()
    );
    // A body that does not read as a Pod: 400, naming the field's type.
    let mut wrong = mirror_pod("etcd", "edge-31", &uid, "h1");
    wrong["spec"]["containers"] = json!("etcd");
    let (code, s) = send(&c, "POST", PODS, "application/json", &wrong, None).await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (400, Some("BadRequest")),
        "{s}"
    );
    assert!(
        s["message"].as_str().unwrap().contains("invalid type"),
        "{s}"
    );
    // Sent again anyway: 409, as kube-apiserver answers.
    let (code, s) = send(&c, "POST", PODS, PROTOBUF, &pod, None).await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (409, Some("AlreadyExists")),
        "{s}"
    );

    // Status (status_manager.go:885, :915): get, then the strategic merge
    // patch pod.go builds, with the uid as its precondition.
    let path = format!("{PODS}/etcd-edge-31");
    let (code, got) = send(&c, "GET", &path, "", &Value::Null, None).await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got, created);
    let status = json!({
        "metadata": {"uid": pod_uid},
        "status": {
            "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}],
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-30T09:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T09:00:02Z"},
            ],
            "phase": "Running",
            "hostIP": "127.0.0.9", "hostIPs": [{"ip": "127.0.0.9"}],
            "podIP": "127.0.0.9", "podIPs": [{"ip": "127.0.0.9"}],
            "startTime": "2026-11-30T09:00:00Z",
            "containerStatuses": [{
                "name": "etcd", "ready": true, "restartCount": 0, "started": true,
                "image": "registry.k8s.io/etcd:v1.33.13", "imageID": "", "containerID": "containerd://1",
                "state": {"running": {"startedAt": "2026-11-30T09:00:01Z"}},
            }],
        },
    });
    let merge = "application/strategic-merge-patch+json";
    let (code, patched) = send(&c, "PATCH", &format!("{path}/status"), merge, &status, None).await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["status"]["phase"], "Running");
    assert_eq!(patched["status"]["conditions"][1]["type"], "Ready");
    assert_eq!(patched["metadata"]["uid"], pod_uid.as_str());
    assert_eq!(patched["spec"], created["spec"]);
    let modified = watch.next().await;
    assert_eq!(modified["type"], "MODIFIED", "{modified}");
    assert_eq!(modified["object"], patched);
    let patched_rv = patched["metadata"]["resourceVersion"].as_str().unwrap();
    // A watch from before the patch replays it.
    let mut replay = Watch::start(&c, &format!("{by_node}&resourceVersion={created_rv}")).await;
    assert_eq!(replay.next().await, modified);
    // A patch for a pod that was deleted and created again since: 409.
    let stale = json!({"metadata": {"uid": "an-older-pod"}, "status": {"phase": "Failed"}});
    let (code, s) = send(&c, "PATCH", &format!("{path}/status"), merge, &stale, None).await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    // A status that does not read as a PodStatus: 422, and the pod unchanged.
    let bad = json!({"metadata": {"uid": pod_uid}, "status": {"phase": 7}});
    let (code, s) = send(&c, "PATCH", &format!("{path}/status"), merge, &bad, None).await;
    assert_eq!((code, s["reason"].as_str()), (422, Some("Invalid")), "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("status: invalid type"),
        "{s}"
    );
    let (_, unchanged) = send(&c, "GET", &path, "", &Value::Null, None).await;
    assert_eq!(unchanged, patched);

    // kubectl get pods -A -o wide: kube-apiserver's columns, node and IP.
    let dir = tempfile::tempdir().unwrap();
    let wide = kubectl(&c, dir.path(), &["get", "pods", "-A", "-o", "wide"]).await;
    let lines: Vec<Vec<&str>> = wide
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ],
        "{wide}"
    );
    assert_eq!(
        lines[1][..5],
        ["kube-system", "etcd-edge-31", "1/1", "Running", "0"],
        "{wide}"
    );
    assert_eq!(
        lines[1][6..],
        ["127.0.0.9", "edge-31", "<none>", "<none>"],
        "{wide}"
    );

    // The static pod changed (a new hash): the stale mirror pod is deleted
    // with the UID it had (kubelet.go tryReconcileMirrorPods, mirror_client.go:133),
    // the DeleteOptions in protobuf.
    let delete = |uid: &str| json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}});
    let (code, s) = send(&c, "DELETE", &path, PROTOBUF, &delete("another-uid"), None).await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    let (code, gone) = send(&c, "DELETE", &path, PROTOBUF, &delete(&pod_uid), None).await;
    assert_eq!(code, 200, "{gone}");
    assert_eq!(gone["metadata"]["uid"], pod_uid.as_str());
    let deleted = watch.next().await;
    assert_eq!(deleted["type"], "DELETED", "{deleted}");
    assert_eq!(deleted["object"]["metadata"]["name"], "etcd-edge-31");
    // Again: 404, which the kubelet does not log (mirror_client.go:135).
    let (code, _) = send(&c, "DELETE", &path, PROTOBUF, &delete(&pod_uid), None).await;
    assert_eq!(code, 404);
    // And created anew with the new hash.
    let (code, again) = send(
        &c,
        "POST",
        PODS,
        PROTOBUF,
        &mirror_pod("etcd", "edge-31", &uid, "h2"),
        None,
    )
    .await;
    assert_eq!(code, 201, "{again}");
    assert_ne!(again["metadata"]["uid"], pod_uid.as_str());
    let added = watch.next().await;
    assert_eq!(
        (
            added["type"].as_str(),
            added["object"]["metadata"]["annotations"]["kubernetes.io/config.mirror"].as_str()
        ),
        (Some("ADDED"), Some("h2"))
    );

    // Each write is in the node's history.
    let (_, history) = c.get("/v1/history?node=edge-31").await;
    let changes: Vec<String> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ObjectChanged")
        .map(|e| {
            format!(
                "{} {} {}",
                e["action"].as_str().unwrap(),
                e["name"].as_str().unwrap(),
                e["summary"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            "created kube-system/etcd-edge-31 mirror pod, Pending, 0/1 ready",
            "updated kube-system/etcd-edge-31 mirror pod, Running, 1/1 ready",
            "deleted kube-system/etcd-edge-31 mirror pod, Running, 1/1 ready",
            "created kube-system/etcd-edge-31 mirror pod, Pending, 0/1 ready",
        ]
    );

    // A watch from an older version replays what came after it; the pod
    // deleted since is streamed with its name (its content went with it).
    let mut replay = Watch::start(&c, &format!("{by_node}&resourceVersion={patched_rv}")).await;
    let (deleted, added) = (replay.next().await, replay.next().await);
    assert_eq!(deleted["type"], "DELETED", "{deleted}");
    assert_eq!(deleted["object"]["metadata"]["name"], "etcd-edge-31");
    assert_eq!(deleted["object"]["metadata"]["namespace"], "kube-system");
    assert_eq!(added["type"], "ADDED", "{added}");
    assert_eq!(added["object"], again);

    // Durable: a restart serves it as it was; it goes with its node.
    drop(c);
    let c = site.controller_with(&["--allow-node-registration"]);
    let (code, kept) = send(&c, "GET", &path, "", &Value::Null, None).await;
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept, again);
    let (code, _) = send(
        &c,
        "DELETE",
        "/api/v1/nodes/edge-31",
        "",
        &Value::Null,
        None,
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = send(&c, "GET", &path, "", &Value::Null, None).await;
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_mirror_pods_of_the_callers_own_node_are_kept_and_few_of_them() {
    let site = TestSite::unlisted().start();
    let c = site
        .run()
        .tokens("op-secret,admin,uid-0\nn32-secret,system:node:edge-32,uid-1,system:nodes\n")
        .flags(&["--allow-node-registration"])
        .start();
    let uid = register(&c, "edge-32").await;
    let other = register(&c, "edge-33").await;
    let node_token = Some("n32-secret");

    // Not a mirror pod: nodekeeper schedules nothing.
    let mut plain = mirror_pod("web", "edge-32", &uid, "h");
    plain["metadata"]["annotations"] = json!({});
    let (code, s) = send(&c, "POST", PODS, "application/json", &plain, node_token).await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (403, Some("Forbidden")),
        "{s}"
    );
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("nodekeeper schedules nothing"),
        "{s}"
    );
    let mut unbound = mirror_pod("web", "edge-32", &uid, "h");
    unbound["spec"]["nodeName"] = json!(null);
    let (code, s) = send(&c, "POST", PODS, "application/json", &unbound, None).await;
    assert_eq!(code, 403, "{s}");
    // Another node's pod, with this node's token (as NodeRestriction refuses it).
    let (code, s) = send(
        &c,
        "POST",
        PODS,
        PROTOBUF,
        &mirror_pod("etcd", "edge-33", &other, "h"),
        node_token,
    )
    .await;
    assert_eq!(code, 403, "{s}");
    // Owned by another node.
    let (code, s) = send(
        &c,
        "POST",
        PODS,
        PROTOBUF,
        &mirror_pod("etcd", "edge-32", &other, "h"),
        node_token,
    )
    .await;
    assert_eq!(code, 403, "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("owned by its node only"),
        "{s}"
    );
    // A node not registered: nodekeeper keeps pods with their node.
    let (code, s) = send(
        &c,
        "POST",
        PODS,
        "application/json",
        &mirror_pod("etcd", "edge-34", "x", "h"),
        None,
    )
    .await;
    assert_eq!(code, 403, "{s}");

    // Its own: kept; another node's token may not delete or patch it.
    let (code, s) = send(
        &c,
        "POST",
        PODS,
        PROTOBUF,
        &mirror_pod("etcd", "edge-32", &uid, "h"),
        node_token,
    )
    .await;
    assert_eq!(code, 201, "{s}");
    let (code, s) = send(
        &c,
        "POST",
        PODS,
        PROTOBUF,
        &mirror_pod("etcd", "edge-33", &other, "h"),
        None,
    )
    .await;
    assert_eq!(code, 201, "{s}");
    let (code, _) = send(
        &c,
        "DELETE",
        &format!("{PODS}/etcd-edge-33"),
        "",
        &Value::Null,
        node_token,
    )
    .await;
    assert_eq!(code, 403);

    // At most 110 a node, a kubelet's default maxPods: every static pod fits.
    for i in 1..110 {
        let (code, s) = send(
            &c,
            "POST",
            PODS,
            PROTOBUF,
            &mirror_pod(&format!("p{i}"), "edge-32", &uid, "h"),
            node_token,
        )
        .await;
        assert_eq!(code, 201, "pod {i}: {s}");
    }
    let (code, s) = send(
        &c,
        "POST",
        PODS,
        PROTOBUF,
        &mirror_pod("p110", "edge-32", &uid, "h"),
        node_token,
    )
    .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (403, Some("Forbidden")),
        "{s}"
    );
    assert!(s["message"].as_str().unwrap().contains("110"), "{s}");
    let (_, list) = send(
        &c,
        "GET",
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-32",
        "",
        &Value::Null,
        None,
    )
    .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 110);

    // Pages, as a reflector's first list asks for them (client-go
    // `tools/pager/pager.go:31` `defaultPageSize = 500`; kubectl's
    // `--chunk-size` the same): in key order, each pod once, at the first
    // page's resourceVersion, with `remainingItemCount` only when nothing
    // is selected, as kube-apiserver pages (and nodekeeper pages nodes).
    for (query, total, counted) in [
        ("", 111, true),
        ("&fieldSelector=spec.nodeName%3Dedge-32", 110, false),
    ] {
        let mut names = Vec::new();
        let mut token = String::new();
        let mut first_rv = None;
        for page in 0.. {
            assert!(page < 10, "the pages do not end");
            let path = format!("/api/v1/pods?limit=50{query}&continue={token}");
            let (code, list) = send(&c, "GET", &path, "", &Value::Null, None).await;
            assert_eq!(code, 200, "{list}");
            let items = list["items"].as_array().unwrap();
            assert!(items.len() <= 50, "{}", items.len());
            names.extend(items.iter().map(|p| {
                let m = &p["metadata"];
                format!(
                    "{}/{}",
                    m["namespace"].as_str().unwrap(),
                    m["name"].as_str().unwrap()
                )
            }));
            let rv = list["metadata"]["resourceVersion"].clone();
            assert_eq!(first_rv.get_or_insert(rv.clone()), &rv);
            let remaining = &list["metadata"]["remainingItemCount"];
            match list["metadata"]["continue"].as_str() {
                Some(next) => {
                    let left = json!(total - names.len());
                    assert_eq!(remaining, if counted { &left } else { &Value::Null });
                    token = next.to_string();
                }
                None => {
                    assert_eq!(remaining, &Value::Null);
                    break;
                }
            }
        }
        assert_eq!(names.len(), total);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "not in key order, or twice");
    }
    // A token the server did not hand out: the API server's 400.
    let (code, s) = send(
        &c,
        "GET",
        "/api/v1/pods?limit=5&continue=nope",
        "",
        &Value::Null,
        None,
    )
    .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (400, Some("BadRequest")),
        "{s}"
    );
    let (_, list) = send(
        &c,
        "GET",
        "/api/v1/namespaces/default/pods",
        "",
        &Value::Null,
        None,
    )
    .await;
    assert_eq!(list["items"], json!([]));
}

/// kubectl (v1.32 here) with nothing from the environment: its stdout.
async fn kubectl(c: &Controller, dir: &std::path::Path, args: &[&str]) -> String {
    Kubectl::new(&c.url, dir).ok(args).await
}
