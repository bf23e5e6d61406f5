//! The state behind the server's one lock: the objects, the global
//! resourceVersion, injected conflicts and faults, the request log, and the
//! node events kept for watches.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast;

use super::faults::Fault;
use super::handle::Request;
use super::object::meta_str;
use super::resource::{ObjectKey, Resource};
use super::watch::WatchItem;

/// Node events kept for watches to start from, unless set otherwise.
const DEFAULT_WATCH_HISTORY: usize = 10_000;
/// Events a watcher may fall behind by before it is ended with 410 Gone.
const WATCH_BUFFER: usize = 16_384;
/// Bookmarks are sent this often unless set otherwise.
const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);

/// The objects and everything else requests and the handle change.
pub(super) struct State {
    /// The last resourceVersion given out.
    pub(super) resource_version: u64,
    pub(super) objects: BTreeMap<ObjectKey, Value>,
    /// Writes still to answer 409 Conflict, per object.
    pub(super) conflicts: HashMap<ObjectKey, u32>,
    /// Faults limited to one resource.
    pub(super) faults: HashMap<Resource, Fault>,
    pub(super) log: Vec<Request>,
    /// Node events, oldest first, for watches to start from.
    pub(super) history: VecDeque<Arc<WatchItem>>,
    pub(super) history_limit: usize,
    /// A watch from a version below this is answered 410 Gone.
    pub(super) oldest_watchable: u64,
    /// Node events for the open watches.
    pub(super) events: broadcast::Sender<Arc<WatchItem>>,
    pub(super) bookmark_interval: Duration,
}

impl State {
    pub(super) fn new() -> State {
        State {
            resource_version: 0,
            objects: BTreeMap::new(),
            conflicts: HashMap::new(),
            faults: HashMap::new(),
            log: Vec::new(),
            history: VecDeque::new(),
            history_limit: DEFAULT_WATCH_HISTORY,
            oldest_watchable: 0,
            events: broadcast::channel(WATCH_BUFFER).0,
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
        }
    }

    /// A node changed (`ADDED`, `MODIFIED`, `DELETED`) at its resourceVersion:
    /// kept for watches to start from, and sent to the open ones.
    pub(super) fn node_changed(&mut self, key: &ObjectKey, kind: &'static str, object: &Value) {
        if key.resource != Resource::Nodes {
            return;
        }
        let rv = meta_str(object, "resourceVersion")
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(self.resource_version);
        let item = Arc::new(WatchItem::Event {
            rv,
            kind,
            object: object.clone(),
        });
        self.history.push_back(item.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                if let WatchItem::Event { rv, .. } = *old {
                    self.oldest_watchable = rv;
                }
            }
        }
        // No watcher: nobody to tell.
        let _ = self.events.send(item);
    }

    /// Removes an object at once; a node's deletion is an event at a new
    /// resourceVersion.
    pub(super) fn remove(&mut self, key: &ObjectKey) -> Option<Value> {
        let mut object = self.objects.remove(key)?;
        if key.resource == Resource::Nodes {
            object["metadata"]["resourceVersion"] = self.next_resource_version().into();
            self.node_changed(key, "DELETED", &object);
        }
        Some(object)
    }

    pub(super) fn next_resource_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }
}
