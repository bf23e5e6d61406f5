//! Node Leases (`coordination.k8s.io/v1`, namespace `kube-node-lease`):
//! what kubelets write, read into the domain, and what we serve back.

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use super::{micros, time};
use crate::model::{Lease, Micros, NODE_LEASE_NAMESPACE};

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
            uid: Some(lease.uid.clone()),
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
}
