//! The node controller: registers nodes, learns their health from probes
//! and pushed heartbeats, decides their conditions, and writes every change
//! with its event.
//!
//! One task owns all state. Probe sweeps run in a task of their own and hand
//! back their answers; pushed status, leases and registrations arrive as
//! [`WriteRequest`] messages; the HTTP server reads the published [`View`]. Every
//! write goes through the store writer's thread ([`writer`]), which makes
//! changes durable in groups and only then publishes them: the controller
//! waits for the disk only where it must (a sweep's or a monitor pass's
//! results), and a pushed change is answered by the writer once durable.
//!
//! This file holds the one task's state (the tracked records, what was sent
//! ahead of the writer and its settling) and the loop that drives it, one
//! `select!` arm per timer or message, each arm a call. What each pass
//! decides lives in its own file (`conditions`, `sweep`, `monitor`, `push`,
//! `cloud_sync`, `eviction`).

mod clock;
mod cloud_sync;
pub mod conditions;
pub mod eviction;
mod monitor;
pub mod operator;
pub mod push;
mod register;
mod static_sync;
mod sweep;
mod unregistered;
mod writer;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::model::{EventKind, Lease, Micros, Node, NodeSpec, READY};
use crate::probe::{ProbeConfig, ProbeConfigError, ProbeOutcome, ProbeTarget, Prober};
use crate::store::heartbeats::{HeartbeatCheckpoint, LeaseBeat, NodeBeats};
use crate::store::{Batch, Store, StoreError, Written};
use crate::view::{SharedNode, View};
pub use clock::Clock;
pub use cloud_sync::{CloudSource, SourceStatus, TAINT_SHUTDOWN};
use conditions::Health;
pub use operator::{OperatorFields, Preconditions, SourceListing, MANAGED_TAINTS};
pub use push::{
    ControllerHandle, ObjectWrite, PushError, PushedStatus, StatusAnswer, WriteRequest,
    MAX_OBJECTS_PER_NODE,
};
pub use static_sync::NodesFile;
pub use sweep::SweepReport;
use writer::{Change, Done, Job, Mark, Settled, StoreWriter, Waiter};
pub use writer::{CommitError, FreeSpace, STORE_RESERVE_BYTES};

/// How often heartbeat-only changes (times in node records, Lease renewals)
/// are checkpointed. Losing them in a crash loses no transition: the grace
/// periods restart from the controller's start anyway.
pub const HEARTBEAT_WRITE_PERIOD: Duration = Duration::from_secs(60);

/// Node records written in one store transaction when many change at once
/// (registration, a sweep or a taint pass over the whole fleet). sled keeps
/// every page a transaction replaces until it ends, so one transaction of
/// 10,000 records held hundreds of MiB at its peak, and the allocator kept
/// the pages afterwards; chunks of this size keep that small, and still
/// share the writer's flushes.
const WRITE_CHUNK: usize = 256;

/// Pushes taken from the queue at one turn of the controller's loop: at
/// thousands of heartbeats a second, several wait at each wake-up, and
/// each turn polls every timer and task of the loop.
const PUSHES_PER_TURN: usize = 64;

/// How a node's health is learned (`--node-status-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusMode {
    /// Probe every kubelet's /healthz every sync period.
    Probe,
    /// Kubelets push status and Lease renewals; silence means Unknown.
    Push,
    /// Pushing nodes are watched for silence (and probed once before they are
    /// declared Unknown); nodes that do not push are probed.
    Hybrid,
}

/// How the controller behaves; validated before anything starts.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub node_sync_period: Duration,
    pub node_monitor_grace_period: Duration,
    pub node_monitor_period: Duration,
    pub node_startup_grace_period: Duration,
    pub status_mode: StatusMode,
    pub allow_node_registration: bool,
    pub register_retry_count: u32,
    pub probe: ProbeConfig,
    pub probe_concurrency: usize,
    /// How long a host name lookup may take.
    pub lookup_timeout: Duration,
    pub eviction: eviction::EvictionConfig,
    /// A cloud or inventory provider to follow, besides the static nodes.
    pub cloud: Option<CloudSource>,
    /// `--nodes-file`, followed as it changes on disk.
    pub nodes_file: Option<NodesFile>,
    /// Where the store writer learns the free space on the store's disk.
    pub free_space: FreeSpace,
    /// How often changed heartbeat times are checkpointed.
    pub heartbeat_checkpoint_period: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            node_sync_period: Duration::from_secs(10),
            node_monitor_grace_period: Duration::from_secs(40),
            node_monitor_period: Duration::from_secs(5),
            node_startup_grace_period: Duration::from_secs(60),
            status_mode: StatusMode::Hybrid,
            allow_node_registration: false,
            register_retry_count: 10,
            probe: ProbeConfig::default(),
            probe_concurrency: 1024,
            lookup_timeout: Duration::from_secs(5),
            eviction: eviction::EvictionConfig::default(),
            cloud: None,
            nodes_file: None,
            free_space: FreeSpace::default(),
            heartbeat_checkpoint_period: HEARTBEAT_WRITE_PERIOD,
        }
    }
}

