//! The node controller: registers nodes, probes them every sync period,
//! decides their Ready condition, and writes every change with its event.

pub mod conditions;
mod register;
mod sweep;
pub mod view;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::model::{EventKind, Micros, Node, NodeSpec, READY};
use crate::probe::{ProbeConfig, ProbeConfigError, ProbeTarget, Prober};
use crate::store::{Batch, Store, StoreError};
use conditions::Health;
pub use sweep::SweepReport;
use view::View;

/// How the controller behaves; validated before anything starts.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub node_sync_period: Duration,
    pub node_monitor_grace_period: Duration,
    pub register_retry_count: u32,
    pub probe: ProbeConfig,
    pub probe_concurrency: usize,
    /// How long a host name lookup may take.
    pub lookup_timeout: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            node_sync_period: Duration::from_secs(10),
            node_monitor_grace_period: Duration::from_secs(40),
            register_retry_count: 10,
            probe: ProbeConfig::default(),
            probe_concurrency: 1024,
            lookup_timeout: Duration::from_secs(5),
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
    /// The ancestor's `ErrRegistration`.
    #[error("unable to register all nodes: {} still unregistered after {tries} tries ({}); last error: {last_error}", missing.len(), missing.join(", "))]
    Registration {
        missing: Vec<String>,
        tries: u32,
        last_error: String,
    },
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
    prober: Prober,
    tracked: BTreeMap<String, Tracked>,
    instance: String,
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
        let prober = Prober::new(&config.probe)?;
        let instance = uuid::Uuid::new_v4().to_string();
        let now = Micros::now();
        let clean_stop = store.last_clean_stop()?;
        let last_event = store.last_event()?;
        // The gap ends now; it starts at the clean stop, or at the last
        // thing the previous controller is known to have written.
        let downtime_seconds = clean_stop
            .or(last_event.as_ref().map(|e| e.time))
            .map(|since| now.since(since).as_secs_f64());
        let mut batch = Batch::new(now);
        batch.controller_event(EventKind::ControllerStarted {
            instance: instance.clone(),
            downtime_seconds,
            previous_stop_clean: clean_stop.is_some(),
        });
        store.write(batch)?;
        store.mark_started(&instance)?;
        store.flush().await?;

        let started = Instant::now();
        let mut tracked = BTreeMap::new();
        for node in store.nodes()? {
            let target = target_for(&node, config.probe.port);
            tracked.insert(
                node.name.clone(),
                Tracked {
                    node,
                    target,
                    health: Health::watching_from(started),
                },
            );
        }
        view.publish(tracked.values().map(|t| t.node.clone()), &[]);
        let controller = Controller {
            config,
            store,
            view,
            metrics,
            prober,
            tracked,
            instance,
        };
        controller.update_gauges();
        tracing::info!(
            instance = %controller.instance,
            nodes = controller.tracked.len(),
            downtime = ?downtime_seconds.map(Duration::from_secs_f64),
            "controller started; every node's grace period starts now"
        );
        Ok(controller)
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Names of the registered nodes.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.tracked.keys().map(String::as_str)
    }

    /// Runs until `shutdown`: registers `specs` (with retries), then probes
    /// every sync period. Stops cleanly.
    pub async fn run(
        mut self,
        specs: Vec<NodeSpec>,
        shutdown: CancellationToken,
    ) -> Result<(), ControllerError> {
        let registered = tokio::select! {
            r = self.register_nodes(specs, &shutdown) => r,
            _ = shutdown.cancelled() => Ok(()),
        };
        if let Err(e) = &registered {
            // The ancestor logged this and kept going with the nodes it had.
            tracing::error!("{e}");
        }
        let mut ticks = tokio::time::interval(self.config.node_sync_period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticks.tick() => {}
            }
            self.retry_address_lookups().await;
            match self.probe_sweep().await {
                Ok(report) => tracing::debug!(?report, "sweep done"),
                // Nothing was acknowledged; the next sweep decides again.
                Err(e) => tracing::error!("sweep results could not be stored: {e}"),
            }
        }
        self.stop().await
    }

    /// Stops cleanly: keeps the newest heartbeat times, records the stop, flushes.
    pub async fn stop(self) -> Result<(), ControllerError> {
        let now = Micros::now();
        let beaten: Vec<Node> = self
            .tracked
            .values()
            .filter_map(|t| {
                let at = t.health.last_answer?;
                let mut node = t.node.clone();
                node.condition_mut(READY)?.last_heartbeat = at;
                Some(node)
            })
            .collect();
        self.store.put_quietly(&beaten)?;
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

/// Where to probe a node: its first IP address and the kubelet port.
fn target_for(node: &Node, port: u16) -> Option<Arc<ProbeTarget>> {
    let ip = node.probe_address()?.parse::<std::net::IpAddr>().ok()?;
    Some(Arc::new(ProbeTarget::new(std::net::SocketAddr::new(
        ip, port,
    ))))
}
