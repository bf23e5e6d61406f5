//! An operator's write to a Node (`PATCH` as merge, strategic merge or JSON
//! patch, or `PUT`), turned into the fields operators own. Pure: the HTTP
//! handlers and the CLI on a stopped store both go through [`prepare`], then
//! through the controller's [`plan_edit`](crate::controller::operator::plan_edit).

use std::collections::BTreeMap;

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
            writers_version(node, &object)?;
            let fields = k8s::operator_fields(node, &object, false)?;
            Ok(Prepared {
                fields,
                expected_version: Some(node.resource_version),
                writer_precondition: false,
            })
        }
        NodeWrite::Replace(object) => Ok(Prepared {
            expected_version: writers_version(node, object)?,
            fields: k8s::operator_fields(node, object, true)?,
            writer_precondition: true,
        }),
    }
}

/// The resourceVersion `object` names, if any: a conflict unless it is the
/// node's.
fn writers_version(node: &Node, object: &KubeNode) -> Result<Option<u64>, WriteError> {
    let version = k8s::expected_version(&object.metadata).map_err(WriteError::BadRequest)?;
    if version.is_some_and(|v| v != node.resource_version) {
        return Err(WriteError::Conflict(conflict_message("nodes", &node.name)));
    }
    Ok(version)
}

/// kube-apiserver's words for a stale write of `resource` `name`.
pub fn conflict_message(resource: &str, name: &str) -> String {
    format!(
        "Operation cannot be fulfilled on {resource} {name:?}: the object has been modified; \
         please apply your changes to the latest version and try again"
    )
}

/// The labels NodeRestriction lets a kubelet set on its own Node
/// (`IsKubeletLabel`: kubernetes `staging/src/k8s.io/kubelet/pkg/apis/well_known_labels.go:35-48`,
/// the keys from `staging/src/k8s.io/api/core/v1/well_known_labels.go:20-46`).
const KUBELET_LABELS: [&str; 11] = [
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// The label namespaces (and their subdomains) a kubelet may set
/// (`kubeletLabelNamespaces`, `well_known_labels.go:50-53`).
const KUBELET_LABEL_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The namespace no node may set a label in (`LabelNamespaceNodeRestriction`,
/// `staging/src/k8s.io/api/core/v1/well_known_labels.go:58`).
const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";

/// The annotations a kubelet keeps on its own Node: the attach-detach
/// choice it registers with (kubernetes `pkg/kubelet/kubelet_node_status.go`
/// `reconcileCMADAnnotationWithExistingNode`; `pkg/volume/util/util.go:54`)
/// and its CSI drivers' node IDs (`pkg/volume/csi/nodeinfomanager/nodeinfomanager.go:49`).
const KUBELET_ANNOTATIONS: [&str; 2] = [
    "volumes.kubernetes.io/controller-managed-attach-detach",
    "csi.volume.kubernetes.io/nodeid",
];

/// The most labels, and annotations, a node may have after a kubelet's
/// write that adds some: past it the write is refused (422), as a kubelet
/// has a handful (its well-known labels, `--node-labels`, its CSI drivers'
/// topology) and operators more.
pub const MAX_LABELS_FROM_KUBELET: usize = 128;
pub const MAX_ANNOTATIONS_FROM_KUBELET: usize = 64;

/// A label key's namespace: its prefix before `/`, or empty.
fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(prefix, _)| prefix)
}

/// `namespace` is `domain` or a subdomain of it.
fn in_domain(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// `IsKubeletLabel` (`well_known_labels.go:67-79`).
pub fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|ns| in_domain(label_namespace(key), ns))
}

