//! A status patch as kubelets send it, thousands a second, read straight
//! into typed fields: conditions keyed by type, `nodeInfo` given whole, and
//! the ordering directive. A kubelet sends the two-way strategic merge patch
//! between the node as it last saw it and the node it wants: each condition
//! by its `type`, with its new `lastHeartbeatTime` and whichever of status,
//! reason, message and `lastTransitionTime` changed. Those it leaves out are
//! the node's own, as the merge by type would leave them, so such a patch is
//! set against the node's current conditions ([`KubeletPatch::against`])
//! and the node need not be rendered and merged. Any other shape (another
//! field, a `null`, a key twice, a type given twice, a value that is not a
//! string, a condition given in part that the node does not have, or in
//! part in a JSON merge patch, which replaces the list) is not read here: it
//! takes the general merge, which also answers what is refused.
//!
//! The patch's strings are borrowed from the body, and the pushed status is
//! written from them and the node at once: the only copies are the strings
//! the pushed status keeps.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use super::text::{present, Text};
use crate::kube::patch::PatchKind;
use crate::model::{self, validation, ConditionStatus, NodeInfo, PushedCondition, PushedStatus};

/// What a kubelet's patch pushes.
pub(super) struct KubeletStatus {
    pub status: PushedStatus,
}

impl KubeletStatus {
    /// The condition types the patch names, in the order they are pushed.
    pub fn types(&self) -> impl Iterator<Item = &str> {
        self.status.conditions.iter().map(|c| c.kind.as_str())
    }
}

/// A kubelet's status patch as read, borrowing its body, before it is set
/// against its node.
pub(super) struct KubeletPatch<'a> {
    kind: PatchKind,
    conditions: Vec<Condition<'a>>,
    node_info: Option<Info<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "'de: 'a"))]
struct Patch<'a> {
    status: Status<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "'de: 'a"))]
struct Status<'a> {
    #[serde(default, deserialize_with = "present")]
    conditions: Option<Vec<Condition<'a>>>,
    /// Checked ([`Order`]), not kept: the merge reads it, not this path.
    #[serde(
        rename = "$setElementOrder/conditions",
        default,
        deserialize_with = "present"
    )]
    order: Option<Order>,
    #[serde(rename = "nodeInfo", default, deserialize_with = "present")]
    node_info: Option<Info<'a>>,
}

/// One condition of the patch: its type and heartbeat, and of the rest
/// what changed (a kubelet's first patch gives them all).
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    bound(deserialize = "'de: 'a")
)]
struct Condition<'a> {
    #[serde(rename = "type")]
    kind: Text<'a>,
    #[serde(default, deserialize_with = "present")]
    status: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    reason: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    message: Option<Text<'a>>,
    last_heartbeat_time: Time,
    /// Not pushed (the controller keeps its own), but read as the merge
    /// reads it: a time that is not one takes the general path.
    #[serde(default, deserialize_with = "present")]
    #[allow(dead_code)]
    last_transition_time: Option<Time>,
}

/// `$setElementOrder/conditions` as a kubelet sends it: a list of
/// `{"type": ...}`, each entry read as the merge reads it (its string
/// valid UTF-8 without lone surrogates) and then dropped, so that nothing
/// the merge would refuse as JSON is answered here. Skipping the entries
/// unread would not check them: serde_json skips a value without checking
/// its strings, the range of its numbers or its depth. Any other entry
/// takes the general path. Read without allocating.
struct Order;

impl<'de> Deserialize<'de> for Order {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Order, D::Error> {
        deserializer.deserialize_seq(OrderVisitor)
    }
}

struct OrderVisitor;

impl<'de> Visitor<'de> for OrderVisitor {
    type Value = Order;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of condition types")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut entries: A) -> Result<Order, A::Error> {
        // Bounded by the body, which the guard has capped.
        while entries.next_element::<OrderEntry<'de>>()?.is_some() {}
        Ok(Order)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "'de: 'a"))]
struct OrderEntry<'a> {
    #[serde(rename = "type")]
    #[allow(dead_code)]
    kind: Text<'a>,
}

