//! Registration: the ancestor's `RegisterNodes` and `PopulateAddresses`.

use std::collections::BTreeMap;

use futures_util::stream::{self, StreamExt};
use tokio_util::sync::CancellationToken;

use super::conditions::{never_probed, Health};
use super::{target_for, Controller, ControllerError, Tracked};
use crate::backoff::Backoff;
use crate::model::{EventKind, Micros, Node, NodeSpec};
use crate::source::resolve;
use crate::store::Batch;

/// Host name lookups in flight at once.
const LOOKUP_CONCURRENCY: usize = 32;

impl Controller {
    /// Registers every spec not yet in the registry, retrying failed writes
    /// up to `--register-retry-count` passes one sync period apart. Already
    /// registered nodes count as registered, so this is idempotent across
    /// restarts.
    pub async fn register_nodes(
        &mut self,
        specs: Vec<NodeSpec>,
        shutdown: &CancellationToken,
    ) -> Result<(), ControllerError> {
        let mut pending: Vec<NodeSpec> = specs
            .into_iter()
            .filter(|s| !self.tracked.contains_key(&s.name))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let lookups = lookup_all(&pending, self.config.lookup_timeout).await;
        let tries = self.config.register_retry_count.max(1);
        // One sync period between passes, as the ancestor's RegisterNodes.
        let mut retries = Backoff::constant(self.config.node_sync_period).retries();
        let mut last_error = String::new();
        let total = pending.len();
        for attempt in 1..=tries {
            // Chunk by chunk: a chunk written is registered, whatever
            // becomes of the next one; only the rest is tried again.
            let mut failed = None;
            while !pending.is_empty() {
                let chunk = pending.len().min(super::WRITE_CHUNK);
                match self.register_batch(&pending[..chunk], &lookups).await {
                    Ok(()) => {
                        pending.drain(..chunk);
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let Some(e) = failed else {
                tracing::info!(nodes = total, "registered");
                return Ok(());
            };
            last_error = e.to_string();
            tracing::warn!(
                attempt,
                tries,
                "registering {} nodes failed: {e}",
                pending.len()
            );
            if attempt < tries {
                let wait = retries.next_delay();
                if shutdown
                    .run_until_cancelled(tokio::time::sleep(wait))
                    .await
                    .is_none()
                {
                    break;
                }
            }
        }
        pending.sort_by(|a, b| a.name.cmp(&b.name));
        let missing: Vec<String> = pending.iter().map(|s| s.name.clone()).collect();
        let error = ControllerError::Registration {
            missing: missing.clone(),
            tries,
            last_error,
        };
        // Try to leave a trace in the history; the store may be what failed.
        let mut batch = Batch::new(Micros::now());
        for name in &missing {
            batch.node_event(
                name,
                EventKind::RegistrationFailed {
                    message: error.to_string(),
                },
            );
        }
        let _ = self.commit(batch).await;
        Err(error)
    }

    async fn register_batch(
        &mut self,
        specs: &[NodeSpec],
        lookups: &BTreeMap<String, resolve::Lookup>,
    ) -> Result<(), ControllerError> {
        let now = Micros::now();
        let mut batch = Batch::new(now);
        for spec in specs {
            let mut node = new_node(spec, now);
            let mut events = Vec::new();
            match lookups.get(&spec.name) {
                Some(Ok(ip)) => node.addresses = resolve::with_resolved(&node.addresses, *ip),
                Some(Err(e)) => {
                    tracing::warn!(node = %spec.name, "{e}; registering it without an address and retrying every sync period");
                    events.push(EventKind::AddressLookupFailed {
                        message: e.to_string(),
                    });
                }
                None => {}
            }
            events.insert(
                0,
                EventKind::Registered {
                    node: Box::new(node.clone()),
                },
            );
            batch.record(node, events);
        }
        let written = self.commit(batch).await?;
        let started = self.clock.now();
        for node in written.nodes {
            let target = target_for(&node, self.config.probe.port);
            let node = self.shared_with_view(&node);
            self.tracked.insert(
                node.name.clone(),
                Tracked {
                    node,
                    target,
                    health: Health::watching_from(started),
                    beats_unwritten: false,
                },
            );
        }
        self.update_gauges();
        Ok(())
    }

    /// Starts looking up again every node that has no IP address yet.
    pub(super) fn start_address_lookups(&self) -> Option<Lookups> {
        let waiting: Vec<NodeSpec> = self
            .tracked
            .values()
            .filter(|t| t.target.is_none())
            .map(|t| NodeSpec {
                name: t.node.name.clone(),
                source: t.node.source.clone(),
                labels: BTreeMap::new(),
                external_id: t.node.external_id.clone(),
                provider_id: t.node.provider_id.clone(),
                capacity: t.node.capacity,
                addresses: t.node.addresses.clone(),
            })
            .collect();
        if waiting.is_empty() {
            return None;
        }
        let timeout = self.config.lookup_timeout;
        // In a task of its own: a slow resolver must not hold up heartbeats.
        Some(tokio::spawn(
            async move { lookup_all(&waiting, timeout).await },
        ))
    }

    /// Stores the addresses the lookups found; a found node is probed from now on.
    pub(super) async fn apply_address_lookups(
        &mut self,
        lookups: BTreeMap<String, resolve::Lookup>,
    ) {
        let mut batch = Batch::new(Micros::now());
        for (name, result) in lookups {
            let Ok(ip) = result else { continue };
            // Gone, or given an address some other way while the lookup was out.
            let Some(tracked) = self.tracked.get(&name).filter(|t| t.target.is_none()) else {
                continue;
            };
            let mut node = tracked.node.clone();
            let from = node.addresses.clone();
            node.addresses = resolve::with_resolved(&from, ip);
            let to = node.addresses.clone();
            batch.record(node, [EventKind::AddressesChanged { from, to }]);
        }
        if batch.is_empty() {
            return;
        }
        let written = match self.commit(batch).await {
            Ok(written) => written,
            Err(e) => return tracing::error!("storing resolved addresses failed: {e}"),
        };
        for node in written.nodes {
            tracing::info!(node = %node.name, address = node.probe_address(), "address resolved");
            if let Some(t) = self.tracked.get_mut(&node.name) {
                t.target = target_for(&node, self.config.probe.port);
            }
        }
    }
}

/// A new registry record for a spec, Ready=Unknown until first probed.
pub(super) fn new_node(spec: &NodeSpec, now: Micros) -> Node {
    Node {
        name: spec.name.clone(),
        uid: uuid::Uuid::new_v4().to_string(),
        created: now,
        resource_version: 0,
        source: spec.source.clone(),
        labels: spec.labels.clone(),
        annotations: Default::default(),
        external_id: spec.external_id.clone(),
        provider_id: spec.provider_id.clone(),
        capacity: spec.capacity,
        unschedulable: false,
        taints: Vec::new(),
        addresses: spec.addresses.clone(),
        conditions: vec![never_probed(now)],
        node_info: Default::default(),
    }
}

/// Lookups in flight, by node name.
pub(super) type Lookups = tokio::task::JoinHandle<BTreeMap<String, resolve::Lookup>>;

/// Looks up every spec that needs it, a bounded number at a time.
async fn lookup_all(
    specs: &[NodeSpec],
    timeout: std::time::Duration,
) -> BTreeMap<String, resolve::Lookup> {
    let jobs: Vec<(String, String)> = specs
        .iter()
        .filter_map(|s| {
            Some((
                s.name.clone(),
                resolve::host_to_resolve(&s.name, &s.addresses)?.to_string(),
            ))
        })
        .collect();
    stream::iter(jobs)
        .map(|(name, host)| async move { (name, resolve::resolve_first(&host, timeout).await) })
        .buffer_unordered(LOOKUP_CONCURRENCY)
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::controller::{ControllerConfig, FreeSpace, StatusMode};
    use crate::metrics::Metrics;
    use crate::source::static_list::static_spec;
    use crate::store::{Store, StoreOptions};
    use crate::view::View;

    #[tokio::test(start_paused = true)]
    async fn failed_passes_are_tried_again_one_sync_period_apart() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap());
        let space = Arc::new(AtomicU64::new(u64::MAX));
        let config = ControllerConfig {
            status_mode: StatusMode::Push,
            register_retry_count: 3,
            node_sync_period: Duration::from_secs(10),
            free_space: FreeSpace::fake({
                let space = space.clone();
                move || space.load(Ordering::Relaxed)
            }),
            ..ControllerConfig::default()
        };
        let view = Arc::new(View::default());
        let mut c = Controller::start(config, store, view, Arc::new(Metrics::new()))
            .await
            .unwrap();
        // A full disk: every write is refused.
        space.store(0, Ordering::Relaxed);
        // An IP name, so nothing is looked up.
        let spec = static_spec(
            "127.0.0.1".into(),
            None,
            Default::default(),
            Default::default(),
        );
        let start = tokio::time::Instant::now();
        let e = c
            .register_nodes(vec![spec], &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ControllerError::Registration { tries: 3, missing, .. } if missing == &["127.0.0.1"]),
            "{e}"
        );
        // Three passes, two waits of one sync period between them.
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(20));
    }
}
