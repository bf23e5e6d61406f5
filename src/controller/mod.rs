//! The node controller: registers nodes, learns their health from probes
//! and pushed heartbeats, decides their conditions, and writes every change
//! with its event.
//!
//! One task owns all state. Probe sweeps run in a task of their own and hand
//! back their answers; pushed status, leases and registrations arrive as
//! [`Push`] messages; the HTTP server reads the published [`View`].

mod cloud_sync;
pub mod conditions;
mod evict;
pub mod eviction;
mod monitor;
pub mod push;
mod register;
mod sweep;
pub mod view;

use std::collections::{BTreeMap, BTreeSet};
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
use crate::store::{Batch, Store, StoreError, Written};
pub use cloud_sync::{CloudSource, SourceStatus, TAINT_SHUTDOWN};
use conditions::Health;
pub use push::{ControllerHandle, Push, PushError, PushedStatus};
pub use sweep::SweepReport;
use view::View;

/// How often heartbeat-only changes (times in node records, Lease renewals)
/// are written. Losing them in a crash loses no transition: the grace
/// periods restart from the controller's start anyway.
pub const HEARTBEAT_WRITE_PERIOD: Duration = Duration::from_secs(60);

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
    #[error("the store could not be flushed ({0}); the controller stopped so that nothing unacknowledged is shown. Check the disk, then start it again: the history up to the last flush is intact")]
    FlushFailed(String),
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
    node: Node,
    target: Option<Arc<ProbeTarget>>,
    health: Health,
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
    leases: BTreeMap<String, Lease>,
    /// Nodes and leases whose heartbeat times changed since the last batch write.
    dirty_nodes: BTreeSet<String>,
    dirty_leases: BTreeSet<String>,
    /// Single probes of nodes whose heartbeats stopped (hybrid mode).
    rescues: JoinSet<(String, ProbeOutcome)>,
    evictor: eviction::Evictor,
    /// Eviction hooks running.
    hooks: JoinSet<(String, String)>,
    /// Evictions whose hook a crash or stop interrupted, with their reason:
    /// resumed once the node's state is known again.
    interrupted: BTreeMap<String, String>,
    source_status: SourceStatus,
    /// Set when the store could not be flushed: the controller stops.
    broken: Option<String>,
    /// The run's shutdown, for waits inside the controller task.
    shutdown: CancellationToken,
    started: Instant,
    instance: String,
    /// Finished sweeps and monitor passes, for `/readyz` (see [`Controller::report_passes`]).
    passes: Passes,
}

/// Where finished passes are reported besides the metrics.
#[derive(Default)]
struct Passes {
    sweep: Option<crate::readiness::Recurring>,
    monitor: Option<crate::readiness::Recurring>,
}

impl Controller {
    /// Opens the controller on a store: records the start (and the gap since
    /// the last controller), reads the registry back, and publishes it. Every
    /// node's grace period starts now.
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
        let last_alive = crate::liveness::read(store.path()).map(|s| s.time);
        let downtime_seconds = clean_stop
            .or(last_event.as_ref().map(|e| e.time).max(last_alive))
            .map(|since| now.since(since).as_secs_f64());
        let mut batch = Batch::new(now);
        batch.controller_event(EventKind::ControllerStarted {
            instance: instance.clone(),
            downtime_seconds,
            previous_stop_clean: clean_stop.is_some(),
        });
        store.write(batch)?;
        store.mark_started(&instance)?;
        let durable = store.flush().await?;
        view.advance(durable);

