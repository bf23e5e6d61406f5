//! Prometheus metrics, on a registry of our own (no globals). No per-node
//! labels: a 10k-node site must not mean 10k series.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::model::ConditionStatus;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl From<ConditionStatus> for Status {
    fn from(s: ConditionStatus) -> Self {
        match s {
            ConditionStatus::True => Status::True,
            ConditionStatus::False => Status::False,
            ConditionStatus::Unknown => Status::Unknown,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub condition: String,
    pub status: Status,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ProbeResult {
    Healthy,
    Unhealthy,
    NoAnswer,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub result: ProbeResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Via {
    Status,
    Lease,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeartbeatLabels {
    pub via: Via,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuantileLabels {
    pub quantile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MirrorRequestLabels {
    pub verb: String,
    /// The HTTP status, or `error` when no answer came.
    pub code: String,
}

/// Every metric nodekeeper exports.
pub struct Metrics {
    registry: Registry,
    pub nodes: Family<ConditionLabels, Gauge>,
    pub transitions: Family<ConditionLabels, Counter>,
    pub probes: Family<ProbeLabels, Counter>,
    pub probe_duration: Histogram,
    pub sweep_duration: Histogram,
    pub store_size: Gauge,
    pub store_events: Gauge,
    pub registered: Gauge,
    pub heartbeats: Family<HeartbeatLabels, Counter>,
    pub heartbeat_age: Family<QuantileLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub pushing: Gauge,
    pub evictions: Counter,
    pub source_failures: Counter,
    pub source_machines: Gauge,
    pub source_sync_duration: Histogram,
    pub mirror_backlog: Gauge,
    pub mirror_oldest_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub mirror_requests: Family<MirrorRequestLabels, Counter>,
    pub mirror_request_duration: Histogram,
    pub mirror_retries: Counter,
    pub mirror_lease_renewals: Counter,
    pub mirror_leader: Gauge,
    pub mirror_throttled: Counter,
    pub mirror_nodes_missing_upstream: Gauge,
    pub mirror_nodes_differ_upstream: Gauge,
    pub mirror_budget_qps: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub mirror_lease_qps_needed: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub mirror_budget_sufficient: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("nodekeeper");
        let nodes = Family::<ConditionLabels, Gauge>::default();
        registry.register(
            "nodes",
            "Registered nodes by condition status",
            nodes.clone(),
        );
        let transitions = Family::<ConditionLabels, Counter>::default();
        registry.register(
            "condition_transitions",
            "Condition changes, by the status changed to",
            transitions.clone(),
        );
        let probes = Family::<ProbeLabels, Counter>::default();
        registry.register("probes", "Kubelet health probes by result", probes.clone());
        // 100µs … ~6.5s: loopback answers to timeouts.
        let probe_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 17),
        );
        registry.register(
            "probe_duration_seconds",
            "Kubelet health probe latency",
            probe_duration.clone(),
        );
        let sweep_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 16),
        );
        registry.register(
            "sweep_duration_seconds",
            "Time to probe every node once and store the results",
            sweep_duration.clone(),
        );
        let store_size = Gauge::default();
        registry.register(
            "store_size_bytes",
            "Size of the store on disk",
            store_size.clone(),
        );
        let store_events = Gauge::default();
        registry.register(
            "store_last_seq",
            "Sequence number of the newest durable event",
            store_events.clone(),
        );
        let registered = Gauge::default();
        registry.register(
            "registered_nodes",
            "Nodes in the registry",
            registered.clone(),
        );
        let heartbeats = Family::<HeartbeatLabels, Counter>::default();
        registry.register(
            "heartbeats",
            "Heartbeats accepted, by how they came",
            heartbeats.clone(),
        );
        let heartbeat_age =
            Family::<QuantileLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "heartbeat_age_seconds",
            "Time since the last heartbeat of pushing nodes, over all of them (0.5, 0.99 and 1 quantiles)",
            heartbeat_age.clone(),
        );
        let pushing = Gauge::default();
        registry.register(
            "pushing_nodes",
            "Nodes whose health comes from their own heartbeats",
            pushing.clone(),
        );
        let evictions = Counter::default();
        registry.register(
            "evictions",
            "Nodes evicted (not Ready past --pod-eviction-timeout)",
            evictions.clone(),
        );
        let source_failures = Counter::default();
        registry.register(
            "source_list_failures",
            "Failed listings of the cloud or inventory source",
            source_failures.clone(),
        );
        let source_machines = Gauge::default();
        registry.register(
            "source_machines",
            "Machines in the last good listing of the source",
            source_machines.clone(),
        );
        let source_sync_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 16),
        );
        registry.register(
            "source_sync_duration_seconds",
            "Time to list the cloud or inventory source and bring the registry in line",
            source_sync_duration.clone(),
        );
        let mirror_backlog = Gauge::default();
        registry.register(
            "mirror_backlog",
            "Outbox entries (nodes and pod evictions) the API server has not been told yet",
            mirror_backlog.clone(),
        );
        let mirror_oldest_age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "mirror_oldest_entry_age_seconds",
            "Age of the oldest outbox entry (0 when the outbox is empty)",
            mirror_oldest_age.clone(),
        );
        let mirror_requests = Family::<MirrorRequestLabels, Counter>::default();
        registry.register(
            "mirror_requests",
            "Requests to the API server, by verb and answer",
            mirror_requests.clone(),
        );
        let mirror_request_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.0005, 2.0, 16),
        );
        registry.register(
            "mirror_request_duration_seconds",
            "API server request latency",
            mirror_request_duration.clone(),
        );
        let mirror_retries = Counter::default();
        registry.register(
            "mirror_retries",
            "Outbox entries and Lease renewals that failed and were scheduled again",
            mirror_retries.clone(),
        );
        let mirror_lease_renewals = Counter::default();
        registry.register(
            "mirror_lease_renewals",
            "Node Leases renewed in kube-node-lease",
            mirror_lease_renewals.clone(),
        );
        let mirror_leader = Gauge::default();
        registry.register(
            "mirror_leader",
            "1 while this controller holds the leader Lease and writes to the API server",
            mirror_leader.clone(),
        );
        let mirror_throttled = Counter::default();
        registry.register(
            "mirror_throttled",
            "API requests answered 429 Too Many Requests (API Priority and Fairness); each waits its Retry-After",
            mirror_throttled.clone(),
        );
        let mirror_nodes_missing_upstream = Gauge::default();
        registry.register(
            "mirror_nodes_missing_upstream",
            "Registry nodes the API server lacks, as last listed or watched",
            mirror_nodes_missing_upstream.clone(),
        );
        let mirror_nodes_differ_upstream = Gauge::default();
        registry.register(
            "mirror_nodes_differ_upstream",
            "Registry nodes whose Node on the API server differs from the registry, as last listed or watched",
            mirror_nodes_differ_upstream.clone(),
        );
        let mirror_budget_qps = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "mirror_budget_qps",
            "The mirror's request budget in requests per second (--kube-api-qps, or sized from the Ready nodes)",
            mirror_budget_qps.clone(),
        );
        let mirror_lease_qps_needed = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "mirror_lease_qps_needed",
            "Requests per second that renewing every Ready node's Lease needs",
            mirror_lease_qps_needed.clone(),
        );
        let mirror_budget_sufficient = Gauge::default();
        registry.register(
            "mirror_budget_sufficient",
            "1 when the request budget renews every Ready node's Lease in time with a fifth to spare, else 0",
            mirror_budget_sufficient.clone(),
        );
        Metrics {
            mirror_throttled,
            mirror_nodes_missing_upstream,
            mirror_nodes_differ_upstream,
            mirror_budget_qps,
            mirror_lease_qps_needed,
            mirror_budget_sufficient,
            mirror_backlog,
            mirror_oldest_age,
            mirror_requests,
            mirror_request_duration,
            mirror_retries,
            mirror_lease_renewals,
            mirror_leader,
            source_sync_duration,
            source_failures,
            source_machines,
            evictions,
            heartbeats,
            heartbeat_age,
            pushing,
            registry,
            nodes,
            transitions,
            probes,
            probe_duration,
            sweep_duration,
            store_size,
            store_events,
            registered,
        }
    }

    /// Sets the heartbeat age quantiles from the ages of every pushing node.
    pub fn set_heartbeat_ages(&self, mut ages: Vec<f64>) {
        self.pushing.set(ages.len() as i64);
        ages.sort_by(f64::total_cmp);
        for (label, q) in [("0.5", 0.5), ("0.99", 0.99), ("1", 1.0)] {
            let value = if ages.is_empty() {
                0.0
            } else {
                ages[((ages.len() - 1) as f64 * q).round() as usize]
            };
            self.heartbeat_age
                .get_or_create(&QuantileLabels {
                    quantile: label.into(),
                })
                .set(value);
        }
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Sets the node gauges from the statuses of every node's condition.
    pub fn set_node_counts<'a>(
        &self,
        conditions: impl Iterator<Item = (&'a str, ConditionStatus)>,
    ) {
        // Counted by borrowed name: no allocation per node on every sweep.
        let mut counts: std::collections::HashMap<(&str, Status), i64> =
            std::collections::HashMap::new();
        for status in [Status::True, Status::False, Status::Unknown] {
            counts.insert((crate::model::READY, status), 0);
        }
        for (condition, status) in conditions {
            *counts.entry((condition, status.into())).or_default() += 1;
        }
        for ((condition, status), n) in counts {
            let labels = ConditionLabels {
                condition: condition.to_string(),
                status,
            };
            self.nodes.get_or_create(&labels).set(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_the_documented_series() {
        let m = Metrics::new();
        m.set_node_counts(
            [
                ("Ready", ConditionStatus::True),
                ("Ready", ConditionStatus::True),
            ]
            .into_iter(),
        );
        m.probe_duration.observe(0.002);
        m.probes
            .get_or_create(&ProbeLabels {
                result: ProbeResult::NoAnswer,
            })
            .inc();
        let text = m.encode();
        assert!(
            text.contains("nodekeeper_nodes{condition=\"Ready\",status=\"True\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("nodekeeper_nodes{condition=\"Ready\",status=\"Unknown\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("nodekeeper_probe_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("nodekeeper_probes_total{result=\"NoAnswer\"} 1"),
            "{text}"
        );
        assert!(text.contains("nodekeeper_store_size_bytes"), "{text}");
    }
}
