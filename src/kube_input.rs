//! Kubernetes objects that clients send (node status, Nodes, Leases), read
//! into the domain: the other direction of [`crate::kube`]. What kubelets
//! push is bounded here (see [`crate::validation`]); what operators write is
//! checked against the node it changes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node as KubeNode, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use crate::model::{
    is_managed_taint, Address, AddressKind, Lease, Micros, Node, NodeInfo, NodeSpec,
    OperatorFields, PushedCondition, PushedStatus, Resources, Taint, MANAGED_TAINTS,
    NODE_LEASE_NAMESPACE, SELF_REGISTERED,
};
use crate::validation::{self, FieldError, Invalid};

fn micros(t: &jiff::Timestamp) -> Micros {
    Micros(t.as_microsecond())
}

/// The status a kubelet reports, from a Node object, within Kubernetes'
/// bounds: every refused field is named.
pub fn pushed_status(node: &KubeNode) -> Result<PushedStatus, Vec<FieldError>> {
    let Some(status) = &node.status else {
        return Ok(PushedStatus::default());
    };
    status_of(status)
}

fn status_of(status: &NodeStatus) -> Result<PushedStatus, Vec<FieldError>> {
    let mut errors = Vec::new();
    let given = status.conditions.as_deref().unwrap_or_default();
    let mut conditions = Vec::new();
    let mut types = BTreeSet::new();
    for (i, c) in given.iter().enumerate() {
        let reason = c.reason.as_deref().unwrap_or_default();
        let message = c.message.as_deref().unwrap_or_default();
        errors.extend(validation::condition(i, &c.type_, reason, message));
        if !c.type_.is_empty() && !types.insert(c.type_.as_str()) {
            errors.push(FieldError::duplicate(
                format!("status.conditions[{i}].type"),
                &c.type_,
            ));
        }
        let parsed = match c.status.parse() {
            Ok(status) => status,
            Err(_) => {
                errors.push(FieldError::not_supported(
                    format!("status.conditions[{i}].status"),
                    &c.status,
                    &["True", "False", "Unknown"],
                ));
                continue;
            }
        };
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
        Some(list) => {
            let found = validation::addresses(list.iter().map(|a| a.address.as_str()));
            let too_many = found.iter().any(|e| e.reason == "FieldValueTooMany");
            errors.extend(found);
            if too_many {
                return Err(errors);
            }
            let mut addresses = Vec::new();
            for (i, a) in list.iter().enumerate() {
                let kind = match a.type_.as_str() {
                    "InternalIP" => AddressKind::InternalIP,
                    "ExternalIP" => AddressKind::ExternalIP,
                    "Hostname" => AddressKind::Hostname,
                    "InternalDNS" => AddressKind::InternalDNS,
                    "ExternalDNS" => AddressKind::ExternalDNS,
                    other => {
                        errors.push(FieldError::not_supported(
                            format!("status.addresses[{i}].type"),
                            other,
                            &[
                                "InternalIP",
                                "ExternalIP",
                                "Hostname",
                                "InternalDNS",
                                "ExternalDNS",
                            ],
                        ));
                        continue;
                    }
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
            let cpu = cpu.unwrap_or_else(|e| {
                errors.push(FieldError::invalid(
                    "status.capacity.cpu",
                    &map["cpu"].0,
                    &e.to_string(),
                ));
                None
            });
            let memory = memory.unwrap_or_else(|e| {
                errors.push(FieldError::invalid(
                    "status.capacity.memory",
                    &map["memory"].0,
                    &e.to_string(),
                ));
                None
            });
            match (cpu, memory) {
                (Some(cpu_millis), Some(memory_bytes)) => Some(Resources {
                    cpu_millis,
                    memory_bytes,
                }),
                _ => None,
            }
        }
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(PushedStatus {
        conditions,
        addresses,
        node_info,
        capacity,
    })
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
        .map_err(|e| vec![FieldError::invalid("metadata.name", raw, &e)])?;
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

/// Why an operator's object cannot be taken as it is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ObjectError {
    /// Not a write to this node at all (a 400).
    #[error("{0}")]
    BadRequest(String),
    /// A precondition the object carries does not hold (a 409).
    #[error("{0}")]
    Conflict(String),
    /// Fields refused, each named (a 422).
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

/// The labels every node shows, set to these unless it sets them itself.
fn default_labels(node: &Node) -> [(&'static str, String); 2] {
    [
        (crate::kube::HOSTNAME_LABEL, node.name.clone()),
        (crate::kube::OS_LABEL, "linux".to_string()),
    ]
}

/// The fields an operator owns, read from the Node object they want
/// `current` to become, with what they may not change refused by name:
/// the source annotation, the controller's taints, providerID and
/// externalID, and (`check_conditions`, for a `PUT`) the conditions'
/// statuses. Other status fields are the kubelet's and are not taken from
/// here (as kube-apiserver keeps status on writes to the main resource).
pub fn operator_fields(
    current: &Node,
    object: &KubeNode,
    check_conditions: bool,
) -> Result<OperatorFields, ObjectError> {
    let meta = &object.metadata;
    if let Some(name) = meta.name.as_deref().filter(|n| *n != current.name) {
        return Err(ObjectError::BadRequest(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            current.name
        )));
    }
    if let Some(ns) = meta.namespace.as_deref().filter(|n| !n.is_empty()) {
        return Err(ObjectError::BadRequest(format!(
            "the namespace of the object ({ns}) does not match the namespace on the request: nodes are not namespaced"
        )));
    }
    if let Some(uid) = meta
        .uid
        .as_deref()
        .filter(|u| !u.is_empty() && *u != current.uid)
    {
        return Err(ObjectError::Conflict(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            current.uid
        )));
    }
    let mut errors = Vec::new();

    let mut labels = meta.labels.clone().unwrap_or_default();
    for (key, default) in default_labels(current) {
        match labels.get(key) {
            None => errors.push(FieldError::forbidden(
                format!("metadata.labels[{key}]"),
                "this well-known label is on every node (its default is the node's name or \
                 `linux`); set another value instead of removing it",
            )),
            Some(v) if *v == default && !current.labels.contains_key(key) => {
                // Still only the default: nothing to store.
                labels.remove(key);
            }
            Some(_) => {}
        }
    }
    errors.extend(validation::labels(&labels));

    let mut annotations = meta.annotations.clone().unwrap_or_default();
    let source = annotations.remove(crate::kube::SOURCE_ANNOTATION);
    if source.as_deref() != Some(current.source.as_str()) {
        errors.push(FieldError::forbidden(
            format!("metadata.annotations[{}]", crate::kube::SOURCE_ANNOTATION),
            &format!(
                "records where the node came from ({:?}) and is set by nodekeeper; leave it as it is",
                current.source
            ),
        ));
    }
    errors.extend(validation::annotations(&annotations));
    if meta.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
        errors.push(FieldError::forbidden(
            "metadata.finalizers",
            "nodekeeper deletes nodes at once and keeps no finalizers",
        ));
    }
    if meta
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty())
    {
        errors.push(FieldError::forbidden(
            "metadata.ownerReferences",
            "nodes are owned by nobody here",
        ));
    }

    let spec = object.spec.clone().unwrap_or_default();
    if spec.provider_id.as_deref().unwrap_or_default() != current.provider_id {
        errors.push(FieldError::forbidden(
            "spec.providerID",
            &format!(
                "set by the node's source ({:?}); leave it as it is",
                current.provider_id
            ),
        ));
    }
    if spec
        .external_id
        .as_deref()
        .is_some_and(|e| e != current.external_id)
    {
        errors.push(FieldError::forbidden(
            "spec.externalID",
            &format!(
                "set by the node's source ({:?}); leave it as it is",
                current.external_id
            ),
        ));
    }
    if spec.pod_cidr.as_deref().is_some_and(|c| !c.is_empty())
        || spec.pod_cidrs.as_ref().is_some_and(|c| !c.is_empty())
    {
        errors.push(FieldError::forbidden(
            "spec.podCIDR",
            "nodekeeper does not allocate or keep pod CIDRs",
        ));
    }

    let mut taints = Vec::new();
    for t in spec.taints.iter().flatten() {
        taints.push(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
            added: t.time_added.as_ref().map(|at| micros(&at.0)),
        });
    }
    errors.extend(validation::taints(&taints));
    let managed = |list: &[Taint]| {
        let mut ids: Vec<(String, String, String)> = list
            .iter()
            .filter(|t| is_managed_taint(&t.key))
            .map(|t| (t.key.clone(), t.value.clone(), t.effect.clone()))
            .collect();
        ids.sort();
        ids
    };
    if managed(&taints) != managed(&current.taints) {
        errors.push(FieldError::forbidden(
            "spec.taints",
            &format!(
                "the taints {} follow the node's conditions and its source, and only nodekeeper \
                 adds or removes them; leave them as they are (read the node again if it changed) \
                 and add or remove only your own taints",
                MANAGED_TAINTS.join(", ")
            ),
        ));
    }
    taints.retain(|t| !is_managed_taint(&t.key));

    if check_conditions {
        let given: BTreeMap<&str, &str> = object
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        let has: BTreeMap<&str, &str> = current
            .conditions
            .iter()
            .map(|c| (c.kind.as_str(), c.status.as_str()))
            .collect();
        let sent = object
            .status
            .as_ref()
            .is_some_and(|s| s.conditions.is_some());
        if sent && given != has {
            errors.push(conditions_forbidden());
        }
    }
    Invalid::check("Node", &current.name, errors)?;
    Ok(OperatorFields {
        labels,
        annotations,
        unschedulable: spec.unschedulable.unwrap_or(false),
        taints,
    })
}