/// Failures that stop the controller.
#[derive(Debug, Error)]
pub enum ControllerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Probe(#[from] ProbeConfigError),
    #[error("{0}")]
    Commit(#[from] CommitError),
    #[error("cannot start the store writer thread: {0}")]
    Writer(std::io::Error),
    /// The ancestor's `ErrRegistration`.
    #[error("unable to register all nodes: {} still unregistered after {tries} tries ({}); last error: {last_error}", missing.len(), missing.join(", "))]
    Registration {
        missing: Vec<String>,
        tries: u32,
        last_error: String,
    },
    /// A task of the controller's own (a probe sweep, a source listing, the
    /// address lookups) panicked: a bug. The controller stops rather than
    /// go on without it.
    #[error(
        "the {task} task failed: {reason}; the controller stopped so that a supervisor restarts it"
    )]
    TaskFailed { task: &'static str, reason: String },
}

/// A node the controller watches.
struct Tracked {
    /// Shared with the view while they agree (see [`SharedNode`]).
    node: SharedNode,
    target: Option<Arc<ProbeTarget>>,
    health: Health,
    /// Its heartbeat times are newer than its stored record (written into
    /// the record at a clean stop; checkpointed meanwhile).
    beats_unwritten: bool,
}

impl Tracked {
    /// `node` as the controller starts watching it, probed at `port`.
    fn new(node: SharedNode, health: Health, port: u16) -> Tracked {
        Tracked {
            target: target_for(&node, port),
            node,
            health,
            beats_unwritten: false,
        }
    }
}

/// The controller's state. Owned by one task; readers see [`View`].
pub struct Controller {
    config: ControllerConfig,
    store: Arc<Store>,
    view: Arc<View>,
    metrics: Arc<Metrics>,
    /// `None` in push mode, which never probes (and needs no kubelet credentials).
    prober: Option<Prober>,
    tracked: BTreeMap<String, Tracked>,
    leases: HashMap<String, Lease>,
    /// Every write goes through it.
    writer: StoreWriter,
    /// What became of each write, in order.
    settled: mpsc::UnboundedReceiver<Settled>,
    /// Nodes and Leases with a write sent ahead (not awaited) and not yet
    /// settled: the controller already shows their change, readers not yet.
    ahead: HashMap<String, u32>,
    ahead_leases: HashMap<String, u32>,
    /// Resumes sent to the writer after refused writes.
    epoch: u64,
    /// Heartbeat times changed since the last checkpoint.
    beats_changed: bool,
    /// Leases whose renewals are newer than their records (written into
    /// the records at a clean stop); for nodes, [`Tracked::beats_unwritten`].
    dirty_leases: HashSet<String>,
    /// Events that must not be lost (the start, what a hook did) and that
    /// the store refused so far: recorded at a later monitor pass.
    unrecorded: Vec<(Option<String>, EventKind)>,
    /// Single probes of nodes whose heartbeats stopped (hybrid mode).
    rescues: JoinSet<(String, ProbeOutcome)>,
    /// Each node's budget of Events its kubelet may post (see `push.rs`).
    event_budgets: HashMap<String, crate::token_bucket::TokenBucket>,
    evictor: eviction::Evictor,
    /// Eviction hooks running.
    hooks: JoinSet<(String, String)>,
    /// Failed probes, logged as they start and rate-limited per node.
    probe_failures: crate::logging::probe_failures::ProbeFailures,
    /// Evictions whose hook a crash or stop interrupted, with their reason:
    /// resumed once the node's state is known again.
    interrupted: BTreeMap<String, String>,
    source_status: SourceStatus,
    /// The static node list, followed.
    static_list: static_sync::StaticList,
    /// The run's shutdown, for waits inside the controller task.
    shutdown: CancellationToken,
    /// The controller's own clock, which every grace period is measured on.
    clock: Clock,
    started: Instant,
    instance: String,
    /// Nodes the sources name that are not registered yet, tried again.
    unregistered: unregistered::Unregistered,
    /// The controller's `/readyz` checks (see [`Controller::report_readiness`]).
    readiness: Readiness,
}

/// What the controller reports to `/readyz`: finished passes, the nodes
/// it cannot register, and a nodes file it cannot follow.
#[derive(Default)]
struct Readiness {
    sweep: Option<crate::readiness::Recurring>,
    monitor: Option<crate::readiness::Recurring>,
    registration: Option<crate::readiness::Check>,
    nodes_file: Option<crate::readiness::Check>,
}

