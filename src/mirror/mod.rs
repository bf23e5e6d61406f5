//! The mirror: keeps a Kubernetes API server's Nodes, their status, taints
//! and Leases in line with the registry, and deletes pods of evicted nodes.
//!
//! Work comes from the durable outbox ([`crate::store::OutboxKey`]), which
//! the store fills in the same transaction as each change; the mirror learns
//! of new entries by following the durable event log, and on start reads the
//! whole outbox back. Each entry is coalesced per node: the mirror sends the
//! node as it is *now*, and removes the entry only if nothing newer was
//! queued meanwhile. It also watches the API server's Nodes (`watch.rs`), so
//! a Node deleted or changed there, or an API server that comes back with
//! less, is repaired within seconds.
//!
//! Every request, whoever makes it, first takes a token from one [`Budget`]
//! at the priority of its work (`queue.rs`): Lease renewals of Ready nodes,
//! then condition and taint changes, then creations and the backlog, then
//! lists. Without `--kube-api-qps` the budget is sized from the number of
//! Ready nodes (`capacity.rs`); either way the mirror says when the budget
//! cannot keep every Lease renewed in time.
//!
//! Pod deletions are re-checked right before they happen: a node Ready
//! again, or whose not-Ready spell is not the one that was judged, keeps its
//! pods; while every node of the site looks down nothing is deleted; and
//! after a restart nothing is deleted before the controller has had a grace
//! period to see the nodes again.

