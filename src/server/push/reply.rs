//! The node a status push is answered with, and the Lease a renewal is
//! answered with, written as JSON straight from the record: the same bytes
//! as serializing [`crate::kube::node`]'s or [`crate::kube::kube_lease`]'s
//! Kubernetes object, without building it (its maps, strings and times
//! were most of a heartbeat's allocations, thousands of times a second).

use std::cmp::Ordering;
use std::fmt;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

#[cfg(doc)]
use crate::kube::{cpu_quantity, memory_quantity};
use crate::kube::{go_arch, HOSTNAME_LABEL, MAX_PODS, OS_LABEL, SOURCE_ANNOTATION};
use crate::model::{self, Micros, NODE_LEASE_NAMESPACE};
use crate::serialize::Each;

/// A node as `GET /api/v1/nodes/{name}` shows it with no heartbeat held
/// beside it (`crate::kube::node(node, None)`), field for field in
/// k8s-openapi's order, empty strings left out as it leaves them out.
pub(super) struct NodeReply<'a>(pub &'a model::Node);

impl Serialize for NodeReply<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let node = self.0;
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry("apiVersion", "v1")?;
        map.serialize_entry("kind", "Node")?;
        map.serialize_entry("metadata", &Metadata(node))?;
        map.serialize_entry("spec", &Spec(node))?;
        map.serialize_entry("status", &Status(node))?;
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
/// defaults). The extra keys must be in ascending order.
struct Merged<'a, const N: usize> {
    own: &'a std::collections::BTreeMap<String, String>,
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
            map.serialize_entry("taints", &Each(&node.taints, Taint))?;
        }
        if node.unschedulable {
            map.serialize_entry("unschedulable", &true)?;
        }
        map.end()
    }
}

struct Taint<'a>(&'a model::Taint);

impl Serialize for Taint<'_> {
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

struct Status<'a>(&'a model::Node);

impl Serialize for Status<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let node = self.0;
        // Nothing is reserved for system daemons: allocatable equals capacity.
        let resources = Resources(&node.capacity);
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry("addresses", &Each(&node.addresses, Address))?;
        map.serialize_entry("allocatable", &resources)?;
        map.serialize_entry("capacity", &resources)?;
        map.serialize_entry("conditions", &Each(&node.conditions, Condition))?;
        map.serialize_entry("nodeInfo", &Info(&node.node_info))?;
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

/// Bytes as [`memory_quantity`] writes them: in the largest binary suffix
/// that divides them exactly (`3Gi`, `1536Mi`, `1000`).
struct Memory(u64);

impl Serialize for Memory {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        let mut value = self.0;
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
        serializer.collect_str(&format_args!("{value}{suffix}"))
    }
}

struct Condition<'a>(&'a model::Condition);

impl Serialize for Condition<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("lastHeartbeatTime", &Time(c.last_heartbeat))?;
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

struct Info<'a>(&'a model::NodeInfo);

/// `value`, or `fallback` when it is empty.
fn or<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    if value.is_empty() {
        fallback
    } else {
        value
    }
}

impl Serialize for Info<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let i = self.0;
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

/// A Lease as `crate::kube::kube_lease` shows it, field for field.
pub(in crate::server) struct LeaseReply<'a>(pub &'a model::Lease);

impl Serialize for LeaseReply<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let lease = self.0;
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("apiVersion", "coordination.k8s.io/v1")?;
        map.serialize_entry("kind", "Lease")?;
        map.serialize_entry("metadata", &LeaseMetadata(lease))?;
        map.serialize_entry("spec", &LeaseSpec(lease))?;
        map.end()
    }
}

struct LeaseMetadata<'a>(&'a model::Lease);

