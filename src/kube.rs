//! Conversion of our domain types to Kubernetes `core/v1` objects: the one place k8s types are built.
//!
//! Everything a user sees as Kubernetes JSON (the HTTP API, `-o json|yaml`,
//! the mirror) goes through here, so `kubectl` and client libraries read it
//! unchanged. Its submodules hold Kubernetes' other wire rules (patches,
//! selectors, list pages), which the API, the mirror and the simulated API
//! server share; none of them depends on more than the domain.

pub(crate) mod json_patch;
pub(crate) mod paging;
pub mod patch;
pub mod selectors;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Event, EventSource, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo,
    ObjectReference, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, MicroTime, ObjectMeta, Status, StatusCause, StatusDetails, Time,
};
use k8s_openapi::List;

use crate::model::{self, Micros};

/// Annotation that records where a node came from (`static`, `cloud/<provider>`).
pub const SOURCE_ANNOTATION: &str = "nodekeeper.io/source";
/// Well-known label set to the node name unless the node sets it itself.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Well-known label set to `linux` unless the node sets it itself.
pub const OS_LABEL: &str = "kubernetes.io/os";
/// Pod capacity reported for every node: the kubelet's default `--max-pods`.
pub const MAX_PODS: &str = "110";
/// Where node events live: cluster-scoped objects' events go to `default`.
pub const EVENT_NAMESPACE: &str = "default";
/// `source.component` and `reportingComponent` of our events.
pub const EVENT_COMPONENT: &str = "nodekeeper";

/// `status.nodeInfo`: what the kubelet reported; before it has, the
/// operating system and this machine's architecture, as a best guess.
fn node_info(info: &model::NodeInfo) -> NodeSystemInfo {
    let or = |value: &str, fallback: &str| {
        if value.is_empty() {
            fallback.to_string()
        } else {
            value.to_string()
        }
    };
    NodeSystemInfo {
        machine_id: info.machine_id.clone(),
        system_uuid: info.system_uuid.clone(),
        boot_id: info.boot_id.clone(),
        kernel_version: info.kernel_version.clone(),
        os_image: info.os_image.clone(),
        container_runtime_version: info.container_runtime_version.clone(),
        kubelet_version: info.kubelet_version.clone(),
        kube_proxy_version: info.kube_proxy_version.clone(),
        operating_system: or(&info.operating_system, "linux"),
        architecture: or(&info.architecture, go_arch(std::env::consts::ARCH)),
        ..NodeSystemInfo::default()
    }
}

/// A node as the API server would return it. `heartbeat`, the newest
/// heartbeat the controller holds in memory, replaces the Ready condition's
/// `lastHeartbeatTime` when it is newer than the stored one (heartbeats are
/// not written to the store one by one).
pub fn node(node: &model::Node, heartbeat: Option<Micros>) -> Node {
    let labels = node_labels(node);
    let mut annotations = node.annotations.clone();
    annotations.insert(SOURCE_ANNOTATION.to_string(), node.source.clone());

    let metadata = ObjectMeta {
        name: Some(node.name.clone()),
        uid: Some(node.uid.clone()),
        creation_timestamp: Some(time(node.created)),
        resource_version: Some(node.resource_version.to_string()),
        labels: Some(labels),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };

    // k8s-openapi 0.29 (v1_33) still has the deprecated `externalID`, so it goes there.
    let spec = NodeSpec {
        external_id: non_empty(&node.external_id),
        provider_id: non_empty(&node.provider_id),
        unschedulable: node.unschedulable.then_some(true),
        taints: (!node.taints.is_empty()).then(|| node.taints.iter().map(taint).collect()),
        ..NodeSpec::default()
    };

    let conditions = node
        .conditions
        .iter()
        .map(|c| {
            let mut beat = c.last_heartbeat;
            if c.kind == model::READY {
                if let Some(h) = heartbeat {
                    beat = beat.max(h);
                }
            }
            NodeCondition {
                type_: c.kind.clone(),
                status: c.status.as_str().to_string(),
                last_heartbeat_time: Some(time(beat)),
                last_transition_time: Some(time(c.last_transition)),
                reason: non_empty(&c.reason),
                message: non_empty(&c.message),
            }
        })
        .collect();

    let addresses = node
        .addresses
        .iter()
        .map(|a| NodeAddress {
            type_: a.kind.as_str().to_string(),
            address: a.address.clone(),
        })
        .collect();

    let status = NodeStatus {
        addresses: Some(addresses),
        capacity: Some(resources(&node.capacity)),
        // Nothing is reserved for system daemons: allocatable equals capacity.
        allocatable: Some(resources(&node.capacity)),
        conditions: Some(conditions),
        node_info: Some(node_info(&node.node_info)),
        ..NodeStatus::default()
    };

    Node {
        metadata,
        spec: Some(spec),
        status: Some(status),
    }
}