pub mod budget;
pub mod capacity;
pub mod client;
mod jobs;
pub mod leader;
mod queue;
mod upstream;
mod versions;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::{Id, JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use jobs::Ctx;
use queue::{Job, Queue};
use watch::Report;

use crate::controller::ControllerHandle;
use crate::kube::mirror_patch;
use crate::metrics::Metrics;
use crate::model::{ConditionStatus, Micros};
use crate::store::{OutboxKey, Store};
use crate::view::View;
pub use budget::{Backoff, Budget, Priority};
pub use capacity::{BudgetFlags, Plan};
pub use client::{ApiServer, ClientError, Connection};
pub use jobs::NODE_LEASE_NAMESPACE;
pub use leader::LeaderConfig;

/// The field manager nodekeeper's writes are recorded under.
pub const FIELD_MANAGER: &str = "nodekeeper";
/// A Lease renewal due while its node has other work in flight waits this long.
pub(crate) const BUSY_RETRY: Duration = Duration::from_millis(100);
/// History events read per step when following the log.
pub(crate) const FOLLOW_BATCH: usize = 4096;
/// Reports from the watcher waiting for the loop, at most.
const REPORTS: usize = 1024;

/// How the mirror behaves.
#[derive(Debug, Clone)]
pub struct MirrorConfig {
    pub api_server: ApiServer,
    /// `--kube-api-qps` and `--kube-api-burst`; what is not given is sized
    /// from the number of Ready nodes.
    pub budget: BudgetFlags,
    /// Connect, send and answer, per request.
    pub request_timeout: Duration,
    /// `leaseDurationSeconds` of node Leases.
    pub node_lease_duration: Duration,
    /// How often a Ready node's Lease is renewed; `None` when node Leases
    /// are not mirrored (`--mirror-leases=false`).
    pub node_lease_renew_interval: Option<Duration>,
    pub backoff: Backoff,
    /// No pod is deleted before this long after the controller started: the
    /// controller must first see the nodes again.
    pub eviction_hold: Duration,
    pub leader: Option<LeaderConfig>,
}

impl MirrorConfig {
    pub fn new(api_server: ApiServer) -> MirrorConfig {
        let duration = Duration::from_secs(40);
        MirrorConfig {
            api_server,
            budget: BudgetFlags::default(),
            request_timeout: Duration::from_secs(10),
            node_lease_duration: duration,
            node_lease_renew_interval: Some(duration / 3),
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
    throttled: AtomicU64,
    missing_upstream: AtomicUsize,
    differ_upstream: AtomicUsize,
    watching: AtomicBool,
    notes: Mutex<Notes>,
}

/// The parts of [`MirrorState`] that are more than a number.
#[derive(Default)]
struct Notes {
    last_error: Option<ErrorNote>,
    last_success: Option<Micros>,
    last_list: Option<Micros>,
    /// The last 429: when, and its Retry-After.
    last_throttle: Option<(Micros, Duration)>,
    plan: Option<Plan>,
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
    /// Requests the API server answered 429 (throttling, not errors).
    #[serde(default)]
    pub throttled: u64,
    #[serde(default, rename = "lastThrottled")]
    pub last_throttled: Option<Throttle>,
    /// What the mirror last saw of the API server's nodes.
    #[serde(default)]
    pub upstream: Option<UpstreamStatus>,
    /// The request budget and whether it covers the Leases.
    #[serde(default)]
    pub budget: Option<BudgetStatus>,
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

/// The last 429 from the API server.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Throttle {
    pub time: Micros,
    #[serde(rename = "retryAfterSeconds")]
    pub retry_after_seconds: f64,
}

/// Registry nodes the API server lacks, or has otherwise, as last seen.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct UpstreamStatus {
    /// Registry nodes missing upstream.
    pub missing: usize,
    /// Registry nodes upstream that differ from the registry.
    pub differ: usize,
    /// Whether the watch of the API server's nodes is open.
    pub watching: bool,
    /// When its nodes were last listed in full.
    #[serde(rename = "lastList")]
    pub last_list: Option<Micros>,
}

/// The request budget, and what the Leases need of it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BudgetStatus {
    pub qps: f64,
    pub burst: u32,
    /// Sized from the node count (no `--kube-api-qps`).
    pub sized: bool,
    /// Whether node Leases are mirrored.
    pub leases: bool,
    #[serde(rename = "leaseRenewIntervalSeconds")]
    pub lease_renew_interval_seconds: Option<f64>,
    #[serde(rename = "readyNodes")]
    pub ready_nodes: usize,
    /// Requests per second the Lease renewals need.
    #[serde(rename = "leaseQps")]
    pub lease_qps: f64,
    /// The rate that leaves a fifth of the budget to other work.
    #[serde(rename = "requiredQps")]
    pub required_qps: f64,
    pub enough: bool,
    /// What is wrong and what to do, when not enough.
    pub shortfall: Option<String>,
}

impl From<&Plan> for BudgetStatus {
    fn from(p: &Plan) -> Self {
        BudgetStatus {
            qps: p.qps,
            burst: p.burst,
            sized: p.sized,
            leases: p.renew_interval.is_some(),
            lease_renew_interval_seconds: p.renew_interval.map(|d| d.as_secs_f64()),
            ready_nodes: p.ready,
            lease_qps: p.lease_qps,
            required_qps: p.required_qps,
            enough: p.enough(),
            shortfall: p.shortfall(),
        }
    }
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
            throttled: AtomicU64::new(0),
            missing_upstream: AtomicUsize::new(0),
            differ_upstream: AtomicUsize::new(0),
            watching: AtomicBool::new(false),
            notes: Mutex::new(Notes::default()),
        }
    }

    fn notes(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// The mirror's readiness: an error saying why when the request budget
    /// cannot keep every Ready node's Lease renewed in time.
    pub fn readiness(&self) -> Result<(), String> {
        match self.notes().plan.as_ref().and_then(Plan::shortfall) {
            None => Ok(()),
            Some(why) => Err(format!("mirror: {why}")),
        }
    }

    /// The budget's plan last checked, if any.
    pub fn plan(&self) -> Option<Plan> {
        self.notes().plan.clone()
    }

    fn note(&self, result: Result<(), &str>) {
        let mut notes = self.notes();
        match result {
            Ok(()) => notes.last_success = Some(Micros::now()),
            Err(message) => {
                notes.last_error = Some(ErrorNote {
                    time: Micros::now(),
                    message: message.to_string(),
                })
            }
        }
    }

    fn note_throttled(&self, wait: Duration) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
        self.notes().last_throttle = Some((Micros::now(), wait));
    }

    fn note_listed(&self) {
        self.notes().last_list = Some(Micros::now());
    }

    fn set_watching(&self, watching: bool) {
        self.watching.store(watching, Ordering::Relaxed);
    }

    fn set_drift(&self, missing: usize, differ: usize) {
        self.missing_upstream.store(missing, Ordering::Relaxed);
        self.differ_upstream.store(differ, Ordering::Relaxed);
    }

    fn set_plan(&self, plan: Plan) {
        self.notes().plan = Some(plan);
    }

    /// The status, with the backlog read from the store.
    pub fn status(&self, store: &Store) -> Result<MirrorStatus, crate::store::StoreError> {
        let mut status = status_from_store(store)?;
        let notes = self.notes();
        status.running = true;
        status.server = Some(self.server.clone());
        status.identity = Some(self.identity.clone());
        status.leader = self.is_leader();
        status.last_error = notes.last_error.clone().or(status.last_error);
        status.last_success = notes.last_success;
        status.requests = self.requests.load(Ordering::Relaxed);
        status.retries = self.retries.load(Ordering::Relaxed);
        status.lease_renewals = self.lease_renewals.load(Ordering::Relaxed);
        status.throttled = self.throttled.load(Ordering::Relaxed);
        status.last_throttled = notes.last_throttle.map(|(time, wait)| Throttle {
            time,
            retry_after_seconds: wait.as_secs_f64(),
        });
        status.upstream = Some(UpstreamStatus {
            missing: self.missing_upstream.load(Ordering::Relaxed),
            differ: self.differ_upstream.load(Ordering::Relaxed),
            watching: self.watching.load(Ordering::Relaxed),
            last_list: notes.last_list,
        });
        status.budget = notes.plan.as_ref().map(BudgetStatus::from);
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
        throttled: 0,
        last_throttled: None,
        upstream: None,
        budget: None,
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
    /// How long the API server asked us to wait (a 429's Retry-After).
    pub retry_after: Option<Duration>,
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
                retry_after: status
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(u64::from(s))),
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
                    retry_after: None,
                }
            }
        }
    }
}

