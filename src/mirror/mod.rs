//! The mirror: keeps a Kubernetes API server's Nodes, their status, taints
//! and Leases in line with the registry, and deletes pods of evicted nodes.
//!
//! Work comes from the durable outbox ([`crate::store::OutboxKey`]), which
//! the store fills in the same transaction as each change; the mirror learns
//! of new entries by following the durable event log, and on start reads the
//! whole outbox back. Each entry is coalesced per node: the mirror sends the
//! node as it is *now*, and removes the entry only if nothing newer was
//! queued meanwhile. Work for one node runs in order, one piece at a time;
//! failures are retried with exponential backoff and jitter; every request,
//! whoever makes it, first takes a token from one [`Budget`]
//! (`--kube-api-qps`, `--kube-api-burst`), so a backlog drains at the
//! budget's pace. Lease renewals for Ready nodes go first: they are what
//! tells the API server's side that the nodes are alive.
//!
//! Pod deletions are re-checked right before they happen: a node Ready
//! again, or whose not-Ready spell is not the one that was judged, keeps its
//! pods; while every node of the site looks down nothing is deleted; and
//! after a restart nothing is deleted before the controller has had a grace
//! period to see the nodes again.

pub mod budget;
pub mod client;
pub mod leader;
mod queue;
pub mod sync;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use ::kube::Client;
use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node as KubeNode, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use serde::Serialize;
use serde_json::Value;
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use queue::Queue;

use crate::controller::view::View;
use crate::controller::ControllerHandle;
use crate::metrics::{Metrics, MirrorRequestLabels};
use crate::model::{ConditionStatus, EventKind, Micros, READY};
use crate::store::{OutboxKey, Store};
pub use budget::{Backoff, Budget};
pub use client::{ApiServer, ClientError};
pub use leader::LeaderConfig;

/// Where node Leases live, as kubelets write them.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The field manager nodekeeper's writes are recorded under.
pub const FIELD_MANAGER: &str = "nodekeeper";
/// Pods are listed this many at a time.
const PAGE: u32 = 500;
/// A resourceVersion conflict is re-read and retried this often before the
/// entry goes back to the queue with backoff.
const CONFLICT_RETRIES: usize = 5;
/// How often the API server's nodes are listed and compared with the
/// registry, besides on leadership and after an outage: repairs whatever
/// someone else changed there.
const RESYNC_PERIOD: Duration = Duration::from_secs(30 * 60);
/// Failures are logged one by one at debug level, and summed up at warning
/// level at most this often: an outage with 10k nodes must not flood the log.
const FAILURE_LOG_PERIOD: Duration = Duration::from_secs(10);
/// A Lease renewal due while its node has other work in flight waits this long.
pub(crate) const BUSY_RETRY: Duration = Duration::from_millis(100);
/// History events read per step when following the log.
pub(crate) const FOLLOW_BATCH: usize = 4096;

/// How the mirror behaves.
#[derive(Debug, Clone)]
pub struct MirrorConfig {
    pub api_server: ApiServer,
    pub qps: f64,
    pub burst: u32,
    /// Connect, send and answer, per request.
    pub request_timeout: Duration,
    /// Requests in flight at once (the budget still bounds the rate).
    pub workers: usize,
    /// `leaseDurationSeconds` of node Leases.
    pub node_lease_duration: Duration,
    /// How often a Ready node's Lease is renewed.
    pub node_lease_renew_interval: Duration,
    pub backoff: Backoff,
    /// No pod is deleted before this long after the controller started: the
    /// controller must first see the nodes again.
    pub eviction_hold: Duration,
    pub leader: Option<LeaderConfig>,
}

impl MirrorConfig {
    pub fn new(api_server: ApiServer) -> MirrorConfig {
        MirrorConfig {
            api_server,
            qps: 20.0,
            burst: 30,
            request_timeout: Duration::from_secs(10),
            workers: 8,
            node_lease_duration: Duration::from_secs(40),
            node_lease_renew_interval: Duration::from_secs(10),
            backoff: Backoff::default(),
            eviction_hold: Duration::from_secs(40),
            leader: None,
        }
    }
}

/// What the mirror is doing, shared with the HTTP server.
pub struct MirrorState {
    pub server: String,
    pub identity: String,
    leader: AtomicBool,
    requests: AtomicU64,
    retries: AtomicU64,
    lease_renewals: AtomicU64,
    last: Mutex<(Option<ErrorNote>, Option<Micros>)>,
}

