//! What a simulated kubelet writes into its node's status, as a real one
//! does: the four conditions its status setters keep (MemoryPressure,
//! DiskPressure, PIDPressure, Ready), and each update as the two-way
//! strategic merge patch between the node as the kubelet last saw it and
//! the node it wants (kubelet's `PatchNodeStatus`,
//! `strategicpatch.CreateTwoWayMergePatch`).
//!
//! In the steady state that patch names each condition by its `type` with
//! only its new `lastHeartbeatTime`; a condition whose status changes also
//! carries its status, reason, message and `lastTransitionTime`. What the
//! kubelet last saw is the node the API answered its last accepted write
//! with (what its informer holds a moment later); when the answer does not
//! show the node's conditions, what it wrote. Knowing nothing (the first
//! update, after a failed one, after a pause), it sends everything, as on
//! registration. The rest a kubelet reports (its port, images, runtime
//! handlers, features: [`kubelet_report`]) goes in that first patch and
//! the registration, and after that only where the node shown differs.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::KubeletState;

/// The condition kubelets report their health in.
const READY: &str = "Ready";

/// One node condition as the kubelet holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The part of an answered node the kubelet keeps.
#[derive(Deserialize)]
struct AnsweredNode {
    status: AnsweredStatus,
}

#[derive(Deserialize)]
struct AnsweredStatus {
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(default, rename = "daemonEndpoints")]
    daemon_endpoints: Option<Value>,
    #[serde(default)]
    features: Option<Value>,
    #[serde(default)]
    images: Option<Value>,
    #[serde(default, rename = "runtimeHandlers")]
    runtime_handlers: Option<Value>,
}

impl AnsweredStatus {
    /// What it shows of [`kubelet_report`]'s fields.
    fn report(&mut self) -> Map<String, Value> {
        [
            ("daemonEndpoints", self.daemon_endpoints.take()),
            ("features", self.features.take()),
            ("images", self.images.take()),
            ("runtimeHandlers", self.runtime_handlers.take()),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key.to_string(), value?)))
        .collect()
    }
}

/// The `status` fields a kubelet's setters fill beyond its conditions and
/// `nodeInfo` that a simulated kubelet reports, in Kubernetes' key order
/// (kubernetes `pkg/kubelet/nodestatus/setters.go`): `DaemonEndpoints`
/// (its port, 10250), `NodeFeatures` (`supplementalGroupsPolicy`, on by
/// default in v1.33), `Images` (largest first, each with at most 5 names)
/// and `RuntimeHandlers` (containerd 2's default handler and runc). It
/// holds no volumes, so `volumesInUse` stays unset, as a kubelet leaves it.
pub(crate) fn kubelet_report() -> Map<String, Value> {
    let features = json!({"recursiveReadOnlyMounts": true, "userNamespaces": false});
    let report = json!({
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "features": {"supplementalGroupsPolicy": true},
        "images": [
            {"names": ["docker.io/library/nginx:1.27"], "sizeBytes": 72_955_450},
            {"names": ["registry.k8s.io/kube-proxy:v1.33.0"], "sizeBytes": 31_252_360},
            {"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320_368},
        ],
        "runtimeHandlers": [
            {"features": features},
            {"features": features, "name": "runc"},
        ],
    });
    match report {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// One kubelet's node status: its `nodeInfo`, the rest it reports, and
/// what it last saw.
#[derive(Debug)]
pub(super) struct NodeStatus {
    info: Value,
    /// [`kubelet_report`].
    report: Map<String, Value>,
    /// The node's conditions as the kubelet last saw them; `None` when it
    /// does not know them, and the next update sends everything.
    seen: Option<Vec<Condition>>,
    /// The fields of [`NodeStatus::report`] as the node last showed them:
    /// each that differs goes into the next patch whole (the lists have no
    /// merge key). A server that drops them gets them in every patch.
    seen_report: Map<String, Value>,
}

/// A status write: its body, and the conditions it leaves the node with.
#[derive(Debug)]
pub(super) struct StatusWrite {
    pub body: Value,
    pub conditions: Vec<Condition>,
}

impl NodeStatus {
    pub fn new(info: Value) -> NodeStatus {
        NodeStatus {
            info,
            report: kubelet_report(),
            seen: None,
            seen_report: Map::new(),
        }
    }

    /// The strategic merge patch of `nodes/{name}/status` a kubelet in
    /// `state` sends at `now`; `None` while it sends nothing.
    pub fn patch(&self, state: KubeletState, now: Timestamp) -> Option<StatusWrite> {
        let seen = self.seen.as_deref().unwrap_or_default();
        let wanted = wanted(seen, state, now)?;
        let mut status = Map::new();
        if self.seen.is_none() {
            status.insert(ORDER.into(), order(&wanted));
            status.insert("conditions".into(), json!(wanted));
            status.insert("nodeInfo".into(), self.info.clone());
            status.extend(self.report.clone());
        } else {
            status = conditions_patch(seen, &wanted);
            for (key, value) in &self.report {
                if self.seen_report.get(key) != Some(value) {
                    status.insert(key.clone(), value.clone());
                }
            }
        }
        let body = if status.is_empty() {
            json!({})
        } else {
            json!({"status": status})
        };
        Some(StatusWrite {
            body,
            conditions: wanted,
        })
    }

    /// The Node a kubelet in `state` posts at `now` to register itself.
    pub fn registration(
        &self,
        name: &str,
        ip: &str,
        state: KubeletState,
        now: Timestamp,
    ) -> Option<StatusWrite> {
        let conditions = wanted(&[], state, now)?;
        let body = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": std::env::consts::ARCH,
                },
                // What `initialNode` sets with the default
                // enableControllerAttachDetach (kubernetes
                // `pkg/kubelet/kubelet_node_status.go:414`; `pkg/volume/util/util.go:54`).
                "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            },
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": ip},
                    {"type": "Hostname", "address": name},
                ],
                "capacity": {"cpu": "1", "memory": "3Gi", "pods": "110"},
                "conditions": conditions,
                "nodeInfo": self.info,
            },
        });
        let mut body = body;
        // `initialNode` runs every status setter (kubelet_node_status.go:92
        // registers the node it built).
        if let Some(status) = body["status"].as_object_mut() {
            status.extend(self.report.clone());
        }
        Some(StatusWrite { body, conditions })
    }

    /// A write was accepted with `answer`: the node it shows, else the
    /// conditions written, is what the next update is computed against.
    pub fn accepted(&mut self, answer: &[u8], written: Vec<Condition>) {
        let shown = serde_json::from_slice::<AnsweredNode>(answer)
            .ok()
            .map(|node| node.status)
            .filter(|status| !status.conditions.is_empty());
        match shown {
            Some(mut status) => {
                self.seen_report = status.report();
                self.seen = Some(status.conditions);
            }
            None => {
                self.seen = Some(written);
                self.seen_report = self.report.clone();
            }
        }
    }

    /// The node is no longer known (a write failed, or the kubelet paused):
    /// the next update sends everything.
    pub fn forget(&mut self) {
        self.seen = None;
        self.seen_report.clear();
    }
}