/// The mirror, ready to run.
pub struct Mirror {
    ctx: Arc<Ctx>,
}

impl Mirror {
    /// Builds the clients; fails with a clear message when the API server's
    /// configuration is unusable (not when it is unreachable: that is an
    /// outage, and the outbox waits it out). Called before the store is
    /// opened, so a bad kubeconfig leaves nothing behind.
    pub async fn connect(config: &MirrorConfig) -> Result<Connection, ClientError> {
        config.api_server.connect(config.request_timeout).await
    }

    /// The mirror over a connection from [`Mirror::connect`].
    pub fn new(
        config: MirrorConfig,
        connection: Connection,
        store: Arc<Store>,
        view: Arc<View>,
        controller: ControllerHandle,
        metrics: Arc<Metrics>,
        identity: String,
    ) -> (Mirror, Arc<MirrorState>) {
        let state = Arc::new(MirrorState::new(connection.url, identity));
        let plan = Plan::new(0, config.node_lease_renew_interval, config.budget);
        let ctx = Ctx {
            client: connection.client,
            watch_client: connection.watch_client,
            budget: Budget::new(plan.qps, plan.burst),
            store,
            view,
            controller,
            metrics,
            state: state.clone(),
            config,
            leases: Mutex::new(HashMap::new()),
            upstream: Mutex::new(upstream::Upstream::default()),
            versions: versions::ServerVersions::default(),
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
        let mut queue = Queue::new(
            started,
            ctx.config.node_lease_renew_interval,
            ctx.config.backoff,
        );
        let mut follow = ctx.view.subscribe();
        let mut seen = ctx.store.durable_seq();
        match ctx.store.outbox() {
            Ok(entries) => {
                // Waiting since before this start: the backlog.
                for (key, _) in entries {
                    queue.add(key, Priority::Backlog);
                }
            }
            Err(e) => tracing::error!("the outbox could not be read: {e}"),
        }
        let ready_now = ctx
            .view
            .list()
            .iter()
            .filter(|(n, _)| n.ready() == ConditionStatus::True)
            .count();
        let mut workers = check_budget(&ctx, ready_now, None);
        let (reports_tx, mut reports) = mpsc::channel(REPORTS);
        let mut watcher: Option<(JoinHandle<()>, CancellationToken)> = None;
        let mut tasks: JoinSet<Outcome> = JoinSet::new();
        let mut running: HashMap<Id, Job> = HashMap::new();
        let mut is_leader = false;
        let hold_until = started + ctx.config.eviction_hold;
        loop {
            let now = Instant::now();
            ctx.metrics.mirror_backlog.set(queue.outbox_len() as i64);
            if is_leader {
                let missing = |name: &str| ctx.upstream().is_missing(name);
                while let Some((job, priority)) =
                    queue.next(now, hold_until, tasks.len(), workers, &missing)
                {
                    let task = {
                        let ctx = ctx.clone();
                        let job = job.clone();
                        tasks.spawn(async move { jobs::work(&ctx, &job, priority).await })
                    };
                    running.insert(task.id(), job);
                }
            }
            // At capacity, the next completion wakes the loop; a timer
            // already due would only spin it.
            let wake = if is_leader && tasks.len() < workers {
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
                            stop_leading(&ctx, &mut tasks, &mut watcher, &mut queue);
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
                        workers = check_budget(&ctx, queue.ready_count(), None);
                        let stop = shutdown.child_token();
                        let handle = tokio::spawn(watch::watch_nodes(ctx.clone(), reports_tx.clone(), stop.clone()));
                        watcher = Some((handle, stop));
                    } else if !now_leading && is_leader {
                        if shutdown.is_cancelled() {
                            tracing::info!("stopping: leadership given up");
                        } else {
                            tracing::warn!("no longer leading: writes to the API server stop");
                        }
                        stop_leading(&ctx, &mut tasks, &mut watcher, &mut queue);
                    }
                    is_leader = now_leading;
                    ctx.state.leader.store(is_leader, Ordering::Relaxed);
                    ctx.metrics.mirror_leader.set(i64::from(is_leader));
                }
                Ok(()) = follow.changed() => {
                    let durable = *follow.borrow_and_update();
                    let before = ctx.state.plan();
                    let (now_seen, ready_changed) = queue.follow(&ctx.store, &ctx.view, seen, durable, Instant::now());
                    seen = now_seen;
                    if ready_changed {
                        workers = check_budget(&ctx, queue.ready_count(), before.as_ref());
                    }
                }
                Some(report) = reports.recv() => {
                    on_report(&ctx, &mut queue, report, Instant::now());
                }
                Some(done) = tasks.join_next_with_id() => {
                    let now = Instant::now();
                    match done {
                        Ok((id, outcome)) => {
                            let Some(job) = running.remove(&id) else { continue };
                            if matches!(outcome, queue::Outcome::Failed { .. }) {
                                ctx.state.retries.fetch_add(1, Ordering::Relaxed);
                                ctx.metrics.mirror_retries.inc();
                            }
                            let finished = queue.finished(job, outcome, now);
                            if let Some(warning) = finished.warn {
                                tracing::warn!("{warning}");
                            }
                            if finished.recovered {
                                tracing::info!(backlog = queue.outbox_len(), "the API server answers again; draining the backlog");
                            }
                        }
                        Err(e) => {
                            // Aborted (leadership lost) or panicked: the work is still queued.
                            if let Some(job) = running.remove(&e.id()) {
                                queue.aborted(job, now);
                            }
                        }
                    }
                }
                _ = sleep_until(wake) => {}
            }
        }
        tasks.shutdown().await;
        if let Some((handle, stop)) = watcher.take() {
            stop.cancel();
            let _ = handle.await;
        }
        if let Some(elector) = elector {
            let _ = elector.await;
        }
        ctx.state.leader.store(false, Ordering::Relaxed);
        ctx.metrics.mirror_leader.set(0);
        if let Some(note) = ctx.state.notes().last_error.clone() {
            let _ = ctx.store.meta_put(
                META_LAST_ERROR,
                &serde_json::to_vec(&note).expect("a note serializes"),
            );
        }
        tracing::info!(backlog = queue.outbox_len(), "mirror stopped");
    }
}