impl Controller {
    /// Opens the controller on a store: records the start (and the gap since
    /// the last controller), reads the registry back, and publishes it. Every
    /// node's grace period starts now.
    ///
    /// Over 80 lines: the restore reads, in order, what each later step
    /// builds on (records, Leases, the heartbeat checkpoint, open evictions).
    pub async fn start(
        config: ControllerConfig,
        store: Arc<Store>,
        view: Arc<View>,
        metrics: Arc<Metrics>,
    ) -> Result<Controller, ControllerError> {
        let prober = match config.status_mode {
            StatusMode::Push => None,
            _ => Some(Prober::new(&config.probe)?),
        };
        let instance = uuid::Uuid::new_v4().to_string();
        let now = Micros::now();
        let clean_stop = store.last_clean_stop()?;
        let last_event = store.last_event()?;
        // The gap ends now; it starts at the clean stop, or at the last sign
        // of life of the previous controller: its liveness stamp or its last
        // write, whichever is newer.
        // Only the previous controller's stamp: not one a removed store left at this path.
        let previous = store.last_instance()?;
        let last_alive = crate::liveness::read(store.path())
            .filter(|s| previous.as_deref() == Some(s.instance.as_str()))
            .map(|s| s.time);
        let downtime_seconds = clean_stop
            .or(last_event.as_ref().map(|e| e.time).max(last_alive))
            .map(|since| now.since(since).as_secs_f64());
        let (settled_tx, settled) = mpsc::unbounded_channel();
        let writer = StoreWriter::start(
            store.clone(),
            view.clone(),
            metrics.clone(),
            settled_tx,
            config.free_space.clone(),
        )
        .map_err(ControllerError::Writer)?;
        let started_event = EventKind::ControllerStarted {
            instance: instance.clone(),
            downtime_seconds,
            previous_stop_clean: clean_stop.is_some(),
        };
        let mut batch = Batch::new(now);
        batch.controller_event(started_event.clone());
        let change = Change {
            batch,
            mark: Some(Mark::Started(instance.clone())),
            ..Change::default()
        };
        let unrecorded = match writer.commit(change, 0).await {
            Ok(_) => Vec::new(),
            // A full disk degrades the controller; it does not keep it from
            // serving what it has. The start is recorded once writes are taken.
            Err(e) => {
                tracing::error!("the controller's start could not be recorded: {e}; it is recorded once the store takes writes again");
                vec![(None, started_event)]
            }
        };
        view.advance(store.durable_seq());

        let clock = Clock::new();
        let started = clock.now();
        let mut tracked = BTreeMap::new();
        for node in store.nodes()? {
            let health = Health::restored(&node, config.status_mode, started);
            let name = node.name.clone();
            tracked.insert(name, Tracked::new(node.into(), health, config.probe.port));
        }
        let mut leases: HashMap<String, Lease> = store
            .leases()?
            .into_iter()
            .map(|l| (l.name.clone(), l))
            .collect();
        match HeartbeatCheckpoint::read(store.path()) {
            Ok(Some(checkpoint)) => restore_heartbeats(&checkpoint, &mut tracked, &mut leases),
            Ok(None) => {}
            Err(e) => tracing::warn!("{e}"),
        }
        view.publish_shared(tracked.values().map(|t| t.node.share()), &[]);
        view.publish_leases(leases.values().cloned(), &[]);
        view.publish_objects(store.node_objects()?, &[], &[]);
        view.with_nodes(|nodes| {
            metrics.set_node_counts(
                nodes.flat_map(|n| n.conditions.iter().map(|c| (c.kind.as_str(), c.status))),
            )
        });
        let nodes_file = config.nodes_file.clone();
        let unregistered =
            unregistered::Unregistered::new(config.node_sync_period, config.register_retry_count);
        let controller = Controller {
            config,
            store,
            view,
            metrics,
            prober,
            tracked,
            leases,
            writer,
            settled,
            ahead: HashMap::new(),
            ahead_leases: HashMap::new(),
            epoch: 0,
            beats_changed: false,
            dirty_leases: HashSet::new(),
            unrecorded,
            rescues: JoinSet::new(),
            event_budgets: HashMap::new(),
            evictor: eviction::Evictor::default(),
            hooks: JoinSet::new(),
            probe_failures: Default::default(),
            interrupted: BTreeMap::new(),
            source_status: SourceStatus::default(),
            static_list: static_sync::StaticList::new(nodes_file),
            shutdown: CancellationToken::new(),
            clock,
            started,
            instance,
            unregistered,
            readiness: Readiness::default(),
        };
        let mut controller = controller;
        if controller.config.eviction.hook.is_some() {
            controller.interrupted = interrupted_evictions(&controller.store)?;
        }
        for t in controller.tracked.values() {
            // A node tainted NoExecute by an eviction stays evicted until Ready.
            let evicted = t.node.taints.iter().any(|taint| {
                taint.effect == "NoExecute"
                    && (taint.key == eviction::TAINT_NOT_READY
                        || taint.key == eviction::TAINT_UNREACHABLE)
            });
            if evicted {
                controller.evictor.mark_evicted(&t.node.name);
            }
        }
        controller.update_gauges();
        tracing::info!(
            instance = %controller.instance,
            nodes = controller.tracked.len(),
            mode = ?controller.config.status_mode,
            downtime = ?downtime_seconds.map(Duration::from_secs_f64),
            "controller started; every node's grace period starts now"
        );
        Ok(controller)
    }

