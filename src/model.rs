//! The domain: nodes, their conditions, and the events that make up their history.
//!
//! These types are ours and small. Kubernetes JSON is produced from them in
//! [`crate::k8s`]; the store keeps its own versioned records in [`crate::store`].

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub(crate) mod detail;
pub mod duration;
mod eviction;
mod name;
mod operator;
mod pushed;
pub mod quantity;
mod reported;
mod status;
mod taints;
pub mod validation;

pub use detail::describe_changes;
pub use eviction::{EvictionMode, UnknownEvictionMode};
pub use name::{normalize_name, not_quite_ipv4, InvalidName};
pub use operator::OperatorFields;
pub use pushed::{PushedCondition, PushedStatus};
pub use reported::{
    AttachedVolume, Features, Image, Reported, RuntimeHandler, RuntimeHandlerFeatures,
};
pub use status::{SourceStatus, StoreHealth};
pub use taints::{
    is_managed_taint, MANAGED_TAINTS, TAINT_NOT_READY, TAINT_SHUTDOWN, TAINT_UNREACHABLE,
};

/// The source recorded for nodes that registered themselves (a kubelet's
/// create of its Node object).
pub const SELF_REGISTERED: &str = "kubelet";

/// Wall-clock time in microseconds since the Unix epoch. For records only:
/// timers use `tokio::time::Instant`.
/// Serialized as RFC 3339, as Kubernetes and operators read times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Micros(pub i64);

impl Serialize for Micros {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.timestamp())
    }
}

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Micros::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

impl Micros {
    /// The current wall-clock time.
    pub fn now() -> Micros {
        // The one place the wall clock is read (clippy.toml holds the rest to it).
        #[allow(clippy::disallowed_methods)]
        let now = jiff::Timestamp::now();
        Micros(now.as_microsecond())
    }

    /// As a `jiff` timestamp (clamped into jiff's range).
    pub fn timestamp(self) -> jiff::Timestamp {
        jiff::Timestamp::from_microsecond(self.0).unwrap_or(if self.0 < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        })
    }

    /// RFC 3339 with the precision the value has, in UTC (`2026-11-30T09:23:09.123456Z`).
    pub fn rfc3339(self) -> String {
        self.timestamp().to_string()
    }

    /// RFC 3339 to the second, as Kubernetes writes times.
    pub fn rfc3339_seconds(self) -> String {
        let t =
            jiff::Timestamp::from_second(self.timestamp().as_second()).unwrap_or(self.timestamp());
        t.to_string()
    }

    /// Parses RFC 3339 (`2026-11-30T09:00:00Z`, offsets allowed).
    pub fn parse_rfc3339(s: &str) -> Result<Micros, String> {
        s.parse::<jiff::Timestamp>()
            .map(|t| Micros(t.as_microsecond()))
            .map_err(|e| format!("{s:?} is not an RFC 3339 time such as 2026-11-30T09:00:00Z: {e}"))
    }

    /// Parses an instant given either as RFC 3339 or as an age relative to
    /// `now` (`10m` = ten minutes ago), as operators type them.
    pub fn parse_instant(s: &str, now: Micros) -> Result<Micros, String> {
        if let Ok(d) = duration::parse(s) {
            return Ok(Micros(now.0 - d.as_micros() as i64));
        }
        Micros::parse_rfc3339(s).map_err(|_| {
            format!("{s:?} is neither an RFC 3339 time (2026-11-30T09:00:00Z) nor an age such as 10m or 2h")
        })
    }

    /// Microseconds from `earlier` to `self`, zero if negative.
    pub fn since(self, earlier: Micros) -> std::time::Duration {
        std::time::Duration::from_micros((self.0 - earlier.0).max(0) as u64)
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rfc3339())
    }
}

/// A condition's status, as Kubernetes spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// Every status, in the order they are declared (`status as usize` indexes it).
    pub const ALL: [ConditionStatus; 3] = [
        ConditionStatus::True,
        ConditionStatus::False,
        ConditionStatus::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ConditionStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let status = ConditionStatus::ALL.into_iter().find(|c| c.as_str() == s);
        status.ok_or_else(|| format!("{s:?} is not a condition status (True, False or Unknown)"))
    }
}