/// What the finished work's task gives back.
type Outcome = queue::Outcome;

/// Leadership ends: work in flight and the watch stop.
fn stop_leading(
    ctx: &Ctx,
    tasks: &mut JoinSet<Outcome>,
    watcher: &mut Option<(JoinHandle<()>, CancellationToken)>,
    queue: &mut Queue,
) {
    tasks.abort_all();
    if let Some((handle, stop)) = watcher.take() {
        stop.cancel();
        handle.abort();
    }
    ctx.state.set_watching(false);
    ctx.upstream().incomplete();
    queue.lost_lead();
}

/// What the watcher saw, into the schedule (and the durable outbox).
fn on_report(ctx: &Ctx, queue: &mut Queue, report: Report, now: Instant) {
    let stale = match report {
        Report::Failed {
            message,
            unreachable,
        } => {
            if unreachable {
                queue.unreachable();
            }
            ctx.state.note(Err(&message));
            tracing::debug!("{message}");
            return;
        }
        Report::Listed(stale) => {
            ctx.state.note(Ok(()));
            if queue.answered(now) {
                tracing::info!(
                    backlog = queue.outbox_len(),
                    "the API server answers again; draining the backlog"
                );
            }
            if !stale.is_empty() {
                let missing = stale.iter().filter(|(_, m)| *m).count();
                tracing::info!(
                    missing,
                    differ = stale.len() - missing,
                    "nodes missing or different on the API server; queued"
                );
            }
            stale
        }
        Report::Changed(name, missing) => {
            tracing::debug!(node = %name, missing, "node changed on the API server; queued");
            vec![(name, missing)]
        }
    };
    let keys: Vec<OutboxKey> = stale
        .iter()
        .map(|(name, _)| OutboxKey::Node(name.clone()))
        .collect();
    if let Err(e) = ctx.store.enqueue(&keys, Micros::now()) {
        tracing::error!("could not queue the nodes that differ on the API server: {e}");
    }
    for (name, missing) in stale {
        queue.upstream_changed(&name, missing);
    }
}

