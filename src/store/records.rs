//! The store's own record types: a versioned envelope per entity, postcard
//! encoded, converted to and from the domain at this boundary.
//!
//! Rules: a variant once written is never changed or removed, only appended;
//! enums inside records are stored as explicit `u8` codes; every version has a
//! golden-byte test. A version's conversions sit next to it.

use serde::{Deserialize, Serialize};

use super::outbox::OutboxEntry;
use crate::model::{
    Address, AddressKind, AttachedVolume, Condition, ConditionStatus, Event, EventKind, Features,
    Image, Lease, Micros, Node, NodeChange, NodeObject, ObjectKey, OwnerReference, Reported,
    Resources, RuntimeHandler, RuntimeHandlerFeatures, Taint, UnknownEvictionMode,
};

/// Envelope for node records.
#[derive(Debug, Serialize, Deserialize)]
pub enum StoredNode {
    V1(Box<NodeV1>),
    /// V1 plus what the kubelet reports of its machine.
    // Boxed: the same bytes as unboxed, a smaller enum.
    V2(Box<NodeV2>),
    /// V2 plus the operator's annotations.
    V3(Box<NodeV3>),
    /// V3 plus the rest of what the kubelet reports (images, its port,
    /// runtime handlers, features, volumes). A node with none of it is
    /// still written as V3.
    V4(Box<NodeV4>),
}