    /// Writes a batch and waits until it is durable and published (the
    /// writer publishes it): readers never see a change a crash could take
    /// back. Nothing of a failed commit was acknowledged; callers decide again.
    async fn commit(&mut self, batch: Batch) -> Result<Written, CommitError> {
        self.commit_change(Change::of(batch)).await
    }

    async fn commit_change(&mut self, change: Change) -> Result<Written, CommitError> {
        let written = self.writer.commit(change, self.epoch).await?;
        for node in &written.nodes {
            if self.tracked.contains_key(&node.name) {
                let shared = self.shared_with_view(node);
                if let Some(t) = self.tracked.get_mut(&node.name) {
                    // New addresses: the node is probed at its new one.
                    if t.node.addresses != node.addresses {
                        t.target = target_for(node, self.config.probe.port);
                    }
                    t.node = shared;
                    // The durable record now carries any quiet heartbeat update.
                    t.beats_unwritten = false;
                }
            }
        }
        Ok(written)
    }

    /// `node` as the tracked record: the view's own if it shows the same
    /// (it does once a commit returns), so the record is held once.
    fn shared_with_view(&self, node: &Node) -> SharedNode {
        match self.view.shared(&node.name) {
            Some(shown) if *shown == *node => shown.into(),
            _ => node.clone().into(),
        }
    }

    /// Sends a change to be written without waiting for it: `nodes` (and
    /// `leases`) already show it here, and `done` is answered by the writer
    /// once it is durable. A refusal puts their durable state back (see
    /// [`Controller::settle`]).
    fn commit_ahead(&mut self, change: Change, nodes: Vec<String>, leases: &[String], done: Done) {
        for name in &nodes {
            *self.ahead.entry(name.clone()).or_default() += 1;
        }
        for name in leases {
            *self.ahead_leases.entry(name.clone()).or_default() += 1;
        }
        let mut ahead = nodes;
        ahead.extend(leases.iter().map(|l| lease_key(l)));
        // A writer that is gone drops `done`: its waiter hears the controller stopped.
        let waiter = Waiter {
            done,
            ahead,
            epoch: self.epoch,
        };
        let _ = self.writer.send(Job::Commit(Box::new(change), waiter));
    }

    /// Whether a write of this node is on its way to the disk.
    fn is_ahead(&self, name: &str) -> bool {
        self.ahead.contains_key(name)
    }

