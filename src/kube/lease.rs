//! Node Leases (`coordination.k8s.io/v1`, namespace `kube-node-lease`):
//! what kubelets write, read into the domain, and what we serve back,
//! including the Lease served for a node whose kubelet keeps none.

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::{micros, non_empty, time};
use crate::model::{ConditionStatus, Lease, Micros, Node, NODE_LEASE_NAMESPACE, READY};

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
    })
}

/// The Kubernetes Lease object for a stored lease.
pub fn kube_lease(lease: &Lease) -> KubeLease {
    let micro = |t: Micros| MicroTime(t.timestamp());
    KubeLease {
        metadata: ObjectMeta {
            name: Some(lease.name.clone()),
            namespace: Some(NODE_LEASE_NAMESPACE.into()),
            uid: non_empty(&lease.uid),
            creation_timestamp: Some(time(lease.created)),
            resource_version: Some(lease.generation.to_string()),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
