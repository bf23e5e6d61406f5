//! What operators write to nodes (`kubectl cordon`, `label`, `annotate`,
//! `taint`, `edit`, `delete node`, and the same `nodekeeper` subcommands):
//! the fields they own, folded into a node as a pure function, and the rule
//! for deleting a node. The controller task commits the result; a stopped
//! store commits it the same way (see [`plan_edit`], [`plan_delete`]).
//!
//! Operators own `spec.unschedulable`, their taints (any the controller does
//! not manage), labels and annotations. The controller owns conditions,
//! addresses, its managed taints and the source annotation; it never
//! removes or rewrites an operator's taint.

use std::collections::BTreeSet;

use super::{Controller, PushError};
pub use crate::model::{is_managed_taint, OperatorFields, MANAGED_TAINTS};
use crate::model::{EventKind, Micros, Node, NodeChange, Taint};
use crate::store::{Batch, Store};
use crate::validation::Invalid;

/// Preconditions of a delete (`DeleteOptions.preconditions`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<u64>,
}

/// Which nodes the configured sources list: a node listed would come back
/// at the next sync, so it is not deleted by hand.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceListing {
    /// Names on `--nodes`, `--nodes-file` (and a simulated fleet).
    #[serde(rename = "static")]
    pub static_names: BTreeSet<String>,
    /// The cloud or inventory source followed (`cloud/<provider>`), if any:
    /// every node from it is listed by it.
    pub cloud: Option<String>,
}

/// Where the last running controller's [`SourceListing`] is kept, for
/// deletes on a stopped store.
const LISTING_KEY: &[u8] = b"source_listing";

impl SourceListing {
    /// Why a source would bring `node` back, if one would.
    pub fn lists(&self, node: &Node) -> Option<String> {
        if node.source == crate::source::static_list::STATIC_SOURCE
            && self.static_names.contains(&node.name)
        {
            return Some(format!(
                "nodes {:?} is listed by the static node list (--nodes, --nodes-file or --simulate) \
                 and would be registered again at the next sync: remove it from that list \
                 instead, and the registry deletes it by itself (its history is kept)",
                node.name
            ));
        }
        if self.cloud.as_deref() == Some(node.source.as_str()) {
            return Some(format!(
                "nodes {:?} is listed by {} and would be registered again at the next sync: \
                 remove the machine from the source (or exclude it with --match) instead, and the \
                 registry deletes it by itself (its history is kept)",
                node.name, node.source
            ));
        }
        None
    }

    /// Keeps the listing in the store's meta tree (durable with the next flush).
    pub fn save(&self, store: &Store) -> Result<(), crate::store::StoreError> {
        let bytes = serde_json::to_vec(self).expect("a listing serializes");
        store.meta_put(LISTING_KEY, &bytes)
    }

    /// The listing the last running controller kept; `None` if none did.
    pub fn load(store: &Store) -> Result<Option<SourceListing>, crate::store::StoreError> {
        Ok(store
            .meta_get(LISTING_KEY)?
            .and_then(|bytes| serde_json::from_slice(&bytes).ok()))
    }

    /// Without a record of what the sources list, a node from a source is
    /// taken as still listed: only a self-registered one may go.
    pub fn assumed_for(node: &Node) -> SourceListing {
        let mut listing = SourceListing::default();
        if node.source == crate::source::static_list::STATIC_SOURCE {
            listing.static_names.insert(node.name.clone());
        } else if node.source.starts_with("cloud/") {
            listing.cloud = Some(node.source.clone());
        }
        listing
    }
}

/// The key, value and effect of a taint: what makes two taints the same.
fn taint_id(t: &Taint) -> (&str, &str, &str) {
    (&t.key, &t.value, &t.effect)
}

