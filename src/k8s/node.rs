//! Our nodes as Kubernetes `core/v1` Nodes and NodeLists, with the
//! quantities and architecture names Kubernetes writes.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::List;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;

use super::json::{Shown, Time};
use super::{HOSTNAME_LABEL, MAX_PODS, OS_LABEL, SOURCE_ANNOTATION};
use crate::model::{self, Micros};
use crate::serialize::Each;

/// A node as the API server would return it. `heartbeat`, the newest
/// heartbeat the controller holds in memory, replaces the Ready condition's
/// `lastHeartbeatTime` when it is newer than the stored one (heartbeats are
/// not written to the store one by one). Read back from [`NodeJson`]'s
/// bytes: the JSON writer is the one place a node's fields are laid out.
pub fn node(node: &model::Node, heartbeat: Option<Micros>) -> Node {
    let value = serde_json::to_value(NodeJson::shown(node, heartbeat))
        .expect("a node's JSON is written from strings and numbers");
    serde_json::from_value(value).expect("a node's JSON reads as a Node")
}

/// A node's Kubernetes JSON, written straight from its record, field for
/// field in the order k8s-openapi's `Node` serializes (empty strings left
/// out, as it leaves them out): the body of `GET /api/v1/nodes/{name}`, of
/// every list item, of a status push's answer, and what a patch is merged
/// onto.
pub struct NodeJson<'a> {
    node: &'a model::Node,
    heartbeat: Option<Micros>,
    parts: Parts,
}

/// Which parts of a node [`NodeJson`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    /// Every field of `metadata`; else the name alone.
    pub metadata: bool,
    pub spec: bool,
    /// `status`, with the fields below.
    pub status: bool,
    pub addresses: bool,
    pub allocatable: bool,
    pub capacity: bool,
    pub conditions: bool,
    pub node_info: bool,
    /// `daemonEndpoints`, `features`, `images`, `runtimeHandlers`,
    /// `volumesAttached` and `volumesInUse` (each only when it holds
    /// something): the rest of what the kubelet reports.
    pub reported: bool,
    /// `nodeInfo` as stored, not with the operating system and architecture
    /// shown before a kubelet has reported them.
    pub stored_node_info: bool,
}

impl Parts {
    /// The node as the API shows it.
    pub const ALL: Parts = Parts {
        metadata: true,
        spec: true,
        status: true,
        addresses: true,
        allocatable: true,
        capacity: true,
        conditions: true,
        node_info: true,
        reported: true,
        stored_node_info: false,
    };
}

impl<'a> NodeJson<'a> {
    /// The node as the API shows it (see [`node`] for `heartbeat`).
    pub fn shown(node: &'a model::Node, heartbeat: Option<Micros>) -> NodeJson<'a> {
        NodeJson {
            node,
            heartbeat,
            parts: Parts::ALL,
        }
    }

    /// Only `parts` of the node, with no heartbeat held beside it.
    pub fn parts(node: &'a model::Node, parts: Parts) -> NodeJson<'a> {
        NodeJson {
            node,
            heartbeat: None,
            parts,
        }
    }

    /// The JSON as bytes, with no spare room (it may be kept).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut json = Vec::with_capacity(2048);
        serde_json::to_writer(&mut json, self)
            .expect("a node's JSON is written from strings and numbers");
        json.shrink_to_fit();
        json
    }
}

impl Serialize for NodeJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let node = self.node;
        let parts = self.parts;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("apiVersion", "v1")?;
        map.serialize_entry("kind", "Node")?;
        if parts.metadata {
            map.serialize_entry("metadata", &Metadata(node))?;
        } else {
            map.serialize_entry("metadata", &NameOnly(&node.name))?;
        }
        if parts.spec {
            map.serialize_entry("spec", &Spec(node))?;
        }
        if parts.status {
            let status = Status {
                node,
                heartbeat: self.heartbeat,
                parts,
            };
            map.serialize_entry("status", &status)?;
        }
        map.end()
    }
}

struct NameOnly<'a>(&'a str);

impl Serialize for NameOnly<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("name", self.0)?;
        map.end()
    }
}

