//! Server-side printing: the `meta.k8s.io/v1` `Table` kubectl asks `get` for.
//!
//! kube-apiserver renders rows with its own node printer (always with the
//! wide columns; kubectl hides priority-1 columns unless `-o wide`), so the
//! columns and cells here are that printer's.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use serde::Serialize;
use serde_json::{json, Value};

use crate::model::{self, AddressKind, ConditionStatus, Micros};

const TABLE_GROUP: &str = "meta.k8s.io";
/// Labels kubectl reads a node's roles from.
const ROLE_LABEL_PREFIX: &str = "node-role.kubernetes.io/";
const LEGACY_ROLE_LABEL: &str = "kubernetes.io/role";
const TABLE_VERSION: &str = "v1";

/// Whether an `Accept` header prefers a `meta.k8s.io/v1` Table over plain
/// JSON. Media ranges are taken by `q` (highest first, ties in the client's
/// order) and the first one we can serve decides; ranges we cannot serve
/// (protobuf, YAML, the v1beta1 Table) are passed over.
pub fn wants_table(accept: &str) -> bool {
    let mut ranges: Vec<(f32, MediaRange)> = accept
        .split(',')
        .filter_map(MediaRange::parse)
        .filter(|(q, _)| *q > 0.0)
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, range) in ranges {
        if !range.is_json() {
            continue;
        }
        match range.param("as") {
            None => return false,
            Some("Table")
                if range.param("g") == Some(TABLE_GROUP)
                    && range.param("v") == Some(TABLE_VERSION) =>
            {
                return true
            }
            Some(_) => continue,
        }
    }
    false
}

/// One entry of an `Accept` header: `type/subtype;key=value;...`.
struct MediaRange {
    essence: String,
    params: Vec<(String, String)>,
}

impl MediaRange {
    fn parse(s: &str) -> Option<(f32, MediaRange)> {
        let mut parts = s.split(';');
        let essence = parts.next()?.trim().to_ascii_lowercase();
        if essence.is_empty() {
            return None;
        }
        let mut q = 1.0;
        let mut params = Vec::new();
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim().trim_matches('"'));
            if k.eq_ignore_ascii_case("q") {
                q = v.parse().unwrap_or(0.0);
            } else {
                params.push((k.to_string(), v.to_string()));
            }
        }
        Some((q, MediaRange { essence, params }))
    }

    fn is_json(&self) -> bool {
        matches!(
            self.essence.as_str(),
            "application/json" | "application/*" | "*/*"
        )
    }

    fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// What each row carries besides its cells (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    /// A `PartialObjectMetadata`: what kubectl needs for `--show-labels`, `-L`.
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    /// The query parameter; absent or empty is `Metadata`, as in the API server.
    pub fn parse(value: Option<&str>) -> Result<IncludeObject, UnknownIncludeObject> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(UnknownIncludeObject(other.into())),
        }
    }
}

/// An `includeObject` value that is none of `None`, `Metadata`, `Object`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unrecognized includeObject value: {0:?}")]
pub struct UnknownIncludeObject(pub String);

/// A `meta.k8s.io/v1` Table.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Table {
    kind: &'static str,
    api_version: &'static str,
    metadata: ListMeta,
    column_definitions: Vec<Column>,
    rows: Vec<Row>,
}

impl Table {
    fn new(metadata: ListMeta, column_definitions: Vec<Column>, rows: Vec<Row>) -> Table {
        Table {
            kind: "Table",
            api_version: "meta.k8s.io/v1",
            metadata,
            column_definitions,
            rows,
        }
    }
}

/// Go serializes every field of a column definition, zero values included.
#[derive(Debug, Serialize)]
struct Column {
    name: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i32,
}

/// A printer's column: every one nodekeeper serves is a string.
fn column(
    name: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i32,
) -> Column {
    Column {
        name,
        kind: "string",
        format,
        description,
        priority,
    }
}

#[derive(Debug, Serialize)]
struct Row {
    cells: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<Value>,
}

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const ADDRESSES_DOC: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";

