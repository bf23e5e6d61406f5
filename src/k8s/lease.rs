//! Node Leases (`coordination.k8s.io/v1`, namespace `kube-node-lease`):
//! what kubelets write, read into the domain, and what we serve back,
//! including the Lease served for a node whose kubelet keeps none.

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::List;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::json::{MicroTime, Shown, Time};
use super::micros;
use crate::model::{
    ConditionStatus, Lease, Micros, Node, OwnerReference, NODE_LEASE_NAMESPACE, READY,
};
use crate::serialize::Each;

/// The lease duration a kubelet gives its Lease by default
/// (`nodeLeaseDurationSeconds`).
pub const KUBELET_LEASE_SECONDS: i32 = 40;

/// A Lease a kubelet writes, checked against the name in the path.
pub fn lease(lease: &KubeLease, path_name: &str) -> Result<Lease, String> {
    if let Some(name) = &lease.metadata.name {
        if name != path_name {
            return Err(format!(
                "the name of the object ({name}) does not match the name on the URL ({path_name})"
            ));
        }
    }
    if let Some(ns) = &lease.metadata.namespace {
        if ns != NODE_LEASE_NAMESPACE {
            return Err(format!(
                "the namespace of the object ({ns}) does not match the namespace on the URL ({NODE_LEASE_NAMESPACE})"
            ));
        }
    }
    let spec = lease.spec.clone().unwrap_or_default();
    if spec.lease_duration_seconds.is_some_and(|d| d <= 0) {
        return Err("spec.leaseDurationSeconds: Invalid value: must be greater than 0".into());
    }
    let owners = lease
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    if owners.len() > MAX_OWNERS {
        return Err(format!(
            "metadata.ownerReferences: Too many: {}: must have at most {MAX_OWNERS} items",
            owners.len()
        ));
    }
    // What kube-apiserver requires of each, in its words (apimachinery
    // pkg/api/validation/objectmeta.go `validateOwnerReference`, whose path
    // names no index).
    for o in owners {
        for (field, value, why) in [
            ("apiVersion", &o.api_version, "version must not be empty"),
            ("kind", &o.kind, "must not be empty"),
            ("name", &o.name, "must not be empty"),
            ("uid", &o.uid, "must not be empty"),
        ] {
            if value.is_empty() {
                return Err(format!(
                    "metadata.ownerReferences.{field}: Invalid value: \"\": {why}"
                ));
            }
        }
    }
    Ok(Lease {
        name: path_name.to_string(),
        uid: String::new(),
        created: Micros(0),
        generation: 0,
        holder_identity: spec.holder_identity,
        lease_duration_seconds: spec.lease_duration_seconds,
        acquire_time: spec.acquire_time.as_ref().map(|t| micros(&t.0)),
        renew_time: spec.renew_time.as_ref().map(|t| micros(&t.0)),
        lease_transitions: spec.lease_transitions,
        owner_references: owners
            .iter()
            .map(|o| OwnerReference {
                api_version: o.api_version.clone(),
                kind: o.kind.clone(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                controller: o.controller,
                block_owner_deletion: o.block_owner_deletion,
            })
            .collect(),
    })
}

/// The most owners a Lease keeps: a kubelet's has one, its Node.
pub const MAX_OWNERS: usize = 8;

/// A `LeaseList` of `leases` at `resource_version`, as [`super::node_list`].
pub fn lease_list<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    resource_version: u64,
) -> List<KubeLease> {
    List {
        items: leases.into_iter().map(kube_lease).collect(),
        metadata: super::at_version(resource_version),
    }
}

/// The Kubernetes Lease object for a stored lease, read back from
/// [`LeaseJson`]'s bytes (the one place a Lease's fields are laid out).
pub fn kube_lease(lease: &Lease) -> KubeLease {
    let value =
        serde_json::to_value(LeaseJson(lease)).expect("a Lease's JSON is strings and numbers");
    serde_json::from_value(value).expect("a Lease's JSON reads as a Lease")
}

/// A stored lease's Kubernetes JSON, written straight from the record, in
/// the order k8s-openapi's `Lease` serializes.
pub struct LeaseJson<'a>(pub &'a Lease);

impl Serialize for LeaseJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("apiVersion", "coordination.k8s.io/v1")?;
        map.serialize_entry("kind", "Lease")?;
        map.serialize_entry("metadata", &Metadata(self.0))?;
        map.serialize_entry("spec", &Spec(self.0))?;
        map.end()
    }
}

struct Metadata<'a>(&'a Lease);

