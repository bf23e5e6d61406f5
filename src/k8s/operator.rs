//! What operators write to a Node (`kubectl edit`, `label`, `taint`,
//! `cordon`, a `PUT` or a patch): the fields they own, read from the object
//! and checked against the node it changes; what they may not change is
//! refused by name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node as KubeNode;

use super::{micros, HOSTNAME_LABEL, OS_LABEL, SOURCE_ANNOTATION};
use crate::model::validation::{self, FieldError, Invalid};
use crate::model::{is_managed_taint, Node, OperatorFields, Taint, MANAGED_TAINTS};

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
        (HOSTNAME_LABEL, node.name.clone()),
        (OS_LABEL, "linux".to_string()),
    ]
}

/// The fields an operator owns, read from the Node object they want
/// `current` to become, with what they may not change refused by name:
/// the source annotation, the controller's taints, providerID and
/// externalID, and (`check_conditions`, for a `PUT`) the conditions'
/// statuses. Other status fields are the kubelet's and are not taken from
/// here (as kube-apiserver keeps status on writes to the main resource).
///
/// Over 80 lines: one check per field, in the Node's order, each naming the
/// field it refuses.
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
    let source = annotations.remove(SOURCE_ANNOTATION);
    if source.as_deref() != Some(current.source.as_str()) {
        errors.push(FieldError::forbidden(
            format!("metadata.annotations[{}]", SOURCE_ANNOTATION),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Micros;
    use serde_json::{json, Value};

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
        serde_json::to_value(crate::k8s::node(node, None)).unwrap()
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
}
