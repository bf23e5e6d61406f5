//! Kubernetes objects that clients send (node status, Nodes, Leases), read
//! into the domain: the other direction of [`crate::kube`].

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node as KubeNode, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use crate::controller::push::{PushedCondition, PushedStatus};
use crate::model::{
    Address, AddressKind, Lease, Micros, NodeInfo, NodeSpec, Resources, NODE_LEASE_NAMESPACE,
};

/// The source recorded for nodes that registered themselves.
pub const SELF_REGISTERED: &str = "kubelet";

fn micros(t: &jiff::Timestamp) -> Micros {
    Micros(t.as_microsecond())
}

/// The status a kubelet reports, from a Node object.
pub fn pushed_status(node: &KubeNode) -> Result<PushedStatus, String> {
    let Some(status) = &node.status else {
        return Ok(PushedStatus::default());
    };
    status_of(status)
}

fn status_of(status: &NodeStatus) -> Result<PushedStatus, String> {
    let mut conditions = Vec::new();
    for (i, c) in status.conditions.iter().flatten().enumerate() {
        if c.type_.is_empty() {
            return Err(format!("status.conditions[{i}].type: Required value"));
        }
        let parsed = c
            .status
            .parse()
            .map_err(|e| format!("status.conditions[{i}].status: {e}"))?;
        conditions.push(PushedCondition {
            kind: c.type_.clone(),
            status: parsed,
            last_heartbeat: c.last_heartbeat_time.as_ref().map(|t| micros(&t.0)),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        });
    }
    let addresses = match &status.addresses {
        None => None,
        Some(list) => Some(
            list.iter()
                .enumerate()
                .map(|(i, a)| {
                    let kind = match a.type_.as_str() {
                        "InternalIP" => AddressKind::InternalIP,
                        "ExternalIP" => AddressKind::ExternalIP,
                        "Hostname" => AddressKind::Hostname,
                        "InternalDNS" => AddressKind::InternalDNS,
                        "ExternalDNS" => AddressKind::ExternalDNS,
                        other => {
                            return Err(format!(
                                "status.addresses[{i}].type: Unsupported value: {other:?}"
                            ))
                        }
                    };
                    Ok(Address {
                        kind,
                        address: a.address.clone(),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?,
        ),
    };
    let node_info = status.node_info.as_ref().map(|i| NodeInfo {
        machine_id: i.machine_id.clone(),
        system_uuid: i.system_uuid.clone(),
        boot_id: i.boot_id.clone(),
        kernel_version: i.kernel_version.clone(),
        os_image: i.os_image.clone(),
        container_runtime_version: i.container_runtime_version.clone(),
        kubelet_version: i.kubelet_version.clone(),
        kube_proxy_version: i.kube_proxy_version.clone(),
        operating_system: i.operating_system.clone(),
        architecture: i.architecture.clone(),
    });
    let capacity = match &status.capacity {
        None => None,
        Some(map) => {
            let cpu = map
                .get("cpu")
                .map(|q| crate::quantity::parse_cpu(&q.0))
                .transpose();
            let memory = map
                .get("memory")
                .map(|q| crate::quantity::parse_memory(&q.0))
                .transpose();
            match (
                cpu.map_err(|e| format!("status.capacity.cpu: {e}"))?,
                memory.map_err(|e| format!("status.capacity.memory: {e}"))?,
            ) {
                (Some(cpu_millis), Some(memory_bytes)) => Some(Resources {
                    cpu_millis,
                    memory_bytes,
                }),
                _ => None,
            }
        }
    };
    Ok(PushedStatus {
        conditions,
        addresses,
        node_info,
        capacity,
    })
}

/// A node a kubelet registers (`POST /api/v1/nodes`): its spec and status.
pub fn node_registration(node: &KubeNode) -> Result<(NodeSpec, PushedStatus), String> {
    let raw = node.metadata.name.as_deref().unwrap_or_default();
    let name = crate::source::static_list::normalize_name(raw)
        .map_err(|e| format!("metadata.name: {e}"))?;
    let status = pushed_status(node)?;
    let spec = node.spec.clone().unwrap_or_default();
    let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
    Ok((
        NodeSpec {
            external_id: spec.external_id.unwrap_or_else(|| name.clone()),
            provider_id: spec.provider_id.unwrap_or_default(),
            source: SELF_REGISTERED.into(),
            labels,
            capacity: status.capacity.unwrap_or_default(),
            addresses: status.addresses.clone().unwrap_or_default(),
            name,
        },
        status,
    ))
}

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
            creation_timestamp: Some(crate::kube::time(lease.created)),
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

/// The `metadata.resourceVersion` a writer based its change on, if any.
pub fn expected_version(meta: &ObjectMeta) -> Result<Option<u64>, String> {
    match meta.resource_version.as_deref() {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| format!("metadata.resourceVersion: Invalid value: {v:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kubelet_status_reads_into_the_domain() {
        let node: KubeNode = serde_json::from_value(json!({
            "metadata": {"name": "edge-1"},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-30T04:00:00Z",
                     "reason": "KubeletReady", "message": "kubelet is posting ready status"},
                    {"type": "MemoryPressure", "status": "False"}
                ],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "nodeInfo": {"kubeletVersion": "v1.32.1", "machineID": "m", "systemUUID": "s", "bootID": "b",
                             "kernelVersion": "6.1", "osImage": "Debian", "containerRuntimeVersion": "containerd://1.7",
                             "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "arm64"}
            }
        }))
        .unwrap();
        let status = pushed_status(&node).unwrap();
        assert_eq!(status.conditions.len(), 2);
        assert_eq!(
            status.conditions[0].last_heartbeat,
            Some(Micros::parse_rfc3339("2026-11-30T04:00:00Z").unwrap())
        );
        assert_eq!(status.conditions[1].last_heartbeat, None);
        assert_eq!(
            status.capacity,
            Some(Resources {
                cpu_millis: 4000,
                memory_bytes: 8 << 30
            })
        );
        assert_eq!(status.node_info.unwrap().kubelet_version, "v1.32.1");
        assert_eq!(status.addresses.unwrap()[0].address, "10.0.0.5");
    }

    #[test]
    fn bad_statuses_name_the_field() {
        let node: KubeNode = serde_json::from_value(json!({
            "status": {"conditions": [{"type": "Ready", "status": "Maybe"}]}
        }))
        .unwrap();
        assert!(pushed_status(&node)
            .unwrap_err()
            .starts_with("status.conditions[0].status"));
        let node: KubeNode =
            serde_json::from_value(json!({"metadata": {"name": "Bad_Name"}})).unwrap();
        assert!(node_registration(&node)
            .unwrap_err()
            .starts_with("metadata.name"));
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
}
