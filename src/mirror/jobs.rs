//! What each piece of the mirror's work does against the API server: bring
//! a Node (and its CSINode, `csinodes.rs`) to the registry's record (or
//! delete it), renew a Lease, delete an
//! evicted node's pods (`eviction.rs`). Every request goes through [`Ctx::call`]: a token
//! from the budget at the work's priority, the request timeout, metrics, and
//! the API server's `429 Retry-After` honoured.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::api::core::v1::Node as KubeNode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::Value;
use tokio::time::Instant;

use super::budget::{Budget, Priority};
use super::queue::{Job, Outcome};
use super::upstream::{Known, Upstream};
use super::versions::ServerVersions;
use super::{mirror_patch, ApiError, MirrorConfig, MirrorState, BUSY_RETRY, FIELD_MANAGER};
use crate::controller::ControllerHandle;
use crate::metrics::{Metrics, MirrorRequestLabels};
use crate::model::Micros;
use crate::store::{OutboxKey, Store};
use crate::view::View;

pub use crate::model::NODE_LEASE_NAMESPACE;
/// Pods are listed this many at a time.
pub(crate) const PAGE: u32 = 500;
/// A resourceVersion conflict is re-read and retried this often before the
/// entry goes back to the queue with backoff.
pub(crate) const CONFLICT_RETRIES: usize = 5;
/// A request answered 429 is sent again after the Retry-After this often
/// before its work goes back to the queue.
const THROTTLE_RETRIES: usize = 3;
/// A 429 without a Retry-After waits this long...
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// ...and none waits longer than this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// What the mirror knows of a node's Lease upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeaseKnown {
    /// Last written at this resourceVersion.
    At(String),
    /// Not there (its node was just created): create it.
    Absent,
}

/// What the tasks share.
pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) watch_client: Client,
    pub(crate) budget: Budget,
    pub(crate) store: Arc<Store>,
    pub(crate) view: Arc<View>,
    pub(crate) controller: ControllerHandle,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) state: Arc<MirrorState>,
    pub(crate) config: MirrorConfig,
    /// What is known of the node Leases upstream.
    pub(crate) leases: Mutex<HashMap<String, LeaseKnown>>,
    /// The API server's Nodes, as last listed, watched or written.
    pub(crate) upstream: Mutex<Upstream>,
    /// The versions writes were answered with, to notice a restart.
    pub(crate) versions: ServerVersions,
    /// What is known of the nodes' CSINodes upstream (`csinodes.rs`).
    pub(crate) csinodes: Mutex<super::csinodes::CsiNodeKnown>,
}

impl Ctx {
    pub(crate) fn upstream(&self) -> MutexGuard<'_, Upstream> {
        self.upstream.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn leases(&self) -> MutexGuard<'_, HashMap<String, LeaseKnown>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes how many registry nodes are missing or differ upstream.
    pub(crate) fn publish_drift(&self) {
        let (missing, differ) = self.upstream().drift();
        self.state.set_drift(missing, differ);
        self.metrics
            .mirror_nodes_missing_upstream
            .set(missing as i64);
        self.metrics.mirror_nodes_differ_upstream.set(differ as i64);
    }

