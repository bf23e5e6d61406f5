//! Pushed heartbeats: node status updates and Lease renewals as kubelets
//! send them, monitor mode, hybrid rescue probes, and every bad input.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::{json, Value};

/// A heartbeat client: what a kubelet sends, with its own (possibly skewed) clock.
struct Kubelet<'a> {
    c: &'a Controller,
    name: String,
    /// Hours the node's clock is off.
    skew_hours: i64,
    beats: i64,
}

impl Kubelet<'_> {
    fn node_time(&mut self) -> String {
        self.beats += 1;
        let t = jiff::Timestamp::now()
            + jiff::SignedDuration::from_hours(self.skew_hours)
            + jiff::SignedDuration::from_millis(self.beats);
        // Kubernetes MicroTime: RFC 3339 with microseconds.
        format!("{t:.6}")
    }

    async fn patch_status(&mut self, conditions: Value) -> (u16, Value) {
        let body = json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": conditions,
            "nodeInfo": {"kubeletVersion": "v1.32.4", "osImage": "Debian GNU/Linux 12", "kernelVersion": "6.1.0",
                         "containerRuntimeVersion": "containerd://1.7.24", "machineID": "m", "systemUUID": "s",
                         "bootID": "b", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
        }});
        self.c.status_patch(&self.name, &body).send().await
    }

    async fn ready(&mut self, status: &str) -> (u16, Value) {
        let t = self.node_time();
        self.patch_status(json!([{"type": "Ready", "status": status, "lastHeartbeatTime": t,
                                   "reason": "KubeletReady", "message": "kubelet is posting ready status"}]))
            .await
    }

    async fn renew_lease(&mut self) -> (u16, Value) {
        let renew = self.node_time();
        let path = format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}",
            self.name
        );
        let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": renew}});
        let (code, v) = self.c.call("PUT", &path).json(&body).send().await;
        if code == 404 {
            let create = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
            return self.c.call("POST", create).json(&body).send().await;
        }
        (code, v)
    }
}

/// A site in push mode of two nodes, `edge-1` and `edge-2`, on this file's
/// loopback range: the test pushes their heartbeats, and one that never
/// posts goes Unknown after a startup grace of 1 s.
fn two_nodes() -> TestSiteBuilder<()> {
    TestSite::named(&["edge-1", "edge-2"], Ipv4Addr::new(127, 81, 0, 1))
        .flag("--node-startup-grace-period", "1s")
}

fn kinds(history: &Value) -> Vec<&str> {
    history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect()
}

