//! What readers (HTTP, CLI through HTTP) see of the registry: only what is
//! already durable, plus in-memory heartbeat times, and whether the store
//! takes writes.

use std::collections::{btree_map, BTreeMap};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use tokio::sync::watch;

use crate::model::{Lease, Micros, Node, NodeObject, ObjectKey, SourceStatus, StoreHealth};

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
pub type Nodes<'a> = std::iter::Map<btree_map::Values<'a, String, Shown>, fn(&Shown) -> &Node>;

fn as_node(shown: &Shown) -> &Node {
    &shown.node
}

/// A published node as readers take it: the record (shared, not copied),
/// its newest heartbeat, and the stamp of the last change to either.
#[derive(Debug, Clone)]
pub struct Shown {
    pub node: Arc<Node>,
    /// The newest heartbeat held in memory (not durable, not history).
    pub beat: Option<Micros>,
    /// Taken from [`View::stamp`] at each change of the record or its
    /// heartbeat: equal stamps, equal contents.
    pub stamp: u64,
}

/// The published registry. The controller publishes changes after each
/// flush; heartbeat times (not history) as they arrive.
pub struct View {
    /// Shared with the controller's tracked records where they agree.
    nodes: RwLock<BTreeMap<String, Shown>>,
    /// The stamp of the newest change to `nodes`, bumped under its write lock.
    stamp: AtomicU64,
    leases: RwLock<BTreeMap<String, Lease>>,
    /// The objects kept with nodes, by resource, then node and name.
    objects: RwLock<BTreeMap<(String, String, String), NodeObject>>,
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
            stamp: AtomicU64::new(0),
            leases: RwLock::default(),
            objects: RwLock::default(),
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
        f(nodes.values().map(as_node as fn(&Shown) -> &Node))
    }

    /// One published node record as it is held, for the controller to share.
    pub fn shared(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|shown| shown.node.clone())
    }

    /// The stamp of the newest change to a published node or heartbeat:
    /// while it stays the same, so do they.
    pub fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::Acquire)
    }

    /// Every published node, in name order, and the [`View::stamp`] they
    /// are as of: shared records, taken in one short hold of the lock.
    pub fn shown(&self) -> (u64, Vec<Shown>) {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        // Changes are stamped under the write lock: this one is stable here.
        (self.stamp(), nodes.values().cloned().collect())
    }

    /// One published node as [`View::shown`] gives them.
    pub fn shown_node(&self, name: &str) -> Option<Shown> {
        self.nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// The write lock on the nodes, and the stamp for the changes made under it.
    fn change(&self) -> (RwLockWriteGuard<'_, BTreeMap<String, Shown>>, u64) {
        let nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let stamp = self.stamp.fetch_add(1, Ordering::AcqRel) + 1;
        (nodes, stamp)
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

    /// The object kept with a node, by key.
    pub fn node_object(&self, key: &ObjectKey) -> Option<NodeObject> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(key.resource.clone(), key.node.clone(), key.name.clone()))
            .cloned()
    }

    /// Every object of `resource` kept with a node, by node and name.
    pub fn node_objects(&self, resource: &str) -> Vec<NodeObject> {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        let from = (resource.to_string(), String::new(), String::new());
        objects
            .range(from..)
            .take_while(|((r, _, _), _)| r == resource)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// The objects of `resource` kept with `node`, by name.
    pub fn node_objects_on(&self, resource: &str, node: &str) -> Vec<NodeObject> {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        let from = (resource.to_string(), node.to_string(), String::new());
        objects
            .range(from..)
            .take_while(|((r, n, _), _)| r == resource && n == node)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// The object of `resource` named `name`, on whichever node (the first
    /// by node name): found without copying the others.
    pub fn find_node_object(&self, resource: &str, name: &str) -> Option<NodeObject> {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        let from = (resource.to_string(), String::new(), String::new());
        objects
            .range(from..)
            .take_while(|((r, _, _), _)| r == resource)
            .find(|((_, _, n), _)| n == name)
            .map(|(_, o)| o.clone())
    }

    /// How many objects of `resource` are kept with `node`.
    pub fn count_node_objects(&self, resource: &str, node: &str) -> usize {
        let objects = self.objects.read().unwrap_or_else(|p| p.into_inner());
        let from = (resource.to_string(), node.to_string(), String::new());
        objects
            .range(from..)
            .take_while(|((r, n, _), _)| r == resource && n == node)
            .count()
    }

    /// Publishes objects written and removed; the objects of `deleted_nodes`
    /// go with them.
    pub fn publish_objects(
        &self,
        put: impl IntoIterator<Item = NodeObject>,
        deleted: &[ObjectKey],
        deleted_nodes: &[String],
    ) {
        let mut objects = self.objects.write().unwrap_or_else(|p| p.into_inner());
        for o in put {
            objects.insert((o.resource.clone(), o.node.clone(), o.name.clone()), o);
        }
        for k in deleted {
            objects.remove(&(k.resource.clone(), k.node.clone(), k.name.clone()));
        }
        if !deleted_nodes.is_empty() {
            objects.retain(|(_, node, _), _| !deleted_nodes.contains(node));
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
        self.shown()
            .1
            .into_iter()
            .map(|s| (Node::clone(&s.node), s.beat))
            .collect()
    }

    /// One node with its newest heartbeat.
    pub fn get(&self, name: &str) -> Option<(Node, Option<Micros>)> {
        self.shown_node(name)
            .map(|s| (Node::clone(&s.node), s.beat))
    }

    /// Runs `f` over one node and its newest heartbeat without copying the
    /// node (under the read lock: keep `f` short).
    pub fn with_node<R>(
        &self,
        name: &str,
        f: impl FnOnce(&Node, Option<Micros>) -> R,
    ) -> Option<R> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        let shown = nodes.get(name)?;
        Some(f(&shown.node, shown.beat))
    }

    /// Publishes durable changes.
    pub fn publish(&self, changed: impl IntoIterator<Item = Node>, deleted: &[String]) {
        self.publish_shared(changed.into_iter().map(Arc::new), deleted);
    }

    /// Publishes durable changes as records shared with the controller.
    pub fn publish_shared(&self, changed: impl IntoIterator<Item = Arc<Node>>, deleted: &[String]) {
        let (mut nodes, stamp) = self.change();
        for node in changed {
            match nodes.get_mut(&node.name) {
                Some(shown) => {
                    shown.node = node;
                    shown.stamp = stamp;
                }
                None => {
                    let shown = Shown {
                        node,
                        beat: None,
                        stamp,
                    };
                    nodes.insert(shown.node.name.clone(), shown);
                }
            }
        }
        for name in deleted {
            nodes.remove(name);
        }
    }

    /// Publishes a node whose published record differs from `node` in
    /// heartbeat times at most: the times are copied in place, without a
    /// copy of the node (thousands a second at 10k pushing nodes).
    pub fn publish_heartbeats(&self, node: &Node) {
        let (mut nodes, stamp) = self.change();
        match nodes.get_mut(&node.name) {
            Some(Shown {
                node: shown,
                stamp: shown_stamp,
                ..
            }) if shown.resource_version == node.resource_version
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
                *shown_stamp = stamp;
            }
            Some(shown) => {
                shown.node = Arc::new(node.clone());
                shown.stamp = stamp;
            }
            None => {
                let shown = Shown {
                    node: Arc::new(node.clone()),
                    beat: None,
                    stamp,
                };
                nodes.insert(node.name.clone(), shown);
            }
        }
    }

    /// Records heartbeat times of published nodes (not durable; not
    /// history), in place: no allocation per heartbeat.
    pub fn beat<'a>(&self, beats: impl IntoIterator<Item = (&'a str, Micros)>) {
        let (mut nodes, stamp) = self.change();
        for (name, at) in beats {
            if let Some(shown) = nodes.get_mut(name) {
                shown.beat = Some(at);
                shown.stamp = stamp;
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