/// `status.nodeInfo` with every field a node records, and no other.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    bound(deserialize = "'de: 'a")
)]
struct Info<'a> {
    #[serde(rename = "machineID")]
    machine_id: Text<'a>,
    #[serde(rename = "systemUUID")]
    system_uuid: Text<'a>,
    #[serde(rename = "bootID")]
    boot_id: Text<'a>,
    kernel_version: Text<'a>,
    os_image: Text<'a>,
    container_runtime_version: Text<'a>,
    kubelet_version: Text<'a>,
    kube_proxy_version: Text<'a>,
    operating_system: Text<'a>,
    architecture: Text<'a>,
}

/// A kubelet's patch `body`, read; `None` when the patch is of any other
/// shape (the general path then merges it, or says why not).
pub(super) fn read(kind: PatchKind, body: &[u8]) -> Option<KubeletPatch<'_>> {
    let Patch { status } = serde_json::from_slice(body).ok()?;
    // Only a strategic merge patch has directives; in a JSON merge patch
    // the key would be a field of that name.
    if status.order.is_some() && kind != PatchKind::Strategic {
        return None;
    }
    let conditions = status.conditions.unwrap_or_default();
    for (i, c) in conditions.iter().enumerate() {
        if conditions[..i].iter().any(|o| o.kind == c.kind) {
            return None;
        }
        // A JSON merge patch replaces the list: a condition in part is a
        // condition without those fields, which the merge refuses.
        if kind != PatchKind::Strategic && !c.is_whole() {
            return None;
        }
    }
    Some(KubeletPatch {
        kind,
        conditions,
        node_info: status.node_info,
    })
}

impl KubeletPatch<'_> {
    /// What the patch pushes, set against `node` as a strategic merge by
    /// type would set it: each field a condition leaves out is the node's,
    /// and the conditions are in the node's order, types it does not have
    /// after them in the patch's (a JSON merge patch keeps its own order).
    /// `None` when the merge might come out otherwise, or the checks refuse
    /// what it pushes (the general path then says why): a type given in
    /// part that the node does not have, a node that has a type twice, or
    /// one whose other conditions the merge would refuse.
    ///
    /// Runs under the view's read lock: it copies only the strings the
    /// pushed status keeps.
    pub fn against(mut self, node: &model::Node) -> Option<KubeletStatus> {
        let had = &node.conditions;
        if self.kind == PatchKind::Strategic {
            for (i, c) in had.iter().enumerate() {
                if had[..i].iter().any(|o| o.kind == c.kind) {
                    return None;
                }
                // The merged list holds every condition of the node, and the
                // merge checks them all; the fast path need only check those
                // the patch does not name (the rest are checked when pushed).
                let named = self.conditions.iter().any(|p| p.kind.as_str() == c.kind);
                if !named && !validation::condition(i, &c.kind, &c.reason, &c.message).is_empty() {
                    return None;
                }
            }
            if self.conditions.len() > 1 {
                self.conditions.sort_by_key(|c| {
                    had.iter()
                        .position(|h| h.kind == c.kind.as_str())
                        .unwrap_or(usize::MAX)
                });
            }
        }
        let mut conditions = Vec::with_capacity(self.conditions.len());
        for (i, c) in self.conditions.into_iter().enumerate() {
            // Only a strategic merge patch gives a condition in part (see `read`).
            let current = || had.iter().find(|h| h.kind == c.kind.as_str());
            let status = match &c.status {
                Some(given) => given.as_str().parse::<ConditionStatus>().ok()?,
                None => current()?.status,
            };
            let reason = match c.reason {
                Some(given) => given.into_owned(),
                None => current()?.reason.clone(),
            };
            let message = match c.message {
                Some(given) => given.into_owned(),
                None => current()?.message.clone(),
            };
            // The checks a pushed status takes (`crate::kube::pushed_status`).
            if !validation::condition(i, c.kind.as_str(), &reason, &message).is_empty() {
                return None;
            }
            conditions.push(PushedCondition {
                kind: c.kind.into_owned(),
                status,
                last_heartbeat: Some(model::Micros(c.last_heartbeat_time.0.as_microsecond())),
                reason,
                message,
            });
        }
        let node_info = match self.node_info {
            Some(info) => Some(info.into_node_info()?),
            None => None,
        };
        Some(KubeletStatus {
            status: PushedStatus {
                conditions,
                addresses: None,
                node_info,
                capacity: None,
            },
        })
    }
}