impl Serialize for Metadata<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let lease = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("creationTimestamp", &Time(lease.created))?;
        map.serialize_entry("name", &lease.name)?;
        map.serialize_entry("namespace", NODE_LEASE_NAMESPACE)?;
        if !lease.owner_references.is_empty() {
            map.serialize_entry("ownerReferences", &Each(&lease.owner_references, Owner))?;
        }
        map.serialize_entry("resourceVersion", &Shown(lease.generation))?;
        if !lease.uid.is_empty() {
            map.serialize_entry("uid", &lease.uid)?;
        }
        map.end()
    }
}

/// An owner, in k8s-openapi's `OwnerReference` order.
struct Owner<'a>(&'a OwnerReference);

impl Serialize for Owner<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let o = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("apiVersion", &o.api_version)?;
        if let Some(block) = o.block_owner_deletion {
            map.serialize_entry("blockOwnerDeletion", &block)?;
        }
        if let Some(controller) = o.controller {
            map.serialize_entry("controller", &controller)?;
        }
        map.serialize_entry("kind", &o.kind)?;
        map.serialize_entry("name", &o.name)?;
        map.serialize_entry("uid", &o.uid)?;
        map.end()
    }
}

struct Spec<'a>(&'a Lease);

impl Serialize for Spec<'_> {
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