/// The labels a node carries in its Kubernetes JSON: its own, plus the
/// well-known hostname and OS labels unless it sets them. Label selectors
/// match against exactly this set.
pub fn node_labels(node: &model::Node) -> BTreeMap<String, String> {
    let mut labels = node.labels.clone();
    labels
        .entry(HOSTNAME_LABEL.to_string())
        .or_insert_with(|| node.name.clone());
    labels
        .entry(OS_LABEL.to_string())
        .or_insert_with(|| "linux".to_string());
    labels
}

/// A `NodeList` (`{"apiVersion":"v1","kind":"NodeList","metadata":{"resourceVersion":"N"},"items":[…]}`).
pub fn node_list(nodes: impl IntoIterator<Item = Node>, resource_version: u64) -> List<Node> {
    List {
        items: nodes.into_iter().collect(),
        metadata: ListMeta {
            resource_version: Some(resource_version.to_string()),
            ..ListMeta::default()
        },
    }
}

/// A node's history entry as a `core/v1` Event, as the node controller
/// records node events (namespace `default`, `involvedObject` the Node);
/// `None` for controller-wide entries, which concern no node.
///
/// `involvedObject.uid` is the node *name*, the kubelet's convention for
/// node events: kubectl describe node selects events by `uid=<name>` (1.32
/// also asks by the real UID), and a name stays valid after the node is gone.
pub fn node_event(e: &model::Event) -> Option<Event> {
    let node = e.node.as_deref()?;
    let at = time(e.time);
    Some(Event {
        metadata: ObjectMeta {
            // Unique and stable: the store's sequence number, like the API server's `<object>.<hex>`.
            name: Some(format!("{node}.{:016x}", e.seq)),
            namespace: Some(EVENT_NAMESPACE.to_string()),
            resource_version: Some(e.seq.to_string()),
            creation_timestamp: Some(at.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Node".to_string()),
            name: Some(node.to_string()),
            uid: Some(node.to_string()),
            ..ObjectReference::default()
        },
        reason: Some(event_reason(&e.kind)),
        message: Some(e.kind.detail()),
        type_: Some(event_type(&e.kind).to_string()),
        count: Some(1),
        first_timestamp: Some(at.clone()),
        last_timestamp: Some(at),
        event_time: Some(MicroTime(e.time.timestamp())),
        source: Some(EventSource {
            component: Some(EVENT_COMPONENT.to_string()),
            host: None,
        }),
        reporting_component: Some(EVENT_COMPONENT.to_string()),
        action: Some(e.kind.name().to_string()),
        ..Event::default()
    })
}

/// The reason of a condition change is the condition's own (`KubeletReady`,
/// `NodeStatusUnknown`); every other entry is named by its kind.
fn event_reason(kind: &model::EventKind) -> String {
    match kind {
        model::EventKind::ConditionChanged { reason, .. } if !reason.is_empty() => reason.clone(),
        other => other.name().to_string(),
    }
}

/// `Warning` when something went wrong: Ready leaving True, a pressure
/// condition (where True is the bad state) becoming True, a failed lookup or
/// registration; `Normal` otherwise.
fn event_type(kind: &model::EventKind) -> &'static str {
    use model::{ConditionStatus as S, EventKind as K};
    let warning = match kind {
        K::ConditionChanged { condition, to, .. } => matches!(
            (condition == model::READY, to),
            (_, S::Unknown) | (true, S::False) | (false, S::True)
        ),
        K::AddressLookupFailed { .. } | K::RegistrationFailed { .. } => true,
        _ => false,
    };
    if warning {
        "Warning"
    } else {
        "Normal"
    }
}

