//! The one encoder of node records, straight from the node: the bytes of
//! `StoredNode::V3` (see [`super::records`]) without first copying every
//! string of the node into that owned record. The store writes one per
//! status change, thousands in a burst. A node with
//! something its kubelet reported beyond that ([`Node::reported`]) is a
//! `V4`: the same `V3` fields, then that part, copied into its record.
//!
//! postcard writes a struct as its fields in order and a newtype variant
//! as its index then its value, so these borrowed mirrors of `NodeV3`,
//! `NodeV2`, `NodeV1`, `NodeInfoV1`, `TaintV1`, `AddressV1` and
//! `ConditionV1` write the same bytes; the tests compare them with the
//! owned encoding, and `records`' golden bytes pin both.

use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;

use super::records::{address_code, status_code, NodeV3, ReportedV1};
use crate::model::{Address, Condition, Node, NodeInfo, Taint};
use crate::serialize::Each;

/// `StoredNode`'s variant index of `V3`, written for a node with nothing in
/// [`Node::reported`] (so a store of such nodes is what it was before `V4`).
const STORED_NODE_V3: u32 = 2;
/// `StoredNode`'s variant index of `V4`, written for the others.
const STORED_NODE_V4: u32 = 3;

/// The node's record, as [`super::records::encode_node`] stores it.
pub(super) fn encode(node: &Node) -> Vec<u8> {
    // Encoding borrowed, well-formed values into a Vec cannot fail.
    postcard::to_allocvec(&Stored(node)).expect("postcard encodes a node record into a Vec")
}

/// The node's `NodeV3` record, read back from the bytes this encoder
/// writes for it: what a `RegisteredV3` event holds. Registrations are
/// rare; the round trip keeps one encoder for nodes and events alike.
pub(super) fn v3_record(node: &Node) -> NodeV3 {
    let bytes =
        postcard::to_allocvec(&V3(node)).expect("postcard encodes a node record into a Vec");
    postcard::from_bytes(&bytes).expect("a NodeV3 reads the bytes written for it")
}

struct Stored<'a>(&'a Node);

impl Serialize for Stored<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The Box around `NodeV3` or `NodeV4` adds nothing to the bytes.
        if self.0.reported.is_empty() {
            return s.serialize_newtype_variant("StoredNode", STORED_NODE_V3, "V3", &V3(self.0));
        }
        s.serialize_newtype_variant("StoredNode", STORED_NODE_V4, "V4", &V4(self.0))
    }
}

struct V4<'a>(&'a Node);

impl Serialize for V4<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("NodeV4", 2)?;
        st.serialize_field("v3", &V3(self.0))?;
        // Written only when a kubelet's report changed: its copy costs little.
        st.serialize_field("reported", &ReportedV1::from(&self.0.reported))?;
        st.end()
    }
}

struct V3<'a>(&'a Node);

impl Serialize for V3<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("NodeV3", 2)?;
        st.serialize_field("v2", &V2(self.0))?;
        st.serialize_field("annotations", &Pairs(&self.0.annotations))?;
        st.end()
    }
}

struct V2<'a>(&'a Node);

impl Serialize for V2<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("NodeV2", 2)?;
        st.serialize_field("v1", &V1(self.0))?;
        st.serialize_field("node_info", &Info(&self.0.node_info))?;
        st.end()
    }
}

struct V1<'a>(&'a Node);

impl Serialize for V1<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = self.0;
        let mut st = s.serialize_struct("NodeV1", 14)?;
        st.serialize_field("name", &n.name)?;
        st.serialize_field("uid", &n.uid)?;
        st.serialize_field("created", &n.created.0)?;
        st.serialize_field("resource_version", &n.resource_version)?;
        st.serialize_field("source", &n.source)?;
        st.serialize_field("labels", &Pairs(&n.labels))?;
        st.serialize_field("external_id", &n.external_id)?;
        st.serialize_field("provider_id", &n.provider_id)?;
        st.serialize_field("cpu_millis", &n.capacity.cpu_millis)?;
        st.serialize_field("memory_bytes", &n.capacity.memory_bytes)?;
        st.serialize_field("unschedulable", &n.unschedulable)?;
        st.serialize_field("taints", &Each(&n.taints, TaintV1))?;
        st.serialize_field("addresses", &Each(&n.addresses, AddressV1))?;
        st.serialize_field("conditions", &Each(&n.conditions, ConditionV1))?;
        st.end()
    }
}

/// A map stored as a list of `(key, value)` pairs, in key order.
struct Pairs<'a>(&'a std::collections::BTreeMap<String, String>);

impl Serialize for Pairs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

struct Info<'a>(&'a NodeInfo);

impl Serialize for Info<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let i = self.0;
        let mut st = s.serialize_struct("NodeInfoV1", 10)?;
        st.serialize_field("machine_id", &i.machine_id)?;
        st.serialize_field("system_uuid", &i.system_uuid)?;
        st.serialize_field("boot_id", &i.boot_id)?;
        st.serialize_field("kernel_version", &i.kernel_version)?;
        st.serialize_field("os_image", &i.os_image)?;
        st.serialize_field("container_runtime_version", &i.container_runtime_version)?;
        st.serialize_field("kubelet_version", &i.kubelet_version)?;
        st.serialize_field("kube_proxy_version", &i.kube_proxy_version)?;
        st.serialize_field("operating_system", &i.operating_system)?;
        st.serialize_field("architecture", &i.architecture)?;
        st.end()
    }
}

struct TaintV1<'a>(&'a Taint);

impl Serialize for TaintV1<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut st = s.serialize_struct("TaintV1", 4)?;
        st.serialize_field("key", &t.key)?;
        st.serialize_field("value", &t.value)?;
        st.serialize_field("effect", &t.effect)?;
        st.serialize_field("added", &t.added.map(|m| m.0))?;
        st.end()
    }
}

struct AddressV1<'a>(&'a Address);

impl Serialize for AddressV1<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("AddressV1", 2)?;
        st.serialize_field("kind", &address_code(self.0.kind))?;
        st.serialize_field("address", &self.0.address)?;
        st.end()
    }
}

struct ConditionV1<'a>(&'a Condition);

impl Serialize for ConditionV1<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut st = s.serialize_struct("ConditionV1", 6)?;
        st.serialize_field("kind", &c.kind)?;
        st.serialize_field("status", &status_code(c.status))?;
        st.serialize_field("last_heartbeat", &c.last_heartbeat.0)?;
        st.serialize_field("last_transition", &c.last_transition.0)?;
        st.serialize_field("reason", &c.reason)?;
        st.serialize_field("message", &c.message)?;
        st.end()
    }
}