/// The condition type nodekeeper decides itself.
pub const READY: &str = "Ready";

/// One node condition, as in `status.conditions` of a Kubernetes Node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: ConditionStatus,
    #[serde(rename = "lastHeartbeatTime")]
    pub last_heartbeat: Micros,
    #[serde(rename = "lastTransitionTime")]
    pub last_transition: Micros,
    pub reason: String,
    pub message: String,
}

/// Kinds of node address, as Kubernetes names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AddressKind {
    InternalIP,
    ExternalIP,
    Hostname,
    InternalDNS,
    ExternalDNS,
}

impl AddressKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AddressKind::InternalIP => "InternalIP",
            AddressKind::ExternalIP => "ExternalIP",
            AddressKind::Hostname => "Hostname",
            AddressKind::InternalDNS => "InternalDNS",
            AddressKind::ExternalDNS => "ExternalDNS",
        }
    }
}

/// One entry of `status.addresses`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Address {
    #[serde(rename = "type")]
    pub kind: AddressKind,
    pub address: String,
}

/// What a node offers; `status.capacity` (and allocatable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl Default for Resources {
    /// The ancestor's static capacity: 1 CPU and 3Gi.
    fn default() -> Self {
        Resources {
            cpu_millis: 1000,
            memory_bytes: 3 << 30,
        }
    }
}

/// A node taint (`spec.taints`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
    #[serde(rename = "timeAdded")]
    pub added: Option<Micros>,
}

/// What a kubelet reports about its machine (`status.nodeInfo`). Empty until
/// a kubelet pushes its status.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    #[serde(rename = "machineID")]
    pub machine_id: String,
    #[serde(rename = "systemUUID")]
    pub system_uuid: String,
    #[serde(rename = "bootID")]
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    pub container_runtime_version: String,
    pub kubelet_version: String,
    pub kube_proxy_version: String,
    pub operating_system: String,
    pub architecture: String,
}

/// A registered node: the registry's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub uid: String,
    #[serde(rename = "creationTimestamp")]
    pub created: Micros,
    /// `seq` of the newest event that changed this node.
    #[serde(rename = "resourceVersion")]
    pub resource_version: u64,
    /// Where the node came from: `static`, `cloud/<provider>`, or
    /// [`SELF_REGISTERED`].
    pub source: String,
    pub labels: BTreeMap<String, String>,
    /// The operator's annotations (the source annotation is not among them:
    /// it is [`Node::source`]).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(rename = "externalID")]
    pub external_id: String,
    #[serde(rename = "providerID")]
    pub provider_id: String,
    pub capacity: Resources,
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
    pub addresses: Vec<Address>,
    pub conditions: Vec<Condition>,
    #[serde(rename = "nodeInfo", default)]
    pub node_info: NodeInfo,
    /// The rest of what its kubelet reports, kept as given.
    #[serde(default, skip_serializing_if = "Reported::is_empty")]
    pub reported: Reported,
}

impl Node {
    /// The condition of the given type, if the node has one.
    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    /// Mutable access to the condition of the given type.
    pub fn condition_mut(&mut self, kind: &str) -> Option<&mut Condition> {
        self.conditions.iter_mut().find(|c| c.kind == kind)
    }

    /// The Ready status, `Unknown` if the node has none yet.
    pub fn ready(&self) -> ConditionStatus {
        self.condition(READY)
            .map_or(ConditionStatus::Unknown, |c| c.status)
    }

    /// The first address of the preferred kind: InternalIP, then ExternalIP, then any.
    pub fn probe_address(&self) -> Option<&str> {
        let by = |k| self.addresses.iter().find(|a| a.kind == k);
        by(AddressKind::InternalIP)
            .or_else(|| by(AddressKind::ExternalIP))
            .or_else(|| self.addresses.first())
            .map(|a| a.address.as_str())
    }
}