/// A failure `Status` as kube-apiserver returns it with an error code.
pub fn status_error(
    code: u16,
    reason: &str,
    message: &str,
    details_name: Option<&str>,
    kind: Option<&str>,
) -> Status {
    let details = (details_name.is_some() || kind.is_some()).then(|| StatusDetails {
        name: details_name.map(str::to_string),
        kind: kind.map(str::to_string),
        ..StatusDetails::default()
    });
    Status {
        code: Some(i32::from(code)),
        details,
        message: non_empty(message),
        metadata: ListMeta::default(),
        reason: non_empty(reason),
        status: Some("Failure".to_string()),
    }
}

/// The 422 kube-apiserver returns for an object that fails validation: the
/// message lists every refused field, and `details.causes` names each.
pub fn invalid(e: &crate::validation::Invalid) -> Status {
    let causes = e
        .causes
        .iter()
        .map(|c| StatusCause {
            field: Some(c.field.clone()),
            message: Some(c.message.clone()),
            reason: Some(c.reason.to_string()),
        })
        .collect();
    Status {
        code: Some(422),
        details: Some(StatusDetails {
            name: Some(e.name.clone()),
            kind: Some(e.kind.to_string()),
            causes: Some(causes),
            ..StatusDetails::default()
        }),
        message: Some(e.to_string()),
        metadata: ListMeta::default(),
        reason: Some("Invalid".to_string()),
        status: Some("Failure".to_string()),
    }
}

/// The 404 kube-apiserver returns for a missing object, e.g. `not_found("nodes", "x")`.
pub fn not_found(resource: &str, name: &str) -> Status {
    status_error(
        404,
        "NotFound",
        &format!("{resource} {name:?} not found"),
        Some(name),
        Some(resource),
    )
}

/// CPU as Kubernetes writes it canonically: whole cores plain (`1`), otherwise millicores (`1500m`).
pub fn cpu_quantity(millis: u64) -> Quantity {
    if millis.is_multiple_of(1000) {
        Quantity((millis / 1000).to_string())
    } else {
        Quantity(format!("{millis}m"))
    }
}

/// Bytes in the largest binary suffix that divides them exactly (`3Gi`, `1536Mi`, `1000`),
/// which is the canonical form Kubernetes itself prints.
pub fn memory_quantity(bytes: u64) -> Quantity {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes == 0 {
        return Quantity("0".to_string());
    }
    let mut value = bytes;
    let mut suffix = "";
    for s in SUFFIXES {
        if !value.is_multiple_of(1024) {
            break;
        }
        value /= 1024;
        suffix = s;
    }
    Quantity(format!("{value}{suffix}"))
}

/// Kubernetes `Time`, truncated to the second as the API server stores it.
pub fn time(t: Micros) -> Time {
    // Floor, as Go formats times: before the epoch too.
    let second = t.0.div_euclid(1_000_000);
    Time(jiff::Timestamp::from_second(second).unwrap_or(t.timestamp()))
}

/// Go's `GOARCH` name for a Rust target architecture, as `nodeInfo.architecture` expects.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

fn resources(r: &model::Resources) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), cpu_quantity(r.cpu_millis)),
        ("memory".to_string(), memory_quantity(r.memory_bytes)),
        ("pods".to_string(), Quantity(MAX_PODS.to_string())),
    ])
}

fn taint(t: &model::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: non_empty(&t.value),
        effect: t.effect.clone(),
        time_added: t.added.map(time),
    }
}

