//! An operator's write to a Node (`PATCH` as merge, strategic merge or JSON
//! patch, or `PUT`), turned into the fields operators own. Pure: the HTTP
//! handlers and the CLI on a stopped store both go through [`prepare`], then
//! through the controller's [`plan_edit`](crate::controller::operator::plan_edit).

use k8s_openapi::api::core::v1::Node as KubeNode;
use serde_json::Value;

use super::json_patch;
use super::patch::{self, PatchKind};
use crate::k8s::{self, ObjectError};
use crate::model::{Micros, Node, OperatorFields};
use crate::validation::{FieldError, Invalid};

/// How an operator's write arrives.
#[derive(Debug, Clone)]
pub enum NodeWrite {
    /// A `PATCH`, applied to the node as the API shows it.
    Patch { format: PatchFormat, body: Value },
    /// A `PUT` of the whole object.
    Replace(Box<KubeNode>),
}

/// The patch formats kube-apiserver takes for a Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchFormat {
    Merge,
    Strategic,
    Json,
}

impl PatchFormat {
    /// The format of a `Content-Type`, if it is one we apply.
    pub fn from_content_type(content_type: &str) -> Option<PatchFormat> {
        if content_type.split(';').next().unwrap_or("").trim() == "application/json-patch+json" {
            return Some(PatchFormat::Json);
        }
        match PatchKind::from_content_type(content_type)? {
            PatchKind::Merge => Some(PatchFormat::Merge),
            PatchKind::Strategic => Some(PatchFormat::Strategic),
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            PatchFormat::Merge => "application/merge-patch+json",
            PatchFormat::Strategic => "application/strategic-merge-patch+json",
            PatchFormat::Json => "application/json-patch+json",
        }
    }
}

/// A write made ready for the controller.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub fields: OperatorFields,
    /// The resourceVersion the write applies to, if it must.
    pub expected_version: Option<u64>,
    /// Whether that version is the writer's own precondition (a conflict is
    /// final) rather than the version the patch was applied to (a conflict
    /// means: apply it again to the newer node).
    pub writer_precondition: bool,
}

/// A write refused before it reaches the controller.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriteError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Conflict(String),
    /// A request kube-apiserver refuses as too large (413): a JSON patch of
    /// more than [`json_patch::MAX_OPERATIONS`] operations.
    #[error("{0}")]
    TooLarge(String),
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

impl From<ObjectError> for WriteError {
    fn from(e: ObjectError) -> Self {
        match e {
            ObjectError::BadRequest(m) => WriteError::BadRequest(m),
            ObjectError::Conflict(m) => WriteError::Conflict(m),
            ObjectError::Invalid(i) => WriteError::Invalid(i),
        }
    }
}

/// Strategic merge keys of a Node: conditions and addresses merge by type;
/// taints are atomic (`+listType=atomic` upstream), replaced whole.
fn node_merge_key(field: &str) -> Option<&'static str> {
    match field {
        "conditions" | "addresses" => Some("type"),
        _ => None,
    }
}

/// The status is the kubelet's and the controller's, whatever the patch format.
fn status_refused(name: &str) -> WriteError {
    WriteError::Invalid(Invalid {
        kind: "Node",
        name: name.to_string(),
        causes: vec![FieldError::forbidden(
            "status",
            "the status is decided by nodekeeper and pushed by kubelets to nodes/{name}/status; \
             it cannot be written here (conditions, addresses, capacity and node info alike)",
        )],
    })
}