/// Checks the budget against the Leases of `ready` nodes; sizes it when no
/// `--kube-api-qps` was given; says so when it is short, and when that
/// changes. Returns how many requests may be in flight.
fn check_budget(ctx: &Ctx, ready: usize, before: Option<&Plan>) -> usize {
    let plan = Plan::new(
        ready,
        ctx.config.node_lease_renew_interval,
        ctx.config.budget,
    );
    if plan.sized && Some((plan.qps, plan.burst)) != before.map(|p| (p.qps, p.burst)) {
        ctx.budget.set_rate(plan.qps, plan.burst);
        // Said when it starts and when it moves by a quarter, not at every node.
        let moved = before.is_none_or(|b| (plan.qps - b.qps).abs() >= b.qps / 4.0);
        if moved {
            tracing::info!(
                ready,
                qps = plan.qps,
                burst = plan.burst,
                "request budget sized from the Ready nodes' Leases"
            );
        }
    }
    let was_enough = before.is_none_or(Plan::enough);
    match plan.shortfall() {
        Some(why) if was_enough => {
            tracing::warn!(
                ready,
                needed_qps = plan.required_qps.ceil(),
                qps = plan.qps,
                "{why}"
            );
        }
        None if !was_enough => {
            tracing::info!(
                ready,
                qps = plan.qps,
                "the request budget covers every Ready node's Lease again"
            );
        }
        _ => {}
    }
    ctx.metrics.mirror_budget_qps.set(plan.qps);
    ctx.metrics.mirror_lease_qps_needed.set(plan.lease_qps);
    ctx.metrics
        .mirror_budget_sufficient
        .set(i64::from(plan.enough()));
    let workers = plan.workers();
    ctx.state.set_plan(plan);
    workers
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_says_why_the_budget_is_short() {
        let state = MirrorState::new("http://127.0.0.1:1".into(), "me".into());
        assert_eq!(state.readiness(), Ok(()), "nothing checked yet");
        let given = BudgetFlags {
            qps: Some(20.0),
            burst: Some(30),
        };
        let interval = Some(Duration::from_secs(40) / 3);
        state.set_plan(Plan::new(100, interval, given));
        assert_eq!(state.readiness(), Ok(()));
        state.set_plan(Plan::new(600, interval, given));
        let why = state.readiness().unwrap_err();
        assert!(
            why.starts_with("mirror: renewing the Leases of 600 Ready nodes"),
            "{why}"
        );
        assert!(why.contains("--kube-api-qps must be at least 57"), "{why}");
    }

    #[test]
    fn a_429_keeps_its_retry_after() {
        let status: ::kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "Too many requests", "reason": "TooManyRequests",
            "code": 429, "details": {"retryAfterSeconds": 3}
        }))
        .unwrap();
        let e = ApiError::from(::kube::Error::Api(Box::new(status)));
        assert!(e.is(429));
        assert_eq!(e.retry_after, Some(Duration::from_secs(3)));
    }
}