/// NodeRestriction's `getForbiddenLabels`
/// (`plugin/pkg/admission/noderestriction/admission.go:591-615`): of the
/// `modified` keys, those a node may not add, change or remove on its own
/// Node, sorted: any in `node-restriction.kubernetes.io`, and any other
/// `kubernetes.io` or `k8s.io` label that is not a kubelet label.
pub fn forbidden_labels<'a>(modified: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut forbidden: Vec<&str> = modified
        .into_iter()
        .filter(|key| {
            let ns = label_namespace(key);
            let kubernetes = in_domain(ns, "kubernetes.io") || in_domain(ns, "k8s.io");
            in_domain(ns, NODE_RESTRICTION_NAMESPACE) || (kubernetes && !is_kubelet_label(key))
        })
        .collect();
    forbidden.sort_unstable();
    forbidden.dedup();
    forbidden
}

/// NodeRestriction's refusal of a node registering with `labels`
/// (`admitNode` on create, `admission.go:509-513`), if it refuses.
pub fn registration_refusal(own: &str, labels: &BTreeMap<String, String>) -> Option<String> {
    let forbidden = forbidden_labels(labels.keys().map(String::as_str));
    (!forbidden.is_empty()).then(|| {
        format!(
            "node {own:?} is not allowed to set the following labels: {}",
            forbidden.join(", ")
        )
    })
}

/// The keys whose values differ between `a` and `b` (NodeRestriction's
/// `getModifiedLabels`, `admission.go:557-570`), sorted.
fn modified<'a>(a: &'a BTreeMap<String, String>, b: &'a BTreeMap<String, String>) -> Vec<&'a str> {
    let mut keys: Vec<&str> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .chain(b.iter().filter(|(k, v)| a.get(*k) != Some(*v)))
        .map(|(k, _)| k.as_str())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The metadata a kubelet's write leaves its node with.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletMetadata {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Why a key the write would change was kept as it is, one line a
    /// key: the answer's warnings.
    pub kept: Vec<String>,
}

/// A kubelet's metadata write refused.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataRefusal {
    /// NodeRestriction's 403, with its message.
    Forbidden(String),
    /// Past a bound: a 422 naming it.
    Invalid(Invalid),
}

/// The labels and annotations a write leaves, each `None` where it names none.
pub type Wanted<'a> = (
    Option<&'a BTreeMap<String, String>>,
    Option<&'a BTreeMap<String, String>>,
);

