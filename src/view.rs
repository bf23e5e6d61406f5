//! What readers (HTTP, CLI through HTTP) see of the registry: only what is
//! already durable, plus in-memory heartbeat times, and whether the store
//! takes writes.

use std::collections::{btree_map, BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::model::{Lease, Micros, Node, SourceStatus, StoreHealth};

/// A node record the controller shares with the view: while the two agree
/// (a probed fleet's records change only at transitions) the record is held
/// once, not twice (about 1.2 KiB a node). Changing it through `DerefMut`
/// copies it first if the view still shows it, so readers never see a
/// change before it is durable. `clone()` gives an owned [`Node`].
#[derive(Debug, PartialEq)]
pub struct SharedNode(Arc<Node>);

impl SharedNode {
    /// The record, to publish as it is.
    pub fn share(&self) -> Arc<Node> {
        self.0.clone()
    }
}

impl From<Node> for SharedNode {
    fn from(node: Node) -> Self {
        SharedNode(Arc::new(node))
    }
}

impl From<Arc<Node>> for SharedNode {
    fn from(node: Arc<Node>) -> Self {
        SharedNode(node)
    }
}

impl Deref for SharedNode {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.0
    }
}

impl DerefMut for SharedNode {
    fn deref_mut(&mut self) -> &mut Node {
        Arc::make_mut(&mut self.0)
    }
}

/// The published nodes, in name order (see [`View::with_nodes`]).
pub type Nodes<'a> =
    std::iter::Map<btree_map::Values<'a, String, Arc<Node>>, fn(&Arc<Node>) -> &Node>;

fn as_node(node: &Arc<Node>) -> &Node {
    node
}

/// The published registry. The controller publishes changes after each
/// flush; heartbeat times (not history) as they arrive.
pub struct View {
    /// Shared with the controller's tracked records where they agree.
    nodes: RwLock<BTreeMap<String, Arc<Node>>>,
    heartbeats: RwLock<HashMap<String, Micros>>,
    leases: RwLock<BTreeMap<String, Lease>>,
    source: RwLock<Option<SourceStatus>>,
    /// The newest durable event seq, for watchers.
    durable: watch::Sender<u64>,
    /// Whether the store takes writes; the store writer keeps it.
    store: watch::Sender<StoreHealth>,
}

impl Default for View {
    fn default() -> Self {
        View {
            nodes: RwLock::default(),
            heartbeats: RwLock::default(),
            leases: RwLock::default(),
            source: RwLock::default(),
            durable: watch::channel(0).0,
            store: watch::channel(StoreHealth::Writable).0,
        }
    }
}

impl View {
    /// Announces that events up to `seq` are durable.
    pub fn advance(&self, seq: u64) {
        self.durable.send_if_modified(|current| {
            let newer = seq > *current;
            if newer {
                *current = seq;
            }
            newer
        });
    }

    /// The newest seq announced durable: the view shows every change up to it.
    pub fn published(&self) -> u64 {
        *self.durable.borrow()
    }