struct Metadata<'a>(&'a model::Node);

impl Serialize for Metadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let node = self.0;
        let mut map = serializer.serialize_map(Some(6))?;
        map.serialize_entry(
            "annotations",
            &Merged {
                own: &node.annotations,
                extra: [(SOURCE_ANNOTATION, node.source.as_str(), true)],
            },
        )?;
        map.serialize_entry("creationTimestamp", &Time(node.created))?;
        map.serialize_entry(
            "labels",
            &Merged {
                own: &node.labels,
                extra: [
                    (HOSTNAME_LABEL, node.name.as_str(), false),
                    (OS_LABEL, "linux", false),
                ],
            },
        )?;
        map.serialize_entry("name", &node.name)?;
        map.serialize_entry("resourceVersion", &Shown(node.resource_version))?;
        map.serialize_entry("uid", &node.uid)?;
        map.end()
    }
}

/// A node's own map with a few keys added in key order: each `(key, value,
/// wins)` replaces the node's own value when `wins`, else only fills a gap
/// (the source annotation always shows; the hostname and OS labels are
/// defaults, as [`node_labels`] adds them). The extra keys must be in
/// ascending order.
struct Merged<'a, const N: usize> {
    own: &'a BTreeMap<String, String>,
    extra: [(&'a str, &'a str, bool); N],
}

impl<const N: usize> Serialize for Merged<'_, N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        let mut own = self.own.iter().peekable();
        let mut extra = self.extra.iter().peekable();
        loop {
            let (key, value) = match (own.peek(), extra.peek()) {
                (None, None) => break,
                (Some(&(k, v)), None) => {
                    own.next();
                    (k.as_str(), v.as_str())
                }
                (None, Some(&&(k, v, _))) => {
                    extra.next();
                    (k, v)
                }
                (Some(&(ok, ov)), Some(&&(ek, ev, wins))) => match ok.as_str().cmp(ek) {
                    Ordering::Less => {
                        own.next();
                        (ok.as_str(), ov.as_str())
                    }
                    Ordering::Greater => {
                        extra.next();
                        (ek, ev)
                    }
                    Ordering::Equal => {
                        own.next();
                        extra.next();
                        (ek, if wins { ev } else { ov.as_str() })
                    }
                },
            };
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// `spec`. k8s-openapi 0.29 (v1_33) still has the deprecated `externalID`,
/// so it goes there.
struct Spec<'a>(&'a model::Node);

impl Serialize for Spec<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let node = self.0;
        let mut map = serializer.serialize_map(None)?;
        if !node.external_id.is_empty() {
            map.serialize_entry("externalID", &node.external_id)?;
        }
        if !node.provider_id.is_empty() {
            map.serialize_entry("providerID", &node.provider_id)?;
        }
        if !node.taints.is_empty() {
            map.serialize_entry("taints", &Each(&node.taints, TaintJson))?;
        }
        if node.unschedulable {
            map.serialize_entry("unschedulable", &true)?;
        }
        map.end()
    }
}

/// A taint as Kubernetes JSON.
pub struct TaintJson<'a>(pub &'a model::Taint);

impl Serialize for TaintJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("effect", &t.effect)?;
        map.serialize_entry("key", &t.key)?;
        if let Some(added) = t.added {
            map.serialize_entry("timeAdded", &Time(added))?;
        }
        if !t.value.is_empty() {
            map.serialize_entry("value", &t.value)?;
        }
        map.end()
    }
}

struct Status<'a> {
    node: &'a model::Node,
    heartbeat: Option<Micros>,
    parts: Parts,
}