/// The last failure, for `mirror status`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ErrorNote {
    pub time: Micros,
    pub message: String,
}

/// `nodekeeper mirror status` and `GET /v1/mirror`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct MirrorStatus {
    /// `false` when the store is read directly (no controller running).
    pub running: bool,
    #[serde(default)]
    pub server: Option<String>,
    #[serde(default)]
    pub identity: Option<String>,
    pub leader: bool,
    pub backlog: usize,
    #[serde(rename = "oldestEntry")]
    pub oldest_entry: Option<Micros>,
    #[serde(rename = "lastError")]
    pub last_error: Option<ErrorNote>,
    #[serde(rename = "lastSuccess")]
    pub last_success: Option<Micros>,
    pub requests: u64,
    pub retries: u64,
    #[serde(rename = "leaseRenewals")]
    pub lease_renewals: u64,
    /// The oldest entries (at most 20).
    pub entries: Vec<EntryStatus>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct EntryStatus {
    pub node: String,
    pub kind: String,
    pub seq: u64,
    pub enqueued: Micros,
}

impl MirrorState {
    pub fn new(server: String, identity: String) -> MirrorState {
        MirrorState {
            server,
            identity,
            leader: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            lease_renewals: AtomicU64::new(0),
            last: Mutex::new((None, None)),
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    fn note(&self, result: Result<(), &str>) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => last.1 = Some(Micros::now()),
            Err(message) => {
                last.0 = Some(ErrorNote {
                    time: Micros::now(),
                    message: message.to_string(),
                })
            }
        }
    }

    /// The status, with the backlog read from the store.
    pub fn status(&self, store: &Store) -> Result<MirrorStatus, crate::store::StoreError> {
        let mut status = status_from_store(store)?;
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        status.running = true;
        status.server = Some(self.server.clone());
        status.identity = Some(self.identity.clone());
        status.leader = self.is_leader();
        status.last_error = last.0.or(status.last_error);
        status.last_success = last.1;
        status.requests = self.requests.load(Ordering::Relaxed);
        status.retries = self.retries.load(Ordering::Relaxed);
        status.lease_renewals = self.lease_renewals.load(Ordering::Relaxed);
        Ok(status)
    }
}

/// What a store says about the mirror when no controller runs on it.
pub fn status_from_store(store: &Store) -> Result<MirrorStatus, crate::store::StoreError> {
    let mut entries: Vec<EntryStatus> = store
        .outbox()?
        .into_iter()
        .map(|(key, e)| EntryStatus {
            node: key.node().to_string(),
            kind: key.kind().to_string(),
            seq: e.seq,
            enqueued: e.enqueued,
        })
        .collect();
    let backlog = entries.len();
    entries.sort_by_key(|e| (e.enqueued, e.seq));
    entries.truncate(20);
    Ok(MirrorStatus {
        running: false,
        server: None,
        identity: None,
        leader: false,
        backlog,
        oldest_entry: entries.first().map(|e| e.enqueued),
        last_error: store
            .meta_get(META_LAST_ERROR)?
            .and_then(|b| serde_json::from_slice(&b).ok()),
        last_success: None,
        requests: 0,
        retries: 0,
        lease_renewals: 0,
        entries,
    })
}

const META_LAST_ERROR: &[u8] = b"mirror_last_error";

/// A failed API call, as the mirror reasons about it.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status, when the API server answered.
    pub code: Option<u16>,
    pub message: String,
}