    /// Follows the durable seq.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.durable.subscribe()
    }

    /// `Ok` while the store takes writes; else why it does not (a disk short
    /// of space, a failed write), in words for `/readyz`. Reads go on either way.
    pub fn store_writable(&self) -> Result<(), String> {
        self.store.borrow().writable()
    }

    /// Follows whether the store takes writes.
    pub fn store_health(&self) -> watch::Receiver<StoreHealth> {
        self.store.subscribe()
    }

    /// The store writer's word on whether the store takes writes.
    pub(crate) fn store_health_sender(&self) -> &watch::Sender<StoreHealth> {
        &self.store
    }

    /// Runs `f` over every published node, in name order, without copying them.
    pub fn with_nodes<R>(&self, f: impl FnOnce(Nodes<'_>) -> R) -> R {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        f(nodes.values().map(as_node as fn(&Arc<Node>) -> &Node))
    }

    /// One published node record as it is held, for the controller to share.
    pub fn shared(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// How the cloud or inventory source is doing, if there is one.
    pub fn source_status(&self) -> Option<SourceStatus> {
        self.source
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_source_status(&self, status: SourceStatus) {
        *self.source.write().unwrap_or_else(|p| p.into_inner()) = Some(status);
    }

    /// Every Lease, by name.
    pub fn leases(&self) -> Vec<Lease> {
        self.leases
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Whether node `name` has a Lease of its own, without a copy of it
    /// (asked on every renewal).
    pub fn has_lease(&self, name: &str) -> bool {
        self.leases
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(name)
    }

    /// One node's Lease.
    pub fn lease(&self, name: &str) -> Option<Lease> {
        self.leases
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Publishes lease changes.
    pub fn publish_leases(&self, changed: impl IntoIterator<Item = Lease>, deleted: &[String]) {
        let mut leases = self.leases.write().unwrap_or_else(|p| p.into_inner());
        for lease in changed {
            leases.insert(lease.name.clone(), lease);
        }
        for name in deleted {
            leases.remove(name);
        }
    }

    /// Publishes a Lease that differs from the published one in its
    /// renewal (time and generation) at most, in place.
    pub fn publish_renewal(&self, lease: &Lease) {
        let mut leases = self.leases.write().unwrap_or_else(|p| p.into_inner());
        match leases.get_mut(&lease.name) {
            Some(shown) => {
                shown.renew_time = lease.renew_time;
                shown.generation = lease.generation;
            }
            None => {
                leases.insert(lease.name.clone(), lease.clone());
            }
        }
    }

    /// Every node with its newest heartbeat, by name.
    pub fn list(&self) -> Vec<(Node, Option<Micros>)> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        let beats = self.heartbeats.read().unwrap_or_else(|p| p.into_inner());
        nodes
            .values()
            .map(|n| (Node::clone(n), beats.get(&n.name).copied()))
            .collect()
    }

    /// One node with its newest heartbeat.
    pub fn get(&self, name: &str) -> Option<(Node, Option<Micros>)> {
        let node = self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|n| Node::clone(n))?;
        let beat = self
            .heartbeats
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied();
        Some((node, beat))
    }

    /// Runs `f` over one node and its newest heartbeat without copying the
    /// node (under the read lock: keep `f` short).
    pub fn with_node<R>(
        &self,
        name: &str,
        f: impl FnOnce(&Node, Option<Micros>) -> R,
    ) -> Option<R> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        let node = nodes.get(name)?;
        let beat = self
            .heartbeats
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied();
        Some(f(node, beat))
    }

    /// Publishes durable changes.
    pub fn publish(&self, changed: impl IntoIterator<Item = Node>, deleted: &[String]) {
        self.publish_shared(changed.into_iter().map(Arc::new), deleted);
    }

    /// Publishes durable changes as records shared with the controller.
    pub fn publish_shared(&self, changed: impl IntoIterator<Item = Arc<Node>>, deleted: &[String]) {
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        for node in changed {
            nodes.insert(node.name.clone(), node);
        }
        for name in deleted {
            nodes.remove(name);
        }
        drop(nodes);
        if !deleted.is_empty() {
            let mut beats = self.heartbeats.write().unwrap_or_else(|p| p.into_inner());
            for name in deleted {
                beats.remove(name);
            }
        }
    }

    /// Publishes a node whose published record differs from `node` in
    /// heartbeat times at most: the times are copied in place, without a
    /// copy of the node (thousands a second at 10k pushing nodes).
    pub fn publish_heartbeats(&self, node: &Node) {
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        match nodes.get_mut(&node.name) {
            Some(shown)
                if shown.resource_version == node.resource_version
                    && shown.conditions.len() == node.conditions.len()
                    && shown
                        .conditions
                        .iter()
                        .zip(&node.conditions)
                        .all(|(a, b)| a.kind == b.kind) =>
            {
                // Copied first if the controller still shares it (once per
                // node after each write, not per heartbeat).
                let shown = Arc::make_mut(shown);
                for (shown, beat) in shown.conditions.iter_mut().zip(&node.conditions) {
                    shown.last_heartbeat = beat.last_heartbeat;
                }
            }
            Some(shown) => *shown = Arc::new(node.clone()),
            None => {
                nodes.insert(node.name.clone(), Arc::new(node.clone()));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::tests::sample_node;

    #[test]
    fn heartbeats_folded_into_a_shared_record_leave_the_controllers_alone() {
        let view = View::default();
        let held: SharedNode = sample_node().into();
        view.publish_shared([held.share()], &[]);
        let mut newer = held.clone();
        newer.conditions[0].last_heartbeat = Micros(99_000_000);
        view.publish_heartbeats(&newer);
        let shown = view.get(&held.name).unwrap().0;
        assert_eq!(shown.conditions[0].last_heartbeat, Micros(99_000_000));
        assert_ne!(held.conditions[0].last_heartbeat, Micros(99_000_000));
        assert!(!Arc::ptr_eq(
            &view.shared(&held.name).unwrap(),
            &held.share()
        ));
    }
}