/// Kubernetes omits empty strings (`omitempty`); so do we.
fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Address, AddressKind, Condition, ConditionStatus, Resources};
    use serde_json::{json, Value};

    fn at(s: &str) -> Micros {
        Micros::parse_rfc3339(s).expect("test time")
    }

    fn sample() -> model::Node {
        model::Node {
            name: "edge-1".into(),
            uid: "6f1c1e8e-0000-4000-8000-000000000001".into(),
            created: Micros(at("2026-11-30T09:23:09Z").0 + 123_456),
            resource_version: 42,
            source: "static".into(),
            labels: BTreeMap::from([("node-role.kubernetes.io/edge".into(), "".into())]),
            annotations: BTreeMap::new(),
            external_id: "i-0abc".into(),
            provider_id: String::new(),
            capacity: Resources {
                cpu_millis: 1500,
                memory_bytes: 3 << 30,
            },
            unschedulable: false,
            taints: vec![],
            addresses: vec![Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.5".into(),
            }],
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: ConditionStatus::Unknown,
                last_heartbeat: at("2026-11-30T10:00:00Z"),
                last_transition: Micros(at("2026-11-30T10:00:40Z").0 + 999_999),
                reason: "NodeStatusUnknown".into(),
                message: "Kubelet stopped posting node status.".into(),
            }],
            node_info: Default::default(),
        }
    }

    fn to_json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).expect("serializable")
    }

    #[test]
    fn node_json_has_the_shape_kubectl_reads() {
        let v = to_json(&node(&sample(), None));
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Node");
        assert_eq!(v["metadata"]["name"], "edge-1");
        assert_eq!(v["metadata"]["uid"], "6f1c1e8e-0000-4000-8000-000000000001");
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        assert_eq!(v["metadata"]["creationTimestamp"], "2026-11-30T09:23:09Z");
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/hostname"], "edge-1");
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/os"], "linux");
        assert_eq!(v["metadata"]["labels"]["node-role.kubernetes.io/edge"], "");
        assert_eq!(
            v["metadata"]["annotations"]["nodekeeper.io/source"],
            "static"
        );
        assert_eq!(v["spec"], json!({"externalID": "i-0abc"}));
        let ready = &v["status"]["conditions"][0];
        assert_eq!(ready["type"], "Ready");
        assert_eq!(ready["status"], "Unknown");
        assert_eq!(ready["reason"], "NodeStatusUnknown");
        assert_eq!(ready["lastHeartbeatTime"], "2026-11-30T10:00:00Z");
        assert_eq!(ready["lastTransitionTime"], "2026-11-30T10:00:40Z");
        assert_eq!(
            v["status"]["capacity"],
            json!({"cpu": "1500m", "memory": "3Gi", "pods": "110"})
        );
        assert_eq!(v["status"]["allocatable"], v["status"]["capacity"]);
        assert_eq!(
            v["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.5"}])
        );
        assert_eq!(v["status"]["nodeInfo"]["operatingSystem"], "linux");
        assert_eq!(
            v["status"]["nodeInfo"]["architecture"],
            go_arch(std::env::consts::ARCH)
        );
        assert_eq!(v["status"]["nodeInfo"]["kubeletVersion"], "");
    }

    #[test]
    fn labels_the_node_sets_win_over_defaults() {
        let mut n = sample();
        n.labels.insert(HOSTNAME_LABEL.into(), "edge-1.site".into());
        n.labels.insert(OS_LABEL.into(), "windows".into());
        let v = to_json(&node(&n, None));
        assert_eq!(
            v["metadata"]["labels"]["kubernetes.io/hostname"],
            "edge-1.site"
        );
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/os"], "windows");
    }

    #[test]
    fn spec_fields_appear_only_when_set() {
        let mut n = sample();
        n.external_id.clear();
        assert_eq!(to_json(&node(&n, None))["spec"], json!({}));

        n.provider_id = "aws:///eu-west-1a/i-0abc".into();
        n.unschedulable = true;
        n.taints = vec![
            model::Taint {
                key: "node.kubernetes.io/unreachable".into(),
                value: String::new(),
                effect: "NoExecute".into(),
                added: Some(Micros(at("2026-11-30T10:05:00Z").0 + 5)),
            },
            model::Taint {
                key: "dedicated".into(),
                value: "edge".into(),
                effect: "NoSchedule".into(),
                added: None,
            },
        ];
        assert_eq!(
            to_json(&node(&n, None))["spec"],
            json!({
                "providerID": "aws:///eu-west-1a/i-0abc",
                "unschedulable": true,
                "taints": [
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                     "timeAdded": "2026-11-30T10:05:00Z"},
                    {"key": "dedicated", "value": "edge", "effect": "NoSchedule"}
                ]
            })
        );
    }

    #[test]
    fn newer_in_memory_heartbeat_overrides_ready_only() {
        let mut n = sample();
        n.conditions.push(Condition {
            kind: "NetworkUnavailable".into(),
            status: ConditionStatus::False,
            last_heartbeat: at("2026-11-30T10:00:00Z"),
            last_transition: at("2026-11-30T09:00:00Z"),
            reason: String::new(),
            message: String::new(),
        });
        let v = to_json(&node(&n, Some(at("2026-11-30T10:03:00.5Z"))));
        assert_eq!(
            v["status"]["conditions"][0]["lastHeartbeatTime"],
            "2026-11-30T10:03:00Z"
        );
        let other = &v["status"]["conditions"][1];
        assert_eq!(other["lastHeartbeatTime"], "2026-11-30T10:00:00Z");
        // Empty reason and message are omitted, as the API server does.
        assert!(other.get("reason").is_none() && other.get("message").is_none());

        // An older heartbeat never moves the stored one backwards.
        let v = to_json(&node(&n, Some(at("2026-11-30T09:00:00Z"))));
        assert_eq!(
            v["status"]["conditions"][0]["lastHeartbeatTime"],
            "2026-11-30T10:00:00Z"
        );
    }

    #[test]
    fn times_are_truncated_to_seconds_in_the_struct_too() {
        let k = node(&sample(), None);
        let created = k.metadata.creation_timestamp.expect("set");
        assert_eq!(
            created.0,
            "2026-11-30T09:23:09Z"
                .parse::<jiff::Timestamp>()
                .expect("ts")
        );
        // Before the epoch, truncation still goes to the whole second at or before.
        assert_eq!(time(Micros(-1)).0.as_second(), -1);
    }

    #[test]
    fn node_list_json() {
        let v = to_json(&node_list([node(&sample(), None)], 77));
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "NodeList");
        assert_eq!(v["metadata"], json!({"resourceVersion": "77"}));
        assert_eq!(v["items"][0]["metadata"]["name"], "edge-1");
        let empty = to_json(&node_list(Vec::new(), 0));
        assert_eq!(
            empty,
            json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "0"}, "items": []})
        );
    }

    #[test]
    fn node_list_yaml_for_dash_o_yaml() {
        let yaml = serde_yaml_ng::to_string(&node_list([node(&sample(), None)], 77)).expect("yaml");
        assert!(
            yaml.starts_with("apiVersion: v1\nkind: NodeList\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("creationTimestamp: 2026-11-30T09:23:09Z"),
            "{yaml}"
        );
    }

    #[test]
    fn quantities() {
        let cpu = |m| cpu_quantity(m).0;
        assert_eq!(cpu(1000), "1");
        assert_eq!(cpu(4000), "4");
        assert_eq!(cpu(1500), "1500m");
        assert_eq!(cpu(250), "250m");
        assert_eq!(cpu(0), "0");

        let mem = |b| memory_quantity(b).0;
        assert_eq!(mem(3 << 30), "3Gi");
        assert_eq!(mem(1536 << 20), "1536Mi");
        assert_eq!(mem(1 << 20), "1Mi");
        assert_eq!(mem(1536 << 10), "1536Ki");
        assert_eq!(mem(1024), "1Ki");
        assert_eq!(mem(1000), "1000");
        assert_eq!(mem(1500), "1500");
        assert_eq!(mem(0), "0");
        assert_eq!(mem(1 << 40), "1Ti");
        assert_eq!(mem(u64::MAX), u64::MAX.to_string());
    }

    #[test]
    fn not_found_is_exactly_what_kube_apiserver_returns() {
        let expected: Value = serde_json::from_str(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"nodes"},"code":404}"#,
        )
        .expect("valid json");
        assert_eq!(to_json(&not_found("nodes", "x")), expected);
    }

    #[test]
    fn operator_annotations_sit_beside_the_source_annotation() {
        let mut n = sample();
        n.annotations
            .insert("example.com/owner".into(), "team-a".into());
        let v = to_json(&node(&n, None));
        assert_eq!(
            v["metadata"]["annotations"],
            json!({"example.com/owner": "team-a", "nodekeeper.io/source": "static"})
        );
    }

    #[test]
    fn invalid_is_what_kube_apiserver_returns() {
        let e = crate::validation::Invalid {
            kind: "Node",
            name: "x".into(),
            causes: vec![crate::validation::FieldError::forbidden(
                "spec.taints",
                "managed",
            )],
        };
        assert_eq!(
            to_json(&invalid(&e)),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Node \"x\" is invalid: spec.taints: Forbidden: managed",
                   "reason": "Invalid", "code": 422,
                   "details": {"name": "x", "kind": "Node", "causes": [
                       {"reason": "FieldValueForbidden", "message": "Forbidden: managed", "field": "spec.taints"}]}})
        );
    }

    #[test]
    fn status_error_without_details() {
        let v = to_json(&status_error(400, "BadRequest", "bad watch", None, None));
        assert_eq!(
            v,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "bad watch", "reason": "BadRequest", "code": 400})
        );
    }

    fn history(seq: u64, node: Option<&str>, kind: model::EventKind) -> model::Event {
        model::Event {
            seq,
            time: Micros(at("2026-11-30T10:00:40Z").0 + 250_000),
            node: node.map(str::to_string),
            kind,
        }
    }

    fn ready_change(to: model::ConditionStatus, reason: &str) -> model::EventKind {
        model::EventKind::ConditionChanged {
            condition: model::READY.into(),
            from: Some(ConditionStatus::True),
            to,
            reason: reason.into(),
            message: "Kubelet stopped posting node status.".into(),
        }
    }

    #[test]
    fn node_events_are_core_v1_events() {
        let e = history(
            300,
            Some("edge-1"),
            ready_change(ConditionStatus::Unknown, "NodeStatusUnknown"),
        );
        let v = to_json(&node_event(&e).expect("a node event"));
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["metadata"]["name"], "edge-1.000000000000012c");
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(v["metadata"]["resourceVersion"], "300");
        assert_eq!(
            v["involvedObject"],
            json!({"apiVersion": "v1", "kind": "Node", "name": "edge-1", "uid": "edge-1"})
        );
        assert_eq!(v["reason"], "NodeStatusUnknown");
        assert_eq!(v["type"], "Warning");
        assert_eq!(
            v["message"],
            "Ready: True -> Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)"
        );
        assert_eq!(v["count"], 1);
        assert_eq!(v["firstTimestamp"], "2026-11-30T10:00:40Z");
        assert_eq!(v["lastTimestamp"], "2026-11-30T10:00:40Z");
        assert_eq!(v["eventTime"], "2026-11-30T10:00:40.250000Z");
        assert_eq!(v["source"], json!({"component": "nodekeeper"}));
        assert_eq!(v["reportingComponent"], "nodekeeper");
    }

    #[test]
    fn event_reasons_and_types() {
        let of = |kind| {
            let e = node_event(&history(1, Some("n"), kind)).expect("a node event");
            (e.reason.expect("reason"), e.type_.expect("type"))
        };
        let pair = |r: &str, t: &str| (r.to_string(), t.to_string());
        assert_eq!(
            of(ready_change(ConditionStatus::True, "KubeletReady")),
            pair("KubeletReady", "Normal")
        );
        assert_eq!(
            of(ready_change(ConditionStatus::False, "KubeletNotReady")),
            pair("KubeletNotReady", "Warning")
        );
        // Without a reason the event kind names it.
        assert_eq!(
            of(ready_change(ConditionStatus::False, "")),
            pair("ConditionChanged", "Warning")
        );
        // For pressure conditions True is the bad news.
        let pressure = |to| model::EventKind::ConditionChanged {
            condition: "MemoryPressure".into(),
            from: None,
            to,
            reason: String::new(),
            message: String::new(),
        };
        assert_eq!(of(pressure(ConditionStatus::True)).1, "Warning");
        assert_eq!(of(pressure(ConditionStatus::False)).1, "Normal");
        assert_eq!(
            of(model::EventKind::AddressLookupFailed {
                message: "no such host".into()
            }),
            pair("AddressLookupFailed", "Warning")
        );
        assert_eq!(
            of(model::EventKind::Deleted {
                reason: "gone from the source".into()
            }),
            pair("Deleted", "Normal")
        );
    }

    #[test]
    fn controller_events_concern_no_node() {
        let e = history(
            1,
            None,
            model::EventKind::ControllerStopped {
                instance: "x".into(),
            },
        );
        assert!(node_event(&e).is_none());
    }

    #[test]
    fn go_arch_names() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("s390x"), "s390x");
    }

    #[test]
    fn round_trips_through_k8s_openapi() {
        let k = node(&sample(), None);
        let back: Node = serde_json::from_value(to_json(&k)).expect("deserializes");
        assert_eq!(back, k);
    }
}