impl Serialize for Status<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let node = self.node;
        let parts = self.parts;
        // Nothing is reserved for system daemons: allocatable equals capacity.
        let resources = Resources(&node.capacity);
        let mut map = serializer.serialize_map(None)?;
        if parts.addresses {
            map.serialize_entry("addresses", &Each(&node.addresses, Address))?;
        }
        if parts.allocatable {
            map.serialize_entry("allocatable", &resources)?;
        }
        if parts.capacity {
            map.serialize_entry("capacity", &resources)?;
        }
        if parts.conditions {
            let conditions = Conditions {
                list: &node.conditions,
                heartbeat: self.heartbeat,
            };
            map.serialize_entry("conditions", &conditions)?;
        }
        // k8s-openapi's order: daemonEndpoints, features and images come
        // before nodeInfo, the rest after it.
        let reported = parts.reported.then_some(&node.reported);
        if let Some(r) = reported {
            if r.kubelet_port != 0 {
                map.serialize_entry("daemonEndpoints", &DaemonEndpoints(r.kubelet_port))?;
            }
            if let Some(features) = &r.features {
                map.serialize_entry("features", features)?;
            }
            if !r.images.is_empty() {
                map.serialize_entry("images", &r.images)?;
            }
        }
        if parts.node_info {
            let info = Info {
                info: &node.node_info,
                stored: parts.stored_node_info,
            };
            map.serialize_entry("nodeInfo", &info)?;
        }
        if let Some(r) = reported {
            if !r.runtime_handlers.is_empty() {
                map.serialize_entry("runtimeHandlers", &r.runtime_handlers)?;
            }
            if !r.volumes_attached.is_empty() {
                map.serialize_entry("volumesAttached", &r.volumes_attached)?;
            }
            if !r.volumes_in_use.is_empty() {
                map.serialize_entry("volumesInUse", &r.volumes_in_use)?;
            }
        }
        map.end()
    }
}

/// `status.daemonEndpoints`: `{"kubeletEndpoint":{"Port":N}}` (the port's
/// JSON name is capitalised upstream).
struct DaemonEndpoints(i32);

impl Serialize for DaemonEndpoints {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("kubeletEndpoint", &Port(self.0))?;
        map.end()
    }
}

struct Port(i32);

impl Serialize for Port {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("Port", &self.0)?;
        map.end()
    }
}

struct Address<'a>(&'a model::Address);

impl Serialize for Address<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("address", &self.0.address)?;
        map.serialize_entry("type", self.0.kind.as_str())?;
        map.end()
    }
}

/// Capacity as [`cpu_quantity`] and [`memory_quantity`] write it, without
/// a `String` for each.
struct Resources<'a>(&'a model::Resources);

impl Serialize for Resources<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("cpu", &Cpu(self.0.cpu_millis))?;
        map.serialize_entry("memory", &Memory(self.0.memory_bytes))?;
        map.serialize_entry("pods", MAX_PODS)?;
        map.end()
    }
}

/// Millicores as [`cpu_quantity`] writes them (`1`, `1500m`).
struct Cpu(u64);

impl Serialize for Cpu {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let millis = self.0;
        if millis.is_multiple_of(1000) {
            serializer.collect_str(&(millis / 1000))
        } else {
            serializer.collect_str(&format_args!("{millis}m"))
        }
    }
}

/// Bytes as [`memory_quantity`] writes them.
struct Memory(u64);

impl Serialize for Memory {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (value, suffix) = binary_suffix(self.0);
        serializer.collect_str(&format_args!("{value}{suffix}"))
    }
}

/// The conditions, the Ready one's heartbeat moved up to `heartbeat` when
/// that is newer.
struct Conditions<'a> {
    list: &'a [model::Condition],
    heartbeat: Option<Micros>,
}

impl Serialize for Conditions<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.list.len()))?;
        for c in self.list {
            let mut beat = c.last_heartbeat;
            if c.kind == model::READY {
                if let Some(h) = self.heartbeat {
                    beat = beat.max(h);
                }
            }
            seq.serialize_element(&Condition { c, beat })?;
        }
        seq.end()
    }
}

struct Condition<'a> {
    c: &'a model::Condition,
    beat: Micros,
}

impl Serialize for Condition<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = self.c;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("lastHeartbeatTime", &Time(self.beat))?;
        map.serialize_entry("lastTransitionTime", &Time(c.last_transition))?;
        if !c.message.is_empty() {
            map.serialize_entry("message", &c.message)?;
        }
        if !c.reason.is_empty() {
            map.serialize_entry("reason", &c.reason)?;
        }
        map.serialize_entry("status", c.status.as_str())?;
        map.serialize_entry("type", &c.kind)?;
        map.end()
    }
}