/// Folds an operator's write into `node`: the new record and what changed,
/// or `None` when nothing did. The controller's taints stay as they are,
/// after the operator's; an operator taint kept from before keeps its
/// `timeAdded`; a new `NoExecute` taint without one gets `now`, as
/// kube-apiserver does.
pub fn fold(node: &Node, fields: OperatorFields, now: Micros) -> Option<(Node, Vec<NodeChange>)> {
    let mut next = node.clone();
    let mut changes = Vec::new();
    if node.unschedulable != fields.unschedulable {
        changes.push(NodeChange::Unschedulable {
            from: node.unschedulable,
            to: fields.unschedulable,
        });
        next.unschedulable = fields.unschedulable;
    }
    type ChangeOf = fn(String, Option<String>, Option<String>) -> NodeChange;
    let label: ChangeOf = |key, from, to| NodeChange::Label { key, from, to };
    let annotation: ChangeOf = |key, from, to| NodeChange::Annotation { key, from, to };
    let maps = [
        (&node.labels, &fields.labels, label),
        (&node.annotations, &fields.annotations, annotation),
    ];
    for (was, is, change) in maps {
        let keys: BTreeSet<&String> = was.keys().chain(is.keys()).collect();
        for key in keys {
            let (from, to) = (was.get(key), is.get(key));
            if from != to {
                changes.push(change(key.clone(), from.cloned(), to.cloned()));
            }
        }
    }
    next.labels = fields.labels.clone();
    next.annotations = fields.annotations.clone();

    let theirs: Vec<&Taint> = node
        .taints
        .iter()
        .filter(|t| !is_managed_taint(&t.key))
        .collect();
    let same = theirs.len() == fields.taints.len()
        && theirs
            .iter()
            .zip(&fields.taints)
            .all(|(a, b)| taint_id(a) == taint_id(b));
    if !same {
        let mut taints: Vec<Taint> = fields
            .taints
            .into_iter()
            .map(|mut t| {
                let kept = theirs
                    .iter()
                    .find(|old| taint_id(old) == taint_id(&t))
                    .and_then(|old| old.added);
                t.added = kept.or(t.added).or_else(|| {
                    // Only NoExecute taints carry the time, as upstream.
                    (t.effect == "NoExecute").then_some(now)
                });
                t
            })
            .collect();
        taints.extend(
            node.taints
                .iter()
                .filter(|t| is_managed_taint(&t.key))
                .cloned(),
        );
        changes.push(NodeChange::Taints {
            from: node.taints.clone(),
            to: taints.clone(),
        });
        next.taints = taints;
    }
    (!changes.is_empty()).then_some((next, changes))
}

/// Checks an operator write against the node it is based on and folds it:
/// the batch to commit, or `None` when the write changes nothing. A write
/// that would take the node past [`crate::validation::MAX_NODE_BYTES`] is
/// refused.
pub fn plan_edit(
    node: &Node,
    fields: OperatorFields,
    expected_version: Option<u64>,
    by: &str,
    now: Micros,
) -> Result<Option<Batch>, PushError> {
    if expected_version.is_some_and(|v| v != node.resource_version) {
        return Err(PushError::conflict("nodes", &node.name));
    }
    let Some((next, changes)) = fold(node, fields, now) else {
        return Ok(None);
    };
    crate::validation::node_size(&next, Some(node)).map_err(|e| Invalid::node(&node.name, e))?;
    let mut batch = Batch::new(now);
    batch.record(
        next,
        [EventKind::OperatorChanged {
            by: by.to_string(),
            changes,
        }],
    );
    Ok(Some(batch))
}

/// Checks a delete against its preconditions and the sources: the batch
/// that deletes the node (its history stays), or why not.
pub fn plan_delete(
    node: &Node,
    preconditions: &Preconditions,
    listing: &SourceListing,
    by: &str,
    now: Micros,
) -> Result<Batch, PushError> {
    if let Some(uid) = preconditions.uid.as_deref().filter(|u| *u != node.uid) {
        return Err(PushError::PreconditionFailed(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            node.uid
        )));
    }
    if let Some(rv) = preconditions
        .resource_version
        .filter(|rv| *rv != node.resource_version)
    {
        return Err(PushError::PreconditionFailed(format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
            node.resource_version
        )));
    }
    if let Some(reason) = listing.lists(node) {
        return Err(PushError::StillListed(reason));
    }
    let mut batch = Batch::new(now);
    batch.delete(&node.name, &format!("deleted by {by}"));
    Ok(batch)
}

