//! Following a cloud or inventory source: the ancestor's `SyncCloudNodes`.
//! New machines are registered, machines gone from the source are deleted
//! (their history kept), stopped ones carry the shutdown taint while they
//! are not Ready (as the cloud node lifecycle controller does). A listing
//! that fails changes nothing: it is never read as "every machine is gone".

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use regex::Regex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Controller;
use crate::model::{ConditionStatus, EventKind, Micros, Resources, Taint, READY};
use crate::source::cloud::{cloud_node_specs, CloudNode, CloudProvider, InstanceState};
use crate::source::SourceError;
use crate::store::Batch;

pub use crate::model::TAINT_SHUTDOWN;

/// Where nodes come from besides the static list.
#[derive(Clone)]
pub struct CloudSource {
    pub provider: Arc<dyn CloudProvider>,
    pub filter: Regex,
    /// Capacity for machines the provider does not describe.
    pub fallback: Resources,
    /// `--sync-node-list`: follow the source every sync period, or register
    /// its first listing only.
    pub sync_node_list: bool,
}

impl std::fmt::Debug for CloudSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudSource")
            .field("provider", &self.provider.name())
            .field("filter", &self.filter.as_str())
            .field("sync_node_list", &self.sync_node_list)
            .finish()
    }
}

pub use crate::model::SourceStatus;

/// A listing in flight: the result and when it started.
pub(super) type Listing = JoinHandle<(Result<Vec<CloudNode>, SourceError>, Instant)>;

/// Starts listing the source's machines in a task of its own.
pub(super) fn start_listing(source: &CloudSource) -> Listing {
    let source = source.clone();
    let started = Instant::now();
    tokio::spawn(async move {
        let listing =
            cloud_node_specs(source.provider.as_ref(), &source.filter, source.fallback).await;
        (listing, started)
    })
}

impl Controller {
    /// Applies a listing: registers, deletes and taints to follow the source.
    pub(super) async fn apply_listing(
        &mut self,
        (listing, started): (Result<Vec<CloudNode>, SourceError>, Instant),
    ) {
        self.follow_listing(listing).await;
        self.metrics
            .source_sync_duration
            .observe(started.elapsed().as_secs_f64());
    }

    async fn follow_listing(&mut self, listing: Result<Vec<CloudNode>, SourceError>) {
        let Some(source) = self.config.cloud.clone() else {
            return;
        };
        let source_name = format!("cloud/{}", source.provider.name());
        let now = Micros::now();
        let machines = match listing {
            Ok(machines) => machines,
            Err(e) => {
                let status = &mut self.source_status;
                status.consecutive_failures += 1;
                status.last_error = Some(e.to_string());
                status.last_error_time = Some(now);
                self.metrics.source_failures.inc();
                tracing::warn!(
                    failures = status.consecutive_failures,
                    "{e}; the registry is left as it is"
                );
                self.view.set_source_status(self.source_status.clone());
                return;
            }
        };
        self.source_status.source = source_name.clone();
        self.source_status.last_success = Some(now);
        self.source_status.machines = machines.len();
        self.source_status.consecutive_failures = 0;
        self.metrics.source_machines.set(machines.len() as i64);

        let listed: HashSet<&str> = machines.iter().map(|m| m.spec.name.as_str()).collect();
        let new: Vec<_> = machines
            .iter()
            .filter(|m| !self.tracked.contains_key(&m.spec.name))
            .map(|m| m.spec.clone())
            .collect();
        if !new.is_empty() {
            let shutdown = self.shutdown.clone();
            if let Err(e) = self.register_nodes(new, &shutdown).await {
                tracing::error!("{e}");
            }
        }

        let mut batch = Batch::new(now);
        let gone: Vec<String> = self
            .tracked
            .values()
            .filter(|t| t.node.source == source_name && !listed.contains(t.node.name.as_str()))
            .map(|t| t.node.name.clone())
            .collect();
        for name in &gone {
            tracing::info!(node = %name, "gone from {source_name}; deleting it (its history stays)");
            batch.delete(name, &format!("no longer listed by {source_name}"));
        }
        let states: BTreeMap<&str, &CloudNode> =
            machines.iter().map(|m| (m.spec.name.as_str(), m)).collect();
        for (name, t) in &self.tracked {
            let Some(machine) = states.get(name.as_str()) else {
                continue;
            };
            let mut node = t.node.clone();
            let mut events = Vec::new();
            let has = node.taints.iter().any(|x| x.key == TAINT_SHUTDOWN);
            // A source that says "stopped" about a node that answers Ready is
            // behind (or wrong): the node's own word wins, as upstream.
            let ready = node
                .condition(READY)
                .is_some_and(|c| c.status == ConditionStatus::True);
            let stopped = machine.state == InstanceState::Stopped && !ready;
            if stopped != has {
                let from = node.taints.clone();
                if stopped {
                    node.taints.push(Taint {
                        key: TAINT_SHUTDOWN.into(),
                        value: String::new(),
                        effect: "NoSchedule".into(),
                        added: Some(now),
                    });
                } else {
                    node.taints.retain(|x| x.key != TAINT_SHUTDOWN);
                }
                events.push(EventKind::TaintsChanged {
                    from,
                    to: node.taints.clone(),
                });
            }
            if !machine.spec.addresses.is_empty() && machine.spec.addresses != node.addresses {
                events.push(EventKind::AddressesChanged {
                    from: node.addresses.clone(),
                    to: machine.spec.addresses.clone(),
                });
                node.addresses = machine.spec.addresses.clone();
            }
            if !events.is_empty() {
                batch.record(node, events);
            }
        }
        if batch.is_empty() {
            self.view.set_source_status(self.source_status.clone());
            return;
        }
        // A deleted node's Lease goes with it.
        let change = super::writer::Change {
            batch,
            deleted_leases: gone.clone(),
            ..Default::default()
        };
        match self.commit_change(change).await {
            Ok(written) => {
                for node in &written.nodes {
                    if let Some(t) = self.tracked.get_mut(&node.name) {
                        t.target = super::target_for(node, self.config.probe.port);
                    }
                }
                for name in &gone {
                    self.tracked.remove(name);
                    self.leases.remove(name);
                    self.dirty_nodes.remove(name);
                    self.dirty_leases.remove(name);
                }
                self.update_gauges();
            }
            Err(e) => tracing::error!("following {source_name} failed to store: {e}"),
        }
        self.view.set_source_status(self.source_status.clone());
    }
}
