//! The handle tests hold: starting the server, seeding and reading objects
//! directly, and the request log.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::connection::run;
use super::faults::Fault;
use super::object::{meta_mut, new_uid, set_type, timestamp};
use super::resource::{ObjectKey, Resource};
use super::state::State;
use crate::kubelet::bind_listener;

/// One answered request, as [`FakeApiServer::requests`] reports it.
/// Requests refused or dropped by [`Fault::Down`] are not logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`, ...
    pub method: String,
    /// The URL path, e.g. `/api/v1/nodes/n1/status`.
    pub path: String,
    /// The raw query string, without `?`; empty when there is none.
    pub query: String,
    /// The status code answered.
    pub status: u16,
    /// When the request arrived (before any [`Fault::Slow`] delay).
    pub at: Instant,
}

impl Request {
    /// Whether the method writes: `POST`, `PUT`, `PATCH` or `DELETE`.
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
    }
}

/// A running fake API server; cheap to clone. It stops when the last clone
/// is dropped.
#[derive(Clone)]
pub struct FakeApiServer {
    handle: Arc<Handle>,
}

/// What the clones share: the state, and the guard that stops the tasks when
/// the last clone goes.
struct Handle {
    shared: Arc<Shared>,
    _stop: DropGuard,
}

/// What the server's tasks share with the handle.
pub(super) struct Shared {
    pub(super) addr: SocketAddr,
    /// The global fault; the accept loop and connections watch it for `Down`.
    pub(super) fault: watch::Sender<Fault>,
    /// Whether the listener is open; the accept loop reports it.
    pub(super) listening: watch::Sender<bool>,
    /// Connections being served right now.
    pub(super) connections: watch::Sender<usize>,
    state: Mutex<State>,
    /// While true, open watches hold their events back.
    pub(super) watch_stall: watch::Sender<bool>,
    /// Bumped by a compaction: every open watch ends with 410 at once.
    pub(super) watch_expiry: watch::Sender<u64>,
    pub(super) stop: CancellationToken,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent maps; keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fault a request for `resource` meets: `Down` first, then the
    /// resource's own fault, then the global one.
    pub(super) fn fault_for(&self, resource: Option<Resource>) -> Fault {
        let global = *self.fault.borrow();
        if global == Fault::Down {
            return Fault::Down;
        }
        resource
            .and_then(|r| self.lock().faults.get(&r).copied())
            .unwrap_or(global)
    }
}

impl fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("addr", &self.shared().addr)
            .field("fault", &*self.shared().fault.borrow())
            .finish()
    }
}

impl FakeApiServer {
    /// Listens on `127.0.0.1:0` and starts serving.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound (a broken test machine), or outside
    /// a Tokio runtime.
    pub async fn start() -> FakeApiServer {
        let wanted = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
        FakeApiServer::start_on(wanted)
            .await
            .unwrap_or_else(|e| panic!("fake API server cannot listen on {wanted}: {e}"))
    }