impl Controller {
    /// The sources' listing as this controller follows them now.
    pub(super) fn source_listing(&self) -> SourceListing {
        SourceListing {
            static_names: self.static_list.names(),
            cloud: self
                .config
                .cloud
                .as_ref()
                .map(|c| format!("cloud/{}", c.provider.name())),
        }
    }

    /// An operator's write: durable, with its event, before the answer.
    pub(super) async fn operator_edit(
        &mut self,
        name: &str,
        fields: OperatorFields,
        expected_version: Option<u64>,
        by: &str,
    ) -> Result<Node, PushError> {
        let Some(tracked) = self.tracked.get(name) else {
            return Err(PushError::not_found("nodes", name));
        };
        // A write on its way gets a newer version than any a client has seen.
        if expected_version.is_some() && self.is_ahead(name) {
            return Err(PushError::conflict("nodes", name));
        }
        let current = tracked.node.clone();
        let Some(batch) = plan_edit(&current, fields, expected_version, by, Micros::now())? else {
            return Ok(current);
        };
        let written = self.commit(batch).await?;
        for e in &written.events {
            if let EventKind::OperatorChanged { changes, .. } = &e.kind {
                tracing::info!(node = %name, by, "{}", crate::model::describe_changes(changes));
            }
        }
        Ok(written.nodes.into_iter().next().unwrap_or(current))
    }

    /// An operator's delete: refused for a node a source still lists.
    pub(super) async fn operator_delete(
        &mut self,
        name: &str,
        preconditions: Preconditions,
        by: &str,
    ) -> Result<Node, PushError> {
        let Some(tracked) = self.tracked.get(name) else {
            return Err(PushError::not_found("nodes", name));
        };
        let node = tracked.node.clone();
        let batch = plan_delete(
            &node,
            &preconditions,
            &self.source_listing(),
            by,
            Micros::now(),
        )?;
        self.commit(batch).await?;
        tracing::info!(node = %name, by, "deleted by an operator (its history stays)");
        self.forget(&[name.to_string()]);
        Ok(node)
    }

    /// Drops nodes the store no longer has from every piece of state.
    pub(super) fn forget(&mut self, gone: &[String]) {
        for name in gone {
            self.tracked.remove(name);
            self.leases.remove(name);
            self.dirty_leases.remove(name);
            if let Err(e) = self.store.delete_lease(name) {
                tracing::warn!(node = %name, "its lease could not be removed: {e}");
            }
        }
        self.view.publish_leases([], gone);
        self.update_gauges();
    }
}

/// Writes to a stopped store through the same checks as the API: the node
/// as it is now, the write folded into it, the batch written and flushed.
pub fn edit_stopped_store(
    store: &Store,
    name: &str,
    write: impl FnOnce(&Node) -> Result<(OperatorFields, Option<u64>), PushError>,
    by: &str,
) -> Result<(Node, bool), PushError> {
    let node = store
        .node(name)?
        .ok_or_else(|| PushError::not_found("nodes", name))?;
    let (fields, expected) = write(&node)?;
    let Some(batch) = plan_edit(&node, fields, expected, by, Micros::now())? else {
        return Ok((node, false));
    };
    let written = store.write(batch)?;
    store.flush_blocking()?;
    Ok((written.nodes.into_iter().next().unwrap_or(node), true))
}

