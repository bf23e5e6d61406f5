//! What readers (HTTP, CLI through HTTP) see of the registry: only what is
//! already durable, plus in-memory heartbeat times.

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;

use crate::model::{Micros, Node};

/// The published registry. The controller publishes after each flush.
#[derive(Default)]
pub struct View {
    nodes: RwLock<BTreeMap<String, Node>>,
    heartbeats: RwLock<HashMap<String, Micros>>,
}

impl View {
    /// Every node with its newest heartbeat, by name.
    pub fn list(&self) -> Vec<(Node, Option<Micros>)> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        let beats = self.heartbeats.read().unwrap_or_else(|p| p.into_inner());
        nodes
            .values()
            .map(|n| (n.clone(), beats.get(&n.name).copied()))
            .collect()
    }

    /// One node with its newest heartbeat.
    pub fn get(&self, name: &str) -> Option<(Node, Option<Micros>)> {
        let node = self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)?
            .clone();
        let beat = self
            .heartbeats
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied();
        Some((node, beat))
    }

    pub fn len(&self) -> usize {
        self.nodes.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Publishes durable changes.
    pub fn publish(&self, changed: impl IntoIterator<Item = Node>, deleted: &[String]) {
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        for node in changed {
            nodes.insert(node.name.clone(), node);
        }
        for name in deleted {
            nodes.remove(name);
        }
    }

    /// Records heartbeat times (not durable; not history).
    pub fn beat<'a>(&self, beats: impl IntoIterator<Item = (&'a str, Micros)>) {
        let mut map = self.heartbeats.write().unwrap_or_else(|p| p.into_inner());
        for (name, at) in beats {
            // Updating in place: no allocation per heartbeat on the hot path.
            match map.get_mut(name) {
                Some(slot) => *slot = at,
                None => {
                    map.insert(name.to_string(), at);
                }
            }
        }
    }
}