    /// What became of a write: resource versions are taken over, and a
    /// refusal puts back the durable state of everything sent ahead, then
    /// lets the writer take jobs again (later ones are built on that state).
    fn settle(&mut self, settled: Settled) {
        let refused = settled.refused.is_some() && settled.epoch == self.epoch;
        // The refused job's own nodes are put back too, below.
        let mut put_back: BTreeSet<String> = BTreeSet::new();
        if refused {
            put_back.extend(settled.ahead.iter().cloned());
            put_back.extend(self.ahead.keys().cloned());
            put_back.extend(self.ahead_leases.keys().map(|l| lease_key(l)));
        }
        for key in &settled.ahead {
            let (map, name) = match key.strip_prefix(LEASE_KEY) {
                Some(name) => (&mut self.ahead_leases, name),
                None => (&mut self.ahead, key.as_str()),
            };
            if let Some(n) = map.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    map.remove(name);
                }
            }
        }
        for (name, version) in settled.versions {
            if let Some(t) = self.tracked.get_mut(&name) {
                if t.node.resource_version < version {
                    t.node.resource_version = version;
                }
                // Durable and shown as it is here: one copy for both.
                if !self.ahead.contains_key(&name) {
                    if let Some(shown) = self.view.shared(&name).filter(|s| **s == *t.node) {
                        t.node = shown.into();
                    }
                }
            }
        }
        // A refusal of an earlier run (epoch) was put back when it came in.
        let (Some(reason), true) = (settled.refused, refused) else {
            return;
        };
        let (mut nodes, mut leases) = (0, 0);
        for key in &put_back {
            match key.strip_prefix(LEASE_KEY) {
                Some(name) => {
                    leases += 1;
                    match self.view.lease(name) {
                        Some(durable) => {
                            self.leases.insert(name.to_string(), durable);
                        }
                        None => {
                            self.leases.remove(name);
                        }
                    }
                }
                None => {
                    nodes += 1;
                    if let (Some(t), Some(durable)) =
                        (self.tracked.get_mut(key), self.view.shared(key))
                    {
                        t.target = target_for(&durable, self.config.probe.port);
                        t.node = durable.into();
                    }
                }
            }
        }
        self.epoch += 1;
        let _ = self.writer.send(Job::Resume);
        if nodes + leases > 0 {
            tracing::warn!(
                nodes,
                leases,
                "a write was refused ({reason}); changes sent ahead were answered as refused and their durable state put back"
            );
        }
    }

    /// Settles every write the writer has reported so far.
    fn settle_reported(&mut self) {
        while let Ok(settled) = self.settled.try_recv() {
            self.settle(settled);
        }
    }

    /// The heartbeat times of every node and Lease, for the checkpoint.
    fn checkpoint(&self) -> HeartbeatCheckpoint {
        let nodes = self
            .tracked
            .values()
            .map(|t| NodeBeats {
                name: t.node.name.clone(),
                conditions: t
                    .node
                    .conditions
                    .iter()
                    .map(|c| match t.health.last_answer {
                        // A probe's answer is the Ready heartbeat of a probed node.
                        Some(at) if c.kind == READY => c.last_heartbeat.max(at).0,
                        _ => c.last_heartbeat.0,
                    })
                    .collect(),
                lease: self.leases.get(&t.node.name).map(|l| LeaseBeat {
                    renew_time: l.renew_time.map(|t| t.0),
                    generation: l.generation,
                }),
            })
            .collect();
        HeartbeatCheckpoint {
            taken: Micros::now().0,
            nodes,
        }
    }

    /// Hands the newest heartbeat times to the writer, if any changed.
    fn checkpoint_heartbeats(&mut self) {
        if !self.beats_changed {
            return;
        }
        self.beats_changed = false;
        let _ = self.writer.send(Job::Checkpoint(self.checkpoint()));
    }

    /// Records events that must not be lost (what a hook did): now, or
    /// while the store refuses writes, at a later monitor pass.
    async fn record_events(&mut self, events: Vec<(Option<String>, EventKind)>) {
        self.unrecorded.extend(events);
        self.record_unrecorded().await;
    }

    /// Tries again to record the events the store refused.
    async fn record_unrecorded(&mut self) {
        if self.unrecorded.is_empty() {
            return;
        }
        let events = std::mem::take(&mut self.unrecorded);
        let mut batch = Batch::new(Micros::now());
        let mut mark = None;
        for (node, kind) in &events {
            match node {
                Some(name) => batch.node_event(name, kind.clone()),
                None => {
                    if matches!(kind, EventKind::ControllerStarted { .. }) {
                        mark = Some(Mark::Started(self.instance.clone()));
                    }
                    batch.controller_event(kind.clone());
                }
            }
        }
        let change = Change {
            batch,
            mark,
            ..Change::default()
        };
        if let Err(e) = self.commit_change(change).await {
            log_unstored("events", &e);
            self.unrecorded = events;
        }
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The controller's clock, for `/readyz`.
    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    /// Reports to `/readyz`: finished passes (a probe sweep, unless in push
    /// mode, within three sync periods plus the kubelet timeout, and a
    /// monitor pass within three monitor periods); `registration`, which
    /// fails while a node the sources name is not registered; and, with
    /// `--nodes-file`, `nodes-file`, which fails while the file cannot be
    /// read or parsed.
    pub fn report_readiness(&mut self, ready: &crate::readiness::Checks) {
        let config = &self.config;
        if config.status_mode != StatusMode::Push {
            self.readiness.sweep = Some(ready.register_recurring(
                "probe-sweep",
                "probe sweep",
                config.node_sync_period * 3 + config.probe.timeout,
            ));
        }
        self.readiness.monitor = Some(ready.register_recurring(
            "monitor-pass",
            "monitor pass",
            config.node_monitor_period * 3,
        ));
        self.readiness.registration = Some(ready.register("registration"));
        self.report_unregistered();
        if self.config.nodes_file.is_some() {
            self.readiness.nodes_file = Some(ready.register("nodes-file"));
        }
    }

    fn sweep_finished(&self) {
        if let Some(sweep) = &self.readiness.sweep {
            sweep.done();
        }
        self.metrics
            .last_sweep
            .set(crate::metrics::unix_seconds(Micros::now()));
    }

    fn monitor_pass_finished(&self) {
        if let Some(monitor) = &self.readiness.monitor {
            monitor.done();
        }
        self.metrics.set_zone_counts(self.tracked.values().map(|t| {
            let zone = t.node.labels.get(eviction::ZONE_LABEL);
            (zone.map_or("", String::as_str), t.node.ready())
        }));
        self.metrics
            .last_monitor_pass
            .set(crate::metrics::unix_seconds(Micros::now()));
    }

    /// Runs until `shutdown`: registers `specs` (trying again what fails), then probes,
    /// monitors and answers pushes. Stops cleanly.
    ///
    /// Over 80 lines: one `select!` whose arms share the loop's timers and
    /// the background work in flight (sweep, listing, lookups, nodes file).
    pub async fn run(
        mut self,
        specs: Vec<NodeSpec>,
        mut pushes: mpsc::Receiver<WriteRequest>,
        shutdown: CancellationToken,
    ) -> Result<(), ControllerError> {
        self.shutdown = shutdown.clone();
        // The clock is read every tick, so a gap in its readings is the
        // controller's own absence (see `clock`).
        let ticking = CancellationToken::new();
        tokio::spawn(self.clock.clone().tick(
            {
                let metrics = self.metrics.clone();
                let reported = std::sync::atomic::AtomicU64::new(0);
                move |clock: &Clock| {
                    metrics.controller_lag.set(clock.recent_lag().as_secs_f64());
                    let away = clock.away().as_micros() as u64;
                    let before = reported.swap(away, std::sync::atomic::Ordering::Relaxed);
                    if away > before {
                        metrics.controller_away.inc_by((away - before) as f64 / 1e6);
                    }
                }
            },
            ticking.clone(),
        ));
        let _stop_ticking = ticking.drop_guard();
        if let Some(source) = self.config.cloud.clone() {
            // The initial list: static nodes and the source's machines together.
            let listing = tokio::select! {
                l = cloud_sync::start_listing(&source) => l,
                _ = shutdown.cancelled() => return self.stop().await,
            };
            match listing {
                // Registers the machines new since the last run and deletes the gone ones.
                Ok(result) => self.apply_listing(result).await,
                Err(e) => tracing::error!("listing the cloud source failed: {e}"),
            }
        }
        // Static nodes the list no longer names go before anything registers.
        self.follow_static_list_at_start(&specs).await;
        // What fails to register is tried again from the loop below.
        self.register_nodes(specs).await;
        // A disk that has room again: waiting registrations are tried at once.
        let mut store_health = self.view.store_health();
        let mut sweep_ticks = tokio::time::interval(self.config.node_sync_period);
        sweep_ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Heartbeat times are not history: checkpointed at most this often
        // (and written into the records at a clean stop), so 10k nodes
        // renewing every 10s cost one small file a minute.
        let mut heartbeat_writes = tokio::time::interval(self.config.heartbeat_checkpoint_period);
        heartbeat_writes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut monitor_ticks = tokio::time::interval(self.config.node_monitor_period);
        monitor_ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sweep: Option<JoinHandle<Vec<sweep::Answer>>> = None;
        let mut listing: Option<cloud_sync::Listing> = None;
        let mut lookups: Option<register::Lookups> = None;
        let mut nodes_file: Option<static_sync::Reading> = None;
        let follow = self
            .config
            .cloud
            .as_ref()
            .filter(|c| c.sync_node_list)
            .cloned();
        // A task of ours that panicked: stop (cleanly) and say so.
        let mut failed: Option<ControllerError> = None;
        let task_failed = |task, e: tokio::task::JoinError| ControllerError::TaskFailed {
            task,
            reason: e.to_string(),
        };
        // Taken once: a fresh one per turn of the loop would join (and
        // leave) the token's waiters every time.
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        let mut queued = Vec::with_capacity(PUSHES_PER_TURN);
        loop {
            let next_registration = self.unregistered.next_try();
            tokio::select! {
                // What the writer did first (a refusal must be settled before
                // more is built on it), then queued pushes: a heartbeat waiting
                // in the queue must not look like silence to the monitor pass.
                biased;
                _ = &mut cancelled => break,
                Some(settled) = self.settled.recv() => self.settle(settled),
                1.. = pushes.recv_many(&mut queued, PUSHES_PER_TURN) => {
                    for push in queued.drain(..) {
                        // As the arms above come first for each push.
                        if shutdown.is_cancelled() {
                            break;
                        }
                        self.settle_reported();
                        self.handle_push(push).await;
                    }
                }
                _ = sweep_ticks.tick(), if sweep.is_none() => {
                    if lookups.is_none() {
                        lookups = self.start_address_lookups();
                    }
                    sweep = Some(self.start_sweep());
                    if let (Some(source), None) = (&follow, &listing) {
                        listing = Some(cloud_sync::start_listing(source));
                    }
                    if nodes_file.is_none() {
                        nodes_file = self.static_list.start_reading();
                    }
                }
                read = async { nodes_file.as_mut().expect("guarded by the branch condition").await }, if nodes_file.is_some() => {
                    nodes_file = None;
                    match read {
                        Ok(read) => self.apply_nodes_file(read).await,
                        Err(e) => tracing::error!("reading the nodes file failed: {e}"),
                    }
                }
                found = async { lookups.as_mut().expect("guarded by the branch condition").await }, if lookups.is_some() => {
                    lookups = None;
                    match found {
                        Ok(found) => self.apply_address_lookups(found).await,
                        Err(e) => {
                            failed = Some(task_failed("address lookup", e));
                            break;
                        }
                    }
                }
                listed = async { listing.as_mut().expect("guarded by the branch condition").await }, if listing.is_some() => {
                    listing = None;
                    match listed {
                        Ok(result) => self.apply_listing(result).await,
                        Err(e) => {
                            failed = Some(task_failed("cloud source listing", e));
                            break;
                        }
                    }
                }
                answers = async { sweep.as_mut().expect("guarded by the branch condition").await }, if sweep.is_some() => {
                    sweep = None;
                    match answers {
                        Ok(answers) => match self.apply_sweep(answers).await {
                            Ok(report) => {
                                tracing::debug!(?report, "sweep done");
                                self.sweep_finished();
                            }
                            // Nothing was acknowledged; the next sweep decides again.
                            Err(e) => log_unstored("sweep results", &e),
                        },
                        Err(e) => {
                            failed = Some(task_failed("probe sweep", e));
                            break;
                        }
                    }
                }
                _ = monitor_ticks.tick() => {
                    self.settle_reported();
                    self.record_unrecorded().await;
                    self.monitor_pass().await;
                    self.eviction_pass().await;
                    self.monitor_pass_finished();
                }
                _ = heartbeat_writes.tick() => self.checkpoint_heartbeats(),
                _ = tokio::time::sleep_until(next_registration.unwrap_or_else(Instant::now)), if next_registration.is_some() => {
                    self.retry_registrations().await;
                }
                Ok(()) = store_health.changed() => {
                    let writable = store_health.borrow_and_update().writable().is_ok();
                    if writable && !self.unregistered.is_empty() {
                        self.unregistered.try_all_now(Instant::now());
                    }
                }
                Some(rescue) = self.rescues.join_next(), if !self.rescues.is_empty() => {
                    if let Ok((name, outcome)) = rescue {
                        self.after_rescue(&name, outcome).await;
                    }
                }
                Some(done) = self.hooks.join_next(), if !self.hooks.is_empty() => {
                    if let Ok((name, result)) = done {
                        self.after_hook(&name, result).await;
                    }
                }
            }
        }
        // The background work in flight ends with the loop.
        let running = [
            sweep.map(|t| t.abort_handle()),
            listing.map(|t| t.abort_handle()),
            lookups.map(|t| t.abort_handle()),
            nodes_file.map(|t| t.abort_handle()),
        ];
        running.into_iter().flatten().for_each(|t| t.abort());
        self.rescues.abort_all();
        if let Some(failed) = failed {
            tracing::error!("{failed}");
            self.stop().await?;
            return Err(failed);
        }
        self.stop().await
    }

    /// Stops cleanly: keeps the newest heartbeat times, records the stop,
    /// flushes, and stops the writer.
    pub async fn stop(mut self) -> Result<(), ControllerError> {
        // Whatever was refused is settled first, so the stop is not refused for it.
        self.settle_reported();
        let _ = self.writer.send(Job::Checkpoint(self.checkpoint()));
        let now = Micros::now();
        let mut batch = Batch::new(now);
        // The records get the newest heartbeat times, for readers of the stopped store.
        for t in self.tracked.values() {
            let mut node = t.node.clone();
            let mut newer = t.beats_unwritten;
            if let (Some(at), Some(ready)) = (t.health.last_answer, node.condition_mut(READY)) {
                if ready.last_heartbeat < at {
                    ready.last_heartbeat = at;
                    newer = true;
                }
            }
            if newer && !self.ahead.contains_key(&node.name) {
                batch.record(node, []);
            }
        }
        batch.controller_event(EventKind::ControllerStopped {
            instance: self.instance.clone(),
        });
        let change = Change {
            batch,
            leases: self
                .dirty_leases
                .iter()
                .filter(|name| !self.ahead_leases.contains_key(*name))
                .filter_map(|name| self.leases.get(name).cloned())
                .collect(),
            mark: Some(Mark::CleanStop(now)),
            ..Change::default()
        };
        let recorded = self.writer.commit(change, self.epoch).await;
        self.writer.stop().await;
        recorded?;
        tracing::info!(instance = %self.instance, "controller stopped cleanly");
        Ok(())
    }

    /// The gauges the controller keeps; the node counts follow what the
    /// writer publishes.
    fn update_gauges(&self) {
        self.metrics.registered.set(self.tracked.len() as i64);
        self.metrics
            .store_events
            .set(self.store.durable_seq() as i64);
    }
}

