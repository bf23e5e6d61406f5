//! Registration: the ancestor's `RegisterNodes` and `PopulateAddresses`.

use std::collections::BTreeMap;

use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;

use super::conditions::{never_probed, Health};
use super::{Controller, ControllerError, Tracked};
use crate::model::{EventKind, Micros, Node, NodeSpec};
use crate::source::resolve;
use crate::store::Batch;

/// Host name lookups in flight at once.
const LOOKUP_CONCURRENCY: usize = 32;

impl Controller {
    /// Registers every spec not yet in the registry. A node whose earlier
    /// try failed waits for its turn (see [`Unregistered`]); one that fails
    /// now is tried again later, for as long as it takes. Already registered
    /// nodes count as registered, so this is idempotent across restarts.
    pub(super) async fn register_nodes(&mut self, specs: Vec<NodeSpec>) {
        let now = Instant::now();
        let pending: Vec<NodeSpec> = specs
            .into_iter()
            .filter(|s| !self.tracked.contains_key(&s.name))
            .filter(|s| !self.unregistered.holds_back(s, now))
            .collect();
        self.try_registering(pending).await;
    }

    /// Tries again the nodes whose turn has come.
    pub(super) async fn retry_registrations(&mut self) {
        // A refusal is settled (and the writer resumed) before the next try.
        self.settle_reported();
        let due = self.unregistered.due(Instant::now());
        self.try_registering(due).await;
    }

    /// One try at registering `pending`, chunk by chunk: a chunk written is
    /// registered, whatever becomes of the next one; the rest wait.
    async fn try_registering(&mut self, mut pending: Vec<NodeSpec>) {
        // Registered meanwhile (a kubelet registering itself).
        self.unregistered.registered(
            pending
                .iter()
                .filter(|s| self.tracked.contains_key(&s.name))
                .map(|s| s.name.as_str()),
        );
        pending.retain(|s| !self.tracked.contains_key(&s.name));
        if pending.is_empty() {
            return self.report_unregistered();
        }
        let lookups = lookup_all(&pending, self.config.lookup_timeout).await;
        let total = pending.len();
        let mut failed = None;
        while !pending.is_empty() {
            let chunk = pending.len().min(super::WRITE_CHUNK);
            match self.register_batch(&pending[..chunk], &lookups).await {
                Ok(()) => {
                    let done: Vec<NodeSpec> = pending.drain(..chunk).collect();
                    self.unregistered
                        .registered(done.iter().map(|s| s.name.as_str()));
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            None => tracing::info!(nodes = total, "registered"),
            Some(e) => self.registration_failed(&pending, &e.to_string()).await,
        }
        self.report_unregistered();
    }

    /// A try at registering `specs` failed: they wait for the next one.
    /// Those that have now failed `--register-retry-count` tries are the
    /// ancestor's `ErrRegistration`: logged, and recorded in their history
    /// (once the store takes writes, if it is what fails).
    async fn registration_failed(&mut self, specs: &[NodeSpec], error: &str) {
        tracing::warn!(
            "registering {} nodes failed: {error}; they are tried again until registered",
            specs.len()
        );
        let mut missing = self
            .unregistered
            .failed(specs, error, Instant::now(), Micros::now());
        if missing.is_empty() {
            return;
        }
        missing.sort();
        let error = ControllerError::Registration {
            missing: missing.clone(),
            tries: self.config.register_retry_count.max(1),
            last_error: error.to_string(),
        };
        tracing::error!("{error}; registration goes on, less often, until they are registered");
        let message = error.to_string();
        let events = missing
            .into_iter()
            .map(|name| {
                let kind = EventKind::RegistrationFailed {
                    message: message.clone(),
                };
                (Some(name), kind)
            })
            .collect();
        self.record_events(events).await;
    }

    /// `/readyz` and the gauge follow the nodes waiting to be registered.
    pub(super) fn report_unregistered(&self) {
        self.metrics
            .unregistered
            .set(self.unregistered.len() as i64);
        if let Some(check) = &self.readiness.registration {
            match self.unregistered.failure() {
                Some(reason) => check.fail(reason),
                None => check.clear(),
            }
        }
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
            let node = self.shared_with_view(&node);
            let health = Health::watching_from(started);
            let tracked = Tracked::new(node, health, self.config.probe.port);
            self.tracked.insert(tracked.node.name.clone(), tracked);
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
        reported: Default::default(),
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
    async fn a_node_is_tried_until_registered_however_many_tries_it_takes() {
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
        let metrics = Arc::new(Metrics::new());
        let mut c = Controller::start(config, store.clone(), view, metrics.clone())
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
        c.register_nodes(vec![spec.clone()]).await;
        assert_eq!(metrics.unregistered.get(), 1);
        // Listed again before its turn (a sync period later): not tried before it.
        c.register_nodes(vec![spec]).await;
        let start = Instant::now();
        // Well past --register-retry-count: three tries one sync period apart
        // (ErrRegistration after the third), then one, two, four… periods apart.
        let mut tries = Vec::new();
        for _ in 0..6 {
            let next = c.unregistered.next_try().expect("it waits");
            tokio::time::sleep_until(next).await;
            tries.push((Instant::now() - start).as_secs());
            c.retry_registrations().await;
        }
        assert_eq!(tries, [10, 20, 30, 50, 90, 150]);
        assert!(!c.tracked.contains_key("127.0.0.1"));
        assert_eq!(metrics.unregistered.get(), 1);

        // Room again: its next try registers it.
        space.store(u64::MAX, Ordering::Relaxed);
        c.unregistered.try_all_now(Instant::now());
        c.retry_registrations().await;
        assert!(c.tracked.contains_key("127.0.0.1"));
        assert!(c.unregistered.is_empty());
        assert_eq!(metrics.unregistered.get(), 0);
        // ErrRegistration after three tries is in its history, recorded once the store took writes.
        c.record_unrecorded().await;
        let kinds: Vec<String> = store
            .history(&crate::store::HistoryQuery {
                node: Some("127.0.0.1".into()),
                ..Default::default()
            })
            .unwrap()
            .into_iter()
            .map(|e| match e.kind {
                EventKind::RegistrationFailed { message } => {
                    assert!(message.contains("after 3 tries"), "{message}");
                    "RegistrationFailed".to_string()
                }
                other => other.name().to_string(),
            })
            .collect();
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert!(kinds.contains(&"Registered".to_string()), "{kinds:?}");
        assert!(
            kinds.contains(&"RegistrationFailed".to_string()),
            "{kinds:?}"
        );
    }
}