/// Envelope for event records. Keyed by `seq`, so the seq is not repeated here.
#[derive(Debug, Serialize, Deserialize)]
pub enum StoredEvent {
    V1(EventV1),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeV1 {
    pub name: String,
    pub uid: String,
    pub created: i64,
    pub resource_version: u64,
    pub source: String,
    pub labels: Vec<(String, String)>,
    pub external_id: String,
    pub provider_id: String,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub unschedulable: bool,
    pub taints: Vec<TaintV1>,
    pub addresses: Vec<AddressV1>,
    pub conditions: Vec<ConditionV1>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeV2 {
    pub v1: NodeV1,
    pub node_info: NodeInfoV1,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeV3 {
    pub v2: NodeV2,
    pub annotations: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeV4 {
    pub v3: NodeV3,
    pub reported: ReportedV1,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ReportedV1 {
    pub images: Vec<ImageV1>,
    pub kubelet_port: i32,
    pub runtime_handlers: Vec<RuntimeHandlerV1>,
    pub features: Option<FeaturesV1>,
    pub volumes_in_use: Vec<String>,
    pub volumes_attached: Vec<AttachedVolumeV1>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageV1 {
    pub names: Vec<String>,
    pub size_bytes: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeHandlerV1 {
    pub name: String,
    pub features: Option<RuntimeHandlerFeaturesV1>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeHandlerFeaturesV1 {
    pub recursive_read_only_mounts: Option<bool>,
    pub user_namespaces: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeaturesV1 {
    pub supplemental_groups_policy: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachedVolumeV1 {
    pub name: String,
    pub device_path: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NodeInfoV1 {
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    pub container_runtime_version: String,
    pub kubelet_version: String,
    pub kube_proxy_version: String,
    pub operating_system: String,
    pub architecture: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaintV1 {
    pub key: String,
    pub value: String,
    pub effect: String,
    pub added: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddressV1 {
    pub kind: u8,
    pub address: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionV1 {
    pub kind: String,
    pub status: u8,
    pub last_heartbeat: i64,
    pub last_transition: i64,
    pub reason: String,
    pub message: String,
}

/// The first two fields are frozen: the migrations crate reads them as a header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventV1 {
    pub time: i64,
    pub node: Option<String>,
    pub kind: EventKindV1,
}

/// Append-only: postcard stores the variant index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EventKindV1 {
    Registered(Box<NodeV1>),
    Deleted {
        reason: String,
    },
    ConditionChanged {
        condition: String,
        from: Option<u8>,
        to: u8,
        reason: String,
        message: String,
    },
    AddressesChanged {
        from: Vec<AddressV1>,
        to: Vec<AddressV1>,
    },
    AddressLookupFailed {
        message: String,
    },
    RegistrationFailed {
        message: String,
    },
    ControllerStarted {
        instance: String,
        downtime_micros: Option<u64>,
        previous_stop_clean: bool,
    },
    ControllerStopped {
        instance: String,
    },
    ProbeKeptReady {
        message: String,
    },
    /// `Registered` with the V2 record.
    RegisteredV2(Box<NodeV2>),
    TaintsChanged {
        from: Vec<TaintV1>,
        to: Vec<TaintV1>,
    },
    EvictionStarted {
        reason: String,
        mode: String,
    },
    EvictionDone {
        result: String,
    },
    /// `Registered` with the V3 record.
    RegisteredV3(Box<NodeV3>),
    OperatorChanged {
        by: String,
        changes: Vec<NodeChangeV1>,
    },
    SourceFailed {
        source: String,
        message: String,
    },
    ObjectChanged {
        resource: String,
        name: String,
        action: String,
        summary: String,
    },
    KubeletEvent {
        component: String,
        event_type: String,
        reason: String,
        message: String,
        object: String,
    },
    /// Variant 18.
    CertificateIssued {
        csr: String,
        serial: String,
        not_after: i64,
        requested_by: String,
        approval: String,
    },
}

/// One operator change. Append-only: postcard stores the variant index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NodeChangeV1 {
    Unschedulable {
        from: bool,
        to: bool,
    },
    Label {
        key: String,
        from: Option<String>,
        to: Option<String>,
    },
    Annotation {
        key: String,
        from: Option<String>,
        to: Option<String>,
    },
    Taints {
        from: Vec<TaintV1>,
        to: Vec<TaintV1>,
    },
}

/// Envelope for lease records.
#[derive(Debug, Serialize, Deserialize)]
pub enum StoredLease {
    V1(LeaseV1),
    /// V1 plus its owners (a kubelet's names its Node). A Lease without
    /// owners is still written as V1, so releases before V2 read it.
    V2(Box<LeaseV2>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseV2 {
    pub v1: LeaseV1,
    pub owners: Vec<OwnerReferenceV1>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnerReferenceV1 {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: Option<bool>,
    pub block_owner_deletion: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseV1 {
    pub name: String,
    pub uid: String,
    pub created: i64,
    pub generation: u64,
    pub holder_identity: Option<String>,
    pub lease_duration_seconds: Option<i32>,
    pub acquire_time: Option<i64>,
    pub renew_time: Option<i64>,
    pub lease_transitions: Option<i32>,
}

pub fn encode_lease(l: &Lease) -> Vec<u8> {
    let v1 = LeaseV1 {
        name: l.name.clone(),
        uid: l.uid.clone(),
        created: l.created.0,
        generation: l.generation,
        holder_identity: l.holder_identity.clone(),
        lease_duration_seconds: l.lease_duration_seconds,
        acquire_time: l.acquire_time.map(|t| t.0),
        renew_time: l.renew_time.map(|t| t.0),
        lease_transitions: l.lease_transitions,
    };
    if l.owner_references.is_empty() {
        return encode(&StoredLease::V1(v1));
    }
    let owners = l
        .owner_references
        .iter()
        .map(|o| OwnerReferenceV1 {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        })
        .collect();
    encode(&StoredLease::V2(Box::new(LeaseV2 { v1, owners })))
}

pub fn decode_lease(bytes: &[u8]) -> Result<Lease, DecodeError> {
    let (v, owners) = match decode::<StoredLease>(bytes, || "a lease record".into())? {
        StoredLease::V1(v) => (v, Vec::new()),
        StoredLease::V2(v2) => {
            let LeaseV2 { v1, owners } = *v2;
            (v1, owners)
        }
    };
    Ok(Lease {
        name: v.name,
        uid: v.uid,
        created: Micros(v.created),
        generation: v.generation,
        holder_identity: v.holder_identity,
        lease_duration_seconds: v.lease_duration_seconds,
        acquire_time: v.acquire_time.map(Micros),
        renew_time: v.renew_time.map(Micros),
        lease_transitions: v.lease_transitions,
        owner_references: owners
            .into_iter()
            .map(|o| OwnerReference {
                api_version: o.api_version,
                kind: o.kind,
                name: o.name,
                uid: o.uid,
                controller: o.controller,
                block_owner_deletion: o.block_owner_deletion,
            })
            .collect(),
    })
}

/// Envelope for the objects kept with a node (keyed by [`object_key`]).
#[derive(Debug, Serialize, Deserialize)]
pub enum StoredNodeObject {
    V1(NodeObjectV1),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeObjectV1 {
    pub generation: u64,
    pub json: String,
}

/// Three names joined by `0x00`: the key of an object kept with a node
/// (node, resource, name) or on its own (resource, namespace, name), so
/// the objects under the first name are one range. Names hold no `0x00`
/// (node names are DNS names; resources are ours; the rest are checked by
/// the API).
pub(super) fn joined_key(parts: [&str; 3]) -> Vec<u8> {
    parts.join("\0").into_bytes()
}

/// The three names of a [`joined_key`]; `None` when it is not three UTF-8 names.
pub(super) fn split_key(key: &[u8]) -> Option<[String; 3]> {
    let mut parts = key
        .splitn(3, |b| *b == 0)
        .map(|p| String::from_utf8(p.to_vec()).ok());
    Some([parts.next()??, parts.next()??, parts.next()??])
}

/// Node name, `0x00`, resource, `0x00`, object name (see [`joined_key`]).
pub fn object_key(key: &ObjectKey) -> Vec<u8> {
    joined_key([&key.node, &key.resource, &key.name])
}

/// The prefix of every key of `node`'s objects.
pub fn object_prefix(node: &str) -> Vec<u8> {
    let mut out = node.as_bytes().to_vec();
    out.push(0);
    out
}

pub fn encode_node_object(o: &NodeObject) -> Vec<u8> {
    encode(&StoredNodeObject::V1(NodeObjectV1 {
        generation: o.generation,
        json: o.json.clone(),
    }))
}

pub fn decode_node_object(key: &[u8], bytes: &[u8]) -> Result<NodeObject, DecodeError> {
    let what = || format!("the node object {:?}", String::from_utf8_lossy(key));
    let Some([node, resource, name]) = split_key(key) else {
        return Err(DecodeError {
            what: what(),
            reason: "its key is not node, resource and name".into(),
        });
    };
    let StoredNodeObject::V1(v) = decode::<StoredNodeObject>(bytes, what)?;
    Ok(NodeObject {
        node,
        resource,
        name,
        generation: v.generation,
        json: v.json,
    })
}

/// Envelope for outbox entries (keyed by kind and node name).
#[derive(Debug, Serialize, Deserialize)]
pub enum StoredOutboxEntry {
    V1(OutboxEntryV1),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEntryV1 {
    pub seq: u64,
    pub enqueued: i64,
    pub reason: Option<String>,
}

pub fn encode_outbox_entry(e: &OutboxEntry) -> Vec<u8> {
    encode(&StoredOutboxEntry::V1(OutboxEntryV1 {
        seq: e.seq,
        enqueued: e.enqueued.0,
        reason: e.reason.clone(),
    }))
}

pub fn decode_outbox_entry(bytes: &[u8]) -> Result<OutboxEntry, DecodeError> {
    let StoredOutboxEntry::V1(v) = decode::<StoredOutboxEntry>(bytes, || "an outbox entry".into())?;
    Ok(OutboxEntry {
        seq: v.seq,
        enqueued: Micros(v.enqueued),
        reason: v.reason,
    })
}

/// A record that cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("{what} is unreadable: {reason}")]
pub struct DecodeError {
    pub what: String,
    pub reason: String,
}

pub(super) fn decode<'a, T: Deserialize<'a>>(
    bytes: &'a [u8],
    what: impl Fn() -> String,
) -> Result<T, DecodeError> {
    let (value, rest) = postcard::take_from_bytes::<T>(bytes).map_err(|e| DecodeError {
        what: what(),
        reason: e.to_string(),
    })?;
    // postcard ignores trailing bytes; a record with leftovers is not what we wrote.
    if !rest.is_empty() {
        return Err(DecodeError {
            what: what(),
            reason: format!("{} trailing bytes", rest.len()),
        });
    }
    Ok(value)
}

pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Encoding owned, well-formed values into a Vec cannot fail.
    postcard::to_allocvec(value).expect("postcard encodes record types into a Vec")
}

/// The node's record: `StoredNode::V3`, or `V4` for a node with something
/// in [`Node::reported`], written from the node without first copying it
/// into the owned record (see [`super::node_bytes`]).
pub fn encode_node(node: &Node) -> Vec<u8> {
    super::node_bytes::encode(node)
}

pub fn decode_node(bytes: &[u8]) -> Result<Node, DecodeError> {
    match decode::<StoredNode>(bytes, || "a node record".into())? {
        StoredNode::V1(v1) => (*v1).try_into(),
        StoredNode::V2(v2) => (*v2).try_into(),
        StoredNode::V3(v3) => (*v3).try_into(),
        StoredNode::V4(v4) => {
            let NodeV4 { v3, reported } = *v4;
            let mut node = Node::try_from(v3)?;
            node.reported = reported.into();
            Ok(node)
        }
    }
}

impl From<&Reported> for ReportedV1 {
    fn from(r: &Reported) -> Self {
        ReportedV1 {
            images: r
                .images
                .iter()
                .map(|i| ImageV1 {
                    names: i.names.clone(),
                    size_bytes: i.size_bytes,
                })
                .collect(),
            kubelet_port: r.kubelet_port,
            runtime_handlers: r
                .runtime_handlers
                .iter()
                .map(|h| RuntimeHandlerV1 {
                    name: h.name.clone(),
                    features: h.features.as_ref().map(|f| RuntimeHandlerFeaturesV1 {
                        recursive_read_only_mounts: f.recursive_read_only_mounts,
                        user_namespaces: f.user_namespaces,
                    }),
                })
                .collect(),
            features: r.features.as_ref().map(|f| FeaturesV1 {
                supplemental_groups_policy: f.supplemental_groups_policy,
            }),
            volumes_in_use: r.volumes_in_use.clone(),
            volumes_attached: r
                .volumes_attached
                .iter()
                .map(|v| AttachedVolumeV1 {
                    name: v.name.clone(),
                    device_path: v.device_path.clone(),
                })
                .collect(),
        }
    }
}

impl From<ReportedV1> for Reported {
    fn from(r: ReportedV1) -> Self {
        Reported {
            images: r
                .images
                .into_iter()
                .map(|i| Image {
                    names: i.names,
                    size_bytes: i.size_bytes,
                })
                .collect(),
            kubelet_port: r.kubelet_port,
            runtime_handlers: r
                .runtime_handlers
                .into_iter()
                .map(|h| RuntimeHandler {
                    name: h.name,
                    features: h.features.map(|f| RuntimeHandlerFeatures {
                        recursive_read_only_mounts: f.recursive_read_only_mounts,
                        user_namespaces: f.user_namespaces,
                    }),
                })
                .collect(),
            features: r.features.map(|f| Features {
                supplemental_groups_policy: f.supplemental_groups_policy,
            }),
            volumes_in_use: r.volumes_in_use,
            volumes_attached: r
                .volumes_attached
                .into_iter()
                .map(|v| AttachedVolume {
                    name: v.name,
                    device_path: v.device_path,
                })
                .collect(),
        }
    }
}

impl TryFrom<NodeV3> for Node {
    type Error = DecodeError;
    fn try_from(v: NodeV3) -> Result<Node, DecodeError> {
        let mut node = Node::try_from(v.v2)?;
        node.annotations = v.annotations.into_iter().collect();
        Ok(node)
    }
}

fn node_change_v1(c: &NodeChange) -> NodeChangeV1 {
    match c {
        NodeChange::Unschedulable { from, to } => NodeChangeV1::Unschedulable {
            from: *from,
            to: *to,
        },
        NodeChange::Label { key, from, to } => NodeChangeV1::Label {
            key: key.clone(),
            from: from.clone(),
            to: to.clone(),
        },
        NodeChange::Annotation { key, from, to } => NodeChangeV1::Annotation {
            key: key.clone(),
            from: from.clone(),
            to: to.clone(),
        },
        NodeChange::Taints { from, to } => NodeChangeV1::Taints {
            from: taints_v1(from),
            to: taints_v1(to),
        },
    }
}

fn node_change_from(c: NodeChangeV1) -> NodeChange {
    match c {
        NodeChangeV1::Unschedulable { from, to } => NodeChange::Unschedulable { from, to },
        NodeChangeV1::Label { key, from, to } => NodeChange::Label { key, from, to },
        NodeChangeV1::Annotation { key, from, to } => NodeChange::Annotation { key, from, to },
        NodeChangeV1::Taints { from, to } => NodeChange::Taints {
            from: taints_from(from),
            to: taints_from(to),
        },
    }
}

impl TryFrom<NodeV2> for Node {
    type Error = DecodeError;
    fn try_from(v: NodeV2) -> Result<Node, DecodeError> {
        let mut node = Node::try_from(v.v1)?;
        let i = v.node_info;
        node.node_info = crate::model::NodeInfo {
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
        };
        Ok(node)
    }
}

pub fn encode_event(event: &Event) -> Vec<u8> {
    encode(&StoredEvent::V1(EventV1 {
        time: event.time.0,
        node: event.node.clone(),
        kind: EventKindV1::from(&event.kind),
    }))
}

pub fn decode_event(seq: u64, bytes: &[u8]) -> Result<Event, DecodeError> {
    let StoredEvent::V1(v1) = decode::<StoredEvent>(bytes, || format!("event {seq}"))?;
    let kind = v1.kind.try_into().map_err(|reason: String| DecodeError {
        what: format!("event {seq}"),
        reason,
    })?;
    Ok(Event {
        seq,
        time: Micros(v1.time),
        node: v1.node,
        kind,
    })
}

pub(super) fn status_code(s: ConditionStatus) -> u8 {
    match s {
        ConditionStatus::True => 1,
        ConditionStatus::False => 2,
        ConditionStatus::Unknown => 3,
    }
}

fn status_from(code: u8) -> Result<ConditionStatus, String> {
    match code {
        1 => Ok(ConditionStatus::True),
        2 => Ok(ConditionStatus::False),
        3 => Ok(ConditionStatus::Unknown),
        other => Err(format!("unknown condition status code {other}")),
    }
}

pub(super) fn address_code(k: AddressKind) -> u8 {
    match k {
        AddressKind::InternalIP => 1,
        AddressKind::ExternalIP => 2,
        AddressKind::Hostname => 3,
        AddressKind::InternalDNS => 4,
        AddressKind::ExternalDNS => 5,
    }
}

fn address_from(code: u8) -> Result<AddressKind, String> {
    Ok(match code {
        1 => AddressKind::InternalIP,
        2 => AddressKind::ExternalIP,
        3 => AddressKind::Hostname,
        4 => AddressKind::InternalDNS,
        5 => AddressKind::ExternalDNS,
        other => return Err(format!("unknown address kind code {other}")),
    })
}

fn taints_v1(taints: &[Taint]) -> Vec<TaintV1> {
    taints
        .iter()
        .map(|t| TaintV1 {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            added: t.added.map(|m| m.0),
        })
        .collect()
}

fn taints_from(taints: Vec<TaintV1>) -> Vec<Taint> {
    taints
        .into_iter()
        .map(|t| Taint {
            key: t.key,
            value: t.value,
            effect: t.effect,
            added: t.added.map(Micros),
        })
        .collect()
}

fn addresses_v1(addresses: &[Address]) -> Vec<AddressV1> {
    addresses
        .iter()
        .map(|a| AddressV1 {
            kind: address_code(a.kind),
            address: a.address.clone(),
        })
        .collect()
}

fn addresses_from(addresses: Vec<AddressV1>) -> Result<Vec<Address>, String> {
    addresses
        .into_iter()
        .map(|a| {
            Ok(Address {
                kind: address_from(a.kind)?,
                address: a.address,
            })
        })
        .collect()
}

impl TryFrom<NodeV1> for Node {
    type Error = DecodeError;
    fn try_from(v: NodeV1) -> Result<Node, DecodeError> {
        let name = v.name.clone();
        let bad = |reason: String| DecodeError {
            what: format!("node {name:?}"),
            reason,
        };
        Ok(Node {
            conditions: v
                .conditions
                .into_iter()
                .map(|c| {
                    Ok(Condition {
                        kind: c.kind,
                        status: status_from(c.status)?,
                        last_heartbeat: Micros(c.last_heartbeat),
                        last_transition: Micros(c.last_transition),
                        reason: c.reason,
                        message: c.message,
                    })
                })
                .collect::<Result<_, String>>()
                .map_err(bad)?,
            addresses: addresses_from(v.addresses).map_err(bad)?,
            name: v.name,
            uid: v.uid,
            created: Micros(v.created),
            resource_version: v.resource_version,
            source: v.source,
            labels: v.labels.into_iter().collect(),
            annotations: Default::default(),
            external_id: v.external_id,
            provider_id: v.provider_id,
            capacity: Resources {
                cpu_millis: v.cpu_millis,
                memory_bytes: v.memory_bytes,
            },
            unschedulable: v.unschedulable,
            node_info: Default::default(),
            taints: taints_from(v.taints),
            reported: Reported::default(),
        })
    }
}

/// The conversions of event kinds both ways: the variants listed first
/// keep their fields as the domain has them (strings), copied field for
/// field; the arms after them convert what the record stores otherwise
/// (codes, micros, node records).
macro_rules! event_kind_conversions {
    (
        same: [$($variant:ident { $($field:ident),* }),* $(,)?],
        to_record: { $($to_record:tt)* },
        from_record: { $($from_record:tt)* } $(,)?
    ) => {
        impl From<&EventKind> for EventKindV1 {
            fn from(k: &EventKind) -> Self {
                match k {
                    $(EventKind::$variant { $($field),* } => EventKindV1::$variant {
                        $($field: $field.clone()),*
                    },)*
                    $($to_record)*
                }
            }
        }

        impl TryFrom<EventKindV1> for EventKind {
            type Error = String;
            fn try_from(k: EventKindV1) -> Result<EventKind, String> {
                Ok(match k {
                    $(EventKindV1::$variant { $($field),* } => EventKind::$variant { $($field),* },)*
                    $($from_record)*
                })
            }
        }
    };
}

event_kind_conversions! {
    same: [
        Deleted { reason },
        AddressLookupFailed { message },
        RegistrationFailed { message },
        ControllerStopped { instance },
        ProbeKeptReady { message },
        EvictionDone { result },
        ObjectChanged { resource, name, action, summary },
        KubeletEvent { component, event_type, reason, message, object },
        SourceFailed { source, message },
    ],
    to_record: {
        // A node is registered before its kubelet reports anything
        // (`register::new_node`), so V3 holds all of it.
        EventKind::Registered { node } => {
            EventKindV1::RegisteredV3(Box::new(super::node_bytes::v3_record(node)))
        }
        EventKind::ConditionChanged {
            condition,
            from,
            to,
            reason,
            message,
        } => EventKindV1::ConditionChanged {
            condition: condition.clone(),
            from: from.map(status_code),
            to: status_code(*to),
            reason: reason.clone(),
            message: message.clone(),
        },
        EventKind::AddressesChanged { from, to } => EventKindV1::AddressesChanged {
            from: addresses_v1(from),
            to: addresses_v1(to),
        },
        EventKind::ControllerStarted {
            instance,
            downtime_seconds,
            previous_stop_clean,
        } => EventKindV1::ControllerStarted {
            instance: instance.clone(),
            downtime_micros: downtime_seconds.map(|s| (s.max(0.0) * 1e6) as u64),
            previous_stop_clean: *previous_stop_clean,
        },
        EventKind::TaintsChanged { from, to } => EventKindV1::TaintsChanged {
            from: taints_v1(from),
            to: taints_v1(to),
        },
        EventKind::EvictionStarted { reason, mode } => EventKindV1::EvictionStarted {
            reason: reason.clone(),
            mode: mode.as_str().to_string(),
        },
        EventKind::CertificateIssued {
            csr,
            serial,
            not_after,
            requested_by,
            approval,
        } => EventKindV1::CertificateIssued {
            csr: csr.clone(),
            serial: serial.clone(),
            not_after: not_after.0,
            requested_by: requested_by.clone(),
            approval: approval.clone(),
        },
        EventKind::OperatorChanged { by, changes } => EventKindV1::OperatorChanged {
            by: by.clone(),
            changes: changes.iter().map(node_change_v1).collect(),
        },
    },
    from_record: {
        EventKindV1::Registered(node) => EventKind::Registered {
            node: Box::new(Node::try_from(*node).map_err(|e| e.to_string())?),
        },
        EventKindV1::RegisteredV2(node) => EventKind::Registered {
            node: Box::new(Node::try_from(*node).map_err(|e| e.to_string())?),
        },
        EventKindV1::RegisteredV3(node) => EventKind::Registered {
            node: Box::new(Node::try_from(*node).map_err(|e| e.to_string())?),
        },
        EventKindV1::ConditionChanged {
            condition,
            from,
            to,
            reason,
            message,
        } => EventKind::ConditionChanged {
            condition,
            from: from.map(status_from).transpose()?,
            to: status_from(to)?,
            reason,
            message,
        },
        EventKindV1::AddressesChanged { from, to } => EventKind::AddressesChanged {
            from: addresses_from(from)?,
            to: addresses_from(to)?,
        },
        EventKindV1::ControllerStarted {
            instance,
            downtime_micros,
            previous_stop_clean,
        } => EventKind::ControllerStarted {
            instance,
            downtime_seconds: downtime_micros.map(|m| m as f64 / 1e6),
            previous_stop_clean,
        },
        EventKindV1::TaintsChanged { from, to } => EventKind::TaintsChanged {
            from: taints_from(from),
            to: taints_from(to),
        },
        EventKindV1::EvictionStarted { reason, mode } => EventKind::EvictionStarted {
            reason,
            mode: mode
                .parse()
                .map_err(|e: UnknownEvictionMode| e.to_string())?,
        },
        EventKindV1::CertificateIssued {
            csr,
            serial,
            not_after,
            requested_by,
            approval,
        } => EventKind::CertificateIssued {
            csr,
            serial,
            not_after: Micros(not_after),
            requested_by,
            approval,
        },
        EventKindV1::OperatorChanged { by, changes } => EventKind::OperatorChanged {
            by,
            changes: changes.into_iter().map(node_change_from).collect(),
        },
    },
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    pub(crate) fn sample_node() -> Node {
        Node {
            name: "edge-1".into(),
            uid: "u1".into(),
            created: Micros(1_000_000),
            resource_version: 3,
            source: "static".into(),
            labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
            annotations: BTreeMap::new(),
            external_id: "edge-1".into(),
            provider_id: String::new(),
            capacity: Resources {
                cpu_millis: 1000,
                memory_bytes: 1024,
            },
            unschedulable: false,
            taints: vec![Taint {
                key: "k".into(),
                value: "v".into(),
                effect: "NoSchedule".into(),
                added: Some(Micros(5)),
            }],
            addresses: vec![Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.1".into(),
            }],
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: ConditionStatus::True,
                last_heartbeat: Micros(2),
                last_transition: Micros(1),
                reason: "KubeletReady".into(),
                message: "ok".into(),
            }],
            node_info: Default::default(),
            reported: Default::default(),
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Bytes of a V1 node record, as the first release wrote them: they
    /// must decode forever.
    #[test]
    fn node_v1_golden_bytes_still_decode() {
        let v1 = unhex(
            "0006656467652d3102753180897a030673746174696301047a6f6e65016106656467652d3100e8078008\
             0001016b01760a4e6f5363686564756c65010a01010831302e302e302e31010552656164790104020c4b75\
             62656c65745265616479026f6b",
        );
        assert_eq!(decode_node(&v1).unwrap(), sample_node());
    }

    /// Bytes of a V2 node record, as releases before annotations wrote
    /// them: they must decode forever.
    #[test]
    fn node_v2_golden_bytes_still_decode() {
        let mut node = sample_node();
        node.node_info.kubelet_version = "v1.32.0".into();
        node.node_info.architecture = "arm64".into();
        let v2 = unhex(
            "0106656467652d3102753180897a030673746174696301047a6f6e65016106656467652d3100e8078008\
             0001016b01760a4e6f5363686564756c65010a01010831302e302e302e31010552656164790104020c4b75\
             62656c65745265616479026f6b0000000000000776312e33322e3000000561726d3634",
        );
        assert_eq!(decode_node(&v2).unwrap(), node);
    }

    /// Bytes written now. If this test fails, a record layout changed: add a
    /// new variant instead.
    #[test]
    fn node_v3_golden_bytes() {
        let mut node = sample_node();
        node.node_info.kubelet_version = "v1.32.0".into();
        node.node_info.architecture = "arm64".into();
        node.unschedulable = true;
        node.annotations = BTreeMap::from([("owner".to_string(), "ops".to_string())]);
        let bytes = encode_node(&node);
        assert_eq!(
            hex(&bytes),
            "0206656467652d3102753180897a030673746174696301047a6f6e65016106656467652d3100e8078008\
             0101016b01760a4e6f5363686564756c65010a01010831302e302e302e31010552656164790104020c4b75\
             62656c65745265616479026f6b0000000000000776312e33322e3000000561726d363401056f776e6572\
             036f7073"
        );
        assert_eq!(decode_node(&bytes).unwrap(), node);
    }

    /// A node with what its kubelet reported beyond V3: the V3 fields
    /// under variant 3, then that part. Without it, the same node is the V3
    /// bytes above.
    #[test]
    fn node_v4_golden_bytes() {
        let mut node = sample_node();
        node.node_info.kubelet_version = "v1.32.0".into();
        node.node_info.architecture = "arm64".into();
        node.unschedulable = true;
        node.annotations = BTreeMap::from([("owner".to_string(), "ops".to_string())]);
        let v3 = hex(&encode_node(&node));
        node.reported = Reported {
            images: vec![Image {
                names: vec!["p".into()],
                size_bytes: Some(2),
            }],
            kubelet_port: 10250,
            runtime_handlers: vec![RuntimeHandler {
                name: "r".into(),
                features: Some(RuntimeHandlerFeatures {
                    recursive_read_only_mounts: Some(true),
                    user_namespaces: None,
                }),
            }],
            features: Some(Features {
                supplemental_groups_policy: Some(true),
            }),
            volumes_in_use: vec!["v".into()],
            volumes_attached: vec![AttachedVolume {
                name: "a".into(),
                device_path: "d".into(),
            }],
        };
        let bytes = encode_node(&node);
        assert!(v3.starts_with("02"), "{v3}");
        // images [{["p"], Some(2)}]; port 10250 (zigzag 20500); handlers
        // [{"r", Some({Some(true), None})}]; features Some({Some(true)});
        // volumesInUse ["v"]; volumesAttached [{"a", "d"}].
        let reported = "010101700104\
                        94a001\
                        01017201010100\
                        010101\
                        010176\
                        0101610164";
        assert_eq!(hex(&bytes), format!("03{}{reported}", &v3[2..]));
        assert_eq!(decode_node(&bytes).unwrap(), node);
    }

    /// An operator change as written now.
    #[test]
    fn operator_changed_golden_bytes() {
        let event = Event {
            seq: 10,
            time: Micros(1),
            node: Some("n".into()),
            kind: EventKind::OperatorChanged {
                by: "alice".into(),
                changes: vec![
                    NodeChange::Unschedulable {
                        from: false,
                        to: true,
                    },
                    NodeChange::Label {
                        key: "k".into(),
                        from: None,
                        to: Some("v".into()),
                    },
                    NodeChange::Annotation {
                        key: "a".into(),
                        from: Some("x".into()),
                        to: None,
                    },
                    NodeChange::Taints {
                        from: vec![],
                        to: vec![Taint {
                            key: "t".into(),
                            value: String::new(),
                            effect: "NoSchedule".into(),
                            added: None,
                        }],
                    },
                ],
            },
        };
        let bytes = encode_event(&event);
        assert_eq!(
            hex(&bytes),
            "000201016e0e05616c6963650400000101016b000101760201610101780003000101740\
             00a4e6f5363686564756c6500"
        );
        assert_eq!(decode_event(10, &bytes).unwrap(), event);
    }

    /// A source that could not be followed, as written now.
    #[test]
    fn source_failed_golden_bytes() {
        let event = Event {
            seq: 11,
            time: Micros(2),
            node: None,
            kind: EventKind::SourceFailed {
                source: "static".into(),
                message: "n.txt:3: bad".into(),
            },
        };
        let bytes = encode_event(&event);
        assert_eq!(
            hex(&bytes),
            "0004000f067374617469630c6e2e7478743a333a20626164"
        );
        assert_eq!(decode_event(11, &bytes).unwrap(), event);
    }

    #[test]
    fn lease_v1_golden_bytes() {
        let lease = Lease {
            name: "edge-1".into(),
            uid: "u".into(),
            created: Micros(1),
            generation: 2,
            holder_identity: Some("edge-1".into()),
            lease_duration_seconds: Some(40),
            acquire_time: None,
            renew_time: Some(Micros(3)),
            lease_transitions: None,
            owner_references: Vec::new(),
        };
        let bytes = encode_lease(&lease);
        assert_eq!(
            hex(&bytes),
            "0006656467652d31017502020106656467652d31015000010600"
        );
        assert_eq!(decode_lease(&bytes).unwrap(), lease);
    }

    /// A Lease with an owner, as a kubelet keeps it: V2. The same Lease
    /// without owners is still the V1 bytes above.
    #[test]
    fn lease_v2_golden_bytes() {
        let lease = Lease {
            name: "e".into(),
            uid: "u".into(),
            created: Micros(1),
            generation: 2,
            holder_identity: None,
            lease_duration_seconds: None,
            acquire_time: None,
            renew_time: None,
            lease_transitions: None,
            owner_references: vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: "e".into(),
                uid: "n".into(),
                controller: None,
                block_owner_deletion: Some(true),
            }],
        };
        let bytes = encode_lease(&lease);
        assert_eq!(
            hex(&bytes),
            "01016501750202000000000001027631044e6f64650165016e000101"
        );
        assert_eq!(decode_lease(&bytes).unwrap(), lease);
    }

    /// An object kept with a node, and the event its write records, as written now.
    #[test]
    fn node_object_v1_and_object_changed_golden_bytes() {
        let object = NodeObject {
            node: "n".into(),
            resource: "csinodes.storage.k8s.io".into(),
            name: "n".into(),
            generation: 2,
            json: "{}".into(),
        };
        let bytes = encode_node_object(&object);
        assert_eq!(hex(&bytes), "0002027b7d");
        let key = object_key(&object.key());
        assert_eq!(key, b"n\0csinodes.storage.k8s.io\0n");
        assert!(key.starts_with(&object_prefix("n")));
        assert_eq!(decode_node_object(&key, &bytes).unwrap(), object);
        assert!(decode_node_object(b"no-separators", &bytes).is_err());

        let event = Event {
            seq: 11,
            time: Micros(1),
            node: Some("n".into()),
            kind: EventKind::ObjectChanged {
                resource: "r".into(),
                name: "n".into(),
                action: "a".into(),
                summary: "s".into(),
            },
        };
        let bytes = encode_event(&event);
        assert_eq!(hex(&bytes), "000201016e100172016e01610173");
        assert_eq!(decode_event(11, &bytes).unwrap(), event);

        let posted = Event {
            seq: 12,
            time: Micros(1),
            node: Some("n".into()),
            kind: EventKind::KubeletEvent {
                component: "k".into(),
                event_type: "N".into(),
                reason: "r".into(),
                message: "m".into(),
                object: "o".into(),
            },
        };
        let bytes = encode_event(&posted);
        assert_eq!(hex(&bytes), "000201016e11016b014e0172016d016f");
        assert_eq!(decode_event(12, &bytes).unwrap(), posted);

        let issued = Event {
            seq: 13,
            time: Micros(1),
            node: Some("n".into()),
            kind: EventKind::CertificateIssued {
                csr: "c".into(),
                serial: "s".into(),
                not_after: Micros(2),
                requested_by: "r".into(),
                approval: "a".into(),
            },
        };
        let bytes = encode_event(&issued);
        // Variant 18 (0x12), its five fields; not_after 2 is zigzag 04.
        assert_eq!(hex(&bytes), "000201016e12016301730401720161");
        assert_eq!(decode_event(13, &bytes).unwrap(), issued);
    }

    #[test]
    fn outbox_entry_v1_golden_bytes() {
        let entry = OutboxEntry {
            seq: 300,
            enqueued: Micros(5),
            reason: Some("r".into()),
        };
        let bytes = encode_outbox_entry(&entry);
        assert_eq!(hex(&bytes), "00ac020a010172");
        assert_eq!(decode_outbox_entry(&bytes).unwrap(), entry);
    }

    #[test]
    fn event_v1_golden_bytes() {
        let event = Event {
            seq: 9,
            time: Micros(1_700_000_000_000_000),
            node: Some("edge-1".into()),
            kind: EventKind::ConditionChanged {
                condition: "Ready".into(),
                from: Some(ConditionStatus::True),
                to: ConditionStatus::Unknown,
                reason: "NodeStatusUnknown".into(),
                message: "m".into(),
            },
        };
        let bytes = encode_event(&event);
        assert_eq!(
            hex(&bytes),
            "008080f281838985060106656467652d3102055265616479010103114e6f6465537461747573556e6b6e\
             6f776e016d"
        );
        assert_eq!(decode_event(9, &bytes).unwrap(), event);
    }

    #[test]
    fn every_event_kind_round_trips() {
        let kinds = vec![
            EventKind::Registered {
                node: Box::new(sample_node()),
            },
            EventKind::Deleted {
                reason: "gone".into(),
            },
            EventKind::ConditionChanged {
                condition: "Ready".into(),
                from: None,
                to: ConditionStatus::False,
                reason: "r".into(),
                message: "m".into(),
            },
            EventKind::AddressesChanged {
                from: vec![],
                to: vec![Address {
                    kind: AddressKind::Hostname,
                    address: "h".into(),
                }],
            },
            EventKind::AddressLookupFailed {
                message: "nx".into(),
            },
            EventKind::RegistrationFailed {
                message: "no".into(),
            },
            EventKind::ControllerStarted {
                instance: "i".into(),
                downtime_seconds: Some(1.5),
                previous_stop_clean: true,
            },
            EventKind::ControllerStopped {
                instance: "i".into(),
            },
            EventKind::OperatorChanged {
                by: "system:anonymous".into(),
                changes: vec![NodeChange::Annotation {
                    key: "a".into(),
                    from: None,
                    to: Some("b".into()),
                }],
            },
            EventKind::SourceFailed {
                source: "cloud/inventory".into(),
                message: "does not parse".into(),
            },
        ];
        for (seq, kind) in kinds.into_iter().enumerate() {
            let event = Event {
                seq: seq as u64,
                time: Micros(42),
                node: None,
                kind,
            };
            assert_eq!(
                decode_event(seq as u64, &encode_event(&event)).unwrap(),
                event
            );
        }
    }

    #[test]
    fn trailing_bytes_and_garbage_are_refused() {
        let mut bytes = encode_node(&sample_node());
        bytes.push(0);
        assert!(decode_node(&bytes)
            .unwrap_err()
            .to_string()
            .contains("trailing"));
        assert!(decode_event(5, &[9, 9, 9])
            .unwrap_err()
            .to_string()
            .contains("event 5"));
    }

    #[test]
    fn eviction_modes_are_stored_by_their_flag_spelling() {
        use crate::model::EvictionMode;
        for (mode, text) in [
            (EvictionMode::Taint, "taint"),
            (EvictionMode::DeletePods, "delete-pods"),
            (EvictionMode::None, "none"),
        ] {
            let kind = EventKind::EvictionStarted {
                reason: "r".into(),
                mode,
            };
            let stored = EventKindV1::from(&kind);
            assert!(
                matches!(&stored, EventKindV1::EvictionStarted { mode, .. } if mode == text),
                "{text}"
            );
            assert_eq!(EventKind::try_from(stored).unwrap(), kind);
        }
        let err = EventKind::try_from(EventKindV1::EvictionStarted {
            reason: "r".into(),
            mode: "delete_pods".into(),
        })
        .unwrap_err();
        assert!(
            err.contains("unknown eviction mode \"delete_pods\""),
            "{err}"
        );
    }
}

/// Round trips over arbitrary records: whatever the domain can hold, the
/// store gives back unchanged.
#[cfg(test)]
mod round_trips {
    use super::*;
    use proptest::prelude::*;

    /// The owned record [`encode_node`] writes the bytes of, built field by
    /// field: what the node writer is checked against.
    fn stored_node(n: &Node) -> StoredNode {
        if n.reported.is_empty() {
            StoredNode::V3(Box::new(NodeV3::from(n)))
        } else {
            StoredNode::V4(Box::new(NodeV4 {
                v3: NodeV3::from(n),
                reported: ReportedV1::from(&n.reported),
            }))
        }
    }

    impl From<&Node> for NodeV3 {
        fn from(n: &Node) -> Self {
            NodeV3 {
                v2: NodeV2::from(n),
                annotations: n
                    .annotations
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }
        }
    }

    impl From<&Node> for NodeV2 {
        fn from(n: &Node) -> Self {
            let i = &n.node_info;
            NodeV2 {
                v1: NodeV1::from(n),
                node_info: NodeInfoV1 {
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
                },
            }
        }
    }

    impl From<&Node> for NodeV1 {
        fn from(n: &Node) -> Self {
            NodeV1 {
                name: n.name.clone(),
                uid: n.uid.clone(),
                created: n.created.0,
                resource_version: n.resource_version,
                source: n.source.clone(),
                labels: n
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                external_id: n.external_id.clone(),
                provider_id: n.provider_id.clone(),
                cpu_millis: n.capacity.cpu_millis,
                memory_bytes: n.capacity.memory_bytes,
                unschedulable: n.unschedulable,
                taints: taints_v1(&n.taints),
                addresses: addresses_v1(&n.addresses),
                conditions: n
                    .conditions
                    .iter()
                    .map(|c| ConditionV1 {
                        kind: c.kind.clone(),
                        status: status_code(c.status),
                        last_heartbeat: c.last_heartbeat.0,
                        last_transition: c.last_transition.0,
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                    })
                    .collect(),
            }
        }
    }

    fn status() -> impl Strategy<Value = ConditionStatus> {
        prop_oneof![
            Just(ConditionStatus::True),
            Just(ConditionStatus::False),
            Just(ConditionStatus::Unknown)
        ]
    }

    fn node() -> impl Strategy<Value = Node> {
        (
            "[a-z0-9.-]{1,40}",
            any::<i64>(),
            any::<u64>(),
            proptest::collection::btree_map("[a-z./-]{1,20}", ".{0,20}", 0..4),
            proptest::collection::vec(
                (
                    "[A-Za-z]{1,16}",
                    status(),
                    any::<i64>(),
                    any::<i64>(),
                    ".{0,30}",
                ),
                0..5,
            ),
            proptest::collection::vec(("[a-z./-]{1,20}", any::<Option<i64>>()), 0..3),
            (any::<u64>(), any::<u64>(), any::<bool>(), ".{0,12}"),
        )
            .prop_map(
                |(
                    name,
                    created,
                    rv,
                    labels,
                    conditions,
                    taints,
                    (cpu, mem, unschedulable, kubelet),
                )| {
                    let mut n = tests::sample_node();
                    n.name = name;
                    n.created = Micros(created);
                    n.resource_version = rv;
                    n.labels = labels;
                    n.conditions = conditions
                        .into_iter()
                        .map(|(kind, status, hb, tr, message)| Condition {
                            kind,
                            status,
                            last_heartbeat: Micros(hb),
                            last_transition: Micros(tr),
                            reason: String::new(),
                            message,
                        })
                        .collect();
                    n.taints = taints
                        .into_iter()
                        .map(|(key, added)| Taint {
                            key,
                            value: String::new(),
                            effect: "NoSchedule".into(),
                            added: added.map(Micros),
                        })
                        .collect();
                    n.capacity = Resources {
                        cpu_millis: cpu,
                        memory_bytes: mem,
                    };
                    n.unschedulable = unschedulable;
                    n.node_info.kubelet_version = kubelet.clone();
                    if !kubelet.is_empty() {
                        n.annotations.insert(kubelet.clone(), n.name.clone());
                        // Half the nodes with a kubelet's report: V4.
                        if unschedulable {
                            n.reported.images = vec![Image {
                                names: vec![kubelet.clone(), n.name.clone()],
                                size_bytes: Some(cpu as i64),
                            }];
                            n.reported.kubelet_port = (mem % 65536) as i32;
                            n.reported.volumes_in_use = vec![kubelet];
                            n.reported.features = Some(Features {
                                supplemental_groups_policy: Some(cpu % 2 == 0),
                            });
                        }
                    }
                    n
                },
            )
    }

    proptest! {
        #[test]
        fn nodes_round_trip(n in node()) {
            prop_assert_eq!(decode_node(&encode_node(&n)).unwrap(), n);
        }

        #[test]
        fn a_node_written_from_the_node_is_the_owned_record(n in node()) {
            prop_assert_eq!(encode_node(&n), encode(&stored_node(&n)));
        }

        #[test]
        fn events_round_trip(n in node(), seq in any::<u64>(), time in any::<i64>(), to in status()) {
            // A node is registered before its kubelet reports anything
            // (`register::new_node`): the record of it is V3's.
            let registered = Node { reported: Reported::default(), ..n.clone() };
            for kind in [
                EventKind::Registered { node: Box::new(registered) },
                EventKind::ConditionChanged { condition: "Ready".into(), from: None, to, reason: "r".into(), message: n.name.clone() },
                EventKind::TaintsChanged { from: vec![], to: n.taints.clone() },
            ] {
                let e = Event { seq, time: Micros(time), node: Some(n.name.clone()), kind };
                prop_assert_eq!(decode_event(seq, &encode_event(&e)).unwrap(), e);
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_node(&bytes);
            let _ = decode_event(1, &bytes);
            let _ = decode_lease(&bytes);
            let _ = decode_outbox_entry(&bytes);
        }
    }
}