/// Evictions started (durably) but never finished: the hook was interrupted.
fn interrupted_evictions(store: &Store) -> Result<BTreeMap<String, String>, StoreError> {
    let mut open = BTreeMap::new();
    for event in store.history(&crate::store::HistoryQuery::default())? {
        let Some(node) = event.node else { continue };
        match event.kind {
            EventKind::EvictionStarted { reason, .. } => {
                open.insert(node, reason);
            }
            EventKind::EvictionDone { .. } | EventKind::Deleted { .. } => {
                open.remove(&node);
            }
            _ => {}
        }
    }
    Ok(open)
}

/// Logs a write the store did not take. A refusal (a disk short of space)
/// is logged once by the writer when it starts; each decision it holds up
/// is decided again at the next pass.
fn log_unstored(what: &str, e: &CommitError) {
    match e {
        CommitError::Refused(_) => {
            tracing::debug!("{what} could not be stored, and are decided again later: {e}")
        }
        _ => tracing::error!("{what} could not be stored: {e}"),
    }
}

/// Marks a Lease in the names a write was sent ahead for.
const LEASE_KEY: &str = "lease/";

fn lease_key(name: &str) -> String {
    format!("{LEASE_KEY}{name}")
}

/// Puts the checkpointed heartbeat times back into the records read from
/// the store, where they are newer.
fn restore_heartbeats(
    checkpoint: &HeartbeatCheckpoint,
    tracked: &mut BTreeMap<String, Tracked>,
    leases: &mut HashMap<String, Lease>,
) {
    for beats in &checkpoint.nodes {
        if let Some(t) = tracked.get_mut(&beats.name) {
            // A record rewritten since has its own, newer, conditions.
            if t.node.conditions.len() == beats.conditions.len() {
                for (c, at) in t.node.conditions.iter_mut().zip(&beats.conditions) {
                    c.last_heartbeat = c.last_heartbeat.max(Micros(*at));
                }
            }
        }
        if let (Some(beat), Some(lease)) = (beats.lease, leases.get_mut(&beats.name)) {
            if beat.generation > lease.generation {
                lease.generation = beat.generation;
                lease.renew_time = beat.renew_time.map(Micros);
            }
        }
    }
}