/// Reads `write` against `node` as the API shows it (`heartbeat` as for
/// [`crate::k8s::node`]): the operator fields it asks for and the version
/// it applies to, or why it is refused.
pub fn prepare(
    node: &Node,
    heartbeat: Option<Micros>,
    write: &NodeWrite,
) -> Result<Prepared, WriteError> {
    match write {
        NodeWrite::Patch { format, body } => {
            let touches_status = match format {
                PatchFormat::Json => json_patch::touches(body, "status"),
                PatchFormat::Merge | PatchFormat::Strategic => {
                    if !body.is_object() {
                        return Err(WriteError::BadRequest(
                            "a merge patch for a Node is a JSON object".into(),
                        ));
                    }
                    body.get("status").is_some()
                }
            };
            if touches_status {
                return Err(status_refused(&node.name));
            }
            let mut current = serde_json::to_value(crate::k8s::NodeJson::shown(node, heartbeat))
                .map_err(|e| WriteError::BadRequest(e.to_string()))?;
            let applied = match format {
                PatchFormat::Merge => {
                    patch::merge_patch(&mut current, body);
                    Ok(())
                }
                PatchFormat::Strategic => {
                    patch::apply_with_keys(PatchKind::Strategic, &mut current, body, node_merge_key)
                        .map_err(|e| e.to_string())
                }
                PatchFormat::Json => match json_patch::apply(&mut current, body) {
                    // kube-apiserver's words (apiserver pkg/endpoints/handlers/patch.go:418-422).
                    Err(json_patch::JsonPatchError::TooManyOperations { count }) => {
                        return Err(WriteError::TooLarge(format!(
                            "The allowed maximum operations in a JSON patch is {}, got {count}",
                            json_patch::MAX_OPERATIONS
                        )))
                    }
                    applied => applied.map_err(|e| e.to_string()),
                },
            };
            applied.map_err(|e| {
                WriteError::Invalid(Invalid {
                    kind: "Node",
                    name: node.name.clone(),
                    causes: vec![FieldError {
                        field: "patch".into(),
                        reason: "FieldValueInvalid",
                        message: format!("the patch cannot be applied: {e}"),
                    }],
                })
            })?;
            let object: KubeNode = serde_json::from_value(current).map_err(|e| {
                WriteError::BadRequest(format!("the patched object is not a valid Node: {e}"))
            })?;
            // A resourceVersion the patch itself set is the writer's precondition.
            let version =
                k8s::expected_version(&object.metadata).map_err(WriteError::BadRequest)?;
            if version.is_some_and(|v| v != node.resource_version) {
                return Err(WriteError::Conflict(conflict_message(&node.name)));
            }
            let fields = k8s::operator_fields(node, &object, false)?;
            Ok(Prepared {
                fields,
                expected_version: Some(node.resource_version),
                writer_precondition: false,
            })
        }
        NodeWrite::Replace(object) => {
            let version =
                k8s::expected_version(&object.metadata).map_err(WriteError::BadRequest)?;
            if version.is_some_and(|v| v != node.resource_version) {
                return Err(WriteError::Conflict(conflict_message(&node.name)));
            }
            let fields = k8s::operator_fields(node, object, true)?;
            Ok(Prepared {
                fields,
                expected_version: version,
                writer_precondition: true,
            })
        }
    }
}

