//! What kubelets send of their nodes: a status update read into the
//! domain's [`PushedStatus`] within Kubernetes' bounds (see
//! [`crate::model::validation`]), and a registration (`POST /api/v1/nodes`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node as KubeNode, NodeStatus};

use super::micros;
use crate::model::validation::{self, FieldError};
use crate::model::{
    Address, AddressKind, AttachedVolume, Features, Image, NodeInfo, NodeSpec, PushedCondition,
    PushedStatus, Reported, Resources, RuntimeHandler, RuntimeHandlerFeatures, SELF_REGISTERED,
};

/// The status a kubelet reports, from a Node object, within Kubernetes'
/// bounds: every refused field is named.
pub fn pushed_status(node: &KubeNode) -> Result<PushedStatus, Vec<FieldError>> {
    match &node.status {
        Some(status) => status_of(status.clone()),
        None => Ok(PushedStatus::default()),
    }
}

/// [`pushed_status`] of a status the caller gives up: its strings are
/// moved into the pushed status, not copied (a heartbeat's conditions).
pub fn pushed_status_of(status: Option<NodeStatus>) -> Result<PushedStatus, Vec<FieldError>> {
    match status {
        Some(status) => status_of(status),
        None => Ok(PushedStatus::default()),
    }
}

/// The address types Kubernetes knows, in its order.
const ADDRESS_KINDS: [AddressKind; 5] = [
    AddressKind::InternalIP,
    AddressKind::ExternalIP,
    AddressKind::Hostname,
    AddressKind::InternalDNS,
    AddressKind::ExternalDNS,
];

/// Reads each field of a pushed status against its bound. Over 80 lines:
/// one check per field, each naming the field it refuses.
fn status_of(status: NodeStatus) -> Result<PushedStatus, Vec<FieldError>> {
    let mut errors = Vec::new();
    let given = status.conditions.unwrap_or_default();
    let mut statuses = Vec::with_capacity(given.len());
    for (i, c) in given.iter().enumerate() {
        let reason = c.reason.as_deref().unwrap_or_default();
        let message = c.message.as_deref().unwrap_or_default();
        errors.extend(validation::condition(i, &c.type_, reason, message));
        // The conditions are bounded (`check_condition_types`, and the
        // controller's bound on a node's): a scan finds a type given twice.
        if !c.type_.is_empty() && given[..i].iter().any(|o| o.type_ == c.type_) {
            errors.push(FieldError::duplicate(
                format!("status.conditions[{i}].type"),
                &c.type_,
            ));
        }
        match c.status.parse() {
            Ok(status) => statuses.push(status),
            Err(_) => errors.push(FieldError::not_supported(
                format!("status.conditions[{i}].status"),
                &c.status,
                &["True", "False", "Unknown"],
            )),
        }
    }
    // Read only when every condition was: their strings are moved, not copied.
    let conditions: Vec<PushedCondition> = if errors.is_empty() {
        given
            .into_iter()
            .zip(statuses)
            .map(|(c, status)| PushedCondition {
                kind: c.type_,
                status,
                last_heartbeat: c.last_heartbeat_time.as_ref().map(|t| micros(&t.0)),
                reason: c.reason.unwrap_or_default(),
                message: c.message.unwrap_or_default(),
            })
            .collect()
    } else {
        Vec::new()
    };
    let addresses = match &status.addresses {
        None => None,
        Some(list) => {
            let found = validation::addresses(list.iter().map(|a| a.address.as_str()));
            let too_many = found.iter().any(|e| e.reason == "FieldValueTooMany");
            errors.extend(found);
            if too_many {
                return Err(errors);
            }
            let mut addresses = Vec::new();
            for (i, a) in list.iter().enumerate() {
                let Some(kind) = ADDRESS_KINDS.into_iter().find(|k| k.as_str() == a.type_) else {
                    errors.push(FieldError::not_supported(
                        format!("status.addresses[{i}].type"),
                        &a.type_,
                        &ADDRESS_KINDS.map(AddressKind::as_str),
                    ));
                    continue;
                };
                addresses.push(Address {
                    kind,
                    address: a.address.clone(),
                });
            }
            Some(addresses)
        }
    };
    if let Some(i) = &status.node_info {
        for (name, value) in [
            ("machineID", &i.machine_id),
            ("systemUUID", &i.system_uuid),
            ("bootID", &i.boot_id),
            ("kernelVersion", &i.kernel_version),
            ("osImage", &i.os_image),
            ("containerRuntimeVersion", &i.container_runtime_version),
            ("kubeletVersion", &i.kubelet_version),
            ("kubeProxyVersion", &i.kube_proxy_version),
            ("operatingSystem", &i.operating_system),
            ("architecture", &i.architecture),
        ] {
            errors.extend(validation::node_info_field(name, value));
        }
    }
    let node_info = status.node_info.map(|i| NodeInfo {
        machine_id: i.machine_id,
        system_uuid: i.system_uuid,
        boot_id: i.boot_id,
        kernel_version: i.kernel_version,
        os_image: i.os_image,
        container_runtime_version: i.container_runtime_version,
        kubelet_version: i.kubelet_version,
        kube_proxy_version: i.kube_proxy_version,
        operating_system: i.operating_system,
        architecture: i.architecture,
    });
    let capacity = match &status.capacity {
        None => None,
        Some(map) => {
            use crate::model::quantity::{parse_cpu, parse_memory, QuantityError};
            let mut quantity = |name: &str, parse: fn(&str) -> Result<u64, QuantityError>| {
                let q = &map.get(name)?.0;
                parse(q)
                    .map_err(|e| {
                        let field = format!("status.capacity.{name}");
                        errors.push(FieldError::invalid(field, q, &e.to_string()))
                    })
                    .ok()
            };
            match (quantity("cpu", parse_cpu), quantity("memory", parse_memory)) {
                (Some(cpu_millis), Some(memory_bytes)) => Some(Resources {
                    cpu_millis,
                    memory_bytes,
                }),
                _ => None,
            }
        }
    };
    let reported = reported_of(
        status.images,
        status.daemon_endpoints,
        status.runtime_handlers,
        status.features,
        status.volumes_in_use,
        status.volumes_attached,
    );
    errors.extend(validation::reported(&reported));
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(PushedStatus {
        conditions,
        addresses,
        node_info,
        capacity,
        reported: Some(reported),
    })
}