        let started = Instant::now();
        let mut tracked = BTreeMap::new();
        for node in store.nodes()? {
            let target = target_for(&node, config.probe.port);
            let health = Health::restored(&node, config.status_mode, started);
            tracked.insert(
                node.name.clone(),
                Tracked {
                    node,
                    target,
                    health,
                },
            );
        }
        let leases: BTreeMap<String, Lease> = store
            .leases()?
            .into_iter()
            .map(|l| (l.name.clone(), l))
            .collect();
        view.publish(tracked.values().map(|t| t.node.clone()), &[]);
        view.publish_leases(leases.values().cloned(), &[]);
        let controller = Controller {
            config,
            store,
            view,
            metrics,
            prober,
            tracked,
            leases,
            dirty_nodes: BTreeSet::new(),
            dirty_leases: BTreeSet::new(),
            rescues: JoinSet::new(),
            evictor: eviction::Evictor::default(),
            hooks: JoinSet::new(),
            interrupted: BTreeMap::new(),
            source_status: SourceStatus::default(),
            broken: None,
            shutdown: CancellationToken::new(),
            started,
            instance,
            passes: Passes::default(),
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

    /// Writes a batch, makes it durable, then publishes it: readers never see
    /// a change a crash could take back.
    async fn commit(&mut self, batch: Batch) -> Result<Written, StoreError> {
        let written = self.store.write(batch)?;
        let durable = match self.store.flush().await {
            Ok(durable) => durable,
            Err(e) => {
                // Written but not durable: the store is ahead of what the
                // controller acknowledged. Stop rather than guess.
                self.broken = Some(e.to_string());
                return Err(e);
            }
        };
        for node in &written.nodes {
            if let Some(t) = self.tracked.get_mut(&node.name) {
                t.node = node.clone();
            }
            // The durable record now carries any quiet heartbeat update.
            self.dirty_nodes.remove(&node.name);
        }
        for event in &written.events {
            if let EventKind::ConditionChanged { condition, to, .. } = &event.kind {
                let labels = crate::metrics::ConditionLabels {
                    condition: condition.clone(),
                    status: (*to).into(),
                };
                self.metrics.transitions.get_or_create(&labels).inc();
            }
        }
        // Deletions too, before readers following the durable seq (watches,
        // the mirror) look: the view agrees with the log they read.
        self.view
            .publish(written.nodes.iter().cloned(), &written.deleted);
        self.view.advance(durable);
        Ok(written)
    }

    /// Writes heartbeat-only changes (node records and leases) in one batch.
    async fn persist_heartbeats(&mut self) -> Result<(), StoreError> {
        if self.dirty_nodes.is_empty() && self.dirty_leases.is_empty() {
            return Ok(());
        }
        let nodes: Vec<Node> = std::mem::take(&mut self.dirty_nodes)
            .iter()
            .filter_map(|n| self.tracked.get(n).map(|t| t.node.clone()))
            .collect();
        let leases: Vec<Lease> = std::mem::take(&mut self.dirty_leases)
            .iter()
            .filter_map(|n| self.leases.get(n).cloned())
            .collect();
        self.store.put_quietly(&nodes)?;
        self.store.put_leases(&leases)?;
        self.store.flush().await?;
        Ok(())
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Reports finished passes to `/readyz`: a probe sweep (unless in push
    /// mode) within three sync periods plus the kubelet timeout, and a
    /// monitor pass within three monitor periods.
    pub fn report_passes(&mut self, ready: &crate::readiness::Checks) {
        let config = &self.config;
        if config.status_mode != StatusMode::Push {
            self.passes.sweep = Some(ready.register_recurring(
                "probe-sweep",
                "probe sweep",
                config.node_sync_period * 3 + config.probe.timeout,
            ));
        }
        self.passes.monitor = Some(ready.register_recurring(
            "monitor-pass",
            "monitor pass",
            config.node_monitor_period * 3,
        ));
    }

    fn sweep_finished(&self) {
        if let Some(sweep) = &self.passes.sweep {
            sweep.done();
        }
        self.metrics
            .last_sweep
            .set(crate::metrics::unix_seconds(Micros::now()));
    }

    fn monitor_pass_finished(&self) {
        if let Some(monitor) = &self.passes.monitor {
            monitor.done();
        }
        self.metrics
            .last_monitor_pass
            .set(crate::metrics::unix_seconds(Micros::now()));
    }

    /// Runs until `shutdown`: registers `specs` (with retries), then probes,
    /// monitors and answers pushes. Stops cleanly.
    pub async fn run(
        mut self,
        specs: Vec<NodeSpec>,
        mut pushes: mpsc::Receiver<Push>,
        shutdown: CancellationToken,
    ) -> Result<(), ControllerError> {
        self.shutdown = shutdown.clone();
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
        let registered = tokio::select! {
            r = self.register_nodes(specs, &shutdown) => r,
            _ = shutdown.cancelled() => Ok(()),
        };
        if let Err(e) = &registered {
            // The ancestor logged this and kept going with the nodes it had.
            tracing::error!("{e}");
        }
        let mut sweep_ticks = tokio::time::interval(self.config.node_sync_period);
        sweep_ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Heartbeat times are not history: written at most this often (and at
        // a clean stop), so 10k nodes renewing every 10s cost a batch a minute.
        let mut heartbeat_writes = tokio::time::interval(HEARTBEAT_WRITE_PERIOD);
        heartbeat_writes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut monitor_ticks = tokio::time::interval(self.config.node_monitor_period);
        monitor_ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sweep: Option<JoinHandle<Vec<sweep::Answer>>> = None;
        let mut listing: Option<cloud_sync::Listing> = None;
        let mut lookups: Option<register::Lookups> = None;
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
        loop {
            if let Some(reason) = self.broken.take() {
                return Err(ControllerError::FlushFailed(reason));
            }
            tokio::select! {
                // Queued pushes first: a heartbeat waiting in the queue must not
                // look like silence to the monitor pass behind it.
                biased;
                _ = shutdown.cancelled() => break,
                Some(push) = pushes.recv() => self.handle_push(push).await,
                _ = sweep_ticks.tick(), if sweep.is_none() => {
                    if lookups.is_none() {
                        lookups = self.start_address_lookups();
                    }
                    sweep = Some(self.start_sweep());
                    if let (Some(source), None) = (&follow, &listing) {
                        listing = Some(cloud_sync::start_listing(source));
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
                            Err(e) => tracing::error!("sweep results could not be stored: {e}"),
                        },
                        Err(e) => {
                            failed = Some(task_failed("probe sweep", e));
                            break;
                        }
                    }
                }
                _ = monitor_ticks.tick() => {
                    self.monitor_pass().await;
                    self.eviction_pass().await;
                    self.monitor_pass_finished();
                }
                _ = heartbeat_writes.tick() => {
                    if let Err(e) = self.persist_heartbeats().await {
                        tracing::error!("heartbeats could not be stored: {e}");
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
        if let Some(sweep) = sweep {
            sweep.abort();
        }
        if let Some(listing) = listing {
            listing.abort();
        }
        if let Some(lookups) = lookups {
            lookups.abort();
        }
        self.rescues.abort_all();
        if let Some(failed) = failed {
            tracing::error!("{failed}");
            self.stop().await?;
            return Err(failed);
        }
        self.stop().await
    }

    /// Stops cleanly: keeps the newest heartbeat times, records the stop, flushes.
    pub async fn stop(mut self) -> Result<(), ControllerError> {
        let now = Micros::now();
        let beaten: Vec<Node> = self
            .tracked
            .values()
            .filter_map(|t| {
                let at = t.health.last_answer?;
                let mut node = t.node.clone();
                let ready = node.condition_mut(READY)?;
                if ready.last_heartbeat >= at {
                    return None;
                }
                ready.last_heartbeat = at;
                Some(node)
            })
            .collect();
        self.store.put_quietly(&beaten)?;
        self.persist_heartbeats().await?;
        let mut batch = Batch::new(now);
        batch.controller_event(EventKind::ControllerStopped {
            instance: self.instance.clone(),
        });
        self.store.write(batch)?;
        self.store.mark_clean_stop(now)?;
        self.store.flush().await?;
        tracing::info!(instance = %self.instance, "controller stopped cleanly");
        Ok(())
    }

    fn update_gauges(&self) {
        self.metrics
            .set_node_counts(self.tracked.values().flat_map(|t| {
                t.node
                    .conditions
                    .iter()
                    .map(|c| (c.kind.as_str(), c.status))
            }));
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

/// Where to probe a node: its first IP address and the kubelet port.
fn target_for(node: &Node, port: u16) -> Option<Arc<ProbeTarget>> {
    let ip = node.probe_address()?.parse::<std::net::IpAddr>().ok()?;
    Some(Arc::new(ProbeTarget::new(std::net::SocketAddr::new(
        ip, port,
    ))))
}