/// Conditions are not written through the Node itself.
pub fn conditions_forbidden() -> FieldError {
    FieldError::forbidden(
        "status.conditions",
        "conditions are decided by nodekeeper from probes and from what kubelets push to \
         nodes/{name}/status; they cannot be written here",
    )
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

    fn current() -> Node {
        let mut n = crate::store::records::tests::sample_node();
        n.taints = vec![Taint {
            key: crate::model::TAINT_UNREACHABLE.into(),
            value: String::new(),
            effect: "NoSchedule".into(),
            added: Some(Micros(1_000_000)),
        }];
        n
    }

    fn as_object(node: &Node) -> Value {
        serde_json::to_value(crate::kube::node(node, None)).unwrap()
    }

    fn read(object: Value, check_conditions: bool) -> Result<OperatorFields, ObjectError> {
        let object: KubeNode = serde_json::from_value(object).unwrap();
        operator_fields(&current(), &object, check_conditions)
    }

    fn causes(e: ObjectError) -> Vec<String> {
        match e {
            ObjectError::Invalid(i) => i.causes.into_iter().map(|c| c.field).collect(),
            other => panic!("not Invalid: {other:?}"),
        }
    }

    #[test]
    fn the_node_as_served_gives_its_own_fields_back() {
        let f = read(as_object(&current()), true).unwrap();
        assert_eq!(f.labels, current().labels, "the defaults are not stored");
        assert!(f.annotations.is_empty());
        assert!(!f.unschedulable);
        assert!(
            f.taints.is_empty(),
            "the managed taint is not the operator's"
        );
    }

    #[test]
    fn operators_set_their_fields() {
        let mut o = as_object(&current());
        o["spec"]["unschedulable"] = json!(true);
        o["metadata"]["labels"]["maintenance"] = json!("true");
        o["metadata"]["annotations"]["example.com/ticket"] = json!("OPS-1");
        o["spec"]["taints"].as_array_mut().unwrap().insert(
            0,
            json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
        );
        let f = read(o, true).unwrap();
        assert!(f.unschedulable);
        assert_eq!(f.labels["maintenance"], "true");
        assert_eq!(f.annotations["example.com/ticket"], "OPS-1");
        assert_eq!(f.taints.len(), 1);
        assert_eq!(f.taints[0].value, "gpu");
    }

    #[test]
    fn controller_fields_are_refused_by_name() {
        let mut o = as_object(&current());
        o["spec"]["taints"] = json!([]);
        o["metadata"]["annotations"]["nodekeeper.io/source"] = json!("cloud/x");
        o["spec"]["providerID"] = json!("aws:///a/i-1");
        o["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("kubernetes.io/hostname");
        assert_eq!(
            causes(read(o, true).unwrap_err()),
            [
                "metadata.labels[kubernetes.io/hostname]",
                "metadata.annotations[nodekeeper.io/source]",
                "spec.providerID",
                "spec.taints"
            ]
        );
        let mut o = as_object(&current());
        o["status"]["conditions"][0]["status"] = json!("False");
        assert_eq!(
            causes(read(o.clone(), true).unwrap_err()),
            ["status.conditions"]
        );
        // A heartbeat time newer than ours is no write of a condition.
        o["status"]["conditions"][0]["status"] = json!("True");
        o["status"]["conditions"][0]["lastHeartbeatTime"] = json!("2030-01-01T00:00:00Z");
        assert!(read(o, true).is_ok());
        let mut o = as_object(&current());
        o["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}));
        assert_eq!(causes(read(o, true).unwrap_err()), ["spec.taints"]);
        let mut o = as_object(&current());
        o["metadata"]["labels"]["bad key"] = json!("x");
        o["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "a", "effect": "Never"}));
        assert_eq!(
            causes(read(o, true).unwrap_err()),
            ["metadata.labels", "spec.taints[1].effect"]
        );
    }

    #[test]
    fn names_and_uids_are_preconditions() {
        let mut o = as_object(&current());
        o["metadata"]["name"] = json!("other");
        assert!(matches!(read(o, true), Err(ObjectError::BadRequest(_))));
        let mut o = as_object(&current());
        o["metadata"]["uid"] = json!("someone-else");
        assert!(matches!(read(o, true), Err(ObjectError::Conflict(_))));
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