    /// One API request: a token from the budget at `priority`, a timeout,
    /// metrics. A 429 pauses the whole budget for its Retry-After and sends
    /// the request again (a few times) rather than failing it.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        priority: Priority,
        verb: &'static str,
        request: F,
    ) -> Result<T, ApiError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut attempt = 0;
        // Bounded: THROTTLE_RETRIES sends again at most.
        loop {
            self.budget.acquire(priority).await;
            let started = Instant::now();
            let result = match tokio::time::timeout(self.config.request_timeout, request()).await {
                Ok(r) => r.map_err(ApiError::from),
                Err(_) => Err(ApiError::local(format!(
                    "no answer within {}",
                    crate::duration::format(self.config.request_timeout)
                ))),
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
            match result {
                Err(e) if e.is(429) => {
                    let wait = self.throttled(&e);
                    if attempt == THROTTLE_RETRIES {
                        return Err(ApiError {
                            retry_after: Some(wait),
                            ..e
                        });
                    }
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// A write through [`Ctx::call`] whose answer is checked against the
    /// versions answered before it was sent: one lower means the API server
    /// started over, and the watcher lists again.
    async fn write<K, F, Fut>(
        &self,
        priority: Priority,
        verb: &'static str,
        request: F,
    ) -> Result<K, ApiError>
    where
        K: kube::Resource,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<K, kube::Error>>,
    {
        let before = self.versions.floor();
        let written = self.call(priority, verb, request).await?;
        let version = written.meta().resource_version.as_deref();
        if self.versions.written(before, version) {
            tracing::warn!(
                "the API server answered a write at resourceVersion {} after higher ones: it started its versions over (restored or replaced); listing its nodes again",
                version.unwrap_or_default()
            );
        }
        Ok(written)
    }

    /// The API server throttled us: the budget waits its Retry-After out.
    fn throttled(&self, e: &ApiError) -> Duration {
        let wait = e
            .retry_after
            .unwrap_or(DEFAULT_RETRY_AFTER)
            .min(MAX_RETRY_AFTER);
        self.budget.pause_for(wait);
        self.state.note_throttled(wait);
        self.metrics.mirror_throttled.inc();
        wait
    }

    fn nodes(&self) -> Api<KubeNode> {
        Api::all(self.client.clone())
    }

    /// The registry's node as the API server should have it.
    pub(crate) fn desired(&self, name: &str) -> Option<Value> {
        let (record, _) = self.view.get(name)?;
        Some(
            serde_json::to_value(crate::k8s::NodeJson::shown(&record, None))
                .expect("a node writes as JSON"),
        )
    }

    /// Brings the API server's Node to the registry's record (or deletes it).
    /// Works from the copy last seen, so a status change costs one request;
    /// a stale copy shows up as a 409 (or 404) and is read again. Returns
    /// whether the Node was created.
    async fn sync_node(&self, name: &str, priority: Priority) -> Result<bool, ApiError> {
        let Some(desired) = self.desired(name) else {
            self.delete_node(name, priority).await?;
            return Ok(false);
        };
        let (current, created) = self.sync_spec(name, &desired, priority).await?;
        let uid = current["metadata"]["uid"].as_str().map(str::to_string);
        self.sync_status(name, current, &desired, priority).await?;
        self.sync_csinode(name, uid.as_deref(), priority).await?;
        Ok(created)
    }

    /// Creates the Node, or brings its metadata and spec to `desired`;
    /// returns it as the API server answered, and whether it was created.
    async fn sync_spec(
        &self,
        name: &str,
        desired: &Value,
        priority: Priority,
    ) -> Result<(Value, bool), ApiError> {
        let nodes = self.nodes();
        let params = PatchParams::apply(FIELD_MANAGER);
        let mut known = self.upstream().get(name);
        let mut created = false;
        for _ in 0..CONFLICT_RETRIES {
            let found = match std::mem::replace(&mut known, Known::Unknown) {
                Known::Present(node) => Some(node),
                Known::Missing => None,
                Known::Unknown => self
                    .call(priority, "get", || nodes.get_opt(name))
                    .await?
                    .map(|n| to_value(&n)),
            };
            let node = match found {
                Some(node) => node,
                None => match self.create_node(name, desired, priority).await? {
                    Some(node) => {
                        created = true;
                        node
                    }
                    // Created meanwhile: adopted on the next round.
                    None => continue,
                },
            };
            let Some(patch) = mirror_patch::spec_patch(&node, desired) else {
                return Ok((node, created));
            };
            let patch = Patch::Merge(&patch);
            match self
                .write(priority, "patch", || nodes.patch(name, &params, &patch))
                .await
            {
                Ok(node) => {
                    let node = to_value(&node);
                    self.upstream().wrote(name, node.clone());
                    return Ok((node, created));
                }
                // Someone else wrote the node: read it again.
                Err(e) if e.is(409) => continue,
                // It is gone: create it.
                Err(e) if e.is(404) => known = Known::Missing,
                Err(e) => {
                    self.upstream().distrust(name);
                    return Err(e);
                }
            }
        }
        self.upstream().distrust(name);
        Err(ApiError::conflict(format!(
            "node {name} kept changing under us ({CONFLICT_RETRIES} conflicts in a row)"
        )))
    }

    /// Creates the Node as `desired`; `None` when it was created meanwhile.
    async fn create_node(
        &self,
        name: &str,
        desired: &Value,
        priority: Priority,
    ) -> Result<Option<Value>, ApiError> {
        let nodes = self.nodes();
        let create: KubeNode = serde_json::from_value(mirror_patch::for_create(desired))
            .expect("a node built from a node");
        let pp = PostParams::default();
        match self
            .write(priority, "create", || nodes.create(&pp, &create))
            .await
        {
            Ok(node) => {
                let node = to_value(&node);
                self.upstream().wrote(name, node.clone());
                // A new Node has no Lease yet.
                self.leases().insert(name.to_string(), LeaseKnown::Absent);
                Ok(Some(node))
            }
            Err(e) if e.is(409) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Brings the status (conditions, then addresses) of `current` to `desired`.
    async fn sync_status(
        &self,
        name: &str,
        mut current: Value,
        desired: &Value,
        priority: Priority,
    ) -> Result<(), ApiError> {
        let nodes = self.nodes();
        let params = PatchParams::apply(FIELD_MANAGER);
        let patches = [
            mirror_patch::status_patch(&current, desired).map(Patch::Strategic),
            mirror_patch::addresses_patch(&current, desired).map(Patch::Merge),
        ];
        for patch in patches.into_iter().flatten() {
            match self
                .write(priority, "patch_status", || {
                    nodes.patch_status(name, &params, &patch)
                })
                .await
            {
                Ok(node) => {
                    current = to_value(&node);
                    self.upstream().wrote(name, current.clone());
                }
                Err(e) => {
                    // Gone (created again next time), or not to be trusted.
                    if e.is(404) {
                        self.upstream().missing(name);
                    } else {
                        self.upstream().distrust(name);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Deletes `name` through `api`; one already gone counts as deleted.
    pub(crate) async fn delete<K>(
        &self,
        priority: Priority,
        api: &Api<K>,
        name: &str,
    ) -> Result<(), ApiError>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let dp = DeleteParams::default();
        match self
            .call(priority, "delete", || api.delete(name, &dp))
            .await
        {
            Err(e) if !e.is(404) => Err(e),
            _ => Ok(()),
        }
    }

    async fn delete_node(&self, name: &str, priority: Priority) -> Result<(), ApiError> {
        self.delete(priority, &self.nodes(), name).await?;
        let leases: Api<KubeLease> = Api::namespaced(self.client.clone(), NODE_LEASE_NAMESPACE);
        self.delete(priority, &leases, name).await?;
        self.delete_csinode(name, priority).await?;
        self.leases().remove(name);
        self.upstream().forget(name);
        Ok(())
    }

    /// `name`'s Lease as renewed now, at `rv` (`None` to create it).
    fn node_lease(&self, name: &str, rv: Option<String>) -> KubeLease {
        KubeLease {
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
        }
    }

    /// Renews a Ready node's Lease: one PUT when its resourceVersion is
    /// known, one POST when it is known absent, a read first otherwise.
    pub(crate) async fn renew_lease(&self, name: &str) -> Result<(), ApiError> {
        let api: Api<KubeLease> = Api::namespaced(self.client.clone(), NODE_LEASE_NAMESPACE);
        enum Step {
            /// Replace it at this resourceVersion, or create it (`None`).
            Write(Option<String>),
            Read,
        }
        let mut step = match self.leases().get(name).cloned() {
            Some(LeaseKnown::At(rv)) => Step::Write(Some(rv)),
            Some(LeaseKnown::Absent) => Step::Write(None),
            None => Step::Read,
        };
        let pp = PostParams::default();
        let mut written = None;
        // Bounded: read, then update or create, then once more on a race.
        for _ in 0..4 {
            step = match step {
                Step::Write(rv) => {
                    let update = rv.is_some();
                    let body = self.node_lease(name, rv);
                    let sent = if update {
                        let replace = || api.replace(name, &pp, &body);
                        self.write(Priority::Lease, "update", replace).await
                    } else {
                        let create = || api.create(&pp, &body);
                        self.write(Priority::Lease, "create", create).await
                    };
                    match sent {
                        Ok(l) => {
                            written = Some(l);
                            break;
                        }
                        // Gone since it was written: created again.
                        Err(e) if e.is(404) && update => Step::Write(None),
                        Err(e) if e.is(409) => Step::Read,
                        Err(e) => return Err(e),
                    }
                }
                Step::Read => match self
                    .call(Priority::Lease, "get", || api.get_opt(name))
                    .await?
                {
                    Some(existing) => {
                        Step::Write(Some(existing.metadata.resource_version.unwrap_or_default()))
                    }
                    None => Step::Write(None),
                },
            };
        }
        let Some(written) = written else {
            self.leases().remove(name);
            return Err(ApiError::conflict(format!(
                "the Lease of {name} kept changing under us"
            )));
        };
        match written.metadata.resource_version {
            Some(rv) => self.leases().insert(name.to_string(), LeaseKnown::At(rv)),
            None => self.leases().remove(name),
        };
        self.state.lease_renewals.fetch_add(1, Ordering::Relaxed);
        self.metrics.mirror_lease_renewals.inc();
        Ok(())
    }

    /// The node is missing upstream: so is its Lease, most likely (an API
    /// server that lost one lost both); it is read before it is written.
    pub(crate) fn lease_unknown(&self, name: &str) {
        self.leases().remove(name);
    }
}

/// A failed piece of work: noted, and retried with backoff, or after the
/// Retry-After when throttled.
pub(super) fn failed(ctx: &Ctx, what: String, e: ApiError) -> Outcome {
    if e.is(429) {
        // Throttled, not failed: shown as such, and tried again after
        // the Retry-After.
        return Outcome::Throttled(e.retry_after.unwrap_or(DEFAULT_RETRY_AFTER));
    }
    let message = format!("{what}: {e}");
    ctx.state.note(Err(&message));
    let unreachable = e.code.is_none_or(|c| c >= 500);
    Outcome::Failed {
        message,
        unreachable,
    }
}

/// A piece of work done: noted.
pub(super) fn done(ctx: &Ctx, created: bool, again: bool) -> Outcome {
    ctx.state.note(Ok(()));
    Outcome::Done { created, again }
}

/// Does one piece of work and says how it went.
pub(crate) async fn work(ctx: &Ctx, job: &Job, priority: Priority) -> Outcome {
    let failed = |what: String, e: ApiError| failed(ctx, what, e);
    let done = |created, again| done(ctx, created, again);
    match job {
        Job::Lease(name) => match ctx.renew_lease(name).await {
            Ok(()) => done(false, false),
            Err(e) => failed(format!("renewing the Lease of {name}"), e),
        },
        Job::Outbox(key) => {
            // What the view shows includes every change up to `published`;
            // read before the entry, so an entry at or below it is shown.
            let published = ctx.view.published();
            let seq = match ctx.store.outbox_entry(key) {
                Ok(Some(entry)) => entry.seq,
                Ok(None) => return done(false, false),
                Err(e) => return failed(format!("reading the outbox for {key:?}"), store_error(e)),
            };
            if seq > published {
                // Written but not yet durable and shown: sending the view now
                // would send the state before it, and clear the entry.
                return Outcome::Later(BUSY_RETRY);
            }
            let mut created = false;
            match key {
                OutboxKey::Node(name) => {
                    let synced = ctx.sync_node(name, priority).await;
                    ctx.publish_drift();
                    match synced {
                        Ok(c) => created = c,
                        Err(e) => return failed(format!("mirroring node {name}"), e),
                    }
                }
                OutboxKey::EvictPods(name) => {
                    if let Err(outcome) =
                        super::eviction::evict_and_record(ctx, name, priority).await
                    {
                        return outcome;
                    }
                }
            }
            match ctx.store.outbox_done(key, seq) {
                Ok(removed) => done(created, !removed),
                Err(e) => failed("clearing the outbox".into(), store_error(e)),
            }
        }
    }
}

fn to_value(node: &KubeNode) -> Value {
    serde_json::to_value(node).expect("k8s types serialize")
}

pub(crate) fn store_error(e: crate::store::StoreError) -> ApiError {
    ApiError::local(e.to_string())
}

/// A mirror's shared state against an in-process API server, for tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::mirror::client::ApiServer;
    use nodekeeper_sim::apiserver::FakeApiServer;

    /// The tasks' context over `server`, with a budget of `qps` and `burst`
    /// and a store under `dir`.
    pub(crate) async fn ctx(
        server: &FakeApiServer,
        dir: &std::path::Path,
        qps: f64,
        burst: u32,
    ) -> Ctx {
        crate::install_crypto_provider();
        let config = MirrorConfig::new(ApiServer::Master(server.url()));
        let connection = config
            .api_server
            .connect(config.request_timeout)
            .await
            .expect("a client for the in-process API server");
        let store = crate::store::Store::open(&dir.join("db"), &Default::default())
            .expect("a store in a temporary directory");
        let state = Arc::new(MirrorState::new(connection.url, "test".into()));
        Ctx {
            client: connection.client,
            watch_client: connection.watch_client,
            budget: Budget::new(qps, burst),
            store: Arc::new(store),
            view: Arc::new(View::default()),
            controller: ControllerHandle::channel().0,
            metrics: Arc::new(Metrics::new()),
            state,
            config,
            leases: Mutex::new(HashMap::new()),
            csinodes: Mutex::new(HashMap::new()),
            upstream: Mutex::new(Upstream::default()),
            versions: ServerVersions::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodekeeper_sim::apiserver::FakeApiServer;
    use serde_json::json;

    fn lease_json(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE},
               "spec": {"holderIdentity": name}})
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_renewed_on_a_server_that_started_over_is_noticed() {
        let server = FakeApiServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let ctx = testing::ctx(&server, dir.path(), 100.0, 10).await;
        let mut restarts = ctx.versions.restarts();
        for i in 0..10 {
            server.put_lease(lease_json(&format!("other-{i}")));
        }
        ctx.renew_lease("n1").await.expect("created");
        ctx.renew_lease("n1").await.expect("renewed");
        assert!(!restarts.has_changed().unwrap(), "versions went up");

        server.restart_empty().await;
        // Renewed from the version last written: 404, then created at 1.
        ctx.renew_lease("n1").await.expect("created again");
        assert!(restarts.has_changed().unwrap(), "the restart is noticed");
        restarts.borrow_and_update();
        ctx.renew_lease("n1").await.expect("renewed");
        assert!(!restarts.has_changed().unwrap(), "once, not at every write");
    }
}