impl Serialize for LeaseMetadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let lease = self.0;
        let mut map = serializer.serialize_map(Some(5))?;
        map.serialize_entry("creationTimestamp", &Time(lease.created))?;
        map.serialize_entry("name", &lease.name)?;
        map.serialize_entry("namespace", NODE_LEASE_NAMESPACE)?;
        map.serialize_entry("resourceVersion", &Shown(lease.generation))?;
        map.serialize_entry("uid", &lease.uid)?;
        map.end()
    }
}

struct LeaseSpec<'a>(&'a model::Lease);

impl Serialize for LeaseSpec<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let lease = self.0;
        let mut map = serializer.serialize_map(None)?;
        if let Some(t) = lease.acquire_time {
            map.serialize_entry("acquireTime", &MicroTime(t))?;
        }
        if let Some(holder) = &lease.holder_identity {
            map.serialize_entry("holderIdentity", holder)?;
        }
        if let Some(d) = lease.lease_duration_seconds {
            map.serialize_entry("leaseDurationSeconds", &d)?;
        }
        if let Some(n) = lease.lease_transitions {
            map.serialize_entry("leaseTransitions", &n)?;
        }
        if let Some(t) = lease.renew_time {
            map.serialize_entry("renewTime", &MicroTime(t))?;
        }
        map.end()
    }
}

/// A number written as a JSON string, without a `String` for it.
struct Shown<T>(T);

impl<T: fmt::Display> Serialize for Shown<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

/// A Kubernetes `Time` (`2026-11-30T09:00:00Z`, cut to the second), written
/// without the `String` k8s-openapi formats it into first.
struct Time(Micros);

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let kube = crate::kube::time(self.0);
        match Rfc3339::of(kube.0, false) {
            Some(shown) => serializer.serialize_str(shown.as_str()),
            None => kube.serialize(serializer),
        }
    }
}

/// A Kubernetes `MicroTime` (`2026-11-30T09:00:00.123456Z`).
struct MicroTime(Micros);

impl Serialize for MicroTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let t = self.0.timestamp();
        match Rfc3339::of(t, true) {
            Some(shown) => serializer.serialize_str(shown.as_str()),
            None => {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(t).serialize(serializer)
            }
        }
    }
}

/// A UTC time as Kubernetes writes it, with or without microseconds,
/// written digit by digit: a reply holds a dozen times, and the formatting
/// machinery cost more than the rest of a condition.
struct Rfc3339 {
    text: [u8; 27],
    len: usize,
}

impl Rfc3339 {
    /// `None` for a year not of four digits: k8s-openapi's own formatting
    /// then decides.
    fn of(t: jiff::Timestamp, micros: bool) -> Option<Rfc3339> {
        let d = jiff::tz::Offset::UTC.to_datetime(t);
        let year = u32::try_from(d.year()).ok().filter(|y| *y <= 9999)?;
        // Each part of a civil date and time is within its range: no casts lose anything.
        let parts = [
            (year, 4, b'-'),
            (d.month() as u32, 2, b'-'),
            (d.day() as u32, 2, b'T'),
            (d.hour() as u32, 2, b':'),
            (d.minute() as u32, 2, b':'),
            (d.second() as u32, 2, b'.'),
            (d.subsec_nanosecond() as u32 / 1000, 6, b'Z'),
        ];
        let mut text = [0u8; 27];
        let mut len = 0;
        let used = if micros { &parts[..] } else { &parts[..6] };
        for &(value, digits, after) in used {
            let mut rest = value;
            for i in (0..digits).rev() {
                text[len + i] = b'0' + (rest % 10) as u8;
                rest /= 10;
            }
            text[len + digits] = after;
            len += digits + 1;
        }
        if !micros {
            text[len - 1] = b'Z';
        }
        Some(Rfc3339 { text, len })
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[..self.len]).expect("digits and separators are ASCII")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::{AddressKind, ConditionStatus, Node, NodeInfo, Resources};

    fn node() -> Node {
        Node {
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
            node_info: NodeInfo::default(),
        }
    }