/// A node's Lease in `kube-node-lease`: the cheap heartbeat kubelets renew.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub name: String,
    pub uid: String,
    #[serde(rename = "creationTimestamp")]
    pub created: Micros,
    /// Counts every write of this lease; its resourceVersion.
    pub generation: u64,
    pub holder_identity: Option<String>,
    pub lease_duration_seconds: Option<i32>,
    pub acquire_time: Option<Micros>,
    pub renew_time: Option<Micros>,
    pub lease_transitions: Option<i32>,
    /// `metadata.ownerReferences`: a kubelet names its Node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// An object's owner (`metadata.ownerReferences[]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// An object a node's kubelet keeps through the API beside its Node and
/// Lease (its CSINode, its mirror pods): kept with the node, and deleted
/// with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeObject {
    pub node: String,
    /// The resource, as `kubectl` names it (`csinodes.storage.k8s.io`).
    pub resource: String,
    /// `namespace/name` for a namespaced object, else its name.
    pub name: String,
    /// The seq of the history entry that last wrote it (set by the store
    /// writer); its resourceVersion.
    pub generation: u64,
    /// The object's Kubernetes JSON, as served.
    pub json: String,
}

impl NodeObject {
    /// What identifies it: node, resource, name.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            node: self.node.clone(),
            resource: self.resource.clone(),
            name: self.name.clone(),
        }
    }
}

/// Where a [`NodeObject`] is kept.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub node: String,
    pub resource: String,
    pub name: String,
}

/// The namespace node Leases live in.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// What a node looks like when a source hands it over: its spec, before the
/// registry gives it identity and status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    pub source: String,
    pub labels: BTreeMap<String, String>,
    #[serde(rename = "externalID")]
    pub external_id: String,
    #[serde(rename = "providerID")]
    pub provider_id: String,
    pub capacity: Resources,
    /// Addresses known up front (IPs, provider addresses); a host name
    /// without one is resolved at registration.
    pub addresses: Vec<Address>,
}

/// One entry of the history. `seq` is strictly increasing store-wide.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub time: Micros,
    /// The node the event is about; `None` for controller-wide events.
    pub node: Option<String>,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened. Append-only: the store encodes these by variant index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum EventKind {
    /// The node entered the registry; carries the record as registered.
    Registered {
        #[serde(rename = "record")]
        node: Box<Node>,
    },
    /// The node left the registry.
    Deleted { reason: String },
    /// A condition changed status (or first appeared, when `from` is `None`).
    ConditionChanged {
        condition: String,
        from: Option<ConditionStatus>,
        to: ConditionStatus,
        reason: String,
        message: String,
    },
    /// The node's addresses changed.
    AddressesChanged {
        from: Vec<Address>,
        to: Vec<Address>,
    },
    /// A host name could not be resolved (`ErrQueryIPAddress`).
    AddressLookupFailed { message: String },
    /// A node could not be registered after every retry (`ErrRegistration`).
    RegistrationFailed { message: String },
    /// A controller opened the store. `downtime` is the time since the last
    /// event written by the previous controller, if any.
    ControllerStarted {
        instance: String,
        downtime_seconds: Option<f64>,
        previous_stop_clean: bool,
    },
    /// A controller stopped cleanly.
    ControllerStopped { instance: String },
    /// Heartbeats stopped, but the kubelet answered a probe: the node stays
    /// Ready and this records why.
    ProbeKeptReady { message: String },
    /// The node's taints changed (not-ready / unreachable, shutdown).
    TaintsChanged { from: Vec<Taint>, to: Vec<Taint> },
    /// The node stayed not Ready past `--pod-eviction-timeout` and its pods
    /// are being evicted.
    EvictionStarted { reason: String, mode: EvictionMode },
    /// An eviction finished (the hook's result, or what the mirror did).
    EvictionDone { result: String },
    /// An operator changed the fields operators own (cordon, labels,
    /// annotations, their taints); `by` is who, as the API authenticated them.
    OperatorChanged {
        by: String,
        changes: Vec<NodeChange>,
    },
    /// A source of nodes could not be followed (a nodes file with a typo, an
    /// inventory that does not parse): the registry is left as it is until
    /// it is fixed. Controller-wide; `source` as nodes from it record theirs
    /// (`static`, `cloud/inventory`).
    SourceFailed { source: String, message: String },
    /// The node's kubelet created, replaced or deleted an object kept with
    /// the node (its CSINode, its mirror pods); `summary` says what it holds.
    ObjectChanged {
        resource: String,
        name: String,
        action: String,
        summary: String,
    },
    /// An Event the node's kubelet (its `component`) posted about the node
    /// or an object on it (`object`: `Kind/name` or `Kind/namespace/name`).
    KubeletEvent {
        component: String,
        #[serde(rename = "type")]
        event_type: String,
        reason: String,
        message: String,
        object: String,
    },
    /// A client certificate was issued for the node (the CSR API's signer):
    /// which request, the certificate's serial (hex) and end of validity,
    /// who asked for it and how it was approved.
    CertificateIssued {
        csr: String,
        serial: String,
        not_after: Micros,
        requested_by: String,
        approval: String,
    },
}

