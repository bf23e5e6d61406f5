//! Following a cloud or inventory source: the ancestor's `SyncCloudNodes`.
//! New machines are registered, machines gone from the source are deleted
//! (their history kept), stopped ones carry the shutdown taint while they
//! are not Ready (as the cloud node lifecycle controller does). A listing
//! that fails changes nothing: it is never read as "every machine is gone".

mod listing;

use std::sync::Arc;

use regex::Regex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Controller;
use crate::model::{Micros, Resources};
use crate::source::cloud::{cloud_node_specs, CloudNode, CloudProvider};
use crate::source::SourceError;
use crate::store::Batch;
use listing::{plan_listing, ListingPlan};

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
                self.listing_failed(&e, now, &source_name).await;
                return;
            }
        };
        self.metrics
            .set_source_failing(crate::metrics::NodeSource::Cloud, false);
        self.source_status.source = source_name.clone();
        self.source_status.last_success = Some(now);
        self.source_status.machines = machines.len();
        self.source_status.consecutive_failures = 0;
        self.metrics.source_machines.set(machines.len() as i64);

        // Machines gone from the source are not waited for.
        let listed: std::collections::HashSet<&str> =
            machines.iter().map(|m| m.spec.name.as_str()).collect();
        self.unregistered
            .retain(|s| s.source != source_name || listed.contains(s.name.as_str()));
        let mut plan = self.plan_listing(&machines, &source_name, now);
        if !plan.register.is_empty() {
            self.register_nodes(plan.register).await;
            // Machines registered just now follow their state at once.
            plan = self.plan_listing(&machines, &source_name, now);
        }
        if plan.writes() {
            self.commit_listing(plan, &source_name, now).await;
        }
        self.view.set_source_status(self.source_status.clone());
    }

    fn plan_listing(&self, machines: &[CloudNode], source_name: &str, now: Micros) -> ListingPlan {
        let registry = self.tracked.values().map(|t| &*t.node);
        plan_listing(machines, registry, source_name, now)
    }

    /// A listing that failed changes nothing; it is counted and shown, and
    /// the first of a run of them is recorded in the history. One that will
    /// fail the same way until someone acts (refused credentials, a
    /// malformed inventory) is an error, not a warning.
    async fn listing_failed(&mut self, e: &SourceError, now: Micros, source_name: &str) {
        let status = &mut self.source_status;
        status.consecutive_failures += 1;
        status.last_error = Some(e.to_string());
        status.last_error_time = Some(now);
        self.metrics.source_failures.inc();
        let failures = status.consecutive_failures;
        if e.is_transient() {
            tracing::warn!(failures, "{e}; the registry is left as it is");
        } else {
            tracing::error!(failures, "{e}; the registry is left as it is");
        }
        self.view.set_source_status(self.source_status.clone());
        self.metrics
            .set_source_failing(crate::metrics::NodeSource::Cloud, true);
        if failures == 1 {
            let event = crate::model::EventKind::SourceFailed {
                source: source_name.to_string(),
                message: e.to_string(),
            };
            self.record_events(vec![(None, event)]).await;
        }
    }

    /// Writes a plan's deletions and updates in one change.
    async fn commit_listing(&mut self, plan: ListingPlan, source_name: &str, now: Micros) {
        let mut batch = Batch::new(now);
        for name in &plan.delete {
            tracing::info!(node = %name, "gone from {source_name}; deleting it (its history stays)");
            batch.delete(name, &format!("no longer listed by {source_name}"));
        }
        for (node, events) in plan.update {
            batch.record(node, events);
        }
        // A deleted node's Lease goes with it.
        let change = super::writer::Change {
            batch,
            deleted_leases: plan.delete.clone(),
            ..Default::default()
        };
        match self.commit_change(change).await {
            Ok(_) => {
                for name in &plan.delete {
                    self.tracked.remove(name);
                    self.leases.remove(name);
                    self.dirty_leases.remove(name);
                }
                self.update_gauges();
            }
            Err(e) => tracing::error!("following {source_name} failed to store: {e}"),
        }
    }
}