/// Records `node` with its events in the last of `batches`, or in a new
/// one (at `at`) once that holds [`WRITE_CHUNK`] nodes.
fn record_chunked(
    batches: &mut Vec<Batch>,
    at: Micros,
    node: Node,
    events: impl IntoIterator<Item = EventKind>,
) {
    if batches.last().is_none_or(|b| b.len() >= WRITE_CHUNK) {
        batches.push(Batch::new(at));
    }
    let batch = batches.last_mut().expect("pushed above");
    batch.record(node, events);
}

/// Where to probe a node: its first IP address and the kubelet port.
fn target_for(node: &Node, port: u16) -> Option<Arc<ProbeTarget>> {
    let ip = node.probe_address()?.parse::<std::net::IpAddr>().ok()?;
    Some(Arc::new(ProbeTarget::new(std::net::SocketAddr::new(
        ip, port,
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::static_list::static_spec;
    use crate::store::StoreOptions;

    /// Whether the controller's record of `name` is the view's, not a copy.
    fn held_once(c: &Controller, name: &str) -> bool {
        let shown = c.view.shared(name).expect("published");
        Arc::ptr_eq(&shown, &c.tracked[name].node.share())
    }

    #[tokio::test]
    async fn tracked_records_and_the_view_hold_one_copy_until_one_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap());
        let mut batch = Batch::new(Micros::now());
        for name in ["a", "b"] {
            let spec = static_spec(name.into(), None, Default::default(), Default::default());
            batch.record(register::new_node(&spec, Micros::now()), []);
        }
        store.write(batch).unwrap();
        let view = Arc::new(View::default());
        let config = ControllerConfig {
            status_mode: StatusMode::Push,
            free_space: FreeSpace::fake(|| u64::MAX),
            ..ControllerConfig::default()
        };
        let mut c = Controller::start(config, store, view.clone(), Arc::new(Metrics::new()))
            .await
            .unwrap();
        assert!(held_once(&c, "a") && held_once(&c, "b"), "as restored");

        // A durable change: the view publishes it, the controller takes the view's.
        let mut cordoned = c.tracked["a"].node.clone();
        cordoned.unschedulable = true;
        let mut batch = Batch::new(Micros::now());
        batch.record(cordoned, []);
        c.commit(batch).await.unwrap();
        assert!(view.get("a").unwrap().0.unschedulable);
        assert!(held_once(&c, "a"), "after a commit");

        // A change made here and not yet durable is copied, never shown.
        c.tracked.get_mut("b").unwrap().node.unschedulable = true;
        assert!(!view.get("b").unwrap().0.unschedulable);
        assert!(c.tracked["b"].node.unschedulable);
        assert!(!held_once(&c, "b"));
    }
}