/// The node printer's columns, in its order.
fn node_columns() -> Vec<Column> {
    vec![
        column("Name", "name", NAME_DOC, 0),
        column("Status", "", "The status of the node", 0),
        column("Roles", "", "The roles of the node", 0),
        column("Age", "", CREATION_DOC, 0),
        column("Version", "", "Kubelet Version reported by the node.", 0),
        column("Internal-IP", "", ADDRESSES_DOC, 1),
        column("External-IP", "", ADDRESSES_DOC, 1),
        column(
            "OS-Image",
            "",
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            1,
        ),
        column(
            "Kernel-Version",
            "",
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            1,
        ),
        column(
            "Container-Runtime",
            "",
            "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            1,
        ),
    ]
}

/// Nodes (with their newest heartbeats) as a Table. `metadata` is the list's
/// (resourceVersion, continue, remainingItemCount) or, for one node, its
/// resourceVersion. Ages are computed here, at `now`, as the API server does.
pub fn node_table(
    nodes: &[(model::Node, Option<Micros>)],
    metadata: ListMeta,
    include: IncludeObject,
    now: Micros,
) -> Table {
    let rows = nodes
        .iter()
        .map(|(node, beat)| {
            let k = crate::k8s::node(node, *beat);
            Row {
                cells: node_cells(node, now).into_iter().map(Value::from).collect(),
                object: row_object(include, &k.metadata, || serde_json::to_value(&k).ok()),
            }
        })
        .collect();
    Table::new(metadata, node_columns(), rows)
}

/// The pod printer's columns, in its order (kubernetes
/// `pkg/printers/internalversion/printers.go` `podColumnDefinitions`).
fn pod_columns() -> Vec<Column> {
    vec![
        column("Name", "name", NAME_DOC, 0),
        column("Ready", "", "The aggregate readiness state of this pod for accepting traffic.", 0),
        column("Status", "", "The aggregate status of the containers in this pod.", 0),
        column("Restarts", "", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
        column("Age", "", CREATION_DOC, 0),
        column("IP", "", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1),
        column("Node", "", "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename", 1),
        column("Nominated Node", "", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.", 1),
        column("Readiness Gates", "", "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates", 1),
    ]
}

/// Pods (their Kubernetes JSON) as a Table, like [`node_table`].
pub fn pod_table(pods: &[Value], metadata: ListMeta, include: IncludeObject, now: Micros) -> Table {
    let rows = pods
        .iter()
        .map(|pod| {
            let meta: ObjectMeta =
                serde_json::from_value(pod["metadata"].clone()).unwrap_or_default();
            Row {
                cells: super::pod::pod_cells(pod, now),
                object: row_object(include, &meta, || Some(pod.clone())),
            }
        })
        .collect();
    Table::new(metadata, pod_columns(), rows)
}

/// What a row carries: nothing, a `PartialObjectMetadata`, or the object.
fn row_object(
    include: IncludeObject,
    metadata: &ObjectMeta,
    object: impl FnOnce() -> Option<Value>,
) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
        })),
        IncludeObject::Object => object(),
    }
}

/// CertificateSigningRequests as a Table, as kube-apiserver prints them
/// (kubernetes `pkg/printers/internalversion/printers.go`
/// `printCertificateSigningRequest`): Name, Age, SignerName, Requestor,
/// RequestedDuration, Condition.
pub fn csr_table(
    csrs: &[(
        k8s_openapi::api::certificates::v1::CertificateSigningRequest,
        Value,
    )],
    metadata: ListMeta,
    include: IncludeObject,
    now: Micros,
) -> Table {
    let rows = csrs
        .iter()
        .map(|(csr, served)| {
            let age = age_at(
                csr.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| super::micros(&t.0)),
                now,
            );
            let duration = csr.spec.expiration_seconds.map_or_else(
                || "<none>".to_string(),
                |s| crate::model::duration::age(std::time::Duration::from_secs(s.max(0) as u64)),
            );
            Row {
                cells: vec![
                    Value::from(csr.metadata.name.clone().unwrap_or_default()),
                    Value::from(age),
                    Value::from(csr.spec.signer_name.clone()),
                    Value::from(csr.spec.username.clone().unwrap_or_default()),
                    Value::from(duration),
                    Value::from(csr_condition(csr)),
                ],
                object: row_object(include, &csr.metadata, || Some(served.clone())),
            }
        })
        .collect();
    let columns = vec![
        column("Name", "name", NAME_DOC, 0),
        column("Age", "", CREATION_DOC, 0),
        column("SignerName", "", "Requested signer", 0),
        column("Requestor", "", "Request originator", 0),
        column("RequestedDuration", "", "Requested certificate duration", 0),
        column("Condition", "", "Current condition of the request", 0),
    ];
    Table::new(metadata, columns, rows)
}