impl ApiError {
    fn is(&self, code: u16) -> bool {
        self.code == Some(code)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<::kube::Error> for ApiError {
    fn from(e: ::kube::Error) -> Self {
        match e {
            ::kube::Error::Api(status) => ApiError {
                code: Some(status.code),
                message: format!("{} ({})", status.message, status.code),
            },
            other => {
                // kube's transport errors say "client error (Connect)"; the
                // cause (refused, timed out, certificate) is further down.
                let mut message = other.to_string();
                let mut source = std::error::Error::source(&other);
                for _ in 0..8 {
                    let Some(cause) = source else { break };
                    let text = cause.to_string();
                    if !message.contains(&text) {
                        message.push_str(": ");
                        message.push_str(&text);
                    }
                    source = cause.source();
                }
                ApiError {
                    code: None,
                    message,
                }
            }
        }
    }
}

/// What the tasks share.
struct Ctx {
    client: Client,
    budget: Budget,
    store: Arc<Store>,
    view: Arc<View>,
    controller: ControllerHandle,
    metrics: Arc<Metrics>,
    state: Arc<MirrorState>,
    config: MirrorConfig,
    /// resourceVersions of the node Leases last written.
    lease_versions: Mutex<HashMap<String, String>>,
    /// The API server's Nodes as last seen (listed or written), as JSON
    /// text; `null` for a node the last list did not have.
    upstream: Mutex<HashMap<String, Box<[u8]>>>,
}

impl Ctx {
    /// One API request: a token from the budget, a timeout, metrics.
    async fn call<T>(
        &self,
        verb: &'static str,
        request: impl Future<Output = Result<T, ::kube::Error>>,
    ) -> Result<T, ApiError> {
        self.budget.acquire().await;
        let started = Instant::now();
        let result = match tokio::time::timeout(self.config.request_timeout, request).await {
            Ok(r) => r.map_err(ApiError::from),
            Err(_) => Err(ApiError {
                code: None,
                message: format!(
                    "no answer within {}",
                    crate::duration::format(self.config.request_timeout)
                ),
            }),
        };
        self.metrics
            .mirror_request_duration
            .observe(started.elapsed().as_secs_f64());
        let code = match &result {
            Ok(_) => "2xx".to_string(),
            Err(ApiError { code: Some(c), .. }) => c.to_string(),
            Err(_) => "error".to_string(),
        };
        self.metrics
            .mirror_requests
            .get_or_create(&MirrorRequestLabels {
                verb: verb.to_string(),
                code,
            })
            .inc();
        self.state.requests.fetch_add(1, Ordering::Relaxed);
        result
    }

    fn nodes(&self) -> Api<KubeNode> {
        Api::all(self.client.clone())
    }

    /// The API server's copy of a node as last seen, if known.
    fn cached(&self, name: &str) -> Option<Value> {
        let cache = self.upstream.lock().unwrap_or_else(|p| p.into_inner());
        // Written by `remember` from a Value: it reads back.
        serde_json::from_slice(cache.get(name)?).ok()
    }

    /// Remembers the API server's copy (without what nodekeeper never reads).
    fn remember(&self, name: &str, node: Option<Value>) {
        let mut cache = self.upstream.lock().unwrap_or_else(|p| p.into_inner());
        match node {
            Some(mut node) => {
                if let Some(object) = node.as_object_mut() {
                    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.remove("managedFields");
                    }
                    if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
                        status.remove("images");
                    }
                }
                // Kept as JSON text: a fraction of a Value's memory, and
                // read back only when the node changes.
                let text = serde_json::to_vec(&node).expect("a Value serializes");
                cache.insert(name.to_string(), text.into_boxed_slice());
            }
            None => {
                cache.remove(name);
            }
        }
    }

    /// Brings the API server's Node to the registry's record (or deletes it).
    /// Works from the copy last seen, so a status change costs one request;
    /// a stale copy shows up as a 409 (or 404) and is read again.
    async fn sync_node(&self, name: &str) -> Result<(), ApiError> {
        let nodes = self.nodes();
        let Some((record, _)) = self.view.get(name) else {
            return self.delete_node(name).await;
        };
        let desired =
            serde_json::to_value(crate::kube::node(&record, None)).expect("k8s types serialize");
        let params = PatchParams::apply(FIELD_MANAGER);
        let to_value = |n: &KubeNode| serde_json::to_value(n).expect("k8s types serialize");
        // `Null` in the cache: the last list did not have the node.
        let mut seen = self.cached(name);
        let mut current = None;
        for _ in 0..CONFLICT_RETRIES {
            let found = match seen.take() {
                Some(Value::Null) => None,
                Some(node) => Some(node),
                None => self
                    .call("get", nodes.get_opt(name))
                    .await?
                    .map(|n| to_value(&n)),
            };
            let node = match found {
                Some(node) => node,
                None => {
                    {
                        let create: KubeNode = serde_json::from_value(sync::for_create(&desired))
                            .expect("a node built from a node");
                        match self
                            .call("create", nodes.create(&PostParams::default(), &create))
                            .await
                        {
                            Ok(node) => to_value(&node),
                            // Created meanwhile: adopted on the next round.
                            Err(e) if e.is(409) => continue,
                            Err(e) => return Err(e),
                        }
                    }
                }
            };
            let Some(patch) = sync::spec_patch(&node, &desired) else {
                current = Some(node);
                break;
            };
            match self
                .call("patch", nodes.patch(name, &params, &Patch::Merge(&patch)))
                .await
            {
                Ok(node) => {
                    current = Some(to_value(&node));
                    break;
                }
                // Someone else wrote the node, or it is gone: read it again.
                Err(e) if e.is(409) || e.is(404) => continue,
                Err(e) => return Err(e),
            }
        }
        let Some(mut current) = current else {
            self.remember(name, None);
            return Err(ApiError {
                code: Some(409),
                message: format!(
                    "node {name} kept changing under us ({CONFLICT_RETRIES} conflicts in a row)"
                ),
            });
        };
        let patches = [
            sync::status_patch(&current, &desired).map(Patch::Strategic),
            sync::addresses_patch(&current, &desired).map(Patch::Merge),
        ];
        for patch in patches.into_iter().flatten() {
            match self
                .call("patch_status", nodes.patch_status(name, &params, &patch))
                .await
            {
                Ok(node) => current = to_value(&node),
                Err(e) => {
                    // Whatever the copy was, it is not to be trusted now.
                    self.remember(name, None);
                    return Err(e);
                }
            }
        }
        self.remember(name, Some(current));
        Ok(())
    }

