//! The mirror's durable outbox: what the API server still has to be told,
//! written in the same transaction as the change it mirrors.
//!
//! One entry per node and kind of work, so entries coalesce: a node that
//! changed ten times while the API server was away is one entry, and the
//! mirror sends the node as it is *now*. An entry records the newest change
//! it stands for (`seq`) and when it was first queued (`enqueued`, kept
//! across coalescing, so the backlog's age is honest). The mirror removes an
//! entry only if no newer change arrived while it was working on it.

use crate::model::{EventKind, EvictionMode, Micros};

/// What the mirror has to do for a node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OutboxKey {
    /// Bring the API server's Node (object, status, taints; or its absence)
    /// to the registry's record.
    Node(String),
    /// Delete the node's pods (`--eviction-mode delete-pods`).
    EvictPods(String),
}

/// The objects kept with a node that are mirrored with it: its CSINode.
/// (Mirror pods are not: an API server has those from its own kubelets.)
pub const MIRRORED_OBJECTS: &str = "csinodes.storage.k8s.io";

const NODE: u8 = 1;
const EVICT_PODS: u8 = 2;

impl OutboxKey {
    pub fn node(&self) -> &str {
        match self {
            OutboxKey::Node(n) | OutboxKey::EvictPods(n) => n,
        }
    }

    /// The work's name, as shown by `mirror status`.
    pub fn kind(&self) -> &'static str {
        match self {
            OutboxKey::Node(_) => "Node",
            OutboxKey::EvictPods(_) => "EvictPods",
        }
    }

    /// The sled key: a kind byte, then the node name.
    pub fn encode(&self) -> Vec<u8> {
        let (code, name) = match self {
            OutboxKey::Node(n) => (NODE, n),
            OutboxKey::EvictPods(n) => (EVICT_PODS, n),
        };
        let mut key = Vec::with_capacity(1 + name.len());
        key.push(code);
        key.extend_from_slice(name.as_bytes());
        key
    }

    pub fn decode(key: &[u8]) -> Option<OutboxKey> {
        let (&code, name) = key.split_first()?;
        let name = std::str::from_utf8(name).ok()?.to_string();
        match code {
            NODE => Some(OutboxKey::Node(name)),
            EVICT_PODS => Some(OutboxKey::EvictPods(name)),
            _ => None,
        }
    }

    /// The outbox work an event asks for: the node's object for every change
    /// to its record, and to its CSINode (mirrored with the Node, by the
    /// same work); its pods for a `delete-pods` eviction, and for a node
    /// deleted from the registry (nothing else would ever remove them).
    pub fn for_event(node: &str, kind: &EventKind) -> Vec<(OutboxKey, Option<String>)> {
        let mut work = Vec::new();
        let csinode = matches!(kind, EventKind::ObjectChanged { resource, .. }
            if resource == MIRRORED_OBJECTS);
        if kind.changes_node() || csinode {
            work.push((OutboxKey::Node(node.to_string()), None));
        }
        match kind {
            EventKind::EvictionStarted {
                reason,
                mode: EvictionMode::DeletePods,
            } => {
                work.push((OutboxKey::EvictPods(node.to_string()), Some(reason.clone())));
            }
            EventKind::Deleted { reason } => work.push((
                OutboxKey::EvictPods(node.to_string()),
                Some(format!("the node was deleted: {reason}")),
            )),
            _ => {}
        }
        work
    }
}

/// One queued piece of work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// The newest change this entry stands for.
    pub seq: u64,
    /// When the oldest change it stands for was queued.
    pub enqueued: Micros,
    /// Why (an eviction's reason).
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sort_by_kind_then_name() {
        for key in [
            OutboxKey::Node("edge-1".into()),
            OutboxKey::EvictPods("10.0.0.1".into()),
        ] {
            assert_eq!(OutboxKey::decode(&key.encode()), Some(key));
        }
        assert!(OutboxKey::Node("b".into()).encode() < OutboxKey::EvictPods("a".into()).encode());
        assert_eq!(OutboxKey::decode(&[9, b'a']), None);
        assert_eq!(OutboxKey::decode(&[]), None);
    }

    #[test]
    fn only_node_changes_and_pod_evictions_are_mirrored() {
        let taints = EventKind::TaintsChanged {
            from: vec![],
            to: vec![],
        };
        assert_eq!(
            OutboxKey::for_event("a", &taints),
            vec![(OutboxKey::Node("a".into()), None)]
        );
        let evict = |mode: EvictionMode| EventKind::EvictionStarted {
            reason: "r".into(),
            mode,
        };
        assert_eq!(
            OutboxKey::for_event("a", &evict(EvictionMode::DeletePods)),
            vec![(OutboxKey::EvictPods("a".into()), Some("r".into()))]
        );
        assert_eq!(
            OutboxKey::for_event("a", &evict(EvictionMode::Taint)),
            vec![]
        );
        let deleted = EventKind::Deleted {
            reason: "gone from the inventory".into(),
        };
        assert_eq!(
            OutboxKey::for_event("a", &deleted),
            vec![
                (OutboxKey::Node("a".into()), None),
                (
                    OutboxKey::EvictPods("a".into()),
                    Some("the node was deleted: gone from the inventory".into())
                )
            ]
        );
        let probe = EventKind::ProbeKeptReady {
            message: "m".into(),
        };
        assert_eq!(OutboxKey::for_event("a", &probe), vec![]);
        // A CSINode goes up with its Node; a mirror pod does not.
        let object = |resource: &str| EventKind::ObjectChanged {
            resource: resource.into(),
            name: "a".into(),
            action: "updated".into(),
            summary: String::new(),
        };
        assert_eq!(
            OutboxKey::for_event("a", &object("csinodes.storage.k8s.io")),
            vec![(OutboxKey::Node("a".into()), None)]
        );
        assert_eq!(OutboxKey::for_event("a", &object("pods")), vec![]);
    }
}