    fn same_as_the_kubernetes_object(node: &Node) {
        let ours = serde_json::to_string(&NodeReply(node)).unwrap();
        let theirs = serde_json::to_string(&crate::kube::node(node, None)).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn a_bare_node_is_written_as_its_kubernetes_object() {
        same_as_the_kubernetes_object(&node());
    }

    #[test]
    fn every_field_is_written_as_its_kubernetes_object() {
        let mut n = node();
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
            crate::model::Taint {
                key: "node.kubernetes.io/not-ready".into(),
                value: String::new(),
                effect: "NoSchedule".into(),
                added: None,
            },
            crate::model::Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: "NoExecute".into(),
                added: Some(Micros(1_764_000_001_999_999)),
            },
        ];
        n.addresses = vec![
            crate::model::Address {
                kind: AddressKind::InternalIP,
                address: "127.60.0.1".into(),
            },
            crate::model::Address {
                kind: AddressKind::Hostname,
                address: "edge-1".into(),
            },
        ];
        n.conditions = vec![
            crate::model::Condition {
                kind: "Ready".into(),
                status: ConditionStatus::True,
                last_heartbeat: Micros(1_764_000_100_500_000),
                last_transition: Micros(1_764_000_000_000_000),
                reason: "KubeletReady".into(),
                message: "kubelet is posting ready status".into(),
            },
            crate::model::Condition {
                kind: "DiskPressure".into(),
                status: ConditionStatus::Unknown,
                last_heartbeat: Micros(-1_500_000),
                last_transition: Micros(0),
                reason: String::new(),
                message: String::new(),
            },
        ];
        n.node_info = NodeInfo {
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
        same_as_the_kubernetes_object(&n);
    }

    #[test]
    fn a_lease_is_written_as_its_kubernetes_object() {
        let mut lease = crate::model::Lease {
            name: "edge-1".into(),
            uid: "u-1".into(),
            created: Micros(1_764_000_000_654_321),
            generation: 7,
            holder_identity: None,
            lease_duration_seconds: None,
            acquire_time: None,
            renew_time: None,
            lease_transitions: None,
        };
        for _ in 0..2 {
            let ours = serde_json::to_string(&LeaseReply(&lease)).unwrap();
            let theirs = serde_json::to_string(&crate::kube::kube_lease(&lease)).unwrap();
            assert_eq!(ours, theirs);
            lease.holder_identity = Some("edge-1".into());
            lease.lease_duration_seconds = Some(40);
            lease.acquire_time = Some(Micros(1_764_000_000_000_000));
            lease.renew_time = Some(Micros(1_764_000_100_000_007));
            lease.lease_transitions = Some(2);
        }
    }

    #[test]
    fn quantities_are_written_as_the_kubernetes_object_writes_them() {
        let mut n = node();
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
            same_as_the_kubernetes_object(&n);
        }
    }

    #[test]
    fn times_are_written_as_kubernetes_writes_them() {
        for micros in [
            0,
            -1,
            -1_500_000,
            1_764_000_100_500_000,
            1_764_000_100_000_007,
            1_709_164_799_999_999,
            253_402_300_799_999_999,
            253_402_300_800_000_000,
            -62_167_219_200_000_000,
            -62_167_219_200_000_001,
        ] {
            let t = Micros(micros);
            assert_eq!(
                serde_json::to_string(&Time(t)).unwrap(),
                serde_json::to_string(&crate::kube::time(t)).unwrap(),
                "{micros}"
            );
            assert_eq!(
                serde_json::to_string(&MicroTime(t)).unwrap(),
                serde_json::to_string(&k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    t.timestamp()
                ))
                .unwrap(),
                "{micros}"
            );
        }
    }

    #[test]
    fn labels_and_annotations_merge_in_key_order() {
        let mut n = node();
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
        same_as_the_kubernetes_object(&n);
        n.labels
            .insert("kubernetes.io/hostname".into(), "other".into());
        same_as_the_kubernetes_object(&n);
    }
}