    /// Listens on `wanted` (for `nodekeeper sim apiserver`) and starts serving.
    pub async fn start_on(wanted: SocketAddr) -> std::io::Result<FakeApiServer> {
        let listener = bind_listener(wanted)?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            addr,
            fault: watch::Sender::new(Fault::None),
            listening: watch::Sender::new(true),
            connections: watch::Sender::new(0),
            state: Mutex::new(State::new()),
            watch_stall: watch::Sender::new(false),
            watch_expiry: watch::Sender::new(0),
            stop: stop.clone(),
        });
        tokio::spawn(run(shared.clone(), listener));
        tracing::debug!(%addr, "fake API server listening");
        Ok(FakeApiServer {
            handle: Arc::new(Handle {
                shared,
                _stop: stop.drop_guard(),
            }),
        })
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// The address it listens on, the same for its whole life.
    pub fn addr(&self) -> SocketAddr {
        self.shared().addr
    }

    /// `http://127.0.0.1:PORT`, for `kube::Config::new` or a kubeconfig.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared().addr)
    }

    /// The last `resourceVersion` given out.
    pub fn resource_version(&self) -> u64 {
        self.shared().lock().resource_version
    }

    /// An object as stored, if it exists.
    pub fn get(&self, key: &ObjectKey) -> Option<Value> {
        self.shared().lock().objects.get(key).cloned()
    }

    /// The node `name`, if it exists.
    pub fn node(&self, name: &str) -> Option<Value> {
        self.get(&ObjectKey::node(name))
    }

    /// Every node, by name.
    pub fn nodes(&self) -> Vec<Value> {
        self.all(Resource::Nodes)
    }

    /// The lease `namespace/name`, if it exists.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(&ObjectKey::lease(namespace, name))
    }

    /// Every lease, by namespace and name.
    pub fn leases(&self) -> Vec<Value> {
        self.all(Resource::Leases)
    }

    /// The pod `namespace/name`, if it exists (terminating pods too).
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(&ObjectKey::pod(namespace, name))
    }

    /// Every pod, by namespace and name (terminating pods too).
    pub fn pods(&self) -> Vec<Value> {
        self.all(Resource::Pods)
    }

    /// The CSINode `name`, if it exists.
    pub fn csinode(&self, name: &str) -> Option<Value> {
        self.get(&ObjectKey::csinode(name))
    }

    /// Every CSINode, by name.
    pub fn csinodes(&self) -> Vec<Value> {
        self.all(Resource::CsiNodes)
    }

    pub(super) fn all(&self, resource: Resource) -> Vec<Value> {
        self.shared()
            .lock()
            .objects
            .iter()
            .filter(|(k, _)| k.resource == resource)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Stores a node as given, replacing any of the same name: sets `kind`,
    /// `apiVersion`, a new `resourceVersion`, and `uid` and
    /// `creationTimestamp` if missing. Returns it as stored.
    ///
    /// # Panics
    ///
    /// If `node` is not an object with `metadata.name`.
    pub fn put_node(&self, node: Value) -> Value {
        self.put(Resource::Nodes, node)
    }

    /// Stores a lease as [`FakeApiServer::put_node`] does; the namespace
    /// defaults to `default`.
    pub fn put_lease(&self, lease: Value) -> Value {
        self.put(Resource::Leases, lease)
    }

    /// Stores a pod as [`FakeApiServer::put_node`] does (e.g. one with
    /// `spec.nodeName`, as the scheduler would bind it); the namespace
    /// defaults to `default`.
    pub fn put_pod(&self, pod: Value) -> Value {
        self.put(Resource::Pods, pod)
    }

    fn put(&self, resource: Resource, object: Value) -> Value {
        let Value::Object(mut object) = object else {
            panic!("put_{}: not a JSON object", resource.kind().to_lowercase());
        };
        let name = object
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                panic!(
                    "put_{}: metadata.name is missing",
                    resource.kind().to_lowercase()
                )
            });
        set_type(resource, &mut object);
        let mut state = self.shared().lock();
        let rv = state.next_resource_version();
        let meta = meta_mut(&mut object);
        let namespace = if resource.namespaced() {
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|ns| !ns.is_empty())
                .unwrap_or("default")
                .to_owned();
            meta.insert("namespace".into(), ns.clone().into());
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        if !meta.contains_key("uid") {
            meta.insert("uid".into(), new_uid().into());
        }
        if !meta.contains_key("creationTimestamp") {
            meta.insert("creationTimestamp".into(), timestamp(0).into());
        }
        meta.insert("resourceVersion".into(), rv.into());
        let key = ObjectKey {
            resource,
            namespace,
            name,
        };
        let object = Value::Object(object);
        let kind = if state.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        state.node_changed(&key, kind, &object);
        state.objects.insert(key, object.clone());
        object
    }

    /// Removes an object at once, as a finished kubelet or a garbage
    /// collector would (no preconditions); returns it if it existed.
    pub fn remove(&self, key: &ObjectKey) -> Option<Value> {
        self.shared().lock().remove(key)
    }

    /// Watches open now.
    pub fn watches(&self) -> usize {
        self.shared().lock().events.receiver_count()
    }

    /// Every answered request since the start or the last
    /// [`FakeApiServer::clear_requests`], in the order they were answered.
    pub fn requests(&self) -> Vec<Request> {
        self.shared().lock().log.clone()
    }

    /// Forgets the logged requests.
    pub fn clear_requests(&self) {
        self.shared().lock().log.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::test_support::*;

    #[tokio::test]
    async fn the_request_log_counts_writes_per_node() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        let pp = PatchParams::default();
        server.put_node(node_json("n1"));
        server.put_node(node_json("n2"));
        for hb in ["2025-01-01T00:00:10Z", "2025-01-01T00:00:20Z"] {
            let patch =
                json!({"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": hb}]}});
            nodes
                .patch_status("n1", &pp, &Patch::Strategic(&patch))
                .await
                .expect("patch");
        }
        nodes.get("n2").await.expect("get");
        nodes
            .list(&ListParams::default().fields("metadata.name=n2"))
            .await
            .expect("list");

        let log = server.requests();
        let writes_to = |name: &str| {
            let path = format!("/api/v1/nodes/{name}");
            log.iter()
                .filter(|r| r.is_write() && r.path.starts_with(&path))
                .count()
        };
        assert_eq!((writes_to("n1"), writes_to("n2")), (2, 0));
        assert_eq!(log[0].method, "PATCH");
        assert_eq!(log[0].path, "/api/v1/nodes/n1/status");
        assert_eq!(log[3].method, "GET");
        assert_eq!(log[3].path, "/api/v1/nodes");
        assert!(
            log[3].query.contains("fieldSelector=metadata.name%3Dn2"),
            "{}",
            log[3].query
        );
        assert!(log.windows(2).all(|w| w[0].at <= w[1].at));

        server.clear_requests();
        assert!(server.requests().is_empty());
    }
}