const ORDER: &str = "$setElementOrder/conditions";

/// `$setElementOrder/conditions`: every type, in the order wanted.
fn order(conditions: &[Condition]) -> Value {
    Value::Array(conditions.iter().map(|c| json!({"type": c.kind})).collect())
}

/// The conditions a kubelet in `state` wants at `now`, from those it saw:
/// kubelet's setters in their order. Every one gets the new heartbeat; a
/// pressure condition changes reason and message only with its status, and
/// Ready is written whole; a changed status gets `lastTransitionTime` now.
/// Conditions of other types are kept as they are.
fn wanted(seen: &[Condition], state: KubeletState, now: Timestamp) -> Option<Vec<Condition>> {
    let (ready, reason, message) = match state {
        KubeletState::Up | KubeletState::Slow => {
            ("True", "KubeletReady", "kubelet is posting ready status")
        }
        KubeletState::Sick => (
            "False",
            "KubeletNotReady",
            "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s (simulated)",
        ),
        KubeletState::Down | KubeletState::Hang => return None,
    };
    let now = time(now);
    let mut conditions = seen.to_vec();
    for (kind, reason, message) in [
        (
            "MemoryPressure",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (
            "DiskPressure",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (
            "PIDPressure",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
    ] {
        let at = match conditions.iter().position(|c| c.kind == kind) {
            Some(at) => at,
            None => {
                conditions.push(Condition {
                    kind: kind.into(),
                    status: "Unknown".into(),
                    last_heartbeat_time: None,
                    last_transition_time: None,
                    reason: String::new(),
                    message: String::new(),
                });
                conditions.len() - 1
            }
        };
        let c = &mut conditions[at];
        c.last_heartbeat_time = Some(now.clone());
        if c.status != "False" {
            c.status = "False".into();
            c.reason = reason.into();
            c.message = message.into();
            c.last_transition_time = Some(now.clone());
        }
    }
    let mut fresh = Condition {
        kind: READY.into(),
        status: ready.into(),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now),
        reason: reason.into(),
        message: message.into(),
    };
    match conditions.iter_mut().find(|c| c.kind == READY) {
        Some(old) => {
            if old.status == fresh.status {
                fresh.last_transition_time = old.last_transition_time.take();
            }
            *old = fresh;
        }
        None => conditions.push(fresh),
    }
    Some(conditions)
}

/// The status part of a two-way strategic merge patch from `seen` to
/// `wanted` (conditions merged by `type`): each changed condition with its
/// type and the fields that changed (`null` for one gone), a new one whole,
/// one gone as `$patch: delete`, and the order of them all when anything
/// changed; empty when nothing did.
fn conditions_patch(seen: &[Condition], wanted: &[Condition]) -> Map<String, Value> {
    let mut items = Vec::new();
    for c in wanted {
        let now = fields(c);
        let Some(before) = seen.iter().find(|s| s.kind == c.kind) else {
            items.push(Value::Object(now));
            continue;
        };
        let before = fields(before);
        let mut changed = Map::new();
        for (key, value) in &now {
            if before.get(key) != Some(value) {
                changed.insert(key.clone(), value.clone());
            }
        }
        for key in before.keys() {
            if !now.contains_key(key) {
                changed.insert(key.clone(), Value::Null);
            }
        }
        if !changed.is_empty() {
            changed.insert("type".into(), json!(c.kind));
            items.push(Value::Object(changed));
        }
    }
    for gone in seen
        .iter()
        .filter(|s| !wanted.iter().any(|c| c.kind == s.kind))
    {
        items.push(json!({"$patch": "delete", "type": gone.kind}));
    }
    let same_order =
        seen.len() == wanted.len() && seen.iter().zip(wanted).all(|(s, w)| s.kind == w.kind);
    let mut status = Map::new();
    if !items.is_empty() || !same_order {
        status.insert(ORDER.into(), order(wanted));
    }
    if !items.is_empty() {
        status.insert("conditions".into(), Value::Array(items));
    }
    status
}

/// A condition's fields as they go on the wire.
fn fields(c: &Condition) -> Map<String, Value> {
    match serde_json::to_value(c) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// RFC 3339 in whole seconds: a Kubernetes `Time` (condition times).
pub(super) fn time(t: Timestamp) -> String {
    format!("{t:.0}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn status() -> NodeStatus {
        NodeStatus::new(json!({"bootID": "b"}))
    }

    const TYPES: [&str; 4] = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"];

    #[test]
    fn the_first_update_sends_the_four_conditions_whole_and_node_info() {
        let s = status();
        let write = s
            .patch(KubeletState::Up, at("2026-12-02T03:00:00Z"))
            .unwrap();
        let st = &write.body["status"];
        assert_eq!(st[ORDER], json!(TYPES.map(|t| json!({"type": t}))));
        assert_eq!(st["nodeInfo"], json!({"bootID": "b"}));
        let conditions = st["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 4);
        assert_eq!(
            conditions[0],
            json!({"type": "MemoryPressure", "status": "False",
                   "reason": "KubeletHasSufficientMemory",
                   "message": "kubelet has sufficient memory available",
                   "lastHeartbeatTime": "2026-12-02T03:00:00Z",
                   "lastTransitionTime": "2026-12-02T03:00:00Z"})
        );
        assert_eq!(conditions[1]["reason"], "KubeletHasNoDiskPressure");
        assert_eq!(conditions[2]["reason"], "KubeletHasSufficientPID");
        assert_eq!(
            (&conditions[3]["status"], &conditions[3]["reason"]),
            (&json!("True"), &json!("KubeletReady"))
        );
        assert_eq!(write.conditions.len(), 4);
    }

    #[test]
    fn in_the_steady_state_only_heartbeats_are_sent() {
        let mut s = status();
        let first = s
            .patch(KubeletState::Up, at("2026-12-02T03:00:00Z"))
            .unwrap();
        // An answer without the node: what was written is what was seen.
        s.accepted(b"", first.conditions);
        let next = s
            .patch(KubeletState::Up, at("2026-12-02T03:00:10Z"))
            .unwrap();
        let beat = |t: &str| json!({"lastHeartbeatTime": "2026-12-02T03:00:10Z", "type": t});
        assert_eq!(
            next.body,
            json!({"status": {
                ORDER: TYPES.map(|t| json!({"type": t})),
                "conditions": TYPES.map(beat),
            }})
        );
        // Byte for byte what a kubelet sends: keys in order, as Go writes maps.
        assert_eq!(
            next.body.to_string(),
            r#"{"status":{"$setElementOrder/conditions":[{"type":"MemoryPressure"},{"type":"DiskPressure"},{"type":"PIDPressure"},{"type":"Ready"}],"conditions":[{"lastHeartbeatTime":"2026-12-02T03:00:10Z","type":"MemoryPressure"},{"lastHeartbeatTime":"2026-12-02T03:00:10Z","type":"DiskPressure"},{"lastHeartbeatTime":"2026-12-02T03:00:10Z","type":"PIDPressure"},{"lastHeartbeatTime":"2026-12-02T03:00:10Z","type":"Ready"}]}}"#
        );
        // Within the same second nothing changed: an empty patch, as kubelet sends.
        s.accepted(b"", next.conditions);
        let same = s
            .patch(KubeletState::Slow, at("2026-12-02T03:00:10.5Z"))
            .unwrap();
        assert_eq!(same.body, json!({}));
    }

    /// kubelet sends the rest it reports in its first patch, then only
    /// what differs from the node it read (`nodeStatusHasChanged`,
    /// kubernetes `pkg/kubelet/kubelet_node_status.go:813-832`): against a
    /// server that keeps it, nothing more; against one that drops it,
    /// all of it in every patch.
    #[test]
    fn the_report_goes_first_then_only_where_the_node_shown_differs() {
        let mut s = status();
        let first = s
            .patch(KubeletState::Up, at("2026-12-02T03:00:00Z"))
            .unwrap();
        let st = &first.body["status"];
        assert_eq!(st["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        assert_eq!(st["images"].as_array().unwrap().len(), 3);
        assert_eq!(st["runtimeHandlers"][1]["name"], "runc");
        assert_eq!(st["features"]["supplementalGroupsPolicy"], true);
        // Answered with the node as kept: the next patch has heartbeats only.
        let mut kept = json!({"kind": "Node", "status": {"conditions": first.conditions}});
        for (key, value) in kubelet_report() {
            kept["status"][key] = value;
        }
        s.accepted(kept.to_string().as_bytes(), first.conditions.clone());
        let next = s
            .patch(KubeletState::Up, at("2026-12-02T03:00:10Z"))
            .unwrap();
        let keys: Vec<&String> = next.body["status"].as_object().unwrap().keys().collect();
        assert_eq!(keys, [ORDER, "conditions"]);
        // Answered by a server that dropped it: all of it again, each time.
        let dropped = json!({"kind": "Node", "status": {"conditions": next.conditions}});
        s.accepted(dropped.to_string().as_bytes(), next.conditions.clone());
        let again = s
            .patch(KubeletState::Up, at("2026-12-02T03:00:20Z"))
            .unwrap();
        for key in ["daemonEndpoints", "features", "images", "runtimeHandlers"] {
            assert_eq!(again.body["status"][key], kubelet_report()[key], "{key}");
        }
        // A registration carries it too (`initialNode` runs every setter).
        let registered = status()
            .registration(
                "n",
                "127.0.0.2",
                KubeletState::Up,
                at("2026-12-02T03:00:00Z"),
            )
            .unwrap();
        assert_eq!(
            registered.body["status"]["images"],
            kubelet_report()["images"]
        );
    }

    #[test]
    fn a_change_of_state_sends_the_changed_condition_and_its_transition() {
        let mut s = status();
        let first = s
            .patch(KubeletState::Up, at("2026-12-02T03:00:00Z"))
            .unwrap();
        s.accepted(b"", first.conditions);
        let sick = s
            .patch(KubeletState::Sick, at("2026-12-02T03:00:04Z"))
            .unwrap();
        let conditions = sick.body["status"]["conditions"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(
            conditions[0],
            json!({"lastHeartbeatTime": "2026-12-02T03:00:04Z", "type": "MemoryPressure"})
        );
        let ready = &conditions[3];
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "KubeletNotReady");
        assert!(ready["message"].as_str().unwrap().starts_with("PLEG"));
        assert_eq!(ready["lastTransitionTime"], "2026-12-02T03:00:04Z");
        assert_eq!(ready["lastHeartbeatTime"], "2026-12-02T03:00:04Z");
        s.accepted(b"", sick.conditions);
        // Still sick: heartbeats only; the transition time stays.
        let still = s
            .patch(KubeletState::Sick, at("2026-12-02T03:00:14Z"))
            .unwrap();
        assert_eq!(
            still.body["status"]["conditions"][3],
            json!({"lastHeartbeatTime": "2026-12-02T03:00:14Z", "type": "Ready"})
        );
        assert_eq!(
            still.conditions[3].last_transition_time.as_deref(),
            Some("2026-12-02T03:00:04Z")
        );
        assert!(s
            .patch(KubeletState::Down, at("2026-12-02T03:00:20Z"))
            .is_none());
        assert!(s
            .patch(KubeletState::Hang, at("2026-12-02T03:00:20Z"))
            .is_none());
    }

    #[test]
    fn what_the_answer_shows_is_what_the_next_patch_starts_from() {
        let mut s = status();
        let first = s
            .patch(KubeletState::Up, at("2026-12-02T03:00:00Z"))
            .unwrap();
        // The controller found the node silent meanwhile, and shows it so,
        // with a condition of its own the kubelet keeps.
        let mut shown: Vec<Value> = first
            .conditions
            .iter()
            .map(|c| {
                let mut c = serde_json::to_value(c).unwrap();
                c["status"] = json!("Unknown");
                c["reason"] = json!("NodeStatusUnknown");
                c["message"] = json!("Kubelet stopped posting node status.");
                c
            })
            .collect();
        shown.insert(0, json!({"type": "NetworkUnavailable", "status": "False",
            "reason": "RouteCreated", "message": "routes", "lastHeartbeatTime": "2026-12-02T02:00:00Z",
            "lastTransitionTime": "2026-12-02T02:00:00Z"}));
        let answer = json!({"kind": "Node", "status": {"conditions": shown, "nodeInfo": {}}});
        s.accepted(answer.to_string().as_bytes(), first.conditions);
        let next = s
            .patch(KubeletState::Up, at("2026-12-02T03:01:00Z"))
            .unwrap();
        let st = &next.body["status"];
        assert_eq!(st[ORDER][0], json!({"type": "NetworkUnavailable"}));
        let conditions = st["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 4, "{st}");
        assert_eq!(
            conditions[0],
            json!({"type": "MemoryPressure", "status": "False",
                   "reason": "KubeletHasSufficientMemory",
                   "message": "kubelet has sufficient memory available",
                   "lastHeartbeatTime": "2026-12-02T03:01:00Z",
                   "lastTransitionTime": "2026-12-02T03:01:00Z"})
        );
        assert_eq!(conditions[3]["status"], "True");
        assert_eq!(conditions[3]["lastTransitionTime"], "2026-12-02T03:01:00Z");
        // Forgotten: everything again.
        s.forget();
        let again = s
            .patch(KubeletState::Up, at("2026-12-02T03:01:10Z"))
            .unwrap();
        assert_eq!(
            again.body["status"]["conditions"].as_array().unwrap().len(),
            4
        );
        assert!(again.body["status"]["nodeInfo"].is_object());
    }

    #[test]
    fn the_floors_stored_node_brings_the_same_next_patch_as_the_controllers_answer() {
        let first = status()
            .patch(KubeletState::Up, at("2026-12-02T06:15:42Z"))
            .unwrap();
        let mut after_controller = status();
        after_controller.accepted(
            crate::floor::CONTROLLER_REPLY.as_bytes(),
            first.conditions.clone(),
        );
        let node = crate::floor::FloorNode {
            name: "sim-p0-00000".into(),
            address: "127.72.0.1".into(),
        };
        let stored = crate::floor::stored_node(&node, at("2026-12-02T05:00:00Z"), 10_000);
        let mut after_floor = status();
        after_floor.accepted(stored.as_bytes(), first.conditions);
        let now = at("2026-12-02T06:15:52Z");
        let theirs = after_controller.patch(KubeletState::Up, now).unwrap();
        let ours = after_floor.patch(KubeletState::Up, now).unwrap();
        assert_eq!(ours.body.to_string(), theirs.body.to_string());
        // Each condition's new heartbeat, Ready first as the answer lists it.
        assert_eq!(
            ours.body["status"]["conditions"][0],
            json!({"lastHeartbeatTime": "2026-12-02T06:15:52Z", "type": "Ready"})
        );
    }

    #[test]
    fn a_registration_carries_the_four_conditions_and_node_info() {
        let s = status();
        let write = s
            .registration(
                "sim-00001",
                "127.101.0.2",
                KubeletState::Up,
                at("2026-12-02T03:00:00Z"),
            )
            .unwrap();
        let node = &write.body;
        assert_eq!(node["metadata"]["name"], "sim-00001");
        assert_eq!(
            node["status"]["addresses"][0],
            json!({"type": "InternalIP", "address": "127.101.0.2"})
        );
        assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 4);
        assert_eq!(node["status"]["conditions"][3]["type"], "Ready");
        assert_eq!(node["status"]["nodeInfo"]["bootID"], "b");
        assert!(s
            .registration(
                "n",
                "127.0.0.2",
                KubeletState::Hang,
                at("2026-12-02T03:00:00Z")
            )
            .is_none());
    }
}
