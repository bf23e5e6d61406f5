//! What the mirror knows of the API server's Nodes: a copy of each, as last
//! listed, watched or written, or the knowledge that it is missing. Like
//! kube-runtime's reflector store, filled by a list and kept by the watch;
//! unlike it, the mirror's own writes go in too, so a change costs one
//! request, and the watch's echo of them is recognised and skipped.
//!
//! Pure state, no I/O: the list and watch live in `watch.rs`.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::Value;

/// Own writes remembered per node until the watch echoes them back.
const OWN_WRITES_KEPT: usize = 4;

/// What is known of one node upstream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Known {
    /// Its copy, as last seen.
    Present(Value),
    /// The API server does not have it.
    Missing,
    /// Nothing trustworthy: read it before writing.
    Unknown,
}

/// One node's entry.
struct Entry {
    /// JSON text (a fraction of a Value's memory); `None`: missing upstream.
    copy: Option<Box<[u8]>>,
    /// When it was last set (see [`Upstream::generation`]).
    generation: u64,
}

/// What a watch event turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// The echo of a write of ours: already known, nothing to do.
    Echo,
    /// Someone else's change (or one we could not tell apart).
    Foreign,
}

/// The API server's Nodes as the mirror knows them.
#[derive(Default)]
pub(crate) struct Upstream {
    nodes: HashMap<String, Entry>,
    /// Bumped by every change, so a list knows what changed while it ran.
    generation: u64,
    /// resourceVersions of our writes per node, not yet echoed by the
    /// watch, and the generation of the last.
    own_writes: HashMap<String, (u64, VecDeque<String>)>,
    /// Registry nodes known missing upstream (a subset of `nodes`).
    missing: HashSet<String>,
    /// Registry nodes whose copy was last seen to differ from the registry.
    differ: HashSet<String>,
    /// Set once a list was complete: from then on (the watch keeps the copy
    /// current) a node without an entry is not upstream...
    complete: bool,
    /// ...unless its copy was dropped as untrustworthy: read it first.
    distrusted: HashSet<String>,
}

impl Upstream {
    /// What is known of `name`.
    pub(crate) fn get(&self, name: &str) -> Known {
        match self.nodes.get(name) {
            None if self.complete && !self.distrusted.contains(name) => Known::Missing,
            None => Known::Unknown,
            Some(Entry { copy: None, .. }) => Known::Missing,
            // Written by `set` from a Value: it reads back.
            Some(Entry {
                copy: Some(text), ..
            }) => serde_json::from_slice(text).map_or(Known::Unknown, Known::Present),
        }
    }

    /// Whether the node is known to be missing upstream: seen missing, or
    /// never seen since a complete list.
    pub(crate) fn is_missing(&self, name: &str) -> bool {
        match self.nodes.get(name) {
            None => self.complete && !self.distrusted.contains(name),
            Some(entry) => entry.copy.is_none(),
        }
    }

    /// The current generation: what [`Upstream::listed`] is given back.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Registry nodes missing upstream, and those that differ.
    pub(crate) fn drift(&self) -> (usize, usize) {
        (self.missing.len(), self.differ.len())
    }

