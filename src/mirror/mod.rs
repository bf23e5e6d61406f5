//! The mirror: keeps a Kubernetes API server's Nodes, their status, taints,
//! CSINodes and Leases in line with the registry, and deletes pods of evicted nodes.
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
mod csinodes;
mod drain;
mod eviction;
mod jobs;
pub mod leader;
mod queue;
mod status;
mod upstream;
mod versions;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{Id, JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use drain::{Drain, Step};
use jobs::Ctx;
use queue::{Job, Outcome};
use watch::Report;

pub use crate::backoff::Backoff;
use crate::controller::ControllerHandle;
use crate::k8s::mirror_patch;
use crate::metrics::Metrics;
use crate::model::{ConditionStatus, Micros};
use crate::store::Store;
use crate::view::View;
pub use budget::{Budget, Priority};

/// Failed requests to the API server are retried 500 ms, then doubling to a
/// minute, with jitter so that many nodes' retries do not meet.
pub const REQUEST_RETRY: Backoff =
    Backoff::exponential(Duration::from_millis(500), Duration::from_secs(60)).with_jitter();
pub use capacity::{BudgetFlags, Plan};
pub use client::{ApiServer, ClientError, Connection};
pub use jobs::NODE_LEASE_NAMESPACE;
pub use leader::{LeaderConfig, LeaderConfigError};
use status::META_LAST_ERROR;
pub use status::{
    status_from_store, BudgetStatus, EntryStatus, ErrorNote, MirrorState, MirrorStatus, Throttle,
    UpstreamStatus,
};

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
    /// How failed requests are retried.
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
            backoff: REQUEST_RETRY,
            eviction_hold: Duration::from_secs(40),
            leader: None,
        }
    }
}

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
    /// A failure without an answer from the API server.
    pub(crate) fn local(message: String) -> ApiError {
        ApiError {
            code: None,
            message,
            retry_after: None,
        }
    }

    /// A write that kept meeting a conflict (`409`).
    pub(crate) fn conflict(message: String) -> ApiError {
        ApiError {
            code: Some(409),
            ..ApiError::local(message)
        }
    }

    fn is(&self, code: u16) -> bool {
        self.code == Some(code)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => ApiError {
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
                ApiError::local(message)
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
            csinodes: Mutex::new(HashMap::new()),
            upstream: Mutex::new(upstream::Upstream::default()),
            versions: versions::ServerVersions::default(),
        };
        (Mirror { ctx: Arc::new(ctx) }, state)
    }

    /// Runs until `shutdown`. Writes only while leading (always, without
    /// leader election). The decisions are the [`Drain`]'s; this loop only
    /// waits for the next event, hands it over and carries out its steps.
    pub async fn run(self, shutdown: CancellationToken) {
        let ctx = self.ctx;
        let mut elector = Elector::start(&ctx, &shutdown);
        let mut follow = ctx.view.subscribe();
        let seen = ctx.store.durable_seq();
        let backlog = match ctx.store.outbox() {
            Ok(entries) => entries.into_iter().map(|(key, _)| key).collect(),
            Err(e) => {
                tracing::error!("the outbox could not be read: {e}");
                Vec::new()
            }
        };
        let ready = ctx
            .view
            .list()
            .iter()
            .filter(|(n, _)| n.ready() == ConditionStatus::True)
            .count();
        let (mut drain, steps) = Drain::new(&ctx.config, Instant::now(), seen, backlog, ready);
        let mut shell = Shell::new(ctx.clone(), shutdown.clone());
        shell.apply(steps);
        loop {
            ctx.metrics.mirror_backlog.set(drain.backlog() as i64);
            shell.start_due(&mut drain);
            let wake = drain.wake();
            let steps = tokio::select! {
                _ = shutdown.cancelled() => break,
                news = elector.changed() => match news {
                    Some(leading) => drain.leadership(leading, &ctx.view, Instant::now(), shutdown.is_cancelled()),
                    None => drain.elector_ended(),
                },
                Ok(()) = follow.changed() => {
                    let durable = *follow.borrow_and_update();
                    drain.followed(&ctx.store, &ctx.view, durable, Instant::now())
                }
                Some(report) = shell.reports.recv() => drain.report(report, Instant::now()),
                Some(done) = shell.tasks.join_next_with_id() => shell.joined(&mut drain, done),
                _ = sleep_until(wake) => Vec::new(),
            };
            shell.apply(steps);
        }
        shell.stop().await;
        elector.stop().await;
        shell.apply(drain.shutdown());
        if let Some(note) = ctx.state.notes().last_error.clone() {
            let _ = ctx.store.meta_put(
                META_LAST_ERROR,
                &serde_json::to_vec(&note).expect("a note serializes"),
            );
        }
        tracing::info!(backlog = drain.backlog(), "mirror stopped");
    }
}

/// Who says whether the mirror leads: the elector's task, or nobody (then
/// the mirror leads from the start).
struct Elector {
    task: Option<JoinHandle<()>>,
    /// `None` once the elector ended.
    leading: Option<tokio::sync::watch::Receiver<bool>>,
    /// Held, so the channel stays open while no elector runs.
    _sender: tokio::sync::watch::Sender<bool>,
}