/// The six `status` fields a kubelet reports that are kept as given.
fn reported_of(
    images: Option<Vec<k8s_openapi::api::core::v1::ContainerImage>>,
    daemon_endpoints: Option<k8s_openapi::api::core::v1::NodeDaemonEndpoints>,
    runtime_handlers: Option<Vec<k8s_openapi::api::core::v1::NodeRuntimeHandler>>,
    features: Option<k8s_openapi::api::core::v1::NodeFeatures>,
    volumes_in_use: Option<Vec<String>>,
    volumes_attached: Option<Vec<k8s_openapi::api::core::v1::AttachedVolume>>,
) -> Reported {
    Reported {
        images: images
            .unwrap_or_default()
            .into_iter()
            .map(|i| Image {
                names: i.names.unwrap_or_default(),
                size_bytes: i.size_bytes,
            })
            .collect(),
        kubelet_port: daemon_endpoints
            .and_then(|d| d.kubelet_endpoint)
            .map_or(0, |e| e.port),
        runtime_handlers: runtime_handlers
            .unwrap_or_default()
            .into_iter()
            .map(|h| RuntimeHandler {
                name: h.name.unwrap_or_default(),
                features: h.features.map(|f| RuntimeHandlerFeatures {
                    recursive_read_only_mounts: f.recursive_read_only_mounts,
                    user_namespaces: f.user_namespaces,
                }),
            })
            .collect(),
        features: features.map(|f| Features {
            supplemental_groups_policy: f.supplemental_groups_policy,
        }),
        volumes_in_use: volumes_in_use.unwrap_or_default(),
        volumes_attached: volumes_attached
            .unwrap_or_default()
            .into_iter()
            .map(|v| AttachedVolume {
                name: v.name,
                device_path: v.device_path,
            })
            .collect(),
    }
}

/// The per-node bound on condition types is the controller's; a whole
/// status (a `PUT`, a registration) past it on its own is refused here,
/// before its conditions are read one by one.
pub fn check_condition_types(node: &KubeNode) -> Result<(), FieldError> {
    let given = node
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten());
    validation::extra_conditions([], given.map(|c| c.type_.as_str()))
}

/// A node a kubelet registers (`POST /api/v1/nodes`): its spec and status.
pub fn node_registration(node: &KubeNode) -> Result<(NodeSpec, PushedStatus), Vec<FieldError>> {
    let raw = node.metadata.name.as_deref().unwrap_or_default();
    let name = crate::model::normalize_name(raw)
        .map_err(|e| vec![FieldError::invalid("metadata.name", raw, &e.to_string())])?;
    let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
    let mut errors = validation::labels(&labels);
    check_condition_types(node).map_err(|e| vec![e])?;
    let status = match pushed_status(node) {
        Ok(status) => status,
        Err(found) => {
            errors.extend(found);
            return Err(errors);
        }
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let spec = node.spec.clone().unwrap_or_default();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Micros;
    use serde_json::{json, Value};

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
        assert_eq!(
            pushed_status(&node).unwrap_err()[0].field,
            "status.conditions[0].status"
        );
        let node: KubeNode =
            serde_json::from_value(json!({"metadata": {"name": "Bad_Name"}})).unwrap();
        assert_eq!(
            node_registration(&node).unwrap_err()[0].field,
            "metadata.name"
        );
        let node: KubeNode =
            serde_json::from_value(json!({"metadata": {"name": "ok", "labels": {"bad key": "v"}}}))
                .unwrap();
        assert_eq!(
            node_registration(&node).unwrap_err()[0].field,
            "metadata.labels"
        );
    }

    #[test]
    fn pushed_statuses_are_bounded() {
        let conditions: Vec<Value> = (0..4000)
            .map(|i| json!({"type": format!("Made{i}"), "status": "True"}))
            .collect();
        let node: KubeNode =
            serde_json::from_value(json!({"status": {"conditions": conditions}})).unwrap();
        let e = check_condition_types(&node).unwrap_err();
        assert_eq!(e.reason, "FieldValueTooMany");
        let e = node_registration(&node).unwrap_err();
        assert_eq!(e.len(), 1, "one cause, not 4000");
        let node: KubeNode = serde_json::from_value(json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "has spaces", "message": "m".repeat(40_000)},
            {"type": "Ready", "status": "True"}
        ]}}))
        .unwrap();
        let fields: Vec<String> = pushed_status(&node)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "status.conditions[0].reason",
                "status.conditions[0].message",
                "status.conditions[1].type"
            ]
        );
        let node: KubeNode = serde_json::from_value(json!({"status": {
            "nodeInfo": {"osImage": "x".repeat(5000), "machineID": "", "systemUUID": "", "bootID": "",
                         "kernelVersion": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                         "kubeProxyVersion": "", "operatingSystem": "", "architecture": ""},
            "addresses": [{"type": "Elsewhere", "address": "a"}]
        }}))
        .unwrap();
        let fields: Vec<String> = pushed_status(&node)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            ["status.addresses[0].type", "status.nodeInfo.osImage"]
        );
    }
}