/// The Lease served for `node` when its kubelet keeps none (a probed
/// node's, or an older kubelet's): what kube-apiserver would hold had the
/// kubelet renewed one each time nodekeeper heard from it. Its holder is
/// the node, its duration the kubelet's default, its `renewTime` the last
/// answer heard (`heartbeat`, the newest probe answer this run, else the
/// time of the Ready condition's last report); a node not heard from has
/// none. Its resourceVersion is the node's: a kubelet that writes it back
/// makes a Lease of its own, which is served from then on.
pub fn heartbeat_lease(node: &Node, heartbeat: Option<Micros>) -> Lease {
    let reported = node
        .condition(READY)
        .filter(|c| c.status != ConditionStatus::Unknown)
        .map(|c| c.last_heartbeat);
    Lease {
        name: node.name.clone(),
        uid: String::new(),
        created: node.created,
        generation: node.resource_version,
        holder_identity: Some(node.name.clone()),
        lease_duration_seconds: Some(KUBELET_LEASE_SECONDS),
        acquire_time: None,
        renew_time: heartbeat.max(reported),
        lease_transitions: None,
        owner_references: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// k8s-openapi's `Lease`, built field by field: what [`LeaseJson`]
    /// must write the same bytes as.
    fn typed(lease: &Lease) -> KubeLease {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{self as meta, ObjectMeta};
        let micro = |t: Micros| meta::MicroTime(t.timestamp());
        KubeLease {
            metadata: ObjectMeta {
                name: Some(lease.name.clone()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                uid: crate::k8s::non_empty(&lease.uid),
                creation_timestamp: Some(crate::k8s::time(lease.created)),
                resource_version: Some(lease.generation.to_string()),
                owner_references: (!lease.owner_references.is_empty()).then(|| {
                    lease
                        .owner_references
                        .iter()
                        .map(|o| meta::OwnerReference {
                            api_version: o.api_version.clone(),
                            kind: o.kind.clone(),
                            name: o.name.clone(),
                            uid: o.uid.clone(),
                            controller: o.controller,
                            block_owner_deletion: o.block_owner_deletion,
                        })
                        .collect()
                }),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: lease.holder_identity.clone(),
                lease_duration_seconds: lease.lease_duration_seconds,
                acquire_time: lease.acquire_time.map(micro),
                renew_time: lease.renew_time.map(micro),
                lease_transitions: lease.lease_transitions,
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_lease_is_written_as_its_kubernetes_object() {
        let mut lease = Lease {
            name: "edge-1".into(),
            uid: String::new(),
            created: Micros(1_764_000_000_654_321),
            generation: 7,
            holder_identity: None,
            lease_duration_seconds: None,
            acquire_time: None,
            renew_time: None,
            lease_transitions: None,
            owner_references: Vec::new(),
        };
        for _ in 0..2 {
            let ours = serde_json::to_string(&LeaseJson(&lease)).unwrap();
            let theirs = serde_json::to_string(&typed(&lease)).unwrap();
            assert_eq!(ours, theirs);
            assert_eq!(kube_lease(&lease), typed(&lease));
            lease.uid = "u-1".into();
            lease.holder_identity = Some("edge \"1\"".into());
            lease.lease_duration_seconds = Some(40);
            lease.acquire_time = Some(Micros(1_764_000_000_000_000));
            lease.renew_time = Some(Micros(1_764_000_100_000_007));
            lease.lease_transitions = Some(2);
            lease.owner_references = vec![
                OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: "edge-1".into(),
                    uid: "n-1".into(),
                    controller: None,
                    block_owner_deletion: None,
                },
                OwnerReference {
                    api_version: "example.com/v1".into(),
                    kind: "Thing".into(),
                    name: "t".into(),
                    uid: "t-1".into(),
                    controller: Some(false),
                    block_owner_deletion: Some(true),
                },
            ];
        }
    }

    /// A kubelet's Lease names its Node as owner
    /// (pkg/kubelet/util/nodelease.go:32-38 `SetNodeOwnerFunc`): kept as
    /// written; an owner without a field kube-apiserver requires is refused.
    #[test]
    fn a_leases_owner_is_read_and_checked() {
        let mut k: KubeLease = serde_json::from_value(json!({
            "metadata": {"name": "edge-1", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "edge-1", "uid": "n-1"}]},
            "spec": {"holderIdentity": "edge-1"}
        }))
        .unwrap();
        let l = lease(&k, "edge-1").unwrap();
        assert_eq!(l.owner_references.len(), 1);
        assert_eq!(l.owner_references[0].uid, "n-1");
        let back = serde_json::to_value(LeaseJson(&l)).unwrap();
        assert_eq!(
            back["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "edge-1", "uid": "n-1"}])
        );
        k.metadata.owner_references.as_mut().unwrap()[0].api_version = String::new();
        assert_eq!(
            lease(&k, "edge-1").unwrap_err(),
            "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty"
        );
        let many = k.metadata.owner_references.clone().unwrap()[0].clone();
        k.metadata.owner_references = Some(vec![many; MAX_OWNERS + 1]);
        assert!(lease(&k, "edge-1").unwrap_err().contains("Too many"));
    }

    #[test]
    fn leases_round_trip_and_check_their_name() {
        let k: KubeLease = serde_json::from_value(json!({
            "metadata": {"name": "edge-1", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "edge-1", "leaseDurationSeconds": 40, "renewTime": "2026-11-30T09:00:00.123456Z"}
        }))
        .unwrap();
        let l = lease(&k, "edge-1").unwrap();
        assert_eq!(
            l.renew_time,
            Some(Micros::parse_rfc3339("2026-11-30T09:00:00.123456Z").unwrap())
        );
        let back = serde_json::to_value(kube_lease(&Lease { generation: 3, ..l })).unwrap();
        assert_eq!(back["kind"], "Lease");
        assert_eq!(back["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(back["metadata"]["resourceVersion"], "3");
        assert_eq!(back["spec"]["renewTime"], "2026-11-30T09:00:00.123456Z");
        assert!(lease(&k, "edge-2").unwrap_err().contains("does not match"));
    }

    /// What a kubelet's Lease holds (k8s.io/component-helpers
    /// apimachinery/lease/controller.go `newLease`: holderIdentity the
    /// node, leaseDurationSeconds, renewTime; kubelet's default duration 40 s,
    /// kubernetes pkg/kubelet/apis/config/v1beta1/defaults.go).
    #[test]
    fn a_node_without_a_lease_is_served_the_one_its_heartbeats_make() {
        let mut node = crate::store::records::tests::sample_node();
        node.conditions[0].status = ConditionStatus::True;
        node.conditions[0].last_heartbeat = Micros(5_000_000);
        let served = serde_json::to_value(kube_lease(&heartbeat_lease(&node, None))).unwrap();
        assert_eq!(served["metadata"]["name"], node.name.as_str());
        assert_eq!(served["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(
            served["metadata"]["resourceVersion"],
            node.resource_version.to_string()
        );
        assert!(served["metadata"].get("uid").is_none(), "{served}");
        assert_eq!(served["spec"]["holderIdentity"], node.name.as_str());
        assert_eq!(served["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(served["spec"]["renewTime"], "1970-01-01T00:00:05.000000Z");
        // A newer answer heard this run wins.
        let lease = heartbeat_lease(&node, Some(Micros(7_000_000)));
        assert_eq!(lease.renew_time, Some(Micros(7_000_000)));
        // Unknown was not heard from: only an answer this run counts.
        node.conditions[0].status = ConditionStatus::Unknown;
        assert_eq!(heartbeat_lease(&node, None).renew_time, None);
        assert_eq!(
            heartbeat_lease(&node, Some(Micros(3))).renew_time,
            Some(Micros(3))
        );
    }
}