/// kube-apiserver's words for a stale write.
pub fn conflict_message(name: &str) -> String {
    format!(
        "Operation cannot be fulfilled on nodes {name:?}: the object has been modified; please \
         apply your changes to the latest version and try again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::tests::sample_node;
    use serde_json::json;

    fn patch(format: PatchFormat, body: Value) -> NodeWrite {
        NodeWrite::Patch { format, body }
    }

    #[test]
    fn a_cordon_in_every_format() {
        let node = sample_node();
        for write in [
            patch(
                PatchFormat::Strategic,
                json!({"spec": {"unschedulable": true}}),
            ),
            patch(PatchFormat::Merge, json!({"spec": {"unschedulable": true}})),
            patch(
                PatchFormat::Json,
                json!([{"op": "add", "path": "/spec/unschedulable", "value": true}]),
            ),
        ] {
            let p = prepare(&node, None, &write).unwrap();
            assert!(p.fields.unschedulable, "{write:?}");
            assert_eq!(p.expected_version, Some(node.resource_version));
            assert!(!p.writer_precondition);
        }
    }

    #[test]
    fn strategic_patches_replace_taints_whole() {
        // What `kubectl taint NODE k-` sends: the remaining list, not a merge.
        let mut node = sample_node();
        node.taints.push(crate::model::Taint {
            key: "gpu".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
            added: None,
        });
        let write = patch(
            PatchFormat::Strategic,
            json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}),
        );
        let p = prepare(&node, None, &write).unwrap();
        let keys: Vec<&str> = p.fields.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["k"]);
    }

    #[test]
    fn status_and_stale_versions_are_refused() {
        let node = sample_node();
        let e = prepare(
            &node,
            None,
            &patch(PatchFormat::Merge, json!({"status": {"conditions": []}})),
        )
        .unwrap_err();
        assert!(
            matches!(&e, WriteError::Invalid(i) if i.causes[0].field == "status"),
            "{e}"
        );
        let e = prepare(
            &node,
            None,
            &patch(
                PatchFormat::Json,
                json!([{"op": "remove", "path": "/status/conditions/0"}]),
            ),
        )
        .unwrap_err();
        assert!(matches!(e, WriteError::Invalid(_)));
        let stale = patch(
            PatchFormat::Merge,
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": true}}),
        );
        assert!(matches!(
            prepare(&node, None, &stale),
            Err(WriteError::Conflict(_))
        ));
        let mut object = crate::k8s::node(&node, None);
        object.metadata.resource_version = Some("2".into());
        assert!(matches!(
            prepare(&node, None, &NodeWrite::Replace(Box::new(object))),
            Err(WriteError::Conflict(_))
        ));
        let e = prepare(
            &node,
            None,
            &patch(
                PatchFormat::Json,
                json!([{"op": "test", "path": "/spec/unschedulable", "value": true}]),
            ),
        )
        .unwrap_err();
        assert!(matches!(e, WriteError::Invalid(_)), "a failed test op: {e}");
    }

    #[test]
    fn json_patches_are_bounded_as_kube_apiserver_bounds_them() {
        let node = sample_node();
        // apiserver pkg/endpoints/handlers/patch.go:418-422: a 413, not a 422.
        let many = vec![
            json!({"op": "test", "path": "/spec", "value": {}});
            json_patch::MAX_OPERATIONS + 1
        ];
        assert_eq!(
            prepare(&node, None, &patch(PatchFormat::Json, Value::Array(many))),
            Err(WriteError::TooLarge(
                "The allowed maximum operations in a JSON patch is 10000, got 10001".into()
            ))
        );
        let mut ops = vec![json!({"op": "add", "path": "/metadata/x", "value": "y".repeat(1000)})];
        ops.extend((0..1100).map(
            |i| json!({"op": "copy", "from": "/metadata/x", "path": format!("/metadata/c{i}")}),
        ));
        let e = prepare(&node, None, &patch(PatchFormat::Json, Value::Array(ops))).unwrap_err();
        assert!(
            matches!(&e, WriteError::Invalid(i) if i.causes[0].field == "patch"
                && i.causes[0].message.contains("copies would add")),
            "{e}"
        );
        // A patch may copy what a request may carry (as kube-apiserver's
        // JSONPatchMaxCopyBytes is its MaxRequestBodyBytes).
        assert_eq!(json_patch::MAX_COPIED_BYTES, super::super::BODY_LIMIT);
    }

    /// The bound leaves room for the node as the Kubernetes API shows it
    /// (defaults added, a name of the longest kind) within one request
    /// body, so any node can be sent back whole with a PUT.
    #[test]
    fn a_node_at_its_bound_can_be_put_back_whole() {
        let mut node = sample_node();
        let part = "n".repeat(63);
        node.name = format!("{part}.{part}.{part}.{}", "n".repeat(61));
        assert_eq!(node.name.len(), 253);
        // The smallest labels there are (`"5":""`): the most room per byte of
        // record. Added in rounds sized by the room left, then one by one.
        let mut i = 0;
        loop {
            let room = crate::validation::MAX_NODE_BYTES - crate::validation::node_bytes(&node);
            let round = room / 16;
            if round == 0 {
                break;
            }
            node.labels
                .extend((i..i + round).map(|k| (format!("{k:x}"), String::new())));
            i += round;
        }
        assert!(crate::validation::node_bytes(&node) > crate::validation::MAX_NODE_BYTES - 16);
        let object = crate::k8s::node(&node, Some(Micros(1)));
        let body = serde_json::to_vec(&object).unwrap();
        assert!(
            body.len() <= super::super::BODY_LIMIT,
            "{} bytes",
            body.len()
        );
        let p = prepare(&node, None, &NodeWrite::Replace(Box::new(object))).unwrap();
        assert_eq!(p.fields.labels, node.labels);
    }

    #[test]
    fn a_put_of_the_node_as_read_is_a_no_op_write() {
        let node = sample_node();
        let object = crate::k8s::node(&node, None);
        let p = prepare(&node, None, &NodeWrite::Replace(Box::new(object))).unwrap();
        assert_eq!(p.expected_version, Some(node.resource_version));
        assert!(crate::controller::operator::fold(&node, p.fields, Micros(1)).is_none());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            prop_oneof![
                Just("metadata".to_string()),
                Just("spec".to_string()),
                Just("labels".to_string()),
                Just("taints".to_string()),
                Just("unschedulable".to_string()),
                "[a-zA-Z/.$-]{0,8}",
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            let key = prop_oneof![
                Just("metadata".to_string()),
                Just("spec".to_string()),
                Just("labels".to_string()),
                Just("annotations".to_string()),
                Just("taints".to_string()),
                Just("key".to_string()),
                Just("effect".to_string()),
                Just("$patch".to_string()),
                "[a-z/.-]{1,6}",
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(key, inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any body in any patch format, against a node: a prepared write
        /// or a refusal, never a panic; what is accepted is within bounds.
        #[test]
        fn any_patch_is_prepared_or_refused(body in json_value(), format in 0..3u8) {
            let node = crate::store::records::tests::sample_node();
            let format = [PatchFormat::Merge, PatchFormat::Strategic, PatchFormat::Json][format as usize];
            if let Ok(p) = prepare(&node, None, &NodeWrite::Patch { format, body }) {
                prop_assert!(crate::validation::labels(&p.fields.labels).is_empty());
                prop_assert!(crate::validation::annotations(&p.fields.annotations).is_empty());
                prop_assert!(p.fields.taints.iter().all(|t| !crate::model::is_managed_taint(&t.key)));
            }
        }
    }
}