/// Deletes from a stopped store, with the sources the last running
/// controller followed (see [`SourceListing::load`]).
pub fn delete_in_stopped_store(
    store: &Store,
    name: &str,
    preconditions: &Preconditions,
    by: &str,
) -> Result<Node, PushError> {
    let node = store
        .node(name)?
        .ok_or_else(|| PushError::not_found("nodes", name))?;
    let listing = SourceListing::load(store)?.unwrap_or_else(|| SourceListing::assumed_for(&node));
    let batch = plan_delete(&node, preconditions, &listing, by, Micros::now())?;
    store.write(batch)?;
    store.delete_lease(name)?;
    store.flush_blocking()?;
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TAINT_UNREACHABLE;
    use crate::store::records::tests::sample_node;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: effect.into(),
            added: None,
        }
    }

    fn fields_of(node: &Node) -> OperatorFields {
        OperatorFields {
            labels: node.labels.clone(),
            annotations: node.annotations.clone(),
            unschedulable: node.unschedulable,
            taints: node
                .taints
                .iter()
                .filter(|t| !is_managed_taint(&t.key))
                .cloned()
                .collect(),
        }
    }

    fn node() -> Node {
        let mut n = sample_node();
        n.taints = vec![taint("dedicated", "NoSchedule"), {
            let mut t = taint(TAINT_UNREACHABLE, "NoSchedule");
            t.added = Some(Micros(5));
            t
        }];
        n
    }

    #[test]
    fn the_same_fields_change_nothing() {
        let n = node();
        assert_eq!(fold(&n, fields_of(&n), Micros(9)), None);
        // Times the operator sends for their own taints do not count as a change.
        let mut f = fields_of(&n);
        f.taints[0].added = Some(Micros(77));
        assert_eq!(fold(&n, f, Micros(9)), None);
    }

    #[test]
    fn a_cordon_is_one_change() {
        let n = node();
        let mut f = fields_of(&n);
        f.unschedulable = true;
        let (next, changes) = fold(&n, f, Micros(9)).unwrap();
        assert!(next.unschedulable);
        assert_eq!(
            changes,
            vec![NodeChange::Unschedulable {
                from: false,
                to: true
            }]
        );
        assert_eq!(next.taints, n.taints, "taints untouched");
    }

    #[test]
    fn labels_and_annotations_changes_are_listed_by_key() {
        let n = node();
        let mut f = fields_of(&n);
        f.labels.remove("zone");
        f.labels.insert("maintenance".into(), "true".into());
        f.annotations.insert("owner".into(), "ops".into());
        let (next, changes) = fold(&n, f, Micros(9)).unwrap();
        assert_eq!(
            changes,
            vec![
                NodeChange::Label {
                    key: "maintenance".into(),
                    from: None,
                    to: Some("true".into())
                },
                NodeChange::Label {
                    key: "zone".into(),
                    from: Some("a".into()),
                    to: None
                },
                NodeChange::Annotation {
                    key: "owner".into(),
                    from: None,
                    to: Some("ops".into())
                },
            ]
        );
        assert_eq!(next.labels["maintenance"], "true");
        assert!(!next.labels.contains_key("zone"));
        // Replaying the changes gives the same record.
        let mut replayed = n.clone();
        for c in &changes {
            c.apply(&mut replayed);
        }
        assert_eq!(replayed, next);
    }

    #[test]
    fn operator_taints_sit_before_the_managed_ones_which_stay() {
        let n = node();
        let mut f = fields_of(&n);
        f.taints.push(taint("gpu", "NoExecute"));
        let (next, changes) = fold(&n, f, Micros(9)).unwrap();
        let keys: Vec<(&str, Option<Micros>)> = next
            .taints
            .iter()
            .map(|t| (t.key.as_str(), t.added))
            .collect();
        assert_eq!(
            keys,
            [
                ("dedicated", None),
                ("gpu", Some(Micros(9))),
                (TAINT_UNREACHABLE, Some(Micros(5)))
            ]
        );
        assert!(
            matches!(&changes[0], NodeChange::Taints { from, to } if from == &n.taints && to == &next.taints)
        );
        // Removing the operator's taint leaves the managed one.
        let mut f = fields_of(&next);
        f.taints.clear();
        let (after, _) = fold(&next, f, Micros(10)).unwrap();
        assert_eq!(after.taints.len(), 1);
        assert_eq!(after.taints[0].key, TAINT_UNREACHABLE);
    }

    #[test]
    fn an_edit_on_a_stale_version_conflicts() {
        let n = node();
        let mut f = fields_of(&n);
        f.unschedulable = true;
        assert!(matches!(
            plan_edit(&n, f.clone(), Some(n.resource_version + 1), "a", Micros(1)),
            Err(PushError::Conflict { .. })
        ));
        let batch = plan_edit(&n, f, Some(n.resource_version), "alice", Micros(1))
            .unwrap()
            .unwrap();
        assert!(!batch.is_empty());
        assert!(plan_edit(&n, fields_of(&n), None, "a", Micros(1))
            .unwrap()
            .is_none());
    }

    #[test]
    fn an_edit_that_takes_a_node_past_its_bound_is_refused() {
        let n = node();
        let mut f = fields_of(&n);
        f.labels
            .extend((0..30_000).map(|i| (format!("example.com/k-{i:08}"), "v".repeat(20))));
        let Err(PushError::Rejected(invalid)) = plan_edit(&n, f, None, "a", Micros(1)) else {
            panic!("a node past the bound was written");
        };
        assert_eq!(invalid.causes[0].reason, "FieldValueTooLong");
        // A node stored past it before the bound may still shrink.
        let mut big = n.clone();
        big.labels = (0..30_000)
            .map(|i| (format!("example.com/k-{i:08}"), "v".repeat(20)))
            .collect();
        let mut f = fields_of(&big);
        f.labels.pop_first();
        assert!(plan_edit(&big, f.clone(), None, "a", Micros(1))
            .unwrap()
            .is_some());
        // But not grow: a label more is refused until it is back under it.
        let mut more = fields_of(&big);
        more.labels.insert("another".into(), "label".into());
        assert!(matches!(
            plan_edit(&big, more, None, "a", Micros(1)),
            Err(PushError::Rejected(_))
        ));
    }

    #[test]
    fn a_node_a_source_lists_is_not_deleted_by_hand() {
        let n = node();
        let mut listing = SourceListing::default();
        let none = Preconditions::default();
        assert!(plan_delete(&n, &none, &listing, "alice", Micros(1)).is_ok());
        listing.static_names.insert(n.name.clone());
        let Err(PushError::StillListed(why)) = plan_delete(&n, &none, &listing, "a", Micros(1))
        else {
            panic!("a listed node was deleted")
        };
        assert!(why.contains("--nodes-file"), "{why}");
        let mut cloud = node();
        cloud.source = "cloud/inventory".into();
        listing.cloud = Some("cloud/inventory".into());
        let Err(PushError::StillListed(why)) = plan_delete(&cloud, &none, &listing, "a", Micros(1))
        else {
            panic!("a listed node was deleted")
        };
        assert!(why.contains("cloud/inventory"), "{why}");
        let mut own = node();
        own.source = crate::model::SELF_REGISTERED.into();
        assert!(plan_delete(&own, &none, &listing, "a", Micros(1)).is_ok());
        // Knowing nothing of the sources, only a self-registered node may go.
        for (n, deletable) in [(&n, false), (&cloud, false), (&own, true)] {
            let assumed = SourceListing::assumed_for(n);
            assert_eq!(
                plan_delete(n, &none, &assumed, "a", Micros(1)).is_ok(),
                deletable
            );
        }
        let stale = Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        };
        assert!(matches!(
            plan_delete(&own, &stale, &listing, "a", Micros(1)),
            Err(PushError::PreconditionFailed(_))
        ));
    }
}