fn condition(node: &Value, kind: &str) -> Value {
    node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_mode_heartbeats_keep_nodes_ready_and_silence_makes_them_unknown() {
    // A grace of 6 s against renewals every 150 ms: a stalled machine does
    // not let the node lapse between two renewals.
    let site = two_nodes().grace("6s").start();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    c.wait_registered("edge-2").await;
    // The node's clock is five hours behind: it must not matter.
    let mut k = Kubelet {
        c: &c,
        name: "edge-1".into(),
        skew_hours: -5,
        beats: 0,
    };
    let (code, node) = k.ready("True").await;
    assert_eq!(code, 200, "{node}");
    assert_eq!(condition(&node, "Ready")["status"], "True");
    assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "v1.32.4");

    // A condition change is durable before the answer: history already has it.
    let (_, history) = c.get("/v1/history?node=edge-1&condition=Ready").await;
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["from"].as_str(), last["to"].as_str()),
        (Some("Unknown"), Some("True"))
    );
    assert_eq!(last["reason"], "KubeletReady");

    // Lease renewals alone keep it Ready past a grace period (6s) since its
    // last status: until, by the controller's own clock, a monitor pass
    // began more than a grace period after that status was answered.
    let last_status = unix_now();
    let (code, lease) = k.renew_lease().await;
    assert!(code == 200 || code == 201, "{lease}");
    let mut past_grace = PassAfter::new(
        "nodekeeper_last_monitor_pass_timestamp_seconds",
        last_status + 6.0 + 0.1,
    );
    let started = Instant::now();
    while past_grace.done(&c).await.is_none() {
        assert!(
            started.elapsed() < DEADLINE,
            "no monitor pass past the grace period"
        );
        let (code, lease) = k.renew_lease().await;
        assert_eq!(code, 200, "{lease}");
        assert_eq!(c.ready("edge-1").await.as_deref(), Some("True"));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(c.ready("edge-1").await.as_deref(), Some("True"));
    let (_, history) = c.get("/v1/history?node=edge-1&condition=Ready").await;
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["to"], "True", "{history}");
    let (_, lease) = c
        .get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1")
        .await;
    assert_eq!(lease["kind"], "Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "edge-1");

    // A pressure condition is history like Ready.
    let t = k.node_time();
    let (code, _) = k
        .patch_status(json!([{"type": "MemoryPressure", "status": "True", "lastHeartbeatTime": t,
                              "reason": "KubeletHasInsufficientMemory", "message": "kubelet has insufficient memory available"}]))
        .await;
    assert_eq!(code, 200);
    let (_, history) = c
        .get("/v1/history?node=edge-1&condition=MemoryPressure")
        .await;
    assert_eq!(history[0]["to"], "True", "{history}");

    // Silence: Unknown after the grace period, Ready and pressure alike, the
    // kubelet's last heartbeat kept.
    let (_, before) = c.get("/api/v1/nodes/edge-1").await;
    let last_beat = condition(&before, "Ready")["lastHeartbeatTime"].clone();
    c.wait_ready("edge-1", "Unknown").await;
    let (_, after) = c.get("/api/v1/nodes/edge-1").await;
    let ready = condition(&after, "Ready");
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    assert_eq!(ready["lastHeartbeatTime"], last_beat);
    assert_eq!(condition(&after, "MemoryPressure")["status"], "Unknown");

    // The node that never posted is Unknown (it was from the start: no new
    // condition event; only its unreachable taint).
    let (_, never) = c.get("/v1/history?node=edge-2").await;
    assert_eq!(kinds(&never), ["Registered", "TaintsChanged"], "{never}");

    // It comes back with its next heartbeat.
    k.ready("True").await;
    assert_eq!(c.ready("edge-1").await.as_deref(), Some("True"));
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains("nodekeeper_heartbeats_total{via=\"Lease\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nodekeeper_heartbeat_age_seconds{quantile=\"1\"}"),
        "{metrics}"
    );
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pushes_get_the_status_kubectl_shows() {
    let site = two_nodes().start();
    let c = site.controller(&[]);
    let status_path = "/api/v1/nodes/edge-1/status";
    let (code, s) = c
        .call("PATCH", "/api/v1/nodes/nope/status")
        .body("application/merge-patch+json", "{}")
        .send()
        .await;
    assert_eq!((code, s["reason"].as_str()), (404, Some("NotFound")), "{s}");
    assert_eq!(s["message"], "nodes \"nope\" not found");
    let (code, s) = c
        .call("PATCH", status_path)
        .body("application/merge-patch+json", "{not json")
        .send()
        .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (400, Some("BadRequest")),
        "{s}"
    );
    let (code, s) = c
        .call("PATCH", status_path)
        .body("application/json-patch+json", "[]")
        .send()
        .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (415, Some("UnsupportedMediaType")),
        "{s}"
    );
    let (code, s) = c
        .call("PUT", status_path)
        .body("text/plain", "hello")
        .send()
        .await;
    assert_eq!(code, 415, "{s}");
    let (code, s) = c
        .call("PATCH", status_path)
        .body(
            "application/merge-patch+json",
            json!({"status": {"conditions": [{"type": "Ready", "status": "Perhaps"}]}}).to_string(),
        )
        .send()
        .await;
    assert_eq!((code, s["reason"].as_str()), (422, Some("Invalid")), "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("status.conditions[0].status"),
        "{s}"
    );
    let (code, s) = c
        .call("PUT", status_path)
        .json(&json!({"metadata": {"name": "edge-2"}}))
        .send()
        .await;
    assert_eq!(code, 400, "{s}");
    // A stale resourceVersion on a full update is a conflict.
    let (code, s) = c
        .call("PUT", status_path)
        .json(&json!({"metadata": {"name": "edge-1", "resourceVersion": "1"}, "status": {}}))
        .send()
        .await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    // Registration is off by default, and says how to turn it on.
    let (code, s) = c
        .call("POST", "/api/v1/nodes")
        .json(&json!({"metadata": {"name": "stranger"}}))
        .send()
        .await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (403, Some("Forbidden")),
        "{s}"
    );
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("--allow-node-registration"),
        "{s}"
    );
    // Leases: only for registered nodes, in kube-node-lease, created once.
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let lease = |name: &str| json!({"metadata": {"name": name}, "spec": {"holderIdentity": name, "renewTime": "2026-11-30T09:00:00.000000Z"}});
    assert_eq!(
        c.call("POST", leases).json(&lease("edge-1")).send().await.0,
        201
    );
    let (code, s) = c.call("POST", leases).json(&lease("edge-1")).send().await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (409, Some("AlreadyExists")),
        "{s}"
    );
    assert_eq!(
        c.call("POST", leases)
            .json(&lease("stranger"))
            .send()
            .await
            .0,
        403
    );
    let (code, _) = c
        .call(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        )
        .json(&lease("edge-1"))
        .send()
        .await;
    assert_eq!(code, 404);
    let mut stale = lease("edge-1");
    stale["metadata"]["resourceVersion"] = json!("999");
    let (code, s) = c
        .call("PUT", &format!("{leases}/edge-1"))
        .json(&stale)
        .send()
        .await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")), "{s}");
    let (code, s) = c
        .call("PATCH", &format!("{leases}/edge-1"))
        .body(
            "application/merge-patch+json",
            json!({"spec": {"renewTime": "2026-11-30T09:00:10.000000Z"}}).to_string(),
        )
        .send()
        .await;
    assert_eq!(code, 200, "{s}");
    assert_eq!(s["metadata"]["resourceVersion"], "2");
    // Nothing of that changed the registry's history beyond registration
    // (and the unreachable taint of a node that never posted).
    let (_, history) = c.get("/v1/history?node=edge-1").await;
    assert_eq!(
        kinds(&history),
        ["Registered", "TaintsChanged"],
        "{history}"
    );
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_probes_a_silent_node_once_before_declaring_it_unknown() {
    let site = TestSite::start(1, Ipv4Addr::new(127, 82, 0, 1)).await;
    let fleet = &site.fleet;
    let c = site.controller_with(&["--node-status-mode", "hybrid"]);
    let name = fleet.name(0);
    c.wait_ready(&name, "True").await;
    let mut k = Kubelet {
        c: &c,
        name: name.clone(),
        skew_hours: 3,
        beats: 0,
    };
    for _ in 0..3 {
        assert_eq!(k.ready("True").await.0, 200);
    }
    // The node stops pushing but its kubelet answers: it stays Ready, and history says why.
    let started = Instant::now();
    loop {
        let (_, history) = c.get(&format!("/v1/history?node={name}")).await;
        if let Some(kept) = history
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "ProbeKeptReady")
        {
            assert!(
                kept["message"]
                    .as_str()
                    .unwrap()
                    .contains("stopped posting"),
                "{kept}"
            );
            break;
        }
        assert_eq!(c.ready(&name).await.as_deref(), Some("True"));
        assert!(started.elapsed() < DEADLINE);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.ready(&name).await.as_deref(), Some("True"));
    // From then on it is probed: a dead kubelet is Unknown after the grace period.
    fleet.handle.set(&name, KubeletState::Down).unwrap();
    c.wait_ready(&name, "Unknown").await;
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_may_register_themselves_when_allowed() {
    let site = two_nodes().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    let body = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "Newcomer", "labels": {"topology.kubernetes.io/zone": "z1"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.83.0.1"}],
                   "capacity": {"cpu": "2", "memory": "4Gi"},
                   "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-30T09:00:00Z", "reason": "KubeletReady"}]}});
    let (code, node) = c.call("POST", "/api/v1/nodes").json(&body).send().await;
    assert_eq!(code, 201, "{node}");
    assert_eq!(node["metadata"]["name"], "newcomer");
    assert_eq!(condition(&node, "Ready")["status"], "True");
    assert_eq!(node["status"]["capacity"]["memory"], "4Gi");
    assert_eq!(
        node["metadata"]["labels"]["topology.kubernetes.io/zone"],
        "z1"
    );
    let (code, s) = c.call("POST", "/api/v1/nodes").json(&body).send().await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (409, Some("AlreadyExists")),
        "{s}"
    );
    let (_, history) = c.get("/v1/history?node=newcomer").await;
    let kinds: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Registered", "ConditionChanged"]);
    assert_eq!(history[0]["record"]["source"], "kubelet");
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_a_node_may_update_only_itself() {
    let site = two_nodes().start();
    let c = site
        .run()
        .tokens("# operators and nodes\nop-secret\nedge-1-secret,edge-1\n")
        .start();
    c.wait_registered("edge-1").await;
    c.wait_registered("edge-2").await;
    let patch = |token: Option<&'static str>, node: &'static str| {
        let mut request = client()
            .patch(format!("{}/api/v1/nodes/{node}/status", c.url))
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}"#);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.unwrap();
            let code = response.status().as_u16();
            (code, response.json::<Value>().await.unwrap())
        }
    };
    let (code, s) = patch(None, "edge-1").await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (401, Some("Unauthorized")),
        "{s}"
    );
    let (code, s) = patch(Some("edge-1-secret"), "edge-2").await;
    assert_eq!(
        (code, s["reason"].as_str()),
        (403, Some("Forbidden")),
        "{s}"
    );
    assert!(s["message"].as_str().unwrap().contains("edge-2"), "{s}");
    assert_eq!(patch(Some("edge-1-secret"), "edge-1").await.0, 200);
    assert_eq!(patch(Some("op-secret"), "edge-2").await.0, 200);
    // Reads need a token too.
    let node: Value = client()
        .get(format!("{}/api/v1/nodes/edge-2", c.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(node["reason"], "Unauthorized");
    let node: Value = client()
        .get(format!("{}/api/v1/nodes/edge-2", c.url))
        .bearer_auth("op-secret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready_of(&node).as_deref(), Some("True"));
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_probe_mode_lease_renewals_do_not_keep_a_dead_kubelet_ready() {
    let site = TestSite::start(1, Ipv4Addr::new(127, 84, 0, 1)).await;
    let fleet = &site.fleet;
    let c = site.controller_with(&["--node-status-mode", "probe"]);
    let name = fleet.name(0);
    c.wait_ready(&name, "True").await;
    let mut k = Kubelet {
        c: &c,
        name: name.clone(),
        skew_hours: 0,
        beats: 0,
    };
    assert!(matches!(k.renew_lease().await.0, 200 | 201));
    fleet.handle.set(&name, KubeletState::Down).unwrap();
    // Renewing all along: the probes still decide.
    let started = Instant::now();
    loop {
        k.renew_lease().await;
        if c.ready(&name).await.as_deref() == Some("Unknown") {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "a renewed Lease kept a dead kubelet Ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(c.stop().success());
    site.stop().await;
}

/// The same status patch, once as kubelets send it (read without a merge)
/// and once with a part that makes it take the merge (`metadata: {}`):
/// the two nodes must end up alike, with the same history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_status_patch_reads_as_the_merge_would() {
    // The two nodes are compared after the same patches: no grace period may
    // run out between one's patch and the other's, however slow the machine.
    let site = two_nodes()
        .grace("10m")
        .flag("--node-startup-grace-period", "10m")
        .start();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    c.wait_registered("edge-2").await;
    let info = json!({"kubeletVersion": "v1.32.4", "osImage": "Debian GNU/Linux 12", "kernelVersion": "6.1.0",
        "containerRuntimeVersion": "containerd://1.7.24", "machineID": "m", "systemUUID": "s",
        "bootID": "b", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"});
    let condition = |kind: &str, status: &str, at: &str| {
        json!({"type": kind, "status": status, "lastHeartbeatTime": at,
               "reason": format!("{kind}{status}"), "message": format!("{kind} is {status}")})
    };
    let patches = [
        // Ready first; then the pressure conditions in another order than
        // the node keeps them, one new; then heartbeats only.
        json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": [condition("Ready", "True", "2026-01-02T03:04:05Z")], "nodeInfo": info}}),
        json!({"status": {"$setElementOrder/conditions": [{"type": "DiskPressure"}, {"type": "MemoryPressure"}, {"type": "Ready"}],
            "conditions": [condition("DiskPressure", "False", "2026-01-02T03:04:06Z"),
                           condition("MemoryPressure", "True", "2026-01-02T03:04:06Z"),
                           condition("Ready", "False", "2026-01-02T03:04:06Z")]}}),
        json!({"status": {"conditions": [condition("MemoryPressure", "True", "2026-01-02T03:04:07Z"),
                                         condition("PIDPressure", "False", "2026-01-02T03:04:07Z"),
                                         condition("Ready", "False", "2026-01-02T03:04:07Z")]}}),
        json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": [condition("Ready", "False", "2026-01-02T03:04:08Z")], "nodeInfo": info}}),
        // As a kubelet sends them once it knows the node: by type, only
        // what changed (a heartbeat, and Ready's status with its reason).
        json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "DiskPressure"}, {"type": "MemoryPressure"}, {"type": "PIDPressure"}],
            "conditions": [
                {"type": "Ready", "lastHeartbeatTime": "2026-01-02T03:04:08Z", "status": "True",
                 "reason": "KubeletReady", "lastTransitionTime": "2026-01-02T03:04:08Z"},
                {"type": "DiskPressure", "lastHeartbeatTime": "2026-01-02T03:04:08Z"},
                {"type": "MemoryPressure", "lastHeartbeatTime": "2026-01-02T03:04:08Z", "message": "less"},
                {"type": "PIDPressure", "lastHeartbeatTime": "2026-01-02T03:04:08Z"}]}}),
        json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "DiskPressure"}, {"type": "MemoryPressure"}, {"type": "PIDPressure"}],
            "conditions": [
                {"type": "Ready", "lastHeartbeatTime": "2026-01-02T03:04:18Z"},
                {"type": "DiskPressure", "lastHeartbeatTime": "2026-01-02T03:04:18Z"},
                {"type": "MemoryPressure", "lastHeartbeatTime": "2026-01-02T03:04:18Z"},
                {"type": "PIDPressure", "lastHeartbeatTime": "2026-01-02T03:04:18Z"}]}}),
    ];
    let path = |node: &str| format!("/api/v1/nodes/{node}/status");
    for patch in &patches {
        let mut merged = patch.clone();
        merged["metadata"] = json!({});
        for (node, body) in [("edge-1", patch.clone()), ("edge-2", merged)] {
            let (code, answer) = c
                .call("PATCH", &path(node))
                .body("application/strategic-merge-patch+json", body.to_string())
                .send()
                .await;
            assert_eq!(code, 200, "{node}: {answer}");
        }
    }
    // A JSON merge patch replaces the list: the same either way too.
    let merge = json!({"status": {"conditions": [condition("Ready", "True", "2026-01-02T03:04:09Z"),
                                                 condition("DiskPressure", "True", "2026-01-02T03:04:09Z")]}});
    let mut merged = merge.clone();
    merged["metadata"] = json!({});
    for (node, body) in [("edge-1", merge), ("edge-2", merged)] {
        let (code, answer) = c
            .call("PATCH", &path(node))
            .body("application/merge-patch+json", body.to_string())
            .send()
            .await;
        assert_eq!(code, 200, "{node}: {answer}");
    }
    let shown = |node: &Value| {
        let conditions: Vec<Value> = node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                json!([
                    c["type"],
                    c["status"],
                    c["reason"],
                    c["message"],
                    c["lastHeartbeatTime"]
                ])
            })
            .collect();
        (conditions, node["status"]["nodeInfo"].clone())
    };
    let (_, one) = c.get("/api/v1/nodes/edge-1").await;
    let (_, two) = c.get("/api/v1/nodes/edge-2").await;
    assert_eq!(shown(&one), shown(&two), "{one}\n{two}");
    assert_eq!(one["status"]["nodeInfo"]["kubeletVersion"], "v1.32.4");
    let changes = |history: &Value| -> Vec<Value> {
        history
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "ConditionChanged")
            .map(|e| json!([e["condition"], e["from"], e["to"], e["reason"]]))
            .collect()
    };
    let (_, one) = c.get("/v1/history?node=edge-1").await;
    let (_, two) = c.get("/v1/history?node=edge-2").await;
    assert_eq!(changes(&one), changes(&two), "{one}\n{two}");
    assert!(changes(&one).len() >= 6, "{one}");
    assert!(c.stop().success());
}