/// What a write through `nodes/NAME/status` (or a registration) may do to
/// the node's labels and annotations, from the metadata the node `shows`
/// to the metadata the write `wants` (`None`: the write names none).
///
/// - A node (`node_rules`) may not add, change or remove the labels
///   NodeRestriction forbids: 403 with its message (`admission.go:545-549`).
/// - Precedence. The kubelet's labels ([`is_kubelet_label`]) and its two
///   annotations ([`KUBELET_ANNOTATIONS`]) take the kubelet's value, as on
///   kube-apiserver (the kubelet sets them from the machine it runs on).
///   Any other label or annotation the write adds is kept; one the node
///   already has is kept as it is (an operator's, the source's, or one an
///   earlier write added), and `kept` says so.
/// - Bounds: a write that adds keys may not take the node past
///   [`MAX_LABELS_FROM_KUBELET`] labels or [`MAX_ANNOTATIONS_FROM_KUBELET`]
///   annotations (422 naming the bound); the sizes of keys and values are
///   the operator's bounds, checked when the result is taken as a write.
pub fn kubelet_metadata(
    name: &str,
    node_rules: bool,
    shows: (&BTreeMap<String, String>, &BTreeMap<String, String>),
    wants: Wanted<'_>,
) -> Result<KubeletMetadata, MetadataRefusal> {
    let (shown_labels, shown_annotations) = shows;
    let wanted_labels = wants.0.unwrap_or(shown_labels);
    let wanted_annotations = wants.1.unwrap_or(shown_annotations);
    let changed_labels = modified(wanted_labels, shown_labels);
    if node_rules {
        let forbidden = forbidden_labels(changed_labels.iter().copied());
        if !forbidden.is_empty() {
            return Err(MetadataRefusal::Forbidden(format!(
                "is not allowed to modify labels: {}",
                forbidden.join(", ")
            )));
        }
    }
    let mut kept = Vec::new();
    let mut settle = |kind: &str,
                      shown: &BTreeMap<String, String>,
                      wanted: &BTreeMap<String, String>,
                      keys: Vec<&str>,
                      kubelets: &dyn Fn(&str) -> bool| {
        let mut result = shown.clone();
        for key in keys {
            match (shown.get(key), wanted.get(key)) {
                (Some(value), _) if !kubelets(key) => kept.push(format!(
                    "{kind} {key:?} is kept as {value:?}: a kubelet may add it, but its value on \
                     the node is not the kubelet's to change (change it with kubectl {})",
                    if kind == "label" { "label" } else { "annotate" }
                )),
                (_, Some(value)) => {
                    result.insert(key.to_string(), value.clone());
                }
                (_, None) => {
                    result.remove(key);
                }
            }
        }
        result
    };
    let labels = settle(
        "label",
        shown_labels,
        wanted_labels,
        changed_labels,
        &is_kubelet_label,
    );
    let annotations = settle(
        "annotation",
        shown_annotations,
        wanted_annotations,
        modified(wanted_annotations, shown_annotations),
        &|key: &str| KUBELET_ANNOTATIONS.contains(&key),
    );
    let bound = |field: &str, count: usize, shown: usize, most: usize| {
        (count > shown && count > most).then(|| {
            FieldError::too_many(
                field,
                count,
                most,
                " when a kubelet adds some (nodekeeper's bound on a kubelet's own metadata)",
            )
        })
    };
    let causes: Vec<FieldError> = [
        bound(
            "metadata.labels",
            labels.len(),
            shown_labels.len(),
            MAX_LABELS_FROM_KUBELET,
        ),
        bound(
            "metadata.annotations",
            annotations.len(),
            shown_annotations.len(),
            MAX_ANNOTATIONS_FROM_KUBELET,
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !causes.is_empty() {
        return Err(MetadataRefusal::Invalid(Invalid {
            kind: "Node",
            name: name.to_string(),
            causes,
        }));
    }
    Ok(KubeletMetadata {
        labels,
        annotations,
        kept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::tests::sample_node;
    use serde_json::json;

    fn patch(format: PatchFormat, body: Value) -> NodeWrite {
        NodeWrite::Patch { format, body }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// NodeRestriction's label rules, as upstream's own cases word them
    /// (kubernetes `plugin/pkg/admission/noderestriction/admission.go:591-615`,
    /// `staging/src/k8s.io/kubelet/pkg/apis/well_known_labels.go:67-79`).
    #[test]
    fn noderestriction_forbids_the_labels_upstream_forbids() {
        for allowed in [
            "kubernetes.io/hostname",
            "kubernetes.io/arch",
            "beta.kubernetes.io/os",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/anything",
            "foo.node.kubernetes.io/x",
            "kubelet.kubernetes.io/x",
            "example.com/team",
            "topology.ebs.csi.aws.com/zone",
            "plain",
            // Not a subdomain of kubernetes.io: not a Kubernetes label.
            "notkubernetes.io/x",
        ] {
            assert!(forbidden_labels([allowed]).is_empty(), "{allowed}");
        }
        for forbidden in [
            "node-restriction.kubernetes.io/trusted",
            "foo.node-restriction.kubernetes.io/x",
            "kubernetes.io/role",
            "node-role.kubernetes.io/control-plane",
            "k8s.io/x",
            "foo.k8s.io/x",
        ] {
            assert_eq!(forbidden_labels([forbidden]), [forbidden], "{forbidden}");
        }
        assert_eq!(
            registration_refusal(
                "a",
                &map(&[
                    ("k8s.io/b", ""),
                    ("kubernetes.io/os", "linux"),
                    ("k8s.io/a", "")
                ])
            )
            .as_deref(),
            Some(r#"node "a" is not allowed to set the following labels: k8s.io/a, k8s.io/b"#)
        );
    }

    #[test]
    fn a_kubelet_adds_keys_sets_its_own_and_keeps_others() {
        let shown_labels = map(&[
            ("kubernetes.io/hostname", "a"),
            ("kubernetes.io/arch", "arm64"),
            ("team", "blue"),
            ("node-role.kubernetes.io/edge", ""),
        ]);
        let shown_annotations = map(&[("nodekeeper.io/source", "static"), ("owner", "ops")]);
        let mut labels = shown_labels.clone();
        labels.insert("kubernetes.io/arch".into(), "amd64".into());
        labels.insert("team".into(), "red".into());
        labels.insert("topology.hostpath.csi/node".into(), "a".into());
        let mut annotations = shown_annotations.clone();
        annotations.remove("owner");
        annotations.insert(
            "csi.volume.kubernetes.io/nodeid".into(),
            r#"{"d":"a"}"#.into(),
        );
        let got = kubelet_metadata(
            "a",
            true,
            (&shown_labels, &shown_annotations),
            (Some(&labels), Some(&annotations)),
        )
        .unwrap();
        assert_eq!(got.labels["kubernetes.io/arch"], "amd64");
        assert_eq!(got.labels["team"], "blue");
        assert_eq!(got.labels["topology.hostpath.csi/node"], "a");
        assert_eq!(got.annotations["owner"], "ops");
        assert_eq!(
            got.annotations["csi.volume.kubernetes.io/nodeid"],
            r#"{"d":"a"}"#
        );
        assert_eq!(got.kept.len(), 2, "{:?}", got.kept);
        assert!(
            got.kept[0].starts_with(r#"label "team" is kept as "blue""#),
            "{:?}",
            got.kept
        );

        // Removing a forbidden label is modifying it: NodeRestriction's 403.
        let mut without = shown_labels.clone();
        without.remove("node-role.kubernetes.io/edge");
        assert_eq!(
            kubelet_metadata(
                "a",
                true,
                (&shown_labels, &shown_annotations),
                (Some(&without), None)
            ),
            Err(MetadataRefusal::Forbidden(
                "is not allowed to modify labels: node-role.kubernetes.io/edge".into()
            ))
        );
        // Not a node (an anonymous kubelet): precedence, no 403.
        let got = kubelet_metadata(
            "a",
            false,
            (&shown_labels, &shown_annotations),
            (Some(&without), None),
        )
        .unwrap();
        assert_eq!(got.labels, shown_labels);
    }

    #[test]
    fn a_kubelet_may_not_add_past_the_bounds() {
        let none = BTreeMap::new();
        let many: BTreeMap<String, String> = (0..=MAX_LABELS_FROM_KUBELET)
            .map(|i| (format!("l{i}"), String::new()))
            .collect();
        let Err(MetadataRefusal::Invalid(i)) =
            kubelet_metadata("a", true, (&none, &none), (Some(&many), None))
        else {
            panic!("past the bound")
        };
        assert_eq!(i.causes[0].field, "metadata.labels");
        assert!(
            i.causes[0].message.contains("at most 128"),
            "{}",
            i.causes[0].message
        );
        let many: BTreeMap<String, String> = (0..=MAX_ANNOTATIONS_FROM_KUBELET)
            .map(|i| (format!("a{i}"), String::new()))
            .collect();
        let Err(MetadataRefusal::Invalid(i)) =
            kubelet_metadata("a", true, (&none, &none), (None, Some(&many)))
        else {
            panic!("past the bound")
        };
        assert_eq!(i.causes[0].field, "metadata.annotations");
        // A node already past it (an operator's labels) is not refused
        // writes that add nothing.
        let labels: BTreeMap<String, String> =
            (0..200).map(|i| (format!("l{i}"), String::new())).collect();
        assert!(kubelet_metadata("a", true, (&labels, &none), (Some(&labels), None)).is_ok());
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