impl Elector {
    fn start(ctx: &Ctx, shutdown: &CancellationToken) -> Elector {
        let (sender, mut leading) = tokio::sync::watch::channel(ctx.config.leader.is_none());
        // Without election the mirror leads from the start: the first wait
        // takes the initial value as a change.
        leading.mark_changed();
        let task = ctx.config.leader.clone().map(|config| {
            let client = ctx.client.clone();
            tokio::spawn(leader::run(
                client,
                config,
                sender.clone(),
                shutdown.clone(),
            ))
        });
        Elector {
            task,
            leading: Some(leading),
            _sender: sender,
        }
    }

    /// The next news: `Some(leading)`, or `None` once when the elector ends.
    async fn changed(&mut self) -> Option<bool> {
        let Some(leading) = self.leading.as_mut() else {
            return std::future::pending().await;
        };
        match leading.changed().await {
            Ok(()) => Some(*leading.borrow_and_update()),
            Err(_) => {
                self.leading = None;
                None
            }
        }
    }

    async fn stop(self) {
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

/// The drain's hands: the work in flight, the watcher, and the steps
/// carried out against the shared state, the budget and the store.
struct Shell {
    ctx: Arc<Ctx>,
    shutdown: CancellationToken,
    tasks: JoinSet<Outcome>,
    running: HashMap<Id, Job>,
    watcher: Option<(JoinHandle<()>, CancellationToken)>,
    reports_tx: mpsc::Sender<Report>,
    reports: mpsc::Receiver<Report>,
}

impl Shell {
    fn new(ctx: Arc<Ctx>, shutdown: CancellationToken) -> Shell {
        let (reports_tx, reports) = mpsc::channel(REPORTS);
        Shell {
            ctx,
            shutdown,
            tasks: JoinSet::new(),
            running: HashMap::new(),
            watcher: None,
            reports_tx,
            reports,
        }
    }

    /// Starts every job due now that a worker can take.
    fn start_due(&mut self, drain: &mut Drain) {
        let ctx = &self.ctx;
        let missing = |name: &str| ctx.upstream().is_missing(name);
        while let Some((job, priority)) = drain.next_job(Instant::now(), &missing) {
            let task = {
                let ctx = ctx.clone();
                let job = job.clone();
                self.tasks
                    .spawn(async move { jobs::work(&ctx, &job, priority).await })
            };
            self.running.insert(task.id(), job);
        }
    }

    /// A task ended: its outcome, or its abort, to the drain.
    fn joined(
        &mut self,
        drain: &mut Drain,
        done: Result<(Id, Outcome), tokio::task::JoinError>,
    ) -> Vec<Step> {
        let now = Instant::now();
        match done {
            Ok((id, outcome)) => match self.running.remove(&id) {
                Some(job) => drain.finished(job, outcome, now),
                None => Vec::new(),
            },
            // Aborted (leadership lost) or panicked: the work is still queued.
            Err(e) => {
                if let Some(job) = self.running.remove(&e.id()) {
                    drain.aborted(job, now);
                }
                Vec::new()
            }
        }
    }

    fn apply(&mut self, steps: Vec<Step>) {
        let ctx = &self.ctx;
        for step in steps {
            match step {
                Step::OpenWatch => {
                    let stop = self.shutdown.child_token();
                    let watching =
                        watch::watch_nodes(ctx.clone(), self.reports_tx.clone(), stop.clone());
                    self.watcher = Some((tokio::spawn(watching), stop));
                }
                Step::StopLeading => {
                    self.tasks.abort_all();
                    if let Some((handle, stop)) = self.watcher.take() {
                        stop.cancel();
                        handle.abort();
                    }
                    ctx.state.set_watching(false);
                    ctx.upstream().incomplete();
                }
                Step::ShowLeading(leading) => {
                    ctx.state.leader.store(leading, Ordering::Relaxed);
                    ctx.metrics.mirror_leader.set(i64::from(leading));
                }
                Step::Budget { plan, before } => apply_plan(ctx, plan, before.as_ref()),
                Step::Enqueue(keys) => {
                    if let Err(e) = ctx.store.enqueue(&keys, Micros::now()) {
                        tracing::error!(
                            "could not queue the nodes that differ on the API server: {e}"
                        );
                    }
                }
                Step::Note(result) => ctx
                    .state
                    .note(result.as_ref().map(|_| ()).map_err(String::as_str)),
                Step::CountRetry => {
                    ctx.state.retries.fetch_add(1, Ordering::Relaxed);
                    ctx.metrics.mirror_retries.inc();
                }
            }
        }
    }

    /// Shutting down: the work in flight and the watch stop.
    async fn stop(&mut self) {
        self.tasks.shutdown().await;
        if let Some((handle, stop)) = self.watcher.take() {
            stop.cancel();
            let _ = handle.await;
        }
    }
}

/// Applies the budget planned for the Ready nodes: sizes it when no
/// `--kube-api-qps` was given; says so when it is short, and when that
/// changes.
fn apply_plan(ctx: &Ctx, plan: Plan, before: Option<&Plan>) {
    let ready = plan.ready;
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
    ctx.state.set_plan(plan);
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
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "Too many requests", "reason": "TooManyRequests",
            "code": 429, "details": {"retryAfterSeconds": 3}
        }))
        .unwrap();
        let e = ApiError::from(kube::Error::Api(Box::new(status)));
        assert!(e.is(429));
        assert_eq!(e.retry_after, Some(Duration::from_secs(3)));
    }
}