/// `Approved,Issued`, `Denied`, `Pending`… (printers.go `extractCSRStatus`).
fn csr_condition(csr: &k8s_openapi::api::certificates::v1::CertificateSigningRequest) -> String {
    let status = csr.status.as_ref();
    let has = |t: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == t))
    };
    let mut parts: Vec<&str> = ["Approved", "Denied", "Failed"]
        .into_iter()
        .filter(|t| has(t))
        .collect();
    if parts.is_empty() {
        parts.push("Pending");
    }
    if status
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
    {
        parts.push("Issued");
    }
    parts.join(",")
}

/// The event printer's columns, in its order.
fn event_columns() -> Vec<Column> {
    vec![
        column("Last Seen", "", "The time at which the most recent occurrence of this event was recorded.", 0),
        column("Type", "", "Type of this event (Normal, Warning), new types could be added in the future", 0),
        column("Reason", "", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", 0),
        column("Object", "", "The object that this event is about.", 0),
        column("Subobject", "", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.", 1),
        column("Source", "", "The component reporting this event. Should be a short machine understandable string.", 1),
        column("Message", "", "A human-readable description of the status of this operation.", 0),
        column("First Seen", "", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", 1),
        column("Count", "", "The number of times this event has occurred.", 1),
        column("Name", "name", NAME_DOC, 1),
    ]
}

/// Events as a Table (`kubectl get events`), like [`node_table`].
pub fn event_table(
    events: &[Event],
    metadata: ListMeta,
    include: IncludeObject,
    now: Micros,
) -> Table {
    let rows = events.iter().map(|e| event_row(e, include, now)).collect();
    Table::new(metadata, event_columns(), rows)
}

/// The start of an event Table streamed a row at a time (a list read from
/// the history), up to its first row: [`event_table_row`] writes the rows,
/// [`super::list_tail`] the end with the list's metadata.
pub fn event_table_head() -> Vec<u8> {
    let columns = serde_json::to_value(event_columns()).unwrap_or_default();
    format!(
        r#"{{"kind":"Table","apiVersion":"meta.k8s.io/v1","columnDefinitions":{columns},"rows":["#
    )
    .into_bytes()
}

/// One row of a streamed event Table (see [`event_table_head`]).
pub fn event_table_row(event: &Event, include: IncludeObject, now: Micros) -> Option<Vec<u8>> {
    serde_json::to_vec(&event_row(event, include, now)).ok()
}

fn event_row(e: &Event, include: IncludeObject, now: Micros) -> Row {
    Row {
        cells: event_cells(e, now),
        object: row_object(include, &e.metadata, || serde_json::to_value(e).ok()),
    }
}

/// How long before `now` a time was, as the printers show an age;
/// `<unknown>` without one.
pub(super) fn age_at(t: Option<Micros>, now: Micros) -> String {
    match t {
        Some(t) => crate::model::duration::age(now.since(t)),
        None => "<unknown>".to_string(),
    }
}

/// One row of the event printer (`printEvent`), wide as the API server renders it.
fn event_cells(e: &Event, now: Micros) -> Vec<Value> {
    let first = e
        .first_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0));
    let first = age_at(first.as_ref().map(super::micros), now);
    let last = match &e.last_timestamp {
        Some(t) => age_at(Some(super::micros(&t.0)), now),
        None => first.clone(),
    };
    let o = &e.involved_object;
    let kind = o.kind.as_deref().unwrap_or("").to_lowercase();
    let target = match o.name.as_deref() {
        Some(name) if !name.is_empty() => format!("{kind}/{name}"),
        _ => kind,
    };
    let source = e.source.as_ref();
    let component = source
        .and_then(|s| s.component.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| e.reporting_component.clone())
        .unwrap_or_default();
    let source = match source.and_then(|s| s.host.as_deref()) {
        Some(host) if !host.is_empty() => format!("{component}, {host}"),
        _ => component,
    };
    vec![
        Value::from(last),
        Value::from(e.type_.clone().unwrap_or_default()),
        Value::from(e.reason.clone().unwrap_or_default()),
        Value::from(target),
        Value::from(o.field_path.clone().unwrap_or_default()),
        Value::from(source),
        Value::from(e.message.as_deref().unwrap_or("").trim()),
        Value::from(first),
        // A count, as a JSON number.
        Value::from(e.count.filter(|&c| c > 0).unwrap_or(1)),
        Value::from(e.metadata.name.clone().unwrap_or_default()),
    ]
}

/// One row of the node printer (`printNode` in kubernetes/pkg/printers/internalversion).
fn node_cells(node: &model::Node, now: Micros) -> Vec<String> {
    let or = |value: &str, fallback: &str| {
        if value.is_empty() {
            fallback.to_string()
        } else {
            value.to_string()
        }
    };
    let address = |kind| {
        node.addresses
            .iter()
            .find(|a| a.kind == kind)
            .map_or_else(|| "<none>".to_string(), |a| a.address.clone())
    };
    let info = &node.node_info;
    // The age counts from the creation time as served, truncated to the second.
    let created = Micros(node.created.0.div_euclid(1_000_000) * 1_000_000);
    vec![
        node.name.clone(),
        node_status(node),
        roles(node).unwrap_or_else(|| "<none>".to_string()),
        crate::model::duration::age(now.since(created)),
        // The printer shows the kubelet version as it is, empty until reported.
        info.kubelet_version.clone(),
        address(AddressKind::InternalIP),
        address(AddressKind::ExternalIP),
        or(&info.os_image, "<unknown>"),
        or(&info.kernel_version, "<unknown>"),
        or(&info.container_runtime_version, "<unknown>"),
    ]
}

/// kubectl's STATUS column: the Ready condition, plus `SchedulingDisabled`.
/// Also `nodekeeper get`'s (in `output`), so the two never differ.
pub(crate) fn node_status(node: &model::Node) -> String {
    // As kubectl prints it: any Ready status but True is NotReady.
    let ready = match node.condition(model::READY).map(|c| c.status) {
        Some(ConditionStatus::True) => "Ready",
        Some(ConditionStatus::False | ConditionStatus::Unknown) => "NotReady",
        None => "Unknown",
    };
    if node.unschedulable {
        format!("{ready},SchedulingDisabled")
    } else {
        ready.to_string()
    }
}

/// Roles as kubectl finds them: `node-role.kubernetes.io/<role>` label keys
/// and the legacy `kubernetes.io/role` value, sorted, comma-joined. Shared
/// with `nodekeeper get` and `describe` (in `output`).
pub(crate) fn roles(node: &model::Node) -> Option<String> {
    let mut roles = BTreeSet::new();
    for (k, v) in &node.labels {
        if let Some(role) = k.strip_prefix(ROLE_LABEL_PREFIX) {
            if !role.is_empty() {
                roles.insert(role);
            }
        } else if k == LEGACY_ROLE_LABEL && !v.is_empty() {
            roles.insert(v.as_str());
        }
    }
    (!roles.is_empty()).then(|| roles.into_iter().collect::<Vec<_>>().join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Address, Condition, ConditionStatus, NodeInfo, Resources};
    use std::collections::BTreeMap;

    const KUBECTL_GET: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    #[test]
    fn accept_negotiation() {
        assert!(wants_table(KUBECTL_GET));
        assert!(!wants_table("application/json"));
        assert!(!wants_table(""));
        assert!(!wants_table("*/*"));
        // Only the v1beta1 Table, which we do not serve: plain JSON.
        assert!(!wants_table(
            "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        // The client's order decides between equal q values.
        assert!(!wants_table(
            "application/json, application/json;as=Table;v=v1;g=meta.k8s.io"
        ));
        // q moves the Table ahead, or drops it.
        assert!(wants_table(
            "application/json;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io"
        ));
        assert!(!wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io;q=0, application/json"
        ));
        // Spaces and case in the media type, protobuf passed over.
        assert!(wants_table(
            "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, Application/JSON ; as=Table ; g=meta.k8s.io ; v=v1"
        ));
        // PartialObjectMetadata lists are not served: skipped, then plain JSON.
        assert!(!wants_table(
            "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
        ));
    }

    #[test]
    fn include_object_values() {
        assert_eq!(IncludeObject::parse(None), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::parse(Some("")), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::parse(Some("None")), Ok(IncludeObject::None));
        assert_eq!(
            IncludeObject::parse(Some("Object")),
            Ok(IncludeObject::Object)
        );
        assert_eq!(
            IncludeObject::parse(Some("all")).unwrap_err().to_string(),
            "unrecognized includeObject value: \"all\""
        );
    }

    fn at(s: &str) -> Micros {
        Micros::parse_rfc3339(s).expect("test time")
    }

    fn sample() -> model::Node {
        model::Node {
            name: "edge-1".into(),
            uid: "uid-1".into(),
            created: Micros(at("2026-11-30T11:54:57Z").0 + 900_000),
            resource_version: 7,
            source: "static".into(),
            labels: BTreeMap::from([("node-role.kubernetes.io/edge".into(), "".into())]),
            annotations: BTreeMap::new(),
            external_id: String::new(),
            provider_id: String::new(),
            capacity: Resources::default(),
            unschedulable: true,
            taints: vec![],
            addresses: vec![Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.5".into(),
            }],
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: ConditionStatus::True,
                last_heartbeat: at("2026-11-30T11:59:00Z"),
                last_transition: at("2026-11-30T11:55:00Z"),
                reason: "KubeletReady".into(),
                message: String::new(),
            }],
            node_info: NodeInfo {
                kubelet_version: "v1.33.1".into(),
                kernel_version: "6.1.0".into(),
                ..NodeInfo::default()
            },
            reported: Default::default(),
        }
    }

    #[test]
    fn node_table_json_shape() {
        let meta = ListMeta {
            resource_version: Some("12".into()),
            ..ListMeta::default()
        };
        let now = at("2026-11-30T12:00:00Z");
        let table = node_table(&[(sample(), None)], meta, IncludeObject::Metadata, now);
        let v = serde_json::to_value(&table).unwrap();
        assert_eq!(v["kind"], "Table");
        assert_eq!(v["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(v["metadata"], json!({"resourceVersion": "12"}));
        let names: Vec<&str> = v["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Status",
                "Roles",
                "Age",
                "Version",
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime"
            ]
        );
        let first = &v["columnDefinitions"][0];
        assert_eq!(first["type"], "string");
        assert_eq!(first["format"], "name");
        assert_eq!(first["priority"], 0);
        assert_eq!(v["columnDefinitions"][5]["priority"], 1);
        assert_eq!(v["columnDefinitions"][1]["format"], "");

        let row = &v["rows"][0];
        assert_eq!(
            row["cells"],
            json!([
                "edge-1",
                "Ready,SchedulingDisabled",
                "edge",
                // 5m3s from the second the node was created.
                "5m3s",
                "v1.33.1",
                "10.0.0.5",
                "<none>",
                "<unknown>",
                "6.1.0",
                "<unknown>"
            ])
        );
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(row["object"]["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(row["object"]["metadata"]["name"], "edge-1");
        assert_eq!(
            row["object"]["metadata"]["labels"]["kubernetes.io/hostname"],
            "edge-1"
        );
        assert!(row["object"].get("spec").is_none());
    }

    #[test]
    fn rows_carry_what_include_object_asks() {
        let now = at("2026-11-30T12:00:00Z");
        let one = [(sample(), None)];
        let v = serde_json::to_value(node_table(
            &one,
            ListMeta::default(),
            IncludeObject::Object,
            now,
        ))
        .unwrap();
        assert_eq!(v["rows"][0]["object"]["kind"], "Node");
        assert_eq!(v["rows"][0]["object"]["spec"]["unschedulable"], true);
        let v = serde_json::to_value(node_table(
            &one,
            ListMeta::default(),
            IncludeObject::None,
            now,
        ))
        .unwrap();
        assert!(v["rows"][0].get("object").is_none());
        assert_eq!(v["metadata"], json!({}));
    }

    #[test]
    fn a_streamed_event_table_is_the_whole_one() {
        let event = |seq| {
            let e = model::Event {
                seq,
                time: at("2026-11-30T11:58:00Z"),
                node: Some("edge-1".into()),
                kind: model::EventKind::ConditionChanged {
                    condition: "Ready".into(),
                    from: None,
                    to: ConditionStatus::True,
                    reason: "KubeletReady".into(),
                    message: String::new(),
                },
            };
            crate::k8s::node_event(&e).unwrap()
        };
        let now = at("2026-11-30T12:00:00Z");
        let metadata = ListMeta {
            resource_version: Some("12".into()),
            ..ListMeta::default()
        };
        let events = [event(3), event(4)];
        let mut streamed = event_table_head();
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                streamed.push(b',');
            }
            streamed.extend(event_table_row(e, IncludeObject::Object, now).unwrap());
        }
        streamed.extend(crate::k8s::list_tail(&metadata));
        let streamed: Value = serde_json::from_slice(&streamed).expect("valid json");
        let whole = event_table(&events, metadata, IncludeObject::Object, now);
        assert_eq!(streamed, serde_json::to_value(whole).unwrap());
    }

    #[test]
    fn event_table_rows_are_the_event_printers() {
        let e = model::Event {
            seq: 9,
            time: at("2026-11-30T11:58:00Z"),
            node: Some("edge-1".into()),
            kind: model::EventKind::ConditionChanged {
                condition: "Ready".into(),
                from: Some(ConditionStatus::True),
                to: ConditionStatus::False,
                reason: "KubeletNotReady".into(),
                message: "HTTP 500".into(),
            },
        };
        let event = crate::k8s::node_event(&e).unwrap();
        let now = at("2026-11-30T12:00:00Z");
        let v = serde_json::to_value(event_table(
            &[event],
            ListMeta::default(),
            IncludeObject::Metadata,
            now,
        ))
        .unwrap();
        let columns: Vec<(&str, i64)> = v["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            columns,
            [
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1)
            ]
        );
        assert_eq!(
            v["rows"][0]["cells"],
            json!([
                "2m",
                "Warning",
                "KubeletNotReady",
                "node/edge-1",
                "",
                "nodekeeper",
                "Ready: True -> False (KubeletNotReady: HTTP 500)",
                "2m",
                1,
                "edge-1.0000000000000009"
            ])
        );
        assert_eq!(v["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(v["rows"][0]["object"]["metadata"]["namespace"], "default");
    }

    #[test]
    fn status_cell_follows_kubectl() {
        let now = at("2026-11-30T12:00:00Z");
        let cell = |n: model::Node| node_cells(&n, now)[1].clone();
        let mut n = sample();
        n.unschedulable = false;
        assert_eq!(cell(n.clone()), "Ready");
        n.conditions[0].status = ConditionStatus::Unknown;
        assert_eq!(cell(n.clone()), "NotReady");
        n.conditions.clear();
        assert_eq!(cell(n), "Unknown");
    }
}