/// One change an operator made to a node, in the fields operators own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "field")]
pub enum NodeChange {
    /// Cordoned (`to: true`) or uncordoned.
    #[serde(rename = "spec.unschedulable")]
    Unschedulable { from: bool, to: bool },
    /// A label set (`from: None`), changed, or removed (`to: None`).
    #[serde(rename = "metadata.labels")]
    Label {
        key: String,
        from: Option<String>,
        to: Option<String>,
    },
    /// An annotation set, changed or removed.
    #[serde(rename = "metadata.annotations")]
    Annotation {
        key: String,
        from: Option<String>,
        to: Option<String>,
    },
    /// The taints, all of them, before and after (the controller's own among
    /// them unchanged).
    #[serde(rename = "spec.taints")]
    Taints { from: Vec<Taint>, to: Vec<Taint> },
}

impl NodeChange {
    /// Applies the change to `node` (for replaying history).
    pub fn apply(&self, node: &mut Node) {
        let set = |map: &mut BTreeMap<String, String>, key: &str, to: &Option<String>| match to {
            Some(v) => {
                map.insert(key.to_string(), v.clone());
            }
            None => {
                map.remove(key);
            }
        };
        match self {
            NodeChange::Unschedulable { to, .. } => node.unschedulable = *to,
            NodeChange::Label { key, to, .. } => set(&mut node.labels, key, to),
            NodeChange::Annotation { key, to, .. } => set(&mut node.annotations, key, to),
            NodeChange::Taints { to, .. } => node.taints = to.clone(),
        }
    }
}

impl EventKind {
    /// Whether the event changes the node's record (and so its resourceVersion).
    pub fn changes_node(&self) -> bool {
        matches!(
            self,
            EventKind::Registered { .. }
                | EventKind::Deleted { .. }
                | EventKind::ConditionChanged { .. }
                | EventKind::AddressesChanged { .. }
                | EventKind::TaintsChanged { .. }
                | EventKind::OperatorChanged { .. }
        )
    }

    /// The variant's name, as shown in history tables and JSON.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Registered { .. } => "Registered",
            EventKind::Deleted { .. } => "Deleted",
            EventKind::ConditionChanged { .. } => "ConditionChanged",
            EventKind::AddressesChanged { .. } => "AddressesChanged",
            EventKind::AddressLookupFailed { .. } => "AddressLookupFailed",
            EventKind::RegistrationFailed { .. } => "RegistrationFailed",
            EventKind::ControllerStarted { .. } => "ControllerStarted",
            EventKind::ControllerStopped { .. } => "ControllerStopped",
            EventKind::ProbeKeptReady { .. } => "ProbeKeptReady",
            EventKind::TaintsChanged { .. } => "TaintsChanged",
            EventKind::EvictionStarted { .. } => "EvictionStarted",
            EventKind::EvictionDone { .. } => "EvictionDone",
            EventKind::OperatorChanged { .. } => "OperatorChanged",
            EventKind::SourceFailed { .. } => "SourceFailed",
            EventKind::ObjectChanged { .. } => "ObjectChanged",
            EventKind::KubeletEvent { .. } => "KubeletEvent",
            EventKind::CertificateIssued { .. } => "CertificateIssued",
        }
    }
}