    async fn delete_node(&self, name: &str) -> Result<(), ApiError> {
        fn gone<T>(r: Result<T, ApiError>) -> Result<(), ApiError> {
            match r {
                Ok(_) => Ok(()),
                Err(e) if e.is(404) => Ok(()),
                Err(e) => Err(e),
            }
        }
        gone(
            self.call(
                "delete",
                self.nodes().delete(name, &DeleteParams::default()),
            )
            .await,
        )?;
        let leases: Api<KubeLease> = Api::namespaced(self.client.clone(), NODE_LEASE_NAMESPACE);
        gone(
            self.call("delete", leases.delete(name, &DeleteParams::default()))
                .await,
        )?;
        self.lease_versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        self.remember(name, None);
        Ok(())
    }

    /// Renews a Ready node's Lease: one PUT when its resourceVersion is
    /// known, a read (and a create if needed) when not.
    async fn renew_lease(&self, name: &str) -> Result<(), ApiError> {
        let api: Api<KubeLease> = Api::namespaced(self.client.clone(), NODE_LEASE_NAMESPACE);
        let known = self
            .lease_versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        let lease = |rv: Option<String>| KubeLease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(NODE_LEASE_NAMESPACE.to_string()),
                resource_version: rv,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(name.to_string()),
                lease_duration_seconds: Some(self.config.node_lease_duration.as_secs() as i32),
                renew_time: Some(MicroTime(Micros::now().timestamp())),
                ..LeaseSpec::default()
            }),
        };
        let pp = PostParams::default();
        let written = match known {
            Some(rv) => match self
                .call("update", api.replace(name, &pp, &lease(Some(rv))))
                .await
            {
                Ok(l) => Some(l),
                Err(e) if e.is(409) || e.is(404) => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let written = match written {
            Some(l) => l,
            None => match self.call("get", api.get_opt(name)).await? {
                Some(existing) => {
                    self.call(
                        "update",
                        api.replace(name, &pp, &lease(existing.metadata.resource_version)),
                    )
                    .await?
                }
                None => self.call("create", api.create(&pp, &lease(None))).await?,
            },
        };
        if let Some(rv) = written.metadata.resource_version {
            self.lease_versions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.to_string(), rv);
        }
        self.state.lease_renewals.fetch_add(1, Ordering::Relaxed);
        self.metrics.mirror_lease_renewals.inc();
        Ok(())
    }

    /// Deletes the pods of an evicted (or deleted) node, after re-checking
    /// that the decision still holds.
    async fn evict_pods(&self, name: &str) -> Result<Evicted, ApiError> {
        let key = OutboxKey::EvictPods(name.to_string());
        let Some(entry) = self.store.outbox_entry(&key).map_err(store_error)? else {
            return Ok(Evicted::Nothing);
        };
        // The newest decision counts (a coalesced entry keeps the oldest
        // queueing time): when was the event this entry stands for?
        let decided = self
            .store
            .event(entry.seq)
            .map_err(store_error)?
            .map_or(entry.enqueued, |e| e.time);
        if let Some(reason) = self.still_due(name, decided) {
            return Ok(Evicted::Dropped(reason));
        }
        // A node gone from the registry has no kubelet to confirm a graceful
        // deletion: its pods are removed at once, as the pod GC does for
        // orphans. Otherwise pods get their grace period, and pods already
        // terminating are left to it.
        let gone = self.view.get(name).is_none();
        let delete = if gone {
            DeleteParams::default().grace_period(0)
        } else {
            DeleteParams::default()
        };
        if let Some(why) = self.site_down() {
            return Ok(Evicted::Held(why));
        }
        let pods: Api<Pod> = Api::all(self.client.clone());
        let mut params = ListParams::default()
            .fields(&format!("spec.nodeName={name}"))
            .limit(PAGE);
        let (mut deleted, mut kept) = (0usize, 0usize);
        // Bounded: one page per PAGE pods; a node holds at most a few hundred.
        for _ in 0..1000 {
            let page = self.call("list", pods.list(&params)).await?;
            for pod in &page.items {
                if keeps_its_pod(pod) {
                    kept += 1;
                    continue;
                }
                if pod.metadata.deletion_timestamp.is_some() && !gone {
                    continue;
                }
                let (Some(ns), Some(pod_name)) = (
                    pod.metadata.namespace.as_deref(),
                    pod.metadata.name.as_deref(),
                ) else {
                    continue;
                };
                let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
                match self.call("delete", api.delete(pod_name, &delete)).await {
                    Ok(_) => deleted += 1,
                    Err(e) if e.is(404) => {}
                    Err(e) => return Err(e),
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        Ok(Evicted::Done { deleted, kept })
    }

    /// Why a queued pod deletion must not happen any more, if so.
    fn still_due(&self, name: &str, decided: Micros) -> Option<String> {
        let (node, _) = self.view.get(name)?; // Deleted for good: its pods go.
        let ready = node.condition(READY);
        match ready.map(|c| c.status) {
            Some(ConditionStatus::True) => Some("not carried out: the node is Ready again".into()),
            _ if ready.is_some_and(|c| c.last_transition > decided) => Some(
                "not carried out: the node recovered since the decision; a new one will be made"
                    .into(),
            ),
            _ => None,
        }
    }

    /// Set while no node of the site is Ready: a partition or the
    /// controller's own network, not the nodes.
    fn site_down(&self) -> Option<String> {
        let nodes = self.view.list();
        let ready = nodes
            .iter()
            .filter(|(n, _)| n.ready() == ConditionStatus::True)
            .count();
        (nodes.len() > 1 && ready == 0).then(|| {
            format!(
                "held: none of the site's {} nodes is Ready, which looks like a partition",
                nodes.len()
            )
        })
    }

    /// The nodes whose API server copy differs from the registry (or is
    /// missing), and nodes nodekeeper created that the registry no longer has.
    async fn reconcile(&self) -> Result<Vec<OutboxKey>, ApiError> {
        let nodes = self.nodes();
        let mut stale = Vec::new();
        // Compared page by page: a 10k-node site is never held in memory whole.
        let mut listed: HashSet<String> = HashSet::new();
        let mut params = ListParams::default().limit(PAGE);
        for _ in 0..100_000 {
            let page = self.call("list", nodes.list(&params)).await?;
            for node in page.items {
                let Some(name) = node.metadata.name.clone() else {
                    continue;
                };
                let current = serde_json::to_value(&node).expect("k8s types serialize");
                let differs = match self.view.get(&name) {
                    Some((ours, _)) => {
                        let desired = serde_json::to_value(crate::kube::node(&ours, None))
                            .expect("k8s types serialize");
                        sync::spec_patch(&current, &desired).is_some()
                            || sync::status_patch(&current, &desired).is_some()
                            || sync::addresses_patch(&current, &desired).is_some()
                    }
                    // Created by nodekeeper, gone from the registry: deleted.
                    None => !current["metadata"]["annotations"][crate::kube::SOURCE_ANNOTATION]
                        .is_null(),
                };
                if differs {
                    stale.push(OutboxKey::Node(name.clone()));
                }
                self.remember(&name, Some(current));
                listed.insert(name);
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        for (node, _) in self.view.list() {
            if listed.contains(&node.name) {
                continue;
            }
            // Known absent (unless a sync created it since the list):
            // created without asking first.
            self.upstream
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(node.name.clone())
                .or_insert_with(|| b"null".to_vec().into_boxed_slice());
            stale.push(OutboxKey::Node(node.name));
        }
        Ok(stale)
    }
}

/// Pods a node's eviction leaves alone, as the upstream controller does:
/// DaemonSet pods (they would come straight back) and static pods' mirrors.
fn keeps_its_pod(pod: &Pod) -> bool {
    let daemon = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    daemon || mirror
}

fn store_error(e: crate::store::StoreError) -> ApiError {
    ApiError {
        code: None,
        message: e.to_string(),
    }
}

/// What a pod eviction came to.
enum Evicted {
    Done {
        deleted: usize,
        kept: usize,
    },
    /// The decision no longer holds; recorded and forgotten.
    Dropped(String),
    /// Not now: retried later.
    Held(String),
    /// The entry was already gone.
    Nothing,
}

/// A piece of work in flight.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Job {
    Outbox(OutboxKey),
    Lease(String),
    Reconcile,
}

/// What finished work asks of the loop.
enum Outcome {
    Done,
    /// Done, and these outbox entries were queued.
    Queued(Vec<OutboxKey>),
    /// Try again after this long (and count it as a retry if it failed;
    /// `true` when the API server did not answer or answered 5xx).
    Again(Duration, Option<String>, bool),
}

/// The mirror, ready to run.
pub struct Mirror {
    ctx: Arc<Ctx>,
}

impl Mirror {
    /// Builds the client; fails with a clear message when the API server's
    /// configuration is unusable (not when it is unreachable: that is an
    /// outage, and the outbox waits it out). Called before the store is
    /// opened, so a bad kubeconfig leaves nothing behind.
    pub async fn connect(config: &MirrorConfig) -> Result<(Client, String), ClientError> {
        config.api_server.client(config.request_timeout).await
    }

    /// The mirror over a client from [`Mirror::connect`].
    pub fn new(
        config: MirrorConfig,
        (client, url): (Client, String),
        store: Arc<Store>,
        view: Arc<View>,
        controller: ControllerHandle,
        metrics: Arc<Metrics>,
        identity: String,
    ) -> (Mirror, Arc<MirrorState>) {
        let state = Arc::new(MirrorState::new(url, identity));
        let ctx = Ctx {
            client,
            budget: Budget::new(config.qps, config.burst),
            store,
            view,
            controller,
            metrics,
            state: state.clone(),
            config,
            lease_versions: Mutex::new(HashMap::new()),
            upstream: Mutex::new(HashMap::new()),
        };
        (Mirror { ctx: Arc::new(ctx) }, state)
    }

    /// Runs until `shutdown`. Writes only while leading (always, without
    /// leader election).
    pub async fn run(self, shutdown: CancellationToken) {
        let ctx = self.ctx;
        let started = Instant::now();
        let (leading_tx, mut leading) = tokio::sync::watch::channel(ctx.config.leader.is_none());
        // Without election the mirror leads from the start: the first pass
        // of the loop takes the initial value as a change.
        leading.mark_changed();
        let elector = ctx.config.leader.clone().map(|config| {
            let client = ctx.client.clone();
            let stop = shutdown.clone();
            tokio::spawn(leader::run(client, config, leading_tx.clone(), stop))
        });
        // Held here, so the channel stays open while no elector runs.
        let _leading_tx = leading_tx;
        let mut elector_running = true;
        let mut queue = Queue::default();
        let mut follow = ctx.view.subscribe();
        let mut seen = ctx.store.durable_seq();
        match ctx.store.outbox() {
            Ok(entries) => {
                for (key, _) in entries {
                    queue.add(key);
                }
            }
            Err(e) => tracing::error!("the outbox could not be read: {e}"),
        }
        let mut tasks: JoinSet<(Job, Outcome)> = JoinSet::new();
        let mut running: HashMap<Id, Job> = HashMap::new();
        let mut attempts: HashMap<Job, u32> = HashMap::new();
        let mut is_leader = false;
        // Set while requests fail for want of an API server (no answer, 5xx):
        // the first success after it retries everything waiting, at once
        // (the budget still paces it), instead of each at its own backoff.
        let mut outage = false;
        let mut unlogged = 0u64;
        let mut last_logged: Option<Instant> = None;
        let hold_until = started + ctx.config.eviction_hold;
        loop {
            let now = Instant::now();
            ctx.metrics.mirror_backlog.set(queue.outbox_len() as i64);
            if is_leader {
                while tasks.len() < ctx.config.workers.max(1) {
                    let Some(job) = queue.next(now, &ctx.view, hold_until) else {
                        break;
                    };
                    let task = {
                        let ctx = ctx.clone();
                        let job = job.clone();
                        tasks.spawn(async move {
                            let outcome = work(&ctx, &job).await;
                            (job, outcome)
                        })
                    };
                    running.insert(task.id(), job);
                }
            }
            // At capacity, the next completion wakes the loop; a timer
            // already due would only spin it.
            let wake = if is_leader && tasks.len() < ctx.config.workers.max(1) {
                queue.next_due()
            } else {
                None
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = leading.changed(), if elector_running => {
                    if changed.is_err() {
                        // The elector ended: nobody vouches for leadership any more.
                        elector_running = false;
                        if is_leader {
                            tracing::error!("leader election ended; writes to the API server stop");
                            tasks.abort_all();
                        }
                        is_leader = false;
                        ctx.state.leader.store(false, Ordering::Relaxed);
                        ctx.metrics.mirror_leader.set(0);
                        continue;
                    }
                    let now_leading = *leading.borrow_and_update();
                    if now_leading && !is_leader {
                        tracing::info!("leading: writing to the API server");
                        queue.lead(Instant::now(), &ctx.view);
                        warn_if_leases_exceed_the_budget(&ctx.config, &ctx.view);
                    } else if !now_leading && is_leader {
                        tracing::warn!("no longer leading: writes to the API server stop");
                        tasks.abort_all();
                    }
                    is_leader = now_leading;
                    ctx.state.leader.store(is_leader, Ordering::Relaxed);
                    ctx.metrics.mirror_leader.set(i64::from(is_leader));
                }
                Ok(()) = follow.changed() => {
                    let durable = *follow.borrow_and_update();
                    seen = queue.follow(&ctx.store, seen, durable, Instant::now());
                }
                Some(done) = tasks.join_next_with_id() => {
                    let now = Instant::now();
                    match done {
                        Ok((id, (job, outcome))) => {
                            running.remove(&id);
                            queue.finished(&job);
                            match outcome {
                                Outcome::Done => {
                                    attempts.remove(&job);
                                    queue.after_success(&job, now, ctx.config.node_lease_renew_interval);
                                    if std::mem::take(&mut outage) {
                                        tracing::info!(backlog = queue.outbox_len(), "the API server answers again; draining the backlog");
                                        queue.renew_all_now(now, &ctx.view);
                                        queue.retry_all_now();
                                        // It may have come back with less than it had.
                                        queue.reconcile_due = Some(now);
                                        attempts.clear();
                                    }
                                }
                                Outcome::Queued(keys) => {
                                    attempts.remove(&job);
                                    for key in keys {
                                        queue.add(key);
                                    }
                                    queue.reconcile_due.get_or_insert(now + RESYNC_PERIOD);
                                }
                                Outcome::Again(delay, failure, unreachable) => {
                                    outage |= unreachable;
                                    let n = attempts.entry(job.clone()).or_insert(0);
                                    let delay = match &failure {
                                        Some(message) => {
                                            *n += 1;
                                            ctx.state.retries.fetch_add(1, Ordering::Relaxed);
                                            ctx.metrics.mirror_retries.inc();
                                            tracing::debug!(?job, attempt = *n, "{message}");
                                            unlogged += 1;
                                            if last_logged.is_none_or(|t| now - t >= FAILURE_LOG_PERIOD) {
                                                tracing::warn!(failures = unlogged, backlog = queue.outbox_len(), "API server requests failing (retried with backoff); last: {message}");
                                                unlogged = 0;
                                                last_logged = Some(now);
                                            }
                                            ctx.config.backoff.delay(*n - 1)
                                        }
                                        None => delay,
                                    };
                                    queue.retry(job, now + delay);
                                }
                            }
                        }
                        Err(e) => {
                            // Aborted (leadership lost) or panicked: the work is still queued.
                            if let Some(job) = running.remove(&e.id()) {
                                queue.finished(&job);
                                queue.retry(job, now);
                            }
                        }
                    }
                }
                _ = sleep_until(wake) => {}
            }
        }
        tasks.shutdown().await;
        if let Some(elector) = elector {
            let _ = elector.await;
        }
        ctx.state.leader.store(false, Ordering::Relaxed);
        ctx.metrics.mirror_leader.set(0);
        if let Some(note) = ctx
            .state
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
        {
            let _ = ctx.store.meta_put(
                META_LAST_ERROR,
                &serde_json::to_vec(&note).expect("a note serializes"),
            );
        }
        tracing::info!(backlog = queue.outbox_len(), "mirror stopped");
    }
}

/// Lease renewals alone can ask for more than the budget allows: say so,
/// with what to change.
fn warn_if_leases_exceed_the_budget(config: &MirrorConfig, view: &View) {
    let ready = view
        .list()
        .iter()
        .filter(|(n, _)| n.ready() == ConditionStatus::True)
        .count();
    let needed = ready as f64 / config.node_lease_renew_interval.as_secs_f64();
    if needed > config.qps * 0.8 {
        tracing::warn!(
            ready,
            needed_qps = needed,
            qps = config.qps,
            "renewing every Ready node's Lease every {} needs more than 80% of --kube-api-qps; Leases will be late and may expire upstream. Raise --kube-api-qps or --node-lease-renew-interval",
            crate::duration::format(config.node_lease_renew_interval)
        );
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Does one piece of work and says what comes next.
async fn work(ctx: &Ctx, job: &Job) -> Outcome {
    let failed = |what: String, e: ApiError| {
        let message = format!("{what}: {e}");
        ctx.state.note(Err(&message));
        let unreachable = e.code.is_none_or(|c| c >= 500);
        Outcome::Again(Duration::ZERO, Some(message), unreachable)
    };
    match job {
        Job::Lease(name) => match ctx.renew_lease(name).await {
            Ok(()) => {
                ctx.state.note(Ok(()));
                Outcome::Done
            }
            Err(e) => failed(format!("renewing the Lease of {name}"), e),
        },
        Job::Reconcile => match ctx.reconcile().await {
            Ok(stale) => {
                if !stale.is_empty() {
                    tracing::info!(
                        nodes = stale.len(),
                        "nodes differ on the API server; queued"
                    );
                }
                if let Err(e) = ctx.store.enqueue(&stale, Micros::now()) {
                    return failed("queueing the nodes that differ".into(), store_error(e));
                }
                ctx.state.note(Ok(()));
                Outcome::Queued(stale)
            }
            Err(e) => failed("listing the API server's nodes".into(), e),
        },
        Job::Outbox(key) => {
            // What the view shows includes every change up to `published`;
            // read before the entry, so an entry at or below it is shown.
            let published = ctx.view.published();
            let seq = match ctx.store.outbox_entry(key) {
                Ok(Some(entry)) => entry.seq,
                Ok(None) => return Outcome::Done,
                Err(e) => return failed(format!("reading the outbox for {key:?}"), store_error(e)),
            };
            if seq > published {
                // Written but not yet durable and shown: sending the view now
                // would send the state before it, and clear the entry.
                return Outcome::Again(BUSY_RETRY, None, false);
            }
            match key {
                OutboxKey::Node(name) => {
                    if let Err(e) = ctx.sync_node(name).await {
                        return failed(format!("mirroring node {name}"), e);
                    }
                }
                OutboxKey::EvictPods(name) => {
                    let result = match ctx.evict_pods(name).await {
                        Err(e) => return failed(format!("deleting the pods of {name}"), e),
                        Ok(Evicted::Nothing) => return Outcome::Done,
                        Ok(Evicted::Held(why)) => {
                            tracing::warn!(node = %name, "pod eviction {why}");
                            return Outcome::Again(
                                ctx.config.node_lease_renew_interval,
                                None,
                                false,
                            );
                        }
                        Ok(Evicted::Dropped(why)) => why,
                        Ok(Evicted::Done { deleted, kept }) => {
                            tracing::warn!(node = %name, deleted, kept, "pods deleted");
                            format!("deleted {deleted} pods ({kept} DaemonSet or static pods kept)")
                        }
                    };
                    let kind = EventKind::EvictionDone { result };
                    if let Err(e) = ctx.controller.record(name.clone(), kind).await {
                        return failed(
                            format!("recording the eviction of {name}"),
                            ApiError {
                                code: None,
                                message: e.to_string(),
                            },
                        );
                    }
                }
            }
            match ctx.store.outbox_done(key, seq) {
                Ok(true) => {
                    ctx.state.note(Ok(()));
                    Outcome::Done
                }
                // Something newer was queued while we worked: again, now.
                Ok(false) => Outcome::Again(Duration::ZERO, None, false),
                Err(e) => failed("clearing the outbox".into(), store_error(e)),
            }
        }
    }
}