impl Condition<'_> {
    /// Whether every field a pushed condition keeps is given.
    fn is_whole(&self) -> bool {
        self.status.is_some() && self.reason.is_some() && self.message.is_some()
    }
}

impl Info<'_> {
    /// The node info pushed; `None` if a field is past its bound.
    fn into_node_info(self) -> Option<NodeInfo> {
        let fields = [
            ("machineID", &self.machine_id),
            ("systemUUID", &self.system_uuid),
            ("bootID", &self.boot_id),
            ("kernelVersion", &self.kernel_version),
            ("osImage", &self.os_image),
            ("containerRuntimeVersion", &self.container_runtime_version),
            ("kubeletVersion", &self.kubelet_version),
            ("kubeProxyVersion", &self.kube_proxy_version),
            ("operatingSystem", &self.operating_system),
            ("architecture", &self.architecture),
        ];
        if fields
            .iter()
            .any(|(name, value)| !validation::node_info_field(name, value.as_str()).is_empty())
        {
            return None;
        }
        Some(NodeInfo {
            machine_id: self.machine_id.into_owned(),
            system_uuid: self.system_uuid.into_owned(),
            boot_id: self.boot_id.into_owned(),
            kernel_version: self.kernel_version.into_owned(),
            os_image: self.os_image.into_owned(),
            container_runtime_version: self.container_runtime_version.into_owned(),
            kubelet_version: self.kubelet_version.into_owned(),
            kube_proxy_version: self.kube_proxy_version.into_owned(),
            operating_system: self.operating_system.into_owned(),
            architecture: self.architecture.into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::{json, Value};

    use k8s_openapi::api::core::v1::Node as KubeNode;

    use super::*;
    use crate::model::{Micros, Resources};

    fn info() -> Value {
        json!({
            "machineID": "m", "systemUUID": "u", "bootID": "b", "kernelVersion": "6.1",
            "osImage": "Debian", "containerRuntimeVersion": "containerd://2.0",
            "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64",
        })
    }

    fn ready() -> Value {
        json!({
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": "2026-11-30T09:00:00Z",
        })
    }

    fn kubelets_patch() -> Value {
        json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": [ready()],
            "nodeInfo": info(),
        }})
    }

    /// The patch a kubelet sends in the steady state: every condition's new
    /// heartbeat, by type.
    fn steady_patch(at: &str) -> Value {
        let types = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"];
        json!({"status": {
            "$setElementOrder/conditions": types.map(|t| json!({"type": t})),
            "conditions": types.map(|t| json!({"lastHeartbeatTime": at, "type": t})),
        }})
    }

    fn condition(
        kind: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> model::Condition {
        model::Condition {
            kind: kind.into(),
            status,
            last_heartbeat: Micros(1_764_000_100_500_000),
            last_transition: Micros(1_764_000_000_000_000),
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A node as a kubelet's first patch leaves it, with Ready in the middle
    /// and a condition of another component first.
    fn node() -> model::Node {
        model::Node {
            name: "edge-1".into(),
            uid: "u-1".into(),
            created: Micros(1_764_000_000_123_456),
            resource_version: 42,
            source: "static".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            external_id: String::new(),
            provider_id: String::new(),
            capacity: Resources::default(),
            unschedulable: false,
            taints: Vec::new(),
            addresses: Vec::new(),
            conditions: vec![
                condition(
                    "NetworkUnavailable",
                    ConditionStatus::False,
                    "RouteCreated",
                    "routes",
                ),
                condition(
                    "MemoryPressure",
                    ConditionStatus::False,
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition(
                    "Ready",
                    ConditionStatus::True,
                    "KubeletReady",
                    "kubelet is posting ready status",
                ),
                condition(
                    "DiskPressure",
                    ConditionStatus::False,
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                // Set by the controller when the node fell silent: no message.
                condition(
                    "PIDPressure",
                    ConditionStatus::Unknown,
                    "NodeStatusUnknown",
                    "",
                ),
            ],
            node_info: NodeInfo::default(),
        }
    }

    /// The fast path: read, set against the node, pushed.
    fn fast(kind: PatchKind, node: &model::Node, patch: &Value) -> Option<KubeletStatus> {
        read(kind, &serde_json::to_vec(patch).unwrap())?.against(node)
    }

    /// The general path on the same node: rendered (with a heartbeat newer
    /// than the node's held, as the view may have), merged, pushed.
    fn merged(kind: PatchKind, node: &model::Node, patch: &Value) -> Result<PushedStatus, u16> {
        let beat = Some(Micros(1_764_000_200_000_000));
        let current = super::super::Rendered::of(node, beat, patch)
            .into_value(patch)
            .unwrap();
        let media = match kind {
            PatchKind::Merge => "application/merge-patch+json",
            PatchKind::Strategic => "application/strategic-merge-patch+json",
        };
        let only = super::super::PatchedFields::of(patch);
        super::super::merged_status(media, Ok(patch), current, &node.name, only)
            .map(|(status, expected)| {
                assert_eq!(expected, None);
                status
            })
            .map_err(|r| r.status().as_u16())
    }

    /// Both paths on the same node and patch: the fast one reads it, and
    /// pushes exactly what the merge would.
    fn same_as_the_merge(kind: PatchKind, node: &model::Node, patch: &Value) -> KubeletStatus {
        let read = fast(kind, node, patch).unwrap_or_else(|| panic!("read: {patch}"));
        assert_eq!(
            Ok(read.status.clone()),
            merged(kind, node, patch),
            "{patch}"
        );
        read
    }

    fn read_value(kind: PatchKind, patch: &Value) -> Option<KubeletStatus> {
        fast(kind, &node(), patch)
    }

    #[test]
    fn a_kubelets_patch_pushes_what_the_node_object_would() {
        let patch = kubelets_patch();
        let read = read_value(PatchKind::Strategic, &patch).expect("a kubelet's patch is read");
        let node: KubeNode = serde_json::from_value(patch).unwrap();
        assert_eq!(read.status, crate::kube::pushed_status(&node).unwrap());
        assert_eq!(read.types().collect::<Vec<_>>(), ["Ready"]);
        assert_eq!(read.status.node_info.unwrap().boot_id, "b");
    }

    #[test]
    fn a_kubelets_steady_patch_takes_the_rest_from_the_node_as_the_merge_does() {
        let node = node();
        let patch = steady_patch("2026-12-02T03:10:00Z");
        let read = same_as_the_merge(PatchKind::Strategic, &node, &patch);
        // In the node's order, each with the node's status, reason and
        // message and the patch's heartbeat.
        let got: Vec<(&str, ConditionStatus, &str, &str)> = read
            .status
            .conditions
            .iter()
            .map(|c| {
                (
                    c.kind.as_str(),
                    c.status,
                    c.reason.as_str(),
                    c.message.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "MemoryPressure",
                    ConditionStatus::False,
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available"
                ),
                (
                    "Ready",
                    ConditionStatus::True,
                    "KubeletReady",
                    "kubelet is posting ready status"
                ),
                (
                    "DiskPressure",
                    ConditionStatus::False,
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure"
                ),
                (
                    "PIDPressure",
                    ConditionStatus::Unknown,
                    "NodeStatusUnknown",
                    ""
                ),
            ]
        );
        let beat: jiff::Timestamp = "2026-12-02T03:10:00Z".parse().unwrap();
        assert!(read
            .status
            .conditions
            .iter()
            .all(|c| c.last_heartbeat == Some(Micros(beat.as_microsecond()))));
        assert_eq!(
            read.types().collect::<Vec<_>>(),
            ["MemoryPressure", "Ready", "DiskPressure", "PIDPressure"]
        );
        assert!(read.status.node_info.is_none());
    }

    #[test]
    fn a_change_of_status_sends_its_fields_and_matches_the_merge() {
        let node = node();
        let patch = json!({"status": {
            "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "DiskPressure"},
                                            {"type": "PIDPressure"}, {"type": "Ready"}],
            "conditions": [
                {"lastHeartbeatTime": "2026-12-02T03:10:04Z", "type": "MemoryPressure"},
                {"lastHeartbeatTime": "2026-12-02T03:10:04Z", "type": "DiskPressure"},
                {"lastHeartbeatTime": "2026-12-02T03:10:04Z", "lastTransitionTime": "2026-12-02T03:10:04Z",
                 "message": "kubelet has sufficient PID available", "reason": "KubeletHasSufficientPID",
                 "status": "False", "type": "PIDPressure"},
                {"lastHeartbeatTime": "2026-12-02T03:10:04Z", "lastTransitionTime": "2026-12-02T03:10:04Z",
                 "message": "PLEG is not healthy", "reason": "KubeletNotReady", "status": "False",
                 "type": "Ready"},
            ],
        }});
        let read = same_as_the_merge(PatchKind::Strategic, &node, &patch);
        let ready = read
            .status
            .conditions
            .iter()
            .find(|c| c.kind == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::False, "KubeletNotReady")
        );
        // A new type given whole comes after the node's, in the patch's order.
        let patch = json!({"status": {"conditions": [
            {"lastHeartbeatTime": "2026-12-02T03:10:05Z", "type": "Ready"},
            {"lastHeartbeatTime": "2026-12-02T03:10:05Z", "type": "KernelDeadlock", "status": "False",
             "reason": "KernelHasNoDeadlock", "message": "kernel has no deadlock"},
            {"lastHeartbeatTime": "2026-12-02T03:10:05Z", "type": "MemoryPressure", "reason": "Fine"},
        ]}});
        let read = same_as_the_merge(PatchKind::Strategic, &node, &patch);
        let order: Vec<&str> = read
            .status
            .conditions
            .iter()
            .map(|c| c.kind.as_str())
            .collect();
        assert_eq!(order, ["MemoryPressure", "Ready", "KernelDeadlock"]);
        assert_eq!(read.status.conditions[0].reason, "Fine");
    }

    #[test]
    fn every_part_of_a_condition_given_or_left_out_matches_the_merge() {
        let node = node();
        let fields = [
            ("status", json!("False")),
            ("reason", json!("SomethingElse")),
            ("message", json!("")),
            ("lastTransitionTime", json!("2026-12-02T03:00:00Z")),
        ];
        for kind in ["Ready", "PIDPressure", "NetworkUnavailable"] {
            for given in 0..1u32 << fields.len() {
                let mut c = json!({"type": kind, "lastHeartbeatTime": "2026-12-02T03:10:00Z"});
                for (bit, (field, value)) in fields.iter().enumerate() {
                    if given & (1 << bit) != 0 {
                        c[*field] = value.clone();
                    }
                }
                let patch = json!({"status": {"conditions": [c]}});
                same_as_the_merge(PatchKind::Strategic, &node, &patch);
                // A JSON merge patch replaces the list: only a whole condition is read.
                let whole = given & 0b111 == 0b111;
                assert_eq!(
                    fast(PatchKind::Merge, &node, &patch).is_some(),
                    whole,
                    "{patch}"
                );
                if whole {
                    same_as_the_merge(PatchKind::Merge, &node, &patch);
                }
            }
        }
    }

    #[test]
    fn escaped_strings_are_read_as_the_merge_reads_them() {
        let node = node();
        // Escapes in a type, a message and nodeInfo: unescaped, not borrowed.
        let body = br#"{"status": {"conditions": [
            {"type": "Read\u0079", "lastHeartbeatTime": "2026-12-02T03:10:00Z",
             "message": "say \"hi\"\n\u00e9"},
            {"type": "MemoryPressure", "lastHeartbeatTime": "2026-12-02T03:10:00Z"}],
            "nodeInfo": {"machineID": "m\/1", "systemUUID": "u", "bootID": "b",
                "kernelVersion": "6.1", "osImage": "Debian \"12\"",
                "containerRuntimeVersion": "containerd://2.0", "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}}}"#;
        let patch: Value = serde_json::from_slice(body).unwrap();
        let read = read(PatchKind::Strategic, body)
            .unwrap()
            .against(&node)
            .unwrap();
        assert_eq!(
            Ok(read.status.clone()),
            merged(PatchKind::Strategic, &node, &patch)
        );
        let ready = &read.status.conditions[1];
        assert_eq!(
            (ready.kind.as_str(), ready.message.as_str()),
            ("Ready", "say \"hi\"\né")
        );
        let info = read.status.node_info.unwrap();
        assert_eq!(
            (info.machine_id.as_str(), info.os_image.as_str()),
            ("m/1", "Debian \"12\"")
        );
    }

    #[test]
    fn conditions_alone_or_node_info_alone_are_read() {
        let conditions = json!({"status": {"conditions": [ready()]}});
        let read = read_value(PatchKind::Merge, &conditions).unwrap();
        assert!(read.status.node_info.is_none());
        let info = json!({"status": {"nodeInfo": info()}});
        let read = read_value(PatchKind::Strategic, &info).unwrap();
        assert!(read.status.conditions.is_empty() && read.types().next().is_none());
        same_as_the_merge(PatchKind::Strategic, &node(), &kubelets_patch());
    }

    #[test]
    fn any_other_shape_is_left_to_the_merge() {
        let mut with_transition = ready();
        with_transition["lastTransitionTime"] = json!("2026-11-30T08:00:00Z");
        assert!(read_value(
            PatchKind::Strategic,
            &json!({"status": {"conditions": [with_transition]}})
        )
        .is_some());
        let beat = "2026-12-02T03:10:00Z";
        let mut cases = vec![
            json!({"status": {"conditions": null}}),
            json!({"status": {"nodeInfo": null}}),
            json!({"status": null}),
            json!({"status": {"conditions": [ready(), ready()]}}),
            json!({"status": {"conditions": [ready()], "addresses": []}}),
            json!({"status": {"conditions": [ready()]}, "metadata": {}}),
            json!({"status": {"$setElementOrder/conditions": [], "conditions": [ready()]}}),
            json!([1]),
            // A condition in part: twice, without its heartbeat, of a type
            // the node does not have, or with a directive.
            json!({"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": beat},
                                             {"type": "Ready", "lastHeartbeatTime": beat}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            json!({"status": {"conditions": [{"type": "KernelDeadlock", "lastHeartbeatTime": beat}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": beat, "status": null}]}}),
            // Directives other than the order of conditions.
            json!({"status": {"$patch": "replace", "conditions": [ready()]}}),
            json!({"status": {"$retainKeys": ["conditions"], "conditions": [ready()]}}),
            json!({"status": {"$deleteFromPrimitiveList/conditions": [], "conditions": [ready()]}}),
            json!({"$patch": "replace", "status": {"conditions": [ready()]}}),
        ];
        for (field, value) in [
            ("reason", Value::Null),
            ("status", json!("Maybe")),
            ("lastHeartbeatTime", json!("yesterday")),
            ("lastTransitionTime", Value::Null),
            ("extra", json!("x")),
        ] {
            let mut c = ready();
            c[field] = value;
            cases.push(json!({"status": {"conditions": [c]}}));
        }
        let mut partial = info();
        partial.as_object_mut().unwrap().remove("bootID");
        cases.push(json!({"status": {"nodeInfo": partial}}));
        let mut wider = info();
        wider["swap"] = json!({});
        cases.push(json!({"status": {"nodeInfo": wider}}));
        for (i, patch) in cases.iter().enumerate() {
            // The directive case is a JSON merge patch; the rest are both.
            let kinds: &[PatchKind] = if i == 6 {
                &[PatchKind::Merge]
            } else {
                &[PatchKind::Merge, PatchKind::Strategic]
            };
            for kind in kinds {
                assert!(read_value(*kind, patch).is_none(), "{kind:?} {patch}");
            }
        }
        // A key given twice is left to the merge too.
        let twice = br#"{"status":{"conditions":[],"conditions":[]}}"#;
        assert!(read(PatchKind::Merge, twice).is_none());
    }

    #[test]
    fn an_order_that_is_not_json_the_merge_reads_is_left_to_it() {
        let patch = |order: &[u8]| {
            let mut body = br#"{"status":{"$setElementOrder/conditions":"#.to_vec();
            body.extend_from_slice(order);
            body.extend_from_slice(
                br#","conditions":[{"type":"Ready","lastHeartbeatTime":"2026-12-02T03:10:00Z"}]}}"#,
            );
            body
        };
        assert!(read(PatchKind::Strategic, &patch(br#"[{"type":"Ready"}]"#)).is_some());
        let deep = format!("[{}1{}]", "[".repeat(200), "]".repeat(200));
        // Not JSON to the merge (out of range, a lone surrogate, not UTF-8,
        // too deep): it answers 400, and so must this path not read them.
        let not_json = [
            &b"[1e400]"[..],
            br#"["\ud800"]"#,
            br#"[{"type":"\ud800"}]"#,
            b"[{\"type\":\"Rea\xffy\"}]",
            deep.as_bytes(),
        ];
        // JSON of another shape: the merge decides.
        let other = [&b"[1]"[..], br#"[{"type":"Ready","x":1}]"#];
        for order in not_json {
            assert!(serde_json::from_slice::<Value>(&patch(order)).is_err());
        }
        for order in not_json.into_iter().chain(other) {
            let body = patch(order);
            assert!(
                read(PatchKind::Strategic, &body).is_none(),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    #[test]
    fn a_node_the_merge_would_refuse_is_left_to_it() {
        let patch = steady_patch("2026-12-02T03:10:00Z");
        // A type twice on the node.
        let mut twice = node();
        twice.conditions.push(twice.conditions[2].clone());
        assert!(fast(PatchKind::Strategic, &twice, &patch).is_none());
        assert!(merged(PatchKind::Strategic, &twice, &patch).is_err());
        // A condition the patch does not name, with a reason the checks refuse.
        let mut refused = node();
        refused.conditions[0].reason = "not camel case".into();
        assert!(fast(PatchKind::Strategic, &refused, &patch).is_none());
        assert_eq!(merged(PatchKind::Strategic, &refused, &patch), Err(422));
        // The same node, given a JSON merge patch (which replaces the list).
        let whole = json!({"status": {"conditions": [ready()]}});
        same_as_the_merge(PatchKind::Merge, &refused, &whole);
    }

    fn arbitrary_condition_status() -> impl Strategy<Value = ConditionStatus> {
        prop_oneof![
            Just(ConditionStatus::True),
            Just(ConditionStatus::False),
            Just(ConditionStatus::Unknown)
        ]
    }

    const TYPES: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "KernelDeadlock"];
    const REASONS: [&str; 3] = ["", "KubeletReady", "not camel"];

    fn arbitrary_node() -> impl Strategy<Value = model::Node> {
        proptest::collection::vec(
            (
                0..TYPES.len(),
                arbitrary_condition_status(),
                0..REASONS.len(),
                "[a-z ]{0,4}",
            ),
            0..5,
        )
        .prop_map(|items| {
            let mut n = node();
            n.conditions = items
                .into_iter()
                .map(|(t, status, r, message)| condition(TYPES[t], status, REASONS[r], &message))
                .collect();
            n
        })
    }

    /// A patch condition: its type, and each field given, left out or null.
    fn arbitrary_patch() -> impl Strategy<Value = Value> {
        let field = |values: Vec<Value>| proptest::option::of(proptest::sample::select(values));
        let item = (
            0..TYPES.len(),
            field(vec![
                json!("True"),
                json!("False"),
                json!("Maybe"),
                Value::Null,
            ]),
            field(vec![
                json!("KubeletReady"),
                json!(""),
                json!("not camel"),
                Value::Null,
            ]),
            field(vec![json!("m"), json!(""), Value::Null]),
            field(vec![
                json!("2026-12-02T03:10:00Z"),
                json!("soon"),
                Value::Null,
            ]),
            field(vec![json!("2026-12-02T03:00:00Z"), Value::Null]),
        )
            .prop_map(|(t, status, reason, message, beat, transition)| {
                let mut c = json!({"type": TYPES[t]});
                for (key, value) in [
                    ("status", status),
                    ("reason", reason),
                    ("message", message),
                    ("lastHeartbeatTime", beat),
                    ("lastTransitionTime", transition),
                ] {
                    if let Some(v) = value {
                        c[key] = v;
                    }
                }
                c
            });
        (proptest::collection::vec(item, 0..4), any::<bool>()).prop_map(|(items, order)| {
            let mut status = json!({"conditions": items});
            if order {
                status["$setElementOrder/conditions"] = json!([{"type": "Ready"}]);
            }
            json!({"status": status})
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Whatever the fast path reads, the merge gives the same.
        #[test]
        fn what_the_fast_path_reads_the_merge_gives_too(
            node in arbitrary_node(),
            patch in arbitrary_patch(),
            strategic in any::<bool>(),
        ) {
            let kind = if strategic { PatchKind::Strategic } else { PatchKind::Merge };
            if let Some(read) = fast(kind, &node, &patch) {
                prop_assert_eq!(Ok(read.status), merged(kind, &node, &patch), "{}", patch);
            }
        }
    }
}