/// `status.nodeInfo`: what the kubelet reported; before it has, shown with
/// the operating system and this machine's architecture, as a best guess.
struct Info<'a> {
    info: &'a model::NodeInfo,
    stored: bool,
}

impl<'a> Serialize for Info<'a> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let i = self.info;
        let or = |value: &'a str, fallback: &'a str| -> &'a str {
            if value.is_empty() && !self.stored {
                fallback
            } else {
                value
            }
        };
        let mut map = serializer.serialize_map(Some(10))?;
        map.serialize_entry(
            "architecture",
            or(&i.architecture, go_arch(std::env::consts::ARCH)),
        )?;
        map.serialize_entry("bootID", &i.boot_id)?;
        map.serialize_entry("containerRuntimeVersion", &i.container_runtime_version)?;
        map.serialize_entry("kernelVersion", &i.kernel_version)?;
        map.serialize_entry("kubeProxyVersion", &i.kube_proxy_version)?;
        map.serialize_entry("kubeletVersion", &i.kubelet_version)?;
        map.serialize_entry("machineID", &i.machine_id)?;
        map.serialize_entry("operatingSystem", or(&i.operating_system, "linux"))?;
        map.serialize_entry("osImage", &i.os_image)?;
        map.serialize_entry("systemUUID", &i.system_uuid)?;
        map.end()
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
        metadata: super::at_version(resource_version),
    }
}

/// The start of a `NodeList`'s JSON, up to its first item, in the key
/// order `k8s_openapi::List` writes: `{"apiVersion":"v1","kind":"NodeList","items":[`;
/// [`super::list_tail`] ends it.
pub const NODE_LIST_HEAD: &[u8] = br#"{"apiVersion":"v1","kind":"NodeList","items":["#;

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
    let (value, suffix) = binary_suffix(bytes);
    Quantity(format!("{value}{suffix}"))
}