    fn set(&mut self, name: &str, node: Option<Value>) {
        self.generation += 1;
        self.distrusted.remove(name);
        let copy = node.map(|mut node| {
            if let Some(object) = node.as_object_mut() {
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove("managedFields");
                }
                if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
                    status.remove("images");
                }
            }
            serde_json::to_vec(&node)
                .expect("a Value serializes")
                .into_boxed_slice()
        });
        match copy {
            Some(_) => {
                self.missing.remove(name);
            }
            None => {
                self.missing.insert(name.to_string());
            }
        }
        self.nodes.insert(
            name.to_string(),
            Entry {
                copy,
                generation: self.generation,
            },
        );
    }

    /// The answer to a write of ours: the node as it is now, to be echoed
    /// by the watch under its resourceVersion.
    pub(crate) fn wrote(&mut self, name: &str, node: Value) {
        let rv = node["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        self.differ.remove(name);
        self.set(name, Some(node));
        if let Some(rv) = rv {
            let (at, own) = self.own_writes.entry(name.to_string()).or_default();
            if own.len() == OWN_WRITES_KEPT {
                own.pop_front();
            }
            own.push_back(rv);
            *at = self.generation;
        }
    }

    /// The registry node is missing upstream (a create is due).
    pub(crate) fn missing(&mut self, name: &str) {
        self.set(name, None);
    }

    /// Nothing is known any more beyond the entries (leadership lost).
    pub(crate) fn incomplete(&mut self) {
        self.complete = false;
        self.distrusted.clear();
    }

    /// Forgets a node that is gone and not the registry's (deleted by us,
    /// or someone else's node deleted).
    pub(crate) fn forget(&mut self, name: &str) {
        self.generation += 1;
        self.nodes.remove(name);
        self.missing.remove(name);
        self.differ.remove(name);
        self.own_writes.remove(name);
        self.distrusted.remove(name);
    }

    /// Drops a copy not to be trusted after a failed write: read it again
    /// before the next write.
    pub(crate) fn distrust(&mut self, name: &str) {
        self.forget(name);
        self.distrusted.insert(name.to_string());
    }

    /// Records whether a registry node's copy differs from the registry.
    pub(crate) fn set_differs(&mut self, name: &str, differs: bool) {
        if differs && !self.missing.contains(name) {
            self.differ.insert(name.to_string());
        } else {
            self.differ.remove(name);
        }
    }

    /// A watch event: the node as it is at `rv` (`None`: deleted). `ours`
    /// says whether the registry has the node; a foreign node's deletion is
    /// forgotten rather than remembered as missing.
    pub(crate) fn watched(
        &mut self,
        name: &str,
        rv: &str,
        node: Option<Value>,
        ours: bool,
    ) -> Seen {
        if let Some((_, own)) = self.own_writes.get_mut(name) {
            if let Some(at) = own.iter().position(|v| v == rv) {
                // Echoes come in order: older writes will not be echoed now.
                own.drain(..=at);
                if own.is_empty() {
                    self.own_writes.remove(name);
                }
                return Seen::Echo;
            }
        }
        match node {
            Some(node) => self.set(name, Some(node)),
            None if ours => self.set(name, None),
            None => self.forget(name),
        }
        Seen::Foreign
    }

    /// One node of a list begun at `generation`; kept unless written since
    /// (then the copy we have is newer than the list's).
    pub(crate) fn listed(&mut self, generation: u64, name: &str, node: Value) {
        if self
            .nodes
            .get(name)
            .is_none_or(|e| e.generation <= generation)
        {
            self.set(name, Some(node));
        }
    }

    /// The list begun at `generation` is complete and held `names`: every
    /// node not in it is missing (registry nodes) or forgotten (others),
    /// except entries written since the list began. Registry nodes never
    /// seen are missing too. Returns the registry nodes missing upstream.
    pub(crate) fn list_done(
        &mut self,
        generation: u64,
        names: &HashSet<String>,
        registry: &[String],
    ) -> Vec<String> {
        let ours: HashSet<&str> = registry.iter().map(String::as_str).collect();
        let stale: Vec<String> = self
            .nodes
            .iter()
            .filter(|(n, e)| e.generation <= generation && !names.contains(*n))
            .map(|(n, _)| n.clone())
            .collect();
        for name in stale {
            if ours.contains(name.as_str()) {
                self.set(&name, None);
            } else {
                self.forget(&name);
            }
        }
        for name in registry {
            if !self.nodes.contains_key(name) {
                self.set(name, None);
            }
        }
        // Echoes of writes before the list will not come; a server that
        // restarted may even give their resourceVersions out again.
        self.own_writes.retain(|_, (at, _)| *at > generation);
        self.complete = true;
        registry
            .iter()
            .filter(|n| self.missing.contains(*n))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, rv: &str) -> Value {
        json!({"metadata": {"name": name, "resourceVersion": rv, "managedFields": [{}]},
               "status": {"images": [{}], "conditions": []}})
    }

    #[test]
    fn writes_are_kept_without_what_is_never_read() {
        let mut up = Upstream::default();
        assert_eq!(up.get("a"), Known::Unknown);
        up.wrote("a", node("a", "5"));
        let Known::Present(copy) = up.get("a") else {
            panic!()
        };
        assert!(copy["metadata"]["managedFields"].is_null());
        assert!(copy["status"]["images"].is_null());
        assert_eq!(copy["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn the_echo_of_our_own_write_is_skipped_and_others_are_not() {
        let mut up = Upstream::default();
        up.wrote("a", node("a", "5"));
        up.wrote("a", node("a", "6"));
        // The echo of 5 arrives after we wrote 6: our copy stays at 6.
        assert_eq!(up.watched("a", "5", Some(node("a", "5")), true), Seen::Echo);
        assert_eq!(up.watched("a", "6", Some(node("a", "6")), true), Seen::Echo);
        let Known::Present(copy) = up.get("a") else {
            panic!()
        };
        assert_eq!(copy["metadata"]["resourceVersion"], "6");
        // Someone else's change.
        assert_eq!(
            up.watched("a", "9", Some(node("a", "9")), true),
            Seen::Foreign
        );
        // A deletion by someone else: missing, counted as drift.
        assert_eq!(up.watched("a", "10", None, true), Seen::Foreign);
        assert_eq!(up.get("a"), Known::Missing);
        assert!(up.is_missing("a"));
        assert_eq!(up.drift(), (1, 0));
        // Our create brings it back.
        up.wrote("a", node("a", "11"));
        assert_eq!(up.drift(), (0, 0));
        // A node that is not ours, deleted: forgotten.
        up.watched("x", "12", Some(node("x", "12")), false);
        up.watched("x", "13", None, false);
        assert_eq!(up.get("x"), Known::Unknown);
        assert_eq!(up.drift(), (0, 0));
    }

    #[test]
    fn a_list_marks_what_it_lacks_missing_but_keeps_what_changed_meanwhile() {
        let mut up = Upstream::default();
        up.wrote("a", node("a", "1"));
        up.wrote("b", node("b", "2"));
        up.wrote("x", node("x", "3"));
        up.set_differs("b", true);
        assert_eq!(up.drift(), (0, 1));
        // The API server came back empty; while the list ran, b was written.
        let began = up.generation();
        up.wrote("b", node("b", "1"));
        let registry = ["a".to_string(), "b".into(), "c".into()];
        assert_eq!(up.get("c"), Known::Unknown, "nothing listed yet");
        let missing = up.list_done(began, &HashSet::new(), &registry);
        assert_eq!(missing, ["a", "c"]);
        // Listed once and watched since: a node never seen is not there.
        assert_eq!(up.get("d"), Known::Missing);
        assert!(up.is_missing("d"));
        assert_eq!(up.get("a"), Known::Missing);
        assert!(matches!(up.get("b"), Known::Present(_)));
        assert_eq!(up.get("c"), Known::Missing);
        // Someone else's node, gone: forgotten (and not counted).
        assert_eq!(up.get("x"), Known::Missing);
        assert_eq!(up.drift(), (2, 0));
        // resourceVersions start over: an old write's number is someone else's now.
        let began = up.generation();
        up.listed(began, "a", node("a", "1"));
        up.listed(began, "b", node("b", "2"));
        up.listed(began, "c", node("c", "3"));
        let names = HashSet::from(["a".to_string(), "b".into(), "c".into()]);
        assert!(up.list_done(began, &names, &registry).is_empty());
        assert_eq!(up.drift(), (0, 0));
        assert_eq!(
            up.watched("b", "1", Some(node("b", "1")), true),
            Seen::Foreign
        );
        // A list item older than our own write is not taken.
        let began = up.generation();
        up.wrote("c", node("c", "9"));
        up.listed(began, "c", node("c", "3"));
        let Known::Present(c) = up.get("c") else {
            panic!()
        };
        assert_eq!(c["metadata"]["resourceVersion"], "9");
        up.distrust("a");
        assert_eq!(up.get("a"), Known::Unknown, "read before written");
        up.incomplete();
        assert_eq!(up.get("d"), Known::Unknown);
        assert!(!up.is_missing("d"));
    }

    #[test]
    fn only_the_last_few_own_writes_are_remembered() {
        let mut up = Upstream::default();
        for rv in 1..=10 {
            up.wrote("a", node("a", &rv.to_string()));
        }
        assert_eq!(up.own_writes["a"].1.len(), OWN_WRITES_KEPT);
        assert_eq!(
            up.watched("a", "2", Some(node("a", "2")), true),
            Seen::Foreign
        );
        up.forget("a");
        assert!(up.own_writes.is_empty());
        assert_eq!(up.get("a"), Known::Unknown);
    }
}