/// `bytes` in the largest binary suffix that divides them exactly.
fn binary_suffix(bytes: u64) -> (u64, &'static str) {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let mut value = bytes;
    let mut suffix = "";
    if value != 0 {
        for s in SUFFIXES {
            if !value.is_multiple_of(1024) {
                break;
            }
            value /= 1024;
            suffix = s;
        }
    }
    (value, suffix)
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
            reported: Default::default(),
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
        assert_eq!(crate::k8s::time(Micros(-1)).0.as_second(), -1);
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

    /// k8s-openapi's `Node`, built field by field from the record: the
    /// object [`NodeJson`] must write the same bytes as.
    mod typed {
        use std::collections::BTreeMap;

        use k8s_openapi::api::core::v1::{
            Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
        };
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

        use super::super::{cpu_quantity, go_arch, memory_quantity, node_labels};
        use crate::k8s::{non_empty, time, MAX_PODS, SOURCE_ANNOTATION};
        use crate::model::{self, Micros};

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
        pub(super) fn node(node: &model::Node, heartbeat: Option<Micros>) -> Node {
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
                ..reported(&node.reported)
            };

            Node {
                metadata,
                spec: Some(spec),
                status: Some(status),
            }
        }

        /// What the kubelet reported, each field left out while empty.
        fn reported(r: &model::Reported) -> NodeStatus {
            use k8s_openapi::api::core::v1 as core;
            let some = |empty: bool| !empty;
            NodeStatus {
                daemon_endpoints: (r.kubelet_port != 0).then_some(core::NodeDaemonEndpoints {
                    kubelet_endpoint: Some(core::DaemonEndpoint {
                        port: r.kubelet_port,
                    }),
                }),
                features: r.features.as_ref().map(|f| core::NodeFeatures {
                    supplemental_groups_policy: f.supplemental_groups_policy,
                }),
                images: some(r.images.is_empty()).then(|| {
                    r.images
                        .iter()
                        .map(|i| core::ContainerImage {
                            names: some(i.names.is_empty()).then(|| i.names.clone()),
                            size_bytes: i.size_bytes,
                        })
                        .collect()
                }),
                runtime_handlers: some(r.runtime_handlers.is_empty()).then(|| {
                    r.runtime_handlers
                        .iter()
                        .map(|h| core::NodeRuntimeHandler {
                            name: non_empty(&h.name),
                            features: h.features.as_ref().map(|f| {
                                core::NodeRuntimeHandlerFeatures {
                                    recursive_read_only_mounts: f.recursive_read_only_mounts,
                                    user_namespaces: f.user_namespaces,
                                }
                            }),
                        })
                        .collect()
                }),
                volumes_attached: some(r.volumes_attached.is_empty()).then(|| {
                    r.volumes_attached
                        .iter()
                        .map(|v| core::AttachedVolume {
                            name: v.name.clone(),
                            device_path: v.device_path.clone(),
                        })
                        .collect()
                }),
                volumes_in_use: some(r.volumes_in_use.is_empty()).then(|| r.volumes_in_use.clone()),
                ..NodeStatus::default()
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
    }

    fn same_as_the_kubernetes_object(node: &model::Node, heartbeat: Option<Micros>) {
        let ours = serde_json::to_string(&NodeJson::shown(node, heartbeat)).unwrap();
        let theirs = serde_json::to_string(&typed::node(node, heartbeat)).unwrap();
        assert_eq!(ours, theirs);
    }

    fn bare() -> model::Node {
        model::Node {
            name: "edge-1".into(),
            uid: "0b6c9c3e-2f55-4a43-9a4b-1c7e1f7c1a10".into(),
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
            conditions: Vec::new(),
            node_info: model::NodeInfo::default(),
            reported: Default::default(),
        }
    }

    #[test]
    fn a_kubelets_report_is_written_as_its_kubernetes_object() {
        let mut n = sample();
        n.reported = model::Reported::sample();
        same_as_the_kubernetes_object(&n, None);
        let v = to_json(&NodeJson::shown(&n, None));
        assert_eq!(
            v["status"]["daemonEndpoints"],
            json!({"kubeletEndpoint": {"Port": 10250}})
        );
        assert_eq!(v["status"]["images"][1]["sizeBytes"], 72_955_450);
        // And read back as the kubelet sent it.
        let back = crate::k8s::pushed_status(&node(&n, None)).unwrap();
        assert_eq!(back.reported, Some(model::Reported::sample()));
        // Each on its own too: an empty field is left out, not written empty.
        for only in [
            model::Reported {
                kubelet_port: 10250,
                ..Default::default()
            },
            model::Reported {
                features: Some(model::Features::default()),
                ..Default::default()
            },
        ] {
            n.reported = only;
            same_as_the_kubernetes_object(&n, None);
        }
    }

    #[test]
    fn a_bare_node_is_written_as_its_kubernetes_object() {
        same_as_the_kubernetes_object(&bare(), None);
        same_as_the_kubernetes_object(&sample(), None);
        same_as_the_kubernetes_object(&sample(), Some(at("2026-11-30T10:03:00.5Z")));
    }

    #[test]
    fn every_field_is_written_as_its_kubernetes_object() {
        let mut n = bare();
        n.labels = BTreeMap::from([
            ("a".into(), "1".into()),
            ("kubernetes.io/arch".into(), "arm64".into()),
            ("kubernetes.io/os".into(), "windows".into()),
            ("zone".into(), "z\"1".into()),
        ]);
        n.annotations = BTreeMap::from([
            ("a".into(), "x".into()),
            ("nodekeeper.io/source".into(), "ignored".into()),
            ("zz".into(), "y".into()),
        ]);
        n.external_id = "i-123".into();
        n.provider_id = "aws:///eu-1a/i-123".into();
        n.capacity = Resources {
            cpu_millis: 1500,
            memory_bytes: 1536 << 20,
        };
        n.unschedulable = true;
        n.taints = vec![
            model::Taint {
                key: "node.kubernetes.io/not-ready".into(),
                value: String::new(),
                effect: "NoSchedule".into(),
                added: None,
            },
            model::Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: "NoExecute".into(),
                added: Some(Micros(1_764_000_001_999_999)),
            },
        ];
        n.addresses = vec![
            Address {
                kind: AddressKind::InternalIP,
                address: "127.60.0.1".into(),
            },
            Address {
                kind: AddressKind::Hostname,
                address: "edge-1".into(),
            },
        ];
        n.conditions = vec![
            Condition {
                kind: "Ready".into(),
                status: ConditionStatus::True,
                last_heartbeat: Micros(1_764_000_100_500_000),
                last_transition: Micros(1_764_000_000_000_000),
                reason: "KubeletReady".into(),
                message: "kubelet is posting ready status".into(),
            },
            Condition {
                kind: "DiskPressure".into(),
                status: ConditionStatus::Unknown,
                last_heartbeat: Micros(-1_500_000),
                last_transition: Micros(0),
                reason: String::new(),
                message: String::new(),
            },
        ];
        n.node_info = model::NodeInfo {
            machine_id: "m".into(),
            system_uuid: "u".into(),
            boot_id: "b".into(),
            kernel_version: "6.1".into(),
            os_image: "Debian".into(),
            container_runtime_version: "containerd://2.0".into(),
            kubelet_version: "v1.33.0".into(),
            kube_proxy_version: String::new(),
            operating_system: "linux".into(),
            architecture: "arm64".into(),
        };
        same_as_the_kubernetes_object(&n, None);
        same_as_the_kubernetes_object(&n, Some(Micros(1_764_000_200_000_000)));
        same_as_the_kubernetes_object(&n, Some(Micros(1)));
    }

    #[test]
    fn quantities_are_written_as_the_kubernetes_object_writes_them() {
        let mut n = bare();
        for (cpu_millis, memory_bytes) in [
            (0, 0),
            (1, 1),
            (999, 1023),
            (1000, 1024),
            (1500, 1536 << 20),
            (64_000, 3 << 30),
            (u64::MAX, u64::MAX),
            (1000 * (u64::MAX / 1000), 1 << 60),
        ] {
            n.capacity = Resources {
                cpu_millis,
                memory_bytes,
            };
            same_as_the_kubernetes_object(&n, None);
        }
    }

    #[test]
    fn labels_and_annotations_merge_in_key_order() {
        let mut n = bare();
        // Keys sorting before, between and after the added ones.
        for key in [
            "0",
            "kubernetes.io/hostnamf",
            "kubernetes.io/p",
            "nodekeeper.io/a",
            "nz",
        ] {
            n.labels.insert(key.into(), "v".into());
            n.annotations.insert(key.into(), "v".into());
        }
        same_as_the_kubernetes_object(&n, None);
        n.labels
            .insert("kubernetes.io/hostname".into(), "other".into());
        same_as_the_kubernetes_object(&n, None);
    }

    #[test]
    fn parts_leave_out_what_they_do_not_name() {
        let n = sample();
        let only = Parts {
            metadata: false,
            spec: false,
            status: true,
            addresses: false,
            allocatable: false,
            capacity: false,
            conditions: true,
            node_info: true,
            reported: false,
            stored_node_info: true,
        };
        let v = to_json(&NodeJson::parts(&n, only));
        assert_eq!(v["metadata"], json!({"name": "edge-1"}));
        assert!(v.get("spec").is_none());
        let status = v["status"].as_object().unwrap();
        assert_eq!(
            status.keys().collect::<Vec<_>>(),
            ["conditions", "nodeInfo"]
        );
        // As stored: no operating system before a kubelet reports one.
        assert_eq!(v["status"]["nodeInfo"]["operatingSystem"], "");
        let none = to_json(&NodeJson::parts(
            &n,
            Parts {
                status: false,
                ..only
            },
        ));
        assert!(none.get("status").is_none());
    }

    #[test]
    fn a_node_list_is_its_head_items_and_tail() {
        let n = sample();
        let meta = crate::k8s::at_version(77);
        let mut ours = NODE_LIST_HEAD.to_vec();
        ours.extend_from_slice(&NodeJson::shown(&n, None).to_vec());
        ours.extend_from_slice(&crate::k8s::list_tail(&meta));
        let theirs = serde_json::to_vec(&node_list([node(&n, None)], 77)).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            String::from_utf8(theirs).unwrap()
        );
    }
}
